/* SPDX-License-Identifier: MIT */
/*
 * snapshot.c - the snapshot engine (see snapshot.h): the walk that makes one
 * tree equal to another, used three ways, the manifest, the journal of a
 * restore, and the list of snapshots a restore is reading.
 *
 * One walk, three uses (struct sync, enum sync_mode):
 *   TAKE_FIRST  live -> a fresh copy, while the sandbox runs; files
 *               unchanged since the previous snapshot are hard links to its
 *               copies;
 *   TAKE_FINAL  live -> that copy again, the sandbox frozen: a file whose
 *               live stat is still the one it was copied from stays, the
 *               rest is copied now.  So the freeze lasts a walk of stat
 *               calls plus what changed during the first pass, not a copy
 *               of the tree (rsync's two-pass trick);
 *   RESTORE     a snapshot -> the live tree, in place: a live file whose
 *               stat is still what the snapshot's manifest recorded for it
 *               stays, everything else is replaced by a copy (a temporary
 *               name, then rename over), extra entries are removed.
 *
 * "Unchanged" is decided as git's index does: same dev, inode, size, mtime
 * and ctime.  ctime cannot be set by a user and moves with every write,
 * chmod, chown, rename and xattr change; a new file has a new inode and
 * ctime.  What it cannot see is a change within the same ctime tick as the
 * stat that recorded the file, which the kernel's fine-grained timestamps
 * after a stat (6.13+: ext4, XFS, btrfs, tmpfs) rule out; and a file
 * changed while it was being copied is recorded "dirty" (its stat before
 * and after the copy differ), so the next pass copies it again.
 *
 * Why hard links only between snapshots: a snapshot is never written
 * (through the mount it is EROFS; on the host it is root's, 0700), so two
 * snapshots may share an inode; a live file may be changed in place by a
 * job, which would change every snapshot linked to it.  Reflinks (FICLONE)
 * share blocks copy-on-write and are safe everywhere, restore included.
 *
 * Why a journal and not a copy of the old state: a restore is idempotent
 * (it makes live equal to an immutable snapshot), so finishing it is
 * always possible, costs only what is left to do and needs no room for a
 * second copy.  The journal names the snapshot; rmdir of a snapshot that a
 * restore reads is EBUSY, so it is still there to finish with.
 */
#define _GNU_SOURCE
#include "snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/json.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/names.h"
#include "../common/udir.h"
#include "../common/util.h"

#define SNAP_MANIFEST_MAX (512ULL << 20) /* bytes of a manifest read back (~6M files) */
#define SNAP_XATTR_MAX (64 * 1024)       /* XATTR_SIZE_MAX, XATTR_LIST_MAX */
#define SNAP_PATH_MAX (SNAP_MAX_DEPTH * (NAME_MAX + 1) + 64)
#define SNAP_SCOPE_MAX 160

static const char *const snap_dirs[] = { "workspace", "uploads", "outputs" };
static const enum layout_dir snap_layout[] = { LAYOUT_WORKSPACE, LAYOUT_UPLOADS, LAYOUT_OUTPUTS };
#define SNAP_NDIRS (sizeof(snap_dirs) / sizeof(snap_dirs[0]))

/* ---- the thread's scope for log lines ------------------------------------------- */

/* "user/thread" of thread_dir (state/users/<user>/threads/<thread>). */
static void snap_scope(const char *thread_dir, char out[SNAP_SCOPE_MAX])
{
	const char *t = strrchr(thread_dir, '/'), *u = t;
	int slashes = 0;

	/* back over "/threads" to the user's name */
	while (u && u > thread_dir && slashes < 2)
		if (*--u == '/')
			slashes++;
	if (t && slashes == 2 && (size_t)(t - u) > sizeof("/threads") - 1)
		snprintf(out, SNAP_SCOPE_MAX, "%.*s/%s", (int)(t - u - 1 - (int)(sizeof("/threads") - 1)), u + 1, t + 1);
	else
		snprintf(out, SNAP_SCOPE_MAX, "%s", thread_dir);
}

/* A path from a sandbox's tree in a log line: bytes that are not printable
 * are shown as '?', so a name with a newline cannot forge a line. */
static const char *snap_printable(const char *s, char *out, size_t len)
{
	size_t i = 0;

	for (; s[i] && i + 1 < len; i++)
		out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	out[i] = '\0';
	return out;
}

/* ---- records: what each copy was made from ------------------------------------------ */

enum how { HOW_COPY, HOW_LINK, HOW_REFLINK };

struct rec {
	struct rec *next;
	uint64_t dev, ino, size;
	int64_t ms, mn, cs, cn; /* mtime, ctime */
	bool dirty;             /* changed while it was copied: never "unchanged" */
	enum how how;           /* how the copy got there (the take's counts) */
	char path[];            /* "workspace/a/b" */
};

struct recmap {
	struct rec **b;
	size_t nb, n;
};

static uint64_t rec_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static void recmap_free(struct recmap *m)
{
	for (size_t i = 0; i < m->nb; i++)
		for (struct rec *r = m->b[i], *next; r; r = next) {
			next = r->next;
			free(r);
		}
	free(m->b);
	memset(m, 0, sizeof(*m));
}

static const struct rec *recmap_get(const struct recmap *m, const char *path)
{
	if (!m || !m->nb)
		return NULL;
	for (const struct rec *r = m->b[rec_hash(path) & (m->nb - 1)]; r; r = r->next)
		if (!strcmp(r->path, path))
			return r;
	return NULL;
}

static int recmap_grow(struct recmap *m)
{
	size_t nb = m->nb ? m->nb * 2 : 1024;
	struct rec **b = calloc(nb, sizeof(*b));

	if (!b)
		return ENOMEM;
	for (size_t i = 0; i < m->nb; i++)
		for (struct rec *r = m->b[i], *next; r; r = next) {
			next = r->next;
			size_t h = rec_hash(r->path) & (nb - 1);
			r->next = b[h];
			b[h] = r;
		}
	free(m->b);
	m->b = b;
	m->nb = nb;
	return 0;
}

/* Add (or replace) the record of path. */
static int recmap_put(struct recmap *m, const char *path, const struct rec *v)
{
	size_t len = strlen(path), h;
	struct rec *r, **pp;

	if (m->n >= m->nb && recmap_grow(m))
		return ENOMEM;
	h = rec_hash(path) & (m->nb - 1);
	for (pp = &m->b[h]; *pp; pp = &(*pp)->next)
		if (!strcmp((*pp)->path, path))
			break;
	r = malloc(sizeof(*r) + len + 1);
	if (!r)
		return ENOMEM;
	*r = *v;
	memcpy(r->path, path, len + 1);
	if (*pp) {
		r->next = (*pp)->next;
		free(*pp);
	} else {
		r->next = NULL;
		m->n++;
	}
	*pp = r;
	return 0;
}

static void rec_of_stat(struct rec *r, const struct stat *st)
{
	memset(r, 0, sizeof(*r));
	r->dev = st->st_dev;
	r->ino = st->st_ino;
	r->size = (uint64_t)st->st_size;
	r->ms = st->st_mtim.tv_sec;
	r->mn = st->st_mtim.tv_nsec;
	r->cs = st->st_ctim.tv_sec;
	r->cn = st->st_ctim.tv_nsec;
}

static bool rec_matches(const struct rec *r, const struct stat *st)
{
	return r && !r->dirty && r->dev == (uint64_t)st->st_dev && r->ino == (uint64_t)st->st_ino &&
	       r->size == (uint64_t)st->st_size && r->ms == st->st_mtim.tv_sec && r->mn == st->st_mtim.tv_nsec &&
	       r->cs == st->st_ctim.tv_sec && r->cn == st->st_ctim.tv_nsec;
}

/* ---- the manifest: one record per regular file, NUL-terminated ------------------------- */

static int manifest_write(int dirfd, const struct recmap *m)
{
	int fd = openat(dirfd, "manifest", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	struct buf b = BUF_INIT(1 << 30);
	int err = 0;

	if (fd < 0)
		return errno;
	for (size_t i = 0; i < m->nb && !err; i++)
		for (const struct rec *r = m->b[i]; r && !err; r = r->next) {
			if (buf_addf(&b, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
					 " %d %s",
				    r->dev, r->ino, r->size, r->ms, r->mn, r->cs, r->cn, r->dirty ? 1 : 0, r->path) ||
			    buf_add(&b, "", 1)) {
				err = errno ? errno : ENOMEM;
				break;
			}
			if (b.len >= (1 << 20)) {
				if (write(fd, b.ptr, b.len) != (ssize_t)b.len)
					err = errno ? errno : EIO;
				buf_reset(&b);
			}
		}
	if (!err && b.len && write(fd, b.ptr, b.len) != (ssize_t)b.len)
		err = errno ? errno : EIO;
	buf_free(&b);
	if (close(fd) && !err)
		err = errno;
	return err;
}

/* The manifest of the snapshot whose directory is dirfd; a missing one is
 * an empty map (nothing counts as unchanged). */
static int manifest_read(int dirfd, struct recmap *m)
{
	struct stat st;
	char *text = NULL, *p, *end;
	int fd = openat(dirfd, "manifest", O_RDONLY | O_NOFOLLOW | O_CLOEXEC), err = 0;
	size_t got = 0;

	if (fd < 0)
		return errno == ENOENT ? 0 : errno;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > SNAP_MANIFEST_MAX) {
		err = errno ? errno : EFBIG;
		goto out;
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		err = ENOMEM;
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	text[got] = '\0';
	for (p = text, end = text + got; p < end && !err; p += strlen(p) + 1) {
		struct rec r = { 0 };
		int dirty = 0, off = 0;
		if (sscanf(p, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %" SCNd64 " %d %n",
			    &r.dev, &r.ino, &r.size, &r.ms, &r.mn, &r.cs, &r.cn, &dirty, &off) < 8 ||
		    !off || !p[off])
			continue; /* not a record: nothing counts as unchanged for it */
		r.dirty = dirty != 0;
		err = recmap_put(m, p + off, &r);
	}
out:
	free(text);
	close(fd);
	return err;
}

/* ---- the walk ---------------------------------------------------------------------------- */

enum sync_mode { SYNC_TAKE_FIRST, SYNC_TAKE_FINAL, SYNC_RESTORE };

struct sync {
	enum sync_mode mode;
	const struct recmap *ref; /* FIRST: the previous snapshot's; FINAL: the first pass's; RESTORE: the snapshot's */
	struct recmap *out;       /* TAKE: what each copy was made from (the new manifest) */
	bool clone;               /* FICLONE is still worth a try */
	bool map_ids;             /* RESTORE: from_uid:from_gid's entries become to_uid:to_gid's */
	uid_t from_uid, to_uid;
	gid_t from_gid, to_gid;
	struct snap_stats *st;
	char *path;               /* "workspace/a/b": the entry being worked on */
	size_t plen;
	unsigned long seq;        /* temporary names */
	char *xlist, *xval, *xdlist; /* xattr scratch, SNAP_XATTR_MAX each */
	const char *scope;
	bool warned_lease;
};

/* Errors that mean a sandbox changed the live tree under the walk: the
 * entry is skipped (the final pass of a take runs frozen; a restore's
 * sandbox is frozen too, so only a user through the mount races it). */
static bool sync_raced(int err)
{
	return err == ENOENT || err == ELOOP || err == ENOTDIR || err == ESTALE;
}

static int path_push(struct sync *s, const char *name)
{
	size_t n = strlen(name);

	if (s->plen + 1 + n + 1 > SNAP_PATH_MAX)
		return ENAMETOOLONG;
	if (s->plen)
		s->path[s->plen++] = '/';
	memcpy(s->path + s->plen, name, n + 1);
	s->plen += n;
	return 0;
}

static void path_pop(struct sync *s, size_t len)
{
	s->plen = len;
	s->path[len] = '\0';
}

static uid_t sync_uid(const struct sync *s, uid_t u)
{
	return s->map_ids && u == s->from_uid ? s->to_uid : u;
}

static gid_t sync_gid(const struct sync *s, gid_t g)
{
	return s->map_ids && g == s->from_gid ? s->to_gid : g;
}

/* What a temporary name is made for. */
enum tmp_kind { TMP_FILE, TMP_SYMLINK, TMP_NODE };

/* Make a new object under a name of our own in dst, to be renamed into
 * place: a regular file (returns its fd, write-only), a symlink to target,
 * or a node of mode (FIFO, socket).  The name has 64 random bits, so a
 * sandbox cannot plant the names a restore will use; one that exists
 * anyway is skipped for another.  An fd (or 0), or -1 with errno. */
static int sync_make_tmp(struct sync *s, int dst, enum tmp_kind kind, const char *target, mode_t mode,
	char out[64])
{
	for (int tries = 0; tries < 16; tries++) {
		unsigned long long rnd = 0;
		int r;
		if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			rnd ^= (unsigned long long)getpid() << 32 | (unsigned long long)time(NULL);
		snprintf(out, 64, ".sbxfs-snap.%016llx.%lu", rnd, ++s->seq);
		if (kind == TMP_FILE)
			r = openat(dst, out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		else if (kind == TMP_SYMLINK)
			r = symlinkat(target, dst, out);
		else
			r = mknodat(dst, out, mode, 0);
		if (r >= 0 || errno != EEXIST)
			return r;
	}
	errno = EEXIST;
	return -1;
}

/* rm -rf of an entry of dst: never following, never opening anything but
 * directories (udir). */
static int sync_remove(struct sync *s, int dst, const char *name)
{
	char shown[128];

	if (!udir_remove(dst, name))
		return 0;
	log_warn(s->scope, "snapshot: cannot remove %s: %s", snap_printable(s->path, shown, sizeof(shown)),
		strerror(errno));
	return errno;
}

/* Put tmp in place of name in dst: what was there goes (a directory with
 * everything in it). */
static int sync_replace(struct sync *s, int dst, const char *tmp, const char *name, bool had_dir)
{
	int err = had_dir ? sync_remove(s, dst, name) : 0;

	if (!err && renameat(dst, tmp, dst, name))
		err = errno;
	if (err)
		unlinkat(dst, tmp, 0);
	return err;
}

/* Copy the extended attributes of sfd to dfd; prune: remove those dfd has
 * and sfd has not (a directory kept from before).  Attributes the
 * destination refuses (a namespace the file system lacks) are left out. */
static void sync_xattrs(struct sync *s, int dfd, int sfd, bool prune)
{
	ssize_t n = flistxattr(sfd, s->xlist, SNAP_XATTR_MAX), m;

	if (n < 0)
		n = 0;
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(s->xlist + i) + 1) {
		ssize_t v = fgetxattr(sfd, s->xlist + i, s->xval, SNAP_XATTR_MAX);
		if (v >= 0 && fsetxattr(dfd, s->xlist + i, s->xval, (size_t)v, 0))
			log_debug(s->scope, "snapshot: xattr %.60s not kept: %s", s->xlist + i, strerror(errno));
	}
	if (!prune || (m = flistxattr(dfd, s->xdlist, SNAP_XATTR_MAX)) <= 0)
		return;
	for (ssize_t i = 0; i < m; i += (ssize_t)strlen(s->xdlist + i) + 1) {
		bool found = false;
		for (ssize_t j = 0; j < n && !found; j += (ssize_t)strlen(s->xlist + j) + 1)
			found = !strcmp(s->xlist + j, s->xdlist + i);
		if (!found)
			fremovexattr(dfd, s->xdlist + i);
	}
}

/* Owner, mode, xattrs and times of st onto the open dfd (chown first: it
 * clears set-id bits, which the chmod puts back). */
static int sync_meta_fd(struct sync *s, int dfd, int sfd, const struct stat *st, bool prune)
{
	struct timespec ts[2] = { st->st_atim, st->st_mtim };

	if (fchown(dfd, sync_uid(s, st->st_uid), sync_gid(s, st->st_gid)) || fchmod(dfd, st->st_mode & 07777))
		return errno;
	sync_xattrs(s, dfd, sfd, prune);
	return futimens(dfd, ts) ? errno : 0;
}

/* Owner, mode and times of a FIFO or socket, never opened: an O_PATH fd,
 * and chmod/utimensat through its /proc link (which names the inode). */
static int sync_meta_special(struct sync *s, int dst, const char *name, const struct stat *st)
{
	struct timespec ts[2] = { st->st_atim, st->st_mtim };
	int fd = openat(dst, name, O_PATH | O_NOFOLLOW | O_CLOEXEC), err = 0;
	struct stat now;
	char proc[64];

	if (fd < 0)
		return errno;
	if (fstat(fd, &now) || (now.st_mode & S_IFMT) != (st->st_mode & S_IFMT))
		err = errno ? errno : ENOENT;
	else if (fchownat(fd, "", sync_uid(s, st->st_uid), sync_gid(s, st->st_gid), AT_EMPTY_PATH) ||
		 str_fmt(proc, sizeof(proc), "/proc/self/fd/%d", fd) || chmod(proc, st->st_mode & 07777) ||
		 utimensat(AT_FDCWD, proc, ts, 0))
		err = errno;
	close(fd);
	return err;
}

/* The data of sfd (size bytes) into the empty dfd: a reflink, or a copy of
 * the data extents only, so holes stay holes. */
static int sync_copy_data(struct sync *s, int dfd, int sfd, off_t size, enum how *how)
{
	off_t off = 0;

	if (s->clone) {
		if (!ioctl(dfd, FICLONE, sfd)) {
			*how = HOW_REFLINK;
			return 0;
		}
		if (errno != EOPNOTSUPP && errno != EXDEV && errno != EINVAL && errno != ENOTTY && errno != ENOSYS &&
		    errno != EPERM)
			return errno;
		s->clone = false; /* this file system shares no blocks: copies from now on */
	}
	*how = HOW_COPY;
	while (off < size) {
		off_t data = lseek(sfd, off, SEEK_DATA), hole;
		if (data < 0 && errno == ENXIO)
			break; /* only a hole is left */
		if (data < 0)
			return errno;
		if (data >= size)
			break;
		hole = lseek(sfd, data, SEEK_HOLE);
		if (hole < 0)
			return errno;
		if (hole > size)
			hole = size;
		while (data < hole) {
			loff_t in = data, out = data;
			ssize_t n = copy_file_range(sfd, &in, dfd, &out, (size_t)(hole - data), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return errno;
			if (n == 0) { /* the file shrank under us: the rest is a hole */
				hole = data;
				break;
			}
			data += n;
		}
		off = hole > off ? hole : off + 1;
	}
	return ftruncate(dfd, size) ? errno : 0;
}

/* The regular file name of src, as a new file in place of name in dst.
 * The source is opened O_PATH, checked, then opened for reading through
 * its /proc link (which names that inode: no second lookup a sandbox
 * could redirect to a FIFO or a device). */
static int sync_copy_file(struct sync *s, int dst, int src, const char *name, const struct stat *want,
	bool had, bool had_dir)
{
	struct stat a, b;
	char tmp[64], proc[64], shown[128];
	int pfd = -1, sfd = -1, dfd = -1, err = 0;
	enum how how = HOW_COPY;
	bool made = false;

	pfd = openat(src, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0) {
		err = errno;
		goto out;
	}
	if (fstat(pfd, &a) || !S_ISREG(a.st_mode) || a.st_dev != want->st_dev || a.st_ino != want->st_ino) {
		err = ENOENT; /* replaced since the walk looked: skipped (raced) */
		goto out;
	}
	if (str_fmt(proc, sizeof(proc), "/proc/self/fd/%d", pfd)) {
		err = EIO;
		goto out;
	}
	/* O_NONBLOCK: a lease a job holds fails the open at once instead of
	 * holding the walk for lease-break-time; O_NOATIME: a look changes
	 * nothing */
	sfd = open(proc, O_RDONLY | O_NONBLOCK | O_NOATIME | O_CLOEXEC);
	if (sfd < 0 && errno == EPERM)
		sfd = open(proc, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (sfd < 0) {
		err = errno == EWOULDBLOCK ? EBUSY : errno;
		if (err == EBUSY && s->mode != SYNC_TAKE_FIRST)
			log_warn(s->scope, "snapshot: %s is held by a lease: cannot copy it",
				snap_printable(s->path, shown, sizeof(shown)));
		goto out;
	}
	if (fstat(sfd, &a)) {
		err = errno;
		goto out;
	}
	dfd = sync_make_tmp(s, dst, TMP_FILE, NULL, 0, tmp);
	if (dfd < 0) {
		err = errno;
		goto out;
	}
	made = true;
	err = sync_copy_data(s, dfd, sfd, a.st_size, &how);
	if (!err)
		err = sync_meta_fd(s, dfd, sfd, &a, false);
	if (!err && fstat(sfd, &b))
		err = errno;
	if (err)
		goto out;
	if (close(dfd)) {
		dfd = -1;
		err = errno;
		goto out;
	}
	dfd = -1;
	err = sync_replace(s, dst, tmp, name, had && had_dir);
	made = false;
	if (err)
		goto out;
	if (s->out) {
		struct rec r;
		rec_of_stat(&r, &a);
		r.how = how;
		/* written while we copied: the next pass copies it again */
		r.dirty = b.st_size != a.st_size || b.st_mtim.tv_sec != a.st_mtim.tv_sec ||
			  b.st_mtim.tv_nsec != a.st_mtim.tv_nsec || b.st_ctim.tv_sec != a.st_ctim.tv_sec ||
			  b.st_ctim.tv_nsec != a.st_ctim.tv_nsec;
		err = recmap_put(s->out, s->path, &r);
	}
	s->st->files++;
	s->st->bytes += (uint64_t)a.st_size;
	if (how == HOW_REFLINK) {
		s->st->reflinked++;
		s->st->bytes_shared += (uint64_t)a.st_size;
	} else {
		s->st->copied++;
		s->st->bytes_copied += (uint64_t)a.st_size;
	}
out:
	if (dfd >= 0)
		close(dfd);
	if (made)
		unlinkat(dst, tmp, 0);
	if (sfd >= 0)
		close(sfd);
	if (pfd >= 0)
		close(pfd);
	return err;
}

/* A take's first pass: the live file is what the previous snapshot copied
 * (its manifest says so): link to that copy.  1 when linked, 0 when not
 * possible (then copy), or -errno. */
static int sync_link_prev(struct sync *s, int dst, int ref, const char *name, const struct rec *r)
{
	/* the previous snapshot is ours and never written: its manifest says
	 * what its copy is, without a look (EPERM: a directory there) */
	if (ref < 0)
		return 0;
	if (linkat(ref, name, dst, name, 0))
		return errno == ENOENT || errno == EMLINK || errno == EEXIST || errno == EPERM ? 0 : -errno;
	struct rec copy = *r;
	copy.how = HOW_LINK;
	if (recmap_put(s->out, s->path, &copy))
		return -ENOMEM;
	s->st->files++;
	s->st->linked++;
	s->st->bytes += r->size;
	s->st->bytes_shared += r->size;
	return 1;
}

static void sync_count_kept(struct sync *s, const struct rec *r)
{
	s->st->files++;
	s->st->kept++;
	s->st->bytes += r->size;
	if (r->how == HOW_COPY)
		s->st->bytes_copied += r->size;
	else
		s->st->bytes_shared += r->size;
	if (r->how == HOW_LINK)
		s->st->linked++;
	else if (r->how == HOW_REFLINK)
		s->st->reflinked++;
	else
		s->st->copied++;
}

static int sync_file(struct sync *s, int dst, int src, int ref, const char *name, const struct stat *ss, bool had,
	const struct stat *ds)
{
	const struct rec *r = recmap_get(s->ref, s->path);
	int lr;

	switch (s->mode) {
	case SYNC_TAKE_FIRST:
		if (!had && rec_matches(r, ss)) {
			lr = sync_link_prev(s, dst, ref, name, r);
			if (lr)
				return lr < 0 ? -lr : 0;
		}
		break;
	case SYNC_TAKE_FINAL:
		if (had && S_ISREG(ds->st_mode) && rec_matches(r, ss)) {
			sync_count_kept(s, r);
			return recmap_put(s->out, s->path, r);
		}
		break;
	case SYNC_RESTORE:
		if (had && S_ISREG(ds->st_mode) && rec_matches(r, ds)) {
			s->st->files++;
			s->st->kept++;
			s->st->bytes += (uint64_t)ds->st_size;
			return 0;
		}
		break;
	}
	return sync_copy_file(s, dst, src, name, ss, had, had && S_ISDIR(ds->st_mode));
}

static int sync_symlink(struct sync *s, int dst, int src, const char *name, const struct stat *ss, bool had,
	const struct stat *ds)
{
	struct timespec ts[2] = { ss->st_atim, ss->st_mtim };
	char target[PATH_MAX + 1], cur[PATH_MAX + 1], tmp[64];
	ssize_t n = readlinkat(src, name, target, sizeof(target) - 1), m = -1;
	int err = 0;

	if (n < 0)
		return errno;
	target[n] = '\0';
	if (had && S_ISLNK(ds->st_mode))
		m = readlinkat(dst, name, cur, sizeof(cur) - 1);
	if (m != n || memcmp(cur, target, (size_t)n)) {
		if (sync_make_tmp(s, dst, TMP_SYMLINK, target, 0, tmp) < 0)
			return errno;
		err = sync_replace(s, dst, tmp, name, had && S_ISDIR(ds->st_mode));
	}
	if (!err && (fchownat(dst, name, sync_uid(s, ss->st_uid), sync_gid(s, ss->st_gid), AT_SYMLINK_NOFOLLOW) ||
			    utimensat(dst, name, ts, AT_SYMLINK_NOFOLLOW)))
		err = errno;
	if (!err)
		s->st->symlinks++;
	return err;
}

/* A FIFO or a socket: made anew (mknod), never opened. */
static int sync_special(struct sync *s, int dst, const char *name, const struct stat *ss, bool had,
	const struct stat *ds)
{
	char tmp[64];
	int err = 0;

	if (!(had && (ds->st_mode & S_IFMT) == (ss->st_mode & S_IFMT))) {
		if (sync_make_tmp(s, dst, TMP_NODE, NULL, (ss->st_mode & S_IFMT) | 0600, tmp) < 0)
			return errno;
		err = sync_replace(s, dst, tmp, name, had && S_ISDIR(ds->st_mode));
	}
	if (!err)
		err = sync_meta_special(s, dst, name, ss);
	if (!err)
		s->st->specials++;
	return err;
}

static int sync_dir(struct sync *s, int dst, int src, int ref, int depth);

static int sync_subdir(struct sync *s, int dst, int src, int ref, const char *name, const struct stat *ss,
	bool had, const struct stat *ds, int depth)
{
	int sfd = -1, dfd = -1, rfd = -1, err = 0;
	struct stat now;
	char shown[128];

	if (depth >= SNAP_MAX_DEPTH) {
		log_warn(s->scope, "snapshot: %s is deeper than %d levels", snap_printable(s->path, shown, sizeof(shown)),
			SNAP_MAX_DEPTH);
		return ELOOP;
	}
	sfd = udir_openat(src, name);
	if (sfd < 0 || fstat(sfd, &now) || now.st_dev != ss->st_dev || now.st_ino != ss->st_ino) {
		err = sfd < 0 ? errno : ENOENT;
		goto out;
	}
	if (had && !S_ISDIR(ds->st_mode)) {
		if ((err = sync_remove(s, dst, name)))
			goto out;
		had = false;
	}
	if (!had && mkdirat(dst, name, 0700)) {
		err = errno;
		goto out;
	}
	dfd = udir_openat(dst, name);
	if (dfd < 0) {
		err = errno;
		goto out;
	}
	/* at once: never a root-owned directory in a sandbox's tree, even if
	 * the walk stops inside it */
	if (!had && s->mode == SYNC_RESTORE && fchown(dfd, sync_uid(s, ss->st_uid), sync_gid(s, ss->st_gid))) {
		err = errno;
		goto out;
	}
	if (ref >= 0)
		rfd = openat(ref, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	err = sync_dir(s, dfd, sfd, rfd, depth + 1);
	if (!err && !fstat(sfd, &now)) /* its times after its content moved */
		err = sync_meta_fd(s, dfd, sfd, &now, true);
	if (!err)
		s->st->dirs++;
out:
	if (rfd >= 0)
		close(rfd);
	if (dfd >= 0)
		close(dfd);
	if (sfd >= 0)
		close(sfd);
	return err;
}

static int sync_entry(struct sync *s, int dst, int src, int ref, const char *name, int depth)
{
	struct stat ss, ds;
	size_t plen = s->plen;
	const struct rec *r;
	bool had = false;
	int err;

	if (fstatat(src, name, &ss, AT_SYMLINK_NOFOLLOW))
		return errno;
	if ((err = path_push(s, name)))
		return err;
	/* the final pass of a take: a file still what the first pass copied
	 * is kept without a look at the copy (the take's own directory, which
	 * nothing else writes) */
	if (s->mode == SYNC_TAKE_FINAL && S_ISREG(ss.st_mode) && rec_matches(r = recmap_get(s->ref, s->path), &ss)) {
		sync_count_kept(s, r);
		err = recmap_put(s->out, s->path, r);
		path_pop(s, plen);
		return err;
	}
	/* the first pass fills a directory it has just made: nothing there */
	if (s->mode != SYNC_TAKE_FIRST) {
		had = !fstatat(dst, name, &ds, AT_SYMLINK_NOFOLLOW);
		if (!had && errno != ENOENT) {
			err = errno;
			path_pop(s, plen);
			return err;
		}
	}
	switch (ss.st_mode & S_IFMT) {
	case S_IFDIR:
		err = sync_subdir(s, dst, src, ref, name, &ss, had, &ds, depth);
		break;
	case S_IFREG:
		err = sync_file(s, dst, src, ref, name, &ss, had, &ds);
		break;
	case S_IFLNK:
		err = sync_symlink(s, dst, src, name, &ss, had, &ds);
		break;
	case S_IFIFO:
	case S_IFSOCK:
		err = sync_special(s, dst, name, &ss, had, &ds);
		break;
	default: /* a device node: recorded, never copied (and never opened) */
		s->st->skipped++;
		if (had && s->mode != SYNC_RESTORE)
			err = sync_remove(s, dst, name);
		break;
	}
	path_pop(s, plen);
	return err;
}

/* The names of a directory of src, sorted: what dst may keep. */
struct names {
	char **v;
	size_t n, cap;
};

static int names_add(struct names *ns, const char *name)
{
	if (ns->n == ns->cap) {
		size_t cap = ns->cap ? ns->cap * 2 : 64;
		char **v = realloc(ns->v, cap * sizeof(*v));
		if (!v)
			return ENOMEM;
		ns->v = v;
		ns->cap = cap;
	}
	ns->v[ns->n] = strdup(name);
	if (!ns->v[ns->n])
		return ENOMEM;
	ns->n++;
	return 0;
}

static int names_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool names_has(const struct names *ns, const char *name)
{
	return ns->n && bsearch(&name, ns->v, ns->n, sizeof(*ns->v), names_cmp);
}

static void names_clear(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
}

/* dst's entries that src does not have go (a device in src is not
 * copied: sync_entry removed what dst had of that name). */
static int sync_prune(struct sync *s, int dst, const struct names *keep)
{
	int fd = openat(dst, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;
	struct dirent *e;
	DIR *d;

	if (fd < 0)
		return errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return errno;
	}
	while ((e = readdir(d)) && !err) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || names_has(keep, e->d_name))
			continue;
		size_t plen = s->plen;
		if (!(err = path_push(s, e->d_name)))
			err = sync_remove(s, dst, e->d_name);
		path_pop(s, plen);
		if (!err)
			s->st->removed++;
	}
	closedir(d);
	return err;
}

static int sync_dir(struct sync *s, int dst, int src, int ref, int depth)
{
	int fd = openat(src, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;
	struct names seen = { 0 };
	struct dirent *e;
	DIR *d;

	if (fd < 0)
		return errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return errno;
	}
	while (!err) {
		errno = 0;
		e = readdir(d);
		if (!e) {
			err = errno;
			break;
		}
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (s->mode != SYNC_TAKE_FIRST && (err = names_add(&seen, e->d_name)))
			break;
		err = sync_entry(s, dst, src, ref, e->d_name, depth);
		/* the first pass of a take runs beside the sandbox: what moved
		 * under it is the final pass's; a lease too */
		if (err && (sync_raced(err) || (s->mode == SYNC_TAKE_FIRST && err == EBUSY)))
			err = 0;
	}
	closedir(d);
	/* the first pass made dst itself: nothing else is in it */
	if (!err && s->mode != SYNC_TAKE_FIRST) {
		if (seen.n > 1)
			qsort(seen.v, seen.n, sizeof(*seen.v), names_cmp);
		err = sync_prune(s, dst, &seen);
	}
	names_clear(&seen);
	return err;
}

static int sync_init(struct sync *s, enum sync_mode mode, const char *scope, struct snap_stats *st)
{
	memset(s, 0, sizeof(*s));
	s->mode = mode;
	s->scope = scope;
	s->st = st;
	s->clone = true;
	s->path = malloc(SNAP_PATH_MAX);
	s->xlist = malloc(SNAP_XATTR_MAX);
	s->xval = malloc(SNAP_XATTR_MAX);
	s->xdlist = malloc(SNAP_XATTR_MAX);
	if (!s->path || !s->xlist || !s->xval || !s->xdlist)
		return ENOMEM;
	s->path[0] = '\0';
	return 0;
}

static void sync_clear(struct sync *s)
{
	free(s->path);
	free(s->xlist);
	free(s->xval);
	free(s->xdlist);
}

/* One data directory: dst (its fd) made equal to src; ref: the previous
 * snapshot's copy of it, or -1.  The top's own metadata follows too. */
static int sync_top(struct sync *s, int dst, int src, int ref, const char *top)
{
	struct stat st;
	int err;

	path_pop(s, 0);
	if ((err = path_push(s, top)))
		return err;
	err = sync_dir(s, dst, src, ref, 0);
	if (!err && !fstat(src, &st))
		err = sync_meta_fd(s, dst, src, &st, true);
	return err;
}

/* ---- snapshots/ -------------------------------------------------------------------------- */

static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;
/* protected by snap_lock: "thread_dir/name" of snapshots a restore reads */
static char **snap_pins;
static size_t snap_npins;

static int snap_pin(const char *thread_dir, const char *name)
{
	struct buf key = BUF_INIT(BUF_CAP_PATH);
	char **p;
	int err = 0;

	if (buf_addf(&key, "%s/%s", thread_dir, name))
		return ENOMEM;
	pthread_mutex_lock(&snap_lock);
	p = realloc(snap_pins, (snap_npins + 1) * sizeof(*p));
	if (p) {
		snap_pins = p;
		snap_pins[snap_npins++] = buf_take(&key, NULL);
	} else {
		err = ENOMEM;
	}
	pthread_mutex_unlock(&snap_lock);
	buf_free(&key);
	return err;
}

static void snap_unpin(const char *thread_dir, const char *name)
{
	size_t tl = strlen(thread_dir);

	pthread_mutex_lock(&snap_lock);
	for (size_t i = 0; i < snap_npins; i++)
		if (!strncmp(snap_pins[i], thread_dir, tl) && snap_pins[i][tl] == '/' && !strcmp(snap_pins[i] + tl + 1, name)) {
			free(snap_pins[i]);
			snap_pins[i] = snap_pins[--snap_npins];
			break;
		}
	pthread_mutex_unlock(&snap_lock);
}

/* snap_lock held. */
static bool snap_pinned_locked(const char *thread_dir, const char *name)
{
	size_t tl = strlen(thread_dir);

	for (size_t i = 0; i < snap_npins; i++)
		if (!strncmp(snap_pins[i], thread_dir, tl) && snap_pins[i][tl] == '/' && !strcmp(snap_pins[i] + tl + 1, name))
			return true;
	return false;
}

/* thread_dir/snapshots, made (root's, 0700) when make.  Its path is root's
 * all the way (the thread's directory is root's, 0700), unlike the data
 * directories inside the thread. */
static int snap_root_fd(const char *thread_dir, bool make)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	int fd = -1, e;

	if (layout_dir(&p, thread_dir, LAYOUT_SNAPSHOTS)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = udir_open(p.ptr);
	if (fd < 0 && errno == ENOENT && make && (!mkdir(p.ptr, 0700) || errno == EEXIST))
		fd = udir_open(p.ptr);
	e = errno;
	buf_free(&p);
	errno = e;
	return fd;
}

static int snap_name_check(const char *name)
{
	return names_valid(name) ? 0 : EINVAL;
}

static int snap_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void snap_names_free(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* The names in snapshots/ (dot-names are in progress or going). */
static int snap_list_fd(int root, char ***out, size_t *n)
{
	int fd = openat(root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;
	char **names = NULL;
	size_t cnt = 0;
	struct dirent *e;
	DIR *d;

	*out = NULL;
	*n = 0;
	if (fd < 0)
		return errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return errno;
	}
	while ((e = readdir(d))) {
		char **p;
		if (e->d_name[0] == '.' || !names_valid(e->d_name))
			continue;
		p = realloc(names, (cnt + 1) * sizeof(*p));
		if (!p || !(p[cnt] = strdup(e->d_name))) {
			if (p)
				names = p;
			err = ENOMEM;
			break;
		}
		names = p;
		cnt++;
	}
	closedir(d);
	if (err) {
		snap_names_free(names, cnt);
		return err;
	}
	if (cnt > 1)
		qsort(names, cnt, sizeof(*names), snap_cmp);
	*out = names;
	*n = cnt;
	return 0;
}

int snap_list(const char *thread_dir, char ***names, size_t *n)
{
	int root = snap_root_fd(thread_dir, false), err;

	*names = NULL;
	*n = 0;
	if (root < 0)
		return errno == ENOENT ? 0 : errno;
	err = snap_list_fd(root, names, n);
	close(root);
	return err;
}

int snap_exists(const char *thread_dir, const char *name)
{
	struct stat st;
	int root, err;

	if (snap_name_check(name))
		return EINVAL;
	root = snap_root_fd(thread_dir, false);
	if (root < 0)
		return ENOENT;
	err = fstatat(root, name, &st, AT_SYMLINK_NOFOLLOW) ? errno : S_ISDIR(st.st_mode) ? 0 : ENOENT;
	close(root);
	return err;
}

static json_t *snap_info_read(int root, const char *name)
{
	struct buf b = BUF_INIT(BUF_CAP_CTL);
	int fd = udir_openat(root, name);
	json_t *o = NULL;

	if (fd >= 0 && !udir_read(fd, "info.json", &b))
		o = json_loadb(buf_str(&b), b.len, 0, NULL);
	if (fd >= 0)
		close(fd);
	buf_free(&b);
	return o;
}

int snap_info(const char *thread_dir, const char *name, struct buf *out)
{
	int root, err = snap_exists(thread_dir, name);
	json_t *o;

	if (err)
		return err;
	root = snap_root_fd(thread_dir, false);
	if (root < 0)
		return errno;
	o = snap_info_read(root, name);
	close(root);
	if (!o)
		return EIO;
	/* the thread's own bookkeeping is not the user's business */
	json_object_del(o, "uid");
	json_object_del(o, "gid");
	return json_to_buf(o, out) ? ENOMEM : 0;
}

int snap_data_fd(const char *thread_dir, const char *name)
{
	int root, fd;

	if (snap_name_check(name)) {
		errno = EINVAL;
		return -1;
	}
	root = snap_root_fd(thread_dir, false);
	if (root < 0)
		return -1;
	fd = openat(root, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		int data = openat(fd, "data", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		fd = data;
	}
	int e = errno;
	close(root);
	errno = e;
	return fd;
}

/* The newest snapshot (by its created_at), whose copies a new one may
 * link to; "" when there is none. */
static void snap_newest(int root, char *out, size_t len)
{
	double best = -1;
	char **names;
	size_t n;

	out[0] = '\0';
	if (snap_list_fd(root, &names, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		json_t *o = snap_info_read(root, names[i]);
		double t = o ? json_number_value(json_object_get(o, "created_at_unix")) : -1;
		if (o && t > best) {
			best = t;
			snprintf(out, len, "%s", names[i]);
		}
		json_decref(o);
	}
	snap_names_free(names, n);
}

/* ---- take ---------------------------------------------------------------------------------- */

struct snap_take {
	char *thread_dir;
	char name[NAME_MAX_LEN + 1];
	char tmp[NAME_MAX_LEN + 8];
	char scope[SNAP_SCOPE_MAX];
	uid_t uid;
	gid_t gid;
	unsigned max;
	int root;    /* snapshots/ */
	int tmpfd;   /* snapshots/.tmp-<name>/ */
	struct recmap first; /* what the first pass copied each file from */
	char prev[72];
	double started, started_wall;
	bool committed;
};

/* The live data directory d of the thread. */
static int snap_live_fd(const char *thread_dir, size_t d)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	int fd = -1;

	if (!layout_dir(&p, thread_dir, snap_layout[d]))
		fd = udir_open(p.ptr);
	else
		errno = ENAMETOOLONG;
	int e = errno;
	buf_free(&p);
	errno = e;
	return fd;
}

static double snap_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Both passes of a take over the three data directories: dst is the
 * take's data/ directory. */
static int snap_take_pass(struct snap_take *t, struct sync *s, int data, int prevdata)
{
	int err = 0;

	for (size_t d = 0; d < SNAP_NDIRS && !err; d++) {
		int live = snap_live_fd(t->thread_dir, d), dst = -1, ref = -1;
		if (live < 0 && errno != ENOENT) {
			err = errno;
			log_warn(t->scope, "snapshot: cannot open %s: %s", snap_dirs[d], strerror(err));
			break;
		}
		/* every snapshot has the three, empty where the thread has none */
		if (mkdirat(data, snap_dirs[d], 0700) && errno != EEXIST)
			err = errno;
		if (!err && (dst = udir_openat(data, snap_dirs[d])) < 0)
			err = errno;
		if (live < 0) {
			if (dst >= 0)
				close(dst);
			continue;
		}
		if (!err && prevdata >= 0)
			ref = openat(prevdata, snap_dirs[d], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (!err)
			err = sync_top(s, dst, live, ref, snap_dirs[d]);
		if (ref >= 0)
			close(ref);
		if (dst >= 0)
			close(dst);
		close(live);
	}
	return err;
}

static int snap_count(int root, unsigned *n)
{
	char **names;
	size_t cnt;
	int err = snap_list_fd(root, &names, &cnt);

	if (!err) {
		*n = (unsigned)cnt;
		snap_names_free(names, cnt);
	}
	return err;
}

int snap_take_prepare(const char *thread_dir, const char *name, uid_t uid, gid_t gid, unsigned max,
	struct snap_take **out)
{
	struct snap_take *t = calloc(1, sizeof(*t));
	struct snap_stats scratch = { 0 };
	struct sync s;
	struct stat st;
	struct recmap prevmap = { 0 };
	int err = 0, data = -1, prevfd = -1, prevdata = -1;
	unsigned have = 0;

	*out = NULL;
	if (!t)
		return ENOMEM;
	t->root = t->tmpfd = -1;
	snap_scope(thread_dir, t->scope);
	if (snap_name_check(name)) {
		log_warn(t->scope, "snapshot: '%.64s' is not a valid name (must match ^[A-Za-z0-9_-]{1,64}$)", name);
		free(t);
		return EINVAL;
	}
	t->thread_dir = strdup(thread_dir);
	if (!t->thread_dir) {
		free(t);
		return ENOMEM;
	}
	snprintf(t->name, sizeof(t->name), "%s", name);
	snprintf(t->tmp, sizeof(t->tmp), ".tmp-%s", name);
	t->uid = uid;
	t->gid = gid;
	t->max = max;
	t->started = snap_now();
	t->started_wall = util_wall_now();
	t->root = snap_root_fd(thread_dir, true);
	if (t->root < 0) {
		err = errno;
		goto out;
	}
	if (!fstatat(t->root, name, &st, AT_SYMLINK_NOFOLLOW)) {
		log_warn(t->scope, "snapshot %s: exists", name);
		err = EEXIST;
		goto out;
	}
	if ((err = snap_count(t->root, &have)))
		goto out;
	if (max && have >= max) {
		log_warn(t->scope, "snapshot %s: the thread has %u snapshots, snapshots.max_per_thread is %u", name, have,
			max);
		err = EDQUOT;
		goto out;
	}
	/* (what a crash left of a take was removed at start: snap_recover) */
	if (mkdirat(t->root, t->tmp, 0700)) {
		err = errno == EEXIST ? EBUSY : errno;
		goto out;
	}
	t->tmpfd = udir_openat(t->root, t->tmp);
	if (t->tmpfd < 0 || mkdirat(t->tmpfd, "data", 0755) || (data = udir_openat(t->tmpfd, "data")) < 0) {
		err = errno;
		goto out;
	}
	snap_newest(t->root, t->prev, sizeof(t->prev));
	if (t->prev[0] && (prevfd = udir_openat(t->root, t->prev)) >= 0) {
		if (manifest_read(prevfd, &prevmap))
			recmap_free(&prevmap); /* nothing counts as unchanged */
		prevdata = openat(prevfd, "data", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	err = sync_init(&s, SYNC_TAKE_FIRST, t->scope, &scratch);
	if (!err) {
		s.ref = &prevmap;
		s.out = &t->first;
		err = snap_take_pass(t, &s, data, prevdata);
	}
	sync_clear(&s);
	if (err)
		log_warn(t->scope, "snapshot %s: %s", name, strerror(err));
out:
	recmap_free(&prevmap);
	if (prevdata >= 0)
		close(prevdata);
	if (prevfd >= 0)
		close(prevfd);
	if (data >= 0)
		close(data);
	if (err)
		snap_take_free(t);
	else
		*out = t;
	return err;
}

static int snap_write_info(struct snap_take *t, const struct snap_result *r)
{
	char created[32];
	const struct snap_stats *st = &r->st;
	json_t *o;
	struct buf b = BUF_INIT(BUF_CAP_CTL);
	int err;

	util_iso8601(t->started_wall, created);
	o = json_pack("{s:s,s:s,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:s,s:f,s:f,s:i,s:i}", "name",
		t->name, "created_at", created, "created_at_unix", t->started_wall, "files", (json_int_t)st->files, "dirs",
		(json_int_t)st->dirs, "symlinks", (json_int_t)st->symlinks, "specials", (json_int_t)st->specials,
		"skipped_devices", (json_int_t)st->skipped, "bytes", (json_int_t)st->bytes, "bytes_shared",
		(json_int_t)st->bytes_shared, "bytes_copied", (json_int_t)st->bytes_copied, "reflinked",
		(json_int_t)st->reflinked, "linked", (json_int_t)st->linked, "copied", (json_int_t)st->copied,
		"shared_with", r->prev[0] ? json_string(r->prev) : json_null(), "method",
		st->reflinked ? "reflink" : st->linked ? "link" : "copy", "freeze_ms", r->freeze_s * 1000.0, "took_ms",
		r->took_s * 1000.0, "uid", (int)t->uid, "gid", (int)t->gid);
	/* json_to_buf takes o (and ends the text with a newline) */
	if (!o || json_to_buf(o, &b)) {
		buf_free(&b);
		return ENOMEM;
	}
	err = udir_write(t->tmpfd, "info.json", b.ptr, b.len, 0600, 0, 0) ? errno : 0;
	buf_free(&b);
	return err;
}

int snap_take_commit(struct snap_take *t, const struct snap_freeze *fz, struct snap_result *out)
{
	struct recmap final = { 0 };
	struct sync s;
	double t0 = 0;
	unsigned have = 0;
	bool frozen = false;
	int err, data = -1;

	memset(out, 0, sizeof(*out));
	err = sync_init(&s, SYNC_TAKE_FINAL, t->scope, &out->st);
	if (err)
		goto out;
	data = udir_openat(t->tmpfd, "data");
	if (data < 0) {
		err = errno;
		goto out;
	}
	if (fz && fz->freeze) {
		t0 = snap_now();
		if ((err = fz->freeze(fz->arg)))
			goto out;
		frozen = true;
	}
	s.ref = &t->first;
	s.out = &final;
	err = snap_take_pass(t, &s, data, -1);
	if (frozen) {
		fz->thaw(fz->arg);
		out->freeze_s = snap_now() - t0;
	}
	if (err)
		goto out;
	snprintf(out->prev, sizeof(out->prev), "%s", out->st.linked ? t->prev : "");
	out->took_s = snap_now() - t->started;
	if ((err = manifest_write(t->tmpfd, &final)) || (err = snap_write_info(t, out)))
		goto out;
	/* a concurrent take of the same thread published meanwhile */
	if (!(err = snap_count(t->root, &have)) && t->max && have >= t->max)
		err = EDQUOT;
	if (!err && renameat2(t->root, t->tmp, t->root, t->name, RENAME_NOREPLACE))
		err = errno;
	if (!err) {
		t->committed = true;
		log_info(t->scope,
			"snapshot %s: %" PRIu64 " files, %" PRIu64 " bytes (%" PRIu64 " shared, %" PRIu64 " copied), frozen "
			"%.1f ms, %.1f ms in all",
			t->name, out->st.files, out->st.bytes, out->st.bytes_shared, out->st.bytes_copied, out->freeze_s * 1000,
			out->took_s * 1000);
	}
out:
	if (err)
		log_warn(t->scope, "snapshot %s: %s", t->name, strerror(err));
	if (data >= 0)
		close(data);
	recmap_free(&final);
	sync_clear(&s);
	return err;
}

void snap_take_free(struct snap_take *t)
{
	if (!t)
		return;
	if (!t->committed && t->root >= 0 && t->tmpfd >= 0) {
		struct buf p = BUF_INIT(BUF_CAP_PATH);
		if (!layout_dir(&p, t->thread_dir, LAYOUT_SNAPSHOTS) && !buf_addpath(&p, t->tmp))
			util_rm_rf(p.ptr);
		buf_free(&p);
	}
	if (t->tmpfd >= 0)
		close(t->tmpfd);
	if (t->root >= 0)
		close(t->root);
	recmap_free(&t->first);
	free(t->thread_dir);
	free(t);
}

/* ---- delete ---------------------------------------------------------------------------------- */

int snap_delete(const char *thread_dir, const char *name)
{
	static unsigned long seq;
	char scope[SNAP_SCOPE_MAX], gone[NAME_MAX_LEN + 64];
	int root, err = 0;

	snap_scope(thread_dir, scope);
	if (snap_name_check(name))
		return ENOENT;
	root = snap_root_fd(thread_dir, false);
	if (root < 0)
		return ENOENT;
	pthread_mutex_lock(&snap_lock);
	snprintf(gone, sizeof(gone), ".del-%s.%d.%lu", name, (int)getpid(), ++seq);
	if (snap_pinned_locked(thread_dir, name))
		err = EBUSY;
	else if (renameat2(root, name, root, gone, RENAME_NOREPLACE))
		err = errno;
	pthread_mutex_unlock(&snap_lock);
	close(root);
	if (err == EBUSY)
		log_warn(scope, "snapshot %s: a restore is reading it: not removed", name);
	else if (!err)
		log_info(scope, "snapshot %s removed", name);
	return err;
}

/* Remove the dot-entries of snapshots/ that start with prefix. */
static void snap_purge_prefix(const char *thread_dir, const char *prefix)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	int root = snap_root_fd(thread_dir, false);
	size_t pl = strlen(prefix);
	struct dirent *e;
	DIR *d;

	if (root < 0)
		return;
	d = fdopendir(root);
	if (!d) {
		close(root);
		return;
	}
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, pl))
			continue;
		buf_reset(&p);
		if (!layout_dir(&p, thread_dir, LAYOUT_SNAPSHOTS) && !buf_addpath(&p, e->d_name) && util_rm_rf(p.ptr))
			log_warn("snapshot", "cannot remove %s: %s", p.ptr, strerror(errno));
	}
	closedir(d);
	buf_free(&p);
}

void snap_purge(const char *thread_dir)
{
	snap_purge_prefix(thread_dir, ".del-");
}

/* ---- restore ------------------------------------------------------------------------------------ */

#define SNAP_JOURNAL "restore.json"

static int snap_journal_write(const char *dst_thread_dir, const char *src_thread_dir, const char *name, uid_t uid,
	gid_t gid)
{
	json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:f}", "source", src_thread_dir, "snapshot", name, "uid", (int)uid,
		"gid", (int)gid, "started_at", util_wall_now());
	struct buf b = BUF_INIT(BUF_CAP_CTL);
	int tfd = -1, fd = -1, err = 0;

	if (!o || json_to_buf(o, &b)) { /* takes o */
		err = ENOMEM;
		goto out;
	}
	tfd = udir_open(dst_thread_dir);
	if (tfd < 0) {
		err = errno;
		goto out;
	}
	unlinkat(tfd, SNAP_JOURNAL ".tmp", 0);
	fd = udir_create(tfd, SNAP_JOURNAL ".tmp", 0600, 0, 0);
	if (fd < 0 || write(fd, b.ptr, b.len) != (ssize_t)b.len || fsync(fd)) {
		err = errno ? errno : EIO;
		goto out;
	}
	if (renameat(tfd, SNAP_JOURNAL ".tmp", tfd, SNAP_JOURNAL) || fsync(tfd))
		err = errno;
out:
	if (fd >= 0)
		close(fd);
	if (err && tfd >= 0)
		unlinkat(tfd, SNAP_JOURNAL ".tmp", 0);
	if (tfd >= 0)
		close(tfd);
	buf_free(&b);
	return err;
}

static void snap_journal_remove(const char *dst_thread_dir)
{
	int tfd = udir_open(dst_thread_dir);

	if (tfd < 0)
		return;
	if (unlinkat(tfd, SNAP_JOURNAL, 0) && errno != ENOENT)
		log_warn("snapshot", "cannot remove %s/%s: %s", dst_thread_dir, SNAP_JOURNAL, strerror(errno));
	fsync(tfd);
	close(tfd);
}

/* The work of a restore whose journal is written: every data directory. */
static int snap_restore_run(const char *src_thread_dir, const char *name, const char *dst_thread_dir, uid_t uid,
	gid_t gid, struct snap_stats *out)
{
	char scope[SNAP_SCOPE_MAX];
	struct recmap ref = { 0 };
	struct sync s;
	json_t *info = NULL;
	int root = -1, sfd = -1, data = -1, err;

	snap_scope(dst_thread_dir, scope);
	memset(out, 0, sizeof(*out));
	err = sync_init(&s, SYNC_RESTORE, scope, out);
	if (err)
		goto out;
	root = snap_root_fd(src_thread_dir, false);
	if (root < 0 || (sfd = udir_openat(root, name)) < 0 ||
	    (data = openat(sfd, "data", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		err = errno == ENOTDIR ? ENOENT : errno;
		goto out;
	}
	info = snap_info_read(root, name);
	if (!info) {
		err = EIO;
		goto out;
	}
	s.map_ids = true;
	s.from_uid = (uid_t)json_integer_value(json_object_get(info, "uid"));
	s.from_gid = (gid_t)json_integer_value(json_object_get(info, "gid"));
	s.to_uid = uid;
	s.to_gid = gid;
	/* the manifest describes the live files the copies were made of: in
	 * the same thread, what still is one of them stays as it is */
	if (!strcmp(src_thread_dir, dst_thread_dir) && manifest_read(sfd, &ref))
		recmap_free(&ref);
	s.ref = &ref;
	for (size_t d = 0; d < SNAP_NDIRS && !err; d++) {
		struct buf p = BUF_INIT(BUF_CAP_PATH);
		int live = -1, src = -1;

		if (layout_dir(&p, dst_thread_dir, snap_layout[d]) || util_mkdir_p(p.ptr, 0755) ||
		    (live = udir_open(p.ptr)) < 0)
			err = errno ? errno : EIO;
		if (!err) {
			/* every snapshot has the three (snap_take_pass) */
			src = openat(data, snap_dirs[d], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (src < 0)
				err = errno == ENOENT ? EIO : errno;
		}
		if (!err)
			err = sync_top(&s, live, src, -1, snap_dirs[d]);
		/* the top stays the sandbox's whatever the snapshot said */
		if (!err && fchown(live, uid, gid))
			err = errno;
		if (src >= 0)
			close(src);
		if (live >= 0)
			close(live);
		buf_free(&p);
	}
out:
	if (err)
		log_err(scope, "restore of %s: %s", name, strerror(err));
	json_decref(info);
	recmap_free(&ref);
	sync_clear(&s);
	if (data >= 0)
		close(data);
	if (sfd >= 0)
		close(sfd);
	if (root >= 0)
		close(root);
	return err;
}

int snap_restore(const char *src_thread_dir, const char *name, const char *dst_thread_dir, uid_t uid, gid_t gid,
	struct snap_stats *out)
{
	char scope[SNAP_SCOPE_MAX];
	double t0 = snap_now();
	int err = snap_exists(src_thread_dir, name);

	snap_scope(dst_thread_dir, scope);
	memset(out, 0, sizeof(*out));
	if (err) {
		log_warn(scope, "restore: no snapshot %.64s%s", name, err == EINVAL ? " (not a valid name)" : "");
		return err;
	}
	if ((err = snap_pin(src_thread_dir, name)))
		return err;
	/* pinned: rmdir of it is EBUSY now; it may have gone just before */
	if ((err = snap_exists(src_thread_dir, name)))
		goto out;
	if ((err = snap_journal_write(dst_thread_dir, src_thread_dir, name, uid, gid))) {
		log_err(scope, "restore: cannot write its journal: %s", strerror(err));
		goto out;
	}
	err = snap_restore_run(src_thread_dir, name, dst_thread_dir, uid, gid, out);
	/* a failure keeps the journal: the next start finishes the restore */
	if (!err) {
		snap_journal_remove(dst_thread_dir);
		log_info(scope,
			"restored %s: %" PRIu64 " files (%" PRIu64 " unchanged, %" PRIu64 " copied), %" PRIu64
			" entries removed, %.1f ms",
			name, out->files, out->kept, out->copied + out->reflinked, out->removed, (snap_now() - t0) * 1000);
	}
out:
	snap_unpin(src_thread_dir, name);
	return err;
}

/* ---- start ---------------------------------------------------------------------------------------- */

static void snap_recover_thread(const char *thread_dir)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	char scope[SNAP_SCOPE_MAX];
	struct snap_stats st;
	json_t *j = NULL;
	const char *src, *name;

	snap_purge_prefix(thread_dir, ".tmp-");
	snap_purge_prefix(thread_dir, ".del-");
	if (buf_addf(&p, "%s/%s", thread_dir, SNAP_JOURNAL) || access(p.ptr, F_OK))
		goto out;
	snap_scope(thread_dir, scope);
	j = json_read_file(p.ptr);
	src = j ? json_string_value(json_object_get(j, "source")) : NULL;
	name = j ? json_string_value(json_object_get(j, "snapshot")) : NULL;
	if (!src || !name || !json_is_integer(json_object_get(j, "uid")) || !json_is_integer(json_object_get(j, "gid"))) {
		log_err(scope, "restore: %s is not a restore journal: removed (the data may be partly restored)", p.ptr);
		snap_journal_remove(thread_dir);
		goto out;
	}
	log_warn(scope, "restore of %s was interrupted: finishing it", name);
	if (snap_pin(src, name))
		goto out;
	if (!snap_restore_run(src, name, thread_dir, (uid_t)json_integer_value(json_object_get(j, "uid")),
		    (gid_t)json_integer_value(json_object_get(j, "gid")), &st)) {
		snap_journal_remove(thread_dir);
		log_info(scope, "restore of %s finished (%" PRIu64 " files copied, %" PRIu64 " entries removed)", name,
			st.copied + st.reflinked, st.removed);
	}
	snap_unpin(src, name);
out:
	json_decref(j);
	buf_free(&p);
}

void snap_recover(const char *state_dir)
{
	struct buf users = BUF_INIT(BUF_CAP_PATH), threads = BUF_INIT(BUF_CAP_PATH), t = BUF_INIT(BUF_CAP_PATH);
	struct dirent *u, *e;
	DIR *ud, *td;

	if (layout_users_dir(&users, state_dir) || !(ud = opendir(users.ptr))) {
		buf_free(&users);
		return;
	}
	while ((u = readdir(ud))) {
		if (!names_valid(u->d_name))
			continue;
		buf_reset(&threads);
		if (layout_threads_dir(&threads, state_dir, u->d_name) || !(td = opendir(threads.ptr)))
			continue;
		while ((e = readdir(td))) {
			if (!names_valid(e->d_name))
				continue;
			buf_reset(&t);
			if (!layout_thread_dir(&t, state_dir, u->d_name, e->d_name))
				snap_recover_thread(t.ptr);
		}
		closedir(td);
	}
	closedir(ud);
	buf_free(&users);
	buf_free(&threads);
	buf_free(&t);
}
