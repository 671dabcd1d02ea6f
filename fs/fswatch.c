/* SPDX-License-Identifier: MIT */
/*
 * fswatch.c - the watcher that keeps the kernel's caches of data files
 * fresh (see fswatch.h): it owns one fanotify group, the table of the
 * directories it marks, and the thread that turns events into FUSE
 * invalidations.
 *
 * Why fanotify, and inode marks: jobs change files through bind mounts in
 * their own mount namespace, behind the FUSE mount; only the inode (or its
 * filesystem) sees those changes.  A filesystem mark would see every change
 * on state_dir's filesystem (the whole host disk, often), so each data
 * directory the kernel knows is marked instead (FAN_EVENT_ON_CHILD: its
 * entries and its files' attributes and contents), just before the kernel
 * first learns of it (data.c calls fswatch_dir from data_node_get).  The
 * group reports FAN_REPORT_DFID_NAME_TARGET: each event names the
 * directory (a file handle, matched against the handles of this table),
 * the name, and the file itself (a handle, opened by the thread to find the
 * node the kernel may cache).  Events of the daemon's own pid are its own
 * writes through the mount, whose caches the kernel keeps itself: skipped;
 * so are those of processes in the daemon's mount namespace (every sandbox
 * has its own), the host's passthrough writes through the mount, which the
 * kernel also keeps its caches of.  A host process writing into state_dir
 * directly, behind the mount, is not a sandbox and is not watched for.
 *
 * Cost for the host's own work through the mount (every create, unlink,
 * write there is an event on a marked directory): writes and closes never
 * reach the queue (an ignore mark on the daemon's mount of state_dir:
 * fsw_ignore_own_mount); entry events cannot be kept out (the kernel has no
 * mount for them) and are dropped by pid, the cheapest test first; and the
 * thread waits FSW_GATHER_MS after each wakeup, so a storm of creates is
 * read in a few large reads (the kernel also merges what waits in its
 * queue) instead of one wakeup each.  That wait adds at most FSW_GATHER_MS
 * to how long a job's change may stay unseen.
 *
 * Bounds: FSW_DIRS_PER_VIEW marked directories per sandbox (past it, that
 * sandbox alone goes back to the short timeouts); the kernel's queue
 * (fanotify's max_queued_events): when it overflows the thread cannot know
 * what it lost, so every watched sandbox goes back to the short timeouts for
 * FSW_OVERFLOW_HOLD_MS and all their cached attributes are dropped
 * (the inval_sbx hook: data_inval_sbx), which also ends the staleness of what was lost.
 *
 * One race is left to the job's end: a file a job changes between the
 * daemon's stat of it for a LOOKUP and the kernel's receipt of that reply
 * may be invalidated before the kernel knows its inode (the notification
 * then finds nothing), so the kernel keeps the older attributes; a known
 * inode is safe (the kernel's attr_version discards the older reply).  The
 * job's end still drops every cached attribute of the sandbox (data.c's
 * data_inval_sbx), which bounds that case, and any other missed event, by
 * the job's end.
 *
 * Locks: fsw.lock, a leaf (docs/architecture.md), guards the table and is
 * held across fanotify_mark (an in-memory kernel call) so that a mark and
 * its removal never cross.  Invalidations run on the thread with no lock
 * held: a notification may wait for the kernel's lock of the directory,
 * held by a request that a FUSE worker is answering.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/fanotify.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "fswatch.h"

#define FSW_BUCKETS 4096
#define FSW_HANDLE_MAX 128             /* MAX_HANDLE_SZ */
#define FSW_DIRS_PER_VIEW 16384        /* marked directories per sandbox */
#define FSW_OVERFLOW_HOLD_MS 30000     /* short timeouts after a queue overflow */
#define FSW_BUF (256 * 1024)           /* bytes of events read at once */
#define FSW_BATCH 4096                 /* events deduplicated together */
#define FSW_MASK                                                                                             \
	(FAN_CREATE | FAN_DELETE | FAN_MOVED_FROM | FAN_MOVED_TO | FAN_ATTRIB | FAN_MODIFY | FAN_CLOSE_WRITE | \
		FAN_DELETE_SELF | FAN_EVENT_ON_CHILD | FAN_ONDIR)
#define FSW_NAME_EVENTS (FAN_CREATE | FAN_DELETE | FAN_MOVED_FROM | FAN_MOVED_TO)
#define FSW_DATA_EVENTS (FAN_MODIFY | FAN_CLOSE_WRITE)
#define FSW_GATHER_MS 2                /* wait after a wakeup, so one read takes a storm's events */

/* Why a view is on the short timeouts (view->cache_short, atomic). */
enum fsw_why { FSW_OK, FSW_LIMIT, FSW_FAILED };

struct fsw_handle {
	int type;
	unsigned len;
	unsigned char b[FSW_HANDLE_MAX];
};

struct fsw_dir {
	struct fsw_dir *next;
	struct view *v; /* referenced */
	dev_t dev;
	ino_t ino;
	struct fsw_handle h;
};

/* One event, resolved to its view, for the invalidation pass. */
struct fsw_item {
	struct view *v; /* referenced */
	dev_t ddev;
	ino_t dino;
	uint64_t mask;
	char *name;            /* NULL: an event of the directory itself */
	struct fsw_handle obj; /* the file itself (len 0: none) */
};

static struct {
	bool on;
	int fan;   /* the fanotify group */
	int mntfd; /* state_dir, for open_by_handle_at */
	int wake;  /* eventfd: stop, or a view died */
	bool stop; /* atomic */
	bool swept; /* atomic: false when a view died since the last sweep */
	pthread_t thread;
	pthread_mutex_t lock;
	struct fsw_dir *tab[FSW_BUCKETS]; /* lock */
	long dirs;                        /* lock */
	uint64_t overflow_until;          /* atomic: monotonic ms */
	unsigned long long events, invals, overflows; /* atomic */
	long stall_ms;                    /* test-only: SBXFS_TEST_FSWATCH_STALL_MS */
	long gather_ms;                   /* FSW_GATHER_MS (bench: SBXFS_TEST_FSWATCH_GATHER_MS) */
	bool mount_ignored;               /* the daemon's mount's data events stay out of the queue */
	unsigned long long mntns;         /* the daemon's mount namespace (0: unknown) */
	const struct fswatch_hooks *hooks;
} fsw = { .fan = -1, .mntfd = -1, .wake = -1, .lock = PTHREAD_MUTEX_INITIALIZER };

static unsigned fsw_hash(const struct fsw_handle *h)
{
	unsigned x = 2166136261u ^ (unsigned)h->type;

	for (unsigned i = 0; i < h->len; i++)
		x = (x ^ h->b[i]) * 16777619u;
	return x % FSW_BUCKETS;
}

static bool fsw_same(const struct fsw_handle *a, const struct fsw_handle *b)
{
	return a->type == b->type && a->len == b->len && !memcmp(a->b, b->b, a->len);
}

static struct fsw_dir *fsw_find_locked(const struct fsw_handle *h)
{
	struct fsw_dir *d;

	for (d = fsw.tab[fsw_hash(h)]; d; d = d->next)
		if (fsw_same(&d->h, h))
			break;
	return d;
}

static void fsw_short(struct view *v, enum fsw_why why, const char *what)
{
	if (__atomic_exchange_n(&v->cache_short, (int)why, __ATOMIC_RELAXED) != (int)why)
		log_warn(v->sbx->token, "data cache: short timeouts from now on (%s)", what);
}

/* fd's handle into h; false when it has none. */
static bool fsw_handle_of(int fd, struct fsw_handle *h)
{
	struct {
		struct file_handle fh;
		unsigned char b[FSW_HANDLE_MAX];
	} x;
	int mnt;

	x.fh.handle_bytes = FSW_HANDLE_MAX;
	if (name_to_handle_at(fd, "", &x.fh, &mnt, AT_EMPTY_PATH))
		return false;
	h->type = x.fh.handle_type;
	h->len = x.fh.handle_bytes;
	memcpy(h->b, x.fh.f_handle, h->len);
	return true;
}

/* fanotify_mark of an O_PATH descriptor: by its /proc link (the call does
 * not take O_PATH descriptors themselves). */
static int fsw_mark(unsigned flags, int fd)
{
	char proc[64];

	if (str_fmt(proc, sizeof(proc), "/proc/self/fd/%d", fd))
		return ENAMETOOLONG;
	return fanotify_mark(fsw.fan, flags, FSW_MASK, AT_FDCWD, proc) ? errno : 0;
}

void fswatch_dir(struct view *v, int fd, const struct stat *st)
{
	struct fsw_dir *d;
	struct fsw_handle h;
	char why[96];
	int err;

	if (!fsw.on || __atomic_load_n(&v->cache_short, __ATOMIC_RELAXED))
		return;
	if (!fsw_handle_of(fd, &h)) {
		snprintf(why, sizeof(why), "a directory has no file handle: %s", strerror(errno));
		return fsw_short(v, FSW_FAILED, why);
	}
	pthread_mutex_lock(&fsw.lock);
	if ((d = fsw_find_locked(&h))) {
		pthread_mutex_unlock(&fsw.lock);
		return;
	}
	if (v->watch_dirs >= FSW_DIRS_PER_VIEW) {
		pthread_mutex_unlock(&fsw.lock);
		snprintf(why, sizeof(why), "watch limit reached: %d directories", FSW_DIRS_PER_VIEW);
		return fsw_short(v, FSW_LIMIT, why);
	}
	if (!(d = calloc(1, sizeof(*d)))) {
		pthread_mutex_unlock(&fsw.lock);
		return fsw_short(v, FSW_FAILED, "out of memory");
	}
	/* in the table before the mark: no event of it is dropped as unknown */
	d->v = v;
	d->dev = st->st_dev;
	d->ino = st->st_ino;
	d->h = h;
	d->next = fsw.tab[fsw_hash(&h)];
	fsw.tab[fsw_hash(&h)] = d;
	if ((err = fsw_mark(FAN_MARK_ADD, fd))) {
		fsw.tab[fsw_hash(&h)] = d->next;
		pthread_mutex_unlock(&fsw.lock);
		free(d);
		snprintf(why, sizeof(why), "fanotify_mark: %s", strerror(err));
		return fsw_short(v, FSW_FAILED, why);
	}
	v->watch_dirs++;
	fsw.dirs++;
	view_get(v);
	pthread_mutex_unlock(&fsw.lock);
}

void fswatch_view_dead(struct view *v)
{
	uint64_t one = 1;

	(void)v;
	if (!fsw.on)
		return;
	__atomic_store_n(&fsw.swept, false, __ATOMIC_RELEASE);
	if (write(fsw.wake, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("fswatch", "cannot wake the watcher: %s", strerror(errno));
}

bool fswatch_long(struct view *v)
{
	return fsw.on && !__atomic_load_n(&v->cache_short, __ATOMIC_RELAXED) &&
	       util_now_ms() >= __atomic_load_n(&fsw.overflow_until, __ATOMIC_RELAXED);
}

const char *fswatch_state(struct view *v)
{
	if (!fsw.on)
		return "short (watcher off)";
	switch (__atomic_load_n(&v->cache_short, __ATOMIC_RELAXED)) {
	case FSW_LIMIT:
		return "short (watch limit)";
	case FSW_FAILED:
		return "short (watch failed)";
	default:
		break;
	}
	if (util_now_ms() < __atomic_load_n(&fsw.overflow_until, __ATOMIC_RELAXED))
		return "short (watcher overflow)";
	return "long";
}

void fswatch_stats(struct fswatch_stats *st)
{
	st->on = fsw.on;
	pthread_mutex_lock(&fsw.lock);
	st->dirs = fsw.dirs;
	pthread_mutex_unlock(&fsw.lock);
	st->events = __atomic_load_n(&fsw.events, __ATOMIC_RELAXED);
	st->invals = __atomic_load_n(&fsw.invals, __ATOMIC_RELAXED);
	st->overflows = __atomic_load_n(&fsw.overflows, __ATOMIC_RELAXED);
}

/* ---- the thread ------------------------------------------------------------------ */

/* Watcher thread: the views that have marked directories, referenced. */
static size_t fsw_views(struct view ***out)
{
	struct view **vs = NULL;
	size_t n = 0, cap = 0;

	pthread_mutex_lock(&fsw.lock);
	for (int b = 0; b < FSW_BUCKETS; b++)
		for (struct fsw_dir *d = fsw.tab[b]; d; d = d->next) {
			size_t i;
			for (i = 0; i < n && vs[i] != d->v; i++)
				;
			if (i < n)
				continue;
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 16;
				struct view **p = realloc(vs, nc * sizeof(*p));
				if (!p)
					goto out;
				vs = p;
				cap = nc;
			}
			view_get(d->v);
			vs[n++] = d->v;
		}
out:
	pthread_mutex_unlock(&fsw.lock);
	*out = vs;
	return n;
}

/* Watcher thread: the queue overflowed, events were lost.  Every watched
 * sandbox takes the short timeouts for a while, and what the kernel caches
 * of it is dropped now (what was lost happened before this point). */
static void fsw_overflow(void)
{
	struct view **vs;
	size_t n;

	__atomic_store_n(&fsw.overflow_until, util_now_ms() + FSW_OVERFLOW_HOLD_MS, __ATOMIC_RELAXED);
	if (__atomic_add_fetch(&fsw.overflows, 1, __ATOMIC_RELAXED) == 1 || fsw.stall_ms)
		log_warn("fswatch", "event queue overflow: data caches take the short timeouts for %d s",
			FSW_OVERFLOW_HOLD_MS / 1000);
	n = fsw_views(&vs);
	for (size_t i = 0; i < n; i++) {
		if (!__atomic_load_n(&vs[i]->dead, __ATOMIC_RELAXED))
			fsw.hooks->inval_sbx(vs[i]->sbx);
		view_put(vs[i]);
	}
	free(vs);
}

/* Watcher thread: drop the watches of released views. */
static void fsw_sweep(void)
{
	struct fsw_dir *gone = NULL, **pp;

	pthread_mutex_lock(&fsw.lock);
	for (int b = 0; b < FSW_BUCKETS; b++)
		for (pp = &fsw.tab[b]; *pp;) {
			struct fsw_dir *d = *pp;
			if (!__atomic_load_n(&d->v->dead, __ATOMIC_RELAXED)) {
				pp = &d->next;
				continue;
			}
			*pp = d->next;
			d->v->watch_dirs--;
			fsw.dirs--;
			d->next = gone;
			gone = d;
		}
	pthread_mutex_unlock(&fsw.lock);
	while (gone) {
		struct fsw_dir *d = gone;
		struct {
			struct file_handle fh;
			unsigned char b[FSW_HANDLE_MAX];
		} x;
		int fd;

		gone = d->next;
		x.fh.handle_bytes = d->h.len;
		x.fh.handle_type = d->h.type;
		memcpy(x.fh.f_handle, d->h.b, d->h.len);
		fd = open_by_handle_at(fsw.mntfd, &x.fh, O_PATH | O_CLOEXEC);
		if (fd >= 0) {
			pthread_mutex_lock(&fsw.lock);
			if (!fsw_find_locked(&d->h)) /* not marked again meanwhile */
				(void)fsw_mark(FAN_MARK_REMOVE, fd);
			pthread_mutex_unlock(&fsw.lock);
			close(fd);
		}
		view_put(d->v);
		free(d);
	}
}

static void fsw_item_free(struct fsw_item *it)
{
	free(it->name);
	view_put(it->v);
}

/* The (dev, ino) of the file behind handle h; false when it is gone. */
static bool fsw_identify(const struct fsw_handle *h, dev_t *dev, ino_t *ino)
{
	struct {
		struct file_handle fh;
		unsigned char b[FSW_HANDLE_MAX];
	} x;
	struct stat st;
	int fd;

	x.fh.handle_bytes = h->len;
	x.fh.handle_type = h->type;
	memcpy(x.fh.f_handle, h->b, h->len);
	fd = open_by_handle_at(fsw.mntfd, &x.fh, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (fstat(fd, &st)) {
		close(fd);
		return false;
	}
	close(fd);
	*dev = st.st_dev;
	*ino = st.st_ino;
	return true;
}

/* One event of the queue (e: its metadata, copied; rec..end: its info
 * records, in the read buffer), resolved to its directory's view; false
 * when it is none of ours.  Events follow each other unaligned in the
 * buffer: every field is copied out, never read in place. */
static bool fsw_parse(const struct fanotify_event_metadata *e, const char *rec, const char *end,
	struct fsw_item *it)
{
	const size_t fh_at = offsetof(struct fanotify_event_info_fid, handle);
	const size_t bytes_at = fh_at + offsetof(struct file_handle, f_handle);
	bool dir = false;

	memset(it, 0, sizeof(*it));
	it->mask = e->mask;
	while (rec + bytes_at <= end) {
		struct fanotify_event_info_header hdr;
		struct file_handle fh;
		struct fsw_handle h;

		memcpy(&hdr, rec, sizeof(hdr));
		memcpy(&fh, rec + fh_at, sizeof(fh));
		if (hdr.len < bytes_at || hdr.len > (size_t)(end - rec))
			break;
		if (fh.handle_bytes <= FSW_HANDLE_MAX && bytes_at + fh.handle_bytes <= hdr.len) {
			h.type = fh.handle_type;
			h.len = fh.handle_bytes;
			memcpy(h.b, rec + bytes_at, h.len);
			if (hdr.info_type == FAN_EVENT_INFO_TYPE_DFID_NAME || hdr.info_type == FAN_EVENT_INFO_TYPE_DFID) {
				const char *name = rec + bytes_at + h.len;
				size_t room = hdr.len - bytes_at - h.len;
				struct fsw_dir *d;

				pthread_mutex_lock(&fsw.lock);
				if ((d = fsw_find_locked(&h))) {
					it->v = d->v;
					view_get(it->v);
					it->ddev = d->dev;
					it->dino = d->ino;
					dir = true;
				}
				pthread_mutex_unlock(&fsw.lock);
				if (dir && hdr.info_type == FAN_EVENT_INFO_TYPE_DFID_NAME && room &&
				    memchr(name, '\0', room) && strcmp(name, ".") && !(it->name = strdup(name))) {
					view_put(it->v);
					return false;
				}
			} else if (hdr.info_type == FAN_EVENT_INFO_TYPE_FID) {
				it->obj = h;
			}
		}
		rec += hdr.len;
	}
	return dir;
}

/* Whether an item like it came earlier in the batch (seen: a set of
 * hashes, FSW_BATCH * 2 slots, open addressing). */
static bool fsw_seen(uint64_t *seen, const struct fsw_item *it)
{
	uint64_t x = 1469598103934665603ull ^ (uint64_t)it->dino ^ ((uint64_t)(uintptr_t)it->v << 1);
	unsigned i;

	x = (x ^ (it->mask & (FSW_NAME_EVENTS | FSW_DATA_EVENTS | FAN_ATTRIB))) * 1099511628211ull;
	for (const char *c = it->name ? it->name : "."; *c; c++)
		x = (x ^ (unsigned char)*c) * 1099511628211ull;
	for (unsigned k = 0; k < it->obj.len; k++)
		x = (x ^ it->obj.b[k]) * 1099511628211ull;
	x |= 1;
	for (i = (unsigned)(x % (FSW_BATCH * 2));; i = (i + 1) % (FSW_BATCH * 2)) {
		if (seen[i] == x)
			return true;
		if (!seen[i]) {
			seen[i] = x;
			return false;
		}
	}
}

/* Watcher thread: a watched directory was removed; its mark went with its
 * inode, its entry goes now (so the cap counts live directories). */
static void fsw_unwatch(const struct fsw_handle *h)
{
	struct fsw_dir **pp, *d = NULL;

	pthread_mutex_lock(&fsw.lock);
	for (pp = &fsw.tab[fsw_hash(h)]; *pp; pp = &(*pp)->next)
		if (fsw_same(&(*pp)->h, h)) {
			d = *pp;
			*pp = d->next;
			d->v->watch_dirs--;
			fsw.dirs--;
			break;
		}
	pthread_mutex_unlock(&fsw.lock);
	if (d) {
		view_put(d->v);
		free(d);
	}
}

/* Watcher thread, no lock held: the kernel forgets what it changed. */
static void fsw_apply(const struct fsw_item *it)
{
	dev_t dev;
	ino_t ino;
	int n = 0;

	if (__atomic_load_n(&it->v->dead, __ATOMIC_RELAXED))
		return;
	if (it->name && (it->mask & FSW_NAME_EVENTS))
		n += fsw.hooks->inval_dirent(it->v, it->ddev, it->dino, it->name);
	if (!it->name)
		n += fsw.hooks->inval_file(it->v, it->ddev, it->dino, false);
	if (it->obj.len && fsw_identify(&it->obj, &dev, &ino))
		n += fsw.hooks->inval_file(it->v, dev, ino, (it->mask & FSW_DATA_EVENTS) != 0);
	/* a directory has one name: removed, it is gone (its handle may still
	 * open while a descriptor pins the inode) */
	if (it->obj.len && (it->mask & FAN_DELETE) && (it->mask & FAN_ONDIR))
		fsw_unwatch(&it->obj);
	__atomic_add_fetch(&fsw.invals, (unsigned long long)n, __ATOMIC_RELAXED);
}

/* Watcher thread: whether pid is outside every sandbox, i.e. in the
 * daemon's own mount namespace (a sandbox always has one of its own): the
 * host's passthrough writes through the mount, whose caches the kernel
 * keeps itself.  last_pid and last cache the answer within one read (one
 * writer makes many events); a process already gone counts as a sandbox's. */
static bool fsw_host_pid(pid_t pid, pid_t *last_pid, bool *last)
{
	if (pid != *last_pid) {
		*last_pid = pid;
		*last = fsw.mntns && util_ns_inode(pid, "mnt") == fsw.mntns;
	}
	return *last;
}

/* Watcher thread: the events of one read. */
static void fsw_batch(const char *buf, ssize_t len, struct fsw_item *items, uint64_t *seen)
{
	size_t n = 0, off = 0;
	pid_t self = getpid(), last_pid = 0;
	bool overflow = false, last_host = false;

	memset(seen, 0, FSW_BATCH * 2 * sizeof(*seen));
	while (off + sizeof(struct fanotify_event_metadata) <= (size_t)len) {
		struct fanotify_event_metadata e;

		memcpy(&e, buf + off, sizeof(e));
		if (e.event_len < sizeof(e) || e.metadata_len < sizeof(e) || e.metadata_len > e.event_len ||
		    e.event_len > (size_t)len - off)
			break;
		off += e.event_len;
		if (e.vers != FANOTIFY_METADATA_VERSION)
			continue;
		__atomic_add_fetch(&fsw.events, 1, __ATOMIC_RELAXED);
		if (e.mask & FAN_Q_OVERFLOW) {
			overflow = true;
			continue;
		}
		if (e.pid == self || n == FSW_BATCH || fsw_host_pid(e.pid, &last_pid, &last_host) ||
		    !fsw_parse(&e, buf + off - e.event_len + e.metadata_len, buf + off, &items[n]))
			continue;
		if (fsw_seen(seen, &items[n]))
			fsw_item_free(&items[n]);
		else
			n++;
	}
	for (size_t i = 0; i < n; i++) {
		fsw_apply(&items[i]);
		fsw_item_free(&items[i]);
	}
	if (overflow)
		fsw_overflow();
}

static void *fsw_thread(void *arg)
{
	char *buf = malloc(FSW_BUF);
	struct fsw_item *items = calloc(FSW_BATCH, sizeof(*items));
	uint64_t *seen = calloc(FSW_BATCH * 2, sizeof(*seen));

	(void)arg;
	if (!buf || !items || !seen) {
		log_err("fswatch", "out of memory: the watcher stops, data caches take the short timeouts");
		__atomic_store_n(&fsw.overflow_until, UINT64_MAX, __ATOMIC_RELAXED);
		goto out;
	}
	while (!__atomic_load_n(&fsw.stop, __ATOMIC_ACQUIRE)) {
		struct pollfd pf[2] = { { .fd = fsw.fan, .events = POLLIN }, { .fd = fsw.wake, .events = POLLIN } };
		ssize_t len;

		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[1].revents & POLLIN) {
			uint64_t v;
			if (read(fsw.wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
				break;
		}
		if (!__atomic_exchange_n(&fsw.swept, true, __ATOMIC_ACQ_REL))
			fsw_sweep();
		if (!(pf[0].revents & POLLIN))
			continue;
		if (fsw.stall_ms) /* test-only: let the queue fill up */
			poll(NULL, 0, (int)fsw.stall_ms);
		else if (fsw.gather_ms) /* a storm's events come in one read, not one wakeup each */
			poll(NULL, 0, (int)fsw.gather_ms);
		len = read(fsw.fan, buf, FSW_BUF);
		if (len > 0)
			fsw_batch(buf, len, items, seen);
		else if (len < 0 && errno != EAGAIN && errno != EINTR) {
			log_err("fswatch", "read: %s: the watcher stops, data caches take the short timeouts",
				strerror(errno));
			__atomic_store_n(&fsw.overflow_until, UINT64_MAX, __ATOMIC_RELAXED);
			break;
		}
	}
out:
	free(buf);
	free(items);
	free(seen);
	return NULL;
}

/* Writes and closes through the daemon's own mount of state_dir (its own,
 * and the host's passthrough writes through the FUSE mount, made by the
 * host's processes on the daemon's backing files) are kept out of the queue
 * by an ignore mark on that mount: a sandbox writes through its own bind
 * mounts, which the mark does not cover.  Entry and attribute events carry
 * no mount (the kernel refuses them on a mount mark: EINVAL), so those of
 * the daemon's own creates and unlinks are still queued and dropped by pid.
 * Without the mark (a kernel before 6.0) the pid and namespace filters drop
 * them all the same, at the cost of reading them. */
static void fsw_ignore_own_mount(const char *state_dir)
{
	const char *off = getenv("SBXFS_TEST_FSWATCH_NO_MOUNT_IGNORE"); /* test, bench: the cost without it */

	if (off && *off)
		return;
	if (fanotify_mark(fsw.fan, FAN_MARK_ADD | FAN_MARK_MOUNT | FAN_MARK_IGNORE_SURV, FSW_DATA_EVENTS, AT_FDCWD,
		    state_dir))
		log_info("fswatch", "no ignore mark on state_dir's mount (%s): its writes are read and dropped",
			strerror(errno));
	else
		fsw.mount_ignored = true;
}

void fswatch_init(const char *state_dir, long cache_timeout, const struct fswatch_hooks *hooks)
{
	const char *gather = getenv("SBXFS_TEST_FSWATCH_GATHER_MS");

	const char *stall = getenv("SBXFS_TEST_FSWATCH_STALL_MS");

	if (cache_timeout <= 0) {
		log_info("fswatch", "cache_timeout is 0: no watcher, data caches take the short timeouts");
		return;
	}
	fsw.hooks = hooks;
	fsw.mntns = util_ns_inode(getpid(), "mnt");
	fsw.stall_ms = stall ? strtol(stall, NULL, 10) : 0;
	fsw.gather_ms = gather ? strtol(gather, NULL, 10) : FSW_GATHER_MS;
	if (fsw.gather_ms < 0 || fsw.gather_ms > 20)
		fsw.gather_ms = FSW_GATHER_MS;
	fsw.fan = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_DFID_NAME_TARGET, O_RDONLY);
	if (fsw.fan < 0) {
		log_warn("fswatch", "fanotify_init: %s: no watcher, data caches take the short timeouts", strerror(errno));
		return;
	}
	fsw_ignore_own_mount(state_dir);
	fsw.mntfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* not O_PATH: open_by_handle_at */
	fsw.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fsw.mntfd < 0 || fsw.wake < 0 || pthread_create(&fsw.thread, NULL, fsw_thread, NULL)) {
		log_warn("fswatch", "cannot start the watcher: %s: data caches take the short timeouts", strerror(errno));
		if (fsw.mntfd >= 0)
			close(fsw.mntfd);
		if (fsw.wake >= 0)
			close(fsw.wake);
		close(fsw.fan);
		fsw.fan = fsw.mntfd = fsw.wake = -1;
		return;
	}
	fsw.swept = true;
	fsw.on = true;
	log_info("fswatch", "data caches are kept for %ld s, invalidated by fanotify%s", cache_timeout,
		fsw.stall_ms ? " (test: the watcher stalls before each read)" : "");
}

void fswatch_shutdown(void)
{
	uint64_t one = 1;

	if (!fsw.on)
		return;
	__atomic_store_n(&fsw.stop, true, __ATOMIC_RELEASE);
	if (write(fsw.wake, &one, sizeof(one)) < 0)
		log_warn("fswatch", "cannot wake the watcher: %s", strerror(errno));
	pthread_join(fsw.thread, NULL);
	fsw.on = false;
	for (int b = 0; b < FSW_BUCKETS; b++)
		while (fsw.tab[b]) {
			struct fsw_dir *d = fsw.tab[b];
			fsw.tab[b] = d->next;
			view_put(d->v);
			free(d);
		}
	close(fsw.fan);
	close(fsw.mntfd);
	close(fsw.wake);
	fsw.fan = fsw.mntfd = fsw.wake = -1;
}
