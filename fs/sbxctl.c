/* SPDX-License-Identifier: MIT */
/*
 * sbxctl.c - the sandbox's own control file, /sbx/<user>/<thread>/ctl
 * (DESIGN §3): mode 0200, one command per write(2):
 *   kill   end every process of the sandbox but its init: running jobs
 *          (they report "killed") and whatever finished jobs left behind;
 *          the sandbox, its files and its job slots stay.
 * Anything else is EINVAL and changes nothing.
 *
 * Kept apart from vtree.c so that the namespace only dispatches to it: a
 * node N_CTL with which == CTL_CTL.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "../common/log.h"
#include "handle.h"
#include "sbxctl.h"

#define SBXCTL_MAX 256

bool sbxctl_is(const struct node *n)
{
	return n->kind == N_CTL && n->which == CTL_CTL;
}

void sbxctl_open(fuse_req_t req, struct node *n, struct fuse_file_info *fi)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	void *h;

	if ((fi->flags & O_ACCMODE) != O_WRONLY)
		return (void)fuse_reply_err(req, EACCES);
	if (n->view->dead)
		return (void)fuse_reply_err(req, ENOENT);
	/* default_permissions checks the mode; this is the owner rule again,
	 * for a mount without users: */
	if (ctx->uid != 0 && ctx->uid != n->view->pres_uid)
		return (void)fuse_reply_err(req, EACCES);
	h = handle_alloc(sizeof(struct buf), NULL);
	if (!h)
		return (void)fuse_reply_err(req, ENOMEM);
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1;
	fi->noflush = 1;
	fuse_reply_open(req, fi);
}

void sbxctl_write(fuse_req_t req, struct node *n, const char *data, size_t size)
{
	struct sbx *s = n->view->sbx;
	char cmd[SBXCTL_MAX];
	char scope[NAMES_SCOPE_MAX];
	size_t len = size;
	int err;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	while (len && (data[len - 1] == '\n' || data[len - 1] == ' '))
		len--;
	if (len >= sizeof(cmd) || memchr(data, '\0', len)) {
		log_warn(scope, "ctl: a %zu-byte command refused (expected: kill)", size);
		return (void)fuse_reply_err(req, EINVAL);
	}
	memcpy(cmd, data, len);
	cmd[len] = '\0';
	if (strcmp(cmd, "kill")) {
		log_warn(scope, "ctl: unknown command '%.40s' (expected: kill)", cmd);
		return (void)fuse_reply_err(req, EINVAL);
	}
	if (n->view->dead)
		return (void)fuse_reply_err(req, ENOENT);
	err = pool_kill_all(s);
	if (err) {
		log_warn(scope, "ctl: kill failed: %s", strerror(err));
		return (void)fuse_reply_err(req, err);
	}
	log_info(scope, "ctl: every process of the sandbox but its init was killed");
	fuse_reply_write(req, size);
}
