/* SPDX-License-Identifier: MIT */
/*
 * loop.c - the FUSE request loop: a fixed set of worker threads, each
 * reading requests from /dev/fuse and processing them.
 *
 * Why not fuse_session_loop_mt(): in libfuse 3.14 (Debian 12) its workers
 * come and go under a sequential load - a new thread, a /dev/fuse clone and a
 * splice pipe are made for nearly every request (measured: ~10 clone3 per
 * create+write+close, a third of the daemon's time).  Our handlers never
 * block for long (waits are parked, see park.h; slow work goes to work.h),
 * so a fixed pool is enough: a thread per request in flight up to
 * LOOP_THREADS.
 *
 * Shutdown: unmounting makes every read fail (ENODEV); a signal handled by
 * libfuse (SIGTERM/SIGINT/SIGHUP... see main.c) marks the session exited and
 * interrupts one read; that worker then interrupts the others with SIGUSR2.
 * Workers are cancellable only while they wait in the read, never while they
 * hold a request.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "node.h"
#include "uring.h"

#define LOOP_THREADS 32

static pthread_t loop_threads[LOOP_THREADS];
static int loop_nthreads;

static void loop_wake(int sig)
{
	(void)sig; /* only interrupts a blocking read */
}

static void loop_wake_all(void)
{
	for (int i = 0; i < loop_nthreads; i++)
		if (!pthread_equal(loop_threads[i], pthread_self()))
			pthread_kill(loop_threads[i], SIGUSR2);
}

static void *loop_worker(void *arg)
{
	struct fuse_session *se = arg;
	struct fuse_buf fbuf = { .mem = NULL };
	int res = 0;

	while (!fuse_session_exited(se)) {
		res = fuse_session_receive_buf(se, &fbuf);
		if (res == -EINTR || res == -EAGAIN)
			continue;
		if (res <= 0) {
			if (res < 0 && res != -ENODEV)
				log_err("daemon", "reading /dev/fuse: %s", strerror(-res));
			fuse_session_exit(se);
			break;
		}
		if (uring_swallow(&fbuf))
			continue; /* an INTERRUPT over io_uring: uring.c */
		fuse_session_process_buf(se, &fbuf);
	}
	loop_wake_all();
	free(fbuf.mem);
	return NULL;
}

int loop_run(struct fuse_session *se)
{
	struct sigaction sa = { .sa_handler = loop_wake };
	pthread_attr_t attr;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, NULL); /* no SA_RESTART: the read must return */
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	loop_threads[0] = pthread_self();
	loop_nthreads = 1;
	for (int i = 1; i < LOOP_THREADS; i++) {
		if (pthread_create(&loop_threads[i], &attr, loop_worker, se)) {
			log_warn("daemon", "only %d FUSE workers: %s", i, strerror(errno));
			break;
		}
		loop_nthreads++;
	}
	pthread_attr_destroy(&attr);
	loop_worker(se);
	for (int i = 1; i < loop_nthreads; i++)
		pthread_join(loop_threads[i], NULL);
	return 0;
}
