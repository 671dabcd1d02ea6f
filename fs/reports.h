/* SPDX-License-Identifier: MIT */
/*
 * reports.h - what the read-only report files say: /sbx/.status, .metrics,
 * .config, .health and a sandbox's id and status.  (The writable control
 * file of a sandbox, ctl, is sbxctl.h's.)
 */
#ifndef SBX_REPORTS_H
#define SBX_REPORTS_H

#include "node.h"

/* Append the content of control file n (N_ROOTFILE or N_CTL) as reader
 * (a uid) sees it to out.  0, or -1 (out of memory, the sandbox is gone). */
int reports_render(struct node *n, struct buf *out, uid_t reader);

#endif
