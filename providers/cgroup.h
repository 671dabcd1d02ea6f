/* SPDX-License-Identifier: MIT */
/*
 * cgroup.h - the control groups of local sandboxes: one per sandbox, with
 * its limits (memory with swap off, CPU quota, pids), holding its init and
 * everything its jobs start or leave behind; one per job inside it, to
 * signal or end everything that job started.  Works on a pure cgroup v2
 * host and on a hybrid one.
 *
 * Layout (NAME = <key>-<token>):
 *   pure v2:  V2/sbxfs/NAME/             limits; the init (and bwrap's monitor)
 *             V2/sbxfs/NAME/job-<job>/   a job and what it leaves behind
 *   hybrid:   the same tree in the v2 hierarchy (/sys/fs/cgroup/unified),
 *             for membership and cgroup.kill only; the limits live in the
 *             v1 hierarchies: MEMORY/sbxfs/NAME (memory.limit_in_bytes and
 *             memory.memsw.limit_in_bytes), PIDS/sbxfs/NAME (pids.max),
 *             CPU/sbxfs/NAME (cpu.cfs_quota_us over cpu.cfs_period_us).
 * A process belongs to a sandbox when it is in its cgroup in every
 * hierarchy: bubblewrap is started inside them all (so the init and the
 * sandbox's cgroup namespace are), and a job joins its job cgroup and the
 * sandbox's v1 cgroups before it drops its privileges.
 *
 * key: 8 hex digits of SHA-256(state_dir), so two daemons on different
 * state_dirs serving the same user, thread and job names never share a
 * cgroup.
 *
 * Threading: cgroup_init() once, before any sandbox exists; afterwards the
 * detected layout is read-only and every function may run on any thread
 * (callers serialise operations on one sandbox with its scope lock).
 */
#ifndef SBX_CGROUP_H
#define SBX_CGROUP_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/buf.h"
#include "provider.h"

#define CGROUP_MAX_JOIN 5 /* v2 + memory + pids + cpu + freezer (without v2) */

struct cgroup_limits {
	uint64_t memory; /* bytes; 0 = no limit */
	double cpus;     /* 0 = no limit */
	uint64_t pids;   /* 0 = no limit */
};

/* The cgroup.procs files a process writes "0" to, to join a sandbox;
 * v2[i]: path[i] is of the v2 hierarchy (a new process can be cloned into
 * it, CLONE_INTO_CGROUP; a v1 one can be joined by its single thread
 * through the "tasks" file next to it: local_spawn.c says why). */
struct cgroup_join {
	int n;
	char path[CGROUP_MAX_JOIN][PATH_MAX];
	bool v2[CGROUP_MAX_JOIN];
};

/* Find the hierarchies, make their sbxfs/ parents, enable the v2
 * controllers there; log which resources cannot be enforced here. */
void cgroup_init(const char *state_dir);
/* Is there a v2 hierarchy (job cgroups and cgroup.kill)? */
bool cgroup_has_v2(void);
/* Create the sandbox's cgroups with their limits and fill j with what a
 * process joins to be in it.  SBX_ERR_IO (logged) when a limit that this
 * host supports could not be set. */
enum sbx_err cgroup_sandbox_create(const char *token, const struct cgroup_limits *lim, struct cgroup_join *j);
/* Does the sandbox's cgroup exist (true on a host without cgroups)?  A
 * sandbox adopted without one was made by an older sbxfs. */
bool cgroup_sandbox_exists(const char *token);
/* Create a job's cgroup: dir gets its v2 directory ("" without v2), j what
 * the job's process joins (its job cgroup and the sandbox's v1 cgroups). */
enum sbx_err cgroup_job_create(const char *token, const char *job, struct buf *dir, struct cgroup_join *j);
/* SIGKILL every process in the sandbox's job cgroups (running jobs and what
 * finished jobs left behind); the init and bubblewrap stay.  Without v2:
 * every process of the sandbox's v1 cgroup but those in keep[]. */
enum sbx_err cgroup_kill_jobs(const char *token, const pid_t *keep, int nkeep);
/* End what is left in a job's cgroup (dir as from cgroup_job_create) and
 * remove it. */
void cgroup_job_remove(const char *dir);
/* End every process of the sandbox and remove its cgroups. */
void cgroup_sandbox_destroy(const char *token);
/* The same, deferred: the token is kept until cgroup_destroy_deferred
 * (what the teardown of every sandbox at an unmount uses: removing a memory
 * cgroup walks every live superblock's LRU lists in the kernel, and a
 * thousand sandboxes still dying hold thousands of them; once they are all
 * gone the walk is short).  Out of memory: destroyed at once.  A daemon
 * killed before the flush leaves empty cgroups the next start sweeps. */
void cgroup_sandbox_destroy_later(const char *token);
void cgroup_destroy_deferred(void);
/* Freeze (on) or thaw every process of the sandbox: v2's cgroup.freeze,
 * else the v1 freezer.  A freeze returns once cgroup.events says frozen:
 * SBX_ERR_TIMEOUT (and thawed again) when that takes longer than 5 s;
 * SBX_ERR_NOTSUP when the sandbox has no cgroup that can freeze. */
enum sbx_err cgroup_sandbox_freeze(const char *token, bool on);
bool cgroup_sandbox_frozen(const char *token);
/* What a job's supervisor reads to know that its sandbox is frozen when it
 * is not its own v2 cgroup's cgroup.events (v1 freezer: its freezer.state);
 * "" otherwise.  0 or -1. */
int cgroup_frozen_file(const char *token, struct buf *out);

#endif
