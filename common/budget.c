/* SPDX-License-Identifier: MIT */
/*
 * budget.c - the daemon's limits and their shares (see budget.h).
 *
 * Why shares and not one pool: descriptors a sandbox can make the daemon
 * hold (open files through the mount, proxy connections) must never take
 * the ones the daemon needs to serve everyone else (a FUSE reply that
 * splices, a job start, an HTTP request): a job that made 21 000 files once
 * took the daemon to its limit, and from then on every user got EMFILE.  So
 * what sandboxes hold is capped per sandbox, per user and in all, and what
 * is only a cache (O_PATH descriptors of data nodes) has a share of its own
 * that is evicted, never refused.
 *
 * The limit is read again at most every BUDGET_REFRESH_MS (a coarse clock,
 * read in the vDSO, on the paths that take), so prlimit on a running daemon
 * takes effect at once: the caps of a lowered limit refuse new takes and
 * shrink the cache; what is held stays held until it is closed.
 */
#define _GNU_SOURCE
#include "budget.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "names.h"
#include "util.h"

/* ---- caps --------------------------------------------------------------------------------- */

void budget_caps_for(long limit, struct budget_caps *c)
{
	long avail, proxy_fds;

	memset(c, 0, sizeof(*c));
	c->limit = limit;
	c->reserve = 512 + limit / 16;
	if (c->reserve > limit / 2)
		c->reserve = limit / 2;
	avail = limit - c->reserve;
	c->data_cache = avail * 3 / 16;
	if (c->data_cache < 16)
		c->data_cache = 16; /* a few, or every operation reopens */
	c->rfiles_cache = avail / 16;
	if (c->rfiles_cache < 4)
		c->rfiles_cache = 4;
	c->total[BUDGET_DATA] = avail * 3 / 8;
	c->sandbox[BUDGET_DATA] = c->total[BUDGET_DATA] / 8;
	c->user[BUDGET_DATA] = c->total[BUDGET_DATA] / 2;
	proxy_fds = avail * 3 / 8;
	c->total[BUDGET_PROXY] = proxy_fds / BUDGET_PROXY_FDS;
	if (c->total[BUDGET_PROXY] > BUDGET_PROXY_MAX)
		c->total[BUDGET_PROXY] = BUDGET_PROXY_MAX;
	c->sandbox[BUDGET_PROXY] = c->total[BUDGET_PROXY] / 4;
	if (c->sandbox[BUDGET_PROXY] > BUDGET_PROXY_SANDBOX_MAX)
		c->sandbox[BUDGET_PROXY] = BUDGET_PROXY_SANDBOX_MAX;
	c->user[BUDGET_PROXY] = c->total[BUDGET_PROXY] / 2;
	/* a sandbox may always hold a few (one open file is 2 descriptors) */
	for (int s = 0; s < BUDGET_SHARES; s++) {
		if (c->sandbox[s] < 4)
			c->sandbox[s] = 4;
		if (c->user[s] < c->sandbox[s])
			c->user[s] = c->sandbox[s];
		if (c->total[s] < c->user[s])
			c->total[s] = c->user[s];
	}
}

static struct {
	pthread_mutex_t lock;      /* the account table */
	struct budget_acct *accts; /* protected by lock */
	uint64_t checked_ms;       /* atomic: when the limit was last read */
	long limit;                /* atomic: RLIMIT_NOFILE as last read */
	long cache_cap;            /* atomic: caps.data_cache for that limit */
	long rfiles_cap;           /* atomic: caps.rfiles_cache for that limit */
	long used[BUDGET_SHARES];  /* atomic */
	uint64_t refused[BUDGET_SHARES][3]; /* atomic */
	uint64_t logged_ms[BUDGET_SHARES];  /* atomic: refusals of a NULL account */
} bg = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t budget_coarse_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The limit, read again when it may be stale. */
static long budget_limit(void)
{
	uint64_t now = budget_coarse_ms(), then = __atomic_load_n(&bg.checked_ms, __ATOMIC_RELAXED);
	long limit = __atomic_load_n(&bg.limit, __ATOMIC_RELAXED);
	struct budget_caps c;
	struct rlimit rl;

	if (limit && now - then < BUDGET_REFRESH_MS)
		return limit;
	__atomic_store_n(&bg.checked_ms, now, __ATOMIC_RELAXED);
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return limit ? limit : 1024;
	limit = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1 << 24) ? 1 << 24 : (long)rl.rlim_cur;
	budget_caps_for(limit, &c);
	__atomic_store_n(&bg.cache_cap, c.data_cache, __ATOMIC_RELAXED);
	__atomic_store_n(&bg.rfiles_cap, c.rfiles_cache, __ATOMIC_RELAXED);
	__atomic_store_n(&bg.limit, limit, __ATOMIC_RELAXED);
	return limit;
}

void budget_caps(struct budget_caps *c)
{
	budget_caps_for(budget_limit(), c);
}

long budget_data_cache(void)
{
	budget_limit();
	return __atomic_load_n(&bg.cache_cap, __ATOMIC_RELAXED);
}

long budget_rfiles_cache(void)
{
	budget_limit();
	return __atomic_load_n(&bg.rfiles_cap, __ATOMIC_RELAXED);
}

/* ---- accounts ----------------------------------------------------------------------------- */

struct budget_acct {
	char user[NAME_MAX_LEN + 1];
	char thread[NAME_MAX_LEN + 1]; /* "" for a user's own account */
	int refs;                      /* protected by bg.lock: every holder */
	long used[BUDGET_SHARES];      /* atomic */
	uint64_t logged_ms[BUDGET_SHARES]; /* atomic: its last refusal logged */
	struct budget_acct *owner;     /* the user's account (referenced); NULL for a user's */
	struct budget_acct *next;      /* protected by bg.lock */
};

static struct budget_acct *budget_find_locked(const char *user, const char *thread)
{
	for (struct budget_acct *a = bg.accts; a; a = a->next)
		if (!strcmp(a->user, user) && !strcmp(a->thread, thread))
			return a;
	return NULL;
}

static struct budget_acct *budget_get_locked(const char *user, const char *thread)
{
	struct budget_acct *a = budget_find_locked(user, thread);

	if (a) {
		a->refs++;
		return a;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	if (str_fmt(a->user, sizeof(a->user), "%s", user) || str_fmt(a->thread, sizeof(a->thread), "%s", thread)) {
		free(a);
		return NULL;
	}
	a->refs = 1;
	a->next = bg.accts;
	bg.accts = a;
	return a;
}

/* bg.lock held: drop a reference; returns the owner reference to drop too. */
static struct budget_acct *budget_put_locked(struct budget_acct *a)
{
	struct budget_acct **pp, *owner;

	if (--a->refs)
		return NULL;
	for (pp = &bg.accts; *pp; pp = &(*pp)->next)
		if (*pp == a) {
			*pp = a->next;
			break;
		}
	owner = a->owner;
	free(a);
	return owner;
}

struct budget_acct *budget_acct_get(const char *user, const char *thread)
{
	struct budget_acct *a, *u;

	pthread_mutex_lock(&bg.lock);
	a = budget_get_locked(user, thread);
	if (a && !a->owner && thread[0]) {
		u = budget_get_locked(user, "");
		if (!u) {
			budget_put_locked(a);
			a = NULL;
		} else {
			a->owner = u;
		}
	}
	pthread_mutex_unlock(&bg.lock);
	return a;
}

struct budget_acct *budget_acct_ref(struct budget_acct *a)
{
	if (a) {
		pthread_mutex_lock(&bg.lock);
		a->refs++;
		pthread_mutex_unlock(&bg.lock);
	}
	return a;
}

void budget_acct_put(struct budget_acct *a)
{
	pthread_mutex_lock(&bg.lock);
	while (a)
		a = budget_put_locked(a);
	pthread_mutex_unlock(&bg.lock);
}

static const char *const budget_what[BUDGET_SHARES] = { "descriptors for open files", "proxy connections" };
static const char *const budget_level[3] = { "a sandbox", "a user", "in all" };

static void budget_log_refusal(struct budget_acct *a, enum budget_share s, int level, long used, long cap)
{
	uint64_t now = budget_coarse_ms(), *last = a ? &a->logged_ms[s] : &bg.logged_ms[s];
	uint64_t then = __atomic_load_n(last, __ATOMIC_RELAXED);
	char scope[NAMES_SCOPE_MAX + 1];

	__atomic_add_fetch(&bg.refused[s][level], 1, __ATOMIC_RELAXED);
	if (then && now - then < BUDGET_LOG_MS)
		return;
	if (!__atomic_compare_exchange_n(last, &then, now ? now : 1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return; /* another thread logs it */
	if (!a || str_fmt(scope, sizeof(scope), "%s/%s", a->user, a->thread))
		snprintf(scope, sizeof(scope), "daemon");
	log_warn(scope, "refused: %ld %s would pass the %ld allowed %s (%s; RLIMIT_NOFILE %ld, see docs/security.md)",
		used, budget_what[s], cap, budget_level[level], level ? "ENFILE" : "EMFILE",
		__atomic_load_n(&bg.limit, __ATOMIC_RELAXED));
}

int budget_take(struct budget_acct *a, enum budget_share s, long n)
{
	struct budget_caps c;
	struct budget_acct *u = a ? a->owner : NULL;
	long used;

	budget_caps(&c);
	if (a && (used = __atomic_add_fetch(&a->used[s], n, __ATOMIC_RELAXED)) > c.sandbox[s]) {
		__atomic_sub_fetch(&a->used[s], n, __ATOMIC_RELAXED);
		budget_log_refusal(a, s, 0, used, c.sandbox[s]);
		return EMFILE;
	}
	if (u && (used = __atomic_add_fetch(&u->used[s], n, __ATOMIC_RELAXED)) > c.user[s]) {
		__atomic_sub_fetch(&u->used[s], n, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&a->used[s], n, __ATOMIC_RELAXED);
		budget_log_refusal(a, s, 1, used, c.user[s]);
		return ENFILE;
	}
	if ((used = __atomic_add_fetch(&bg.used[s], n, __ATOMIC_RELAXED)) > c.total[s]) {
		__atomic_sub_fetch(&bg.used[s], n, __ATOMIC_RELAXED);
		if (u)
			__atomic_sub_fetch(&u->used[s], n, __ATOMIC_RELAXED);
		if (a)
			__atomic_sub_fetch(&a->used[s], n, __ATOMIC_RELAXED);
		budget_log_refusal(a, s, 2, used, c.total[s]);
		return ENFILE;
	}
	return 0;
}

void budget_force(struct budget_acct *a, enum budget_share s, long n)
{
	if (a)
		__atomic_add_fetch(&a->used[s], n, __ATOMIC_RELAXED);
	if (a && a->owner)
		__atomic_add_fetch(&a->owner->used[s], n, __ATOMIC_RELAXED);
	__atomic_add_fetch(&bg.used[s], n, __ATOMIC_RELAXED);
}

void budget_give(struct budget_acct *a, enum budget_share s, long n)
{
	budget_force(a, s, -n);
}

void budget_stats(struct budget_stats *st)
{
	for (int s = 0; s < BUDGET_SHARES; s++) {
		st->used[s] = __atomic_load_n(&bg.used[s], __ATOMIC_RELAXED);
		for (int l = 0; l < 3; l++)
			st->refused[s][l] = __atomic_load_n(&bg.refused[s][l], __ATOMIC_RELAXED);
	}
}

/* ---- probes ------------------------------------------------------------------------------- */

/* The daemon's open descriptors; -1 when they cannot be counted (none
 * left to open the directory with: at the limit). */
static long budget_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	long n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own */
}

/* The first number in file (a "max" or a missing file: -1). */
static long long budget_read_num(const char *path)
{
	struct buf b = BUF_INIT(256);
	long long v = -1;
	char *end;

	if (!util_read_file(path, &b) && b.len && b.ptr[0] >= '0' && b.ptr[0] <= '9') {
		v = strtoll(b.ptr, &end, 10);
		if (end == b.ptr)
			v = -1;
	}
	buf_free(&b);
	return v;
}

/* The value of key in a file of "key value" lines (blanks or a tab
 * between them), or -1. */
static long long budget_read_key(const char *path, const char *key)
{
	struct buf b = BUF_INIT(64 * 1024);
	size_t kl = strlen(key);
	long long v = -1;

	if (!util_read_file(path, &b) && b.len)
		for (const char *p = b.ptr; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
			if (!strncmp(p, key, kl) && (p[kl] == ' ' || p[kl] == '\t')) {
				v = strtoll(p + kl + 1, NULL, 10);
				break;
			}
	buf_free(&b);
	return v;
}

/* v1 says "no limit" with a huge number */
#define BUDGET_NO_LIMIT (1LL << 60)

/* Of dir and its ancestors up to the hierarchy's root, the level where
 * used/limit is highest (files named by used_file/limit_file; used_key: a
 * key of used_file, NULL when used_file holds just the number). */
static void budget_cgroup_tightest(const char *root, const char *cg, const char *used_file, const char *used_key,
	const char *limit_file, long long *used, long long *limit)
{
	char path[PATH_MAX], dir[PATH_MAX];
	double best = -1;

	if (str_fmt(dir, sizeof(dir), "%s%s", root, cg))
		return;
	for (;;) {
		char *slash;
		long long u, l;

		if (!str_fmt(path, sizeof(path), "%s/%s", dir, limit_file) && (l = budget_read_num(path)) > 0 &&
		    l < BUDGET_NO_LIMIT && !str_fmt(path, sizeof(path), "%s/%s", dir, used_file) &&
		    (u = used_key ? budget_read_key(path, used_key) : budget_read_num(path)) >= 0 &&
		    (double)u / (double)l > best) {
			best = (double)u / (double)l;
			*used = u;
			*limit = l;
		}
		slash = strrchr(dir, '/');
		if (!slash || (size_t)(slash - dir) < strlen(root))
			break;
		*slash = '\0';
	}
}

/* The daemon's cgroups: memory (anonymous memory against the limit) and
 * pids, on a pure v2 host and on a hybrid one (v1 memory and pids). */
static void budget_cgroups(struct budget_usage *u)
{
	struct buf b = BUF_INIT(16 * 1024);

	if (util_read_file("/proc/self/cgroup", &b) || !b.len) {
		buf_free(&b);
		return;
	}
	for (char *line = b.ptr, *next; line && *line; line = next) {
		char *ctl, *path;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		ctl = strchr(line, ':');
		path = ctl ? strchr(ctl + 1, ':') : NULL;
		if (!path)
			continue;
		*path++ = '\0';
		ctl++;
		if (!*ctl) { /* v2: pure at /sys/fs/cgroup, hybrid at .../unified */
			const char *root = access("/sys/fs/cgroup/cgroup.controllers", F_OK) ? "/sys/fs/cgroup/unified"
											     : "/sys/fs/cgroup";
			if (u->mem_limit < 0)
				budget_cgroup_tightest(root, path, "memory.stat", "anon", "memory.max", &u->mem,
					&u->mem_limit);
			if (u->threads_limit < 0)
				budget_cgroup_tightest(root, path, "pids.current", NULL, "pids.max", &u->threads,
					&u->threads_limit);
			continue;
		}
		for (char *c = ctl, *comma; c; c = comma) {
			comma = strchr(c, ',');
			if (comma)
				*comma++ = '\0';
			if (!strcmp(c, "memory"))
				budget_cgroup_tightest("/sys/fs/cgroup/memory", path, "memory.stat", "total_rss",
					"memory.limit_in_bytes", &u->mem, &u->mem_limit);
			else if (!strcmp(c, "pids"))
				budget_cgroup_tightest("/sys/fs/cgroup/pids", path, "pids.current", NULL, "pids.max",
					&u->threads, &u->threads_limit);
		}
	}
	buf_free(&b);
}

void budget_usage(struct budget_usage *u)
{
	struct budget_caps c;
	struct rlimit rl;
	long long vm;
	char la[128];
	struct buf b = BUF_INIT(256);

	budget_caps(&c);
	memset(u, 0, sizeof(*u));
	u->fds = budget_count_fds();
	u->fds_limit = c.limit;
	u->data_used = __atomic_load_n(&bg.used[BUDGET_DATA], __ATOMIC_RELAXED);
	u->data_cap = c.total[BUDGET_DATA];
	u->proxy_used = __atomic_load_n(&bg.used[BUDGET_PROXY], __ATOMIC_RELAXED);
	u->proxy_cap = c.total[BUDGET_PROXY];
	u->mem = u->mem_limit = u->vm = u->vm_limit = -1;
	u->threads = u->threads_limit = u->sys_threads = u->sys_threads_limit = -1;
	budget_cgroups(u);
	vm = budget_read_key("/proc/self/status", "VmSize:"); /* kB */
	if (vm >= 0 && !getrlimit(RLIMIT_AS, &rl) && rl.rlim_cur != RLIM_INFINITY) {
		u->vm = vm * 1024;
		u->vm_limit = (long long)rl.rlim_cur;
	}
	/* /proc/loadavg: "0.00 0.01 0.05 1/234 5678": the host's tasks */
	if (!util_read_file("/proc/loadavg", &b) && b.len && sscanf(b.ptr, "%*s %*s %*s %*d/%127s", la) == 1) {
		u->sys_threads = strtoll(la, NULL, 10);
		u->sys_threads_limit = budget_read_num("/proc/sys/kernel/threads-max");
	}
	buf_free(&b);
}

static bool budget_is_near(long long used, long long limit)
{
	return used >= 0 && limit > 0 && used * 100 >= limit * BUDGET_NEAR_PCT;
}

int budget_near(const struct budget_usage *u, struct buf *out, const char *first_sep, const char *sep)
{
	int n = 0, r = 0;

#define BUDGET_REASON(...)                                         \
	do {                                                       \
		r |= buf_adds(out, n++ ? sep : first_sep);         \
		r |= buf_addf(out, __VA_ARGS__);                   \
	} while (0)
	if (u->fds < 0 && u->fds_limit > 0)
		BUDGET_REASON("file descriptors: at the limit (%ld)", u->fds_limit);
	else if (budget_is_near(u->fds, u->fds_limit))
		BUDGET_REASON("file descriptors: %ld of %ld in use", u->fds, u->fds_limit);
	if (budget_is_near(u->data_used, u->data_cap))
		BUDGET_REASON("descriptors for open files: %ld of %ld held", u->data_used, u->data_cap);
	if (budget_is_near(u->proxy_used, u->proxy_cap))
		BUDGET_REASON("proxy connections: %ld of %ld", u->proxy_used, u->proxy_cap);
	if (budget_is_near(u->mem, u->mem_limit))
		BUDGET_REASON("memory: %lld of %lld MiB (cgroup)", u->mem >> 20, u->mem_limit >> 20);
	if (budget_is_near(u->vm, u->vm_limit))
		BUDGET_REASON("address space: %lld of %lld MiB (RLIMIT_AS)", u->vm >> 20, u->vm_limit >> 20);
	if (budget_is_near(u->threads, u->threads_limit))
		BUDGET_REASON("tasks: %lld of %lld (cgroup pids.max)", u->threads, u->threads_limit);
	if (budget_is_near(u->sys_threads, u->sys_threads_limit))
		BUDGET_REASON("host tasks: %lld of %lld (kernel.threads-max)", u->sys_threads, u->sys_threads_limit);
#undef BUDGET_REASON
	return r ? -1 : n;
}
