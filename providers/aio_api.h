/* SPDX-License-Identifier: MIT */
/*
 * aio_api.h - a client of the AIO sandbox HTTP API (agent-infra/sandbox,
 * reference/remote-apis.md §B; DeerFlow's AioSandbox), for the aio
 * provider's containers (reached inside their network namespace) and for
 * an AIO sandbox at a base_url (the remote provider reuses it).
 *
 * Every call is one request through common/http; answers go through
 * checked decoders of the {success, message, data} envelope and its error
 * shapes, so no json_t leaves this module:
 *   HTTP 404 {"detail": "Not Found"}   the route is missing (an image older
 *                                      than 1.9.3 has no bash routes): NOTSUP
 *   HTTP 404 with the envelope         a session or command not found: GONE
 *   HTTP 422 {"detail": [...]}         request validation: INVAL
 *   HTTP 401/403                       the API key: ACCESS
 *   HTTP 200 {"success": false}        a tool-level failure: IO ("not found"
 *                                      in the message: GONE)
 * err (when given) gets one line: the server's message or the transport
 * failure.  Never sends an Accept of text/event-stream (remote-apis B.5).
 *
 * Thread-safe (no state); calls block up to the target's timeout.
 */
#ifndef SBX_AIO_API_H
#define SBX_AIO_API_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/err.h"

#define AIO_ERR_LEN 512

/* Where an AIO server is and how to talk to it. */
struct aio_target {
	const char *base_url; /* "http://127.0.0.1:8080" (no trailing slash) */
	int netns_fd;         /* >= 0: connect inside this network namespace */
	const char *api_key;  /* NULL or sent as X-AIO-API-Key (never logged) */
	long timeout_ms;      /* per request (0: 30 s) */
	const char *scope;    /* log scope */
	const int *cancel;    /* non-NULL: a non-zero value stops a request early */
};

enum aio_status {
	AIO_UNKNOWN,
	AIO_PENDING,
	AIO_RUNNING,
	AIO_COMPLETED,
	AIO_TIMED_OUT, /* bash: timed_out; shell: hard_timeout */
	AIO_KILLED,    /* bash: killed; shell: terminated */
	AIO_NO_CHANGE, /* shell: no_change_timeout */
};

struct aio_info {
	char home_dir[256];
	char version[64];
};

/* GET /v1/sandbox: OK when it answers 200 (readiness, DeerFlow's rule). */
enum sbx_err aio_sandbox(const struct aio_target *t, struct aio_info *info, char *err, size_t errlen);

struct aio_env {
	const char *key;
	const char *value;
};

struct aio_bash_request {
	const char *command;
	const char *session_id;
	const char *exec_dir;
	const struct aio_env *env;
	size_t n_env;
	bool async;           /* return at once with status running */
	double hard_timeout;  /* seconds; 0 = none */
	double timeout;       /* seconds the HTTP call waits for the end (not async); 0 = the server's default */
};

/* What /v1/bash/exec and /v1/bash/output answer. */
struct aio_bash_result {
	char session_id[128];
	char command_id[128];
	enum aio_status status;
	bool has_exit;
	int exit_code;
	char *out; /* new stdout bytes (malloc'd, may be NULL when empty) */
	size_t out_len;
	char *err; /* new stderr bytes */
	size_t err_len;
	long long offset, stderr_offset; /* where the next /v1/bash/output starts */
};

void aio_bash_result_clear(struct aio_bash_result *r);
enum sbx_err aio_bash_exec(const struct aio_target *t, const struct aio_bash_request *rq, struct aio_bash_result *r,
	char *err, size_t errlen);
/* POST /v1/bash/output with wait: returns when new output arrived, the
 * command ended, or wait_s passed. */
enum sbx_err aio_bash_output(const struct aio_target *t, const char *session_id, const char *command_id,
	long long offset, long long stderr_offset, double wait_s, struct aio_bash_result *r, char *err, size_t errlen);
/* signal: "SIGTERM", "SIGKILL" or "SIGINT" (the API's only ones). */
enum sbx_err aio_bash_kill(const struct aio_target *t, const char *session_id, const char *signal, char *err,
	size_t errlen);
enum sbx_err aio_bash_close(const struct aio_target *t, const char *session_id, char *err, size_t errlen);

/* The PTY shell API (images without /v1/bash): stdout and stderr merged. */
struct aio_shell_result {
	char session_id[128];
	enum aio_status status;
	bool has_exit;
	int exit_code;
	char *output; /* the whole output so far (malloc'd) */
	size_t output_len;
};

void aio_shell_result_clear(struct aio_shell_result *r);
enum sbx_err aio_shell_exec(const struct aio_target *t, const char *command, const char *exec_dir, double hard_timeout,
	struct aio_shell_result *r, char *err, size_t errlen);
enum sbx_err aio_shell_view(const struct aio_target *t, const char *session_id, struct aio_shell_result *r, char *err,
	size_t errlen);
/* POST /v1/shell/wait: returns when the command ended or seconds passed
 * (whole seconds: the API refuses fractions). */
enum sbx_err aio_shell_wait(const struct aio_target *t, const char *session_id, int seconds, char *err,
	size_t errlen);
enum sbx_err aio_shell_kill(const struct aio_target *t, const char *session_id, char *err, size_t errlen);

/* GET /v1/bash/sessions: fn for each session id. */
enum sbx_err aio_bash_sessions(const struct aio_target *t, void (*fn)(const char *id, void *arg), void *arg,
	char *err, size_t errlen);

/* ---- the file API (B.7) ---- */

struct aio_file {
	char name[256];
	bool is_dir;
	long long size;   /* -1: not given */
	double mtime;     /* 0: not given */
	int perm;         /* permission bits from "rwxr-xr-x", -1: not given */
};

/* POST /v1/file/list {path, show_hidden, include_size, include_permissions}:
 * fn for each entry (a non-zero return stops with NOMEM). */
enum sbx_err aio_file_list(const struct aio_target *t, const char *path, int (*fn)(const struct aio_file *f, void *arg),
	void *arg, char *err, size_t errlen);
/* GET /v1/file/download?path= with Range: bytes off..off+len-1 into fd (at
 * its offset); *got bytes.  GONE (404), ACCESS (403), ISDIR. */
enum sbx_err aio_file_download(const struct aio_target *t, const char *path, long long off, size_t len, int fd,
	size_t *got, char *err, size_t errlen);
/* POST /v1/file/upload (multipart: file = size bytes of fd from offset 0,
 * path): the file replaced (the server's umask decides its mode). */
enum sbx_err aio_file_upload(const struct aio_target *t, const char *path, int fd, long long size, char *err,
	size_t errlen);

/* ---- answers: the server's bytes -> the structs above ---- */

/* What each call above runs on the status and body of the server's answer
 * (len bytes at body; body may be NULL when len is 0), exposed for the unit
 * tests and tests/fuzz/json.c.  Each returns SBX_OK, or the envelope's error
 * (see the top), or SBX_ERR_IO when a field is missing or mistyped, with
 * one line in err.  Results are zeroed first (clear them after use). */

/* The envelope of body -> SBX_OK and its data (borrowed from *root, which
 * the caller decrefs), or the error. */
struct json_t;
enum sbx_err aio_envelope(long status, const char *body, size_t len, struct json_t **root, struct json_t **data,
	char *err, size_t errlen);
enum aio_status aio_status_parse(const char *s);
/* GET /v1/sandbox: SBX_OK on 200 (home_dir and version when given), ACCESS
 * on 401/403, BUSY otherwise (not ready). */
enum sbx_err aio_decode_sandbox(long status, const char *body, size_t len, struct aio_info *info, char *err,
	size_t errlen);
/* /v1/bash/exec (output false) and /v1/bash/output (output true). */
enum sbx_err aio_decode_bash(long status, const char *body, size_t len, bool output, struct aio_bash_result *r,
	char *err, size_t errlen);
/* /v1/shell/exec and /v1/shell/view. */
enum sbx_err aio_decode_shell(long status, const char *body, size_t len, struct aio_shell_result *r, char *err,
	size_t errlen);
/* GET /v1/bash/sessions: fn for each session id. */
enum sbx_err aio_decode_sessions(long status, const char *body, size_t len, void (*fn)(const char *id, void *arg),
	void *arg, char *err, size_t errlen);
/* POST /v1/file/list of path: fn for each entry, until one is malformed
 * (a name that is empty, ".", ".." or holds '/') or fn returns non-zero
 * (NOMEM). */
enum sbx_err aio_decode_file_list(long status, const char *body, size_t len, const char *path,
	int (*fn)(const struct aio_file *f, void *arg), void *arg, char *err, size_t errlen);
/* GET /v1/file/download of path answered status other than 200, 206 and
 * 416: its error (ISDIR for a 400 whose detail names a directory). */
enum sbx_err aio_decode_download_error(long status, const char *body, size_t len, const char *path, char *err,
	size_t errlen);

#endif
