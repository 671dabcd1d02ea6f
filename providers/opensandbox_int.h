/* SPDX-License-Identifier: MIT */
/*
 * opensandbox_int.h - what the parts of the opensandbox provider share:
 * opensandbox.c (configuration, lifecycle), opensandbox_renew.c (the
 * renewer thread, the box list, suspects), opensandbox_jobs.c
 * (jobs through execd's command stream), opensandbox_files.c (remote files
 * and skills by upload through execd's files API).
 *
 * opensandbox_claim.c (a spare bound to a thread).
 *
 * A sandbox is one OpenSandbox sandbox, labelled (metadata) with the
 * provider, this daemon's state_id, the scope token and, where they are
 * label values, the user and thread; its record is thread_dir/opensandbox.json
 * (the sandbox id, and "scope": the token its metadata carries).  A spare
 * (pool.prewarm) is labelled with its own token and no user or thread; the
 * API cannot change metadata after create, so a claimed spare keeps the
 * spare's labels for ever and is found again by its record alone
 * (opensandbox_claim.c).  Boxes are reference counted (provider.h); their
 * fields are immutable after create/adopt except where noted.
 */
#ifndef SBX_OPENSANDBOX_INT_H
#define SBX_OPENSANDBOX_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../common/names.h"
#include "opensandbox_api.h"
#include "provider.h"
#include "scriptfs.h"

/* metadata keys (label names: <= 63, alphanumeric at both ends) */
#define OS_META_PROVIDER "sbxfs-provider"
#define OS_META_STATE_ID "sbxfs-state-id"
#define OS_META_SCOPE "sbxfs-scope"
#define OS_META_USER "sbxfs-user"
#define OS_META_THREAD "sbxfs-thread"

/* Where jobs' command and stdin files go inside the sandbox when the
 * command cannot travel in the request (not UTF-8, or stdin to feed). */
#define OS_JOBS_PATH "/tmp/.sbxfs/jobs"

/* The opensandbox: section and what config_check resolved (cfg->prov). */
struct os_conf {
	char *execd_token;  /* X-EXECD-ACCESS-TOKEN (secret) */
	char **entrypoint;  /* the sandbox's entrypoint (default tail -f /dev/null) */
	size_t n_entrypoint;
	/* resolved by config_check: */
	char *api_key;      /* api_key, else $OPEN_SANDBOX_API_KEY, else "" (secret) */
	char *base;         /* the lifecycle API: scheme://domain/v1 */
	char *scheme;       /* for execd endpoints: protocol, or the domain's own scheme */
	const char *key_source;    /* "api_key", "OPEN_SANDBOX_API_KEY" or NULL */
	const char *domain_source; /* "domain", "OPEN_SANDBOX_DOMAIN" or NULL (the default) */
};

struct obox {
	struct sbx_box base; /* first: see obox() */
	char id[80];         /* the remote sandbox id */
	char token[SCOPE_TOKEN_LEN + 1]; /* the scope its metadata names (a claimed spare: the spare's) */
	char state_id[NAMES_STATE_ID_LEN + 1];
	/* "user/thread" (a spare: "spare/<token>") for logs; changed by a claim
	 * under os.lock (os_set_scope), read by the renewer under it; other
	 * readers use the box only after the claim returned */
	char scope[NAMES_SCOPE_MAX];
	char *thread_dir; /* where its record is; moved by a claim, before the box is handed out */
	struct sbx_config *cfg; /* referenced: the config it lives with */
	uint64_t output_max;

	pthread_mutex_t lock;   /* a leaf: guards ex and have_ex, never held across a call */
	struct osapi_execd ex;  /* execd's endpoint, copied out by obox_execd() */
	bool have_ex;

	/* protected by os.lock (opensandbox_renew.c) */
	struct obox *next;
	bool listed;
	uint64_t next_renew_ms;
	double expires_at; /* 0: none known */
	char renew_err[OSAPI_ERR_LEN];
};

extern const struct scriptfs_files os_files;
extern const struct scriptfs_skills os_skills;

struct obox *obox(struct sbx_box *b);
const struct os_conf *os_conf_of(const struct sbx_config *cfg);
/* The lifecycle server of cfg, with scope for the logs. */
void os_server(const struct sbx_config *cfg, struct osapi_server *srv, const char *scope);
/* A copy of the box's execd endpoint (resolved on first use, or again after
 * a connection failure dropped it). */
enum sbx_err obox_execd(struct obox *ob, struct osapi_execd *out);
/* Account for a failed execd call: gone -> sbx_box_gone; a transport
 * failure drops the endpoint; logs what with err. */
void obox_failed(struct obox *ob, enum sbx_err e, bool gone, const char *what, const char *err);

/* A command run to its end (file operations the files API lacks): its exit
 * code, and the first bytes of its stderr in errtext. */
enum sbx_err os_run(struct obox *ob, const char *script, const struct osapi_kv *envs, size_t n_envs, int *exit_code,
	char *errtext, size_t errlen);

/* The sandboxes of an osapi_list (os_pick_one): the first id, how many,
 * the first 16 ids. */
struct os_pick {
	char id[80];
	int n;
	char all[16][80];
};
void os_pick_one(const struct osapi_sandbox *sb, void *arg);

/* thread_dir/opensandbox.json: the box's id and metadata scope; 0 or -1
 * (errno).  os_unsave removes it. */
int os_save(struct obox *ob);
void os_unsave(const char *thread_dir);

/* opensandbox_claim.c: provider.h's claim. */
enum sbx_err os_claim(struct sbx_box *b, const struct sbx_spec *s);

/* opensandbox_renew.c: the box list, the renewer thread, the suspects
 * (os.lock). */
/* Start the renewer (once; again after os_renew_stop).  SBX_ERR_NOMEM when
 * the thread cannot start. */
enum sbx_err os_renew_start(char *err, size_t errlen);
/* Stop and join the renewer; log and forget what is still watched. */
void os_renew_stop(void);
/* Put ob on the list the renewer walks (renewed at once), or take it off. */
void os_register(struct obox *ob);
/* Around a create request of scope token, until its box is registered or
 * the request failed (opensandbox_renew.c: the suspect check waits). */
void os_create_begin(const char *token);
void os_create_end(const char *token);
void os_unregister(struct obox *ob);
/* Watch scope token (and id, when known) for a sandbox nobody holds: an
 * unknown create, or a delete that failed. */
void os_suspect(const struct sbx_config *cfg, const char *token, const char *state_id, const char *id);
/* Rename ob for the logs (a claim: the spare becomes "user/thread"). */
void os_set_scope(struct obox *ob, const char *scope);
/* Whether a live box holds remote sandbox id (discovery leaves it alone). */
bool os_holds(const char *id);
/* Renew ob's expiry now rather than at the renewer's next turn. */
void os_renew_now(struct obox *ob);
/* ob's known expiry (0: none) and last renewal error ("" if none), copied. */
void os_renew_status(struct obox *ob, double *expires_at, char *err, size_t errlen);

/* opensandbox_jobs.c: the exec slots. */
enum sbx_err os_jobs_start(struct sbx_box *b, const struct sbx_exec_spec *spec, struct sbx_exec **out);
enum sbx_err os_jobs_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out);
enum sbx_err os_jobs_signal(struct sbx_exec *x, int sig);
void os_jobs_finish(struct sbx_exec *x);
void os_jobs_free(struct sbx_exec *x);
void os_jobs_cleanup(struct sbx_box *b, const char *job_dir, const char *job_name);

#endif
