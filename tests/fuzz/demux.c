/* SPDX-License-Identifier: MIT */
/*
 * demux.c - fuzz the Docker attach stream's framing (providers/docker_api.c,
 * docker_demux_feed): 8-byte headers (stream, 3 zero bytes, big-endian
 * length) and payloads, in whatever pieces libcurl hands over
 * (docker_exec_start's sink).
 *
 * Checks: the same bytes reach the same streams in any chunking; no piece
 * handed on is empty; the consumer's stop is obeyed.
 */
#include <stdbool.h>
#include <string.h>

#include "../../providers/docker_api.h"
#include "fuzz.h"

struct seen {
	uint64_t hash;
	size_t bytes[4]; /* by stream (1 stdout, 2 stderr) */
	size_t stop_after; /* the consumer says stop past this many bytes (0: never) */
	bool stopped;
};

static bool on_stream(int stream, const char *data, size_t len, void *arg)
{
	struct seen *s = arg;
	size_t total;

	FUZZ_CHECK(!s->stopped);
	FUZZ_CHECK(len > 0 && (stream == 1 || stream == 2)); /* docker_stream_fn: stdout or stderr */
	/* per byte, so that pieces split differently hash the same */
	for (size_t i = 0; i < len; i++)
		s->hash = (s->hash ^ ((unsigned)stream << 8 | (unsigned char)data[i])) * 1099511628211ULL;
	s->bytes[stream < 3 ? stream : 3] += len;
	total = s->bytes[0] + s->bytes[1] + s->bytes[2] + s->bytes[3];
	s->stopped = s->stop_after && total >= s->stop_after;
	return !s->stopped;
}

static void run(const uint8_t *data, size_t size, uint8_t seed, bool whole, size_t stop_after, struct seen *s)
{
	struct docker_demux dm = DOCKER_DEMUX_INIT;
	size_t off = 0;

	memset(s, 0, sizeof(*s));
	s->hash = 14695981039346656037ULL;
	s->stop_after = stop_after;
	while (off < size) {
		size_t step = whole ? size : fuzz_step(seed++, size - off);
		bool go_on = docker_demux_feed(&dm, (const char *)data + off, step, on_stream, s);

		FUZZ_CHECK(go_on == !s->stopped);
		off += step;
		if (!go_on)
			break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct seen a, b;
	uint8_t seed = size ? data[size - 1] : 0;

	run(data, size, 0, true, 0, &a);
	run(data, size, seed, false, 0, &b);
	FUZZ_CHECK(a.hash == b.hash && !memcmp(a.bytes, b.bytes, sizeof(a.bytes)));
	/* every payload byte is handed on, the headers never */
	FUZZ_CHECK(a.bytes[0] + a.bytes[1] + a.bytes[2] + a.bytes[3] <= size);
	/* a consumer that stops early */
	run(data, size, seed, false, 1 + seed, &b);
	return 0;
}
