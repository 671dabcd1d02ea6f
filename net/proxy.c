/* SPDX-License-Identifier: MIT */
/*
 * proxy.c - the approval proxy's event loop (see proxy.h for what it does).
 *
 * Shape: one thread, one epoll set, level-triggered.  Every fd in the set
 * carries a tag saying what it is (the wake-up eventfd, a listener, the
 * client or upstream side of a connection); each connection is a small
 * state machine:
 *
 *   HEAD -> (HOLD) -> RESOLVE -> CONNECT -> HELLO (CONNECT only) -> RELAY
 *     \______\__________\__________\__________\___________\-> REPLY -> LINGER
 *
 * A CONNECT's RELAY starts "watching" (tls.h): both directions through
 * buffers, every client record checked before it goes upstream, until the
 * server has sent its ServerHello; then the splice relay.
 *
 * REPLY writes an answer (403, 400, ...); LINGER then reads and drops what
 * the client still sends, for a moment, before closing: closing a socket
 * with unread data makes the kernel send a reset, which can destroy the
 * answer before the client reads it.
 *
 * Other threads talk to the loop through a command queue and an eventfd
 * (listen, unlisten, kick) and the resolver hands requests back the same way;
 * nothing else is shared, so the loop's own structures need no lock.
 *
 * Timers: a connection has one deadline (head read, approval wait, resolve
 * and connect, ClientHello, relay idleness, linger); the loop scans the
 * connections at most every PROXY_SCAN_MS, which is precise enough for
 * deadlines counted in seconds and costs nothing per event.
 */
#define _GNU_SOURCE
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../common/budget.h"
#include "../common/buf.h"
#include "../common/log.h"
#include "../common/names.h"
#include "../common/util.h"
#include "../common/egress.h"
#include "httpreader.h"
#include "netpol.h"
#include "../common/policy.h"
#include "resolve.h"
#include "tls.h"

#define PROXY_SCAN_MS 200
#define PROXY_LINGER_MS 2000
#define PROXY_REPLY_MS 5000
#define PROXY_PIPE_SIZE (1024 * 1024) /* fs.pipe-max-size's default; smaller if refused */
#define PROXY_BIG_PIPES 16               /* a sandbox's pipes of that size (pipe_new) */
#define PROXY_LOG_PER_S 10               /* a sandbox's connection log lines a second (log_allowed) */
#define PROXY_IN_MAX (HTTP_HEAD_MAX + TLS_HELLO_MAX + 4096)
#define PROXY_DOWN_MAX (64 * 1024)                          /* watching: the server's bytes read at once */
#define PROXY_SHS_MAX (TLS_HELLO_MAX + 16384 + 256 + 5 + PROXY_DOWN_MAX) /* ... kept for tls_watch_server */

enum tag_kind { TAG_WAKE, TAG_LISTENER, TAG_CLIENT, TAG_UPSTREAM };

struct tag {
	enum tag_kind kind;
	void *p;
};

struct listener {
	struct tag tag;
	uint64_t id;
	int fd;
	struct netpol *pol; /* referenced */
	char scope[NAMES_SCOPE_MAX];
	struct budget_acct *acct; /* its sandbox's (and so its user's) share of connections; referenced */
	unsigned nconns;
	unsigned big_pipes; /* pipes of its connections enlarged to PROXY_PIPE_SIZE */
	uint64_t log_sec;   /* log_allowed(): the second counted, lines in it, lines not logged */
	unsigned log_n, log_dropped;
	bool paused; /* out of descriptors: out of the epoll set until the next scan */
	struct listener *next;
};

enum cstate { CS_HEAD, CS_HOLD, CS_RESOLVE, CS_CONNECT, CS_HELLO, CS_RELAY, CS_REPLY, CS_LINGER };

/* One direction of a relay: from -> pipe -> to. */
struct dir {
	int from, to;
	int pipe[2];
	size_t cap; /* the pipe's size */
	size_t in_pipe;
	bool big;  /* the pipe was enlarged: counted in its listener's big_pipes */
	bool eof;  /* from has ended */
	bool done; /* everything was delivered and to was shut down (or need not be) */
	bool want_in, want_out;
};

struct conn {
	struct tag ctag, utag;
	struct listener *l;
	struct netpol *pol; /* referenced */
	int cfd, ufd;
	enum cstate st;
	uint64_t deadline;  /* ms, util_now_ms() clock */
	uint64_t connect_by; /* the shared resolve + connect deadline */
	struct buf in;      /* client bytes read before the relay */
	size_t head_len;
	size_t head_scanned; /* CS_HEAD: in[0..head_scanned) holds no end of head */
	struct http_req req;
	char host[POLICY_HOST_MAX + 1];
	char id[NETPOL_ID_LEN + 1];
	struct buf up;      /* to send upstream before (and during) the relay */
	size_t up_off;
	struct buf out;     /* to send to the client before the relay */
	size_t out_off;
	/* CONNECT: the handshake, watched until the server chose (tls.h) */
	struct tls_watch tw;
	bool watching;      /* CS_RELAY without splicing yet: c->in holds client bytes not yet checked */
	bool s_eof;         /* watching: the server closed its side */
	struct buf down;    /* server bytes for the client, read while watching */
	size_t down_off;
	struct buf shs;     /* watching: the server's bytes tls_watch_server has not used yet */
	struct resolve_req *rr; /* CS_RESOLVE: owned by the resolver; CS_CONNECT (and a
	                         * reply after it): the addresses, ours to free */
	int ai;                 /* the address being tried */
	/* plain HTTP: the one request body still to forward */
	long long body_left;
	bool body_chunked, body_done;
	struct http_chunked ch;
	struct dir d[2]; /* [0] client -> upstream, [1] upstream -> client */
	unsigned cmask, umask; /* epoll interest now registered (0: not in the set) */
	bool zombie;           /* closed while its resolve was in flight */
	struct conn *prev, *next;
	struct conn *dead_next; /* on px.dead: freed at the end of the loop's round */
};

enum cmd_kind { CMD_LISTEN, CMD_UNLISTEN, CMD_KICK };

struct cmd {
	enum cmd_kind kind;
	struct listener *l;
	uint64_t id;
	struct netpol *pol; /* referenced */
	struct cmd *next;
};

static struct {
	int ep, wake;
	pthread_t thread;
	bool running;
	pthread_mutex_t lock;           /* the queues below */
	struct cmd *cmds, *cmds_tail;   /* protected by lock */
	struct resolve_req *done;       /* protected by lock */
	bool stop;                      /* protected by lock */
	/* the loop's own */
	struct listener *listeners;
	struct conn *conns;
	struct conn *dead; /* closed this round: freed once no event can name them */
	unsigned nconns;
	unsigned paused;   /* listeners paused (scan_listeners) */
	bool log_owed;     /* a listener has lines not logged, to count when its second ends */
	bool fd_short;     /* out of descriptors since the last accept (logged once) */
	uint64_t last_scan;
	/* statistics: written by the loop, read anywhere (relaxed atomics) */
	uint64_t accepted, allowed, denied, refused, active;
	uint64_t next_id; /* atomic */
} px = { .ep = -1, .wake = -1, .lock = PTHREAD_MUTEX_INITIALIZER };

static void stat_add(uint64_t *c, int64_t d)
{
	__atomic_add_fetch(c, (uint64_t)d, __ATOMIC_RELAXED);
}

/* The lines not logged in a second that has ended, logged as one. */
static void log_flush(struct listener *l, uint64_t sec)
{
	if (sec == l->log_sec)
		return;
	if (l->log_dropped)
		log_info(l->scope, "proxy: %u more such lines not logged (over %d a second)", l->log_dropped,
			PROXY_LOG_PER_S);
	l->log_sec = sec;
	l->log_n = l->log_dropped = 0;
}

/* A sandbox decides how often the proxy has something to say about its
 * connections (a line per refusal, held request, closed tunnel): past
 * PROXY_LOG_PER_S lines in a second they are counted, not written, so a
 * job cannot flood the daemon's log (and spend the loop on it). */
static bool log_allowed(struct listener *l)
{
	if (!l)
		return true;
	log_flush(l, util_now_ms() / 1000);
	if (l->log_n < PROXY_LOG_PER_S) {
		l->log_n++;
		return true;
	}
	l->log_dropped++;
	px.log_owed = true; /* the loop wakes for the scan that logs the count */
	return false;
}

static void wake(void)
{
	uint64_t one = 1;

	if (px.wake >= 0 && write(px.wake, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("proxy", "cannot wake the proxy loop: %s", strerror(errno));
}

static void push_cmd(struct cmd *c)
{
	c->next = NULL;
	pthread_mutex_lock(&px.lock);
	if (px.cmds_tail)
		px.cmds_tail->next = c;
	else
		px.cmds = c;
	px.cmds_tail = c;
	pthread_mutex_unlock(&px.lock);
	wake();
}

/* ---- epoll interest ------------------------------------------------------------------ */

/* Register interest want (0: none) for fd; *cur is what is registered now
 * (0: not in the set).  An fd nobody waits on is taken out of the set, not
 * left with an empty mask: epoll reports EPOLLHUP and EPOLLERR whatever the
 * mask, and a peer's reset while the connection waits for the other side
 * would wake the loop again and again. */
static void set_mask(int fd, struct tag *t, unsigned *cur, unsigned want)
{
	struct epoll_event ev = { .events = want, .data.ptr = t };

	if (fd < 0 || *cur == want)
		return;
	if (!want)
		epoll_ctl(px.ep, EPOLL_CTL_DEL, fd, NULL);
	else
		epoll_ctl(px.ep, *cur ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
	*cur = want;
}

/* Close a watched descriptor: out of the epoll set first.  A close alone
 * leaves the registration behind while another reference to the file
 * exists (a child forked for a job or a sandbox holds a copy until its
 * exec), and its event then names a connection already freed (the chaos
 * run's segfaults in proxy_main). */
static void unwatch_close(int fd, unsigned *cur)
{
	if (fd < 0)
		return;
	if (*cur)
		epoll_ctl(px.ep, EPOLL_CTL_DEL, fd, NULL);
	*cur = 0;
	close(fd);
}

/* ---- connections: life and death ------------------------------------------------------ */

static void dir_close(struct conn *c, struct dir *d)
{
	if (d->big && c->l)
		c->l->big_pipes--;
	d->big = false;
	for (int i = 0; i < 2; i++)
		if (d->pipe[i] >= 0) {
			close(d->pipe[i]);
			d->pipe[i] = -1;
		}
}

static void conn_free(struct conn *c)
{
	buf_free(&c->in);
	buf_free(&c->up);
	buf_free(&c->out);
	buf_free(&c->down);
	buf_free(&c->shs);
	netpol_put(c->pol);
	free(c);
}

static void conn_close(struct conn *c)
{
	unwatch_close(c->cfd, &c->cmask);
	unwatch_close(c->ufd, &c->umask);
	c->cfd = c->ufd = -1;
	dir_close(c, &c->d[0]);
	dir_close(c, &c->d[1]);
	if (c->prev)
		c->prev->next = c->next;
	else
		px.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	px.nconns--;
	stat_add(&px.active, -1);
	if (c->l) {
		c->l->nconns--;
		budget_give(c->l->acct, BUDGET_PROXY, 1);
	}
	c->l = NULL;
	if (c->rr && c->st == CS_RESOLVE) {
		resolve_cancel(c->rr); /* still queued: no lookup for it */
		c->zombie = true;      /* freed when the resolver hands it back */
		return;
	}
	free(c->rr); /* the addresses a connect was trying: the resolver is done with them */
	c->rr = NULL;
	c->dead_next = px.dead;
	px.dead = c;
}

static void free_dead(void)
{
	while (px.dead) {
		struct conn *c = px.dead;
		px.dead = c->dead_next;
		conn_free(c);
	}
}

static const char *reason_phrase(int status)
{
	switch (status) {
	case 400: return "Bad Request";
	case 403: return "Forbidden";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 417: return "Expectation Failed";
	case 431: return "Request Header Fields Too Large";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 504: return "Gateway Timeout";
	case 505: return "HTTP Version Not Supported";
	default: return "Error";
	}
}

/* Answer status with a one-line body, then linger and close. */
static void conn_reply(struct conn *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void conn_reply(struct conn *c, int status, const char *fmt, ...)
{
	char body[600];
	size_t blen;
	va_list ap;
	int e = 0;

	va_start(ap, fmt);
	vsnprintf(body, sizeof(body) - 1, fmt, ap);
	va_end(ap);
	blen = strlen(body);
	body[blen++] = '\n';
	body[blen] = '\0';
	if (c->ufd >= 0) {
		unwatch_close(c->ufd, &c->umask);
		c->ufd = -1;
	}
	buf_reset(&c->out);
	c->out_off = 0;
	e |= buf_addf(&c->out, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
			       "Connection: close\r\n",
		status, reason_phrase(status), strlen(body));
	if (c->id[0])
		e |= buf_addf(&c->out, "X-Sbxfs-Request-Id: %s\r\n", c->id);
	e |= buf_addf(&c->out, "\r\n%s", body);
	if (e) {
		conn_close(c);
		return;
	}
	if (status == 403)
		stat_add(&px.denied, 1);
	else
		stat_add(&px.refused, 1);
	if (log_allowed(c->l))
		log_info(c->l ? c->l->scope : "proxy", "proxy: %d %.*s", status, (int)blen - 1, body);
	c->st = CS_REPLY;
	c->deadline = util_now_ms() + PROXY_REPLY_MS;
}

/* ---- the request ------------------------------------------------------------------------ */

static void start_resolve(struct conn *c);

static void deny(struct conn *c, const char *why)
{
	if (c->id[0])
		conn_reply(c, 403, "Sandbox network policy denied %s:%d (request %s)%s%s", c->host, c->req.port, c->id,
			why ? ": " : "", why ? why : "");
	else
		conn_reply(c, 403, "Sandbox network policy denied %s:%d%s%s", c->host, c->req.port, why ? ": " : "",
			why ? why : "");
}

/* The head is complete and parsed: apply the rules, in DeerFlow's order. */
static void decide(struct conn *c)
{
	const struct netpol_conf *pc = netpol_conf(c->pol);
	enum policy_host h = policy_host_canon(c->req.host, strlen(c->req.host), c->host);
	double now = util_wall_now();

	if (h == POLICY_HOST_IP_LITERAL) {
		snprintf(c->host, sizeof(c->host), "%.*s", (int)sizeof(c->host) - 1, c->req.host);
		return deny(c, "IP literal destinations are not allowed");
	}
	if (h != POLICY_HOST_OK)
		return conn_reply(c, 400, "not a host name: %.200s", c->req.host);
	if (c->req.connect && c->req.port != 443)
		return deny(c, "CONNECT is allowed only to port 443");
	if (!c->req.connect && c->req.port != 80)
		return deny(c, "plain HTTP is allowed only to port 80");
	if (netpol_allows(c->pol, c->host, c->req.port, now))
		return start_resolve(c);
	if (netpol_record(c->pol, c->host, c->req.port, c->req.method, now, c->id))
		return deny(c, NULL); /* approval: deny, nothing recorded */
	if (pc->wait > 0) {
		c->st = CS_HOLD;
		c->deadline = util_now_ms() + (uint64_t)pc->wait * 1000;
		if (log_allowed(c->l))
			log_info(c->l->scope, "proxy: %s:%d held for approval (request %s)", c->host, c->req.port,
				c->id);
		return;
	}
	deny(c, NULL);
}

/* A decision may have come for a held connection. */
static void hold_check(struct conn *c, bool expired)
{
	int d;

	if (netpol_allows(c->pol, c->host, c->req.port, util_wall_now()))
		return start_resolve(c);
	d = netpol_decision(c->pol, c->id);
	if (d != NP_UNDECIDED)
		deny(c, d < 0 ? "the request is gone" : netpol_decision_name(d));
	else if (expired)
		deny(c, "no decision within approval_wait");
}

static void start_resolve(struct conn *c)
{
	const struct netpol_conf *pc = netpol_conf(c->pol);
	struct resolve_req *r = calloc(1, sizeof(*r));

	if (!r)
		return conn_reply(c, 502, "out of memory");
	snprintf(r->host, sizeof(r->host), "%s", c->host);
	r->port = c->req.port;
	r->mapped = policy_hosts_find(pc->hosts, pc->n_hosts, c->host);
	r->allow_private = pc->allow_private;
	r->owner = c->pol; /* a sandbox's share of the resolver threads (resolve.h) */
	r->arg = c;
	c->rr = r;
	c->st = CS_RESOLVE;
	c->connect_by = util_now_ms() + PROXY_READ_TIMEOUT_S * 1000;
	c->deadline = c->connect_by;
	r->deadline_ms = c->connect_by;
	resolve_submit(r);
}

static void try_connect(struct conn *c);

static void on_resolved(struct resolve_req *r)
{
	struct conn *c = r->arg;

	c->rr = NULL;
	if (c->zombie) {
		free(r);
		c->dead_next = px.dead;
		px.dead = c;
		return;
	}
	if (util_now_ms() >= c->connect_by) {
		conn_reply(c, 504, "cannot resolve %s within %d seconds", c->host, PROXY_READ_TIMEOUT_S);
	} else if (r->err == RESOLVE_PRIVATE) {
		char why[256];

		snprintf(why, sizeof(why), "it resolves to %s, a private or local address that can never be approved",
			r->why);
		deny(c, why);
	} else if (r->err) {
		conn_reply(c, 502, "cannot resolve %s: %s", c->host, r->why);
	} else {
		c->rr = r; /* keep the addresses while connecting */
		c->ai = 0;
		c->st = CS_CONNECT;
		c->deadline = c->connect_by;
		try_connect(c);
		return;
	}
	free(r);
}

static void tcp_nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* The client side of a connection is always a loopback connection (the
 * listener is 127.0.0.1 in the sandbox's namespace): no loss, no queue, no
 * path for a congestion control to learn.  The host's default may pace
 * (bbr, as here), which on a loopback only costs CPU per packet and leaves
 * gaps in the stream: reno there gave 12-33% more throughput on the bench's
 * proxy row (docs/network.md).  reno is built into every kernel and
 * allowed to everyone; a refusal keeps the default.  The upstream side keeps
 * the host's choice: it crosses a real network. */
static void tcp_loopback_cc(int fd)
{
	static const char cc[] = "reno";

	setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, sizeof(cc) - 1);
}

/* Connect to the next address of c->rr; replies when none is left. */
static void try_connect(struct conn *c)
{
	struct resolve_req *r = c->rr;

	while (c->ai < r->n) {
		struct sockaddr *a = (struct sockaddr *)&r->addrs[c->ai];
		int fd = socket(a->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

		if (fd < 0)
			break;
		if (connect(fd, a, r->lens[c->ai]) == 0 || errno == EINPROGRESS) {
			c->ufd = fd;
			c->umask = 0;
			tcp_nodelay(fd);
			return;
		}
		close(fd);
		c->ai++;
	}
	c->rr = NULL;
	free(r);
	conn_reply(c, 502, "cannot connect to %s:%d", c->host, c->req.port);
}

static void start_relay(struct conn *c);

/* Upstream is connected. */
static void on_connected(struct conn *c)
{
	free(c->rr);
	c->rr = NULL;
	stat_add(&px.allowed, 1);
	if (c->req.connect) {
		buf_reset(&c->out);
		c->out_off = 0;
		if (buf_adds(&c->out, "HTTP/1.1 200 Connection Established\r\n\r\n"))
			return conn_close(c);
		c->st = CS_HELLO;
		c->deadline = util_now_ms() + PROXY_READ_TIMEOUT_S * 1000;
		return;
	}
	/* plain HTTP: the rewritten head, then the body that came with it */
	if (http_upstream_head(c->in.ptr, c->head_len, &c->req, &c->up))
		return conn_reply(c, 502, "out of memory");
	c->body_chunked = c->req.chunked;
	c->body_left = c->req.content_length > 0 ? c->req.content_length : 0;
	c->body_done = !c->body_chunked && c->body_left == 0;
	{
		const char *rest = c->in.ptr + c->head_len;
		size_t n = c->in.len - c->head_len, take = 0;

		if (!c->body_done && c->body_chunked) {
			ssize_t t = http_chunked_feed(&c->ch, rest, n);
			if (t < 0)
				return conn_reply(c, 400, "malformed chunked body");
			take = (size_t)t;
			c->body_done = c->ch.done;
		} else if (!c->body_done) {
			take = (long long)n < c->body_left ? n : (size_t)c->body_left;
			c->body_left -= (long long)take;
			c->body_done = c->body_left == 0;
		}
		/* what follows the body (a pipelined request) is never forwarded */
		if (take && buf_add(&c->up, rest, take))
			return conn_reply(c, 502, "out of memory");
	}
	start_relay(c);
}

/* A bigger pipe moves more per splice, but what it holds is the daemon's
 * memory (root: no pipe-user-pages limit), and a job that opens its 512
 * connections and never reads could pin a GiB.  So a sandbox's first
 * PROXY_BIG_PIPES pipes get PROXY_PIPE_SIZE, later ones the kernel's 64 KiB
 * (at most 16 MiB + 512 x 2 x 64 KiB = 80 MiB a sandbox); a refused size
 * keeps the default too. */
static int pipe_new(struct conn *c, struct dir *d)
{
	int size;

	if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC))
		return -1;
	if (c->l && c->l->big_pipes < PROXY_BIG_PIPES &&
	    (fcntl(d->pipe[1], F_SETPIPE_SZ, PROXY_PIPE_SIZE) >= 0 ||
	     fcntl(d->pipe[1], F_SETPIPE_SZ, 256 * 1024) >= 0)) {
		d->big = true;
		c->l->big_pipes++;
	}
	size = fcntl(d->pipe[1], F_GETPIPE_SZ);
	d->cap = size > 0 ? (size_t)size : 65536;
	return 0;
}

static void start_relay(struct conn *c)
{
	c->st = CS_RELAY;
	c->deadline = util_now_ms() + PROXY_IDLE_S * 1000ULL;
	c->d[0] = (struct dir){ .from = c->cfd, .to = c->ufd, .pipe = { -1, -1 } };
	c->d[1] = (struct dir){ .from = c->ufd, .to = c->cfd, .pipe = { -1, -1 } };
	if (pipe_new(c, &c->d[1]) || (c->req.connect && pipe_new(c, &c->d[0])))
		return conn_close(c);
}

/* ---- reading and writing ---------------------------------------------------------------- */

/* Read what fd has into b, up to max bytes in b.  1: got bytes, 0: EOF,
 * -1: error or nothing now (errno EAGAIN, E2BIG when b is full). */
static int read_some(int fd, struct buf *b, size_t max)
{
	char tmp[16384];
	size_t room = max > b->len ? max - b->len : 0;
	ssize_t n;

	if (room == 0) {
		errno = E2BIG;
		return -1;
	}
	n = recv(fd, tmp, room < sizeof(tmp) ? room : sizeof(tmp), 0);
	if (n > 0)
		return buf_add(b, tmp, (size_t)n) ? -1 : 1;
	return n == 0 ? 0 : -1;
}

/* Read what the client sent into c->in.  As read_some. */
static int read_client(struct conn *c)
{
	return read_some(c->cfd, &c->in, PROXY_IN_MAX);
}

/* Read from fd until it has nothing more now: 1 bytes came (or none),
 * 0 EOF, -1 an error (not EAGAIN or a full buffer). */
static int read_all(int fd, struct buf *b, size_t max, bool *got)
{
	int r;

	*got = false;
	for (;;) {
		r = read_some(fd, b, max);
		if (r == 0)
			return 0;
		if (r < 0)
			return errno == EAGAIN || errno == EINTR || errno == E2BIG ? 1 : -1;
		*got = true;
	}
}

/* Flush b from *off to fd.  1: all written, 0: more to write, -1: error. */
static int flush(int fd, struct buf *b, size_t *off)
{
	while (*off < b->len) {
		ssize_t n = send(fd, b->ptr + *off, b->len - *off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			*off += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		return -1;
	}
	buf_reset(b);
	*off = 0;
	return 1;
}

static void on_head(struct conn *c)
{
	const char *why;
	ssize_t hl;
	int r, status;

	for (;;) {
		r = read_client(c);
		if (r == 0)
			return conn_close(c); /* gone before asking anything */
		if (r < 0)
			break;
	}
	if (errno != EAGAIN && errno != EINTR && errno != E2BIG)
		return conn_close(c);
	hl = http_head_len(c->in.ptr ? c->in.ptr : "", c->in.len, c->head_scanned);
	c->head_scanned = c->in.len;
	if (hl < 0)
		return conn_reply(c, 431, "the request head is larger than %d bytes", HTTP_HEAD_MAX);
	if (hl == 0)
		return;
	c->head_len = (size_t)hl;
	status = http_parse(c->in.ptr, c->head_len, &c->req, &why);
	if (status)
		return conn_reply(c, status, "%s", why);
	decide(c);
}

/* A tunnel whose client broke the handshake's rules (tls.h): a fatal TLS
 * alert (access_denied), so the client sees why at once, then closed. */
static void tls_refuse(struct conn *c, enum tls_hello h)
{
	static const char alert[] = { 0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31 };

	if (send(c->cfd, alert, sizeof(alert), MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		log_debug("proxy", "cannot send the TLS alert: %s", strerror(errno));
	stat_add(&px.denied, 1);
	if (log_allowed(c->l))
		log_info(c->l->scope, "proxy: CONNECT %s:443 closed: %s%s", c->host, tls_hello_name(h),
			c->tw.retries ? " (after a HelloRetryRequest)" : "");
	conn_close(c);
}

static void on_relay(struct conn *c);

static void on_hello(struct conn *c)
{
	enum tls_hello h;
	size_t used;
	int r;

	if (c->out.len) { /* the 200 first */
		r = flush(c->cfd, &c->out, &c->out_off);
		if (r < 0)
			return conn_close(c);
		if (r == 0)
			return;
	}
	for (;;) {
		r = read_client(c);
		if (r == 0)
			return conn_close(c);
		if (r < 0)
			break;
	}
	if (errno != EAGAIN && errno != EINTR && errno != E2BIG)
		return conn_close(c);
	h = tls_watch_client(&c->tw, (const unsigned char *)c->in.ptr + c->head_len, c->in.len - c->head_len,
		c->host, &used);
	if (h == TLS_HELLO_MORE && c->in.len < PROXY_IN_MAX)
		return;
	if (h != TLS_HELLO_OK)
		return tls_refuse(c, h == TLS_HELLO_MORE ? TLS_HELLO_BAD : h);
	/* the checked records go upstream first; what follows is watched */
	if (buf_add(&c->up, c->in.ptr + c->head_len, used))
		return conn_close(c);
	buf_drop(&c->in, c->head_len + used);
	c->head_len = 0;
	c->watching = true;
	start_relay(c);
}

/* ---- watching a tunnel's handshake (tls.h) ---------------------------------------------- */

/* The handshake is over for the proxy: the server chose, or the client
 * closed its side (then what it left unchecked is dropped).  The relay
 * splices from now on, after what the buffers still hold. */
static void watch_end(struct conn *c, bool client_eof)
{
	c->watching = false;
	if (!client_eof && c->in.len) {
		/* the rest of a record begun after the ServerHello: nothing to check in it any more */
		if (buf_add(&c->up, c->in.ptr, c->in.len))
			return conn_close(c);
	}
	buf_reset(&c->in);
	buf_free(&c->shs);
}

/* Server -> client while watching: everything goes on (it is the client
 * that is checked), and the records are read for the ServerHello.  0, or
 * -1 when c was closed. */
static int watch_down(struct conn *c, unsigned *cm, unsigned *um)
{
	enum tls_hello h;
	size_t used;
	bool got = false;
	int r;

	if (!c->down.len && !c->s_eof) {
		r = read_all(c->ufd, &c->down, PROXY_DOWN_MAX, &got);
		if (r < 0) {
			conn_close(c);
			return -1;
		}
		if (got && buf_add(&c->shs, c->down.ptr, c->down.len)) {
			conn_close(c);
			return -1;
		}
		c->s_eof = r == 0;
		if (got) {
			h = tls_watch_server(&c->tw, (const unsigned char *)c->shs.ptr, c->shs.len, &used);
			if (h != TLS_HELLO_OK) {
				if (log_allowed(c->l))
					log_info(c->l->scope, "proxy: CONNECT %s:443 closed: the server's handshake: %s",
						c->host, tls_hello_name(h));
				conn_close(c);
				return -1;
			}
			buf_drop(&c->shs, used);
			c->deadline = util_now_ms() + PROXY_IDLE_S * 1000ULL;
		}
	}
	if (c->down.len) {
		r = flush(c->cfd, &c->down, &c->down_off);
		if (r < 0) {
			conn_close(c);
			return -1;
		}
		if (r == 0)
			*cm |= EPOLLOUT;
	}
	if (!c->down.len && c->s_eof)
		shutdown(c->cfd, SHUT_WR); /* the server ended before it chose */
	if (!c->down.len && !c->s_eof)
		*um |= EPOLLIN;
	return 0;
}

/* Client -> server while watching: only records tls_watch_client passed.
 * 0, 1 when the client ended its side, or -1 when c was closed. */
static int watch_up(struct conn *c, unsigned *cm, unsigned *um)
{
	enum tls_hello h;
	size_t used;
	bool got = false;
	int r, eof = 0;

	if (c->up.len) {
		r = flush(c->ufd, &c->up, &c->up_off);
		if (r < 0) {
			conn_close(c);
			return -1;
		}
		if (r == 0) {
			*um |= EPOLLOUT;
			return 0; /* the server reads slowly: the client waits */
		}
	}
	r = read_all(c->cfd, &c->in, PROXY_IN_MAX, &got);
	if (r < 0) {
		conn_close(c);
		return -1;
	}
	eof = r == 0;
	if (got) {
		h = tls_watch_client(&c->tw, (const unsigned char *)c->in.ptr, c->in.len, c->host, &used);
		if (h == TLS_HELLO_OK && !used && c->in.len >= PROXY_IN_MAX)
			h = TLS_HELLO_BAD;
		if (h != TLS_HELLO_OK) {
			tls_refuse(c, h);
			return -1;
		}
		if (used && buf_add(&c->up, c->in.ptr, used)) {
			conn_close(c);
			return -1;
		}
		buf_drop(&c->in, used);
		c->deadline = util_now_ms() + PROXY_IDLE_S * 1000ULL;
		if (c->up.len) {
			r = flush(c->ufd, &c->up, &c->up_off);
			if (r < 0) {
				conn_close(c);
				return -1;
			}
			if (r == 0)
				*um |= EPOLLOUT;
		}
	}
	if (eof)
		return 1;
	if (!c->up.len)
		*cm |= EPOLLIN;
	return 0;
}

static void on_watch(struct conn *c)
{
	unsigned cm = 0, um = 0;
	int up;

	if (watch_down(c, &cm, &um))
		return;
	up = watch_up(c, &cm, &um);
	if (up < 0)
		return;
	if (c->tw.done || up == 1) {
		watch_end(c, up == 1);
		if (c->cfd >= 0)
			on_relay(c);
		return;
	}
	set_mask(c->cfd, &c->ctag, &c->cmask, cm);
	set_mask(c->ufd, &c->utag, &c->umask, um);
}

/* The plain-HTTP body: client -> c->up, bounded by its framing. */
static int pump_body(struct conn *c)
{
	struct dir *d = &c->d[0];
	char tmp[16384];

	while (!d->done) {
		ssize_t n, take;

		if (c->up.len) {
			int r = flush(c->ufd, &c->up, &c->up_off);
			if (r < 0)
				return -1;
			if (r == 0) {
				d->want_out = true;
				return 0;
			}
		}
		if (c->body_done) {
			d->eof = d->done = true;
			break;
		}
		n = recv(c->cfd, tmp, sizeof(tmp), 0);
		if (n == 0)
			return -1; /* the client went away in the middle of its body */
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR) {
				d->want_in = true;
				return 0;
			}
			return -1;
		}
		if (c->body_chunked) {
			take = http_chunked_feed(&c->ch, tmp, (size_t)n);
			if (take < 0)
				return -1;
			c->body_done = c->ch.done;
		} else {
			take = n < c->body_left ? n : (ssize_t)c->body_left;
			c->body_left -= take;
			c->body_done = c->body_left == 0;
		}
		if (take && buf_add(&c->up, tmp, (size_t)take))
			return -1;
		c->deadline = util_now_ms() + PROXY_IDLE_S * 1000ULL;
	}
	return 0;
}

/* Move bytes from d->from to d->to through d's pipe, reading and writing
 * in the same round whenever each side can (the pipe is both sides' buffer,
 * so a slow reader of one never stalls the other).  0, or -1 on error. */
static int pump(struct conn *c, struct dir *d)
{
	while (!d->done) {
		bool progress = false;
		ssize_t n;

		if (!d->eof && d->in_pipe < d->cap) {
			n = splice(d->from, NULL, d->pipe[1], NULL, d->cap - d->in_pipe,
				SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
			if (n > 0) {
				d->in_pipe += (size_t)n;
				progress = true;
			} else if (n == 0) {
				d->eof = true;
				progress = true;
			} else if (errno == EAGAIN || errno == EINTR) {
				/* EAGAIN with bytes waiting in the socket is a full pipe:
				 * a pipe fills by its slots (one per piece the socket got,
				 * 256 in 1 MiB) long before in_pipe reaches cap, and
				 * waiting for input then would wake the loop at once,
				 * again and again; the writer side wakes it instead */
				int queued = 0;

				if (!d->in_pipe || ioctl(d->from, FIONREAD, &queued) || queued <= 0)
					d->want_in = true;
			} else {
				return -1;
			}
		}
		if (d->in_pipe) {
			n = splice(d->pipe[0], NULL, d->to, NULL, d->in_pipe, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
			if (n > 0) {
				d->in_pipe -= (size_t)n;
				progress = true;
				c->deadline = util_now_ms() + PROXY_IDLE_S * 1000ULL;
			} else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
				d->want_out = true;
			} else {
				return -1;
			}
		}
		if (d->eof && !d->in_pipe) {
			/* everything delivered: pass the end on */
			shutdown(d->to, SHUT_WR);
			d->done = true;
			break;
		}
		if (!progress)
			break;
		d->want_in = d->want_out = false; /* looking again */
	}
	if (d->in_pipe >= d->cap)
		d->want_in = false; /* full: wait for the writer side */
	return 0;
}

static void on_relay(struct conn *c)
{
	int r;

	if (c->watching)
		return on_watch(c);
	c->d[0].want_in = c->d[0].want_out = c->d[1].want_in = c->d[1].want_out = false;
	if (c->req.connect) {
		if (c->up.len) { /* what the handshake's watch let through */
			r = flush(c->ufd, &c->up, &c->up_off);
			if (r < 0)
				return conn_close(c);
			if (r == 0) {
				c->d[0].want_out = true;
				goto masks;
			}
		}
		r = pump(c, &c->d[0]);
	} else {
		r = pump_body(c);
	}
	if (!r && c->down.len) { /* what the server sent while the handshake was watched */
		int f = flush(c->cfd, &c->down, &c->down_off);

		if (f < 0)
			return conn_close(c);
		if (f == 0) {
			c->d[1].want_out = true;
			goto masks;
		}
	}
	if (r || pump(c, &c->d[1]))
		return conn_close(c);
	if (c->d[1].done && (c->d[0].done || !c->req.connect)) {
		if (c->req.connect && c->d[0].done)
			return conn_close(c);
		/* plain: the answer is through; drop what else the client sent */
		c->st = CS_LINGER;
		c->deadline = util_now_ms() + PROXY_LINGER_MS;
		unwatch_close(c->ufd, &c->umask);
		c->ufd = -1;
		return;
	}
masks:
	set_mask(c->cfd, &c->ctag, &c->cmask,
		(c->d[0].want_in ? EPOLLIN : 0) | (c->d[1].want_out ? EPOLLOUT : 0));
	set_mask(c->ufd, &c->utag, &c->umask,
		(c->d[1].want_in ? EPOLLIN : 0) | (c->d[0].want_out ? EPOLLOUT : 0));
}

static void on_reply(struct conn *c)
{
	int r = flush(c->cfd, &c->out, &c->out_off);

	if (r < 0)
		return conn_close(c);
	if (r == 0)
		return;
	shutdown(c->cfd, SHUT_WR);
	c->st = CS_LINGER;
	c->deadline = util_now_ms() + PROXY_LINGER_MS;
}

static void on_linger(struct conn *c)
{
	char tmp[16384];

	for (;;) {
		ssize_t n = recv(c->cfd, tmp, sizeof(tmp), 0);
		if (n > 0)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		return conn_close(c); /* EOF or error: the client has read the answer */
	}
}

/* Where c is now decides what it waits for. */
static void conn_masks(struct conn *c)
{
	switch (c->st) {
	case CS_HEAD:
		set_mask(c->cfd, &c->ctag, &c->cmask, EPOLLIN);
		break;
	case CS_HOLD:
		set_mask(c->cfd, &c->ctag, &c->cmask, EPOLLRDHUP);
		break;
	case CS_RESOLVE:
		/* as when held: a client that gives up cancels its lookup */
		set_mask(c->cfd, &c->ctag, &c->cmask, EPOLLRDHUP);
		break;
	case CS_CONNECT:
		set_mask(c->cfd, &c->ctag, &c->cmask, 0);
		set_mask(c->ufd, &c->utag, &c->umask, EPOLLOUT);
		break;
	case CS_HELLO:
		set_mask(c->cfd, &c->ctag, &c->cmask, c->out.len ? EPOLLOUT : EPOLLIN);
		set_mask(c->ufd, &c->utag, &c->umask, 0);
		break;
	case CS_RELAY:
		break; /* on_relay sets them */
	case CS_REPLY:
		set_mask(c->cfd, &c->ctag, &c->cmask, EPOLLOUT);
		break;
	case CS_LINGER:
		set_mask(c->cfd, &c->ctag, &c->cmask, EPOLLIN);
		break;
	}
}

/* Drive c after an event (events of the client side, or of the upstream
 * side when upstream_event) until its state stops changing. */
static void conn_step(struct conn *c, bool upstream_event, unsigned events)
{
	enum cstate before;

	if (!upstream_event && (events & (EPOLLERR | EPOLLHUP)) &&
	    (c->st == CS_HOLD || c->st == CS_RESOLVE || c->st == CS_CONNECT))
		return conn_close(c); /* the client went away while we worked for it */
	for (;;) {
		before = c->st;
		switch (c->st) {
		case CS_HEAD:
			on_head(c);
			break;
		case CS_HOLD:
			if (events & EPOLLRDHUP)
				return conn_close(c); /* the client gave up waiting */
			break;
		case CS_RESOLVE:
			if (events & EPOLLRDHUP)
				return conn_close(c); /* the client gave up waiting */
			break;
		case CS_CONNECT:
			if (upstream_event) {
				int err = 0;
				socklen_t len = sizeof(err);

				getsockopt(c->ufd, SOL_SOCKET, SO_ERROR, &err, &len);
				if (err == EINPROGRESS || err == EALREADY) {
					break;
				} else if (err) {
					unwatch_close(c->ufd, &c->umask);
					c->ufd = -1;
					c->ai++;
					try_connect(c);
				} else {
					on_connected(c);
				}
			}
			break;
		case CS_HELLO:
			on_hello(c);
			break;
		case CS_RELAY:
			on_relay(c);
			break;
		case CS_REPLY:
			on_reply(c);
			break;
		case CS_LINGER:
			on_linger(c);
			break;
		}
		if (c->cfd < 0)
			return; /* closed */
		if (c->st == before)
			break;
		upstream_event = false;
		events = 0;
	}
	conn_masks(c);
}

/* A state change made outside conn_step (a command, a timer, a resolve). */
static void conn_poke(struct conn *c)
{
	if (c->cfd >= 0)
		conn_step(c, false, 0);
}

/* ---- listeners ------------------------------------------------------------------------------ */

static void on_accept(struct listener *l)
{
	for (;;) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct conn *c;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE) {
				/* nothing here frees a descriptor: a listener left in the set
				 * (level-triggered) would wake the loop again at once, for
				 * as long as it lasts; it waits for the next scan instead,
				 * its connections in its backlog */
				if (!px.fd_short)
					log_warn(l->scope, "proxy: out of file descriptors: new connections wait");
				px.fd_short = true;
				if (!l->paused) {
					epoll_ctl(px.ep, EPOLL_CTL_DEL, l->fd, NULL);
					l->paused = true;
					px.paused++;
				}
			} else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
				log_warn(l->scope, "proxy: accept: %s", strerror(errno));
			}
			return;
		}
		px.fd_short = false;
		stat_add(&px.accepted, 1);
		/* the sandbox's, its user's and everyone's caps (budget.h: the
		 * refusal is logged there, at most every few seconds) */
		if (budget_take(l->acct, BUDGET_PROXY, 1)) {
			stat_add(&px.refused, 1);
			close(fd); /* past the limits: no answer at all */
			continue;
		}
		if (!(c = calloc(1, sizeof(*c)))) {
			budget_give(l->acct, BUDGET_PROXY, 1);
			stat_add(&px.refused, 1);
			close(fd);
			continue;
		}
		c->ctag = (struct tag){ TAG_CLIENT, c };
		c->utag = (struct tag){ TAG_UPSTREAM, c };
		c->l = l;
		c->pol = netpol_get(l->pol);
		c->cfd = fd;
		c->ufd = -1;
		c->cmask = c->umask = 0;
		c->d[0].pipe[0] = c->d[0].pipe[1] = c->d[1].pipe[0] = c->d[1].pipe[1] = -1;
		buf_init(&c->in, PROXY_IN_MAX);
		buf_init(&c->up, HTTP_HEAD_MAX + 2 * TLS_HELLO_MAX + 65536);
		buf_init(&c->out, 4096);
		buf_init(&c->down, PROXY_DOWN_MAX);
		buf_init(&c->shs, PROXY_SHS_MAX);
		c->tw = (struct tls_watch)TLS_WATCH_INIT;
		c->st = CS_HEAD;
		c->deadline = util_now_ms() + PROXY_READ_TIMEOUT_S * 1000;
		tcp_nodelay(fd);
		tcp_loopback_cc(fd);
		c->next = px.conns;
		if (px.conns)
			px.conns->prev = c;
		px.conns = c;
		px.nconns++;
		l->nconns++;
		stat_add(&px.active, 1);
		conn_masks(c);
	}
}

/* Paused listeners back into the set, counts of lines not logged out (a
 * scan: at most every PROXY_SCAN_MS). */
static void scan_listeners(uint64_t now)
{
	px.log_owed = false;
	for (struct listener *l = px.listeners; l; l = l->next) {
		log_flush(l, now / 1000);
		px.log_owed = px.log_owed || l->log_dropped;
	}
	for (struct listener *l = px.listeners; l && px.paused; l = l->next)
		if (l->paused) {
			struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &l->tag };
			epoll_ctl(px.ep, EPOLL_CTL_ADD, l->fd, &ev);
			l->paused = false;
			px.paused--;
		}
}

static void listener_free(struct listener *l)
{
	struct listener **pp;

	for (pp = &px.listeners; *pp; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	for (struct conn *c = px.conns, *next; c; c = next) {
		next = c->next;
		if (c->l == l)
			conn_close(c);
	}
	if (l->paused)
		px.paused--;
	else
		epoll_ctl(px.ep, EPOLL_CTL_DEL, l->fd, NULL); /* as unwatch_close */
	close(l->fd);
	netpol_put(l->pol);
	budget_acct_put(l->acct);
	free(l);
}

struct listen_call {
	int fd;
};

static int listen_here(void *arg)
{
	struct listen_call *lc = arg;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(PROXY_PORT) };
	int one = 1, fd;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 1024)) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	lc->fd = fd;
	return 0;
}

uint64_t proxy_listen(int nsfd, struct netpol *pol, const char *scope)
{
	struct listen_call lc = { -1 };
	struct listener *l;
	struct cmd *c;

	if (!px.running) {
		errno = ESHUTDOWN;
		return 0;
	}
	if (egress_in_netns(nsfd, listen_here, &lc))
		return 0;
	l = calloc(1, sizeof(*l));
	c = calloc(1, sizeof(*c));
	if (!l || !c) {
		close(lc.fd);
		free(l);
		free(c);
		errno = ENOMEM;
		return 0;
	}
	l->tag = (struct tag){ TAG_LISTENER, l };
	l->fd = lc.fd;
	l->pol = netpol_get(pol);
	l->id = __atomic_add_fetch(&px.next_id, 1, __ATOMIC_RELAXED);
	snprintf(l->scope, sizeof(l->scope), "%s", scope);
	{ /* scope is "user/thread": the account of both */
		char user[NAMES_SCOPE_MAX];
		size_t ul = strcspn(scope, "/");
		snprintf(user, sizeof(user), "%.*s", (int)ul, scope);
		l->acct = budget_acct_get(user, scope[ul] ? scope + ul + 1 : "");
	}
	c->kind = CMD_LISTEN;
	c->l = l;
	c->id = l->id;
	push_cmd(c);
	return l->id;
}

void proxy_unlisten(uint64_t id)
{
	struct cmd *c;

	if (!id)
		return;
	c = calloc(1, sizeof(*c));
	if (!c) {
		log_err("proxy", "out of memory: listener %llu stays open", (unsigned long long)id);
		return;
	}
	c->kind = CMD_UNLISTEN;
	c->id = id;
	push_cmd(c);
}

void proxy_kick(struct netpol *pol)
{
	struct cmd *c = calloc(1, sizeof(*c));

	if (!c) /* held connections see the decision at their deadline */
		return;
	c->kind = CMD_KICK;
	c->pol = netpol_get(pol);
	push_cmd(c);
}

void proxy_stats(struct proxy_stats *st)
{
	st->accepted = __atomic_load_n(&px.accepted, __ATOMIC_RELAXED);
	st->allowed = __atomic_load_n(&px.allowed, __ATOMIC_RELAXED);
	st->denied = __atomic_load_n(&px.denied, __ATOMIC_RELAXED);
	st->refused = __atomic_load_n(&px.refused, __ATOMIC_RELAXED);
	st->active = __atomic_load_n(&px.active, __ATOMIC_RELAXED);
}

/* ---- the loop ----------------------------------------------------------------------------- */

static void resolved_cb(struct resolve_req *r)
{
	pthread_mutex_lock(&px.lock);
	r->next = px.done;
	px.done = r;
	pthread_mutex_unlock(&px.lock);
	wake();
}

static void run_commands(void)
{
	struct cmd *cmds;
	struct resolve_req *done;

	pthread_mutex_lock(&px.lock);
	cmds = px.cmds;
	px.cmds = px.cmds_tail = NULL;
	done = px.done;
	px.done = NULL;
	pthread_mutex_unlock(&px.lock);
	while (done) {
		struct resolve_req *r = done;
		struct conn *c = r->arg;

		done = r->next;
		on_resolved(r); /* c stays allocated until free_dead() */
		conn_poke(c);
	}
	while (cmds) {
		struct cmd *c = cmds;

		cmds = c->next;
		if (c->kind == CMD_LISTEN) {
			struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &c->l->tag };
			c->l->next = px.listeners;
			px.listeners = c->l;
			epoll_ctl(px.ep, EPOLL_CTL_ADD, c->l->fd, &ev);
		} else if (c->kind == CMD_UNLISTEN) {
			for (struct listener *l = px.listeners; l; l = l->next)
				if (l->id == c->id) {
					listener_free(l);
					break;
				}
		} else {
			for (struct conn *k = px.conns, *next; k; k = next) {
				next = k->next;
				if (k->st == CS_HOLD && k->pol == c->pol) {
					hold_check(k, false);
					conn_poke(k);
				}
			}
			netpol_put(c->pol);
		}
		free(c);
	}
}

static void scan_deadlines(uint64_t now)
{
	for (struct conn *c = px.conns, *next; c; c = next) {
		next = c->next;
		if (!c->deadline || now < c->deadline)
			continue;
		switch (c->st) {
		case CS_HEAD:
			conn_reply(c, 408, "no complete request within %d seconds", PROXY_READ_TIMEOUT_S);
			break;
		case CS_HOLD:
			hold_check(c, true);
			break;
		case CS_RESOLVE:
			c->deadline = 0; /* the resolver answers; connect_by is checked then */
			continue;
		case CS_CONNECT:
			conn_reply(c, 504, "no connection to %s:%d within %d seconds", c->host, c->req.port,
				PROXY_READ_TIMEOUT_S);
			break;
		case CS_HELLO:
			if (log_allowed(c->l))
				log_info(c->l->scope, "proxy: CONNECT %s:443 closed: no ClientHello within %d seconds",
					c->host, PROXY_READ_TIMEOUT_S);
			conn_close(c);
			continue;
		case CS_RELAY:
		case CS_REPLY:
		case CS_LINGER:
			conn_close(c);
			continue;
		}
		conn_poke(c);
	}
}

static void *proxy_main(void *arg)
{
	struct epoll_event evs[256];

	(void)arg;
	pthread_setname_np(pthread_self(), "sbxfs-proxy");
	for (;;) {
		int n = epoll_wait(px.ep, evs, 256, px.nconns || px.paused || px.log_owed ? PROXY_SCAN_MS : -1);
		uint64_t now;
		bool stop;

		for (int i = 0; i < n; i++) {
			struct tag *t = evs[i].data.ptr;

			if (t->kind == TAG_WAKE) {
				uint64_t v;
				if (read(px.wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
					log_warn("proxy", "eventfd: %s", strerror(errno));
			} else if (t->kind == TAG_LISTENER) {
				on_accept(t->p);
			} else {
				struct conn *c = t->p;
				/* an earlier event of this round may have closed it */
				if (c->cfd >= 0)
					conn_step(c, t->kind == TAG_UPSTREAM, evs[i].events);
			}
		}
		run_commands();
		now = util_now_ms();
		if (now - px.last_scan >= PROXY_SCAN_MS) {
			px.last_scan = now;
			scan_deadlines(now);
			scan_listeners(now);
		}
		free_dead();
		pthread_mutex_lock(&px.lock);
		stop = px.stop;
		pthread_mutex_unlock(&px.lock);
		if (stop)
			break;
	}
	while (px.listeners)
		listener_free(px.listeners);
	free_dead();
	return NULL;
}

static struct tag wake_tag = { TAG_WAKE, NULL };

int proxy_init(void)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &wake_tag };
	int e;

	px.ep = epoll_create1(EPOLL_CLOEXEC);
	px.wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (px.ep < 0 || px.wake < 0 || epoll_ctl(px.ep, EPOLL_CTL_ADD, px.wake, &ev))
		return errno;
	e = resolve_init(resolved_cb);
	if (e)
		return e;
	px.stop = false;
	e = pthread_create(&px.thread, NULL, proxy_main, NULL);
	if (e) {
		resolve_shutdown();
		return e;
	}
	px.running = true;
	return 0;
}

void proxy_shutdown(void)
{
	if (!px.running)
		return;
	pthread_mutex_lock(&px.lock);
	px.stop = true;
	pthread_mutex_unlock(&px.lock);
	wake();
	pthread_join(px.thread, NULL);
	px.running = false;
	/* connections waiting for a resolve are freed when it comes back */
	resolve_shutdown();
	run_commands();
	while (px.listeners) /* listen commands that came after the stop */
		listener_free(px.listeners);
	free_dead();
	close(px.ep);
	close(px.wake);
	px.ep = px.wake = -1;
}
