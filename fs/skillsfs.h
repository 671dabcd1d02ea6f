/* SPDX-License-Identifier: MIT */
/*
 * skillsfs.h - fsync(2) under a sandbox's skills/ (see skillsfs.c).
 */
#ifndef SBX_SKILLSFS_H
#define SBX_SKILLSFS_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <stdbool.h>

struct sbx;

/* Answer an fsync of a file (wrote: through a writable handle) or a
 * directory under s's skills/ once the sandbox has what is written, or
 * with the sync's error.  Replies exactly once; never blocks (parks). */
void skillsfs_fsync(fuse_req_t req, struct sbx *s, bool wrote);

#endif
