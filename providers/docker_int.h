/* SPDX-License-Identifier: MIT */
/*
 * docker_int.h - the docker provider's own parts: its section (docker:),
 * its box (a container box, container_int.h, whose pid 1 is sbxfs-box,
 * helpers/docker_box.c) and its jobs (docker_jobs.c), started through the
 * box's init or the Engine exec API and supervised inside the container.
 */
#ifndef SBX_DOCKER_INT_H
#define SBX_DOCKER_INT_H

#include <stdbool.h>

#include "container_int.h"

#define DOCKER_BOX_PATH "/run/sbxfs/sbxfs-box" /* the in-container helper (helpers/docker_box.c) */
#define DOCKER_BOX_SOCKET "sbxfs-box"          /* the helper's abstract socket */

/* The docker: section of mount.conf (cfg->prov). */
struct docker_conf {
	struct container_conf c; /* first: socket, labels, uid range */
	bool exec_engine;        /* jobs started through the Engine exec API (else by the box's init) */
};

struct dockbox {
	struct cbox c; /* first: the container */
	bool exec_engine;
};

/* b as a docker box (aborts on a box of another provider). */
struct dockbox *dockbox(struct sbx_box *b);

/* docker_jobs.c: the exec slots of the docker provider, and the box init's
 * request channel. */
enum sbx_err djobs_start(struct sbx_box *b, const struct sbx_exec_spec *spec, struct sbx_exec **out);
enum sbx_err djobs_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out);
enum sbx_err djobs_signal(struct sbx_exec *x, int sig);
void djobs_finish(struct sbx_exec *x);
void djobs_free(struct sbx_exec *x);
/* A request to the box's init ("ping", "killall"): the answer in reply. */
enum sbx_err djobs_ask_init(struct cbox *db, const char *req, char *reply, size_t len, int timeout_ms);
enum sbx_err djobs_kill_all(struct sbx_box *b);
/* The helper binary on the host (set by docker.c at init). */
extern char docker_box_helper[4096];

#endif
