/* SPDX-License-Identifier: MIT */
/*
 * filter.h - the system-call filter of local sandboxes (seccomp, built with
 * libseccomp), on the model of Docker's default profile: everything is
 * allowed but what lets a sandbox widen its view of the kernel or of other
 * processes (new user namespaces, mounts, keyrings, bpf, perf, ptrace,
 * modules, kexec, ...), which fails with EPERM (clone3 with ENOSYS, so libc
 * falls back to clone, whose flags the filter can see).
 *
 * The filter is compiled once to classic BPF; bubblewrap loads it for a
 * sandbox's init (--seccomp FD) and sbxfs-exec for every job (a process
 * that enters with setns() does not inherit the init's filter).
 */
#ifndef SBX_FILTER_H
#define SBX_FILTER_H

#include <stddef.h>

#include "../common/buf.h"

/* Build the filter and append its BPF program (struct sock_filter[]) to
 * out.  0, or -1 with err filled. */
int filter_build(struct buf *out, char *err, size_t errlen);

#endif
