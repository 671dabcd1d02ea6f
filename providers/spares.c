/* SPDX-License-Identifier: MIT */
/*
 * spares.c - pre-warmed sandboxes (spares.h): the list of ready spares,
 * their background creates, claim, eviction, reaping, adoption and end.
 *
 * Why a module of its own: a spare has no scope, so none of the pool's
 * per-scope machinery (registry entry, scope lock, sandbox.json in a
 * thread directory) fits it; what the pool needs is "take one that fits
 * this configuration" and "how many are there" (for replicas).  A spare
 * in the list is owned by the list; spares_take hands it to exactly one
 * caller, which either claims it (the box becomes the thread's) or
 * destroys it, so two threads never get the same spare and a spare is
 * never destroyed while claimed.
 */
#define _GNU_SOURCE
#include "spares.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "../common/buf.h"
#include "../common/json.h"
#include "../common/log.h"
#include "../common/names.h"
#include "../common/token.h"
#include "../common/util.h"
#include "../runtime/work.h"
#include "record.h"

#define SPARES_DEFAULT 2
#define SPARE_RECORD "spare.json"

struct spare {
	char token[SCOPE_TOKEN_LEN + 1];
	char *dir;                        /* state_dir/spares/<token> */
	const struct sbx_provider *prov;
	struct sbx_config *cfg;           /* referenced: the configuration it was made with */
	struct sbx_box *box;              /* NULL while it is being made */
	uint64_t ready_since_ms;
	struct spare *next;
};

static struct {
	pthread_mutex_t lock;
	/* protected by lock */
	struct spare *ready;
	unsigned n_ready, n_creating;
	const struct sbx_provider *prov; /* in force */
	struct sbx_config *cfg;          /* in force, referenced */
	bool stopping;
	struct spares_stats st;
	/* set at start */
	char state_id[NAMES_STATE_ID_LEN + 1];
	unsigned (*others)(void);
} spares = { .lock = PTHREAD_MUTEX_INITIALIZER };

int spares_target(const struct sbx_provider *prov, const struct sbx_config *cfg)
{
	if (!prov || !cfg || !prov->ops->claim)
		return 0;
	if (cfg->prewarm >= 0)
		return cfg->prewarm;
	if (prov->ops->files)
		return 0; /* a remote provider: its sandboxes cost money, opt in */
	return cfg->replicas < SPARES_DEFAULT ? cfg->replicas : SPARES_DEFAULT;
}

static void spare_free(struct spare *sp)
{
	if (!sp)
		return;
	config_put(sp->cfg);
	free(sp->dir);
	free(sp);
}

/* A new spare of the configuration in force: token, directory name. */
static struct spare *spare_new(const struct sbx_provider *prov, struct sbx_config *cfg)
{
	struct spare *sp = calloc(1, sizeof(*sp));
	unsigned char rnd[SCOPE_TOKEN_LEN / 2];
	struct buf dir = BUF_INIT(BUF_CAP_PATH);

	if (!sp || getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		free(sp);
		return NULL;
	}
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(sp->token + 2 * i, 3, "%02x", rnd[i]);
	if (buf_addf(&dir, "%s/spares/%s", cfg->state_dir, sp->token)) {
		free(sp);
		return NULL;
	}
	sp->dir = buf_take(&dir, NULL);
	sp->prov = prov;
	sp->cfg = config_get(cfg);
	return sp;
}

static int spare_save(const struct spare *sp, const char *state)
{
	json_t *o = json_pack("{s:s,s:s,s:s}", "token", sp->token, "provider", sp->prov->name, "state", state);
	int r = o ? record_save(sp->dir, SPARE_RECORD, o) : -1;

	json_decref(o);
	return r;
}

static void spare_spec(const struct spare *sp, struct sbx_spec *spec)
{
	memset(spec, 0, sizeof(*spec));
	spec->user = "";
	spec->thread = "";
	spec->token = sp->token;
	spec->state_id = spares.state_id;
	spec->dirs.thread_dir = sp->dir;
	spec->cfg = sp->cfg;
	spec->spare = true;
}

/* End sp's sandbox (if any) and remove its directory; frees sp.  No lock. */
static void spare_destroy(struct spare *sp, const char *why)
{
	char scope[NAMES_SCOPE_MAX];

	snprintf(scope, sizeof(scope), "spare/%s", sp->token);
	if (sp->box) {
		struct token *prev = token_enter(NULL); /* cancelled work still cleans up */
		enum sbx_err e = sp->prov->ops->destroy(sp->box);

		token_leave(prev);
		if (e)
			log_warn(scope, "destroy: %s", sbx_err_name(e));
		sbx_box_put(sp->box);
		sp->box = NULL;
	}
	if (util_rm_rf(sp->dir) && errno != ENOENT)
		log_warn(scope, "cannot remove %s: %s", sp->dir, strerror(errno));
	log_info(scope, "spare destroyed (%s)", why);
	spare_free(sp);
}

/* Is there room for one more spare: the target and replicas allow it?
 * Caller holds spares.lock; others is the pool's count, taken before. */
static bool spares_room_locked(unsigned others)
{
	int target = spares_target(spares.prov, spares.cfg);

	if (spares.stopping || (int)(spares.n_ready + spares.n_creating) >= target)
		return false;
	return (int)(others + spares.n_ready + spares.n_creating) < spares.cfg->replicas;
}

/* The background create of one spare (a lifecycle work item). */
static void spares_make_run(void *arg)
{
	struct spare *sp = arg;
	struct sbx_spec spec;
	char scope[NAMES_SCOPE_MAX], remote_id[sizeof(((struct sbx_box *)0)->remote_id)] = "";
	enum sbx_err e = SBX_ERR_IO;
	unsigned others;
	bool keep;

	snprintf(scope, sizeof(scope), "spare/%s", sp->token);
	spare_spec(sp, &spec);
	if (util_mkdir_p(sp->dir, 0700) || spare_save(sp, "creating")) {
		log_err(scope, "cannot record the spare in %s: %s", sp->dir, strerror(errno));
	} else if ((e = sp->prov->ops->create(&spec, &sp->box))) {
		log_err(scope, "create of a spare failed: %s", sbx_err_name(e));
	} else if (spare_save(sp, "ready")) {
		log_err(scope, "cannot record the spare: %s", strerror(errno));
		e = SBX_ERR_IO;
	}
	if (!e) /* from here on sp may be claimed and freed by another thread */
		snprintf(remote_id, sizeof(remote_id), "%s", sp->box->remote_id);
	others = spares.others ? spares.others() : 0;
	pthread_mutex_lock(&spares.lock);
	spares.n_creating--;
	/* the cap counts it now: a cold create meanwhile may have taken its room
	 * (pool_enforce_replicas does not wait for a spare being made) */
	keep = !e && !spares.stopping && sp->cfg == spares.cfg && sp->prov == spares.prov &&
	       (int)(others + spares.n_ready + spares.n_creating) < spares.cfg->replicas;
	if (keep) {
		sp->ready_since_ms = util_now_ms();
		sp->next = spares.ready;
		spares.ready = sp;
		spares.n_ready++;
		spares.st.made++;
	} else if (e) {
		spares.st.make_failures++;
	}
	pthread_mutex_unlock(&spares.lock);
	if (keep)
		log_info(scope, "spare ready (%s)", remote_id);
	else
		spare_destroy(sp, e ? "its create failed" : "no longer wanted");
}

void spares_refill(void)
{
	unsigned others = spares.others ? spares.others() : 0;

	for (;;) {
		struct spare *sp = NULL;
		long timeout_ms;

		pthread_mutex_lock(&spares.lock);
		if (spares_room_locked(others) && (sp = spare_new(spares.prov, spares.cfg)))
			spares.n_creating++;
		timeout_ms = spares.cfg ? (spares.cfg->ready_timeout + 60) * 1000L : 0;
		pthread_mutex_unlock(&spares.lock);
		if (!sp)
			return;
		if (work_submit(WORK_LIFECYCLE, sp->token, timeout_ms, spares_make_run, sp)) {
			pthread_mutex_lock(&spares.lock);
			spares.n_creating--;
			pthread_mutex_unlock(&spares.lock);
			spare_free(sp);
			return;
		}
	}
}

unsigned spares_count(bool ready_only)
{
	unsigned n;

	pthread_mutex_lock(&spares.lock);
	n = spares.n_ready + (ready_only ? 0 : spares.n_creating);
	pthread_mutex_unlock(&spares.lock);
	return n;
}

/* Caller holds spares.lock: unlink and return the first ready spare that
 * match() accepts, or NULL. */
static struct spare *spares_unlink_locked(bool (*match)(const struct spare *sp, const void *arg), const void *arg)
{
	for (struct spare **pp = &spares.ready; *pp; pp = &(*pp)->next)
		if (match(*pp, arg)) {
			struct spare *sp = *pp;

			*pp = sp->next;
			sp->next = NULL;
			spares.n_ready--;
			return sp;
		}
	return NULL;
}

static bool spare_fits(const struct spare *sp, const void *arg)
{
	const struct sbx_config *cfg = arg;

	return sp->cfg == cfg && sp->prov == spares.prov;
}

struct spare *spares_take(const struct sbx_provider *prov, const struct sbx_config *cfg)
{
	struct spare *sp = NULL;

	pthread_mutex_lock(&spares.lock);
	if (prov == spares.prov)
		sp = spares_unlink_locked(spare_fits, cfg);
	pthread_mutex_unlock(&spares.lock);
	return sp;
}

enum sbx_err spares_claim(struct spare *sp, const struct sbx_spec *spec, struct sbx_box **out)
{
	char scope[NAMES_SCOPE_MAX];
	enum sbx_err e;

	snprintf(scope, sizeof(scope), "%s/%s", spec->user, spec->thread);
	e = sp->prov->ops->health(sp->box);
	if (e)
		log_warn(scope, "spare %s failed its health check (%s): destroying it, creating cold", sp->token,
			sbx_box_is_gone(sp->box) ? sp->box->gone_why : "ended behind the daemon's back?");
	else if ((e = sp->prov->ops->claim(sp->box, spec)))
		log_warn(scope, "claim of spare %s failed (%s): destroying it, creating cold", sp->token,
			sbx_err_name(e));
	pthread_mutex_lock(&spares.lock);
	if (e)
		spares.st.claim_failures++;
	else
		spares.st.claims++;
	pthread_mutex_unlock(&spares.lock);
	if (e) {
		spare_destroy(sp, "its claim failed");
	} else {
		log_info(scope, "claimed spare %s (%s)", sp->token, sp->box->remote_id);
		*out = sp->box;
		sp->box = NULL; /* the thread's now */
		if (util_rm_rf(sp->dir) && errno != ENOENT)
			log_warn(scope, "cannot remove %s: %s", sp->dir, strerror(errno));
		spare_free(sp);
	}
	spares_refill();
	return e;
}

static bool spare_any(const struct spare *sp, const void *arg)
{
	(void)sp;
	(void)arg;
	return true;
}

bool spares_evict_one(void)
{
	struct spare *sp;

	pthread_mutex_lock(&spares.lock);
	sp = spares_unlink_locked(spare_any, NULL);
	if (sp)
		spares.st.evictions++;
	pthread_mutex_unlock(&spares.lock);
	if (sp)
		spare_destroy(sp, "evicted: replicas soft cap");
	return sp != NULL;
}

static bool spare_idle(const struct spare *sp, const void *arg)
{
	return sp->ready_since_ms <= *(const uint64_t *)arg;
}

void spares_reap(long idle_timeout)
{
	uint64_t now = util_now_ms(), limit;

	if (idle_timeout <= 0 || now <= (uint64_t)idle_timeout * 1000)
		return;
	limit = now - (uint64_t)idle_timeout * 1000;
	for (;;) {
		struct spare *sp;

		pthread_mutex_lock(&spares.lock);
		sp = spares_unlink_locked(spare_idle, &limit);
		if (sp)
			spares.st.reaps++;
		pthread_mutex_unlock(&spares.lock);
		if (!sp)
			return;
		spare_destroy(sp, "idle timeout");
	}
}

static bool spare_gone(const struct spare *sp, const void *arg)
{
	(void)arg;
	return sp->box && sbx_box_is_gone(sp->box);
}

void spares_sweep_gone(void)
{
	bool any = false;

	for (;;) {
		struct spare *sp;
		char scope[NAMES_SCOPE_MAX];

		pthread_mutex_lock(&spares.lock);
		sp = spares_unlink_locked(spare_gone, NULL);
		if (sp)
			spares.st.lost++;
		pthread_mutex_unlock(&spares.lock);
		if (!sp)
			break;
		snprintf(scope, sizeof(scope), "spare/%s", sp->token);
		log_warn(scope, "the spare is gone behind our back (%s): destroying it", sp->box->gone_why);
		spare_destroy(sp, "gone");
		any = true;
	}
	if (any)
		spares_refill();
}

static bool spare_stale(const struct spare *sp, const void *arg)
{
	(void)arg;
	return sp->cfg != spares.cfg || sp->prov != spares.prov;
}

void spares_reconfigure(const struct sbx_provider *prov, struct sbx_config *cfg)
{
	struct sbx_config *old;

	pthread_mutex_lock(&spares.lock);
	old = spares.cfg;
	spares.cfg = config_get(cfg);
	spares.prov = prov;
	pthread_mutex_unlock(&spares.lock);
	config_put(old);
	for (;;) {
		struct spare *sp;

		pthread_mutex_lock(&spares.lock);
		sp = spares_unlink_locked(spare_stale, NULL);
		pthread_mutex_unlock(&spares.lock);
		if (!sp)
			break;
		spare_destroy(sp, "the configuration changed");
	}
	spares_refill();
}

/* ---- start: adoption ------------------------------------------------------------ */

/* One directory of state_dir/spares a previous daemon left. */
static void spares_adopt_one(const char *dir, const char *token)
{
	struct spare *sp = calloc(1, sizeof(*sp));
	json_t *j = record_load(dir, SPARE_RECORD);
	const char *pname = j ? json_string_value(json_object_get(j, "provider")) : NULL;
	const char *state = j ? json_string_value(json_object_get(j, "state")) : NULL;
	char scope[NAMES_SCOPE_MAX];
	struct sbx_spec spec;

	snprintf(scope, sizeof(scope), "spare/%.*s", SCOPE_TOKEN_LEN, token);
	if (!sp || !(sp->dir = strdup(dir))) {
		free(sp);
		json_decref(j);
		return;
	}
	memcpy(sp->token, token, SCOPE_TOKEN_LEN); /* spares_scan checked its length */
	sp->prov = spares.prov;
	sp->cfg = config_get(spares.cfg);
	if (pname && strcmp(pname, spares.prov->name)) {
		log_warn(scope, "a spare of provider '%s', not this one's: left alone", pname);
		spare_free(sp);
		json_decref(j);
		return;
	}
	spare_spec(sp, &spec);
	if (spares.prov->ops->adopt(&spec, &sp->box) != SBX_OK) {
		sp->box = NULL;
		spare_destroy(sp, "nothing of it runs");
	} else if (!state || strcmp(state, "ready")) {
		spare_destroy(sp, "its create was interrupted");
	} else if (spares.prov->ops->health(sp->box) != SBX_OK) {
		spare_destroy(sp, "it failed its health check");
	} else {
		log_info(scope, "spare adopted (%s)", sp->box->remote_id); /* before another thread may take it */
		pthread_mutex_lock(&spares.lock);
		sp->ready_since_ms = util_now_ms();
		sp->next = spares.ready;
		spares.ready = sp;
		spares.n_ready++;
		spares.st.adopted++;
		pthread_mutex_unlock(&spares.lock);
	}
	json_decref(j);
}

static void spares_scan(void)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH), dir = BUF_INIT(BUF_CAP_PATH);
	struct dirent *e;
	DIR *d;

	if (buf_addf(&path, "%s/spares", spares.cfg->state_dir) || !(d = opendir(path.ptr))) {
		buf_free(&path);
		return;
	}
	while ((e = readdir(d))) {
		if (strlen(e->d_name) != SCOPE_TOKEN_LEN || strspn(e->d_name, "0123456789abcdef") != SCOPE_TOKEN_LEN)
			continue;
		buf_reset(&dir);
		if (!buf_addf(&dir, "%s/%s", path.ptr, e->d_name))
			spares_adopt_one(dir.ptr, e->d_name);
	}
	closedir(d);
	buf_free(&path);
	buf_free(&dir);
}

void spares_start(const struct sbx_provider *prov, struct sbx_config *cfg, const char *state_id,
	unsigned (*others)(void))
{
	pthread_mutex_lock(&spares.lock);
	spares.prov = prov;
	spares.cfg = config_get(cfg);
	spares.stopping = false;
	spares.others = others;
	snprintf(spares.state_id, sizeof(spares.state_id), "%s", state_id);
	pthread_mutex_unlock(&spares.lock);
	if (cfg->prewarm > 0 && !prov->ops->claim)
		log_warn("config", "pool.prewarm: provider %s cannot bind a spare to a thread: no spares", prov->name);
	spares_scan();
	/* adopted beyond the target (pool.prewarm lowered meanwhile): go */
	while ((int)spares_count(false) > spares_target(prov, cfg) && spares_evict_one())
		;
	spares_refill();
}

void spares_stop(void)
{
	pthread_mutex_lock(&spares.lock);
	spares.stopping = true;
	pthread_mutex_unlock(&spares.lock);
}

void spares_shutdown(bool keep)
{
	struct spare *list;
	struct sbx_config *cfg;

	spares_stop();
	pthread_mutex_lock(&spares.lock);
	list = spares.ready;
	spares.ready = NULL;
	spares.n_ready = 0;
	cfg = spares.cfg;
	spares.cfg = NULL;
	pthread_mutex_unlock(&spares.lock);
	while (list) {
		struct spare *sp = list;

		list = sp->next;
		if (keep) {
			sbx_box_put(sp->box); /* it keeps running: the next start adopts it */
			spare_free(sp);
		} else {
			spare_destroy(sp, "shutdown");
		}
	}
	config_put(cfg);
}

void spares_stats(struct spares_stats *st)
{
	pthread_mutex_lock(&spares.lock);
	*st = spares.st;
	st->target = spares_target(spares.prov, spares.cfg);
	st->ready = spares.n_ready;
	st->creating = spares.n_creating;
	pthread_mutex_unlock(&spares.lock);
}
