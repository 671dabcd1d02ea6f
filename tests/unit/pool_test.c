/* SPDX-License-Identifier: MIT */
/*
 * pool_test.c - unit tests of the pool (lifecycle) and of the job state
 * machine against the fault-injecting provider (fault.c): creates that
 * fail, hang past ready_timeout or run slowly; health that flaps; destroys
 * that fail; jobs that stream then die, cannot be watched, cannot be
 * signalled; adoption of half-made sandboxes.  Every path must end with the
 * right errno and nothing alive (the provider counts its boxes and execs).
 *
 * Then an allocation-failure pass: the Nth allocation of our code fails,
 * for every N, through configuration parsing and an acquire/release cycle;
 * no crash (and, under ASan, no leak).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../common/config.h"
#include "../../common/json.h"
#include "../../common/layout.h"
#include "../../common/log.h"
#include "../../common/util.h"
#include "../../fs/job.h"
#include "../../fs/fsbx.h"
#include "../../fs/fspark.h"
#include "../../runtime/work.h"
#include "../../providers/pool.h"
#include "check.h"
#include "fault.h"

/* ---- allocation failure injection (linked with -Wl,--wrap=...) ---------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

static long alloc_count, alloc_fail_at; /* 0: never fail */
static int alloc_failed;

static bool alloc_should_fail(void)
{
	long n = __atomic_add_fetch(&alloc_count, 1, __ATOMIC_RELAXED);

	if (alloc_fail_at && n == alloc_fail_at) {
		alloc_failed = 1;
		errno = ENOMEM;
		return true;
	}
	return false;
}

void *__wrap_malloc(size_t n)
{
	return alloc_should_fail() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t m)
{
	return alloc_should_fail() ? NULL : __real_calloc(n, m);
}

void *__wrap_realloc(void *p, size_t n)
{
	return alloc_should_fail() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
	return alloc_should_fail() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
	return alloc_should_fail() ? NULL : __real_strndup(s, n);
}

static void *json_alloc(size_t n)
{
	return __wrap_malloc(n);
}

/* ---- fixtures ---------------------------------------------------------------- */

static char base[128];
static char state_dir[160];

static void msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static double now(void)
{
	return (double)util_now_ms() / 1000.0;
}

static struct sbx_config *load_config(const char *extra, char *err, size_t errlen)
{
	char path[200], text[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/mount.conf", base);
	snprintf(text, sizeof(text), "use: fault\nstate_dir: %s\nready_timeout: 1\n%s%s", state_dir,
		extra ? extra : "idle_timeout: 0\n", extra && strstr(extra, "pool:") ? "" : "pool: {prewarm: 0}\n");
	f = fopen(path, "w");
	if (!f)
		return NULL;
	fputs(text, f);
	fclose(f);
	return config_load(path, err, errlen);
}

/* A fresh state_dir and a pool over the fault provider. */
static int setup(const char *extra)
{
	struct sbx_config *cfg;
	char err[512];

	fault_reset();
	snprintf(base, sizeof(base), "/tmp/sbxfs-unit-XXXXXX");
	if (!mkdtemp(base))
		return -1;
	snprintf(state_dir, sizeof(state_dir), "%s/state", base);
	cfg = load_config(extra, err, sizeof(err));
	if (!cfg) {
		fprintf(stderr, "config: %s\n", err);
		return -1;
	}
	if (pool_init(cfg, err, sizeof(err))) {
		fprintf(stderr, "pool_init: %s\n", err);
		config_put(cfg);
		return -1;
	}
	config_put(cfg);
	return 0;
}

static void fail_setup(void)
{
	CHECK(!"setup");
}

static void teardown(void)
{
	pool_shutdown(false);
	pool_clear();
	CHECK(fault.live_boxes == 0);
	CHECK(fault.live_execs == 0);
	util_rm_rf(base);
}

static bool record_exists(const char *user, const char *thread)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	bool r;

	r = !layout_thread_dir(&p, state_dir, user, thread) && !buf_adds(&p, "/sandbox.json") && !access(p.ptr, F_OK);
	buf_free(&p);
	return r;
}

/* ---- the pool ------------------------------------------------------------------ */

static void test_acquire_release_reclaim(void)
{
	struct sbx *s, *s2;
	struct buf st = BUF_INIT(BUF_CAP_JSON);

	if (setup(NULL))
		return fail_setup();
	CHECK(pool_acquire("u", "t", &s) == 0);
	CHECK(pool_state(s, NULL) == SBX_ACTIVE && fault.creates == 1 && record_exists("u", "t"));
	CHECK(s->uid == 12345); /* the provider says who owns the files */
	CHECK(pool_acquire("u", "t", &s2) == EEXIST);
	CHECK(pool_status_json(s, &st) == 0 && strstr(buf_str(&st), "\"state\": \"active\""));
	CHECK(pool_release(s) == 0 && pool_state(s, NULL) == SBX_WARM);
	CHECK(pool_release(s) == ENOENT);
	pool_put(s);
	CHECK(pool_acquire("u", "t", &s) == 0 && fault.creates == 1 && fault.healths == 1);
	pool_put(s);
	buf_free(&st);
	teardown();
	CHECK(fault.destroys == 1);
}

/* The asynchronous acquire's two steps (fs/acquire.c): a reservation holds
 * the scope (EEXIST for a second one and for a sync acquire), counts toward
 * the user's cap, shows "creating"; the acquire ends it either way. */
static void test_reserve(void)
{
	struct sbx *s, *s2, *s3;
	struct buf st = BUF_INIT(BUF_CAP_JSON);
	struct pool_stats ps;
	bool creating = false;

	if (setup("users: {u: {uid: 4242, max_sandboxes: 1}}\n"))
		return fail_setup();
	CHECK(pool_reserve("u", "t", &s) == 0);
	CHECK(pool_reserve("u", "t", &s2) == EEXIST);
	CHECK(pool_acquire("u", "t", &s2) == EEXIST);
	CHECK(pool_reserve("u", "other", &s3) == EDQUOT); /* the reservation counts */
	CHECK(pool_find_shown("u", "t", &creating) == s && creating);
	pool_put(s);
	CHECK(pool_status_json(s, &st) == 0 && strstr(buf_str(&st), "\"state\": \"creating\""));
	pool_stats(&ps);
	CHECK(ps.creating == 1 && ps.active == 0);
	CHECK(pool_acquire_reserved(s) == 0 && pool_state(s, NULL) == SBX_ACTIVE && !s->reserved);
	CHECK(pool_find_shown("u", "t", &creating) == s && !creating);
	pool_put(s);
	CHECK(pool_release(s) == 0);
	pool_put(s);
	/* a failed create ends the reservation: the scope is free again */
	fault.create_err = SBX_ERR_IO;
	CHECK(pool_reserve("u", "t2", &s) == 0);
	CHECK(pool_acquire_reserved(s) == EIO && !s->reserved && pool_state(s, NULL) == SBX_NONE);
	CHECK(!record_exists("u", "t2"));
	pool_put(s);
	fault.create_err = SBX_OK;
	CHECK(pool_reserve("u", "t2", &s) == 0);
	pool_unreserve(s); /* given up: nothing made */
	CHECK(pool_find_shown("u", "t2", &creating) == NULL);
	buf_free(&st);
	teardown();
}

static void test_create_failures(void)
{
	static const struct {
		enum sbx_err e;
		int err;
	} cases[] = { { SBX_ERR_IO, EIO }, { SBX_ERR_NOSPC, ENOSPC }, { SBX_ERR_ACCESS, EACCES },
		{ SBX_ERR_GONE, EIO } };
	struct sbx *s;
	struct pool_stats ps;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (setup(NULL))
		return fail_setup();
		fault.create_err = cases[i].e;
		CHECK(pool_acquire("u", "t", &s) == cases[i].err);
		CHECK(!record_exists("u", "t")); /* nothing left behind */
		pool_stats(&ps);
		CHECK(ps.active == 0 && ps.creating == 0 && ps.errors == 1 && ps.last_error[0]);
		fault.create_err = SBX_OK; /* and the scope works afterwards */
		CHECK(pool_acquire("u", "t", &s) == 0);
		pool_put(s);
		teardown();
	}
	if (setup(NULL))
		return fail_setup();
	fault.create_hang = true; /* past ready_timeout (1 s) */
	double t0 = now();
	CHECK(pool_acquire("u", "t", &s) == ETIMEDOUT);
	CHECK(now() - t0 < 5 && !record_exists("u", "t"));
	teardown();
}

struct acq {
	char thread[16];
	int err;
	struct sbx *s;
};

static void *acquire_thread(void *arg)
{
	struct acq *a = arg;

	a->err = pool_acquire("u", a->thread, &a->s);
	return NULL;
}

static void test_slow_creates_run_in_parallel(void)
{
	struct acq a[4];
	pthread_t t[4];

	if (setup("replicas: 10\n"))
		return fail_setup();
	fault.create_delay_ms = 400;
	for (int i = 0; i < 4; i++) {
		snprintf(a[i].thread, sizeof(a[i].thread), "t%d", i);
		pthread_create(&t[i], NULL, acquire_thread, &a[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK(a[i].err == 0);
		if (!a[i].err)
			pool_put(a[i].s);
	}
	/* creates of different scopes overlap (no wall-clock bound: this host
	 * is noisy; the provider counts the creates running at once) */
	CHECK(fault.max_creating >= 2);
	teardown();

	/* eight mkdirs of one scope: one creates, the others get EEXIST */
	if (setup(NULL))
		return fail_setup();
	fault.create_delay_ms = 200;
	struct acq b[8];
	pthread_t tb[8];
	int ok = 0, exist = 0;
	for (int i = 0; i < 8; i++) {
		snprintf(b[i].thread, sizeof(b[i].thread), "same");
		pthread_create(&tb[i], NULL, acquire_thread, &b[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(tb[i], NULL);
		ok += b[i].err == 0;
		exist += b[i].err == EEXIST;
		if (!b[i].err)
			pool_put(b[i].s);
	}
	CHECK(ok == 1 && exist == 7 && fault.creates == 1);
	teardown();
}

static void test_health_flaps_and_destroy_fails(void)
{
	struct sbx *s;

	if (setup(NULL))
		return fail_setup();
	CHECK(pool_acquire("u", "t", &s) == 0 && pool_release(s) == 0);
	pool_put(s);
	fault.health_seq[0] = SBX_ERR_GONE; /* the warm sandbox died */
	fault.n_health = 1;
	fault.destroy_err = SBX_ERR_IO; /* and cannot even be destroyed cleanly */
	CHECK(pool_acquire("u", "t", &s) == 0);
	CHECK(fault.creates == 2 && fault.destroys == 1 && pool_state(s, NULL) == SBX_ACTIVE);
	CHECK(strstr(s->last_event, "health") != NULL);
	pool_put(s);
	teardown();
}

static void test_replicas_and_reaper(void)
{
	struct sbx *a, *b, *c;

	if (setup("replicas: 2\n"))
		return fail_setup();
	CHECK(pool_acquire("u", "a", &a) == 0 && pool_release(a) == 0);
	msleep(20);
	CHECK(pool_acquire("u", "b", &b) == 0 && pool_release(b) == 0);
	CHECK(pool_acquire("u", "c", &c) == 0);
	CHECK(fault.destroys == 1 && pool_state(a, NULL) == SBX_NONE && pool_state(b, NULL) == SBX_WARM);
	pool_put(a);
	pool_put(b);
	pool_put(c);
	teardown();

	if (setup("idle_timeout: 1\nidle_check_interval: 1\n"))
		return fail_setup();
	CHECK(pool_acquire("u", "t", &a) == 0 && pool_release(a) == 0);
	for (int i = 0; i < 40 && pool_state(a, NULL) != SBX_NONE; i++)
		msleep(100);
	CHECK(pool_state(a, NULL) == SBX_NONE && fault.destroys == 1 && !record_exists("u", "t"));
	pool_put(a);
	teardown();
}

/* pool.prewarm (spares.c): spares made in the background, claimed by a new
 * scope (never by one with a warm sandbox), refilled within replicas, a failed
 * claim destroyed and the create made cold, adopted after a restart, none left. */
static bool wait_spares(unsigned n)
{
	struct pool_stats ps;

	for (int i = 0; i < 200; i++) {
		pool_stats(&ps);
		if (ps.spares.ready == n && ps.spares.creating == 0)
			return true;
		msleep(10);
	}
	return false;
}

static void test_spares(void)
{
	struct sbx *a, *b, *c;
	struct pool_stats ps;

	if (setup("idle_timeout: 0\nreplicas: 4\npool: {prewarm: 2}\n"))
		return fail_setup();
	CHECK(wait_spares(2) && fault.spare_creates == 2);
	CHECK(pool_acquire("u", "a", &a) == 0 && a->from_spare && fault.claims == 1);
	CHECK(fault.creates == fault.spare_creates && record_exists("u", "a")); /* no create for the scope */
	CHECK(wait_spares(2) && fault.spare_creates == 3);    /* refilled: 1 active + 2 spares <= 4 */
	/* a warm scope reclaims its own sandbox: no claim */
	CHECK(pool_release(a) == 0);
	pool_put(a);
	CHECK(pool_acquire("u", "a", &a) == 0 && fault.claims == 1 && fault.healths >= 1);
	/* a failed claim: the spare is destroyed, the create goes on cold */
	fault.claim_err = SBX_ERR_IO;
	CHECK(pool_acquire("u", "b", &b) == 0 && !b->from_spare && fault.claims == 2);
	pool_stats(&ps);
	CHECK(ps.spares.claim_failures == 1 && ps.spares.claims == 1);
	fault.claim_err = SBX_OK;
	/* replicas 4: a, b active, spares refilled to 2 */
	CHECK(wait_spares(2));
	/* a third scope claims; the refill has no room left (3 + 1 = 4, then 4 + 1 > 4) */
	CHECK(pool_acquire("u", "c", &c) == 0 && c->from_spare);
	pool_stats(&ps); /* a refill would be queued (creating) by now */
	CHECK(ps.spares.ready == 1 && ps.spares.creating == 0 && ps.active == 3);
	pool_put(a);
	pool_put(b);
	pool_put(c);
	/* a restart adopts the spare as a spare */
	pool_shutdown(true);
	pool_clear();
	{
		struct sbx_config *cfg;
		char err[256];

		cfg = load_config("idle_timeout: 0\nreplicas: 4\npool: {prewarm: 2}\n", err, sizeof(err));
		CHECK(cfg && pool_init(cfg, err, sizeof(err)) == 0);
		config_put(cfg);
	}
	pool_stats(&ps);
	CHECK(ps.spares.adopted == 1);
	teardown(); /* every box destroyed: live_boxes 0 */
}

/* A state_dir as a killed daemon leaves it: a ready sandbox, a create cut
 * short, a record of a sandbox that no longer exists. */
static void write_records(void)
{
	static const struct {
		const char *thread, *state;
		bool alive;
		bool box;
	} recs[] = { { "ready", "ready", true, true }, { "half", "creating", true, true }, { "gone", "ready", false, false } };

	for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++) {
		struct buf d = BUF_INIT(BUF_CAP_PATH), p = BUF_INIT(BUF_CAP_PATH);
		char text[256];

		if (!layout_thread_dir(&d, state_dir, "u", recs[i].thread) && !util_mkdir_p(d.ptr, 0700)) {
			snprintf(text, sizeof(text), "{\"user\":\"u\",\"thread\":\"%s\",\"provider\":\"fault\",\"state\":\"%s\",\"created_at\":1}",
				recs[i].thread, recs[i].state);
			if (!layout_file(&p, d.ptr, "sandbox.json"))
				CHECK(util_write_atomic(p.ptr, text, strlen(text), 0600) == 0);
			buf_reset(&p);
			if (recs[i].box && !layout_file(&p, d.ptr, "fault.json"))
				CHECK(util_write_atomic(p.ptr, "{\"alive\": true}", 15, 0600) == 0);
		}
		buf_free(&d);
		buf_free(&p);
	}
}

static void test_adoption(void)
{
	struct sbx_config *cfg;
	struct pool_stats ps;
	struct sbx *s;
	char err[512];

	fault_reset();
	snprintf(base, sizeof(base), "/tmp/sbxfs-unit-XXXXXX");
	CHECK(mkdtemp(base) != NULL);
	snprintf(state_dir, sizeof(state_dir), "%s/state", base);
	write_records();
	cfg = load_config(NULL, err, sizeof(err));
	CHECK(cfg && pool_init(cfg, err, sizeof(err)) == 0);
	config_put(cfg);
	pool_stats(&ps);
	CHECK(ps.adopted == 1 && ps.warm == 1);
	CHECK(fault.destroys == 1);            /* the half-made one */
	CHECK(record_exists("u", "ready"));
	CHECK(!record_exists("u", "half") && !record_exists("u", "gone"));
	CHECK(pool_acquire("u", "ready", &s) == 0 && fault.creates == 0); /* reclaimed, not created */
	pool_put(s);
	teardown();
}

/* ---- jobs ------------------------------------------------------------------------ */

static struct sbx *job_sandbox(struct buf *jobs_dir)
{
	struct sbx *s = NULL;

	if (pool_acquire("u", "t", &s))
		return NULL;
	if (layout_dir(jobs_dir, s->thread_dir, LAYOUT_JOBS))
		return NULL;
	return s;
}

/* *v == want within ms (an atomic counter of the fault provider). */
static bool wait_until_ms(_Atomic int *v, int want, int ms)
{
	for (int i = 0; i < ms / 10; i++) {
		if (__atomic_load_n(v, __ATOMIC_RELAXED) == want)
			return true;
		usleep(10000);
	}
	return __atomic_load_n(v, __ATOMIC_RELAXED) == want;
}

static bool wait_state(struct job *j, bool (*pred)(enum job_state), int ms)
{
	for (int t = 0; t < ms; t += 10) {
		if (pred(job_state(j)))
			return true;
		msleep(10);
	}
	return pred(job_state(j));
}

static struct job *new_job(struct sbx *s, const char *jobs_dir, const char *name)
{
	return job_mkdir(s, jobs_dir, name) ? NULL : job_get(s, jobs_dir, name);
}

static int start_job(struct job *j, const char *cmd)
{
	int err = job_claim(j);

	return err ? err : job_start(j, cmd, strlen(cmd));
}

static void test_jobs(void)
{
	struct buf jd = BUF_INIT(BUF_CAP_PATH), out = BUF_INIT(BUF_CAP_JSON);
	struct sbx *s;
	struct job *j;
	char text[32];

	if (setup(NULL))
		return fail_setup();
	CHECK(job_init(NULL) == 0);
	s = job_sandbox(&jd);
	CHECK(s != NULL);

	/* exits with its code */
	fault.exec_mode = FAULT_EXEC_EXIT;
	fault.exit_code = 3;
	j = new_job(s, jd.ptr, "exit");
	CHECK(j && start_job(j, "echo\n") == 0);
	CHECK(start_job(j, "again") == EBUSY);
	CHECK(wait_state(j, job_state_ended, 10000) && job_state(j) == J_EXITED);
	CHECK(job_exit_text(j, text, sizeof(text)) == 0 && !strcmp(text, "3\n"));
	CHECK(job_stream_size(j, JOB_STDOUT) == 4);
	CHECK(job_rmdir(j) == 0);
	job_put(j);

	/* streams, then dies without a word: lost, with a result recorded */
	fault.exec_mode = FAULT_EXEC_DIE;
	j = new_job(s, jd.ptr, "die");
	CHECK(j && start_job(j, "x") == 0);
	CHECK(wait_state(j, job_state_ended, 10000) && job_state(j) == J_LOST);
	CHECK(job_status_json(j, &out) == 0 && strstr(buf_str(&out), "\"lost\""));
	job_put(j);

	/* the provider cannot start it: back to created, nothing left */
	fault.exec_err = SBX_ERR_IO;
	j = new_job(s, jd.ptr, "nostart");
	CHECK(j && start_job(j, "x") == EIO && job_state(j) == J_CREATED);
	buf_reset(&out);
	CHECK(job_cmd_text(j, &out) == 0 && out.len == 0);
	fault.exec_err = SBX_OK;
	job_put(j);

	/* an empty command changes nothing */
	j = new_job(s, jd.ptr, "empty");
	CHECK(j && start_job(j, " \n\n") == EINVAL && job_state(j) == J_CREATED);
	job_put(j);

	/* kill: SIGTERM, then SIGKILL after the grace period to what ignores it */
	fault.exec_mode = FAULT_EXEC_SIGNAL;
	fault.ignore_term = true;
	j = new_job(s, jd.ptr, "term");
	CHECK(j && start_job(j, "x") == 0);
	CHECK(job_ctl(j, "bogus", 5) == EINVAL && job_ctl(j, "kill SIGNOPE", 12) == EINVAL);
	CHECK(job_ctl(j, "kill\n", 5) == 0 && fault.signals[SIGTERM] == 1);
	CHECK(wait_state(j, job_state_ended, 10000) && job_state(j) == J_KILLED && fault.signals[SIGKILL] == 1);
	CHECK(job_ctl(j, "kill", 4) == ESRCH);
	job_put(j);
	fault.ignore_term = false;

	/* the job ends while its kill is still being delivered: the handle
	 * outlives the signaller, which frees it (once) */
	fault.signal_delay_ms = 300;
	{
		/* the jobs above let go of their handles first (the "term" job's
		 * SIGKILL escalation may still hold its own: it would be freed
		 * meanwhile and the count end below "before") */
		CHECK(wait_until_ms(&fault.live_execs, 0, 10000));
		int before = fault.live_execs;
		j = new_job(s, jd.ptr, "slowkill");
		CHECK(j && start_job(j, "x") == 0);
		CHECK(job_ctl(j, "kill KILL", 9) == 0);
		CHECK(wait_state(j, job_state_ended, 10000) && job_state(j) == J_KILLED);
		CHECK(wait_until_ms(&fault.live_execs, before, 10000));
		job_put(j);
	}
	fault.signal_delay_ms = 0;

	/* a backend that can only interrupt: other signals are EOPNOTSUPP */
	fault.signal_notsup = true;
	j = new_job(s, jd.ptr, "notsup");
	CHECK(j && start_job(j, "x") == 0);
	CHECK(job_ctl(j, "kill SIGUSR1", 12) == EOPNOTSUPP && job_state(j) == J_RUNNING);
	CHECK(job_ctl(j, "kill KILL", 9) == 0);
	CHECK(wait_state(j, job_state_ended, 10000));
	fault.signal_notsup = false;
	job_put(j);

	/* a job that cannot be watched fails cleanly with its cause */
	fault.exec_bad_fd = true;
	j = new_job(s, jd.ptr, "blind");
	CHECK(j && start_job(j, "x") == 0);
	CHECK(job_state(j) == J_FAILED);
	buf_reset(&out);
	CHECK(job_status_json(j, &out) == 0 && strstr(buf_str(&out), "\"failed\""));
	fault.exec_bad_fd = false;
	job_put(j);

	pool_put(s);
	job_shutdown();
	work_shutdown();
	buf_free(&jd);
	buf_free(&out);
	teardown();
}

/* After a restart: a started job whose provider still runs it is reattached;
 * one whose provider lost it is lost, with a result. */
static void test_job_reattach(void)
{
	struct buf jd = BUF_INIT(BUF_CAP_PATH), p = BUF_INIT(BUF_CAP_PATH);
	const char *names[] = { "alive", "gone" };
	struct sbx *s;
	struct job *j;

	if (setup(NULL))
		return fail_setup();
	CHECK(job_init(NULL) == 0);
	s = job_sandbox(&jd);
	CHECK(s != NULL);
	for (int i = 0; i < 2; i++) {
		buf_reset(&p);
		CHECK(job_mkdir(s, jd.ptr, names[i]) == 0);
		CHECK(!buf_addf(&p, "%s/%s/cmd", jd.ptr, names[i]) && util_write_atomic(p.ptr, "x", 1, 0600) == 0);
	}
	fault.reattach_ok = true;
	j = job_get(s, jd.ptr, "alive");
	CHECK(j != NULL);
	for (int t = 0; t < 300 && fault.live_execs == 0; t++)
		msleep(10);
	CHECK(job_state(j) == J_RUNNING && fault.live_execs == 1);
	msleep(50);
	CHECK(job_ctl(j, "kill KILL", 9) == 0);
	CHECK(wait_state(j, job_state_ended, 10000) && job_state(j) == J_KILLED);
	job_put(j);
	fault.reattach_ok = false;
	j = job_get(s, jd.ptr, "gone");
	CHECK(j && wait_state(j, job_state_ended, 10000) && job_state(j) == J_LOST);
	job_put(j);
	pool_put(s);
	job_shutdown();
	work_shutdown();
	buf_free(&jd);
	buf_free(&p);
	teardown();
}

/* ---- allocation failures ----------------------------------------------------------- */

static void alloc_cycle(void)
{
	struct sbx_config *cfg;
	struct sbx *s;
	char err[512];

	cfg = load_config("environment:\n  A: b\n  C: $HOME\nnetwork:\n  mode: allowlist\n  allow_domains: ['*.x.org']\n"
			  "users:\n  u: 1234\n",
		err, sizeof(err));
	if (!cfg)
		return;
	if (pool_init(cfg, err, sizeof(err)) == 0) {
		if (pool_acquire("u", "t", &s) == 0) {
			pool_release(s);
			pool_put(s);
		}
		pool_shutdown(false);
	}
	pool_clear();
	config_put(cfg);
}

static void test_allocation_failures(void)
{
	long n;

	fault_reset();
	snprintf(base, sizeof(base), "/tmp/sbxfs-unit-XXXXXX");
	CHECK(mkdtemp(base) != NULL);
	snprintf(state_dir, sizeof(state_dir), "%s/state", base);
	for (n = 1; n < 100000; n++) {
		alloc_failed = 0;
		alloc_count = 0;
		alloc_fail_at = n;
		alloc_cycle();
		alloc_fail_at = 0;
		if (!alloc_failed)
			break; /* the cycle needs fewer than n allocations: all were tried */
		util_rm_rf(state_dir);
	}
	CHECK(n > 20 && n < 100000);
	CHECK(fault.live_boxes == 0);
	fprintf(stderr, "allocation-failure pass: %ld allocations, each failed once\n", n - 1);
	util_rm_rf(base);
}

int main(void)
{
	log_open(0, getenv("SBXFS_UNIT_DEBUG") != NULL);
	if (!getenv("SBXFS_UNIT_DEBUG"))
		log_set_min_level(LOG_LVL_ERR + 1); /* the failures below are meant: keep the output to the verdict */
	config_set_hooks(&provider_config_hooks);
	json_set_alloc_funcs(json_alloc, free);
	fs_sbx_setup(); /* the pool frees what fs/job.c keeps per sandbox */
	if (fspark_init())
		return 2;
	test_acquire_release_reclaim();
	test_reserve();
	test_create_failures();
	test_slow_creates_run_in_parallel();
	test_health_flaps_and_destroy_fails();
	test_replicas_and_reaper();
	test_spares();
	test_adoption();
	test_jobs();
	test_job_reattach();
	test_allocation_failures();
	park_shutdown();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
