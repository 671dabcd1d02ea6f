/* SPDX-License-Identifier: MIT */
/*
 * api.c - the sequence every provider's API client runs (see api.h):
 * request, status check, decode of the answer's bytes into a typed struct.
 *
 * Why one place: docker_api.c alone wrote "GET, check the status, json_loadb,
 * decode" twelve times, and each of the three clients had its own copy of
 * the error-text setter.  A client now supplies only what differs (how a
 * request reaches its server, how its error document reads); the order of
 * the steps and what a wrong status means are written here once.
 */
#include "api.h"

#include <stdarg.h>
#include <stdio.h>

#include "../common/http.h"

void api_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

json_t *api_load(const char *body, size_t len)
{
	return json_loadb(body ? body : "", len, 0, NULL);
}

bool api_status_ok(const struct api_req *q, long status)
{
	if (q->want == API_ANY_STATUS || (q->also && status == q->also))
		return true;
	if (q->want == API_ANY_2XX)
		return status >= 200 && status < 300;
	return status == q->want;
}

/* A status the call did not want: the API's reading of it, never a success
 * (a 2xx other than the one wanted means the server did something else). */
static enum sbx_err api_status_err(const struct api_client *cl, const struct api_req *q, long status,
	const struct buf *out, char *err, size_t errlen)
{
	enum sbx_err e = cl->error ? cl->error(cl->ctx, status, buf_str(out), out->len, q->what, err, errlen) :
				     http_status_err(status);

	if (!cl->error)
		api_seterr(err, errlen, "%s: the server answered %ld", q->what, status);
	return e == SBX_OK ? SBX_ERR_IO : e;
}

enum sbx_err api_call(const struct api_client *cl, const struct api_req *q, char *err, size_t errlen)
{
	struct buf out = BUF_INIT(q->cap ? q->cap : HTTP_CAP_SMALL);
	long status = 0;
	enum sbx_err e = cl->send(cl->ctx, q, &out, &status, err, errlen);

	if (e)
		goto out;
	if (!api_status_ok(q, status)) {
		e = api_status_err(cl, q, status, &out, err, errlen);
		goto out;
	}
	if (q->decode)
		e = q->decode(status, buf_str(&out), out.len, q->out, err, errlen);
out:
	buf_free(&out);
	return e;
}
