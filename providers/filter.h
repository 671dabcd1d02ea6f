/* SPDX-License-Identifier: MIT */
/*
 * filter.h - the system-call policy of every sandbox sbxfs starts (seccomp):
 * one table (filter.c) that becomes the BPF filter of local sandboxes
 * (libseccomp) and the seccomp profile given to dockerd for docker and aio
 * containers, so the two never differ.
 *
 * The policy is Docker 20.10's default profile for a container without
 * capabilities, made stricter: every system call fails with EPERM unless it
 * is allowed; allowed is every call libseccomp knows, up to the newest one
 * the table was reviewed against, less the denied ones (mounts, namespaces,
 * keyrings, bpf, perf, ptrace, io_uring, NUMA policy, modules, ...).  Calls
 * newer than the review fail with ENOSYS (libc falls back, as under Docker),
 * clone3 with ENOSYS (libc falls back to clone, whose flags the filter can
 * see).  Sockets: only AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK, which are
 * all network-namespaced; every other family fails with EAFNOSUPPORT.
 *
 * Architectures: the native one and the 32-bit ABIs of the same machine
 * (x86 and x32 on x86-64, arm on aarch64); any other kills the process.
 * On x86, socketcall(2) cannot be filtered by family (its arguments are in
 * memory): socketcall(SYS_SOCKET) and (SYS_SOCKETPAIR) fail with
 * EAFNOSUPPORT, socket(2) itself is filtered like on x86-64.
 *
 * Thread-safe: both builders only read constant tables.
 */
#ifndef SBX_FILTER_H
#define SBX_FILTER_H

#include <stddef.h>

#include "../common/buf.h"

/* Build the filter and append its BPF program (struct sock_filter[]) to
 * out.  0, or -1 with err filled. */
int filter_build(struct buf *out, char *err, size_t errlen);

/* The same policy as a Docker seccomp profile (JSON text, for the Engine
 * API's HostConfig.SecurityOpt "seccomp=<profile>"), appended to out.
 * 0, or -1 with err filled. */
int filter_profile(struct buf *out, char *err, size_t errlen);

#endif
