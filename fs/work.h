/* SPDX-License-Identifier: MIT */
/*
 * work.h - slow operations off the FUSE workers.
 *
 * Acquiring a sandbox takes ~50 ms locally, about a second with docker and
 * several seconds remotely; releasing, destroying, starting a job through an
 * HTTP API and remote file transfers are slow too.  A FUSE handler that needs
 * one hands it here with its request and returns at once; the work item
 * replies when it is done.  So 64 slow mkdirs never stop an `ls` or a read
 * of another sandbox.
 *
 * Threads are made on demand up to WORK_MAX_THREADS and leave after a while
 * idle.  Items run in submission order as threads free up; an item may block
 * (it is the point), but must end: the shutdown waits for every item.
 */
#ifndef SBX_WORK_H
#define SBX_WORK_H

/* Run fn(arg) on a work thread.  0, or an errno (ENOMEM, ESHUTDOWN) and fn
 * is not called: the caller still owns arg and its request. */
int work_submit(void (*fn)(void *arg), void *arg);
/* Refuse new items, wait for the queued and running ones to end. */
void work_shutdown(void);
/* Items queued or running (for .status). */
unsigned work_pending(void);

#endif
