/* SPDX-License-Identifier: MIT */
/*
 * node.c - lifetime of the FUSE layer's objects: virtual nodes, views (one
 * per sandbox incarnation) and user directories; the registry of node kinds.
 *
 * Why views: a reclaimed sandbox must not reuse the inodes of its previous
 * incarnation (the kernel may still hold them under a deleted directory);
 * giving every incarnation its own inode table makes that impossible and
 * also keeps sandboxes apart.
 *
 * Why view refs are atomic: every data node holds one, and data nodes come
 * and go at the rate of file creations; a global lock there would serialise
 * every sandbox's small-file traffic.
 *
 * User directories persist as STATE_DIR/users/<name>/.present so that they
 * come back after a restart, while warm or stopped threads do not show.
 */
#define _GNU_SOURCE
#include "node.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/budget.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/util.h"
#include "fsbx.h"

struct lock fs_lock = LOCK_INIT;
static struct user_ent *users; /* fs_lock */
static struct node *freed_nodes; /* fs_lock: on_free and free due (fs_unlock) */
static struct node root_node = { .kind = N_ROOT, .nlookup = 1, .linked = true, .fd = -1 };
/* Everything the daemon allocated stays reachable until exit (so a leak
 * check at exit finds only real leaks): nodes the kernel still knows after
 * their owner let go, and every view. */
static struct node orphans = { .oprev = &orphans, .onext = &orphans };
static struct view all_views = { .vprev = &all_views, .vnext = &all_views };
static const struct node_kind_ops *kinds[N_KINDS];

void node_kind_register(enum node_kind kind, const struct node_kind_ops *k)
{
	kinds[kind] = k;
}

const struct node_kind_ops *node_kind(enum node_kind kind)
{
	return (unsigned)kind < N_KINDS ? kinds[kind] : NULL;
}

static void orphan_add_locked(struct node *n)
{
	lock_assert_held(&fs_lock);
	if (n->onext)
		return;
	n->oprev = orphans.oprev;
	n->onext = &orphans;
	orphans.oprev->onext = n;
	orphans.oprev = n;
}

static void orphan_del_locked(struct node *n)
{
	lock_assert_held(&fs_lock);
	if (!n->onext)
		return;
	n->oprev->onext = n->onext;
	n->onext->oprev = n->oprev;
	n->oprev = n->onext = NULL;
}

struct node *node_of(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? &root_node : (struct node *)(uintptr_t)ino;
}

fuse_ino_t node_ino(struct node *n)
{
	return n == &root_node ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
}

struct node *node_root(void)
{
	return &root_node;
}

struct node *vnode_new(enum node_kind kind, int which)
{
	struct node *n = calloc(1, sizeof(*n));

	if (!n)
		return NULL;
	n->kind = kind;
	n->which = which;
	n->linked = true;
	n->fd = -1;
	return n;
}

struct node *view_vnode_new_locked(struct view *v, enum node_kind kind, int which)
{
	struct node *n = vnode_new(kind, which);

	lock_assert_held(&fs_lock);
	if (!n)
		return NULL;
	n->view = v;
	view_get(v);
	n->hnext = v->vnodes;
	v->vnodes = n;
	return n;
}

void node_lookup_ref_locked(struct node *n)
{
	lock_assert_held(&fs_lock);
	n->nlookup++;
}

void node_reply_entry(fuse_req_t req, int err, const struct fuse_entry_param *e)
{
	struct fuse_entry_param neg;

	if (err == ENOENT) {
		memset(&neg, 0, sizeof(neg));
		return (void)fuse_reply_entry(req, &neg);
	}
	if (err)
		return (void)fuse_reply_err(req, err);
	fuse_reply_entry(req, e);
}

void vnode_attr(struct node *n, mode_t mode, off_t size, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = (ino_t)node_ino(n);
	st->st_uid = fs.mount_uid;
	st->st_gid = fs.mount_gid;
	if (n->kind == N_USER && n->user) {
		st->st_uid = n->user->uid;
		st->st_gid = n->user->gid;
	} else if (n->view) {
		st->st_uid = n->view->pres_uid;
		st->st_gid = n->view->pres_gid;
	}
	st->st_atim.tv_sec = st->st_mtim.tv_sec = st->st_ctim.tv_sec = (time_t)fs.started_at;
	st->st_blksize = 4096;
	st->st_mode = mode;
	st->st_nlink = S_ISDIR(mode) ? 2 : 1;
	st->st_size = size;
	st->st_blocks = (size + 511) / 512;
}

void vnode_entry_locked(struct node *n, mode_t mode, off_t size, double attr_timeout, struct fuse_entry_param *e)
{
	lock_assert_held(&fs_lock);
	memset(e, 0, sizeof(*e));
	n->nlookup++;
	e->ino = node_ino(n);
	vnode_attr(n, mode, size, &e->attr);
	e->attr_timeout = attr_timeout;
	e->entry_timeout = 1.0;
}

/* ---- views ---------------------------------------------------------------------- */

void view_get(struct view *v)
{
	__atomic_add_fetch(&v->refs, 1, __ATOMIC_RELAXED);
}

static void view_free(struct view *v)
{
	lock_acquire(&fs_lock);
	v->vprev->vnext = v->vnext;
	v->vnext->vprev = v->vprev;
	fs_unlock();
	park_queue_destroy(&v->ready_q);
	pthread_mutex_destroy(&v->lock);
	budget_acct_put(v->fds);
	free(v->jobs_dir);
	pool_put(v->sbx);
	free(v);
}

void view_put(struct view *v)
{
	if (__atomic_sub_fetch(&v->refs, 1, __ATOMIC_ACQ_REL) == 0)
		view_free(v);
}

/* fs_lock held.  A virtual node's kernel refs are gone: free it if its
 * owner has let go too.  Returns true when n was freed (and its view
 * reference must be dropped). */
static bool vnode_maybe_free_locked(struct node *n)
{
	lock_assert_held(&fs_lock);
	if (n == &root_node || n->linked)
		return false;
	if (n->nlookup) {
		orphan_add_locked(n);
		return false;
	}
	orphan_del_locked(n);
	n->fnext = freed_nodes; /* on_free and free after fs_lock (fs_unlock) */
	freed_nodes = n;
	return true;
}

void fs_unlock(void)
{
	struct node *n = freed_nodes, *next;
	const struct node_kind_ops *k;

	freed_nodes = NULL;
	lock_release(&fs_lock);
	for (; n; n = next) {
		next = n->fnext;
		k = kinds[n->kind];
		if (k && k->on_free)
			k->on_free(n);
		free(n);
	}
}

void node_forget(struct node *n, uint64_t count)
{
	const struct node_kind_ops *k = kinds[n->kind];
	struct view *v = n->view;
	bool freed;

	if (k && k->forget)
		return k->forget(n, count);
	lock_acquire(&fs_lock);
	n->nlookup = n->nlookup > count ? n->nlookup - count : 0;
	freed = vnode_maybe_free_locked(n);
	fs_unlock();
	if (freed && v)
		view_put(v);
}

int vnode_unlink_locked(struct node *n)
{
	lock_assert_held(&fs_lock);
	if (!n)
		return 0;
	n->linked = false;
	return vnode_maybe_free_locked(n) && n != &root_node ? 1 : 0;
}

static void view_get_owner(void *v)
{
	view_get(v);
}

static void view_put_owner(void *v)
{
	view_put(v);
}

/* fs_lock held.  A fresh view of s's current incarnation. */
static struct view *view_new_locked(struct sbx *s, unsigned gen)
{
	struct buf jd = BUF_INIT(BUF_CAP_PATH);
	struct user_ent *u = user_find_locked(s->user);
	struct view *v = calloc(1, sizeof(*v));

	lock_assert_held(&fs_lock);
	if (!v || layout_dir(&jd, s->thread_dir, LAYOUT_JOBS)) {
		free(v);
		return NULL;
	}
	v->jobs_dir = buf_take(&jd, NULL);
	v->fds = budget_acct_get(s->user, s->thread); /* NULL (ENOMEM): counted in the total only */
	v->sbx = s;
	pool_get(s);
	v->gen = gen;
	v->refs = 1; /* the fs_sbx's reference (fsbx.h) */
	v->sbx_uid = s->uid;
	v->sbx_gid = s->gid;
	v->pres_uid = u ? u->uid : fs.mount_uid;
	v->pres_gid = u ? u->gid : fs.mount_gid;
	pthread_mutex_init(&v->lock, NULL);
	park_queue_init(&v->ready_q, view_get_owner, view_put_owner, v);
	v->vprev = all_views.vprev;
	v->vnext = &all_views;
	all_views.vprev->vnext = v;
	all_views.vprev = v;
	v->dir = view_vnode_new_locked(v, N_SANDBOX, 0);
	for (int i = 0; i < CTL_COUNT; i++)
		v->ctl[i] = view_vnode_new_locked(v, N_CTL, i);
	v->jobs = view_vnode_new_locked(v, N_JOBS, 0);
	return v;
}

/* fs_lock held: v (pending, s's current view) becomes the view of s's
 * incarnation gen, now that the create has made s active. */
static void view_adopt_locked(struct sbx *s, struct view *v, unsigned gen)
{
	lock_assert_held(&fs_lock);
	v->gen = gen;
	v->sbx_uid = s->uid;
	v->sbx_gid = s->gid;
	__atomic_store_n(&v->pending, 0, __ATOMIC_RELEASE);
}

struct view *view_current(struct sbx *s)
{
	struct fs_sbx *f;
	struct view *v;
	unsigned gen;

	if (pool_state(s, &gen) != SBX_ACTIVE)
		return NULL;
	if (!(f = fs_sbx(s)))
		return NULL;
	lock_acquire(&fs_lock);
	v = f->view;
	if (v && !v->dead && v->pending)
		view_adopt_locked(s, v, gen); /* the directory an asynchronous mkdir showed */
	if (v && (v->gen != gen || v->dead))
		v = NULL;
	if (!v) {
		v = view_new_locked(s, gen);
		if (v) {
			if (f->view)
				f->view->dead = true;
			f->view = v;
		}
	}
	if (v)
		view_get(v);
	fs_unlock();
	return v;
}

struct view *view_pending(struct sbx *s)
{
	struct fs_sbx *f = fs_sbx(s);
	struct view *v;

	if (!f)
		return NULL;
	lock_acquire(&fs_lock);
	v = view_new_locked(s, 0);
	if (v) {
		v->pending = 1;
		if (f->view)
			f->view->dead = true;
		f->view = v;
		view_get(v);
	}
	fs_unlock();
	return v;
}

struct view *view_pending_of(struct sbx *s)
{
	struct fs_sbx *f = fs_sbx(s);
	struct view *v;

	lock_acquire(&fs_lock);
	v = f ? f->view : NULL;
	if (v && !v->dead && v->pending)
		view_get(v);
	else
		v = NULL;
	fs_unlock();
	return v;
}

struct view *view_of_sbx(struct sbx *s)
{
	struct fs_sbx *f = fs_sbx(s);
	struct view *v;

	lock_acquire(&fs_lock);
	v = f ? f->view : NULL;
	if (v && !v->dead && !v->pending)
		view_get(v);
	else
		v = NULL;
	fs_unlock();
	return v;
}

/* fs_lock held: f lets go of its view v (dead from now on).  Returns the
 * number of references to drop with view_put() after unlocking. */
static int view_kill_locked(struct fs_sbx *f, struct view *v)
{
	int nput = 0;

	lock_assert_held(&fs_lock);
	f->view = NULL;
	v->dead = true;
	v->dir = v->jobs = NULL;
	for (int i = 0; i < CTL_COUNT; i++)
		v->ctl[i] = NULL;
	while (v->vnodes) {
		struct node *n = v->vnodes;
		v->vnodes = n->hnext;
		nput += vnode_unlink_locked(n);
	}
	return nput + 1; /* + the sbx's reference */
}

static void (*view_killed_hook)(struct view *v);

void view_set_kill_hook(void (*fn)(struct view *v))
{
	view_killed_hook = fn;
}

void view_kill(struct sbx *s)
{
	struct fs_sbx *f = fs_sbx(s);
	struct view *v;
	int nput = 0;

	lock_acquire(&fs_lock);
	v = f ? f->view : NULL;
	if (v)
		nput = view_kill_locked(f, v);
	fs_unlock();
	if (v && view_killed_hook)
		view_killed_hook(v);
	while (nput-- > 0)
		view_put(v);
}

void view_fail(struct sbx *s, struct view *v, int err)
{
	struct fs_sbx *f = fs_sbx(s);
	int nput = 0;

	lock_acquire(&fs_lock);
	__atomic_store_n(&v->ready_err, err, __ATOMIC_RELEASE);
	if (f && f->view == v)
		nput = view_kill_locked(f, v);
	v->dead = true;
	__atomic_store_n(&v->pending, 0, __ATOMIC_RELEASE);
	__atomic_add_fetch(&v->status_ver, 1, __ATOMIC_RELEASE);
	fs_unlock();
	while (nput-- > 0)
		view_put(v);
}

/* ---- users ------------------------------------------------------------------ */

struct user_ent *user_find_locked(const char *name)
{
	lock_assert_held(&fs_lock);
	for (struct user_ent *u = users; u; u = u->next)
		if (!strcmp(u->name, name))
			return u;
	return NULL;
}

bool user_name_of(struct node *n, char out[NAME_MAX_LEN + 1], uid_t *owner)
{
	bool ok = false;

	lock_acquire(&fs_lock);
	if (n->user) {
		memcpy(out, n->user->name, sizeof(n->user->name));
		if (owner)
			*owner = n->user->uid;
		ok = true;
	}
	fs_unlock();
	return ok;
}

static int user_marker(const char *name, struct buf *b)
{
	return buf_addf(b, "%s/users/%s/.present", fs.cfg->state_dir, name);
}

static int user_insert(const char *name, uid_t uid, gid_t gid)
{
	struct user_ent *u;

	lock_acquire(&fs_lock);
	if (user_find_locked(name)) {
		fs_unlock();
		return EEXIST;
	}
	u = calloc(1, sizeof(*u));
	if (!u || !(u->node = vnode_new(N_USER, 0))) {
		free(u);
		fs_unlock();
		return ENOMEM;
	}
	memcpy(u->name, name, strlen(name) + 1);
	u->uid = uid;
	u->gid = gid;
	u->node->user = u;
	u->next = users;
	users = u;
	fs_unlock();
	return 0;
}

int users_load(void)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct dirent *d;
	DIR *dir;

	if (buf_addf(&path, "%s/users", fs.cfg->state_dir) || util_mkdir_p(path.ptr, 0700)) {
		buf_free(&path);
		return -1;
	}
	dir = opendir(path.ptr);
	while (dir && (d = readdir(dir))) {
		struct buf m = BUF_INIT(BUF_CAP_PATH);
		uid_t uid = fs.mount_uid;
		gid_t gid = fs.mount_gid;

		if (names_valid(d->d_name) && !user_marker(d->d_name, &m) && !access(m.ptr, F_OK) &&
		    config_user_lookup(fs.cfg, d->d_name, &uid, &gid) >= 0 && user_insert(d->d_name, uid, gid) == ENOMEM)
			log_warn("namespace", "user directory %s not loaded: out of memory", d->d_name);
		buf_free(&m);
	}
	if (dir)
		closedir(dir);
	buf_free(&path);
	return 0;
}

int user_add(const char *name, uid_t uid, gid_t gid)
{
	struct buf m = BUF_INIT(BUF_CAP_PATH);
	int err;

	if (user_marker(name, &m)) {
		buf_free(&m);
		return ENAMETOOLONG;
	}
	lock_acquire(&fs_lock);
	err = user_find_locked(name) ? EEXIST : 0;
	fs_unlock();
	if (!err) {
		char *slash = strrchr(m.ptr, '/');
		*slash = '\0';
		if (util_mkdir_p(m.ptr, 0700))
			err = errno == ENOSPC ? ENOSPC : EIO;
		*slash = '/';
		if (!err && util_write_atomic(m.ptr, "", 0, 0600))
			err = EIO;
	}
	if (!err)
		err = user_insert(name, uid, gid);
	buf_free(&m);
	return err;
}

int user_remove(const char *name)
{
	struct user_ent **pp, *u = NULL;
	struct buf m = BUF_INIT(BUF_CAP_PATH);
	int err = 0;

	if (pool_user_has_active(name))
		return ENOTEMPTY;
	lock_acquire(&fs_lock);
	for (pp = &users; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->name, name)) {
			u = *pp;
			*pp = u->next;
			break;
		}
	if (!u) {
		err = ENOENT;
	} else {
		u->node->user = NULL;
		vnode_unlink_locked(u->node);
		free(u);
	}
	fs_unlock();
	if (!err && !user_marker(name, &m)) {
		unlink(m.ptr);
		char *slash = strrchr(m.ptr, '/');
		*slash = '\0';
		rmdir(m.ptr); /* only when no thread data remains */
	}
	buf_free(&m);
	return err;
}

void users_each(void (*fn)(struct user_ent *u, void *arg), void *arg)
{
	lock_acquire(&fs_lock);
	for (struct user_ent *u = users; u; u = u->next)
		fn(u, arg);
	fs_unlock();
}
