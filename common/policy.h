/* SPDX-License-Identifier: MIT */
/*
 * policy.h - host names and addresses as the egress policy sees them
 * (DESIGN §7, DeerFlow's managed egress, reference §7.1 and §7.3).
 *
 * Pure functions, no state, no lock, no I/O: the proxy calls them on its
 * event loop, the unit tests call them directly.
 *
 *   - a destination host is canonicalised (lower case, no trailing dot)
 *     and refused when it is not a DNS name or when it is an IP literal in
 *     any spelling inet_aton() or getaddrinfo() would accept ("127.1",
 *     "0x7f.1", "2130706433", "[::1]"), so that the policy is decided on a
 *     name before any DNS lookup;
 *   - allow_domains entries match by host only: "a.b" exactly, "*.b.c" any
 *     name below b.c but never b.c itself;
 *   - an address is "private" when it is loopback, private (RFC 1918, ULA),
 *     link-local (with the 169.254.169.254 metadata address), shared
 *     (100.64/10), multicast, reserved, unspecified or an IPv6 form that
 *     embeds one (v4-mapped, NAT64, 6to4).  Private addresses can never be
 *     approved; network.allow_private_destinations lifts the rule.  The
 *     documentation ranges (TEST-NET-1..3, 2001:db8::/32) are not private:
 *     they route nowhere on the internet, and the tests use them to stand
 *     for public hosts.  The same table feeds the nftables ruleset of
 *     open-mode sandboxes (policy_private_cidrs), so both paths agree.
 */
#ifndef SBX_NET_POLICY_H
#define SBX_NET_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "../common/config.h"

#define POLICY_HOST_MAX 253

enum policy_host {
	POLICY_HOST_OK = 0,
	POLICY_HOST_INVALID,    /* not a DNS name */
	POLICY_HOST_IP_LITERAL, /* an address, in any spelling */
};

/* Canonicalise the len bytes at in into out (lower case, trailing dot
 * removed).  Returns POLICY_HOST_OK, or why the host is refused. */
enum policy_host policy_host_canon(const char *in, size_t len, char out[POLICY_HOST_MAX + 1]);

/* Does pattern (an allow_domains entry: "a.b" or "*.b.c") match host
 * (canonical)? */
bool policy_domain_match(const char *pattern, const char *host);
/* Does any of the n patterns match host? */
bool policy_domains_match(char *const *patterns, size_t n, const char *host);

/* True when sa (AF_INET or AF_INET6) can never be reached without
 * network.allow_private_destinations. */
bool policy_addr_private(const struct sockaddr *sa);

/* The ranges policy_addr_private() refuses, as CIDR strings for nftables:
 * family 4 or 6; NULL-terminated. */
const char *const *policy_private_cidrs(int family);

/* network.hosts: the entry for host (canonical), or NULL. */
const struct config_host *policy_hosts_find(const struct config_host *hosts, size_t n, const char *host);

#endif
