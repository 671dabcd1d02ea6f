/* SPDX-License-Identifier: MIT */
/*
 * config.c - mount.conf.  libyaml loads the document into its node tree
 * (yaml_parser_load); we walk that tree key by key, so every rule lives
 * next to the key it checks and every error names that key.
 *
 * Why a node walk and not an event parser: the file is small, and a tree
 * lets the DeerFlow `sandbox:` section and the top level be read by the same
 * code.  This file is the schema (which keys exist, what they mean, how
 * they check each other); how a value is read is cfgread.c's.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <arpa/inet.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "json.h"
#include <yaml.h>

#include "layout.h"
#include "log.h"
#include "names.h"
#include "cfgread.h"


static const struct config_hooks *hooks;

void config_set_hooks(const struct config_hooks *h)
{
	hooks = h;
}

/* $VAR or ${VAR} resolves from the daemon's environment; a missing
 * variable becomes "" (DeerFlow's behaviour), and the key shows its form. */
static char *resolve_var(const char *v, bool *resolved)
{
	char name[256];
	const char *val;

	*resolved = false;
	if (v[0] != '$')
		return strdup(v);
	if (v[1] == '{') {
		const char *e = strchr(v, '}');
		if (!e || e[1] || (size_t)(e - v - 2) >= sizeof(name))
			return strdup(v);
		memcpy(name, v + 2, (size_t)(e - v - 2));
		name[e - v - 2] = '\0';
	} else {
		if (str_fmt(name, sizeof(name), "%s", v + 1))
			return strdup(v);
	}
	if (!names_env_key_valid(name))
		return strdup(v);
	*resolved = true;
	val = getenv(name);
	return strdup(val ? val : "");
}

static void parse_environment(struct cfg_ctx *x, struct sbx_config *c, yaml_node_t *n)
{
	yaml_node_pair_t *p;

	if (cfgr_scalar_is_null(n))
		return;
	if (n->type != YAML_MAPPING_NODE) {
		cfg_fail(x, "environment", "must be a mapping of NAME: value");
		return;
	}
	if (cfgr_mapping_check_dups(x, "environment", n))
		return;
	for (p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && !x->failed; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
		yaml_node_t *vn = yaml_document_get_node(x->doc, p->value);
		const char *v = cfgr_scalar(vn);
		struct config_kv *kv;
		bool resolved;
		char key[300];

		if (!k || !names_env_key_valid(k)) {
			snprintf(key, sizeof(key), "environment.%s", k ? k : "?");
			cfg_fail(x, key, "is not a valid POSIX environment variable name (must match ^[A-Za-z_][A-Za-z0-9_]*$)");
			return;
		}
		if (!v) {
			snprintf(key, sizeof(key), "environment.%s", k);
			cfg_fail(x, key, "must be a string");
			return;
		}
		kv = realloc(c->env, (c->n_env + 1) * sizeof(*kv));
		if (!kv) {
			cfg_fail(x, "environment", "out of memory");
			return;
		}
		c->env = kv;
		kv = &c->env[c->n_env++];
		kv->key = strdup(k);
		kv->value = resolve_var(v, &resolved);
		kv->shown = strdup(resolved ? v : names_secret_like(k) ? "***" : v);
		if (!kv->key || !kv->value || !kv->shown) {
			cfg_fail(x, "environment", "out of memory");
			return;
		}
	}
}

/* A path of `mounts`: $VAR or ${VAR} resolves from the daemon's environment
 * first, a missing variable becoming "" (DeerFlow's providers resolve
 * mounts and environment alike, reference §5.1), then the path rules. */
static int get_mount_path(struct cfg_ctx *x, const char *key, yaml_node_t *n, char **out)
{
	const char *s = cfgr_scalar(n);
	bool resolved;
	char *r;

	if (!s) {
		cfg_fail(x, key, "must be a string");
		return -1;
	}
	r = resolve_var(s, &resolved);
	if (!r) {
		cfg_fail(x, key, "out of memory");
		return -1;
	}
	if (resolved && r[0] != '/')
		cfg_fail(x, key, "must be an absolute path (got '%s' from %s)", r, s);
	if (x->failed || cfgr_check_abs_path(x, key, r)) {
		free(r);
		return -1;
	}
	free(*out);
	*out = r;
	return 0;
}

/* The length of path p without trailing slashes ("/" stays). */
static size_t path_len(const char *p)
{
	size_t n = strlen(p);

	while (n > 1 && p[n - 1] == '/')
		n--;
	return n;
}

static bool path_equal(const char *a, const char *b)
{
	return path_len(a) == path_len(b) && !strncmp(a, b, path_len(a));
}

/* Paths a and b (absolute, canonical) are equal or one holds the other. */
static bool path_overlaps(const char *a, const char *b)
{
	size_t la = path_len(a), lb = path_len(b);
	if (la > lb) {
		const char *t = a;
		size_t lt = la;
		a = b, la = lb;
		b = t, lb = lt;
	}
	/* a is the shorter: b equals it or lies under it ("/" holds everything) */
	return !strncmp(a, b, la) && (la == lb || la == 1 || b[la] == '/');
}

/* realpath of p when it exists, else p as written (a state_dir made at start). */
static void real_or_given(const char *p, char *out, size_t len)
{
	char real[PATH_MAX];

	snprintf(out, len, "%s", p && realpath(p, real) ? real : p ? p : "");
}

/* mounts, against each other and the sandbox's own paths, once the whole
 * file is read (state_dir and skills may come after mounts).  DeerFlow skips
 * a mount whose host_path is missing or whose container_path is reserved,
 * with an error line (reference §6.2); sbxfs refuses the file instead, as it
 * does for every bad key.  Nothing on the host changes (stat, realpath). */
static void check_mounts(struct cfg_ctx *x, const struct sbx_config *c)
{
	/* the local init (/run/sbxfs-init), the docker supervisor and aio's job
	 * files (/run/sbxfs/...) */
	static const char *const reserved[] = { "/run/sbxfs", "/run/sbxfs-init", NULL };
	char state[PATH_MAX], skills[PATH_MAX];

	real_or_given(c->state_dir, state, sizeof(state));
	real_or_given(c->skills_path, skills, sizeof(skills));
	for (size_t i = 0; i < c->n_mounts && !x->failed; i++) {
		const struct config_mount *m = &c->mounts[i];
		char key[64], real[PATH_MAX];
		struct stat st;

		snprintf(key, sizeof(key), "mounts[%zu]", i);
		if (!strcmp(m->container_path, "/") || path_overlaps(m->container_path, LAYOUT_SANDBOX_USER_DATA))
			cfg_fail(x, key, "container_path %s overlaps %s, the sandbox's data (reserved, as in DeerFlow)",
				m->container_path, LAYOUT_SANDBOX_USER_DATA);
		else if (path_overlaps(m->container_path, c->skills_container_path))
			cfg_fail(x, key, "container_path %s overlaps skills.container_path %s (reserved, as in DeerFlow)",
				m->container_path, c->skills_container_path);
		else
			for (const char *const *r = reserved; *r; r++)
				if (path_overlaps(m->container_path, *r)) {
					cfg_fail(x, key, "container_path %s overlaps %s, where sbxfs puts its own helpers",
						m->container_path, *r);
					break;
				}
		for (size_t j = 0; j < i && !x->failed; j++)
			if (path_equal(m->container_path, c->mounts[j].container_path))
				cfg_fail(x, key, "container_path %s is also mounts[%zu]'s", m->container_path, j);
		if (x->failed)
			break;
		if (lstat(m->host_path, &st) || !realpath(m->host_path, real)) {
			cfg_fail(x, key, "host_path %s: %s (a mount's host path must exist)", m->host_path,
				strerror(errno));
			break;
		}
		if (path_overlaps(real, state))
			cfg_fail(x, key, "host_path %s overlaps state_dir %s, where every sandbox's data lives", m->host_path,
				state);
		else if (c->skills_path && path_overlaps(real, skills))
			cfg_fail(x, key, "host_path %s overlaps skills.path %s (the skills library, copied into each "
					 "sandbox's skills/)", m->host_path, skills);
	}
}

static void parse_mounts(struct cfg_ctx *x, struct sbx_config *c, yaml_node_t *n)
{
	if (cfgr_scalar_is_null(n))
		return;
	if (n->type != YAML_SEQUENCE_NODE) {
		cfg_fail(x, "mounts", "must be a list of {host_path, container_path, read_only}");
		return;
	}
	for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top && !x->failed; it++) {
		yaml_node_t *m = yaml_document_get_node(x->doc, *it);
		struct config_mount cm = { 0 };
		char key[64];

		snprintf(key, sizeof(key), "mounts[%d]", (int)(it - n->data.sequence.items.start));
		if (m->type != YAML_MAPPING_NODE) {
			cfg_fail(x, key, "must be a mapping {host_path, container_path, read_only}");
			return;
		}
		for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top && !x->failed; p++) {
			const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
			yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
			char sub[128];

			snprintf(sub, sizeof(sub), "%s.%s", key, k ? k : "?");
			if (k && !strcmp(k, "host_path"))
				get_mount_path(x, sub, v, &cm.host_path);
			else if (k && !strcmp(k, "container_path"))
				get_mount_path(x, sub, v, &cm.container_path);
			else if (k && !strcmp(k, "read_only"))
				cfgr_get_bool(x, sub, v, &cm.read_only);
			else
				log_warn("config", "%s: unknown key, ignored", sub);
		}
		if (!x->failed && (!cm.host_path || !cm.container_path))
			cfg_fail(x, key, "needs both host_path and container_path");
		if (x->failed) {
			free(cm.host_path);
			free(cm.container_path);
			return;
		}
		struct config_mount *a = realloc(c->mounts, (c->n_mounts + 1) * sizeof(*a));
		if (!a) {
			cfg_fail(x, key, "out of memory");
			return;
		}
		c->mounts = a;
		c->mounts[c->n_mounts++] = cm;
	}
}

/* One entry of users:, `name: UID` or `name: {uid: UID, max_sandboxes: N}`. */
static int parse_user(struct cfg_ctx *x, const char *key, yaml_node_t *v, long *uid, long *max)
{
	char sub[160];
	bool have_uid = false;

	if (v->type != YAML_MAPPING_NODE)
		return cfgr_get_long(x, key, v, 1, 4294967294L, uid);
	for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top && !x->failed; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
		yaml_node_t *val = yaml_document_get_node(x->doc, p->value);

		snprintf(sub, sizeof(sub), "%s.%s", key, k ? k : "?");
		if (k && !strcmp(k, "uid"))
			have_uid = !cfgr_get_long(x, sub, val, 1, 4294967294L, uid);
		else if (k && !strcmp(k, "max_sandboxes"))
			cfgr_get_long(x, sub, val, 0, 100000, max);
		else
			log_warn("config", "%s: unknown key, ignored", sub);
	}
	if (!x->failed && !have_uid)
		cfg_fail(x, key, "needs a uid (name: UID or name: {uid: UID, max_sandboxes: N})");
	return x->failed ? -1 : 0;
}

static void parse_resources(struct cfg_ctx *x, struct sbx_config *c, yaml_node_t *n)
{
	struct config_resources *r = &c->res;

	if (cfgr_scalar_is_null(n))
		return;
	if (n->type != YAML_MAPPING_NODE) {
		cfg_fail(x, "resources", "must be a mapping {memory, cpus, pids, tmp_size, output}");
		return;
	}
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && !x->failed; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
		yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
		char key[128];
		long l;

		snprintf(key, sizeof(key), "resources.%s", k ? k : "?");
		if (k && !strcmp(k, "memory"))
			cfgr_get_size(x, key, v, 16 << 20, &r->memory);
		else if (k && !strcmp(k, "tmp_size"))
			cfgr_get_size(x, key, v, 1 << 20, &r->tmp_size);
		else if (k && !strcmp(k, "output"))
			cfgr_get_size(x, key, v, 1024, &r->output);
		else if (k && !strcmp(k, "pids")) {
			if (!cfgr_scalar_is_null(v) && cfgr_scalar(v) && !strcmp(cfgr_scalar(v), "0"))
				r->pids = 0;
			else if (!cfgr_get_long(x, key, v, 16, 4194304, &l))
				r->pids = (uint64_t)l;
		} else if (k && !strcmp(k, "cpus"))
			cfgr_get_cpus(x, key, v, &r->cpus);
		else
			log_warn("config", "%s: unknown key, ignored", key);
	}
}

static void parse_users(struct cfg_ctx *x, struct sbx_config *c, yaml_node_t *n)
{
	const char *s = cfgr_scalar(n);

	if (cfgr_scalar_is_null(n))
		return;
	if (s) {
		if (strcmp(s, "passwd")) {
			cfg_fail(x, "users", "must be 'passwd' or a mapping of name: uid (got '%s')", s);
			return;
		}
		c->users_passwd = true;
		return;
	}
	if (n->type != YAML_MAPPING_NODE) {
		cfg_fail(x, "users", "must be 'passwd' or a mapping of name: uid");
		return;
	}
	if (cfgr_mapping_check_dups(x, "users", n))
		return;
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && !x->failed; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
		yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
		char key[128];
		long uid;

		snprintf(key, sizeof(key), "users.%s", k ? k : "?");
		if (!k || !names_valid(k)) {
			cfg_fail(x, key, "user names must match ^[A-Za-z0-9_-]{1,64}$");
			return;
		}
		long max = 0;
		if (parse_user(x, key, v, &uid, &max))
			return;
		struct config_user *a = realloc(c->users, (c->n_users + 1) * sizeof(*a));
		if (!a) {
			cfg_fail(x, key, "out of memory");
			return;
		}
		c->users = a;
		struct passwd *pw = getpwuid((uid_t)uid);
		c->users[c->n_users].name = strdup(k);
		c->users[c->n_users].uid = (uid_t)uid;
		c->users[c->n_users].gid = pw ? pw->pw_gid : (gid_t)uid;
		c->users[c->n_users].max_sandboxes = (int)max;
		if (!c->users[c->n_users].name) {
			cfg_fail(x, key, "out of memory");
			return;
		}
		c->n_users++;
	}
}

/* allow_domains: an exact domain (a.b) or a leading wildcard (*.b.c): a
 * host name of names_host_canon's grammar, the proxy's, with two labels at
 * least (no bare top-level domain).  d is lower case, without a trailing dot. */
static bool domain_valid(const char *d)
{
	char out[NAMES_HOST_MAX + 1];
	const char *s = strncmp(d, "*.", 2) ? d : d + 2;

	return names_host_canon(s, strlen(s), out) == NAMES_HOST_OK && strchr(out, '.') && !strcmp(out, s);
}

/* A host name for network.hosts (names_host_canon's grammar: not an IP
 * literal).  Lower-cased in place, a trailing dot removed. */
static bool host_name_valid(char *h)
{
	char out[NAMES_HOST_MAX + 1];

	if (names_host_canon(h, strlen(h), out) != NAMES_HOST_OK)
		return false;
	memcpy(h, out, strlen(out) + 1); /* never longer than h */
	return true;
}

static int add_host_addr(struct cfg_ctx *x, const char *key, struct config_host *h, const char *a)
{
	unsigned char bin[16];
	char **v;

	if (!a || (inet_pton(AF_INET, a, bin) != 1 && inet_pton(AF_INET6, a, bin) != 1)) {
		cfg_fail(x, key, "must be a numeric IPv4 or IPv6 address, or a list of them (got '%s')",
			a ? a : "a non-scalar");
		return -1;
	}
	v = realloc(h->addrs, (h->n_addrs + 1) * sizeof(*v));
	if (!v || !(v[h->n_addrs] = strdup(a))) {
		if (v)
			h->addrs = v;
		cfg_fail(x, key, "out of memory");
		return -1;
	}
	h->addrs = v;
	h->n_addrs++;
	return 0;
}

/* network.hosts: {name: address | [address, ...]} */
static void parse_net_hosts(struct cfg_ctx *x, struct sbx_config *c, const char *key, yaml_node_t *n)
{
	if (cfgr_scalar_is_null(n))
		return;
	if (n->type != YAML_MAPPING_NODE) {
		cfg_fail(x, key, "must be a mapping of host name: address (or a list of addresses)");
		return;
	}
	if (cfgr_mapping_check_dups(x, key, n))
		return;
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && !x->failed; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
		yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
		struct config_host *hs, *h;
		char name[256], sub[300];

		snprintf(sub, sizeof(sub), "%s.%s", key, k ? k : "?");
		if (!k || str_fmt(name, sizeof(name), "%s", k) || !host_name_valid(name)) {
			cfg_fail(x, sub, "the key must be a host name (not an IP literal)");
			return;
		}
		for (size_t i = 0; i < c->n_net_hosts; i++)
			if (!strcmp(c->net_hosts[i].name, name)) {
				cfg_fail(x, sub, "given twice (names are compared in lower case)");
				return;
			}
		hs = realloc(c->net_hosts, (c->n_net_hosts + 1) * sizeof(*hs));
		if (!hs) {
			cfg_fail(x, key, "out of memory");
			return;
		}
		c->net_hosts = hs;
		h = &hs[c->n_net_hosts];
		memset(h, 0, sizeof(*h));
		if (!(h->name = strdup(name))) {
			cfg_fail(x, key, "out of memory");
			return;
		}
		c->n_net_hosts++;
		if (v->type == YAML_SEQUENCE_NODE) {
			for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
				if (add_host_addr(x, sub, h, cfgr_scalar(yaml_document_get_node(x->doc, *it))))
					return;
			if (!h->n_addrs)
				cfg_fail(x, sub, "needs at least one address");
		} else {
			add_host_addr(x, sub, h, cfgr_scalar(v));
		}
	}
}

/* pool: {prewarm: N} (providers/spares.c says what a spare is). */
static void parse_pool(struct cfg_ctx *x, struct sbx_config *c, yaml_node_t *n)
{
	if (cfgr_scalar_is_null(n))
		return;
	if (n->type != YAML_MAPPING_NODE) {
		cfg_fail(x, "pool", "must be a mapping {prewarm}");
		return;
	}
	if (cfgr_mapping_check_dups(x, "pool", n))
		return;
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && !x->failed; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
		yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
		long l;

		if (k && !strcmp(k, "prewarm")) {
			if (!cfgr_get_long(x, "pool.prewarm", v, 0, 1000, &l))
				c->prewarm = (int)l;
		} else {
			log_warn("config", "pool.%s: unknown key, ignored", k ? k : "?");
		}
	}
}

static void parse_network(struct cfg_ctx *x, struct sbx_config *c, yaml_node_t *n)
{
	if (cfgr_scalar_is_null(n))
		return;
	if (n->type != YAML_MAPPING_NODE) {
		cfg_fail(x, "network", "must be a mapping");
		return;
	}
	if (cfgr_mapping_check_dups(x, "network", n))
		return;
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && !x->failed; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
		yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
		const char *s = cfgr_scalar(v);
		char key[128];

		snprintf(key, sizeof(key), "network.%s", k ? k : "?");
		if (!k) {
			cfg_fail(x, "network", "keys must be strings");
		} else if (!strcmp(k, "mode")) {
			if (s && !strcmp(s, "open"))
				c->net_mode = NET_OPEN;
			else if (s && !strcmp(s, "isolated"))
				c->net_mode = NET_ISOLATED;
			else if (s && !strcmp(s, "allowlist"))
				c->net_mode = NET_ALLOWLIST;
			else
				cfg_fail(x, key, "must be open, isolated or allowlist (got '%s')", s ? s : "?");
		} else if (!strcmp(k, "approval")) {
			if (s && !strcmp(s, "prompt"))
				c->approval_prompt = true;
			else if (s && !strcmp(s, "deny"))
				c->approval_prompt = false;
			else
				cfg_fail(x, key, "must be prompt or deny (got '%s')", s ? s : "?");
		} else if (!strcmp(k, "temporary_grant_ttl")) {
			cfgr_get_long(x, key, v, 30, 3600, &c->temporary_grant_ttl);
		} else if (!strcmp(k, "approval_wait")) {
			cfgr_get_long(x, key, v, 0, 3600, &c->approval_wait);
		} else if (!strcmp(k, "allow_domains")) {
			if (cfgr_scalar_is_null(v))
				continue;
			if (v->type != YAML_SEQUENCE_NODE) {
				cfg_fail(x, key, "must be a list of domains");
				continue;
			}
			for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
				const char *d = cfgr_scalar(yaml_document_get_node(x->doc, *it));
				char low[256];
				size_t i;

				if (!d || strlen(d) >= sizeof(low)) {
					cfg_fail(x, key, "entries must be domain names");
					break;
				}
				for (i = 0; d[i]; i++)
					low[i] = (char)((d[i] >= 'A' && d[i] <= 'Z') ? d[i] + 32 : d[i]);
				low[i] = '\0';
				if (i && low[i - 1] == '.')
					low[i - 1] = '\0';
				if (!domain_valid(low)) {
					cfg_fail(x, key, "'%s' is not an exact domain (a.b) or a leading wildcard (*.b.c)", d);
					break;
				}
				bool dup = false;
				for (size_t j = 0; j < c->n_allow_domains && !dup; j++)
					dup = !strcmp(c->allow_domains[j], low);
				if (dup)
					continue; /* duplicates are dropped, as DeerFlow does */
				char **a = realloc(c->allow_domains, (c->n_allow_domains + 1) * sizeof(*a));
				if (!a || !(low[0] ? (a[c->n_allow_domains] = strdup(low)) : NULL)) {
					if (a)
						c->allow_domains = a;
					cfg_fail(x, key, "out of memory");
					break;
				}
				c->allow_domains = a;
				c->n_allow_domains++;
			}
		} else if (!strcmp(k, "hosts")) {
			parse_net_hosts(x, c, key, v);
		} else if (!strcmp(k, "allow_private_destinations")) {
			cfgr_get_bool(x, key, v, &c->allow_private);
		} else if (!strcmp(k, "gateway")) {
			cfgr_get_bool(x, key, v, &c->net_gateway);
		} else if (!strcmp(k, "proxy_image")) {
			/* DeerFlow's sidecar image: sbxfs serves the proxy itself */
		} else {
			log_warn("config", "%s: unknown key, ignored", key);
		}
	}
}

static const char *const uring_names[] = { "off", "auto", "on" };

const char *config_uring_name(enum config_uring m)
{
	return uring_names[m];
}

/* fuse.io_uring: off | auto | on (fs/uring.c says what each means).  YAML
 * 1.1 reads a bare off/on as booleans: both spellings are taken. */
static void parse_uring(struct cfg_ctx *x, struct sbx_config *c, const char *key, yaml_node_t *v)
{
	const char *s = cfgr_scalar(v);

	for (int i = 0; s && i < 3; i++)
		if (!strcmp(s, uring_names[i])) {
			c->fuse_io_uring = (enum config_uring)i;
			return;
		}
	if (s && (!strcmp(s, "false") || !strcmp(s, "true"))) {
		c->fuse_io_uring = !strcmp(s, "true") ? CONFIG_URING_ON : CONFIG_URING_OFF;
		return;
	}
	cfg_fail(x, key, "must be off, auto or on (got '%.64s')", s ? s : "a non-scalar");
}

static void parse_section(struct cfg_ctx *x, struct sbx_config *c, const char *sect, yaml_node_t *n)
{
	if (cfgr_scalar_is_null(n))
		return;
	if (n->type != YAML_MAPPING_NODE) {
		cfg_fail(x, sect, "must be a mapping");
		return;
	}
	if (cfgr_mapping_check_dups(x, sect, n))
		return;
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && !x->failed; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
		yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
		char key[128];

		snprintf(key, sizeof(key), "%s.%s", sect, k ? k : "?");
		if (!k)
			cfg_fail(x, sect, "keys must be strings");
		else if (!strcmp(sect, "skills") && !strcmp(k, "container_path")) {
			if (!cfgr_get_abs_path(x, key, v, &c->skills_container_path) &&
			    (!strcmp(c->skills_container_path, "/") ||
				    !strncmp(c->skills_container_path, "/mnt/user-data", 14)))
				cfg_fail(x, key, "must not be / or overlap /mnt/user-data (got '%s')",
					c->skills_container_path);
		} else if (!strcmp(sect, "skills") && !strcmp(k, "path"))
			cfgr_get_abs_path(x, key, v, &c->skills_path);
		else if (!strcmp(sect, "skills") && !strcmp(k, "max_file_size"))
			cfgr_get_size(x, key, v, 1, &c->skills_max_file_size);
		else if (!strcmp(sect, "skills") && !strcmp(k, "max_total_size"))
			cfgr_get_size(x, key, v, 1, &c->skills_max_total_size);
		else if (!strcmp(sect, "remote_files") && !strcmp(k, "cache_size"))
			cfgr_get_size(x, key, v, 16ULL << 20, &c->rfiles_cache_max);
		else if (!strcmp(sect, "snapshots") && !strcmp(k, "max_per_thread")) {
			long n;
			if (!cfgr_get_long(x, key, v, 1, 4096, &n))
				c->snapshots_max = (unsigned)n;
		} else if (!strcmp(sect, "skills") && !strcmp(k, "max_files")) {
			long n;
			if (!cfgr_get_long(x, key, v, 0, 1000000, &n))
				c->skills_max_files = (uint64_t)n;
		} else if (!strcmp(sect, "fuse") && !strcmp(k, "io_uring"))
			parse_uring(x, c, key, v);
		else if (!strcmp(sect, "fuse") && !strcmp(k, "io_uring_queue_depth")) {
			long n;
			if (!cfgr_get_long(x, key, v, 1, 1024, &n))
				c->fuse_uring_depth = (unsigned)n;
		}
		else
			log_warn("config", "%s: unknown key, ignored", key);
	}
}

/* `use`: a provider built into this binary, by name or DeerFlow class path. */
static void parse_use(struct cfg_ctx *x, struct sbx_config *c, yaml_node_t *v)
{
	const char *s = cfgr_scalar(v), *canon = s && hooks ? hooks->canonical(s) : s;

	if (!canon) {
		cfg_fail(x, "use", "must name a provider built into this sbxfs: %s, or a DeerFlow class path (got '%s')",
			hooks ? hooks->names() : "local", s ? s : "a non-scalar");
		return;
	}
	free(c->use);
	c->use = strdup(canon);
	if (!c->use)
		cfg_fail(x, "use", "out of memory");
}

/* acquire: async | sync (fs/acquire.c says what each means). */
static void parse_acquire(struct cfg_ctx *x, struct sbx_config *c, const char *k, yaml_node_t *v)
{
	char *mode = NULL;

	if (cfgr_get_str(x, k, v, &mode))
		return;
	if (!strcmp(mode, "async") || !strcmp(mode, "sync"))
		c->acquire_sync = !strcmp(mode, "sync");
	else
		cfg_fail(x, k, "must be async or sync (got '%.64s')", mode);
	free(mode);
}

static void parse_key(struct cfg_ctx *x, struct sbx_config *c, const char *k, yaml_node_t *v)
{
	long l;

	if (!strcmp(k, "use") || !strcmp(k, "provider"))
		return; /* read first, by walk_top */
	if (!strcmp(k, "mountpoint")) {
		/* the package's (python/sbxfs_deerflow): where DeerFlow finds the mount */
		log_debug("config", "mountpoint: read by DeerFlow's sbxfs_deerflow package, not by the daemon");
		return;
	}
	if (hooks && hooks->key(x, c, k, (struct cfg_node *)v))
		return; /* the selected provider's own key */
	if (!strcmp(k, "state_dir"))
		cfgr_get_abs_path(x, k, v, &c->state_dir);
	else if (!strcmp(k, "replicas")) {
		if (!cfgr_get_long(x, k, v, 1, 100000, &l))
			c->replicas = (int)l;
	} else if (!strcmp(k, "idle_timeout")) {
		if (!cfgr_scalar_is_null(v)) /* null: DeerFlow's default, 600 */
			cfgr_get_seconds(x, k, v, 0, 365L * 86400, true, &c->idle_timeout);
	} else if (!strcmp(k, "idle_check_interval"))
		cfgr_get_seconds(x, k, v, 1, 86400, false, &c->idle_check_interval);
	else if (!strcmp(k, "bash_command_timeout"))
		cfgr_get_seconds(x, k, v, 1, 7L * 86400, true, &c->bash_command_timeout);
	else if (!strcmp(k, "ready_timeout"))
		cfgr_get_seconds(x, k, v, 1, 3600, false, &c->ready_timeout);
	else if (!strcmp(k, "cache_timeout"))
		cfgr_get_seconds(x, k, v, 0, 86400, false, &c->cache_timeout);
	else if (!strcmp(k, "request_timeout"))
		cfgr_get_seconds(x, k, v, 1, 3600, false, &c->request_timeout);
	else if (!strcmp(k, "sandbox_timeout"))
		cfgr_get_seconds(x, k, v, 0, 30L * 86400, false, &c->sandbox_timeout);
	else if (!strcmp(k, "auto_start")) {
		if (!cfgr_scalar_is_null(v))
			cfgr_get_bool(x, k, v, &c->auto_start);
	} else if (!strcmp(k, "port")) {
		/* DeerFlow's AioSandboxProvider publishes each container's API on
		 * a host port counted from `port`; sbxfs publishes none */
		if (!cfgr_scalar_is_null(v))
			cfg_fail(x, k, "sbxfs publishes no host port for a sandbox: it reaches each container's API "
				       "inside the container's network namespace, so DeerFlow's base port has no use "
				       "here; remove it (aio.port is the port the AIO server listens on inside its container)");
	}
	else if (!strcmp(k, "allow_other"))
		cfgr_get_bool(x, k, v, &c->allow_other);
	else if (!strcmp(k, "keep_on_exit"))
		cfgr_get_bool(x, k, v, &c->keep_on_exit);
	else if (!strcmp(k, "acquire"))
		parse_acquire(x, c, k, v);
	else if (!strcmp(k, "use_server_proxy"))
		cfgr_get_bool(x, k, v, &c->use_server_proxy);
	else if (!strcmp(k, "environment"))
		parse_environment(x, c, v);
	else if (!strcmp(k, "mounts"))
		parse_mounts(x, c, v);
	else if (!strcmp(k, "users"))
		parse_users(x, c, v);
	else if (!strcmp(k, "network"))
		parse_network(x, c, v);
	else if (!strcmp(k, "pool"))
		parse_pool(x, c, v);
	else if (!strcmp(k, "resources"))
		parse_resources(x, c, v);
	else if (!strcmp(k, "skills") || !strcmp(k, "remote_files") || !strcmp(k, "snapshots") || !strcmp(k, "fuse"))
		parse_section(x, c, k, v);
	else if (!strcmp(k, "image"))
		cfgr_get_str(x, k, v, &c->image);
	else if (!strcmp(k, "container_prefix")) {
		if (!cfgr_get_str(x, k, v, &c->container_prefix) && !names_valid(c->container_prefix))
			cfg_fail(x, k, "must match ^[A-Za-z0-9_-]{1,64}$");
	} else if (!strcmp(k, "base_url"))
		cfgr_get_str(x, k, v, &c->base_url);
	else if (!strcmp(k, "api_key")) {
		if (!cfgr_get_str(x, k, v, &c->api_key)) {
			bool resolved;
			char *r = resolve_var(c->api_key, &resolved);
			free(c->api_key);
			c->api_key = r;
		}
	} else if (!strcmp(k, "domain"))
		cfgr_get_str(x, k, v, &c->domain);
	else if (!strcmp(k, "protocol")) {
		if (!cfgr_get_str(x, k, v, &c->protocol) && strcmp(c->protocol, "http") && strcmp(c->protocol, "https"))
			cfg_fail(x, k, "must be http or https (got '%s')", c->protocol);
	} else if (hooks && hooks->known(k)) {
		log_debug("config", "%s: a key of another provider, not used by %s", k, c->use);
	} else if (!strcmp(k, "thread_data_mounts") || !strcmp(k, "allow_host_bash") ||
		   !strcmp(k, "ownership") || !strncmp(k, "bash_output", 11) || !strncmp(k, "read_file_output", 16) ||
		   !strncmp(k, "ls_output", 9)) {
		/* DeerFlow keys sbxfs has no use for */
		log_debug("config", "%s: accepted, not used by sbxfs", k);
	} else
		log_warn("config", "%s: unknown key, ignored", k);
}

static void config_defaults(struct sbx_config *c)
{
	c->refs = 1;
	c->use = strdup("local");
	c->state_dir = strdup("/var/lib/sbxfs");
	c->replicas = 3;
	c->prewarm = -1;
	c->idle_timeout = 600;
	c->idle_check_interval = 60;
	c->bash_command_timeout = 600;
	c->ready_timeout = 30;
	c->cache_timeout = 300;
	c->request_timeout = 30;
	c->sandbox_timeout = 14400;
	c->skills_container_path = strdup("/mnt/skills");
	c->skills_max_file_size = 100ULL << 20; /* E2B's and DESIGN §8's limits */
	c->skills_max_total_size = 512ULL << 20;
	c->skills_max_files = 2000;
	c->rfiles_cache_max = 4ULL << 30;
	c->snapshots_max = 32;
	c->fuse_io_uring = CONFIG_URING_OFF;
	c->fuse_uring_depth = 64;
	c->net_mode = NET_OPEN;
	c->net_gateway = true;
	c->approval_prompt = true;
	c->temporary_grant_ttl = 300;
	/* resources: a sandbox may not take a shared host down (see README) */
	c->res.memory = 2ULL << 30;
	c->res.cpus = 2.0;
	c->res.pids = 1024;
	c->res.tmp_size = 512ULL << 20;
	c->res.output = 1ULL << 30;
	c->container_prefix = strdup("sbxfs");
	c->protocol = strdup("http");
	c->auto_start = true;
}

static yaml_node_t *mapping_get(struct cfg_ctx *x, yaml_node_t *map, const char *key)
{
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
		if (k && !strcmp(k, key))
			return yaml_document_get_node(x->doc, p->value);
	}
	return NULL;
}

/* Keys sbxfs reads at the top level of a DeerFlow config.yaml (the rest of
 * that file is DeerFlow's, not ours): its own keys and providers' sections. */
static bool sbxfs_top_key(const char *k)
{
	static const char *own[] = { "state_dir", "users", "allow_other", "keep_on_exit", "skills", "remote_files", "resources",
		"snapshots", "acquire", "cache_timeout", "pool", "fuse", NULL };

	for (int i = 0; own[i]; i++)
		if (!strcmp(k, own[i]))
			return true;
	return hooks && hooks->known(k);
}

static void walk_top(struct cfg_ctx *x, struct sbx_config *c, yaml_node_t *root)
{
	yaml_node_t *sandbox, *use;

	if (cfgr_mapping_check_dups(x, NULL, root))
		return;
	sandbox = mapping_get(x, root, "sandbox");
	if (sandbox && sandbox->type != YAML_MAPPING_NODE) {
		cfg_fail(x, "sandbox", "must be a mapping");
		return;
	}
	if (sandbox && cfgr_mapping_check_dups(x, "sandbox", sandbox))
		return;
	/* the provider first: its own keys may come before `use` */
	use = sandbox ? mapping_get(x, sandbox, "use") : NULL;
	if (!use)
		use = mapping_get(x, root, "use");
	if (use && cfgr_scalar(use) && !strcmp(cfgr_scalar(use), CONFIG_DEERFLOW_PACKAGE_CLASS))
		/* DeerFlow runs on this mount through the package (python/): the
		 * one config.yaml serves both, and sbxfs's own provider is
		 * `provider` beside it (local when absent) */
		use = mapping_get(x, sandbox ? sandbox : root, "provider");
	if (use)
		parse_use(x, c, use);
	for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top && !x->failed; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));

		if (!k) {
			cfg_fail(x, "(top level)", "keys must be strings");
			break;
		}
		if (!strcmp(k, "sandbox") || (sandbox && !sbxfs_top_key(k)))
			continue;
		parse_key(x, c, k, yaml_document_get_node(x->doc, p->value));
	}
	for (yaml_node_pair_t *p = sandbox ? sandbox->data.mapping.pairs.start : NULL;
		sandbox && p < sandbox->data.mapping.pairs.top && !x->failed; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
		if (k)
			parse_key(x, c, k, yaml_document_get_node(x->doc, p->value));
	}
}

struct sbx_config *config_parse(const char *name, const char *text, size_t len, char *err, size_t errlen)
{
	struct cfg_ctx x = { .err = err, .errlen = errlen };
	struct sbx_config *c = NULL;
	yaml_parser_t parser;
	yaml_document_t doc;
	yaml_node_t *root;
	int have_parser = 0, have_doc = 0;

	err[0] = '\0';
	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "%s: out of memory", name);
		return NULL;
	}
	config_defaults(c);
	c->path = strdup(name);
	if (!c->path || !c->use || !c->state_dir || !c->skills_container_path || !c->container_prefix || !c->protocol) {
		snprintf(err, errlen, "%s: out of memory", name);
		goto fail;
	}
	if (!yaml_parser_initialize(&parser)) {
		snprintf(err, errlen, "%s: cannot initialise the YAML parser", name);
		goto fail;
	}
	have_parser = 1;
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &doc)) {
		snprintf(err, errlen, "%s: line %zu: YAML syntax error: %s", name, parser.problem_mark.line + 1,
			parser.problem ? parser.problem : "unknown");
		goto fail;
	}
	have_doc = 1;
	x.doc = &doc;
	root = yaml_document_get_root_node(&doc);
	if (root && !(root->type == YAML_SCALAR_NODE && cfgr_scalar_is_null(root))) {
		if (root->type != YAML_MAPPING_NODE) {
			snprintf(err, errlen, "%s: the top level must be a mapping", name);
			goto fail;
		}
		walk_top(&x, c, root);
	}
	if (!x.failed)
		check_mounts(&x, c);
	if (!x.failed && !c->auto_start && (!c->base_url || !c->base_url[0]))
		/* DeerFlow's AioSandboxProvider raises at acquire: "auto_start is
		 * disabled and no base_url is configured"; sbxfs says it at start */
		cfg_fail(&x, "auto_start", "false without base_url: nothing would start a sandbox (DeerFlow refuses it "
					   "too: auto_start is disabled and no base_url is configured); set base_url to "
					   "an existing AIO sandbox, or remove auto_start");
	if (!x.failed && c->prewarm > c->replicas)
		cfg_fail(&x, "pool.prewarm", "%d spares cannot exceed replicas (%d): spares count toward it", c->prewarm,
			c->replicas);
	if (!x.failed && hooks && hooks->check(&x, c))
		x.failed = 1;
	if (x.failed)
		goto fail;
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	return c;
fail:
	if (have_doc)
		yaml_document_delete(&doc);
	if (have_parser)
		yaml_parser_delete(&parser);
	config_put(c);
	return NULL;
}

struct sbx_config *config_load(const char *path, char *err, size_t errlen)
{
	struct buf text = BUF_INIT(CONFIG_MAX);
	struct sbx_config *c = NULL;
	char chunk[8192];
	FILE *f = fopen(path, "re");
	size_t n;

	err[0] = '\0';
	if (!f) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return NULL;
	}
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		if (buf_add(&text, chunk, n)) {
			snprintf(err, errlen, "%s: larger than %d bytes", path, CONFIG_MAX);
			goto out;
		}
	if (ferror(f)) {
		snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
		goto out;
	}
	c = config_parse(path, text.ptr ? text.ptr : "", text.len, err, errlen);
out:
	fclose(f);
	buf_free(&text);
	return c;
}

struct sbx_config *config_get(struct sbx_config *c)
{
	__atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
	return c;
}

void config_put(struct sbx_config *c)
{
	if (!c || __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	if (c->prov && hooks)
		hooks->free_prov(c);
	for (size_t i = 0; i < c->n_env; i++) {
		free(c->env[i].key);
		free(c->env[i].value);
		free(c->env[i].shown);
	}
	for (size_t i = 0; i < c->n_mounts; i++) {
		free(c->mounts[i].host_path);
		free(c->mounts[i].container_path);
	}
	for (size_t i = 0; i < c->n_users; i++)
		free(c->users[i].name);
	for (size_t i = 0; i < c->n_allow_domains; i++)
		free(c->allow_domains[i]);
	for (size_t i = 0; i < c->n_net_hosts; i++) {
		for (size_t j = 0; j < c->net_hosts[i].n_addrs; j++)
			free(c->net_hosts[i].addrs[j]);
		free(c->net_hosts[i].addrs);
		free(c->net_hosts[i].name);
	}
	free(c->net_hosts);
	free(c->env);
	free(c->mounts);
	free(c->users);
	free(c->allow_domains);
	free(c->path);
	free(c->use);
	free(c->state_dir);
	free(c->skills_container_path);
	free(c->skills_path);
	free(c->image);
	free(c->container_prefix);
	free(c->base_url);
	free(c->api_key);
	free(c->domain);
	free(c->protocol);
	free(c);
}

const char *config_net_mode_name(enum net_mode m)
{
	return m == NET_OPEN ? "open" : m == NET_ISOLATED ? "isolated" : "allowlist";
}

static json_t *jstr_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

int config_show(const struct sbx_config *c, struct buf *out)
{
	json_t *o = json_object(), *env = json_object(), *mounts = json_array(), *net = json_object(),
	       *doms = json_array(), *skills = json_object(), *users;

	for (size_t i = 0; i < c->n_env; i++)
		json_object_set_new(env, c->env[i].key, json_string(c->env[i].shown));
	for (size_t i = 0; i < c->n_mounts; i++)
		json_array_append_new(mounts, json_pack("{s:s,s:s,s:b}", "host_path", c->mounts[i].host_path,
							"container_path", c->mounts[i].container_path, "read_only",
							c->mounts[i].read_only));
	for (size_t i = 0; i < c->n_allow_domains; i++)
		json_array_append_new(doms, json_string(c->allow_domains[i]));
	if (c->users_passwd) {
		users = json_string("passwd");
	} else if (c->n_users) {
		users = json_object();
		for (size_t i = 0; i < c->n_users; i++)
			json_object_set_new(users, c->users[i].name,
				c->users[i].max_sandboxes ? json_pack("{s:I,s:i}", "uid", (json_int_t)c->users[i].uid,
								    "max_sandboxes", c->users[i].max_sandboxes)
							  : json_integer(c->users[i].uid));
	} else {
		users = json_null();
	}
	json_object_set_new(net, "mode", json_string(config_net_mode_name(c->net_mode)));
	json_object_set_new(net, "allow_domains", doms);
	json_object_set_new(net, "approval", json_string(c->approval_prompt ? "prompt" : "deny"));
	json_object_set_new(net, "temporary_grant_ttl", json_integer(c->temporary_grant_ttl));
	json_object_set_new(net, "approval_wait", json_integer(c->approval_wait));
	json_object_set_new(net, "allow_private_destinations", json_boolean(c->allow_private));
	json_object_set_new(net, "gateway", json_boolean(c->net_gateway));
	{
		json_t *hosts = json_object();
		for (size_t i = 0; i < c->n_net_hosts; i++) {
			json_t *a = json_array();
			for (size_t j = 0; j < c->net_hosts[i].n_addrs; j++)
				json_array_append_new(a, json_string(c->net_hosts[i].addrs[j]));
			json_object_set_new(hosts, c->net_hosts[i].name, a);
		}
		json_object_set_new(net, "hosts", hosts);
	}
	json_object_set_new(skills, "container_path", json_string(c->skills_container_path));
	json_object_set_new(skills, "path", jstr_or_null(c->skills_path));
	json_object_set_new(skills, "max_file_size", json_integer((json_int_t)c->skills_max_file_size));
	json_object_set_new(skills, "max_total_size", json_integer((json_int_t)c->skills_max_total_size));
	json_object_set_new(skills, "max_files", json_integer((json_int_t)c->skills_max_files));

	json_object_set_new(o, "config_file", json_string(c->path));
	json_object_set_new(o, "use", json_string(c->use));
	json_object_set_new(o, "state_dir", json_string(c->state_dir));
	json_object_set_new(o, "replicas", json_integer(c->replicas));
	json_object_set_new(o, "pool", json_pack("{s:o}", "prewarm", c->prewarm < 0 ? json_string("default") : json_integer(c->prewarm)));
	json_object_set_new(o, "idle_timeout", json_integer(c->idle_timeout));
	json_object_set_new(o, "idle_check_interval", json_integer(c->idle_check_interval));
	json_object_set_new(o, "bash_command_timeout", json_integer(c->bash_command_timeout));
	json_object_set_new(o, "ready_timeout", json_integer(c->ready_timeout));
	json_object_set_new(o, "cache_timeout", json_integer(c->cache_timeout));
	json_object_set_new(o, "allow_other", json_boolean(c->allow_other));
	json_object_set_new(o, "keep_on_exit", json_boolean(c->keep_on_exit));
	json_object_set_new(o, "acquire", json_string(c->acquire_sync ? "sync" : "async"));
	json_object_set_new(o, "environment", env);
	json_object_set_new(o, "mounts", mounts);
	json_object_set_new(o, "users", users);
	json_object_set_new(o, "network", net);
	json_object_set_new(o, "resources", json_pack("{s:I,s:f,s:I,s:I,s:I}", "memory", (json_int_t)c->res.memory,
						  "cpus", c->res.cpus, "pids", (json_int_t)c->res.pids, "tmp_size",
						  (json_int_t)c->res.tmp_size, "output", (json_int_t)c->res.output));
	json_object_set_new(o, "skills", skills);
	json_object_set_new(o, "remote_files", json_pack("{s:I}", "cache_size", (json_int_t)c->rfiles_cache_max));
	json_object_set_new(o, "snapshots", json_pack("{s:i}", "max_per_thread", (int)c->snapshots_max));
	json_object_set_new(o, "fuse", json_pack("{s:s,s:i}", "io_uring", config_uring_name(c->fuse_io_uring),
					       "io_uring_queue_depth", (int)c->fuse_uring_depth));
	json_object_set_new(o, "image", jstr_or_null(c->image));
	json_object_set_new(o, "container_prefix", jstr_or_null(c->container_prefix));
	json_object_set_new(o, "base_url", jstr_or_null(c->base_url));
	json_object_set_new(o, "api_key", c->api_key && *c->api_key ? json_string("***") : json_null());
	json_object_set_new(o, "domain", jstr_or_null(c->domain));
	json_object_set_new(o, "protocol", jstr_or_null(c->protocol));
	json_object_set_new(o, "request_timeout", json_integer(c->request_timeout));
	json_object_set_new(o, "sandbox_timeout", json_integer(c->sandbox_timeout));
	json_object_set_new(o, "use_server_proxy", json_boolean(c->use_server_proxy));
	json_object_set_new(o, "auto_start", json_boolean(c->auto_start));
	if (hooks)
		hooks->show(c, o);
	return json_to_buf(o, out);
}

int config_user_max_sandboxes(const struct sbx_config *c, const char *name)
{
	for (size_t i = 0; i < c->n_users; i++)
		if (!strcmp(c->users[i].name, name))
			return c->users[i].max_sandboxes;
	return 0;
}

int config_user_lookup(const struct sbx_config *c, const char *name, uid_t *uid, gid_t *gid)
{
	if (c->users_passwd) {
		struct passwd pw, *res = NULL;
		char tmp[4096];
		if (getpwnam_r(name, &pw, tmp, sizeof(tmp), &res) || !res)
			return -1;
		*uid = res->pw_uid;
		*gid = res->pw_gid;
		return 0;
	}
	if (!c->n_users)
		return 1;
	for (size_t i = 0; i < c->n_users; i++)
		if (!strcmp(c->users[i].name, name)) {
			*uid = c->users[i].uid;
			*gid = c->users[i].gid;
			return 0;
		}
	return -1;
}
