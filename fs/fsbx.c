/* SPDX-License-Identifier: MIT */
/*
 * fsbx.c - the FUSE layer's per-sandbox state in the pool's opaque slot
 * (see fsbx.h).  Installed with a compare-and-swap: node.c (under fs_lock)
 * and job.c (under a job's lock) may make it first, neither lock is the
 * other's.
 */
#include "fsbx.h"

#include <stdlib.h>

#include "../providers/pool.h"

struct fs_sbx *fs_sbx(struct sbx *s)
{
	struct fs_sbx *f = __atomic_load_n(&s->upper, __ATOMIC_ACQUIRE), *mine;

	if (f)
		return f;
	mine = calloc(1, sizeof(*mine));
	if (!mine)
		return NULL;
	f = pool_upper_install(s, mine);
	if (f != mine)
		free(mine);
	return f;
}

void fs_sbx_setup(void)
{
	pool_set_upper_free(free);
}
