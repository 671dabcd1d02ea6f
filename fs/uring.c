/* SPDX-License-Identifier: MIT */
/*
 * uring.c - FUSE over io_uring: decides, from fuse.io_uring, the libfuse
 * build and the host, whether the mount's requests come through per-CPU
 * io_uring rings or /dev/fuse reads, and reports which (.status).
 *
 * Why off by default (docs/libfuse.md has the measurements and the rest):
 *  - libfuse 3.18 delivers no FUSE_INTERRUPT to a request that came over a
 *    ring (fuse_lowlevel.c: "for now no support for interrupts with
 *    io-uring"): a parked wait (a read of `exit`, `events`, `ready`, an
 *    flock wait) is interrupted by sigwatch.c polling the requester's
 *    signals instead, and an interruptible work item (fswork.c) not at all;
 *  - a parked request holds its ring entry: past io_uring_queue_depth
 *    requests parked from one CPU, that CPU's later requests queue in the
 *    kernel until one is answered;
 *  - the kernel's enable_uring is a host-wide switch (N by default).
 *
 * How libfuse is asked: `-o io_uring,io_uring_q_depth=N` to
 * fuse_session_new; at FUSE_INIT, when the kernel offers
 * FUSE_CAP_OVER_IO_URING, libfuse starts one ring thread per CPU (named
 * fuse-ring-N) and says "failed to start io-uring" through its log
 * function when it cannot; uring_log catches that line.  libfuse's
 * FUSE_URING_ENABLE environment variable would override the key: it is
 * removed.
 *
 * uring_stop: libfuse's own loops stop the rings when they end
 * (fuse_uring_stop, which its shared library does not export); loop.c
 * replaces those loops, so the rings are stopped here, through a weak
 * reference: with a libfuse that lacks the symbol the threads end by
 * themselves at the unmount and their memory goes with the process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <jansson.h>
#include <linux/fuse.h> /* the kernel's struct fuse_in_header, FUSE_INTERRUPT */
#include <stdatomic.h>

#include "../common/buf.h"
#include "../common/log.h"
#include "../runtime/work.h"
#include "node.h"
#include "uring.h"

#define URING_PARAM "/sys/module/fuse/parameters/enable_uring"
#define URING_SYSCTL "/proc/sys/kernel/io_uring_disabled"

static struct {
	pthread_mutex_t lock;
	enum config_uring mode; /* written before the session exists */
	unsigned depth, queues;
	bool asked;       /* protected by lock: -o io_uring given to libfuse */
	bool offered;     /* protected by lock: the kernel offered it at INIT */
	bool failed;      /* protected by lock: libfuse could not start the rings */
	bool inited;      /* protected by lock: FUSE_INIT seen */
	char reason[256]; /* protected by lock: why not io_uring; "" = it is */
	atomic_bool rings; /* the rings serve: set at FUSE_INIT, read by every /dev/fuse read */
} ur = { .lock = PTHREAD_MUTEX_INITIALIZER };

#ifdef SBXFS_FUSE_IO_URING
/* libfuse's (lib/fuse_uring.c), exported by the static build only */
extern int fuse_uring_stop(struct fuse_session *se) __attribute__((weak));
#endif

static void uring_set_reason(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void uring_set_reason(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&ur.lock);
	va_start(ap, fmt);
	vsnprintf(ur.reason, sizeof(ur.reason), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&ur.lock);
}

static enum log_level uring_level(enum fuse_log_level level)
{
	if (level <= FUSE_LOG_ERR)
		return LOG_LVL_ERR;
	if (level <= FUSE_LOG_WARNING)
		return LOG_LVL_WARN;
	return level < FUSE_LOG_DEBUG ? LOG_LVL_INFO : LOG_LVL_DEBUG;
}

/* libfuse's log lines: those about io_uring go to our log (and a failed
 * start is remembered); the rest to stderr, as libfuse's default does. */
static void uring_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	vsnprintf(line, sizeof(line), fmt, ap);
	if (!strstr(line, "uring") && !strstr(line, "qid=")) {
		fputs(line, stderr);
		return;
	}
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	if (strstr(line, "failed to start io-uring")) {
		atomic_store(&ur.rings, false);
		pthread_mutex_lock(&ur.lock);
		ur.failed = true;
		snprintf(ur.reason, sizeof(ur.reason), "libfuse could not start the rings (%.200s)", line);
		pthread_mutex_unlock(&ur.lock);
		log_warn("fuse", "FUSE over io_uring: libfuse could not start the rings (%s): requests come through "
				 "/dev/fuse",
			line);
		return;
	}
	log_msg(uring_level(level), "fuse", "libfuse: %s", line);
}

#ifdef SBXFS_FUSE_IO_URING /* the host checks: only a libfuse with io_uring needs them */
/* The first character of a small sysfs/procfs file, or 0. */
static char uring_read_char(const char *path)
{
	char c = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	if (read(fd, &c, 1) != 1)
		c = 0;
	close(fd);
	return c;
}

/* The fuse module's parameter: 'Y', 'N', or 0 when there is none (no
 * CONFIG_FUSE_IO_URING, Linux < 6.14).  Opening /dev/fuse first loads the
 * module if it is not yet. */
static char uring_kernel_param(void)
{
	if (access("/sys/module/fuse", F_OK)) {
		int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
		if (fd >= 0)
			close(fd);
	}
	return uring_read_char(URING_PARAM);
}

/* on: switch the host's parameter to Y.  0 or an errno. */
static int uring_enable_param(void)
{
	int fd = open(URING_PARAM, O_WRONLY | O_CLOEXEC), e = 0;

	if (fd < 0)
		return errno;
	if (write(fd, "Y", 1) != 1)
		e = errno ? errno : EIO;
	close(fd);
	if (!e && uring_read_char(URING_PARAM) != 'Y')
		e = EPERM;
	return e;
}

/* Why io_uring cannot be had on this host, or "" in why when it can (`on`
 * switches the module parameter to Y first when it is N). */
static void uring_host_check(enum config_uring mode, char *why, size_t len)
{
	char p = uring_kernel_param(), dis = uring_read_char(URING_SYSCTL);
	int e;

	why[0] = '\0';
	if (!p) {
		snprintf(why, len, "the kernel has no FUSE over io_uring (no %s: needs Linux >= 6.14 built with "
				   "CONFIG_FUSE_IO_URING)",
			URING_PARAM);
		return;
	}
	if (dis == '2' || (dis == '1' && geteuid() != 0)) {
		snprintf(why, len, "io_uring is disabled for this process (%s is %c)", URING_SYSCTL, dis);
		return;
	}
	if (p == 'Y')
		return;
	if (mode != CONFIG_URING_ON) {
		snprintf(why, len, "the kernel's FUSE over io_uring is off (%s is N; fuse.io_uring: on switches it on)",
			URING_PARAM);
		return;
	}
	if ((e = uring_enable_param())) {
		snprintf(why, len, "cannot switch %s to Y: %s", URING_PARAM, strerror(e));
		return;
	}
	log_warn("fuse", "fuse.io_uring: on: switched %s from N to Y (host-wide; it stays Y)", URING_PARAM);
}
#endif

int uring_prepare(const struct sbx_config *cfg, struct fuse_args *args)
{
	char why[256] = "", opt[64];

	ur.mode = cfg->fuse_io_uring;
	ur.depth = cfg->fuse_uring_depth;
	ur.queues = (unsigned)get_nprocs_conf();
	if (getenv("FUSE_URING_ENABLE") || getenv("FUSE_URING_QUEUE_DEPTH")) {
		log_info("fuse", "FUSE_URING_ENABLE / FUSE_URING_QUEUE_DEPTH ignored: fuse.io_uring decides");
		unsetenv("FUSE_URING_ENABLE");
		unsetenv("FUSE_URING_QUEUE_DEPTH");
	}
	fuse_set_log_func(uring_log);
	if (ur.mode == CONFIG_URING_OFF) {
		uring_set_reason("fuse.io_uring is off");
		return 0;
	}
#ifdef SBXFS_FUSE_IO_URING
	uring_host_check(ur.mode, why, sizeof(why));
#else
	snprintf(why, sizeof(why), "this sbxfs is built with libfuse %d.%d, without FUSE over io_uring (needs "
				   "libfuse >= 3.18 built with liburing: docs/libfuse.md)",
		FUSE_MAJOR_VERSION, FUSE_MINOR_VERSION);
#endif
	if (why[0] && ur.mode == CONFIG_URING_ON) {
		fprintf(stderr, "sbxfs: fuse.io_uring is on, but %s; set it to auto or off to mount with /dev/fuse\n",
			why);
		return -1;
	}
	if (why[0]) {
		uring_set_reason("%s", why);
		log_info("fuse", "fuse.io_uring: auto: requests come through /dev/fuse: %s", why);
		return 0;
	}
	snprintf(opt, sizeof(opt), "io_uring,io_uring_q_depth=%u", ur.depth);
	if (fuse_opt_add_arg(args, "-o") || fuse_opt_add_arg(args, opt)) {
		fprintf(stderr, "sbxfs: out of memory\n");
		return -1;
	}
	ur.asked = true;
	return 0;
}

void uring_init(struct fuse_conn_info *conn)
{
	bool offered = false;

	pthread_mutex_lock(&ur.lock);
	ur.inited = true;
#ifdef SBXFS_FUSE_IO_URING /* asked is never set otherwise */
	if (ur.asked) {
		offered = (conn->capable & FUSE_CAP_OVER_IO_URING) != 0;
		ur.offered = offered;
		if (offered) {
			conn->want |= FUSE_CAP_OVER_IO_URING;
			/* libfuse starts the rings after this, in the same thread,
			 * before the INIT reply: a failure clears it (uring_log)
			 * before any request can be interrupted */
			atomic_store(&ur.rings, true);
			/* a thread that answers over a ring must outlive the
			 * entry's next fetch: work threads (fswork.c) stay */
			work_keep_threads();
		}
		else
			snprintf(ur.reason, sizeof(ur.reason), "the kernel did not offer FUSE over io_uring at FUSE_INIT");
	}
#else
	(void)conn;
#endif
	pthread_mutex_unlock(&ur.lock);
	if (ur.asked && !offered)
		log_info("fuse", "fuse.io_uring: %s: the kernel did not offer FUSE over io_uring at FUSE_INIT: "
				 "requests come through /dev/fuse",
			config_uring_name(ur.mode));
	else if (ur.asked)
		log_info("fuse", "FUSE over io_uring: %u queues of %u entries", ur.queues, ur.depth);
}

bool uring_req(struct fuse_req *req)
{
#ifdef SBXFS_FUSE_IO_URING
	return fuse_req_is_uring(req);
#else
	(void)req;
	return false;
#endif
}

bool uring_active(void)
{
	bool on;

	pthread_mutex_lock(&ur.lock);
	on = ur.asked && ur.inited && ur.offered && !ur.failed;
	pthread_mutex_unlock(&ur.lock);
	return on;
}

/* The kernel expects no answer to a FUSE_INTERRUPT: dropping it is all
 * there is to do.  What libfuse would do with it: look for its request
 * among those read from /dev/fuse, not find it, queue the interrupt, answer
 * it EAGAIN at the next request read from /dev/fuse (the kernel sends it
 * again while its request waits) and leak what is queued at the end.  One
 * for a request read from /dev/fuse before the rings were ready (between
 * FUSE_INIT and the rings' registration) is dropped too: that request is
 * then not interrupted. */
bool uring_swallow(const struct fuse_buf *buf)
{
	const struct fuse_in_header *in = buf->mem;

	if (!atomic_load_explicit(&ur.rings, memory_order_relaxed))
		return false;
	if ((buf->flags & FUSE_BUF_IS_FD) || !in || buf->size < sizeof(*in))
		return false;
	return in->opcode == FUSE_INTERRUPT;
}

void uring_status(json_t *o)
{
	bool on = uring_active();
	json_t *u;

	pthread_mutex_lock(&ur.lock);
	u = json_pack("{s:s,s:I,s:I,s:o}", "mode", config_uring_name(ur.mode), "queues", (json_int_t)ur.queues,
		"queue_depth", (json_int_t)ur.depth, "reason", on || !ur.reason[0] ? json_null() : json_string(ur.reason));
	pthread_mutex_unlock(&ur.lock);
	json_object_set_new(o, "fuse_transport", json_string(on ? "io_uring" : "dev_fuse"));
	if (u)
		json_object_set_new(o, "io_uring", u);
}

void uring_stop(struct fuse_session *se)
{
#ifdef SBXFS_FUSE_IO_URING
	if (ur.asked && fuse_uring_stop)
		fuse_uring_stop(se);
#else
	(void)se;
#endif
}
