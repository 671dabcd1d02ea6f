/* SPDX-License-Identifier: MIT */
/*
 * container_freeze.c - freeze and thaw of containers (the container
 * providers' sbx_freeze_ops, provider.h): the Engine API's pause and
 * unpause, which put every process of the container (its init, job
 * supervisors, jobs, servers) into the cgroup freezer and back.
 *
 * Why the box keeps the time it spent paused: a provider whose job pumps
 * run in the daemon, not in the container, would see a paused server as
 * one that stopped answering, and count the pause against the job's
 * timeout.  Such pumps read container_paused_ms() and skip both while it
 * grows.  (A supervisor inside the container is paused with it and counts
 * only the time it could run.)
 */
#define _GNU_SOURCE
#include <string.h>

#include "../common/log.h"
#include "../common/util.h"
#include "container_int.h"

static enum sbx_err container_freeze(struct sbx_box *b)
{
	struct cbox *db = cbox(b);
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

static enum sbx_err container_thaw(struct sbx_box *b)
{
	struct cbox *db = cbox(b);
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

static enum sbx_err container_frozen(struct sbx_box *b, bool *out)
{
	struct cbox *db = cbox(b);
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
