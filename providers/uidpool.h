/* SPDX-License-Identifier: MIT */
/*
 * uidpool.h - the host uids of sandboxes whose files are host directories
 * (bind-mount providers: local, docker).
 *
 * A sandbox runs as an unprivileged host uid, never as root mapped into a
 * user namespace (DESIGN §5): the user's own uid when `users:` maps it, else
 * a uid of the provider's configured range that the thread keeps for ever
 * (recorded in thread_dir/uid), so files an earlier incarnation wrote stay
 * writable.  Thread-safe (one mutex, held only around the bitmap).
 */
#ifndef SBX_UIDPOOL_H
#define SBX_UIDPOOL_H

#include <sys/types.h>

#include "../common/config.h"

struct uidpool;

/* A pool over [base, base + count).  NULL on ENOMEM. */
struct uidpool *uidpool_new(uid_t base, unsigned count);
void uidpool_free(struct uidpool *p);
/* Mark the uid of every thread recorded under state_dir as taken. */
void uidpool_scan(struct uidpool *p, const char *state_dir);
/* The uid of a thread: 0 and uid/gid (recorded in thread_dir/uid), or an
 * errno: EACCES (users: does not allow user), ENOSPC (range exhausted), EIO. */
int uidpool_assign(struct uidpool *p, const struct sbx_config *cfg, const char *user, const char *thread_dir,
	uid_t *uid, gid_t *gid);
/* The uid recorded for a thread: 0, or -1 when there is none. */
int uidpool_recorded(const char *thread_dir, uid_t *uid, gid_t *gid);

#endif
