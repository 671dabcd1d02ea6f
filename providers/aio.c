/* SPDX-License-Identifier: MIT */
/*
 * aio.c - the aio provider: the AIO sandbox image (agent-infra/sandbox)
 * with its own entrypoint, one container per scope (the container layer,
 * container.c, makes and watches it).  This file is the provider's
 * descriptor, its section (aio:, beside the container layer's common keys),
 * its box (struct aiobox: the container box and the aio_sbx its jobs see,
 * aio_int.h) and the box's readiness: the daemon waits for GET /v1/sandbox,
 * reached inside the container's network namespace (common/netns.h): no
 * port is published.  Jobs run through the AIO HTTP API (aio_jobs.c).  A
 * configuration with base_url is another descriptor (ops->variant:
 * aio_remote.c), with no container.
 *
 * The image runs as the sandbox uid by default, as docker sandboxes do;
 * `aio.user: image` runs an image that needs its own user (root for the
 * real AIO image's services), and the sandbox's status says so.  Job
 * commands and stdin go through thread_dir/aio-jobs, bind-mounted at
 * AIO_RUN_PATH (the AIO server runs a command with `sh -c`, so its text
 * never goes on an argv).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/buf.h"
#include "../common/log.h"
#include "../common/udir.h"
#include "../common/util.h"
#include "aio_int.h"
#include "container_int.h"
#include "provider_int.h"

#define AIO_DEFAULT_IMAGE "enterprise-public-cn-beijing.cr.volces.com/vefaas-public/all-in-one-sandbox:latest"

struct aio_conf {
	struct container_conf c; /* first: socket, labels, uid range */
	long port;               /* the AIO API's port inside the container */
	bool user_image;         /* run as the image's user, not the sandbox uid */
	char **cap_add;          /* capabilities the image needs (after dropping ALL) */
	size_t n_cap_add;
	char **command;          /* the container's Cmd (arguments of the image's entrypoint) */
	size_t n_command;
	char *api_key;           /* sent as X-AIO-API-Key (secret) */
};

static const struct aio_conf aio_defaults = { .c = CONTAINER_CONF_DEFAULTS, .port = 8080 };

struct aiobox {
	struct cbox c;     /* first: the container */
	struct aio_sbx a;  /* what aio_jobs.c sees */
};

static struct aiobox *aiobox(struct sbx_box *b)
{
	if (!b || b->prov != &provider_aio)
		abort(); /* a box handed to the wrong provider is a programming error */
	return (struct aiobox *)b;
}

static const struct aio_conf *aio_conf_of(const struct sbx_config *cfg)
{
	return cfg->prov ? cfg->prov : &aio_defaults;
}

const char *aio_conf_api_key(const struct sbx_config *cfg)
{
	return aio_conf_of(cfg)->api_key;
}

/* ---- configuration: the aio: section ---------------------------------------------------------- */

static int conf_user(struct cfg_ctx *x, struct aio_conf *dc, const char *full, struct cfg_node *v)
{
	char *s = NULL;

	if (cfg_str(x, full, v, &s))
		return -1;
	if (strcmp(s, "sandbox") && strcmp(s, "image")) {
		cfg_fail(x, full, "must be sandbox or image (got '%s')", s);
		free(s);
		return -1;
	}
	dc->user_image = !strcmp(s, "image");
	free(s);
	return 0;
}

/* $VAR or ${VAR}: from the daemon's environment (a missing one is "") */
static int conf_api_key(struct cfg_ctx *x, struct aio_conf *dc, const char *full, struct cfg_node *v)
{
	char name[128];
	const char *val;

	if (cfg_str(x, full, v, &dc->api_key))
		return -1;
	if (dc->api_key[0] != '$')
		return 0;
	snprintf(name, sizeof(name), "%s", dc->api_key + 1 + (dc->api_key[1] == '{'));
	name[strcspn(name, "}")] = '\0';
	val = getenv(name);
	free(dc->api_key);
	dc->api_key = strdup(val ? val : "");
	if (!dc->api_key) {
		cfg_fail(x, full, "out of memory");
		return -1;
	}
	return 0;
}

static int conf_key(struct cfg_ctx *x, void *arg, const char *key, const char *full, struct cfg_node *v)
{
	struct aio_conf *dc = arg;
	int r = container_conf_key(x, &dc->c, key, full, v);
	long l;

	if (r <= 0)
		return r;
	if (!strcmp(key, "port")) {
		if (cfg_long(x, full, v, 1, 65535, &l))
			return -1;
		dc->port = l;
		return 0;
	}
	if (!strcmp(key, "user"))
		return conf_user(x, dc, full, v);
	if (!strcmp(key, "cap_add"))
		return cfg_strv(x, full, v, &dc->cap_add, &dc->n_cap_add);
	if (!strcmp(key, "command"))
		return cfg_strv(x, full, v, &dc->command, &dc->n_command);
	if (!strcmp(key, "api_key"))
		return conf_api_key(x, dc, full, v);
	log_warn("config", "%s: unknown key, ignored", full);
	return 0;
}

static int aio_config_key(struct cfg_ctx *x, struct sbx_config *cfg, const char *key, struct cfg_node *v)
{
	return container_conf_section(x, cfg, key, v, &aio_defaults, sizeof(aio_defaults), conf_key);
}

static int aio_config_check(struct cfg_ctx *x, struct sbx_config *cfg)
{
	if (cfg->base_url && cfg->base_url[0])
		return aio_remote_config_check(x, cfg); /* an existing AIO sandbox over HTTP, no docker (aio_remote.c) */
	if (cfg->image && strpbrk(cfg->image, " \t\n")) {
		cfg_fail(x, "image", "must be an image reference without spaces (got '%s')", cfg->image);
		return -1;
	}
	return 0;
}

static json_t *strv_json(char *const *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

static void aio_config_show(const struct sbx_config *cfg, struct json_t *out)
{
	const struct aio_conf *dc = aio_conf_of(cfg);
	json_t *o = json_object();

	container_conf_show(&dc->c, o);
	json_object_set_new(o, "port", json_integer(dc->port));
	json_object_set_new(o, "user", json_string(dc->user_image ? "image" : "sandbox"));
	json_object_set_new(o, "cap_add", strv_json(dc->cap_add, dc->n_cap_add));
	json_object_set_new(o, "command", strv_json(dc->command, dc->n_command));
	json_object_set_new(o, "api_key", dc->api_key && dc->api_key[0] ? json_string("***") : json_null());
	if (!cfg->image)
		json_object_set_new((json_t *)out, "image", json_string(AIO_DEFAULT_IMAGE));
	json_object_set_new((json_t *)out, "aio", o);
}

static void aio_config_free(void *prov)
{
	struct aio_conf *dc = prov;

	if (!dc)
		return;
	container_conf_clear(&dc->c);
	for (size_t i = 0; i < dc->n_cap_add; i++)
		free(dc->cap_add[i]);
	for (size_t i = 0; i < dc->n_command; i++)
		free(dc->command[i]);
	free(dc->cap_add);
	free(dc->command);
	free(dc->api_key);
	free(dc);
}

/* ---- the sandbox as the jobs see it (aio_int.h) ------------------------------------------------ */

static struct aiobox *of_sbx(struct aio_sbx *a)
{
	return aiobox(a->box);
}

static bool box_alive(struct aio_sbx *a)
{
	return container_running(&of_sbx(a)->c);
}

static int box_netns(struct aio_sbx *a)
{
	return container_netns(&of_sbx(a)->c);
}

static uint64_t box_paused_ms(struct aio_sbx *a)
{
	return container_paused_ms(&of_sbx(a)->c);
}

static bool box_paused(struct aio_sbx *a)
{
	return container_paused(&of_sbx(a)->c);
}

/* The job's shell among the container's processes (its command line names
 * its run directory), into job_dir/pgid for the job's status: the AIO API
 * does not say which process runs a command.  Best effort: a command that
 * has ended already is not found (its status then has no pid). */
static void box_find_pid(struct aio_sbx *a, const char *name, const char *job_dir)
{
	struct cbox *cb = &of_sbx(a)->c;
	char needle[128], text[32];
	pid_t pids[4096];
	int n;

	if (str_fmt(needle, sizeof(needle), AIO_RUN_PATH "/%s/cmd", name) || !cb->init_pid)
		return;
	n = container_children(cb->init_pid, pids, 4096, 0);
	for (int i = 0; i < n; i++)
		n = container_children(pids[i], pids, 4096, n);
	for (int i = 0; i < n; i++) {
		struct buf cmd = BUF_INIT(64 * 1024);
		char path[64];
		bool hit = !str_fmt(path, sizeof(path), "/proc/%d/cmdline", (int)pids[i]) && !util_read_file(path, &cmd) &&
			   memmem(cmd.ptr ? cmd.ptr : "", cmd.len, needle, strlen(needle));
		buf_free(&cmd);
		if (hit) {
			struct buf p = BUF_INIT(BUF_CAP_PATH);
			snprintf(text, sizeof(text), "%d\n", (int)pids[i]);
			if (!buf_addf(&p, "%s/pgid", job_dir))
				util_write_atomic(p.ptr, text, strlen(text), 0600);
			buf_free(&p);
			return;
		}
	}
}

static const struct aio_sbx_ops box_sbx_ops = {
	.alive = box_alive,
	.netns = box_netns,
	.paused_ms = box_paused_ms,
	.paused = box_paused,
	.find_pid = box_find_pid,
};

/* ---- the box: the AIO image in a container ---------------------------------------------------- */

static void aio_box_init(struct cbox *cb, const struct sbx_spec *s)
{
	struct aiobox *ab = (struct aiobox *)cb;
	const struct aio_conf *dc = aio_conf_of(s->cfg);

	ab->a = (struct aio_sbx){ .box = &cb->base, .ops = &box_sbx_ops, .name = cb->name, .token = cb->token,
		.thread_dir = cb->thread_dir, .cfg = cb->cfg, .output_max = cb->output_max, .api_key = dc->api_key };
	snprintf(ab->a.url, sizeof(ab->a.url), "http://127.0.0.1:%ld", dc->port);
	/* what the sandbox's status says beyond the facts */
	snprintf(cb->base.note, sizeof(cb->base.note), "%s", dc->user_image ? "runs as the image's user" : "");
}

/* The run directory (commands and stdin of jobs, read by the AIO server's
 * shells): thread_dir/aio-jobs, the sandbox uid's. */
static int aio_prepare(struct cbox *cb, const struct sbx_spec *s)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	int r = 0;

	if (buf_addf(&p, "%s/aio-jobs", s->dirs.thread_dir) || (mkdir(p.ptr, 0700) && errno != EEXIST) ||
	    lchown(p.ptr, cb->base.uid, cb->base.gid))
		r = errno == ENOSPC ? ENOSPC : EIO;
	buf_free(&p);
	return r;
}

static int aio_spec(struct cbox *cb, const struct sbx_spec *s, struct container_spec *cs)
{
	const struct aio_conf *dc = aio_conf_of(s->cfg);
	int r;

	r = str_fmt(cs->path, sizeof(cs->path), "%s/aio-jobs", cb->thread_dir) ? -1 :
		container_spec_mount(cs, cs->path, AIO_RUN_PATH, false);
	/* the AIO server and its shells see the configured environment (DeerFlow's -e) */
	for (size_t i = 0; i < s->cfg->n_env && !r; i++)
		r = container_spec_env(cs, s->cfg->env[i].key, s->cfg->env[i].value);
	cs->d.env = cs->env;
	if (!r)
		r = container_spec_cmd(cs, dc->command, dc->n_command);
	if (!r)
		r = container_spec_caps(cs, dc->cap_add, dc->n_cap_add);
	if (dc->user_image)
		cs->d.user = NULL;
	return r;
}
static enum sbx_err aio_wait_ready(struct cbox *db, const char *scope, long timeout_s)
{
	uint64_t start = util_now_ms(), deadline = start + (uint64_t)timeout_s * 1000;
	unsigned pause = 20; /* ms, doubling to 500 ms: not DeerFlow's fixed 1 s */
	struct aio_target t;
	struct aio_info info;
	char err[AIO_ERR_LEN] = "no answer";
	int nsfd = container_netns(db);

	if (nsfd < 0) {
		log_err(scope, "aio: the container %s ended before its API answered", db->name);
		return SBX_ERR_IO;
	}
	aio_sbx_target(&aiobox(&db->base)->a, &t, nsfd, NULL);
	for (;;) {
		uint64_t now = util_now_ms();
		enum sbx_err e;

		t.timeout_ms = deadline > now + 3000 ? 3000 : deadline > now ? (long)(deadline - now) : 1;
		e = aio_sandbox(&t, &info, err, sizeof(err));
		if (e == SBX_OK) {
			log_info(scope, "aio: the AIO server (version %s) answered after %llu ms", info.version[0] ? info.version : "?",
				(unsigned long long)(util_now_ms() - start));
			close(nsfd);
			return SBX_OK;
		}
		if (e == SBX_ERR_ACCESS || util_now_ms() >= deadline || util_proc_starttime(db->init_pid) != db->init_start)
			break;
		if (e == SBX_ERR_INTR || container_backoff(&pause, 500)) {
			close(nsfd);
			log_warn(scope, "aio: the create was cancelled while the AIO server in %s was not ready yet", db->name);
			return SBX_ERR_INTR;
		}
	}
	close(nsfd);
	if (util_proc_starttime(db->init_pid) != db->init_start) {
		log_err(scope, "aio: the container %s ended before its API answered (%s)", db->name, err);
		return SBX_ERR_IO;
	}
	if (strstr(err, "answered 401") || strstr(err, "answered 403")) {
		log_err(scope, "aio: the AIO server in %s refuses the API key (aio.api_key): %s", db->name, err);
		return SBX_ERR_ACCESS;
	}
	log_err(scope, "aio: the AIO server in %s was not ready within ready_timeout (%ld s): %s", db->name, timeout_s, err);
	return SBX_ERR_TIMEOUT;
}

static enum sbx_err aio_api_health(struct cbox *db)
{
	struct aio_target t;
	struct aio_info info;
	char err[AIO_ERR_LEN];
	int nsfd = container_netns(db);
	enum sbx_err e;

	if (nsfd < 0)
		return SBX_ERR_GONE;
	aio_sbx_target(&aiobox(&db->base)->a, &t, nsfd, NULL);
	t.timeout_ms = 3000;
	e = aio_sandbox(&t, &info, err, sizeof(err));
	close(nsfd);
	if (e)
		log_warn(db->name, "health check: %s", err);
	return e ? SBX_ERR_GONE : SBX_OK;
}

static const struct container_type aio_type = {
	.prov = &provider_aio,
	.box_size = sizeof(struct aiobox),
	.default_image = AIO_DEFAULT_IMAGE,
	.box_init = aio_box_init,
	.prepare = aio_prepare,
	.spec = aio_spec,
	.ready = aio_wait_ready,
};

static enum sbx_err aio_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
	return container_init(cfg, err, errlen);
}

static enum sbx_err aio_create(const struct sbx_spec *s, struct sbx_box **out)
{
	return container_create(s, &aio_type, out);
}

static enum sbx_err aio_adopt(const struct sbx_spec *s, struct sbx_box **out)
{
	return container_adopt(s, &aio_type, out);
}

/* The container runs its init, and the AIO server answers. */
static enum sbx_err aio_health(struct sbx_box *b)
{
	struct cbox *cb = &aiobox(b)->c;
	enum sbx_err e = container_health(cb);

	return e ? e : aio_api_health(cb);
}

static void aio_box_status(struct sbx_box *b, struct json_t *out)
{
	struct aiobox *ab = aiobox(b);

	container_box_status(&ab->c, out);
	json_object_set_new((json_t *)out, "exec",
		json_string(__atomic_load_n(&ab->a.shell_only, __ATOMIC_RELAXED) ? "aio-shell" : "aio-bash"));
}

static enum sbx_err aio_kill_all(struct sbx_box *b)
{
	(void)b;
	return SBX_ERR_NOTSUP; /* the AIO server shares the sandbox uid: no way to end "all but the server" */
}

/* ---- jobs: aio_jobs.c on the box's aio_sbx ---------------------------------------------------- */

static enum sbx_err aio_exec_start(struct sbx_box *b, const struct sbx_exec_spec *spec, struct sbx_exec **out)
{
	return aio_jobs_start(&aiobox(b)->a, spec, out);
}

static enum sbx_err aio_exec_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out)
{
	return aio_jobs_reattach(&aiobox(b)->a, job_dir, out);
}

/* The job's run directory, thread_dir/aio-jobs/NAME. */
static void aio_exec_cleanup(struct sbx_box *b, const char *job_dir, const char *job_name)
{
	struct cbox *cb = &aiobox(b)->c;
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	int run;

	(void)job_dir;
	if (!buf_addf(&p, "%s/aio-jobs", cb->thread_dir) && (run = udir_open(p.ptr)) >= 0) {
		if (udir_remove(run, job_name))
			log_warn(cb->name, "cannot remove the run directory of job %s: %s", job_name, strerror(errno));
		close(run);
	}
	buf_free(&p);
}

/* ---- the descriptor ----------------------------------------------------------------------------- */

static const struct sbx_provider_ops aio_ops = {
	.config_key = aio_config_key,
	.config_check = aio_config_check,
	.config_show = aio_config_show,
	.config_free = aio_config_free,
	.init = aio_init,
	.create = aio_create,
	.health = aio_health,
	.adopt = aio_adopt,
	CONTAINER_PROVIDER_OPS,
	.kill_all = aio_kill_all,
	.box_status = aio_box_status,
	.exec_start = aio_exec_start,
	.exec_reattach = aio_exec_reattach,
	.exec_signal = aio_jobs_signal,
	.exec_finish = aio_jobs_finish,
	.exec_free = aio_jobs_free,
	.exec_cleanup = aio_exec_cleanup,
	.variant = aio_remote_variant,
};

static const char *const aio_keys[] = { "aio", NULL };
static const char *const aio_aliases[] = { "deerflow.community.aio_sandbox:AioSandboxProvider", NULL };

const struct sbx_provider provider_aio = {
	.name = "aio",
	.aliases = aio_aliases,
	.config_keys = aio_keys,
	.caps = SBX_CAP_EXEC, /* the AIO API sends SIGTERM, SIGKILL and SIGINT only */
	.ops = &aio_ops,
};
