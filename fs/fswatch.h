/* SPDX-License-Identifier: MIT */
/*
 * fswatch.h - change notifications for the kernel's caches of data files
 * (issue 23): a fanotify watcher of the data directories the kernel knows,
 * which turns each change a sandbox makes from inside into an invalidation
 * of the kernel's entry, attributes and pages at once, so data entries and
 * attributes may be cached for minutes (cache_timeout) instead of seconds.
 *
 * Where a sandbox cannot be watched (no fanotify, a mark refused, its
 * directory cap reached) or the watcher lost events (queue overflow), its
 * data falls back to the short timeouts of before (data.c) and its status
 * says why (fswatch_state).
 */
#ifndef SBX_FSWATCH_H
#define SBX_FSWATCH_H

#include <stdbool.h>
#include <sys/stat.h>

#include "node.h"

/* What the watcher calls to make the kernel forget (data.c's, given by
 * main.c: this module does not name data.c), each with no lock held.
 * inval_dirent/inval_file return how many notifications they sent. */
struct fswatch_hooks {
	/* name changed in the directory (ddev, dino) of v */
	int (*inval_dirent)(struct view *v, dev_t ddev, ino_t dino, const char *name);
	/* the file (dev, ino) of v changed; its pages too when data */
	int (*inval_file)(struct view *v, dev_t dev, ino_t ino, bool data);
	/* everything the kernel caches of s's data (events were lost) */
	void (*inval_sbx)(struct sbx *s);
};

/* At start, before the session serves: open the fanotify group and start
 * the watcher thread; off (logged) when cache_timeout is 0 or fanotify
 * cannot serve.  fswatch_shutdown() before the session is destroyed. */
void fswatch_init(const char *state_dir, long cache_timeout, const struct fswatch_hooks *hooks);
void fswatch_shutdown(void);

/* A data directory of v (fd: its O_PATH descriptor, st: its stat) is about
 * to be known to the kernel: watch it.  No lock held; a failure only puts v
 * back on the short timeouts. */
void fswatch_dir(struct view *v, int fd, const struct stat *st);
/* v was released: its watches go (done by the watcher thread). */
void fswatch_view_dead(struct view *v);

/* Whether v's data may be cached long now. */
bool fswatch_long(struct view *v);
/* "long", or "short (WHY)": for a sandbox's status. */
const char *fswatch_state(struct view *v);

struct fswatch_stats {
	bool on;
	long dirs;           /* directories watched */
	unsigned long long events, invals, overflows;
};
void fswatch_stats(struct fswatch_stats *st);

#endif
