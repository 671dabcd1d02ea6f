/* SPDX-License-Identifier: MIT */
/*
 * work.c - the work queues (see work.h).
 *
 * Each queue is a ring of lanes, one lane per sandbox key with work in it.
 * A lane holds the items of its key that wait, and counts those running; it
 * is in the queue's ready ring while it may start one more (something
 * waits, fewer than the lane cap run).  A free thread takes the lane at the
 * head of the ring, starts its first item and puts the lane back at the
 * tail if it may start another: round-robin across sandboxes, FIFO within
 * one.  A lane with nothing waiting and nothing running is freed.
 *
 * Why lanes rather than a cap checked at submit: a refused item would have
 * to be retried by someone; a lane keeps it, in order, and costs nothing
 * while the sandbox has nothing queued.
 *
 * "runnable" counts the items that could start right now (per lane:
 * min(waiting, cap - running)); a thread is started for a new runnable item
 * unless idle (or just started) threads are as many as the runnable items
 * (signalled threads may not have woken yet: counting them free would run
 * slow items one after another).
 */
#define _GNU_SOURCE
#include "work.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/log.h"

#define WORK_BUCKETS 64

struct lane {
	char key[WORK_KEY_MAX];
	struct work *head, *tail; /* waiting, FIFO */
	unsigned waiting, running;
	bool ready;               /* in the ready ring */
	struct lane *ready_next;
	struct lane *hnext;       /* hash chain */
};

struct queue {
	unsigned cap, lane_cap;
	struct lane *table[WORK_BUCKETS];
	struct lane *ready_head, *ready_tail;
	unsigned threads, idle;     /* threads, and those waiting for work */
	unsigned fresh;             /* started, not yet looking for work */
	unsigned runnable;          /* items that could start now */
	unsigned queued, running;   /* items waiting (runnable or not), running */
	unsigned lanes;
	pthread_cond_t more;
};

/* Every field is protected by work.lock. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t idle_done;
	struct queue q[WORK_NQUEUES];
	unsigned pending; /* queued + running, every queue */
	bool stopping;
	bool keep; /* idle threads stay (work_keep_threads) */
	unsigned long long cancelled; /* atomic */
} wk = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.idle_done = PTHREAD_COND_INITIALIZER,
	.q = {
		[WORK_LIFECYCLE] = { .cap = WORK_LIFECYCLE_THREADS, .lane_cap = WORK_LIFECYCLE_LANE_CAP,
			.more = PTHREAD_COND_INITIALIZER },
		[WORK_IO] = { .cap = WORK_IO_THREADS, .lane_cap = WORK_IO_LANE_CAP, .more = PTHREAD_COND_INITIALIZER },
	},
};

const char *work_queue_name(enum work_queue q)
{
	return q == WORK_LIFECYCLE ? "lifecycle" : q == WORK_IO ? "io" : "?";
}

/* ---- items ------------------------------------------------------------------------------ */

void work_init(struct work *w, enum work_queue q, const char *key, long timeout_ms, void (*run)(struct work *w))
{
	memset(w, 0, sizeof(*w));
	token_init(&w->tok, timeout_ms);
	w->run = run;
	w->q = q < WORK_NQUEUES ? q : WORK_IO;
	snprintf(w->key, sizeof(w->key), "%s", key ? key : "");
}

void work_fini(struct work *w)
{
	token_release(&w->tok);
}

void work_cancel(struct work *w)
{
	if (!__atomic_load_n(&w->claimed, __ATOMIC_ACQUIRE))
		__atomic_add_fetch(&wk.cancelled, 1, __ATOMIC_RELAXED);
	token_cancel(&w->tok);
}

bool work_claim(struct work *w)
{
	return __atomic_exchange_n(&w->claimed, 1, __ATOMIC_ACQ_REL) == 0;
}

/* ---- lanes (work.lock held) ------------------------------------------------------------- */

static unsigned lane_hash(const char *key)
{
	uint32_t h = 2166136261u; /* FNV-1a: a table index, not a digest */

	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h % WORK_BUCKETS;
}

/* Items of l that could start now. */
static unsigned lane_runnable(const struct queue *q, const struct lane *l)
{
	unsigned room = l->running < q->lane_cap ? q->lane_cap - l->running : 0;

	return l->waiting < room ? l->waiting : room;
}

static struct lane *lane_find_locked(struct queue *q, const char *key, bool make)
{
	unsigned b = lane_hash(key);
	struct lane *l;

	for (l = q->table[b]; l; l = l->hnext)
		if (!strcmp(l->key, key))
			return l;
	if (!make || !(l = calloc(1, sizeof(*l))))
		return NULL;
	snprintf(l->key, sizeof(l->key), "%s", key);
	l->hnext = q->table[b];
	q->table[b] = l;
	q->lanes++;
	return l;
}

static void lane_free_locked(struct queue *q, struct lane *l)
{
	struct lane **p = &q->table[lane_hash(l->key)];

	while (*p != l)
		p = &(*p)->hnext;
	*p = l->hnext;
	q->lanes--;
	free(l);
}

/* After l's counts changed (runnable already adjusted by the caller): put
 * l at the ring's tail when it may start one more, free it when empty. */
static void lane_settle_locked(struct queue *q, struct lane *l)
{
	if (lane_runnable(q, l) && !l->ready) {
		l->ready = true;
		l->ready_next = NULL;
		if (q->ready_tail)
			q->ready_tail->ready_next = l;
		else
			q->ready_head = l;
		q->ready_tail = l;
	} else if (!l->ready && !l->waiting && !l->running) {
		lane_free_locked(q, l);
	}
}

/* The next item to run, its lane's counts updated, or NULL. */
static struct work *queue_take_locked(struct queue *q, struct lane **lanep)
{
	struct lane *l = q->ready_head;
	struct work *w;

	if (!l)
		return NULL;
	q->ready_head = l->ready_next;
	if (!q->ready_head)
		q->ready_tail = NULL;
	l->ready = false;
	q->runnable -= lane_runnable(q, l);
	w = l->head;
	l->head = w->next;
	if (!l->head)
		l->tail = NULL;
	l->waiting--;
	l->running++;
	q->queued--;
	q->running++;
	q->runnable += lane_runnable(q, l);
	lane_settle_locked(q, l);
	*lanep = l;
	return w;
}

static void queue_done_locked(struct queue *q, struct lane *l)
{
	q->runnable -= lane_runnable(q, l);
	l->running--;
	q->running--;
	q->runnable += lane_runnable(q, l);
	lane_settle_locked(q, l);
	if (--wk.pending == 0)
		pthread_cond_broadcast(&wk.idle_done);
}

/* ---- threads ---------------------------------------------------------------------------- */

static void *work_main(void *arg)
{
	struct queue *q = arg;

	pthread_mutex_lock(&wk.lock);
	q->fresh--;
	for (;;) {
		struct lane *l = NULL;
		struct work *w = queue_take_locked(q, &l);

		if (w) {
			struct token *prev;

			pthread_mutex_unlock(&wk.lock);
			prev = token_enter(&w->tok);
			w->run(w); /* frees w */
			token_leave(prev);
			pthread_mutex_lock(&wk.lock);
			queue_done_locked(q, l);
			continue;
		}
		if (wk.stopping)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += WORK_IDLE_SECONDS;
		q->idle++;
		int r = pthread_cond_timedwait(&q->more, &wk.lock, &ts);
		q->idle--;
		if (r == ETIMEDOUT && !q->runnable && !wk.keep)
			break;
	}
	q->threads--;
	pthread_cond_broadcast(&wk.idle_done);
	pthread_mutex_unlock(&wk.lock);
	return NULL;
}

/* work.lock held: start a thread for q.  0 or an errno. */
static int queue_thread_locked(struct queue *q)
{
	pthread_attr_t attr;
	pthread_t t;
	int err;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 512 * 1024);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	err = pthread_create(&t, &attr, work_main, q);
	pthread_attr_destroy(&attr);
	if (!err) {
		q->threads++;
		q->fresh++;
	}
	return err;
}

/* work.lock held, one more item of q is runnable: wake an idle thread, or
 * start one (up to the cap; over it, or when that fails, a running thread
 * gets to it). */
static void queue_grow_locked(struct queue *q)
{
	pthread_cond_signal(&q->more);
	if (q->idle + q->fresh < q->runnable && q->threads < q->cap && queue_thread_locked(q))
		log_warn("work", "cannot start one more %s work thread (%u run): the item waits", work_queue_name(
			(enum work_queue)(q - wk.q)), q->threads);
}

int work_start(struct work *w)
{
	struct queue *q = &wk.q[w->q];
	struct lane *l;
	unsigned before;
	int err = 0;

	pthread_mutex_lock(&wk.lock);
	if (wk.stopping)
		err = ESHUTDOWN;
	else if (!q->threads) /* the first: without it nobody would ever run w */
		err = queue_thread_locked(q);
	l = err ? NULL : lane_find_locked(q, w->key, true);
	if (!err && !l)
		err = ENOMEM;
	if (err) {
		pthread_mutex_unlock(&wk.lock);
		if (err != ESHUTDOWN && err != ENOMEM)
			log_err("work", "cannot start a %s work thread: %s", work_queue_name(w->q), strerror(err));
		return err == EAGAIN ? ENOMEM : err;
	}
	before = lane_runnable(q, l);
	w->next = NULL;
	if (l->tail)
		l->tail->next = w;
	else
		l->head = w;
	l->tail = w;
	l->waiting++;
	q->queued++;
	wk.pending++;
	q->runnable += lane_runnable(q, l) - before;
	lane_settle_locked(q, l);
	if (lane_runnable(q, l) > before)
		queue_grow_locked(q);
	pthread_mutex_unlock(&wk.lock);
	return 0;
}

/* ---- items with no request -------------------------------------------------------------- */

struct work_fn {
	struct work w; /* first: run() casts back */
	void (*fn)(void *arg);
	void *arg;
};

static void work_fn_run(struct work *w)
{
	struct work_fn *f = (struct work_fn *)w;

	f->fn(f->arg);
	work_fini(w);
	free(f);
}

int work_submit(enum work_queue q, const char *key, long timeout_ms, void (*fn)(void *arg), void *arg)
{
	struct work_fn *f = calloc(1, sizeof(*f));
	int err;

	if (!f)
		return ENOMEM;
	work_init(&f->w, q, key, timeout_ms, work_fn_run);
	f->fn = fn;
	f->arg = arg;
	err = work_start(&f->w);
	if (err) {
		work_fini(&f->w);
		free(f);
	}
	return err;
}

/* ---- shutdown and stats ----------------------------------------------------------------- */

void work_keep_threads(void)
{
	pthread_mutex_lock(&wk.lock);
	wk.keep = true;
	pthread_mutex_unlock(&wk.lock);
}

void work_shutdown(void)
{
	pthread_mutex_lock(&wk.lock);
	wk.stopping = true;
	for (int i = 0; i < WORK_NQUEUES; i++)
		pthread_cond_broadcast(&wk.q[i].more);
	while (wk.pending > 0 || wk.q[WORK_LIFECYCLE].threads > 0 || wk.q[WORK_IO].threads > 0)
		pthread_cond_wait(&wk.idle_done, &wk.lock);
	wk.stopping = false; /* drained: a later start may use it again */
	pthread_mutex_unlock(&wk.lock);
}

unsigned work_pending(void)
{
	unsigned n;

	pthread_mutex_lock(&wk.lock);
	n = wk.pending;
	pthread_mutex_unlock(&wk.lock);
	return n;
}

void work_stats(struct work_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&wk.lock);
	for (int i = 0; i < WORK_NQUEUES; i++) {
		st->queued[i] = wk.q[i].queued;
		st->running[i] = wk.q[i].running;
		st->threads[i] = wk.q[i].threads;
		st->lanes[i] = wk.q[i].lanes;
	}
	pthread_mutex_unlock(&wk.lock);
	st->cancelled = __atomic_load_n(&wk.cancelled, __ATOMIC_RELAXED);
}
