/* SPDX-License-Identifier: MIT */
/*
 * fault.c - the fault-injecting provider of the unit tests (see fault.h).
 *
 * A sandbox is thread_dir/fault.json; a job is a thread that appends to
 * job_dir/stdout, writes job_dir/result as the local supervisor does, and
 * signals an eventfd when it ends, exactly the contract struct sbx_exec
 * promises the job state machine.
 */
#define _GNU_SOURCE
#include "fault.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "../../common/json.h"
#include "../../common/layout.h"
#include "../../common/util.h"
#include "../../providers/provider_int.h"

struct fault_knobs fault;

struct fault_box {
	struct sbx_box base;
	char *thread_dir;
	bool alive;
};

struct fault_exec {
	struct sbx_exec base;
	struct fault_box *fb; /* referenced */
	char *job_dir;
	pthread_t thread;
	bool joined;
	_Atomic int sig; /* written by exec_signal, read by the job thread */
	enum fault_exec_mode mode;
};

void fault_reset(void)
{
	memset(&fault, 0, sizeof(fault));
}

static void fault_msleep(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static int fault_record(const char *thread_dir, bool alive)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	const char *text = alive ? "{\"alive\": true}" : "{\"alive\": false}";
	int r = layout_file(&p, thread_dir, "fault.json") || util_write_atomic(p.ptr, text, strlen(text), 0600);

	buf_free(&p);
	return r;
}

static struct fault_box *fault_box_new(const char *thread_dir, bool alive)
{
	struct fault_box *fb = calloc(1, sizeof(*fb));

	if (!fb || !(fb->thread_dir = strdup(thread_dir))) {
		free(fb);
		return NULL;
	}
	sbx_box_init(&fb->base, &provider_fault);
	fb->base.uid = 12345;
	fb->base.gid = 12345;
	fb->alive = alive;
	/* stable across adoption, as a container id or a remote sandbox id is */
	snprintf(fb->base.remote_id, sizeof(fb->base.remote_id), "fault:%.70s",
		strrchr(thread_dir, '/') ? strrchr(thread_dir, '/') + 1 : thread_dir);
	__atomic_add_fetch(&fault.live_boxes, 1, __ATOMIC_RELAXED);
	return fb;
}

static enum sbx_err fault_init(const struct sbx_config *cfg, char *err, size_t errlen)
{
	(void)cfg;
	(void)err;
	(void)errlen;
	return SBX_OK;
}

static enum sbx_err fault_create(const struct sbx_spec *spec, struct sbx_box **out)
{
	struct fault_box *fb;

	__atomic_add_fetch(&fault.creates, 1, __ATOMIC_RELAXED);
	if (spec->spare)
		__atomic_add_fetch(&fault.spare_creates, 1, __ATOMIC_RELAXED);
	if (fault.create_delay_ms) {
		int now = __atomic_add_fetch(&fault.creating, 1, __ATOMIC_RELAXED);
		int max = __atomic_load_n(&fault.max_creating, __ATOMIC_RELAXED);

		while (now > max && !__atomic_compare_exchange_n(&fault.max_creating, &max, now, false, __ATOMIC_RELAXED,
					     __ATOMIC_RELAXED))
			;
		fault_msleep(fault.create_delay_ms);
		__atomic_sub_fetch(&fault.creating, 1, __ATOMIC_RELAXED);
	}
	if (fault.create_hang) {
		fault_msleep((int)spec->cfg->ready_timeout * 1000 + 100);
		return SBX_ERR_TIMEOUT;
	}
	if (fault.create_err)
		return fault.create_err;
	fb = fault_box_new(spec->dirs.thread_dir, true);
	if (!fb)
		return SBX_ERR_NOMEM;
	if (fault_record(spec->dirs.thread_dir, true)) {
		sbx_box_put(&fb->base);
		return SBX_ERR_IO;
	}
	*out = &fb->base;
	return SBX_OK;
}

static enum sbx_err fault_health(struct sbx_box *b)
{
	struct fault_box *fb = (struct fault_box *)b;
	int i = __atomic_fetch_add(&fault.healths, 1, __ATOMIC_RELAXED);

	if (i < fault.n_health && fault.health_seq[i])
		return fault.health_seq[i];
	return fb->alive ? SBX_OK : SBX_ERR_GONE;
}

static enum sbx_err fault_destroy(struct sbx_box *b)
{
	struct fault_box *fb = (struct fault_box *)b;
	struct buf p = BUF_INIT(BUF_CAP_PATH);

	__atomic_add_fetch(&fault.destroys, 1, __ATOMIC_RELAXED);
	fb->alive = false;
	if (!layout_file(&p, fb->thread_dir, "fault.json"))
		unlink(p.ptr);
	buf_free(&p);
	return fault.destroy_err;
}

static void fault_box_free(struct sbx_box *b)
{
	struct fault_box *fb = (struct fault_box *)b;

	__atomic_sub_fetch(&fault.live_boxes, 1, __ATOMIC_RELAXED);
	free(fb->thread_dir);
	free(fb);
}

/* A spare bound to a thread: its record moves to the thread's directory. */
static enum sbx_err fault_claim(struct sbx_box *b, const struct sbx_spec *spec)
{
	struct fault_box *fb = (struct fault_box *)b;
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	char *dir;

	__atomic_add_fetch(&fault.claims, 1, __ATOMIC_RELAXED);
	if (fault.claim_err)
		return fault.claim_err;
	if (!(dir = strdup(spec->dirs.thread_dir)))
		return SBX_ERR_NOMEM;
	if (fault_record(dir, true)) {
		free(dir);
		return SBX_ERR_IO;
	}
	if (!layout_file(&p, fb->thread_dir, "fault.json"))
		unlink(p.ptr);
	buf_free(&p);
	free(fb->thread_dir);
	fb->thread_dir = dir;
	return SBX_OK;
}

static enum sbx_err fault_adopt(const struct sbx_spec *spec, struct sbx_box **out)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	json_t *j = NULL;
	struct fault_box *fb = NULL;

	__atomic_add_fetch(&fault.adopts, 1, __ATOMIC_RELAXED);
	if (!layout_file(&p, spec->dirs.thread_dir, "fault.json"))
		j = json_read_file(p.ptr);
	buf_free(&p);
	if (j)
		fb = fault_box_new(spec->dirs.thread_dir, json_is_true(json_object_get(j, "alive")));
	json_decref(j);
	if (!fb)
		return SBX_ERR_GONE;
	*out = &fb->base;
	return SBX_OK;
}

/* ---- jobs ------------------------------------------------------------------- */

static void fault_job_write(struct fault_exec *fx, const char *file, const char *text, bool append)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);

	if (!buf_addf(&p, "%s/%s", fx->job_dir, file)) {
		if (append) {
			int fd = open(p.ptr, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
			if (fd >= 0) {
				if (write(fd, text, strlen(text)) < 0)
					perror("fault: stdout");
				close(fd);
			}
		} else if (util_write_atomic(p.ptr, text, strlen(text), 0600)) {
			perror("fault: result");
		}
	}
	buf_free(&p);
}

static void *fault_job_main(void *arg)
{
	struct fault_exec *fx = arg;
	uint64_t one = 1;
	char result[160];

	if (fx->mode == FAULT_EXEC_EXIT) {
		fault_job_write(fx, "stdout", "out\n", true);
		for (int t = 0; t < fault.exec_ms && !fx->sig; t += 10)
			fault_msleep(10);
		snprintf(result, sizeof(result), "{\"state\": \"%s\", \"exit\": %d, \"signal\": %d, \"ended_at\": 1}",
			fx->sig ? "killed" : "exited", fx->sig ? 128 + fx->sig : fault.exit_code, fx->sig);
		fault_job_write(fx, "result", result, false);
	} else if (fx->mode == FAULT_EXEC_DIE) {
		fault_job_write(fx, "stdout", "partial\n", true);
	} else {
		while (!fx->sig || (fault.ignore_term && fx->sig == SIGTERM))
			fault_msleep(10);
		snprintf(result, sizeof(result), "{\"state\": \"killed\", \"exit\": %d, \"signal\": %d, \"ended_at\": 1}",
			128 + fx->sig, fx->sig);
		fault_job_write(fx, "result", result, false);
	}
	if (fx->base.fd >= 0 && write(fx->base.fd, &one, sizeof(one)) < 0)
		perror("fault: eventfd");
	return NULL;
}

static enum sbx_err fault_exec_new(struct fault_box *fb, const char *job_dir, enum fault_exec_mode mode,
	struct sbx_exec **out)
{
	struct fault_exec *fx = calloc(1, sizeof(*fx));

	if (!fx || !(fx->job_dir = strdup(job_dir))) {
		free(fx);
		return SBX_ERR_NOMEM;
	}
	fx->base.prov = &provider_fault;
	fx->base.fd = fault.exec_bad_fd ? -1 : eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	fx->fb = fb;
	sbx_box_get(&fb->base);
	fx->mode = mode;
	__atomic_add_fetch(&fault.live_execs, 1, __ATOMIC_RELAXED);
	if (pthread_create(&fx->thread, NULL, fault_job_main, fx)) {
		fx->joined = true;
		fx->base.prov->ops->exec_free(&fx->base);
		return SBX_ERR_NOMEM;
	}
	*out = &fx->base;
	return SBX_OK;
}

static enum sbx_err fault_exec_start(struct sbx_box *b, const struct sbx_exec_spec *spec, struct sbx_exec **out)
{
	if (fault.exec_err)
		return fault.exec_err;
	return fault_exec_new((struct fault_box *)b, spec->job_dir, fault.exec_mode, out);
}

static enum sbx_err fault_exec_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out)
{
	if (!fault.reattach_ok)
		return SBX_ERR_GONE;
	return fault_exec_new((struct fault_box *)b, job_dir, FAULT_EXEC_SIGNAL, out);
}

static enum sbx_err fault_exec_signal(struct sbx_exec *x, int sig)
{
	struct fault_exec *fx = (struct fault_exec *)x;

	if (fault.signal_notsup && sig != SIGKILL)
		return SBX_ERR_NOTSUP;
	if (sig > 0 && sig < 65)
		__atomic_add_fetch(&fault.signals[sig], 1, __ATOMIC_RELAXED);
	fx->sig = sig;
	if (fault.signal_delay_ms) { /* a slow backend (a tree walk, an HTTP call) still uses the handle */
		usleep((useconds_t)fault.signal_delay_ms * 1000);
		if (__atomic_load_n(&fx->sig, __ATOMIC_RELAXED) != sig)
			return SBX_ERR_IO;
	}
	return SBX_OK;
}

static void fault_exec_finish(struct sbx_exec *x)
{
	struct fault_exec *fx = (struct fault_exec *)x;

	if (!fx->joined)
		pthread_join(fx->thread, NULL);
	fx->joined = true;
}

static void fault_exec_free(struct sbx_exec *x)
{
	struct fault_exec *fx = (struct fault_exec *)x;

	if (!fx->joined) {
		fx->sig = SIGKILL; /* a test's exec must not outlive it */
		pthread_join(fx->thread, NULL);
	}
	if (fx->base.fd >= 0)
		close(fx->base.fd);
	sbx_box_put(&fx->fb->base);
	free(fx->job_dir);
	free(fx);
	__atomic_sub_fetch(&fault.live_execs, 1, __ATOMIC_RELAXED);
}

/* ---- files and skills over a local directory ----------------------------------- */

/* Files ops take absolute paths, skills ops paths relative to the
 * projection root (/mnt/skills here). */
static enum sbx_err fault_path(const char *path, struct buf *out)
{
	if (!fault.remote_root[0] || strstr(path, "..") || buf_adds(out, fault.remote_root) ||
	    (path[0] != '/' && buf_adds(out, "/mnt/skills/")) || buf_adds(out, path))
		return SBX_ERR_IO;
	return SBX_OK;
}

static enum sbx_err fault_op_begin(void)
{
	__atomic_add_fetch(&fault.file_ops, 1, __ATOMIC_RELAXED);
	if (fault.files_delay_ms)
		fault_msleep(fault.files_delay_ms);
	return fault.files_err;
}

static enum sbx_err fault_upload(struct sbx_box *b, const char *path, int fd, off_t size, mode_t mode)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = fault_op_begin();
	char chunk[65536];
	off_t off = 0;
	int out = -1;

	(void)b;
	if (!e)
		e = fault_path(path, &p);
	if (!e) {
		char *slash = strrchr(p.ptr, '/');
		*slash = '\0';
		util_mkdir_p(p.ptr, 0755); /* as execd: parents are made */
		*slash = '/';
		out = open(p.ptr, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		e = out < 0 ? SBX_ERR_IO : SBX_OK;
	}
	while (!e && off < size) {
		ssize_t n = pread(fd, chunk, sizeof(chunk), off);
		if (n <= 0 || write(out, chunk, (size_t)n) != n)
			e = SBX_ERR_IO;
		else
			off += n;
	}
	if (!e && fchmod(out, mode))
		e = SBX_ERR_IO;
	if (out >= 0)
		close(out);
	if (!e) {
		__atomic_add_fetch(&fault.uploads, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&fault.upload_bytes, (int)size, __ATOMIC_RELAXED);
	}
	buf_free(&p);
	return e;
}

static enum sbx_err fault_mkdir(struct sbx_box *b, const char *path, mode_t mode)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = fault_op_begin();

	(void)b;
	if (!e)
		e = fault_path(path, &p);
	if (!e && util_mkdir_p(p.ptr, mode ? mode : 0755))
		e = SBX_ERR_IO;
	if (!e)
		__atomic_add_fetch(&fault.skill_mkdirs, 1, __ATOMIC_RELAXED);
	buf_free(&p);
	return e;
}

static enum sbx_err fault_remove(struct sbx_box *b, const char *path, bool is_dir)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err e = fault_op_begin();

	(void)b;
	if (!e)
		e = fault_path(path, &p);
	if (!e && (is_dir ? util_rm_rf(p.ptr) : unlink(p.ptr)) && errno != ENOENT)
		e = SBX_ERR_IO;
	if (!e)
		__atomic_add_fetch(&fault.skill_removes, 1, __ATOMIC_RELAXED);
	buf_free(&p);
	return e;
}

static const struct sbx_skills_ops fault_skills_ops = {
	.upload = fault_upload,
	.mkdir = fault_mkdir,
	.remove = fault_remove,
};

static const struct sbx_provider_ops fault_ops = {
	.skills = &fault_skills_ops,
	.init = fault_init,
	.create = fault_create,
	.health = fault_health,
	.destroy = fault_destroy,
	.box_free = fault_box_free,
	.adopt = fault_adopt,
	.claim = fault_claim,
	.exec_start = fault_exec_start,
	.exec_reattach = fault_exec_reattach,
	.exec_signal = fault_exec_signal,
	.exec_finish = fault_exec_finish,
	.exec_free = fault_exec_free,
};

static const char *const fault_aliases[] = { "tests.unit:FaultProvider", NULL };

const struct sbx_provider provider_fault = {
	.name = "fault",
	.aliases = fault_aliases,
	.caps = SBX_CAP_EXEC | SBX_CAP_SIGNALS,
	.ops = &fault_ops,
};

const struct sbx_provider *const sbx_builtin_providers[] = {
	&provider_fault,
	NULL,
};
