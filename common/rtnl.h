/* SPDX-License-Identifier: MIT */
/*
 * rtnl.h - the few rtnetlink requests the daemon makes to wire a sandbox to
 * the open-mode gateway (providers/local_gw.c): a veth pair whose peer is
 * born in another network namespace, an IPv4 address, a link up, a default
 * route, a link deleted.
 *
 * Every call acts in the network namespace of the socket it is given
 * (rtnl_open() on the calling thread: use egress_in_netns() or netns_socket()
 * to reach another one); a socket serves one thread at a time.  Each request
 * is acknowledged before the call returns.  All return 0, or a negative
 * errno (the kernel's answer, e.g. -EEXIST for a name in use).
 */
#ifndef SBX_RTNL_H
#define SBX_RTNL_H

#include <stdint.h>

/* A NETLINK_ROUTE socket of the calling thread's namespace, or -errno. */
int rtnl_open(void);
/* A veth pair: `name` here with mtu, its peer `peer` created directly in
 * the namespace peer_nsfd refers to, with the same mtu.  Both down. */
int rtnl_veth_add(int sk, const char *name, const char *peer, int peer_nsfd, unsigned mtu);
/* Delete the link `name` of this namespace (a veth takes its peer along). */
int rtnl_link_del(int sk, const char *name);
/* Bring link ifindex up. */
int rtnl_link_up(int sk, int ifindex);
/* Add addr/prefix (IPv4, network byte order) to link ifindex. */
int rtnl_addr_add4(int sk, int ifindex, uint32_t addr, int prefix);
/* A default IPv4 route via gw (network byte order), on link ifindex. */
int rtnl_route_default4(int sk, int ifindex, uint32_t gw);
/* The same for IPv6 (addr 16 bytes, network order); the address is added
 * without duplicate address detection (it is usable at once: the link is a
 * point-to-point pair whose other end the daemon numbers itself). */
int rtnl_addr_add6(int sk, int ifindex, const unsigned char addr[16], int prefix);
int rtnl_route_default6(int sk, int ifindex, const unsigned char gw[16]);

#endif
