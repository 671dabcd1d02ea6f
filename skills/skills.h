/* SPDX-License-Identifier: MIT */
/*
 * skills.h - the skill projection's sync engine (DESIGN §8): every sandbox's
 * skills/ is a host tree under state_dir; a provider that mounts it
 * (sbx_provider_ops.skills == NULL) shows every change at once, and one
 * that cannot (opensandbox, aio base_url) gets it uploaded.
 *
 * The FUSE layer tells the engine what happens under skills/ (a closed
 * written file, unlink, rename, mkdir, rmdir, symlink, setattr:
 * skills_changed) and asks it about limits before a change
 * (skills_check_*).  Each change bumps the sandbox's generation_written.
 * For upload providers a debounced sync then scans the tree into a
 * manifest (manifest.h), diffs it against the manifest the sandbox last
 * received, uploads what changed and removes what went; one sync at a time
 * per sandbox, run with the scope lock held (pool_scoped: never beside an
 * acquire, release or destroy), re-run when changes came during it.  A
 * successful sync sets generation_synced to the generation it started
 * from.  For mount providers generation_synced follows generation_written
 * at once.
 *
 * fsync(2) under skills/ is answered once generation_synced reaches the
 * generation of the fsync, or with the error of the sync that covered it:
 * skills_wait_begin says what to wait for ("wait for generation N"),
 * skills_wait_result whether it came, and the sandbox's park queue is woken
 * at the end of every sync; the FUSE layer parks the request on it and
 * answers (fs/skillsfs.c): no worker waits, and skills/ knows no FUSE.
 *
 * Lifecycle (pool hooks): up after a create copies the optional
 * skills.path library into the tree (never hard links) and, for upload
 * providers, syncs everything before mkdir returns; after an adoption the
 * manifest persisted under state_dir (if it is this remote sandbox's) is
 * the starting point, so a restart uploads only what changed meanwhile.
 * release (rmdir) runs what is pending before the sandbox is parked; down
 * forgets the sandbox's manifest (a new sandbox starts empty).
 *
 * Threads and locks: the engine's lock (one mutex, a leaf: never held
 * across a call out, a scan, a reply or park_wake) protects every
 * sandbox's counters; a sync runs on a work thread (or in a pool hook)
 * with the scope lock held and no other; a timer thread submits syncs when
 * their debounce ends.  The FUSE entry points never block on the network.
 */
#ifndef SBX_SKILLS_H
#define SBX_SKILLS_H

#include <stdbool.h>
#include <stdint.h>

struct sbx;

struct skills_stats {
	uint64_t syncs;          /* syncs that ended (successful or not) */
	uint64_t sync_failures;  /* of which failed */
	uint64_t files_uploaded; /* files (and links) uploaded */
	uint64_t bytes_uploaded;
	uint64_t removed;        /* paths removed from sandboxes */
};

/* Add the pool hooks and start the timer thread (before pool_init: adopted
 * sandboxes go through the hooks).  0 or errno. */
int skills_init(void);
/* Shutdown, before work_shutdown(): submit every pending sync now and stop
 * the timer; work_shutdown() then waits for them (DESIGN §4: drain skill
 * syncs before destroying). */
void skills_drain(void);
/* After pool_shutdown(): answer parked fsyncs, free everything. */
void skills_shutdown(void);

/* Something under s's skills/ changed (FUSE workers; never blocks). */
void skills_changed(struct sbx *s);
/* Before adding a file or symlink (create, mknod, symlink), or a directory
 * (dir): 0 or ENOSPC (skills.max_files, counted for files and for
 * directories apart). */
int skills_check_add(struct sbx *s, bool dir);
/* Before a file grows from old_size to new_size bytes (write, truncate,
 * fallocate): 0, EFBIG (one file's limit) or ENOSPC (all files'). */
int skills_check_grow(struct sbx *s, uint64_t old_size, uint64_t new_size);
/* Before symlink(2) in a directory of s's skills/ (its host O_PATH fd):
 * 0, or EPERM when target is absolute or leaves skills/. */
int skills_check_symlink(struct sbx *s, int dir_fd, const char *target);
/* An fsync of a file (wrote: through a writable handle) or a directory
 * under s's skills/: 0 when it may be answered 0 now (*out NULL); 0 with
 * *out (a wait for the generation written now, freed with
 * skills_wait_free) and *q (the sandbox's queue, woken at each sync's end)
 * to wait on; or ENOMEM.  Never blocks. */
struct skills_wait;
struct park_queue;
int skills_wait_begin(struct sbx *s, bool wrote, struct skills_wait **out, struct park_queue **q);
/* -1: not yet; else the fsync's answer: 0, or the error of a sync begun
 * after the wait began that covered its generation. */
int skills_wait_result(const struct skills_wait *w);
void skills_wait_free(void *w);

void skills_stats(struct skills_stats *st);

#endif
