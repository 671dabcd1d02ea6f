/* SPDX-License-Identifier: MIT */
/*
 * util.c - file and time helpers.  Kept tiny on purpose: anything with a
 * concept of its own belongs in its own module.
 */
#define _GNU_SOURCE
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int util_mkdir_p(const char *path, mode_t mode)
{
	char tmp[BUF_CAP_PATH];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(tmp)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	/* most calls find the parent there already: one mkdir */
	if (!mkdir(path, mode) || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return -1;
	memcpy(tmp, path, n + 1);
	/* back from the end to the deepest ancestor that is there (a new
	 * thread's data dirs are three mkdirs, not one per component of the
	 * state_dir's path), then forward from it */
	char *from = tmp, *end = tmp + n;
	for (;;) {
		char *s = memrchr(tmp, '/', (size_t)(end - tmp));
		if (!s || s == tmp)
			break;
		*s = '\0';
		int r = mkdir(tmp, mode);
		*s = '/';
		if (!r || errno == EEXIST) {
			from = s;
			break;
		}
		if (errno != ENOENT)
			return -1;
		end = s;
	}
	for (char *p = from + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, mode) && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(tmp, mode) && errno != EEXIST)
		return -1;
	return 0;
}

static int util_write_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int util_write_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
	struct buf tmp = BUF_INIT(BUF_CAP_PATH);
	int fd = -1, ret = -1, saved;

	if (buf_addf(&tmp, "%s.tmp.%d", path, (int)gettid()))
		goto out;
	fd = open(tmp.ptr, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		goto out;
	if (util_write_all(fd, data, len))
		goto out;
	if (close(fd)) {
		fd = -1;
		goto out;
	}
	fd = -1;
	if (rename(tmp.ptr, path))
		goto out;
	ret = 0;
out:
	saved = errno;
	if (fd >= 0)
		close(fd);
	if (ret && tmp.ptr)
		unlink(tmp.ptr);
	buf_free(&tmp);
	errno = saved;
	return ret;
}

int util_write_new(const char *path, const void *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode), saved;

	if (fd < 0)
		return errno == EEXIST ? util_write_atomic(path, data, len, mode) : -1;
	int r = util_write_all(fd, data, len);

	saved = errno;
	if (close(fd) && !r) {
		r = -1;
		saved = errno;
	}
	if (r) {
		unlink(path);
		errno = saved;
	}
	return r;
}

bool util_is_atomic_tmp(const char *name)
{
	const char *tmp = NULL, *p;

	for (p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp."))
		tmp = p;
	if (!tmp || tmp == name || !tmp[5])
		return false;
	for (p = tmp + 5; *p; p++)
		if (*p < '0' || *p > '9')
			return false;
	return true;
}

int util_read_file(const char *path, struct buf *b)
{
	char chunk[8192];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	buf_reset(b);
	while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (buf_add(b, chunk, (size_t)n)) {
			n = -1;
			break;
		}
	}
	int saved = errno;
	close(fd);
	errno = saved;
	return n < 0 ? -1 : 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) && errno != ENOENT ? -1 : 0;
	return unlink(path) && errno != ENOENT ? -1 : 0;
}

int util_rm_rf(const char *path)
{
	if (nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) && errno != ENOENT)
		return -1;
	return 0;
}

uint64_t util_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t util_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

double util_wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void util_iso8601(double t, char out[32])
{
	time_t s = (time_t)t;
	struct tm tm;

	gmtime_r(&s, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

uint64_t util_proc_starttime(pid_t pid)
{
	char path[64], data[1024], *p;
	struct buf b = BUF_INIT(sizeof(data));
	unsigned long long start = 0;
	char state;

	if (pid <= 0 || str_fmt(path, sizeof(path), "/proc/%d/stat", (int)pid))
		return 0;
	if (util_read_file(path, &b)) {
		buf_free(&b);
		return 0;
	}
	/* The command name may hold spaces and parentheses: parse after the last ')'. */
	p = strrchr(buf_str(&b), ')');
	if (p && sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
			&state, &start) == 2 && state != 'Z' && state != 'X') {
		buf_free(&b);
		return start;
	}
	buf_free(&b);
	return 0;
}

long util_proc_uid(pid_t pid)
{
	struct buf b = BUF_INIT(8192);
	char path[64];
	const char *u;
	long uid = -1;

	if (!str_fmt(path, sizeof(path), "/proc/%d/status", (int)pid) && !util_read_file(path, &b) && b.len &&
	    (u = strstr(buf_str(&b), "\nUid:")))
		uid = strtol(u + 5, NULL, 10);
	buf_free(&b);
	return uid;
}

unsigned long long util_ns_inode(pid_t pid, const char *ns)
{
	char path[64];
	struct stat st;

	if (str_fmt(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, ns) || stat(path, &st))
		return 0;
	return (unsigned long long)st.st_ino;
}
