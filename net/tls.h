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
};

/* Parse the ClientHello at the start of p[0..len).  On TLS_HELLO_OK, sni
 * holds the host name (lower case, NUL-terminated). */
enum tls_hello tls_client_hello(const unsigned char *p, size_t len, char *sni, size_t snilen);

const char *tls_hello_name(enum tls_hello r);

#endif
