/* SPDX-License-Identifier: MIT */
/*
 * docker_freeze.c - freeze and thaw of docker and aio containers (the
 * provider's sbx_freeze_ops, provider.h): the Engine API's pause and
 * unpause, which put every process of the container (its init, the job
 * supervisors, the jobs, the AIO server) into the cgroup freezer and back.
 *
 * Why the box keeps the time it spent paused: the aio provider's job pumps
 * run in the daemon, not in the container, so they would see a paused AIO
 * server as one that stopped answering, and count the pause against the
 * job's timeout.  They read dbox_paused_ms() and skip both while it grows.
 * (A docker job's own supervisor is paused with the container and counts
 * only the time it could run: helpers/docker_box.c.)
 */
#define _GNU_SOURCE
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "docker_int.h"

static enum sbx_err docker_freeze(struct sbx_box *b)
{
	struct dbox *db = dbox(b);
	char err[DOCKER_ERR_LEN];
	enum sbx_err e;

	if (!db->id[0])
		return SBX_ERR_GONE;
	e = docker_pause(db->api, db->id, true, err, sizeof(err));
	if (e) {
		log_warn(db->name, "freeze: %s", err);
		return e;
	}
	uint64_t zero = 0, now = util_now_ms();
	__atomic_compare_exchange_n(&db->paused_at, &zero, now, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
	return SBX_OK;
}

static enum sbx_err docker_thaw(struct sbx_box *b)
{
	struct dbox *db = dbox(b);
	char err[DOCKER_ERR_LEN];
	enum sbx_err e;
	uint64_t at;

	if (!db->id[0])
		return SBX_ERR_GONE;
	e = docker_pause(db->api, db->id, false, err, sizeof(err));
	if (e) {
		log_warn(db->name, "thaw: %s", err);
		return e;
	}
	at = __atomic_exchange_n(&db->paused_at, 0, __ATOMIC_ACQ_REL);
	if (at)
		__atomic_add_fetch(&db->paused_ms, util_now_ms() - at, __ATOMIC_RELEASE);
	return SBX_OK;
}

static enum sbx_err docker_frozen(struct sbx_box *b, bool *out)
{
	struct dbox *db = dbox(b);
	struct docker_container c;
	char err[DOCKER_ERR_LEN];
	enum sbx_err e;

	*out = false;
	if (!db->id[0])
		return SBX_ERR_GONE;
	e = docker_inspect(db->api, db->id, &c, err, sizeof(err));
	if (e) {
		log_warn(db->name, "inspect: %s", err);
		return e;
	}
	*out = !strcmp(c.status, "paused");
	docker_container_clear(&c);
	if (*out) {
		uint64_t zero = 0;
		__atomic_compare_exchange_n(&db->paused_at, &zero, util_now_ms(), false, __ATOMIC_RELEASE,
			__ATOMIC_RELAXED);
	}
	return SBX_OK;
}

uint64_t dbox_paused_ms(struct dbox *db)
{
	uint64_t at = __atomic_load_n(&db->paused_at, __ATOMIC_ACQUIRE);
	uint64_t total = __atomic_load_n(&db->paused_ms, __ATOMIC_ACQUIRE);

	return total + (at ? util_now_ms() - at : 0);
}

bool dbox_paused(struct dbox *db)
{
	return __atomic_load_n(&db->paused_at, __ATOMIC_ACQUIRE) != 0;
}

const struct sbx_freeze_ops docker_freeze_ops = {
	.freeze = docker_freeze,
	.thaw = docker_thaw,
	.frozen = docker_frozen,
};
