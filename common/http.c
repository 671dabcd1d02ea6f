/* SPDX-License-Identifier: MIT */
/*
 * http.c - the libcurl layer every HTTP client module shares (see http.h).
 *
 * One easy handle per request, attached to one process-wide share: an easy
 * handle costs little to make, while the connections it uses are what is
 * worth keeping, and those live in the share's connection cache (curl
 * matches a cached connection on scheme, host, port and unix socket path).
 * Per-thread handles would also reuse connections but keep one idle socket
 * per thread and endpoint; the share keeps a few for the whole daemon.
 *
 * Connections made inside another network namespace bypass the cache in
 * both directions (FRESH_CONNECT + FORBID_REUSE): the cache keys on the
 * address, and 127.0.0.1:8080 in one container is not 127.0.0.1:8080 in
 * the next.
 *
 * Every handle speaks http and https only (CURLOPT_PROTOCOLS_STR, also for
 * redirects, which are never followed anyway) and refuses credentials in a
 * URL: the daemon runs as root and builds URLs from what remote servers
 * answer (an OpenSandbox execd endpoint); libcurl would otherwise speak
 * gopher, dict, file, smtp, ... to wherever such a URL points.
 *
 * A request runs on a multi handle of its own rather than
 * curl_easy_perform (which makes one internally anyway) so that a token's
 * cancel can wake it (curl_multi_wakeup) while it waits in poll(2) on a
 * server that sends nothing; curl's progress callback runs only about once
 * a second then.
 */
#define _GNU_SOURCE
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "log.h"
#include "netns.h"
#include "util.h"

static struct {
	pthread_once_t once;
	int ready; /* 1 once init succeeded, -1 when it failed */
	CURLSH *share;
	pthread_mutex_t locks[CURL_LOCK_DATA_LAST];
	unsigned long next_id; /* atomic */
} http = { .once = PTHREAD_ONCE_INIT };

static void http_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *arg)
{
	(void)h;
	(void)access; /* one mutex per kind: curl's shared caches are small and rarely contended */
	(void)arg;
	if ((unsigned)data < CURL_LOCK_DATA_LAST)
		pthread_mutex_lock(&http.locks[data]);
}

static void http_unlock(CURL *h, curl_lock_data data, void *arg)
{
	(void)h;
	(void)arg;
	if ((unsigned)data < CURL_LOCK_DATA_LAST)
		pthread_mutex_unlock(&http.locks[data]);
}

static void http_init_once(void)
{
	CURLSHcode sc = CURLSHE_OK;

	http.ready = -1;
	if (curl_global_init(CURL_GLOBAL_DEFAULT))
		return;
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&http.locks[i], NULL);
	http.share = curl_share_init();
	if (!http.share)
		return;
	sc |= curl_share_setopt(http.share, CURLSHOPT_LOCKFUNC, http_lock);
	sc |= curl_share_setopt(http.share, CURLSHOPT_UNLOCKFUNC, http_unlock);
	sc |= curl_share_setopt(http.share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
	sc |= curl_share_setopt(http.share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	sc |= curl_share_setopt(http.share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	if (sc != CURLSHE_OK) {
		curl_share_cleanup(http.share);
		http.share = NULL;
		return;
	}
	http.ready = 1;
}

int http_init(void)
{
	pthread_once(&http.once, http_init_once);
	return http.ready == 1 ? 0 : -1;
}

void http_cleanup(void)
{
	if (http.ready != 1)
		return;
	curl_share_cleanup(http.share);
	http.share = NULL;
	curl_global_cleanup();
	http.ready = 0;
}

enum sbx_err http_status_err(long status)
{
	if (status >= 200 && status < 400)
		return SBX_OK;
	switch (status) {
	case 400:
	case 405:
	case 422:
		return SBX_ERR_INVAL;
	case 401:
	case 403:
		return SBX_ERR_ACCESS;
	case 404:
	case 410:
		return SBX_ERR_GONE;
	case 408:
	case 504:
		return SBX_ERR_TIMEOUT;
	case 409:
		return SBX_ERR_EXIST;
	case 413:
		return SBX_ERR_TOOBIG;
	case 429:
	case 503:
		return SBX_ERR_BUSY;
	case 507:
		return SBX_ERR_NOSPC;
	default:
		return SBX_ERR_IO;
	}
}

long http_transfer_ms(long base_ms, long long bytes)
{
	long long ms = (long long)(base_ms > 0 ? base_ms : 0) + (bytes > 0 ? bytes : 0) * 1000 / HTTP_MIN_RATE;

	return ms > 24LL * 3600 * 1000 ? 24L * 3600 * 1000 : ms > 0 ? (long)ms : 1;
}

void http_header_for_log(const struct http_header *h, char *out, size_t len)
{
	snprintf(out, len, "%s: %s", h->name, h->secret ? "***" : h->value);
}

void http_url_for_log(const char *url, char *out, size_t len)
{
	const char *q = strchr(url, '?');

	if (q)
		snprintf(out, len, "%.*s?...", (int)(q - url), url);
	else
		snprintf(out, len, "%s", url);
}

static int http_url_part(CURLU *u, CURLUPart what, char *out, size_t len, bool *present)
{
	char *v = NULL;
	CURLUcode rc = curl_url_get(u, what, &v, 0);
	int r = 0;

	if (present)
		*present = rc == CURLUE_OK && v;
	if (out && len)
		out[0] = '\0';
	if (rc == CURLUE_OK && v && out && str_fmt(out, len, "%s", v))
		r = -1;
	curl_free(v);
	return r;
}

int http_url_parse(const char *url, struct http_url *out)
{
	CURLU *u = curl_url();
	char port[16];
	bool user = false, pass = false, has_port = false;
	int r = -1;

	memset(out, 0, sizeof(*out));
	if (!u)
		return -1;
	/* any scheme (the caller decides which it takes), nothing guessed */
	if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK)
		goto out;
	if (http_url_part(u, CURLUPART_SCHEME, out->scheme, sizeof(out->scheme), NULL) ||
	    http_url_part(u, CURLUPART_HOST, out->host, sizeof(out->host), NULL) ||
	    http_url_part(u, CURLUPART_PORT, port, sizeof(port), &has_port) ||
	    http_url_part(u, CURLUPART_USER, NULL, 0, &user) || http_url_part(u, CURLUPART_PASSWORD, NULL, 0, &pass) ||
	    http_url_part(u, CURLUPART_QUERY, NULL, 0, &out->query) ||
	    http_url_part(u, CURLUPART_FRAGMENT, NULL, 0, &out->fragment) ||
	    http_url_part(u, CURLUPART_URL, out->url, sizeof(out->url), NULL))
		goto out;
	for (char *c = out->scheme; *c; c++)
		if (*c >= 'A' && *c <= 'Z')
			*c = (char)(*c - 'A' + 'a');
	out->port = has_port ? strtol(port, NULL, 10) : 0;
	out->userinfo = user || pass;
	/* curl drops an empty query or fragment ("...#"): a caller appending a
	 * path to the URL needs to know of the '#' all the same */
	{
		const char *hash = strchr(url, '#'), *q = strchr(url, '?');
		out->fragment = out->fragment || hash;
		out->query = out->query || (q && (!hash || q < hash));
	}
	r = 0;
out:
	curl_url_cleanup(u);
	return r;
}

bool http_host_loopback(const char *host)
{
	char h[256];
	size_t n = strlen(host);
	unsigned char a[16];

	if (!strcasecmp(host, "localhost") || !strcasecmp(host, "localhost."))
		return true;
	if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof(h)) {
		memcpy(h, host + 1, n - 2);
		h[n - 2] = '\0';
		if (inet_pton(AF_INET6, h, a) != 1)
			return false;
		if (IN6_IS_ADDR_LOOPBACK((struct in6_addr *)a))
			return true;
		return IN6_IS_ADDR_V4MAPPED((struct in6_addr *)a) && a[12] == 127;
	}
	return inet_pton(AF_INET, host, a) == 1 && a[0] == 127;
}

/* ---- one transfer ------------------------------------------------------------------ */

struct http_xfer {
	const struct http_request *rq;
	struct http_response *rs;
	CURL *h;
	int to_err;     /* sink mode: 0 not decided yet, 1 the body is an error document, -1 data */
	bool toobig;    /* the body passed rq->out's cap */
	bool nomem;     /* rq->out could not grow */
	bool sink_stop; /* the sink asked to stop */
	int netns_err;  /* errno of a failed socket in the namespace */
	struct token *tok; /* rq->token or the thread's: deadline and cancel */
};

static size_t http_write(char *data, size_t size, size_t n, void *arg)
{
	struct http_xfer *x = arg;
	size_t len = size * n;

	if (x->rq->sink && !x->to_err) {
		long status = 0;

		curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &status);
		x->to_err = x->rq->err_out && (status < 200 || status >= 300) ? 1 : -1;
		if (x->rq->on_status)
			x->rq->on_status(status, x->rq->sink_arg);
	}
	if (x->to_err == 1) {
		struct buf *e = x->rq->err_out;
		size_t room = e->max > e->len ? e->max - e->len : 0;

		if (room && !e->failed && buf_add(e, data, len < room ? len : room))
			e->failed = 1;
		return len;
	}
	if (x->rq->sink) {
		if (!x->rq->sink(data, len, x->rq->sink_arg)) {
			x->sink_stop = true;
			return 0;
		}
		return len;
	}
	if (buf_add(x->rq->out, data, len)) {
		if (errno == E2BIG)
			x->toobig = true;
		else
			x->nomem = true;
		return 0;
	}
	return len;
}

static size_t http_read_fd(char *data, size_t size, size_t n, void *arg)
{
	const struct http_request *rq = arg;
	ssize_t r;

	do
		r = read(rq->body_fd, data, size * n);
	while (r < 0 && errno == EINTR);
	return r < 0 ? CURL_READFUNC_ABORT : (size_t)r;
}

/* A multipart file part from an fd: read at the part's own offset. */
struct http_fdpart {
	int fd;
	curl_off_t pos, size;
};

static size_t http_part_read(char *data, size_t size, size_t n, void *arg)
{
	struct http_fdpart *p = arg;
	size_t want = size * n;
	ssize_t r;

	if (p->pos >= p->size)
		return 0;
	if ((curl_off_t)want > p->size - p->pos)
		want = (size_t)(p->size - p->pos);
	do
		r = pread(p->fd, data, want, (off_t)p->pos);
	while (r < 0 && errno == EINTR);
	if (r <= 0) /* an error, or the file shrank under us: never send short */
		return CURL_READFUNC_ABORT;
	p->pos += r;
	return (size_t)r;
}

static int http_part_seek(void *arg, curl_off_t offset, int origin)
{
	struct http_fdpart *p = arg;

	if (origin != SEEK_SET || offset < 0 || offset > p->size)
		return CURL_SEEKFUNC_CANTSEEK;
	p->pos = offset;
	return CURL_SEEKFUNC_OK;
}

int http_escape(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		int r;

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
		    c == '_' || c == '~') {
			r = buf_add(b, s, 1);
		} else {
			char e[3] = { '%', hex[c >> 4], hex[c & 15] };
			r = buf_add(b, e, 3);
		}
		if (r)
			return -1;
	}
	return 0;
}

/* Whether the caller gave up: *rq->cancel or the token (sets rs->cancelled). */
static bool http_stopped(struct http_xfer *x)
{
	if ((x->rq->cancel && __atomic_load_n(x->rq->cancel, __ATOMIC_RELAXED)) || token_cancelled(x->tok)) {
		x->rs->cancelled = true;
		return true;
	}
	return false;
}

static int http_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	struct http_xfer *x = arg;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return http_stopped(x) ? 1 : 0;
}

static void http_wake(void *arg)
{
	curl_multi_wakeup(arg); /* thread-safe; a wake before the poll is not lost */
}

/* Run the transfer of h to its end, or until the caller gives up (a
 * cancelled token wakes the wait at once; *rq->cancel is seen within a
 * second).  The CURLcode of the transfer. */
static CURLcode http_run(struct http_xfer *x, CURL *h)
{
	CURLM *m = curl_multi_init();
	CURLcode c = CURLE_OUT_OF_MEMORY;
	bool watched = false;
	int running = 1;

	if (!m)
		return c;
	if (curl_multi_add_handle(m, h) != CURLM_OK)
		goto out;
	if (x->tok)
		watched = token_watch(x->tok, http_wake, m);
	c = CURLE_OK;
	while (running) {
		CURLMsg *msg;
		int left;

		if (curl_multi_perform(m, &running) != CURLM_OK) {
			c = CURLE_OUT_OF_MEMORY;
			break;
		}
		while ((msg = curl_multi_info_read(m, &left)))
			if (msg->msg == CURLMSG_DONE && msg->easy_handle == h)
				c = msg->data.result;
		if (!running)
			break;
		if (http_stopped(x)) {
			c = CURLE_ABORTED_BY_CALLBACK;
			break;
		}
		/* at most a second (*rq->cancel), less when curl's timers say so;
		 * a token that could not be watched is polled more often */
		if (curl_multi_poll(m, NULL, 0, x->tok && !watched ? TOKEN_COND_SLICE_MS : 1000, NULL) != CURLM_OK) {
			c = CURLE_OUT_OF_MEMORY;
			break;
		}
	}
	if (watched)
		token_unwatch(x->tok);
	curl_multi_remove_handle(m, h);
out:
	curl_multi_cleanup(m);
	return c;
}

static curl_socket_t http_open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
	struct http_xfer *x = arg;
	int fd;

	(void)purpose;
	fd = netns_socket(x->rq->netns_fd, addr->family, addr->socktype, addr->protocol);
	if (fd < 0) {
		x->netns_err = errno;
		return CURL_SOCKET_BAD;
	}
	return fd;
}

/* Whether a curl timeout was the token's deadline. curl's clock and the
 * token's are read at different moments: a timeout within a few
 * milliseconds of the deadline is the deadline's. */
static bool http_deadline_passed(const struct token *t)
{
	long left = token_left_ms(t);

	return t && left >= 0 && left <= HTTP_DEADLINE_SLACK_MS;
}

static enum sbx_err http_curl_err(CURLcode c, struct http_xfer *x)
{
	switch (c) {
	case CURLE_OK:
		return SBX_OK;
	case CURLE_OPERATION_TIMEDOUT:
		return SBX_ERR_TIMEOUT;
	case CURLE_OUT_OF_MEMORY:
		return SBX_ERR_NOMEM;
	case CURLE_WRITE_ERROR:
		if (x->sink_stop)
			return SBX_OK;
		return x->toobig ? SBX_ERR_TOOBIG : x->nomem ? SBX_ERR_NOMEM : SBX_ERR_IO;
	case CURLE_ABORTED_BY_CALLBACK:
		return x->rs->cancelled ? SBX_ERR_INTR : SBX_ERR_IO;
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_LOGIN_DENIED: /* credentials in the URL (DISALLOW_USERNAME_IN_URL) */
		return SBX_ERR_INVAL;
	default:
		return SBX_ERR_IO;
	}
}

enum sbx_err http_perform(const struct http_request *rq, struct http_response *rs)
{
	struct http_xfer x = { .rq = rq, .rs = rs };
	struct http_fdpart *fdparts = NULL;
	curl_mime *mime = NULL;
	struct curl_slist *hdrs = NULL, *tmp;
	char errbuf[CURL_ERROR_SIZE] = "", line[1024], logurl[512];
	char *json_text = NULL;
	const char *ctype = NULL;
	enum sbx_err result = SBX_ERR_INVAL;
	CURLcode c = CURLE_OK;
	CURL *h = NULL;
	long status = 0, timeout_ms, connect_ms;
	double total = 0;

	memset(rs, 0, sizeof(*rs));
	x.tok = rq->token ? rq->token : token_current();
	snprintf(rs->id, sizeof(rs->id), "h%lu", __atomic_add_fetch(&http.next_id, 1, __ATOMIC_RELAXED));
	http_url_for_log(rq->url ? rq->url : "", logurl, sizeof(logurl));
	if (!rq->url || !rq->method || (!rq->out == !rq->sink)) {
		snprintf(rs->error, sizeof(rs->error), "malformed request (url, method, one response target)");
		goto out;
	}
	if (http_init()) {
		snprintf(rs->error, sizeof(rs->error), "libcurl cannot be initialised");
		result = SBX_ERR_IO;
		goto out;
	}
	result = token_check(x.tok);
	if (result) { /* the caller gave up, or its time is over: no request at all */
		rs->cancelled = result == SBX_ERR_INTR;
		snprintf(rs->error, sizeof(rs->error), "%s", result == SBX_ERR_INTR ? "cancelled" : "deadline passed");
		goto out;
	}
	/* the token's deadline bounds the whole transfer, streams too */
	timeout_ms = token_bound_ms(x.tok, rq->timeout_ms);
	connect_ms = token_bound_ms(x.tok, rq->connect_timeout_ms > 0 ? rq->connect_timeout_ms : HTTP_CONNECT_TIMEOUT_MS);
	result = SBX_ERR_NOMEM;
	h = curl_easy_init();
	if (!h)
		goto out;
	x.h = h;
	c |= curl_easy_setopt(h, CURLOPT_URL, rq->url);
	c |= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	c |= curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	c |= curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	c |= curl_easy_setopt(h, CURLOPT_DISALLOW_USERNAME_IN_URL, 1L);
	c |= curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	c |= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	c |= curl_easy_setopt(h, CURLOPT_SHARE, http.share);
	c |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, http_write);
	c |= curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
	c |= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
	if (timeout_ms > 0)
		c |= curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	if (rq->stall_ms > 0) {
		c |= curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
		c |= curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (rq->stall_ms + 999) / 1000);
	}
	if (rq->cancel || x.tok) {
		c |= curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, http_progress);
		c |= curl_easy_setopt(h, CURLOPT_XFERINFODATA, &x);
		c |= curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	}
	if (rq->unix_socket)
		c |= curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, rq->unix_socket);
	if (rq->netns_fd >= 0) {
		c |= curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, http_open_socket);
		c |= curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, &x);
		c |= curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
		c |= curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
	}
	if (rq->unix_socket || rq->netns_fd >= 0)
		c |= curl_easy_setopt(h, CURLOPT_NOPROXY, "*"); /* never through a proxy of the environment */

	/* method and body (the body options make curl say POST: the method is set after them) */
	if (!strcmp(rq->method, "HEAD"))
		c |= curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	if (rq->json) {
		json_text = json_dumps(rq->json, JSON_COMPACT);
		if (!json_text)
			goto out;
		c |= curl_easy_setopt(h, CURLOPT_POSTFIELDS, json_text);
		c |= curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(json_text));
		ctype = "application/json";
	} else if (rq->body) {
		c |= curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body);
		c |= curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_len);
		ctype = rq->content_type;
	} else if (rq->n_parts) {
		mime = curl_mime_init(h);
		fdparts = calloc(rq->n_parts, sizeof(*fdparts));
		if (!mime || !fdparts)
			goto out;
		for (size_t i = 0; i < rq->n_parts; i++) {
			const struct http_part *p = &rq->parts[i];
			curl_mimepart *mp = curl_mime_addpart(mime);

			if (!mp)
				goto out;
			c |= curl_mime_name(mp, p->name);
			if (p->filename)
				c |= curl_mime_filename(mp, p->filename);
			if (p->type)
				c |= curl_mime_type(mp, p->type);
			if (p->from_fd) {
				fdparts[i] = (struct http_fdpart){ p->fd, 0, (curl_off_t)p->size };
				c |= curl_mime_data_cb(mp, (curl_off_t)p->size, http_part_read, http_part_seek, NULL,
					&fdparts[i]);
			} else {
				c |= curl_mime_data(mp, p->data ? p->data : "", p->len);
			}
		}
		c |= curl_easy_setopt(h, CURLOPT_MIMEPOST, mime);
	} else if (rq->body_fd >= 0) {
		c |= curl_easy_setopt(h, CURLOPT_POST, 1L);
		c |= curl_easy_setopt(h, CURLOPT_READFUNCTION, http_read_fd);
		c |= curl_easy_setopt(h, CURLOPT_READDATA, rq);
		c |= curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->body_size);
		ctype = rq->content_type;
	} else if (!strcmp(rq->method, "POST") || !strcmp(rq->method, "PUT") || !strcmp(rq->method, "PATCH")) {
		c |= curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
		c |= curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
	}
	if (strcmp(rq->method, "GET") && strcmp(rq->method, "HEAD"))
		c |= curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);

	/* headers: ours, then the caller's */
	if (ctype) {
		if (str_fmt(line, sizeof(line), "Content-Type: %s", ctype) || !(tmp = curl_slist_append(hdrs, line)))
			goto out;
		hdrs = tmp;
	}
	if (!(tmp = curl_slist_append(hdrs, "Expect:"))) /* no 100-continue round trip */
		goto out;
	hdrs = tmp;
	if (str_fmt(line, sizeof(line), "X-Request-Id: sbxfs-%d-%s", (int)getpid(), rs->id) ||
	    !(tmp = curl_slist_append(hdrs, line)))
		goto out;
	hdrs = tmp;
	for (size_t i = 0; i < rq->n_headers; i++) {
		if (str_fmt(line, sizeof(line), "%s: %s", rq->headers[i].name, rq->headers[i].value)) {
			snprintf(rs->error, sizeof(rs->error), "header %s too long", rq->headers[i].name);
			result = SBX_ERR_INVAL;
			goto out;
		}
		if (!(tmp = curl_slist_append(hdrs, line)))
			goto out;
		hdrs = tmp;
	}
	c |= curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	if (c != CURLE_OK) {
		snprintf(rs->error, sizeof(rs->error), "cannot set up the request: %s", curl_easy_strerror(c));
		result = SBX_ERR_INVAL;
		goto out;
	}

	c = http_run(&x, h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(h, CURLINFO_TOTAL_TIME, &total);
	rs->status = status;
	rs->seconds = total;
	{
		char *ct = NULL;
		if (curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct)
			snprintf(rs->content_type, sizeof(rs->content_type), "%s", ct);
	}
	x.rs->aborted = x.sink_stop;
	result = http_curl_err(c, &x);
	if (c == CURLE_ABORTED_BY_CALLBACK && rs->cancelled)
		snprintf(rs->error, sizeof(rs->error), "cancelled");
	else if (c == CURLE_OPERATION_TIMEDOUT && http_deadline_passed(x.tok))
		snprintf(rs->error, sizeof(rs->error), "deadline passed (%.200s)", errbuf[0] ? errbuf : "timeout");
	else if (c == CURLE_UNSUPPORTED_PROTOCOL)
		snprintf(rs->error, sizeof(rs->error), "refused: only http and https are spoken (%.180s)",
			errbuf[0] ? errbuf : curl_easy_strerror(c));
	else if (c == CURLE_LOGIN_DENIED)
		snprintf(rs->error, sizeof(rs->error), "refused: credentials in the URL");
	else if (x.netns_err)
		snprintf(rs->error, sizeof(rs->error), "cannot open a socket in the network namespace: %s",
			strerror(x.netns_err));
	else if (result == SBX_ERR_TOOBIG)
		snprintf(rs->error, sizeof(rs->error), "response larger than %zu bytes", rq->out->max);
	else if (result && c != CURLE_OK)
		snprintf(rs->error, sizeof(rs->error), "%s", errbuf[0] ? errbuf : curl_easy_strerror(c));
	if (result == SBX_OK && status == 0 && !rs->aborted) {
		snprintf(rs->error, sizeof(rs->error), "no HTTP response");
		result = SBX_ERR_IO;
	}
out:
	if (result == SBX_OK)
		log_debug(rq->scope ? rq->scope : "http", "%s %s %s -> %ld%s (%.1f ms)", rs->id, rq->method, logurl,
			rs->status, rs->aborted ? ", stopped by the reader" : "", rs->seconds * 1000);
	else
		log_debug(rq->scope ? rq->scope : "http", "%s %s %s failed: %s (%s)", rs->id, rq->method ? rq->method : "?",
			logurl, sbx_err_name(result), rs->error);
	curl_slist_free_all(hdrs);
	free(json_text);
	if (h)
		curl_easy_cleanup(h);
	curl_mime_free(mime);
	free(fdparts);
	return result;
}

void http_range_status(long status, void *arg)
{
	struct http_range *d = arg;

	if (status == 200) /* Range ignored: the whole resource comes */
		d->skip = (size_t)d->off;
}

bool http_range_sink(const char *data, size_t len, void *arg)
{
	struct http_range *d = arg;
	size_t k = len < d->skip ? len : d->skip;

	data += k;
	len -= k;
	d->skip -= k;
	if (len > d->want - d->got)
		len = d->want - d->got;
	while (len) {
		ssize_t w = write(d->fd, data, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			d->werr = w < 0 ? errno : EIO;
			return false;
		}
		data += w;
		len -= (size_t)w;
		d->got += (size_t)w;
	}
	return d->got < d->want;
}
