/* SPDX-License-Identifier: MIT */
/*
 * unit.c - unit tests of the common layer (buffers, names and the scope
 * token, configuration, the descriptor budget), of the command line
 * (fs/args.c) and of the parts providers share (providers/api.c: the
 * call's status and decode steps; jobrun.c: output limit and records;
 * record.c), run by
 * `make test` before the black-box suite.
 * Each check prints only on failure; the last line is "N passed, N failed".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/budget.h"
#include "../../common/buf.h"
#include "../../common/config.h"
#include "../../common/idrange.h"
#include "../../common/json.h"
#include "../../common/log.h"
#include "../../common/names.h"
#include "../../common/util.h"
#include "../../fs/args.h"
#include "../../providers/api.h"
#include "../../providers/jobrun.h"
#include "../../providers/provider.h"
#include "../../providers/record.h"
#include "check.h"

static void test_buf(void)
{
	struct buf b = BUF_INIT(8);
	char small[4];

	CHECK(buf_adds(&b, "abc") == 0 && b.len == 3 && !strcmp(buf_str(&b), "abc"));
	CHECK(buf_addf(&b, "%d", 12345) == 0 && !strcmp(buf_str(&b), "abc12345"));
	/* past the cap: fails with E2BIG and frees the buffer */
	errno = 0;
	CHECK(buf_adds(&b, "x") == -1 && errno == E2BIG && b.ptr == NULL && b.len == 0);
	CHECK(buf_adds(&b, "y") == -1); /* sticky */
	buf_free(&b);

	buf_init(&b, 64);
	CHECK(buf_addpath(&b, "/a/") == 0 && buf_addpath(&b, "/b") == 0 && buf_addpath(&b, "c") == 0 &&
	      !strcmp(buf_str(&b), "/a/b/c"));
	size_t len;
	char *taken = buf_take(&b, &len);
	CHECK(taken && len == 6 && !strcmp(taken, "/a/b/c") && b.ptr == NULL);
	free(taken);
	CHECK(str_fmt(small, sizeof(small), "%s", "abc") == 0);
	errno = 0;
	CHECK(str_fmt(small, sizeof(small), "%s", "abcd") == -1 && errno == ENAMETOOLONG);
}

static void test_sha256_hex(void)
{
	char out[65];

	/* sha256("abc") = ba7816bf 8f01cfea ... */
	CHECK(names_sha256_hex("abc", out, 8) == 0 && !strcmp(out, "ba7816bf"));
	CHECK(names_sha256_hex("abc", out, 64) == 0 &&
	      !strcmp(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
	CHECK(names_sha256_hex("abc", out, 7) == -1);
}

static void test_idrange(void)
{
	char sub[] = "/tmp/sbxfs-unit-subuid-XXXXXX", err[512];
	int fd = mkstemp(sub);
	static const char text[] = "# comment\nalice:100000:65536\n1001:165536:65536\n";

	CHECK(fd >= 0 && write(fd, text, sizeof(text) - 1) == (ssize_t)sizeof(text) - 1);
	close(fd);
	/* nobody (65534) is an account on every Debian system */
	CHECK(idrange_conflict(65000, 1000, "/nonexistent", "/nonexistent", err, sizeof(err)) == 1 &&
	      strstr(err, "local.uid_base") && strstr(err, "nobody"));
	CHECK(idrange_conflict(150000, 100, sub, "/nonexistent", err, sizeof(err)) == 1 && strstr(err, "'alice'") &&
	      strstr(err, "100000..165535"));
	CHECK(idrange_conflict(231071, 10, "/nonexistent", sub, err, sizeof(err)) == 1 && strstr(err, "'1001'"));
	CHECK(idrange_conflict(231072, 1000, sub, sub, err, sizeof(err)) == 0);
	CHECK(idrange_conflict(99000, 1000, sub, sub, err, sizeof(err)) == 0);
	unlink(sub);
}

static void test_json_lossy(void)
{
	static const struct {
		const char *in, *out;
	} vec[] = {
		{ "plain", "plain" },
		{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80" },
		{ "caf\xe9", "caf\xef\xbf\xbd" },                   /* latin-1 */
		{ "\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd" },          /* overlong '/' */
		{ "\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* a surrogate */
		{ "\xe2\x82", "\xef\xbf\xbd\xef\xbf\xbd" },          /* truncated */
		{ "\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" }, /* > U+10FFFF */
	};

	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		json_t *o = json_string_lossy(vec[i].in, strlen(vec[i].in));
		CHECK(o && !strcmp(json_string_value(o), vec[i].out));
		json_decref(o);
	}
}

static void test_names(void)
{
	/* golden vectors of DeerFlow's derive_sandbox_scope_token */
	static const char *vec[][3] = {
		{ "alice", "thread-1", "dc977b840cb8638e" },
		{ "", "t", "983743815e8fe2ac" },
		{ "u", "", "27e14d2b41b03178" },
		{ "\xe7\x94\xa8\xe6\x88\xb7", "\xe7\xba\xbf\xe7\xa8\x8b", "cfa8a5bf41ddff8d" },
		{ "None", "abc", "c0b80df1b97d187e" },
	};
	char tok[SCOPE_TOKEN_LEN + 1];

	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++)
		CHECK(names_scope_token(vec[i][0], vec[i][1], tok) == 0 && !strcmp(tok, vec[i][2]));
	CHECK(names_valid("alice") && names_valid("thread-1") && names_valid("a_b-C9"));
	CHECK(!names_valid("") && !names_valid(".hidden") && !names_valid("a b") && !names_valid("a/b") &&
	      !names_valid(".."));
	char long_name[66];
	memset(long_name, 'x', 65);
	long_name[65] = '\0';
	CHECK(!names_valid(long_name));
	long_name[64] = '\0';
	CHECK(names_valid(long_name));
	CHECK(names_env_key_valid("PATH") && names_env_key_valid("_x1") && !names_env_key_valid("1BAD") &&
	      !names_env_key_valid("A-B") && !names_env_key_valid(""));
	CHECK(names_secret_like("API_TOKEN") && names_secret_like("db_password") && names_secret_like("GH_PAT") &&
	      !names_secret_like("PATH") && !names_secret_like("LANG"));
}

static struct sbx_config *load(const char *yaml, char *err, size_t errlen)
{
	char path[] = "/tmp/sbxfs-unit-XXXXXX";
	int fd = mkstemp(path);
	struct sbx_config *c;

	if (fd < 0 || write(fd, yaml, strlen(yaml)) != (ssize_t)strlen(yaml)) {
		snprintf(err, errlen, "cannot write %s", path);
		return NULL;
	}
	close(fd);
	c = config_load(path, err, errlen);
	unlink(path);
	return c;
}

static void test_config(void)
{
	char err[512];
	struct sbx_config *c;
	struct buf shown = BUF_INIT(1 << 20);

	c = load("", err, sizeof(err));
	CHECK(c && !strcmp(c->use, "local") && c->replicas == 3 && c->idle_timeout == 600 &&
	      c->bash_command_timeout == 600 && !strcmp(c->skills_container_path, "/mnt/skills"));
	config_put(c);

	setenv("SBXFS_UNIT_SECRET", "s3cr3t", 1);
	c = load("replicas: 5\nenvironment:\n  FROM_ENV: $SBXFS_UNIT_SECRET\n  API_TOKEN: literal-secret\n"
		 "  PLAIN: hello\napi_key: k3y\nnetwork:\n  mode: isolated\n  allow_domains: ['*.Example.com.', 'pypi.org']\n",
		err, sizeof(err));
	CHECK(c != NULL);
	if (c) {
		CHECK(c->replicas == 5 && c->net_mode == NET_ISOLATED && c->n_allow_domains == 2 &&
		      !strcmp(c->allow_domains[0], "*.example.com"));
		CHECK(c->n_env == 3 && !strcmp(c->env[0].value, "s3cr3t") && !strcmp(c->env[0].shown, "$SBXFS_UNIT_SECRET"));
		CHECK(config_show(c, &shown) == 0 && !strstr(buf_str(&shown), "s3cr3t") &&
		      !strstr(buf_str(&shown), "literal-secret") && !strstr(buf_str(&shown), "k3y") &&
		      strstr(buf_str(&shown), "hello"));
		config_put(c);
	}
	buf_free(&shown);

	/* the provider's own section is the provider's: shown through it */
	buf_init(&shown, 1 << 20);
	c = load("local:\n  uid_base: 300000\n  uid_count: 10\nuse: local\n", err, sizeof(err));
	CHECK(c && c->prov && config_show(c, &shown) == 0 && strstr(buf_str(&shown), "300000"));
	config_put(c);
	buf_free(&shown);

	/* a DeerFlow config.yaml: keys come from sandbox: */
	c = load("models: []\nsandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n  replicas: 2\n", err,
		sizeof(err));
	CHECK(c && !strcmp(c->use, "local") && c->replicas == 2);
	config_put(c);

	/* resources: defaults, sizes with units, 0 = no limit */
	c = load("", err, sizeof(err));
	CHECK(c && c->res.memory == 2ULL << 30 && c->res.cpus == 2.0 && c->res.pids == 1024 &&
	      c->res.tmp_size == 512ULL << 20 && c->res.output == 1ULL << 30);
	config_put(c);
	c = load("resources:\n  memory: 64M\n  cpus: 0.5\n  pids: 64\n  tmp_size: 1GiB\n  output: 0\n", err,
		sizeof(err));
	CHECK(c && c->res.memory == 64ULL << 20 && c->res.cpus == 0.5 && c->res.pids == 64 &&
	      c->res.tmp_size == 1ULL << 30 && c->res.output == 0);
	buf_reset(&shown);
	CHECK(c && config_show(c, &shown) == 0 && strstr(buf_str(&shown), "\"memory\": 67108864"));
	buf_free(&shown);
	config_put(c);
	/* users: the old name: uid form and the mapping with max_sandboxes */
	c = load("users:\n  alice: 1001\n  bob: {uid: 1002, max_sandboxes: 4}\n", err, sizeof(err));
	CHECK(c && c->n_users == 2 && c->users[0].uid == 1001 && c->users[0].max_sandboxes == 0 &&
	      c->users[1].uid == 1002 && config_user_max_sandboxes(c, "bob") == 4);
	config_put(c);

	static const struct {
		const char *yaml, *key;
	} bad[] = {
		{ "resources:\n  memory: 1M\n", "resources.memory:" },
		{ "resources:\n  memory: lots\n", "resources.memory:" },
		{ "resources:\n  memory: -5G\n", "resources.memory:" },
		{ "resources:\n  memory: 99999999999T\n", "resources.memory:" },
		{ "resources:\n  cpus: 0.001\n", "resources.cpus:" },
		{ "resources:\n  cpus: two\n", "resources.cpus:" },
		{ "resources:\n  pids: 3\n", "resources.pids:" },
		{ "resources:\n  tmp_size: 12X\n", "resources.tmp_size:" },
		{ "resources:\n  output: 10\n", "resources.output:" },
		{ "resources: 5\n", "resources:" },
		{ "users:\n  bob: {max_sandboxes: 2}\n", "users.bob:" },
		{ "users:\n  bob: {uid: 1002, max_sandboxes: -1}\n", "users.bob.max_sandboxes:" },
		{ "replicas: 0\n", "replicas:" },
		{ "replicas: many\n", "replicas:" },
		{ "idle_timeout: -1\n", "idle_timeout:" },
		{ "state_dir: relative/dir\n", "state_dir:" },
		{ "environment:\n  1BAD: x\n", "environment.1BAD:" },
		{ "use: nosuch\n", "use:" },
		{ "network:\n  mode: weird\n", "network.mode:" },
		{ "network:\n  temporary_grant_ttl: 10\n", "network.temporary_grant_ttl:" },
		{ "network:\n  allow_domains: ['*']\n", "network.allow_domains:" },
		/* the proxy's grammar (names_host_canon) in the configuration too */
		{ "network:\n  allow_domains: ['-a.example.com']\n", "network.allow_domains:" },
		{ "network:\n  allow_domains: ['a.0x7f']\n", "network.allow_domains:" },
		{ "network:\n  allow_domains: ['com']\n", "network.allow_domains:" },
		{ "network:\n  hosts:\n    bad-.example: 10.0.0.1\n", "network.hosts.bad-.example:" },
		{ "network:\n  hosts:\n    127.1: 10.0.0.1\n", "network.hosts.127.1:" },
		{ "users: 7\n", "users:" },
		{ "skills:\n  container_path: rel\n", "skills.container_path:" },
		{ "keep_on_exit: maybe\n", "keep_on_exit:" },
		{ "replicas: [1\n", "YAML syntax error" },
		{ "replicas: 2\nreplicas: 3\n", "replicas: given twice" },
		{ "network:\n  mode: open\n  mode: isolated\n", "network.mode: given twice" },
		{ "environment:\n  A: 1\n  A: 2\n", "environment.A: given twice" },
		{ "sandbox:\n  use: local\n  use: local\n", "sandbox.use: given twice" },
		{ "local:\n  uid_base: 10\n", "local.uid_base:" },
		{ "local:\n  uid_count: 0\n", "local.uid_count:" },
		{ "local:\n  rootfs: relative\n", "local.rootfs:" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		c = load(bad[i].yaml, err, sizeof(err));
		CHECK(c == NULL && strstr(err, bad[i].key));
		if (c || !strstr(err, bad[i].key))
			fprintf(stderr, "  case %zu: %s -> %s\n", i, bad[i].yaml, err);
		config_put(c);
	}
	/* config_load reads the file into config_parse: a directory, or a file
	 * larger than CONFIG_MAX, is refused saying so */
	{
		char path[] = "/tmp/sbxfs-unit-XXXXXX";
		int fd = mkstemp(path);
		char *big = calloc(1, CONFIG_MAX + 2);

		c = config_load("/tmp", err, sizeof(err));
		CHECK(c == NULL && strstr(err, "/tmp: cannot read"));
		config_put(c);
		memset(big, '#', CONFIG_MAX + 1);
		CHECK(fd >= 0 && big && write(fd, big, CONFIG_MAX + 1) == CONFIG_MAX + 1);
		c = config_load(path, err, sizeof(err));
		CHECK(c == NULL && strstr(err, "larger than"));
		config_put(c);
		unlink(path);
		close(fd);
		free(big);
		c = config_parse("t.conf", "replicas: 4\nuse: localXYZ", 22, err, sizeof(err)); /* len bytes, no NUL */
		CHECK(c && c->replicas == 4 && !strcmp(c->path, "t.conf"));
		config_put(c);
	}
	/* the error is one line even when the value it quotes is not (a
	 * double-quoted YAML scalar folds an empty line into a line break;
	 * found by tests/fuzz/config.c) */
	{
		static const char y[] = "network:\n  allow_domains: [\"*.example.r\n\n  b\\t\"]\n";
		c = config_parse("t.conf", y, sizeof(y) - 1, err, sizeof(err));
		CHECK(c == NULL && strstr(err, "network.allow_domains:") && !strchr(err, '\n') && !strchr(err, '\t'));
		config_put(c);
	}
}

static enum args_action parse(struct args *a, char *err, size_t errlen, ...)
{
	char *argv[32];
	int argc = 0;
	va_list ap;

	argv[argc++] = "sbxfs";
	va_start(ap, errlen);
	for (char *s; argc < 31 && (s = va_arg(ap, char *));)
		argv[argc++] = s;
	va_end(ap);
	argv[argc] = NULL;
	return args_parse(argc, argv, a, err, errlen);
}

/* The command line as mount(8) and mount.fuse3 run it (args.h). */
static void test_args(void)
{
	struct args a;
	char err[256];

	/* mount.fuse3: SOURCE MOUNTPOINT -o generic,config=,dev,suid */
	CHECK(parse(&a, err, sizeof(err), "sbxfs", "/sbx", "-o",
		      "rw,config=/etc/sbxfs/mount.conf,nofail,_netdev,x-systemd.automount,noauto,user,dev,suid", NULL) ==
	      ARGS_RUN);
	CHECK(!strcmp(a.source, "sbxfs") && !strcmp(a.mountpoint, "/sbx") && !a.foreground);
	CHECK(a.config && !strcmp(a.config, "/etc/sbxfs/mount.conf"));
	CHECK(!strcmp(buf_str(&a.fuse_opts), "rw")); /* rw is a real mount option; the rest is gone */
	args_free(&a);

	/* real options pass, in order; an escaped comma stays in its value */
	CHECK(parse(&a, err, sizeof(err), "-f", "/m", "-o", "ro,noatime", "-o", "fsname=a\\,b,allow_other",
		      "-o", "config=/x\\,y.conf", NULL) == ARGS_RUN);
	CHECK(!strcmp(buf_str(&a.fuse_opts), "ro,noatime,fsname=a\\,b") && a.allow_other && a.foreground);
	CHECK(a.config && !strcmp(a.config, "/x,y.conf") && a.source == NULL);
	args_free(&a);

	CHECK(parse(&a, err, sizeof(err), "-c", "/a", "-o", "config=/b", "/m", NULL) == ARGS_ERROR &&
	      strstr(err, "different"));
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "-c", "/a", "-o", "config=/a", "/m", NULL) == ARGS_RUN);
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "-o", "subtype=x", "/m", NULL) == ARGS_ERROR && strstr(err, "subtype"));
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "-o", "config=", "/m", NULL) == ARGS_ERROR);
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), NULL) == ARGS_ERROR && strstr(err, "mountpoint"));
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "a", "b", "c", NULL) == ARGS_ERROR);
	args_free(&a);

	/* --import-deerflow DIR, with -c FILE and nothing else */
	CHECK(parse(&a, err, sizeof(err), "-c", "/etc/x.conf", "--import-deerflow", "/srv/deer-flow", NULL) ==
	      ARGS_IMPORT);
	CHECK(!strcmp(a.import_dir, "/srv/deer-flow") && !strcmp(a.config, "/etc/x.conf"));
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "--import-deerflow", "/d", "/m", NULL) == ARGS_ERROR &&
	      strstr(err, "--import-deerflow"));
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "--import-deerflow", "/d", "--check-config", "/c", NULL) == ARGS_ERROR);
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "--import-deerflow", "", NULL) == ARGS_ERROR);
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "--check-config", "/f", NULL) == ARGS_CHECK_CONFIG && !strcmp(a.config, "/f"));
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "--check-config", "/f", "/m", NULL) == ARGS_ERROR);
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "-d", "/m", NULL) == ARGS_RUN && a.debug && a.foreground);
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "--version", NULL) == ARGS_VERSION);
	args_free(&a);
	CHECK(parse(&a, err, sizeof(err), "-h", NULL) == ARGS_HELP);
	args_free(&a);
}

/* The shares of a limit (budget.h) and the near-a-limit reasons of .health. */
static void test_budget(void)
{
	static const long limits[] = { 64, 1024, 2048, 20000, 524288, 1048576 };
	struct budget_caps c;
	struct budget_usage u;
	struct budget_acct *a, *b, *other;
	struct buf out = BUF_INIT(4096);
	int n;

	for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		budget_caps_for(limits[i], &c);
		/* what sandboxes may hold plus the caches plus the reserve is the limit,
		 * but for the floors of a tiny one */
		if (limits[i] >= 1024)
			CHECK(c.reserve + c.data_cache + c.rfiles_cache + c.total[BUDGET_DATA] +
					c.total[BUDGET_PROXY] * BUDGET_PROXY_FDS <= c.limit);
		for (int s = 0; s < BUDGET_SHARES; s++)
			CHECK(c.sandbox[s] >= 4 && c.sandbox[s] <= c.user[s] && c.user[s] <= c.total[s]);
		CHECK(c.total[BUDGET_PROXY] <= BUDGET_PROXY_MAX && c.sandbox[BUDGET_PROXY] <= BUDGET_PROXY_SANDBOX_MAX);
	}
	budget_caps_for(2048, &c);
	CHECK(c.reserve == 640 && c.data_cache == 264 && c.total[BUDGET_DATA] == 528 && c.sandbox[BUDGET_DATA] == 66 &&
	      c.user[BUDGET_DATA] == 264 && c.total[BUDGET_PROXY] == 88 && c.sandbox[BUDGET_PROXY] == 22 &&
	      c.user[BUDGET_PROXY] == 44);
	budget_caps_for(1048576, &c); /* a big limit: the proxy's fixed maxima */
	CHECK(c.total[BUDGET_PROXY] == 8192 && c.sandbox[BUDGET_PROXY] == 512 && c.user[BUDGET_PROXY] == 4096);

	/* accounts: a sandbox's cap (EMFILE), its user's (ENFILE); the other
	 * user untouched; what is given back may be taken again */
	budget_caps(&c);
	a = budget_acct_get("u1", "t1");
	b = budget_acct_get("u1", "t2");
	other = budget_acct_get("u2", "t1");
	CHECK(a && b && other);
	CHECK(budget_take(a, BUDGET_DATA, c.sandbox[BUDGET_DATA]) == 0);
	CHECK(budget_take(a, BUDGET_DATA, 1) == EMFILE);
	for (long k = c.sandbox[BUDGET_DATA]; k < c.user[BUDGET_DATA] && !budget_take(b, BUDGET_DATA, 1); k++)
		;
	CHECK(budget_take(b, BUDGET_DATA, 1) == (c.user[BUDGET_DATA] > 2 * c.sandbox[BUDGET_DATA] ? EMFILE : ENFILE));
	CHECK(budget_take(other, BUDGET_DATA, 1) == 0);
	budget_give(other, BUDGET_DATA, 1);
	budget_give(a, BUDGET_DATA, 1);
	CHECK(budget_take(a, BUDGET_DATA, 1) == 0);
	struct budget_stats st;
	budget_stats(&st);
	CHECK(st.refused[BUDGET_DATA][0] >= 1);
	budget_give(a, BUDGET_DATA, c.sandbox[BUDGET_DATA]);
	budget_stats(&st);
	CHECK(st.used[BUDGET_DATA] > 0); /* b still holds */
	budget_acct_put(a);
	budget_acct_put(b);
	budget_acct_put(other);

	/* .health's reasons */
	memset(&u, 0, sizeof(u));
	u.fds = 10;
	u.fds_limit = 100;
	u.mem = u.mem_limit = u.vm = u.vm_limit = u.threads = u.threads_limit = -1;
	u.sys_threads = u.sys_threads_limit = -1;
	CHECK(budget_near(&u, &out, "degraded: ", "; ") == 0 && out.len == 0);
	u.fds = 95;
	u.mem = 950LL << 20;
	u.mem_limit = 1000LL << 20;
	u.threads = 50;
	u.threads_limit = 100;
	n = budget_near(&u, &out, "degraded: ", "; ");
	CHECK(n == 2 && !strcmp(buf_str(&out), "degraded: file descriptors: 95 of 100 in use; memory: 950 of 1000 MiB (cgroup)"));
	buf_reset(&out);
	u.fds = -1; /* could not even count them */
	u.mem = 0;
	u.proxy_used = 80;
	u.proxy_cap = 88;
	n = budget_near(&u, &out, "; ", "; ");
	CHECK(n == 2 && !strcmp(buf_str(&out), "; file descriptors: at the limit (100); proxy connections: 80 of 88"));
	buf_free(&out);

	/* the probe reads this process */
	budget_usage(&u);
	CHECK(u.fds > 2 && u.fds < u.fds_limit && u.fds_limit == c.limit);
}

/* ---- providers/api.c: a client made up here (no network) ---- */

struct fake_api {
	enum sbx_err send_err; /* what send returns */
	long status;           /* the status it answers */
	const char *body;
	int sends, errors, decodes;
};

static enum sbx_err fake_send(void *ctx, const struct api_req *q, struct buf *out, long *status, char *err,
	size_t errlen)
{
	struct fake_api *f = ctx;

	(void)q;
	f->sends++;
	*status = 0;
	if (f->send_err) {
		api_seterr(err, errlen, "transport");
		return f->send_err;
	}
	*status = f->status;
	return buf_adds(out, f->body) ? SBX_ERR_NOMEM : SBX_OK;
}

static enum sbx_err fake_error(void *ctx, long status, const char *body, size_t len, const char *what, char *err,
	size_t errlen)
{
	struct fake_api *f = ctx;

	(void)body;
	(void)len;
	f->errors++;
	api_seterr(err, errlen, "%s: %ld", what, status);
	return status == 404 ? SBX_ERR_GONE : SBX_OK; /* a 2xx read as OK must still fail */
}

static enum sbx_err fake_decode(long status, const char *body, size_t len, void *out, char *err, size_t errlen)
{
	json_t *o = api_load(body, len);
	long long *v = out;

	(void)status;
	if (!json_is_integer(json_object_get(o, "n"))) {
		api_seterr(err, errlen, "no n");
		json_decref(o);
		return SBX_ERR_IO;
	}
	*v = json_integer_value(json_object_get(o, "n"));
	json_decref(o);
	return SBX_OK;
}

static void test_api(void)
{
	struct fake_api f = { .status = 200, .body = "{\"n\": 7}" };
	struct api_client cl = { .send = fake_send, .error = fake_error, .ctx = &f };
	long long n = 0;
	struct api_req q = { .method = "GET", .path = "/x", .what = "get x", .want = 200, .decode = fake_decode, .out = &n };
	char err[64] = "";

	CHECK(api_call(&cl, &q, err, sizeof(err)) == SBX_OK && n == 7 && f.errors == 0);
	f.status = 404;
	CHECK(api_call(&cl, &q, err, sizeof(err)) == SBX_ERR_GONE && f.errors == 1 && !strcmp(err, "get x: 404"));
	f.status = 201; /* a 2xx that is not the one wanted: never a success */
	CHECK(api_call(&cl, &q, err, sizeof(err)) == SBX_ERR_IO && f.errors == 2);
	f.status = 200;
	f.body = "{\"m\": 1}"; /* the decoder's refusal is the call's */
	CHECK(api_call(&cl, &q, err, sizeof(err)) == SBX_ERR_IO && !strcmp(err, "no n"));
	f.send_err = SBX_ERR_TIMEOUT; /* a transport error passes through, no decode */
	CHECK(api_call(&cl, &q, err, sizeof(err)) == SBX_ERR_TIMEOUT && !strcmp(err, "transport"));
	f.send_err = SBX_OK;
	q.want = API_ANY_2XX;
	q.also = 304;
	q.decode = NULL;
	f.status = 304;
	CHECK(api_call(&cl, &q, err, sizeof(err)) == SBX_OK);
	f.status = 409;
	CHECK(api_call(&cl, &q, err, sizeof(err)) == SBX_ERR_IO && f.errors == 3);
	q.want = API_ANY_STATUS; /* the decoder reads every status */
	q.decode = fake_decode;
	f.body = "{\"n\": 9}";
	CHECK(api_call(&cl, &q, err, sizeof(err)) == SBX_OK && n == 9 && f.errors == 3);
	CHECK(api_load(NULL, 0) == NULL);
	api_seterr(NULL, 0, "nowhere %d", 1); /* no buffer: nothing written, no crash */
}

/* ---- providers/jobrun.c and record.c ---- */

static void test_jobrun(void)
{
	char dir[] = "/tmp/sbxfs-unit-jobrun-XXXXXX";
	struct jobrun r;
	json_t *o;

	CHECK(mkdtemp(dir) != NULL);
	CHECK(jobrun_init(&r, NULL, dir, "j", "alice/t") == 0 && r.base.fd >= 0 && !strcmp(r.scope, "alice/t/jobs/j"));
	r.output_max = 10;
	CHECK(jobrun_charge(&r, 4) == 4 && !r.over);
	CHECK(jobrun_charge(&r, 8) == 6 && r.over && r.out_bytes == 10);
	CHECK(jobrun_charge(&r, 1) == 0);
	CHECK(jobrun_open_output(&r) == 0);
	jobrun_append(&r, false, "out", 3);
	jobrun_append(&r, true, "err!", 4);
	CHECK(!jobrun_file_exists(dir, "result"));
	jobrun_finish(&r); /* no pump, no result: lost */
	o = record_load(dir, "result");
	CHECK(o && !strcmp(json_string_value(json_object_get(o, "state")), "lost") &&
	      json_integer_value(json_object_get(o, "exit")) == 255);
	json_decref(o);
	jobrun_release(&r);
	CHECK(r.job_dir == NULL && r.base.fd == -1);
	/* "exited" by a signal the daemon asked for is "killed" */
	CHECK(!strcmp(jobrun_killed_state(dir, "exited", 9), "exited"));
	CHECK(jobrun_file_write(dir, "kill-requested", "KILL") == 0);
	CHECK(!strcmp(jobrun_killed_state(dir, "exited", 9), "killed"));
	CHECK(!strcmp(jobrun_killed_state(dir, "exited", 0), "exited"));
	CHECK(jobrun_result_at(dir, "t", "exited", 3, 0, 12.5, NULL));
	o = record_load(dir, "result");
	CHECK(o && json_integer_value(json_object_get(o, "exit")) == 3 &&
	      json_real_value(json_object_get(o, "ended_at")) == 12.5 && !json_object_get(o, "reason"));
	json_decref(o);
	/* records: round trip, removal, a missing one */
	o = json_pack("{s:s}", "id", "x");
	CHECK(record_save(dir, "rec.json", o) == 0);
	json_decref(o);
	o = record_load(dir, "rec.json");
	CHECK(o && !strcmp(json_string_value(json_object_get(o, "id")), "x"));
	json_decref(o);
	record_remove(dir, "rec.json");
	CHECK(record_load(dir, "rec.json") == NULL);
	record_remove(dir, "rec.json"); /* again: nothing there, no error */
	o = json_object();
	CHECK(record_save("/nonexistent-sbxfs-dir", "r.json", o) == -1);
	json_decref(o);
	for (const char *const *n = (const char *const[]){ "stdout", "stderr", "result", "kill-requested", NULL }; *n;
	     n++) {
		char p[128];
		snprintf(p, sizeof(p), "%s/%s", dir, *n);
		unlink(p);
	}
	CHECK(rmdir(dir) == 0);
}

/* util_mkdir_p: every missing component made (from the deepest one there),
 * an existing path is fine, a file in the way is ENOTDIR. */
static void test_mkdir_p(void)
{
	char root[] = "/tmp/sbxfs-unit-mkdir.XXXXXX", p[256];
	struct stat st;

	CHECK(mkdtemp(root) != NULL);
	snprintf(p, sizeof(p), "%s/a/b/c/d", root);
	CHECK(util_mkdir_p(p, 0700) == 0 && !stat(p, &st) && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
	CHECK(util_mkdir_p(p, 0700) == 0);
	snprintf(p, sizeof(p), "%s/a/b/x/y", root);
	CHECK(util_mkdir_p(p, 0755) == 0 && !stat(p, &st) && S_ISDIR(st.st_mode));
	snprintf(p, sizeof(p), "%s/a/f", root);
	FILE *f = fopen(p, "w");
	CHECK(f != NULL);
	if (f)
		fclose(f);
	snprintf(p, sizeof(p), "%s/a/f/g/h", root);
	CHECK(util_mkdir_p(p, 0755) == -1 && errno == ENOTDIR);
	snprintf(p, sizeof(p), "%s/a", root);
	CHECK(util_rm_rf(p) == 0 && rmdir(root) == 0);
}

int main(void)
{
	log_open(0, 0);
	config_set_hooks(&provider_config_hooks);
	test_buf();
	test_names();
	test_json_lossy();
	test_sha256_hex();
	test_idrange();
	test_config();
	test_args();
	test_budget();
	test_api();
	test_jobrun();
	test_mkdir_p();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
