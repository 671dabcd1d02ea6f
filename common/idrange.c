/* SPDX-License-Identifier: MIT */
/*
 * idrange.c - uid/gid range conflicts (see idrange.h).
 *
 * The range is used for uids and, with the same numbers, for gids, so it
 * is checked against accounts, groups, /etc/subuid and /etc/subgid.
 */
#define _GNU_SOURCE
#include "idrange.h"

#include <grp.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool idrange_overlap(unsigned long base, unsigned long count, unsigned long start, unsigned long n)
{
	return n && start < base + count && base < start + n;
}

static int idrange_accounts(unsigned long base, unsigned long count, char *err, size_t errlen)
{
	struct passwd *pw;
	struct group *gr;
	int r = 0;

	setpwent();
	while (!r && (pw = getpwent()))
		if (idrange_overlap(base, count, pw->pw_uid, 1)) {
			snprintf(err, errlen, "local.uid_base: uids %lu..%lu overlap the account '%s' (uid %u)", base,
				base + count - 1, pw->pw_name, (unsigned)pw->pw_uid);
			r = 1;
		}
	endpwent();
	setgrent();
	while (!r && (gr = getgrent()))
		if (idrange_overlap(base, count, gr->gr_gid, 1)) {
			snprintf(err, errlen, "local.uid_base: ids %lu..%lu overlap the group '%s' (gid %u)", base,
				base + count - 1, gr->gr_name, (unsigned)gr->gr_gid);
			r = 1;
		}
	endgrent();
	return r;
}

/* Lines "owner:start:count"; anything else is skipped. */
static int idrange_file(unsigned long base, unsigned long count, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	char line[512], owner[256];
	unsigned long start, n;
	int r = 0;

	if (!f)
		return 0;
	while (!r && fgets(line, sizeof(line), f))
		if (sscanf(line, "%255[^:]:%lu:%lu", owner, &start, &n) == 3 && idrange_overlap(base, count, start, n)) {
			snprintf(err, errlen, "local.uid_base: ids %lu..%lu overlap %s's range of '%s' (%lu..%lu)", base,
				base + count - 1, path, owner, start, start + n - 1);
			r = 1;
		}
	fclose(f);
	return r;
}

int idrange_conflict(unsigned long base, unsigned long count, const char *subuid, const char *subgid, char *err,
	size_t errlen)
{
	return idrange_accounts(base, count, err, errlen) || idrange_file(base, count, subuid, err, errlen) ||
	       idrange_file(base, count, subgid, err, errlen);
}
