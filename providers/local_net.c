/* SPDX-License-Identifier: MIT */
/*
 * local_net.c - the network of a local sandbox (DESIGN §7, docs/network.md).
 *
 * bubblewrap always gives the sandbox a network namespace of its own
 * (--unshare-net: loopback only).  Then, before the sandbox is handed out:
 *   - every mode: the nftables ruleset of its mode is installed inside that
 *     namespace (common/egress.h); the sandbox, without capabilities, cannot
 *     change it;
 *   - open: pasta (Debian's passt package) gives the namespace user-mode
 *     connectivity: it copies the host's addresses and routes into a tap
 *     device and turns the sandbox's flows into ordinary sockets of the
 *     host.  It runs with every port forwarding off (-t/-u/-T/-U none: the
 *     sandbox cannot reach the host's loopback ports, the host cannot reach
 *     the sandbox's) and with --no-map-gw (the gateway address is not the
 *     host's loopback); the ruleset keeps private, link-local, metadata and
 *     the host's own addresses out of reach;
 *   - isolated and allowlist: nothing more (allowlist's proxy listener is
 *     the daemon's, net/proxy.h).
 *
 * pasta is one process per open sandbox, started by the daemon in its own
 * session behind a start gate, recorded in local.json with its start time
 * like the init before the gate opens, so a restarted daemon adopts it and
 * destroy ends it (a daemon killed before the gate opens leaves nothing
 * running); a sandbox whose pasta has died fails its health check (and is
 * recreated on reclaim).
 *
 * Why pasta runs as root (--runas 0:0): the namespace belongs to the host's
 * user namespace, and joining it takes CAP_SYS_ADMIN there; pasta keeps
 * only that and CAP_NET_BIND_SERVICE, and confines itself (its own mount
 * namespace, a seccomp filter, no_new_privs) once it has joined.  Newer
 * passt releases can do this as an unprivileged user; Debian 12's cannot.
 */
#define _GNU_SOURCE
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

#include "../common/buf.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../common/egress.h"
#include "local_net.h"

static char local_pasta[PATH_MAX];

int local_net_have_pasta(void)
{
	return local_pasta[0] != '\0';
}

static local_spawn_fn local_net_spawn; /* set at local_net_init, before any create */

void local_net_init(local_spawn_fn spawn)
{
	static const char *const where[] = { "/usr/bin/pasta", "/usr/local/bin/pasta", NULL };

	local_net_spawn = spawn;
	local_pasta[0] = '\0';
	for (int i = 0; where[i]; i++)
		if (!access(where[i], X_OK)) {
			snprintf(local_pasta, sizeof(local_pasta), "%s", where[i]);
			return;
		}
	log_warn("local", "pasta not found (install passt): sandboxes in network mode open cannot be created");
}

int local_net_nsfd(pid_t init)
{
	char path[64];

	if (str_fmt(path, sizeof(path), "/proc/%d/ns/net", (int)init))
		return -1;
	return open(path, O_RDONLY | O_CLOEXEC);
}

static enum sbx_err pasta_start(const char *scope, int nsfd, const struct sbx_spec *spec, int log_fd,
	uint64_t deadline_ms, struct local_net *out, int (*started)(void *arg), void *arg)
{
	struct buf logpath = BUF_INIT(BUF_CAP_PATH);
	int pidfd = -1, left, gate[2] = { -1, -1 };
	enum sbx_err result = SBX_ERR_IO;
	pid_t pid;

	if (!local_pasta[0]) {
		log_err(scope, "local: network mode open needs pasta (Debian package passt)");
		return SBX_ERR_IO;
	}
	if (buf_addf(&logpath, "%s/pasta.log", spec->dirs.thread_dir))
		return SBX_ERR_NOMEM;
	/* A start gate: the process waits on a pipe before it becomes pasta
	 * (exec keeps its pid and start time), so it is recorded before it
	 * runs; a daemon killed before opening the gate leaves nothing (the
	 * read sees end of file and the shell exits). */
	if (pipe2(gate, O_CLOEXEC)) {
		log_err(scope, "local: cannot start pasta: %s", strerror(errno));
		goto out;
	}
	{
		char *const argv[] = { "/bin/sh", "-c", "read -r go && exec \"$0\" \"$@\"", local_pasta, "--foreground",
			"--quiet", "--runas", "0:0", "--config-net", "--no-map-gw", "--tcp-ports", "none", "--udp-ports",
			"none", "--tcp-ns", "none", "--udp-ns", "none", "--netns", "/proc/self/fd/3", "--log-file",
			logpath.ptr, NULL };
		static char *const env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
		const int fds[LOCAL_SPAWN_FDS] = { gate[0], log_fd, log_fd, nsfd, -1, -1 };

		unlink(logpath.ptr); /* a fresh log for this pasta */
		pid = local_net_spawn(argv, env, fds);
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
		local_net_down(out);
		goto out;
	}
	if (write(gate[1], "go\n", 3) != 3) {
		log_err(scope, "local: pasta did not start: %s", strerror(errno));
		local_net_down(out);
		goto out;
	}
	close(gate[1]);
	gate[1] = -1;
	pidfd = pidfd_open(pid, 0);
	left = (int)(deadline_ms > util_now_ms() ? deadline_ms - util_now_ms() : 0);
	if (egress_wait_link(nsfd, left, pidfd)) {
		log_err(scope, "local: pasta did not connect the sandbox (%s); see %s",
			errno == ECHILD ? "it exited" : strerror(errno), logpath.ptr);
		local_net_down(out);
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
	buf_free(&logpath);
	return result;
}

enum sbx_err local_net_rules_start(struct local_net_rules *r, const char *scope, pid_t init,
	const struct sbx_spec *spec, const char *rootfs)
{
	const struct sbx_config *cfg = spec->cfg;
	struct buf resolv = BUF_INIT(BUF_CAP_PATH);
	/* the namespace bubblewrap made a moment ago: nothing in it to replace */
	struct egress_rules rules = { .mode = cfg->net_mode, .allow_private = cfg->allow_private, .fresh = true };

	r->nsfd = local_net_nsfd(init);
	if (r->nsfd < 0) {
		log_err(scope, "local: cannot open the sandbox's network namespace: %s", strerror(errno));
		return SBX_ERR_IO;
	}
	/* the resolver the sandbox is told about (its /etc/resolv.conf) may be
	 * asked on port 53 even when its address is private */
	if (cfg->net_mode == NET_OPEN && !buf_addf(&resolv, "%s/etc/resolv.conf", rootfs ? rootfs : ""))
		rules.dns = egress_resolver(resolv.ptr, r->dns, sizeof(r->dns));
	buf_free(&resolv);
	egress_apply_start(&r->job, r->nsfd, &rules);
	return SBX_OK;
}

enum sbx_err local_net_rules_finish(struct local_net_rules *r, const char *scope)
{
	char err[512];
	int res;

	if (r->nsfd < 0)
		return SBX_ERR_IO;
	res = egress_apply_finish(&r->job, err, sizeof(err));
	close(r->nsfd);
	r->nsfd = -1;
	if (res) {
		log_err(scope, "local: cannot install the sandbox's egress rules: %s", err);
		return SBX_ERR_IO;
	}
	return SBX_OK;
}

enum sbx_err local_net_up(const char *scope, pid_t init, const struct sbx_spec *spec, int log_fd,
	uint64_t deadline_ms, struct local_net *out, int (*started)(void *arg), void *arg)
{
	enum sbx_err result;
	int nsfd;

	out->pid = 0;
	out->start = 0;
	out->child = 0;
	if (spec->cfg->net_mode != NET_OPEN)
		return SBX_OK;
	nsfd = local_net_nsfd(init);
	if (nsfd < 0) {
		log_err(scope, "local: cannot open the sandbox's network namespace: %s", strerror(errno));
		return SBX_ERR_IO;
	}
	result = pasta_start(scope, nsfd, spec, log_fd, deadline_ms, out, started, arg);
	close(nsfd);
	return result;
}

int local_net_alive(struct local_net *n)
{
	if (!n->pid)
		return 1;
	if (n->child && waitpid(n->pid, NULL, WNOHANG) == n->pid) {
		n->child = 0; /* reaped: it has ended */
		n->start = 0;
	}
	return n->start && util_proc_starttime(n->pid) == n->start;
}

void local_net_down(struct local_net *n)
{
	int pidfd;

	if (!n->pid)
		return;
	/* through a pidfd taken while the start time matches: never a
	 * recycled pid; and wait for the end, also of a process that is not
	 * our child (adopted), so "destroyed" means gone */
	pidfd = n->start && util_proc_starttime(n->pid) == n->start ? pidfd_open(n->pid, 0) : -1;
	if (pidfd >= 0 && util_proc_starttime(n->pid) == n->start && !pidfd_send_signal(pidfd, SIGKILL, NULL, 0)) {
		struct pollfd p = { .fd = pidfd, .events = POLLIN };
		while (poll(&p, 1, 10000) < 0 && errno == EINTR)
			;
	}
	if (pidfd >= 0)
		close(pidfd);
	if (n->child)
		while (waitpid(n->pid, NULL, 0) < 0 && errno == EINTR)
			;
	n->pid = 0;
	n->start = 0;
	n->child = 0;
}
