/* SPDX-License-Identifier: MIT */
/*
 * docker.c - the docker provider: any image, one container per scope (the
 * container layer, container.c, makes and watches it), whose pid 1 is
 * sbxfs-box (helpers/docker_box.c), bind-mounted read-only and running as
 * the sandbox uid; jobs start through it (or the Engine exec API) and are
 * supervised by it (docker_jobs.c).  This file is the provider's
 * descriptor, its section (docker:, beside the container layer's common
 * keys), its box (struct dockbox) and the box's readiness: the init answers
 * "ping" on its socket in the container's network namespace; and its
 * spares (pool.prewarm): a spare's init is "sbxfs-box spare", root with
 * CAP_SETUID, CAP_SETGID and CAP_SETPCAP only, and a claim
 * (container_claim) has it take the thread's uid ("claim UID GID").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/log.h"
#include "../common/util.h"
#include "docker_int.h"
#include "provider_int.h"

char docker_box_helper[4096];

static const struct docker_conf docker_defaults = { .c = CONTAINER_CONF_DEFAULTS };

struct dockbox *dockbox(struct sbx_box *b)
{
	if (!b || b->prov != &provider_docker)
		abort(); /* a box handed to the wrong provider is a programming error */
	return (struct dockbox *)b;
}

static const struct docker_conf *docker_conf_of(const struct sbx_config *cfg)
{
	return cfg->prov ? cfg->prov : &docker_defaults;
}

/* ---- configuration: the docker: section ------------------------------------------------------ */

static int conf_key(struct cfg_ctx *x, void *arg, const char *key, const char *full, struct cfg_node *v)
{
	struct docker_conf *dc = arg;
	int r = container_conf_key(x, &dc->c, key, full, v);

	if (r <= 0)
		return r;
	if (!strcmp(key, "exec")) {
		char *s = NULL;
		if (cfg_str(x, full, v, &s))
			return -1;
		if (strcmp(s, "init") && strcmp(s, "engine")) {
			cfg_fail(x, full, "must be init or engine (got '%s')", s);
			free(s);
			return -1;
		}
		dc->exec_engine = !strcmp(s, "engine");
		free(s);
		return 0;
	}
	log_warn("config", "%s: unknown key, ignored", full);
	return 0;
}

static int docker_config_key(struct cfg_ctx *x, struct sbx_config *cfg, const char *key, struct cfg_node *v)
{
	return container_conf_section(x, cfg, key, v, &docker_defaults, sizeof(docker_defaults), conf_key);
}

static int docker_config_check(struct cfg_ctx *x, struct sbx_config *cfg)
{
	if (!cfg->image || !cfg->image[0]) {
		cfg_fail(x, "image", "the docker provider needs an image (any image with /bin/sh; never pulled)");
		return -1;
	}
	if (cfg->base_url && cfg->base_url[0])
		log_warn("config", "base_url: not used by the docker provider");
	if (strpbrk(cfg->image, " \t\n")) {
		cfg_fail(x, "image", "must be an image reference without spaces (got '%s')", cfg->image);
		return -1;
	}
	return 0;
}

static void docker_config_show(const struct sbx_config *cfg, struct json_t *out)
{
	const struct docker_conf *dc = docker_conf_of(cfg);
	json_t *o = json_object();

	container_conf_show(&dc->c, o);
	json_object_set_new(o, "exec", json_string(dc->exec_engine ? "engine" : "init"));
	json_object_set_new((json_t *)out, "docker", o);
}

static void docker_config_free(void *prov)
{
	struct docker_conf *dc = prov;

	if (!dc)
		return;
	container_conf_clear(&dc->c);
	free(dc);
}

/* ---- start of day ------------------------------------------------------------------------------ */

static int docker_find_helper(const char *dir, char *out, size_t len)
{
	if (!str_fmt(out, len, "%s/sbxfs-box", dir) && !access(out, X_OK))
		return 0;
	if (!str_fmt(out, len, "%s/../libexec/sbxfs/sbxfs-box", dir) && !access(out, X_OK))
		return 0;
	return -1;
}

static enum sbx_err docker_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
	char self[PATH_MAX], *slash;
	ssize_t n;

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0) {
		snprintf(err, errlen, "%s provider: cannot find own executable: %s", cfg->use, strerror(errno));
		return SBX_ERR_IO;
	}
	self[n] = '\0';
	slash = strrchr(self, '/');
	*slash = '\0';
	if (docker_find_helper(self, docker_box_helper, sizeof(docker_box_helper))) {
		snprintf(err, errlen, "docker provider: sbxfs-box not found next to %s or in %s/../libexec/sbxfs", self,
			self);
		return SBX_ERR_INVAL;
	}
	if (docker_conf_of(cfg)->exec_engine) {
		struct stat st;
		/* the kernel starts an exec of a file its user cannot read non-dumpable
		 * (helpers/docker_box.c): a readable one can be ptraced by a job while it starts */
		if (!stat(docker_box_helper, &st) && (st.st_mode & (S_IRGRP | S_IROTH)))
			log_warn("docker", "%s is readable by the sandbox uids (mode %04o; make install gives 0711): "
					   "with docker.exec: engine a job can ptrace another job's supervisor while it starts",
				docker_box_helper, (unsigned)(st.st_mode & 07777));
	}
	return container_init(cfg, err, errlen);
}

/* ---- the box: sbxfs-box as pid 1 ------------------------------------------------------------ */

static void docker_box_init(struct cbox *cb, const struct sbx_spec *s)
{
	((struct dockbox *)cb)->exec_engine = docker_conf_of(s->cfg)->exec_engine;
}

/* A spare's init runs as root with what taking a uid needs, and no more
 * (helpers/docker_box.c, "sbxfs-box spare"); a claim drops it all. */
static char *const docker_spare_caps[] = { "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP" };

static int docker_spec(struct cbox *cb, const struct sbx_spec *s, struct container_spec *cs)
{
	static const char *const entry[] = { DOCKER_BOX_PATH, "init", NULL };
	static const char *const spare_entry[] = { DOCKER_BOX_PATH, "spare", NULL };

	(void)cb;
	cs->d.entrypoint = s->spare ? spare_entry : entry;
	if (s->spare && container_spec_caps(cs, docker_spare_caps, 3))
		return -1;
	return container_spec_mount(cs, docker_box_helper, DOCKER_BOX_PATH, true);
}

static bool docker_pong(struct cbox *cb, int timeout_ms)
{
	char reply[32];

	return djobs_ask_init(cb, "ping", reply, sizeof(reply), timeout_ms) == SBX_OK && !strcmp(reply, "pong");
}

static enum sbx_err docker_wait_init(struct cbox *db, const char *scope, long timeout_s)
{
	uint64_t deadline = util_now_ms() + (uint64_t)timeout_s * 1000;
	unsigned pause = 2; /* ms, doubling to 256 ms */

	for (;;) {
		if (docker_pong(db, 2000))
			return SBX_OK;
		if (util_now_ms() >= deadline) {
			log_err(scope, "docker: the container's init (sbxfs-box) did not answer within %ld s", timeout_s);
			return SBX_ERR_TIMEOUT;
		}
		if (container_backoff(&pause, 256)) {
			log_warn(scope, "docker: the create was cancelled before the container's init answered");
			return SBX_ERR_INTR;
		}
	}
}

/* A claim: the spare's init takes the thread's uid (it answers once it
 * runs as it). */
static enum sbx_err docker_claim_uid(struct cbox *cb, uid_t uid, gid_t gid, const char *scope)
{
	char req[64], reply[64];
	enum sbx_err e;

	snprintf(req, sizeof(req), "claim %u %u", (unsigned)uid, (unsigned)gid);
	e = djobs_ask_init(cb, req, reply, sizeof(reply), 5000);
	if (!e && strcmp(reply, "claimed"))
		e = SBX_ERR_IO;
	if (e)
		log_err(scope, "docker: claim: the spare's init did not take uid %u: %s", (unsigned)uid,
			reply[0] ? reply : sbx_err_name(e));
	return e;
}

static const struct container_type docker_type = {
	.prov = &provider_docker,
	.box_size = sizeof(struct dockbox),
	.box_init = docker_box_init,
	.spec = docker_spec,
	.ready = docker_wait_init,
	.claim_uid = docker_claim_uid,
};

static enum sbx_err docker_create_box(const struct sbx_spec *s, struct sbx_box **out)
{
	return container_create(s, &docker_type, out);
}

static enum sbx_err docker_adopt(const struct sbx_spec *s, struct sbx_box **out)
{
	enum sbx_err e = container_adopt(s, &docker_type, out);

	if (!e && s->spare && container_spare_claimed(cbox(*out))) {
		/* a claim cut short by a crash: it may run as a thread's uid with
		 * its mounts, and no thread's record names it */
		log_warn("docker", "spare %s: its init took a uid (a claim was interrupted): ending it", s->token);
		container_destroy(*out);
		sbx_box_put(*out);
		*out = NULL;
		return SBX_ERR_GONE;
	}
	return e;
}

static enum sbx_err docker_claim(struct sbx_box *b, const struct sbx_spec *s)
{
	return container_claim(&dockbox(b)->c, s);
}

/* The container runs its init, and the init answers.  A spare's (checked
 * before its claim, on a new thread's mkdir) without asking dockerd: its
 * init is known and never paused, so the same init still running (pid and
 * start time) and answering is the container running. */
static enum sbx_err docker_health(struct sbx_box *b)
{
	struct cbox *cb = &dockbox(b)->c;
	enum sbx_err e = cb->spare && cb->init_pid ? (container_running(cb) ? SBX_OK : SBX_ERR_GONE) : container_health(cb);

	return e ? e : docker_pong(cb, 3000) ? SBX_OK : SBX_ERR_GONE;
}

static void docker_box_status(struct sbx_box *b, struct json_t *out)
{
	struct dockbox *db = dockbox(b);

	container_box_status(&db->c, out);
	json_object_set_new((json_t *)out, "exec", json_string(db->exec_engine ? "engine" : "init"));
}

/* ---- the descriptor ----------------------------------------------------------------------------- */

static const struct sbx_provider_ops docker_ops = {
	.config_key = docker_config_key,
	.config_check = docker_config_check,
	.config_show = docker_config_show,
	.config_free = docker_config_free,
	.init = docker_init,
	.create = docker_create_box,
	.health = docker_health,
	.adopt = docker_adopt,
	.claim = docker_claim,
	CONTAINER_PROVIDER_OPS,
	.kill_all = djobs_kill_all,
	.box_status = docker_box_status,
	.exec_start = djobs_start,
	.exec_reattach = djobs_reattach,
	.exec_signal = djobs_signal,
	.exec_finish = djobs_finish,
	.exec_free = djobs_free,
};

static const char *const docker_keys[] = { "docker", NULL };

const struct sbx_provider provider_docker = {
	.name = "docker",
	.config_keys = docker_keys,
	.caps = SBX_CAP_EXEC | SBX_CAP_SIGNALS,
	.ops = &docker_ops,
};
