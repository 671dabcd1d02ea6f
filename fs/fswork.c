/* SPDX-License-Identifier: MIT */
/*
 * fswork.c - work items that answer FUSE requests (see fswork.h): the
 * interrupt callback, and the claim that makes the answer happen once.
 */
#define _GNU_SOURCE
#include "fswork.h"

#include <errno.h>

#include "sigwatch.h"
#include "uring.h"

/* Set on a thread while it registers an interrupt callback: a callback
 * called back from the registration must not reply (see fswork.h). */
static __thread bool fswork_registering;

static void fswork_interrupted(fuse_req_t req, void *arg)
{
	struct fswork *fw = arg;

	work_cancel(&fw->w);
	if (fswork_registering)
		return; /* fswork_start answers */
	/* fw is not touched past the claim: its run may free it */
	if (work_claim(&fw->w))
		fuse_reply_err(req, EINTR);
}

/* Over io_uring libfuse delivers no interrupt (sigwatch.h): the requester's
 * signals are watched instead.  The claim runs under sigwatch's lock and
 * only cancels and claims; the answer comes after that lock is dropped. */
static bool fswork_sig_claim(void *arg)
{
	struct fswork *fw = arg;

	work_cancel(&fw->w);
	return work_claim(&fw->w); /* fw is not touched past it */
}

static void fswork_sig_answer(void *req)
{
	fuse_reply_err(req, EINTR);
}

static void fswork_watch(struct fswork *fw, fuse_req_t req)
{
	if (uring_req(req))
		fw->sigwatched = !sigwatch_watch_claim(req, fuse_req_ctx(req)->pid, fswork_sig_claim, fw,
			fswork_sig_answer, req);
	fswork_registering = true;
	fuse_req_interrupt_func(req, fswork_interrupted, fw);
	fswork_registering = false;
	fw->watched = true;
}

int fswork_start(struct fswork *fw, fuse_req_t req, enum work_queue q, const char *key, long timeout_ms,
	bool interruptible, void (*run)(struct work *w))
{
	int err;

	work_init(&fw->w, q, key, timeout_ms, run);
	fw->req = req;
	fw->watched = false;
	fw->sigwatched = false;
	if (interruptible) {
		fswork_watch(fw, req);
		if (token_cancelled(&fw->w.tok)) {
			err = EINTR; /* interrupted before it was queued */
			goto fail;
		}
	}
	err = work_start(&fw->w);
	if (!err)
		return 0;
fail:
	/* nobody else can claim: the item never ran and an interrupt from now
	 * on finds it claimed */
	fswork_reply_err(fw, err);
	work_fini(&fw->w);
	return err;
}

fuse_req_t fswork_req(struct fswork *fw)
{
	if (!work_claim(&fw->w))
		return NULL;
	if (fw->watched) {
		fuse_req_interrupt_func(fw->req, NULL, NULL);
		fw->watched = false;
	}
	if (fw->sigwatched) {
		sigwatch_unwatch(fw->req); /* waits for a claim under way (it lost) */
		fw->sigwatched = false;
	}
	return fw->req;
}

void fswork_reply_err(struct fswork *fw, int err)
{
	fuse_req_t req = fswork_req(fw);

	if (err && token_cancelled(&fw->w.tok))
		err = EINTR;
	if (req)
		fuse_reply_err(req, err);
}
