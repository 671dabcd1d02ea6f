/* SPDX-License-Identifier: MIT */
/*
 * local_pasta.c - pasta, started and ended (see local_pasta.h and
 * docs/network.md, "pasta").
 *
 * pasta copies the host's addresses and routes into a tap device of the
 * namespace it is given and turns every flow that leaves through it into an
 * ordinary socket of the host: connectivity without a bridge, a veth to the
 * host or a rule in the host's firewall.  Its dangerous defaults are off:
 * -t/-u none (no host port forwards into the namespace), -T/-U none (no
 * namespace loopback port forwards to the host's loopback), --no-map-gw (the
 * gateway address is not the host's loopback).
 *
 * It runs in a session of its own (a daemon crash leaves it running with the
 * namespace it serves), behind a start gate: the process waits on a pipe
 * until the caller has recorded its pid and start time, then becomes pasta
 * (exec keeps both); a daemon killed before the gate opens leaves nothing.
 *
 * Why as root (--runas 0:0): the namespaces belong to the host's user
 * namespace and joining one takes CAP_SYS_ADMIN there; Debian 12's pasta
 * drops to nobody before it joins a namespace given by path, which then
 * fails.  Once joined it keeps only CAP_SYS_ADMIN and CAP_NET_BIND_SERVICE,
 * confines itself to a mount namespace of its own and a seccomp filter and
 * sets no_new_privs.
 */
#define _GNU_SOURCE
#include "local_pasta.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/egress.h"
#include "../common/log.h"
#include "../common/util.h"

static char local_pasta[PATH_MAX];
static local_spawn_fn local_pasta_spawn; /* set at local_pasta_init, before any start */

int local_pasta_have(void)
{
	return local_pasta[0] != '\0';
}

void local_pasta_init(local_spawn_fn spawn)
{
	static const char *const where[] = { "/usr/bin/pasta", "/usr/local/bin/pasta", NULL };

	local_pasta_spawn = spawn;
	local_pasta[0] = '\0';
	for (int i = 0; where[i]; i++)
		if (!access(where[i], X_OK)) {
			snprintf(local_pasta, sizeof(local_pasta), "%s", where[i]);
			return;
		}
	log_warn("local", "pasta not found (install passt): sandboxes in network mode open cannot be created");
}

enum sbx_err local_pasta_start(const char *scope, int nsfd, const char *logpath, int log_fd, uint64_t deadline_ms,
	struct local_pasta *out, int (*started)(void *arg), void *arg)
{
	int pidfd = -1, left, gate[2] = { -1, -1 };
	enum sbx_err result = SBX_ERR_IO;
	pid_t pid;

	out->pid = 0;
	out->start = 0;
	out->child = 0;
	if (!local_pasta[0]) {
		log_err(scope, "local: network mode open needs pasta (Debian package passt)");
		return SBX_ERR_IO;
	}
	/* the gate: read sees end of file (the shell exits) when the daemon
	 * dies before it opens */
	if (pipe2(gate, O_CLOEXEC)) {
		log_err(scope, "local: cannot start pasta: %s", strerror(errno));
		goto out;
	}
	{
		char *const argv[] = { "/bin/sh", "-c", "read -r go && exec \"$0\" \"$@\"", local_pasta, "--foreground",
			"--quiet", "--runas", "0:0", "--config-net", "--no-map-gw", "--tcp-ports", "none", "--udp-ports",
			"none", "--tcp-ns", "none", "--udp-ns", "none", "--netns", "/proc/self/fd/3", "--log-file",
			(char *)logpath, NULL };
		static char *const env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
		const int fds[LOCAL_SPAWN_FDS] = { gate[0], log_fd, log_fd, nsfd, -1, -1 };

		unlink(logpath); /* a fresh log for this pasta */
		pid = local_pasta_spawn(argv, env, fds);
	}
	if (pid < 0) {
		log_err(scope, "local: cannot start pasta: %s", strerror(errno));
		goto out;
	}
	out->pid = pid;
	out->child = 1;
	out->start = util_proc_starttime(pid);
	if (started && started(arg)) { /* unrecorded: it must not run */
		log_err(scope, "local: cannot record pasta: %s", strerror(errno));
		local_pasta_end(out);
		goto out;
	}
	if (write(gate[1], "go\n", 3) != 3) {
		log_err(scope, "local: pasta did not start: %s", strerror(errno));
		local_pasta_end(out);
		goto out;
	}
	close(gate[1]);
	gate[1] = -1;
	pidfd = pidfd_open(pid, 0);
	left = (int)(deadline_ms > util_now_ms() ? deadline_ms - util_now_ms() : 0);
	if (egress_wait_link(nsfd, left, pidfd)) {
		log_err(scope, "local: pasta did not connect the namespace (%s); see %s",
			errno == ECHILD ? "it exited" : strerror(errno), logpath);
		local_pasta_end(out);
		result = errno == ETIMEDOUT ? SBX_ERR_TIMEOUT : SBX_ERR_IO;
		goto out;
	}
	result = SBX_OK;
out:
	for (int i = 0; i < 2; i++)
		if (gate[i] >= 0)
			close(gate[i]);
	if (pidfd >= 0)
		close(pidfd);
	return result;
}

int local_pasta_alive(struct local_pasta *p)
{
	if (!p->pid)
		return 1;
	if (p->child && waitpid(p->pid, NULL, WNOHANG) == p->pid) {
		p->child = 0; /* reaped: it has ended */
		p->start = 0;
	}
	return p->start && util_proc_starttime(p->pid) == p->start;
}

void local_pasta_end(struct local_pasta *p)
{
	int pidfd;

	if (!p->pid)
		return;
	/* through a pidfd taken while the start time matches: never a
	 * recycled pid; and wait for the end, also of a process that is not
	 * our child (adopted), so "ended" means gone */
	pidfd = p->start && util_proc_starttime(p->pid) == p->start ? pidfd_open(p->pid, 0) : -1;
	if (pidfd >= 0 && util_proc_starttime(p->pid) == p->start && !pidfd_send_signal(pidfd, SIGKILL, NULL, 0)) {
		struct pollfd q = { .fd = pidfd, .events = POLLIN };
		while (poll(&q, 1, 10000) < 0 && errno == EINTR)
			;
	}
	if (pidfd >= 0)
		close(pidfd);
	if (p->child)
		while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
			;
	p->pid = 0;
	p->start = 0;
	p->child = 0;
}
