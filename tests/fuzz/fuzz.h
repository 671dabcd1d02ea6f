/* SPDX-License-Identifier: MIT */
/*
 * fuzz.h - what the libFuzzer harnesses of tests/fuzz/ share.
 *
 * Each harness feeds its input to the entry point the daemon itself calls on
 * bytes a hostile party sent, the way the daemon calls it (in the pieces a
 * socket delivers them, with the buffers the daemon passes), and checks
 * what must hold whatever the bytes: FUZZ_CHECK aborts, which libFuzzer
 * reports as a crash with the input saved.  Memory errors, leaks and
 * undefined behaviour are the sanitizers' (-fsanitize=fuzzer,address,undefined).
 *
 * fuzz_step() turns one input byte into a piece size, so that the same
 * bytes are also tried in other chunkings: a parser that keeps state across
 * reads must read "ab" + "c" as it reads "abc".
 */
#ifndef SBX_FUZZ_H
#define SBX_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond)                                                                       \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			fprintf(stderr, "FUZZ_CHECK failed %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                               \
		}                                                                              \
	} while (0)

/* A piece size in 1..n (n > 0) from one byte: small pieces most of the time. */
static inline size_t fuzz_step(uint8_t b, size_t n)
{
	size_t s = b < 128 ? (size_t)b % 8 + 1 : (size_t)b * 37;

	return s < n ? s : n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
