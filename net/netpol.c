/* SPDX-License-Identifier: MIT */
/*
 * netpol.c - one sandbox's policy, events and grants (see netpol.h): the
 * state of one sandbox, without threads or I/O of its own beyond its file.
 * How it differs from its neighbours: policy.c is the pure rules (what a
 * host name or address is, whether allow_domains matches it), shared by
 * every sandbox; net.c ties each living sandbox's netpol to the pool, the
 * jobs, the proxy and the FUSE layer.
 *
 * Arrays, not a database: a sandbox has at most NETPOL_MAX_EVENTS events
 * (the oldest, decided first, are dropped past it, so a sandbox that asks
 * for a thousand hosts cannot grow the daemon) and a handful of grants; a
 * linear scan under a mutex costs less than any index would.
 *
 * Why a file per sandbox rewritten whole at each change (tmp + rename):
 * changes are human-paced (a denial, a decision), the file is a few KiB, and
 * a reader of the state directory always sees a complete document.
 */
#define _GNU_SOURCE
#include "netpol.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "../common/json.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../common/policy.h"

struct np_event {
	char id[NETPOL_ID_LEN + 1];
	char host[POLICY_HOST_MAX + 1];
	int port;
	char method[16];
	double created_at;
	bool surfaced;
	bool pending_deny; /* deny-pending decided it, not yet recorded */
	int decision;      /* enum netpol_decision */
};

struct np_grant {
	char host[POLICY_HOST_MAX + 1];
	int port;
	double expires_at; /* 0: for the sandbox's lifetime */
};

struct netpol {
	int refs; /* atomic: the owner, listeners, connections, open files */
	pthread_mutex_t lock;         /* everything below but conf and path */
	pthread_mutex_t persist_lock; /* orders the writers of path; taken before lock */
	struct netpol_conf conf;      /* immutable */
	char *path;                   /* immutable; NULL: not persisted */
	struct np_event *ev;
	size_t n_ev, cap_ev;
	struct np_grant *gr;
	size_t n_gr, cap_gr;
	bool closed;
	void (*notify)(void *arg, unsigned changes); /* set before sharing */
	void *notify_arg;
	bool queued;              /* on the writer's queue; protected by wr.lock */
	struct netpol *wr_next;   /* protected by wr.lock */
};

static const char *const decision_names[] = { NULL, "superseded", "deny", "allow_temporary", "allow_sandbox" };

const char *netpol_decision_name(int d)
{
	return d > 0 && d <= NP_ALLOW_SANDBOX ? decision_names[d] : NULL;
}

static int decision_from_name(const char *s)
{
	for (int d = 1; d <= NP_ALLOW_SANDBOX; d++)
		if (s && !strcmp(s, decision_names[d]))
			return d;
	return -1;
}

/* ---- the policy ---------------------------------------------------------------- */

void netpol_conf_free(struct netpol_conf *pc)
{
	for (size_t i = 0; i < pc->n_domains; i++)
		free(pc->domains[i]);
	free(pc->domains);
	for (size_t i = 0; i < pc->n_hosts; i++) {
		for (size_t j = 0; j < pc->hosts[i].n_addrs; j++)
			free(pc->hosts[i].addrs[j]);
		free(pc->hosts[i].addrs);
		free(pc->hosts[i].name);
	}
	free(pc->hosts);
	memset(pc, 0, sizeof(*pc));
}

static int conf_copy(struct netpol_conf *dst, const struct netpol_conf *src)
{
	*dst = *src;
	dst->domains = NULL;
	dst->hosts = NULL;
	dst->n_domains = dst->n_hosts = 0;
	if (src->n_domains && !(dst->domains = calloc(src->n_domains, sizeof(char *))))
		goto fail;
	for (; dst->n_domains < src->n_domains; dst->n_domains++)
		if (!(dst->domains[dst->n_domains] = strdup(src->domains[dst->n_domains])))
			goto fail;
	if (src->n_hosts && !(dst->hosts = calloc(src->n_hosts, sizeof(*dst->hosts))))
		goto fail;
	for (; dst->n_hosts < src->n_hosts; dst->n_hosts++) {
		const struct config_host *s = &src->hosts[dst->n_hosts];
		struct config_host *d = &dst->hosts[dst->n_hosts];

		if (!(d->name = strdup(s->name)) || !(d->addrs = calloc(s->n_addrs ? s->n_addrs : 1, sizeof(char *))))
			goto fail_host;
		for (; d->n_addrs < s->n_addrs; d->n_addrs++)
			if (!(d->addrs[d->n_addrs] = strdup(s->addrs[d->n_addrs])))
				goto fail_host;
		continue;
fail_host:
		dst->n_hosts++; /* free what this entry has */
		goto fail;
	}
	return 0;
fail:
	netpol_conf_free(dst);
	errno = ENOMEM;
	return -1;
}

int netpol_conf_from_config(struct netpol_conf *pc, const struct sbx_config *cfg)
{
	struct netpol_conf view = {
		.mode = cfg->net_mode,
		.prompt = cfg->approval_prompt,
		.ttl = cfg->temporary_grant_ttl,
		.wait = cfg->approval_wait,
		.allow_private = cfg->allow_private,
		.domains = cfg->allow_domains,
		.n_domains = cfg->n_allow_domains,
		.hosts = cfg->net_hosts,
		.n_hosts = cfg->n_net_hosts,
	};

	return conf_copy(pc, &view);
}

json_t *netpol_conf_json(const struct netpol_conf *c)
{
	json_t *doms = json_array(), *hosts = json_object();

	for (size_t i = 0; i < c->n_domains; i++)
		json_array_append_new(doms, json_string(c->domains[i]));
	for (size_t i = 0; i < c->n_hosts; i++) {
		json_t *a = json_array();
		for (size_t j = 0; j < c->hosts[i].n_addrs; j++)
			json_array_append_new(a, json_string(c->hosts[i].addrs[j]));
		json_object_set_new(hosts, c->hosts[i].name, a);
	}
	return json_pack("{s:s,s:s,s:I,s:I,s:b,s:o,s:o}", "mode", config_net_mode_name(c->mode), "approval",
		c->prompt ? "prompt" : "deny", "ttl", (json_int_t)c->ttl, "approval_wait", (json_int_t)c->wait,
		"allow_private_destinations", c->allow_private, "allow_domains", doms, "hosts", hosts);
}

/* The policy recorded in a file (what the sandbox was created with). */
static int conf_from_json(json_t *o, struct netpol_conf *out)
{
	const char *mode = json_string_value(json_object_get(o, "mode"));
	const char *appr = json_string_value(json_object_get(o, "approval"));
	json_t *doms = json_object_get(o, "allow_domains"), *hosts = json_object_get(o, "hosts"), *v;
	struct netpol_conf c = { 0 };
	const char *name;
	size_t i;

	if (!mode || !appr || !json_is_array(doms) || !json_is_object(hosts))
		return -1;
	c.mode = !strcmp(mode, "allowlist") ? NET_ALLOWLIST : !strcmp(mode, "isolated") ? NET_ISOLATED : NET_OPEN;
	c.prompt = !strcmp(appr, "prompt");
	c.ttl = (long)json_integer_value(json_object_get(o, "ttl"));
	c.wait = (long)json_integer_value(json_object_get(o, "approval_wait"));
	c.allow_private = json_is_true(json_object_get(o, "allow_private_destinations"));
	if (c.ttl < 30 || c.ttl > 3600)
		c.ttl = 300;
	if (c.wait < 0 || c.wait > 3600)
		c.wait = 0;
	c.domains = calloc(json_array_size(doms) + 1, sizeof(char *));
	c.hosts = calloc(json_object_size(hosts) + 1, sizeof(*c.hosts));
	if (!c.domains || !c.hosts)
		goto fail;
	json_array_foreach(doms, i, v) {
		if (!json_is_string(v) || !(c.domains[c.n_domains] = strdup(json_string_value(v))))
			goto fail;
		c.n_domains++;
	}
	json_object_foreach(hosts, name, v) {
		struct config_host *h = &c.hosts[c.n_hosts];
		json_t *a;
		size_t j;

		if (!json_is_array(v) || !(h->name = strdup(name)) ||
		    !(h->addrs = calloc(json_array_size(v) + 1, sizeof(char *)))) {
			c.n_hosts++;
			goto fail;
		}
		c.n_hosts++;
		json_array_foreach(v, j, a) {
			if (!json_is_string(a) || !(h->addrs[h->n_addrs] = strdup(json_string_value(a))))
				goto fail;
			h->n_addrs++;
		}
	}
	*out = c;
	return 0;
fail:
	netpol_conf_free(&c);
	return -1;
}

/* ---- life ---------------------------------------------------------------------- */

struct netpol *netpol_new(const struct netpol_conf *conf, const char *path)
{
	struct netpol *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	if (conf_copy(&p->conf, conf) || (path && !(p->path = strdup(path)))) {
		netpol_conf_free(&p->conf);
		free(p);
		return NULL;
	}
	p->refs = 1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->persist_lock, NULL);
	return p;
}

struct netpol *netpol_get(struct netpol *p)
{
	if (p)
		__atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
	return p;
}

void netpol_put(struct netpol *p)
{
	if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	netpol_conf_free(&p->conf);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->persist_lock);
	free(p->ev);
	free(p->gr);
	free(p->path);
	free(p);
}

void netpol_set_notify(struct netpol *p, void (*fn)(void *arg, unsigned changes), void *arg)
{
	p->notify = fn;
	p->notify_arg = arg;
}

const struct netpol_conf *netpol_conf(const struct netpol *p)
{
	return &p->conf;
}

bool netpol_records(const struct netpol *p)
{
	return p->conf.mode == NET_ALLOWLIST && p->conf.prompt;
}

static void notify(struct netpol *p, unsigned changes)
{
	if (changes && p->notify)
		p->notify(p->notify_arg, changes);
}

/* ---- persistence ----------------------------------------------------------------- */

static json_t *event_json(const struct np_event *e, bool full)
{
	json_t *o = json_pack("{s:s,s:s,s:i,s:s,s:f}", "request_id", e->id, "host", e->host, "port", e->port,
		"method", e->method, "created_at", e->created_at);
	const char *d = netpol_decision_name(e->decision);

	if (o && full) {
		json_object_set_new(o, "surfaced", json_boolean(e->surfaced));
		json_object_set_new(o, "decision", d ? json_string(d) : json_null());
	}
	return o;
}

static json_t *grant_json(const struct np_grant *g)
{
	return json_pack("{s:s,s:i,s:o}", "host", g->host, "port", g->port, "expires_at",
		g->expires_at > 0 ? json_real(g->expires_at) : json_null());
}

/* Caller holds p->lock.  live: only grants that have not expired at now. */
static json_t *state_json_locked(struct netpol *p, bool live, double now)
{
	json_t *evs = json_array(), *grs = json_array();

	for (size_t i = 0; i < p->n_ev; i++)
		json_array_append_new(evs, event_json(&p->ev[i], true));
	for (size_t i = 0; i < p->n_gr; i++)
		if (!live || p->gr[i].expires_at == 0 || p->gr[i].expires_at > now)
			json_array_append_new(grs, grant_json(&p->gr[i]));
	return json_pack("{s:o,s:o}", "grants", grs, "events", evs);
}

static int persist(struct netpol *p)
{
	json_t *o = NULL;
	char *text = NULL;
	int r = 0, saved = 0;

	if (!p->path)
		return 0;
	pthread_mutex_lock(&p->persist_lock);
	pthread_mutex_lock(&p->lock);
	if (!p->closed) {
		o = state_json_locked(p, false, 0);
		if (o) {
			json_object_set_new(o, "version", json_integer(1));
			json_object_set_new(o, "policy", netpol_conf_json(&p->conf));
		}
		text = o ? json_dumps(o, JSON_COMPACT) : NULL;
		r = text ? 0 : -1;
	}
	pthread_mutex_unlock(&p->lock);
	if (text && util_write_atomic(p->path, text, strlen(text), 0600))
		r = -1;
	saved = errno;
	pthread_mutex_unlock(&p->persist_lock);
	if (r)
		log_warn("network", "cannot record the network policy state in %s: %s", p->path, strerror(saved));
	free(text);
	json_decref(o);
	errno = saved;
	return r;
}

/* The errno a command gets when its decision could not be recorded: the
 * disk's own when it is full, else EIO (DESIGN §3). */
static int persist_err(void)
{
	return errno == ENOSPC || errno == EDQUOT ? errno : EIO;
}

/* ---- the writer thread -------------------------------------------------------------
 *
 * netpol_record() runs on the proxy's loop thread, and persist() serialises up
 * to NETPOL_MAX_EVENTS events, writes and renames a file: a sandbox asking
 * for many hosts made the loop do that once per new event, and a slow or
 * stalled disk held every sandbox's connections.  Records hand the write to
 * this thread instead; a state queued again before its write is written once
 * (the write takes its snapshot when it runs).  Decisions and consumes come
 * from FUSE workers and still write before they return. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct netpol *head, *tail; /* queued states, each holding a reference; lock */
	bool running, stop;         /* lock */
	pthread_t thread;
} wr = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void *writer_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "sbxfs-netpol");
	for (;;) {
		struct netpol *p;

		pthread_mutex_lock(&wr.lock);
		while (!wr.head && !wr.stop)
			pthread_cond_wait(&wr.cond, &wr.lock);
		p = wr.head;
		if (p) {
			wr.head = p->wr_next;
			if (!wr.head)
				wr.tail = NULL;
			p->queued = false; /* a change from now on queues it again */
		}
		pthread_mutex_unlock(&wr.lock);
		if (!p)
			return NULL; /* stopping, everything written */
		persist(p);
		netpol_put(p);
	}
}

int netpol_writer_start(void)
{
	int e;

	pthread_mutex_lock(&wr.lock);
	wr.stop = false;
	pthread_mutex_unlock(&wr.lock);
	e = pthread_create(&wr.thread, NULL, writer_main, NULL);
	if (e)
		return e;
	pthread_mutex_lock(&wr.lock);
	wr.running = true;
	pthread_mutex_unlock(&wr.lock);
	return 0;
}

void netpol_writer_stop(void)
{
	pthread_mutex_lock(&wr.lock);
	if (!wr.running) {
		pthread_mutex_unlock(&wr.lock);
		return;
	}
	wr.stop = true;
	pthread_cond_signal(&wr.cond);
	pthread_mutex_unlock(&wr.lock);
	pthread_join(wr.thread, NULL); /* it writes what is queued first */
	pthread_mutex_lock(&wr.lock);
	wr.running = false;
	pthread_mutex_unlock(&wr.lock);
}

/* Write p's file soon, on the writer thread (now, on this one, without it). */
static void persist_later(struct netpol *p)
{
	bool now = false;

	if (!p->path)
		return;
	pthread_mutex_lock(&wr.lock);
	if (!wr.running || wr.stop) {
		now = true;
	} else if (!p->queued) {
		p->queued = true;
		p->wr_next = NULL;
		netpol_get(p);
		if (wr.tail)
			wr.tail->wr_next = p;
		else
			wr.head = p;
		wr.tail = p;
		pthread_cond_signal(&wr.cond);
	}
	pthread_mutex_unlock(&wr.lock);
	if (now)
		persist(p);
}

int netpol_save(struct netpol *p)
{
	return persist(p);
}

void netpol_close(struct netpol *p)
{
	pthread_mutex_lock(&p->persist_lock);
	pthread_mutex_lock(&p->lock);
	p->closed = true;
	pthread_mutex_unlock(&p->lock);
	if (p->path && unlink(p->path) && errno != ENOENT)
		log_warn("network", "cannot remove %s: %s", p->path, strerror(errno));
	pthread_mutex_unlock(&p->persist_lock);
}

static int ev_push_locked(struct netpol *p, const struct np_event *e)
{
	if (p->n_ev == p->cap_ev) {
		size_t cap = p->cap_ev ? p->cap_ev * 2 : 16;
		struct np_event *n = realloc(p->ev, cap * sizeof(*n));
		if (!n)
			return -1;
		p->ev = n;
		p->cap_ev = cap;
	}
	p->ev[p->n_ev++] = *e;
	return 0;
}

/* Caller holds p->lock: add or extend the grant for host:port. */
/* What a grant replaced, so a decision that cannot be recorded is undone. */
struct np_undo {
	bool added;        /* the grant is new */
	double expires_at; /* else: its expiry before */
};

static int grant_locked(struct netpol *p, const char *host, int port, double expires_at, struct np_undo *u)
{
	u->added = false;
	for (size_t i = 0; i < p->n_gr; i++) {
		struct np_grant *g = &p->gr[i];
		if (g->port != port || strcmp(g->host, host))
			continue;
		u->expires_at = g->expires_at;
		/* never shorten: a sandbox-long grant stays, a temporary one is extended */
		if (g->expires_at != 0 && (expires_at == 0 || expires_at > g->expires_at))
			g->expires_at = expires_at;
		return 0;
	}
	u->added = true;
	if (p->n_gr == p->cap_gr) {
		size_t cap = p->cap_gr ? p->cap_gr * 2 : 8;
		struct np_grant *n = realloc(p->gr, cap * sizeof(*n));
		if (!n)
			return -1;
		p->gr = n;
		p->cap_gr = cap;
	}
	snprintf(p->gr[p->n_gr].host, sizeof(p->gr[p->n_gr].host), "%s", host);
	p->gr[p->n_gr].port = port;
	p->gr[p->n_gr].expires_at = expires_at;
	p->n_gr++;
	return 0;
}

struct netpol *netpol_load(const char *path, const struct netpol_conf *conf)
{
	json_t *j = json_read_file(path), *v;
	struct netpol_conf saved;
	struct netpol *p;
	size_t i;

	if (j && !conf_from_json(json_object_get(j, "policy"), &saved)) {
		p = netpol_new(&saved, path);
		netpol_conf_free(&saved);
	} else {
		p = netpol_new(conf, path);
	}
	if (!p || !j) {
		json_decref(j);
		return p;
	}
	json_array_foreach(json_object_get(j, "events"), i, v) {
		struct np_event e = { 0 };
		const char *id = json_string_value(json_object_get(v, "request_id"));
		const char *host = json_string_value(json_object_get(v, "host"));
		const char *method = json_string_value(json_object_get(v, "method"));
		json_t *d = json_object_get(v, "decision");

		if (!id || strlen(id) != NETPOL_ID_LEN || !host || strlen(host) > POLICY_HOST_MAX || !method)
			continue;
		memcpy(e.id, id, NETPOL_ID_LEN + 1);
		snprintf(e.host, sizeof(e.host), "%s", host);
		snprintf(e.method, sizeof(e.method), "%s", method);
		e.port = (int)json_integer_value(json_object_get(v, "port"));
		e.created_at = json_number_value(json_object_get(v, "created_at"));
		e.surfaced = json_is_true(json_object_get(v, "surfaced"));
		e.decision = json_is_null(d) || !d ? NP_UNDECIDED : decision_from_name(json_string_value(d));
		if (e.decision < 0 || p->n_ev >= NETPOL_MAX_EVENTS || ev_push_locked(p, &e))
			continue;
	}
	json_array_foreach(json_object_get(j, "grants"), i, v) {
		const char *host = json_string_value(json_object_get(v, "host"));
		json_t *exp = json_object_get(v, "expires_at");

		struct np_undo u;

		if (host && strlen(host) <= POLICY_HOST_MAX)
			grant_locked(p, host, (int)json_integer_value(json_object_get(v, "port")),
				json_is_number(exp) ? json_number_value(exp) : 0, &u);
	}
	json_decref(j);
	return p;
}

/* ---- decisions --------------------------------------------------------------------- */

/* Caller holds p->lock. */
static bool granted_locked(struct netpol *p, const char *host, int port, double now)
{
	for (size_t i = 0; i < p->n_gr;) {
		struct np_grant *g = &p->gr[i];
		if (g->expires_at != 0 && g->expires_at <= now) {
			p->gr[i] = p->gr[--p->n_gr]; /* expired: dropped lazily */
			continue;
		}
		if (g->port == port && !strcmp(g->host, host))
			return true;
		i++;
	}
	return false;
}

bool netpol_allows(struct netpol *p, const char *host, int port, double now)
{
	bool ok;

	if (p->conf.mode != NET_ALLOWLIST)
		return false; /* isolated denies everything; open has no proxy */
	if (policy_domains_match(p->conf.domains, p->conf.n_domains, host))
		return true;
	pthread_mutex_lock(&p->lock);
	ok = !p->closed && granted_locked(p, host, port, now);
	pthread_mutex_unlock(&p->lock);
	return ok;
}

static void new_uuid(char out[NETPOL_ID_LEN + 1])
{
	unsigned char r[16];
	size_t got = 0;

	while (got < sizeof(r)) {
		ssize_t n = getrandom(r + got, sizeof(r) - got, 0);
		if (n > 0)
			got += (size_t)n;
	}
	r[6] = (unsigned char)((r[6] & 0x0f) | 0x40); /* version 4 */
	r[8] = (unsigned char)((r[8] & 0x3f) | 0x80); /* RFC 4122 variant */
	snprintf(out, NETPOL_ID_LEN + 1, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0],
		r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15]);
}

/* Caller holds p->lock: make room for one more event. */
static void ev_trim_locked(struct netpol *p)
{
	size_t victim = 0;

	if (p->n_ev < NETPOL_MAX_EVENTS)
		return;
	for (size_t i = 0; i < p->n_ev; i++)
		if (p->ev[i].decision != NP_UNDECIDED) {
			victim = i;
			break;
		}
	memmove(&p->ev[victim], &p->ev[victim + 1], (p->n_ev - victim - 1) * sizeof(*p->ev));
	p->n_ev--;
}

int netpol_record(struct netpol *p, const char *host, int port, const char *method, double now,
	char id[NETPOL_ID_LEN + 1])
{
	struct np_event e = { 0 };
	bool fresh = true;
	int r = 0;

	if (!netpol_records(p))
		return -1;
	pthread_mutex_lock(&p->lock);
	if (p->closed) {
		pthread_mutex_unlock(&p->lock);
		return -1;
	}
	for (size_t i = p->n_ev; i-- > 0;) {
		struct np_event *o = &p->ev[i];
		if (o->decision == NP_UNDECIDED && o->port == port && !strcmp(o->host, host) &&
		    now - o->created_at < NETPOL_REUSE_S && now >= o->created_at) {
			memcpy(id, o->id, NETPOL_ID_LEN + 1);
			fresh = false;
			break;
		}
	}
	if (fresh) {
		new_uuid(e.id);
		snprintf(e.host, sizeof(e.host), "%s", host);
		snprintf(e.method, sizeof(e.method), "%s", method);
		e.port = port;
		e.created_at = now;
		ev_trim_locked(p);
		r = ev_push_locked(p, &e);
		if (!r)
			memcpy(id, e.id, NETPOL_ID_LEN + 1);
	}
	pthread_mutex_unlock(&p->lock);
	if (r)
		return -1;
	if (fresh) {
		persist_later(p); /* on the proxy's thread: never the disk (see the writer) */
		notify(p, NETPOL_RECORDED);
	}
	return 0;
}

int netpol_decision(struct netpol *p, const char *id)
{
	int d = -1;

	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->n_ev; i++)
		if (!strcmp(p->ev[i].id, id)) {
			d = p->ev[i].decision;
			break;
		}
	pthread_mutex_unlock(&p->lock);
	return d;
}

bool netpol_pending(struct netpol *p)
{
	bool any = false;

	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->n_ev && !any && !p->closed; i++)
		any = !p->ev[i].surfaced && p->ev[i].decision == NP_UNDECIDED;
	pthread_mutex_unlock(&p->lock);
	return any;
}

int netpol_consume(struct netpol *p, double now, struct buf *line)
{
	struct np_event claimed;
	bool found = false, superseded = false;
	char *text;
	json_t *o;
	int r;

	(void)now;
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->n_ev && !p->closed; i++) {
		struct np_event *e = &p->ev[i];
		if (e->surfaced || e->decision != NP_UNDECIDED)
			continue;
		if (!found) { /* events are kept in creation order: the first is the oldest */
			e->surfaced = true;
			claimed = *e;
			found = true;
		} else {
			e->decision = NP_SUPERSEDED;
			superseded = true;
		}
	}
	pthread_mutex_unlock(&p->lock);
	if (!found)
		return ENOENT;
	persist(p);
	if (superseded)
		notify(p, NETPOL_DECIDED); /* connections held on them are answered */
	o = event_json(&claimed, false);
	text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	r = !text || buf_adds(line, text) || buf_add(line, "\n", 1) ? ENOMEM : 0;
	free(text);
	json_decref(o);
	return r;
}

/* ---- the `network` commands --------------------------------------------------------- */

static bool id_valid(const char *s, size_t n, char out[NETPOL_ID_LEN + 1])
{
	if (n != NETPOL_ID_LEN)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (c != '-')
				return false;
		} else if (c >= 'A' && c <= 'F') {
			c = (char)(c + 32);
		} else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
			return false;
		}
		out[i] = c;
	}
	out[n] = '\0';
	return true;
}

/* Split text into at most 3 words (a third one means "too many"). */
static int split_words(const char *text, size_t len, const char *w[3], size_t wl[3])
{
	int n = 0;

	for (size_t i = 0; i < len;) {
		while (i < len && (text[i] == ' ' || text[i] == '\t'))
			i++;
		if (i == len)
			break;
		if (n == 3)
			return 4;
		w[n] = text + i;
		while (i < len && text[i] != ' ' && text[i] != '\t')
			i++;
		wl[n] = (size_t)(text + i - w[n]);
		n++;
	}
	return n;
}

static bool word_is(const char *w, size_t n, const char *s)
{
	return n == strlen(s) && !memcmp(w, s, n);
}

/* Take back the decision on event id and the grant it made (persist failed).
 * A second decision granting the same host:port between our change and this
 * undo would lose its grant in memory (its own record has it, so a restart
 * brings it back): two writers deciding the same destination while the disk
 * is full, accepted as the price of not holding the lock over a disk write. */
static void decision_undo(struct netpol *p, const char *id, const struct np_undo *u)
{
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->n_ev; i++) {
		struct np_event *e = &p->ev[i];
		if (strcmp(e->id, id))
			continue;
		e->decision = NP_UNDECIDED;
		for (size_t g = 0; u && g < p->n_gr; g++) {
			if (p->gr[g].port != e->port || strcmp(p->gr[g].host, e->host))
				continue;
			if (u->added)
				p->gr[g] = p->gr[--p->n_gr];
			else
				p->gr[g].expires_at = u->expires_at;
			break;
		}
		break;
	}
	pthread_mutex_unlock(&p->lock);
}

int netpol_command(struct netpol *p, const char *text, size_t len, double now)
{
	const char *w[3];
	size_t wl[3];
	char id[NETPOL_ID_LEN + 1];
	int n, want = -1, err = 0;
	unsigned changes = 0;
	struct np_undo undo = { 0 };
	bool granted = false;

	if (len && text[len - 1] == '\n')
		len--;
	if (len && text[len - 1] == '\r')
		len--;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)text[i] < 0x20 && text[i] != '\t')
			return EINVAL; /* NUL, a second line, control bytes */
	n = split_words(text, len, w, wl);
	if (n == 1 && word_is(w[0], wl[0], "deny-pending")) {
		size_t count = 0;

		if (!p)
			return 0;
		pthread_mutex_lock(&p->lock);
		if (p->closed) {
			pthread_mutex_unlock(&p->lock);
			return ENOENT;
		}
		for (size_t i = 0; i < p->n_ev; i++)
			if (!p->ev[i].surfaced && p->ev[i].decision == NP_UNDECIDED) {
				p->ev[i].surfaced = true;
				p->ev[i].decision = NP_DENY;
				p->ev[i].pending_deny = true;
				count++;
			}
		pthread_mutex_unlock(&p->lock);
		if (!count)
			return 0;
		err = persist(p) ? persist_err() : 0;
		pthread_mutex_lock(&p->lock);
		for (size_t i = 0; i < p->n_ev; i++)
			if (p->ev[i].pending_deny) {
				p->ev[i].pending_deny = false;
				if (err) { /* not recorded: as if never written */
					p->ev[i].surfaced = false;
					p->ev[i].decision = NP_UNDECIDED;
				}
			}
		pthread_mutex_unlock(&p->lock);
		if (!err)
			notify(p, NETPOL_DECIDED);
		return err;
	}
	if (n != 2)
		return EINVAL;
	if (word_is(w[0], wl[0], "allow_temporary"))
		want = NP_ALLOW_TEMPORARY;
	else if (word_is(w[0], wl[0], "allow_sandbox"))
		want = NP_ALLOW_SANDBOX;
	else if (word_is(w[0], wl[0], "deny"))
		want = NP_DENY;
	if (want < 0 || !id_valid(w[1], wl[1], id))
		return EINVAL;
	if (!p)
		return ENOENT;
	pthread_mutex_lock(&p->lock);
	err = ENOENT;
	for (size_t i = 0; i < p->n_ev && !p->closed; i++) {
		struct np_event *e = &p->ev[i];
		if (strcmp(e->id, id))
			continue;
		if (e->decision == want) {
			err = 0; /* the same decision again: nothing changes */
		} else if (e->decision != NP_UNDECIDED) {
			err = EEXIST;
		} else if (want != NP_DENY &&
			   grant_locked(p, e->host, e->port, want == NP_ALLOW_SANDBOX ? 0 : now + (double)p->conf.ttl,
				   &undo)) {
			err = ENOMEM;
		} else {
			e->decision = want;
			changes = NETPOL_DECIDED;
			granted = want != NP_DENY;
			err = 0;
		}
		break;
	}
	pthread_mutex_unlock(&p->lock);
	if (changes && persist(p)) {
		/* A decision the next start would not know is not made: the writer
		 * gets the error and the event stays undecided (full disk). */
		err = persist_err();
		decision_undo(p, id, granted ? &undo : NULL);
		return err;
	}
	if (changes)
		notify(p, changes);
	return err;
}

int netpol_render(struct netpol *p, double now, struct json_t *extra, struct buf *out)
{
	json_t *o = netpol_conf_json(&p->conf), *st;

	if (o && extra)
		json_object_update(o, extra);
	pthread_mutex_lock(&p->lock);
	st = state_json_locked(p, true, now);
	pthread_mutex_unlock(&p->lock);
	if (o && st)
		json_object_update(o, st);
	json_decref(st);
	return json_to_buf(o, out);
}
