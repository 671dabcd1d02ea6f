/* SPDX-License-Identifier: MIT */
/*
 * layout.c - the one place that knows how a state_dir is laid out (see
 * layout.h), so the pool, the providers and the FUSE layer never spell a
 * path of their own.
 */
#define _GNU_SOURCE
#include "layout.h"

#include <errno.h>
#include <unistd.h>

#include "util.h"

static const char *layout_names[LAYOUT_DIR_COUNT] = { "user-data/workspace", "user-data/uploads",
	"user-data/outputs", "skills", "jobs" };
static const char *layout_sandbox[LAYOUT_DIR_COUNT] = { "/mnt/user-data/workspace", "/mnt/user-data/uploads",
	"/mnt/user-data/outputs", NULL, NULL };

int layout_users_dir(struct buf *b, const char *state_dir)
{
	return buf_addf(b, "%s/users", state_dir);
}

int layout_user_dir(struct buf *b, const char *state_dir, const char *user)
{
	return buf_addf(b, "%s/users/%s", state_dir, user);
}

int layout_threads_dir(struct buf *b, const char *state_dir, const char *user)
{
	return buf_addf(b, "%s/users/%s/threads", state_dir, user);
}

int layout_thread_dir(struct buf *b, const char *state_dir, const char *user, const char *thread)
{
	return buf_addf(b, "%s/users/%s/threads/%s", state_dir, user, thread);
}

int layout_dir(struct buf *b, const char *thread_dir, enum layout_dir d)
{
	return buf_addf(b, "%s/%s", thread_dir, layout_names[d]);
}

int layout_file(struct buf *b, const char *thread_dir, const char *name)
{
	return buf_addf(b, "%s/%s", thread_dir, name);
}

const char *layout_sandbox_path(enum layout_dir d)
{
	return (unsigned)d < LAYOUT_DIR_COUNT ? layout_sandbox[d] : NULL;
}

int layout_make_data_dirs(const char *thread_dir, uid_t uid, gid_t gid)
{
	static const enum layout_dir dirs[] = { LAYOUT_WORKSPACE, LAYOUT_UPLOADS, LAYOUT_OUTPUTS, LAYOUT_SKILLS };
	int r = 0;

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]) && !r; i++) {
		struct buf p = BUF_INIT(BUF_CAP_PATH);

		r = layout_dir(&p, thread_dir, dirs[i]) || util_mkdir_p(p.ptr, 0755) || chown(p.ptr, uid, gid) ? -1 : 0;
		buf_free(&p);
	}
	return r;
}
