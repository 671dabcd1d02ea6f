/* SPDX-License-Identifier: MIT */
/*
 * main.c - the sbxfs daemon: command line, configuration, the state_dir
 * lock, signals, and the FUSE session's life from mount to clean shutdown.
 *
 *   sbxfs [-c CONFIG] MOUNTPOINT [-f] [-d] [-o FUSE_OPTIONS]
 *
 * Shutdown (SIGTERM, SIGINT, fusermount3 -u): the FUSE loop ends, then the
 * pool destroys every sandbox (or leaves them for adoption with
 * keep_on_exit), then parked job reads are answered and the session ends.
 * SIGHUP reloads the configuration file (DESIGN §4).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "fs.h"

#ifndef SBXFS_VERSION
#define SBXFS_VERSION "0.1.0"
#endif
#define DEFAULT_CONFIG "/etc/sbxfs/mount.conf"


struct opts {
	const char *config;
	const char *mountpoint;
	int foreground;
	int debug;
	struct buf fuse_opts;
};

static int hup_pipe[2] = { -1, -1 };

static void usage(FILE *f)
{
	fprintf(f, "usage: sbxfs [-c CONFIG] MOUNTPOINT [-f] [-d] [-o FUSE_OPTIONS]\n"
		   "\n"
		   "  -c, --config FILE   mount.conf (YAML); default " DEFAULT_CONFIG " if it exists\n"
		   "  -f, --foreground    stay in the foreground, log to stderr\n"
		   "  -d, --debug         debug logging (implies -f)\n"
		   "  -o OPTIONS          extra FUSE mount options (comma separated)\n"
		   "  -h, --help          this text\n"
		   "  -V, --version       print the version\n"
		   "\n"
		   "mkdir MOUNTPOINT/<user>/<thread> acquires a sandbox; rmdir releases it.\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = { { "config", required_argument, NULL, 'c' },
		{ "foreground", no_argument, NULL, 'f' }, { "debug", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' }, { "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 } };
	int c;

	buf_init(&o->fuse_opts, BUF_CAP_PATH);
	while ((c = getopt_long(argc, argv, "c:fdho:V", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			o->config = optarg;
			break;
		case 'f':
			o->foreground = 1;
			break;
		case 'd':
			o->debug = o->foreground = 1;
			break;
		case 'o':
			if ((o->fuse_opts.len && buf_adds(&o->fuse_opts, ",")) || buf_adds(&o->fuse_opts, optarg))
				return -1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf("sbxfs %s\n", SBXFS_VERSION);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return -1;
	}
	o->mountpoint = argv[optind];
	return 0;
}

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
		next = config_load(cur->path, err, sizeof(err));
		if (!next) {
			log_err("config", "reload refused, keeping the old configuration: %s", err);
		} else if (strcmp(next->state_dir, cur->state_dir)) {
			log_err("config", "reload refused: state_dir cannot change while mounted");
			config_put(next);
		} else if (!provider_find(next->use)) {
			log_err("config", "reload refused: use: provider '%s' is not built in", next->use);
			config_put(next);
		} else {
			pool_reload(next);
			log_info("config", "configuration reloaded from %s", next->path);
			config_put(next);
		}
		config_put(cur);
	}
	return NULL;
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

static int build_fuse_args(struct opts *o, struct sbx_config *cfg, struct fuse_args *args)
{
	struct buf mo = BUF_INIT(BUF_CAP_PATH);
	int r;

	r = fuse_opt_add_arg(args, "sbxfs");
	if (o->debug)
		r |= fuse_opt_add_arg(args, "-d");
	r |= buf_adds(&mo, "fsname=sbxfs,subtype=sbxfs,default_permissions");
	if (cfg->allow_other)
		r |= buf_adds(&mo, ",allow_other");
	if (o->fuse_opts.len)
		r |= buf_addf(&mo, ",%s", o->fuse_opts.ptr);
	r |= fuse_opt_add_arg(args, "-o");
	r |= fuse_opt_add_arg(args, buf_str(&mo));
	buf_free(&mo);
	return r ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct sbx_config *cfg = NULL;
	char err[1024];
	pthread_t reloader;
	int lockfd = -1, ret = 1, mounted = 0;
	const char *cfgpath;

	if (parse_args(argc, argv, &o))
		return 2;
	umask(0); /* the kernel has applied the caller's umask to every create */
	log_open(0, o.debug);
	cfgpath = o.config ? o.config : access(DEFAULT_CONFIG, F_OK) == 0 ? DEFAULT_CONFIG : "/dev/null";
	cfg = config_load(cfgpath, err, sizeof(err));
	if (!cfg) {
		fprintf(stderr, "sbxfs: config error: %s\n", err);
		return 1;
	}
	if (util_mkdir_p(cfg->state_dir, 0700)) {
		fprintf(stderr, "sbxfs: config error: state_dir: cannot create %s: %s\n", cfg->state_dir, strerror(errno));
		goto out;
	}
	lockfd = take_lock(cfg->state_dir);
	if (lockfd < 0)
		goto out;
	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	fs.cfg = cfg;
	fs.started_at = util_wall_now();
	fs.mount_uid = getuid();
	fs.mount_gid = getgid();
	/* Data attributes and names are cached for 10 s, 1 s while a job runs in
	 * the sandbox; when a job ends its sandbox's cached attributes are
	 * dropped (node.c), and an open always revalidates (data.c). */
	fs.data_timeout = 10.0;
	fs.data_timeout_busy = 1.0;
	fs_nodes_init();
	if (pool_init(cfg, err, sizeof(err))) {
		fprintf(stderr, "sbxfs: %s\n", err);
		goto out;
	}
	if (users_load() || jobs_init()) {
		fprintf(stderr, "sbxfs: cannot start: %s\n", strerror(errno));
		goto out_pool;
	}
	if (build_fuse_args(&o, cfg, &args))
		goto out_pool;
	fs.se = fuse_session_new(&args, &fs_ops, sizeof(fs_ops), NULL);
	if (!fs.se)
		goto out_pool;
	if (fuse_set_signal_handlers(fs.se))
		goto out_session;
	if (pipe2(hup_pipe, O_CLOEXEC) == 0) {
		struct sigaction sa = { .sa_handler = on_hup };
		sigemptyset(&sa.sa_mask);
		sigaction(SIGHUP, &sa, NULL);
		pthread_create(&reloader, NULL, reload_main, NULL);
	}
	if (fuse_session_mount(fs.se, o.mountpoint)) {
		fprintf(stderr, "sbxfs: cannot mount %s\n", o.mountpoint);
		goto out_signals;
	}
	mounted = 1;
	if (mount_nosymfollow(o.mountpoint))
		goto out_signals;
	tune_readahead(o.mountpoint);
	if (fuse_daemonize(o.foreground))
		goto out_signals;
	if (!o.foreground)
		log_open(1, o.debug);
	write_lock_pid(lockfd);
	log_info("daemon", "sbxfs %s mounted on %s (provider %s, state_dir %s)", SBXFS_VERSION, o.mountpoint,
		cfg->use, cfg->state_dir);
	ret = loop_run(fs.se);
	log_info("daemon", "shutting down");
out_signals:
	if (hup_pipe[1] >= 0) {
		char q = 'q';
		if (write(hup_pipe[1], &q, 1) == 1)
			pthread_join(reloader, NULL);
	}
	fuse_remove_signal_handlers(fs.se);
out_session:
	if (mounted)
		fuse_session_unmount(fs.se);
	pool_shutdown();
	jobs_shutdown();
	fs_handles_free_all();
	fuse_session_destroy(fs.se);
	fs.se = NULL;
	goto out;
out_pool:
	pool_shutdown();
out:
	fuse_opt_free_args(&args);
	buf_free(&o.fuse_opts);
	if (lockfd >= 0)
		close(lockfd);
	config_put(cfg);
	return ret;
}
