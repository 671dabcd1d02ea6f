/* SPDX-License-Identifier: MIT */
/*
 * fspark.c - libfuse's operations for the park (see fspark.h): an interrupt
 * callback that forwards to park_interrupted, replies, poll notifications.
 * A request that came over io_uring gets no interrupt from libfuse 3.18: its
 * requester's signals are watched instead (sigwatch.h).
 */
#define _GNU_SOURCE
#include "fspark.h"

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>

#include "sigwatch.h"
#include "uring.h"

static void fspark_on_interrupt(fuse_req_t req, void *waiter)
{
	(void)req;
	park_interrupted(waiter);
}

static void fspark_watch(void *req, void *waiter)
{
	if (uring_req(req))
		sigwatch_watch(req, fuse_req_ctx(req)->pid, park_interrupted, waiter);
	fuse_req_interrupt_func(req, fspark_on_interrupt, waiter);
}

static void fspark_unwatch(void *req)
{
	fuse_req_interrupt_func(req, NULL, NULL);
	if (uring_req(req))
		sigwatch_unwatch(req);
}

static void fspark_reply_err(void *req, int err)
{
	fuse_reply_err(req, err);
}

static void fspark_poll_notify(void *ph)
{
	fuse_lowlevel_notify_poll(ph);
	fuse_pollhandle_destroy(ph);
}

static void fspark_poll_destroy(void *ph)
{
	fuse_pollhandle_destroy(ph);
}

static const struct park_req_ops fspark_ops = {
	.watch = fspark_watch,
	.unwatch = fspark_unwatch,
	.reply_err = fspark_reply_err,
	.poll_notify = fspark_poll_notify,
	.poll_destroy = fspark_poll_destroy,
};

int fspark_init(void)
{
	return park_init(&fspark_ops);
}
