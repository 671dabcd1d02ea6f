/* SPDX-License-Identifier: MIT */
/*
 * rtnl.c - rtnetlink requests (see rtnl.h).  Why not `ip` in a child: a
 * sandbox create would pay a fork and an exec per step (six of them), and
 * why not libmnl: these are five fixed messages built with the kernel's own
 * NLMSG/RTA macros, and the daemon already speaks netlink (egress.c).  Each
 * message is sent with NLM_F_ACK and its answer read at once: the answer is
 * the kernel's errno, or 0.
 */
#define _GNU_SOURCE
#include "rtnl.h"

#include <errno.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RTNL_BUF 1024

struct rtnl_msg {
	struct nlmsghdr *h;
	char buf[RTNL_BUF] __attribute__((aligned(NLMSG_ALIGNTO)));
	int overflow;
};

static void *msg_init(struct rtnl_msg *m, uint16_t type, uint16_t flags, size_t body)
{
	memset(m->buf, 0, sizeof(m->buf));
	m->overflow = 0;
	m->h = (struct nlmsghdr *)m->buf;
	m->h->nlmsg_len = (uint32_t)NLMSG_LENGTH(body);
	m->h->nlmsg_type = type;
	m->h->nlmsg_flags = (uint16_t)(NLM_F_REQUEST | NLM_F_ACK | flags);
	m->h->nlmsg_seq = 1;
	return NLMSG_DATA(m->h);
}

/* Append an attribute; returns it (for nesting) or NULL on overflow. */
static struct rtattr *attr_add(struct rtnl_msg *m, uint16_t type, const void *data, size_t len)
{
	size_t at = NLMSG_ALIGN(m->h->nlmsg_len);
	struct rtattr *a;

	if (at + RTA_SPACE(len) > sizeof(m->buf)) {
		m->overflow = 1;
		return NULL;
	}
	a = (struct rtattr *)(m->buf + at);
	a->rta_type = type;
	a->rta_len = (unsigned short)RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(a), data, len);
	m->h->nlmsg_len = (uint32_t)(at + RTA_SPACE(len));
	return a;
}

static void attr_end(struct rtnl_msg *m, struct rtattr *nest)
{
	if (nest)
		nest->rta_len = (unsigned short)(m->buf + m->h->nlmsg_len - (char *)nest);
}

/* Send m and read its acknowledgement: 0 or -errno. */
static int msg_talk(int sk, struct rtnl_msg *m)
{
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	char ans[RTNL_BUF] __attribute__((aligned(NLMSG_ALIGNTO)));
	ssize_t n;

	if (m->overflow)
		return -EMSGSIZE;
	if (sendto(sk, m->buf, m->h->nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0)
		return -errno;
	for (;;) {
		n = recv(sk, ans, sizeof(ans), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		for (struct nlmsghdr *h = (struct nlmsghdr *)ans; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type == NLMSG_ERROR && h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct nlmsgerr)))
				return ((struct nlmsgerr *)NLMSG_DATA(h))->error; /* 0 is the ack */
		}
	}
}

int rtnl_open(void)
{
	struct sockaddr_nl me = { .nl_family = AF_NETLINK };
	int sk = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);

	if (sk < 0)
		return -errno;
	if (bind(sk, (struct sockaddr *)&me, sizeof(me))) {
		int e = -errno;
		close(sk);
		return e;
	}
	return sk;
}

int rtnl_veth_add(int sk, const char *name, const char *peer, int peer_nsfd, unsigned mtu)
{
	struct rtnl_msg m;
	struct rtattr *linkinfo, *data, *peerinfo;
	uint32_t fd = (uint32_t)peer_nsfd;

	msg_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, sizeof(struct ifinfomsg));
	attr_add(&m, IFLA_IFNAME, name, strlen(name) + 1);
	attr_add(&m, IFLA_MTU, &mtu, sizeof(mtu));
	linkinfo = attr_add(&m, IFLA_LINKINFO, NULL, 0);
	attr_add(&m, IFLA_INFO_KIND, "veth", 4);
	data = attr_add(&m, IFLA_INFO_DATA, NULL, 0);
	peerinfo = attr_add(&m, VETH_INFO_PEER, NULL, 0);
	/* the peer's attributes follow its own struct ifinfomsg */
	if (peerinfo && NLMSG_ALIGN(m.h->nlmsg_len) + sizeof(struct ifinfomsg) <= sizeof(m.buf))
		m.h->nlmsg_len = (uint32_t)(NLMSG_ALIGN(m.h->nlmsg_len) + sizeof(struct ifinfomsg));
	else
		m.overflow = 1;
	attr_add(&m, IFLA_IFNAME, peer, strlen(peer) + 1);
	attr_add(&m, IFLA_MTU, &mtu, sizeof(mtu));
	attr_add(&m, IFLA_NET_NS_FD, &fd, sizeof(fd));
	attr_end(&m, peerinfo);
	attr_end(&m, data);
	attr_end(&m, linkinfo);
	return msg_talk(sk, &m);
}

int rtnl_link_del(int sk, const char *name)
{
	struct rtnl_msg m;

	msg_init(&m, RTM_DELLINK, 0, sizeof(struct ifinfomsg));
	attr_add(&m, IFLA_IFNAME, name, strlen(name) + 1);
	return msg_talk(sk, &m);
}

int rtnl_link_up(int sk, int ifindex)
{
	struct rtnl_msg m;
	struct ifinfomsg *ifi = msg_init(&m, RTM_NEWLINK, 0, sizeof(struct ifinfomsg));

	ifi->ifi_index = ifindex;
	ifi->ifi_flags = IFF_UP;
	ifi->ifi_change = IFF_UP;
	return msg_talk(sk, &m);
}

int rtnl_addr_add4(int sk, int ifindex, uint32_t addr, int prefix)
{
	struct rtnl_msg m;
	struct ifaddrmsg *ifa = msg_init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, sizeof(struct ifaddrmsg));

	ifa->ifa_family = AF_INET;
	ifa->ifa_prefixlen = (unsigned char)prefix;
	ifa->ifa_scope = RT_SCOPE_UNIVERSE;
	ifa->ifa_index = (unsigned)ifindex;
	attr_add(&m, IFA_LOCAL, &addr, sizeof(addr));
	attr_add(&m, IFA_ADDRESS, &addr, sizeof(addr));
	return msg_talk(sk, &m);
}

int rtnl_route_default4(int sk, int ifindex, uint32_t gw)
{
	struct rtnl_msg m;
	struct rtmsg *rt = msg_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, sizeof(struct rtmsg));
	uint32_t oif = (uint32_t)ifindex;

	rt->rtm_family = AF_INET;
	rt->rtm_table = RT_TABLE_MAIN;
	rt->rtm_protocol = RTPROT_BOOT;
	rt->rtm_scope = RT_SCOPE_UNIVERSE;
	rt->rtm_type = RTN_UNICAST;
	attr_add(&m, RTA_GATEWAY, &gw, sizeof(gw));
	attr_add(&m, RTA_OIF, &oif, sizeof(oif));
	return msg_talk(sk, &m);
}

int rtnl_addr_add6(int sk, int ifindex, const unsigned char addr[16], int prefix)
{
	struct rtnl_msg m;
	struct ifaddrmsg *ifa = msg_init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, sizeof(struct ifaddrmsg));
	uint32_t flags = IFA_F_NODAD;

	ifa->ifa_family = AF_INET6;
	ifa->ifa_prefixlen = (unsigned char)prefix;
	ifa->ifa_flags = IFA_F_NODAD;
	ifa->ifa_scope = RT_SCOPE_UNIVERSE;
	ifa->ifa_index = (unsigned)ifindex;
	attr_add(&m, IFA_LOCAL, addr, 16);
	attr_add(&m, IFA_ADDRESS, addr, 16);
	attr_add(&m, IFA_FLAGS, &flags, sizeof(flags));
	return msg_talk(sk, &m);
}

int rtnl_route_default6(int sk, int ifindex, const unsigned char gw[16])
{
	struct rtnl_msg m;
	struct rtmsg *rt = msg_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, sizeof(struct rtmsg));
	uint32_t oif = (uint32_t)ifindex;

	rt->rtm_family = AF_INET6;
	rt->rtm_table = RT_TABLE_MAIN;
	rt->rtm_protocol = RTPROT_BOOT;
	rt->rtm_scope = RT_SCOPE_UNIVERSE;
	rt->rtm_type = RTN_UNICAST;
	attr_add(&m, RTA_GATEWAY, gw, 16);
	attr_add(&m, RTA_OIF, &oif, sizeof(oif));
	return msg_talk(sk, &m);
}
