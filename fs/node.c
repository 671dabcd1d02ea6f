/* SPDX-License-Identifier: MIT */
/*
 * node.c - lifetime of the FUSE layer's objects: virtual nodes, views (one
 * per sandbox incarnation) and user directories.
 *
 * Why views: a reclaimed sandbox must not reuse the inodes of its previous
 * incarnation (the kernel may still hold them under a deleted directory);
 * giving every incarnation its own inode table makes that impossible and
 * also keeps sandboxes apart: a data node belongs to exactly one view, so a
 * link or rename between two sandboxes is EXDEV by construction.
 *
 * User directories persist as STATE_DIR/users/<name>/.present so that they
 * come back after a restart, while warm or stopped threads do not show.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "fs.h"

pthread_mutex_t fs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct user_ent *users; /* fs_lock */
static struct node root_node = { .kind = N_ROOT, .nlookup = 1, .linked = true, .fd = -1 };
/* Everything the daemon allocated stays reachable until exit (so a leak
 * check at exit finds only real leaks): nodes the kernel still knows after
 * their owner let go, and every view. */
static struct node orphans = { .oprev = &orphans, .onext = &orphans };
static struct view all_views = { .vprev = &all_views, .vnext = &all_views };

static void orphan_add_locked(struct node *n)
{
	if (n->onext)
		return;
	n->oprev = orphans.oprev;
	n->onext = &orphans;
	orphans.oprev->onext = n;
	orphans.oprev = n;
}

static void orphan_del_locked(struct node *n)
{
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

void node_lookup_ref_locked(struct node *n)
{
	n->nlookup++;
}

void view_get_locked(struct view *v)
{
	v->refs++;
}

static void view_free(struct view *v)
{
	pthread_mutex_lock(&fs_lock);
	v->vprev->vnext = v->vnext;
	v->vnext->vprev = v->vprev;
	pthread_mutex_unlock(&fs_lock);
	pthread_mutex_destroy(&v->lock);
	free(v->jobs_dir);
	pool_put(v->sbx);
	free(v);
}

void view_put(struct view *v)
{
	bool last;

	pthread_mutex_lock(&fs_lock);
	last = --v->refs == 0;
	pthread_mutex_unlock(&fs_lock);
	if (last)
		view_free(v);
}

/* fs_lock held.  A virtual node's kernel refs are gone: free it if its
 * owner has let go too.  Returns the view reference to drop, if any. */
static struct view *vnode_maybe_free_locked(struct node *n)
{
	struct view *v = n->view;

	if (n == &root_node || n->linked)
		return NULL;
	if (n->nlookup) {
		orphan_add_locked(n);
		return NULL;
	}
	orphan_del_locked(n);
	if ((n->kind == N_JOB || n->kind == N_JOBFILE) && n->job)
		jobs_put(n->job); /* never takes fs_lock */
	free(n);
	return v;
}

void node_forget(struct node *n, uint64_t count)
{
	struct view *v;

	if (n->kind == N_DATA) {
		data_forget(n, count);
		return;
	}
	pthread_mutex_lock(&fs_lock);
	n->nlookup = n->nlookup > count ? n->nlookup - count : 0;
	v = vnode_maybe_free_locked(n);
	pthread_mutex_unlock(&fs_lock);
	if (v)
		view_put(v);
}

static struct node *view_vnode(struct view *v, enum node_kind kind, int which)
{
	struct node *n = vnode_new(kind, which);

	if (n) {
		n->view = v;
		v->refs++;
	}
	return n;
}

struct view *view_current(struct sbx *s)
{
	struct view *v;
	unsigned gen;

	if (pool_state(s, &gen) != SBX_ACTIVE)
		return NULL;
	pthread_mutex_lock(&fs_lock);
	v = s->fsdata;
	if (v && (v->gen != gen || v->dead))
		v = NULL;
	if (!v) {
		struct buf jd = BUF_INIT(BUF_CAP_PATH);
		uid_t uid = fs.mount_uid;
		gid_t gid = fs.mount_gid;
		struct user_ent *u = user_find_locked(s->user);

		if (u) {
			uid = u->uid;
			gid = u->gid;
		}
		v = calloc(1, sizeof(*v));
		if (!v || buf_addf(&jd, "%s/jobs", s->thread_dir)) {
			free(v);
			pthread_mutex_unlock(&fs_lock);
			return NULL;
		}
		v->jobs_dir = buf_take(&jd, NULL);
		v->sbx = s;
		pool_get(s);
		v->gen = gen;
		v->refs = 1; /* the sbx's fsdata reference */
		v->sbx_uid = s->uid;
		v->sbx_gid = s->gid;
		v->pres_uid = uid;
		v->pres_gid = gid;
		pthread_mutex_init(&v->lock, NULL);
		v->vprev = all_views.vprev;
		v->vnext = &all_views;
		all_views.vprev->vnext = v;
		all_views.vprev = v;
		v->dir = view_vnode(v, N_SANDBOX, 0);
		for (int i = 0; i < CTL_COUNT; i++)
			v->ctl[i] = view_vnode(v, N_CTL, i);
		v->jobs = view_vnode(v, N_JOBS, 0);
		if (s->fsdata) {
			struct view *old = s->fsdata;
			old->dead = true;
		}
		s->fsdata = v;
	}
	v->refs++;
	pthread_mutex_unlock(&fs_lock);
	return v;
}

/* fs_lock held: the owner lets go of n.  Returns 1 when n was freed (its
 * reference on the view must then be dropped, outside fs_lock). */
static int view_unlink_locked(struct node *n)
{
	if (!n)
		return 0;
	n->linked = false;
	return vnode_maybe_free_locked(n) ? 1 : 0;
}

void view_kill(struct sbx *s)
{
	struct view *v;
	int nput = 0;

	pthread_mutex_lock(&fs_lock);
	v = s->fsdata;
	s->fsdata = NULL;
	if (v) {
		v->dead = true;
		nput += view_unlink_locked(v->dir);
		for (int i = 0; i < CTL_COUNT; i++) {
			nput += view_unlink_locked(v->ctl[i]);
			v->ctl[i] = NULL;
		}
		nput += view_unlink_locked(v->jobs);
		while (v->jobnodes) {
			struct node *n = v->jobnodes;
			v->jobnodes = n->hnext;
			nput += view_unlink_locked(n);
		}
		v->dir = v->jobs = NULL;
		nput++; /* the sbx's reference */
	}
	pthread_mutex_unlock(&fs_lock);
	while (nput-- > 0)
		view_put(v);
}

/* ---- users ------------------------------------------------------------------ */

struct user_ent *user_find_locked(const char *name)
{
	for (struct user_ent *u = users; u; u = u->next)
		if (!strcmp(u->name, name))
			return u;
	return NULL;
}

static int user_marker(const char *name, struct buf *b)
{
	return buf_addf(b, "%s/users/%s/.present", fs.cfg->state_dir, name);
}

static int user_insert(const char *name, uid_t uid, gid_t gid)
{
	struct user_ent *u;

	pthread_mutex_lock(&fs_lock);
	if (user_find_locked(name)) {
		pthread_mutex_unlock(&fs_lock);
		return EEXIST;
	}
	u = calloc(1, sizeof(*u));
	if (!u || !(u->node = vnode_new(N_USER, 0))) {
		free(u);
		pthread_mutex_unlock(&fs_lock);
		return ENOMEM;
	}
	snprintf(u->name, sizeof(u->name), "%s", name);
	u->uid = uid;
	u->gid = gid;
	u->node->user = u;
	u->next = users;
	users = u;
	pthread_mutex_unlock(&fs_lock);
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
		    config_user_lookup(fs.cfg, d->d_name, &uid, &gid) >= 0)
			user_insert(d->d_name, uid, gid);
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
	pthread_mutex_lock(&fs_lock);
	err = user_find_locked(name) ? EEXIST : 0;
	pthread_mutex_unlock(&fs_lock);
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
	pthread_mutex_lock(&fs_lock);
	for (pp = &users; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->name, name)) {
			u = *pp;
			*pp = u->next;
			break;
		}
	if (!u) {
		err = ENOENT;
	} else {
		u->node->linked = false;
		u->node->user = NULL;
		vnode_maybe_free_locked(u->node);
		free(u);
	}
	pthread_mutex_unlock(&fs_lock);
	if (!err && !user_marker(name, &m)) {
		unlink(m.ptr);
		char *slash = strrchr(m.ptr, '/');
		*slash = '\0';
		rmdir(m.ptr); /* only when no thread data remains */
	}
	buf_free(&m);
	return err;
}

/* For readdir of the root: fn runs under fs_lock and must not block. */
int users_each(void (*fn)(struct user_ent *u, void *arg), void *arg)
{
	pthread_mutex_lock(&fs_lock);
	for (struct user_ent *u = users; u; u = u->next)
		fn(u, arg);
	pthread_mutex_unlock(&fs_lock);
	return 0;
}

struct node *view_job_node_locked(struct view *v, struct job *j, int which)
{
	struct node *n;

	if (v->dead)
		return NULL;
	for (n = v->jobnodes; n; n = n->hnext)
		if (n->job == j && n->which == which)
			return n;
	n = vnode_new(which < 0 ? N_JOB : N_JOBFILE, which);
	if (!n)
		return NULL;
	n->view = v;
	v->refs++;
	n->job = j;
	jobs_get_ref(j);
	n->hnext = v->jobnodes;
	v->jobnodes = n;
	return n;
}

void view_drop_job(struct view *v, struct job *j)
{
	struct node **pp, *n;
	int nput = 0;

	pthread_mutex_lock(&fs_lock);
	for (pp = &v->jobnodes; (n = *pp);) {
		if (n->job != j) {
			pp = &n->hnext;
			continue;
		}
		*pp = n->hnext;
		nput += view_unlink_locked(n);
	}
	pthread_mutex_unlock(&fs_lock);
	while (nput-- > 0)
		view_put(v);
}

/* After a job ends, the files it changed from inside the sandbox must show
 * their new attributes through the mount at once, not after the attribute
 * timeout: invalidate the cached attributes of every inode of the sandbox's
 * current view.  Called from the jobs event thread, never from a FUSE worker;
 * only inode numbers leave the lock (a stale one is harmless: the kernel
 * answers ENOENT or refetches). */
void view_inval_attrs(struct sbx *s)
{
	fuse_ino_t *inos = NULL;
	size_t n = 0, cap = 0;
	struct view *v;

	pthread_mutex_lock(&fs_lock);
	v = s->fsdata;
	if (v)
		v->refs++;
	pthread_mutex_unlock(&fs_lock);
	if (!v)
		return;
	pthread_mutex_lock(&v->lock);
	for (int b = 0; b < VIEW_BUCKETS; b++)
		for (struct node *d = v->table[b]; d; d = d->hnext) {
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 256;
				fuse_ino_t *p = realloc(inos, nc * sizeof(*p));
				if (!p)
					goto unlock;
				inos = p;
				cap = nc;
			}
			inos[n++] = node_ino(d);
		}
unlock:
	pthread_mutex_unlock(&v->lock);
	for (size_t i = 0; i < n && fs.se; i++)
		fuse_lowlevel_notify_inval_inode(fs.se, inos[i], -1, 0);
	free(inos);
	view_put(v);
}
