/* SPDX-License-Identifier: MIT */
/*
 * local.c - the local provider: each sandbox is a persistent bubblewrap
 * sandbox on this host.
 *
 * Shape of a sandbox (host view):
 *   bwrap (our child, in its own session, outside the sandbox)
 *     └─ sbxfs-init: pid 1 of a new pid namespace, with new mount, ipc, uts
 *        and net namespaces (the network of each mode: local_net.c)
 * bwrap is started by root without a user namespace (a user namespace made by
 * root would map the sandbox uid to host root), so the namespaces belong to
 * the host.  sbxfs-init (local_init.c, static, bind-mounted read-only at
 * /run/sbxfs-init) drops to the sandbox uid, clears every capability and sets
 * no_new_privs before it reports "ready" on fd 4; then it reaps orphans.
 *
 * The init pid (and its start time, against pid reuse) is kept in
 * thread_dir/local.json so a restarted daemon adopts the sandbox.  Destroy
 * sends SIGKILL to the init: as pid 1 of its namespace its death ends every
 * process in the sandbox (a SIGTERM from outside would be ignored).
 *
 * Jobs run through the sbxfs-exec supervisor (local_exec.c), which joins
 * the init's namespaces.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <spawn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/json.h"

#include "../common/buf.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../common/layout.h"
#include "../common/names.h"
#include "provider.h"
#include "provider_int.h"
#include "local.h"
#include "uidpool.h"

#define LOCAL_MAX_ARGS 256

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
	struct local_net net; /* pasta of an open-mode sandbox */
};

/* The `local:` section of mount.conf (cfg->prov). */
struct local_conf {
	char *rootfs;     /* NULL: the host's /usr and /etc */
	uid_t uid_base;   /* sandbox uids when users: does not map the user */
	unsigned uid_count;
};

static const struct local_conf local_defaults = { .uid_base = 200000, .uid_count = 60000 };

static const struct local_conf *local_conf(const struct sbx_config *cfg)
{
	return cfg->prov ? cfg->prov : &local_defaults;
}

static struct uidpool *local_uids; /* created by local_init for the first configuration's range */
static uid_t local_uids_base;
static unsigned local_uids_count;

static char local_bwrap[PATH_MAX] = "/usr/bin/bwrap";
static char local_exec_helper[PATH_MAX];
static char local_init_helper[PATH_MAX];
#define LOCAL_INIT_PATH "/run/sbxfs-init" /* where the sandbox sees its init */
static char local_cgroup_root[PATH_MAX]; /* "" when no cgroup v2 is mounted */

static struct local_box *local_box(struct sbx_box *b)
{
	if (!b || b->prov != &provider_local)
		abort(); /* a box handed to the wrong provider is a programming error */
	return (struct local_box *)b;
}

static void local_find_cgroup2(void)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	char dev[256], dir[PATH_MAX], type[64];

	local_cgroup_root[0] = '\0';
	if (!f)
		return;
	while (fscanf(f, "%255s %4095s %63s %*[^\n]", dev, dir, type) == 3) {
		if (!strcmp(type, "cgroup2")) {
			if (str_fmt(local_cgroup_root, sizeof(local_cgroup_root), "%s/sbxfs", dir) ||
			    (mkdir(local_cgroup_root, 0755) && errno != EEXIST))
				local_cgroup_root[0] = '\0';
			break;
		}
	}
	fclose(f);
}

static int local_find_helper(const char *dir, const char *name, char *out, size_t len)
{
	if (!str_fmt(out, len, "%s/%s", dir, name) && !access(out, X_OK))
		return 0;
	if (!str_fmt(out, len, "%s/../libexec/sbxfs/%s", dir, name) && !access(out, X_OK))
		return 0;
	return -1;
}

/* ---- configuration: the local: section ----------------------------------------- */

static int local_conf_key(struct cfg_ctx *x, void *arg, const char *key, const char *full, struct cfg_node *v)
{
	struct local_conf *lc = arg;
	long l;

	if (!strcmp(key, "rootfs"))
		return cfg_abs_path(x, full, v, &lc->rootfs);
	if (!strcmp(key, "uid_base")) {
		if (cfg_long(x, full, v, 1000, 4000000000L, &l))
			return -1;
		lc->uid_base = (uid_t)l;
		return 0;
	}
	if (!strcmp(key, "uid_count")) {
		if (cfg_long(x, full, v, 1, 1000000, &l))
			return -1;
		lc->uid_count = (unsigned)l;
		return 0;
	}
	log_warn("config", "%s: unknown key, ignored", full);
	return 0;
}

static int local_config_key(struct cfg_ctx *x, struct sbx_config *cfg, const char *key, struct cfg_node *v)
{
	struct local_conf *lc = cfg->prov;

	(void)key; /* only "local" is ours */
	if (!lc) {
		lc = calloc(1, sizeof(*lc));
		if (!lc) {
			cfg_fail(x, "local", "out of memory");
			return -1;
		}
		*lc = local_defaults;
		cfg->prov = lc;
	}
	return cfg_each(x, "local", v, local_conf_key, lc);
}

static void local_config_show(const struct sbx_config *cfg, struct json_t *out)
{
	const struct local_conf *lc = local_conf(cfg);

	json_object_set_new((json_t *)out, "local",
		json_pack("{s:o,s:i,s:i}", "rootfs", lc->rootfs ? json_string(lc->rootfs) : json_null(), "uid_base",
			(int)lc->uid_base, "uid_count", (int)lc->uid_count));
}

static void local_config_free(void *prov)
{
	struct local_conf *lc = prov;

	if (lc) {
		free(lc->rootfs);
		free(lc);
	}
}

/* ---- start of day ----------------------------------------------------------------- */

static enum sbx_err local_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
	const struct local_conf *lc = local_conf(cfg);

	char self[PATH_MAX], *slash;
	ssize_t n;

	if (access(local_bwrap, X_OK)) {
		snprintf(err, errlen, "local provider: %s not found (install bubblewrap)", local_bwrap);
		return SBX_ERR_INVAL;
	}
	if (lc->rootfs && access(lc->rootfs, X_OK)) {
		snprintf(err, errlen, "local.rootfs: %s: %s", lc->rootfs, strerror(errno));
		return SBX_ERR_INVAL;
	}
	if (local_uids && (lc->uid_base != local_uids_base || lc->uid_count != local_uids_count))
		log_warn("config", "local.uid_base/uid_count: a new range takes effect at the next start");
	if (!local_uids) {
		local_uids = uidpool_new(lc->uid_base, lc->uid_count);
		if (!local_uids) {
			snprintf(err, errlen, "local provider: out of memory");
			return SBX_ERR_NOMEM;
		}
		local_uids_base = lc->uid_base;
		local_uids_count = lc->uid_count;
		uidpool_scan(local_uids, cfg->state_dir);
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0) {
		snprintf(err, errlen, "local provider: cannot find own executable: %s", strerror(errno));
		return SBX_ERR_IO;
	}
	self[n] = '\0';
	slash = strrchr(self, '/');
	*slash = '\0';
	/* Built tree: next to sbxfs; installed: PREFIX/libexec/sbxfs/. */
	if (local_find_helper(self, "sbxfs-exec", local_exec_helper, sizeof(local_exec_helper)) ||
	    local_find_helper(self, "sbxfs-init", local_init_helper, sizeof(local_init_helper))) {
		snprintf(err, errlen, "local provider: sbxfs-exec or sbxfs-init not found next to %s or in %s/../libexec/sbxfs",
			self, self);
		return SBX_ERR_INVAL;
	}
	local_find_cgroup2();
	local_net_init();
	if (cfg->net_mode == NET_OPEN && !local_net_have_pasta()) {
		snprintf(err, errlen, "network.mode open: pasta not found (install Debian's passt package)");
		return SBX_ERR_INVAL;
	}
	if (!local_cgroup_root[0])
		log_warn("local", "no cgroup v2 hierarchy: kill falls back to process groups");
	return SBX_OK;
}

struct argv_builder {
	const char *v[LOCAL_MAX_ARGS];
	int n;
	struct buf strings[LOCAL_MAX_ARGS]; /* storage for formatted arguments */
	int ns;
	int overflow;
};

static void av_add(struct argv_builder *a, const char *s)
{
	if (a->n >= LOCAL_MAX_ARGS - 1) {
		a->overflow = 1;
		return;
	}
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

static const char *av_fmt(struct argv_builder *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static const char *av_fmt(struct argv_builder *a, const char *fmt, ...)
{
	struct buf *b;
	va_list ap;

	if (a->ns >= LOCAL_MAX_ARGS) {
		a->overflow = 1;
		return "";
	}
	b = &a->strings[a->ns++];
	buf_init(b, BUF_CAP_PATH);
	va_start(ap, fmt);
	if (buf_vaddf(b, fmt, ap))
		a->overflow = 1;
	va_end(ap);
	return buf_str(b);
}

static void av_free(struct argv_builder *a)
{
	for (int i = 0; i < a->ns; i++)
		buf_free(&a->strings[i]);
}

/* bwrap creates missing parents of a mount point with mode 0700, which would
 * hide them from the sandbox uid: create every ancestor 0755 first. */
static void av_dirs(struct argv_builder *a, const char *path)
{
	char tmp[PATH_MAX];

	if (str_fmt(tmp, sizeof(tmp), "%s", path)) {
		a->overflow = 1;
		return;
	}
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		av_add(a, "--perms");
		av_add(a, "0755");
		av_add(a, "--dir");
		av_add(a, av_fmt(a, "%s", tmp));
		*p = '/';
	}
}

static void av_rootfs(struct argv_builder *a, const struct sbx_config *cfg)
{
	static const char *sysdirs[] = { "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", NULL };
	char target[PATH_MAX];
	struct stat st;

	if (local_conf(cfg)->rootfs) {
		av_add(a, "--ro-bind");
		av_add(a, local_conf(cfg)->rootfs);
		av_add(a, "/");
		return;
	}
	av_add(a, "--ro-bind");
	av_add(a, "/usr");
	av_add(a, "/usr");
	for (int i = 0; sysdirs[i]; i++) {
		if (lstat(sysdirs[i], &st))
			continue;
		if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlink(sysdirs[i], target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			av_add(a, "--symlink");
			av_add(a, av_fmt(a, "%s", target));
			av_add(a, sysdirs[i]);
		} else if (S_ISDIR(st.st_mode)) {
			av_add(a, "--ro-bind");
			av_add(a, sysdirs[i]);
			av_add(a, sysdirs[i]);
		}
	}
	av_add(a, "--ro-bind");
	av_add(a, "/etc");
	av_add(a, "/etc");
}

static void av_bind(struct argv_builder *a, const char *how, const char *src, const char *dst)
{
	av_dirs(a, dst);
	av_add(a, how);
	av_add(a, src);
	av_add(a, dst);
}

static void local_build_argv(struct argv_builder *a, const struct sbx_spec *s, uid_t uid, gid_t gid)
{
	const struct sbx_config *cfg = s->cfg;

	av_add(a, local_bwrap);
	av_add(a, "--unshare-pid");
	av_add(a, "--unshare-ipc");
	av_add(a, "--unshare-uts");
	av_add(a, "--unshare-cgroup-try");
	av_add(a, "--unshare-net"); /* every mode: local_net.c gives it its network */
	av_add(a, "--hostname");
	av_add(a, av_fmt(a, "sbx-%s", s->token));
	av_rootfs(a, cfg);
	av_add(a, "--proc");
	av_add(a, "/proc");
	av_add(a, "--dev");
	av_add(a, "/dev");
	av_add(a, "--perms");
	av_add(a, "1777");
	av_add(a, "--tmpfs");
	av_add(a, "/tmp");
	av_bind(a, "--bind", s->dirs.workspace, "/mnt/user-data/workspace");
	av_bind(a, "--bind", s->dirs.uploads, "/mnt/user-data/uploads");
	av_bind(a, "--bind", s->dirs.outputs, "/mnt/user-data/outputs");
	av_bind(a, "--ro-bind", s->dirs.skills, cfg->skills_container_path);
	for (size_t i = 0; i < cfg->n_mounts; i++)
		av_bind(a, cfg->mounts[i].read_only ? "--ro-bind" : "--bind", cfg->mounts[i].host_path,
			cfg->mounts[i].container_path);
	/* a private /run holds the init, also on a read-only local.rootfs */
	av_add(a, "--perms");
	av_add(a, "0755");
	av_add(a, "--tmpfs");
	av_add(a, "/run");
	av_add(a, "--ro-bind");
	av_add(a, local_init_helper);
	av_add(a, LOCAL_INIT_PATH);
	av_add(a, "--as-pid-1");
	av_add(a, "--info-fd");
	av_add(a, "3");
	av_add(a, "--");
	av_add(a, LOCAL_INIT_PATH);
	av_add(a, av_fmt(a, "--uid=%u", (unsigned)uid));
	av_add(a, av_fmt(a, "--gid=%u", (unsigned)gid));
}

/* Read until EOF or the deadline into b; returns 0 on EOF, -1 on timeout/error. */
static int local_read_until_eof(int fd, struct buf *b, uint64_t deadline_ms)
{
	char chunk[1024];

	for (;;) {
		uint64_t now = util_now_ms();
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (now >= deadline_ms) {
			errno = ETIMEDOUT;
			return -1;
		}
		int r = poll(&p, 1, (int)(deadline_ms - now));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			errno = r == 0 ? ETIMEDOUT : errno;
			return -1;
		}
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return 0;
		if (buf_add(b, chunk, (size_t)n))
			return -1;
	}
}

static void local_log_tail(const char *scope, const char *logpath)
{
	struct buf b = BUF_INIT(64 * 1024);
	const char *s, *line;

	if (util_read_file(logpath, &b) || !b.len) {
		buf_free(&b);
		return;
	}
	s = buf_str(&b);
	line = s + b.len;
	for (int lines = 0; line > s && lines < 4; lines++) {
		line--;
		while (line > s && line[-1] != '\n')
			line--;
	}
	log_err(scope, "bubblewrap said: %s", line);
	buf_free(&b);
}

static int local_save(struct local_box *lb)
{
	json_t *o = json_pack("{s:i,s:I,s:I,s:i,s:i,s:i,s:I}", "init_pid", (int)lb->init_pid, "init_start",
		(json_int_t)lb->init_start, "mntns", (json_int_t)lb->mntns, "uid", (int)lb->uid, "gid", (int)lb->gid,
		"pasta_pid", (int)lb->net.pid, "pasta_start", (json_int_t)lb->net.start);
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	int r = -1;

	if (text && !buf_addf(&path, "%s/local.json", lb->thread_dir))
		r = util_write_atomic(path.ptr, text, strlen(text), 0600);
	free(text);
	json_decref(o);
	buf_free(&path);
	return r;
}

/* local_net_up's started(): pasta runs, record it. */
static void local_record(void *arg)
{
	if (local_save(arg))
		log_warn("local", "cannot record pasta: %s", strerror(errno));
}

static unsigned long long local_ns_ino(pid_t pid, const char *ns)
{
	char path[64];
	struct stat st;

	if (str_fmt(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, ns) || stat(path, &st))
		return 0;
	return (unsigned long long)st.st_ino;
}

static void local_box_free(struct local_box *lb)
{
	if (!lb)
		return;
	free(lb->thread_dir);
	free(lb);
}

/* Kill what a failed create left: the outer bwrap takes the init with it. */
static void local_abort_spawn(pid_t bwrap, pid_t init)
{
	if (init > 0)
		kill(init, SIGKILL);
	if (bwrap > 0) {
		kill(bwrap, SIGKILL);
		while (waitpid(bwrap, NULL, 0) < 0 && errno == EINTR)
			;
	}
}

/* Start argv[0] with the given fds as 0..4 (-1: /dev/null), in a new
 * session (a Ctrl-C of the daemon's terminal must not reach sandboxes), with
 * every other fd closed and no signal blocked.  posix_spawn uses vfork-like
 * cloning: no copy of a daemon with many threads and mappings. */
pid_t local_spawn(char *const argv[], char *const envp[], const int fds[5])
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	int moved[5] = { -1, -1, -1, -1, -1 }, src[5];
	sigset_t none;
	pid_t pid = -1;
	int r;

	/* a source fd among 0..4 could be overwritten by an earlier dup2 */
	for (int i = 0; i < 5; i++) {
		src[i] = fds[i];
		if (fds[i] >= 0 && fds[i] < 5 && fds[i] != i) {
			moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
			if (moved[i] < 0)
				return -1;
			src[i] = moved[i];
		}
	}
	if (posix_spawn_file_actions_init(&fa))
		goto out_moved;
	if (posix_spawnattr_init(&attr)) {
		posix_spawn_file_actions_destroy(&fa);
		goto out_moved;
	}
	sigemptyset(&none);
	r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	r |= posix_spawnattr_setsigmask(&attr, &none);
	{
		sigset_t def;
		sigemptyset(&def);
		sigaddset(&def, SIGPIPE);
		sigaddset(&def, SIGUSR2);
		sigaddset(&def, SIGHUP);
		sigaddset(&def, SIGTERM);
		sigaddset(&def, SIGINT);
		r |= posix_spawnattr_setsigdefault(&attr, &def);
	}
	for (int i = 0; i < 5 && !r; i++) {
		if (src[i] >= 0)
			r |= posix_spawn_file_actions_adddup2(&fa, src[i], i);
		else if (i <= 2)
			r |= posix_spawn_file_actions_addopen(&fa, i, "/dev/null", O_RDWR, 0);
	}
	r |= posix_spawn_file_actions_addclosefrom_np(&fa, 5);
	if (!r && posix_spawn(&pid, argv[0], &fa, &attr, argv, envp))
		pid = -1;
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
out_moved:
	for (int i = 0; i < 5; i++)
		if (moved[i] >= 0)
			close(moved[i]);
	return pid;
}

static enum sbx_err local_create(const struct sbx_spec *s, struct sbx_box **out)
{
	struct argv_builder *a = calloc(1, sizeof(*a));
	struct local_box *lb = calloc(1, sizeof(*lb));
	struct buf info = BUF_INIT(64 * 1024), logpath = BUF_INIT(BUF_CAP_PATH);
	int info_p[2] = { -1, -1 }, ready_p[2] = { -1, -1 }, log_fd = -1;
	enum sbx_err result = SBX_ERR_IO;
	pid_t bwrap = -1, init = 0;
	json_t *j = NULL;
	uint64_t deadline = util_now_ms() + (uint64_t)s->cfg->ready_timeout * 1000;
	char scope[NAMES_SCOPE_MAX], ch;
	bool recorded = false;
	uid_t uid;
	gid_t gid;
	int err;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	if (!a || !lb) {
		result = SBX_ERR_NOMEM;
		goto out;
	}
	err = uidpool_assign(local_uids, s->cfg, s->user, s->dirs.thread_dir, &uid, &gid);
	if (!err && layout_make_data_dirs(s->dirs.thread_dir, uid, gid))
		err = errno == ENOSPC ? ENOSPC : EIO;
	if (err) {
		log_err(scope, "local: cannot prepare the sandbox's files: %s", strerror(err));
		result = sbx_err_from_errno(err);
		goto out;
	}
	local_build_argv(a, s, uid, gid);
	if (a->overflow) {
		log_err(scope, "local: bubblewrap command line too long (too many mounts?)");
		result = SBX_ERR_INVAL;
		goto out;
	}
	if (buf_addf(&logpath, "%s/sandbox.log", s->dirs.thread_dir))
		goto out;
	log_fd = open(logpath.ptr, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	/* ready_p is a socket pair: the init says "ready" on it, then waits
	 * for the daemon's "go", sent once the sandbox is recorded; an init
	 * whose daemon died before that sees end of file and exits, so no
	 * sandbox ever runs unrecorded */
	if (log_fd < 0 || pipe2(info_p, O_CLOEXEC) || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ready_p)) {
		log_err(scope, "local: cannot prepare the sandbox: %s", strerror(errno));
		goto out;
	}
	{
		static char *const empty_env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
		const int fds[5] = { -1, log_fd, log_fd, info_p[1], ready_p[1] };
		bwrap = local_spawn((char *const *)a->v, empty_env, fds);
	}
	if (bwrap < 0) {
		log_err(scope, "local: fork: %s", strerror(errno));
		result = errno == ENOMEM || errno == EAGAIN ? SBX_ERR_NOMEM : SBX_ERR_IO;
		goto out;
	}
	close(info_p[1]);
	close(ready_p[1]);
	info_p[1] = ready_p[1] = -1;
	if (local_read_until_eof(info_p[0], &info, deadline) ||
	    !(j = json_loadb(info.ptr ? info.ptr : "", info.len, 0, NULL)) ||
	    (init = (pid_t)json_integer_value(json_object_get(j, "child-pid"))) <= 0) {
		result = errno == ETIMEDOUT ? SBX_ERR_TIMEOUT : SBX_ERR_IO;
		log_err(scope, "local: bubblewrap did not start the sandbox");
		local_log_tail(scope, logpath.ptr);
		goto out;
	}
	sbx_box_init(&lb->base, &provider_local);
	lb->base.uid = uid;
	lb->base.gid = gid;
	lb->init_pid = init;
	lb->init_start = util_proc_starttime(init);
	lb->mntns = local_ns_ino(init, "mnt");
	lb->bwrap_pid = bwrap;
	lb->uid = uid;
	lb->gid = gid;
	snprintf(lb->token, sizeof(lb->token), "%s", s->token);
	lb->thread_dir = strdup(s->dirs.thread_dir);
	snprintf(lb->base.remote_id, sizeof(lb->base.remote_id), "pid:%d", (int)init);
	/* record the init as soon as it is known, before it is ready and before
	 * its network is set up (and pasta as soon as it runs): a daemon killed
	 * meanwhile leaves a record the next start cleans up */
	if (!lb->thread_dir || !lb->init_start || local_save(lb)) {
		log_err(scope, "local: cannot record the sandbox: %s", strerror(errno));
		goto out;
	}
	recorded = true;
	for (;;) {
		struct pollfd p = { .fd = ready_p[0], .events = POLLIN };
		uint64_t now = util_now_ms();
		int r = now < deadline ? poll(&p, 1, (int)(deadline - now)) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 1 && read(ready_p[0], &ch, 1) == 1 && write(ready_p[0], "g", 1) == 1)
			break;
		result = r == 0 ? SBX_ERR_TIMEOUT : SBX_ERR_IO;
		log_err(scope, "local: sandbox not ready %s", r == 0 ? "before ready_timeout" : "(init exited)");
		local_log_tail(scope, logpath.ptr);
		goto out;
	}
	result = local_net_up(scope, init, s, local_conf(s->cfg)->rootfs, log_fd, deadline, &lb->net, local_record,
		lb);
	if (result)
		goto out;
	result = SBX_ERR_IO;
	if (local_save(lb)) {
		log_err(scope, "local: cannot record the sandbox: %s", strerror(errno));
		goto out;
	}
	*out = &lb->base;
	lb = NULL;
	bwrap = -1;
	init = 0;
	result = SBX_OK;
out:
	if (lb)
		local_net_down(&lb->net);
	if (bwrap > 0)
		local_abort_spawn(bwrap, init);
	if (lb && recorded) { /* nothing of it runs any more */
		buf_reset(&logpath);
		if (!buf_addf(&logpath, "%s/local.json", lb->thread_dir))
			unlink(logpath.ptr);
	}
	for (int i = 0; i < 2; i++) {
		if (info_p[i] >= 0)
			close(info_p[i]);
		if (ready_p[i] >= 0)
			close(ready_p[i]);
	}
	if (log_fd >= 0)
		close(log_fd);
	if (a) {
		av_free(a);
		free(a);
	}
	json_decref(j);
	buf_free(&info);
	buf_free(&logpath);
	local_box_free(lb);
	return result;
}

/* The sandbox's init (and so its namespaces) is still there. */
static bool local_alive(struct local_box *lb)
{
	if (lb->bwrap_pid > 0 && waitpid(lb->bwrap_pid, NULL, WNOHANG) == lb->bwrap_pid)
		lb->bwrap_pid = 0; /* reaped: the sandbox has ended */
	return lb->init_pid > 0 && util_proc_starttime(lb->init_pid) == lb->init_start &&
	       local_ns_ino(lb->init_pid, "mnt") == lb->mntns;
}

/* Healthy: alive, and an open sandbox still has its pasta (no network
 * otherwise: recreated on reclaim). */
static enum sbx_err local_health(struct sbx_box *b)
{
	struct local_box *lb = local_box(b);

	return local_alive(lb) && local_net_alive(&lb->net) ? SBX_OK : SBX_ERR_GONE;
}

static void local_box_release(struct sbx_box *b)
{
	local_box_free(local_box(b));
}

static enum sbx_err local_destroy(struct sbx_box *b)
{
	struct local_box *lb = local_box(b);
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	uint64_t deadline = util_now_ms() + 10000;

	if (local_alive(lb))
		kill(lb->init_pid, SIGKILL);
	while (lb->init_pid > 0 && util_proc_starttime(lb->init_pid) == lb->init_start && util_now_ms() < deadline)
		usleep(2000);
	if (lb->bwrap_pid > 0)
		while (waitpid(lb->bwrap_pid, NULL, 0) < 0 && errno == EINTR)
			;
	local_net_down(&lb->net);
	if (!buf_addf(&path, "%s/local.json", lb->thread_dir))
		unlink(path.ptr);
	if (local_cgroup_root[0]) {
		buf_reset(&path);
		if (!buf_addf(&path, "%s/%s", local_cgroup_root, lb->token))
			util_rm_rf(path.ptr); /* only empty job cgroups remain: rmdir them */
	}
	buf_free(&path);
	lb->init_pid = 0;
	return SBX_OK;
}

static enum sbx_err local_adopt(const struct sbx_spec *s, struct sbx_box **out)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct local_box *lb = NULL;
	json_t *j = NULL;
	enum sbx_err result = SBX_ERR_GONE;

	if (buf_addf(&path, "%s/local.json", s->dirs.thread_dir) || !(j = json_read_file(path.ptr)))
		goto out;
	lb = calloc(1, sizeof(*lb));
	if (!j || !lb || !(lb->thread_dir = strdup(s->dirs.thread_dir)))
		goto out;
	sbx_box_init(&lb->base, &provider_local);
	lb->uid = (uid_t)json_integer_value(json_object_get(j, "uid"));
	lb->gid = (gid_t)json_integer_value(json_object_get(j, "gid"));
	lb->base.uid = lb->uid;
	lb->base.gid = lb->gid;
	lb->init_pid = (pid_t)json_integer_value(json_object_get(j, "init_pid"));
	lb->init_start = (unsigned long long)json_integer_value(json_object_get(j, "init_start"));
	lb->mntns = (unsigned long long)json_integer_value(json_object_get(j, "mntns"));
	lb->net.pid = (pid_t)json_integer_value(json_object_get(j, "pasta_pid"));
	lb->net.start = (uint64_t)json_integer_value(json_object_get(j, "pasta_start"));
	snprintf(lb->token, sizeof(lb->token), "%s", s->token);
	snprintf(lb->base.remote_id, sizeof(lb->base.remote_id), "pid:%d", (int)lb->init_pid);
	if (!local_alive(lb))
		lb->init_pid = 0; /* stale: the pool's health check recreates it on reclaim */
	*out = &lb->base;
	lb = NULL;
	result = SBX_OK;
out:
	json_decref(j);
	buf_free(&path);
	local_box_free(lb);
	return result;
}

/* A job's supervisor (sbxfs-exec), watched through a pidfd. */
struct local_exec {
	struct sbx_exec base; /* first: see local_exec() */
	struct local_box *lb; /* referenced */
	pid_t pid;
	bool child; /* ours to reap (not adopted after a restart) */
	char *job_dir;
};

static struct local_exec *local_exec(struct sbx_exec *x)
{
	if (!x || x->prov != &provider_local)
		abort(); /* a handle given to the wrong provider is a programming error */
	return (struct local_exec *)x;
}

static struct local_exec *local_exec_new(struct local_box *lb, const char *job_dir, pid_t pid, bool child)
{
	struct local_exec *le = calloc(1, sizeof(*le));

	if (!le || !(le->job_dir = strdup(job_dir)))
		goto fail;
	le->base.fd = pidfd_open(pid, 0);
	if (le->base.fd < 0)
		goto fail;
	le->base.prov = &provider_local;
	le->lb = lb;
	sbx_box_get(&lb->base);
	le->pid = pid;
	le->child = child;
	return le;
fail:
	if (le)
		free(le->job_dir);
	free(le);
	return NULL;
}

/* The supervisor's pid and start time, for reattaching after a restart. */
static void local_exec_record(const char *job_dir, pid_t pid)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	json_t *o = json_pack("{s:i,s:I}", "pid", (int)pid, "start", (json_int_t)util_proc_starttime(pid));
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;

	if (!text || buf_addf(&path, "%s/supervisor", job_dir) ||
	    util_write_atomic(path.ptr, text, strlen(text), 0600))
		log_warn("local", "%s: cannot record the job supervisor: %s", job_dir, strerror(errno));
	free(text);
	json_decref(o);
	buf_free(&path);
}

/* Read a job's command (bytes) and environment (NUL-separated) files. */
static int local_job_inputs(const char *job_dir, struct buf *cmd, struct buf *env)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	int r = -1;

	if (!buf_addf(&path, "%s/cmd", job_dir) && !util_read_file(path.ptr, cmd)) {
		buf_reset(&path);
		if (!buf_addf(&path, "%s/environ", job_dir) && !util_read_file(path.ptr, env))
			r = 0;
	}
	buf_free(&path);
	return r;
}

static enum sbx_err local_exec_start(struct sbx_box *b, const struct sbx_exec_spec *e, struct sbx_exec **out)
{
	struct local_box *lb = local_box(b);
	struct argv_builder *a = calloc(1, sizeof(*a));
	struct buf cmd = BUF_INIT(8 * 1024 * 1024), envtext = BUF_INIT(1024 * 1024);
	char **envv = NULL;
	enum sbx_err result = SBX_ERR_IO;
	struct local_exec *le;
	int ready[2] = { -1, -1 };
	pid_t pid = -1;
	char ch;

	if (!a)
		return SBX_ERR_NOMEM;
	if (!local_alive(lb)) {
		result = SBX_ERR_GONE;
		goto out;
	}
	if (local_job_inputs(e->job_dir, &cmd, &envtext) || !cmd.len) {
		log_err("local", "%s: cannot read the job's command: %s", e->job_dir, strerror(errno));
		goto out;
	}
	{
		size_t n = 1;
		for (size_t i = 0; i < envtext.len; i++)
			n += envtext.ptr[i] == '\0';
		envv = calloc(n + 1, sizeof(*envv));
		if (!envv) {
			result = SBX_ERR_NOMEM;
			goto out;
		}
		n = 0;
		for (size_t i = 0; i < envtext.len; i += strlen(envtext.ptr + i) + 1)
			if (envtext.ptr[i])
				envv[n++] = envtext.ptr + i;
	}
	av_add(a, local_exec_helper);
	av_add(a, av_fmt(a, "--pid=%d", (int)lb->init_pid));
	av_add(a, av_fmt(a, "--start=%llu", lb->init_start));
	av_add(a, av_fmt(a, "--uid=%u", (unsigned)lb->uid));
	av_add(a, av_fmt(a, "--gid=%u", (unsigned)lb->gid));
	av_add(a, av_fmt(a, "--timeout=%ld", e->timeout));
	av_add(a, av_fmt(a, "--job-dir=%s", e->job_dir));
	if (local_cgroup_root[0])
		av_add(a, av_fmt(a, "--cgroup=%s/%s/%s", local_cgroup_root, lb->token, e->job_name));
	av_add(a, "--");
	av_add(a, buf_str(&cmd));
	if (a->overflow) {
		result = SBX_ERR_INVAL;
		goto out;
	}
	if (pipe2(ready, O_CLOEXEC))
		goto out;
	{
		const int fds[5] = { -1, -1, -1, ready[1], -1 };
		pid = local_spawn((char *const *)a->v, envv, fds);
	}
	if (pid < 0) {
		result = errno == ENOMEM || errno == EAGAIN ? SBX_ERR_NOMEM : SBX_ERR_IO;
		goto out;
	}
	close(ready[1]);
	ready[1] = -1;
	/* The supervisor answers once the job's process group and cgroup exist
	 * (so a kill right after cmd reaches it), or closes the pipe on failure;
	 * then the result file says why. */
	for (;;) {
		struct pollfd p = { .fd = ready[0], .events = POLLIN };
		int r = poll(&p, 1, 10000);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 1 && read(ready[0], &ch, 1) == 1)
			break;
		log_warn("local", "job supervisor %d did not report the job started", (int)pid);
		break;
	}
	local_exec_record(e->job_dir, pid);
	le = local_exec_new(lb, e->job_dir, pid, true);
	if (!le) {
		/* cannot watch it: stop it, so it is not left running unseen */
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		log_err("local", "%s: cannot watch the job supervisor: %s", e->job_dir, strerror(errno));
		result = SBX_ERR_NOMEM;
		goto out;
	}
	*out = &le->base;
	result = SBX_OK;
out:
	for (int i = 0; i < 2; i++)
		if (ready[i] >= 0)
			close(ready[i]);
	free(envv);
	buf_free(&cmd);
	buf_free(&envtext);
	av_free(a);
	free(a);
	return result;
}

static enum sbx_err local_exec_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out)
{
	struct local_box *lb = local_box(b);
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct local_exec *le = NULL;
	json_t *sup = NULL;
	pid_t pid;

	if (!buf_addf(&path, "%s/supervisor", job_dir))
		sup = json_read_file(path.ptr);
	buf_free(&path);
	if (!sup)
		return SBX_ERR_GONE;
	pid = (pid_t)json_integer_value(json_object_get(sup, "pid"));
	if (pid > 0 && util_proc_starttime(pid) == (uint64_t)json_integer_value(json_object_get(sup, "start")))
		le = local_exec_new(lb, job_dir, pid, false);
	json_decref(sup);
	if (!le)
		return SBX_ERR_GONE;
	*out = &le->base;
	return SBX_OK;
}

/* Signal every process of a job: all members of its cgroup (so processes that
 * left its process group are reached too), and its process group.  SIGKILL
 * uses cgroup.kill, which also catches processes forked meanwhile. */
static enum sbx_err local_signal_job(const char *job_dir, int sig)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH), text = BUF_INIT(4096), cg = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err result = SBX_ERR_GONE;
	long pgid = 0;

	if (!buf_addf(&path, "%s/pgid", job_dir) && !util_read_file(path.ptr, &text))
		pgid = strtol(buf_str(&text), NULL, 10);
	buf_reset(&path);
	if (!buf_addf(&path, "%s/cgroup", job_dir))
		util_read_file(path.ptr, &cg);
	if (cg.len) {
		struct buf f = BUF_INIT(BUF_CAP_PATH), procs = BUF_INIT(1024 * 1024);
		if (sig == SIGKILL) {
			int fd = buf_addf(&f, "%s/cgroup.kill", buf_str(&cg)) ? -1 : open(f.ptr, O_WRONLY | O_CLOEXEC);
			if (fd >= 0) {
				if (write(fd, "1", 1) == 1)
					result = SBX_OK;
				close(fd);
			}
		} else if (!buf_addf(&f, "%s/cgroup.procs", buf_str(&cg)) && !util_read_file(f.ptr, &procs)) {
			for (char *p = procs.ptr; p && *p;) {
				long pid = strtol(p, &p, 10);
				if (pid > 1 && kill((pid_t)pid, sig) == 0)
					result = SBX_OK;
				while (*p == '\n')
					p++;
			}
		}
		buf_free(&f);
		buf_free(&procs);
	}
	if (pgid > 1 && kill(-(pid_t)pgid, sig) == 0)
		result = SBX_OK;
	buf_free(&path);
	buf_free(&text);
	buf_free(&cg);
	return result;
}

static enum sbx_err local_exec_signal(struct sbx_exec *x, int sig)
{
	return local_signal_job(local_exec(x)->job_dir, sig);
}

/* The supervisor has exited: reap it; a supervisor that died without a
 * word (killed with the sandbox while the daemon was down, or by hand)
 * leaves no result, so record that it was lost. */
static void local_exec_finish(struct sbx_exec *x)
{
	struct local_exec *le = local_exec(x);
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	char text[256];

	if (le->child)
		while (waitpid(le->pid, NULL, 0) < 0 && errno == EINTR)
			;
	le->child = false;
	if (!buf_addf(&path, "%s/result", le->job_dir) && access(path.ptr, F_OK) && errno == ENOENT &&
	    !str_fmt(text, sizeof(text),
		    "{\"state\": \"lost\", \"exit\": 255, \"signal\": 0, \"ended_at\": %.3f, \"error\": \"the job's supervisor ended without recording a result\"}",
		    util_wall_now()) &&
	    util_write_atomic(path.ptr, text, strlen(text), 0600))
		log_warn("local", "%s: cannot record the lost result: %s", le->job_dir, strerror(errno));
	buf_free(&path);
}

static void local_exec_free(struct sbx_exec *x)
{
	struct local_exec *le = local_exec(x);

	if (le->child) /* still running at exit: it goes on and records its result */
		log_debug("local", "%s: supervisor %d left running", le->job_dir, (int)le->pid);
	close(le->base.fd);
	sbx_box_put(&le->lb->base);
	free(le->job_dir);
	free(le);
}

static void local_exec_cleanup(struct sbx_box *b, const char *job_dir, const char *job_name)
{
	struct local_box *lb = local_box(b);
	struct buf path = BUF_INIT(BUF_CAP_PATH);

	(void)job_dir;
	if (local_cgroup_root[0] && !buf_addf(&path, "%s/%s/%s", local_cgroup_root, lb->token, job_name) &&
	    rmdir(path.ptr) && errno != ENOENT)
		log_warn("local", "cannot remove the cgroup %s: %s", path.ptr, strerror(errno));
	buf_free(&path);
}

static void local_box_status(struct sbx_box *b, struct json_t *out)
{
	struct local_box *lb = local_box(b);

	if (lb->init_pid > 0)
		json_object_set_new((json_t *)out, "init_pid", json_integer(lb->init_pid));
	if (lb->net.pid > 0)
		json_object_set_new((json_t *)out, "pasta_pid", json_integer(lb->net.pid));
}

#define LOCAL_WS_SUFFIX "/user-data/workspace" /* how a thread's workspace ends (common/layout) */

/* Discovery at start: a bubblewrap of this state_dir that no local.json
 * names is a create a kill -9 cut short before it was recorded (bubblewrap's
 * sandbox child then waits forever for its dead parent's signal).  Nothing
 * of it can be adopted: end it.  Recorded sandboxes are the pool's scan's. */
static enum sbx_err local_discover(const struct sbx_config *cfg, const char *state_id,
	void (*found)(const char *user, const char *thread, void *arg), void *arg)
{
	struct buf needle = BUF_INIT(BUF_CAP_PATH), cmd = BUF_INIT(256 * 1024), path = BUF_INIT(BUF_CAP_PATH);
	DIR *proc = opendir("/proc");
	struct dirent *d;

	(void)state_id;
	(void)found;
	(void)arg;
	if (!proc || buf_addf(&needle, "%s/users/", cfg->state_dir)) {
		if (proc)
			closedir(proc);
		buf_free(&needle);
		return SBX_ERR_IO;
	}
	while ((d = readdir(proc))) {
		pid_t pid = (pid_t)strtol(d->d_name, NULL, 10);
		const char *ws = NULL;
		uint64_t start;

		if (pid <= 1 || getpid() == pid)
			continue;
		buf_reset(&path);
		buf_reset(&cmd);
		if (buf_addf(&path, "/proc/%d/cmdline", (int)pid) || util_read_file(path.ptr, &cmd) || !cmd.len ||
		    strcmp(cmd.ptr, local_bwrap))
			continue;
		/* the argument after "--bind" that ends in /user-data/workspace */
		for (size_t i = 0; i < cmd.len; i += strlen(cmd.ptr + i) + 1) {
			const char *a = cmd.ptr + i;
			size_t n = strlen(a);
			if (!strncmp(a, needle.ptr, needle.len) && n > sizeof(LOCAL_WS_SUFFIX) &&
			    !strcmp(a + n - (sizeof(LOCAL_WS_SUFFIX) - 1), LOCAL_WS_SUFFIX)) {
				ws = a;
				break;
			}
		}
		if (!ws)
			continue;
		start = util_proc_starttime(pid);
		buf_reset(&path);
		if (buf_add(&path, ws, strlen(ws) - (sizeof(LOCAL_WS_SUFFIX) - 1)) || buf_adds(&path, "/local.json") ||
		    !access(path.ptr, F_OK))
			continue; /* recorded: the scan adopts or destroys it */
		if (start && util_proc_starttime(pid) == start) {
			log_warn("local", "ending a sandbox a killed daemon left unrecorded (pid %d, %s)", (int)pid, ws);
			kill(pid, SIGKILL);
		}
	}
	closedir(proc);
	buf_free(&needle);
	buf_free(&cmd);
	buf_free(&path);
	return SBX_OK;
}

/* The network capability: the daemon serves the approval proxy inside the
 * sandbox's own network namespace. */
static int local_netns_fd(struct sbx_box *b)
{
	struct local_box *lb = local_box(b);

	if (!local_alive(lb))
		return -1;
	return local_net_nsfd(lb->init_pid);
}

static const struct sbx_net_ops local_net_ops = {
	.netns_fd = local_netns_fd,
	.enforced_by = NULL,
};

static const struct sbx_provider_ops local_ops = {
	.box_status = local_box_status,
	.config_key = local_config_key,
	.config_show = local_config_show,
	.config_free = local_config_free,
	.init = local_init,
	.discover = local_discover,
	.create = local_create,
	.health = local_health,
	.destroy = local_destroy,
	.box_free = local_box_release,
	.adopt = local_adopt,
	.exec_start = local_exec_start,
	.exec_reattach = local_exec_reattach,
	.exec_signal = local_exec_signal,
	.exec_finish = local_exec_finish,
	.exec_free = local_exec_free,
	.exec_cleanup = local_exec_cleanup,
	.net = &local_net_ops,
};

static const char *const local_aliases[] = { "deerflow.sandbox.local:LocalSandboxProvider", NULL };
static const char *const local_keys[] = { "local", NULL };

const struct sbx_provider provider_local = {
	.name = "local",
	.aliases = local_aliases,
	.config_keys = local_keys,
	.caps = SBX_CAP_EXEC | SBX_CAP_SIGNALS,
	.ops = &local_ops,
};
