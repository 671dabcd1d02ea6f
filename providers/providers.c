/* SPDX-License-Identifier: MIT */
/*
 * providers.c - the calls that give every optional slot of struct
 * sbx_provider_ops its default (so no caller tests a slot for NULL, as
 * Redis' connection wrappers do).  The registry is registry.c; the errno
 * mapping of enum sbx_err is common/err.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pthread.h>

#include <jansson.h>

#include "../common/buf.h"
#include "../common/udir.h"
#include "provider.h"

/* ---- provider level ------------------------------------------------------------ */

enum sbx_err sbx_preflight(const struct sbx_provider *prov, const struct sbx_config *cfg, char *err, size_t errlen)
{
	if (errlen)
		err[0] = '\0';
	return prov->ops->preflight ? prov->ops->preflight(cfg, err, errlen) : SBX_OK;
}

/* ---- boxes -------------------------------------------------------------------- */

void sbx_box_init(struct sbx_box *box, const struct sbx_provider *prov)
{
	box->prov = prov;
	box->refs = 1;
	box->uid = (uid_t)-1;
	box->gid = (gid_t)-1;
}

int sbx_box_own_host_files(struct sbx_box *box, const struct sbx_spec *s)
{
	uid_t uid;
	gid_t gid;
	int fd, err = 0;

	if (config_user_lookup(s->cfg, s->user, &uid, &gid))
		return 0; /* no users: mapping (or no longer one for this name): the daemon's, presented as the mount's */
	fd = udir_open(s->dirs.skills);
	if (fd < 0 || udir_chown_tree(fd, geteuid(), uid, gid))
		err = errno;
	if (fd >= 0)
		close(fd);
	if (err)
		return err;
	box->uid = uid;
	box->gid = gid;
	return 0;
}

struct sbx_box *sbx_box_get(struct sbx_box *box)
{
	if (box)
		__atomic_add_fetch(&box->refs, 1, __ATOMIC_RELAXED);
	return box;
}

void sbx_box_put(struct sbx_box *box)
{
	if (box && __atomic_sub_fetch(&box->refs, 1, __ATOMIC_ACQ_REL) == 0)
		box->prov->ops->box_free(box);
}

/* ---- optional slots ------------------------------------------------------------ */

enum sbx_err sbx_kill_all(struct sbx_box *box)
{
	return box->prov->ops->kill_all ? box->prov->ops->kill_all(box) : SBX_ERR_NOTSUP;
}

void sbx_box_status(struct sbx_box *box, struct json_t *out)
{
	if (box && box->prov->ops->box_status)
		box->prov->ops->box_status(box, out);
}

/* A new handle starts with the caller's one reference. */
static enum sbx_err exec_counted(enum sbx_err e, struct sbx_exec **out)
{
	if (e == SBX_OK && *out)
		__atomic_store_n(&(*out)->refs, 1, __ATOMIC_RELEASE);
	return e;
}

enum sbx_err sbx_exec_start(struct sbx_box *box, const struct sbx_exec_spec *spec, struct sbx_exec **out)
{
	if (!(box->prov->caps & SBX_CAP_EXEC) || !box->prov->ops->exec_start)
		return SBX_ERR_NOTSUP;
	return exec_counted(box->prov->ops->exec_start(box, spec, out), out);
}

enum sbx_err sbx_exec_reattach(struct sbx_box *box, const char *job_dir, struct sbx_exec **out)
{
	if (!box->prov->ops->exec_reattach)
		return SBX_ERR_GONE;
	return exec_counted(box->prov->ops->exec_reattach(box, job_dir, out), out);
}

enum sbx_err sbx_exec_signal(struct sbx_exec *x, int sig)
{
	/* a backend without SBX_CAP_SIGNALS can only interrupt or end a command */
	if (!(x->prov->caps & SBX_CAP_SIGNALS) && sig != SIGTERM && sig != SIGKILL && sig != SIGINT)
		return SBX_ERR_NOTSUP;
	return x->prov->ops->exec_signal ? x->prov->ops->exec_signal(x, sig) : SBX_ERR_NOTSUP;
}

void sbx_exec_finish(struct sbx_exec *x)
{
	if (x->prov->ops->exec_finish)
		x->prov->ops->exec_finish(x);
}

void sbx_exec_get(struct sbx_exec *x)
{
	__atomic_add_fetch(&x->refs, 1, __ATOMIC_RELAXED);
}

void sbx_exec_put(struct sbx_exec *x)
{
	if (x && __atomic_sub_fetch(&x->refs, 1, __ATOMIC_ACQ_REL) == 0)
		x->prov->ops->exec_free(x);
}

void sbx_exec_cleanup(struct sbx_box *box, const char *job_dir, const char *job_name)
{
	if (box->prov->ops->exec_cleanup)
		box->prov->ops->exec_cleanup(box, job_dir, job_name);
}

static void (*gone_hook)(void); /* set once at start, before any box exists */

void sbx_set_gone_hook(void (*fn)(void))
{
	gone_hook = fn;
}

void sbx_box_gone(struct sbx_box *box, const char *fmt, ...)
{
	static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER; /* orders the first writer of gone_why */
	bool first = false;
	va_list ap;

	if (!box)
		return;
	pthread_mutex_lock(&once);
	if (!__atomic_load_n(&box->gone, __ATOMIC_ACQUIRE)) {
		va_start(ap, fmt);
		vsnprintf(box->gone_why, sizeof(box->gone_why), fmt, ap);
		va_end(ap);
		__atomic_store_n(&box->gone, 1, __ATOMIC_RELEASE);
		first = true;
	}
	pthread_mutex_unlock(&once);
	if (first && gone_hook)
		gone_hook();
}

void sbx_dirents_free(struct sbx_dirent *ents, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(ents[i].name);
	free(ents);
}

bool sbx_remote_path_ok(const char *path)
{
	json_t *s;

	if (!path || path[0] != '/')
		return false;
	s = json_string(path); /* NULL: not valid UTF-8 */
	json_decref(s);
	return s != NULL;
}

enum sbx_err sbx_skills_remote_path(const char *root, const char *rel, struct buf *out)
{
	const char *p = rel;

	if (!rel || !rel[0] || rel[0] == '/')
		return SBX_ERR_INVAL;
	while (*p) {
		size_t n = strcspn(p, "/");
		if (!n || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return SBX_ERR_INVAL;
		p += n;
		if (*p)
			p++;
	}
	if (buf_addf(out, "%s/%s", root, rel))
		return SBX_ERR_NOMEM;
	return sbx_remote_path_ok(out->ptr) ? SBX_OK : SBX_ERR_INVAL;
}
