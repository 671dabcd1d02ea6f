/* SPDX-License-Identifier: MIT */
/*
 * handle.h - open-file handles of virtual files and directories.
 *
 * The kernel may send RELEASE while a READ of the same open file is still
 * being served by another worker (the reader got a fatal signal and stopped
 * waiting).  So a handle is not freed at RELEASE but retired, and freed once
 * it has been retired for HANDLE_GRACE_MS: no worker keeps a request that
 * long (waits are parked without the handle, see park.h).  Handles still open
 * when the session ends (a lazy unmount with open files) are freed at exit.
 *
 * A leaf module: it knows nothing of nodes, jobs or sandboxes.  Thread-safe
 * (one internal mutex, never held while calling out except to clean()).
 */
#ifndef SBX_HANDLE_H
#define SBX_HANDLE_H

#include <stddef.h>

/* A zeroed payload of size bytes; clean() releases what the payload owns
 * (called once, when the handle is finally freed).  NULL on ENOMEM. */
void *handle_alloc(size_t size, void (*clean)(void *p));
/* At RELEASE: freed HANDLE_GRACE_MS later. */
void handle_retire(void *p);
/* A handle never given to the kernel: freed now. */
void handle_discard(void *p);
/* At exit, after the session has ended: frees every handle. */
void handle_free_all(void);

#endif
