/* SPDX-License-Identifier: MIT */
/*
 * http_test.c - unit tests of common/http, common/netns, common/udir and the
 * Docker Engine API client against canned servers on unix sockets (and, as
 * root, one inside a private network namespace): no network, no dockerd.
 * The last line is "N passed, N failed".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/http.h"
#include "../../common/log.h"
#include "../../common/netns.h"
#include "../../common/token.h"
#include "../../common/util.h"
#include "../../common/udir.h"
#include "../../providers/aio_api.h"
#include "../../providers/docker_api.h"
#include "../../providers/opensandbox_api.h"
#include "canned.h"
#include "check.h"

static char sock_path[64], sock_path2[64];

#define OK_JSON(body) "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n" body

/* A reply with the right Content-Length for body (static storage per call site). */
static const char *reply(char *store, size_t size, int status, const char *body)
{
	snprintf(store, size, "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", status,
		strlen(body), body);
	return store;
}

static void test_status_and_log_helpers(void)
{
	struct http_header h = { "Authorization", "Bearer s3cret", true }, p = { "Accept", "application/json", false };
	char out[128];

	CHECK(http_status_err(200) == SBX_OK && http_status_err(201) == SBX_OK && http_status_err(304) == SBX_OK);
	CHECK(http_status_err(404) == SBX_ERR_GONE && http_status_err(409) == SBX_ERR_EXIST);
	CHECK(http_status_err(401) == SBX_ERR_ACCESS && http_status_err(403) == SBX_ERR_ACCESS);
	CHECK(http_status_err(422) == SBX_ERR_INVAL && http_status_err(400) == SBX_ERR_INVAL);
	CHECK(http_status_err(503) == SBX_ERR_BUSY && http_status_err(504) == SBX_ERR_TIMEOUT);
	CHECK(http_status_err(507) == SBX_ERR_NOSPC && http_status_err(500) == SBX_ERR_IO);
	http_header_for_log(&h, out, sizeof(out));
	CHECK(!strcmp(out, "Authorization: ***") && !strstr(out, "s3cret"));
	http_header_for_log(&p, out, sizeof(out));
	CHECK(!strcmp(out, "Accept: application/json"));
	http_url_for_log("http://h:1/v1/x?api_key=abc&x=1", out, sizeof(out));
	CHECK(!strcmp(out, "http://h:1/v1/x?...") && !strstr(out, "abc"));
}

/* The ranged-download sink: a 206 is written as it comes, up to want; a
 * 200 (Range ignored) has what precedes off dropped first. */
static void test_range_sink(void)
{
	char path[] = "/tmp/sbxfs-range-XXXXXX", got[16] = { 0 };
	int fd = mkstemp(path);
	struct http_range d = { .fd = fd, .off = 3, .want = 4 };

	CHECK(fd >= 0);
	unlink(path);
	http_range_status(200, &d);
	CHECK(http_range_sink("ab", 2, &d) && d.got == 0);
	CHECK(!http_range_sink("cdefgh", 6, &d) && d.got == 4); /* want reached: stop */
	CHECK(pread(fd, got, sizeof(got), 0) == 4 && !strcmp(got, "defg"));
	CHECK(ftruncate(fd, 0) == 0 && lseek(fd, 0, SEEK_SET) == 0);
	d = (struct http_range){ .fd = fd, .off = 3, .want = 4 };
	http_range_status(206, &d);
	CHECK(http_range_sink("de", 2, &d) && !http_range_sink("fgXX", 4, &d) && d.got == 4);
	memset(got, 0, sizeof(got));
	CHECK(pread(fd, got, sizeof(got), 0) == 4 && !strcmp(got, "defg"));
	close(fd);
	d = (struct http_range){ .fd = fd, .want = 4 }; /* a closed fd: the write error is kept */
	CHECK(!http_range_sink("abcd", 4, &d) && d.werr == EBADF);
}

static void test_unix_get_post_and_reuse(void)
{
	char r1[256], r2[256];
	struct canned c = { .replies = { reply(r1, sizeof(r1), 200, "{\"a\":1}"), reply(r2, sizeof(r2), 201, "{}") },
		.n_replies = 2 };
	struct http_header hd[] = { { "X-AIO-API-Key", "topsecret", true } };
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct buf out = BUF_INIT(1024);
	json_t *body = json_pack("{s:s}", "command", "echo hi");

	canned_start(&c, canned_unix_listener(sock_path));
	rq.url = "http://docker/v1.41/x";
	rq.unix_socket = sock_path;
	rq.out = &out;
	rq.headers = hd;
	rq.n_headers = 1;
	CHECK(http_perform(&rq, &rs) == SBX_OK && rs.status == 200 && !strcmp(buf_str(&out), "{\"a\":1}"));
	CHECK(!strncmp(rs.content_type, "application/json", 16) && rs.id[0] == 'h');
	buf_reset(&out);
	rq.method = "POST";
	rq.json = body;
	rq.headers = NULL;
	rq.n_headers = 0;
	CHECK(http_perform(&rq, &rs) == SBX_OK && rs.status == 201);
	CHECK(c.n_requests == 2);
	CHECK(c.n_requests >= 1 && !strncmp(c.requests[0], "GET /v1.41/x HTTP/1.1", 21));
	CHECK(c.n_requests >= 1 && strstr(c.requests[0], "X-AIO-API-Key: topsecret") &&
	      strstr(c.requests[0], "X-Request-Id: sbxfs-"));
	CHECK(c.n_requests >= 2 && !strncmp(c.requests[1], "POST /v1.41/x HTTP/1.1", 22) &&
	      strstr(c.requests[1], "Content-Type: application/json") &&
	      strstr(c.requests[1], "{\"command\":\"echo hi\"}"));
	CHECK(c.connections == 1); /* the second request reused the connection (the share's cache) */
	canned_stop(&c);
	json_decref(body);
	buf_free(&out);
}

static void test_cap_refused_and_timeout(void)
{
	char big[4096], body[2048], r2[256];
	struct canned c = { .n_replies = 2 };
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct buf out = BUF_INIT(100);

	memset(body, 'x', sizeof(body) - 1);
	body[sizeof(body) - 1] = '\0';
	c.replies[0] = reply(big, sizeof(big), 200, body);
	snprintf(r2, sizeof(r2), "DELAY:1500\n%s", reply(big + 3000, 1000, 200, "{}"));
	c.replies[1] = r2;
	canned_start(&c, canned_unix_listener(sock_path));
	rq.url = "http://docker/big";
	rq.unix_socket = sock_path;
	rq.out = &out;
	CHECK(http_perform(&rq, &rs) == SBX_ERR_TOOBIG && strstr(rs.error, "larger than 100"));
	rq.timeout_ms = 300;
	buf_init(&out, 100);
	CHECK(http_perform(&rq, &rs) == SBX_ERR_TIMEOUT);
	canned_stop(&c);
	buf_free(&out);

	/* nobody listening: a transport error with its cause */
	unlink(sock_path);
	buf_init(&out, 100);
	rq.timeout_ms = 0;
	CHECK(http_perform(&rq, &rs) == SBX_ERR_IO && rs.status == 0 && rs.error[0]);
	buf_free(&out);
}

struct sink_seen {
	size_t bytes;
	int calls;
};

static bool stop_after_first(const char *data, size_t len, void *arg)
{
	struct sink_seen *s = arg;

	(void)data;
	s->bytes += len;
	s->calls++;
	return false;
}

static void test_sink_stops(void)
{
	struct canned c = { .replies = { "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\nabcdef" },
		.n_replies = 1 };
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct sink_seen seen = { 0 };

	canned_start(&c, canned_unix_listener(sock_path));
	rq.url = "http://docker/stream";
	rq.unix_socket = sock_path;
	rq.sink = stop_after_first;
	rq.sink_arg = &seen;
	CHECK(http_perform(&rq, &rs) == SBX_OK && rs.aborted && seen.calls == 1 && seen.bytes > 0);
	canned_stop(&c);
	/* a malformed request: both or neither response target */
	rq.sink = NULL;
	CHECK(http_perform(&rq, &rs) == SBX_ERR_INVAL);
}

/* ---- only http and https, to where the URL says --------------------------------------- */

/* A TCP listener on 127.0.0.1 (non-blocking: accept says whether anything
 * connected); *port its port. */
static int tcp_listener_nb(int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 16) ||
	    getsockname(fd, (struct sockaddr *)&a, &alen)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(a.sin_port);
	return fd;
}

/* Whether anyone connected to the non-blocking listener fd (each
 * connection is accepted and closed). */
static int connections_to(int fd)
{
	int n = 0, c;

	while ((c = accept4(fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		close(c);
		n++;
	}
	return n;
}

/* A URL of another scheme, or with credentials, fails before any
 * connection: gopher, dict, telnet, smtp, ftp, file (the schemes libcurl
 * would speak to a host service), over TCP and over the Docker socket. */
static void test_only_http_and_https(void)
{
	static const char *const fmts[] = { "gopher://127.0.0.1:%d/_SET%%20pwned%%201%%0D%%0A#", "dict://127.0.0.1:%d/info",
		"telnet://127.0.0.1:%d/", "smtp://127.0.0.1:%d/", "ftp://127.0.0.1:%d/x", "ldap://127.0.0.1:%d/",
		"mqtt://127.0.0.1:%d/t", "file:///etc/hostname#%d", "http://user@127.0.0.1:%d/x",
		"http://user:pass@127.0.0.1:%d/x" };
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct buf out = BUF_INIT(1024);
	char url[256];
	int port = 0, lfd = tcp_listener_nb(&port), ufd;
	enum sbx_err e;

	CHECK(lfd >= 0);
	rq.out = &out;
	rq.timeout_ms = 2000;
	for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		snprintf(url, sizeof(url), fmts[i], port);
		rq.url = url;
		buf_reset(&out);
		e = http_perform(&rq, &rs);
		CHECK(e == SBX_ERR_INVAL && rs.status == 0 && strstr(rs.error, "refused") && out.len == 0);
		if (e != SBX_ERR_INVAL || !strstr(rs.error, "refused"))
			fprintf(stderr, "  %s: %s (%s)\n", url, sbx_err_name(e), rs.error);
	}
	CHECK(connections_to(lfd) == 0);
	/* the Docker handle: a unix socket, http only too */
	ufd = canned_unix_listener(sock_path);
	CHECK(ufd >= 0 && fcntl(ufd, F_SETFL, O_NONBLOCK) == 0);
	rq.unix_socket = sock_path;
	rq.url = "gopher://docker/_x";
	CHECK(http_perform(&rq, &rs) == SBX_ERR_INVAL && strstr(rs.error, "only http"));
	rq.url = "dict://docker/x";
	CHECK(http_perform(&rq, &rs) == SBX_ERR_INVAL);
	CHECK(connections_to(ufd) == 0);
	close(ufd);
	close(lfd);
	buf_free(&out);
}

/* A redirect is an answer, never followed (to another scheme or not). */
static void test_redirect_not_followed(void)
{
	char r1[512], r2[512];
	int port = 0, lfd = tcp_listener_nb(&port);
	struct canned c = { .n_replies = 2 };
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct buf out = BUF_INIT(1024);

	CHECK(lfd >= 0);
	snprintf(r1, sizeof(r1), "HTTP/1.1 302 Found\r\nLocation: gopher://127.0.0.1:%d/_x\r\nContent-Length: 0\r\n\r\n",
		port);
	snprintf(r2, sizeof(r2), "HTTP/1.1 301 Moved\r\nLocation: http://127.0.0.1:%d/y\r\nContent-Length: 0\r\n\r\n",
		port);
	c.replies[0] = r1;
	c.replies[1] = r2;
	canned_start(&c, canned_unix_listener(sock_path));
	rq.url = "http://docker/x";
	rq.unix_socket = sock_path;
	rq.out = &out;
	CHECK(http_perform(&rq, &rs) == SBX_OK && rs.status == 302);
	CHECK(http_perform(&rq, &rs) == SBX_OK && rs.status == 301);
	canned_stop(&c);
	CHECK(connections_to(lfd) == 0);
	close(lfd);
	buf_free(&out);
}

static void test_url_parse_and_loopback(void)
{
	struct http_url u;

	CHECK(http_url_parse("gopher://127.0.0.1:36379/_SET%20x#", &u) == 0 && !strcmp(u.scheme, "gopher") &&
	      u.fragment && !u.query && u.port == 36379 && !strcmp(u.host, "127.0.0.1"));
	CHECK(http_url_parse("HTTP://u:p@Example.COM/x?y=1", &u) == 0 && !strcmp(u.scheme, "http") && u.userinfo &&
	      u.query && !u.fragment);
	CHECK(http_url_parse("http://10.0.0.5:40123/proxy/44772", &u) == 0 && !u.userinfo && !u.query && !u.fragment &&
	      !strcmp(u.url, "http://10.0.0.5:40123/proxy/44772"));
	CHECK(http_url_parse("http://h:99999/", &u) == -1); /* no such port */
	CHECK(http_url_parse("not a url", &u) == -1);
	CHECK(http_host_loopback("localhost") && http_host_loopback("LocalHost") && http_host_loopback("127.0.0.1") &&
	      http_host_loopback("127.9.8.7") && http_host_loopback("[::1]") && http_host_loopback("[::ffff:127.0.0.1]"));
	CHECK(!http_host_loopback("localhost.evil.example") && !http_host_loopback("127.0.0.1.nip.io") &&
	      !http_host_loopback("localhostx") && !http_host_loopback("128.0.0.1") && !http_host_loopback("[::2]") &&
	      !http_host_loopback("10.0.0.1"));
	/* curl's normalisation: what it connects to is what is checked */
	CHECK(http_url_parse("http://127.1:8/", &u) == 0 && http_host_loopback(u.host));
	CHECK(http_url_parse("http://0x7f000001/", &u) == 0 && http_host_loopback(u.host));
	CHECK(http_url_parse("http://localhost.evil.example/", &u) == 0 && !http_host_loopback(u.host));
	CHECK(http_transfer_ms(5000, 0) == 5000 && http_transfer_ms(5000, HTTP_MIN_RATE * 10LL) == 15000);
}

/* The endpoint an OpenSandbox server answers: the configured scheme only,
 * no credentials, query or fragment; nothing connects to it. */
static void test_osapi_endpoint(void)
{
	static const char *const refused[] = { "gopher://127.0.0.1:%d/_SET%%20pwned#", "file:///etc/shadow#%d",
		"dict://127.0.0.1:%d/info", "http://user@127.0.0.1:%d/x", "http://u:s3cret@127.0.0.1:%d/x",
		"https://127.0.0.1:%d/x", "127.0.0.1:%d/x#", "127.0.0.1:%d/x?y=1", "evil@127.0.0.1:%d" };
	char bodies[12][512], ep[256], err[OSAPI_ERR_LEN], base[128];
	int port = 0, lfd = tcp_listener_nb(&port), sport = 0, sfd;
	struct canned c = { .n_replies = 0 };
	struct osapi_server srv = { .timeout_ms = 3000, .scope = "test" };
	struct osapi_execd ex;
	size_t n = sizeof(refused) / sizeof(refused[0]);

	CHECK(lfd >= 0);
	sfd = tcp_listener_nb(&sport);
	CHECK(sfd >= 0 && fcntl(sfd, F_SETFL, 0) == 0); /* blocking: the canned server accepts */
	for (size_t i = 0; i < n; i++) {
		snprintf(ep, sizeof(ep), refused[i], port);
		c.replies[i] = reply(bodies[i], sizeof(bodies[i]), 200, "");
		snprintf(bodies[i], sizeof(bodies[i]), "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
			"Content-Length: %zu\r\n\r\n{\"endpoint\":\"%s\"}", strlen(ep) + 15, ep);
	}
	for (size_t i = n; i < n + 2; i++) {
		snprintf(ep, sizeof(ep), i == n ? "127.0.0.1:%d/a/44772/" : "HTTP://127.0.0.1:%d/b", port);
		snprintf(bodies[i], sizeof(bodies[i]), "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
			"Content-Length: %zu\r\n\r\n{\"endpoint\":\"%s\"}", strlen(ep) + 15, ep);
		c.replies[i] = bodies[i];
	}
	c.n_replies = (int)n + 2;
	canned_start(&c, sfd);
	snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1", sport);
	srv.base = base;
	for (size_t i = 0; i < n; i++) {
		enum sbx_err e = osapi_endpoint(&srv, "sb1", 44772, false, "http", &ex, err, sizeof(err));
		CHECK(e == SBX_ERR_PERM && strstr(err, "refused the execd endpoint") && !strstr(err, "s3cret"));
		if (e != SBX_ERR_PERM)
			fprintf(stderr, "  endpoint %zu: %s (%s)\n", i, sbx_err_name(e), err);
	}
	CHECK(osapi_endpoint(&srv, "sb1", 44772, false, "http", &ex, err, sizeof(err)) == SBX_OK);
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d/a/44772", port);
	CHECK(!strcmp(ex.base, ep));
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d/b", port);
	CHECK(osapi_endpoint(&srv, "sb1", 44772, false, "http", &ex, err, sizeof(err)) == SBX_OK && !strcmp(ex.base, ep));
	canned_stop(&c);
	CHECK(connections_to(lfd) == 0);
	close(lfd);
}

/* ---- deadlines and cancellation (common/token.h) -------------------------------------------- */

struct canceller {
	struct token *t;
	long after_ms;
};

static void *cancel_later(void *arg)
{
	struct canceller *k = arg;

	usleep((useconds_t)k->after_ms * 1000);
	token_cancel(k->t);
	return NULL;
}

static void test_token(void)
{
	struct token t, *prev;
	char r1[256], r2[256], r3[256];
	struct canned c = { .n_replies = 3 };
	struct canceller k = { &t, 100 };
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct buf out = BUF_INIT(1024);
	pthread_t th;
	uint64_t t0;
	enum sbx_err e;
	int ufd;

	/* a silent server: a cancel ends the wait at once (SBX_ERR_INTR) */
	snprintf(r1, sizeof(r1), "DELAY:1500\n%s", reply(r3, sizeof(r3), 200, "{}"));
	c.replies[0] = r1;
	snprintf(r2, sizeof(r2), "DELAY:1500\n%s", reply(r3, sizeof(r3), 200, "{}"));
	c.replies[1] = r2;
	c.replies[2] = reply(r3, sizeof(r3), 200, "{}");
	canned_start(&c, canned_unix_listener(sock_path));
	rq.url = "http://docker/slow";
	rq.unix_socket = sock_path;
	rq.out = &out;
	token_init(&t, 0);
	rq.token = &t;
	t0 = util_now_ms();
	CHECK(pthread_create(&th, NULL, cancel_later, &k) == 0);
	e = http_perform(&rq, &rs);
	pthread_join(th, NULL);
	CHECK(e == SBX_ERR_INTR && rs.cancelled && !strcmp(rs.error, "cancelled"));
	CHECK(util_now_ms() - t0 < 1500); /* before the server answered */
	token_release(&t);
	/* the deadline bounds the whole transfer (no timeout of its own), and
	 * is the thread's current token's */
	token_init(&t, 300);
	rq.token = NULL;
	prev = token_enter(&t);
	buf_reset(&out);
	e = http_perform(&rq, &rs);
	CHECK(e == SBX_ERR_TIMEOUT && strstr(rs.error, "deadline"));
	/* past its deadline: nothing is sent at all */
	usleep(20000);
	ufd = canned_unix_listener(sock_path2);
	CHECK(ufd >= 0 && fcntl(ufd, F_SETFL, O_NONBLOCK) == 0);
	rq.unix_socket = sock_path2;
	CHECK(http_perform(&rq, &rs) == SBX_ERR_TIMEOUT && connections_to(ufd) == 0);
	rq.unix_socket = sock_path;
	close(ufd);
	token_leave(prev);
	token_release(&t);
	/* no token on this thread any more: a plain request */
	buf_reset(&out);
	CHECK(http_perform(&rq, &rs) == SBX_OK && rs.status == 200);
	canned_stop(&c);
	/* cancelled before: no connection */
	ufd = canned_unix_listener(sock_path);
	CHECK(ufd >= 0 && fcntl(ufd, F_SETFL, O_NONBLOCK) == 0);
	token_init(&t, 0);
	token_cancel(&t);
	rq.token = &t;
	CHECK(http_perform(&rq, &rs) == SBX_ERR_INTR && connections_to(ufd) == 0);
	token_release(&t);
	close(ufd);
	buf_free(&out);
}

/* token_cond_wait: gives up at the deadline, and soon after a cancel. */
static pthread_mutex_t tw_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tw_cond = PTHREAD_COND_INITIALIZER;

static void test_token_cond_wait(void)
{
	struct token t;
	struct canceller k = { &t, 100 };
	pthread_t th;
	enum sbx_err e = SBX_OK;

	token_init(&t, 150);
	pthread_mutex_lock(&tw_lock);
	while (!e)
		e = token_cond_wait(&t, &tw_cond, &tw_lock);
	pthread_mutex_unlock(&tw_lock);
	CHECK(e == SBX_ERR_TIMEOUT && token_left_ms(&t) == 0);
	token_release(&t);
	token_init(&t, 0);
	CHECK(token_left_ms(&t) == -1 && token_bound_ms(&t, 0) == 0 && token_bound_ms(&t, 7) == 7);
	CHECK(pthread_create(&th, NULL, cancel_later, &k) == 0);
	e = SBX_OK;
	pthread_mutex_lock(&tw_lock);
	while (!e)
		e = token_cond_wait(&t, &tw_cond, &tw_lock);
	pthread_mutex_unlock(&tw_lock);
	pthread_join(th, NULL);
	CHECK(e == SBX_ERR_INTR && token_check(&t) == SBX_ERR_INTR);
	token_release(&t);
}

/* ---- a server inside a private network namespace ------------------------------------- */

struct ns_server {
	int nsfd, listen_fd, port;
	pthread_barrier_t ready;
};

static void *ns_thread(void *arg)
{
	struct ns_server *s = arg;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	struct ifreq ifr = { .ifr_name = "lo" };
	int ctl;

	s->nsfd = s->listen_fd = -1;
	if (unshare(CLONE_NEWNET))
		goto out;
	ctl = socket(AF_INET, SOCK_DGRAM, 0);
	if (ctl >= 0 && !ioctl(ctl, SIOCGIFFLAGS, &ifr)) {
		ifr.ifr_flags |= IFF_UP;
		ioctl(ctl, SIOCSIFFLAGS, &ifr);
	}
	if (ctl >= 0)
		close(ctl);
	s->nsfd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->listen_fd < 0 || bind(s->listen_fd, (struct sockaddr *)&a, sizeof(a)) || listen(s->listen_fd, 4) ||
	    getsockname(s->listen_fd, (struct sockaddr *)&a, &alen)) {
		if (s->listen_fd >= 0)
			close(s->listen_fd);
		s->listen_fd = -1;
	} else {
		s->port = ntohs(a.sin_port);
	}
out:
	pthread_barrier_wait(&s->ready);
	return NULL;
}

static void test_netns(void)
{
	struct ns_server s;
	pthread_t t;
	char r1[256], url[64];
	struct canned c = { .replies = { reply(r1, sizeof(r1), 200, "{\"in\":\"container\"}") }, .n_replies = 1 };
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct buf out = BUF_INIT(1024);

	if (geteuid() != 0) {
		fprintf(stderr, "skip: network namespace test needs root\n");
		return;
	}
	pthread_barrier_init(&s.ready, NULL, 2);
	pthread_create(&t, NULL, ns_thread, &s);
	pthread_barrier_wait(&s.ready);
	pthread_join(t, NULL);
	pthread_barrier_destroy(&s.ready);
	if (s.nsfd < 0 || s.listen_fd < 0) {
		fprintf(stderr, "skip: cannot make a network namespace: %s\n", strerror(errno));
		return;
	}
	canned_start(&c, s.listen_fd);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/sandbox", s.port);
	rq.url = url;
	rq.out = &out;
	rq.connect_timeout_ms = 1000;
	/* on the host's loopback nobody answers on that port (it exists only in the namespace) */
	CHECK(http_perform(&rq, &rs) == SBX_ERR_IO);
	rq.netns_fd = s.nsfd;
	buf_reset(&out);
	CHECK(http_perform(&rq, &rs) == SBX_OK && rs.status == 200 && strstr(buf_str(&out), "container"));
	canned_stop(&c);
	/* a raw socket from netns_socket lives in the namespace too */
	int fd = netns_socket(s.nsfd, AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	CHECK(netns_socket(-1, AF_INET, SOCK_STREAM, 0) == -1 && errno == EBADF);
	CHECK(netns_open_pid(getpid(), 1) == -1 && errno == ESRCH); /* wrong start time */
	close(s.nsfd);
	buf_free(&out);
}

/* ---- udir ------------------------------------------------------------------------------- */

static void test_udir(void)
{
	char dir[] = "/tmp/sbxfs-udir-XXXXXX";
	char path[128], target[128];
	struct buf b = BUF_INIT(16);
	int dfd, fd;

	CHECK(mkdtemp(dir) != NULL);
	snprintf(target, sizeof(target), "%s/outside", dir);
	CHECK(mkdir(target, 0700) == 0);
	snprintf(path, sizeof(path), "%s/run", dir);
	CHECK(mkdir(path, 0700) == 0);
	dfd = udir_open(path);
	CHECK(dfd >= 0);
	/* planted: a symlink to a file outside, a FIFO, a symlinked directory */
	snprintf(path, sizeof(path), "%s/outside/secret", dir);
	close(open(path, O_WRONLY | O_CREAT, 0600));
	CHECK(symlinkat(path, dfd, "result") == 0);
	CHECK(mkfifoat(dfd, "stdout", 0600) == 0);
	CHECK(symlinkat(target, dfd, "job") == 0);
	CHECK(udir_read(dfd, "result", &b) == -1 && errno == ELOOP);
	CHECK(udir_open_file(dfd, "stdout", NULL) == -1 && errno == EINVAL); /* never blocks on the FIFO */
	CHECK(udir_openat(dfd, "job") == -1);
	CHECK(udir_create(dfd, "result", 0600, 0, 0) == -1 && errno == EEXIST); /* never writes through it */
	CHECK(udir_write(dfd, "cmd", "echo", 4, 0644, getuid(), getgid()) == 0);
	CHECK(udir_read(dfd, "cmd", &b) == 0 && b.len == 4 && !memcmp(b.ptr, "echo", 4));
	CHECK(udir_write(dfd, "big", "0123456789abcdefXYZ", 19, 0644, getuid(), getgid()) == 0);
	CHECK(udir_read(dfd, "big", &b) == -1 && errno == E2BIG);
	fd = udir_mkdir(dfd, "sub", 0700, getuid(), getgid());
	CHECK(fd >= 0);
	CHECK(symlinkat(target, fd, "escape") == 0 && udir_write(fd, "f", "x", 1, 0600, getuid(), getgid()) == 0);
	close(fd);
	/* a tree given to another uid: never through its symlinks */
	if (geteuid() == 0) {
		struct stat st;
		snprintf(path, sizeof(path), "%s/outside/secret", dir);
		CHECK(udir_chown_tree(dfd, 0, 4242, 4243) == 0);
		CHECK(fstatat(dfd, "cmd", &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == 4242 && st.st_gid == 4243);
		CHECK(fstatat(dfd, "sub/f", &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == 4242);
		CHECK(fstatat(dfd, "sub/escape", &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == 4242);
		CHECK(fstat(dfd, &st) == 0 && st.st_uid == 4242);
		CHECK(stat(path, &st) == 0 && st.st_uid == 0 && stat(target, &st) == 0 && st.st_uid == 0);
	}
	CHECK(udir_remove(dfd, "sub") == 0 && udir_remove(dfd, "job") == 0 && udir_remove(dfd, "gone") == 0);
	/* what the symlinks pointed at is untouched */
	snprintf(path, sizeof(path), "%s/outside/secret", dir);
	CHECK(access(path, F_OK) == 0 && access(target, F_OK) == 0);
	close(dfd);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	CHECK(system(path) == 0);
	buf_free(&b);
}

/* ---- the Docker Engine API client ---------------------------------------------------- */

static const char *VERSION_JSON = "{\"Version\":\"20.10.24\",\"ApiVersion\":\"1.41\",\"MinAPIVersion\":\"1.12\"}";

static const char *INSPECT_JSON =
	"{\"Id\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\",\"Name\":\"/sbxfs-dc977b840cb8638e\","
	"\"Created\":\"2024-05-01T12:34:56.123456789Z\","
	"\"State\":{\"Status\":\"running\",\"Running\":true,\"Pid\":4242,\"ExitCode\":0},"
	"\"Config\":{\"Image\":\"busybox:1\",\"Labels\":{\"org.sbxfs.state_id\":\"abcd1234\",\"other\":\"x\"}}}";

struct listed {
	int n;
	char names[4][256];
	char state_ids[4][16];
};

static void on_listed(const struct docker_container *c, void *arg)
{
	struct listed *l = arg;
	const char *sid = docker_label(c, "org.sbxfs.state_id");

	if (l->n < 4) {
		snprintf(l->names[l->n], sizeof(l->names[0]), "%s", c->name);
		snprintf(l->state_ids[l->n], sizeof(l->state_ids[0]), "%s", sid ? sid : "");
		l->n++;
	}
}

static void test_docker_api(void)
{
	char r[9][1024], id[DOCKER_ID_LEN + 1], ver[16], err[DOCKER_ERR_LEN];
	struct canned c = { .n_replies = 8 };
	struct docker *d = docker_new(sock_path, 2000);
	struct docker_container ct;
	struct docker_mount m[] = { { "/state/ws", "/mnt/user-data/workspace", false } };
	struct docker_kv labels[] = { { "org.sbxfs.state_id", "abcd1234" } };
	const char *ep[] = { "/run/sbxfs/sbxfs-box", "init", NULL };
	struct docker_create_spec spec = { .name = "sbxfs-dc977b840cb8638e", .image = "busybox:1", .user = "200000:200000",
		.entrypoint = ep, .labels = labels, .n_labels = 1, .mounts = m, .n_mounts = 1, .network_mode = "none",
		.memory = 1 << 30, .pids_limit = 512, .tmp_size = 64 << 20 };
	struct listed l = { 0 };
	const char *filters[] = { "org.sbxfs.state_id=abcd1234", NULL };

	c.replies[0] = reply(r[0], sizeof(r[0]), 200, VERSION_JSON);
	c.replies[1] = reply(r[1], sizeof(r[1]), 201, "{\"Id\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\",\"Warnings\":[]}");
	c.replies[2] = reply(r[2], sizeof(r[2]), 200, INSPECT_JSON);
	c.replies[3] = reply(r[3], sizeof(r[3]), 404, "{\"message\":\"No such image: nope:1\"}");
	c.replies[4] = reply(r[4], sizeof(r[4]), 200,
		"[{\"Id\":\"aa\",\"Names\":[\"/sbxfs-1\"],\"State\":\"running\",\"Labels\":{\"org.sbxfs.state_id\":\"abcd1234\"}},"
		"{\"Id\":\"bb\",\"Names\":[\"/sbxfs-2\"],\"State\":\"exited\",\"Labels\":null}]");
	c.replies[5] = reply(r[5], sizeof(r[5]), 200, "{\"Id\":\"x\",\"Name\":\"/n\",\"Config\":{}}");
	c.replies[6] = reply(r[6], sizeof(r[6]), 304, "");
	c.replies[7] = reply(r[7], sizeof(r[7]), 404, "{\"message\":\"No such container: gone\"}");
	canned_start(&c, canned_unix_listener(sock_path));
	CHECK(docker_negotiate(d, ver, sizeof(ver), err, sizeof(err)) == SBX_OK && !strcmp(ver, "1.41"));
	CHECK(docker_create(d, &spec, id, err, sizeof(err)) == SBX_OK && !strncmp(id, "0123456789abcdef", 16));
	CHECK(docker_inspect(d, "sbxfs-dc977b840cb8638e", &ct, err, sizeof(err)) == SBX_OK && ct.running &&
	      ct.pid == 4242 && !strcmp(ct.name, "sbxfs-dc977b840cb8638e") && ct.created_ns == 1714566896123456789LL &&
	      !strcmp(docker_label(&ct, "org.sbxfs.state_id"), "abcd1234") && !docker_label(&ct, "nope"));
	docker_container_clear(&ct);
	spec.image = "nope:1";
	CHECK(docker_create(d, &spec, id, err, sizeof(err)) == SBX_ERR_GONE && strstr(err, "No such image: nope:1"));
	CHECK(docker_list(d, filters, on_listed, &l, err, sizeof(err)) == SBX_OK && l.n == 2 &&
	      !strcmp(l.names[0], "sbxfs-1") && !strcmp(l.state_ids[0], "abcd1234") && !l.state_ids[1][0]);
	/* the checked decoder names what is missing */
	CHECK(docker_inspect(d, "n", &ct, err, sizeof(err)) == SBX_ERR_IO && strstr(err, "State"));
	CHECK(docker_stop(d, "x", 5, err, sizeof(err)) == SBX_OK);     /* 304: not running */
	CHECK(docker_remove(d, "gone", err, sizeof(err)) == SBX_OK);  /* 404: already gone */
	CHECK(c.n_requests == 8);
	CHECK(c.n_requests == 8 && !strncmp(c.requests[6], "POST /v1.41/containers/x/stop?t=5 ", 34) &&
	      !strncmp(c.requests[7], "DELETE /v1.41/containers/gone?force=1&v=1 ", 42));
	CHECK(c.n_requests >= 2 && !strncmp(c.requests[0], "GET /version ", 13) &&
	      !strncmp(c.requests[1], "POST /v1.41/containers/create?name=sbxfs-dc977b840cb8638e HTTP/1.1",
			   strlen("POST /v1.41/containers/create?name=sbxfs-dc977b840cb8638e HTTP/1.1")));
	if (c.n_requests >= 2) {
		const char *b = strstr(c.requests[1], "\r\n\r\n");
		CHECK(b && strstr(b, "\"CapDrop\":[\"ALL\"]") && strstr(b, "\"SecurityOpt\":[\"no-new-privileges\"]") &&
		      strstr(b, "\"NetworkMode\":\"none\"") && strstr(b, "\"Memory\":1073741824") &&
		      strstr(b, "\"MemorySwap\":1073741824") && strstr(b, "\"PidsLimit\":512") &&
		      strstr(b, "size=67108864") && strstr(b, "\"User\":\"200000:200000\"") &&
		      strstr(b, "\"Target\":\"/mnt/user-data/workspace\"") && !strstr(b, "PortBindings"));
	}
	CHECK(c.n_requests >= 5 && strstr(c.requests[4], "filters=%7B%22label%22%3A%5B%22org.sbxfs.state_id%3Dabcd1234"));
	canned_stop(&c);

	/* dockerd gone: one line naming it; the version is negotiated again */
	unlink(sock_path);
	CHECK(docker_inspect(d, "x", &ct, err, sizeof(err)) == SBX_ERR_IO && strstr(err, "dockerd is not reachable at unix://"));
	docker_free(d);

	/* an answer of a status no call expects, 3xx included, is an error and
	 * fills nothing (found by tests/fuzz/json.c: docker_decode_error took
	 * a 3xx for success, and docker_inspect returned SBX_OK with an empty
	 * container) */
	d = docker_new(sock_path, 2000);
	{
		struct canned moved = { .n_replies = 3 };
		char vr[256], mr[2][256];
		moved.replies[0] = reply(vr, sizeof(vr), 200, VERSION_JSON);
		moved.replies[1] = reply(mr[0], sizeof(mr[0]), 301, "{\"message\":\"moved\"}");
		moved.replies[2] = reply(mr[1], sizeof(mr[1]), 302, "");
		canned_start(&moved, canned_unix_listener(sock_path));
		CHECK(docker_inspect(d, "x", &ct, err, sizeof(err)) == SBX_ERR_IO && strstr(err, "301") &&
		      strstr(err, "moved"));
		docker_container_clear(&ct);
		CHECK(docker_list(d, filters, on_listed, &l, err, sizeof(err)) == SBX_ERR_IO && strstr(err, "302"));
		canned_stop(&moved);
	}
	docker_free(d);

	/* an API older than 1.41 is refused */
	d = docker_new(sock_path, 2000);
	struct canned old = { .replies = { reply(r[8], sizeof(r[8]), 200, "{\"ApiVersion\":\"1.40\"}") }, .n_replies = 1 };
	canned_start(&old, canned_unix_listener(sock_path));
	CHECK(docker_negotiate(d, ver, sizeof(ver), err, sizeof(err)) == SBX_ERR_NOTSUP && strstr(err, "1.40"));
	canned_stop(&old);
	docker_free(d);

	/* Podman's compat API: found at /version; the seccomp profile goes by
	 * its file (Podman opens "seccomp=" as a path), dockerd's inline */
	CHECK(!docker_decode_podman(VERSION_JSON, strlen(VERSION_JSON)));
	CHECK(!docker_decode_podman("[]", 2) && !docker_decode_podman("{\"Components\":[{\"Name\":7}]}", 27));
	{
		static const char podman_version[] = "{\"Components\":[{\"Name\":\"Conmon\"},{\"Name\":\"Podman Engine\","
						     "\"Version\":\"4.3.1\"}],\"ApiVersion\":\"1.41\",\"Version\":\"4.3.1\"}";
		char pr[2][512];
		struct canned pod = { .n_replies = 2 };

		d = docker_new(sock_path, 2000);
		pod.replies[0] = reply(pr[0], sizeof(pr[0]), 200, podman_version);
		pod.replies[1] = reply(pr[1], sizeof(pr[1]), 201, "{\"Id\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}");
		canned_start(&pod, canned_unix_listener(sock_path));
		spec.image = "busybox:1";
		spec.seccomp_profile = "{\"defaultAction\":\"SCMP_ACT_ERRNO\"}";
		spec.seccomp_profile_file = "/state/docker-seccomp.json";
		CHECK(docker_create(d, &spec, id, err, sizeof(err)) == SBX_OK && docker_is_podman(d));
		CHECK(pod.n_requests == 2 && strstr(pod.requests[1], "\"seccomp=/state/docker-seccomp.json\"") &&
		      !strstr(pod.requests[1], "SCMP_ACT_ERRNO"));
		canned_stop(&pod);
		docker_free(d);
	}
}

/* dockerd's times (RFC 3339, nanoseconds): what proves a create's container ours */
static void test_docker_time(void)
{
	long long ns = 0;

	CHECK(docker_time_ns("2024-05-01T12:34:56.123456789Z", &ns) == 0 && ns == 1714566896123456789LL);
	CHECK(docker_time_ns("2024-05-01T12:34:56Z", &ns) == 0 && ns == 1714566896000000000LL);
	CHECK(docker_time_ns("2024-05-01T12:34:56.5Z", &ns) == 0 && ns == 1714566896500000000LL);
	CHECK(docker_time_ns("2024-05-01T14:34:56.123456789+02:00", &ns) == 0 && ns == 1714566896123456789LL);
	CHECK(docker_time_ns("2024-05-01T12:34:56.1234567891Z", &ns) == 0 && ns == 1714566896123456789LL);
	CHECK(docker_time_ns("2024-05-01 12:34:56Z", &ns) == -1);
	CHECK(docker_time_ns("2024-05-01T12:34:56", &ns) == -1);
	CHECK(docker_time_ns("2024-13-01T12:34:56Z", &ns) == -1);
	CHECK(docker_time_ns("2024-05-01T12:34:56.Z", &ns) == -1);
	CHECK(docker_time_ns("2024-05-01T12:34:56Zjunk", &ns) == -1);
	CHECK(docker_time_ns("", &ns) == -1);
}

struct streams {
	char out[64], err[64];
	size_t nout, nerr;
};

static bool on_stream(int stream, const char *data, size_t len, void *arg)
{
	struct streams *s = arg;
	char *dst = stream == 1 ? s->out : s->err;
	size_t *n = stream == 1 ? &s->nout : &s->nerr;

	if (*n + len < 64) {
		memcpy(dst + *n, data, len);
		*n += len;
	}
	return true;
}

static void test_demux(void)
{
	static const unsigned char frames[] = { 1, 0, 0, 0, 0, 0, 0, 3, 'o', 'n', 'e', 2, 0, 0, 0, 0, 0, 0, 2, 'e', '1',
		1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 't', 'w', 'o', '\n' };
	char r[512];
	struct streams s = { 0 };

	/* every chunking gives the same streams */
	for (size_t chunk = 1; chunk <= sizeof(frames); chunk++) {
		struct docker_demux dm = DOCKER_DEMUX_INIT;
		memset(&s, 0, sizeof(s));
		for (size_t i = 0; i < sizeof(frames); i += chunk)
			docker_demux_feed(&dm, (const char *)frames + i, i + chunk > sizeof(frames) ? sizeof(frames) - i : chunk,
				on_stream, &s);
		if (s.nout != 7 || memcmp(s.out, "onetwo\n", 7) || s.nerr != 2 || memcmp(s.err, "e1", 2)) {
			CHECK(!"demux chunking");
			break;
		}
	}
	CHECK(s.nout == 7);

	/* frames of other streams (stdin 0, Docker's systemerr 3, any other
	 * byte) are no output: skipped, and the frames after them still read
	 * (found by tests/fuzz/demux.c: they went to fn as stream 3, 0, 7) */
	{
		static const unsigned char other[] = { 3, 0, 0, 0, 0, 0, 0, 3, 's', 'y', 's', 0, 0, 0, 0, 0, 0, 0, 2, 'i', 'n',
			7, 0, 0, 0, 0, 0, 0, 1, '?', 2, 0, 0, 0, 0, 0, 0, 2, 'e', '2', 1, 0, 0, 0, 0, 0, 0, 2, 'o', 'k' };
		struct docker_demux dm = DOCKER_DEMUX_INIT;

		memset(&s, 0, sizeof(s));
		CHECK(docker_demux_feed(&dm, (const char *)other, sizeof(other), on_stream, &s));
		CHECK(s.nout == 2 && !memcmp(s.out, "ok", 2) && s.nerr == 2 && !memcmp(s.err, "e2", 2));
	}

	/* an attached exec start: Docker's close-delimited raw stream of frames */
	struct docker *d = docker_new(sock_path, 2000);
	const char *head = "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\n";
	size_t n = strlen(head);
	char vr[256], err[DOCKER_ERR_LEN];
	memcpy(r, head, n);
	memcpy(r + n, frames, sizeof(frames));
	struct canned c = { .replies = { reply(vr, sizeof(vr), 200, VERSION_JSON), r }, .lens = { 0, n + sizeof(frames) },
		.n_replies = 2 };
	memset(&s, 0, sizeof(s));
	canned_start(&c, canned_unix_listener(sock_path));
	CHECK(docker_exec_start(d, "e1", on_stream, &s, 2000, err, sizeof(err)) == SBX_OK && s.nout == 7 &&
	      !memcmp(s.out, "onetwo\n", 7) && s.nerr == 2);
	CHECK(c.n_requests == 2 && strstr(c.requests[1], "POST /v1.41/exec/e1/start") &&
	      strstr(c.requests[1], "\"Detach\":false"));
	canned_stop(&c);
	docker_free(d);
}

/* ---- the AIO API client ----------------------------------------------------------------- */

static void test_aio_envelope(void)
{
	static const struct {
		long status;
		const char *body;
		enum sbx_err want;
		const char *err_has;
	} cases[] = {
		{ 200, "{\"success\":true,\"message\":\"ok\",\"data\":{\"x\":1}}", SBX_OK, "" },
		{ 200, "{\"success\":false,\"message\":\"Command not found: c1\",\"data\":null}", SBX_ERR_GONE, "Command not found" },
		{ 200, "{\"success\":false,\"message\":\"Session s is busy\"}", SBX_ERR_IO, "busy" },
		{ 404, "{\"detail\":\"Not Found\"}", SBX_ERR_NOTSUP, "Not Found" },
		{ 404, "{\"success\":false,\"message\":\"Bash session not found: s\",\"data\":null}", SBX_ERR_GONE, "session not found" },
		{ 422, "{\"detail\":[{\"type\":\"missing\",\"loc\":[\"body\",\"command\"],\"msg\":\"Field required\"}]}", SBX_ERR_INVAL, "command: Field required" },
		{ 401, "{\"detail\":\"Invalid or missing API key\"}", SBX_ERR_ACCESS, "API key" },
		{ 500, "{\"success\":false,\"message\":\"boom\"}", SBX_ERR_IO, "boom" },
		{ 200, "{\"success\":tr", SBX_ERR_IO, "not JSON" },
		/* a 3xx is no success, whatever its body (found by tests/fuzz/json.c) */
		{ 301, "{\"detail\":\"Moved Permanently\"}", SBX_ERR_IO, "301" },
		{ 304, "{\"success\":true,\"data\":{}}", SBX_ERR_IO, "304" },
		{ 404, "", SBX_ERR_NOTSUP, "nothing" },
	};
	char err[AIO_ERR_LEN];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *root = NULL, *data = NULL;
		enum sbx_err e = aio_envelope(cases[i].status, cases[i].body, strlen(cases[i].body), &root, &data, err,
			sizeof(err));
		if (e != cases[i].want || (e && !strstr(err, cases[i].err_has)) || (!e && !json_is_object(data))) {
			fprintf(stderr, "aio envelope case %zu: got %s, err '%s'\n", i, sbx_err_name(e), e ? err : "");
			CHECK(!"aio envelope");
		}
		json_decref(root);
	}
	CHECK(aio_status_parse("completed") == AIO_COMPLETED && aio_status_parse("hard_timeout") == AIO_TIMED_OUT &&
	      aio_status_parse("terminated") == AIO_KILLED && aio_status_parse("weird") == AIO_UNKNOWN &&
	      aio_status_parse(NULL) == AIO_UNKNOWN);
}

static int tcp_listener(int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 4) ||
	    getsockname(fd, (struct sockaddr *)&a, &alen))
		return -1;
	*port = ntohs(a.sin_port);
	return fd;
}

static void test_aio_bash(void)
{
	char r[4][1024], url[64], err[AIO_ERR_LEN];
	struct canned c = { .n_replies = 3 };
	struct aio_env env[] = { { "JOB_VAR", "v 1" } };
	struct aio_bash_request rq = { .command = "( . /run/sbxfs/jobs/a/cmd )", .session_id = "s1",
		.exec_dir = "/mnt/user-data/workspace", .env = env, .n_env = 1, .async = true, .hard_timeout = 600 };
	struct aio_target t = { .base_url = url, .netns_fd = -1, .api_key = "sekrit", .timeout_ms = 2000 };
	struct aio_bash_result res;
	int port, l = tcp_listener(&port);

	CHECK(l >= 0);
	if (l < 0)
		return;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	c.replies[0] = reply(r[0], sizeof(r[0]), 200,
		"{\"success\":true,\"message\":\"ok\",\"data\":{\"session_id\":\"s1\",\"command_id\":\"c9\","
		"\"command\":\"x\",\"status\":\"running\",\"stdout\":\"\",\"stderr\":\"\",\"exit_code\":null,"
		"\"offset\":0,\"stderr_offset\":0}}");
	c.replies[1] = reply(r[1], sizeof(r[1]), 200,
		"{\"success\":true,\"data\":{\"session_id\":\"s1\",\"stdout\":\"out\\n\",\"stderr\":\"e\","
		"\"offset\":4,\"stderr_offset\":1,\"command\":{\"command_id\":\"c9\",\"status\":\"completed\","
		"\"exit_code\":3}}}");
	c.replies[2] = reply(r[2], sizeof(r[2]), 200,
		"{\"success\":true,\"data\":{\"session_id\":\"s1\",\"stdout\":\"\",\"offset\":\"4\","
		"\"stderr_offset\":1,\"command\":{\"status\":\"completed\"}}}");
	canned_start(&c, l);
	CHECK(aio_bash_exec(&t, &rq, &res, err, sizeof(err)) == SBX_OK && res.status == AIO_RUNNING &&
	      !strcmp(res.command_id, "c9") && !res.has_exit);
	aio_bash_result_clear(&res);
	CHECK(aio_bash_output(&t, "s1", "c9", 0, 0, 5, &res, err, sizeof(err)) == SBX_OK && res.status == AIO_COMPLETED &&
	      res.has_exit && res.exit_code == 3 && res.out_len == 4 && !memcmp(res.out, "out\n", 4) && res.err_len == 1 &&
	      res.offset == 4 && res.stderr_offset == 1);
	aio_bash_result_clear(&res);
	/* a mistyped offset is refused, naming the fields */
	CHECK(aio_bash_output(&t, "s1", "c9", 4, 1, 5, &res, err, sizeof(err)) == SBX_ERR_IO && strstr(err, "offset"));
	CHECK(c.n_requests == 3);
	if (c.n_requests >= 2) {
		const char *b0 = strstr(c.requests[0], "\r\n\r\n");
		CHECK(!strncmp(c.requests[0], "POST /v1/bash/exec ", 19) && strstr(c.requests[0], "X-AIO-API-Key: sekrit") &&
		      strstr(c.requests[0], "Accept: application/json") && !strstr(c.requests[0], "event-stream"));
		CHECK(b0 && strstr(b0, "\"async_mode\":true") && strstr(b0, "\"env\":{\"JOB_VAR\":\"v 1\"}") &&
		      strstr(b0, "\"session_id\":\"s1\"") && strstr(b0, "\"hard_timeout\":600"));
		CHECK(!strncmp(c.requests[1], "POST /v1/bash/output ", 21) && strstr(c.requests[1], "\"wait\":true"));
	}
	canned_stop(&c);
}

/* An upload answered 307 (an http:// base_url behind a proxy that redirects
 * to https://, say) did not happen: an error, not success (found by
 * tests/fuzz/json.c: aio_envelope took a 3xx with a JSON body for success). */
static void test_aio_upload_redirect(void)
{
	char r[256], url[64], err[AIO_ERR_LEN], path[] = "/tmp/sbxfs-http-test-XXXXXX";
	struct canned c = { .n_replies = 1 };
	struct aio_target t = { .base_url = url, .netns_fd = -1, .timeout_ms = 2000 };
	int port, l = tcp_listener(&port), fd = mkstemp(path);

	CHECK(l >= 0 && fd >= 0 && write(fd, "data\n", 5) == 5);
	if (l < 0 || fd < 0)
		return;
	unlink(path);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	c.replies[0] = reply(r, sizeof(r), 307, "{\"detail\":\"use https\"}");
	canned_start(&c, l);
	CHECK(aio_file_upload(&t, "/w/a", fd, 5, err, sizeof(err)) == SBX_ERR_IO && strstr(err, "307"));
	canned_stop(&c);
	close(fd);
}

/* A download answered with a status that carries no content (a 3xx curl
 * does not follow, a 201 or 204) is an error, never an empty file (found
 * writing tests/fuzz/json.c's contract check: aio_decode_download_error
 * gave SBX_OK for them, and a read of the file saw EOF at once). */
static void test_aio_download_status(void)
{
	char r[2][256], url[64], err[AIO_ERR_LEN], path[] = "/tmp/sbxfs-http-test-XXXXXX";
	struct canned c = { .n_replies = 2 };
	struct aio_target t = { .base_url = url, .netns_fd = -1, .timeout_ms = 2000 };
	int port, l = tcp_listener(&port), fd = mkstemp(path);
	size_t got = 1;

	CHECK(l >= 0 && fd >= 0);
	if (l < 0 || fd < 0)
		return;
	unlink(path);
	CHECK(aio_decode_download_error(304, NULL, 0, "/w/a", err, sizeof(err)) == SBX_ERR_IO && strstr(err, "304"));
	CHECK(aio_decode_download_error(400, "{\"detail\":\"Path is a directory\"}", 32, "/w/d", err, sizeof(err)) ==
	      SBX_ERR_ISDIR);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	c.replies[0] = "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/x\r\nContent-Length: 5\r\n\r\nmoved";
	c.replies[1] = reply(r[1], sizeof(r[1]), 204, "");
	canned_start(&c, l);
	CHECK(aio_file_download(&t, "/w/a", 0, 100, fd, &got, err, sizeof(err)) == SBX_ERR_IO && got == 0 &&
	      strstr(err, "302"));
	got = 1;
	CHECK(aio_file_download(&t, "/w/a", 0, 100, fd, &got, err, sizeof(err)) == SBX_ERR_IO && got == 0);
	canned_stop(&c);
	close(fd);
}

/* ---- the OpenSandbox answers ------------------------------------------------------------ */

/* An execd endpoint names a host: "//" or "/" made the base "http:" (every
 * slash trimmed), which libcurl reads as a URL of its own choosing (found
 * by tests/fuzz/json.c). */
static void test_osapi_decode_endpoint(void)
{
	static const char *const bad[] = { "{\"endpoint\":\"//\"}", "{\"endpoint\":\"/\"}",
		"{\"endpoint\":\"/proxy/44772\"}", "{\"endpoint\":\"http:///x\"}", "{\"endpoint\":\"https://\"}",
		"{\"endpoint\":\"a b\"}", "{\"endpoint\":\"h:1\",\"headers\":{\"X\":\"a\\r\\nY: b\"}}" };
	const char *good = "{\"endpoint\":\"10.1.2.3:40123/proxy/44772/\",\"headers\":{\"OpenSandbox-Ingress-To\":\"x-44772\"}}";
	struct osapi_execd ex;
	char err[OSAPI_ERR_LEN];

	CHECK(osapi_decode_endpoint(good, strlen(good), "http", &ex, err, sizeof(err)) == SBX_OK &&
	      !strcmp(ex.base, "http://10.1.2.3:40123/proxy/44772") && ex.n_headers == 1 &&
	      !strcmp(ex.hname[0], "OpenSandbox-Ingress-To") && !strcmp(ex.hvalue[0], "x-44772"));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum sbx_err e = osapi_decode_endpoint(bad[i], strlen(bad[i]), "http", &ex, err, sizeof(err));
		if (e != SBX_ERR_IO && e != SBX_ERR_PERM) {
			fprintf(stderr, "endpoint case %zu (%s): %s, base '%s'\n", i, bad[i], sbx_err_name(e), ex.base);
			CHECK(!"osapi endpoint");
		}
	}
}

int main(void)
{
	log_set_min_level(LOG_LVL_ERR);
	signal(SIGPIPE, SIG_IGN); /* a canned server answering a client that gave up (cancel, deadline) */
	snprintf(sock_path, sizeof(sock_path), "/tmp/sbxfs-http-test-%d.sock", (int)getpid());
	snprintf(sock_path2, sizeof(sock_path2), "/tmp/sbxfs-http-test-%d-2.sock", (int)getpid());
	CHECK(http_init() == 0);
	test_status_and_log_helpers();
	test_range_sink();
	test_unix_get_post_and_reuse();
	test_cap_refused_and_timeout();
	test_sink_stops();
	test_only_http_and_https();
	test_redirect_not_followed();
	test_url_parse_and_loopback();
	test_osapi_endpoint();
	test_token();
	test_token_cond_wait();
	test_netns();
	test_udir();
	test_docker_api();
	test_docker_time();
	test_demux();
	test_aio_envelope();
	test_aio_bash();
	test_aio_download_status();
	test_aio_upload_redirect();
	test_osapi_decode_endpoint();
	{
		char q[64];
		CHECK(docker_query_escape("a b/{\"}", q, sizeof(q)) == 0 && !strcmp(q, "a%20b%2F%7B%22%7D"));
		CHECK(docker_query_escape("abcdef", q, 4) == -1);
	}
	unlink(sock_path);
	unlink(sock_path2);
	http_cleanup();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
