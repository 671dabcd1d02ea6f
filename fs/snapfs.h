/* SPDX-License-Identifier: MIT */
/*
 * snapfs.h - snapshots/ of a sandbox directory (DESIGN §3): mkdir takes a
 * snapshot, rmdir removes one, and each is a read-only directory with an
 * `info` file and its workspace/, uploads/ and outputs/ (see snapfs.c).
 */
#ifndef SBX_SNAPFS_H
#define SBX_SNAPFS_H

#include "node.h"

void snapfs_init(void);
/* The entry of v's snapshots/ directory (counted as a lookup): 0 or ENOMEM. */
int snapfs_lookup_root(struct view *v, struct fuse_entry_param *e);

#endif
