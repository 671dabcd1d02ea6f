/* SPDX-License-Identifier: MIT */
/* provider_int.h - descriptors of the built-in providers, for providers.c only. */
#ifndef SBX_PROVIDER_INT_H
#define SBX_PROVIDER_INT_H

#include "provider.h"

extern const struct sbx_provider provider_local;

#endif
