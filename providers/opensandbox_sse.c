/* SPDX-License-Identifier: MIT */
/*
 * opensandbox_sse.c - the parser of execd's event stream (the response of
 * POST /command; declared in opensandbox_api.h, struct osapi_sse): one
 * parser for both forms execd writes, bare JSON lines and "data: " lines
 * (blank, ":" comment, event:, id: and retry: lines skipped), fed in
 * whatever pieces libcurl hands over.  Each event (init, stdout, stderr,
 * execution_complete, error) goes to the caller's callbacks and into a
 * struct osapi_cmd_result; a terminal event, or a consumer that says stop,
 * ends the stream.
 *
 * Why apart from opensandbox_api.c: it is the one parser there of input
 * the sandbox's own code can write (execd is a server inside the sandbox,
 * replaceable by what runs there), kept small and free of the HTTP client
 * so that the fuzz harness (tests/fuzz/sse.c) links it alone.  A line is
 * capped at OSAPI_SSE_LINE_MAX: a longer one is dropped and counted as a
 * bad event; a line that is not an event (no "type") is counted too.
 */
#define _GNU_SOURCE
#include "opensandbox_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../common/buf.h"

void osapi_sse_init(struct osapi_sse *p, const struct osapi_cmd_events *ev, struct osapi_cmd_result *r)
{
	memset(p, 0, sizeof(*p));
	p->ev = ev;
	p->r = r;
}

void osapi_sse_free(struct osapi_sse *p)
{
	free(p->line);
	p->line = NULL;
	p->len = p->alloc = 0;
}

static bool prefixed(const char *line, size_t n, const char *p)
{
	size_t k = strlen(p);

	return n >= k && !memcmp(line, p, k);
}

/* One line of the stream: false when the stream is over for us. */
static bool sse_line(struct osapi_sse *p, char *line, size_t n)
{
	struct osapi_cmd_result *r = p->r;
	json_t *o, *text;
	const char *type;
	bool go_on = true;

	if (n && line[n - 1] == '\r')
		n--;
	if (!n || line[0] == ':' || prefixed(line, n, "event:") || prefixed(line, n, "id:") || prefixed(line, n, "retry:"))
		return true;
	if (prefixed(line, n, "data:")) {
		line += 5;
		n -= 5;
		if (n && line[0] == ' ') {
			line++;
			n--;
		}
	}
	o = json_loadb(line, n, 0, NULL);
	type = json_string_value(json_object_get(o, "type"));
	if (!type) {
		r->bad_events++;
		json_decref(o);
		return true;
	}
	text = json_object_get(o, "text");
	if (!strcmp(type, "init")) {
		if (json_is_string(text) && !str_fmt(r->id, sizeof(r->id), "%s", json_string_value(text))) {
			r->saw_init = true;
			if (p->ev && p->ev->on_init)
				p->ev->on_init(r->id, p->ev->arg);
		} else {
			r->bad_events++;
		}
	} else if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		if (!json_is_string(text)) {
			r->bad_events++;
		} else if (p->ev && p->ev->on_output &&
			   !p->ev->on_output(type[3] == 'o' ? OSAPI_STDOUT : OSAPI_STDERR, json_string_value(text),
				   json_string_length(text), p->ev->arg)) {
			r->stopped = true;
			go_on = false;
		}
	} else if (!strcmp(type, "execution_complete")) {
		r->ended = r->has_exit = true;
		r->exit_code = 0;
		go_on = false;
	} else if (!strcmp(type, "error")) {
		json_t *ev = json_object_get(o, "error"), *tb = json_object_get(ev, "traceback");
		const char *val = json_string_value(json_object_get(ev, "evalue"));
		char *end = NULL;
		long code = val ? strtol(val, &end, 10) : 0;

		r->ended = true;
		if (val && end != val && !*end && code >= -1 && code <= 255) {
			r->has_exit = true;
			r->exit_code = (int)code;
		} else {
			r->start_failed = true;
		}
		snprintf(r->error, sizeof(r->error), "%s%s%s", val ? val : "(no evalue)",
			json_is_string(json_array_get(tb, 0)) ? ": " : "",
			json_is_string(json_array_get(tb, 0)) ? json_string_value(json_array_get(tb, 0)) : "");
		go_on = false;
	}
	json_decref(o);
	return go_on;
}

bool osapi_sse_feed(struct osapi_sse *p, const char *data, size_t len)
{
	while (len) {
		const char *nl = memchr(data, '\n', len);
		size_t take = nl ? (size_t)(nl - data) : len;

		if (!p->overflow) {
			if (p->len + take > OSAPI_SSE_LINE_MAX) {
				p->overflow = true; /* an event larger than any sane output line: dropped */
				p->len = 0;
			} else {
				if (p->len + take + 1 > p->alloc) {
					size_t want = (p->len + take + 1) * 2;
					char *n = realloc(p->line, want > OSAPI_SSE_LINE_MAX + 1 ? OSAPI_SSE_LINE_MAX + 1 : want);
					if (!n) {
						p->overflow = true;
						p->len = 0;
						goto skip;
					}
					p->line = n;
					p->alloc = want > OSAPI_SSE_LINE_MAX + 1 ? OSAPI_SSE_LINE_MAX + 1 : want;
				}
				memcpy(p->line + p->len, data, take);
				p->len += take;
			}
		}
skip:
		if (!nl)
			return true;
		data += take + 1;
		len -= take + 1;
		if (p->overflow) {
			p->r->bad_events++;
			p->overflow = false;
			p->len = 0;
			continue;
		}
		p->line[p->len] = '\0';
		{
			size_t n = p->len;
			p->len = 0;
			if (!sse_line(p, p->line, n))
				return false;
		}
	}
	return true;
}
