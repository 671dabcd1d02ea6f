/* SPDX-License-Identifier: MIT */
/*
 * local_etc.h - the /etc that local sandboxes see: not the host's, but a
 * read-only copy of what programs need from it, made under state_dir at
 * every start, and a passwd and group of each sandbox's own.
 *
 * Never in it: shadow, gshadow, sudoers, ssh host keys, private keys,
 * sbxfs's own configuration, or anything the host does not let every user
 * read.  A sandbox with local.rootfs brings its own /etc and gets none of
 * this.
 */
#ifndef SBX_LOCAL_ETC_H
#define SBX_LOCAL_ETC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Copy the allowed entries of the host's /etc into state_dir/sandbox-etc
 * (in place: sandboxes that already bind it see updates).  Returns 0 or -1
 * with err filled. */
int etc_build(const char *state_dir, char *err, size_t errlen);
/* state_dir/sandbox-etc (valid after etc_build). */
const char *etc_dir(void);
/* Directories of the host's /etc bound read-only over the copy (relative
 * to /etc, NULL-terminated): public, package-managed symlink farms. */
const char *const *etc_bound(void);
/* thread_dir/etc/{passwd,group}: root, nobody and the sandbox's account
 * (name, uid, gid).  host_account: the uid is a host account's (`users:`),
 * whose group keeps its host name; otherwise no name service is asked (a
 * lookup through NSS costs dozens of system calls on the claim path, and a
 * uid of the provider's range has no host group).  0 or -1 with errno. */
int etc_write_identity(const char *thread_dir, const char *name, uid_t uid, gid_t gid, bool host_account);

#endif
