/* SPDX-License-Identifier: MIT */
/*
 * jobrun.h - what providers whose jobs run remotely share (aio.c,
 * opensandbox_jobs.c) and the records every container provider writes
 * (docker_jobs.c too): the job's output files opened for appending, writes
 * that finish, the output limit, the pump thread and the eventfd it
 * signals at the end, the job's `result` and "lost" records, and the
 * provider's own record for a reattach after a restart.
 *
 * A provider's job struct embeds `struct jobrun` first (its `base` is the
 * sbx_exec handle fs/job.c watches: an eventfd the pump writes once the
 * result is on disk).  The provider keeps what differs: how a command
 * starts, how its output arrives, how it ends.  The provider's exec_free
 * stays the one place that frees a handle: it calls jobrun_release(), which
 * stops and joins the pump and closes what jobrun opened.
 *
 * Threads: the pump owns out_fd/err_fd, out_bytes and over while it runs;
 * cancel and sent_sig are atomics any thread may touch.  No lock here.
 */
#ifndef SBX_JOBRUN_H
#define SBX_JOBRUN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/names.h"
#include "provider.h"

struct jobrun {
	struct sbx_exec base; /* first: fd is an eventfd the pump signals at the end */
	char *job_dir;
	char name[72];
	char scope[NAMES_SCOPE_MAX + 80]; /* "SANDBOX/jobs/NAME": log lines */
	int out_fd, err_fd;   /* job_dir/stdout, job_dir/stderr (appended), -1 until opened */
	uint64_t output_max;  /* 0: no limit */
	uint64_t out_bytes;   /* kept so far, both streams */
	bool over;            /* output past output_max arrived (and was dropped) */
	bool werr;            /* an append failed (logged once) */
	int sent_sig;         /* atomic: the last signal the daemon sent */
	int cancel;           /* atomic: jobrun_release stops the pump */
	pthread_t pump;
	bool pumping;
};

/* Fill r for the job in job_dir named name (its eventfd made); scope names
 * the sandbox in log lines.  0, or -1 with errno (nothing to release). */
int jobrun_init(struct jobrun *r, const struct sbx_provider *prov, const char *job_dir, const char *name,
	const char *scope);

/* Stop the pump (cancel, join) and close and free what jobrun_init and
 * jobrun_open_output made.  The provider's exec_free calls it, once. */
void jobrun_release(struct jobrun *r);

/* Open job_dir/stdout and job_dir/stderr for appending.  0, or -1 with errno. */
int jobrun_open_output(struct jobrun *r);

/* Every byte of p to fd (EINTR retried).  0, or -1 with errno. */
int jobrun_write_all(int fd, const char *p, size_t n);

/* How much of n more bytes of output the limit lets through: n, or what is
 * left (then r->over is set: the rest is dropped and the job is to be
 * killed).  The bytes let through are counted. */
size_t jobrun_charge(struct jobrun *r, size_t n);

/* p appended to stdout (err false) or stderr; a failure is logged once. */
void jobrun_append(struct jobrun *r, bool err, const char *p, size_t n);

/* The pump: fn(arg) on a thread of its own, joined by jobrun_join or
 * jobrun_release. */
enum sbx_err jobrun_start_pump(struct jobrun *r, void *(*fn)(void *), void *arg);

/* Whether the pump has been asked to stop (the daemon is exiting). */
bool jobrun_cancelled(struct jobrun *r);

/* The job's end to fs/job.c: the eventfd becomes readable (the pump calls
 * it once the result is on disk). */
void jobrun_signal_end(struct jobrun *r);

/* exec_finish: join the pump; a job without a result is recorded lost. */
void jobrun_finish(struct jobrun *r);

/* ---- records in job_dir ---- */

/* job_dir/result: {state, exit, signal, ended_at, reason?, error?, note?}
 * (written atomically).  true when it is on disk. */
bool jobrun_result(const char *job_dir, const char *scope, const char *state, int code, int sig,
	const char *reason, const char *error, const char *note);

/* The same with the time the job ended (a supervisor's record). */
bool jobrun_result_at(const char *job_dir, const char *scope, const char *state, int code, int sig, double at,
	const char *reason);

/* state, or "killed" when the job exited by a signal (sig) the daemon was
 * asked to send (job_dir/kill-requested, fs/job.c's). */
const char *jobrun_killed_state(const char *job_dir, const char *state, int sig);

/* job_dir/result as "lost" (exit 255) with why; logged. */
void jobrun_lost(const char *job_dir, const char *scope, const char *why);

/* Whether job_dir/name exists (result, kill-requested...). */
bool jobrun_file_exists(const char *job_dir, const char *name);

/* text into job_dir/name atomically (0600).  0, or -1 with errno. */
int jobrun_file_write(const char *job_dir, const char *name, const char *text);

#endif
