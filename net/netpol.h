/* SPDX-License-Identifier: MIT */
/*
 * netpol.h - one sandbox's egress policy state (DESIGN §7, reference §7.4):
 * its policy (mode, allow_domains, approval, ttl, approval_wait, hosts,
 * allow_private_destinations, fixed when the sandbox was created), its
 * network-policy events and its grants, and the commands of the `network`
 * file that decide them.
 *
 * Events follow DeerFlow's lifecycle exactly:
 *   record   a denial (allowlist + prompt) records {request_id, host, port,
 *            method, created_at}; an undecided event for the same host:port
 *            created in the last NETPOL_REUSE_S seconds is reused;
 *   consume  claims the oldest unsurfaced undecided event (marks it
 *            surfaced) and decides every other unsurfaced undecided one
 *            "superseded";
 *   deny-pending  decides every unsurfaced undecided event "deny";
 *   decide   allow_temporary (a grant until now + ttl), allow_sandbox (a
 *            grant for the sandbox's lifetime), deny.  The same decision
 *            twice succeeds; a different one on a decided event is EEXIST;
 *            an unknown id ENOENT; anything malformed EINVAL; a failed
 *            command changes nothing.
 * Grants match (host, port); expired ones are dropped lazily.
 *
 * Persistence: every change is written to the file given at creation
 * (thread_dir/network.json: policy, events, grants; a recorded event by the
 * writer thread moments later, the rest before the call returns), so a restarted daemon
 * finds them while the sandbox lives (netpol_load); netpol_close() removes
 * the file when the sandbox is destroyed, so its grants go with it.
 *
 * Threads and locks: every call is thread-safe (the proxy's event loop, FUSE
 * workers, pool hooks).  lock guards the state and is never held across I/O;
 * persist_lock orders the writers of the file (a snapshot is taken under
 * lock, written under persist_lock alone).  The notify callback runs after
 * both are released.
 *
 * Lifetime: reference counted (netpol_get/netpol_put); the proxy holds one
 * per listener and per connection, the FUSE layer one per open file.
 */
#ifndef SBX_NET_NETPOL_H
#define SBX_NET_NETPOL_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/buf.h"
#include "../common/config.h"

#define NETPOL_ID_LEN 36     /* a UUID, lower-case hex with dashes */
#define NETPOL_REUSE_S 30.0  /* an undecided event is reused for this long */
#define NETPOL_MAX_EVENTS 1024

/* The policy a sandbox lives with (copied from its configuration). */
struct netpol_conf {
	enum net_mode mode;
	bool prompt;  /* approval: prompt (else deny) */
	long ttl;     /* temporary_grant_ttl, seconds */
	long wait;    /* approval_wait, seconds */
	bool allow_private;
	char **domains;
	size_t n_domains;
	struct config_host *hosts;
	size_t n_hosts;
};

int netpol_conf_from_config(struct netpol_conf *pc, const struct sbx_config *cfg);
void netpol_conf_free(struct netpol_conf *pc);

enum netpol_decision {
	NP_UNDECIDED = 0,
	NP_SUPERSEDED,
	NP_DENY,
	NP_ALLOW_TEMPORARY,
	NP_ALLOW_SANDBOX,
};

/* What changed, for the notify callback. */
enum netpol_change {
	NETPOL_RECORDED = 1 << 0, /* a new event (events readers may wake) */
	NETPOL_DECIDED = 1 << 1,  /* decisions or grants changed (held connections) */
};

struct netpol;

/* A new policy state with conf (copied) and no event; persisted to path
 * (NULL: never persisted).  NULL on ENOMEM. */
struct netpol *netpol_new(const struct netpol_conf *conf, const char *path);
/* The state recorded in path (policy, events, grants) when it exists and
 * parses, else a new one with conf.  NULL on ENOMEM. */
struct netpol *netpol_load(const char *path, const struct netpol_conf *conf);
struct netpol *netpol_get(struct netpol *p);
void netpol_put(struct netpol *p);
/* The sandbox is destroyed: remove the file, refuse every later change. */
void netpol_close(struct netpol *p);
/* Called (no lock held) after each change; set once, before sharing p. */
void netpol_set_notify(struct netpol *p, void (*fn)(void *arg, unsigned changes), void *arg);
/* The policy (immutable: no lock needed). */
const struct netpol_conf *netpol_conf(const struct netpol *p);
/* The thread that writes the files of recorded events (netpol_record never
 * writes on its caller's thread while it runs); stop writes what is queued,
 * then joins it.  Without it, netpol_record writes before it returns. */
int netpol_writer_start(void);
void netpol_writer_stop(void);
/* Write the state now (a new sandbox's file exists from its start). */
int netpol_save(struct netpol *p);

/* Is host:port (canonical host) allowed now: a static rule of allow_domains
 * (allowlist mode) or a live grant? */
bool netpol_allows(struct netpol *p, const char *host, int port, double now);
/* Record a denial: 0 and the event's id in id (a new one, or the undecided
 * one for host:port of the last NETPOL_REUSE_S seconds), or -1 when nothing
 * is recorded (approval: deny, not allowlist mode, closed, ENOMEM). */
int netpol_record(struct netpol *p, const char *host, int port, const char *method, double now,
	char id[NETPOL_ID_LEN + 1]);
/* The decision of event id; -1 when there is no such event. */
int netpol_decision(struct netpol *p, const char *id);
/* Are events recorded at all (allowlist and approval: prompt)? */
bool netpol_records(const struct netpol *p);
/* Is an unsurfaced undecided event waiting? */
bool netpol_pending(struct netpol *p);
/* Consume: 0 and the claimed event as one JSON line (with "\n") appended to
 * line; ENOENT when nothing is pending; ENOMEM. */
int netpol_consume(struct netpol *p, double now, struct buf *line);
/* One write to `network`: "allow_temporary ID", "allow_sandbox ID",
 * "deny ID" or "deny-pending", optionally ending with one newline.  0,
 * EINVAL (malformed), ENOENT (unknown id), EEXIST (decided otherwise),
 * ENOMEM.  p NULL: a sandbox without events (every id is unknown). */
int netpol_command(struct netpol *p, const char *text, size_t len, double now);
struct json_t;
/* The `network` JSON: policy, the keys of extra (borrowed, may be NULL),
 * live grants, events with their decisions. */
int netpol_render(struct netpol *p, double now, struct json_t *extra, struct buf *out);
/* The policy as `network` shows it, for a sandbox without a state (a new
 * reference, NULL on ENOMEM). */
struct json_t *netpol_conf_json(const struct netpol_conf *c);

const char *netpol_decision_name(int d);

#endif
