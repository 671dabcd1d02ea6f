/* SPDX-License-Identifier: MIT */
/*
 * local.h - what the local provider's files share (local.c: sandboxes;
 * local_jobs.c: their jobs' exec handles).  Not an interface for anyone
 * else.  local_net.c (their network) does not include it: it gets
 * local_spawn from local_net_init, so the two files do not depend on each
 * other in a circle (make check-layers).
 */
#ifndef SBX_LOCAL_H
#define SBX_LOCAL_H

#include <stdint.h>
#include <sys/types.h>

#include <limits.h>
#include <stdbool.h>

#include "../common/buf.h"
#include "cgroup.h"
#include "local_net.h"
#include "provider.h"

#define LOCAL_MAX_ARGS 256
#define LOCAL_EXEC_INPUT_MAX (1024 * 1024) /* a job's environment (and command) */

struct local_box {
	struct sbx_box base; /* first: see local_box() */
	pid_t init_pid;      /* 0 when the sandbox is known dead */
	unsigned long long init_start;
	unsigned long long mntns;
	pid_t bwrap_pid; /* our child, or 0 when adopted */
	uid_t uid;
	gid_t gid;
	char token[24];
	char *thread_dir;
	uint64_t output_max; /* resources.output of the config it lives with */
	struct local_net net; /* pasta of an open-mode sandbox */
	bool ending;          /* told to end by the unmount's teardown (stop_soon) */
};

/* local.c: the box of b (aborts for another provider's box); whether its
 * init still runs; a sealed memfd holding data; the seccomp filter in one;
 * sbxfs-exec's path. */
struct local_box *local_box(struct sbx_box *b);
bool local_alive(struct local_box *lb);
int local_memfd(const char *name, const void *data, size_t len);
int local_filter_fd(void);
extern char local_exec_helper[PATH_MAX];

/* An argv built from fixed and formatted strings (overflow: too many). */
struct argv_builder {
	const char *v[LOCAL_MAX_ARGS];
	int n;
	struct buf strings[LOCAL_MAX_ARGS]; /* storage for formatted arguments */
	int ns;
	int overflow;
};
void av_add(struct argv_builder *a, const char *s);
__attribute__((format(printf, 2, 3))) const char *av_fmt(struct argv_builder *a, const char *fmt, ...);
void av_free(struct argv_builder *a);

/* local_jobs.c: the exec slots of the local provider (provider.h). */
enum sbx_err local_exec_start(struct sbx_box *b, const struct sbx_exec_spec *e, struct sbx_exec **out);
enum sbx_err local_exec_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out);
enum sbx_err local_exec_signal(struct sbx_exec *x, int sig);
void local_exec_finish(struct sbx_exec *x);
void local_exec_free(struct sbx_exec *x);
enum sbx_err local_kill_all(struct sbx_box *b);
void local_exec_cleanup(struct sbx_box *b, const char *job_dir, const char *job_name);

/* local.c: the configured local.rootfs (NULL: the host's); record lb in
 * lb->thread_dir/local.json; the uid of s's thread and its data
 * directories, owned by it. */
const char *local_rootfs(const struct sbx_config *cfg);
int local_save(struct local_box *lb);
enum sbx_err local_prepare_files(const struct sbx_spec *s, const char *scope, uid_t *uid, gid_t *gid);
/* Does `users:` map user to a host account (its uid is not of the range)? */
bool local_host_account(const struct sbx_config *cfg, const char *user);

/* local_claim.c: bind a spare to a thread (provider.h's claim).  A spare's
 * identity until then is nobody's. */
#define LOCAL_SPARE_ID 65534
enum sbx_err local_claim(struct sbx_box *b, const struct sbx_spec *spec);

/* local_spawn.c: start argv[0] with fds as 0..LOCAL_SPAWN_FDS-1 (-1:
 * /dev/null for 0..2, closed above), in a new session, every other fd
 * closed, no signal blocked.  pid or -1 (errno).  _joined: and inside the
 * cgroups of j from its first instruction (every signal's disposition the
 * default). */
pid_t local_spawn(char *const argv[], char *const envp[], const int fds[LOCAL_SPAWN_FDS]);
pid_t local_spawn_joined(char *const argv[], char *const envp[], const int fds[LOCAL_SPAWN_FDS],
	const struct cgroup_join *j);


#endif
