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
 * A spare (pool.prewarm, providers/local_claim.c) has no uid yet: with
 * --spare it keeps root (its bounding set already empty) and, before it
 * says "ready", makes the FIFO /run/sbxfs-claim (0600, root's; /run is the
 * sandbox's own tmpfs) and holds it open read-write, so the daemon's
 * non-blocking open for writing always finds a reader, also a daemon that
 * restarted since.  Nothing else runs in a spare.  At claim the daemon
 * writes "UID GID\n" there; the init removes the FIFO and drops to that uid
 * exactly as above, which the daemon sees in /proc before it hands the
 * sandbox out.  A malformed line or a uid 0 ends the init (the claim fails).
 *
 *   sbxfs-init --uid=U --gid=G
 *   sbxfs-init --spare
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CLAIM_FIFO "/run/sbxfs-claim"

static void on_chld(int sig)
{
	(void)sig;
}

static int drop_to(unsigned long uid, unsigned long gid)
{
	if (setgroups(0, NULL) || setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) ||
	    setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
		fprintf(stderr, "sbxfs-init: dropping privileges: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/* A spare: wait for the claim's "UID GID\n" on fd, then drop to it. */
static int await_claim(int fd)
{
	char line[64];
	size_t len = 0;
	unsigned long uid, gid;
	char *end;

	while (len < sizeof(line) - 1 && (len == 0 || line[len - 1] != '\n')) {
		ssize_t n = read(fd, line + len, sizeof(line) - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		len += (size_t)n;
	}
	line[len] = '\0';
	errno = 0;
	uid = strtoul(line, &end, 10);
	if (errno || *end != ' ')
		return -1;
	gid = strtoul(end + 1, &end, 10);
	if (errno || *end != '\n' || uid == 0 || gid == 0) {
		fprintf(stderr, "sbxfs-init: bad claim line\n");
		return -1;
	}
	close(fd);
	unlink(CLAIM_FIFO);
	return drop_to(uid, gid);
}

int main(int argc, char **argv)
{
	unsigned long uid = 0, gid = 0;
	sigset_t chld, old;
	struct sigaction sa;
	int spare = 0, claim_fd = -1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--spare"))
			spare = 1;
		else if (!strncmp(argv[i], "--uid=", 6))
			uid = strtoul(argv[i] + 6, NULL, 10);
		else if (!strncmp(argv[i], "--gid=", 6))
			gid = strtoul(argv[i] + 6, NULL, 10);
	}
	if (!spare && (uid == 0 || gid == 0)) {
		fprintf(stderr, "sbxfs-init: --uid and --gid must name an unprivileged account\n");
		return 2;
	}
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) && errno == EINVAL)
			break;
	if (spare) {
		if (mkfifo(CLAIM_FIFO, 0600) || (claim_fd = open(CLAIM_FIFO, O_RDWR | O_CLOEXEC)) < 0) {
			fprintf(stderr, "sbxfs-init: %s: %s\n", CLAIM_FIFO, strerror(errno));
			return 1;
		}
	} else if (drop_to(uid, gid)) {
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
	if (claim_fd >= 0) {
		if (claim_fd > 3)
			close_range(3, (unsigned)claim_fd - 1, 0);
		close_range((unsigned)claim_fd + 1, ~0U, 0);
		if (await_claim(claim_fd))
			return 1;
	} else {
		close_range(3, ~0U, 0);
	}

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
