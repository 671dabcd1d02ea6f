/* SPDX-License-Identifier: MIT */
/*
 * lock_test.c - concurrency units, built with SBXFS_LOCK_DEBUG and run by
 * `make unit` and under ThreadSanitizer by `make tsan-unit`:
 *   - common/lock.h: the owner is recorded, held/not-held assertions abort
 *     (in a child) when the comment they check is wrong;
 *   - fs/cmdbuf.c: writers appending to one open cmd while another thread
 *     takes it (jobfs.c's WRITE against FLUSH): every append that returned 0
 *     is in the bytes taken, every later one is EBUSY, no line is torn.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../common/lock.h"
#include "../../fs/cmdbuf.h"
#include "check.h"

#ifndef SBXFS_LOCK_DEBUG
#error "lock_test needs SBXFS_LOCK_DEBUG (the Makefile sets it)"
#endif

/* ---- lock.h ---------------------------------------------------------------- */

static struct lock tl = LOCK_INIT;

static void *holds_not(void *arg)
{
	(void)arg;
	lock_assert_not_held(&tl); /* another thread holds it: not this one */
	return NULL;
}

/* Run fn in a child: true when it aborted (the assertion fired). */
static bool aborts(void (*fn)(void))
{
	int st = 0;
	pid_t pid = fork();

	if (pid == 0) {
		fclose(stderr); /* the expected message is noise */
		fn();
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return false;
	return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

static void held_without_lock(void)
{
	lock_assert_held(&tl);
}

static void not_held_with_lock(void)
{
	lock_acquire(&tl);
	lock_assert_not_held(&tl);
}

static void unlock_unowned(void)
{
	lock_release(&tl);
}

static void test_lock(void)
{
	pthread_t t;

	lock_acquire(&tl);
	lock_assert_held(&tl);
	CHECK(pthread_create(&t, NULL, holds_not, NULL) == 0);
	pthread_join(t, NULL);
	lock_release(&tl);
	lock_assert_not_held(&tl);
	CHECK(aborts(held_without_lock));
	CHECK(aborts(not_held_with_lock));
	CHECK(aborts(unlock_unowned));
}

/* ---- cmdbuf ------------------------------------------------------------------ */

#define WRITERS 4
#define LINES 2000

struct rc {
	struct cmdbuf c;
	atomic_int appended; /* appends that returned 0 */
	bool ok[WRITERS][LINES];
	int busy[WRITERS];
	char *taken;
	size_t taken_len;
};

struct wr {
	struct rc *r;
	int t;
};

static void *writer(void *arg)
{
	struct wr *w = arg;
	char line[64];

	for (int i = 0; i < LINES; i++) {
		int n = snprintf(line, sizeof(line), "echo w%d-%d%.*s\n", w->t, i, i % 7, "xxxxxxx");
		int err = cmdbuf_append(&w->r->c, line, (size_t)n);

		if (!err) {
			w->r->ok[w->t][i] = true;
			atomic_fetch_add(&w->r->appended, 1);
		} else if (err == EBUSY) {
			w->r->busy[w->t]++;
		}
	}
	return NULL;
}

static void *taker(void *arg)
{
	struct rc *r = arg;

	while (atomic_load(&r->appended) < WRITERS * LINES / 4)
		sched_yield();
	r->taken = cmdbuf_take(&r->c, &r->taken_len);
	return NULL;
}

static void test_cmdbuf_race(void)
{
	struct rc *r = calloc(1, sizeof(*r));
	struct wr w[WRITERS];
	pthread_t th[WRITERS + 1];
	size_t len, lines = 0, expect = 0;
	char *p, *nl;

	cmdbuf_init(&r->c, 1 << 20);
	for (int t = 0; t < WRITERS; t++) {
		w[t] = (struct wr){ r, t };
		pthread_create(&th[t], NULL, writer, &w[t]);
	}
	pthread_create(&th[WRITERS], NULL, taker, r);
	for (int t = 0; t <= WRITERS; t++)
		pthread_join(th[t], NULL);
	CHECK(r->taken != NULL);
	CHECK(cmdbuf_take(&r->c, &len) == NULL); /* once */
	CHECK(cmdbuf_append(&r->c, "x", 1) == EBUSY);
	for (int t = 0; t < WRITERS; t++)
		for (int i = 0; i < LINES; i++)
			expect += r->ok[t][i];
	/* every line taken is whole and was acknowledged; none acknowledged is missing */
	for (p = r->taken; p && *p; p = nl + 1) {
		int t = -1, i = -1, used = 0;

		nl = strchr(p, '\n');
		if (!nl || sscanf(p, "echo w%d-%d%n", &t, &i, &used) != 2 || t < 0 || t >= WRITERS || i < 0 ||
		    i >= LINES || !r->ok[t][i]) {
			CHECK(!"a torn or unacknowledged line");
			break;
		}
		lines++;
	}
	CHECK(lines == expect);
	CHECK(strlen(r->taken) == r->taken_len);
	free(r->taken);
	cmdbuf_release(&r->c);
	free(r);
}

static void test_cmdbuf_cap(void)
{
	struct cmdbuf c;
	size_t len;

	cmdbuf_init(&c, 8);
	CHECK(cmdbuf_take(&c, &len) == NULL && len == 0); /* empty: nothing to start, still open */
	CHECK(cmdbuf_append(&c, "echo a\n", 7) == 0);
	CHECK(cmdbuf_append(&c, "echo b\n", 7) == EFBIG);
	CHECK(cmdbuf_append(&c, "x", 1) == EBUSY); /* a truncated command never runs */
	CHECK(cmdbuf_take(&c, &len) == NULL);
	cmdbuf_release(&c);
}

int main(void)
{
	test_lock();
	for (int i = 0; i < 20; i++)
		test_cmdbuf_race();
	test_cmdbuf_cap();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
