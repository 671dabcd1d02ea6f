/* SPDX-License-Identifier: MIT */
/*
 * local_exec.h - the parts of sbxfs-exec (the job supervisor of the local
 * provider): local_exec.c supervises, local_pump.c moves the job's output
 * into its files and enforces resources.output.
 *
 * sbxfs-exec links nothing but libc: it runs as root, and every library is
 * code a root process loads.
 */
#ifndef SBX_LOCAL_EXEC_H
#define SBX_LOCAL_EXEC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Where the supervisor's complaints go: the job's stderr file once it is
 * open, the job's stderr pipe inside the job. */
extern int exec_diag_fd;
void exec_die(const char *what) __attribute__((noreturn));

/* The output pump: a process of its own, forked before the supervisor
 * enters the sandbox (so it stays in the host's namespaces), root without
 * any capability.  It moves the job's stdout and stderr pipes into their
 * files until every writer has closed them, which may be long after the
 * job's main process ended (a background process keeps writing).  Past
 * max bytes in all (0: no limit) it stops, kills the job (cgroup.kill and
 * the process group) and remembers that the limit was hit.
 *
 * Protocol on ctl (supervisor → pump), one line each:
 *   "P<pgid>"  the job's process group, for hosts without cgroup v2;
 *   "S"        the job's main process has ended: move everything it wrote
 *              (what is in the pipes now), then answer on ack with one byte,
 *              'L' when the output limit was hit, '-' otherwise.
 * EOF on ctl: the supervisor is gone; the pump goes on alone. */
struct pump_spec {
	int in[2];  /* read ends of the job's stdout and stderr pipes */
	int out[2]; /* the stdout and stderr files */
	uint64_t max;
	int ctl, ack;
	int cgkill; /* the job cgroup's cgroup.kill, or -1 */
};

/* Fork the pump; returns its pid (the caller closes what it handed over). */
pid_t pump_start(const struct pump_spec *spec);

#endif
