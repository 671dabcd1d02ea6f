/* SPDX-License-Identifier: MIT */
/*
 * fspark.h - the FUSE side of runtime/park.h: libfuse's request and poll
 * handle behind the park's opaque pointers.
 *
 * fs/ parks fuse_req_t requests (a fuse_req_t is a pointer: it goes in as
 * the park's void *req; a park_try_fn casts it back) and registers poll
 * handles; net/ and skills/ only own queues and wake them.
 */
#ifndef SBX_FSPARK_H
#define SBX_FSPARK_H

#include "../runtime/park.h"

/* park_init with libfuse's operations.  0 or an errno. */
int fspark_init(void);

#endif
