/* SPDX-License-Identifier: MIT */
/*
 * local_gw.h - the open-mode gateway of the local provider (local_gw.c,
 * docs/network.md "The gateway"): one network namespace the daemon owns,
 * pinned under STATE/gateway/, reaching the outside through one pasta, and
 * one veth pair per open sandbox into it.  Used by local_net.c only.
 *
 * Thread-safe; gw.lock (a leaf: nothing else is taken under it, and no
 * netlink, nftables, fork or wait happens while it is held) guards the slot
 * map and the pasta record.
 */
#ifndef SBX_LOCAL_GW_H
#define SBX_LOCAL_GW_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "local_pasta.h"
#include "provider.h"

/* Start of day: remember where the gateway lives (STATE/gateway), and adopt
 * the gateway a previous daemon left (its pinned namespace, and its pasta
 * if it still runs; a dead one is started again). */
void local_gw_init(const char *state_dir);
/* Wire the sandbox whose namespace nsfd refers to: a slot (an address
 * pair) of its kind, its veth pair (the sandbox end "eth0" with the odd
 * address of the pair, a default route via the gateway end), and dns (the
 * resolver of its resolv.conf, may be NULL) allowed through the gateway.
 * The gateway is made first if there is none.  chosen(arg) runs once *slot
 * is set and before anything is made, so the caller records it; nonzero
 * gives up.  SBX_OK, or an error after logging it (nothing left). */
enum sbx_err local_gw_attach(const char *scope, int nsfd, bool allow_private, const char *dns, int *slot,
	int (*chosen)(void *arg), void *arg);
/* The same in steps, for a create that wires its sandbox off its own
 * path: reserve takes a slot of its kind (-1: none is free), for the
 * caller to record; ready makes the gateway if there is none (from a
 * thread in the daemon's own namespaces) and lets dns through (0, or -1
 * after logging); wire_here makes the slot's veth pair on the calling
 * thread, which it moves between namespaces (one that ends after:
 * egress_job's then), once ready said 0.  0; EEXIST when the slot's name
 * is taken by a link this daemon does not know (the slot stays marked:
 * local_gw_attach takes another); another errno after logging it
 * (local_gw_detach undoes). */
int local_gw_reserve(bool allow_private);
int local_gw_ready(const char *scope, const char *dns);
int local_gw_wire_here(const char *scope, int slot, int nsfd);
/* Delete the slot's veth pair (if still there) and free the slot. */
void local_gw_detach(int slot);
/* Free the slot of a sandbox whose namespace is gone or going, and leave
 * its pair to the kernel (a veth goes with either end's namespace): for
 * the unmount's teardown of every sandbox, where no new sandbox can take
 * the address meanwhile and a RTM_DELLINK each (a synchronous unregister
 * with its RCU waits) would cost more than the teardown of the namespace
 * that takes them all in one batch. */
void local_gw_release(int slot);
/* An adopted sandbox holds slot: taken again.  0 when its veth pair is
 * there, -1 when not (the sandbox has no way out: its health check fails). */
int local_gw_adopted(int slot);
/* The sandbox address of slot (dotted quad), and its IPv6 one. */
void local_gw_address(int slot, char *out, size_t len);
void local_gw_address6(int slot, char *out, size_t len);
/* The gateway's pasta, 0 when it has none. */
pid_t local_gw_pasta_pid(void);
/* End of day: stop watching pasta; when no sandbox holds a slot any more,
 * also end pasta and remove the namespace (else both stay for the sandboxes
 * the next start adopts). */
void local_gw_shutdown(void);

#endif
