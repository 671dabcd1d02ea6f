/* SPDX-License-Identifier: MIT */
/*
 * opensandbox_jobs.c - jobs in opensandbox sandboxes through execd's
 * POST /command event stream (remote-apis.md A.10.1).
 *
 * A job: one thread per running job (the pump) performs
 *   POST /command {command, cwd: the workspace, timeout: ms, envs: the job's
 *                  environment}
 * and reads the stream as it arrives: init (the command id, recorded in
 * job_dir/opensandbox.json for a later daemon), stdout and stderr lines
 * appended to the job's files, then execution_complete (exit 0) or error
 * (exit code evalue; -1 after a signal; a non-number: the command did not
 * start).  exec_start returns once init has arrived (the command can be
 * interrupted then); the stream is stopped at the terminal event.
 *
 * The command's text travels in the environment (SBXFS_CMD, unset before
 * /bin/sh -c runs it: execd runs bash -c, a job is /bin/sh's) when it is
 * UTF-8 without NUL and not too big for one environment string; otherwise,
 * and when the job has stdin, the files are uploaded first to
 * /tmp/.sbxfs/jobs/NAME/ and the command reads them there.
 *
 * Output: execd sends one event per line without its terminator (\n, \r and
 * \r\n all end a line); each is appended with "\n".  So \r line ends come
 * out as \n, and a last line without a newline gains one.
 *
 * A stream that breaks before the terminal event (a dropped connection, a
 * malformed event, the output limit) leaves the command running in the
 * sandbox: the pump then polls GET /command/status/{id} for its end.  After
 * a daemon restart the same poll gives the job its real exit code; the
 * output it wrote while no daemon read its stream is not recoverable (execd
 * streams a foreground command's output only to the request that started
 * it), and the result says so.  A command execd no longer knows (the
 * sandbox restarted) is lost.
 *
 * Signals: execd can only interrupt (SIGTERM to the command's process group,
 * SIGKILL about 3 s later): SIGTERM and SIGKILL both interrupt; any other
 * (SIGINT too) is EOPNOTSUPP (the provider lacks SBX_CAP_SIGNALS).  The
 * result names the signal that ended the command, from execd's error text
 * ("signal: terminated", "signal: killed"), not the one asked for.
 */
#define _GNU_SOURCE
#include "opensandbox_int.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/buf.h"
#include "../common/json.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/util.h"
#include "jobrun.h"
#include "record.h"
#include "provider_int.h"

#define OJOB_RECORD "opensandbox.json"
#define OJOB_ENV_MAX (2 * 1024 * 1024)
#define OJOB_CMD_MAX (1024 * 1024)
#define OJOB_INLINE_MAX (100 * 1024) /* one environment string: Linux takes 128 KiB */
#define OJOB_POLL_US 500000
#define OJOB_LOST_AFTER_MS 60000     /* execd unreachable this long: the job is lost */
#define OJOB_PEND_MAX (256 * 1024)   /* output batched per piece of the stream */
#define OJOB_NOTE_UNSEEN "output written while no daemon read the command's stream is missing from stdout/stderr"

struct ojob {
	struct jobrun run;    /* first: the handle, output files, limit, pump */
	struct obox *ob;      /* referenced */
	char cmd_id[128];     /* set by the pump before started becomes 1 */
	long timeout;
	bool staged;          /* cmd/stdin were uploaded to OS_JOBS_PATH/NAME */
	bool watch_only;      /* reattached: only the end is ours to learn */
	uint64_t started_ms;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int started;          /* protected by lock: 0 waiting, 1 running, -1 did not start */
	enum sbx_err start_err; /* protected by lock */
	struct buf pend[2];   /* stdout, stderr lines parsed but not written yet (the pump's) */
	struct osapi_execd ex;
	/* the request, owned */
	char *command;
	char *inline_cmd; /* the command's text, when it travels in envs (SBXFS_CMD) */
	struct osapi_kv *envs;
	size_t n_envs;
	struct buf envtext;
};

static struct ojob *ojob(struct sbx_exec *x)
{
	if (!x || x->prov != &provider_opensandbox)
		abort(); /* a handle given to the wrong provider is a programming error */
	return (struct ojob *)x;
}

/* ---- files of the job -------------------------------------------------------------------------- */

static int job_path(struct buf *p, const char *job_dir, const char *name)
{
	buf_reset(p);
	return buf_addf(p, "%s/%s", job_dir, name);
}


static void ojob_save(struct ojob *j)
{
	json_t *o = json_pack("{s:s,s:s,s:b,s:i,s:f}", "command_id", j->cmd_id, "sandbox", j->ob->id, "staged",
		j->staged, "timeout", (int)j->timeout, "started_at", util_wall_now());

	if (!o || record_save(j->run.job_dir, OJOB_RECORD, o))
		log_warn(j->run.scope, "cannot record the command (a restart will not find it): %s", strerror(errno));
	json_decref(o);
}


/* The signal Go's error text names ("signal: killed", "signal: terminated":
 * execd's traceback or status error), 0 when none: strsignal()'s words. */
static int signal_named(const char *text)
{
	const char *p = text ? strstr(text, "signal: ") : NULL;

	if (!p)
		return 0;
	p += 8;
	for (int sig = 1; sig < 65; sig++) {
		const char *name = strsignal(sig);
		size_t n = name ? strlen(name) : 0;
		if (n && !strncasecmp(p, name, n) && (!p[n] || p[n] == '"' || p[n] == ',' || p[n] == ' ' || p[n] == ']'))
			return sig;
	}
	return 0;
}

/* What execd said about the end (exit code, or -1 after a signal, which
 * error names). */
static void ojob_end(struct ojob *j, int code, const char *error, const char *note)
{
	int sent = __atomic_load_n(&j->run.sent_sig, __ATOMIC_RELAXED), named = signal_named(error);
	uint64_t ran = util_now_ms() - j->started_ms;

	if (j->run.over)
		jobrun_result(j->run.job_dir, j->run.scope, "killed", 128 + SIGKILL, SIGKILL, "output limit", NULL, note);
	else if (code < 0 && sent) /* interrupted: by the signal that ended it (execd: TERM, then KILL) */
		jobrun_result(j->run.job_dir, j->run.scope, "killed", 128 + (named ? named : sent), named ? named : sent, NULL,
			NULL, note);
	else if (code < 0 && j->timeout > 0 && ran + 1000 >= (uint64_t)j->timeout * 1000)
		jobrun_result(j->run.job_dir, j->run.scope, "timed_out", 128 + SIGKILL, SIGKILL, NULL, NULL, note);
	else if (code < 0)
		jobrun_result(j->run.job_dir, j->run.scope, "killed", 128 + (named ? named : SIGKILL), named ? named : SIGKILL, NULL,
			"killed by a signal", note);
	else if (sent && code > 128 && code < 128 + 65)
		jobrun_result(j->run.job_dir, j->run.scope, "killed", code, code - 128, NULL, NULL, note);
	else
		jobrun_result(j->run.job_dir, j->run.scope, "exited", code > 255 ? 255 : code, 0, NULL, NULL, note);
}

/* ---- the pump ------------------------------------------------------------------------------------- */

static void on_init(const char *id, void *arg)
{
	struct ojob *j = arg;

	snprintf(j->cmd_id, sizeof(j->cmd_id), "%s", id);
	ojob_save(j);
	pthread_mutex_lock(&j->lock);
	j->started = 1;
	pthread_cond_broadcast(&j->cond);
	pthread_mutex_unlock(&j->lock);
}

/* Write what the stream brought so far into the job's files (one write per
 * file and piece of the stream, not one per line). */
static void on_flush(void *arg)
{
	struct ojob *j = arg;

	for (int i = 0; i < 2; i++) {
		jobrun_append(&j->run, i, j->pend[i].ptr, j->pend[i].len);
		buf_reset(&j->pend[i]);
	}
}

static bool on_output(enum osapi_stream s, const char *text, size_t len, void *arg)
{
	struct ojob *j = arg;
	bool err = s != OSAPI_STDOUT;
	struct buf *b = &j->pend[err];
	bool nl_only = len == 1 && text[0] == '\n'; /* execd's empty line */
	size_t n = nl_only ? 1 : len + 1;

	if (jobrun_charge(&j->run, n) < n) {
		log_warn(j->run.scope, "output limit of %llu bytes reached: interrupting the job",
			(unsigned long long)j->run.output_max);
		return false;
	}
	if (b->len + n > OJOB_PEND_MAX)
		on_flush(j);
	if ((!nl_only && buf_add(b, text, len)) || buf_add(b, "\n", 1)) {
		/* a line longer than the batch: straight to the file */
		buf_reset(b);
		if (!nl_only)
			jobrun_append(&j->run, err, text, len);
		jobrun_append(&j->run, err, "\n", 1);
	}
	return true;
}

/* Poll the command's status until it ends: its exit code, or lost. */
static void ojob_watch(struct ojob *j, const char *note)
{
	uint64_t failing_since = 0;
	char err[OSAPI_ERR_LEN];

	while (!jobrun_cancelled(&j->run)) {
		struct osapi_cmd_status st;
		bool gone = false;
		enum sbx_err e = osapi_command_status(&j->ex, j->cmd_id, &st, &gone, err, sizeof(err));

		if (gone)
			sbx_box_gone(&j->ob->base, "the remote sandbox %s is gone (execd: %s)", j->ob->id, err);
		if (e == SBX_ERR_GONE) {
			jobrun_lost(j->run.job_dir, j->run.scope, gone ? "the sandbox is gone" :
								"execd no longer knows the command (the sandbox restarted?)");
			return;
		}
		if (e) {
			if (!failing_since) {
				failing_since = util_now_ms();
				log_warn(j->run.scope, "polling the command's status: %s", err);
			}
			if (util_now_ms() - failing_since > OJOB_LOST_AFTER_MS) {
				jobrun_lost(j->run.job_dir, j->run.scope, "execd stopped answering while the job ran");
				return;
			}
		} else if (!st.running) {
			ojob_end(j, st.has_exit ? st.exit_code : -1, st.error, note);
			return;
		} else {
			failing_since = 0;
		}
		usleep(OJOB_POLL_US);
	}
}

static void *ojob_pump(void *arg)
{
	struct ojob *j = arg;
	struct osapi_cmd cmd = { .command = j->command, .cwd = LAYOUT_SANDBOX_WORKSPACE,
		.timeout_ms = j->timeout > 0 ? (long long)j->timeout * 1000 : 0, .envs = j->envs, .n_envs = j->n_envs };
	struct osapi_cmd_events ev = { .on_init = on_init, .on_output = on_output, .on_flush = on_flush, .arg = j };
	struct osapi_cmd_result r;
	char err[OSAPI_ERR_LEN] = "";
	bool gone = false;
	enum sbx_err e;

	if (j->watch_only) {
		ojob_watch(j, OJOB_NOTE_UNSEEN);
		goto done;
	}
	e = osapi_command(&j->ex, &cmd, &ev, &j->run.cancel, &r, &gone, err, sizeof(err));
	on_flush(j); /* what the last piece brought, before any result */
	if (gone)
		sbx_box_gone(&j->ob->base, "the remote sandbox %s is gone (execd: %s)", j->ob->id, err);
	if (!r.saw_init) {
		if (!e) {
			e = r.start_failed ? SBX_ERR_INVAL : SBX_ERR_IO;
			snprintf(err, sizeof(err), "the command did not start: %.400s", r.error[0] ? r.error : "no init event");
		}
		pthread_mutex_lock(&j->lock);
		j->started = -1;
		j->start_err = e;
		pthread_cond_broadcast(&j->cond);
		pthread_mutex_unlock(&j->lock);
		log_err(j->run.scope, "cannot start the job: %s", err);
		return NULL;
	}
	if (jobrun_cancelled(&j->run))
		return NULL; /* the daemon is exiting: the command goes on, a later daemon reattaches */
	if (r.bad_events)
		log_warn(j->run.scope, "%u events of the command's stream were not JSON: skipped", r.bad_events);
	if (r.ended && r.start_failed) {
		jobrun_result(j->run.job_dir, j->run.scope, "failed", 255, 0, NULL, r.error, NULL);
	} else if (r.ended) {
		ojob_end(j, r.exit_code, r.error, NULL);
	} else {
		char ierr[OSAPI_ERR_LEN];
		if (j->run.over && osapi_interrupt(&j->ex, j->cmd_id, ierr, sizeof(ierr)))
			log_warn(j->run.scope, "interrupt after the output limit: %s", ierr);
		if (!j->run.over)
			log_warn(j->run.scope, "the command's stream ended before the command did%s%s: following its status",
				err[0] ? ": " : "", err);
		ojob_watch(j, j->run.over ? NULL : "the command's stream broke: output after that point is missing");
	}
done:
	if (jobrun_cancelled(&j->run) && !jobrun_file_exists(j->run.job_dir, "result"))
		return NULL;
	jobrun_signal_end(&j->run);
	return NULL;
}

/* ---- handles --------------------------------------------------------------------------------------- */

static struct ojob *ojob_new(struct obox *ob, const char *job_dir, const char *name)
{
	struct ojob *j = calloc(1, sizeof(*j));

	if (!j || jobrun_init(&j->run, &provider_opensandbox, job_dir, name, ob->scope)) {
		free(j);
		return NULL;
	}
	buf_init(&j->envtext, OJOB_ENV_MAX);
	buf_init(&j->pend[0], OJOB_PEND_MAX);
	buf_init(&j->pend[1], OJOB_PEND_MAX);
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->cond, NULL);
	j->ob = ob;
	sbx_box_get(&ob->base);
	j->run.output_max = ob->output_max;
	j->started_ms = util_now_ms();
	return j;
}

static void ojob_free(struct ojob *j)
{
	if (!j)
		return;
	jobrun_release(&j->run); /* the pump first: it uses what follows */
	pthread_mutex_destroy(&j->lock);
	pthread_cond_destroy(&j->cond);
	sbx_box_put(&j->ob->base);
	buf_free(&j->envtext);
	buf_free(&j->pend[0]);
	buf_free(&j->pend[1]);
	free(j->envs);
	free(j->inline_cmd);
	free(j->command);
	free(j);
}

/* The job's environment (NUL-separated KEY=VALUE, job_dir/environ) as
 * kv pairs pointing into j->envtext, with room for one more. */
static int ojob_env(struct ojob *j)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	size_t cap = 2;
	int r = job_path(&p, j->run.job_dir, "environ") ? -1 : util_read_file(p.ptr, &j->envtext);

	buf_free(&p);
	if (r && errno != ENOENT)
		return -1;
	for (size_t i = 0; i < j->envtext.len; i++)
		cap += j->envtext.ptr[i] == '\0';
	j->envs = calloc(cap, sizeof(*j->envs));
	if (!j->envs)
		return -1;
	for (size_t i = 0; i < j->envtext.len;) {
		char *kv = j->envtext.ptr + i, *eq = strchr(kv, '=');
		size_t len = strlen(kv);
		json_t *chk;

		i += len + 1;
		if (!eq || eq == kv)
			continue;
		*eq = '\0';
		chk = json_string(eq + 1); /* JSON carries UTF-8 only */
		if (!chk) {
			log_warn(j->run.scope, "environment variable %s is not UTF-8: not passed to the sandbox", kv);
			continue;
		}
		json_decref(chk);
		j->envs[j->n_envs++] = (struct osapi_kv){ kv, eq + 1 };
	}
	return 0;
}

static bool text_ok(const char *s, size_t len)
{
	json_t *chk;

	if (memchr(s, '\0', len))
		return false;
	chk = json_stringn(s, len);
	json_decref(chk);
	return chk != NULL;
}

/* The command (inline, or uploaded with stdin) as execd's bash -c text. */
static enum sbx_err ojob_command(struct ojob *j, const struct sbx_exec_spec *spec, char *err, size_t errlen)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH), cmd = BUF_INIT(OJOB_CMD_MAX + 1), run = BUF_INIT(BUF_CAP_PATH * 2);
	struct osapi_upload up[2];
	int cfd = -1, sfd = -1;
	size_t n_up = 0;
	enum sbx_err e = SBX_ERR_IO;
	struct stat st;

	if (job_path(&p, spec->job_dir, "cmd") || util_read_file(p.ptr, &cmd)) {
		snprintf(err, errlen, "cannot read the command: %s", strerror(errno));
		goto out;
	}
	if (!job_path(&p, spec->job_dir, "stdin"))
		sfd = open(p.ptr, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0 && cmd.len <= OJOB_INLINE_MAX && text_ok(buf_str(&cmd), cmd.len)) {
		j->envs[j->n_envs++] = (struct osapi_kv){ "SBXFS_CMD", NULL };
		j->command = strdup("SBXFS_C=$SBXFS_CMD; unset SBXFS_CMD; exec /bin/sh -c \"$SBXFS_C\" sh </dev/null");
		/* the value lives in cmd: handed over, freed with j */
		j->inline_cmd = buf_take(&cmd, NULL);
		j->envs[j->n_envs - 1].value = j->inline_cmd;
		if (!j->command || !j->envs[j->n_envs - 1].value) {
			e = SBX_ERR_NOMEM;
			goto out;
		}
		e = SBX_OK;
		goto out;
	}
	/* upload cmd (and stdin) to the job's directory in the sandbox */
	if (job_path(&p, spec->job_dir, "cmd") || (cfd = open(p.ptr, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    fstat(cfd, &st)) {
		snprintf(err, errlen, "cannot read the command: %s", strerror(errno));
		goto out;
	}
	if (buf_addf(&run, OS_JOBS_PATH "/%s/cmd", spec->job_name))
		goto out;
	up[n_up++] = (struct osapi_upload){ strdup(run.ptr), cfd, (long long)st.st_size, 0600 };
	if (sfd >= 0) {
		if (fstat(sfd, &st)) {
			snprintf(err, errlen, "cannot read stdin: %s", strerror(errno));
			goto out_up;
		}
		buf_reset(&run);
		if (buf_addf(&run, OS_JOBS_PATH "/%s/stdin", spec->job_name))
			goto out_up;
		up[n_up++] = (struct osapi_upload){ strdup(run.ptr), sfd, (long long)st.st_size, 0600 };
	}
	for (size_t i = 0; i < n_up; i++)
		if (!up[i].path) {
			e = SBX_ERR_NOMEM;
			goto out_up;
		}
	{
		bool gone = false;
		char uerr[OSAPI_ERR_LEN];
		e = osapi_upload(&j->ex, up, n_up, &gone, uerr, sizeof(uerr));
		if (e) {
			obox_failed(j->ob, e, gone, "upload of the job's command", uerr);
			snprintf(err, errlen, "cannot upload the command: %.400s", uerr);
			goto out_up;
		}
	}
	j->staged = true;
	buf_reset(&run);
	if (buf_addf(&run, "exec /bin/sh -c '. " OS_JOBS_PATH "/%s/cmd' <%s", spec->job_name,
		    sfd >= 0 ? OS_JOBS_PATH "/" : "/dev/null") ||
	    (sfd >= 0 && buf_addf(&run, "%s/stdin", spec->job_name))) {
		e = SBX_ERR_NOMEM;
		goto out_up;
	}
	j->command = buf_take(&run, NULL);
	e = j->command ? SBX_OK : SBX_ERR_NOMEM;
out_up:
	for (size_t i = 0; i < n_up; i++)
		free((char *)up[i].path);
out:
	if (cfd >= 0)
		close(cfd);
	if (sfd >= 0)
		close(sfd);
	buf_free(&p);
	buf_free(&cmd);
	buf_free(&run);
	return e;
}

static enum sbx_err ojob_start_pump(struct ojob *j)
{
	return jobrun_start_pump(&j->run, ojob_pump, j);
}

enum sbx_err os_jobs_start(struct sbx_box *b, const struct sbx_exec_spec *spec, struct sbx_exec **out)
{
	struct obox *ob = obox(b);
	struct ojob *j = NULL;
	char err[OSAPI_ERR_LEN] = "";
	enum sbx_err e;
	struct timespec ts;

	if (sbx_box_is_gone(b))
		return SBX_ERR_GONE;
	j = ojob_new(ob, spec->job_dir, spec->job_name);
	if (!j)
		return SBX_ERR_NOMEM;
	if (spec->output_max > 0)
		j->run.output_max = (uint64_t)spec->output_max;
	j->timeout = spec->timeout;
	e = obox_execd(ob, &j->ex);
	if (e) {
		snprintf(err, sizeof(err), "execd of sandbox %s is not reachable", ob->id);
		goto out;
	}
	snprintf(j->ex.scope, sizeof(j->ex.scope), "%s", j->run.scope);
	if (ojob_env(j)) {
		snprintf(err, sizeof(err), "cannot read the job's environment: %s", strerror(errno));
		e = SBX_ERR_IO;
		goto out;
	}
	e = ojob_command(j, spec, err, sizeof(err));
	if (e)
		goto out;
	if (jobrun_open_output(&j->run)) {
		snprintf(err, sizeof(err), "cannot open the job's output files: %s", strerror(errno));
		e = SBX_ERR_IO;
		goto out;
	}
	j->started_ms = util_now_ms();
	e = ojob_start_pump(j);
	if (e)
		goto out;
	/* until init: the command can be interrupted from then on */
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ob->cfg->request_timeout + 5;
	pthread_mutex_lock(&j->lock);
	while (!j->started)
		if (pthread_cond_timedwait(&j->cond, &j->lock, &ts) == ETIMEDOUT)
			break;
	if (j->started < 0)
		e = j->start_err;
	else if (!j->started)
		e = SBX_ERR_TIMEOUT;
	pthread_mutex_unlock(&j->lock);
	if (e == SBX_ERR_TIMEOUT)
		snprintf(err, sizeof(err), "execd did not start the command within request_timeout (%ld s)",
			ob->cfg->request_timeout);
	if (e)
		goto out;
	*out = &j->run.base;
	j = NULL;
out:
	if (e && err[0])
		log_err(ob->scope, "jobs/%s: cannot start: %s", spec->job_name, err);
	ojob_free(j); /* a pump still waiting for init is cancelled and joined */
	return e;
}

enum sbx_err os_jobs_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out)
{
	struct obox *ob = obox(b);
	const char *slash = strrchr(job_dir, '/');
	struct ojob *j = ojob_new(ob, job_dir, slash ? slash + 1 : job_dir);
	struct osapi_cmd_status st;
	json_t *rec = NULL;
	char err[OSAPI_ERR_LEN];
	bool gone = false;
	enum sbx_err e = SBX_ERR_GONE;
	const char *id, *sb;

	if (!j)
		return SBX_ERR_NOMEM;
	rec = record_load(job_dir, OJOB_RECORD);
	id = json_string_value(json_object_get(rec, "command_id"));
	sb = json_string_value(json_object_get(rec, "sandbox"));
	if (!id || !id[0]) {
		jobrun_lost(job_dir, j->run.scope, "no record of the command in execd");
		goto out;
	}
	if (!sb || strcmp(sb, ob->id)) {
		jobrun_lost(job_dir, j->run.scope, "the command ran in another sandbox, which is gone");
		goto out;
	}
	snprintf(j->cmd_id, sizeof(j->cmd_id), "%s", id);
	j->staged = json_is_true(json_object_get(rec, "staged"));
	j->timeout = (long)json_integer_value(json_object_get(rec, "timeout"));
	if (json_is_number(json_object_get(rec, "started_at"))) {
		double ago = util_wall_now() - json_number_value(json_object_get(rec, "started_at"));
		j->started_ms = util_now_ms() - (ago > 0 && ago < 1e7 ? (uint64_t)(ago * 1000) : 0);
	}
	if (sbx_box_is_gone(b) || obox_execd(ob, &j->ex)) {
		jobrun_lost(job_dir, j->run.scope, "the sandbox is gone");
		goto out;
	}
	snprintf(j->ex.scope, sizeof(j->ex.scope), "%s", j->run.scope);
	e = osapi_command_status(&j->ex, j->cmd_id, &st, &gone, err, sizeof(err));
	if (gone)
		sbx_box_gone(b, "the remote sandbox %s is gone (execd: %s)", ob->id, err);
	if (e == SBX_ERR_GONE) {
		jobrun_lost(job_dir, j->run.scope, "execd no longer knows the command (the sandbox restarted?)");
		goto out;
	}
	if (!e && !st.running) {
		ojob_end(j, st.has_exit ? st.exit_code : -1, st.error, OJOB_NOTE_UNSEEN);
		e = SBX_ERR_GONE; /* ended: its result is on disk */
		goto out;
	}
	/* running, or execd unreachable for now: follow its status */
	j->watch_only = true;
	e = ojob_start_pump(j);
	if (e)
		goto out;
	log_info(j->run.scope, "reattached to command %s (its exit code will be real; output written meanwhile is not "
			   "recoverable from execd)", j->cmd_id);
	*out = &j->run.base;
	j = NULL;
out:
	json_decref(rec);
	ojob_free(j);
	return e;
}

enum sbx_err os_jobs_signal(struct sbx_exec *x, int sig)
{
	struct ojob *j = ojob(x);
	char err[OSAPI_ERR_LEN];
	enum sbx_err e;
	int started;

	/* execd interrupts: SIGTERM, SIGKILL after its grace.  kill and kill
	 * KILL both ask for that; a signal it cannot send on its own (SIGINT
	 * among them) is refused rather than sent as another. */
	if (sig != SIGTERM && sig != SIGKILL)
		return SBX_ERR_NOTSUP;
	pthread_mutex_lock(&j->lock);
	started = j->started;
	pthread_mutex_unlock(&j->lock);
	if ((started != 1 && !j->watch_only) || jobrun_file_exists(j->run.job_dir, "result"))
		return SBX_ERR_GONE;
	__atomic_store_n(&j->run.sent_sig, sig, __ATOMIC_RELAXED);
	e = osapi_interrupt(&j->ex, j->cmd_id, err, sizeof(err));
	if (e) {
		/* execd: "no such session" for a command that has ended */
		if (strstr(err, "no such") || e == SBX_ERR_GONE)
			return SBX_ERR_GONE;
		log_warn(j->run.scope, "interrupt: %s", err);
	}
	return e;
}

void os_jobs_finish(struct sbx_exec *x)
{
	jobrun_finish(&ojob(x)->run);
}

void os_jobs_free(struct sbx_exec *x)
{
	ojob_free(ojob(x));
}

void os_jobs_cleanup(struct sbx_box *b, const char *job_dir, const char *job_name)
{
	struct obox *ob = obox(b);
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	struct osapi_execd ex;
	json_t *rec = NULL;
	char err[OSAPI_ERR_LEN];
	bool gone = false;

	rec = record_load(job_dir, OJOB_RECORD);
	/* the uploaded command and stdin of the job, in the sandbox */
	if (json_is_true(json_object_get(rec, "staged")) && !sbx_box_is_gone(b) && !obox_execd(ob, &ex)) {
		buf_reset(&p);
		if (!buf_addf(&p, OS_JOBS_PATH "/%s", job_name) &&
		    osapi_delete_dir(&ex, p.ptr, &gone, err, sizeof(err)))
			log_warn(ob->scope, "jobs/%s: cannot remove its files in the sandbox: %s", job_name, err);
	}
	json_decref(rec);
	buf_free(&p);
}
