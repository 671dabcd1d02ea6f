/* SPDX-License-Identifier: MIT */
/*
 * data.c - workspace/, uploads/, outputs/ and skills/: a passthrough to
 * host directories, in the manner of libfuse's passthrough_ll.
 *
 * Each data node has an O_PATH fd on its host file, opened with O_NOFOLLOW
 * relative to its parent's fd; every operation is an *at() call on those
 * fds.  So the daemon never resolves a path string: `..` never reaches it
 * (the kernel resolves it in its dcache) and symlinks are stored and
 * returned as they are but never followed by the daemon, which makes
 * escaping the thread's directory impossible.
 *
 * Descriptors are bounded (issue 19, nodefd.h): a node holds a file handle
 * and its fd only while in use or cached (nfd_get/nfd_put around each
 * operation; an evicted fd is reopened by handle), and what a sandbox can
 * hold for long, its open files and directories, is charged to its budget
 * (budget.h): past it its opens fail with EMFILE (ENFILE: its user's or
 * everyone's), and only its own.
 *
 * Speed: reads go out with read_buf (splice from the host file when the
 * kernel allows), writes come in with write_buf, requests are up to 1 MiB,
 * and the kernel page cache is kept across opens while the host file is
 * unchanged (close-to-open: a change made by a job from inside the sandbox
 * is seen at the next open).
 *
 * Ownership: the host files belong to the sandbox's uid; attributes map it
 * to the user's uid and back, and files created through the mount are
 * created by the sandbox's uid (see data_creds_enter), so neither side ever
 * lacks permission on the other's files.
 *
 * Nothing the sandbox controls can make a request wait: files are opened
 * with O_NONBLOCK (a FIFO or a lease held by a job would block an open) and
 * their type is checked before use; see data_open_checked.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../common/budget.h"
#include "../common/log.h"
#include "../common/layout.h"
#include "../skills/skills.h"
#include "data.h"
#include "dlock.h"
#include "fsbx.h"
#include "fswatch.h"
#include "handle.h"
#include "nodefd.h"
#include "skillsfs.h"

#define DATA_COPY_MAX (64 * 1024 * 1024) /* bytes one COPY_FILE_RANGE copies at most */
#define DATA_CREATE_TRIES 8                /* create vs a job that makes and removes the name */

/* fi->fh of an open data file: the host fd, and DATA_FH_BACKING when the
 * open uses the node's passthrough backing file (libfuse does not hand
 * fi->backing_id back at RELEASE, so the handle remembers it). */
#define DATA_FH_BACKING (1ULL << 32)

/* What an open file holds, charged to its sandbox's budget: its own
 * descriptor and its node's O_PATH one (kept from open to release, counted
 * per open: a bound, not a tally). */
#define DATA_OPEN_FDS 2

static int data_fd(const struct fuse_file_info *fi)
{
	return (int)(fi->fh & 0xffffffffULL);
}

static struct node *dnode(fuse_ino_t ino)
{
	return node_of(ino);
}

static unsigned data_hash(dev_t dev, ino_t ino)
{
	return (unsigned)((ino ^ (dev << 7)) % VIEW_BUCKETS);
}

static void data_present(struct view *v, struct stat *st)
{
	if (st->st_uid == v->sbx_uid)
		st->st_uid = v->pres_uid;
	if (st->st_gid == v->sbx_gid)
		st->st_gid = v->pres_gid;
}

static void data_stamp(struct node *n, const struct stat *st)
{
	n->stamp_mtim = st->st_mtim;
	n->stamp_ctim = st->st_ctim;
	n->stamp_size = st->st_size;
}

/* Remember that the kernel knows n as name in parent (view->lock held):
 * when a job removes or renames it, the kernel's cached entry is dropped
 * at the job's end (data_inval_sbx).  Best effort: on ENOMEM the old name
 * stays, and the entry then expires with its timeout. */
static void data_neg_forget_locked(struct node *p, const char *name);
static void data_neg_free_locked(struct node *n);

static void data_name_note_locked(struct node *n, struct node *parent, const char *name)
{
	char *copy;

	if (parent && parent->neg)
		data_neg_forget_locked(parent, name);
	if (!parent || (n->name && n->pdev == parent->dev && n->pino == parent->ino && !strcmp(n->name, name)))
		return;
	copy = strdup(name);
	if (!copy)
		return;
	free(n->name);
	n->name = copy;
	n->pdev = parent->dev;
	n->pino = parent->ino;
}

/* The node of (dev, ino) if the view has one (view->lock held). */
static struct node *data_table_find_locked(struct view *v, dev_t dev, ino_t ino)
{
	struct node *n;

	for (n = v->table[data_hash(dev, ino)]; n; n = n->hnext)
		if (n->ino == ino && n->dev == dev)
			break;
	return n;
}

static bool data_unlink_from(struct node **pp, struct node *n)
{
	for (; *pp; pp = &(*pp)->hnext)
		if (*pp == n) {
			*pp = n->hnext;
			return true;
		}
	return false;
}

/* Out of the view's table or its limbo (view->lock held): a forgotten
 * node.  Idempotent. */
static void data_unhash_locked(struct view *v, struct node *n)
{
	if (!data_unlink_from(&v->table[data_hash(n->dev, n->ino)], n))
		data_unlink_from(&v->limbo, n);
}

/* A removed file's node whose inode number a new file got: out of the table,
 * into the view's limbo until the kernel forgets it (so that it stays
 * reachable, and is freed with the view if the kernel never does). */
static void data_limbo_locked(struct view *v, struct node *n)
{
	if (data_unlink_from(&v->table[data_hash(n->dev, n->ino)], n)) {
		n->hnext = v->limbo;
		v->limbo = n;
	}
}

static void data_forget(struct node *n, uint64_t count);

/* Find or insert the node for fd's file (st: its stat), known to the
 * kernel as name in parent (NULL for a data directory's top), counted as a
 * lookup.  Takes ownership of fd.  0 and *out, or an errno: ENOMEM, or
 * where nodes keep their descriptor for life (nodefd.h) EMFILE/ENFILE for
 * a sandbox past its budget. */
static int data_node_get(struct view *v, int fd, const struct stat *st, int which, struct node *parent,
	const char *name, struct node **out)
{
	unsigned h = data_hash(st->st_dev, st->st_ino);
	struct node *n, *stale = NULL;
	bool charged;
	int err = nfd_charge(v, &charged);

	if (err) {
		close(fd);
		return err;
	}
	if (S_ISDIR(st->st_mode)) /* watched before the kernel learns of it */
		fswatch_dir(v, fd, st);
	pthread_mutex_lock(&v->lock);
	n = data_table_find_locked(v, st->st_dev, st->st_ino);
	if (n && !nfd_pinned(n)) {
		/* A node of this inode number without a descriptor: fd's file, or
		 * a removed one whose number fd's file got.  Their handles tell;
		 * compared outside the lock, holding the node. */
		n->nlookup++;
		pthread_mutex_unlock(&v->lock);
		if (nfd_same_fd(n, fd)) {
			pthread_mutex_lock(&v->lock);
			data_name_note_locked(n, parent, name);
			pthread_mutex_unlock(&v->lock);
			nfd_offer(n, fd); /* the hold is the lookup's reference */
			if (charged)
				nfd_uncharge(v);
			*out = n;
			return 0;
		}
		stale = n;
		pthread_mutex_lock(&v->lock);
		data_limbo_locked(v, stale);
		/* a node inserted since is fd's file's: made from a descriptor
		 * pinning an inode of this number, as fd pins one */
		n = data_table_find_locked(v, st->st_dev, st->st_ino);
	}
	if (n) {
		n->nlookup++;
		data_name_note_locked(n, parent, name);
		pthread_mutex_unlock(&v->lock);
		close(fd);
		if (charged)
			nfd_uncharge(v);
		goto out;
	}
	n = calloc(1, sizeof(*n));
	if (!n) {
		pthread_mutex_unlock(&v->lock);
		close(fd);
		if (charged)
			nfd_uncharge(v);
		err = ENOMEM;
		goto out;
	}
	n->kind = N_DATA;
	n->which = which;
	n->dev = st->st_dev;
	n->ino = st->st_ino;
	n->nlookup = 1;
	n->view = v;
	data_stamp(n, st);
	data_name_note_locked(n, parent, name);
	nfd_attach_locked(n, fd, charged);
	n->hnext = v->table[h];
	v->table[h] = n;
	pthread_mutex_unlock(&v->lock);
	view_get(v);
	nfd_trim();
out:
	if (stale) {
		nfd_stale(stale);
		data_forget(stale, 1);
	}
	*out = n;
	return err;
}

/* Free a data node the kernel forgot (the last nfd_put of one forgotten
 * while in use comes here too). */
static void data_node_free(struct node *n)
{
	struct view *v = n->view;

	free(n->name);
	free(n);
	view_put(v);
}

static void data_forget(struct node *n, uint64_t count)
{
	struct view *v = n->view;

	pthread_mutex_lock(&v->lock);
	n->nlookup = n->nlookup > count ? n->nlookup - count : 0;
	if (n->nlookup) {
		pthread_mutex_unlock(&v->lock);
		return;
	}
	data_unhash_locked(v, n);
	data_neg_free_locked(n);
	pthread_mutex_unlock(&v->lock);
	if (nfd_forget(n))
		data_node_free(n);
}

/* How long the kernel may trust what we say about a file of this view:
 * long while the watcher tells the kernel of every change (fswatch.h),
 * else short while a job may be changing files underneath. */
static double data_timeout(struct view *v)
{
	struct fs_sbx *f;

	if (fswatch_long(v))
		return fs.cache_timeout;
	f = fs_sbx(v->sbx);
	return f && __atomic_load_n(&f->jobs_running, __ATOMIC_RELAXED) ? fs.data_timeout_busy : fs.data_timeout;
}

static void data_entry(struct node *n, const struct stat *st, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = node_ino(n);
	e->attr = *st;
	data_present(n->view, &e->attr);
	e->attr_timeout = data_timeout(n->view);
	e->entry_timeout = e->attr_timeout;
}

static int data_finish_lookup(struct view *v, int fd, int which, struct node *parent, const char *name,
	struct fuse_entry_param *e)
{
	struct stat st;
	struct node *n;
	int err;

	if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
		err = errno;
		close(fd);
		return err;
	}
	if ((err = data_node_get(v, fd, &st, which, parent, name, &n)))
		return err;
	data_entry(n, &st, e);
	return 0;
}

_Static_assert((int)DD_WORKSPACE == (int)LAYOUT_WORKSPACE && (int)DD_UPLOADS == (int)LAYOUT_UPLOADS &&
		       (int)DD_OUTPUTS == (int)LAYOUT_OUTPUTS && (int)DD_SKILLS == (int)LAYOUT_SKILLS,
	"a sandbox's data directories are the layout's");

int data_lookup_root(struct view *v, int which, struct fuse_entry_param *e)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	int fd = -1;

	if (!layout_dir(&path, v->sbx->thread_dir, (enum layout_dir)which))
		fd = open(path.ptr, O_PATH | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC);
	buf_free(&path);
	if (fd < 0)
		return errno == ENOENT ? ENOENT : EIO;
	return data_finish_lookup(v, fd, which, NULL, NULL, e);
}

static bool bad_name(const char *name)
{
	return !strcmp(name, ".") || !strcmp(name, "..") || strchr(name, '/');
}

/* ---- skills/ (DESIGN §8) ----------------------------------------------------------
 *
 * Under skills/ every change is an event of the sync engine (skills.h):
 * a closed written file, unlink, rmdir, rename, mkdir, symlink, mknod and
 * setattr; its limits are checked before a change (EFBIG, ENOSPC), symlinks
 * that are absolute or leave skills/ are refused (EPERM), and nothing moves
 * or links between skills/ and the other data directories (EXDEV: a hard
 * link would let a job write a projected skill through workspace/). */

/* The sandbox whose skills/ n is in, or NULL. */
static struct sbx *data_skills(const struct node *n)
{
	return n->which == DD_SKILLS ? n->view->sbx : NULL;
}

static void data_skills_changed(const struct node *n, int err)
{
	if (!err && data_skills(n))
		skills_changed(n->view->sbx);
}

/* Before fd's file (n's, open or its O_PATH fd) grows to end bytes. */
static int data_skills_grow(const struct node *n, int fd, off_t end)
{
	struct stat st;

	if (!data_skills(n))
		return 0;
	if (fstat(fd, &st))
		return errno;
	if (end <= st.st_size)
		return 0;
	return skills_check_grow(n->view->sbx, (uint64_t)st.st_size, (uint64_t)end);
}

/* The node of (st_dev, st_ino) if the view has one, counted as a lookup of
 * name in parent. */
static struct node *data_table_ref(struct view *v, const struct stat *st, struct node *parent,
	const char *name)
{
	struct node *n;

	pthread_mutex_lock(&v->lock);
	n = data_table_find_locked(v, st->st_dev, st->st_ino);
	if (n) {
		n->nlookup++;
		data_name_note_locked(n, parent, name);
	}
	pthread_mutex_unlock(&v->lock);
	return n;
}

static int data_do_lookup(struct node *parent, const char *name, struct fuse_entry_param *e)
{
	struct stat st;
	struct node *n;
	int pfd, fd, err = 0;

	if (bad_name(name))
		return EPERM;
	if ((pfd = nfd_get(parent)) < 0)
		return -pfd;
	/* Most lookups are of names the kernel knew (an entry that expired, a
	 * READDIRPLUS of a listed directory) or of names that do not exist (the
	 * lookup before a create): one fstatat answers both, without opening
	 * and closing an O_PATH fd.  A node that holds its fd pins the inode,
	 * so the inode number cannot have been reused; one whose fd was evicted
	 * is compared by handle (a removed file's node, or a name that changed
	 * meanwhile, is decided on an open fd below). */
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW)) {
		err = errno;
		goto out;
	}
	n = data_table_ref(parent->view, &st, parent, name);
	if (n && !nfd_same_at(n, pfd, name)) {
		data_forget(n, 1);
		n = NULL;
	}
	if (n) {
		data_entry(n, &st, e);
		goto out;
	}
	fd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		err = errno;
	else
		err = data_finish_lookup(parent->view, fd, parent->which, parent, name, e); /* its own fstat decides */
out:
	nfd_put(parent);
	return err;
}

/* ---- creating as the sandbox's uid --------------------------------------------
 *
 * Objects created through the mount are created by the sandbox's uid, not by
 * root and then chowned: for the one *at() call the worker thread takes the
 * sandbox's uid and gid as its fsuid and fsgid, as NFS servers do.  So the
 * kernel applies its own rules as it would to the sandbox: set-id bits stay,
 * a setgid directory passes on its group (and its setgid bit to a new
 * directory), and no root-owned object ever exists, even for a moment.  It
 * also saves the chown.
 *
 * Permission: the kernel has already checked the caller against the
 * presented attributes (default_permissions).  The host check is then the
 * sandbox uid's own: a directory its owner cannot write (mode 0555) refuses a
 * create with EACCES also for root through the mount, like an NFS export with
 * root_squash.  The tops of the data directories belong to the sandbox uid.
 *
 * setfsuid/setfsgid act on the calling thread only (glibc does not broadcast
 * them to every thread, as it does setuid).  The supplementary groups are
 * dropped once per worker thread with the raw setgroups system call, which
 * also acts on the calling thread only (glibc's setgroups() changes every
 * thread): root's groups must not grant the sandbox's creations anything.
 * A daemon that is not root cannot switch and creates as itself.
 */
static __thread bool data_thread_groupless;

static bool data_is_root(void)
{
	static int root = -1; /* a racy first call computes the same value */

	if (root < 0)
		root = geteuid() == 0;
	return root;
}

static void data_creds_enter(struct view *v)
{
	if (!data_is_root())
		return;
	if (!data_thread_groupless && syscall(SYS_setgroups, 0, NULL) == 0)
		data_thread_groupless = true;
	setfsgid(v->sbx_gid);
	setfsuid(v->sbx_uid);
}

static void data_creds_leave(void)
{
	if (!data_is_root())
		return;
	setfsuid(0);
	setfsgid(0);
}

/* A creation that cannot be answered is undone, so a failed call leaves
 * nothing behind.  Only what this call made is removed, and only while the
 * name still refers to it: `made` is the new file's stat, or NULL when only
 * its type is known (then a directory must also still be empty). */
static void data_undo(struct node *p, const char *name, const struct stat *made, mode_t type)
{
	struct stat now;
	int pfd = nfd_get(p);

	if (pfd < 0)
		return log_warn(p->view->sbx->token, "cannot undo a failed create: %s", strerror(-pfd));
	if (fstatat(pfd, name, &now, AT_SYMLINK_NOFOLLOW))
		goto out;
	if (made ? now.st_dev != made->st_dev || now.st_ino != made->st_ino : (now.st_mode & S_IFMT) != type)
		goto out;
	if (unlinkat(pfd, name, S_ISDIR(now.st_mode) ? AT_REMOVEDIR : 0))
		log_warn(p->view->sbx->token, "cannot undo a failed create: %s", strerror(errno));
out:
	nfd_put(p);
}

/* Reply to mknod, mkdir or symlink: err is the creation's result, type what
 * it made. */
static void data_reply_made(fuse_req_t req, struct node *parent, const char *name, int err, mode_t type)
{
	struct fuse_entry_param e;

	if (err)
		return (void)fuse_reply_err(req, err);
	err = data_do_lookup(parent, name, &e);
	if (!err && (e.attr.st_mode & S_IFMT) != type) {
		/* replaced by a job since we made it: not ours to answer with */
		data_forget(node_of(e.ino), 1);
		return (void)fuse_reply_err(req, EEXIST);
	}
	if (err) {
		if (err != ENOENT)
			data_undo(parent, name, NULL, type);
		return (void)fuse_reply_err(req, err);
	}
	if (fuse_reply_entry(req, &e) == -ENOENT) /* interrupted: the kernel never saw it */
		data_forget(node_of(e.ino), 1);
}

/* Whether a request on n (st: its host stat) can only have come through a
 * kernel entry that is out of date: the file was removed (by a job) and no
 * file is open on it.  Answering ESTALE makes the kernel look the path up
 * again, so a stat gives ENOENT and an open(O_CREAT) makes a new file
 * instead of writing into the removed one. */
static bool data_stale_name(struct node *n, const struct stat *st)
{
	return st->st_nlink == 0 && !S_ISDIR(st->st_mode) && !__atomic_load_n(&n->nopen, __ATOMIC_RELAXED);
}

/* fstat of n's file (by its O_PATH fd): 0 or an errno (ESTALE: gone). */
static int data_stat(struct node *n, struct stat *st)
{
	int fd = nfd_get(n), err;

	if (fd < 0)
		return -fd;
	err = fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) ? errno : 0;
	nfd_put(n);
	return err;
}

static void data_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = dnode(ino);
	struct stat st;
	int err;

	/* an open file's own fd when there is one (the kernel sends it for
	 * regular files only): it needs no O_PATH fd */
	if (fi)
		err = fstat(data_fd(fi), &st) ? errno : 0;
	else
		err = data_stat(n, &st);
	if (err)
		return (void)fuse_reply_err(req, err);
	/* Removed (our O_PATH fd keeps the inode): gone for a path lookup, but
	 * still there for whoever has it open.  Linux sends fstat(2) as a
	 * GETATTR without a file handle, so what tells them apart is whether
	 * any file is open on the node: open; unlink; fstat works (size,
	 * nlink 0: mkstemp-then-unlink temporary files).  A name a job removed
	 * while nobody had it open is ESTALE: the kernel then looks the path
	 * up again (LOOKUP_REVAL) instead of trusting its cached entry, so a
	 * stat gives ENOENT and an open(O_CREAT) creates the file anew. */
	if (!fi && data_stale_name(n, &st))
		return (void)fuse_reply_err(req, ESTALE);
	data_present(n->view, &st);
	/* the attributes of a removed file are never cached: once the last
	 * open file is closed, the next stat must ask again */
	fuse_reply_attr(req, &st, st.st_nlink ? data_timeout(n->view) : 0);
}

/* /proc/self/fd/<fd>: the path of an open fd (a magic link to its file). */
static int data_proc_path(int fd, char *out, size_t len)
{
	return str_fmt(out, len, "/proc/self/fd/%d", fd);
}

/* The flags of the host open(2) for a FUSE open or create.
 *   O_DIRECT is dropped: the request buffers libfuse hands us are not
 *   aligned, so a host O_DIRECT write fails with EINVAL; the caller still
 *   bypasses the mount's page cache (the kernel sends its O_DIRECT I/O
 *   straight to us), and the host file is written through the host's page
 *   cache, as an NFS server does.  fsync/O_SYNC/O_DSYNC still reach the disk.
 *   O_NONBLOCK is added: no open may wait on what the sandbox controls (a
 *   FIFO, or a lease a job holds: with O_NONBLOCK the lease break is
 *   started and the open fails at once with EWOULDBLOCK instead of waiting
 *   up to lease-break-time); data_open_checked restores the caller's mode. */
static int data_host_flags(int flags)
{
	return (flags & ~(O_NOFOLLOW | O_CREAT | O_EXCL | O_DIRECT | O_NOCTTY)) | O_NONBLOCK | O_CLOEXEC;
}

/* After a host open with O_NONBLOCK: only a regular file may be used (the
 * kernel opens FIFOs, sockets and devices of the mount itself and never
 * sends OPEN for them, but a name can change type between the kernel's
 * LOOKUP and our CREATE: a job's mkfifo), and the caller's blocking mode is
 * put back.  Fills st.  Returns 0 or an errno; the caller closes fd. */
static int data_open_checked(int fd, int host_flags, int user_flags, struct stat *st)
{
	if (fstat(fd, st))
		return errno;
	if (!S_ISREG(st->st_mode))
		return S_ISDIR(st->st_mode) ? EISDIR : ENXIO;
	/* F_SETFL sets O_APPEND, O_ASYNC, O_DIRECT, O_NOATIME and O_NONBLOCK */
	if ((host_flags & O_NONBLOCK) && !(user_flags & O_NONBLOCK) &&
	    fcntl(fd, F_SETFL, host_flags & (O_APPEND | O_NOATIME)))
		return errno;
	return 0;
}

/*
 * Set-id bits on write and truncate (FUSE_CAP_HANDLE_KILLPRIV_V2, see
 * d_init).  With it the kernel no longer asks for security.capability
 * before every write (a GETXATTR round trip each: a tenth of a sequential
 * write's time) and leaves removing the set-id bits to us, as the kernel
 * does for a local file when the writer lacks CAP_FSETID.  libfuse does not
 * pass the kernel's flags saying so for WRITE and OPEN, so a caller other
 * than root counts as lacking it.  security.capability itself goes with any
 * write or truncate of the host file (the host kernel removes it).
 */
static mode_t data_setid_bits(mode_t mode)
{
	mode_t kill = mode & S_ISUID;

	/* set-group-ID without group execute marks mandatory locking: kept */
	if ((mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP))
		kill |= S_ISGID;
	return kill;
}

static bool data_caller_unprivileged(fuse_req_t req)
{
	return fuse_req_ctx(req)->uid != 0;
}

/* Must this caller's write clear set-id bits here (not the kernel)? */
static bool data_write_kills_setid(fuse_req_t req)
{
	return fs.killpriv && data_caller_unprivileged(req);
}

static int data_kill_setid(int fd)
{
	struct stat st;
	mode_t kill;

	if (fstat(fd, &st))
		return errno;
	kill = data_setid_bits(st.st_mode);
	if (kill && fchmod(fd, st.st_mode & 07777 & ~kill))
		return errno;
	return 0;
}

/* truncate(2) without an open file: the path-based call would wait for a
 * lease a job holds (lease-break-time, 45 s), so open the file O_NONBLOCK
 * and ftruncate it. */
static int data_truncate(int pfd, off_t size, bool kill_setid)
{
	char proc[64];
	struct stat st;
	int fd, err;

	if (data_proc_path(pfd, proc, sizeof(proc)))
		return EIO;
	fd = open(proc, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno;
	if (fstat(fd, &st))
		err = errno;
	else if (!S_ISREG(st.st_mode))
		err = EINVAL;
	else
		err = ftruncate(fd, size) ? errno : 0;
	if (!err && kill_setid)
		err = data_kill_setid(fd);
	close(fd);
	return err;
}

static void data_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid, struct fuse_file_info *fi)
{
	struct node *n = dnode(ino);
	struct view *v = n->view;
	char proc[64];
	int pfd = nfd_get(n), err = 0;

	if (pfd < 0)
		return (void)fuse_reply_err(req, -pfd);
	if (data_proc_path(pfd, proc, sizeof(proc))) {
		err = EIO;
		goto out;
	}
	if ((valid & FUSE_SET_ATTR_MODE) &&
	    (fi ? fchmod(data_fd(fi), attr->st_mode) : chmod(proc, attr->st_mode))) {
		err = errno;
		goto out;
	}
	if (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		uid_t uid = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
		gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;
		if (uid == v->pres_uid)
			uid = v->sbx_uid;
		if (gid == v->pres_gid)
			gid = v->sbx_gid;
		if (fchownat(pfd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
			err = errno;
			goto out;
		}
	}
	if (valid & FUSE_SET_ATTR_SIZE) {
		/* FUSE_SET_ATTR_KILL_SUID is the kernel's FATTR_KILL_SUIDGID */
		bool kill = valid & FUSE_SET_ATTR_KILL_SUID;

		if ((err = data_skills_grow(n, fi ? data_fd(fi) : pfd, attr->st_size)))
			goto out;
		if (fi) {
			err = ftruncate(data_fd(fi), attr->st_size) ? errno : 0;
			if (!err && kill)
				err = data_kill_setid(data_fd(fi));
		} else {
			err = data_truncate(pfd, attr->st_size, kill);
		}
		if (err)
			goto out;
	}
	if (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
		struct timespec tv[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_OMIT } };
		if (valid & FUSE_SET_ATTR_ATIME_NOW)
			tv[0].tv_nsec = UTIME_NOW;
		else if (valid & FUSE_SET_ATTR_ATIME)
			tv[0] = attr->st_atim;
		if (valid & FUSE_SET_ATTR_MTIME_NOW)
			tv[1].tv_nsec = UTIME_NOW;
		else if (valid & FUSE_SET_ATTR_MTIME)
			tv[1] = attr->st_mtim;
		if (fi ? futimens(data_fd(fi), tv) : utimensat(AT_FDCWD, proc, tv, 0))
			err = errno;
	}
out:
	nfd_put(n);
	if (err)
		return (void)fuse_reply_err(req, err);
	if (valid & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_SIZE))
		data_skills_changed(n, 0);
	data_getattr(req, ino, fi);
}

static void data_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char buf[PATH_MAX + 1];
	int fd = nfd_get(dnode(ino)), err;
	ssize_t n;

	if (fd < 0)
		return (void)fuse_reply_err(req, -fd);
	n = readlinkat(fd, "", buf, sizeof(buf));
	err = errno;
	nfd_put(dnode(ino));
	if (n < 0)
		return (void)fuse_reply_err(req, err);
	if (n == sizeof(buf))
		return (void)fuse_reply_err(req, ENAMETOOLONG);
	buf[n] = '\0';
	fuse_reply_readlink(req, buf);
}

static void data_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	struct node *p = dnode(parent);
	int res, pfd;

	if (bad_name(name))
		return (void)fuse_reply_err(req, EPERM);
	if (!S_ISREG(mode) && !S_ISFIFO(mode) && !S_ISSOCK(mode))
		return (void)fuse_reply_err(req, EPERM); /* no device nodes in a sandbox */
	if (data_skills(p) && !S_ISREG(mode))
		return (void)fuse_reply_err(req, EPERM); /* a projection holds files, directories, links */
	if (data_skills(p) && (res = skills_check_add(p->view->sbx, false)))
		return (void)fuse_reply_err(req, res);
	if ((pfd = nfd_get(p)) < 0)
		return (void)fuse_reply_err(req, -pfd);
	data_creds_enter(p->view);
	res = mknodat(pfd, name, mode, rdev) ? errno : 0;
	data_creds_leave();
	nfd_put(p);
	data_skills_changed(p, res);
	data_reply_made(req, p, name, res, mode & S_IFMT);
}

static void data_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct node *p = dnode(parent);
	int res, pfd;

	if (bad_name(name))
		return (void)fuse_reply_err(req, EPERM);
	if (data_skills(p) && (res = skills_check_add(p->view->sbx, true)))
		return (void)fuse_reply_err(req, res);
	if ((pfd = nfd_get(p)) < 0)
		return (void)fuse_reply_err(req, -pfd);
	data_creds_enter(p->view);
	res = mkdirat(pfd, name, mode) ? errno : 0;
	data_creds_leave();
	nfd_put(p);
	data_skills_changed(p, res);
	data_reply_made(req, p, name, res, S_IFDIR);
}

static void data_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct node *p = dnode(parent);
	int res, pfd;

	if (bad_name(name))
		return (void)fuse_reply_err(req, EPERM);
	if ((pfd = nfd_get(p)) < 0)
		return (void)fuse_reply_err(req, -pfd);
	if (data_skills(p) && ((res = skills_check_symlink(p->view->sbx, pfd, link)) ||
				      (res = skills_check_add(p->view->sbx, false)))) {
		nfd_put(p);
		if (res == EPERM)
			log_warn(p->view->sbx->token, "skills/: symlink to '%s' refused: absolute or leaving skills/", link);
		return (void)fuse_reply_err(req, res);
	}
	data_creds_enter(p->view);
	res = symlinkat(link, pfd, name) ? errno : 0;
	data_creds_leave();
	nfd_put(p);
	data_skills_changed(p, res);
	data_reply_made(req, p, name, res, S_IFLNK);
}

static void data_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
	struct node *n = dnode(ino), *p = dnode(parent);
	struct fuse_entry_param e;
	struct stat st;
	char proc[64];
	int nf = -1, pfd = -1, err = 0;

	if (bad_name(name))
		return (void)fuse_reply_err(req, EPERM);
	if (p->kind != N_DATA || n->view != p->view || data_skills(n) || data_skills(p))
		return (void)fuse_reply_err(req, EXDEV); /* projected skills are copies, never links */
	if ((nf = nfd_get(n)) < 0 || (pfd = nfd_get(p)) < 0) {
		err = nf < 0 ? -nf : -pfd;
		goto out;
	}
	if (linkat(nf, "", pfd, name, AT_EMPTY_PATH)) {
		err = errno;
		if (err == ENOENT && !data_proc_path(nf, proc, sizeof(proc)))
			err = linkat(AT_FDCWD, proc, pfd, name, AT_SYMLINK_FOLLOW) ? errno : 0;
		if (err)
			goto out;
	}
	pthread_mutex_lock(&n->view->lock);
	n->nlookup++;
	data_name_note_locked(n, p, name);
	pthread_mutex_unlock(&n->view->lock);
	if (fstatat(nf, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) {
		err = errno;
		data_forget(n, 1);
	}
out:
	if (pfd >= 0)
		nfd_put(p);
	if (nf >= 0)
		nfd_put(n);
	if (err)
		return (void)fuse_reply_err(req, err);
	data_entry(n, &st, &e);
	fuse_reply_entry(req, &e);
}

/* unlinkat(2) in a data directory. */
static int data_unlinkat(struct node *p, const char *name, int flags)
{
	int pfd = nfd_get(p), err;

	if (pfd < 0)
		return -pfd;
	err = unlinkat(pfd, name, flags) ? errno : 0;
	nfd_put(p);
	return err;
}

static void data_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	int err = data_unlinkat(dnode(parent), name, 0);

	data_skills_changed(dnode(parent), err);
	fuse_reply_err(req, err);
}

static void data_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	int err = data_unlinkat(dnode(parent), name, AT_REMOVEDIR);

	data_skills_changed(dnode(parent), err);
	fuse_reply_err(req, err);
}

/* After a rename through the mount: what is now at name in p (pfd: its
 * fd) is known to the kernel by that name (the kernel moved its entry). */
static void data_name_refresh(struct node *p, int pfd, const char *name)
{
	struct stat st;
	struct node *n;

	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW))
		return;
	pthread_mutex_lock(&p->view->lock);
	n = data_table_find_locked(p->view, st.st_dev, st.st_ino);
	if (n)
		data_name_note_locked(n, p, name);
	pthread_mutex_unlock(&p->view->lock);
}

static void data_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	const char *newname, unsigned int flags)
{
	struct node *p = dnode(parent), *np = dnode(newparent);

	if (bad_name(name) || bad_name(newname))
		return (void)fuse_reply_err(req, EPERM);
	if (np->kind != N_DATA)
		return (void)fuse_reply_err(req, EPERM);
	if (p->view != np->view || !data_skills(p) != !data_skills(np))
		return (void)fuse_reply_err(req, EXDEV); /* in or out of skills/: a copy (mv does it) */
	int pfd = nfd_get(p), npfd = pfd < 0 ? -1 : nfd_get(np), err;
	if (pfd < 0 || npfd < 0) {
		err = pfd < 0 ? -pfd : -npfd;
		goto out;
	}
	err = renameat2(pfd, name, npfd, newname, flags) ? errno : 0;
	if (!err) {
		data_name_refresh(np, npfd, newname);
		if (flags & RENAME_EXCHANGE)
			data_name_refresh(p, pfd, name);
	}
	data_skills_changed(p, err);
out:
	if (npfd >= 0)
		nfd_put(np);
	if (pfd >= 0)
		nfd_put(p);
	fuse_reply_err(req, err);
}

/* ---- names that do not exist ---------------------------------------------------
 *
 * "No such file" is cached by the kernel for cache_timeout while the watcher
 * tells it of every name a sandbox makes (FAN_CREATE, FAN_MOVED_TO:
 * data_inval_dirent drops the cached answer).  An answer and a job's create
 * cannot cross unseen: the kernel sends a LOOKUP holding the directory's
 * lock, which the watcher's invalidation waits for.  What the watcher may
 * miss (its queue overflowed; files a snapshot restore brings back behind
 * it) is dropped by data_inval_sbx, which also runs at each job's end: so
 * every such answer is remembered on its directory's node until the name is
 * made through the mount or the kernel forgets the directory, up to
 * DATA_NEG_MAX per sandbox; past that, and whenever the sandbox is on the
 * short timeouts, the answer is not cached at all (as without the watcher).
 * Without this, every probe for a name that is not there (an import path,
 * a config file, a create's lookup) was a round trip each time. */
#define DATA_NEG_MAX 4096

struct data_neg {
	struct data_neg *next;
	char name[];
};

/* The name is taken in p (made through the mount, or found there): its
 * negative answer no longer needs dropping.  view->lock held. */
static void data_neg_forget_locked(struct node *p, const char *name)
{
	for (struct data_neg **pp = &p->neg; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->name, name)) {
			struct data_neg *e = *pp;
			*pp = e->next;
			free(e);
			p->view->nneg--;
			return;
		}
}

/* The kernel forgot directory n: so are the names it cached in it. */
static void data_neg_free_locked(struct node *n)
{
	while (n->neg) {
		struct data_neg *e = n->neg;
		n->neg = e->next;
		free(e);
		n->view->nneg--;
	}
}

/* Whether the negative answer for name in p may be cached: remembered
 * first, the watcher's state checked after, so that an overflow that
 * begins meanwhile finds the record (the record of an answer not cached
 * costs one needless invalidation). */
static bool data_neg_note(struct node *p, const char *name)
{
	struct view *v = p->view;
	size_t len = strlen(name);
	struct data_neg *e;
	bool noted = false;

	if (!fswatch_long(v) || !(e = malloc(sizeof(*e) + len + 1)))
		return false;
	memcpy(e->name, name, len + 1);
	pthread_mutex_lock(&v->lock);
	for (struct data_neg *x = p->neg; x && !noted; x = x->next)
		noted = !strcmp(x->name, name);
	if (noted) {
		free(e);
	} else if (v->nneg < DATA_NEG_MAX) {
		e->next = p->neg;
		p->neg = e;
		v->nneg++;
		noted = true;
	}
	pthread_mutex_unlock(&v->lock);
	if (!noted)
		free(e);
	return noted && fswatch_long(v);
}

/* Drop every cached "no such file" of v: the lists are taken under the
 * lock, the kernel told with none held (a directory it has forgotten
 * meanwhile answers ENOENT: harmless). */
static void data_neg_drop(struct view *v)
{
	struct dneg {
		fuse_ino_t dir;
		struct data_neg *list;
	} *all = NULL;
	size_t n = 0, cap = 0;

	pthread_mutex_lock(&v->lock);
	for (int b = 0; b < VIEW_BUCKETS && v->nneg; b++)
		for (struct node *d = v->table[b]; d; d = d->hnext) {
			if (!d->neg)
				continue;
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 64;
				struct dneg *p = realloc(all, nc * sizeof(*p));
				if (!p)
					goto unlock; /* what is left is dropped next time */
				all = p;
				cap = nc;
			}
			all[n++] = (struct dneg){ node_ino(d), d->neg };
			for (struct data_neg *e = d->neg; e; e = e->next)
				v->nneg--;
			d->neg = NULL;
		}
unlock:
	pthread_mutex_unlock(&v->lock);
	for (size_t i = 0; i < n; i++)
		while (all[i].list) {
			struct data_neg *e = all[i].list;
			all[i].list = e->next;
			if (fs.se)
				fuse_lowlevel_notify_inval_entry(fs.se, all[i].dir, e->name, strlen(e->name));
			free(e);
		}
	free(all);
}

static void data_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	struct node *p = dnode(parent);
	int err = data_do_lookup(p, name, &e);

	if (err == ENOENT && data_neg_note(p, name)) {
		memset(&e, 0, sizeof(e)); /* ino 0: a negative entry, cached */
		e.entry_timeout = fs.cache_timeout;
		return (void)fuse_reply_entry(req, &e);
	}
	node_reply_entry(req, err, &e);
}

/* Keep the page cache across opens while the host file is unchanged:
 * a job may have changed it from inside the sandbox (close-to-open). */
static void data_cache_policy(struct node *n, const struct stat *st, struct fuse_file_info *fi)
{
	bool same;

	pthread_mutex_lock(&n->view->lock);
	same = st->st_mtim.tv_sec == n->stamp_mtim.tv_sec && st->st_mtim.tv_nsec == n->stamp_mtim.tv_nsec &&
	       st->st_ctim.tv_sec == n->stamp_ctim.tv_sec && st->st_ctim.tv_nsec == n->stamp_ctim.tv_nsec &&
	       st->st_size == n->stamp_size;
	data_stamp(n, st);
	pthread_mutex_unlock(&n->view->lock);
	fi->keep_cache = same;
	if (!same)
		fuse_lowlevel_notify_inval_inode(fs.se, node_ino(n), -1, 0); /* attributes only */
}

#ifdef SBXFS_FUSE_PASSTHROUGH
/* A new open file of fd's host file, read-only and never blocking; -1 with
 * errno.  The kernel opens each passthrough file anew from the backing
 * file's path with the FUSE file's own flags, so read-only is enough.
 * /proc/self/fd/N is a magic link to the open file itself, not a name
 * looked up again, so following it is safe; O_NOFOLLOW would refuse it
 * (ELOOP) and silently send every file down the copy path. */
static int data_reopen(int fd)
{
	char proc[64];

	if (str_fmt(proc, sizeof(proc), "/proc/self/fd/%d", fd))
		return -1;
	return open(proc, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
}
#endif

/* Kernel passthrough (libfuse >= 3.16, kernel >= 6.9): the host file is
 * registered once per node as a backing file, shared by every open of it,
 * and the kernel reads, writes and maps it without asking the daemon; so
 * a job's changes are always what a reader sees (no FUSE page cache to go
 * stale).  A file that cannot be registered (a backing file on a stacked
 * file system, a kernel without it) takes the copy path.  Returns true
 * when fi uses a backing file. */
static bool data_passthrough_open(fuse_req_t req, struct node *n, int fd, const struct stat *st,
	struct fuse_file_info *fi)
{
#ifdef SBXFS_FUSE_PASSTHROUGH
	static bool warned;
	int id;

	if (!fs.passthrough || (fi->flags & O_ACCMODE) == O_ACCMODE)
		return false;
	/* a passthrough write never reaches us, and the host kernel writes as
	 * the daemon (which keeps set-id bits): a writer of a set-id file
	 * takes the copy path, in direct I/O so that it may share the file
	 * with passthrough opens */
	if (fs.killpriv && (fi->flags & O_ACCMODE) != O_RDONLY && data_setid_bits(st->st_mode)) {
		fi->direct_io = 1;
		return false;
	}
	/* writes under skills/ must reach data_write_buf (its limits) */
	if (data_skills(n) && (fi->flags & O_ACCMODE) != O_RDONLY)
		return false;
	pthread_mutex_lock(&n->view->lock);
	if (!n->backing_id) {
		/* registered from an open of its own: the kernel keeps that open
		 * file while any open of the node uses it, and flock(2) locks
		 * belong to an open file, so a caller's lock must not live on in
		 * it after the caller closed its file */
		int bfd = data_reopen(fd);
		if (bfd >= 0) {
			n->backing_id = fuse_passthrough_open(req, bfd);
			close(bfd);
		}
	}
	id = n->backing_id;
	if (id)
		n->backing_users++;
	pthread_mutex_unlock(&n->view->lock);
	if (!id) {
		if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
			log_warn("data", "a file cannot be a passthrough backing file (%s): such files take the copy path",
				strerror(errno));
		return false;
	}
	fi->backing_id = id;
	fi->fh |= DATA_FH_BACKING;
	fi->keep_cache = 0;
	fi->direct_io = 0;
	return true;
#else
	(void)req;
	(void)n;
	(void)fd;
	(void)st;
	(void)fi;
	return false;
#endif
}

static void data_passthrough_close(fuse_req_t req, struct node *n, struct fuse_file_info *fi)
{
#ifdef SBXFS_FUSE_PASSTHROUGH
	int id = 0;

	if (!(fi->fh & DATA_FH_BACKING))
		return;
	pthread_mutex_lock(&n->view->lock);
	if (--n->backing_users == 0) {
		id = n->backing_id;
		n->backing_id = 0;
	}
	pthread_mutex_unlock(&n->view->lock);
	if (id && fuse_passthrough_close(req, id) < 0)
		log_warn("data", "closing a passthrough backing file: %s", strerror(errno));
#else
	(void)req;
	(void)n;
	(void)fi;
#endif
}

/* An open file handle: counted on its node (see data_getattr), holding
 * its node's fd (a use from nfd_get) and DATA_OPEN_FDS of its sandbox's
 * budget, both taken by the caller and given back by data_handle_close.
 * st: the file's stat; fresh: a file this call made (no page cache to
 * keep). */
static void data_handle_open(fuse_req_t req, struct node *n, int fd, const struct stat *st, bool fresh,
	struct fuse_file_info *fi)
{
	fi->fh = (uint64_t)fd;
	fi->noflush = 1; /* a local file's close reports nothing: no FLUSH round trip */
	__atomic_add_fetch(&n->nopen, 1, __ATOMIC_RELAXED);
	if (data_passthrough_open(req, n, fd, st, fi)) {
		__atomic_add_fetch(&fs.opens_passthrough, 1, __ATOMIC_RELAXED);
		return;
	}
	__atomic_add_fetch(&fs.opens_copy, 1, __ATOMIC_RELAXED);
	if (!fresh && !fi->direct_io && !(fi->flags & O_TRUNC))
		data_cache_policy(n, st, fi);
}

/* The node's fd is let go last: after an interrupted open the kernel may
 * already have forgotten n, which this use keeps (nfd_forget). */
static void data_handle_close(fuse_req_t req, struct node *n, struct fuse_file_info *fi)
{
	data_passthrough_close(req, n, fi);
	__atomic_sub_fetch(&n->nopen, 1, __ATOMIC_RELAXED);
	close(data_fd(fi));
	budget_give(n->view->fds, BUDGET_DATA, DATA_OPEN_FDS);
	nfd_put(n);
}

/* Before an open: the sandbox's budget for it (0, EMFILE, ENFILE). */
static int data_open_charge(struct node *n)
{
	return budget_take(n->view->fds, BUDGET_DATA, DATA_OPEN_FDS);
}

static void data_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = dnode(ino);
	int hflags = data_host_flags(fi->flags);
	struct stat st;
	char proc[64];
	int pfd = -1, fd = -1, err;

	if ((err = data_open_charge(n)))
		return (void)fuse_reply_err(req, err);
	if ((pfd = nfd_get(n)) < 0) {
		err = -pfd;
		goto fail;
	}
	if (data_proc_path(pfd, proc, sizeof(proc))) {
		err = EIO;
		goto fail;
	}
	/* an O_TRUNC must not reach a removed file, which a job may still use */
	if ((fi->flags & O_TRUNC) && !fstatat(pfd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) &&
	    data_stale_name(n, &st)) {
		err = ESTALE;
		goto fail;
	}
	fd = open(proc, hflags);
	if (fd < 0) {
		err = errno;
		goto fail;
	}
	err = data_open_checked(fd, hflags, fi->flags, &st);
	if (!err && data_stale_name(n, &st))
		err = ESTALE;
	/* O_TRUNC by a caller without CAP_FSETID: the kernel leaves it to us
	 * with atomic_o_trunc, whether or not killpriv was agreed */
	if (!err && (fi->flags & O_TRUNC) && data_caller_unprivileged(req) && data_setid_bits(st.st_mode) &&
	    !(err = data_kill_setid(fd)))
		st.st_mode &= ~data_setid_bits(st.st_mode);
	if (err)
		goto fail;
	data_handle_open(req, n, fd, &st, false, fi); /* keeps pfd's use and the charge */
	if (fuse_reply_open(req, fi) == -ENOENT) /* interrupted: no RELEASE will come */
		data_handle_close(req, n, fi);
	return;
fail:
	if (fd >= 0)
		close(fd);
	if (pfd >= 0)
		nfd_put(n);
	budget_give(n->view->fds, BUDGET_DATA, DATA_OPEN_FDS);
	fuse_reply_err(req, err);
}

/* The node of the file open on fd as name in p (pfd: its fd; st: the
 * file's stat), counted as a lookup. */
static int data_node_of_fd(struct node *p, int pfd, const char *name, int fd, const struct stat *st,
	struct node **out)
{
	struct stat o;
	char proc[64];
	int opath;

	*out = data_table_ref(p->view, st, p, name);
	if (*out && !nfd_same_fd(*out, fd)) { /* a removed file's node: data_node_get decides */
		data_forget(*out, 1);
		*out = NULL;
	}
	if (*out)
		return 0;
	/* The O_PATH fd of a new node must be the very file open on fd: by
	 * name (cheap) if the name still refers to it, else (a job swapped it)
	 * through /proc/self/fd. */
	opath = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (opath >= 0 && (fstat(opath, &o) || o.st_ino != st->st_ino || o.st_dev != st->st_dev)) {
		close(opath);
		opath = -1;
		errno = ESTALE;
	}
	if (opath < 0 && errno != EMFILE && errno != ENFILE && !str_fmt(proc, sizeof(proc), "/proc/self/fd/%d", fd))
		opath = open(proc, O_PATH | O_CLOEXEC);
	if (opath < 0)
		return errno;
	return data_node_get(p->view, opath, st, p->which, p, name, out);
}

static void data_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	struct node *p = dnode(parent), *n = NULL;
	int hflags = data_host_flags(fi->flags) | O_NOFOLLOW;
	struct fuse_entry_param e;
	struct stat st = { .st_ino = 0 };
	bool created = false;
	int pfd, fd = -1, err;

	if (bad_name(name))
		return (void)fuse_reply_err(req, EPERM);
	if (data_skills(p) && (err = skills_check_add(p->view->sbx, false)))
		return (void)fuse_reply_err(req, err);
	if ((err = data_open_charge(p))) /* the new node is p's view's */
		return (void)fuse_reply_err(req, err);
	if ((pfd = nfd_get(p)) < 0) {
		budget_give(p->view->fds, BUDGET_DATA, DATA_OPEN_FDS);
		return (void)fuse_reply_err(req, -pfd);
	}
	/* O_NOFOLLOW: a symlink planted by a job between the kernel's lookup
	 * and this call must not make the daemon create a file elsewhere.  A
	 * new file is never a FIFO nor leased: no O_NONBLOCK needed for it. */
	data_creds_enter(p->view);
	for (int tries = 0; tries < DATA_CREATE_TRIES; tries++) {
		fd = openat(pfd, name, (hflags & ~O_NONBLOCK) | O_CREAT | O_EXCL, mode);
		if (fd >= 0) {
			created = true;
			hflags &= ~O_NONBLOCK;
			break;
		}
		if (errno != EEXIST || (fi->flags & O_EXCL))
			break;
		/* made by a job since the kernel's lookup: open what is there,
		 * without waiting on it (it may be a FIFO); if it is gone again,
		 * create once more (a local filesystem holds the directory's
		 * lock across both steps, we cannot) */
		fd = openat(pfd, name, hflags, mode);
		if (fd >= 0 || errno != ENOENT)
			break;
	}
	err = fd < 0 ? errno : 0;
	data_creds_leave();
	if (!err)
		err = data_open_checked(fd, hflags, fi->flags, &st);
	if (!err)
		err = data_node_of_fd(p, pfd, name, fd, &st, &n);
	if (!err) { /* the use the open file keeps (a new node's fd: no reopen) */
		int nf = nfd_get(n);
		if (nf < 0) {
			err = -nf;
			data_forget(n, 1);
		}
	}
	nfd_put(p);
	if (err) {
		if (created)
			data_undo(p, name, st.st_ino ? &st : NULL, S_IFREG);
		if (fd >= 0)
			close(fd);
		budget_give(p->view->fds, BUDGET_DATA, DATA_OPEN_FDS);
		return (void)fuse_reply_err(req, err);
	}
	data_entry(n, &st, &e);
	data_handle_open(req, n, fd, &st, true, fi);
	if (fuse_reply_create(req, &e, fi) == -ENOENT) { /* interrupted: neither entry nor file reached the kernel */
		data_handle_close(req, n, fi);
		data_forget(n, 1);
	}
}

static void data_read_buf(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);

	(void)ino;
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = data_fd(fi);
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static void data_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off,
	struct fuse_file_info *fi)
{
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
	ssize_t res;
	int err;

	if ((err = data_skills_grow(dnode(ino), data_fd(fi), off + (off_t)fuse_buf_size(in))))
		return (void)fuse_reply_err(req, err);
	if (data_write_kills_setid(req) && (err = data_kill_setid(data_fd(fi))))
		return (void)fuse_reply_err(req, err);
	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	out.buf[0].fd = data_fd(fi);
	out.buf[0].pos = off;
	res = fuse_buf_copy(&out, in, 0);
	if (res < 0)
		return (void)fuse_reply_err(req, (int)-res);
	fuse_reply_write(req, (size_t)res);
}

static void data_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = dnode(ino);
	struct stat st;

	/* Our own writes changed the host file; remember that state so the
	 * next open keeps the (coherent) page cache. */
	if ((fi->flags & O_ACCMODE) != O_RDONLY && !fstat(data_fd(fi), &st)) {
		pthread_mutex_lock(&n->view->lock);
		data_stamp(n, &st);
		pthread_mutex_unlock(&n->view->lock);
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		data_skills_changed(n, 0); /* a closed written file */
	data_handle_close(req, n, fi);
	dlock_released(); /* the file's flock, if it held one, is gone */
	fuse_reply_err(req, 0);
}

/* Under skills/, fsync returns once the sandbox has the change (or fails
 * with the sync's error): skillsfs_fsync answers. */
static void data_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct node *n = dnode(ino);
	int fl;

	if (datasync ? fdatasync(data_fd(fi)) : fsync(data_fd(fi)))
		return (void)fuse_reply_err(req, errno);
	if (!data_skills(n))
		return (void)fuse_reply_err(req, 0);
	/* FSYNC carries no open flags (libfuse leaves fi->flags 0): the
	 * handle's own say whether it writes, i.e. whether this fsync is the
	 * change's first news (before its close) */
	fl = fcntl(data_fd(fi), F_GETFL);
	skillsfs_fsync(req, n->view->sbx, fl >= 0 && (fl & O_ACCMODE) != O_RDONLY);
}

/* An open directory: its fd (in dp) and a use of its node's fd (so fstat
 * of an open directory a job removed works, as of an open file), both
 * charged to its sandbox's budget like an open file's.  They are let go at
 * RELEASEDIR, not when the retired handle is freed (handle.h: 10 s later):
 * a loop of `ls` would otherwise hold hundreds.  lock orders that against a
 * READDIR of a killed reader still running (it is taken before view->lock
 * and nfd.lock, never held by a reply); acct is referenced (a retired
 * handle outlives its view). */
struct data_dir {
	pthread_mutex_t lock;
	DIR *dp;         /* NULL once released */
	struct node *n;  /* its node, whose fd it uses while dp is open */
	struct dirent *entry;
	off_t offset;
	struct budget_acct *acct;
};

/* The directory's fds let go and their charge given back (d->lock held,
 * or the handle unreachable). */
static void data_dir_close(struct data_dir *d)
{
	if (!d->dp)
		return;
	closedir(d->dp);
	d->dp = NULL;
	nfd_put(d->n);
	budget_give(d->acct, BUDGET_DATA, DATA_OPEN_FDS);
}

static void data_dir_clean(void *p)
{
	struct data_dir *d = p;

	data_dir_close(d);
	pthread_mutex_destroy(&d->lock);
	budget_acct_put(d->acct);
}

static void data_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = dnode(ino);
	struct data_dir *d = handle_alloc(sizeof(*d), data_dir_clean);
	int pfd, fd = -1, err;

	if (!d)
		return (void)fuse_reply_err(req, ENOMEM);
	pthread_mutex_init(&d->lock, NULL);
	if ((err = data_open_charge(n))) {
		handle_discard(d);
		return (void)fuse_reply_err(req, err);
	}
	if ((pfd = nfd_get(n)) >= 0) {
		fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		err = errno;
	} else {
		err = -pfd;
	}
	if (fd < 0 || !(d->dp = fdopendir(fd))) {
		err = fd < 0 ? err : errno;
		if (fd >= 0)
			close(fd);
		if (pfd >= 0)
			nfd_put(n);
		budget_give(n->view->fds, BUDGET_DATA, DATA_OPEN_FDS);
		handle_discard(d);
		return (void)fuse_reply_err(req, err);
	}
	d->n = n; /* keeps pfd's use until RELEASEDIR */
	d->acct = budget_acct_ref(n->view->fds);
	fi->fh = (uint64_t)(uintptr_t)d;
	/* a watched directory's listing is cached by the kernel, across opens:
	 * the watcher drops it when a job changes the directory */
	fi->cache_readdir = fi->keep_cache = fswatch_long(n->view);
	fuse_reply_open(req, fi);
}

static void data_do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi,
	int plus)
{
	struct data_dir *d = (struct data_dir *)(uintptr_t)fi->fh;
	struct node *dir = dnode(ino);
	char *buf = calloc(1, size), *p = buf;
	size_t rem = size;
	int err = 0;

	if (!buf)
		return (void)fuse_reply_err(req, ENOMEM);
	pthread_mutex_lock(&d->lock);
	if (!d->dp) { /* released meanwhile: the reader is gone */
		pthread_mutex_unlock(&d->lock);
		free(buf);
		return (void)fuse_reply_err(req, EBADF);
	}
	if (offset != d->offset) {
		seekdir(d->dp, offset);
		d->entry = NULL;
		d->offset = offset;
	}
	for (;;) {
		struct fuse_entry_param e;
		struct node *added = NULL;
		size_t entsize;
		const char *name;

		if (!d->entry) {
			errno = 0;
			d->entry = readdir(d->dp);
			if (!d->entry) {
				err = errno;
				break;
			}
		}
		name = d->entry->d_name;
		if (plus) {
			if (!strcmp(name, ".") || !strcmp(name, "..")) {
				memset(&e, 0, sizeof(e));
				e.attr.st_ino = d->entry->d_ino;
				e.attr.st_mode = (mode_t)(d->entry->d_type << 12);
			} else {
				err = data_do_lookup(dir, name, &e);
				if (err == ENOENT) {
					/* removed since readdir saw it (a job, say): skip it */
					d->offset = d->entry->d_off;
					d->entry = NULL;
					err = 0;
					continue;
				}
				if (err) {
					/* no attributes (EMFILE, ENOMEM...): the entry
					 * without them, the kernel looks it up itself */
					memset(&e, 0, sizeof(e));
					e.attr.st_ino = d->entry->d_ino;
					e.attr.st_mode = (mode_t)(d->entry->d_type << 12);
					err = 0;
				} else {
					added = node_of(e.ino);
				}
			}
			entsize = fuse_add_direntry_plus(req, p, rem, name, &e, d->entry->d_off);
		} else {
			struct stat st = { .st_ino = d->entry->d_ino, .st_mode = (mode_t)(d->entry->d_type << 12) };
			entsize = fuse_add_direntry(req, p, rem, name, &st, d->entry->d_off);
		}
		if (entsize > rem) {
			if (added)
				data_forget(added, 1);
			break;
		}
		p += entsize;
		rem -= entsize;
		d->offset = d->entry->d_off;
		d->entry = NULL;
	}
	pthread_mutex_unlock(&d->lock);
	if (err && rem == size)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

static void data_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	data_do_readdir(req, ino, size, off, fi, 0);
}

static void data_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	data_do_readdir(req, ino, size, off, fi, 1);
}

static void data_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct data_dir *d = (struct data_dir *)(uintptr_t)fi->fh;

	(void)ino;
	pthread_mutex_lock(&d->lock);
	data_dir_close(d);
	pthread_mutex_unlock(&d->lock);
	/* retired, not freed: a READDIR of a killed reader may still be running */
	handle_retire(d);
	fuse_reply_err(req, 0);
}

/* Under the handle's lock: only a READDIR or RELEASEDIR of the same open
 * directory waits for the fsync. */
static void data_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct data_dir *d = (struct data_dir *)(uintptr_t)fi->fh;
	int err;

	pthread_mutex_lock(&d->lock);
	if (!d->dp)
		err = EBADF;
	else
		err = (datasync ? fdatasync(dirfd(d->dp)) : fsync(dirfd(d->dp))) ? errno : 0;
	pthread_mutex_unlock(&d->lock);
	if (err)
		return (void)fuse_reply_err(req, err);
	if (!data_skills(dnode(ino)))
		return (void)fuse_reply_err(req, 0);
	skillsfs_fsync(req, dnode(ino)->view->sbx, false);
}

static void data_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;
	int fd = nfd_get(dnode(ino)), err;

	if (fd < 0)
		return (void)fuse_reply_err(req, -fd);
	err = fstatvfs(fd, &sv) ? errno : 0;
	nfd_put(dnode(ino));
	if (err)
		return (void)fuse_reply_err(req, err);
	fuse_reply_statfs(req, &sv);
}

static void data_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
	int err = (mode & FALLOC_FL_KEEP_SIZE) ? 0 : data_skills_grow(dnode(ino), data_fd(fi), off + len);

	if (!err && data_write_kills_setid(req))
		err = data_kill_setid(data_fd(fi)); /* as a write would */
	if (err)
		return (void)fuse_reply_err(req, err);
	fuse_reply_err(req, fallocate(data_fd(fi), mode, off, len) ? errno : 0);
}

/* flock(2) on a data file is the host's flock, shared with the sandbox; a
 * wait is parked, holding no worker (dlock.c).  (POSIX fcntl locks are not
 * implemented here: the kernel keeps them for the mount alone.) */
static void data_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op)
{
	dlock_flock(req, data_fd(fi), op, dnode(ino)->view->sbx->token);
}

/* xattrs go through /proc/self/fd/N of the node's O_PATH fd; symlinks
 * cannot carry user xattrs.  Each returns what the call returned, -1 with
 * errno. */
enum data_xattr_op { DX_GET, DX_LIST, DX_SET, DX_REMOVE };

static ssize_t data_xattr(struct node *n, enum data_xattr_op op, const char *name, void *value, size_t size,
	int flags)
{
	char proc[64];
	int fd = nfd_get(n), err;
	ssize_t r = -1;

	if (fd < 0) {
		errno = -fd;
		return -1;
	}
	if (data_proc_path(fd, proc, sizeof(proc)))
		errno = EIO;
	else if (op == DX_GET)
		r = getxattr(proc, name, value, size);
	else if (op == DX_LIST)
		r = listxattr(proc, value, size);
	else if (op == DX_SET)
		r = setxattr(proc, name, value, size, flags);
	else
		r = removexattr(proc, name);
	err = errno;
	nfd_put(n);
	errno = err;
	return r;
}

/* getxattr and listxattr: the value, or its size when size is 0. */
static void data_xattr_read(fuse_req_t req, fuse_ino_t ino, enum data_xattr_op op, const char *name, size_t size)
{
	char *value = NULL;
	ssize_t n;

	if (size) {
		value = malloc(size);
		if (!value)
			return (void)fuse_reply_err(req, ENOMEM);
	}
	n = data_xattr(dnode(ino), op, name, value, size, 0);
	if (n < 0)
		fuse_reply_err(req, errno);
	else if (size)
		fuse_reply_buf(req, value, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
	free(value);
}

static void data_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	data_xattr_read(req, ino, DX_GET, name, size);
}

static void data_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	data_xattr_read(req, ino, DX_LIST, NULL, size);
}

static void data_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size, int flags)
{
	fuse_reply_err(req, data_xattr(dnode(ino), DX_SET, name, (void *)value, size, flags) ? errno : 0);
}

static void data_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, data_xattr(dnode(ino), DX_REMOVE, name, NULL, 0, 0) ? errno : 0);
}

static void data_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
	fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len, int flags)
{
	ssize_t n;

	if (dnode(ino_in)->view != dnode(ino_out)->view)
		return (void)fuse_reply_err(req, EXDEV);
	/* Without reflinks the host copies the bytes (holes become written
	 * zeros): one request copies at most DATA_COPY_MAX so no request of a
	 * huge (sparse) file holds a worker for long; a short count makes the
	 * caller continue, as copy_file_range(2) allows. */
	if (len > DATA_COPY_MAX)
		len = DATA_COPY_MAX;
	int err = data_skills_grow(dnode(ino_out), data_fd(fi_out), off_out + (off_t)len);
	if (!err && data_write_kills_setid(req))
		err = data_kill_setid(data_fd(fi_out)); /* as a write would */
	if (err)
		return (void)fuse_reply_err(req, err);
	n = copy_file_range(data_fd(fi_in), &off_in, data_fd(fi_out), &off_out, len, (unsigned)flags);
	if (n < 0)
		return (void)fuse_reply_err(req, errno);
	fuse_reply_write(req, (size_t)n);
}

static void data_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	off_t r;

	(void)ino;
	r = lseek(data_fd(fi), off, whence);
	if (r < 0)
		return (void)fuse_reply_err(req, errno);
	fuse_reply_lseek(req, r);
}

static const struct fuse_lowlevel_ops data_ops = {
	.lookup = data_lookup,
	.getattr = data_getattr,
	.setattr = data_setattr,
	.readlink = data_readlink,
	.mknod = data_mknod,
	.mkdir = data_mkdir,
	.symlink = data_symlink,
	.link = data_link,
	.unlink = data_unlink,
	.rmdir = data_rmdir,
	.rename = data_rename,
	.open = data_open,
	.create = data_create,
	.read = data_read_buf,
	.write_buf = data_write_buf,
	.release = data_release,
	.fsync = data_fsync,
	.opendir = data_opendir,
	.readdir = data_readdir,
	.readdirplus = data_readdirplus,
	.releasedir = data_releasedir,
	.fsyncdir = data_fsyncdir,
	.statfs = data_statfs,
	.fallocate = data_fallocate,
	.flock = data_flock,
	.getxattr = data_getxattr,
	.listxattr = data_listxattr,
	.setxattr = data_setxattr,
	.removexattr = data_removexattr,
	.copy_file_range = data_copy_file_range,
	.lseek = data_lseek,
};
static const struct node_kind_ops k_data = { .ops = &data_ops, .forget = data_forget };

void data_init(const char *state_dir)
{
	node_kind_register(N_DATA, &k_data);
	nfd_init(state_dir, data_node_free);
}

void data_shutdown(void)
{
	nfd_shutdown();
}

/* Job end: if the name the kernel knows n by no longer refers to n (the job
 * removed or renamed it), drop the kernel's entry, so the next path lookup
 * asks us and finds what is there now.  Without this a stat of the old name
 * would show the removed file, and an open(O_CREAT|O_TRUNC) of it would
 * write into the removed file instead of making a new one. */
static void data_name_check(struct node *n)
{
	struct view *v = n->view;
	char name[NAME_MAX + 1];
	struct node *p = NULL;
	struct stat st;
	size_t len = 0;

	pthread_mutex_lock(&v->lock);
	if (n->name && (len = strlen(n->name)) < sizeof(name) && (p = data_table_find_locked(v, n->pdev, n->pino))) {
		memcpy(name, n->name, len + 1);
		p->nlookup++;
	}
	pthread_mutex_unlock(&v->lock);
	if (!p)
		return;
	/* same inode number and n without an fd: a new file may have it */
	int pfd = nfd_get(p);
	if (pfd < 0 || fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) || st.st_dev != n->dev || st.st_ino != n->ino ||
	    !nfd_same_at(n, pfd, name))
		fuse_lowlevel_notify_inval_entry(fs.se, node_ino(p), name, len);
	if (pfd >= 0)
		nfd_put(p);
	data_forget(p, 1);
}

/* After a job ends, the files it changed from inside the sandbox must show
 * at once, not after the timeouts: invalidate the cached attributes of every
 * inode of the sandbox's current view, and the entries of names the job
 * removed or renamed (data_name_check).  Called from the jobs event thread,
 * never from a FUSE worker, before the job's end is published; each node is
 * held by a reference while the lock is not (a notification for an inode
 * the kernel has meanwhile forgotten is harmless: it answers ENOENT). */
void data_inval_sbx(struct sbx *s)
{
	struct node **held = NULL;
	size_t n = 0, cap = 0;
	struct view *v = view_of_sbx(s);

	if (!v)
		return;
	data_neg_drop(v);
	pthread_mutex_lock(&v->lock);
	for (int b = 0; b < VIEW_BUCKETS; b++)
		for (struct node *d = v->table[b]; d; d = d->hnext) {
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 256;
				struct node **p = realloc(held, nc * sizeof(*p));
				if (!p)
					goto unlock;
				held = p;
				cap = nc;
			}
			d->nlookup++;
			held[n++] = d;
		}
unlock:
	pthread_mutex_unlock(&v->lock);
	for (size_t i = 0; i < n; i++) {
		if (fs.se) {
			fuse_lowlevel_notify_inval_inode(fs.se, node_ino(held[i]), -1, 0);
			data_name_check(held[i]);
		}
		data_forget(held[i], 1);
	}
	free(held);
	view_put(v);
}

/* The node of (dev, ino) in v, with a lookup reference, or NULL. */
static struct node *data_hold(struct view *v, dev_t dev, ino_t ino)
{
	struct node *n;

	pthread_mutex_lock(&v->lock);
	if ((n = data_table_find_locked(v, dev, ino)))
		n->nlookup++;
	pthread_mutex_unlock(&v->lock);
	return n;
}

int data_inval_dirent(struct view *v, dev_t ddev, ino_t dino, const char *name)
{
	struct node *d = data_hold(v, ddev, dino);

	if (!d)
		return 0;
	if (fs.se) {
		fuse_lowlevel_notify_inval_entry(fs.se, node_ino(d), name, strlen(name));
		/* its attributes and its cached listing */
		fuse_lowlevel_notify_inval_inode(fs.se, node_ino(d), 0, 0);
	}
	data_forget(d, 1);
	return 2;
}

int data_inval_file(struct view *v, dev_t dev, ino_t ino, bool data)
{
	struct node *n = data_hold(v, dev, ino);

	if (!n)
		return 0;
	if (fs.se)
		fuse_lowlevel_notify_inval_inode(fs.se, node_ino(n), data ? 0 : -1, 0);
	data_forget(n, 1);
	return 1;
}
