/* SPDX-License-Identifier: MIT */
/*
 * job.h - the job state machine (DESIGN §6), apart from its FUSE glue
 * (jobfs.c): a job's files on the host, its start through the provider, its
 * supervision until the end, the decoding of its result, kill escalation,
 * and reattachment after a daemon restart.
 *
 * A job is a directory on the host, STATE/users/U/threads/T/jobs/NAME
 * (mode 0700, root), so it outlives a release, a reclaim and a daemon
 * restart, and its output never sits in daemon memory:
 *   env      the user's KEY=VALUE lines (written before the start)
 *   stdin    the user's input (written before the start; JOB_STDIN_MAX)
 *   cmd      the command, as bytes (written at the start)
 *   environ  the job's whole environment, NUL-separated (written at the start)
 *   timeout  the user's per-job timeout in whole seconds (written before the start)
 *   meta.json  timeout, started_at
 *   stdout, stderr, result, and the provider's own files (supervisor, ...)
 *
 * States: created -> starting -> running -> exited | killed | timed_out |
 * lost | failed.  Every change of state and every growth of the output
 * wakes the job's park queue (job_queue), where jobfs parks readers and
 * keeps poll handles.
 *
 * Threads: one event thread supervises running jobs (epoll over the
 * providers' exec fds, inotify on the output files, kill deadlines).
 * job_start() and a reattachment call the provider and may block: they run
 * on work threads (runtime/work.h), never on a FUSE worker.
 *
 * Locks: jobs_lock (the registry) and job->lock, ordered in
 * docs/architecture.md ("Lock order"); neither is held across a provider
 * call, a park_wake or a FUSE reply.
 */
#ifndef SBX_JOB_H
#define SBX_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../common/buf.h"
#include "../providers/pool.h"
#include "fspark.h"

#define JOB_CMD_MAX (1024 * 1024)         /* bytes of a command */
#define JOB_ENV_MAX (64 * 1024)           /* bytes of the env file */
#define JOB_STDIN_MAX (64LL * 1024 * 1024) /* bytes of stdin */

enum job_state { J_CREATED, J_STARTING, J_RUNNING, J_EXITED, J_KILLED, J_TIMED_OUT, J_LOST, J_FAILED };

enum job_stream { JOB_STDOUT, JOB_STDERR };

struct job;

/* More environment for every job of a sandbox, after the fixed base and
 * before the configuration's and the job's own: fn appends NUL-separated
 * KEY=VALUE entries to out (the network policy's proxy variables,
 * net/net.h).  Set before the first job starts; NULL: none. */
void job_set_environ_hook(int (*fn)(struct sbx *s, struct buf *out));

/* Start the event thread.  on_end(s) runs on it after a job of s ended
 * (the FUSE layer drops cached attributes of the sandbox's files). */
int job_init(void (*on_end)(struct sbx *s));
/* Stop the event thread and answer every parked request (EINTR). */
void job_shutdown(void);

/* The job NAME of s (its directory is jobs_dir/NAME), referenced, loaded
 * from disk on first use; NULL when there is no such job. */
struct job *job_get(struct sbx *s, const char *jobs_dir, const char *name);
void job_ref(struct job *j);
void job_put(struct job *j);
/* mkdir jobs/NAME: 0 or an errno (EEXIST, ...). */
int job_mkdir(struct sbx *s, const char *jobs_dir, const char *name);
/* rmdir jobs/NAME: EBUSY while it runs; otherwise every parked reader is
 * answered ENOENT, the directory and the provider's remains are removed. */
int job_rmdir(struct job *j);
/* Every job directory under jobs_dir. */
void job_list(const char *jobs_dir, void (*fn)(const char *name, void *arg), void *arg);
/* Is a job of s (jobs under jobs_dir) starting or running?  A restore
 * refuses then (EBUSY).  Loads every slot; may not be called with
 * jobs_lock held. */
bool job_any_running(struct sbx *s, const char *jobs_dir);

const char *job_scope(struct job *j);
enum job_state job_state(struct job *j);
const char *job_state_name(enum job_state st);
bool job_state_ended(enum job_state st);
struct park_queue *job_queue(struct job *j);

/* Input before the start: EBUSY once started, EINVAL for a bad env line,
 * EFBIG past the caps.  Nothing is written on error. */
int job_add_env(struct job *j, const char *data, size_t len);
int job_add_stdin(struct job *j, const char *data, size_t len);
/* A writer of cmd opened (+1) or closed (-1): while one is open, a reader
 * of exit waits for the start instead of getting ESRCH. */
void job_cmd_writer(struct job *j, int delta);
/* A `timeout` write: a positive number of seconds ("30", "2.5": rounded up
 * to whole seconds), at most the sandbox's bash_command_timeout, before the
 * start; the last write wins.  EINVAL for anything else (garbage, zero, a
 * sign, past the cap, after cmd), ENOENT when the sandbox is gone; nothing
 * is written on error.  The job's status shows it from then on. */
int job_set_timeout(struct job *j, const char *data, size_t len);
int job_cmd_writers(struct job *j);
/* CREATED -> STARTING: this caller will start it.  EBUSY when already
 * started (or starting), ENOENT when removed.  job_unclaim() gives it back
 * when the start could not even be attempted. */
int job_claim(struct job *j);
void job_unclaim(struct job *j);
/* STARTING -> RUNNING: write the command and environment, start it through
 * the provider.  Blocks (call from a work thread).  On error the job goes
 * back to CREATED and nothing of the attempt remains. */
int job_start(struct job *j, const char *cmd, size_t len);
/* A `ctl` write: "kill" (SIGTERM, SIGKILL after a grace period) or "kill
 * SIGNAL".  EINVAL, ESRCH (not running), EOPNOTSUPP (backend cannot). */
int job_ctl(struct job *j, const char *text, size_t len);

/* Output: an fd on the stream's host file (O_RDONLY), or -1 with errno. */
int job_open_stream(struct job *j, enum job_stream which);
off_t job_stream_size(struct job *j, enum job_stream which);
enum job_input { JOB_IN_ENV, JOB_IN_STDIN, JOB_IN_TIMEOUT };

/* Bytes written so far to one of the job's input files. */
off_t job_input_size(struct job *j, enum job_input which);
/* After the end: "N\n" (128+N for signal N). */
int job_exit_text(struct job *j, char *out, size_t len);
int job_status_json(struct job *j, struct buf *out);
/* The command as written (for reading cmd), empty before the start. */
int job_cmd_text(struct job *j, struct buf *out);

#endif
