/* SPDX-License-Identifier: MIT */
/*
 * acquire.c - the asynchronous acquire (see acquire.h): the create behind
 * an answered mkdir, and the requests that wait for it.
 *
 * Why: the kernel holds a directory's lock for the whole of a mkdir in it,
 * so a mkdir that waits for a slow create (seconds, remotely) stalls every
 * other mkdir and every lookup of a new name under the same user; no
 * daemon-side lock causes it, so only the interface can avoid it.  The
 * mkdir answers at once (sub-millisecond) and the wait moves inside the new
 * directory, where only those who use that sandbox wait for it.
 *
 * Why the wait is at the directory only: every node below it (data
 * directories, jobs/, control files) is reached by a lookup in it, and a
 * pending view has no inode below it that the kernel knows yet; so parking
 * the lookups (all but `id`, `status`, `ready`, which answer at once) and
 * the opendir of the directory holds back every operation inside.
 *
 * The bound: a waiter waits for the create, which has the lifecycle work
 * deadline (pool_work_timeout_ms: ready_timeout for the provider's
 * readiness wait plus its API calls) and ends with ETIMEDOUT past it; a
 * signal ends the wait at once (EINTR, the create goes on).
 */
#define _GNU_SOURCE
#include "acquire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../runtime/work.h"

#define ACQUIRE_READY_TEXT "ready\n"

/* One asynchronous create, owned by its work item from work_start on. */
struct acq {
	struct work w;   /* first: run() gets &a->w */
	struct sbx *s;   /* referenced, reserved (pool_reserve) */
	struct view *v;  /* referenced: the pending view the mkdir showed */
	char scope[NAMES_SCOPE_MAX];
};

/* A request waiting for a pending view. */
struct acq_wait {
	struct view *v; /* referenced */
	void (*again)(fuse_req_t req, void *arg);
	void *arg;
	void (*arg_free)(void *arg);
};

/* The create behind v failed with err: v dies, then its waiters get err.
 * From then on the directory is gone: the user's listing and a lookup of
 * the name say ENOENT, and so does a getattr of the directory (which is
 * never cached while it is creating: vtree_timeout), i.e. a stat and any
 * path through it that the kernel still resolves from its entry (it checks
 * the directory's permissions, default_permissions, with a getattr).  A new
 * mkdir of the name revalidates the entry (LOOKUP_EXCL) and works. */
static void acquire_failed(struct acq *a, int err)
{
	view_fail(a->s, a->v, err);
	park_drain(&a->v->ready_q, err);
}

/* Lifecycle work thread: the create; then the waiters run again, or get
 * the create's errno and the directory goes. */
static void acquire_run(struct work *w)
{
	struct acq *a = (struct acq *)w;
	int err = pool_acquire_reserved(a->s);
	struct view *cur;

	if (!err) {
		cur = view_current(a->s); /* adopts the pending view */
		if (cur != a->v && __atomic_load_n(&a->v->pending, __ATOMIC_ACQUIRE)) {
			log_warn(a->scope, "mkdir: the sandbox is ready but its directory was replaced");
			acquire_failed(a, EIO);
		} else {
			__atomic_add_fetch(&a->v->status_ver, 1, __ATOMIC_RELEASE);
			park_wake(&a->v->ready_q);
			log_info(a->scope, "sandbox ready (acquire: async)");
		}
		if (cur)
			view_put(cur);
	} else {
		log_err(a->scope, "create failed: %s: its directory goes, a waiter inside gets the error",
			strerror(err));
		acquire_failed(a, err);
	}
	view_put(a->v);
	pool_put(a->s);
	work_fini(w);
	free(a);
}

int acquire_start(const char *user, const char *thread, struct view **out)
{
	struct sbx *s = NULL;
	struct view *v;
	struct acq *a;
	int err;

	err = pool_reserve(user, thread, &s);
	if (err)
		return err;
	v = view_pending(s);
	a = v ? calloc(1, sizeof(*a)) : NULL;
	if (!a) {
		err = ENOMEM;
		goto fail;
	}
	a->s = s;
	a->v = v;
	view_get(v); /* the work's */
	snprintf(a->scope, sizeof(a->scope), "%s/%s", user, thread);
	work_init(&a->w, WORK_LIFECYCLE, s->token, pool_work_timeout_ms(), acquire_run);
	log_info(a->scope, "mkdir answered, create started (acquire: async)"); /* before: a is the work's then */
	err = work_start(&a->w);
	if (err) {
		work_fini(&a->w);
		view_put(v);
		free(a);
		goto fail;
	}
	*out = v;
	return 0;
fail:
	log_err(user, "mkdir %s: cannot start the create: %s", thread, strerror(err));
	if (v) {
		view_fail(s, v, err);
		park_drain(&v->ready_q, err);
		view_put(v);
	}
	pool_unreserve(s);
	return err;
}

/* The create's errno once v is no longer pending (0: ready). */
static int acquire_err(struct view *v)
{
	return __atomic_load_n(&v->ready_err, __ATOMIC_ACQUIRE);
}

static bool acquire_try(void *req, void *p)
{
	struct acq_wait *aw = p;
	int err;

	if (__atomic_load_n(&aw->v->pending, __ATOMIC_ACQUIRE))
		return false;
	err = acquire_err(aw->v);
	if (err)
		fuse_reply_err(req, err);
	else
		aw->again(req, aw->arg);
	return true;
}

static void acquire_wait_free(void *p)
{
	struct acq_wait *aw = p;

	if (aw->arg_free)
		aw->arg_free(aw->arg);
	view_put(aw->v);
	free(aw);
}

bool acquire_park(fuse_req_t req, struct view *v, void (*again)(fuse_req_t req, void *arg), void *arg,
	void (*arg_free)(void *arg))
{
	struct acq_wait *aw;
	int err = 0;

	if (!__atomic_load_n(&v->pending, __ATOMIC_ACQUIRE)) {
		err = acquire_err(v);
		if (!err)
			return false;
		goto answer;
	}
	aw = calloc(1, sizeof(*aw));
	if (!aw) {
		err = ENOMEM;
		goto answer;
	}
	aw->v = v;
	view_get(v);
	aw->again = again;
	aw->arg = arg;
	aw->arg_free = arg_free;
	park(&v->ready_q, req, acquire_try, aw, acquire_wait_free);
	return true;
answer:
	fuse_reply_err(req, err);
	if (arg_free)
		arg_free(arg);
	return true;
}

/* ---- the `ready` file ------------------------------------------------------- */

struct ready_read {
	struct view *v;
	size_t size;
	off_t off;
};

static void ready_reply(fuse_req_t req, struct view *v, size_t size, off_t off)
{
	static const char text[] = ACQUIRE_READY_TEXT;
	size_t len = sizeof(text) - 1;
	bool dead;

	lock_acquire(&fs_lock);
	dead = v->dead;
	fs_unlock();
	if (dead)
		return (void)fuse_reply_err(req, ENOENT); /* released */
	if (off < 0 || (size_t)off >= len)
		return (void)fuse_reply_buf(req, NULL, 0);
	fuse_reply_buf(req, text + off, len - (size_t)off < size ? len - (size_t)off : size);
}

static void ready_again(fuse_req_t req, void *arg)
{
	struct ready_read *r = arg;

	ready_reply(req, r->v, r->size, r->off);
}

void acquire_ready_open(fuse_req_t req, struct node *n, struct fuse_file_info *fi)
{
	int err;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		log_warn("namespace", "write to a read-only control file (ready) refused");
		return (void)fuse_reply_err(req, EPERM);
	}
	if (!n->view)
		return (void)fuse_reply_err(req, ENOENT);
	err = acquire_err(n->view);
	if (err)
		return (void)fuse_reply_err(req, err);
	fi->fh = 0;
	fi->direct_io = 1;
	fi->noflush = 1;
	fuse_reply_open(req, fi);
}

void acquire_ready_read(fuse_req_t req, struct node *n, size_t size, off_t off)
{
	struct ready_read *r = calloc(1, sizeof(*r));

	if (!r)
		return (void)fuse_reply_err(req, ENOMEM);
	r->v = n->view;
	r->size = size;
	r->off = off;
	if (acquire_park(req, n->view, ready_again, r, free))
		return;
	ready_reply(req, r->v, size, off);
	free(r);
}

void acquire_ready_poll(fuse_req_t req, struct node *n, struct fuse_pollhandle *ph)
{
	struct view *v = n->view;

	/* kept before the test, so an end in between is not missed */
	if (ph && __atomic_load_n(&v->pending, __ATOMIC_ACQUIRE)) {
		park_poll(&v->ready_q, ph);
		ph = NULL;
	}
	if (ph)
		fuse_pollhandle_destroy(ph);
	fuse_reply_poll(req, __atomic_load_n(&v->pending, __ATOMIC_ACQUIRE) ? 0 : POLLIN | POLLRDNORM);
}

unsigned acquire_status_poll(struct node *n, unsigned seen, struct fuse_pollhandle *ph)
{
	struct view *v = n->view;
	unsigned ev = POLLIN | POLLRDNORM;

	if (v && ph && __atomic_load_n(&v->pending, __ATOMIC_ACQUIRE)) {
		park_poll(&v->ready_q, ph);
		ph = NULL;
	}
	if (v && __atomic_load_n(&v->status_ver, __ATOMIC_ACQUIRE) != seen)
		ev |= POLLPRI;
	if (ph)
		fuse_pollhandle_destroy(ph);
	return ev;
}
