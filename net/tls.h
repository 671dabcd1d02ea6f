/* SPDX-License-Identifier: MIT */
/*
 * tls.h - reading the TLS ClientHello that follows a CONNECT (reference
 * §7.3: "read the TLS ClientHello, and require SNI == host; Encrypted
 * ClientHello extensions are rejected").
 *
 * The proxy never terminates TLS: it only looks at the first handshake
 * message, which is sent in the clear, to check that the client means the
 * host it was allowed to reach (a CONNECT to an allowed name followed by a
 * ClientHello for another name on the same address is how domain fronting
 * gets past a name-based allowlist).  The message may span several records;
 * the parser waits for it whole (bounded by TLS_HELLO_MAX).
 *
 * The first ClientHello is not the only one: a TLS 1.3 server that answers
 * with a HelloRetryRequest gets a second ClientHello, as plain as the first,
 * which could name another host (RFC 8446 §4.1.4).  So a tunnel's handshake
 * is watched from both sides (struct tls_watch) until the server has chosen
 * (a ServerHello that is not a HelloRetryRequest): until then every
 * handshake message the client sends must be a ClientHello that passes the
 * same check, at most one more than the HelloRetryRequests the server sent,
 * and the server may send one HelloRetryRequest.  After the ServerHello the
 * client's handshake messages are encrypted (TLS 1.3) or cannot be a
 * ClientHello (TLS 1.2: a renegotiation's is encrypted), so nothing more
 * needs looking at.
 *
 * Pure functions, no lock; the unit tests drive them directly.
 */
#ifndef SBX_NET_TLS_H
#define SBX_NET_TLS_H

#include <stddef.h>

#define TLS_HELLO_MAX (64 * 1024) /* bytes of records carrying the ClientHello */

enum tls_hello {
	TLS_HELLO_OK = 0,   /* complete, with exactly one host_name: sni */
	TLS_HELLO_MORE,     /* incomplete: read more */
	TLS_HELLO_NOT_TLS,  /* not a TLS handshake record */
	TLS_HELLO_BAD,      /* malformed, or larger than TLS_HELLO_MAX */
	TLS_HELLO_NO_SNI,   /* no server_name extension */
	TLS_HELLO_ECH,      /* an encrypted_client_hello extension (0xfe0d, 0xffce) */
	TLS_HELLO_OTHER_HOST, /* tls_watch_client: a ClientHello naming another host */
	TLS_HELLO_SEQUENCE, /* tls_watch_*: a ClientHello no HelloRetryRequest asked for, a client handshake
	                     * message that is not a ClientHello, a second HelloRetryRequest */
};

/* Parse the ClientHello at the start of p[0..len).  On TLS_HELLO_OK, sni
 * holds the host name (lower case, NUL-terminated). */
enum tls_hello tls_client_hello(const unsigned char *p, size_t len, char *sni, size_t snilen);

const char *tls_hello_name(enum tls_hello r);

/* The handshake of one tunnel, watched until the server has chosen. */
struct tls_watch {
	unsigned hellos;  /* the client's ClientHellos, every one checked */
	unsigned retries; /* the server's HelloRetryRequests */
	int done;         /* the server sent its ServerHello: nothing more to check */
};
#define TLS_WATCH_INIT { 0, 0, 0 }

/* The client's bytes p[0..len), starting at a record boundary (what an
 * earlier call left unused, then what came since).  Each handshake message
 * of the whole records is checked: a ClientHello naming host (lower case),
 * without ECH, at most one more than w->retries.  TLS_HELLO_OK: *used bytes
 * (whole records, ending where no handshake message is left incomplete) may
 * go to the server; TLS_HELLO_MORE: as OK, but no ClientHello yet (a first
 * call's, still incomplete); anything else: what was wrong, and nothing more
 * may go to the server.  Once w->done, all of p is used. */
enum tls_hello tls_watch_client(struct tls_watch *w, const unsigned char *p, size_t len, const char *host,
	size_t *used);
/* The server's bytes, likewise: TLS_HELLO_OK with *used, and w->retries or
 * w->done once its (second) ServerHello is whole; TLS_HELLO_BAD (not TLS,
 * malformed, no ServerHello first) or TLS_HELLO_SEQUENCE (a second
 * HelloRetryRequest, after which a client must abort: §4.1.4). */
enum tls_hello tls_watch_server(struct tls_watch *w, const unsigned char *p, size_t len, size_t *used);

#endif
