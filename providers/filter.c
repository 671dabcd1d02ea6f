/* SPDX-License-Identifier: MIT */
/*
 * filter.c - the seccomp filter of local sandboxes (see filter.h).
 *
 * Why a deny list and not Docker's allow list: a sandbox runs whatever an
 * agent installs (compilers, language runtimes, browsers), and an allow list
 * breaks programs that use a new system call; what a deny list must get
 * right is the set of calls that reach kernel code a sandboxed uid has no
 * business with, and the architectures: the filter covers the native ABI and
 * the 32-bit ones of the same machine (x86 and x32 on x86-64), so a 32-bit
 * system call cannot slip past the 64-bit numbers; any other architecture
 * is killed.
 *
 * Most denied calls already need a capability the sandbox does not have;
 * the filter is the second wall (and the first for unprivileged user
 * namespaces, which would hand the sandbox all capabilities over a
 * namespace of its own, and for ptrace and io_uring).
 */
#define _GNU_SOURCE
#include "filter.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/log.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* Calls that fail with EPERM, whatever their arguments.  Names that this
 * machine's libseccomp does not know are skipped. */
static const char *const filter_denied[] = {
	/* mounts: a sandbox's view of the filesystem is fixed */
	"mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
	"fspick", "mount_setattr", "chroot",
	/* namespaces (unshare and clone: by flags, below) */
	"setns",
	/* the kernel's keyrings */
	"keyctl", "add_key", "request_key",
	/* other processes, the kernel's internals */
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "perf_event_open", "bpf", "userfaultfd",
	"lookup_dcookie", "io_uring_setup", "io_uring_enter", "io_uring_register", "fanotify_init",
	"open_by_handle_at",
	/* the machine */
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module",
	"query_module", "get_kernel_syms", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog",
	"uselib", "ustat", "sysfs", "_sysctl", "nfsservctl", "vhangup", "iopl", "ioperm", "settimeofday", "stime",
	"clock_settime", "clock_adjtime",
	NULL,
};

static const unsigned long filter_ns_flags[] = { CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
	CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET };

static int filter_deny_names(scmp_filter_ctx ctx)
{
	for (int i = 0; filter_denied[i]; i++) {
		int nr = seccomp_syscall_resolve_name(filter_denied[i]);
		if (nr == __NR_SCMP_ERROR)
			continue;
		if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0))
			return -1;
	}
	return 0;
}

/* No new namespaces: clone and unshare with any CLONE_NEW* flag (the
 * flags are the first argument on every architecture the filter covers).
 * CLONE_NEWTIME only exists for unshare: in clone its bit is the exit
 * signal. */
static int filter_deny_namespaces(scmp_filter_ctx ctx)
{
	for (size_t i = 0; i < sizeof(filter_ns_flags) / sizeof(filter_ns_flags[0]); i++) {
		unsigned long f = filter_ns_flags[i];
		if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, f, f)) ||
		    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, f, f)))
			return -1;
	}
	if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
		    SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWTIME, CLONE_NEWTIME)))
		return -1;
	/* clone3's flags are in memory, out of a filter's reach: ENOSYS makes
	 * libc fall back to clone */
	return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
}

/* personality: Docker allows 0, PER_LINUX32 (0x8), UNAME26 (0x20000) and
 * their combination.  libseccomp cannot compare one argument twice in a
 * rule, so every other bit is a rule of its own (which also refuses the
 * query 0xffffffff). */
static int filter_deny_personality(scmp_filter_ctx ctx)
{
	for (int bit = 0; bit < 32; bit++) {
		unsigned long b = 1UL << bit;
		if (b == 0x8 || b == 0x20000)
			continue;
		if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, b, b)))
			return -1;
	}
	return 0;
}

static int filter_arches(scmp_filter_ctx ctx)
{
#if defined(__x86_64__)
	if (seccomp_arch_add(ctx, SCMP_ARCH_X86) || seccomp_arch_add(ctx, SCMP_ARCH_X32))
		return -1;
#elif defined(__aarch64__)
	if (seccomp_arch_add(ctx, SCMP_ARCH_ARM))
		return -1;
#endif
	return 0;
}

static int filter_export(scmp_filter_ctx ctx, struct buf *out)
{
	char chunk[4096];
	int fd = memfd_create("sbxfs-filter", MFD_CLOEXEC), r = -1;
	ssize_t n;

	if (fd < 0)
		return -1;
	if (seccomp_export_bpf(ctx, fd) || lseek(fd, 0, SEEK_SET))
		goto out;
	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		if (buf_add(out, chunk, (size_t)n))
			goto out;
	r = n < 0 ? -1 : 0;
out:
	close(fd);
	return r;
}

int filter_build(struct buf *out, char *err, size_t errlen)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int r = -1;

	if (!ctx) {
		snprintf(err, errlen, "seccomp: cannot initialise libseccomp");
		return -1;
	}
	if (filter_arches(ctx) || filter_deny_names(ctx) || filter_deny_namespaces(ctx) ||
	    filter_deny_personality(ctx) || seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) {
		snprintf(err, errlen, "seccomp: cannot build the sandbox filter");
		goto out;
	}
	if (filter_export(ctx, out)) {
		snprintf(err, errlen, "seccomp: cannot export the sandbox filter: %s", strerror(errno));
		goto out;
	}
	r = 0;
out:
	seccomp_release(ctx);
	return r;
}
