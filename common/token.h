/* SPDX-License-Identifier: MIT */
/*
 * token.h - a deadline and a cancel flag for one piece of work done on
 * behalf of someone who may stop waiting: a request through the mount (its
 * FUSE interrupt cancels it; request_timeout bounds it in total).
 *
 * The work's thread makes the token current (token_enter) while it runs the
 * work; every layer below that can block long asks the current token:
 *   - common/http.c bounds each transfer by the time left and stops it at
 *     once when the token is cancelled (it registers a waker with
 *     token_watch, which token_cancel calls: a transfer waiting on a silent
 *     server is woken, not polled);
 *   - a wait on a condition variable goes through token_cond_wait, which
 *     gives up at the deadline or soon after a cancel.
 * So the provider calls in between (stat, read, write, commands) need no
 * parameter for it, and a provider cannot forget to pass it on.
 *
 * Who sets it: the owner of the work (fs/rfiles.c for remote-files
 * requests: the deadline when the request arrives, the cancel from the
 * FUSE interrupt callback).  Runtime work queues are meant to carry one per
 * item and make it current while the item runs.
 *
 * Invariants:
 *   - the deadline is on util_now_ms()'s clock (monotonic), fixed at init;
 *   - cancelled only goes from 0 to 1;
 *   - one watcher at a time (a token's work runs on one thread, one
 *     transfer at a time); t->lock is a leaf, held only to register,
 *     unregister or call the watcher, which must not block.
 *
 * Thread-safe: token_cancel may be called from any thread (libfuse calls
 * interrupt callbacks with the request's lock held: token_cancel takes
 * t->lock after it; the order is in docs/architecture.md, "Lock order").
 */
#ifndef SBX_TOKEN_H
#define SBX_TOKEN_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "err.h"

/* How often token_cond_wait looks at the flag while it waits (a cancel
 * between a waiter's check and its wait is seen this late at worst). */
#define TOKEN_COND_SLICE_MS 50

struct token {
	uint64_t deadline_ms; /* util_now_ms() at which the work must end; 0: none */
	int cancelled;        /* atomic: 0, then 1 */
	pthread_mutex_t lock; /* the watcher below */
	void (*wake)(void *arg); /* protected by lock: called by token_cancel */
	void *wake_arg;
};

/* A token whose work must end within timeout_ms from now (<= 0: no
 * deadline).  Release it with token_release once nobody can cancel it. */
void token_init(struct token *t, long timeout_ms);
void token_release(struct token *t);

/* Cancel t (any thread; idempotent): its watcher, if any, is woken. */
void token_cancel(struct token *t);
bool token_cancelled(const struct token *t);
/* SBX_ERR_INTR once cancelled, SBX_ERR_TIMEOUT once past the deadline,
 * else SBX_OK.  NULL: SBX_OK. */
enum sbx_err token_check(const struct token *t);
/* Milliseconds left before the deadline (0 when past it), or -1 when t is
 * NULL or has none. */
long token_left_ms(const struct token *t);
/* The smaller of limit_ms (<= 0: none) and the time left; <= 0: no limit
 * at all.  Past the deadline it is 1 (the caller checks token_check
 * first). */
long token_bound_ms(const struct token *t, long limit_ms);

/* Register wake(arg) to be called (from token_cancel, under t->lock) when
 * t is cancelled.  false when another watcher holds t (then the caller
 * must poll token_cancelled).  Whether t was cancelled before is the
 * caller's to check after watching: a cancel after the watch wakes it. */
bool token_watch(struct token *t, void (*wake)(void *arg), void *arg);
/* After it returns, wake is not running and will not be called. */
void token_unwatch(struct token *t);

/* pthread_cond_wait(c, m) (m held by the caller) bounded by t: SBX_OK
 * when woken or after a slice of TOKEN_COND_SLICE_MS (the caller looks at
 * its condition and calls again); SBX_ERR_INTR / SBX_ERR_TIMEOUT, without
 * waiting, when token_check says so.  t NULL: a plain wait.  c must use
 * CLOCK_REALTIME (the default). */
enum sbx_err token_cond_wait(const struct token *t, pthread_cond_t *c, pthread_mutex_t *m);

/* The current thread's token (NULL: none: no deadline, no cancel). */
struct token *token_current(void);
/* Make t the current thread's token; returns the one it replaces, for
 * token_leave. */
struct token *token_enter(struct token *t);
void token_leave(struct token *prev);

#endif
