/* SPDX-License-Identifier: MIT */
/*
 * local.h - what local.c (sandboxes and jobs) exports to the local
 * provider's other files.  Not an interface for anyone else.  local_net.c
 * (their network) does not include it: it gets local_spawn from
 * local_net_init, so the two files do not depend on each other in a circle
 * (make check-layers).
 */
#ifndef SBX_LOCAL_H
#define SBX_LOCAL_H

#include <sys/types.h>

#include "local_net.h"

/* Start argv[0] with fds as 0..LOCAL_SPAWN_FDS-1 (-1: /dev/null for 0..2,
 * closed above), in a new session, every other fd closed, no signal
 * blocked.  pid or -1. */
pid_t local_spawn(char *const argv[], char *const envp[], const int fds[LOCAL_SPAWN_FDS]);

#endif
