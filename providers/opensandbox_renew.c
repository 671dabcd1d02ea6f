/* SPDX-License-Identifier: MIT */
/*
 * opensandbox_renew.c - the opensandbox provider's renewer: one thread
 * that keeps every live sandbox from expiring and cleans up after creates
 * and deletes that failed; with it the list of live boxes it walks
 * (os.boxes) and the suspects it watches.
 *
 * Why a thread of its own: a sandbox made with a TTL (sandbox_timeout)
 * expires on the server unless renewed, whether the pool holds it active
 * or warm; renewal is due a third of the TTL after the last one (so two can
 * fail before it expires), retried every OS_RENEW_RETRY_MS after a failure;
 * a 404 on renewal reports the box with sbx_box_gone() (the pool
 * invalidates it), a 409 (a sandbox without TTL) ends its renewals.
 *
 * Creates whose outcome is unknown (a timeout, a dropped answer: the server
 * may still make the sandbox after the client gave up) leave a "suspect"
 * scope: the renewer looks for sandboxes of that scope and this state_id
 * that no box holds, every few seconds for OS_SUSPECT_S, and deletes them,
 * so a failed mkdir leaves no remote sandbox behind, even late.  Deletes
 * that failed (server away) are retried the same way.  What is still
 * watched at exit is logged: the next start's discovery removes it.
 *
 * Locks: os.lock (the box list, the suspects, each box's renewal fields) is
 * a leaf: never held across a network call, never with a box's own lock.
 * The renewer takes references on boxes under os.lock (never on a box whose
 * count already reached zero: box_free unlinks it under the same lock) and
 * renews outside it.
 */
#define _GNU_SOURCE
#include "opensandbox_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/log.h"
#include "../common/util.h"

#define OS_SUSPECT_S 180        /* how long an unknown create is watched for a late sandbox */
#define OS_SUSPECTS 64
#define OS_INFLIGHT 128 /* scopes with a create in flight at once (more: every suspect waits) */
#define OS_RENEW_RETRY_MS 5000  /* a renewal that failed (not 404) is tried again this soon */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct obox *boxes; /* protected by lock: every live box (renewal, suspects) */
	struct {
		char token[SCOPE_TOKEN_LEN + 1];
		char id[80]; /* "" when only the scope is known */
		uint64_t until_ms;
		struct sbx_config *cfg; /* referenced */
		char state_id[NAMES_STATE_ID_LEN + 1];
	} suspects[OS_SUSPECTS]; /* protected by lock */
	int n_suspects;
	/* scopes with a create request in flight (os_create_begin): their
	 * sandbox may be on the server before its id is known here */
	struct {
		char token[SCOPE_TOKEN_LEN + 1];
		int n;
	} inflight[OS_INFLIGHT]; /* protected by lock */
	int n_inflight;
	bool inflight_full; /* protected by lock: a begin found no slot (every scope counts as busy) */
	pthread_t renewer;
	bool running, stop; /* protected by lock */
} os = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void *os_renewer(void *arg);

enum sbx_err os_renew_start(char *err, size_t errlen)
{
	bool start;

	pthread_mutex_lock(&os.lock);
	start = !os.running;
	os.stop = false;
	if (start)
		os.running = true;
	pthread_mutex_unlock(&os.lock);
	if (start && pthread_create(&os.renewer, NULL, os_renewer, NULL)) {
		pthread_mutex_lock(&os.lock);
		os.running = false;
		pthread_mutex_unlock(&os.lock);
		snprintf(err, errlen, "opensandbox provider: cannot start the renewer thread");
		return SBX_ERR_NOMEM;
	}
	return SBX_OK;
}

static void os_suspects_clear(void)
{
	for (int i = 0; i < os.n_suspects; i++)
		config_put(os.suspects[i].cfg);
	os.n_suspects = 0;
}

void os_renew_stop(void)
{
	bool join;

	pthread_mutex_lock(&os.lock);
	join = os.running;
	os.stop = true;
	pthread_cond_broadcast(&os.cond);
	pthread_mutex_unlock(&os.lock);
	if (join)
		pthread_join(os.renewer, NULL);
	pthread_mutex_lock(&os.lock);
	os.running = false;
	for (int i = 0; i < os.n_suspects; i++)
		log_warn("opensandbox", "%s: %s could not be checked for a late or undeleted sandbox before exit; the "
					"next start's discovery removes it", os.suspects[i].token,
			os.suspects[i].id[0] ? os.suspects[i].id : "a create of unknown outcome");
	os_suspects_clear();
	pthread_mutex_unlock(&os.lock);
}

/* ---- the box list and suspects ---------------------------------------------------------- */

/* A reference unless the count already reached zero (box_free is on its way). */
static bool obox_tryget(struct obox *ob)
{
	int n = __atomic_load_n(&ob->base.refs, __ATOMIC_RELAXED);

	while (n > 0)
		if (__atomic_compare_exchange_n(&ob->base.refs, &n, n + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return true;
	return false;
}

void os_register(struct obox *ob)
{
	pthread_mutex_lock(&os.lock);
	if (!ob->listed) {
		ob->next = os.boxes;
		os.boxes = ob;
		ob->listed = true;
		ob->next_renew_ms = util_now_ms(); /* the renewer looks at it at once */
	}
	pthread_cond_broadcast(&os.cond);
	pthread_mutex_unlock(&os.lock);
}

void os_unregister(struct obox *ob)
{
	pthread_mutex_lock(&os.lock);
	for (struct obox **p = &os.boxes; *p; p = &(*p)->next)
		if (*p == ob) {
			*p = ob->next;
			break;
		}
	ob->listed = false;
	pthread_mutex_unlock(&os.lock);
}

/* os.lock held: the slot of scope token in inflight, or n_inflight. */
static int os_inflight_find_locked(const char *token)
{
	int i;

	for (i = 0; i < os.n_inflight && strcmp(os.inflight[i].token, token); i++)
		;
	return i;
}

/* A create of scope token is about to ask the server (begin), or has its
 * answer and, if it made a sandbox, that box is registered (end).  In
 * between, the suspect check must not take the scope's new sandbox for a
 * late one of an earlier failed create. */
void os_create_begin(const char *token)
{
	int i;

	pthread_mutex_lock(&os.lock);
	i = os_inflight_find_locked(token);
	if (i < os.n_inflight) {
		os.inflight[i].n++;
	} else if (os.n_inflight < OS_INFLIGHT) {
		snprintf(os.inflight[i].token, sizeof(os.inflight[i].token), "%s", token);
		os.inflight[i].n = 1;
		os.n_inflight++;
	} else {
		os.inflight_full = true;
	}
	pthread_mutex_unlock(&os.lock);
}

void os_create_end(const char *token)
{
	int i;

	pthread_mutex_lock(&os.lock);
	i = os_inflight_find_locked(token);
	if (i < os.n_inflight && --os.inflight[i].n == 0)
		os.inflight[i] = os.inflight[--os.n_inflight];
	if (os.n_inflight == 0)
		os.inflight_full = false;
	pthread_mutex_unlock(&os.lock);
}

/* os.lock held: has scope token a create in flight? */
static bool os_inflight_locked(const char *token)
{
	return os.inflight_full || os_inflight_find_locked(token) < os.n_inflight;
}

/* Watch scope token (and id, when known) for a sandbox nobody holds: an
 * unknown create, or a delete that failed. */
void os_suspect(const struct sbx_config *cfg, const char *token, const char *state_id, const char *id)
{
	pthread_mutex_lock(&os.lock);
	if (os.n_suspects < OS_SUSPECTS) {
		int i = os.n_suspects++;
		snprintf(os.suspects[i].token, sizeof(os.suspects[i].token), "%s", token);
		snprintf(os.suspects[i].state_id, sizeof(os.suspects[i].state_id), "%s", state_id);
		snprintf(os.suspects[i].id, sizeof(os.suspects[i].id), "%s", id ? id : "");
		os.suspects[i].until_ms = util_now_ms() + OS_SUSPECT_S * 1000ULL;
		os.suspects[i].cfg = config_get((struct sbx_config *)cfg);
		pthread_cond_broadcast(&os.cond);
	} else {
		log_warn("opensandbox", "%s: too many sandboxes to watch: %s may be left on the server until the next "
					"start's discovery", token, id && id[0] ? id : "a create of unknown outcome");
	}
	pthread_mutex_unlock(&os.lock);
}

/* ---- the renewer ------------------------------------------------------------------------------ */

/* When a box's expiry is renewed: a third of the TTL after the last
 * renewal (so two renewals can fail before it expires), at most every
 * 5 s when failing. */
static uint64_t renew_period_ms(const struct sbx_config *cfg)
{
	uint64_t p = (uint64_t)cfg->sandbox_timeout * 1000 / 3;

	return p < 1000 ? 1000 : p;
}

static void os_renew_one(struct obox *ob)
{
	struct osapi_server srv;
	char err[OSAPI_ERR_LEN];
	double got = 0, at = util_wall_now() + (double)ob->cfg->sandbox_timeout;
	char scope[NAMES_SCOPE_MAX];
	enum sbx_err e;

	pthread_mutex_lock(&os.lock); /* a claim may rename it meanwhile */
	memcpy(scope, ob->scope, sizeof(scope));
	pthread_mutex_unlock(&os.lock);
	os_server(ob->cfg, &srv, scope);
	e = osapi_renew(&srv, ob->id, at, &got, err, sizeof(err));
	pthread_mutex_lock(&os.lock);
	if (!e) {
		ob->expires_at = got;
		ob->renew_err[0] = '\0';
		ob->next_renew_ms = util_now_ms() + renew_period_ms(ob->cfg);
	} else if (e == SBX_ERR_EXIST) {
		/* 409: the sandbox has no TTL (made without one): nothing to renew */
		ob->next_renew_ms = UINT64_MAX;
	} else {
		snprintf(ob->renew_err, sizeof(ob->renew_err), "%s", err);
		ob->next_renew_ms = util_now_ms() + OS_RENEW_RETRY_MS;
	}
	pthread_mutex_unlock(&os.lock);
	if (e == SBX_ERR_GONE)
		sbx_box_gone(&ob->base, "the remote sandbox %s is gone (expired or deleted: 404 on renewal)", ob->id);
	else if (e && e != SBX_ERR_EXIST)
		log_warn(scope, "opensandbox: renewal of %s failed: %s", ob->id, err);
}

static void os_check_suspect(const char *token, const char *state_id, const char *id, struct sbx_config *cfg,
	bool *settled)
{
	struct osapi_kv meta[] = { { OS_META_STATE_ID, state_id }, { OS_META_SCOPE, token } };
	struct osapi_server srv;
	struct os_pick p = { "", 0, { "" } };
	char err[OSAPI_ERR_LEN];

	*settled = false;
	os_server(cfg, &srv, "opensandbox");
	if (id[0]) { /* a delete that failed: again */
		if (!osapi_delete(&srv, id, err, sizeof(err))) {
			log_info("opensandbox", "sandbox %s deleted (its delete had failed before)", id);
			*settled = true;
		}
		return;
	}
	if (osapi_list(&srv, meta, 2, NULL, os_pick_one, &p, err, sizeof(err)))
		return;
	for (int i = 0; i < p.n && i < 16; i++) {
		bool held = false;

		pthread_mutex_lock(&os.lock);
		/* a create of the scope in flight: what the list shows may be its
		 * sandbox, whose id it does not have yet (looked at again later) */
		held = os_inflight_locked(token);
		for (struct obox *ob = os.boxes; ob; ob = ob->next)
			held |= !strcmp(ob->id, p.all[i]);
		pthread_mutex_unlock(&os.lock);
		if (held)
			continue; /* the scope's live sandbox (a later mkdir made it, or is making it) */
		if (!osapi_delete(&srv, p.all[i], err, sizeof(err)))
			log_warn("opensandbox", "%s: sandbox %s appeared after its create had failed: deleted", token,
				p.all[i]);
	}
}

static void *os_renewer(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&os.lock);
	while (!os.stop) {
		struct obox *due[64];
		int n = 0, ns = 0;
		uint64_t now = util_now_ms(), next = now + 60000;
		struct {
			char token[SCOPE_TOKEN_LEN + 1], state_id[NAMES_STATE_ID_LEN + 1], id[80];
			struct sbx_config *cfg;
		} sus[8];
		struct timespec ts;

		for (struct obox *ob = os.boxes; ob; ob = ob->next) {
			if (ob->cfg->sandbox_timeout <= 0 || sbx_box_is_gone(&ob->base))
				continue;
			if (ob->next_renew_ms <= now && n < 64 && obox_tryget(ob))
				due[n++] = ob;
			else if (ob->next_renew_ms > now && ob->next_renew_ms < next)
				next = ob->next_renew_ms;
		}
		/* suspects: checked every few seconds until they expire */
		for (int i = 0; i < os.n_suspects;) {
			if (os.suspects[i].until_ms <= now) {
				if (os.suspects[i].id[0])
					log_warn("opensandbox", "sandbox %s could not be deleted: the next start's discovery "
								"removes it", os.suspects[i].id);
				config_put(os.suspects[i].cfg);
				os.suspects[i] = os.suspects[--os.n_suspects];
				continue;
			}
			if (ns < 8) {
				memcpy(sus[ns].token, os.suspects[i].token, sizeof(sus[ns].token));
				memcpy(sus[ns].state_id, os.suspects[i].state_id, sizeof(sus[ns].state_id));
				memcpy(sus[ns].id, os.suspects[i].id, sizeof(sus[ns].id));
				sus[ns].cfg = config_get(os.suspects[i].cfg);
				ns++;
			}
			i++;
		}
		if (os.n_suspects && next > now + 3000)
			next = now + 3000;
		pthread_mutex_unlock(&os.lock);
		for (int i = 0; i < n; i++) {
			os_renew_one(due[i]);
			sbx_box_put(&due[i]->base);
		}
		for (int i = 0; i < ns; i++) {
			bool settled;
			os_check_suspect(sus[i].token, sus[i].state_id, sus[i].id, sus[i].cfg, &settled);
			if (settled) {
				pthread_mutex_lock(&os.lock);
				for (int k = 0; k < os.n_suspects; k++)
					if (!strcmp(os.suspects[k].id, sus[i].id) && !strcmp(os.suspects[k].token, sus[i].token)) {
						config_put(os.suspects[k].cfg);
						os.suspects[k] = os.suspects[--os.n_suspects];
						break;
					}
				pthread_mutex_unlock(&os.lock);
			}
			config_put(sus[i].cfg);
		}
		pthread_mutex_lock(&os.lock);
		if (n || os.stop)
			continue; /* renewals moved the schedule: look again at once */
		clock_gettime(CLOCK_REALTIME, &ts); /* os.cond waits on the realtime clock */
		{
			uint64_t wait = next > util_now_ms() ? next - util_now_ms() : 0;
			ts.tv_sec += (time_t)(wait / 1000);
			ts.tv_nsec += (long)(wait % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
		}
		pthread_cond_timedwait(&os.cond, &os.lock, &ts);
	}
	pthread_mutex_unlock(&os.lock);
	return NULL;
}

void os_set_scope(struct obox *ob, const char *scope)
{
	pthread_mutex_lock(&os.lock);
	snprintf(ob->scope, sizeof(ob->scope), "%s", scope);
	pthread_mutex_unlock(&os.lock);
}

bool os_holds(const char *id)
{
	bool held = false;

	pthread_mutex_lock(&os.lock);
	for (struct obox *ob = os.boxes; ob && !held; ob = ob->next)
		held = !strcmp(ob->id, id);
	pthread_mutex_unlock(&os.lock);
	return held;
}

void os_renew_now(struct obox *ob)
{
	pthread_mutex_lock(&os.lock);
	ob->next_renew_ms = util_now_ms();
	pthread_cond_broadcast(&os.cond);
	pthread_mutex_unlock(&os.lock);
}

void os_renew_status(struct obox *ob, double *expires_at, char *err, size_t errlen)
{
	pthread_mutex_lock(&os.lock);
	*expires_at = ob->expires_at;
	snprintf(err, errlen, "%s", ob->renew_err);
	pthread_mutex_unlock(&os.lock);
}
