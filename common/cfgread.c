/* SPDX-License-Identifier: MIT */
/*
 * cfgread.c - how mount.conf's values are read (see cfgread.h): libyaml
 * nodes to typed values with their ranges (numbers, seconds, sizes, CPUs,
 * booleans, strings, absolute paths, lists), mappings checked for duplicate
 * keys, and cfg_fail, which names the key in the one-line error.  Which
 * keys exist is config.c's (the schema); the providers read their own
 * sections through the cfg_* functions here.
 */
#define _GNU_SOURCE
#include "cfgread.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cfg_fail(struct cfg_ctx *x, const char *key, const char *fmt, ...)
{
	char rule[512];
	va_list ap;

	if (x->failed)
		return;
	va_start(ap, fmt);
	vsnprintf(rule, sizeof(rule), fmt, ap);
	va_end(ap);
	snprintf(x->err, x->errlen, "%s: %s", key, rule);
	/* one line: a key or a value quoted in it may hold a line break (a
	 * quoted YAML scalar) or other control bytes */
	for (char *p = x->err; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	x->failed = 1;
}

const char *cfgr_scalar(yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

bool cfgr_scalar_is_null(yaml_node_t *n)
{
	const char *s = cfgr_scalar(n);

	return s && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	       (!*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL"));
}

int cfgr_get_long(struct cfg_ctx *x, const char *key, yaml_node_t *n, long min, long max, long *out)
{
	const char *s = cfgr_scalar(n);
	char *end;
	long v;

	if (!s || !*s) {
		cfg_fail(x, key, "must be an integer between %ld and %ld", min, max);
		return -1;
	}
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < min || v > max) {
		cfg_fail(x, key, "must be an integer between %ld and %ld (got '%s')", min, max, s);
		return -1;
	}
	*out = v;
	return 0;
}

/* Seconds, as DeerFlow's config.yaml gives them: an integer or a decimal
 * number ("30", "30.0", "2.5").  DeerFlow reads ready_timeout,
 * request_timeout and sandbox_timeout as floats (its OpenSandbox provider:
 * finite, positive) and bash_command_timeout and idle_timeout as pydantic
 * ints (30.0 is accepted, 30.5 refused): whole says which.  A fraction is
 * rounded up to whole seconds, the unit of every timeout in sbxfs, so a
 * wait is never shorter than asked for. */
int cfgr_get_seconds(struct cfg_ctx *x, const char *key, yaml_node_t *n, long min, long max, bool whole,
	long *out)
{
	const char *s = cfgr_scalar(n);
	char *end = NULL;
	double v = 0;

	if (s && *s && strspn(s, "0123456789.eE+-") == strlen(s)) {
		errno = 0;
		v = strtod(s, &end);
	}
	/* 0 <= v <= max before the casts: no overflow; v != v is NaN.  A
	 * fraction counts by its rounded-up value (ready_timeout: 0.5 is 1 s) */
	if (!s || !end || *end || errno || v != v || v < 0 || v > (double)max || (whole && (double)(long)v != v) ||
	    (long)v + ((double)(long)v < v) < min) {
		cfg_fail(x, key, "must be %s between %ld and %ld seconds (got '%s')",
			whole ? "a whole number" : "a number (decimals allowed)", min, max, s ? s : "a non-scalar");
		return -1;
	}
	*out = (long)v + ((double)(long)v < v);
	return 0;
}

/* A size: bytes, or a number with K, M, G or T (powers of 1024; "Ki",
 * "KiB" and "KB" spell the same).  0 is always allowed (no limit); anything
 * else must be at least min. */
int cfgr_get_size(struct cfg_ctx *x, const char *key, yaml_node_t *n, uint64_t min, uint64_t *out)
{
	static const char units[] = "KMGT";
	const char *s = cfgr_scalar(n), *u;
	uint64_t v, mult = 1;
	char *end;

	if (!s || !*s || *s == '-')
		goto bad;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		goto bad;
	if (*end && (u = strchr(units, end[0] & ~0x20))) {
		for (const char *p = units; p <= u; p++)
			mult *= 1024;
		end++;
		if (!strcmp(end, "i") || !strcmp(end, "iB") || !strcmp(end, "B"))
			end += strlen(end);
	}
	if (*end || (v && v * mult / mult != v) || (v && v * mult < min))
		goto bad;
	*out = v * mult;
	return 0;
bad:
	cfg_fail(x, key, "must be 0 (no limit) or a size of at least %llu bytes, like 512M or 2G (got '%s')",
		(unsigned long long)min, s ? s : "a non-scalar");
	return -1;
}

/* CPUs: 0 (no limit) or 0.01 .. 1024, decimals allowed. */
int cfgr_get_cpus(struct cfg_ctx *x, const char *key, yaml_node_t *n, double *out)
{
	const char *s = cfgr_scalar(n);
	char *end;
	double v;

	errno = 0;
	v = s && *s ? strtod(s, &end) : -1;
	if (!s || !*s || errno || *end || v != v || (v != 0 && (v < 0.01 || v > 1024))) {
		cfg_fail(x, key, "must be 0 (no limit) or a number of CPUs from 0.01 to 1024 (got '%s')",
			s ? s : "a non-scalar");
		return -1;
	}
	*out = v;
	return 0;
}

int cfgr_get_bool(struct cfg_ctx *x, const char *key, yaml_node_t *n, bool *out)
{
	const char *s = cfgr_scalar(n);

	if (s && (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "yes") || !strcmp(s, "on"))) {
		*out = true;
		return 0;
	}
	if (s && (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "no") || !strcmp(s, "off"))) {
		*out = false;
		return 0;
	}
	cfg_fail(x, key, "must be true or false (got '%s')", s ? s : "a non-scalar");
	return -1;
}

int cfgr_get_str(struct cfg_ctx *x, const char *key, yaml_node_t *n, char **out)
{
	const char *s = cfgr_scalar(n);

	if (!s) {
		cfg_fail(x, key, "must be a string");
		return -1;
	}
	free(*out);
	*out = strdup(s);
	if (!*out) {
		cfg_fail(x, key, "out of memory");
		return -1;
	}
	return 0;
}

/* s is a canonical absolute path: 0, or -1 after cfg_fail. */
int cfgr_check_abs_path(struct cfg_ctx *x, const char *key, const char *s)
{
	if (!s || s[0] != '/') {
		cfg_fail(x, key, "must be an absolute path (got '%s')", s ? s : "a non-scalar");
		return -1;
	}
	if (strstr(s, "/../") || (strlen(s) >= 3 && !strcmp(s + strlen(s) - 3, "/..")) || strstr(s, "/./")) {
		cfg_fail(x, key, "must be a canonical absolute path (got '%s')", s);
		return -1;
	}
	return 0;
}

int cfgr_get_abs_path(struct cfg_ctx *x, const char *key, yaml_node_t *n, char **out)
{
	if (cfgr_check_abs_path(x, key, cfgr_scalar(n)))
		return -1;
	return cfgr_get_str(x, key, n, out);
}

/* ---- the readers the providers use (struct cfg_node is a yaml_node_t) ---- */

static yaml_node_t *ynode(struct cfg_node *n)
{
	return (yaml_node_t *)n;
}

bool cfg_failed(struct cfg_ctx *x)
{
	return x->failed;
}

bool cfg_is_null(struct cfg_node *n)
{
	return cfgr_scalar_is_null(ynode(n));
}

int cfg_long(struct cfg_ctx *x, const char *key, struct cfg_node *n, long min, long max, long *out)
{
	return cfgr_get_long(x, key, ynode(n), min, max, out);
}

int cfg_bool(struct cfg_ctx *x, const char *key, struct cfg_node *n, bool *out)
{
	return cfgr_get_bool(x, key, ynode(n), out);
}

int cfg_str(struct cfg_ctx *x, const char *key, struct cfg_node *n, char **out)
{
	return cfgr_get_str(x, key, ynode(n), out);
}

int cfg_abs_path(struct cfg_ctx *x, const char *key, struct cfg_node *n, char **out)
{
	return cfgr_get_abs_path(x, key, ynode(n), out);
}

static int strv_add(struct cfg_ctx *x, const char *key, const char *s, char ***out, size_t *count)
{
	char **v = realloc(*out, (*count + 1) * sizeof(*v));

	if (v)
		*out = v;
	if (!v || !(v[*count] = strdup(s))) {
		cfg_fail(x, key, "out of memory");
		return -1;
	}
	(*count)++;
	return 0;
}

int cfg_strv(struct cfg_ctx *x, const char *key, struct cfg_node *node, char ***out, size_t *count)
{
	yaml_node_t *n = ynode(node);

	if (cfgr_scalar_is_null(n))
		return 0;
	if (cfgr_scalar(n))
		return strv_add(x, key, cfgr_scalar(n), out, count);
	if (n->type != YAML_SEQUENCE_NODE) {
		cfg_fail(x, key, "must be a list of strings");
		return -1;
	}
	for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
		const char *s = cfgr_scalar(yaml_document_get_node(x->doc, *it));

		if (!s) {
			cfg_fail(x, key, "must be a list of strings");
			return -1;
		}
		if (strv_add(x, key, s, out, count))
			return -1;
	}
	return 0;
}

/* Fail on the first key given twice in mapping n (named sect; NULL at the
 * top level). */
int cfgr_mapping_check_dups(struct cfg_ctx *x, const char *sect, yaml_node_t *n)
{
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
		yaml_node_t *kn = yaml_document_get_node(x->doc, p->key);
		const char *k = cfgr_scalar(kn);

		for (yaml_node_pair_t *q = n->data.mapping.pairs.start; k && q < p; q++) {
			yaml_node_t *qn = yaml_document_get_node(x->doc, q->key);
			char key[300];

			if (!cfgr_scalar(qn) || strcmp(k, cfgr_scalar(qn)))
				continue;
			snprintf(key, sizeof(key), "%s%s%s", sect ? sect : "", sect ? "." : "", k);
			cfg_fail(x, key, "given twice (lines %zu and %zu): a key may appear once",
				qn->start_mark.line + 1, kn->start_mark.line + 1);
			return -1;
		}
	}
	return 0;
}

int cfg_each(struct cfg_ctx *x, const char *sect, struct cfg_node *map,
	int (*fn)(struct cfg_ctx *x, void *arg, const char *key, const char *full, struct cfg_node *v), void *arg)
{
	yaml_node_t *n = ynode(map);

	if (cfgr_scalar_is_null(n))
		return 0;
	if (n->type != YAML_MAPPING_NODE) {
		cfg_fail(x, sect, "must be a mapping");
		return -1;
	}
	if (cfgr_mapping_check_dups(x, sect, n))
		return -1;
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && !x->failed; p++) {
		const char *k = cfgr_scalar(yaml_document_get_node(x->doc, p->key));
		char full[300];

		if (!k) {
			cfg_fail(x, sect, "keys must be strings");
			return -1;
		}
		snprintf(full, sizeof(full), "%s.%s", sect, k);
		if (fn(x, arg, k, full, (struct cfg_node *)yaml_document_get_node(x->doc, p->value)))
			return -1;
	}
	return x->failed ? -1 : 0;
}
