/* SPDX-License-Identifier: MIT */
/*
 * net_test.c - unit tests of the network policy's pure parts (net/): host
 * names and addresses (policy), events and grants with DeerFlow's lifecycle
 * and their persistence (netpol), the strict HTTP reader and the chunked
 * framing (http), the ClientHello reader (tls), the nftables ruleset text
 * (egress) and the resolver's address checks (resolve, with network.hosts
 * only: no DNS here).  Time is passed in, so TTLs and the 30 s reuse are
 * tested without sleeping.  Run by `make unit`.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/json.h"
#include "../../common/log.h"
#include "../../common/egress.h"
#include "../../net/httpreader.h"
#include "../../net/netpol.h"
#include "../../common/policy.h"
#include "../../net/resolve.h"
#include "../../net/tls.h"
#include "check.h"

/* ---- policy ------------------------------------------------------------------------ */

static int canon(const char *in, char *out)
{
	return policy_host_canon(in, strlen(in), out);
}

static bool priv(const char *a)
{
	struct sockaddr_in s4 = { .sin_family = AF_INET };
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };

	if (inet_pton(AF_INET, a, &s4.sin_addr) == 1)
		return policy_addr_private((struct sockaddr *)&s4);
	if (inet_pton(AF_INET6, a, &s6.sin6_addr) == 1)
		return policy_addr_private((struct sockaddr *)&s6);
	abort();
}

static void test_policy(void)
{
	char h[POLICY_HOST_MAX + 1];
	char *doms[] = { "api.example.test", "*.pypi.example" };

	CHECK(canon("API.Example.Test.", h) == POLICY_HOST_OK && !strcmp(h, "api.example.test"));
	CHECK(canon("a_b.example", h) == POLICY_HOST_OK);
	CHECK(canon("localhost", h) == POLICY_HOST_OK);
	/* IP literals in every spelling getaddrinfo() or inet_aton() accepts */
	static const char *literals[] = { "127.0.0.1", "127.1", "0x7f.1", "2130706433", "017700000001", "[::1]", "::1",
		"1.2.3.999", "10.0.0.1.", "a.0x10", NULL };
	for (int i = 0; literals[i]; i++)
		CHECK(canon(literals[i], h) == POLICY_HOST_IP_LITERAL);
	static const char *invalid[] = { "", ".", "a..b", "-a.b", "a-.b", "a b", "a/b", "a@b", "é.example", NULL };
	for (int i = 0; invalid[i]; i++)
		CHECK(canon(invalid[i], h) == POLICY_HOST_INVALID);
	{
		char big[300];
		memset(big, 'a', 64);
		memcpy(big + 64, ".example", 9);
		CHECK(canon(big, h) == POLICY_HOST_INVALID); /* a 64-byte label */
	}
	CHECK(policy_domain_match("api.example.test", "api.example.test"));
	CHECK(!policy_domain_match("api.example.test", "x.api.example.test"));
	CHECK(policy_domain_match("*.pypi.example", "files.pypi.example"));
	CHECK(policy_domain_match("*.pypi.example", "a.b.pypi.example"));
	CHECK(!policy_domain_match("*.pypi.example", "pypi.example")); /* never the apex */
	CHECK(!policy_domain_match("*.pypi.example", "evilpypi.example"));
	CHECK(policy_domains_match(doms, 2, "x.pypi.example") && !policy_domains_match(doms, 2, "example.test"));

	static const char *privates[] = { "10.1.2.3", "127.0.0.1", "127.255.0.1", "169.254.169.254", "100.64.1.1",
		"192.168.1.1", "172.16.0.1", "172.31.255.255", "0.0.0.0", "224.0.0.1", "255.255.255.255", "198.18.0.1",
		"192.0.0.8", "::1", "::", "fe80::1", "fc00::1", "fd00:ec2::254", "ff02::1", "::ffff:10.0.0.1",
		"::ffff:127.0.0.1", "64:ff9b::a00:1", "2002:a00:1::1", NULL };
	for (int i = 0; privates[i]; i++)
		CHECK(priv(privates[i]));
	static const char *publics[] = { "8.8.8.8", "172.32.0.1", "198.51.100.1", "203.0.113.5", "192.0.2.1",
		"1.1.1.1", "2001:4860:4860::8888", "2001:db8::1", NULL };
	for (int i = 0; publics[i]; i++)
		CHECK(!priv(publics[i]));
}

/* ---- netpol --------------------------------------------------------------------------- */

static char *domains[] = { "*.pypi.example" };

static struct netpol_conf conf_of(enum net_mode mode, bool prompt)
{
	struct netpol_conf c = { .mode = mode, .prompt = prompt, .ttl = 60, .wait = 0, .domains = domains,
		.n_domains = 1 };
	return c;
}

static unsigned changes_seen;

static void on_change(void *arg, unsigned changes)
{
	(void)arg;
	changes_seen |= changes;
}

static int cmd(struct netpol *p, const char *text, double now)
{
	return netpol_command(p, text, strlen(text), now);
}

static int cmdf(struct netpol *p, double now, const char *verb, const char *id)
{
	char text[128];

	snprintf(text, sizeof(text), "%s %s\n", verb, id);
	return cmd(p, text, now);
}

static json_t *consume_json(struct netpol *p)
{
	struct buf b = BUF_INIT(4096);
	json_t *j = NULL;

	if (!netpol_consume(p, 0, &b)) {
		CHECK(b.len > 1 && b.ptr[b.len - 1] == '\n' && !memchr(b.ptr, '\n', b.len - 1)); /* one line */
		j = json_loadb(b.ptr, b.len, 0, NULL);
	}
	buf_free(&b);
	return j;
}

static void test_netpol_lifecycle(void)
{
	struct netpol_conf c = conf_of(NET_ALLOWLIST, true);
	struct netpol *p = netpol_new(&c, NULL);
	char a[NETPOL_ID_LEN + 1], b[NETPOL_ID_LEN + 1], d[NETPOL_ID_LEN + 1], e[NETPOL_ID_LEN + 1];
	double t = 1000.0;
	json_t *j;

	netpol_set_notify(p, on_change, NULL);
	/* static allow rules match by host, for any port the proxy lets through */
	CHECK(netpol_allows(p, "files.pypi.example", 443, t));
	CHECK(!netpol_allows(p, "pypi.example", 443, t));
	CHECK(!netpol_allows(p, "api.example.test", 443, t));
	CHECK(!netpol_pending(p));

	changes_seen = 0;
	CHECK(netpol_record(p, "api.example.test", 443, "CONNECT", t, a) == 0 && strlen(a) == NETPOL_ID_LEN);
	CHECK(changes_seen & NETPOL_RECORDED);
	CHECK(a[14] == '4'); /* a version-4 UUID */
	CHECK(netpol_pending(p));
	/* a retry within 30 s reuses the undecided event; after, a new one */
	CHECK(netpol_record(p, "api.example.test", 443, "CONNECT", t + 29, b) == 0 && !strcmp(a, b));
	CHECK(netpol_record(p, "api.example.test", 443, "CONNECT", t + 31, b) == 0 && strcmp(a, b));
	/* another port is another destination */
	CHECK(netpol_record(p, "api.example.test", 80, "GET", t + 1, d) == 0 && strcmp(d, a) && strcmp(d, b));

	/* consume: the oldest unsurfaced event; the other unsurfaced ones are superseded */
	changes_seen = 0;
	j = consume_json(p);
	CHECK(j && !strcmp(json_string_value(json_object_get(j, "request_id")), a));
	CHECK(j && !strcmp(json_string_value(json_object_get(j, "host")), "api.example.test"));
	CHECK(j && json_integer_value(json_object_get(j, "port")) == 443);
	CHECK(j && !strcmp(json_string_value(json_object_get(j, "method")), "CONNECT"));
	CHECK(j && json_number_value(json_object_get(j, "created_at")) == t);
	CHECK(j && json_object_size(j) == 5);
	json_decref(j);
	CHECK(changes_seen & NETPOL_DECIDED);
	CHECK(netpol_decision(p, b) == NP_SUPERSEDED && netpol_decision(p, d) == NP_SUPERSEDED);
	CHECK(netpol_decision(p, a) == NP_UNDECIDED);
	CHECK(!netpol_pending(p) && consume_json(p) == NULL);
	/* a surfaced, undecided event is still reused by a retry within 30 s */
	CHECK(netpol_record(p, "api.example.test", 443, "CONNECT", t + 10, e) == 0 && !strcmp(e, a));
	/* a superseded one is decided: a retry makes a fresh event */
	CHECK(netpol_record(p, "api.example.test", 80, "GET", t + 2, e) == 0 && strcmp(e, d));

	/* decisions */
	CHECK(cmdf(p, t + 20, "allow_temporary", a) == 0);
	CHECK(netpol_allows(p, "api.example.test", 443, t + 20));
	CHECK(!netpol_allows(p, "api.example.test", 80, t + 20)); /* grants are per port */
	CHECK(cmdf(p, t + 21, "allow_temporary", a) == 0);         /* the same decision again */
	CHECK(cmdf(p, t + 21, "deny", a) == EEXIST);
	CHECK(cmdf(p, t + 21, "allow_sandbox", a) == EEXIST);
	CHECK(cmdf(p, t + 21, "allow_temporary", b) == EEXIST); /* superseded stays superseded */
	CHECK(netpol_allows(p, "api.example.test", 443, t + 20 + 59));
	CHECK(!netpol_allows(p, "api.example.test", 443, t + 20 + 61)); /* ttl 60 */
	CHECK(cmdf(p, t, "deny", "0123abcd-0000-4000-8000-000000000000") == ENOENT);
	CHECK(cmdf(p, t, "allow_sandbox", e) == 0);
	CHECK(netpol_allows(p, "api.example.test", 80, t + 1e6)); /* no expiry */
	/* ids are read case-insensitively */
	{
		char up[NETPOL_ID_LEN + 1];
		for (int i = 0; i <= NETPOL_ID_LEN; i++)
			up[i] = (char)(e[i] >= 'a' && e[i] <= 'f' ? e[i] - 32 : e[i]);
		CHECK(cmdf(p, t, "allow_sandbox", up) == 0);
	}
	netpol_put(p);
}

static void test_netpol_commands(void)
{
	struct netpol_conf c = conf_of(NET_ALLOWLIST, true);
	struct netpol *p = netpol_new(&c, NULL);
	char a[NETPOL_ID_LEN + 1], b[NETPOL_ID_LEN + 1], text[200];
	struct buf before = BUF_INIT(1 << 20), after = BUF_INIT(1 << 20);
	json_t *j;

	CHECK(netpol_record(p, "a.example", 443, "CONNECT", 100, a) == 0);
	j = consume_json(p); /* a is surfaced */
	json_decref(j);
	CHECK(netpol_record(p, "b.example", 443, "CONNECT", 101, b) == 0);
	CHECK(netpol_render(p, 102, NULL, &before) == 0);
	/* malformed: EINVAL and nothing changes */
	static const char *bad[] = { "", "\n", "allow", "allow_temporary", "allow_temporary\n", "ALLOW_TEMPORARY x",
		"frobnicate 0123abcd-0000-4000-8000-000000000000", "deny 1234", "deny zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz",
		"deny-pending now", "deny_pending", "superseded 0123abcd-0000-4000-8000-000000000000", NULL };
	for (int i = 0; bad[i]; i++)
		CHECK(cmd(p, bad[i], 102) == EINVAL);
	snprintf(text, sizeof(text), "deny %s extra", a);
	CHECK(cmd(p, text, 102) == EINVAL);
	snprintf(text, sizeof(text), "deny %s\ndeny %s\n", a, b);
	CHECK(cmd(p, text, 102) == EINVAL); /* one command per write */
	CHECK(netpol_command(p, "deny-pending\0x", 14, 102) == EINVAL);
	CHECK(netpol_render(p, 102, NULL, &after) == 0);
	CHECK(before.len == after.len && !memcmp(before.ptr, after.ptr, before.len));
	/* deny-pending: unsurfaced events only */
	CHECK(cmd(p, "deny-pending\n", 103) == 0);
	CHECK(netpol_decision(p, b) == NP_DENY);
	CHECK(netpol_decision(p, a) == NP_UNDECIDED);
	CHECK(cmd(p, "deny-pending", 103) == 0); /* nothing left: still fine */
	CHECK(cmd(p, "  deny\t", 103) == EINVAL);
	snprintf(text, sizeof(text), "  deny   %s  \r\n", a);
	CHECK(cmd(p, text, 103) == 0);
	/* no state at all (a provider without events): ids are unknown */
	CHECK(netpol_command(NULL, "deny-pending", 12, 0) == 0);
	CHECK(cmdf(NULL, 0, "deny", a) == ENOENT);
	CHECK(cmd(NULL, "bogus", 0) == EINVAL);
	buf_free(&before);
	buf_free(&after);
	netpol_put(p);

	/* approval: deny and the other modes record nothing */
	c = conf_of(NET_ALLOWLIST, false);
	p = netpol_new(&c, NULL);
	CHECK(!netpol_records(p) && netpol_record(p, "a.example", 443, "CONNECT", 1, a) == -1);
	netpol_put(p);
	c = conf_of(NET_ISOLATED, true);
	p = netpol_new(&c, NULL);
	CHECK(netpol_record(p, "a.example", 443, "CONNECT", 1, a) == -1);
	CHECK(!netpol_allows(p, "x.pypi.example", 443, 1)); /* isolated denies even allow_domains */
	netpol_put(p);

	/* the number of events is bounded; decided ones go first */
	c = conf_of(NET_ALLOWLIST, true);
	p = netpol_new(&c, NULL);
	CHECK(netpol_record(p, "first.example", 443, "CONNECT", 1, a) == 0);
	for (int i = 0; i < NETPOL_MAX_EVENTS + 10; i++) {
		char host[64];
		snprintf(host, sizeof(host), "h%d.example", i);
		CHECK(netpol_record(p, host, 443, "CONNECT", 2 + i, b) == 0);
		if (i == 0)
			CHECK(cmdf(p, 3, "deny", b) == 0);
	}
	{
		struct buf r = BUF_INIT(BUF_CAP_JSON);
		json_t *o;
		CHECK(netpol_render(p, 5000, NULL, &r) == 0);
		o = json_loadb(r.ptr, r.len, 0, NULL);
		CHECK(o && json_array_size(json_object_get(o, "events")) == NETPOL_MAX_EVENTS);
		json_decref(o);
		buf_free(&r);
	}
	netpol_put(p);
}

/* A decision that cannot be recorded (a full disk; here a missing directory)
 * is refused and changes nothing: after a restart it would be gone. */
static void test_netpol_unrecorded_decision_is_refused(void)
{
	char dir[] = "/tmp/sbxfs-net-test-XXXXXX", path[160], a[NETPOL_ID_LEN + 1], b[NETPOL_ID_LEN + 1];
	struct netpol_conf c = conf_of(NET_ALLOWLIST, true);
	struct netpol *p;

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/gone/network.json", dir);
	p = netpol_new(&c, path);
	CHECK(netpol_record(p, "a.example", 443, "CONNECT", 100, a) == 0);
	CHECK(netpol_record(p, "b.example", 443, "CONNECT", 101, b) == 0);
	CHECK(cmdf(p, 102, "allow_sandbox", a) == EIO);
	CHECK(netpol_decision(p, a) == NP_UNDECIDED && !netpol_allows(p, "a.example", 443, 103));
	CHECK(cmdf(p, 102, "allow_temporary", a) == EIO);
	CHECK(netpol_decision(p, a) == NP_UNDECIDED && !netpol_allows(p, "a.example", 443, 103));
	CHECK(cmd(p, "deny-pending", 103) == EIO);
	CHECK(netpol_decision(p, a) == NP_UNDECIDED && netpol_decision(p, b) == NP_UNDECIDED);
	/* the disk is back: the same commands work */
	snprintf(path, sizeof(path), "%s/gone", dir);
	CHECK(mkdir(path, 0700) == 0);
	CHECK(cmdf(p, 104, "allow_sandbox", a) == 0);
	CHECK(netpol_decision(p, a) == NP_ALLOW_SANDBOX && netpol_allows(p, "a.example", 443, 105));
	CHECK(cmd(p, "deny-pending", 105) == 0 && netpol_decision(p, b) == NP_DENY);
	netpol_put(p);
	snprintf(path, sizeof(path), "%s/gone/network.json", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/gone", dir);
	rmdir(path);
	CHECK(rmdir(dir) == 0); /* nothing left behind */
}

static void test_netpol_persist(void)
{
	char dir[] = "/tmp/sbxfs-net-test-XXXXXX", path[128], a[NETPOL_ID_LEN + 1], b[NETPOL_ID_LEN + 1];
	struct netpol_conf c = conf_of(NET_ALLOWLIST, true), other = conf_of(NET_OPEN, false);
	struct netpol *p, *q;

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/network.json", dir);
	p = netpol_new(&c, path);
	CHECK(netpol_save(p) == 0 && access(path, F_OK) == 0);
	CHECK(netpol_record(p, "a.example", 443, "CONNECT", 100, a) == 0);
	CHECK(netpol_record(p, "b.example", 80, "GET", 101, b) == 0);
	CHECK(cmdf(p, 102, "allow_sandbox", b) == 0);
	/* a restart: the recorded policy wins over the current configuration */
	q = netpol_load(path, &other);
	CHECK(netpol_conf(q)->mode == NET_ALLOWLIST && netpol_conf(q)->prompt && netpol_conf(q)->ttl == 60);
	CHECK(netpol_conf(q)->n_domains == 1 && !strcmp(netpol_conf(q)->domains[0], "*.pypi.example"));
	CHECK(netpol_allows(q, "b.example", 80, 1e9));
	CHECK(netpol_decision(q, a) == NP_UNDECIDED && netpol_pending(q));
	CHECK(netpol_decision(q, b) == NP_ALLOW_SANDBOX);
	netpol_put(q);
	/* destroyed: the file goes, later changes are refused */
	netpol_close(p);
	CHECK(access(path, F_OK) == -1 && errno == ENOENT);
	CHECK(netpol_record(p, "c.example", 443, "CONNECT", 103, a) == -1);
	CHECK(!netpol_allows(p, "b.example", 80, 104));
	CHECK(access(path, F_OK) == -1);
	netpol_put(p);
	/* nothing recorded: a new state with the given policy */
	q = netpol_load(path, &other);
	CHECK(q && netpol_conf(q)->mode == NET_OPEN);
	netpol_put(q);
	rmdir(dir);
}

/* ---- http ------------------------------------------------------------------------------- */

static int parse(const char *head, struct http_req *r)
{
	const char *why;

	return http_parse(head, strlen(head), r, &why);
}

static void test_http(void)
{
	struct http_req r;
	struct buf up = BUF_INIT(65536);

	CHECK(http_head_len("CONNECT a:443 HTTP/1.1\r\n", 24, 0) == 0);
	CHECK(http_head_len("CONNECT a:443 HTTP/1.1\r\n\r\nxyz", 29, 0) == 26);
	/* resumed where the last call stopped: an end split across two reads */
	CHECK(http_head_len("CONNECT a:443 HTTP/1.1\r\n\r\nxyz", 29, 24) == 26);
	CHECK(http_head_len("CONNECT a:443 HTTP/1.1\r\n\r\nxyz", 29, 25) == 26);
	CHECK(http_head_len("GET http://a/ HTTP/1.1\n\n", 24, 23) == 24);
	{
		char *big = malloc(HTTP_HEAD_MAX + 10);
		memset(big, 'a', HTTP_HEAD_MAX + 10);
		CHECK(http_head_len(big, HTTP_HEAD_MAX + 10, 0) == -1);
		free(big);
	}
	CHECK(parse("CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n", &r) == 0);
	CHECK(r.connect && !strcmp(r.host, "api.example.test") && r.port == 443 && r.minor == 1);
	CHECK(parse("CONNECT api.example.test:443 HTTP/1.0\r\n\r\n", &r) == 0); /* Python's tunnel */
	CHECK(parse("CONNECT api.example.test:22 HTTP/1.1\r\nHost: api.example.test:22\r\n\r\n", &r) == 0 &&
	      r.port == 22); /* the port rule is the proxy's */
	CHECK(parse("CONNECT [::1]:443 HTTP/1.1\r\n\r\n", &r) == 0 && !strcmp(r.host, "[::1]"));
	CHECK(parse("CONNECT api.example.test HTTP/1.1\r\n\r\n", &r) == 400);
	CHECK(parse("CONNECT a:443 HTTP/1.1\r\nHost: b:443\r\n\r\n", &r) == 400);
	CHECK(parse("CONNECT a:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\n", &r) == 400);
	CHECK(parse("GET http://a.example/x?y=1 HTTP/1.1\r\nHost: a.example\r\n\r\n", &r) == 0);
	CHECK(!r.connect && r.port == 80 && !strcmp(r.host, "a.example"));
	CHECK(r.path_len == 6 && !memcmp(r.path, "/x?y=1", 6));
	CHECK(parse("GET http://a.example:80 HTTP/1.1\r\nHost: a.example:80\r\n\r\n", &r) == 0 && r.path_len == 0);
	CHECK(parse("GET http://a.example:8080/ HTTP/1.1\r\nHost: a.example:8080\r\n\r\n", &r) == 0 && r.port == 8080);
	CHECK(parse("GET /x HTTP/1.1\r\nHost: a.example\r\n\r\n", &r) == 400);            /* origin form */
	CHECK(parse("GET https://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", &r) == 400);
	CHECK(parse("GET http://u:p@a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", &r) == 400);
	CHECK(parse("GET http://a.example/ HTTP/1.1\r\n\r\n", &r) == 400);                  /* no Host */
	CHECK(parse("GET http://a.example/ HTTP/1.0\r\n\r\n", &r) == 0);
	CHECK(parse("GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n", &r) == 400);
	CHECK(parse("GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n", &r) == 400);
	CHECK(parse("GET http://a.example/ HTTP/2.0\r\nHost: a.example\r\n\r\n", &r) == 505);
	CHECK(parse("GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nX-A: 1\r\n  folded\r\n\r\n", &r) == 400);
	CHECK(parse("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n", &r) == 400);
	CHECK(parse("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip\r\n\r\n", &r) == 501);
	/* chunked framing in HTTP/1.0 is faulty (RFC 9112 6.1) */
	CHECK(parse("POST http://a.example/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", &r) == 400);
	CHECK(parse("POST http://a.example/ HTTP/1.0\r\nContent-Length: 3\r\n\r\n", &r) == 0);
	CHECK(parse("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
		      &r) == 400);
	CHECK(parse("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
		      &r) == 0 && r.content_length == 3);
	CHECK(parse("POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: -3\r\n\r\n", &r) == 400);
	CHECK(parse("PUT http://a.example/ HTTP/1.1\r\nHost: a.example\r\nExpect: 100-continue\r\n\r\n", &r) == 417);
	CHECK(parse("GET http://a.example/ HTTP/1.1\nHost: a.example\n\n", &r) == 400); /* bare LF */
	CHECK(parse("get http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", &r) == 400);
	CHECK(parse("TRACE http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", &r) == 405);
	CHECK(parse("GET  http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", &r) == 400);
	CHECK(parse("GET http://a.example/ HTTP/1.1\r\nHost : a.example\r\n\r\n", &r) == 400);
	CHECK(parse("GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nX: a\x01z\r\n\r\n", &r) == 400);

	{
		const char *h = "GET http://a.example/p HTTP/1.1\r\nHost: a.example\r\nConnection: keep-alive, X-Secret\r\n"
				"X-Secret: 1\r\nProxy-Authorization: x\r\nKeep-Alive: 5\r\nUpgrade: h2c\r\nAccept: */*\r\n\r\n";
		CHECK(parse(h, &r) == 0 && http_upstream_head(h, strlen(h), &r, &up) == 0);
		CHECK(!strcmp(buf_str(&up), "GET /p HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\nConnection: close\r\n\r\n"));
	}
	{
		/* Connection may not take away the framing the proxy forwards the
		 * body by, nor the Host: else the upstream reads the body as the
		 * next request, one the proxy never looked at */
		const char *h = "POST http://a.example/p HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\n"
				"Connection: content-length, host\r\n\r\n";
		const char *c = "POST http://a.example/p HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n"
				"Connection: Transfer-Encoding\r\n\r\n";

		buf_reset(&up);
		CHECK(parse(h, &r) == 0 && r.content_length == 5 && http_upstream_head(h, strlen(h), &r, &up) == 0);
		CHECK(!strcmp(buf_str(&up), "POST /p HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"));
		buf_reset(&up);
		CHECK(parse(c, &r) == 0 && r.chunked && http_upstream_head(c, strlen(c), &r, &up) == 0);
		CHECK(!strcmp(buf_str(&up),
			"POST /p HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"));
	}
	buf_free(&up);

	/* chunked framing: exactly one body, whatever follows is not its */
	{
		const char *body = "4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nTrailer: x\r\n\r\nGET http://next/ HTTP/1.1\r\n";
		size_t blen = strlen(body), end = strlen(body) - strlen("GET http://next/ HTTP/1.1\r\n");
		struct http_chunked ch = { 0 };
		size_t got = 0;

		CHECK(http_chunked_feed(&ch, body, blen) == (ssize_t)end && ch.done);
		memset(&ch, 0, sizeof(ch));
		for (size_t i = 0; i < blen && !ch.done; i++) /* byte by byte */
			got += (size_t)http_chunked_feed(&ch, body + i, 1);
		CHECK(ch.done && got == end);
		memset(&ch, 0, sizeof(ch));
		CHECK(http_chunked_feed(&ch, "zz\r\n", 4) == -1);
		memset(&ch, 0, sizeof(ch));
		CHECK(http_chunked_feed(&ch, "3\r\nabcX", 7) == -1); /* no CRLF after the data */
		memset(&ch, 0, sizeof(ch));
		CHECK(http_chunked_feed(&ch, "ffffffffffffffffff\r\n", 20) == -1);
	}
}

/* ---- tls ---------------------------------------------------------------------------------- */

/* A ClientHello record: optional SNI, optional ECH extension; split > 0
 * cuts the handshake into two records at that offset. */
static size_t hello(unsigned char *out, const char *sni, int ech, size_t split)
{
	unsigned char hs[1024], ext[600];
	size_t e = 0, h = 0, o = 0;

	if (sni) {
		size_t n = strlen(sni);
		ext[e++] = 0, ext[e++] = 0;                               /* server_name */
		ext[e++] = (unsigned char)((n + 5) >> 8), ext[e++] = (unsigned char)(n + 5);
		ext[e++] = (unsigned char)((n + 3) >> 8), ext[e++] = (unsigned char)(n + 3);
		ext[e++] = 0;                                             /* host_name */
		ext[e++] = (unsigned char)(n >> 8), ext[e++] = (unsigned char)n;
		memcpy(ext + e, sni, n);
		e += n;
	}
	ext[e++] = 0x00, ext[e++] = 0x2b, ext[e++] = 0, ext[e++] = 3, ext[e++] = 2, ext[e++] = 3, ext[e++] = 4;
	if (ech) {
		ext[e++] = 0xfe, ext[e++] = 0x0d, ext[e++] = 0, ext[e++] = 4;
		memcpy(ext + e, "\0\0\0\0", 4);
		e += 4;
	}
	hs[h++] = 1; /* client_hello */
	h += 3;      /* length, below */
	hs[h++] = 3, hs[h++] = 3;
	memset(hs + h, 0x42, 32), h += 32;
	hs[h++] = 0;                                  /* session id */
	hs[h++] = 0, hs[h++] = 2, hs[h++] = 0x13, hs[h++] = 0x01; /* one suite */
	hs[h++] = 1, hs[h++] = 0;                     /* null compression */
	hs[h++] = (unsigned char)(e >> 8), hs[h++] = (unsigned char)e;
	memcpy(hs + h, ext, e), h += e;
	hs[1] = 0, hs[2] = (unsigned char)((h - 4) >> 8), hs[3] = (unsigned char)(h - 4);
	for (size_t off = 0, part; off < h; off += part) {
		part = split && off == 0 ? split : h - off;
		out[o++] = 22, out[o++] = 3, out[o++] = 1;
		out[o++] = (unsigned char)(part >> 8), out[o++] = (unsigned char)part;
		memcpy(out + o, hs + off, part), o += part;
	}
	return o;
}

static void test_tls(void)
{
	unsigned char m[2048];
	char sni[256];
	size_t n;

	n = hello(m, "API.Example.Test", 0, 0);
	CHECK(tls_client_hello(m, n, sni, sizeof(sni)) == TLS_HELLO_OK && !strcmp(sni, "api.example.test"));
	for (size_t i = 0; i < n; i++)
		CHECK(tls_client_hello(m, i, sni, sizeof(sni)) == (i == 0 ? TLS_HELLO_MORE : TLS_HELLO_MORE));
	n = hello(m, "api.example.test", 0, 20); /* two records */
	CHECK(tls_client_hello(m, n, sni, sizeof(sni)) == TLS_HELLO_OK && !strcmp(sni, "api.example.test"));
	n = hello(m, "api.example.test", 1, 0);
	CHECK(tls_client_hello(m, n, sni, sizeof(sni)) == TLS_HELLO_ECH);
	n = hello(m, NULL, 0, 0);
	CHECK(tls_client_hello(m, n, sni, sizeof(sni)) == TLS_HELLO_NO_SNI);
	CHECK(tls_client_hello((const unsigned char *)"GET / HTTP/1.1\r\n", 16, sni, sizeof(sni)) == TLS_HELLO_NOT_TLS);
	n = hello(m, "api.example.test", 0, 0);
	m[5] = 2; /* a ServerHello is not a ClientHello */
	CHECK(tls_client_hello(m, n, sni, sizeof(sni)) == TLS_HELLO_BAD);
	n = hello(m, "api.example.test", 0, 0);
	m[5 + 4 + 2 + 32] = 200; /* a session id longer than its message */
	CHECK(tls_client_hello(m, n, sni, sizeof(sni)) == TLS_HELLO_BAD);
}

/* A ServerHello record (a HelloRetryRequest with hrr). */
static size_t server_hello(unsigned char *out, int hrr)
{
	static const unsigned char magic[32] = { 0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c,
		0x02, 0x1e, 0x65, 0xb8, 0x91, 0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2,
		0xc8, 0xa8, 0x33, 0x9c };
	unsigned char *hs = out + 5;
	size_t h = 0;

	hs[h++] = 2, h += 3;
	hs[h++] = 3, hs[h++] = 3;
	if (hrr)
		memcpy(hs + h, magic, 32);
	else
		memset(hs + h, 0x17, 32);
	h += 32;
	hs[h++] = 0;                         /* session id */
	hs[h++] = 0x13, hs[h++] = 0x01;      /* the suite */
	hs[h++] = 0;                         /* compression */
	hs[h++] = 0, hs[h++] = 6;            /* extensions: supported_versions 1.3 */
	hs[h++] = 0, hs[h++] = 0x2b, hs[h++] = 0, hs[h++] = 2, hs[h++] = 3, hs[h++] = 4;
	hs[1] = 0, hs[2] = 0, hs[3] = (unsigned char)(h - 4);
	out[0] = 22, out[1] = 3, out[2] = 3, out[3] = 0, out[4] = (unsigned char)h;
	return 5 + h;
}

/* A record of type with n bytes of x. */
static size_t record(unsigned char *out, unsigned type, size_t n, unsigned char x)
{
	out[0] = (unsigned char)type, out[1] = 3, out[2] = 3, out[3] = (unsigned char)(n >> 8), out[4] = (unsigned char)n;
	memset(out + 5, x, n);
	return 5 + n;
}

/* Every ClientHello of a tunnel: a HelloRetryRequest's second one too. */
static void test_tls_watch(void)
{
	const char *host = "api.example.test";
	unsigned char c[4096], sv[512];
	struct tls_watch w = TLS_WATCH_INIT;
	size_t n, sn, used;

	/* the first ClientHello, however it arrives: nothing goes until it is whole */
	n = hello(c, "api.example.test", 0, 20);
	for (size_t i = 1; i < n; i++) {
		struct tls_watch t = TLS_WATCH_INIT;
		CHECK(tls_watch_client(&t, c, i, host, &used) == TLS_HELLO_MORE && used == 0 && !t.hellos);
	}
	CHECK(tls_watch_client(&w, c, n, host, &used) == TLS_HELLO_OK && used == n && w.hellos == 1);
	/* early data and a ChangeCipherSpec may follow, opaque */
	n = record(c, 23, 100, 0xaa);
	n += record(c + n, 20, 1, 1);
	CHECK(tls_watch_client(&w, c, n, host, &used) == TLS_HELLO_OK && used == n);
	/* a second ClientHello that no HelloRetryRequest asked for */
	n = hello(c, "api.example.test", 0, 0);
	{
		struct tls_watch t = w;
		CHECK(tls_watch_client(&t, c, n, host, &used) == TLS_HELLO_SEQUENCE);
	}
	/* the server asks again (and a ChangeCipherSpec of compatibility mode) */
	sn = server_hello(sv, 1);
	sn += record(sv + sn, 20, 1, 1);
	CHECK(tls_watch_server(&w, sv, sn, &used) == TLS_HELLO_OK && used == sn && w.retries == 1 && !w.done);
	/* the second ClientHello is checked like the first */
	n = hello(c, "other.example.test", 0, 0);
	{
		struct tls_watch t = w;
		CHECK(tls_watch_client(&t, c, n, host, &used) == TLS_HELLO_OTHER_HOST);
	}
	n = hello(c, "api.example.test", 1, 0);
	{
		struct tls_watch t = w;
		CHECK(tls_watch_client(&t, c, n, host, &used) == TLS_HELLO_ECH);
	}
	n = hello(c, NULL, 0, 0);
	{
		struct tls_watch t = w;
		CHECK(tls_watch_client(&t, c, n, host, &used) == TLS_HELLO_NO_SNI);
	}
	/* ... and held back while incomplete, even when its first record is whole */
	n = hello(c, "other.example.test", 0, 30);
	{
		struct tls_watch t = w;
		CHECK(tls_watch_client(&t, c, 5 + 30, host, &used) == TLS_HELLO_OK && used == 0 && t.hellos == 1);
		CHECK(tls_watch_client(&t, c, n, host, &used) == TLS_HELLO_OTHER_HOST);
	}
	n = hello(c, "API.example.test.", 0, 30);
	CHECK(tls_watch_client(&w, c, n, host, &used) == TLS_HELLO_OK && used == n && w.hellos == 2);
	/* a handshake message of the client that is not a ClientHello, before the server chose */
	n = record(c, 22, 8, 0);
	c[5] = 16, c[6] = 0, c[7] = 0, c[8] = 4;
	{
		struct tls_watch t = w;
		CHECK(tls_watch_client(&t, c, n, host, &used) == TLS_HELLO_SEQUENCE);
	}
	/* a second HelloRetryRequest is refused (a client must abort then) */
	sn = server_hello(sv, 1);
	{
		struct tls_watch t = w;
		CHECK(tls_watch_server(&t, sv, sn, &used) == TLS_HELLO_SEQUENCE);
	}
	/* the ServerHello, split: the server chose; from then on everything passes */
	sn = server_hello(sv, 0);
	sn += record(sv + sn, 23, 50, 0x55);
	CHECK(tls_watch_server(&w, sv, 20, &used) == TLS_HELLO_OK && used == 0 && !w.done);
	CHECK(tls_watch_server(&w, sv, sn, &used) == TLS_HELLO_OK && used == sn && w.done);
	n = hello(c, "other.example.test", 0, 0);
	CHECK(tls_watch_client(&w, c, n - 3, host, &used) == TLS_HELLO_OK && used == n - 3);
	/* a server whose first message is no ServerHello, or not TLS */
	{
		struct tls_watch t = TLS_WATCH_INIT;
		n = hello(c, "api.example.test", 0, 0);
		CHECK(tls_watch_server(&t, c, n, &used) == TLS_HELLO_BAD);
		t = (struct tls_watch)TLS_WATCH_INIT;
		CHECK(tls_watch_server(&t, (const unsigned char *)"HTTP/1.1 400 Bad", 16, &used) == TLS_HELLO_BAD);
		t = (struct tls_watch)TLS_WATCH_INIT;
		CHECK(tls_watch_client(&t, (const unsigned char *)"GET / HTTP/1.1\r\n", 16, host, &used) ==
		      TLS_HELLO_NOT_TLS);
	}
}

/* ---- egress and resolve ------------------------------------------------------------------------ */

static void test_egress(void)
{
	struct egress_rules r = { .mode = NET_OPEN, .dns = "10.255.255.53" };
	struct buf b = BUF_INIT(1 << 20);

	CHECK(egress_ruleset(&r, &b) == 0);
	CHECK(strstr(buf_str(&b), "169.254.0.0/16") && strstr(buf_str(&b), "10.0.0.0/8") &&
	      strstr(buf_str(&b), "fe80::/10"));
	CHECK(strstr(buf_str(&b), "ip daddr 10.255.255.53 meta l4proto { tcp, udp } th dport 53 accept"));
	CHECK(strstr(buf_str(&b), "ip daddr @private4 meta l4proto tcp reject with tcp reset"));
	CHECK(strstr(buf_str(&b), "oif \"lo\" accept"));
	buf_reset(&b);
	r.allow_private = true;
	CHECK(egress_ruleset(&r, &b) == 0 && !strstr(buf_str(&b), "reject"));
	buf_reset(&b);
	r = (struct egress_rules){ .mode = NET_ALLOWLIST };
	CHECK(egress_ruleset(&r, &b) == 0 && strstr(buf_str(&b), "\t\treject with icmpx admin-prohibited\n") &&
	      !strstr(buf_str(&b), "private4"));
	/* a re-apply replaces the table; a fresh namespace only gets it added */
	CHECK(strstr(buf_str(&b), "delete table inet sbxfs\n"));
	buf_reset(&b);
	r.fresh = true;
	CHECK(egress_ruleset(&r, &b) == 0 && !strstr(buf_str(&b), "delete table") &&
	      !strncmp(buf_str(&b), "table inet sbxfs {\n", 19) && strstr(buf_str(&b), "reject with icmpx"));
	buf_reset(&b);
	{
		/* the gateway's: sandbox to sandbox refused first, private only for
		 * the strict half, masquerade of the subnet out of anything but a
		 * veth, nothing to the gateway itself */
		const struct egress_gw g = { .subnet = "10.201.0.0/16", .strict = "10.201.0.0/17", .ifprefix = "sb",
			.dns = "10.255.255.53" };
		const char *t, *s2s, *est;

		CHECK(egress_gateway_ruleset(&g, &b) == 0);
		t = buf_str(&b);
		s2s = strstr(t, "iifname \"sb*\" oifname \"sb*\" reject");
		est = strstr(t, "ct state established,related accept");
		CHECK(s2s && est && s2s < est);
		CHECK(strstr(t, "policy drop;") && strstr(t, "ip saddr != 10.201.0.0/16 drop"));
		CHECK(strstr(t, "ip saddr 10.201.0.0/17 ip daddr @private4 meta l4proto tcp reject with tcp reset"));
		CHECK(strstr(t, "elements = { 10.255.255.53 }") && strstr(t, "ip daddr @dns4 meta l4proto { tcp, udp } th dport 53 accept"));
		CHECK(strstr(t, "ip saddr 10.201.0.0/16 oifname != \"sb*\" masquerade"));
		CHECK(strstr(t, "hook input priority 0; policy accept;\n\t\tiifname \"sb*\" drop"));
		CHECK(!strncmp(t, "add table inet sbxfs\ndelete table inet sbxfs\n", 44));
		buf_reset(&b);
		/* no resolver: an empty set, still there for later elements */
		const struct egress_gw g2 = { .subnet = "10.201.0.0/16", .strict = "10.201.0.0/17", .ifprefix = "sb" };
		CHECK(egress_gateway_ruleset(&g2, &b) == 0 && strstr(buf_str(&b), "set dns4 {\n\t\ttype ipv4_addr\n\t}"));
		CHECK(!strstr(buf_str(&b), "ip6 saddr") && !strstr(buf_str(&b), "icmpv6"));
		buf_reset(&b);
		/* IPv6: the same rules for its subnet, and neighbour discovery to the gateway */
		const struct egress_gw g3 = { .subnet = "10.201.0.0/16", .strict = "10.201.0.0/17", .ifprefix = "sb",
			.subnet6 = "fdb5:5bf5:c2c9::/112", .strict6 = "fdb5:5bf5:c2c9::/113", .dns = "fd00::53" };
		CHECK(egress_gateway_ruleset(&g3, &b) == 0);
		t = buf_str(&b);
		CHECK(strstr(t, "ip6 saddr != fdb5:5bf5:c2c9::/112 drop") &&
		      strstr(t, "ip6 saddr fdb5:5bf5:c2c9::/113 ip6 daddr @private6 reject with icmpx admin-prohibited") &&
		      strstr(t, "ip6 saddr fdb5:5bf5:c2c9::/112 oifname != \"sb*\" masquerade") &&
		      strstr(t, "iifname \"sb*\" icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept\n\t\tiifname \"sb*\" drop"));
		/* a resolver with an IPv6 address goes into dns6, let through before the private rules */
		CHECK(strstr(t, "set dns6 {\n\t\ttype ipv6_addr\n\t\telements = { fd00::53 }") &&
		      strstr(t, "set dns4 {\n\t\ttype ipv4_addr\n\t}"));
		CHECK(strstr(t, "ip6 daddr @dns6 meta l4proto { tcp, udp } th dport 53 accept") &&
		      strstr(t, "ip6 daddr @dns6") < strstr(t, "ip6 saddr fdb5:5bf5:c2c9::/113 ip6 daddr @private6"));
	}
	buf_free(&b);
	{
		char path[] = "/tmp/sbxfs-resolv-XXXXXX", out[64];
		int fd = mkstemp(path);
		const char *text = "# x\nnameserver 127.0.0.53\nnameserver 10.9.8.7\nnameserver 1.1.1.1\n";
		CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
		close(fd);
		CHECK(egress_resolver(path, out, sizeof(out)) && !strcmp(out, "10.9.8.7"));
		unlink(path);
		CHECK(egress_resolver("/nonexistent/resolv.conf", out, sizeof(out)) == NULL);
	}
}

static void test_resolve(void)
{
	char *loop[] = { "127.0.0.1" }, *pub[] = { "198.51.100.7", "2001:db8::7" }, *meta[] = { "198.51.100.7",
		"169.254.169.254" };
	struct config_host h1 = { "local.test", loop, 1 }, h2 = { "pub.test", pub, 2 }, h3 = { "meta.test", meta, 2 };
	struct resolve_req r = { .port = 443 };

	r.mapped = &h1;
	resolve_now(&r);
	CHECK(r.err == RESOLVE_PRIVATE && r.n == 0);
	r.allow_private = true;
	resolve_now(&r);
	CHECK(r.err == RESOLVE_OK && r.n == 1 && ntohs(((struct sockaddr_in *)&r.addrs[0])->sin_port) == 443);
	r.allow_private = false;
	r.mapped = &h2;
	resolve_now(&r);
	CHECK(r.err == RESOLVE_OK && r.n == 2);
	r.mapped = &h3; /* every answer must be public */
	resolve_now(&r);
	CHECK(r.err == RESOLVE_PRIVATE && strstr(r.why, "169.254.169.254"));
}

int main(void)
{
	log_open(0, 0);
	test_policy();
	test_netpol_lifecycle();
	test_netpol_commands();
	test_netpol_unrecorded_decision_is_refused();
	test_netpol_persist();
	test_http();
	test_tls();
	test_tls_watch();
	test_egress();
	test_resolve();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
