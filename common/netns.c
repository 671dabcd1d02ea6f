/* SPDX-License-Identifier: MIT */
/*
 * netns.c - sockets made inside another network namespace (see netns.h).
 *
 * Why a thread per socket rather than setns() on the calling thread and
 * back: the caller may be a libcurl callback on a FUSE work thread; switching
 * that thread's namespace and restoring it is one failure away from leaving
 * a daemon thread in a container's namespace.  A helper thread that exits
 * after one socket() cannot leak its namespace anywhere; it costs a thread
 * start (tens of microseconds), small next to a connect.
 */
#define _GNU_SOURCE
#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

struct netns_job {
	int nsfd;
	int domain, type, protocol;
	int fd;  /* result */
	int err; /* errno of the failure */
};

static void *netns_thread(void *arg)
{
	struct netns_job *j = arg;

	if (setns(j->nsfd, CLONE_NEWNET)) {
		j->err = errno;
		return NULL;
	}
	j->fd = socket(j->domain, j->type | SOCK_CLOEXEC, j->protocol);
	if (j->fd < 0)
		j->err = errno;
	return NULL;
}

int netns_socket(int nsfd, int domain, int type, int protocol)
{
	struct netns_job j = { .nsfd = nsfd, .domain = domain, .type = type, .protocol = protocol, .fd = -1 };
	pthread_attr_t attr;
	pthread_t t;
	int err;

	if (nsfd < 0) {
		errno = EBADF;
		return -1;
	}
	/* a small stack: the thread only makes two system calls */
	if (pthread_attr_init(&attr))
		return -1;
	pthread_attr_setstacksize(&attr, 64 * 1024);
	err = pthread_create(&t, &attr, netns_thread, &j);
	pthread_attr_destroy(&attr);
	if (err) {
		errno = err;
		return -1;
	}
	pthread_join(t, NULL);
	if (j.fd < 0) {
		errno = j.err ? j.err : EIO;
		return -1;
	}
	return j.fd;
}

int netns_open_pid(pid_t pid, unsigned long long start)
{
	char path[64];
	int fd, saved;

	if (pid <= 0 || str_fmt(path, sizeof(path), "/proc/%d/ns/net", (int)pid)) {
		errno = ESRCH;
		return -1;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		saved = errno == ENOENT ? ESRCH : errno;
		errno = saved;
		return -1;
	}
	/* The same process still holds the pid after the open: the namespace
	 * is its own (a reused pid would show another start time). */
	if (util_proc_starttime(pid) != start) {
		close(fd);
		errno = ESRCH;
		return -1;
	}
	return fd;
}
