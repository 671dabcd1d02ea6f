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
 *   2. each directory is attached to the running sandbox with bubblewrap's
 *      flags (nosuid, nodev; read-only for skills and /etc files), and the
 *      thread's hostname set, through the init's mount and uts namespaces
 *      (claim_mount.c, shared with the docker provider's claim);
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/names.h"
#include "../common/util.h"
#include "claim_mount.h"
#include "local.h"
#include "local_etc.h"

#define CLAIM_MAX 6 /* workspace, uploads, outputs, skills, passwd, group */
#define CLAIM_FIFO "/run/sbxfs-claim"

/* Step 2: what a create binds, attached to the running sandbox
 * (claim_mount.c), with bubblewrap's flags: nosuid, nodev; read-only for
 * skills and /etc files. */
static enum sbx_err claim_mounts(struct local_box *lb, const struct sbx_spec *s, const char *scope)
{
	struct buf passwd = BUF_INIT(BUF_CAP_PATH), group = BUF_INIT(BUF_CAP_PATH);
	struct claim_mount m[CLAIM_MAX];
	char hostname[64];
	enum sbx_err result = SBX_ERR_IO;
	int n = 0;

	m[n++] = (struct claim_mount){ s->dirs.workspace, layout_sandbox_path(LAYOUT_WORKSPACE), false };
	m[n++] = (struct claim_mount){ s->dirs.uploads, layout_sandbox_path(LAYOUT_UPLOADS), false };
	m[n++] = (struct claim_mount){ s->dirs.outputs, layout_sandbox_path(LAYOUT_OUTPUTS), false };
	m[n++] = (struct claim_mount){ s->dirs.skills, s->cfg->skills_container_path, true };
	if (!local_rootfs(s->cfg)) {
		if (buf_addf(&passwd, "%s/etc/passwd", s->dirs.thread_dir) ||
		    buf_addf(&group, "%s/etc/group", s->dirs.thread_dir))
			goto out;
		m[n++] = (struct claim_mount){ passwd.ptr, "/etc/passwd", true };
		m[n++] = (struct claim_mount){ group.ptr, "/etc/group", true };
	}
	snprintf(hostname, sizeof(hostname), "sbx-%s", s->token);
	result = claim_mount_attach(lb->init_pid, lb->mntns, m, n, true, hostname, scope, "local");
out:
	buf_free(&passwd);
	buf_free(&group);
	return result;
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
	while (util_proc_uid(lb->init_pid) != (long)uid) {
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
	uint64_t t[6];
	uid_t uid;
	gid_t gid;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	if (!local_alive(lb)) {
		log_err(scope, "local: claim: the spare's init (pid %d) is gone", (int)lb->init_pid);
		return SBX_ERR_GONE;
	}
	t[0] = util_now_us();
	if ((e = local_prepare_files(s, scope, &uid, &gid)))
		return e;
	t[1] = util_now_us();
	if ((e = claim_tell_uid(lb, uid, gid, scope)))
		return e;
	t[2] = util_now_us();
	if (!local_rootfs(s->cfg) &&
	    etc_write_identity(s->dirs.thread_dir, s->user, uid, gid, local_host_account(s->cfg, s->user))) {
		log_err(scope, "local: cannot write the sandbox's passwd and group: %s", strerror(errno));
		return SBX_ERR_IO;
	}
	t[3] = util_now_us();
	if ((e = claim_mounts(lb, s, scope)))
		return e;
	t[4] = util_now_us();
	if ((e = claim_wait_uid(lb, uid, deadline, scope)))
		return e;
	t[5] = util_now_us();
	e = claim_record(lb, s, uid, gid, scope);
	log_debug(scope,
		"local: claim steps (ms): claim-files %.2f uid %.2f claim-identity %.2f mounts %.2f uid-wait %.2f "
		"claim-record %.2f",
		(t[1] - t[0]) / 1e3, (t[2] - t[1]) / 1e3, (t[3] - t[2]) / 1e3, (t[4] - t[3]) / 1e3, (t[5] - t[4]) / 1e3,
		(util_now_us() - t[5]) / 1e3);
	return e;
}
