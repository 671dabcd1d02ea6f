/* SPDX-License-Identifier: MIT */
/*
 * json.h - the two things every module does with JSON documents (jansson):
 * show one in a control file, and read one of the daemon's small state files.
 */
#ifndef SBX_JSON_H
#define SBX_JSON_H

#include <jansson.h>

#include "buf.h"

/* Append o, indented, in insertion order, and a newline.  Takes the
 * reference on o (NULL is an out-of-memory error).  0 or -1. */
int json_to_buf(json_t *o, struct buf *out);
/* Parse a JSON state file; NULL when missing or not JSON. New reference. */
json_t *json_read_file(const char *path);
/* A JSON string of arbitrary bytes (a job's command): valid UTF-8 passes
 * as it is, every byte that is not part of a valid sequence (and NUL)
 * becomes U+FFFD.  New reference, or NULL when out of memory. */
json_t *json_string_lossy(const char *s, size_t len);

#endif
