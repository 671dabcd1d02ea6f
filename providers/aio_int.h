/* SPDX-License-Identifier: MIT */
/*
 * aio_int.h - what the two kinds of AIO sandbox share: the aio provider's
 * containers (aio.c, a container box of container_int.h running the AIO
 * image) and an existing AIO sandbox at a base_url (aio_remote.c, no
 * container).  Both run jobs through the AIO HTTP API (aio_jobs.c,
 * aio_api.c) and see the sandbox as a struct aio_sbx, which each box
 * embeds and describes with its own aio_sbx_ops.
 */
#ifndef SBX_AIO_INT_H
#define SBX_AIO_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "aio_api.h"
#include "provider.h"

#define AIO_RUN_PATH "/run/sbxfs/jobs" /* in a container: thread_dir/aio-jobs, bind-mounted */

/* aio.api_key of the configuration (aio.c reads the aio: section; NULL: none). */
const char *aio_conf_api_key(const struct sbx_config *cfg);

struct aio_sbx;

/* How a kind of AIO sandbox is reached and watched. */
struct aio_sbx_ops {
	/* Whether the sandbox is still there to talk to. */
	bool (*alive)(struct aio_sbx *a);
	/* An fd on the network namespace the API is reached in (the caller
	 * closes it), -1 when gone.  NULL: the API is at a URL, and the job's
	 * files are uploaded to run_path (else written into thread_dir/aio-jobs,
	 * which the sandbox sees at AIO_RUN_PATH). */
	int (*netns)(struct aio_sbx *a);
	/* ms the sandbox was paused so far, and whether it is now (NULL: never). */
	uint64_t (*paused_ms)(struct aio_sbx *a);
	bool (*paused)(struct aio_sbx *a);
	/* Record the pid of job NAME's shell in job_dir/pgid, best effort (NULL: unknown). */
	void (*find_pid)(struct aio_sbx *a, const char *name, const char *job_dir);
};

struct aio_sbx {
	struct sbx_box *box; /* the box it is part of */
	const struct aio_sbx_ops *ops;
	const char *name;        /* log scope (the container's name, or user/thread) */
	const char *token;       /* the scope token */
	const char *thread_dir;
	struct sbx_config *cfg;  /* the box's (referenced by it) */
	uint64_t output_max;
	char url[512];           /* the API's base URL, no trailing slash */
	const char *api_key;     /* sent as X-AIO-API-Key (in cfg: lives as long as the box) */
	char run_path[96];       /* at a URL: where jobs' command files go inside the sandbox */
	int shell_only; /* atomic; 1 once the bash routes answered 404 (an image older than 1.9.3) */
};

/* The API target of a: nsfd from ops->netns (-1 at a URL), cancel or NULL. */
void aio_sbx_target(struct aio_sbx *a, struct aio_target *t, int nsfd, const int *cancel);

/* aio_jobs.c: the exec slots of both kinds (their start, reattach and
 * cleanup go through the box's aio_sbx). */
enum sbx_err aio_jobs_start(struct aio_sbx *a, const struct sbx_exec_spec *spec, struct sbx_exec **out);
enum sbx_err aio_jobs_reattach(struct aio_sbx *a, const char *job_dir, struct sbx_exec **out);
enum sbx_err aio_jobs_signal(struct sbx_exec *x, int sig);
void aio_jobs_finish(struct sbx_exec *x);
void aio_jobs_free(struct sbx_exec *x);

/* aio_remote.c: the aio provider at a base_url (provider_aio_remote, the
 * variant provider_aio names for a configuration with base_url). */
extern const struct sbx_provider provider_aio_remote;
const struct sbx_provider *aio_remote_variant(const struct sbx_config *cfg);
/* The checks of an aio configuration with base_url (aio.c's config_check). */
int aio_remote_config_check(struct cfg_ctx *x, struct sbx_config *cfg);

#endif
