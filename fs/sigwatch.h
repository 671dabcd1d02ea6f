/* SPDX-License-Identifier: MIT */
/*
 * sigwatch.h - interrupts for parked requests that came over io_uring.
 *
 * libfuse 3.18 passes no FUSE_INTERRUPT on to a request that came through
 * a ring (fs/uring.c), so a signal to a process blocked in, say, a read of
 * a job's `exit` would not end its wait.  The kernel sends FUSE_INTERRUPT
 * when the waiting thread has an unblocked signal pending; this module
 * looks for the same thing itself: every SIGWATCH_PERIOD_MS it reads the
 * pending and blocked signal sets of each watched requester
 * (/proc/TID/status) and calls the watch's callback when one is pending.
 *
 * Calls: sigwatch_watch and sigwatch_unwatch from any thread, with no park
 * lock held (they take sigwatch's own lock, a leaf under which only the
 * callback runs: park_interrupted, which takes the park's locks).
 * sigwatch_unwatch returns only when no callback for key runs.
 *
 * The callback must not reply to a request: libfuse's ring thread holds its
 * ring's lock while it runs the operations, which may call sigwatch_watch
 * (ring lock -> sigwatch's lock), and a reply commits to the ring under that
 * lock.  A watch that must answer its request when it fires (fswork.c's
 * interruptible work items) is a claiming watch, sigwatch_watch_claim: its
 * claim callback runs under the lock and says whether the answer is the
 * watch's to give; if so the watch is removed, and its answer callback runs
 * after sigwatch's lock is dropped.
 */
#ifndef SBX_FS_SIGWATCH_H
#define SBX_FS_SIGWATCH_H

#include <stdbool.h>
#include <sys/types.h>

#define SIGWATCH_PERIOD_MS 50

/* Watch thread tid (as the request's context gives it) for key: fn(arg)
 * once it has an unblocked signal pending.  Returns 0, or an errno (then
 * nothing is watched: the request is not interruptible). */
int sigwatch_watch(const void *key, pid_t tid, void (*fn)(void *arg), void *arg);
/* A claiming watch: once tid has an unblocked signal pending, claim(arg)
 * runs under sigwatch's lock (it must not block or reply); when it returns
 * true the watch is removed (the caller never unwatches it then), and
 * answer(token) runs with no lock of sigwatch held.  Returns as
 * sigwatch_watch. */
int sigwatch_watch_claim(const void *key, pid_t tid, bool (*claim)(void *arg), void *arg,
	void (*answer)(void *token), void *token);
/* Stop watching key (no-op if it is not watched). */
void sigwatch_unwatch(const void *key);

#endif
