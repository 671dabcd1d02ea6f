/* SPDX-License-Identifier: MIT */
/*
 * json.c - JSON documents to and from the daemon's buffers and state files.
 * jansson does the work; this only fixes the format (indent 2, key order as
 * built) and the size cap of a state file in one place.
 */
#include "json.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define JSON_FILE_CAP (1024 * 1024)

int json_to_buf(json_t *o, struct buf *out)
{
	char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
	int r = -1;

	json_decref(o);
	if (text)
		r = buf_adds(out, text) || buf_adds(out, "\n") ? -1 : 0;
	free(text);
	return r;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t json_utf8_len(const unsigned char *p)
{
	unsigned c = p[0], n, min, cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2, min = 0x80, cp = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, min = 0x800, cp = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, min = 0x10000, cp = c & 0x07;
	else
		return 0;
	for (unsigned i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

json_t *json_string_lossy(const char *s)
{
	struct buf b = BUF_INIT(4 * strlen(s) + 1);
	const unsigned char *p = (const unsigned char *)s;
	json_t *o = NULL;

	while (*p) {
		size_t n = json_utf8_len(p);
		if (n ? buf_add(&b, p, n) : buf_add(&b, "\xef\xbf\xbd", 3))
			break;
		p += n ? n : 1;
	}
	if (!b.failed)
		o = json_stringn(b.ptr ? b.ptr : "", b.len);
	buf_free(&b);
	return o;
}

json_t *json_read_file(const char *path)
{
	struct buf text = BUF_INIT(JSON_FILE_CAP);
	json_t *o = NULL;

	if (!util_read_file(path, &text))
		o = json_loadb(buf_str(&text), text.len, 0, NULL);
	buf_free(&text);
	return o;
}
