/* SPDX-License-Identifier: MIT */
/*
 * json.c - JSON documents to and from the daemon's buffers and state files.
 * jansson does the work; this only fixes the format (indent 2, key order as
 * built) and the size cap of a state file in one place.
 */
#include "json.h"

#include <stdlib.h>

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
