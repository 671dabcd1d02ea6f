/* SPDX-License-Identifier: MIT */
/*
 * provider_int.h - descriptors of the built-in providers and the table the
 * registry searches (builtin.c; the unit tests link their own table).
 */
#ifndef SBX_PROVIDER_INT_H
#define SBX_PROVIDER_INT_H

#include "provider.h"

extern const struct sbx_provider provider_local;
extern const struct sbx_provider provider_docker;
extern const struct sbx_provider provider_aio;
extern const struct sbx_provider provider_opensandbox;
extern const struct sbx_provider *const sbx_builtin_providers[];

#endif
