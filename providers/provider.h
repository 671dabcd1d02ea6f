/* SPDX-License-Identifier: MIT */
/*
 * provider.h - the provider interface: how the pool and the FUSE layer ask a
 * backend (local bubblewrap, docker, aio, opensandbox) to create, check,
 * destroy, adopt and run commands in a sandbox, and what optional
 * capabilities (remote files, skills upload, network policy) it offers.
 *
 * Like curl's protocol handlers, every backend is a const descriptor
 * (struct sbx_provider) with a table of function pointers; the FUSE layer
 * and the pool never name a concrete provider: they call through the
 * sbx_* wrappers at the end of this file, which give every optional slot a
 * default, and they branch on the capability tables (files, skills, net)
 * being present, never on a name.
 *
 * Errors: every operation returns enum sbx_err; transport errors (errno,
 * CURLcode, HTTP status, JSON decoding) stay inside the provider, which logs
 * their detail with the sandbox's scope.  sbx_err_errno() is the one place
 * that maps them to errno.
 *
 * Threading and locks (see docs/architecture.md for the whole order):
 *   - provider-level slots (config_*, init, discover, shutdown) run on the
 *     main thread at start, reload and exit, with no lock held;
 *   - sandbox-level slots (create, health, destroy, adopt, kill_all,
 *     exec_start, exec_reattach) run on a work thread or the reaper, never
 *     on a FUSE worker, WITH the sandbox's scope lock held and no other
 *     lock: two of them never overlap on one sandbox; they MAY block (fork,
 *     network, docker) up to the configured timeouts;
 *   - exec-level slots (exec_signal, exec_finish, exec_free) and the
 *     capability tables MAY run concurrently with each other and with the
 *     sandbox-level slots of the same sandbox, from any thread, with no lock
 *     held; the box they use is kept alive by a reference (sbx_box_get).
 */
#ifndef SBX_PROVIDER_H
#define SBX_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "../common/config.h"
#include "../common/err.h"

/* enum sbx_err and its errno mapping: common/err.h (the HTTP layer maps to it too). */

/* ---- what the pool hands a provider ---------------------------------------- */

/* The host side of a thread (common/layout.h makes these paths). */
struct sbx_dirs {
	const char *thread_dir; /* state_dir/users/<user>/threads/<thread> */
	const char *workspace, *uploads, *outputs; /* user-data/... */
	const char *skills;
	const char *jobs;
};

/* A sandbox to create or adopt.  Strings are owned by the caller and valid
 * for the duration of the call. */
struct sbx_spec {
	const char *user;
	const char *thread;
	const char *token;    /* scope token: names derive from it */
	const char *state_id; /* 8 hex digits naming this daemon's state_dir (labels, cgroups) */
	struct sbx_dirs dirs;
	const struct sbx_config *cfg; /* the configuration this sandbox lives with */
	/* A spare (pool.prewarm, providers/spares.h): a sandbox of no scope,
	 * started ahead of need.  user and thread are "", token is the spare's
	 * own, dirs.thread_dir is its record directory
	 * (state_dir/spares/<token>) and the other dirs are NULL: create makes
	 * the mount points of a thread's data empty, and claim fills them. */
	bool spare;
};

/* A provider's handle on one sandbox.  Providers embed it first in their own
 * struct and downcast with a checked helper.  Reference counted: the pool
 * holds one while the sandbox exists; every exec handle and every user of a
 * capability table holds one for the duration of its use, so a box is never
 * freed under a running call (box_free runs at the last sbx_box_put). */
struct sbx_box {
	const struct sbx_provider *prov;
	int refs;           /* atomic */
	char remote_id[80]; /* shown in status: pid, container id, remote id */
	uid_t uid;          /* owner of the sandbox's files on the host (bind providers) */
	gid_t gid;
	char note[128];     /* shown in status when not empty (e.g. "runs as root: image needs it") */
	/* Set once (sbx_box_gone) when the provider learns that the sandbox
	 * vanished behind its back (a remote sandbox expired, was deleted, 404):
	 * gone is atomic; gone_why is written before gone is set and never
	 * after, so a reader that saw gone may read it. */
	int gone;
	char gone_why[160];
};

/* A command to run (DESIGN §6).  The provider runs it as `/bin/sh` reading
 * the script job_dir/cmd (bytes, never on any argv), with cwd
 * /mnt/user-data/workspace, the environment of job_dir/environ (KEY=VALUE
 * NUL-separated: the base, the configuration's and the job's env file),
 * stdin from job_dir/stdin when it exists, stdout/stderr appended to
 * job_dir/stdout and job_dir/stderr as the output arrives, and records the
 * end in job_dir/result (JSON: state, exit, signal, ended_at[, reason]),
 * also when the daemon is gone where the backend allows it. */
struct sbx_exec_spec {
	const char *job_dir;
	const char *job_name;
	long timeout;       /* seconds; the provider kills and reports timed_out */
	long long output_max; /* bytes of stdout+stderr kept; beyond: killed, reason "output" */
};

/* A running command, owned by the provider (embedded first in its own
 * struct).  fd is pollable: it becomes readable (POLLIN) when the command
 * has ended (a pidfd of the local supervisor, an eventfd a provider thread
 * signals for HTTP streams).
 *
 * Reference counted like boxes: sbx_exec_start/sbx_exec_reattach return a
 * handle with one reference (the caller's); sbx_exec_get adds one (a
 * signaller that uses it outside its owner's lock), sbx_exec_put drops one
 * and the last calls the provider's exec_free slot.  exec_free may block (a
 * pump thread joined): the last put is never made under fs_lock or any
 * module lock (docs/architecture.md, "Lock order"). */
struct sbx_exec {
	const struct sbx_provider *prov;
	int fd;
	int refs; /* atomic; set by the sbx_exec_start/reattach wrappers */
};

/* ---- capability tables ------------------------------------------------------ */

struct sbx_dirent {
	char *name;
	struct stat st;
};

/* Remote files: providers whose sandbox files are not host directories
 * bind-mounted into it (opensandbox, aio base_url).  Paths are absolute
 * paths inside the sandbox, without "." or ".." components.  The FUSE
 * layer's remote-files backend keeps a host-side cache and calls these from
 * any thread with no lock held (the box referenced); all MAY block
 * (network) up to request_timeout without progress.  Errors: GONE (ENOENT:
 * the path, or the sandbox, is not there), ACCESS, NOSPC, TIMEOUT, NOTDIR,
 * ISDIR, EXIST, NOTEMPTY (rmdir), INVAL (a path the API cannot carry), IO
 * (anything else: the cause is logged).  A sandbox found gone on the way
 * is also reported to the pool (sbx_box_gone). */
struct sbx_files_ops {
	/* st_mode (type and permission bits), st_size, st_mtim, st_ctim,
	 * st_nlink; st_uid/st_gid are left 0 (the FUSE layer presents files as
	 * the user's).  A symlink is reported as what it points to where the
	 * API follows it (execd's info does), as S_IFLNK where it does not. */
	enum sbx_err (*stat)(struct sbx_box *box, const char *path, struct stat *st);
	/* *ents is malloc'd (names too): free with sbx_dirents_free */
	enum sbx_err (*list)(struct sbx_box *box, const char *path, struct sbx_dirent **ents, size_t *n);
	/* Copy [off, off+len) of path into fd (written at fd's current offset,
	 * only that range is fetched: a ranged download); *got bytes (less than
	 * len at the end of the file, 0 past it). */
	enum sbx_err (*read)(struct sbx_box *box, const char *path, off_t off, size_t len, int fd, size_t *got);
	/* Replace path with the content of fd (from offset 0, size bytes; fd's
	 * offset is not used), then its permission bits are mode & 07777.
	 * Missing parent directories are created. */
	enum sbx_err (*write)(struct sbx_box *box, const char *path, int fd, off_t size, mode_t mode);
	enum sbx_err (*mkdir)(struct sbx_box *box, const char *path, mode_t mode);
	enum sbx_err (*rmdir)(struct sbx_box *box, const char *path);
	enum sbx_err (*unlink)(struct sbx_box *box, const char *path);
	enum sbx_err (*rename)(struct sbx_box *box, const char *from, const char *to);
	enum sbx_err (*chmod)(struct sbx_box *box, const char *path, mode_t mode);
	enum sbx_err (*truncate)(struct sbx_box *box, const char *path, off_t size);
};

/* Skills by upload: providers that cannot mount the host's skills/ tree
 * (the skills sync engine calls these, one sync at a time per sandbox, from
 * its own thread with no lock held; they MAY block like the files ops).
 * path is relative to the projection root ("pkg/SKILL.md": no leading '/',
 * no "." or ".." component); the provider places it under the sandbox's
 * skills path (skills.container_path, /mnt/skills by default).
 *   upload  replace path with fd's content (offset 0, size bytes), mode;
 *           missing parents are created
 *   mkdir   make the directory (and missing parents); an existing one is OK
 *   remove  delete path (is_dir: with everything under it); a missing one is OK
 */
struct sbx_skill_file {
	const char *path; /* relative to the projection root, as above */
	int fd;           /* upload_many: the content, size bytes from offset 0; mkdir_many: unused */
	off_t size;
	mode_t mode;
};

struct sbx_skills_ops {
	enum sbx_err (*upload)(struct sbx_box *box, const char *path, int fd, off_t size, mode_t mode);
	enum sbx_err (*mkdir)(struct sbx_box *box, const char *path, mode_t mode);
	enum sbx_err (*remove)(struct sbx_box *box, const char *path, bool is_dir);
	/* MAY: upload or mkdir n entries (up to SBX_SKILLS_BATCH) in as few
	 * round trips as the API allows (an API that takes many files in one
	 * request).  For the caller it is all or nothing: on an error none of
	 * them counts as done, and the next sync sends them again. */
	enum sbx_err (*upload_many)(struct sbx_box *box, const struct sbx_skill_file *files, size_t n);
	enum sbx_err (*mkdir_many)(struct sbx_box *box, const struct sbx_skill_file *dirs, size_t n);
};

#define SBX_SKILLS_BATCH 64                        /* entries in one upload_many/mkdir_many */
#define SBX_SKILLS_BATCH_BYTES (8 * 1024 * 1024) /* bytes in one upload_many */

/* Network policy (DESIGN §7, docs/network.md).  Either the sandbox has a
 * network namespace of its own that the daemon can enter (netns_fd: in
 * allowlist mode the approval proxy is served there, 127.0.0.1:3128), or the
 * backend enforces egress itself (enforced_by names how; events are then
 * not available and `network` says so).  A netns provider gives every mode a
 * namespace of its own (containers: --network none for isolated and
 * allowlist) and installs the mode's ruleset in it with egress_apply()
 * (common/egress.h) inside create, before the sandbox is handed out. */
struct sbx_net_ops {
	/* A new fd on the sandbox's network namespace (the caller closes it), or
	 * -1.  Called with the scope lock held (pool hooks); may block briefly. */
	int (*netns_fd)(struct sbx_box *box);
	const char *enforced_by;
};

/* Freeze: pausing every process of a sandbox (its init, jobs, what they
 * left behind) and resuming them: the `ctl` commands "freeze" and "thaw",
 * and the consistent pass of a snapshot (DESIGN §3, §4).  A provider that
 * offers it and whose data directories are host directories (files NULL)
 * has snapshots; any other answers EOPNOTSUPP.  Sandbox-level slots: a work
 * thread, the scope lock held; they MAY block (a docker request) up to
 * request_timeout.
 *   freeze  MUST: return once no process of the sandbox runs (SBX_OK), or
 *           fail having changed nothing (a process stuck in the kernel:
 *           TIMEOUT); freezing a frozen sandbox is SBX_OK;
 *   thaw    MUST: resume them; thawing a running sandbox is SBX_OK;
 *   frozen  MUST: *out says whether the sandbox is frozen now (a freeze a
 *           crash of the daemon left behind). */
struct sbx_freeze_ops {
	enum sbx_err (*freeze)(struct sbx_box *box);
	enum sbx_err (*thaw)(struct sbx_box *box);
	enum sbx_err (*frozen)(struct sbx_box *box, bool *out);
};

/* ---- the provider ------------------------------------------------------------- */

struct cfg_ctx;
struct cfg_node;
struct json_t;

struct sbx_provider_ops {
	/* -- provider level (main thread, no lock) -- */

	/* MAY: parse one configuration key this provider owns (its section,
	 * e.g. `local:`, or a DeerFlow key such as `image`).  Returns 1 when
	 * the key is this provider's (errors go through cfg_fail), 0 when not.
	 * The provider keeps what it parsed in cfg->prov (allocating it on the
	 * first key), freed by config_free. */
	int (*config_key)(struct cfg_ctx *x, struct sbx_config *cfg, const char *key, struct cfg_node *v);
	/* MAY: whole-file checks after every key was read (e.g. required keys). */
	int (*config_check)(struct cfg_ctx *x, struct sbx_config *cfg);
	/* MAY: add the provider's effective keys to .config (secrets as "***"). */
	void (*config_show)(const struct sbx_config *cfg, struct json_t *out);
	void (*config_free)(void *prov);
	/* MAY: the checks of init that change nothing on the host: no file,
	 * directory, cgroup, process or connection state is made, and no
	 * provider-level state is written (it may run while the daemon serves).
	 * `sbxfs --check-config` runs them, and so does every read of
	 * /sbx/.health; init must run them too.  err names the cause. */
	enum sbx_err (*preflight)(const struct sbx_config *cfg, char *err, size_t errlen);
	/* MUST: start of day: check that the host can run this provider
	 * (binaries, sockets, credentials, uid ranges); err names the cause. */
	enum sbx_err (*init)(const struct sbx_config *cfg, char *err, size_t errlen);
	/* MAY: sandboxes this provider owns that the state_dir records do not
	 * name (container labels, remote metadata): for each, found() is
	 * called; the pool adopts or destroys them. */
	enum sbx_err (*discover)(const struct sbx_config *cfg, const char *state_id,
		void (*found)(const char *user, const char *thread, void *arg), void *arg);
	/* MAY: end of day: release shared resources (connection caches). */
	void (*shutdown)(void);
	/* MAY: the descriptor that serves cfg when it is not this one (a mode
	 * of the provider with other capabilities: aio with a base_url has
	 * remote files, its containers have none).  provider_for() calls it;
	 * the pool keeps what it returns, and every box it makes names it. */
	const struct sbx_provider *(*variant)(const struct sbx_config *cfg);

	/* -- sandbox level (work thread or reaper, scope lock held) -- */

	/* MUST: create a sandbox and return when it is ready for exec and
	 * files.  On failure nothing is left behind. */
	enum sbx_err (*create)(const struct sbx_spec *spec, struct sbx_box **out);
	/* MUST: SBX_OK when the sandbox is alive and intact, else SBX_ERR_GONE. */
	enum sbx_err (*health)(struct sbx_box *box);
	/* MUST: end the sandbox and everything running in it (host data stays).
	 * The box stays valid until its last reference is put. */
	enum sbx_err (*destroy)(struct sbx_box *box);
	/* MUST: free the box (last reference gone); never ends the sandbox. */
	void (*box_free)(struct sbx_box *box);
	/* MUST: adoption after a restart: find the sandbox spec describes.
	 * SBX_OK with a box (possibly not healthy: the pool checks on reclaim),
	 * or SBX_ERR_GONE when nothing of it remains (then it has removed any
	 * half-made remains, e.g. of a create cut short by a crash). */
	enum sbx_err (*adopt)(const struct sbx_spec *spec, struct sbx_box **out);
	/* MAY: end every process of the sandbox but its own init (running jobs,
	 * which report "killed", and what finished jobs left behind), keeping
	 * the sandbox and its files.  Default NOTSUP. */
	enum sbx_err (*kill_all)(struct sbx_box *box);
	/* MAY: at a shutdown that destroys every sandbox, start ending this one
	 * now, without waiting for anything (the local provider: SIGKILL to its
	 * init), so that the sandboxes' ends overlap; destroy follows and
	 * finishes the job.  Scope lock held. */
	void (*stop_soon)(struct sbx_box *box);
	/* MAY (with it, pool.prewarm keeps spares: providers/spares.h): bind
	 * box, a spare (made by create with spec->spare) that nothing has used,
	 * to the thread spec names, without restarting it: the thread's data
	 * directories, uid and identity, skills and hostname, exactly as a
	 * create of spec would have them (its network mode is the spare's
	 * configuration's, which the pool matched), and its records moved to
	 * spec->dirs.thread_dir.  On failure the pool destroys box (never
	 * hands it out) and creates the thread's sandbox cold. */
	enum sbx_err (*claim)(struct sbx_box *box, const struct sbx_spec *spec);
	/* MAY: add the provider's own keys to the sandbox's status JSON (e.g.
	 * init_pid).  Any thread, pool.lock held: MUST NOT block. */
	void (*box_status)(struct sbx_box *box, struct json_t *out);

	/* -- exec -- */

	/* MUST with SBX_CAP_EXEC: start spec (see struct sbx_exec_spec).
	 * Returns once the command can be signalled. */
	enum sbx_err (*exec_start)(struct sbx_box *box, const struct sbx_exec_spec *spec, struct sbx_exec **out);
	/* MAY: after a restart, a handle on the command of job_dir if it still
	 * runs; SBX_ERR_GONE when it does not (its result, if any, is on disk). */
	enum sbx_err (*exec_reattach)(struct sbx_box *box, const char *job_dir, struct sbx_exec **out);
	/* MUST with SBX_CAP_EXEC: deliver sig to every process of the command
	 * (SIGKILL also to those that left its process group); SBX_ERR_NOTSUP
	 * for a signal the backend cannot send; SBX_ERR_GONE when it has ended. */
	enum sbx_err (*exec_signal)(struct sbx_exec *x, int sig);
	/* MUST with SBX_CAP_EXEC: x->fd is readable: collect the end (reap, make
	 * sure job_dir/result exists).  Called once. */
	void (*exec_finish)(struct sbx_exec *x);
	/* MUST with SBX_CAP_EXEC: let go of x (after exec_finish, or at exit
	 * with the command still running: it keeps running).  Called by the
	 * last sbx_exec_put, with no lock of the daemon's held: MAY block. */
	void (*exec_free)(struct sbx_exec *x);
	/* MAY: the slot of a finished job is being removed: end what the job
	 * left behind and free what the provider kept for it (its cgroup). */
	void (*exec_cleanup)(struct sbx_box *box, const char *job_dir, const char *job_name);

	/* -- capabilities: NULL = not offered -- */
	const struct sbx_files_ops *files;   /* NULL: data dirs are bind-mounted host dirs */
	const struct sbx_skills_ops *skills; /* NULL: skills/ is mounted, no upload */
	const struct sbx_net_ops *net;       /* NULL: no network policy */
	const struct sbx_freeze_ops *freeze; /* NULL: no freeze/thaw, no snapshots */
};

enum sbx_caps {
	SBX_CAP_EXEC = 1 << 0,    /* exec_* work */
	SBX_CAP_SIGNALS = 1 << 1, /* exec_signal delivers any signal (else interrupt/kill only) */
};

struct sbx_provider {
	const char *name;
	const char *const *aliases;     /* DeerFlow class paths naming it; NULL-terminated */
	const char *const *config_keys; /* configuration keys it owns (its section); NULL-terminated */
	unsigned caps;
	const struct sbx_provider_ops *ops;
};

/* The registry (providers.c): every provider built into this binary, by
 * name or alias (DeerFlow's class paths). */
const struct sbx_provider *provider_find(const char *name);
/* The descriptor that serves cfg: provider_find(cfg->use), or the variant
 * it names for cfg (ops->variant).  The pool uses this one. */
const struct sbx_provider *provider_for(const struct sbx_config *cfg);
/* For the configuration parser: the canonical name, or NULL. */
const char *provider_canonical(const char *name);
/* Iterate the built-in providers (NULL-terminated array). */
const struct sbx_provider *const *provider_all(void);
/* "local, docker, ..." for error messages. */
const char *provider_names(void);
/* What config.c needs of the registry (config_set_hooks). */
extern const struct config_hooks provider_config_hooks;

/* ---- calls with defaults for the optional slots (providers.c) ------------------- */

/* The provider's side-effect-free checks of cfg (SBX_OK without a preflight slot). */
enum sbx_err sbx_preflight(const struct sbx_provider *prov, const struct sbx_config *cfg, char *err, size_t errlen);
void sbx_box_init(struct sbx_box *box, const struct sbx_provider *prov);
/* Remote providers (their sandboxes' files are behind an API): the host-side
 * trees they still have (skills/, synced by upload) belong to the user's uid
 * when users: maps it, so that user can write them, as with the local
 * provider's data; box->uid/gid say so to the FUSE layer.  What root made
 * there before is given to that uid too.  Without a mapping nothing changes
 * (the daemon's, shown as the mount's).  Call from create and adopt.  0, or
 * an errno. */
int sbx_box_own_host_files(struct sbx_box *box, const struct sbx_spec *s);
struct sbx_box *sbx_box_get(struct sbx_box *box);
void sbx_box_put(struct sbx_box *box);
enum sbx_err sbx_kill_all(struct sbx_box *box);
void sbx_box_status(struct sbx_box *box, struct json_t *out);
enum sbx_err sbx_exec_start(struct sbx_box *box, const struct sbx_exec_spec *spec, struct sbx_exec **out);
enum sbx_err sbx_exec_reattach(struct sbx_box *box, const char *job_dir, struct sbx_exec **out);
enum sbx_err sbx_exec_signal(struct sbx_exec *x, int sig);
void sbx_exec_finish(struct sbx_exec *x);
void sbx_exec_get(struct sbx_exec *x);
/* NULL: nothing.  The last reference calls exec_free (no lock held). */
void sbx_exec_put(struct sbx_exec *x);
void sbx_exec_cleanup(struct sbx_box *box, const char *job_dir, const char *job_name);
void sbx_dirents_free(struct sbx_dirent *ents, size_t n);

/* For providers whose files and skills ops name paths inside a remote
 * sandbox: path is absolute and can travel in JSON (valid UTF-8, no NUL);
 * and root + "/" + rel for a skills path rel that is relative and has no
 * empty, "." or ".." component (SBX_ERR_INVAL otherwise). */
struct buf;
bool sbx_remote_path_ok(const char *path);
enum sbx_err sbx_skills_remote_path(const char *root, const char *rel, struct buf *out);

/* The capability tables of the provider that made box (NULL: not offered). */
static inline const struct sbx_files_ops *sbx_files(const struct sbx_box *box)
{
	return box ? box->prov->ops->files : NULL;
}

static inline const struct sbx_skills_ops *sbx_skills(const struct sbx_box *box)
{
	return box ? box->prov->ops->skills : NULL;
}

static inline const struct sbx_freeze_ops *sbx_freeze(const struct sbx_box *box)
{
	return box ? box->prov->ops->freeze : NULL;
}

/* Snapshots (providers/sbxsnap.h): the sandbox can be frozen and its data
 * is host directories the daemon copies. */
static inline bool sbx_can_snapshot(const struct sbx_box *box)
{
	return sbx_freeze(box) && !sbx_files(box);
}

/* A provider learnt that box's sandbox vanished behind its back (expired,
 * deleted: the remote API said 404): record why (first call wins) and tell
 * the pool, which invalidates the sandbox (its directory disappears, the
 * next mkdir of its scope creates a fresh one, status says what happened).
 * Any thread, no lock held by the caller that the pool could need. */
void sbx_box_gone(struct sbx_box *box, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline bool sbx_box_is_gone(const struct sbx_box *box)
{
	return box && __atomic_load_n(&box->gone, __ATOMIC_ACQUIRE);
}
/* Who sbx_box_gone() tells (the pool, at init): called without locks. */
void sbx_set_gone_hook(void (*fn)(void));

#endif
