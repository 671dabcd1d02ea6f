/* SPDX-License-Identifier: MIT */
/*
 * resolve.c - resolver threads for the proxy (see resolve.h).  Why threads
 * and not getaddrinfo_a(): glibc's getaddrinfo_a() also runs getaddrinfo()
 * on threads of its own, with completion by signal or by a new thread per
 * request; threads of our own with one queue are simpler to bound and to
 * stop.
 *
 * The queue is served in order, except that a request whose owner already
 * has RESOLVE_PER_OWNER lookups in progress waits for one of them and lets
 * later requests of other owners pass (resolve.h says why).
 *
 * Threads are added, never removed before shutdown: whenever a queued
 * request may start its lookup now and every thread is in a lookup (checked
 * at each submit and each time a thread begins a lookup), one more is
 * started, up to RESOLVE_THREADS_MAX.  pthread_create runs outside the lock,
 * in a slot taken under it; resolve_shutdown waits for those in progress.
 */
#define _GNU_SOURCE
#include "resolve.h"

#include "../common/log.h"
#include "../common/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum slot_state { SLOT_FREE, SLOT_CREATING, SLOT_RUNNING };

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct resolve_req *head, *tail; /* protected by lock */
	bool stop;                       /* protected by lock */
	struct {
		enum slot_state state; /* protected by lock */
		bool on;               /* a lookup in progress; protected by lock */
		const void *owner;     /* ... for this sandbox; protected by lock */
		pthread_t thread;      /* set by pthread_create before state leaves SLOT_CREATING */
	} slot[RESOLVE_THREADS_MAX];
	uint64_t grow_after;             /* no thread before (after a failed start); protected by lock */
	void (*done)(struct resolve_req *r);
} rs = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static void *resolve_main(void *arg);

/* Is a an address of this host (in the daemon's network namespace)? */
static bool addr_is_local(const struct sockaddr *a, socklen_t len)
{
	struct sockaddr_storage ss;
	int fd = socket(a->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	bool local;

	if (fd < 0)
		return true; /* cannot tell: refuse */
	memcpy(&ss, a, len);
	if (a->sa_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	local = bind(fd, (struct sockaddr *)&ss, len) == 0 || errno == EADDRINUSE || errno == EACCES;
	close(fd);
	return local;
}

static void add_addr(struct resolve_req *r, const struct sockaddr *a, socklen_t len)
{
	if (r->n >= RESOLVE_MAX_ADDRS)
		return;
	memcpy(&r->addrs[r->n], a, len);
	if (a->sa_family == AF_INET)
		((struct sockaddr_in *)&r->addrs[r->n])->sin_port = htons((uint16_t)r->port);
	else
		((struct sockaddr_in6 *)&r->addrs[r->n])->sin6_port = htons((uint16_t)r->port);
	r->lens[r->n++] = len;
}

void resolve_now(struct resolve_req *r)
{
	r->n = 0;
	r->err = RESOLVE_OK;
	r->why[0] = '\0';
	if (r->mapped) {
		for (size_t i = 0; i < r->mapped->n_addrs; i++) {
			struct sockaddr_in s4 = { .sin_family = AF_INET };
			struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };

			if (inet_pton(AF_INET, r->mapped->addrs[i], &s4.sin_addr) == 1)
				add_addr(r, (struct sockaddr *)&s4, sizeof(s4));
			else if (inet_pton(AF_INET6, r->mapped->addrs[i], &s6.sin6_addr) == 1)
				add_addr(r, (struct sockaddr *)&s6, sizeof(s6));
		}
	} else {
		struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
		int e = getaddrinfo(r->host, NULL, &hints, &res);

		if (e) {
			r->err = e == EAI_NONAME || e == EAI_NODATA ? RESOLVE_NONAME : RESOLVE_FAILED;
			snprintf(r->why, sizeof(r->why), "%s", gai_strerror(e));
			return;
		}
		for (struct addrinfo *a = res; a; a = a->ai_next)
			if (a->ai_family == AF_INET || a->ai_family == AF_INET6)
				add_addr(r, a->ai_addr, a->ai_addrlen);
		freeaddrinfo(res);
	}
	if (r->n == 0) {
		r->err = RESOLVE_NONAME;
		snprintf(r->why, sizeof(r->why), "no address");
		return;
	}
	if (r->allow_private)
		return;
	for (int i = 0; i < r->n; i++) {
		const struct sockaddr *a = (struct sockaddr *)&r->addrs[i];
		char text[INET6_ADDRSTRLEN] = "?";

		if (!policy_addr_private(a) && !addr_is_local(a, r->lens[i]))
			continue;
		if (a->sa_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)a)->sin_addr, text, sizeof(text));
		else
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)a)->sin6_addr, text, sizeof(text));
		r->err = RESOLVE_PRIVATE;
		snprintf(r->why, sizeof(r->why), "%s", text); /* the address refused */
		r->n = 0;
		return;
	}
}

/* Is r no longer worth a lookup? */
static bool req_stale(struct resolve_req *r, uint64_t now)
{
	return __atomic_load_n(&r->cancelled, __ATOMIC_RELAXED) || (r->deadline_ms && now >= r->deadline_ms);
}

/* Caller holds rs.lock. */
static int owner_busy_locked(const void *owner)
{
	int n = 0;

	for (int i = 0; i < RESOLVE_THREADS_MAX; i++)
		n += rs.slot[i].on && rs.slot[i].owner == owner;
	return n;
}

/* Caller holds rs.lock: how many slots are in state st. */
static int slots_in_locked(enum slot_state st)
{
	int n = 0;

	for (int i = 0; i < RESOLVE_THREADS_MAX; i++)
		n += rs.slot[i].state == st;
	return n;
}

/* Caller holds rs.lock: is a thread (running or being started) not in a
 * lookup?  Such a thread looks at the queue again before it waits. */
static bool thread_free_locked(void)
{
	for (int i = 0; i < RESOLVE_THREADS_MAX; i++)
		if (rs.slot[i].state != SLOT_FREE && !rs.slot[i].on)
			return true;
	return false;
}

/* Caller holds rs.lock: take a free slot for a thread to be started by
 * grow() (SLOT_CREATING), or -1. */
static int slot_take_locked(void)
{
	for (int i = 0; i < RESOLVE_THREADS_MAX; i++)
		if (rs.slot[i].state == SLOT_FREE) {
			rs.slot[i].state = SLOT_CREATING;
			return i;
		}
	return -1;
}

/* Caller holds rs.lock: a slot for one more thread when a queued request
 * needs a lookup it may start now (its owner under RESOLVE_PER_OWNER) and
 * every thread is in a lookup, or -1.  A thread that is not in a lookup
 * (idle, starting, or handing back an answer) looks at the queue again
 * before it waits, so it serves the request; a stale request is answered by
 * whichever thread comes next and never starts one. */
static int want_thread_locked(uint64_t now)
{
	if (rs.stop || thread_free_locked() || now < rs.grow_after)
		return -1;
	for (struct resolve_req *r = rs.head; r; r = r->next)
		if (!req_stale(r, now) && owner_busy_locked(r->owner) < RESOLVE_PER_OWNER)
			return slot_take_locked();
	return -1;
}

/* Start the thread of slot i (SLOT_CREATING).  0, or pthread_create's
 * error: then the slot is free again and no thread is started for a second
 * (one log line a second at most while the system refuses threads). */
static int grow(int i)
{
	int e = pthread_create(&rs.slot[i].thread, NULL, resolve_main, (void *)(intptr_t)i);
	int live;

	pthread_mutex_lock(&rs.lock);
	rs.slot[i].state = e ? SLOT_FREE : SLOT_RUNNING;
	if (e)
		rs.grow_after = util_now_ms() + 1000;
	live = RESOLVE_THREADS_MAX - slots_in_locked(SLOT_FREE);
	pthread_cond_broadcast(&rs.cond); /* resolve_shutdown may wait for this */
	pthread_mutex_unlock(&rs.lock);
	if (e)
		log_warn("proxy", "cannot start a resolver thread (%d running): %s", live, strerror(e));
	else if (live > RESOLVE_THREADS)
		log_info("proxy", "every resolver thread was busy: started thread %d of at most %d", live,
			RESOLVE_THREADS_MAX);
	return e;
}

/* Caller holds rs.lock: take the first request a thread may serve now
 * (any, when stopping; a stale one is always taken: it costs nothing), or
 * NULL. */
static struct resolve_req *take_locked(uint64_t now)
{
	struct resolve_req **pp, *prev = NULL;

	for (pp = &rs.head; *pp; prev = *pp, pp = &(*pp)->next) {
		struct resolve_req *r = *pp;

		if (!rs.stop && !req_stale(r, now) && owner_busy_locked(r->owner) >= RESOLVE_PER_OWNER)
			continue;
		*pp = r->next;
		if (rs.tail == r)
			rs.tail = prev;
		return r;
	}
	return NULL;
}

/* Answer r without a lookup. */
static void req_fail(struct resolve_req *r, const char *why)
{
	r->n = 0;
	r->err = RESOLVE_FAILED;
	snprintf(r->why, sizeof(r->why), "%s", why);
}

static void *resolve_main(void *arg)
{
	int self = (int)(intptr_t)arg, more = -1;

	pthread_setname_np(pthread_self(), "sbxfs-resolve");
	for (;;) {
		struct resolve_req *r;
		bool stop, lookup;

		pthread_mutex_lock(&rs.lock);
		while (!(r = take_locked(util_now_ms())) && !rs.stop)
			pthread_cond_wait(&rs.cond, &rs.lock);
		stop = rs.stop;
		lookup = r && !stop && !req_stale(r, util_now_ms());
		rs.slot[self].on = lookup;
		rs.slot[self].owner = lookup ? r->owner : NULL;
		if (lookup)
			more = want_thread_locked(util_now_ms());
		pthread_mutex_unlock(&rs.lock);
		if (!r)
			return NULL; /* stopping, queue empty */
		if (more >= 0) {
			grow(more);
			more = -1;
		}
		if (stop)
			req_fail(r, "shutting down");
		else if (!lookup)
			req_fail(r, __atomic_load_n(&r->cancelled, __ATOMIC_RELAXED) ? "cancelled" : "timed out");
		else
			resolve_now(r);
		if (lookup) {
			pthread_mutex_lock(&rs.lock);
			rs.slot[self].on = false;
			/* a request of this owner may have been waiting for the slot */
			pthread_cond_broadcast(&rs.cond);
			pthread_mutex_unlock(&rs.lock);
		}
		rs.done(r);
	}
}

int resolve_init(void (*done)(struct resolve_req *r))
{
	rs.done = done;
	pthread_mutex_lock(&rs.lock);
	rs.stop = false;
	rs.grow_after = 0;
	pthread_mutex_unlock(&rs.lock);
	for (int i = 0; i < RESOLVE_THREADS; i++) {
		int e, slot;

		pthread_mutex_lock(&rs.lock);
		slot = slot_take_locked();
		pthread_mutex_unlock(&rs.lock);
		if ((e = grow(slot))) {
			resolve_shutdown();
			return e;
		}
	}
	return 0;
}

void resolve_submit(struct resolve_req *r)
{
	int more;

	r->next = NULL;
	pthread_mutex_lock(&rs.lock);
	if (rs.tail)
		rs.tail->next = r;
	else
		rs.head = r;
	rs.tail = r;
	/* broadcast: a thread that is woken may be unable to take it (its
	 * owner at RESOLVE_PER_OWNER) while another could take an earlier one */
	pthread_cond_broadcast(&rs.cond);
	more = want_thread_locked(util_now_ms());
	pthread_mutex_unlock(&rs.lock);
	if (more >= 0)
		grow(more);
}

void resolve_cancel(struct resolve_req *r)
{
	__atomic_store_n(&r->cancelled, true, __ATOMIC_RELAXED);
	/* an idle thread answers it now, even behind its owner's cap, so the
	 * submitter gets it back without waiting for a lookup to end */
	pthread_mutex_lock(&rs.lock);
	pthread_cond_broadcast(&rs.cond);
	pthread_mutex_unlock(&rs.lock);
}

void resolve_shutdown(void)
{
	pthread_mutex_lock(&rs.lock);
	rs.stop = true; /* no slot is taken from now on */
	pthread_cond_broadcast(&rs.cond);
	while (slots_in_locked(SLOT_CREATING) > 0)
		pthread_cond_wait(&rs.cond, &rs.lock);
	pthread_mutex_unlock(&rs.lock);
	for (int i = RESOLVE_THREADS_MAX - 1; i >= 0; i--)
		if (rs.slot[i].state == SLOT_RUNNING) /* no thread changes it now */
			pthread_join(rs.slot[i].thread, NULL);
	pthread_mutex_lock(&rs.lock);
	memset(rs.slot, 0, sizeof(rs.slot));
	pthread_mutex_unlock(&rs.lock);
}
