/* SPDX-License-Identifier: MIT */
/*
 * docker_box.c - sbxfs-box, the in-container half of the docker provider:
 * pid 1 of every docker sandbox, and the supervisor of every job in it.
 * Static (it runs on any image's root filesystem) and bind-mounted
 * read-only at /run/sbxfs/sbxfs-box; it runs as the sandbox's uid, with the
 * container's capabilities (none), seccomp profile and cgroup.
 *
 *   sbxfs-box init           pid 1: serves the daemon on the abstract unix
 *                            socket "sbxfs-box" of the container's network
 *                            namespace (only peers with uid 0, i.e. the
 *                            daemon, outside any container user) and reaps
 *                            orphans.  Requests (SOCK_SEQPACKET messages):
 *                              "ping"          -> "pong"
 *                              "killall"       -> ends every process but
 *                                                 itself and job supervisors
 *                              "job NAME TIMEOUT OUTPUT_MAX" with six fds
 *                                 (cmd, environ, stdin, stdout, stderr,
 *                                 result) -> forks a supervisor (no exec)
 *                                 that owns the connection from then on
 *   sbxfs-box spare          pid 1 of a spare (pool.prewarm): the same, but
 *                            started as root with CAP_SETUID, CAP_SETGID
 *                            and CAP_SETPCAP only, and one more request,
 *                              "claim UID GID" -> "claimed": empties its
 *                                 bounding set, takes UID, GID and the
 *                                 supplementary group GID (what `docker
 *                                 run --user UID:GID` gives) and drops
 *                                 every capability; from then on it is the
 *                                 init of a cold create of that thread
 *                            (nothing but this init runs in a spare before
 *                            its claim: the pool hands it out only then)
 *   sbxfs-box connect NAME   the same supervisor, started through the
 *                            Engine exec API (docker.exec: engine): it
 *                            connects to the daemon's abstract socket NAME,
 *                            says hello (the daemon checks its pid), and
 *                            receives the job message and fds the same way
 *
 * Why fds rather than files in a shared directory: the job's files live in
 * the daemon's root-only job directory; the daemon opens them and passes
 * the open files, so the job's output lands in the files the mount shows
 * (also while the daemon is down), and nothing the sandbox can write is
 * ever opened by root.  The job itself gets pipes, not those files: the
 * supervisor copies them into the files, counting (see "the output").
 * The command reaches the shell through a memfd (`sh -c '. /proc/self/fd/3'`),
 * never through an argv; the environment through the environ fd.
 *
 * The supervisor: child subreaper (every process the job starts, also one
 * that setsid()s or double-forks, stays below it), never dumpable (a job of
 * the same uid cannot ptrace it or read its fds: the init's child inherits
 * that; an engine-mode exec is of this file, which the build makes
 * execute-only, and the kernel starts a program its user cannot read
 * non-dumpable), deaf to every catchable
 * signal.  It enforces the timeout (SIGTERM to the whole tree, SIGKILL 2 s
 * later; the clock counts only the time the job could run: a tick every
 * BOX_TICK_MS, and a gap longer than BOX_TICK_GAP_MS between two ticks is
 * a pause of the container, the supervisor's included, which counts one
 * tick; so a paused sandbox's job does not time out for the pause) and the
 * output limit (SIGKILL, nothing kept past it), and writes the end
 * as JSON into the result fd: {"state", "exit", "signal", "ended_at"
 * [, "reason"]}.  It tells the daemon "started PID" once the job runs (the
 * kernel attaches its host pid to the message) and, before it exits, waits
 * up to 2 s for the daemon to hang up, so the daemon never opens a pidfd
 * on a recycled pid.  The daemon signals the job from the host, walking
 * the supervisor's tree.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BOX_SOCKET "sbxfs-box" /* abstract name, in the container's network namespace */
#define BOX_MSG_MAX 512
#define BOX_NFDS 6
#define BOX_ENV_MAX (4 * 1024 * 1024)
#define BOX_CMD_MAX (2 * 1024 * 1024)
#define KILL_GRACE_MS 2000
#define PUMP_CHUNK 65536

enum { FD_CONN = 3, FD_CMD, FD_ENV, FD_STDIN, FD_STDOUT, FD_STDERR, FD_RESULT, FD_LAST = FD_RESULT };

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

static bool name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
			    *s == '-'))
			return false;
	return true;
}

/* A spare's init until its claim (main_init). */
static bool box_spare;

/* No capability in any set (a container given some keeps none here). */
static void drop_caps(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2] = { { 0 } };

	syscall(SYS_capset, &h, d);
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

/* A message and up to BOX_NFDS fds; returns its length, 0 at EOF, -1. */
static ssize_t recv_msg(int sock, char *msg, size_t len, int *fds, int *nfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * BOX_NFDS)];
	struct iovec iov = { .iov_base = msg, .iov_len = len - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	ssize_t n;

	*nfds = 0;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	msg[n] = '\0';
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			for (int i = 0; i < k; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (*nfds < BOX_NFDS)
					fds[(*nfds)++] = fd;
				else
					close(fd);
			}
		}
	return n;
}

static void send_text(int sock, const char *text)
{
	if (sock >= 0 && send(sock, text, strlen(text), MSG_NOSIGNAL) < 0)
		return; /* the daemon may be gone: the job goes on regardless */
}

/* Put conn at FD_CONN and fds[0..5] at FD_CMD..FD_RESULT (without an fd
 * overwriting another before it was moved) and close everything else. */
static int place_fds(int conn, const int fds[BOX_NFDS])
{
	int tmp[BOX_NFDS + 1];

	tmp[0] = fcntl(conn, F_DUPFD, 100);
	for (int i = 0; i < BOX_NFDS; i++)
		tmp[i + 1] = fcntl(fds[i], F_DUPFD, 100);
	for (int i = 0; i <= BOX_NFDS; i++)
		if (tmp[i] < 0 || dup2(tmp[i], FD_CONN + i) < 0)
			return -1;
	close_range(FD_LAST + 1, ~0U, 0);
	return 0;
}

/* ---- the process tree of a supervisor ------------------------------------------------ */

/* Direct children of pid (all its threads), appended to out; count. */
static int children_of(pid_t pid, pid_t *out, int max, int n)
{
	char path[320], buf[8192];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return n;
	while ((e = readdir(d)) && n < max) {
		int fd;
		ssize_t len;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/children", (int)pid, e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		len = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (len <= 0)
			continue;
		buf[len] = '\0';
		for (char *p = buf; *p && n < max;) {
			long c = strtol(p, &p, 10);
			if (c > 0)
				out[n++] = (pid_t)c;
			while (*p == ' ')
				p++;
		}
	}
	closedir(d);
	return n;
}

/* Every descendant of the supervisor gets sig; the number of live ones. */
static int signal_tree(int sig)
{
	static pid_t pids[65536];
	int n = children_of(getpid(), pids, 65536, 0), live = 0;

	for (int i = 0; i < n; i++) /* breadth first: pids grows as we go */
		n = children_of(pids[i], pids, 65536, n);
	for (int i = 0; i < n; i++)
		if (kill(pids[i], sig) == 0)
			live++;
	return live;
}

/* ---- the supervisor ----------------------------------------------------------------------- */

struct sup {
	pid_t job;
	int status;    /* of the job's process, once reaped */
	bool ended;
	const char *state;
	const char *reason;
	int in[2];            /* the read ends of the job's stdout and stderr pipes, -1 once closed */
	unsigned long long total; /* bytes copied into the output files */
	unsigned long long output_max;
	uint64_t kill_at;     /* monotonic ms of the SIGKILL after a SIGTERM, 0 = none */
};

#define BOX_TICK_MS 200
#define BOX_TICK_GAP_MS 1000

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The job's end, its zombie kept (WNOWAIT): while the daemon is still on
 * the line it reads the job's host pid from our children, where a quick
 * job that was reaped already would be missing (found against Podman).
 * The zombie goes with the next reap, or with us. */
static bool reap_keep_job(struct sup *s)
{
	siginfo_t si = { 0 };

	if (waitid(P_PID, (id_t)s->job, &si, WEXITED | WNOHANG | WNOWAIT) || si.si_pid != s->job)
		return false;
	s->status = si.si_code == CLD_EXITED ? (si.si_status & 0xff) << 8 :
						(si.si_status & 0x7f) | (si.si_code == CLD_DUMPED ? 0x80 : 0);
	s->ended = true;
	return true;
}

static void reap(struct sup *s)
{
	int st;
	pid_t p;

	while ((p = waitpid(-1, &st, WNOHANG)) > 0)
		if (p == s->job) {
			s->status = st;
			s->ended = true;
		}
}

/* SIGKILL the whole tree until nothing of it is left (bounded). */
static void kill_tree(struct sup *s)
{
	for (int round = 0; round < 200; round++) {
		reap(s);
		if (!signal_tree(SIGKILL))
			break;
		usleep(round < 20 ? 1000 : 10000);
	}
	reap(s);
}

/* ---- the output ------------------------------------------------------------------------------- */

/* Why pipes and a copy rather than the files themselves: a job writing a
 * file directly could only be measured after the fact, and a process it
 * leaves behind would go on writing, past any limit, after its supervisor
 * has gone (or after it killed the supervisor: they share a uid).  Through
 * pipes every byte passes here and the files never keep more than
 * output_max; when the supervisor ends while something still holds a
 * pipe, a forked copy of it goes on copying (pump_tail), and once nobody
 * reads the pipes, writers get EPIPE: killing the copier stops the output,
 * it never frees it.  A plain copy: splice() refuses the O_APPEND files. */

static void pump_close(struct sup *s, int i)
{
	if (s->in[i] >= 0)
		close(s->in[i]);
	s->in[i] = -1;
}

/* Past the limit: end the job (SIGKILL before the pipes close: it must not
 * die of the SIGPIPE instead); nothing more is kept, writers get EPIPE. */
static void pump_limit(struct sup *s)
{
	bool running = !s->ended;

	if (!s->reason) {
		s->reason = "output limit";
		s->state = "killed";
		kill_tree(s);
		dprintf(FD_STDERR, "\nsbxfs: output limit of %llu bytes reached%s\n", s->output_max,
			running ? ": job killed" : "");
	}
	pump_close(s, 0);
	pump_close(s, 1);
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Copy what pipe i holds now (non-blocking) into its file, up to the limit:
 * the bytes copied, 0 when there was nothing (at EOF the pipe is closed). */
static ssize_t pump_step(struct sup *s, int i)
{
	static char chunk[PUMP_CHUNK];
	size_t room = s->output_max ? (size_t)(s->output_max - s->total) : sizeof(chunk);
	ssize_t n;
	char c;

	if (s->in[i] < 0)
		return 0;
	if (room == 0) {
		/* at the limit: one more byte is the job going past it */
		n = read(s->in[i], &c, 1);
		if (n == 1)
			pump_limit(s);
		else if (n == 0)
			pump_close(s, i);
		return 0;
	}
	n = read(s->in[i], chunk, room < sizeof(chunk) ? room : sizeof(chunk));
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0) {
		pump_close(s, i);
		return 0;
	}
	if (write_all(i ? FD_STDERR : FD_STDOUT, chunk, (size_t)n))
		say("sbxfs-box: cannot keep the job's output: %s", strerror(errno));
	s->total += (unsigned long long)n;
	return n;
}

/* The job's main process has ended: what it wrote is in the pipes, at most
 * a pipe's capacity each; copy that much (or until empty). */
static void pump_drain(struct sup *s)
{
	for (int i = 0; i < 2; i++) {
		long cap = s->in[i] >= 0 ? fcntl(s->in[i], F_GETPIPE_SZ) : 0;
		ssize_t n;

		for (long moved = 0; moved <= cap && (n = pump_step(s, i)) > 0; moved += n)
			;
		if (s->in[i] >= 0 && s->output_max && s->total == s->output_max)
			pump_step(s, i); /* at the limit with bytes left: that is past it */
	}
}

/* The supervisor is about to end, and processes the job left behind still
 * hold a pipe: a forked copy goes on copying (and counting) until they are
 * gone.  It holds nothing else of the job's. */
static void pump_tail(struct sup *s, int conn)
{
	pid_t pid;

	if (s->in[0] < 0 && s->in[1] < 0)
		return;
	pid = fork();
	if (pid == 0) {
		if (conn >= 0)
			close(conn);
		close(FD_RESULT);
		while (s->in[0] >= 0 || s->in[1] >= 0) {
			struct pollfd p[2] = { { .fd = s->in[0], .events = POLLIN }, { .fd = s->in[1], .events = POLLIN } };

			if (poll(p, 2, -1) < 0 && errno != EINTR)
				break;
			for (int i = 0; i < 2; i++)
				if (p[i].revents)
					pump_step(s, i);
		}
		_exit(0);
	}
	if (pid < 0)
		say("sbxfs-box: cannot keep what the job left behind writes: %s", strerror(errno));
	pump_close(s, 0);
	pump_close(s, 1);
}

static char *read_all(int fd, size_t max, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *b = malloc(cap + 1), *nb;
	ssize_t r;

	if (!b)
		return NULL;
	for (;;) {
		if (n == cap) {
			if (cap >= max)
				break;
			cap = cap * 2 > max ? max : cap * 2;
			nb = realloc(b, cap + 1);
			if (!nb)
				break;
			b = nb;
		}
		r = pread(fd, b + n, cap - n, (off_t)n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	b[n] = '\0';
	*len = n;
	return b;
}

/* The environment: NUL-separated KEY=VALUE entries. */
static char **make_envp(int fd)
{
	size_t len, n = 0, k = 0;
	char *text = read_all(fd, BOX_ENV_MAX, &len);
	char **envp;

	if (!text)
		return NULL;
	for (size_t i = 0; i < len; i++)
		n += text[i] == '\0';
	envp = calloc(n + 2, sizeof(*envp));
	if (!envp)
		return NULL;
	for (size_t i = 0; i < len; i += strlen(text + i) + 1)
		if (text[i] && strchr(text + i, '='))
			envp[k++] = text + i;
	return envp;
}

/* The command into a memfd the shell reads as `. /proc/self/fd/3`; the
 * first thing it runs closes fd 3 again, so the job does not inherit it. */
static int make_cmd_fd(int fd)
{
	static const char prefix[] = "exec 3<&-; ";
	size_t len;
	char *cmd = read_all(fd, BOX_CMD_MAX, &len);
	int m = memfd_create("sbxfs-cmd", MFD_CLOEXEC);

	if (!cmd || m < 0 || write(m, prefix, sizeof(prefix) - 1) != (ssize_t)(sizeof(prefix) - 1) ||
	    write(m, cmd, len) != (ssize_t)len || write(m, "\n", 1) != 1) {
		free(cmd);
		return -1;
	}
	free(cmd);
	return m;
}

static void write_result(struct sup *s)
{
	struct timespec ts;
	char text[256];
	int code = 255, sig = 0, n;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (s->ended && WIFSIGNALED(s->status)) {
		sig = WTERMSIG(s->status);
		code = 128 + sig;
	} else if (s->ended) {
		code = WEXITSTATUS(s->status);
	}
	n = snprintf(text, sizeof(text), "{\"state\": \"%s\", \"exit\": %d, \"signal\": %d, \"ended_at\": %.3f%s%s%s}",
		s->state, code, sig, (double)ts.tv_sec + ts.tv_nsec / 1e9, s->reason ? ", \"reason\": \"" : "",
		s->reason ? s->reason : "", s->reason ? "\"" : "");
	if (pwrite(FD_RESULT, text, (size_t)n, 0) != n || ftruncate(FD_RESULT, n))
		say("sbxfs-box: cannot write the result: %s", strerror(errno));
}

static int main_job(const char *name, long timeout, unsigned long long output_max)
{
	struct sup s = { .job = -1, .state = "exited", .in = { -1, -1 }, .output_max = output_max };
	static const char *argv[] = { "sh", "-c", ". /proc/self/fd/3", NULL };
	char **envp;
	int cmdfd, sigfd, tfd = -1, conn = FD_CONN, out[2] = { -1, -1 }, err[2] = { -1, -1 }, gate[2] = { -1, -1 };
	uint64_t ran = 0, last = 0; /* the timeout's clock: ms the job could run */
	sigset_t mask;

	(void)name;
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP && sig != SIGCHLD)
			signal(sig, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	envp = make_envp(FD_ENV);
	cmdfd = make_cmd_fd(FD_CMD);
	if (sigfd < 0 || !envp || cmdfd < 0 || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) || pipe2(gate, O_CLOEXEC)) {
		dprintf(FD_STDERR, "sbxfs: the job's supervisor cannot start: %s\n", strerror(errno));
		s.state = "failed";
		write_result(&s);
		send_text(conn, "error cannot prepare the job");
		return 1;
	}
	/* every signal blocked across the fork: the child inherits our SIG_IGN
	 * dispositions until it resets them, and a kill sent that early must
	 * stay pending until then, not be ignored */
	{
		sigset_t all;
		sigfillset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
	}
	s.job = fork();
	if (s.job == 0) {
		sigset_t none;
		char go;

		/* the start gate: the job's first instruction comes after the
		 * daemon has its pid ("started" below), so a job that kills this
		 * supervisor at once is a lost job, not a failed start; a
		 * supervisor gone before that ends the job unrun */
		close(gate[1]);
		if (read(gate[0], &go, 1) != 1)
			_exit(126);
		close(gate[0]);
		setsid();
		if (dup2(FD_STDIN, 0) < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0 || dup2(cmdfd, 3) < 0)
			_exit(126);
		close_range(4, ~0U, 0);
		for (int sig = 1; sig < NSIG; sig++)
			signal(sig, SIG_DFL);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (chdir("/mnt/user-data/workspace"))
			(void)!chdir("/");
		execve("/bin/sh", (char *const *)argv, envp);
		dprintf(2, "sbxfs: cannot run /bin/sh in the sandbox: %s\n", strerror(errno));
		_exit(127);
	}
	sigprocmask(SIG_SETMASK, &mask, NULL); /* back to SIGCHLD only */
	close(gate[0]);
	close(out[1]);
	close(err[1]);
	s.in[0] = out[0];
	s.in[1] = err[0];
	for (int i = 0; i < 2; i++)
		fcntl(s.in[i], F_SETFL, fcntl(s.in[i], F_GETFL) | O_NONBLOCK);
	if (s.job < 0) {
		dprintf(FD_STDERR, "sbxfs: cannot start the job: %s\n", strerror(errno));
		s.state = "failed";
		write_result(&s);
		send_text(conn, "error fork failed");
		return 1;
	}
	close(cmdfd);
	close(FD_CMD);
	close(FD_ENV);
	close(FD_STDIN);
	{
		char text[64];
		snprintf(text, sizeof(text), "started %d", (int)s.job);
		send_text(conn, text);
	}
	if (write(gate[1], "g", 1) != 1) /* the job may run now */
		dprintf(FD_STDERR, "sbxfs: the job's start gate: %s\n", strerror(errno));
	close(gate[1]);
	if (timeout > 0) {
		struct itimerspec it = { .it_interval = { .tv_nsec = BOX_TICK_MS * 1000000L },
			.it_value = { .tv_nsec = BOX_TICK_MS * 1000000L } };
		tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
		if (tfd >= 0)
			timerfd_settime(tfd, 0, &it, NULL);
		ran = 0;
		last = now_ms();
	}
	while (!s.ended) {
		struct pollfd p[5] = { { .fd = sigfd, .events = POLLIN }, { .fd = tfd, .events = POLLIN },
			{ .fd = conn, .events = POLLIN }, { .fd = s.in[0], .events = POLLIN },
			{ .fd = s.in[1], .events = POLLIN } };
		int wait_ms = -1;
		uint64_t now = now_ms();

		if (s.kill_at)
			wait_ms = s.kill_at > now ? (int)(s.kill_at - now) : 0;
		poll(p, 5, wait_ms);
		for (int i = 0; i < 2; i++)
			if (p[3 + i].revents)
				pump_step(&s, i);
		if (p[0].revents) {
			struct signalfd_siginfo si;
			while (read(sigfd, &si, sizeof(si)) > 0)
				;
			if (conn < 0 || !reap_keep_job(&s))
				reap(&s);
		}
		if (tfd >= 0 && p[1].revents) {
			uint64_t v, t = now_ms();
			(void)!read(tfd, &v, sizeof(v));
			ran += t - last > BOX_TICK_GAP_MS ? BOX_TICK_MS : t - last; /* a gap: paused */
			last = t;
		}
		if (tfd >= 0 && ran >= (uint64_t)timeout * 1000) {
			close(tfd);
			tfd = -1;
			if (!s.ended && !s.reason) {
				s.state = "timed_out";
				signal_tree(SIGTERM);
				s.kill_at = now_ms() + KILL_GRACE_MS;
			}
		}
		if (conn >= 0 && p[2].revents) {
			char b[64];
			if (recv(conn, b, sizeof(b), MSG_DONTWAIT) <= 0 && errno != EAGAIN) {
				close(conn); /* the daemon hung up: fine */
				conn = -1;
			}
		}
		if (s.kill_at && now_ms() >= s.kill_at) {
			s.kill_at = 0;
			kill_tree(&s);
		}
	}
	/* a timed-out or over-limit job takes what it left running with it */
	if (!strcmp(s.state, "timed_out") || s.reason)
		kill_tree(&s);
	pump_drain(&s);
	write_result(&s);
	pump_tail(&s, conn);
	/* until the daemon hung up (it opens a pidfd on us first) */
	for (uint64_t until = now_ms() + 2000; conn >= 0 && now_ms() < until;) {
		struct pollfd p = { .fd = conn, .events = POLLIN };
		char b[64];
		if (poll(&p, 1, (int)(until - now_ms())) <= 0 || recv(conn, b, sizeof(b), MSG_DONTWAIT) <= 0)
			break;
	}
	return 0;
}

/* argv of a job message: "job NAME TIMEOUT OUTPUT_MAX". */
static int parse_job(char *msg, char **name, long *timeout, unsigned long long *output_max)
{
	char *save = NULL, *w0 = strtok_r(msg, " ", &save), *w1 = strtok_r(NULL, " ", &save),
		*w2 = strtok_r(NULL, " ", &save), *w3 = strtok_r(NULL, " ", &save);

	if (!w0 || strcmp(w0, "job") || !w1 || !name_ok(w1) || !w2 || !w3)
		return -1;
	*name = w1;
	*timeout = strtol(w2, NULL, 10);
	*output_max = strtoull(w3, NULL, 10);
	return 0;
}

/* ---- init -------------------------------------------------------------------------------- */

static int box_listen(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	memcpy(a.sun_path + 1, BOX_SOCKET, sizeof(BOX_SOCKET) - 1);
	if (fd < 0 ||
	    bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + sizeof(BOX_SOCKET) - 1)) ||
	    listen(fd, 128))
		return -1;
	return fd;
}

/* Every process of the container but pid 1 and the job supervisors (so
 * they record how their jobs ended), until none is left. */
static int kill_all(void)
{
	char self[PATH_MAX], exe[PATH_MAX], path[64];
	ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int killed = 0;

	if (sl < 0)
		return -1;
	self[sl] = '\0';
	for (int round = 0; round < 50; round++) {
		struct dirent *e;
		DIR *d = opendir("/proc");
		int n = 0;

		if (!d)
			return -1;
		while ((e = readdir(d))) {
			long pid = strtol(e->d_name, NULL, 10);
			ssize_t l;

			if (pid <= 1 || pid == getpid())
				continue;
			snprintf(path, sizeof(path), "/proc/%ld/exe", pid);
			l = readlink(path, exe, sizeof(exe) - 1);
			if (l > 0) {
				exe[l] = '\0';
				if (!strcmp(exe, self)) {
					/* ours: a supervisor is a child of pid 1 */
					char st[512];
					int fd;
					snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
					fd = open(path, O_RDONLY | O_CLOEXEC);
					if (fd >= 0) {
						ssize_t k = read(fd, st, sizeof(st) - 1);
						close(fd);
						char *rp = k > 0 ? (st[k] = '\0', strrchr(st, ')')) : NULL;
						if (rp && strtol(rp + 4, NULL, 10) == 1)
							continue;
					}
				}
			}
			if (kill((pid_t)pid, SIGKILL) == 0)
				n++;
		}
		closedir(d);
		killed += n;
		if (!n)
			break;
		usleep(5000);
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
	}
	return killed;
}

/* "claim UID GID": a spare's init becomes the thread's (see the top).
 * 0, or -1 with nothing changed that matters (the daemon then destroys the
 * spare). */
static int box_claim(const char *msg)
{
	unsigned long uid, gid;
	char extra;
	gid_t g;

	if (!box_spare || sscanf(msg, "claim %lu %lu%c", &uid, &gid, &extra) != 2 || uid == 0 || gid == 0 ||
	    uid >= 0xffffffffUL || gid >= 0xffffffffUL)
		return -1;
	g = (gid_t)gid;
	/* the bounding set first, CAP_SETPCAP (which this needs) last: what
	 * the jobs inherit is then as empty as in a cold create's container */
	for (int c = CAP_LAST_CAP; c >= 0; c--)
		if (c != CAP_SETPCAP)
			prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
	prctl(PR_CAPBSET_DROP, CAP_SETPCAP, 0, 0, 0);
	if (syscall(SYS_setgroups, 1, &g) || syscall(SYS_setresgid, g, g, g) ||
	    syscall(SYS_setresuid, (uid_t)uid, (uid_t)uid, (uid_t)uid))
		return -1;
	drop_caps();
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	box_spare = false;
	return 0;
}

static void serve_one(int conn)
{
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct timeval tv = { .tv_sec = 5 };
	char msg[BOX_MSG_MAX], *name;
	int fds[BOX_NFDS], nfds = 0;
	unsigned long long output_max;
	long timeout;
	pid_t pid;

	setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &clen) || cred.uid != 0 ||
	    recv_msg(conn, msg, sizeof(msg), fds, &nfds) <= 0)
		goto out;
	if (!strcmp(msg, "ping")) {
		send_text(conn, "pong");
	} else if (!strncmp(msg, "claim ", 6)) {
		send_text(conn, box_claim(msg) ? "error claim refused" : "claimed");
	} else if (!strcmp(msg, "killall")) {
		char text[32];
		snprintf(text, sizeof(text), "done %d", kill_all());
		send_text(conn, text);
	} else if (!box_spare && nfds == BOX_NFDS && !parse_job(msg, &name, &timeout, &output_max)) {
		/* no exec: the child is not dumpable from its first instruction on
		 * (inherited from us), while an exec would make it dumpable until
		 * main_job's prctl, and a job of the same uid watching for the
		 * next pid can ptrace it in that moment, with the job's files */
		pid = fork();
		if (pid == 0) {
			sigset_t none;

			sigemptyset(&none);
			sigprocmask(SIG_SETMASK, &none, NULL);
			if (place_fds(conn, fds))
				_exit(125);
			_exit(main_job(name, timeout, output_max));
		}
		if (pid < 0)
			send_text(conn, "error fork failed");
	} else {
		send_text(conn, "error bad request");
	}
out:
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	close(conn);
}

static int main_init(bool spare)
{
	sigset_t mask;
	int lfd, sigfd;

	box_spare = spare;
	if (spare) /* its capabilities stay for the claim: no exec, no job before it */
		prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	else
		drop_caps();
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	lfd = box_listen();
	if (lfd < 0 || sigfd < 0) {
		say("sbxfs-box: cannot serve the daemon: %s", strerror(errno));
		return 1;
	}
	if (chdir("/"))
		return 1;
	for (;;) {
		struct pollfd p[2] = { { .fd = lfd, .events = POLLIN }, { .fd = sigfd, .events = POLLIN } };

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			continue;
		if (p[1].revents) {
			struct signalfd_siginfo si;
			while (read(sigfd, &si, sizeof(si)) > 0)
				;
		}
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		if (p[0].revents) {
			int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			if (conn >= 0)
				serve_one(conn);
		}
	}
}

/* ---- engine mode: a supervisor started by the Engine exec API ----------------------------- */

static int main_connect(const char *sockname)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 10 };
	size_t n = strlen(sockname);
	char msg[BOX_MSG_MAX], *name;
	int fds[BOX_NFDS], nfds = 0, s;
	unsigned long long output_max;
	long timeout;

	drop_caps();
	if (n == 0 || n >= sizeof(a.sun_path) - 1)
		return 2;
	memcpy(a.sun_path + 1, sockname, n);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n))) {
		say("sbxfs-box: cannot reach the daemon: %s", strerror(errno));
		return 1;
	}
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	send_text(s, "hello");
	if (recv_msg(s, msg, sizeof(msg), fds, &nfds) <= 0 || nfds != BOX_NFDS ||
	    parse_job(msg, &name, &timeout, &output_max) || place_fds(s, fds)) {
		say("sbxfs-box: no job from the daemon");
		return 1;
	}
	return main_job(name, timeout, output_max);
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "init"))
		return main_init(false);
	if (argc == 2 && !strcmp(argv[1], "spare"))
		return main_init(true);
	if (argc == 3 && !strcmp(argv[1], "connect"))
		return main_connect(argv[2]);
	say("usage: sbxfs-box init | spare | connect NAME (see providers/helpers/docker_box.c)");
	return 2;
}
