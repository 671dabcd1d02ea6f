/* SPDX-License-Identifier: MIT */
/*
 * udir.c - root's careful hands for sandbox-writable directories (udir.h).
 *
 * Why not util_rm_rf() or util_write_atomic() there: both take paths, and a
 * path through a directory the sandbox can rename is a race the sandbox can
 * win (swap a directory for a symlink between a check and the unlink, and
 * root removes a host file).  Here every step is an *at() call on an fd that
 * was opened with O_NOFOLLOW, so a swap can only make a step fail.
 */
#define _GNU_SOURCE
#include "udir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#define UDIR_MAX_DEPTH 64

static int udir_fail(int fd, int err)
{
	if (fd >= 0)
		close(fd);
	errno = err;
	return -1;
}

static int udir_check_dir(int fd)
{
	struct stat st;

	if (fd < 0)
		return -1;
	if (fstat(fd, &st))
		return udir_fail(fd, errno);
	if (!S_ISDIR(st.st_mode))
		return udir_fail(fd, ENOTDIR);
	return fd;
}

int udir_open(const char *path)
{
	return udir_check_dir(open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

int udir_openat(int dfd, const char *name)
{
	return udir_check_dir(openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
}

int udir_mkdir(int dfd, const char *name, mode_t mode, uid_t uid, gid_t gid)
{
	int fd;

	if (mkdirat(dfd, name, mode))
		return -1;
	fd = udir_openat(dfd, name);
	if (fd < 0)
		return -1;
	/* fchmod too: the umask must not narrow what the sandbox may do */
	if (fchown(fd, uid, gid) || fchmod(fd, mode))
		return udir_fail(fd, errno);
	return fd;
}

int udir_create(int dfd, const char *name, mode_t mode, uid_t uid, gid_t gid)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);

	if (fd < 0)
		return -1;
	if (fchown(fd, uid, gid) || fchmod(fd, mode))
		return udir_fail(fd, errno);
	return fd;
}

int udir_open_file(int dfd, const char *name, struct stat *st)
{
	struct stat tmp;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

	if (!st)
		st = &tmp;
	if (fd < 0)
		return -1;
	if (fstat(fd, st))
		return udir_fail(fd, errno);
	if (!S_ISREG(st->st_mode))
		return udir_fail(fd, EINVAL);
	return fd;
}

int udir_read(int dfd, const char *name, struct buf *b)
{
	char chunk[8192];
	struct stat st;
	int fd = udir_open_file(dfd, name, &st), saved;
	ssize_t n;

	if (fd < 0)
		return -1;
	if ((size_t)st.st_size > b->max)
		return udir_fail(fd, E2BIG);
	buf_reset(b);
	while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || buf_add(b, chunk, (size_t)n))
			break;
	}
	saved = errno;
	close(fd);
	errno = saved;
	return n == 0 ? 0 : -1;
}

int udir_write(int dfd, const char *name, const void *data, size_t len, mode_t mode, uid_t uid, gid_t gid)
{
	const char *p = data;
	int fd = udir_create(dfd, name, mode, uid, gid);

	if (fd < 0)
		return -1;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			unlinkat(dfd, name, 0);
			return udir_fail(fd, w < 0 ? errno : EIO);
		}
		p += w;
		len -= (size_t)w;
	}
	if (close(fd)) {
		unlinkat(dfd, name, 0);
		return -1;
	}
	return 0;
}

int udir_copy(int dfd, const char *name, int src, mode_t mode, uid_t uid, gid_t gid)
{
	struct stat st;
	off_t off = 0;
	int fd;

	if (fstat(src, &st))
		return -1;
	fd = udir_create(dfd, name, mode, uid, gid);
	if (fd < 0)
		return -1;
	while (off < st.st_size) {
		ssize_t n = sendfile(fd, src, &off, (size_t)(st.st_size - off));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			unlinkat(dfd, name, 0);
			return udir_fail(fd, n < 0 ? errno : EIO);
		}
	}
	return close(fd);
}

static int udir_remove_depth(int dfd, const char *name, int depth)
{
	struct dirent *e;
	DIR *d;
	int fd, r = 0;

	if (!unlinkat(dfd, name, 0) || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM) /* EPERM: Linux's answer for unlink of a directory */
		return -1;
	if (depth >= UDIR_MAX_DEPTH) {
		errno = ELOOP;
		return -1;
	}
	fd = udir_openat(dfd, name);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	d = fdopendir(fd);
	if (!d)
		return udir_fail(fd, errno);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (udir_remove_depth(dirfd(d), e->d_name, depth + 1))
			r = -1;
	}
	closedir(d);
	if (unlinkat(dfd, name, AT_REMOVEDIR) && errno != ENOENT)
		r = -1;
	return r;
}

int udir_remove(int dfd, const char *name)
{
	return udir_remove_depth(dfd, name, 0);
}

static int udir_chown_depth(int dfd, uid_t from, uid_t uid, gid_t gid, int depth)
{
	struct stat st;
	struct dirent *e;
	DIR *d;
	int fd, r = 0;

	if (fstat(dfd, &st))
		return -1;
	if (st.st_uid == from && fchown(dfd, uid, gid))
		return -1;
	if (depth >= UDIR_MAX_DEPTH) {
		errno = ELOOP;
		return -1;
	}
	fd = dup(dfd);
	if (fd < 0)
		return -1;
	d = fdopendir(fd);
	if (!d)
		return udir_fail(fd, errno);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			if (errno != ENOENT)
				r = -1;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			int sub = udir_openat(dirfd(d), e->d_name);

			if (sub < 0 || udir_chown_depth(sub, from, uid, gid, depth + 1))
				r = -1;
			if (sub >= 0)
				close(sub);
		} else if (st.st_uid == from && fchownat(dirfd(d), e->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) &&
			   errno != ENOENT) {
			r = -1;
		}
	}
	closedir(d);
	return r;
}

int udir_chown_tree(int dfd, uid_t from, uid_t uid, gid_t gid)
{
	return udir_chown_depth(dfd, from, uid, gid, 0);
}

/* ---- giving a tree to a uid ------------------------------------------------------------ */

#define UDIR_GIVE_MAX_DEPTH 128

struct give {
	uid_t uid;
	gid_t gid;
	dev_t dev;
	int err; /* the first failure */
	struct udir_give_stats *st;
};

static void give_fail(struct give *g)
{
	if (!g->err)
		g->err = errno ? errno : EIO;
}

/* fd is open on the object st describes: change it, unless it was swapped. */
static void give_fd(struct give *g, int fd, const struct stat *st, mode_t keep)
{
	struct stat now;

	if (fstat(fd, &now) || now.st_ino != st->st_ino || now.st_dev != st->st_dev)
		return; /* replaced between the look and the open: not ours to change */
	if (fchown(fd, g->uid, g->gid) || fchmod(fd, now.st_mode & keep & ~(mode_t)(S_IWGRP | S_IWOTH))) {
		give_fail(g);
		return;
	}
	g->st->given++;
}

static void give_depth(struct give *g, int dfd, const char *name, int depth)
{
	struct dirent *e;
	struct stat st;
	DIR *d;
	int fd;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW)) {
		if (errno != ENOENT)
			give_fail(g);
		return;
	}
	if (st.st_dev != g->dev) {
		g->st->foreign++;
		return;
	}
	if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
		g->st->devices++;
		return;
	}
	if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
		g->st->linked++;
		return;
	}
	if (S_ISREG(st.st_mode)) {
		/* O_NONBLOCK: a lease never makes root wait; O_NOATIME: a look
		 * changes nothing else */
		fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOATIME | O_NOCTTY | O_CLOEXEC);
		if (fd < 0) {
			if (errno != ENOENT && errno != ELOOP)
				give_fail(g);
			return;
		}
		give_fd(g, fd, &st, 0777); /* chown dropped set-id bits: keep them dropped */
		close(fd);
		return;
	}
	if (!S_ISDIR(st.st_mode)) { /* symlink, FIFO, socket: never opened */
		if (fchownat(dfd, name, g->uid, g->gid, AT_SYMLINK_NOFOLLOW))
			give_fail(g);
		else
			g->st->given++;
		return;
	}
	fd = udir_openat(dfd, name);
	if (fd < 0) {
		if (errno != ENOENT && errno != ELOOP && errno != ENOTDIR)
			give_fail(g);
		return;
	}
	give_fd(g, fd, &st, S_ISGID | S_ISVTX | 0777);
	if (depth >= UDIR_GIVE_MAX_DEPTH) {
		errno = ELOOP;
		give_fail(g);
		close(fd);
		return;
	}
	d = fdopendir(fd);
	if (!d) {
		give_fail(g);
		close(fd);
		return;
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			give_depth(g, dirfd(d), e->d_name, depth + 1);
	closedir(d);
}

int udir_give(int dfd, const char *name, uid_t uid, gid_t gid, struct udir_give_stats *st)
{
	struct give g = { .uid = uid, .gid = gid, .st = st };
	struct stat top;

	memset(st, 0, sizeof(*st));
	if (fstatat(dfd, name, &top, AT_SYMLINK_NOFOLLOW))
		return -1;
	g.dev = top.st_dev;
	give_depth(&g, dfd, name, 0);
	if (g.err) {
		errno = g.err;
		return -1;
	}
	return 0;
}
