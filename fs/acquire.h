/* SPDX-License-Identifier: MIT */
/*
 * acquire.h - the asynchronous acquire (`acquire: async`, the default;
 * DESIGN §3): mkdir of a thread answers once the sandbox is registered and
 * its create started, and everything inside the new directory waits for
 * the create's end.
 *
 * A mkdir reserves the scope (pool_reserve: a second mkdir gets EEXIST),
 * makes a pending view (node.h) whose directory the mkdir answers, and
 * queues the create on the lifecycle queue (runtime/work.h).  Requests on
 * the pending directory (lookup of anything but `id`, `status` and `ready`,
 * opendir) are parked on the view's ready_q (runtime/park.h: no FUSE worker
 * waits, a signal answers EINTR) and run again once the view is ready; if
 * the create fails they get its errno and the directory is gone.
 * `ready` blocks a read until the end; `status` says "creating" meanwhile
 * and poll(2) on it reports POLLPRI when that changes.
 *
 * Threads: acquire_mkdir and the acquire_park family run on FUSE workers
 * (they never block); the create runs on a lifecycle work thread; parked
 * requests are answered on the park thread.  No lock of the caller's is
 * held in any of them.
 */
#ifndef SBX_ACQUIRE_H
#define SBX_ACQUIRE_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <stdbool.h>

#include "node.h"

/* Start an asynchronous acquire of (user, thread): 0 and *out, the pending
 * view (referenced) whose directory the mkdir answers; or an errno
 * (EEXIST, EDQUOT, ESHUTDOWN, ENOMEM) and nothing changed.  A create that
 * ends very fast may have failed already: the view is then dead with
 * ready_err set. */
int acquire_start(const char *user, const char *thread, struct view **out);

/* req is an operation on v's directory.  While v is pending: park req, to
 * call again(req, arg) once v is ready (or answer the create's errno when
 * it failed, EINTR when interrupted), and return true.  When the create
 * failed: answer its errno, true.  Else false: go on.  arg_free(arg) runs
 * once req is answered or again() ran (not when false is returned). */
bool acquire_park(fuse_req_t req, struct view *v, void (*again)(fuse_req_t req, void *arg), void *arg,
	void (*arg_free)(void *arg));

/* The `ready` file: open (direct I/O, no handle), a read that blocks until
 * the create's end ("ready\n", or its errno), poll (POLLIN once ended). */
void acquire_ready_open(fuse_req_t req, struct node *n, struct fuse_file_info *fi);
void acquire_ready_read(fuse_req_t req, struct node *n, size_t size, off_t off);
void acquire_ready_poll(fuse_req_t req, struct node *n, struct fuse_pollhandle *ph);

/* poll(2) on `status`: the events for a handle opened at version *seen
 * (view->status_ver): POLLPRI once it changed; while creating, ph is kept
 * and notified at the change. */
unsigned acquire_status_poll(struct node *n, unsigned seen, struct fuse_pollhandle *ph);

#endif
