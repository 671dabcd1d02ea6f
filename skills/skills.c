/* SPDX-License-Identifier: MIT */
/*
 * skills.c - the skills sync engine (see skills.h for the contract).
 *
 * Why rescan the tree rather than replay the FUSE events: events say that
 * something changed, not what the sandbox has; the manifest diff says
 * exactly what to upload, also after a failed sync, a restart, or a change
 * the daemon did not see (the library copy).  A rescan of the limits'
 * largest tree (2000 files) is a few thousand lstat()s and hashes only of
 * files whose stat changed, so it costs little next to one upload.
 *
 * Why the scope lock: DESIGN §4 serialises acquire, release, sync and
 * destroy of a scope, so a sync never uploads into a sandbox being
 * destroyed, and rmdir (release) naturally waits for a running sync, then
 * runs what is still pending itself before the sandbox is parked.
 *
 * Debounce: a change schedules the sync SKILLS_DEBOUNCE_MS later, pushed
 * back by further changes up to SKILLS_MAX_DELAY_MS after the first, so a
 * `cp -r` of 445 files makes one sync, and a writer that never stops still
 * gets synced.  fsync skips the wait.  A failed sync is retried with a
 * back-off (1 s doubling to 60 s) while changes are unsynced.
 *
 * Locks: eng.lock, a leaf (its place in the order: docs/architecture.md,
 * "Lock order").
 */
#define _GNU_SOURCE
#include "skills.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/layout.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../runtime/park.h"
#include "../runtime/work.h"
#include "../providers/pool.h"
#include "library.h"
#include "manifest.h"

#define SKILLS_DEBOUNCE_MS 200
#define SKILLS_MAX_DELAY_MS 2000
#define SKILLS_RETRY_MAX_MS 60000
#define SKILLS_BUCKETS 256
#define SKILLS_MANIFEST_FILE "skills.json"

struct skills_sbx {
	struct sbx *s; /* referenced (pool_get) until skills_shutdown */
	char *root;     /* thread_dir/skills, canonical (realpath) */
	char *saved;    /* thread_dir/skills.json: the synced manifest */
	struct skills_sbx *next; /* eng.lock: registry chain */

	/* eng.lock: */
	bool upload;                 /* the provider cannot mount skills/: sync by upload */
	uint64_t gen_written, gen_synced, gen_failed;
	/* syncs begun, and the number of the last that failed: an fsync fails
	 * only with the error of a sync begun after it, never an older one's */
	uint64_t attempts, failed_attempt;
	uint64_t due_ms, first_ms;   /* a sync is scheduled for due_ms (0: none) */
	bool busy;                   /* a sync work item is queued or running */
	bool syncing;                /* a sync runs (status) */
	bool urgent;                 /* an fsync waits: no debounce, no back-off */
	int fails;                   /* consecutive failed syncs */
	int last_err;
	char last_error[300];
	uint64_t use_files, use_bytes, use_dirs; /* for the limits: last scan + growth since */
	struct skills_limits lim;
	uint64_t syncs, files_up, bytes_up;

	/* the scope lock (syncs and pool hooks): */
	struct skills_manifest synced; /* what the sandbox has */

	struct park_queue waiters; /* fsyncs */
	int refs; /* atomic: the registry's, and one per pending wake-up of waiters (park.h) */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct skills_sbx *table[SKILLS_BUCKETS];
	struct skills_stats st;
	pthread_t timer;
	bool running, stopping;
} eng = { .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER };

static unsigned sk_hash(const struct sbx *s)
{
	return util_hash_ptr(s, SKILLS_BUCKETS);
}

/* eng.lock held. */
static struct skills_sbx *sk_find_locked(const struct sbx *s)
{
	for (struct skills_sbx *k = eng.table[sk_hash(s)]; k; k = k->next)
		if (k->s == s)
			return k;
	return NULL;
}

/* Entries live until skills_shutdown, so a pointer found stays valid. */
static struct skills_sbx *sk_find(const struct sbx *s)
{
	struct skills_sbx *k;

	pthread_mutex_lock(&eng.lock);
	k = sk_find_locked(s);
	pthread_mutex_unlock(&eng.lock);
	return k;
}

static void sk_ref(void *p)
{
	__atomic_add_fetch(&((struct skills_sbx *)p)->refs, 1, __ATOMIC_RELAXED);
}

/* The last reference: the registry let go (skills_shutdown) and the park
 * thread is done with the queue (a wake-up pending at shutdown holds one). */
static void sk_unref(void *p)
{
	struct skills_sbx *k = p;

	if (__atomic_sub_fetch(&k->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	park_queue_destroy(&k->waiters);
	skills_manifest_free(&k->synced);
	pool_put(k->s);
	free(k->root);
	free(k->saved);
	free(k);
}

static struct skills_sbx *sk_get(struct sbx *s)
{
	struct buf root = BUF_INIT(BUF_CAP_PATH), saved = BUF_INIT(BUF_CAP_PATH);
	struct skills_sbx *k = sk_find(s), *old;
	char *canon;

	if (k)
		return k;
	if (layout_dir(&root, s->thread_dir, LAYOUT_SKILLS) || layout_file(&saved, s->thread_dir, SKILLS_MANIFEST_FILE))
		goto fail;
	k = calloc(1, sizeof(*k));
	if (!k)
		goto fail;
	canon = realpath(root.ptr, NULL);
	k->root = canon ? canon : buf_take(&root, NULL);
	k->saved = buf_take(&saved, NULL);
	if (!k->root || !k->saved) {
		free(k->root);
		free(k->saved);
		free(k);
		goto fail;
	}
	k->s = s;
	skills_manifest_init(&k->synced);
	k->refs = 1; /* the registry's */
	park_queue_init(&k->waiters, sk_ref, sk_unref, k);
	pool_get(s); /* before eng.lock: the order is pool.lock -> eng.lock (the status hook) */
	pthread_mutex_lock(&eng.lock);
	old = sk_find_locked(s);
	if (!old) {
		k->next = eng.table[sk_hash(s)];
		eng.table[sk_hash(s)] = k;
	}
	pthread_mutex_unlock(&eng.lock);
	if (old) { /* raced with another up: keep that one */
		pool_put(s);
		park_queue_destroy(&k->waiters);
		free(k->root);
		free(k->saved);
		free(k);
		k = old;
	}
	buf_free(&root);
	buf_free(&saved);
	return k;
fail:
	buf_free(&root);
	buf_free(&saved);
	return NULL;
}

static void scope_of(const struct sbx *s, char out[NAMES_SCOPE_MAX])
{
	snprintf(out, NAMES_SCOPE_MAX, "%s/%s", s->user, s->thread);
}

/* eng.lock held: run a sync at `at` (earlier wins). */
static void schedule_locked(struct skills_sbx *k, uint64_t at)
{
	if (!k->due_ms || at < k->due_ms)
		k->due_ms = at;
	pthread_cond_signal(&eng.wake);
}

/* ---- usage and limits ---------------------------------------------------------- */

/* A fresh count of the tree (no hashing).  No lock held. */
static void usage_rescan(struct skills_sbx *k)
{
	struct skills_manifest m;
	struct skills_scan_result res;

	skills_manifest_scan(k->root, NULL, NULL, false, &m, &res);
	pthread_mutex_lock(&eng.lock);
	k->use_files = m.files;
	k->use_bytes = m.bytes;
	k->use_dirs = m.dirs;
	pthread_mutex_unlock(&eng.lock);
	skills_manifest_free(&m);
}

int skills_check_add(struct sbx *s, bool dir)
{
	struct skills_sbx *k = sk_find(s);

	for (int pass = 0; k && pass < 2; pass++) {
		pthread_mutex_lock(&eng.lock);
		uint64_t *use = dir ? &k->use_dirs : &k->use_files;
		if (!k->lim.max_files || *use + 1 <= k->lim.max_files) {
			(*use)++; /* reserved until the next count */
			pthread_mutex_unlock(&eng.lock);
			return 0;
		}
		pthread_mutex_unlock(&eng.lock);
		if (pass == 0)
			usage_rescan(k); /* removals since the last count free room */
	}
	return k ? ENOSPC : 0;
}

int skills_check_grow(struct sbx *s, uint64_t old_size, uint64_t new_size)
{
	struct skills_sbx *k = sk_find(s);
	uint64_t grow = new_size > old_size ? new_size - old_size : 0;

	if (!k || !grow)
		return 0;
	for (int pass = 0; pass < 2; pass++) {
		pthread_mutex_lock(&eng.lock);
		if (k->lim.max_file && new_size > k->lim.max_file) {
			pthread_mutex_unlock(&eng.lock);
			return EFBIG;
		}
		if (!k->lim.max_total || k->use_bytes + grow <= k->lim.max_total) {
			k->use_bytes += grow;
			pthread_mutex_unlock(&eng.lock);
			return 0;
		}
		pthread_mutex_unlock(&eng.lock);
		if (pass == 0)
			usage_rescan(k);
	}
	return ENOSPC;
}

int skills_check_symlink(struct sbx *s, int dir_fd, const char *target)
{
	struct skills_sbx *k = sk_find(s);
	char proc[64], dir[PATH_MAX];
	size_t rootlen;
	ssize_t n;

	if (!k)
		return 0;
	if (str_fmt(proc, sizeof(proc), "/proc/self/fd/%d", dir_fd))
		return EPERM;
	n = readlink(proc, dir, sizeof(dir) - 1);
	if (n < 0)
		return EPERM;
	dir[n] = '\0';
	rootlen = strlen(k->root);
	if (strncmp(dir, k->root, rootlen) || (dir[rootlen] && dir[rootlen] != '/'))
		return EPERM;
	return skills_link_inside(dir[rootlen] ? dir + rootlen + 1 : "", target) ? 0 : EPERM;
}

/* ---- events ----------------------------------------------------------------------- */

void skills_changed(struct sbx *s)
{
	struct skills_sbx *k = sk_find(s);
	uint64_t now = util_now_ms();

	if (!k)
		return;
	pthread_mutex_lock(&eng.lock);
	k->gen_written++;
	if (!k->upload) {
		k->gen_synced = k->gen_written; /* the sandbox mounts skills/: it has it */
	} else {
		if (!k->first_ms)
			k->first_ms = now;
		k->due_ms = 0;
		schedule_locked(k, now + SKILLS_DEBOUNCE_MS < k->first_ms + SKILLS_MAX_DELAY_MS
					   ? now + SKILLS_DEBOUNCE_MS
					   : k->first_ms + SKILLS_MAX_DELAY_MS);
	}
	pthread_mutex_unlock(&eng.lock);
}

struct skills_wait {
	struct skills_sbx *k; /* lives until skills_shutdown, which drains its queue */
	uint64_t target;      /* the generation it waits for */
	uint64_t after;       /* syncs begun before it */
};

int skills_wait_result(const struct skills_wait *w)
{
	int err = -1;

	pthread_mutex_lock(&eng.lock);
	if (w->k->gen_synced >= w->target)
		err = 0;
	else if (w->k->gen_failed >= w->target && w->k->failed_attempt > w->after)
		err = w->k->last_err ? w->k->last_err : EIO;
	pthread_mutex_unlock(&eng.lock);
	return err;
}

void skills_wait_free(void *w)
{
	free(w);
}

int skills_wait_begin(struct sbx *s, bool wrote, struct skills_wait **out, struct park_queue **q)
{
	struct skills_sbx *k = sk_find(s);
	struct skills_wait *w;

	*out = NULL;
	*q = NULL;
	if (!k)
		return 0;
	w = calloc(1, sizeof(*w));
	if (!w)
		return ENOMEM;
	pthread_mutex_lock(&eng.lock);
	if (wrote) {
		k->gen_written++;
		if (!k->upload)
			k->gen_synced = k->gen_written;
	}
	w->k = k;
	w->target = k->gen_written;
	w->after = k->attempts;
	if (k->gen_synced >= w->target) {
		pthread_mutex_unlock(&eng.lock);
		free(w);
		return 0;
	}
	k->urgent = true;
	k->due_ms = 0;
	schedule_locked(k, util_now_ms());
	pthread_mutex_unlock(&eng.lock);
	*out = w;
	*q = &k->waiters;
	return 0;
}

/* ---- the sync ----------------------------------------------------------------------- */

static int open_in_tree(int rootfd, const char *rel, bool follow)
{
	struct open_how how = {
		.flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | (follow ? 0 : RESOLVE_NO_SYMLINKS),
	};

	return (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
}

/* A message into a fixed buffer, cut if it must be (log and status text). */
__attribute__((format(printf, 3, 4))) static void note(char *dst, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(dst, len, fmt, ap);
	va_end(ap);
}

struct sync_totals {
	uint64_t files, bytes, removed;
};

/* One operation against the sandbox.  SBX_OK or the provider's error. */
static enum sbx_err sync_op(struct sbx_box *box, int rootfd, struct skills_op *op, struct sync_totals *t)
{
	const struct sbx_skills_ops *ops = sbx_skills(box);
	enum sbx_err e = SBX_ERR_IO;
	const char *path = op->path; /* relative to the projection root (provider.h) */
	struct stat st;
	int fd = -1;

	switch (op->kind) {
	case SKOP_REMOVE:
		e = ops->remove(box, path, op->is_dir);
		if (e == SBX_ERR_GONE)
			e = SBX_OK;
		if (!e)
			t->removed++;
		break;
	case SKOP_MKDIR:
		e = ops->mkdir(box, path, op->to->mode & 07777);
		break;
	case SKOP_UPLOAD:
		fd = open_in_tree(rootfd, op->path, op->to->kind == SK_LINK);
		if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
			/* changed since the scan: the change's own event syncs it again */
			e = SBX_ERR_GONE;
			break;
		}
		e = ops->upload(box, path, fd, st.st_size, op->to->mode & 07777);
		if (!e) {
			t->files++;
			t->bytes += (uint64_t)st.st_size;
		}
		break;
	}
	if (fd >= 0)
		close(fd);
	return e;
}

/* The end of the batch of ops that can start at v[i]: ops of one kind
 * (mkdir or upload) the provider can send together, within the batch
 * limits; i + 1 when it cannot. */
static size_t batch_end(const struct sbx_skills_ops *ops, const struct skills_op *v, size_t n, size_t i)
{
	enum skills_op_kind kind = v[i].kind;
	uint64_t bytes = 0;
	size_t k = i;

	if (!(kind == SKOP_MKDIR ? ops->mkdir_many : kind == SKOP_UPLOAD ? ops->upload_many : NULL))
		return i + 1;
	for (; k < n && k - i < SBX_SKILLS_BATCH && v[k].kind == kind; k++) {
		if (kind == SKOP_UPLOAD && k > i && bytes + v[k].to->size > SBX_SKILLS_BATCH_BYTES)
			break;
		bytes += kind == SKOP_UPLOAD ? v[k].to->size : 0;
	}
	return k;
}

/* v[0..n): mkdirs or uploads sent together.  SBX_OK or the provider's
 * error (then none is done). */
static enum sbx_err sync_batch(struct sbx_box *box, int rootfd, struct skills_op *v, size_t n, struct sync_totals *t)
{
	const struct sbx_skills_ops *ops = sbx_skills(box);
	struct sbx_skill_file f[SBX_SKILLS_BATCH];
	struct skills_op *which[SBX_SKILLS_BATCH];
	size_t k = 0;
	uint64_t bytes = 0;
	enum sbx_err e;

	for (size_t i = 0; i < n; i++) {
		struct stat st;
		int fd = -1;

		if (v[i].kind == SKOP_UPLOAD) {
			fd = open_in_tree(rootfd, v[i].path, v[i].to->kind == SK_LINK);
			if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
				if (fd >= 0)
					close(fd); /* changed since the scan: its own event syncs it again */
				continue;
			}
			bytes += (uint64_t)st.st_size;
		}
		f[k] = (struct sbx_skill_file){ v[i].path, fd, fd >= 0 ? st.st_size : 0, v[i].to->mode & 07777 };
		which[k++] = &v[i];
	}
	e = !k ? SBX_OK : v[0].kind == SKOP_UPLOAD ? ops->upload_many(box, f, k) : ops->mkdir_many(box, f, k);
	for (size_t i = 0; i < k; i++) {
		if (f[i].fd >= 0)
			close(f[i].fd);
		which[i]->done = !e;
	}
	if (!e && v[0].kind == SKOP_UPLOAD) {
		t->files += k;
		t->bytes += bytes;
	}
	return e;
}

/* Scan, diff, apply, remember.  Scope lock held.  0 or an errno; the
 * reason is in why. */
static int sync_run(struct skills_sbx *k, struct sbx_box *box, const struct skills_limits *lim,
	struct sync_totals *t, char *why, size_t whylen)
{
	struct skills_manifest now, result;
	struct skills_scan_result res;
	struct skills_op *v = NULL;
	size_t n = 0;
	enum sbx_err e = SBX_OK;
	int rootfd = -1, err = 0;

	why[0] = '\0';
	if (skills_manifest_scan(k->root, &k->synced, lim, true, &now, &res)) {
		err = res.err;
		note(why, whylen, "skills/%s: %s", res.err_path,
			err == EFBIG ? "a file over skills.max_file_size"
			: err == ENOSPC ? "over skills.max_total_size or skills.max_files"
					: strerror(err));
		skills_manifest_free(&now);
		return err;
	}
	if (res.refused)
		note(why, whylen, "skills/%s%s: symlink not projected (absolute, leaving skills/, or not to a file)",
			res.first_refused, res.refused > 1 ? " and others" : "");
	if (skills_diff(&k->synced, &now, &v, &n)) {
		skills_manifest_free(&now);
		note(why, whylen, "out of memory");
		return ENOMEM;
	}
	rootfd = n ? open(k->root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	for (size_t i = 0, end; i < n && !e; i = end) {
		end = rootfd < 0 ? i + 1 : batch_end(sbx_skills(box), v, n, i);
		if (rootfd < 0)
			e = SBX_ERR_IO;
		else if (end > i + 1)
			e = sync_batch(box, rootfd, v + i, end - i, t);
		else
			e = sync_op(box, rootfd, &v[i], t);
		if (e == SBX_ERR_GONE && end == i + 1 && v[i].kind == SKOP_UPLOAD)
			e = SBX_OK; /* gone or changed since the scan: not done, no failure */
		else if (!e && end == i + 1)
			v[i].done = true;
		else if (e)
			note(why, whylen, "%s skills/%s%s: %s",
				v[i].kind == SKOP_REMOVE ? "remove" : v[i].kind == SKOP_MKDIR ? "mkdir" : "upload", v[i].path,
				end > i + 1 ? " (and the rest of its batch)" : "", sbx_err_name(e));
	}
	if (rootfd >= 0)
		close(rootfd);
	if (!skills_manifest_result(&k->synced, &now, v, n, &result)) {
		skills_manifest_move(&k->synced, &result);
		if (skills_manifest_save(k->saved, box->remote_id, &k->synced))
			log_warn(k->s->token, "cannot save %s: %s", k->saved, strerror(errno));
	} else {
		/* cannot tell what the sandbox has: start from nothing next time */
		skills_manifest_free(&k->synced);
		unlink(k->saved);
		if (!e)
			e = SBX_ERR_NOMEM;
	}
	free(v);
	skills_manifest_free(&now);
	pthread_mutex_lock(&eng.lock);
	k->use_files = k->synced.files;
	k->use_bytes = k->synced.bytes;
	k->use_dirs = k->synced.dirs;
	pthread_mutex_unlock(&eng.lock);
	if (e)
		err = sbx_err_errno(e) == ENOENT ? EIO : sbx_err_errno(e);
	return err;
}

/* Sync k if it has unsynced changes (or force).  Scope lock held, s active
 * (or being released/created). */
static void sync_now(struct skills_sbx *k, struct sbx *s, struct sbx_box *box, bool force)
{
	char scope[NAMES_SCOPE_MAX], why[300];
	struct skills_limits lim;
	struct sync_totals t = { 0 };
	uint64_t g, attempt, t0 = util_now_ms();
	int err;

	pthread_mutex_lock(&eng.lock);
	if (!k->upload || !sbx_skills(box) || (!force && k->gen_synced >= k->gen_written)) {
		pthread_mutex_unlock(&eng.lock);
		return;
	}
	g = k->gen_written;
	attempt = ++k->attempts;
	k->syncing = true;
	k->urgent = false;
	k->due_ms = k->first_ms = 0;
	lim = k->lim;
	pthread_mutex_unlock(&eng.lock);

	scope_of(s, scope);
	err = sync_run(k, box, &lim, &t, why, sizeof(why));
	if (err)
		log_warn(scope, "skills sync failed: %s", why);
	else if (t.files || t.removed)
		log_info(scope, "skills synced: %llu files (%llu bytes) uploaded, %llu removed in %llu ms",
			(unsigned long long)t.files, (unsigned long long)t.bytes, (unsigned long long)t.removed,
			(unsigned long long)(util_now_ms() - t0));
	else if (why[0])
		log_warn(scope, "skills: %s", why);

	pthread_mutex_lock(&eng.lock);
	k->syncing = false;
	k->syncs++;
	k->files_up += t.files;
	k->bytes_up += t.bytes;
	eng.st.syncs++;
	eng.st.files_uploaded += t.files;
	eng.st.bytes_uploaded += t.bytes;
	eng.st.removed += t.removed;
	if (!err) {
		if (g > k->gen_synced)
			k->gen_synced = g;
		k->fails = 0;
		k->last_err = 0;
		snprintf(k->last_error, sizeof(k->last_error), "%s", why);
	} else {
		eng.st.sync_failures++;
		k->gen_failed = g;
		k->failed_attempt = attempt;
		k->last_err = err;
		k->fails++;
		snprintf(k->last_error, sizeof(k->last_error), "%s", why);
	}
	if (k->gen_written > k->gen_synced) {
		uint64_t delay = SKILLS_DEBOUNCE_MS;
		if (err && !k->urgent) {
			delay = 1000;
			for (int i = 1; i < k->fails && delay < SKILLS_RETRY_MAX_MS; i++)
				delay *= 2;
			if (delay > SKILLS_RETRY_MAX_MS)
				delay = SKILLS_RETRY_MAX_MS;
		} else if (k->urgent) {
			delay = 0;
		}
		schedule_locked(k, util_now_ms() + delay);
	}
	pthread_mutex_unlock(&eng.lock);
	park_wake(&k->waiters);
}

static int sync_scoped(struct sbx *s, struct sbx_box *box, void *arg)
{
	sync_now(arg, s, box, false);
	return 0;
}

static void sync_work(void *arg)
{
	struct skills_sbx *k = arg;

	pool_scoped(k->s, sync_scoped, k); /* not active: the reclaim hook reschedules */
	pthread_mutex_lock(&eng.lock);
	k->busy = false;
	if (k->due_ms)
		pthread_cond_signal(&eng.wake);
	pthread_mutex_unlock(&eng.lock);
}

/* The timer: submits each sandbox's sync when its time comes, one at a
 * time per sandbox. */
static void *timer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&eng.lock);
	while (!eng.stopping) {
		uint64_t now = util_now_ms(), next = UINT64_MAX;
		struct skills_sbx *go = NULL;

		for (int b = 0; b < SKILLS_BUCKETS && !go; b++)
			for (struct skills_sbx *k = eng.table[b]; k && !go; k = k->next) {
				if (!k->due_ms || k->busy)
					continue;
				if (k->due_ms <= now)
					go = k;
				else if (k->due_ms < next)
					next = k->due_ms;
			}
		if (go) {
			go->busy = true;
			go->due_ms = 0;
			pthread_mutex_unlock(&eng.lock);
			/* deadline: a sync may wait behind a create */
			int err = work_submit(WORK_IO, go->s->token, pool_work_timeout_ms(), sync_work, go);
			pthread_mutex_lock(&eng.lock);
			if (err) {
				go->busy = false;
				if (err != ESHUTDOWN)
					go->due_ms = util_now_ms() + 1000;
			}
			continue;
		}
		if (next == UINT64_MAX) {
			pthread_cond_wait(&eng.wake, &eng.lock);
		} else {
			struct timespec ts;
			uint64_t wait = next - now;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += (time_t)(wait / 1000);
			ts.tv_nsec += (long)(wait % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&eng.wake, &eng.lock, &ts);
		}
	}
	pthread_mutex_unlock(&eng.lock);
	return NULL;
}

/* ---- pool hooks ----------------------------------------------------------------------- */

static int hook_up(struct sbx *s, bool adopted)
{
	struct skills_sbx *k = sk_get(s);
	char scope[NAMES_SCOPE_MAX];
	bool upload = sbx_skills(s->box) != NULL;

	scope_of(s, scope);
	if (!k) {
		log_warn(scope, "skills: out of memory: changes under skills/ are not synced");
		return 0; /* the sandbox works without its skills */
	}
	if (!adopted && s->cfg && s->cfg->skills_path &&
	    skills_library_copy(s->cfg->skills_path, k->root, s->box->uid, s->box->gid))
		log_warn(scope, "skills: some of skills.path %s was not copied (see above)", s->cfg->skills_path);
	pthread_mutex_lock(&eng.lock);
	k->upload = upload;
	k->lim.max_file = s->cfg ? s->cfg->skills_max_file_size : 0;
	k->lim.max_total = s->cfg ? s->cfg->skills_max_total_size : 0;
	k->lim.max_files = s->cfg ? s->cfg->skills_max_files : 0;
	if (!upload)
		k->gen_synced = k->gen_written;
	pthread_mutex_unlock(&eng.lock);
	usage_rescan(k);
	if (!upload)
		return 0;
	if (!adopted || skills_manifest_load(k->saved, s->box->remote_id, &k->synced)) {
		skills_manifest_free(&k->synced); /* a new sandbox has nothing */
		unlink(k->saved);
	}
	if (adopted) { /* what changed while the daemon was away: soon, not at start */
		pthread_mutex_lock(&eng.lock);
		k->gen_written++;
		schedule_locked(k, util_now_ms() + SKILLS_DEBOUNCE_MS);
		pthread_mutex_unlock(&eng.lock);
		return 0;
	}
	/* a new sandbox: everything, before mkdir returns */
	pthread_mutex_lock(&eng.lock);
	k->gen_written++;
	pthread_mutex_unlock(&eng.lock);
	sync_now(k, s, s->box, true);
	return 0;
}

static void hook_release(struct sbx *s)
{
	struct skills_sbx *k = sk_find(s);

	if (k && s->box)
		sync_now(k, s, s->box, false); /* rmdir drains: what is pending reaches the sandbox first */
}

static void hook_reclaim(struct sbx *s)
{
	struct skills_sbx *k = sk_find(s);

	if (!k)
		return;
	pthread_mutex_lock(&eng.lock);
	if (k->upload && k->gen_written > k->gen_synced)
		schedule_locked(k, util_now_ms());
	pthread_mutex_unlock(&eng.lock);
}

static void hook_down(struct sbx *s)
{
	struct skills_sbx *k = sk_find(s);

	if (!k)
		return;
	/* the sandbox goes: a new one starts from nothing; waiting fsyncs fail */
	skills_manifest_free(&k->synced);
	unlink(k->saved);
	pthread_mutex_lock(&eng.lock);
	if (k->upload && k->gen_written > k->gen_synced) {
		k->gen_failed = k->gen_written;
		k->failed_attempt = ++k->attempts;
		k->last_err = EIO;
		snprintf(k->last_error, sizeof(k->last_error), "the sandbox was destroyed before the sync");
	}
	k->due_ms = 0;
	pthread_mutex_unlock(&eng.lock);
	park_wake(&k->waiters);
}

static void hook_status(struct sbx *s, json_t *status)
{
	json_t *o = json_object_get(status, "skills");
	struct skills_sbx *k;

	pthread_mutex_lock(&eng.lock);
	k = sk_find_locked(s);
	if (k && o) {
		const char *state = !k->upload		       ? "mounted"
				    : k->syncing		       ? "syncing"
				    : k->gen_synced >= k->gen_written ? "synced"
				    : k->last_err		       ? "error"
								       : "pending";
		json_object_set_new(o, "state", json_string(state));
		json_object_set_new(o, "generation_written", json_integer((json_int_t)k->gen_written));
		json_object_set_new(o, "generation_synced", json_integer((json_int_t)k->gen_synced));
		json_object_set_new(o, "last_error", k->last_error[0] ? json_string(k->last_error) : json_null());
		json_object_set_new(o, "syncs", json_integer((json_int_t)k->syncs));
		json_object_set_new(o, "files_uploaded", json_integer((json_int_t)k->files_up));
		json_object_set_new(o, "bytes_uploaded", json_integer((json_int_t)k->bytes_up));
	}
	pthread_mutex_unlock(&eng.lock);
}

static const struct pool_hooks skills_pool_hooks = {
	.up = hook_up,
	.down = hook_down,
	.release = hook_release,
	.reclaim = hook_reclaim,
	.status = hook_status,
};

/* ---- start and end -------------------------------------------------------------------- */

int skills_init(void)
{
	int err;

	eng.stopping = false;
	err = pthread_create(&eng.timer, NULL, timer_main, NULL);
	if (err)
		return err;
	eng.running = true;
	if (pool_add_hooks(&skills_pool_hooks)) {
		skills_drain();
		return ENOMEM;
	}
	return 0;
}

void skills_drain(void)
{
	uint64_t now = util_now_ms();

	if (!eng.running)
		return;
	pthread_mutex_lock(&eng.lock);
	for (int b = 0; b < SKILLS_BUCKETS; b++)
		for (struct skills_sbx *k = eng.table[b]; k; k = k->next)
			if (k->due_ms)
				k->due_ms = now;
	pthread_mutex_unlock(&eng.lock);
	/* let the timer submit them, then stop it: until every due sync is
	 * submitted or refused (busy ones resubmit at their end) */
	for (int tries = 0; tries < 1000; tries++) {
		bool left = false;
		pthread_mutex_lock(&eng.lock);
		pthread_cond_signal(&eng.wake);
		for (int b = 0; b < SKILLS_BUCKETS && !left; b++)
			for (struct skills_sbx *k = eng.table[b]; k && !left; k = k->next)
				left = k->due_ms && !k->busy;
		pthread_mutex_unlock(&eng.lock);
		if (!left)
			break;
		usleep(1000);
	}
	pthread_mutex_lock(&eng.lock);
	eng.stopping = true;
	pthread_cond_broadcast(&eng.wake);
	pthread_mutex_unlock(&eng.lock);
	pthread_join(eng.timer, NULL);
	eng.running = false;
}

void skills_shutdown(void)
{
	skills_drain();
	pool_remove_hooks(&skills_pool_hooks);
	for (int b = 0; b < SKILLS_BUCKETS; b++) {
		pthread_mutex_lock(&eng.lock);
		struct skills_sbx *k = eng.table[b];
		eng.table[b] = NULL;
		pthread_mutex_unlock(&eng.lock);
		while (k) {
			struct skills_sbx *next = k->next;
			park_drain(&k->waiters, EIO);
			sk_unref(k); /* freed now, or by the park thread after a pending wake-up */
			k = next;
		}
	}
	memset(&eng.st, 0, sizeof(eng.st));
}

void skills_stats(struct skills_stats *st)
{
	pthread_mutex_lock(&eng.lock);
	*st = eng.st;
	pthread_mutex_unlock(&eng.lock);
}
