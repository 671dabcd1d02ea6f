/* SPDX-License-Identifier: MIT */
/*
 * json.c - fuzz the decoders of every provider's API answers: what the
 * docker (providers/docker_api.c), aio (providers/aio_api.c) and opensandbox
 * (providers/opensandbox_api.c) clients run on the status and body of an
 * answer (*_decode_*, aio_envelope, osapi_error).  dockerd, an AIO sandbox
 * (its server runs inside the sandbox, or at a base_url) and the OpenSandbox
 * lifecycle server and execd are all on the other side of a trust boundary.
 *
 * Input: byte 0 picks the decoder ('A' + its index below), byte 1 the HTTP
 * status ('0' + an index into statuses[]), the rest is the body.
 *
 * Checks: the error is one of enum sbx_err and err one NUL-terminated line;
 * what a decoder hands on fits its field and is NUL-terminated; names of
 * listed files are single components; an execd endpoint and its headers
 * hold no byte that could end a header or split a URL.
 */
#include <stdbool.h>
#include <string.h>

#include <jansson.h>

#include "../../common/err.h"
#include "../../common/log.h"
#include "../../providers/aio_api.h"
#include "../../providers/docker_api.h"
#include "../../providers/opensandbox_api.h"
#include "fuzz.h"

static const long statuses[] = { 200, 201, 204, 206, 304, 400, 401, 403, 404, 409, 416, 422, 500, 503 };

#define STR_OK(a) FUZZ_CHECK(memchr((a), '\0', sizeof(a)) != NULL)

/* Read every byte the caller is told it may read (ASan checks the bounds). */
static void touch(const char *p, size_t n)
{
	volatile unsigned char sum = 0;

	for (size_t i = 0; i < n; i++)
		sum = (unsigned char)(sum + (unsigned char)p[i]);
	(void)sum;
}

static void check_line(const char *err, size_t len)
{
	FUZZ_CHECK(memchr(err, '\0', len) != NULL);
}

static void check_component(const char *name, size_t cap)
{
	FUZZ_CHECK(memchr(name, '\0', cap) && name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, ".."));
}

static void on_container(const struct docker_container *c, void *arg)
{
	(void)arg;
	STR_OK(c->id);
	STR_OK(c->name);
	STR_OK(c->status);
	STR_OK(c->image);
	FUZZ_CHECK(c->n_labels == 0 || c->labels);
	for (size_t i = 0; i < c->n_labels; i++)
		FUZZ_CHECK(c->labels[i].key && c->labels[i].value);
	(void)docker_label(c, "org.sbxfs.state_id");
}

static void on_session(const char *id, void *arg)
{
	(void)arg;
	FUZZ_CHECK(id != NULL);
}

static int on_aio_file(const struct aio_file *f, void *arg)
{
	(void)arg;
	check_component(f->name, sizeof(f->name));
	FUZZ_CHECK(f->perm >= -1 && f->perm <= 07777);
	return 0;
}

static void on_sandbox(const struct osapi_sandbox *sb, void *arg)
{
	(void)arg;
	STR_OK(sb->id);
	STR_OK(sb->state);
	STR_OK(sb->reason);
	STR_OK(sb->message);
	FUZZ_CHECK(sb->id[0] && sb->n_meta <= OSAPI_MAX_META);
	for (size_t i = 0; i < sb->n_meta; i++) {
		STR_OK(sb->meta[i].key);
		STR_OK(sb->meta[i].value);
	}
	(void)osapi_meta(sb, "sbxfs.scope");
}

static int on_os_file(const struct osapi_fileinfo *fi, void *arg)
{
	(void)arg;
	check_component(fi->name, sizeof(fi->name));
	return 0;
}

/* nothing below 0x21 but none at all, nothing of " <>\^`{|} (osapi_decode_endpoint) */
static bool url_safe(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s <= 0x20 || *s == 0x7f || strchr("\"<>\\^`{|}", *s))
			return false;
	return true;
}

static bool header_safe(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

static enum sbx_err decode(unsigned which, long status, const char *body, size_t len, char *err, size_t errlen)
{
	enum sbx_err e = SBX_OK;

	switch (which) {
	case 0:
		e = docker_decode_error(status, body, len, "inspect", err, errlen);
		FUZZ_CHECK(e != SBX_OK);
		break;
	case 1: {
		char v[16];
		e = docker_decode_version(body, len, v, sizeof(v), err, errlen);
		if (!e || e == SBX_ERR_NOTSUP)
			STR_OK(v);
		break;
	}
	case 2: {
		char id[DOCKER_ID_LEN + 1];
		e = docker_decode_id(body, len, id, err, errlen);
		if (!e)
			STR_OK(id);
		break;
	}
	case 3: {
		struct docker_container c;
		e = docker_decode_inspect(body, len, &c, err, errlen);
		if (!e) {
			on_container(&c, NULL);
			FUZZ_CHECK(c.running || c.pid == 0);
			docker_container_clear(&c);
		}
		FUZZ_CHECK(c.labels == NULL && c.n_labels == 0); /* cleared, or never filled */
		break;
	}
	case 4:
		e = docker_decode_list(body, len, on_container, NULL, err, errlen);
		break;
	case 5: {
		char user[64];
		e = docker_decode_image(body, len, (len & 1) ? user : NULL, sizeof(user), err, errlen);
		if (!e && (len & 1))
			STR_OK(user);
		break;
	}
	case 6: {
		struct docker_exec_info x;
		e = docker_decode_exec(body, len, &x, err, errlen);
		break;
	}
	case 7: {
		json_t *root = NULL, *data = NULL;
		e = aio_envelope(status, body, len, &root, &data, err, errlen);
		FUZZ_CHECK(e ? !root && !data : root != NULL);
		json_decref(root);
		break;
	}
	case 8: {
		struct aio_info info;
		e = aio_decode_sandbox(status, body, len, &info, err, errlen);
		STR_OK(info.home_dir);
		STR_OK(info.version);
		break;
	}
	case 9:
	case 10: {
		struct aio_bash_result r;
		e = aio_decode_bash(status, body, len, which == 10, &r, err, errlen);
		if (!e) {
			STR_OK(r.session_id);
			STR_OK(r.command_id);
			FUZZ_CHECK(r.status != AIO_UNKNOWN);
			FUZZ_CHECK((r.out == NULL) == (r.out_len == 0) && (r.err == NULL) == (r.err_len == 0));
			touch(r.out, r.out_len);
			touch(r.err, r.err_len);
		} else {
			FUZZ_CHECK(!r.out && !r.err);
		}
		aio_bash_result_clear(&r);
		break;
	}
	case 11: {
		struct aio_shell_result r;
		e = aio_decode_shell(status, body, len, &r, err, errlen);
		if (!e) {
			STR_OK(r.session_id);
			FUZZ_CHECK((r.output == NULL) == (r.output_len == 0));
			touch(r.output, r.output_len);
		}
		aio_shell_result_clear(&r);
		break;
	}
	case 12:
		e = aio_decode_sessions(status, body, len, on_session, NULL, err, errlen);
		break;
	case 13:
		e = aio_decode_file_list(status, body, len, "/mnt/user-data/workspace", on_aio_file, NULL, err, errlen);
		break;
	case 14:
		e = aio_decode_download_error(status, body, len, "/mnt/user-data/workspace/a", err, errlen);
		FUZZ_CHECK(e != SBX_OK);
		break;
	case 15: {
		bool gone = false;
		e = osapi_error(status, body, len, &gone, err, errlen);
		FUZZ_CHECK(e != SBX_OK && (!gone || e == SBX_ERR_GONE));
		break;
	}
	case 16: {
		struct osapi_sandbox sb;
		e = osapi_decode_sandbox(body, len, &sb, err, errlen);
		if (!e)
			on_sandbox(&sb, NULL);
		break;
	}
	case 17: {
		bool more;
		e = osapi_decode_list(body, len, on_sandbox, NULL, &more, err, errlen);
		FUZZ_CHECK(!e || !more);
		break;
	}
	case 18: {
		double got;
		e = osapi_decode_renew(body, len, &got, err, errlen);
		break;
	}
	case 19: {
		struct osapi_execd *ex = malloc(sizeof(*ex));
		FUZZ_CHECK(ex);
		e = osapi_decode_endpoint(body, len, (len & 1) ? "https" : "http", ex, err, errlen);
		if (!e) {
			size_t n;
			STR_OK(ex->base);
			n = strlen(ex->base);
			FUZZ_CHECK(n > 0 && ex->base[n - 1] != '/' && strstr(ex->base, "://") && url_safe(ex->base));
			FUZZ_CHECK(ex->n_headers >= 0 && ex->n_headers <= OSAPI_MAX_HEADERS);
			for (int i = 0; i < ex->n_headers; i++) {
				STR_OK(ex->hname[i]);
				STR_OK(ex->hvalue[i]);
				FUZZ_CHECK(ex->hname[i][0] && header_safe(ex->hname[i]) && !strchr(ex->hname[i], ':'));
				FUZZ_CHECK(ex->hvalue[i][0] && header_safe(ex->hvalue[i]));
			}
		}
		free(ex);
		break;
	}
	case 20: {
		struct osapi_cmd_status st;
		e = osapi_decode_status(body, len, &st, err, errlen);
		if (!e)
			STR_OK(st.error);
		break;
	}
	case 21: {
		struct osapi_fileinfo fi;
		e = osapi_decode_info(body, len, "/mnt/user-data/workspace/a", &fi, err, errlen);
		if (!e)
			STR_OK(fi.name);
		break;
	}
	case 22:
		e = osapi_decode_listing(body, len, "/mnt/user-data/workspace", on_os_file, NULL, err, errlen);
		break;
	case 23: {
		/* a time as the servers write it (expiresAt, modified_at): NUL-terminated text */
		char *s = strndup(body, len);
		double t;
		FUZZ_CHECK(s);
		(void)osapi_parse_time(s, &t);
		free(s);
		break;
	}
	}
	return e;
}

#define N_DECODERS 24

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_set_min_level(LOG_LVL_ERR);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	unsigned which;
	long status;
	enum sbx_err e;

	if (size < 2)
		return 0;
	which = (uint8_t)(data[0] - 'A') % N_DECODERS;
	status = statuses[(uint8_t)(data[1] - '0') % (sizeof(statuses) / sizeof(statuses[0]))];
	memset(err, 0x55, sizeof(err));
	err[0] = '\0';
	e = decode(which, status, (const char *)data + 2, size - 2, err, sizeof(err));
	FUZZ_CHECK((unsigned)e < SBX_ERR_COUNT);
	check_line(err, sizeof(err));
	return 0;
}
