/* SPDX-License-Identifier: MIT */
/*
 * skillsfs.c - the FUSE side of the skills sync (skills/skills.h): an
 * fsync under skills/ parked until the sync covering it ended.  skills/
 * says what to wait for and wakes its queue; this file parks the request
 * and answers it, so skills/ holds no FUSE request.
 */
#define _GNU_SOURCE
#include "skillsfs.h"

#include "../skills/skills.h"
#include "fspark.h"

static bool skillsfs_try(void *reqp, void *arg)
{
	int err = skills_wait_result(arg);

	if (err < 0)
		return false;
	fuse_reply_err(reqp, err);
	return true;
}

void skillsfs_fsync(fuse_req_t req, struct sbx *s, bool wrote)
{
	struct skills_wait *w;
	struct park_queue *q;
	int err = skills_wait_begin(s, wrote, &w, &q);

	if (err || !w)
		return (void)fuse_reply_err(req, err);
	park(q, req, skillsfs_try, w, skills_wait_free);
}
