/* SPDX-License-Identifier: MIT */
/*
 * idrange.h - does a range of host uids/gids that sbxfs hands to sandboxes
 * collide with anything else on the host: an account or a group (NSS:
 * getpwent/getgrent), or a subordinate range in /etc/subuid or /etc/subgid
 * (the ids a user's own user namespaces map, rootless containers above all)?
 * A sandbox that runs as such a uid could reach that account's files and
 * processes, and the other way round.
 */
#ifndef SBX_IDRANGE_H
#define SBX_IDRANGE_H

#include <stddef.h>
#include <sys/types.h>

/* 0 when [base, base + count) is free; 1 with one line naming the first
 * conflict in err.  subuid and subgid are file paths (missing files are
 * empty).  Not thread-safe (getpwent): call at start. */
int idrange_conflict(unsigned long base, unsigned long count, const char *subuid, const char *subgid, char *err,
	size_t errlen);

#endif
