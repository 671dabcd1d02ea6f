/* SPDX-License-Identifier: MIT */
/*
 * tls.c - the ClientHello reader (see tls.h).  RFC 8446 §4.1.2 and RFC 6066
 * §3 for the layout; draft-ietf-tls-esni for the ECH code points (0xfe0d
 * today, 0xffce in early drafts).  Every length is checked against what
 * encloses it before it is used.
 */
#define _GNU_SOURCE
#include "tls.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = { "ok", "incomplete", "not TLS", "malformed ClientHello", "no SNI",
	"encrypted ClientHello" };

const char *tls_hello_name(enum tls_hello r)
{
	return (unsigned)r < sizeof(names) / sizeof(names[0]) ? names[r] : "?";
}

struct rd {
	const unsigned char *p;
	size_t left;
	bool bad;
};

static unsigned rd_u(struct rd *r, int bytes)
{
	unsigned v = 0;

	if (r->bad || r->left < (size_t)bytes) {
		r->bad = true;
		return 0;
	}
	for (int i = 0; i < bytes; i++)
		v = (v << 8) | r->p[i];
	r->p += bytes;
	r->left -= (size_t)bytes;
	return v;
}

/* A sub-reader over the next n bytes. */
static struct rd rd_sub(struct rd *r, size_t n)
{
	struct rd s = { r->p, n, r->bad };

	if (r->bad || r->left < n) {
		r->bad = s.bad = true;
		s.left = 0;
		return s;
	}
	r->p += n;
	r->left -= n;
	return s;
}

static enum tls_hello parse_hello(const unsigned char *m, size_t len, char *sni, size_t snilen)
{
	struct rd r = { m, len, false }, exts, ext;
	bool have_sni = false;
	unsigned char seen[65536 / 8];
	unsigned n;

	memset(seen, 0, sizeof(seen));
	rd_u(&r, 2);          /* legacy_version */
	rd_sub(&r, 32);       /* random */
	n = rd_u(&r, 1);      /* legacy_session_id */
	if (n > 32)
		return TLS_HELLO_BAD;
	rd_sub(&r, n);
	n = rd_u(&r, 2);      /* cipher_suites */
	if (n < 2 || n % 2)
		return TLS_HELLO_BAD;
	rd_sub(&r, n);
	n = rd_u(&r, 1);      /* legacy_compression_methods */
	if (n < 1)
		return TLS_HELLO_BAD;
	rd_sub(&r, n);
	if (r.bad)
		return TLS_HELLO_BAD;
	if (r.left == 0)
		return TLS_HELLO_NO_SNI; /* no extensions at all */
	n = rd_u(&r, 2);
	exts = rd_sub(&r, n);
	if (r.bad || r.left)
		return TLS_HELLO_BAD;
	while (exts.left && !exts.bad) {
		unsigned type = rd_u(&exts, 2), elen = rd_u(&exts, 2);

		ext = rd_sub(&exts, elen);
		if (exts.bad)
			return TLS_HELLO_BAD;
		if (seen[type / 8] & (1 << (type % 8)))
			return TLS_HELLO_BAD; /* an extension twice: RFC 8446 forbids it */
		seen[type / 8] = (unsigned char)(seen[type / 8] | (1 << (type % 8)));
		if (type == 0xfe0d || type == 0xffce)
			return TLS_HELLO_ECH;
		if (type == 0) { /* server_name */
			struct rd list = rd_sub(&ext, rd_u(&ext, 2));
			int hostnames = 0;

			if (ext.bad || ext.left)
				return TLS_HELLO_BAD;
			while (list.left && !list.bad) {
				unsigned nt = rd_u(&list, 1), nl = rd_u(&list, 2);
				struct rd name = rd_sub(&list, nl);

				if (list.bad)
					return TLS_HELLO_BAD;
				if (nt != 0)
					continue;
				if (++hostnames > 1 || nl == 0 || nl >= snilen)
					return TLS_HELLO_BAD;
				for (unsigned i = 0; i < nl; i++) {
					unsigned char c = name.p[i];
					if (c <= 0x20 || c >= 0x7f)
						return TLS_HELLO_BAD;
					sni[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
				}
				sni[nl] = '\0';
				if (nl > 1 && sni[nl - 1] == '.')
					sni[nl - 1] = '\0';
				have_sni = true;
			}
			if (list.bad)
				return TLS_HELLO_BAD;
		}
	}
	/* keep reading after the SNI: an ECH extension later still refuses */
	if (exts.bad)
		return TLS_HELLO_BAD;
	return have_sni ? TLS_HELLO_OK : TLS_HELLO_NO_SNI;
}

enum tls_hello tls_client_hello(const unsigned char *p, size_t len, char *sni, size_t snilen)
{
	unsigned char *hs = NULL;
	size_t hs_len = 0, off = 0, need = 0;
	enum tls_hello r = TLS_HELLO_MORE;

	while (off + 5 <= len) {
		size_t rl = ((size_t)p[off + 3] << 8) | p[off + 4];

		if (p[off] != 22 || p[off + 1] != 3) {
			r = off == 0 ? TLS_HELLO_NOT_TLS : TLS_HELLO_BAD;
			goto out;
		}
		if (rl == 0 || rl > 16384 + 256 || off + 5 + rl > TLS_HELLO_MAX) {
			r = TLS_HELLO_BAD;
			goto out;
		}
		if (off + 5 + rl > len)
			break; /* the rest of this record is still to come */
		if (!hs && !(hs = malloc(TLS_HELLO_MAX))) {
			r = TLS_HELLO_BAD;
			goto out;
		}
		memcpy(hs + hs_len, p + off + 5, rl);
		hs_len += rl;
		off += 5 + rl;
		if (hs_len >= 4) {
			if (hs[0] != 1) { /* handshake type client_hello */
				r = TLS_HELLO_BAD;
				goto out;
			}
			need = 4 + (((size_t)hs[1] << 16) | ((size_t)hs[2] << 8) | hs[3]);
			if (need > TLS_HELLO_MAX - 5) {
				r = TLS_HELLO_BAD;
				goto out;
			}
			if (hs_len >= need) {
				r = parse_hello(hs + 4, need - 4, sni, snilen);
				goto out;
			}
		}
	}
	if (len >= 1 && p[0] != 22)
		r = TLS_HELLO_NOT_TLS;
	else if (len >= TLS_HELLO_MAX)
		r = TLS_HELLO_BAD;
out:
	free(hs);
	return r;
}
