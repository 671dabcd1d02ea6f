/* SPDX-License-Identifier: MIT */
/*
 * fs.h - shared internals of the FUSE layer.
 *
 * Every inode the kernel knows is a struct node; the fuse_ino_t is the
 * node's address (as in libfuse's passthrough_ll), FUSE_ROOT_ID is the
 * mountpoint.  Two families:
 *   - virtual nodes (root, dot-files, user and sandbox directories, control
 *     files, jobs): created and looked up under fs_lock;
 *   - data nodes (everything in workspace/ uploads/ outputs/ skills/): an
 *     O_PATH fd on the host file, kept in the inode table of the sandbox
 *     incarnation (struct view) they belong to, under view->lock.
 *
 * Lifetime: a node is freed when the kernel has forgotten it (nlookup == 0)
 * and its owner has unlinked it (virtual) or at once (data).  A view (one
 * incarnation of a sandbox directory: mkdir → rmdir) lives while any of its
 * nodes does; a reclaim makes a new view, so the kernel never sees an inode
 * of a released sandbox again.
 *
 * Lock order: view->lock and fs_lock are never held together; job->lock
 * may be taken under neither (jobs.c takes it alone).
 */
#ifndef SBX_FS_H
#define SBX_FS_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>

#include "../common/buf.h"
#include "../common/config.h"
#include "../providers/pool.h"

enum node_kind {
	N_ROOT,
	N_ROOTFILE, /* .status .metrics .config */
	N_USER,
	N_SANDBOX,
	N_CTL,      /* id, status (and later events, network) */
	N_JOBS,     /* jobs/ */
	N_JOB,      /* jobs/<name>/ */
	N_JOBFILE,  /* jobs/<name>/{cmd,env,stdin,stdout,stderr,exit,status,ctl} */
	N_DATA,
};

enum rootfile { RF_STATUS, RF_METRICS, RF_CONFIG, RF_COUNT };
enum ctlfile { CTL_ID, CTL_STATUS, CTL_COUNT };
enum jobfile { JF_CMD, JF_ENV, JF_STDIN, JF_STDOUT, JF_STDERR, JF_EXIT, JF_STATUS, JF_CTL, JF_COUNT };
enum datadir { DD_WORKSPACE, DD_UPLOADS, DD_OUTPUTS, DD_SKILLS, DD_COUNT };

struct view;
struct job;
struct user_ent;

struct node {
	enum node_kind kind;
	int which;        /* rootfile, ctlfile, jobfile or datadir index */
	uint64_t nlookup; /* kernel references: fs_lock (virtual) or view->lock (data) */
	bool linked;      /* virtual: still reachable from its owner (fs_lock) */
	struct view *view;     /* N_SANDBOX and below */
	struct user_ent *user; /* N_USER */
	struct job *job;       /* N_JOB, N_JOBFILE */
	/* N_DATA: */
	int fd; /* O_PATH */
	dev_t dev;
	ino_t ino;
	struct node *hnext;    /* view's inode table chain (data) or job-node list (virtual) */
	struct timespec stamp_mtim, stamp_ctim; /* last attributes shown, for keep_cache */
	struct node *oprev, *onext; /* fs_lock: on the orphan list (unlinked, not yet forgotten) */
	off_t stamp_size;
	int nopen; /* N_DATA: files open on it (atomic); see data_getattr */
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
	int refs;        /* fs_lock: owner + every node */
	bool dead;       /* released */
	uid_t sbx_uid, pres_uid; /* host uid of the sandbox → uid shown */
	gid_t sbx_gid, pres_gid;
	struct node *dir;            /* N_SANDBOX */
	struct node *ctl[CTL_COUNT];
	struct node *jobs;
	struct node *jobnodes;       /* fs_lock: N_JOB/N_JOBFILE nodes of this view */
	char *jobs_dir;              /* host: thread_dir/jobs */
	struct view *vprev, *vnext;  /* fs_lock: every view that exists */
	pthread_mutex_t lock;        /* the data inode table */
	struct node *table[VIEW_BUCKETS];
};

struct fs {
	struct fuse_session *se;
	struct sbx_config *cfg; /* startup config (mount options); referenced */
	double started_at;
	uid_t mount_uid;
	gid_t mount_gid;
	double data_timeout;      /* entry/attr timeout for data nodes */
	double data_timeout_busy; /* the same while a job runs in the sandbox */
};

extern struct fs fs;
extern pthread_mutex_t fs_lock;

/* node.c */
struct node *node_of(fuse_ino_t ino);
fuse_ino_t node_ino(struct node *n);
struct node *vnode_new(enum node_kind kind, int which);
void node_lookup_ref_locked(struct node *n); /* fs_lock held */
void node_forget(struct node *n, uint64_t count);
void view_get_locked(struct view *v);
void view_put(struct view *v);
struct view *view_current(struct sbx *s); /* referenced, creating it */
void view_kill(struct sbx *s);           /* at release */
void view_inval_attrs(struct sbx *s);    /* after a job: drop cached attributes */
struct user_ent *user_find_locked(const char *name);
int users_load(void);
int user_add(const char *name, uid_t uid, gid_t gid);
int user_remove(const char *name);

/* data.c: passthrough operations on N_DATA nodes */
int data_lookup_root(struct view *v, int which, struct fuse_entry_param *e);
int data_do_lookup(struct node *parent, const char *name, struct fuse_entry_param *e);
void data_forget(struct node *n, uint64_t nlookup);
extern const struct fuse_lowlevel_ops data_ops;

/* ctl.c: contents of dot-files and control files */
int ctl_render(struct node *n, struct buf *out);

/* jobs.c */
int jobs_init(void);
void jobs_shutdown(void);
int jobs_mkdir(struct view *v, const char *name);
int jobs_rmdir(struct view *v, const char *name);
struct job *jobs_get(struct view *v, const char *name); /* referenced or NULL */
void jobs_put(struct job *j);
int jobs_list(struct view *v, void (*fn)(const char *name, void *arg), void *arg);
void jobs_get_ref(struct job *j);
/* node.c: the node of job j (which = -1: its directory) in view v. fs_lock held. */
struct node *view_job_node_locked(struct view *v, struct job *j, int which);
void view_drop_job(struct view *v, struct job *j);
void jobs_open(fuse_req_t req, struct node *n, struct fuse_file_info *fi);
void jobs_read(fuse_req_t req, struct node *n, size_t size, off_t off, struct fuse_file_info *fi);
void jobs_write(fuse_req_t req, struct node *n, const char *buf, size_t size, struct fuse_file_info *fi);
void jobs_release(fuse_req_t req, struct node *n, struct fuse_file_info *fi);
void jobs_poll(fuse_req_t req, struct node *n, struct fuse_file_info *fi, struct fuse_pollhandle *ph);
int jobs_file_mode(int which);
off_t jobs_file_size(struct node *n); /* what a stat shows as st_size */

/* node.c */
int users_each(void (*fn)(struct user_ent *u, void *arg), void *arg);

/* loop.c: serve requests until the session ends */
int loop_run(struct fuse_session *se);

/* ns.c */
void fs_nodes_init(void);
/* Handles of open virtual files and directories (see ns.c for why):
 * alloc zeroes size bytes; clean releases what the payload owns. */
void *fs_handle_alloc(size_t size, void (*clean)(void *p));
void fs_handle_retire(void *p);  /* at RELEASE: freed 10 s later */
void fs_handle_discard(void *p); /* never given to the kernel: freed now */
void fs_handles_free_all(void);  /* at exit */
extern const struct fuse_lowlevel_ops fs_ops;
void fs_fill_vattr(struct node *n, struct stat *st);

#endif
