/* SPDX-License-Identifier: MIT */
/*
 * dlock.h - flock(2) on data files: waits that hold no FUSE worker.
 *
 * A blocking flock whose lock is taken is parked (park.h) on one queue with
 * its own duplicate of the open file's descriptor; the park thread retries
 * it (a LOCK_NB flock) when a lock may have been let go: an unlock or a
 * close through the mount (dlock_released), or a tick every DLOCK_TICK_MS
 * while anyone waits (a holder in a sandbox unlocks on the host, where
 * nothing tells us).  A FUSE interrupt answers the waiter EINTR at once.
 * At most DLOCK_WAITERS_MAX waiters (ENOLCK beyond, logged).
 *
 * Locks: dlock's lock is a leaf (the waiter count and the ticker's sleep);
 * none is held across a flock, a park call or a reply.
 */
#ifndef SBX_DLOCK_H
#define SBX_DLOCK_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>

#define DLOCK_WAITERS_MAX 256
#define DLOCK_TICK_MS 20

/* FUSE FLOCK of an open data file (fd: its descriptor; scope: for logs).
 * Replies 0, EWOULDBLOCK (LOCK_NB), EINTR, ENOLCK, ENOMEM, or flock's errno. */
void dlock_flock(fuse_req_t req, int fd, int op, const char *scope);
/* A flock lock may have been let go (LOCK_UN, an open data file closed):
 * retry the waiters.  Cheap when nobody waits; any thread, any lock. */
void dlock_released(void);
/* After park_init; dlock_shutdown answers every waiter EINTR. */
int dlock_init(void);
void dlock_shutdown(void);

#endif
