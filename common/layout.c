/* SPDX-License-Identifier: MIT */
/*
 * layout.c - the one place that knows how a state_dir is laid out (see
 * layout.h), so the pool, the providers and the FUSE layer never spell a
 * path of their own.
 */
#define _GNU_SOURCE
#include "layout.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "udir.h"
#include "util.h"

static const char *layout_names[LAYOUT_DIR_COUNT] = { "user-data/workspace", "user-data/uploads",
	"user-data/outputs", "skills", "jobs", "snapshots" };
static const char *layout_sandbox[LAYOUT_DIR_COUNT] = { "/mnt/user-data/workspace", "/mnt/user-data/uploads",
	"/mnt/user-data/outputs", NULL, NULL, NULL };

int layout_users_dir(struct buf *b, const char *state_dir)
{
	return buf_addf(b, "%s/users", state_dir);
}

int layout_user_dir(struct buf *b, const char *state_dir, const char *user)
{
	return buf_addf(b, "%s/users/%s", state_dir, user);
}

int layout_threads_dir(struct buf *b, const char *state_dir, const char *user)
{
	return buf_addf(b, "%s/users/%s/threads", state_dir, user);
}

int layout_thread_dir(struct buf *b, const char *state_dir, const char *user, const char *thread)
{
	return buf_addf(b, "%s/users/%s/threads/%s", state_dir, user, thread);
}

int layout_dir(struct buf *b, const char *thread_dir, enum layout_dir d)
{
	return buf_addf(b, "%s/%s", thread_dir, layout_names[d]);
}

int layout_file(struct buf *b, const char *thread_dir, const char *name)
{
	return buf_addf(b, "%s/%s", thread_dir, name);
}

const char *layout_sandbox_path(enum layout_dir d)
{
	return (unsigned)d < LAYOUT_DIR_COUNT ? layout_sandbox[d] : NULL;
}

/* A data directory that exists and is not uid:gid's was made by someone
 * else: files carried over from DeerFlow (its base dir as state_dir, or
 * `sbxfs --import-deerflow`), or a thread whose uid changed (users:).
 * The sandbox's uid is given the whole tree, so its jobs can change every
 * file and the mount shows them as the user's (DESIGN §5: no permission
 * mismatch).  Every step is an *at() call on a directory opened without
 * following a symlink: thread_dir/user-data/<d> must be real directories
 * (a symlink there is refused: it would bind a host path into the sandbox). */
static int layout_take_over(const char *thread_dir, enum layout_dir d, uid_t uid, gid_t gid)
{
	const char *rel = layout_names[d], *slash = strchr(rel, '/');
	struct udir_give_stats gs;
	int tfd = -1, pfd = -1, r = -1;
	char parent[32];
	struct stat st;

	tfd = udir_open(thread_dir);
	if (tfd < 0)
		goto out;
	if (slash) { /* user-data/<d> */
		snprintf(parent, sizeof(parent), "%.*s", (int)(slash - rel), rel);
		pfd = udir_openat(tfd, parent);
		rel = slash + 1;
	} else {
		pfd = dup(tfd);
	}
	if (pfd < 0) {
		r = errno == ENOENT ? 0 : -1; /* no user-data yet: made below */
		goto out;
	}
	if (fstatat(pfd, rel, &st, AT_SYMLINK_NOFOLLOW)) {
		r = errno == ENOENT ? 0 : -1; /* made below */
		goto out;
	}
	if (!S_ISDIR(st.st_mode)) {
		log_err("layout", "%s/%s is not a directory (a symlink?): refused", thread_dir, layout_names[d]);
		errno = ENOTDIR;
		goto out;
	}
	if (st.st_uid == uid && st.st_gid == gid) {
		r = 0;
		goto out;
	}
	r = udir_give(pfd, rel, uid, gid, &gs);
	/* the top alone (a directory this daemon just made as root) is routine */
	if (r || gs.given > 1 || gs.linked || gs.devices || gs.foreign)
		log_info("layout", "%s/%s was uid %u's: gave %lu entries to uid %u (left as they were: %lu with several "
			   "links, %lu devices, %lu on other file systems)%s%s",
		thread_dir, layout_names[d], (unsigned)st.st_uid, gs.given, (unsigned)uid, gs.linked, gs.devices,
		gs.foreign, r ? ": " : "", r ? strerror(errno) : "");
out:
	if (pfd >= 0)
		close(pfd);
	if (tfd >= 0)
		close(tfd);
	return r;
}

/* fd (a directory of the thread's own, above its data) belongs to root and
 * only root writes it, as in a state_dir sbxfs made: the daemon's helpers
 * (pasta, the job supervisors) write there without CAP_DAC_OVERRIDE, and
 * nobody else may plant anything.  A DeerFlow base dir as state_dir has
 * them as DeerFlow's user, mode 0777 or 0755. */
static int layout_own_dir(int fd, const char *path, mode_t mode)
{
	struct stat st;

	if (fstat(fd, &st))
		return -1;
	if (st.st_uid == 0 && st.st_gid == 0 && (st.st_mode & 07777) == mode)
		return 0;
	log_info("layout", "%s was uid %u's, mode %04o: now root's, %04o", path, (unsigned)st.st_uid,
		(unsigned)(st.st_mode & 07777), (unsigned)mode);
	return fchown(fd, 0, 0) || fchmod(fd, mode) ? -1 : 0;
}

/* The thread's directory and its user-data: root's, 0700 and 0755. */
static int layout_own_thread_dir(const char *thread_dir)
{
	int tfd = udir_open(thread_dir), ufd = -1, r = -1;

	if (tfd < 0 || layout_own_dir(tfd, thread_dir, 0700))
		goto out;
	ufd = udir_openat(tfd, "user-data");
	if (ufd < 0) {
		r = errno == ENOENT ? 0 : -1;
		goto out;
	}
	r = layout_own_dir(ufd, "user-data", 0755);
out:
	if (ufd >= 0)
		close(ufd);
	if (tfd >= 0)
		close(tfd);
	return r;
}

int layout_make_data_dirs(const char *thread_dir, uid_t uid, gid_t gid)
{
	static const enum layout_dir dirs[] = { LAYOUT_WORKSPACE, LAYOUT_UPLOADS, LAYOUT_OUTPUTS, LAYOUT_SKILLS };
	int r = layout_own_thread_dir(thread_dir);

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]) && !r; i++) {
		struct buf p = BUF_INIT(BUF_CAP_PATH);

		r = layout_dir(&p, thread_dir, dirs[i]) || layout_take_over(thread_dir, dirs[i], uid, gid) ||
				    util_mkdir_p(p.ptr, 0755) || chown(p.ptr, uid, gid)
			? -1
			: 0;
		buf_free(&p);
	}
	return r;
}

/* ---- the start-up sweep ---------------------------------------------------------- */

/* Delete the atomic-write leftovers directly in dfd; with each_dir, call it
 * for every subdirectory too (one level).  Consumes dfd. */
static unsigned layout_sweep_fd(int dfd, unsigned (*each_dir)(int dfd))
{
	DIR *d = fdopendir(dfd);
	struct dirent *e;
	unsigned n = 0;

	if (!d) {
		close(dfd);
		return 0;
	}
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
			continue;
		if (e->d_type == DT_REG && util_is_atomic_tmp(e->d_name)) {
			if (!unlinkat(dirfd(d), e->d_name, 0))
				n++;
		} else if (e->d_type == DT_DIR && each_dir) {
			int sub = udir_openat(dirfd(d), e->d_name);
			if (sub >= 0)
				n += each_dir(sub);
		}
	}
	closedir(d);
	return n;
}

static unsigned layout_sweep_job(int dfd)
{
	return layout_sweep_fd(dfd, NULL);
}

static unsigned layout_sweep_thread(int dfd)
{
	int jfd = udir_openat(dfd, "jobs");
	unsigned n = jfd >= 0 ? layout_sweep_fd(jfd, layout_sweep_job) : 0;

	return n + layout_sweep_fd(dfd, NULL);
}

static unsigned layout_sweep_user(int dfd)
{
	int tfd = udir_openat(dfd, "threads");

	close(dfd);
	return tfd >= 0 ? layout_sweep_fd(tfd, layout_sweep_thread) : 0;
}

unsigned layout_sweep_tmp(const char *state_dir)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	unsigned n = 0;
	int fd;

	fd = udir_open(state_dir);
	if (fd >= 0)
		n += layout_sweep_fd(fd, NULL);
	if (!layout_users_dir(&p, state_dir) && (fd = udir_open(p.ptr)) >= 0)
		n += layout_sweep_fd(fd, layout_sweep_user);
	buf_free(&p);
	if (n)
		log_info("daemon", "deleted %u half-written state file%s a killed sbxfs left", n, n == 1 ? "" : "s");
	return n;
}
