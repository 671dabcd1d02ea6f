/* SPDX-License-Identifier: MIT */
/*
 * docker_api.c - the Docker Engine API client (see docker_api.h).
 *
 * Each call is one request through common/http (its shared connection cache
 * keeps the unix-socket connection to dockerd open between calls), and each
 * answer goes through one checked decoder (decode_*), so what dockerd says
 * is validated in one place and the providers only see C structs.
 */
#define _GNU_SOURCE
#include "docker_api.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "api.h"

#include "../common/buf.h"
#include "../common/http.h"
#include "../common/log.h"

#define DOCKER_HOSTNAME "http://docker"
#define DOCKER_VLEN 16 /* "1.45" and the like, with room */

struct docker {
	char *socket;
	long timeout_ms;
	pthread_mutex_t lock;
	char version[DOCKER_VLEN]; /* protected by lock: "" until negotiated */
	bool podman;               /* protected by lock: the engine is Podman (its compat API), with version */
};

struct docker *docker_new(const char *socket_path, long timeout_ms)
{
	struct docker *d = calloc(1, sizeof(*d));

	if (!d || !(d->socket = strdup(socket_path))) {
		free(d);
		return NULL;
	}
	d->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
	pthread_mutex_init(&d->lock, NULL);
	return d;
}

void docker_free(struct docker *d)
{
	if (!d)
		return;
	pthread_mutex_destroy(&d->lock);
	free(d->socket);
	free(d);
}

const char *docker_socket_path(const struct docker *d)
{
	return d->socket;
}

/* ---- checked decoders ---------------------------------------------------------------- */

/* A string member into out: 0, or -1 naming the field in err. */
static int dec_str(json_t *o, const char *key, char *out, size_t len, bool required, char *err, size_t errlen)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v)) {
		if (required) {
			api_seterr(err, errlen, "dockerd's answer has no '%s'", key);
			return -1;
		}
		out[0] = '\0';
		return 0;
	}
	if (!json_is_string(v) || str_fmt(out, len, "%s", json_string_value(v))) {
		api_seterr(err, errlen, "dockerd's answer has a bad '%s'", key);
		return -1;
	}
	return 0;
}

static int dec_int(json_t *o, const char *key, long long *out, bool required, char *err, size_t errlen)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v)) {
		if (required) {
			api_seterr(err, errlen, "dockerd's answer has no '%s'", key);
			return -1;
		}
		*out = 0;
		return 0;
	}
	if (!json_is_integer(v)) {
		api_seterr(err, errlen, "dockerd's answer has a bad '%s'", key);
		return -1;
	}
	*out = json_integer_value(v);
	return 0;
}

static int dec_bool(json_t *o, const char *key, bool *out, char *err, size_t errlen)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_boolean(v)) {
		api_seterr(err, errlen, "dockerd's answer has no boolean '%s'", key);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

static int dec_labels(json_t *labels, struct docker_container *c, char *err, size_t errlen)
{
	const char *k;
	json_t *v;

	if (!labels || json_is_null(labels))
		return 0;
	if (!json_is_object(labels)) {
		api_seterr(err, errlen, "dockerd's answer has bad 'Labels'");
		return -1;
	}
	c->labels = calloc(json_object_size(labels) + 1, sizeof(*c->labels));
	if (!c->labels) {
		api_seterr(err, errlen, "out of memory");
		return -1;
	}
	json_object_foreach (labels, k, v) {
		if (!json_is_string(v))
			continue;
		c->labels[c->n_labels].key = strdup(k);
		c->labels[c->n_labels].value = strdup(json_string_value(v));
		if (!c->labels[c->n_labels].key || !c->labels[c->n_labels].value) {
			free(c->labels[c->n_labels].key);
			free(c->labels[c->n_labels].value);
			api_seterr(err, errlen, "out of memory");
			return -1;
		}
		c->n_labels++;
	}
	return 0;
}

static int dec_name(const char *name, char *out, size_t len)
{
	return str_fmt(out, len, "%s", name[0] == '/' ? name + 1 : name);
}

/* n decimal digits at *p into *v (advancing p): 0, or -1. */
static int dec_digits(const char **p, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++, (*p)++) {
		if (**p < '0' || **p > '9')
			return -1;
		*v = *v * 10 + (**p - '0');
	}
	return 0;
}

int docker_time_ns(const char *s, long long *ns)
{
	struct tm tm = { 0 };
	int y, mo, d, h, mi, sec, oh = 0, om = 0, sign = 0;
	long long frac = 0;
	int digits = 0;
	time_t t;

	if (dec_digits(&s, 4, &y) || *s++ != '-' || dec_digits(&s, 2, &mo) || *s++ != '-' || dec_digits(&s, 2, &d))
		return -1;
	if (*s != 'T' && *s != 't')
		return -1;
	s++;
	if (dec_digits(&s, 2, &h) || *s++ != ':' || dec_digits(&s, 2, &mi) || *s++ != ':' || dec_digits(&s, 2, &sec))
		return -1;
	if (*s == '.') {
		for (s++; *s >= '0' && *s <= '9'; s++, digits++)
			if (digits < 9)
				frac = frac * 10 + (*s - '0');
		if (!digits)
			return -1;
		for (; digits < 9; digits++)
			frac *= 10;
	}
	if (*s == 'Z' || *s == 'z') {
		s++;
	} else if (*s == '+' || *s == '-') {
		sign = *s++ == '-' ? -1 : 1;
		if (dec_digits(&s, 2, &oh) || *s++ != ':' || dec_digits(&s, 2, &om))
			return -1;
	} else {
		return -1;
	}
	if (*s || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || oh > 23 || om > 59)
		return -1;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	t = timegm(&tm);
	*ns = ((long long)t - sign * (oh * 3600LL + om * 60LL)) * 1000000000LL + frac;
	return 0;
}

/* GET /containers/{id}/json */
static int decode_inspect(json_t *o, struct docker_container *c, char *err, size_t errlen)
{
	json_t *state = json_object_get(o, "State"), *config = json_object_get(o, "Config");
	char name[sizeof(c->name) + 1], created[64];
	long long pid, code;

	memset(c, 0, sizeof(*c));
	if (!json_is_object(o) || !json_is_object(state) || !json_is_object(config)) {
		api_seterr(err, errlen, "dockerd's container inspection lacks State or Config");
		return -1;
	}
	if (dec_str(o, "Id", c->id, sizeof(c->id), true, err, errlen) ||
	    dec_str(o, "Name", name, sizeof(name), true, err, errlen) ||
	    dec_str(state, "Status", c->status, sizeof(c->status), true, err, errlen) ||
	    dec_bool(state, "Running", &c->running, err, errlen) || dec_int(state, "Pid", &pid, true, err, errlen) ||
	    dec_int(state, "ExitCode", &code, false, err, errlen) ||
	    dec_str(config, "Image", c->image, sizeof(c->image), false, err, errlen) ||
	    dec_str(o, "Created", created, sizeof(created), false, err, errlen) ||
	    dec_labels(json_object_get(config, "Labels"), c, err, errlen))
		return -1;
	if (created[0] && docker_time_ns(created, &c->created_ns)) {
		api_seterr(err, errlen, "dockerd's answer has a bad 'Created' (%s)", created);
		return -1;
	}
	if (dec_name(name, c->name, sizeof(c->name))) {
		api_seterr(err, errlen, "dockerd's answer has a bad 'Name'");
		return -1;
	}
	c->pid = c->running ? (pid_t)pid : 0;
	c->exit_code = (int)code;
	return 0;
}

/* one entry of GET /containers/json */
static int decode_summary(json_t *o, struct docker_container *c, char *err, size_t errlen)
{
	json_t *names = json_object_get(o, "Names");

	memset(c, 0, sizeof(*c));
	if (!json_is_object(o) || !json_is_array(names) || !json_is_string(json_array_get(names, 0))) {
		api_seterr(err, errlen, "dockerd's container list has an entry without Names");
		return -1;
	}
	if (dec_str(o, "Id", c->id, sizeof(c->id), true, err, errlen) ||
	    dec_str(o, "State", c->status, sizeof(c->status), true, err, errlen) ||
	    dec_str(o, "Image", c->image, sizeof(c->image), false, err, errlen) ||
	    dec_labels(json_object_get(o, "Labels"), c, err, errlen))
		return -1;
	if (dec_name(json_string_value(json_array_get(names, 0)), c->name, sizeof(c->name))) {
		api_seterr(err, errlen, "dockerd's answer has a bad 'Names'");
		return -1;
	}
	c->running = !strcmp(c->status, "running");
	return 0;
}

static int decode_exec_inspect(json_t *o, struct docker_exec_info *x, char *err, size_t errlen)
{
	long long pid, code;

	memset(x, 0, sizeof(*x));
	if (!json_is_object(o) || dec_bool(o, "Running", &x->running, err, errlen) ||
	    dec_int(o, "Pid", &pid, false, err, errlen) || dec_int(o, "ExitCode", &code, false, err, errlen))
		return -1;
	x->pid = (pid_t)pid;
	x->exit_code = (int)code;
	return 0;
}

/* ---- answers: dockerd's bytes -> checked structs (what the calls below run) ------------- */

/* "1.41" >= "1.41"? */
static bool docker_version_ok(const char *v)
{
	unsigned maj = 0, min = 0, wmaj = 0, wmin = 0;

	if (sscanf(v, "%u.%u", &maj, &min) != 2 || sscanf(DOCKER_MIN_API, "%u.%u", &wmaj, &wmin) != 2)
		return false;
	return maj > wmaj || (maj == wmaj && min >= wmin);
}

enum sbx_err docker_decode_error(long status, const char *body, size_t len, const char *what, char *err, size_t errlen)
{
	json_t *o = len ? api_load(body, len) : NULL;
	const char *msg = json_string_value(json_object_get(o, "message"));
	enum sbx_err e = http_status_err(status);

	api_seterr(err, errlen, "%s: dockerd answered %ld: %s", what, status, msg ? msg : "(no message)");
	json_decref(o);
	/* a 2xx or 3xx where another status was expected: never a success */
	return e == SBX_OK ? SBX_ERR_IO : e;
}

enum sbx_err docker_decode_version(const char *body, size_t len, char *version, size_t vlen, char *err,
	size_t errlen)
{
	json_t *o = api_load(body, len);
	enum sbx_err e = o && !dec_str(o, "ApiVersion", version, vlen, true, err, errlen) ? SBX_OK : SBX_ERR_IO;

	if (!o)
		api_seterr(err, errlen, "dockerd's version is not JSON");
	if (!e && !docker_version_ok(version)) {
		api_seterr(err, errlen, "dockerd speaks Engine API %s; sbxfs needs %s or newer", version, DOCKER_MIN_API);
		e = SBX_ERR_NOTSUP;
	}
	json_decref(o);
	return e;
}

bool docker_decode_podman(const char *body, size_t len)
{
	json_t *o = api_load(body, len), *c;
	size_t i;
	bool podman = false;

	json_array_foreach(json_object_get(o, "Components"), i, c) {
		const char *name = json_string_value(json_object_get(c, "Name"));

		podman |= name && !strcmp(name, "Podman Engine");
	}
	json_decref(o);
	return podman;
}

enum sbx_err docker_decode_id(const char *body, size_t len, char id[DOCKER_ID_LEN + 1], char *err, size_t errlen)
{
	json_t *o = api_load(body, len);
	enum sbx_err e = o && !dec_str(o, "Id", id, DOCKER_ID_LEN + 1, true, err, errlen) ? SBX_OK : SBX_ERR_IO;

	if (!o)
		api_seterr(err, errlen, "dockerd's answer is not JSON");
	json_decref(o);
	return e;
}

enum sbx_err docker_decode_inspect(const char *body, size_t len, struct docker_container *c, char *err,
	size_t errlen)
{
	json_t *o = api_load(body, len);
	enum sbx_err e = SBX_ERR_IO;

	memset(c, 0, sizeof(*c));
	if (!o)
		api_seterr(err, errlen, "dockerd's inspection is not JSON");
	else if (!decode_inspect(o, c, err, errlen))
		e = SBX_OK;
	else
		docker_container_clear(c);
	json_decref(o);
	return e;
}

enum sbx_err docker_decode_list(const char *body, size_t len, void (*fn)(const struct docker_container *c, void *arg),
	void *arg, char *err, size_t errlen)
{
	json_t *o = api_load(body, len), *item;
	enum sbx_err e = SBX_ERR_IO;
	size_t i;

	if (!json_is_array(o)) {
		api_seterr(err, errlen, "dockerd's container list is not a JSON array");
		goto out;
	}
	e = SBX_OK;
	json_array_foreach (o, i, item) {
		struct docker_container c;

		if (decode_summary(item, &c, err, errlen)) {
			docker_container_clear(&c);
			e = SBX_ERR_IO;
			break;
		}
		fn(&c, arg);
		docker_container_clear(&c);
	}
out:
	json_decref(o);
	return e;
}

enum sbx_err docker_decode_image(const char *body, size_t len, char *user, size_t ulen, char *err, size_t errlen)
{
	json_t *o = api_load(body, len);
	enum sbx_err e = SBX_ERR_IO;

	if (!json_is_object(o) || !json_is_object(json_object_get(o, "Config")))
		api_seterr(err, errlen, "dockerd's image inspection lacks Config");
	else if (!user || !dec_str(json_object_get(o, "Config"), "User", user, ulen, false, err, errlen))
		e = SBX_OK;
	json_decref(o);
	return e;
}

enum sbx_err docker_decode_exec(const char *body, size_t len, struct docker_exec_info *info, char *err,
	size_t errlen)
{
	json_t *o = api_load(body, len);
	enum sbx_err e = o && !decode_exec_inspect(o, info, err, errlen) ? SBX_OK : SBX_ERR_IO;

	if (!o)
		api_seterr(err, errlen, "dockerd's exec inspection is not JSON");
	json_decref(o);
	return e;
}

/* ---- requests ------------------------------------------------------------------------- */

static void docker_version_get(struct docker *d, char *out, size_t len)
{
	pthread_mutex_lock(&d->lock);
	snprintf(out, len, "%s", d->version);
	pthread_mutex_unlock(&d->lock);
}

static void docker_version_set(struct docker *d, const char *v, bool podman)
{
	pthread_mutex_lock(&d->lock);
	snprintf(d->version, sizeof(d->version), "%s", v);
	d->podman = podman;
	pthread_mutex_unlock(&d->lock);
}

bool docker_is_podman(struct docker *d)
{
	bool p;

	pthread_mutex_lock(&d->lock);
	p = d->podman;
	pthread_mutex_unlock(&d->lock);
	return p;
}

struct docker_call {
	const char *method;
	const char *path;   /* after the version prefix, e.g. "/containers/json" */
	bool unversioned;   /* GET /version */
	const json_t *body;
	struct buf *out;    /* the answer (capped), or NULL with sink */
	http_sink_fn sink;
	void *sink_arg;
	long timeout_ms;    /* 0: the client's */
	long stall_ms;
};

/* One request; SBX_OK with *status, or a transport error in err (the
 * version is negotiated again next time: dockerd may have been replaced). */
static enum sbx_err docker_call(struct docker *d, const struct docker_call *c, long *status, char *err, size_t errlen)
{
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct buf url = BUF_INIT(BUF_CAP_PATH);
	char version[DOCKER_VLEN];
	enum sbx_err e;

	*status = 0;
	docker_version_get(d, version, sizeof(version));
	if (c->unversioned)
		e = buf_addf(&url, DOCKER_HOSTNAME "%s", c->path) ? SBX_ERR_NOMEM : SBX_OK;
	else
		e = buf_addf(&url, DOCKER_HOSTNAME "/v%s%s", version, c->path) ? SBX_ERR_NOMEM : SBX_OK;
	if (e) {
		api_seterr(err, errlen, "request path too long");
		buf_free(&url);
		return SBX_ERR_INVAL;
	}
	rq.method = c->method;
	rq.url = url.ptr;
	rq.unix_socket = d->socket;
	rq.json = c->body;
	rq.out = c->out;
	rq.sink = c->sink;
	rq.sink_arg = c->sink_arg;
	rq.timeout_ms = c->timeout_ms ? c->timeout_ms : d->timeout_ms;
	rq.stall_ms = c->stall_ms;
	rq.connect_timeout_ms = 3000;
	rq.scope = "docker";
	e = http_perform(&rq, &rs);
	buf_free(&url);
	if (e) {
		if (e == SBX_ERR_TOOBIG)
			api_seterr(err, errlen, "dockerd's answer to %s %s is too large (%s)", c->method, c->path, rs.error);
		else if (e == SBX_ERR_TIMEOUT)
			api_seterr(err, errlen, "dockerd at unix://%s did not answer %s %s in time: %s (%s)", d->socket, c->method,
				c->path, rs.error, rs.id);
		else
			api_seterr(err, errlen, "dockerd is not reachable at unix://%s: %s (%s)", d->socket, rs.error, rs.id);
		if (e != SBX_ERR_TOOBIG)
			docker_version_set(d, "", false);
		return e == SBX_ERR_TOOBIG ? SBX_ERR_IO : e;
	}
	*status = rs.status;
	return SBX_OK;
}

/* ---- the api.h client: request, status, decode ---------------------------------------- */

static enum sbx_err docker_send(struct docker *d, const struct api_req *q, bool unversioned, struct buf *out,
	long *status, char *err, size_t errlen)
{
	struct docker_call c = { .method = q->method, .path = q->path, .unversioned = unversioned, .body = q->body,
		.out = out, .timeout_ms = q->timeout_ms };

	return docker_call(d, &c, status, err, errlen);
}

static enum sbx_err docker_send_raw(void *ctx, const struct api_req *q, struct buf *out, long *status, char *err,
	size_t errlen)
{
	return docker_send(ctx, q, true, out, status, err, errlen);
}

/* A versioned call: negotiates first. */
static enum sbx_err docker_send_versioned(void *ctx, const struct api_req *q, struct buf *out, long *status,
	char *err, size_t errlen)
{
	char v[DOCKER_VLEN];
	enum sbx_err e = docker_negotiate(ctx, v, sizeof(v), err, errlen);

	return e ? e : docker_send(ctx, q, false, out, status, err, errlen);
}

/* dockerd's {"message": ...} of a failed call into err; the status's meaning. */
static enum sbx_err docker_error_doc(void *ctx, long status, const char *body, size_t len, const char *what,
	char *err, size_t errlen)
{
	(void)ctx;
	return docker_decode_error(status, body, len, what, err, errlen);
}

static enum sbx_err docker_api(struct docker *d, const struct api_req *q, char *err, size_t errlen)
{
	struct api_client cl = { .send = docker_send_versioned, .error = docker_error_doc, .ctx = d };

	return api_call(&cl, q, err, errlen);
}

/* What GET /version tells: the API version, and whether the engine is Podman. */
struct version_out {
	char v[DOCKER_VLEN];
	bool podman;
};

/* The decoders in api.h's shape (dockerd's answers never need the status). */
static enum sbx_err dec_version(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	struct version_out *vo = out;
	enum sbx_err e = docker_decode_version(body, len, vo->v, sizeof(vo->v), err, errlen);

	(void)status;
	vo->podman = docker_decode_podman(body, len);
	return e;
}

static enum sbx_err dec_id(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	(void)status;
	return docker_decode_id(body, len, out, err, errlen);
}

static enum sbx_err dec_inspect(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	(void)status;
	return docker_decode_inspect(body, len, out, err, errlen);
}

static enum sbx_err dec_exec(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	(void)status;
	return docker_decode_exec(body, len, out, err, errlen);
}

struct list_out {
	void (*fn)(const struct docker_container *c, void *arg);
	void *arg;
};

static enum sbx_err dec_list(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	struct list_out *l = out;

	(void)status;
	return docker_decode_list(body, len, l->fn, l->arg, err, errlen);
}

struct image_out {
	char *user;
	size_t ulen;
};

static enum sbx_err dec_image(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	struct image_out *im = out;

	(void)status;
	return docker_decode_image(body, len, im->user, im->ulen, err, errlen);
}

enum sbx_err docker_negotiate(struct docker *d, char *version, size_t vlen, char *err, size_t errlen)
{
	struct version_out vo = { .v = "" };
	struct api_client cl = { .send = docker_send_raw, .error = docker_error_doc, .ctx = d };
	struct api_req q = { .method = "GET", .path = "/version", .what = "GET /version", .want = 200,
		.decode = dec_version, .out = &vo };
	enum sbx_err e;

	docker_version_get(d, vo.v, sizeof(vo.v));
	if (vo.v[0]) {
		snprintf(version, vlen, "%s", vo.v);
		return SBX_OK;
	}
	e = api_call(&cl, &q, err, errlen);
	if (e == SBX_ERR_NOTSUP)
		api_seterr(err, errlen, "dockerd at unix://%s speaks Engine API %s; sbxfs needs %s or newer", d->socket,
			vo.v, DOCKER_MIN_API);
	if (e)
		return e;
	docker_version_set(d, vo.v, vo.podman);
	snprintf(version, vlen, "%s", vo.v);
	return SBX_OK;
}

/* ---- containers -------------------------------------------------------------------------- */

static json_t *jstrv(const char *const *v)
{
	json_t *a = json_array();

	for (size_t i = 0; a && v && v[i]; i++)
		if (json_array_append_new(a, json_string(v[i]))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

/* The seccomp security option: dockerd takes the profile itself
 * ("seccomp=<JSON>", what the docker CLI sends after reading the file),
 * Podman's compat API takes a path on its host ("seccomp=<file>") and
 * refuses JSON ("opening seccomp profile failed"). */
static const char *docker_seccomp_opt(const struct docker_create_spec *s, bool podman)
{
	return podman ? s->seccomp_profile_file : s->seccomp_profile;
}

static json_t *docker_create_body(const struct docker_create_spec *s, bool podman)
{
	json_t *o = json_object(), *hc = json_object(), *labels = json_object(), *mounts = json_array(), *tmpfs, *secopt;
	struct buf seccomp = BUF_INIT(2 << 20);
	char opts[128];
	int r = 0;

	if (!o || !hc || !labels || !mounts)
		goto fail;
	r |= json_object_set_new(o, "Image", json_string(s->image));
	if (s->user)
		r |= json_object_set_new(o, "User", json_string(s->user));
	if (s->hostname)
		r |= json_object_set_new(o, "Hostname", json_string(s->hostname));
	if (s->workdir)
		r |= json_object_set_new(o, "WorkingDir", json_string(s->workdir));
	if (s->entrypoint)
		r |= json_object_set_new(o, "Entrypoint", jstrv(s->entrypoint));
	if (s->cmd)
		r |= json_object_set_new(o, "Cmd", jstrv(s->cmd));
	if (s->env)
		r |= json_object_set_new(o, "Env", jstrv(s->env));
	for (size_t i = 0; i < s->n_labels; i++)
		r |= json_object_set_new(labels, s->labels[i].key, json_string(s->labels[i].value));
	r |= json_object_set(o, "Labels", labels);
	r |= json_object_set_new(o, "AttachStdin", json_false());
	r |= json_object_set_new(o, "AttachStdout", json_false());
	r |= json_object_set_new(o, "AttachStderr", json_false());
	r |= json_object_set_new(o, "OpenStdin", json_false());
	r |= json_object_set_new(o, "Tty", json_false());
	for (size_t i = 0; i < s->n_mounts; i++)
		r |= json_array_append_new(mounts, json_pack("{s:s,s:s,s:s,s:b,s:{s:s}}", "Type", "bind", "Source",
							   s->mounts[i].source, "Target", s->mounts[i].target, "ReadOnly",
							   s->mounts[i].read_only, "BindOptions", "Propagation", "rprivate"));
	r |= json_object_set(hc, "Mounts", mounts);
	r |= json_object_set_new(hc, "NetworkMode", json_string(s->network_mode ? s->network_mode : "none"));
	r |= json_object_set_new(hc, "CapDrop", json_pack("[s]", "ALL"));
	if (s->cap_add)
		r |= json_object_set_new(hc, "CapAdd", jstrv(s->cap_add));
	secopt = json_pack("[s]", "no-new-privileges");
	if (secopt && docker_seccomp_opt(s, podman) && (buf_addf(&seccomp, "seccomp=%s", docker_seccomp_opt(s, podman)) ||
					      json_array_append_new(secopt, json_string(buf_str(&seccomp)))))
		r = -1;
	r |= json_object_set_new(hc, "SecurityOpt", secopt);
	r |= json_object_set_new(hc, "IpcMode", json_string("private"));
	r |= json_object_set_new(hc, "Init", json_false());
	r |= json_object_set_new(hc, "PublishAllPorts", json_false());
	r |= json_object_set_new(hc, "RestartPolicy", json_pack("{s:s}", "Name", "no"));
	r |= json_object_set_new(hc, "LogConfig", json_pack("{s:s,s:{s:s,s:s}}", "Type", "json-file", "Config",
						   "max-size", "1m", "max-file", "1"));
	if (s->memory > 0) {
		r |= json_object_set_new(hc, "Memory", json_integer(s->memory));
		r |= json_object_set_new(hc, "MemorySwap", json_integer(s->memory));
	}
	if (s->nano_cpus > 0)
		r |= json_object_set_new(hc, "NanoCpus", json_integer(s->nano_cpus));
	if (s->pids_limit > 0)
		r |= json_object_set_new(hc, "PidsLimit", json_integer(s->pids_limit));
	if (s->tmp_size > 0) {
		snprintf(opts, sizeof(opts), "rw,nosuid,nodev,mode=1777,size=%lld", s->tmp_size);
		tmpfs = json_pack("{s:s}", "/tmp", opts);
		r |= json_object_set_new(hc, "Tmpfs", tmpfs);
	}
	r |= json_object_set(o, "HostConfig", hc);
	json_decref(hc);
	json_decref(labels);
	json_decref(mounts);
	buf_free(&seccomp);
	if (r) {
		json_decref(o);
		return NULL;
	}
	return o;
fail:
	json_decref(o);
	json_decref(hc);
	json_decref(labels);
	json_decref(mounts);
	return NULL;
}

/* POST body to path; a 201 answer's "Id" into id (what names the call in
 * errors). */
static enum sbx_err docker_post_for_id(struct docker *d, const char *path, json_t *body, const char *what,
	char id[DOCKER_ID_LEN + 1], char *err, size_t errlen)
{
	struct api_req q = { .method = "POST", .path = path, .body = body, .what = what, .want = 201,
		.decode = dec_id, .out = id };

	return docker_api(d, &q, err, errlen);
}

enum sbx_err docker_create(struct docker *d, const struct docker_create_spec *s, char id[DOCKER_ID_LEN + 1],
	char *err, size_t errlen)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	char name[300], version[DOCKER_VLEN];
	enum sbx_err e = docker_negotiate(d, version, sizeof(version), err, errlen); /* which engine: the body differs */
	json_t *body;

	if (e)
		return e;
	if (s->seccomp_profile && docker_is_podman(d) && !s->seccomp_profile_file) {
		api_seterr(err, errlen, "create: Podman takes a seccomp profile as a file and none was written");
		return SBX_ERR_INVAL;
	}
	body = docker_create_body(s, docker_is_podman(d));
	e = SBX_ERR_NOMEM;
	if (!body || docker_query_escape(s->name, name, sizeof(name)) ||
	    buf_addf(&path, "/containers/create?name=%s", name))
		api_seterr(err, errlen, "cannot build the create request");
	else
		e = docker_post_for_id(d, path.ptr, body, "create", id, err, errlen);
	/* Podman answers a name in use with 500 (its storage's error), where
	 * dockerd answers 409: the same fact, the same error */
	if (e && e != SBX_ERR_EXIST && docker_is_podman(d) && strstr(err, "that name is already in use"))
		e = SBX_ERR_EXIST;
	json_decref(body);
	buf_free(&path);
	return e;
}

/* A call on one container: POST/DELETE /containers/ID SUFFIX with no answer
 * but a status (a 2xx, or 304: already so). */
static enum sbx_err docker_simple(struct docker *d, const char *method, const char *what, const char *id,
	const char *suffix, long timeout_ms, char *err, size_t errlen)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct api_req q = { .method = method, .timeout_ms = timeout_ms, .what = what, .want = API_ANY_2XX,
		.also = 304 };
	enum sbx_err e = SBX_ERR_INVAL;

	if (!buf_addf(&path, "/containers/%s%s", id, suffix)) {
		q.path = path.ptr;
		e = docker_api(d, &q, err, errlen);
	}
	buf_free(&path);
	return e;
}

enum sbx_err docker_start(struct docker *d, const char *id, char *err, size_t errlen)
{

	return docker_simple(d, "POST", "start", id, "/start", 0, err, errlen);
}

enum sbx_err docker_kill(struct docker *d, const char *id, const char *signal, char *err, size_t errlen)
{
	char suffix[48];
	enum sbx_err e;

	snprintf(suffix, sizeof(suffix), "/kill?signal=%s", signal);
	e = docker_simple(d, "POST", "kill", id, suffix, 0, err, errlen);
	return e == SBX_ERR_EXIST ? SBX_OK : e; /* 409: not running */
}

enum sbx_err docker_pause(struct docker *d, const char *id, bool pause, char *err, size_t errlen)
{
	enum sbx_err e = docker_simple(d, "POST", pause ? "pause" : "unpause", id, pause ? "/pause" : "/unpause", 0,
		err, errlen);

	return e == SBX_ERR_EXIST ? SBX_OK : e; /* 409: already (un)paused */
}

enum sbx_err docker_stop(struct docker *d, const char *id, int secs, char *err, size_t errlen)
{
	char suffix[48];

	snprintf(suffix, sizeof(suffix), "/stop?t=%d", secs);
	return docker_simple(d, "POST", "stop", id, suffix, (long)(secs + 30) * 1000, err, errlen);
}

enum sbx_err docker_remove(struct docker *d, const char *id, char *err, size_t errlen)
{
	enum sbx_err e = docker_simple(d, "DELETE", "remove", id, "?force=1&v=1", 60000, err, errlen);

	return e == SBX_ERR_GONE ? SBX_OK : e;
}

/* GET path: a 200's answer (up to cap) decoded by dec into out. */
static enum sbx_err docker_get(struct docker *d, const struct buf *path, size_t cap, const char *what,
	api_decode_fn dec, void *out, char *err, size_t errlen)
{
	struct api_req q = { .method = "GET", .path = path->ptr, .cap = cap, .what = what, .want = 200,
		.decode = dec, .out = out };

	return docker_api(d, &q, err, errlen);
}

enum sbx_err docker_inspect(struct docker *d, const char *id, struct docker_container *c, char *err, size_t errlen)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = SBX_ERR_INVAL;

	memset(c, 0, sizeof(*c));
	if (!buf_addf(&path, "/containers/%s/json", id))
		e = docker_get(d, &path, HTTP_CAP_LIST, "inspect", dec_inspect, c, err, errlen);
	buf_free(&path);
	return e;
}

enum sbx_err docker_list(struct docker *d, const char *const *labels,
	void (*fn)(const struct docker_container *c, void *arg), void *arg, char *err, size_t errlen)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct list_out lo = { .fn = fn, .arg = arg };
	json_t *filters = json_pack("{s:[]}", "label");
	char *ftext = NULL, esc[2048];
	enum sbx_err e = SBX_ERR_NOMEM;
	size_t i;

	for (i = 0; filters && labels && labels[i]; i++)
		if (json_array_append_new(json_object_get(filters, "label"), json_string(labels[i])))
			goto out;
	if (!filters || !(ftext = json_dumps(filters, JSON_COMPACT)) || docker_query_escape(ftext, esc, sizeof(esc)) ||
	    buf_addf(&path, "/containers/json?all=1&filters=%s", esc))
		goto out;
	e = docker_get(d, &path, HTTP_CAP_LIST, "list", dec_list, &lo, err, errlen);
out:
	json_decref(filters);
	free(ftext);
	buf_free(&path);
	return e;
}

enum sbx_err docker_image_exists(struct docker *d, const char *image, char *user, size_t ulen, char *err,
	size_t errlen)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct image_out im = { .user = user, .ulen = ulen };
	char esc[600];
	enum sbx_err e = SBX_ERR_INVAL;

	if (!docker_query_escape(image, esc, sizeof(esc)) && !buf_addf(&path, "/images/%s/json", esc))
		e = docker_get(d, &path, HTTP_CAP_LIST, "image", dec_image, &im, err, errlen);
	buf_free(&path);
	return e;
}

const char *docker_label(const struct docker_container *c, const char *key)
{
	for (size_t i = 0; i < c->n_labels; i++)
		if (!strcmp(c->labels[i].key, key))
			return c->labels[i].value;
	return NULL;
}

void docker_container_clear(struct docker_container *c)
{
	for (size_t i = 0; i < c->n_labels; i++) {
		free(c->labels[i].key);
		free(c->labels[i].value);
	}
	free(c->labels);
	c->labels = NULL;
	c->n_labels = 0;
}

/* ---- exec ----------------------------------------------------------------------------------- */

enum sbx_err docker_exec_create(struct docker *d, const char *container, const struct docker_exec_spec *s,
	char id[DOCKER_ID_LEN + 1], char *err, size_t errlen)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	json_t *body = json_pack("{s:b,s:b,s:b,s:b,s:o}", "AttachStdin", 0, "AttachStdout", s->attach, "AttachStderr",
		s->attach, "Tty", 0, "Cmd", jstrv(s->argv));
	enum sbx_err e = SBX_ERR_NOMEM;

	if (body && !(s->user && json_object_set_new(body, "User", json_string(s->user))) &&
	    !(s->workdir && json_object_set_new(body, "WorkingDir", json_string(s->workdir))) &&
	    !json_object_set_new(body, "Env", json_array()) && !buf_addf(&path, "/containers/%s/exec", container))
		e = docker_post_for_id(d, path.ptr, body, "exec", id, err, errlen);
	json_decref(body);
	buf_free(&path);
	return e;
}

bool docker_demux_feed(struct docker_demux *dm, const char *data, size_t len, docker_stream_fn fn, void *arg)
{
	while (len && !dm->stopped) {
		if (dm->left == 0) {
			size_t n = 8 - dm->have;
			if (n > len)
				n = len;
			memcpy(dm->hdr + dm->have, data, n);
			dm->have += n;
			data += n;
			len -= n;
			if (dm->have < 8)
				break;
			dm->have = 0;
			dm->stream = dm->hdr[0];
			dm->left = (size_t)dm->hdr[4] << 24 | (size_t)dm->hdr[5] << 16 | (size_t)dm->hdr[6] << 8 |
				   (size_t)dm->hdr[7];
			continue;
		}
		size_t n = dm->left < len ? dm->left : len;
		/* stdin (0), Docker's systemerr (3) or a byte no stream has:
		 * not the exec's output, and fn is promised 1 or 2 */
		if ((dm->stream == 1 || dm->stream == 2) && !fn(dm->stream, data, n, arg))
			dm->stopped = true;
		dm->left -= n;
		data += n;
		len -= n;
	}
	return !dm->stopped;
}

struct exec_stream {
	struct docker_demux dm;
	docker_stream_fn fn;
	void *arg;
};

static bool exec_sink(const char *data, size_t len, void *arg)
{
	struct exec_stream *x = arg;

	return docker_demux_feed(&x->dm, data, len, x->fn, x->arg);
}

enum sbx_err docker_exec_start(struct docker *d, const char *id, docker_stream_fn fn, void *arg, long stall_ms,
	char *err, size_t errlen)
{
	struct buf out = BUF_INIT(HTTP_CAP_SMALL), path = BUF_INIT(BUF_CAP_PATH);
	struct exec_stream xs = { .dm = DOCKER_DEMUX_INIT, .fn = fn, .arg = arg };
	json_t *body = json_pack("{s:b,s:b}", "Detach", fn == NULL, "Tty", 0);
	struct docker_call c = { .method = "POST", .body = body };
	char v[DOCKER_VLEN];
	enum sbx_err e = SBX_ERR_NOMEM;
	long status = 0;

	if (!body || buf_addf(&path, "/exec/%s/start", id))
		goto out;
	c.path = path.ptr;
	if (fn) {
		c.sink = exec_sink;
		c.sink_arg = &xs;
		c.timeout_ms = -1; /* the stream lasts as long as the exec */
		c.stall_ms = stall_ms;
	} else {
		c.out = &out;
	}
	e = docker_negotiate(d, v, sizeof(v), err, errlen);
	if (!e)
		e = docker_call(d, &c, &status, err, errlen);
	if (e == SBX_ERR_TIMEOUT)
		api_seterr(err, errlen, "exec %.12s: no output for %ld ms", id, stall_ms);
	if (!e && (status < 200 || status >= 300))
		e = docker_decode_error(status, buf_str(&out), out.len, "exec start", err, errlen);
out:
	json_decref(body);
	buf_free(&out);
	buf_free(&path);
	return e;
}

enum sbx_err docker_exec_inspect(struct docker *d, const char *id, struct docker_exec_info *info, char *err,
	size_t errlen)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = SBX_ERR_INVAL;

	if (!buf_addf(&path, "/exec/%s/json", id))
		e = docker_get(d, &path, HTTP_CAP_SMALL, "exec inspect", dec_exec, info, err, errlen);
	buf_free(&path);
	return e;
}

int docker_query_escape(const char *s, char *out, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		bool plain = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
			     ch == '-' || ch == '_' || ch == '.' || ch == '~';
		if (n + (plain ? 1 : 3) >= len) {
			errno = ENAMETOOLONG;
			return -1;
		}
		if (plain) {
			out[n++] = (char)ch;
		} else {
			out[n++] = '%';
			out[n++] = hex[ch >> 4];
			out[n++] = hex[ch & 15];
		}
	}
	if (n >= len) {
		errno = ENAMETOOLONG;
		return -1;
	}
	out[n] = '\0';
	return 0;
}
