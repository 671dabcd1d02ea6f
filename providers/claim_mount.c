/* SPDX-License-Identifier: MIT */
/*
 * claim_mount.c - attaching a thread's directories to a running spare
 * (claim_mount.h), for every provider whose claim binds host directories
 * into a sandbox's mount namespace (local_claim.c, container.c).
 *
 * Why a module of its own: the mechanics (new mount API, a vfork'd child
 * in the sandbox's namespaces, the checks against a recycled pid) are the
 * same whether the sandbox is a bubblewrap one or a container; only what is
 * attached where, and the flags a create would have given, differ, and the
 * caller says those.
 */
#define _GNU_SOURCE
#include "claim_mount.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/log.h"

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#define MOUNT_ATTR_NODEV 0x00000004
#endif

/* linux/mount.h's, which glibc's sys/mount.h may lack */
struct claim_mount_attr {
	unsigned long long attr_set, attr_clr, propagation, userns_fd;
};

struct claim_attach {
	int n;
	int tree[CLAIM_MOUNT_MAX];
	const char *target[CLAIM_MOUNT_MAX];
	int mntns, utsns, root;
	const char *hostname;
	/* written by the child (it shares our memory until it exits) */
	int failed_at, err;
};

static int claim_open_tree(const char *src, bool ro, bool nosuid)
{
	struct claim_mount_attr attr = { .attr_set = (nosuid ? MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV : 0) |
						     (ro ? MOUNT_ATTR_RDONLY : 0) };
	int fd = (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);

	if (fd < 0)
		return -1;
	if (attr.attr_set && syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr))) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* The child: in the sandbox's namespaces, attach every tree.  It shares the
 * daemon's memory (CLONE_VM | CLONE_VFORK, the daemon's thread waits): raw
 * system calls only. */
static int claim_child(void *arg)
{
	struct claim_attach *c = arg;

	c->failed_at = -1;
	/* the init's own root, not the namespace's: a container's runtime
	 * pivots into its root filesystem, and the namespace's root is then a
	 * copy of the host's where the targets name other directories */
	if (setns(c->mntns, CLONE_NEWNS) || setns(c->utsns, CLONE_NEWUTS) || fchdir(c->root) || chroot(".")) {
		c->failed_at = CLAIM_MOUNT_MAX;
		c->err = errno;
		return 1;
	}
	for (int i = 0; i < c->n; i++)
		if (syscall(SYS_move_mount, c->tree[i], "", AT_FDCWD, c->target[i], MOVE_MOUNT_F_EMPTY_PATH)) {
			c->failed_at = i;
			c->err = errno;
			return 1;
		}
	if (sethostname(c->hostname, strlen(c->hostname))) {
		c->failed_at = CLAIM_MOUNT_MAX + 1;
		c->err = errno;
		return 1;
	}
	return 0;
}

static int claim_run_child(struct claim_attach *c)
{
	size_t stack_len = 64 * 1024;
	char *stack = malloc(stack_len);
	int st = 0;
	pid_t pid;

	if (!stack)
		return -1;
	pid = clone(claim_child, stack + stack_len, CLONE_VM | CLONE_VFORK | SIGCHLD, c);
	if (pid < 0) {
		c->failed_at = CLAIM_MOUNT_MAX + 2;
		c->err = errno;
		free(stack);
		return -1;
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	free(stack);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* A namespace of init, checked against the inode want (when not 0). */
static int claim_ns_fd(pid_t init, const char *ns, unsigned long long want)
{
	char path[64];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)init, ns);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && want && (fstat(fd, &st) || (unsigned long long)st.st_ino != want)) {
		close(fd);
		errno = ESRCH;
		return -1;
	}
	return fd;
}

static const char *claim_failed_what(const struct claim_attach *c)
{
	if (c->failed_at >= 0 && c->failed_at < c->n)
		return c->target[c->failed_at];
	return c->failed_at == CLAIM_MOUNT_MAX + 1 ? "sethostname" : "entering the namespaces";
}

enum sbx_err claim_mount_attach(pid_t init, unsigned long long mntns, const struct claim_mount *m, int n, bool nosuid,
	const char *hostname, const char *scope, const char *who)
{
	struct claim_attach c = { .mntns = -1, .utsns = -1, .root = -1, .failed_at = -1, .hostname = hostname };
	char path[64];
	enum sbx_err result = SBX_ERR_IO;

	if (n > CLAIM_MOUNT_MAX) {
		log_err(scope, "%s: claim: %d mounts, at most %d", who, n, CLAIM_MOUNT_MAX);
		return SBX_ERR_INVAL;
	}
	for (c.n = 0; c.n < n; c.n++) {
		c.target[c.n] = m[c.n].target;
		if ((c.tree[c.n] = claim_open_tree(m[c.n].src, m[c.n].ro, nosuid)) < 0) {
			log_err(scope, "%s: claim: open_tree %s: %s", who, m[c.n].src, strerror(errno));
			goto out;
		}
	}
	c.mntns = claim_ns_fd(init, "mnt", mntns);
	c.utsns = claim_ns_fd(init, "uts", 0);
	snprintf(path, sizeof(path), "/proc/%d/root", (int)init);
	c.root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c.mntns < 0 || c.utsns < 0 || c.root < 0) {
		log_err(scope, "%s: claim: the spare's namespaces (init %d): %s", who, (int)init, strerror(errno));
		result = SBX_ERR_GONE;
		goto out;
	}
	if (claim_run_child(&c)) {
		log_err(scope, "%s: claim: %s in the spare: %s", who, claim_failed_what(&c), strerror(c.err));
		goto out;
	}
	log_debug(scope, "%s: claim: %d trees attached", who, c.n);
	result = SBX_OK;
out:
	for (int i = 0; i < c.n; i++)
		close(c.tree[i]);
	if (c.mntns >= 0)
		close(c.mntns);
	if (c.utsns >= 0)
		close(c.utsns);
	if (c.root >= 0)
		close(c.root);
	return result;
}
