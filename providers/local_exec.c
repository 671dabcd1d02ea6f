/* SPDX-License-Identifier: MIT */
/*
 * local_exec.c - sbxfs-exec, the job supervisor of the local provider.
 *
 * The daemon starts one per job (as root, in its own session) and forgets
 * about the details: the supervisor joins the sandbox's namespaces, starts
 * `/bin/sh -c CMD` as the sandbox's uid with no capabilities and
 * no_new_privs, enforces the timeout, and records how the job ended in
 * JOB_DIR/result.  Because the supervisor, not the daemon, writes the
 * result, a job outlives a crashed daemon and still reports its end.
 *
 *   sbxfs-exec --pid=INIT --start=STARTTIME --uid=U --gid=G --timeout=SECS
 *              --job-dir=DIR [--cgroup=PATH] -- CMD
 *
 * The job's environment is this process's environment.
 * Files in DIR: stdin (read, optional), stdout and stderr (appended), pgid
 * (the job's process group = its host pid), cgroup (the job's cgroup),
 * result (JSON, written atomically at the end), kill-requested (written by
 * the daemon before a kill, so the result says "killed").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <linux/capability.h>

#define KILL_GRACE_SECONDS 2

extern char **environ;

static volatile sig_atomic_t timed_out;

static void on_alarm(int sig)
{
	(void)sig;
	timed_out = 1;
}

static void die(const char *what)
{
	fprintf(stderr, "sbxfs-exec: %s: %s\n", what, strerror(errno));
	exit(125);
}

static int open_ns(pid_t pid, const char *ns)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, ns);
	return open(path, O_RDONLY | O_CLOEXEC);
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

static void write_at(int dirfd, const char *name, const char *text)
{
	char tmp[64];
	int fd;

	snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (write(fd, text, strlen(text)) < 0)
		fprintf(stderr, "sbxfs-exec: write %s: %s\n", name, strerror(errno));
	close(fd);
	renameat(dirfd, tmp, dirfd, name);
}

static void drop_privileges(uid_t uid, gid_t gid)
{
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) && errno == EINVAL)
			break;
	if (setgroups(0, NULL) || setresgid(gid, gid, gid) || setresuid(uid, uid, uid))
		die("dropping privileges");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		die("no_new_privs");
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) && errno != EINVAL)
		die("ambient capabilities");
}

static void kill_job(pid_t pgid, int cgkill_fd)
{
	kill(-pgid, SIGTERM);
	for (int i = 0; i < KILL_GRACE_SECONDS * 20; i++) {
		if (kill(-pgid, 0) && errno == ESRCH)
			break;
		usleep(50000);
	}
	if (cgkill_fd >= 0 && write(cgkill_fd, "1", 1) != 1)
		fprintf(stderr, "sbxfs-exec: cgroup.kill: %s\n", strerror(errno));
	kill(-pgid, SIGKILL);
}

int main(int argc, char **argv)
{
	pid_t init = 0, child;
	unsigned long long start = 0;
	uid_t uid = 0;
	gid_t gid = 0;
	long timeout = 600;
	const char *job_dir = NULL, *cgroup = NULL, *cmd = NULL;
	static const char *nss[] = { "ipc", "uts", "net", "pid", "mnt" };
	int nsfd[5], rootfd, dirfd, in, out, err, cgprocs = -1, cgkill = -1, status = 0, i, sync[2];
	char text[256], path[PATH_MAX];

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strncmp(a, "--pid=", 6))
			init = (pid_t)strtol(a + 6, NULL, 10);
		else if (!strncmp(a, "--start=", 8))
			start = strtoull(a + 8, NULL, 10);
		else if (!strncmp(a, "--uid=", 6))
			uid = (uid_t)strtoul(a + 6, NULL, 10);
		else if (!strncmp(a, "--gid=", 6))
			gid = (gid_t)strtoul(a + 6, NULL, 10);
		else if (!strncmp(a, "--timeout=", 10))
			timeout = strtol(a + 10, NULL, 10);
		else if (!strncmp(a, "--job-dir=", 10))
			job_dir = a + 10;
		else if (!strncmp(a, "--cgroup=", 9))
			cgroup = a + 9;
		else if (!strcmp(a, "--")) {
			cmd = i + 1 < argc ? argv[i + 1] : NULL;
			break;
		}
	}
	if (!init || !job_dir || !cmd || uid == 0) {
		fprintf(stderr, "usage: sbxfs-exec --pid=N --start=T --uid=U --gid=G --timeout=S --job-dir=DIR [--cgroup=P] -- CMD\n");
		return 2;
	}
	dirfd = open(job_dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	if (dirfd < 0)
		die(job_dir);
	in = openat(dirfd, "stdin", O_RDONLY | O_CLOEXEC);
	if (in < 0)
		in = open("/dev/null", O_RDONLY | O_CLOEXEC);
	out = openat(dirfd, "stdout", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	err = openat(dirfd, "stderr", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (in < 0 || out < 0 || err < 0)
		die("opening the job's streams");
	if (starttime(init) != start) {
		dprintf(err, "sbxfs: the sandbox has ended\n");
		write_at(dirfd, "result", "{\"state\": \"failed\", \"exit\": 125, \"signal\": 0, \"error\": \"sandbox gone\"}");
		return 1;
	}
	for (i = 0; i < 5; i++)
		if ((nsfd[i] = open_ns(init, nss[i])) < 0)
			die("opening the sandbox's namespaces");
	snprintf(path, sizeof(path), "/proc/%d/root", (int)init);
	rootfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		die("opening the sandbox's root");
	if (cgroup) {
		if (mkdir(cgroup, 0755) && errno != EEXIST) {
			/* the sandbox cgroup may not exist yet */
			char parent[PATH_MAX];
			snprintf(parent, sizeof(parent), "%s", cgroup);
			char *slash = strrchr(parent, '/');
			if (slash) {
				*slash = '\0';
				mkdir(parent, 0755);
			}
			mkdir(cgroup, 0755);
		}
		snprintf(path, sizeof(path), "%s/cgroup.procs", cgroup);
		cgprocs = open(path, O_WRONLY | O_CLOEXEC);
		snprintf(path, sizeof(path), "%s/cgroup.kill", cgroup);
		cgkill = open(path, O_WRONLY | O_CLOEXEC);
		if (cgprocs >= 0)
			write_at(dirfd, "cgroup", cgroup);
	}
	for (i = 0; i < 5; i++)
		if (setns(nsfd[i], 0))
			die("joining the sandbox");
	if (fchdir(rootfd) || chroot("."))
		die("entering the sandbox's root");
	if (pipe2(sync, O_CLOEXEC))
		die("pipe");
	child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		if (cgprocs >= 0 && write(cgprocs, "0", 1) != 1)
			die("joining the job cgroup");
		setsid();
		close(sync[0]);
		close(sync[1]); /* the parent now knows the job is in its cgroup and group */
		close(3);       /* the daemon's readiness pipe is not the job's */
		if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
			die("dup2");
		drop_privileges(uid, gid);
		umask(022); /* the daemon runs with umask 0 (its creates carry the caller's) */
		if (chdir("/mnt/user-data/workspace"))
			chdir("/");
		signal(SIGPIPE, SIG_DFL);
		execle("/bin/sh", "sh", "-c", cmd, (char *)NULL, environ);
		fprintf(stderr, "sbxfs: cannot run /bin/sh in the sandbox: %s\n", strerror(errno));
		_exit(127);
	}
	close(sync[1]);
	while (read(sync[0], text, 1) < 0 && errno == EINTR)
		;
	close(sync[0]);
	snprintf(text, sizeof(text), "%d\n", (int)child);
	write_at(dirfd, "pgid", text);
	if (write(3, "R", 1) != 1) /* tell the daemon: the job can be signalled now */
		fprintf(stderr, "sbxfs-exec: cannot report the start\n");
	close(3);
	{
		/* no SA_RESTART: the alarm must interrupt waitpid() */
		struct sigaction sa = { .sa_handler = on_alarm };
		sigemptyset(&sa.sa_mask);
		sigaction(SIGALRM, &sa, NULL);
	}
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	if (timeout > 0)
		alarm((unsigned)timeout);
	while (waitpid(child, &status, 0) < 0) {
		if (errno != EINTR)
			die("waitpid");
		if (timed_out) {
			kill_job(child, cgkill);
			alarm(0);
		}
	}
	{
		struct timespec ts;
		const char *state = "exited";
		int code, sig = 0;
		json_t *o;
		char *j;

		clock_gettime(CLOCK_REALTIME, &ts);
		if (WIFSIGNALED(status)) {
			sig = WTERMSIG(status);
			code = 128 + sig;
		} else {
			code = WEXITSTATUS(status);
		}
		if (timed_out)
			state = "timed_out";
		else if (WIFSIGNALED(status) && faccessat(dirfd, "kill-requested", F_OK, 0) == 0)
			state = "killed";
		o = json_pack("{s:s,s:i,s:i,s:f}", "state", state, "exit", code, "signal", sig, "ended_at",
			(double)ts.tv_sec + ts.tv_nsec / 1e9);
		j = o ? json_dumps(o, JSON_COMPACT) : NULL;
		if (j)
			write_at(dirfd, "result", j);
		free(j);
		json_decref(o);
	}
	/* _exit: no atexit work after the setns()/chroot() of this process
	 * (sanitizer runtimes hang trying to inspect it). */
	_exit(0);
}
