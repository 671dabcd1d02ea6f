/* SPDX-License-Identifier: MIT */
/*
 * args.h - the daemon's command line, as a person types it and as mount(8)
 * runs it.
 *
 *   sbxfs [-f] [-d] [-c FILE] [-o OPTIONS] [SOURCE] MOUNTPOINT
 *   sbxfs --check-config FILE
 *   sbxfs [-c FILE] --import-deerflow DIR
 *   sbxfs --help | --version
 *
 * mount(8) with `-t fuse.sbxfs` runs Debian's mount.fuse3, which runs
 * `sbxfs SOURCE MOUNTPOINT -o OPTIONS` (detached, without -f): OPTIONS mix
 * sbxfs's own (`config=FILE`), FUSE and kernel mount options, and generic
 * options that fstab, mount(8) and mount.fuse3 add and that mean nothing to
 * a FUSE daemon.  args_parse() sorts them:
 *   - config=FILE names the configuration (as -c FILE does);
 *   - generic options are dropped without a word: defaults, auto, noauto,
 *     user, nouser, users, owner, group, nofail, _netdev, x-*, comment=*;
 *   - suid and dev (mount.fuse3 adds them unless told nosuid/nodev) are
 *     dropped too: sbxfs always mounts nosuid,nodev (a sandbox's set-id file
 *     must never run with its owner's ids on the host), nosuid and nodev
 *     are implied; default_permissions is always on;
 *   - allow_other is recorded (args.allow_other) and not passed on: whether
 *     other users reach the mount is mount.conf's `allow_other`, and main()
 *     refuses a command line that asks for it when mount.conf does not;
 *   - subtype= is refused (sbxfs finds its own stale mounts by the type
 *     fuse.sbxfs);
 *   - everything else is a FUSE or kernel option (ro, noexec, noatime,
 *     fsname=, max_read=, ...) passed to libfuse, which refuses unknown ones.
 * A comma inside a value is written `\,` (as libfuse reads it).
 *
 * Pure: no I/O but getopt's own messages; safe to call again (unit tests).
 */
#ifndef SBX_ARGS_H
#define SBX_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "../common/buf.h"

#ifndef SBXFS_VERSION
#define SBXFS_VERSION "0.1.0"
#endif
#define SBXFS_DEFAULT_CONFIG "/etc/sbxfs/mount.conf"

enum args_action {
	ARGS_RUN,          /* mount MOUNTPOINT */
	ARGS_CHECK_CONFIG, /* --check-config FILE: validate, print, exit */
	ARGS_IMPORT,       /* --import-deerflow DIR: move DeerFlow's threads into state_dir, exit */
	ARGS_HELP,         /* --help: print args_usage(stdout), exit 0 */
	ARGS_VERSION,      /* --version: print args_version(), exit 0 */
	ARGS_ERROR,        /* err says why; exit 2 */
};

struct args {
	const char *config;     /* -c FILE or -o config=FILE (--check-config FILE), or NULL */
	const char *source;     /* mount(8)'s first operand, e.g. "sbxfs": not used */
	const char *mountpoint;
	const char *import_dir; /* --import-deerflow DIR */
	bool foreground;        /* -f (or -d) */
	bool debug;             /* -d */
	bool allow_other;       /* -o allow_other was given */
	struct buf fuse_opts;   /* FUSE/kernel options to pass on, comma separated */
	char *config_opt;       /* owns the unescaped value of -o config= */
};

/* Parse argv into a (zeroed by the call).  Returns what to do; on
 * ARGS_ERROR, err holds one line.  Free with args_free(). */
enum args_action args_parse(int argc, char **argv, struct args *a, char *err, size_t errlen);
void args_free(struct args *a);
/* The --help text: every option sbxfs(8) describes. */
void args_usage(FILE *f);
/* "sbxfs VERSION" */
const char *args_version(void);

#endif
