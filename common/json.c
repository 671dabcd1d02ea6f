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


json_t *json_read_file(const char *path)
{
	struct buf text = BUF_INIT(JSON_FILE_CAP);
	json_t *o = NULL;

	if (!util_read_file(path, &text))
		o = json_loadb(buf_str(&text), text.len, 0, NULL);
	buf_free(&text);
	return o;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len;
	unsigned cp;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0)
		len = 2, cp = s[0] & 0x1f;
	else if ((s[0] & 0xf0) == 0xe0)
		len = 3, cp = s[0] & 0x0f;
	else if ((s[0] & 0xf8) == 0xf0)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

json_t *json_string_lossy(const char *s, size_t len)
{
	struct buf b = BUF_INIT(len * 3 + 16);
	const unsigned char *p = (const unsigned char *)s;
	json_t *o = NULL;

	for (size_t i = 0; i < len;) {
		size_t n = p[i] ? utf8_seq(p + i, len - i) : 0;
		if (n ? buf_add(&b, p + i, n) : buf_adds(&b, "\xef\xbf\xbd"))
			return NULL;
		i += n ? n : 1;
	}
	o = json_stringn(b.ptr ? b.ptr : "", b.len);
	buf_free(&b);
	return o;
}
