/* SPDX-License-Identifier: MIT */
/*
 * netfs.c - `events` and `network` of a sandbox directory (see netfs.h).
 *
 * Why one event per open: `cat events` is how a person or an agent asks
 * "what is waiting for me?", and it has to end; a reader that wants the
 * next one opens again (or polls first).  The claimed line is kept in the
 * open file's state, shared with a parked read, so a reader with a small
 * buffer gets the rest of its line and never loses an event it claimed.
 */
#define _GNU_SOURCE
#include "netfs.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"
#include "../net/net.h"
#include "handle.h"
#include "fspark.h"

#define NETFS_CMD_MAX 4096 /* one command is ~50 bytes */

/* What an open of events has claimed; shared with its parked reads. */
struct evh {
	int refs; /* atomic: the handle and each parked read */
	pthread_mutex_t lock;
	struct net_sbx *ns; /* referenced, NULL when the sandbox has no network state */
	struct view *v;     /* referenced: rmdir (v->dead) ends a wait */
	struct buf line;    /* protected by lock */
	bool delivered;     /* protected by lock */
};

struct nh {
	struct evh *ev;  /* events */
	struct buf snap; /* network: the snapshot taken at open */
};

bool netfs_owns(const struct node *n)
{
	return n->kind == N_CTL && (n->which == CTL_EVENTS || n->which == CTL_NETWORK);
}

mode_t netfs_mode(const struct node *n)
{
	return S_IFREG | (n->which == CTL_NETWORK ? 0644 : 0444);
}

static void evh_put(struct evh *h)
{
	if (!h || __atomic_sub_fetch(&h->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	net_put(h->ns);
	view_put(h->v);
	buf_free(&h->line);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

static void nh_clean(void *p)
{
	struct nh *h = p;

	evh_put(h->ev);
	buf_free(&h->snap);
}

void netfs_open(fuse_req_t req, struct node *n, struct fuse_file_info *fi)
{
	int acc = fi->flags & O_ACCMODE;
	struct nh *h;

	if (n->which == CTL_EVENTS && acc != O_RDONLY)
		return (void)fuse_reply_err(req, EACCES);
	if (!n->view || n->view->dead)
		return (void)fuse_reply_err(req, ENOENT);
	h = handle_alloc(sizeof(*h), nh_clean);
	if (!h)
		return (void)fuse_reply_err(req, ENOMEM);
	buf_init(&h->snap, BUF_CAP_JSON);
	if (n->which == CTL_EVENTS) {
		h->ev = calloc(1, sizeof(*h->ev));
		if (!h->ev) {
			handle_discard(h);
			return (void)fuse_reply_err(req, ENOMEM);
		}
		h->ev->refs = 1;
		pthread_mutex_init(&h->ev->lock, NULL);
		buf_init(&h->ev->line, BUF_CAP_CTL);
		h->ev->ns = net_get(n->view->sbx);
		h->ev->v = n->view;
		view_get(n->view);
	} else if (acc != O_WRONLY && net_render(n->view->sbx, &h->snap)) {
		handle_discard(h);
		return (void)fuse_reply_err(req, EIO);
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1;
	fi->noflush = 1;
	fi->nonseekable = n->which == CTL_EVENTS;
	fuse_reply_open(req, fi);
}

static bool view_dead(struct view *v)
{
	bool dead;

	lock_acquire(&fs_lock);
	dead = v->dead;
	fs_unlock();
	return dead;
}

struct evread {
	struct evh *h; /* referenced */
	size_t size;
	off_t off;
};

/* Answer the read if it can be answered now. */
static bool ev_try(void *reqp, void *arg)
{
	fuse_req_t req = reqp;
	struct evread *r = arg;
	struct evh *h = r->h;
	char copy[BUF_CAP_CTL > 2048 ? 2048 : BUF_CAP_CTL];
	size_t len = 0;
	int err = 0;

	pthread_mutex_lock(&h->lock);
	if (!h->delivered) {
		if (!net_events_live(h->ns)) {
			h->delivered = true; /* nothing ever comes: an empty file */
		} else if (view_dead(h->v)) {
			err = ENOENT;
		} else {
			int e = net_consume(h->ns, &h->line);
			if (e == ENOENT) {
				pthread_mutex_unlock(&h->lock);
				return false;
			}
			if (e)
				err = e;
			else
				h->delivered = true;
		}
	}
	if (!err && (size_t)r->off < h->line.len) {
		len = h->line.len - (size_t)r->off;
		if (len > r->size)
			len = r->size;
		if (len > sizeof(copy))
			len = sizeof(copy);
		memcpy(copy, h->line.ptr + r->off, len);
	}
	pthread_mutex_unlock(&h->lock);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, copy, len);
	return true;
}

static void evread_free(void *arg)
{
	struct evread *r = arg;

	evh_put(r->h);
	free(r);
}

void netfs_read(fuse_req_t req, struct node *n, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct nh *h = (struct nh *)(uintptr_t)fi->fh;
	struct evread stack = { .size = size, .off = off }, *r;

	if (n->which == CTL_NETWORK) {
		if ((size_t)off >= h->snap.len)
			return (void)fuse_reply_buf(req, NULL, 0);
		return (void)fuse_reply_buf(req, h->snap.ptr + off,
			h->snap.len - (size_t)off < size ? h->snap.len - (size_t)off : size);
	}
	stack.h = h->ev;
	if (ev_try(req, &stack))
		return;
	if (fi->flags & O_NONBLOCK)
		return (void)fuse_reply_err(req, EAGAIN);
	r = malloc(sizeof(*r));
	if (!r)
		return (void)fuse_reply_err(req, ENOMEM);
	*r = stack;
	__atomic_add_fetch(&r->h->refs, 1, __ATOMIC_RELAXED);
	park(net_queue(h->ev->ns), req, ev_try, r, evread_free);
}

void netfs_poll(fuse_req_t req, struct node *n, struct fuse_file_info *fi, struct fuse_pollhandle *ph)
{
	struct nh *h = (struct nh *)(uintptr_t)fi->fh;
	struct evh *e = h->ev;
	unsigned revents = POLLIN | POLLRDNORM;

	if (n->which == CTL_NETWORK) {
		if (ph)
			fuse_pollhandle_destroy(ph);
		return (void)fuse_reply_poll(req, POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM);
	}
	if (ph && e->ns)
		park_poll(net_queue(e->ns), ph); /* before testing: no event is lost in between */
	else if (ph)
		fuse_pollhandle_destroy(ph);
	pthread_mutex_lock(&e->lock);
	if (!e->delivered && net_events_live(e->ns) && !net_pending(e->ns) && !view_dead(e->v))
		revents = 0;
	pthread_mutex_unlock(&e->lock);
	fuse_reply_poll(req, revents);
}

void netfs_write(fuse_req_t req, struct node *n, struct fuse_bufvec *in, struct fuse_file_info *fi)
{
	size_t size = fuse_buf_size(in);
	struct fuse_bufvec dst = FUSE_BUFVEC_INIT(size);
	char *mem;
	ssize_t got;
	int err;

	(void)fi;
	if (n->which != CTL_NETWORK)
		return (void)fuse_reply_err(req, EBADF);
	if (size > NETFS_CMD_MAX) {
		log_warn(n->view->sbx->token, "network: a %zu-byte write refused (one command per write)", size);
		return (void)fuse_reply_err(req, EINVAL);
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
	err = net_command(n->view->sbx, mem, (size_t)got);
	free(mem);
	if (err)
		return (void)fuse_reply_err(req, err);
	fuse_reply_write(req, (size_t)got);
}

void netfs_release(fuse_req_t req, struct node *n, struct fuse_file_info *fi)
{
	(void)n;
	handle_retire((void *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

void netfs_released(struct sbx *s)
{
	net_wake(s);
}
