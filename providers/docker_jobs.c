/* SPDX-License-Identifier: MIT */
/*
 * docker_jobs.c - jobs in docker sandboxes (the exec slots of provider.h).
 *
 * A job runs under a supervisor inside the container (sbxfs-box, see
 * helpers/docker_box.c), as the sandbox uid, with the container's confinement.  The
 * daemon opens the job's files in its own root-only job directory (cmd,
 * environ, stdin, stdout, stderr and box-result) and passes the open files
 * to the supervisor over a unix socket inside the container's network
 * namespace:
 *
 *   docker.exec: init (default)  to the container's init, which forks the
 *                supervisor: one local round trip, no runc (a job starts in
 *                about a millisecond);
 *   docker.exec: engine          the supervisor is started through the
 *                Engine exec API (create, start, inspect: 50-100 ms of runc
 *                per job here) and connects to a socket the daemon listens
 *                on in the container's namespace; the daemon accepts only
 *                the peer whose pid is the exec's.
 *
 * Either way the supervisor's first message carries its host pid (the
 * kernel translates SCM_CREDENTIALS into the daemon's pid namespace); the
 * daemon watches it with a pidfd (the exec handle's pollable fd), records
 * pid and start time in job_dir/box.json for a later daemon, and hangs up.
 *
 * Output goes into job_dir/stdout and stderr through the passed fds, copied
 * there by the supervisor from the job's pipes (so it keeps arriving while
 * the daemon is down, and resources.output also holds for what the job
 * leaves running), the end into
 * job_dir/box-result; exec_finish and exec_reattach turn that into
 * job_dir/result with one checked decoder.  Nothing here opens a file the
 * sandbox can write.
 *
 * Signals come from the host: the daemon (root) walks the supervisor's
 * process tree (it is a child subreaper, so the tree holds every process
 * the job started, also those that left its process group) through
 * /proc/PID/task/TID/children and signals each process through a pidfd
 * after checking it is in the container's pid namespace, so a recycled pid
 * is never signalled.  The Engine API has no way to signal an exec.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "../common/buf.h"
#include "../common/json.h"
#include "../common/log.h"
#include "../common/netns.h"
#include "../common/util.h"
#include "docker_int.h"
#include "jobrun.h"
#include "provider_int.h"

#define DJOB_NFDS 6
#define DJOB_START_TIMEOUT_MS 10000
#define DJOB_RESULT_CAP 4096
#define DJOB_TREE_MAX 65536

struct djob {
	struct sbx_exec base; /* first: fd is a pidfd on the supervisor (or a signalled eventfd) */
	struct cbox *db;      /* referenced */
	char *job_dir;
	pid_t sup_pid;
	unsigned long long sup_start;
};

static struct djob *djob(struct sbx_exec *x)
{
	if (!x || x->prov != &provider_docker)
		abort(); /* a handle given to the wrong provider is a programming error */
	return (struct djob *)x;
}

static unsigned long long pidns_of(pid_t pid)
{
	char path[64];
	struct stat st;

	if (str_fmt(path, sizeof(path), "/proc/%d/ns/pid", (int)pid) || stat(path, &st))
		return 0;
	return (unsigned long long)st.st_ino;
}

/* ---- the result --------------------------------------------------------------------------- */

/* The supervisor's record of the job's end (job_dir/box-result, text of
 * len bytes; hostile: the container wrote it) checked, then job_dir/result.
 * true when a valid result is on disk. */
static bool djob_write_result(const char *job_dir, const char *text, size_t len, const char *scope)
{
	json_t *o = len ? json_loadb(text, len, 0, NULL) : NULL;
	const char *state = json_string_value(json_object_get(o, "state"));
	const char *reason = json_string_value(json_object_get(o, "reason"));
	json_t *ex = json_object_get(o, "exit"), *sig = json_object_get(o, "signal"), *at = json_object_get(o, "ended_at");
	bool ok = false;

	if (!state || (strcmp(state, "exited") && strcmp(state, "timed_out") && strcmp(state, "killed") &&
			      strcmp(state, "failed")) ||
	    !json_is_integer(ex) || json_integer_value(ex) < 0 || json_integer_value(ex) > 255 ||
	    !json_is_integer(sig) || json_integer_value(sig) < 0 || json_integer_value(sig) > 64 ||
	    (at && !json_is_number(at)) || (reason && strcmp(reason, "output limit"))) {
		if (o)
			log_warn(scope, "the job's supervisor reported no valid result");
		goto out;
	}
	state = jobrun_killed_state(job_dir, state, (int)json_integer_value(sig));
	ok = jobrun_result_at(job_dir, scope, state, (int)json_integer_value(ex), (int)json_integer_value(sig),
		at ? json_number_value(at) : util_wall_now(), reason);
out:
	json_decref(o);
	return ok;
}

/* job_dir/box-result -> job_dir/result (once: result wins when it exists). */
static void djob_collect(const char *job_dir, const char *scope)
{
	struct buf p = BUF_INIT(BUF_CAP_PATH), text = BUF_INIT(DJOB_RESULT_CAP);

	if (jobrun_file_exists(job_dir, "result"))
		goto out;
	if (buf_addf(&p, "%s/box-result", job_dir) || util_read_file(p.ptr, &text) ||
	    !djob_write_result(job_dir, buf_str(&text), text.len, scope))
		jobrun_lost(job_dir, scope, "the job's supervisor ended without recording a result");
out:
	buf_free(&p);
	buf_free(&text);
}

/* ---- talking to the box's init ---------------------------------------------------------------- */

static socklen_t abstract_addr(struct sockaddr_un *a, const char *name)
{
	size_t n = strlen(name);

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (n > sizeof(a->sun_path) - 2)
		n = sizeof(a->sun_path) - 2;
	memcpy(a->sun_path + 1, name, n);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* A SOCK_SEQPACKET socket made in the container's network namespace. */
static int box_socket(struct cbox *db)
{
	int ns = container_netns(db), s;

	if (ns < 0)
		return -1;
	s = netns_socket(ns, AF_UNIX, SOCK_SEQPACKET, 0);
	close(ns);
	return s;
}

static int box_connect(struct cbox *db)
{
	struct sockaddr_un a;
	socklen_t len = abstract_addr(&a, DOCKER_BOX_SOCKET);
	int s = box_socket(db), one = 1, saved;

	if (s < 0)
		return -1;
	if (setsockopt(s, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) || connect(s, (struct sockaddr *)&a, len)) {
		saved = errno;
		close(s);
		errno = saved;
		return -1;
	}
	return s;
}

/* One message, waiting up to timeout_ms; the sender's host pid in *pid when
 * non-NULL.  Its length, or -1 (ETIMEDOUT, or the peer closed: EPIPE). */
static ssize_t recv_reply(int s, char *msg, size_t len, pid_t *pid, int timeout_ms)
{
	char cbuf[CMSG_SPACE(sizeof(struct ucred))];
	struct iovec iov = { .iov_base = msg, .iov_len = len - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	struct pollfd p = { .fd = s, .events = POLLIN };
	ssize_t n;
	int r;

	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r == 0) {
		errno = ETIMEDOUT;
		return -1;
	}
	n = recvmsg(s, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n <= 0) {
		errno = n == 0 ? EPIPE : errno;
		return -1;
	}
	msg[n] = '\0';
	if (pid) {
		*pid = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
				struct ucred u;
				memcpy(&u, CMSG_DATA(c), sizeof(u));
				*pid = u.pid;
			}
	}
	return n;
}

enum sbx_err djobs_ask_init(struct cbox *db, const char *req, char *reply, size_t len, int timeout_ms)
{
	int s = box_connect(db);
	enum sbx_err e = SBX_ERR_IO;

	reply[0] = '\0';
	if (s < 0)
		return errno == ESRCH ? SBX_ERR_GONE : SBX_ERR_IO;
	if (send(s, req, strlen(req), MSG_NOSIGNAL) >= 0 && recv_reply(s, reply, len, NULL, timeout_ms) > 0)
		e = SBX_OK;
	close(s);
	return e;
}

enum sbx_err djobs_kill_all(struct sbx_box *b)
{
	struct cbox *db = &dockbox(b)->c;
	char reply[32];
	enum sbx_err e = djobs_ask_init(db, "killall", reply, sizeof(reply), 30000);

	if (!e && strncmp(reply, "done", 4))
		e = SBX_ERR_IO;
	if (!e)
		log_info(db->name, "kill: %s processes ended", reply + 5);
	return e;
}

/* ---- the job's files, passed to the supervisor ---------------------------------------------- */

struct job_fds {
	int fd[DJOB_NFDS]; /* cmd, environ, stdin, stdout, stderr, box-result */
};

static void job_fds_close(struct job_fds *f)
{
	for (int i = 0; i < DJOB_NFDS; i++)
		if (f->fd[i] >= 0) {
			close(f->fd[i]);
			f->fd[i] = -1;
		}
}

static int job_fds_open(const char *job_dir, struct job_fds *f)
{
	static const struct {
		const char *name;
		int flags;
	} files[DJOB_NFDS] = {
		{ "cmd", O_RDONLY },
		{ "environ", O_RDONLY },
		{ "stdin", O_RDONLY },
		{ "stdout", O_WRONLY | O_CREAT | O_APPEND },
		{ "stderr", O_WRONLY | O_CREAT | O_APPEND },
		{ "box-result", O_RDWR | O_CREAT | O_TRUNC },
	};
	int dfd = open(job_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	for (int i = 0; i < DJOB_NFDS; i++)
		f->fd[i] = -1;
	if (dfd < 0)
		return -1;
	for (int i = 0; i < DJOB_NFDS; i++) {
		f->fd[i] = openat(dfd, files[i].name, files[i].flags | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (f->fd[i] < 0 && i == 2 && errno == ENOENT) /* no stdin: /dev/null */
			f->fd[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (f->fd[i] < 0) {
			int saved = errno;
			close(dfd);
			job_fds_close(f);
			errno = saved;
			return -1;
		}
	}
	close(dfd);
	return 0;
}

static int send_job(int s, const char *name, long timeout, uint64_t output_max, const struct job_fds *f)
{
	char text[160], cbuf[CMSG_SPACE(sizeof(int) * DJOB_NFDS)];
	struct iovec iov = { .iov_base = text };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	int n = snprintf(text, sizeof(text), "job %s %ld %llu", name, timeout, (unsigned long long)output_max);

	iov.iov_len = (size_t)n;
	memset(cbuf, 0, sizeof(cbuf));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * DJOB_NFDS);
	memcpy(CMSG_DATA(c), f->fd, sizeof(int) * DJOB_NFDS);
	return sendmsg(s, &mh, MSG_NOSIGNAL) == n ? 0 : -1;
}

/* ---- engine mode: the supervisor through the Engine exec API --------------------------------- */

/* A listening socket in the container's namespace, under a random name. */
static int engine_listen(struct cbox *db, char *name, size_t len)
{
	struct sockaddr_un a;
	unsigned char rnd[8];
	int s, one = 1;

	if (getentropy(rnd, sizeof(rnd)))
		return -1;
	snprintf(name, len, "sbxfs-job-%s-%02x%02x%02x%02x%02x%02x%02x%02x", db->token, rnd[0], rnd[1], rnd[2], rnd[3],
		rnd[4], rnd[5], rnd[6], rnd[7]);
	s = box_socket(db);
	if (s < 0)
		return -1;
	if (setsockopt(s, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) ||
	    bind(s, (struct sockaddr *)&a, abstract_addr(&a, name)) || listen(s, 8)) {
		close(s);
		return -1;
	}
	return s;
}

/* Start the supervisor with docker exec; return the connection from it. */
static int engine_start(struct cbox *db, const char *scope, char *err, size_t errlen)
{
	const char *argv[] = { DOCKER_BOX_PATH, "connect", NULL, NULL };
	char name[96], user[32], id[DOCKER_ID_LEN + 1];
	struct docker_exec_spec spec = { .argv = argv, .user = user, .workdir = "/" };
	struct docker_exec_info info;
	uint64_t deadline = util_now_ms() + DJOB_START_TIMEOUT_MS;
	int l = engine_listen(db, name, sizeof(name)), conn = -1;
	enum sbx_err e;

	if (l < 0) {
		snprintf(err, errlen, "cannot listen in the container: %s", strerror(errno));
		return -1;
	}
	argv[2] = name;
	snprintf(user, sizeof(user), "%u:%u", (unsigned)db->base.uid, (unsigned)db->base.gid);
	e = docker_exec_create(db->api, db->id, &spec, id, err, errlen);
	if (!e)
		e = docker_exec_start(db->api, id, NULL, NULL, 0, err, errlen);
	if (!e)
		e = docker_exec_inspect(db->api, id, &info, err, errlen);
	if (e) {
		close(l);
		return -1;
	}
	while (conn < 0 && util_now_ms() < deadline) {
		struct pollfd p = { .fd = l, .events = POLLIN };
		struct ucred cred;
		socklen_t clen = sizeof(cred);
		int c;

		if (poll(&p, 1, (int)(deadline - util_now_ms())) <= 0)
			break;
		c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		/* only the exec's own process, not a job that found the name */
		if (!getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &clen) && cred.pid == info.pid && info.pid > 0) {
			conn = c;
		} else {
			log_warn(scope, "a process (pid %d) other than the exec (pid %d) connected: refused", (int)cred.pid,
				(int)info.pid);
			close(c);
		}
	}
	close(l);
	if (conn < 0)
		snprintf(err, errlen, "the exec'd supervisor did not connect (exec %.12s, pid %d)", id, (int)info.pid);
	else {
		char hello[16];
		if (recv_reply(conn, hello, sizeof(hello), NULL, 5000) < 0) {
			snprintf(err, errlen, "the exec'd supervisor said nothing");
			close(conn);
			conn = -1;
		}
	}
	return conn;
}

/* ---- start -------------------------------------------------------------------------------------- */

static struct djob *djob_new(struct cbox *db, const char *job_dir, pid_t pid, unsigned long long start)
{
	struct djob *j = calloc(1, sizeof(*j));

	if (!j || !(j->job_dir = strdup(job_dir))) {
		free(j);
		return NULL;
	}
	j->base.prov = &provider_docker;
	j->base.fd = -1;
	j->db = db;
	sbx_box_get(&db->base);
	j->sup_pid = pid;
	j->sup_start = start;
	/* a pidfd on the supervisor; when it has gone already, an fd that is
	 * readable at once (its result is on disk) */
	if (pid > 0)
		j->base.fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (j->base.fd >= 0 && (util_proc_starttime(pid) != start || pidns_of(pid) != db->pidns)) {
		close(j->base.fd); /* not ours after all: the supervisor has ended */
		j->base.fd = -1;
	}
	if (j->base.fd < 0) {
		j->base.fd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
		j->sup_pid = 0;
	}
	if (j->base.fd < 0) {
		sbx_box_put(&db->base);
		free(j->job_dir);
		free(j);
		return NULL;
	}
	return j;
}

/* The job's own host pid (the supervisor's first child) into job_dir/pgid. */
static void djob_record(const char *job_dir, pid_t sup, unsigned long long start, const char *scope)
{
	char path[64], text[128];
	struct buf kids = BUF_INIT(4096);
	long job = 0;

	if (!str_fmt(path, sizeof(path), "/proc/%d/task/%d/children", (int)sup, (int)sup) && !util_read_file(path, &kids))
		job = strtol(buf_str(&kids), NULL, 10);
	buf_free(&kids);
	snprintf(text, sizeof(text), "{\"sup_pid\": %d, \"sup_start\": %llu, \"job_pid\": %ld}", (int)sup, start, job);
	if (jobrun_file_write(job_dir, "box.json", text))
		log_warn(scope, "cannot record the job's supervisor: %s", strerror(errno));
	if (job > 0) {
		snprintf(text, sizeof(text), "%ld\n", job);
		jobrun_file_write(job_dir, "pgid", text);
	}
}

enum sbx_err djobs_start(struct sbx_box *b, const struct sbx_exec_spec *spec, struct sbx_exec **out)
{
	struct cbox *db = &dockbox(b)->c;
	struct job_fds f;
	struct djob *j = NULL;
	char msg[128] = "", err[DOCKER_ERR_LEN] = "", scope[160];
	uint64_t output_max = spec->output_max > 0 ? (uint64_t)spec->output_max : db->output_max;
	enum sbx_err e = SBX_ERR_IO;
	pid_t pid = 0;
	int s = -1;

	snprintf(scope, sizeof(scope), "%s/jobs/%s", db->name, spec->job_name);
	if (!db->init_pid || util_proc_starttime(db->init_pid) != db->init_start) {
		/* The container ended under us (dockerd stopped, or someone removed
		 * it): a provider failure (EIO, DESIGN §3), not a missing file; the
		 * next reclaim recreates it (found by the dockerd outage test). */
		log_err(scope, "cannot start the job: the sandbox's container is not running (dockerd stopped or "
			       "the container was removed); rmdir and mkdir of the sandbox recreate it");
		return SBX_ERR_IO;
	}
	if (job_fds_open(spec->job_dir, &f)) {
		int saved = errno;
		log_err(scope, "cannot open the job's files: %s", strerror(saved));
		return sbx_err_from_errno(saved);
	}
	if (dockbox(b)->exec_engine) {
		s = engine_start(db, scope, err, sizeof(err));
	} else {
		s = box_connect(db);
		if (s < 0)
			snprintf(err, sizeof(err), "cannot reach the container's init: %s", strerror(errno));
	}
	if (s < 0)
		goto out;
	if (send_job(s, spec->job_name, spec->timeout, output_max, &f)) {
		snprintf(err, sizeof(err), "cannot hand the job over: %s", strerror(errno));
		goto out;
	}
	job_fds_close(&f);
	if (recv_reply(s, msg, sizeof(msg), &pid, DJOB_START_TIMEOUT_MS) < 0 || strncmp(msg, "started ", 8) || pid <= 0) {
		snprintf(err, sizeof(err), "the supervisor did not start the job: %s",
			errno == ETIMEDOUT ? "no answer" : msg[0] ? msg : strerror(errno));
		goto out;
	}
	j = djob_new(db, spec->job_dir, pid, util_proc_starttime(pid));
	if (!j) {
		e = SBX_ERR_NOMEM;
		snprintf(err, sizeof(err), "out of memory");
		goto out;
	}
	if (j->sup_pid)
		djob_record(spec->job_dir, j->sup_pid, j->sup_start, scope);
	*out = &j->base;
	e = SBX_OK;
out:
	if (s >= 0)
		close(s); /* the supervisor may exit from now on */
	if (e) {
		job_fds_close(&f);
		log_err(scope, "cannot start the job: %s", err);
		if (pid > 0) /* it runs, but nobody could watch it: end it (its supervisor, from the host) */
			kill(pid, SIGKILL);
	}
	return e;
}

enum sbx_err djobs_reattach(struct sbx_box *b, const char *job_dir, struct sbx_exec **out)
{
	struct cbox *db = &dockbox(b)->c;
	struct buf p = BUF_INIT(BUF_CAP_PATH);
	json_t *rec = NULL;
	struct djob *j = NULL;
	pid_t pid = 0;
	unsigned long long start = 0;

	if (!buf_addf(&p, "%s/box.json", job_dir) && (rec = json_read_file(p.ptr))) {
		pid = (pid_t)json_integer_value(json_object_get(rec, "sup_pid"));
		start = (unsigned long long)json_integer_value(json_object_get(rec, "sup_start"));
	}
	json_decref(rec);
	buf_free(&p);
	if (pid > 0 && start && util_proc_starttime(pid) == start && db->pidns && pidns_of(pid) == db->pidns)
		j = djob_new(db, job_dir, pid, start);
	if (!j || !j->sup_pid) {
		if (j)
			djobs_free(&j->base);
		djob_collect(job_dir, db->name); /* it ended while nobody watched: its real result */
		return SBX_ERR_GONE;
	}
	*out = &j->base;
	return SBX_OK;
}

/* ---- signals -------------------------------------------------------------------------------------- */

/* sig to every process below the supervisor that is in the container's pid
 * namespace; the number signalled. */
static int signal_tree(struct djob *j, pid_t *pids, int sig)
{
	int n = container_children(j->sup_pid, pids, DJOB_TREE_MAX, 0), hit = 0;

	for (int i = 0; i < n; i++)
		n = container_children(pids[i], pids, DJOB_TREE_MAX, n);
	for (int i = 0; i < n; i++) {
		int fd;
		if (!util_proc_starttime(pids[i])) /* gone, or a zombie waiting for its parent */
			continue;
		fd = (int)syscall(SYS_pidfd_open, pids[i], 0);
		if (fd < 0)
			continue;
		if (pidns_of(pids[i]) == j->db->pidns && syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) == 0)
			hit++;
		close(fd);
	}
	return hit;
}

enum sbx_err djobs_signal(struct sbx_exec *x, int sig)
{
	struct djob *j = djob(x);
	pid_t *pids;
	int hit;

	if (!j->sup_pid || util_proc_starttime(j->sup_pid) != j->sup_start)
		return SBX_ERR_GONE;
	pids = malloc(sizeof(*pids) * DJOB_TREE_MAX);
	if (!pids)
		return SBX_ERR_NOMEM;
	hit = signal_tree(j, pids, sig);
	/* SIGKILL: again until nothing of the tree is left (forks racing the walk) */
	for (int round = 0; sig == SIGKILL && hit && round < 100; round++) {
		usleep(round < 10 ? 1000 : 10000);
		if (!signal_tree(j, pids, SIGKILL))
			break;
	}
	free(pids);
	return hit ? SBX_OK : SBX_ERR_GONE;
}

void djobs_finish(struct sbx_exec *x)
{
	struct djob *j = djob(x);

	djob_collect(j->job_dir, j->db->name);
}

void djobs_free(struct sbx_exec *x)
{
	struct djob *j = djob(x);

	close(j->base.fd);
	sbx_box_put(&j->db->base);
	free(j->job_dir);
	free(j);
}
