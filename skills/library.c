/* SPDX-License-Identifier: MIT */
/*
 * library.c - the optional skills.path library copied into every new
 * sandbox's skills/ (DESIGN §8).
 *
 * Always a copy, never a hard link (DeerFlow #4825: a sandbox that can
 * write through a projected hard link changes the canonical skill).  What
 * the library has overwrites the same path in skills/ (the library is the
 * source of its own skills); what the user added elsewhere stays.  Copies
 * belong to the sandbox's host uid, as everything under its data
 * directories.  Symlinks are copied only when relative and inside the tree
 * (the rule of manifest.h); anything else is skipped with a log line.
 * Every call is an *at() call with O_NOFOLLOW, on both sides.
 */
#define _GNU_SOURCE
#include "library.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../common/log.h"
#include "manifest.h"

#define LIBRARY_MAX_DEPTH 64

static int copy_file(int sfd, int dfd, const char *name, const struct stat *sst, uid_t uid, gid_t gid)
{
	struct stat dst;
	int in = -1, out = -1, r = -1;
	off_t left = sst->st_size;

	if (!fstatat(dfd, name, &dst, AT_SYMLINK_NOFOLLOW) && !S_ISREG(dst.st_mode)) {
		if (S_ISDIR(dst.st_mode)) {
			errno = EISDIR;
			return -1;
		}
		if (unlinkat(dfd, name, 0))
			return -1;
	}
	in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	out = in < 0 ? -1 : openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (in < 0 || out < 0)
		goto out;
	while (left > 0) {
		ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t)left, 0);
		if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL)) {
			char buf[65536];
			n = read(in, buf, sizeof(buf));
			if (n > 0 && write(out, buf, (size_t)n) != n)
				n = -1;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		left -= n;
	}
	if (left == 0 && !fchown(out, uid, gid) && !fchmod(out, sst->st_mode & 0777))
		r = 0;
out:
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return r;
}

static int copy_link(int sfd, int dfd, const char *name, const char *rel_dir, uid_t uid, gid_t gid)
{
	char target[4096];
	struct stat dst;
	ssize_t n = readlinkat(sfd, name, target, sizeof(target) - 1);

	if (n < 0)
		return -1;
	target[n] = '\0';
	if (!skills_link_inside(rel_dir, target)) {
		errno = EPERM;
		return -1;
	}
	if (!fstatat(dfd, name, &dst, AT_SYMLINK_NOFOLLOW) && !S_ISDIR(dst.st_mode) && unlinkat(dfd, name, 0))
		return -1;
	if (symlinkat(target, dfd, name))
		return -1;
	return fchownat(dfd, name, uid, gid, AT_SYMLINK_NOFOLLOW);
}

static void copy_tree(int sfd, int dfd, const char *rel, uid_t uid, gid_t gid, int depth, int *errors)
{
	DIR *dp;
	struct dirent *d;
	int fd = dup(sfd);

	if (fd < 0 || !(dp = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		(*errors)++;
		return;
	}
	while ((d = readdir(dp))) {
		struct buf path = BUF_INIT(BUF_CAP_PATH);
		struct stat st;
		int r = 0;

		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if (rel[0] ? buf_adds(&path, rel) || buf_addpath(&path, d->d_name) : buf_adds(&path, d->d_name)) {
			(*errors)++;
			continue;
		}
		if (fstatat(sfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			r = -1;
		} else if (S_ISDIR(st.st_mode)) {
			int s2 = -1, d2 = -1;
			if (depth >= LIBRARY_MAX_DEPTH) {
				errno = ELOOP;
				r = -1;
			} else if ((mkdirat(dfd, d->d_name, 0700) && errno != EEXIST) ||
				   (s2 = openat(sfd, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
				   (d2 = openat(dfd, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
				   fchown(d2, uid, gid) || fchmod(d2, st.st_mode & 0777)) {
				r = -1;
			} else {
				copy_tree(s2, d2, path.ptr, uid, gid, depth + 1, errors);
			}
			if (s2 >= 0)
				close(s2);
			if (d2 >= 0)
				close(d2);
		} else if (S_ISREG(st.st_mode)) {
			r = copy_file(sfd, dfd, d->d_name, &st, uid, gid);
		} else if (S_ISLNK(st.st_mode)) {
			r = copy_link(sfd, dfd, d->d_name, rel, uid, gid);
		} else {
			errno = EINVAL; /* FIFOs, sockets, devices: not skills */
			r = -1;
		}
		if (r) {
			log_warn("skills", "skills.path: %s not copied: %s", path.ptr, strerror(errno));
			(*errors)++;
		}
		buf_free(&path);
	}
	closedir(dp);
}

int skills_library_copy(const char *library, const char *dest, uid_t uid, gid_t gid)
{
	int sfd = open(library, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int dfd = open(dest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int errors = 0;

	if (sfd < 0 || dfd < 0) {
		log_warn("skills", "skills.path %s not copied into %s: %s", library, dest, strerror(errno));
		errors = 1;
	} else {
		copy_tree(sfd, dfd, "", uid, gid, 0, &errors);
	}
	if (sfd >= 0)
		close(sfd);
	if (dfd >= 0)
		close(dfd);
	return errors ? -1 : 0;
}
