/* SPDX-License-Identifier: MIT */
/*
 * docker_int.h - what the docker and aio providers share (docker.c owns the
 * container lifecycle of both; docker_jobs.c runs jobs in docker
 * sandboxes; aio.c runs them through the AIO HTTP API).
 *
 * A sandbox is one container named <container_prefix>-<scope token>,
 * labelled with its provider, user, thread, scope token and the daemon's
 * state_id; its record is thread_dir/docker.json (name and the time of the
 * create's intent, written before the create; container id, written as soon
 * as the create answers; init pid and start time, uid), which is what proves
 * a container ours: labels alone never do (docker.c, "Ownership").  Boxes
 * are reference counted by the pool and by exec
 * handles (provider.h); their fields are immutable after create/adopt
 * except where noted.
 */
#ifndef SBX_DOCKER_INT_H
#define SBX_DOCKER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/buf.h"
#include "aio_api.h"
#include "docker_api.h"
#include "provider.h"

#define DOCKER_LABEL_PROVIDER "org.sbxfs.provider"
#define DOCKER_LABEL_USER "org.sbxfs.user"
#define DOCKER_LABEL_THREAD "org.sbxfs.thread"
#define DOCKER_LABEL_SCOPE "org.sbxfs.scope"
#define DOCKER_LABEL_STATE_ID "org.sbxfs.state_id"

#define DOCKER_BOX_PATH "/run/sbxfs/sbxfs-box" /* the in-container helper (helpers/docker_box.c) */
#define DOCKER_RUN_PATH "/run/sbxfs/jobs"      /* aio: the job run directory */
#define DOCKER_BOX_SOCKET "sbxfs-box"          /* the helper's abstract socket */

/* The docker: or aio: section of mount.conf (cfg->prov). */
struct docker_conf {
	char *socket;     /* NULL: $DOCKER_HOST (unix://) or /var/run/docker.sock */
	bool exec_engine; /* docker: jobs started through the Engine exec API (else by the box's init) */
	struct docker_label *labels; /* extra labels on every container */
	size_t n_labels;
	uid_t uid_base;
	unsigned uid_count;
	/* aio: */
	long port;            /* the AIO API's port inside the container */
	bool user_image;      /* run as the image's user, not the sandbox uid */
	char **cap_add;       /* capabilities the image needs (after dropping ALL) */
	size_t n_cap_add;
	char **command;       /* the container's Cmd (arguments of the image's entrypoint) */
	size_t n_command;
	char *api_key;        /* sent as X-AIO-API-Key (secret) */
};

struct dbox {
	struct sbx_box base; /* first: see dbox() */
	char name[128];      /* container name */
	char id[DOCKER_ID_LEN + 1];
	long long intent_ns;  /* wall clock (ns) just before its create was sent (docker.json) */
	pid_t init_pid;      /* host pid of the container's first process; 0 = unknown or dead */
	unsigned long long init_start;
	unsigned long long pidns; /* inode of the container's pid namespace */
	char token[24];
	char *thread_dir;
	struct sbx_config *cfg; /* referenced: the config it lives with */
	struct docker *api;     /* the client of its dockerd (owned by docker.c, never freed before exit) */
	uint64_t output_max;
	bool aio;
	bool exec_engine;
	long port;
	int shell_only; /* aio: atomic; 1 once the bash routes answered 404 (an image older than 1.9.3) */
	/* aio at a base_url (aio_remote.c): no container, no init_pid */
	bool remote;
	char url[512];        /* the AIO API's base URL, no trailing slash */
	char run_path[96];    /* where jobs' command files go inside the sandbox */
	const char *api_key;  /* sent as X-AIO-API-Key (in cfg: lives as long as the box) */
	int ended;            /* atomic: destroyed; the sandbox may serve another scope now */
	/* docker_freeze.c: the container is paused since paused_at (monotonic
	 * ms, 0 = running), and was paused paused_ms before; both atomic */
	uint64_t paused_at, paused_ms;
};

struct dbox *dbox(struct sbx_box *b);
/* An fd on the container's network namespace, checked against pid reuse; -1. */
int dbox_netns(struct dbox *db);
/* The section of the config a box lives with (defaults when absent). */
const struct docker_conf *docker_conf_of(const struct sbx_config *cfg);

/* docker_freeze.c: pause and unpause (the provider's freeze table), and
 * for the aio job pumps: ms the container was paused so far (also the
 * pause going on), and whether it is paused now. */
extern const struct sbx_freeze_ops docker_freeze_ops;
uint64_t dbox_paused_ms(struct dbox *db);
bool dbox_paused(struct dbox *db);

/* docker_jobs.c: the exec slots of the docker provider, and the box init's
 * request channel. */
enum sbx_err djobs_start(struct sbx_box *b, const struct sbx_exec_spec *spec, struct sbx_exec **out);
enum sbx_err djobs_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out);
enum sbx_err djobs_signal(struct sbx_exec *x, int sig);
void djobs_finish(struct sbx_exec *x);
void djobs_free(struct sbx_exec *x);
/* The direct children of host process pid (all its threads'), appended to
 * out[n..max); the new count. */
int docker_children(pid_t pid, pid_t *out, int max, int n);
/* A request to the box's init ("ping", "killall"): the answer in reply. */
enum sbx_err djobs_ask_init(struct dbox *db, const char *req, char *reply, size_t len, int timeout_ms);
enum sbx_err djobs_kill_all(struct sbx_box *b);
/* The helper binary on the host (set by docker.c at init). */
extern char docker_box_helper[4096];

/* aio_remote.c: the aio provider at a base_url (provider_aio_remote, the
 * variant provider_aio names for a configuration with base_url). */
extern const struct sbx_provider provider_aio_remote;
const struct sbx_provider *aio_remote_variant(const struct sbx_config *cfg);
/* The checks of an aio configuration with base_url (docker_config_check). */
int aio_remote_config_check(struct cfg_ctx *x, struct sbx_config *cfg);
/* A command through /v1/bash/exec run to its end (file operations the
 * AIO API lacks; the job's leftovers): its exit code, stderr's start in
 * errtext, stdout in out (when not NULL). */
enum sbx_err aior_run(struct dbox *db, const char *script, const struct aio_env *env, size_t n_env, int *code,
	char *errtext, size_t errlen, struct buf *out);

/* aio.c: readiness and the exec slots of the aio provider. */
enum sbx_err aio_wait_ready(struct dbox *db, const char *scope, long timeout_s);
enum sbx_err aio_health(struct dbox *db);
enum sbx_err aio_jobs_start(struct sbx_box *b, const struct sbx_exec_spec *spec, struct sbx_exec **out);
enum sbx_err aio_jobs_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out);
enum sbx_err aio_jobs_signal(struct sbx_exec *x, int sig);
void aio_jobs_finish(struct sbx_exec *x);
void aio_jobs_free(struct sbx_exec *x);
void aio_jobs_cleanup(struct sbx_box *b, const char *job_dir, const char *job_name);

#endif
