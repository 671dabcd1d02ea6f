/* SPDX-License-Identifier: MIT */
/*
 * fault.h - a fault-injecting provider, built only into the unit tests: it
 * creates "sandboxes" that are a record file, runs "jobs" on a thread that
 * writes the job files the way a real provider does, and fails, hangs,
 * flaps or dies where the knobs below say.  Its counters tell a test what
 * the pool and the job state machine asked of it and what is still alive.
 */
#ifndef SBX_FAULT_H
#define SBX_FAULT_H

#include <stdatomic.h>
#include "../../providers/provider.h"

enum fault_exec_mode {
	FAULT_EXEC_EXIT,   /* stdout "out\n", then a result with exit_code after exec_ms */
	FAULT_EXEC_DIE,    /* stdout "partial\n", then ends without a result */
	FAULT_EXEC_SIGNAL, /* runs until signalled: result "killed", 128+sig */
};

struct fault_knobs {
	enum sbx_err create_err;
	int create_delay_ms;
	bool create_hang;             /* sleeps past ready_timeout, then TIMEOUT */
	enum sbx_err health_seq[16];  /* successive health answers (then OK) */
	int n_health;
	enum sbx_err destroy_err;
	enum sbx_err claim_err;       /* claim (of a spare) fails with it */
	enum fault_exec_mode exec_mode;
	int exec_ms;
	int exit_code;
	enum sbx_err exec_err;
	bool exec_bad_fd;   /* the handle's fd cannot be watched */
	bool signal_notsup; /* only SIGKILL can be sent */
	bool reattach_ok;   /* a restarted daemon finds the job still running */
	bool ignore_term;   /* FAULT_EXEC_SIGNAL ends only on SIGKILL */
	int signal_delay_ms; /* exec_signal returns this long after delivering (the job may end meanwhile) */
	/* files and skills ops (fault.c: over the local directory remote_root,
	 * which plays the sandbox's filesystem: a path P is remote_root/P) */
	char remote_root[256];
	enum sbx_err files_err;  /* every files/skills op fails with it */
	int files_delay_ms;      /* every files/skills op takes this long */
	/* counters: written by the provider's threads, read by the test's
	 * (atomics: ThreadSanitizer checks the unit tests, make tsan-unit) */
	_Atomic int uploads, upload_bytes, skill_mkdirs, skill_removes, file_ops;
	_Atomic int creates, destroys, adopts, healths, claims, spare_creates;
	_Atomic int creating, max_creating; /* creates running now, and the most at once */
	_Atomic int live_boxes, live_execs;
	_Atomic int signals[65];
};

extern struct fault_knobs fault;
extern const struct sbx_provider provider_fault;

void fault_reset(void);

#endif
