/* SPDX-License-Identifier: MIT */
/*
 * opensandbox_claim.c - binding an OpenSandbox spare to a thread
 * (provider.h's claim, pool.prewarm: providers/spares.h).
 *
 * What a cold create gives a thread of this provider, and so what a claimed
 * spare must be:
 *   - a remote sandbox of the configuration's image, entrypoint, resources,
 *     environment (the configuration's `environment`: nothing in the create
 *     request depends on the user or the thread) and networkPolicy; spares
 *     are claimed only by threads of the configuration they were made with
 *     (spares.c), so all of this is the thread's already;
 *   - empty /mnt/user-data/{workspace,uploads,outputs} and the skills path
 *     (the bootstrap): a thread's files live in its remote sandbox and end
 *     with it, so a thread whose sandbox was destroyed earlier starts empty
 *     when created cold too.  Nothing runs in a spare before its claim
 *     (no job, no file operation reaches it: it has no scope), so its
 *     directories are as its bootstrap left them;
 *   - skills/ (host-side, synced by upload): given to the user's uid when
 *     users: maps one (sbx_box_own_host_files), and uploaded by the skills
 *     engine's hook, which the pool runs after a claim as after a create;
 *   - metadata: provider, state_id and scope token, plus user and thread.
 *     The claim does not patch them (the API's PATCH .../metadata would,
 *     at one round trip; not used yet), so a claimed spare keeps the
 *     spare's labels (its own token, no user or thread).  It is found
 *     again by its record alone: opensandbox.json in the thread's
 *     directory with the id and "scope", the spare's token,
 *     which adoption checks the metadata against; discovery leaves a
 *     sandbox whose id a live box holds, or whose token names a spare's
 *     directory, alone (opensandbox.c);
 *   - the expiry: a spare is on the renewer's list from its create on, like
 *     any sandbox (a spare never expires unseen; one found gone is
 *     destroyed by spares_sweep_gone), and its health check at claim
 *     renews it at once.
 * So the claim is bookkeeping on the host: the record moves to the thread's
 * directory, the box is renamed for the logs, skills/ is given to the
 * user.  No request goes to the server (the pool's health check before it
 * made two: GET and execd's /ping).  A failure returns an error and the
 * pool destroys the spare.
 */
#define _GNU_SOURCE
#include "opensandbox_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/log.h"

enum sbx_err os_claim(struct sbx_box *b, const struct sbx_spec *s)
{
	struct obox *ob = obox(b);
	char scope[NAMES_SCOPE_MAX], *old = NULL, *dir = NULL;
	int r;

	snprintf(scope, sizeof(scope), "%s/%s", s->user, s->thread);
	if (sbx_box_is_gone(b)) {
		log_err(scope, "opensandbox: claim: spare %s is gone: %s", ob->id, b->gone_why);
		return SBX_ERR_GONE;
	}
	r = sbx_box_own_host_files(b, s);
	if (r) {
		log_err(scope, "opensandbox: claim: cannot give skills/ to the user: %s", strerror(r));
		return sbx_err_from_errno(r);
	}
	if (!(dir = strdup(s->dirs.thread_dir)))
		return SBX_ERR_NOMEM;
	old = ob->thread_dir;
	ob->thread_dir = dir;
	ob->output_max = s->cfg->res.output;
	if (os_save(ob)) {
		log_err(scope, "opensandbox: claim: cannot record sandbox %s in %s: %s", ob->id, dir, strerror(errno));
		os_unsave(dir);
		ob->thread_dir = old; /* the pool destroys it: its spare record goes with it */
		free(dir);
		return SBX_ERR_IO;
	}
	os_unsave(old);
	free(old);
	os_set_scope(ob, scope);
	pthread_mutex_lock(&ob->lock);
	snprintf(ob->ex.scope, sizeof(ob->ex.scope), "%s", scope);
	pthread_mutex_unlock(&ob->lock);
	log_info(scope, "opensandbox: sandbox %s (spare %s) is this thread's now", ob->id, ob->token);
	return SBX_OK;
}
