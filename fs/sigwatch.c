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
 * Why it stays once started, idle or not: it answers requests that came
 * over a ring (sigwatch_watch_claim), and a thread that answers over a ring
 * submits that ring entry's next fetch, which the kernel cancels when the
 * thread exits (the entry is lost, and the next request given to it fails
 * with ECANCELED: measured).  The work queues' threads stay for the same
 * reason (work_keep_threads).
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
	void (*fn)(void *arg);        /* a plain watch */
	bool (*claim)(void *arg);     /* a claiming watch (sigwatch.h) */
	void *arg;
	void (*answer)(void *token);
	void *token;
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

/* Fire the watches whose requester has a signal pending (lock held); the
 * claiming watches that won their claim are unlinked onto *done. */
static void sigwatch_scan(struct sigwatch **done)
{
	for (struct sigwatch **pp = &sw.head; *pp;) {
		struct sigwatch *w = *pp;

		if (w->fired || !sigwatch_pending(w->tid)) {
			pp = &w->next;
			continue;
		}
		w->fired = true;
		if (!w->claim) {
			w->fn(w->arg); /* under the lock: unwatch waits for it */
			pp = &w->next;
		} else if (w->claim(w->arg)) {
			*pp = w->next;
			w->next = *done;
			*done = w;
		} else {
			pp = &w->next; /* its owner answers, and unwatches */
		}
	}
}

static void *sigwatch_main(void *arg)
{
	struct timespec ts;

	(void)arg;
	pthread_mutex_lock(&sw.lock);
	for (;;) {
		struct sigwatch *done = NULL;

		if (!sw.head) { /* the thread stays: see "Why it stays" above */
			pthread_cond_wait(&sw.cond, &sw.lock);
			continue;
		}

		sigwatch_scan(&done);
		if (done) {
			pthread_mutex_unlock(&sw.lock);
			while (done) {
				struct sigwatch *w = done;
				done = w->next;
				w->answer(w->token);
				free(w);
			}
			pthread_mutex_lock(&sw.lock);
			continue;
		}
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += SIGWATCH_PERIOD_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&sw.cond, &sw.lock, &ts);
	}
	return NULL;
}

static int sigwatch_add(const struct sigwatch *proto)
{
	struct sigwatch *w;
	pthread_attr_t attr;
	pthread_t t;
	int e = 0;

	if (proto->tid <= 0)
		return ESRCH; /* a requester in a pid namespace we cannot see */
	w = calloc(1, sizeof(*w));
	if (!w)
		return ENOMEM;
	*w = *proto;
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

int sigwatch_watch(const void *key, pid_t tid, void (*fn)(void *arg), void *arg)
{
	return sigwatch_add(&(struct sigwatch){ .key = key, .tid = tid, .fn = fn, .arg = arg });
}

int sigwatch_watch_claim(const void *key, pid_t tid, bool (*claim)(void *arg), void *arg,
	void (*answer)(void *token), void *token)
{
	return sigwatch_add(&(struct sigwatch){
		.key = key, .tid = tid, .claim = claim, .arg = arg, .answer = answer, .token = token });
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
