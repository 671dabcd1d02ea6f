/* SPDX-License-Identifier: MIT */
/*
 * proxy.h - the approval proxy (DESIGN §7, reference §7.3): ONE engine in
 * the daemon, serving every sandbox in allowlist mode on 127.0.0.1:3128
 * inside that sandbox's own network namespace.
 *
 * The engine is a single event-loop thread (epoll, non-blocking sockets, no
 * thread and no process per connection or per sandbox).  A listener is
 * opened by a thread that joined the sandbox's namespace (egress.h) and then
 * handed to the loop: a socket keeps the namespace it was made in, so the
 * loop serves all sandboxes from the daemon's own namespace, and upstream
 * connections leave from the host as the daemon.
 *
 * Per connection, exactly one request:
 *   read the head (HTTP_HEAD_MAX, PROXY_READ_TIMEOUT_S for the whole head:
 *   a slowloris client gets 408) -> http_parse (strict) -> canonical host,
 *   IP literals refused -> the port rule (CONNECT 443, plain http 80) ->
 *   policy (netpol_allows: allow_domains or a live grant), decided on the
 *   name before any DNS lookup -> a denial records an event (allowlist +
 *   prompt) and answers 403 naming the host and the request id, or holds
 *   the connection up to approval_wait for a decision -> resolve off the
 *   loop (resolve.h: every answer public unless allow_private) -> connect
 *   (one shared PROXY_READ_TIMEOUT_S deadline for resolve and connect) ->
 *   CONNECT: 200, then the ClientHello must name the same host (tls.h; ECH
 *   refused); plain: the head rewritten (origin form, hop-by-hop headers
 *   dropped, Connection: close) and exactly one body forwarded -> relay
 *   (splice through a pipe per direction, no copy through the daemon).
 *
 * Limits: connections per sandbox, per user and in all, from the daemon's
 * descriptor limit (budget.h, BUDGET_PROXY: 6 descriptors a connection; at
 * most 512 a sandbox and 8192 in all); past them a connection is closed at
 * once, and the log says which cap refused it.  An established relay is
 * closed after PROXY_IDLE_S without traffic either way.
 *
 * Threads: proxy_listen() blocks briefly (a thread joins the namespace) and
 * runs on the pool's work threads; proxy_unlisten(), proxy_kick() and
 * proxy_stats() never block (they queue a command for the loop).
 */
#ifndef SBX_NET_PROXY_H
#define SBX_NET_PROXY_H

#include <stdint.h>

#define PROXY_PORT 3128
#define PROXY_READ_TIMEOUT_S 15 /* DeerFlow's read timeouts */
#define PROXY_IDLE_S 600        /* an established relay with no traffic */

struct netpol;

int proxy_init(void);
/* Stop the loop: every listener and connection is closed. */
void proxy_shutdown(void);
/* Serve pol's sandbox: a listener on 127.0.0.1:PROXY_PORT in nsfd's network
 * namespace.  Returns its id (> 0), or 0 with errno (EADDRINUSE: something
 * in the sandbox holds the port). */
uint64_t proxy_listen(int nsfd, struct netpol *pol, const char *scope);
/* Close listener id and every connection it accepted. */
void proxy_unlisten(uint64_t id);
/* pol's decisions changed: connections held for approval look again. */
void proxy_kick(struct netpol *pol);

struct proxy_stats {
	uint64_t accepted, allowed, denied, refused; /* refused: malformed or limits */
	uint64_t active;
};

void proxy_stats(struct proxy_stats *st);

#endif
