/* SPDX-License-Identifier: MIT */
/*
 * http.h - the one HTTP client layer (libcurl) every HTTP-speaking module
 * shares: the Docker Engine API over its unix socket, the AIO sandbox API
 * inside a container's network namespace or at a base_url, OpenSandbox.
 *
 * What it gives:
 *   - one CURLSH share (connection cache, DNS cache, TLS sessions) for the
 *     whole daemon, with a mutex per shared kind, so calls from many
 *     threads reuse connections instead of opening one per call;
 *   - a request described by one struct (method, URL, headers, a JSON,
 *     in-memory or fd body, timeouts) and performed with one call;
 *   - the response body into a bounded struct buf (its cap is mandatory: a
 *     runaway server fails the call with SBX_ERR_TOOBIG, it never grows the
 *     daemon), or into a streaming callback;
 *   - HTTP over a unix socket (unix_socket: the Docker socket);
 *   - connections opened inside another network namespace (netns_fd: a
 *     container's API on its loopback, no published port; common/netns.h).
 *     Such connections are never reused nor cached: two containers' APIs on
 *     127.0.0.1:8080 are different servers with the same address;
 *   - only http and https: every handle refuses other schemes (gopher,
 *     dict, file, ...), never follows a redirect and refuses a URL with
 *     credentials in it, whatever URL a server made the daemon build;
 *   - deadlines and cancellation (common/token.h): a transfer is bounded by
 *     the time its token has left and stops at once when it is cancelled
 *     (SBX_ERR_INTR), the token being rq->token or the thread's current one;
 *   - errors at one edge: transport failures as enum sbx_err, the status
 *     code for the caller's own decoder (http_status_err() is the default
 *     mapping); CURLcode never leaves http.c;
 *   - a request id ("h<n>") in every log line about a request; header
 *     values marked secret (Authorization, API keys) and query strings are
 *     never logged.
 *
 * Thread-safe: any thread may perform requests concurrently; a request
 * blocks its thread up to its timeouts, so callers run them off the FUSE
 * workers (providers' slots already are).  No lock is held across a
 * transfer except curl's own share locks, which guard in-memory caches only.
 */
#ifndef SBX_HTTP_H
#define SBX_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#include "buf.h"
#include "err.h"
#include "token.h"

#define HTTP_CONNECT_TIMEOUT_MS 5000
#define HTTP_DEADLINE_SLACK_MS 20 /* a curl timeout this close to a token's deadline is the deadline */
#define HTTP_CAP_SMALL (256 * 1024)      /* an API answer: status, inspect, envelope */
#define HTTP_CAP_LIST (16 * 1024 * 1024) /* a listing (containers by label, files) */

struct http_header {
	const char *name;
	const char *value;
	bool secret; /* shown as "***" in logs (Authorization, X-AIO-API-Key, ...) */
};

/* A streaming response consumer: called with each piece of the body as it
 * arrives.  Return true to go on, false to stop the transfer (the perform
 * then succeeds with aborted set). */
typedef bool (*http_sink_fn)(const char *data, size_t len, void *arg);

/* One part of a multipart/form-data body (RFC 7578): its content is data
 * (len bytes) or, with from_fd, size bytes of fd read from offset 0 with
 * pread (the fd's offset is not used).  filename makes it a file part. */
struct http_part {
	const char *name;
	const char *filename; /* NULL: a plain field */
	const char *type;     /* Content-Type of the part, NULL: curl's default */
	const void *data;
	size_t len;
	bool from_fd;
	int fd;
	long long size;
};

struct http_request {
	const char *method; /* "GET", "POST", "PUT", "DELETE", "HEAD", "PATCH" */
	const char *url;    /* absolute http(s)://host[:port]/path[?query] */
	const char *unix_socket; /* non-NULL: HTTP over this unix socket (the URL's host is only a name) */
	int netns_fd;            /* >= 0: open the connection inside this network namespace */
	const struct http_header *headers;
	size_t n_headers;
	/* the body: at most one of json, body/body_len, body_fd, parts */
	const json_t *json; /* sent as application/json */
	const void *body;
	size_t body_len;
	int body_fd;         /* >= 0: sent from the fd's current offset, body_size bytes */
	long long body_size;
	const char *content_type; /* of body / body_fd */
	const struct http_part *parts; /* multipart/form-data (POST) */
	size_t n_parts;
	/* the response: exactly one of out (bounded by its cap) and sink */
	struct buf *out;
	http_sink_fn sink;
	void *sink_arg;
	/* with sink: the body of a response whose status is not 2xx goes here
	 * instead of the sink (an error document; bounded by its cap, excess
	 * dropped), so a streaming caller never mistakes it for data */
	struct buf *err_out;
	/* with sink: told the status once, before the first byte of the body
	 * (e.g. a 200 where a 206 to a Range request was expected) */
	void (*on_status)(long status, void *sink_arg);
	long connect_timeout_ms; /* 0: HTTP_CONNECT_TIMEOUT_MS */
	long timeout_ms;         /* whole transfer; 0: no limit (streams: use stall_ms) */
	long stall_ms;           /* fail when no byte moves for this long; 0: off */
	const int *cancel;       /* non-NULL: the transfer stops soon after *cancel becomes non-zero */
	struct token *token;     /* NULL: token_current(); bounds the whole transfer, cancels it at once */
	const char *scope;       /* log scope, e.g. "alice/t1" or "docker" */
};

#define HTTP_REQUEST_INIT { .method = "GET", .netns_fd = -1, .body_fd = -1 }

struct http_response {
	long status;           /* HTTP status, 0 when none was received */
	char id[16];           /* "h<n>": the request id in the logs */
	char error[256];       /* transport failure, "" when none */
	char content_type[96]; /* of the response, "" when absent */
	bool aborted;          /* the sink stopped the transfer */
	bool cancelled;        /* *cancel or the token stopped it */
	double seconds;        /* total time */
};

/* The least rate a file transfer is allowed (bytes a second): a transfer
 * of n bytes gets http_transfer_ms(base, n) in total, so a server that
 * drips a byte at a time (which curl's stall limit never catches) cannot
 * hold the daemon's thread for longer, even without a token. */
#define HTTP_MIN_RATE (64 * 1024)
long http_transfer_ms(long base_ms, long long bytes);

/* Start of day (main thread, before any request): curl's global state and
 * the share.  0, or -1 when curl cannot be initialised.  Idempotent. */
int http_init(void);
/* End of day (main thread, after the last request). */
void http_cleanup(void);

/* Perform rq; fill rs (always, also on failure).  Returns SBX_OK once an
 * HTTP response arrived (whatever its status) or the sink stopped it;
 * SBX_ERR_IO when no connection or no complete response (rs->error says
 * why), SBX_ERR_TIMEOUT (rq's timeouts, or the token's deadline),
 * SBX_ERR_INTR (*cancel or the token cancelled it), SBX_ERR_TOOBIG (the
 * body exceeded rq->out's cap), SBX_ERR_NOMEM, SBX_ERR_INVAL (a malformed
 * request, a scheme other than http/https, credentials in the URL: refused
 * before any connection). */
enum sbx_err http_perform(const struct http_request *rq, struct http_response *rs);

/* The default meaning of an HTTP status: 2xx/3xx OK; 400, 405, 422 INVAL;
 * 401, 403 ACCESS; 404, 410 GONE; 408, 504 TIMEOUT; 409 EXIST; 413 TOOBIG;
 * 429, 503 BUSY; 507 NOSPC; anything else IO. */
enum sbx_err http_status_err(long status);

/* Append s percent-encoded (everything but RFC 3986's unreserved
 * characters) to b: a path or query value in a URL.  0 or -1 (b freed). */
__attribute__((warn_unused_result)) int http_escape(struct buf *b, const char *s);

/* A ranged download into a file: rq->sink = http_range_sink, rq->on_status
 * = http_range_status, both with a struct http_range as their argument.
 * Bytes [off, off + want) of the resource are written to fd at its current
 * position; a server that ignores Range (200 instead of 206) has what
 * precedes off dropped.  got counts what was written; werr is the errno of
 * a failed write (the transfer stops). */
struct http_range {
	int fd;
	long long off;
	size_t want, got, skip;
	int werr;
};
bool http_range_sink(const char *data, size_t len, void *arg);
void http_range_status(long status, void *arg);

/* A URL as libcurl reads it (RFC 3986 with curl's normalisation: the
 * scheme lower-cased, IPv4 numbers in dotted form, IPv6 in brackets). */
struct http_url {
	char scheme[16];
	char host[256];
	long port;     /* 0: none given */
	bool userinfo; /* a user name or password before the host */
	bool query;    /* a '?' part, even an empty one */
	bool fragment; /* a '#' part, even an empty one */
	char url[1024]; /* the whole URL, normalised */
};

/* Parse url, whatever its scheme.  0, or -1 when it is no URL (or longer
 * than struct http_url holds). */
int http_url_parse(const char *url, struct http_url *out);
/* Whether host (as in struct http_url) names this machine's loopback:
 * "localhost", 127.0.0.0/8, [::1] or [::ffff:127.x.y.z].  A name that
 * merely begins like one ("localhost.example", "127.0.0.1.nip.io") is not. */
bool http_host_loopback(const char *host);

/* "Name: value" for a log line, the value shown as "***" when secret. */
void http_header_for_log(const struct http_header *h, char *out, size_t len);
/* The URL for a log line: scheme, host and path; the query (which may carry
 * an api_key) is replaced by "?...". */
void http_url_for_log(const char *url, char *out, size_t len);

#endif
