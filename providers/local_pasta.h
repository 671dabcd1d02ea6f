/* SPDX-License-Identifier: MIT */
/*
 * local_pasta.h - pasta (Debian's passt package), the user-mode network
 * helper of the local provider: found at start, started into a network
 * namespace behind a start gate, watched, ended.  Used by local_net.c (one
 * pasta per open sandbox when network.gateway is off) and local_gw.c (the one
 * pasta of the open-mode gateway).
 */
#ifndef SBX_LOCAL_PASTA_H
#define SBX_LOCAL_PASTA_H

#include <stdint.h>
#include <sys/types.h>

#include "provider.h"

/* How many fds a spawned helper gets as 0..LOCAL_SPAWN_FDS-1 (local.h). */
#define LOCAL_SPAWN_FDS 6
typedef pid_t (*local_spawn_fn)(char *const argv[], char *const envp[], const int fds[LOCAL_SPAWN_FDS]);

/* A running pasta: pid and start time (against pid reuse), 0 when none. */
struct local_pasta {
	pid_t pid;
	uint64_t start;
	int child; /* ours to reap (not adopted after a restart) */
};

/* Find pasta (at start), and the spawner of its process (local.c's
 * local_spawn); is it installed? */
void local_pasta_init(local_spawn_fn spawn);
int local_pasta_have(void);

/* Start pasta into the namespace nsfd refers to, with every port
 * forwarding off and --no-map-gw, logging to logpath (early errors to
 * log_fd), and wait until the namespace has its link and default route (at
 * most until deadline_ms).  started(arg) runs once the process exists and
 * before it becomes pasta (out filled): the caller records it there, and a
 * nonzero answer ends it unstarted.  SBX_OK, or an error after logging it
 * under scope (nothing is left running). */
enum sbx_err local_pasta_start(const char *scope, int nsfd, const char *logpath, int log_fd, uint64_t deadline_ms,
	struct local_pasta *out, int (*started)(void *arg), void *arg);
/* Is it still running (1 when there is none)? */
int local_pasta_alive(struct local_pasta *p);
/* End it (if any) and wait until it is gone. */
void local_pasta_end(struct local_pasta *p);

#endif
