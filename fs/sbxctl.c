/* SPDX-License-Identifier: MIT */
/*
 * sbxctl.c - the sandbox's own control file, /sbx/<user>/<thread>/ctl
 * (DESIGN §3): mode 0200, one command per write(2):
 *   kill                 end every process of the sandbox but its init:
 *                        running jobs (they report "killed") and whatever
 *                        finished jobs left behind; the sandbox, its files
 *                        and its job slots stay (a frozen sandbox is thawed
 *                        first: what is killed must be able to die);
 *   freeze, thaw         pause and resume every process of the sandbox
 *                        (providers/sbxsnap.h);
 *   restore NAME         make workspace, uploads and outputs equal to the
 *   restore THREAD/NAME  snapshot NAME of this thread, or of THREAD of the
 *                        same user (a fork); EBUSY while a job runs.
 * Anything else is EINVAL and changes nothing.  freeze, thaw and restore
 * are slow (a docker request, a copy): a work item does them and answers
 * the write(2).
 *
 * Kept apart from vtree.c so that the namespace only dispatches to it: a
 * node N_CTL with which == CTL_CTL.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/layout.h"
#include "../common/log.h"
#include "../providers/sbxsnap.h"
#include "data.h"
#include "handle.h"
#include "job.h"
#include "sbxctl.h"
#include "fswork.h"

#define SBXCTL_MAX 256
#define SBXCTL_USAGE "kill, freeze, thaw, restore [THREAD/]NAME"

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

enum sbxctl_cmd { CMD_KILL, CMD_FREEZE, CMD_THAW, CMD_RESTORE };

struct sbxctl_op {
	fuse_req_t req;
	struct sbx *sbx; /* referenced */
	enum sbxctl_cmd cmd;
	size_t size;     /* the write's, answered on success */
	char thread[NAME_MAX_LEN + 1]; /* restore THREAD/NAME: THREAD, else "" */
	char name[NAME_MAX_LEN + 1];
};

/* A job of s starting or running (restore's EBUSY). */
static bool sbxctl_busy(struct sbx *s)
{
	struct buf jobs = BUF_INIT(BUF_CAP_PATH);
	bool busy = layout_dir(&jobs, s->thread_dir, LAYOUT_JOBS) || job_any_running(s, jobs.ptr);

	buf_free(&jobs);
	return busy;
}

static int sbxctl_kill(struct sbx *s, const char *scope)
{
	int err;

	if (__atomic_load_n(&s->frozen, __ATOMIC_ACQUIRE) && (err = sbxsnap_freeze(s, false)))
		return err;
	err = pool_kill_all(s);
	if (err)
		log_warn(scope, "ctl: kill failed: %s", strerror(err));
	else
		log_info(scope, "ctl: every process of the sandbox but its init was killed");
	return err;
}

/* Work thread: the command, then the answer to the write. */
static void sbxctl_work(void *arg)
{
	struct sbxctl_op *op = arg;
	struct snap_stats st;
	int err = 0;

	switch (op->cmd) {
	case CMD_KILL:
		err = sbxctl_kill(op->sbx, op->sbx->token);
		break;
	case CMD_FREEZE:
	case CMD_THAW:
		err = sbxsnap_freeze(op->sbx, op->cmd == CMD_FREEZE);
		break;
	case CMD_RESTORE:
		err = sbxsnap_restore(op->sbx, op->thread[0] ? op->thread : NULL, op->name, sbxctl_busy, &st);
		/* the files changed behind the kernel's caches */
		if (!err || st.copied || st.reflinked || st.removed)
			data_inval_sbx(op->sbx);
		break;
	}
	if (err)
		fuse_reply_err(op->req, err);
	else
		fuse_reply_write(op->req, op->size);
	pool_put(op->sbx);
	free(op);
}

/* cmd into op (restore's argument split): 0 or EINVAL. */
static int sbxctl_parse(const char *cmd, struct sbxctl_op *op)
{
	const char *arg, *slash;

	if (!strcmp(cmd, "kill"))
		op->cmd = CMD_KILL;
	else if (!strcmp(cmd, "freeze"))
		op->cmd = CMD_FREEZE;
	else if (!strcmp(cmd, "thaw"))
		op->cmd = CMD_THAW;
	else if (!strncmp(cmd, "restore ", 8))
		op->cmd = CMD_RESTORE;
	else
		return EINVAL;
	if (op->cmd != CMD_RESTORE)
		return 0;
	for (arg = cmd + 8; *arg == ' '; arg++)
		;
	slash = strchr(arg, '/');
	if (slash) {
		if ((size_t)(slash - arg) >= sizeof(op->thread))
			return EINVAL;
		memcpy(op->thread, arg, (size_t)(slash - arg));
		op->thread[slash - arg] = '\0';
		arg = slash + 1;
	}
	if (strlen(arg) >= sizeof(op->name) || !names_valid(arg) || (slash && !names_valid(op->thread)))
		return EINVAL;
	memcpy(op->name, arg, strlen(arg) + 1);
	return 0;
}

void sbxctl_write(fuse_req_t req, struct node *n, const char *data, size_t size)
{
	struct sbx *s = n->view->sbx;
	char cmd[SBXCTL_MAX];
	char scope[NAMES_SCOPE_MAX];
	struct sbxctl_op *op;
	size_t len = size;
	int err;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	while (len && (data[len - 1] == '\n' || data[len - 1] == ' '))
		len--;
	if (len >= sizeof(cmd) || memchr(data, '\0', len)) {
		log_warn(scope, "ctl: a %zu-byte command refused (expected: " SBXCTL_USAGE ")", size);
		return (void)fuse_reply_err(req, EINVAL);
	}
	memcpy(cmd, data, len);
	cmd[len] = '\0';
	op = calloc(1, sizeof(*op));
	if (!op)
		return (void)fuse_reply_err(req, ENOMEM);
	if (sbxctl_parse(cmd, op)) {
		free(op);
		log_warn(scope, "ctl: unknown command '%.80s' (expected: " SBXCTL_USAGE "; names match "
				"^[A-Za-z0-9_-]{1,64}$)", cmd);
		return (void)fuse_reply_err(req, EINVAL);
	}
	if (n->view->dead) {
		free(op);
		return (void)fuse_reply_err(req, ENOENT);
	}
	op->req = req;
	op->sbx = s;
	op->size = size;
	pool_get(s);
	err = work_submit(WORK_LIFECYCLE, s->token, pool_work_timeout_ms(), sbxctl_work, op);
	if (err) {
		pool_put(s);
		free(op);
		fuse_reply_err(req, err);
	}
}
