/* SPDX-License-Identifier: MIT */
/*
 * job_int.h - what job.c (the state machine, the registry) and jobwatch.c
 * (the event thread that watches running jobs) share; nothing else
 * includes it.  Locks: jobs_lock and each job's lock, ordered in
 * docs/architecture.md ("Lock order").
 */
#ifndef SBX_JOB_INT_H
#define SBX_JOB_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../common/buf.h"
#include "../common/lock.h"
#include "../common/names.h"
#include "job.h"

#define JOB_KILL_GRACE_MS 2000
#define JOB_SCOPE_MAX (3 * NAME_MAX_LEN + sizeof("//jobs/"))

extern const char *const job_stream_files[2]; /* "stdout", "stderr" */

struct job {
	int refs; /* atomic: registry + nodes + handles + work items + the event thread */
	char name[NAME_MAX_LEN + 1];
	char *dir;
	char scope[JOB_SCOPE_MAX];
	struct sbx *sbx; /* referenced */
	struct park_queue q;
	pthread_mutex_t lock;
	/* protected by lock: */
	enum job_state state;
	bool reattaching;          /* a work item is looking for it after a restart */
	int cmd_writers;           /* open cmd handles */
	struct sbx_exec *exec;     /* while running (and until a pending kill escalation); the job's
	                            * reference: a ctl writer or the escalation takes its own
	                            * (sbx_exec_get) to signal it outside the lock */
	bool watched;              /* exec->fd in the epoll set (holds a ref) */
	int wd[2];                 /* inotify watches on stdout, stderr */
	uint64_t kill_deadline_ms; /* escalate to SIGKILL then; 0 = none */
	bool removed;
	/* protected by jobs_lock: */
	struct job *next;     /* registry */
	struct job *wd_next[2]; /* wd map chains */
};

extern struct lock jobs_lock; /* asserted held by the _locked helpers (lock.h) */
extern struct job *jobs; /* protected by jobs_lock: the registry */

/* job.c */
int job_path(struct job *j, const char *file, struct buf *b);
/* Record how a job ended when its provider could not (state "lost" or
 * "failed", exit 255, the cause). */
void job_record_end(struct job *j, const char *state, const char *why);
/* Caller holds j->lock.  Take the recorded result as the final state. */
void job_take_result_locked(struct job *j);

/* jobwatch.c: the event thread (epoll over the exec fds, inotify on the
 * output files, kill deadlines). */
int jobwatch_start(void (*on_end)(struct sbx *s));
/* Stop the thread (jobwatch_release closes its descriptors afterwards). */
void jobwatch_stop(void);
void jobwatch_release(void);
/* Watch a running job: its exec fd and its output files.  0 or an errno. */
int jobwatch_add(struct job *j);
/* A started job nobody can watch would run unseen and never end for its
 * readers: end it now, with the cause as its result. */
void jobwatch_fail(struct job *j, int err);
/* Caller holds jobs_lock and j->lock: stop watching j's output files. */
void jobwatch_unwatch_locked(struct job *j);
/* Wake the event thread (a new kill deadline). */
void jobwatch_kick(void);

#endif
