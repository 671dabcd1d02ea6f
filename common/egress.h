/* SPDX-License-Identifier: MIT */
/*
 * egress.h - what a sandbox's network namespace lets out (DESIGN §7), for
 * any provider that hands the daemon a netns fd (struct sbx_net_ops): the
 * local provider today, docker and aio containers later.
 *
 * Every sandbox has a network namespace of its own.  Inside it the daemon
 * (root, in the host's user namespace) installs an nftables ruleset with
 * libnftables from a short-lived thread that joined the namespace; the
 * sandbox's processes have no capability in that user namespace, so they
 * can neither change nor remove it.  The ruleset is:
 *   open       everything leaves but what is private (policy.h's table), the
 *              host's own addresses, and anything but DNS to the one resolver
 *              the sandbox is told about; allow_private_destinations lifts all
 *              of that.  Connectivity itself comes from the provider (the
 *              local provider runs pasta, see docs/network.md);
 *   isolated,
 *   allowlist  loopback only: the approval proxy listens on the namespace's
 *              own 127.0.0.1:3128 (proxy.h), so it needs no other way out.
 * The same rules apply to TCP, UDP and everything else (IPv4 and IPv6,
 * table inet).  Rejections are immediate (TCP reset, ICMP administratively
 * prohibited), so a refused connect fails at once instead of timing out.
 *
 * Threads: every call may block briefly (a thread, netlink); callers are
 * provider create paths (work threads), never FUSE workers.  libnftables is
 * used under one mutex (its contexts are cheap; its globals are not
 * documented as thread-safe).
 */
#ifndef SBX_NET_EGRESS_H
#define SBX_NET_EGRESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../common/buf.h"
#include "../common/config.h"

/* Run fn(arg) on a new thread that has joined the network namespace nsfd
 * (sockets it opens stay in that namespace after it ends).  Returns fn's
 * result, or -1 with errno when the thread could not be started or join. */
int egress_in_netns(int nsfd, int (*fn)(void *arg), void *arg);

struct egress_rules {
	enum net_mode mode;
	bool allow_private;
	const char *dns; /* open mode: a resolver allowed on port 53 (numeric), or NULL */
	bool fresh;      /* the namespace was just made (nothing to replace): the table is only added,
			  * which saves nftables a second commit (about 8 ms here: docs/performance.md) */
};

/* The nftables ruleset for r (exposed for the unit tests and docs). */
int egress_ruleset(const struct egress_rules *r, struct buf *out);
/* Install it in nsfd's namespace.  0, or -1 and err says why. */
int egress_apply(int nsfd, const struct egress_rules *r, char *err, size_t errlen);
/* Run any nftables text in nsfd's namespace (the gateway's ruleset, an
 * element added to one of its sets).  0, or -1 and err says why. */
int egress_apply_text(int nsfd, const char *text, char *err, size_t errlen);

/* The open-mode gateway's own ruleset (providers/local_gw.c, docs/network.md
 * "The gateway"): in the gateway's namespace, what the sandboxes' veths
 * (named ifprefix + number) may send on: forwarded out only (never from one
 * sandbox to another, nothing to the gateway itself), never to the host's
 * own addresses, and never to private destinations from `strict` (the part
 * of the subnet given to sandboxes without allow_private_destinations) but
 * DNS to a resolver of set dns4; masqueraded as the gateway's address on the
 * way out. */
struct egress_gw {
	const char *subnet;   /* every sandbox address, "a.b.c.d/n" */
	const char *strict;   /* the sandboxes without allow_private_destinations */
	const char *ifprefix; /* the gateway ends of the veth pairs */
	const char *dns;      /* a resolver allowed on port 53 (numeric: set dns4 or dns6), or NULL */
	const char *subnet6;  /* the same for IPv6, or NULL: IPv6 is not forwarded */
	const char *strict6;
};
int egress_gateway_ruleset(const struct egress_gw *g, struct buf *out);

/* The same in two halves, so a create can install the rules while its
 * sandbox's init is still starting: start begins the install on a thread of
 * its own (nsfd must stay open until finish); finish waits for it and
 * returns what egress_apply would.  Every start needs its finish.  then,
 * when not NULL, runs on that thread once the rules are in force (not when
 * they failed), in the namespace, with then_arg: more set-up of the same
 * namespace off the caller's path (it reports through then_arg). */
struct egress_job {
	pthread_t thread;
	bool running;
	int nsfd, result;
	struct buf text;
	char err[512];
	void (*then)(void *arg);
	void *then_arg;
};
int egress_apply_start(struct egress_job *j, int nsfd, const struct egress_rules *r, void (*then)(void *arg),
	void *then_arg);
int egress_apply_finish(struct egress_job *j, char *err, size_t errlen);
/* Wait until nsfd's namespace has an interface other than lo that is up
 * with an address (pasta configured it), at most timeout_ms; pidfd, when
 * >= 0, is the helper that configures it: its end fails the wait.  0 or -1. */
int egress_wait_link(int nsfd, int timeout_ms, int pidfd);
/* The first nameserver of a resolv.conf that is not a loopback address, in
 * out (numeric); NULL when there is none. */
const char *egress_resolver(const char *resolv_conf, char *out, size_t len);

#endif
