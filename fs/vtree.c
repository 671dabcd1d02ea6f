/* SPDX-License-Identifier: MIT */
/*
 * vtree.c - the virtual tree of the namespace (DESIGN §3): the root with its
 * dot-files, user directories, sandbox directories and their control files.
 * Data directories are served by data.c and jobs/ by jobfs.c; this module
 * only links them into a sandbox directory.
 *
 * Semantics follow cgroupfs/configfs: mkdir of a user or thread is an
 * object creation (acquire), rmdir of a sandbox directory releases it
 * although it holds files, control files cannot be created, removed or
 * renamed (EPERM), and they are opened with direct I/O.
 *
 * Acquire and release are slow (a container start, a remote call).  With
 * `acquire: async` (the default) a thread's mkdir is answered at once and
 * the create runs behind it (acquire.c); what is used inside the directory
 * waits for it.  With `acquire: sync`, and for rmdir, they go to the
 * lifecycle queue (runtime/work.h, in the scope's lane, fswork.h) and the
 * work item answers the request, so no FUSE worker waits for a provider.  A
 * sync mkdir is interruptible: a signal answers it EINTR at once and cancels
 * the create, which cleans up.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "reports.h"
#include "data.h"
#include "handle.h"
#include "netfs.h"
#include "rfiles.h"
#include "node.h"
#include "sbxctl.h"
#include "snapfs.h"
#include "vdir.h"
#include "fswork.h"
#include "acquire.h"

#define VDIR_TIMEOUT 1.0

static const char *rootfile_names[RF_COUNT] = { ".status", ".metrics", ".config", ".health" };
static const char *ctl_names[CTL_COUNT] = { "id", "status", "ctl", "events", "network", "ready" };
static const char *data_names[DD_COUNT] = { "workspace", "uploads", "outputs", "skills" };
static struct node *rootfiles[RF_COUNT];

static int name_index(const char *const *names, int count, const char *name)
{
	for (int i = 0; i < count; i++)
		if (!strcmp(names[i], name))
			return i;
	return -1;
}

/* ---- attributes -------------------------------------------------------------- */

static mode_t vtree_mode(struct node *n)
{
	switch (n->kind) {
	case N_ROOT:
		return S_IFDIR | (fs.cfg->n_users || fs.cfg->users_passwd ? 01777 : 0755);
	case N_USER:
	case N_SANDBOX:
		return S_IFDIR | 0700;
	case N_CTL:
		if (netfs_owns(n))
			return netfs_mode(n);
		return S_IFREG | (sbxctl_is(n) ? 0200 : 0444);
	default:
		return S_IFREG | 0444;
	}
}

/* The size of a readable control file: its content rendered now, as
 * reader sees it. */
static off_t vtree_size(struct node *n, uid_t reader)
{
	struct buf b = BUF_INIT(BUF_CAP_JSON);
	off_t size = 0;

	if ((n->kind == N_ROOTFILE || n->kind == N_CTL) && !sbxctl_is(n) && !netfs_owns(n) && !reports_render(n, &b, reader))
		size = (off_t)b.len;
	buf_free(&b);
	return size;
}

static double vtree_timeout(struct node *n)
{
	/* a creating sandbox's directory: never cached, so that once its create
	 * failed a stat says ENOENT at once (acquire.c) */
	if (n->kind == N_SANDBOX && n->view &&
	    (__atomic_load_n(&n->view->pending, __ATOMIC_ACQUIRE) || __atomic_load_n(&n->view->ready_err, __ATOMIC_ACQUIRE)))
		return 0;
	return n->kind == N_ROOTFILE || n->kind == N_CTL ? 0 : VDIR_TIMEOUT;
}

/* fs_lock held. */
static void vtree_entry_locked(struct node *n, off_t size, struct fuse_entry_param *e)
{
	lock_assert_held(&fs_lock);
	vnode_entry_locked(n, vtree_mode(n), size, vtree_timeout(n), e);
}

static void vtree_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct stat st;

	(void)fi;
	if (n->kind == N_SANDBOX && n->view && __atomic_load_n(&n->view->ready_err, __ATOMIC_ACQUIRE))
		return (void)fuse_reply_err(req, ENOENT); /* its create failed: gone (acquire.c) */
	vnode_attr(n, vtree_mode(n), vtree_size(n, fuse_req_ctx(req)->uid), &st);
	fuse_reply_attr(req, &st, vtree_timeout(n));
}

/* touch of a directory: accepted, nothing changes.  Anything else: EPERM. */
static void vtree_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid, struct fuse_file_info *fi)
{
	const int times = FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW |
			  FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME;
	struct node *n = node_of(ino);

	(void)attr;
	if ((valid & ~times) == 0 && S_ISDIR(vtree_mode(n)))
		return vtree_getattr(req, ino, fi);
	/* `echo cmd > network` truncates first: a command file has nothing to cut */
	if (valid == FUSE_SET_ATTR_SIZE && netfs_owns(n) && (vtree_mode(n) & 0200))
		return vtree_getattr(req, ino, fi);
	fuse_reply_err(req, EPERM);
}

/* ---- lookup ----------------------------------------------------------------------- */

static void root_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	int i = name_index(rootfile_names, RF_COUNT, name);
	struct fuse_entry_param e;
	struct user_ent *u;
	off_t size = i >= 0 ? vtree_size(rootfiles[i], fuse_req_ctx(req)->uid) : 0;
	int err = 0;

	(void)parent;
	lock_acquire(&fs_lock);
	if (i >= 0)
		vtree_entry_locked(rootfiles[i], size, &e);
	else if ((u = user_find_locked(name)))
		vtree_entry_locked(u->node, 0, &e);
	else
		err = ENOENT;
	fs_unlock();
	node_reply_entry(req, err, &e);
}

/* The entry of v's sandbox directory; else the create's errno (a pending
 * view whose create failed already) or ENOENT. */
static int view_entry(struct view *v, struct fuse_entry_param *e)
{
	int err;

	lock_acquire(&fs_lock);
	err = v->ready_err ? v->ready_err : ENOENT;
	if (v->dir && !v->dead) {
		vtree_entry_locked(v->dir, 0, e);
		err = 0;
	}
	fs_unlock();
	return err;
}

/* The entry of s's sandbox directory, or ENOENT. */
static int sandbox_entry(struct sbx *s, struct fuse_entry_param *e)
{
	struct view *v = view_current(s);
	int err;

	if (!v)
		return ENOENT;
	err = view_entry(v, e);
	view_put(v);
	return err;
}

static void user_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	char user[NAME_MAX_LEN + 1];
	struct fuse_entry_param e;
	struct sbx *s = NULL;
	struct view *v = NULL;
	bool creating = false;
	int err = ENOENT;

	if (user_name_of(node_of(parent), user, NULL) && names_valid(name))
		s = pool_find_shown(user, name, &creating);
	if (s && creating)
		v = view_pending_of(s); /* the directory of an asynchronous mkdir */
	if (v) {
		err = view_entry(v, &e);
		view_put(v);
	} else if (s) {
		err = sandbox_entry(s, &e);
	}
	if (s)
		pool_put(s);
	node_reply_entry(req, err ? ENOENT : 0, &e); /* a failed create's directory is gone */
}

struct lookup_again {
	fuse_ino_t parent;
	char name[];
};

static void sandbox_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);

static void sandbox_lookup_again(fuse_req_t req, void *arg)
{
	struct lookup_again *l = arg;

	sandbox_lookup(req, l->parent, l->name);
}

/* A lookup in a sandbox directory whose create runs waits for it (all but
 * id, status and ready, which answer at once): true when req was taken. */
static bool sandbox_lookup_wait(fuse_req_t req, struct view *v, fuse_ino_t parent, const char *name)
{
	struct lookup_again *l;
	size_t len = strlen(name);

	if (!__atomic_load_n(&v->pending, __ATOMIC_ACQUIRE) && !__atomic_load_n(&v->ready_err, __ATOMIC_ACQUIRE))
		return false;
	if (!__atomic_load_n(&v->ready_err, __ATOMIC_ACQUIRE) && __atomic_load_n(&v->pending, __ATOMIC_ACQUIRE) &&
	    (!strcmp(name, "id") || !strcmp(name, "status") || !strcmp(name, "ready")))
		return false;
	l = malloc(sizeof(*l) + len + 1);
	if (!l) {
		fuse_reply_err(req, ENOMEM);
		return true;
	}
	l->parent = parent;
	memcpy(l->name, name, len + 1);
	if (acquire_park(req, v, sandbox_lookup_again, l, free))
		return true;
	free(l);
	return false;
}

static void sandbox_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct view *v = node_of(parent)->view;
	struct fuse_entry_param e;
	struct node *n = NULL;
	int i, err = 0;

	if (sandbox_lookup_wait(req, v, parent, name))
		return;

	if ((i = name_index(data_names, DD_COUNT, name)) >= 0) {
		if (v->dead)
			return node_reply_entry(req, ENOENT, &e);
		/* the provider's files API, or the bind-mounted host directory */
		return node_reply_entry(req, rfiles_is_remote(v, i) ? rfiles_lookup_root(v, i, &e) : data_lookup_root(v, i, &e), &e);
	}
	i = name_index(ctl_names, CTL_COUNT, name);
	if (i >= 0) {
		lock_acquire(&fs_lock);
		n = v->dead ? NULL : v->ctl[i];
		fs_unlock();
	}
	off_t size = n ? vtree_size(n, fuse_req_ctx(req)->uid) : 0; /* rendered outside fs_lock */
	lock_acquire(&fs_lock);
	if (v->dead) /* a failed create's view: its errno (set before it died; acquire.c) */
		err = v->ready_err ? v->ready_err : ENOENT;
	else if (i >= 0 && v->ctl[i])
		vtree_entry_locked(v->ctl[i], size, &e);
	else if (!strcmp(name, "jobs") && v->jobs)
		vnode_entry_locked(v->jobs, S_IFDIR | 0700, 0, VDIR_TIMEOUT, &e);
	else if (strcmp(name, "snapshots"))
		err = ENOENT;
	fs_unlock();
	if (!err && !strcmp(name, "snapshots"))
		err = snapfs_lookup_root(v, &e); /* snapfs.c's node */
	node_reply_entry(req, err, &e);
}

/* ---- mkdir / rmdir of users and threads --------------------------------------------- */

static bool may_act_for(fuse_req_t req, uid_t owner)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	return ctx->uid == 0 || ctx->uid == owner;
}

static void root_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct fuse_entry_param e;
	uid_t uid = fs.mount_uid;
	gid_t gid = fs.mount_gid;
	struct sbx_config *cfg;
	int r, err;

	(void)parent;
	(void)mode;
	if (!names_valid(name)) {
		log_warn("namespace", "mkdir %s: invalid user name (must match ^[A-Za-z0-9_-]{1,64}$)", name);
		return (void)fuse_reply_err(req, EINVAL);
	}
	cfg = pool_config();
	r = config_user_lookup(cfg, name, &uid, &gid);
	config_put(cfg);
	if (r < 0 || !may_act_for(req, uid)) {
		log_warn(name, "mkdir refused: %s", r < 0 ? "not a configured user" : "caller is not that user");
		return (void)fuse_reply_err(req, EACCES);
	}
	err = user_add(name, uid, gid);
	if (err)
		return (void)fuse_reply_err(req, err);
	lock_acquire(&fs_lock);
	struct user_ent *u = user_find_locked(name);
	if (u)
		vtree_entry_locked(u->node, 0, &e);
	fs_unlock();
	if (!u)
		return (void)fuse_reply_err(req, ENOENT);
	log_info(name, "user directory created");
	fuse_reply_entry(req, &e);
}

static void root_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent;
	if (name_index(rootfile_names, RF_COUNT, name) >= 0)
		return (void)fuse_reply_err(req, ENOTDIR);
	fuse_reply_err(req, user_remove(name));
}

struct thread_op {
	struct fswork fw; /* first */
	char user[NAME_MAX_LEN + 1];
	char thread[NAME_MAX_LEN + 1];
};

static void thread_op_free(struct thread_op *op)
{
	work_fini(&op->fw.w);
	free(op);
}

/* An acquire whose mkdir was answered EINTR while the sandbox came up: the
 * caller saw no directory, so none stays (released into the warm pool, the
 * way an rmdir would). */
static void acquire_undo(struct thread_op *op, struct sbx *s)
{
	struct token *prev = token_enter(NULL); /* not the cancelled caller's: the release runs to its end */

	log_info(op->user, "mkdir %s: interrupted as the sandbox became ready: released", op->thread);
	if (!pool_release(s)) {
		view_kill(s);
		netfs_released(s);
	}
	token_leave(prev);
}

/* Work thread: acquire, then answer the mkdir.  An interrupt cancels the
 * item's token: the create under it stops (and cleans up) at once. */
static void acquire_work(struct work *w)
{
	struct thread_op *op = (struct thread_op *)w;
	struct fuse_entry_param e;
	struct sbx *s = NULL;
	fuse_req_t req;
	enum sbx_err te = token_check(&w->tok);
	int err = te ? sbx_err_errno(te) : pool_acquire(op->user, op->thread, &s);

	if (err && err != EEXIST && err != EINTR)
		log_err(op->user, "mkdir %s: acquire failed: %s", op->thread, strerror(err));
	else if (err == EINTR)
		log_info(op->user, "mkdir %s: interrupted: nothing is left of it", op->thread);
	req = fswork_req(&op->fw);
	if (!req) {
		if (s)
			acquire_undo(op, s);
	} else if (!err) {
		err = sandbox_entry(s, &e);
	}
	if (s)
		pool_put(s);
	if (req && err)
		fuse_reply_err(req, token_cancelled(&w->tok) ? EINTR : err);
	else if (req)
		fuse_reply_entry(req, &e);
	thread_op_free(op);
}

/* Work thread: release, then answer the rmdir.  Not interruptible: a
 * release half done would leave the sandbox neither active nor parked. */
static void release_work(struct work *w)
{
	struct thread_op *op = (struct thread_op *)w;
	struct sbx *s = pool_find_active(op->user, op->thread);
	int err = ENOENT;

	if (s) {
		err = pool_release(s);
		if (!err) {
			view_kill(s);
			netfs_released(s); /* readers waiting on its events */
		}
		pool_put(s);
	}
	fswork_reply_err(&op->fw, err);
	thread_op_free(op);
}

static void thread_op_submit(fuse_req_t req, fuse_ino_t parent, const char *name, void (*fn)(struct work *))
{
	char key[SCOPE_TOKEN_LEN + 1];
	struct thread_op *op;
	uid_t owner;

	op = calloc(1, sizeof(*op));
	if (!op)
		return (void)fuse_reply_err(req, ENOMEM);
	if (!user_name_of(node_of(parent), op->user, &owner)) {
		free(op);
		return (void)fuse_reply_err(req, ENOENT);
	}
	if (!names_valid(name)) {
		if (fn == acquire_work)
			log_warn(op->user, "mkdir %s: invalid thread name (must match ^[A-Za-z0-9_-]{1,64}$)", name);
		free(op);
		return (void)fuse_reply_err(req, fn == acquire_work ? EINVAL : ENOENT);
	}
	if (!may_act_for(req, owner)) {
		free(op);
		return (void)fuse_reply_err(req, EACCES);
	}
	memcpy(op->thread, name, strlen(name) + 1);
	if (names_scope_token(op->user, op->thread, key))
		key[0] = '\0';
	/* the lane of the scope: its mkdir and rmdir, not other users' */
	if (fswork_start(&op->fw, req, WORK_LIFECYCLE, key, pool_work_timeout_ms(), fn == acquire_work, fn))
		free(op);
}

/* acquire: async (fs/acquire.c): the mkdir answers once the create has
 * started; acquire: sync: once the sandbox is ready (acquire_work). */
static void user_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	char user[NAME_MAX_LEN + 1];
	struct fuse_entry_param e;
	struct sbx_config *cfg = pool_config();
	bool sync = !cfg || cfg->acquire_sync;
	struct view *v = NULL;
	uid_t owner;
	int err;

	(void)mode;
	config_put(cfg);
	if (sync)
		return thread_op_submit(req, parent, name, acquire_work);
	if (!user_name_of(node_of(parent), user, &owner))
		return (void)fuse_reply_err(req, ENOENT);
	if (!names_valid(name)) {
		log_warn(user, "mkdir %s: invalid thread name (must match ^[A-Za-z0-9_-]{1,64}$)", name);
		return (void)fuse_reply_err(req, EINVAL);
	}
	if (!may_act_for(req, owner))
		return (void)fuse_reply_err(req, EACCES);
	err = acquire_start(user, name, &v);
	if (!err) {
		err = view_entry(v, &e);
		view_put(v);
	}
	if (err)
		return (void)fuse_reply_err(req, err);
	fuse_reply_entry(req, &e);
}

/* rmdir of a sandbox whose create runs (acquire: async): EBUSY.  Waiting
 * for the create to be cancelled and cleaned up would hold the user
 * directory's lock for that long (what the asynchronous mkdir avoids), and
 * answering before the clean-up would make a new mkdir of the name fail. */
static void user_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	char user[NAME_MAX_LEN + 1];
	bool creating = false;
	struct sbx *s = NULL;

	if (user_name_of(node_of(parent), user, NULL) && names_valid(name))
		s = pool_find_shown(user, name, &creating);
	if (s)
		pool_put(s);
	if (s && creating) {
		log_warn(user, "rmdir %s refused: its create is running (wait on its `ready` file, then rmdir)", name);
		return (void)fuse_reply_err(req, EBUSY);
	}
	thread_op_submit(req, parent, name, release_work);
}

static void sandbox_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)parent;
	(void)mode;
	log_warn("namespace", "mkdir %s: not allowed in a sandbox directory", name);
	fuse_reply_err(req, EPERM);
}

/* ---- control files ------------------------------------------------------------------- */

/* An open readable control file: its content rendered at open (re-rendered
 * by a read from 0 once `status` changed: poll(2) then pread, as with
 * cgroup.events), and the status version it shows. */
struct ctl_handle {
	struct buf b; /* first: read as a struct buf */
	unsigned ver;
};

static void ctl_handle_clean(void *p)
{
	buf_free(&((struct ctl_handle *)p)->b);
}

static unsigned ctl_status_ver(struct node *n)
{
	return n->view ? __atomic_load_n(&n->view->status_ver, __ATOMIC_ACQUIRE) : 0;
}

static void ctlfile_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct ctl_handle *h;
	struct buf *b;

	if (sbxctl_is(n))
		return sbxctl_open(req, n, fi);
	if (netfs_owns(n))
		return netfs_open(req, n, fi);
	if (n->kind == N_CTL && n->which == CTL_READY)
		return acquire_ready_open(req, n, fi);
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		log_warn("namespace", "write to a read-only control file refused");
		return (void)fuse_reply_err(req, EPERM);
	}
	if (n->view && n->view->dead)
		return (void)fuse_reply_err(req, ENOENT);
	h = handle_alloc(sizeof(*h), ctl_handle_clean);
	if (!h)
		return (void)fuse_reply_err(req, ENOMEM);
	h->ver = ctl_status_ver(n); /* before the rendering: a change after it shows */
	b = &h->b;
	buf_init(b, BUF_CAP_JSON);
	if (reports_render(n, b, fuse_req_ctx(req)->uid)) {
		handle_discard(b);
		return (void)fuse_reply_err(req, EIO);
	}
	fi->fh = (uint64_t)(uintptr_t)b;
	fi->direct_io = 1;
	fi->noflush = 1;
	fuse_reply_open(req, fi);
}

static void ctlfile_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct ctl_handle *h = (struct ctl_handle *)(uintptr_t)fi->fh;
	struct buf *b = h ? &h->b : NULL;
	unsigned ver;

	if (netfs_owns(n))
		return netfs_read(req, n, size, off, fi);
	if (n->kind == N_CTL && n->which == CTL_READY)
		return acquire_ready_read(req, n, size, off);
	ver = ctl_status_ver(n);
	if (off == 0 && n->kind == N_CTL && n->which == CTL_STATUS && ver != h->ver) {
		struct buf fresh = BUF_INIT(BUF_CAP_JSON);

		if (!reports_render(n, &fresh, fuse_req_ctx(req)->uid)) {
			buf_free(b);
			*b = fresh; /* (a concurrent read of this handle is not expected: one reader, pread 0) */
			h->ver = ver;
		} else {
			buf_free(&fresh);
		}
	}
	if ((size_t)off >= b->len)
		return (void)fuse_reply_buf(req, NULL, 0);
	fuse_reply_buf(req, b->ptr + off, b->len - (size_t)off < size ? b->len - (size_t)off : size);
}

/* Only the sandbox's ctl and network are writable: a command per write(2). */
static void ctlfile_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off,
	struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	size_t size = fuse_buf_size(in);
	struct fuse_bufvec dst = FUSE_BUFVEC_INIT(size);
	char mem[256];
	ssize_t got;

	(void)off;
	if (netfs_owns(n))
		return netfs_write(req, n, in, fi);
	if (!sbxctl_is(n))
		return (void)fuse_reply_err(req, EPERM);
	if (size >= sizeof(mem)) {
		log_warn("namespace", "a %zu-byte write to a sandbox ctl refused", size);
		return (void)fuse_reply_err(req, EINVAL);
	}
	dst.buf[0].mem = mem;
	got = fuse_buf_copy(&dst, in, 0);
	if (got < 0)
		return (void)fuse_reply_err(req, (int)-got);
	sbxctl_write(req, n, mem, (size_t)got);
}

static void ctlfile_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (netfs_owns(node_of(ino)))
		return netfs_release(req, node_of(ino), fi);
	if (fi->fh)
		handle_retire((void *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void ctlfile_poll(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct fuse_pollhandle *ph)
{
	struct node *n = node_of(ino);
	struct ctl_handle *h = (struct ctl_handle *)(uintptr_t)fi->fh;

	if (netfs_owns(n))
		return netfs_poll(req, n, fi, ph);
	if (n->kind == N_CTL && n->which == CTL_READY)
		return acquire_ready_poll(req, n, ph);
	if (n->kind == N_CTL && n->which == CTL_STATUS && h)
		return (void)fuse_reply_poll(req, acquire_status_poll(n, h->ver, ph));
	if (ph)
		fuse_pollhandle_destroy(ph);
	fuse_reply_poll(req, POLLIN | POLLRDNORM);
}

/* ---- directories ----------------------------------------------------------------------- */

static void vdir_add_user(struct user_ent *u, void *arg)
{
	vdir_add(arg, u->name, DT_DIR);
}

static void vdir_add_sbx(struct sbx *s, void *arg)
{
	vdir_add(arg, s->thread, DT_DIR);
}

struct opendir_again {
	fuse_ino_t ino;
	struct fuse_file_info fi;
};

static void vtree_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

static void vtree_opendir_again(fuse_req_t req, void *arg)
{
	struct opendir_again *o = arg;

	vtree_opendir(req, o->ino, &o->fi);
}

static void vtree_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	char user[NAME_MAX_LEN + 1];
	struct opendir_again *o;
	struct vdir *d;

	if (n->kind == N_SANDBOX && n->view &&
	    (__atomic_load_n(&n->view->pending, __ATOMIC_ACQUIRE) || __atomic_load_n(&n->view->ready_err, __ATOMIC_ACQUIRE))) {
		/* a listing of a sandbox whose create runs waits for it */
		o = malloc(sizeof(*o));
		if (!o)
			return (void)fuse_reply_err(req, ENOMEM);
		o->ino = ino;
		o->fi = *fi;
		if (acquire_park(req, n->view, vtree_opendir_again, o, free))
			return;
		free(o);
	}
	if (n->view && n->view->dead)
		return (void)fuse_reply_err(req, ENOENT);
	d = vdir_new();
	if (!d)
		return (void)fuse_reply_err(req, ENOMEM);
	switch (n->kind) {
	case N_ROOT:
		for (int i = 0; i < RF_COUNT; i++)
			vdir_add(d, rootfile_names[i], DT_REG);
		users_each(vdir_add_user, d);
		break;
	case N_USER:
		if (user_name_of(n, user, NULL))
			pool_each_active(user, vdir_add_sbx, d);
		break;
	default: /* N_SANDBOX */
		for (int i = 0; i < CTL_COUNT; i++)
			vdir_add(d, ctl_names[i], DT_REG);
		for (int i = 0; i < DD_COUNT; i++)
			vdir_add(d, data_names[i], DT_DIR);
		vdir_add(d, "jobs", DT_DIR);
		vdir_add(d, "snapshots", DT_DIR);
		break;
	}
	vdir_reply_open(req, d, fi);
}

/* ---- registration ------------------------------------------------------------------------- */

#define VTREE_DIR_OPS                                                                                          \
	.getattr = vtree_getattr, .setattr = vtree_setattr, .opendir = vtree_opendir, .readdir = vdir_readdir, \
	.readdirplus = vdir_readdirplus, .releasedir = vdir_releasedir

static const struct fuse_lowlevel_ops root_ops = {
	VTREE_DIR_OPS,
	.lookup = root_lookup,
	.mkdir = root_mkdir,
	.rmdir = root_rmdir,
};

static const struct fuse_lowlevel_ops user_ops = {
	VTREE_DIR_OPS,
	.lookup = user_lookup,
	.mkdir = user_mkdir,
	.rmdir = user_rmdir,
};

static const struct fuse_lowlevel_ops sandbox_ops = {
	VTREE_DIR_OPS,
	.lookup = sandbox_lookup,
	.mkdir = sandbox_mkdir,
};

static const struct fuse_lowlevel_ops ctlfile_ops = {
	.getattr = vtree_getattr,
	.setattr = vtree_setattr,
	.open = ctlfile_open,
	.read = ctlfile_read,
	.write_buf = ctlfile_write_buf,
	.poll = ctlfile_poll,
	.release = ctlfile_release,
};

static const struct node_kind_ops k_root = { .ops = &root_ops };
static const struct node_kind_ops k_user = { .ops = &user_ops };
static const struct node_kind_ops k_sandbox = { .ops = &sandbox_ops };
static const struct node_kind_ops k_ctlfile = { .ops = &ctlfile_ops };

int vtree_init(void)
{
	for (int i = 0; i < RF_COUNT; i++) {
		rootfiles[i] = vnode_new(N_ROOTFILE, i);
		if (!rootfiles[i])
			return ENOMEM;
	}
	node_kind_register(N_ROOT, &k_root);
	node_kind_register(N_USER, &k_user);
	node_kind_register(N_SANDBOX, &k_sandbox);
	node_kind_register(N_ROOTFILE, &k_ctlfile);
	node_kind_register(N_CTL, &k_ctlfile);
	return 0;
}
