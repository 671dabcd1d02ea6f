/* SPDX-License-Identifier: MIT */
/*
 * config.c - fuzz the configuration loader (common/config.c, config_parse:
 * what config_load runs on mount.conf's bytes at start, on SIGHUP and for
 * --check-config) with the providers' hooks the daemon sets, so their
 * sections (local:, docker:, aio:, opensandbox:) are read by their own code,
 * then what .config shows of it (config_show).
 *
 * Checks: a refusal says why in one line; an accepted configuration has
 * the fields every reader of it assumes and renders as JSON.
 */
#include <string.h>

#include <jansson.h>

#include "../../common/buf.h"
#include "../../common/config.h"
#include "../../common/log.h"
#include "../../providers/provider.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_set_min_level(LOG_LVL_ERR); /* "unknown key, ignored" and the like */
	config_set_hooks(&provider_config_hooks);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	struct sbx_config *c;
	struct buf shown = BUF_INIT(BUF_CAP_JSON);
	json_t *o;
	uid_t uid;
	gid_t gid;

	memset(err, 0x55, sizeof(err));
	c = config_parse("fuzz.conf", (const char *)data, size, err, sizeof(err));
	FUZZ_CHECK(memchr(err, '\0', sizeof(err)) != NULL);
	if (!c) {
		FUZZ_CHECK(err[0] != '\0' && !strchr(err, '\n'));
		return 0;
	}
	FUZZ_CHECK(c->use && c->state_dir && c->protocol && c->container_prefix && c->skills_container_path);
	FUZZ_CHECK(c->n_env == 0 || c->env);
	FUZZ_CHECK(c->n_mounts == 0 || c->mounts);
	FUZZ_CHECK(c->n_users == 0 || c->users);
	for (size_t i = 0; i < c->n_mounts; i++)
		FUZZ_CHECK(c->mounts[i].host_path && c->mounts[i].container_path);
	(void)config_user_lookup(c, "alice", &uid, &gid);
	(void)config_user_max_sandboxes(c, "alice");
	if (config_show(c, &shown) == 0) {
		o = json_loadb(shown.ptr, shown.len, 0, NULL);
		FUZZ_CHECK(json_is_object(o));
		json_decref(o);
	}
	buf_free(&shown);
	config_put(c);
	return 0;
}
