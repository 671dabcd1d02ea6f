/* SPDX-License-Identifier: MIT */
/*
 * provider.h - the provider interface: how the pool asks a backend (local
 * bubblewrap, docker, aio, opensandbox) to create, check, destroy, adopt and
 * run commands in a sandbox.
 *
 * Like curl's protocol handlers, every backend is a const descriptor with a
 * table of function pointers; the FUSE layer and the pool never name a
 * concrete provider, they branch on capabilities (enum sbx_caps) only.
 *
 * Errors: every operation returns enum sbx_err; transport errors (errno,
 * CURLcode, HTTP status) stay inside the provider, which logs their detail.
 * sbx_err_errno() is the one place that maps them to errno.
 *
 * Threading: operations may block (fork, network, docker) and are called
 * without any pool lock held, but under the per-scope lock of the sandbox
 * they act on, so two operations on one sandbox never overlap, except
 * exec_signal and exec_* which may run concurrently with each other.
 */
#ifndef SBX_PROVIDER_H
#define SBX_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../common/config.h"

enum sbx_err {
	SBX_OK = 0,
	SBX_ERR_IO,      /* anything else: EIO */
	SBX_ERR_TIMEOUT, /* ETIMEDOUT */
	SBX_ERR_NOSPC,   /* ENOSPC */
	SBX_ERR_ACCESS,  /* EACCES */
	SBX_ERR_NOMEM,   /* ENOMEM */
	SBX_ERR_GONE,    /* the sandbox no longer exists: ENOENT */
	SBX_ERR_INVAL,   /* EINVAL */
	SBX_ERR_BUSY,    /* EBUSY */
	SBX_ERR_NOTSUP,  /* EOPNOTSUPP: the provider cannot do this */
};

int sbx_err_errno(enum sbx_err e);
const char *sbx_err_name(enum sbx_err e);

enum sbx_caps {
	SBX_CAP_BIND_FILES = 1 << 0,  /* data dirs are host dirs bind-mounted into the sandbox */
	SBX_CAP_SKILLS_MOUNT = 1 << 1, /* skills/ is mounted (no upload sync needed) */
	SBX_CAP_NET_EVENTS = 1 << 2,  /* network-policy events are available */
	SBX_CAP_EXEC = 1 << 3,        /* exec_start works */
};

/* What the pool asks a provider to create or adopt.  Strings are owned by
 * the caller and valid for the duration of the call. */
struct sbx_spec {
	const char *user;
	const char *thread;
	const char *token;      /* scope token: names derive from it */
	const char *thread_dir; /* state_dir/users/<user>/threads/<thread> (host) */
	const char *workspace, *uploads, *outputs, *skills; /* host dirs */
	uid_t uid;              /* the sandbox's unprivileged host uid */
	gid_t gid;
	struct sbx_config *cfg; /* the configuration this sandbox lives with */
};

/* A provider's handle on one sandbox.  Providers embed it first in their own
 * struct and downcast with a checked helper. */
struct sbx_box {
	const struct sbx_provider *prov;
	char remote_id[80]; /* shown in status: pid, container id, remote id */
};

/* A command to run (DESIGN §6).  The provider's supervisor runs the
 * command with /bin/sh (as `sh -c cmd` does) with cwd /mnt/user-data/workspace, stdin from
 * job_dir/stdin when it exists, stdout/stderr appended to job_dir/stdout and
 * job_dir/stderr, and records the end in job_dir/result (JSON:
 * state, exit, signal, ended_at), also when the daemon is gone. */
struct sbx_exec_spec {
	const char *cmd;  /* bytes (any encoding), no NUL; never put in a host argv */
	char *const *env; /* KEY=VALUE, NULL-terminated; never in a host process's environment */
	const char *job_dir;
	const char *job_name;
	long timeout; /* seconds; the supervisor kills and reports timed_out */
};

struct sbx_provider_ops {
	/* Start of day: check the host can run this provider (binaries,
	 * sockets, credentials).  Fills err with the cause on failure. */
	enum sbx_err (*init)(const struct sbx_config *cfg, char *err, size_t errlen);
	/* Create a sandbox and return when it is ready for exec and files.
	 * On failure nothing is left behind. */
	enum sbx_err (*create)(const struct sbx_spec *spec, struct sbx_box **out);
	/* Is the sandbox alive and intact?  SBX_OK or SBX_ERR_GONE. */
	enum sbx_err (*health)(struct sbx_box *box);
	/* End the sandbox and everything running in it.  Host data stays. */
	enum sbx_err (*destroy)(struct sbx_box *box);
	/* Leave the sandbox running (keep_on_exit) and free the handle. */
	void (*forget)(struct sbx_box *box);
	/* Adoption after a restart: find the sandbox described by spec (state
	 * dir, container labels, remote metadata).  Returns SBX_OK with a box
	 * (possibly not healthy: the pool checks on reclaim) or SBX_ERR_GONE
	 * when nothing of it remains. */
	enum sbx_err (*adopt)(const struct sbx_spec *spec, struct sbx_box **out);
	/* Run a command; *pid is the host pid of the supervisor, which exits
	 * when the command has ended and its result is recorded. */
	enum sbx_err (*exec_start)(struct sbx_box *box, const struct sbx_exec_spec *spec, pid_t *pid);
	/* Signal a running command (the whole job; SIGKILL ends every process
	 * the job started, including ones that left its process group). */
	enum sbx_err (*exec_signal)(struct sbx_box *box, const char *job_dir, int sig);
	/* End every process of the sandbox but its init: running jobs and
	 * whatever finished jobs left behind.  The sandbox and its files stay.
	 * Running jobs report "killed". */
	enum sbx_err (*kill_all)(struct sbx_box *box);
	/* The slot of a finished job is being removed: end what the job left
	 * behind and free what the provider kept for it (its cgroup).  Like
	 * exec_signal, it needs only job_dir. */
	enum sbx_err (*exec_cleanup)(struct sbx_box *box, const char *job_dir);
	/* Room for later issues: remote file access, skills upload sync and
	 * network-policy events plug in here. */
	void *files;
	void *skills_sync;
	void *net_policy;
};

struct sbx_provider {
	const char *name;
	unsigned caps;
	const struct sbx_provider_ops *ops;
};

/* The registry: every provider built into this binary (providers.c). */
const struct sbx_provider *provider_find(const char *name);

#endif
