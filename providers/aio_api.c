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
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "api.h"

#include "../common/buf.h"
#include "../common/http.h"

#define AIO_CAP (64 * 1024 * 1024) /* one answer: output pieces can be large */

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
		api_seterr(err, errlen, "the AIO server answered %ld with %s", status, len ? "something not JSON" : "nothing");
		json_decref(o);
		return status == 404 ? SBX_ERR_NOTSUP : http_status_err(status) ? http_status_err(status) : SBX_ERR_IO;
	}
	msg = json_string_value(json_object_get(o, "message"));
	if (status < 200 || status >= 300) {
		json_t *detail = json_object_get(o, "detail");
		enum sbx_err e = http_status_err(status);

		if (detail)
			detail_text(detail, text, sizeof(text));
		api_seterr(err, errlen, "the AIO server answered %ld: %s", status, detail ? text : msg ? msg : "(no message)");
		/* a missing route is FastAPI's {"detail": "Not Found"}; a missing
		 * session or command comes in the envelope */
		if (status == 404 && detail && !json_object_get(o, "success"))
			e = SBX_ERR_NOTSUP;
		if (e == SBX_OK)
			e = SBX_ERR_IO; /* a 3xx (not followed): nothing was done */
		json_decref(o);
		return e;
	}
	if (!json_is_true(json_object_get(o, "success"))) {
		enum sbx_err e = msg && strcasestr(msg, "not found") ? SBX_ERR_GONE : SBX_ERR_IO;
		json_t *d = json_object_get(o, "data");
		const char *type = json_string_value(json_object_get(d, "error_type"));
		json_t *no = json_object_get(d, "errno");

		/* a FileOperationError says what failed: its errno, else its kind */
		if (json_is_integer(no) && json_integer_value(no) > 0 && json_integer_value(no) < 4096)
			e = sbx_err_from_errno((int)json_integer_value(no));
		else if (type)
			e = !strcmp(type, "not_found") ? SBX_ERR_GONE :
			    !strcmp(type, "permission_denied") || !strcmp(type, "read_only_filesystem") ? SBX_ERR_ACCESS :
			    !strcmp(type, "already_exists") ? SBX_ERR_EXIST :
			    !strcmp(type, "no_space_left") ? SBX_ERR_NOSPC :
			    !strcmp(type, "invalid_path") || !strcmp(type, "invalid_target") ? SBX_ERR_INVAL : SBX_ERR_IO;
		api_seterr(err, errlen, "the AIO server reports a failure: %s", msg ? msg : "(no message)");
		json_decref(o); /* msg lived in o */
		return e;
	}
	*root = o;
	*data = json_object_get(o, "data");
	return SBX_OK;
}

/* One request (api.h's send): the answer's status and bytes (into out, capped). */
static enum sbx_err aio_send(void *ctx, const struct api_req *q, struct buf *out, long *status, char *err,
	size_t errlen)
{
	const struct aio_target *t = ctx;
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct http_header hd[2] = { { "Accept", "application/json", false }, { "X-AIO-API-Key", t->api_key, true } };
	struct buf url = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e;

	*status = 0;
	if (buf_addf(&url, "%s%s", t->base_url, q->path)) {
		buf_free(&url);
		api_seterr(err, errlen, "URL too long");
		return SBX_ERR_INVAL;
	}
	rq.method = q->method;
	rq.url = url.ptr;
	rq.netns_fd = t->netns_fd;
	rq.headers = hd;
	rq.n_headers = t->api_key && t->api_key[0] ? 2 : 1;
	rq.json = q->body;
	rq.out = out;
	rq.timeout_ms = t->timeout_ms > 0 ? t->timeout_ms : 30000;
	rq.connect_timeout_ms = 2000;
	rq.cancel = t->cancel;
	rq.scope = t->scope;
	e = http_perform(&rq, &rs);
	if (e)
		api_seterr(err, errlen, "the AIO server at %s is not reachable: %s (%s)", t->base_url, rs.error, rs.id);
	else
		*status = rs.status;
	buf_free(&url);
	return e;
}

/* The envelope alone (api.h's decoder shape): calls whose answer is only checked. */
static enum sbx_err dec_envelope(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	json_t *root = NULL, *data;
	enum sbx_err e = aio_envelope(status, body, len, &root, &data, err, errlen);

	(void)out;
	json_decref(root);
	return e;
}

/* One request through api.h: every status goes to dec (the envelope reads it). */
static enum sbx_err aio_request(const struct aio_target *t, const char *method, const char *path, const json_t *body,
	api_decode_fn dec, void *out, char *err, size_t errlen)
{
	struct api_client cl = { .send = aio_send, .ctx = (void *)t };
	struct api_req q = { .method = method, .path = path, .body = body, .cap = AIO_CAP, .what = path,
		.want = API_ANY_STATUS, .decode = dec, .out = out };

	return api_call(&cl, &q, err, errlen);
}

/* One request whose answer is only checked: its envelope. */
static enum sbx_err aio_call(const struct aio_target *t, const char *method, const char *path, const json_t *body,
	char *err, size_t errlen)
{
	return aio_request(t, method, path, body, dec_envelope, NULL, err, errlen);
}

enum sbx_err aio_decode_sandbox(long status, const char *body, size_t len, struct aio_info *info, char *err,
	size_t errlen)
{
	json_t *o;

	memset(info, 0, sizeof(*info));
	if (status != 200) {
		api_seterr(err, errlen, "GET /v1/sandbox answered %ld", status);
		return status == 401 || status == 403 ? SBX_ERR_ACCESS : SBX_ERR_BUSY;
	}
	o = api_load(body, len);
	if (json_is_object(o)) {
		/* readiness is the 200 (DeerFlow); the rest is for status */
		const char *h = json_string_value(json_object_get(o, "home_dir"));
		const char *v = json_string_value(json_object_get(o, "version"));
		snprintf(info->home_dir, sizeof(info->home_dir), "%s", h ? h : "");
		snprintf(info->version, sizeof(info->version), "%s", v ? v : "");
	}
	json_decref(o);
	return SBX_OK;
}

enum sbx_err aio_sandbox(const struct aio_target *t, struct aio_info *info, char *err, size_t errlen)
{
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct http_header hd[2] = { { "Accept", "application/json", false }, { "X-AIO-API-Key", t->api_key, true } };
	struct buf url = BUF_INIT(BUF_CAP_PATH), out = BUF_INIT(HTTP_CAP_SMALL);
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
	if (e)
		api_seterr(err, errlen, "GET /v1/sandbox: %s", rs.error);
	else
		e = aio_decode_sandbox(rs.status, buf_str(&out), out.len, info, err, errlen);
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
		api_seterr(err, errlen, "the AIO server's bash answer has no %s", output ? "command" : "data");
		return -1;
	}
	off = json_object_get(data, "offset");
	eoff = json_object_get(data, "stderr_offset");
	ex = json_object_get(cmd, "exit_code");
	if (dec_copy(data, "session_id", r->session_id, sizeof(r->session_id)) ||
	    dec_copy(cmd, "command_id", r->command_id, sizeof(r->command_id)) ||
	    dec_bytes(data, "stdout", &r->out, &r->out_len) || dec_bytes(data, "stderr", &r->err, &r->err_len) ||
	    !json_is_integer(off) || !json_is_integer(eoff) || (ex && !json_is_null(ex) && !json_is_integer(ex))) {
		api_seterr(err, errlen, "the AIO server's bash answer lacks or mistypes offset, stderr_offset or exit_code");
		aio_bash_result_clear(r);
		return -1;
	}
	r->status = aio_status_parse(json_string_value(json_object_get(cmd, "status")));
	r->offset = json_integer_value(off);
	r->stderr_offset = json_integer_value(eoff);
	r->has_exit = json_is_integer(ex);
	r->exit_code = r->has_exit ? (int)json_integer_value(ex) : -1;
	if (r->status == AIO_UNKNOWN) {
		api_seterr(err, errlen, "the AIO server reports an unknown command status");
		aio_bash_result_clear(r);
		return -1;
	}
	return 0;
}

enum sbx_err aio_decode_bash(long status, const char *body, size_t len, bool output, struct aio_bash_result *r,
	char *err, size_t errlen)
{
	json_t *root = NULL, *data = NULL;
	enum sbx_err e = aio_envelope(status, body, len, &root, &data, err, errlen);

	memset(r, 0, sizeof(*r));
	if (!e && decode_bash(data, r, output, err, errlen))
		e = SBX_ERR_IO;
	json_decref(root);
	return e;
}

static enum sbx_err dec_bash_exec(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	return aio_decode_bash(status, body, len, false, out, err, errlen);
}

static enum sbx_err dec_bash_output(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	return aio_decode_bash(status, body, len, true, out, err, errlen);
}

enum sbx_err aio_bash_exec(const struct aio_target *t, const struct aio_bash_request *q, struct aio_bash_result *r,
	char *err, size_t errlen)
{
	json_t *body = json_pack("{s:s,s:b,s:i}", "command", q->command, "async_mode", q->async, "max_output_length", 0),
	       *env = json_object();
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
	if (!bad && !q->async && q->timeout > 0)
		bad |= json_object_set_new(body, "timeout", json_real(q->timeout));
	if (!bad)
		bad |= json_object_set(body, "env", env);
	memset(r, 0, sizeof(*r));
	if (!bad)
		e = aio_request(t, "POST", "/v1/bash/exec", body, dec_bash_exec, r, err, errlen);
	json_decref(env);
	json_decref(body);
	return e;
}

enum sbx_err aio_bash_output(const struct aio_target *t, const char *session_id, const char *command_id,
	long long offset, long long stderr_offset, double wait_s, struct aio_bash_result *r, char *err, size_t errlen)
{
	json_t *body = json_pack("{s:s,s:s,s:I,s:I,s:b,s:f}", "session_id", session_id, "command_id", command_id, "offset",
		(json_int_t)offset, "stderr_offset", (json_int_t)stderr_offset, "wait", wait_s > 0, "wait_timeout",
		wait_s > 0 ? wait_s : 0.0);
	enum sbx_err e = SBX_ERR_NOMEM;

	memset(r, 0, sizeof(*r));
	if (body)
		e = aio_request(t, "POST", "/v1/bash/output", body, dec_bash_output, r, err, errlen);
	json_decref(body);
	return e;
}

enum sbx_err aio_bash_kill(const struct aio_target *t, const char *session_id, const char *signal, char *err,
	size_t errlen)
{
	json_t *body = json_pack("{s:s,s:s}", "session_id", session_id, "signal", signal);
	enum sbx_err e = body ? aio_call(t, "POST", "/v1/bash/kill", body, err, errlen) : SBX_ERR_NOMEM;

	json_decref(body);
	return e;
}

enum sbx_err aio_bash_close(const struct aio_target *t, const char *session_id, char *err, size_t errlen)
{
	char path[256];

	if (str_fmt(path, sizeof(path), "/v1/bash/sessions/%s/close", session_id))
		return SBX_ERR_INVAL;
	return aio_call(t, "POST", path, NULL, err, errlen);
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
		api_seterr(err, errlen, "the AIO server's shell answer lacks or mistypes session_id, output or exit_code");
		aio_shell_result_clear(r);
		return -1;
	}
	r->status = aio_status_parse(json_string_value(json_object_get(data, "status")));
	r->has_exit = json_is_integer(ex);
	r->exit_code = r->has_exit ? (int)json_integer_value(ex) : -1;
	return 0;
}

enum sbx_err aio_decode_shell(long status, const char *body, size_t len, struct aio_shell_result *r, char *err,
	size_t errlen)
{
	json_t *root = NULL, *data = NULL;
	enum sbx_err e = aio_envelope(status, body, len, &root, &data, err, errlen);

	memset(r, 0, sizeof(*r));
	if (!e && decode_shell(data, r, err, errlen))
		e = SBX_ERR_IO;
	json_decref(root);
	return e;
}

static enum sbx_err dec_shell(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	return aio_decode_shell(status, body, len, out, err, errlen);
}

enum sbx_err aio_shell_exec(const struct aio_target *t, const char *command, const char *exec_dir, double hard_timeout,
	struct aio_shell_result *r, char *err, size_t errlen)
{
	json_t *body = json_pack("{s:s,s:b,s:b}", "command", command, "async_mode", 1, "truncate", 0);
	enum sbx_err e = SBX_ERR_NOMEM;

	memset(r, 0, sizeof(*r));
	if (body && exec_dir && json_object_set_new(body, "exec_dir", json_string(exec_dir)))
		goto out;
	if (body && hard_timeout > 0 && json_object_set_new(body, "hard_timeout", json_real(hard_timeout)))
		goto out;
	if (body)
		e = aio_request(t, "POST", "/v1/shell/exec", body, dec_shell, r, err, errlen);
out:
	json_decref(body);
	return e;
}

enum sbx_err aio_shell_view(const struct aio_target *t, const char *session_id, struct aio_shell_result *r, char *err,
	size_t errlen)
{
	json_t *body = json_pack("{s:s}", "id", session_id);
	enum sbx_err e = SBX_ERR_NOMEM;

	memset(r, 0, sizeof(*r));
	if (body)
		e = aio_request(t, "POST", "/v1/shell/view", body, dec_shell, r, err, errlen);
	if (!e && !r->session_id[0])
		snprintf(r->session_id, sizeof(r->session_id), "%s", session_id);
	json_decref(body);
	return e;
}

enum sbx_err aio_shell_wait(const struct aio_target *t, const char *session_id, int seconds, char *err,
	size_t errlen)
{
	json_t *body = json_pack("{s:s,s:i}", "id", session_id, "seconds", seconds);
	enum sbx_err e = body ? aio_call(t, "POST", "/v1/shell/wait", body, err, errlen) : SBX_ERR_NOMEM;

	json_decref(body);
	return e;
}

enum sbx_err aio_shell_kill(const struct aio_target *t, const char *session_id, char *err, size_t errlen)
{
	json_t *body = json_pack("{s:s}", "id", session_id);
	enum sbx_err e = body ? aio_call(t, "POST", "/v1/shell/kill", body, err, errlen) : SBX_ERR_NOMEM;

	json_decref(body);
	return e;
}

enum sbx_err aio_decode_sessions(long status, const char *body, size_t len, void (*fn)(const char *id, void *arg),
	void *arg, char *err, size_t errlen)
{
	json_t *root = NULL, *data = NULL, *it;
	enum sbx_err e = aio_envelope(status, body, len, &root, &data, err, errlen);
	size_t i;

	if (!e && !json_is_array(data)) {
		api_seterr(err, errlen, "the AIO server's session list is not a list");
		e = SBX_ERR_IO;
	}
	if (!e)
		json_array_foreach (data, i, it) {
			const char *id = json_string_value(json_object_get(it, "session_id"));
			if (!id)
				id = json_string_value(json_object_get(it, "id"));
			if (id)
				fn(id, arg);
		}
	json_decref(root);
	return e;
}

struct sessions_out {
	void (*fn)(const char *id, void *arg);
	void *arg;
};

static enum sbx_err dec_sessions(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	struct sessions_out *so = out;

	return aio_decode_sessions(status, body, len, so->fn, so->arg, err, errlen);
}

enum sbx_err aio_bash_sessions(const struct aio_target *t, void (*fn)(const char *id, void *arg), void *arg,
	char *err, size_t errlen)
{
	struct sessions_out so = { .fn = fn, .arg = arg };

	return aio_request(t, "GET", "/v1/bash/sessions", NULL, dec_sessions, &so, err, errlen);
}

/* ---- files ------------------------------------------------------------------------------------ */

/* "rwxr-xr-x" (maybe with s, S, t, T) -> 0755; -1 when it is not that */
static int perm_bits(const char *s)
{
	static const char want[] = "rwxrwxrwx";
	int mode = 0;

	if (!s || strlen(s) != 9)
		return -1;
	for (int i = 0; i < 9; i++) {
		char c = s[i];
		int bit = 1 << (8 - i);

		if (c == want[i])
			mode |= bit;
		else if ((i == 2 || i == 5 || i == 8) && (c == 's' || c == 't'))
			mode |= bit | (i == 2 ? 04000 : i == 5 ? 02000 : 01000);
		else if ((i == 2 || i == 5 || i == 8) && (c == 'S' || c == 'T'))
			mode |= i == 2 ? 04000 : i == 5 ? 02000 : 01000;
		else if (c != '-')
			return -1;
	}
	return mode;
}

static double iso_time(const char *s)
{
	struct tm tm = { 0 };
	int y, mo, d, h, mi, sec, n = 0;
	double frac = 0, scale = 0.1;
	long off = 0;

	if (!s || sscanf(s, "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6)
		return 0;
	s += n;
	if (*s == '.')
		for (s++; *s >= '0' && *s <= '9'; s++, scale /= 10)
			frac += (*s - '0') * scale;
	if (*s == '+' || *s == '-') {
		int oh = 0, om = 0;
		if (sscanf(s + 1, "%2d:%2d", &oh, &om) == 2)
			off = (oh * 3600L + om * 60L) * (*s == '-' ? -1 : 1);
	}
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	return (double)timegm(&tm) - (double)off + frac;
}

enum sbx_err aio_decode_file_list(long status, const char *body, size_t len, const char *path,
	int (*fn)(const struct aio_file *f, void *arg), void *arg, char *err, size_t errlen)
{
	json_t *root = NULL, *data = NULL, *files, *it;
	enum sbx_err e = aio_envelope(status, body, len, &root, &data, err, errlen);
	size_t i;

	files = json_object_get(data, "files");
	if (!e && !json_is_array(files)) {
		api_seterr(err, errlen, "the AIO server's listing of %s has no files", path);
		e = SBX_ERR_IO;
	}
	if (!e)
		json_array_foreach (files, i, it) {
			struct aio_file f = { .size = -1, .perm = -1 };
			json_t *size = json_object_get(it, "size");
			const char *name = json_string_value(json_object_get(it, "name"));

			if (!name || !name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") ||
			    str_fmt(f.name, sizeof(f.name), "%s", name)) {
				api_seterr(err, errlen, "the AIO server's listing of %s has a malformed entry", path);
				e = SBX_ERR_IO;
				break;
			}
			f.is_dir = json_is_true(json_object_get(it, "is_directory"));
			if (json_is_integer(size))
				f.size = json_integer_value(size);
			f.mtime = iso_time(json_string_value(json_object_get(it, "modified_time")));
			f.perm = perm_bits(json_string_value(json_object_get(it, "permissions")));
			if (fn(&f, arg)) {
				e = SBX_ERR_NOMEM;
				break;
			}
		}
	json_decref(root);
	return e;
}

struct file_list_out {
	const char *path;
	int (*fn)(const struct aio_file *f, void *arg);
	void *arg;
};

static enum sbx_err dec_file_list(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	struct file_list_out *fl = out;

	return aio_decode_file_list(status, body, len, fl->path, fl->fn, fl->arg, err, errlen);
}

enum sbx_err aio_file_list(const struct aio_target *t, const char *path, int (*fn)(const struct aio_file *f, void *arg),
	void *arg, char *err, size_t errlen)
{
	json_t *body = json_pack("{s:s,s:b,s:b,s:b,s:b}", "path", path, "recursive", 0, "show_hidden", 1, "include_size", 1,
		"include_permissions", 1);
	struct file_list_out fl = { .path = path, .fn = fn, .arg = arg };
	enum sbx_err e = body ? aio_request(t, "POST", "/v1/file/list", body, dec_file_list, &fl, err, errlen) :
				SBX_ERR_NOMEM;

	json_decref(body);
	return e;
}

enum sbx_err aio_decode_download_error(long status, const char *body, size_t len, const char *path, char *err,
	size_t errlen)
{
	json_t *o = api_load(body, len);
	const char *detail = json_string_value(json_object_get(o, "detail"));
	enum sbx_err e = http_status_err(status);

	if (status == 400 && detail && strcasestr(detail, "directory"))
		e = SBX_ERR_ISDIR;
	if (e == SBX_OK)
		e = SBX_ERR_IO; /* a 2xx other than 200 and 206, or a 3xx (not followed): no content came */
	api_seterr(err, errlen, "GET /v1/file/download %s answered %ld: %s", path, status, detail ? detail : "");
	json_decref(o);
	return e;
}

enum sbx_err aio_file_download(const struct aio_target *t, const char *path, long long off, size_t len, int fd,
	size_t *got, char *err, size_t errlen)
{
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	char range[64];
	struct http_header hd[2] = { { "Range", range, false }, { "X-AIO-API-Key", t->api_key, true } };
	struct buf url = BUF_INIT(BUF_CAP_PATH * 4), errbody = BUF_INIT(64 * 1024);
	struct http_range d = { .fd = fd, .off = off, .want = len };
	enum sbx_err e = SBX_ERR_NOMEM;

	*got = 0;
	if (!len)
		return SBX_OK;
	if (buf_addf(&url, "%s/v1/file/download?path=", t->base_url) || http_escape(&url, path))
		goto out;
	snprintf(range, sizeof(range), "bytes=%lld-%lld", off, off + (long long)len - 1);
	rq.url = url.ptr;
	rq.netns_fd = t->netns_fd;
	rq.headers = hd;
	rq.n_headers = t->api_key && t->api_key[0] ? 2 : 1;
	rq.sink = http_range_sink;
	rq.sink_arg = &d;
	rq.on_status = http_range_status;
	rq.err_out = &errbody;
	rq.stall_ms = t->timeout_ms > 0 ? t->timeout_ms : 30000;
	rq.timeout_ms = http_transfer_ms(rq.stall_ms, (long long)len); /* a drip is bounded too */
	rq.connect_timeout_ms = 2000;
	rq.cancel = t->cancel;
	rq.scope = t->scope;
	e = http_perform(&rq, &rs);
	if (e) {
		api_seterr(err, errlen, "GET /v1/file/download %s: %s (%s)", path, rs.error, rs.id);
	} else if (rs.status == 416) {
		e = SBX_OK; /* at or past the end */
	} else if (rs.status != 200 && rs.status != 206) {
		e = aio_decode_download_error(rs.status, buf_str(&errbody), errbody.len, path, err, errlen);
	} else if (d.werr) {
		api_seterr(err, errlen, "cannot write the download of %s: %s", path, strerror(d.werr));
		e = d.werr == ENOSPC ? SBX_ERR_NOSPC : SBX_ERR_IO;
	}
	*got = d.got;
out:
	buf_free(&url);
	buf_free(&errbody);
	return e;
}

enum sbx_err aio_file_upload(const struct aio_target *t, const char *path, int fd, long long size, char *err,
	size_t errlen)
{
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct http_header hd[2] = { { "Accept", "application/json", false }, { "X-AIO-API-Key", t->api_key, true } };
	const char *base = strrchr(path, '/');
	struct http_part parts[2] = {
		{ .name = "file", .filename = base && base[1] ? base + 1 : "file", .type = "application/octet-stream",
			.from_fd = true, .fd = fd, .size = size },
		{ .name = "path", .data = path, .len = strlen(path) },
	};
	struct buf url = BUF_INIT(BUF_CAP_PATH), out = BUF_INIT(AIO_CAP);
	json_t *root = NULL, *data = NULL;
	enum sbx_err e = SBX_ERR_NOMEM;

	if (buf_addf(&url, "%s/v1/file/upload", t->base_url))
		goto out;
	rq.method = "POST";
	rq.url = url.ptr;
	rq.netns_fd = t->netns_fd;
	rq.headers = hd;
	rq.n_headers = t->api_key && t->api_key[0] ? 2 : 1;
	rq.parts = parts;
	rq.n_parts = 2;
	rq.out = &out;
	rq.stall_ms = t->timeout_ms > 0 ? t->timeout_ms : 30000;
	rq.timeout_ms = http_transfer_ms(rq.stall_ms, size); /* a server reading a byte at a time is bounded too */
	rq.connect_timeout_ms = 2000;
	rq.cancel = t->cancel;
	rq.scope = t->scope;
	e = http_perform(&rq, &rs);
	if (e)
		api_seterr(err, errlen, "POST /v1/file/upload %s: %s (%s)", path, rs.error, rs.id);
	else
		e = aio_envelope(rs.status, buf_str(&out), out.len, &root, &data, err, errlen);
out:
	json_decref(root);
	buf_free(&url);
	buf_free(&out);
	return e;
}
