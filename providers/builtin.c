/* SPDX-License-Identifier: MIT */
/* builtin.c - the table of providers built into the daemon (registry.c). */
#include "provider_int.h"

const struct sbx_provider *const sbx_builtin_providers[] = {
	&provider_local,
	&provider_docker,
	&provider_aio,
	&provider_opensandbox,
	NULL,
};
