/* SPDX-License-Identifier: MIT */
/*
 * slow_provider.c - a provider for the bench only (./sbxfs-slow, beside sbxfs-exec and sbxfs-init): the
 * local provider with a create that first sleeps SBXFS_SLOW_CREATE_MS
 * milliseconds (default 2000), standing for a docker or remote create.
 * It is a wrapper sharing local's table (STYLE.md #4): every other slot,
 * and the boxes it makes, are local's.  The acquire-load bench row starts
 * 64 such creates at once and measures what else the mount still answers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "../providers/provider.h"
#include "../providers/provider_int.h"

static struct sbx_provider_ops slow_ops;

static enum sbx_err slow_create(const struct sbx_spec *spec, struct sbx_box **out)
{
	const char *env = getenv("SBXFS_SLOW_CREATE_MS");
	long ms = env ? strtol(env, NULL, 10) : 2000;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	return provider_local.ops->create(spec, out);
}

__attribute__((constructor)) static void slow_setup(void)
{
	slow_ops = *provider_local.ops;
	slow_ops.create = slow_create;
}

static const char *const slow_keys[] = { "local", NULL };

static const struct sbx_provider provider_slow = {
	.name = "slow",
	.config_keys = slow_keys,
	.caps = SBX_CAP_EXEC | SBX_CAP_SIGNALS,
	.ops = &slow_ops,
};

const struct sbx_provider *const sbx_builtin_providers[] = {
	&provider_local,
	&provider_slow,
	NULL,
};
