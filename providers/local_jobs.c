/* SPDX-License-Identifier: MIT */
/*
 * local_jobs.c - jobs of local sandboxes: the exec slots of the local
 * provider.  A job runs under the sbxfs-exec supervisor (local_exec.c),
 * started by root with the job in a memfd, which joins the init's
 * namespaces and the job's cgroup, drops privileges and records the
 * result; the daemon watches the supervisor through a pidfd (the exec
 * handle of provider.h) and reattaches to it after a restart by the pid
 * and start time recorded in the job directory.  Signals go to the job's
 * cgroup, found from the job directory, so they work after a restart too.
 * The sandboxes themselves are local.c's.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/buf.h"
#include "../common/json.h"
#include "../common/layout.h"
#include "../common/log.h"
#include "../common/util.h"
#include "cgroup.h"
#include "local.h"
#include "provider_int.h"

/* The job for sbxfs-exec, in a memfd: the command, a NUL, then KEY=VALUE
 * entries each ended by a NUL (job_dir/cmd and job_dir/environ as the FUSE
 * layer wrote them).  Neither travels through the supervisor's argv
 * (world-readable in /proc) or environment (a root process that starts with
 * LD_PRELOAD, LD_AUDIT, GCONV_PATH... of the user's choosing runs the
 * user's code as root). */
static int local_exec_input(const char *job_dir)
{
	struct buf in = BUF_INIT(LOCAL_EXEC_INPUT_MAX + 1), env = BUF_INIT(LOCAL_EXEC_INPUT_MAX),
		   path = BUF_INIT(BUF_CAP_PATH);
	int fd = -1;

	if (!buf_addf(&path, "%s/cmd", job_dir) && !util_read_file(path.ptr, &in) && in.len &&
	    !memchr(in.ptr, '\0', in.len) && !buf_add(&in, "", 1)) {
		buf_reset(&path);
		if (!buf_addf(&path, "%s/environ", job_dir) && !util_read_file(path.ptr, &env) &&
		    !buf_add(&in, env.ptr ? env.ptr : "", env.len))
			fd = local_memfd("sbxfs-job", in.ptr, in.len);
	}
	buf_free(&in);
	buf_free(&env);
	buf_free(&path);
	return fd;
}

/* A job's supervisor (sbxfs-exec), watched through a pidfd. */
struct local_exec {
	struct sbx_exec base; /* first: see local_exec() */
	struct local_box *lb; /* referenced */
	pid_t pid;
	bool child; /* ours to reap (not adopted after a restart) */
	char *job_dir;
};

static struct local_exec *local_exec(struct sbx_exec *x)
{
	if (!x || x->prov != &provider_local)
		abort(); /* a handle given to the wrong provider is a programming error */
	return (struct local_exec *)x;
}

static struct local_exec *local_exec_new(struct local_box *lb, const char *job_dir, pid_t pid, bool child)
{
	struct local_exec *le = calloc(1, sizeof(*le));

	if (!le || !(le->job_dir = strdup(job_dir)))
		goto fail;
	le->base.fd = pidfd_open(pid, 0);
	if (le->base.fd < 0)
		goto fail;
	le->base.prov = &provider_local;
	le->lb = lb;
	sbx_box_get(&lb->base);
	le->pid = pid;
	le->child = child;
	return le;
fail:
	if (le)
		free(le->job_dir);
	free(le);
	return NULL;
}

/* The supervisor's pid and start time, for reattaching after a restart. */
static void local_exec_record(const char *job_dir, pid_t pid)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	json_t *o = json_pack("{s:i,s:I}", "pid", (int)pid, "start", (json_int_t)util_proc_starttime(pid));
	char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;

	if (!text || buf_addf(&path, "%s/supervisor", job_dir) ||
	    util_write_atomic(path.ptr, text, strlen(text), 0600))
		log_warn("local", "%s: cannot record the job supervisor: %s", job_dir, strerror(errno));
	free(text);
	json_decref(o);
	buf_free(&path);
}

enum sbx_err local_exec_start(struct sbx_box *b, const struct sbx_exec_spec *e, struct sbx_exec **out)
{
	/* the supervisor's whole environment: fixed, nothing of the job's */
	static char *const clean_env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
	struct local_box *lb = local_box(b);
	struct argv_builder *a = calloc(1, sizeof(*a));
	enum sbx_err result = SBX_ERR_IO;
	int ready[2] = { -1, -1 }, input = -1, filter_fd = -1;
	struct buf cgdir = BUF_INIT(BUF_CAP_PATH), frozen = BUF_INIT(BUF_CAP_PATH);
	struct cgroup_join join;
	struct local_exec *le;
	pid_t pid = -1;
	char ch;

	if (!a)
		return SBX_ERR_NOMEM;
	if (!local_alive(lb)) {
		result = SBX_ERR_GONE;
		goto out;
	}
	result = cgroup_job_create(lb->token, e->job_name, &cgdir, &join);
	if (result)
		goto out;
	result = SBX_ERR_IO;
	av_add(a, local_exec_helper);
	av_add(a, av_fmt(a, "--pid=%d", (int)lb->init_pid));
	av_add(a, av_fmt(a, "--start=%llu", lb->init_start));
	av_add(a, av_fmt(a, "--uid=%u", (unsigned)lb->uid));
	av_add(a, av_fmt(a, "--gid=%u", (unsigned)lb->gid));
	av_add(a, av_fmt(a, "--timeout=%ld", e->timeout));
	av_add(a, av_fmt(a, "--job-dir=%s", e->job_dir));
	av_add(a, av_fmt(a, "--output-max=%llu", (unsigned long long)lb->output_max));
	av_add(a, "--filter-fd=4");
	if (cgdir.len)
		av_add(a, av_fmt(a, "--cgroup=%s", buf_str(&cgdir)));
	for (int i = 0; i < join.n; i++)
		av_add(a, av_fmt(a, "--join=%s", join.path[i]));
	if (!cgroup_frozen_file(lb->token, &frozen) && frozen.len) /* the v1 freezer: the timeout's clock */
		av_add(a, av_fmt(a, "--frozen=%s", buf_str(&frozen)));
	if (a->overflow) {
		result = SBX_ERR_INVAL;
		goto out;
	}
	input = local_exec_input(e->job_dir);
	filter_fd = local_filter_fd();
	if (input < 0 || filter_fd < 0 || pipe2(ready, O_CLOEXEC)) {
		log_err("local", "%s: cannot prepare the job: %s", e->job_dir, strerror(errno));
		goto out;
	}
	{
		const int fds[LOCAL_SPAWN_FDS] = { input, -1, -1, ready[1], filter_fd, -1 };
		pid = local_spawn((char *const *)a->v, clean_env, fds);
	}
	if (pid < 0) {
		result = errno == ENOMEM || errno == EAGAIN ? SBX_ERR_NOMEM : SBX_ERR_IO;
		goto out;
	}
	close(ready[1]);
	ready[1] = -1;
	/* The supervisor answers once the job's process group and cgroup exist
	 * (so a kill right after cmd reaches it), or closes the pipe on failure;
	 * then the result file says why. */
	for (;;) {
		struct pollfd p = { .fd = ready[0], .events = POLLIN };
		int r = poll(&p, 1, 10000);
		if (r < 0 && errno == EINTR)
			continue;
		if (r == 1 && read(ready[0], &ch, 1) == 1)
			break;
		log_warn("local", "job supervisor %d did not report the job started", (int)pid);
		break;
	}
	local_exec_record(e->job_dir, pid);
	le = local_exec_new(lb, e->job_dir, pid, true);
	if (!le) {
		/* cannot watch it: stop it, so it is not left running unseen */
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		log_err("local", "%s: cannot watch the job supervisor: %s", e->job_dir, strerror(errno));
		result = SBX_ERR_NOMEM;
		goto out;
	}
	*out = &le->base;
	result = SBX_OK;
out:
	for (int i = 0; i < 2; i++)
		if (ready[i] >= 0)
			close(ready[i]);
	if (input >= 0)
		close(input);
	if (filter_fd >= 0)
		close(filter_fd);
	buf_free(&cgdir);
	buf_free(&frozen);
	av_free(a);
	free(a);
	return result;
}

enum sbx_err local_exec_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out)
{
	struct local_box *lb = local_box(b);
	struct buf path = BUF_INIT(BUF_CAP_PATH);
	struct local_exec *le = NULL;
	json_t *sup = NULL;
	pid_t pid;

	if (!buf_addf(&path, "%s/supervisor", job_dir))
		sup = json_read_file(path.ptr);
	buf_free(&path);
	if (!sup)
		return SBX_ERR_GONE;
	pid = (pid_t)json_integer_value(json_object_get(sup, "pid"));
	if (pid > 0 && util_proc_starttime(pid) == (uint64_t)json_integer_value(json_object_get(sup, "start")))
		le = local_exec_new(lb, job_dir, pid, false);
	json_decref(sup);
	if (!le)
		return SBX_ERR_GONE;
	*out = &le->base;
	return SBX_OK;
}

/* Signal every process of a job: all members of its cgroup (so processes that
 * left its process group are reached too), and its process group.  SIGKILL
 * uses cgroup.kill, which also catches processes forked meanwhile.  The job
 * directory says everything: works for adopted and released sandboxes. */
static enum sbx_err local_signal_job(const char *job_dir, int sig)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH), text = BUF_INIT(4096), cg = BUF_INIT(BUF_CAP_PATH);
	enum sbx_err result = SBX_ERR_GONE;
	long pgid = 0;

	if (!buf_addf(&path, "%s/pgid", job_dir) && !util_read_file(path.ptr, &text))
		pgid = strtol(buf_str(&text), NULL, 10);
	buf_reset(&path);
	if (!buf_addf(&path, "%s/cgroup", job_dir))
		util_read_file(path.ptr, &cg);
	if (cg.len) {
		struct buf f = BUF_INIT(BUF_CAP_PATH), procs = BUF_INIT(1024 * 1024);
		if (sig == SIGKILL) {
			int fd = buf_addf(&f, "%s/cgroup.kill", buf_str(&cg)) ? -1 : open(f.ptr, O_WRONLY | O_CLOEXEC);
			if (fd >= 0) {
				if (write(fd, "1", 1) == 1)
					result = SBX_OK;
				close(fd);
			}
		} else if (!buf_addf(&f, "%s/cgroup.procs", buf_str(&cg)) && !util_read_file(f.ptr, &procs)) {
			for (char *p = procs.ptr; p && *p;) {
				long pid = strtol(p, &p, 10);
				if (pid > 1 && kill((pid_t)pid, sig) == 0)
					result = SBX_OK;
				while (*p == '\n')
					p++;
			}
		}
		buf_free(&f);
		buf_free(&procs);
	}
	if (pgid > 1 && kill(-(pid_t)pgid, sig) == 0)
		result = SBX_OK;
	buf_free(&path);
	buf_free(&text);
	buf_free(&cg);
	return result;
}

enum sbx_err local_exec_signal(struct sbx_exec *x, int sig)
{
	return local_signal_job(local_exec(x)->job_dir, sig);
}

/* The supervisor has exited: reap it; a supervisor that died without a
 * word (killed with the sandbox while the daemon was down, or by hand)
 * leaves no result: the job state machine records it lost. */
void local_exec_finish(struct sbx_exec *x)
{
	struct local_exec *le = local_exec(x);

	if (le->child)
		while (waitpid(le->pid, NULL, 0) < 0 && errno == EINTR)
			;
	le->child = false;
}

void local_exec_free(struct sbx_exec *x)
{
	struct local_exec *le = local_exec(x);

	if (le->child) /* still running at exit: it goes on and records its result */
		log_debug("local", "%s: supervisor %d left running", le->job_dir, (int)le->pid);
	close(le->base.fd);
	sbx_box_put(&le->lb->base);
	free(le->job_dir);
	free(le);
}

/* Running jobs (a pgid, no result yet) are marked, so their supervisors
 * report "killed" rather than a plain exit by signal. */
static void local_mark_running_killed(struct local_box *lb)
{
	struct buf dir = BUF_INIT(BUF_CAP_PATH), f = BUF_INIT(BUF_CAP_PATH);
	struct dirent *e;
	DIR *d;

	if (layout_dir(&dir, lb->thread_dir, LAYOUT_JOBS) || !(d = opendir(dir.ptr))) {
		buf_free(&dir);
		return;
	}
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || e->d_type != DT_DIR)
			continue;
		buf_reset(&f);
		if (buf_addf(&f, "%s/%s/result", dir.ptr, e->d_name) || !access(f.ptr, F_OK))
			continue;
		buf_reset(&f);
		if (!buf_addf(&f, "%s/%s/pgid", dir.ptr, e->d_name) && !access(f.ptr, F_OK)) {
			buf_reset(&f);
			if (!buf_addf(&f, "%s/%s/kill-requested", dir.ptr, e->d_name))
				util_write_atomic(f.ptr, "KILL", 4, 0600);
		}
	}
	closedir(d);
	buf_free(&dir);
	buf_free(&f);
}

static pid_t local_ppid(pid_t pid)
{
	char path[64], data[512], *p;
	int ppid = 0;
	FILE *f;

	if (str_fmt(path, sizeof(path), "/proc/%d/stat", (int)pid) || !(f = fopen(path, "re")))
		return 0;
	data[fread(data, 1, sizeof(data) - 1, f)] = '\0';
	fclose(f);
	p = strrchr(data, ')');
	if (!p || sscanf(p + 2, "%*c %d", &ppid) != 1)
		return 0;
	return (pid_t)ppid;
}

enum sbx_err local_kill_all(struct sbx_box *b)
{
	struct local_box *lb = local_box(b);
	pid_t keep[2];

	if (!local_alive(lb))
		return SBX_ERR_GONE;
	keep[0] = lb->init_pid;
	keep[1] = local_ppid(lb->init_pid); /* bubblewrap's monitor */
	local_mark_running_killed(lb);
	return cgroup_kill_jobs(lb->token, keep, 2);
}

/* A finished job's slot is removed: end what it left behind, drop its
 * cgroup (the job directory says everything, as for signals). */
void local_exec_cleanup(struct sbx_box *b, const char *job_dir, const char *job_name)
{
	struct buf path = BUF_INIT(BUF_CAP_PATH), cg = BUF_INIT(BUF_CAP_PATH);

	(void)b;
	(void)job_name;
	if (!buf_addf(&path, "%s/cgroup", job_dir) && !util_read_file(path.ptr, &cg) && cg.len)
		cgroup_job_remove(buf_str(&cg));
	buf_free(&path);
	buf_free(&cg);
}
