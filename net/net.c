/* SPDX-License-Identifier: MIT */
/*
 * net.c - each living sandbox's network policy, tied to the pool, the
 * jobs, the proxy and the FUSE layer (see net.h).
 *
 * Why the registry is keyed by the pool's struct sbx: those entries live as
 * long as the daemon, so a notification from a netpol (an event recorded on
 * the proxy's loop) can name its sandbox by that pointer and find the
 * current net_sbx under net_lock, or nothing when the sandbox was destroyed
 * in the meantime; no net_sbx is ever reached through a stale pointer.
 */
#define _GNU_SOURCE
#include "net.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/json.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/util.h"
#include "netpol.h"
#include "proxy.h"

#define NET_BUCKETS 256
#define NET_PROXY_URL "http://127.0.0.1:3128"

struct net_sbx {
	int refs;           /* atomic: the registry, FUSE handles, parked requests */
	struct sbx *s;      /* the pool's entry (lives as long as the daemon) */
	struct netpol *pol; /* referenced; NULL when the provider has no network policy */
	const char *enforced_by; /* the provider enforces egress itself (static string) */
	uint64_t listener;  /* the proxy's listener, 0 when none */
	struct park_queue q; /* readers and pollers of events */
	char scope[NAMES_SCOPE_MAX];
	struct net_sbx *next; /* registry chain (net_lock) */
};

static pthread_mutex_t net_lock = PTHREAD_MUTEX_INITIALIZER;
static struct net_sbx *table[NET_BUCKETS]; /* protected by net_lock */
static uint64_t events_total;               /* atomic */
static bool running;

static unsigned bucket(const struct sbx *s)
{
	return util_hash_ptr(s, NET_BUCKETS);
}

static void ns_get(void *p)
{
	__atomic_add_fetch(&((struct net_sbx *)p)->refs, 1, __ATOMIC_RELAXED);
}

void net_put(struct net_sbx *n)
{
	if (!n || __atomic_sub_fetch(&n->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	park_queue_destroy(&n->q);
	netpol_put(n->pol);
	free(n);
}

static void ns_put(void *p)
{
	net_put(p);
}

struct net_sbx *net_get(struct sbx *s)
{
	struct net_sbx *n;

	pthread_mutex_lock(&net_lock);
	for (n = table[bucket(s)]; n && n->s != s; n = n->next)
		;
	if (n)
		ns_get(n);
	pthread_mutex_unlock(&net_lock);
	return n;
}

/* A netpol changed (any thread, no lock held).  arg: the struct sbx. */
static void on_change(void *arg, unsigned changes)
{
	struct net_sbx *n = net_get(arg);

	if (changes & NETPOL_RECORDED)
		__atomic_add_fetch(&events_total, 1, __ATOMIC_RELAXED);
	if (!n)
		return; /* destroyed meanwhile */
	if (changes & NETPOL_RECORDED)
		park_wake(&n->q);
	if (changes & NETPOL_DECIDED)
		proxy_kick(n->pol);
	net_put(n);
}

/* ---- the pool's hooks ---------------------------------------------------------------- */

int net_sandbox_up(struct sbx *s, bool adopted)
{
	const struct sbx_net_ops *ops = s->prov ? s->prov->ops->net : NULL;
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct netpol_conf conf = { 0 };
	struct net_sbx *n = calloc(1, sizeof(*n)), *old;
	int r = -1;

	if (!n || !s->cfg || layout_file(&path, s->thread_dir, "network.json") || netpol_conf_from_config(&conf, s->cfg))
		goto out;
	n->refs = 1; /* the registry's */
	n->s = s;
	snprintf(n->scope, sizeof(n->scope), "%s/%s", s->user, s->thread);
	park_queue_init(&n->q, ns_get, ns_put, n);
	if (ops) {
		n->enforced_by = ops->enforced_by;
		/* a new sandbox starts clean; an adopted one has what it had */
		if (!adopted)
			unlink(path.ptr);
		n->pol = adopted ? netpol_load(path.ptr, &conf) : netpol_new(&conf, path.ptr);
		if (!n->pol)
			goto out;
		netpol_set_notify(n->pol, on_change, s);
		if (!adopted && netpol_save(n->pol))
			goto out;
		if (netpol_conf(n->pol)->mode == NET_ALLOWLIST && !ops->enforced_by && ops->netns_fd && s->box) {
			int fd = ops->netns_fd(s->box);

			n->listener = fd >= 0 ? proxy_listen(fd, n->pol, n->scope) : 0;
			if (!n->listener)
				log_err(n->scope, "network: cannot serve the proxy on 127.0.0.1:%d in the sandbox: %s%s",
					PROXY_PORT, fd < 0 ? "no network namespace" : strerror(errno),
					adopted ? " (the sandbox has no way out)" : "");
			if (fd >= 0)
				close(fd);
			if (!n->listener && !adopted)
				goto out;
		}
	}
	pthread_mutex_lock(&net_lock);
	for (old = table[bucket(s)]; old && old->s != s; old = old->next)
		;
	if (!old) {
		n->next = table[bucket(s)];
		table[bucket(s)] = n;
	}
	pthread_mutex_unlock(&net_lock);
	if (old) { /* cannot happen: up and down are serialised by the scope lock */
		log_err(n->scope, "network: the sandbox already has a network state");
		goto out;
	}
	n = NULL;
	r = 0;
out:
	if (r && !s->cfg)
		log_err(s->token, "network: no configuration");
	else if (r && n && !n->listener && errno == ENOMEM)
		log_err(n->scope, "network: out of memory");
	if (n) {
		proxy_unlisten(n->listener);
		if (n->pol && !adopted)
			netpol_close(n->pol);
		net_put(n);
	}
	netpol_conf_free(&conf);
	buf_free(&path);
	return r;
}

void net_sandbox_down(struct sbx *s)
{
	struct net_sbx **pp, *n = NULL;

	pthread_mutex_lock(&net_lock);
	for (pp = &table[bucket(s)]; *pp; pp = &(*pp)->next)
		if ((*pp)->s == s) {
			n = *pp;
			*pp = n->next;
			break;
		}
	pthread_mutex_unlock(&net_lock);
	if (!n)
		return;
	proxy_unlisten(n->listener);
	if (n->pol)
		netpol_close(n->pol); /* the grants go with the sandbox */
	park_drain(&n->q, ENOENT);
	net_put(n);
}

/* ---- events and network --------------------------------------------------------------- */

bool net_events_live(struct net_sbx *n)
{
	return n && n->pol && !n->enforced_by && netpol_records(n->pol);
}

bool net_pending(struct net_sbx *n)
{
	return net_events_live(n) && netpol_pending(n->pol);
}

int net_consume(struct net_sbx *n, struct buf *line)
{
	if (!net_events_live(n))
		return ENOENT;
	return netpol_consume(n->pol, util_wall_now(), line);
}

struct park_queue *net_queue(struct net_sbx *n)
{
	return &n->q;
}

void net_wake(struct sbx *s)
{
	struct net_sbx *n = net_get(s);

	if (n) {
		park_wake(&n->q);
		net_put(n);
	}
}

int net_command(struct sbx *s, const char *text, size_t len)
{
	struct net_sbx *n = net_get(s);
	int err;

	err = netpol_command(n && !n->enforced_by ? n->pol : NULL, text, len, util_wall_now());
	if (err == EINVAL)
		log_warn(n ? n->scope : s->token, "network: a malformed command refused (expected \"allow_temporary ID\", "
						  "\"allow_sandbox ID\", \"deny ID\" or \"deny-pending\")");
	net_put(n);
	return err;
}

int net_render(struct sbx *s, struct buf *out)
{
	struct net_sbx *n = net_get(s);
	const char *reason = NULL;
	json_t *extra = json_object();
	int r;

	if (!n || !n->pol)
		reason = n ? "this provider has no network policy" : "the sandbox has no network state";
	else if (n->enforced_by)
		reason = "egress is enforced by the provider; events and decisions are not available";
	else if (netpol_conf(n->pol)->mode != NET_ALLOWLIST)
		reason = "events are recorded only in allowlist mode";
	else if (!netpol_conf(n->pol)->prompt)
		reason = "approval: deny records no event";
	json_object_set_new(extra, "proxy", n && n->listener ? json_string(NET_PROXY_URL) : json_null());
	json_object_set_new(extra, "enforced_by", n && n->enforced_by ? json_string(n->enforced_by) : json_null());
	json_object_set_new(extra, "events_available", json_boolean(net_events_live(n)));
	if (reason)
		json_object_set_new(extra, "reason", json_string(reason));
	if (n && n->pol) {
		r = netpol_render(n->pol, util_wall_now(), extra, out);
	} else {
		/* no state: the policy the sandbox was created with, nothing else */
		struct sbx_config *cfg = pool_sbx_config(s);
		struct netpol_conf conf = { 0 };
		json_t *o = NULL;

		if (cfg && !netpol_conf_from_config(&conf, cfg))
			o = netpol_conf_json(&conf);
		if (o) {
			json_object_update(o, extra);
			json_object_set_new(o, "grants", json_array());
			json_object_set_new(o, "events", json_array());
		}
		netpol_conf_free(&conf);
		config_put(cfg);
		r = json_to_buf(o, out);
	}
	json_decref(extra);
	net_put(n);
	return r;
}

int net_job_environ(struct sbx *s, struct buf *out)
{
	static const char *const vars[] = { "HTTP_PROXY=" NET_PROXY_URL, "HTTPS_PROXY=" NET_PROXY_URL,
		"ALL_PROXY=" NET_PROXY_URL, "http_proxy=" NET_PROXY_URL, "https_proxy=" NET_PROXY_URL,
		"all_proxy=" NET_PROXY_URL, "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
		NULL };
	struct net_sbx *n = net_get(s);
	int r = 0;

	if (n && n->listener)
		for (int i = 0; vars[i]; i++)
			r |= buf_add(out, vars[i], strlen(vars[i]) + 1);
	net_put(n);
	return r ? -1 : 0;
}

void net_stats(struct net_stats *st)
{
	struct proxy_stats ps;

	proxy_stats(&ps);
	st->events = __atomic_load_n(&events_total, __ATOMIC_RELAXED);
	st->accepted = ps.accepted;
	st->allowed = ps.allowed;
	st->denied = ps.denied;
	st->refused = ps.refused;
	st->active = ps.active;
}

/* ---- start and end ----------------------------------------------------------------------- */

/* The status's network_mode is the sandbox's own policy's (network.json),
 * which an adopted sandbox keeps, not the current configuration's (the
 * pool's s->cfg after an adoption).  Under pool.lock: net_lock only, no
 * reference taken (whose last put would free). */
static void net_status(struct sbx *s, json_t *status)
{
	struct net_sbx *n;

	pthread_mutex_lock(&net_lock);
	for (n = table[bucket(s)]; n && n->s != s; n = n->next)
		;
	if (n && n->pol)
		json_object_set_new(status, "network_mode", json_string(config_net_mode_name(netpol_conf(n->pol)->mode)));
	pthread_mutex_unlock(&net_lock);
}

static const struct pool_hooks net_pool_hooks = {
	.up = net_sandbox_up,
	.down = net_sandbox_down,
	.status = net_status,
};

int net_init(void)
{
	int e = netpol_writer_start();

	if (e)
		return e;
	e = proxy_init();
	if (e) {
		netpol_writer_stop();
		return e;
	}
	if (pool_add_hooks(&net_pool_hooks)) {
		proxy_shutdown();
		netpol_writer_stop();
		return ENOMEM;
	}
	running = true;
	return 0;
}

void net_shutdown(void)
{
	if (!running)
		return;
	pool_remove_hooks(&net_pool_hooks);
	proxy_shutdown();
	pthread_mutex_lock(&net_lock);
	for (int i = 0; i < NET_BUCKETS; i++)
		while (table[i]) {
			struct net_sbx *n = table[i];
			table[i] = n->next;
			pthread_mutex_unlock(&net_lock);
			park_drain(&n->q, ESHUTDOWN);
			net_put(n); /* the file stays: a kept sandbox finds it again */
			pthread_mutex_lock(&net_lock);
		}
	pthread_mutex_unlock(&net_lock);
	netpol_writer_stop(); /* after the proxy: the events it recorded reach their files */
	running = false;
}
