/* SPDX-License-Identifier: MIT */
/*
 * park.c - the park thread and its queues (see park.h for the protocol).
 *
 * Why one thread: answering a parked request is a re-try (a stat and maybe
 * a splice) and a reply; one thread does thousands a second, and a single
 * consumer keeps the arming protocol simple.  Wakes are targeted: a queue
 * is put on the dirty list once, so output growth of one job retries only
 * that job's readers.
 */
#define _GNU_SOURCE
#include "park.h"

#include <errno.h>
#include <stdatomic.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "../common/log.h"

struct parked {
	void *req;
	struct park_queue *q;
	park_try_fn try;
	void *arg;
	void (*arg_free)(void *arg);
	bool armed;               /* protected by q->lock */
	volatile int interrupted; /* set by the interrupt callback */
	struct parked *next;
};

struct park_poll {
	void *ph;
	struct park_poll *next;
};

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_served = PTHREAD_COND_INITIALIZER;
static struct park_queue *dirty_head; /* protected by park_lock */
static struct park_queue *serving;    /* protected by park_lock: being serviced now */
static int park_efd = -1;
static pthread_t park_thread;
static atomic_int park_stop; /* set by park_shutdown, read by the park thread */
static bool park_running;
static const struct park_req_ops *park_ops; /* set at park_init */

void park_queue_init(struct park_queue *q, void (*get)(void *), void (*put)(void *), void *owner)
{
	memset(q, 0, sizeof(*q));
	pthread_mutex_init(&q->lock, NULL);
	q->get = get;
	q->put = put;
	q->owner = owner;
}

static void polls_notify(struct park_poll *p)
{
	while (p) {
		struct park_poll *next = p->next;
		park_ops->poll_notify(p->ph);
		free(p);
		p = next;
	}
}

/* Take q off the dirty list, and wait while the park thread services it:
 * a queue whose owner has no reference count (get/put no-ops) may be freed
 * right after this returns. */
static void park_forget(struct park_queue *q)
{
	pthread_mutex_lock(&park_lock);
	if (q->dirty) {
		struct park_queue **pp = &dirty_head;

		while (*pp && *pp != q)
			pp = &(*pp)->dirty_next;
		if (*pp)
			*pp = q->dirty_next;
		q->dirty = false;
	}
	while (serving == q)
		pthread_cond_wait(&park_served, &park_lock);
	pthread_mutex_unlock(&park_lock);
}

void park_queue_destroy(struct park_queue *q)
{
	struct park_poll *p;

	park_forget(q);
	p = q->polls;
	q->polls = NULL;
	while (p) {
		struct park_poll *next = p->next;
		park_ops->poll_destroy(p->ph);
		free(p);
		p = next;
	}
	pthread_mutex_destroy(&q->lock);
}

void park_poll(struct park_queue *q, void *ph)
{
	struct park_poll *p = calloc(1, sizeof(*p));

	if (!p) {
		/* cannot keep it: tell the kernel to poll again now */
		park_ops->poll_notify(ph);
		return;
	}
	p->ph = ph;
	pthread_mutex_lock(&q->lock);
	p->next = q->polls;
	q->polls = p;
	pthread_mutex_unlock(&q->lock);
}

static void parked_free(struct parked *p)
{
	if (p->arg_free)
		p->arg_free(p->arg);
	free(p);
}

/* Caller holds q->lock. */
static void queue_append_locked(struct park_queue *q, struct parked *p)
{
	p->next = NULL;
	if (q->tail)
		q->tail->next = p;
	else
		q->head = p;
	q->tail = p;
}

/* Caller holds q->lock. */
static void queue_remove_locked(struct park_queue *q, struct parked *p)
{
	struct parked **pp, *prev = NULL;

	for (pp = &q->head; *pp; prev = *pp, pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			if (q->tail == p)
				q->tail = prev;
			return;
		}
}

/* Caller holds q->lock: detach the armed waiters, in order. */
static struct parked *queue_claim_locked(struct park_queue *q)
{
	struct parked *claimed = NULL, **ctail = &claimed, *p = q->head, *keep = NULL, **ktail = &keep, *last = NULL;

	while (p) {
		struct parked *next = p->next;
		p->next = NULL;
		if (p->armed) {
			*ctail = p;
			ctail = &p->next;
		} else {
			*ktail = p;
			ktail = &p->next;
			last = p;
		}
		p = next;
	}
	q->head = keep;
	q->tail = last;
	return claimed;
}

void park_wake(struct park_queue *q)
{
	uint64_t one = 1;
	bool kick = false;

	pthread_mutex_lock(&park_lock);
	if (!q->dirty) {
		q->dirty = true;
		if (q->get)
			q->get(q->owner);
		q->dirty_next = dirty_head;
		dirty_head = q;
		kick = true;
	}
	pthread_mutex_unlock(&park_lock);
	if (kick && park_efd >= 0 && write(park_efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("park", "cannot wake the park thread: %s", strerror(errno));
}

void park_interrupted(void *waiter)
{
	struct parked *p = waiter;

	p->interrupted = 1;
	park_wake(p->q);
}

/* Register the interrupt callback, then arm p; a drained queue answers it.
 * A first park wakes the queue once armed: what p waits for may have
 * happened between the caller's own try and the arming.  A retry does not:
 * a wake that came while p was claimed has queued the queue again. */
static void park_arm(struct park_queue *q, struct parked *p, bool first)
{
	int err = 0;

	park_ops->watch(p->req, p);
	pthread_mutex_lock(&q->lock);
	if (q->closed) {
		queue_remove_locked(q, p);
		err = q->close_err;
	} else {
		p->armed = true;
	}
	pthread_mutex_unlock(&q->lock);
	if (err) {
		park_ops->unwatch(p->req);
		park_ops->reply_err(p->req, err);
		parked_free(p);
		return;
	}
	if (first || p->interrupted)
		park_wake(q);
}

/* Put p (unarmed) on q and arm it; or answer it when q is drained. */
static void park_enqueue(struct park_queue *q, struct parked *p, bool first)
{
	int err = 0;

	p->armed = false;
	pthread_mutex_lock(&q->lock);
	if (q->closed)
		err = q->close_err;
	else
		queue_append_locked(q, p);
	pthread_mutex_unlock(&q->lock);
	if (err) {
		park_ops->reply_err(p->req, err);
		parked_free(p);
		return;
	}
	park_arm(q, p, first);
}

void park(struct park_queue *q, void *req, park_try_fn try, void *arg, void (*arg_free)(void *arg))
{
	struct parked *p = calloc(1, sizeof(*p));

	if (!p) {
		park_ops->reply_err(req, ENOMEM);
		if (arg_free)
			arg_free(arg);
		return;
	}
	p->req = req;
	p->q = q;
	p->try = try;
	p->arg = arg;
	p->arg_free = arg_free;
	park_enqueue(q, p, true);
}

/* Claim q's armed waiters and notify its pollers; close it first (later
 * parks answered err) when close is set. */
static struct parked *queue_take(struct park_queue *q, bool close, int err)
{
	struct parked *p;
	struct park_poll *polls;

	pthread_mutex_lock(&q->lock);
	if (close) {
		q->closed = true;
		q->close_err = err;
	}
	p = queue_claim_locked(q);
	polls = q->polls;
	q->polls = NULL;
	pthread_mutex_unlock(&q->lock);
	polls_notify(polls);
	return p;
}

/* Park thread: retry every armed waiter of q. */
static void queue_service(struct park_queue *q)
{
	struct parked *p, *next;

	p = queue_take(q, false, 0);
	for (; p; p = next) {
		next = p->next;
		park_ops->unwatch(p->req);
		if (p->interrupted) {
			park_ops->reply_err(p->req, EINTR);
			parked_free(p);
		} else if (p->try(p->req, p->arg)) {
			parked_free(p);
		} else {
			park_enqueue(q, p, false);
		}
	}
}

void park_drain(struct park_queue *q, int err)
{
	struct parked *p, *next;

	p = queue_take(q, true, err);
	for (; p; p = next) {
		next = p->next;
		park_ops->unwatch(p->req);
		park_ops->reply_err(p->req, err);
		parked_free(p);
	}
}

bool park_has_waiters(struct park_queue *q)
{
	bool any;

	pthread_mutex_lock(&q->lock);
	any = q->head != NULL;
	pthread_mutex_unlock(&q->lock);
	return any;
}

/* One queue at a time, so that park_queue_destroy can take a queue off the
 * list or wait for the one being serviced. */
static void park_service_dirty(void)
{
	struct park_queue *q;

	pthread_mutex_lock(&park_lock);
	while ((q = dirty_head)) {
		dirty_head = q->dirty_next;
		q->dirty = false; /* a wake from now on queues it again */
		serving = q;
		pthread_mutex_unlock(&park_lock);
		queue_service(q);
		pthread_mutex_lock(&park_lock);
		serving = NULL; /* before the put: it may destroy q */
		pthread_cond_broadcast(&park_served);
		pthread_mutex_unlock(&park_lock);
		if (q->put)
			q->put(q->owner); /* the reference park_wake took */
		pthread_mutex_lock(&park_lock);
	}
	pthread_mutex_unlock(&park_lock);
}

static void *park_main(void *arg)
{
	(void)arg;
	while (!park_stop) {
		struct pollfd pfd = { .fd = park_efd, .events = POLLIN };
		uint64_t v;

		if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
			log_warn("park", "poll: %s", strerror(errno));
		if (read(park_efd, &v, sizeof(v)) < 0 && errno != EAGAIN && errno != EINTR)
			log_warn("park", "eventfd: %s", strerror(errno));
		park_service_dirty();
	}
	park_service_dirty();
	return NULL;
}

int park_init(const struct park_req_ops *ops)
{
	int err;

	park_ops = ops;
	park_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (park_efd < 0)
		return errno;
	err = pthread_create(&park_thread, NULL, park_main, NULL);
	if (err)
		return err;
	park_running = true;
	return 0;
}

void park_shutdown(void)
{
	uint64_t one = 1;

	if (!park_running)
		return;
	park_stop = 1;
	if (write(park_efd, &one, sizeof(one)) < 0)
		log_warn("park", "cannot stop the park thread: %s", strerror(errno));
	pthread_join(park_thread, NULL);
	park_running = false;
	close(park_efd);
	park_efd = -1;
}
