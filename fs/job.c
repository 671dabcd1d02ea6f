/* SPDX-License-Identifier: MIT */
/*
 * job.c - the job state machine (see job.h): files on the host, the
 * registry, start through the provider, result decoding, signals,
 * reattachment after a restart.  Supervision (the event thread: exits,
 * output growth, kill escalation) is jobwatch.c's.
 *
 * Why the provider, not the daemon, records the result: a job outlives a
 * crashed daemon (the local supervisor, a remote exec) and still reports its
 * end; the daemon only watches the provider's pollable handle and decodes
 * job_dir/result in one checked decoder (job_decode_result).
 * */
#define _GNU_SOURCE
#include "job.h"
#include "job_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/json.h"
#include "../common/log.h"
#include "../common/names.h"
#include "../common/util.h"
#include "fsbx.h"
#include "fswork.h"

static const char *job_state_names[] = { "created", "starting", "running", "exited", "killed", "timed_out", "lost",
	"failed" };
const char *const job_stream_files[2] = { "stdout", "stderr" };

struct lock jobs_lock = LOCK_INIT;
struct job *jobs; /* protected by jobs_lock */

/* ---- small helpers ---------------------------------------------------------------- */

void job_ref(struct job *j)
{
	__atomic_add_fetch(&j->refs, 1, __ATOMIC_RELAXED);
}

void job_put(struct job *j)
{
	if (!j || __atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	sbx_exec_put(j->exec);
	park_queue_destroy(&j->q);
	pthread_mutex_destroy(&j->lock);
	pool_put(j->sbx);
	free(j->dir);
	free(j);
}

static void job_ref_void(void *j)
{
	job_ref(j);
}

static void job_put_void(void *j)
{
	job_put(j);
}

int job_path(struct job *j, const char *file, struct buf *b)
{
	return buf_addf(b, "%s/%s", j->dir, file);
}

bool job_state_ended(enum job_state s)
{
	return s >= J_EXITED;
}

const char *job_state_name(enum job_state st)
{
	return (unsigned)st < sizeof(job_state_names) / sizeof(job_state_names[0]) ? job_state_names[st] : "?";
}

const char *job_scope(struct job *j)
{
	return j->scope;
}

struct park_queue *job_queue(struct job *j)
{
	return &j->q;
}

enum job_state job_state(struct job *j)
{
	enum job_state st;

	pthread_mutex_lock(&j->lock);
	st = j->state;
	pthread_mutex_unlock(&j->lock);
	return st;
}

static json_t *job_read_json(struct job *j, const char *file)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	json_t *o = job_path(j, file, &p) ? NULL : json_read_file(p.ptr);

	buf_free(&p);
	return o;
}

static bool job_file_exists(struct job *j, const char *file)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	bool r = !job_path(j, file, &p) && access(p.ptr, F_OK) == 0;

	buf_free(&p);
	return r;
}

static int job_write_file(struct job *j, const char *file, const char *data, size_t len)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	int err = 0;

	if (job_path(j, file, &p) || util_write_atomic(p.ptr, data, len, 0600)) {
		err = errno ? errno : EIO;
		log_warn(j->scope, "cannot write %s: %s", file, strerror(err));
	}
	buf_free(&p);
	return err;
}

static void job_unlink_file(struct job *j, const char *file)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);

	if (!job_path(j, file, &p))
		unlink(p.ptr);
	buf_free(&p);
}

/* Caller holds j->lock: the job runs now / has ended (data cache timeouts). */
static void job_set_state_locked(struct job *j, enum job_state st)
{
	struct fs_sbx *f = fs_sbx(j->sbx); /* NULL (no memory): only a cache timeout is off */

	if (f && st == J_RUNNING && j->state != J_RUNNING)
		__atomic_add_fetch(&f->jobs_running, 1, __ATOMIC_RELAXED);
	else if (f && st != J_RUNNING && j->state == J_RUNNING)
		__atomic_sub_fetch(&f->jobs_running, 1, __ATOMIC_RELAXED);
	j->state = st;
}

/* ---- the result --------------------------------------------------------------------- */

struct job_result {
	enum job_state state;
	int exit; /* 128+N for signal N */
};

/* The one decoder of job_dir/result.  false when it is missing or not a
 * result (then the job is lost). */
static bool job_decode_result(struct job *j, struct job_result *r)
{
	static const struct {
		const char *name;
		enum job_state st;
	} states[] = { { "exited", J_EXITED }, { "killed", J_KILLED }, { "timed_out", J_TIMED_OUT },
		{ "lost", J_LOST }, { "failed", J_FAILED } };
	json_t *o = job_read_json(j, "result"), *ex;
	const char *st;
	bool ok = false;

	st = o ? json_string_value(json_object_get(o, "state")) : NULL;
	ex = o ? json_object_get(o, "exit") : NULL;
	if (st && json_is_integer(ex) && json_integer_value(ex) >= 0 && json_integer_value(ex) <= 255) {
		r->state = J_FAILED;
		for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++)
			if (!strcmp(st, states[i].name))
				r->state = states[i].st;
		r->exit = (int)json_integer_value(ex);
		ok = true;
	} else if (o) {
		log_warn(j->scope, "result is not a job result: the job counts as lost");
	}
	json_decref(o);
	return ok;
}

void job_record_end(struct job *j, const char *state, const char *why)
{
	json_t *o = json_pack("{s:s,s:i,s:i,s:f,s:s}", "state", state, "exit", 255, "signal", 0, "ended_at",
		util_wall_now(), "error", why);
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;

	if (text)
		job_write_file(j, "result", text, strlen(text));
	free(text);
	json_decref(o);
}

void job_take_result_locked(struct job *j)
{
	struct job_result r;

	if (!job_decode_result(j, &r)) {
		job_record_end(j, "lost", "the job ended without recording a result");
		r.state = J_LOST;
	}
	job_set_state_locked(j, r.state);
}

int job_init(void (*on_end)(struct sbx *s))
{
	return jobwatch_start(on_end);
}

void job_shutdown(void)
{
	struct job *j;

	jobwatch_stop();
	/* Answer every parked request: the session is ending.  Jobs still
	 * running go on (their provider records the result). */
	lock_acquire(&jobs_lock);
	while ((j = jobs)) {
		struct sbx_exec *x;
		bool watched;

		jobs = j->next;
		pthread_mutex_lock(&j->lock);
		jobwatch_unwatch_locked(j);
		x = j->exec;
		j->exec = NULL;
		watched = j->watched;
		j->watched = false;
		pthread_mutex_unlock(&j->lock);
		park_drain(&j->q, EINTR);
		sbx_exec_put(x);
		if (watched)
			job_put(j);
		job_put(j); /* the registry's */
	}
	lock_release(&jobs_lock);
	jobwatch_release();
}

/* ---- registry and loading ---------------------------------------------------------------- */

static struct job *job_find_locked(const char *dir)
{
	lock_assert_held(&jobs_lock);
	for (struct job *j = jobs; j; j = j->next)
		if (!strcmp(j->dir, dir))
			return j;
	return NULL;
}

static struct job *job_new(struct sbx *s, const char *name, const char *dir)
{
	struct job *j = calloc(1, sizeof(*j));

	if (!j || !(j->dir = strdup(dir)) ||
	    str_fmt(j->scope, sizeof(j->scope), "%s/%s/jobs/%s", s->user, s->thread, name)) {
		if (j)
			free(j->dir);
		free(j);
		return NULL;
	}
	j->refs = 1; /* the registry's */
	memcpy(j->name, name, strlen(name) + 1);
	j->sbx = s;
	pool_get(s);
	j->wd[0] = j->wd[1] = -1;
	pthread_mutex_init(&j->lock, NULL);
	park_queue_init(&j->q, job_ref_void, job_put_void, j);
	return j;
}

/* Work thread: after a restart, find out whether a started job still runs. */
static void job_reattach_work(void *arg)
{
	struct job *j = arg;
	struct sbx_exec *x = NULL;
	int err = pool_exec_reattach(j->sbx, j->dir, &x);

	pthread_mutex_lock(&j->lock);
	j->reattaching = false;
	if (!err)
		j->exec = x;
	else
		job_take_result_locked(j); /* it has ended (or was lost) meanwhile */
	pthread_mutex_unlock(&j->lock);
	if (!err && (err = jobwatch_add(j)))
		jobwatch_fail(j, err);
	else if (!err)
		log_info(j->scope, "reattached to the running job");
	park_wake(&j->q);
	job_put(j);
}

/* Caller holds j->lock (jobs_lock too): a job directory seen the first time. */
static void job_load_locked(struct job *j)
{
	lock_assert_held(&jobs_lock);
	if (job_file_exists(j, "result")) {
		job_take_result_locked(j);
	} else if (job_file_exists(j, "cmd")) {
		/* started by an earlier daemon: running until the provider says otherwise */
		job_set_state_locked(j, J_RUNNING);
		j->reattaching = true;
		job_ref(j);
		if (work_submit(WORK_IO, j->sbx->token, pool_work_timeout_ms(), job_reattach_work, j)) {
			j->reattaching = false;
			__atomic_sub_fetch(&j->refs, 1, __ATOMIC_RELAXED);
			job_take_result_locked(j);
		}
	} else {
		j->state = J_CREATED;
	}
}

struct job *job_get(struct sbx *s, const char *jobs_dir, const char *name)
{
	struct buf dir = BUF_INIT(BUF_CAP_PATH);
	struct stat st;
	struct job *j = NULL;

	if (!names_valid(name) || buf_addf(&dir, "%s/%s", jobs_dir, name))
		goto out;
	lock_acquire(&jobs_lock);
	j = job_find_locked(dir.ptr);
	if (!j && lstat(dir.ptr, &st) == 0 && S_ISDIR(st.st_mode) && (j = job_new(s, name, dir.ptr))) {
		pthread_mutex_lock(&j->lock);
		job_load_locked(j);
		pthread_mutex_unlock(&j->lock);
		j->next = jobs;
		jobs = j;
	}
	if (j)
		job_ref(j);
	lock_release(&jobs_lock);
out:
	buf_free(&dir);
	return j;
}

int job_mkdir(struct sbx *s, const char *jobs_dir, const char *name)
{
	struct buf dir = BUF_INIT(BUF_CAP_PATH);
	int err = 0;

	if (buf_addf(&dir, "%s/%s", jobs_dir, name)) {
		buf_free(&dir);
		return ENAMETOOLONG;
	}
	if (util_mkdir_p(jobs_dir, 0700) || mkdir(dir.ptr, 0700))
		err = errno;
	else
		log_info(s->token, "job slot %s created", name);
	buf_free(&dir);
	return err;
}

/* Trash names: ".rm-<name>-<pid>-<n>" in the jobs directory.  A dot-name
 * is never a job (names_valid), so the slot is gone the moment the rename
 * lands; job_list() deletes what a removal left behind. */
#define JOB_TRASH_PREFIX ".rm-"

/* Remove a job's directory.  It is first renamed out of the way in one step:
 * deleting the tree in place can fail half-way (a process of the job still
 * writing into it: ENOTEMPTY) or be cut by a kill -9, and a half-deleted slot
 * would come back as a job nobody created (found by the chaos run). */
static void job_remove_dir(struct job *j)
{
	static unsigned seq;
	struct buf t = BUF_INIT(BUF_CAP_PATH);
	const char *slash = strrchr(j->dir, '/');
	const char *victim = j->dir;

	if (slash && !buf_addf(&t, "%.*s/" JOB_TRASH_PREFIX "%s-%d-%u", (int)(slash - j->dir), j->dir, j->name,
				  (int)getpid(), __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED))) {
		if (!rename(j->dir, t.ptr))
			victim = t.ptr;
		else if (errno != ENOENT)
			log_warn(j->scope, "moving the job directory away: %s", strerror(errno));
	}
	if (util_rm_rf(victim))
		log_warn(j->scope, "removing the job directory: %s (deleted at the next listing)", strerror(errno));
	buf_free(&t);
}

int job_rmdir(struct job *j)
{
	struct job **pp;
	int err = 0;

	lock_acquire(&jobs_lock);
	pthread_mutex_lock(&j->lock);
	if (j->removed) {
		err = ENOENT;
	} else if (j->state == J_RUNNING || j->state == J_STARTING) {
		err = EBUSY;
		log_warn(j->scope, "rmdir refused: the job is %s", job_state_name(j->state));
	} else {
		for (pp = &jobs; *pp; pp = &(*pp)->next)
			if (*pp == j) {
				*pp = j->next;
				break;
			}
		j->removed = true;
		if (!job_state_ended(j->state))
			j->state = J_FAILED; /* an open handle sees an ended job */
	}
	pthread_mutex_unlock(&j->lock);
	lock_release(&jobs_lock);
	if (err)
		return err;
	park_drain(&j->q, ENOENT); /* nobody waits for a removed job */
	pool_exec_cleanup(j->sbx, j->dir, j->name); /* reads the provider's files of the job first */
	job_remove_dir(j);
	log_info(j->scope, "job slot removed");
	job_put(j); /* the registry's */
	return 0;
}

/* What a job removal cut by a kill (or by a busy tree) left in jobs/. */
static void job_sweep_trash(const char *jobs_dir, const char *name)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);

	if (!buf_addf(&p, "%s/%s", jobs_dir, name) && util_rm_rf(p.ptr))
		log_warn("jobs", "removing %s left by an earlier job removal: %s", name, strerror(errno));
	buf_free(&p);
}

void job_list(const char *jobs_dir, void (*fn)(const char *name, void *arg), void *arg)
{
	DIR *d = opendir(jobs_dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)))
		if (names_valid(e->d_name) && e->d_type == DT_DIR)
			fn(e->d_name, arg);
		else if (!strncmp(e->d_name, JOB_TRASH_PREFIX, strlen(JOB_TRASH_PREFIX)))
			job_sweep_trash(jobs_dir, e->d_name);
	closedir(d);
}

struct job_busy {
	struct sbx *s;
	const char *jobs_dir;
	bool busy;
};

static void job_busy_one(const char *name, void *arg)
{
	struct job_busy *b = arg;
	struct job *j;
	enum job_state st;

	if (b->busy || !(j = job_get(b->s, b->jobs_dir, name)))
		return;
	st = job_state(j);
	b->busy = st == J_STARTING || st == J_RUNNING;
	job_put(j);
}

bool job_any_running(struct sbx *s, const char *jobs_dir)
{
	struct job_busy b = { .s = s, .jobs_dir = jobs_dir };

	/* every slot on disk, also those nobody looked at since a restart
	 * (job_get loads them: a started one counts as running until its
	 * reattachment says otherwise) */
	job_list(jobs_dir, job_busy_one, &b);
	return b.busy;
}

/* ---- input and start ------------------------------------------------------------------------- */

/* One write to `env`, checked whole and turned into what the env file
 * keeps: KEY=VALUE entries, each ending in NUL.  A write is either lines
 * ("KEY=VALUE\n", the shell's way) or, when it holds a NUL byte,
 * NUL-separated entries whose values may hold newlines (a PEM key, a
 * multi-line secret: DeerFlow's env values are arbitrary strings, §1.1).
 * Empty lines and entries are skipped.  EINVAL (logged) for an entry
 * without '=' or a key that is not ^[A-Za-z_][A-Za-z0-9_]*$. */
static int job_env_entries(struct job *j, const char *text, size_t size, struct buf *out)
{
	const char sep = memchr(text, '\0', size) ? '\0' : '\n';
	const char *e = text, *end = text + size;

	while (e < end) {
		const char *stop = memchr(e, sep, (size_t)(end - e));
		size_t len = stop ? (size_t)(stop - e) : (size_t)(end - e);
		const char *eq = memchr(e, '=', len);
		char key[256];

		if (len && (!eq || (size_t)(eq - e) >= sizeof(key))) {
			log_warn(j->scope, "env: %s %.*s is not KEY=VALUE", sep ? "line" : "entry",
				(int)(len > 80 ? 80 : len), e);
			return EINVAL;
		}
		if (len) {
			memcpy(key, e, (size_t)(eq - e));
			key[eq - e] = '\0';
			if (!names_env_key_valid(key)) {
				log_warn(j->scope, "env: key '%s' is not a valid POSIX environment variable name (must match ^[A-Za-z_][A-Za-z0-9_]*$)",
					key);
				return EINVAL;
			}
			if (buf_add(out, e, len) || buf_add(out, "", 1))
				return EFBIG;
		}
		e += len + (stop ? 1 : 0);
	}
	return 0;
}

/* Append to one of the job's input files, refusing past max bytes. */
static int job_append(struct job *j, const char *file, const char *data, size_t len, long long max)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	struct stat st;
	int fd = -1, err = 0;

	if (job_path(j, file, &p))
		err = ENAMETOOLONG;
	else if ((fd = open(p.ptr, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
		err = errno;
	else if (fstat(fd, &st))
		err = errno;
	else if ((long long)st.st_size + (long long)len > max)
		err = EFBIG;
	else if (write(fd, data, len) != (ssize_t)len)
		err = errno ? errno : EIO;
	if (err == EFBIG)
		log_warn(j->scope, "%s: more than %lld bytes refused", file, max);
	if (fd >= 0)
		close(fd);
	buf_free(&p);
	return err;
}

static int job_before_start(struct job *j, const char *what)
{
	enum job_state st = job_state(j);

	if (st == J_CREATED)
		return 0;
	log_warn(j->scope, "%s: the job has already been started (%s)", what, job_state_name(st));
	return EBUSY;
}

int job_add_env(struct job *j, const char *data, size_t len)
{
	struct buf entries = BUF_INIT(JOB_ENV_MAX);
	int err = job_before_start(j, "env");

	if (!err)
		err = job_env_entries(j, data, len, &entries);
	if (err == EFBIG)
		log_warn(j->scope, "env: more than %d bytes refused", JOB_ENV_MAX);
	if (!err && entries.len)
		err = job_append(j, "env", entries.ptr, entries.len, JOB_ENV_MAX);
	buf_free(&entries);
	return err;
}

int job_add_stdin(struct job *j, const char *data, size_t len)
{
	int err = job_before_start(j, "stdin");

	return err ? err : job_append(j, "stdin", data, len, JOB_STDIN_MAX);
}

void job_cmd_writer(struct job *j, int delta)
{
	pthread_mutex_lock(&j->lock);
	j->cmd_writers += delta;
	pthread_mutex_unlock(&j->lock);
	if (delta < 0)
		park_wake(&j->q); /* a reader of exit may now get ESRCH */
}

int job_cmd_writers(struct job *j)
{
	int n;

	pthread_mutex_lock(&j->lock);
	n = j->cmd_writers;
	pthread_mutex_unlock(&j->lock);
	return n;
}

void job_unclaim(struct job *j)
{
	pthread_mutex_lock(&j->lock);
	if (j->state == J_STARTING)
		j->state = J_CREATED;
	pthread_mutex_unlock(&j->lock);
	park_wake(&j->q);
}

int job_claim(struct job *j)
{
	int err = 0;

	pthread_mutex_lock(&j->lock);
	if (j->state == J_CREATED && !j->removed)
		j->state = J_STARTING;
	else
		err = j->removed ? ENOENT : EBUSY;
	pthread_mutex_unlock(&j->lock);
	if (err == EBUSY)
		log_warn(j->scope, "cmd: the job has already been started");
	return err;
}

static int (*job_env_hook)(struct sbx *s, struct buf *out); /* set once, before any job */

void job_set_environ_hook(int (*fn)(struct sbx *s, struct buf *out))
{
	job_env_hook = fn;
}

/* The job's environment, NUL-separated: a fixed base, the hook's (the proxy
 * of an allowlist sandbox), then the sandbox's configured environment, then
 * the job's env file (later wins). */
static int job_environ(struct job *j, const struct sbx_config *cfg, struct buf *out)
{
	static const char *base[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/mnt/user-data/workspace", "LANG=C.UTF-8", "TMPDIR=/tmp", NULL };
	struct buf p = BUF_INIT(BUF_CAP_PATH), text = BUF_INIT(JOB_ENV_MAX + 1);
	int r = 0;

	for (int i = 0; base[i]; i++)
		r |= buf_add(out, base[i], strlen(base[i]) + 1);
	if (job_env_hook)
		r |= job_env_hook(j->sbx, out);
	for (size_t i = 0; i < cfg->n_env; i++)
		r |= buf_addf(out, "%s=%s", cfg->env[i].key, cfg->env[i].value) || buf_add(out, "", 1);
	if (job_path(j, "env", &p) || (util_read_file(p.ptr, &text) && errno != ENOENT))
		r = -1;
	/* the env file's entries end in NUL (job_env_entries); one without any
	 * NUL was written by an older daemon, one entry per line */
	if (text.len) {
		const char sep = memchr(text.ptr, '\0', text.len) ? '\0' : '\n';
		const char *e = text.ptr, *end = text.ptr + text.len;

		while (!r && e < end) {
			const char *stop = memchr(e, sep, (size_t)(end - e));
			size_t len = stop ? (size_t)(stop - e) : (size_t)(end - e);
			if (len)
				r |= buf_add(out, e, len) || buf_add(out, "", 1);
			e += len + 1;
		}
	}
	buf_free(&p);
	buf_free(&text);
	return r ? ENOMEM : 0;
}

/* ---- the per-job timeout ------------------------------------------------------------- */

/* A `timeout` write: a positive decimal number of seconds ("30", "2.5"),
 * trailing newlines and blanks allowed.  The value, 0 for zero, -1 for
 * anything else (a sign, an exponent, "inf", garbage). */
static double job_parse_seconds(const char *data, size_t len)
{
	char text[32];
	size_t i = 0, digits = 0;

	while (len && memchr("\n\r\t ", data[len - 1], 4))
		len--;
	if (!len || len >= sizeof(text))
		return -1;
	memcpy(text, data, len);
	text[len] = '\0';
	for (; text[i] >= '0' && text[i] <= '9'; i++)
		digits++;
	if (text[i] == '.')
		for (i++; text[i] >= '0' && text[i] <= '9'; i++)
			digits++;
	if (text[i] || !digits)
		return -1;
	return strtod(text, NULL); /* the daemon runs in the C locale: '.' */
}

int job_set_timeout(struct job *j, const char *data, size_t len)
{
	struct sbx_config *cfg = pool_sbx_config(j->sbx);
	double v = job_parse_seconds(data, len);
	enum job_state st = J_CREATED;
	char text[32];
	long secs = 0;
	int err = 0;

	if (!cfg)
		return ENOENT;
	if (v <= 0) {
		log_warn(j->scope, "timeout: '%.*s' is not a positive number of seconds", (int)(len > 40 ? 40 : len),
			data);
		err = EINVAL;
	} else if (v > (double)cfg->bash_command_timeout) {
		log_warn(j->scope, "timeout: %.*s s is more than bash_command_timeout (%ld s)", (int)(len > 40 ? 40 : len),
			data, cfg->bash_command_timeout);
		err = EINVAL;
	} else {
		/* whole seconds, rounded up: the providers count seconds, and a
		 * command never gets less time than it asked for */
		secs = (long)v;
		if ((double)secs < v)
			secs++;
		snprintf(text, sizeof(text), "%ld\n", secs);
	}
	config_put(cfg);
	if (err)
		return err;
	/* under the job's lock: a start claims the job under it, so a write
	 * that succeeds is one the start reads */
	pthread_mutex_lock(&j->lock);
	if (j->state != J_CREATED || j->removed)
		st = j->removed ? J_FAILED : j->state;
	else
		err = job_write_file(j, "timeout", text, strlen(text));
	pthread_mutex_unlock(&j->lock);
	if (st != J_CREATED) {
		log_warn(j->scope, "timeout: the job has already been started (%s): it applies before cmd only",
			job_state_name(st));
		return EINVAL;
	}
	return err;
}

/* The timeout a job runs (or would run) with: its `timeout` file, else
 * bash_command_timeout; never more than bash_command_timeout (a slot
 * written under a configuration with a higher one gets the current cap). */
static long job_timeout_of(struct job *j, const struct sbx_config *cfg, bool warn)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH), t = BUF_INIT(64);
	long secs = cfg->bash_command_timeout;

	if (!job_path(j, "timeout", &p) && !util_read_file(p.ptr, &t) && t.len) {
		long v = strtol(buf_str(&t), NULL, 10);
		if (v > 0 && v <= cfg->bash_command_timeout)
			secs = v;
		else if (v > 0 && warn)
			log_warn(j->scope, "timeout: %ld s is more than bash_command_timeout (%ld s) now: %ld s applies",
				v, cfg->bash_command_timeout, cfg->bash_command_timeout);
	}
	buf_free(&p);
	buf_free(&t);
	return secs;
}

static int job_write_meta(struct job *j, long timeout, double started)
{
	json_t *o = json_pack("{s:I,s:f}", "timeout", (json_int_t)timeout, "started_at", started);
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	int err = text ? job_write_file(j, "meta.json", text, strlen(text)) : ENOMEM;

	free(text);
	json_decref(o);
	return err;
}

int job_start(struct job *j, const char *cmd, size_t len)
{
	struct sbx_config *cfg = pool_sbx_config(j->sbx);
	struct buf env = BUF_INIT(2 * JOB_ENV_MAX + 64 * 1024);
	struct sbx_exec_spec spec = { 0 };
	struct sbx_exec *x = NULL;
	long timeout = 0;
	int err = 0;

	size_t blank = 0;

	while (len && (cmd[len - 1] == '\n' || cmd[len - 1] == '\r'))
		len--;
	while (blank < len && memchr(" \t\r\n", cmd[blank], 4))
		blank++;
	if (!cfg) {
		err = ENOENT;
	} else if (blank == len) {
		log_warn(j->scope, "cmd: empty command");
		err = EINVAL;
	} else if (memchr(cmd, '\0', len)) {
		log_warn(j->scope, "cmd: the command contains a NUL byte");
		err = EINVAL;
	}
	if (!err)
		err = job_environ(j, cfg, &env);
	if (!err)
		err = job_write_file(j, "cmd", cmd, len);
	if (!err)
		err = job_write_file(j, "environ", env.ptr ? env.ptr : "", env.len);
	if (!err) {
		timeout = job_timeout_of(j, cfg, true);
		err = job_write_meta(j, timeout, util_wall_now());
	}
	if (!err) {
		spec.job_dir = j->dir;
		spec.job_name = j->name;
		spec.timeout = timeout;
		err = pool_exec(j->sbx, &spec, &x);
		if (err)
			log_err(j->scope, "cannot start the job: %s", strerror(err));
	}
	buf_free(&env);
	config_put(cfg);
	if (err) {
		job_unlink_file(j, "cmd");
		job_unlink_file(j, "environ");
		job_unlink_file(j, "meta.json");
		pthread_mutex_lock(&j->lock);
		j->state = J_CREATED;
		pthread_mutex_unlock(&j->lock);
		park_wake(&j->q);
		return err;
	}
	pthread_mutex_lock(&j->lock);
	j->exec = x;
	job_set_state_locked(j, J_RUNNING);
	pthread_mutex_unlock(&j->lock);
	err = jobwatch_add(j);
	if (err)
		jobwatch_fail(j, err);
	else
		log_info(j->scope, "job started");
	park_wake(&j->q);
	return 0;
}

/* ---- signals ------------------------------------------------------------------------------- */

static int job_parse_signal(const char *s, int *sig)
{
	char *end;
	long n;

	if (!*s) {
		*sig = SIGTERM;
		return 0;
	}
	n = strtol(s, &end, 10);
	if (!*end && end != s) {
		if (n < 1 || n >= NSIG)
			return -1;
		*sig = (int)n;
		return 0;
	}
	if (!strncmp(s, "SIG", 3))
		s += 3;
	for (int i = 1; i < NSIG; i++) {
		const char *abbrev = sigabbrev_np(i);
		if (abbrev && !strcmp(abbrev, s)) {
			*sig = i;
			return 0;
		}
	}
	return -1;
}

int job_ctl(struct job *j, const char *data, size_t len)
{
	char text[128], *arg;
	struct sbx_exec *x;
	int sig = SIGTERM, err;
	enum sbx_err e;

	while (len && (data[len - 1] == '\n' || data[len - 1] == ' '))
		len--;
	if (len >= sizeof(text) || memchr(data, '\0', len) || len < 4 || strncmp(data, "kill", 4) ||
	    (len > 4 && data[4] != ' ')) {
		log_warn(j->scope, "ctl: unknown command '%.*s' (expected: kill [SIGNAL])", (int)(len > 40 ? 40 : len),
			data);
		return EINVAL;
	}
	memcpy(text, data, len);
	text[len] = '\0';
	for (arg = text + 4; *arg == ' '; arg++)
		;
	if (job_parse_signal(arg, &sig)) {
		log_warn(j->scope, "ctl: unknown signal '%.40s'", arg);
		return EINVAL;
	}
	pthread_mutex_lock(&j->lock);
	x = j->state == J_RUNNING && !j->reattaching ? j->exec : NULL;
	if (x)
		sbx_exec_get(x); /* x stays allocated while it is signalled, even if the job ends */
	pthread_mutex_unlock(&j->lock);
	if (!x) {
		log_warn(j->scope, "ctl: kill refused: the job is %s", job_state_name(job_state(j)));
		return ESRCH;
	}
	if (job_write_file(j, "kill-requested", arg, strlen(arg))) {
		sbx_exec_put(x);
		return EIO;
	}
	e = sbx_exec_signal(x, sig);
	sbx_exec_put(x);
	err = sbx_err_errno(e);
	if (err == ENOENT)
		err = ESRCH;
	if (err) {
		job_unlink_file(j, "kill-requested");
		log_warn(j->scope, "ctl: signal %d not delivered: %s", sig, strerror(err));
		return err;
	}
	log_info(j->scope, "signal %d sent%s", sig, !*arg ? ", SIGKILL follows if it keeps running" : "");
	if (!*arg) {
		pthread_mutex_lock(&j->lock);
		j->kill_deadline_ms = util_now_ms() + JOB_KILL_GRACE_MS;
		pthread_mutex_unlock(&j->lock);
		jobwatch_kick();
	}
	return 0;
}

/* ---- output and status -------------------------------------------------------------------- */

int job_open_stream(struct job *j, enum job_stream which)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	int fd = -1;

	if (!job_path(j, job_stream_files[which], &p))
		fd = open(p.ptr, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	buf_free(&p);
	return fd;
}

static off_t job_file_size(struct job *j, const char *file)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	struct stat st;
	off_t size = 0;

	if (!job_path(j, file, &p) && !lstat(p.ptr, &st) && S_ISREG(st.st_mode))
		size = st.st_size;
	buf_free(&p);
	return size;
}

off_t job_stream_size(struct job *j, enum job_stream which)
{
	return job_file_size(j, job_stream_files[which]);
}

off_t job_input_size(struct job *j, enum job_input which)
{
	static const char *files[] = { "env", "stdin", "timeout" };

	return (unsigned)which < sizeof(files) / sizeof(files[0]) ? job_file_size(j, files[which]) : 0;
}

int job_exit_text(struct job *j, char *out, size_t len)
{
	struct job_result r = { .exit = 255 };

	job_decode_result(j, &r);
	return str_fmt(out, len, "%d\n", r.exit);
}

int job_cmd_text(struct job *j, struct buf *out)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	int r = 0;

	if (!job_path(j, "cmd", &p) && !util_read_file(p.ptr, out) && out->len)
		r = buf_adds(out, "\n");
	else
		buf_reset(out);
	buf_free(&p);
	return r;
}

static json_t *jget(json_t *o, const char *key)
{
	json_t *v = o ? json_object_get(o, key) : NULL;

	return v ? json_incref(v) : json_null();
}

int job_status_json(struct job *j, struct buf *out)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH), t = BUF_INIT(JOB_CMD_MAX + 1);
	json_t *o, *r, *meta, *cmd = json_null(), *pgid = json_null(), *timeout;
	struct sbx_config *cfg;
	enum job_state st = job_state(j);

	r = job_read_json(j, "result");
	meta = job_read_json(j, "meta.json");
	if (!job_path(j, "cmd", &p) && !util_read_file(p.ptr, &t) && t.len) {
		json_decref(cmd);
		cmd = json_string_lossy(t.ptr, t.len);
	}
	buf_reset(&p);
	buf_reset(&t);
	if (!job_path(j, "pgid", &p) && !util_read_file(p.ptr, &t) && t.len) {
		json_decref(pgid);
		pgid = json_integer(strtol(buf_str(&t), NULL, 10));
	}
	buf_free(&p);
	buf_free(&t);
	timeout = jget(meta, "timeout");
	if (json_is_null(timeout) && (cfg = pool_sbx_config(j->sbx))) {
		/* not started: the timeout it would run with (its `timeout` file) */
		json_decref(timeout);
		timeout = json_integer(job_timeout_of(j, cfg, false));
		config_put(cfg);
	}
	o = json_pack("{s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:I,s:I,s:o}", "name", j->name, "state", job_state_name(st),
		"cmd", cmd ? cmd : json_null(), "pid", pgid, "started_at", jget(meta, "started_at"), "ended_at",
		jget(r, "ended_at"), "exit", jget(r, "exit"), "signal", jget(r, "signal"), "stdout_bytes",
		(json_int_t)job_stream_size(j, JOB_STDOUT), "stderr_bytes", (json_int_t)job_stream_size(j, JOB_STDERR),
		"timeout", timeout ? timeout : json_null());
	if (o) /* every status has the key (interface.md): null when nothing ended the job */
		json_object_set_new(o, "reason", jget(r, "reason"));
	if (o) /* paused with its sandbox (ctl "freeze"): its timeout does not run */
		json_object_set_new(o, "frozen",
			json_boolean(st == J_RUNNING && __atomic_load_n(&j->sbx->frozen, __ATOMIC_ACQUIRE)));
	json_decref(r);
	json_decref(meta);
	return json_to_buf(o, out);
}
