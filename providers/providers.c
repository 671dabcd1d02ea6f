/* SPDX-License-Identifier: MIT */
/*
 * providers.c - the registry of built-in providers and the one translation
 * from provider errors to errno.
 */
#include <errno.h>
#include <string.h>

#include "provider.h"
#include "provider_int.h"

static const struct sbx_provider *const providers[] = {
	&provider_local,
	NULL,
};

const struct sbx_provider *provider_find(const char *name)
{
	for (int i = 0; providers[i]; i++)
		if (!strcmp(providers[i]->name, name))
			return providers[i];
	return NULL;
}

int sbx_err_errno(enum sbx_err e)
{
	switch (e) {
	case SBX_OK:
		return 0;
	case SBX_ERR_TIMEOUT:
		return ETIMEDOUT;
	case SBX_ERR_NOSPC:
		return ENOSPC;
	case SBX_ERR_ACCESS:
		return EACCES;
	case SBX_ERR_NOMEM:
		return ENOMEM;
	case SBX_ERR_GONE:
		return ENOENT;
	case SBX_ERR_INVAL:
		return EINVAL;
	case SBX_ERR_BUSY:
		return EBUSY;
	case SBX_ERR_NOTSUP:
		return EOPNOTSUPP;
	default:
		return EIO;
	}
}

const char *sbx_err_name(enum sbx_err e)
{
	static const char *names[] = { "ok", "io", "timeout", "nospc", "access", "nomem", "gone", "inval", "busy",
		"notsup" };
	return (unsigned)e < sizeof(names) / sizeof(names[0]) ? names[e] : "io";
}
