/* SPDX-License-Identifier: MIT */
/*
 * httpreader.h - the proxy's strict HTTP/1.x request reader (reference §7.3);
 * the daemon's HTTP client is another thing, common/http.h (libcurl).
 *
 * The proxy speaks HTTP only to read one request head per connection and to
 * answer it; what follows is relayed.  The reader refuses rather than
 * guesses, because a request that two parsers read differently is how a
 * proxy gets smuggled past:
 *   - HTTP/1.0 and HTTP/1.1 only (505 for another version);
 *   - CRLF line ends, single spaces in the request line, token header names
 *     with no space before the colon, no control bytes in values;
 *   - obsolete line folding (a header line starting with SP or HT): 400;
 *   - Content-Length together with Transfer-Encoding: 400; several
 *     Content-Lengths that differ: 400; a Transfer-Encoding other than
 *     "chunked": 501; Expect: 417;
 *   - CONNECT takes an authority "host:port"; any other method an
 *     absolute-form URL with scheme http (origin-form or https: 400);
 *   - a Host header, when present, must name the target (host, or
 *     host:port); HTTP/1.1 requests other than CONNECT must have one;
 *     two Host headers: 400.
 * Ports and names are checked by the caller (policy.h), which needs the
 * host as the client wrote it.
 *
 * Pure functions, no lock; the unit tests drive them directly.
 */
#ifndef SBX_NET_HTTPREADER_H
#define SBX_NET_HTTPREADER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../common/buf.h"

#define HTTP_HEAD_MAX (64 * 1024) /* bytes of a request head (DeerFlow's 65536) */

struct http_req {
	bool connect;       /* CONNECT host:port; else plain HTTP in absolute form */
	char method[16];
	char host[256];     /* as written in the target (not yet canonical) */
	int port;
	int minor;          /* HTTP/1.minor */
	long long content_length; /* -1: none */
	bool chunked;
	const char *path;   /* plain: the origin-form path inside the parsed head */
	size_t path_len;
};

/* The length of the head at p (through the empty line), 0 when it is not
 * complete yet, -1 when it cannot fit HTTP_HEAD_MAX.  p[0..from) was
 * scanned before without finding the end (a client's head arrives in
 * pieces: scanning it whole after each would be quadratic). */
ssize_t http_head_len(const char *p, size_t len, size_t from);

/* Parse the complete head p[0..len).  0, or an HTTP status to answer with
 * (400, 405, 417, 501, 505) and *why a short reason. */
int http_parse(const char *p, size_t len, struct http_req *r, const char **why);

/* The head to send upstream for a plain request: origin-form request line,
 * the client's headers without hop-by-hop ones (Connection and what it
 * names, Keep-Alive, Proxy-*, TE, Trailer, Upgrade), and Connection: close.
 * Host, Content-Length and Transfer-Encoding stay even when Connection names
 * them (the upstream must frame the body as the proxy does).
 * 0 or -1 (ENOMEM/E2BIG). */
int http_upstream_head(const char *p, size_t len, const struct http_req *r, struct buf *out);

/* A chunked body's framing, followed as its bytes go by, so that exactly one
 * request body is forwarded (one request per connection). */
struct http_chunked {
	int state;
	unsigned long long left; /* bytes of the current chunk still to come */
	unsigned line;           /* length of the size or trailer line so far */
	unsigned trailer;        /* bytes of trailers so far */
	bool done;
};

/* Feed n bytes: returns how many of them belong to the body (all of them
 * until the end of the body is seen; then done is set and the rest is not
 * the body's), or -1 when the framing is malformed. */
ssize_t http_chunked_feed(struct http_chunked *c, const char *p, size_t n);

#endif
