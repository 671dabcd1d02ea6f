/* SPDX-License-Identifier: MIT */
/*
 * api.h - what the providers' HTTP API clients share (docker_api.c,
 * aio_api.c, opensandbox_api.c): one error-text setter, one JSON loader of
 * an answer's bytes, and one call that runs "request, status check, decode
 * into a typed struct" so no client writes that sequence again.
 *
 * A client describes itself once (struct api_client: how it sends one
 * request, how it reads its API's error document); each call then names the
 * method, path, body, the status that carries the answer and the decoder.
 * Decoders take bytes (body, len), never a json_t, so the fuzz harnesses and
 * unit tests call the same functions on hostile input.
 *
 * Thread context: any thread; a call blocks for the length of its request
 * (common/http.h: bounded by the current token), holding no lock.
 */
#ifndef SBX_API_H
#define SBX_API_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "../common/buf.h"
#include "../common/err.h"

/* err (may be NULL or errlen 0) gets the formatted text; never fails. */
void api_seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* body's JSON (NULL body is ""): a new reference, or NULL when it is not
 * JSON. */
json_t *api_load(const char *body, size_t len);

/* A decoder of one answer: status (for APIs whose decoder reads the status
 * itself, like AIO's envelope), the answer's bytes, the caller's typed
 * struct.  SBX_OK, or an error with its text in err. */
typedef enum sbx_err (*api_decode_fn)(long status, const char *body, size_t len, void *out, char *err,
	size_t errlen);

struct api_req;

struct api_client {
	/* One request: SBX_OK with *status and the answer's bytes in out (any
	 * status), or a transport error with its text in err. */
	enum sbx_err (*send)(void *ctx, const struct api_req *q, struct buf *out, long *status, char *err,
		size_t errlen);
	/* The API's error document of a status the call did not want: its
	 * meaning, its text in err (what names the call). */
	enum sbx_err (*error)(void *ctx, long status, const char *body, size_t len, const char *what, char *err,
		size_t errlen);
	void *ctx;
};

#define API_ANY_STATUS (-1L) /* want: every status goes to the decoder */
#define API_ANY_2XX 0L       /* want: any 2xx */

struct api_req {
	const char *method;
	const char *path;     /* the client's own form (a path under its base) */
	const json_t *body;   /* NULL: none */
	size_t cap;           /* the answer's cap (0: HTTP_CAP_SMALL) */
	long timeout_ms;      /* 0: the client's */
	const char *what;     /* names the call in errors ("inspect") */
	long want;            /* the status carrying the answer, API_ANY_2XX or API_ANY_STATUS */
	long also;            /* another status that counts as success (e.g. 304), 0: none */
	api_decode_fn decode; /* NULL: the status is the answer */
	void *out;            /* decode's typed struct */
};

/* Send q through cl, check its status (a status other than want/also goes
 * to cl->error), decode the answer into q->out.  SBX_OK or the error, its
 * text in err. */
enum sbx_err api_call(const struct api_client *cl, const struct api_req *q, char *err, size_t errlen);

/* Whether status is what q wants. */
bool api_status_ok(const struct api_req *q, long status);

#endif
