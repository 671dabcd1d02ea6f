/* SPDX-License-Identifier: MIT */
/*
 * spares.h - pre-warmed sandboxes (pool.prewarm, DESIGN §4): ready
 * sandboxes that belong to no scope, which a new thread's create claims
 * (provider.h's claim) instead of starting one.  Used by pool.c only.
 *
 * A spare is made by the provider's create with spec->spare, in the
 * background (the lifecycle work queue, never a FUSE worker), recorded in
 * state_dir/spares/<token>/ (spare.json: "creating" before the provider
 * starts anything, "ready" after, like sandbox.json), refilled after each
 * claim and at start, counted toward replicas (and evicted before any warm
 * sandbox when the cap needs room), reaped after idle_timeout like warm
 * ones (and then not refilled before the next acquire), adopted as spares
 * after a restart, destroyed at unmount.  Only spares made with the
 * configuration in force are claimed (network mode, resources, mounts are
 * the configuration's, so they are the thread's); a reload destroys the
 * others.
 *
 * Lock: spares.lock, a leaf: held only around the list and the counters,
 * never over a provider call; pool.lock may be held when taking it
 * (docs/architecture.md, "Lock order").
 */
#ifndef SBX_SPARES_H
#define SBX_SPARES_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/config.h"
#include "provider.h"

struct spare;

struct spares_stats {
	int target;                 /* pool.prewarm in force (0: none) */
	unsigned ready, creating;
	uint64_t claims, claim_failures, made, make_failures, reaps, evictions, adopted;
	uint64_t lost; /* found gone behind the daemon's back (sbx_box_gone: expired, deleted) */
};

/* The number of spares cfg asks of prov: pool.prewarm, or its default (2
 * for a provider with a claim slot whose data is host directories, else
 * 0); 0 whenever prov cannot claim. */
int spares_target(const struct sbx_provider *prov, const struct sbx_config *cfg);
/* Start (pool_init, after the scopes were adopted): adopt the spares a
 * previous daemon left in state_dir/spares, destroy what is not usable,
 * then refill.  others() counts the pool's active, warm and creating
 * sandboxes (called with no lock of this module held). */
void spares_start(const struct sbx_provider *prov, struct sbx_config *cfg, const char *state_id,
	unsigned (*others)(void));
/* Reload: cfg (referenced here) is in force; spares of another
 * configuration or provider go, the rest is refilled. */
void spares_reconfigure(const struct sbx_provider *prov, struct sbx_config *cfg);
/* Queue the creates that bring the spares up to the target (room
 * allowing: replicas counts them). */
void spares_refill(void);
/* Ready and (unless ready_only) creating spares (pool.lock may be held).
 * A spare being made counts toward replicas for refills, not for the
 * evictions before a create: it gives way itself when it is done and the
 * cap has no room for it. */
unsigned spares_count(bool ready_only);
/* Take a ready spare made by prov with cfg, or NULL. */
struct spare *spares_take(const struct sbx_provider *prov, const struct sbx_config *cfg);
/* Claim sp for spec (scope lock held, a work thread): SBX_OK and the box,
 * now the thread's, in *out; else the spare is destroyed (logged with the
 * cause) and the caller creates cold.  sp is consumed either way, and a
 * refill is queued. */
enum sbx_err spares_claim(struct spare *sp, const struct sbx_spec *spec, struct sbx_box **out);
/* Destroy one ready spare (the replicas cap needs room): true when one went. */
bool spares_evict_one(void);
/* The reaper: destroy spares ready for longer than idle_timeout seconds. */
void spares_reap(long idle_timeout);
/* The reaper, at each turn and when sbx_box_gone() woke it: destroy the
 * ready spares whose provider found them gone (a remote spare expired or
 * deleted behind the daemon's back: its renewer saw a 404), so no dead
 * spare waits for a claim, then refill. */
void spares_sweep_gone(void);
/* No more refills (unmount or a failed start). */
void spares_stop(void);
/* After the work queues drained: destroy every spare, or with keep leave
 * them running for the next start to adopt. */
void spares_shutdown(bool keep);
void spares_stats(struct spares_stats *st);

#endif
