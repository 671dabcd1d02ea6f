/* SPDX-License-Identifier: MIT */
/*
 * manifest.c - the manifest of a skills/ tree, its diff and its JSON form
 * (see manifest.h).
 *
 * Why a manifest of content hashes rather than of times: the sync must
 * upload exactly what changed, and a tree copied anew (cp -r over itself,
 * the library copied into a reclaimed sandbox) has new times but the same
 * bytes.  Hashing every file at every sync would read the whole tree each
 * time, so a hash is reused while the file's dev, inode, size, mtime and
 * ctime are those it was computed from (git's index does the same).
 *
 * The walk uses *at() calls on directory fds with O_NOFOLLOW, and a
 * symlink's target is opened with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS) from the tree's top, so nothing outside the tree is
 * ever read, whatever the tree holds.
 */
#define _GNU_SOURCE
#include "manifest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "../common/json.h"
#include "../common/util.h"

#define SKILLS_MAX_DEPTH 64
#define SKILLS_HASH_CHUNK (256 * 1024)

void skills_manifest_init(struct skills_manifest *m)
{
	memset(m, 0, sizeof(*m));
}

void skills_manifest_free(struct skills_manifest *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->e[i].path);
	free(m->e);
	skills_manifest_init(m);
}

void skills_manifest_move(struct skills_manifest *dst, struct skills_manifest *src)
{
	skills_manifest_free(dst);
	*dst = *src;
	skills_manifest_init(src);
}

/* Append a copy of e (its path duplicated).  0 or -1. */
static int manifest_add(struct skills_manifest *m, const struct skills_ent *e)
{
	if (m->n == m->alloc) {
		size_t na = m->alloc ? m->alloc * 2 : 64;
		struct skills_ent *p = realloc(m->e, na * sizeof(*p));
		if (!p)
			return -1;
		m->e = p;
		m->alloc = na;
	}
	m->e[m->n] = *e;
	m->e[m->n].path = strdup(e->path);
	if (!m->e[m->n].path)
		return -1;
	if (e->kind != SK_DIR) {
		m->bytes += e->size;
		m->files++;
	} else {
		m->dirs++;
	}
	m->n++;
	return 0;
}

static int ent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct skills_ent *)a)->path, ((const struct skills_ent *)b)->path);
}

static const struct skills_ent *manifest_find(const struct skills_manifest *m, const char *path)
{
	struct skills_ent key = { .path = (char *)path };

	if (!m || !m->n)
		return NULL;
	return bsearch(&key, m->e, m->n, sizeof(*m->e), ent_cmp);
}

static int64_t ts_ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

/* SHA-256 of fd's content from offset 0, as hex.  0 or -1 with errno. */
static int hash_fd(int fd, char out[SKILLS_SHA_HEX + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	char *chunk = malloc(SKILLS_HASH_CHUNK);
	off_t off = 0;
	int r = -1;

	if (!ctx || !chunk || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
		errno = ENOMEM;
		goto out;
	}
	for (;;) {
		ssize_t got = pread(fd, chunk, SKILLS_HASH_CHUNK, off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			goto out;
		if (got == 0)
			break;
		if (!EVP_DigestUpdate(ctx, chunk, (size_t)got)) {
			errno = EIO;
			goto out;
		}
		off += got;
	}
	if (!EVP_DigestFinal_ex(ctx, md, &mdlen) || mdlen != SKILLS_SHA_HEX / 2) {
		errno = EIO;
		goto out;
	}
	for (unsigned i = 0; i < mdlen; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	r = 0;
out:
	free(chunk);
	EVP_MD_CTX_free(ctx);
	return r;
}

bool skills_link_inside(const char *rel_dir, const char *target)
{
	int depth = 0;
	const char *p;

	if (!target[0] || target[0] == '/')
		return false;
	for (p = rel_dir; *p;) { /* components of the link's own directory */
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		if (len)
			depth++;
		p += len + (slash ? 1 : 0);
	}
	for (p = target; *p;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		if (len == 2 && p[0] == '.' && p[1] == '.') {
			if (--depth < 0)
				return false;
		} else if (len && !(len == 1 && p[0] == '.')) {
			depth++;
		}
		p += len + (slash ? 1 : 0);
	}
	return true;
}

/* rel_dir/target with "." and ".." resolved, into out ("" = the top).
 * Only called for targets skills_link_inside() accepted. */
static int link_resolve(const char *rel_dir, const char *target, struct buf *out)
{
	struct buf joined = BUF_INIT(BUF_CAP_PATH);
	char *save = NULL, *tok;
	int r = 0;

	if ((rel_dir[0] && buf_adds(&joined, rel_dir)) || buf_addpath(&joined, target))
		return -1;
	buf_reset(out);
	for (tok = strtok_r(joined.ptr, "/", &save); tok && !r; tok = strtok_r(NULL, "/", &save)) {
		if (!strcmp(tok, "."))
			continue;
		if (!strcmp(tok, "..")) {
			char *slash = out->len ? strrchr(out->ptr, '/') : NULL;
			if (slash) {
				out->len = (size_t)(slash - out->ptr);
				out->ptr[out->len] = '\0';
			} else {
				buf_reset(out);
			}
			continue;
		}
		r = out->len ? buf_addpath(out, tok) : buf_adds(out, tok);
	}
	buf_free(&joined);
	return r;
}

static int open_beneath(int rootfd, const char *rel)
{
	struct open_how how = {
		.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};

	return (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
}

struct walk {
	int rootfd;
	const struct skills_manifest *prev;
	const struct skills_limits *lim;
	bool hash;
	struct skills_manifest *out;
	struct skills_scan_result *res;
	size_t dirs;
};

static void walk_fail(struct walk *w, int err, const char *path)
{
	if (w->res->err)
		return;
	w->res->err = err;
	snprintf(w->res->err_path, sizeof(w->res->err_path), "%s", path);
}

static void walk_refuse(struct walk *w, const char *path)
{
	if (!w->res->refused++)
		snprintf(w->res->first_refused, sizeof(w->res->first_refused), "%s", path);
}

/* Fill e's size, mode, stat stamps and (when hashing) sha from fd. */
static int walk_content(struct walk *w, int fd, const struct stat *st, struct skills_ent *e)
{
	const struct skills_ent *old = manifest_find(w->prev, e->path);

	e->size = (uint64_t)st->st_size;
	e->mode = st->st_mode & 07777;
	e->dev = (uint64_t)st->st_dev;
	e->ino = (uint64_t)st->st_ino;
	e->mtime_ns = ts_ns(&st->st_mtim);
	e->ctime_ns = ts_ns(&st->st_ctim);
	e->sha[0] = '\0';
	if (w->lim->max_file && e->size > w->lim->max_file) {
		walk_fail(w, EFBIG, e->path);
		return -1;
	}
	if (!w->hash)
		return 0;
	if (old && old->kind == e->kind && old->dev == e->dev && old->ino == e->ino && old->size == e->size &&
	    old->mtime_ns == e->mtime_ns && old->ctime_ns == e->ctime_ns && old->sha[0]) {
		memcpy(e->sha, old->sha, sizeof(e->sha));
		return 0;
	}
	if (hash_fd(fd, e->sha)) {
		walk_fail(w, errno, e->path);
		return -1;
	}
	return 0;
}

static int walk_add(struct walk *w, const struct skills_ent *e)
{
	if (manifest_add(w->out, e)) {
		walk_fail(w, ENOMEM, e->path);
		return -1;
	}
	if ((w->lim->max_files && w->out->files > w->lim->max_files) ||
	    (w->lim->max_total && w->out->bytes > w->lim->max_total)) {
		walk_fail(w, ENOSPC, e->path);
		return -1;
	}
	return 0;
}

static int walk_link(struct walk *w, int dirfd, const char *name, const char *rel_dir, struct skills_ent *e)
{
	char target[4096];
	struct buf res = BUF_INIT(BUF_CAP_PATH);
	struct stat st;
	ssize_t len = readlinkat(dirfd, name, target, sizeof(target) - 1);
	int fd = -1, r = 0;

	if (len < 0)
		return errno == ENOENT ? 0 : (walk_fail(w, errno, e->path), -1);
	target[len] = '\0';
	if (!skills_link_inside(rel_dir, target) || link_resolve(rel_dir, target, &res) || !res.len) {
		walk_refuse(w, e->path);
		goto out;
	}
	fd = open_beneath(w->rootfd, res.ptr);
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		walk_refuse(w, e->path); /* a link to a link, a directory, nothing */
		goto out;
	}
	e->kind = SK_LINK;
	r = walk_content(w, fd, &st, e);
	if (!r)
		r = walk_add(w, e);
out:
	if (fd >= 0)
		close(fd);
	buf_free(&res);
	return r;
}

static int walk_dir(struct walk *w, int dirfd, const char *rel, int depth)
{
	DIR *dp;
	struct dirent *d;
	int fd, r = 0;

	if (depth > SKILLS_MAX_DEPTH || ++w->dirs > (w->lim->max_files ? w->lim->max_files : 100000)) {
		walk_fail(w, ENOSPC, rel);
		return -1;
	}
	fd = dup(dirfd);
	if (fd < 0 || !(dp = fdopendir(fd))) {
		walk_fail(w, errno, rel);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	while (!r && (errno = 0, d = readdir(dp))) {
		struct buf path = BUF_INIT(BUF_CAP_PATH);
		struct skills_ent e = { 0 };
		struct stat st;

		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if ((rel[0] && buf_adds(&path, rel)) || (rel[0] ? buf_addpath(&path, d->d_name) : buf_adds(&path, d->d_name))) {
			walk_fail(w, ENAMETOOLONG, rel);
			r = -1;
			break;
		}
		e.path = path.ptr;
		if (fstatat(dirfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			if (errno != ENOENT) { /* removed meanwhile: not there */
				walk_fail(w, errno, path.ptr);
				r = -1;
			}
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			e.kind = SK_DIR;
			e.mode = st.st_mode & 07777;
			if (sub < 0) {
				if (errno != ENOENT) {
					walk_fail(w, errno, path.ptr);
					r = -1;
				}
			} else {
				r = walk_add(w, &e);
				if (!r)
					r = walk_dir(w, sub, path.ptr, depth + 1);
				close(sub);
			}
		} else if (S_ISREG(st.st_mode)) {
			int f = openat(dirfd, d->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
			e.kind = SK_FILE;
			if (f < 0) {
				if (errno != ENOENT) {
					walk_fail(w, errno, path.ptr);
					r = -1;
				}
			} else {
				r = fstat(f, &st) ? (walk_fail(w, errno, path.ptr), -1) : 0;
				if (!r && S_ISREG(st.st_mode))
					r = walk_content(w, f, &st, &e);
				if (!r && S_ISREG(st.st_mode))
					r = walk_add(w, &e);
				close(f);
			}
		} else if (S_ISLNK(st.st_mode)) {
			r = walk_link(w, dirfd, d->d_name, rel, &e);
		} /* FIFOs, sockets, devices: not part of a projection */
		buf_free(&path);
	}
	if (!r && errno) {
		walk_fail(w, errno, rel);
		r = -1;
	}
	closedir(dp);
	return r;
}

int skills_manifest_scan(const char *root, const struct skills_manifest *prev, const struct skills_limits *lim,
	bool hash, struct skills_manifest *out, struct skills_scan_result *res)
{
	static const struct skills_limits none;
	struct walk w = { .prev = prev, .lim = lim ? lim : &none, .hash = hash, .out = out, .res = res };
	int r;

	memset(res, 0, sizeof(*res));
	skills_manifest_init(out);
	w.rootfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (w.rootfd < 0) {
		walk_fail(&w, errno, "");
		return -1;
	}
	r = walk_dir(&w, w.rootfd, "", 0);
	close(w.rootfd);
	if (out->n)
		qsort(out->e, out->n, sizeof(*out->e), ent_cmp);
	return r ? -1 : 0;
}

/* ---- diff ------------------------------------------------------------------- */

static bool ent_same(const struct skills_ent *a, const struct skills_ent *b)
{
	if (a->kind == SK_DIR)
		return b->kind == SK_DIR;
	/* a file and a link to identical content are the same in the sandbox */
	return b->kind != SK_DIR && a->size == b->size && a->mode == b->mode && !strcmp(a->sha, b->sha);
}

/* path is dir itself or lies under it. */
static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return dir[0] && !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}

struct oplist {
	struct skills_op *v;
	size_t n, alloc;
};

static int op_add(struct oplist *l, enum skills_op_kind kind, const char *path, bool is_dir,
	const struct skills_ent *to)
{
	if (l->n == l->alloc) {
		size_t na = l->alloc ? l->alloc * 2 : 32;
		struct skills_op *p = realloc(l->v, na * sizeof(*p));
		if (!p)
			return -1;
		l->v = p;
		l->alloc = na;
	}
	l->v[l->n++] = (struct skills_op){ .kind = kind, .path = path, .is_dir = is_dir, .to = to };
	return 0;
}

int skills_diff(const struct skills_manifest *from, const struct skills_manifest *to, struct skills_op **ops,
	size_t *n)
{
	struct oplist rm = { 0 }, mk = { 0 }, up = { 0 };
	const char *removed_dir = "";
	size_t i = 0, j = 0;
	int r = 0;

	while (!r && (i < from->n || j < to->n)) {
		const struct skills_ent *a = i < from->n ? &from->e[i] : NULL, *b = j < to->n ? &to->e[j] : NULL;
		int c = !a ? 1 : !b ? -1 : strcmp(a->path, b->path);

		if (c < 0 || (c == 0 && a->kind != b->kind && (a->kind == SK_DIR || b->kind == SK_DIR))) {
			/* a is gone (or changes between directory and file) */
			if (!under(a->path, removed_dir)) {
				r = op_add(&rm, SKOP_REMOVE, a->path, a->kind == SK_DIR, NULL);
				if (a->kind == SK_DIR)
					removed_dir = a->path;
			}
			i++;
			if (c < 0)
				continue;
		}
		if (c > 0 || c == 0) {
			bool fresh = c > 0 || (a->kind != b->kind && (a->kind == SK_DIR || b->kind == SK_DIR));
			if (c == 0 && !fresh)
				i++;
			if (b->kind == SK_DIR) {
				if (fresh)
					r = r ? r : op_add(&mk, SKOP_MKDIR, b->path, true, b);
			} else if (fresh || !ent_same(a, b)) {
				r = r ? r : op_add(&up, SKOP_UPLOAD, b->path, false, b);
			}
			j++;
		}
	}
	*ops = NULL;
	*n = 0;
	if (!r && (mk.n || up.n)) {
		size_t total = rm.n + mk.n + up.n;
		struct skills_op *all = realloc(rm.v, (total ? total : 1) * sizeof(*all));
		if (!all) {
			r = -1;
		} else {
			rm.v = all;
			if (mk.n) /* memcpy from NULL is undefined, even of 0 bytes */
				memcpy(all + rm.n, mk.v, mk.n * sizeof(*all));
			if (up.n)
				memcpy(all + rm.n + mk.n, up.v, up.n * sizeof(*all));
			rm.n = total;
		}
	}
	free(mk.v);
	free(up.v);
	if (r) {
		free(rm.v);
		return -1;
	}
	*ops = rm.v;
	*n = rm.n;
	return 0;
}

/* The operation that decides path's state, or NULL (none needed). */
static const struct skills_op *op_for(const struct skills_op *ops, size_t n, const char *path, bool removal)
{
	for (size_t k = 0; k < n; k++) {
		const struct skills_op *o = &ops[k];
		if (removal ? o->kind == SKOP_REMOVE && (o->is_dir ? under(path, o->path) : !strcmp(path, o->path))
			    : o->kind != SKOP_REMOVE && !strcmp(path, o->path))
			return o;
	}
	return NULL;
}

int skills_manifest_result(const struct skills_manifest *from, const struct skills_manifest *to,
	const struct skills_op *ops, size_t n, struct skills_manifest *out)
{
	size_t i = 0, j = 0;
	int r = 0;

	skills_manifest_init(out);
	while (!r && (i < from->n || j < to->n)) {
		const struct skills_ent *a = i < from->n ? &from->e[i] : NULL, *b = j < to->n ? &to->e[j] : NULL;
		int c = !a ? 1 : !b ? -1 : strcmp(a->path, b->path);
		const struct skills_op *rm, *mk;

		if (c < 0) { /* removed: still there unless its removal (or its directory's) worked */
			rm = op_for(ops, n, a->path, true);
			if (!rm || !rm->done)
				r = manifest_add(out, a);
			i++;
		} else if (c > 0) { /* new: there if it was made */
			mk = op_for(ops, n, b->path, false);
			if (mk && mk->done)
				r = manifest_add(out, b);
			j++;
		} else { /* both: the new one if nothing was needed or it was made */
			mk = op_for(ops, n, b->path, false);
			rm = op_for(ops, n, a->path, true);
			if (!mk || mk->done)
				r = manifest_add(out, b);
			else if (!rm || !rm->done)
				r = manifest_add(out, a);
			i++;
			j++;
		}
	}
	return r;
}

/* ---- persistence ---------------------------------------------------------------- */

static const char *kind_name[] = { "dir", "file", "link" };

int skills_manifest_save(const char *path, const char *remote_id, const struct skills_manifest *m)
{
	json_t *o = json_object(), *a = json_array();
	char *text = NULL;
	int r = -1;

	if (!o || !a)
		goto out;
	for (size_t i = 0; i < m->n; i++) {
		const struct skills_ent *e = &m->e[i];
		json_t *row = json_pack("[s,s,I,i,s,I,I,I,I]", e->path, kind_name[e->kind], (json_int_t)e->size,
			(int)e->mode, e->sha, (json_int_t)e->dev, (json_int_t)e->ino, (json_int_t)e->mtime_ns,
			(json_int_t)e->ctime_ns);
		if (!row || json_array_append_new(a, row))
			goto out;
	}
	if (json_object_set_new(o, "version", json_integer(1)) ||
	    json_object_set_new(o, "remote_id", json_string(remote_id ? remote_id : "")) ||
	    json_object_set(o, "entries", a))
		goto out;
	text = json_dumps(o, JSON_COMPACT);
	if (!text) {
		errno = ENOMEM;
		goto out;
	}
	r = util_write_atomic(path, text, strlen(text), 0600);
out:
	free(text);
	json_decref(a);
	json_decref(o);
	return r;
}

int skills_manifest_load(const char *path, const char *remote_id, struct skills_manifest *m)
{
	json_t *o = json_read_file(path), *a, *row;
	const char *rid = NULL;
	size_t i;

	skills_manifest_init(m);
	if (!o)
		return -1;
	a = json_object_get(o, "entries");
	if (json_unpack(o, "{s:s}", "remote_id", &rid) || strcmp(rid, remote_id ? remote_id : "") || !json_is_array(a))
		goto bad;
	json_array_foreach(a, i, row)
	{
		const char *p, *kind, *sha;
		json_int_t size, dev, ino, mt, ct;
		int mode, k;
		struct skills_ent e = { 0 };

		if (json_unpack(row, "[s,s,I,i,s,I,I,I,I]", &p, &kind, &size, &mode, &sha, &dev, &ino, &mt, &ct))
			goto bad;
		for (k = 0; k < 3 && strcmp(kind, kind_name[k]); k++)
			;
		if (k == 3 || !p[0] || p[0] == '/' || strlen(sha) > SKILLS_SHA_HEX || size < 0 ||
		    (m->n && strcmp(m->e[m->n - 1].path, p) >= 0))
			goto bad;
		e.path = (char *)p;
		e.kind = (enum skills_kind)k;
		e.size = (uint64_t)size;
		e.mode = (mode_t)mode & 07777;
		memcpy(e.sha, sha, strlen(sha) + 1);
		e.dev = (uint64_t)dev;
		e.ino = (uint64_t)ino;
		e.mtime_ns = mt;
		e.ctime_ns = ct;
		if (manifest_add(m, &e))
			goto bad;
	}
	json_decref(o);
	return 0;
bad:
	json_decref(o);
	skills_manifest_free(m);
	return -1;
}
