/* SPDX-License-Identifier: MIT */
/*
 * dlock.c - flock(2) waits on data files, parked instead of polled on a
 * FUSE worker (the project's rule: a wait holds no worker).
 *
 * flock on a data file is the host's flock, shared with the sandbox's own
 * processes.  The first try is a LOCK_NB flock on the worker; when the lock
 * is taken the request is parked on one queue (flock_q) with a dup of the
 * open file's descriptor (the same open file description, so the lock is
 * the caller's; the dup also keeps it valid if the file is released while
 * the waiter is being answered).  The queue is retried by the park thread:
 *   - at once when a lock may have been let go through the mount (LOCK_UN,
 *     RELEASE of a data file): FIFO order, so the first waiter whose lock is
 *     now free takes it and the rest park again;
 *   - every DLOCK_TICK_MS while anyone waits, by one ticker thread: a holder
 *     inside a sandbox unlocks on the host, which sends no event.
 * One queue for the whole daemon rather than one per file: a wake costs one
 * LOCK_NB flock per waiter, and waiters are capped, while a queue per node
 * would need the node's lifetime tied to its waiters.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "../common/lock.h"
#include "../common/log.h"
#include "dlock.h"
#include "fspark.h"

struct dwait {
	int fd; /* our dup of the caller's open file */
	int op; /* LOCK_SH or LOCK_EX */
};

static struct park_queue flock_q;
static struct {
	struct lock lock;
	pthread_cond_t cond;
	int waiters;  /* lock: parked flock requests */
	bool stop;    /* lock */
	bool running; /* ticker started */
	pthread_t ticker;
} dl = { .lock = LOCK_INIT, .cond = PTHREAD_COND_INITIALIZER };

static void dwait_free(void *arg)
{
	struct dwait *w = arg;

	close(w->fd);
	free(w);
	lock_acquire(&dl.lock);
	dl.waiters--;
	lock_release(&dl.lock);
}

/* Park thread (or the parker's): take the lock if it is free now. */
static bool dwait_try(void *r, void *arg)
{
	fuse_req_t req = r;
	struct dwait *w = arg;

	if (!flock(w->fd, w->op | LOCK_NB))
		return fuse_reply_err(req, 0), true;
	if (errno == EWOULDBLOCK)
		return false;
	fuse_reply_err(req, errno);
	return true;
}

/* The ticker: wakes the queue every DLOCK_TICK_MS while anyone waits,
 * sleeps on dl.cond while nobody does. */
static void *dlock_tick(void *arg)
{
	struct timespec ts;

	(void)arg;
	lock_acquire(&dl.lock);
	while (!dl.stop) {
		if (!dl.waiters) {
			lock_cond_wait(&dl.cond, &dl.lock);
			continue;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += DLOCK_TICK_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		lock_cond_timedwait(&dl.cond, &dl.lock, &ts);
		if (dl.stop || !dl.waiters)
			continue;
		lock_release(&dl.lock);
		park_wake(&flock_q);
		lock_acquire(&dl.lock);
	}
	lock_release(&dl.lock);
	return NULL;
}

void dlock_flock(fuse_req_t req, int fd, int op, const char *scope)
{
	struct dwait *w;
	bool full;
	int err;

	if (!flock(fd, op | LOCK_NB)) {
		if (op & LOCK_UN)
			dlock_released();
		return (void)fuse_reply_err(req, 0);
	}
	err = errno;
	if (err != EWOULDBLOCK || (op & LOCK_NB))
		return (void)fuse_reply_err(req, err);
	lock_acquire(&dl.lock);
	full = dl.waiters >= DLOCK_WAITERS_MAX;
	if (!full && dl.waiters++ == 0)
		pthread_cond_signal(&dl.cond);
	lock_release(&dl.lock);
	if (full) {
		log_warn(scope, "flock: %d callers already wait for locks: ENOLCK", DLOCK_WAITERS_MAX);
		return (void)fuse_reply_err(req, ENOLCK);
	}
	w = malloc(sizeof(*w));
	if (w)
		w->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (!w || w->fd < 0) {
		err = w ? errno : ENOMEM;
		free(w);
		lock_acquire(&dl.lock);
		dl.waiters--;
		lock_release(&dl.lock);
		log_warn(scope, "flock: cannot wait for the lock: %s", strerror(err));
		return (void)fuse_reply_err(req, err == EMFILE || err == ENFILE ? ENOLCK : err);
	}
	w->op = op & (LOCK_SH | LOCK_EX);
	park(&flock_q, req, dwait_try, w, dwait_free);
}

void dlock_released(void)
{
	bool any;

	lock_acquire(&dl.lock);
	any = dl.waiters > 0;
	lock_release(&dl.lock);
	if (any)
		park_wake(&flock_q);
}

int dlock_init(void)
{
	int err;

	park_queue_init(&flock_q, NULL, NULL, NULL);
	dl.stop = false;
	err = pthread_create(&dl.ticker, NULL, dlock_tick, NULL);
	if (err) {
		log_err("daemon", "cannot start the flock ticker: %s", strerror(err));
		return err;
	}
	dl.running = true;
	return 0;
}

void dlock_shutdown(void)
{
	if (!dl.running)
		return;
	lock_acquire(&dl.lock);
	dl.stop = true;
	pthread_cond_signal(&dl.cond);
	lock_release(&dl.lock);
	pthread_join(dl.ticker, NULL);
	dl.running = false;
	park_drain(&flock_q, EINTR);
}
