/* SPDX-License-Identifier: MIT */
/*
 * hostfiles.c - a development provider (./sbxfs-hostfiles): the
 * local provider whose data directories are reached through the files ops
 * instead of being served from the host directories, with the ops doing on
 * the host what a remote files API does in its sandbox.  It lets the
 * remote-files backend (fs/rfiles.c) and the skills upload sync run against
 * real jobs on a machine without a remote server; the black-box suite uses
 * the real remote providers and their test servers.  A wrapper sharing
 * local's table (STYLE.md #4).  Its skills ops write under
 * thread_dir/hostfiles-skills/ and count their calls in
 * thread_dir/hostfiles-skills.log.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/buf.h"
#include "../../common/util.h"
#include "../../providers/provider.h"
#include "../../providers/provider_int.h"

static struct sbx_provider_ops hf_ops;
static const struct sbx_provider provider_hostfiles;

/* A box of ours around local's: local checks its boxes' provider, and the
 * capability tables are read from box->prov. */
struct hf_box {
	struct sbx_box base;
	struct sbx_box *inner;
	char dir[512];
};

static struct sbx_box *in(struct sbx_box *b)
{
	return ((struct hf_box *)b)->inner;
}

static int hf_thread_dir(struct sbx_box *box, char *out, size_t len)
{
	return snprintf(out, len, "%s", ((struct hf_box *)box)->dir) >= (int)len ? -1 : 0;
}

/* /mnt/user-data/X -> thread_dir/user-data/X */
static enum sbx_err hf_host(struct sbx_box *box, const char *path, struct buf *b)
{
	char dir[512];

	if (hf_thread_dir(box, dir, sizeof(dir)) || strncmp(path, "/mnt/user-data/", 15) || strstr(path, "/.."))
		return SBX_ERR_INVAL;
	return buf_addf(b, "%s/user-data/%s", dir, path + 15) ? SBX_ERR_NOMEM : SBX_OK;
}

static enum sbx_err hf_err(int e)
{
	return e == ENOENT ? SBX_ERR_GONE : e == ENOTEMPTY ? SBX_ERR_NOTEMPTY : e == ENOTDIR ? SBX_ERR_NOTDIR
	       : e == EISDIR ? SBX_ERR_ISDIR : e == EEXIST ? SBX_ERR_EXIST : e == EACCES ? SBX_ERR_ACCESS
	       : e == ENOSPC ? SBX_ERR_NOSPC : SBX_ERR_IO;
}

#define HF_BEGIN(path)                                   \
	struct buf h = BUF_INIT(BUF_CAP_PATH);           \
	enum sbx_err e = hf_host(box, path, &h);         \
	if (e) {                                         \
		buf_free(&h);                            \
		return e;                                \
	}

static enum sbx_err hf_stat(struct sbx_box *box, const char *path, struct stat *st)
{
	HF_BEGIN(path);
	if (lstat(h.ptr, st))
		e = hf_err(errno);
	st->st_uid = st->st_gid = 0;
	buf_free(&h);
	return e;
}

static enum sbx_err hf_list(struct sbx_box *box, const char *path, struct sbx_dirent **ents, size_t *n)
{
	struct sbx_dirent *v = NULL;
	size_t k = 0, cap = 0;
	struct dirent *d;
	DIR *dp;

	HF_BEGIN(path);
	dp = opendir(h.ptr);
	if (!dp)
		e = hf_err(errno);
	while (dp && (d = readdir(dp))) {
		struct buf c = BUF_INIT(BUF_CAP_PATH);
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if (k == cap) {
			cap = cap ? cap * 2 : 64;
			v = realloc(v, cap * sizeof(*v));
		}
		v[k].name = strdup(d->d_name);
		if (!buf_addf(&c, "%s/%s", h.ptr, d->d_name))
			lstat(c.ptr, &v[k].st);
		v[k].st.st_uid = v[k].st.st_gid = 0;
		buf_free(&c);
		k++;
	}
	if (dp)
		closedir(dp);
	*ents = v;
	*n = k;
	buf_free(&h);
	return e;
}

static enum sbx_err hf_read(struct sbx_box *box, const char *path, off_t off, size_t len, int fd, size_t *got)
{
	char chunk[65536];
	int in;

	HF_BEGIN(path);
	*got = 0;
	in = open(h.ptr, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
	if (in < 0)
		e = hf_err(errno);
	while (in >= 0 && *got < len) {
		ssize_t n = pread(in, chunk, len - *got < sizeof(chunk) ? len - *got : sizeof(chunk), off + (off_t)*got);
		if (n <= 0 || write(fd, chunk, (size_t)n) != n)
			break;
		*got += (size_t)n;
	}
	if (in >= 0)
		close(in);
	buf_free(&h);
	return e;
}

static enum sbx_err hf_write(struct sbx_box *box, const char *path, int fd, off_t size, mode_t mode)
{
	char chunk[65536];
	off_t off = 0;
	int out;

	HF_BEGIN(path);
	out = open(h.ptr, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
	if (out < 0)
		e = hf_err(errno);
	while (out >= 0 && off < size) {
		ssize_t n = pread(fd, chunk, sizeof(chunk), off);
		if (n <= 0 || write(out, chunk, (size_t)n) != n) {
			e = SBX_ERR_IO;
			break;
		}
		off += n;
	}
	if (out >= 0) {
		if (fchmod(out, mode & 07777) || fchown(out, box->uid, box->gid))
			e = SBX_ERR_IO;
		close(out);
	}
	buf_free(&h);
	return e;
}

static enum sbx_err hf_mkdir(struct sbx_box *box, const char *path, mode_t mode)
{
	HF_BEGIN(path);
	if (util_mkdir_p(h.ptr, mode & 07777) || chown(h.ptr, box->uid, box->gid))
		e = hf_err(errno);
	buf_free(&h);
	return e;
}

static enum sbx_err hf_rmdir(struct sbx_box *box, const char *path)
{
	HF_BEGIN(path);
	if (util_rm_rf(h.ptr) && errno != ENOENT)
		e = hf_err(errno);
	buf_free(&h);
	return e;
}

static enum sbx_err hf_unlink(struct sbx_box *box, const char *path)
{
	HF_BEGIN(path);
	if (unlink(h.ptr) && errno != ENOENT)
		e = hf_err(errno);
	buf_free(&h);
	return e;
}

static enum sbx_err hf_rename(struct sbx_box *box, const char *from, const char *to)
{
	struct buf t = BUF_INIT(BUF_CAP_PATH);

	HF_BEGIN(from);
	e = hf_host(box, to, &t);
	if (!e && renameat2(AT_FDCWD, h.ptr, AT_FDCWD, t.ptr, RENAME_NOREPLACE))
		e = hf_err(errno);
	buf_free(&t);
	buf_free(&h);
	return e;
}

static enum sbx_err hf_chmod(struct sbx_box *box, const char *path, mode_t mode)
{
	HF_BEGIN(path);
	if (chmod(h.ptr, mode & 07777))
		e = hf_err(errno);
	buf_free(&h);
	return e;
}

static enum sbx_err hf_truncate(struct sbx_box *box, const char *path, off_t size)
{
	HF_BEGIN(path);
	if (truncate(h.ptr, size))
		e = hf_err(errno);
	buf_free(&h);
	return e;
}

static const struct sbx_files_ops hf_files = {
	.stat = hf_stat,
	.list = hf_list,
	.read = hf_read,
	.write = hf_write,
	.mkdir = hf_mkdir,
	.rmdir = hf_rmdir,
	.unlink = hf_unlink,
	.rename = hf_rename,
	.chmod = hf_chmod,
	.truncate = hf_truncate,
};

/* skills: thread_dir/hostfiles-skills/<path>, one line per call in the log */
static enum sbx_err hf_skills_path(struct sbx_box *box, const char *op, const char *path, struct buf *b)
{
	char dir[512];
	struct buf log = BUF_INIT(BUF_CAP_PATH);
	FILE *f;

	if (hf_thread_dir(box, dir, sizeof(dir)) || path[0] == '/' || strstr(path, ".."))
		return SBX_ERR_INVAL;
	if (!buf_addf(&log, "%s/hostfiles-skills.log", dir) && (f = fopen(log.ptr, "a"))) {
		fprintf(f, "%s %s\n", op, path);
		fclose(f);
	}
	buf_free(&log);
	return buf_addf(b, "%s/hostfiles-skills/%s", dir, path) ? SBX_ERR_NOMEM : SBX_OK;
}

static enum sbx_err hf_skill_upload(struct sbx_box *box, const char *path, int fd, off_t size, mode_t mode)
{
	struct buf b = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = hf_skills_path(box, "upload", path, &b);
	char chunk[65536];
	off_t off = 0;
	int out = -1;

	if (!e) {
		char *slash = strrchr(b.ptr, '/');
		*slash = '\0';
		util_mkdir_p(b.ptr, 0755);
		*slash = '/';
		out = open(b.ptr, O_WRONLY | O_CREAT | O_TRUNC, mode & 0777);
		if (out < 0)
			e = SBX_ERR_IO;
	}
	while (!e && off < size) {
		ssize_t n = pread(fd, chunk, sizeof(chunk), off);
		if (n <= 0 || write(out, chunk, (size_t)n) != n)
			e = SBX_ERR_IO;
		else
			off += n;
	}
	if (out >= 0)
		close(out);
	buf_free(&b);
	return e;
}

static enum sbx_err hf_skill_mkdir(struct sbx_box *box, const char *path, mode_t mode)
{
	struct buf b = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = hf_skills_path(box, "mkdir", path, &b);

	if (!e && util_mkdir_p(b.ptr, mode ? mode : 0755))
		e = SBX_ERR_IO;
	buf_free(&b);
	return e;
}

static enum sbx_err hf_skill_remove(struct sbx_box *box, const char *path, bool is_dir)
{
	struct buf b = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = hf_skills_path(box, "remove", path, &b);

	if (!e && (is_dir ? util_rm_rf(b.ptr) : unlink(b.ptr)) && errno != ENOENT)
		e = SBX_ERR_IO;
	buf_free(&b);
	return e;
}

static const struct sbx_skills_ops hf_skills = {
	.upload = hf_skill_upload,
	.mkdir = hf_skill_mkdir,
	.remove = hf_skill_remove,
};

static enum sbx_err hf_wrap(const struct sbx_spec *spec, struct sbx_box *inner, struct sbx_box **out)
{
	struct hf_box *hb = calloc(1, sizeof(*hb));

	if (!hb) {
		provider_local.ops->box_free(inner);
		return SBX_ERR_NOMEM;
	}
	sbx_box_init(&hb->base, &provider_hostfiles);
	hb->inner = inner;
	hb->base.uid = inner->uid;
	hb->base.gid = inner->gid;
	memcpy(hb->base.remote_id, inner->remote_id, sizeof(hb->base.remote_id));
	snprintf(hb->dir, sizeof(hb->dir), "%s", spec->dirs.thread_dir);
	*out = &hb->base;
	return SBX_OK;
}

static enum sbx_err hf_create(const struct sbx_spec *spec, struct sbx_box **out)
{
	struct sbx_box *inner;
	enum sbx_err e = provider_local.ops->create(spec, &inner);

	return e ? e : hf_wrap(spec, inner, out);
}

static enum sbx_err hf_adopt(const struct sbx_spec *spec, struct sbx_box **out)
{
	struct sbx_box *inner;
	enum sbx_err e = provider_local.ops->adopt(spec, &inner);

	return e ? e : hf_wrap(spec, inner, out);
}

static enum sbx_err hf_health(struct sbx_box *b)
{
	return provider_local.ops->health(in(b));
}

static enum sbx_err hf_destroy(struct sbx_box *b)
{
	return provider_local.ops->destroy(in(b));
}

static void hf_box_free(struct sbx_box *b)
{
	sbx_box_put(in(b));
	free(b);
}

static enum sbx_err hf_kill_all(struct sbx_box *b)
{
	return sbx_kill_all(in(b));
}

static void hf_box_status(struct sbx_box *b, struct json_t *o)
{
	sbx_box_status(in(b), o);
}

static enum sbx_err hf_exec_start(struct sbx_box *b, const struct sbx_exec_spec *spec, struct sbx_exec **out)
{
	return sbx_exec_start(in(b), spec, out);
}

static enum sbx_err hf_exec_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out)
{
	return sbx_exec_reattach(in(b), job_dir, out);
}

static void hf_exec_cleanup(struct sbx_box *b, const char *job_dir, const char *job_name)
{
	sbx_exec_cleanup(in(b), job_dir, job_name);
}

__attribute__((constructor)) static void hf_setup(void)
{
	hf_ops = *provider_local.ops;
	hf_ops.create = hf_create;
	hf_ops.adopt = hf_adopt;
	hf_ops.health = hf_health;
	hf_ops.destroy = hf_destroy;
	hf_ops.box_free = hf_box_free;
	hf_ops.kill_all = hf_kill_all;
	hf_ops.box_status = hf_box_status;
	hf_ops.exec_start = hf_exec_start;
	hf_ops.exec_reattach = hf_exec_reattach;
	hf_ops.exec_cleanup = hf_exec_cleanup;
	hf_ops.files = &hf_files;
	hf_ops.skills = &hf_skills;
}

static const char *const hf_keys[] = { "local", NULL };

static const struct sbx_provider provider_hostfiles = {
	.name = "hostfiles",
	.config_keys = hf_keys,
	.caps = SBX_CAP_EXEC | SBX_CAP_SIGNALS,
	.ops = &hf_ops,
};

const struct sbx_provider *const sbx_builtin_providers[] = {
	&provider_local,
	&provider_hostfiles,
	NULL,
};
