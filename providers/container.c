/* SPDX-License-Identifier: MIT */
/*
 * container.c - the container runtime layer (container_int.h): one
 * container per scope, made and watched through the Docker Engine API
 * (docker_api.c), never the CLI, for the providers whose sandboxes are
 * containers (docker.c and the others docs/architecture.md lists).
 * What runs inside is the provider's (struct container_type); everything
 * about the container is here: its
 * name (<container_prefix>-<scope token>, so any sbxfs finds it again), its
 * labels (provider, user, thread, scope, state_id: what discovery after a
 * crash lists; never a proof, see "records" below), the thread's data
 * bind-mounted from state_dir (a spare: empty mount points its claim
 * fills, "spares" below), skills read-only, the configured mounts,
 * resources mapped to the container's limits, no capabilities,
 * no-new-privileges, the daemon's seccomp profile, no published port, a
 * network of "none" unless network.mode is open, and the egress rules in
 * the container's network namespace.
 *
 * Why the sandbox uid and not the image's user: files the sandbox writes in
 * the bind-mounted workspace then belong to the uid the FUSE layer maps to
 * the user, in both directions (DESIGN §5); a provider may run the image's
 * user instead (its spec hook clears the user), and says so in the note.
 *
 * Failures leave nothing: a create that fails after the container exists
 * removes it; a removal that fails (dockerd gone) is retried at the next
 * create and at exit, and a container still there at the next start is
 * found (discover) and removed.  Only what thread_dir/docker.json proves
 * ours is ever adopted or removed: its recorded id, or the name and time
 * of a create whose answer never came ("records" below).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <linux/openat2.h>
#include <sys/syscall.h>

#include "../common/buf.h"
#include "../common/http.h"
#include "../common/json.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/names.h"
#include "../common/netns.h"
#include "../common/token.h"
#include "../common/util.h"
#include "../common/egress.h"
#include "claim_mount.h"
#include "container_int.h"
#include "filter.h"
#include "record.h"
#include "uidpool.h"

#define CONTAINER_DEFAULT_SOCKET "/var/run/docker.sock"
#define CONTAINER_MAX_CLIENTS 8
#define CONTAINER_SECCOMP_FILE "docker-seccomp.json" /* in state_dir: the profile, for Podman */

static const struct container_conf container_defaults = CONTAINER_CONF_DEFAULTS;

struct pending {
	struct docker *api;
	char id[128]; /* container id, or name */
};

static struct {
	pthread_mutex_t lock;
	struct {
		char *path;
		struct docker *api;
	} clients[CONTAINER_MAX_CLIENTS]; /* protected by lock; never freed before exit (boxes point at them) */
	int n_clients;
	struct pending pending[64]; /* protected by lock: removals that failed, retried later */
	int n_pending;
	struct uidpool *uids; /* made by the first init */
	struct buf seccomp;   /* the containers' seccomp profile (filter.h): made by the first init, then read-only */
} dk = { .lock = PTHREAD_MUTEX_INITIALIZER, .seccomp = BUF_INIT(1 << 20) };

/* A container box is one whose provider pauses it with this layer. */
struct cbox *cbox(struct sbx_box *b)
{
	if (!b || !b->prov->ops || b->prov->ops->freeze != &container_freeze_ops)
		abort(); /* a box handed to the wrong provider is a programming error */
	return (struct cbox *)b;
}

const struct container_conf *container_conf_of(const struct sbx_config *cfg)
{
	return cfg->prov ? cfg->prov : &container_defaults;
}

/* ---- configuration: the common keys ---------------------------------------------------------- */

static int conf_label(struct cfg_ctx *x, void *arg, const char *key, const char *full, struct cfg_node *v)
{
	struct container_conf *dc = arg;
	struct docker_label *l;
	char *val = NULL;

	if (cfg_str(x, full, v, &val))
		return -1;
	if (!strncmp(key, "org.sbxfs.", 10) && strncmp(key, "org.sbxfs.test", 14)) {
		cfg_fail(x, full, "labels under org.sbxfs. are sbxfs's own");
		free(val);
		return -1;
	}
	l = realloc(dc->labels, (dc->n_labels + 1) * sizeof(*l));
	if (!l || !(l[dc->n_labels].key = strdup(key))) {
		if (l)
			dc->labels = l;
		free(val);
		cfg_fail(x, full, "out of memory");
		return -1;
	}
	dc->labels = l;
	l[dc->n_labels].value = val;
	dc->n_labels++;
	return 0;
}

int container_conf_section(struct cfg_ctx *x, struct sbx_config *cfg, const char *key, struct cfg_node *v,
	const void *defaults, size_t size,
	int (*fn)(struct cfg_ctx *x, void *arg, const char *key, const char *full, struct cfg_node *v))
{
	if (!cfg->prov) {
		cfg->prov = malloc(size);
		if (!cfg->prov) {
			cfg_fail(x, key, "out of memory");
			return -1;
		}
		memcpy(cfg->prov, defaults, size);
	}
	return cfg_each(x, key, v, fn, cfg->prov);
}

int container_conf_key(struct cfg_ctx *x, struct container_conf *dc, const char *key, const char *full,
	struct cfg_node *v)
{
	long l;

	if (!strcmp(key, "socket"))
		return cfg_abs_path(x, full, v, &dc->socket);
	if (!strcmp(key, "labels"))
		return cfg_each(x, full, v, conf_label, dc);
	if (!strcmp(key, "uid_base") || !strcmp(key, "uid_count")) {
		if (cfg_long(x, full, v, key[4] == 'b' ? 1000 : 1, key[4] == 'b' ? 4000000000L : 1000000, &l))
			return -1;
		if (key[4] == 'b')
			dc->uid_base = (uid_t)l;
		else
			dc->uid_count = (unsigned)l;
		return 0;
	}
	return 1;
}

void container_conf_show(const struct container_conf *dc, struct json_t *out)
{
	json_t *o = (json_t *)out, *labels = json_object();

	for (size_t i = 0; i < dc->n_labels; i++)
		json_object_set_new(labels, dc->labels[i].key, json_string(dc->labels[i].value));
	json_object_set_new(o, "socket", dc->socket ? json_string(dc->socket) : json_null());
	json_object_set_new(o, "labels", labels);
	json_object_set_new(o, "uid_base", json_integer(dc->uid_base));
	json_object_set_new(o, "uid_count", json_integer(dc->uid_count));
}

void container_conf_clear(struct container_conf *dc)
{
	for (size_t i = 0; i < dc->n_labels; i++) {
		free(dc->labels[i].key);
		free(dc->labels[i].value);
	}
	free(dc->labels);
	free(dc->socket);
}

/* ---- the dockerd a configuration names ------------------------------------------------------ */

/* The socket: <section>.socket, else $DOCKER_HOST (unix:// only), else the default. */
static int socket_of(const struct sbx_config *cfg, char *out, size_t len, char *err, size_t errlen)
{
	const char *host = getenv("DOCKER_HOST");

	if (container_conf_of(cfg)->socket)
		return str_fmt(out, len, "%s", container_conf_of(cfg)->socket);
	if (host && *host) {
		if (strncmp(host, "unix://", 7) || host[7] != '/') {
			snprintf(err, errlen,
				"DOCKER_HOST=%s: sbxfs talks to dockerd over its unix socket only (unix:///path, or %s.socket)",
				host, cfg->use);
			return -1;
		}
		return str_fmt(out, len, "%s", host + 7);
	}
	return str_fmt(out, len, "%s", CONTAINER_DEFAULT_SOCKET);
}
static struct docker *client_get(const char *path)
{
	struct docker *api = NULL;

	pthread_mutex_lock(&dk.lock);
	for (int i = 0; i < dk.n_clients && !api; i++)
		if (!strcmp(dk.clients[i].path, path))
			api = dk.clients[i].api;
	if (!api && dk.n_clients < CONTAINER_MAX_CLIENTS && (dk.clients[dk.n_clients].path = strdup(path))) {
		api = docker_new(path, 30000);
		if (api)
			dk.clients[dk.n_clients++].api = api;
		else
			free(dk.clients[dk.n_clients].path);
	}
	pthread_mutex_unlock(&dk.lock);
	return api;
}

static struct docker *client_of(const struct sbx_config *cfg)
{
	char path[PATH_MAX], err[256];

	if (socket_of(cfg, path, sizeof(path), err, sizeof(err)))
		return NULL;
	return client_get(path);
}

/* Retry the removals that failed (dockerd was away). */
static void removals_retry(void)
{
	struct pending todo[64];
	int n;

	pthread_mutex_lock(&dk.lock);
	n = dk.n_pending;
	memcpy(todo, dk.pending, sizeof(todo[0]) * (size_t)n);
	dk.n_pending = 0;
	pthread_mutex_unlock(&dk.lock);
	for (int i = 0; i < n; i++) {
		char err[DOCKER_ERR_LEN];
		if (docker_remove(todo[i].api, todo[i].id, err, sizeof(err)) == SBX_OK) {
			log_info("docker", "container %.12s removed (its removal had failed before)", todo[i].id);
			continue;
		}
		pthread_mutex_lock(&dk.lock);
		if (dk.n_pending < 64)
			dk.pending[dk.n_pending++] = todo[i];
		pthread_mutex_unlock(&dk.lock);
	}
}

static void removal_remember(struct docker *api, const char *id)
{
	pthread_mutex_lock(&dk.lock);
	if (dk.n_pending < 64) {
		dk.pending[dk.n_pending].api = api;
		snprintf(dk.pending[dk.n_pending].id, sizeof(dk.pending[0].id), "%s", id);
		dk.n_pending++;
	}
	pthread_mutex_unlock(&dk.lock);
}

/* ---- start of day ------------------------------------------------------------------------------ */

/* The profile in a file too, state_dir/docker-seccomp.json: Podman's
 * compat API reads "seccomp=" as a path on its host (docker_api.c). */
static int seccomp_write(const struct sbx_config *cfg, char *err, size_t errlen)
{
	char path[PATH_MAX];

	if (str_fmt(path, sizeof(path), "%s/" CONTAINER_SECCOMP_FILE, cfg->state_dir) ||
	    util_write_atomic(path, dk.seccomp.ptr, dk.seccomp.len, 0644)) {
		snprintf(err, errlen, "%s provider: cannot write %s/%s: %s", cfg->use, cfg->state_dir,
			CONTAINER_SECCOMP_FILE, strerror(errno));
		return -1;
	}
	return 0;
}

enum sbx_err container_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
	const struct container_conf *dc = container_conf_of(cfg);
	char path[PATH_MAX], version[16] = "", derr[DOCKER_ERR_LEN] = "";
	struct docker *api;

	if (http_init()) {
		snprintf(err, errlen, "%s provider: libcurl cannot be initialised", cfg->use);
		return SBX_ERR_IO;
	}
	if (socket_of(cfg, path, sizeof(path), err, errlen))
		return SBX_ERR_INVAL;
	pthread_mutex_lock(&dk.lock);
	if (!dk.uids)
		dk.uids = uidpool_new(dc->uid_base, dc->uid_count);
	/* the same system-call policy as local sandboxes (filter.c), in place
	 * of Docker's default profile, which lets a container create any
	 * socket family (vsock reaches the hypervisor in every network mode) */
	if (!dk.seccomp.len && filter_profile(&dk.seccomp, derr, sizeof(derr)))
		buf_reset(&dk.seccomp);
	pthread_mutex_unlock(&dk.lock);
	if (!dk.seccomp.len) {
		snprintf(err, errlen, "%s provider: %s", cfg->use, derr);
		return SBX_ERR_INVAL;
	}
	if (seccomp_write(cfg, err, errlen))
		return SBX_ERR_IO;
	if (!dk.uids) {
		snprintf(err, errlen, "%s provider: out of memory", cfg->use);
		return SBX_ERR_NOMEM;
	}
	uidpool_scan(dk.uids, cfg->state_dir);
	api = client_get(path);
	if (!api) {
		snprintf(err, errlen, "%s provider: out of memory", cfg->use);
		return SBX_ERR_NOMEM;
	}
	/* dockerd may come later (or come back): sandboxes fail until it answers */
	switch (docker_negotiate(api, version, sizeof(version), derr, sizeof(derr))) {
	case SBX_OK:
		log_info("docker", "%s at unix://%s, Engine API %s", docker_is_podman(api) ? "Podman" : "dockerd", path,
			version);
		break;
	case SBX_ERR_NOTSUP:
		snprintf(err, errlen, "%s provider: %s", cfg->use, derr);
		return SBX_ERR_NOTSUP;
	default:
		log_warn("docker", "%s: sandboxes cannot be created until dockerd answers", derr);
		break;
	}
	return SBX_OK;
}

/* ---- records: the proof of ownership -----------------------------------------------------
 *
 * A container is this daemon's only when thread_dir/docker.json says so:
 * the container id recorded there or, for a create whose answer never came
 * (a kill -9, a timeout), the name recorded before the create was sent with
 * the wall-clock time of that intent, matched against dockerd's own creation
 * time of the container holding the name now (within CONTAINER_INTENT_WINDOW_S
 * after the intent: no container made before our create was sent can be
 * ours, and a name is free again only once its container is gone).  Our
 * labels must be there too, but they prove nothing alone: anyone who can
 * run `docker inspect` can copy them and an image can carry them, so a
 * container with every label of ours, even under the name of a container of
 * ours that is gone, is never adopted or removed; the log says it was
 * skipped.
 *
 * The record lives as long as its container may: written before the
 * create, completed with the id as soon as the create answers, removed
 * only once a removal is confirmed (a failed one keeps it, and the next
 * create of the scope or the next start finishes the job).  It names one
 * container at most: a create first settles what an earlier record names
 * (crec_settle).  The window: the create request's own timeout (30 s)
 * and as much again for a dockerd that finished it after the client gave
 * up; a container that dockerd made later still is not provably ours and
 * is left (logged) rather than risk removing a stranger's.
 */
#define CONTAINER_INTENT_WINDOW_S 60

struct crec {
	char name[128];
	char id[DOCKER_ID_LEN + 1]; /* "" until the create answered */
	long long intent_ns;        /* 0: none (a record of an older sbxfs: only its id proves) */
	char scope[SCOPE_TOKEN_LEN + 1]; /* its scope label: a claimed spare's is the spare's token ("": the scope's) */
};

static long long wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int crec_save(struct cbox *db)
{
	json_t *o = json_pack("{s:s,s:I,s:s,s:i,s:I,s:i,s:i,s:s}", "name", db->name, "intent_ns",
		(json_int_t)db->intent_ns, "id", db->id, "init_pid", (int)db->init_pid, "init_start",
		(json_int_t)db->init_start, "uid", (int)db->base.uid, "gid", (int)db->base.gid, "scope", db->token);
	int r = o ? record_save(db->thread_dir, "docker.json", o) : -1;

	json_decref(o);
	return r;
}

static void crec_remove(const char *thread_dir)
{
	record_remove(thread_dir, "docker.json");
}

/* thread_dir/docker.json into r: 0, or -1 when there is none (or it names
 * no container: then nothing is provably ours). */
static int crec_load(const char *thread_dir, struct crec *r)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	json_t *o = NULL, *v;
	int ret = -1;

	memset(r, 0, sizeof(*r));
	if (layout_file(&path, thread_dir, "docker.json") || !(o = json_read_file(path.ptr)))
		goto out;
	v = json_object_get(o, "name");
	if (!json_is_string(v) || str_fmt(r->name, sizeof(r->name), "%s", json_string_value(v)) || !r->name[0])
		goto out;
	v = json_object_get(o, "id");
	if (json_is_string(v) && str_fmt(r->id, sizeof(r->id), "%s", json_string_value(v)))
		goto out;
	v = json_object_get(o, "intent_ns");
	r->intent_ns = json_is_integer(v) && json_integer_value(v) > 0 ? json_integer_value(v) : 0;
	v = json_object_get(o, "scope");
	if (json_is_string(v) && strlen(json_string_value(v)) == SCOPE_TOKEN_LEN)
		snprintf(r->scope, sizeof(r->scope), "%s", json_string_value(v));
	ret = r->id[0] || r->intent_ns ? 0 : -1;
out:
	json_decref(o);
	buf_free(&path);
	return ret;
}

static bool labels_ours(const struct docker_container *c, const char *state_id, const char *token)
{
	const char *sid = docker_label(c, CONTAINER_LABEL_STATE_ID), *scope = docker_label(c, CONTAINER_LABEL_SCOPE);

	return sid && !strcmp(sid, state_id) && scope && !strcmp(scope, token);
}

/* NULL when the record proves c ours, else why not. */
static const char *crec_why_not(const struct crec *r, const struct docker_container *c, const char *state_id,
	const char *token)
{
	/* a claimed spare keeps the scope label it was made with (labels are
	 * immutable); the record, in the daemon's own state_dir, says which */
	if (!labels_ours(c, state_id, r->scope[0] ? r->scope : token))
		return "its labels are not this scope's";
	if (r->id[0])
		return strcmp(r->id, c->id) ? "not the container id recorded" : NULL;
	if (strcmp(r->name, c->name))
		return "not the name recorded";
	if (!c->created_ns || c->created_ns < r->intent_ns ||
	    c->created_ns - r->intent_ns > CONTAINER_INTENT_WINDOW_S * 1000000000LL)
		return "made outside the time of the create recorded";
	return NULL;
}

/* The container a record names, inspected: by its id, else by its name. */
static enum sbx_err crec_inspect(struct docker *api, const struct crec *r, struct docker_container *c, char *err,
	size_t errlen)
{
	return docker_inspect(api, r->id[0] ? r->id : r->name, c, err, errlen);
}

static void log_skipped(const char *scope, const char *use, const struct docker_container *c, const char *why)
{
	log_warn(scope, "%s: container %.12s (%s) carries this sbxfs's labels but is not one it made (%s): skipped, "
			"never adopted or removed",
		use, c->id, c->name, why);
}

/* Before a create: what an earlier record of the scope names (a destroy
 * that could not finish, a create whose answer never came) is removed when
 * proven ours and skipped when it only looks ours; the record goes once
 * nothing of ours can be left.  SBX_OK, or why the create cannot go on
 * (dockerd away, a removal that failed: the record stays for the next try).
 * after_failure: right after a failed create, whose cause was logged. */
static enum sbx_err crec_settle(struct docker *api, const struct sbx_spec *s, const char *scope, bool after_failure)
{
	struct docker_container c = { 0 };
	char err[DOCKER_ERR_LEN];
	const char *why;
	struct crec r;
	enum sbx_err e;

	if (crec_load(s->dirs.thread_dir, &r))
		return SBX_OK;
	e = crec_inspect(api, &r, &c, err, sizeof(err));
	if (e == SBX_ERR_GONE) {
		crec_remove(s->dirs.thread_dir);
		return SBX_OK;
	}
	if (e) {
		if (after_failure) /* the create's failure was logged already */
			log_warn(scope, "%s: whether dockerd made the container %s cannot be checked now (%s): its record "
					"stays for the next create or start",
				s->cfg->use, r.name, err);
		else
			log_err(scope, "%s: cannot check the container %s an earlier sandbox of this scope recorded: %s",
				s->cfg->use, r.id[0] ? r.id : r.name, err);
		return e;
	}
	why = crec_why_not(&r, &c, s->state_id, s->token);
	if (why) {
		log_skipped(scope, s->cfg->use, &c, why);
		crec_remove(s->dirs.thread_dir);
	} else {
		log_warn(scope, "%s: removing the container %.12s (%s) an earlier sandbox of this scope left", s->cfg->use,
			c.id, c.name);
		e = docker_remove(api, c.id, err, sizeof(err));
		if (e)
			log_err(scope, "%s: cannot remove the container %.12s: %s", s->cfg->use, c.id, err);
		else
			crec_remove(s->dirs.thread_dir);
	}
	docker_container_clear(&c);
	return e;
}

static struct cbox *cbox_new(const struct sbx_spec *s, struct docker *api, const struct container_type *t)
{
	struct cbox *db = calloc(1, t->box_size);

	if (!db)
		return NULL;
	if (!(db->thread_dir = strdup(s->dirs.thread_dir)) ||
	    str_fmt(db->name, sizeof(db->name), "%s-%s", s->cfg->container_prefix, s->token)) {
		free(db->thread_dir);
		free(db);
		return NULL;
	}
	sbx_box_init(&db->base, t->prov);
	db->type = t;
	snprintf(db->token, sizeof(db->token), "%s", s->token);
	db->cfg = config_get((struct sbx_config *)s->cfg);
	db->api = api;
	db->output_max = s->cfg->res.output;
	db->spare = s->spare;
	if (t->box_init)
		t->box_init(db, s);
	return db;
}

static void cbox_free(struct cbox *db)
{
	if (!db)
		return;
	config_put(db->cfg);
	free(db->thread_dir);
	free(db);
}

int container_netns(struct cbox *db)
{
	return netns_open_pid(db->init_pid, db->init_start);
}

bool container_running(struct cbox *db)
{
	return db->init_pid && util_proc_starttime(db->init_pid) == db->init_start;
}

/* The container's init (and its pid namespace), learnt from an inspect. */
static void cbox_learn_init(struct cbox *db, const struct docker_container *info)
{
	db->init_pid = info->pid;
	db->init_start = util_proc_starttime(info->pid);
	db->pidns = util_ns_inode(info->pid, "pid");
}

/* The network policy (DESIGN §7) inside the container's own network
 * namespace, as for local sandboxes (common/egress.h): in open mode (Docker's
 * bridge) everything but private, link-local, metadata and the host's own
 * addresses, DNS only to the container's resolver; isolated and allowlist
 * (Docker's "none") loopback only, where the approval proxy listens.  The
 * container has no capability, so it cannot change the rules.  Installed
 * before the sandbox is ready, so before any job runs. */
static enum sbx_err container_egress(struct cbox *db, const char *scope)
{
	struct egress_rules rules = { .mode = db->cfg->net_mode, .allow_private = db->cfg->allow_private };
	char resolv[64], dns[64], err[512];
	int nsfd = container_netns(db), r;

	if (nsfd < 0) {
		log_err(scope, "%s: cannot open the container's network namespace: %s", db->cfg->use, strerror(errno));
		return SBX_ERR_IO;
	}
	/* the resolver Docker wrote into the container's /etc/resolv.conf
	 * (read through the init's root: the container's own view) */
	if (rules.mode == NET_OPEN && !str_fmt(resolv, sizeof(resolv), "/proc/%d/root/etc/resolv.conf", (int)db->init_pid))
		rules.dns = egress_resolver(resolv, dns, sizeof(dns));
	r = egress_apply(nsfd, &rules, err, sizeof(err));
	close(nsfd);
	if (r) {
		log_err(scope, "%s: cannot install the container's egress rules: %s", db->cfg->use, err);
		return SBX_ERR_IO;
	}
	return SBX_OK;
}

/* The network capability: the daemon serves the approval proxy inside the
 * container's network namespace. */
static int container_netns_fd(struct sbx_box *b)
{
	return container_netns(cbox(b));
}

const struct sbx_net_ops container_net_ops = {
	.netns_fd = container_netns_fd,
	.enforced_by = NULL,
};

/* ---- create ---------------------------------------------------------------------------------- */

int container_spec_mount(struct container_spec *c, const char *src, const char *dst, bool ro)
{
	if (c->n_mounts >= CONTAINER_MAX_MOUNTS)
		return -1;
	c->mounts[c->n_mounts++] = (struct docker_mount){ src, dst, ro };
	c->d.mounts = c->mounts;
	c->d.n_mounts = c->n_mounts;
	return 0;
}

static int spec_label(struct container_spec *c, const char *k, const char *v)
{
	if (c->n_labels >= CONTAINER_MAX_LABELS)
		return -1;
	c->labels[c->n_labels++] = (struct docker_kv){ k, v };
	return 0;
}

int container_spec_env(struct container_spec *c, const char *key, const char *value)
{
	struct buf *t = &c->envtext[c->n_env];

	if (c->n_env >= CONTAINER_MAX_ENV - 1)
		return -1;
	buf_init(t, 64 * 1024);
	if (buf_addf(t, "%s=%s", key, value)) {
		buf_free(t);
		return -1;
	}
	c->env[c->n_env++] = t->ptr;
	c->env[c->n_env] = NULL;
	c->d.env = c->env;
	return 0;
}

static int spec_argv(const char **out, char *const *argv, size_t n)
{
	if (n >= CONTAINER_MAX_ARGS)
		n = CONTAINER_MAX_ARGS - 1; /* cut, as a YAML list that long is no command */
	for (size_t i = 0; i < n; i++)
		out[i] = argv[i];
	out[n] = NULL;
	return 0;
}

int container_spec_cmd(struct container_spec *c, char *const *argv, size_t n)
{
	if (spec_argv(c->cmd, argv, n))
		return -1;
	c->d.cmd = n ? c->cmd : NULL;
	return 0;
}

int container_spec_caps(struct container_spec *c, char *const *caps, size_t n)
{
	if (spec_argv(c->caps, caps, n))
		return -1;
	c->d.cap_add = n ? c->caps : NULL;
	return 0;
}

static void spec_free(struct container_spec *c)
{
	for (size_t i = 0; i < c->n_env; i++)
		buf_free(&c->envtext[i]);
}

/* ---- spares (pool.prewarm) -------------------------------------------------------------------
 *
 * A spare is a container like a thread's, but made before any thread wants
 * it: where a thread's data goes it binds empty directories of its own
 * (state_dir/spare-mounts/..., shared by all spares), its labels name no user or thread
 * (org.sbxfs.spare carries its token), and its init runs as root with only
 * what it needs to take a uid later (docker.c).  Its record (docker.json)
 * is in the spare's directory.  A claim attaches the thread's directories
 * over the empty binds through the init's namespaces (claim_mount.c), as
 * a cold create would bind them (the same read-only flags; Docker's binds
 * carry no nosuid, neither do these), sets the hostname a cold create
 * gives, has the init take the thread's uid, and moves the record into the
 * thread's directory (a rename: one directory holds it at any time), so a
 * restart adopts the container as the thread's sandbox, and the spares
 * module, which adopts by its own directories, never takes it for a spare.
 */
static const char *const spare_dirs[CONTAINER_SPARE_DIRS] = { "workspace", "uploads", "outputs", "skills" };

/* The sandbox paths a thread's directories are bound at, in spare_dirs' order. */
static const char *spare_target(const struct sbx_config *cfg, int i)
{
	static const char *const t[] = { LAYOUT_SANDBOX_WORKSPACE, LAYOUT_SANDBOX_USER_DATA "/uploads",
		LAYOUT_SANDBOX_USER_DATA "/outputs" };

	return i < 3 ? t[i] : cfg->skills_container_path;
}

/* The thread's directory to attach at spare_target(i). */
static const char *spare_thread_src(const struct sbx_spec *s, int i)
{
	const char *src[] = { s->dirs.workspace, s->dirs.uploads, s->dirs.outputs, s->dirs.skills };

	return src[i];
}

/* A spare's empty mount point i, made when missing: one set for every
 * spare, state_dir/spare-mounts/<name> (root's, empty, never removed).
 * Never a spare's own directory: removing the directory a mount sits on
 * detaches it in every namespace, so a claimed spare would lose the
 * thread's directories when its spare directory goes. */
static int container_spare_dir(const struct sbx_spec *s, int i, char *out, size_t len)
{
	if (str_fmt(out, len, "%s/spare-mounts/%s", s->cfg->state_dir, spare_dirs[i]))
		return -1;
	return util_mkdir_p(out, 0555);
}

/* The data mounts of a create: the thread's, or a spare's empty ones. */
static int spec_data_mounts(struct container_spec *c, const struct sbx_spec *s)
{
	int r = 0;

	for (int i = 0; i < CONTAINER_SPARE_DIRS; i++) {
		const char *src = spare_thread_src(s, i);

		if (s->spare) {
			if (container_spare_dir(s, i, c->spare_src[i], sizeof(c->spare_src[i])))
				return -1;
			src = c->spare_src[i];
		}
		r |= container_spec_mount(c, src, spare_target(s->cfg, i), i == 3);
	}
	return r;
}

/* The common part of the create, then what the provider runs inside. */
static int container_spec(struct container_spec *c, const struct sbx_spec *s, struct cbox *db)
{
	const struct sbx_config *cfg = s->cfg;
	const struct container_conf *dc = container_conf_of(cfg);
	struct docker_create_spec *d = &c->d;
	int r = 0;

	r |= spec_data_mounts(c, s);
	for (size_t i = 0; i < cfg->n_mounts; i++)
		r |= container_spec_mount(c, cfg->mounts[i].host_path, cfg->mounts[i].container_path,
			cfg->mounts[i].read_only);
	r |= spec_label(c, CONTAINER_LABEL_PROVIDER, cfg->use);
	r |= spec_label(c, CONTAINER_LABEL_USER, s->user);
	r |= spec_label(c, CONTAINER_LABEL_THREAD, s->thread);
	r |= spec_label(c, CONTAINER_LABEL_SCOPE, s->token);
	r |= spec_label(c, CONTAINER_LABEL_STATE_ID, s->state_id);
	if (s->spare)
		r |= spec_label(c, CONTAINER_LABEL_SPARE, s->token);
	for (size_t i = 0; i < dc->n_labels; i++)
		r |= spec_label(c, dc->labels[i].key, dc->labels[i].value);
	snprintf(c->user, sizeof(c->user), "%u:%u", (unsigned)db->base.uid, (unsigned)db->base.gid);
	snprintf(c->hostname, sizeof(c->hostname), "sbx-%s", s->token);
	d->name = db->name;
	d->image = cfg->image ? cfg->image : db->type->default_image;
	d->user = c->user;
	d->hostname = c->hostname;
	d->workdir = LAYOUT_SANDBOX_WORKSPACE;
	d->labels = c->labels;
	d->n_labels = c->n_labels;
	d->network_mode = cfg->net_mode == NET_OPEN ? "bridge" : "none";
	d->seccomp_profile = dk.seccomp.ptr;
	d->seccomp_profile_file = str_fmt(c->seccomp_file, sizeof(c->seccomp_file), "%s/" CONTAINER_SECCOMP_FILE,
					  cfg->state_dir) ? NULL : c->seccomp_file;
	d->memory = (long long)cfg->res.memory;
	d->nano_cpus = (long long)(cfg->res.cpus * 1e9);
	d->pids_limit = (long long)cfg->res.pids;
	d->tmp_size = (long long)cfg->res.tmp_size;
	if (!r && db->type->spec)
		r = db->type->spec(db, s, c);
	return r ? -1 : 0;
}

/* Make the container: what an earlier record names settled first, the
 * intent recorded before the request (so a kill -9 before the answer leaves
 * what proves the container ours), the id recorded at once after it.
 * *made once a container of ours exists (the caller removes it on a later
 * failure).  A name held by any container not proven ours fails the create
 * and is left alone. */
static enum sbx_err container_make(struct cbox *db, const struct docker_create_spec *d, const struct sbx_spec *s,
	const char *scope, bool *made)
{
	struct token *prev;
	char err[DOCKER_ERR_LEN];
	enum sbx_err e;

	*made = false;
	e = crec_settle(db->api, s, scope, false);
	if (e)
		return e;
	db->intent_ns = wall_ns();
	if (crec_save(db)) {
		log_err(scope, "%s: cannot record the create in %s: %s", s->cfg->use, db->thread_dir, strerror(errno));
		crec_remove(db->thread_dir);
		return SBX_ERR_IO;
	}
	e = docker_create(db->api, d, db->id, err, sizeof(err));
	if (!e) {
		*made = true;
		if (crec_save(db)) {
			log_err(scope, "%s: cannot record the container %.12s: %s", s->cfg->use, db->id, strerror(errno));
			return SBX_ERR_IO;
		}
		return SBX_OK;
	}
	if (e == SBX_ERR_EXIST) {
		log_err(scope, "%s: the container name %s is taken by a container this sbxfs did not make (another "
			       "state_dir, not sbxfs, or copied labels): left alone; change container_prefix",
			s->cfg->use, db->name);
		crec_remove(db->thread_dir);
		return SBX_ERR_IO;
	}
	if (e == SBX_ERR_GONE)
		log_err(scope, "%s: image '%s' not found in dockerd (%s); sbxfs never pulls: docker pull or build it",
			s->cfg->use, d->image, err);
	else
		log_err(scope, "%s: cannot create the container: %s", s->cfg->use, err);
	/* dockerd may have made it all the same (no answer, a 5xx, a cancel):
	 * what the intent names is removed now (not under the create's token,
	 * which may be cancelled), or by the next create or start */
	prev = token_enter(NULL);
	crec_settle(db->api, s, scope, true);
	token_leave(prev);
	return e;
}

/* The sandbox's files on the host, as its uid: the data directories and
 * what the provider needs beyond them. */
static int container_files(struct cbox *db, const struct sbx_spec *s)
{
	uid_t uid;
	gid_t gid;
	int r;

	if (s->spare) { /* root until its claim; its mount points: spec_data_mounts */
		db->base.uid = db->base.gid = 0;
		return db->type->claim_uid ? 0 : ENOTSUP;
	}
	r = uidpool_assign(dk.uids, s->cfg, s->user, s->dirs.thread_dir, &uid, &gid);
	if (!r && layout_make_data_dirs(s->dirs.thread_dir, uid, gid))
		r = errno == ENOSPC ? ENOSPC : EIO;
	if (r)
		return r;
	db->base.uid = uid;
	db->base.gid = gid;
	return db->type->prepare ? db->type->prepare(db, s) : 0;
}

/* Start the container made, learn its init, install its egress rules. */
static enum sbx_err container_run(struct cbox *db, const struct sbx_spec *s, const char *scope)
{
	struct docker_container info = { 0 };
	char err[DOCKER_ERR_LEN];
	enum sbx_err e;

	e = docker_start(db->api, db->id, err, sizeof(err));
	if (!e)
		e = docker_inspect(db->api, db->id, &info, err, sizeof(err));
	if (e == SBX_ERR_INTR)
		log_info(scope, "%s: the create was cancelled as the container %s started", s->cfg->use, db->name);
	else if (e)
		log_err(scope, "%s: cannot start the container %s: %s", s->cfg->use, db->name, err);
	if (e)
		return e;
	if (!info.running || info.pid <= 0) {
		log_err(scope, "%s: the container %s ended at once (%s, exit code %d)", s->cfg->use, db->name, info.status,
			info.exit_code);
		docker_container_clear(&info);
		return SBX_ERR_IO;
	}
	cbox_learn_init(db, &info);
	docker_container_clear(&info);
	return container_egress(db, scope);
}

/* A failed create's container goes now, or later when dockerd is away. */
static void container_discard(struct cbox *db, const char *scope)
{
	char err[DOCKER_ERR_LEN];

	if (docker_remove(db->api, db->id, err, sizeof(err))) {
		log_warn(scope, "%s: cannot remove the failed container %s now (%s): retried later", db->cfg->use, db->name,
			err);
		removal_remember(db->api, db->id);
	} else {
		crec_remove(db->thread_dir);
	}
}

enum sbx_err container_create(const struct sbx_spec *s, const struct container_type *t, struct sbx_box **out)
{
	struct container_spec *c = calloc(1, sizeof(*c));
	struct docker *api = client_of(s->cfg);
	struct cbox *db = NULL;
	char scope[NAMES_SCOPE_MAX];
	enum sbx_err e = SBX_ERR_NOMEM;
	bool made = false;
	int r;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	if (!c || !api || !(db = cbox_new(s, api, t)))
		goto out;
	removals_retry();
	r = container_files(db, s);
	if (r) {
		log_err(scope, "%s: cannot prepare the sandbox's files: %s", s->cfg->use, strerror(r));
		e = sbx_err_from_errno(r);
		goto out;
	}
	if (container_spec(c, s, db)) {
		log_err(scope, "%s: too many mounts, labels or environment entries", s->cfg->use);
		e = SBX_ERR_INVAL;
		goto out;
	}
	e = container_make(db, &c->d, s, scope, &made);
	if (!e)
		e = container_run(db, s, scope);
	if (!e && t->ready)
		e = t->ready(db, scope, s->cfg->ready_timeout);
	if (e)
		goto out;
	snprintf(db->base.remote_id, sizeof(db->base.remote_id), "docker:%.12s", db->id);
	if (crec_save(db)) {
		log_err(scope, "%s: cannot record the container: %s", s->cfg->use, strerror(errno));
		e = SBX_ERR_IO;
		goto out;
	}
	*out = &db->base;
	db = NULL;
	e = SBX_OK;
out:
	if (e && made) {
		/* a cancelled create cleans up all the same: not under its token */
		struct token *prev = token_enter(NULL);
		container_discard(db, scope);
		token_leave(prev);
	}
	if (c)
		spec_free(c);
	free(c);
	cbox_free(db);
	return e;
}

/* ---- claim of a spare (see "spares") ---------------------------------------------------------- */

/* The record follows the box: saved where it is (with the thread's uid),
 * then renamed into the thread's directory. */
static enum sbx_err claim_move_record(struct cbox *db, const struct sbx_spec *s, const char *scope)
{
	struct buf from = BUF_INIT(BUF_CAP_PATH), to = BUF_INIT(BUF_CAP_PATH);
	char *dir = strdup(s->dirs.thread_dir);
	enum sbx_err e = SBX_ERR_IO;

	if (!dir)
		return SBX_ERR_NOMEM;
	if (crec_save(db) || layout_file(&from, db->thread_dir, "docker.json") ||
	    layout_file(&to, dir, "docker.json") || rename(from.ptr, to.ptr)) {
		log_err(scope, "%s: claim: cannot move the record to %s: %s", s->cfg->use, dir, strerror(errno));
		free(dir);
	} else {
		free(db->thread_dir);
		db->thread_dir = dir;
		e = SBX_OK;
	}
	buf_free(&from);
	buf_free(&to);
	return e;
}

/* Docker's /etc/hostname and /etc/hosts (open mode: the container's
 * address) name the spare's hostname: the thread's instead, as a cold
 * create's files would, rewritten in place (a rename would leave the bind
 * mount on the old file; both names are sbx-<16 hex digits>: the length
 * is the same).  Opened through the init's root with RESOLVE_IN_ROOT, so a
 * symlink of the image never leads outside it; a file missing (another
 * engine) is left. */
#define CLAIM_ETC_MAX (64 * 1024)

static int claim_etc_one(int root, const char *rel, const char *from, const char *to)
{
	struct open_how how = { .flags = O_RDWR | O_NOFOLLOW | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS };
	int fd = (int)syscall(SYS_openat2, root, rel, &how, sizeof(how)), changed = 0, r = 0;
	size_t flen = strlen(from);
	char *text = malloc(CLAIM_ETC_MAX + 1), *p;
	ssize_t n = -1;

	if (fd >= 0 && text)
		n = pread(fd, text, CLAIM_ETC_MAX, 0);
	if (n >= 0) {
		text[n] = '\0';
		for (p = text; (p = strstr(p, from)); p += flen, changed++)
			memcpy(p, to, flen);
		if (changed && pwrite(fd, text, (size_t)n, 0) != n)
			r = -1;
	} else if (fd >= 0 || errno != ENOENT) {
		r = -1;
	}
	if (fd >= 0)
		close(fd);
	free(text);
	return r;
}

static enum sbx_err claim_etc_names(struct cbox *db, const char *from, const char *to, const char *scope)
{
	static const char *const files[] = { "etc/hostname", "etc/hosts" };
	char path[64];
	int root, r = 0;

	if (strlen(from) != strlen(to))
		return SBX_ERR_INVAL;
	snprintf(path, sizeof(path), "/proc/%d/root", (int)db->init_pid);
	root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	for (size_t i = 0; root >= 0 && !r && i < 2; i++)
		if ((r = claim_etc_one(root, files[i], from, to)))
			log_err(scope, "%s: claim: cannot rewrite /%s in the spare: %s", db->cfg->use, files[i],
				strerror(errno));
	if (root < 0)
		log_err(scope, "%s: claim: the spare's root (init %d): %s", db->cfg->use, (int)db->init_pid,
			strerror(errno));
	else
		close(root);
	return root < 0 || r ? SBX_ERR_IO : SBX_OK;
}

enum sbx_err container_claim(struct cbox *db, const struct sbx_spec *s)
{
	struct claim_mount m[CONTAINER_SPARE_DIRS];
	char scope[NAMES_SCOPE_MAX], hostname[64], spare_host[64];
	unsigned long long mntns = db->init_pid ? util_ns_inode(db->init_pid, "mnt") : 0;
	enum sbx_err e;
	int r;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	if (!db->type->claim_uid)
		return SBX_ERR_NOTSUP;
	if (!mntns || !container_running(db)) { /* checked after the inode: it is the init's */
		log_err(scope, "%s: claim: the spare's container %s is not running", s->cfg->use, db->name);
		return SBX_ERR_GONE;
	}
	r = container_files(db, s);
	if (r) {
		log_err(scope, "%s: claim: cannot prepare the sandbox's files: %s", s->cfg->use, strerror(r));
		return sbx_err_from_errno(r);
	}
	e = db->type->claim_uid(db, db->base.uid, db->base.gid, scope);
	if (e)
		return e;
	for (int i = 0; i < CONTAINER_SPARE_DIRS; i++)
		m[i] = (struct claim_mount){ spare_thread_src(s, i), spare_target(s->cfg, i), i == 3 };
	snprintf(hostname, sizeof(hostname), "sbx-%s", s->token);
	snprintf(spare_host, sizeof(spare_host), "sbx-%s", db->token);
	e = claim_mount_attach(db->init_pid, mntns, m, CONTAINER_SPARE_DIRS, false, hostname, scope, s->cfg->use);
	if (!e)
		e = claim_etc_names(db, spare_host, hostname, scope);
	if (e)
		return e;
	db->output_max = s->cfg->res.output;
	e = claim_move_record(db, s, scope);
	if (!e)
		db->spare = false;
	return e;
}

bool container_spare_claimed(struct cbox *db)
{
	return container_running(db) && util_proc_uid(db->init_pid) != 0;
}

/* ---- health, destroy, adopt, discover ------------------------------------------------------- */

/* By the recorded id only: a container that took the name since is not this box's. */
enum sbx_err container_health(struct cbox *db)
{
	struct docker_container info;
	char err[DOCKER_ERR_LEN];
	enum sbx_err e;
	bool alive;

	if (!db->id[0])
		return SBX_ERR_GONE;
	e = docker_inspect(db->api, db->id, &info, err, sizeof(err));
	if (e) {
		log_warn(db->name, "health check: %s", err);
		return SBX_ERR_GONE;
	}
	if (!db->init_pid && info.running)
		cbox_learn_init(db, &info); /* adopted while dockerd was away (or stopped): learn its init now */
	alive = info.running && info.pid == db->init_pid && util_proc_starttime(info.pid) == db->init_start;
	docker_container_clear(&info);
	return alive ? SBX_OK : SBX_ERR_GONE;
}

/* By the recorded id only; the record goes once the removal is confirmed
 * (a failed one keeps it: retried while the daemon runs, and the next
 * create of the scope or the next start finishes it). */
enum sbx_err container_destroy(struct sbx_box *b)
{
	struct cbox *db = cbox(b);
	char err[DOCKER_ERR_LEN];
	enum sbx_err e = SBX_OK;

	if (db->id[0])
		e = docker_remove(db->api, db->id, err, sizeof(err));
	if (e) {
		log_err(db->name, "cannot remove the container %.12s: %s; retried later", db->id, err);
		removal_remember(db->api, db->id);
	} else {
		crec_remove(db->thread_dir);
	}
	db->init_pid = 0;
	return e;
}

void container_box_free(struct sbx_box *b)
{
	cbox_free(cbox(b));
}

/* Adoption by the record alone (see "records"): no record, no container;
 * a container the record does not prove ours is skipped, and the record,
 * which then names nothing that exists, goes.  dockerd away: a recorded id
 * is adopted as it is (the health check decides on reclaim); a create's
 * intent cannot be checked, so SBX_ERR_IO keeps the record for later. */
enum sbx_err container_adopt(const struct sbx_spec *s, const struct container_type *t, struct sbx_box **out)
{
	struct docker *api = client_of(s->cfg);
	struct docker_container info = { 0 };
	struct cbox *db = NULL;
	struct crec r;
	char err[DOCKER_ERR_LEN], scope[NAMES_SCOPE_MAX];
	enum sbx_err e = SBX_ERR_NOMEM;
	const char *why;
	uid_t uid;
	gid_t gid;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	if (!api || !(db = cbox_new(s, api, t)))
		goto out;
	if (crec_load(s->dirs.thread_dir, &r)) {
		e = SBX_ERR_GONE; /* nothing recorded: nothing of it can be proven ours */
		goto out;
	}
	snprintf(db->name, sizeof(db->name), "%s", r.name);
	snprintf(db->id, sizeof(db->id), "%s", r.id);
	if (r.scope[0])
		snprintf(db->token, sizeof(db->token), "%s", r.scope);
	db->intent_ns = r.intent_ns;
	if (!uidpool_recorded(s->dirs.thread_dir, &uid, &gid)) {
		db->base.uid = uid;
		db->base.gid = gid;
	}
	e = crec_inspect(api, &r, &info, err, sizeof(err));
	if (e == SBX_ERR_GONE) {
		crec_remove(s->dirs.thread_dir);
		goto out;
	}
	why = e ? NULL : crec_why_not(&r, &info, s->state_id, s->token);
	if (e) {
		log_warn(scope, "%s: cannot check the container %s now: %s", s->cfg->use, r.id[0] ? r.id : r.name, err);
		if (!r.id[0])
			goto out; /* only dockerd can say whether the create made it */
	} else if (why) {
		log_skipped(scope, s->cfg->use, &info, why);
		crec_remove(s->dirs.thread_dir);
		e = SBX_ERR_GONE;
		goto out;
	} else {
		snprintf(db->id, sizeof(db->id), "%s", info.id);
		if (info.running)
			cbox_learn_init(db, &info);
		if (!r.id[0] && crec_save(db))
			log_warn(scope, "%s: cannot record the container %.12s: %s", s->cfg->use, db->id, strerror(errno));
	}
	snprintf(db->base.remote_id, sizeof(db->base.remote_id), "docker:%.12s", db->id);
	*out = &db->base;
	db = NULL;
	e = SBX_OK;
out:
	docker_container_clear(&info);
	cbox_free(db);
	return e;
}

/* Discovery (a container of ours whose sandbox record is gone: a create
 * cut short, a destroy that could not finish) is by proof too: dockerd
 * lists the containers with this daemon's labels, and each is handed to
 * the pool only when the record of the thread its labels name proves it
 * ours; the others are skipped (logged) and never touched. */
#define CONTAINER_DISCOVER_MAX 1024

struct discover_ctx {
	struct discovered {
		char id[DOCKER_ID_LEN + 1];
		char user[NAME_MAX_LEN + 1], thread[NAME_MAX_LEN + 1], scope[SCOPE_TOKEN_LEN + 1];
	} *c;
	int n;
	bool full;
};

static void discover_one(const struct docker_container *c, void *arg)
{
	struct discover_ctx *d = arg;
	const char *user = docker_label(c, CONTAINER_LABEL_USER), *thread = docker_label(c, CONTAINER_LABEL_THREAD),
		   *scope = docker_label(c, CONTAINER_LABEL_SCOPE);
	struct discovered *x;

	if (docker_label(c, CONTAINER_LABEL_SPARE)) {
		/* a spare's: the spares module adopts it from state_dir/spares, or,
		 * claimed, the thread whose record names it (see "spares") */
		log_debug("docker", "discovery: container %.12s is a spare's (or a claimed spare): left to its record",
			c->id);
		return;
	}
	if (d->n >= CONTAINER_DISCOVER_MAX) {
		d->full = true;
		return;
	}
	x = &d->c[d->n++];
	snprintf(x->id, sizeof(x->id), "%s", c->id);
	if (str_fmt(x->user, sizeof(x->user), "%s", user ? user : "") ||
	    str_fmt(x->thread, sizeof(x->thread), "%s", thread ? thread : "") ||
	    str_fmt(x->scope, sizeof(x->scope), "%s", scope ? scope : ""))
		x->user[0] = '\0'; /* no valid name: skipped below */
}

/* Whether candidate x is proven ours (see "records"); logs why not. */
static bool discover_proves(struct docker *api, const struct sbx_config *cfg, const char *state_id,
	const struct discovered *x)
{
	struct buf td = BUF_INIT(BUF_CAP_PATH);
	struct docker_container c = { 0 };
	char token[SCOPE_TOKEN_LEN + 1], err[DOCKER_ERR_LEN];
	const char *why = NULL;
	struct crec r;
	bool ok = false;

	if (docker_inspect(api, x->id, &c, err, sizeof(err))) {
		log_warn("docker", "discovery: cannot inspect container %.12s: %s", x->id, err);
		goto out;
	}
	if (!names_valid(x->user) || !names_valid(x->thread) || names_scope_token(x->user, x->thread, token) ||
	    strcmp(token, x->scope))
		why = "its user, thread and scope labels name no scope";
	else if (layout_thread_dir(&td, cfg->state_dir, x->user, x->thread) || crec_load(td.ptr, &r))
		why = "no record of its scope names a container";
	else
		why = crec_why_not(&r, &c, state_id, token);
	if (why)
		log_skipped("docker", cfg->use, &c, why);
	ok = !why;
out:
	docker_container_clear(&c);
	buf_free(&td);
	return ok;
}

enum sbx_err container_discover(const struct sbx_config *cfg, const char *state_id,
	void (*found)(const char *user, const char *thread, void *arg), void *arg)
{
	struct docker *api = client_of(cfg);
	struct discover_ctx d = { .c = calloc(CONTAINER_DISCOVER_MAX, sizeof(*d.c)) };
	char l1[128], l2[128], err[DOCKER_ERR_LEN];
	const char *labels[] = { l1, l2, NULL };
	enum sbx_err e = SBX_ERR_NOMEM;

	if (!api || !d.c)
		goto out;
	snprintf(l1, sizeof(l1), "%s=%s", CONTAINER_LABEL_STATE_ID, state_id);
	snprintf(l2, sizeof(l2), "%s=%s", CONTAINER_LABEL_PROVIDER, cfg->use);
	e = docker_list(api, labels, discover_one, &d, err, sizeof(err));
	if (e) {
		log_warn("docker", "discovery of this sbxfs's containers failed: %s", err);
		goto out;
	}
	if (d.full)
		log_warn("docker", "discovery: more than %d containers carry this sbxfs's labels: only the first %d "
				   "were considered",
			CONTAINER_DISCOVER_MAX, CONTAINER_DISCOVER_MAX);
	for (int i = 0; i < d.n; i++)
		if (discover_proves(api, cfg, state_id, &d.c[i]))
			found(d.c[i].user, d.c[i].thread, arg);
out:
	free(d.c);
	return e;
}

void container_shutdown(void)
{
	/* what could not be removed while dockerd was away: one more try.
	 * The clients stay: exec handles still running at exit point at them. */
	removals_retry();
	pthread_mutex_lock(&dk.lock);
	for (int i = 0; i < dk.n_pending; i++)
		log_warn("docker", "container %.12s could not be removed (dockerd away?): the next start removes it",
			dk.pending[i].id);
	pthread_mutex_unlock(&dk.lock);
}

void container_box_status(struct cbox *db, struct json_t *out)
{
	json_t *o = (json_t *)out;

	if (db->init_pid > 0)
		json_object_set_new(o, "init_pid", json_integer(db->init_pid));
	json_object_set_new(o, "container", json_string(db->name));
	json_object_set_new(o, "image", json_string(db->cfg->image ? db->cfg->image : db->type->default_image));
}

/* ---- the processes of a container, from the host ------------------------------------------- */

int container_children(pid_t pid, pid_t *out, int max, int n)
{
	char path[80];
	struct buf b = BUF_INIT(256 * 1024);
	DIR *d;
	struct dirent *e;

	if (str_fmt(path, sizeof(path), "/proc/%d/task", (int)pid) || !(d = opendir(path)))
		return n;
	while ((e = readdir(d)) && n < max) {
		if (e->d_name[0] == '.' ||
		    str_fmt(path, sizeof(path), "/proc/%d/task/%.20s/children", (int)pid, e->d_name) ||
		    util_read_file(path, &b))
			continue;
		for (char *s = b.ptr; s && *s && n < max;) {
			long c = strtol(s, &s, 10);
			if (c > 0)
				out[n++] = (pid_t)c;
			while (*s == ' ')
				s++;
		}
	}
	closedir(d);
	buf_free(&b);
	return n;
}

/* ---- waiting for what runs inside ------------------------------------------------------------ */

enum sbx_err container_backoff(unsigned *pause_ms, unsigned max_ms)
{
	uint64_t until = util_now_ms() + *pause_ms;
	struct token *t = token_current();

	for (;;) {
		uint64_t now = util_now_ms();

		if (t && token_cancelled(t))
			return SBX_ERR_INTR;
		if (now >= until)
			break;
		usleep((useconds_t)((until - now < TOKEN_COND_SLICE_MS ? until - now : TOKEN_COND_SLICE_MS) * 1000));
	}
	*pause_ms = *pause_ms * 2 < max_ms ? *pause_ms * 2 : max_ms;
	return SBX_OK;
}
