/* SPDX-License-Identifier: MIT */
/*
 * node.h - the FUSE layer's objects: nodes (every inode the kernel knows),
 * views (one per sandbox incarnation) and user directories, and the
 * dispatch of requests to the module that serves each kind of node.
 *
 * Every inode the kernel knows is a struct node; the fuse_ino_t is the
 * node's address (as in libfuse's passthrough_ll), FUSE_ROOT_ID is the
 * mountpoint.  Two families:
 *   - virtual nodes (root, dot-files, user and sandbox directories, control
 *     files, jobs): created and looked up under fs_lock;
 *   - data nodes (everything under workspace/ uploads/ outputs/ skills/):
 *     a host file, kept in the inode table of the view they belong to,
 *     under view->lock.
 *
 * Dispatch: each kind is served by one module, which registers a table of
 * low-level operations for it (node_kind_register); node.c and dispatch.c
 * never name those modules.  A NULL slot gets the default answer of
 * dispatch.c (EPERM for changes, ENOSYS-like answers for the rest).
 *
 * Lifetime: a virtual node is freed when the kernel has forgotten it
 * (nlookup == 0) and its owner has let go of it (!linked); a data node when
 * the kernel has forgotten it.  A view lives while any of its nodes or any
 * holder does (refs, atomic); a reclaim makes a new view, so the kernel never
 * sees an inode of a released sandbox again, and a data node belongs to
 * exactly one view (a link or rename between two sandboxes is EXDEV by
 * construction).
 *
 * Locks: fs_lock and view->lock, ordered in docs/architecture.md ("Lock
 * order", the one place it is written); fs_lock is a struct lock (lock.h),
 * asserted held by the _locked helpers in debug builds.  view refs are atomic
 * and taken without fs_lock on the data path.
 */
#ifndef SBX_NODE_H
#define SBX_NODE_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "../common/buf.h"
#include "../common/config.h"
#include "../common/lock.h"
#include "../common/names.h"
#include "../providers/pool.h"
#include "../runtime/park.h"

enum node_kind {
	N_ROOT,
	N_ROOTFILE, /* .status .metrics .config */
	N_USER,
	N_SANDBOX,
	N_CTL,     /* a sandbox's id, status, ctl, events, network */
	N_JOBS,    /* jobs/ */
	N_JOB,     /* jobs/<name>/ */
	N_JOBFILE, /* jobs/<name>/{cmd,env,stdin,stdout,stderr,exit,status,ctl} */
	N_DATA,
	N_RFILE,   /* workspace/ uploads/ outputs/ of a sandbox with remote files (rfiles.c) */
	N_SNAPS,     /* snapshots/ (snapfs.c) */
	N_SNAP,      /* snapshots/<name>/ */
	N_SNAPINFO,  /* snapshots/<name>/info */
	N_SNAPDATA,  /* snapshots/<name>/{workspace,uploads,outputs}/... (read-only) */
	N_KINDS
};

enum rootfile { RF_STATUS, RF_METRICS, RF_CONFIG, RF_HEALTH, RF_COUNT };
enum ctlfile { CTL_ID, CTL_STATUS, CTL_CTL, CTL_EVENTS, CTL_NETWORK, CTL_READY, CTL_COUNT };
enum datadir { DD_WORKSPACE, DD_UPLOADS, DD_OUTPUTS, DD_SKILLS, DD_COUNT };

struct view;
struct job;
struct budget_acct;
struct file_handle;
struct user_ent;

struct node {
	enum node_kind kind;
	int which;        /* rootfile, ctlfile, jobfile or datadir index */
	uint64_t nlookup; /* kernel references: fs_lock (virtual) or view->lock (data) */
	bool linked;      /* virtual: still reachable from its owner (fs_lock) */
	struct view *view;     /* N_SANDBOX and below */
	struct user_ent *user; /* N_USER */
	struct job *job;       /* N_JOB, N_JOBFILE: referenced */
	/* N_DATA: its host file's O_PATH descriptor and handle (nodefd.h;
	 * nfd.lock) */
	int fd;                  /* -1: none now (evicted, or gone) */
	unsigned fd_users;       /* operations and open files using fd */
	bool fd_fixed;           /* no handle: fd kept for life, charged to the sandbox */
	bool fd_gone;            /* its file is gone: never reopened */
	bool fd_free;            /* forgotten while in use: the last nfd_put frees it */
	bool fd_lru;             /* on the LRU list (fd >= 0, unused, not fixed) */
	struct node *lru_prev, *lru_next;
	struct file_handle *fh;  /* set once, before fd is first evicted */
	dev_t dev;
	ino_t ino;
	char *name;       /* N_DATA: the name the kernel last learned it by (view->lock); NULL at a data directory's top */
	struct data_neg *neg; /* N_DATA directory: names in it answered "no such file", cached (view->lock; data.c) */
	dev_t pdev;       /* N_DATA: ... in the directory of this host identity */
	ino_t pino;
	struct node *hnext; /* view's inode table chain (data) or the view's vnode list (virtual) */
	struct timespec stamp_mtim, stamp_ctim; /* last attributes shown, for keep_cache */
	off_t stamp_size;
	int nopen; /* N_DATA: files open on it (atomic); see data_getattr */
	int backing_id;   /* N_DATA: kernel passthrough backing file, 0 = none (view->lock) */
	int backing_users; /* N_DATA: open files using backing_id (view->lock) */
	struct node *oprev, *onext; /* fs_lock: on the orphan list (unlinked, not yet forgotten) */
	struct node *fnext;         /* fs_lock: freed under it, its on_free due once it is let go */
};

struct user_ent {
	char name[NAME_MAX_LEN + 1];
	uid_t uid; /* presented owner */
	gid_t gid;
	struct node *node; /* fs_lock */
	struct user_ent *next;
};

#define VIEW_BUCKETS 256

struct view {
	struct sbx *sbx; /* referenced */
	unsigned gen;
	int refs;  /* atomic: its fs_sbx (fsbx.h) + every node + every holder */
	bool dead; /* released (fs_lock) */
	uid_t sbx_uid, pres_uid; /* host uid of the sandbox -> uid shown */
	gid_t sbx_gid, pres_gid;
	struct node *dir; /* N_SANDBOX */
	struct node *ctl[CTL_COUNT];
	struct node *jobs;
	struct node *vnodes;        /* fs_lock: other virtual nodes of this view (jobs, ...) */
	char *jobs_dir;             /* host: thread_dir/jobs */
	struct view *vprev, *vnext; /* fs_lock: every view that exists */
	struct budget_acct *fds;    /* the sandbox's descriptor account (budget.h), referenced */
	pthread_mutex_t lock;       /* the data inode table */
	struct node *table[VIEW_BUCKETS];
	struct node *limbo; /* lock: removed files' nodes the kernel still remembers (data.c) */
	int cache_short;    /* atomic: why its data is on the short timeouts, 0 = watched (fswatch.c) */
	unsigned nneg;      /* lock: names answered "no such file" for cache_timeout (data.c) */
	int watch_dirs;     /* fswatch.c's lock: its marked directories */
	/* Readiness (fs/acquire.c): a view made at an asynchronous mkdir is
	 * pending (atomic; set at birth, cleared once, under fs_lock) until its
	 * create ends; ready_err (atomic, written once under fs_lock) is the create's errno when it
	 * failed; ready_q holds the requests waiting for the end and the
	 * pollers of `status`/`ready`; status_ver (atomic) counts the state
	 * changes a poller of `status` is told of. */
	int pending;
	int ready_err;
	unsigned status_ver;
	struct park_queue ready_q;
};

/* FUSE requests by operation, counted as dispatch.c serves them (.metrics:
 * sbxfs_fuse_requests_total; docs/performance.md counts them per file
 * operation). */
enum fs_req {
	FSR_LOOKUP, FSR_FORGET, FSR_FORGET_MULTI, FSR_GETATTR, FSR_SETATTR, FSR_READLINK, FSR_MKNOD, FSR_MKDIR,
	FSR_UNLINK, FSR_RMDIR, FSR_SYMLINK, FSR_RENAME, FSR_LINK, FSR_OPEN, FSR_READ, FSR_WRITE_BUF, FSR_FLUSH,
	FSR_RELEASE, FSR_FSYNC, FSR_OPENDIR, FSR_READDIR, FSR_READDIRPLUS, FSR_RELEASEDIR, FSR_FSYNCDIR, FSR_STATFS,
	FSR_SETXATTR, FSR_GETXATTR, FSR_LISTXATTR, FSR_REMOVEXATTR, FSR_CREATE, FSR_POLL, FSR_FALLOCATE, FSR_FLOCK,
	FSR_LSEEK, FSR_COPY_FILE_RANGE, FSR_COUNT
};

struct fs {
	struct fuse_session *se;
	struct sbx_config *cfg; /* startup config (mount options); referenced */
	double started_at;
	uid_t mount_uid;
	gid_t mount_gid;
	bool passthrough;         /* the kernel takes data file reads and writes (FUSE passthrough) */
	bool killpriv;            /* set-id bits are the daemon's to clear (FUSE_CAP_HANDLE_KILLPRIV_V2) */
	unsigned long long opens_passthrough, opens_copy; /* atomic: data file opens by path taken */
	double data_timeout;      /* entry/attr timeout for data nodes */
	double data_timeout_busy; /* the same while a job runs in the sandbox */
	double cache_timeout;     /* the same while the watcher keeps the caches fresh (fswatch.h) */
	unsigned long long requests[FSR_COUNT]; /* atomic: FUSE requests served, by operation */
};

extern struct fs fs;
/* The operations' names in .metrics ("lookup", "write", "batch_forget"...). */
extern const char *const fs_req_names[FSR_COUNT];

static inline void fs_req_count(enum fs_req r)
{
	__atomic_add_fetch(&fs.requests[r], 1, __ATOMIC_RELAXED);
}

extern struct lock fs_lock;
/* Let go of fs_lock (taken with lock_acquire(&fs_lock)), then run the
 * on_free hooks of the virtual nodes freed while it was held and free them:
 * a hook may drop the last reference of a job, whose exec handle's free may
 * join a thread, so no hook ever runs under fs_lock. */
void fs_unlock(void);

/* ---- kinds and dispatch ---------------------------------------------------- */

struct node_kind_ops {
	const struct fuse_lowlevel_ops *ops; /* requests on nodes of this kind */
	/* data-like nodes with their own lifetime: the kernel forgot count refs */
	void (*forget)(struct node *n, uint64_t count);
	/* virtual nodes: release what n holds when it is freed (called by
	 * fs_unlock with no lock held; n is unreachable by then) */
	void (*on_free)(struct node *n);
};

void node_kind_register(enum node_kind kind, const struct node_kind_ops *k);
const struct node_kind_ops *node_kind(enum node_kind kind);
/* The libfuse operations of the whole mount (dispatch.c). */
extern const struct fuse_lowlevel_ops fs_ops;

/* ---- nodes -------------------------------------------------------------------- */

struct node *node_of(fuse_ino_t ino);
fuse_ino_t node_ino(struct node *n);
struct node *node_root(void);
struct node *vnode_new(enum node_kind kind, int which);
/* A virtual node of view v (referencing it, on its vnode list). fs_lock held. */
struct node *view_vnode_new_locked(struct view *v, enum node_kind kind, int which);
void node_lookup_ref_locked(struct node *n); /* fs_lock held */
void node_forget(struct node *n, uint64_t count);
/* fs_lock held: the owner lets go of a virtual node.  Returns the number of
 * view references to drop with view_put() after unlocking. */
int vnode_unlink_locked(struct node *n);
/* Reply to a LOOKUP: err 0 -> e; ENOENT -> a negative entry that is not
 * cached (sandboxes appear by mkdir, files by jobs in the sandbox). */
void node_reply_entry(fuse_req_t req, int err, const struct fuse_entry_param *e);
/* Attributes of a virtual node: owner, times, mode, size. */
void vnode_attr(struct node *n, mode_t mode, off_t size, struct stat *st);
/* Entry for a virtual node, counting a lookup (fs_lock held). */
void vnode_entry_locked(struct node *n, mode_t mode, off_t size, double attr_timeout, struct fuse_entry_param *e);

/* ---- views -------------------------------------------------------------------- */

void view_get(struct view *v);
void view_put(struct view *v);
struct view *view_current(struct sbx *s); /* referenced, creating it; NULL unless active */
struct view *view_of_sbx(struct sbx *s);  /* referenced current view or NULL; never creates */
void view_kill(struct sbx *s);            /* at release */
/* At start: fn(v) runs after view_kill took v down (no lock held; the
 * watcher of data caches lets go of v's watches: fswatch.h). */
void view_set_kill_hook(void (*fn)(struct view *v));
/* A pending view of s (a create has started: fs/acquire.c), referenced and
 * made s's current view; NULL on ENOMEM.  view_current adopts it once s is
 * active. */
struct view *view_pending(struct sbx *s);
/* s's current view while it is pending (its create runs), referenced, or NULL. */
struct view *view_pending_of(struct sbx *s);
/* The create behind pending view v failed with err: v dies (if still s's
 * current view it is taken down as view_kill does) with ready_err set; the
 * caller then answers its waiters (park_drain(&v->ready_q, err)). */
void view_fail(struct sbx *s, struct view *v, int err);

/* ---- users -------------------------------------------------------------------- */

struct user_ent *user_find_locked(const char *name);
int users_load(void);
int user_add(const char *name, uid_t uid, gid_t gid);
int user_remove(const char *name);
/* fn runs under fs_lock and must not block. */
void users_each(void (*fn)(struct user_ent *u, void *arg), void *arg);
/* Copy the name of a user directory node; false when it is gone. */
bool user_name_of(struct node *n, char out[NAME_MAX_LEN + 1], uid_t *owner);

#endif
