/* SPDX-License-Identifier: MIT */
/*
 * local_net.h - the local provider's sandbox network (local_net.c): the
 * nftables ruleset of a sandbox's mode and, in open mode, pasta.  Used by
 * local.c only.
 */
#ifndef SBX_LOCAL_NET_H
#define SBX_LOCAL_NET_H

#include <stdint.h>
#include <sys/types.h>

#include "../common/egress.h"
#include "provider.h"

/* How many fds a spawned helper gets as 0..LOCAL_SPAWN_FDS-1 (local.h). */
#define LOCAL_SPAWN_FDS 6
typedef pid_t (*local_spawn_fn)(char *const argv[], char *const envp[], const int fds[LOCAL_SPAWN_FDS]);

/* A sandbox's network helper (pasta in open mode): pid and start time, 0
 * when it has none. */
struct local_net {
	pid_t pid;
	uint64_t start;
	int child; /* ours to reap (not adopted after a restart) */
};

/* The nftables ruleset of the sandbox's mode (DESIGN §7), installed in
 * the namespace of init while the init is still starting: start opens the
 * namespace and begins the install on a thread; finish waits for it (always
 * call it after a start: it also closes the namespace).  SBX_OK, or an
 * error after logging it.  The sandbox is handed out only after finish. */
struct local_net_rules {
	struct egress_job job;
	int nsfd; /* -1: not started */
	char dns[64];
};
enum sbx_err local_net_rules_start(struct local_net_rules *r, const char *scope, pid_t init,
	const struct sbx_spec *spec, const char *rootfs);
enum sbx_err local_net_rules_finish(struct local_net_rules *r, const char *scope);

/* Give the sandbox whose init is init (its rules installed) its network:
 * in open mode pasta, waited for until the namespace has its link (other
 * modes: nothing).  started(arg) runs as soon as pasta is
 * running (out filled), so the caller records it before waiting: a daemon
 * killed during the wait leaves a record the next start cleans up.  log_fd
 * takes pasta's early errors.  SBX_OK, or an error after logging it
 * (nothing is left running). */
enum sbx_err local_net_up(const char *scope, pid_t init, const struct sbx_spec *spec, int log_fd,
	uint64_t deadline_ms, struct local_net *out, int (*started)(void *arg), void *arg);
/* Is the helper (if any) still running? */
int local_net_alive(struct local_net *n);
/* End the helper (if any) and wait until it is gone. */
void local_net_down(struct local_net *n);
/* A new fd on init's network namespace, or -1. */
int local_net_nsfd(pid_t init);
/* Find pasta (at start), and the spawner of its process (local.c's
 * local_spawn); is it installed? */
void local_net_init(local_spawn_fn spawn);
int local_net_have_pasta(void);

#endif
