/* SPDX-License-Identifier: MIT */
/*
 * config.h - mount.conf: parse (libyaml), validate, show.
 *
 * A config is immutable once loaded and is shared by reference count:
 * every sandbox keeps the config it was created with, so a SIGHUP reload
 * (a new struct sbx_config) never changes a running sandbox.
 *
 * Validation is all-or-nothing: config_load() returns NULL and fills err
 * with one line naming the key and the rule; unknown keys are warnings
 * (logged, not fatal).  A DeerFlow config.yaml works as it is: when the file
 * has a `sandbox:` mapping, the sandbox keys are read from there.
 */
#ifndef SBX_CONFIG_H
#define SBX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"

enum net_mode { NET_OPEN, NET_ISOLATED, NET_ALLOWLIST };

struct config_kv {
	char *key;
	char *value;    /* resolved value */
	char *shown;    /* what .config shows ("$VAR" form or "***") */
};

struct config_mount {
	char *host_path;
	char *container_path;
	bool read_only;
};

struct config_user {
	char *name;
	uid_t uid;
	gid_t gid;
	int max_sandboxes; /* active + creating sandboxes of this user; 0 = no cap */
};

/* resources: the limits of every sandbox (and of each job's output).
 * 0 means "no limit" for each. */
struct config_resources {
	uint64_t memory;   /* bytes of RAM (swap off) for the whole sandbox */
	double cpus;       /* CPU time, in CPUs (1.5 = one and a half) */
	uint64_t pids;     /* processes and threads */
	uint64_t tmp_size; /* bytes of the private /tmp (a tmpfs) */
	uint64_t output;   /* bytes of stdout + stderr one job may keep */
};

struct sbx_config {
	int refs; /* atomic; see config_get/config_put */
	char *path;
	char *use;            /* canonical provider name: "local", ... */
	char *state_dir;
	int replicas;
	long idle_timeout;         /* seconds, 0 = reaper off */
	long idle_check_interval;  /* seconds */
	long bash_command_timeout; /* seconds */
	long ready_timeout;        /* seconds */
	bool allow_other;
	bool keep_on_exit;
	char *skills_container_path;
	char *skills_path; /* optional library copied into new sandboxes */
	struct config_kv *env;
	size_t n_env;
	struct config_mount *mounts;
	size_t n_mounts;
	bool users_passwd; /* users: passwd */
	struct config_user *users;
	size_t n_users;
	/* network: */
	enum net_mode net_mode;
	char **allow_domains;
	size_t n_allow_domains;
	bool approval_prompt;
	long temporary_grant_ttl;
	long approval_wait;
	struct config_resources res;
	/* local: */
	char *local_rootfs;
	uid_t local_uid_base;
	unsigned local_uid_count;
	/* remote-provider keys, accepted now for DeerFlow compatibility */
	char *image;
	char *container_prefix;
	char *base_url;
	char *api_key;
	char *domain;
	char *protocol;
	long request_timeout;
	long sandbox_timeout;
	bool use_server_proxy;
};

/* Parse and validate.  On failure returns NULL and writes one line to err. */
struct sbx_config *config_load(const char *path, char *err, size_t errlen);
struct sbx_config *config_get(struct sbx_config *c);
void config_put(struct sbx_config *c);
/* The effective configuration as JSON text, secrets shown as "***". */
int config_show(const struct sbx_config *c, struct buf *out);
/* users: lookup.  Returns 0 and fills uid/gid, or -1 when the name is not
 * allowed (users: is set and the name is not in it). When users: is absent,
 * returns 1 (no mapping: the mounter owns everything). */
int config_user_lookup(const struct sbx_config *c, const char *name, uid_t *uid, gid_t *gid);
/* users: the most sandboxes name may hold at once (0: no cap). */
int config_user_max_sandboxes(const struct sbx_config *c, const char *name);
const char *config_net_mode_name(enum net_mode m);

#endif
