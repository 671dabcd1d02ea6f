/* SPDX-License-Identifier: MIT */
/*
 * snapfs.c - the FUSE glue of snapshots/ (DESIGN §3): the snapshots/
 * directory of a sandbox (mkdir = take, rmdir = delete, listing), a
 * snapshot's directory with its `info` file, and a read-only view of its
 * workspace/, uploads/ and outputs/ (every change is EROFS).  The work is
 * providers/sbxsnap.c's and providers/snapshot.c's; mkdir and rmdir hand it
 * to the work pool, whose item answers the request.
 *
 * Why a node kind of its own and not data.c's passthrough with writes
 * refused: a snapshot never changes, so its nodes are named by their path
 * under the snapshot (no O_PATH fd per remembered inode: fds are held in
 * proportion to open files, as DESIGN §4 asks), the kernel may cache
 * entries, attributes and pages for long, and none of data.c's machinery
 * for a tree a job changes (names noted for invalidation, set-id bits,
 * creation as the sandbox's uid, skills events, locks) has anything to do.
 * Every open is an openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV) from the snapshot's data
 * directory: whatever the sandbox put in the tree (symlinks out, FIFOs,
 * sockets), nothing outside the snapshot is reached and no link is
 * followed; FIFOs and sockets are shown, and the kernel never asks us to
 * open them.
 *
 * Nodes: struct snode embeds struct node first.  They live in one table
 * (snap_nodes_lock, a leaf), keyed by view, parent and name, and each holds
 * its parent: a node is freed when the kernel has forgotten it and it has
 * no children left.  A snapshot's directory node holds a reference to its
 * data directory fd (struct snapref); an rmdir takes its node out of the
 * table, so a later snapshot of the same name gets a node of its own.
 */
#define _GNU_SOURCE
#include "snapfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../common/log.h"
#include "../providers/sbxsnap.h"
#include "data.h"
#include "handle.h"
#include "vdir.h"
#include "fswork.h"

#define SNAPFS_TIMEOUT 60.0    /* a snapshot never changes */
#define SNAPFS_DIR_TIMEOUT 1.0 /* snapshots/ and a snapshot's top change with mkdir and rmdir */
#define SNAPFS_BUCKETS 1024

static const char *const snap_data_names[] = { "workspace", "uploads", "outputs" };
#define SNAP_NDATA (sizeof(snap_data_names) / sizeof(snap_data_names[0]))

struct snapref {
	int refs; /* atomic: the nodes of the snapshot */
	int fd;   /* O_PATH: thread_dir/snapshots/<name>/data */
	dev_t dev;
	ino_t ino;
	char name[NAME_MAX_LEN + 1];
};

struct snode {
	struct node n;        /* first: a struct node * of these kinds is a struct snode * */
	uint64_t refs;        /* snap_nodes_lock: the kernel's lookups (n.nlookup) + children */
	bool hashed;          /* snap_nodes_lock: findable in the table */
	struct snode *parent; /* referenced; NULL for snapshots/ */
	struct snapref *snap; /* referenced; NULL for snapshots/ */
	char *name;           /* in its parent */
	char *rel;            /* N_SNAPDATA: its path under the snapshot's data/ */
	struct snode *hnext;  /* snap_nodes_lock */
};

static pthread_mutex_t snap_nodes_lock = PTHREAD_MUTEX_INITIALIZER;
static struct snode *snap_table[SNAPFS_BUCKETS]; /* protected by snap_nodes_lock */

static struct snode *snode_of(fuse_ino_t ino)
{
	return (struct snode *)node_of(ino);
}

static unsigned snode_hash(const struct view *v, const struct snode *parent, const char *name)
{
	uint64_t h = ((uintptr_t)v >> 4) ^ ((uintptr_t)parent * 31);

	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 1099511628211ULL;
	return (unsigned)(h % SNAPFS_BUCKETS);
}

static void snapref_put(struct snapref *r)
{
	if (r && __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		close(r->fd);
		free(r);
	}
}

/* snap_nodes_lock held. */
static void snode_unhash_locked(struct snode *sn)
{
	struct snode **pp;

	if (!sn->hashed)
		return;
	for (pp = &snap_table[snode_hash(sn->n.view, sn->parent, sn->name)]; *pp; pp = &(*pp)->hnext)
		if (*pp == sn) {
			*pp = sn->hnext;
			break;
		}
	sn->hashed = false;
}

/* Drop count references of sn; a node nobody refers to is freed, and so
 * on up its parents. */
static void snode_put(struct snode *sn, uint64_t count)
{
	while (sn) {
		struct snode *parent = NULL;
		struct view *v = NULL;

		pthread_mutex_lock(&snap_nodes_lock);
		sn->refs = sn->refs > count ? sn->refs - count : 0;
		if (!sn->refs) {
			snode_unhash_locked(sn);
			parent = sn->parent;
			v = sn->n.view;
		}
		pthread_mutex_unlock(&snap_nodes_lock);
		if (!v)
			return;
		snapref_put(sn->snap);
		free(sn->name);
		free(sn->rel);
		free(sn);
		view_put(v);
		sn = parent;
		count = 1;
	}
}

static void snode_forget(struct node *n, uint64_t count)
{
	struct snode *sn = (struct snode *)n;

	pthread_mutex_lock(&snap_nodes_lock);
	n->nlookup = n->nlookup > count ? n->nlookup - count : 0;
	pthread_mutex_unlock(&snap_nodes_lock);
	snode_put(sn, count);
}

/* The node (kind, name) under parent in v, counted as one lookup: found,
 * or made (taking snap, a reference the caller had; rel copied).  NULL on
 * ENOMEM.  match: a found node is only reused when it names snap's inode
 * (a snapshot made anew under a known name gets a new node). */
static struct snode *snode_get(struct view *v, struct snode *parent, enum node_kind kind, const char *name,
	struct snapref *snap, const char *rel)
{
	unsigned h = snode_hash(v, parent, name);
	struct snode *sn;

	pthread_mutex_lock(&snap_nodes_lock);
	for (sn = snap_table[h]; sn; sn = sn->hnext)
		if (sn->n.view == v && sn->parent == parent && !strcmp(sn->name, name)) {
			if (kind == N_SNAP && snap && sn->snap && (sn->snap->dev != snap->dev || sn->snap->ino != snap->ino)) {
				snode_unhash_locked(sn); /* an older snapshot of that name */
				break;
			}
			sn->refs++;
			sn->n.nlookup++;
			pthread_mutex_unlock(&snap_nodes_lock);
			snapref_put(snap);
			return sn;
		}
	sn = calloc(1, sizeof(*sn));
	if (sn) {
		sn->name = strdup(name);
		sn->rel = rel ? strdup(rel) : NULL;
	}
	if (!sn || !sn->name || (rel && !sn->rel)) {
		pthread_mutex_unlock(&snap_nodes_lock);
		if (sn) {
			free(sn->name);
			free(sn->rel);
		}
		free(sn);
		snapref_put(snap);
		return NULL;
	}
	sn->n.kind = kind;
	sn->n.fd = -1;
	sn->n.view = v;
	sn->n.nlookup = 1;
	sn->refs = 1;
	sn->snap = snap;
	sn->parent = parent;
	if (parent)
		parent->refs++;
	sn->hashed = true;
	sn->hnext = snap_table[h];
	snap_table[h] = sn;
	pthread_mutex_unlock(&snap_nodes_lock);
	view_get(v);
	return sn;
}

static struct snapref *snapref_get(struct snapref *r)
{
	if (r)
		__atomic_add_fetch(&r->refs, 1, __ATOMIC_RELAXED);
	return r;
}

/* ---- paths under a snapshot ----------------------------------------------------- */

/* An fd on rel (a path under the snapshot's data/) that cannot leave it
 * nor follow any link; flags as openat's (O_PATH for a look).  -1, errno. */
static int snap_open(struct snode *sn, const char *rel, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
	};
	long fd = syscall(SYS_openat2, sn->snap->fd, rel, &how, sizeof(how));

	return (int)fd;
}

static int snap_lstat(struct snode *sn, struct stat *st)
{
	int fd = snap_open(sn, sn->rel, O_PATH), r;

	if (fd < 0)
		return errno == ELOOP ? ENOENT : errno;
	r = fstat(fd, st) ? errno : 0;
	close(fd);
	return r;
}

static void snap_present(struct view *v, struct stat *st)
{
	if (st->st_uid == v->sbx_uid)
		st->st_uid = v->pres_uid;
	if (st->st_gid == v->sbx_gid)
		st->st_gid = v->pres_gid;
}

/* ---- attributes ---------------------------------------------------------------------- */

static struct sbx *snode_sbx(struct snode *sn)
{
	return sn->n.view->sbx;
}

static off_t snapinfo_size(struct snode *sn)
{
	struct buf b = BUF_INIT(BUF_CAP_CTL);
	off_t size = snap_info(snode_sbx(sn)->thread_dir, sn->parent->name, &b) ? 0 : (off_t)b.len;

	buf_free(&b);
	return size;
}

/* The attributes of sn: 0 or an errno. */
static int snode_attr(struct snode *sn, struct stat *st, double *timeout)
{
	int err = 0;

	*timeout = SNAPFS_TIMEOUT;
	switch (sn->n.kind) {
	case N_SNAPS:
		vnode_attr(&sn->n, S_IFDIR | 0700, 0, st);
		*timeout = SNAPFS_DIR_TIMEOUT;
		break;
	case N_SNAP:
		/* writable to the kernel's eyes: a create in it reaches us and
		 * gets EROFS (with default_permissions, 0500 would be EACCES) */
		vnode_attr(&sn->n, S_IFDIR | 0700, 0, st);
		*timeout = SNAPFS_DIR_TIMEOUT;
		break;
	case N_SNAPINFO:
		vnode_attr(&sn->n, S_IFREG | 0444, snapinfo_size(sn), st);
		*timeout = 0;
		break;
	default:
		err = snap_lstat(sn, st);
		if (!err)
			snap_present(sn->n.view, st);
		break;
	}
	return err;
}

static void snode_reply_entry(fuse_req_t req, struct snode *sn)
{
	struct fuse_entry_param e;
	double timeout;
	int err;

	memset(&e, 0, sizeof(e));
	if (!sn)
		return (void)fuse_reply_err(req, ENOMEM);
	err = snode_attr(sn, &e.attr, &timeout);
	if (err) {
		snode_forget(&sn->n, 1);
		return (void)node_reply_entry(req, err, &e);
	}
	e.ino = node_ino(&sn->n);
	e.attr_timeout = e.entry_timeout = timeout;
	if (fuse_reply_entry(req, &e) == -ENOENT) /* interrupted: the kernel never saw it */
		snode_forget(&sn->n, 1);
}

static void snapfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	double timeout;
	int err = snode_attr(snode_of(ino), &st, &timeout);

	(void)fi;
	if (err)
		return (void)fuse_reply_err(req, err);
	fuse_reply_attr(req, &st, timeout);
}

static void snapfs_erofs(fuse_req_t req)
{
	fuse_reply_err(req, EROFS);
}

/* Inside a snapshot nothing changes: EROFS.  A touch of snapshots/ is
 * accepted and changes nothing (as for the other virtual directories). */
static void snapfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid, struct fuse_file_info *fi)
{
	const int times = FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW |
			  FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME;

	(void)attr;
	if (snode_of(ino)->n.kind == N_SNAPS && (valid & ~times) == 0)
		return snapfs_getattr(req, ino, fi);
	if (snode_of(ino)->n.kind == N_SNAPS)
		return (void)fuse_reply_err(req, EPERM);
	snapfs_erofs(req);
}

/* ---- snapshots/ -------------------------------------------------------------------------- */

int snapfs_lookup_root(struct view *v, struct fuse_entry_param *e)
{
	struct snode *sn = snode_get(v, NULL, N_SNAPS, "snapshots", NULL, NULL);
	double timeout;

	memset(e, 0, sizeof(*e));
	if (!sn)
		return ENOMEM;
	snode_attr(sn, &e->attr, &timeout);
	e->ino = node_ino(&sn->n);
	e->attr_timeout = e->entry_timeout = timeout;
	return 0;
}

/* The node of snapshot name under the snapshots/ node p, or an errno. */
static int snaps_node(struct snode *p, const char *name, struct snode **out)
{
	struct snapref *r;
	struct stat st;
	int fd;

	*out = NULL;
	if (p->n.view->dead)
		return ENOENT;
	fd = snap_data_fd(snode_sbx(p)->thread_dir, name);
	if (fd < 0)
		return errno == EINVAL || errno == ENOTDIR || errno == ELOOP ? ENOENT : errno;
	r = calloc(1, sizeof(*r));
	if (!r || fstat(fd, &st)) {
		free(r);
		close(fd);
		return ENOMEM;
	}
	r->refs = 1;
	r->fd = fd;
	r->dev = st.st_dev;
	r->ino = st.st_ino;
	snprintf(r->name, sizeof(r->name), "%s", name);
	*out = snode_get(p->n.view, p, N_SNAP, name, r, NULL);
	return *out ? 0 : ENOMEM;
}

static void snaps_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = { 0 };
	struct snode *sn;
	int err = snaps_node(snode_of(parent), name, &sn);

	if (err)
		return (void)node_reply_entry(req, err, &e);
	snode_reply_entry(req, sn);
}

static void snaps_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct snode *sn = snode_of(ino);
	struct vdir *d;
	char **names;
	size_t n;
	int err;

	if (sn->n.view->dead)
		return (void)fuse_reply_err(req, ENOENT);
	err = snap_list(snode_sbx(sn)->thread_dir, &names, &n);
	if (err)
		return (void)fuse_reply_err(req, err);
	d = vdir_new();
	for (size_t i = 0; d && i < n; i++)
		vdir_add(d, names[i], DT_DIR);
	snap_names_free(names, n);
	if (!d)
		return (void)fuse_reply_err(req, ENOMEM);
	vdir_reply_open(req, d, fi);
}

struct snap_op {
	fuse_req_t req;
	struct snode *dir; /* snapshots/: referenced */
	struct sbx *sbx;   /* referenced */
	char name[NAME_MAX_LEN + 1];
};

static void snap_op_free(struct snap_op *op)
{
	snode_put(op->dir, 1);
	pool_put(op->sbx);
	free(op);
}

/* Work thread: take the snapshot, then answer the mkdir. */
static void snaps_mkdir_work(void *arg)
{
	struct snap_op *op = arg;
	struct snap_result r;
	struct snode *sn = NULL;
	int err = sbxsnap_take(op->sbx, op->name, &r);

	if (!err)
		err = snaps_node(op->dir, op->name, &sn);
	if (err)
		fuse_reply_err(op->req, err);
	else
		snode_reply_entry(op->req, sn);
	snap_op_free(op);
}

/* Work thread: the snapshot leaves its name, the rmdir is answered, then
 * its files go. */
static void snaps_rmdir_work(void *arg)
{
	struct snap_op *op = arg;
	int err = sbxsnap_delete(op->sbx, op->name);

	if (!err) {
		unsigned h = snode_hash(op->dir->n.view, op->dir, op->name);
		pthread_mutex_lock(&snap_nodes_lock);
		for (struct snode *sn = snap_table[h]; sn; sn = sn->hnext)
			if (sn->parent == op->dir && !strcmp(sn->name, op->name)) {
				snode_unhash_locked(sn);
				break;
			}
		pthread_mutex_unlock(&snap_nodes_lock);
	}
	fuse_reply_err(op->req, err);
	if (!err)
		snap_purge(op->sbx->thread_dir);
	snap_op_free(op);
}

static void snaps_submit(fuse_req_t req, fuse_ino_t parent, const char *name, void (*fn)(void *))
{
	struct snode *dir = snode_of(parent);
	struct view *v = dir->n.view;
	struct snap_op *op;
	int err;

	if (v->dead)
		return (void)fuse_reply_err(req, ENOENT);
	if (!names_valid(name)) {
		if (fn == snaps_mkdir_work)
			log_warn(v->sbx->token, "mkdir snapshots/%.64s: invalid name (must match ^[A-Za-z0-9_-]{1,64}$)",
				name);
		return (void)fuse_reply_err(req, fn == snaps_mkdir_work ? EINVAL : ENOENT);
	}
	op = calloc(1, sizeof(*op));
	if (!op)
		return (void)fuse_reply_err(req, ENOMEM);
	op->req = req;
	snprintf(op->name, sizeof(op->name), "%s", name);
	pthread_mutex_lock(&snap_nodes_lock);
	dir->refs++;
	pthread_mutex_unlock(&snap_nodes_lock);
	op->dir = dir;
	op->sbx = v->sbx;
	pool_get(op->sbx);
	err = work_submit(WORK_LIFECYCLE, op->sbx->token, pool_work_timeout_ms(), fn, op);
	if (err) {
		snap_op_free(op);
		fuse_reply_err(req, err);
	}
}

static void snaps_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)mode;
	snaps_submit(req, parent, name, snaps_mkdir_work);
}

static void snaps_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	snaps_submit(req, parent, name, snaps_rmdir_work);
}

/* ---- snapshots/<name>/ --------------------------------------------------------------------- */

static void snap_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct snode *p = snode_of(parent), *sn = NULL;
	struct fuse_entry_param e = { 0 };

	if (!strcmp(name, "info")) {
		sn = snode_get(p->n.view, p, N_SNAPINFO, name, NULL, NULL);
		return snode_reply_entry(req, sn);
	}
	for (size_t i = 0; i < SNAP_NDATA; i++)
		if (!strcmp(name, snap_data_names[i])) {
			sn = snode_get(p->n.view, p, N_SNAPDATA, name, snapref_get(p->snap), name);
			return snode_reply_entry(req, sn);
		}
	node_reply_entry(req, ENOENT, &e);
}

static void snap_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct vdir *d = vdir_new();

	(void)ino;
	if (!d)
		return (void)fuse_reply_err(req, ENOMEM);
	vdir_add(d, "info", DT_REG);
	for (size_t i = 0; i < SNAP_NDATA; i++)
		vdir_add(d, snap_data_names[i], DT_DIR);
	vdir_reply_open(req, d, fi);
}

static void snap_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)parent;
	(void)name;
	(void)mode;
	snapfs_erofs(req);
}

static void snap_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent;
	(void)name;
	snapfs_erofs(req);
}

static void snap_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)parent;
	(void)name;
	(void)mode;
	(void)rdev;
	snapfs_erofs(req);
}

static void snap_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	(void)link;
	(void)parent;
	(void)name;
	snapfs_erofs(req);
}

static void snap_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent;
	(void)name;
	snapfs_erofs(req);
}

static void snap_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	const char *newname, unsigned int flags)
{
	(void)parent;
	(void)name;
	(void)newparent;
	(void)newname;
	(void)flags;
	snapfs_erofs(req);
}

static void snap_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	(void)ino;
	(void)newparent;
	(void)newname;
	snapfs_erofs(req);
}

static void snap_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	(void)parent;
	(void)name;
	(void)mode;
	(void)fi;
	snapfs_erofs(req);
}

static void snap_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
	int flags)
{
	(void)ino;
	(void)name;
	(void)value;
	(void)size;
	(void)flags;
	snapfs_erofs(req);
}

static void snap_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino;
	(void)name;
	snapfs_erofs(req);
}

/* ---- info ---------------------------------------------------------------------------------- */

static void info_clean(void *p)
{
	buf_free(p);
}

static void info_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct snode *sn = snode_of(ino);
	struct buf *b;
	int err;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
		return snapfs_erofs(req);
	b = handle_alloc(sizeof(*b), info_clean);
	if (!b)
		return (void)fuse_reply_err(req, ENOMEM);
	buf_init(b, BUF_CAP_CTL);
	err = snap_info(snode_sbx(sn)->thread_dir, sn->parent->name, b);
	if (err) {
		handle_discard(b);
		return (void)fuse_reply_err(req, err);
	}
	fi->fh = (uint64_t)(uintptr_t)b;
	fi->direct_io = 1;
	fi->noflush = 1;
	fuse_reply_open(req, fi);
}

static void info_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct buf *b = (struct buf *)(uintptr_t)fi->fh;

	(void)ino;
	if ((size_t)off >= b->len)
		return (void)fuse_reply_buf(req, NULL, 0);
	fuse_reply_buf(req, b->ptr + off, b->len - (size_t)off < size ? b->len - (size_t)off : size);
}

static void info_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	handle_retire((void *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/* ---- the read-only data view --------------------------------------------------------------- */

static void sdata_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct snode *p = snode_of(parent);
	struct fuse_entry_param e = { 0 };
	struct buf rel = BUF_INIT(BUF_CAP_PATH * 4);
	struct stat st;
	int fd, err = 0;

	if (!strcmp(name, ".") || !strcmp(name, "..") || strchr(name, '/'))
		return (void)fuse_reply_err(req, EPERM);
	fd = snap_open(p, p->rel, O_PATH | O_DIRECTORY);
	if (fd < 0)
		err = errno == ELOOP ? ENOENT : errno;
	else if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW))
		err = errno;
	if (fd >= 0)
		close(fd);
	if (!err && buf_addf(&rel, "%s/%s", p->rel, name))
		err = ENAMETOOLONG;
	if (err) {
		buf_free(&rel);
		return (void)node_reply_entry(req, err, &e);
	}
	snode_reply_entry(req, snode_get(p->n.view, p, N_SNAPDATA, name, snapref_get(p->snap), rel.ptr));
	buf_free(&rel);
}

static void sdata_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char target[PATH_MAX + 1];
	int fd = snap_open(snode_of(ino), snode_of(ino)->rel, O_PATH);
	ssize_t n;

	if (fd < 0)
		return (void)fuse_reply_err(req, errno == ELOOP ? ENOENT : errno);
	n = readlinkat(fd, "", target, sizeof(target) - 1);
	close(fd);
	if (n < 0)
		return (void)fuse_reply_err(req, errno);
	target[n] = '\0';
	fuse_reply_readlink(req, target);
}

static void sdata_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int fd, err;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_APPEND)))
		return snapfs_erofs(req);
	fd = snap_open(snode_of(ino), snode_of(ino)->rel, O_RDONLY | O_NONBLOCK);
	if (fd < 0)
		return (void)fuse_reply_err(req, errno == ELOOP ? ENOENT : errno);
	err = fstat(fd, &st) ? errno : S_ISREG(st.st_mode) ? 0 : S_ISDIR(st.st_mode) ? EISDIR : ENXIO;
	if (err) {
		close(fd);
		return (void)fuse_reply_err(req, err);
	}
	fi->fh = (uint64_t)fd;
	fi->keep_cache = 1; /* a snapshot never changes */
	fuse_reply_open(req, fi);
}

static void sdata_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);

	(void)ino;
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = (int)fi->fh;
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static void sdata_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	close((int)fi->fh);
	fuse_reply_err(req, 0);
}

static void sdata_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off,
	struct fuse_file_info *fi)
{
	(void)ino;
	(void)in;
	(void)off;
	(void)fi;
	snapfs_erofs(req);
}

struct sdata_dir {
	DIR *dp;
	struct dirent *entry;
	off_t offset;
};

static void sdata_dir_clean(void *p)
{
	struct sdata_dir *d = p;

	if (d->dp)
		closedir(d->dp);
}

static void sdata_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sdata_dir *d = handle_alloc(sizeof(*d), sdata_dir_clean);
	int fd, err;

	if (!d)
		return (void)fuse_reply_err(req, ENOMEM);
	fd = snap_open(snode_of(ino), snode_of(ino)->rel, O_RDONLY | O_DIRECTORY);
	if (fd < 0 || !(d->dp = fdopendir(fd))) {
		err = errno == ELOOP ? ENOENT : errno;
		if (fd >= 0)
			close(fd);
		handle_discard(d);
		return (void)fuse_reply_err(req, err);
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/* Entries without attributes (READDIRPLUS with nodeid 0: the kernel looks
 * up what it needs), so a listing makes no node. */
static void sdata_do_readdir(fuse_req_t req, size_t size, off_t offset, struct fuse_file_info *fi, bool plus)
{
	struct sdata_dir *d = (struct sdata_dir *)(uintptr_t)fi->fh;
	char *buf = calloc(1, size), *p = buf;
	size_t rem = size;
	int err = 0;

	if (!buf)
		return (void)fuse_reply_err(req, ENOMEM);
	if (offset != d->offset) {
		seekdir(d->dp, offset);
		d->entry = NULL;
		d->offset = offset;
	}
	for (;;) {
		struct fuse_entry_param e;
		size_t entsize;

		if (!d->entry) {
			errno = 0;
			d->entry = readdir(d->dp);
			if (!d->entry) {
				err = errno;
				break;
			}
		}
		memset(&e, 0, sizeof(e));
		e.attr.st_ino = d->entry->d_ino;
		e.attr.st_mode = (mode_t)(d->entry->d_type << 12);
		entsize = plus ? fuse_add_direntry_plus(req, p, rem, d->entry->d_name, &e, d->entry->d_off) :
				 fuse_add_direntry(req, p, rem, d->entry->d_name, &e.attr, d->entry->d_off);
		if (entsize > rem)
			break;
		p += entsize;
		rem -= entsize;
		d->offset = d->entry->d_off;
		d->entry = NULL;
	}
	if (err && rem == size)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

static void sdata_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	sdata_do_readdir(req, size, off, fi, false);
}

static void sdata_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	sdata_do_readdir(req, size, off, fi, true);
}

static void sdata_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	handle_retire((void *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void sdata_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	if (fstatvfs(snode_of(ino)->snap->fd, &sv))
		return (void)fuse_reply_err(req, errno);
	sv.f_flag |= ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

/* xattrs through the O_PATH fd's /proc link (which names the inode); a
 * symlink has none to show (user xattrs cannot be set on one). */
static int sdata_xattr_fd(fuse_req_t req, fuse_ino_t ino, char proc[64])
{
	struct stat st;
	int fd = snap_open(snode_of(ino), snode_of(ino)->rel, O_PATH);

	if (fd < 0) {
		fuse_reply_err(req, errno == ELOOP ? ENOENT : errno);
		return -1;
	}
	if (fstat(fd, &st) || S_ISLNK(st.st_mode) || str_fmt(proc, 64, "/proc/self/fd/%d", fd)) {
		close(fd);
		fuse_reply_err(req, ENODATA);
		return -1;
	}
	return fd;
}

static void sdata_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	char proc[64], *value = NULL;
	int fd = sdata_xattr_fd(req, ino, proc);
	ssize_t n;

	if (fd < 0)
		return;
	if (size && !(value = malloc(size))) {
		close(fd);
		return (void)fuse_reply_err(req, ENOMEM);
	}
	n = getxattr(proc, name, value, size);
	if (n < 0)
		fuse_reply_err(req, errno);
	else if (size)
		fuse_reply_buf(req, value, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(value);
	close(fd);
}

static void sdata_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	char proc[64], *value = NULL;
	int fd = sdata_xattr_fd(req, ino, proc);
	ssize_t n;

	if (fd < 0)
		return;
	if (size && !(value = malloc(size))) {
		close(fd);
		return (void)fuse_reply_err(req, ENOMEM);
	}
	n = listxattr(proc, value, size);
	if (n < 0)
		fuse_reply_err(req, errno);
	else if (size)
		fuse_reply_buf(req, value, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(value);
	close(fd);
}

static void sdata_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
	(void)ino;
	(void)mode;
	(void)off;
	(void)len;
	(void)fi;
	snapfs_erofs(req);
}

static void sdata_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
	fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len, int flags)
{
	(void)ino_in;
	(void)off_in;
	(void)fi_in;
	(void)ino_out;
	(void)off_out;
	(void)fi_out;
	(void)len;
	(void)flags;
	snapfs_erofs(req);
}

/* ---- registration ------------------------------------------------------------------------------- */

#define SNAP_RO_OPS                                                                                        \
	.mkdir = snap_mkdir, .rmdir = snap_rmdir, .mknod = snap_mknod, .symlink = snap_symlink,               \
	.unlink = snap_unlink, .rename = snap_rename, .link = snap_link, .create = snap_create,               \
	.setxattr = snap_setxattr, .removexattr = snap_removexattr, .setattr = snapfs_setattr

static const struct fuse_lowlevel_ops snaps_ops = {
	.getattr = snapfs_getattr,
	.setattr = snapfs_setattr,
	.lookup = snaps_lookup,
	.mkdir = snaps_mkdir,
	.rmdir = snaps_rmdir,
	.opendir = snaps_opendir,
	.readdir = vdir_readdir,
	.readdirplus = vdir_readdirplus,
	.releasedir = vdir_releasedir,
};

static const struct fuse_lowlevel_ops snap_ops = {
	SNAP_RO_OPS,
	.getattr = snapfs_getattr,
	.lookup = snap_lookup,
	.opendir = snap_opendir,
	.readdir = vdir_readdir,
	.readdirplus = vdir_readdirplus,
	.releasedir = vdir_releasedir,
};

static const struct fuse_lowlevel_ops info_ops = {
	SNAP_RO_OPS,
	.getattr = snapfs_getattr,
	.open = info_open,
	.read = info_read,
	.release = info_release,
	.write_buf = sdata_write_buf,
};

static const struct fuse_lowlevel_ops sdata_ops = {
	SNAP_RO_OPS,
	.getattr = snapfs_getattr,
	.lookup = sdata_lookup,
	.readlink = sdata_readlink,
	.open = sdata_open,
	.read = sdata_read,
	.write_buf = sdata_write_buf,
	.release = sdata_release,
	.opendir = sdata_opendir,
	.readdir = sdata_readdir,
	.readdirplus = sdata_readdirplus,
	.releasedir = sdata_releasedir,
	.statfs = sdata_statfs,
	.getxattr = sdata_getxattr,
	.listxattr = sdata_listxattr,
	.fallocate = sdata_fallocate,
	.copy_file_range = sdata_copy_file_range,
};

static const struct node_kind_ops k_snaps = { .ops = &snaps_ops, .forget = snode_forget };
static const struct node_kind_ops k_snap = { .ops = &snap_ops, .forget = snode_forget };
static const struct node_kind_ops k_info = { .ops = &info_ops, .forget = snode_forget };
static const struct node_kind_ops k_sdata = { .ops = &sdata_ops, .forget = snode_forget };

void snapfs_init(void)
{
	node_kind_register(N_SNAPS, &k_snaps);
	node_kind_register(N_SNAP, &k_snap);
	node_kind_register(N_SNAPINFO, &k_info);
	node_kind_register(N_SNAPDATA, &k_sdata);
}
