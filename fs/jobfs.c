/* SPDX-License-Identifier: MIT */
/*
 * jobfs.c - the FUSE glue of jobs/ (DESIGN §6): the jobs/ directory, a
 * job's directory and its files, on top of the state machine of job.c.
 *
 * cmd: writes accumulate in the open file's handle; the job starts when
 * the writer closes it (FLUSH, which close(2) waits for) or fsyncs it, with
 * everything written, so `cat > cmd <<EOF`, a shell `echo` with newlines and
 * an agent's write_file all run the whole command, and a read of exit or
 * status issued after that close sees the job started.  An error of the
 * start (empty command, sandbox gone) is the error of close(2).  Every other
 * file is opened noflush: closing it costs no round trip.
 *
 * Reads that wait (exit before the end, stdout/stderr at end of file of a
 * running job) are parked on the job's queue (runtime/park.h) and answered when the
 * job's output grows or it ends; O_NONBLOCK gives EAGAIN instead, and
 * poll(2) handles are kept on the same queue.  A job that was never
 * started and has no writer of cmd: exit is ESRCH, stdout/stderr are empty.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/log.h"
#include "cmdbuf.h"
#include "data.h"
#include "rfiles.h"
#include "handle.h"
#include "job.h"
#include "jobfs.h"
#include "node.h"
#include "vdir.h"
#include "fswork.h"

enum jobfile { JF_CMD, JF_ENV, JF_STDIN, JF_STDOUT, JF_STDERR, JF_EXIT, JF_STATUS, JF_CTL, JF_TIMEOUT, JF_COUNT };

static const char *job_file_names[JF_COUNT] = { "cmd", "env", "stdin", "stdout", "stderr", "exit", "status",
	"ctl", "timeout" };
static const mode_t job_file_modes[JF_COUNT] = { 0600, 0200, 0200, 0400, 0400, 0400, 0400, 0200, 0200 };

#define JOBFS_DIR_TIMEOUT 1.0
#define JOBFS_STDIN_WRITE_MAX (2 * 1024 * 1024)

/* Per-open handle of a job file.  One open file may be used from several
 * threads at once: the command's bytes are a cmdbuf (its own lock); pos is
 * written by READ and read by POLL: an atomic; the rest is set at open. */
struct jh {
	_Atomic off_t pos; /* stdout/stderr: how far this open has read (poll readiness) */
	struct buf snap;   /* status/cmd: the snapshot taken at open (read-only after) */
	struct cmdbuf cmd; /* cmd opened for writing: the bytes written so far */
	bool cmd_writer;   /* counted in job_cmd_writer */
};

static int name_index(const char *const *names, int count, const char *name)
{
	for (int i = 0; i < count; i++)
		if (!strcmp(names[i], name))
			return i;
	return -1;
}

/* ---- nodes of jobs -------------------------------------------------------------- */

/* fs_lock held: the node of job j (which = -1: its directory) in view v. */
static struct node *job_node_locked(struct view *v, struct job *j, int which)
{
	struct node *n;

	lock_assert_held(&fs_lock);
	if (v->dead)
		return NULL;
	for (n = v->vnodes; n; n = n->hnext)
		if (n->job == j && n->which == which && (n->kind == N_JOB || n->kind == N_JOBFILE))
			return n;
	n = view_vnode_new_locked(v, which < 0 ? N_JOB : N_JOBFILE, which);
	if (n) {
		n->job = j;
		job_ref(j);
	}
	return n;
}

/* The job's nodes in v go away with its slot. */
static void job_nodes_drop(struct view *v, struct job *j)
{
	struct node **pp, *n;
	int nput = 0;

	lock_acquire(&fs_lock);
	for (pp = &v->vnodes; (n = *pp);) {
		if (n->job != j) {
			pp = &n->hnext;
			continue;
		}
		*pp = n->hnext;
		nput += vnode_unlink_locked(n);
	}
	fs_unlock();
	while (nput-- > 0)
		view_put(v);
}

static void job_node_free(struct node *n)
{
	lock_assert_not_held(&fs_lock); /* the last job_put may free an exec handle (fs_unlock) */
	job_put(n->job);
}

static off_t jobfile_size(struct job *j, int which)
{
	struct buf b = BUF_INIT(BUF_CAP_JSON);
	char text[32];
	off_t size = 0;

	switch (which) {
	case JF_STDOUT:
	case JF_STDERR:
		return job_stream_size(j, which == JF_STDOUT ? JOB_STDOUT : JOB_STDERR);
	case JF_ENV:
		return job_input_size(j, JOB_IN_ENV);
	case JF_STDIN:
		return job_input_size(j, JOB_IN_STDIN);
	case JF_TIMEOUT:
		return job_input_size(j, JOB_IN_TIMEOUT);
	case JF_EXIT:
		if (job_state_ended(job_state(j)) && !job_exit_text(j, text, sizeof(text)))
			size = (off_t)strlen(text);
		return size;
	case JF_STATUS:
		if (!job_status_json(j, &b))
			size = (off_t)b.len;
		break;
	case JF_CMD:
		if (!job_cmd_text(j, &b))
			size = (off_t)b.len;
		break;
	}
	buf_free(&b);
	return size;
}

static void jobfs_attr(struct node *n, struct stat *st)
{
	if (n->kind == N_JOBFILE)
		vnode_attr(n, S_IFREG | job_file_modes[n->which], jobfile_size(n->job, n->which), st);
	else
		vnode_attr(n, S_IFDIR | 0700, 0, st);
}

static void jobfs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct stat st;

	(void)fi;
	jobfs_attr(n, &st);
	fuse_reply_attr(req, &st, n->kind == N_JOBFILE ? 0 : JOBFS_DIR_TIMEOUT);
}

/* `echo x > cmd` truncates first: writes to job files are commands, so a
 * truncation of a writable one means nothing and is accepted; so is a touch
 * of a job directory.  Anything else is EPERM. */
static void jobfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid, struct fuse_file_info *fi)
{
	const int times = FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW |
			  FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME;
	struct node *n = node_of(ino);
	bool ok;

	(void)attr;
	if (n->kind == N_JOBFILE)
		ok = valid == FUSE_SET_ATTR_SIZE && (job_file_modes[n->which] & 0200);
	else
		ok = (valid & ~times) == 0;
	if (!ok)
		return (void)fuse_reply_err(req, EPERM);
	jobfs_getattr(req, ino, fi);
}

static void jobfs_reply_entry(fuse_req_t req, struct node *n, struct fuse_entry_param *e)
{
	struct stat st;

	jobfs_attr(n, &st); /* outside fs_lock: sizes read files */
	lock_acquire(&fs_lock);
	vnode_entry_locked(n, st.st_mode, st.st_size, n->kind == N_JOBFILE ? 0 : JOBFS_DIR_TIMEOUT, e);
	fs_unlock();
	fuse_reply_entry(req, e);
}

/* ---- jobs/ ------------------------------------------------------------------------ */

static int jobs_node_lookup(struct node *p, const char *name, int which, struct node **out)
{
	struct view *v = p->view;
	struct job *j;
	struct node *n;

	if (v->dead || !names_valid(name))
		return ENOENT;
	j = job_get(v->sbx, v->jobs_dir, name);
	if (!j)
		return ENOENT;
	lock_acquire(&fs_lock);
	n = job_node_locked(v, j, which);
	fs_unlock();
	job_put(j);
	*out = n;
	return n ? 0 : ENOMEM;
}

static void jobs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	struct node *n = NULL;
	int err = jobs_node_lookup(node_of(parent), name, -1, &n);

	if (err)
		return node_reply_entry(req, err, &e);
	jobfs_reply_entry(req, n, &e);
}

static void jobs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct node *p = node_of(parent), *n = NULL;
	struct fuse_entry_param e;
	int err;

	(void)mode;
	if (p->view->dead)
		return (void)fuse_reply_err(req, ENOENT);
	if (!names_valid(name)) {
		log_warn(p->view->sbx->token, "mkdir jobs/%s: invalid job name (must match ^[A-Za-z0-9_-]{1,64}$)",
			name);
		return (void)fuse_reply_err(req, EINVAL);
	}
	err = job_mkdir(p->view->sbx, p->view->jobs_dir, name);
	if (!err)
		err = jobs_node_lookup(p, name, -1, &n);
	if (err)
		return (void)fuse_reply_err(req, err);
	jobfs_reply_entry(req, n, &e);
}

static void jobs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct view *v = node_of(parent)->view;
	struct job *j;
	int err;

	if (v->dead || !names_valid(name))
		return (void)fuse_reply_err(req, ENOENT);
	j = job_get(v->sbx, v->jobs_dir, name);
	if (!j)
		return (void)fuse_reply_err(req, ENOENT);
	err = job_rmdir(j);
	if (!err)
		job_nodes_drop(v, j);
	job_put(j);
	fuse_reply_err(req, err);
}

static void vdir_add_job(const char *name, void *arg)
{
	vdir_add(arg, name, DT_DIR);
}

static void jobfs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct vdir *d;

	if (n->view->dead || (n->kind == N_JOB && !n->linked))
		return (void)fuse_reply_err(req, ENOENT);
	d = vdir_new();
	if (!d)
		return (void)fuse_reply_err(req, ENOMEM);
	if (n->kind == N_JOBS)
		job_list(n->view->jobs_dir, vdir_add_job, d);
	else
		for (int i = 0; i < JF_COUNT; i++)
			vdir_add(d, job_file_names[i], DT_REG);
	vdir_reply_open(req, d, fi);
}

/* ---- jobs/<name>/ -------------------------------------------------------------------- */

static void job_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct node *p = node_of(parent), *n = NULL;
	int i = name_index(job_file_names, JF_COUNT, name);
	struct fuse_entry_param e;

	if (i < 0 || p->view->dead)
		return node_reply_entry(req, ENOENT, &e);
	lock_acquire(&fs_lock);
	if (p->job && p->linked)
		n = job_node_locked(p->view, p->job, i);
	fs_unlock();
	if (!n)
		return node_reply_entry(req, ENOENT, &e);
	jobfs_reply_entry(req, n, &e);
}

/* ---- job files: open, release --------------------------------------------------------- */

static void jh_clean(void *p)
{
	struct jh *h = p;

	buf_free(&h->snap);
	cmdbuf_release(&h->cmd);
}

static void jobfile_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct job *j = n->job;
	int acc = fi->flags & O_ACCMODE;
	mode_t mode = job_file_modes[n->which];
	struct jh *h;

	if (!j || !n->linked)
		return (void)fuse_reply_err(req, ENOENT);
	if ((acc != O_RDONLY && !(mode & 0200)) || (acc != O_WRONLY && !(mode & 0400)))
		return (void)fuse_reply_err(req, n->which == JF_CMD || acc == O_RDONLY ? EACCES : EPERM);
	h = handle_alloc(sizeof(*h), jh_clean);
	if (!h)
		return (void)fuse_reply_err(req, ENOMEM);
	buf_init(&h->snap, BUF_CAP_JSON);
	cmdbuf_init(&h->cmd, JOB_CMD_MAX);
	if ((n->which == JF_STATUS && job_status_json(j, &h->snap)) ||
	    (n->which == JF_CMD && acc == O_RDONLY && job_cmd_text(j, &h->snap))) {
		handle_discard(h);
		return (void)fuse_reply_err(req, EIO);
	}
	if (n->which == JF_CMD && acc != O_RDONLY) {
		h->cmd_writer = true;
		job_cmd_writer(j, +1);
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1;
	fi->nonseekable = n->which == JF_STDIN;
	fi->noflush = n->which != JF_CMD;
	fuse_reply_open(req, fi);
}

struct cmd_start {
	fuse_req_t req; /* FLUSH or FSYNC to answer; NULL at RELEASE */
	struct job *j;  /* referenced */
	char *cmd;
	size_t len;
};

/* Work thread: start the job with the bytes a writer wrote. */
static void cmd_start_work(void *arg)
{
	struct cmd_start *cs = arg;
	int err = job_start(cs->j, cs->cmd, cs->len);

	if (cs->req)
		fuse_reply_err(cs->req, err);
	else if (err)
		log_warn(job_scope(cs->j), "cmd: the job was not started at close: %s", strerror(err));
	job_put(cs->j);
	free(cs->cmd);
	free(cs);
}

/* FLUSH, FSYNC or RELEASE of a cmd handle: start the job with what this
 * handle wrote (once).  req is answered here or by the work item. */
static void cmd_commit(fuse_req_t req, struct node *n, struct jh *h)
{
	struct cmd_start *cs = NULL;
	char *cmd = NULL;
	size_t len = 0;
	int err;

	cmd = cmdbuf_take(&h->cmd, &len); /* the first commit takes the bytes; later writes get EBUSY */
	if (!cmd) {
		if (req)
			fuse_reply_err(req, 0);
		return;
	}
	err = job_claim(n->job);
	cs = err ? NULL : calloc(1, sizeof(*cs));
	if (!err && !cs)
		err = ENOMEM;
	if (!err) {
		cs->req = req;
		cs->j = n->job;
		job_ref(cs->j);
		cs->len = len;
		cs->cmd = cmd;
		cmd = NULL;
		err = work_submit(WORK_IO, n->view ? n->view->sbx->token : NULL, pool_work_timeout_ms(),
			cmd_start_work, cs);
		if (err) {
			job_put(cs->j);
			free(cs->cmd);
			free(cs);
		}
	}
	free(cmd);
	if (err) {
		if (err != EBUSY && err != ENOENT) /* claimed: give it back */
			job_unclaim(n->job);
		if (req)
			fuse_reply_err(req, err);
	}
}

static void jobfile_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct jh *h = (struct jh *)(uintptr_t)fi->fh;

	if (n->which != JF_CMD)
		return (void)fuse_reply_err(req, 0);
	cmd_commit(req, n, h);
}

static void jobfile_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)datasync;
	jobfile_flush(req, ino, fi);
}

static void jobfile_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct jh *h = (struct jh *)(uintptr_t)fi->fh;

	if (n->which == JF_CMD && h->cmd_writer) {
		cmd_commit(NULL, n, h); /* no FLUSH came (cannot happen with close(2)): start anyway */
		job_cmd_writer(n->job, -1);
	}
	handle_retire(h); /* a late READ of a killed reader may still use it */
	fuse_reply_err(req, 0);
}

/* ---- job files: writes --------------------------------------------------------------- */

/* WRITE of cmd: append to the handle's bytes unless it was committed. */
static int cmd_append(struct node *n, struct jh *h, const char *mem, size_t len)
{
	int err = job_state(n->job) != J_CREATED ? EBUSY : 0;

	if (!err && memchr(mem, '\0', len)) {
		log_warn(job_scope(n->job), "cmd: the command contains a NUL byte");
		return EINVAL;
	}
	if (!err)
		err = cmdbuf_append(&h->cmd, mem, len);
	if (err == EBUSY)
		log_warn(job_scope(n->job), "cmd: the job has already been started (%s)",
			job_state_name(job_state(n->job)));
	else if (err == EFBIG)
		log_warn(job_scope(n->job), "cmd: longer than %d bytes", JOB_CMD_MAX);
	return err;
}

static void jobfile_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off,
	struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct jh *h = (struct jh *)(uintptr_t)fi->fh;
	size_t size = fuse_buf_size(in);
	struct fuse_bufvec dst = FUSE_BUFVEC_INIT(size);
	size_t max = n->which == JF_STDIN ? JOBFS_STDIN_WRITE_MAX : n->which == JF_CMD ? JOB_CMD_MAX : BUF_CAP_CTL;
	char *mem;
	ssize_t got;
	int err = 0;

	(void)off;
	if (size > max) {
		log_warn(job_scope(n->job), "a %zu-byte write to %s refused", size, job_file_names[n->which]);
		return (void)fuse_reply_err(req, n->which == JF_CMD ? EFBIG : E2BIG);
	}
	mem = malloc(size + 1);
	if (!mem)
		return (void)fuse_reply_err(req, ENOMEM);
	dst.buf[0].mem = mem;
	got = fuse_buf_copy(&dst, in, 0);
	if (got < 0) {
		free(mem);
		return (void)fuse_reply_err(req, (int)-got);
	}
	switch (n->which) {
	case JF_CMD:
		err = cmd_append(n, h, mem, (size_t)got);
		break;
	case JF_ENV:
		err = job_add_env(n->job, mem, (size_t)got);
		break;
	case JF_STDIN:
		err = job_add_stdin(n->job, mem, (size_t)got);
		break;
	case JF_CTL:
		err = job_ctl(n->job, mem, (size_t)got);
		break;
	case JF_TIMEOUT:
		err = job_set_timeout(n->job, mem, (size_t)got);
		break;
	default:
		err = EPERM;
	}
	free(mem);
	if (err)
		return (void)fuse_reply_err(req, err);
	fuse_reply_write(req, (size_t)got);
}

/* ---- job files: reads that may wait --------------------------------------------------- */

struct jread {
	struct job *j; /* referenced */
	int which;
	size_t size;
	off_t off;
};

/* Can this read be answered now?  Replies and returns true if so. */
static bool jread_try(void *reqp, void *arg)
{
	fuse_req_t req = reqp;
	struct jread *r = arg;
	enum job_state st = job_state(r->j);
	bool ended = job_state_ended(st), idle = st == J_CREATED;

	if (r->which == JF_EXIT) {
		char text[32];
		size_t len;

		if (idle) {
			/* not started: only worth waiting for while someone writes cmd */
			if (job_cmd_writers(r->j))
				return false;
			fuse_reply_err(req, ESRCH);
			return true;
		}
		if (!ended)
			return false;
		if (job_exit_text(r->j, text, sizeof(text))) {
			fuse_reply_err(req, EIO);
			return true;
		}
		len = strlen(text);
		if ((size_t)r->off >= len)
			fuse_reply_buf(req, NULL, 0);
		else
			fuse_reply_buf(req, text + r->off, len - (size_t)r->off < r->size ? len - (size_t)r->off : r->size);
		return true;
	}
	int fd = job_open_stream(r->j, r->which == JF_STDOUT ? JOB_STDOUT : JOB_STDERR);
	struct stat sb;

	if (fd < 0) {
		if (errno == ENOENT && !ended && !(idle && !job_cmd_writers(r->j)))
			return false; /* no output yet */
		if (errno == ENOENT)
			fuse_reply_buf(req, NULL, 0);
		else
			fuse_reply_err(req, errno);
		return true;
	}
	if (fstat(fd, &sb)) {
		fuse_reply_err(req, errno);
	} else if (r->off < sb.st_size) {
		/* straight from the output file (splice when the kernel can): no
		 * copy of the output passes through daemon memory */
		size_t n = (size_t)(sb.st_size - r->off) < r->size ? (size_t)(sb.st_size - r->off) : r->size;
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(n);
		bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
		bv.buf[0].fd = fd;
		bv.buf[0].pos = r->off;
		fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
	} else if (ended || (idle && !job_cmd_writers(r->j))) {
		fuse_reply_buf(req, NULL, 0);
	} else {
		close(fd);
		return false;
	}
	close(fd);
	return true;
}

static void jread_free(void *arg)
{
	struct jread *r = arg;

	job_put(r->j);
	free(r);
}

static void jobfile_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	struct jh *h = (struct jh *)(uintptr_t)fi->fh;
	struct jread stack = { .j = n->job, .which = n->which, .size = size, .off = off }, *r;

	if (n->which == JF_STATUS || n->which == JF_CMD) {
		if ((size_t)off >= h->snap.len)
			return (void)fuse_reply_buf(req, NULL, 0);
		return (void)fuse_reply_buf(req, h->snap.ptr + off,
			h->snap.len - (size_t)off < size ? h->snap.len - (size_t)off : size);
	}
	if (n->which != JF_STDOUT && n->which != JF_STDERR && n->which != JF_EXIT)
		return (void)fuse_reply_err(req, EINVAL);
	if (n->which != JF_EXIT && off + (off_t)size > h->pos)
		h->pos = off;
	if (jread_try(req, &stack))
		return;
	if (fi->flags & O_NONBLOCK)
		return (void)fuse_reply_err(req, EAGAIN);
	r = malloc(sizeof(*r));
	if (!r)
		return (void)fuse_reply_err(req, ENOMEM);
	*r = stack;
	job_ref(r->j);
	park(job_queue(r->j), req, jread_try, r, jread_free);
}

static void jobfile_poll(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct fuse_pollhandle *ph)
{
	struct node *n = node_of(ino);
	struct jh *h = (struct jh *)(uintptr_t)fi->fh;
	struct job *j = n->job;
	mode_t mode = job_file_modes[n->which];
	unsigned revents = 0;
	enum job_state st;
	bool idle;

	if (ph)
		park_poll(job_queue(j), ph); /* before testing: no event is lost in between */
	st = job_state(j);
	idle = st == J_CREATED && !job_cmd_writers(j);
	if (n->which == JF_EXIT) {
		if (job_state_ended(st) || idle)
			revents = POLLIN | POLLRDNORM;
	} else if (n->which == JF_STDOUT || n->which == JF_STDERR) {
		if (job_state_ended(st) || idle ||
		    job_stream_size(j, n->which == JF_STDOUT ? JOB_STDOUT : JOB_STDERR) > h->pos)
			revents = POLLIN | POLLRDNORM;
	} else {
		revents = (mode & 0400 ? POLLIN | POLLRDNORM : 0) | (mode & 0200 ? POLLOUT | POLLWRNORM : 0);
	}
	fuse_reply_poll(req, revents);
}

/* ---- registration -------------------------------------------------------------------- */

static const struct fuse_lowlevel_ops jobs_ops = {
	.lookup = jobs_lookup,
	.getattr = jobfs_getattr,
	.setattr = jobfs_setattr,
	.mkdir = jobs_mkdir,
	.rmdir = jobs_rmdir,
	.opendir = jobfs_opendir,
	.readdir = vdir_readdir,
	.readdirplus = vdir_readdirplus,
	.releasedir = vdir_releasedir,
};

static const struct fuse_lowlevel_ops job_ops = {
	.lookup = job_lookup,
	.getattr = jobfs_getattr,
	.setattr = jobfs_setattr,
	.opendir = jobfs_opendir,
	.readdir = vdir_readdir,
	.readdirplus = vdir_readdirplus,
	.releasedir = vdir_releasedir,
};

static const struct fuse_lowlevel_ops jobfile_ops = {
	.getattr = jobfs_getattr,
	.setattr = jobfs_setattr,
	.open = jobfile_open,
	.read = jobfile_read,
	.write_buf = jobfile_write_buf,
	.flush = jobfile_flush,
	.fsync = jobfile_fsync,
	.release = jobfile_release,
	.poll = jobfile_poll,
};

static const struct node_kind_ops k_jobs = { .ops = &jobs_ops };
static const struct node_kind_ops k_job = { .ops = &job_ops, .on_free = job_node_free };
static const struct node_kind_ops k_jobfile = { .ops = &jobfile_ops, .on_free = job_node_free };

/* A job ended: what it changed in the sandbox's files must show at once. */
static void jobfs_on_end(struct sbx *s)
{
	data_inval_sbx(s);
	rfiles_inval_sbx(s);
}

int jobfs_init(void)
{
	node_kind_register(N_JOBS, &k_jobs);
	node_kind_register(N_JOB, &k_job);
	node_kind_register(N_JOBFILE, &k_jobfile);
	return job_init(jobfs_on_end);
}

void jobfs_shutdown(void)
{
	job_shutdown();
}
