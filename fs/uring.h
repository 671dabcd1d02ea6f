/* SPDX-License-Identifier: MIT */
/*
 * uring.h - which transport carries the mount's requests: FUSE over
 * io_uring (per-CPU rings, libfuse >= 3.18, Linux >= 6.14) or reads of
 * /dev/fuse (loop.c), chosen once when mounting from fuse.io_uring.
 *
 *   off   (default) /dev/fuse;
 *   auto  io_uring when this sbxfs's libfuse has it and the kernel offers
 *         it (/sys/module/fuse/parameters/enable_uring is Y), else
 *         /dev/fuse with one log line naming the reason;
 *   on    as auto, but the host's enable_uring is switched to Y when it is
 *         N (root only; it stays Y), and the daemon refuses to start when
 *         io_uring cannot be had before mounting.  A ring that fails to
 *         start at FUSE_INIT (after the mount) falls back with a log line.
 *
 * Even with io_uring, /dev/fuse stays read by loop.c: the kernel sends
 * FORGETs and INTERRUPTs there.
 *
 * Calls: uring_prepare before fuse_session_new (main thread, no lock);
 * uring_init from the init operation (a FUSE worker, before any other
 * request); uring_status from any thread; uring_stop after the unmount.
 */
#ifndef SBX_FS_URING_H
#define SBX_FS_URING_H

#include <stdbool.h>

struct fuse_args;
struct fuse_conn_info;
struct fuse_session;
struct json_t;
struct sbx_config;

/* Decide from cfg->fuse_io_uring; add libfuse's io_uring options to args
 * when io_uring is to be tried.  0, or -1 after printing why to stderr (on
 * that cannot be had, or out of memory). */
int uring_prepare(const struct sbx_config *cfg, struct fuse_args *args);

/* At FUSE_INIT: note whether the kernel offers io_uring. */
void uring_init(struct fuse_conn_info *conn);

/* True once FUSE_INIT has started the rings. */
bool uring_active(void);

/* Did req come over a ring?  (False with a libfuse without io_uring.) */
struct fuse_req;
bool uring_req(struct fuse_req *req);

/* A request read from /dev/fuse that the loop must not pass to libfuse:
 * over io_uring, a FUSE_INTERRUPT (its request came over a ring; libfuse
 * 3.18 would keep it for ever, fs/sigwatch.c does the interrupting).  Any
 * FUSE worker; lock-free. */
struct fuse_buf;
bool uring_swallow(const struct fuse_buf *buf);

/* Adds "fuse_transport" ("io_uring" or "dev_fuse") and "io_uring" (mode,
 * queues, queue_depth, reason or null) to a .status object. */
void uring_status(struct json_t *o);

/* Stop the ring threads and free the rings (after fuse_session_unmount,
 * before fuse_session_destroy). */
void uring_stop(struct fuse_session *se);

#endif
