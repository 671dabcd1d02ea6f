/* SPDX-License-Identifier: MIT */
/*
 * work.h - slow work off the FUSE workers: queues with thread caps, a
 * per-sandbox cap, a deadline and a cancel token on every item.
 *
 * Acquiring a sandbox takes ~50 ms locally, about a second with docker and
 * several seconds remotely; releasing, destroying, starting a job through an
 * HTTP API, skills syncs and remote file transfers are slow too.  A FUSE
 * handler that needs one hands it here and returns at once; the item answers
 * its request when it is done.
 *
 * Queues.  Lifecycle work (create, destroy, release, snapshots) and I/O
 * (remote reads and writes, skills syncs, job starts) have a queue each,
 * with its own thread cap (WORK_LIFECYCLE_THREADS, WORK_IO_THREADS): 80
 * creates held by a slow server never delay a read miss of a sandbox that
 * is ready.
 *
 * Per-sandbox cap.  Every item names its sandbox (a key: the scope token;
 * "" for work of no sandbox).  At most WORK_LANE_CAP[queue] items of one key
 * run at a time in one queue; the others wait in that key's own list, and
 * the queue serves the keys with something waiting round-robin.  So one
 * sandbox queuing hundreds of slow reads takes at most its cap of threads
 * and never makes another sandbox's read wait behind them.
 *
 * Deadline and cancel.  Every item carries a struct token (common/token.h):
 * its deadline is fixed at work_init, anyone may cancel it (work_cancel; the
 * FUSE layer does it from the request's interrupt callback), and it is the
 * thread's current token while the item runs, so an HTTP transfer under it
 * stops at once when it is cancelled.  An item cancelled (or past its
 * deadline) while it waits is still run (its run() sees token_check() and
 * ends at once: the owner of the item frees it, not the queue).
 *
 * Answer once.  An item's request may be answered either by run() or, at
 * once, by whoever cancels it (an interrupt answers EINTR without waiting
 * for the work to notice): both call work_claim() first and only the one
 * that gets true answers.  The work goes on to its end either way (a
 * cancelled create still cleans up what it made).
 *
 * Threads are made on demand up to each queue's cap and leave after
 * WORK_IDLE_SECONDS idle (unless work_keep_threads was called).
 * work_shutdown waits for every item.
 *
 * Lock: work.lock, one mutex for every queue: a leaf, held to link and
 * unlink items and lanes and to start a thread, never over run(), which is
 * called with no lock held.
 */
#ifndef SBX_RUNTIME_WORK_H
#define SBX_RUNTIME_WORK_H

#include <stdbool.h>

#include "../common/names.h"
#include "../common/token.h"

enum work_queue {
	WORK_LIFECYCLE, /* acquire, release, destroy, snapshots, forks, ctl */
	WORK_IO,        /* remote file transfers, skills syncs, job starts */
	WORK_NQUEUES,
};

#define WORK_LIFECYCLE_THREADS 64
#define WORK_IO_THREADS 32
/* Per sandbox: lifecycle work of one scope is serialised by its scope lock
 * anyway (2: a release may queue behind a create); I/O of one sandbox may
 * overlap (a reader and a writer, prefetch) but never take the queue. */
#define WORK_LIFECYCLE_LANE_CAP 2
#define WORK_IO_LANE_CAP 8
#define WORK_IDLE_SECONDS 30
#define WORK_KEY_MAX NAMES_SCOPE_MAX

/* One item, embedded in its owner's struct (first member or not: run gets
 * the item, container_of-style casts are the owner's). */
struct work {
	struct token tok;               /* deadline + cancel; current while run() runs */
	void (*run)(struct work *w);    /* owns the item from then on: frees it */
	enum work_queue q;
	char key[WORK_KEY_MAX];         /* the sandbox (its scope token), or "" */
	int claimed;                    /* atomic: 0, then 1 (work_claim) */
	struct work *next;              /* protected by the queues' lock */
};

/* Fill w: queue q, sandbox key (NULL or "": none; cut to WORK_KEY_MAX-1),
 * deadline timeout_ms from now (<= 0: none), run(w) to do it.  Until
 * work_start succeeds the caller owns w; work_fini releases its token. */
void work_init(struct work *w, enum work_queue q, const char *key, long timeout_ms, void (*run)(struct work *w));
/* Queue w.  0 (run(w) will be called exactly once, and owns w), or an
 * errno (ENOMEM, ESHUTDOWN): run is never called, the caller still owns w. */
int work_start(struct work *w);
/* Release what work_init took (the token); run() calls it before freeing w,
 * once nobody can cancel w any more. */
void work_fini(struct work *w);
/* Cancel w (any thread, idempotent): its token is cancelled, an HTTP
 * transfer under it aborts, a queued w runs (and ends) when its turn comes. */
void work_cancel(struct work *w);
/* true exactly once per item: the caller answers w's request. */
bool work_claim(struct work *w);

/* Convenience for work with no request: fn(arg) on queue q for key, with a
 * deadline timeout_ms from now.  0, or an errno and fn is not called. */
int work_submit(enum work_queue q, const char *key, long timeout_ms, void (*fn)(void *arg), void *arg);

/* Refuse new items, wait for the queued and running ones to end. */
void work_shutdown(void);
/* From now on idle threads stay until work_shutdown.  FUSE over io_uring
 * needs it (fs/uring.c): a thread that answers a request that came over a
 * ring submits that ring entry's next fetch, which the kernel cancels when
 * the thread exits, and the ring is one entry short for good. */
void work_keep_threads(void);
/* Items queued or running in every queue (for .status and metrics). */
unsigned work_pending(void);

struct work_stats {
	unsigned queued[WORK_NQUEUES];  /* waiting for a thread or for their lane */
	unsigned running[WORK_NQUEUES];
	unsigned threads[WORK_NQUEUES];
	unsigned lanes[WORK_NQUEUES];   /* sandboxes with work in the queue */
	unsigned long long cancelled;   /* work_cancel calls that found the item not yet claimed */
};
void work_stats(struct work_stats *st);
const char *work_queue_name(enum work_queue q);

#endif
