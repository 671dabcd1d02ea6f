/* SPDX-License-Identifier: MIT */
/*
 * sse.c - fuzz execd's event-stream parser (providers/opensandbox_sse.c,
 * osapi_sse_feed), which reads the stream of POST /command from a sandbox's
 * execd (a server the sandbox's own code can replace) on a job's pump
 * thread: bare JSON lines and "data:" lines, in whatever pieces libcurl
 * hands over, until a terminal event or until the consumer says stop (as
 * opensandbox_jobs.c does at the job's output limit).
 *
 * Checks: the same events come out in any chunking; what the result holds
 * is NUL-terminated; an exit code is -1..255.
 */
#include <stdbool.h>
#include <string.h>

#include "../../providers/opensandbox_api.h"
#include "fuzz.h"

#define OUTPUT_LIMIT 4096 /* the consumer stops past this many bytes */

struct seen {
	uint64_t hash; /* FNV-1a over every event and its bytes */
	size_t bytes, inits;
};

static void mix(struct seen *s, const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		s->hash = (s->hash ^ c[i]) * 1099511628211ULL;
}

static void on_init(const char *id, void *arg)
{
	struct seen *s = arg;

	s->inits++;
	mix(s, "I", 1);
	mix(s, id, strlen(id) + 1);
}

static bool on_output(enum osapi_stream st, const char *text, size_t len, void *arg)
{
	struct seen *s = arg;
	unsigned char t = (unsigned char)st;

	FUZZ_CHECK(st == OSAPI_STDOUT || st == OSAPI_STDERR);
	mix(s, &t, 1);
	mix(s, &len, sizeof(len));
	mix(s, text, len);
	s->bytes += len;
	return s->bytes <= OUTPUT_LIMIT;
}

static void run(const uint8_t *data, size_t size, size_t step_seed, bool whole, struct seen *s,
	struct osapi_cmd_result *r)
{
	struct osapi_cmd_events ev = { .on_init = on_init, .on_output = on_output, .arg = s };
	struct osapi_sse p;
	uint8_t seed = (uint8_t)step_seed;
	size_t off = 0;

	memset(s, 0, sizeof(*s));
	memset(r, 0, sizeof(*r));
	s->hash = 14695981039346656037ULL;
	osapi_sse_init(&p, &ev, r);
	while (off < size) {
		size_t step = whole ? size : fuzz_step(seed++, size - off);
		bool go_on = osapi_sse_feed(&p, (const char *)data + off, step);

		off += step;
		if (!go_on)
			break;
	}
	osapi_sse_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct osapi_cmd_result r1, r2;
	struct seen s1, s2;

	run(data, size, 0, true, &s1, &r1);
	run(data, size, size ? data[size - 1] : 0, false, &s2, &r2);
	FUZZ_CHECK(s1.hash == s2.hash && s1.bytes == s2.bytes && s1.inits == s2.inits);
	FUZZ_CHECK(r1.saw_init == r2.saw_init && r1.ended == r2.ended && r1.has_exit == r2.has_exit &&
		   r1.exit_code == r2.exit_code && r1.start_failed == r2.start_failed && r1.stopped == r2.stopped &&
		   r1.bad_events == r2.bad_events);
	FUZZ_CHECK(memchr(r1.id, '\0', sizeof(r1.id)) && memchr(r1.error, '\0', sizeof(r1.error)));
	FUZZ_CHECK(!strcmp(r1.id, r2.id) && !strcmp(r1.error, r2.error));
	FUZZ_CHECK(!r1.has_exit || (r1.exit_code >= -1 && r1.exit_code <= 255));
	FUZZ_CHECK(!r1.stopped || s1.bytes > OUTPUT_LIMIT);
	return 0;
}
