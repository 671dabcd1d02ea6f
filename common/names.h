/* SPDX-License-Identifier: MIT */
/*
 * names.h - the identity rules of the namespace.
 *
 * names_valid(): <user>, <thread> and job names match ^[A-Za-z0-9_-]{1,64}$.
 * names_scope_token(): DeerFlow's derive_sandbox_scope_token, the first 16
 * lowercase hex digits of SHA-256(user ":" thread).  This is a compatibility
 * contract: container names, state directories and remote metadata derive
 * from it, so changing it orphans every sandbox.
 * names_env_key_valid(): ^[A-Za-z_][A-Za-z0-9_]*$ (POSIX environment names).
 * names_host_canon(): the one grammar of a DNS host name, used by the
 * configuration (network.hosts, allow_domains) and by the approval proxy
 * (net/policy.c), so what the configuration accepts is what the proxy
 * matches.
 */
#ifndef SBX_NAMES_H
#define SBX_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#define NAME_MAX_LEN 64
#define SCOPE_TOKEN_LEN 16
/* "<user>/<thread>" and a NUL */
#define NAMES_SCOPE_MAX (2 * NAME_MAX_LEN + 2)
#define NAMES_HOST_MAX 253

enum names_host {
	NAMES_HOST_OK = 0,
	NAMES_HOST_INVALID,    /* not a DNS name */
	NAMES_HOST_IP_LITERAL, /* an address, in any spelling inet_aton or inet_pton reads */
};

/* Canonicalise the len bytes at in into out (lower case, a trailing dot
 * removed): labels of 1..63 letters, digits, '-' (not first or last) and
 * '_', 253 bytes in all.  NAMES_HOST_OK, or why the host is refused (an IPv6
 * literal, bracketed or not, "127.1", "0x7f.1" and "2130706433" are
 * IP literals). */
enum names_host names_host_canon(const char *in, size_t len, char out[NAMES_HOST_MAX + 1]);

bool names_valid(const char *name);
bool names_env_key_valid(const char *key);
#define NAMES_STATE_ID_LEN 8
/* A daemon's identity in shared namespaces (cgroups, container labels,
 * remote metadata): the first 8 hex digits of SHA-256(state_dir), so two
 * daemons with different state_dirs never touch each other's sandboxes.
 * 0 or -1. */
int names_state_id(const char *state_dir, char out[NAMES_STATE_ID_LEN + 1]);
/* Writes SCOPE_TOKEN_LEN hex digits and a NUL into out.  Returns 0 or -1. */
int names_scope_token(const char *user, const char *thread, char out[SCOPE_TOKEN_LEN + 1]);
/* The first hexlen (even, <= 64) lowercase hex digits of SHA-256(s), and a
 * NUL, into out.  Returns 0 or -1. */
int names_sha256_hex(const char *s, char *out, size_t hexlen);
/* DeerFlow's is_blocked_env_name: names that look like secrets. */
bool names_secret_like(const char *key);

#endif
