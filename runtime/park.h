/* SPDX-License-Identifier: MIT */
/*
 * park.h - requests that have to wait: a read of a job's `exit` before the
 * job ends, of `stdout` at end of file while the job runs, of `events` with
 * nothing pending, an fsync until the skills sync caught up.  A parked
 * request holds no FUSE worker: it sits on a queue and the park thread
 * answers it when its queue is woken.
 *
 * No FUSE type here: a request and a poll handle are opaque pointers, and
 * what is done to them (watch for an interrupt, answer an error, notify a
 * poll) goes through the park_req_ops given to park_init (fs/fspark.c gives
 * libfuse's).  So net/ and skills/ own queues and wake them without
 * knowing FUSE, and only fs/ parks requests.
 *
 * Protocol (libfuse runs interrupt callbacks holding the request's lock, and
 * registering one takes that lock, so neither side may hold the other's
 * lock): a waiter is put on its queue unarmed, its interrupt callback is
 * registered (ops->watch) outside any lock, then it is armed.  Only armed
 * waiters are claimed; the claimer clears the callback (ops->unwatch, which
 * waits for a running one) before it replies.  The callback
 * (park_interrupted) only flags the waiter and wakes its queue.
 *
 * Lock order: park_lock (the dirty list) is never held with a queue's lock;
 * neither is held while replying or calling try().
 *
 * poll(2): handles registered with park_poll() are notified at the next
 * wake of their queue, then dropped (the kernel polls again).
 *
 * Lifetime: every waiter and every pending wake-up holds a reference on the
 * queue's owner (get/put given at park_queue_init), so a queue outlives its
 * waiters.  An owner that goes away (job rmdir, sandbox release, shutdown)
 * calls park_drain(): every waiter, also one being retried at that moment,
 * is answered with the given errno and later parks are refused with it.
 */
#ifndef SBX_RUNTIME_PARK_H
#define SBX_RUNTIME_PARK_H

#include <pthread.h>
#include <stdbool.h>

struct parked;

struct park_poll;

struct park_queue {
	pthread_mutex_t lock;
	struct parked *head, *tail; /* protected by lock: FIFO */
	struct park_poll *polls;    /* protected by lock: poll(2) handles to notify */
	bool closed;                /* protected by lock: drained */
	int close_err;
	bool dirty;                    /* protected by park_lock */
	struct park_queue *dirty_next; /* protected by park_lock */
	void (*get)(void *owner);
	void (*put)(void *owner);
	void *owner;
};

/* Answers req and returns true, or returns false to keep waiting.  Called
 * from the park thread (or the parker's own thread) with no lock held. */
typedef bool (*park_try_fn)(void *req, void *arg);

/* What the park does to a request and a poll handle (the FUSE layer's). */
struct park_req_ops {
	/* call park_interrupted(waiter) when req is interrupted (at once when
	 * it was already); unwatch waits for a running call to end */
	void (*watch)(void *req, void *waiter);
	void (*unwatch)(void *req);
	void (*reply_err)(void *req, int err);
	void (*poll_notify)(void *ph); /* tell the poller, then destroy ph */
	void (*poll_destroy)(void *ph);
};

void park_queue_init(struct park_queue *q, void (*get)(void *), void (*put)(void *), void *owner);
/* The queue must be drained and have no waiter.  Takes it off the park
 * thread's list and waits while that thread services it (an owner without a
 * reference count may be freed once this returns).  Never call it from a
 * queue's own try function. */
void park_queue_destroy(struct park_queue *q);
/* Park req: try(req, arg) is called each time q is woken until it answers;
 * then (or when req is interrupted, answered EINTR, or the queue drained)
 * arg_free(arg) runs.  Never fails: on ENOMEM req is answered ENOMEM. */
void park(struct park_queue *q, void *req, park_try_fn try, void *arg, void (*arg_free)(void *arg));
/* Something q's waiters wait for may have happened: retry them soon, on the
 * park thread.  Cheap, any thread, no lock of the caller's matters. */
void park_wake(struct park_queue *q);
/* Answer every waiter with err now and refuse later parks with it. */
void park_drain(struct park_queue *q, int err);
/* Keep a poll(2) handle: it is notified (and destroyed) at the next wake.
 * Register before testing readiness, so an event in between is not lost. */
void park_poll(struct park_queue *q, void *ph);
bool park_has_waiters(struct park_queue *q);

/* The watch callback's target: waiter (what watch was given) was
 * interrupted.  Any thread; only flags it and wakes its queue. */
void park_interrupted(void *waiter);

/* Start the park thread; ops stay referenced until park_shutdown. */
int park_init(const struct park_req_ops *ops);
void park_shutdown(void);

#endif
