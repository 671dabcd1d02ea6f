/* SPDX-License-Identifier: MIT */
/*
 * opensandbox_api.c - the OpenSandbox lifecycle and execd client (see
 * opensandbox_api.h).  One request per call through common/http; one error
 * decoder (osapi_error) for the three error shapes; one checked decoder per
 * payload (a sandbox, an endpoint, a FileInfo, a command status), each
 * checking the fields it uses and ignoring the rest (both servers leave out
 * null fields freely).  The event stream of a command is read here (POST
 * /command, its bytes handed to opensandbox_sse.c's parser as they come).
 *
 * Why the stream stops at the terminal event: execd holds a command's
 * connection about a second after the last event (its graceful shutdown),
 * and a job's end must not wait for that; the connection is not reused
 * then, which costs a reconnect, not a second.
 */
#define _GNU_SOURCE
#include "opensandbox_api.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "api.h"

#include "../common/buf.h"
#include "../common/http.h"

#define OSAPI_CAP_ERR (64 * 1024)         /* an error document */
#define OSAPI_CAP_LIST (16 * 1024 * 1024) /* a listing */
#define OSAPI_STREAM_STALL_MS 60000       /* a command stream with no byte (execd pings every 3 s) */
#define OSAPI_LIST_PAGES 100              /* pages of 200 sandboxes: more is not ours to walk */

static void set_gone(bool *gone, bool v)
{
	if (gone)
		*gone = v;
}

/* ---- time ------------------------------------------------------------------------------ */

int osapi_parse_time(const char *s, double *out)
{
	struct tm tm = { 0 };
	int y, mo, d, h, mi, sec, n = 0;
	double frac = 0, scale = 0.1;
	long off = 0;
	time_t t;

	if (!s || sscanf(s, "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 || n < 19)
		return -1;
	s += n;
	if (*s == '.' || *s == ',') {
		for (s++; *s >= '0' && *s <= '9'; s++, scale /= 10)
			frac += (*s - '0') * scale;
	}
	if (*s == 'Z' || *s == 'z') {
		s++;
	} else if (*s == '+' || *s == '-') {
		int oh, om, k = 0;
		if (sscanf(s + 1, "%2d:%2d%n", &oh, &om, &k) != 2 || k != 5)
			return -1;
		off = (oh * 3600L + om * 60L) * (*s == '-' ? -1 : 1);
		s += 6;
	} else if (*s) {
		return -1;
	}
	if (*s || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
		return -1;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	t = timegm(&tm);
	*out = (double)t - (double)off + frac;
	return 0;
}

static int format_time(double at, char *out, size_t len)
{
	time_t t = (time_t)at;
	struct tm tm;

	if (!gmtime_r(&t, &tm))
		return -1;
	return strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm) ? 0 : -1;
}

/* ---- errors ------------------------------------------------------------------------------ */

/* FastAPI's {"detail": ...}: a string, or a list of {"msg", "loc"}. */
static void detail_text(json_t *detail, char *out, size_t len)
{
	if (json_is_string(detail)) {
		snprintf(out, len, "%s", json_string_value(detail));
	} else if (json_is_array(detail) && json_is_object(json_array_get(detail, 0))) {
		json_t *d = json_array_get(detail, 0), *loc = json_object_get(d, "loc");
		const char *msg = json_string_value(json_object_get(d, "msg"));
		json_t *last = json_array_get(loc, json_array_size(loc) ? json_array_size(loc) - 1 : 0);
		char where[64] = "";

		if (json_is_string(last))
			snprintf(where, sizeof(where), "%s: ", json_string_value(last));
		else if (json_is_integer(last))
			snprintf(where, sizeof(where), "[%lld]: ", (long long)json_integer_value(last));
		snprintf(out, len, "%s%s", where, msg ? msg : "invalid request");
	} else {
		snprintf(out, len, "(no detail)");
	}
}

enum sbx_err osapi_error(long status, const char *body, size_t len, bool *gone, char *err, size_t errlen)
{
	json_t *o = len ? json_loadb(body, len, 0, NULL) : NULL;
	const char *code = json_string_value(json_object_get(o, "code"));
	const char *msg = json_string_value(json_object_get(o, "message"));
	const char *e401 = json_string_value(json_object_get(o, "error"));
	json_t *detail = json_object_get(o, "detail");
	enum sbx_err e = http_status_err(status);
	char text[300];

	set_gone(gone, false);
	if (e == SBX_OK)
		e = SBX_ERR_IO; /* a 2xx/3xx is not an error document: the caller misread it */
	if (detail)
		detail_text(detail, text, sizeof(text));
	else
		snprintf(text, sizeof(text), "%s", msg ? msg : e401 ? e401 : o ? "(no message)" : "(not JSON)");
	if (code && strstr(code, "SANDBOX_NOT_FOUND")) {
		set_gone(gone, true);
		e = SBX_ERR_GONE;
	} else if (code && !strcmp(code, "FILE_NOT_FOUND")) {
		e = SBX_ERR_GONE;
	} else if (status == 404 && !code) {
		/* a route the server does not have (execd's plain "404 page not found") */
		e = SBX_ERR_NOTSUP;
	} else if (code && (!strcmp(code, "RUNTIME_ERROR") || !strcmp(code, "INVALID_REQUEST_BODY"))) {
		enum sbx_err m = sbx_err_from_message(msg);
		if (m != SBX_ERR_IO)
			e = m;
	}
	api_seterr(err, errlen, "OpenSandbox answered %ld%s%s: %s", status, code ? " " : "", code ? code : "", text);
	json_decref(o);
	return e;
}

/* ---- one request ------------------------------------------------------------------------- */

struct call {
	const char *method;
	const char *url;
	const struct http_header *hd;
	size_t nh;
	const json_t *json;
	const struct http_part *parts;
	size_t n_parts;
	struct buf *out;
	http_sink_fn sink;
	void *sink_arg;
	struct buf *err_out;
	void (*on_status)(long status, void *sink_arg);
	long timeout_ms, stall_ms;
	const int *cancel;
	const char *scope;
};

/* Transport errors name the server and the request id; an HTTP answer
 * (whatever its status) is SBX_OK with rs filled. */
static enum sbx_err perform(const struct call *c, struct http_response *rs, char *err, size_t errlen)
{
	struct http_request rq = HTTP_REQUEST_INIT;
	char logurl[300];
	enum sbx_err e;

	rq.method = c->method;
	rq.url = c->url;
	rq.headers = c->hd;
	rq.n_headers = c->nh;
	rq.json = c->json;
	rq.parts = c->parts;
	rq.n_parts = c->n_parts;
	rq.out = c->out;
	rq.sink = c->sink;
	rq.sink_arg = c->sink_arg;
	rq.err_out = c->err_out;
	rq.on_status = c->on_status;
	rq.timeout_ms = c->timeout_ms;
	rq.stall_ms = c->stall_ms;
	rq.connect_timeout_ms = c->timeout_ms > 0 && c->timeout_ms < HTTP_CONNECT_TIMEOUT_MS ? c->timeout_ms :
		c->stall_ms > 0 && c->stall_ms < HTTP_CONNECT_TIMEOUT_MS ? c->stall_ms : 0;
	rq.cancel = c->cancel;
	rq.scope = c->scope;
	e = http_perform(&rq, rs);
	if (e == SBX_ERR_TOOBIG)
		e = SBX_ERR_IO; /* an answer past its cap is the server's fault, not a file too large */
	if (e) {
		http_url_for_log(c->url, logurl, sizeof(logurl));
		api_seterr(err, errlen, "%s %s: %s (%s)", c->method, logurl, rs->error[0] ? rs->error : sbx_err_name(e), rs->id);
	}
	return e;
}

/* The lifecycle headers: JSON, and the API key when there is one. */
static size_t srv_headers(const struct osapi_server *srv, struct http_header *hd)
{
	size_t n = 0;

	hd[n++] = (struct http_header){ "Accept", "application/json", false };
	if (srv->api_key && srv->api_key[0])
		hd[n++] = (struct http_header){ "OPEN-SANDBOX-API-KEY", srv->api_key, true };
	return n;
}

/* The execd headers: the endpoint's (secret: they may carry an access
 * token) and the access token. */
static size_t execd_headers(const struct osapi_execd *ex, struct http_header *hd)
{
	size_t n = 0;

	for (int i = 0; i < ex->n_headers && i < OSAPI_MAX_HEADERS; i++)
		hd[n++] = (struct http_header){ ex->hname[i], ex->hvalue[i], true };
	if (ex->token[0])
		hd[n++] = (struct http_header){ "X-EXECD-ACCESS-TOKEN", ex->token, true };
	return n;
}

/* ---- the api.h client: request, status, decode ------------------------------------------- */

/* Who a request goes to (the lifecycle server or an execd) and where a
 * "sandbox not found" is told. */
struct os_peer {
	struct http_header hd[OSAPI_MAX_HEADERS + 2];
	size_t nh;
	long timeout_ms;
	const char *scope;
	bool *gone;
};

static enum sbx_err os_send(void *ctx, const struct api_req *q, struct buf *out, long *status, char *err,
	size_t errlen)
{
	struct os_peer *p = ctx;
	struct call c = { .method = q->method, .url = q->path, .hd = p->hd, .nh = p->nh, .json = q->body, .out = out,
		.timeout_ms = p->timeout_ms, .scope = p->scope };
	struct http_response rs;
	enum sbx_err e = perform(&c, &rs, err, errlen);

	*status = e ? 0 : rs.status;
	return e;
}

static enum sbx_err os_error_doc(void *ctx, long status, const char *body, size_t len, const char *what, char *err,
	size_t errlen)
{
	struct os_peer *p = ctx;

	(void)what;
	return osapi_error(status, body, len, p->gone, err, errlen);
}

/* One request to p: a want answer (0: any 2xx) of up to cap bytes decoded by
 * dec into out (dec NULL: the status is the answer), or the error. */
static enum sbx_err os_call(struct os_peer *p, const char *method, const char *url, const json_t *body, long want,
	size_t cap, api_decode_fn dec, void *out, char *err, size_t errlen)
{
	struct api_client cl = { .send = os_send, .error = os_error_doc, .ctx = p };
	struct api_req q = { .method = method, .path = url, .body = body, .cap = cap, .what = method,
		.want = want ? want : API_ANY_2XX, .decode = dec, .out = out };

	set_gone(p->gone, false);
	return api_call(&cl, &q, err, errlen);
}

/* A request to the lifecycle server (see os_call). */
static enum sbx_err srv_call(const struct osapi_server *srv, const char *method, const char *url, const json_t *body,
	long want, api_decode_fn dec, void *out, bool *gone, char *err, size_t errlen)
{
	struct os_peer p = { .timeout_ms = srv->timeout_ms > 0 ? srv->timeout_ms : 30000, .scope = srv->scope,
		.gone = gone };

	p.nh = srv_headers(srv, p.hd);
	return os_call(&p, method, url, body, want, OSAPI_CAP_LIST, dec, out, err, errlen);
}

/* An execd request: a 2xx of up to cap bytes decoded by dec into out. */
static enum sbx_err execd_call(const struct osapi_execd *ex, const char *method, const char *url, const json_t *body,
	size_t cap, api_decode_fn dec, void *out, bool *gone, char *err, size_t errlen)
{
	struct os_peer p = { .timeout_ms = ex->timeout_ms > 0 ? ex->timeout_ms : 30000, .scope = ex->scope,
		.gone = gone };

	p.nh = execd_headers(ex, p.hd);
	return os_call(&p, method, url, body, 0, cap, dec, out, err, errlen);
}

/* base + path + "?" + name "=" escaped(value) ... (NULL-terminated pairs) */
static int build_url(struct buf *u, const char *base, const char *path, ...)
{
	va_list ap;
	const char *k;
	int r = buf_adds(u, base) || buf_adds(u, path);
	char sep = '?';

	va_start(ap, path);
	while (!r && (k = va_arg(ap, const char *))) {
		const char *v = va_arg(ap, const char *);
		r = buf_add(u, &sep, 1) || buf_adds(u, k) || buf_adds(u, "=") || http_escape(u, v);
		sep = '&';
	}
	va_end(ap);
	return r;
}

/* ---- lifecycle ----------------------------------------------------------------------------- */

const char *osapi_meta(const struct osapi_sandbox *sb, const char *key)
{
	for (size_t i = 0; i < sb->n_meta; i++)
		if (!strcmp(sb->meta[i].key, key))
			return sb->meta[i].value;
	return NULL;
}

static int copy_str(json_t *v, char *out, size_t len)
{
	const char *s = json_string_value(v);

	if (!s)
		return -1;
	return str_fmt(out, len, "%s", s);
}

static int decode_sandbox(json_t *o, struct osapi_sandbox *sb, char *err, size_t errlen)
{
	json_t *st = json_object_get(o, "status"), *meta = json_object_get(o, "metadata"), *v;
	const char *k;

	memset(sb, 0, sizeof(*sb));
	if (!json_is_object(o) || copy_str(json_object_get(o, "id"), sb->id, sizeof(sb->id)) || !sb->id[0] ||
	    !json_is_object(st) || copy_str(json_object_get(st, "state"), sb->state, sizeof(sb->state))) {
		api_seterr(err, errlen, "OpenSandbox's sandbox lacks or mistypes id or status.state");
		return -1;
	}
	copy_str(json_object_get(st, "reason"), sb->reason, sizeof(sb->reason));
	if (copy_str(json_object_get(st, "message"), sb->message, sizeof(sb->message)))
		sb->message[0] = '\0'; /* absent, or too long for a log line: truncated */
	v = json_object_get(o, "expiresAt");
	if (json_is_string(v)) {
		if (osapi_parse_time(json_string_value(v), &sb->expires_at)) {
			api_seterr(err, errlen, "OpenSandbox's sandbox has a malformed expiresAt '%.40s'", json_string_value(v));
			return -1;
		}
		sb->has_expires = true;
	}
	v = json_object_get(o, "createdAt");
	if (json_is_string(v))
		osapi_parse_time(json_string_value(v), &sb->created_at);
	if (json_is_object(meta))
		json_object_foreach (meta, k, v) {
			if (sb->n_meta >= OSAPI_MAX_META || !json_is_string(v))
				continue;
			if (str_fmt(sb->meta[sb->n_meta].key, sizeof(sb->meta[0].key), "%s", k) ||
			    copy_str(v, sb->meta[sb->n_meta].value, sizeof(sb->meta[0].value)))
				continue; /* longer than any label: not one of ours */
			sb->n_meta++;
		}
	return 0;
}

static json_t *load(const char *body, size_t len, const char *what, char *err, size_t errlen)
{
	json_t *o = api_load(body, len);

	if (!o)
		api_seterr(err, errlen, "%s is not JSON", what);
	return o;
}

enum sbx_err osapi_decode_sandbox(const char *body, size_t len, struct osapi_sandbox *sb, char *err, size_t errlen)
{
	json_t *o = load(body, len, "OpenSandbox's sandbox", err, errlen);
	enum sbx_err e = SBX_ERR_IO;

	memset(sb, 0, sizeof(*sb));
	if (o && !decode_sandbox(o, sb, err, errlen))
		e = SBX_OK;
	json_decref(o);
	return e;
}

enum sbx_err osapi_decode_list(const char *body, size_t len, void (*fn)(const struct osapi_sandbox *sb, void *arg),
	void *arg, bool *more, char *err, size_t errlen)
{
	json_t *o = load(body, len, "OpenSandbox's list", err, errlen), *items = json_object_get(o, "items"), *it;
	size_t i;

	*more = false;
	if (!json_is_array(items)) {
		if (o)
			api_seterr(err, errlen, "OpenSandbox's list has no items");
		json_decref(o);
		return SBX_ERR_IO;
	}
	json_array_foreach (items, i, it) {
		struct osapi_sandbox sb;
		if (!decode_sandbox(it, &sb, NULL, 0))
			fn(&sb, arg);
	}
	*more = json_is_true(json_object_get(json_object_get(o, "pagination"), "hasNextPage")) &&
		json_array_size(items) > 0;
	json_decref(o);
	return SBX_OK;
}

enum sbx_err osapi_decode_renew(const char *body, size_t len, double *got, char *err, size_t errlen)
{
	json_t *o = api_load(body, len);
	const char *s = json_string_value(json_object_get(o, "expiresAt"));
	enum sbx_err e = SBX_OK;

	if (!s || osapi_parse_time(s, got)) {
		api_seterr(err, errlen, "OpenSandbox's renewal answer lacks a valid expiresAt");
		e = SBX_ERR_IO;
	}
	json_decref(o);
	return e;
}

static json_t *kv_object(const struct osapi_kv *kv, size_t n)
{
	json_t *o = json_object();

	for (size_t i = 0; o && i < n; i++)
		if (json_object_set_new(o, kv[i].key, json_string(kv[i].value))) {
			json_decref(o);
			return NULL;
		}
	return o;
}

/* The decoders in api.h's shape (the status was checked before). */
static enum sbx_err dec_sandbox(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	(void)status;
	return osapi_decode_sandbox(body, len, out, err, errlen);
}

struct list_out {
	void (*fn)(const struct osapi_sandbox *sb, void *arg);
	void *arg;
	bool more;
};

static enum sbx_err dec_list(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	struct list_out *l = out;

	(void)status;
	return osapi_decode_list(body, len, l->fn, l->arg, &l->more, err, errlen);
}

static enum sbx_err dec_renew(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	(void)status;
	return osapi_decode_renew(body, len, out, err, errlen);
}

enum sbx_err osapi_create(const struct osapi_server *srv, const struct osapi_create_req *q, struct osapi_sandbox *sb,
	char *err, size_t errlen)
{
	json_t *body = json_object(), *ep = json_array(), *img = json_pack("{s:s}", "uri", q->image);
	struct buf url = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = SBX_ERR_NOMEM;
	int bad = !body || !ep || !img;

	for (const char *const *a = q->entrypoint; !bad && a && *a; a++)
		bad |= json_array_append_new(ep, json_string(*a));
	if (!bad) {
		bad |= json_object_set(body, "image", img) || json_object_set(body, "entrypoint", ep);
		bad |= json_object_set_new(body, "timeout", q->timeout > 0 ? json_integer(q->timeout) : json_null());
		bad |= json_object_set_new(body, "resourceLimits", kv_object(q->resources, q->n_resources));
		bad |= json_object_set_new(body, "env", kv_object(q->env, q->n_env));
		bad |= json_object_set_new(body, "metadata", kv_object(q->metadata, q->n_metadata));
		bad |= json_object_set_new(body, "secureAccess", json_false());
	}
	if (!bad && q->net_default) {
		json_t *np = json_pack("{s:s}", "defaultAction", q->net_default), *eg = json_array();
		for (size_t i = 0; np && eg && i < q->n_egress; i++)
			bad |= json_array_append_new(eg, json_pack("{s:s,s:s}", "action", q->egress[i].action, "target",
							     q->egress[i].target));
		bad |= !np || !eg || json_object_set(np, "egress", eg) || json_object_set(body, "networkPolicy", np);
		json_decref(eg);
		json_decref(np);
	}
	if (!bad && !build_url(&url, srv->base, "/sandboxes", NULL))
		e = srv_call(srv, "POST", url.ptr, body, 0, dec_sandbox, sb, NULL, err, errlen);
	json_decref(img);
	json_decref(ep);
	json_decref(body);
	buf_free(&url);
	return e;
}

enum sbx_err osapi_get(const struct osapi_server *srv, const char *id, struct osapi_sandbox *sb, char *err,
	size_t errlen)
{
	struct buf url = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = SBX_ERR_NOMEM;

	if (!buf_adds(&url, srv->base) && !buf_adds(&url, "/sandboxes/") && !http_escape(&url, id))
		e = srv_call(srv, "GET", url.ptr, NULL, 200, dec_sandbox, sb, NULL, err, errlen);
	buf_free(&url);
	return e;
}

enum sbx_err osapi_list(const struct osapi_server *srv, const struct osapi_kv *meta, size_t n_meta,
	const char *const *states, void (*fn)(const struct osapi_sandbox *sb, void *arg), void *arg, char *err,
	size_t errlen)
{
	struct buf inner = BUF_INIT(4096), url = BUF_INIT(8192);
	struct list_out lo = { .fn = fn, .arg = arg };
	enum sbx_err e = SBX_ERR_NOMEM;
	int bad = 0;

	/* metadata: "k=v&k2=v2" with each part percent-encoded, then the whole
	 * encoded once more as the query value (remote-apis.md A.6.2) */
	for (size_t i = 0; i < n_meta && !bad; i++)
		bad |= (i && buf_adds(&inner, "&")) || http_escape(&inner, meta[i].key) || buf_adds(&inner, "=") ||
		       http_escape(&inner, meta[i].value);
	if (bad)
		goto out;
	for (int page = 1; page <= OSAPI_LIST_PAGES; page++) {
		buf_reset(&url);
		if (buf_addf(&url, "%s/sandboxes?page=%d&pageSize=200", srv->base, page) ||
		    (n_meta && (buf_adds(&url, "&metadata=") || http_escape(&url, buf_str(&inner)))))
			goto out;
		for (const char *const *s = states; s && *s; s++)
			if (buf_adds(&url, "&state=") || http_escape(&url, *s))
				goto out;
		e = srv_call(srv, "GET", url.ptr, NULL, 200, dec_list, &lo, NULL, err, errlen);
		if (e)
			goto out;
		if (!lo.more)
			break;
	}
	e = SBX_OK;
out:
	buf_free(&inner);
	buf_free(&url);
	return e;
}

enum sbx_err osapi_delete(const struct osapi_server *srv, const char *id, char *err, size_t errlen)
{
	struct buf url = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = SBX_ERR_NOMEM;
	bool gone = false;

	if (!buf_adds(&url, srv->base) && !buf_adds(&url, "/sandboxes/") && !http_escape(&url, id)) {
		e = srv_call(srv, "DELETE", url.ptr, NULL, 0, NULL, NULL, &gone, err, errlen);
		if (e == SBX_ERR_GONE) /* already gone: what a delete wants */
			e = SBX_OK;
	}
	buf_free(&url);
	return e;
}

enum sbx_err osapi_renew(const struct osapi_server *srv, const char *id, double at, double *got, char *err,
	size_t errlen)
{
	struct buf url = BUF_INIT(BUF_CAP_PATH);
	char when[40];
	json_t *body = NULL;
	enum sbx_err e = SBX_ERR_NOMEM;

	if (format_time(at, when, sizeof(when)) || !(body = json_pack("{s:s}", "expiresAt", when)))
		goto out;
	if (buf_adds(&url, srv->base) || buf_adds(&url, "/sandboxes/") || http_escape(&url, id) ||
	    buf_adds(&url, "/renew-expiration"))
		goto out;
	e = srv_call(srv, "POST", url.ptr, body, 200, dec_renew, got, NULL, err, errlen);
out:
	json_decref(body);
	buf_free(&url);
	return e;
}

static bool header_safe(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (!n || n >= max)
		return false;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* ep for a log line: what precedes an '@' of its authority (user, password)
 * shown as "***", at most 160 characters. */
static void endpoint_for_log(const char *ep, char *out, size_t len)
{
	const char *auth = strstr(ep, "://") ? strstr(ep, "://") + 3 : ep;
	const char *end = auth + strcspn(auth, "/?#");
	const char *at = memchr(auth, '@', (size_t)(end - auth));

	if (at)
		snprintf(out, len, "%.*s***%.160s", (int)(auth - ep), ep, at);
	else
		snprintf(out, len, "%.160s", ep);
}

/* The execd base URL of endpoint ep into base: scheme "://" ep when it has
 * no scheme, else ep itself, either way parsed as libcurl will and refused
 * (SBX_ERR_PERM, err naming it) unless its scheme is the configured one, it
 * has a host and carries no credentials, query or fragment.  base is the
 * parsed URL, so what was checked is what is used. */
static enum sbx_err endpoint_check(const char *ep, const char *scheme, char *base, size_t len, char *err,
	size_t errlen)
{
	struct http_url u;
	char raw[1024], shown[200];
	const char *why = NULL;
	bool has_scheme = strstr(ep, "://") != NULL;

	endpoint_for_log(ep, shown, sizeof(shown));
	if (str_fmt(raw, sizeof(raw), "%s%s%s", has_scheme ? "" : scheme, has_scheme ? "" : "://", ep)) {
		api_seterr(err, errlen, "OpenSandbox's endpoint is too long");
		return SBX_ERR_IO;
	}
	/* libcurl reads "http:///x" as host "x": the host must follow "://" */
	if (!strstr(raw, "://")[3] || strstr(raw, "://")[3] == '/')
		why = "it names no host";
	else if (http_url_parse(raw, &u))
		why = "it is not a URL";
	else if (strcasecmp(u.scheme, scheme))
		why = "its scheme is not the configured protocol";
	else if (u.userinfo)
		why = "it carries credentials";
	else if (u.query || u.fragment)
		why = "it has a query or a fragment";
	else if (!u.host[0])
		why = "it names no host";
	if (why) {
		api_seterr(err, errlen, "refused the execd endpoint '%s' that OpenSandbox answered: %s (%s)", shown, why,
			scheme);
		return SBX_ERR_PERM;
	}
	if (str_fmt(base, len, "%s", u.url)) {
		api_seterr(err, errlen, "OpenSandbox's endpoint is too long");
		return SBX_ERR_IO;
	}
	return SBX_OK;
}

enum sbx_err osapi_decode_endpoint(const char *body, size_t len, const char *scheme, struct osapi_execd *out,
	char *err, size_t errlen)
{
	json_t *o = api_load(body, len), *hdrs, *v;
	const char *ep, *k;
	enum sbx_err e = SBX_ERR_IO;
	size_t n;

	memset(out, 0, sizeof(*out));
	ep = json_string_value(json_object_get(o, "endpoint"));
	if (!ep || !header_safe(ep, 512) || strpbrk(ep, " \"<>\\^`{|}")) {
		api_seterr(err, errlen, "OpenSandbox's endpoint answer lacks a usable endpoint");
		goto out;
	}
	/* no scheme in the answer (A.6.7); tolerate one anyway, but only the
	 * configured one: the server decides where the daemon connects, not
	 * how (libcurl would speak gopher, dict or file to where it points) */
	e = endpoint_check(ep, scheme, out->base, sizeof(out->base), err, errlen);
	if (e)
		goto out;
	e = SBX_ERR_IO;
	n = strlen(out->base);
	while (n && out->base[n - 1] == '/')
		out->base[--n] = '\0';
	hdrs = json_object_get(o, "headers");
	if (hdrs && !json_is_null(hdrs)) {
		if (!json_is_object(hdrs)) {
			api_seterr(err, errlen, "OpenSandbox's endpoint headers are not an object");
			goto out;
		}
		json_object_foreach (hdrs, k, v) {
			const char *val = json_string_value(v);
			if (out->n_headers >= OSAPI_MAX_HEADERS || !val || !header_safe(k, sizeof(out->hname[0])) ||
			    strchr(k, ':') || !header_safe(val, sizeof(out->hvalue[0]))) {
				api_seterr(err, errlen, "OpenSandbox's endpoint headers are too many or malformed");
				goto out;
			}
			snprintf(out->hname[out->n_headers], sizeof(out->hname[0]), "%s", k);
			snprintf(out->hvalue[out->n_headers], sizeof(out->hvalue[0]), "%s", val);
			out->n_headers++;
		}
	}
	e = SBX_OK;
out:
	json_decref(o);
	return e;
}

struct endpoint_out {
	const char *scheme;
	struct osapi_execd *ex;
};

static enum sbx_err dec_endpoint(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	struct endpoint_out *o = out;

	(void)status;
	return osapi_decode_endpoint(body, len, o->scheme, o->ex, err, errlen);
}

enum sbx_err osapi_endpoint(const struct osapi_server *srv, const char *id, int port, bool server_proxy,
	const char *scheme, struct osapi_execd *out, char *err, size_t errlen)
{
	struct buf url = BUF_INIT(BUF_CAP_PATH);
	struct endpoint_out eo = { .scheme = scheme, .ex = out };
	enum sbx_err e = SBX_ERR_NOMEM;

	memset(out, 0, sizeof(*out));
	if (buf_adds(&url, srv->base) || buf_adds(&url, "/sandboxes/") || http_escape(&url, id) ||
	    buf_addf(&url, "/endpoints/%d%s", port, server_proxy ? "?use_server_proxy=true" : ""))
		goto out;
	e = srv_call(srv, "GET", url.ptr, NULL, 200, dec_endpoint, &eo, NULL, err, errlen);
	if (e)
		goto out;
	out->timeout_ms = srv->timeout_ms;
	snprintf(out->scope, sizeof(out->scope), "%s", srv->scope ? srv->scope : "opensandbox");
out:
	buf_free(&url);
	return e;
}

/* ---- execd: ping and commands ------------------------------------------------------------- */

enum sbx_err osapi_ping(const struct osapi_execd *ex, long timeout_ms, char *err, size_t errlen)
{
	struct osapi_execd t = *ex;
	struct buf url = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = SBX_ERR_NOMEM;

	t.timeout_ms = timeout_ms;
	if (!build_url(&url, ex->base, "/ping", NULL))
		e = execd_call(&t, "GET", url.ptr, NULL, OSAPI_CAP_ERR, NULL, NULL, NULL, err, errlen);
	buf_free(&url);
	return e;
}

static bool sse_sink(const char *data, size_t len, void *arg)
{
	struct osapi_sse *p = arg;
	bool go_on = osapi_sse_feed(p, data, len);

	if (p->ev && p->ev->on_flush)
		p->ev->on_flush(p->ev->arg);
	return go_on;
}

enum sbx_err osapi_command(const struct osapi_execd *ex, const struct osapi_cmd *cmd,
	const struct osapi_cmd_events *ev, const int *cancel, struct osapi_cmd_result *r, bool *gone, char *err,
	size_t errlen)
{
	struct http_header hd[OSAPI_MAX_HEADERS + 3];
	struct buf url = BUF_INIT(BUF_CAP_PATH), errbody = BUF_INIT(OSAPI_CAP_ERR);
	json_t *body = json_pack("{s:s}", "command", cmd->command), *envs = NULL;
	struct http_response rs;
	struct osapi_sse p;
	struct call c = { .method = "POST", .hd = hd, .sink = sse_sink, .sink_arg = &p, .err_out = &errbody,
		.stall_ms = ex->timeout_ms > OSAPI_STREAM_STALL_MS ? ex->timeout_ms : OSAPI_STREAM_STALL_MS,
		.cancel = cancel, .scope = ex->scope };
	enum sbx_err e = SBX_ERR_NOMEM;
	int bad = !body;

	memset(r, 0, sizeof(*r));
	set_gone(gone, false);
	osapi_sse_init(&p, ev, r);
	if (!bad && cmd->cwd)
		bad |= json_object_set_new(body, "cwd", json_string(cmd->cwd));
	if (!bad && cmd->timeout_ms > 0)
		bad |= json_object_set_new(body, "timeout", json_integer(cmd->timeout_ms));
	if (!bad && cmd->n_envs) {
		envs = kv_object(cmd->envs, cmd->n_envs);
		bad |= !envs || json_object_set(body, "envs", envs);
	}
	if (bad || build_url(&url, ex->base, "/command", NULL))
		goto out;
	c.url = url.ptr;
	c.json = body;
	c.nh = execd_headers(ex, hd);
	hd[c.nh++] = (struct http_header){ "Accept", "text/event-stream", false };
	e = perform(&c, &rs, err, errlen);
	if (!e && (rs.status < 200 || rs.status >= 300)) {
		e = osapi_error(rs.status, buf_str(&errbody), errbody.len, gone, err, errlen);
	} else if (e && r->saw_init) {
		/* the stream broke after the command started: the caller finds
		 * out how it ended some other way */
		e = SBX_OK;
	} else if (!e && !r->saw_init && !r->ended) {
		api_seterr(err, errlen, "execd's command stream ended before the command started (%s)", rs.id);
		e = SBX_ERR_IO;
	}
out:
	osapi_sse_free(&p);
	json_decref(envs);
	json_decref(body);
	buf_free(&url);
	buf_free(&errbody);
	return e;
}

enum sbx_err osapi_interrupt(const struct osapi_execd *ex, const char *id, char *err, size_t errlen)
{
	struct buf url = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = SBX_ERR_NOMEM;

	if (!build_url(&url, ex->base, "/command", "id", id, NULL))
		e = execd_call(ex, "DELETE", url.ptr, NULL, OSAPI_CAP_ERR, NULL, NULL, NULL, err, errlen);
	buf_free(&url);
	return e;
}

enum sbx_err osapi_decode_status(const char *body, size_t len, struct osapi_cmd_status *st, char *err, size_t errlen)
{
	json_t *o = api_load(body, len), *ex_code = json_object_get(o, "exit_code");
	enum sbx_err e = SBX_OK;

	memset(st, 0, sizeof(*st));
	if (!json_is_boolean(json_object_get(o, "running")) || (ex_code && !json_is_null(ex_code) && !json_is_integer(ex_code))) {
		api_seterr(err, errlen, "execd's command status lacks or mistypes running or exit_code");
		e = SBX_ERR_IO;
		goto out;
	}
	st->running = json_is_true(json_object_get(o, "running"));
	st->has_exit = json_is_integer(ex_code);
	st->exit_code = st->has_exit ? (int)json_integer_value(ex_code) : 0;
	copy_str(json_object_get(o, "error"), st->error, sizeof(st->error));
out:
	json_decref(o);
	return e;
}

static enum sbx_err dec_status(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	(void)status;
	return osapi_decode_status(body, len, out, err, errlen);
}

enum sbx_err osapi_command_status(const struct osapi_execd *ex, const char *id, struct osapi_cmd_status *st,
	bool *gone, char *err, size_t errlen)
{
	struct buf url = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = SBX_ERR_NOMEM;

	memset(st, 0, sizeof(*st));
	if (!buf_adds(&url, ex->base) && !buf_adds(&url, "/command/status/") && !http_escape(&url, id))
		e = execd_call(ex, "GET", url.ptr, NULL, OSAPI_CAP_ERR, dec_status, st, gone, err, errlen);
	buf_free(&url);
	return e;
}

/* ---- execd: files ------------------------------------------------------------------------- */

/* "644" (octal digits written as a decimal number) -> 0644; -1 when a digit is not octal */
static int octal_digits(long long v)
{
	int mode = 0, shift = 0;

	if (v < 0 || v > 7777)
		return -1;
	for (; v; v /= 10, shift += 3) {
		if (v % 10 > 7)
			return -1;
		mode |= (int)(v % 10) << shift;
	}
	return mode;
}

static long long digits_of(unsigned mode)
{
	long long v = 0, scale = 1;

	for (mode &= 07777; mode; mode >>= 3, scale *= 10)
		v += (mode & 7) * scale;
	return v;
}

static int decode_fileinfo(json_t *o, struct osapi_fileinfo *fi)
{
	const char *path = json_string_value(json_object_get(o, "path"));
	const char *type = json_string_value(json_object_get(o, "type"));
	const char *base;
	json_t *size = json_object_get(o, "size"), *mode = json_object_get(o, "mode");
	int bits;

	memset(fi, 0, sizeof(*fi));
	if (!path || !type || (size && !json_is_integer(size)) || (mode && !json_is_integer(mode)))
		return -1;
	bits = mode ? octal_digits(json_integer_value(mode)) : 0644;
	if (bits < 0)
		return -1;
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (str_fmt(fi->name, sizeof(fi->name), "%s", base))
		return -1;
	/* "other" (a FIFO, a socket, a device) is no regular file: S_IFIFO
	 * stands for all of them, so nothing tries to read one (the FUSE layer
	 * shows it as an empty file that cannot be opened) */
	fi->mode = (mode_t)bits | (!strcmp(type, "directory") ? S_IFDIR : !strcmp(type, "symlink") ? S_IFLNK :
				    !strcmp(type, "file") ? S_IFREG : S_IFIFO);
	fi->size = size ? json_integer_value(size) : 0;
	if (osapi_parse_time(json_string_value(json_object_get(o, "modified_at")), &fi->mtime))
		fi->mtime = 0;
	if (osapi_parse_time(json_string_value(json_object_get(o, "created_at")), &fi->ctime))
		fi->ctime = fi->mtime;
	return 0;
}

enum sbx_err osapi_decode_info(const char *body, size_t len, const char *path, struct osapi_fileinfo *fi, char *err,
	size_t errlen)
{
	json_t *o = api_load(body, len);
	enum sbx_err e = SBX_OK;

	memset(fi, 0, sizeof(*fi));
	/* keyed by the path as sent; take the one member whatever its key */
	if (!json_is_object(o) || json_object_size(o) != 1 || decode_fileinfo(json_object_iter_value(json_object_iter(o)), fi)) {
		api_seterr(err, errlen, "execd's file info for %s is malformed", path);
		e = SBX_ERR_IO;
	}
	json_decref(o);
	return e;
}

struct info_out {
	const char *path;
	struct osapi_fileinfo *fi;
};

static enum sbx_err dec_info(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	struct info_out *o = out;

	(void)status;
	return osapi_decode_info(body, len, o->path, o->fi, err, errlen);
}

enum sbx_err osapi_info(const struct osapi_execd *ex, const char *path, struct osapi_fileinfo *fi, bool *gone,
	char *err, size_t errlen)
{
	struct buf url = BUF_INIT(BUF_CAP_PATH * 4);
	struct info_out io = { .path = path, .fi = fi };
	enum sbx_err e = SBX_ERR_NOMEM;

	if (!build_url(&url, ex->base, "/files/info", "path", path, NULL))
		e = execd_call(ex, "GET", url.ptr, NULL, OSAPI_CAP_ERR, dec_info, &io, gone, err, errlen);
	buf_free(&url);
	return e;
}

enum sbx_err osapi_decode_listing(const char *body, size_t len, const char *path,
	int (*fn)(const struct osapi_fileinfo *fi, void *arg), void *arg, char *err, size_t errlen)
{
	json_t *o = api_load(body, len), *it;
	enum sbx_err e = SBX_OK;
	size_t i;

	if (!json_is_array(o)) {
		api_seterr(err, errlen, "execd's listing of %s is not a JSON array", path);
		e = SBX_ERR_IO;
		goto out;
	}
	json_array_foreach (o, i, it) {
		struct osapi_fileinfo fi;
		if (decode_fileinfo(it, &fi) || !fi.name[0] || !strcmp(fi.name, ".") || !strcmp(fi.name, "..")) {
			api_seterr(err, errlen, "execd's listing of %s has a malformed entry", path);
			e = SBX_ERR_IO;
			goto out;
		}
		if (fn(&fi, arg)) {
			e = SBX_ERR_NOMEM;
			goto out;
		}
	}
out:
	json_decref(o);
	return e;
}

struct listing_out {
	const char *path;
	int (*fn)(const struct osapi_fileinfo *fi, void *arg);
	void *arg;
};

static enum sbx_err dec_listing(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	struct listing_out *o = out;

	(void)status;
	return osapi_decode_listing(body, len, o->path, o->fn, o->arg, err, errlen);
}

enum sbx_err osapi_list_dir(const struct osapi_execd *ex, const char *path,
	int (*fn)(const struct osapi_fileinfo *fi, void *arg), void *arg, bool *gone, char *err, size_t errlen)
{
	struct buf url = BUF_INIT(BUF_CAP_PATH * 4);
	struct listing_out lo = { .path = path, .fn = fn, .arg = arg };
	enum sbx_err e = SBX_ERR_NOMEM;

	if (!build_url(&url, ex->base, "/directories/list", "path", path, "depth", "1", NULL))
		e = execd_call(ex, "GET", url.ptr, NULL, OSAPI_CAP_LIST, dec_listing, &lo, gone, err, errlen);
	buf_free(&url);
	return e;
}

enum sbx_err osapi_download(const struct osapi_execd *ex, const char *path, off_t off, size_t len, int fd,
	size_t *got, bool *gone, char *err, size_t errlen)
{
	struct http_header hd[OSAPI_MAX_HEADERS + 3];
	struct buf url = BUF_INIT(BUF_CAP_PATH * 4), errbody = BUF_INIT(OSAPI_CAP_ERR);
	char range[64];
	struct http_range d = { .fd = fd, .off = off, .want = len };
	struct http_response rs;
	struct call c = { .method = "GET", .hd = hd, .sink = http_range_sink, .sink_arg = &d, .err_out = &errbody,
		.on_status = http_range_status,
		.stall_ms = ex->timeout_ms > 0 ? ex->timeout_ms : 30000, .scope = ex->scope };
	enum sbx_err e = SBX_ERR_NOMEM;

	*got = 0;
	set_gone(gone, false);
	if (!len)
		return SBX_OK;
	if (build_url(&url, ex->base, "/files/download", "path", path, NULL))
		goto out;
	c.url = url.ptr;
	c.nh = execd_headers(ex, hd);
	c.timeout_ms = http_transfer_ms(c.stall_ms, (long long)len); /* a drip is bounded too */
	snprintf(range, sizeof(range), "bytes=%lld-%lld", (long long)off, (long long)off + (long long)len - 1);
	hd[c.nh++] = (struct http_header){ "Range", range, false };
	e = perform(&c, &rs, err, errlen);
	if (e)
		goto out;
	if (rs.status == 416) { /* off is at or past the end */
		e = SBX_OK;
	} else if (rs.status != 200 && rs.status != 206) {
		e = osapi_error(rs.status, buf_str(&errbody), errbody.len, gone, err, errlen);
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

enum sbx_err osapi_upload(const struct osapi_execd *ex, const struct osapi_upload *files, size_t n, bool *gone,
	char *err, size_t errlen)
{
	struct http_header hd[OSAPI_MAX_HEADERS + 2];
	struct http_part *parts = calloc(n * 2 + 1, sizeof(*parts));
	char **meta = calloc(n + 1, sizeof(*meta));
	struct buf url = BUF_INIT(BUF_CAP_PATH), out = BUF_INIT(OSAPI_CAP_ERR);
	struct http_response rs;
	struct call c = { .method = "POST", .hd = hd, .out = &out,
		.stall_ms = ex->timeout_ms > 0 ? ex->timeout_ms : 30000, .scope = ex->scope };
	enum sbx_err e = SBX_ERR_NOMEM;

	set_gone(gone, false);
	if (!parts || !meta || build_url(&url, ex->base, "/files/upload", NULL))
		goto out;
	for (size_t i = 0; i < n; i++) {
		json_t *m = json_pack("{s:s,s:I}", "path", files[i].path, "mode", (json_int_t)digits_of(files[i].mode));
		const char *base = strrchr(files[i].path, '/');

		meta[i] = m ? json_dumps(m, JSON_COMPACT) : NULL;
		json_decref(m);
		if (!meta[i])
			goto out;
		/* metadata must be a file part (execd reads it from the form's files) */
		parts[2 * i] = (struct http_part){ .name = "metadata", .filename = "metadata", .type = "application/json",
			.data = meta[i], .len = strlen(meta[i]) };
		parts[2 * i + 1] = (struct http_part){ .name = "file", .filename = base && base[1] ? base + 1 : "file",
			.type = "application/octet-stream", .from_fd = true, .fd = files[i].fd, .size = files[i].size };
	}
	c.url = url.ptr;
	c.parts = parts;
	c.n_parts = n * 2;
	c.nh = execd_headers(ex, hd);
	{
		long long total = 0;
		for (size_t i = 0; i < n; i++)
			total += files[i].size;
		c.timeout_ms = http_transfer_ms(c.stall_ms, total); /* a server reading a byte at a time is bounded too */
	}
	e = perform(&c, &rs, err, errlen);
	if (!e && (rs.status < 200 || rs.status >= 300))
		e = osapi_error(rs.status, buf_str(&out), out.len, gone, err, errlen);
out:
	for (size_t i = 0; meta && i < n; i++)
		free(meta[i]);
	free(meta);
	free(parts);
	buf_free(&url);
	buf_free(&out);
	return e;
}

static enum sbx_err simple(const struct osapi_execd *ex, const char *method, const char *route, const char *path,
	const json_t *body, bool *gone, char *err, size_t errlen)
{
	struct buf url = BUF_INIT(BUF_CAP_PATH * 4);
	enum sbx_err e = SBX_ERR_NOMEM;

	if (!(path ? build_url(&url, ex->base, route, "path", path, NULL) : build_url(&url, ex->base, route, NULL)))
		e = execd_call(ex, method, url.ptr, body, OSAPI_CAP_ERR, NULL, NULL, gone, err, errlen);
	buf_free(&url);
	return e;
}

enum sbx_err osapi_delete_file(const struct osapi_execd *ex, const char *path, bool *gone, char *err, size_t errlen)
{
	return simple(ex, "DELETE", "/files", path, NULL, gone, err, errlen);
}

enum sbx_err osapi_delete_dir(const struct osapi_execd *ex, const char *path, bool *gone, char *err, size_t errlen)
{
	return simple(ex, "DELETE", "/directories", path, NULL, gone, err, errlen);
}

static enum sbx_err perm_call(const struct osapi_execd *ex, const char *route, const char *path, unsigned mode,
	bool *gone, char *err, size_t errlen)
{
	json_t *perm = json_pack("{s:I}", "mode", (json_int_t)digits_of(mode)), *body = json_object();
	enum sbx_err e = SBX_ERR_NOMEM;

	if (perm && body && !json_object_set(body, path, perm))
		e = simple(ex, "POST", route, NULL, body, gone, err, errlen);
	json_decref(perm);
	json_decref(body);
	return e;
}

enum sbx_err osapi_make_dir(const struct osapi_execd *ex, const char *path, unsigned mode, bool *gone, char *err,
	size_t errlen)
{
	return perm_call(ex, "/directories", path, mode, gone, err, errlen);
}

enum sbx_err osapi_make_dirs(const struct osapi_execd *ex, const char *const *paths, const unsigned *modes, size_t n,
	bool *gone, char *err, size_t errlen)
{
	json_t *body = json_object();
	enum sbx_err e = SBX_ERR_NOMEM;
	int bad = !body;

	for (size_t i = 0; i < n && !bad; i++)
		bad = json_object_set_new(body, paths[i], json_pack("{s:I}", "mode", (json_int_t)digits_of(modes[i])));
	if (!bad)
		e = simple(ex, "POST", "/directories", NULL, body, gone, err, errlen);
	json_decref(body);
	return e;
}

enum sbx_err osapi_chmod(const struct osapi_execd *ex, const char *path, unsigned mode, bool *gone, char *err,
	size_t errlen)
{
	return perm_call(ex, "/files/permissions", path, mode, gone, err, errlen);
}

enum sbx_err osapi_move(const struct osapi_execd *ex, const char *src, const char *dest, bool *gone, char *err,
	size_t errlen)
{
	json_t *body = json_pack("[{s:s,s:s}]", "src", src, "dest", dest);
	enum sbx_err e = body ? simple(ex, "POST", "/files/mv", NULL, body, gone, err, errlen) : SBX_ERR_NOMEM;

	json_decref(body);
	return e;
}
