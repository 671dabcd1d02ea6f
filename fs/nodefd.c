/* SPDX-License-Identifier: MIT */
/*
 * nodefd.c - the host descriptors of data nodes: handles, an LRU of O_PATH
 * descriptors, reopening by handle (see nodefd.h for the contract).
 *
 * Why handles are taken at eviction, not at lookup: while the cache has
 * room (most mounts, most of the time) a node costs exactly what it did
 * before, an openat(O_PATH) and an fstat; name_to_handle_at is paid only
 * for the descriptors the cap closes, one each, on the path that closes
 * them.  A node reopened by handle keeps its handle: it is encoded once.
 *
 * Why one list for every sandbox: the cache is only a cache (a node
 * without its descriptor still works, one open_by_handle_at later), so a
 * sandbox that walks a huge tree only makes others reopen; what a sandbox
 * can hold (open files, fixed nodes) is capped per sandbox in data.c and
 * here with the budget.
 *
 * The list's order: a node goes to its head when its last user lets go and
 * is evicted from its tail; a node in use is not on it.  The cap is checked
 * when a descriptor enters the cache (a new node, a reopen) and when a user
 * lets go, so the cache passes it at most by the descriptors in use.
 */
#define _GNU_SOURCE
#include "nodefd.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/budget.h"
#include "../common/log.h"

#define NFD_TRIM_BATCH 64 /* descriptors closed per round of nfd_trim, after the lock */

static struct {
	pthread_mutex_t lock;
	int mntfd;    /* state_dir, open: the mount handles are opened on (immutable after init) */
	int mnt_id;   /* its mount id */
	bool handles; /* handles work on it (immutable after init) */
	void (*free_node)(struct node *n);
	/* protected by lock */
	struct node *head, *tail; /* the LRU list: unused cached descriptors, most recent first */
	long nodes, cached, fixed, in_use;
	bool warned_mount; /* a node on another mount was logged */
	/* atomic */
	uint64_t reopens, evictions, stale;
} nfd = { .lock = PTHREAD_MUTEX_INITIALIZER, .mntfd = -1 };

/* ---- handles ------------------------------------------------------------------------------ */

/* The handle of (dirfd, name, flags) if it is on state_dir's mount, malloc'd;
 * NULL when there is none (errno: EOPNOTSUPP, EXDEV for another mount). */
static struct file_handle *nfd_handle_at(int dirfd, const char *name, int flags)
{
	union {
		struct file_handle fh;
		char space[sizeof(struct file_handle) + MAX_HANDLE_SZ];
	} u;
	struct file_handle *copy;
	int mnt;

	u.fh.handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(dirfd, name, &u.fh, &mnt, flags))
		return NULL;
	if (mnt != nfd.mnt_id) {
		errno = EXDEV;
		return NULL;
	}
	copy = malloc(sizeof(*copy) + u.fh.handle_bytes);
	if (!copy)
		return NULL;
	memcpy(copy, &u.fh, sizeof(*copy) + u.fh.handle_bytes);
	return copy;
}

static bool nfd_handle_eq(const struct file_handle *a, const struct file_handle *b)
{
	return a->handle_type == b->handle_type && a->handle_bytes == b->handle_bytes &&
	       !memcmp(a->f_handle, b->f_handle, a->handle_bytes);
}

void nfd_init(const char *state_dir, void (*free_node)(struct node *n))
{
	struct file_handle *fh = NULL;
	int fd = -1;

	nfd.free_node = free_node;
	/* not O_PATH: open_by_handle_at refuses one (EBADF) */
	nfd.mntfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (nfd.mntfd < 0) {
		log_warn("data", "file handles: cannot open %s: %s", state_dir, strerror(errno));
		goto out;
	}
	{
		union {
			struct file_handle fh;
			char space[sizeof(struct file_handle) + MAX_HANDLE_SZ];
		} u;
		u.fh.handle_bytes = MAX_HANDLE_SZ;
		if (name_to_handle_at(nfd.mntfd, "", &u.fh, &nfd.mnt_id, AT_EMPTY_PATH))
			goto out;
	}
	/* a round trip proves both halves: the filesystem decodes, and the
	 * daemon may (open_by_handle_at needs CAP_DAC_READ_SEARCH) */
	fh = nfd_handle_at(nfd.mntfd, "", AT_EMPTY_PATH);
	if (!fh)
		goto out;
	fd = open_by_handle_at(nfd.mntfd, fh, O_PATH | O_CLOEXEC);
	if (fd < 0)
		goto out;
	nfd.handles = true;
out:
	if (!nfd.handles)
		log_warn("data", "file handles do not work on %s (%s): every data file the kernel remembers keeps a "
				 "descriptor, counted in its sandbox's budget (docs/security.md)",
			state_dir, strerror(errno));
	if (fd >= 0)
		close(fd);
	free(fh);
}

void nfd_shutdown(void)
{
	if (nfd.mntfd >= 0)
		close(nfd.mntfd);
	nfd.mntfd = -1;
}

/* ---- the list ----------------------------------------------------------------------------- */

static void nfd_lru_del_locked(struct node *n)
{
	if (!n->fd_lru)
		return;
	if (n->lru_prev)
		n->lru_prev->lru_next = n->lru_next;
	else
		nfd.head = n->lru_next;
	if (n->lru_next)
		n->lru_next->lru_prev = n->lru_prev;
	else
		nfd.tail = n->lru_prev;
	n->lru_prev = n->lru_next = NULL;
	n->fd_lru = false;
}

static void nfd_lru_push_locked(struct node *n)
{
	n->lru_prev = NULL;
	n->lru_next = nfd.head;
	if (nfd.head)
		nfd.head->lru_prev = n;
	else
		nfd.tail = n;
	nfd.head = n;
	n->fd_lru = true;
}

/* Up to max descriptors over the cap taken off their nodes into out;
 * returns how many.  A node whose handle cannot be taken becomes fixed. */
static int nfd_evict_locked(long cap, int *out, int max)
{
	int k = 0;

	while (nfd.cached > cap && nfd.tail && k < max) {
		struct node *n = nfd.tail;

		nfd_lru_del_locked(n);
		if (!n->fh && !(n->fh = nfd_handle_at(n->fd, "", AT_EMPTY_PATH))) {
			if (errno == EXDEV && !nfd.warned_mount) {
				nfd.warned_mount = true;
				log_warn("data", "a data file is on another mount than state_dir: its descriptor is "
						 "kept, counted in its sandbox's budget");
			}
			n->fd_fixed = true;
			nfd.cached--;
			nfd.fixed++;
			budget_force(n->view->fds, BUDGET_DATA, 1);
			continue;
		}
		out[k++] = n->fd;
		n->fd = -1;
		nfd.cached--;
	}
	return k;
}

static void nfd_close_all(const int *fds, int k)
{
	for (int i = 0; i < k; i++)
		close(fds[i]);
	if (k)
		__atomic_add_fetch(&nfd.evictions, (uint64_t)k, __ATOMIC_RELAXED);
}

void nfd_trim(void)
{
	long cap = budget_data_cache();
	int fds[NFD_TRIM_BATCH], k;

	do {
		pthread_mutex_lock(&nfd.lock);
		k = nfd.cached > cap ? nfd_evict_locked(cap, fds, NFD_TRIM_BATCH) : 0;
		pthread_mutex_unlock(&nfd.lock);
		nfd_close_all(fds, k);
	} while (k == NFD_TRIM_BATCH);
}

/* ---- nodes -------------------------------------------------------------------------------- */

int nfd_charge(struct view *v, bool *charged)
{
	int err;

	*charged = false;
	if (nfd.handles)
		return 0;
	err = budget_take(v->fds, BUDGET_DATA, 1);
	*charged = !err;
	return err;
}

void nfd_uncharge(struct view *v)
{
	budget_give(v->fds, BUDGET_DATA, 1);
}

void nfd_attach_locked(struct node *n, int fd, bool charged)
{
	n->fd = fd;
	pthread_mutex_lock(&nfd.lock);
	nfd.nodes++;
	if (!nfd.handles) {
		if (!charged) /* not made by nfd_charge's caller: counted all the same */
			budget_force(n->view->fds, BUDGET_DATA, 1);
		n->fd_fixed = true;
		nfd.fixed++;
	} else {
		nfd.cached++;
		nfd_lru_push_locked(n);
	}
	pthread_mutex_unlock(&nfd.lock);
}

/* Release what a forgotten node holds (no lock held, no user left). */
static void nfd_release(struct node *n, int fd, bool fixed)
{
	if (fd >= 0)
		close(fd);
	if (fixed)
		budget_give(n->view->fds, BUDGET_DATA, 1);
	free(n->fh);
	n->fh = NULL;
}

/* lock held: one user less; true when n must now be freed (forgotten while
 * in use), its fd and fixed state in *fd, *fixed. */
static bool nfd_unuse_locked(struct node *n, int *fd, bool *fixed)
{
	if (--n->fd_users)
		return false;
	nfd.in_use--;
	if (n->fd_free) {
		*fd = n->fd;
		*fixed = n->fd_fixed;
		if (n->fd >= 0 && !n->fd_fixed)
			nfd.cached--;
		if (n->fd_fixed)
			nfd.fixed--;
		n->fd = -1;
		return true;
	}
	if (n->fd >= 0 && !n->fd_fixed)
		nfd_lru_push_locked(n);
	return false;
}

static void nfd_use_locked(struct node *n)
{
	if (!n->fd_users++)
		nfd.in_use++;
	nfd_lru_del_locked(n);
}

int nfd_get(struct node *n)
{
	struct file_handle *fh;
	int fd, extra = -1, err, dead_fd = -1;
	bool dead = false, fixed = false;

	pthread_mutex_lock(&nfd.lock);
	if (n->fd >= 0) {
		nfd_use_locked(n);
		fd = n->fd;
		pthread_mutex_unlock(&nfd.lock);
		return fd;
	}
	fh = n->fh;
	if (n->fd_gone || !fh) {
		pthread_mutex_unlock(&nfd.lock);
		return -ESTALE;
	}
	nfd_use_locked(n); /* held while the lock is not */
	pthread_mutex_unlock(&nfd.lock);
	/* O_PATH: the file itself, whatever its type (a symlink included:
	 * a handle is never followed) */
	fd = open_by_handle_at(nfd.mntfd, fh, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	err = errno;
	pthread_mutex_lock(&nfd.lock);
	if (fd < 0) {
		if (err == ESTALE || err == ENOENT) {
			n->fd_gone = true; /* removed, and nothing pins it */
			err = ESTALE;
			__atomic_add_fetch(&nfd.stale, 1, __ATOMIC_RELAXED);
		}
		dead = nfd_unuse_locked(n, &dead_fd, &fixed);
		pthread_mutex_unlock(&nfd.lock);
		if (dead) {
			nfd_release(n, dead_fd, fixed);
			nfd.free_node(n);
		}
		return -err;
	}
	if (n->fd >= 0) { /* reopened by another user meanwhile */
		extra = fd;
		fd = n->fd;
	} else {
		n->fd = fd;
		nfd.cached++;
		__atomic_add_fetch(&nfd.reopens, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&nfd.lock);
	if (extra >= 0)
		close(extra);
	return fd;
}

void nfd_put(struct node *n)
{
	long cap = budget_data_cache();
	int fd = -1;
	bool dead, fixed = false, over;

	pthread_mutex_lock(&nfd.lock);
	dead = nfd_unuse_locked(n, &fd, &fixed);
	over = nfd.cached > cap;
	pthread_mutex_unlock(&nfd.lock);
	if (dead) {
		nfd_release(n, fd, fixed);
		nfd.free_node(n);
	}
	if (over)
		nfd_trim();
}

bool nfd_pinned(struct node *n)
{
	bool pinned;

	pthread_mutex_lock(&nfd.lock);
	pinned = n->fd >= 0;
	pthread_mutex_unlock(&nfd.lock);
	return pinned;
}

/* The comparison of n's handle with that of (dirfd, name, flags). */
static bool nfd_same(struct node *n, int dirfd, const char *name, int flags)
{
	struct file_handle *mine, *now;
	bool same;

	pthread_mutex_lock(&nfd.lock);
	same = n->fd >= 0;
	mine = n->fh;
	pthread_mutex_unlock(&nfd.lock);
	if (same)
		return true;
	if (!mine) /* cannot be: a descriptor is evicted only once its handle is taken */
		return false;
	now = nfd_handle_at(dirfd, name, flags);
	same = now && nfd_handle_eq(mine, now);
	free(now);
	return same;
}

bool nfd_same_at(struct node *n, int dirfd, const char *name)
{
	return nfd_same(n, dirfd, name, 0); /* 0: a final symlink is not followed */
}

bool nfd_same_fd(struct node *n, int fd)
{
	return nfd_same(n, fd, "", AT_EMPTY_PATH);
}

void nfd_offer(struct node *n, int fd)
{
	pthread_mutex_lock(&nfd.lock);
	if (n->fd < 0 && !n->fd_gone && !n->fd_free) {
		n->fd = fd;
		fd = -1;
		nfd.cached++;
		if (!n->fd_users)
			nfd_lru_push_locked(n);
	}
	pthread_mutex_unlock(&nfd.lock);
	if (fd >= 0)
		close(fd);
	nfd_trim();
}

void nfd_stale(struct node *n)
{
	pthread_mutex_lock(&nfd.lock);
	n->fd_gone = true;
	pthread_mutex_unlock(&nfd.lock);
	__atomic_add_fetch(&nfd.stale, 1, __ATOMIC_RELAXED);
}

bool nfd_forget(struct node *n)
{
	int fd;
	bool fixed;

	pthread_mutex_lock(&nfd.lock);
	nfd_lru_del_locked(n);
	nfd.nodes--;
	if (n->fd_users) {
		n->fd_free = true;
		pthread_mutex_unlock(&nfd.lock);
		return false;
	}
	fd = n->fd;
	fixed = n->fd_fixed;
	if (fd >= 0 && !fixed)
		nfd.cached--;
	if (fixed)
		nfd.fixed--;
	n->fd = -1;
	pthread_mutex_unlock(&nfd.lock);
	nfd_release(n, fd, fixed);
	return true;
}

void nfd_stats(struct nfd_stats *st)
{
	pthread_mutex_lock(&nfd.lock);
	st->handles = nfd.handles;
	st->nodes = nfd.nodes;
	st->cached = nfd.cached;
	st->fixed = nfd.fixed;
	st->in_use = nfd.in_use;
	pthread_mutex_unlock(&nfd.lock);
	st->reopens = __atomic_load_n(&nfd.reopens, __ATOMIC_RELAXED);
	st->evictions = __atomic_load_n(&nfd.evictions, __ATOMIC_RELAXED);
	st->stale = __atomic_load_n(&nfd.stale, __ATOMIC_RELAXED);
}
