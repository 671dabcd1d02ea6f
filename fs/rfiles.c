/* SPDX-License-Identifier: MIT */
/*
 * rfiles.c - remote files: workspace/, uploads/ and outputs/ of sandboxes
 * whose files live behind an API (see rfiles.h for the consistency model).
 *
 * Nodes are keyed by (parent, name), like the dentries of a network file
 * system: a path is rebuilt from the parents for each call, so a rename
 * moves a whole subtree by changing one node.  A node holds its parent
 * (refs), its attributes as last fetched, a listing (directories) and a
 * cache file (regular files) under thread_dir/rfiles-cache/.
 *
 * Threads: nothing here blocks a FUSE worker on the network.  A request
 * that needs the sandbox becomes a work item (struct rf_work, its body an
 * rf_run_* function) on the I/O queue, in the sandbox's lane
 * (runtime/work.h, fswork.h), which answers it (or an interrupt does,
 * EINTR at once); the worker only answers what the caches hold (fresh
 * attributes, listings, cached byte ranges, writes into the cache file).
 *
 * Descriptors (issue 19): an open file is charged one descriptor of its
 * sandbox's budget (budget.h: EMFILE past it).  The cache files behind the
 * nodes (chunks fetched on demand, the read-ahead window, the cap on the
 * caches) are rcache.c's; rfiles_int.h is what the two share.
 *
 * Locks: rf.lock (one module mutex) protects the node table and every
 * node's fields; it is a leaf: never held across a provider call, a reply,
 * a kernel notification or a pool call (pool_box takes pool.lock: called
 * before rf.lock).  Order: pool.lock, then rf.lock, never the reverse.
 */
#define _GNU_SOURCE
#include "rfiles_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/budget.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/token.h"
#include "../common/util.h"
#include "handle.h"
#include "fswork.h"

struct rfh { /* an open file */
	struct rnode *r;
	int flags;
};

struct rf_state rf = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static const char *rf_names[DD_COUNT] = { "workspace", "uploads", "outputs", "skills" };

static struct rnode *rnode(fuse_ino_t ino)
{
	return (struct rnode *)node_of(ino);
}

static unsigned rf_hash(const struct view *v, const struct rnode *p, const char *name)
{
	unsigned h = (unsigned)(((uintptr_t)v >> 4) ^ ((uintptr_t)p >> 3));

	for (const char *c = name; *c; c++)
		h = h * 31 + (unsigned char)*c;
	return h % RFILES_BUCKETS;
}

static bool bad_name(const char *name)
{
	return !name[0] || !strcmp(name, ".") || !strcmp(name, "..") || strchr(name, '/');
}

/* rf.lock held. */
static struct rnode *rf_find_locked(struct view *v, struct rnode *p, const char *name)
{
	for (struct rnode *r = rf.table[rf_hash(v, p, name)]; r; r = r->hnext)
		if (r->n.view == v && r->parent == p && r->name && !strcmp(r->name, name))
			return r;
	return NULL;
}

static void rf_unhash_locked(struct rnode *r)
{
	struct rnode **pp;

	if (!r->name)
		return;
	for (pp = &rf.table[rf_hash(r->n.view, r->parent, r->name)]; *pp; pp = &(*pp)->hnext)
		if (*pp == r) {
			*pp = r->hnext;
			break;
		}
	r->hnext = NULL;
}

static void rf_hash_locked(struct rnode *r)
{
	unsigned h = rf_hash(r->n.view, r->parent, r->name);

	r->hnext = rf.table[h];
	rf.table[h] = r;
}

/* rf.lock held: the node of (v, p, name), made if needed, with one more ref. */
static struct rnode *rf_get_locked(struct view *v, struct rnode *p, int which, const char *name)
{
	struct rnode *r = rf_find_locked(v, p, name);

	if (r) {
		r->refs++;
		return r;
	}
	r = calloc(1, sizeof(*r));
	if (!r || !(r->name = strdup(name))) {
		free(r);
		return NULL;
	}
	r->n.kind = N_RFILE;
	r->n.which = which;
	r->n.view = v;
	r->n.fd = -1;
	r->cfd = -1;
	r->parent = p;
	r->refs = 1;
	if (p)
		p->refs++;
	view_get(v);
	rf_hash_locked(r);
	return r;
}

#define RF_MAX_PUT 256 /* nodes freed by one unref (a chain of parents) */

/* Drop one ref; frees r, and its parents whose last ref it held. */
void rf_unref(struct rnode *r)
{
	struct view *vput[RF_MAX_PUT];
	int nput = 0;

	pthread_mutex_lock(&rf.lock);
	/* a chain deeper than RF_MAX_PUT stops with a ref too many on one
	 * parent: kept until exit rather than freed in use */
	while (r && nput < RF_MAX_PUT && --r->refs == 0) {
		struct rnode *p = r->parent;
		rf_unhash_locked(r);
		rcache_drop_locked(r, r->dirty);
		sbx_dirents_free(r->ents, r->nents);
		free(r->name);
		vput[nput++] = r->n.view;
		free(r);
		r = p;
	}
	pthread_mutex_unlock(&rf.lock);
	while (nput > 0)
		view_put(vput[--nput]);
}

/* The path in the sandbox of r into b.  rf.lock held.  0, ENOENT (r, or
 * a directory above it, was removed) or ENAMETOOLONG. */
static int rf_path_locked(struct rnode *r, struct buf *b)
{
	const char *names[256];
	int depth = 0;
	struct rnode *top = r;

	while (top->parent) {
		if (!top->name)
			return ENOENT;
		if (depth == 256)
			return ENAMETOOLONG;
		names[depth++] = top->name;
		top = top->parent;
	}
	if (buf_adds(b, layout_sandbox_path((enum layout_dir)top->n.which)))
		return ENAMETOOLONG;
	while (depth > 0)
		if (buf_addpath(b, names[--depth]))
			return ENAMETOOLONG;
	return 0;
}

static void rf_present(struct rnode *r, struct stat *st)
{
	struct view *v = r->n.view;

	st->st_uid = v->pres_uid;
	st->st_gid = v->pres_gid;
	st->st_ino = (ino_t)(uintptr_t)r;
	if (!st->st_blksize)
		st->st_blksize = 4096;
	st->st_blocks = (st->st_size + 511) / 512;
	if (!S_ISDIR(st->st_mode) && !S_ISREG(st->st_mode) && !S_ISLNK(st->st_mode))
		st->st_mode = S_IFREG; /* FIFOs, sockets, devices a job made: shown, never opened (ENXIO) */
	if (!st->st_nlink)
		st->st_nlink = S_ISDIR(st->st_mode) ? 2 : 1;
}

/* rf.lock held: r's attributes as they stand locally (a file being
 * written has the cache's size). */
static void rf_attr_locked(struct rnode *r, struct stat *st)
{
	*st = r->st;
	if (r->cfd >= 0 && (r->dirty || r->local_new || r->nwriters))
		st->st_size = r->csize;
}

static void rf_set_st_locked(struct rnode *r, const struct stat *st)
{
	r->st = *st;
	rf_present(r, &r->st);
	r->st_ms = util_now_ms();
}

/* rf.lock held: an entry for r, counting a kernel lookup. */
static void rf_entry_locked(struct rnode *r, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	r->nlookup++;
	e->ino = (fuse_ino_t)(uintptr_t)r;
	rf_attr_locked(r, &e->attr);
	e->attr_timeout = RFILES_KERNEL_TTL;
	e->entry_timeout = RFILES_KERNEL_TTL;
}

/* A lookup the kernel will not hear of (the reply failed): undo it. */
static void rf_forget(struct node *n, uint64_t count)
{
	struct rnode *r = (struct rnode *)n;
	bool last;

	pthread_mutex_lock(&rf.lock);
	r->nlookup = r->nlookup > count ? r->nlookup - count : 0;
	last = r->nlookup == 0;
	pthread_mutex_unlock(&rf.lock);
	if (last)
		rf_unref(r); /* the ref nlookup != 0 held */
}

/* rf.lock held: r gets a kernel lookup; the first takes a ref. */
static void rf_lookup_ref_locked(struct rnode *r)
{
	if (r->nlookup == 0)
		r->refs++;
}

/* req NULL: answered already (an interrupt): the lookup is not counted. */
static void rf_reply_entry(fuse_req_t req, struct rnode *r, struct fuse_entry_param *e)
{
	if (!req || fuse_reply_entry(req, e) == -ENOENT)
		rf_forget(&r->n, 1);
}

/* ---- the box and errors -------------------------------------------------------- */

struct sbx_box *rf_box(struct view *v)
{
	return pool_box(v->sbx);
}

int rf_errno(enum sbx_err e)
{
	return sbx_err_errno(e);
}

bool rfiles_is_remote(struct view *v, int which)
{
	struct sbx_box *box;
	bool remote;

	if (which == DD_SKILLS)
		return false;
	box = rf_box(v);
	remote = sbx_files(box) != NULL;
	sbx_box_put(box);
	return remote;
}

int rfiles_lookup_root(struct view *v, int which, struct fuse_entry_param *e)
{
	struct rnode *r;

	pthread_mutex_lock(&rf.lock);
	r = rf_get_locked(v, NULL, which, rf_names[which]);
	if (!r) {
		pthread_mutex_unlock(&rf.lock);
		return ENOMEM;
	}
	if (!r->st_ms) { /* the bootstrap made it: a directory of the user's */
		r->st.st_mode = S_IFDIR | 0755;
		r->st.st_nlink = 2;
		rf_present(r, &r->st);
		clock_gettime(CLOCK_REALTIME, &r->st.st_mtim);
		r->st.st_ctim = r->st.st_atim = r->st.st_mtim;
		r->st_ms = 1; /* stale: a getattr asks the sandbox */
	}
	rf_lookup_ref_locked(r);
	rf_entry_locked(r, e);
	r->refs--; /* the get's ref: the lookup holds one now */
	pthread_mutex_unlock(&rf.lock);
	return 0;
}

/* ---- work items: requests served on the work pool ------------------------------------------ */

struct rf_work {
	/* first: the work item, its request, deadline (request_timeout from
	 * the request's arrival) and cancel (the FUSE interrupt, which answers
	 * EINTR at once); the token is current on the work thread while fn
	 * runs, so every provider call under it is bounded and stops at once */
	struct fswork fw;
	struct rnode *r;  /* referenced */
	struct rnode *r2; /* rename: the new parent, referenced */
	char *name, *name2;
	mode_t mode;
	unsigned flags;
	off_t off;
	size_t size;
	int valid;
	struct stat attr;
	struct fuse_file_info fi;
	bool has_fi;
	void (*fn)(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops);
	bool queued; /* fswork_start succeeded: the token is released at the end */
};

static void rf_work_free(struct rf_work *j)
{
	if (j->r)
		rf_unref(j->r);
	if (j->r2)
		rf_unref(j->r2);
	if (j->queued)
		work_fini(&j->fw.w);
	free(j->name);
	free(j->name2);
	free(j);
}

/* j's request, to be answered now, or NULL when an interrupt answered it
 * already (EINTR): then what the work item made for the reply is undone. */
static fuse_req_t rf_work_req(struct rf_work *j)
{
	return fswork_req(&j->fw);
}

/* Answer j with err; a work item whose caller gave up answers EINTR, whatever
 * error the abandoned call ended with. */
static void rf_work_err(struct rf_work *j, int err)
{
	fswork_reply_err(&j->fw, err);
}

static void rf_work_attr(struct rf_work *j, const struct stat *st)
{
	fuse_req_t req = rf_work_req(j);

	if (req)
		fuse_reply_attr(req, st, RFILES_KERNEL_TTL);
}

/* fuse_reply_open's result: -ENOENT when nobody takes the handle (the
 * caller is gone, or an interrupt answered): the caller undoes the open. */
static int rf_work_open(struct rf_work *j, const struct fuse_file_info *fi)
{
	fuse_req_t req = rf_work_req(j);

	return req ? fuse_reply_open(req, fi) : -ENOENT;
}

static void rf_run_upload(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops);

static void rf_work_run(struct work *w)
{
	struct rf_work *j = (struct rf_work *)w;
	struct sbx_box *box;
	const struct sbx_files_ops *ops;
	struct token *prev;
	enum sbx_err e = token_check(&w->tok);

	if (e) { /* interrupted, or too late, while queued */
		if (j->fn == rf_run_upload)
			log_warn(j->r->n.view->sbx->token, "upload of a written file not begun: %s (kept locally; the "
							 "next close or fsync retries)", strerror(rf_errno(e)));
		rf_work_err(j, rf_errno(e));
		rf_work_free(j);
		return;
	}
	box = rf_box(j->r->n.view);
	ops = sbx_files(box);
	prev = token_enter(&w->tok);
	if (!ops || j->r->n.view->dead)
		rf_work_err(j, ENOENT);
	else
		j->fn(j, box, ops);
	token_leave(prev);
	sbx_box_put(box);
	rf_work_free(j);
}

/* What bounds one remote-files request in total: the sandbox's
 * request_timeout (the daemon's when it has none). */
long rf_timeout_ms(struct view *v)
{
	struct sbx_config *cfg = pool_sbx_config(v->sbx);
	long ms;

	if (!cfg)
		cfg = pool_config();
	ms = cfg ? cfg->request_timeout * 1000 : 30000;
	config_put(cfg);
	return ms;
}

/* A work item on r (and r2) for req; on failure req is answered. */
static void rf_work_submit(fuse_req_t req, struct rnode *r, struct rnode *r2, const char *name, const char *name2,
	void (*fn)(struct rf_work *, struct sbx_box *, const struct sbx_files_ops *), struct rf_work *tmpl)
{
	struct rf_work *j = calloc(1, sizeof(*j));
	int err;

	if (!j || (name && !(j->name = strdup(name))) || (name2 && !(j->name2 = strdup(name2)))) {
		if (j) {
			free(j->name);
			free(j);
		}
		return (void)fuse_reply_err(req, ENOMEM);
	}
	if (tmpl) {
		j->mode = tmpl->mode;
		j->flags = tmpl->flags;
		j->off = tmpl->off;
		j->size = tmpl->size;
		j->valid = tmpl->valid;
		j->attr = tmpl->attr;
		j->fi = tmpl->fi;
		j->has_fi = tmpl->has_fi;
	}
	j->fn = fn;
	pthread_mutex_lock(&rf.lock);
	r->refs++;
	if (r2)
		r2->refs++;
	pthread_mutex_unlock(&rf.lock);
	j->r = r;
	j->r2 = r2;
	/* the sandbox's lane of the I/O queue: one sandbox's many requests
	 * never hold another's */
	j->queued = true; /* before: once queued, j may be gone at any time */
	err = fswork_start(&j->fw, req, WORK_IO, r->n.view->sbx->token, rf_timeout_ms(r->n.view), true, rf_work_run);
	if (err) {
		j->queued = false; /* answered, token released */
		rf_work_free(j);
	}
}

/* The path of r (and /name under it) for a work item. */
int rf_path(struct rnode *r, const char *name, struct buf *b)
{
	int e;

	pthread_mutex_lock(&rf.lock);
	e = rf_path_locked(r, b);
	pthread_mutex_unlock(&rf.lock);
	if (!e && name && buf_addpath(b, name))
		e = ENAMETOOLONG;
	return e;
}

/* Stat path into r's attributes.  0 or an errno. */
static int rf_stat_into(struct rnode *r, const char *path, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct stat st;
	enum sbx_err e;

	memset(&st, 0, sizeof(st));
	e = ops->stat(box, path, &st);
	if (e)
		return rf_errno(e);
	pthread_mutex_lock(&rf.lock);
	rf_set_st_locked(r, &st);
	pthread_mutex_unlock(&rf.lock);
	return 0;
}

/* rf.lock held: p's listing, when fresh, gets name with st (added, or
 * updated), so that what this side just made does not cost the next
 * lookup a round trip. */
static void rf_listing_put_locked(struct rnode *p, const char *name, const struct stat *st)
{
	struct sbx_dirent *v;

	if (!p->list_ms || util_now_ms() - p->list_ms > RFILES_TTL_MS)
		return;
	for (size_t i = 0; i < p->nents; i++)
		if (!strcmp(p->ents[i].name, name)) {
			p->ents[i].st = *st;
			return;
		}
	v = realloc(p->ents, (p->nents + 1) * sizeof(*v));
	if (v)
		p->ents = v;
	if (!v || !(v[p->nents].name = strdup(name))) {
		p->list_ms = 0; /* cannot tell: ask again */
		return;
	}
	v[p->nents++].st = *st;
}

static void rf_parent_changed(struct rnode *p)
{
	pthread_mutex_lock(&rf.lock);
	p->list_ms = 0;
	p->st_ms = 0;
	pthread_mutex_unlock(&rf.lock);
}

/* ---- lookup and attributes -------------------------------------------------------------- */

static void rf_run_lookup(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct fuse_entry_param e;
	struct rnode *r = NULL;
	struct stat st;
	enum sbx_err se;
	int err = rf_path(j->r, j->name, &path);

	memset(&st, 0, sizeof(st));
	if (!err) {
		se = ops->stat(box, path.ptr, &st);
		err = rf_errno(se);
	}
	buf_free(&path);
	if (err == ENOENT) {
		memset(&e, 0, sizeof(e)); /* negative, not cached: a job may make it */
		fuse_req_t req = rf_work_req(j);

		if (req)
			fuse_reply_entry(req, &e);
		return;
	}
	if (err)
		return rf_work_err(j, err);
	pthread_mutex_lock(&rf.lock);
	r = rf_get_locked(j->r->n.view, j->r, j->r->n.which, j->name);
	if (r) {
		if (!r->local_new)
			rf_set_st_locked(r, &st);
		rf_lookup_ref_locked(r);
		rf_entry_locked(r, &e);
		r->refs--;
	}
	pthread_mutex_unlock(&rf.lock);
	if (!r)
		return rf_work_err(j, ENOMEM);
	rf_reply_entry(rf_work_req(j), r, &e);
}

/* rf.lock held: the parent's fresh listing says whether name exists
 * (1, with its attributes in st), does not (0), or cannot tell (-1). */
static int rf_listing_says_locked(struct rnode *p, const char *name, struct stat *st)
{
	if (!p->list_ms || util_now_ms() - p->list_ms > RFILES_TTL_MS)
		return -1;
	for (size_t i = 0; i < p->nents; i++)
		if (!strcmp(p->ents[i].name, name)) {
			*st = p->ents[i].st;
			return 1;
		}
	return 0;
}

static void rf_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct rnode *p = rnode(parent), *r;
	struct fuse_entry_param e;
	struct stat st;
	uint64_t now = util_now_ms();
	int says;

	if (bad_name(name))
		return node_reply_entry(req, ENOENT, NULL);
	pthread_mutex_lock(&rf.lock);
	r = rf_find_locked(p->n.view, p, name);
	if (r && (r->local_new || (r->st_ms > 1 && now - r->st_ms <= RFILES_TTL_MS))) {
		rf_lookup_ref_locked(r);
		rf_entry_locked(r, &e);
		pthread_mutex_unlock(&rf.lock);
		return rf_reply_entry(req, r, &e);
	}
	says = rf_listing_says_locked(p, name, &st);
	if (says == 1) {
		r = rf_get_locked(p->n.view, p, p->n.which, name);
		if (r) {
			rf_set_st_locked(r, &st);
			rf_lookup_ref_locked(r);
			rf_entry_locked(r, &e);
			r->refs--;
		}
		pthread_mutex_unlock(&rf.lock);
		if (!r)
			return (void)fuse_reply_err(req, ENOMEM);
		return rf_reply_entry(req, r, &e);
	}
	pthread_mutex_unlock(&rf.lock);
	if (says == 0)
		return node_reply_entry(req, ENOENT, NULL);
	rf_work_submit(req, p, NULL, name, NULL, rf_run_lookup, NULL);
}

static void rf_run_getattr(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct stat st;
	int err = rf_path(j->r, NULL, &path);

	if (!err)
		err = rf_stat_into(j->r, path.ptr, box, ops);
	buf_free(&path);
	if (err)
		return rf_work_err(j, err);
	pthread_mutex_lock(&rf.lock);
	rf_attr_locked(j->r, &st);
	pthread_mutex_unlock(&rf.lock);
	rf_work_attr(j, &st);
}

static void rf_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rnode *r = rnode(ino);
	struct stat st;
	bool fresh;

	(void)fi;
	pthread_mutex_lock(&rf.lock);
	fresh = r->local_new || r->dirty || r->nwriters || (r->st_ms > 1 && util_now_ms() - r->st_ms <= RFILES_TTL_MS);
	if (fresh)
		rf_attr_locked(r, &st);
	pthread_mutex_unlock(&rf.lock);
	if (fresh)
		return (void)fuse_reply_attr(req, &st, RFILES_KERNEL_TTL);
	if (!r->name) /* removed: what the kernel holds open */
		return (void)fuse_reply_err(req, ENOENT);
	rf_work_submit(req, r, NULL, NULL, NULL, rf_run_getattr, NULL);
}

/* ---- open, read, write, close ----------------------------------------------------------------- */

static int rf_writable(int flags)
{
	return (flags & O_ACCMODE) != O_RDONLY;
}

/* rf.lock held: r's cache is of the version of the file that attributes
 * fetched within RFILES_TTL_MS describe, and no job ended since (which
 * makes them stale): an open may use it without asking the sandbox again.
 * A close followed by an open (cp, then cat) costs no round trip; a job's
 * change is still seen at the first open after the job's end. */
static bool rf_cache_fresh_locked(const struct rnode *r)
{
	return r->cfd >= 0 && S_ISREG(r->st.st_mode) && r->st_ms > 1 && util_now_ms() - r->st_ms <= RFILES_TTL_MS &&
	       r->rsize == r->st.st_size && r->rmtime.tv_sec == r->st.st_mtim.tv_sec &&
	       r->rmtime.tv_nsec == r->st.st_mtim.tv_nsec;
}

static void rf_run_open(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct rnode *r = j->r;
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct fuse_file_info *fi = &j->fi;
	struct rfh *h = NULL;
	struct stat st;
	bool keep = false, local;
	/* the cache file's descriptor, kept while the file is open: charged
	 * first, so a sandbox past its budget downloads nothing */
	int err = budget_take(r->n.view->fds, BUDGET_DATA, 1);
	bool charged = !err;

	if (!err)
		err = rf_path(r, NULL, &path);
	pthread_mutex_lock(&rf.lock);
	local = r->cfd >= 0 && (r->dirty || r->local_new || r->nwriters);
	keep = !local && rf_cache_fresh_locked(r);
	pthread_mutex_unlock(&rf.lock);
	if (!err && !local && !keep) { /* close-to-open: what does the sandbox have now? */
		memset(&st, 0, sizeof(st));
		err = rf_errno(ops->stat(box, path.ptr, &st));
		if (!err && S_ISDIR(st.st_mode))
			err = EISDIR;
		else if (!err && !S_ISREG(st.st_mode))
			err = ENXIO; /* a FIFO, socket or device a job made: never opened */
		if (!err) {
			pthread_mutex_lock(&rf.lock);
			rf_set_st_locked(r, &st);
			keep = r->cfd >= 0 && r->rsize == st.st_size && r->rmtime.tv_sec == st.st_mtim.tv_sec &&
			       r->rmtime.tv_nsec == st.st_mtim.tv_nsec;
			if (!keep) {
				err = rcache_make_locked(r, st.st_size, false);
				r->rsize = st.st_size;
				r->rmtime = st.st_mtim;
			}
			pthread_mutex_unlock(&rf.lock);
		}
	}
	if (!err && (fi->flags & O_TRUNC) && rf_writable(fi->flags)) {
		pthread_mutex_lock(&rf.lock);
		if (r->cfd < 0 || ftruncate(r->cfd, 0)) {
			err = r->cfd < 0 ? EIO : errno;
		} else {
			r->csize = 0;
			memset(r->chunks, CH_PRESENT, r->nchunks); /* nothing left to fetch */
			r->dirty = true;
			r->wgen++;
		}
		pthread_mutex_unlock(&rf.lock);
		keep = false;
	} else if (!err) {
		off_t size;
		pthread_mutex_lock(&rf.lock);
		size = r->csize;
		pthread_mutex_unlock(&rf.lock);
		/* a writer uploads the whole file; a small file costs one request */
		if (rf_writable(fi->flags) || size <= RFILES_WHOLE)
			err = rcache_fetch(r, path.ptr, 0, (size_t)size, box, ops);
	}
	buf_free(&path);
	if (!err && !(h = handle_alloc(sizeof(*h), NULL)))
		err = ENOMEM;
	if (err) {
		if (charged)
			budget_give(r->n.view->fds, BUDGET_DATA, 1);
		return rf_work_err(j, err);
	}
	pthread_mutex_lock(&rf.lock);
	h->r = r;
	h->flags = fi->flags;
	r->refs++; /* the handle's */
	r->nopen++;
	r->used_ms = util_now_ms();
	if (rf_writable(fi->flags))
		r->nwriters++;
	pthread_mutex_unlock(&rf.lock);
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->keep_cache = keep;
	fi->noflush = 0; /* close(2) uploads */
	rcache_trim(r);
	if (rf_work_open(j, fi) == -ENOENT) {
		pthread_mutex_lock(&rf.lock);
		r->nopen--;
		if (rf_writable(fi->flags))
			r->nwriters--;
		pthread_mutex_unlock(&rf.lock);
		handle_discard(h);
		budget_give(r->n.view->fds, BUDGET_DATA, 1);
		rf_unref(r);
	}
}

static void rf_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rf_work t = { .fi = *fi, .has_fi = true };
	struct rnode *r = rnode(ino);

	if (S_ISDIR(r->st.st_mode))
		return (void)fuse_reply_err(req, EISDIR);
	/* the job replies with its own copy of fi: libfuse reads only what
	 * the reply carries */
	rf_work_submit(req, r, NULL, NULL, NULL, rf_run_open, &t);
}

static void rf_run_read(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
	int err = rf_path(j->r, NULL, &path), fd;
	off_t size;
	size_t want = j->size, ahead;

	pthread_mutex_lock(&rf.lock);
	size = j->r->csize;
	ahead = rcache_window_locked(j->r, j->off, want);
	pthread_mutex_unlock(&rf.lock);
	if (!err)
		err = rcache_fetch(j->r, path.ptr, j->off, want + ahead, box, ops);
	buf_free(&path);
	if (err)
		return rf_work_err(j, err);
	pthread_mutex_lock(&rf.lock);
	fd = j->r->cfd >= 0 ? dup(j->r->cfd) : -1;
	pthread_mutex_unlock(&rf.lock);
	if (fd < 0)
		return rf_work_err(j, EIO);
	if (j->off >= size)
		want = 0;
	else if ((off_t)want > size - j->off)
		want = (size_t)(size - j->off);
	bv.buf[0].size = want;
	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = fd;
	bv.buf[0].pos = j->off;
	fuse_req_t req = rf_work_req(j);

	if (req)
		fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
	close(fd);
	rcache_trim(j->r);
}

static void rf_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct rnode *r = rnode(ino);
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
	struct rf_work t = { .off = off, .size = size };
	bool have, ra = false;
	int fd = -1;
	off_t csize, ra_off = 0;
	size_t ra_len = 0;

	(void)fi;
	pthread_mutex_lock(&rf.lock);
	have = rcache_have_locked(r, off, size);
	csize = r->csize;
	r->used_ms = util_now_ms();
	if (have) {
		ra = rcache_readahead_locked(r, off, size, &ra_off, &ra_len);
		fd = dup(r->cfd);
	}
	pthread_mutex_unlock(&rf.lock);
	if (!have)
		return rf_work_submit(req, r, NULL, NULL, NULL, rf_run_read, &t);
	if (ra)
		rcache_prefetch(r, ra_off, ra_len);
	if (fd < 0)
		return (void)fuse_reply_err(req, EIO);
	if (off >= csize)
		size = 0;
	else if ((off_t)size > csize - off)
		size = (size_t)(csize - off);
	bv.buf[0].size = size;
	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = fd;
	bv.buf[0].pos = off;
	fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
	close(fd);
}

static void rf_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off,
	struct fuse_file_info *fi)
{
	struct rnode *r = rnode(ino);
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
	ssize_t res;
	int fd;

	(void)fi;
	pthread_mutex_lock(&rf.lock);
	fd = r->cfd >= 0 ? dup(r->cfd) : -1;
	pthread_mutex_unlock(&rf.lock);
	if (fd < 0)
		return (void)fuse_reply_err(req, EIO);
	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	out.buf[0].fd = fd;
	out.buf[0].pos = off;
	res = fuse_buf_copy(&out, in, 0);
	close(fd);
	if (res < 0)
		return (void)fuse_reply_err(req, (int)-res);
	pthread_mutex_lock(&rf.lock);
	if (rcache_grow_locked(r, off + res)) {
		pthread_mutex_unlock(&rf.lock);
		return (void)fuse_reply_err(req, ENOMEM);
	}
	r->dirty = true;
	r->wgen++;
	rf.cached += (uint64_t)res; /* overwrites count twice: the cap's recount corrects it */
	pthread_mutex_unlock(&rf.lock);
	fuse_reply_write(req, (size_t)res);
}

/* Upload r's cache if it has changes.  0 or an errno (the local copy stays
 * dirty). */
static int rf_upload(struct rnode *r, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	uint64_t wgen;
	off_t size;
	mode_t mode;
	int fd = -1, err;
	struct stat st;

	pthread_mutex_lock(&rf.lock);
	if (!r->dirty || r->cfd < 0) {
		pthread_mutex_unlock(&rf.lock);
		return 0;
	}
	wgen = r->wgen;
	size = r->csize;
	mode = r->st.st_mode & 07777;
	fd = dup(r->cfd);
	pthread_mutex_unlock(&rf.lock);
	err = fd < 0 ? EIO : rf_path(r, NULL, &path);
	if (err == ENOENT) { /* removed while open: its writes have no name to go to */
		pthread_mutex_lock(&rf.lock);
		r->dirty = false;
		pthread_mutex_unlock(&rf.lock);
		err = 0;
		goto out;
	}
	if (!err)
		err = rf_errno(ops->write(box, path.ptr, fd, size, mode));
	if (!err) { /* the sandbox's new identity of the file: the cache is of it */
		memset(&st, 0, sizeof(st));
		if (ops->stat(box, path.ptr, &st) == SBX_OK) {
			pthread_mutex_lock(&rf.lock);
			rf_set_st_locked(r, &st);
			r->rsize = st.st_size;
			r->rmtime = st.st_mtim;
			pthread_mutex_unlock(&rf.lock);
		}
		pthread_mutex_lock(&rf.lock);
		r->local_new = false;
		if (r->wgen == wgen)
			r->dirty = false;
		if (r->parent && r->name)
			rf_listing_put_locked(r->parent, r->name, &r->st);
		pthread_mutex_unlock(&rf.lock);
	} else {
		log_warn(r->n.view->sbx->token, "upload of %s failed: %s (kept locally; the next close or fsync retries)",
			path.len ? path.ptr : "?", strerror(err));
	}
out:
	if (fd >= 0)
		close(fd);
	buf_free(&path);
	return err;
}

static void rf_run_upload(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	rf_work_err(j, rf_upload(j->r, box, ops));
	rcache_trim(j->r);
}

static void rf_flush_or_fsync(fuse_req_t req, struct rnode *r)
{
	bool dirty;

	pthread_mutex_lock(&rf.lock);
	dirty = r->dirty && r->cfd >= 0;
	pthread_mutex_unlock(&rf.lock);
	if (!dirty)
		return (void)fuse_reply_err(req, 0);
	rf_work_submit(req, r, NULL, NULL, NULL, rf_run_upload, NULL);
}

static void rf_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rfh *h = (struct rfh *)(uintptr_t)fi->fh;

	/* close(2) of a reader never uploads (nor fails on) another writer's
	 * changes: a failed upload fails the writer's close, and an fsync on
	 * any handle, as with NFS */
	if (!rf_writable(h->flags))
		return (void)fuse_reply_err(req, 0);
	rf_flush_or_fsync(req, rnode(ino));
}

static void rf_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)datasync;
	(void)fi;
	rf_flush_or_fsync(req, rnode(ino));
}

static void rf_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rfh *h = (struct rfh *)(uintptr_t)fi->fh;
	struct rnode *r = rnode(ino);

	pthread_mutex_lock(&rf.lock);
	r->nopen--;
	if (rf_writable(h->flags))
		r->nwriters--;
	pthread_mutex_unlock(&rf.lock);
	handle_retire(h);
	budget_give(r->n.view->fds, BUDGET_DATA, 1);
	rf_unref(r);
	fuse_reply_err(req, 0);
}

static void rf_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	struct rnode *r = rnode(ino);
	off_t size;

	(void)fi;
	pthread_mutex_lock(&rf.lock);
	size = r->cfd >= 0 ? r->csize : r->st.st_size;
	pthread_mutex_unlock(&rf.lock);
	if (whence == SEEK_DATA)
		return off < size ? (void)fuse_reply_lseek(req, off) : (void)fuse_reply_err(req, ENXIO);
	if (whence == SEEK_HOLE)
		return off < size ? (void)fuse_reply_lseek(req, size) : (void)fuse_reply_err(req, ENXIO);
	fuse_reply_err(req, EINVAL);
}

/* ---- create and namespace changes --------------------------------------------------------------- */

static void rf_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	struct rnode *p = rnode(parent), *r, *got = NULL;
	struct fuse_entry_param e;
	struct rfh *h;
	int err = 0;

	if (bad_name(name))
		return (void)fuse_reply_err(req, EPERM);
	if ((err = budget_take(p->n.view->fds, BUDGET_DATA, 1))) /* as rf_run_open */
		return (void)fuse_reply_err(req, err);
	h = handle_alloc(sizeof(*h), NULL);
	if (!h) {
		budget_give(p->n.view->fds, BUDGET_DATA, 1);
		return (void)fuse_reply_err(req, ENOMEM);
	}
	/* made here, uploaded at close (close-to-open): no round trip now */
	pthread_mutex_lock(&rf.lock);
	r = rf_find_locked(p->n.view, p, name);
	if (r && !r->local_new && (fi->flags & O_EXCL)) {
		err = EEXIST;
	} else {
		r = got = rf_get_locked(p->n.view, p, p->n.which, name);
		if (!r)
			err = ENOMEM;
	}
	if (!err) {
		err = rcache_make_locked(r, 0, true);
		if (!err) {
			memset(&r->st, 0, sizeof(r->st));
			r->st.st_mode = S_IFREG | (mode & 07777);
			clock_gettime(CLOCK_REALTIME, &r->st.st_mtim);
			r->st.st_atim = r->st.st_ctim = r->st.st_mtim;
			rf_present(r, &r->st);
			r->st_ms = util_now_ms();
			r->local_new = true;
			r->dirty = true;
			r->wgen++;
			r->nwriters++;
			r->nopen++;
			r->used_ms = r->st_ms;
			r->refs++; /* the handle's */
			h->r = r;
			h->flags = fi->flags;
			rf_lookup_ref_locked(r);
			rf_entry_locked(r, &e);
			rf_listing_put_locked(p, name, &r->st);
		}
	}
	pthread_mutex_unlock(&rf.lock);
	if (got)
		rf_unref(got); /* the get's */
	if (err) {
		handle_discard(h);
		budget_give(p->n.view->fds, BUDGET_DATA, 1);
		return (void)fuse_reply_err(req, err);
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->noflush = 0;
	if (fuse_reply_create(req, &e, fi) == -ENOENT) {
		pthread_mutex_lock(&rf.lock);
		r->nwriters--;
		r->nopen--;
		pthread_mutex_unlock(&rf.lock);
		handle_discard(h);
		budget_give(p->n.view->fds, BUDGET_DATA, 1);
		rf_unref(r);
		rf_forget(&r->n, 1);
	}
}

static void rf_run_mkdir(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct fuse_entry_param e;
	struct stat st;
	struct rnode *r = NULL;
	int err = rf_path(j->r, j->name, &path);

	memset(&st, 0, sizeof(st));
	if (!err && ops->stat(box, path.ptr, &st) == SBX_OK)
		err = EEXIST; /* the API's mkdir is mkdir -p */
	if (!err)
		err = rf_errno(ops->mkdir(box, path.ptr, j->mode & 07777));
	if (!err)
		err = rf_errno(ops->stat(box, path.ptr, &st));
	buf_free(&path);
	if (err) {
		rf_parent_changed(j->r);
		return rf_work_err(j, err);
	}
	pthread_mutex_lock(&rf.lock);
	j->r->st_ms = 0; /* its mtime and link count changed */
	r = rf_get_locked(j->r->n.view, j->r, j->r->n.which, j->name);
	if (r) {
		rf_set_st_locked(r, &st);
		rf_listing_put_locked(j->r, j->name, &r->st);
		sbx_dirents_free(r->ents, r->nents); /* made just now: nothing in it yet */
		r->ents = NULL;
		r->nents = 0;
		r->list_ms = util_now_ms();
		rf_lookup_ref_locked(r);
		rf_entry_locked(r, &e);
		r->refs--;
	}
	pthread_mutex_unlock(&rf.lock);
	if (!r)
		return rf_work_err(j, ENOMEM);
	rf_reply_entry(rf_work_req(j), r, &e);
}

static void rf_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct rf_work t = { .mode = mode };

	if (bad_name(name))
		return (void)fuse_reply_err(req, EPERM);
	rf_work_submit(req, rnode(parent), NULL, name, NULL, rf_run_mkdir, &t);
}

/* rf.lock held: (p, name) no longer names r in the sandbox. */
static void rf_detach_locked(struct rnode *p, const char *name)
{
	struct rnode *r = rf_find_locked(p->n.view, p, name);

	if (r) {
		rf_unhash_locked(r);
		free(r->name);
		r->name = NULL;
		r->st_ms = 0;
		r->local_new = false;
	}
	p->list_ms = 0;
	p->st_ms = 0;
}

static void rf_run_unlink(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct stat st;
	struct rnode *r;
	bool local = false;
	int err = rf_path(j->r, j->name, &path);

	pthread_mutex_lock(&rf.lock);
	r = rf_find_locked(j->r->n.view, j->r, j->name);
	local = r && r->local_new;
	pthread_mutex_unlock(&rf.lock);
	memset(&st, 0, sizeof(st));
	if (!err && !local) {
		err = rf_errno(ops->stat(box, path.ptr, &st));
		if (!err && S_ISDIR(st.st_mode))
			err = EISDIR;
		if (!err)
			err = rf_errno(ops->unlink(box, path.ptr));
	}
	buf_free(&path);
	if (!err) {
		pthread_mutex_lock(&rf.lock);
		r = rf_find_locked(j->r->n.view, j->r, j->name);
		if (r)
			r->dirty = false; /* removed: nothing to upload or keep */
		rf_detach_locked(j->r, j->name);
		pthread_mutex_unlock(&rf.lock);
	}
	rf_work_err(j, err);
}

static void rf_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	rf_work_submit(req, rnode(parent), NULL, name, NULL, rf_run_unlink, NULL);
}

static void rf_run_rmdir(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct sbx_dirent *ents = NULL;
	size_t n = 0;
	int err = rf_path(j->r, j->name, &path);

	/* the API removes a tree; rmdir(2) removes an empty directory only */
	if (!err)
		err = rf_errno(ops->list(box, path.ptr, &ents, &n));
	if (!err && n)
		err = ENOTEMPTY;
	sbx_dirents_free(ents, n);
	if (!err)
		err = rf_errno(ops->rmdir(box, path.ptr));
	buf_free(&path);
	if (!err) {
		pthread_mutex_lock(&rf.lock);
		rf_detach_locked(j->r, j->name);
		pthread_mutex_unlock(&rf.lock);
	}
	rf_work_err(j, err);
}

static void rf_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	rf_work_submit(req, rnode(parent), NULL, name, NULL, rf_run_rmdir, NULL);
}

static void rf_run_rename(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct buf from = BUF_INIT(BUF_CAP_PATH), to = BUF_INIT(BUF_CAP_PATH);
	struct stat sst, dst;
	struct rnode *r, *victim;
	bool local;
	int err = rf_path(j->r, j->name, &from);

	if (!err)
		err = rf_path(j->r2, j->name2, &to);
	pthread_mutex_lock(&rf.lock);
	r = rf_find_locked(j->r->n.view, j->r, j->name);
	local = r && r->local_new;
	pthread_mutex_unlock(&rf.lock);
	memset(&sst, 0, sizeof(sst));
	memset(&dst, 0, sizeof(dst));
	if (!err && local) {
		sst.st_mode = S_IFREG; /* only here: the upload at its close goes to the new name */
	} else if (!err) {
		err = rf_errno(ops->stat(box, from.ptr, &sst));
	}
	if (!err && !strcmp(from.ptr, to.ptr))
		goto reply; /* rename to itself */
	if (!err && ops->stat(box, to.ptr, &dst) == SBX_OK) {
		/* POSIX replaces the target; the API refuses an existing one */
		if (j->flags & RENAME_NOREPLACE)
			err = EEXIST;
		else if (S_ISDIR(dst.st_mode) && !S_ISDIR(sst.st_mode))
			err = EISDIR;
		else if (!S_ISDIR(dst.st_mode) && S_ISDIR(sst.st_mode))
			err = ENOTDIR;
		else if (S_ISDIR(dst.st_mode)) {
			struct sbx_dirent *ents = NULL;
			size_t n = 0;
			err = rf_errno(ops->list(box, to.ptr, &ents, &n));
			if (!err && n)
				err = ENOTEMPTY;
			sbx_dirents_free(ents, n);
			if (!err)
				err = rf_errno(ops->rmdir(box, to.ptr));
		} else {
			err = rf_errno(ops->unlink(box, to.ptr));
		}
	}
	if (!err && !local)
		err = rf_errno(ops->rename(box, from.ptr, to.ptr));
	if (!err) {
		pthread_mutex_lock(&rf.lock);
		victim = rf_find_locked(j->r2->n.view, j->r2, j->name2);
		if (victim && victim != r) {
			victim->dirty = false;
			rf_detach_locked(j->r2, j->name2);
		}
		r = rf_find_locked(j->r->n.view, j->r, j->name);
		if (r) {
			char *nn = strdup(j->name2);
			if (nn) {
				rf_unhash_locked(r);
				free(r->name);
				r->name = nn;
				if (r->parent != j->r2) {
					j->r2->refs++;
					r->parent->refs--; /* the job holds it: never the last */
					r->parent = j->r2;
				}
				rf_hash_locked(r);
			} else {
				rf_detach_locked(j->r, j->name); /* forgotten: looked up again */
			}
		}
		j->r->list_ms = j->r2->list_ms = 0;
		j->r->st_ms = j->r2->st_ms = 0;
		pthread_mutex_unlock(&rf.lock);
	}
reply:
	buf_free(&from);
	buf_free(&to);
	rf_work_err(j, err);
}

static void rf_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
	unsigned int flags)
{
	struct rf_work t = { .flags = flags };
	struct node *np = node_of(newparent);

	if (bad_name(name) || bad_name(newname))
		return (void)fuse_reply_err(req, EPERM);
	if (np->kind != N_RFILE || np->view != rnode(parent)->n.view)
		return (void)fuse_reply_err(req, EXDEV);
	if (flags & RENAME_EXCHANGE)
		return (void)fuse_reply_err(req, EINVAL); /* the API cannot swap two names */
	rf_work_submit(req, rnode(parent), rnode(newparent), name, newname, rf_run_rename, &t);
}

static void rf_run_setattr(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct rnode *r = j->r;
	struct stat st;
	bool local;
	int perr = rf_path(r, NULL, &path), err;

	pthread_mutex_lock(&rf.lock);
	local = r->cfd >= 0 && (r->dirty || r->local_new || r->nwriters);
	pthread_mutex_unlock(&rf.lock);
	/* an open file removed meanwhile has its cache alone to change */
	err = local && perr == ENOENT ? 0 : perr;
	if (!err && (j->valid & FUSE_SET_ATTR_MODE)) {
		if (!(local && (r->local_new || perr)))
			err = rf_errno(ops->chmod(box, path.ptr, j->attr.st_mode & 07777));
		if (!err) {
			pthread_mutex_lock(&rf.lock);
			r->st.st_mode = (r->st.st_mode & S_IFMT) | (j->attr.st_mode & 07777);
			pthread_mutex_unlock(&rf.lock);
		}
	}
	if (!err && (j->valid & FUSE_SET_ATTR_SIZE)) {
		if (local) { /* open for writing: the cache, uploaded at close */
			pthread_mutex_lock(&rf.lock);
			if (ftruncate(r->cfd, j->attr.st_size)) {
				err = errno;
			} else {
				if (j->attr.st_size > r->csize)
					err = rcache_grow_locked(r, j->attr.st_size); /* the new bytes are zeros */
				else
					r->csize = j->attr.st_size;
				r->dirty = true;
				r->wgen++;
			}
			pthread_mutex_unlock(&rf.lock);
		} else {
			err = rf_errno(ops->truncate(box, path.ptr, j->attr.st_size));
			pthread_mutex_lock(&rf.lock);
			r->st_ms = 0;
			if (r->cfd >= 0 && !err)
				rcache_drop_locked(r, false); /* the next open fetches the new content */
			pthread_mutex_unlock(&rf.lock);
		}
	}
	/* times: the API cannot set them; accepted (touch works), the sandbox's stay */
	if (!err && !local && (j->valid & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_SIZE)))
		err = rf_stat_into(r, path.ptr, box, ops);
	buf_free(&path);
	if (err)
		return rf_work_err(j, err);
	pthread_mutex_lock(&rf.lock);
	rf_attr_locked(r, &st);
	pthread_mutex_unlock(&rf.lock);
	rf_work_attr(j, &st);
}

static void rf_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid, struct fuse_file_info *fi)
{
	struct rnode *r = rnode(ino);
	struct rf_work t = { .valid = valid, .attr = *attr };
	struct view *v = r->n.view;

	(void)fi;
	/* files are the user's on both sides: a chown to anyone else is EPERM */
	if (((valid & FUSE_SET_ATTR_UID) && attr->st_uid != v->pres_uid) ||
	    ((valid & FUSE_SET_ATTR_GID) && attr->st_gid != v->pres_gid))
		return (void)fuse_reply_err(req, EPERM);
	if (!(valid & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_SIZE)))
		return rf_getattr(req, ino, fi);
	rf_work_submit(req, r, NULL, NULL, NULL, rf_run_setattr, &t);
}

static void rf_readlink(fuse_req_t req, fuse_ino_t ino)
{
	(void)ino;
	/* the files API has no readlink: the link is shown, its target cannot be */
	fuse_reply_err(req, EOPNOTSUPP);
}

static void rf_nope(fuse_req_t req)
{
	fuse_reply_err(req, EPERM);
}

static void rf_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	(void)link;
	(void)parent;
	(void)name;
	rf_nope(req); /* the files API cannot make links */
}

static void rf_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
	(void)ino;
	(void)parent;
	(void)name;
	rf_nope(req);
}

static void rf_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)parent;
	(void)name;
	(void)mode;
	(void)rdev;
	rf_nope(req);
}

/* ---- directories --------------------------------------------------------------------------------- */

struct rdir { /* an open directory: a snapshot of its listing */
	struct sbx_dirent *ents;
	size_t n;
};

static void rdir_clean(void *p)
{
	struct rdir *d = p;

	sbx_dirents_free(d->ents, d->n);
}

/* Copy of a listing without the names no file system can show. */
static int rf_ents_copy(const struct sbx_dirent *src, size_t n, struct sbx_dirent **out, size_t *nout)
{
	struct sbx_dirent *v = calloc(n ? n : 1, sizeof(*v));
	size_t k = 0;

	if (!v)
		return ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (bad_name(src[i].name))
			continue;
		v[k].name = strdup(src[i].name);
		if (!v[k].name) {
			sbx_dirents_free(v, k);
			return ENOMEM;
		}
		v[k].st = src[i].st;
		k++;
	}
	*out = v;
	*nout = k;
	return 0;
}

static void rf_run_opendir(struct rf_work *j, struct sbx_box *box, const struct sbx_files_ops *ops)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct sbx_dirent *ents = NULL, *clean = NULL, *mine = NULL;
	size_t n = 0, nclean = 0, nmine = 0;
	struct rdir *d;
	int err = rf_path(j->r, NULL, &path);

	if (!err)
		err = rf_errno(ops->list(box, path.ptr, &ents, &n));
	buf_free(&path);
	if (!err)
		err = rf_ents_copy(ents, n, &clean, &nclean);
	if (!err)
		err = rf_ents_copy(ents, n, &mine, &nmine);
	sbx_dirents_free(ents, n);
	if (err) {
		sbx_dirents_free(clean, nclean);
		return rf_work_err(j, err);
	}
	d = handle_alloc(sizeof(*d), rdir_clean);
	if (!d) {
		sbx_dirents_free(clean, nclean);
		sbx_dirents_free(mine, nmine);
		return rf_work_err(j, ENOMEM);
	}
	d->ents = mine;
	d->n = nmine;
	pthread_mutex_lock(&rf.lock);
	sbx_dirents_free(j->r->ents, j->r->nents);
	j->r->ents = clean;
	j->r->nents = nclean;
	j->r->list_ms = util_now_ms();
	pthread_mutex_unlock(&rf.lock);
	j->fi.fh = (uint64_t)(uintptr_t)d;
	j->fi.cache_readdir = 0;
	if (rf_work_open(j, &j->fi) == -ENOENT)
		handle_discard(d);
}

static void rf_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct rf_work t = { .fi = *fi, .has_fi = true };

	rf_work_submit(req, rnode(ino), NULL, NULL, NULL, rf_run_opendir, &t);
}

/* The inode number a READDIR entry shows: the node's when one exists (what
 * stat shows), else a number of its own that no node has (bit 63 set: a
 * node's number is its address).  Never 0: readdir(3) skips entries whose
 * d_ino is 0. */
static ino_t rf_dirent_ino(struct rnode *p, const char *name)
{
	uint64_t h = 14695981039346656037ULL ^ (uint64_t)(uintptr_t)p; /* FNV-1a of parent and name */
	struct rnode *r;

	pthread_mutex_lock(&rf.lock);
	r = rf_find_locked(p->n.view, p, name);
	pthread_mutex_unlock(&rf.lock);
	if (r)
		return (ino_t)(uintptr_t)r;
	for (const char *c = name; *c; c++)
		h = (h ^ (unsigned char)*c) * 1099511628211ULL;
	return (ino_t)(h | ((uint64_t)1 << 63));
}

static void rf_do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi, bool plus)
{
	struct rdir *d = (struct rdir *)(uintptr_t)fi->fh;
	struct rnode *p = rnode(ino);
	char *buf = calloc(1, size), *at = buf;
	size_t rem = size;

	if (!buf)
		return (void)fuse_reply_err(req, ENOMEM);
	for (size_t i = (size_t)off; i < d->n + 2; i++) {
		const char *name = i == 0 ? "." : i == 1 ? ".." : d->ents[i - 2].name;
		struct fuse_entry_param e;
		struct rnode *r = NULL;
		size_t len;

		memset(&e, 0, sizeof(e));
		if (i < 2) {
			e.attr.st_mode = S_IFDIR;
			e.attr.st_ino = i == 0 ? (ino_t)ino : 1;
		} else if (plus) {
			pthread_mutex_lock(&rf.lock);
			r = rf_get_locked(p->n.view, p, p->n.which, name);
			if (r) {
				if (!r->local_new && !r->dirty && !r->nwriters)
					rf_set_st_locked(r, &d->ents[i - 2].st);
				rf_lookup_ref_locked(r);
				rf_entry_locked(r, &e);
				r->refs--;
			}
			pthread_mutex_unlock(&rf.lock);
			if (!r) { /* out of memory: a plain entry the kernel looks up later */
				e.attr = d->ents[i - 2].st;
				e.attr.st_ino = rf_dirent_ino(p, name);
			}
		} else {
			e.attr = d->ents[i - 2].st;
			e.attr.st_ino = rf_dirent_ino(p, name);
		}
		len = plus ? fuse_add_direntry_plus(req, at, rem, name, &e, (off_t)i + 1)
			   : fuse_add_direntry(req, at, rem, name, &e.attr, (off_t)i + 1);
		if (len > rem) {
			if (r)
				rf_forget(&r->n, 1);
			break;
		}
		at += len;
		rem -= len;
	}
	fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

static void rf_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	rf_do_readdir(req, ino, size, off, fi, false);
}

static void rf_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	rf_do_readdir(req, ino, size, off, fi, true);
}

static void rf_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	handle_retire((void *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static const struct fuse_lowlevel_ops rf_ops = {
	.lookup = rf_lookup,
	.getattr = rf_getattr,
	.setattr = rf_setattr,
	.readlink = rf_readlink,
	.mknod = rf_mknod,
	.mkdir = rf_mkdir,
	.symlink = rf_symlink,
	.link = rf_link,
	.unlink = rf_unlink,
	.rmdir = rf_rmdir,
	.rename = rf_rename,
	.open = rf_open,
	.create = rf_create,
	.read = rf_read,
	.write_buf = rf_write_buf,
	.flush = rf_flush,
	.release = rf_release,
	.fsync = rf_fsync,
	.opendir = rf_opendir,
	.readdir = rf_readdir,
	.readdirplus = rf_readdirplus,
	.releasedir = rf_releasedir,
	.lseek = rf_lseek,
};

static const struct node_kind_ops k_rfile = { .ops = &rf_ops, .forget = rf_forget };

void rfiles_init(void)
{
	node_kind_register(N_RFILE, &k_rfile);
}

void rfiles_inval_sbx(struct sbx *s)
{
	struct view *v = view_of_sbx(s);
	fuse_ino_t *inos = NULL;
	size_t n = 0, cap = 0;

	if (!v)
		return;
	pthread_mutex_lock(&rf.lock);
	for (int b = 0; b < RFILES_BUCKETS; b++)
		for (struct rnode *r = rf.table[b]; r; r = r->hnext) {
			if (r->n.view != v)
				continue;
			r->st_ms = r->st_ms ? 1 : 0;
			r->list_ms = 0;
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 64;
				fuse_ino_t *p = realloc(inos, nc * sizeof(*p));
				if (!p)
					continue;
				inos = p;
				cap = nc;
			}
			inos[n++] = (fuse_ino_t)(uintptr_t)r;
		}
	pthread_mutex_unlock(&rf.lock);
	for (size_t i = 0; i < n && fs.se; i++)
		fuse_lowlevel_notify_inval_inode(fs.se, inos[i], -1, 0);
	free(inos);
	view_put(v);
}

void rfiles_shutdown(void)
{
	pthread_mutex_lock(&rf.lock);
	for (int b = 0; b < RFILES_BUCKETS; b++)
		for (struct rnode *r = rf.table[b]; r; r = r->hnext)
			if (r->cfd >= 0)
				rcache_drop_locked(r, r->dirty); /* a copy that never reached the sandbox stays */
	pthread_mutex_unlock(&rf.lock);
}
