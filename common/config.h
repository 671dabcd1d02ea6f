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
 * (logged, not fatal); a key given twice in one mapping is an error.  A
 * DeerFlow config.yaml works as it is: when the file has a `sandbox:`
 * mapping, the sandbox keys are read from there.
 *
 * Who parses what: this module reads the keys every provider shares
 * (DeerFlow's flat sandbox keys and sbxfs's own); a provider's own section
 * (`local:`, `docker:`, ...) is handed to that provider through the hooks
 * set with config_set_hooks() (the provider registry sets them), using the
 * cfg_* readers below, and the provider keeps what it read in cfg->prov.
 * Without hooks (unit tests of this module alone) provider sections are
 * unknown keys and `use` is taken as written.
 */
#ifndef SBX_CONFIG_H
#define SBX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"
#include "cfgread.h"

/* DeerFlow's `use:` for the package in python/: DeerFlow's agents run on an
 * sbxfs mount, and sbxfs's provider is the key `provider` beside it. */
#define CONFIG_DEERFLOW_PACKAGE_CLASS "sbxfs_deerflow:SbxfsSandboxProvider"

enum net_mode { NET_OPEN, NET_ISOLATED, NET_ALLOWLIST };

/* fuse.io_uring: how requests reach the daemon (fs/uring.c decides and says
 * what each means).  Read when mounting only. */
enum config_uring { CONFIG_URING_OFF, CONFIG_URING_AUTO, CONFIG_URING_ON };

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

/* network.hosts: a name the proxy resolves to these addresses, without DNS. */
struct config_host {
	char *name;   /* lower case, no trailing dot */
	char **addrs; /* numeric IPv4 or IPv6 addresses */
	size_t n_addrs;
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
	void *prov; /* the provider's own configuration (hooks->free_prov) */
	char *path;
	char *use;            /* canonical provider name: "local", ... */
	char *state_dir;
	int replicas;
	/* pool.prewarm: ready sandboxes that belong to no scope (spares,
	 * providers/spares.c); -1 = the provider's default (2 where it can
	 * claim, 0 elsewhere), never more than replicas */
	int prewarm;
	long idle_timeout;         /* seconds, 0 = reaper off */
	long idle_check_interval;  /* seconds */
	long bash_command_timeout; /* seconds */
	long ready_timeout;        /* seconds */
	long cache_timeout;        /* seconds data entries/attributes stay cached while watched (0: watcher off) */
	bool allow_other;
	bool keep_on_exit;
	/* acquire: async (default): mkdir of a thread answers once the create
	 * has started and accesses inside wait for it; sync: mkdir answers when
	 * the sandbox is ready (DESIGN §3) */
	bool acquire_sync;
	char *skills_container_path;
	char *skills_path; /* optional library copied into new sandboxes */
	/* skills/ limits (DESIGN §8), 0 = none: one file (EFBIG), all files'
	 * bytes and their number (ENOSPC) */
	uint64_t skills_max_file_size, skills_max_total_size, skills_max_files;
	/* remote_files.cache_size: a soft cap on the bytes of the remote-files
	 * caches of all sandboxes (fs/rfiles.c evicts what no one has open and
	 * is uploaded, least recently used first); 0 = none */
	uint64_t rfiles_cache_max;
	/* snapshots.max_per_thread: snapshots one thread may have (EDQUOT past it) */
	unsigned snapshots_max;
	/* fuse.io_uring and fuse.io_uring_queue_depth (ring entries per CPU) */
	enum config_uring fuse_io_uring;
	unsigned fuse_uring_depth;
	struct config_kv *env;
	size_t n_env;
	struct config_mount *mounts;
	size_t n_mounts;
	bool users_passwd; /* users: passwd */
	struct config_user *users;
	size_t n_users;
	struct config_resources res;
	/* network: */
	enum net_mode net_mode;
	char **allow_domains;
	size_t n_allow_domains;
	bool approval_prompt;
	long temporary_grant_ttl;
	long approval_wait;
	bool allow_private; /* network.allow_private_destinations */
	bool net_gateway;   /* network.gateway: open sandboxes share one gateway (else a pasta each) */
	struct config_host *net_hosts;
	size_t n_net_hosts;
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
	bool auto_start; /* DeerFlow's AIO key: false only with base_url (nothing is started then) */
};

/* ---- for the providers' own sections ---------------------------------------- */

/* The cfg_* readers: common/cfgread.h (included above). */

struct json_t;

struct config_hooks {
	/* the canonical provider a `use:` value names, or NULL */
	const char *(*canonical)(const char *use);
	/* "local, docker, ..." for the error line */
	const char *(*names)(void);
	/* offer key to the provider cfg->use names: 1 taken, 0 not its key */
	int (*key)(struct cfg_ctx *x, struct sbx_config *cfg, const char *key, struct cfg_node *v);
	/* some built-in provider owns key (accepted, unused by this one) */
	bool (*known)(const char *key);
	/* the provider's checks of the whole file: 0 or -1 after cfg_fail */
	int (*check)(struct cfg_ctx *x, struct sbx_config *cfg);
	void (*show)(const struct sbx_config *cfg, struct json_t *out);
	void (*free_prov)(const struct sbx_config *cfg);
};

void config_set_hooks(const struct config_hooks *h);

#define CONFIG_MAX (1024 * 1024) /* bytes of a configuration file */

/* Read path (at most CONFIG_MAX bytes) and config_parse() it. */
struct sbx_config *config_load(const char *path, char *err, size_t errlen);
/* Parse and validate len bytes of YAML at text (need not be NUL-terminated);
 * name is what error lines and cfg->path say.  On failure returns NULL and
 * writes one line to err (never empty). */
struct sbx_config *config_parse(const char *name, const char *text, size_t len, char *err, size_t errlen);
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
const char *config_uring_name(enum config_uring m);

#endif
