/* SPDX-License-Identifier: MIT */
/*
 * cmdbuf.h - the bytes of a job's command as one open cmd file collects them.
 *
 * One open file of cmd may be written from several threads (the kernel
 * hands their WRITEs to different FUSE workers) while another thread's
 * close(2) or fsync(2) commits it (FLUSH, FSYNC) on yet another worker.
 * A cmdbuf is that handle's state: appends and the one take are serialised
 * by its lock, a leaf held only to copy bytes (never across a job start, a
 * reply or another lock).  After the take, or after an append that would
 * pass the cap, it refuses every append: a command runs whole or not at all,
 * and a write that succeeded is always in the command that runs.
 */
#ifndef SBX_CMDBUF_H
#define SBX_CMDBUF_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/buf.h"
#include "../common/lock.h"

struct cmdbuf {
	struct lock lock;
	struct buf bytes; /* lock */
	bool closed;      /* lock: taken, or failed (too long): no more appends */
};

void cmdbuf_init(struct cmdbuf *c, size_t max);
void cmdbuf_release(struct cmdbuf *c);
/* Append n bytes.  0; EBUSY once taken (or after EFBIG); EFBIG when the
 * command would pass max (the bytes so far are dropped: never run). */
int cmdbuf_append(struct cmdbuf *c, const void *p, size_t n);
/* The first take after at least one byte: the bytes (malloc'd, the caller
 * frees them) and *len; NULL when empty or already taken/failed. */
char *cmdbuf_take(struct cmdbuf *c, size_t *len);

#endif
