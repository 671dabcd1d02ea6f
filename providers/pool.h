/* SPDX-License-Identifier: MIT */
/*
 * pool.h - the sandbox lifecycle (DESIGN §4): registry of scopes, per-scope
 * serialisation, the warm pool with its replicas soft cap and idle reaper,
 * adoption on start, reload and shutdown.
 *
 * One struct sbx per scope (user, thread) that the daemon knows of, active,
 * warm or being created.  Its fields are split by lock:
 *   - pool.lock (a mutex) protects the registry, every sbx's state,
 *     timestamps, refs and generation;
 *   - sbx->scope (a mutex) serialises acquire, release, exec start and
 *     destroy of one scope and is held across provider calls;
 *   - box, prov, cfg and the status strings change only with both held, so
 *     a reader holding either sees them consistent: status is rendered
 *     under pool.lock alone and never waits behind a create or destroy.
 * Locks: sbx->scope and pool.lock, in the order docs/architecture.md
 * ("Lock order", the one place it is written) gives; pool.lock is never held
 * across a provider call and only trylocks a scope lock.
 *
 * Every pool call that may block on a provider (acquire, release, exec,
 * reattach, kill_all, reload, shutdown) must run off the FUSE workers.
 *
 * The FUSE layer holds references (pool_get/pool_put) to the sbx of every
 * sandbox directory it shows.
 */
#ifndef SBX_POOL_H
#define SBX_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/buf.h"
#include "../common/config.h"
#include "../common/names.h"
#include "provider.h"
#include "spares.h"

enum sbx_state {
	SBX_NONE,       /* known scope, no sandbox */
	SBX_CREATING,   /* acquire in progress */
	SBX_ACTIVE,     /* acquired: its directory is visible */
	SBX_WARM,       /* released, still running, reclaimable */
	SBX_DESTROYING, /* being destroyed (eviction, reaper, shutdown) */
};

struct sbx {
	char user[NAME_MAX_LEN + 1];
	char thread[NAME_MAX_LEN + 1];
	char token[SCOPE_TOKEN_LEN + 1];
	char *thread_dir; /* state_dir/users/<user>/threads/<thread>, immutable */
	uid_t uid;        /* the sandbox's host uid, immutable after first acquire */
	gid_t gid;

	/* protected by pool.lock */
	enum sbx_state state;
	int refs;        /* the registry's own ref + every holder */
	unsigned gen;    /* incarnation: bumped at each acquire */
	/* an asynchronous acquire holds the scope (pool_reserve): its mkdir
	 * was answered, the create runs or waits for the scope lock; cleared
	 * by pool_acquire_reserved in the same step that makes it ACTIVE or
	 * NONE, so the scope is never seen free in between */
	bool reserved;
	/* the configuration in force when the reservation's mkdir was answered:
	 * the create uses it, not a configuration reloaded meanwhile */
	struct sbx_config *reserved_cfg;
	double created_at, acquired_at;
	uint64_t warm_since_ms;
	struct sbx *next; /* hash chain */

	pthread_mutex_t scope;
	/* written under scope and pool.lock, read under either */
	struct sbx_box *box;               /* the pool's reference */
	const struct sbx_provider *prov;
	struct sbx_config *cfg;            /* the config this sandbox was created with */
	char last_event[320];              /* e.g. "recreated: the warm sandbox failed its health check" */
	bool from_spare;                   /* this incarnation is a claimed spare (status "from_spare") */

	/* The layer above's own state of this sandbox (fs/: its view and job
	 * count, struct fs_sbx in fs/fsbx.h), opaque to the pool: installed
	 * once (pool_upper_install, atomic), freed at pool_clear by the
	 * function given to pool_set_upper_free; what it holds is under the
	 * layer above's own locks. */
	void *upper;
	/* atomic: paused by the `ctl` freeze (sbxsnap.c), written with the scope
	 * lock held; a job cannot start while it is set (EBUSY) */
	int frozen;
};

struct pool_stats {
	const char *provider;
	unsigned active, warm, creating;
	int replicas;
	long idle_timeout, idle_check_interval;
	uint64_t evictions, reaps, errors, adopted;
	uint64_t errors_by_kind[3]; /* pool_error_kinds: create, state_dir, other */
	double last_error_at;       /* wall time of the last pool_note_error, 0 = none */
	double last_create_at;      /* wall time of the last successful create (cold acquire), 0 = none */
	uint64_t acquire_hist[2][13]; /* [cold, warm][bucket], cumulative-ready counts */
	double acquire_sum[2];
	uint64_t acquire_count[2];
	char last_error[512]; /* "" or JSON object text */
	struct spares_stats spares; /* pool.prewarm: spares ready, claims (spares.h) */
};

extern const double pool_hist_bounds[12];
/* The kinds of pool_note_error() that errors_by_kind counts ("other": any else). */
extern const char *const pool_error_kinds[3];

/* What another module does when a sandbox comes to life or ends (the
 * network policy, net/net.h; the skills sync, skills/skills.h):
 *   up       after a create (adopted false: a nonzero return fails the
 *            create, which then leaves nothing; the hooks that ran before
 *            get their down) or an adoption (true);
 *   down     before a destroy (hooks in reverse order);
 *   release  at rmdir, while the sandbox is still active, before it is
 *            parked or destroyed (e.g. drain a skills sync);
 *   reclaim  after a warm sandbox was reclaimed (acquired again);
 * all with the sandbox's scope lock held and s->box, s->prov and s->cfg
 * set, on a work thread (or the main thread at start and exit); they may
 * block.
 *   status   add to the sandbox's status JSON (the object; its "skills"
 *            object is there to fill); called with pool.lock held: MUST NOT
 *            block or take a lock that is held across a call out.
 * Any slot may be NULL.  Added before pool_init, removed after pool_shutdown. */
struct json_t;
struct pool_hooks {
	int (*up)(struct sbx *s, bool adopted);
	void (*down)(struct sbx *s);
	void (*release)(struct sbx *s);
	void (*reclaim)(struct sbx *s);
	void (*status)(struct sbx *s, struct json_t *status);
};

/* 0, or -1 when the (small, fixed) list is full. */
int pool_add_hooks(const struct pool_hooks *h);
/* Install p as s->upper unless one is there: the one installed (p, or the
 * earlier one: then the caller frees p).  Any thread, no lock. */
void *pool_upper_install(struct sbx *s, void *p);
/* How pool_clear frees an entry's upper (NULL: it is left alone). */
void pool_set_upper_free(void (*fn)(void *upper));
void pool_remove_hooks(const struct pool_hooks *h);

/* Start: pick the provider, load uid allocations, adopt what is running.
 * Returns 0 or -1 with err filled. */
int pool_init(struct sbx_config *cfg, char *err, size_t errlen);
/* Acquire (mkdir).  On success returns 0 and a held reference in *out. */
int pool_acquire(const char *user, const char *thread, struct sbx **out);
/* Asynchronous acquire (acquire: async, fs/acquire.c), in two steps.
 * pool_reserve, on a FUSE worker (never blocks: pool.lock only): claim the
 * scope for one acquire, so a second mkdir gets EEXIST, the user's cap
 * counts it (EDQUOT) and ESHUTDOWN once stopping; 0 and a held reference
 * in *out; the configuration in force now is the create's.  pool_acquire_reserved, on a work thread: pool_acquire for the
 * reservation (its errno, or 0: the sandbox is active); the reservation
 * ends either way.  pool_unreserve: give it up without acquiring. */
int pool_reserve(const char *user, const char *thread, struct sbx **out);
int pool_acquire_reserved(struct sbx *s);
void pool_unreserve(struct sbx *s);
/* The sandbox of a scope that has a directory (active, or reserved:
 * *creating says which), referenced, or NULL. */
struct sbx *pool_find_shown(const char *user, const char *thread, bool *creating);
/* Release (rmdir): park in the warm pool.  0 or errno. */
int pool_release(struct sbx *s);
/* The active sandbox of a scope, referenced, or NULL. */
struct sbx *pool_find_active(const char *user, const char *thread);
/* Call fn for each active or reserved sandbox of user (under pool.lock: fn
 * must not block). */
void pool_each_active(const char *user, void (*fn)(struct sbx *s, void *arg), void *arg);
bool pool_user_has_active(const char *user);
void pool_get(struct sbx *s);
void pool_put(struct sbx *s);
/* Snapshot of state and generation. */
enum sbx_state pool_state(struct sbx *s, unsigned *gen);
/* The sandbox's status JSON (DESIGN §3). */
int pool_status_json(struct sbx *s, struct buf *out);
/* Run a job in an active sandbox (serialised with acquire/release).  0 and
 * a handle, or an errno. */
int pool_exec(struct sbx *s, const struct sbx_exec_spec *spec, struct sbx_exec **out);
/* A handle on a job still running in the (active or warm) sandbox after a
 * restart: 0 and *out, ENOENT when it no longer runs. */
int pool_exec_reattach(struct sbx *s, const char *job_dir, struct sbx_exec **out);
/* The provider's clean-up of a removed job slot. */
void pool_exec_cleanup(struct sbx *s, const char *job_dir, const char *job_name);
/* Run fn(s, box, arg) with s's scope lock held while s is active, so it
 * never overlaps an acquire, release, exec start or destroy of the scope
 * (DESIGN §4: a skills sync).  fn's result, or ENOENT (not active).  Work
 * threads only: it may wait behind a create. */
int pool_scoped(struct sbx *s, int (*fn)(struct sbx *s, struct sbx_box *box, void *arg), void *arg);
/* The sandbox's box, referenced (sbx_box_put it), while it has one. */
struct sbx_box *pool_box(struct sbx *s);
/* The sandbox's ctl "kill": end every process of an active sandbox but its
 * init (serialised with acquire/release).  0 or errno. */
int pool_kill_all(struct sbx *s);
void pool_stats(struct pool_stats *st);
/* Record a failure for /sbx/.status and the error counter. */
void pool_note_error(const char *scope, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* SIGHUP: switch to cfg for new acquires (takes a reference).  A new
 * provider is initialised first; 0, or -1 with err (nothing changed). */
int pool_reload(struct sbx_config *cfg, char *err, size_t errlen);
struct sbx_config *pool_config(void); /* referenced; config_put() it */
/* The deadline of slow work items (runtime/work.h) other than a request on
 * remote files: a create may take ready_timeout plus its API calls, so
 * ready_timeout + 4 x request_timeout + 60 s, in ms: never shorter than
 * what the providers' own bounds allow, it bounds what would hang. */
long pool_work_timeout_ms(void);
/* The config an active sandbox was created with, referenced, or NULL. */
struct sbx_config *pool_sbx_config(struct sbx *s);
/* Refuse new acquires (ESHUTDOWN) and stop the reaper's passes. */
void pool_stop(void);
/* Unmount/SIGTERM: destroy everything, or leave it running for the next
 * start when keep (a failed start) or keep_on_exit.  No acquire may be in
 * flight. */
void pool_shutdown(bool keep);
/* After pool_shutdown() and once nobody holds a reference: free every
 * entry and the configuration (exit, and unit tests that start again). */
void pool_clear(void);

#endif
