/* SPDX-License-Identifier: MIT */
/*
 * import.c - `sbxfs --import-deerflow DIR`: DeerFlow threads' files moved
 * into state_dir, once, while no daemon serves it (main holds the state_dir
 * lock).
 *
 * DeerFlow keeps a thread's files at
 * DIR/users/<user>/threads/<thread>/user-data/{workspace,uploads,outputs}
 * (the semantics reference §5.5, §6.2), the layout of a state_dir
 * (common/layout.h).  Each of these directories is moved: rename(2) when
 * DIR and state_dir are one file system (nothing is copied: inodes, hard
 * links inside the tree and times stay), else copied (directories, regular
 * files, symlinks as they are; modes and times kept) and the source removed
 * once the copy is whole.  Ownership is not changed here: the thread's first
 * acquire gives the tree to its sandbox's uid (layout_make_data_dirs), with
 * whatever provider, users: mapping and uid range apply then.
 *
 * Left alone, each with a line saying why: a data directory that exists in
 * state_dir with something in it (never merged), a thread whose data is
 * mounted somewhere (a DeerFlow sandbox container of that thread still runs,
 * and would go on writing into the moved directory: drain DeerFlow first),
 * a symlink where a directory should be, names sbxfs does not allow, and
 * what is DeerFlow's own (acp-workspace, skills_view, memory, agents,
 * locks).  DeerFlow's containers are never touched: no Docker call is made.
 *
 * The walk is root's over a tree other programs wrote: every step is an
 * *at() call on a directory opened without following a symlink (udir.h).
 */
#define _GNU_SOURCE
#include "import.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../common/layout.h"
#include "../common/names.h"
#include "../common/udir.h"
#include "../common/util.h"

#define IMPORT_COPY_MAX_DEPTH 128
#define IMPORT_CHUNK (1 << 20)

static const char *const import_dirs[] = { "workspace", "uploads", "outputs" };

struct import {
	const struct sbx_config *cfg;
	char base_real[PATH_MAX];  /* DeerFlow's base dir, resolved */
	char state_real[PATH_MAX];
	int threads, moved, left;
};

/* ---- is it mounted somewhere? -------------------------------------------------------------- */

/* One field of a mountinfo line, its octal escapes (\040) decoded. */
static void mi_field(const char *s, size_t n, char *out, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < n && o + 1 < len; i++) {
		if (s[i] == '\\' && i + 3 < n && s[i + 1] >= '0' && s[i + 1] <= '3') {
			out[o++] = (char)((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
			i += 3;
		} else {
			out[o++] = s[i];
		}
	}
	out[o] = '\0';
}

/* Fields 3 (major:minor), 4 (root) and 5 (mount point) of a mountinfo line. */
static bool mi_parse(const char *line, unsigned *maj, unsigned *min, char *root, char *mp, size_t len)
{
	const char *f[6];
	int n = 0;

	f[n++] = line;
	for (const char *p = line; *p && n < 6; p++)
		if (*p == ' ')
			f[n++] = p + 1;
	if (n < 6 || sscanf(f[2], "%u:%u", maj, min) != 2)
		return false;
	mi_field(f[3], (size_t)(f[4] - f[3] - 1), root, len);
	mi_field(f[4], (size_t)(f[5] - f[4] - 1), mp, len);
	return true;
}

static bool path_under(const char *p, const char *top)
{
	size_t n = strlen(top);

	return !strncmp(p, top, n) && (p[n] == '\0' || p[n] == '/' || (n == 1 && top[0] == '/'));
}

/* real (a directory on device dev, resolved) as a path inside its file
 * system: the root of the mount it is reached through, joined with the rest. */
static int fs_relative(const char *real, dev_t dev, char *out, size_t len)
{
	char line[2 * PATH_MAX], root[PATH_MAX], mp[PATH_MAX];
	size_t best = 0;
	unsigned maj, min;
	bool found = false;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!mi_parse(line, &maj, &min, root, mp, sizeof(root)) || makedev(maj, min) != dev ||
		    !path_under(real, mp) || (found && strlen(mp) < best))
			continue;
		best = strlen(mp);
		found = true;
		/* the mount shows root (of its file system) at mp: real is
		 * root + what follows mp */
		if (str_fmt(out, len, "%s%s", strcmp(root, "/") ? root : "", best == 1 ? real : real + best))
			found = false; /* too long to tell: the caller leaves the thread */
		if (!out[0])
			snprintf(out, len, "/");
	}
	fclose(f);
	return found ? 0 : -1;
}

/* The pid of a process in whose mount namespace a mount's root is rel (on
 * device dev) or lies under it: something bind-mounted the thread's data
 * (DeerFlow's sandbox container does).  0 when nothing does. */
static pid_t import_mounted_by(dev_t dev, const char *rel)
{
	char path[300], line[2 * PATH_MAX], root[PATH_MAX], mp[PATH_MAX];
	ino_t seen[512];
	size_t nseen = 0;
	pid_t who = 0;
	struct dirent *e;
	DIR *d = opendir("/proc");

	if (!d)
		return 0;
	while (!who && (e = readdir(d))) {
		unsigned maj, min;
		struct stat ns;
		bool dup = false;
		FILE *f;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		if (str_fmt(path, sizeof(path), "/proc/%s/ns/mnt", e->d_name) || stat(path, &ns))
			continue;
		for (size_t i = 0; i < nseen && !dup; i++)
			dup = seen[i] == ns.st_ino;
		if (dup)
			continue;
		if (nseen < sizeof(seen) / sizeof(seen[0]))
			seen[nseen++] = ns.st_ino;
		if (str_fmt(path, sizeof(path), "/proc/%s/mountinfo", e->d_name) || !(f = fopen(path, "re")))
			continue;
		while (fgets(line, sizeof(line), f))
			if (mi_parse(line, &maj, &min, root, mp, sizeof(root)) && makedev(maj, min) == dev &&
			    path_under(root, rel)) {
				who = (pid_t)strtol(e->d_name, NULL, 10);
				break;
			}
		fclose(f);
	}
	closedir(d);
	return who;
}

/* ---- copying across file systems ------------------------------------------------------------ */

static int copy_tree(int sfd, int dfd, const char *name, int depth, unsigned long *skipped);

static int copy_file(int sfd, int dfd, const char *name, const struct stat *st)
{
	struct timespec times[2] = { st->st_atim, st->st_mtim };
	int in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOATIME | O_CLOEXEC), out = -1, r = -1;
	struct stat now;
	char *chunk = NULL;

	if (in < 0 || fstat(in, &now) || !S_ISREG(now.st_mode) || now.st_ino != st->st_ino)
		goto out;
	out = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0 || !(chunk = malloc(IMPORT_CHUNK)))
		goto out;
	for (;;) {
		ssize_t n = read(in, chunk, IMPORT_CHUNK), w = 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n == 0 ? 0 : -1;
			break;
		}
		while (w < n) {
			ssize_t k = write(out, chunk + w, (size_t)(n - w));
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0)
				goto out;
			w += k;
		}
	}
	if (!r && (fchmod(out, now.st_mode & 07777) || futimens(out, times)))
		r = -1;
out:
	free(chunk);
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out))
		r = -1;
	return r;
}

/* name of directory sfd (checked: a directory, st) into a new name of dfd. */
static int copy_dir(int sfd, int dfd, const char *name, const struct stat *st, int depth, unsigned long *skipped)
{
	struct timespec times[2] = { st->st_atim, st->st_mtim };
	int from = -1, to = -1, r = -1;
	struct dirent *e;
	DIR *d = NULL;

	if (depth >= IMPORT_COPY_MAX_DEPTH) {
		errno = ELOOP;
		return -1;
	}
	if (mkdirat(dfd, name, 0700) || (to = udir_openat(dfd, name)) < 0 || (from = udir_openat(sfd, name)) < 0 ||
	    !(d = fdopendir(from)))
		goto out;
	from = -1; /* d owns it */
	r = 0;
	while (!r && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			r = copy_tree(dirfd(d), to, e->d_name, depth + 1, skipped);
	if (!r && (fchmod(to, st->st_mode & 07777) || futimens(to, times)))
		r = -1;
out:
	if (d)
		closedir(d);
	if (from >= 0)
		close(from);
	if (to >= 0)
		close(to);
	return r;
}

/* One entry: directories, regular files and symlinks are copied as they
 * are; FIFOs, sockets and devices are not (*skipped counts them). */
static int copy_tree(int sfd, int dfd, const char *name, int depth, unsigned long *skipped)
{
	struct stat st;
	char target[PATH_MAX];
	ssize_t n;

	if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW))
		return -1;
	if (S_ISDIR(st.st_mode))
		return copy_dir(sfd, dfd, name, &st, depth, skipped);
	if (S_ISREG(st.st_mode))
		return copy_file(sfd, dfd, name, &st);
	if (S_ISLNK(st.st_mode)) {
		n = readlinkat(sfd, name, target, sizeof(target) - 1);
		if (n < 0)
			return -1;
		target[n] = '\0';
		return symlinkat(target, dfd, name);
	}
	(*skipped)++;
	return 0;
}

/* ---- one thread ------------------------------------------------------------------------------ */

/* Is directory name of dfd empty (or missing)?  -1 on error. */
static int dir_empty(int dfd, const char *name)
{
	struct dirent *e;
	int fd = udir_openat(dfd, name), empty = 1;
	DIR *d;

	if (fd < 0)
		return errno == ENOENT ? 1 : -1;
	if (!(d = fdopendir(fd))) {
		close(fd);
		return -1;
	}
	while (empty && (e = readdir(d)))
		empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
	closedir(d);
	return empty;
}

/* Move one data directory (name of src, a user-data directory) to dst (the
 * thread's user-data in state_dir).  A line says what happened. */
static int import_dir(struct import *im, const char *scope, int src, int dst, const char *name, char *what,
	size_t wlen)
{
	struct stat s, t;
	unsigned long skipped = 0;
	int empty;

	if (fstatat(src, name, &s, AT_SYMLINK_NOFOLLOW))
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(s.st_mode)) {
		fprintf(stderr, "sbxfs: import: %s: user-data/%s is not a directory (a symlink?): left\n", scope, name);
		im->left++;
		return 0;
	}
	empty = dir_empty(dst, name);
	if (empty < 0)
		return -1;
	if (!empty) {
		fprintf(stderr, "sbxfs: import: %s: %s already has files in state_dir: left (never merged)\n", scope,
			name);
		im->left++;
		return 0;
	}
	if (unlinkat(dst, name, AT_REMOVEDIR) && errno != ENOENT)
		return -1;
	if (fstat(dst, &t))
		return -1;
	if (s.st_dev == t.st_dev) {
		if (renameat(src, name, dst, name))
			return -1;
		snprintf(what + strlen(what), wlen - strlen(what), "%s%s moved", what[0] ? ", " : "", name);
	} else {
		if (copy_tree(src, dst, name, 0, &skipped)) {
			int err = errno;
			udir_remove(dst, name); /* a partial copy never stays */
			errno = err;
			return -1;
		}
		if (udir_remove(src, name))
			fprintf(stderr, "sbxfs: import: %s: %s copied, but removing DeerFlow's copy failed: %s\n", scope,
				name, strerror(errno));
		snprintf(what + strlen(what), wlen - strlen(what), "%s%s copied%s", what[0] ? ", " : "", name,
			skipped ? " (FIFOs, sockets and devices left out)" : "");
	}
	im->moved++;
	return 0;
}

static void import_thread(struct import *im, int threads_fd, const char *user, const char *thread)
{
	struct buf tdir = BUF_INIT(BUF_CAP_PATH), udata = BUF_INIT(BUF_CAP_PATH);
	char scope[2 * NAME_MAX + 2], what[256] = "", rel[PATH_MAX], real[PATH_MAX];
	int tfd = -1, src = -1, dst = -1;
	struct stat st;
	pid_t who;

	snprintf(scope, sizeof(scope), "%s/%s", user, thread);
	if (!names_valid(thread)) {
		fprintf(stderr, "sbxfs: import: %s: not a thread name sbxfs allows (^[A-Za-z0-9_-]{1,64}$): left\n", scope);
		im->left++;
		goto out;
	}
	if ((tfd = udir_openat(threads_fd, thread)) < 0 || (src = udir_openat(tfd, "user-data")) < 0) {
		if (errno != ENOENT) {
			fprintf(stderr, "sbxfs: import: %s: user-data: %s: left\n", scope, strerror(errno));
			im->left++;
		}
		goto out;
	}
	im->threads++;
	/* a DeerFlow sandbox of this thread that still runs has user-data's
	 * directories bind-mounted: moving them would move them under it */
	if (str_fmt(real, sizeof(real), "%s/users/%s/threads/%s/user-data", im->base_real, user, thread) ||
	    fstat(src, &st) || fs_relative(real, st.st_dev, rel, sizeof(rel))) {
		fprintf(stderr, "sbxfs: import: %s: cannot tell whether its files are in use: left\n", scope);
		im->left++;
		goto out;
	}
	if ((who = import_mounted_by(st.st_dev, rel))) {
		fprintf(stderr, "sbxfs: import: %s: its files are mounted by pid %d (a DeerFlow sandbox still runs? "
				"drain DeerFlow first): left\n", scope, (int)who);
		im->left++;
		goto out;
	}
	if (layout_thread_dir(&tdir, im->cfg->state_dir, user, thread) || util_mkdir_p(tdir.ptr, 0700) ||
	    buf_addf(&udata, "%s/user-data", tdir.ptr) || (mkdir(udata.ptr, 0755) && errno != EEXIST) ||
	    (dst = udir_open(udata.ptr)) < 0) {
		fprintf(stderr, "sbxfs: import: %s: cannot make %s: %s: left\n", scope, tdir.ptr ? tdir.ptr : "?",
			strerror(errno));
		im->left++;
		goto out;
	}
	for (size_t i = 0; i < sizeof(import_dirs) / sizeof(import_dirs[0]); i++)
		if (import_dir(im, scope, src, dst, import_dirs[i], what, sizeof(what))) {
			fprintf(stderr, "sbxfs: import: %s: %s: %s: left\n", scope, import_dirs[i], strerror(errno));
			im->left++;
		}
	printf("%s: %s\n", scope, what[0] ? what : "nothing to import");
out:
	if (dst >= 0)
		close(dst);
	if (src >= 0)
		close(src);
	if (tfd >= 0)
		close(tfd);
	buf_free(&tdir);
	buf_free(&udata);
}

static void import_user(struct import *im, int users_fd, const char *user)
{
	int ufd = -1, tfd = -1;
	struct dirent *e;
	DIR *d = NULL;

	if (!names_valid(user)) {
		fprintf(stderr, "sbxfs: import: user %s: not a user name sbxfs allows (^[A-Za-z0-9_-]{1,64}$): left\n",
			user);
		im->left++;
		return;
	}
	if ((ufd = udir_openat(users_fd, user)) < 0 || (tfd = udir_openat(ufd, "threads")) < 0 ||
	    !(d = fdopendir(tfd))) {
		if (tfd >= 0)
			close(tfd);
		goto out;
	}
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			import_thread(im, dirfd(d), user, e->d_name);
	closedir(d);
out:
	if (ufd >= 0)
		close(ufd);
}

int import_deerflow(const struct sbx_config *cfg, const char *dir)
{
	struct import im = { .cfg = cfg };
	char real[PATH_MAX];
	int base = -1, users = -1;
	struct dirent *e;
	DIR *d;

	if (!realpath(dir, real) || (base = udir_open(real)) < 0) {
		fprintf(stderr, "sbxfs: import: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	snprintf(im.base_real, sizeof(im.base_real), "%s", real);
	if (!realpath(cfg->state_dir, im.state_real))
		snprintf(im.state_real, sizeof(im.state_real), "%s", cfg->state_dir);
	if (path_under(im.state_real, real) || path_under(real, im.state_real)) {
		fprintf(stderr, "sbxfs: import: %s and state_dir %s overlap: with state_dir pointed at DeerFlow's base "
				"dir there is nothing to import (a thread's files are taken over at its first acquire)\n",
			real, im.state_real);
		close(base);
		return 1;
	}
	if ((users = udir_openat(base, "users")) < 0 || !(d = fdopendir(users))) {
		fprintf(stderr, "sbxfs: import: %s/users: %s (is it DeerFlow's base dir, DEER_FLOW_HOME?)\n", real,
			strerror(errno));
		if (users >= 0)
			close(users);
		close(base);
		return 1;
	}
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			import_user(&im, dirfd(d), e->d_name);
	closedir(d);
	close(base);
	fprintf(stderr, "sbxfs: import: %d threads found in %s, %d directories moved into %s, %d left\n", im.threads,
		real, im.moved, cfg->state_dir, im.left);
	return im.left ? 1 : 0;
}
