/* SPDX-License-Identifier: MIT */
/*
 * fsbx.h - what the FUSE layer keeps per sandbox, in the pool's opaque
 * slot (struct sbx's upper, providers/pool.h): the pool knows no FUSE-layer
 * field.
 *
 * Made on first use (fs_sbx), freed by the pool at pool_clear (fs_sbx_setup
 * gives it the function).  view is protected by fs_lock (node.c);
 * jobs_running is atomic (job.c counts, data.c reads).
 */
#ifndef SBX_FSBX_H
#define SBX_FSBX_H

struct sbx;
struct view;

struct fs_sbx {
	struct view *view; /* fs_lock: the sandbox's current view, or NULL */
	int jobs_running;  /* atomic: its jobs in state running */
};

/* s's, made on first use; NULL only when it cannot be allocated. */
struct fs_sbx *fs_sbx(struct sbx *s);
/* Before pool_init: the pool frees each at pool_clear. */
void fs_sbx_setup(void);

#endif
