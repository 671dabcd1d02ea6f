/* SPDX-License-Identifier: MIT */
/*
 * opensandbox.c - the opensandbox provider: sandboxes made by an OpenSandbox
 * server (DeerFlow's OpenSandboxProvider, reference/remote-apis.md §A),
 * which runs them on Docker or Kubernetes: the path for users who outgrow
 * one host.  sbxfs is the file interface in front of it; several sbxfs
 * hosts can share one server (each finds its own sandboxes by metadata).
 *
 * What it owns:
 *   - the configuration: DeerFlow's flat keys (image, api_key, domain,
 *     protocol, request_timeout, ready_timeout, sandbox_timeout,
 *     use_server_proxy) with the OPEN_SANDBOX_API_KEY / OPEN_SANDBOX_DOMAIN
 *     fallbacks, and an `opensandbox:` section (execd_token, entrypoint);
 *   - the lifecycle: create (image, TTL, env, label-safe metadata naming the
 *     provider, scope, state_dir and, where label-safe, user and thread;
 *     resources as resourceLimits; the network policy as networkPolicy),
 *     readiness (Running, then execd's /ping), the bootstrap of
 *     /mnt/user-data/{workspace,uploads,outputs} and the skills path, health,
 *     delete (404 = already gone), adoption by record or by metadata,
 *     discovery of orphans, and renewal of the expiry while a sandbox lives
 *     (active or warm: the pool holds it), by one renewer thread
 *     (opensandbox_renew.c);
 *   - terminal failures: a 404 naming the sandbox (it expired, someone
 *     deleted it) is reported with sbx_box_gone(): the pool invalidates it;
 *   - jobs through execd's POST /command event stream (opensandbox_jobs.c);
 *   - remote files and skills by upload through execd's files API
 *     (opensandbox_files.c).
 *
 * The expiry renewal, and the watch over creates of unknown outcome and
 * failed deletes (suspects), are opensandbox_renew.c's: one thread, with
 * the list of live boxes it walks (os_register) and its lock, os.lock.
 *
 * Locks: each box's own lock (its execd endpoint) is a leaf: never held
 * across a network call, never with os.lock.
 */
#define _GNU_SOURCE
#include "opensandbox_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/http.h"
#include "../common/json.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/names.h"
#include "../common/token.h"
#include "../common/util.h"
#include "provider_int.h"
#include "record.h"

#define OS_DEFAULT_IMAGE "python:3.11"
#define OS_DEFAULT_DOMAIN "localhost:8080"
#define OS_RECORD "opensandbox.json"
#define OS_PING_INTERVAL_US 200000

struct obox *obox(struct sbx_box *b)
{
	if (!b || b->prov != &provider_opensandbox)
		abort(); /* a box handed to the wrong provider is a programming error */
	return (struct obox *)b;
}

const struct os_conf *os_conf_of(const struct sbx_config *cfg)
{
	static const struct os_conf none;

	return cfg->prov ? cfg->prov : &none;
}

/* ---- configuration --------------------------------------------------------------------- */

static struct os_conf *os_conf_new(struct cfg_ctx *x, struct sbx_config *cfg)
{
	if (!cfg->prov) {
		cfg->prov = calloc(1, sizeof(struct os_conf));
		if (!cfg->prov)
			cfg_fail(x, "opensandbox", "out of memory");
	}
	return cfg->prov;
}

static int conf_key(struct cfg_ctx *x, void *arg, const char *key, const char *full, struct cfg_node *v)
{
	struct os_conf *oc = arg;

	if (!strcmp(key, "execd_token")) {
		if (cfg_str(x, full, v, &oc->execd_token))
			return -1;
		if (strpbrk(oc->execd_token, "\r\n")) {
			cfg_fail(x, full, "must be one line");
			return -1;
		}
		return 0;
	}
	if (!strcmp(key, "entrypoint")) {
		if (cfg_strv(x, full, v, &oc->entrypoint, &oc->n_entrypoint))
			return -1;
		if (!oc->n_entrypoint) {
			cfg_fail(x, full, "must name a command (at least one word)");
			return -1;
		}
		return 0;
	}
	log_warn("config", "%s: unknown key, ignored", full);
	return 0;
}

static int os_config_key(struct cfg_ctx *x, struct sbx_config *cfg, const char *key, struct cfg_node *v)
{
	struct os_conf *oc = os_conf_new(x, cfg);

	return oc ? cfg_each(x, key, v, conf_key, oc) : -1;
}

/* host[:port][/path], or a URL with its scheme: nothing that could smuggle
 * a header, a query or credentials into the requests */
static bool domain_ok(const char *d)
{
	const char *host = strstr(d, "://") ? strstr(d, "://") + 3 : d;

	if (!*host || strlen(d) > 255 || strchr(host, '@') || strchr(d, '?') || strchr(d, '#'))
		return false;
	for (const char *p = d; *p; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f || *p == '"' || *p == '\\' || *p == '<' || *p == '>')
			return false;
	return true;
}

/* Whether the lifecycle base URL names this host's loopback (parsed as
 * libcurl does: "localhost.example" and "127.0.0.1.nip.io" are not). */
static bool loopback_base(const char *base)
{
	struct http_url u;

	return !http_url_parse(base, &u) && http_host_loopback(u.host);
}

static int os_config_check(struct cfg_ctx *x, struct sbx_config *cfg)
{
	struct os_conf *oc = os_conf_new(x, cfg);
	const char *key = cfg->api_key && cfg->api_key[0] ? cfg->api_key : getenv("OPEN_SANDBOX_API_KEY");
	const char *dom = cfg->domain && cfg->domain[0] ? cfg->domain : getenv("OPEN_SANDBOX_DOMAIN");
	struct buf b = BUF_INIT(1024);

	if (!oc)
		return -1;
	oc->key_source = cfg->api_key && cfg->api_key[0] ? "api_key" : key && key[0] ? "OPEN_SANDBOX_API_KEY" : NULL;
	oc->domain_source = cfg->domain && cfg->domain[0] ? "domain" : dom && dom[0] ? "OPEN_SANDBOX_DOMAIN" : NULL;
	if (!dom || !dom[0])
		dom = OS_DEFAULT_DOMAIN;
	if (!domain_ok(dom)) {
		cfg_fail(x, oc->domain_source && !strcmp(oc->domain_source, "domain") ? "domain" : "OPEN_SANDBOX_DOMAIN",
			"must be host[:port][/path] or http(s)://host[:port][/path], without spaces, credentials, "
			"query or fragment (got '%.80s')", dom);
		return -1;
	}
	if (strstr(dom, "://") && strncmp(dom, "http://", 7) && strncmp(dom, "https://", 8)) {
		cfg_fail(x, "domain", "only http:// and https:// are spoken (got '%.80s')", dom);
		return -1;
	}
	if (key && strpbrk(key, "\r\n")) {
		cfg_fail(x, "api_key", "must be one line");
		return -1;
	}
	if (cfg->sandbox_timeout > 0 && cfg->sandbox_timeout < 60)
		log_warn("config", "sandbox_timeout %ld: the OpenSandbox API refuses TTLs under 60 s (0 = no TTL)",
			cfg->sandbox_timeout);
	if (cfg->image && strpbrk(cfg->image, " \t\r\n")) {
		cfg_fail(x, "image", "must be an image reference without spaces (got '%s')", cfg->image);
		return -1;
	}
	/* the lifecycle base: a domain with a scheme is used as it is (the SDK's rule) */
	if (strstr(dom, "://")) {
		if (buf_adds(&b, dom))
			goto nomem;
		while (b.len && b.ptr[b.len - 1] == '/')
			b.ptr[--b.len] = '\0';
		if (buf_adds(&b, "/v1"))
			goto nomem;
		oc->scheme = strndup(dom, (size_t)(strstr(dom, "://") - dom));
	} else {
		if (buf_addf(&b, "%s://%s", cfg->protocol, dom))
			goto nomem;
		while (b.len && b.ptr[b.len - 1] == '/')
			b.ptr[--b.len] = '\0';
		if (buf_adds(&b, "/v1"))
			goto nomem;
		oc->scheme = strdup(cfg->protocol);
	}
	/* what libcurl will read: http(s), a host, nothing else before the path */
	{
		struct http_url u;
		if (http_url_parse(b.ptr, &u) || (strcmp(u.scheme, "http") && strcmp(u.scheme, "https")) || u.userinfo ||
		    u.query || u.fragment || !u.host[0]) {
			cfg_fail(x, oc->domain_source && !strcmp(oc->domain_source, "domain") ? "domain" : "OPEN_SANDBOX_DOMAIN",
				"must be host[:port][/path] or http(s)://host[:port][/path] (got '%.80s')", dom);
			buf_free(&b);
			return -1;
		}
	}
	free(oc->base);
	oc->base = buf_take(&b, NULL);
	free(oc->api_key);
	oc->api_key = strdup(key ? key : "");
	if (!oc->base || !oc->scheme || !oc->api_key)
		goto nomem;
	if (!strcmp(cfg->use, "opensandbox") && cfg->base_url && cfg->base_url[0])
		log_warn("config", "base_url: not used by the opensandbox provider (domain and protocol are)");
	return 0;
nomem:
	buf_free(&b);
	cfg_fail(x, "opensandbox", "out of memory");
	return -1;
}

static void os_config_show(const struct sbx_config *cfg, struct json_t *out)
{
	const struct os_conf *oc = os_conf_of(cfg);
	json_t *o = json_object(), *ep = json_array();

	for (size_t i = 0; i < oc->n_entrypoint; i++)
		json_array_append_new(ep, json_string(oc->entrypoint[i]));
	json_object_set_new(o, "lifecycle", oc->base ? json_string(oc->base) : json_null());
	json_object_set_new(o, "api_key", oc->api_key && oc->api_key[0] ? json_string("***") : json_null());
	json_object_set_new(o, "api_key_from", oc->key_source ? json_string(oc->key_source) : json_null());
	json_object_set_new(o, "domain_from", json_string(oc->domain_source ? oc->domain_source : "default"));
	json_object_set_new(o, "execd_token", oc->execd_token && oc->execd_token[0] ? json_string("***") : json_null());
	json_object_set_new(o, "entrypoint", ep);
	json_object_set_new((json_t *)out, "opensandbox", o);
	if (!cfg->image)
		json_object_set_new((json_t *)out, "image", json_string(OS_DEFAULT_IMAGE));
}

static void os_config_free(void *prov)
{
	struct os_conf *oc = prov;

	if (!oc)
		return;
	for (size_t i = 0; i < oc->n_entrypoint; i++)
		free(oc->entrypoint[i]);
	free(oc->entrypoint);
	free(oc->execd_token);
	free(oc->api_key);
	free(oc->base);
	free(oc->scheme);
	free(oc);
}

void os_server(const struct sbx_config *cfg, struct osapi_server *srv, const char *scope)
{
	const struct os_conf *oc = os_conf_of(cfg);

	srv->base = oc->base ? oc->base : "http://" OS_DEFAULT_DOMAIN "/v1";
	srv->api_key = oc->api_key;
	srv->timeout_ms = cfg->request_timeout * 1000;
	srv->scope = scope;
}

/* ---- start and end of day -------------------------------------------------------------------- */

static enum sbx_err os_preflight(const struct sbx_config *cfg, char *err, size_t errlen)
{
	if (!os_conf_of(cfg)->base) {
		snprintf(err, errlen, "opensandbox: the configuration was not checked");
		return SBX_ERR_INVAL;
	}
	return SBX_OK;
}

static enum sbx_err os_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
	const struct os_conf *oc = os_conf_of(cfg);
	enum sbx_err e = os_preflight(cfg, err, errlen);

	if (e)
		return e;
	if (http_init()) {
		snprintf(err, errlen, "opensandbox provider: libcurl cannot be initialised");
		return SBX_ERR_IO;
	}
	/* DeerFlow's warnings: a missing key or domain, plain HTTP off this host */
	if (!oc->key_source)
		log_warn("opensandbox", "no api_key (nor OPEN_SANDBOX_API_KEY): requests go without "
					"OPEN-SANDBOX-API-KEY, which only a server without server.api_key accepts");
	if (!oc->domain_source)
		log_warn("opensandbox", "no domain (nor OPEN_SANDBOX_DOMAIN): using %s", OS_DEFAULT_DOMAIN);
	if (!strcmp(oc->scheme, "http") && !loopback_base(oc->base))
		log_warn("opensandbox", "plain HTTP to %s, a host that is not this one: the API key and every file "
					"travel unencrypted (protocol: https)", oc->base);
	log_info("opensandbox", "lifecycle API at %s%s", oc->base, cfg->use_server_proxy ? " (execd through the server's proxy)" : "");
	return os_renew_start(err, errlen);
}

static void os_shutdown(void)
{
	os_renew_stop();
}

/* ---- boxes ------------------------------------------------------------------------------------- */

static struct obox *obox_new(const struct sbx_spec *s)
{
	struct obox *ob = calloc(1, sizeof(*ob));

	if (!ob)
		return NULL;
	if (!(ob->thread_dir = strdup(s->dirs.thread_dir))) {
		free(ob);
		return NULL;
	}
	sbx_box_init(&ob->base, &provider_opensandbox);
	pthread_mutex_init(&ob->lock, NULL);
	snprintf(ob->token, sizeof(ob->token), "%s", s->token);
	snprintf(ob->state_id, sizeof(ob->state_id), "%s", s->state_id);
	if (s->spare)
		snprintf(ob->scope, sizeof(ob->scope), "spare/%s", s->token);
	else
		snprintf(ob->scope, sizeof(ob->scope), "%s/%s", s->user, s->thread);
	ob->cfg = config_get((struct sbx_config *)s->cfg);
	ob->output_max = s->cfg->res.output;
	return ob;
}

static void obox_free(struct obox *ob)
{
	if (!ob)
		return;
	pthread_mutex_destroy(&ob->lock);
	config_put(ob->cfg);
	free(ob->thread_dir);
	free(ob);
}

/* The box's execd endpoint (a copy), resolving it when it is not known yet
 * (an adoption while the sandbox was not Running) or was dropped after a
 * connection failure.  The network call runs with no lock held.  An
 * endpoint the daemon refuses (osapi_endpoint's PERM: another scheme,
 * credentials, ...) is logged as an error naming it, sets *refused (when
 * given) and is SBX_ERR_IO for the caller: a server fault. */
static enum sbx_err obox_execd_ex(struct obox *ob, struct osapi_execd *out, bool *refused)
{
	struct osapi_server srv;
	char err[OSAPI_ERR_LEN];
	enum sbx_err e;

	if (refused)
		*refused = false;
	pthread_mutex_lock(&ob->lock);
	if (ob->have_ex) {
		*out = ob->ex;
		pthread_mutex_unlock(&ob->lock);
		return SBX_OK;
	}
	pthread_mutex_unlock(&ob->lock);
	if (sbx_box_is_gone(&ob->base))
		return SBX_ERR_GONE;
	os_server(ob->cfg, &srv, ob->scope);
	e = osapi_endpoint(&srv, ob->id, OSAPI_EXECD_PORT, ob->cfg->use_server_proxy, os_conf_of(ob->cfg)->scheme, out,
		err, sizeof(err));
	if (e == SBX_ERR_GONE)
		sbx_box_gone(&ob->base, "the remote sandbox %s is gone (404 on its execd endpoint)", ob->id);
	if (e == SBX_ERR_PERM) {
		log_err(ob->scope, "opensandbox: sandbox %s: %s", ob->id, err);
		if (refused)
			*refused = true;
		return SBX_ERR_IO;
	}
	if (e) {
		if (e == SBX_ERR_INTR)
			log_debug(ob->scope, "opensandbox: execd endpoint of %s: %s", ob->id, err);
		else
			log_warn(ob->scope, "opensandbox: execd endpoint of %s: %s", ob->id, err);
		return e;
	}
	snprintf(out->token, sizeof(out->token), "%s", os_conf_of(ob->cfg)->execd_token ? os_conf_of(ob->cfg)->execd_token : "");
	snprintf(out->scope, sizeof(out->scope), "%s", ob->scope);
	pthread_mutex_lock(&ob->lock);
	ob->ex = *out;
	ob->have_ex = true;
	pthread_mutex_unlock(&ob->lock);
	return SBX_OK;
}

enum sbx_err obox_execd(struct obox *ob, struct osapi_execd *out)
{
	return obox_execd_ex(ob, out, NULL);
}

/* What an execd call's failure says about the box: a 404 naming the
 * sandbox makes it gone; a transport failure drops the endpoint so the next
 * call resolves it again (it may have moved: a resume, a rescheduled pod). */
void obox_failed(struct obox *ob, enum sbx_err e, bool gone, const char *what, const char *err)
{
	if (gone) {
		sbx_box_gone(&ob->base, "the remote sandbox %s is gone (execd: %s)", ob->id, err);
		return;
	}
	if (e == SBX_ERR_INTR) { /* the caller gave up (a FUSE interrupt): says nothing about the box */
		log_debug(ob->scope, "opensandbox: %s: %s", what, err);
		return;
	}
	if (e == SBX_ERR_IO && strstr(err, "OpenSandbox answered") == NULL) {
		pthread_mutex_lock(&ob->lock);
		ob->have_ex = false;
		pthread_mutex_unlock(&ob->lock);
	}
	log_warn(ob->scope, "opensandbox: %s: %s", what, err);
}

/* ---- records ----------------------------------------------------------------------------------- */

int os_save(struct obox *ob)
{
	json_t *o = json_pack("{s:s,s:s,s:f}", "id", ob->id, "scope", ob->token, "created_at", util_wall_now());
	int r = o ? record_save(ob->thread_dir, OS_RECORD, o) : -1;

	json_decref(o);
	return r;
}

void os_unsave(const char *thread_dir)
{
	record_remove(thread_dir, OS_RECORD);
}

/* ---- create ------------------------------------------------------------------------------------ */

/* A Kubernetes label value: <= 63, alphanumeric at both ends, [-_.] inside. */
static bool label_safe(const char *v)
{
	size_t n = strlen(v);

	if (!n || n > 63)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = v[i];
		bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && ((i == 0 || i == n - 1) || (c != '-' && c != '_' && c != '.')))
			return false;
	}
	return true;
}

struct create_ctx {
	struct osapi_kv meta[8], res[2], env[512];
	struct osapi_egress egress[256];
	char mem[32], cpu[32];
	const char *entry[65];
	size_t n_meta, n_res, n_env, n_egress;
};

static int os_request(struct create_ctx *c, struct osapi_create_req *q, const struct sbx_spec *s)
{
	const struct sbx_config *cfg = s->cfg;
	const struct os_conf *oc = os_conf_of(cfg);
	static const char *const default_entry[] = { "tail", "-f", "/dev/null", NULL };

	memset(q, 0, sizeof(*q));
	c->meta[c->n_meta++] = (struct osapi_kv){ OS_META_PROVIDER, "opensandbox" };
	c->meta[c->n_meta++] = (struct osapi_kv){ OS_META_STATE_ID, s->state_id };
	c->meta[c->n_meta++] = (struct osapi_kv){ OS_META_SCOPE, s->token };
	/* user and thread when they are label values (a name may begin or end
	 * with - or _, or be 64 long: then only the scope names it) */
	if (label_safe(s->user) && label_safe(s->thread)) {
		c->meta[c->n_meta++] = (struct osapi_kv){ OS_META_USER, s->user };
		c->meta[c->n_meta++] = (struct osapi_kv){ OS_META_THREAD, s->thread };
	}
	/* resources: memory in Mi, cpus in millicores; the API needs at least one */
	if (cfg->res.memory)
		snprintf(c->mem, sizeof(c->mem), "%lluMi", (unsigned long long)((cfg->res.memory + (1 << 20) - 1) >> 20));
	else
		snprintf(c->mem, sizeof(c->mem), "2Gi");
	if (cfg->res.cpus > 0)
		snprintf(c->cpu, sizeof(c->cpu), "%lldm", (long long)(cfg->res.cpus * 1000 + 0.999));
	else
		snprintf(c->cpu, sizeof(c->cpu), "1");
	c->res[c->n_res++] = (struct osapi_kv){ "cpu", c->cpu };
	c->res[c->n_res++] = (struct osapi_kv){ "memory", c->mem };
	for (size_t i = 0; i < cfg->n_env && c->n_env < 512; i++)
		c->env[c->n_env++] = (struct osapi_kv){ cfg->env[i].key, cfg->env[i].value };
	/* the network policy, where the API can carry it: a default and domain rules */
	if (cfg->net_mode != NET_OPEN) {
		q->net_default = "deny";
		for (size_t i = 0; cfg->net_mode == NET_ALLOWLIST && i < cfg->n_allow_domains && c->n_egress < 256; i++)
			c->egress[c->n_egress++] = (struct osapi_egress){ "allow", cfg->allow_domains[i] };
	}
	for (size_t i = 0; i < oc->n_entrypoint && i < 64; i++)
		c->entry[i] = oc->entrypoint[i];
	c->entry[oc->n_entrypoint < 64 ? oc->n_entrypoint : 64] = NULL;
	q->image = cfg->image ? cfg->image : OS_DEFAULT_IMAGE;
	q->entrypoint = oc->n_entrypoint ? c->entry : default_entry;
	q->timeout = cfg->sandbox_timeout;
	q->env = c->env;
	q->n_env = c->n_env;
	q->metadata = c->meta;
	q->n_metadata = c->n_meta;
	q->resources = c->res;
	q->n_resources = c->n_res;
	q->egress = c->egress;
	q->n_egress = c->n_egress;
	return 0;
}

/* Poll GET /sandboxes/{id} until Running (fail on Failed, Terminated, 404). */
static enum sbx_err os_wait_running(struct obox *ob, const struct osapi_server *srv, struct osapi_sandbox *sb,
	uint64_t deadline)
{
	char err[OSAPI_ERR_LEN];
	useconds_t pause = 50000;

	while (strcmp(sb->state, "Running")) {
		enum sbx_err e;

		if (!strcmp(sb->state, "Failed") || !strcmp(sb->state, "Terminated") || !strcmp(sb->state, "Stopping")) {
			log_err(ob->scope, "opensandbox: sandbox %s is %s (%s: %s)", ob->id, sb->state, sb->reason, sb->message);
			return SBX_ERR_IO;
		}
		e = token_check(token_current());
		if (e == SBX_ERR_INTR)
			return e; /* the caller gave up: the create cleans up */
		if (util_now_ms() >= deadline) {
			log_err(ob->scope, "opensandbox: sandbox %s still %s after ready_timeout (%ld s)", ob->id, sb->state,
				ob->cfg->ready_timeout);
			return SBX_ERR_TIMEOUT;
		}
		usleep(pause);
		pause = pause < 400000 ? pause * 2 : 500000;
		e = osapi_get(srv, ob->id, sb, err, sizeof(err));
		if (e == SBX_ERR_GONE) {
			log_err(ob->scope, "opensandbox: sandbox %s disappeared while starting: %s", ob->id, err);
			return SBX_ERR_IO;
		}
		if (e)
			log_warn(ob->scope, "opensandbox: waiting for %s: %s", ob->id, err);
	}
	return SBX_OK;
}

/* Poll execd's /ping every 200 ms (the SDK's pace) until it answers. */
static enum sbx_err os_wait_execd(struct obox *ob, uint64_t deadline)
{
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN] = "no answer";
	enum sbx_err e;
	bool no_endpoint = false, refused = false;

	for (;;) {
		uint64_t now = util_now_ms();
		long left = deadline > now ? (long)(deadline - now) : 1;

		e = obox_execd_ex(ob, &ex, &refused);
		if (refused)
			return SBX_ERR_IO; /* logged, naming it: asking again gets the same */
		no_endpoint = e != SBX_OK;
		if (no_endpoint)
			snprintf(err, sizeof(err), "its execd endpoint could not be resolved (%s)", sbx_err_name(e));
		if (!e)
			e = osapi_ping(&ex, left < 3000 ? left : 3000, err, sizeof(err));
		if (!e)
			return SBX_OK;
		if (e == SBX_ERR_GONE)
			return SBX_ERR_IO; /* the sandbox vanished while starting */
		if (e == SBX_ERR_ACCESS) {
			log_err(ob->scope, "opensandbox: execd of %s refuses us (opensandbox.execd_token?): %s", ob->id, err);
			return SBX_ERR_ACCESS;
		}
		if (token_check(token_current()) == SBX_ERR_INTR)
			return SBX_ERR_INTR;
		if (util_now_ms() >= deadline)
			break;
		usleep(OS_PING_INTERVAL_US);
	}
	log_err(ob->scope, "opensandbox: execd of %s did not answer /ping within ready_timeout (%ld s): %s", ob->id,
		ob->cfg->ready_timeout, err);
	return no_endpoint ? SBX_ERR_IO : SBX_ERR_TIMEOUT; /* the server failing, or execd never ready */
}

/* mkdir -p of the data directories and the skills path (DeerFlow's bootstrap). */
static enum sbx_err os_bootstrap(struct obox *ob)
{
	const char *dirs[] = { LAYOUT_SANDBOX_USER_DATA "/workspace", LAYOUT_SANDBOX_USER_DATA "/uploads",
		LAYOUT_SANDBOX_USER_DATA "/outputs", ob->cfg->skills_container_path };
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN];
	enum sbx_err e = obox_execd(ob, &ex);
	bool gone = false;

	for (size_t i = 0; !e && i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		e = osapi_make_dir(&ex, dirs[i], 0755, &gone, err, sizeof(err));
		if (e)
			log_err(ob->scope, "opensandbox: bootstrap mkdir -p %s in %s: %s", dirs[i], ob->id, err);
	}
	return e;
}

static enum sbx_err os_create(const struct sbx_spec *s, struct sbx_box **out)
{
	struct create_ctx *c = calloc(1, sizeof(*c));
	struct osapi_create_req q;
	struct osapi_server srv;
	struct osapi_sandbox sb;
	struct obox *ob = obox_new(s);
	char err[OSAPI_ERR_LEN];
	uint64_t deadline = util_now_ms() + (uint64_t)s->cfg->ready_timeout * 1000;
	enum sbx_err e = SBX_ERR_NOMEM;
	bool made = false;
	int r;

	if (!c || !ob || os_request(c, &q, s))
		goto out;
	os_server(s->cfg, &srv, ob->scope);
	r = sbx_box_own_host_files(&ob->base, s);
	if (r) {
		log_err(ob->scope, "opensandbox: cannot give skills/ to the user: %s", strerror(r));
		e = sbx_err_from_errno(r);
		goto out;
	}
	os_create_begin(s->token);
	e = osapi_create(&srv, &q, &sb, err, sizeof(err));
	if (e) {
		os_create_end(s->token);
		log_err(ob->scope, "opensandbox: create: %s", err);
		/* no answer, or a server error: it may still make the sandbox */
		if (e == SBX_ERR_TIMEOUT || e == SBX_ERR_IO || e == SBX_ERR_BUSY || e == SBX_ERR_INTR)
			os_suspect(s->cfg, s->token, s->state_id, NULL);
		goto out;
	}
	made = true;
	snprintf(ob->id, sizeof(ob->id), "%s", sb.id);
	snprintf(ob->base.remote_id, sizeof(ob->base.remote_id), "opensandbox:%.67s", sb.id);
	ob->expires_at = sb.has_expires ? sb.expires_at : 0;
	/* listed from now on: renewed while it starts, and never taken for a
	 * late sandbox of an earlier failed create of this scope */
	os_register(ob);
	os_create_end(s->token);
	if (os_save(ob)) {
		log_err(ob->scope, "opensandbox: cannot record sandbox %s: %s", ob->id, strerror(errno));
		e = SBX_ERR_IO;
		goto out;
	}
	e = os_wait_running(ob, &srv, &sb, deadline);
	if (!e)
		e = os_wait_execd(ob, deadline);
	if (!e)
		e = os_bootstrap(ob);
	if (e)
		goto out;
	log_info(ob->scope, "opensandbox: sandbox %s ready (%s%s)", ob->id, q.image,
		s->cfg->sandbox_timeout ? "" : ", no TTL");
	*out = &ob->base;
	ob = NULL;
out:
	if (e && made) {
		/* the clean-up is not the caller's: a cancelled create (the caller
		 * gave up) still deletes what it made, bounded by request_timeout */
		struct token *prev = token_enter(NULL);
		char derr[OSAPI_ERR_LEN];

		os_unregister(ob);
		if (osapi_delete(&srv, ob->id, derr, sizeof(derr))) {
			log_warn(ob->scope, "opensandbox: cannot delete the failed sandbox %s now (%s): retried", ob->id, derr);
			os_suspect(s->cfg, s->token, s->state_id, ob->id);
		} else if (e == SBX_ERR_INTR) {
			log_info(ob->scope, "opensandbox: create interrupted: sandbox %s deleted", ob->id);
		}
		token_leave(prev);
		os_unsave(ob->thread_dir);
	}
	obox_free(ob);
	free(c);
	return e;
}

/* ---- health, destroy, adopt, discover -------------------------------------------------------------- */

static enum sbx_err os_health(struct sbx_box *b)
{
	struct obox *ob = obox(b);
	struct osapi_server srv;
	struct osapi_sandbox sb;
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN];
	enum sbx_err e;

	if (sbx_box_is_gone(b))
		return SBX_ERR_GONE;
	os_server(ob->cfg, &srv, ob->scope);
	e = osapi_get(&srv, ob->id, &sb, err, sizeof(err));
	if (e == SBX_ERR_GONE) {
		sbx_box_gone(b, "the remote sandbox %s is gone (expired or deleted: 404)", ob->id);
		return SBX_ERR_GONE;
	}
	if (e) {
		/* the server unreachable: unknown, taken as alive (DeerFlow's rule;
		 * destroying the user's sandbox on a network blip would lose it) */
		log_warn(ob->scope, "opensandbox: health of %s unknown: %s", ob->id, err);
		return SBX_OK;
	}
	if (strcmp(sb.state, "Running")) {
		log_warn(ob->scope, "opensandbox: sandbox %s is %s (%s)", ob->id, sb.state, sb.message);
		return SBX_ERR_GONE;
	}
	e = obox_execd(ob, &ex);
	if (!e)
		e = osapi_ping(&ex, ob->cfg->request_timeout * 1000 < 5000 ? ob->cfg->request_timeout * 1000 : 5000, err,
			sizeof(err));
	if (e) {
		log_warn(ob->scope, "opensandbox: execd of %s does not answer /ping: %s", ob->id, err);
		return SBX_ERR_GONE;
	}
	/* reclaimed: push the expiry now rather than at the renewer's next turn */
	os_renew_now(ob);
	return SBX_OK;
}

static enum sbx_err os_destroy(struct sbx_box *b)
{
	struct obox *ob = obox(b);
	struct osapi_server srv;
	char err[OSAPI_ERR_LEN];
	enum sbx_err e = SBX_OK;

	os_unregister(ob);
	if (ob->id[0]) {
		os_server(ob->cfg, &srv, ob->scope);
		e = osapi_delete(&srv, ob->id, err, sizeof(err));
		if (e) {
			log_err(ob->scope, "opensandbox: cannot delete sandbox %s: %s; retried", ob->id, err);
			os_suspect(ob->cfg, ob->token, ob->state_id, ob->id);
		} else {
			log_info(ob->scope, "opensandbox: sandbox %s deleted", ob->id);
		}
	}
	os_unsave(ob->thread_dir);
	return e;
}

static void os_box_free(struct sbx_box *b)
{
	struct obox *ob = obox(b);

	os_unregister(ob);
	obox_free(ob);
}

void os_pick_one(const struct osapi_sandbox *sb, void *arg)
{
	struct os_pick *p = arg;

	if (!p->n)
		snprintf(p->id, sizeof(p->id), "%s", sb->id);
	if (p->n < 16)
		snprintf(p->all[p->n], sizeof(p->all[0]), "%s", sb->id);
	p->n++;
}

/* A scope token as records and metadata carry it: 16 lowercase hex digits. */
static bool os_token_ok(const char *t)
{
	return t && strlen(t) == SCOPE_TOKEN_LEN && strspn(t, "0123456789abcdef") == SCOPE_TOKEN_LEN;
}

static enum sbx_err os_adopt(const struct sbx_spec *s, struct sbx_box **out)
{
	struct obox *ob = obox_new(s);
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct osapi_server srv;
	struct osapi_sandbox sb;
	json_t *rec = NULL;
	char err[OSAPI_ERR_LEN];
	enum sbx_err e = SBX_ERR_NOMEM;
	int r;

	if (!ob || layout_file(&path, s->dirs.thread_dir, OS_RECORD))
		goto out;
	os_server(s->cfg, &srv, ob->scope);
	rec = json_read_file(path.ptr);
	if (json_is_string(json_object_get(rec, "id")))
		snprintf(ob->id, sizeof(ob->id), "%s", json_string_value(json_object_get(rec, "id")));
	/* the scope its metadata names: a claimed spare's is the spare's token
	 * (a claim does not patch the metadata), which the record says */
	if (ob->id[0] && os_token_ok(json_string_value(json_object_get(rec, "scope"))))
		snprintf(ob->token, sizeof(ob->token), "%s", json_string_value(json_object_get(rec, "scope")));
	if (!ob->id[0]) {
		/* no record: a create cut short before it was written; find it by metadata */
		struct osapi_kv meta[] = { { OS_META_STATE_ID, s->state_id }, { OS_META_SCOPE, s->token } };
		struct os_pick p = { "", 0, { "" } };
		e = osapi_list(&srv, meta, 2, NULL, os_pick_one, &p, err, sizeof(err));
		if (e) {
			log_warn(ob->scope, "opensandbox: cannot look for the sandbox of this scope: %s", err);
			os_suspect(s->cfg, s->token, s->state_id, NULL);
			e = SBX_ERR_GONE;
			goto out;
		}
		if (!p.n) {
			e = SBX_ERR_GONE;
			goto out;
		}
		snprintf(ob->id, sizeof(ob->id), "%s", p.id);
	}
	snprintf(ob->base.remote_id, sizeof(ob->base.remote_id), "opensandbox:%.67s", ob->id);
	e = osapi_get(&srv, ob->id, &sb, err, sizeof(err));
	if (e == SBX_ERR_GONE) {
		log_info(ob->scope, "opensandbox: sandbox %s is gone (expired or deleted while no daemon ran)", ob->id);
		os_unsave(s->dirs.thread_dir);
		goto out;
	}
	if (e) {
		/* the server away: keep the box; its health check decides on reclaim */
		log_warn(ob->scope, "opensandbox: cannot check sandbox %s now: %s", ob->id, err);
	} else {
		const char *scope = osapi_meta(&sb, OS_META_SCOPE), *sid = osapi_meta(&sb, OS_META_STATE_ID);
		if (!scope || strcmp(scope, ob->token) || !sid || strcmp(sid, s->state_id)) {
			log_warn(ob->scope, "opensandbox: sandbox %s is not this scope's (metadata): left alone", ob->id);
			os_unsave(s->dirs.thread_dir);
			e = SBX_ERR_GONE;
			goto out;
		}
		ob->expires_at = sb.has_expires ? sb.expires_at : 0;
	}
	r = sbx_box_own_host_files(&ob->base, s);
	if (r)
		log_warn(ob->scope, "opensandbox: cannot give skills/ to the user: %s", strerror(r));
	os_save(ob);
	os_register(ob);
	*out = &ob->base;
	ob = NULL;
	e = SBX_OK;
out:
	json_decref(rec);
	buf_free(&path);
	obox_free(ob);
	return e;
}

struct disc {
	void (*found)(const char *user, const char *thread, void *arg);
	void *arg;
	const struct osapi_server *srv;
	const char *state_dir;
	char orphans[64][80];
	int n_orphans;
};

/* A spare's labels name no user or thread: its record directory
 * (state_dir/spares/<token>, providers/spares.h) says it is one.  Whether
 * it is usable is spares.c's decision at start (it destroys what is not). */
static bool disc_spare(const struct disc *d, const char *token)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	bool is = false;

	if (os_token_ok(token) && !buf_addf(&path, "%s/spares/%s", d->state_dir, token))
		is = access(path.ptr, F_OK) == 0;
	buf_free(&path);
	return is;
}

static void disc_one(const struct osapi_sandbox *sb, void *arg)
{
	struct disc *d = arg;
	const char *user = osapi_meta(sb, OS_META_USER), *thread = osapi_meta(sb, OS_META_THREAD);

	if (user && thread && names_valid(user) && names_valid(thread))
		d->found(user, thread, d->arg); /* adopted from its record, or destroyed: the pool decides */
	else if (os_holds(sb->id) || disc_spare(d, osapi_meta(sb, OS_META_SCOPE)))
		; /* a claimed spare its thread's record adopted, or a spare spares.c adopts next */
	else if (d->n_orphans < 64) /* no name to adopt it under: ours (state_id) and nobody's */
		snprintf(d->orphans[d->n_orphans++], sizeof(d->orphans[0]), "%s", sb->id);
}

static enum sbx_err os_discover(const struct sbx_config *cfg, const char *state_id,
	void (*found)(const char *user, const char *thread, void *arg), void *arg)
{
	struct osapi_kv meta[] = { { OS_META_PROVIDER, "opensandbox" }, { OS_META_STATE_ID, state_id } };
	struct osapi_server srv;
	struct disc *d = calloc(1, sizeof(*d));
	char err[OSAPI_ERR_LEN];
	enum sbx_err e;

	if (!d)
		return SBX_ERR_NOMEM;
	os_server(cfg, &srv, "opensandbox");
	d->found = found;
	d->arg = arg;
	d->srv = &srv;
	d->state_dir = cfg->state_dir;
	e = osapi_list(&srv, meta, 2, NULL, disc_one, d, err, sizeof(err));
	if (e)
		log_warn("opensandbox", "discovery of this sbxfs's sandboxes failed: %s", err);
	for (int i = 0; i < d->n_orphans; i++) {
		if (osapi_delete(&srv, d->orphans[i], err, sizeof(err)))
			log_warn("opensandbox", "cannot delete orphan sandbox %s: %s", d->orphans[i], err);
		else
			log_info("opensandbox", "orphan sandbox %s of this state_dir deleted (no scope could adopt it)",
				d->orphans[i]);
	}
	free(d);
	return e;
}

/* ---- status --------------------------------------------------------------------------------------- */

static void os_box_status(struct sbx_box *b, struct json_t *out)
{
	struct obox *ob = obox(b);
	json_t *o = (json_t *)out;
	char at[32], renew_err[OSAPI_ERR_LEN];
	double expires_at;

	json_object_set_new(o, "sandbox_id", json_string(ob->id));
	os_renew_status(ob, &expires_at, renew_err, sizeof(renew_err));
	if (expires_at > 0) {
		util_iso8601(expires_at, at);
		json_object_set_new(o, "expires_at", json_string(at));
	} else {
		json_object_set_new(o, "expires_at", json_null());
	}
	if (renew_err[0])
		json_object_set_new(o, "renew_error", json_string(renew_err));
	pthread_mutex_lock(&ob->lock);
	/* the endpoint without its headers (they may carry an access token) */
	json_object_set_new(o, "execd", ob->have_ex ? json_string(ob->ex.base) : json_null());
	pthread_mutex_unlock(&ob->lock);
	json_object_set_new(o, "image", json_string(ob->cfg->image ? ob->cfg->image : OS_DEFAULT_IMAGE));
	json_object_set_new(o, "exec", json_string("execd"));
	if (sbx_box_is_gone(b))
		json_object_set_new(o, "gone", json_string(b->gone_why));
}

static enum sbx_err os_kill_all(struct sbx_box *b)
{
	(void)b;
	return SBX_ERR_NOTSUP; /* execd has no "every process but me"; kill -1 would end execd itself */
}

/* ---- network ------------------------------------------------------------------------------------- */

static int os_netns_fd(struct sbx_box *b)
{
	(void)b;
	return -1;
}

static const struct sbx_net_ops os_net_ops = {
	.netns_fd = os_netns_fd,
	.enforced_by = "opensandbox networkPolicy (set at create: allowlist allows allow_domains and denies the rest, "
		       "isolated denies all, open is the server's default)",
};

/* ---- the descriptor ---------------------------------------------------------------------------- */

static const struct sbx_provider_ops os_ops = {
	.config_key = os_config_key,
	.config_check = os_config_check,
	.config_show = os_config_show,
	.config_free = os_config_free,
	.preflight = os_preflight,
	.init = os_init,
	.discover = os_discover,
	.shutdown = os_shutdown,
	.create = os_create,
	.health = os_health,
	.destroy = os_destroy,
	.box_free = os_box_free,
	.adopt = os_adopt,
	.kill_all = os_kill_all,
	.claim = os_claim,
	.box_status = os_box_status,
	.exec_start = os_jobs_start,
	.exec_reattach = os_jobs_reattach,
	.exec_signal = os_jobs_signal,
	.exec_finish = os_jobs_finish,
	.exec_free = os_jobs_free,
	.exec_cleanup = os_jobs_cleanup,
	.files = &os_files.ops,
	.skills = &os_skills.ops,
	.net = &os_net_ops,
};

static const char *const os_keys[] = { "opensandbox", NULL };
static const char *const os_aliases[] = { "deerflow.community.opensandbox:OpenSandboxProvider", NULL };

const struct sbx_provider provider_opensandbox = {
	.name = "opensandbox",
	.aliases = os_aliases,
	.config_keys = os_keys,
	.caps = SBX_CAP_EXEC, /* execd interrupts (SIGTERM, then SIGKILL): no other signal */
	.ops = &os_ops,
};
