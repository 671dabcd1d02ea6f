/* SPDX-License-Identifier: MIT */
/*
 * registry.c - the providers built into this binary (the table is
 * builtin.c; the unit tests link their own with a fault-injecting
 * provider), found by name or by DeerFlow class path, and the hooks through
 * which the configuration parser hands each provider its own section.
 */
#define _GNU_SOURCE
#include <string.h>

#include "provider.h"
#include "provider_int.h"

const struct sbx_provider *provider_find(const char *name)
{
	for (int i = 0; sbx_builtin_providers[i]; i++) {
		const struct sbx_provider *p = sbx_builtin_providers[i];

		if (!strcmp(p->name, name))
			return p;
		for (const char *const *a = p->aliases; a && *a; a++)
			if (!strcmp(*a, name))
				return p;
	}
	return NULL;
}

const struct sbx_provider *provider_for(const struct sbx_config *cfg)
{
	const struct sbx_provider *p = provider_find(cfg->use);
	const struct sbx_provider *v = p && p->ops->variant ? p->ops->variant(cfg) : NULL;

	return v ? v : p;
}

const char *provider_canonical(const char *name)
{
	const struct sbx_provider *p = provider_find(name);

	return p ? p->name : NULL;
}

const struct sbx_provider *const *provider_all(void)
{
	return sbx_builtin_providers;
}

const char *provider_names(void)
{
	static char names[256];

	if (!names[0]) {
		size_t n = 0;
		for (int i = 0; sbx_builtin_providers[i]; i++) {
			const char *name = sbx_builtin_providers[i]->name;
			size_t l = strlen(name);
			if (n + l + 3 >= sizeof(names))
				break;
			if (i) {
				memcpy(names + n, ", ", 2);
				n += 2;
			}
			memcpy(names + n, name, l + 1);
			n += l;
		}
	}
	return names;
}

/* ---- configuration hooks ------------------------------------------------------- */

static bool provider_owns(const struct sbx_provider *p, const char *key)
{
	for (const char *const *k = p->config_keys; k && *k; k++)
		if (!strcmp(*k, key))
			return true;
	return false;
}

static int hook_key(struct cfg_ctx *x, struct sbx_config *cfg, const char *key, struct cfg_node *v)
{
	const struct sbx_provider *p = provider_find(cfg->use);

	if (!p || !provider_owns(p, key) || !p->ops->config_key)
		return 0;
	p->ops->config_key(x, cfg, key, v);
	return 1;
}

static bool hook_known(const char *key)
{
	for (int i = 0; sbx_builtin_providers[i]; i++)
		if (provider_owns(sbx_builtin_providers[i], key))
			return true;
	return false;
}

static int hook_check(struct cfg_ctx *x, struct sbx_config *cfg)
{
	const struct sbx_provider *p = provider_find(cfg->use);

	return p && p->ops->config_check ? p->ops->config_check(x, cfg) : 0;
}

static void hook_show(const struct sbx_config *cfg, struct json_t *out)
{
	const struct sbx_provider *p = provider_find(cfg->use);

	if (p && p->ops->config_show)
		p->ops->config_show(cfg, out);
}

static void hook_free(const struct sbx_config *cfg)
{
	const struct sbx_provider *p = provider_find(cfg->use);

	if (p && p->ops->config_free)
		p->ops->config_free(cfg->prov);
}

const struct config_hooks provider_config_hooks = {
	.canonical = provider_canonical,
	.names = provider_names,
	.key = hook_key,
	.known = hook_known,
	.check = hook_check,
	.show = hook_show,
	.free_prov = hook_free,
};
