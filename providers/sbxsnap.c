/* SPDX-License-Identifier: MIT */
/*
 * sbxsnap.c - snapshots, restore and freeze of a sandbox (see sbxsnap.h):
 * the engine and the provider's freeze table under the scope lock.
 *
 * A take has two passes (snapshot.c): the first copies the tree beside the
 * running sandbox, without the scope lock (it only reads the live tree, and
 * a job may start meanwhile); the second runs under the scope lock with the
 * sandbox frozen and copies only what changed since.  So a job start waits
 * at most that second pass, and the sandbox is frozen no longer.
 *
 * A restore runs whole under the scope lock with the sandbox frozen: no job
 * may start (the lock) or run (busy: EBUSY), and what finished jobs left
 * behind (a server, a watcher) cannot write into the tree being rewritten.
 */
#define _GNU_SOURCE
#include "sbxsnap.h"

#include <errno.h>
#include <string.h>

#include "../common/layout.h"
#include "../common/log.h"
#include "../common/names.h"

static const char *sbxsnap_provider(struct sbx_box *box)
{
	return box && box->prov ? box->prov->name : "?";
}

/* The freeze table of box, or NULL (logged: the provider cannot). */
static const struct sbx_freeze_ops *sbxsnap_ops(struct sbx *s, struct sbx_box *box, const char *what)
{
	const struct sbx_freeze_ops *fz = sbx_freeze(box);

	if (!fz || (strcmp(what, "freeze") && strcmp(what, "thaw") && !sbx_can_snapshot(box))) {
		log_warn(s->token, "%s: the %s provider cannot do it (%s)", what, sbxsnap_provider(box),
			fz ? "its sandbox's files are behind an API" : "it cannot freeze a sandbox");
		return NULL;
	}
	return fz;
}

bool sbxsnap_supported(struct sbx *s)
{
	struct sbx_box *box = pool_box(s);
	bool r = sbx_can_snapshot(box);

	sbx_box_put(box);
	return r;
}

/* ---- freeze and thaw -------------------------------------------------------------- */

static int sbxsnap_freeze_scoped(struct sbx *s, struct sbx_box *box, void *arg)
{
	bool on = *(bool *)arg;
	const struct sbx_freeze_ops *fz = sbxsnap_ops(s, box, on ? "freeze" : "thaw");
	enum sbx_err e;

	if (!fz)
		return EOPNOTSUPP;
	if (on == (bool)__atomic_load_n(&s->frozen, __ATOMIC_ACQUIRE))
		return 0; /* already so: a second freeze (or thaw) changes nothing */
	e = on ? fz->freeze(box) : fz->thaw(box);
	if (e) {
		log_warn(s->token, "%s failed: %s", on ? "freeze" : "thaw", strerror(sbx_err_errno(e)));
		return sbx_err_errno(e);
	}
	__atomic_store_n(&s->frozen, on ? 1 : 0, __ATOMIC_RELEASE);
	log_info(s->token, "%s", on ? "frozen: every process of the sandbox is paused" : "thawed");
	return 0;
}

int sbxsnap_freeze(struct sbx *s, bool on)
{
	return pool_scoped(s, sbxsnap_freeze_scoped, &on);
}

/* ---- take ---------------------------------------------------------------------------- */

struct sbxsnap_take {
	struct snap_take *t;
	struct snap_result *out;
	struct sbx *s;
	struct sbx_box *box;
	const struct sbx_freeze_ops *fz;
};

static int sbxsnap_take_freeze(void *arg)
{
	struct sbxsnap_take *c = arg;

	if (__atomic_load_n(&c->s->frozen, __ATOMIC_ACQUIRE))
		return 0; /* frozen by its user: stays so */
	return sbx_err_errno(c->fz->freeze(c->box));
}

static void sbxsnap_take_thaw(void *arg)
{
	struct sbxsnap_take *c = arg;
	enum sbx_err e;

	if (__atomic_load_n(&c->s->frozen, __ATOMIC_ACQUIRE))
		return;
	e = c->fz->thaw(c->box);
	if (e) /* the sandbox stays paused: its user sees status "active" but nothing runs; say so */
		log_err(c->s->token, "snapshot: cannot thaw the sandbox: %s (ctl \"thaw\" retries)",
			strerror(sbx_err_errno(e)));
}

static int sbxsnap_take_scoped(struct sbx *s, struct sbx_box *box, void *arg)
{
	struct sbxsnap_take *c = arg;
	struct snap_freeze fz = { .freeze = sbxsnap_take_freeze, .thaw = sbxsnap_take_thaw, .arg = c };

	c->fz = sbxsnap_ops(s, box, "snapshot");
	if (!c->fz)
		return EOPNOTSUPP;
	c->s = s;
	c->box = box;
	return snap_take_commit(c->t, &fz, c->out);
}

int sbxsnap_take(struct sbx *s, const char *name, struct snap_result *out)
{
	struct sbxsnap_take c = { .out = out };
	struct sbx_config *cfg = pool_sbx_config(s);
	struct sbx_box *box = pool_box(s);
	int err = 0;

	memset(out, 0, sizeof(*out));
	if (!cfg || !box) {
		err = ENOENT;
		goto out;
	}
	if (!sbxsnap_ops(s, box, "snapshot")) {
		err = EOPNOTSUPP;
		goto out;
	}
	err = snap_take_prepare(s->thread_dir, name, s->uid, s->gid, cfg->snapshots_max, &c.t);
	if (!err)
		err = pool_scoped(s, sbxsnap_take_scoped, &c);
out:
	snap_take_free(c.t);
	sbx_box_put(box);
	config_put(cfg);
	return err;
}

int sbxsnap_delete(struct sbx *s, const char *name)
{
	return snap_delete(s->thread_dir, name);
}

/* ---- restore ---------------------------------------------------------------------------- */

struct sbxsnap_restore {
	const char *src_dir;
	const char *name;
	bool (*busy)(struct sbx *s);
	struct snap_stats *out;
};

static int sbxsnap_restore_scoped(struct sbx *s, struct sbx_box *box, void *arg)
{
	struct sbxsnap_restore *c = arg;
	const struct sbx_freeze_ops *fz = sbxsnap_ops(s, box, "restore");
	bool was_frozen = __atomic_load_n(&s->frozen, __ATOMIC_ACQUIRE);
	enum sbx_err e;
	int err;

	if (!fz)
		return EOPNOTSUPP;
	if (c->busy && c->busy(s)) {
		log_warn(s->token, "restore of %s refused: a job is running (EBUSY)", c->name);
		return EBUSY;
	}
	if (!was_frozen && (e = fz->freeze(box))) {
		log_warn(s->token, "restore of %s: cannot freeze the sandbox: %s", c->name, strerror(sbx_err_errno(e)));
		return sbx_err_errno(e);
	}
	err = snap_restore(c->src_dir, c->name, s->thread_dir, s->uid, s->gid, c->out);
	if (!was_frozen && (e = fz->thaw(box)))
		log_err(s->token, "restore: cannot thaw the sandbox: %s", strerror(sbx_err_errno(e)));
	return err;
}

int sbxsnap_restore(struct sbx *s, const char *from_thread, const char *name, bool (*busy)(struct sbx *s),
	struct snap_stats *out)
{
	struct sbxsnap_restore c = { .name = name, .busy = busy, .out = out };
	struct buf src = BUF_INIT(BUF_CAP_PATH);
	struct sbx_config *cfg = pool_sbx_config(s);
	int err = 0;

	memset(out, 0, sizeof(*out));
	if (!cfg) {
		err = ENOENT;
		goto out;
	}
	if ((from_thread && !names_valid(from_thread)) || !names_valid(name)) {
		log_warn(s->token, "restore: '%.64s%s%.64s' is not [THREAD/]NAME", from_thread ? from_thread : "",
			from_thread ? "/" : "", name);
		err = EINVAL;
		goto out;
	}
	/* another thread of the same user: a fork */
	if (from_thread && layout_thread_dir(&src, cfg->state_dir, s->user, from_thread)) {
		err = ENAMETOOLONG;
		goto out;
	}
	c.src_dir = from_thread ? src.ptr : s->thread_dir;
	err = snap_exists(c.src_dir, name);
	if (err) {
		log_warn(s->token, "restore: thread %s has no snapshot %s", from_thread ? from_thread : s->thread, name);
		goto out;
	}
	err = pool_scoped(s, sbxsnap_restore_scoped, &c);
out:
	buf_free(&src);
	config_put(cfg);
	return err;
}

/* ---- pool hooks: never frozen unless active ------------------------------------------------ */

/* Thaw s's sandbox if it is frozen (the scope lock is held: pool hooks). */
static void sbxsnap_thaw_now(struct sbx *s, const char *why, bool ask)
{
	const struct sbx_freeze_ops *fz = sbx_freeze(s->box);
	bool frozen = __atomic_exchange_n(&s->frozen, 0, __ATOMIC_ACQ_REL) != 0;
	enum sbx_err e;

	if (!fz)
		return;
	if (!frozen && ask && (fz->frozen(s->box, &frozen) || !frozen))
		return;
	if (!frozen)
		return;
	e = fz->thaw(s->box);
	if (e)
		log_err(s->token, "%s: cannot thaw the sandbox: %s", why, strerror(sbx_err_errno(e)));
	else
		log_info(s->token, "%s: thawed", why);
}

static int sbxsnap_up(struct sbx *s, bool adopted)
{
	/* a ctl freeze before the restart, or a snapshot's or restore's freeze
	 * that a crash cut short: an adopted sandbox is warm, and warm ones
	 * are never frozen */
	if (adopted)
		sbxsnap_thaw_now(s, "adopted frozen", true);
	return 0;
}

static void sbxsnap_release(struct sbx *s)
{
	sbxsnap_thaw_now(s, "released", false);
}

static void sbxsnap_down(struct sbx *s)
{
	sbxsnap_thaw_now(s, "destroyed", false);
}

static const struct pool_hooks sbxsnap_hooks = {
	.up = sbxsnap_up,
	.down = sbxsnap_down,
	.release = sbxsnap_release,
};

int sbxsnap_init(const char *state_dir)
{
	snap_recover(state_dir);
	return pool_add_hooks(&sbxsnap_hooks) ? ENOMEM : 0;
}

void sbxsnap_shutdown(void)
{
	pool_remove_hooks(&sbxsnap_hooks);
}
