/* SPDX-License-Identifier: MIT */
/*
 * aio_jobs.c - jobs in AIO sandboxes, through the AIO HTTP API
 * (aio_api.c), for both kinds (aio_int.h): the aio provider's containers
 * (aio.c: the API reached inside the container's network namespace) and
 * an existing sandbox at a base_url (aio_remote.c).
 *
 * A job: the daemon copies the command (and stdin) into the job's run
 * directory, thread_dir/aio-jobs/NAME, which the container sees at
 * /run/sbxfs/jobs/NAME (the AIO server runs `sh -c COMMAND` as a host
 * process, so the command text goes through a file, never an argv), then
 *   POST /v1/bash/exec {command: "( exec <STDIN; . CMD )", session_id (one
 *        per job), exec_dir: the workspace, env: the job's environment,
 *        async_mode, hard_timeout: bash_command_timeout}
 * and a thread per running job long-polls POST /v1/bash/output {offset,
 * stderr_offset, wait} and appends the new stdout and stderr to the job's
 * files as they arrive.  Images without /v1/bash (older than 1.9.3) answer
 * 404: the box latches the shell API (/v1/shell/exec, view, wait, kill),
 * which merges stderr into stdout.
 *
 * Surviving a daemon restart: the AIO server keeps a command's whole
 * output, so job_dir/aio.json records the session, command and the offsets
 * already appended together with the job files' sizes at that moment.  A
 * new daemon trims the files back to those sizes (an append whose offsets
 * were not recorded is fetched again, never twice) and resumes polling from
 * the recorded offsets: output produced while no daemon ran arrives then,
 * and the job gets its real result.
 *
 * Signals: the API knows SIGTERM, SIGKILL and SIGINT (to the command's
 * process group); other signals are EOPNOTSUPP (the provider does not
 * declare SBX_CAP_SIGNALS).
 *
 * An AIO sandbox at a base_url (aio_remote.c; its ops have no netns) runs
 * jobs the same way, with two differences: the API is reached at the URL (no
 * network namespace), and the job's command, stdin and env.sh are uploaded
 * (POST /v1/file/upload) to run_path/NAME in the sandbox instead of
 * being written into a bind-mounted host directory; a command that is UTF-8
 * text without stdin skips the uploads and travels in the request's
 * environment (SBXFS_CMD, unset before it is eval'd: the sandbox is remote,
 * so no host process's argv or environment carries it either way).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/buf.h"
#include "../common/json.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/udir.h"
#include "../common/util.h"
#include "aio_api.h"
#include "aio_int.h"
#include "jobrun.h"
#include "record.h"
#include "provider_int.h"

#define AIO_RECORD "aio.json" /* job_dir/aio.json: the command and offsets, for reattach */
#define AIO_POLL_WAIT_S 5.0
#define AIO_SHELL_POLL_US 200000
#define AIO_LOST_AFTER_MS 60000 /* the server unreachable this long: the job is lost */
#define AIO_ENV_MAX (2 * 1024 * 1024)
#define AIO_INLINE_MAX (100 * 1024) /* a command in one environment string (Linux: 128 KiB) */

struct ajob {
	struct jobrun run;    /* first: the handle, output files, limit, pump (run.out_bytes: out_size + err_size) */
	struct aio_sbx *sb;   /* its box referenced */
	char session[128];
	char command[128];
	bool shell;           /* the shell API (no /v1/bash) */
	long long offset, stderr_offset;
	long long out_size, err_size; /* the job files' sizes when the offsets were recorded */
	long timeout;
};

static struct ajob *ajob(struct sbx_exec *x)
{
	if (!x || (x->prov != &provider_aio && x->prov != &provider_aio_remote))
		abort(); /* a handle given to the wrong provider is a programming error */
	return (struct ajob *)x;
}

void aio_sbx_target(struct aio_sbx *a, struct aio_target *t, int nsfd, const int *cancel)
{
	memset(t, 0, sizeof(*t));
	t->base_url = a->url;
	t->api_key = a->api_key;
	t->netns_fd = nsfd;
	t->timeout_ms = (long)a->cfg->request_timeout * 1000;
	t->scope = a->name;
	t->cancel = cancel;
}

/* At a URL: the job's files are uploaded (else written on the host). */
static bool at_url(struct aio_sbx *a)
{
	return !a->ops->netns;
}

/* The way to the API: *nsfd, an fd on the sandbox's network namespace to
 * close after use (-1 at a URL).  false when the sandbox has ended. */
static bool aio_reach(struct aio_sbx *a, int *nsfd)
{
	*nsfd = -1;
	if (at_url(a))
		return a->ops->alive(a);
	*nsfd = a->ops->netns(a);
	return *nsfd >= 0;
}

/* Where the job's command files are, as the AIO server sees them. */
static const char *aio_run_base(struct aio_sbx *a)
{
	return at_url(a) ? a->run_path : AIO_RUN_PATH;
}

static uint64_t aio_paused_ms(struct aio_sbx *a)
{
	return a->ops->paused_ms ? a->ops->paused_ms(a) : 0;
}

static bool aio_paused(struct aio_sbx *a)
{
	return a->ops->paused && a->ops->paused(a);
}

/* ---- records ---------------------------------------------------------------------------------- */

static int ajob_save(struct ajob *j)
{
	json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:i}", "mode", j->shell ? "shell" : "bash", "session",
		j->session, "command", j->command, "offset", (json_int_t)j->offset, "stderr_offset",
		(json_int_t)j->stderr_offset, "out_size", (json_int_t)j->out_size, "err_size", (json_int_t)j->err_size,
		"timeout", (int)j->timeout);
	int r = o ? record_save(j->run.job_dir, AIO_RECORD, o) : -1;

	json_decref(o);
	return r;
}

static int ajob_load(struct ajob *j)
{
	json_t *o = record_load(j->run.job_dir, AIO_RECORD);
	const char *mode = json_string_value(json_object_get(o, "mode"));
	const char *sess = json_string_value(json_object_get(o, "session"));
	const char *cmd = json_string_value(json_object_get(o, "command"));
	int r = -1;

	if (mode && sess && cmd && json_is_integer(json_object_get(o, "offset")) &&
	    json_is_integer(json_object_get(o, "out_size"))) {
		j->shell = !strcmp(mode, "shell");
		snprintf(j->session, sizeof(j->session), "%s", sess);
		snprintf(j->command, sizeof(j->command), "%s", cmd);
		j->offset = json_integer_value(json_object_get(o, "offset"));
		j->stderr_offset = json_integer_value(json_object_get(o, "stderr_offset"));
		j->out_size = json_integer_value(json_object_get(o, "out_size"));
		j->err_size = json_integer_value(json_object_get(o, "err_size"));
		j->timeout = (long)json_integer_value(json_object_get(o, "timeout"));
		j->run.out_bytes = (uint64_t)(j->out_size + j->err_size);
		r = 0;
	}
	json_decref(o);
	return r;
}


/* ---- the pump ------------------------------------------------------------------------------------- */

static void ajob_end(struct ajob *j, const char *state, int code, int sig, const char *reason)
{
	state = jobrun_killed_state(j->run.job_dir, state, sig);
	if (!jobrun_result(j->run.job_dir, j->run.scope, state, code, sig, reason, NULL, NULL))
		jobrun_lost(j->run.job_dir, j->run.scope, "the job's result could not be recorded");
}

static void ajob_end_status(struct ajob *j, enum aio_status st, bool has_exit, int exit_code, const char *reason)
{
	int sig = __atomic_load_n(&j->run.sent_sig, __ATOMIC_RELAXED);

	if (reason) /* over the output limit: killed by us */
		ajob_end(j, "killed", 137, SIGKILL, reason);
	else if (st == AIO_COMPLETED)
		ajob_end(j, "exited", has_exit && exit_code >= 0 && exit_code <= 255 ? exit_code : 255,
			has_exit && exit_code > 128 && exit_code < 128 + 65 ? exit_code - 128 : 0, NULL);
	else if (st == AIO_TIMED_OUT)
		ajob_end(j, "timed_out", 128 + SIGKILL, SIGKILL, NULL);
	else if (st == AIO_KILLED)
		ajob_end(j, "killed", 128 + (sig ? sig : SIGKILL), sig ? sig : SIGKILL, NULL);
	else
		jobrun_lost(j->run.job_dir, j->run.scope, "the AIO server left the command in an unknown state");
}

/* Append new output (what the output limit lets through: the rest is
 * dropped, the job killed) and record how far we are. */
static int ajob_append(struct ajob *j, const char *out, size_t olen, const char *err, size_t elen, long long off,
	long long eoff)
{
	olen = jobrun_charge(&j->run, olen);
	elen = jobrun_charge(&j->run, elen);
	if ((olen && jobrun_write_all(j->run.out_fd, out, olen)) || (elen && jobrun_write_all(j->run.err_fd, err, elen)))
		return -1;
	j->out_size += (long long)olen;
	j->err_size += (long long)elen;
	j->offset = off;
	j->stderr_offset = eoff;
	if ((olen || elen) && ajob_save(j))
		log_warn(j->sb->name, "%s: cannot record the output offsets: %s", j->run.name, strerror(errno));
	return 0;
}

static void *ajob_pump(void *arg)
{
	struct ajob *j = arg;
	struct aio_target t;
	char err[AIO_ERR_LEN], scope[256];
	uint64_t failing_since = 0, started = util_now_ms(), paused0 = aio_paused_ms(j->sb);
	const char *reason = NULL;
	unsigned polls = 0;
	int nsfd = -1;
	bool reached = false;

	snprintf(scope, sizeof(scope), "%s/jobs/%s", j->sb->name, j->run.name);
	if (jobrun_open_output(&j->run)) {
		log_err(scope, "cannot open the job's output files: %s", strerror(errno));
		jobrun_lost(j->run.job_dir, j->run.scope, "the job's output files cannot be opened");
		goto done;
	}
	while (!jobrun_cancelled(&j->run)) {
		enum aio_status st = AIO_UNKNOWN;
		bool has_exit = false;
		int code = -1;
		enum sbx_err e;

		/* a paused container's server cannot answer: wait, nothing failed */
		if (aio_paused(j->sb)) {
			usleep(200000);
			failing_since = 0;
			continue;
		}
		if (!reached)
			reached = aio_reach(j->sb, &nsfd);
		if (!reached) {
			jobrun_lost(j->run.job_dir, j->run.scope, at_url(j->sb) ? "the sandbox is gone" :
								      "the sandbox's container ended while the job ran");
			goto done;
		}
		aio_sbx_target(j->sb, &t, nsfd, &j->run.cancel);
		t.timeout_ms = (long)(AIO_POLL_WAIT_S * 1000) + 15000;
		if (!j->shell) {
			struct aio_bash_result r;
			e = aio_bash_output(&t, j->session, j->command, j->offset, j->stderr_offset, AIO_POLL_WAIT_S, &r, err,
				sizeof(err));
			if (!e) {
				if (ajob_append(j, r.out, r.out_len, r.err, r.err_len, r.offset, r.stderr_offset))
					log_warn(scope, "cannot append the output: %s", strerror(errno));
				st = r.status;
				has_exit = r.has_exit;
				code = r.exit_code;
			}
			aio_bash_result_clear(&r);
		} else {
			struct aio_shell_result r;
			/* the shell API has no long-poll for output (its wait takes
			 * whole seconds): a view of what is there, every 200 ms */
			if (polls++)
				usleep(AIO_SHELL_POLL_US);
			e = aio_shell_view(&t, j->session, &r, err, sizeof(err));
			if (!e && (long long)r.output_len > j->offset &&
			    ajob_append(j, r.output + j->offset, r.output_len - (size_t)j->offset, NULL, 0,
				    (long long)r.output_len, 0))
				log_warn(scope, "cannot append the output: %s", strerror(errno));
			st = r.status;
			has_exit = r.has_exit;
			code = r.exit_code;
			aio_shell_result_clear(&r);
		}
		if (e == SBX_ERR_GONE || e == SBX_ERR_NOTSUP) {
			log_warn(scope, "the AIO server no longer knows the command: %s", err);
			jobrun_lost(j->run.job_dir, j->run.scope, "the AIO server no longer knows the command");
			goto done;
		}
		if (e) {
			if (jobrun_cancelled(&j->run))
				break;
			if (!failing_since) {
				failing_since = util_now_ms();
				log_warn(scope, "polling the job's output: %s", err);
			}
			if (util_now_ms() - failing_since > AIO_LOST_AFTER_MS && !aio_paused(j->sb)) {
				jobrun_lost(j->run.job_dir, j->run.scope, "the AIO server stopped answering");
				goto done;
			}
			if (nsfd >= 0)
				close(nsfd);
			nsfd = -1;
			reached = false;
			usleep(500000);
			continue;
		}
		failing_since = 0;
		if (j->run.over && !reason) {
			char kerr[AIO_ERR_LEN];
			reason = "output limit";
			log_warn(scope, "output limit of %llu bytes reached: killing the job", (unsigned long long)j->run.output_max);
			if (j->shell)
				aio_shell_kill(&t, j->session, kerr, sizeof(kerr));
			else
				aio_bash_kill(&t, j->session, "SIGKILL", kerr, sizeof(kerr));
		}
		/* a server that ignores hard_timeout: ours, 10 s later */
		/* (the time the container was paused does not count) */
		if (j->timeout > 0 && st == AIO_RUNNING &&
		    util_now_ms() - started - (aio_paused_ms(j->sb) - paused0) > (uint64_t)(j->timeout + 10) * 1000) {
			char kerr[AIO_ERR_LEN];
			log_warn(scope, "the AIO server let the job run past its timeout: killing it");
			if (j->shell ? aio_shell_kill(&t, j->session, kerr, sizeof(kerr)) :
				       aio_bash_kill(&t, j->session, "SIGKILL", kerr, sizeof(kerr)))
				log_warn(scope, "kill: %s", kerr);
			ajob_end(j, "timed_out", 128 + SIGKILL, SIGKILL, NULL);
			goto done;
		}
		if (st != AIO_RUNNING && st != AIO_PENDING && st != AIO_UNKNOWN) {
			ajob_end_status(j, st, has_exit, code, reason);
			if (!j->shell) {
				char cerr[AIO_ERR_LEN];
				aio_bash_close(&t, j->session, cerr, sizeof(cerr));
			}
			goto done;
		}
	}
	/* cancelled: the daemon is exiting; the command goes on, a later daemon resumes */
	goto out;
done:
	jobrun_signal_end(&j->run);
out:
	if (nsfd >= 0)
		close(nsfd);
	return NULL;
}

static struct ajob *ajob_new(struct aio_sbx *sb, const char *job_dir, const char *name)
{
	struct ajob *j = calloc(1, sizeof(*j));

	/* provider_aio, or its base_url variant */
	if (!j || jobrun_init(&j->run, sb->box->prov, job_dir, name, sb->name)) {
		free(j);
		return NULL;
	}
	j->sb = sb;
	sbx_box_get(sb->box);
	j->run.output_max = sb->output_max;
	return j;
}

static enum sbx_err ajob_start_pump(struct ajob *j)
{
	return jobrun_start_pump(&j->run, ajob_pump, j);
}

/* ---- start ---------------------------------------------------------------------------------------- */

/* The job's environment (NUL-separated KEY=VALUE) as aio_env entries
 * pointing into text. */
static struct aio_env *ajob_env(struct buf *text, size_t *n)
{
	struct aio_env *env;
	size_t k = 0, cap = 1;

	for (size_t i = 0; i < text->len; i++)
		cap += text->ptr[i] == '\0';
	env = calloc(cap, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < text->len;) {
		char *kv = text->ptr + i, *eq = strchr(kv, '=');
		size_t len = strlen(kv);

		if (eq && eq != kv) {
			*eq = '\0';
			env[k].key = kv;
			env[k].value = eq + 1;
			k++;
		}
		i += len + 1;
	}
	*n = k;
	return env;
}

/* '...' for sh, with ' as '\'' */
static int sh_quote(struct buf *b, const char *s)
{
	int r = buf_adds(b, "'");

	for (; *s && !r; s++)
		r = *s == '\'' ? buf_adds(b, "'\\''") : buf_add(b, s, 1);
	return r || buf_adds(b, "'");
}

/* env.sh: export lines for the shell API, which takes no environment. */
static int ajob_env_sh(const struct buf *envtext, struct buf *sh)
{
	int bad = 0;

	for (size_t i = 0; i < envtext->len && !bad; i += strlen(envtext->ptr + i) + 1) {
		const char *kv = envtext->ptr + i, *eq = strchr(kv, '=');
		if (!eq)
			continue;
		bad |= buf_addf(sh, "export %.*s=", (int)(eq - kv), kv) || sh_quote(sh, eq + 1) || buf_adds(sh, "\n");
	}
	return bad ? -1 : 0;
}

/* thread_dir/aio-jobs/NAME with cmd, stdin (when any) and, for the shell
 * API, env.sh (export lines: that API takes no environment). */
static int ajob_run_dir(struct aio_sbx *sb, const struct sbx_exec_spec *spec, struct buf *envtext, bool shell,
	bool *has_stdin)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH), sh = BUF_INIT(AIO_ENV_MAX + 4096);
	int run = -1, dir = -1, src = -1, r = -1;

	*has_stdin = false;
	if (buf_addf(&p, "%s/aio-jobs", sb->thread_dir) || (run = udir_open(p.ptr)) < 0)
		goto out;
	if (udir_remove(run, spec->job_name)) /* a stale one of an earlier slot of that name */
		goto out;
	dir = udir_mkdir(run, spec->job_name, 0700, sb->box->uid, sb->box->gid);
	if (dir < 0)
		goto out;
	buf_reset(&p);
	if (buf_addf(&p, "%s/cmd", spec->job_dir) || (src = open(p.ptr, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    udir_copy(dir, "cmd", src, 0600, sb->box->uid, sb->box->gid))
		goto out;
	close(src);
	buf_reset(&p);
	if (!buf_addf(&p, "%s/stdin", spec->job_dir) && (src = open(p.ptr, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
		if (udir_copy(dir, "stdin", src, 0600, sb->box->uid, sb->box->gid))
			goto out;
		*has_stdin = true;
	}
	if (shell && (ajob_env_sh(envtext, &sh) || udir_write(dir, "env.sh", buf_str(&sh), sh.len, 0600, sb->box->uid,
							   sb->box->gid)))
		goto out;
	r = 0;
out:
	if (src >= 0)
		close(src);
	if (dir >= 0)
		close(dir);
	if (run >= 0)
		close(run);
	buf_free(&p);
	buf_free(&sh);
	return r;
}

/* At a base_url: the same files uploaded to run_path/NAME in the sandbox. */
static enum sbx_err ajob_stage_remote(struct aio_sbx *sb, const struct aio_target *t, const struct sbx_exec_spec *spec,
	struct buf *envtext, bool *has_stdin, char *err, size_t errlen)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH), dst = BUF_INIT(BUF_CAP_PATH), sh = BUF_INIT(AIO_ENV_MAX + 4096);
	static const char *const names[] = { "cmd", "stdin", "env.sh" };
	enum sbx_err e = SBX_OK;
	struct stat st;

	*has_stdin = false;
	if (ajob_env_sh(envtext, &sh))
		e = SBX_ERR_NOMEM;
	for (int i = 0; i < 3 && !e; i++) {
		int fd = -1;

		buf_reset(&p);
		buf_reset(&dst);
		if (buf_addf(&dst, "%s/%s/%s", sb->run_path, spec->job_name, names[i])) {
			e = SBX_ERR_NOMEM;
			break;
		}
		if (i < 2) {
			if (buf_addf(&p, "%s/%s", spec->job_dir, names[i])) {
				e = SBX_ERR_NOMEM;
				break;
			}
			fd = open(p.ptr, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0 && i == 1 && errno == ENOENT)
				continue; /* no stdin */
		} else {
			fd = memfd_create("sbxfs-env", MFD_CLOEXEC);
			if (fd >= 0 && sh.len && jobrun_write_all(fd, sh.ptr, sh.len)) {
				close(fd);
				fd = -1;
			}
		}
		if (fd < 0 || fstat(fd, &st)) {
			snprintf(err, errlen, "cannot read the job's %s: %s", names[i], strerror(errno));
			e = SBX_ERR_IO;
		} else {
			e = aio_file_upload(t, dst.ptr, fd, (long long)st.st_size, err, errlen);
			*has_stdin |= i == 1 && !e;
		}
		if (fd >= 0)
			close(fd);
	}
	buf_free(&p);
	buf_free(&dst);
	buf_free(&sh);
	return e;
}

/* The job's command into text when it can travel in the request's
 * environment: no stdin, UTF-8 without NUL (JSON), under one environment
 * string's limit. */
static bool ajob_inline(const struct sbx_exec_spec *spec, struct buf *text)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	bool ok = false;
	json_t *chk;

	if (!buf_addf(&p, "%s/stdin", spec->job_dir) && access(p.ptr, F_OK) && errno == ENOENT) {
		buf_reset(&p);
		if (!buf_addf(&p, "%s/cmd", spec->job_dir) && !util_read_file(p.ptr, text) && text->len &&
		    !memchr(text->ptr, '\0', text->len)) {
			chk = json_stringn(text->ptr, text->len);
			ok = chk != NULL;
			json_decref(chk);
		}
	}
	buf_free(&p);
	if (!ok)
		buf_reset(text);
	return ok;
}

enum sbx_err aio_jobs_start(struct aio_sbx *sb, const struct sbx_exec_spec *spec, struct sbx_exec **out)
{
		struct buf p = BUF_INIT(BUF_CAP_PATH), envtext = BUF_INIT(AIO_ENV_MAX), command = BUF_INIT(BUF_CAP_PATH * 2);
	struct aio_env *env = NULL;
	struct aio_target t;
	struct ajob *j = NULL;
	char err[AIO_ERR_LEN] = "", scope[160];
	unsigned char rnd[6];
	enum sbx_err e = SBX_ERR_IO;
	size_t n_env = 0;
	struct buf cmdtext = BUF_INIT(AIO_INLINE_MAX + 1);
	bool has_stdin = false, inl = false, shell = __atomic_load_n(&sb->shell_only, __ATOMIC_RELAXED);
	int nsfd = -1;

	snprintf(scope, sizeof(scope), "%s/jobs/%s", sb->name, spec->job_name);
	if (!sb->ops->alive(sb))
		return SBX_ERR_GONE;
	if (!(j = ajob_new(sb, spec->job_dir, spec->job_name)) || getentropy(rnd, sizeof(rnd))) {
		e = SBX_ERR_NOMEM;
		goto out;
	}
	if (spec->output_max > 0)
		j->run.output_max = (uint64_t)spec->output_max;
	j->timeout = spec->timeout;
	snprintf(j->session, sizeof(j->session), "sbxfs-%s-%s-%02x%02x%02x%02x%02x%02x", sb->token, spec->job_name, rnd[0],
		rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
	if (buf_addf(&p, "%s/environ", spec->job_dir) || util_read_file(p.ptr, &envtext) ||
	    (!at_url(sb) && ajob_run_dir(sb, spec, &envtext, true, &has_stdin))) {
		snprintf(err, sizeof(err), "cannot prepare the job's run directory: %s", strerror(errno));
		goto out;
	}
	if (!aio_reach(sb, &nsfd)) {
		snprintf(err, sizeof(err), "%s", at_url(sb) ? "the sandbox is gone" : "the container has ended");
		e = SBX_ERR_GONE;
		goto out;
	}
	aio_sbx_target(sb, &t, nsfd, NULL);
	/* at a base_url, a command that is text and has no stdin travels in the
	 * request's environment (no upload); else its files are uploaded */
	inl = at_url(sb) && !shell && ajob_inline(spec, &cmdtext);
	if (at_url(sb) && !inl) {
		e = ajob_stage_remote(sb, &t, spec, &envtext, &has_stdin, err, sizeof(err));
		if (e)
			goto out;
	}
	env = ajob_env(&envtext, &n_env); /* splits envtext: after the staging read it whole */
	if (!env) {
		snprintf(err, sizeof(err), "out of memory");
		e = SBX_ERR_NOMEM;
		goto out;
	}
	if (inl)
		env[n_env++] = (struct aio_env){ "SBXFS_CMD", cmdtext.ptr }; /* ajob_env leaves room for one */
	for (int attempt = 0; attempt < 2; attempt++) {
		const char *run = aio_run_base(sb);

		/* a subshell: an `exit` in the command ends it, not the server's shell */
		buf_reset(&command);
		if (inl) {
			if (buf_adds(&command, "( exec </dev/null; SBXFS_C=$SBXFS_CMD; unset SBXFS_CMD; eval \"unset SBXFS_C; $SBXFS_C\" )"))
				goto out;
			goto send;
		}
		if (shell && buf_addf(&command, "( . %s/%s/env.sh; ", run, spec->job_name))
			goto out;
		if (!shell && buf_adds(&command, "( "))
			goto out;
		if (has_stdin ? buf_addf(&command, "exec <%s/%s/stdin; ", run, spec->job_name) :
				buf_adds(&command, "exec </dev/null; "))
			goto out;
		if (buf_addf(&command, ". %s/%s/cmd )", run, spec->job_name))
			goto out;
send:
		if (!shell) {
			struct aio_bash_request rq = { .command = command.ptr, .session_id = j->session,
				.exec_dir = LAYOUT_SANDBOX_WORKSPACE, .env = env, .n_env = n_env, .async = true,
				.hard_timeout = (double)spec->timeout };
			struct aio_bash_result r;
			e = aio_bash_exec(&t, &rq, &r, err, sizeof(err));
			if (!e) {
				snprintf(j->command, sizeof(j->command), "%s", r.command_id);
				if (r.session_id[0])
					snprintf(j->session, sizeof(j->session), "%s", r.session_id);
			}
			aio_bash_result_clear(&r);
			if (e == SBX_ERR_NOTSUP) {
				log_warn(sb->name, "aio: the image has no /v1/bash API (older than 1.9.3): jobs use the shell "
						   "API, stderr merged into stdout");
				__atomic_store_n(&sb->shell_only, 1, __ATOMIC_RELAXED);
				shell = true;
				if (inl) { /* the shell API takes no environment: the files after all */
					struct buf whole = BUF_INIT(AIO_ENV_MAX);
					inl = false;
					n_env--;
					buf_reset(&p);
					e = buf_addf(&p, "%s/environ", spec->job_dir) || util_read_file(p.ptr, &whole) ?
						    SBX_ERR_IO : ajob_stage_remote(sb, &t, spec, &whole, &has_stdin, err, sizeof(err));
					buf_free(&whole);
					if (e)
						goto out;
				}
				continue;
			}
		} else {
			struct aio_shell_result r;
			e = aio_shell_exec(&t, command.ptr, LAYOUT_SANDBOX_WORKSPACE, (double)spec->timeout, &r, err, sizeof(err));
			if (!e)
				snprintf(j->session, sizeof(j->session), "%s", r.session_id);
			aio_shell_result_clear(&r);
		}
		break;
	}
	if (e)
		goto out;
	j->shell = shell;
	if (ajob_save(j)) {
		snprintf(err, sizeof(err), "cannot record the job: %s", strerror(errno));
		e = SBX_ERR_IO;
		goto out;
	}
	if (sb->ops->find_pid) /* while it runs (a command that ends at once may be gone) */
		sb->ops->find_pid(sb, j->run.name, j->run.job_dir);
	e = ajob_start_pump(j);
	if (e)
		goto out;
	*out = &j->run.base;
	j = NULL;
out:
	if (e)
		log_err(scope, "cannot start the job: %s", err[0] ? err : sbx_err_name(e));
	if (j)
		aio_jobs_free(&j->run.base);
	if (nsfd >= 0)
		close(nsfd);
	free(env);
	buf_free(&p);
	buf_free(&envtext);
	buf_free(&command);
	buf_free(&cmdtext);
	return e;
}

enum sbx_err aio_jobs_reattach(struct aio_sbx *sb, const char *job_dir, struct sbx_exec **out)
{
		const char *slash = strrchr(job_dir, '/');
	struct ajob *j = ajob_new(sb, job_dir, slash ? slash + 1 : job_dir);
	struct buf p = BUF_INIT(BUF_CAP_PATH);

	if (!j)
		return SBX_ERR_NOMEM;
	if (ajob_load(j)) {
		jobrun_lost(job_dir, j->run.scope, "no record of the command in the AIO server");
		aio_jobs_free(&j->run.base);
		return SBX_ERR_GONE;
	}
	if (!sb->ops->alive(sb)) {
		jobrun_lost(job_dir, j->run.scope, at_url(sb) ? "the sandbox is gone" :
							"the sandbox's container ended while no daemon watched the job");
		aio_jobs_free(&j->run.base);
		return SBX_ERR_GONE;
	}
	/* output appended after the offsets were last recorded is fetched again */
	if (buf_addf(&p, "%s/stdout", job_dir) || truncate(p.ptr, j->out_size) ||
	    (buf_reset(&p), buf_addf(&p, "%s/stderr", job_dir)) || truncate(p.ptr, j->err_size))
		log_warn(sb->name, "%s: cannot trim the job's output to the recorded offsets: %s", j->run.name, strerror(errno));
	buf_free(&p);
	if (ajob_start_pump(j)) {
		aio_jobs_free(&j->run.base);
		return SBX_ERR_NOMEM;
	}
	*out = &j->run.base;
	return SBX_OK;
}

enum sbx_err aio_jobs_signal(struct sbx_exec *x, int sig)
{
	struct ajob *j = ajob(x);
	const char *name = sig == SIGTERM ? "SIGTERM" : sig == SIGKILL ? "SIGKILL" : sig == SIGINT ? "SIGINT" : NULL;
	struct aio_target t;
	char err[AIO_ERR_LEN];
	int nsfd;
	enum sbx_err e;

	if (!name)
		return SBX_ERR_NOTSUP;
	if (!aio_reach(j->sb, &nsfd))
		return SBX_ERR_GONE;
	aio_sbx_target(j->sb, &t, nsfd, NULL);
	__atomic_store_n(&j->run.sent_sig, sig, __ATOMIC_RELAXED);
	e = j->shell ? aio_shell_kill(&t, j->session, err, sizeof(err)) : aio_bash_kill(&t, j->session, name, err, sizeof(err));
	if (nsfd >= 0)
		close(nsfd);
	if (e)
		log_warn(j->sb->name, "%s: kill: %s", j->run.name, err);
	/* "No running command": it has ended */
	return e == SBX_ERR_IO && strstr(err, "No running") ? SBX_ERR_GONE : e;
}

void aio_jobs_finish(struct sbx_exec *x)
{
	jobrun_finish(&ajob(x)->run);
}

void aio_jobs_free(struct sbx_exec *x)
{
	struct ajob *j = ajob(x);

	jobrun_release(&j->run); /* the pump first: it uses the box */
	sbx_box_put(j->sb->box);
	free(j);
}
