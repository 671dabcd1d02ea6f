/* SPDX-License-Identifier: MIT */
/*
 * remote_test.c - the remote providers' files and skills ops (provider.h's
 * struct sbx_files_ops and struct sbx_skills_ops) and their lifecycle,
 * driven against real test-server processes: tests/fakes/opensandbox_server.py
 * (lifecycle + execd, commands in a real bubblewrap root) and
 * tests/fakes/aio_server.py (an existing AIO sandbox at a base_url).  Only
 * the servers are fakes: the configuration parser, the registry, the
 * providers and the HTTP layer are the daemon's own.
 *
 * Each server is started by this program (its own process group, stopped
 * with SIGTERM by pid at the end); the same suite runs against both
 * providers through the capability tables, as the FUSE layer calls them.
 * The last line is "N passed, N failed".  Needs bubblewrap (both fakes run
 * their sandboxes with it) and /usr/bin/python3.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "../../common/buf.h"
#include "../../common/config.h"
#include "../../common/http.h"
#include "../../common/log.h"
#include "../../common/names.h"
#include "../../common/util.h"
#include "../../providers/provider.h"
#include "check.h"

#define WS "/mnt/user-data/workspace"

struct server {
	pid_t pid;
	int port;
	char dir[256];
};

static int server_start(struct server *s, const char *script, const char *const *extra)
{
	char port_file[300], root[300], log[300];
	const char *argv[32];
	int n = 0;
	uint64_t deadline;

	snprintf(s->dir, sizeof(s->dir), "/tmp/sbxfs-remote-test-XXXXXX");
	if (!mkdtemp(s->dir))
		return -1;
	snprintf(port_file, sizeof(port_file), "%s/port", s->dir);
	snprintf(root, sizeof(root), "%s/root", s->dir);
	snprintf(log, sizeof(log), "%s/server.log", s->dir);
	argv[n++] = "/usr/bin/python3";
	argv[n++] = script;
	argv[n++] = "--root";
	argv[n++] = root;
	argv[n++] = "--port-file";
	argv[n++] = port_file;
	for (; extra && *extra && n < 30; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	s->pid = fork();
	if (s->pid < 0)
		return -1;
	if (!s->pid) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		setsid();
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	deadline = util_now_ms() + 15000;
	while (util_now_ms() < deadline) {
		struct buf b = BUF_INIT(64);
		if (!util_read_file(port_file, &b) && b.len) {
			s->port = (int)strtol(b.ptr, NULL, 10);
			buf_free(&b);
			if (s->port > 0)
				return 0;
		}
		buf_free(&b);
		if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
			s->pid = 0;
			return -1;
		}
		usleep(20000);
	}
	return -1;
}

static void server_stop(struct server *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		for (int i = 0; i < 200 && waitpid(s->pid, NULL, WNOHANG) != s->pid; i++)
			usleep(50000);
		kill(-s->pid, SIGKILL); /* its process group, if anything is left */
		waitpid(s->pid, NULL, WNOHANG);
	}
	if (s->dir[0])
		util_rm_rf(s->dir);
}

/* A request to a fake's control channel: the answer's JSON (or NULL). */
static json_t *ctl(const struct server *s, const char *method, const char *path, const char *body)
{
	struct http_request rq = HTTP_REQUEST_INIT;
	struct http_response rs;
	struct buf url = BUF_INIT(512), out = BUF_INIT(16 << 20);
	json_t *o = NULL;

	if (buf_addf(&url, "http://127.0.0.1:%d%s", s->port, path))
		return NULL;
	rq.method = method;
	rq.url = url.ptr;
	rq.body = body;
	rq.body_len = body ? strlen(body) : 0;
	rq.content_type = "application/json";
	rq.out = &out;
	rq.timeout_ms = 10000;
	if (!http_perform(&rq, &rs))
		o = json_loadb(buf_str(&out), out.len, 0, NULL);
	buf_free(&url);
	buf_free(&out);
	return o;
}

static struct sbx_config *load_config(const char *dir, const char *text)
{
	char path[300], err[512];
	struct sbx_config *cfg;

	snprintf(path, sizeof(path), "%s/mount.conf", dir);
	if (util_write_atomic(path, text, strlen(text), 0600))
		return NULL;
	cfg = config_load(path, err, sizeof(err));
	if (!cfg)
		fprintf(stderr, "config: %s\n", err);
	return cfg;
}

static int memfd_with(const void *data, size_t len)
{
	int fd = memfd_create("t", MFD_CLOEXEC);
	const char *p = data;

	while (fd >= 0 && len) {
		ssize_t w = write(fd, p, len);
		if (w <= 0) {
			close(fd);
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return fd;
}

/* Read [off, off+len) of path through the files ops into a string. */
static char *read_range(struct sbx_box *box, const char *path, off_t off, size_t len, size_t *got, enum sbx_err *e)
{
	int fd = memfd_create("r", MFD_CLOEXEC);
	char *out = calloc(1, len + 1);

	*got = 0;
	*e = sbx_files(box)->read(box, path, off, len, fd, got);
	if (!*e && *got)
		pread(fd, out, *got, 0);
	close(fd);
	return out;
}

static enum sbx_err write_text(struct sbx_box *box, const char *path, const char *text, mode_t mode)
{
	int fd = memfd_with(text, strlen(text));
	enum sbx_err e;

	lseek(fd, 0, SEEK_END); /* the op reads from offset 0 whatever the fd's offset */
	e = sbx_files(box)->write(box, path, fd, (off_t)strlen(text), mode);
	close(fd);
	return e;
}

static bool listed(struct sbx_box *box, const char *dir, const char *name, struct stat *st)
{
	struct sbx_dirent *ents = NULL;
	size_t n = 0;
	bool found = false;

	if (sbx_files(box)->list(box, dir, &ents, &n))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(ents[i].name, name)) {
			found = true;
			if (st)
				*st = ents[i].st;
		}
	sbx_dirents_free(ents, n);
	return found;
}

/* The suite every remote-files provider passes. */
static void files_suite(const char *name, struct sbx_box *box)
{
	const struct sbx_files_ops *f = sbx_files(box);
	const struct sbx_skills_ops *sk = sbx_skills(box);
	struct stat st;
	size_t got;
	enum sbx_err e;
	char *s;

	fprintf(stderr, "-- files ops: %s\n", name);
	CHECK(f != NULL && sk != NULL);
	if (!f || !sk)
		return;
	/* write, stat, read ranges */
	CHECK(write_text(box, WS "/a.txt", "hello world", 0640) == SBX_OK);
	CHECK(f->stat(box, WS "/a.txt", &st) == SBX_OK && S_ISREG(st.st_mode) && st.st_size == 11 &&
	      (st.st_mode & 07777) == 0640);
	s = read_range(box, WS "/a.txt", 6, 5, &got, &e);
	CHECK(e == SBX_OK && got == 5 && !strcmp(s, "world"));
	free(s);
	s = read_range(box, WS "/a.txt", 8, 100, &got, &e);
	CHECK(e == SBX_OK && got == 3 && !strcmp(s, "rld"));
	free(s);
	s = read_range(box, WS "/a.txt", 50, 10, &got, &e);
	CHECK(e == SBX_OK && got == 0);
	free(s);
	/* a 3 MiB file: a range of it comes alone */
	{
		size_t big = 3u << 20;
		char *data = malloc(big);
		int fd;

		for (size_t i = 0; i < big; i++)
			data[i] = (char)('a' + (i * 7 + i / 4096) % 26);
		fd = memfd_with(data, big);
		CHECK(f->write(box, WS "/big.bin", fd, (off_t)big, 0644) == SBX_OK);
		close(fd);
		s = read_range(box, WS "/big.bin", 1 << 20, 4096, &got, &e);
		CHECK(e == SBX_OK && got == 4096 && !memcmp(s, data + (1 << 20), 4096));
		free(s);
		s = read_range(box, WS "/big.bin", (off_t)big - 10, 4096, &got, &e);
		CHECK(e == SBX_OK && got == 10 && !memcmp(s, data + big - 10, 10));
		free(s);
		free(data);
	}
	CHECK(listed(box, WS, "a.txt", &st) && S_ISREG(st.st_mode) && st.st_size == 11);
	CHECK(listed(box, WS, "big.bin", NULL));
	/* missing paths, wrong kinds */
	CHECK(f->stat(box, WS "/nope", &st) == SBX_ERR_GONE);
	{
		struct sbx_dirent *ents = NULL;
		size_t n = 0;
		CHECK(f->list(box, WS "/nope", &ents, &n) == SBX_ERR_GONE);
		CHECK(f->list(box, WS "/a.txt", &ents, &n) == SBX_ERR_NOTDIR);
	}
	s = read_range(box, WS "/nope", 0, 10, &got, &e);
	CHECK(e == SBX_ERR_GONE);
	free(s);
	s = read_range(box, WS, 0, 10, &got, &e);
	CHECK(e == SBX_ERR_ISDIR);
	free(s);
	/* directories */
	CHECK(f->mkdir(box, WS "/d", 0750) == SBX_OK);
	CHECK(f->mkdir(box, WS "/d", 0750) == SBX_ERR_EXIST);
	CHECK(f->stat(box, WS "/d", &st) == SBX_OK && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0750);
	CHECK(write_text(box, WS "/d/inner", "x", 0644) == SBX_OK);
	CHECK(f->rmdir(box, WS "/d") == SBX_ERR_NOTEMPTY);
	CHECK(f->unlink(box, WS "/d") == SBX_ERR_ISDIR);
	CHECK(f->rmdir(box, WS "/d/inner") == SBX_ERR_NOTDIR);
	CHECK(f->unlink(box, WS "/d/inner") == SBX_OK);
	CHECK(f->rmdir(box, WS "/d") == SBX_OK);
	CHECK(f->stat(box, WS "/d", &st) == SBX_ERR_GONE);
	CHECK(f->rmdir(box, WS "/d") == SBX_ERR_GONE);
	/* rename: to a new name, and over an existing file (replaced) */
	CHECK(f->rename(box, WS "/a.txt", WS "/b.txt") == SBX_OK);
	CHECK(f->stat(box, WS "/a.txt", &st) == SBX_ERR_GONE);
	CHECK(write_text(box, WS "/c.txt", "old", 0644) == SBX_OK);
	CHECK(f->rename(box, WS "/b.txt", WS "/c.txt") == SBX_OK);
	s = read_range(box, WS "/c.txt", 0, 100, &got, &e);
	CHECK(e == SBX_OK && !strcmp(s, "hello world"));
	free(s);
	CHECK(f->rename(box, WS "/nope", WS "/x") == SBX_ERR_GONE);
	/* chmod, truncate */
	CHECK(f->chmod(box, WS "/c.txt", 0751) == SBX_OK);
	CHECK(f->stat(box, WS "/c.txt", &st) == SBX_OK && (st.st_mode & 07777) == 0751);
	CHECK(f->chmod(box, WS "/c.txt", 0) == SBX_OK);
	CHECK(f->stat(box, WS "/c.txt", &st) == SBX_OK && (st.st_mode & 07777) == 0);
	CHECK(f->chmod(box, WS "/c.txt", 0644) == SBX_OK);
	CHECK(f->chmod(box, WS "/nope", 0644) == SBX_ERR_GONE);
	CHECK(f->truncate(box, WS "/c.txt", 5) == SBX_OK);
	s = read_range(box, WS "/c.txt", 0, 100, &got, &e);
	CHECK(e == SBX_OK && got == 5 && !strcmp(s, "hello"));
	free(s);
	CHECK(f->truncate(box, WS "/c.txt", 0) == SBX_OK);
	CHECK(f->stat(box, WS "/c.txt", &st) == SBX_OK && st.st_size == 0);
	CHECK(f->truncate(box, WS "/nope", 3) == SBX_ERR_GONE);
	/* names the APIs could mangle: $ (execd expands it on upload), spaces, quotes */
	CHECK(write_text(box, WS "/price$HOME ' \" x.txt", "dollar", 0644) == SBX_OK);
	CHECK(listed(box, WS, "price$HOME ' \" x.txt", &st) && st.st_size == 6);
	CHECK(f->rename(box, WS "/price$HOME ' \" x.txt", WS "/-n") == SBX_OK);
	CHECK(f->stat(box, WS "/-n", &st) == SBX_OK && st.st_size == 6);
	CHECK(f->unlink(box, WS "/-n") == SBX_OK);
	/* paths the APIs cannot carry, or that are not absolute */
	CHECK(f->stat(box, "relative", &st) == SBX_ERR_INVAL);
	CHECK(write_text(box, WS "/bad\xff\xfe", "x", 0644) == SBX_ERR_INVAL);
	/* an empty file; a write into a missing directory makes it */
	CHECK(write_text(box, WS "/e/f/empty", "", 0600) == SBX_OK);
	CHECK(f->stat(box, WS "/e/f/empty", &st) == SBX_OK && st.st_size == 0 && (st.st_mode & 0777) == 0600);

	/* skills: relative paths under the skills path */
	{
		const char *md = "# skill\n";
		int fd = memfd_with(md, strlen(md));
		CHECK(sk->mkdir(box, "pkg/sub", 0755) == SBX_OK);
		CHECK(sk->mkdir(box, "pkg/sub", 0755) == SBX_OK); /* existing: fine */
		CHECK(sk->upload(box, "pkg/SKILL.md", fd, (off_t)strlen(md), 0644) == SBX_OK);
		CHECK(sk->upload(box, "pkg/run.sh", fd, (off_t)strlen(md), 0755) == SBX_OK);
		close(fd);
		s = read_range(box, "/mnt/skills/pkg/SKILL.md", 0, 100, &got, &e);
		CHECK(e == SBX_OK && !strcmp(s, md));
		free(s);
		CHECK(f->stat(box, "/mnt/skills/pkg/run.sh", &st) == SBX_OK && (st.st_mode & 0777) == 0755);
		CHECK(sk->remove(box, "pkg/run.sh", false) == SBX_OK);
		CHECK(sk->remove(box, "pkg/run.sh", false) == SBX_OK); /* missing: fine */
		CHECK(f->stat(box, "/mnt/skills/pkg/run.sh", &st) == SBX_ERR_GONE);
		CHECK(sk->remove(box, "pkg", true) == SBX_OK);
		CHECK(f->stat(box, "/mnt/skills/pkg", &st) == SBX_ERR_GONE);
		CHECK(sk->mkdir(box, "../escape", 0755) == SBX_ERR_INVAL);
		CHECK(sk->mkdir(box, "/abs", 0755) == SBX_ERR_INVAL);
		CHECK(sk->remove(box, "a/./b", true) == SBX_ERR_INVAL);
		CHECK(sk->remove(box, "", true) == SBX_ERR_INVAL);
	}
}

static struct sbx_box *make_box(const struct sbx_provider *prov, struct sbx_config *cfg, const char *thread_dir,
	const char *user, const char *thread)
{
	char token[SCOPE_TOKEN_LEN + 1], state_id[NAMES_STATE_ID_LEN + 1];
	struct sbx_spec spec = { 0 };
	struct sbx_box *box = NULL;
	enum sbx_err e;

	names_scope_token(user, thread, token);
	names_state_id(cfg->state_dir, state_id);
	util_mkdir_p(thread_dir, 0700);
	spec.user = user;
	spec.thread = thread;
	spec.token = token;
	spec.state_id = state_id;
	spec.dirs.thread_dir = thread_dir;
	spec.cfg = cfg;
	e = prov->ops->create(&spec, &box);
	if (e)
		fprintf(stderr, "create: %s\n", sbx_err_name(e));
	return e ? NULL : box;
}

static int sandboxes_listed(const struct server *s)
{
	json_t *st = ctl(s, "GET", "/_fake/state", NULL);
	int n = (int)json_array_size(json_object_get(st, "sandboxes"));

	json_decref(st);
	return n;
}

static void test_opensandbox(void)
{
	static const char *const extra[] = { "--ready-delay", "0.1", "--graceful-close", "1", NULL };
	struct server s = { 0 };
	struct sbx_config *cfg = NULL;
	const struct sbx_provider *prov;
	struct sbx_box *box = NULL;
	char conf[2048], err[256], td[400];
	struct stat st;

	if (server_start(&s, "tests/fakes/opensandbox_server.py", extra)) {
		fprintf(stderr, "cannot start the OpenSandbox fake\n");
		CHECK(0);
		goto out;
	}
	snprintf(conf, sizeof(conf),
		"use: opensandbox\nstate_dir: %s/state\ndomain: 127.0.0.1:%d\nrequest_timeout: 3\nready_timeout: 20\n"
		"sandbox_timeout: 600\nnetwork: {mode: allowlist, allow_domains: [pypi.org]}\n",
		s.dir, s.port);
	cfg = load_config(s.dir, conf);
	CHECK(cfg != NULL);
	if (!cfg)
		goto out;
	prov = provider_for(cfg);
	CHECK(prov && !strcmp(prov->name, "opensandbox"));
	CHECK(prov->ops->init(cfg, err, sizeof(err)) == SBX_OK);
	snprintf(td, sizeof(td), "%s/state/users/alice/threads/t1", s.dir);
	box = make_box(prov, cfg, td, "alice", "t1");
	CHECK(box != NULL);
	if (!box)
		goto out;
	{
		json_t *state = ctl(&s, "GET", "/_fake/requests", NULL);
		CHECK(sandboxes_listed(&s) == 1);
		json_decref(state);
	}
	files_suite("opensandbox", box);

	/* a ranged read moves only its range (the server's request log) */
	{
		size_t got;
		enum sbx_err e;
		json_t *log, *last = NULL, *it;
		size_t i;
		char *r;

		json_decref(ctl(&s, "POST", "/_fake/reset", "{}"));
		r = read_range(box, WS "/big.bin", 100, 1000, &got, &e);
		free(r);
		log = ctl(&s, "GET", "/_fake/requests", NULL);
		json_array_foreach (json_object_get(log, "log"), i, it)
			if (json_string_value(json_object_get(it, "route")) &&
			    strstr(json_string_value(json_object_get(it, "route")), "download"))
				last = it;
		CHECK(e == SBX_OK && got == 1000 && last &&
		      json_integer_value(json_object_get(last, "resp_bytes")) == 1000);
		json_decref(log);
	}
	/* faults: a 500 is EIO, an answer slower than request_timeout ETIMEDOUT */
	{
		uint64_t t0;
		json_decref(ctl(&s, "POST", "/_fake/faults", "{\"kind\":\"http_error\",\"path\":\"/files/info\",\"count\":1}"));
		CHECK(sbx_files(box)->stat(box, WS "/big.bin", &st) == SBX_ERR_IO);
		json_decref(ctl(&s, "POST", "/_fake/faults", "{\"kind\":\"delay\",\"ms\":6000,\"path\":\"/files/info\",\"count\":1}"));
		t0 = util_now_ms();
		CHECK(sbx_files(box)->stat(box, WS "/big.bin", &st) == SBX_ERR_TIMEOUT);
		CHECK(util_now_ms() - t0 < 5500); /* bounded by request_timeout (3 s), not the server */
		json_decref(ctl(&s, "POST", "/_fake/faults", "{\"kind\":\"malformed_json\",\"path\":\"/files/info\",\"count\":1}"));
		CHECK(sbx_files(box)->stat(box, WS "/big.bin", &st) == SBX_ERR_IO);
		CHECK(sbx_files(box)->stat(box, WS "/big.bin", &st) == SBX_OK);
		json_decref(ctl(&s, "POST", "/_fake/faults", "{\"kind\":\"drop_stream\",\"path\":\"/files/download\",\"count\":1}"));
		{
			size_t got;
			enum sbx_err e;
			free(read_range(box, WS "/big.bin", 0, 1 << 20, &got, &e));
			CHECK(e == SBX_ERR_IO);
		}
	}
	/* health, then the sandbox expires behind our back: gone */
	CHECK(prov->ops->health(box) == SBX_OK);
	{
		char path[200];
		json_t *o;
		snprintf(path, sizeof(path), "/_fake/sandboxes/%s/expire", box->remote_id + strlen("opensandbox:"));
		o = ctl(&s, "POST", path, "{}");
		CHECK(o != NULL);
		json_decref(o);
	}
	CHECK(sbx_files(box)->stat(box, WS "/big.bin", &st) == SBX_ERR_GONE);
	CHECK(sbx_box_is_gone(box));
	CHECK(prov->ops->health(box) == SBX_ERR_GONE);
	CHECK(prov->ops->destroy(box) == SBX_OK); /* 404: already gone */
	sbx_box_put(box);
	box = NULL;
	CHECK(sandboxes_listed(&s) == 0);

	/* create fails after the sandbox exists (execd never answers /ping):
	 * nothing is left on the server */
	json_decref(ctl(&s, "POST", "/_fake/faults", "{\"kind\":\"ping_fail\"}"));
	{
		struct sbx_config *c2;
		snprintf(conf, sizeof(conf),
			"use: opensandbox\nstate_dir: %s/state\ndomain: 127.0.0.1:%d\nrequest_timeout: 2\nready_timeout: 2\n",
			s.dir, s.port);
		c2 = load_config(s.dir, conf);
		CHECK(c2 && make_box(prov, c2, td, "alice", "t2") == NULL);
		CHECK(sandboxes_listed(&s) == 0);
		config_put(c2);
	}
	json_decref(ctl(&s, "DELETE", "/_fake/faults", NULL));
out:
	if (box) {
		prov->ops->destroy(box);
		sbx_box_put(box);
	}
	if (cfg) {
		provider_for(cfg)->ops->shutdown();
		config_put(cfg);
	}
	server_stop(&s);
}

static void test_aio_base_url(void)
{
	struct server s = { 0 };
	struct sbx_config *cfg = NULL;
	const struct sbx_provider *prov = NULL;
	struct sbx_box *box = NULL, *other;
	char conf[2048], err[256], td[400], td2[400];

	if (server_start(&s, "tests/fakes/aio_server.py", (const char *const[]){ "--port", "0", NULL })) {
		fprintf(stderr, "cannot start the AIO fake\n");
		CHECK(0);
		goto out;
	}
	snprintf(conf, sizeof(conf),
		"use: aio\nstate_dir: %s/state\nbase_url: http://127.0.0.1:%d/\nrequest_timeout: 5\nready_timeout: 20\n",
		s.dir, s.port);
	cfg = load_config(s.dir, conf);
	CHECK(cfg != NULL);
	if (!cfg)
		goto out;
	CHECK(cfg->replicas == 1);
	prov = provider_for(cfg);
	CHECK(prov && prov != provider_find("aio") && !strcmp(prov->name, "aio"));
	CHECK(prov->ops->init(cfg, err, sizeof(err)) == SBX_OK);
	snprintf(td, sizeof(td), "%s/state/users/alice/threads/t1", s.dir);
	snprintf(td2, sizeof(td2), "%s/state/users/bob/threads/t1", s.dir);
	box = make_box(prov, cfg, td, "alice", "t1");
	CHECK(box != NULL);
	if (!box)
		goto out;
	files_suite("aio base_url", box);
	/* one scope at a time */
	other = make_box(prov, cfg, td2, "bob", "t1");
	CHECK(other == NULL);
	CHECK(prov->ops->health(box) == SBX_OK);
	/* destroy gives the sandbox back clean: the next scope sees no file,
	 * and the old box (a late write of a cache) never reaches it */
	CHECK(prov->ops->destroy(box) == SBX_OK);
	other = box;
	box = make_box(prov, cfg, td2, "bob", "t1");
	CHECK(box != NULL);
	{
		struct stat st;
		CHECK(sbx_files(other)->stat(other, WS, &st) == SBX_ERR_GONE);
		CHECK(write_text(other, WS "/late.txt", "late", 0644) == SBX_ERR_GONE);
		sbx_box_put(other);
	}
	if (box) {
		struct stat st;
		CHECK(sbx_files(box)->stat(box, WS "/late.txt", &st) == SBX_ERR_GONE);
		CHECK(sbx_files(box)->stat(box, WS "/big.bin", &st) == SBX_ERR_GONE);
		CHECK(sbx_files(box)->stat(box, WS, &st) == SBX_OK && S_ISDIR(st.st_mode));
		/* a 500 from the file API is EIO */
		json_decref(ctl(&s, "POST", "/_fake/faults", "{\"kind\":\"error\",\"path\":\"^/v1/file/list$\",\"status\":500}"));
		{
			struct sbx_dirent *ents = NULL;
			size_t n = 0;
			CHECK(sbx_files(box)->list(box, WS, &ents, &n) == SBX_ERR_IO);
		}
		json_decref(ctl(&s, "DELETE", "/_fake/faults", NULL));
	}
out:
	if (box) {
		prov->ops->destroy(box);
		sbx_box_put(box);
	}
	config_put(cfg);
	server_stop(&s);
}

int main(void)
{
	if (access("/usr/bin/bwrap", X_OK) || access("/usr/bin/python3", X_OK)) {
		printf("remote_test: needs /usr/bin/bwrap and /usr/bin/python3: skipped\n0 passed, 0 failed\n");
		return 0;
	}
	log_set_min_level(getenv("REMOTE_TEST_DEBUG") ? LOG_LVL_DEBUG : LOG_LVL_ERR);
	config_set_hooks(&provider_config_hooks);
	http_init();
	test_opensandbox();
	test_aio_base_url();
	http_cleanup();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
