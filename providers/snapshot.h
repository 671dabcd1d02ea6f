/* SPDX-License-Identifier: MIT */
/*
 * snapshot.h - the snapshot engine (DESIGN §3 snapshots/, §4 Snapshots): a
 * thread's data directories (workspace, uploads, outputs) copied into
 * thread_dir/snapshots/<name>/ as cheaply as the file system allows, and
 * made live again by a restore that is finished at the next start when a
 * crash cut it short.  Files only: no FUSE, no pool, no provider.  Whoever
 * calls it (providers/sbxsnap.c) freezes the sandbox around the one step
 * that needs it, through the callbacks of struct snap_freeze.
 *
 * On disk (layout.h):
 *   thread_dir/snapshots/<name>/info.json   what `info` shows (JSON), and
 *                                           the thread's uid:gid when taken
 *   thread_dir/snapshots/<name>/manifest    per regular file: the live
 *                                           file's dev, ino, size, mtime,
 *                                           ctime when copied, and its path
 *                                           (NUL-terminated records)
 *   thread_dir/snapshots/<name>/data/{workspace,uploads,outputs}/
 *                                           the copies: directories,
 *                                           files, symlinks, FIFOs and
 *                                           sockets with owner, mode,
 *                                           times and xattrs
 *   thread_dir/snapshots/.tmp-<name>/       a snapshot being taken
 *   thread_dir/snapshots/.del-<name>.<n>/   a snapshot being removed
 *   thread_dir/restore.json                 the journal of a restore in
 *                                           progress into this thread
 *
 * How a file is copied: FICLONE (a reflink: shares every block) where the
 * file system can; else, when the live file is unchanged since the
 * thread's previous snapshot (same dev, inode, size, mtime and ctime as
 * that snapshot's manifest records), a hard link to the previous
 * snapshot's copy (snapshots are never written, so sharing between them
 * is safe; a snapshot is never linked to a live file, which a job may
 * change in place); else copy_file_range over the file's data extents
 * (SEEK_DATA/SEEK_HOLE: a sparse file stays sparse).  Device nodes are
 * counted and left out; FIFOs and sockets are made anew, never opened.
 *
 * Hostile content: the live directories are the sandbox's.  Every step in
 * them is an *at() call on a directory fd opened with O_NOFOLLOW; a file is
 * opened O_PATH first and read only once fstat says it is a regular file;
 * nothing is followed, opened for writing or created through a name the
 * sandbox controls except by O_EXCL and rename (common/udir.h's rules).
 *
 * Errors: 0 or an errno, logged with the thread's scope:
 *   EINVAL a bad name; EEXIST the name is taken; ENOENT no such snapshot;
 *   EDQUOT max snapshots reached; EBUSY a snapshot in use (restore) or a
 *   file a job holds a lease on; ELOOP a tree deeper than SNAP_MAX_DEPTH;
 *   ENOSPC, EIO, ENOMEM as the host said.
 *
 * Threading: every function may run on any thread.  The caller
 * serialises takes and restores of one thread (the sandbox's scope lock);
 * the engine's own lock (a leaf) guards the list of snapshots a restore is
 * reading, which rmdir refuses (EBUSY).
 */
#ifndef SBX_SNAPSHOT_H
#define SBX_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/buf.h"

#define SNAP_MAX_DEPTH 64 /* directory levels under a data directory */

/* What a take or a restore did. */
struct snap_stats {
	uint64_t files, dirs, symlinks, specials; /* specials: FIFOs and sockets */
	uint64_t skipped;      /* device nodes: never copied */
	uint64_t bytes;        /* of regular files */
	uint64_t bytes_shared; /* of files that share blocks: reflinked, or hard-linked to the previous snapshot */
	uint64_t bytes_copied; /* of files copied */
	uint64_t reflinked, linked, copied, kept; /* files by how they got there (kept: unchanged in place) */
	uint64_t removed;      /* restore: entries of the live tree that the snapshot does not have */
};

/* How the engine freezes the sandbox for the consistent pass of a take. */
struct snap_freeze {
	int (*freeze)(void *arg); /* 0 or an errno (the take fails with it) */
	void (*thaw)(void *arg);
	void *arg;
};

struct snap_result {
	struct snap_stats st;
	double freeze_s; /* how long the sandbox was frozen */
	double took_s;
	char prev[72];   /* the snapshot unchanged files were linked to, "" */
};

struct snap_take;

/* A take, in two steps so the long one need not hold the sandbox's scope
 * lock or freeze it:
 *   prepare  checks the name (EINVAL, EEXIST) and the count (EDQUOT
 *            against max), then copies the live tree while the sandbox
 *            runs (what changes meanwhile is fixed by commit);
 *   commit   freezes (fz), makes the copy equal to the live tree again
 *            (only what changed since prepare is copied), thaws, writes
 *            manifest and info, and publishes the snapshot under its name.
 * uid:gid is the thread's sandbox uid (info.json; a restore into another
 * thread gives that thread's uid what belonged to this one).
 * snap_take_free() after either (removes what an uncommitted take made). */
int snap_take_prepare(const char *thread_dir, const char *name, uid_t uid, gid_t gid, unsigned max,
	struct snap_take **out);
int snap_take_commit(struct snap_take *t, const struct snap_freeze *fz, struct snap_result *out);
void snap_take_free(struct snap_take *t);

/* rmdir: the snapshot leaves its name at once (renamed away: EBUSY while a
 * restore reads it); snap_purge() removes its files (slow: a work thread). */
int snap_delete(const char *thread_dir, const char *name);
void snap_purge(const char *thread_dir);

/* The names of the thread's snapshots (sorted), malloc'd. */
int snap_list(const char *thread_dir, char ***names, size_t *n);
void snap_names_free(char **names, size_t n);
/* 0 when the snapshot exists, else ENOENT (or EINVAL for a bad name). */
int snap_exists(const char *thread_dir, const char *name);
/* What `info` shows: the snapshot's info.json. */
int snap_info(const char *thread_dir, const char *name, struct buf *out);
/* A directory fd (O_PATH) on the snapshot's data/ (its workspace, uploads,
 * outputs), or -1 with errno. */
int snap_data_fd(const char *thread_dir, const char *name);

/* Make the live data directories of dst_thread_dir equal to snapshot name
 * of src_thread_dir (the same thread, or another thread of the same user: a
 * fork), in place: unchanged files stay, changed and missing ones are
 * copied (reflinked) back, extra ones removed; what belonged to the
 * snapshot's uid:gid becomes uid:gid's.  A journal (dst's restore.json)
 * lives from the first change to the last: snap_recover() finishes a
 * restore a crash interrupted.  The caller makes sure nothing in the
 * sandbox runs (jobs: EBUSY; the rest frozen). */
int snap_restore(const char *src_thread_dir, const char *name, const char *dst_thread_dir, uid_t uid, gid_t gid,
	struct snap_stats *out);

/* At start, before any sandbox is adopted: every thread of state_dir gets
 * its interrupted restore finished and the remains of interrupted takes
 * and removals cleaned. */
void snap_recover(const char *state_dir);

#endif
