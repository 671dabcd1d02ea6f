/* SPDX-License-Identifier: MIT */
/*
 * jobrun.c - the job runner the remote providers share (see jobrun.h).
 *
 * Why here: aio.c and opensandbox_jobs.c each wrote the same output
 * plumbing (open for append, a write loop, the output limit, the eventfd
 * signalled at the end, the pump thread's start and join) and docker_jobs.c
 * and opensandbox_jobs.c each wrote the result and "lost" records.  What a
 * job's end looks like on disk is part of the contract fs/job.c decodes
 * (one checked decoder of `result`), so it is written in one place.
 */
#define _GNU_SOURCE
#include "jobrun.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../common/json.h"
#include "../common/log.h"
#include "../common/util.h"

int jobrun_init(struct jobrun *r, const struct sbx_provider *prov, const char *job_dir, const char *name,
	const char *scope)
{
	memset(r, 0, sizeof(*r));
	r->base.prov = prov;
	r->out_fd = r->err_fd = -1;
	r->job_dir = strdup(job_dir);
	if (!r->job_dir)
		return -1;
	r->base.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->base.fd < 0) {
		free(r->job_dir);
		r->job_dir = NULL;
		return -1;
	}
	snprintf(r->name, sizeof(r->name), "%s", name);
	snprintf(r->scope, sizeof(r->scope), "%s/jobs/%s", scope, name);
	return 0;
}

void jobrun_release(struct jobrun *r)
{
	if (r->pumping) {
		__atomic_store_n(&r->cancel, 1, __ATOMIC_RELAXED);
		pthread_join(r->pump, NULL);
		r->pumping = false;
	}
	if (r->out_fd >= 0)
		close(r->out_fd);
	if (r->err_fd >= 0)
		close(r->err_fd);
	if (r->base.fd >= 0)
		close(r->base.fd);
	r->out_fd = r->err_fd = r->base.fd = -1;
	free(r->job_dir);
	r->job_dir = NULL;
}

static int stream_open(const char *job_dir, const char *name)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	int fd = buf_addf(&p, "%s/%s", job_dir, name) ?
			 -1 :
			 open(p.ptr, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);

	buf_free(&p);
	return fd;
}

int jobrun_open_output(struct jobrun *r)
{
	if (r->out_fd < 0)
		r->out_fd = stream_open(r->job_dir, "stdout");
	if (r->err_fd < 0)
		r->err_fd = stream_open(r->job_dir, "stderr");
	return r->out_fd < 0 || r->err_fd < 0 ? -1 : 0;
}

int jobrun_write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

size_t jobrun_charge(struct jobrun *r, size_t n)
{
	uint64_t room;

	if (!r->output_max) {
		r->out_bytes += n;
		return n;
	}
	room = r->out_bytes < r->output_max ? r->output_max - r->out_bytes : 0;
	if (n > room) {
		n = (size_t)room;
		r->over = true;
	}
	r->out_bytes += n;
	return n;
}

void jobrun_append(struct jobrun *r, bool err, const char *p, size_t n)
{
	if (n && jobrun_write_all(err ? r->err_fd : r->out_fd, p, n) && !r->werr) {
		log_warn(r->scope, "cannot append the job's output: %s", strerror(errno));
		r->werr = true;
	}
}

enum sbx_err jobrun_start_pump(struct jobrun *r, void *(*fn)(void *), void *arg)
{
	if (pthread_create(&r->pump, NULL, fn, arg))
		return SBX_ERR_NOMEM;
	r->pumping = true;
	return SBX_OK;
}

bool jobrun_cancelled(struct jobrun *r)
{
	return __atomic_load_n(&r->cancel, __ATOMIC_RELAXED) != 0;
}

void jobrun_signal_end(struct jobrun *r)
{
	uint64_t one = 1;

	if (write(r->base.fd, &one, sizeof(one)) < 0)
		log_warn(r->scope, "cannot signal the job's end: %s", strerror(errno));
}

void jobrun_finish(struct jobrun *r)
{
	if (r->pumping) {
		pthread_join(r->pump, NULL);
		r->pumping = false;
	}
	if (!jobrun_file_exists(r->job_dir, "result"))
		jobrun_lost(r->job_dir, r->scope, "the job ended without a result");
}

/* ---- records ---------------------------------------------------------------------------------- */

bool jobrun_file_exists(const char *job_dir, const char *name)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	bool r = !buf_addf(&p, "%s/%s", job_dir, name) && !access(p.ptr, F_OK);

	buf_free(&p);
	return r;
}

int jobrun_file_write(const char *job_dir, const char *name, const char *text)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	int r = buf_addf(&p, "%s/%s", job_dir, name) ? -1 : util_write_atomic(p.ptr, text, strlen(text), 0600);

	buf_free(&p);
	return r;
}

static bool result_write(const char *job_dir, const char *scope, const char *state, int code, int sig, double at,
	const char *reason, const char *error, const char *note)
{
	json_t *o = json_pack("{s:s,s:i,s:i,s:f}", "state", state, "exit", code, "signal", sig, "ended_at", at);
	char *text;
	bool ok;

	if (o && reason)
		json_object_set_new(o, "reason", json_string(reason));
	if (o && error)
		json_object_set_new(o, "error", json_string_lossy(error, strlen(error)));
	if (o && note)
		json_object_set_new(o, "note", json_string(note));
	text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	ok = text && !jobrun_file_write(job_dir, "result", text);
	if (!ok)
		log_warn(scope ? scope : job_dir, "cannot record the job's result: %s", strerror(errno));
	free(text);
	json_decref(o);
	return ok;
}

bool jobrun_result(const char *job_dir, const char *scope, const char *state, int code, int sig,
	const char *reason, const char *error, const char *note)
{
	return result_write(job_dir, scope, state, code, sig, util_wall_now(), reason, error, note);
}

bool jobrun_result_at(const char *job_dir, const char *scope, const char *state, int code, int sig, double at,
	const char *reason)
{
	return result_write(job_dir, scope, state, code, sig, at, reason, NULL, NULL);
}

const char *jobrun_killed_state(const char *job_dir, const char *state, int sig)
{
	if (!strcmp(state, "exited") && sig && jobrun_file_exists(job_dir, "kill-requested"))
		return "killed";
	return state;
}

void jobrun_lost(const char *job_dir, const char *scope, const char *why)
{
	log_warn(scope ? scope : job_dir, "job lost: %s", why);
	jobrun_result(job_dir, scope, "lost", 255, 0, NULL, why, NULL);
}
