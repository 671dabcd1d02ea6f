/* SPDX-License-Identifier: MIT */
/*
 * layout.h - the on-disk layout of sbxfs's state_dir, known here only:
 *
 *   STATE/users/<user>/.present                 the user directory exists
 *   STATE/users/<user>/threads/<thread>/        a thread (scope)
 *       sandbox.json                            the pool's record of its sandbox
 *       uid                                     the host uid:gid of its files (bind providers)
 *       user-data/{workspace,uploads,outputs}/  the sandbox's /mnt/user-data
 *       skills/                                 the skill projection
 *       jobs/<name>/                            job slots (fs/job.h)
 *       network.json                            its network policy, events and grants (net/netpol.h)
 *       snapshots/<name>/                       its snapshots (providers/snapshot.h), root's, 0700
 *       restore.json                            the journal of a restore in progress (snapshot.h)
 *       <provider files>                        local.json, sandbox.log, pasta.log, ...
 *
 *   STATE/docker-seccomp.json                   the containers' seccomp profile (docker provider; Podman reads it)
 *   STATE/gateway/{netns,gateway.json,pasta.log} the open-mode gateway (local provider, providers/local_gw.c)
 *
 * and where a sandbox sees them (LAYOUT_SANDBOX_*).  Path builders append
 * to a bounded buffer and return 0 or -1 (buf.h).
 */
#ifndef SBX_LAYOUT_H
#define SBX_LAYOUT_H

#include <sys/types.h>

#include "buf.h"

enum layout_dir {
	LAYOUT_WORKSPACE,
	LAYOUT_UPLOADS,
	LAYOUT_OUTPUTS,
	LAYOUT_SKILLS,
	LAYOUT_JOBS,
	LAYOUT_SNAPSHOTS,
	LAYOUT_DIR_COUNT
};

#define LAYOUT_SANDBOX_USER_DATA "/mnt/user-data"
#define LAYOUT_SANDBOX_WORKSPACE "/mnt/user-data/workspace"

/* STATE/users/<user>/threads/<thread> */
__attribute__((warn_unused_result)) int layout_thread_dir(struct buf *b, const char *state_dir, const char *user,
	const char *thread);
/* STATE/users/<user> and STATE/users */
__attribute__((warn_unused_result)) int layout_user_dir(struct buf *b, const char *state_dir, const char *user);
__attribute__((warn_unused_result)) int layout_users_dir(struct buf *b, const char *state_dir);
/* STATE/users/<user>/threads */
__attribute__((warn_unused_result)) int layout_threads_dir(struct buf *b, const char *state_dir, const char *user);
/* thread_dir/<the directory d> */
__attribute__((warn_unused_result)) int layout_dir(struct buf *b, const char *thread_dir, enum layout_dir d);
/* thread_dir/<name> (a file of the thread: sandbox.json, uid, ...) */
__attribute__((warn_unused_result)) int layout_file(struct buf *b, const char *thread_dir, const char *name);
/* Where the sandbox sees data directory d (workspace, uploads, outputs). */
const char *layout_sandbox_path(enum layout_dir d);
/* Create the data directories of a thread whose files belong to uid:gid
 * (the tops of workspace/uploads/outputs/skills are given to it so both the
 * sandbox and, through the FUSE mapping, the user can write them).  A data
 * directory that already exists and is not uid:gid's is taken over: the
 * whole tree is given to uid:gid (udir_give; DeerFlow's files carried over,
 * or a thread whose uid changed).  0 or -1 with errno (ENOTDIR: one of them
 * is a symlink or a file). */
int layout_make_data_dirs(const char *thread_dir, uid_t uid, gid_t gid);
/* At start, under the state_dir lock and before adoption: delete the
 * temporary files of atomic writes (util_is_atomic_tmp) that a kill -9 left in
 * the state_dir's own files: its top, every thread directory and every job
 * directory (never in data directories: those are the user's).  Returns how
 * many were deleted. */
unsigned layout_sweep_tmp(const char *state_dir);

#endif
