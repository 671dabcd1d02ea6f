/* SPDX-License-Identifier: MIT */
/*
 * rcache.c - the cache files of remote files (rfiles.h: close-to-open, as
 * NFS): a regular file's node holds one file under
 * thread_dir/rfiles-cache/, the bytes of the sandbox's file as far as they
 * were fetched, plus what was written here and not uploaded yet.
 *
 * Why apart from rfiles.c: rfiles.c answers the kernel (nodes, the FUSE
 * operations, their work items); this file owns what those operations
 * read from and write into, and the policies on it:
 *  - chunks: a cache file stands for the whole file but is fetched in
 *    RFILES_CHUNK pieces on demand; a chunk being fetched is marked so,
 *    and a second reader of it waits on rf.cond on its work thread
 *    (never holding rf.lock across the fetch);
 *  - the read-ahead window: a sequential reader fetches ahead, doubling
 *    up to RFILES_RA_MAX, and the next window is prefetched (a work item
 *    nobody waits for) while it reads the present one;
 *  - the cap: remote_files.cache_size bytes and the rfiles_cache share of
 *    descriptors (budget.h); past 90 % of either the caches nobody has
 *    open and nothing unsent are evicted, least recently used first.
 *
 * Locks: rf.lock (rfiles_int.h), a leaf; the functions named _locked are
 * called with it held, the others take it; none holds it across a
 * provider call, a close or unlink of an evicted file, or a pool call.
 */
#define _GNU_SOURCE
#include "rfiles_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/budget.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/token.h"
#include "../common/util.h"
#include "../runtime/work.h"

/* ---- the cache file ------------------------------------------------------------------------- */

/* rf.lock held: what r's cache file takes on disk. */
static uint64_t rcache_bytes_locked(struct rnode *r)
{
	struct stat st;

	return r->cfd >= 0 && !fstat(r->cfd, &st) ? (uint64_t)st.st_blocks * 512 : 0;
}

static void rcache_uncount_locked(struct rnode *r)
{
	uint64_t b = rcache_bytes_locked(r);

	rf.cached = rf.cached > b ? rf.cached - b : 0;
}

void rcache_drop_locked(struct rnode *r, bool keep_file)
{
	rcache_uncount_locked(r);
	if (r->cfd >= 0) {
		close(r->cfd);
		rf.ncache--;
	}
	if (r->cpath && !keep_file)
		unlink(r->cpath);
	else if (r->cpath)
		log_warn(r->n.view->sbx->token, "remote file not uploaded: its content is kept in %s", r->cpath);
	free(r->cpath);
	free(r->chunks);
	r->cfd = -1;
	r->cpath = NULL;
	r->chunks = NULL;
	r->nchunks = 0;
	r->csize = 0;
}

/* rf.lock held: r has a cache file (empty) sized for size bytes, all
 * chunks absent (or present when complete). */
int rcache_make_locked(struct rnode *r, off_t size, bool complete)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	size_t nch = (size_t)((size + RFILES_CHUNK - 1) / RFILES_CHUNK);
	int err = 0;

	rcache_drop_locked(r, false);
	if (layout_file(&p, r->n.view->sbx->thread_dir, "rfiles-cache") || (util_mkdir_p(p.ptr, 0700) && errno != EEXIST) ||
	    buf_addf(&p, "/%d-%llu", (int)getpid(), (unsigned long long)++rf.seq)) {
		buf_free(&p);
		return errno ? errno : ENOMEM;
	}
	r->cfd = open(p.ptr, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (r->cfd < 0) {
		err = errno;
		buf_free(&p);
		return err;
	}
	rf.ncache++;
	r->cpath = buf_take(&p, NULL);
	r->chunks = calloc(nch ? nch : 1, 1);
	if (!r->cpath || !r->chunks) {
		rcache_drop_locked(r, false);
		return ENOMEM;
	}
	r->nchunks = nch;
	r->cgen++;
	if (complete)
		memset(r->chunks, CH_PRESENT, nch);
	r->csize = size;
	if (ftruncate(r->cfd, size)) {
		err = errno;
		rcache_drop_locked(r, false);
	}
	return err;
}

/* rf.lock held: the cache grows to size by local writes (what is past
 * the old end is written or zeros: present).  0 or ENOMEM. */
int rcache_grow_locked(struct rnode *r, off_t size)
{
	size_t nch = (size_t)((size + RFILES_CHUNK - 1) / RFILES_CHUNK);

	if (size > r->csize && nch > r->nchunks) {
		unsigned char *c = realloc(r->chunks, nch);
		if (!c)
			return ENOMEM;
		memset(c + r->nchunks, CH_PRESENT, nch - r->nchunks);
		r->chunks = c;
		r->nchunks = nch;
	}
	if (size > r->csize)
		r->csize = size;
	return 0;
}

/* rf.lock held: chunks over [off, off+len) are all present. */
bool rcache_have_locked(struct rnode *r, off_t off, size_t len)
{
	if (r->cfd < 0)
		return false;
	if (off >= r->csize || !len)
		return true;
	if ((off_t)len > r->csize - off)
		len = (size_t)(r->csize - off);
	for (size_t c = (size_t)(off / RFILES_CHUNK); c <= (size_t)((off + (off_t)len - 1) / RFILES_CHUNK); c++)
		if (c >= r->nchunks || r->chunks[c] != CH_PRESENT)
			return false;
	return true;
}

/* Fetch [off, off+len) into the cache (work thread).  0 or an errno. */
int rcache_fetch(struct rnode *r, const char *path, off_t off, size_t len, struct sbx_box *box,
	const struct sbx_files_ops *ops)
{
	size_t first, last;
	int err = 0;

	pthread_mutex_lock(&rf.lock);
	if (r->cfd < 0) {
		pthread_mutex_unlock(&rf.lock);
		return EIO;
	}
	if (off >= r->csize || !len) {
		pthread_mutex_unlock(&rf.lock);
		return 0;
	}
	if ((off_t)len > r->csize - off)
		len = (size_t)(r->csize - off);
	first = (size_t)(off / RFILES_CHUNK);
	last = (size_t)((off + (off_t)len - 1) / RFILES_CHUNK);
	for (size_t c = first; c <= last && !err; c++) {
		/* another fetch of it: wait, within this request's deadline (a
		 * reader killed meanwhile gets its EINTR now, not when the other
		 * fetch ends) */
		while (!err && r->cfd >= 0 && c < r->nchunks && r->chunks[c] == CH_FETCHING)
			err = rf_errno(token_cond_wait(token_current(), &rf.cond, &rf.lock));
		if (err)
			break;
		if (r->cfd < 0 || c >= r->nchunks) {
			err = ESTALE;
			break;
		}
		if (r->chunks[c] == CH_PRESENT)
			continue;
		/* this chunk and the absent ones after it, up to `last` */
		size_t end = c;
		while (end + 1 <= last && r->chunks[end + 1] == CH_ABSENT)
			end++;
		for (size_t k = c; k <= end; k++)
			r->chunks[k] = CH_FETCHING;
		uint64_t cgen = r->cgen;
		off_t o = (off_t)c * RFILES_CHUNK;
		off_t stop = (off_t)(end + 1) * RFILES_CHUNK < r->csize ? (off_t)(end + 1) * RFILES_CHUNK : r->csize;
		char *cpath = strdup(r->cpath);
		pthread_mutex_unlock(&rf.lock);
		int fd = cpath ? open(cpath, O_WRONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
		size_t got = 0;
		if (fd < 0 || lseek(fd, o, SEEK_SET) != o) {
			err = fd < 0 && !cpath ? ENOMEM : EIO;
		} else {
			enum sbx_err e = ops->read(box, path, o, (size_t)(stop - o), fd, &got);
			err = rf_errno(e);
		}
		if (fd >= 0)
			close(fd);
		free(cpath);
		pthread_mutex_lock(&rf.lock);
		if (r->cgen != cgen || r->cfd < 0) {
			err = ESTALE; /* made anew meanwhile (the sandbox's file changed) */
			break;
		}
		if (c < r->nchunks)
			for (size_t k = c; k <= end && k < r->nchunks; k++)
				r->chunks[k] = err ? CH_ABSENT : CH_PRESENT;
		rf.cached += got;
		/* a short read: the file shrank in the sandbox; what is past it reads as zeros */
		pthread_cond_broadcast(&rf.cond);
		c = end;
	}
	pthread_mutex_unlock(&rf.lock);
	return err;
}

/* ---- the cap on the caches (remote_files.cache_size) -------------------------------------------- */

/* rf.lock held: r's cache may go (nobody has r open, nothing of it is
 * unsent or being fetched). */
static bool rcache_evictable_locked(const struct rnode *r)
{
	if (r->cfd < 0 || r->nopen || r->nwriters || r->dirty || r->local_new)
		return false;
	for (size_t c = 0; c < r->nchunks; c++)
		if (r->chunks[c] == CH_FETCHING)
			return false;
	return true;
}

static int rcache_by_use(const void *a, const void *b)
{
	const struct rnode *x = *(struct rnode *const *)a, *y = *(struct rnode *const *)b;

	return x->used_ms < y->used_ms ? -1 : x->used_ms > y->used_ms;
}

struct rcache_gone { /* a cache file evicted: closed and removed outside rf.lock */
	int fd;
	char *path;
};

/* rf.lock held: over 90 % of a cap (cap bytes, 0: none; ncap files)? */
static bool rcache_over_locked(uint64_t cap, long ncap)
{
	return (cap && rf.cached > cap / 10 * 9) || rf.ncache > ncap / 10 * 9;
}

/* rf.lock held: recount rf.cached and detach the least recently used
 * evictable caches until they are under 90 % of cap bytes and of nfiles
 * files.  *gone (malloc'd) gets the files to close and remove. */
static size_t rcache_trim_locked(uint64_t cap, long nfiles, struct rcache_gone **gone)
{
	struct rnode **cand = NULL;
	size_t n = 0, ncap = 0, ngone = 0;

	*gone = NULL;
	rf.cached = 0;
	for (int b = 0; b < RFILES_BUCKETS; b++)
		for (struct rnode *r = rf.table[b]; r; r = r->hnext) {
			rf.cached += rcache_bytes_locked(r);
			if (!rcache_evictable_locked(r))
				continue;
			if (n == ncap) {
				size_t nc = ncap ? ncap * 2 : 64;
				struct rnode **p = realloc(cand, nc * sizeof(*p));
				if (!p)
					break;
				cand = p;
				ncap = nc;
			}
			cand[n++] = r;
		}
	if (n)
		qsort(cand, n, sizeof(*cand), rcache_by_use);
	*gone = n ? calloc(n, sizeof(**gone)) : NULL;
	for (size_t i = 0; i < n && *gone && rcache_over_locked(cap, nfiles); i++) {
		struct rnode *r = cand[i];
		rcache_uncount_locked(r);
		(*gone)[ngone].fd = r->cfd;
		(*gone)[ngone++].path = r->cpath;
		r->cfd = -1;
		rf.ncache--;
		r->cpath = NULL; /* the next open fetches again */
		free(r->chunks);
		r->chunks = NULL;
		r->nchunks = 0;
		r->csize = 0;
	}
	free(cand);
	rf.trim_floor = cap && rf.cached > cap / 10 * 9 ? rf.cached + cap / 10 : 0;
	rf.ncache_floor = rf.ncache > nfiles / 10 * 9 ? rf.ncache + nfiles / 10 : 0;
	return ngone;
}

/* After the caches grew: keep them under the cap of r's sandbox's
 * configuration and under the descriptors' share (work thread; the files
 * go outside rf.lock). */
void rcache_trim(struct rnode *r)
{
	const struct sbx_config *cfg = r->n.view->sbx->cfg;
	uint64_t cap = cfg ? cfg->rfiles_cache_max : 0;
	long ncap = budget_rfiles_cache();
	struct rcache_gone *gone = NULL;
	size_t n = 0;

	pthread_mutex_lock(&rf.lock);
	if ((cap && rf.cached > cap && rf.cached > rf.trim_floor) || (rf.ncache > ncap && rf.ncache > rf.ncache_floor))
		n = rcache_trim_locked(cap, ncap, &gone);
	pthread_mutex_unlock(&rf.lock);
	for (size_t i = 0; i < n; i++) {
		close(gone[i].fd);
		unlink(gone[i].path);
		free(gone[i].path);
	}
	free(gone);
}

/* ---- the read-ahead window and its prefetch ---------------------------------------------------- */

/* A fetch nobody waits for: the next window of a sequential reader,
 * fetched while it reads the present one.  Its errors are the reader's
 * to meet when it gets there (its own fetch of what is still absent). */
struct rprefetch {
	struct rnode *r; /* referenced */
	off_t off;
	size_t len;
};

static void rcache_prefetch_run(void *arg)
{
	struct rprefetch *p = arg;
	struct sbx_box *box = rf_box(p->r->n.view);
	const struct sbx_files_ops *ops = sbx_files(box);
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct token tok, *prev;

	/* bounded like a request: a dripping server cannot hold the thread */
	token_init(&tok, rf_timeout_ms(p->r->n.view));
	prev = token_enter(&tok);
	if (ops && !p->r->n.view->dead && !rf_path(p->r, NULL, &path))
		(void)rcache_fetch(p->r, path.ptr, p->off, p->len, box, ops);
	token_leave(prev);
	token_release(&tok);
	buf_free(&path);
	sbx_box_put(box);
	rf_unref(p->r);
	free(p);
}

void rcache_prefetch(struct rnode *r, off_t off, size_t len)
{
	struct rprefetch *p = calloc(1, sizeof(*p));

	if (!p)
		return;
	pthread_mutex_lock(&rf.lock);
	r->refs++;
	pthread_mutex_unlock(&rf.lock);
	*p = (struct rprefetch){ r, off, len };
	if (work_submit(WORK_IO, r->n.view->sbx->token, rf_timeout_ms(r->n.view), rcache_prefetch_run, p)) {
		rf_unref(r);
		free(p);
	}
}

/* rf.lock held: a read of [off, off+size) from the cache.  When it goes
 * on from where the reader was and comes within a window of the end of
 * what is fetched, the next window is due: true, with its range. */
bool rcache_readahead_locked(struct rnode *r, off_t off, size_t size, off_t *ra_off, size_t *ra_len)
{
	bool seq = off == r->ra_next && r->ra_win;

	r->ra_next = off + (off_t)size;
	if (!seq || r->ra_to >= r->csize || r->ra_next + (off_t)r->ra_win < r->ra_to)
		return false;
	r->ra_win = r->ra_win * 2 > RFILES_RA_MAX ? RFILES_RA_MAX : r->ra_win * 2;
	*ra_off = r->ra_to;
	*ra_len = r->ra_win;
	r->ra_to += (off_t)r->ra_win;
	return true;
}

size_t rcache_window_locked(struct rnode *r, off_t off, size_t want)
{
	/* a sequential reader fetches ahead, more the longer it goes on (one
	 * ranged request for the lot); a jump starts again at one chunk */
	if (off == r->ra_next && r->ra_win)
		r->ra_win = r->ra_win * 2 > RFILES_RA_MAX ? RFILES_RA_MAX : r->ra_win * 2;
	else
		r->ra_win = RFILES_CHUNK;
	r->ra_next = off + (off_t)want;
	r->ra_to = off + (off_t)(want + r->ra_win);
	return r->ra_win;
}
