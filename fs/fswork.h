/* SPDX-License-Identifier: MIT */
/*
 * fswork.h - the FUSE side of runtime/work.h: a work item that answers a
 * FUSE request.
 *
 * An interruptible item has the request's interrupt callback registered
 * while it waits or runs: an interrupt (the caller got a signal) cancels
 * the item's token, so an HTTP transfer under it aborts, and answers the
 * request EINTR at once, without waiting for the work to notice.  The work
 * goes on to its end (a cancelled create cleans up); when it ends,
 * fswork_req() says whether the request is still to be answered.
 *
 * Why the callback may answer: libfuse calls it from its INTERRUPT handler
 * with the request referenced (curr->ctr) and its lock held, and
 * fuse_free_req() does not take that lock, so replying there is safe.  It
 * is not safe from fuse_req_interrupt_func() itself (a request already
 * interrupted is called back from the registration, and a reply there would
 * free the request under the registration's lock): during registration the
 * callback only cancels, and fswork_start answers after it.
 *
 * Over io_uring libfuse 3.18 delivers no interrupt: the requester's signals
 * are watched instead (sigwatch.h, a claiming watch), with the same effect
 * within SIGWATCH_PERIOD_MS; that watch answers from sigwatch's thread.
 *
 * Exactly one answer: both sides claim the item (work_claim) first.  The
 * side that ends the work and claims it unregisters the callback
 * (fuse_req_interrupt_func(req, NULL, NULL) waits for a running one) before
 * it replies.  The callback touches the item only before its claim.
 */
#ifndef SBX_FSWORK_H
#define SBX_FSWORK_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <stdbool.h>

#include "../runtime/work.h"

struct fswork {
	struct work w; /* first: run() gets &fw->w, the owner casts back */
	fuse_req_t req;
	bool watched;  /* the interrupt callback is registered */
	bool sigwatched; /* over io_uring: the requester's signals are watched (sigwatch.h) */
};

/* Queue fw (embedded first in the owner's struct) for req on queue q of
 * sandbox key, with a deadline timeout_ms from now; interruptible: as
 * above.  0: run(&fw->w) will be called once and owns the item; it ends
 * with fswork_req() (once) and work_fini().  Else an errno: req has been
 * answered (with it, or EINTR when interrupted already), the token
 * released, and the caller frees its struct. */
int fswork_start(struct fswork *fw, fuse_req_t req, enum work_queue q, const char *key, long timeout_ms,
	bool interruptible, void (*run)(struct work *w));
/* The request to answer now, or NULL when an interrupt answered it already
 * (EINTR).  Call once, from run(). */
fuse_req_t fswork_req(struct fswork *fw);
/* fswork_req, answering err; err is EINTR when the item was cancelled and
 * failed (whatever error the abandoned call ended with). */
void fswork_reply_err(struct fswork *fw, int err);

#endif
