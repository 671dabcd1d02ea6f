/* SPDX-License-Identifier: MIT */
/*
 * vdir.h - listings of virtual directories (the root, a user, a sandbox,
 * jobs/, a job): a snapshot of names taken at opendir, served by offset.
 */
#ifndef SBX_VDIR_H
#define SBX_VDIR_H

#include "node.h"

struct vdir;

/* A new listing holding "." and ".."; NULL on ENOMEM. */
struct vdir *vdir_new(void);
void vdir_add(struct vdir *d, const char *name, unsigned char type);
/* Give the listing to the kernel as the open directory (or answer ENOMEM
 * when an add failed), consuming d. */
void vdir_reply_open(fuse_req_t req, struct vdir *d, struct fuse_file_info *fi);

void vdir_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void vdir_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void vdir_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

#endif
