/* SPDX-License-Identifier: MIT */
/*
 * local_gw.c - the open-mode gateway (see local_gw.h; DESIGN §7;
 * docs/network.md "The gateway").
 *
 * Why a gateway and not one pasta per sandbox: each pasta held about 28 MiB
 * and one of root's inotify instances (128 by default), so open sandboxes
 * were capped by memory and by root's other inotify users.  Here every open
 * sandbox shares one pasta; its own cost is a veth pair (kernel memory, no
 * process, no inotify instance, no thread).
 *
 *   host namespace          gateway namespace (ours)            sandbox
 *   pasta's sockets  <--  tap (pasta) <- NAT, filter <- sbN  ==  eth0
 *
 * The gateway namespace is made by a thread of the daemon (unshare), pinned
 * by a bind mount of its nsfs file at STATE/gateway/netns (so it outlives
 * the daemon, like the sandboxes it serves, and a restart adopts it), given
 * ip_forward (its own sysctl, written from inside it) and an nftables ruleset
 * (egress_gateway_ruleset: forward out only, no sandbox to sandbox, no
 * private destinations but the resolver for sandboxes without
 * allow_private_destinations, nothing to the gateway itself, masquerade on
 * the way out).  Nothing is ever added to the host's own firewall or
 * sysctls: both belong to other software.
 *
 * Addresses: 10.201.0.0/16, one /31 per sandbox (slot i: the gateway end
 * .2i, the sandbox .2i+1).  Slots 0..16383 (10.201.0.0/17) are for sandboxes
 * without allow_private_destinations, the rest for those with it: the
 * gateway tells them apart by source address, so a sandbox's policy costs
 * no per-sandbox rule.  The slot is recorded in local.json before its veth
 * is made (adoption marks it taken again); destroy deletes the veth pair,
 * then frees the slot, so an address is never on two links at once.
 *
 * pasta's end (crash, kill) leaves the namespace, its veths and its rules in
 * place: a monitor thread waits on pasta's pidfd and starts a new one into
 * the same namespace (tens of milliseconds), so the sandboxes' egress comes
 * back by itself.  The pasta is recorded in STATE/gateway/gateway.json like
 * a sandbox's init, behind the same start gate (local_pasta.c).
 */
#define _GNU_SOURCE
#include "local_gw.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/nsfs.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/egress.h"
#include "../common/json.h"
#include "../common/log.h"
#include "../common/rtnl.h"
#include "../common/util.h"

#define GW_NET 0x0ac90000u /* 10.201.0.0/16 */
#define GW_SUBNET "10.201.0.0/16"
#define GW_STRICT "10.201.0.0/17"
#define GW_SLOTS 32768 /* /31 pairs in the /16 */
#define GW_STRICT_SLOTS 16384
/* IPv6: a unique local /112 (a /127 per slot, the same numbering), masqueraded like IPv4 */
#define GW_SUBNET6 "fdb5:5bf5:c2c9::/112"
#define GW_STRICT6 "fdb5:5bf5:c2c9::/113"
static const unsigned char gw_net6[16] = { 0xfd, 0xb5, 0x5b, 0xf5, 0xc2, 0xc9 };
#define GW_IFPREFIX "sb"
#define GW_MTU 65520 /* pasta's tap: no fragmentation between the two */
#define GW_DNS_MAX 8
#define GW_START_MS 10000
#define GW_SCOPE "gateway"

enum gw_state { GW_DOWN, GW_STARTING, GW_UP };

static struct {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	enum gw_state state;       /* protected by lock */
	char dir[PATH_MAX];        /* STATE/gateway; set at init */
	int nsfd;                  /* the pinned namespace once up; never closed while up */
	struct local_pasta pasta;  /* protected by lock */
	unsigned char used[GW_SLOTS / 8]; /* protected by lock */
	unsigned n_used;           /* protected by lock */
	unsigned n_foreign;        /* of them, names taken by links not ours: protected by lock */
	char dns[GW_DNS_MAX][64];  /* resolvers in set dns4 or dns6; protected by lock */
	int n_dns;
	bool v6;                   /* the host has IPv6: the gateway forwards it too; set at bring-up */
	pthread_t monitor;         /* runs while up */
	bool monitor_running;
	int stop[2];               /* the monitor's stop pipe */
} gw = { .lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER, .nsfd = -1,
	.stop = { -1, -1 } };

static int gw_path(char *out, size_t len, const char *name)
{
	return str_fmt(out, len, "%s/%s", gw.dir, name);
}

/* The IPv6 address of slot's end (sandbox: 1, gateway: 0). */
static void slot_addr6(int slot, int sandbox, unsigned char out[16])
{
	unsigned v = 2u * (unsigned)slot + (unsigned)sandbox;

	memcpy(out, gw_net6, 16);
	out[14] = (unsigned char)(v >> 8);
	out[15] = (unsigned char)v;
}

void local_gw_address6(int slot, char *out, size_t len)
{
	unsigned char a[16];

	slot_addr6(slot, 1, a);
	if (!gw.v6) {
		if (len)
			out[0] = '\0';
		return;
	}
	if (!inet_ntop(AF_INET6, a, out, (socklen_t)len) && len)
		out[0] = '\0';
}

void local_gw_address(int slot, char *out, size_t len)
{
	struct in_addr a = { htonl(GW_NET + 2u * (unsigned)slot + 1u) };

	if (!inet_ntop(AF_INET, &a, out, (socklen_t)len) && len)
		out[0] = '\0';
}

/* ---- the pasta record --------------------------------------------------------------- */

static int gw_record(void *arg)
{
	const struct local_pasta *p = arg;
	char path[PATH_MAX];
	json_t *o = json_pack("{s:i,s:I}", "pasta_pid", (int)p->pid, "pasta_start", (json_int_t)p->start);
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	int r = -1;

	if (text && !gw_path(path, sizeof(path), "gateway.json"))
		r = util_write_atomic(path, text, strlen(text), 0600);
	free(text);
	json_decref(o);
	return r;
}

/* The recorded pasta, if it still runs (adopted: not our child). */
static void gw_recorded_pasta(struct local_pasta *p)
{
	char path[PATH_MAX];
	json_t *j = NULL;

	p->pid = 0;
	p->start = 0;
	p->child = 0;
	if (!gw_path(path, sizeof(path), "gateway.json"))
		j = json_read_file(path);
	if (j) {
		p->pid = (pid_t)json_integer_value(json_object_get(j, "pasta_pid"));
		p->start = (uint64_t)json_integer_value(json_object_get(j, "pasta_start"));
	}
	json_decref(j);
	if (p->pid <= 0 || !p->start || util_proc_starttime(p->pid) != p->start) {
		p->pid = 0;
		p->start = 0;
	}
}

static pid_t gw_pasta_now(void)
{
	pid_t pid;

	pthread_mutex_lock(&gw.lock);
	pid = gw.pasta.pid;
	pthread_mutex_unlock(&gw.lock);
	return pid;
}

/* Start a pasta into the gateway; gw.pasta once it has its link. */
static int gw_pasta_spawn(void)
{
	struct local_pasta p = { 0 };
	char log[PATH_MAX];

	if (gw_path(log, sizeof(log), "pasta.log") ||
	    local_pasta_start(GW_SCOPE, gw.nsfd, log, -1, util_now_ms() + GW_START_MS, &p, gw_record, &p))
		return -1;
	pthread_mutex_lock(&gw.lock);
	gw.pasta = p;
	pthread_mutex_unlock(&gw.lock);
	return 0;
}

/* ---- the monitor: pasta restarted when it ends ------------------------------------------ */

static void *gw_monitor(void *arg)
{
	(void)arg;
	for (;;) {
		uint64_t born = util_now_ms();
		struct local_pasta p;
		int pidfd;

		pthread_mutex_lock(&gw.lock);
		p = gw.pasta;
		pthread_mutex_unlock(&gw.lock);
		pidfd = p.pid > 0 && p.start && util_proc_starttime(p.pid) == p.start ? pidfd_open(p.pid, 0) : -1;
		if (pidfd >= 0 && util_proc_starttime(p.pid) == p.start) {
			struct pollfd w[2] = { { .fd = gw.stop[0], .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };
			while (poll(w, 2, -1) < 0 && errno == EINTR)
				;
			close(pidfd);
			if (w[0].revents)
				return NULL;
		} else if (pidfd >= 0) {
			close(pidfd);
		}
		/* pasta has ended: reap it (ours) and start another into the
		 * same namespace; the sandboxes keep their veths */
		if (p.child)
			while (waitpid(p.pid, NULL, 0) < 0 && errno == EINTR)
				;
		log_warn(GW_SCOPE, "local: the gateway's pasta (pid %d) ended: starting another", (int)p.pid);
		/* one that ended within a second of its start is not restarted in
		 * a tight loop: the next waits out that second */
		if (util_now_ms() - born < 1000) {
			struct pollfd s = { .fd = gw.stop[0], .events = POLLIN };
			if (poll(&s, 1, (int)(1000 - (util_now_ms() - born))) > 0)
				return NULL;
		}
		pthread_mutex_lock(&gw.lock);
		gw.pasta.pid = 0;
		gw.pasta.start = 0;
		gw.pasta.child = 0;
		pthread_mutex_unlock(&gw.lock);
		while (gw_pasta_spawn()) {
			struct pollfd s = { .fd = gw.stop[0], .events = POLLIN };
			/* again in a second (a host short of memory or pids) */
			if (poll(&s, 1, 1000) > 0)
				return NULL;
		}
		log_info(GW_SCOPE, "local: the gateway's pasta is pid %d", (int)gw_pasta_now());
	}
}

/* ---- making and adopting the namespace ------------------------------------------------- */

/* Does fd refer to a network namespace (a pin that is mounted)? */
static bool gw_is_netns(int fd)
{
	struct statfs sf;

	return !fstatfs(fd, &sf) && sf.f_type == NSFS_MAGIC && ioctl(fd, NS_GET_NSTYPE) == CLONE_NEWNET;
}

struct gw_make {
	const char *pin;
	bool v6;
	int nsfd;
	int err;
	const char *what;
};

/* On a thread of its own: a new network namespace (only this thread's),
 * lo up, forwarding on, pinned. */
static void *gw_make_thread(void *arg)
{
	struct gw_make *m = arg;
	int sk, fd;

	m->what = "unshare";
	if (unshare(CLONE_NEWNET))
		goto fail;
	m->what = "lo up";
	sk = rtnl_open();
	if (sk < 0 || rtnl_link_up(sk, (int)if_nametoindex("lo"))) {
		if (sk >= 0)
			close(sk);
		errno = EIO;
		goto fail;
	}
	close(sk);
	/* the gateway's own sysctl: /proc/sys/net is the opener's namespace */
	m->what = "ip_forward";
	fd = open("/proc/sys/net/ipv4/ip_forward", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1\n", 2) != 2) {
		if (fd >= 0)
			close(fd);
		goto fail;
	}
	close(fd);
	/* IPv6 (when the host has it): forwarding on, and no duplicate address
	 * detection on the gateway's veth ends (point-to-point pairs it
	 * numbers itself; their link-local addresses are usable at once) */
	if (m->v6) {
		static const char *const knobs[] = { "/proc/sys/net/ipv6/conf/all/forwarding",
			"/proc/sys/net/ipv6/conf/default/forwarding", "/proc/sys/net/ipv6/conf/default/accept_dad" };
		static const char *const vals[] = { "1\n", "1\n", "0\n" };
		m->what = "ipv6 forwarding";
		for (int i = 0; i < 3; i++) {
			fd = open(knobs[i], O_WRONLY | O_CLOEXEC);
			if (fd < 0 || write(fd, vals[i], 2) != 2) {
				if (fd >= 0)
					close(fd);
				goto fail;
			}
			close(fd);
		}
	}
	m->what = "pin";
	m->nsfd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (m->nsfd < 0 || mount("/proc/thread-self/ns/net", m->pin, NULL, MS_BIND, NULL))
		goto fail;
	return NULL;
fail:
	m->err = errno ? errno : EIO;
	return NULL;
}

static int gw_make_netns(const char *pin)
{
	struct gw_make m = { .pin = pin, .nsfd = -1, .v6 = gw.v6 };
	pthread_t t;
	int fd, e;

	fd = open(pin, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		log_err(GW_SCOPE, "local: cannot make the gateway's pin %s: %s", pin, strerror(errno));
		return -1;
	}
	close(fd);
	e = pthread_create(&t, NULL, gw_make_thread, &m);
	if (e) {
		log_err(GW_SCOPE, "local: cannot start a thread: %s", strerror(e));
		return -1;
	}
	pthread_join(t, NULL);
	if (m.err) {
		log_err(GW_SCOPE, "local: cannot make the gateway's namespace (%s): %s", m.what, strerror(m.err));
		if (m.nsfd >= 0)
			close(m.nsfd);
		umount2(pin, MNT_DETACH);
		return -1;
	}
	return m.nsfd;
}

/* The gateway's network must not share addresses with the host's. */
static int gw_subnet_free(void)
{
	struct ifaddrs *ifa = NULL;
	int clash = 0;

	if (getifaddrs(&ifa))
		return 0;
	for (struct ifaddrs *i = ifa; i && !clash; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    (ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr) & 0xffff0000u) == GW_NET) {
			log_err(GW_SCOPE, "local: the host has an address in %s (on %s), the open-mode gateway's network",
				GW_SUBNET, i->ifa_name);
			clash = 1;
		}
	freeifaddrs(ifa);
	return clash ? -1 : 0;
}

static int gw_rules(const char *dns)
{
	struct buf text = BUF_INIT(64 * 1024);
	const struct egress_gw g = { .subnet = GW_SUBNET, .strict = GW_STRICT, .ifprefix = GW_IFPREFIX, .dns = dns,
		.subnet6 = gw.v6 ? GW_SUBNET6 : NULL, .strict6 = GW_STRICT6 };
	char err[512];
	int r = -1;

	if (egress_gateway_ruleset(&g, &text))
		snprintf(err, sizeof(err), "out of memory");
	else
		r = egress_apply_text(gw.nsfd, buf_str(&text), err, sizeof(err));
	if (r)
		log_err(GW_SCOPE, "local: cannot install the gateway's rules: %s", err);
	buf_free(&text);
	return r;
}

/* Bring the gateway up (adopting what is pinned), outside the lock.  0 or -1. */
static int gw_bring_up(void)
{
	char pin[PATH_MAX], resolver[64];
	const char *dns = egress_resolver("/etc/resolv.conf", resolver, sizeof(resolver));
	struct local_pasta p;
	bool adopted = false;
	int fd;

	if (!gw.dir[0] || gw_path(pin, sizeof(pin), "netns") || util_mkdir_p(gw.dir, 0700)) {
		log_err(GW_SCOPE, "local: cannot make the gateway's directory %s: %s", gw.dir, strerror(errno));
		return -1;
	}
	gw.v6 = !access("/proc/sys/net/ipv6/conf/all/forwarding", W_OK);
	fd = open(pin, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0 && gw_is_netns(fd)) {
		adopted = true;
	} else {
		if (fd >= 0)
			close(fd);
		if (gw_subnet_free())
			return -1;
		fd = gw_make_netns(pin);
		if (fd < 0)
			return -1;
	}
	gw.nsfd = fd;
	pthread_mutex_lock(&gw.lock);
	gw.n_dns = 0;
	if (dns)
		snprintf(gw.dns[gw.n_dns++], sizeof(gw.dns[0]), "%s", dns);
	pthread_mutex_unlock(&gw.lock);
	/* an adopted gateway gets this binary's ruleset too */
	if (gw_rules(dns))
		goto fail;
	gw_recorded_pasta(&p);
	if (!adopted && p.pid) {
		/* a pasta of a namespace that is no longer pinned: not ours to keep */
		local_pasta_end(&p);
		p.pid = 0;
	}
	if (adopted && p.pid) {
		pthread_mutex_lock(&gw.lock);
		gw.pasta = p;
		pthread_mutex_unlock(&gw.lock);
	} else if (gw_pasta_spawn()) {
		goto fail;
	}
	if (pipe2(gw.stop, O_CLOEXEC) || pthread_create(&gw.monitor, NULL, gw_monitor, NULL)) {
		log_err(GW_SCOPE, "local: cannot start the gateway's monitor");
		goto fail;
	}
	gw.monitor_running = true;
	log_info(GW_SCOPE, "local: gateway %s: pasta pid %d, sandboxes in %s", adopted ? "adopted" : "made",
		(int)gw_pasta_now(), GW_SUBNET);
	return 0;
fail:
	/* a made namespace stays pinned (empty) for the next attempt */
	for (int i = 0; i < 2; i++)
		if (gw.stop[i] >= 0) {
			close(gw.stop[i]);
			gw.stop[i] = -1;
		}
	pthread_mutex_lock(&gw.lock);
	p = gw.pasta;
	gw.pasta = (struct local_pasta){ 0 };
	pthread_mutex_unlock(&gw.lock);
	local_pasta_end(&p);
	close(gw.nsfd);
	gw.nsfd = -1;
	return -1;
}

/* The gateway is up when this returns 0 (made once; concurrent callers
 * wait for the one making it). */
static int gw_ensure(void)
{
	int r;

	pthread_mutex_lock(&gw.lock);
	while (gw.state == GW_STARTING)
		pthread_cond_wait(&gw.changed, &gw.lock);
	if (gw.state == GW_UP) {
		pthread_mutex_unlock(&gw.lock);
		return 0;
	}
	gw.state = GW_STARTING;
	pthread_mutex_unlock(&gw.lock);
	r = gw_bring_up();
	pthread_mutex_lock(&gw.lock);
	gw.state = r ? GW_DOWN : GW_UP;
	pthread_cond_broadcast(&gw.changed);
	pthread_mutex_unlock(&gw.lock);
	return r;
}

void local_gw_init(const char *state_dir)
{
	char pin[PATH_MAX];
	int fd;

	if (gw.dir[0])
		return; /* a second init (a reload that changed the provider back) */
	if (str_fmt(gw.dir, sizeof(gw.dir), "%s/gateway", state_dir)) {
		gw.dir[0] = '\0';
		return;
	}
	/* adopt only what a previous daemon left; a new gateway waits for the
	 * first open sandbox */
	if (gw_path(pin, sizeof(pin), "netns"))
		return;
	fd = open(pin, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	if (gw_is_netns(fd)) {
		close(fd);
		gw_ensure();
		return;
	}
	close(fd);
}

/* ---- slots ------------------------------------------------------------------------- */

static bool slot_used(int s)
{
	return gw.used[s / 8] & (1u << (s % 8));
}

static void slot_set(int s, bool on)
{
	if (on == slot_used(s))
		return;
	if (on) {
		gw.used[s / 8] |= (unsigned char)(1u << (s % 8));
		gw.n_used++;
	} else {
		gw.used[s / 8] &= (unsigned char)~(1u << (s % 8));
		gw.n_used--;
	}
}

/* The lowest free slot of the kind, taken; -1 when none is free. */
static int slot_take(bool allow_private)
{
	int lo = allow_private ? GW_STRICT_SLOTS : 0, hi = allow_private ? GW_SLOTS : GW_STRICT_SLOTS, s = -1;

	pthread_mutex_lock(&gw.lock);
	for (int i = lo; i < hi && s < 0; i++)
		if (!slot_used(i)) {
			slot_set(i, true);
			s = i;
		}
	pthread_mutex_unlock(&gw.lock);
	return s;
}

/* slot's name is a link this daemon did not make: the slot stays marked
 * (not tried again), and does not keep the gateway at the end of day */
static void slot_foreign(int slot)
{
	pthread_mutex_lock(&gw.lock);
	if (slot_used(slot))
		gw.n_foreign++;
	pthread_mutex_unlock(&gw.lock);
}

static int link_there(void *arg)
{
	char name[IFNAMSIZ];

	snprintf(name, sizeof(name), GW_IFPREFIX "%d", *(int *)arg);
	return if_nametoindex(name) ? 0 : -1;
}

int local_gw_adopted(int slot)
{
	bool up;

	if (slot < 0 || slot >= GW_SLOTS)
		return -1;
	pthread_mutex_lock(&gw.lock);
	slot_set(slot, true);
	up = gw.state == GW_UP;
	pthread_mutex_unlock(&gw.lock);
	/* its veth pair was made (a daemon killed between the record and the
	 * veth leaves a sandbox without one: recreated on reclaim) */
	return up && !egress_in_netns(gw.nsfd, link_there, &slot) ? 0 : -1;
}

/* ---- wiring a sandbox ---------------------------------------------------------------- */

struct gw_wire {
	int slot;
	bool v6;
	int peer_nsfd;
	int err; /* positive errno */
	const char *what;
};

static uint32_t slot_gw_addr(int slot)
{
	return htonl(GW_NET + 2u * (unsigned)slot);
}

/* In the gateway's namespace: the pair (its peer born in the sandbox's),
 * the gateway end's address, up. */
static int wire_gateway_end(void *arg)
{
	struct gw_wire *w = arg;
	char name[IFNAMSIZ];
	int sk = rtnl_open(), r, idx;

	snprintf(name, sizeof(name), GW_IFPREFIX "%d", w->slot);
	if (sk < 0) {
		w->what = "netlink";
		return w->err = -sk;
	}
	w->what = "veth";
	r = rtnl_veth_add(sk, name, "eth0", w->peer_nsfd, GW_MTU);
	if (!r) {
		unsigned char a6[16];

		w->what = "gateway address";
		idx = (int)if_nametoindex(name);
		r = idx ? rtnl_addr_add4(sk, idx, slot_gw_addr(w->slot), 31) : -ENODEV;
		slot_addr6(w->slot, 0, a6);
		if (!r && w->v6)
			r = rtnl_addr_add6(sk, idx, a6, 127);
		if (!r)
			r = rtnl_link_up(sk, idx);
	}
	close(sk);
	return w->err = -r;
}

/* In the sandbox's namespace: eth0's address, up, the default route. */
static int wire_sandbox_end(void *arg)
{
	struct gw_wire *w = arg;
	int sk = rtnl_open(), r, idx;

	if (sk < 0) {
		w->what = "netlink";
		return w->err = -sk;
	}
	w->what = "sandbox address";
	idx = (int)if_nametoindex("eth0");
	r = idx ? rtnl_addr_add4(sk, idx, htonl(ntohl(slot_gw_addr(w->slot)) + 1u), 31) : -ENODEV;
	if (!r)
		r = rtnl_link_up(sk, idx);
	if (!r) {
		w->what = "default route";
		r = rtnl_route_default4(sk, idx, slot_gw_addr(w->slot));
	}
	if (!r && w->v6) {
		unsigned char a6[16], g6[16];

		w->what = "IPv6 address and route";
		slot_addr6(w->slot, 1, a6);
		slot_addr6(w->slot, 0, g6);
		r = rtnl_addr_add6(sk, idx, a6, 127);
		if (!r)
			r = rtnl_route_default6(sk, idx, g6);
	}
	close(sk);
	return w->err = -r;
}

static int unwire(void *arg)
{
	char name[IFNAMSIZ];
	int sk = rtnl_open();

	snprintf(name, sizeof(name), GW_IFPREFIX "%d", *(int *)arg);
	if (sk >= 0) {
		rtnl_link_del(sk, name); /* ENODEV: its namespace took it already */
		close(sk);
	}
	return 0;
}

/* A resolver the gateway does not let through yet: added to dns4 (or dns6). */
static void gw_allow_dns(const char *scope, const char *dns)
{
	struct buf text = BUF_INIT(4096);
	unsigned char bin[16];
	char err[512];
	bool known = false, v4 = dns && inet_pton(AF_INET, dns, bin) == 1;

	if (!dns || (!v4 && (!gw.v6 || inet_pton(AF_INET6, dns, bin) != 1)))
		return;
	pthread_mutex_lock(&gw.lock);
	for (int i = 0; i < gw.n_dns && !known; i++)
		known = !strcmp(gw.dns[i], dns);
	if (!known && gw.n_dns < GW_DNS_MAX)
		snprintf(gw.dns[gw.n_dns++], sizeof(gw.dns[0]), "%s", dns);
	pthread_mutex_unlock(&gw.lock);
	if (known)
		return;
	if (buf_addf(&text, "add element inet sbxfs %s { %s }\n", v4 ? "dns4" : "dns6", dns) ||
	    egress_apply_text(gw.nsfd, buf_str(&text), err, sizeof(err)))
		log_warn(scope, "local: the gateway does not let DNS to %s through", dns);
	buf_free(&text);
}

/* Both ends of w->slot's pair, entering each namespace with enter:
 * egress_in_netns (a thread of its own per end) or enter_here. */
static void gw_wire_ends(struct gw_wire *w, int (*enter)(int nsfd, int (*fn)(void *arg), void *arg))
{
	w->err = 0;
	w->what = "the gateway's namespace";
	if (enter(gw.nsfd, wire_gateway_end, w) < 0 && !w->err)
		w->err = errno ? errno : EIO;
	if (!w->err) {
		w->what = "the sandbox's namespace";
		if (enter(w->peer_nsfd, wire_sandbox_end, w) < 0 && !w->err)
			w->err = errno ? errno : EIO;
	}
}

/* w's wiring failed because its slot's name is a link not ours: said, and
 * the slot kept marked (slot_foreign) for the caller to try another */
static bool gw_name_taken(const char *scope, const struct gw_wire *w)
{
	if (w->err != EEXIST || strcmp(w->what, "veth"))
		return false;
	log_warn(scope, "local: gateway address %d skipped: its link name " GW_IFPREFIX "%d is taken", w->slot, w->slot);
	slot_foreign(w->slot);
	return true;
}

/* setns() of the calling thread itself: only on a thread that ends after */
static int enter_here(int nsfd, int (*fn)(void *arg), void *arg)
{
	return setns(nsfd, CLONE_NEWNET) ? -1 : fn(arg);
}

int local_gw_ready(const char *scope, const char *dns)
{
	if (gw_ensure()) {
		log_err(scope, "local: the open-mode gateway is not available (see the gateway's lines above)");
		return -1;
	}
	gw_allow_dns(scope, dns);
	return 0;
}

int local_gw_reserve(bool allow_private)
{
	return slot_take(allow_private);
}

int local_gw_wire_here(const char *scope, int slot, int nsfd)
{
	/* gw.v6 and gw.nsfd: set by the bring-up local_gw_ready waited for */
	struct gw_wire w = { .slot = slot, .peer_nsfd = nsfd, .v6 = gw.v6 };

	gw_wire_ends(&w, enter_here);
	if (w.err && !gw_name_taken(scope, &w))
		log_err(scope, "local: cannot connect the sandbox to the gateway (%s): %s", w.what, strerror(w.err));
	return w.err;
}

enum sbx_err local_gw_attach(const char *scope, int nsfd, bool allow_private, const char *dns, int *slot,
	int (*chosen)(void *arg), void *arg)
{
	struct gw_wire w = { .peer_nsfd = nsfd };

	*slot = -1;
	if (local_gw_ready(scope, dns))
		return SBX_ERR_IO;
	w.v6 = gw.v6;
	/* a name still taken (a link whose owner is not known to this
	 * daemon) leaves its slot marked and the next one is tried */
	for (int tries = 0; tries < 16; tries++) {
		w.slot = slot_take(allow_private);
		if (w.slot < 0) {
			log_err(scope, "local: every address of the open-mode gateway is in use");
			return SBX_ERR_NOMEM;
		}
		*slot = w.slot;
		if (chosen && chosen(arg)) {
			log_err(scope, "local: cannot record the sandbox's address: %s", strerror(errno));
			local_gw_detach(w.slot);
			*slot = -1;
			return SBX_ERR_IO;
		}
		gw_wire_ends(&w, egress_in_netns);
		if (gw_name_taken(scope, &w))
			continue;
		if (!w.err)
			return SBX_OK;
		log_err(scope, "local: cannot connect the sandbox to the gateway (%s): %s", w.what, strerror(w.err));
		local_gw_detach(w.slot);
		*slot = -1;
		return SBX_ERR_IO;
	}
	log_err(scope, "local: cannot connect the sandbox to the gateway: interface names in use");
	*slot = -1;
	return SBX_ERR_IO;
}

void local_gw_release(int slot)
{
	if (slot < 0 || slot >= GW_SLOTS)
		return;
	pthread_mutex_lock(&gw.lock);
	slot_set(slot, false);
	pthread_mutex_unlock(&gw.lock);
}

void local_gw_detach(int slot)
{
	int nsfd;

	if (slot < 0 || slot >= GW_SLOTS)
		return;
	pthread_mutex_lock(&gw.lock);
	nsfd = gw.state == GW_UP ? gw.nsfd : -1; /* the fd stays open while up */
	pthread_mutex_unlock(&gw.lock);
	if (nsfd >= 0)
		egress_in_netns(nsfd, unwire, &slot);
	local_gw_release(slot);
}

pid_t local_gw_pasta_pid(void)
{
	pid_t pid;

	pthread_mutex_lock(&gw.lock);
	pid = gw.state == GW_UP ? gw.pasta.pid : 0;
	pthread_mutex_unlock(&gw.lock);
	return pid;
}

void local_gw_shutdown(void)
{
	struct local_pasta p;
	char path[PATH_MAX];
	unsigned held;

	pthread_mutex_lock(&gw.lock);
	while (gw.state == GW_STARTING)
		pthread_cond_wait(&gw.changed, &gw.lock);
	if (gw.state != GW_UP) {
		pthread_mutex_unlock(&gw.lock);
		return;
	}
	held = gw.n_used - gw.n_foreign;
	pthread_mutex_unlock(&gw.lock);
	if (gw.monitor_running) {
		if (write(gw.stop[1], "x", 1) != 1)
			log_warn(GW_SCOPE, "local: cannot stop the gateway's monitor");
		pthread_join(gw.monitor, NULL);
		gw.monitor_running = false;
	}
	for (int i = 0; i < 2; i++) {
		close(gw.stop[i]);
		gw.stop[i] = -1;
	}
	pthread_mutex_lock(&gw.lock);
	p = gw.pasta;
	gw.pasta = (struct local_pasta){ 0 };
	gw.state = GW_DOWN;
	pthread_mutex_unlock(&gw.lock);
	if (held) {
		log_info(GW_SCOPE, "local: the gateway stays for the %u sandboxes left running", held);
		close(gw.nsfd);
		gw.nsfd = -1;
		return;
	}
	local_pasta_end(&p);
	close(gw.nsfd);
	gw.nsfd = -1;
	if (!gw_path(path, sizeof(path), "netns")) {
		if (umount2(path, MNT_DETACH) && errno != EINVAL)
			log_warn(GW_SCOPE, "local: cannot unpin the gateway's namespace: %s", strerror(errno));
		/* the unlink also detaches the copies of the pin that other mount
		 * namespaces made meanwhile (`ip netns exec`, `unshare -m`: the
		 * kernel drops mounts on a deleted file), so none keeps it alive */
		unlink(path);
	}
	if (!gw_path(path, sizeof(path), "gateway.json"))
		unlink(path);
	if (!gw_path(path, sizeof(path), "pasta.log"))
		unlink(path);
	rmdir(gw.dir);
}
