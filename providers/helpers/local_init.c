/* SPDX-License-Identifier: MIT */
/*
 * local_init.c - sbxfs-init, pid 1 of a local sandbox.
 *
 * bubblewrap starts it (--as-pid-1) as root inside the new namespaces; it
 * drops to the sandbox's uid at once (no capabilities, empty bounding set,
 * no_new_privs), says "ready" on fd 4 (a socket), waits for the daemon's
 * "go" on it (sent once the sandbox is recorded: without it, it exits) and
 * then only reaps the orphans that jobs leave behind, forever.  It is
 * linked statically so that it runs on any root filesystem (local.rootfs)
 * and is bind-mounted read-only.
 *
 * As pid 1 of its namespace it ignores signals it has no handler for, also
 * from inside the sandbox, so only SIGKILL from the host ends it, and with
 * it every process of the sandbox.
 *
 *   sbxfs-init --uid=U --gid=G
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_chld(int sig)
{
	(void)sig;
}

int main(int argc, char **argv)
{
	unsigned long uid = 0, gid = 0;
	sigset_t chld, old;
	struct sigaction sa;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--uid=", 6))
			uid = strtoul(argv[i] + 6, NULL, 10);
		else if (!strncmp(argv[i], "--gid=", 6))
			gid = strtoul(argv[i] + 6, NULL, 10);
	}
	if (uid == 0 || gid == 0) {
		fprintf(stderr, "sbxfs-init: --uid and --gid must name an unprivileged account\n");
		return 2;
	}
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) && errno == EINVAL)
			break;
	if (setgroups(0, NULL) || setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) ||
	    setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
		fprintf(stderr, "sbxfs-init: dropping privileges: %s\n", strerror(errno));
		return 1;
	}
	if (chdir("/"))
		return 1;
	if (write(4, "ready\n", 6) != 6) {
		fprintf(stderr, "sbxfs-init: cannot report readiness: %s\n", strerror(errno));
		return 1;
	}
	/* the daemon answers once it has recorded the sandbox; without that
	 * answer (it died) nothing would ever end this sandbox: exit */
	{
		char go;
		ssize_t n;

		while ((n = read(4, &go, 1)) < 0 && errno == EINTR)
			;
		if (n != 1) {
			fprintf(stderr, "sbxfs-init: the daemon went away before recording the sandbox\n");
			return 1;
		}
	}
	close_range(3, ~0U, 0);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_chld;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, NULL);
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	for (;;) {
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		sigsuspend(&old); /* SIGCHLD (blocked otherwise) wakes us: no lost wake-up */
	}
}
