/* SPDX-License-Identifier: MIT */
/*
 * resolve.h - name resolution off the proxy's event loop.
 *
 * getaddrinfo() blocks (seconds, for a slow or absent DNS server), so the
 * proxy never calls it: it submits a request here and goes on serving other
 * connections; one of the resolver threads resolves it and hands it back
 * through the done() callback given at resolve_init().
 *
 * A name of network.hosts resolves to its configured addresses without DNS.
 * Then every address is checked (DeerFlow: "every answer must be public"):
 * one that is private (policy.h) or that belongs to this host (bind()
 * succeeds on it) fails the whole request with RESOLVE_PRIVATE unless
 * allow_private is set, so a name cannot be pointed at the host or the
 * local network through DNS.
 *
 * A lookup cannot be interrupted (glibc's resolver gives up after
 * resolv.conf's timeout x attempts per server, 10 s by default), so the queue
 * protects the threads instead:
 *   - a sandbox (the owner of a request) has at most RESOLVE_PER_OWNER
 *     lookups in progress, so one whose names never answer holds at most
 *     that many threads;
 *   - RESOLVE_THREADS threads start with the proxy; when a queued request
 *     may start its lookup (its owner under RESOLVE_PER_OWNER) and every
 *     thread is in a lookup, one more is started, up to RESOLVE_THREADS_MAX:
 *     sandboxes whose names hang take threads of their own instead of the
 *     others' (it takes RESOLVE_THREADS_MAX / RESOLVE_PER_OWNER such
 *     sandboxes at once to make the rest wait).  Threads once started stay
 *     until shutdown (named sbxfs-resolve);
 *   - a request whose deadline has passed, or that its submitter cancelled
 *     (the client went away), comes back RESOLVE_FAILED without a lookup, so
 *     a burst of connections opened and dropped costs the threads nothing.
 */
#ifndef SBX_NET_RESOLVE_H
#define SBX_NET_RESOLVE_H

#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "../common/config.h"
#include "../common/policy.h"

#define RESOLVE_MAX_ADDRS 16
#define RESOLVE_THREADS 4      /* started with the proxy */
#define RESOLVE_THREADS_MAX 32 /* started as requests wait (see above) */
#define RESOLVE_PER_OWNER 2

enum resolve_err { RESOLVE_OK = 0, RESOLVE_NONAME, RESOLVE_PRIVATE, RESOLVE_FAILED };

struct resolve_req {
	/* in: owned by the submitter until done() */
	char host[POLICY_HOST_MAX + 1];
	int port;
	const struct config_host *mapped; /* network.hosts entry, or NULL */
	bool allow_private;
	const void *owner;    /* the sandbox asking: compared, never dereferenced */
	uint64_t deadline_ms; /* util_now_ms() clock; 0: none */
	bool cancelled;       /* atomic: resolve_cancel() */
	void *arg;
	/* out */
	enum resolve_err err;
	char why[96]; /* RESOLVE_PRIVATE: the address refused; else the resolver's error */
	struct sockaddr_storage addrs[RESOLVE_MAX_ADDRS];
	socklen_t lens[RESOLVE_MAX_ADDRS];
	int n;
	struct resolve_req *next; /* the queue's */
};

/* Start the first RESOLVE_THREADS threads (0, or an errno with none left
 * running); done(r) runs on a resolver thread for every submitted r. */
int resolve_init(void (*done)(struct resolve_req *r));
/* Queue r (never fails; r comes back through done()). */
void resolve_submit(struct resolve_req *r);
/* The submitter no longer wants r: it comes back through done() without a
 * lookup as soon as a thread is idle (or at once after a lookup ends). */
void resolve_cancel(struct resolve_req *r);
/* Resolve r on the calling thread (resolve_submit's worker; unit tests). */
void resolve_now(struct resolve_req *r);
/* Stop the threads; requests still queued come back with RESOLVE_FAILED. */
void resolve_shutdown(void);

#endif
