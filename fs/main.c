/* SPDX-License-Identifier: MIT */
/*
 * main.c - the sbxfs daemon: command line, configuration, the state_dir
 * lock, start-up in the right order, signals, and the FUSE session's life
 * from mount to clean shutdown.
 *
 *   sbxfs [-f] [-d] [-c CONFIG] [-o OPTIONS] [SOURCE] MOUNTPOINT
 *   sbxfs --check-config FILE
 *
 * The command line is args.c's (also as mount(8) and fstab run it); the
 * service manager's notifications are service.c's.
 *
 * Start-up order, and why:
 *   1. configuration, state_dir and its lock: a second daemon on the same
 *      state_dir stops here, before touching anything;
 *   2. the mount, after detaching a stale mount our own killed daemon left
 *      on the mountpoint (so `kill -9` then the same command just works);
 *   3. detach from the terminal (fork) BEFORE any thread exists: threads do
 *      not survive a fork.  The parent waits until the child reports that
 *      everything below is up, so `sbxfs /sbx` without -f exits 0 only with
 *      a working mount, and 1 with the error on stderr otherwise;
 *   4. adoption of the sandboxes a previous daemon left (pool_init), then
 *      the threads (park, jobs, reload).  A failure from here on unmounts
 *      and leaves every adopted sandbox running: a failed start never
 *      destroys anything.
 *
 * Once the request loop answers, a service manager hears READY=1
 * (service.h).
 *
 * Shutdown (SIGTERM, SIGINT, fusermount3 -u, umount): the FUSE loop ends;
 * STOPPING=1; new acquires are refused; slow work in flight ends; the pool destroys every
 * sandbox (or leaves them for adoption with keep_on_exit); parked requests
 * are answered.  SIGHUP reloads the configuration file (DESIGN §4).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../common/layout.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../net/net.h"
#include "../providers/sbxsnap.h"
#include "../skills/skills.h"
#include "args.h"
#include "data.h"
#include "fswatch.h"
#include "dlock.h"
#include "handle.h"
#include "import.h"
#include "job.h"
#include "jobfs.h"
#include "node.h"
#include "fsbx.h"
#include "fspark.h"
#include "rfiles.h"
#include "service.h"
#include "snapfs.h"
#include "uring.h"
#include "../runtime/work.h"

int vtree_init(void);
int loop_run(struct fuse_session *se);

static int hup_pipe[2] = { -1, -1 };

/* ---- the state_dir lock ------------------------------------------------------------- */

static int take_lock(const char *state_dir)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	char text[32];
	int fd = -1;

	if (buf_addf(&path, "%s/sbxfs.lock", state_dir))
		goto fail;
	fd = open(path.ptr, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		fprintf(stderr, "sbxfs: cannot open %s: %s\n", path.ptr, strerror(errno));
		goto fail;
	}
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
		text[n > 0 ? n : 0] = '\0';
		text[strcspn(text, "\n")] = '\0';
		fprintf(stderr, "sbxfs: another sbxfs (pid %s) holds %s: refusing to start\n", text[0] ? text : "?",
			path.ptr);
		goto fail;
	}
	buf_free(&path);
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	buf_free(&path);
	return -1;
}

static void write_lock_pid(int fd)
{
	char text[32];
	int n = snprintf(text, sizeof(text), "%d\n", (int)getpid());

	if (ftruncate(fd, 0) || pwrite(fd, text, (size_t)n, 0) != n)
		log_warn("daemon", "cannot record the pid in the lock file: %s", strerror(errno));
}

/* ---- the mountpoint ---------------------------------------------------------------------- */

/* STATE/mountpoint names where this state_dir was last mounted. */
static int mountpoint_record(const char *state_dir, struct buf *path)
{
	return buf_addf(path, "%s/mountpoint", state_dir);
}

/* Is the mountpoint a FUSE sbxfs mount (of any daemon)? */
static bool mountpoint_is_sbxfs(const char *real)
{
	char line[8192], mp[PATH_MAX], fstype[64];
	FILE *f = fopen("/proc/self/mountinfo", "re");
	bool found = false;

	while (f && fgets(line, sizeof(line), f)) {
		char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*d %*d %*u:%*u %*s %4095s", mp) != 1 || sscanf(dash + 3, "%63s", fstype) != 1)
			continue;
		if (!strcmp(mp, real) && !strcmp(fstype, "fuse.sbxfs"))
			found = true;
	}
	if (f)
		fclose(f);
	return found;
}

/* The canonical path of a mountpoint that may be a dead mount (realpath()
 * of it fails with ENOTCONN): its parent's real path and its name. */
static char *mountpoint_canonical(const char *mountpoint)
{
	char *copy = strdup(mountpoint), *slash, *parent, *out = NULL;
	const char *name;
	struct buf b = BUF_INIT(PATH_MAX);

	if (!copy)
		return NULL;
	slash = strrchr(copy, '/');
	if (slash) {
		*slash = '\0';
		name = slash + 1;
		parent = realpath(copy[0] ? copy : "/", NULL);
	} else {
		name = copy;
		parent = realpath(".", NULL);
	}
	if (parent && !buf_addf(&b, "%s/%s", strcmp(parent, "/") ? parent : "", name))
		out = buf_take(&b, NULL);
	free(parent);
	free(copy);
	buf_free(&b);
	return out;
}

/* A daemon of this state_dir was killed and left its mount behind (every
 * access is ENOTCONN): we hold the state_dir lock, so nobody serves it;
 * detach it so the new mount can take its place. */
static void detach_stale_mount(const char *state_dir, const char *mountpoint)
{
	struct buf rec = BUF_INIT(BUF_CAP_PATH), text = BUF_INIT(PATH_MAX);
	struct statvfs sv;
	char *real = NULL;

	/* statfs always asks the daemon (stat may answer from the attribute
	 * cache); a dead daemon's mount answers ENOTCONN, or ECONNABORTED when
	 * the kernel aborted the connection */
	if (statvfs(mountpoint, &sv) == 0 || (errno != ENOTCONN && errno != ECONNABORTED))
		goto out;
	real = mountpoint_canonical(mountpoint);
	if (!real || mountpoint_record(state_dir, &rec) || util_read_file(rec.ptr, &text) ||
	    strcmp(real, buf_str(&text))) {
		log_warn("daemon", "%s is a dead mount, but not one of this state_dir: left alone", mountpoint);
		goto out;
	}
	if (!mountpoint_is_sbxfs(real)) {
		log_warn("daemon", "%s is not connected but is not an sbxfs mount: left alone", mountpoint);
		goto out;
	}
	if (umount2(real, MNT_DETACH))
		log_warn("daemon", "cannot detach the stale mount on %s: %s", real, strerror(errno));
	else
		log_info("daemon", "detached the stale mount a killed sbxfs of this state_dir left on %s", real);
out:
	free(real);
	buf_free(&rec);
	buf_free(&text);
}

static void remember_mountpoint(const char *state_dir, const char *mountpoint)
{
	struct buf rec = BUF_INIT(BUF_CAP_PATH);
	char *real = realpath(mountpoint, NULL);

	if (real && !mountpoint_record(state_dir, &rec) && util_write_atomic(rec.ptr, real, strlen(real), 0600))
		log_warn("daemon", "cannot record the mountpoint: %s", strerror(errno));
	free(real);
	buf_free(&rec);
}

/* The kernel's default readahead for a FUSE mount is 128 KiB; sequential
 * reads go faster with 1 MiB in flight.  Best effort. */
static void tune_readahead(const char *mountpoint)
{
	char line[4096], mp[4096], path[128];
	unsigned maj, min;
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *real = realpath(mountpoint, NULL);

	while (f && real && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%*d %*d %u:%u %*s %4095s", &maj, &min, mp) != 3 || strcmp(mp, real))
			continue;
		if (!str_fmt(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min)) {
			int fd = open(path, O_WRONLY | O_CLOEXEC);
			if (fd >= 0) {
				if (write(fd, "1024", 4) != 4)
					log_debug("daemon", "read_ahead_kb: %s", strerror(errno));
				close(fd);
			}
		}
	}
	if (f)
		fclose(f);
	free(real);
}

/* Symlinks in the data directories are the sandbox's: the host never
 * follows them through the mount (DESIGN §3), so a job cannot point a host
 * user or root at host files; lstat and readlink still show them.  libfuse
 * 3.14 does not know the nosymfollow option, so the flag is set on the
 * mount after mounting, before any request is served.  No fallback: a
 * mount that would follow them is refused. */
static int mount_nosymfollow(const char *mountpoint)
{
	struct mount_attr attr = { .attr_set = MOUNT_ATTR_NOSYMFOLLOW };

	if (mount_setattr(AT_FDCWD, mountpoint, 0, &attr, sizeof(attr)) == 0)
		return 0;
	fprintf(stderr, "sbxfs: cannot make the mount nosymfollow (needs Linux >= 5.12 and root): %s\n",
		strerror(errno));
	return -1;
}

/* The mount options: sbxfs's own, then what the command line passes on
 * (args.h: generic fstab options are gone by now).  nosuid and nodev
 * always: libfuse would otherwise honour the suid and dev that mount.fuse3
 * adds to every mount. */
static int build_fuse_args(struct args *o, struct sbx_config *cfg, struct fuse_args *args)
{
	struct buf mo = BUF_INIT(BUF_CAP_PATH);
	int r;

	r = fuse_opt_add_arg(args, "sbxfs");
	if (o->debug)
		r |= fuse_opt_add_arg(args, "-d");
	r |= buf_adds(&mo, "fsname=sbxfs,subtype=sbxfs,default_permissions,nosuid,nodev");
	if (cfg->allow_other)
		r |= buf_adds(&mo, ",allow_other");
	if (o->fuse_opts.len)
		r |= buf_addf(&mo, ",%s", o->fuse_opts.ptr);
	r |= fuse_opt_add_arg(args, "-o");
	r |= fuse_opt_add_arg(args, buf_str(&mo));
	buf_free(&mo);
	return r ? -1 : 0;
}

/* Who may reach the mount is mount.conf's to say (so .config and
 * --check-config tell the truth): -o allow_other only agrees with it. */
static int check_allow_other(const struct args *o, const struct sbx_config *cfg)
{
	if (!o->allow_other || cfg->allow_other)
		return 0;
	fprintf(stderr, "sbxfs: -o allow_other: set `allow_other: true` in %s instead (mount.conf decides who may "
			"reach the mount)\n",
		cfg->path);
	return -1;
}

/* ---- detaching -------------------------------------------------------------------------- */

/* Fork; the parent waits for the child's word (one byte: 0 = up) and exits
 * with it.  Returns the fd the child reports on, or -1 in the foreground. */
static int daemon_detach(void)
{
	int p[2];
	pid_t pid;
	char status = 1;

	if (pipe2(p, O_CLOEXEC))
		return -2;
	pid = fork();
	if (pid < 0)
		return -2;
	if (pid > 0) {
		close(p[1]);
		while (read(p[0], &status, 1) < 0 && errno == EINTR)
			;
		_exit(status ? 1 : 0);
	}
	close(p[0]);
	if (setsid() < 0)
		log_warn("daemon", "setsid: %s", strerror(errno));
	return p[1];
}

/* The child is up: release the parent, leave the terminal, log to syslog. */
static void daemon_ready(int notify_fd)
{
	char ok = 0;
	int null;

	if (notify_fd < 0)
		return;
	log_open(1, 0);
	null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		close(null);
	}
	if (chdir("/"))
		log_warn("daemon", "chdir /: %s", strerror(errno));
	if (write(notify_fd, &ok, 1) != 1)
		log_warn("daemon", "cannot report the start: %s", strerror(errno));
	close(notify_fd);
}

/* ---- signals and reload ----------------------------------------------------------------- */

static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void on_hup(int sig)
{
	char c = 'h';

	(void)sig;
	if (write(hup_pipe[1], &c, 1) < 0)
		return;
}

static void *reload_main(void *arg)
{
	char c, err[512];

	(void)arg;
	while (read(hup_pipe[0], &c, 1) == 1) {
		struct sbx_config *cur = pool_config(), *next;

		if (c == 'q') {
			config_put(cur);
			break;
		}
		service_reloading();
		next = config_load(cur->path, err, sizeof(err));
		if (!next) {
			log_err("config", "reload refused, keeping the old configuration: %s", err);
		} else if (strcmp(next->state_dir, cur->state_dir)) {
			log_err("config", "reload refused: state_dir cannot change while mounted");
			config_put(next);
			next = NULL;
		} else if (!provider_find(next->use)) {
			log_err("config", "reload refused: use: provider '%s' is not built in", next->use);
			config_put(next);
			next = NULL;
		} else if (pool_reload(next, err, sizeof(err))) {
			log_err("config", "reload refused, keeping the old configuration: %s", err);
			config_put(next);
			next = NULL;
		} else {
			log_info("config", "configuration reloaded from %s", next->path);
			if (next->fuse_io_uring != cur->fuse_io_uring || next->fuse_uring_depth != cur->fuse_uring_depth)
				log_warn("config", "fuse.io_uring*: changed; the transport is chosen when mounting: it "
						   "takes effect at the next mount");
			config_put(next);
		}
		service_reloaded(next ? "configuration reloaded" : "reload refused: the old configuration stays");
		config_put(cur);
	}
	return NULL;
}

static int reload_start(pthread_t *t)
{
	struct sigaction sa = { .sa_handler = on_hup };
	int err;

	if (pipe2(hup_pipe, O_CLOEXEC))
		return errno;
	err = pthread_create(t, NULL, reload_main, NULL);
	if (err)
		return err;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGHUP, &sa, NULL);
	return 0;
}

static void reload_stop(pthread_t t)
{
	char q = 'q';

	signal(SIGHUP, SIG_IGN);
	if (write(hup_pipe[1], &q, 1) == 1)
		pthread_join(t, NULL);
}

/* ---- the service manager ------------------------------------------------------------------- */

/* READY=1 (with the status line) once the request loop answers a statfs of
 * the mount: adoption is done by then (service.h). */
static void announce_when_served(const char *mountpoint, const struct sbx_config *cfg)
{
	char status[1024];

	snprintf(status, sizeof(status), "serving %s (provider %s, state_dir %s)", mountpoint, cfg->use,
		cfg->state_dir);
	service_start(mountpoint, status);
}

/* ---- main ----------------------------------------------------------------------------------- */

static const char *config_path(const struct args *o)
{
	if (o->config)
		return o->config;
	return access(SBXFS_DEFAULT_CONFIG, F_OK) == 0 ? SBXFS_DEFAULT_CONFIG : "/dev/null";
}

static struct sbx_config *load_config(struct args *o)
{
	const char *path = config_path(o);
	struct sbx_config *cfg;
	char err[1024];

	cfg = config_load(path, err, sizeof(err));
	if (!cfg) {
		fprintf(stderr, "sbxfs: config error: %s\n", err);
		return NULL;
	}
	if (util_mkdir_p(cfg->state_dir, 0700)) {
		fprintf(stderr, "sbxfs: config error: state_dir: cannot create %s: %s\n", cfg->state_dir,
			strerror(errno));
		config_put(cfg);
		return NULL;
	}
	return cfg;
}

/* --check-config FILE: the start's validation (config_load and the
 * provider's checks that change nothing: no state_dir, mount or cgroup is
 * made), then the effective configuration on stdout.  Exit status. */
static int check_config(const char *path)
{
	const struct sbx_provider *prov;
	struct buf out = BUF_INIT(BUF_CAP_JSON);
	struct sbx_config *cfg;
	char err[1024];
	int ret = 1;

	cfg = config_load(path, err, sizeof(err));
	if (!cfg) {
		fprintf(stderr, "sbxfs: config error: %s\n", err);
		return 1;
	}
	prov = provider_find(cfg->use);
	if (!prov) {
		fprintf(stderr, "sbxfs: config error: use: provider '%s' is not built into this sbxfs (available: %s)\n",
			cfg->use, provider_names());
		goto out;
	}
	if (sbx_preflight(prov, cfg, err, sizeof(err))) {
		fprintf(stderr, "sbxfs: %s\n", err[0] ? err : "the provider's checks fail");
		goto out;
	}
	if (config_show(cfg, &out) || (out.len && out.ptr[out.len - 1] != '\n' && buf_adds(&out, "\n"))) {
		fprintf(stderr, "sbxfs: out of memory\n");
		goto out;
	}
	fputs(buf_str(&out), stdout);
	fprintf(stderr, "sbxfs: %s: configuration OK\n", path);
	ret = 0;
out:
	buf_free(&out);
	config_put(cfg);
	return ret;
}

/* --import-deerflow DIR: DeerFlow's threads moved into state_dir, holding the
 * state_dir lock (a daemon serving it refuses us, and we it).  Exit status. */
static int import_command(struct args *o)
{
	struct sbx_config *cfg = load_config(o);
	int lockfd, ret = 1;

	if (!cfg)
		return 1;
	lockfd = take_lock(cfg->state_dir);
	if (lockfd >= 0) {
		ret = import_deerflow(cfg, o->import_dir);
		close(lockfd);
	}
	config_put(cfg);
	return ret;
}

/* The command line's verdict: -1 to go on and mount, else the exit status. */
static int handle_args(enum args_action act, struct args *o, const char *err)
{
	switch (act) {
	case ARGS_RUN:
		return -1;
	case ARGS_HELP:
		args_usage(stdout);
		return 0;
	case ARGS_VERSION:
		printf("%s\n", args_version());
		return 0;
	case ARGS_CHECK_CONFIG:
		log_open(0, o->debug);
		config_set_hooks(&provider_config_hooks);
		return check_config(o->config);
	case ARGS_IMPORT:
		log_open(0, o->debug);
		config_set_hooks(&provider_config_hooks);
		return import_command(o);
	default:
		fprintf(stderr, "sbxfs: %s\n", err);
		args_usage(stderr);
		return 2;
	}
}

/* Everything that starts threads: after the fork.  0, or -1 with the cause
 * on stderr; on failure nothing adopted is destroyed. */
static int start_services(struct sbx_config *cfg, pthread_t *reloader)
{
	char err[1024];
	int e;

	if ((e = fspark_init())) {
		fprintf(stderr, "sbxfs: cannot start the park thread: %s\n", strerror(e));
		return -1;
	}
	if ((e = dlock_init())) {
		fprintf(stderr, "sbxfs: cannot start the flock waits' ticker: %s\n", strerror(e));
		return -1;
	}
	/* before the pool: adopted allowlist sandboxes get their proxy back */
	if ((e = net_init())) {
		fprintf(stderr, "sbxfs: cannot start the network proxy: %s\n", strerror(e));
		return -1;
	}
	job_set_environ_hook(net_job_environ); /* main wires the layers: net/ never calls up */
	/* before the pool too: new and adopted sandboxes get their skills synced */
	if ((e = skills_init())) {
		fprintf(stderr, "sbxfs: cannot start the skills sync: %s\n", strerror(e));
		return -1;
	}
	/* before the pool too: interrupted restores finished before any
	 * sandbox is adopted; adopted sandboxes thawed */
	if ((e = sbxsnap_init(cfg->state_dir))) {
		fprintf(stderr, "sbxfs: cannot start the snapshots: %s\n", strerror(e));
		return -1;
	}
	fs_sbx_setup(); /* the pool frees the FUSE layer's per-sandbox state */
	if (pool_init(cfg, err, sizeof(err))) {
		fprintf(stderr, "sbxfs: %s\n", err);
		return -1;
	}
	if (users_load() || (e = jobfs_init()) || (e = reload_start(reloader))) {
		fprintf(stderr, "sbxfs: cannot start: %s\n", strerror(e ? e : errno));
		return -2;
	}
	return 0;
}

/* The watcher of data caches invalidates through data.c (fswatch.h). */
static const struct fswatch_hooks watch_hooks = {
	.inval_dirent = data_inval_dirent,
	.inval_file = data_inval_file,
	.inval_sbx = data_inval_sbx,
};

int main(int argc, char **argv)
{
	struct args o;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct sbx_config *cfg = NULL;
	pthread_t reloader;
	int lockfd = -1, ret = 1, notify_fd = -1, started;
	char *mp_abs = NULL, argerr[512];
	enum args_action act = args_parse(argc, argv, &o, argerr, sizeof(argerr));

	if ((ret = handle_args(act, &o, argerr)) >= 0) {
		args_free(&o);
		return ret;
	}
	ret = 1;
	umask(0); /* the kernel has applied the caller's umask to every create */
	log_open(0, o.debug);
	/* A fixed mmap threshold (which also turns off glibc's dynamic one):
	 * buffers of 128 KiB and more (libfuse copies a READ reply through one
	 * when a splice comes up short, as when a reader catches up with a
	 * job's output) are mapped and unmapped each time.  With the dynamic
	 * threshold, the first such free raises it, later ones come from the
	 * malloc arena of whichever of the 32 workers served the request, and
	 * every arena keeps a few MiB it never returns. */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	config_set_hooks(&provider_config_hooks);
	cfg = load_config(&o);
	if (!cfg)
		goto out;
	if (check_allow_other(&o, cfg))
		goto out;
	lockfd = take_lock(cfg->state_dir);
	if (lockfd < 0)
		goto out;
	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	layout_sweep_tmp(cfg->state_dir); /* before anything reads a record */
	fs.cfg = cfg;
	fs.started_at = util_wall_now();
	fs.mount_uid = getuid();
	fs.mount_gid = getgid();
	/* Data attributes and names are cached for 10 s, 1 s while a job runs in
	 * the sandbox; when a job ends its sandbox's cached attributes are
	 * dropped (data.c), and an open always revalidates. */
	fs.data_timeout = 10.0;
	fs.data_timeout_busy = 1.0;
	/* ...and for cache_timeout while fswatch.c tells the kernel of every
	 * change a sandbox makes (issue 23) */
	fs.cache_timeout = (double)cfg->cache_timeout;
	if (vtree_init()) {
		fprintf(stderr, "sbxfs: out of memory\n");
		goto out;
	}
	data_init(cfg->state_dir);
	rfiles_init();
	snapfs_init();
	if (build_fuse_args(&o, cfg, &args) || uring_prepare(cfg, &args))
		goto out;
	fs.se = fuse_session_new(&args, &fs_ops, sizeof(fs_ops), NULL);
	if (!fs.se)
		goto out;
	detach_stale_mount(cfg->state_dir, o.mountpoint);
	if (fuse_session_mount(fs.se, o.mountpoint)) {
		fprintf(stderr, "sbxfs: cannot mount %s\n", o.mountpoint);
		goto out_session;
	}
	if (mount_nosymfollow(o.mountpoint))
		goto out_unmount;
	remember_mountpoint(cfg->state_dir, o.mountpoint);
	tune_readahead(o.mountpoint);
	mp_abs = mountpoint_canonical(o.mountpoint); /* before detaching: it changes to / */
	if (!o.foreground && (notify_fd = daemon_detach()) == -2) {
		fprintf(stderr, "sbxfs: cannot detach: %s\n", strerror(errno));
		goto out_unmount;
	}
	if (!o.foreground)
		service_detached(); /* MAINPID=, before the launcher exits */
	/* after the detaching fork: the watcher is a thread */
	fswatch_init(cfg->state_dir, cfg->cache_timeout, &watch_hooks);
	view_set_kill_hook(fswatch_view_dead);
	if (fuse_set_signal_handlers(fs.se))
		goto out_unmount;
	started = start_services(cfg, &reloader);
	if (started) {
		/* never destroy what was adopted: the next start takes it over */
		skills_drain();
		work_shutdown();
		pool_shutdown(true);
		sbxsnap_shutdown();
		skills_shutdown();
		job_set_environ_hook(NULL);
		net_shutdown();
		jobfs_shutdown();
		dlock_shutdown();
		park_shutdown();
		goto out_signals;
	}
	write_lock_pid(lockfd);
	daemon_ready(notify_fd);
	notify_fd = -1;
	log_info("daemon", "sbxfs %s mounted on %s (provider %s, state_dir %s)", SBXFS_VERSION, o.mountpoint,
		cfg->use, cfg->state_dir);
	announce_when_served(mp_abs ? mp_abs : o.mountpoint, cfg);
	ret = loop_run(fs.se);
	service_stopping();
	log_info("daemon", "shutting down");
	reload_stop(reloader);
	pool_stop();
	skills_drain(); /* pending skills syncs run before the sandboxes go */
	work_shutdown();
	pool_shutdown(false);
	sbxsnap_shutdown();
	skills_shutdown();
	rfiles_shutdown();
	job_set_environ_hook(NULL);
	net_shutdown();
	jobfs_shutdown();
	dlock_shutdown();
	park_shutdown();
out_signals:
	fuse_remove_signal_handlers(fs.se);
out_unmount:
	fuse_session_unmount(fs.se);
out_session:
	fswatch_shutdown();
	uring_stop(fs.se);
	handle_free_all();
	data_shutdown();
	fuse_session_destroy(fs.se);
	fs.se = NULL;
out:
	fuse_opt_free_args(&args);
	args_free(&o);
	free(mp_abs);
	if (lockfd >= 0)
		close(lockfd);
	config_put(cfg);
	/* a detached child that failed: the parent exits 1 when the pipe closes */
	return ret;
}
