/* SPDX-License-Identifier: MIT */
/*
 * http.c - fuzz the approval proxy's HTTP/1 request reader (net/httpreader.c) as
 * net/proxy.c drives it on what a sandbox sends to 127.0.0.1:3128: the head
 * found in the pieces a socket delivers (http_head_len resumed where it
 * stopped), parsed (http_parse), its host canonicalised (policy_host_canon,
 * decide()), the upstream head rewritten (http_upstream_head) and a chunked
 * body followed (http_chunked_feed), in one piece and in many.
 *
 * Checks: the head's end is found the same in any chunking; a parsed
 * request names a host and port and a path inside the head; the rewritten
 * head is one head ending in Connection: close; a chunked body is framed
 * the same in any chunking.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <string.h>

#include "../../common/buf.h"
#include "../../net/httpreader.h"
#include "../../common/policy.h"
#include "fuzz.h"

/* The proxy's reads: http_head_len over what has arrived, resumed at what
 * it scanned before. */
static ssize_t head_in_pieces(const char *p, size_t n, uint8_t seed)
{
	size_t have = 0, scanned = 0;
	ssize_t hl = 0;

	while (have < n && hl == 0) {
		have += fuzz_step(seed++, n - have);
		hl = http_head_len(p, have, scanned);
		scanned = have;
	}
	return hl;
}

/* A chunked body fed in pieces: the bytes it took, or -1. */
static ssize_t chunked_in_pieces(const char *p, size_t n, uint8_t seed, bool *done)
{
	struct http_chunked ch = { 0 };
	size_t off = 0;

	while (off < n && !ch.done) {
		size_t step = fuzz_step(seed++, n - off);
		ssize_t t = http_chunked_feed(&ch, p + off, step);

		if (t < 0)
			return -1;
		FUZZ_CHECK((size_t)t <= step);
		FUZZ_CHECK((size_t)t == step || ch.done); /* a body takes all it is given until it ends */
		off += (size_t)t;
	}
	*done = ch.done;
	return (ssize_t)off;
}

static void check_chunked(const char *p, size_t n, uint8_t seed)
{
	struct http_chunked ch = { 0 };
	ssize_t whole = http_chunked_feed(&ch, p, n), pieces;
	bool done = false;

	FUZZ_CHECK(whole <= (ssize_t)n);
	pieces = chunked_in_pieces(p, n, seed, &done);
	FUZZ_CHECK(pieces == whole);
	FUZZ_CHECK(whole < 0 || done == ch.done);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	uint8_t seed = size ? data[size - 1] : 0;
	ssize_t hl, whole;
	struct http_req r;
	const char *why = NULL;
	char host[POLICY_HOST_MAX + 1];
	struct buf up = BUF_INIT(HTTP_HEAD_MAX + 2 * 64 * 1024 + 65536); /* proxy.c's c->up */
	int status;

	if (size > HTTP_HEAD_MAX + 4096)
		return 0;
	whole = http_head_len(p, size, 0);
	hl = head_in_pieces(p, size, seed);
	FUZZ_CHECK(hl == whole);
	FUZZ_CHECK(hl <= (ssize_t)size && hl <= HTTP_HEAD_MAX);
	/* whatever follows a head may be a chunked body */
	check_chunked(p, size, seed);
	if (hl <= 0)
		return 0;
	status = http_parse(p, (size_t)hl, &r, &why);
	if (status) {
		FUZZ_CHECK(status >= 400 && status < 600 && why && *why);
		return 0;
	}
	FUZZ_CHECK(memchr(r.host, '\0', sizeof(r.host)) && r.host[0]);
	FUZZ_CHECK(r.port >= 1 && r.port <= 65535);
	FUZZ_CHECK(memchr(r.method, '\0', sizeof(r.method)) && r.method[0]);
	FUZZ_CHECK(r.minor == 0 || r.minor == 1);
	FUZZ_CHECK(!(r.chunked && r.content_length >= 0));
	policy_host_canon(r.host, strlen(r.host), host);
	if (r.connect)
		return 0; /* what follows is the ClientHello: tests/fuzz/tls.c */
	FUZZ_CHECK(r.path >= p && r.path + r.path_len <= p + hl);
	if (http_upstream_head(p, (size_t)hl, &r, &up) == 0) {
		const char *h = buf_str(&up);
		FUZZ_CHECK(up.len >= 4 && !strcmp(h + up.len - 4, "\r\n\r\n"));
		/* one head, nothing smuggled after it */
		FUZZ_CHECK(up.len > HTTP_HEAD_MAX || http_head_len(h, up.len, 0) == (ssize_t)up.len);
	}
	buf_free(&up);
	if (r.chunked)
		check_chunked(p + hl, size - (size_t)hl, seed);
	return 0;
}
