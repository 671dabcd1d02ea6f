/* SPDX-License-Identifier: MIT */
/*
 * netfs.h - the FUSE glue of a sandbox's `events` and `network` files
 * (DESIGN §7) on top of net/net.h.  vtree.c serves every control file of a
 * sandbox (N_CTL) and hands these two here.
 *
 * events (r): each open consumes at most one event.  A read at the start
 * claims the oldest unsurfaced event (superseding the other unsurfaced
 * ones) and returns it as one JSON line; the rest of the line comes with
 * the next reads, then end of file, so `cat events` prints one event and
 * ends.  With nothing pending the read waits, parked (no FUSE worker held,
 * interruptible), or fails EAGAIN with O_NONBLOCK; poll(2) reports POLLIN
 * once an event is pending.  A sandbox that never records events (not
 * allowlist + approval: prompt, or a provider that enforces egress itself)
 * reads as an empty file.  rmdir of the sandbox answers waiting readers
 * ENOENT.
 *
 * network (rw): a read shows the JSON snapshot taken at open; each write(2)
 * is one command (net_command): a bad one fails that write with EINVAL,
 * ENOENT or EEXIST and changes nothing.
 */
#ifndef SBX_NETFS_H
#define SBX_NETFS_H

#include "node.h"

/* Is control file n one of ours? */
bool netfs_owns(const struct node *n);
mode_t netfs_mode(const struct node *n);

void netfs_open(fuse_req_t req, struct node *n, struct fuse_file_info *fi);
void netfs_read(fuse_req_t req, struct node *n, size_t size, off_t off, struct fuse_file_info *fi);
void netfs_write(fuse_req_t req, struct node *n, struct fuse_bufvec *in, struct fuse_file_info *fi);
void netfs_poll(fuse_req_t req, struct node *n, struct fuse_file_info *fi, struct fuse_pollhandle *ph);
void netfs_release(fuse_req_t req, struct node *n, struct fuse_file_info *fi);
/* The sandbox directory of s went away (rmdir): wake its waiting readers. */
void netfs_released(struct sbx *s);

#endif
