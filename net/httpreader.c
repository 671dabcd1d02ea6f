/* SPDX-License-Identifier: MIT */
/*
 * httpreader.c - the proxy's strict HTTP/1.x request reader (see httpreader.h for the
 * rules).  Written against RFC 9112's grammar, narrowed: where the RFC lets
 * a recipient choose between repairing and rejecting, this reader rejects.
 */
#define _GNU_SOURCE
#include "httpreader.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

ssize_t http_head_len(const char *p, size_t len, size_t from)
{
	for (size_t i = from; i < len; i++) {
		if (p[i] != '\n')
			continue;
		/* "\r\n\r\n" ends a head; so does "\n\n", which http_parse refuses */
		if ((i >= 3 && !memcmp(p + i - 3, "\r\n\r\n", 4)) || (i >= 1 && p[i - 1] == '\n')) {
			if (i + 1 > HTTP_HEAD_MAX)
				return -1;
			return (ssize_t)(i + 1);
		}
	}
	return len >= HTTP_HEAD_MAX ? -1 : 0;
}

static bool is_tchar(unsigned char c)
{
	return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* host[:port] (host may be a bracketed IPv6 literal).  0 or -1. */
static int split_authority(const char *a, size_t n, int def_port, struct http_req *r)
{
	const char *colon = NULL;
	size_t hl;

	if (n && a[0] == '[') {
		const char *end = memchr(a, ']', n);
		if (!end)
			return -1;
		hl = (size_t)(end - a) + 1;
		if (hl < n) {
			if (a[hl] != ':')
				return -1;
			colon = a + hl;
		}
	} else {
		colon = memrchr(a, ':', n);
		hl = colon ? (size_t)(colon - a) : n;
	}
	if (hl == 0 || hl >= sizeof(r->host))
		return -1;
	memcpy(r->host, a, hl);
	r->host[hl] = '\0';
	r->port = def_port;
	if (colon) {
		const char *d = colon + 1, *end = a + n;
		long port = 0;

		if (d == end && def_port > 0)
			return 0; /* "host:" means the default port */
		if (d == end || end - d > 5)
			return -1;
		for (; d < end; d++) {
			if (*d < '0' || *d > '9')
				return -1;
			port = port * 10 + (*d - '0');
		}
		if (port < 1 || port > 65535)
			return -1;
		r->port = (int)port;
	}
	return r->port > 0 ? 0 : -1;
}

/* Does a Host header value name the target? */
static bool host_matches(const char *v, size_t n, const struct http_req *r)
{
	struct http_req h = { 0 };

	if (split_authority(v, n, r->port, &h))
		return false;
	return !strcasecmp(h.host, r->host) && h.port == r->port;
}

static bool ieq(const char *a, size_t n, const char *lit)
{
	return n == strlen(lit) && !strncasecmp(a, lit, n);
}

static int parse_target(const char *t, size_t n, struct http_req *r, const char **why)
{
	static const char *const methods[] = { "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", NULL };
	const char *auth, *end;
	bool known = false;

	if (r->connect) {
		if (split_authority(t, n, 0, r)) {
			*why = "CONNECT needs host:port";
			return 400;
		}
		return 0;
	}
	for (int i = 0; methods[i]; i++)
		known = known || !strcmp(r->method, methods[i]);
	if (!known) {
		*why = "method not allowed through the proxy";
		return 405;
	}
	if (n >= 8 && !strncasecmp(t, "https://", 8)) {
		*why = "https URLs go through CONNECT";
		return 400;
	}
	if (n < 7 || strncasecmp(t, "http://", 7)) {
		*why = "a proxy request needs an absolute http:// URL";
		return 400;
	}
	auth = t + 7;
	end = auth;
	while (end < t + n && *end != '/' && *end != '?' && *end != '#')
		end++;
	if (memchr(auth, '@', (size_t)(end - auth))) {
		*why = "credentials in the URL";
		return 400;
	}
	if (split_authority(auth, (size_t)(end - auth), 80, r)) {
		*why = "bad host or port in the URL";
		return 400;
	}
	r->path = end;
	r->path_len = (size_t)(t + n - end);
	{
		const char *hash = memchr(r->path, '#', r->path_len);
		if (hash)
			r->path_len = (size_t)(hash - r->path);
	}
	return 0;
}

int http_parse(const char *p, size_t len, struct http_req *r, const char **why)
{
	const char *line = p, *end = p + len, *sp1, *sp2, *eol;
	int hosts = 0, tes = 0, status;

	memset(r, 0, sizeof(*r));
	r->content_length = -1;
	*why = "malformed request";
	for (size_t i = 0; i < len; i++) {
		if (p[i] == '\n' && (i == 0 || p[i - 1] != '\r')) {
			*why = "bare LF line end";
			return 400;
		}
		if (p[i] == '\r' && (i + 1 == len || p[i + 1] != '\n')) {
			*why = "bare CR";
			return 400;
		}
	}
	if (len < 4 || memcmp(end - 4, "\r\n\r\n", 4))
		return 400;
	/* request line: METHOD SP TARGET SP HTTP/1.x */
	eol = memmem(line, (size_t)(end - line), "\r\n", 2);
	sp1 = memchr(line, ' ', (size_t)(eol - line));
	sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
	if (!sp1 || !sp2 || sp1 == line || sp2 == sp1 + 1 || memchr(sp2 + 1, ' ', (size_t)(eol - sp2 - 1)))
		return 400;
	if ((size_t)(sp1 - line) >= sizeof(r->method))
		return 400;
	for (const char *c = line; c < sp1; c++)
		if (*c < 'A' || *c > 'Z')
			return 400;
	memcpy(r->method, line, (size_t)(sp1 - line));
	for (const char *c = sp1 + 1; c < sp2; c++)
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
			return 400;
	if (eol - sp2 - 1 == 8 && !memcmp(sp2 + 1, "HTTP/1.", 7) && (sp2[8] == '0' || sp2[8] == '1')) {
		r->minor = sp2[8] - '0';
	} else if (eol - sp2 - 1 >= 5 && !memcmp(sp2 + 1, "HTTP/", 5)) {
		*why = "only HTTP/1.0 and HTTP/1.1";
		return 505;
	} else {
		return 400;
	}
	r->connect = !strcmp(r->method, "CONNECT");
	status = parse_target(sp1 + 1, (size_t)(sp2 - sp1 - 1), r, why);
	if (status)
		return status;
	*why = "malformed header";
	/* header fields */
	for (line = eol + 2; line < end - 2; line = eol + 2) {
		const char *colon, *v, *ve;

		eol = memmem(line, (size_t)(end - line), "\r\n", 2);
		if (*line == ' ' || *line == '\t') {
			*why = "obsolete line folding";
			return 400;
		}
		colon = memchr(line, ':', (size_t)(eol - line));
		if (!colon || colon == line)
			return 400;
		for (const char *c = line; c < colon; c++)
			if (!is_tchar((unsigned char)*c))
				return 400;
		for (v = colon + 1; v < eol && (*v == ' ' || *v == '\t'); v++)
			;
		for (ve = eol; ve > v && (ve[-1] == ' ' || ve[-1] == '\t'); ve--)
			;
		for (const char *c = v; c < ve; c++)
			if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
				return 400;
		if (ieq(line, (size_t)(colon - line), "Host")) {
			if (++hosts > 1) {
				*why = "two Host headers";
				return 400;
			}
			if (!host_matches(v, (size_t)(ve - v), r)) {
				*why = "the Host header does not name the target";
				return 400;
			}
		} else if (ieq(line, (size_t)(colon - line), "Content-Length")) {
			long long cl = 0;

			if (v == ve || ve - v > 15) {
				*why = "bad Content-Length";
				return 400;
			}
			for (const char *c = v; c < ve; c++) {
				if (*c < '0' || *c > '9') {
					*why = "bad Content-Length";
					return 400;
				}
				cl = cl * 10 + (*c - '0');
			}
			if (r->content_length >= 0 && r->content_length != cl) {
				*why = "conflicting Content-Length headers";
				return 400;
			}
			r->content_length = cl;
		} else if (ieq(line, (size_t)(colon - line), "Transfer-Encoding")) {
			if (++tes > 1) {
				*why = "two Transfer-Encoding headers";
				return 400;
			}
			if (!ieq(v, (size_t)(ve - v), "chunked")) {
				*why = "only the chunked transfer coding";
				return 501;
			}
			r->chunked = true;
		} else if (ieq(line, (size_t)(colon - line), "Expect")) {
			*why = "Expect is not supported";
			return 417;
		}
	}
	if (r->chunked && r->content_length >= 0) {
		*why = "Content-Length together with Transfer-Encoding";
		return 400;
	}
	if (r->chunked && r->minor == 0) {
		/* RFC 9112 §6.1: chunked framing in HTTP/1.0 is faulty; an
		 * HTTP/1.0 upstream could read the body by other rules */
		*why = "Transfer-Encoding in an HTTP/1.0 request";
		return 400;
	}
	if (r->connect && (r->chunked || r->content_length > 0)) {
		*why = "CONNECT with a body";
		return 400;
	}
	if (!r->connect && r->minor == 1 && hosts == 0) {
		*why = "HTTP/1.1 request without Host";
		return 400;
	}
	return 0;
}

int http_upstream_head(const char *p, size_t len, const struct http_req *r, struct buf *out)
{
	static const char *const hop[] = { "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization",
		"Proxy-Authenticate", "TE", "Trailer", "Upgrade", NULL };
	/* never dropped, even when Connection names them: the body the proxy
	 * forwards is framed by these, and an upstream without them would read
	 * that body as a request of its own */
	static const char *const keep[] = { "Host", "Content-Length", "Transfer-Encoding", NULL };
	const char *named[32];
	size_t named_len[32], n_named = 0;
	const char *end = p + len, *line, *eol;
	int e = 0;

	/* the names listed by Connection headers are hop-by-hop too */
	for (line = memmem(p, len, "\r\n", 2) + 2; line < end - 2; line = eol + 2) {
		const char *colon, *v;

		eol = memmem(line, (size_t)(end - line), "\r\n", 2);
		colon = memchr(line, ':', (size_t)(eol - line));
		if (!colon || !ieq(line, (size_t)(colon - line), "Connection"))
			continue;
		for (v = colon + 1; v < eol && n_named < 32;) {
			const char *t;
			while (v < eol && (*v == ' ' || *v == '\t' || *v == ','))
				v++;
			for (t = v; t < eol && *t != ',' && *t != ' ' && *t != '\t'; t++)
				;
			if (t > v) {
				named[n_named] = v;
				named_len[n_named++] = (size_t)(t - v);
			}
			v = t;
		}
	}
	e |= buf_addf(out, "%s ", r->method);
	if (r->path_len == 0 || r->path[0] != '/')
		e |= buf_adds(out, "/");
	e |= buf_add(out, r->path, r->path_len);
	e |= buf_addf(out, " HTTP/1.%d\r\n", r->minor);
	for (line = memmem(p, len, "\r\n", 2) + 2; line < end - 2; line = eol + 2) {
		const char *colon;
		bool drop = false;

		eol = memmem(line, (size_t)(end - line), "\r\n", 2);
		colon = memchr(line, ':', (size_t)(eol - line));
		for (int i = 0; hop[i] && !drop; i++)
			drop = ieq(line, (size_t)(colon - line), hop[i]);
		for (size_t i = 0; i < n_named && !drop; i++)
			drop = (size_t)(colon - line) == named_len[i] && !strncasecmp(line, named[i], named_len[i]);
		for (int i = 0; keep[i] && drop; i++)
			drop = !ieq(line, (size_t)(colon - line), keep[i]);
		if (!drop)
			e |= buf_add(out, line, (size_t)(eol - line + 2));
	}
	e |= buf_adds(out, "Connection: close\r\n\r\n");
	return e ? -1 : 0;
}

enum { CH_SIZE, CH_EXT, CH_SIZE_LF, CH_DATA, CH_DATA_CR, CH_DATA_LF, CH_TRL_START, CH_TRL_LINE, CH_TRL_LF, CH_END_LF };

#define CH_LINE_MAX 4096

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

ssize_t http_chunked_feed(struct http_chunked *c, const char *p, size_t n)
{
	size_t i = 0;

	while (i < n && !c->done) {
		char ch = p[i];

		switch (c->state) {
		case CH_SIZE:
			if (hexval(ch) >= 0) {
				if (c->left >> 56 || ++c->line > 16)
					return -1;
				c->left = c->left * 16 + (unsigned)hexval(ch);
			} else if (ch == ';' && c->line) {
				c->state = CH_EXT;
			} else if (ch == '\r' && c->line) {
				c->state = CH_SIZE_LF;
			} else {
				return -1;
			}
			i++;
			break;
		case CH_EXT:
			if (ch == '\n' || ++c->line > CH_LINE_MAX)
				return -1;
			if (ch == '\r')
				c->state = CH_SIZE_LF;
			i++;
			break;
		case CH_SIZE_LF:
			if (ch != '\n')
				return -1;
			c->line = 0;
			c->state = c->left ? CH_DATA : CH_TRL_START;
			i++;
			break;
		case CH_DATA: {
			size_t take = n - i < c->left ? n - i : (size_t)c->left;
			c->left -= take;
			i += take;
			if (!c->left)
				c->state = CH_DATA_CR;
			break;
		}
		case CH_DATA_CR:
			if (ch != '\r')
				return -1;
			c->state = CH_DATA_LF;
			i++;
			break;
		case CH_DATA_LF:
			if (ch != '\n')
				return -1;
			c->state = CH_SIZE;
			c->line = 0;
			i++;
			break;
		case CH_TRL_START:
			c->state = ch == '\r' ? CH_END_LF : CH_TRL_LINE;
			if (ch == '\n')
				return -1;
			if (c->state == CH_TRL_LINE && ++c->trailer > HTTP_HEAD_MAX)
				return -1;
			i++;
			break;
		case CH_TRL_LINE:
			if (ch == '\n' || ++c->trailer > HTTP_HEAD_MAX)
				return -1;
			if (ch == '\r')
				c->state = CH_TRL_LF;
			i++;
			break;
		case CH_TRL_LF:
			if (ch != '\n')
				return -1;
			c->state = CH_TRL_START;
			i++;
			break;
		case CH_END_LF:
			if (ch != '\n')
				return -1;
			c->done = true;
			i++;
			break;
		}
	}
	return (ssize_t)i;
}
