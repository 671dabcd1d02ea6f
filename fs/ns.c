/* SPDX-License-Identifier: MIT */
/*
 * ns.c - the mounted namespace (DESIGN §3) and the dispatch of every FUSE
 * request: data nodes go to data.c, job files to jobs.c, and the virtual
 * tree (root, users, sandboxes, control files) is served here.
 *
 * Semantics follow cgroupfs/configfs: mkdir of a user or thread is an
 * object creation (acquire), rmdir of a sandbox directory releases it
 * although it holds files, control files cannot be created, removed or
 * renamed (EPERM), and they are opened with direct I/O.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "fs.h"

struct fs fs;

static const char *rootfile_names[RF_COUNT] = { ".status", ".metrics", ".config" };
static const char *ctl_names[CTL_COUNT] = { "id", "status" };
static const char *data_names[DD_COUNT] = { "workspace", "uploads", "outputs", "skills" };
static const char *job_names[JF_COUNT] = { "cmd", "env", "stdin", "stdout", "stderr", "exit", "status", "ctl" };
static struct node *rootfiles[RF_COUNT];

#define VIRT_TIMEOUT 1.0

static int name_index(const char *const *names, int count, const char *name)
{
	for (int i = 0; i < count; i++)
		if (!strcmp(names[i], name))
			return i;
	return -1;
}

/* ---- attributes ---------------------------------------------------------------- */

static void owner_of(struct node *n, uid_t *uid, gid_t *gid)
{
	*uid = fs.mount_uid;
	*gid = fs.mount_gid;
	if (n->kind == N_USER && n->user) {
		*uid = n->user->uid;
		*gid = n->user->gid;
	} else if (n->view) {
		*uid = n->view->pres_uid;
		*gid = n->view->pres_gid;
	}
}

void fs_fill_vattr(struct node *n, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = (ino_t)node_ino(n);
	owner_of(n, &st->st_uid, &st->st_gid);
	st->st_atim.tv_sec = st->st_mtim.tv_sec = st->st_ctim.tv_sec = (time_t)fs.started_at;
	st->st_blksize = 4096;
	switch (n->kind) {
	case N_ROOT:
		st->st_mode = S_IFDIR | (fs.cfg->n_users || fs.cfg->users_passwd ? 01777 : 0755);
		st->st_nlink = 2;
		break;
	case N_USER:
	case N_SANDBOX:
	case N_JOBS:
	case N_JOB:
		st->st_mode = S_IFDIR | 0700;
		st->st_nlink = 2;
		break;
	case N_JOBFILE:
		st->st_mode = S_IFREG | (mode_t)jobs_file_mode(n->which);
		st->st_nlink = 1;
		break;
	default:
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		break;
	}
}

static void virt_entry(struct node *n, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = node_ino(n);
	fs_fill_vattr(n, &e->attr);
	e->attr_timeout = n->kind == N_ROOTFILE || n->kind == N_CTL || n->kind == N_JOBFILE ? 0 : VIRT_TIMEOUT;
	e->entry_timeout = VIRT_TIMEOUT;
}

/* fs_lock held: count a lookup and fill the entry. */
static void virt_ref_entry_locked(struct node *n, struct fuse_entry_param *e)
{
	node_lookup_ref_locked(n);
	virt_entry(n, e);
}

static bool is_data(fuse_ino_t ino)
{
	return node_of(ino)->kind == N_DATA;
}

/* ---- lookup ------------------------------------------------------------------- */

static int lookup_root(const char *name, struct fuse_entry_param *e)
{
	int i = name_index(rootfile_names, RF_COUNT, name);
	struct user_ent *u;
	int err = 0;

	pthread_mutex_lock(&fs_lock);
	if (i >= 0)
		virt_ref_entry_locked(rootfiles[i], e);
	else if ((u = user_find_locked(name)))
		virt_ref_entry_locked(u->node, e);
	else
		err = ENOENT;
	pthread_mutex_unlock(&fs_lock);
	return err;
}

static int lookup_user(struct node *p, const char *name, struct fuse_entry_param *e)
{
	struct sbx *s;
	struct view *v;
	char user[NAME_MAX_LEN + 1];

	pthread_mutex_lock(&fs_lock);
	if (!p->user) {
		pthread_mutex_unlock(&fs_lock);
		return ENOENT;
	}
	snprintf(user, sizeof(user), "%s", p->user->name);
	pthread_mutex_unlock(&fs_lock);
	if (!names_valid(name))
		return ENOENT;
	s = pool_find_active(user, name);
	if (!s)
		return ENOENT;
	v = view_current(s);
	pool_put(s);
	if (!v)
		return ENOENT;
	pthread_mutex_lock(&fs_lock);
	if (v->dir)
		virt_ref_entry_locked(v->dir, e);
	pthread_mutex_unlock(&fs_lock);
	view_put(v);
	return e->ino ? 0 : ENOENT;
}

static int lookup_sandbox(struct node *p, const char *name, struct fuse_entry_param *e)
{
	struct view *v = p->view;
	int i, err = 0;

	if ((i = name_index(data_names, DD_COUNT, name)) >= 0)
		return v->dead ? ENOENT : data_lookup_root(v, i, e);
	pthread_mutex_lock(&fs_lock);
	if (v->dead)
		err = ENOENT;
	else if ((i = name_index(ctl_names, CTL_COUNT, name)) >= 0 && v->ctl[i])
		virt_ref_entry_locked(v->ctl[i], e);
	else if (!strcmp(name, "jobs") && v->jobs)
		virt_ref_entry_locked(v->jobs, e);
	else
		err = ENOENT;
	pthread_mutex_unlock(&fs_lock);
	return err;
}

static int lookup_jobs(struct node *p, const char *name, int which, struct fuse_entry_param *e)
{
	struct job *j;
	struct node *n;

	if (p->view->dead || !names_valid(name))
		return ENOENT;
	j = jobs_get(p->view, name);
	if (!j)
		return ENOENT;
	pthread_mutex_lock(&fs_lock);
	n = view_job_node_locked(p->view, j, which);
	if (n)
		virt_ref_entry_locked(n, e);
	pthread_mutex_unlock(&fs_lock);
	jobs_put(j);
	return n ? 0 : ENOMEM;
}

static int lookup_job(struct node *p, const char *name, struct fuse_entry_param *e)
{
	int i = name_index(job_names, JF_COUNT, name);
	struct node *n = NULL;

	if (i < 0 || p->view->dead)
		return ENOENT;
	pthread_mutex_lock(&fs_lock);
	if (p->job && p->linked && (n = view_job_node_locked(p->view, p->job, i)))
		virt_ref_entry_locked(n, e);
	pthread_mutex_unlock(&fs_lock);
	return n ? 0 : ENOENT;
}

static void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct node *p = node_of(parent);
	struct fuse_entry_param e;
	int err;

	memset(&e, 0, sizeof(e));
	switch (p->kind) {
	case N_DATA:
		err = data_do_lookup(p, name, &e);
		break;
	case N_ROOT:
		err = lookup_root(name, &e);
		break;
	case N_USER:
		err = lookup_user(p, name, &e);
		break;
	case N_SANDBOX:
		err = lookup_sandbox(p, name, &e);
		break;
	case N_JOBS:
		err = lookup_jobs(p, name, -1, &e);
		break;
	case N_JOB:
		err = lookup_job(p, name, &e);
		break;
	default:
		err = ENOTDIR;
	}
	if (err == ENOENT) {
		/* negative entries are not cached: sandboxes appear by mkdir,
		 * files by jobs inside the sandbox */
		e.ino = 0;
		e.entry_timeout = 0;
		return (void)fuse_reply_entry(req, &e);
	}
	if (err)
		return (void)fuse_reply_err(req, err);
	fuse_reply_entry(req, &e);
}

static void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	node_forget(node_of(ino), nlookup);
	fuse_reply_none(req);
}

static void fs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		node_forget(node_of(forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

/* The size a stat shows for a control or job file: its length right now
 * (reads use direct I/O and never stop at it; the attribute timeout is 0).
 * Not in fs_fill_vattr: that runs under fs_lock, rendering takes others. */
static off_t virt_size(struct node *n)
{
	struct buf b = BUF_INIT(BUF_CAP_JSON);
	off_t size = 0;

	if (n->kind == N_JOBFILE)
		return jobs_file_size(n);
	if ((n->kind != N_ROOTFILE && n->kind != N_CTL) || (n->view && n->view->dead))
		return 0;
	if (!ctl_render(n, &b))
		size = (off_t)b.len;
	buf_free(&b);
	return size;
}

static void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct stat st;

	if (n->kind == N_DATA)
		return data_ops.getattr(req, ino, fi);
	fs_fill_vattr(n, &st);
	st.st_size = virt_size(n);
	fuse_reply_attr(req, &st, n->kind == N_ROOTFILE || n->kind == N_CTL || n->kind == N_JOBFILE ? 0 : VIRT_TIMEOUT);
}

static void fs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct stat st;

	if (n->kind == N_DATA)
		return data_ops.setattr(req, ino, attr, valid, fi);
	/* `echo x > cmd` may truncate first: writes to job files are commands,
	 * so a truncation of a writable one means nothing and is accepted. */
	if (n->kind == N_JOBFILE && valid == FUSE_SET_ATTR_SIZE && (jobs_file_mode(n->which) & 0200)) {
		fs_fill_vattr(n, &st);
		return (void)fuse_reply_attr(req, &st, 0);
	}
	if ((valid & ~(FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW |
			     FUSE_SET_ATTR_CTIME)) == 0 && n->kind != N_ROOTFILE && n->kind != N_CTL) {
		fs_fill_vattr(n, &st); /* touch on a directory: accepted, nothing changes */
		return (void)fuse_reply_attr(req, &st, 0);
	}
	fuse_reply_err(req, EPERM);
}

/* ---- mkdir / rmdir ----------------------------------------------------------------- */

static bool may_act_for(fuse_req_t req, uid_t owner)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	return ctx->uid == 0 || ctx->uid == owner;
}

static void mkdir_user(fuse_req_t req, const char *name)
{
	struct fuse_entry_param e;
	uid_t uid = fs.mount_uid;
	gid_t gid = fs.mount_gid;
	struct sbx_config *cfg;
	int r, err;

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
	memset(&e, 0, sizeof(e));
	err = lookup_root(name, &e);
	if (err)
		return (void)fuse_reply_err(req, err);
	log_info(name, "user directory created");
	fuse_reply_entry(req, &e);
}

static void mkdir_thread(fuse_req_t req, struct node *p, const char *name)
{
	struct fuse_entry_param e;
	char user[NAME_MAX_LEN + 1], scope[140];
	struct sbx *s;
	struct view *v;
	uid_t owner;
	int err;

	pthread_mutex_lock(&fs_lock);
	if (!p->user) {
		pthread_mutex_unlock(&fs_lock);
		return (void)fuse_reply_err(req, ENOENT);
	}
	snprintf(user, sizeof(user), "%s", p->user->name);
	owner = p->user->uid;
	pthread_mutex_unlock(&fs_lock);
	snprintf(scope, sizeof(scope), "%s/%s", user, name);
	if (!names_valid(name)) {
		log_warn(user, "mkdir %s: invalid thread name (must match ^[A-Za-z0-9_-]{1,64}$)", name);
		return (void)fuse_reply_err(req, EINVAL);
	}
	if (!may_act_for(req, owner))
		return (void)fuse_reply_err(req, EACCES);
	err = pool_acquire(user, name, &s);
	if (err) {
		if (err != EEXIST)
			log_err(scope, "acquire failed: %s", strerror(err));
		return (void)fuse_reply_err(req, err);
	}
	v = view_current(s);
	pool_put(s);
	if (!v)
		return (void)fuse_reply_err(req, EIO);
	pthread_mutex_lock(&fs_lock);
	virt_ref_entry_locked(v->dir, &e);
	pthread_mutex_unlock(&fs_lock);
	view_put(v);
	fuse_reply_entry(req, &e);
}

static void fs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct node *p = node_of(parent);
	struct fuse_entry_param e;
	int err;

	switch (p->kind) {
	case N_DATA:
		return data_ops.mkdir(req, parent, name, mode);
	case N_ROOT:
		return mkdir_user(req, name);
	case N_USER:
		return mkdir_thread(req, p, name);
	case N_JOBS:
		if (p->view->dead)
			return (void)fuse_reply_err(req, ENOENT);
		if (!names_valid(name)) {
			log_warn(p->view->sbx->token, "mkdir jobs/%s: invalid job name", name);
			return (void)fuse_reply_err(req, EINVAL);
		}
		err = jobs_mkdir(p->view, name);
		if (!err)
			err = lookup_jobs(p, name, -1, &e);
		if (err)
			return (void)fuse_reply_err(req, err);
		return (void)fuse_reply_entry(req, &e);
	default:
		log_warn("namespace", "mkdir %s: not allowed at this depth", name);
		fuse_reply_err(req, EPERM);
	}
}

static void rmdir_thread(fuse_req_t req, struct node *p, const char *name)
{
	char user[NAME_MAX_LEN + 1];
	struct sbx *s;
	int err;

	pthread_mutex_lock(&fs_lock);
	snprintf(user, sizeof(user), "%s", p->user ? p->user->name : "");
	pthread_mutex_unlock(&fs_lock);
	s = user[0] && names_valid(name) ? pool_find_active(user, name) : NULL;
	if (!s)
		return (void)fuse_reply_err(req, ENOENT);
	err = pool_release(s);
	if (!err)
		view_kill(s);
	pool_put(s);
	fuse_reply_err(req, err);
}

static void fs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct node *p = node_of(parent);

	switch (p->kind) {
	case N_DATA:
		return data_ops.rmdir(req, parent, name);
	case N_ROOT:
		if (name_index(rootfile_names, RF_COUNT, name) >= 0)
			return (void)fuse_reply_err(req, ENOTDIR);
		return (void)fuse_reply_err(req, user_remove(name));
	case N_USER:
		return rmdir_thread(req, p, name);
	case N_JOBS:
		return (void)fuse_reply_err(req, p->view->dead ? ENOENT : jobs_rmdir(p->view, name));
	default:
		fuse_reply_err(req, EPERM);
	}
}

/* ---- creation and removal of files ---------------------------------------------------- */

static void fs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	if (is_data(parent))
		return data_ops.unlink(req, parent, name);
	fuse_reply_err(req, EPERM);
}

static void fs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	if (is_data(parent))
		return data_ops.create(req, parent, name, mode, fi);
	fuse_reply_err(req, EPERM);
}

static void fs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	if (is_data(parent))
		return data_ops.mknod(req, parent, name, mode, rdev);
	fuse_reply_err(req, EPERM);
}

static void fs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	if (is_data(parent))
		return data_ops.symlink(req, link, parent, name);
	fuse_reply_err(req, EPERM);
}

static void fs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
	if (is_data(parent) && is_data(ino))
		return data_ops.link(req, ino, parent, name);
	fuse_reply_err(req, is_data(parent) ? EXDEV : EPERM);
}

static void fs_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
	unsigned int flags)
{
	if (is_data(parent))
		return data_ops.rename(req, parent, name, newparent, newname, flags);
	fuse_reply_err(req, is_data(newparent) ? EXDEV : EPERM);
}

static void fs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	if (is_data(ino))
		return data_ops.readlink(req, ino);
	fuse_reply_err(req, EINVAL);
}

/* ---- open-file handles of virtual files and directories -------------------------------
 *
 * The kernel may send RELEASE while a READ of the same open file is still
 * being processed by another worker (the reader got a fatal signal and
 * stopped waiting).  So a handle is not freed at release but retired, and
 * freed once it has been retired for HANDLE_GRACE_MS: no worker keeps a
 * request that long (waits are parked without the handle).  Handles still
 * open when the session ends (a lazy unmount with open files) are freed at
 * exit from the live list.
 */
#define HANDLE_GRACE_MS 10000

struct handle {
	struct handle *prev, *next; /* handles_lock */
	void (*clean)(void *p);     /* releases what the payload owns */
	uint64_t retired_ms;        /* 0 while open */
	max_align_t payload[];
};

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static struct handle live = { &live, &live, NULL, 0 }, retired = { &retired, &retired, NULL, 0 };

static void handle_unlink(struct handle *h)
{
	h->prev->next = h->next;
	h->next->prev = h->prev;
}

static void handle_append(struct handle *list, struct handle *h)
{
	h->prev = list->prev;
	h->next = list;
	list->prev->next = h;
	list->prev = h;
}

static struct handle *handle_of(void *p)
{
	return (struct handle *)((char *)p - offsetof(struct handle, payload));
}

void *fs_handle_alloc(size_t size, void (*clean)(void *p))
{
	struct handle *h = calloc(1, sizeof(*h) + size);

	if (!h)
		return NULL;
	h->clean = clean;
	pthread_mutex_lock(&handles_lock);
	handle_append(&live, h);
	pthread_mutex_unlock(&handles_lock);
	return h->payload;
}

static void handle_destroy(struct handle *h)
{
	if (h->clean)
		h->clean(h->payload);
	free(h);
}

void fs_handle_discard(void *p)
{
	struct handle *h = handle_of(p);

	pthread_mutex_lock(&handles_lock);
	handle_unlink(h);
	pthread_mutex_unlock(&handles_lock);
	handle_destroy(h);
}

void fs_handle_retire(void *p)
{
	struct handle *h = handle_of(p), *done = NULL;
	uint64_t now = util_now_ms();

	pthread_mutex_lock(&handles_lock);
	handle_unlink(h);
	h->retired_ms = now;
	handle_append(&retired, h);
	while (retired.next != &retired && retired.next->retired_ms + HANDLE_GRACE_MS < now) {
		struct handle *x = retired.next;
		handle_unlink(x);
		x->next = done;
		done = x;
	}
	pthread_mutex_unlock(&handles_lock);
	while (done) {
		struct handle *x = done;
		done = x->next;
		handle_destroy(x);
	}
}

void fs_handles_free_all(void)
{
	struct handle *lists[] = { &live, &retired };

	pthread_mutex_lock(&handles_lock);
	for (int i = 0; i < 2; i++)
		while (lists[i]->next != lists[i]) {
			struct handle *x = lists[i]->next;
			handle_unlink(x);
			handle_destroy(x);
		}
	pthread_mutex_unlock(&handles_lock);
}

static void ctl_handle_clean(void *p)
{
	buf_free(p);
}

/* ---- control files ----------------------------------------------------------------- */

static void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct buf *b;

	if (n->kind == N_DATA)
		return data_ops.open(req, ino, fi);
	if (n->kind == N_JOBFILE)
		return jobs_open(req, n, fi);
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		log_warn("namespace", "write to a read-only control file refused");
		return (void)fuse_reply_err(req, EPERM);
	}
	if (n->view && n->view->dead)
		return (void)fuse_reply_err(req, ENOENT);
	b = fs_handle_alloc(sizeof(*b), ctl_handle_clean);
	if (!b)
		return (void)fuse_reply_err(req, ENOMEM);
	buf_init(b, BUF_CAP_JSON);
	if (ctl_render(n, b)) {
		fs_handle_discard(b);
		return (void)fuse_reply_err(req, EIO);
	}
	fi->fh = (uint64_t)(uintptr_t)b;
	fi->direct_io = 1;
	fi->nonseekable = 0;
	fuse_reply_open(req, fi);
}

static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct buf *b = (struct buf *)(uintptr_t)fi->fh;

	if (n->kind == N_DATA)
		return data_ops.read(req, ino, size, off, fi);
	if (n->kind == N_JOBFILE)
		return jobs_read(req, n, size, off, fi);
	if ((size_t)off >= b->len)
		return (void)fuse_reply_buf(req, NULL, 0);
	fuse_reply_buf(req, b->ptr + off, b->len - (size_t)off < size ? b->len - (size_t)off : size);
}

static void fs_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct fuse_bufvec dst = FUSE_BUFVEC_INIT(fuse_buf_size(in));
	char *mem;
	ssize_t got;

	if (n->kind == N_DATA)
		return data_ops.write_buf(req, ino, in, off, fi);
	if (n->kind != N_JOBFILE)
		return (void)fuse_reply_err(req, EPERM);
	/* Commands are small, but stdin is data: accept a whole FUSE write. */
	if (dst.buf[0].size > (n->which == JF_STDIN ? 2 * 1024 * 1024 : BUF_CAP_CTL)) {
		log_warn("jobs", "a %zu-byte write to a job control file refused", dst.buf[0].size);
		return (void)fuse_reply_err(req, E2BIG);
	}
	mem = malloc(dst.buf[0].size + 1);
	if (!mem)
		return (void)fuse_reply_err(req, ENOMEM);
	dst.buf[0].mem = mem;
	got = fuse_buf_copy(&dst, in, 0);
	if (got < 0) {
		free(mem);
		return (void)fuse_reply_err(req, (int)-got);
	}
	mem[got] = '\0';
	jobs_write(req, n, mem, (size_t)got, fi);
	free(mem);
}

static void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct buf *b;

	if (n->kind == N_DATA)
		return data_ops.release(req, ino, fi);
	if (n->kind == N_JOBFILE)
		return jobs_release(req, n, fi);
	b = (struct buf *)(uintptr_t)fi->fh;
	fs_handle_retire(b);
	fuse_reply_err(req, 0);
}

static void fs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	if (is_data(ino))
		return data_ops.fsync(req, ino, datasync, fi);
	fuse_reply_err(req, 0);
}

static void fs_poll(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct fuse_pollhandle *ph)
{
	struct node *n = node_of(ino);

	if (n->kind == N_JOBFILE)
		return jobs_poll(req, n, fi, ph);
	if (ph)
		fuse_pollhandle_destroy(ph);
	fuse_reply_poll(req, POLLIN | POLLOUT | POLLRDNORM | POLLWRNORM);
}

/* ---- directories ----------------------------------------------------------------- */

struct vdir {
	struct buf names; /* NUL-separated */
	unsigned char *types;
	size_t count, alloc;
};

static void vdir_add(struct vdir *d, const char *name, unsigned char type)
{
	if (d->count == d->alloc) {
		size_t n = d->alloc ? d->alloc * 2 : 16;
		unsigned char *t = realloc(d->types, n);
		if (!t)
			return;
		d->types = t;
		d->alloc = n;
	}
	if (buf_add(&d->names, name, strlen(name) + 1))
		return;
	d->types[d->count++] = type;
}

static void vdir_add_user(struct user_ent *u, void *arg)
{
	vdir_add(arg, u->name, DT_DIR);
}

static void vdir_add_sbx(struct sbx *s, void *arg)
{
	vdir_add(arg, s->thread, DT_DIR);
}

static void vdir_add_job(const char *name, void *arg)
{
	vdir_add(arg, name, DT_DIR);
}

static void vdir_clean(void *p)
{
	struct vdir *d = p;

	buf_free(&d->names);
	free(d->types);
}

static void fs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct vdir *d;
	char user[NAME_MAX_LEN + 1] = "";

	if (n->kind == N_DATA)
		return data_ops.opendir(req, ino, fi);
	if (n->view && n->view->dead)
		return (void)fuse_reply_err(req, ENOENT);
	d = fs_handle_alloc(sizeof(*d), vdir_clean);
	if (!d)
		return (void)fuse_reply_err(req, ENOMEM);
	buf_init(&d->names, BUF_CAP_JSON);
	vdir_add(d, ".", DT_DIR);
	vdir_add(d, "..", DT_DIR);
	switch (n->kind) {
	case N_ROOT:
		for (int i = 0; i < RF_COUNT; i++)
			vdir_add(d, rootfile_names[i], DT_REG);
		users_each(vdir_add_user, d);
		break;
	case N_USER:
		pthread_mutex_lock(&fs_lock);
		if (n->user)
			snprintf(user, sizeof(user), "%s", n->user->name);
		pthread_mutex_unlock(&fs_lock);
		if (user[0])
			pool_each_active(user, vdir_add_sbx, d);
		break;
	case N_SANDBOX:
		for (int i = 0; i < CTL_COUNT; i++)
			vdir_add(d, ctl_names[i], DT_REG);
		for (int i = 0; i < DD_COUNT; i++)
			vdir_add(d, data_names[i], DT_DIR);
		vdir_add(d, "jobs", DT_DIR);
		break;
	case N_JOBS:
		jobs_list(n->view, vdir_add_job, d);
		break;
	case N_JOB:
		for (int i = 0; i < JF_COUNT; i++)
			vdir_add(d, job_names[i], DT_REG);
		break;
	default:
		fs_handle_discard(d);
		return (void)fuse_reply_err(req, ENOTDIR);
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	fuse_reply_open(req, fi);
}

static void fs_do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi, int plus)
{
	struct vdir *d = (struct vdir *)(uintptr_t)fi->fh;
	char *buf, *p;
	const char *name = buf_str(&d->names);
	size_t rem = size;

	(void)ino;
	buf = calloc(1, size);
	if (!buf)
		return (void)fuse_reply_err(req, ENOMEM);
	p = buf;
	for (size_t i = 0; i < d->count; i++, name += strlen(name) + 1) {
		size_t ent;
		if ((off_t)i < off)
			continue;
		if (plus) {
			struct fuse_entry_param e;
			memset(&e, 0, sizeof(e)); /* nodeid 0: the kernel looks it up itself */
			e.attr.st_ino = i + 1;  /* but readdir(3) hides d_ino 0 */
			e.attr.st_mode = (mode_t)(d->types[i] << 12);
			ent = fuse_add_direntry_plus(req, p, rem, name, &e, (off_t)i + 1);
		} else {
			struct stat st = { .st_ino = i + 1, .st_mode = (mode_t)(d->types[i] << 12) };
			ent = fuse_add_direntry(req, p, rem, name, &st, (off_t)i + 1);
		}
		if (ent > rem)
			break;
		p += ent;
		rem -= ent;
	}
	fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

static void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	if (is_data(ino))
		return data_ops.readdir(req, ino, size, off, fi);
	fs_do_readdir(req, ino, size, off, fi, 0);
}

static void fs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	if (is_data(ino))
		return data_ops.readdirplus(req, ino, size, off, fi);
	fs_do_readdir(req, ino, size, off, fi, 1);
}

static void fs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct vdir *d;

	if (is_data(ino))
		return data_ops.releasedir(req, ino, fi);
	d = (struct vdir *)(uintptr_t)fi->fh;
	fs_handle_retire(d);
	fuse_reply_err(req, 0);
}

static void fs_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	if (is_data(ino))
		return data_ops.fsyncdir(req, ino, datasync, fi);
	fuse_reply_err(req, 0);
}

static void fs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	if (is_data(ino))
		return data_ops.statfs(req, ino);
	if (statvfs(fs.cfg->state_dir, &sv))
		return (void)fuse_reply_err(req, errno);
	fuse_reply_statfs(req, &sv);
}

/* Operations that only exist on data nodes. */
#define DATA_ONLY(op, ...)                                                  \
	do {                                                                \
		if (is_data(ino))                                           \
			return data_ops.op(req, ino, __VA_ARGS__);          \
		fuse_reply_err(req, ENOTSUP);                               \
	} while (0)

static void fs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t o, off_t l, struct fuse_file_info *fi)
{
	DATA_ONLY(fallocate, mode, o, l, fi);
}
static void fs_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op)
{
	DATA_ONLY(flock, fi, op);
}
static void fs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	if (!is_data(ino))
		return (void)fuse_reply_err(req, ENODATA);
	data_ops.getxattr(req, ino, name, size);
}
static void fs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	if (!is_data(ino))
		return (void)(size ? fuse_reply_buf(req, NULL, 0) : fuse_reply_xattr(req, 0));
	data_ops.listxattr(req, ino, size);
}
static void fs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size, int flags)
{
	if (!is_data(ino))
		return (void)fuse_reply_err(req, EPERM);
	data_ops.setxattr(req, ino, name, value, size, flags);
}
static void fs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	if (!is_data(ino))
		return (void)fuse_reply_err(req, EPERM);
	data_ops.removexattr(req, ino, name);
}
static void fs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	DATA_ONLY(lseek, off, whence, fi);
}
static void fs_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
	fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len, int flags)
{
	if (is_data(ino_in) && is_data(ino_out))
		return data_ops.copy_file_range(req, ino_in, off_in, fi_in, ino_out, off_out, fi_out, len, flags);
	fuse_reply_err(req, EXDEV);
}

static void fs_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_write = 1024 * 1024;
	conn->max_readahead = conn->max_readahead > 1024 * 1024 ? conn->max_readahead : 1024 * 1024;
	conn->want |= FUSE_CAP_ATOMIC_O_TRUNC & conn->capable;
	conn->want |= FUSE_CAP_SPLICE_WRITE & conn->capable;
	conn->want |= FUSE_CAP_SPLICE_MOVE & conn->capable;
	conn->want |= FUSE_CAP_SPLICE_READ & conn->capable;
	conn->want |= FUSE_CAP_AUTO_INVAL_DATA & conn->capable;
	conn->want |= FUSE_CAP_PARALLEL_DIROPS & conn->capable;
	conn->want |= FUSE_CAP_FLOCK_LOCKS & conn->capable;
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
}

static void fs_destroy(void *userdata)
{
	(void)userdata;
}

void fs_nodes_init(void)
{
	for (int i = 0; i < RF_COUNT; i++)
		rootfiles[i] = vnode_new(N_ROOTFILE, i);
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = fs_init,
	.destroy = fs_destroy,
	.lookup = fs_lookup,
	.forget = fs_forget,
	.forget_multi = fs_forget_multi,
	.getattr = fs_getattr,
	.setattr = fs_setattr,
	.readlink = fs_readlink,
	.mknod = fs_mknod,
	.mkdir = fs_mkdir,
	.unlink = fs_unlink,
	.rmdir = fs_rmdir,
	.symlink = fs_symlink,
	.rename = fs_rename,
	.link = fs_link,
	.open = fs_open,
	.read = fs_read,
	.write_buf = fs_write_buf,
	/* no .flush: libfuse answers ENOSYS once and the kernel stops sending
	 * FLUSH on every close(2) (a round trip per file; the data directories
	 * are local files whose close reports nothing) */
	.release = fs_release,
	.fsync = fs_fsync,
	.opendir = fs_opendir,
	.readdir = fs_readdir,
	.readdirplus = fs_readdirplus,
	.releasedir = fs_releasedir,
	.fsyncdir = fs_fsyncdir,
	.statfs = fs_statfs,
	.setxattr = fs_setxattr,
	.getxattr = fs_getxattr,
	.listxattr = fs_listxattr,
	.removexattr = fs_removexattr,
	.create = fs_create,
	.poll = fs_poll,
	.fallocate = fs_fallocate,
	.flock = fs_flock,
	.copy_file_range = fs_copy_file_range,
	.lseek = fs_lseek,
};
