/* SPDX-License-Identifier: MIT */
/*
 * check.h - the unit tests' one assertion: CHECK(cond) counts a pass or
 * prints the failed condition with its place, and the run goes on.
 */
#ifndef SBX_CHECK_H
#define SBX_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(cond)                                                                     \
	do {                                                                            \
		if (cond) {                                                             \
			passed++;                                                       \
		} else {                                                                \
			failed++;                                                       \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
		}                                                                       \
	} while (0)

#endif
