/* SPDX-License-Identifier: MIT */
/*
 * jobs.c - jobs/ (DESIGN §6): commands run inside a sandbox through files.
 *
 * A job is a directory on the host, STATE/users/U/threads/T/jobs/NAME, so a
 * job and its output outlive a release, a reclaim and a daemon restart, and
 * output never sits in daemon memory.  The provider's supervisor process
 * runs the command and records its end in the job directory itself; the
 * daemon only watches:
 *   - one event thread waits (epoll) on a pidfd per running supervisor, on
 *     inotify for output files that grow, on an eventfd for wake-ups and on
 *     the next kill-escalation deadline;
 *   - a read that has to wait (stdout/stderr at end of file of a running
 *     job, exit before the end) is parked as a waiter and answered by the
 *     event thread later, so no FUSE worker is ever held; an interrupt
 *     (signal) answers it with EINTR; O_NONBLOCK gets EAGAIN instead;
 *   - poll(2) handles are kept per job and notified on every change.
 *
 * Waiter protocol (libfuse runs interrupt callbacks holding the request's
 * lock, so the callback must not take job->lock): a waiter is put on the
 * job's list unarmed, the interrupt callback is registered outside any
 * lock, then the waiter is armed; only armed waiters are claimed, and the
 * claimer clears the callback (which waits for a running one) before it
 * replies.  The callback itself only flags the waiter and kicks the event
 * thread.
 *
 * Locks: jobs_lock (registry) → job->lock; neither is held while calling
 * into FUSE replies for parked requests or into the pool/provider.
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
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/json.h"

#include "../common/log.h"
#include "../common/names.h"
#include "../common/util.h"
#include "fs.h"

#define JOB_KILL_GRACE_MS 2000
#define JOB_ENV_MAX (64 * 1024)

enum job_state { J_CREATED, J_STARTING, J_RUNNING, J_EXITED, J_KILLED, J_TIMED_OUT, J_LOST, J_FAILED };
static const char *job_state_names[] = { "created", "starting", "running", "exited", "killed", "timed_out", "lost",
	"failed" };

struct waiter {
	fuse_req_t req;
	struct job *job;
	int which; /* JF_STDOUT, JF_STDERR, JF_EXIT */
	size_t size;
	off_t off;
	bool armed;              /* job->lock */
	volatile int interrupted; /* set by the interrupt callback */
	struct waiter *next;
};

struct pollent {
	struct fuse_pollhandle *ph;
	struct pollent *next;
};

struct job {
	int refs; /* atomic: registry + nodes + holders */
	char name[NAME_MAX_LEN + 1];
	char *dir;
	char scope[160];
	struct sbx *sbx; /* referenced */
	pthread_mutex_t lock;
	/* protected by lock: */
	enum job_state state;
	pid_t sup_pid;
	int pidfd;
	bool our_child;
	int wd[2]; /* inotify watches on stdout, stderr */
	uint64_t kill_deadline_ms; /* escalate to SIGKILL then; 0 = none */
	struct waiter *waiters;
	struct pollent *polls;
	struct job *next; /* registry (jobs_lock) */
};

/* Per-open handle of a job file. */
struct jh {
	int fd;       /* stdout/stderr: the host file */
	off_t pos;    /* how far this open has read (poll readiness) */
	struct buf snap; /* status/cmd snapshot */
};

static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct job *jobs;     /* jobs_lock */
static int ev_epoll = -1, ev_inotify = -1, ev_kick = -1;
static pthread_t ev_thread;
static volatile int ev_stop;

static const int job_modes[JF_COUNT] = { 0600, 0200, 0200, 0400, 0400, 0400, 0400, 0200 };

int jobs_file_mode(int which)
{
	return which >= 0 && which < JF_COUNT ? job_modes[which] : 0400;
}

void jobs_get_ref(struct job *j)
{
	__atomic_add_fetch(&j->refs, 1, __ATOMIC_RELAXED);
}

void jobs_put(struct job *j)
{
	if (!j || __atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	if (j->pidfd >= 0)
		close(j->pidfd);
	pthread_mutex_destroy(&j->lock);
	pool_put(j->sbx);
	free(j->dir);
	free(j);
}

static void kick(void)
{
	uint64_t one = 1;

	if (write(ev_kick, &one, sizeof(one)) < 0)
		log_warn("jobs", "cannot wake the event thread: %s", strerror(errno));
}

static int job_path(struct job *j, const char *file, struct buf *b)
{
	return buf_addf(b, "%s/%s", j->dir, file);
}

static bool job_ended(enum job_state s)
{
	return s >= J_EXITED;
}

/* ---- state from disk -------------------------------------------------------------- */

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

static void job_write_file(struct job *j, const char *file, const char *text, size_t len)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);

	if (job_path(j, file, &p) || util_write_atomic(p.ptr, text, len, 0600))
		log_warn(j->scope, "cannot write %s: %s", file, strerror(errno));
	buf_free(&p);
}

/* Caller holds j->lock: the job runs now / has ended (data cache timeouts). */
static void job_set_running_locked(struct job *j, bool running)
{
	if (running && j->state != J_RUNNING)
		__atomic_add_fetch(&j->sbx->jobs_running, 1, __ATOMIC_RELAXED);
	else if (!running && j->state == J_RUNNING)
		__atomic_sub_fetch(&j->sbx->jobs_running, 1, __ATOMIC_RELAXED);
}

/* Caller holds j->lock.  Take the supervisor's result as the final state. */
static void job_take_result_locked(struct job *j)
{
	json_t *r = job_read_json(j, "result");
	const char *st = r ? json_string_value(json_object_get(r, "state")) : NULL;

	job_set_running_locked(j, false);
	if (!st)
		j->state = J_LOST;
	else if (!strcmp(st, "exited"))
		j->state = J_EXITED;
	else if (!strcmp(st, "killed"))
		j->state = J_KILLED;
	else if (!strcmp(st, "timed_out"))
		j->state = J_TIMED_OUT;
	else
		j->state = J_FAILED;
	if (!r) {
		/* The supervisor is gone without a word: it died with the daemon
		 * or was killed.  Record a final state so readers stop waiting. */
		char text[256];
		snprintf(text, sizeof(text),
			"{\"state\": \"lost\", \"exit\": 255, \"signal\": 0, \"ended_at\": %.3f, \"error\": \"the job's supervisor ended without recording a result\"}",
			util_wall_now());
		job_write_file(j, "result", text, strlen(text));
	}
	json_decref(r);
	/* A pending kill escalation stays: processes the job left behind in
	 * its cgroup are ended too when the grace period is over. */
}

static void job_unwatch_locked(struct job *j)
{
	for (int i = 0; i < 2; i++)
		if (j->wd[i] >= 0) {
			inotify_rm_watch(ev_inotify, j->wd[i]);
			j->wd[i] = -1;
		}
	if (j->pidfd >= 0) {
		epoll_ctl(ev_epoll, EPOLL_CTL_DEL, j->pidfd, NULL);
		close(j->pidfd);
		j->pidfd = -1;
	}
}

/* Caller holds j->lock: watch a running supervisor. */
static int job_watch_locked(struct job *j)
{
	static const char *files[] = { "stdout", "stderr" };
	struct epoll_event ev = { .events = EPOLLIN };

	j->pidfd = pidfd_open(j->sup_pid, 0);
	if (j->pidfd < 0)
		return -1;
	ev.data.ptr = j;
	if (epoll_ctl(ev_epoll, EPOLL_CTL_ADD, j->pidfd, &ev))
		return -1;
	for (int i = 0; i < 2; i++) {
		struct buf p = BUF_INIT(BUF_CAP_PATH);
		if (!job_path(j, files[i], &p)) {
			int fd = open(p.ptr, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
			if (fd >= 0)
				close(fd);
			j->wd[i] = inotify_add_watch(ev_inotify, p.ptr, IN_MODIFY | IN_CLOSE_WRITE);
		}
		buf_free(&p);
	}
	return 0;
}

static void job_load_state(struct job *j)
{
	json_t *sup;

	if (job_file_exists(j, "result")) {
		job_take_result_locked(j);
		return;
	}
	sup = job_read_json(j, "supervisor");
	if (sup) {
		pid_t pid = (pid_t)json_integer_value(json_object_get(sup, "pid"));
		unsigned long long start = (unsigned long long)json_integer_value(json_object_get(sup, "start"));
		json_decref(sup);
		if (pid > 0 && util_proc_starttime(pid) == start) {
			j->sup_pid = pid;
			job_set_running_locked(j, true);
			j->state = J_RUNNING;
			if (job_watch_locked(j) == 0)
				return;
		}
		job_take_result_locked(j); /* re-check: it may have just finished */
		return;
	}
	j->state = job_file_exists(j, "cmd") ? J_LOST : J_CREATED;
	if (j->state == J_LOST)
		job_take_result_locked(j);
}

/* ---- registry ----------------------------------------------------------------------- */

static struct job *job_find_locked(const char *dir)
{
	for (struct job *j = jobs; j; j = j->next)
		if (!strcmp(j->dir, dir))
			return j;
	return NULL;
}

static struct job *job_new(struct view *v, const char *name, const char *dir)
{
	struct job *j = calloc(1, sizeof(*j));

	if (!j || !(j->dir = strdup(dir))) {
		free(j);
		return NULL;
	}
	j->refs = 1; /* the registry's */
	snprintf(j->name, sizeof(j->name), "%s", name);
	snprintf(j->scope, sizeof(j->scope), "%s/%s/jobs/%s", v->sbx->user, v->sbx->thread, name);
	j->sbx = v->sbx;
	pool_get(v->sbx);
	j->pidfd = -1;
	j->wd[0] = j->wd[1] = -1;
	pthread_mutex_init(&j->lock, NULL);
	return j;
}

struct job *jobs_get(struct view *v, const char *name)
{
	struct buf dir = BUF_INIT(BUF_CAP_PATH);
	struct stat st;
	struct job *j = NULL;

	if (!names_valid(name) || buf_addf(&dir, "%s/%s", v->jobs_dir, name))
		goto out;
	pthread_mutex_lock(&jobs_lock);
	j = job_find_locked(dir.ptr);
	if (!j && stat(dir.ptr, &st) == 0 && S_ISDIR(st.st_mode) && (j = job_new(v, name, dir.ptr))) {
		pthread_mutex_lock(&j->lock);
		job_load_state(j);
		pthread_mutex_unlock(&j->lock);
		j->next = jobs;
		jobs = j;
	}
	if (j)
		jobs_get_ref(j);
	pthread_mutex_unlock(&jobs_lock);
out:
	buf_free(&dir);
	return j;
}

int jobs_mkdir(struct view *v, const char *name)
{
	struct buf dir = BUF_INIT(BUF_CAP_PATH);
	int err = 0;

	if (buf_addf(&dir, "%s/%s", v->jobs_dir, name)) {
		buf_free(&dir);
		return ENAMETOOLONG;
	}
	if (util_mkdir_p(v->jobs_dir, 0700) || mkdir(dir.ptr, 0700))
		err = errno;
	else
		log_info(v->sbx->token, "job slot %s created", name);
	buf_free(&dir);
	return err;
}

int jobs_rmdir(struct view *v, const char *name)
{
	struct job *j = jobs_get(v, name), **pp;
	int err = 0;

	if (!j)
		return ENOENT;
	pthread_mutex_lock(&jobs_lock);
	pthread_mutex_lock(&j->lock);
	if (j->state == J_RUNNING || j->state == J_STARTING) {
		err = EBUSY;
		log_warn(j->scope, "rmdir refused: the job is running");
	} else {
		for (pp = &jobs; *pp; pp = &(*pp)->next)
			if (*pp == j) {
				*pp = j->next;
				break;
			}
		j->state = J_FAILED; /* any open handle sees an ended job */
		if (util_rm_rf(j->dir))
			log_warn(j->scope, "removing the job directory: %s", strerror(errno));
	}
	pthread_mutex_unlock(&j->lock);
	pthread_mutex_unlock(&jobs_lock);
	if (!err) {
		view_drop_job(v, j);
		jobs_put(j); /* the registry's reference */
	}
	jobs_put(j);
	return err;
}

int jobs_list(struct view *v, void (*fn)(const char *name, void *arg), void *arg)
{
	DIR *d = opendir(v->jobs_dir);
	struct dirent *e;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		if (names_valid(e->d_name) && e->d_type == DT_DIR)
			fn(e->d_name, arg);
	closedir(d);
	return 0;
}

/* ---- reads that may wait -------------------------------------------------------------- */

static void on_interrupt(fuse_req_t req, void *data)
{
	struct waiter *w = data;

	(void)req;
	w->interrupted = 1;
	kick();
}

/* Try to answer a read now.  Returns true when it replied. */
static bool job_try_read(fuse_req_t req, struct job *j, int which, size_t size, off_t off, enum job_state st)
{
	if (which == JF_EXIT) {
		char text[32];
		json_t *r;
		int len, code = 255;

		if (!job_ended(st))
			return false;
		r = job_read_json(j, "result");
		if (r)
			code = (int)json_integer_value(json_object_get(r, "exit"));
		json_decref(r);
		len = snprintf(text, sizeof(text), "%d\n", code);
		if (off >= len)
			fuse_reply_buf(req, NULL, 0);
		else
			fuse_reply_buf(req, text + off, (size_t)len - (size_t)off < size ? (size_t)len - (size_t)off : size);
		return true;
	}
	{
		struct buf p = BUF_INIT(BUF_CAP_PATH);
		struct stat sb;
		int fd = -1;

		if (!job_path(j, which == JF_STDOUT ? "stdout" : "stderr", &p))
			fd = open(p.ptr, O_RDONLY | O_CLOEXEC);
		buf_free(&p);
		if (fd < 0) {
			if (errno != ENOENT)
				fuse_reply_err(req, errno);
			else if (job_ended(st))
				fuse_reply_buf(req, NULL, 0);
			else
				return false;
			return true;
		}
		if (fstat(fd, &sb)) {
			fuse_reply_err(req, errno);
		} else if (off < sb.st_size) {
			/* straight from the output file (splice when the kernel can):
			 * no copy of the output passes through daemon memory */
			size_t n = (size_t)(sb.st_size - off) < size ? (size_t)(sb.st_size - off) : size;
			struct fuse_bufvec bv = FUSE_BUFVEC_INIT(n);
			bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
			bv.buf[0].fd = fd;
			bv.buf[0].pos = off;
			fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
		} else if (job_ended(st)) {
			fuse_reply_buf(req, NULL, 0);
		} else {
			close(fd);
			return false;
		}
		close(fd);
		return true;
	}
}

static void job_park(fuse_req_t req, struct job *j, int which, size_t size, off_t off)
{
	struct waiter *w = calloc(1, sizeof(*w));

	if (!w)
		return (void)fuse_reply_err(req, ENOMEM);
	w->req = req;
	w->job = j;
	w->which = which;
	w->size = size;
	w->off = off;
	jobs_get_ref(j);
	pthread_mutex_lock(&j->lock);
	w->next = j->waiters;
	j->waiters = w;
	pthread_mutex_unlock(&j->lock);
	fuse_req_interrupt_func(req, on_interrupt, w);
	pthread_mutex_lock(&j->lock);
	w->armed = true;
	pthread_mutex_unlock(&j->lock);
	kick(); /* the state may have changed before we were armed */
}

/* Event thread: answer every armed waiter of j that can be answered. */
static void job_service(struct job *j)
{
	struct waiter *claimed = NULL, **pp, *w;
	enum job_state st;

	pthread_mutex_lock(&j->lock);
	st = j->state;
	for (pp = &j->waiters; (w = *pp);) {
		if (w->armed) {
			*pp = w->next;
			w->next = claimed;
			claimed = w;
		} else {
			pp = &w->next;
		}
	}
	pthread_mutex_unlock(&j->lock);
	while ((w = claimed)) {
		claimed = w->next;
		fuse_req_interrupt_func(w->req, NULL, NULL);
		if (w->interrupted) {
			fuse_reply_err(w->req, EINTR);
		} else if (!job_try_read(w->req, j, w->which, w->size, w->off, st)) {
			/* still nothing: park again (re-arm keeps the order simple) */
			pthread_mutex_lock(&j->lock);
			w->armed = false;
			w->next = j->waiters;
			j->waiters = w;
			pthread_mutex_unlock(&j->lock);
			fuse_req_interrupt_func(w->req, on_interrupt, w);
			pthread_mutex_lock(&j->lock);
			w->armed = true;
			pthread_mutex_unlock(&j->lock);
			if (w->interrupted)
				kick();
			continue;
		}
		jobs_put(w->job);
		free(w);
	}
}

static void job_notify_polls(struct job *j)
{
	struct pollent *p;

	pthread_mutex_lock(&j->lock);
	p = j->polls;
	j->polls = NULL;
	pthread_mutex_unlock(&j->lock);
	while (p) {
		struct pollent *next = p->next;
		fuse_lowlevel_notify_poll(p->ph);
		fuse_pollhandle_destroy(p->ph);
		free(p);
		p = next;
	}
}

/* ---- the event thread ------------------------------------------------------------------ */

static void job_on_exit(struct job *j)
{
	pthread_mutex_lock(&j->lock);
	if (j->our_child)
		waitpid(j->sup_pid, NULL, WNOHANG);
	job_unwatch_locked(j);
	job_take_result_locked(j);
	log_info(j->scope, "job ended: %s", job_state_names[j->state]);
	pthread_mutex_unlock(&j->lock);
	view_inval_attrs(j->sbx);
}

static void service_all(void)
{
	struct job *list[256];
	int n = 0;
	bool more;

	do {
		more = false;
		n = 0;
		pthread_mutex_lock(&jobs_lock);
		for (struct job *j = jobs; j; j = j->next) {
			if (!j->waiters && !j->polls)
				continue;
			if (n == 256) {
				more = true;
				break;
			}
			jobs_get_ref(j);
			list[n++] = j;
		}
		pthread_mutex_unlock(&jobs_lock);
		for (int i = 0; i < n; i++) {
			job_service(list[i]);
			job_notify_polls(list[i]);
			jobs_put(list[i]);
		}
	} while (more);
}

static void escalate_kills(uint64_t now, int *timeout_ms)
{
	struct job *due[64];
	int n = 0;

	pthread_mutex_lock(&jobs_lock);
	for (struct job *j = jobs; j && n < 64; j = j->next) {
		pthread_mutex_lock(&j->lock);
		if (j->kill_deadline_ms) {
			if (j->kill_deadline_ms <= now) {
				j->kill_deadline_ms = 0;
				jobs_get_ref(j);
				due[n++] = j;
			} else if (*timeout_ms < 0 || (int)(j->kill_deadline_ms - now) < *timeout_ms) {
				*timeout_ms = (int)(j->kill_deadline_ms - now);
			}
		}
		pthread_mutex_unlock(&j->lock);
	}
	pthread_mutex_unlock(&jobs_lock);
	for (int i = 0; i < n; i++) {
		log_info(due[i]->scope, "kill: SIGKILL to whatever of the job runs %d ms after SIGTERM", JOB_KILL_GRACE_MS);
		pool_exec_signal(due[i]->sbx, due[i]->dir, SIGKILL);
		jobs_put(due[i]);
	}
}

static void *ev_main(void *arg)
{
	struct epoll_event evs[32];
	char ibuf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

	(void)arg;
	while (!ev_stop) {
		int timeout = -1, n;

		escalate_kills(util_now_ms(), &timeout);
		n = epoll_wait(ev_epoll, evs, 32, timeout);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == &ev_kick) {
				uint64_t v;
				if (read(ev_kick, &v, sizeof(v)) < 0 && errno != EAGAIN)
					log_warn("jobs", "eventfd: %s", strerror(errno));
			} else if (evs[i].data.ptr == &ev_inotify) {
				/* an output file grew: every waiting reader re-tries below */
				while (read(ev_inotify, ibuf, sizeof(ibuf)) > 0)
					;
			} else {
				job_on_exit(evs[i].data.ptr);
			}
		}
		service_all();
	}
	return NULL;
}

int jobs_init(void)
{
	struct epoll_event ev = { .events = EPOLLIN };

	ev_epoll = epoll_create1(EPOLL_CLOEXEC);
	ev_inotify = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	ev_kick = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ev_epoll < 0 || ev_inotify < 0 || ev_kick < 0)
		return -1;
	ev.data.ptr = &ev_kick;
	if (epoll_ctl(ev_epoll, EPOLL_CTL_ADD, ev_kick, &ev))
		return -1;
	ev.data.ptr = &ev_inotify;
	if (epoll_ctl(ev_epoll, EPOLL_CTL_ADD, ev_inotify, &ev))
		return -1;
	return pthread_create(&ev_thread, NULL, ev_main, NULL) ? -1 : 0;
}

void jobs_shutdown(void)
{
	struct job *j;

	if (ev_epoll < 0)
		return;
	ev_stop = 1;
	kick();
	pthread_join(ev_thread, NULL);
	/* Answer every parked request: the session is ending. */
	pthread_mutex_lock(&jobs_lock);
	while ((j = jobs)) {
		struct waiter *w;
		jobs = j->next;
		pthread_mutex_lock(&j->lock);
		while ((w = j->waiters)) {
			j->waiters = w->next;
			fuse_reply_err(w->req, EINTR);
			jobs_put(w->job);
			free(w);
		}
		job_unwatch_locked(j);
		pthread_mutex_unlock(&j->lock);
		jobs_put(j);
	}
	pthread_mutex_unlock(&jobs_lock);
}

/* ---- file operations ---------------------------------------------------------------------- */

static json_t *jget(json_t *o, const char *key)
{
	json_t *v = o ? json_object_get(o, key) : NULL;

	return v ? json_incref(v) : json_null();
}

static int job_status_json(struct job *j, struct buf *out)
{
	struct stat so, se;
	struct buf p = BUF_INIT(BUF_CAP_PATH), t = BUF_INIT(64);
	json_t *o, *r, *started, *cmd, *pgid = json_null();
	enum job_state st;

	pthread_mutex_lock(&j->lock);
	st = j->state;
	pthread_mutex_unlock(&j->lock);
	r = job_read_json(j, "result");
	started = job_read_json(j, "supervisor");
	cmd = job_read_json(j, "cmd.json");
	if (!job_path(j, "pgid", &p) && !util_read_file(p.ptr, &t) && t.len) {
		json_decref(pgid);
		pgid = json_integer(strtol(buf_str(&t), NULL, 10));
	}
	buf_reset(&p);
	if (job_path(j, "stdout", &p) || stat(p.ptr, &so))
		so.st_size = 0;
	buf_reset(&p);
	if (job_path(j, "stderr", &p) || stat(p.ptr, &se))
		se.st_size = 0;
	buf_free(&p);
	buf_free(&t);
	o = json_pack("{s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:I,s:I,s:o}", "name", j->name, "state", job_state_names[st],
		"cmd", jget(cmd, "cmd"), "pid", pgid, "started_at", jget(started, "started_at"), "ended_at",
		jget(r, "ended_at"), "exit", jget(r, "exit"), "signal", jget(r, "signal"), "stdout_bytes",
		(json_int_t)so.st_size, "stderr_bytes", (json_int_t)se.st_size, "timeout", jget(cmd, "timeout"));
	json_decref(r);
	json_decref(started);
	json_decref(cmd);
	return json_to_buf(o, out);
}

/* What a stat of a job file shows as st_size.  Reads use direct I/O, so
 * the size never limits them; it is there for tools that trust it: stdout
 * and stderr have the bytes so far (so `tail -f` never sees them shrink),
 * status, cmd and exit the length a read would return now, env and stdin
 * what was written; ctl 0.  The attribute timeout of job files is 0. */
off_t jobs_file_size(struct node *n)
{
	static const char *host[JF_COUNT] = { [JF_ENV] = "env", [JF_STDIN] = "stdin", [JF_STDOUT] = "stdout",
		[JF_STDERR] = "stderr" };
	struct buf b = BUF_INIT(BUF_CAP_JSON);
	struct job *j = n->job;
	enum job_state st;
	struct stat sb;
	off_t size = 0;

	if (!j || n->which < 0 || n->which >= JF_COUNT)
		return 0;
	if (host[n->which]) {
		if (!job_path(j, host[n->which], &b) && !stat(b.ptr, &sb))
			size = sb.st_size;
	} else if (n->which == JF_STATUS) {
		if (!job_status_json(j, &b))
			size = (off_t)b.len;
	} else if (n->which == JF_CMD) {
		json_t *c = job_read_json(j, "cmd.json");
		const char *s = c ? json_string_value(json_object_get(c, "cmd")) : NULL;
		size = s ? (off_t)strlen(s) + 1 : 0;
		json_decref(c);
	} else if (n->which == JF_EXIT) {
		pthread_mutex_lock(&j->lock);
		st = j->state;
		pthread_mutex_unlock(&j->lock);
		if (job_ended(st)) {
			json_t *r = job_read_json(j, "result");
			int code = r ? (int)json_integer_value(json_object_get(r, "exit")) : 255;
			size = snprintf(NULL, 0, "%d\n", code);
			json_decref(r);
		}
	}
	buf_free(&b);
	return size;
}

static void jh_clean(void *p)
{
	struct jh *h = p;

	if (h->fd >= 0)
		close(h->fd);
	buf_free(&h->snap);
}

void jobs_open(fuse_req_t req, struct node *n, struct fuse_file_info *fi)
{
	struct job *j = n->job;
	int acc = fi->flags & O_ACCMODE;
	int mode = jobs_file_mode(n->which);
	struct jh *h;

	if (!j || !n->linked)
		return (void)fuse_reply_err(req, ENOENT);
	if ((acc != O_RDONLY && !(mode & 0200)) || (acc != O_WRONLY && !(mode & 0400)))
		return (void)fuse_reply_err(req, n->which == JF_CMD || acc == O_RDONLY ? EACCES : EPERM);
	h = fs_handle_alloc(sizeof(*h), jh_clean);
	if (!h)
		return (void)fuse_reply_err(req, ENOMEM);
	h->fd = -1;
	buf_init(&h->snap, BUF_CAP_JSON);
	if (n->which == JF_STATUS && job_status_json(j, &h->snap)) {
		fs_handle_discard(h);
		return (void)fuse_reply_err(req, EIO);
	}
	if (n->which == JF_CMD && acc == O_RDONLY) {
		json_t *c = job_read_json(j, "cmd.json");
		const char *s = c ? json_string_value(json_object_get(c, "cmd")) : NULL;
		if (s && (buf_adds(&h->snap, s) || buf_adds(&h->snap, "\n")))
			buf_free(&h->snap);
		json_decref(c);
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1;
	fi->nonseekable = n->which == JF_STDIN ? 1 : 0;
	fuse_reply_open(req, fi);
}


void jobs_release(fuse_req_t req, struct node *n, struct fuse_file_info *fi)
{
	(void)n;
	fs_handle_retire((void *)(uintptr_t)fi->fh); /* see ns.c: a late READ may still use it */
	fuse_reply_err(req, 0);
}

void jobs_read(fuse_req_t req, struct node *n, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct jh *h = (struct jh *)(uintptr_t)fi->fh;
	struct job *j = n->job;
	enum job_state st;

	if (n->which == JF_STATUS || n->which == JF_CMD) {
		if ((size_t)off >= h->snap.len)
			return (void)fuse_reply_buf(req, NULL, 0);
		return (void)fuse_reply_buf(req, h->snap.ptr + off,
			h->snap.len - (size_t)off < size ? h->snap.len - (size_t)off : size);
	}
	if (n->which != JF_STDOUT && n->which != JF_STDERR && n->which != JF_EXIT)
		return (void)fuse_reply_err(req, EINVAL);
	pthread_mutex_lock(&j->lock);
	st = j->state;
	pthread_mutex_unlock(&j->lock);
	if (n->which != JF_EXIT && off + (off_t)size > h->pos)
		h->pos = off;
	if (st == J_CREATED && n->which == JF_EXIT && (fi->flags & O_NONBLOCK))
		return (void)fuse_reply_err(req, EAGAIN);
	if (job_try_read(req, j, n->which, size, off, st))
		return;
	if (fi->flags & O_NONBLOCK)
		return (void)fuse_reply_err(req, EAGAIN);
	job_park(req, j, n->which, size, off);
}

void jobs_poll(fuse_req_t req, struct node *n, struct fuse_file_info *fi, struct fuse_pollhandle *ph)
{
	struct jh *h = (struct jh *)(uintptr_t)fi->fh;
	struct job *j = n->job;
	unsigned revents = 0;
	enum job_state st;

	pthread_mutex_lock(&j->lock);
	st = j->state;
	pthread_mutex_unlock(&j->lock);
	if (n->which == JF_EXIT) {
		if (job_ended(st))
			revents = POLLIN | POLLRDNORM;
	} else if (n->which == JF_STDOUT || n->which == JF_STDERR) {
		struct buf p = BUF_INIT(BUF_CAP_PATH);
		struct stat sb;
		if (job_ended(st) ||
		    (!job_path(j, n->which == JF_STDOUT ? "stdout" : "stderr", &p) && !stat(p.ptr, &sb) && sb.st_size > h->pos))
			revents = POLLIN | POLLRDNORM;
		buf_free(&p);
	} else {
		revents = (jobs_file_mode(n->which) & 0400 ? POLLIN | POLLRDNORM : 0) |
			  (jobs_file_mode(n->which) & 0200 ? POLLOUT | POLLWRNORM : 0);
	}
	if (ph) {
		struct pollent *pe = calloc(1, sizeof(*pe));
		if (!pe || revents) {
			if (revents)
				fuse_lowlevel_notify_poll(ph);
			fuse_pollhandle_destroy(ph);
			free(pe);
		} else {
			pe->ph = ph;
			pthread_mutex_lock(&j->lock);
			pe->next = j->polls;
			j->polls = pe;
			pthread_mutex_unlock(&j->lock);
		}
	}
	fuse_reply_poll(req, revents);
}

static int job_env_valid(struct job *j, const char *text)
{
	const char *line = text;

	while (*line) {
		const char *nl = strchr(line, '\n'), *eq = strchr(line, '=');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char key[256];

		if (len == 0) {
			line += nl ? 1 : 0;
			if (!nl)
				break;
			continue;
		}
		if (!eq || eq > line + len || (size_t)(eq - line) >= sizeof(key)) {
			log_warn(j->scope, "env: line %.*s is not KEY=VALUE", (int)(len > 80 ? 80 : len), line);
			return EINVAL;
		}
		memcpy(key, line, (size_t)(eq - line));
		key[eq - line] = '\0';
		if (!names_env_key_valid(key)) {
			log_warn(j->scope, "env: key '%s' is not a valid POSIX environment variable name (must match ^[A-Za-z_][A-Za-z0-9_]*$)", key);
			return EINVAL;
		}
		line += len + (nl ? 1 : 0);
	}
	return 0;
}

static int job_append(struct job *j, const char *file, const char *data, size_t len, size_t max)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	struct stat st;
	int fd = -1, err = 0;

	if (job_path(j, file, &p))
		err = ENAMETOOLONG;
	else if ((fd = open(p.ptr, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) < 0)
		err = errno;
	else if (max && !fstat(fd, &st) && (size_t)st.st_size + len > max)
		err = EFBIG;
	else if (write(fd, data, len) != (ssize_t)len)
		err = errno ? errno : EIO;
	if (fd >= 0)
		close(fd);
	buf_free(&p);
	return err;
}

/* Build the job's environment: a fixed base, then the sandbox's configured
 * environment, then the job's env file (later wins). */
static char **job_environ(struct job *j, struct sbx_config *cfg)
{
	static const char *base[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/mnt/user-data/workspace", "LANG=C.UTF-8", "TMPDIR=/tmp", NULL };
	struct buf p = BUF_INIT(BUF_CAP_PATH), text = BUF_INIT(JOB_ENV_MAX);
	size_t cap = 8 + cfg->n_env, n = 0;
	char **env;

	if (!job_path(j, "env", &p) && !util_read_file(p.ptr, &text))
		for (const char *s = buf_str(&text); *s; s++)
			cap += *s == '\n';
	cap += 1;
	env = calloc(cap + 1, sizeof(*env));
	if (!env)
		goto out;
	for (int i = 0; base[i]; i++)
		env[n++] = strdup(base[i]);
	for (size_t i = 0; i < cfg->n_env; i++) {
		struct buf kv = BUF_INIT(BUF_CAP_CTL);
		if (!buf_addf(&kv, "%s=%s", cfg->env[i].key, cfg->env[i].value))
			env[n++] = buf_take(&kv, NULL);
	}
	for (char *line = text.ptr; line && *line && n < cap;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (*line)
			env[n++] = strdup(line);
		line = nl ? nl + 1 : NULL;
	}
	env[n] = NULL;
out:
	buf_free(&p);
	buf_free(&text);
	return env;
}

static void free_environ(char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

static int job_start(struct job *j, const char *cmdtext)
{
	struct sbx_config *cfg = pool_sbx_config(j->sbx);
	struct sbx_exec_spec spec = { 0 };
	char **env = NULL, *cmd = NULL, *text = NULL;
	json_t *o;
	pid_t pid = 0;
	double started;
	int err = 0;

	if (!cfg)
		return ENOENT;
	cmd = strdup(cmdtext);
	if (!cmd) {
		err = ENOMEM;
		goto out;
	}
	for (size_t l = strlen(cmd); l && (cmd[l - 1] == '\n' || cmd[l - 1] == '\r'); l--)
		cmd[l - 1] = '\0';
	if (!*cmd) {
		log_warn(j->scope, "cmd: empty command");
		err = EINVAL;
		goto out;
	}
	env = job_environ(j, cfg);
	o = json_pack("{s:s,s:i,s:f}", "cmd", cmd, "timeout", (int)cfg->bash_command_timeout, "created_at",
		util_wall_now());
	text = o ? json_dumps(o, JSON_INDENT(1)) : NULL;
	json_decref(o);
	if (!env || !text) {
		err = ENOMEM;
		goto out;
	}
	job_write_file(j, "cmd.json", text, strlen(text));
	spec.cmd = cmd;
	spec.env = env;
	spec.job_dir = j->dir;
	spec.job_name = j->name;
	spec.timeout = cfg->bash_command_timeout;
	started = util_wall_now(); /* before: the job may end before pool_exec returns */
	err = pool_exec(j->sbx, &spec, &pid);
	if (err) {
		struct buf p = BUF_INIT(BUF_CAP_PATH);
		if (!job_path(j, "cmd.json", &p))
			unlink(p.ptr);
		buf_free(&p);
		log_err(j->scope, "cannot start the job: %s", strerror(err));
		goto out;
	}
	free(text);
	o = json_pack("{s:i,s:I,s:f}", "pid", (int)pid, "start", (json_int_t)util_proc_starttime(pid), "started_at",
		started);
	text = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (text)
		job_write_file(j, "supervisor", text, strlen(text));
	pthread_mutex_lock(&j->lock);
	j->sup_pid = pid;
	j->our_child = true;
	job_set_running_locked(j, true);
	j->state = J_RUNNING;
	if (job_watch_locked(j))
		log_warn(j->scope, "cannot watch the job: %s", strerror(errno));
	pthread_mutex_unlock(&j->lock);
	log_info(j->scope, "job started (supervisor pid %d)", (int)pid);
out:
	free(text);
	free(cmd);
	free_environ(env);
	config_put(cfg);
	return err;
}

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

static int job_ctl(struct job *j, char *text)
{
	char *arg;
	int sig = SIGTERM, err;
	enum job_state st;

	for (size_t l = strlen(text); l && (text[l - 1] == '\n' || text[l - 1] == ' '); l--)
		text[l - 1] = '\0';
	if (strncmp(text, "kill", 4) || (text[4] && text[4] != ' ')) {
		log_warn(j->scope, "ctl: unknown command '%.40s' (expected: kill [SIGNAL])", text);
		return EINVAL;
	}
	arg = text + 4;
	while (*arg == ' ')
		arg++;
	if (job_parse_signal(arg, &sig)) {
		log_warn(j->scope, "ctl: unknown signal '%.40s'", arg);
		return EINVAL;
	}
	pthread_mutex_lock(&j->lock);
	st = j->state;
	pthread_mutex_unlock(&j->lock);
	if (st != J_RUNNING) {
		log_warn(j->scope, "ctl: kill refused: the job is %s", job_state_names[st]);
		return ESRCH;
	}
	job_write_file(j, "kill-requested", arg, strlen(arg));
	err = pool_exec_signal(j->sbx, j->dir, sig);
	if (err)
		return err;
	log_info(j->scope, "signal %d sent%s", sig, !*arg ? ", SIGKILL follows if it keeps running" : "");
	if (!*arg) {
		pthread_mutex_lock(&j->lock);
		j->kill_deadline_ms = util_now_ms() + JOB_KILL_GRACE_MS;
		pthread_mutex_unlock(&j->lock);
		kick();
	}
	return 0;
}

void jobs_write(fuse_req_t req, struct node *n, const char *data, size_t size, struct fuse_file_info *fi)
{
	struct job *j = n->job;
	enum job_state st;
	int err = 0;

	(void)fi;
	pthread_mutex_lock(&j->lock);
	st = j->state;
	if (n->which == JF_CMD && st == J_CREATED)
		j->state = J_STARTING; /* claim: a concurrent second write is EBUSY */
	pthread_mutex_unlock(&j->lock);
	switch (n->which) {
	case JF_CMD:
		if (st != J_CREATED) {
			log_warn(j->scope, "cmd: the job has already been started (%s)", job_state_names[st]);
			err = EBUSY;
			break;
		}
		if (memchr(data, '\0', size)) {
			err = EINVAL;
		} else {
			err = job_start(j, data);
		}
		if (err) {
			pthread_mutex_lock(&j->lock);
			j->state = J_CREATED;
			pthread_mutex_unlock(&j->lock);
		}
		break;
	case JF_ENV:
	case JF_STDIN:
		if (st != J_CREATED) {
			log_warn(j->scope, "%s: the job has already been started", n->which == JF_ENV ? "env" : "stdin");
			err = EBUSY;
		} else if (n->which == JF_ENV) {
			err = memchr(data, '\0', size) ? EINVAL : job_env_valid(j, data);
			if (!err)
				err = job_append(j, "env", data, size, JOB_ENV_MAX);
			if (!err && size && data[size - 1] != '\n')
				err = job_append(j, "env", "\n", 1, 0);
		} else {
			err = job_append(j, "stdin", data, size, 0);
		}
		break;
	case JF_CTL: {
		char *text = strndup(data, size);
		err = text ? job_ctl(j, text) : ENOMEM;
		free(text);
		break;
	}
	default:
		err = EPERM;
	}
	if (err)
		return (void)fuse_reply_err(req, err);
	fuse_reply_write(req, size);
}
