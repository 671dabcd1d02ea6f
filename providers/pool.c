/* SPDX-License-Identifier: MIT */
/*
 * pool.c - the sandbox lifecycle: registry, per-scope serialisation, warm
 * pool, replicas soft cap, idle reaper, adoption, reload and shutdown.
 *
 * Why two locks: acquiring a sandbox can take seconds (fork, network,
 * docker), and different scopes must never wait on each other.  So the
 * registry lock (pool.lock) only guards state transitions and is dropped
 * before any provider call, while the per-scope mutex serialises the slow
 * operations of one scope.  The lock order is docs/architecture.md's.
 *
 * Persistence: sandbox.json in the thread directory says a sandbox exists:
 * written with state "creating" before the provider starts anything (so a
 * kill -9 in the middle of a create leaves a record the next start finds and
 * cleans up), rewritten "ready" once it is, removed after destroy.  Where
 * a thread's files live is common/layout.h's business; which host uid they
 * belong to is the provider's (box->uid).
 */
#define _GNU_SOURCE
#include "pool.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/json.h"
#include "../common/layout.h"
#include "../common/lock.h"

#include "../common/log.h"
#include "../common/token.h"
#include "../common/util.h"
#include "spares.h"

#define POOL_BUCKETS 1024

const double pool_hist_bounds[12] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10 };
const char *const pool_error_kinds[3] = { "create", "state_dir", "other" };

static struct {
	struct lock lock;
	struct sbx *table[POOL_BUCKETS];  /* protected by lock */
	struct sbx_config *cfg;           /* protected by lock; referenced */
	const struct sbx_provider *prov;  /* protected by lock */
	struct pool_stats st;             /* protected by lock (counters) */
	char state_id[NAMES_STATE_ID_LEN + 1];
	pthread_t reaper;
	pthread_cond_t reaper_cond;
	bool reaper_running, stopping;
	bool sweep_gone; /* protected by lock: a box went gone (sbx_box_gone): the reaper invalidates it */
} pool = { .lock = LOCK_INIT, .reaper_cond = PTHREAD_COND_INITIALIZER };

/* Other modules' hooks (net/, skills/), in the order they were added: set
 * before pool_init and removed after pool_shutdown, so the list is never
 * read while it changes. */
#define POOL_MAX_HOOKS 4
static const struct pool_hooks *pool_hooks[POOL_MAX_HOOKS];

int pool_add_hooks(const struct pool_hooks *h)
{
	for (int i = 0; i < POOL_MAX_HOOKS; i++)
		if (!pool_hooks[i]) {
			pool_hooks[i] = h;
			return 0;
		}
	return -1;
}

void pool_remove_hooks(const struct pool_hooks *h)
{
	for (int i = 0; i < POOL_MAX_HOOKS; i++)
		if (pool_hooks[i] == h) {
			memmove(&pool_hooks[i], &pool_hooks[i + 1], (POOL_MAX_HOOKS - 1 - (size_t)i) * sizeof(*pool_hooks));
			pool_hooks[POOL_MAX_HOOKS - 1] = NULL;
			return;
		}
}

/* up: every hook in order; a failure undoes (down) the ones that ran and
 * fails.  down: in reverse order. */
static int pool_hooks_up(struct sbx *s, bool adopted)
{
	for (int i = 0; i < POOL_MAX_HOOKS && pool_hooks[i]; i++)
		if (pool_hooks[i]->up && pool_hooks[i]->up(s, adopted)) {
			while (--i >= 0)
				if (pool_hooks[i]->down)
					pool_hooks[i]->down(s);
			return -1;
		}
	return 0;
}

static void pool_hooks_down(struct sbx *s)
{
	int n = 0;

	while (n < POOL_MAX_HOOKS && pool_hooks[n])
		n++;
	while (--n >= 0)
		if (pool_hooks[n]->down)
			pool_hooks[n]->down(s);
}

static void pool_hooks_release(struct sbx *s)
{
	for (int i = 0; i < POOL_MAX_HOOKS && pool_hooks[i]; i++)
		if (pool_hooks[i]->release)
			pool_hooks[i]->release(s);
}

static void pool_hooks_reclaim(struct sbx *s)
{
	for (int i = 0; i < POOL_MAX_HOOKS && pool_hooks[i]; i++)
		if (pool_hooks[i]->reclaim)
			pool_hooks[i]->reclaim(s);
}

static unsigned pool_hash(const char *token)
{
	return (unsigned)strtoul(token + SCOPE_TOKEN_LEN - 6, NULL, 16) % POOL_BUCKETS;
}

/* Caller holds pool.lock. */
static struct sbx *pool_lookup_locked(const char *token)
{
	lock_assert_held(&pool.lock);
	for (struct sbx *s = pool.table[pool_hash(token)]; s; s = s->next)
		if (!strcmp(s->token, token))
			return s;
	return NULL;
}

static int pool_thread_dir(const char *state_dir, const char *user, const char *thread, struct buf *b)
{
	return buf_addf(b, "%s/users/%s/threads/%s", state_dir, user, thread);
}

/* Caller holds pool.lock.  Returns the scope's entry, creating it. */
static struct sbx *pool_entry_locked(const char *user, const char *thread)
{
	char token[SCOPE_TOKEN_LEN + 1];
	struct buf dir = BUF_INIT(BUF_CAP_PATH);
	struct sbx *s;

	lock_assert_held(&pool.lock);
	if (names_scope_token(user, thread, token))
		return NULL;
	s = pool_lookup_locked(token);
	if (s)
		return s;
	s = calloc(1, sizeof(*s));
	if (!s || pool_thread_dir(pool.cfg->state_dir, user, thread, &dir)) {
		free(s);
		buf_free(&dir);
		return NULL;
	}
	snprintf(s->user, sizeof(s->user), "%s", user);
	snprintf(s->thread, sizeof(s->thread), "%s", thread);
	memcpy(s->token, token, sizeof(token));
	s->thread_dir = buf_take(&dir, NULL);
	s->uid = (uid_t)-1;
	s->refs = 1; /* the registry's */
	pthread_mutex_init(&s->scope, NULL);
	s->next = pool.table[pool_hash(token)];
	pool.table[pool_hash(token)] = s;
	return s;
}

static void (*pool_upper_free)(void *upper); /* set before pool_init, read at pool_clear */

void *pool_upper_install(struct sbx *s, void *p)
{
	void *cur = NULL;

	if (__atomic_compare_exchange_n(&s->upper, &cur, p, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return p;
	return cur;
}

void pool_set_upper_free(void (*fn)(void *upper))
{
	pool_upper_free = fn;
}

long pool_work_timeout_ms(void)
{
	struct sbx_config *cfg = pool_config();
	long s = 600;

	if (cfg) {
		s = cfg->ready_timeout + 4 * cfg->request_timeout + 60;
		config_put(cfg);
	}
	return s * 1000;
}

void pool_get(struct sbx *s)
{
	lock_acquire(&pool.lock);
	s->refs++;
	lock_release(&pool.lock);
}

void pool_put(struct sbx *s)
{
	/* Entries stay in the registry for the daemon's lifetime (they are
	 * small, and a scope once seen tends to come back); refs only guard
	 * against use by a holder after shutdown frees them. */
	lock_acquire(&pool.lock);
	s->refs--;
	lock_release(&pool.lock);
}

enum sbx_state pool_state(struct sbx *s, unsigned *gen)
{
	enum sbx_state st;

	lock_acquire(&pool.lock);
	st = s->state;
	if (gen)
		*gen = s->gen;
	lock_release(&pool.lock);
	return st;
}

void pool_note_error(const char *scope, const char *kind, const char *fmt, ...)
{
	char msg[300], at[32];
	va_list ap;
	json_t *o;
	char *text;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	util_iso8601(util_wall_now(), at);
	o = json_pack("{s:s,s:s,s:s,s:s}", "scope", scope, "kind", kind, "error", msg, "at", at);
	text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	lock_acquire(&pool.lock);
	pool.st.errors++;
	pool.st.errors_by_kind[!strcmp(kind, "create") ? 0 : !strcmp(kind, "state_dir") ? 1 : 2]++;
	pool.st.last_error_at = util_wall_now();
	snprintf(pool.st.last_error, sizeof(pool.st.last_error), "%s", text ? text : "");
	lock_release(&pool.lock);
	free(text);
	json_decref(o);
}

/* ---- the thread's host directories ---------------------------------------- */

struct pool_dirs {
	struct buf b[LAYOUT_DIR_COUNT];
};

static void pool_dirs_free(struct pool_dirs *d)
{
	for (int i = 0; i < LAYOUT_DIR_COUNT; i++)
		buf_free(&d->b[i]);
}

/* The paths of s's directories (made by the provider or the FUSE layer). */
static int pool_dirs(struct sbx *s, struct pool_dirs *d)
{
	int r = 0;

	for (int i = 0; i < LAYOUT_DIR_COUNT; i++) {
		buf_init(&d->b[i], BUF_CAP_PATH);
		r |= layout_dir(&d->b[i], s->thread_dir, (enum layout_dir)i);
	}
	return r ? ENOMEM : 0;
}

static void pool_spec(struct sbx *s, struct pool_dirs *d, struct sbx_config *cfg, struct sbx_spec *spec)
{
	memset(spec, 0, sizeof(*spec)); /* a scope's: not a spare */
	spec->user = s->user;
	spec->thread = s->thread;
	spec->token = s->token;
	spec->dirs.thread_dir = s->thread_dir;
	spec->dirs.workspace = d->b[LAYOUT_WORKSPACE].ptr;
	spec->dirs.uploads = d->b[LAYOUT_UPLOADS].ptr;
	spec->dirs.outputs = d->b[LAYOUT_OUTPUTS].ptr;
	spec->dirs.skills = d->b[LAYOUT_SKILLS].ptr;
	spec->dirs.jobs = d->b[LAYOUT_JOBS].ptr;
	spec->state_id = pool.state_id;
	spec->cfg = cfg;
}

static int pool_save(struct sbx *s, const struct sbx_provider *prov, const char *state)
{
	json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:f,s:i,s:i}", "user", s->user, "thread", s->thread, "token",
		s->token, "provider", prov->name, "state", state, "created_at", s->created_at, "uid", (int)s->uid,
		"gid", (int)s->gid);
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	char *text = o ? json_dumps(o, JSON_INDENT(1)) : NULL;
	int r = -1;

	/* "creating" is written before the provider is called: a kill -9
	 * during the write leaves an empty record, which is none (nothing was
	 * made yet), so it is written in place; "ready" replaces it atomically */
	if (text && !buf_addf(&path, "%s/sandbox.json", s->thread_dir))
		r = !strcmp(state, "creating") ? util_write_new(path.ptr, text, strlen(text), 0600)
					       : util_write_atomic(path.ptr, text, strlen(text), 0600);
	free(text);
	json_decref(o);
	buf_free(&path);
	return r;
}

static void pool_unsave(struct sbx *s)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);

	if (!buf_addf(&path, "%s/sandbox.json", s->thread_dir))
		unlink(path.ptr);
	buf_free(&path);
}

/* ---- destroy, evict, reap ---------------------------------------------------- */

/* Caller holds s->scope: s's box, provider and config, or none. */
static void pool_set_box_held(struct sbx *s, struct sbx_box *box, const struct sbx_provider *prov,
	struct sbx_config *cfg)
{
	lock_acquire(&pool.lock);
	s->box = box;
	s->prov = prov;
	s->cfg = cfg;
	if (box) { /* the owner of its files on the host, for the FUSE layer's mapping */
		s->uid = box->uid;
		s->gid = box->gid;
	}
	lock_release(&pool.lock);
}

/* Caller holds s->scope and has set state DESTROYING. */
static void pool_destroy_held(struct sbx *s, const char *why)
{
	struct sbx_box *box = s->box;
	struct sbx_config *cfg = s->cfg;
	char scope[NAMES_SCOPE_MAX];
	enum sbx_err e;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	if (box)
		pool_hooks_down(s);
	if (box) {
		e = box->prov->ops->destroy(box);
		if (e)
			log_warn(scope, "destroy: %s", sbx_err_name(e));
	}
	pool_set_box_held(s, NULL, s->prov, NULL);
	sbx_box_put(box);
	pool_unsave(s);
	config_put(cfg);
	log_info(scope, "sandbox destroyed (%s)", why);
	lock_acquire(&pool.lock);
	s->state = SBX_NONE;
	lock_release(&pool.lock);
}

/* Caller holds pool.lock.  Picks the oldest warm entry nobody is working
 * on (its scope lock is free), locks its scope, marks it DESTROYING. */
static struct sbx *pool_pick_warm_locked(uint64_t older_than_ms, bool oldest)
{
	struct sbx *best = NULL;

	lock_assert_held(&pool.lock);
	for (int i = 0; i < POOL_BUCKETS; i++)
		for (struct sbx *s = pool.table[i]; s; s = s->next) {
			if (s->state != SBX_WARM || s->warm_since_ms > older_than_ms)
				continue;
			if (!oldest) {
				best = s;
				goto found;
			}
			if (!best || s->warm_since_ms < best->warm_since_ms)
				best = s;
		}
found:
	if (!best || pthread_mutex_trylock(&best->scope))
		return NULL;
	best->state = SBX_DESTROYING;
	return best;
}

/* Active, warm and creating sandboxes of scopes (spares not counted). */
static unsigned pool_count_scopes_locked(void)
{
	unsigned n = 0;

	for (int i = 0; i < POOL_BUCKETS; i++)
		for (struct sbx *s = pool.table[i]; s; s = s->next)
			if (s->state == SBX_ACTIVE || s->state == SBX_WARM || s->state == SBX_CREATING)
				n++;
	return n;
}

/* What replicas counts before a create: the scopes' sandboxes and the
 * ready spares (one being made gives way itself: spares.h). */
static unsigned pool_count_locked(void)
{
	return pool_count_scopes_locked() + spares_count(true);
}

/* spares_start's others(): taken with no lock of spares.c held. */
static unsigned pool_count_scopes(void)
{
	unsigned n;

	lock_acquire(&pool.lock);
	n = pool_count_scopes_locked();
	lock_release(&pool.lock);
	return n;
}

/* Before a create: keep active + warm (+ creating) + spares under replicas
 * by destroying a spare (nobody's: the cheapest to lose), else the oldest
 * warm sandbox.  Active ones are never evicted. */
static void pool_enforce_replicas(int replicas, const char *scope)
{
	struct sbx *victim;

	for (;;) {
		lock_acquire(&pool.lock);
		if ((int)pool_count_locked() <= replicas) {
			lock_release(&pool.lock);
			return;
		}
		lock_release(&pool.lock);
		if (spares_evict_one())
			continue;
		lock_acquire(&pool.lock);
		victim = pool_pick_warm_locked(UINT64_MAX, true);
		if (victim)
			pool.st.evictions++;
		lock_release(&pool.lock);
		if (!victim) {
			log_warn(scope, "replicas (%d) exceeded and no warm sandbox to evict: creating anyway", replicas);
			return;
		}
		pool_destroy_held(victim, "evicted: replicas soft cap");
		pthread_mutex_unlock(&victim->scope);
	}
}

static void pool_reap_once(long idle_timeout)
{
	uint64_t now = util_now_ms();
	struct sbx *victim;

	if (idle_timeout <= 0)
		return;
	for (;;) {
		lock_acquire(&pool.lock);
		victim = now > (uint64_t)idle_timeout * 1000
				 ? pool_pick_warm_locked(now - (uint64_t)idle_timeout * 1000, false)
				 : NULL;
		if (victim)
			pool.st.reaps++;
		lock_release(&pool.lock);
		if (!victim)
			return;
		pool_destroy_held(victim, "idle timeout");
		pthread_mutex_unlock(&victim->scope);
	}
}

/* A sandbox whose provider found it gone behind its back (sbx_box_gone:
 * expired, deleted) is invalidated: destroyed (what is left of it), its
 * directory disappears, and the next mkdir of its scope creates a fresh
 * one; last_event says what happened.  Returns true when one could not be
 * handled now (its scope lock was busy): the reaper comes back soon. */
static bool pool_sweep_gone(void)
{
	bool busy = false;

	for (;;) {
		struct sbx *victim = NULL;
		enum sbx_state was = SBX_NONE;
		char why[sizeof(((struct sbx_box *)0)->gone_why)], at[32];

		lock_acquire(&pool.lock);
		for (int i = 0; i < POOL_BUCKETS && !victim; i++)
			for (struct sbx *s = pool.table[i]; s && !victim; s = s->next) {
				if ((s->state != SBX_ACTIVE && s->state != SBX_WARM) || !sbx_box_is_gone(s->box))
					continue;
				if (pthread_mutex_trylock(&s->scope)) {
					busy = true;
					continue;
				}
				was = s->state;
				s->state = SBX_DESTROYING;
				victim = s;
			}
		if (victim) {
			util_iso8601(util_wall_now(), at);
			snprintf(why, sizeof(why), "%s", victim->box->gone_why);
			snprintf(victim->last_event, sizeof(victim->last_event), "invalidated at %s (was %s): %s", at,
				was == SBX_ACTIVE ? "active" : "warm", why);
		}
		lock_release(&pool.lock);
		if (!victim)
			return busy;
		{
			char scope[NAMES_SCOPE_MAX];
			snprintf(scope, sizeof(scope), "%s/%s", victim->user, victim->thread);
			log_warn(scope, "the sandbox is gone (%s): invalidated; the next mkdir creates a fresh one", why);
			pool_note_error(scope, "other", "sandbox gone: %s", why);
		}
		pool_destroy_held(victim, "gone");
		pthread_mutex_unlock(&victim->scope);
	}
}

/* sbx_box_gone()'s hook: wake the reaper (any thread, no lock held). */
static void pool_gone_wake(void)
{
	lock_acquire(&pool.lock);
	pool.sweep_gone = true;
	pthread_cond_signal(&pool.reaper_cond);
	lock_release(&pool.lock);
}

static void *pool_reaper_main(void *arg)
{
	bool again = false;

	(void)arg;
	lock_acquire(&pool.lock);
	while (!pool.stopping) {
		long interval = pool.cfg->idle_check_interval, idle = pool.cfg->idle_timeout;
		bool sweep = pool.sweep_gone || again;
		struct timespec ts;

		pool.sweep_gone = false;
		lock_release(&pool.lock);
		again = sweep && pool_sweep_gone();
		pool_reap_once(idle);
		spares_reap(idle);
		spares_sweep_gone();
		lock_acquire(&pool.lock);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += again ? 1 : interval;
		if (!pool.stopping && !pool.sweep_gone)
			lock_cond_timedwait(&pool.reaper_cond, &pool.lock, &ts);
	}
	lock_release(&pool.lock);
	return NULL;
}

/* ---- acquire / release ---------------------------------------------------- */

static void pool_observe(int kind, double secs)
{
	int b;

	for (b = 0; b < 12 && secs > pool_hist_bounds[b]; b++)
		;
	pool.st.acquire_hist[kind][b]++;
	pool.st.acquire_sum[kind] += secs;
	pool.st.acquire_count[kind]++;
	if (kind == 0)
		pool.st.last_create_at = util_wall_now();
}

/* Create a fresh sandbox for s.  Caller holds s->scope; state is CREATING. */
static int pool_create_held(struct sbx *s, struct sbx_config *cfg, const struct sbx_provider *prov,
	const char *scope)
{
	struct sbx_box *box = NULL;
	struct pool_dirs d;
	struct sbx_spec spec;
	enum sbx_err e;
	uint64_t t0 = util_now_us(), t1, t2;
	bool claimed;
	int err;

	err = pool_dirs(s, &d);
	if (!err && (util_mkdir_p(s->thread_dir, 0700) || util_mkdir_p(d.b[LAYOUT_SKILLS].ptr, 0755)))
		err = errno == ENOSPC ? ENOSPC : EIO;
	if (err) {
		log_err(scope, "cannot prepare %s: %s", s->thread_dir, strerror(err));
		pool_note_error(scope, "state_dir", "cannot prepare the thread directory: %s", strerror(err));
		pool_dirs_free(&d);
		return err;
	}
	pool_spec(s, &d, cfg, &spec);
	s->created_at = util_wall_now();
	if (pool_save(s, prov, "creating")) {
		log_err(scope, "cannot record the sandbox in %s: %s", s->thread_dir, strerror(errno));
		pool_dirs_free(&d);
		return EIO;
	}
	/* a spare of this configuration, bound to the thread (spares.h); one
	 * whose claim fails is gone, and the create goes on cold */
	t1 = util_now_us();
	{
		struct spare *sp = spares_take(prov, cfg);

		e = sp ? spares_claim(sp, &spec, &box) : SBX_ERR_GONE;
	}
	claimed = e == SBX_OK;
	if (!claimed) {
		pool_enforce_replicas(cfg->replicas, scope);
		e = prov->ops->create(&spec, &box);
		spares_refill(); /* none was ready (reaped while idle, all taken): demand is back */
	}
	t2 = util_now_us();
	pool_dirs_free(&d);
	if (e == SBX_ERR_INTR) { /* the caller gave up (runtime/work.h): not the provider's failure */
		log_info(scope, "create cancelled: the provider cleaned up what it made");
		pool_unsave(s);
		return EINTR;
	}
	if (e) {
		log_err(scope, "create failed: %s", sbx_err_name(e));
		pool_note_error(scope, "create", "provider %s: %s", prov->name, sbx_err_name(e));
		pool_unsave(s);
		return sbx_err_errno(e) == ENOENT ? EIO : sbx_err_errno(e);
	}
	pool_set_box_held(s, box, prov, config_get(cfg));
	if (pool_hooks_up(s, false)) {
		log_err(scope, "create failed: the sandbox's network policy could not be set up");
		pool_note_error(scope, "create", "provider %s: network policy setup failed", prov->name);
		err = EIO;
	} else if (pool_save(s, prov, "ready")) {
		log_err(scope, "cannot record the sandbox: %s", strerror(errno));
		pool_hooks_down(s);
		err = EIO;
	}
	if (err) {
		struct sbx_config *held = s->cfg;
		struct token *prev = token_enter(NULL); /* a cancelled create still cleans up */

		pool_set_box_held(s, NULL, prov, NULL);
		prov->ops->destroy(box);
		token_leave(prev);
		sbx_box_put(box);
		config_put(held);
		pool_unsave(s);
		return err;
	}
	lock_acquire(&pool.lock);
	s->from_spare = claimed;
	lock_release(&pool.lock);
	log_debug(scope, "pool: create steps (ms): prepare %.2f provider %.2f policy+record %.2f",
		(double)(t1 - t0) / 1000.0, (double)(t2 - t1) / 1000.0, (double)(util_now_us() - t2) / 1000.0);
	log_info(scope, "sandbox %s (%s, %s, uid %u)", claimed ? "bound from a spare" : "created", prov->name,
		box->remote_id, (unsigned)box->uid);
	return 0;
}

/* Caller holds pool.lock.  users.<user>.max_sandboxes: active and creating
 * sandboxes of the user count (warm ones are released: they do not). */
static int pool_user_cap_locked(const struct sbx_config *cfg, const char *user, const char *scope)
{
	int max = config_user_max_sandboxes(cfg, user), n = 0;

	lock_assert_held(&pool.lock);
	if (!max)
		return 0;
	for (int i = 0; i < POOL_BUCKETS; i++)
		for (struct sbx *s = pool.table[i]; s; s = s->next)
			n += (s->state == SBX_ACTIVE || s->state == SBX_CREATING || s->reserved) && !strcmp(s->user, user);
	if (n < max)
		return 0;
	log_warn(scope, "mkdir refused: %s has %d sandboxes, users.%s.max_sandboxes is %d", user, n, user, max);
	return EDQUOT;
}

/* Acquire s (referenced by the caller, who keeps the reference on success).
 * reserved: the caller holds s's reservation (pool_reserve), which ends
 * here whatever the result. */
static int pool_acquire_entry(struct sbx *s, bool reserved)
{
	struct sbx_config *cfg;
	const struct sbx_provider *prov;
	uint64_t t0 = util_now_ms();
	char scope[NAMES_SCOPE_MAX];
	int err = 0, kind = 0;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	pthread_mutex_lock(&s->scope);
	lock_acquire(&pool.lock);
	if (reserved && s->reserved_cfg) { /* the configuration of the mkdir's moment */
		cfg = s->reserved_cfg;
		s->reserved_cfg = NULL;
	} else {
		cfg = config_get(pool.cfg);
	}
	prov = pool.prov;
	enum sbx_state st = s->state;
	if (token_check(token_current()) == SBX_ERR_INTR) {
		/* the caller gave up while this waited behind another acquire */
		lock_release(&pool.lock);
		err = EINTR;
		goto out;
	}
	if (st == SBX_ACTIVE || st == SBX_CREATING || (s->reserved && !reserved)) {
		lock_release(&pool.lock);
		err = EEXIST;
		goto out;
	}
	err = reserved ? 0 : pool_user_cap_locked(cfg, s->user, scope); /* a reservation was counted */
	if (err) {
		lock_release(&pool.lock);
		goto out;
	}
	s->state = SBX_CREATING;
	lock_release(&pool.lock);

	if (st == SBX_WARM && s->prov == prov && s->box && !sbx_box_is_gone(s->box) &&
	    prov->ops->health(s->box) == SBX_OK) {
		kind = 1;
		log_info(scope, "sandbox reclaimed from the warm pool");
	} else {
		if (st == SBX_WARM) {
			bool gone = sbx_box_is_gone(s->box);

			log_info(scope, "warm sandbox failed its health check: recreating");
			lock_acquire(&pool.lock);
			snprintf(s->last_event, sizeof(s->last_event), "recreated: %s",
				gone ? s->box->gone_why : "the warm sandbox failed its health check");
			lock_release(&pool.lock);
			pool_destroy_held(s, "failed health check");
			lock_acquire(&pool.lock);
			s->state = SBX_CREATING;
			lock_release(&pool.lock);
		}
		err = pool_create_held(s, cfg, prov, scope);
	}
	lock_acquire(&pool.lock);
	if (reserved)
		s->reserved = false; /* with the state: the scope is never seen free in between */
	if (err) {
		s->state = SBX_NONE;
	} else {
		s->state = SBX_ACTIVE;
		s->gen++;
		s->acquired_at = util_wall_now();
		pool_observe(kind, (double)(util_now_ms() - t0) / 1000.0);
	}
	lock_release(&pool.lock);
	if (!err && kind == 1)
		pool_hooks_reclaim(s);
out:
	if (reserved && err) {
		lock_acquire(&pool.lock);
		s->reserved = false;
		lock_release(&pool.lock);
	}
	pthread_mutex_unlock(&s->scope);
	config_put(cfg);
	return err;
}

/* A referenced entry of (user, thread), or NULL with *err. */
static struct sbx *pool_entry_ref(const char *user, const char *thread, int *err)
{
	struct sbx *s;

	lock_acquire(&pool.lock);
	s = pool.stopping ? NULL : pool_entry_locked(user, thread);
	if (s)
		s->refs++;
	else
		*err = pool.stopping ? ESHUTDOWN : ENOMEM;
	lock_release(&pool.lock);
	return s;
}

int pool_acquire(const char *user, const char *thread, struct sbx **out)
{
	int err = 0;
	struct sbx *s = pool_entry_ref(user, thread, &err);

	if (!s)
		return err;
	err = pool_acquire_entry(s, false);
	if (err) {
		pool_put(s);
		return err;
	}
	*out = s;
	return 0;
}

int pool_reserve(const char *user, const char *thread, struct sbx **out)
{
	char scope[NAMES_SCOPE_MAX];
	struct sbx *s;
	int err = 0;

	snprintf(scope, sizeof(scope), "%s/%s", user, thread);
	lock_acquire(&pool.lock);
	s = pool.stopping ? NULL : pool_entry_locked(user, thread);
	if (!s)
		err = pool.stopping ? ESHUTDOWN : ENOMEM;
	else if (s->reserved || s->state == SBX_ACTIVE || s->state == SBX_CREATING)
		err = EEXIST;
	else
		err = pool_user_cap_locked(pool.cfg, user, scope);
	if (!err) {
		s->reserved = true;
		s->reserved_cfg = config_get(pool.cfg);
		s->refs++;
		*out = s;
	}
	lock_release(&pool.lock);
	return err;
}

int pool_acquire_reserved(struct sbx *s)
{
	return pool_acquire_entry(s, true);
}

void pool_unreserve(struct sbx *s)
{
	struct sbx_config *cfg;

	lock_acquire(&pool.lock);
	s->reserved = false;
	cfg = s->reserved_cfg;
	s->reserved_cfg = NULL;
	s->refs--;
	lock_release(&pool.lock);
	config_put(cfg);
}

struct sbx *pool_find_shown(const char *user, const char *thread, bool *creating)
{
	char token[SCOPE_TOKEN_LEN + 1];
	struct sbx *s;

	if (names_scope_token(user, thread, token))
		return NULL;
	lock_acquire(&pool.lock);
	s = pool_lookup_locked(token);
	if (s && (s->state == SBX_ACTIVE || s->reserved) && !strcmp(s->user, user) && !strcmp(s->thread, thread)) {
		s->refs++;
		*creating = s->reserved;
	} else {
		s = NULL;
	}
	lock_release(&pool.lock);
	return s;
}

int pool_release(struct sbx *s)
{
	char scope[NAMES_SCOPE_MAX];
	bool stale;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	pthread_mutex_lock(&s->scope);
	lock_acquire(&pool.lock);
	if (s->state != SBX_ACTIVE) {
		lock_release(&pool.lock);
		pthread_mutex_unlock(&s->scope);
		return ENOENT;
	}
	lock_release(&pool.lock);
	/* still active: what the hooks finish (a skills sync) reaches the sandbox */
	pool_hooks_release(s);
	lock_acquire(&pool.lock);
	/* A sandbox of a provider that a reload replaced is destroyed, not parked. */
	stale = s->prov != pool.prov || pool.stopping;
	s->state = stale ? SBX_DESTROYING : SBX_WARM;
	s->warm_since_ms = util_now_ms();
	lock_release(&pool.lock);
	if (stale)
		pool_destroy_held(s, "its provider was replaced");
	else
		log_info(scope, "sandbox released into the warm pool");
	pthread_mutex_unlock(&s->scope);
	return 0;
}

struct sbx *pool_find_active(const char *user, const char *thread)
{
	char token[SCOPE_TOKEN_LEN + 1];
	struct sbx *s;

	if (names_scope_token(user, thread, token))
		return NULL;
	lock_acquire(&pool.lock);
	s = pool_lookup_locked(token);
	if (s && s->state == SBX_ACTIVE && !strcmp(s->user, user) && !strcmp(s->thread, thread))
		s->refs++;
	else
		s = NULL;
	lock_release(&pool.lock);
	return s;
}

void pool_each_active(const char *user, void (*fn)(struct sbx *s, void *arg), void *arg)
{
	lock_acquire(&pool.lock);
	for (int i = 0; i < POOL_BUCKETS; i++)
		for (struct sbx *s = pool.table[i]; s; s = s->next)
			if ((s->state == SBX_ACTIVE || s->reserved) && !strcmp(s->user, user))
				fn(s, arg);
	lock_release(&pool.lock);
}

bool pool_user_has_active(const char *user)
{
	bool found = false;

	lock_acquire(&pool.lock);
	for (int i = 0; i < POOL_BUCKETS && !found; i++)
		for (struct sbx *s = pool.table[i]; s && !found; s = s->next)
			if ((s->state == SBX_ACTIVE || s->state == SBX_CREATING || s->reserved) && !strcmp(s->user, user))
				found = true;
	lock_release(&pool.lock);
	return found;
}

int pool_exec(struct sbx *s, const struct sbx_exec_spec *spec, struct sbx_exec **out)
{
	enum sbx_err e = SBX_ERR_GONE;

	pthread_mutex_lock(&s->scope);
	if (__atomic_load_n(&s->frozen, __ATOMIC_ACQUIRE)) {
		log_warn(s->token, "job %s: the sandbox is frozen: thaw it first", spec->job_name);
		e = SBX_ERR_BUSY;
	} else if (pool_state(s, NULL) == SBX_ACTIVE && s->box) {
		e = sbx_exec_start(s->box, spec, out);
	}
	pthread_mutex_unlock(&s->scope);
	return sbx_err_errno(e);
}

int pool_exec_reattach(struct sbx *s, const char *job_dir, struct sbx_exec **out)
{
	enum sbx_err e = SBX_ERR_GONE;
	enum sbx_state st;

	pthread_mutex_lock(&s->scope);
	st = pool_state(s, NULL);
	if ((st == SBX_ACTIVE || st == SBX_WARM) && s->box)
		e = sbx_exec_reattach(s->box, job_dir, out);
	pthread_mutex_unlock(&s->scope);
	return sbx_err_errno(e);
}

struct sbx_box *pool_box(struct sbx *s)
{
	struct sbx_box *box;

	lock_acquire(&pool.lock);
	box = sbx_box_get(s->box);
	lock_release(&pool.lock);
	return box;
}

int pool_scoped(struct sbx *s, int (*fn)(struct sbx *s, struct sbx_box *box, void *arg), void *arg)
{
	int r = ENOENT;

	pthread_mutex_lock(&s->scope);
	if (pool_state(s, NULL) == SBX_ACTIVE && s->box)
		r = fn(s, s->box, arg);
	pthread_mutex_unlock(&s->scope);
	return r;
}

int pool_kill_all(struct sbx *s)
{
	enum sbx_err e = SBX_ERR_GONE;

	pthread_mutex_lock(&s->scope);
	if (pool_state(s, NULL) == SBX_ACTIVE && s->box)
		e = sbx_kill_all(s->box);
	pthread_mutex_unlock(&s->scope);
	return sbx_err_errno(e);
}

void pool_exec_cleanup(struct sbx *s, const char *job_dir, const char *job_name)
{
	struct sbx_box *box = pool_box(s);

	if (box) {
		sbx_exec_cleanup(box, job_dir, job_name);
		sbx_box_put(box);
	}
}

int pool_status_json(struct sbx *s, struct buf *out)
{
	char created[32], acquired[32];
	json_t *o, *skills;

	lock_acquire(&pool.lock);
	static const char *names[] = { "none", "creating", "active", "warm", "destroying" };
	util_iso8601(s->created_at, created);
	util_iso8601(s->acquired_at, acquired);
	skills = json_pack("{s:s,s:i,s:i,s:n}", "state", "mounted", "generation_written", 0, "generation_synced", 0,
		"last_error");
	bool frozen = s->state == SBX_ACTIVE && __atomic_load_n(&s->frozen, __ATOMIC_ACQUIRE);
	o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:s,s:o}", "id", s->token, "user", s->user, "thread",
		s->thread, "provider", s->prov ? s->prov->name : "none", "state", frozen ? "frozen" : s->reserved ? "creating" : names[s->state], "created_at",
		created, "acquired_at", acquired, "remote_id", s->box ? s->box->remote_id : "", "uid", (int)s->uid,
		"network_mode", s->cfg ? config_net_mode_name(s->cfg->net_mode) : "open", "skills", skills);
	for (int i = 0; o && skills && i < POOL_MAX_HOOKS && pool_hooks[i]; i++)
		if (pool_hooks[i]->status)
			pool_hooks[i]->status(s, o);
	if (o)
		json_object_set_new(o, "frozen", json_boolean(frozen));
	if (o)
		sbx_box_status(s->box, o);
	if (o && s->box && s->box->note[0])
		json_object_set_new(o, "note", json_string(s->box->note));
	if (o && s->last_event[0])
		json_object_set_new(o, "last_event", json_string(s->last_event));
	if (o && s->box)
		json_object_set_new(o, "from_spare", json_boolean(s->from_spare));
	lock_release(&pool.lock);
	return json_to_buf(o, out);
}

void pool_stats(struct pool_stats *st)
{
	lock_acquire(&pool.lock);
	*st = pool.st;
	st->provider = pool.prov->name;
	st->replicas = pool.cfg->replicas;
	st->idle_timeout = pool.cfg->idle_timeout;
	st->idle_check_interval = pool.cfg->idle_check_interval;
	st->active = st->warm = st->creating = 0;
	spares_stats(&st->spares);
	for (int i = 0; i < POOL_BUCKETS; i++)
		for (struct sbx *s = pool.table[i]; s; s = s->next) {
			st->active += s->state == SBX_ACTIVE;
			st->warm += s->state == SBX_WARM;
			st->creating += s->state == SBX_CREATING || (s->reserved && s->state != SBX_ACTIVE);
		}
	lock_release(&pool.lock);
}

struct sbx_config *pool_config(void)
{
	struct sbx_config *c;

	lock_acquire(&pool.lock);
	c = config_get(pool.cfg);
	lock_release(&pool.lock);
	return c;
}

struct sbx_config *pool_sbx_config(struct sbx *s)
{
	struct sbx_config *c = NULL;

	lock_acquire(&pool.lock);
	if (s->cfg)
		c = config_get(s->cfg);
	lock_release(&pool.lock);
	return c;
}

/* ---- start, adoption, reload, shutdown ---------------------------------------- */

/* Adopt what a record (or, with discovered, the provider) says exists.
 * A record "creating", or a discovered sandbox without any record, is a
 * create cut short by a crash: never trusted, destroyed. */
static void pool_adopt_one(const char *user, const char *thread, bool discovered)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct pool_dirs d = { 0 };
	struct sbx_spec spec;
	struct sbx_box *box = NULL;
	json_t *j = NULL;
	struct sbx *s;
	char scope[NAMES_SCOPE_MAX];
	const char *pname, *state;

	snprintf(scope, sizeof(scope), "%s/%s", user, thread);
	lock_acquire(&pool.lock);
	s = pool_entry_locked(user, thread);
	lock_release(&pool.lock);
	if (!s || (s->box && discovered))
		return; /* already adopted from its record */
	if (!layout_file(&path, s->thread_dir, "sandbox.json"))
		j = json_read_file(path.ptr);
	if (!j && !discovered)
		goto out; /* no sandbox recorded: data only */
	pname = j ? json_string_value(json_object_get(j, "provider")) : pool.prov->name;
	if (!pname || strcmp(pname, pool.prov->name)) {
		log_warn(scope, "recorded sandbox of provider '%s' is not this provider's: left alone",
			pname ? pname : "?");
		goto out;
	}
	state = j ? json_string_value(json_object_get(j, "state")) : "creating";
	if (pool_dirs(s, &d) == 0) {
		pool_spec(s, &d, pool.cfg, &spec);
		if (pool.prov->ops->adopt(&spec, &box) != SBX_OK) {
			pool_unsave(s);
		} else if (state && !strcmp(state, "creating")) {
			/* a create cut short by a crash: never trust a half-made sandbox */
			log_warn(scope, "a create was interrupted (daemon killed?): destroying what it left");
			pool.prov->ops->destroy(box);
			sbx_box_put(box);
			pool_unsave(s);
		} else {
			pthread_mutex_lock(&s->scope);
			pool_set_box_held(s, box, pool.prov, config_get(pool.cfg));
			pool_hooks_up(s, true);
			pthread_mutex_unlock(&s->scope);
			s->created_at = json_real_value(json_object_get(j, "created_at"));
			lock_acquire(&pool.lock);
			s->state = SBX_WARM;
			s->warm_since_ms = util_now_ms();
			pool.st.adopted++;
			lock_release(&pool.lock);
			log_info(scope, "adopted into the warm pool (%s%s)", box->remote_id,
				pool.prov->ops->health(box) ? ", stale: recreated on reclaim" : "");
		}
	}
	pool_dirs_free(&d);
out:
	json_decref(j);
	buf_free(&path);
}

static void pool_discovered(const char *user, const char *thread, void *arg)
{
	(void)arg;
	if (names_valid(user) && names_valid(thread))
		pool_adopt_one(user, thread, true);
}

static void pool_scan(const char *state_dir)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	DIR *users, *threads;
	struct dirent *u, *t;

	if (buf_addf(&path, "%s/users", state_dir) || !(users = opendir(path.ptr))) {
		buf_free(&path);
		return;
	}
	while ((u = readdir(users))) {
		if (!names_valid(u->d_name))
			continue;
		buf_reset(&path);
		if (buf_addf(&path, "%s/users/%s/threads", state_dir, u->d_name) || !(threads = opendir(path.ptr)))
			continue;
		while ((t = readdir(threads)))
			if (names_valid(t->d_name))
				pool_adopt_one(u->d_name, t->d_name, false);
		closedir(threads);
	}
	closedir(users);
	buf_free(&path);
}

int pool_init(struct sbx_config *cfg, char *err, size_t errlen)
{
	const struct sbx_provider *prov = provider_for(cfg);

	if (!prov) {
		snprintf(err, errlen, "use: provider '%s' is not built into this sbxfs (available: %s)", cfg->use,
			provider_names());
		return -1;
	}
	if (prov->ops->init(cfg, err, errlen))
		return -1;
	if (names_state_id(cfg->state_dir, pool.state_id)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	pool.cfg = config_get(cfg);
	pool.prov = prov;
	sbx_set_gone_hook(pool_gone_wake);
	pool_scan(cfg->state_dir);
	/* sandboxes the provider knows of that no record names (a crash
	 * between a create and its record): adopted the same way */
	if (prov->ops->discover && prov->ops->discover(cfg, pool.state_id, pool_discovered, NULL))
		log_warn("pool", "provider %s: discovery of its sandboxes failed", prov->name);
	pool.stopping = false;
	spares_start(prov, cfg, pool.state_id, pool_count_scopes);
	if (pthread_create(&pool.reaper, NULL, pool_reaper_main, NULL)) {
		snprintf(err, errlen, "cannot start the idle reaper");
		return -1;
	}
	pool.reaper_running = true;
	return 0;
}

int pool_reload(struct sbx_config *cfg, char *err, size_t errlen)
{
	const struct sbx_provider *prov = provider_for(cfg), *old;
	struct sbx_config *oldcfg;
	struct sbx *victim;

	if (!prov) {
		snprintf(err, errlen, "use: provider '%s' is not built in", cfg->use);
		return -1;
	}
	lock_acquire(&pool.lock);
	old = pool.prov;
	lock_release(&pool.lock);
	/* a provider never used so far gets its start of day first (the
	 * reload thread is the only writer of pool.prov: no race with this) */
	if (prov != old && prov->ops->init(cfg, err, errlen))
		return -1;
	lock_acquire(&pool.lock);
	old = pool.prov;
	oldcfg = pool.cfg;
	pool.cfg = config_get(cfg);
	pool.prov = prov;
	pthread_cond_signal(&pool.reaper_cond);
	lock_release(&pool.lock);
	config_put(oldcfg);
	spares_reconfigure(prov, cfg);
	if (old == prov)
		return 0;
	/* The old provider's warm sandboxes go now; active ones on release. */
	for (;;) {
		lock_acquire(&pool.lock);
		victim = NULL;
		for (int i = 0; i < POOL_BUCKETS && !victim; i++)
			for (struct sbx *s = pool.table[i]; s && !victim; s = s->next)
				if (s->state == SBX_WARM && s->prov == old && !pthread_mutex_trylock(&s->scope)) {
					s->state = SBX_DESTROYING;
					victim = s;
				}
		lock_release(&pool.lock);
		if (!victim)
			break;
		pool_destroy_held(victim, "provider changed by reload");
		pthread_mutex_unlock(&victim->scope);
	}
	return 0;
}

/* Shutdown: the next sandbox to destroy, its scope locked and marked
 * DESTROYING; NULL when none is left.  The scan resumes at the bucket of
 * the last victim (*cursor, under pool.lock), so a thousand sandboxes are
 * not a million visits; a final pass from the start finds those skipped
 * because their scope was busy. */
static struct sbx *pool_next_victim_locked(int *cursor)
{
	lock_assert_held(&pool.lock);
	for (int pass = 0; pass < 2; pass++) {
		for (int i = pass ? 0 : *cursor; i < POOL_BUCKETS; i++)
			for (struct sbx *s = pool.table[i]; s; s = s->next) {
				if (!s->box || (s->state != SBX_ACTIVE && s->state != SBX_WARM) ||
				    pthread_mutex_trylock(&s->scope))
					continue;
				if (!s->box || (s->state != SBX_ACTIVE && s->state != SBX_WARM)) {
					pthread_mutex_unlock(&s->scope);
					continue;
				}
				s->state = SBX_DESTROYING;
				*cursor = i;
				return s;
			}
		if (*cursor == 0)
			break;
	}
	return NULL;
}

static int pool_shutdown_cursor; /* protected by pool.lock */

/* Shutdown worker: destroy sandboxes until none is left.  A few of these
 * run at once, because destroying waits for each sandbox's processes to be
 * gone and a thousand sandboxes one after the other take seconds. */
static void *pool_shutdown_worker(void *arg)
{
	(void)arg;
	for (;;) {
		lock_acquire(&pool.lock);
		struct sbx *victim = pool_next_victim_locked(&pool_shutdown_cursor);
		lock_release(&pool.lock);
		if (!victim)
			return NULL;
		pool_destroy_held(victim, "shutdown");
		pthread_mutex_unlock(&victim->scope);
	}
}

void pool_stop(void)
{
	spares_stop();
	lock_acquire(&pool.lock);
	pool.stopping = true;
	pthread_cond_signal(&pool.reaper_cond);
	lock_release(&pool.lock);
}

static void pool_provider_shutdown(void)
{
	if (pool.prov && pool.prov->ops->shutdown)
		pool.prov->ops->shutdown();
}

void pool_shutdown(bool keep)
{
	pthread_t workers[8];
	int n = 0;

	pool_stop();
	lock_acquire(&pool.lock);
	keep = keep || (pool.cfg && pool.cfg->keep_on_exit);
	lock_release(&pool.lock);
	if (pool.reaper_running)
		pthread_join(pool.reaper, NULL);
	pool.reaper_running = false;
	spares_shutdown(keep);
	if (keep) {
		for (int i = 0; i < POOL_BUCKETS; i++)
			for (struct sbx *s = pool.table[i]; s; s = s->next) {
				pthread_mutex_lock(&s->scope);
				struct sbx_box *box = s->box;
				pool_set_box_held(s, NULL, s->prov, s->cfg);
				sbx_box_put(box); /* the sandbox keeps running */
				pthread_mutex_unlock(&s->scope);
			}
		log_info("pool", "sandboxes left running for the next start to adopt");
		pool_provider_shutdown();
		return;
	}
	/* every sandbox told to end first (a kill each), then destroyed by the
	 * workers: their exits run meanwhile instead of one after the other */
	for (int i = 0; i < POOL_BUCKETS; i++)
		for (struct sbx *s = pool.table[i]; s; s = s->next) {
			pthread_mutex_lock(&s->scope);
			if (s->box && s->box->prov->ops->stop_soon && (s->state == SBX_ACTIVE || s->state == SBX_WARM))
				s->box->prov->ops->stop_soon(s->box);
			pthread_mutex_unlock(&s->scope);
		}
	lock_acquire(&pool.lock);
	pool_shutdown_cursor = 0;
	lock_release(&pool.lock);
	while (n < 8 && !pthread_create(&workers[n], NULL, pool_shutdown_worker, NULL))
		n++;
	if (n == 0)
		pool_shutdown_worker(NULL);
	while (n > 0)
		pthread_join(workers[--n], NULL);
	/* No acquire can be in flight: the work pool has drained before this. */
	pool_provider_shutdown();
}

void pool_clear(void)
{
	for (int i = 0; i < POOL_BUCKETS; i++) {
		while (pool.table[i]) {
			struct sbx *s = pool.table[i];

			pool.table[i] = s->next;
			if (s->refs > 1)
				log_warn("pool", "%s/%s: still referenced at exit", s->user, s->thread);
			sbx_box_put(s->box);
			config_put(s->cfg);
			if (s->upper && pool_upper_free)
				pool_upper_free(s->upper);
			pthread_mutex_destroy(&s->scope);
			free(s->thread_dir);
			free(s);
		}
	}
	config_put(pool.cfg);
	pool.cfg = NULL;
	pool.prov = NULL;
	memset(&pool.st, 0, sizeof(pool.st));
	pool.stopping = false;
}
