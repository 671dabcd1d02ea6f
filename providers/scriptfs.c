/* SPDX-License-Identifier: MIT */
/*
 * scriptfs.c - file and skills operations as commands in a remote sandbox
 * (see scriptfs.h).
 *
 * Why one place: aio_remote.c and opensandbox_files.c each wrote rmdir,
 * truncate, the replacing rename and the skills operations as the same
 * shell lines, with the same reading of the command's stderr.  The lines
 * and their reading are the contract (what errno a user sees), so they are
 * written once; a provider keeps only its primitives and the operations its
 * API does better.
 */
#include "scriptfs.h"

#include <stdio.h>

#include "../common/err.h"
#include "../common/log.h"

#define SCRIPTFS_ERRTEXT 512

enum sbx_err scriptfs_paths(const struct scriptfs *fs, struct sbx_box *b, const char *what, const char *script,
	const char *a, const char *bp, struct buf *out)
{
	struct scriptfs_env env[2] = { { "A", a }, { "B", bp ? bp : "" } };
	char errtext[SCRIPTFS_ERRTEXT];
	int code;
	enum sbx_err e = fs->run(b, script, env, bp ? 2 : 1, &code, errtext, sizeof(errtext), out);

	if (e || !code)
		return e;
	log_debug(fs->scope(b), "%s %s: exit %d: %s", what, a, code, errtext);
	return sbx_err_from_message(errtext);
}

enum sbx_err scriptfs_mode(const struct scriptfs *fs, struct sbx_box *b, const char *what, const char *script,
	const char *path, mode_t mode)
{
	char m[16], errtext[SCRIPTFS_ERRTEXT];
	struct scriptfs_env env[2] = { { "A", path }, { "M", m } };
	int code;
	enum sbx_err e;

	snprintf(m, sizeof(m), "%o", (unsigned)(mode & 07777));
	e = fs->run(b, script, env, 2, &code, errtext, sizeof(errtext), NULL);
	if (e || !code)
		return e;
	log_debug(fs->scope(b), "%s %s: exit %d: %s", what, path, code, errtext);
	return sbx_err_from_message(errtext);
}

/* ---- files ops -------------------------------------------------------------------------------- */

enum sbx_err scriptfs_mkdir(const struct scriptfs *fs, struct sbx_box *b, const char *path, mode_t mode)
{
	if (!sbx_remote_path_ok(path))
		return SBX_ERR_INVAL;
	return scriptfs_mode(fs, b, "mkdir", "exec mkdir -m \"$M\" -- \"$A\"", path, mode);
}

enum sbx_err scriptfs_rmdir(const struct scriptfs *fs, struct sbx_box *b, const char *path)
{
	if (!sbx_remote_path_ok(path))
		return SBX_ERR_INVAL;
	return scriptfs_paths(fs, b, "rmdir", "exec rmdir -- \"$A\"", path, NULL, NULL);
}

enum sbx_err scriptfs_unlink(const struct scriptfs *fs, struct sbx_box *b, const char *path)
{
	if (!sbx_remote_path_ok(path))
		return SBX_ERR_INVAL;
	return scriptfs_paths(fs, b, "unlink", "exec unlink -- \"$A\"", path, NULL, NULL);
}

/* rename(2) replaces the destination: mv -T does that (and never moves
 * into a directory of that name). */
enum sbx_err scriptfs_rename(const struct scriptfs *fs, struct sbx_box *b, const char *from, const char *to)
{
	if (!sbx_remote_path_ok(from) || !sbx_remote_path_ok(to))
		return SBX_ERR_INVAL;
	return scriptfs_paths(fs, b, "rename", "exec mv -f -T -- \"$A\" \"$B\"", from, to, NULL);
}

enum sbx_err scriptfs_chmod(const struct scriptfs *fs, struct sbx_box *b, const char *path, mode_t mode)
{
	if (!sbx_remote_path_ok(path))
		return SBX_ERR_INVAL;
	return scriptfs_mode(fs, b, "chmod", "exec chmod \"$M\" -- \"$A\"", path, mode);
}

enum sbx_err scriptfs_truncate(const struct scriptfs *fs, struct sbx_box *b, const char *path, off_t size)
{
	char script[160];

	if (!sbx_remote_path_ok(path) || size < 0)
		return SBX_ERR_INVAL;
	/* truncate(1) makes a missing file: truncate(2) does not */
	snprintf(script, sizeof(script),
		"test -e \"$A\" || { echo \"$A: No such file or directory\" >&2; exit 1; }; exec truncate -s %lld -- \"$A\"",
		(long long)size);
	return scriptfs_paths(fs, b, "truncate", script, path, NULL, NULL);
}

/* ---- skills ops ------------------------------------------------------------------------------- */

enum sbx_err scriptfs_skills_upload(const struct scriptfs *fs, struct sbx_box *b, const char *rel, int fd,
	off_t size, mode_t mode)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = sbx_skills_remote_path(fs->skills_root(b), rel, &p);

	if (!e)
		e = size < 0 ? SBX_ERR_INVAL : fs->put(b, p.ptr, fd, size, mode);
	buf_free(&p);
	return e;
}

enum sbx_err scriptfs_skills_mkdir(const struct scriptfs *fs, struct sbx_box *b, const char *rel, mode_t mode)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = sbx_skills_remote_path(fs->skills_root(b), rel, &p);

	if (!e)
		e = scriptfs_mode(fs, b, "skills mkdir", "exec mkdir -p -m \"$M\" -- \"$A\"", p.ptr,
			(mode & 07777) ? mode : 0755);
	buf_free(&p);
	return e;
}

enum sbx_err scriptfs_skills_remove(const struct scriptfs *fs, struct sbx_box *b, const char *rel, bool is_dir)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = sbx_skills_remote_path(fs->skills_root(b), rel, &p);

	if (!e)
		e = scriptfs_paths(fs, b, "skills remove", is_dir ? "exec rm -rf -- \"$A\"" : "exec rm -f -- \"$A\"", p.ptr,
			NULL, NULL);
	buf_free(&p);
	return e;
}

/* ---- ready-made slots -------------------------------------------------------------------------- */

/* The primitives of the provider whose files table b's ops->files is. */
static const struct scriptfs *files_fs(struct sbx_box *b)
{
	return ((const struct scriptfs_files *)sbx_files(b))->fs;
}

static const struct scriptfs *skills_fs(struct sbx_box *b)
{
	return ((const struct scriptfs_skills *)sbx_skills(b))->fs;
}

enum sbx_err scriptfs_f_mkdir(struct sbx_box *b, const char *path, mode_t mode)
{
	return scriptfs_mkdir(files_fs(b), b, path, mode);
}

enum sbx_err scriptfs_f_rmdir(struct sbx_box *b, const char *path)
{
	return scriptfs_rmdir(files_fs(b), b, path);
}

enum sbx_err scriptfs_f_unlink(struct sbx_box *b, const char *path)
{
	return scriptfs_unlink(files_fs(b), b, path);
}

enum sbx_err scriptfs_f_rename(struct sbx_box *b, const char *from, const char *to)
{
	return scriptfs_rename(files_fs(b), b, from, to);
}

enum sbx_err scriptfs_f_chmod(struct sbx_box *b, const char *path, mode_t mode)
{
	return scriptfs_chmod(files_fs(b), b, path, mode);
}

enum sbx_err scriptfs_f_truncate(struct sbx_box *b, const char *path, off_t size)
{
	return scriptfs_truncate(files_fs(b), b, path, size);
}

enum sbx_err scriptfs_s_upload(struct sbx_box *b, const char *rel, int fd, off_t size, mode_t mode)
{
	return scriptfs_skills_upload(skills_fs(b), b, rel, fd, size, mode);
}

enum sbx_err scriptfs_s_mkdir(struct sbx_box *b, const char *rel, mode_t mode)
{
	return scriptfs_skills_mkdir(skills_fs(b), b, rel, mode);
}

enum sbx_err scriptfs_s_remove(struct sbx_box *b, const char *rel, bool is_dir)
{
	return scriptfs_skills_remove(skills_fs(b), b, rel, is_dir);
}
