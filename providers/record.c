/* SPDX-License-Identifier: MIT */
/*
 * record.c - providers' JSON records on the host (see record.h).  Written
 * once here because docker.c, aio_remote.c, opensandbox.c, aio.c and
 * opensandbox_jobs.c each had the same dump, path and atomic write.
 */
#include "record.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../common/json.h"
#include "../common/util.h"

int record_save(const char *dir, const char *name, const json_t *rec)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	char *text = json_dumps(rec, JSON_COMPACT);
	int r = -1;

	if (text && !buf_addf(&p, "%s/%s", dir, name))
		r = util_write_atomic(p.ptr, text, strlen(text), 0600);
	free(text);
	buf_free(&p);
	return r;
}

json_t *record_load(const char *dir, const char *name)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	json_t *o = buf_addf(&p, "%s/%s", dir, name) ? NULL : json_read_file(p.ptr);

	buf_free(&p);
	return o;
}

void record_remove(const char *dir, const char *name)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);

	if (!buf_addf(&p, "%s/%s", dir, name))
		unlink(p.ptr);
	buf_free(&p);
}
