/* SPDX-License-Identifier: MIT */
/*
 * policy.c - host names and addresses as the egress policy sees them (see
 * policy.h): pure functions, no state, shared by every sandbox (one
 * sandbox's policy, events and grants are netpol.c's; their wiring to the
 * pool and the proxy is net.c's).  Why the IP-literal test is so wide: getaddrinfo() and
 * inet_aton() accept "2130706433", "0x7f.1" and "127.1" as 127.0.0.1, so a
 * host that merely "looks like a name" to a naive check would skip the
 * decide-on-a-name rule and reach an address chosen by the sandbox.
 */
#define _GNU_SOURCE
#include "policy.h"
#include "../common/names.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

/* ---- names --------------------------------------------------------------------- */

_Static_assert(POLICY_HOST_MAX == NAMES_HOST_MAX, "one host grammar: common/names.c");

enum policy_host policy_host_canon(const char *in, size_t len, char out[POLICY_HOST_MAX + 1])
{
	switch (names_host_canon(in, len, out)) {
	case NAMES_HOST_OK:
		return POLICY_HOST_OK;
	case NAMES_HOST_IP_LITERAL:
		return POLICY_HOST_IP_LITERAL;
	default:
		return POLICY_HOST_INVALID;
	}
}

bool policy_domain_match(const char *pattern, const char *host)
{
	size_t hl, pl;

	if (strncmp(pattern, "*.", 2))
		return !strcmp(pattern, host);
	pattern += 1; /* ".b.c" */
	hl = strlen(host);
	pl = strlen(pattern);
	return hl > pl && !strcmp(host + hl - pl, pattern);
}

bool policy_domains_match(char *const *patterns, size_t n, const char *host)
{
	for (size_t i = 0; i < n; i++)
		if (policy_domain_match(patterns[i], host))
			return true;
	return false;
}

const struct config_host *policy_hosts_find(const struct config_host *hosts, size_t n, const char *host)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(hosts[i].name, host))
			return &hosts[i];
	return NULL;
}

/* ---- addresses ------------------------------------------------------------------ */

static const char *const private4[] = {
	"0.0.0.0/8",       /* "this network", unspecified */
	"10.0.0.0/8",      /* RFC 1918 */
	"100.64.0.0/10",   /* shared address space (carrier-grade NAT) */
	"127.0.0.0/8",     /* loopback */
	"169.254.0.0/16",  /* link-local, with the 169.254.169.254 metadata service */
	"172.16.0.0/12",   /* RFC 1918 */
	"192.0.0.0/24",    /* IETF protocol assignments */
	"192.168.0.0/16",  /* RFC 1918 */
	"198.18.0.0/15",   /* benchmarking */
	"224.0.0.0/3",     /* multicast, reserved, broadcast */
	NULL,
};

static const char *const private6[] = {
	"::/96",          /* unspecified, loopback, IPv4-compatible (deprecated) */
	"::ffff:0:0/96",  /* IPv4-mapped */
	"64:ff9b::/96",   /* NAT64: an IPv4 address behind a translator */
	"64:ff9b:1::/48", /* local-use NAT64 */
	"100::/64",       /* discard */
	"2002::/16",      /* 6to4: an IPv4 address inside */
	"fc00::/7",       /* unique local */
	"fe80::/10",      /* link-local */
	"fec0::/10",      /* site-local (deprecated) */
	"ff00::/8",       /* multicast */
	NULL,
};

const char *const *policy_private_cidrs(int family)
{
	return family == 6 ? private6 : private4;
}

static bool in_cidr(const unsigned char *addr, const char *cidr, int family)
{
	unsigned char net[16];
	char text[64];
	const char *slash = strchr(cidr, '/');
	size_t n = (size_t)(slash - cidr);
	int bits = 0;

	memcpy(text, cidr, n);
	text[n] = '\0';
	for (const char *p = slash + 1; *p; p++)
		bits = bits * 10 + (*p - '0');
	if (inet_pton(family == 6 ? AF_INET6 : AF_INET, text, net) != 1)
		return false;
	for (int i = 0; bits > 0; i++, bits -= 8) {
		unsigned char mask = bits >= 8 ? 0xff : (unsigned char)(0xff << (8 - bits));
		if ((addr[i] & mask) != (net[i] & mask))
			return false;
	}
	return true;
}

static bool private_v4(const unsigned char *a)
{
	for (int i = 0; private4[i]; i++)
		if (in_cidr(a, private4[i], 4))
			return true;
	return false;
}

bool policy_addr_private(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return private_v4((const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr);
	if (sa->sa_family == AF_INET6) {
		const unsigned char *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		for (int i = 0; private6[i]; i++)
			if (in_cidr(a, private6[i], 6))
				return true;
		return false;
	}
	return true; /* anything else is never a public destination */
}
