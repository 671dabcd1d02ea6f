/* SPDX-License-Identifier: MIT */
/*
 * netns.h - sockets that live in another network namespace.
 *
 * A socket belongs to the network namespace of the thread that created it,
 * for its whole life: once made, it can be used (connect, send, poll) from
 * any thread of the daemon, which itself stays in the host's namespace.  So
 * the daemon reaches a container's loopback-only HTTP API, or an abstract
 * unix socket bound inside a container, without publishing any port: a
 * short-lived helper thread setns()es into the container's namespace,
 * creates the socket and exits.  Abstract unix socket names are looked up in
 * the namespace of the socket, so a connect() on such a socket reaches the
 * container's abstract names, never the host's.
 *
 * Needs CAP_SYS_ADMIN (the daemon runs as root).  Thread-safe.
 */
#ifndef SBX_NETNS_H
#define SBX_NETNS_H

#include <sys/types.h>

/* socket(domain, type | SOCK_CLOEXEC, protocol) created inside the network
 * namespace nsfd refers to (an fd on /proc/PID/ns/net).  Returns the new fd,
 * or -1 with errno (setns or socket failure, or EAGAIN when no thread can be
 * started). */
int netns_socket(int nsfd, int domain, int type, int protocol);

/* An fd on the network namespace of host process pid, checked against pid
 * reuse: the process must still have start time `start` (util_proc_starttime)
 * after the namespace was opened.  -1 with errno (ESRCH when it is gone). */
int netns_open_pid(pid_t pid, unsigned long long start);

#endif
