/* SPDX-License-Identifier: MIT */
/*
 * egress.c - nftables rules inside a sandbox's network namespace (see
 * egress.h).  Why nftables through libnftables and not a filter of our own
 * (seccomp on connect, an LD_PRELOAD, a userspace NAT): the kernel applies
 * the rules to every packet of every socket type, whatever the sandbox runs,
 * and the sandbox cannot touch them without CAP_NET_ADMIN in the host's user
 * namespace.  The ruleset is text, so what is installed is exactly what
 * `nft list ruleset` shows in docs/network.md.
 */
#define _GNU_SOURCE
#include "egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <nftables/libnftables.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "policy.h"

struct ns_call {
	int nsfd;
	int (*fn)(void *arg);
	void *arg;
	int result;
	int err;
};

static void *ns_thread(void *p)
{
	struct ns_call *c = p;

	if (setns(c->nsfd, CLONE_NEWNET)) {
		c->result = -1;
		c->err = errno;
		return NULL;
	}
	errno = 0;
	c->result = c->fn(c->arg);
	c->err = errno;
	return NULL;
}

int egress_in_netns(int nsfd, int (*fn)(void *arg), void *arg)
{
	struct ns_call c = { .nsfd = nsfd, .fn = fn, .arg = arg };
	pthread_t t;
	int e;

	/* a thread of its own: setns() changes only the calling thread, and
	 * this one ends right after, so no other work runs in the namespace */
	e = pthread_create(&t, NULL, ns_thread, &c);
	if (e) {
		errno = e;
		return -1;
	}
	pthread_join(t, NULL);
	errno = c.err;
	return c.result;
}

/* ---- the ruleset ----------------------------------------------------------------- */

static int add_set(struct buf *b, const char *name, const char *type, bool interval, const char *const *elems,
	size_t n)
{
	int e = 0;

	if (!n)
		return 0;
	e |= buf_addf(b, "\tset %s {\n\t\ttype %s\n%s\t\telements = { ", name, type, interval ? "\t\tflags interval\n" : "");
	for (size_t i = 0; i < n; i++)
		e |= buf_addf(b, "%s%s", i ? ", " : "", elems[i]);
	e |= buf_adds(b, " }\n\t}\n");
	return e;
}

/* The host's own addresses (but loopback): a sandbox reaching one would
 * reach the host's services on it. */
static void host_addrs(char (*v4)[INET6_ADDRSTRLEN], size_t *n4, char (*v6)[INET6_ADDRSTRLEN], size_t *n6,
	size_t max)
{
	struct ifaddrs *ifa = NULL;

	*n4 = *n6 = 0;
	if (getifaddrs(&ifa))
		return;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr || (i->ifa_flags & IFF_LOOPBACK))
			continue;
		if (i->ifa_addr->sa_family == AF_INET && *n4 < max)
			inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, v4[(*n4)++], INET6_ADDRSTRLEN);
		else if (i->ifa_addr->sa_family == AF_INET6 && *n6 < max)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, v6[(*n6)++],
				INET6_ADDRSTRLEN);
	}
	freeifaddrs(ifa);
}

#define EGRESS_HOST_ADDRS 64

int egress_ruleset(const struct egress_rules *r, struct buf *b)
{
	const char *const *p4 = policy_private_cidrs(4), *const *p6 = policy_private_cidrs(6);
	char (*h4)[INET6_ADDRSTRLEN] = NULL, (*h6)[INET6_ADDRSTRLEN] = NULL;
	const char *e4[EGRESS_HOST_ADDRS], *e6[EGRESS_HOST_ADDRS];
	size_t n4 = 0, n6 = 0, np4 = 0, np6 = 0;
	unsigned char bin[16];
	int e = 0;

	/* delete what a previous attempt left, then define the table whole; a
	 * namespace made a moment ago has nothing to delete (and nobody in it
	 * can add a table: no process there has CAP_NET_ADMIN) */
	if (!r->fresh)
		e |= buf_adds(b, "add table inet sbxfs\ndelete table inet sbxfs\n");
	e |= buf_adds(b, "table inet sbxfs {\n");
	if (r->mode == NET_OPEN && !r->allow_private) {
		h4 = calloc(EGRESS_HOST_ADDRS, sizeof(*h4));
		h6 = calloc(EGRESS_HOST_ADDRS, sizeof(*h6));
		if (!h4 || !h6) {
			e = -1;
			goto out;
		}
		host_addrs(h4, &n4, h6, &n6, EGRESS_HOST_ADDRS);
		for (size_t i = 0; i < n4; i++)
			e4[i] = h4[i];
		for (size_t i = 0; i < n6; i++)
			e6[i] = h6[i];
		while (p4[np4])
			np4++;
		while (p6[np6])
			np6++;
		e |= add_set(b, "private4", "ipv4_addr", true, p4, np4);
		e |= add_set(b, "private6", "ipv6_addr", true, p6, np6);
		e |= add_set(b, "host4", "ipv4_addr", false, e4, n4);
	e |= add_set(b, "private6", "ipv6_addr", true, p6, np6);
	e |= add_set(b, "host6", "ipv6_addr", false, e6, n6);
		e |= add_set(b, "host6", "ipv6_addr", false, e6, n6);
	}
	e |= buf_adds(b, "\tchain output {\n\t\ttype filter hook output priority 0; policy accept;\n"
			 "\t\toif \"lo\" accept\n");
	if (r->mode == NET_OPEN && !r->allow_private) {
		/* IPv6 neighbour discovery towards the gateway pasta answers as */
		e |= buf_adds(b, "\t\ticmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit } accept\n");
		if (r->dns && inet_pton(AF_INET, r->dns, bin) == 1)
			e |= buf_addf(b, "\t\tip daddr %s meta l4proto { tcp, udp } th dport 53 accept\n", r->dns);
		else if (r->dns && inet_pton(AF_INET6, r->dns, bin) == 1)
			e |= buf_addf(b, "\t\tip6 daddr %s meta l4proto { tcp, udp } th dport 53 accept\n", r->dns);
		e |= buf_adds(b, "\t\tip daddr @private4 meta l4proto tcp reject with tcp reset\n"
				 "\t\tip daddr @private4 reject with icmpx admin-prohibited\n"
				 "\t\tip6 daddr @private6 meta l4proto tcp reject with tcp reset\n"
				 "\t\tip6 daddr @private6 reject with icmpx admin-prohibited\n");
		if (n4)
			e |= buf_adds(b, "\t\tip daddr @host4 meta l4proto tcp reject with tcp reset\n"
					 "\t\tip daddr @host4 reject with icmpx admin-prohibited\n");
		if (n6)
			e |= buf_adds(b, "\t\tip6 daddr @host6 meta l4proto tcp reject with tcp reset\n"
					 "\t\tip6 daddr @host6 reject with icmpx admin-prohibited\n");
	} else if (r->mode != NET_OPEN) {
		e |= buf_adds(b, "\t\tmeta l4proto tcp reject with tcp reset\n\t\treject with icmpx admin-prohibited\n");
	}
	e |= buf_adds(b, "\t}\n}\n");
out:
	free(h4);
	free(h6);
	return e ? -1 : 0;
}

int egress_gateway_ruleset(const struct egress_gw *g, struct buf *b)
{
	const char *const *p4 = policy_private_cidrs(4), *const *p6 = policy_private_cidrs(6);
	char (*h4)[INET6_ADDRSTRLEN] = calloc(EGRESS_HOST_ADDRS, sizeof(*h4));
	char (*h6)[INET6_ADDRSTRLEN] = calloc(EGRESS_HOST_ADDRS, sizeof(*h6));
	const char *e4[EGRESS_HOST_ADDRS], *e6[EGRESS_HOST_ADDRS];
	size_t n4 = 0, n6 = 0, np4 = 0, np6 = 0;
	unsigned char bin[4], bin6[16];
	int e = 0;

	if (!h4 || !h6) {
		e = -1;
		goto out;
	}
	host_addrs(h4, &n4, h6, &n6, EGRESS_HOST_ADDRS);
	for (size_t i = 0; i < n4; i++)
		e4[i] = h4[i];
	for (size_t i = 0; i < n6; i++)
		e6[i] = h6[i];
	while (p4[np4])
		np4++;
	while (p6[np6])
		np6++;
	if (!g->subnet6)
		n6 = np6 = 0;
	/* replaced whole: an adopted gateway gets the ruleset of this binary */
	e |= buf_adds(b, "add table inet sbxfs\ndelete table inet sbxfs\ntable inet sbxfs {\n");
	e |= add_set(b, "private4", "ipv4_addr", true, p4, np4);
	e |= add_set(b, "host4", "ipv4_addr", false, e4, n4);
	e |= add_set(b, "private6", "ipv6_addr", true, p6, np6);
	e |= add_set(b, "host6", "ipv6_addr", false, e6, n6);
	e |= buf_adds(b, "\tset dns4 {\n\t\ttype ipv4_addr\n");
	if (g->dns && inet_pton(AF_INET, g->dns, bin) == 1)
		e |= buf_addf(b, "\t\telements = { %s }\n", g->dns);
	e |= buf_adds(b, "\t}\n");
	if (g->subnet6) {
		e |= buf_adds(b, "\tset dns6 {\n\t\ttype ipv6_addr\n");
		if (g->dns && inet_pton(AF_INET6, g->dns, bin6) == 1)
			e |= buf_addf(b, "\t\telements = { %s }\n", g->dns);
		e |= buf_adds(b, "\t}\n");
	}
	/* sandbox to sandbox is refused first (also an answer: nothing between
	 * two veths is ever established); then only what a sandbox started
	 * comes back in */
	e |= buf_addf(b, "\tchain forward {\n\t\ttype filter hook forward priority 0; policy drop;\n"
			 "\t\tiifname \"%s*\" oifname \"%s*\" reject with icmpx admin-prohibited\n"
			 "\t\tct state established,related accept\n"
			 "\t\tiifname != \"%s*\" drop\n"
			 "\t\tip saddr != %s drop\n"
			 "\t\tip daddr @dns4 meta l4proto { tcp, udp } th dport 53 accept\n"
			 "\t\tip saddr %s ip daddr @private4 meta l4proto tcp reject with tcp reset\n"
			 "\t\tip saddr %s ip daddr @private4 reject with icmpx admin-prohibited\n",
		g->ifprefix, g->ifprefix, g->ifprefix, g->subnet, g->strict, g->strict);
	if (n4)
		e |= buf_addf(b, "\t\tip saddr %s ip daddr @host4 meta l4proto tcp reject with tcp reset\n"
				 "\t\tip saddr %s ip daddr @host4 reject with icmpx admin-prohibited\n",
			g->strict, g->strict);
	e |= buf_addf(b, "\t\tip saddr %s accept\n", g->subnet);
	if (g->subnet6) {
		e |= buf_addf(b, "\t\tip6 saddr != %s drop\n"
				 "\t\tip6 daddr @dns6 meta l4proto { tcp, udp } th dport 53 accept\n", g->subnet6);
		if (np6)
			e |= buf_addf(b, "\t\tip6 saddr %s ip6 daddr @private6 meta l4proto tcp reject with tcp reset\n"
					 "\t\tip6 saddr %s ip6 daddr @private6 reject with icmpx admin-prohibited\n",
				g->strict6, g->strict6);
		if (n6)
			e |= buf_addf(b, "\t\tip6 saddr %s ip6 daddr @host6 meta l4proto tcp reject with tcp reset\n"
					 "\t\tip6 saddr %s ip6 daddr @host6 reject with icmpx admin-prohibited\n",
				g->strict6, g->strict6);
		e |= buf_addf(b, "\t\tip6 saddr %s accept\n", g->subnet6);
	}
	e |= buf_adds(b, "\t}\n");
	/* the gateway's own addresses (its veth ends, the host address pasta
	 * copied) serve nothing: a sandbox reaches none of them */
	e |= buf_adds(b, "\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n");
	if (g->subnet6) /* but a sandbox must find its gateway's IPv6 neighbour */
		e |= buf_addf(b, "\t\tiifname \"%s*\" icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept\n",
			g->ifprefix);
	e |= buf_addf(b, "\t\tiifname \"%s*\" drop\n\t}\n", g->ifprefix);
	e |= buf_addf(b, "\tchain postrouting {\n\t\ttype nat hook postrouting priority 100; policy accept;\n"
			 "\t\tip saddr %s oifname != \"%s*\" masquerade\n", g->subnet, g->ifprefix);
	if (g->subnet6)
		e |= buf_addf(b, "\t\tip6 saddr %s oifname != \"%s*\" masquerade\n", g->subnet6, g->ifprefix);
	e |= buf_adds(b, "\t}\n}\n");
out:
	free(h4);
	free(h6);
	return e ? -1 : 0;
}

static pthread_mutex_t nft_lock = PTHREAD_MUTEX_INITIALIZER;

struct nft_call {
	const char *text;
	char *err;
	size_t errlen;
};

static int nft_apply_here(void *arg)
{
	struct nft_call *c = arg;
	struct nft_ctx *ctx;
	int r = -1;

	pthread_mutex_lock(&nft_lock);
	ctx = nft_ctx_new(NFT_CTX_DEFAULT);
	if (!ctx) {
		snprintf(c->err, c->errlen, "libnftables: cannot create a context");
	} else {
		nft_ctx_buffer_output(ctx);
		nft_ctx_buffer_error(ctx);
		r = nft_run_cmd_from_buffer(ctx, c->text) ? -1 : 0;
		if (r) {
			const char *msg = nft_ctx_get_error_buffer(ctx);
			snprintf(c->err, c->errlen, "nftables: %s", msg && *msg ? msg : "the ruleset was refused");
			for (char *p = c->err; *p; p++)
				if (*p == '\n')
					*p = ' ';
		}
		nft_ctx_free(ctx);
	}
	pthread_mutex_unlock(&nft_lock);
	return r;
}

static void *egress_job_main(void *p)
{
	struct egress_job *j = p;

	if (setns(j->nsfd, CLONE_NEWNET)) {
		snprintf(j->err, sizeof(j->err), "cannot enter the sandbox's network namespace: %s", strerror(errno));
		j->result = -1;
		return NULL;
	}
	j->result = nft_apply_here(&(struct nft_call){ .text = buf_str(&j->text), .err = j->err, .errlen = sizeof(j->err) });
	if (!j->result && j->then)
		j->then(j->then_arg);
	return NULL;
}

int egress_apply_start(struct egress_job *j, int nsfd, const struct egress_rules *r, void (*then)(void *arg),
	void *then_arg)
{
	int e;

	memset(j, 0, sizeof(*j));
	j->then = then;
	j->then_arg = then_arg;
	buf_init(&j->text, 64 * 1024);
	j->nsfd = nsfd;
	j->result = -1;
	snprintf(j->err, sizeof(j->err), "out of memory");
	if (egress_ruleset(r, &j->text))
		return 0; /* finish reports it */
	/* a thread of its own: setns() changes only the calling thread, and
	 * this one ends right after, so no other work runs in the namespace */
	e = pthread_create(&j->thread, NULL, egress_job_main, j);
	if (e) {
		snprintf(j->err, sizeof(j->err), "cannot start a thread: %s", strerror(e));
		return 0;
	}
	j->running = true;
	return 0;
}

int egress_apply_finish(struct egress_job *j, char *err, size_t errlen)
{
	if (j->running)
		pthread_join(j->thread, NULL);
	j->running = false;
	if (j->result)
		snprintf(err, errlen, "%s", j->err);
	buf_free(&j->text);
	return j->result;
}

int egress_apply(int nsfd, const struct egress_rules *r, char *err, size_t errlen)
{
	struct egress_job j;

	egress_apply_start(&j, nsfd, r, NULL, NULL);
	return egress_apply_finish(&j, err, errlen);
}

struct text_call {
	const char *text;
	char *err;
	size_t errlen;
};

static int apply_text_here(void *arg)
{
	struct text_call *t = arg;

	return nft_apply_here(&(struct nft_call){ .text = t->text, .err = t->err, .errlen = t->errlen });
}

int egress_apply_text(int nsfd, const char *text, char *err, size_t errlen)
{
	struct text_call t = { text, err, errlen };
	int r;

	err[0] = '\0';
	r = egress_in_netns(nsfd, apply_text_here, &t);

	if (r < 0 && errno && !err[0])
		snprintf(err, errlen, "cannot enter the namespace: %s", strerror(errno));
	return r < 0 ? -1 : 0;
}

/* ---- waiting for the link --------------------------------------------------------- */

/* Does the calling thread's namespace have a default route in the
 * routing table of this /proc/thread-self/net file (route: IPv4, dest and
 * mask 00000000; ipv6_route: ::/0)? */
static bool default_route(const char *file, bool v6)
{
	char path[64], line[512];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/thread-self/net/%s", file);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char dest[40], plen[40], mask[16];
		if (v6)
			found = sscanf(line, "%39s %39s", dest, plen) == 2 &&
				!strcmp(dest, "00000000000000000000000000000000") && !strcmp(plen, "00");
		else
			found = sscanf(line, "%*s %39s %*s %*s %*s %*s %*s %15s", dest, mask) == 2 &&
				!strcmp(dest, "00000000") && !strcmp(mask, "00000000");
	}
	fclose(f);
	return found;
}

/* pasta has configured the namespace: an interface other than lo is up
 * with an address, and the default route of that family is there (pasta
 * adds the route after the address: a sandbox handed out in between could
 * not connect anywhere). */
static int link_ready(void *arg)
{
	struct ifaddrs *ifa = NULL;
	bool v4 = false, v6 = false;

	(void)arg;
	if (getifaddrs(&ifa))
		return 0;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr || (i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP))
			continue;
		if (i->ifa_addr->sa_family == AF_INET)
			v4 = true;
		else if (i->ifa_addr->sa_family == AF_INET6 &&
			 !IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
			v6 = true;
	}
	freeifaddrs(ifa);
	return (v4 && default_route("route", false)) || (v6 && default_route("ipv6_route", true));
}

/* One thread for the whole wait: it has joined the namespace once. */
struct wait_call {
	int timeout_ms;
	int pidfd;
};

/* A socket that becomes readable whenever a link or an address of the
 * calling thread's namespace changes (its messages are only a wake-up:
 * link_ready() reads the state), or -1. */
static int link_events(void)
{
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK,
		.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR };
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);

	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void drain(int fd)
{
	char junk[8192];

	while (recv(fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
		;
}

static int wait_here(void *arg)
{
	struct wait_call *w = arg;
	uint64_t deadline = util_now_ms() + (uint64_t)w->timeout_ms;
	/* subscribed before the first look, so no change falls between them;
	 * without it (no netlink), a look every 5 ms */
	int ev = link_events(), r = -1;

	for (;;) {
		struct pollfd p[2] = { { .fd = w->pidfd, .events = POLLIN }, { .fd = ev, .events = POLLIN } };
		uint64_t now = util_now_ms();
		int left = now < deadline ? (int)(deadline - now) : 0;

		if (link_ready(NULL)) {
			r = 0;
			break;
		}
		if (!left) {
			errno = ETIMEDOUT;
			break;
		}
		if (poll(p, 2, ev >= 0 ? left : (left < 5 ? left : 5)) < 0 && errno != EINTR)
			break;
		if (p[0].revents) {
			errno = ECHILD; /* the helper ended */
			break;
		}
		if (p[1].revents)
			drain(ev);
	}
	if (ev >= 0) {
		int saved = errno;
		close(ev);
		errno = saved;
	}
	return r;
}

int egress_wait_link(int nsfd, int timeout_ms, int pidfd)
{
	struct wait_call w = { timeout_ms, pidfd };

	return egress_in_netns(nsfd, wait_here, &w);
}

const char *egress_resolver(const char *resolv_conf, char *out, size_t len)
{
	struct buf b = BUF_INIT(64 * 1024);
	const char *found = NULL;
	unsigned char bin[16];

	if (util_read_file(resolv_conf, &b) || !b.len) {
		buf_free(&b);
		return NULL;
	}
	for (char *line = b.ptr, *next; line && !found; line = next) {
		char addr[INET6_ADDRSTRLEN + 1];

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (sscanf(line, " nameserver %46s", addr) != 1)
			continue;
		if (inet_pton(AF_INET, addr, bin) == 1 && bin[0] != 127 && (size_t)snprintf(out, len, "%s", addr) < len)
			found = out;
		else if (inet_pton(AF_INET6, addr, bin) == 1 && !IN6_IS_ADDR_LOOPBACK((struct in6_addr *)bin) &&
			 (size_t)snprintf(out, len, "%s", addr) < len)
			found = out;
	}
	buf_free(&b);
	return found;
}
