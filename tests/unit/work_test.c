/* SPDX-License-Identifier: MIT */
/*
 * work_test.c - unit tests of the work queues (runtime/work.c): the
 * per-sandbox lane cap, another sandbox's item never waiting behind one
 * sandbox's many, the two queues apart, round-robin between lanes, the
 * item's token current while it runs, a cancel reaching a queued item,
 * the one claim, and the shutdown waiting for everything.  Items block on a
 * gate the test opens; every wait is bounded.  Run by `make unit`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/token.h"
#include "../../common/util.h"
#include "../../runtime/work.h"
#include "check.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int gate_open;            /* mu: blocked items go on */
static int running_a, max_running_a, done_a, done_b, done_other;
static char order[128];           /* mu: the keys of items as they started */
static int norder;

struct item {
	struct work w; /* first */
	char key;
	bool block;
	bool saw_token;  /* its token was current */
	bool saw_cancel; /* its token was cancelled when it ran */
};

static void item_run(struct work *w)
{
	struct item *it = (struct item *)w;

	pthread_mutex_lock(&mu);
	it->saw_token = token_current() == &w->tok;
	it->saw_cancel = token_cancelled(&w->tok);
	if (norder < (int)sizeof(order) - 1)
		order[norder++] = it->key;
	if (it->key == 'a' && ++running_a > max_running_a)
		max_running_a = running_a;
	while (it->block && !gate_open && !it->saw_cancel)
		pthread_cond_wait(&cv, &mu);
	if (it->key == 'a') {
		running_a--;
		done_a++;
	} else if (it->key == 'b') {
		done_b++;
	} else {
		done_other++;
	}
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	/* the test reads saw_* after the item: the item is the test's, not freed here */
}

static int start(struct item *it, enum work_queue q, const char *key, bool block)
{
	memset(it, 0, sizeof(*it));
	it->key = key[0];
	it->block = block;
	work_init(&it->w, q, key, 10000, item_run);
	return work_start(&it->w);
}

/* Wait until *counter >= n (bounded).  true when it got there. */
static bool wait_for(int *counter, int n, int ms)
{
	uint64_t end = util_now_ms() + (uint64_t)ms;
	bool ok;

	pthread_mutex_lock(&mu);
	while (*counter < n && util_now_ms() < end) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&cv, &mu, &ts);
	}
	ok = *counter >= n;
	pthread_mutex_unlock(&mu);
	return ok;
}

static void open_gate(void)
{
	pthread_mutex_lock(&mu);
	gate_open = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static void reset(void)
{
	pthread_mutex_lock(&mu);
	gate_open = running_a = max_running_a = done_a = done_b = done_other = 0;
	norder = 0;
	memset(order, 0, sizeof(order));
	pthread_mutex_unlock(&mu);
}

#define NA 40

/* One sandbox's 40 blocked I/O items: at most its lane cap run; another
 * sandbox's item runs at once, and so does lifecycle work. */
static void test_lane_cap_and_isolation(void)
{
	static struct item a[NA], b, l;
	struct work_stats st;

	reset();
	for (int i = 0; i < NA; i++)
		CHECK(start(&a[i], WORK_IO, "a-sandbox", true) == 0);
	CHECK(wait_for(&running_a, WORK_IO_LANE_CAP, 5000));
	CHECK(start(&b, WORK_IO, "b-sandbox", false) == 0);
	CHECK(wait_for(&done_b, 1, 5000)); /* not behind a's 40 */
	CHECK(start(&l, WORK_LIFECYCLE, "c-sandbox", false) == 0);
	CHECK(wait_for(&done_other, 1, 5000));
	CHECK(max_running_a == WORK_IO_LANE_CAP);
	/* b's and l's items end (the counts have them) just after their run() */
	for (int i = 0; i < 250 && work_pending() != NA; i++)
		usleep(20000);
	CHECK(work_pending() == NA);
	work_stats(&st);
	CHECK(st.running[WORK_IO] == WORK_IO_LANE_CAP);
	CHECK(st.queued[WORK_IO] == NA - WORK_IO_LANE_CAP);
	open_gate();
	CHECK(wait_for(&done_a, NA, 10000));
	CHECK(max_running_a == WORK_IO_LANE_CAP);
	CHECK(b.saw_token && l.saw_token && a[0].saw_token && a[NA - 1].saw_token);
	for (int i = 0; i < NA; i++)
		work_fini(&a[i].w);
	work_fini(&b.w);
	work_fini(&l.w);
}

/* Every lifecycle thread busy (16 sandboxes x their cap of 2), then 6 items
 * of sandbox x and 1 of sandbox y queued: as threads free up, y's item is
 * the second to start, not behind x's (round-robin between lanes). */
#define NK (WORK_LIFECYCLE_THREADS / WORK_LIFECYCLE_LANE_CAP)
static void test_round_robin(void)
{
	static struct item k[NK][WORK_LIFECYCLE_LANE_CAP], x[6], y;
	size_t busy, pos_y = 0, xs_before_y = 0;

	reset();
	for (int i = 0; i < NK; i++)
		for (int j = 0; j < WORK_LIFECYCLE_LANE_CAP; j++) {
			char key[16];

			snprintf(key, sizeof(key), "k%02d", i);
			CHECK(start(&k[i][j], WORK_LIFECYCLE, key, true) == 0);
		}
	busy = NK * WORK_LIFECYCLE_LANE_CAP;
	CHECK(wait_for(&norder, (int)busy, 5000)); /* every thread in an item */
	for (int i = 0; i < 6; i++)
		CHECK(start(&x[i], WORK_LIFECYCLE, "x", false) == 0);
	CHECK(start(&y, WORK_LIFECYCLE, "y", false) == 0);
	usleep(50000);
	CHECK(norder == (int)busy); /* nothing more started: no thread free */
	open_gate();
	CHECK(wait_for(&done_other, (int)busy + 7, 10000));
	pthread_mutex_lock(&mu);
	for (size_t i = busy; i < (size_t)norder; i++) {
		if (order[i] == 'y')
			pos_y = i - busy + 1;
		else if (!pos_y && order[i] == 'x')
			xs_before_y++;
	}
	pthread_mutex_unlock(&mu);
	CHECK(norder == (int)busy + 7);
	CHECK(pos_y >= 1 && xs_before_y <= 1);
	for (int i = 0; i < NK; i++)
		for (int j = 0; j < WORK_LIFECYCLE_LANE_CAP; j++)
			work_fini(&k[i][j].w);
	for (int i = 0; i < 6; i++)
		work_fini(&x[i].w);
	work_fini(&y.w);
}

/* A queued item cancelled runs (and ends at once) when its turn comes:
 * its token says cancelled; one claim wins. */
static void test_cancel_and_claim(void)
{
	static struct item hold[WORK_LIFECYCLE_LANE_CAP], q;

	reset();
	for (int i = 0; i < WORK_LIFECYCLE_LANE_CAP; i++)
		CHECK(start(&hold[i], WORK_LIFECYCLE, "z", true) == 0);
	CHECK(start(&q, WORK_LIFECYCLE, "z", true) == 0); /* over the cap: waits in z's lane */
	usleep(50000);
	CHECK(done_other == 0);
	work_cancel(&q.w);
	CHECK(token_check(&q.w.tok) == SBX_ERR_INTR);
	CHECK(work_claim(&q.w));
	CHECK(!work_claim(&q.w));
	open_gate();
	CHECK(wait_for(&done_other, WORK_LIFECYCLE_LANE_CAP + 1, 10000));
	CHECK(q.saw_cancel && !hold[0].saw_cancel);
	for (int i = 0; i < WORK_LIFECYCLE_LANE_CAP; i++)
		work_fini(&hold[i].w);
	work_fini(&q.w);
}

static int fn_runs;

static void fn(void *arg)
{
	(void)arg;
	__atomic_add_fetch(&fn_runs, 1, __ATOMIC_RELAXED);
}

/* work_submit's items, hostile keys (empty, too long), and the shutdown:
 * it waits for all, refuses new ones, and the queues work again after. */
static void test_submit_and_shutdown(void)
{
	char longkey[300];

	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	for (int i = 0; i < 100; i++)
		CHECK(work_submit(i % 2 ? WORK_IO : WORK_LIFECYCLE, i % 3 ? longkey : "", 1000, fn, NULL) == 0);
	CHECK(work_submit(WORK_IO, NULL, 0, fn, NULL) == 0);
	work_shutdown();
	CHECK(fn_runs == 101);
	CHECK(work_pending() == 0);
	CHECK(work_submit(WORK_IO, "again", 1000, fn, NULL) == 0);
	work_shutdown();
	CHECK(fn_runs == 102);
}

int main(void)
{
	test_lane_cap_and_isolation();
	test_round_robin();
	test_cancel_and_claim();
	test_submit_and_shutdown();
	work_shutdown();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
