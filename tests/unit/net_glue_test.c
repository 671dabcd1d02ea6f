/* SPDX-License-Identifier: MIT */
/*
 * net_glue_test.c - net/net.c against providers made up here, through the
 * pool hooks' entry points (no FUSE mount):
 *   - a provider that enforces egress itself (sbx_net_ops.enforced_by):
 *     no events, `network` says why, decisions find nothing;
 *   - a provider without a network capability;
 *   - a provider with a network namespace (one this test makes, as root):
 *     the proxy listens on 127.0.0.1:3128 inside it, a denied request gets
 *     a 403 naming the host and the request id, the event is consumed, the
 *     jobs' environment carries the proxy, and destroy takes the state away;
 *   - destroy while the proxy is still connecting upstream (a server whose
 *     accept queue is full never answers the SYN): every connection's
 *     memory is given back.
 * Run by `make unit`; the namespace part needs root and is skipped otherwise.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../common/json.h"
#include "../../common/log.h"
#include "../../common/util.h"
#include "../../fs/fsbx.h"
#include "../../fs/fspark.h"
#include "../../common/egress.h"
#include "../../net/net.h"
#include "../../providers/pool.h"
#include "check.h"

/* the registry's table (pool.o needs one; no provider is looked up here) */
const struct sbx_provider *const sbx_builtin_providers[] = { NULL };

static int test_nsfd = -1;

static int ns_fd(struct sbx_box *box)
{
	(void)box;
	return test_nsfd >= 0 ? dup(test_nsfd) : -1;
}

static const struct sbx_net_ops enforced_net = { .enforced_by = "the test backend's egress policy" };
static const struct sbx_provider_ops enforced_ops = { .net = &enforced_net };
static const struct sbx_provider enforced_prov = { .name = "enforced", .ops = &enforced_ops };
static const struct sbx_provider_ops bare_ops = { 0 };
static const struct sbx_provider bare_prov = { .name = "bare", .ops = &bare_ops };
static const struct sbx_net_ops ns_net = { .netns_fd = ns_fd };
static const struct sbx_provider_ops ns_ops = { .net = &ns_net };
static const struct sbx_provider ns_prov = { .name = "netns", .ops = &ns_ops };

static struct sbx_config *load(const char *dir, const char *yaml)
{
	char path[256], err[512];
	struct sbx_config *c;

	snprintf(path, sizeof(path), "%s/mount.conf", dir);
	if (util_write_atomic(path, yaml, strlen(yaml), 0600))
		return NULL;
	c = config_load(path, err, sizeof(err));
	if (!c)
		fprintf(stderr, "config: %s\n", err);
	return c;
}

static json_t *render(struct sbx *s)
{
	struct buf b = BUF_INIT(BUF_CAP_JSON);
	json_t *j = NULL;

	if (!net_render(s, &b))
		j = json_loadb(b.ptr, b.len, 0, NULL);
	buf_free(&b);
	return j;
}

static int cmd(struct sbx *s, const char *text)
{
	return net_command(s, text, strlen(text));
}

static void sbx_setup(struct sbx *s, const char *dir, const struct sbx_provider *prov, struct sbx_config *cfg)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->user, sizeof(s->user), "alice");
	snprintf(s->thread, sizeof(s->thread), "%s", prov->name);
	snprintf(s->token, sizeof(s->token), "0123456789abcdef");
	s->thread_dir = strdup(dir);
	s->prov = prov;
	s->cfg = cfg;
}

static void test_without_events(const char *dir, struct sbx_config *cfg)
{
	struct sbx s;
	struct net_sbx *n;
	struct buf env = BUF_INIT(4096);
	json_t *j;

	sbx_setup(&s, dir, &enforced_prov, cfg);
	CHECK(net_sandbox_up(&s, false) == 0);
	n = net_get(&s);
	CHECK(n && !net_events_live(n) && !net_pending(n));
	net_put(n);
	j = render(&s);
	CHECK(j && !strcmp(json_string_value(json_object_get(j, "enforced_by")), "the test backend's egress policy"));
	CHECK(j && json_is_false(json_object_get(j, "events_available")));
	CHECK(j && strstr(json_string_value(json_object_get(j, "reason")), "enforced by the provider"));
	CHECK(j && json_is_null(json_object_get(j, "proxy")));
	CHECK(j && !strcmp(json_string_value(json_object_get(j, "mode")), "allowlist"));
	json_decref(j);
	CHECK(cmd(&s, "deny-pending\n") == 0);
	CHECK(cmd(&s, "allow_temporary 0123abcd-0000-4000-8000-000000000000\n") == ENOENT);
	CHECK(cmd(&s, "bogus\n") == EINVAL);
	CHECK(net_job_environ(&s, &env) == 0 && env.len == 0);
	net_sandbox_down(&s);
	CHECK(net_get(&s) == NULL);
	free(s.thread_dir);

	sbx_setup(&s, dir, &bare_prov, cfg);
	CHECK(net_sandbox_up(&s, false) == 0);
	j = render(&s);
	CHECK(j && strstr(json_string_value(json_object_get(j, "reason")), "no network policy"));
	CHECK(j && json_array_size(json_object_get(j, "events")) == 0);
	json_decref(j);
	CHECK(cmd(&s, "deny 0123abcd-0000-4000-8000-000000000000") == ENOENT);
	net_sandbox_down(&s);
	free(s.thread_dir);
	buf_free(&env);
}

/* A network namespace with loopback up, made by a thread (setns and
 * unshare change only the calling thread). */
static void *make_ns(void *arg)
{
	struct ifreq ifr = { 0 };
	int fd;

	(void)arg;
	if (unshare(CLONE_NEWNET))
		return NULL;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (fd >= 0 && !ioctl(fd, SIOCGIFFLAGS, &ifr)) {
		ifr.ifr_flags |= IFF_UP;
		ioctl(fd, SIOCSIFFLAGS, &ifr);
	}
	if (fd >= 0)
		close(fd);
	test_nsfd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	return NULL;
}

static char answer[4096];

/* In the namespace: ask the proxy for a host it has to refuse. */
static int ask_proxy(void *arg)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(3128) };
	const char *req = arg;
	size_t got = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) || write(fd, req, strlen(req)) < 0)
		return -1;
	for (ssize_t n; got < sizeof(answer) - 1 && (n = read(fd, answer + got, sizeof(answer) - 1 - got)) > 0;)
		got += (size_t)n;
	answer[got] = '\0';
	close(fd);
	return 0;
}

static void test_with_netns(const char *dir, struct sbx_config *cfg)
{
	struct buf line = BUF_INIT(4096), env = BUF_INIT(4096);
	pthread_t t;
	struct sbx s;
	struct net_sbx *n;
	char path[300];
	json_t *j;

	if (geteuid() != 0) {
		printf("net_glue_test: not root, namespace part skipped\n");
		return;
	}
	pthread_create(&t, NULL, make_ns, NULL);
	pthread_join(t, NULL);
	CHECK(test_nsfd >= 0);
	if (test_nsfd < 0)
		return;
	sbx_setup(&s, dir, &ns_prov, cfg);
	s.box = (struct sbx_box *)&s; /* any non-NULL box: ns_fd ignores it */
	CHECK(net_sandbox_up(&s, false) == 0);
	snprintf(path, sizeof(path), "%s/network.json", dir);
	CHECK(access(path, F_OK) == 0);
	n = net_get(&s);
	CHECK(n && net_events_live(n) && !net_pending(n));
	CHECK(egress_in_netns(test_nsfd, ask_proxy,
		      "GET http://blocked.example/ HTTP/1.1\r\nHost: blocked.example\r\n\r\n") == 0);
	CHECK(!strncmp(answer, "HTTP/1.1 403 Forbidden\r\n", 24));
	CHECK(strstr(answer, "Sandbox network policy denied blocked.example:80 (request ") != NULL);
	CHECK(n && net_pending(n) && net_consume(n, &line) == 0);
	j = json_loadb(line.ptr ? line.ptr : "", line.len, 0, NULL);
	CHECK(j && !strcmp(json_string_value(json_object_get(j, "host")), "blocked.example"));
	CHECK(j && strstr(answer, json_string_value(json_object_get(j, "request_id"))));
	json_decref(j);
	CHECK(egress_in_netns(test_nsfd, ask_proxy, "CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n") == 0);
	CHECK(strstr(answer, "IP literal") != NULL);
	CHECK(net_job_environ(&s, &env) == 0 && env.len > 0 &&
	      memmem(env.ptr, env.len, "HTTPS_PROXY=http://127.0.0.1:3128", 34) &&
	      memmem(env.ptr, env.len, "NO_PROXY=localhost,127.0.0.1,::1", 32));
	net_put(n);
	net_sandbox_down(&s);
	CHECK(access(path, F_OK) == -1 && errno == ENOENT); /* its grants went with it */
	free(s.thread_dir);
	buf_free(&line);
	buf_free(&env);
	close(test_nsfd);
}

/* Destroy while connections wait for an upstream that never completes the
 * handshake: a connection closed then must be freed with the addresses it
 * was trying (not left for a resolver that has already answered). */
#define SLOW_CONNS 16

static int slow_fds[SLOW_CONNS];

static size_t heap_in_use(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

/* In the namespace: SLOW_CONNS requests for slow.example, each with a 60 KB
 * header, left open. */
static int open_slow(void *arg)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(3128) };
	struct buf req = BUF_INIT(128 * 1024);
	int r = 0;

	(void)arg;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (buf_adds(&req, "GET http://slow.example/ HTTP/1.1\r\nHost: slow.example\r\nX-Pad: "))
		return -1;
	for (int i = 0; i < 60000 && !r; i++)
		r = buf_add(&req, "a", 1);
	if (r || buf_adds(&req, "\r\n\r\n"))
		return -1;
	for (int i = 0; i < SLOW_CONNS; i++) {
		slow_fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (slow_fds[i] < 0 || connect(slow_fds[i], (struct sockaddr *)&a, sizeof(a)) ||
		    write(slow_fds[i], req.ptr, req.len) != (ssize_t)req.len)
			r = -1;
	}
	buf_free(&req);
	return r;
}

/* Sockets of this namespace in SYN_SENT to addr:80 (/proc/net/tcp). */
static int syn_sent_to(struct in_addr addr)
{
	char line[512], want[16];
	int n = 0;
	FILE *f = fopen("/proc/net/tcp", "r");

	if (!f)
		return -1;
	snprintf(want, sizeof(want), "%08X:0050", addr.s_addr);
	while (fgets(line, sizeof(line), f)) {
		char local[64], remote[64], st[8];
		if (sscanf(line, " %*s %63s %63s %7s", local, remote, st) == 3 && !strcmp(remote, want) &&
		    !strcmp(st, "02"))
			n++;
	}
	fclose(f);
	return n;
}

static void test_destroy_while_connecting(const char *dir)
{
	char yaml[512], addr[32];
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(80) };
	struct sbx_config *cfg;
	struct sbx s;
	pthread_t t;
	size_t before;
	int lfd, filler, n = 0;
	bool freed = false;

	if (geteuid() != 0) {
		printf("net_glue_test: not root, destroy-while-connecting skipped\n");
		return;
	}
	/* a server on a loopback address of its own whose accept queue is full:
	 * the SYNs of the proxy's connects are dropped, they stay in progress */
	snprintf(addr, sizeof(addr), "127.%d.%d.%d", 16 + (int)(getpid() % 200), 1 + (int)(time(NULL) % 200),
		1 + (int)((getpid() / 200) % 200));
	inet_pton(AF_INET, addr, &sa.sin_addr);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	filler = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(lfd >= 0 && filler >= 0 && !bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) && !listen(lfd, 0) &&
	      !connect(filler, (struct sockaddr *)&sa, sizeof(sa)));
	snprintf(yaml, sizeof(yaml),
		"network:\n  mode: allowlist\n  allow_domains: [\"slow.example\"]\n  allow_private_destinations: true\n"
		"  hosts: {\"slow.example\": \"%s\"}\n",
		addr);
	cfg = load(dir, yaml);
	CHECK(cfg != NULL);
	pthread_create(&t, NULL, make_ns, NULL);
	pthread_join(t, NULL);
	CHECK(test_nsfd >= 0);
	if (!cfg || test_nsfd < 0)
		goto out;
	sbx_setup(&s, dir, &ns_prov, cfg);
	s.box = (struct sbx_box *)&s;
	CHECK(net_sandbox_up(&s, false) == 0);
	for (int i = 0; i < SLOW_CONNS; i++)
		slow_fds[i] = -1;
	before = heap_in_use();
	CHECK(egress_in_netns(test_nsfd, open_slow, NULL) == 0);
	for (int i = 0; i < 100 && (n = syn_sent_to(sa.sin_addr)) < SLOW_CONNS; i++)
		usleep(100 * 1000);
	CHECK(n == SLOW_CONNS);
	net_sandbox_down(&s); /* the proxy closes them while they connect */
	for (int i = 0; i < SLOW_CONNS; i++)
		if (slow_fds[i] >= 0)
			close(slow_fds[i]);
	/* given back: at most what a handful of allocations weigh */
	for (int i = 0; i < 100 && !freed; i++) {
		struct net_stats st;
		net_stats(&st);
		freed = st.active == 0 && heap_in_use() < before + 256 * 1024;
		if (!freed)
			usleep(50 * 1000);
	}
	CHECK(freed);
	if (!freed)
		fprintf(stderr, "net_glue_test: %zu bytes more in use than before %d connections\n",
			heap_in_use() - before, SLOW_CONNS);
	free(s.thread_dir);
	close(test_nsfd);
	test_nsfd = -1;
out:
	config_put(cfg);
	close(filler);
	close(lfd);
}

int main(void)
{
	char dir[] = "/tmp/sbxfs-net-glue-XXXXXX";
	struct sbx_config *cfg;

	log_open(0, 0);
	CHECK(mkdtemp(dir) != NULL);
	fs_sbx_setup();
	CHECK(fspark_init() == 0);
	CHECK(net_init() == 0);
	cfg = load(dir, "network:\n  mode: allowlist\n  approval: prompt\n  allow_domains: [\"ok.example\"]\n");
	CHECK(cfg != NULL);
	if (cfg) {
		test_without_events(dir, cfg);
		test_with_netns(dir, cfg);
		config_put(cfg);
	}
	test_destroy_while_connecting(dir);
	net_shutdown();
	park_shutdown();
	{
		char p[300];
		snprintf(p, sizeof(p), "%s/mount.conf", dir);
		unlink(p);
		rmdir(dir);
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
