/* SPDX-License-Identifier: MIT */
/*
 * cfgread.h - the YAML readers of mount.conf, shared by config.c (the
 * schema: which keys exist and what they mean) and cfgread.c (how a value is
 * read: typed scalars with their ranges, paths, lists, mappings without
 * duplicate keys, the error that names the key).  The cfg_* readers below
 * are the providers' (they get them through config.h); the cfgr_* ones are
 * config.c's only.  It includes nothing of config.h, which includes it.
 */
#ifndef SBX_CFGREAD_H
#define SBX_CFGREAD_H

#include <stdbool.h>
#include <stdint.h>
#include <yaml.h>

struct cfg_ctx {
	yaml_document_t *doc;
	char *err;
	size_t errlen;
	int failed;
};

/* The text of a scalar node (NULL for another node); whether n is absent or
 * YAML's null.  The cfgr_get_* readers put n's value in *out when it is of
 * the type and in the range, else cfg_fail(key, why) and -1 (strings: a
 * malloc'd copy).  cfgr_mapping_check_dups fails on the first key given
 * twice in mapping n (sect: its name, NULL at the top level). */
bool cfgr_scalar_is_null(yaml_node_t *n);
const char *cfgr_scalar(yaml_node_t *n);
int cfgr_get_long(struct cfg_ctx *x, const char *key, yaml_node_t *n, long min, long max, long *out);
int cfgr_get_seconds(struct cfg_ctx *x, const char *key, yaml_node_t *n, long min, long max, bool whole,
	long *out);
int cfgr_get_size(struct cfg_ctx *x, const char *key, yaml_node_t *n, uint64_t min, uint64_t *out);
int cfgr_get_cpus(struct cfg_ctx *x, const char *key, yaml_node_t *n, double *out);
int cfgr_get_bool(struct cfg_ctx *x, const char *key, yaml_node_t *n, bool *out);
int cfgr_get_str(struct cfg_ctx *x, const char *key, yaml_node_t *n, char **out);
int cfgr_check_abs_path(struct cfg_ctx *x, const char *key, const char *s);
int cfgr_get_abs_path(struct cfg_ctx *x, const char *key, yaml_node_t *n, char **out);
int cfgr_mapping_check_dups(struct cfg_ctx *x, const char *sect, yaml_node_t *n);

/* ---- for the providers' own sections ---------------------------------------- */

struct cfg_ctx;  /* a parse in progress */
struct cfg_node; /* a node of the YAML document */

/* Fail the parse with "key: rule" (only the first failure counts). */
__attribute__((format(printf, 3, 4))) void cfg_fail(struct cfg_ctx *x, const char *key, const char *fmt, ...);
bool cfg_failed(struct cfg_ctx *x);
bool cfg_is_null(struct cfg_node *n);
/* Readers: 0, or -1 after cfg_fail naming key and the rule. */
int cfg_long(struct cfg_ctx *x, const char *key, struct cfg_node *n, long min, long max, long *out);
int cfg_bool(struct cfg_ctx *x, const char *key, struct cfg_node *n, bool *out);
int cfg_str(struct cfg_ctx *x, const char *key, struct cfg_node *n, char **out);
int cfg_abs_path(struct cfg_ctx *x, const char *key, struct cfg_node *n, char **out);
/* A list of strings (a scalar counts as a list of one): *out (malloc'd,
 * strings too) and *n.  0 or -1 after cfg_fail. */
int cfg_strv(struct cfg_ctx *x, const char *key, struct cfg_node *n, char ***out, size_t *count);
/* A mapping named sect: fn(x, arg, key, "sect.key", value) for each pair
 * (a duplicate key fails the parse).  0 or -1. */
int cfg_each(struct cfg_ctx *x, const char *sect, struct cfg_node *map,
	int (*fn)(struct cfg_ctx *x, void *arg, const char *key, const char *full, struct cfg_node *v), void *arg);

#endif
