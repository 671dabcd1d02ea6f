/* SPDX-License-Identifier: MIT */
/*
 * container_freeze.c - freeze and thaw of containers (the container
 * providers' sbx_freeze_ops, provider.h): the Engine API's pause and
 * unpause, which put every process of the container (its init, job
 * supervisors, jobs, servers) into the cgroup freezer and back.
 *
 * Why the freezer is read after dockerd answers: under load dockerd 20.10
 * has answered a pause with 204 while the container's processes went on
 * running (the next unpause: "cannot resume a running process"), and a
 * snapshot taken then is not consistent.  So a pause counts only once the
 * kernel's freezer of the container's cgroup says frozen (cgroup v1
 * freezer.state FROZEN, v2 cgroup.events "frozen 1"); when it does not, the
 * pause is undone and done once more, then refused.  The other way round,
 * dockerd has lost a pause it answered: the thaw's unpause is refused ("is
 * not paused") while the freezer still says frozen, and nothing would ever
 * thaw the container; a thaw then writes the freezer's own control file.
 * A container whose cgroup this host cannot see (a remote engine) is taken
 * at dockerd's word.
 *
 * Why the box keeps the time it spent paused: a provider whose job pumps
 * run in the daemon, not in the container, would see a paused server as
 * one that stopped answering, and count the pause against the job's
 * timeout.  Such pumps read container_paused_ms() and skip both while it
 * grows.  (A supervisor inside the container is paused with it and counts
 * only the time it could run.)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../common/log.h"
#include "../common/util.h"
#include "container_int.h"

#define FREEZE_CHECK_MS 1000 /* how long the freezer may take to say frozen */

/* The freezer of the cgroup of the container's init: its state file
 * (v2 cgroup.events, v1 freezer.state) in path, and into ctl what a thaw
 * writes where (v2 cgroup.freeze "0", v1 freezer.state "THAWED").  0, or -1
 * when this host cannot see it (a remote engine, the init gone). */
static int freezer_files(const struct cbox *db, char *path, char *ctl, size_t len, bool *v2)
{
	struct buf cg = BUF_INIT(BUF_CAP_PATH);
	char proc[64], *line, *save = NULL;
	int r = -1;

	if (!db->init_pid || str_fmt(proc, sizeof(proc), "/proc/%d/cgroup", (int)db->init_pid) ||
	    util_read_file(proc, &cg))
		goto out;
	for (line = strtok_r(cg.ptr, "\n", &save); line && r < 0; line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "0::", 3)) { /* v2 */
			*v2 = true;
			if (!str_fmt(path, len, "/sys/fs/cgroup%s/cgroup.events", line + 3) &&
			    !str_fmt(ctl, len, "/sys/fs/cgroup%s/cgroup.freeze", line + 3) && !access(path, R_OK))
				r = 0;
		} else if (strstr(line, ":freezer:")) { /* v1 */
			*v2 = false;
			if (!str_fmt(path, len, "/sys/fs/cgroup/freezer%s/freezer.state", strstr(line, ":freezer:") + 9) &&
			    !str_fmt(ctl, len, "%s", path) && !access(path, R_OK))
				r = 0;
		}
	}
out:
	buf_free(&cg);
	return r;
}

/* The kernel's word on whether the cgroup of the container's init is
 * frozen: 1, 0, or -1 when this host cannot tell. */
static int freezer_frozen(const struct cbox *db)
{
	struct buf st = BUF_INIT(256);
	char path[PATH_MAX], ctl[PATH_MAX];
	bool v2 = false;
	int r = -1;

	if (!freezer_files(db, path, ctl, sizeof(path), &v2) && !util_read_file(path, &st))
		r = strstr(buf_str(&st), v2 ? "frozen 1" : "FROZEN") != NULL;
	buf_free(&st);
	return r;
}

/* Thaw the container's cgroup through the kernel, behind dockerd: for a
 * container dockerd believes running while its freezer says frozen (under
 * load dockerd 20.10 has lost a pause it answered: the next unpause is
 * refused with "is not paused", and the container would stay frozen for
 * good).  0 once the freezer says it runs. */
static int freezer_thaw_direct(const struct cbox *db)
{
	char path[PATH_MAX], ctl[PATH_MAX];
	bool v2 = false;
	int fd, ok;

	if (freezer_files(db, path, ctl, sizeof(path), &v2))
		return -1;
	fd = open(ctl, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ok = v2 ? write(fd, "0", 1) == 1 : write(fd, "THAWED", 6) == 6;
	close(fd);
	for (int i = 0; ok && i < 200 && freezer_frozen(db) == 1; i++)
		nanosleep(&(struct timespec){ .tv_nsec = 5 * 1000000L }, NULL);
	return ok && freezer_frozen(db) == 0 ? 0 : -1;
}

/* Does dockerd say the container's status is want ("running", "paused")?
 * SBX_OK and the answer in *is, or dockerd's error (in err). */
static enum sbx_err docker_status_is(struct cbox *db, const char *want, bool *is, char *err, size_t errlen)
{
	struct docker_container c;
	enum sbx_err e = docker_inspect(db->api, db->id, &c, err, errlen);

	*is = false;
	if (e)
		return e;
	*is = !strcmp(c.status, want);
	docker_container_clear(&c);
	return SBX_OK;
}

/* Does dockerd say the container runs (not paused)? */
static bool docker_still_running(struct cbox *db)
{
	char err[DOCKER_ERR_LEN];
	bool running;

	return !docker_status_is(db, "running", &running, err, sizeof(err)) && running;
}

/* Wait (briefly) for the freezer to agree with a pause dockerd answered. */
static bool freezer_agrees(const struct cbox *db)
{
	uint64_t end = util_now_ms() + FREEZE_CHECK_MS;
	int f;

	while ((f = freezer_frozen(db)) == 0 && util_now_ms() < end)
		nanosleep(&(struct timespec){ .tv_nsec = 5 * 1000000L }, NULL);
	return f != 0;
}

static enum sbx_err container_freeze(struct sbx_box *b)
{
	struct cbox *db = cbox(b);
	char err[DOCKER_ERR_LEN];
	enum sbx_err e;

	if (!db->id[0])
		return SBX_ERR_GONE;
	e = docker_pause(db->api, db->id, true, err, sizeof(err));
	for (int again = 1; !e && !freezer_agrees(db); again--) {
		log_warn(db->name, "freeze: dockerd paused the container but its freezer does not say frozen%s",
			again ? ": paused once more" : "");
		docker_pause(db->api, db->id, false, err, sizeof(err));
		if (!again) {
			snprintf(err, sizeof(err), "the container's freezer did not freeze");
			e = SBX_ERR_IO;
			break;
		}
		e = docker_pause(db->api, db->id, true, err, sizeof(err));
	}
	if (e) {
		log_warn(db->name, "freeze: %s", err);
		return e;
	}
	uint64_t zero = 0, now = util_now_ms();
	__atomic_compare_exchange_n(&db->paused_at, &zero, now, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	return SBX_OK;
}

static enum sbx_err container_thaw(struct sbx_box *b)
{
	struct cbox *db = cbox(b);
	char err[DOCKER_ERR_LEN];
	enum sbx_err e;
	uint64_t at;
	int frozen;

	if (!db->id[0])
		return SBX_ERR_GONE;
	e = docker_pause(db->api, db->id, false, err, sizeof(err));
	frozen = e ? freezer_frozen(db) : -1; /* the kernel's word, when dockerd refused */
	if (frozen == 0) {
		/* dockerd refused (it thought the container running): the kernel
		 * says its processes run, which is what a thaw is for */
		log_warn(db->name, "thaw: %s; its freezer says it runs: thawed", err);
		e = SBX_OK;
	} else if (frozen == 1 && docker_still_running(db)) {
		/* dockerd says running, the kernel says frozen: thaw the kernel's */
		if (!freezer_thaw_direct(db)) {
			log_warn(db->name, "thaw: %s, but its freezer said frozen: thawed the freezer directly", err);
			e = SBX_OK;
		}
	}
	if (e) {
		log_warn(db->name, "thaw: %s", err);
		return e;
	}
	at = __atomic_exchange_n(&db->paused_at, 0, __ATOMIC_ACQ_REL);
	if (at)
		__atomic_add_fetch(&db->paused_ms, util_now_ms() - at, __ATOMIC_RELEASE);
	return SBX_OK;
}

static enum sbx_err container_frozen(struct sbx_box *b, bool *out)
{
	struct cbox *db = cbox(b);
	char err[DOCKER_ERR_LEN];
	enum sbx_err e;

	*out = false;
	if (!db->id[0])
		return SBX_ERR_GONE;
	e = docker_status_is(db, "paused", out, err, sizeof(err));
	if (e) {
		log_warn(db->name, "inspect: %s", err);
		return e;
	}
	if (*out) {
		uint64_t zero = 0;
		__atomic_compare_exchange_n(&db->paused_at, &zero, util_now_ms(), false, __ATOMIC_RELEASE,
			__ATOMIC_RELAXED);
	}
	return SBX_OK;
}

uint64_t container_paused_ms(struct cbox *db)
{
	uint64_t at = __atomic_load_n(&db->paused_at, __ATOMIC_ACQUIRE);
	uint64_t total = __atomic_load_n(&db->paused_ms, __ATOMIC_ACQUIRE);

	return total + (at ? util_now_ms() - at : 0);
}

bool container_paused(struct cbox *db)
{
	return __atomic_load_n(&db->paused_at, __ATOMIC_ACQUIRE) != 0;
}

const struct sbx_freeze_ops container_freeze_ops = {
	.freeze = container_freeze,
	.thaw = container_thaw,
	.frozen = container_frozen,
};
