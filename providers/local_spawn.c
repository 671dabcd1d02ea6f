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
 * them).  posix_spawn cannot join a cgroup between the clone and the exec,
 * and cgroup v1 hierarchies (memory, pids, cpu on hybrid hosts) have no
 * CLONE_INTO_CGROUP; starting a launcher that joins and then execs
 * bubblewrap cost a whole exec on every create (docs/performance.md, "Cold
 * start").  So the child of local_spawn_joined writes itself into each
 * cgroup.procs (fds the parent opened) and then execs bubblewrap: the same
 * guarantee, one exec.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* Shared with the child (CLONE_VM): set up by the parent, err written by
 * the child when it cannot exec (the parent runs again only after the
 * child's exec or exit: CLONE_VFORK). */
struct spawn_child {
	char *const *argv, *const *envp;
	int src[LOCAL_SPAWN_FDS]; /* what becomes 0..LOCAL_SPAWN_FDS-1 (-1: /dev/null for 0..2, else closed) */
	int null_fd;
	int join[CGROUP_MAX_JOIN], njoin; /* cgroup.procs files, open for writing */
	volatile int err;
};

/* The child: only system calls, on its own stack, sharing the daemon's
 * memory until its exec.  Not instrumented: a sanitizer's bookkeeping of
 * this stack would outlive it in the shared memory. */
__attribute__((no_sanitize_address)) static int spawn_child_main(void *p)
{
	struct spawn_child *c = p;
	struct sigaction dfl;
	sigset_t none;

	/* every signal blocked (by the parent): no handler of the daemon runs
	 * here; every disposition the default before anything is unblocked */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &dfl, NULL); /* SIGKILL, SIGSTOP and libc's own refuse: fine */
	if (setsid() < 0)
		goto fail;
	/* into the sandbox's cgroups before anything else runs as this process */
	for (int i = 0; i < c->njoin; i++)
		if (write(c->join[i], "0", 1) != 1)
			goto fail;
	for (int i = 0; i < LOCAL_SPAWN_FDS; i++) {
		int from = c->src[i] >= 0 ? c->src[i] : i <= 2 ? c->null_fd : -1;
		if (from < 0)
			close(i);
		else if (from == i ? fcntl(i, F_SETFD, 0) < 0 : dup2(from, i) < 0)
			goto fail;
	}
	close_range(LOCAL_SPAWN_FDS, ~0U, 0);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execve(c->argv[0], c->argv, c->envp);
fail:
	c->err = errno ? errno : EIO;
	_exit(127);
}

pid_t local_spawn_joined(char *const argv[], char *const envp[], const int fds[LOCAL_SPAWN_FDS],
	const struct cgroup_join *j)
{
	struct spawn_child c = { .argv = argv, .envp = envp, .null_fd = -1 };
	int moved[LOCAL_SPAWN_FDS], saved;
	sigset_t all, old;
	void *stack = MAP_FAILED;
	pid_t pid = -1;

	for (int i = 0; i < CGROUP_MAX_JOIN; i++)
		c.join[i] = -1;
	if (spawn_move_fds(fds, c.src, moved))
		goto out;
	c.null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (c.null_fd < 0)
		goto out;
	for (c.njoin = 0; c.njoin < j->n; c.njoin++)
		if ((c.join[c.njoin] = open(j->path[c.njoin], O_WRONLY | O_CLOEXEC)) < 0)
			goto out;
	stack = mmap(NULL, SPAWN_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		goto out;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pid = clone(spawn_child_main, (char *)stack + SPAWN_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
	saved = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = saved;
	if (pid > 0 && c.err) { /* it never ran the program: reap it */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		errno = c.err;
		pid = -1;
	}
out:
	saved = errno;
	if (stack != MAP_FAILED)
		munmap(stack, SPAWN_STACK);
	spawn_close_all(c.join, CGROUP_MAX_JOIN);
	spawn_close_all(&c.null_fd, 1);
	spawn_close_all(moved, LOCAL_SPAWN_FDS);
	errno = saved;
	return pid;
}
