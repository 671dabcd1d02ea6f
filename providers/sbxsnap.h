/* SPDX-License-Identifier: MIT */
/*
 * sbxsnap.h - snapshots, restore and freeze of a sandbox (DESIGN §3: the
 * `ctl` commands "freeze", "thaw", "restore", the snapshots/ directory;
 * §4 Snapshots): the snapshot engine (snapshot.h) and the provider's freeze
 * table (provider.h, struct sbx_freeze_ops) put together under the
 * sandbox's scope lock, so none of these overlaps an acquire, release, job
 * start or destroy of the scope.
 *
 * Who can: a provider with a freeze table freezes; one that also has its
 * data as host directories (no files table) snapshots.  Any other answers
 * EOPNOTSUPP, with a log line naming the provider (opensandbox, aio at a
 * base_url: docs/interface.md says how a remote implementation would work).
 *
 * The freeze a user asked for (`ctl` freeze) is s->frozen: a job cannot
 * start meanwhile (pool.c: EBUSY), status says "frozen", a snapshot or a
 * restore leaves it as it is.  A snapshot's own freeze lasts its final pass
 * only.  Release (rmdir of the sandbox) and destroy thaw first; after a
 * restart every sandbox is adopted thawed (a restart makes every sandbox
 * warm, and warm sandboxes are never frozen), whatever froze it.
 *
 * All calls may block (a docker request, a copy): work threads only, never
 * a FUSE worker; no lock held by the caller.  They return 0 or an errno.
 */
#ifndef SBX_SBXSNAP_H
#define SBX_SBXSNAP_H

#include <stdbool.h>

#include "pool.h"
#include "snapshot.h"

/* At start, before pool_init: interrupted restores finished (snap_recover),
 * and the pool hooks that thaw at release, destroy and adoption. */
int sbxsnap_init(const char *state_dir);
void sbxsnap_shutdown(void);

/* Does the sandbox's provider snapshot (and freeze)? */
bool sbxsnap_supported(struct sbx *s);

/* `ctl` freeze / thaw: every process of the sandbox paused or resumed.
 * ENOENT (not active), EOPNOTSUPP, ETIMEDOUT (a process would not stop:
 * nothing changed), EIO. */
int sbxsnap_freeze(struct sbx *s, bool on);

/* mkdir snapshots/<name>: a consistent snapshot of the sandbox's data.
 * EINVAL, EEXIST, EDQUOT (snapshots.max_per_thread), EOPNOTSUPP, ENOENT,
 * ETIMEDOUT (the freeze), EBUSY (a file under a lease), ENOSPC, EIO. */
int sbxsnap_take(struct sbx *s, const char *name, struct snap_result *out);

/* `ctl` restore [THREAD/]NAME: the data made equal to a snapshot of this
 * thread (from_thread NULL) or of another thread of the same user.  busy
 * (the FUSE layer's: a job starting or running) is asked with the scope
 * lock held: EBUSY then.  EINVAL, ENOENT, EOPNOTSUPP, EBUSY, EIO. */
int sbxsnap_restore(struct sbx *s, const char *from_thread, const char *name, bool (*busy)(struct sbx *s),
	struct snap_stats *out);

/* rmdir snapshots/<name> (the files go in snap_purge: call it after). */
int sbxsnap_delete(struct sbx *s, const char *name);

#endif
