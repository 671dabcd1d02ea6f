/* SPDX-License-Identifier: MIT */
/*
 * local_pump.c - the output pump of sbxfs-exec (see local_exec.h): the
 * job's stdout and stderr are pipes, and this process moves them into the
 * job's files with splice(2), counting, so resources.output is exact: the
 * files never keep more than max bytes, and the job is killed when it
 * writes past them.
 *
 * Why pipes and not the files themselves: a job that writes a file directly
 * can be measured only after the fact, and a process it leaves behind would
 * go on writing after its supervisor has gone.  Through pipes every byte
 * passes here, and the pump lives as long as anyone can still write.
 *
 * Why a process of its own: the supervisor must end when the job's main
 * process does (the daemon reports the job's end by its exit), but output of
 * processes the job left behind may keep coming.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "local_exec.h"

#define PUMP_CHUNK (1 << 20)

struct pump {
	struct pump_spec s;
	off_t off[2];
	uint64_t total;
	pid_t pgid;
	bool hit;
};

/* Root without capabilities: it can only use the descriptors it holds. */
static void pump_drop_caps(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2] = { 0 };

	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) && errno == EINVAL)
			break;
	if (syscall(SYS_capset, &h, d) || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		exec_die("pump: dropping capabilities");
}

static void pump_close_in(struct pump *p, int i)
{
	if (p->s.in[i] >= 0)
		close(p->s.in[i]);
	p->s.in[i] = -1;
}

static void pump_limit(struct pump *p)
{
	p->hit = true;
	if (p->s.cgkill >= 0 && write(p->s.cgkill, "1", 1) != 1)
		dprintf(exec_diag_fd, "sbxfs-exec: cgroup.kill: %s\n", strerror(errno));
	if (p->pgid > 1)
		kill(-p->pgid, SIGKILL);
	/* nothing more is kept: writers get EPIPE */
	pump_close_in(p, 0);
	pump_close_in(p, 1);
}

/* splice() into a filesystem that cannot take it: copy. */
static ssize_t pump_copy(struct pump *p, int i, size_t len)
{
	static char chunk[65536];
	ssize_t n = read(p->s.in[i], chunk, len < sizeof(chunk) ? len : sizeof(chunk));

	if (n > 0 && pwrite(p->s.out[i], chunk, (size_t)n, p->off[i]) != n)
		return -1;
	if (n > 0)
		p->off[i] += n;
	return n;
}

/* Move what is in pipe i (non-blocking), up to the limit.  Returns bytes
 * moved, 0 when there was nothing (or at EOF, which closes the pipe). */
static ssize_t pump_step(struct pump *p, int i)
{
	size_t room = p->s.max ? p->s.max - p->total : PUMP_CHUNK;
	struct stat st;
	ssize_t n;
	char c;

	if (p->s.in[i] < 0)
		return 0;
	if (room == 0) {
		/* at the limit: one more byte is the job going past it */
		n = read(p->s.in[i], &c, 1);
		if (n == 1)
			pump_limit(p);
		else if (n == 0)
			pump_close_in(p, i);
		return 0;
	}
	/* the supervisor may have appended a complaint: never write over it */
	if (!fstat(p->s.out[i], &st) && st.st_size > p->off[i])
		p->off[i] = st.st_size;
	n = splice(p->s.in[i], NULL, p->s.out[i], &p->off[i], room < PUMP_CHUNK ? room : PUMP_CHUNK,
		SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
	if (n < 0 && errno == EINVAL)
		n = pump_copy(p, i, room < PUMP_CHUNK ? room : PUMP_CHUNK);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0) {
		if (n < 0)
			dprintf(exec_diag_fd, "sbxfs-exec: keeping the job's output: %s\n", strerror(errno));
		pump_close_in(p, i);
		return 0;
	}
	p->total += (uint64_t)n;
	return n;
}

/* "S": what the main process wrote before it ended is in the pipes now, at
 * most a pipe's capacity each: move that much (or until empty), answer. */
static void pump_sync(struct pump *p)
{
	char answer;

	for (int i = 0; i < 2; i++) {
		long cap = p->s.in[i] >= 0 ? fcntl(p->s.in[i], F_GETPIPE_SZ) : 0;
		ssize_t n;
		for (long moved = 0; moved <= cap && (n = pump_step(p, i)) > 0; moved += n)
			;
		if (p->s.in[i] >= 0 && p->s.max && p->total == p->s.max)
			pump_step(p, i); /* at the limit with bytes left: that is past it */
	}
	answer = p->hit ? 'L' : '-';
	if (write(p->s.ack, &answer, 1) != 1)
		dprintf(exec_diag_fd, "sbxfs-exec: pump: cannot answer: %s\n", strerror(errno));
}

static void pump_ctl(struct pump *p)
{
	char line[64];
	ssize_t n = read(p->s.ctl, line, sizeof(line) - 1);

	if (n <= 0) {
		if (n < 0 && errno == EINTR)
			return;
		close(p->s.ctl);
		p->s.ctl = -1;
		return;
	}
	line[n] = '\0';
	for (char *c = line; c && *c; c = strchr(c, '\n') ? strchr(c, '\n') + 1 : NULL) {
		if (*c == 'P')
			p->pgid = (pid_t)strtol(c + 1, NULL, 10);
		else if (*c == 'S')
			pump_sync(p);
	}
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* A forked copy of the supervisor holds every descriptor it had: keep 0-2
 * and the pump's own, close the rest (the pipes' write ends above all, or
 * the pump would never see EOF). */
static void pump_close_others(const struct pump *p)
{
	int keep[8] = { 2, p->s.in[0], p->s.in[1], p->s.out[0], p->s.out[1], p->s.ctl, p->s.ack, p->s.cgkill };
	int last = 2;

	keep[0] = exec_diag_fd > 2 ? exec_diag_fd : 2;
	qsort(keep, 8, sizeof(keep[0]), cmp_int);
	for (int i = 0; i < 8; i++) {
		if (keep[i] > last + 1)
			close_range((unsigned)last + 1, (unsigned)keep[i] - 1, 0);
		if (keep[i] > last)
			last = keep[i];
	}
	close_range((unsigned)last + 1, ~0U, 0);
}

static void __attribute__((noreturn)) pump_main(struct pump *p)
{
	struct stat st;

	pump_close_others(p);
	prctl(PR_SET_NAME, "sbxfs-pump", 0, 0, 0);
	pump_drop_caps();
	for (int i = 0; i < 2; i++) {
		p->off[i] = fstat(p->s.out[i], &st) ? 0 : st.st_size;
		p->total += (uint64_t)p->off[i];
		fcntl(p->s.in[i], F_SETPIPE_SZ, PUMP_CHUNK);
		fcntl(p->s.in[i], F_SETFL, fcntl(p->s.in[i], F_GETFL) | O_NONBLOCK);
	}
	if (p->s.max && p->total > p->s.max)
		p->total = p->s.max;
	while (p->s.in[0] >= 0 || p->s.in[1] >= 0 || p->s.ctl >= 0) {
		struct pollfd fds[3] = { { .fd = p->s.in[0], .events = POLLIN }, { .fd = p->s.in[1], .events = POLLIN },
			{ .fd = p->s.ctl, .events = POLLIN } };
		if (poll(fds, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			exec_die("pump: poll");
		}
		for (int i = 0; i < 2; i++)
			if (fds[i].revents)
				pump_step(p, i);
		if (fds[2].revents)
			pump_ctl(p);
	}
	_exit(0);
}

pid_t pump_start(const struct pump_spec *spec)
{
	struct pump p = { .s = *spec };
	pid_t pid = fork();

	if (pid == 0) {
		signal(SIGPIPE, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		pump_main(&p);
	}
	return pid;
}
