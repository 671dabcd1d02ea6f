/* SPDX-License-Identifier: MIT */
/*
 * local_claim.c - binding a local spare to a thread (provider.h's claim,
 * pool.prewarm: providers/spares.h).
 *
 * A spare is a running bubblewrap sandbox like any other (local.c), made
 * with empty directories where a thread's data goes and an init that has
 * no uid yet (sbxfs-init --spare).  Claiming it must not restart it, so
 * what a create puts on bubblewrap's command line is done to the running
 * sandbox instead, by the daemon (root):
 *   1. the thread's uid (uidpool: the same one a cold create gives, kept
 *      by the thread for ever) and its data directories owned by it, and
 *      its passwd/group (local_etc.c);
 *   2. each directory is cloned as a detached mount tree in the daemon's
 *      namespace (open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)), given
 *      bubblewrap's flags (nosuid, nodev; read-only for skills and /etc
 *      files: mount_setattr), and attached in the sandbox by a child that
 *      setns()es into its mount and uts namespaces and move_mount()s each
 *      tree onto its mount point, then sets the thread's hostname; the
 *      daemon's own namespace never changes (a multi-threaded process
 *      cannot setns into a mount namespace), and the sandbox's seccomp
 *      filter, which forbids all of these, binds only its own processes;
 *   3. the init learns the uid through its claim FIFO and drops to it
 *      (helpers/local_init.c), told right after step 1 so that it does so
 *      while the daemon does step 2; the claim then waits until /proc
 *      shows it (a spare runs nothing else, and no job starts before the
 *      claim has returned);
 *   4. the record (local.json) moves to the thread's directory, keeping
 *      the spare's cgroup (lb->token) so destroy and adoption find it.
 * The data is attached, never copied: a thread whose sandbox was destroyed
 * earlier finds its files as they were.  Any failure returns an error and
 * the pool destroys the spare (nothing of it is handed out).
 */
#define _GNU_SOURCE
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

#include "../common/buf.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/names.h"
#include "../common/util.h"
#include "local.h"
#include "local_etc.h"

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

#define CLAIM_MAX 6 /* workspace, uploads, outputs, skills, passwd, group */
#define CLAIM_FIFO "/run/sbxfs-claim"

struct claim_attach {
	int n;
	int tree[CLAIM_MAX];
	const char *target[CLAIM_MAX];
	int mntns, utsns;
	char hostname[64];
	/* written by the child (it shares our memory until it exits) */
	int failed_at, err;
};

static int claim_open_tree(const char *src, bool ro)
{
	struct claim_mount_attr attr = { .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (ro ? MOUNT_ATTR_RDONLY : 0) };
	int fd = (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);

	if (fd < 0)
		return -1;
	if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr))) {
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
	if (setns(c->mntns, CLONE_NEWNS) || setns(c->utsns, CLONE_NEWUTS)) {
		c->failed_at = CLAIM_MAX;
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
		c->failed_at = CLAIM_MAX + 1;
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
		c->failed_at = CLAIM_MAX + 2;
		c->err = errno;
		free(stack);
		return -1;
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	free(stack);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* A namespace of init, checked against the one the box recorded (mnt). */
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

/* Step 2: what a create binds, attached to the running sandbox. */
static enum sbx_err claim_mounts(struct local_box *lb, const struct sbx_spec *s, const char *scope)
{
	struct claim_attach c = { .mntns = -1, .utsns = -1, .failed_at = -1 };
	struct buf passwd = BUF_INIT(BUF_CAP_PATH), group = BUF_INIT(BUF_CAP_PATH);
	const char *src[CLAIM_MAX];
	bool ro[CLAIM_MAX];
	enum sbx_err result = SBX_ERR_IO;
	int n = 0;

	src[n] = s->dirs.workspace, ro[n] = false, c.target[n++] = layout_sandbox_path(LAYOUT_WORKSPACE);
	src[n] = s->dirs.uploads, ro[n] = false, c.target[n++] = layout_sandbox_path(LAYOUT_UPLOADS);
	src[n] = s->dirs.outputs, ro[n] = false, c.target[n++] = layout_sandbox_path(LAYOUT_OUTPUTS);
	src[n] = s->dirs.skills, ro[n] = true, c.target[n++] = s->cfg->skills_container_path;
	if (!local_rootfs(s->cfg)) {
		if (buf_addf(&passwd, "%s/etc/passwd", s->dirs.thread_dir) ||
		    buf_addf(&group, "%s/etc/group", s->dirs.thread_dir))
			goto out;
		src[n] = passwd.ptr, ro[n] = true, c.target[n++] = "/etc/passwd";
		src[n] = group.ptr, ro[n] = true, c.target[n++] = "/etc/group";
	}
	for (c.n = 0; c.n < n; c.n++)
		if ((c.tree[c.n] = claim_open_tree(src[c.n], ro[c.n])) < 0) {
			log_err(scope, "local: claim: open_tree %s: %s", src[c.n], strerror(errno));
			goto out;
		}
	snprintf(c.hostname, sizeof(c.hostname), "sbx-%s", s->token);
	c.mntns = claim_ns_fd(lb->init_pid, "mnt", lb->mntns);
	c.utsns = claim_ns_fd(lb->init_pid, "uts", 0);
	if (c.mntns < 0 || c.utsns < 0) {
		log_err(scope, "local: claim: the spare's namespaces (init %d): %s", (int)lb->init_pid, strerror(errno));
		result = SBX_ERR_GONE;
		goto out;
	}
	if (claim_run_child(&c)) {
		log_err(scope, "local: claim: %s in the spare: %s",
			c.failed_at < 0 || c.failed_at >= CLAIM_MAX ? "entering the namespaces" : c.target[c.failed_at],
			strerror(c.err));
		goto out;
	}
	log_debug(scope, "local: claim: %d trees attached", c.n);
	result = SBX_OK;
out:
	for (int i = 0; i < c.n; i++)
		close(c.tree[i]);
	if (c.mntns >= 0)
		close(c.mntns);
	if (c.utsns >= 0)
		close(c.utsns);
	buf_free(&passwd);
	buf_free(&group);
	return result;
}

/* The real uid /proc shows for pid, or -1. */
static long claim_proc_uid(pid_t pid)
{
	struct buf b = BUF_INIT(8192);
	char path[64];
	const char *u;
	long uid = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (!util_read_file(path, &b) && b.len && (u = strstr(buf_str(&b), "\nUid:")))
		uid = strtol(u + 5, NULL, 10);
	buf_free(&b);
	return uid;
}

/* Step 3: tell the init its uid (it drops to it while the daemon attaches
 * the mounts: nothing but the init runs in the spare until the claim ends). */
static enum sbx_err claim_tell_uid(struct local_box *lb, uid_t uid, gid_t gid, const char *scope)
{
	char path[64], line[48];
	int fd, len;

	snprintf(path, sizeof(path), "/proc/%d/root" CLAIM_FIFO, (int)lb->init_pid);
	fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		log_err(scope, "local: claim: the spare's init does not wait for a claim (%s): %s", path, strerror(errno));
		return errno == ENOENT || errno == ENXIO ? SBX_ERR_GONE : SBX_ERR_IO;
	}
	len = snprintf(line, sizeof(line), "%u %u\n", (unsigned)uid, (unsigned)gid);
	if (write(fd, line, (size_t)len) != len) {
		log_err(scope, "local: claim: writing to the spare's init: %s", strerror(errno));
		close(fd);
		return SBX_ERR_IO;
	}
	close(fd);
	return SBX_OK;
}

/* ... and wait until /proc shows the init runs as it. */
static enum sbx_err claim_wait_uid(struct local_box *lb, uid_t uid, uint64_t deadline, const char *scope)
{
	while (claim_proc_uid(lb->init_pid) != (long)uid) {
		if (!local_alive(lb) || util_now_ms() > deadline) {
			log_err(scope, "local: claim: the spare's init did not take uid %u (%s)", (unsigned)uid,
				local_alive(lb) ? "timeout" : "it exited");
			return SBX_ERR_GONE;
		}
		usleep(100);
	}
	return SBX_OK;
}

/* Step 4: the box is the thread's now; local.json moves with it. */
static enum sbx_err claim_record(struct local_box *lb, const struct sbx_spec *s, uid_t uid, gid_t gid,
	const char *scope)
{
	char *old = lb->thread_dir, *dir = strdup(s->dirs.thread_dir);
	struct buf path = BUF_INIT(BUF_CAP_PATH);

	if (!dir)
		return SBX_ERR_NOMEM;
	lb->thread_dir = dir;
	lb->uid = lb->base.uid = uid;
	lb->gid = lb->base.gid = gid;
	lb->output_max = s->cfg->res.output;
	if (local_save(lb)) {
		log_err(scope, "local: claim: cannot record the sandbox: %s", strerror(errno));
		free(old);
		return SBX_ERR_IO;
	}
	if (!layout_file(&path, old, "local.json"))
		unlink(path.ptr);
	buf_free(&path);
	free(old);
	return SBX_OK;
}

enum sbx_err local_claim(struct sbx_box *b, const struct sbx_spec *s)
{
	struct local_box *lb = local_box(b);
	uint64_t deadline = util_now_ms() + (uint64_t)s->cfg->ready_timeout * 1000;
	char scope[NAMES_SCOPE_MAX];
	enum sbx_err e;
	uid_t uid;
	gid_t gid;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	if (!local_alive(lb)) {
		log_err(scope, "local: claim: the spare's init (pid %d) is gone", (int)lb->init_pid);
		return SBX_ERR_GONE;
	}
	if ((e = local_prepare_files(s, scope, &uid, &gid)) || (e = claim_tell_uid(lb, uid, gid, scope)))
		return e;
	if (!local_rootfs(s->cfg) && etc_write_identity(s->dirs.thread_dir, s->user, uid, gid)) {
		log_err(scope, "local: cannot write the sandbox's passwd and group: %s", strerror(errno));
		return SBX_ERR_IO;
	}
	if ((e = claim_mounts(lb, s, scope)) || (e = claim_wait_uid(lb, uid, deadline, scope)))
		return e;
	return claim_record(lb, s, uid, gid, scope);
}
