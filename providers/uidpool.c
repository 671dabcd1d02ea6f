/* SPDX-License-Identifier: MIT */
/*
 * uidpool.c - host uids of sandboxes (see uidpool.h): a bitmap over the
 * configured range, seeded from every thread's record at start.
 */
#define _GNU_SOURCE
#include "uidpool.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/layout.h"
#include "../common/log.h"
#include "../common/names.h"
#include "../common/util.h"

struct uidpool {
	pthread_mutex_t lock;
	uid_t base;
	unsigned count;
	unsigned char *used; /* protected by lock */
};

struct uidpool *uidpool_new(uid_t base, unsigned count)
{
	struct uidpool *p = calloc(1, sizeof(*p));

	if (!p || !(p->used = calloc(count / 8 + 1, 1))) {
		free(p);
		return NULL;
	}
	pthread_mutex_init(&p->lock, NULL);
	p->base = base;
	p->count = count;
	return p;
}

void uidpool_free(struct uidpool *p)
{
	if (!p)
		return;
	pthread_mutex_destroy(&p->lock);
	free(p->used);
	free(p);
}

/* Caller holds p->lock. */
static void uidpool_mark_locked(struct uidpool *p, uid_t uid)
{
	if (uid >= p->base && uid - p->base < p->count)
		p->used[(uid - p->base) / 8] |= (unsigned char)(1u << ((uid - p->base) % 8));
}

int uidpool_recorded(const char *thread_dir, uid_t *uid, gid_t *gid)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH), text = BUF_INIT(256);
	unsigned long u, g;
	int r = -1;

	if (!layout_file(&path, thread_dir, "uid") && !util_read_file(path.ptr, &text) &&
	    sscanf(buf_str(&text), "%lu:%lu", &u, &g) == 2) {
		*uid = (uid_t)u;
		*gid = (gid_t)g;
		r = 0;
	}
	buf_free(&path);
	buf_free(&text);
	return r;
}

static void uidpool_scan_user(struct uidpool *p, const char *state_dir, const char *user)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH), td = BUF_INIT(BUF_CAP_PATH);
	struct dirent *t;
	DIR *threads;

	if (layout_threads_dir(&path, state_dir, user) || !(threads = opendir(path.ptr))) {
		buf_free(&path);
		return;
	}
	while ((t = readdir(threads))) {
		uid_t uid;
		gid_t gid;

		buf_reset(&td);
		if (names_valid(t->d_name) && !layout_thread_dir(&td, state_dir, user, t->d_name) &&
		    !uidpool_recorded(td.ptr, &uid, &gid)) {
			pthread_mutex_lock(&p->lock);
			uidpool_mark_locked(p, uid);
			pthread_mutex_unlock(&p->lock);
		}
	}
	closedir(threads);
	buf_free(&path);
	buf_free(&td);
}

void uidpool_scan(struct uidpool *p, const char *state_dir)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct dirent *u;
	DIR *users;

	if (layout_users_dir(&path, state_dir) || !(users = opendir(path.ptr))) {
		buf_free(&path);
		return;
	}
	while ((u = readdir(users)))
		if (names_valid(u->d_name))
			uidpool_scan_user(p, state_dir, u->d_name);
	closedir(users);
	buf_free(&path);
}

/* A free uid of the range, marked taken; 0 or ENOSPC. */
static int uidpool_take(struct uidpool *p, uid_t *uid)
{
	unsigned i;

	pthread_mutex_lock(&p->lock);
	for (i = 0; i < p->count; i++)
		if (!(p->used[i / 8] & (1u << (i % 8))))
			break;
	if (i < p->count)
		uidpool_mark_locked(p, p->base + i);
	pthread_mutex_unlock(&p->lock);
	if (i == p->count)
		return ENOSPC;
	*uid = p->base + i;
	return 0;
}

int uidpool_assign(struct uidpool *p, const struct sbx_config *cfg, const char *user, const char *thread_dir,
	uid_t *uid, gid_t *gid)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH), text = BUF_INIT(64);
	int r = config_user_lookup(cfg, user, uid, gid), err = 0;

	if (r < 0)
		return EACCES;
	if (r == 1 && uidpool_recorded(thread_dir, uid, gid)) {
		err = uidpool_take(p, uid);
		if (err) {
			log_err("pool", "no free uid left in the range %u..%u", (unsigned)p->base,
				(unsigned)p->base + p->count - 1);
			return err;
		}
		*gid = *uid;
	}
	if (util_mkdir_p(thread_dir, 0700) || layout_file(&path, thread_dir, "uid") ||
	    buf_addf(&text, "%u:%u\n", (unsigned)*uid, (unsigned)*gid) ||
	    util_write_new(path.ptr, text.ptr, text.len, 0600)) {
		log_err("pool", "cannot record the uid in %s: %s", thread_dir, strerror(errno));
		err = EIO;
	}
	buf_free(&path);
	buf_free(&text);
	return err;
}
