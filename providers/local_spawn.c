/* SPDX-License-Identifier: MIT */
/*
 * local_spawn.c - how the local provider starts its helper processes
 * (bubblewrap, pasta, sbxfs-exec): without a copy of the daemon (a
 * vfork-like clone: the daemon has many threads and mappings), in a session
 * of their own (a Ctrl-C of the daemon's terminal must not reach
 * sandboxes), with exactly the fds given and no signal blocked.
 *
 * Why a clone of our own for bubblewrap: a sandbox's cgroups hold its
 * limits, and they must hold from bubblewrap's first instruction on (so its
 * init, the cgroup namespace it makes and everything after are inside
 * them).  posix_spawn cannot join a cgroup between the clone and the exec;
 * a launcher that joins and then execs bubblewrap (sbxfs-exec --launch,
 * until 2026-12) cost a whole exec on every create.  And how a process
 * joins matters: a write of cgroup.procs takes cgroup_threadgroup_rwsem for
 * writing, which waits for an RCU grace period whenever the lock was idle
 * (4-14 ms on this project's VM: docs/performance.md, "Cold start").  So
 * local_spawn_joined clones with clone3 straight into the sandbox's v2
 * cgroup (CLONE_INTO_CGROUP), and the child, a single thread, moves itself
 * into each v1 cgroup (memory, pids, cpu of a hybrid host) through the
 * "tasks" file, which for the calling thread takes no such lock; then it
 * execs bubblewrap.  The same guarantee, one exec, no grace period.  A
 * kernel without CLONE_INTO_CGROUP (before 5.7) gets the older way: a
 * vfork-like clone that writes every cgroup.procs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <linux/sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/util.h"
#include "local.h"

/* Move every fd of fds[] that sits in 0..LOCAL_SPAWN_FDS-1 at another
 * number above them (a dup2 onto its number would overwrite it first);
 * src[] gets what to dup2 from, moved[] what to close afterwards. */
static int spawn_move_fds(const int fds[LOCAL_SPAWN_FDS], int src[LOCAL_SPAWN_FDS], int moved[LOCAL_SPAWN_FDS])
{
	for (int i = 0; i < LOCAL_SPAWN_FDS; i++)
		moved[i] = -1;
	for (int i = 0; i < LOCAL_SPAWN_FDS; i++) {
		src[i] = fds[i];
		if (fds[i] >= 0 && fds[i] < LOCAL_SPAWN_FDS && fds[i] != i) {
			moved[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
			if (moved[i] < 0)
				return -1;
			src[i] = moved[i];
		}
	}
	return 0;
}

static void spawn_close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

pid_t local_spawn(char *const argv[], char *const envp[], const int fds[LOCAL_SPAWN_FDS])
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	int moved[LOCAL_SPAWN_FDS], src[LOCAL_SPAWN_FDS];
	sigset_t none;
	pid_t pid = -1;
	int r;

	if (spawn_move_fds(fds, src, moved))
		goto out_moved;
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
	for (int i = 0; i < LOCAL_SPAWN_FDS && !r; i++) {
		if (src[i] >= 0)
			r |= posix_spawn_file_actions_adddup2(&fa, src[i], i);
		else if (i <= 2)
			r |= posix_spawn_file_actions_addopen(&fa, i, "/dev/null", O_RDWR, 0);
	}
	r |= posix_spawn_file_actions_addclosefrom_np(&fa, LOCAL_SPAWN_FDS);
	if (!r && posix_spawn(&pid, argv[0], &fa, &attr, argv, envp))
		pid = -1;
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
out_moved:
	spawn_close_all(moved, LOCAL_SPAWN_FDS);
	return pid;
}

/* ---- the clone of local_spawn_joined ------------------------------------------------ */

#define SPAWN_STACK (128 * 1024)

/* What the child does between its clone and its exec (set up by the
 * parent; with CLONE_VM it is shared, err written by the child when it
 * cannot exec: the parent runs again only after the exec or the exit). */
struct spawn_child {
	char *const *argv, *const *envp;
	int src[LOCAL_SPAWN_FDS]; /* what becomes 0..LOCAL_SPAWN_FDS-1 (-1: /dev/null for 0..2, else closed) */
	int null_fd;
	int join[CGROUP_MAX_JOIN], njoin; /* files the child writes "0" to, open for writing */
	int report;                       /* clone3: a pipe for errno when the exec fails */
	volatile int err;
};

/* The child's work: only system calls.  Returns only on failure (errno). */
__attribute__((no_sanitize_address)) static void spawn_child_run(struct spawn_child *c)
{
	struct sigaction dfl;
	sigset_t none;

	/* every signal blocked (by the parent): no handler of the daemon runs
	 * here; every disposition the default before anything is unblocked */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &dfl, NULL); /* SIGKILL, SIGSTOP and libc's own refuse: fine */
	if (setsid() < 0)
		return;
	/* into the sandbox's cgroups before anything else runs as this process */
	for (int i = 0; i < c->njoin; i++)
		if (write(c->join[i], "0", 1) != 1)
			return;
	for (int i = 0; i < LOCAL_SPAWN_FDS; i++) {
		int from = c->src[i] >= 0 ? c->src[i] : i <= 2 ? c->null_fd : -1;
		if (from < 0)
			close(i);
		else if (from == i ? fcntl(i, F_SETFD, 0) < 0 : dup2(from, i) < 0)
			return;
	}
	/* the rest closes at the exec (the report pipe must stay until then) */
	close_range(LOCAL_SPAWN_FDS, ~0U, CLOSE_RANGE_CLOEXEC);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execve(c->argv[0], c->argv, c->envp);
}

/* CLONE_VM child: on its own stack, sharing the daemon's memory until its
 * exec.  Not instrumented: a sanitizer's bookkeeping of this stack would
 * outlive it in the shared memory. */
__attribute__((no_sanitize_address)) static int spawn_vm_child(void *p)
{
	struct spawn_child *c = p;

	spawn_child_run(c);
	c->err = errno ? errno : EIO;
	_exit(127);
}

/* The fallback (a kernel without clone3's CLONE_INTO_CGROUP): a vfork-like
 * clone that writes itself into every cgroup.procs, which waits for an RCU
 * grace period per create (cgroup_threadgroup_rwsem). */
static pid_t spawn_vm(struct spawn_child *c, const struct cgroup_join *j)
{
	void *stack;
	pid_t pid;

	for (c->njoin = 0; c->njoin < j->n; c->njoin++)
		if ((c->join[c->njoin] = open(j->path[c->njoin], O_WRONLY | O_CLOEXEC)) < 0)
			return -1;
	stack = mmap(NULL, SPAWN_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		return -1;
	pid = clone(spawn_vm_child, (char *)stack + SPAWN_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, c);
	if (pid > 0 && c->err) { /* it never ran the program: reap it */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		errno = c->err;
		pid = -1;
	}
	munmap(stack, SPAWN_STACK);
	return pid;
}

/* The v1 "tasks" file next to a cgroup.procs path. */
static int spawn_open_tasks(const char *procs)
{
	char path[PATH_MAX];
	const char *slash = strrchr(procs, '/');

	if (!slash || str_fmt(path, sizeof(path), "%.*s/tasks", (int)(slash - procs), procs))
		return -1;
	return open(path, O_WRONLY | O_CLOEXEC);
}

/* The clone3 child: report errno when the exec failed. */
__attribute__((noreturn, no_sanitize_address)) static void spawn_clone3_child(struct spawn_child *c)
{
	int e;

	spawn_child_run(c);
	e = errno ? errno : EIO;
	c->err = e; /* CLONE_VM: the parent reads it; else the pipe tells it */
	if (write(c->report, &e, sizeof(e)) < 0)
		_exit(126);
	_exit(127);
}

/*
 * clone3 itself.  On x86-64, vfork-like (CLONE_VM | CLONE_VFORK): the child
 * runs on the parent's stack below its frame, as vfork()'s does, and never
 * returns from this function (it execs or exits), so it needs the system
 * call issued here, not through syscall(3), whose return the child would
 * take with the parent's return address.  That saves the copy of the
 * daemon's page tables a fork-like clone makes (about 1 ms a create here).
 * Elsewhere, and under ASan, fork-like.
 */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((noinline)) static pid_t spawn_clone3_call(struct clone_args *args, struct spawn_child *c)
{
	long ret;

	args->flags |= CLONE_VM | CLONE_VFORK;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "0"((long)SYS_clone3), "D"(args), "S"(sizeof(*args))
			 : "rcx", "r11", "memory");
	if (ret == 0)
		spawn_clone3_child(c);
	if (ret < 0) {
		errno = (int)-ret;
		return -1;
	}
	return (pid_t)ret;
}
#else
static pid_t spawn_clone3_call(struct clone_args *args, struct spawn_child *c)
{
	pid_t pid = (pid_t)syscall(SYS_clone3, args, sizeof(*args));

	if (pid == 0)
		spawn_clone3_child(c);
	return pid;
}
#endif

/* The usual way: clone3 straight into the v2 cgroup (CLONE_INTO_CGROUP),
 * and the child moves its single thread into each v1 cgroup through its
 * "tasks" file.  Neither takes cgroup_threadgroup_rwsem for writing, whose
 * RCU grace period (4-14 ms on this project's VM) a write of cgroup.procs
 * waits for.  Without CLONE_VM (a copy-on-write child: clone3 has no
 * function-and-stack form), so errno comes back through a pipe.  -1 with
 * errno ENOSYS: the kernel has no such clone3. */
static pid_t spawn_clone3(struct spawn_child *c, const struct cgroup_join *j)
{
	struct clone_args args = { .flags = 0, .exit_signal = SIGCHLD };
	int v2 = -1, p[2] = { -1, -1 }, e = 0;
	pid_t pid = -1;
	ssize_t n;

	for (int i = 0; i < j->n; i++) {
		char dir[PATH_MAX];
		const char *slash = strrchr(j->path[i], '/');
		if (!j->v2[i]) {
			if ((c->join[c->njoin] = spawn_open_tasks(j->path[i])) < 0)
				goto out;
			c->njoin++;
		} else if (!slash || str_fmt(dir, sizeof(dir), "%.*s", (int)(slash - j->path[i]), j->path[i]) ||
			   (v2 = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
			goto out;
		}
	}
	if (v2 >= 0) {
		args.flags |= CLONE_INTO_CGROUP;
		args.cgroup = (uint64_t)v2;
	}
	if (pipe2(p, O_CLOEXEC))
		goto out;
	c->report = fcntl(p[1], F_DUPFD_CLOEXEC, 10);
	if (c->report < 0)
		goto out;
	pid = spawn_clone3_call(&args, c);
	if (pid < 0 && (errno == E2BIG || errno == EINVAL))
		errno = ENOSYS;
	if (pid < 0)
		goto out;
	close(c->report);
	close(p[1]);
	c->report = p[1] = -1;
	while ((n = read(p[0], &e, sizeof(e))) < 0 && errno == EINTR)
		;
	if (n == sizeof(e)) { /* it never ran the program: reap it */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		pid = -1;
		errno = e;
	}
out:
	e = errno;
	spawn_close_all(&v2, 1);
	spawn_close_all(p, 2);
	spawn_close_all(&c->report, 1);
	errno = e;
	return pid;
}

pid_t local_spawn_joined(char *const argv[], char *const envp[], const int fds[LOCAL_SPAWN_FDS],
	const struct cgroup_join *j)
{
	struct spawn_child c = { .argv = argv, .envp = envp, .null_fd = -1, .report = -1 };
	int moved[LOCAL_SPAWN_FDS], saved;
	sigset_t all, old;
	pid_t pid = -1;

	for (int i = 0; i < CGROUP_MAX_JOIN; i++)
		c.join[i] = -1;
	if (spawn_move_fds(fds, c.src, moved))
		goto out;
	c.null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (c.null_fd < 0 || (saved = fcntl(c.null_fd, F_DUPFD_CLOEXEC, 10)) < 0)
		goto out;
	close(c.null_fd);
	c.null_fd = saved;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pid = spawn_clone3(&c, j);
	if (pid < 0 && errno == ENOSYS) {
		spawn_close_all(c.join, CGROUP_MAX_JOIN);
		c.njoin = 0;
		pid = spawn_vm(&c, j);
	}
	saved = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = saved;
out:
	saved = errno;
	spawn_close_all(c.join, CGROUP_MAX_JOIN);
	spawn_close_all(&c.null_fd, 1);
	spawn_close_all(moved, LOCAL_SPAWN_FDS);
	errno = saved;
	return pid;
}
