/* SPDX-License-Identifier: MIT */
/*
 * local_net.h - the local provider's sandbox network (local_net.c): the
 * nftables ruleset of a sandbox's mode and, in open mode, its way out: a
 * veth pair into the gateway (local_gw.h, network.gateway on, the default)
 * or a pasta of its own (off).  Used by local.c only.
 */
#ifndef SBX_LOCAL_NET_H
#define SBX_LOCAL_NET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../common/egress.h"
#include "../common/names.h"
#include "local_pasta.h"
#include "provider.h"

/* A sandbox's way out in open mode (neither: another mode). */
struct local_net {
	struct local_pasta pasta; /* network.gateway off: its own pasta */
	int slot;                 /* on: its gateway slot (address pair), -1 when none */
	int lost;                 /* adopted without its veth pair: no way out */
	int wired;                /* its veth pair was made with its rules (local_net_rules_start) */
};

/* Before the sandbox's first record: out starts empty and, in open mode
 * through the gateway, holds the slot its veth pair will have, so the
 * record names the slot from the start (local_net_down frees it).  SBX_OK,
 * or NOMEM after logging it (no slot is free). */
enum sbx_err local_net_reserve(const char *scope, const struct sbx_spec *spec, struct local_net *out);

/* The nftables ruleset of the sandbox's mode (DESIGN §7), installed in
 * the namespace of init while the init is still starting: start opens the
 * namespace and begins the install on a thread; finish waits for it (always
 * call it after a start: it also closes the namespace).  SBX_OK, or an
 * error after logging it.  The sandbox is handed out only after finish.
 * When net holds a reserved gateway slot, the same thread then makes the
 * slot's veth pair (net->wired once finish says SBX_OK; a slot whose name
 * was taken is dropped from net for local_net_up to take another). */
struct local_net_rules {
	struct egress_job job;
	int nsfd; /* -1: not started */
	char dns[64]; /* open mode: the resolver let through, "" when none */
	struct local_net *net; /* the gateway slot to wire, or NULL */
	int wire_err;          /* what local_gw_wire_here said */
	char scope[NAMES_SCOPE_MAX];
};
enum sbx_err local_net_rules_start(struct local_net_rules *r, const char *scope, pid_t init,
	const struct sbx_spec *spec, const char *rootfs, struct local_net *net);
enum sbx_err local_net_rules_finish(struct local_net_rules *r, const char *scope);

/* Give the sandbox whose init is init (its rules installed) its way out in
 * open mode (other modes, or wired with its rules: nothing): its veth pair
 * into the gateway, or its
 * own pasta, waited for until the namespace has its link.  dns: the
 * resolver its rules let through ("" none).  started(arg) runs as soon as
 * out names what is being made (the slot, or pasta running), so the caller
 * records it first: a daemon killed meanwhile leaves a record the next
 * start cleans up.  log_fd takes pasta's early errors.  SBX_OK, or an
 * error after logging it (nothing is left). */
enum sbx_err local_net_up(const char *scope, pid_t init, const struct sbx_spec *spec, const char *dns, int log_fd,
	uint64_t deadline_ms, struct local_net *out, int (*started)(void *arg), void *arg);
/* Is its way out still there (its pasta running; the gateway's pasta is
 * restarted by the gateway itself)? */
int local_net_alive(struct local_net *n);
/* Take it down: end its pasta, or delete its veth pair and free its slot;
 * ending: at the unmount's teardown of every sandbox, its namespace ended,
 * the pair is left to the kernel (local_gw_release). */
void local_net_down(struct local_net *n, bool ending);
/* An adopted sandbox's record: slot (-1 none) is taken again. */
void local_net_adopted(struct local_net *n);
/* A new fd on init's network namespace, or -1. */
int local_net_nsfd(pid_t init);
/* Start of day (pasta found, the spawner of its processes, a gateway
 * left by a previous daemon adopted) and end of day (the gateway ended
 * when no sandbox is left on it). */
void local_net_init(local_spawn_fn spawn, const char *state_dir);
void local_net_shutdown(void);
int local_net_have_pasta(void);
/* The sandbox's address (open mode, gateway; v6: its IPv6 one) into out,
 * "" when none; the gateway's pasta (0: none). */
void local_net_address(const struct local_net *n, char *out, size_t len, bool v6);
pid_t local_net_gateway_pid(void);

#endif
