/* SPDX-License-Identifier: MIT */
/*
 * opensandbox_files.c - remote files and skills by upload for the
 * opensandbox provider (struct sbx_files_ops, struct sbx_skills_ops),
 * through execd's files API (remote-apis.md A.10.2-A.10.4):
 *
 *   stat      GET /files/info            list   GET /directories/list depth=1
 *   read      GET /files/download with Range (only the asked bytes travel)
 *   write     POST /files/upload (metadata + file parts, mode as octal digits)
 *   mkdir     GET /files/info (EEXIST) + POST /directories
 *   unlink    DELETE /files              rename POST /files/mv
 *   chmod     POST /files/permissions
 * and, where the API has no call with the POSIX meaning, a command through
 * execd (os_run: bash -c with the paths in the environment, never in the
 * command text, LC_ALL=C so the error is strerror's words):
 *   rmdir     rmdir -- "$P"   (DELETE /directories is rm -rf: a job's new
 *                              file would be lost, and ENOTEMPTY never seen)
 *   truncate  truncate -s N -- "$P"
 *   rename    mv -f -T -- "$A" "$B" when the destination exists (execd's mv
 *             refuses to replace; rename(2) replaces)
 *   chmod 0   chmod 0 -- "$P" (execd reads mode 0 as "leave it")
 *
 * Upload expands ~ and $VAR in the target path (execd's os.ExpandEnv), so a
 * name holding '$' (or starting with '~') is uploaded under a plain
 * temporary name in the same directory and renamed into place.
 *
 * Errors: execd's codes and messages through osapi_error (FILE_NOT_FOUND and
 * "no such file" ENOENT, "directory not empty" ENOTEMPTY, ...); a 404 naming
 * the sandbox marks the box gone (obox_failed).  No lock is held here: every
 * call copies the box's endpoint and runs on the caller's thread.
 */
#define _GNU_SOURCE
#include "opensandbox_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/buf.h"
#include "../common/log.h"
#include "scriptfs.h"

#define OS_ERRTEXT 512

/* ---- commands ------------------------------------------------------------------------------ */

struct run_out {
	char *text;
	size_t len, cap;
};

static bool run_output(enum osapi_stream s, const char *text, size_t len, void *arg)
{
	struct run_out *o = arg;

	if (s == OSAPI_STDERR && o->len + 1 < o->cap) {
		size_t k = len < o->cap - o->len - 1 ? len : o->cap - o->len - 1;
		memcpy(o->text + o->len, text, k);
		o->len += k;
		if (o->len + 1 < o->cap)
			o->text[o->len++] = '\n';
		o->text[o->len] = '\0';
	}
	return true;
}

enum sbx_err os_run(struct obox *ob, const char *script, const struct osapi_kv *envs, size_t n_envs, int *exit_code,
	char *errtext, size_t errlen)
{
	struct osapi_kv env[8];
	struct osapi_execd ex;
	struct osapi_cmd cmd = { .command = script, .cwd = "/", .envs = env };
	struct osapi_cmd_result r;
	struct run_out out = { errtext, 0, errlen };
	struct osapi_cmd_events ev = { .on_output = run_output, .arg = &out };
	char err[OSAPI_ERR_LEN];
	enum sbx_err e = obox_execd(ob, &ex);
	bool gone = false;

	*exit_code = -1;
	if (errlen)
		errtext[0] = '\0';
	if (e)
		return e;
	env[cmd.n_envs++] = (struct osapi_kv){ "LC_ALL", "C" };
	for (size_t i = 0; i < n_envs && cmd.n_envs < 8; i++)
		env[cmd.n_envs++] = envs[i];
	cmd.timeout_ms = ob->cfg->request_timeout * 1000LL;
	e = osapi_command(&ex, &cmd, &ev, NULL, &r, &gone, err, sizeof(err));
	if (e) {
		obox_failed(ob, e, gone, "command", err);
		return e;
	}
	if (!r.ended || !r.has_exit || r.exit_code < 0) {
		log_warn(ob->scope, "opensandbox: a file command did not report its exit (%s)",
			r.error[0] ? r.error : "stream cut");
		return SBX_ERR_IO;
	}
	*exit_code = r.exit_code;
	return SBX_OK;
}

/* ---- scriptfs: file operations as commands ---------------------------------------------------- */

static enum sbx_err f_write(struct sbx_box *b, const char *path, int fd, off_t size, mode_t mode);

static enum sbx_err sfs_run(struct sbx_box *b, const char *script, const struct scriptfs_env *env, size_t n_env,
	int *code, char *errtext, size_t errlen, struct buf *out)
{
	struct osapi_kv kv[4];
	size_t n = 0;

	if (out)
		return SBX_ERR_NOTSUP; /* os_run keeps stderr only */
	for (; n < n_env && n < 4; n++)
		kv[n] = (struct osapi_kv){ env[n].key, env[n].value };
	return os_run(obox(b), script, kv, n, code, errtext, errlen);
}

static const char *sfs_skills_root(struct sbx_box *b)
{
	return obox(b)->cfg->skills_container_path;
}

static const char *sfs_scope(struct sbx_box *b)
{
	return obox(b)->scope;
}

static const struct scriptfs os_sfs = {
	.run = sfs_run,
	.put = f_write,
	.skills_root = sfs_skills_root,
	.scope = sfs_scope,
};

/* A command on paths: SBX_OK when it exits 0, else the error its stderr names. */
static enum sbx_err run_paths(struct obox *ob, const char *what, const char *script, const char *a, const char *b)
{
	return scriptfs_paths(&os_sfs, &ob->base, what, script, a, b, NULL);
}

/* ---- helpers ------------------------------------------------------------------------------- */

/* Absolute, and text the JSON bodies can carry (UTF-8, no NUL). */
static enum sbx_err failed(struct obox *ob, enum sbx_err e, bool gone, const char *what, const char *path,
	const char *err)
{
	char line[OSAPI_ERR_LEN + 300];

	if (e == SBX_ERR_GONE && !gone)
		return e; /* a missing path: an answer, not a failure */
	snprintf(line, sizeof(line), "%s %s: %s", what, path, err);
	obox_failed(ob, e, gone, what, line);
	return e;
}

static void fill_stat(const struct osapi_fileinfo *fi, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_mode = fi->mode;
	st->st_size = fi->size;
	st->st_nlink = S_ISDIR(fi->mode) ? 2 : 1;
	st->st_blksize = 4096;
	st->st_blocks = (fi->size + 511) / 512;
	st->st_mtim.tv_sec = (time_t)fi->mtime;
	st->st_mtim.tv_nsec = (long)((fi->mtime - (double)(time_t)fi->mtime) * 1e9);
	st->st_ctim.tv_sec = (time_t)fi->ctime;
	st->st_ctim.tv_nsec = (long)((fi->ctime - (double)(time_t)fi->ctime) * 1e9);
	st->st_atim = st->st_mtim;
}

/* ---- files ops ------------------------------------------------------------------------------ */

static enum sbx_err f_stat(struct sbx_box *b, const char *path, struct stat *st)
{
	struct obox *ob = obox(b);
	struct osapi_execd ex;
	struct osapi_fileinfo fi;
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	enum sbx_err e;

	if (!sbx_remote_path_ok(path))
		return SBX_ERR_INVAL;
	e = obox_execd(ob, &ex);
	if (!e)
		e = osapi_info(&ex, path, &fi, &gone, err, sizeof(err));
	if (e)
		return e == SBX_ERR_GONE && !gone ? e : failed(ob, e, gone, "stat", path, err);
	fill_stat(&fi, st);
	return SBX_OK;
}

struct list_acc {
	struct sbx_dirent *ents;
	size_t n, cap;
};

static int list_one(const struct osapi_fileinfo *fi, void *arg)
{
	struct list_acc *a = arg;

	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		struct sbx_dirent *n = realloc(a->ents, cap * sizeof(*n));
		if (!n)
			return -1;
		a->ents = n;
		a->cap = cap;
	}
	a->ents[a->n].name = strdup(fi->name);
	if (!a->ents[a->n].name)
		return -1;
	fill_stat(fi, &a->ents[a->n].st);
	a->n++;
	return 0;
}

static enum sbx_err f_list(struct sbx_box *b, const char *path, struct sbx_dirent **ents, size_t *n)
{
	struct obox *ob = obox(b);
	struct osapi_execd ex;
	struct list_acc a = { 0 };
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	enum sbx_err e;

	*ents = NULL;
	*n = 0;
	if (!sbx_remote_path_ok(path))
		return SBX_ERR_INVAL;
	e = obox_execd(ob, &ex);
	if (!e)
		e = osapi_list_dir(&ex, path, list_one, &a, &gone, err, sizeof(err));
	if (e) {
		sbx_dirents_free(a.ents, a.n);
		return failed(ob, e, gone, "list", path, err);
	}
	*ents = a.ents;
	*n = a.n;
	return SBX_OK;
}

static enum sbx_err f_read(struct sbx_box *b, const char *path, off_t off, size_t len, int fd, size_t *got)
{
	struct obox *ob = obox(b);
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	enum sbx_err e;

	*got = 0;
	if (!sbx_remote_path_ok(path) || off < 0)
		return SBX_ERR_INVAL;
	e = obox_execd(ob, &ex);
	if (!e)
		e = osapi_download(&ex, path, off, len, fd, got, &gone, err, sizeof(err));
	return e ? failed(ob, e, gone, "read", path, err) : SBX_OK;
}

/* Upload fd to path (mode; 0 = execd's default) with no expansion surprise. */
static enum sbx_err put_file(struct obox *ob, const char *path, int fd, off_t size, unsigned mode)
{
	struct osapi_execd ex;
	struct buf tmp = BUF_INIT(BUF_CAP_PATH);
	char err[OSAPI_ERR_LEN];
	unsigned char rnd[6];
	bool gone = false;
	enum sbx_err e = obox_execd(ob, &ex);
	const char *slash = strrchr(path, '/');

	if (e)
		return e;
	if (!strchr(path, '$') && !strstr(path, "/~")) {
		struct osapi_upload up = { path, fd, (long long)size, mode };
		e = osapi_upload(&ex, &up, 1, &gone, err, sizeof(err));
		return e ? failed(ob, e, gone, "write", path, err) : SBX_OK;
	}
	/* a name execd would expand: a plain name first, then into place */
	if (getentropy(rnd, sizeof(rnd)) ||
	    buf_addf(&tmp, "%.*s/.sbxfs-up-%02x%02x%02x%02x%02x%02x", (int)(slash - path), path, rnd[0], rnd[1], rnd[2],
		    rnd[3], rnd[4], rnd[5]) ||
	    strchr(buf_str(&tmp), '$') || strstr(buf_str(&tmp), "/~")) {
		buf_free(&tmp);
		return SBX_ERR_INVAL; /* the directory's own name holds '$': no plain name to land on */
	}
	{
		struct osapi_upload up = { tmp.ptr, fd, (long long)size, mode };
		e = osapi_upload(&ex, &up, 1, &gone, err, sizeof(err));
	}
	if (!e)
		e = run_paths(ob, "rename", "exec mv -f -T -- \"$A\" \"$B\"", tmp.ptr, path);
	else
		failed(ob, e, gone, "write", path, err);
	if (e) {
		char derr[OSAPI_ERR_LEN];
		osapi_delete_file(&ex, tmp.ptr, &gone, derr, sizeof(derr));
	}
	buf_free(&tmp);
	return e;
}

static enum sbx_err f_write(struct sbx_box *b, const char *path, int fd, off_t size, mode_t mode)
{
	struct obox *ob = obox(b);
	unsigned bits = mode & 07777;
	enum sbx_err e;

	if (!sbx_remote_path_ok(path) || size < 0)
		return SBX_ERR_INVAL;
	e = put_file(ob, path, fd, size, bits);
	if (!e && !bits) /* execd reads mode 0 as "leave it" */
		e = run_paths(ob, "chmod", "exec chmod 0 -- \"$A\"", path, NULL);
	return e;
}

static enum sbx_err f_mkdir(struct sbx_box *b, const char *path, mode_t mode)
{
	struct obox *ob = obox(b);
	struct osapi_execd ex;
	struct osapi_fileinfo fi;
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	enum sbx_err e;

	if (!sbx_remote_path_ok(path))
		return SBX_ERR_INVAL;
	e = obox_execd(ob, &ex);
	if (e)
		return e;
	/* execd's mkdir is mkdir -p: an existing path is no error there */
	e = osapi_info(&ex, path, &fi, &gone, err, sizeof(err));
	if (!e)
		return SBX_ERR_EXIST;
	if (e != SBX_ERR_GONE || gone)
		return failed(ob, e, gone, "mkdir", path, err);
	e = osapi_make_dir(&ex, path, mode & 07777, &gone, err, sizeof(err));
	if (e)
		return failed(ob, e, gone, "mkdir", path, err);
	if (!(mode & 07777))
		e = run_paths(ob, "chmod", "exec chmod 0 -- \"$A\"", path, NULL);
	return e;
}


static enum sbx_err f_unlink(struct sbx_box *b, const char *path)
{
	struct obox *ob = obox(b);
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	enum sbx_err e;

	if (!sbx_remote_path_ok(path))
		return SBX_ERR_INVAL;
	e = obox_execd(ob, &ex);
	if (!e)
		e = osapi_delete_file(&ex, path, &gone, err, sizeof(err));
	return e ? failed(ob, e, gone, "unlink", path, err) : SBX_OK;
}

static enum sbx_err f_rename(struct sbx_box *b, const char *from, const char *to)
{
	struct obox *ob = obox(b);
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	enum sbx_err e;

	if (!sbx_remote_path_ok(from) || !sbx_remote_path_ok(to))
		return SBX_ERR_INVAL;
	e = obox_execd(ob, &ex);
	if (!e)
		e = osapi_move(&ex, from, to, &gone, err, sizeof(err));
	if (e == SBX_ERR_EXIST) /* rename(2) replaces the destination: the command does that */
		return scriptfs_rename(&os_sfs, b, from, to);
	return e ? failed(ob, e, gone, "rename", from, err) : SBX_OK;
}

static enum sbx_err f_chmod(struct sbx_box *b, const char *path, mode_t mode)
{
	struct obox *ob = obox(b);
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	enum sbx_err e;

	if (!sbx_remote_path_ok(path))
		return SBX_ERR_INVAL;
	if (!(mode & 07777))
		return run_paths(ob, "chmod", "exec chmod 0 -- \"$A\"", path, NULL);
	e = obox_execd(ob, &ex);
	if (!e)
		e = osapi_chmod(&ex, path, mode & 07777, &gone, err, sizeof(err));
	return e ? failed(ob, e, gone, "chmod", path, err) : SBX_OK;
}


/* rmdir and truncate: scriptfs's commands */
const struct scriptfs_files os_files = {
	.ops = {
		.stat = f_stat,
		.list = f_list,
		.read = f_read,
		.write = f_write,
		.mkdir = f_mkdir,
		.rmdir = scriptfs_f_rmdir,
		.unlink = f_unlink,
		.rename = f_rename,
		.chmod = f_chmod,
		.truncate = scriptfs_f_truncate,
	},
	.fs = &os_sfs,
};

/* ---- skills ops --------------------------------------------------------------------------- */

static enum sbx_err skills_path(struct obox *ob, const char *rel, struct buf *out)
{
	return sbx_skills_remote_path(ob->cfg->skills_container_path, rel, out);
}


static enum sbx_err s_mkdir(struct sbx_box *b, const char *rel, mode_t mode)
{
	struct obox *ob = obox(b);
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	enum sbx_err e = skills_path(ob, rel, &p);

	if (!e)
		e = obox_execd(ob, &ex);
	if (!e) {
		e = osapi_make_dir(&ex, p.ptr, (mode & 07777) ? mode & 07777 : 0755, &gone, err, sizeof(err));
		if (e)
			failed(ob, e, gone, "skills mkdir", p.ptr, err);
	}
	buf_free(&p);
	return e;
}

static enum sbx_err s_remove(struct sbx_box *b, const char *rel, bool is_dir)
{
	struct obox *ob = obox(b);
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	enum sbx_err e = skills_path(ob, rel, &p);

	if (!e)
		e = obox_execd(ob, &ex);
	if (!e) {
		e = is_dir ? osapi_delete_dir(&ex, p.ptr, &gone, err, sizeof(err)) :
			     osapi_delete_file(&ex, p.ptr, &gone, err, sizeof(err));
		if (e == SBX_ERR_ISDIR) /* it became a directory: remove what is there */
			e = osapi_delete_dir(&ex, p.ptr, &gone, err, sizeof(err));
		if (e)
			failed(ob, e, gone, "skills remove", p.ptr, err);
	}
	buf_free(&p);
	return e;
}

/* Whether put_file can send path as it is (execd expands '$' and '~'). */
static bool plain_name(const char *path)
{
	return !strchr(path, '$') && !strstr(path, "/~");
}

/* execd's upload takes many metadata/file pairs in one request: the
 * initial sync of a few hundred skill files is a handful of requests. */
static enum sbx_err s_upload_many(struct sbx_box *b, const struct sbx_skill_file *f, size_t n)
{
	struct obox *ob = obox(b);
	struct osapi_upload up[SBX_SKILLS_BATCH];
	struct buf p[SBX_SKILLS_BATCH];
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	size_t k = 0;
	enum sbx_err e = n > SBX_SKILLS_BATCH ? SBX_ERR_INVAL : obox_execd(ob, &ex);

	for (size_t i = 0; i < n && !e; i++) {
		p[k] = (struct buf)BUF_INIT(BUF_CAP_PATH);
		e = skills_path(ob, f[i].path, &p[k]);
		if (!e && (!plain_name(p[k].ptr) || !(f[i].mode & 07777) || f[i].size < 0)) {
			e = scriptfs_s_upload(b, f[i].path, f[i].fd, f[i].size, f[i].mode); /* the careful way, alone */
			buf_free(&p[k]);
			continue;
		}
		if (!e)
			up[k] = (struct osapi_upload){ p[k].ptr, f[i].fd, (long long)f[i].size, f[i].mode & 07777 };
		k++;
	}
	if (!e && k) {
		e = osapi_upload(&ex, up, k, &gone, err, sizeof(err));
		if (e)
			failed(ob, e, gone, "skills upload", k > 1 ? "(several files)" : up[0].path, err);
	}
	for (size_t i = 0; i < k; i++)
		buf_free(&p[i]);
	return e;
}

static enum sbx_err s_mkdir_many(struct sbx_box *b, const struct sbx_skill_file *d, size_t n)
{
	struct obox *ob = obox(b);
	const char *paths[SBX_SKILLS_BATCH];
	unsigned modes[SBX_SKILLS_BATCH];
	struct buf p[SBX_SKILLS_BATCH];
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	size_t k = 0;
	enum sbx_err e = n > SBX_SKILLS_BATCH ? SBX_ERR_INVAL : obox_execd(ob, &ex);

	for (; k < n && !e; k++) {
		p[k] = (struct buf)BUF_INIT(BUF_CAP_PATH);
		e = skills_path(ob, d[k].path, &p[k]);
		paths[k] = p[k].ptr;
		modes[k] = (d[k].mode & 07777) ? d[k].mode & 07777 : 0755;
	}
	if (!e) {
		e = osapi_make_dirs(&ex, paths, modes, n, &gone, err, sizeof(err));
		if (e)
			failed(ob, e, gone, "skills mkdir", n > 1 ? "(several directories)" : paths[0], err);
	}
	for (size_t i = 0; i < k; i++)
		buf_free(&p[i]);
	return e;
}

/* upload: scriptfs's (the files ops' write under the skills root) */
const struct scriptfs_skills os_skills = {
	.ops = {
		.upload = scriptfs_s_upload,
		.mkdir = s_mkdir,
		.remove = s_remove,
		.upload_many = s_upload_many,
		.mkdir_many = s_mkdir_many,
	},
	.fs = &os_sfs,
};
