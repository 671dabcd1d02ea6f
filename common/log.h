/* SPDX-License-Identifier: MIT */
/*
 * log.h - one line per event: "sbxfs[pid]: LEVEL scope: message".
 *
 * The scope names what the event is about (a user/thread, a job, "config",
 * "pool"), so an operator can grep for one sandbox.  Lines go to stderr in
 * the foreground and to syslog once the daemon has detached.  Thread-safe.
 */
#ifndef SBX_LOG_H
#define SBX_LOG_H

enum log_level { LOG_LVL_DEBUG, LOG_LVL_INFO, LOG_LVL_WARN, LOG_LVL_ERR };

void log_open(int use_syslog, int debug);
/* Drop lines below min (unit tests keep only warnings and errors). */
void log_set_min_level(enum log_level min);
__attribute__((format(printf, 3, 4))) void log_msg(enum log_level lvl, const char *scope, const char *fmt, ...);

#define log_debug(scope, ...) log_msg(LOG_LVL_DEBUG, scope, __VA_ARGS__)
#define log_info(scope, ...) log_msg(LOG_LVL_INFO, scope, __VA_ARGS__)
#define log_warn(scope, ...) log_msg(LOG_LVL_WARN, scope, __VA_ARGS__)
#define log_err(scope, ...) log_msg(LOG_LVL_ERR, scope, __VA_ARGS__)

#endif
