/* SPDX-License-Identifier: MIT */
/*
 * docker_api.h - a client of the Docker Engine API over dockerd's unix
 * socket (common/http.h), for the docker and aio providers.  No docker CLI.
 *
 * The API version is negotiated with GET /version on first use (the
 * server's version, refused below 1.41) and again after a request found
 * dockerd unreachable (it may come back upgraded).  Every answer is decoded
 * at this boundary by a checked decoder into the structs below (a missing or
 * mistyped field fails the call with SBX_ERR_IO and names the field); no
 * json_t leaves this module.
 *
 * Errors: SBX_ERR_GONE for 404 (no such container, image or exec),
 * SBX_ERR_EXIST for 409 (name in use, container not running), SBX_ERR_IO
 * when dockerd is unreachable or answers 5xx; err (when given) gets one
 * line: dockerd's message, or "dockerd is not reachable at unix://PATH: ...".
 *
 * Thread-safe: one struct docker serves every thread (its version is
 * guarded by a mutex held only around the copy).  Calls block for up to the
 * client's timeout; call them off the FUSE workers.
 */
#ifndef SBX_DOCKER_API_H
#define SBX_DOCKER_API_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "../common/err.h"

#define DOCKER_ID_LEN 64
#define DOCKER_MIN_API "1.41"
#define DOCKER_ERR_LEN 512

struct docker;

/* A client of the dockerd at socket_path; no I/O yet.  timeout_ms bounds
 * each request (0: 30 s).  NULL on ENOMEM. */
struct docker *docker_new(const char *socket_path, long timeout_ms);
void docker_free(struct docker *d);
const char *docker_socket_path(const struct docker *d);
/* GET /version: SBX_OK and the version in use ("1.41"), or why not. */
enum sbx_err docker_negotiate(struct docker *d, char *version, size_t vlen, char *err, size_t errlen);
/* Whether the last negotiation found Podman's Docker-compatible API (its
 * /version names a "Podman Engine" component); false before one. */
bool docker_is_podman(struct docker *d);

/* ---- containers ------------------------------------------------------------------- */

struct docker_mount {
	const char *source; /* host path (must exist) */
	const char *target; /* path in the container */
	bool read_only;
};

struct docker_kv {
	const char *key;
	const char *value;
};

struct docker_create_spec {
	const char *name;
	const char *image;
	const char *user;     /* "uid:gid", or NULL for the image's */
	const char *hostname;
	const char *workdir;  /* NULL: the image's */
	const char *const *entrypoint; /* NULL-terminated, or NULL for the image's */
	const char *const *cmd;        /* NULL-terminated, or NULL for the image's */
	const char *const *env;        /* "KEY=VALUE", NULL-terminated, or NULL */
	const struct docker_kv *labels;
	size_t n_labels;
	const struct docker_mount *mounts;
	size_t n_mounts;
	const char *network_mode;      /* "none", "bridge", ... */
	const char *const *cap_add;    /* added after dropping ALL, NULL-terminated, or NULL */
	const char *seccomp_profile;   /* a seccomp profile (JSON) in place of Docker's default, or NULL */
	const char *seccomp_profile_file; /* the same profile in a file on the engine's host (Podman reads it) */
	long long memory;              /* bytes (also the memory+swap limit: no swap); 0 = none */
	long long nano_cpus;           /* 1e9 = one CPU; 0 = none */
	long long pids_limit;          /* 0 = none */
	long long tmp_size;            /* bytes of the /tmp tmpfs; 0 = no tmpfs on /tmp */
};

struct docker_label {
	char *key;
	char *value;
};

struct docker_container {
	char id[DOCKER_ID_LEN + 1];
	char name[256];   /* without the leading '/' */
	char status[32];  /* "created", "running", "exited", ... */
	bool running;
	pid_t pid;        /* host pid of its first process, 0 when not running */
	int exit_code;
	char image[256];
	long long created_ns; /* when dockerd made it (ns since the epoch; inspect only, 0 in summaries) */
	struct docker_label *labels; /* owned: docker_container_clear() */
	size_t n_labels;
};

/* An RFC 3339 time as dockerd writes it ("2024-05-01T12:34:56.123456789Z",
 * or with a +hh:mm offset) into ns since the epoch: 0, or -1 when it is not
 * one. */
int docker_time_ns(const char *s, long long *ns);
/* The value of label key, or NULL. */
const char *docker_label(const struct docker_container *c, const char *key);
void docker_container_clear(struct docker_container *c);

/* POST /containers/create; id gets the new container's id.  GONE: no such
 * image (sbxfs never pulls); EXIST: the name is taken. */
enum sbx_err docker_create(struct docker *d, const struct docker_create_spec *s, char id[DOCKER_ID_LEN + 1],
	char *err, size_t errlen);
enum sbx_err docker_start(struct docker *d, const char *id, char *err, size_t errlen);
/* GET /containers/{id}/json into c (clear it after use). */
enum sbx_err docker_inspect(struct docker *d, const char *id, struct docker_container *c, char *err, size_t errlen);
/* POST /containers/{id}/kill (signal: "KILL", "TERM", ...).  OK when not running. */
enum sbx_err docker_kill(struct docker *d, const char *id, const char *signal, char *err, size_t errlen);
/* POST /containers/{id}/pause or /unpause (the cgroup freezer): every
 * process of the container stops or resumes.  OK when it already is. */
enum sbx_err docker_pause(struct docker *d, const char *id, bool pause, char *err, size_t errlen);
/* POST /containers/{id}/stop?t=SECS: SIGTERM, SIGKILL after secs.  OK when
 * not running. */
enum sbx_err docker_stop(struct docker *d, const char *id, int secs, char *err, size_t errlen);
/* DELETE /containers/{id}?force=1&v=1.  OK when already gone. */
enum sbx_err docker_remove(struct docker *d, const char *id, char *err, size_t errlen);
/* GET /containers/json?all=1 filtered by every label of labels ("key=value"):
 * fn for each (summaries carry id, name, status, running and labels; pid 0). */
enum sbx_err docker_list(struct docker *d, const char *const *labels,
	void (*fn)(const struct docker_container *c, void *arg), void *arg, char *err, size_t errlen);
/* GET /images/{name}/json: OK when the image exists here; user gets the
 * image's configured user ("" when none) when non-NULL. */
enum sbx_err docker_image_exists(struct docker *d, const char *image, char *user, size_t ulen, char *err,
	size_t errlen);

/* ---- exec ------------------------------------------------------------------------ */

struct docker_exec_spec {
	const char *const *argv; /* NULL-terminated */
	const char *user;        /* "uid:gid" or NULL */
	const char *workdir;     /* or NULL */
	bool attach;             /* attach stdout and stderr (docker_exec_start with a sink) */
};

struct docker_exec_info {
	bool running;
	int exit_code; /* valid when !running */
	pid_t pid;     /* host pid of the exec'd process (0 when unknown) */
};

/* One piece of an attached exec's output: stream 1 = stdout, 2 = stderr.
 * Return false to stop reading (the exec goes on). */
typedef bool (*docker_stream_fn)(int stream, const char *data, size_t len, void *arg);

enum sbx_err docker_exec_create(struct docker *d, const char *container, const struct docker_exec_spec *s,
	char id[DOCKER_ID_LEN + 1], char *err, size_t errlen);
/* POST /exec/{id}/start.  fn == NULL: detached (returns once it runs);
 * else attached: fn gets the demultiplexed output until the exec ends, fn
 * stops, or nothing arrives for stall_ms (SBX_ERR_TIMEOUT). */
enum sbx_err docker_exec_start(struct docker *d, const char *id, docker_stream_fn fn, void *arg, long stall_ms,
	char *err, size_t errlen);
enum sbx_err docker_exec_inspect(struct docker *d, const char *id, struct docker_exec_info *info, char *err,
	size_t errlen);

/* ---- answers: dockerd's bytes -> the structs above --------------------------------- */

/* What each call above runs on the body of dockerd's answer (len bytes at
 * body; body may be NULL when len is 0), exposed for the unit tests and
 * tests/fuzz/json.c.  Each returns SBX_OK, or SBX_ERR_IO with err naming
 * the field that is missing or mistyped (body not JSON included). */

/* The {"message"} of an answer of an unexpected status: that status's error
 * (SBX_ERR_IO for a 2xx or 3xx: never SBX_OK), err "WHAT: dockerd answered
 * STATUS: MESSAGE". */
enum sbx_err docker_decode_error(long status, const char *body, size_t len, const char *what, char *err,
	size_t errlen);
/* GET /version: its ApiVersion; SBX_ERR_NOTSUP below DOCKER_MIN_API. */
enum sbx_err docker_decode_version(const char *body, size_t len, char *version, size_t vlen, char *err,
	size_t errlen);
/* GET /version: whether a component is "Podman Engine". */
bool docker_decode_podman(const char *body, size_t len);
/* The 201 of a create (container, exec): its Id. */
enum sbx_err docker_decode_id(const char *body, size_t len, char id[DOCKER_ID_LEN + 1], char *err, size_t errlen);
/* GET /containers/{id}/json (c zeroed, then owned by the caller on SBX_OK). */
enum sbx_err docker_decode_inspect(const char *body, size_t len, struct docker_container *c, char *err,
	size_t errlen);
/* GET /containers/json: fn for each summary, until one is malformed. */
enum sbx_err docker_decode_list(const char *body, size_t len, void (*fn)(const struct docker_container *c, void *arg),
	void *arg, char *err, size_t errlen);
/* GET /images/{name}/json: Config.User into user when non-NULL. */
enum sbx_err docker_decode_image(const char *body, size_t len, char *user, size_t ulen, char *err, size_t errlen);
/* GET /exec/{id}/json. */
enum sbx_err docker_decode_exec(const char *body, size_t len, struct docker_exec_info *info, char *err,
	size_t errlen);

/* ---- the attach stream's framing (exposed for the unit tests) --------------------- */

/* Docker multiplexes an exec's stdout and stderr on one stream in frames of
 * an 8-byte header (stream byte, 3 zero bytes, big-endian length) and the
 * payload.  The decoder takes bytes in any chunking; the payload of a frame
 * of another stream (stdin, Docker's systemerr) is skipped. */
struct docker_demux {
	unsigned char hdr[8];
	size_t have;  /* header bytes so far */
	size_t left;  /* payload bytes still to come of the current frame */
	int stream;
	bool stopped; /* fn returned false */
};

#define DOCKER_DEMUX_INIT { .have = 0 }
/* Feed len bytes; false once fn stopped. */
bool docker_demux_feed(struct docker_demux *dm, const char *data, size_t len, docker_stream_fn fn, void *arg);

/* Percent-encode s for a query string into out (bounded): 0 or -1. */
int docker_query_escape(const char *s, char *out, size_t len);

#endif
