/* SPDX-License-Identifier: MIT */
/*
 * tls.c - fuzz the ClientHello reader (net/tls.c) as net/proxy.c drives it
 * after a CONNECT: tls_client_hello() on all that has arrived, again after
 * each read while it answers "incomplete", with the proxy's SNI buffer.
 *
 * Checks: an answer other than "incomplete" is final (more bytes do not
 * change it, nor the name); a name is NUL-terminated, fits, is lower case
 * printable ASCII without spaces.
 */
#include <string.h>

#include "../../common/policy.h"
#include "../../net/tls.h"
#include "fuzz.h"

static void check_sni(const char *sni, size_t cap)
{
	size_t n = strnlen(sni, cap);

	FUZZ_CHECK(n > 0 && n < cap);
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK(sni[i] > 0x20 && sni[i] < 0x7f && !(sni[i] >= 'A' && sni[i] <= 'Z'));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char sni[POLICY_HOST_MAX + 2], sni2[POLICY_HOST_MAX + 2];
	enum tls_hello h = TLS_HELLO_MORE, whole;
	uint8_t seed = size ? data[size - 1] : 0;
	size_t have = 0;

	if (size > TLS_HELLO_MAX + 4096)
		return 0;
	while (have < size && h == TLS_HELLO_MORE) {
		have += fuzz_step(seed++, size - have);
		h = tls_client_hello(data, have, sni, sizeof(sni));
		FUZZ_CHECK(h <= TLS_HELLO_ECH && tls_hello_name(h)[0] != '?');
	}
	if (h == TLS_HELLO_OK)
		check_sni(sni, sizeof(sni));
	whole = tls_client_hello(data, size, sni2, sizeof(sni2));
	if (h != TLS_HELLO_MORE)
		FUZZ_CHECK(whole == h && (h != TLS_HELLO_OK || !strcmp(sni, sni2)));
	/* a small name buffer: a long name is refused, never cut */
	if (tls_client_hello(data, size, sni2, 8) == TLS_HELLO_OK)
		FUZZ_CHECK(strlen(sni2) < 8);
	return 0;
}
