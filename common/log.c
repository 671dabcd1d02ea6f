/* SPDX-License-Identifier: MIT */
/*
 * log.c - the daemon's only output channel for events.  Each line is built
 * in one buffer and written with one write(2), so lines from concurrent
 * FUSE workers never interleave.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

static int log_syslog;
static int log_journal; /* stderr is a journald stream: lines carry "<N>" priorities */
static int log_debug_on;
static enum log_level log_min = LOG_LVL_DEBUG;

void log_set_min_level(enum log_level min)
{
	log_min = min;
}

/* systemd sets JOURNAL_STREAM to the device:inode of the stream it gave as
 * stderr; a line starting with "<N>" then gets priority N in the journal
 * (sd-daemon(3)), so `journalctl -p err -u sbxfs` finds the errors. */
static int log_stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st))
		return 0;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_open(int use_syslog, int debug)
{
	log_syslog = use_syslog;
	log_journal = !use_syslog && log_stderr_is_journal();
	log_debug_on = debug;
	if (use_syslog)
		openlog("sbxfs", LOG_PID, LOG_DAEMON);
}

void log_msg(enum log_level lvl, const char *scope, const char *fmt, ...)
{
	static const char *names[] = { "debug", "info", "warning", "error" };
	static const int prio[] = { LOG_DEBUG, LOG_INFO, LOG_WARNING, LOG_ERR };
	static const char *journal_prio[] = { "<7>", "<6>", "<4>", "<3>" };
	char msg[2048], line[2300];
	va_list ap;
	int n;

	if ((lvl == LOG_LVL_DEBUG && !log_debug_on) || lvl < log_min)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (log_syslog) {
		syslog(prio[lvl], "%s %s: %s", names[lvl], scope, msg);
		return;
	}
	n = snprintf(line, sizeof(line), "%ssbxfs[%d]: %s %s: %s\n", log_journal ? journal_prio[lvl] : "",
		(int)getpid(), names[lvl], scope, msg);
	if (n > (int)sizeof(line) - 1)
		n = sizeof(line) - 1;
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}
