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
	"encrypted ClientHello", "the ClientHello names another host", "a handshake message out of turn" };

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

/* ---- watching a tunnel's handshake (tls.h) ----------------------------------------------------- */

/* RFC 8446 §4.1.3: a ServerHello with this random is a HelloRetryRequest. */
static const unsigned char hrr_random[32] = { 0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c,
	0x02, 0x1e, 0x65, 0xb8, 0x91, 0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8,
	0xa8, 0x33, 0x9c };

enum { REC_CCS = 20, REC_ALERT = 21, REC_HANDSHAKE = 22, REC_APPDATA = 23 };

/* One whole handshake message m[0..len) (type, length, body) of a side. */
typedef enum tls_hello (*msg_fn)(struct tls_watch *w, const unsigned char *m, size_t len, const char *host);

static enum tls_hello client_msg(struct tls_watch *w, const unsigned char *m, size_t len, const char *host)
{
	char sni[256];
	enum tls_hello r;

	if (m[0] != 1 || w->hellos > w->retries)
		return TLS_HELLO_SEQUENCE;
	r = parse_hello(m + 4, len - 4, sni, sizeof(sni));
	if (r != TLS_HELLO_OK)
		return r;
	if (strcmp(sni, host))
		return TLS_HELLO_OTHER_HOST;
	w->hellos++;
	return TLS_HELLO_OK;
}

static enum tls_hello server_msg(struct tls_watch *w, const unsigned char *m, size_t len, const char *host)
{
	(void)host;
	if (m[0] != 2 || len < 4 + 2 + 32)
		return TLS_HELLO_BAD; /* the server's first message is a ServerHello */
	if (memcmp(m + 4 + 2, hrr_random, 32)) {
		w->done = 1;
		return TLS_HELLO_OK;
	}
	if (w->retries)
		return TLS_HELLO_SEQUENCE;
	w->retries++;
	return TLS_HELLO_OK;
}

/* Which records may come before the server has chosen, besides handshake:
 * alerts from either side; the client's ChangeCipherSpec (TLS 1.3's
 * middlebox compatibility) and early data, after its ClientHello; the
 * server's ChangeCipherSpec after a HelloRetryRequest. */
static bool other_record_ok(const struct tls_watch *w, unsigned type, bool client)
{
	if (type == REC_ALERT)
		return true;
	if (client)
		return (type == REC_CCS || type == REC_APPDATA) && w->hellos > 0;
	return type == REC_CCS && w->retries > 0;
}

/* Walk the whole records of p[0..len) and the handshake messages in them. */
static enum tls_hello watch_feed(struct tls_watch *w, const unsigned char *p, size_t len, const char *host,
	size_t *used, bool client)
{
	msg_fn fn = client ? client_msg : server_msg;
	unsigned char *hs = NULL;
	size_t hs_len = 0, off = 0;
	struct tls_watch t = *w; /* committed at record ends where no message is incomplete */
	enum tls_hello r = TLS_HELLO_OK;

	*used = 0;
	if (w->done) {
		*used = len;
		return TLS_HELLO_OK;
	}
	if (client && !w->hellos && len && p[0] != REC_HANDSHAKE)
		return TLS_HELLO_NOT_TLS;
	while (off + 5 <= len && !t.done) {
		unsigned type = p[off];
		size_t rl = ((size_t)p[off + 3] << 8) | p[off + 4];

		if (p[off + 1] != 3 || rl == 0 || rl > 16384 + 256) {
			r = TLS_HELLO_BAD;
			goto out;
		}
		if (off + 5 + rl > len)
			break; /* the rest of this record is still to come */
		if (type != REC_HANDSHAKE) {
			if (hs_len || !other_record_ok(&t, type, client)) {
				r = client ? TLS_HELLO_SEQUENCE : TLS_HELLO_BAD;
				goto out;
			}
		} else {
			if (hs_len + rl > TLS_HELLO_MAX) {
				r = TLS_HELLO_BAD;
				goto out;
			}
			if (!hs && !(hs = malloc(TLS_HELLO_MAX))) {
				r = TLS_HELLO_BAD;
				goto out;
			}
			memcpy(hs + hs_len, p + off + 5, rl);
			hs_len += rl;
			while (hs_len >= 4 && !t.done) {
				size_t need = 4 + (((size_t)hs[1] << 16) | ((size_t)hs[2] << 8) | hs[3]);

				if (need > TLS_HELLO_MAX) {
					r = TLS_HELLO_BAD;
					goto out;
				}
				if (hs_len < need)
					break;
				r = fn(&t, hs, need, host);
				if (r != TLS_HELLO_OK)
					goto out;
				memmove(hs, hs + need, hs_len - need);
				hs_len -= need;
			}
		}
		off += 5 + rl;
		if (!hs_len || t.done) {
			*w = t;
			*used = t.done ? len : off;
		}
	}
	if (client && !w->hellos)
		r = len - *used > TLS_HELLO_MAX ? TLS_HELLO_BAD : TLS_HELLO_MORE;
	else if (len - *used > TLS_HELLO_MAX + 16384 + 256 + 5)
		r = TLS_HELLO_BAD; /* more than a whole message and a record held back */
out:
	free(hs);
	return r;
}

enum tls_hello tls_watch_client(struct tls_watch *w, const unsigned char *p, size_t len, const char *host,
	size_t *used)
{
	return watch_feed(w, p, len, host, used, true);
}

enum tls_hello tls_watch_server(struct tls_watch *w, const unsigned char *p, size_t len, size_t *used)
{
	return watch_feed(w, p, len, "", used, false);
}
