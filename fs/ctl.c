/* SPDX-License-Identifier: MIT */
/*
 * ctl.c - what the read-only control files say: /sbx/.status, .metrics,
 * .config and a sandbox's id and status (events and network are netfs.c's).
 * Each open renders a snapshot, and a stat renders one to tell its size
 * (files are opened with direct I/O: `cat` reads the whole snapshot taken
 * at open).  What a snapshot shows may depend on who reads it: .status
 * shows last_error only to root and to the owner of the scope it names.
 */
#define _GNU_SOURCE
#include <string.h>

#include "../common/json.h"

#include "../common/util.h"
#include "../net/net.h"
#include "ctl.h"

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
	if (o) /* which way the bytes of data files go: see docs/performance.md */
		json_object_set_new(o, "data_path", json_string(fs.passthrough ? "passthrough" : "copy"));
	return json_to_buf(o, out);
}

static int ctl_metrics(struct buf *out)
{
	static const char *kinds[] = { "cold", "warm" };
	struct pool_stats st;
	struct net_stats ns;
	int r = 0;

	pool_stats(&st);
	net_stats(&ns);
	r |= buf_adds(out, "# HELP sbxfs_acquire_seconds Time from mkdir to a ready sandbox.\n"
			   "# TYPE sbxfs_acquire_seconds histogram\n");
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
	r |= buf_addf(out,
		"# HELP sbxfs_sandboxes Sandboxes by state.\n# TYPE sbxfs_sandboxes gauge\n"
		"sbxfs_sandboxes{state=\"active\"} %u\nsbxfs_sandboxes{state=\"warm\"} %u\n"
		"sbxfs_sandboxes{state=\"creating\"} %u\n"
		"# HELP sbxfs_evictions_total Warm sandboxes destroyed by the replicas cap.\n"
		"# TYPE sbxfs_evictions_total counter\nsbxfs_evictions_total %llu\n"
		"# HELP sbxfs_reaps_total Warm sandboxes destroyed by the idle reaper.\n"
		"# TYPE sbxfs_reaps_total counter\nsbxfs_reaps_total %llu\n"
		"# HELP sbxfs_adopted_total Sandboxes adopted at start.\n"
		"# TYPE sbxfs_adopted_total counter\nsbxfs_adopted_total %llu\n"
		"# HELP sbxfs_errors_total Failed lifecycle operations.\n"
		"# TYPE sbxfs_errors_total counter\nsbxfs_errors_total{kind=\"lifecycle\"} %llu\n"
		"# HELP sbxfs_skill_syncs_total Skill projection syncs.\n"
		"# TYPE sbxfs_skill_syncs_total counter\nsbxfs_skill_syncs_total 0\n"
		"# HELP sbxfs_network_events_total Network-policy events recorded.\n"
		"# TYPE sbxfs_network_events_total counter\nsbxfs_network_events_total %llu\n"
		"# HELP sbxfs_proxy_connections_total Connections to the approval proxies, by outcome.\n"
		"# TYPE sbxfs_proxy_connections_total counter\n"
		"sbxfs_proxy_connections_total{result=\"accepted\"} %llu\n"
		"sbxfs_proxy_connections_total{result=\"allowed\"} %llu\n"
		"sbxfs_proxy_connections_total{result=\"denied\"} %llu\n"
		"sbxfs_proxy_connections_total{result=\"refused\"} %llu\n"
		"# HELP sbxfs_proxy_connections Connections the approval proxies hold now.\n"
		"# TYPE sbxfs_proxy_connections gauge\nsbxfs_proxy_connections %llu\n",
		st.active, st.warm, st.creating, (unsigned long long)st.evictions, (unsigned long long)st.reaps,
		(unsigned long long)st.adopted, (unsigned long long)st.errors, (unsigned long long)ns.events,
		(unsigned long long)ns.accepted, (unsigned long long)ns.allowed, (unsigned long long)ns.denied,
		(unsigned long long)ns.refused, (unsigned long long)ns.active);
	return r ? -1 : 0;
}

int ctl_render(struct node *n, struct buf *out, uid_t reader)
{
	if (n->kind == N_ROOTFILE) {
		switch (n->which) {
		case RF_STATUS:
			return ctl_status(out, reader);
		case RF_METRICS:
			return ctl_metrics(out);
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
			return pool_status_json(n->view->sbx, out);
	}
	return -1;
}
