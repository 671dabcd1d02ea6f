/* SPDX-License-Identifier: MIT */
/*
 * buf.c - bounded buffers.  The only place that grows memory for strings,
 * paths and documents, so every cap is enforced in one spot.
 */
#include "buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(struct buf *b, size_t max)
{
	b->ptr = NULL;
	b->len = b->alloc = 0;
	b->max = max;
	b->failed = 0;
}

void buf_free(struct buf *b)
{
	free(b->ptr);
	b->ptr = NULL;
	b->len = b->alloc = 0;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	b->failed = 0;
	if (b->ptr)
		b->ptr[0] = '\0';
}

void buf_drop(struct buf *b, size_t n)
{
	if (n >= b->len) {
		buf_reset(b);
		return;
	}
	memmove(b->ptr, b->ptr + n, b->len - n);
	b->len -= n;
	b->ptr[b->len] = '\0';
}

static int buf_fail(struct buf *b, int err)
{
	buf_free(b);
	b->failed = 1;
	errno = err;
	return -1;
}

static int buf_grow(struct buf *b, size_t extra)
{
	size_t need, n;
	char *p;

	if (b->failed)
		return buf_fail(b, ENOMEM);
	if (extra > b->max || b->len + extra > b->max)
		return buf_fail(b, E2BIG);
	need = b->len + extra + 1;
	if (need <= b->alloc)
		return 0;
	n = b->alloc ? b->alloc : 64;
	while (n < need)
		n *= 2;
	if (n > b->max + 1)
		n = b->max + 1;
	p = realloc(b->ptr, n);
	if (!p)
		return buf_fail(b, ENOMEM);
	b->ptr = p;
	b->alloc = n;
	return 0;
}

int buf_add(struct buf *b, const void *p, size_t n)
{
	if (buf_grow(b, n))
		return -1;
	if (n)
		memcpy(b->ptr + b->len, p, n);
	b->len += n;
	b->ptr[b->len] = '\0';
	return 0;
}

int buf_adds(struct buf *b, const char *s)
{
	return buf_add(b, s, strlen(s));
}

int buf_vaddf(struct buf *b, const char *fmt, va_list ap)
{
	va_list cp;
	int n;

	va_copy(cp, ap);
	n = vsnprintf(NULL, 0, fmt, cp);
	va_end(cp);
	if (n < 0)
		return buf_fail(b, EINVAL);
	if (buf_grow(b, (size_t)n))
		return -1;
	vsnprintf(b->ptr + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int buf_addf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = buf_vaddf(b, fmt, ap);
	va_end(ap);
	return r;
}

int buf_addpath(struct buf *b, const char *component)
{
	while (*component == '/' && b->len && b->ptr[b->len - 1] == '/')
		component++;
	if (b->len && b->ptr[b->len - 1] != '/' && *component != '/')
		if (buf_add(b, "/", 1))
			return -1;
	return buf_adds(b, component);
}

const char *buf_str(const struct buf *b)
{
	return b->ptr ? b->ptr : "";
}

char *buf_take(struct buf *b, size_t *len)
{
	char *p = b->ptr;

	if (!p)
		p = calloc(1, 1);
	if (len)
		*len = b->len;
	b->ptr = NULL;
	b->len = b->alloc = 0;
	return p;
}

int str_fmt(char *dst, size_t size, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(dst, size, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= size) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}
