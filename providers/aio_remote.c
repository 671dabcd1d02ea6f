/* SPDX-License-Identifier: MIT */
/*
 * aio_remote.c - the aio provider at a base_url: an existing AIO sandbox
 * (agent-infra/sandbox, reference/remote-apis.md §B) reached over HTTP, no
 * docker.  provider_aio names this descriptor for a configuration with
 * base_url (ops->variant), so its capabilities differ from the container
 * mode's: remote files and skills by upload, no network namespace.
 *
 * One sandbox, one scope at a time.  The AIO sandbox has one
 * /mnt/user-data: two scopes in it would see each other's files.  So the
 * sandbox serves the scope that holds it (replicas is 1: the pool evicts
 * the warm holder before another scope's create; an active holder makes
 * that create EBUSY), and "destroy" gives it back clean: the scope's
 * commands are ended (its bash sessions killed) and everything under
 * /mnt/user-data and the skills path is removed, as a deleted sandbox's files are gone.  The
 * holder is written into the sandbox (/mnt/user-data/.sbxfs-scope.json:
 * provider, state_id, scope, user, thread), so a restarted daemon adopts it
 * (or discovers it), and another sbxfs (another state_dir) finds it taken.
 *
 * Jobs: aio_jobs.c, as for containers (aio_int.h: the API at the URL, the
 * job's files uploaded); this box is no container box.  Files: the AIO file API where it has the call (list,
 * ranged download, upload), a command through /v1/bash/exec where it has
 * none (stat, mkdir, rmdir, unlink, rename, chmod, truncate: the 1.9.4 API
 * has no such routes), with the paths in the command's environment, never
 * in its text, and LC_ALL=C so errors are strerror's words.  File commands
 * reuse a few bash sessions of the box (a session runs one command at a
 * time), taken and given back under the box's lock, never held across a
 * request.
 *
 * Locks: aior.lock (which scope holds the sandbox) and each box's lock
 * (its sessions) are leaves, never held across a request.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/buf.h"
#include "../common/http.h"
#include "../common/json.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/names.h"
#include "../common/util.h"
#include "aio_int.h"
#include "provider_int.h"
#include "record.h"
#include "scriptfs.h"

#define AIOR_MARKER LAYOUT_SANDBOX_USER_DATA "/.sbxfs-scope.json"
#define AIOR_RECORD "aio-remote.json"
#define AIOR_RUN_BASE "/tmp/.sbxfs-jobs"
#define AIOR_SESSIONS 4
#define AIOR_ERRTEXT 512
#define AIOR_MARKER_MAX (16 * 1024)

struct abox {
	struct sbx_box base; /* first: see abox() */
	struct aio_sbx a;    /* what aio_jobs.c sees */
	char name[128];      /* log scope: user/thread */
	char token[24];
	char *thread_dir;
	struct sbx_config *cfg; /* referenced: the config it lives with */
	int ended;              /* atomic: destroyed; the sandbox may serve another scope now */
	char state_id[NAMES_STATE_ID_LEN + 1];
	char user[NAME_MAX_LEN + 1], thread[NAME_MAX_LEN + 1];
	bool holds;     /* protected by aior.lock: this box is the sandbox's holder */
	pthread_mutex_t lock;
	char sess[AIOR_SESSIONS][96]; /* protected by lock: file-command sessions, "" = none yet */
	bool busy[AIOR_SESSIONS];
};

static struct {
	pthread_mutex_t lock;
	char holder[SCOPE_TOKEN_LEN + 1]; /* protected by lock: the scope the sandbox serves, "" */
} aior = { .lock = PTHREAD_MUTEX_INITIALIZER };

static struct abox *abox(struct sbx_box *b)
{
	if (!b || b->prov != &provider_aio_remote)
		abort(); /* a box of another kind where a base_url box belongs: a programming error */
	return (struct abox *)b;
}

static const char *aior_key(const struct sbx_config *cfg)
{
	const char *k = aio_conf_api_key(cfg);

	return k && k[0] ? k : cfg->api_key;
}

static void aior_target(struct abox *ab, struct aio_target *t)
{
	aio_sbx_target(&ab->a, t, -1, NULL);
}

/* ---- configuration ------------------------------------------------------------------------ */

const struct sbx_provider *aio_remote_variant(const struct sbx_config *cfg)
{
	return cfg->base_url && cfg->base_url[0] ? &provider_aio_remote : NULL;
}

int aio_remote_config_check(struct cfg_ctx *x, struct sbx_config *cfg)
{
	char *u = cfg->base_url;
	const char *host = !strncmp(u, "http://", 7) ? u + 7 : !strncmp(u, "https://", 8) ? u + 8 : NULL;
	size_t n = strlen(u);
	struct http_url pu;

	/* the prefix, and the URL as libcurl reads it: http(s), a host, no
	 * credentials, query or fragment (every API path is appended to it) */
	if (!host || !*host || *host == '/' || n > 400 || strchr(host, '@') || strchr(u, '?') || strchr(u, '#') ||
	    http_url_parse(u, &pu) || (strcmp(pu.scheme, "http") && strcmp(pu.scheme, "https")) || pu.userinfo ||
	    pu.query || pu.fragment || !pu.host[0]) {
		cfg_fail(x, "base_url", "must be http(s)://host[:port][/path], without credentials, query or fragment "
					"(got '%.80s')", u);
		return -1;
	}
	for (const char *p = u; *p; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f || *p == '"' || *p == '\\' || *p == '<' || *p == '>') {
			cfg_fail(x, "base_url", "must not hold spaces, quotes or control characters");
			return -1;
		}
	while (n > 8 && u[n - 1] == '/')
		u[--n] = '\0';
	if (cfg->net_mode != NET_OPEN) {
		cfg_fail(x, "network.mode", "an existing AIO sandbox (base_url) has the network it was started with: "
					    "sbxfs cannot confine it (only open)");
		return -1;
	}
	if (cfg->replicas != 1) {
		log_info("config", "base_url: one existing AIO sandbox serves one scope at a time: replicas is 1 (was %d)",
			cfg->replicas);
		cfg->replicas = 1;
	}
	if (cfg->n_mounts)
		log_warn("config", "mounts: not used with base_url (an existing sandbox has the mounts it was started with)");
	return 0;
}

/* ---- commands ------------------------------------------------------------------------------ */

/* A session for one file command: one of the box's, or NULL when all are
 * busy (the caller then uses a fresh one and closes it). */
static int sess_take(struct abox *ab, char *out, size_t len)
{
	int slot = -1;

	pthread_mutex_lock(&ab->lock);
	for (int i = 0; i < AIOR_SESSIONS && slot < 0; i++)
		if (!ab->busy[i]) {
			unsigned char rnd[4];
			if (!ab->sess[i][0] && !getentropy(rnd, sizeof(rnd)))
				snprintf(ab->sess[i], sizeof(ab->sess[i]), "sbxfs-%s-f%02x%02x%02x%02x", ab->token, rnd[0],
					rnd[1], rnd[2], rnd[3]);
			if (ab->sess[i][0]) {
				ab->busy[i] = true;
				slot = i;
				snprintf(out, len, "%s", ab->sess[i]);
			}
		}
	pthread_mutex_unlock(&ab->lock);
	return slot;
}

static void sess_give(struct abox *ab, int slot, bool spoiled)
{
	if (slot < 0)
		return;
	pthread_mutex_lock(&ab->lock);
	ab->busy[slot] = false;
	if (spoiled) /* a command may still run in it: the next one gets a new session */
		ab->sess[slot][0] = '\0';
	pthread_mutex_unlock(&ab->lock);
}

static enum sbx_err aior_run(struct abox *ab, const char *script, const struct aio_env *env, size_t n_env, int *code,
	char *errtext, size_t errlen, struct buf *out)
{
	struct aio_env e2[8];
	struct aio_target t;
	struct aio_bash_result r;
	char sess[96], err[AIO_ERR_LEN];
	int slot;
	size_t n = 0;
	enum sbx_err e;

	*code = -1;
	if (errlen)
		errtext[0] = '\0';
	if (sbx_box_is_gone(&ab->base) || __atomic_load_n(&ab->ended, __ATOMIC_ACQUIRE))
		return SBX_ERR_GONE; /* after its destroy the sandbox may serve another scope: never touched */
	e2[n++] = (struct aio_env){ "LC_ALL", "C" };
	for (size_t i = 0; i < n_env && n < 8; i++)
		e2[n++] = env[i];
	slot = sess_take(ab, sess, sizeof(sess));
	if (slot < 0) {
		unsigned char rnd[4] = { 0 };
		if (getentropy(rnd, sizeof(rnd)))
			return SBX_ERR_NOMEM;
		snprintf(sess, sizeof(sess), "sbxfs-%s-t%02x%02x%02x%02x", ab->token, rnd[0], rnd[1], rnd[2], rnd[3]);
	}
	aior_target(ab, &t);
	{
		struct aio_bash_request rq = { .command = script, .session_id = sess, .exec_dir = "/", .env = e2,
			.n_env = n, .async = false, .timeout = (double)ab->cfg->request_timeout,
			.hard_timeout = (double)ab->cfg->request_timeout };
		e = aio_bash_exec(&t, &rq, &r, err, sizeof(err));
	}
	if (!e && r.status != AIO_COMPLETED) {
		snprintf(err, sizeof(err), "the command did not complete within request_timeout (%ld s)",
			ab->cfg->request_timeout);
		e = SBX_ERR_TIMEOUT;
	}
	if (!e) {
		*code = r.has_exit ? r.exit_code : -1;
		if (errlen)
			snprintf(errtext, errlen, "%.*s", (int)(r.err_len < errlen ? r.err_len : errlen - 1), r.err ? r.err : "");
		if (out && r.out_len && buf_add(out, r.out, r.out_len))
			e = SBX_ERR_NOMEM;
	} else if (e == SBX_ERR_INTR) { /* the caller gave up (a FUSE interrupt) */
		log_debug(ab->name, "aio: a file command was cancelled: %s", err);
	} else {
		log_warn(ab->name, "aio: a file command failed: %s", err);
	}
	aio_bash_result_clear(&r);
	if (slot < 0 || e) { /* a fresh session, or one left in doubt: closed */
		char cerr[AIO_ERR_LEN];
		aio_bash_close(&t, sess, cerr, sizeof(cerr));
	}
	sess_give(ab, slot, e != SBX_OK);
	return e;
}

/* ---- scriptfs: file operations as commands ---------------------------------------------------- */

static enum sbx_err put(struct abox *ab, const char *path, int fd, off_t size, mode_t mode);

static enum sbx_err sfs_run(struct sbx_box *b, const char *script, const struct scriptfs_env *env, size_t n_env,
	int *code, char *errtext, size_t errlen, struct buf *out)
{
	struct aio_env e[4];
	size_t n = 0;

	for (; n < n_env && n < 4; n++)
		e[n] = (struct aio_env){ env[n].key, env[n].value };
	return aior_run(abox(b), script, e, n, code, errtext, errlen, out);
}

static enum sbx_err sfs_put(struct sbx_box *b, const char *path, int fd, off_t size, mode_t mode)
{
	return put(abox(b), path, fd, size, mode);
}

static const char *sfs_skills_root(struct sbx_box *b)
{
	return abox(b)->cfg->skills_container_path;
}

static const char *sfs_scope(struct sbx_box *b)
{
	return abox(b)->name;
}

static const struct scriptfs aior_sfs = {
	.run = sfs_run,
	.put = sfs_put,
	.skills_root = sfs_skills_root,
	.scope = sfs_scope,
};

/* A command on paths ($A, $B): SBX_OK on exit 0, else the error stderr names. */
static enum sbx_err run_paths(struct abox *ab, const char *script, const char *a, const char *b, struct buf *out)
{
	return scriptfs_paths(&aior_sfs, &ab->base, "aio: command", script, a, b, out);
}

/* ---- the holder marker ------------------------------------------------------------------------ */

/* The marker's content (marker->ptr, or empty when there is none): SBX_OK,
 * or the failure to read it. */
static enum sbx_err marker_read(struct abox *ab, json_t **out)
{
	struct aio_target t;
	char err[AIO_ERR_LEN];
	size_t got = 0;
	int fd = memfd_create("sbxfs-marker", MFD_CLOEXEC);
	struct buf text = BUF_INIT(AIOR_MARKER_MAX + 1);
	enum sbx_err e;

	*out = NULL;
	if (fd < 0)
		return SBX_ERR_NOMEM;
	aior_target(ab, &t);
	e = aio_file_download(&t, AIOR_MARKER, 0, AIOR_MARKER_MAX, fd, &got, err, sizeof(err));
	if (e == SBX_ERR_GONE) {
		e = SBX_OK; /* no marker: nobody holds it */
	} else if (!e) {
		char chunk[4096];
		ssize_t r;
		lseek(fd, 0, SEEK_SET);
		while ((r = read(fd, chunk, sizeof(chunk))) > 0)
			if (buf_add(&text, chunk, (size_t)r))
				break;
		*out = json_loadb(buf_str(&text), text.len, 0, NULL);
		if (!json_is_object(*out)) {
			log_warn(ab->name, "aio: %s in the sandbox is not sbxfs's: taken as a stale holder", AIOR_MARKER);
			json_decref(*out);
			*out = json_object();
		}
	} else {
		log_warn(ab->name, "aio: cannot read %s: %s", AIOR_MARKER, err);
	}
	close(fd);
	buf_free(&text);
	return e;
}

static enum sbx_err marker_write(struct abox *ab)
{
	json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s}", "provider", "aio", "state_id", ab->state_id, "scope", ab->token,
		"user", ab->user, "thread", ab->thread);
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL, err[AIO_ERR_LEN];
	struct aio_target t;
	enum sbx_err e = SBX_ERR_NOMEM;
	int fd = memfd_create("sbxfs-marker", MFD_CLOEXEC);

	if (text && fd >= 0 && (size_t)write(fd, text, strlen(text)) == strlen(text)) {
		aior_target(ab, &t);
		e = aio_file_upload(&t, AIOR_MARKER, fd, (long long)strlen(text), err, sizeof(err));
		if (e)
			log_err(ab->name, "aio: cannot write %s: %s", AIOR_MARKER, err);
	}
	if (fd >= 0)
		close(fd);
	free(text);
	json_decref(o);
	return e;
}

static bool marker_is(json_t *m, const char *state_id, const char *token)
{
	const char *sid = json_string_value(json_object_get(m, "state_id"));
	const char *scope = json_string_value(json_object_get(m, "scope"));

	return sid && scope && !strcmp(sid, state_id) && !strcmp(scope, token);
}

/* ---- boxes ------------------------------------------------------------------------------------ */

/* The sandbox as aio_jobs.c sees it: reached at its URL, alive while
 * this scope holds it and it was not found gone. */
static bool sbx_alive(struct aio_sbx *a)
{
	struct abox *ab = abox(a->box);

	return !sbx_box_is_gone(&ab->base) && !__atomic_load_n(&ab->ended, __ATOMIC_ACQUIRE);
}

static const struct aio_sbx_ops aior_sbx_ops = { .alive = sbx_alive };

static struct abox *abox_new(const struct sbx_spec *s)
{
	struct abox *ab = calloc(1, sizeof(*ab));

	if (!ab)
		return NULL;
	if (!(ab->thread_dir = strdup(s->dirs.thread_dir))) {
		free(ab);
		return NULL;
	}
	sbx_box_init(&ab->base, &provider_aio_remote);
	pthread_mutex_init(&ab->lock, NULL);
	snprintf(ab->name, sizeof(ab->name), "%s/%s", s->user, s->thread);
	snprintf(ab->token, sizeof(ab->token), "%s", s->token);
	snprintf(ab->state_id, sizeof(ab->state_id), "%s", s->state_id);
	snprintf(ab->user, sizeof(ab->user), "%s", s->user);
	snprintf(ab->thread, sizeof(ab->thread), "%s", s->thread);
	ab->cfg = config_get((struct sbx_config *)s->cfg);
	ab->a = (struct aio_sbx){ .box = &ab->base, .ops = &aior_sbx_ops, .name = ab->name, .token = ab->token,
		.thread_dir = ab->thread_dir, .cfg = ab->cfg, .output_max = s->cfg->res.output,
		.api_key = aior_key(s->cfg) };
	snprintf(ab->a.url, sizeof(ab->a.url), "%s", s->cfg->base_url);
	snprintf(ab->a.run_path, sizeof(ab->a.run_path), AIOR_RUN_BASE "/%s", s->token);
	snprintf(ab->base.remote_id, sizeof(ab->base.remote_id), "aio:%.75s", s->cfg->base_url);
	return ab;
}

static void abox_free(struct abox *ab)
{
	if (!ab)
		return;
	pthread_mutex_destroy(&ab->lock);
	config_put(ab->cfg);
	free(ab->thread_dir);
	free(ab);
}

/* Make this scope the sandbox's holder in this daemon: false when another
 * scope of ours holds it. */
static bool hold(struct abox *ab)
{
	bool ok;

	pthread_mutex_lock(&aior.lock);
	ok = !aior.holder[0] || !strcmp(aior.holder, ab->token);
	if (ok) {
		snprintf(aior.holder, sizeof(aior.holder), "%.16s", ab->token);
		ab->holds = true;
	}
	pthread_mutex_unlock(&aior.lock);
	return ok;
}

static void unhold(struct abox *ab)
{
	pthread_mutex_lock(&aior.lock);
	if (ab->holds && !strcmp(aior.holder, ab->token))
		aior.holder[0] = '\0';
	ab->holds = false;
	pthread_mutex_unlock(&aior.lock);
}

static int aior_save(struct abox *ab)
{
	json_t *o = json_pack("{s:s,s:s}", "base_url", ab->a.url, "scope", ab->token);
	int r = o ? record_save(ab->thread_dir, AIOR_RECORD, o) : -1;

	json_decref(o);
	return r;
}

static void aior_unsave(const char *thread_dir)
{
	record_remove(thread_dir, AIOR_RECORD);
}

/* End every command of the scope: SIGKILL to the running command of each
 * of its bash sessions (jobs report "killed"). */
struct sess_list {
	char prefix[64];
	char ids[256][128];
	int n;
};

static void sess_collect(const char *id, void *arg)
{
	struct sess_list *l = arg;

	if (!strncmp(id, l->prefix, strlen(l->prefix)) && l->n < 256)
		snprintf(l->ids[l->n++], sizeof(l->ids[0]), "%s", id);
}

static enum sbx_err kill_sessions(struct abox *ab, bool close_them)
{
	struct sess_list *l = calloc(1, sizeof(*l));
	struct aio_target t;
	char err[AIO_ERR_LEN];
	enum sbx_err e;

	if (!l)
		return SBX_ERR_NOMEM;
	snprintf(l->prefix, sizeof(l->prefix), "sbxfs-%s-", ab->token);
	aior_target(ab, &t);
	e = aio_bash_sessions(&t, sess_collect, l, err, sizeof(err));
	if (e)
		log_warn(ab->name, "aio: cannot list the sandbox's sessions: %s", err);
	for (int i = 0; !e && i < l->n; i++) {
		if (close_them)
			aio_bash_close(&t, l->ids[i], err, sizeof(err));
		else
			aio_bash_kill(&t, l->ids[i], "SIGKILL", err, sizeof(err)); /* "no running command" is fine */
	}
	free(l);
	return e;
}

/* Empty the data directories and the skills path; remove the jobs' files
 * and the marker: what the scope leaves is gone, as with a deleted sandbox. */
static enum sbx_err wipe(struct abox *ab)
{
	static const char script[] =
		"for d in /mnt/user-data/workspace /mnt/user-data/uploads /mnt/user-data/outputs \"$A\"; do "
		"[ -d \"$d\" ] && find \"$d\" -mindepth 1 -delete; done; rm -rf -- \"$B\"; rm -f -- " AIOR_MARKER;

	return run_paths(ab, script, ab->cfg->skills_container_path, ab->a.run_path, NULL);
}

static enum sbx_err wait_ready(struct abox *ab, uint64_t deadline)
{
	struct aio_target t;
	struct aio_info info;
	char err[AIO_ERR_LEN] = "no answer";
	useconds_t pause = 20000;
	enum sbx_err e;

	aior_target(ab, &t);
	for (;;) {
		uint64_t now = util_now_ms();
		t.timeout_ms = deadline > now + 3000 ? 3000 : deadline > now ? (long)(deadline - now) : 1;
		e = aio_sandbox(&t, &info, err, sizeof(err));
		if (!e) {
			log_info(ab->name, "aio: the AIO sandbox at %s answers (version %s)", ab->a.url,
				info.version[0] ? info.version : "?");
			return SBX_OK;
		}
		if (e == SBX_ERR_ACCESS) {
			log_err(ab->name, "aio: the AIO sandbox at %s refuses the API key: %s", ab->a.url, err);
			return e;
		}
		if (util_now_ms() >= deadline)
			break;
		usleep(pause);
		pause = pause < 500000 ? pause * 2 : 500000;
	}
	log_err(ab->name, "aio: the AIO sandbox at %s did not answer within ready_timeout (%ld s): %s", ab->a.url,
		ab->cfg->ready_timeout, err);
	return SBX_ERR_TIMEOUT;
}

static enum sbx_err aior_create(const struct sbx_spec *s, struct sbx_box **out)
{
	struct abox *ab = abox_new(s);
	uint64_t deadline = util_now_ms() + (uint64_t)s->cfg->ready_timeout * 1000;
	json_t *m = NULL;
	enum sbx_err e = SBX_ERR_NOMEM;
	bool marked = false;
	int r;

	if (!ab)
		return e;
	r = sbx_box_own_host_files(&ab->base, s);
	if (r) {
		log_err(ab->name, "aio: cannot give skills/ to the user: %s", strerror(r));
		e = sbx_err_from_errno(r);
		abox_free(ab);
		return e;
	}
	if (!hold(ab)) {
		log_err(ab->name, "aio: the AIO sandbox at %s serves another scope (one at a time: rmdir it first)",
			ab->a.url);
		e = SBX_ERR_BUSY;
		goto out;
	}
	e = wait_ready(ab, deadline);
	if (!e)
		e = marker_read(ab, &m);
	if (e)
		goto out;
	if (m && json_string_value(json_object_get(m, "state_id")) &&
	    strcmp(json_string_value(json_object_get(m, "state_id")), ab->state_id)) {
		log_err(ab->name, "aio: the AIO sandbox at %s is held by another sbxfs (state_id %s); if that one is "
				     "gone, remove %s in the sandbox", ab->a.url,
			json_string_value(json_object_get(m, "state_id")), AIOR_MARKER);
		e = SBX_ERR_BUSY;
		goto out;
	}
	if (m) { /* ours, left by a destroy that could not finish: start clean */
		log_warn(ab->name, "aio: the sandbox still has a scope's files (%s): emptied first",
			json_string_value(json_object_get(m, "scope")) ? json_string_value(json_object_get(m, "scope")) : "?");
		e = wipe(ab);
		if (e)
			goto out;
	}
	e = run_paths(ab, "mkdir -p /mnt/user-data/workspace /mnt/user-data/uploads /mnt/user-data/outputs \"$A\"",
		s->cfg->skills_container_path, NULL, NULL);
	if (e) {
		log_err(ab->name, "aio: bootstrap mkdir -p /mnt/user-data/... failed: %s", sbx_err_name(e));
		goto out;
	}
	e = marker_write(ab);
	if (e)
		goto out;
	marked = true;
	if (aior_save(ab)) {
		log_err(ab->name, "aio: cannot record the sandbox: %s", strerror(errno));
		e = SBX_ERR_IO;
		goto out;
	}
	*out = &ab->base;
	ab = NULL;
out:
	if (e && marked)
		wipe(ab);
	if (ab)
		unhold(ab);
	json_decref(m);
	abox_free(ab);
	return e;
}

static enum sbx_err aior_health(struct sbx_box *b)
{
	struct abox *ab = abox(b);
	struct aio_target t;
	struct aio_info info;
	char err[AIO_ERR_LEN];
	json_t *m = NULL;
	enum sbx_err e;

	if (sbx_box_is_gone(b))
		return SBX_ERR_GONE;
	aior_target(ab, &t);
	t.timeout_ms = t.timeout_ms < 5000 ? t.timeout_ms : 5000;
	e = aio_sandbox(&t, &info, err, sizeof(err));
	if (e == SBX_ERR_IO || e == SBX_ERR_TIMEOUT) {
		log_warn(ab->name, "aio: health of the sandbox at %s unknown: %s", ab->a.url, err);
		return SBX_OK; /* unknown: taken as alive (a blip must not cost the files) */
	}
	if (e) {
		log_warn(ab->name, "aio: health check: %s", err);
		return SBX_ERR_GONE;
	}
	if (marker_read(ab, &m))
		return SBX_OK;
	if (!marker_is(m, ab->state_id, ab->token)) {
		sbx_box_gone(b, "the AIO sandbox at %s no longer holds this scope's files (restarted or taken over)",
			ab->a.url);
		e = SBX_ERR_GONE;
	}
	json_decref(m);
	return e;
}

static enum sbx_err aior_destroy(struct sbx_box *b)
{
	struct abox *ab = abox(b);
	enum sbx_err e;

	if (!ab->holds) {
		__atomic_store_n(&ab->ended, 1, __ATOMIC_RELEASE);
		aior_unsave(ab->thread_dir);
		return SBX_OK;
	}
	kill_sessions(ab, true);
	e = wipe(ab);
	/* from now on nothing of this box reaches the sandbox: a late write of
	 * the remote-files cache or a job pump would land in the next scope's files */
	__atomic_store_n(&ab->ended, 1, __ATOMIC_RELEASE);
	if (e)
		log_err(ab->name, "aio: cannot empty the sandbox at %s (%s): the next create does", ab->a.url,
			sbx_err_name(e));
	else
		log_info(ab->name, "aio: the sandbox at %s given back (the scope's commands ended, its files removed)",
			ab->a.url);
	unhold(ab);
	aior_unsave(ab->thread_dir);
	return e;
}

static void aior_box_free(struct sbx_box *b)
{
	struct abox *ab = abox(b);

	unhold(ab);
	abox_free(ab);
}

static enum sbx_err aior_adopt(const struct sbx_spec *s, struct sbx_box **out)
{
	struct abox *ab = abox_new(s);
	json_t *m = NULL;
	enum sbx_err e;
	int r;

	if (!ab)
		return SBX_ERR_NOMEM;
	e = marker_read(ab, &m);
	if (!e && !marker_is(m, s->state_id, s->token)) {
		log_info(ab->name, "aio: the sandbox at %s does not hold this scope any more", ab->a.url);
		aior_unsave(s->dirs.thread_dir);
		e = SBX_ERR_GONE;
		goto out;
	}
	if (e)
		log_warn(ab->name, "aio: cannot check the sandbox at %s now: its health check decides", ab->a.url);
	if (!hold(ab)) {
		e = SBX_ERR_GONE;
		goto out;
	}
	r = sbx_box_own_host_files(&ab->base, s);
	if (r)
		log_warn(ab->name, "aio: cannot give skills/ to the user: %s", strerror(r));
	aior_save(ab);
	*out = &ab->base;
	ab = NULL;
	e = SBX_OK;
out:
	json_decref(m);
	abox_free(ab);
	return e;
}

static enum sbx_err aior_discover(const struct sbx_config *cfg, const char *state_id,
	void (*found)(const char *user, const char *thread, void *arg), void *arg)
{
	struct sbx_spec s = { .user = "-", .thread = "-", .token = "0000000000000000", .state_id = state_id, .cfg = cfg,
		.dirs = { .thread_dir = "/" } };
	struct abox *ab = abox_new(&s);
	json_t *m = NULL;
	enum sbx_err e;

	if (!ab)
		return SBX_ERR_NOMEM;
	snprintf(ab->name, sizeof(ab->name), "aio");
	e = marker_read(ab, &m);
	if (!e && m) {
		const char *sid = json_string_value(json_object_get(m, "state_id"));
		const char *user = json_string_value(json_object_get(m, "user"));
		const char *thread = json_string_value(json_object_get(m, "thread"));
		if (sid && !strcmp(sid, state_id) && user && thread && names_valid(user) && names_valid(thread))
			found(user, thread, arg);
	}
	json_decref(m);
	abox_free(ab);
	return e;
}

static enum sbx_err aior_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
	struct http_url u;

	if (http_init()) {
		snprintf(err, errlen, "aio provider: libcurl cannot be initialised");
		return SBX_ERR_IO;
	}
	if (!strncmp(cfg->base_url, "http://", 7) && (http_url_parse(cfg->base_url, &u) || !http_host_loopback(u.host)))
		log_warn("aio", "plain HTTP to %s, a host that is not this one: the API key and every file travel "
				"unencrypted", cfg->base_url);
	log_info("aio", "an existing AIO sandbox at %s (one scope at a time)", cfg->base_url);
	return SBX_OK;
}

static enum sbx_err aior_kill_all(struct sbx_box *b)
{
	return kill_sessions(abox(b), false);
}

static void aior_box_status(struct sbx_box *b, struct json_t *out)
{
	struct abox *ab = abox(b);
	json_t *o = (json_t *)out;

	json_object_set_new(o, "base_url", json_string(ab->a.url));
	json_object_set_new(o, "exec", json_string(__atomic_load_n(&ab->a.shell_only, __ATOMIC_RELAXED) ? "aio-shell" :
													   "aio-bash"));
	if (sbx_box_is_gone(b))
		json_object_set_new(o, "gone", json_string(b->gone_why));
}

/* ---- files ------------------------------------------------------------------------------------ */

/* The box's sandbox is still this scope's (not destroyed: it may serve
 * another scope now). */
static bool box_live(struct abox *ab)
{
	return sbx_alive(&ab->a);
}

/* A failure of the API on the box: a missing path is an answer; anything
 * else is logged. */
static enum sbx_err api_failed(struct abox *ab, enum sbx_err e, const char *what, const char *path, const char *err)
{
	if (e == SBX_ERR_INTR)
		log_debug(ab->name, "aio: %s %s: %s", what, path, err);
	else if (e != SBX_ERR_GONE)
		log_warn(ab->name, "aio: %s %s: %s", what, path, err);
	return e;
}

/* The nanoseconds of stat's %y ("2025-01-02 03:04:05.123456789 +0000")
 * at the end of line; 0 when it has none. */
static long stat_nsec(const char *line)
{
	const char *p = strrchr(line, '.');
	long ns = 0;
	int k = 0;

	if (!p)
		return 0;
	for (p++; k < 9 && *p >= '0' && *p <= '9'; p++, k++)
		ns = ns * 10 + (*p - '0');
	for (; k < 9; k++)
		ns *= 10;
	return ns;
}

static enum sbx_err f_stat(struct sbx_box *b, const char *path, struct stat *st)
{
	struct abox *ab = abox(b);
	struct buf out = BUF_INIT(4096);
	unsigned mode;
	long long size, mtime, ctime;
	enum sbx_err e;

	if (!sbx_remote_path_ok(path))
		return SBX_ERR_INVAL;
	/* %y for the mtime's nanoseconds: a change that keeps the size within
	 * the second is still a change to the remote-files cache */
	e = run_paths(ab, "exec stat -c '%f %s %Y %Z %y' -- \"$A\"", path, NULL, &out);
	if (!e && sscanf(buf_str(&out), "%x %lld %lld %lld", &mode, &size, &mtime, &ctime) != 4) {
		log_warn(ab->name, "aio: stat %s: unexpected answer '%.60s'", path, buf_str(&out));
		e = SBX_ERR_IO;
	}
	if (!e) {
		memset(st, 0, sizeof(*st));
		st->st_mode = (mode_t)mode;
		st->st_size = size;
		st->st_nlink = S_ISDIR(st->st_mode) ? 2 : 1;
		st->st_blksize = 4096;
		st->st_blocks = (size + 511) / 512;
		st->st_mtim.tv_sec = (time_t)mtime;
		st->st_mtim.tv_nsec = stat_nsec(buf_str(&out));
		st->st_ctim.tv_sec = (time_t)ctime;
		st->st_atim = st->st_mtim;
	}
	buf_free(&out);
	return e;
}

struct list_acc {
	struct sbx_dirent *ents;
	size_t n, cap;
};

static int list_one(const struct aio_file *f, void *arg)
{
	struct list_acc *a = arg;
	struct stat *st;

	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		struct sbx_dirent *n = realloc(a->ents, cap * sizeof(*n));
		if (!n)
			return -1;
		a->ents = n;
		a->cap = cap;
	}
	if (!(a->ents[a->n].name = strdup(f->name)))
		return -1;
	st = &a->ents[a->n].st;
	memset(st, 0, sizeof(*st));
	st->st_mode = (f->is_dir ? S_IFDIR : S_IFREG) | (mode_t)(f->perm >= 0 ? f->perm : f->is_dir ? 0755 : 0644);
	st->st_size = f->size > 0 ? f->size : 0;
	st->st_nlink = f->is_dir ? 2 : 1;
	st->st_blksize = 4096;
	st->st_blocks = (st->st_size + 511) / 512;
	st->st_mtim.tv_sec = (time_t)f->mtime;
	st->st_ctim = st->st_atim = st->st_mtim;
	a->n++;
	return 0;
}

static enum sbx_err f_list(struct sbx_box *b, const char *path, struct sbx_dirent **ents, size_t *n)
{
	struct abox *ab = abox(b);
	struct list_acc a = { 0 };
	struct aio_target t;
	char err[AIO_ERR_LEN];
	enum sbx_err e;

	*ents = NULL;
	*n = 0;
	if (!sbx_remote_path_ok(path))
		return SBX_ERR_INVAL;
	if (!box_live(ab))
		return SBX_ERR_GONE;
	aior_target(ab, &t);
	e = aio_file_list(&t, path, list_one, &a, err, sizeof(err));
	if (e) {
		sbx_dirents_free(a.ents, a.n);
		return api_failed(ab, e, "list", path, err);
	}
	*ents = a.ents;
	*n = a.n;
	return SBX_OK;
}

static enum sbx_err f_read(struct sbx_box *b, const char *path, off_t off, size_t len, int fd, size_t *got)
{
	struct abox *ab = abox(b);
	struct aio_target t;
	char err[AIO_ERR_LEN];
	enum sbx_err e;

	*got = 0;
	if (!sbx_remote_path_ok(path) || off < 0)
		return SBX_ERR_INVAL;
	if (!box_live(ab))
		return SBX_ERR_GONE;
	aior_target(ab, &t);
	e = aio_file_download(&t, path, (long long)off, len, fd, got, err, sizeof(err));
	return e ? api_failed(ab, e, "read", path, err) : SBX_OK;
}

static enum sbx_err put(struct abox *ab, const char *path, int fd, off_t size, mode_t mode)
{
	struct aio_target t;
	char err[AIO_ERR_LEN];
	enum sbx_err e;

	if (!box_live(ab))
		return SBX_ERR_GONE;
	aior_target(ab, &t);
	e = aio_file_upload(&t, path, fd, (long long)size, err, sizeof(err));
	if (e)
		return api_failed(ab, e, "write", path, err);
	/* the server's umask made it 0644 (most likely): other modes by chmod */
	if ((mode & 07777) == 0644)
		return SBX_OK;
	return scriptfs_mode(&aior_sfs, &ab->base, "aio: chmod", "exec chmod \"$M\" -- \"$A\"", path, mode);
}

static enum sbx_err f_write(struct sbx_box *b, const char *path, int fd, off_t size, mode_t mode)
{
	if (!sbx_remote_path_ok(path) || size < 0)
		return SBX_ERR_INVAL;
	return put(abox(b), path, fd, size, mode);
}

static enum sbx_err mode_cmd(struct abox *ab, const char *script, const char *path, mode_t mode)
{
	return scriptfs_mode(&aior_sfs, &ab->base, "aio: command", script, path, mode);
}

/* mkdir, rmdir, unlink, rename, chmod and truncate: scriptfs's commands */
static const struct scriptfs_files aior_files = {
	.ops = {
		.stat = f_stat,
		.list = f_list,
		.read = f_read,
		.write = f_write,
		.mkdir = scriptfs_f_mkdir,
		.rmdir = scriptfs_f_rmdir,
		.unlink = scriptfs_f_unlink,
		.rename = scriptfs_f_rename,
		.chmod = scriptfs_f_chmod,
		.truncate = scriptfs_f_truncate,
	},
	.fs = &aior_sfs,
};

/* ---- skills ----------------------------------------------------------------------------------- */

static enum sbx_err skills_path(struct abox *ab, const char *rel, struct buf *out)
{
	return sbx_skills_remote_path(ab->cfg->skills_container_path, rel, out);
}


/* mkdir -p of the directories of d[] that have the mode m: their paths,
 * NUL-separated, in a file uploaded to /tmp, then one command.  Two
 * requests, where a command each (one sandbox process each) made the
 * initial sync of a skills tree of 60 directories slow. */
static enum sbx_err mkdir_mode(struct abox *ab, const struct sbx_skill_file *d, size_t n, mode_t m)
{
	struct buf list = BUF_INIT(BUF_CAP_PATH * SBX_SKILLS_BATCH), tmp = BUF_INIT(BUF_CAP_PATH);
	unsigned char rnd[6];
	int fd = -1;
	enum sbx_err e = SBX_OK;

	for (size_t i = 0; i < n && !e; i++) {
		size_t at = list.len;
		if ((d[i].mode & 07777 ? d[i].mode & 07777 : 0755) != m)
			continue;
		e = skills_path(ab, d[i].path, &list);
		if (!e && (memchr(list.ptr + at, '\0', list.len - at) || buf_add(&list, "", 1)))
			e = SBX_ERR_NOMEM;
	}
	if (!e && list.len) {
		fd = memfd_create("sbxfs-mkdirs", MFD_CLOEXEC);
		if (fd < 0 || getentropy(rnd, sizeof(rnd)) || (size_t)write(fd, list.ptr, list.len) != list.len ||
		    buf_addf(&tmp, "/tmp/.sbxfs-mkdirs-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
			    rnd[5]))
			e = SBX_ERR_NOMEM;
	}
	if (!e && list.len)
		e = put(ab, tmp.ptr, fd, (off_t)list.len, 0600);
	if (!e && list.len)
		e = mode_cmd(ab, "xargs -0 mkdir -p -m \"$M\" -- < \"$A\"; s=$?; rm -f -- \"$A\"; exit $s", tmp.ptr, m);
	if (fd >= 0)
		close(fd);
	buf_free(&list);
	buf_free(&tmp);
	return e;
}

static enum sbx_err s_mkdir_many(struct sbx_box *b, const struct sbx_skill_file *d, size_t n)
{
	struct abox *ab = abox(b);
	enum sbx_err e = SBX_OK;

	/* by mode: directories are 0755 but for a few */
	for (size_t i = 0; i < n && !e; i++) {
		mode_t m = d[i].mode & 07777 ? d[i].mode & 07777 : 0755;
		bool seen = false;
		for (size_t k = 0; k < i && !seen; k++)
			seen = (d[k].mode & 07777 ? d[k].mode & 07777 : 0755) == m;
		if (!seen)
			e = mkdir_mode(ab, d, n, m);
	}
	return e;
}

static const struct scriptfs_skills aior_skills = {
	.ops = {
		.upload = scriptfs_s_upload,
		.mkdir = scriptfs_s_mkdir,
		.remove = scriptfs_s_remove,
		.mkdir_many = s_mkdir_many,
	},
	.fs = &aior_sfs,
};

/* ---- jobs: aio_jobs.c on the box's aio_sbx ---------------------------------------------------- */

static enum sbx_err aior_exec_start(struct sbx_box *b, const struct sbx_exec_spec *spec, struct sbx_exec **out)
{
	return aio_jobs_start(&abox(b)->a, spec, out);
}

static enum sbx_err aior_exec_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out)
{
	return aio_jobs_reattach(&abox(b)->a, job_dir, out);
}

/* The job's files uploaded to run_path/NAME, in the sandbox. */
static void aior_exec_cleanup(struct sbx_box *b, const char *job_dir, const char *job_name)
{
	struct abox *ab = abox(b);
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	struct aio_env env[1] = { { "P", NULL } };
	char errtext[256];
	int code;

	(void)job_dir;
	if (!buf_addf(&p, "%s/%s", ab->a.run_path, job_name) && !sbx_box_is_gone(b)) {
		env[0].value = p.ptr;
		if (aior_run(ab, "rm -rf -- \"$P\"", env, 1, &code, errtext, sizeof(errtext), NULL) || code)
			log_warn(ab->name, "cannot remove the files of job %s in the sandbox: %s", job_name, errtext);
	}
	buf_free(&p);
}

/* ---- the descriptor --------------------------------------------------------------------------- */

static const struct sbx_net_ops aior_net_ops = {
	.netns_fd = NULL,
	.enforced_by = "the existing AIO sandbox at base_url (its own network; sbxfs cannot confine it)",
};

static const struct sbx_provider_ops aior_ops = {
	.init = aior_init,
	.discover = aior_discover,
	.create = aior_create,
	.health = aior_health,
	.destroy = aior_destroy,
	.box_free = aior_box_free,
	.adopt = aior_adopt,
	.kill_all = aior_kill_all,
	.box_status = aior_box_status,
	.exec_start = aior_exec_start,
	.exec_reattach = aior_exec_reattach,
	.exec_signal = aio_jobs_signal,
	.exec_finish = aio_jobs_finish,
	.exec_free = aio_jobs_free,
	.exec_cleanup = aior_exec_cleanup,
	.files = &aior_files.ops,
	.skills = &aior_skills.ops,
	.net = &aior_net_ops,
};

/* Not in the registry: provider_aio names it (variant) for a base_url. */
const struct sbx_provider provider_aio_remote = {
	.name = "aio",
	.caps = SBX_CAP_EXEC, /* the AIO API sends SIGTERM, SIGKILL and SIGINT only */
	.ops = &aior_ops,
};
