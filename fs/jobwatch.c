/* SPDX-License-Identifier: MIT */
/*
 * jobwatch.c - the jobs' event thread: one epoll over the running jobs'
 * exec fds (a pidfd of the local supervisor, an eventfd a provider's pump
 * signals), inotify on their stdout and stderr (readers parked at end of
 * file are woken when output grows), and the kill escalation's deadlines
 * (SIGKILL JOB_KILL_GRACE_MS after a SIGTERM).  The state machine it drives
 * is job.c's.
 *
 * Why one thread: it only waits (epoll) and does short work per event; the
 * slow calls (start, reattach) run on work threads.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/util.h"
#include "job_int.h"

#define WD_BUCKETS 256

static struct job *wd_map[WD_BUCKETS][2]; /* protected by jobs_lock: inotify wd -> job */
static int ev_epoll = -1, ev_inotify = -1, ev_kick = -1;
static pthread_t ev_thread;
static bool ev_running;
static atomic_int ev_stop;
static void (*job_on_end)(struct sbx *s);

void jobwatch_kick(void)
{
	uint64_t one = 1;

	if (write(ev_kick, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("jobs", "cannot wake the event thread: %s", strerror(errno));
}


static unsigned wd_hash(int wd)
{
	return (unsigned)wd % WD_BUCKETS;
}

/* Caller holds jobs_lock. */
static void wd_map_add_locked(struct job *j, int i)
{
	unsigned h = wd_hash(j->wd[i]);

	lock_assert_held(&jobs_lock);
	j->wd_next[i] = wd_map[h][i];
	wd_map[h][i] = j;
}

/* Caller holds jobs_lock. */
static void wd_map_del_locked(struct job *j, int i)
{
	lock_assert_held(&jobs_lock);
	for (struct job **pp = &wd_map[wd_hash(j->wd[i])][i]; *pp; pp = &(*pp)->wd_next[i])
		if (*pp == j) {
			*pp = j->wd_next[i];
			return;
		}
}

int jobwatch_add(struct job *j)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = j };
	int err = 0;

	lock_acquire(&jobs_lock);
	pthread_mutex_lock(&j->lock);
	for (int i = 0; i < 2; i++) {
		struct buf p = BUF_INIT(BUF_CAP_PATH);
		if (!job_path(j, job_stream_files[i], &p)) {
			int fd = open(p.ptr, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
			if (fd >= 0)
				close(fd);
			j->wd[i] = inotify_add_watch(ev_inotify, p.ptr, IN_MODIFY | IN_CLOSE_WRITE);
			if (j->wd[i] >= 0)
				wd_map_add_locked(j, i);
		}
		buf_free(&p);
	}
	job_ref(j); /* the epoll set's */
	if (!j->exec || epoll_ctl(ev_epoll, EPOLL_CTL_ADD, j->exec->fd, &ev)) {
		err = j->exec ? errno : ESRCH;
		__atomic_sub_fetch(&j->refs, 1, __ATOMIC_RELAXED); /* cannot be the last */
	} else {
		j->watched = true;
	}
	pthread_mutex_unlock(&j->lock);
	lock_release(&jobs_lock);
	return err;
}

void jobwatch_fail(struct job *j, int err)
{
	struct sbx_exec *x;
	char why[128];

	log_err(j->scope, "cannot watch the job (%s): ending it", strerror(err));
	lock_acquire(&jobs_lock);
	pthread_mutex_lock(&j->lock);
	jobwatch_unwatch_locked(j);
	x = j->exec;
	j->exec = NULL;
	pthread_mutex_unlock(&j->lock);
	lock_release(&jobs_lock);
	if (x) {
		sbx_exec_signal(x, SIGKILL);
		sbx_exec_finish(x);
		sbx_exec_put(x);
	}
	snprintf(why, sizeof(why), "the daemon could not watch the job: %s", strerror(err));
	job_record_end(j, "failed", why);
	pthread_mutex_lock(&j->lock);
	job_take_result_locked(j);
	pthread_mutex_unlock(&j->lock);
}

void jobwatch_unwatch_locked(struct job *j)
{
	lock_assert_held(&jobs_lock);
	for (int i = 0; i < 2; i++)
		if (j->wd[i] >= 0) {
			wd_map_del_locked(j, i);
			inotify_rm_watch(ev_inotify, j->wd[i]);
			j->wd[i] = -1;
		}
}

/* Event thread: the job's exec fd is readable: it has ended. */
static void job_on_exit(struct job *j)
{
	struct sbx_exec *x;
	bool drop;

	pthread_mutex_lock(&j->lock);
	x = j->exec;
	drop = j->watched;
	j->watched = false;
	if (x)
		epoll_ctl(ev_epoll, EPOLL_CTL_DEL, x->fd, NULL);
	pthread_mutex_unlock(&j->lock);
	if (x)
		sbx_exec_finish(x); /* reap, make sure a result exists */
	/* what the job changed must show before anyone can learn it has ended:
	 * before the result is taken (a read of exit that does not wait sees it
	 * from then on), not only before the waiting readers are woken */
	if (job_on_end)
		job_on_end(j->sbx);
	lock_acquire(&jobs_lock);
	pthread_mutex_lock(&j->lock);
	jobwatch_unwatch_locked(j);
	job_take_result_locked(j);
	if (!j->kill_deadline_ms) {
		j->exec = NULL; /* its reference is put below, outside the lock */
	} else {
		x = NULL; /* kept: the escalation still ends what the job left behind */
	}
	pthread_mutex_unlock(&j->lock);
	lock_release(&jobs_lock);
	log_info(j->scope, "job ended: %s", job_state_name(job_state(j)));
	sbx_exec_put(x);
	park_wake(&j->q);
	if (drop)
		job_put(j);
}

/* Event thread: output of one of the watched jobs grew. */
static void job_on_inotify(void)
{
	char ibuf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	struct job *woken[64];
	int n = 0;
	ssize_t len;

	while ((len = read(ev_inotify, ibuf, sizeof(ibuf))) > 0) {
		lock_acquire(&jobs_lock);
		for (char *p = ibuf; p < ibuf + len;) {
			struct inotify_event *e = (struct inotify_event *)p;
			for (int i = 0; i < 2 && n < 64; i++)
				for (struct job *j = wd_map[wd_hash(e->wd)][i]; j; j = j->wd_next[i])
					if (j->wd[i] == e->wd) {
						bool seen = false;
						for (int k = 0; k < n; k++)
							seen |= woken[k] == j;
						if (!seen) {
							job_ref(j);
							woken[n++] = j;
						}
					}
			p += sizeof(*e) + e->len;
		}
		lock_release(&jobs_lock);
		for (int k = 0; k < n; k++) {
			park_wake(&woken[k]->q);
			job_put(woken[k]);
		}
		n = 0;
	}
}

/* Event thread: send SIGKILL to jobs whose grace period is over; *timeout_ms
 * becomes the wait until the next deadline. */
static void job_escalate(uint64_t now, int *timeout_ms)
{
	struct job *due[64];
	int n = 0;

	lock_acquire(&jobs_lock);
	for (struct job *j = jobs; j && n < 64; j = j->next) {
		pthread_mutex_lock(&j->lock);
		if (j->kill_deadline_ms && j->kill_deadline_ms <= now) {
			j->kill_deadline_ms = 0;
			job_ref(j);
			due[n++] = j;
		} else if (j->kill_deadline_ms) {
			int left = (int)(j->kill_deadline_ms - now);
			if (*timeout_ms < 0 || left < *timeout_ms)
				*timeout_ms = left;
		}
		pthread_mutex_unlock(&j->lock);
	}
	lock_release(&jobs_lock);
	for (int i = 0; i < n; i++) {
		struct job *j = due[i];
		struct sbx_exec *x, *done = NULL;

		pthread_mutex_lock(&j->lock);
		x = j->exec;
		if (x)
			sbx_exec_get(x); /* signalled below, outside the lock */
		if (x && job_state_ended(j->state)) {
			done = x; /* the job ended during the grace period: its reference goes */
			j->exec = NULL;
		}
		pthread_mutex_unlock(&j->lock);
		if (x) {
			log_info(j->scope, "kill: SIGKILL to whatever of the job runs %d ms after SIGTERM",
				JOB_KILL_GRACE_MS);
			sbx_exec_signal(x, SIGKILL);
		}
		sbx_exec_put(x);
		sbx_exec_put(done);
		job_put(j);
	}
}

static void *jobwatch_main(void *arg)
{
	struct epoll_event evs[32];

	(void)arg;
	while (!atomic_load(&ev_stop)) {
		int timeout = -1, n;

		job_escalate(util_now_ms(), &timeout);
		n = epoll_wait(ev_epoll, evs, 32, timeout);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == &ev_kick) {
				uint64_t v;
				if (read(ev_kick, &v, sizeof(v)) < 0 && errno != EAGAIN)
					log_warn("jobs", "eventfd: %s", strerror(errno));
			} else if (evs[i].data.ptr == &ev_inotify) {
				job_on_inotify();
			} else {
				job_on_exit(evs[i].data.ptr);
			}
		}
	}
	return NULL;
}

int jobwatch_start(void (*on_end)(struct sbx *s))
{
	struct epoll_event ev = { .events = EPOLLIN };

	job_on_end = on_end;
	ev_epoll = epoll_create1(EPOLL_CLOEXEC);
	ev_inotify = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (ev_inotify < 0 && errno == EMFILE) {
		/* per-user, not per-process: every pasta of an open sandbox
		 * holds one of root's (docs/network.md) */
		log_err("job", "inotify_init1: %s: the user's inotify instances are used up "
			"(sysctl fs.inotify.max_user_instances)", strerror(errno));
		errno = EMFILE;
	}
	ev_kick = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ev_epoll < 0 || ev_inotify < 0 || ev_kick < 0)
		return errno;
	ev.data.ptr = &ev_kick;
	if (epoll_ctl(ev_epoll, EPOLL_CTL_ADD, ev_kick, &ev))
		return errno;
	ev.data.ptr = &ev_inotify;
	if (epoll_ctl(ev_epoll, EPOLL_CTL_ADD, ev_inotify, &ev))
		return errno;
	int err = pthread_create(&ev_thread, NULL, jobwatch_main, NULL);
	if (err)
		return err;
	ev_running = true;
	return 0;
}

void jobwatch_stop(void)
{
	if (!ev_running)
		return;
	atomic_store(&ev_stop, 1);
	jobwatch_kick();
	pthread_join(ev_thread, NULL);
	ev_running = false;
	atomic_store(&ev_stop, 0);
}

void jobwatch_release(void)
{
	for (int *fd = (int[]){ ev_epoll, ev_inotify, ev_kick }, i = 0; i < 3; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	ev_epoll = ev_inotify = ev_kick = -1;
}
