/* SPDX-License-Identifier: MIT */
/*
 * local_exec.c - sbxfs-exec, the job supervisor of the local provider.
 *
 * The daemon starts one supervisor per job (as root, in its own session)
 * and forgets about the details: the supervisor joins the sandbox's
 * namespaces, starts the command with /bin/sh as the sandbox's uid with no
 * capabilities and no_new_privs, in the job's cgroup, enforces the timeout,
 * and records how the job ended in JOB_DIR/result.  Because the supervisor,
 * not the daemon, writes the result, a job outlives a crashed daemon and
 * still reports its end.
 *
 *   sbxfs-exec --pid=INIT --start=STARTTIME --uid=U --gid=G --timeout=SECS
 *              --job-dir=DIR [--cgroup=DIR] [--join=CGROUP_PROCS]...
 *              [--output-max=BYTES] [--filter-fd=N] [--frozen=FILE]  < INPUT
 *
 * Nothing a user controls is in this process's argv or environment (both
 * are world-readable or reach the dynamic loader of a root process).  The
 * daemon starts it with a fixed, clean environment and sends the job on fd 0,
 * a memfd: the command (bytes), a NUL, then the job's environment as
 * KEY=VALUE entries, each ended by a NUL.  Both are applied only to the
 * command, after the privilege drop: a root process must never start with
 * variables a user chose (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH, GCONV_PATH,
 * MALLOC_*, locale variables...).  The command runs as a script read from
 * fd 3, `sh -c '. /dev/fd/3'`, so `ps` on the host never shows its text.
 *
 * Files in DIR (under state_dir, which no sandbox can see; opened anyway
 * with O_NOFOLLOW and O_NONBLOCK, and only when they are regular files):
 * stdin (read, optional), stdout and stderr (the pump adds to them), pgid (the
 * job's process group = its host pid), cgroup (the job's cgroup), result
 * (JSON, written atomically at the end), kill-requested (written by the
 * daemon before a kill, so the result says "killed").
 *
 * --filter-fd: a seccomp BPF program (the daemon's filter.c) that the job
 * loads after the privilege drop, right before exec: a process that enters
 * the sandbox with setns() does not inherit its init's filter.
 *
 *
 * The timeout counts the time the job could run: while the sandbox is
 * frozen (`ctl` freeze, or the freeze of a snapshot) the clock stops.  The
 * supervisor is not in the sandbox's cgroups, so it is not frozen itself:
 * every TICK_MS it reads whether the job's cgroup is frozen (cgroup.events
 * of --cgroup, "frozen 1"; or --frozen=FILE, a v1 freezer.state) and counts
 * the tick only when it is not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "local_exec.h"

#define KILL_GRACE_SECONDS 2
#define INPUT_MAX (1024 * 1024 + 1) /* the daemon sends at most 1 MiB */
#define ENV_MAX 8192                /* entries */
#define MAX_JOIN 8
#define TICK_MS 200                 /* the timeout's clock */

struct exec_args {
	pid_t init;
	unsigned long long start;
	uid_t uid;
	gid_t gid;
	long timeout;
	uint64_t output_max;
	const char *job_dir, *cgroup;
	const char *frozen; /* a file saying whether the sandbox is frozen (else the job cgroup's cgroup.events) */
	const char *join[MAX_JOIN];
	int njoin;
	int filter_fd; /* -1: none */
};

/* What the supervisor holds open for the job. */
struct job_fds {
	int dir, in, out, err;         /* the job directory and its streams */
	int ns[5], cgns, root;         /* the sandbox's namespaces and root */
	int join[MAX_JOIN], njoin;     /* cgroup.procs files to join */
	int cgkill, cgparent;          /* the job cgroup's cgroup.kill, its parent dir */
	int frozen;                    /* cgroup.events or freezer.state: is the sandbox frozen? (-1: never) */
	int pipe_out[2], pipe_err[2];  /* the job's stdout and stderr */
};

int exec_diag_fd = 2;
static volatile sig_atomic_t ticked;
static bool timed_out;

static void on_alarm(int sig)
{
	(void)sig;
	ticked = 1;
}

void exec_die(const char *what)
{
	dprintf(exec_diag_fd, "sbxfs-exec: %s: %s\n", what, strerror(errno));
	_exit(125);
}

/* ---- arguments and input ----------------------------------------------------- */

static void parse_args(int argc, char **argv, struct exec_args *a)
{
	for (int i = 1; i < argc; i++) {
		const char *s = argv[i];
		if (!strncmp(s, "--pid=", 6))
			a->init = (pid_t)strtol(s + 6, NULL, 10);
		else if (!strncmp(s, "--start=", 8))
			a->start = strtoull(s + 8, NULL, 10);
		else if (!strncmp(s, "--uid=", 6))
			a->uid = (uid_t)strtoul(s + 6, NULL, 10);
		else if (!strncmp(s, "--gid=", 6))
			a->gid = (gid_t)strtoul(s + 6, NULL, 10);
		else if (!strncmp(s, "--timeout=", 10))
			a->timeout = strtol(s + 10, NULL, 10);
		else if (!strncmp(s, "--output-max=", 13))
			a->output_max = strtoull(s + 13, NULL, 10);
		else if (!strncmp(s, "--job-dir=", 10))
			a->job_dir = s + 10;
		else if (!strncmp(s, "--cgroup=", 9))
			a->cgroup = s + 9;
		else if (!strncmp(s, "--frozen=", 9))
			a->frozen = s + 9;
		else if (!strncmp(s, "--join=", 7) && a->njoin < MAX_JOIN)
			a->join[a->njoin++] = s + 7;
		else if (!strncmp(s, "--filter-fd=", 12))
			a->filter_fd = (int)strtol(s + 12, NULL, 10);
	}
}

/* Read all of fd (bounded) into a NUL-terminated buffer. */
static char *read_all(int fd, size_t *len)
{
	char *data = malloc(INPUT_MAX + 1);
	size_t n = 0;

	if (!data)
		exec_die("out of memory");
	for (;;) {
		ssize_t r = read(fd, data + n, INPUT_MAX - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			exec_die("reading the job's input");
		if (r == 0)
			break;
		n += (size_t)r;
		if (n == INPUT_MAX) {
			errno = E2BIG;
			exec_die("reading the job's input");
		}
	}
	data[n] = '\0';
	*len = n;
	return data;
}

/* The job's environment from the input: after the command, NUL-separated
 * KEY=VALUE entries. */
static char **input_env(char *data, size_t len)
{
	char **env = calloc(ENV_MAX + 1, sizeof(*env));
	size_t n = 0;

	if (!env)
		exec_die("out of memory");
	for (char *p = data + strlen(data) + 1; p < data + len && n < ENV_MAX; p += strlen(p) + 1)
		if (strchr(p, '='))
			env[n++] = p;
	env[n] = NULL;
	return env;
}

/* The job's seccomp filter (classic BPF), read before anything else can
 * take its fd number. */
static struct sock_fprog read_filter(int fd)
{
	struct sock_fprog prog = { 0 };
	size_t len;
	char *bpf;

	if (fd < 0)
		return prog;
	bpf = read_all(fd, &len);
	close(fd);
	if (len == 0 || len % sizeof(struct sock_filter) || len / sizeof(struct sock_filter) > BPF_MAXINSNS) {
		errno = EINVAL;
		exec_die("the seccomp filter");
	}
	prog.len = (unsigned short)(len / sizeof(struct sock_filter));
	prog.filter = (struct sock_filter *)bpf;
	return prog;
}

/* fd 0 carried the input: from now on it is /dev/null. */
static void input_done(void)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (null < 0 || dup2(null, 0) < 0)
		exec_die("/dev/null");
	close(null);
}

/* ---- files --------------------------------------------------------------------- */

/* Open a file of the job directory as root, safely: never through a
 * symlink, never blocking on a FIFO or a device, and only a regular file. */
static int open_job_file(int dirfd, const char *name, int flags)
{
	struct stat st;
	int fd = openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || fcntl(fd, F_SETFL, flags & O_APPEND)) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	return fd;
}

static void write_at(int dirfd, const char *name, const char *text)
{
	char tmp[64];
	int fd;

	snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
	unlinkat(dirfd, tmp, 0);
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (write(fd, text, strlen(text)) < 0)
		dprintf(exec_diag_fd, "sbxfs-exec: write %s: %s\n", name, strerror(errno));
	close(fd);
	renameat(dirfd, tmp, dirfd, name);
}

static unsigned long long starttime(pid_t pid)
{
	char path[64], data[1024], *p;
	unsigned long long start = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	n = fread(data, 1, sizeof(data) - 1, f);
	fclose(f);
	data[n] = '\0';
	p = strrchr(data, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
			  &start) != 1)
		return 0;
	return start;
}

/* The job cannot start: say why in its stderr and its result. */
static void __attribute__((noreturn)) fail_job(int dirfd, const char *why)
{
	char text[256];

	dprintf(exec_diag_fd, "sbxfs: %s\n", why);
	snprintf(text, sizeof(text), "{\"state\": \"failed\", \"exit\": 125, \"signal\": 0, \"error\": \"%s\"}", why);
	write_at(dirfd, "result", text);
	_exit(1);
}

static void open_streams(const struct exec_args *a, struct job_fds *f)
{
	f->dir = open(a->job_dir, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (f->dir < 0)
		exec_die(a->job_dir);
	/* the supervisor's own complaints are appended to the job's stderr;
	 * the pump writes at offsets (splice cannot append) */
	exec_diag_fd = open_job_file(f->dir, "stderr", O_WRONLY | O_CREAT | O_APPEND);
	if (exec_diag_fd < 0)
		exec_diag_fd = 2;
	f->err = open_job_file(f->dir, "stderr", O_WRONLY | O_CREAT);
	f->out = open_job_file(f->dir, "stdout", O_WRONLY | O_CREAT);
	f->in = open_job_file(f->dir, "stdin", O_RDONLY);
	if (f->in < 0 && errno == ENOENT)
		f->in = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (f->in < 0 || f->out < 0 || f->err < 0)
		fail_job(f->dir, "the job's stdin, stdout or stderr is not a regular file");
}

static int open_ns(pid_t pid, const char *ns)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, ns);
	return open(path, O_RDONLY | O_CLOEXEC);
}

static void open_sandbox(const struct exec_args *a, struct job_fds *f)
{
	static const char *nss[] = { "ipc", "uts", "net", "pid", "mnt" };
	char path[PATH_MAX];

	for (int i = 0; i < 5; i++)
		if ((f->ns[i] = open_ns(a->init, nss[i])) < 0)
			exec_die("opening the sandbox's namespaces");
	f->cgns = open_ns(a->init, "cgroup");
	snprintf(path, sizeof(path), "/proc/%d/root", (int)a->init);
	f->root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (f->root < 0)
		exec_die("opening the sandbox's root");
}

/* The cgroups, opened before the supervisor leaves the host's mount
 * namespace: cgroup.procs files the job joins, the job cgroup's
 * cgroup.kill and its parent (to remove it at the end). */
static void open_cgroups(const struct exec_args *a, struct job_fds *f)
{
	char path[PATH_MAX], *slash;

	f->njoin = 0;
	for (int i = 0; i < a->njoin; i++)
		if ((f->join[f->njoin] = open(a->join[i], O_WRONLY | O_CLOEXEC)) >= 0)
			f->njoin++;
		else
			exec_die("opening the sandbox's cgroups");
	f->cgkill = f->cgparent = f->frozen = -1;
	if (a->frozen && a->frozen[0])
		f->frozen = open(a->frozen, O_RDONLY | O_CLOEXEC);
	if (!a->cgroup || !a->cgroup[0])
		return;
	snprintf(path, sizeof(path), "%s/cgroup.kill", a->cgroup);
	f->cgkill = open(path, O_WRONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s/cgroup.events", a->cgroup);
	if (f->frozen < 0)
		f->frozen = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s", a->cgroup);
	slash = strrchr(path, '/');
	if (slash) {
		*slash = '\0';
		f->cgparent = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	}
	write_at(f->dir, "cgroup", a->cgroup);
}

/* ---- the job process ------------------------------------------------------------ */

/* In the job, after the privilege drop: the command as a script on fd 3,
 * which the script closes first (its shell reads it through its own fd), so
 * the job's processes do not inherit it. */
static void script_fd(const char *cmd)
{
	static const char prologue[] = "exec 3<&-; ";
	int fd = memfd_create("sbxfs-job", 0);

	if (fd < 0 || write(fd, prologue, sizeof(prologue) - 1) != (ssize_t)sizeof(prologue) - 1 ||
	    write(fd, cmd, strlen(cmd)) != (ssize_t)strlen(cmd) || lseek(fd, 0, SEEK_SET))
		exec_die("the job's script");
	if (fd != 3 && (dup2(fd, 3) < 0 || close(fd)))
		exec_die("the job's script");
}

static void drop_privileges(uid_t uid, gid_t gid)
{
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) && errno == EINVAL)
			break;
	if (setgroups(0, NULL) || setresgid(gid, gid, gid) || setresuid(uid, uid, uid))
		exec_die("dropping privileges");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		exec_die("no_new_privs");
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) && errno != EINVAL)
		exec_die("ambient capabilities");
}

static void join_cgroups(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (write(fds[i], "0", 1) != 1)
			exec_die("joining the sandbox's cgroups");
}

/* The child: into the cgroups, its own session, the streams, then the
 * privilege drop and nothing else but exec. */
static void __attribute__((noreturn)) job_main(const struct exec_args *a, struct job_fds *f, const char *cmd,
	char **env, const struct sock_fprog *filter)
{
	sigset_t none;

	join_cgroups(f->join, f->njoin);
	if (f->cgns >= 0 && setns(f->cgns, CLONE_NEWCGROUP))
		exec_die("joining the sandbox's cgroup namespace");
	setsid();
	if (dup2(f->in, 0) < 0 || dup2(f->pipe_out[1], 1) < 0 || dup2(f->pipe_err[1], 2) < 0)
		exec_die("dup2");
	exec_diag_fd = 2;
	/* nothing of the supervisor's: the sync pipe closes here, which tells
	 * the supervisor the job is in its cgroups and session */
	close_range(3, ~0U, 0);
	drop_privileges(a->uid, a->gid);
	umask(022); /* the daemon runs with umask 0 (its creates carry the caller's) */
	script_fd(cmd);
	if (chdir("/mnt/user-data/workspace") && chdir("/"))
		exec_die("chdir");
	/* every disposition the default (as a container runtime does): a daemon
	 * started by `nohup` or in a script's background ignores SIGHUP,
	 * SIGINT, SIGQUIT, and ignored signals survive exec */
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* last: after this only what the sandbox may do works (no_new_privs is set) */
	if (filter->len && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, filter))
		exec_die("loading the seccomp filter");
	execle("/bin/sh", "sh", "-c", ". /dev/fd/3", (char *)NULL, env);
	dprintf(2, "sbxfs: cannot run /bin/sh in the sandbox: %s\n", strerror(errno));
	_exit(127);
}

/* ---- supervision ---------------------------------------------------------------- */

static void kill_job(pid_t pgid, int cgkill_fd)
{
	kill(-pgid, SIGTERM);
	for (int i = 0; i < KILL_GRACE_SECONDS * 20; i++) {
		if (kill(-pgid, 0) && errno == ESRCH)
			break;
		usleep(50000);
	}
	if (cgkill_fd >= 0 && write(cgkill_fd, "1", 1) != 1)
		dprintf(exec_diag_fd, "sbxfs-exec: cgroup.kill: %s\n", strerror(errno));
	kill(-pgid, SIGKILL);
}

static void enter_sandbox(struct job_fds *f)
{
	for (int i = 0; i < 5; i++)
		if (setns(f->ns[i], 0))
			exec_die("joining the sandbox");
	if (fchdir(f->root) || chroot("."))
		exec_die("entering the sandbox's root");
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Is the sandbox frozen?  cgroup.events says "frozen 1" (v2; the job's
 * cgroup is frozen with its parent), freezer.state "FROZEN" (v1). */
static bool sandbox_frozen(int fd)
{
	char text[512];
	ssize_t n;

	if (fd < 0)
		return false;
	n = pread(fd, text, sizeof(text) - 1, 0);
	if (n <= 0)
		return false;
	text[n] = '\0';
	return strstr(text, "frozen 1") || strstr(text, "FROZEN") || strstr(text, "FREEZING");
}

/* Wait for the job; past timeout seconds of time it could run (frozen
 * time does not count), end it. */
static int wait_job(pid_t child, long timeout, int cgkill, int frozen_fd)
{
	struct sigaction sa = { .sa_handler = on_alarm }; /* no SA_RESTART: the tick interrupts waitpid() */
	struct itimerval tick = { { 0, TICK_MS * 1000 }, { 0, TICK_MS * 1000 } }, off = { { 0, 0 }, { 0, 0 } };
	uint64_t ran = 0, last = mono_ms();
	int status = 0;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	if (timeout > 0)
		setitimer(ITIMER_REAL, &tick, NULL);
	while (waitpid(child, &status, 0) < 0) {
		if (errno != EINTR)
			exec_die("waitpid");
		if (!ticked || timed_out)
			continue;
		ticked = 0;
		uint64_t now = mono_ms();
		if (!sandbox_frozen(frozen_fd))
			ran += now - last;
		last = now;
		if (ran >= (uint64_t)timeout * 1000) {
			timed_out = true;
			setitimer(ITIMER_REAL, &off, NULL);
			kill_job(child, cgkill);
		}
	}
	return status;
}

/* The pump has moved what the job wrote; did the job go past its output
 * limit? */
static bool pump_sync_limit(int ctl, int ack)
{
	char answer = '-';

	if (write(ctl, "S\n", 2) != 2)
		return false;
	while (read(ack, &answer, 1) < 0 && errno == EINTR)
		;
	return answer == 'L';
}

static void write_result(int dirfd, int status, bool output_limit)
{
	const char *state = "exited", *reason = NULL;
	struct timespec ts;
	char text[256];
	int code, sig = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (WIFSIGNALED(status)) {
		sig = WTERMSIG(status);
		code = 128 + sig;
	} else {
		code = WEXITSTATUS(status);
	}
	if (timed_out) {
		state = "timed_out";
		reason = "timeout";
	} else if (output_limit) {
		state = "killed";
		reason = "output limit";
	} else if (WIFSIGNALED(status) && faccessat(dirfd, "kill-requested", F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		state = "killed";
		reason = "kill";
	}
	snprintf(text, sizeof(text), "{\"state\": \"%s\", \"exit\": %d, \"signal\": %d, \"ended_at\": %.6f%s%s%s}",
		state, code, sig, (double)ts.tv_sec + ts.tv_nsec / 1e9, reason ? ", \"reason\": \"" : "",
		reason ? reason : "", reason ? "\"" : "");
	write_at(dirfd, "result", text);
}

static pid_t start_pump(const struct exec_args *a, struct job_fds *f, int *ctl, int *ack)
{
	int c[2], k[2];
	struct pump_spec ps = { .in = { f->pipe_out[0], f->pipe_err[0] }, .out = { f->out, f->err },
		.max = a->output_max, .cgkill = f->cgkill };
	pid_t pid;

	if (pipe2(c, O_CLOEXEC) || pipe2(k, O_CLOEXEC))
		exec_die("pipe");
	ps.ctl = c[0];
	ps.ack = k[1];
	pid = pump_start(&ps);
	if (pid < 0)
		exec_die("fork");
	close(c[0]);
	close(k[1]);
	close(f->pipe_out[0]);
	close(f->pipe_err[0]);
	*ctl = c[1];
	*ack = k[0];
	return pid;
}

int main(int argc, char **argv)
{
	struct exec_args a = { .timeout = 600, .filter_fd = -1 };
	struct sock_fprog filter;
	struct job_fds f;
	char text[64], *input, *cmd, **env;
	int status, sync[2], ctl, ack;
	size_t input_len;
	pid_t child;

	parse_args(argc, argv, &a);
	if (!a.init || !a.job_dir || a.uid == 0) {
		fprintf(stderr, "usage: sbxfs-exec --pid=N --start=T --uid=U --gid=G --timeout=S --job-dir=DIR "
				"[--cgroup=DIR] [--join=PROCS]... [--output-max=BYTES] < INPUT\n");
		return 2;
	}
	input = read_all(0, &input_len);
	cmd = input;
	env = input_env(input, input_len);
	input_done();
	filter = read_filter(a.filter_fd);
	open_streams(&a, &f);
	if (starttime(a.init) != a.start)
		fail_job(f.dir, "the sandbox has ended");
	open_sandbox(&a, &f);
	open_cgroups(&a, &f);
	if (pipe2(f.pipe_out, O_CLOEXEC) || pipe2(f.pipe_err, O_CLOEXEC) || pipe2(sync, O_CLOEXEC))
		exec_die("pipe");
	signal(SIGPIPE, SIG_IGN);
	start_pump(&a, &f, &ctl, &ack);
	enter_sandbox(&f);
	child = fork();
	if (child < 0)
		exec_die("fork");
	if (child == 0)
		job_main(&a, &f, cmd, env, &filter);
	close(sync[1]);
	close(f.pipe_out[1]);
	close(f.pipe_err[1]);
	while (read(sync[0], text, 1) < 0 && errno == EINTR)
		;
	close(sync[0]);
	snprintf(text, sizeof(text), "%d\n", (int)child);
	write_at(f.dir, "pgid", text);
	snprintf(text, sizeof(text), "P%d\n", (int)child);
	if (write(ctl, text, strlen(text)) < 0)
		dprintf(exec_diag_fd, "sbxfs-exec: pump: %s\n", strerror(errno));
	if (write(3, "R", 1) != 1) /* tell the daemon: the job can be signalled now */
		dprintf(exec_diag_fd, "sbxfs-exec: cannot report the start\n");
	close(3);
	signal(SIGHUP, SIG_IGN);
	status = wait_job(child, a.timeout, f.cgkill, f.frozen);
	write_result(f.dir, status, pump_sync_limit(ctl, ack));
	/* no leftovers: the job's cgroup goes now (else at rmdir of the slot) */
	if (f.cgparent >= 0 && a.cgroup)
		unlinkat(f.cgparent, strrchr(a.cgroup, '/') + 1, AT_REMOVEDIR);
	/* _exit: no atexit work after the setns()/chroot() of this process */
	_exit(0);
}
