/* SPDX-License-Identifier: MIT */
/*
 * opensandbox_api.h - a client of the two HTTP APIs of an OpenSandbox
 * server (reference/remote-apis.md §A; the OpenAPI files
 * sandbox-lifecycle.yml and execd-api.yaml): the lifecycle server (create,
 * get, list, delete, renew, endpoints) and execd inside each sandbox
 * (commands as an event stream, the files API).
 *
 * Every call is one request through common/http (one connection cache for
 * the daemon, HTTP keep-alive); answers go through checked decoders, so no
 * json_t leaves this module.  Error documents, in their three shapes:
 *   {"code", "message"}         lifecycle and execd (X-Request-ID logged)
 *   {"detail": [...]}           request validation (422)
 *   {"error": "..."}            execd's access-token middleware (401)
 * map to enum sbx_err: 401/403 ACCESS, 404 GONE, 409 EXIST, 400/422 INVAL,
 * 5xx IO; execd's RUNTIME_ERROR by its message (sbx_err_from_message:
 * "no such file" GONE, "directory not empty" NOTEMPTY, ...).  A 404 whose
 * code names the sandbox (DOCKER::SANDBOX_NOT_FOUND, KUBERNETES::...) sets
 * *gone in the calls that can meet it: the sandbox itself vanished.  err
 * (when given) gets one line: the server's code and message, or the
 * transport failure.  Secrets (the API key, execd's token, endpoint headers
 * such as OpenSandbox-Secure-Access) are never logged.
 *
 * Thread-safe (no state); a call blocks up to its target's timeout.
 */
#ifndef SBX_OPENSANDBOX_API_H
#define SBX_OPENSANDBOX_API_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../common/err.h"

#define OSAPI_ERR_LEN 512
#define OSAPI_EXECD_PORT 44772
#define OSAPI_MAX_HEADERS 8
#define OSAPI_MAX_META 16

struct osapi_kv {
	const char *key;
	const char *value;
};

/* The lifecycle server. */
struct osapi_server {
	const char *base;    /* "http://host:port/v1" (no trailing slash) */
	const char *api_key; /* NULL or "": no OPEN-SANDBOX-API-KEY header */
	long timeout_ms;     /* per request */
	const char *scope;   /* log scope */
};

/* An execd endpoint, as the lifecycle server resolved it (immutable once
 * made: callers share it read-only). */
struct osapi_execd {
	char base[1024]; /* scheme "://" endpoint, e.g. "http://10.0.0.5:40123/proxy/44772" */
	int n_headers;   /* the endpoint's headers, sent on every execd request */
	char hname[OSAPI_MAX_HEADERS][64];
	char hvalue[OSAPI_MAX_HEADERS][512];
	char token[256]; /* X-EXECD-ACCESS-TOKEN, "" = none */
	long timeout_ms; /* per plain request; also the stall limit of streams */
	char scope[256];
};

/* A sandbox as GET /sandboxes/{id} (or create, or list) describes it. */
struct osapi_sandbox {
	char id[80];
	char state[32];   /* Pending, Running, ..., or whatever the server says */
	char reason[64];
	char message[256];
	bool has_expires; /* absent: no TTL */
	double expires_at, created_at;
	size_t n_meta;
	struct {
		char key[64];
		char value[64];
	} meta[OSAPI_MAX_META];
};

const char *osapi_meta(const struct osapi_sandbox *sb, const char *key);

struct osapi_egress {
	const char *action; /* "allow" | "deny" */
	const char *target; /* a domain ("pypi.org", "*.example.com") */
};

struct osapi_create_req {
	const char *image;
	const char *const *entrypoint; /* NULL-terminated, at least one */
	long timeout;                  /* seconds; 0 = no TTL (null) */
	const struct osapi_kv *env;
	size_t n_env;
	const struct osapi_kv *metadata;
	size_t n_metadata;
	const struct osapi_kv *resources; /* resourceLimits, e.g. cpu "1", memory "2Gi" */
	size_t n_resources;
	const char *net_default; /* NULL: no networkPolicy; else "allow" | "deny" */
	const struct osapi_egress *egress;
	size_t n_egress;
};

/* POST /sandboxes (202): the new sandbox (its state may still be Pending). */
enum sbx_err osapi_create(const struct osapi_server *srv, const struct osapi_create_req *rq, struct osapi_sandbox *out,
	char *err, size_t errlen);
/* GET /sandboxes/{id}: GONE on 404. */
enum sbx_err osapi_get(const struct osapi_server *srv, const char *id, struct osapi_sandbox *out, char *err,
	size_t errlen);
/* GET /sandboxes?metadata=...&state=... (every page): fn for each item. */
enum sbx_err osapi_list(const struct osapi_server *srv, const struct osapi_kv *meta, size_t n_meta,
	const char *const *states, void (*fn)(const struct osapi_sandbox *sb, void *arg), void *arg, char *err,
	size_t errlen);
/* DELETE /sandboxes/{id}: SBX_OK also when it was already gone (404). */
enum sbx_err osapi_delete(const struct osapi_server *srv, const char *id, char *err, size_t errlen);
/* POST /sandboxes/{id}/renew-expiration {expiresAt: at}: *got the new
 * expiry.  GONE on 404, EXIST on 409 (no TTL), INVAL on 400. */
enum sbx_err osapi_renew(const struct osapi_server *srv, const char *id, double at, double *got, char *err,
	size_t errlen);
/* GET /sandboxes/{id}/endpoints/{port}[?use_server_proxy=true]: out->base
 * is scheme "://" endpoint, out->headers the returned ones.  An endpoint
 * given with a scheme other than `scheme` (the configured protocol), or
 * with credentials, a query or a fragment, or that is no URL, is refused:
 * SBX_ERR_PERM, err naming it (credentials shown as "***"). */
enum sbx_err osapi_endpoint(const struct osapi_server *srv, const char *id, int port, bool server_proxy,
	const char *scheme, struct osapi_execd *out, char *err, size_t errlen);

/* ---- execd ---------------------------------------------------------------------------- */

/* GET /ping: SBX_OK on 200. */
enum sbx_err osapi_ping(const struct osapi_execd *ex, long timeout_ms, char *err, size_t errlen);

struct osapi_cmd {
	const char *command; /* run by execd as bash -c COMMAND */
	const char *cwd;
	long long timeout_ms; /* 0: none */
	const struct osapi_kv *envs;
	size_t n_envs;
};

enum osapi_stream { OSAPI_STDOUT = 1, OSAPI_STDERR = 2 };

/* What the event stream of POST /command delivers, as it arrives (on the
 * calling thread).  on_output gets one line of output without its
 * terminator (execd's unit); false stops the stream. */
struct osapi_cmd_events {
	void (*on_init)(const char *id, void *arg);
	bool (*on_output)(enum osapi_stream s, const char *text, size_t len, void *arg);
	/* MAY: after each piece of the stream was parsed (the lines of one
	 * read): a consumer that batches its writes flushes them here */
	void (*on_flush)(void *arg);
	void *arg;
};

struct osapi_cmd_result {
	bool saw_init;
	char id[128];     /* the command's id (init) */
	bool ended;       /* a terminal event arrived (execution_complete or error) */
	bool has_exit;    /* exit_code is the command's (execution_complete: 0; error: evalue) */
	int exit_code;    /* -1: killed by a signal (execd says no more) */
	bool start_failed; /* error whose evalue is not a number: the command did not start */
	char error[256];  /* the error event's evalue/traceback, "" */
	unsigned bad_events; /* events that were not JSON (skipped) */
	bool stopped;     /* on_output asked to stop */
};

/* POST /command and read its stream until the terminal event (then the
 * transfer stops at once: execd holds the connection ~1 s more) or until
 * the stream ends or fails.  SBX_OK once a stream was read (check
 * r->ended: false when it broke first); an error when the command was
 * refused (400: cwd missing, ...) or execd unreachable.  *cancel stops it. */
enum sbx_err osapi_command(const struct osapi_execd *ex, const struct osapi_cmd *cmd,
	const struct osapi_cmd_events *ev, const int *cancel, struct osapi_cmd_result *r, bool *gone, char *err,
	size_t errlen);
/* DELETE /command?id=: interrupt (execd: SIGTERM, SIGKILL ~3 s later). */
enum sbx_err osapi_interrupt(const struct osapi_execd *ex, const char *id, char *err, size_t errlen);

struct osapi_cmd_status {
	bool running;
	bool has_exit;
	int exit_code; /* -1 after a signal */
	char error[256];
};

/* GET /command/status/{id}: GONE when execd does not know the id. */
enum sbx_err osapi_command_status(const struct osapi_execd *ex, const char *id, struct osapi_cmd_status *st,
	bool *gone, char *err, size_t errlen);

/* ---- execd files ------------------------------------------------------------------------ */

/* FileInfo (A.10.4) decoded. */
struct osapi_fileinfo {
	char name[256]; /* the last component of path */
	mode_t mode;    /* S_IF* | permission bits */
	long long size;
	double mtime, ctime;
};

enum sbx_err osapi_info(const struct osapi_execd *ex, const char *path, struct osapi_fileinfo *fi, bool *gone,
	char *err, size_t errlen);
/* GET /directories/list?path=&depth=1: fn for each entry. */
enum sbx_err osapi_list_dir(const struct osapi_execd *ex, const char *path,
	int (*fn)(const struct osapi_fileinfo *fi, void *arg), void *arg, bool *gone, char *err, size_t errlen);
/* GET /files/download with Range: bytes off..off+len-1, written to fd (at
 * its offset): *got bytes. */
enum sbx_err osapi_download(const struct osapi_execd *ex, const char *path, off_t off, size_t len, int fd,
	size_t *got, bool *gone, char *err, size_t errlen);

struct osapi_upload {
	const char *path;
	int fd; /* content: size bytes from offset 0 (pread) */
	long long size;
	unsigned mode; /* permission bits; 0: execd's default (0644, chmod skipped) */
};

/* POST /files/upload: the files, as metadata/file part pairs. */
enum sbx_err osapi_upload(const struct osapi_execd *ex, const struct osapi_upload *files, size_t n, bool *gone,
	char *err, size_t errlen);
/* DELETE /files?path= (a missing path is no error; a directory is ISDIR). */
enum sbx_err osapi_delete_file(const struct osapi_execd *ex, const char *path, bool *gone, char *err, size_t errlen);
/* POST /directories {path: {mode}}: mkdir -p. */
enum sbx_err osapi_make_dir(const struct osapi_execd *ex, const char *path, unsigned mode, bool *gone, char *err,
	size_t errlen);
/* POST /directories {path: {mode}, ...}: mkdir -p of n directories at once. */
enum sbx_err osapi_make_dirs(const struct osapi_execd *ex, const char *const *paths, const unsigned *modes, size_t n,
	bool *gone, char *err, size_t errlen);
/* DELETE /directories?path=: rm -rf (a missing path is no error). */
enum sbx_err osapi_delete_dir(const struct osapi_execd *ex, const char *path, bool *gone, char *err, size_t errlen);
/* POST /files/mv [{src, dest}]: EXIST when dest exists. */
enum sbx_err osapi_move(const struct osapi_execd *ex, const char *src, const char *dest, bool *gone, char *err,
	size_t errlen);
/* POST /files/permissions {path: {mode}} (mode must not be 0: execd skips it). */
enum sbx_err osapi_chmod(const struct osapi_execd *ex, const char *path, unsigned mode, bool *gone, char *err,
	size_t errlen);

/* ---- answers: the servers' bytes -> the structs above ----------------------------------------- */

/* What each call above runs on the body of a 2xx answer (len bytes at
 * body; body may be NULL when len is 0), exposed for the unit tests and
 * tests/fuzz/json.c.  Each returns SBX_OK, or SBX_ERR_IO with one line in
 * err when the body is not JSON or a field it uses is missing or mistyped
 * (fields it does not use are ignored: both servers leave out null fields). */

/* A sandbox (POST /sandboxes, GET /sandboxes/{id}). */
enum sbx_err osapi_decode_sandbox(const char *body, size_t len, struct osapi_sandbox *sb, char *err, size_t errlen);
/* One page of GET /sandboxes: fn for each well-formed item (others are
 * skipped); *more when the server says another page follows. */
enum sbx_err osapi_decode_list(const char *body, size_t len, void (*fn)(const struct osapi_sandbox *sb, void *arg),
	void *arg, bool *more, char *err, size_t errlen);
/* POST /sandboxes/{id}/renew-expiration: the new expiresAt. */
enum sbx_err osapi_decode_renew(const char *body, size_t len, double *got, char *err, size_t errlen);
/* GET /sandboxes/{id}/endpoints/{port}: out->base (scheme "://" endpoint
 * unless the endpoint has a scheme, no trailing '/') and out->headers;
 * refused when the endpoint names no host ("/x", "http:///x"), when it or
 * a header could smuggle a header or a URL part (control bytes, spaces,
 * quotes), is too long, or there are more than OSAPI_MAX_HEADERS headers.  timeout_ms and scope are left 0/"". */
enum sbx_err osapi_decode_endpoint(const char *body, size_t len, const char *scheme, struct osapi_execd *out,
	char *err, size_t errlen);
/* GET /command/status/{id}. */
enum sbx_err osapi_decode_status(const char *body, size_t len, struct osapi_cmd_status *st, char *err, size_t errlen);
/* GET /files/info?path= (one FileInfo keyed by the path). */
enum sbx_err osapi_decode_info(const char *body, size_t len, const char *path, struct osapi_fileinfo *fi, char *err,
	size_t errlen);
/* GET /directories/list?path=&depth=1: fn for each entry, until one is
 * malformed (a name that is empty, "." or "..") or fn returns non-zero (NOMEM). */
enum sbx_err osapi_decode_listing(const char *body, size_t len, const char *path,
	int (*fn)(const struct osapi_fileinfo *fi, void *arg), void *arg, char *err, size_t errlen);

/* ---- decoders, exposed for the unit tests -------------------------------------------------- */

/* RFC 3339 ("2026-01-01T10:00:00.123Z", "+02:00", Go's nanoseconds) -> epoch seconds. */
int osapi_parse_time(const char *s, double *out);
/* An error document -> enum sbx_err and one line in err; *gone when its
 * code says the sandbox itself is not found. */
enum sbx_err osapi_error(long status, const char *body, size_t len, bool *gone, char *err, size_t errlen);

/* One event-stream parser, in opensandbox_sse.c (both forms: bare JSON
 * lines and "data: " lines; blank, ":" comment, event:, id: and retry:
 * lines are skipped). */
struct osapi_sse {
	char *line;   /* the current line (malloc'd, grows up to OSAPI_SSE_LINE_MAX) */
	size_t len, alloc;
	bool overflow; /* the current line passed the cap: it is dropped */
	const struct osapi_cmd_events *ev;
	struct osapi_cmd_result *r;
};

#define OSAPI_SSE_LINE_MAX (8 * 1024 * 1024)

void osapi_sse_init(struct osapi_sse *p, const struct osapi_cmd_events *ev, struct osapi_cmd_result *r);
/* Feed bytes; false once a terminal event was read (or on_output said stop). */
bool osapi_sse_feed(struct osapi_sse *p, const char *data, size_t len);
void osapi_sse_free(struct osapi_sse *p);

#endif
