/* SPDX-License-Identifier: MIT */
/*
 * net.h - the network policy of each sandbox, as the rest of the daemon
 * sees it (DESIGN §7): what the pool, the jobs and the FUSE layer call.
 *
 * One struct net_sbx per living sandbox (created, or adopted after a
 * restart, until destroyed), found by the pool's struct sbx.  It ties
 * together:
 *   - the sandbox's netpol (policy, events, grants; persisted in
 *     thread_dir/network.json);
 *   - its proxy listener (allowlist mode, providers with a netns fd);
 *   - the park queue where readers and pollers of `events` wait
 *     (runtime/park.h; fs/ parks the requests);
 *   - what the provider says about egress it enforces itself (enforced_by).
 *
 * The pool calls net_sandbox_up() after a create or an adoption and
 * net_sandbox_down() before a destroy (through pool_set_hooks(), with the
 * sandbox's scope lock held, on a work thread); job.c calls
 * net_job_environ() when it builds a job's environment (main.c hands it to
 * fs/job.c with job_set_environ_hook: net/ does not call up into fs/).
 *
 * Locks: net_lock guards the registry only and is never held across a call
 * out; a net_sbx's fields are immutable once registered (its netpol has its
 * own lock).  Reference counted: the registry, every FUSE handle and every
 * parked request hold one.
 */
#ifndef SBX_NET_NET_H
#define SBX_NET_NET_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/buf.h"
#include "../runtime/park.h"
#include "../providers/pool.h"

struct net_sbx;

/* Start the proxy engine and register the pool and job hooks.  0 or errno. */
int net_init(void);
/* Stop the proxy; forget every sandbox (their files stay for the next
 * start when the sandboxes are kept). */
void net_shutdown(void);

/* Pool hooks (scope lock held).  up: 0, or -1 when a new sandbox cannot get
 * the policy it was asked for (the create fails: never fail open). */
int net_sandbox_up(struct sbx *s, bool adopted);
void net_sandbox_down(struct sbx *s);

/* The sandbox's state, referenced (net_put it), or NULL. */
struct net_sbx *net_get(struct sbx *s);
void net_put(struct net_sbx *n);

/* events: may an event ever come (allowlist, approval: prompt, events
 * available from the provider)? */
bool net_events_live(struct net_sbx *n);
bool net_pending(struct net_sbx *n);
/* Consume one event: 0 and one JSON line appended to line, ENOENT when
 * none is pending, ENOMEM. */
int net_consume(struct net_sbx *n, struct buf *line);
struct park_queue *net_queue(struct net_sbx *n);
/* Wake the readers of s's events (the sandbox directory went away). */
void net_wake(struct sbx *s);

/* `network`: a command (0, EINVAL, ENOENT, EEXIST, ENOMEM) and the JSON. */
int net_command(struct sbx *s, const char *text, size_t len);
int net_render(struct sbx *s, struct buf *out);

/* The proxy variables of an allowlist sandbox's jobs, NUL-separated
 * KEY=VALUE entries appended to out (nothing for other sandboxes). */
int net_job_environ(struct sbx *s, struct buf *out);

struct net_stats {
	uint64_t events;                          /* network-policy events recorded */
	uint64_t accepted, allowed, denied, refused; /* proxy connections */
	uint64_t active;
};

void net_stats(struct net_stats *st);

#endif
