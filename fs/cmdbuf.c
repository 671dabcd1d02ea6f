/* SPDX-License-Identifier: MIT */
/*
 * cmdbuf.c - the bytes one open cmd file collects (jobfs.c's handle),
 * appended by WRITEs and taken once by the FLUSH or FSYNC that starts the
 * job.  Its own module, free of FUSE, so the unit tests (and their
 * ThreadSanitizer build) can race writers against a taker.
 */
#include <errno.h>

#include "cmdbuf.h"

void cmdbuf_init(struct cmdbuf *c, size_t max)
{
	lock_init(&c->lock);
	buf_init(&c->bytes, max);
	c->closed = false;
}

void cmdbuf_release(struct cmdbuf *c)
{
	buf_free(&c->bytes);
	lock_destroy(&c->lock);
}

int cmdbuf_append(struct cmdbuf *c, const void *p, size_t n)
{
	int err = 0;

	lock_acquire(&c->lock);
	if (c->closed) {
		err = EBUSY;
	} else if (buf_add(&c->bytes, p, n)) {
		buf_init(&c->bytes, c->bytes.max); /* buf_add freed it */
		c->closed = true;                   /* a truncated command must never run */
		err = EFBIG;
	}
	lock_release(&c->lock);
	return err;
}

char *cmdbuf_take(struct cmdbuf *c, size_t *len)
{
	char *bytes = NULL;

	*len = 0;
	lock_acquire(&c->lock);
	if (!c->closed && c->bytes.len) {
		c->closed = true;
		bytes = buf_take(&c->bytes, len);
	}
	lock_release(&c->lock);
	return bytes;
}
