/* SPDX-License-Identifier: MIT */
/*
 * scriptfs.h - file operations done by short shell commands in a remote
 * sandbox, and skills operations derived from them, for providers whose
 * API has "run a command", "upload" and "download" but not every file
 * operation (aio at a base_url, opensandbox's execd).
 *
 * A provider describes its primitives once (struct scriptfs: run a script,
 * upload a file, the skills root, a log scope) and points the slots it has
 * no better API for at these helpers; what a command's stderr says becomes
 * the errno (sbx_err_from_message), so the answer through the mount is the
 * same whichever provider runs it.
 *
 * Every path is an absolute path inside the sandbox that the caller checked
 * (sbx_remote_path_ok); paths travel in the command's environment ($A, $B,
 * $M: never in the script's text).  Thread context: any thread, no lock
 * held; each call blocks for one or two requests (the provider's
 * request_timeout, the current token).
 */
#ifndef SBX_SCRIPTFS_H
#define SBX_SCRIPTFS_H

#include <stdbool.h>
#include <sys/types.h>

#include "../common/buf.h"
#include "provider.h"

struct scriptfs_env {
	const char *key;
	const char *value;
};

struct scriptfs {
	/* Run script (sh, cwd "/", LC_ALL=C, env) in the box's sandbox: its exit
	 * code and stderr (into errtext), its stdout into out when out is not
	 * NULL.  SBX_OK when it ran (whatever its exit), else why not. */
	enum sbx_err (*run)(struct sbx_box *b, const char *script, const struct scriptfs_env *env, size_t n_env,
		int *code, char *errtext, size_t errlen, struct buf *out);
	/* fd's size bytes to path in the sandbox, with mode's permission bits. */
	enum sbx_err (*put)(struct sbx_box *b, const char *path, int fd, off_t size, mode_t mode);
	/* Where the sandbox's skills directory is (skills_container_path). */
	const char *(*skills_root)(struct sbx_box *b);
	/* The sandbox's name in log lines. */
	const char *(*scope)(struct sbx_box *b);
};

/* script with $A = a and $B = bp (when not NULL): SBX_OK on exit 0, else the
 * error its stderr names (logged at debug with what).  out: its stdout. */
enum sbx_err scriptfs_paths(const struct scriptfs *fs, struct sbx_box *b, const char *what, const char *script,
	const char *a, const char *bp, struct buf *out);

/* script with $A = path and $M = mode's permission bits in octal. */
enum sbx_err scriptfs_mode(const struct scriptfs *fs, struct sbx_box *b, const char *what, const char *script,
	const char *path, mode_t mode);

/* The files ops (provider.h's struct sbx_files_ops) done by commands.
 * Bad paths and sizes: SBX_ERR_INVAL, nothing run. */
enum sbx_err scriptfs_mkdir(const struct scriptfs *fs, struct sbx_box *b, const char *path, mode_t mode);
enum sbx_err scriptfs_rmdir(const struct scriptfs *fs, struct sbx_box *b, const char *path);
enum sbx_err scriptfs_unlink(const struct scriptfs *fs, struct sbx_box *b, const char *path);
enum sbx_err scriptfs_rename(const struct scriptfs *fs, struct sbx_box *b, const char *from, const char *to);
enum sbx_err scriptfs_chmod(const struct scriptfs *fs, struct sbx_box *b, const char *path, mode_t mode);
enum sbx_err scriptfs_truncate(const struct scriptfs *fs, struct sbx_box *b, const char *path, off_t size);

/* The skills ops (struct sbx_skills_ops) as file operations under the
 * skills root: rel is relative to it (sbx_skills_remote_path checks it). */
enum sbx_err scriptfs_skills_upload(const struct scriptfs *fs, struct sbx_box *b, const char *rel, int fd,
	off_t size, mode_t mode);
enum sbx_err scriptfs_skills_mkdir(const struct scriptfs *fs, struct sbx_box *b, const char *rel, mode_t mode);
enum sbx_err scriptfs_skills_remove(const struct scriptfs *fs, struct sbx_box *b, const char *rel, bool is_dir);

/* ---- ready-made slots ----
 * A provider's files (skills) table is the ops member of one of these, so
 * the slots below find the provider's primitives from the box alone
 * (sbx_files(b), sbx_skills(b)): the provider names them in its table and
 * writes no wrapper.  Its own slots sit beside them in the same table. */
struct scriptfs_files {
	struct sbx_files_ops ops; /* first: what the provider's ops->files points at */
	const struct scriptfs *fs;
};

struct scriptfs_skills {
	struct sbx_skills_ops ops; /* first: what the provider's ops->skills points at */
	const struct scriptfs *fs;
};

enum sbx_err scriptfs_f_mkdir(struct sbx_box *b, const char *path, mode_t mode);
enum sbx_err scriptfs_f_rmdir(struct sbx_box *b, const char *path);
enum sbx_err scriptfs_f_unlink(struct sbx_box *b, const char *path);
enum sbx_err scriptfs_f_rename(struct sbx_box *b, const char *from, const char *to);
enum sbx_err scriptfs_f_chmod(struct sbx_box *b, const char *path, mode_t mode);
enum sbx_err scriptfs_f_truncate(struct sbx_box *b, const char *path, off_t size);
enum sbx_err scriptfs_s_upload(struct sbx_box *b, const char *rel, int fd, off_t size, mode_t mode);
enum sbx_err scriptfs_s_mkdir(struct sbx_box *b, const char *rel, mode_t mode);
enum sbx_err scriptfs_s_remove(struct sbx_box *b, const char *rel, bool is_dir);

#endif
