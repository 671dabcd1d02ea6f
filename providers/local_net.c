/* SPDX-License-Identifier: MIT */
/*
 * local_net.c - the network of a local sandbox (DESIGN §7, docs/network.md).
 *
 * bubblewrap always gives the sandbox a network namespace of its own
 * (--unshare-net: loopback only).  Then, before the sandbox is handed out:
 *   - every mode: the nftables ruleset of its mode is installed inside that
 *     namespace (common/egress.h); the sandbox, without capabilities, cannot
 *     change it;
 *   - open, network.gateway on (the default): a veth pair into the daemon's
 *     gateway namespace, which reaches the outside through one pasta for
 *     every sandbox (local_gw.c): no process and no inotify instance per
 *     sandbox;
 *   - open, network.gateway off: a pasta of its own (local_pasta.c), as
 *     before the gateway; kept to compare the two (bench/) and as a way back;
 *   - isolated and allowlist: nothing more (allowlist's proxy listener is
 *     the daemon's, net/proxy.h).
 *
 * Which of the two a sandbox has is in its local.json (gw_slot or
 * pasta_pid): an adopted sandbox keeps the way out it was created with.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../common/log.h"
#include "../common/util.h"
#include "../common/egress.h"
#include "local_gw.h"
#include "local_net.h"

int local_net_have_pasta(void)
{
	return local_pasta_have();
}

void local_net_init(local_spawn_fn spawn, const char *state_dir)
{
	local_pasta_init(spawn);
	if (local_pasta_have())
		local_gw_init(state_dir);
}

void local_net_shutdown(void)
{
	local_gw_shutdown();
}

int local_net_nsfd(pid_t init)
{
	char path[64];

	if (str_fmt(path, sizeof(path), "/proc/%d/ns/net", (int)init))
		return -1;
	return open(path, O_RDONLY | O_CLOEXEC);
}

enum sbx_err local_net_reserve(const char *scope, const struct sbx_spec *spec, struct local_net *out)
{
	*out = (struct local_net){ .slot = -1 };
	if (spec->cfg->net_mode != NET_OPEN || !spec->cfg->net_gateway)
		return SBX_OK;
	out->slot = local_gw_reserve(spec->cfg->allow_private);
	if (out->slot >= 0)
		return SBX_OK;
	log_err(scope, "local: every address of the open-mode gateway is in use");
	return SBX_ERR_NOMEM;
}

/* egress_job's then: on the rules' thread, in the sandbox's namespace */
static void local_net_wire(void *arg)
{
	struct local_net_rules *r = arg;

	r->wire_err = local_gw_wire_here(r->scope, r->net->slot, r->nsfd);
}

enum sbx_err local_net_rules_start(struct local_net_rules *r, const char *scope, pid_t init,
	const struct sbx_spec *spec, const char *rootfs, struct local_net *net)
{
	const struct sbx_config *cfg = spec->cfg;
	struct buf resolv = BUF_INIT(BUF_CAP_PATH);
	/* the namespace bubblewrap made a moment ago: nothing in it to replace */
	struct egress_rules rules = { .mode = cfg->net_mode, .allow_private = cfg->allow_private, .fresh = true };
	bool wire;

	r->nsfd = local_net_nsfd(init);
	if (r->nsfd < 0) {
		log_err(scope, "local: cannot open the sandbox's network namespace: %s", strerror(errno));
		return SBX_ERR_IO;
	}
	/* the resolver the sandbox is told about (its /etc/resolv.conf) may be
	 * asked on port 53 even when its address is private */
	if (cfg->net_mode == NET_OPEN && !buf_addf(&resolv, "%s/etc/resolv.conf", rootfs ? rootfs : ""))
		rules.dns = egress_resolver(resolv.ptr, r->dns, sizeof(r->dns));
	buf_free(&resolv);
	if (!rules.dns)
		r->dns[0] = '\0';
	/* its veth pair on the same thread, once the rules are in force: off
	 * the create's path, while the init starts */
	r->net = cfg->net_mode == NET_OPEN && net->slot >= 0 ? net : NULL;
	r->wire_err = EIO; /* what finish says when the gateway is not up */
	wire = r->net && !local_gw_ready(scope, r->dns[0] ? r->dns : NULL);
	snprintf(r->scope, sizeof(r->scope), "%s", scope);
	egress_apply_start(&r->job, r->nsfd, &rules, wire ? local_net_wire : NULL, r);
	return SBX_OK;
}

enum sbx_err local_net_rules_finish(struct local_net_rules *r, const char *scope)
{
	char err[512];
	int res;

	if (r->nsfd < 0)
		return SBX_ERR_IO;
	res = egress_apply_finish(&r->job, err, sizeof(err));
	close(r->nsfd);
	r->nsfd = -1;
	if (res) {
		log_err(scope, "local: cannot install the sandbox's egress rules: %s", err);
		return SBX_ERR_IO;
	}
	if (!r->net)
		return SBX_OK;
	if (r->wire_err == EEXIST) {
		r->net->slot = -1; /* stays marked (its name is taken): local_net_up takes another */
		return SBX_OK;
	}
	r->net->wired = !r->wire_err;
	return r->wire_err ? SBX_ERR_IO : SBX_OK; /* logged by local_gw_wire_here */
}

enum sbx_err local_net_up(const char *scope, pid_t init, const struct sbx_spec *spec, const char *dns, int log_fd,
	uint64_t deadline_ms, struct local_net *out, int (*started)(void *arg), void *arg)
{
	struct buf logpath = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err result;
	int nsfd;

	if (spec->cfg->net_mode != NET_OPEN || out->wired)
		return SBX_OK;
	nsfd = local_net_nsfd(init);
	if (nsfd < 0) {
		log_err(scope, "local: cannot open the sandbox's network namespace: %s", strerror(errno));
		return SBX_ERR_IO;
	}
	if (spec->cfg->net_gateway) {
		result = local_gw_attach(scope, nsfd, spec->cfg->allow_private, dns && dns[0] ? dns : NULL, &out->slot,
			started, arg);
	} else if (buf_addf(&logpath, "%s/pasta.log", spec->dirs.thread_dir)) {
		result = SBX_ERR_NOMEM;
	} else {
		result = local_pasta_start(scope, nsfd, logpath.ptr, log_fd, deadline_ms, &out->pasta, started, arg);
	}
	close(nsfd);
	buf_free(&logpath);
	return result;
}

int local_net_alive(struct local_net *n)
{
	return !n->lost && local_pasta_alive(&n->pasta);
}

void local_net_down(struct local_net *n, bool ending)
{
	local_pasta_end(&n->pasta);
	if (n->slot >= 0 && ending)
		local_gw_release(n->slot);
	else if (n->slot >= 0)
		local_gw_detach(n->slot);
	n->slot = -1;
}

void local_net_adopted(struct local_net *n)
{
	if (n->slot >= 0 && local_gw_adopted(n->slot))
		n->lost = 1;
}

void local_net_address(const struct local_net *n, char *out, size_t len, bool v6)
{
	if (n->slot >= 0 && v6)
		local_gw_address6(n->slot, out, len);
	else if (n->slot >= 0)
		local_gw_address(n->slot, out, len);
	else if (len)
		out[0] = '\0';
}

pid_t local_net_gateway_pid(void)
{
	return local_gw_pasta_pid();
}
