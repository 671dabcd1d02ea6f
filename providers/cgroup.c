/* SPDX-License-Identifier: MIT */
/*
 * cgroup.c - control groups of local sandboxes (see cgroup.h for the
 * layout).
 *
 * Why both versions: DESIGN §5 asks for one cgroup v2 per sandbox, but many
 * hosts (this project's CI among them) are hybrid: the v2 hierarchy exists
 * with no controllers, for membership and cgroup.kill, while memory, pids
 * and cpu are v1 hierarchies.  Each controller is used where the host has
 * it; a controller the host lacks is reported once at start and not
 * enforced (failing every sandbox instead would make sbxfs unusable in
 * containers that do not delegate controllers).
 *
 * Freezing (the `ctl` freeze, a snapshot's consistent pass): cgroup v2's
 * cgroup.freeze of the sandbox's cgroup, which freezes its job cgroups with
 * it; it needs no controller, so a hybrid host has it too.  Only a host
 * without a v2 hierarchy uses the v1 freezer controller: then every
 * sandbox process also joins FREEZER/sbxfs/NAME.
 *
 * Why the sandbox's cgroup can hold processes and children at once: on v2
 * the controllers are enabled in sbxfs/ (so every sandbox cgroup has its
 * limits) but never in a sandbox cgroup's own subtree_control, so the
 * "no internal processes" rule does not apply to it; its job cgroups are
 * plain children, charged to the sandbox's limits.
 */
#define _GNU_SOURCE
#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/names.h"
#include "../common/util.h"

#define CG_PERIOD_US 100000
#define CG_WAIT_MS 5000
#define CG_TOKEN_MAX 64 /* a sandbox token (SCOPE_TOKEN_LEN) and more */
#define CG_FREEZE_MS 5000 /* a process stuck in the kernel (D state) delays a freeze; this long at most */

enum cg_ctrl { CG_MEMORY, CG_PIDS, CG_CPU, CG_NCTRL };
static const char *const cg_names[CG_NCTRL] = { "memory", "pids", "cpu" };

/* Written once by cgroup_init(), read-only afterwards. */
static struct {
	char v2[PATH_MAX];           /* the v2 mount, "" when none */
	char v1[CG_NCTRL][PATH_MAX]; /* a controller's v1 mount, "" when not v1 */
	bool v2ctrl[CG_NCTRL];       /* enabled for V2/sbxfs/ */
	char freezer[PATH_MAX];      /* the v1 freezer's mount, used only without v2; else "" */
	char key[9];
} cg;

/* ---- small file helpers ----------------------------------------------------- */

static int cg_write(const char *dir, const char *file, const char *text)
{
	char path[PATH_MAX];
	int fd, r = -1, saved;

	if (str_fmt(path, sizeof(path), "%s/%s", dir, file))
		return -1;
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (write(fd, text, strlen(text)) == (ssize_t)strlen(text))
		r = 0;
	saved = errno;
	close(fd);
	errno = saved;
	return r;
}

/* "" → no such hierarchy; else dir = MOUNT/sbxfs[/NAME[/SUB]] */
static int cg_dir(const char *mount, const char *token, const char *sub, char *out, size_t len)
{
	if (!mount[0])
		return -1;
	if (!token)
		return str_fmt(out, len, "%s/sbxfs", mount);
	if (!sub)
		return str_fmt(out, len, "%s/sbxfs/%s-%s", mount, cg.key, token);
	return str_fmt(out, len, "%s/sbxfs/%s-%s/%s", mount, cg.key, token, sub);
}

static bool cg_empty(const char *dir, bool v2)
{
	struct buf b = BUF_INIT(1 << 20);
	char path[PATH_MAX];
	bool empty = true;

	if (str_fmt(path, sizeof(path), "%s/%s", dir, v2 ? "cgroup.events" : "cgroup.procs") ||
	    util_read_file(path, &b))
		empty = errno == ENOENT; /* gone is empty */
	else
		empty = v2 ? strstr(buf_str(&b), "populated 0") != NULL : b.len == 0;
	buf_free(&b);
	return empty;
}

static bool cg_wait_empty(const char *dir, bool v2, int ms)
{
	uint64_t deadline = util_now_ms() + (uint64_t)ms;

	while (!cg_empty(dir, v2)) {
		if (util_now_ms() >= deadline)
			return false;
		usleep(2000);
	}
	return true;
}

static void cg_rmdir(const char *dir)
{
	if (rmdir(dir) && errno != ENOENT)
		log_warn("cgroup", "cannot remove %s: %s", dir, strerror(errno));
}

static void cg_join_add(struct cgroup_join *j, const char *dir)
{
	for (int i = 0; i < j->n; i++)
		if (!strncmp(j->path[i], dir, strlen(dir)) && j->path[i][strlen(dir)] == '/')
			return; /* co-mounted controllers: one hierarchy */
	if (j->n < CGROUP_MAX_JOIN && !str_fmt(j->path[j->n], sizeof(j->path[0]), "%s/cgroup.procs", dir)) {
		size_t n = strlen(cg.v2);
		j->v2[j->n] = n && !strncmp(dir, cg.v2, n) && !strncmp(dir + n, "/sbxfs/", 7);
		j->n++;
	}
}

/* ---- detection ---------------------------------------------------------------- */

static bool cg_has_option(const char *opts, const char *want)
{
	size_t n = strlen(want);

	for (const char *p = opts; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (!strncmp(p, want, n) && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

static void cg_find_mounts(void)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	char dev[256], dir[PATH_MAX], type[64], opts[1024];

	if (!f)
		return;
	while (fscanf(f, "%255s %4095s %63s %1023s %*[^\n]", dev, dir, type, opts) == 4) {
		if (!strcmp(type, "cgroup2") && !cg.v2[0])
			snprintf(cg.v2, sizeof(cg.v2), "%s", dir);
		for (int c = 0; c < CG_NCTRL && !strcmp(type, "cgroup"); c++)
			if (cg_has_option(opts, cg_names[c]) && !cg.v1[c][0])
				snprintf(cg.v1[c], sizeof(cg.v1[c]), "%s", dir);
		if (!strcmp(type, "cgroup") && cg_has_option(opts, "freezer") && !cg.freezer[0])
			snprintf(cg.freezer, sizeof(cg.freezer), "%s", dir);
	}
	fclose(f);
}

/* v2: a controller the hierarchy has is enabled from its root down to
 * sbxfs/, so that every sandbox cgroup gets its interface files. */
static void cg_enable_v2(void)
{
	struct buf have = BUF_INIT(4096);
	char path[PATH_MAX], dir[PATH_MAX], plus[32];

	if (str_fmt(path, sizeof(path), "%s/cgroup.controllers", cg.v2) || util_read_file(path, &have) ||
	    cg_dir(cg.v2, NULL, NULL, dir, sizeof(dir))) {
		buf_free(&have);
		return;
	}
	for (int c = 0; c < CG_NCTRL; c++) {
		char word[16];
		snprintf(word, sizeof(word), " %s ", cg_names[c]);
		struct buf padded = BUF_INIT(4200);
		if (buf_addf(&padded, " %s ", buf_str(&have)) || !strstr(buf_str(&padded), word)) {
			buf_free(&padded);
			continue;
		}
		buf_free(&padded);
		/* the root may already enable it (systemd does): errors are fine */
		snprintf(plus, sizeof(plus), "+%s", cg_names[c]);
		cg_write(cg.v2, "cgroup.subtree_control", plus);
		cg.v2ctrl[c] = !cg_write(dir, "cgroup.subtree_control", plus);
		if (!cg.v2ctrl[c])
			log_warn("cgroup", "cannot enable the %s controller in %s: %s", cg_names[c], dir, strerror(errno));
	}
	buf_free(&have);
}

/* Remove NAME/ and its job cgroups when nothing runs there. */
static void cg_remove_if_empty(const char *dir, bool v2)
{
	char sub[PATH_MAX];
	struct dirent *e;
	DIR *d;

	if (!cg_empty(dir, v2))
		return;
	if (v2 && (d = opendir(dir))) {
		while ((e = readdir(d)))
			if (e->d_type == DT_DIR && e->d_name[0] != '.' &&
			    !str_fmt(sub, sizeof(sub), "%s/%s", dir, e->d_name))
				cg_rmdir(sub);
		closedir(d);
	}
	cg_rmdir(dir);
}

/* At start: cgroups of this state_dir's sandboxes that have ended while no
 * daemon ran (a kill -9, keep_on_exit, a reboot of nothing but sbxfs) are
 * empty: remove them.  Live ones stay for adoption. */
static void cg_sweep(const char *mount, bool v2)
{
	char parent[PATH_MAX], dir[PATH_MAX];
	struct dirent *e;
	DIR *d;

	if (cg_dir(mount, NULL, NULL, parent, sizeof(parent)) || !(d = opendir(parent)))
		return;
	while ((e = readdir(d)))
		if (e->d_type == DT_DIR && !strncmp(e->d_name, cg.key, 8) && e->d_name[8] == '-' &&
		    !str_fmt(dir, sizeof(dir), "%s/%s", parent, e->d_name))
			cg_remove_if_empty(dir, v2);
	closedir(d);
}

void cgroup_init(const char *state_dir)
{
	char dir[PATH_MAX];

	memset(&cg, 0, sizeof(cg));
	if (names_sha256_hex(state_dir, cg.key, 8))
		snprintf(cg.key, sizeof(cg.key), "00000000");
	cg_find_mounts();
	if (!cg_dir(cg.v2, NULL, NULL, dir, sizeof(dir)) && mkdir(dir, 0755) && errno != EEXIST) {
		log_warn("cgroup", "cannot create %s: %s", dir, strerror(errno));
		cg.v2[0] = '\0';
	}
	if (cg.v2[0])
		cg_enable_v2();
	if (cg.v2[0])
		cg.freezer[0] = '\0'; /* v2's cgroup.freeze serves */
	if (!cg_dir(cg.freezer, NULL, NULL, dir, sizeof(dir)) && mkdir(dir, 0755) && errno != EEXIST) {
		log_warn("cgroup", "cannot create %s: %s", dir, strerror(errno));
		cg.freezer[0] = '\0';
	}
	if (!cg.v2[0] && !cg.freezer[0])
		log_warn("cgroup", "no cgroup v2 and no freezer controller: sandboxes cannot be frozen (no snapshots)");
	for (int c = 0; c < CG_NCTRL; c++) {
		if (!cg_dir(cg.v1[c], NULL, NULL, dir, sizeof(dir)) && mkdir(dir, 0755) && errno != EEXIST) {
			log_warn("cgroup", "cannot create %s: %s", dir, strerror(errno));
			cg.v1[c][0] = '\0';
		}
		if (!cg.v2ctrl[c] && !cg.v1[c][0])
			log_warn("cgroup", "no %s controller on this host: resources.%s is not enforced", cg_names[c],
				c == CG_CPU ? "cpus" : cg_names[c]);
	}
	if (!cg.v2[0])
		log_warn("cgroup", "no cgroup v2 hierarchy: jobs are signalled by process group");
	cg_sweep(cg.v2, true);
	for (int c = 0; c < CG_NCTRL; c++)
		cg_sweep(cg.v1[c], false);
	cg_sweep(cg.freezer, false);
	log_info("cgroup", "sandbox cgroups: %s/sbxfs/%s-<token>%s%s%s", cg.v2[0] ? cg.v2 : "(no v2)", cg.key,
		cg.v1[CG_MEMORY][0] ? ", memory v1" : "", cg.v1[CG_PIDS][0] ? ", pids v1" : "",
		cg.v1[CG_CPU][0] ? ", cpu v1" : "");
}

bool cgroup_has_v2(void)
{
	return cg.v2[0] != '\0';
}

/* ---- limits -------------------------------------------------------------------- */

static int cg_limits_v2(const char *dir, const struct cgroup_limits *lim)
{
	char text[64];

	if (cg.v2ctrl[CG_MEMORY]) {
		snprintf(text, sizeof(text), lim->memory ? "%llu" : "max", (unsigned long long)lim->memory);
		if (cg_write(dir, "memory.max", text))
			return -1;
		if (cg_write(dir, "memory.swap.max", "0") && errno != ENOENT)
			return -1;
	}
	if (cg.v2ctrl[CG_PIDS]) {
		snprintf(text, sizeof(text), lim->pids ? "%llu" : "max", (unsigned long long)lim->pids);
		if (cg_write(dir, "pids.max", text))
			return -1;
	}
	if (cg.v2ctrl[CG_CPU]) {
		if (lim->cpus > 0)
			snprintf(text, sizeof(text), "%llu %d", (unsigned long long)(lim->cpus * CG_PERIOD_US), CG_PERIOD_US);
		else
			snprintf(text, sizeof(text), "max %d", CG_PERIOD_US);
		if (cg_write(dir, "cpu.max", text))
			return -1;
	}
	return 0;
}

static int cg_limits_v1(int c, const char *dir, const struct cgroup_limits *lim)
{
	char text[64];

	switch (c) {
	case CG_MEMORY:
		snprintf(text, sizeof(text), lim->memory ? "%llu" : "-1", (unsigned long long)lim->memory);
		if (cg_write(dir, "memory.limit_in_bytes", text))
			return -1;
		/* memory + swap = memory: no swap.  Without swap accounting,
		 * swappiness 0 is the closest there is. */
		if (cg_write(dir, "memory.memsw.limit_in_bytes", text) && errno != ENOENT)
			return -1;
		if (errno == ENOENT)
			cg_write(dir, "memory.swappiness", "0");
		return 0;
	case CG_PIDS:
		snprintf(text, sizeof(text), lim->pids ? "%llu" : "max", (unsigned long long)lim->pids);
		return cg_write(dir, "pids.max", text);
	default:
		snprintf(text, sizeof(text), "%d", CG_PERIOD_US);
		if (cg_write(dir, "cpu.cfs_period_us", text))
			return -1;
		snprintf(text, sizeof(text), "%lld", lim->cpus > 0 ? (long long)(lim->cpus * CG_PERIOD_US) : -1LL);
		return cg_write(dir, "cpu.cfs_quota_us", text);
	}
}

static int cg_make(const char *dir)
{
	if (mkdir(dir, 0755) && errno != EEXIST) {
		log_err("cgroup", "cannot create %s: %s", dir, strerror(errno));
		return -1;
	}
	return 0;
}

enum sbx_err cgroup_sandbox_create(const char *token, const struct cgroup_limits *lim, struct cgroup_join *j)
{
	char dir[PATH_MAX];

	j->n = 0;
	if (!cg_dir(cg.v2, token, NULL, dir, sizeof(dir))) {
		if (cg_make(dir))
			return SBX_ERR_IO;
		if (cg_limits_v2(dir, lim)) {
			log_err("cgroup", "cannot set the limits of %s: %s", dir, strerror(errno));
			return SBX_ERR_IO;
		}
		cg_join_add(j, dir);
	}
	for (int c = 0; c < CG_NCTRL; c++) {
		if (cg_dir(cg.v1[c], token, NULL, dir, sizeof(dir)))
			continue;
		if (cg_make(dir))
			return SBX_ERR_IO;
		if (cg_limits_v1(c, dir, lim)) {
			log_err("cgroup", "cannot set the %s limit of %s: %s", cg_names[c], dir, strerror(errno));
			return SBX_ERR_IO;
		}
		cg_join_add(j, dir);
	}
	if (!cg_dir(cg.freezer, token, NULL, dir, sizeof(dir))) {
		if (cg_make(dir))
			return SBX_ERR_IO;
		cg_join_add(j, dir);
	}
	return SBX_OK;
}

bool cgroup_sandbox_exists(const char *token)
{
	char dir[PATH_MAX];

	if (!cg_dir(cg.v2, token, NULL, dir, sizeof(dir)))
		return access(dir, F_OK) == 0;
	for (int c = 0; c < CG_NCTRL; c++)
		if (!cg_dir(cg.v1[c], token, NULL, dir, sizeof(dir)))
			return access(dir, F_OK) == 0;
	return true;
}

/* ---- jobs ------------------------------------------------------------------------ */

enum sbx_err cgroup_job_create(const char *token, const char *job, struct buf *dir, struct cgroup_join *j)
{
	char path[PATH_MAX], sub[NAME_MAX_LEN + 8];

	j->n = 0;
	buf_reset(dir);
	if (str_fmt(sub, sizeof(sub), "job-%s", job))
		return SBX_ERR_INVAL;
	if (!cg_dir(cg.v2, token, sub, path, sizeof(path))) {
		if (cg_make(path) || buf_adds(dir, path))
			return SBX_ERR_IO;
		cg_join_add(j, path);
	}
	for (int c = 0; c < CG_NCTRL; c++)
		if (!cg_dir(cg.v1[c], token, NULL, path, sizeof(path)))
			cg_join_add(j, path);
	if (!cg_dir(cg.freezer, token, NULL, path, sizeof(path)))
		cg_join_add(j, path);
	return SBX_OK;
}

static enum sbx_err cg_kill_v1(const char *token, const pid_t *keep, int nkeep)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct buf procs = BUF_INIT(1 << 20);
	int c;

	for (c = 0; c < CG_NCTRL && cg_dir(cg.v1[c], token, NULL, dir, sizeof(dir)); c++)
		;
	if (c == CG_NCTRL || str_fmt(path, sizeof(path), "%s/cgroup.procs", dir))
		return SBX_ERR_NOTSUP;
	/* a few rounds: a process may fork while we read */
	for (int round = 0; round < 20; round++) {
		int killed = 0;
		if (util_read_file(path, &procs))
			break;
		for (char *p = procs.ptr; p && *p;) {
			pid_t pid = (pid_t)strtol(p, &p, 10);
			bool kept = false;
			for (int i = 0; i < nkeep; i++)
				kept |= keep[i] == pid;
			if (pid > 1 && !kept && !kill(pid, SIGKILL))
				killed++;
			while (*p == '\n')
				p++;
		}
		if (!killed)
			break;
		usleep(10000);
	}
	buf_free(&procs);
	return SBX_OK;
}

enum sbx_err cgroup_kill_jobs(const char *token, const pid_t *keep, int nkeep)
{
	char dir[PATH_MAX], sub[PATH_MAX];
	struct dirent *e;
	DIR *d;

	if (cg_dir(cg.v2, token, NULL, dir, sizeof(dir)))
		return cg_kill_v1(token, keep, nkeep);
	d = opendir(dir);
	if (!d)
		return SBX_ERR_GONE;
	while ((e = readdir(d)))
		if (e->d_type == DT_DIR && !strncmp(e->d_name, "job-", 4) &&
		    !str_fmt(sub, sizeof(sub), "%s/%s", dir, e->d_name) && cg_write(sub, "cgroup.kill", "1"))
			log_warn("cgroup", "cgroup.kill of %s: %s", sub, strerror(errno));
	closedir(d);
	return SBX_OK;
}

void cgroup_job_remove(const char *dir)
{
	if (!dir || !dir[0] || access(dir, F_OK))
		return;
	if (!cg_empty(dir, true) && cg_write(dir, "cgroup.kill", "1"))
		log_warn("cgroup", "cgroup.kill of %s: %s", dir, strerror(errno));
	if (!cg_wait_empty(dir, true, CG_WAIT_MS))
		log_warn("cgroup", "%s still has processes after cgroup.kill", dir);
	cg_rmdir(dir);
}

/* A cgroup that is already empty and has no children goes with one rmdir:
 * the common case, since the init's death ended the sandbox.  True when it
 * is gone (or never was); false when something is left to end first. */
static bool cg_rmdir_fast(const char *dir)
{
	return !rmdir(dir) || errno == ENOENT;
}

void cgroup_sandbox_destroy(const char *token)
{
	char dir[PATH_MAX], sub[PATH_MAX];
	struct dirent *e;
	DIR *d;

	if (!cg_dir(cg.v2, token, NULL, dir, sizeof(dir)) && !cg_rmdir_fast(dir)) {
		if (!cg_empty(dir, true) && cg_write(dir, "cgroup.kill", "1"))
			log_warn("cgroup", "cgroup.kill of %s: %s", dir, strerror(errno));
		if (!cg_wait_empty(dir, true, CG_WAIT_MS))
			log_warn("cgroup", "%s still has processes after cgroup.kill", dir);
		if ((d = opendir(dir))) {
			while ((e = readdir(d)))
				if (e->d_type == DT_DIR && e->d_name[0] != '.' &&
				    !str_fmt(sub, sizeof(sub), "%s/%s", dir, e->d_name))
					cg_rmdir(sub);
			closedir(d);
		}
		cg_rmdir(dir);
	}
	if (!cg_dir(cg.freezer, token, NULL, dir, sizeof(dir)) && !cg_rmdir_fast(dir)) {
		cg_write(dir, "freezer.state", "THAWED"); /* frozen processes die only once thawed */
		if (!cg_wait_empty(dir, false, CG_WAIT_MS))
			log_warn("cgroup", "%s still has processes", dir);
		cg_rmdir(dir);
	}
	for (int c = 0; c < CG_NCTRL; c++) {
		if (cg_dir(cg.v1[c], token, NULL, dir, sizeof(dir)) || cg_rmdir_fast(dir))
			continue;
		if (!cg_wait_empty(dir, false, CG_WAIT_MS))
			log_warn("cgroup", "%s still has processes", dir);
		cg_rmdir(dir);
	}
}

static struct {
	pthread_mutex_t lock;
	char (*tokens)[CG_TOKEN_MAX];
	size_t n, cap;
} cg_later = { .lock = PTHREAD_MUTEX_INITIALIZER };

void cgroup_sandbox_destroy_later(const char *token)
{
	bool kept = false;

	pthread_mutex_lock(&cg_later.lock);
	if (cg_later.n == cg_later.cap) {
		size_t cap = cg_later.cap ? 2 * cg_later.cap : 256;
		void *p = realloc(cg_later.tokens, cap * sizeof(*cg_later.tokens));
		if (p) {
			cg_later.tokens = p;
			cg_later.cap = cap;
		}
	}
	if (cg_later.n < cg_later.cap && strlen(token) < CG_TOKEN_MAX) {
		memcpy(cg_later.tokens[cg_later.n++], token, strlen(token) + 1);
		kept = true;
	}
	pthread_mutex_unlock(&cg_later.lock);
	if (!kept)
		cgroup_sandbox_destroy(token);
}

void cgroup_destroy_deferred(void)
{
	char (*tokens)[CG_TOKEN_MAX];
	size_t n;

	pthread_mutex_lock(&cg_later.lock);
	tokens = cg_later.tokens;
	n = cg_later.n;
	cg_later.tokens = NULL;
	cg_later.n = cg_later.cap = 0;
	pthread_mutex_unlock(&cg_later.lock);
	for (size_t i = 0; i < n; i++)
		cgroup_sandbox_destroy(tokens[i]);
	free(tokens);
}

/* ---- freezing -------------------------------------------------------------------- */

/* Does the file say frozen: v2's cgroup.events "frozen 1", v1's
 * freezer.state "FROZEN"? */
static bool cg_says_frozen(const char *dir, bool v2)
{
	struct buf b = BUF_INIT(4096);
	char path[PATH_MAX];
	bool frozen = false;

	if (!str_fmt(path, sizeof(path), "%s/%s", dir, v2 ? "cgroup.events" : "freezer.state") &&
	    !util_read_file(path, &b))
		frozen = v2 ? strstr(buf_str(&b), "frozen 1") != NULL : !strncmp(buf_str(&b), "FROZEN", 6);
	buf_free(&b);
	return frozen;
}

/* The sandbox's freezable cgroup: its v2 one, else its v1 freezer one. */
static int cg_freeze_dir(const char *token, char *dir, size_t len, bool *v2)
{
	*v2 = true;
	if (!cg_dir(cg.v2, token, NULL, dir, len) && !access(dir, F_OK))
		return 0;
	*v2 = false;
	if (!cg_dir(cg.freezer, token, NULL, dir, len) && !access(dir, F_OK))
		return 0;
	return -1;
}

enum sbx_err cgroup_sandbox_freeze(const char *token, bool on)
{
	char dir[PATH_MAX];
	uint64_t deadline;
	bool v2;

	if (cg_freeze_dir(token, dir, sizeof(dir), &v2)) {
		log_warn("cgroup", "sandbox %s has no cgroup to freeze", token);
		return SBX_ERR_NOTSUP;
	}
	if (cg_write(dir, v2 ? "cgroup.freeze" : "freezer.state", v2 ? (on ? "1" : "0") : (on ? "FROZEN" : "THAWED"))) {
		log_err("cgroup", "cannot %s %s: %s", on ? "freeze" : "thaw", dir, strerror(errno));
		return SBX_ERR_IO;
	}
	if (!on)
		return SBX_OK;
	/* frozen once every process has stopped (v2: cgroup.events) */
	for (deadline = util_now_ms() + CG_FREEZE_MS; !cg_says_frozen(dir, v2); usleep(1000))
		if (util_now_ms() >= deadline) {
			cg_write(dir, v2 ? "cgroup.freeze" : "freezer.state", v2 ? "0" : "THAWED");
			log_warn("cgroup", "%s did not freeze within %d ms (a process stuck in the kernel?): thawed",
				dir, CG_FREEZE_MS);
			return SBX_ERR_TIMEOUT;
		}
	return SBX_OK;
}

bool cgroup_sandbox_frozen(const char *token)
{
	char dir[PATH_MAX];
	bool v2;

	return !cg_freeze_dir(token, dir, sizeof(dir), &v2) && cg_says_frozen(dir, v2);
}

int cgroup_frozen_file(const char *token, struct buf *out)
{
	char dir[PATH_MAX];

	buf_reset(out);
	if (cg.v2[0] || cg_dir(cg.freezer, token, NULL, dir, sizeof(dir)))
		return 0; /* a job's supervisor reads its own cgroup's cgroup.events */
	return buf_addf(out, "%s/freezer.state", dir);
}
