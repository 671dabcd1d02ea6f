/* SPDX-License-Identifier: MIT */
/*
 * token.c - deadlines and cancellation of one piece of work (see token.h).
 *
 * Why a waker rather than polling the flag: a transfer from a server that
 * sends nothing sits in poll(2) inside libcurl; curl calls its progress
 * callback about once a second then, so a cancel seen only there would
 * leave a killed process in D state for up to a second per request.  The
 * transfer registers curl_multi_wakeup() here instead and wakes at once.
 *
 * Why condition-variable waits poll in slices instead: the waiter's mutex
 * belongs to its module, and a waker taking it from token_cancel (called
 * under libfuse's request lock) would add a lock order for every module
 * that waits; a slice of TOKEN_COND_SLICE_MS costs a few wake-ups a second
 * and only while someone waits.
 */
#define _GNU_SOURCE
#include "token.h"

#include <errno.h>
#include <time.h>

#include "util.h"

static __thread struct token *token_cur;

void token_init(struct token *t, long timeout_ms)
{
	t->deadline_ms = timeout_ms > 0 ? util_now_ms() + (uint64_t)timeout_ms : 0;
	t->cancelled = 0;
	t->wake = NULL;
	t->wake_arg = NULL;
	pthread_mutex_init(&t->lock, NULL);
}

void token_release(struct token *t)
{
	pthread_mutex_destroy(&t->lock);
}

void token_cancel(struct token *t)
{
	pthread_mutex_lock(&t->lock);
	__atomic_store_n(&t->cancelled, 1, __ATOMIC_RELEASE);
	if (t->wake)
		t->wake(t->wake_arg);
	pthread_mutex_unlock(&t->lock);
}

bool token_cancelled(const struct token *t)
{
	return t && __atomic_load_n(&t->cancelled, __ATOMIC_ACQUIRE);
}

enum sbx_err token_check(const struct token *t)
{
	if (!t)
		return SBX_OK;
	if (token_cancelled(t))
		return SBX_ERR_INTR;
	if (t->deadline_ms && util_now_ms() >= t->deadline_ms)
		return SBX_ERR_TIMEOUT;
	return SBX_OK;
}

long token_left_ms(const struct token *t)
{
	uint64_t now;

	if (!t || !t->deadline_ms)
		return -1;
	now = util_now_ms();
	return now >= t->deadline_ms ? 0 : (long)(t->deadline_ms - now);
}

long token_bound_ms(const struct token *t, long limit_ms)
{
	long left = token_left_ms(t);

	if (left < 0)
		return limit_ms > 0 ? limit_ms : 0;
	if (left == 0)
		left = 1;
	return limit_ms > 0 && limit_ms < left ? limit_ms : left;
}

bool token_watch(struct token *t, void (*wake)(void *arg), void *arg)
{
	bool ok;

	pthread_mutex_lock(&t->lock);
	ok = !t->wake;
	if (ok) {
		t->wake = wake;
		t->wake_arg = arg;
	}
	pthread_mutex_unlock(&t->lock);
	return ok;
}

void token_unwatch(struct token *t)
{
	pthread_mutex_lock(&t->lock);
	t->wake = NULL;
	t->wake_arg = NULL;
	pthread_mutex_unlock(&t->lock);
}

enum sbx_err token_cond_wait(const struct token *t, pthread_cond_t *c, pthread_mutex_t *m)
{
	struct timespec ts;
	long slice = TOKEN_COND_SLICE_MS, left;
	enum sbx_err e = token_check(t);

	if (!t) {
		pthread_cond_wait(c, m);
		return SBX_OK;
	}
	if (e)
		return e;
	left = token_left_ms(t);
	if (left >= 0 && left < slice)
		slice = left ? left : 1;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (slice % 1000) * 1000000L;
	ts.tv_sec += slice / 1000 + ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	(void)pthread_cond_timedwait(c, m, &ts);
	return SBX_OK; /* the caller looks at its condition, then calls again: checked first */
}

struct token *token_current(void)
{
	return token_cur;
}

struct token *token_enter(struct token *t)
{
	struct token *prev = token_cur;

	token_cur = t;
	return prev;
}

void token_leave(struct token *prev)
{
	token_cur = prev;
}
