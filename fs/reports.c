/* SPDX-License-Identifier: MIT */
/*
 * reports.c - what the read-only report files say: /sbx/.status, .metrics,
 * .config, .health and a sandbox's id and status (events and network are
 * netfs.c's).  Each open renders a snapshot, and a stat renders one to tell
 * its size (files are opened with direct I/O: `cat` reads the whole snapshot
 * taken at open).  What a snapshot shows may depend on who reads it: .status
 * shows last_error only to root and to the owner of the scope it names.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "../common/budget.h"
#include "../common/json.h"

#include "../common/util.h"
#include "../net/net.h"
#include "../runtime/work.h"
#include "../skills/skills.h"
#include "reports.h"
#include "fswatch.h"
#include "nodefd.h"
#include "rfiles.h"
#include "uring.h"

#ifndef SBXFS_VERSION
#define SBXFS_VERSION "0.1.0"
#endif

/* last_error names a scope (user/thread) and the cause: root sees it; any
 * other reader only when the scope is its own (the user maps to its uid;
 * without users: everything belongs to the mounter). */
static bool ctl_may_see(json_t *err, uid_t reader)
{
	const char *scope = json_string_value(json_object_get(err, "scope"));
	char user[NAME_MAX_LEN + 1];
	struct sbx_config *cfg;
	uid_t uid = (uid_t)-1;
	gid_t gid;
	int r;

	if (reader == 0)
		return true;
	if (!scope || str_fmt(user, sizeof(user), "%.*s", (int)strcspn(scope, "/"), scope))
		return false;
	cfg = pool_config();
	r = config_user_lookup(cfg, user, &uid, &gid);
	config_put(cfg);
	return r == 0 ? uid == reader : r == 1 && reader == fs.mount_uid;
}

static int ctl_status(struct buf *out, uid_t reader)
{
	struct pool_stats st;
	json_t *o, *le = NULL;

	pool_stats(&st);
	if (st.last_error[0])
		le = json_loads(st.last_error, 0, NULL);
	if (le && !ctl_may_see(le, reader)) {
		json_decref(le);
		le = NULL;
	}
	o = json_pack("{s:s,s:s,s:f,s:i,s:i,s:i,s:i,s:i,s:i,s:I,s:I,s:I,s:o}", "provider", st.provider, "version",
		SBXFS_VERSION, "uptime", util_wall_now() - fs.started_at, "active", st.active, "warm", st.warm,
		"creating", st.creating, "replicas", st.replicas, "idle_timeout", (int)st.idle_timeout,
		"idle_check_interval", (int)st.idle_check_interval, "evictions", (json_int_t)st.evictions, "reaps",
		(json_int_t)st.reaps, "adopted", (json_int_t)st.adopted, "last_error", le ? le : json_null());
	if (o) /* pool.prewarm (providers/spares.h) */
		json_object_set_new(o, "spares",
			json_pack("{s:i,s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "prewarm", st.spares.target, "ready",
				(int)st.spares.ready, "creating", (int)st.spares.creating, "claims",
				(json_int_t)st.spares.claims, "claim_failures", (json_int_t)st.spares.claim_failures,
				"made", (json_int_t)st.spares.made, "make_failures", (json_int_t)st.spares.make_failures,
				"reaps", (json_int_t)st.spares.reaps, "evictions",
				(json_int_t)st.spares.evictions, "adopted", (json_int_t)st.spares.adopted, "lost",
				(json_int_t)st.spares.lost));
	if (o) { /* which way the bytes of data files go: see docs/performance.md */
		json_object_set_new(o, "data_path", json_string(fs.passthrough ? "passthrough" : "copy"));
		uring_status(o); /* and the requests: fs/uring.c */
	}
	if (o) { /* the watcher of data caches (fswatch.h) */
		struct fswatch_stats ws;
		fswatch_stats(&ws);
		json_object_set_new(o, "cache_watcher",
			json_pack("{s:s,s:I,s:I,s:I,s:I}", "state", ws.on ? "fanotify" : "off", "directories",
				(json_int_t)ws.dirs, "events", (json_int_t)ws.events, "invalidations",
				(json_int_t)ws.invals, "overflows", (json_int_t)ws.overflows));
	}
	return json_to_buf(o, out);
}

/* A sandbox's status: the pool's, and how long its data is cached
 * ("cache": fswatch_state). */
static int ctl_sbx_status(struct view *v, struct buf *out)
{
	struct buf b = BUF_INIT(BUF_CAP_JSON);
	json_t *o;
	int r = pool_status_json(v->sbx, &b);

	o = r ? NULL : json_loadb(b.ptr, b.len, 0, NULL);
	buf_free(&b);
	if (!o)
		return -1;
	/* remote files have their own cache rules (rfiles.c) */
	json_object_set_new(o, "cache", json_string(rfiles_is_remote(v, DD_WORKSPACE) ? "remote" : fswatch_state(v)));
	return json_to_buf(o, out);
}

/* ---- .health ------------------------------------------------------------------ */

/* How long a failed create keeps .health degraded when no create has
 * succeeded since (a provider that broke and that nobody has tried again
 * is still reported for a while; a stale failure is not reported forever). */
#define HEALTH_ERROR_WINDOW 600.0
/* The provider's checks read accounts (NSS, maybe a directory server):
 * at most once a minute whatever the probe rate, and at once after a
 * reload. */
#define HEALTH_PREFLIGHT_TTL_MS 60000

static struct {
	pthread_mutex_t lock;
	uint64_t checked_ms;               /* protected by lock; 0 = never */
	const struct sbx_config *checked;  /* protected by lock; compared, never dereferenced */
	char err[512];                     /* protected by lock; "" = the checks pass */
} health = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The provider's side-effect-free checks (sbx_preflight), cached. */
static void ctl_health_preflight(char *out, size_t len)
{
	struct sbx_config *cfg = pool_config();
	uint64_t now = util_now_ms();

	pthread_mutex_lock(&health.lock);
	if (!health.checked_ms || health.checked != cfg || now - health.checked_ms >= HEALTH_PREFLIGHT_TTL_MS) {
		const struct sbx_provider *prov = provider_find(cfg->use);

		if (!prov)
			snprintf(health.err, sizeof(health.err), "provider %s is not built in", cfg->use);
		else if (!sbx_preflight(prov, cfg, health.err, sizeof(health.err)))
			health.err[0] = '\0';
		else if (!health.err[0])
			snprintf(health.err, sizeof(health.err), "provider %s: its checks fail", prov->name);
		health.checked_ms = now;
		health.checked = cfg;
	}
	snprintf(out, len, "%s", health.err);
	pthread_mutex_unlock(&health.lock);
	config_put(cfg);
}

/* One line: "ok", or "degraded: WHY[; WHY]" (docs/interface.md): the
 * provider's checks, a recent failed create, and every limit of the daemon
 * it is near (budget.h: descriptors, memory, tasks).  There is no
 * "stopping": at shutdown the request loop ends before anything else, and
 * nothing is answered any more. */
static int ctl_health(struct buf *out, struct pool_stats *st)
{
	struct budget_usage use;
	char pre[512];
	double now = util_wall_now();
	int n = 0, r = 0, near;

	ctl_health_preflight(pre, sizeof(pre));
	if (pre[0])
		r |= buf_addf(out, "%s%s", n++ ? "; " : "degraded: ", pre);
	if (st->last_error_at > st->last_create_at && now - st->last_error_at < HEALTH_ERROR_WINDOW) {
		/* kind and cause only: the scope (a user's name) is not for every reader */
		json_t *le = json_loads(st->last_error, 0, NULL);
		const char *kind = json_string_value(json_object_get(le, "kind"));
		const char *why = json_string_value(json_object_get(le, "error"));

		r |= buf_addf(out, "%slast sandbox create failed %.0f s ago (%s: %s)", n++ ? "; " : "degraded: ",
			now - st->last_error_at, kind ? kind : "create", why ? why : "?");
		json_decref(le);
	}
	budget_usage(&use);
	near = budget_near(&use, out, n ? "; " : "degraded: ", "; ");
	if (near < 0)
		r = -1;
	else
		n += near;
	r |= buf_adds(out, n ? "\n" : "ok\n");
	return r ? -1 : 0;
}

/* ---- .metrics ----------------------------------------------------------------- */

/* A label value of the exposition format: \, " and newline escaped. */
static int metric_label(struct buf *out, const char *v)
{
	int r = 0;

	for (const char *p = v; *p && !r; p++)
		r = *p == '\\' ? buf_adds(out, "\\\\") : *p == '"' ? buf_adds(out, "\\\"")
			: *p == '\n' ? buf_adds(out, "\\n") : buf_add(out, p, 1);
	return r;
}

static int metric_head(struct buf *out, const char *name, const char *type, const char *help)
{
	return buf_addf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The daemon's descriptors and their shares (budget.h, nodefd.h). */
static int ctl_metrics_budget(struct buf *out)
{
	static const char *const levels[3] = { "sandbox", "user", "total" };
	static const char *const shares[BUDGET_SHARES] = { "data", "proxy" };
	struct budget_caps c;
	struct budget_usage u;
	struct budget_stats bs;
	struct nfd_stats ns;
	int r = 0;

	budget_caps(&c);
	budget_usage(&u);
	budget_stats(&bs);
	nfd_stats(&ns);
	r |= metric_head(out, "sbxfs_fds_open", "gauge", "File descriptors the daemon has open (-1: at its limit).");
	r |= buf_addf(out, "sbxfs_fds_open %ld\n", u.fds);
	r |= metric_head(out, "sbxfs_fds_limit", "gauge", "The daemon's RLIMIT_NOFILE (soft).");
	r |= buf_addf(out, "sbxfs_fds_limit %ld\n", c.limit);
	r |= metric_head(out, "sbxfs_fds_budget", "gauge",
		"The limit's shares (docs/security.md): reserve, data_cache, rfiles_cache, data (descriptors held for "
		"open files, "
		"in all, a sandbox, a user), proxy (connections, in all, a sandbox, a user).");
	r |= buf_addf(out,
		"sbxfs_fds_budget{share=\"reserve\"} %ld\nsbxfs_fds_budget{share=\"data_cache\"} %ld\n"
		"sbxfs_fds_budget{share=\"rfiles_cache\"} %ld\n"
		"sbxfs_fds_budget{share=\"data\"} %ld\nsbxfs_fds_budget{share=\"data_sandbox\"} %ld\n"
		"sbxfs_fds_budget{share=\"data_user\"} %ld\nsbxfs_fds_budget{share=\"proxy_connections\"} %ld\n"
		"sbxfs_fds_budget{share=\"proxy_connections_sandbox\"} %ld\n"
		"sbxfs_fds_budget{share=\"proxy_connections_user\"} %ld\n",
		c.reserve, c.data_cache, c.rfiles_cache, c.total[BUDGET_DATA], c.sandbox[BUDGET_DATA], c.user[BUDGET_DATA],
		c.total[BUDGET_PROXY], c.sandbox[BUDGET_PROXY], c.user[BUDGET_PROXY]);
	r |= metric_head(out, "sbxfs_data_fds", "gauge",
		"Descriptors of data files: cached (O_PATH, evictable), fixed (no file handle: kept for the node's "
		"life), held (charged to sandboxes: open files and directories, fixed nodes).");
	r |= buf_addf(out, "sbxfs_data_fds{kind=\"cached\"} %ld\nsbxfs_data_fds{kind=\"fixed\"} %ld\n"
			   "sbxfs_data_fds{kind=\"held\"} %ld\n",
		ns.cached, ns.fixed, bs.used[BUDGET_DATA]);
	r |= metric_head(out, "sbxfs_data_nodes", "gauge", "Data files and directories the kernel remembers.");
	r |= buf_addf(out, "sbxfs_data_nodes %ld\n", ns.nodes);
	r |= metric_head(out, "sbxfs_data_file_handles", "gauge",
		"1 when data nodes hold file handles and reopen by them, 0 when each keeps its descriptor.");
	r |= buf_addf(out, "sbxfs_data_file_handles %d\n", ns.handles);
	r |= metric_head(out, "sbxfs_data_fd_reopens_total", "counter", "Data nodes' descriptors reopened by handle.");
	r |= buf_addf(out, "sbxfs_data_fd_reopens_total %llu\n", (unsigned long long)ns.reopens);
	r |= metric_head(out, "sbxfs_data_fd_evictions_total", "counter",
		"Data nodes' descriptors closed by the cache's cap.");
	r |= buf_addf(out, "sbxfs_data_fd_evictions_total %llu\n", (unsigned long long)ns.evictions);
	r |= metric_head(out, "sbxfs_budget_refusals_total", "counter",
		"Requests refused at a share's cap, by share and by the cap that refused (sandbox: EMFILE; user, "
		"total: ENFILE; a proxy connection is closed).");
	for (int s = 0; s < BUDGET_SHARES; s++)
		for (int l = 0; l < 3; l++)
			r |= buf_addf(out, "sbxfs_budget_refusals_total{share=\"%s\",cap=\"%s\"} %llu\n", shares[s],
				levels[l], (unsigned long long)bs.refused[s][l]);
	return r;
}

/* The work queues (runtime/work.h). */
static int ctl_metrics_work(struct buf *out)
{
	struct work_stats ws;
	int r = 0;

	work_stats(&ws);
	r |= metric_head(out, "sbxfs_work_items", "gauge",
		"Slow work items by queue (lifecycle, io) and state (queued: waiting for a thread or for the sandbox's turn).");
	for (int q = 0; q < WORK_NQUEUES; q++)
		r |= buf_addf(out, "sbxfs_work_items{queue=\"%s\",state=\"queued\"} %u\n"
				   "sbxfs_work_items{queue=\"%s\",state=\"running\"} %u\n",
			work_queue_name(q), ws.queued[q], work_queue_name(q), ws.running[q]);
	r |= metric_head(out, "sbxfs_work_threads", "gauge", "Work threads by queue.");
	for (int q = 0; q < WORK_NQUEUES; q++)
		r |= buf_addf(out, "sbxfs_work_threads{queue=\"%s\"} %u\n", work_queue_name(q), ws.threads[q]);
	r |= metric_head(out, "sbxfs_work_cancelled_total", "counter",
		"Work items cancelled before they answered (a FUSE interrupt: the caller got a signal).");
	r |= buf_addf(out, "sbxfs_work_cancelled_total %llu\n", ws.cancelled);
	return r;
}

static int ctl_metrics(struct buf *out)
{
	static const char *kinds[] = { "cold", "warm" };
	struct pool_stats st;
	struct buf health_line = BUF_INIT(1024);
	struct sbx_config *cfg;
	struct statvfs sv;
	struct net_stats ns;
	struct skills_stats sk;
	int r = 0;

	pool_stats(&st);
	net_stats(&ns);
	r |= metric_head(out, "sbxfs_acquire_seconds", "histogram",
		"Time from mkdir to a ready sandbox, by kind (cold: created; warm: reclaimed).");
	for (int k = 0; k < 2; k++) {
		uint64_t cum = 0;
		for (int b = 0; b < 12; b++) {
			cum += st.acquire_hist[k][b];
			r |= buf_addf(out, "sbxfs_acquire_seconds_bucket{kind=\"%s\",le=\"%g\"} %llu\n", kinds[k],
				pool_hist_bounds[b], (unsigned long long)cum);
		}
		cum += st.acquire_hist[k][12];
		r |= buf_addf(out, "sbxfs_acquire_seconds_bucket{kind=\"%s\",le=\"+Inf\"} %llu\n", kinds[k],
			(unsigned long long)cum);
		r |= buf_addf(out, "sbxfs_acquire_seconds_sum{kind=\"%s\"} %.6f\n", kinds[k], st.acquire_sum[k]);
		r |= buf_addf(out, "sbxfs_acquire_seconds_count{kind=\"%s\"} %llu\n", kinds[k],
			(unsigned long long)st.acquire_count[k]);
	}
	r |= metric_head(out, "sbxfs_sandboxes", "gauge", "Sandboxes by state.");
	r |= buf_addf(out,
		"sbxfs_sandboxes{state=\"active\"} %u\nsbxfs_sandboxes{state=\"warm\"} %u\n"
		"sbxfs_sandboxes{state=\"creating\"} %u\n",
		st.active, st.warm, st.creating);
	r |= metric_head(out, "sbxfs_spares", "gauge",
		"Pre-warmed sandboxes of no scope (pool.prewarm), by state; target: the prewarm in force.");
	r |= buf_addf(out, "sbxfs_spares{state=\"ready\"} %u\nsbxfs_spares{state=\"creating\"} %u\n"
			   "sbxfs_spares{state=\"target\"} %d\n",
		st.spares.ready, st.spares.creating, st.spares.target);
	r |= metric_head(out, "sbxfs_spare_claims_total", "counter",
		"Creates served by binding a spare, by result (failed: the spare was destroyed, the create went cold).");
	r |= buf_addf(out, "sbxfs_spare_claims_total{result=\"ok\"} %llu\nsbxfs_spare_claims_total{result=\"failed\"} %llu\n",
		(unsigned long long)st.spares.claims, (unsigned long long)st.spares.claim_failures);
	r |= metric_head(out, "sbxfs_spare_events_total", "counter",
		"Spares made, failed to make, reaped (idle_timeout), evicted (replicas), adopted at start and lost (found gone).");
	r |= buf_addf(out, "sbxfs_spare_events_total{event=\"make_failed\"} %llu\n",
		(unsigned long long)st.spares.make_failures);
	r |= buf_addf(out,
		"sbxfs_spare_events_total{event=\"made\"} %llu\nsbxfs_spare_events_total{event=\"reaped\"} %llu\n"
		"sbxfs_spare_events_total{event=\"evicted\"} %llu\nsbxfs_spare_events_total{event=\"adopted\"} %llu\n",
		(unsigned long long)st.spares.made, (unsigned long long)st.spares.reaps,
		(unsigned long long)st.spares.evictions, (unsigned long long)st.spares.adopted);
	r |= buf_addf(out, "sbxfs_spare_events_total{event=\"lost\"} %llu\n", (unsigned long long)st.spares.lost);
	r |= metric_head(out, "sbxfs_replicas", "gauge", "The replicas soft cap on active + warm sandboxes.");
	r |= buf_addf(out, "sbxfs_replicas %d\n", st.replicas);
	r |= metric_head(out, "sbxfs_evictions_total", "counter", "Warm sandboxes destroyed by the replicas cap.");
	r |= buf_addf(out, "sbxfs_evictions_total %llu\n", (unsigned long long)st.evictions);
	r |= metric_head(out, "sbxfs_reaps_total", "counter", "Warm sandboxes destroyed by the idle reaper.");
	r |= buf_addf(out, "sbxfs_reaps_total %llu\n", (unsigned long long)st.reaps);
	r |= metric_head(out, "sbxfs_adopted_total", "counter", "Sandboxes adopted at start.");
	r |= buf_addf(out, "sbxfs_adopted_total %llu\n", (unsigned long long)st.adopted);
	r |= metric_head(out, "sbxfs_errors_total", "counter",
		"Failed sandbox creations, by kind (create: the provider; state_dir: the host directories).");
	for (int k = 0; k < 3; k++)
		r |= buf_addf(out, "sbxfs_errors_total{kind=\"%s\"} %llu\n", pool_error_kinds[k],
			(unsigned long long)st.errors_by_kind[k]);
	skills_stats(&sk);
	r |= metric_head(out, "sbxfs_skill_syncs_total", "counter",
		"Skill projection syncs by upload, by result (none with providers that mount skills/).");
	r |= buf_addf(out, "sbxfs_skill_syncs_total{result=\"ok\"} %llu\nsbxfs_skill_syncs_total{result=\"failed\"} %llu\n",
		(unsigned long long)(sk.syncs - sk.sync_failures), (unsigned long long)sk.sync_failures);
	r |= metric_head(out, "sbxfs_skill_files_uploaded_total", "counter", "Skill files uploaded by syncs.");
	r |= buf_addf(out, "sbxfs_skill_files_uploaded_total %llu\n", (unsigned long long)sk.files_uploaded);
	r |= metric_head(out, "sbxfs_skill_bytes_uploaded_total", "counter", "Bytes of skill files uploaded by syncs.");
	r |= buf_addf(out, "sbxfs_skill_bytes_uploaded_total %llu\n", (unsigned long long)sk.bytes_uploaded);
	r |= metric_head(out, "sbxfs_skill_paths_removed_total", "counter",
		"Paths removed from sandboxes by syncs (files, links, directory trees).");
	r |= buf_addf(out, "sbxfs_skill_paths_removed_total %llu\n", (unsigned long long)sk.removed);
	r |= metric_head(out, "sbxfs_network_events_total", "counter", "Network-policy events recorded.");
	r |= buf_addf(out, "sbxfs_network_events_total %llu\n", (unsigned long long)ns.events);
	r |= metric_head(out, "sbxfs_proxy_connections_total", "counter",
		"Connections to the approval proxies, by outcome.");
	r |= buf_addf(out,
		"sbxfs_proxy_connections_total{result=\"accepted\"} %llu\n"
		"sbxfs_proxy_connections_total{result=\"allowed\"} %llu\n"
		"sbxfs_proxy_connections_total{result=\"denied\"} %llu\n"
		"sbxfs_proxy_connections_total{result=\"refused\"} %llu\n",
		(unsigned long long)ns.accepted, (unsigned long long)ns.allowed, (unsigned long long)ns.denied,
		(unsigned long long)ns.refused);
	r |= metric_head(out, "sbxfs_proxy_connections", "gauge", "Connections the approval proxies hold now.");
	r |= buf_addf(out, "sbxfs_proxy_connections %llu\n", (unsigned long long)ns.active);
	r |= metric_head(out, "sbxfs_data_opens_total", "counter",
		"Opens of data files (workspace/, uploads/, outputs/, skills/), by data path: "
		"passthrough (the kernel reads and writes the host file) or copy (through the daemon).");
	r |= buf_addf(out, "sbxfs_data_opens_total{path=\"passthrough\"} %llu\n"
			   "sbxfs_data_opens_total{path=\"copy\"} %llu\n",
		__atomic_load_n(&fs.opens_passthrough, __ATOMIC_RELAXED),
		__atomic_load_n(&fs.opens_copy, __ATOMIC_RELAXED));
	r |= metric_head(out, "sbxfs_fuse_requests_total", "counter",
		"FUSE requests the kernel sent, by operation (all nodes; what one file operation costs: "
		"docs/performance.md).");
	for (int q = 0; q < FSR_COUNT; q++)
		r |= buf_addf(out, "sbxfs_fuse_requests_total{op=\"%s\"} %llu\n", fs_req_names[q],
			__atomic_load_n(&fs.requests[q], __ATOMIC_RELAXED));
	r |= ctl_metrics_budget(out);
	r |= ctl_metrics_work(out);
	r |= metric_head(out, "sbxfs_healthy", "gauge", "1 when /sbx/.health says ok, else 0.");
	r |= ctl_health(&health_line, &st);
	r |= buf_addf(out, "sbxfs_healthy %d\n", !strcmp(buf_str(&health_line), "ok\n"));
	buf_free(&health_line);
	cfg = pool_config();
	if (statvfs(cfg->state_dir, &sv) == 0) {
		r |= metric_head(out, "sbxfs_state_dir_free_bytes", "gauge",
			"Bytes free for sbxfs on the filesystem of state_dir.");
		r |= buf_addf(out, "sbxfs_state_dir_free_bytes %llu\n",
			(unsigned long long)sv.f_bavail * (unsigned long long)sv.f_frsize);
	}
	config_put(cfg);
	r |= metric_head(out, "sbxfs_start_time_seconds", "gauge", "When the daemon started, in seconds since the epoch.");
	r |= buf_addf(out, "sbxfs_start_time_seconds %.3f\n", fs.started_at);
	r |= metric_head(out, "sbxfs_info", "gauge", "Always 1: the version, the provider and the data path.");
	r |= buf_adds(out, "sbxfs_info{version=\"");
	r |= metric_label(out, SBXFS_VERSION);
	r |= buf_adds(out, "\",provider=\"");
	r |= metric_label(out, st.provider);
	r |= buf_addf(out, "\",data_path=\"%s\"} 1\n", fs.passthrough ? "passthrough" : "copy");
	return r ? -1 : 0;
}

int reports_render(struct node *n, struct buf *out, uid_t reader)
{
	if (n->kind == N_ROOTFILE) {
		switch (n->which) {
		case RF_STATUS:
			return ctl_status(out, reader);
		case RF_METRICS:
			return ctl_metrics(out);
		case RF_HEALTH: {
			struct pool_stats st;
			pool_stats(&st);
			return ctl_health(out, &st);
		}
		default: {
			struct sbx_config *c = pool_config();
			int r = config_show(c, out);
			config_put(c);
			return r;
		}
		}
	}
	if (n->kind == N_CTL && n->view) {
		if (n->which == CTL_ID)
			return buf_addf(out, "%s\n", n->view->sbx->token);
		if (n->which == CTL_STATUS)
			return ctl_sbx_status(n->view, out);
	}
	return -1;
}
