/* SPDX-License-Identifier: MIT */
/*
 * udir.h - how the daemon (root) touches a directory that a sandbox can
 * write: the job run directory bind-mounted into a container.
 *
 * Anything in such a directory may have been planted by the sandbox: a
 * symlink to a host file, a FIFO that blocks an open, a device, a directory
 * where a file is expected, a file of many gigabytes.  So every call here
 * works relative to a directory fd (never a path through the untrusted
 * tree), never follows a symlink (O_NOFOLLOW, AT_SYMLINK_NOFOLLOW), opens
 * with O_NONBLOCK and checks with fstat() that it got a regular file or a
 * directory, creates only with O_EXCL, and reads with a cap.  The
 * directory fd itself must come from a trusted parent (udir_open on a path
 * whose components only root can change).
 *
 * All return 0 / an fd, or -1 with errno (ELOOP, EINVAL for a wrong kind of
 * file, E2BIG past a cap).  Thread-safe (no state).
 */
#ifndef SBX_UDIR_H
#define SBX_UDIR_H

#include <sys/stat.h>
#include <sys/types.h>

#include "buf.h"

/* A directory fd (O_PATH-free, readable) on path; its last component must be
 * a real directory, not a symlink. */
int udir_open(const char *path);
/* The directory name inside dfd. */
int udir_openat(int dfd, const char *name);
/* mkdirat(dfd, name, mode), then the new directory's fd, owned by uid:gid;
 * EEXIST when anything has that name. */
int udir_mkdir(int dfd, const char *name, mode_t mode, uid_t uid, gid_t gid);
/* A new file (O_EXCL: never an existing one, never through a symlink),
 * write-only, owned by uid:gid. */
int udir_create(int dfd, const char *name, mode_t mode, uid_t uid, gid_t gid);
/* An existing regular file, read-only and non-blocking.  st gets its fstat
 * (may be NULL). */
int udir_open_file(int dfd, const char *name, struct stat *st);
/* The whole regular file into b (bounded by b's cap: E2BIG beyond). */
int udir_read(int dfd, const char *name, struct buf *b);
/* Write data as a new file name (see udir_create). */
int udir_write(int dfd, const char *name, const void *data, size_t len, mode_t mode, uid_t uid, gid_t gid);
/* Copy size bytes of src (from its offset 0) into a new file name. */
int udir_copy(int dfd, const char *name, int src, mode_t mode, uid_t uid, gid_t gid);
/* rm -rf of name inside dfd, never following a symlink; ENOENT is success.
 * Trees deeper than 64 levels are left (and -1, ELOOP). */
int udir_remove(int dfd, const char *name);
/* The directory dfd and everything under it that belongs to from, given to
 * uid:gid, never following a symlink (the links themselves change owner);
 * at most 64 levels deep (then -1, ELOOP, after doing the rest). */
int udir_chown_tree(int dfd, uid_t from, uid_t uid, gid_t gid);

/* What udir_give did. */
struct udir_give_stats {
	unsigned long given;   /* directories, files, symlinks, FIFOs, sockets now uid:gid's */
	unsigned long linked;  /* regular files with more than one link, left as they were */
	unsigned long devices; /* device nodes, left as they were (root's) */
	unsigned long foreign; /* entries on another file system (mount points), left */
};

/* chown -R of name inside dfd to uid:gid, for a tree made by someone else
 * (another uid, another program) that a sandbox of uid:gid is to own: never
 * following a symlink, staying on name's file system, write access for group
 * and others removed (what made the tree writable across uids is no longer
 * needed) and set-id bits of files dropped.  A regular file with several
 * links is left alone (a hard link may name a file outside the tree, whose
 * owner would change too), and so is a device node.  Every object is
 * checked (fstat of what was opened) before it is changed, so a swap
 * under the walk makes a step skip, never change something else.  Trees
 * deeper than 128 levels are left below that (ELOOP).  0, or -1 with the
 * errno of the first failure (the walk goes on past it); *st counts. */
int udir_give(int dfd, const char *name, uid_t uid, gid_t gid, struct udir_give_stats *st);

#endif
