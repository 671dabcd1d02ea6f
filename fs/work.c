/* SPDX-License-Identifier: MIT */
/*
 * work.c - the slow-work thread pool (see work.h).
 *
 * A plain FIFO under one mutex with a condition variable: the work items
 * are coarse (a sandbox create, a job start), so there is nothing to gain
 * from anything cleverer.
 */
#define _GNU_SOURCE
#include "work.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/log.h"

#define WORK_MAX_THREADS 64
#define WORK_IDLE_SECONDS 30

struct work_item {
	void (*fn)(void *arg);
	void *arg;
	struct work_item *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t more, idle_done;
	struct work_item *head, *tail; /* protected by lock */
	unsigned threads, idle;        /* protected by lock */
	unsigned queued;               /* protected by lock: not yet taken */
	unsigned pending;              /* protected by lock: queued + running */
	bool stopping;                 /* protected by lock */
} wq = { .lock = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER,
	.idle_done = PTHREAD_COND_INITIALIZER };

static struct work_item *work_take_locked(void)
{
	struct work_item *it = wq.head;

	if (it) {
		wq.queued--;
		wq.head = it->next;
		if (!wq.head)
			wq.tail = NULL;
	}
	return it;
}

static void *work_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&wq.lock);
	for (;;) {
		struct work_item *it = work_take_locked();

		if (it) {
			pthread_mutex_unlock(&wq.lock);
			it->fn(it->arg);
			free(it);
			pthread_mutex_lock(&wq.lock);
			if (--wq.pending == 0)
				pthread_cond_broadcast(&wq.idle_done);
			continue;
		}
		if (wq.stopping)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += WORK_IDLE_SECONDS;
		wq.idle++;
		int r = pthread_cond_timedwait(&wq.more, &wq.lock, &ts);
		wq.idle--;
		if (r == ETIMEDOUT && !wq.head)
			break;
	}
	wq.threads--;
	pthread_cond_broadcast(&wq.idle_done);
	pthread_mutex_unlock(&wq.lock);
	return NULL;
}

/* Caller holds wq.lock.  A thread for the new item, unless an idle one is
 * left over after the items already queued (signalled threads may not have
 * woken yet: counting them free would run slow items one after another). */
static int work_grow_locked(void)
{
	pthread_attr_t attr;
	pthread_t t;
	int err;

	if (wq.idle > wq.queued || wq.threads >= WORK_MAX_THREADS)
		return 0;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 512 * 1024);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	err = pthread_create(&t, &attr, work_main, NULL);
	pthread_attr_destroy(&attr);
	if (err)
		return wq.threads ? 0 : err; /* an existing thread will get to it */
	wq.threads++;
	return 0;
}

int work_submit(void (*fn)(void *arg), void *arg)
{
	struct work_item *it = calloc(1, sizeof(*it));
	int err;

	if (!it)
		return ENOMEM;
	it->fn = fn;
	it->arg = arg;
	pthread_mutex_lock(&wq.lock);
	if (wq.stopping) {
		pthread_mutex_unlock(&wq.lock);
		free(it);
		return ESHUTDOWN;
	}
	err = work_grow_locked();
	if (err) {
		pthread_mutex_unlock(&wq.lock);
		free(it);
		log_err("work", "cannot start a work thread: %s", strerror(err));
		return err == EAGAIN ? ENOMEM : err;
	}
	if (wq.tail)
		wq.tail->next = it;
	else
		wq.head = it;
	wq.tail = it;
	wq.queued++;
	wq.pending++;
	pthread_cond_signal(&wq.more);
	pthread_mutex_unlock(&wq.lock);
	return 0;
}

void work_shutdown(void)
{
	pthread_mutex_lock(&wq.lock);
	wq.stopping = true;
	pthread_cond_broadcast(&wq.more);
	while (wq.pending > 0 || wq.threads > 0)
		pthread_cond_wait(&wq.idle_done, &wq.lock);
	wq.stopping = false; /* drained: a later start may use it again */
	pthread_mutex_unlock(&wq.lock);
}

unsigned work_pending(void)
{
	unsigned n;

	pthread_mutex_lock(&wq.lock);
	n = wq.pending;
	pthread_mutex_unlock(&wq.lock);
	return n;
}
