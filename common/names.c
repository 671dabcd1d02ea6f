/* SPDX-License-Identifier: MIT */
/*
 * names.c - name validation and the scope token (SHA-256 through OpenSSL's
 * EVP interface; no hand-written hashing).
 */
#include "names.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <fnmatch.h>
#include <string.h>

#include <openssl/evp.h>

bool names_valid(const char *name)
{
	size_t n = strlen(name);

	if (n < 1 || n > NAME_MAX_LEN)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];
		if (!isalnum(c) && c != '_' && c != '-')
			return false;
	}
	return true;
}

bool names_env_key_valid(const char *key)
{
	if (!*key || (!isalpha((unsigned char)*key) && *key != '_'))
		return false;
	for (const char *p = key; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_')
			return false;
	return true;
}

/* The first ndigits hex digits of SHA-256(a [":" b]) into out. */
static int names_digest_hex(const char *a, const char *b, char *out, int ndigits)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok;

	if (!ctx)
		return -1;
	ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) && EVP_DigestUpdate(ctx, a, strlen(a)) &&
	     (!b || (EVP_DigestUpdate(ctx, ":", 1) && EVP_DigestUpdate(ctx, b, strlen(b)))) &&
	     EVP_DigestFinal_ex(ctx, md, &mdlen);
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return -1;
	for (int i = 0; i < ndigits / 2; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[ndigits] = '\0';
	return 0;
}

int names_sha256_hex(const char *s, char *out, size_t hexlen)
{
	if (hexlen % 2 || hexlen > 64)
		return -1;
	return names_digest_hex(s, NULL, out, (int)hexlen);
}

int names_scope_token(const char *user, const char *thread, char out[SCOPE_TOKEN_LEN + 1])
{
	return names_digest_hex(user, thread, out, SCOPE_TOKEN_LEN);
}

int names_state_id(const char *state_dir, char out[NAMES_STATE_ID_LEN + 1])
{
	return names_digest_hex(state_dir, NULL, out, NAMES_STATE_ID_LEN);
}

bool names_secret_like(const char *key)
{
	static const char *exact[] = { "DATABASE_URL", "DATABASE_URI", "REDIS_URL", "MONGODB_URI", "MONGO_URL",
		"AMQP_URL", "RABBITMQ_URL", "POSTGRES_URL", "POSTGRESQL_URL", "MYSQL_URL", "CLICKHOUSE_URL",
		"CONNECTION_STRING", "CONN_STR", "GH_PAT", "GITHUB_PAT", "MYSQL_PWD", "REDISCLI_AUTH", "REDIS_AUTH",
		"PGSERVICEFILE", NULL };
	static const char *globs[] = { "*KEY*", "*SECRET*", "*TOKEN*", "*PASS*", "*CREDENTIAL*", "*DSN*", NULL };
	char up[256];
	size_t i;

	for (i = 0; key[i] && i < sizeof(up) - 1; i++)
		up[i] = (char)toupper((unsigned char)key[i]);
	up[i] = '\0';
	for (i = 0; exact[i]; i++)
		if (!strcmp(up, exact[i]))
			return true;
	for (i = 0; globs[i]; i++)
		if (!fnmatch(globs[i], up, 0))
			return true;
	return false;
}

/* ---- host names ------------------------------------------------------------------ */

static bool label_numeric(const char *s, size_t n)
{
	if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		return true; /* hex, as inet_aton reads it */
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return n > 0;
}

enum names_host names_host_canon(const char *in, size_t len, char out[NAMES_HOST_MAX + 1])
{
	struct in_addr a4;
	struct in6_addr a6;
	size_t label = 0, last = 0;

	if (len && in[len - 1] == '.')
		len--;
	if (len == 0 || len > NAMES_HOST_MAX)
		return NAMES_HOST_INVALID;
	if (in[0] == '[' || memchr(in, ':', len))
		return NAMES_HOST_IP_LITERAL; /* an IPv6 literal, bracketed or not */
	for (size_t i = 0; i < len; i++) {
		char c = in[i];

		if (c >= 'A' && c <= 'Z')
			c = (char)(c + 32);
		out[i] = c;
		if (c == '.') {
			if (label == 0)
				return NAMES_HOST_INVALID;
			label = 0;
			last = i + 1;
			continue;
		}
		if (!(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '-' && c != '_')
			return NAMES_HOST_INVALID;
		if (++label > 63)
			return NAMES_HOST_INVALID;
	}
	out[len] = '\0';
	if (label == 0)
		return NAMES_HOST_INVALID;
	if (inet_aton(out, &a4) || inet_pton(AF_INET6, out, &a6) == 1 || label_numeric(out + last, len - last))
		return NAMES_HOST_IP_LITERAL;
	/* no label may start or end with '-' */
	for (size_t i = 0; i < len; i++)
		if (out[i] == '-' && (i == 0 || out[i - 1] == '.' || i + 1 == len || out[i + 1] == '.'))
			return NAMES_HOST_INVALID;
	return NAMES_HOST_OK;
}
