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
 * the host.  sbxfs-init (helpers/local_init.c, static, bind-mounted read-only at
 * /run/sbxfs-init) drops to the sandbox uid, clears every capability and sets
 * no_new_privs before it reports "ready" on fd 4; then it reaps orphans.
 *
 * The init pid (and its start time, against pid reuse) is kept in
 * thread_dir/local.json so a restarted daemon adopts the sandbox.  Destroy
 * sends SIGKILL to the init: as pid 1 of its namespace its death ends every
 * process in the sandbox (a SIGTERM from outside would be ignored).
 *
 * Jobs run through the sbxfs-exec supervisor (helpers/local_exec.c), which joins
 * the init's namespaces: their exec handles are local_jobs.c's.
 *
 * Crash safety: the sandbox's cgroups exist before bubblewrap starts, and
 * bubblewrap is started inside them; so a kill -9 of the daemon at any
 * moment of a create leaves nothing the next start cannot end (the pool's
 * "creating" record names the scope, the cgroup holds every process).
 *
 * Walls around a sandbox, each in its own module: an unprivileged uid
 * (sbxfs-init, sbxfs-exec), namespaces (bubblewrap), cgroups with the
 * limits of resources: (cgroup.c), a seccomp filter (filter.c) and a
 * curated read-only /etc (local_etc.c).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/json.h"

#include "../common/buf.h"
#include "../common/idrange.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/names.h"
#include "../common/util.h"
#include "cgroup.h"
#include "filter.h"
#include "local_etc.h"
#include "provider.h"
#include "provider_int.h"
#include "local.h"
#include "uidpool.h"

#define LOCAL_FILTER_FD 5 /* bwrap --seccomp; 4 for sbxfs-exec */


/* The `local:` section of mount.conf (cfg->prov). */
struct local_conf {
	char *rootfs;     /* NULL: the host's /usr and the curated /etc */
	uid_t uid_base;   /* sandbox uids when users: does not map the user */
	unsigned uid_count;
};

/* 0x70000000: in no range that useradd (subordinate ids from 100000 up),
 * systemd (dynamic users, containers up to 0x6fffffff) or NSS accounts hand
 * out; checked against the host at start anyway (local_init). */
static const struct local_conf local_defaults = { .uid_base = 1879048192, .uid_count = 60000 };

static const struct local_conf *local_conf(const struct sbx_config *cfg)
{
	return cfg->prov ? cfg->prov : &local_defaults;
}

const char *local_rootfs(const struct sbx_config *cfg)
{
	return local_conf(cfg)->rootfs;
}

static struct uidpool *local_uids; /* made by local_init for the first configuration's range */
static uid_t local_uids_base;
static unsigned local_uids_count;

static char local_bwrap[PATH_MAX] = "/usr/bin/bwrap";
char local_exec_helper[PATH_MAX];
static char local_init_helper[PATH_MAX];
#define LOCAL_INIT_PATH "/run/sbxfs-init" /* where the sandbox sees its init */

static struct buf local_filter = BUF_INIT(1 << 20); /* the seccomp BPF program, built at init */
/* The passwd and group of every spare until its claim (state_dir/spare-identity/etc): written
 * once at init and never replaced, because unlinking or renaming over a file detaches what is
 * mounted on it in every namespace, and a claim mounts the thread's files on top of these. */
static char local_spare_identity[PATH_MAX];

struct local_box *local_box(struct sbx_box *b)
{
	if (!b || b->prov != &provider_local)
		abort(); /* a box handed to the wrong provider is a programming error */
	return (struct local_box *)b;
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
		json_pack("{s:o,s:I,s:i}", "rootfs", lc->rootfs ? json_string(lc->rootfs) : json_null(), "uid_base",
			(json_int_t)lc->uid_base, "uid_count", (int)lc->uid_count));
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

static int local_uids_init(const struct sbx_config *cfg, const struct local_conf *lc, char *err, size_t errlen)
{
	if (local_uids && (lc->uid_base != local_uids_base || lc->uid_count != local_uids_count))
		log_warn("config", "local.uid_base/uid_count: a new range takes effect at the next start");
	if (local_uids)
		return 0;
	local_uids = uidpool_new(lc->uid_base, lc->uid_count);
	if (!local_uids) {
		snprintf(err, errlen, "local provider: out of memory");
		return -1;
	}
	local_uids_base = lc->uid_base;
	local_uids_count = lc->uid_count;
	uidpool_scan(local_uids, cfg->state_dir);
	return 0;
}

/* The helpers: next to sbxfs in a built tree, PREFIX/libexec/sbxfs/ when
 * installed (bindir/../libexec/sbxfs). */
static enum sbx_err local_find_helpers(char *exec, char *init, size_t len, char *err, size_t errlen)
{
	char self[PATH_MAX], *slash;
	ssize_t n;

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0) {
		snprintf(err, errlen, "local provider: cannot find own executable: %s", strerror(errno));
		return SBX_ERR_IO;
	}
	self[n] = '\0';
	slash = strrchr(self, '/');
	*slash = '\0';
	if (local_find_helper(self, "sbxfs-exec", exec, len) || local_find_helper(self, "sbxfs-init", init, len)) {
		snprintf(err, errlen, "local provider: sbxfs-exec or sbxfs-init not found next to %s or in %s/../libexec/sbxfs",
			self, self);
		return SBX_ERR_INVAL;
	}
	return SBX_OK;
}

/* Everything init checks that changes nothing: --check-config and .health
 * run it while another thread may be creating sandboxes, so it writes no
 * static state (the helpers are found into buffers of its own). */
static enum sbx_err local_preflight(const struct sbx_config *cfg, char *err, size_t errlen)
{
	const struct local_conf *lc = local_conf(cfg);
	char exec[PATH_MAX], init[PATH_MAX];
	struct buf filter = BUF_INIT(1 << 20);
	enum sbx_err e;

	if (access(local_bwrap, X_OK)) {
		snprintf(err, errlen, "local provider: %s not found (install bubblewrap)", local_bwrap);
		return SBX_ERR_INVAL;
	}
	if (lc->rootfs && access(lc->rootfs, X_OK)) {
		snprintf(err, errlen, "local.rootfs: %s: %s", lc->rootfs, strerror(errno));
		return SBX_ERR_INVAL;
	}
	e = local_find_helpers(exec, init, sizeof(exec), err, errlen);
	if (e)
		return e;
	/* the uids of sandboxes must be nobody else's (users: maps to
	 * accounts on purpose, and then the range is not used) */
	if (!cfg->n_users && !cfg->users_passwd &&
	    idrange_conflict(lc->uid_base, lc->uid_count, "/etc/subuid", "/etc/subgid", exec, sizeof(exec))) {
		snprintf(err, errlen, "config error: %s", exec);
		return SBX_ERR_INVAL;
	}
	/* the seccomp filter compiles (libseccomp, in memory only) */
	e = filter_build(&filter, err, errlen) ? SBX_ERR_INVAL : SBX_OK;
	buf_free(&filter);
	return e;
}

/* The spares' identity files (local_spare_identity), made when missing. */
static int local_spare_identity_init(const char *state_dir, char *err, size_t errlen)
{
	char path[PATH_MAX];

	if (str_fmt(local_spare_identity, sizeof(local_spare_identity), "%s/spare-identity", state_dir) ||
	    str_fmt(path, sizeof(path), "%s/etc/group", local_spare_identity)) {
		snprintf(err, errlen, "local provider: state_dir path too long");
		return -1;
	}
	if (!access(path, F_OK))
		return 0;
	if (util_mkdir_p(local_spare_identity, 0755) ||
	    etc_write_identity(local_spare_identity, "", LOCAL_SPARE_ID, LOCAL_SPARE_ID, false)) {
		snprintf(err, errlen, "local provider: cannot write %s: %s", local_spare_identity, strerror(errno));
		return -1;
	}
	return 0;
}

static enum sbx_err local_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
	const struct local_conf *lc = local_conf(cfg);
	enum sbx_err e;

	e = local_preflight(cfg, err, errlen);
	if (!e)
		e = local_find_helpers(local_exec_helper, local_init_helper, sizeof(local_exec_helper), err, errlen);
	if (e)
		return e;
	buf_reset(&local_filter);
	if (filter_build(&local_filter, err, errlen))
		return SBX_ERR_INVAL;
	if (etc_build(cfg->state_dir, err, errlen))
		return SBX_ERR_IO;
	if (local_spare_identity_init(cfg->state_dir, err, errlen))
		return SBX_ERR_IO;
	cgroup_init(cfg->state_dir);
	if (local_uids_init(cfg, lc, err, errlen))
		return SBX_ERR_NOMEM;
	local_net_init(local_spawn, cfg->state_dir);
	if (cfg->net_mode == NET_OPEN && !local_net_have_pasta()) {
		snprintf(err, errlen, "network.mode open: pasta not found (install Debian's passt package)");
		return SBX_ERR_INVAL;
	}
	return SBX_OK;
}


void av_add(struct argv_builder *a, const char *s)
{
	if (a->n >= LOCAL_MAX_ARGS - 1) {
		a->overflow = 1;
		return;
	}
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

const char *av_fmt(struct argv_builder *a, const char *fmt, ...)
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

void av_free(struct argv_builder *a)
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

static void av_rootfs(struct argv_builder *a, const struct sbx_spec *s)
{
	const struct sbx_config *cfg = s->cfg;
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
	/* not the host's /etc: the curated copy, and the sandbox's own
	 * passwd and group (local_etc.c) */
	av_add(a, "--ro-bind");
	av_add(a, etc_dir());
	av_add(a, "/etc");
	for (const char *const *b = etc_bound(); *b; b++) {
		av_add(a, "--ro-bind");
		av_add(a, av_fmt(a, "/etc/%s", *b));
		av_add(a, av_fmt(a, "/etc/%s", *b));
	}
	av_add(a, "--ro-bind");
	av_add(a, av_fmt(a, "%s/etc/passwd", s->spare ? local_spare_identity : s->dirs.thread_dir));
	av_add(a, "/etc/passwd");
	av_add(a, "--ro-bind");
	av_add(a, av_fmt(a, "%s/etc/group", s->spare ? local_spare_identity : s->dirs.thread_dir));
	av_add(a, "/etc/group");
}

static void av_bind(struct argv_builder *a, const char *how, const char *src, const char *dst)
{
	av_dirs(a, dst);
	av_add(a, how);
	av_add(a, src);
	av_add(a, dst);
}

/* An empty directory (and its ancestors) for a claim to mount on. */
static void av_mountpoint(struct argv_builder *a, const char *dst)
{
	av_dirs(a, dst);
	av_add(a, "--perms");
	av_add(a, "0755");
	av_add(a, "--dir");
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
	av_rootfs(a, s);
	av_add(a, "--proc");
	av_add(a, "/proc");
	av_add(a, "--dev");
	av_add(a, "/dev");
	av_add(a, "--perms");
	av_add(a, "1777");
	if (cfg->res.tmp_size) {
		av_add(a, "--size");
		av_add(a, av_fmt(a, "%llu", (unsigned long long)cfg->res.tmp_size));
	}
	av_add(a, "--tmpfs");
	av_add(a, "/tmp");
	if (s->spare) { /* empty mount points: a claim attaches the thread's (local_claim.c) */
		av_mountpoint(a, layout_sandbox_path(LAYOUT_WORKSPACE));
		av_mountpoint(a, layout_sandbox_path(LAYOUT_UPLOADS));
		av_mountpoint(a, layout_sandbox_path(LAYOUT_OUTPUTS));
		av_mountpoint(a, cfg->skills_container_path);
	} else {
		av_bind(a, "--bind", s->dirs.workspace, layout_sandbox_path(LAYOUT_WORKSPACE));
		av_bind(a, "--bind", s->dirs.uploads, layout_sandbox_path(LAYOUT_UPLOADS));
		av_bind(a, "--bind", s->dirs.outputs, layout_sandbox_path(LAYOUT_OUTPUTS));
		av_bind(a, "--ro-bind", s->dirs.skills, cfg->skills_container_path);
	}
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
	av_add(a, "--seccomp");
	av_add(a, av_fmt(a, "%d", LOCAL_FILTER_FD));
	av_add(a, "--as-pid-1");
	av_add(a, "--info-fd");
	av_add(a, "3");
	av_add(a, "--");
	av_add(a, LOCAL_INIT_PATH);
	if (s->spare) {
		av_add(a, "--spare");
		return;
	}
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

int local_save(struct local_box *lb)
{
	json_t *o = json_pack("{s:i,s:I,s:I,s:i,s:i,s:i,s:I,s:i,s:s}", "init_pid", (int)lb->init_pid, "init_start",
		(json_int_t)lb->init_start, "mntns", (json_int_t)lb->mntns, "uid", (int)lb->uid, "gid", (int)lb->gid,
		"pasta_pid", (int)lb->net.pasta.pid, "pasta_start", (json_int_t)lb->net.pasta.start, "gw_slot",
		lb->net.slot, "cgroup", lb->token);
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

/* local_net_up's started(): its gateway slot is chosen, or its pasta is
 * about to run: record it. */
static int local_record(void *arg)
{
	return local_save(arg);
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

/* A sealed memfd holding len bytes, positioned at 0, or -1. */
int local_memfd(const char *name, const void *data, size_t len)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	const char *p = data;

	if (fd < 0)
		return -1;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) ||
	    lseek(fd, 0, SEEK_SET)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The seccomp filter for one bubblewrap or sbxfs-exec (each reads it to
 * its end, so each gets a file of its own). */
int local_filter_fd(void)
{
	return local_memfd("sbxfs-filter", local_filter.ptr, local_filter.len);
}

bool local_host_account(const struct sbx_config *cfg, const char *user)
{
	uid_t uid;
	gid_t gid;

	return config_user_lookup(cfg, user, &uid, &gid) == 0;
}

/* The sandbox's uid and its data directories (owned by it). */
enum sbx_err local_prepare_files(const struct sbx_spec *s, const char *scope, uid_t *uid, gid_t *gid)
{
	int err = uidpool_assign(local_uids, s->cfg, s->user, s->dirs.thread_dir, uid, gid);

	if (!err && layout_make_data_dirs(s->dirs.thread_dir, *uid, *gid))
		err = errno == ENOSPC ? ENOSPC : EIO;
	if (!err)
		return SBX_OK;
	log_err(scope, "local: cannot prepare the sandbox's files: %s", strerror(err));
	return sbx_err_from_errno(err);
}

/* bubblewrap's --info-fd: the init's pid, once it has started it. */
static enum sbx_err local_read_init_pid(int fd, uint64_t deadline, pid_t *init)
{
	struct buf info = BUF_INIT(64 * 1024);
	json_t *j = NULL;

	*init = 0;
	if (!local_read_until_eof(fd, &info, deadline) && (j = json_loadb(info.ptr ? info.ptr : "", info.len, 0, NULL)))
		*init = (pid_t)json_integer_value(json_object_get(j, "child-pid"));
	json_decref(j);
	buf_free(&info);
	if (*init > 0)
		return SBX_OK;
	return errno == ETIMEDOUT ? SBX_ERR_TIMEOUT : SBX_ERR_IO;
}

/* The init says "ready" on fd; the daemon answers "go" (the sandbox is
 * recorded by then).  SBX_OK, TIMEOUT past deadline, IO when it exited. */
static enum sbx_err local_wait_ready(int fd, uint64_t deadline, const char *scope)
{
	char ch;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint64_t now = util_now_ms();
		int r = now < deadline ? poll(&p, 1, (int)(deadline - now)) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 1 && read(fd, &ch, 1) == 1 && write(fd, "g", 1) == 1)
			return SBX_OK;
		log_err(scope, "local: sandbox not ready %s", r == 0 ? "before ready_timeout" : "(init exited)");
		return r == 0 ? SBX_ERR_TIMEOUT : SBX_ERR_IO;
	}
}

/* lb describes the sandbox whose init is init (bubblewrap: bwrap). */
static void local_box_fill(struct local_box *lb, const struct sbx_spec *s, uid_t uid, gid_t gid, pid_t bwrap,
	pid_t init)
{
	sbx_box_init(&lb->base, &provider_local);
	lb->base.uid = uid;
	lb->base.gid = gid;
	lb->init_pid = init;
	lb->init_start = util_proc_starttime(init);
	lb->mntns = util_ns_inode(init, "mnt");
	lb->bwrap_pid = bwrap;
	lb->uid = uid;
	lb->gid = gid;
	lb->output_max = s->cfg->res.output;
	snprintf(lb->token, sizeof(lb->token), "%s", s->token);
	lb->thread_dir = strdup(s->dirs.thread_dir);
	snprintf(lb->base.remote_id, sizeof(lb->base.remote_id), "pid:%d", (int)init);
}

static void local_close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

/* Where a create's time goes (a debug line per create; docs/performance.md,
 * "Cold start"): the moment each step ended. */
enum local_step { LS_START, LS_FILES, LS_CGROUP, LS_IDENTITY, LS_SPAWN, LS_INIT, LS_RECORD, LS_READY, LS_NET, LS_N };
static const char *const local_step_names[LS_N] = { "start", "files", "cgroup", "identity", "spawn", "bwrap",
	"record", "ready+rules", "net" };

static void local_steps_log(const char *scope, const uint64_t *t)
{
	char line[512];
	size_t n = 0;

	for (int i = 1; i < LS_N && t[i]; i++) {
		int w = snprintf(line + n, sizeof(line) - n, " %s %.2f", local_step_names[i],
			(double)(t[i] - t[i - 1]) / 1000.0);
		if (w < 0 || (size_t)w >= sizeof(line) - n)
			break;
		n += (size_t)w;
	}
	line[n] = '\0';
	log_debug(scope, "local: create steps (ms):%s", line);
}

static enum sbx_err local_create_now(const struct sbx_spec *s, struct sbx_box **out)
{
	uint64_t steps[LS_N] = { util_now_us() };
#define LOCAL_STEP(k) (steps[k] = util_now_us())
	struct argv_builder *a = calloc(1, sizeof(*a));
	struct local_box *lb = calloc(1, sizeof(*lb));
	struct buf logpath = BUF_INIT(BUF_CAP_PATH);
	int info_p[2] = { -1, -1 }, ready_p[2] = { -1, -1 }, log_fd = -1, filter_fd = -1;
	enum sbx_err result = SBX_ERR_IO;
	pid_t bwrap = -1, init = 0;
	uint64_t deadline = util_now_ms() + (uint64_t)s->cfg->ready_timeout * 1000;
	char scope[NAMES_SCOPE_MAX];
	struct cgroup_join join = { 0 };
	struct local_net_rules rules = { .nsfd = -1 };
	bool made_cgroup = false, recorded = false;
	uid_t uid;
	gid_t gid;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	if (!a || !lb) {
		result = SBX_ERR_NOMEM;
		goto out;
	}
	lb->net.slot = -1;
	if (s->spare) {
		uid = gid = LOCAL_SPARE_ID; /* its identity files until a claim gives it the thread's */
		snprintf(scope, sizeof(scope), "spare/%s", s->token);
		if (util_mkdir_p(s->dirs.thread_dir, 0700)) {
			log_err(scope, "local: cannot make %s: %s", s->dirs.thread_dir, strerror(errno));
			goto out;
		}
	} else if ((result = local_prepare_files(s, scope, &uid, &gid))) {
		goto out;
	}
	LOCAL_STEP(LS_FILES);
	result = SBX_ERR_IO;
	{
		const struct cgroup_limits lim = { s->cfg->res.memory, s->cfg->res.cpus, s->cfg->res.pids };
		made_cgroup = true;
		if (cgroup_sandbox_create(s->token, &lim, &join)) {
			log_err(scope, "local: cannot make the sandbox's cgroups");
			goto out;
		}
	}
	LOCAL_STEP(LS_CGROUP);
	if (!s->spare && !local_conf(s->cfg)->rootfs &&
	    etc_write_identity(s->dirs.thread_dir, s->user, uid, gid, local_host_account(s->cfg, s->user))) {
		log_err(scope, "local: cannot write the sandbox's passwd and group: %s", strerror(errno));
		goto out;
	}
	LOCAL_STEP(LS_IDENTITY);
	local_build_argv(a, s, uid, gid);
	if (a->overflow) {
		log_err(scope, "local: bubblewrap command line too long (too many mounts?)");
		result = SBX_ERR_INVAL;
		goto out;
	}
	if (layout_file(&logpath, s->dirs.thread_dir, "sandbox.log"))
		goto out;
	log_fd = open(logpath.ptr, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	filter_fd = local_filter_fd();
	/* ready_p is a socket pair: the init says "ready" on it, then waits
	 * for the daemon's "go", sent once the sandbox is recorded; an init
	 * whose daemon died before that sees end of file and exits, so no
	 * sandbox ever runs unrecorded */
	if (log_fd < 0 || filter_fd < 0 || pipe2(info_p, O_CLOEXEC) ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ready_p)) {
		log_err(scope, "local: cannot prepare the sandbox: %s", strerror(errno));
		goto out;
	}
	{
		static char *const empty_env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
		const int fds[LOCAL_SPAWN_FDS] = { -1, log_fd, log_fd, info_p[1], ready_p[1], filter_fd };
		/* bubblewrap's first instruction already runs inside the
		 * sandbox's cgroups (local_spawn.c) */
		bwrap = local_spawn_joined((char *const *)a->v, empty_env, fds, &join);
	}
	if (bwrap < 0) {
		log_err(scope, "local: fork: %s", strerror(errno));
		result = errno == ENOMEM || errno == EAGAIN ? SBX_ERR_NOMEM : SBX_ERR_IO;
		goto out;
	}
	LOCAL_STEP(LS_SPAWN);
	local_close_fds((int[]){ info_p[1], ready_p[1] }, 2);
	info_p[1] = ready_p[1] = -1;
	if ((result = local_read_init_pid(info_p[0], deadline, &init))) {
		log_err(scope, "local: bubblewrap did not start the sandbox");
		local_log_tail(scope, logpath.ptr);
		goto out;
	}
	LOCAL_STEP(LS_INIT);
	result = SBX_ERR_IO;
	local_box_fill(lb, s, uid, gid, bwrap, init);
	/* record the init as soon as it is known, before it is ready and before
	 * its network is set up (and pasta as soon as it runs): a daemon killed
	 * meanwhile leaves a record the next start cleans up */
	if (lb->thread_dir && !lb->init_start) {
		/* the init ended as soon as it was named (a rootfs it cannot
		 * start in): bubblewrap's stderr says why */
		log_err(scope, "local: the sandbox's init ended at once");
		local_log_tail(scope, logpath.ptr);
		goto out;
	}
	/* its gateway slot too, so the one record names everything it will have */
	if ((result = local_net_reserve(scope, s, &lb->net)))
		goto out;
	result = SBX_ERR_IO;
	if (!lb->thread_dir || local_save(lb)) {
		log_err(scope, "local: cannot record the sandbox: %s", strerror(errno));
		goto out;
	}
	recorded = true;
	LOCAL_STEP(LS_RECORD);
	/* the namespace exists (bubblewrap made it before it started the
	 * init): its rules go in while the init starts, and then its veth pair
	 * into the gateway; the sandbox is handed out only once they are in
	 * force */
	result = local_net_rules_start(&rules, scope, init, s, local_conf(s->cfg)->rootfs, &lb->net);
	if (!result)
		result = local_wait_ready(ready_p[0], deadline, scope);
	if (result == SBX_ERR_TIMEOUT || result == SBX_ERR_IO)
		local_log_tail(scope, logpath.ptr);
	if (rules.nsfd >= 0 && local_net_rules_finish(&rules, scope) && !result)
		result = SBX_ERR_IO;
	if (result)
		goto out;
	LOCAL_STEP(LS_READY);
	result = local_net_up(scope, init, s, rules.dns, log_fd, deadline, &lb->net, local_record, lb);
	if (result)
		goto out;
	LOCAL_STEP(LS_NET);
	/* local.json is complete: written when bubblewrap named the init (with
	 * its gateway slot), and again by local_record once pasta ran or
	 * another slot was taken (open mode) */
	local_steps_log(scope, steps);
	*out = &lb->base;
	lb = NULL;
	bwrap = -1;
	init = 0;
	made_cgroup = false;
	result = SBX_OK;
out:
	if (lb)
		local_net_down(&lb->net, false);
	if (bwrap > 0)
		local_abort_spawn(bwrap, init);
	if (made_cgroup)
		cgroup_sandbox_destroy(s->token);
	if (lb && recorded) { /* nothing of it runs any more */
		buf_reset(&logpath);
		if (!layout_file(&logpath, lb->thread_dir, "local.json"))
			unlink(logpath.ptr);
	}
	local_close_fds((int[]){ info_p[0], info_p[1], ready_p[0], ready_p[1], log_fd, filter_fd }, 6);
	if (a) {
		av_free(a);
		free(a);
	}
	buf_free(&logpath);
	local_box_free(lb);
	return result;
#undef LOCAL_STEP
}

/*
 * Setting a sandbox up is CPU work (bubblewrap's namespaces and mounts, the
 * init, pasta) and a burst of acquires on a small host would run dozens of
 * them at once: none finishes sooner than in turns, and every other process
 * on the host, including the ones reading the mount, waits behind them.  So
 * at most local_gate.max set-ups run at once (twice the CPUs, at least 4);
 * the rest wait here, before their ready_timeout starts counting.
 */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t freed;
	unsigned busy, max; /* protected by lock */
} local_gate = { .lock = PTHREAD_MUTEX_INITIALIZER, .freed = PTHREAD_COND_INITIALIZER };

static void local_gate_enter(void)
{
	pthread_mutex_lock(&local_gate.lock);
	if (!local_gate.max) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		local_gate.max = n > 2 ? (unsigned)n * 2 : 4;
	}
	while (local_gate.busy >= local_gate.max)
		pthread_cond_wait(&local_gate.freed, &local_gate.lock);
	local_gate.busy++;
	pthread_mutex_unlock(&local_gate.lock);
}

static void local_gate_leave(void)
{
	pthread_mutex_lock(&local_gate.lock);
	local_gate.busy--;
	pthread_cond_signal(&local_gate.freed);
	pthread_mutex_unlock(&local_gate.lock);
}

static enum sbx_err local_create(const struct sbx_spec *s, struct sbx_box **out)
{
	enum sbx_err e;

	local_gate_enter();
	e = local_create_now(s, out);
	local_gate_leave();
	return e;
}

/* The sandbox's init (and so its namespaces) is still there. */
bool local_alive(struct local_box *lb)
{
	if (lb->bwrap_pid > 0 && waitpid(lb->bwrap_pid, NULL, WNOHANG) == lb->bwrap_pid)
		lb->bwrap_pid = 0; /* reaped: the sandbox has ended */
	return lb->init_pid > 0 && util_proc_starttime(lb->init_pid) == lb->init_start &&
	       util_ns_inode(lb->init_pid, "mnt") == lb->mntns;
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

	/* through a pidfd taken while it is still this init: never a recycled
	 * pid, and its exit wakes the wait (unmount destroys every sandbox) */
	int pidfd = local_alive(lb) ? pidfd_open(lb->init_pid, 0) : -1;
	bool ended = false; /* the pidfd said the init exited */

	if (pidfd >= 0 && local_alive(lb) && !pidfd_send_signal(pidfd, SIGKILL, NULL, 0)) {
		struct pollfd p = { .fd = pidfd, .events = POLLIN };
		int n;
		while ((n = poll(&p, 1, 10000)) < 0 && errno == EINTR)
			;
		ended = n == 1;
	} else if (local_alive(lb)) {
		kill(lb->init_pid, SIGKILL);
	}
	if (pidfd >= 0)
		close(pidfd);
	/* bubblewrap reaps it and exits; gone from /proc once reaped (an
	 * adopted sandbox's bubblewrap is not ours to wait for) */
	if (lb->bwrap_pid > 0)
		while (waitpid(lb->bwrap_pid, NULL, 0) < 0 && errno == EINTR)
			;
	while (!ended && lb->init_pid > 0 && util_proc_starttime(lb->init_pid) == lb->init_start &&
	       util_now_ms() < deadline)
		usleep(1000);
	/* what the init's death did not end (nothing, normally) and the cgroups
	 * (at an unmount's teardown of every sandbox: once all have ended) */
	if (lb->ending)
		cgroup_sandbox_destroy_later(lb->token);
	else
		cgroup_sandbox_destroy(lb->token);
	local_net_down(&lb->net, lb->ending);
	if (!layout_file(&path, lb->thread_dir, "local.json"))
		unlink(path.ptr);
	buf_free(&path);
	lb->init_pid = 0;
	return SBX_OK;
}

/* Shutdown: the init's end (and with it the sandbox's) starts now;
 * local_destroy waits for it. */
static void local_stop_soon(struct sbx_box *b)
{
	struct local_box *lb = local_box(b);

	lb->ending = true;
	if (local_alive(lb))
		kill(lb->init_pid, SIGKILL);
}

static void local_shutdown(void)
{
	cgroup_destroy_deferred();
	local_net_shutdown();
}

/* A spare's init still waits for its claim: its FIFO is there. */
static bool local_spare_unclaimed(struct local_box *lb)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/root/run/sbxfs-claim", (int)lb->init_pid);
	return access(path, F_OK) == 0;
}

static enum sbx_err local_adopt(const struct sbx_spec *s, struct sbx_box **out)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct local_box *lb = NULL;
	json_t *j = NULL;
	enum sbx_err result = SBX_ERR_GONE;

	if (!layout_file(&path, s->dirs.thread_dir, "local.json"))
		j = json_read_file(path.ptr);
	if (!j) {
		/* no record of its init: a create cut short (or nothing at all).
		 * Whatever it started is in the sandbox's cgroups: end it. */
		cgroup_sandbox_destroy(s->token);
		goto out;
	}
	lb = calloc(1, sizeof(*lb));
	if (!lb || !(lb->thread_dir = strdup(s->dirs.thread_dir)))
		goto out;
	sbx_box_init(&lb->base, &provider_local);
	lb->init_pid = (pid_t)json_integer_value(json_object_get(j, "init_pid"));
	lb->init_start = (unsigned long long)json_integer_value(json_object_get(j, "init_start"));
	lb->mntns = (unsigned long long)json_integer_value(json_object_get(j, "mntns"));
	lb->uid = (uid_t)json_integer_value(json_object_get(j, "uid"));
	lb->gid = (gid_t)json_integer_value(json_object_get(j, "gid"));
	lb->base.uid = lb->uid;
	lb->base.gid = lb->gid;
	lb->output_max = s->cfg->res.output;
	lb->net.pasta.pid = (pid_t)json_integer_value(json_object_get(j, "pasta_pid"));
	lb->net.pasta.start = (uint64_t)json_integer_value(json_object_get(j, "pasta_start"));
	lb->net.slot = json_is_integer(json_object_get(j, "gw_slot"))
			       ? (int)json_integer_value(json_object_get(j, "gw_slot")) : -1;
	local_net_adopted(&lb->net);
	{ /* a claimed spare keeps the cgroup it was started in */
		const char *cg = json_string_value(json_object_get(j, "cgroup"));
		bool ok = cg && strlen(cg) == SCOPE_TOKEN_LEN && strspn(cg, "0123456789abcdef") == SCOPE_TOKEN_LEN;

		snprintf(lb->token, sizeof(lb->token), "%s", ok ? cg : s->token);
	}
	snprintf(lb->base.remote_id, sizeof(lb->base.remote_id), "pid:%d", (int)lb->init_pid);
	if (local_alive(lb) && !cgroup_sandbox_exists(lb->token)) {
		/* made by an sbxfs without sandbox cgroups: no limits, no kill of
		 * leftovers; it is recreated on reclaim (its data stays) */
		log_warn(s->user, "local: sandbox %s has no cgroup of its own: recreated on reclaim", lb->token);
		kill(lb->init_pid, SIGKILL);
	}
	if (s->spare && local_alive(lb) && !local_spare_unclaimed(lb)) {
		/* a claim cut short by a crash: it may carry a thread's uid and
		 * mounts, and no claim can reach it any more */
		log_warn("local", "spare %s: its claim FIFO is gone (a claim was interrupted): ending it", s->token);
		kill(lb->init_pid, SIGKILL);
		lb->init_pid = 0; /* dead to the health check at once; destroy ends the rest (its cgroup) */
	}
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

/* Freeze: the sandbox's cgroup (cgroup.c), which holds its init, bubblewrap's
 * monitor and every job.  The job supervisors and output pumps stay on the
 * host and run on: they only wait. */
static enum sbx_err local_freeze(struct sbx_box *b)
{
	struct local_box *lb = local_box(b);

	if (!local_alive(lb))
		return SBX_ERR_GONE;
	return cgroup_sandbox_freeze(lb->token, true);
}

static enum sbx_err local_thaw(struct sbx_box *b)
{
	return cgroup_sandbox_freeze(local_box(b)->token, false);
}

static enum sbx_err local_frozen(struct sbx_box *b, bool *out)
{
	*out = cgroup_sandbox_frozen(local_box(b)->token);
	return SBX_OK;
}

static const struct sbx_freeze_ops local_freeze_ops = {
	.freeze = local_freeze,
	.thaw = local_thaw,
	.frozen = local_frozen,
};

static void local_box_status(struct sbx_box *b, struct json_t *out)
{
	struct local_box *lb = local_box(b);

	if (lb->init_pid > 0)
		json_object_set_new((json_t *)out, "init_pid", json_integer(lb->init_pid));
	if (lb->net.pasta.pid > 0)
		json_object_set_new((json_t *)out, "pasta_pid", json_integer(lb->net.pasta.pid));
	if (lb->net.slot >= 0) {
		char addr[64];
		pid_t gw = local_net_gateway_pid();

		local_net_address(&lb->net, addr, sizeof(addr), false);
		json_object_set_new((json_t *)out, "net_address", json_string(addr));
		local_net_address(&lb->net, addr, sizeof(addr), true);
		if (addr[0])
			json_object_set_new((json_t *)out, "net_address6", json_string(addr));
		if (gw > 0)
			json_object_set_new((json_t *)out, "gateway_pasta_pid", json_integer(gw));
	}
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
	.config_key = local_config_key,
	.config_show = local_config_show,
	.config_free = local_config_free,
	.preflight = local_preflight,
	.init = local_init,
	.discover = local_discover,
	.shutdown = local_shutdown,
	.create = local_create,
	.health = local_health,
	.destroy = local_destroy,
	.box_free = local_box_release,
	.adopt = local_adopt,
	.kill_all = local_kill_all,
	.stop_soon = local_stop_soon,
	.claim = local_claim,
	.box_status = local_box_status,
	.exec_start = local_exec_start,
	.exec_reattach = local_exec_reattach,
	.exec_signal = local_exec_signal,
	.exec_finish = local_exec_finish,
	.exec_free = local_exec_free,
	.exec_cleanup = local_exec_cleanup,
	.net = &local_net_ops,
	.freeze = &local_freeze_ops,
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
