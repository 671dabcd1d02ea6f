/* SPDX-License-Identifier: MIT */
/*
 * container_int.h - the container runtime layer (container.c,
 * container_freeze.c): one container per scope, made and watched through
 * the Docker Engine API (docker_api.c: dockerd or Podman's compatible API),
 * for the providers that run their sandboxes in containers.  It knows what
 * every such sandbox has (name, labels, the thread's data bind-mounted,
 * confinement, the record docker.json that proves a container ours, pause,
 * the container's network namespace, the common configuration keys) and
 * nothing of what runs inside: a provider describes that in a struct
 * container_type (what it adds to the create, how its sandbox becomes
 * ready) and embeds struct cbox first in its own box.
 *
 * A sandbox is one container named <container_prefix>-<scope token>,
 * labelled with its provider, user, thread, scope token and the daemon's
 * state_id; its record is thread_dir/docker.json (name and the time of the
 * create's intent, written before the create; container id, written as soon
 * as the create answers; init pid and start time, uid), which is what proves
 * a container ours: labels alone never do (container.c, "records").  Boxes
 * are reference counted by the pool and by exec handles (provider.h); their
 * fields are immutable after create/adopt except where noted.
 *
 * Locks: the layer's own lock (its dockerd clients, failed removals, uid
 * pool) is a leaf, never held across a request to dockerd.
 */
#ifndef SBX_CONTAINER_INT_H
#define SBX_CONTAINER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/buf.h"
#include "docker_api.h"
#include "provider.h"

#define CONTAINER_LABEL_PROVIDER "org.sbxfs.provider"
#define CONTAINER_LABEL_USER "org.sbxfs.user"
#define CONTAINER_LABEL_THREAD "org.sbxfs.thread"
#define CONTAINER_LABEL_SCOPE "org.sbxfs.scope"
#define CONTAINER_LABEL_STATE_ID "org.sbxfs.state_id"
#define CONTAINER_LABEL_SPARE "org.sbxfs.spare" /* a spare's (pool.prewarm): its token, kept after its claim */

/* The keys every container provider's section has (socket, labels,
 * uid_base, uid_count): first in the provider's own section struct
 * (cfg->prov), so container_conf_of() finds them. */
struct container_conf {
	char *socket; /* NULL: $DOCKER_HOST (unix://) or /var/run/docker.sock */
	struct docker_label *labels; /* extra labels on every container */
	size_t n_labels;
	uid_t uid_base; /* uids: a range apart from the local provider's, so a reload from one to the
			 * other never hands one uid to two threads */
	unsigned uid_count;
};

#define CONTAINER_CONF_DEFAULTS { .uid_base = 1880096768, .uid_count = 60000 }

/* The section named key of a container provider into cfg->prov: made
 * from defaults (size bytes, struct container_conf first) at its first
 * key, then each of its keys through fn, which hands the common ones to
 * container_conf_key.  0 or -1 (reported). */
int container_conf_section(struct cfg_ctx *x, struct sbx_config *cfg, const char *key, struct cfg_node *v,
	const void *defaults, size_t size,
	int (*fn)(struct cfg_ctx *x, void *arg, const char *key, const char *full, struct cfg_node *v));
/* A key of the common part: 0 read, -1 invalid (reported), 1 not a common key. */
int container_conf_key(struct cfg_ctx *x, struct container_conf *cc, const char *key, const char *full,
	struct cfg_node *v);
/* The common part as .config shows it, into the section object o. */
void container_conf_show(const struct container_conf *cc, struct json_t *o);
void container_conf_clear(struct container_conf *cc);
/* The common part of the section cfg lives with (defaults when absent). */
const struct container_conf *container_conf_of(const struct sbx_config *cfg);

struct cbox {
	struct sbx_box base; /* first: see cbox() */
	const struct container_type *type;
	char name[128]; /* container name */
	char id[DOCKER_ID_LEN + 1];
	long long intent_ns; /* wall clock (ns) just before its create was sent (docker.json) */
	pid_t init_pid;      /* host pid of the container's first process; 0 = unknown or dead */
	unsigned long long init_start;
	unsigned long long pidns; /* inode of the container's pid namespace */
	char token[24];
	char *thread_dir;
	struct sbx_config *cfg; /* referenced: the config it lives with */
	struct docker *api;     /* the client of its dockerd (owned by container.c, never freed before exit) */
	uint64_t output_max;
	bool spare; /* an unclaimed spare (pool.prewarm): never paused, its init known; cleared by its claim */
	/* container_freeze.c: the container is paused since paused_at
	 * (monotonic ms, 0 = running), and was paused paused_ms before; both atomic */
	uint64_t paused_at, paused_ms;
};

/* What a create sends, built by container.c (the common part) and then by
 * the provider's spec hook (what runs inside). */
#define CONTAINER_MAX_MOUNTS 64
#define CONTAINER_MAX_LABELS 40
#define CONTAINER_MAX_ENV 512
#define CONTAINER_MAX_ARGS 64

#define CONTAINER_SPARE_DIRS 4 /* workspace, uploads, outputs, skills */

struct container_spec {
	struct docker_create_spec d;
	struct docker_mount mounts[CONTAINER_MAX_MOUNTS];
	size_t n_mounts;
	struct docker_kv labels[CONTAINER_MAX_LABELS];
	size_t n_labels;
	const char *env[CONTAINER_MAX_ENV];
	struct buf envtext[CONTAINER_MAX_ENV];
	size_t n_env;
	const char *cmd[CONTAINER_MAX_ARGS];
	const char *caps[CONTAINER_MAX_ARGS];
	char user[32], hostname[64], seccomp_file[4096];
	char path[4096]; /* the provider's: a mount source it makes in its spec hook */
	char spare_src[CONTAINER_SPARE_DIRS][4096]; /* a spare's empty mount points (container_spare_dir) */
};

/* Appends to the spec: -1 when full (the create then fails, logged). */
int container_spec_mount(struct container_spec *cs, const char *src, const char *dst, bool ro);
int container_spec_env(struct container_spec *cs, const char *key, const char *value);
/* The container's Cmd and its added capabilities (n <= CONTAINER_MAX_ARGS - 1). */
int container_spec_cmd(struct container_spec *cs, char *const *argv, size_t n);
int container_spec_caps(struct container_spec *cs, char *const *caps, size_t n);

/* A provider's kind of container. */
struct container_type {
	const struct sbx_provider *prov;
	size_t box_size;           /* the provider's box, struct cbox first */
	const char *default_image; /* NULL: the configuration names the image */
	/* Its own fields, after the common ones (create and adopt). */
	void (*box_init)(struct cbox *cb, const struct sbx_spec *s);
	/* Host files it needs beyond the data directories (uid and gid set in
	 * cb->base): 0 or an errno.  NULL: none. */
	int (*prepare)(struct cbox *cb, const struct sbx_spec *s);
	/* What runs inside: entrypoint, command, mounts, environment, user
	 * (cs->d.user NULL: the image's).  0, or -1 when the spec is full. */
	int (*spec)(struct cbox *cb, const struct sbx_spec *s, struct container_spec *cs);
	/* Wait until the sandbox inside answers (the container runs, its
	 * egress rules are in): SBX_OK or why not (logged). */
	enum sbx_err (*ready)(struct cbox *cb, const char *scope, long timeout_s);
	/* A spare's claim (container_claim): make what runs inside the
	 * thread's uid and gid, and return once it runs as them.  NULL: the
	 * provider has no spares. */
	enum sbx_err (*claim_uid)(struct cbox *cb, uid_t uid, gid_t gid, const char *scope);
};

/* b as a container box (aborts on a box of another kind). */
struct cbox *cbox(struct sbx_box *b);

/* The provider slots that are the layer's whole answer (ops of provider.h). */
enum sbx_err container_init(const struct sbx_config *cfg, char *err, size_t errlen);
enum sbx_err container_create(const struct sbx_spec *s, const struct container_type *t, struct sbx_box **out);
enum sbx_err container_adopt(const struct sbx_spec *s, const struct container_type *t, struct sbx_box **out);
enum sbx_err container_discover(const struct sbx_config *cfg, const char *state_id,
	void (*found)(const char *user, const char *thread, void *arg), void *arg);
enum sbx_err container_destroy(struct sbx_box *b);
/* Bind cb, a spare (made by container_create with spec->spare: empty
 * binds where a thread's data goes, running as root until its claim), to
 * the thread s names without restarting it (provider.h's claim): the
 * thread's uid (uidpool, as a create gives it) and data directories, the
 * type's claim_uid, the directories and skills attached over the empty
 * binds and the hostname set (claim_mount.c), the record moved to the
 * thread's directory.  Any failure: an error (the pool destroys cb). */
enum sbx_err container_claim(struct cbox *cb, const struct sbx_spec *s);
/* Whether the init of cb, a spare adopted after a restart, was told a
 * claim (it no longer runs as root): such a spare is never handed out. */
bool container_spare_claimed(struct cbox *cb);
void container_box_free(struct sbx_box *b);
void container_shutdown(void);
/* SBX_OK while the container runs the init it was made or adopted with,
 * else SBX_ERR_GONE (the provider then asks what runs inside). */
enum sbx_err container_health(struct cbox *cb);
/* init_pid, container and image, into the status object out. */
void container_box_status(struct cbox *cb, struct json_t *out);
/* The network capability: the approval proxy served in the container's netns. */
extern const struct sbx_net_ops container_net_ops;

/* The slots of a container provider's ops (provider.h) that are the
 * layer's functions, the same in every such provider. */
#define CONTAINER_PROVIDER_OPS                                                                                  \
	.discover = container_discover, .shutdown = container_shutdown, .destroy = container_destroy,           \
	.box_free = container_box_free, .net = &container_net_ops, .freeze = &container_freeze_ops

/* An fd on the container's network namespace, checked against pid reuse; -1. */
int container_netns(struct cbox *cb);
/* Whether the container's init is still the one it was made with. */
bool container_running(struct cbox *cb);
/* The direct children of host process pid (all its threads'), appended to
 * out[n..max); the new count. */
int container_children(pid_t pid, pid_t *out, int max, int n);

/* A readiness wait's pause of *pause_ms (then doubled, up to max_ms), cut
 * short when the create's work is cancelled (the token current on this
 * thread, common/token.h: a FUSE interrupt of the mkdir): SBX_OK, or
 * SBX_ERR_INTR.  The create then removes the container it made. */
enum sbx_err container_backoff(unsigned *pause_ms, unsigned max_ms);

/* container_freeze.c: pause and unpause (the provider's freeze table), and
 * for job pumps that run in the daemon: ms the container was paused so far
 * (also the pause going on), and whether it is paused now. */
extern const struct sbx_freeze_ops container_freeze_ops;
uint64_t container_paused_ms(struct cbox *cb);
bool container_paused(struct cbox *cb);

#endif
