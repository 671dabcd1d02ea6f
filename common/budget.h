/* SPDX-License-Identifier: MIT */
/*
 * budget.h - the daemon's limits and how they are shared out (issue 19).
 *
 * File descriptors.  The daemon has L = RLIMIT_NOFILE (the soft limit; main.c
 * raises it to the hard one at start, an administrator may lower it later
 * with prlimit(1): the shares follow within BUDGET_REFRESH_MS).  L is split:
 *
 *   reserve      512 + L/16: the daemon's own (FUSE workers and their splice
 *                pipes, libcurl, jobs, resolvers, the log); not enforced, it
 *                is what the shares below leave;
 *   data_cache   3A/16, where A = L - reserve: O_PATH descriptors of data
 *                nodes kept only to save a reopen (fs/nodefd.c), evicted at
 *                will;
 *   rfiles_cache A/16: cache files of remote files that nobody has open
 *                (fs/rfiles.c), evicted at will like the bytes over
 *                remote_files.cache_size;
 *   data         3A/8: descriptors held for files and directories open
 *                through the mount (data and remote files; and, where file
 *                handles do not work, one per data node); at most 1/8 of it
 *                per sandbox, 1/2 per user;
 *   proxy        3A/8 descriptors, 6 per connection of the approval proxy:
 *                at most BUDGET_PROXY_MAX connections in all, 1/4 of them
 *                (at most BUDGET_PROXY_SANDBOX_MAX) per sandbox, 1/2 per user.
 *
 * Accounts.  Each sandbox (user/thread) and each user has an account that
 * counts what it holds of each share.  A take that would pass the sandbox's
 * cap fails with EMFILE, the user's or the whole share's with ENFILE, and
 * says so in the log (at most once per BUDGET_LOG_MS per account and share):
 * one sandbox at its cap fails only its own requests, one user only theirs.
 *
 * Probes.  The daemon's descriptors, memory and threads against their
 * limits, for .health ("degraded: WHY" at BUDGET_NEAR_PCT percent) and
 * .metrics.
 *
 * Thread-safe: the counters are atomics (a take may overshoot for a moment
 * when two race at a cap: both are refused, never both granted past it);
 * the account table has one mutex, a leaf, taken only to find or drop an
 * account.
 */
#ifndef SBX_BUDGET_H
#define SBX_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define BUDGET_REFRESH_MS 100     /* how stale the limit may be */
#define BUDGET_LOG_MS 10000       /* an account's refusals logged at most this often */
#define BUDGET_NEAR_PCT 90        /* .health degraded from this share of a limit */
#define BUDGET_PROXY_FDS 6        /* descriptors of one proxy connection (2 sockets, 2 pipes) */
#define BUDGET_PROXY_MAX 8192     /* connections in all, whatever the limit */
#define BUDGET_PROXY_SANDBOX_MAX 512

enum budget_share {
	BUDGET_DATA,  /* descriptors held for open data files and directories */
	BUDGET_PROXY, /* approval proxy connections */
	BUDGET_SHARES
};

struct budget_caps {
	long limit;   /* RLIMIT_NOFILE, soft */
	long reserve; /* left for the daemon's own */
	long data_cache;
	long rfiles_cache;
	/* in descriptors for BUDGET_DATA, in connections for BUDGET_PROXY */
	long total[BUDGET_SHARES];
	long user[BUDGET_SHARES];
	long sandbox[BUDGET_SHARES];
};

/* Pure: the caps for a limit of `limit` descriptors (unit-tested). */
void budget_caps_for(long limit, struct budget_caps *c);
/* The caps now: the limit is read again when BUDGET_REFRESH_MS have passed. */
void budget_caps(struct budget_caps *c);
/* The data_cache and rfiles_cache caps now (hot paths: no copy of the rest). */
long budget_data_cache(void);
long budget_rfiles_cache(void);

struct budget_acct;

/* The account of sandbox user/thread, referenced (it references its user's
 * account); NULL on ENOMEM, and a NULL account counts in the total only. */
struct budget_acct *budget_acct_get(const char *user, const char *thread);
void budget_acct_put(struct budget_acct *a);
/* Another reference on a (NULL: NULL). */
struct budget_acct *budget_acct_ref(struct budget_acct *a);
/* Take n units of share s for a: 0, or EMFILE (a's own cap) or ENFILE (its
 * user's or the share's), logged, and nothing taken. */
int budget_take(struct budget_acct *a, enum budget_share s, long n);
/* Take n units even past the caps (what cannot be refused any more). */
void budget_force(struct budget_acct *a, enum budget_share s, long n);
void budget_give(struct budget_acct *a, enum budget_share s, long n);

struct budget_stats {
	long used[BUDGET_SHARES];     /* in all */
	uint64_t refused[BUDGET_SHARES][3]; /* by level: sandbox, user, total */
};
void budget_stats(struct budget_stats *st);

/* What the daemon uses and may use; -1 = unknown or no limit. */
struct budget_usage {
	long fds, fds_limit;
	long data_used, data_cap;   /* the data share */
	long proxy_used, proxy_cap; /* the proxy share, connections */
	long long mem, mem_limit;   /* bytes: anonymous memory against the cgroup's limit */
	long long vm, vm_limit;     /* bytes: address space against RLIMIT_AS */
	long long threads, threads_limit; /* tasks against the cgroup's pids.max */
	long long sys_threads, sys_threads_limit; /* tasks of the host against kernel.threads-max */
};

/* Measure now (reads /proc and the daemon's cgroups: for .health and
 * .metrics, not for a hot path). */
void budget_usage(struct budget_usage *u);
/* Pure: append "WHY[; WHY]" for every limit u is near (nothing when none);
 * sep goes before each reason.  Returns the number of reasons, -1 on a full
 * buffer. */
int budget_near(const struct budget_usage *u, struct buf *out, const char *first_sep, const char *sep);

#endif
