/* SPDX-License-Identifier: MIT */
/*
 * rfiles_int.h - what rfiles.c (the FUSE operations on remote files: the
 * nodes, their work items) and rcache.c (each node's cache file: chunks,
 * the read-ahead window and its prefetch, the cap on the caches) share;
 * nothing else includes it.  Locks: rf.lock, a leaf (rfiles.c's opening
 * comment; docs/architecture.md, "Lock order").
 */
#ifndef SBX_RFILES_INT_H
#define SBX_RFILES_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "../common/buf.h"
#include "rfiles.h"

#define RFILES_TTL_MS 1000               /* attributes and listings */
#define RFILES_KERNEL_TTL 1.0            /* what the kernel may cache, s */
#define RFILES_CHUNK (4 * 1024 * 1024)   /* fetch unit of a big file */
#define RFILES_WHOLE (4 * 1024 * 1024)   /* fetched whole at open up to this size */
#define RFILES_RA_MAX (32 * 1024 * 1024) /* the most a sequential reader fetches ahead */
#define RFILES_BUCKETS 1024

enum { CH_ABSENT, CH_PRESENT, CH_FETCHING };

struct rnode {
	struct node n; /* first: kind N_RFILE, view (referenced), which */
	struct rnode *parent; /* referenced; NULL for the top of a data directory */
	char *name;           /* in parent; NULL once removed or replaced */
	struct rnode *hnext;  /* table chain */
	/* all below: rf.lock */
	uint64_t nlookup; /* the kernel's */
	int refs;         /* nlookup != 0, children, open handles, jobs in flight */
	struct stat st;   /* as last fetched (uid/gid presented) */
	uint64_t st_ms;   /* when; 0 = unknown */
	struct sbx_dirent *ents; /* the listing of a directory */
	size_t nents;
	uint64_t list_ms;
	/* the cache file of a regular file */
	int cfd;          /* -1: none */
	char *cpath;
	off_t csize;      /* bytes the cache stands for */
	unsigned char *chunks;
	size_t nchunks;
	struct timespec rmtime; /* the sandbox's mtime and size the cache is of */
	off_t rsize;
	uint64_t cgen;    /* bumped when the cache file is made anew */
	uint64_t used_ms; /* last open or read: the cache cap evicts the least recent */
	off_t ra_next;    /* where a sequential reader reads next */
	off_t ra_to;      /* fetched, or being fetched, up to here for it */
	size_t ra_win;    /* what it fetches ahead: doubles while it reads on, up to RFILES_RA_MAX */
	int nopen;        /* open handles */
	bool local_new;   /* created here, not uploaded yet */
	bool dirty;       /* written since the last upload */
	uint64_t wgen;    /* bumped by each write */
	int nwriters;
};

struct rf_state {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a chunk fetch ended */
	struct rnode *table[RFILES_BUCKETS];
	uint64_t seq;
	/* bytes in cache files: counted up as they are fetched and written,
	 * recounted (allocated blocks) when over the cap */
	uint64_t cached;
	/* over the cap with nothing left to evict (files open, unsent): the
	 * next recount waits until the caches grew past this */
	uint64_t trim_floor;
	long ncache;      /* cache files open (nodes with cfd >= 0) */
	long ncache_floor; /* the same for their count (budget_rfiles_cache) */
};
extern struct rf_state rf;

/* ---- rfiles.c ---- */

/* v's box, referenced (sbx_box_put), or NULL. */
struct sbx_box *rf_box(struct view *v);
/* e as an errno. */
int rf_errno(enum sbx_err e);
/* What bounds one remote-files request in total (ms). */
long rf_timeout_ms(struct view *v);
/* The path in the sandbox of r (and /name under it) into b.  0 or an errno. */
int rf_path(struct rnode *r, const char *name, struct buf *b);
/* Drop one ref of r (rf.lock not held). */
void rf_unref(struct rnode *r);

/* ---- rcache.c: the cache file of a node (rf.lock held where _locked) ---- */

/* Close and remove r's cache file (kept, and logged, when keep_file). */
void rcache_drop_locked(struct rnode *r, bool keep_file);
/* r gets a new, empty cache file for size bytes, all chunks absent (or
 * present when complete).  0 or an errno. */
int rcache_make_locked(struct rnode *r, off_t size, bool complete);
/* The cache grows to size by local writes.  0 or ENOMEM. */
int rcache_grow_locked(struct rnode *r, off_t size);
/* Chunks over [off, off+len) are all present. */
bool rcache_have_locked(struct rnode *r, off_t off, size_t len);
/* Fetch [off, off+len) of path into r's cache (work thread, under the
 * current token).  0 or an errno. */
int rcache_fetch(struct rnode *r, const char *path, off_t off, size_t len, struct sbx_box *box,
	const struct sbx_files_ops *ops);
/* A read at off of want bytes that missed the cache: the window a
 * sequential reader fetches ahead with it (doubling, up to RFILES_RA_MAX;
 * one chunk after a jump). */
size_t rcache_window_locked(struct rnode *r, off_t off, size_t want);
/* A read of [off, off+size) served from the cache: true, with the range
 * of the next window, when that is due to be prefetched. */
bool rcache_readahead_locked(struct rnode *r, off_t off, size_t size, off_t *ra_off, size_t *ra_len);
/* Fetch [off, off+len) of r on the I/O queue, nobody waiting for it. */
void rcache_prefetch(struct rnode *r, off_t off, size_t len);
/* After the caches grew: evict past the cap of r's sandbox and past the
 * descriptors' share (work thread; rf.lock not held). */
void rcache_trim(struct rnode *r);

#endif
