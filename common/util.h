/* SPDX-License-Identifier: MIT */
/*
 * util.h - small file and time helpers shared by every module.
 * All return 0 on success, -1 with errno set on failure.
 */
#ifndef SBX_UTIL_H
#define SBX_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <sys/types.h>

#include "buf.h"

/* mkdir -p with the given mode for every created component. */
int util_mkdir_p(const char *path, mode_t mode);
/* Write a file atomically (tmp + rename): readers see the old or the new
 * content, never a part.  No fsync: these are records of running processes,
 * which a machine crash ends anyway, and a daemon crash keeps the page cache;
 * an fsync here would cost more than a sandbox start. */
int util_write_atomic(const char *path, const void *data, size_t len, mode_t mode);
/* The same for a file that is most likely new (a new thread's): created
 * with O_EXCL and written in place, one create instead of a create and a
 * rename; when it exists, util_write_atomic.  Until its write returns, a
 * reader (or the next start after a kill -9) may find it empty, never torn:
 * only for files nobody reads while they are first written, whose reader
 * takes an empty one for none. */
int util_write_new(const char *path, const void *data, size_t len, mode_t mode);
/* Is name a temporary file of util_write_atomic ("<file>.tmp.<tid>")?  A
 * kill -9 between its open and its rename leaves one (layout_sweep_tmp). */
bool util_is_atomic_tmp(const char *name);
/* Read a whole (small) file into b (bounded by b's cap). */
int util_read_file(const char *path, struct buf *b);
/* rm -rf without following symlinks; used only on our own state dirs. */
int util_rm_rf(const char *path);
/* A bucket for a pointer in a table of n buckets (Fibonacci hashing):
 * objects allocated at a fixed stride would fold onto a few buckets under a
 * plain modulo of the address. */
static inline unsigned util_hash_ptr(const void *p, unsigned n)
{
	return (unsigned)((((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull) >> 32) % n);
}
uint64_t util_now_ms(void);      /* CLOCK_MONOTONIC */
uint64_t util_now_us(void);      /* CLOCK_MONOTONIC, microseconds (step timings of debug logs) */
double util_wall_now(void);      /* CLOCK_REALTIME, seconds */
/* ISO-8601 UTC for a wall time in seconds. */
void util_iso8601(double t, char out[32]);
/* /proc/<pid>/stat field 22, or 0 when the process is gone or a zombie. */
uint64_t util_proc_starttime(pid_t pid);
/* The inode of /proc/<pid>/ns/<ns> ("mnt", "pid", ...): which namespace the
 * process is in; 0 when it is gone. */
unsigned long long util_ns_inode(pid_t pid, const char *ns);
/* The real uid /proc/<pid>/status shows, or -1 when the process is gone. */
long util_proc_uid(pid_t pid);

#endif
