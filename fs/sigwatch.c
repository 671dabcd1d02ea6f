/* SPDX-License-Identifier: MIT */
/*
 * sigwatch.c - interrupts for parked requests that came over io_uring: a
 * thread that polls the watched requesters' pending signals (sigwatch.h
 * says why).
 *
 * Why polling: nothing tells another process that a thread has a signal
 * pending (a pidfd says when it exits, signalfd only sees its own); the
 * kernel itself only notices it in the waiting thread.  The thread runs
 * only while something is watched (a blocked read over io_uring), and a
 * poll is one read of /proc/TID/status per watched request.
 *
 * What counts, as for the kernel's signal_pending(): a signal in SigPnd
 * (the thread's) or ShdPnd (its process's) that is not in SigBlk.  A
 * process-wide signal that another of its threads is about to take may
 * interrupt the request too: the caller sees EINTR, as after any signal.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/log.h"
#include "sigwatch.h"

struct sigwatch {
	const void *key;
	pid_t tid;
	void (*fn)(void *arg);
	void *arg;
	bool fired;
	struct sigwatch *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct sigwatch *head; /* protected by lock */
	bool running;          /* protected by lock: the thread exists */
} sw = { .lock = PTHREAD_MUTEX_INITIALIZER };

static pthread_once_t sigwatch_once = PTHREAD_ONCE_INIT;

/* The thread's timed waits count on the monotonic clock. */
static void sigwatch_init_cond(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sw.cond, &ca);
	pthread_condattr_destroy(&ca);
}

/* A "Name:\t%llx" mask of /proc/TID/status text, or 0. */
static uint64_t sigwatch_mask(const char *status, const char *name)
{
	const char *p = strstr(status, name);

	return p ? strtoull(p + strlen(name), NULL, 16) : 0;
}

/* Does tid have an unblocked signal pending?  A thread gone counts as no
 * (its request is being answered or aborted by the kernel). */
static bool sigwatch_pending(pid_t tid)
{
	char path[64], buf[4096];
	ssize_t n;
	int fd;
	uint64_t pend;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	pend = sigwatch_mask(buf, "\nSigPnd:\t") | sigwatch_mask(buf, "\nShdPnd:\t");
	return (pend & ~sigwatch_mask(buf, "\nSigBlk:\t")) != 0;
}

static void *sigwatch_main(void *arg)
{
	struct timespec ts;

	(void)arg;
	pthread_mutex_lock(&sw.lock);
	while (sw.head) {
		for (struct sigwatch *w = sw.head; w; w = w->next)
			if (!w->fired && sigwatch_pending(w->tid)) {
				w->fired = true;
				w->fn(w->arg); /* under the lock: unwatch waits for it */
			}
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += SIGWATCH_PERIOD_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&sw.cond, &sw.lock, &ts);
	}
	sw.running = false;
	pthread_mutex_unlock(&sw.lock);
	return NULL;
}

int sigwatch_watch(const void *key, pid_t tid, void (*fn)(void *arg), void *arg)
{
	struct sigwatch *w;
	pthread_attr_t attr;
	pthread_t t;
	int e = 0;

	if (tid <= 0)
		return ESRCH; /* a requester in a pid namespace we cannot see */
	w = calloc(1, sizeof(*w));
	if (!w)
		return ENOMEM;
	*w = (struct sigwatch){ .key = key, .tid = tid, .fn = fn, .arg = arg };
	pthread_once(&sigwatch_once, sigwatch_init_cond);
	pthread_mutex_lock(&sw.lock);
	if (!sw.running) {
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&attr, 64 * 1024);
		e = pthread_create(&t, &attr, sigwatch_main, NULL);
		pthread_attr_destroy(&attr);
		if (!e)
			sw.running = true;
	}
	if (!e) {
		w->next = sw.head;
		sw.head = w;
		pthread_cond_signal(&sw.cond);
	}
	pthread_mutex_unlock(&sw.lock);
	if (e) {
		log_warn("fuse", "cannot watch a request for signals (%s): it cannot be interrupted", strerror(e));
		free(w);
	}
	return e;
}

void sigwatch_unwatch(const void *key)
{
	struct sigwatch *w = NULL;

	pthread_mutex_lock(&sw.lock);
	for (struct sigwatch **pp = &sw.head; *pp; pp = &(*pp)->next)
		if ((*pp)->key == key) {
			w = *pp;
			*pp = w->next;
			break;
		}
	pthread_mutex_unlock(&sw.lock);
	free(w);
}
