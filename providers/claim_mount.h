/* SPDX-License-Identifier: MIT */
/*
 * claim_mount.h - attaching a thread's directories to a running spare
 * (pool.prewarm, providers/spares.h), shared by the providers whose
 * sandboxes see host directories through their own mount namespace: the
 * local provider (local_claim.c: a bubblewrap sandbox) and the docker
 * provider (container.c: a container).  What a create puts on the
 * sandbox's command line (binds, hostname) is done to the running sandbox
 * instead, by the daemon (root), through the namespaces of its init.
 */
#ifndef SBX_CLAIM_MOUNT_H
#define SBX_CLAIM_MOUNT_H

#include <stdbool.h>
#include <sys/types.h>

#include "../common/err.h"

#define CLAIM_MOUNT_MAX 8

/* One host directory (or file) to attach at target, a path of the
 * sandbox's own view. */
struct claim_mount {
	const char *src, *target;
	bool ro;
};

/* Clone each m[i].src as a detached mount tree (open_tree(OPEN_TREE_CLONE |
 * AT_RECURSIVE)) with the flags a create gives it (read-only when ro, plus
 * nosuid and nodev when nosuid: mount_setattr), then, in a child that
 * setns()es into the mount and uts namespaces of init (its mount namespace
 * checked against mntns when that is not 0, so a recycled pid is never
 * entered) and chroot()s into the init's root (targets are paths of
 * the init's own view), move_mount() every tree onto its target and set
 * hostname.  The
 * daemon's own namespace never changes (a multi-threaded process cannot
 * setns into a mount namespace); a sandbox's seccomp filter, which forbids
 * all of these, binds only its own processes.  SBX_OK, SBX_ERR_GONE (init
 * is gone) or SBX_ERR_IO, logged under scope with who ("local", "docker"). */
enum sbx_err claim_mount_attach(pid_t init, unsigned long long mntns, const struct claim_mount *m, int n, bool nosuid,
	const char *hostname, const char *scope, const char *who);

#endif
