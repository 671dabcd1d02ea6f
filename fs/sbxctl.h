/* SPDX-License-Identifier: MIT */
/*
 * sbxctl.h - the sandbox's own control file, /sbx/<user>/<thread>/ctl
 * (N_CTL, which == CTL_CTL): write-only commands (see sbxctl.c).
 */
#ifndef SBX_SBXCTL_H
#define SBX_SBXCTL_H

#include "node.h"

bool sbxctl_is(const struct node *n);
void sbxctl_open(fuse_req_t req, struct node *n, struct fuse_file_info *fi);
void sbxctl_write(fuse_req_t req, struct node *n, const char *data, size_t size);

#endif
