/* SPDX-License-Identifier: MIT */
/*
 * buf.h - bounded, growable byte buffers (after git's strbuf and curl's dynbuf).
 *
 * Every buffer has a mandatory cap chosen by its user (BUF_CAP_*), so a
 * runaway producer (a huge JSON document, a control-file write, a path)
 * fails with ENOMEM/E2BIG instead of exhausting the daemon.
 *
 * Invariants: b->ptr is NUL-terminated whenever b->len > 0 or after any
 * successful append; b->len <= b->max.  An append that fails frees the
 * buffer (b->ptr == NULL, b->len == 0) and returns -1 with errno set, so a
 * caller can keep appending and check once (curl's pattern).
 */
#ifndef SBX_BUF_H
#define SBX_BUF_H

#include <stdarg.h>
#include <stddef.h>

#define BUF_CAP_PATH 4096
#define BUF_CAP_CTL (64 * 1024)        /* one control-file read or write */
#define BUF_CAP_JSON (4 * 1024 * 1024) /* a status or metrics document */

struct buf {
	char *ptr;
	size_t len;
	size_t alloc;
	size_t max;
	int failed; /* sticky: an earlier append failed */
};

#define BUF_INIT(cap) { NULL, 0, 0, (cap), 0 }

void buf_init(struct buf *b, size_t max);
void buf_free(struct buf *b);
void buf_reset(struct buf *b);
/* Remove the first n bytes (all of them when n >= len), keeping the rest. */
void buf_drop(struct buf *b, size_t n);
__attribute__((warn_unused_result)) int buf_add(struct buf *b, const void *p, size_t n);
__attribute__((warn_unused_result)) int buf_adds(struct buf *b, const char *s);
__attribute__((warn_unused_result, format(printf, 2, 3))) int buf_addf(struct buf *b, const char *fmt, ...);
__attribute__((warn_unused_result)) int buf_vaddf(struct buf *b, const char *fmt, va_list ap);
/* Join path components with '/' (no duplicate separators). */
__attribute__((warn_unused_result)) int buf_addpath(struct buf *b, const char *component);
/* The string so far ("" for an empty buffer); valid until the next append. */
const char *buf_str(const struct buf *b);
/* Transfer ownership of the bytes to the caller (malloc'd, NUL-terminated). */
char *buf_take(struct buf *b, size_t *len);

/* Format into a fixed array, failing (-1, ENAMETOOLONG) instead of truncating. */
__attribute__((warn_unused_result, format(printf, 3, 4))) int str_fmt(char *dst, size_t size, const char *fmt, ...);

#endif
