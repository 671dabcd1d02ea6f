/* SPDX-License-Identifier: MIT */
/*
 * ctl.h - what the read-only control files say: /sbx/.status, .metrics,
 * .config and a sandbox's id and status.
 */
#ifndef SBX_CTL_H
#define SBX_CTL_H

#include "node.h"

/* Append the content of control file n (N_ROOTFILE or N_CTL) as reader
 * (a uid) sees it to out.  0, or -1 (out of memory, the sandbox is gone). */
int ctl_render(struct node *n, struct buf *out, uid_t reader);

#endif
