/* SPDX-License-Identifier: MIT */
/*
 * aio_api.c - the AIO sandbox HTTP API client (see aio_api.h).  One
 * request per call through common/http; one envelope decoder
 * (aio_envelope) and one decoder per payload, each checking the fields it
 * uses and ignoring the rest (the server leaves out null fields freely).
 */
#define _GNU_SOURCE
#include "aio_api.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../common/buf.h"
#include "../common/http.h"

#define AIO_CAP (64 * 1024 * 1024) /* one answer: output pieces can be large */

static void seterr(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

enum aio_status aio_status_parse(const char *s)
{
	static const struct {
		const char *name;
		enum aio_status st;
	} map[] = { { "pending", AIO_PENDING }, { "running", AIO_RUNNING }, { "completed", AIO_COMPLETED },
		{ "timed_out", AIO_TIMED_OUT }, { "hard_timeout", AIO_TIMED_OUT }, { "killed", AIO_KILLED },
		{ "terminated", AIO_KILLED }, { "no_change_timeout", AIO_NO_CHANGE } };

	for (size_t i = 0; s && i < sizeof(map) / sizeof(map[0]); i++)
		if (!strcmp(s, map[i].name))
			return map[i].st;
	return AIO_UNKNOWN;
}

/* FastAPI's {"detail": ...}: a string, or a list of {"msg", "loc"}. */
static void detail_text(json_t *detail, char *out, size_t len)
{
	if (json_is_string(detail)) {
		snprintf(out, len, "%s", json_string_value(detail));
	} else if (json_is_array(detail) && json_is_object(json_array_get(detail, 0))) {
		json_t *d = json_array_get(detail, 0), *loc = json_object_get(d, "loc");
		const char *msg = json_string_value(json_object_get(d, "msg"));
		const char *where = json_string_value(json_array_get(loc, json_array_size(loc) - 1));
		snprintf(out, len, "%s%s%s", where ? where : "", where ? ": " : "", msg ? msg : "invalid request");
	} else {
		snprintf(out, len, "(no detail)");
	}
}

enum sbx_err aio_envelope(long status, const char *body, size_t len, json_t **root, json_t **data, char *err,
	size_t errlen)
{
	json_t *o = len ? json_loadb(body, len, 0, NULL) : NULL;
	const char *msg;
	char text[300];

	*root = NULL;
	*data = NULL;
	if (!json_is_object(o)) {
		seterr(err, errlen, "the AIO server answered %ld with %s", status, len ? "something not JSON" : "nothing");
		json_decref(o);
		return status == 404 ? SBX_ERR_NOTSUP : http_status_err(status) ? http_status_err(status) : SBX_ERR_IO;
	}
	msg = json_string_value(json_object_get(o, "message"));
	if (status < 200 || status >= 300) {
		json_t *detail = json_object_get(o, "detail");
		enum sbx_err e = http_status_err(status);

		if (detail)
			detail_text(detail, text, sizeof(text));
		seterr(err, errlen, "the AIO server answered %ld: %s", status, detail ? text : msg ? msg : "(no message)");
		/* a missing route is FastAPI's {"detail": "Not Found"}; a missing
		 * session or command comes in the envelope */
		if (status == 404 && detail && !json_object_get(o, "success"))
			e = SBX_ERR_NOTSUP;
		json_decref(o);
		return e;
	}
	if (!json_is_true(json_object_get(o, "success"))) {
		enum sbx_err e = msg && strcasestr(msg, "not found") ? SBX_ERR_GONE : SBX_ERR_IO;

		seterr(err, errlen, "the AIO server reports a failure: %s", msg ? msg : "(no message)");
		json_decref(o); /* msg lived in o */
		return e;
	}
	*root = o;
	*data = json_object_get(o, "data");
	return SBX_OK;
}

/* One request: the answer's envelope decoded (root to decref). */
static enum sbx_err aio_call(const struct aio_target *t, const char *method, const char *path, const json_t *body,
	json_t **root, json_t **data, char *err, size_t errlen)
{
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct http_header hd[2] = { { "Accept", "application/json", false }, { "X-AIO-API-Key", t->api_key, true } };
	struct buf url = BUF_INIT(BUF_CAP_PATH), out = BUF_INIT(AIO_CAP);
	enum sbx_err e;

	*root = *data = NULL;
	if (buf_addf(&url, "%s%s", t->base_url, path)) {
		buf_free(&url);
		seterr(err, errlen, "URL too long");
		return SBX_ERR_INVAL;
	}
	rq.method = method;
	rq.url = url.ptr;
	rq.netns_fd = t->netns_fd;
	rq.headers = hd;
	rq.n_headers = t->api_key && t->api_key[0] ? 2 : 1;
	rq.json = body;
	rq.out = &out;
	rq.timeout_ms = t->timeout_ms > 0 ? t->timeout_ms : 30000;
	rq.connect_timeout_ms = 2000;
	rq.cancel = t->cancel;
	rq.scope = t->scope;
	e = http_perform(&rq, &rs);
	if (e)
		seterr(err, errlen, "the AIO server at %s is not reachable: %s (%s)", t->base_url, rs.error, rs.id);
	else
		e = aio_envelope(rs.status, buf_str(&out), out.len, root, data, err, errlen);
	buf_free(&url);
	buf_free(&out);
	return e;
}

enum sbx_err aio_sandbox(const struct aio_target *t, struct aio_info *info, char *err, size_t errlen)
{
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct http_header hd[2] = { { "Accept", "application/json", false }, { "X-AIO-API-Key", t->api_key, true } };
	struct buf url = BUF_INIT(BUF_CAP_PATH), out = BUF_INIT(HTTP_CAP_SMALL);
	json_t *o = NULL;
	enum sbx_err e;

	memset(info, 0, sizeof(*info));
	if (buf_addf(&url, "%s/v1/sandbox", t->base_url)) {
		buf_free(&url);
		return SBX_ERR_INVAL;
	}
	rq.url = url.ptr;
	rq.netns_fd = t->netns_fd;
	rq.headers = hd;
	rq.n_headers = t->api_key && t->api_key[0] ? 2 : 1;
	rq.out = &out;
	rq.timeout_ms = t->timeout_ms > 0 ? t->timeout_ms : 5000;
	rq.connect_timeout_ms = t->timeout_ms > 0 && t->timeout_ms < 2000 ? t->timeout_ms : 2000;
	rq.cancel = t->cancel;
	rq.scope = t->scope;
	e = http_perform(&rq, &rs);
	if (e) {
		seterr(err, errlen, "GET /v1/sandbox: %s", rs.error);
	} else if (rs.status != 200) {
		seterr(err, errlen, "GET /v1/sandbox answered %ld", rs.status);
		e = rs.status == 401 || rs.status == 403 ? SBX_ERR_ACCESS : SBX_ERR_BUSY;
	} else if ((o = json_loadb(buf_str(&out), out.len, 0, NULL)) && json_is_object(o)) {
		/* readiness is the 200 (DeerFlow); the rest is for status */
		const char *h = json_string_value(json_object_get(o, "home_dir"));
		const char *v = json_string_value(json_object_get(o, "version"));
		snprintf(info->home_dir, sizeof(info->home_dir), "%s", h ? h : "");
		snprintf(info->version, sizeof(info->version), "%s", v ? v : "");
	}
	json_decref(o);
	buf_free(&url);
	buf_free(&out);
	return e;
}

/* ---- bash ---------------------------------------------------------------------------------- */

void aio_bash_result_clear(struct aio_bash_result *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

static int dec_copy(json_t *o, const char *key, char *out, size_t len)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? str_fmt(out, len, "%s", s) : (out[0] = '\0', 0);
}

static int dec_bytes(json_t *o, const char *key, char **out, size_t *len)
{
	json_t *v = json_object_get(o, key);

	*out = NULL;
	*len = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return -1;
	*len = json_string_length(v);
	if (!*len)
		return 0;
	*out = malloc(*len);
	if (!*out)
		return -1;
	memcpy(*out, json_string_value(v), *len);
	return 0;
}

/* data of /v1/bash/exec, or data of /v1/bash/output (the command under "command") */
static int decode_bash(json_t *data, struct aio_bash_result *r, bool output, char *err, size_t errlen)
{
	json_t *cmd = output ? json_object_get(data, "command") : data, *ex, *off, *eoff;

	memset(r, 0, sizeof(*r));
	if (!json_is_object(data) || (output && !json_is_object(cmd))) {
		seterr(err, errlen, "the AIO server's bash answer has no %s", output ? "command" : "data");
		return -1;
	}
	off = json_object_get(data, "offset");
	eoff = json_object_get(data, "stderr_offset");
	ex = json_object_get(cmd, "exit_code");
	if (dec_copy(data, "session_id", r->session_id, sizeof(r->session_id)) ||
	    dec_copy(cmd, "command_id", r->command_id, sizeof(r->command_id)) ||
	    dec_bytes(data, "stdout", &r->out, &r->out_len) || dec_bytes(data, "stderr", &r->err, &r->err_len) ||
	    !json_is_integer(off) || !json_is_integer(eoff) || (ex && !json_is_null(ex) && !json_is_integer(ex))) {
		seterr(err, errlen, "the AIO server's bash answer lacks or mistypes offset, stderr_offset or exit_code");
		aio_bash_result_clear(r);
		return -1;
	}
	r->status = aio_status_parse(json_string_value(json_object_get(cmd, "status")));
	r->offset = json_integer_value(off);
	r->stderr_offset = json_integer_value(eoff);
	r->has_exit = json_is_integer(ex);
	r->exit_code = r->has_exit ? (int)json_integer_value(ex) : -1;
	if (r->status == AIO_UNKNOWN) {
		seterr(err, errlen, "the AIO server reports an unknown command status");
		aio_bash_result_clear(r);
		return -1;
	}
	return 0;
}

enum sbx_err aio_bash_exec(const struct aio_target *t, const struct aio_bash_request *q, struct aio_bash_result *r,
	char *err, size_t errlen)
{
	json_t *body = json_pack("{s:s,s:b,s:i}", "command", q->command, "async_mode", q->async, "max_output_length", 0),
	       *env = json_object(), *root = NULL, *data = NULL;
	enum sbx_err e = SBX_ERR_NOMEM;
	int bad = !body || !env;

	for (size_t i = 0; !bad && i < q->n_env; i++)
		bad |= json_object_set_new(env, q->env[i].key, json_string(q->env[i].value));
	if (!bad && q->session_id)
		bad |= json_object_set_new(body, "session_id", json_string(q->session_id));
	if (!bad && q->exec_dir)
		bad |= json_object_set_new(body, "exec_dir", json_string(q->exec_dir));
	if (!bad && q->hard_timeout > 0)
		bad |= json_object_set_new(body, "hard_timeout", json_real(q->hard_timeout));
	if (!bad)
		bad |= json_object_set(body, "env", env);
	memset(r, 0, sizeof(*r));
	if (!bad) {
		e = aio_call(t, "POST", "/v1/bash/exec", body, &root, &data, err, errlen);
		if (!e && decode_bash(data, r, false, err, errlen))
			e = SBX_ERR_IO;
	}
	json_decref(root);
	json_decref(env);
	json_decref(body);
	return e;
}

enum sbx_err aio_bash_output(const struct aio_target *t, const char *session_id, const char *command_id,
	long long offset, long long stderr_offset, double wait_s, struct aio_bash_result *r, char *err, size_t errlen)
{
	json_t *body = json_pack("{s:s,s:s,s:I,s:I,s:b,s:f}", "session_id", session_id, "command_id", command_id, "offset",
		(json_int_t)offset, "stderr_offset", (json_int_t)stderr_offset, "wait", wait_s > 0, "wait_timeout",
		wait_s > 0 ? wait_s : 0.0),
	       *root = NULL, *data = NULL;
	enum sbx_err e = SBX_ERR_NOMEM;

	memset(r, 0, sizeof(*r));
	if (body) {
		e = aio_call(t, "POST", "/v1/bash/output", body, &root, &data, err, errlen);
		if (!e && decode_bash(data, r, true, err, errlen))
			e = SBX_ERR_IO;
	}
	json_decref(root);
	json_decref(body);
	return e;
}

enum sbx_err aio_bash_kill(const struct aio_target *t, const char *session_id, const char *signal, char *err,
	size_t errlen)
{
	json_t *body = json_pack("{s:s,s:s}", "session_id", session_id, "signal", signal), *root = NULL, *data = NULL;
	enum sbx_err e = body ? aio_call(t, "POST", "/v1/bash/kill", body, &root, &data, err, errlen) : SBX_ERR_NOMEM;

	json_decref(root);
	json_decref(body);
	return e;
}

enum sbx_err aio_bash_close(const struct aio_target *t, const char *session_id, char *err, size_t errlen)
{
	char path[256];
	json_t *root = NULL, *data = NULL;
	enum sbx_err e;

	if (str_fmt(path, sizeof(path), "/v1/bash/sessions/%s/close", session_id))
		return SBX_ERR_INVAL;
	e = aio_call(t, "POST", path, NULL, &root, &data, err, errlen);
	json_decref(root);
	return e;
}

/* ---- shell ------------------------------------------------------------------------------------ */

void aio_shell_result_clear(struct aio_shell_result *r)
{
	free(r->output);
	memset(r, 0, sizeof(*r));
}

static int decode_shell(json_t *data, struct aio_shell_result *r, char *err, size_t errlen)
{
	json_t *ex = json_object_get(data, "exit_code");

	memset(r, 0, sizeof(*r));
	if (!json_is_object(data) || dec_copy(data, "session_id", r->session_id, sizeof(r->session_id)) ||
	    dec_bytes(data, "output", &r->output, &r->output_len) || (ex && !json_is_null(ex) && !json_is_integer(ex))) {
		seterr(err, errlen, "the AIO server's shell answer lacks or mistypes session_id, output or exit_code");
		aio_shell_result_clear(r);
		return -1;
	}
	r->status = aio_status_parse(json_string_value(json_object_get(data, "status")));
	r->has_exit = json_is_integer(ex);
	r->exit_code = r->has_exit ? (int)json_integer_value(ex) : -1;
	return 0;
}

enum sbx_err aio_shell_exec(const struct aio_target *t, const char *command, const char *exec_dir, double hard_timeout,
	struct aio_shell_result *r, char *err, size_t errlen)
{
	json_t *body = json_pack("{s:s,s:b,s:b}", "command", command, "async_mode", 1, "truncate", 0), *root = NULL,
	       *data = NULL;
	enum sbx_err e = SBX_ERR_NOMEM;

	memset(r, 0, sizeof(*r));
	if (body && exec_dir && json_object_set_new(body, "exec_dir", json_string(exec_dir)))
		goto out;
	if (body && hard_timeout > 0 && json_object_set_new(body, "hard_timeout", json_real(hard_timeout)))
		goto out;
	if (body) {
		e = aio_call(t, "POST", "/v1/shell/exec", body, &root, &data, err, errlen);
		if (!e && decode_shell(data, r, err, errlen))
			e = SBX_ERR_IO;
	}
out:
	json_decref(root);
	json_decref(body);
	return e;
}

enum sbx_err aio_shell_view(const struct aio_target *t, const char *session_id, struct aio_shell_result *r, char *err,
	size_t errlen)
{
	json_t *body = json_pack("{s:s}", "id", session_id), *root = NULL, *data = NULL;
	enum sbx_err e = SBX_ERR_NOMEM;

	memset(r, 0, sizeof(*r));
	if (body) {
		e = aio_call(t, "POST", "/v1/shell/view", body, &root, &data, err, errlen);
		if (!e && decode_shell(data, r, err, errlen))
			e = SBX_ERR_IO;
		if (!e && !r->session_id[0])
			snprintf(r->session_id, sizeof(r->session_id), "%s", session_id);
	}
	json_decref(root);
	json_decref(body);
	return e;
}

enum sbx_err aio_shell_wait(const struct aio_target *t, const char *session_id, int seconds, char *err,
	size_t errlen)
{
	json_t *body = json_pack("{s:s,s:i}", "id", session_id, "seconds", seconds), *root = NULL, *data = NULL;
	enum sbx_err e = body ? aio_call(t, "POST", "/v1/shell/wait", body, &root, &data, err, errlen) : SBX_ERR_NOMEM;

	json_decref(root);
	json_decref(body);
	return e;
}

enum sbx_err aio_shell_kill(const struct aio_target *t, const char *session_id, char *err, size_t errlen)
{
	json_t *body = json_pack("{s:s}", "id", session_id), *root = NULL, *data = NULL;
	enum sbx_err e = body ? aio_call(t, "POST", "/v1/shell/kill", body, &root, &data, err, errlen) : SBX_ERR_NOMEM;

	json_decref(root);
	json_decref(body);
	return e;
}
