/* SPDX-License-Identifier: MIT */
/*
 * seccomp_probe.c - what a sandbox's seccomp policy lets a process do, for
 * the tests (tests/test_security.py, test_containers.py, make unit).  Built
 * static on the host (the docker test image has no libc of its own) and run
 * inside a sandbox.  It only creates sockets and closes them: it never
 * connects, binds or sends anywhere (a vsock connection would leave the
 * machine).
 *
 * Prints one line per probe, "NAME RESULT", RESULT being "OK" or the errno's
 * name:
 *   family.F.T        socket(F, T, 0) for every family F < 64 and the types
 *                     STREAM, DGRAM, SEQPACKET, RAW
 *   pair.F            socketpair(F, SOCK_STREAM, 0)
 *   hi.F              socket((1 << 32) | F, SOCK_STREAM, 0): the kernel reads
 *                     int domain as F, the filter must not
 *   inet_packet       socket(AF_INET, SOCK_PACKET, 0) (a packet socket)
 *   i386.socket.F     socket(F) through int 0x80 (the 32-bit ABI)
 *   i386.socketcall.F socketcall(SYS_SOCKET, {F, SOCK_STREAM, 0}) (int 0x80)
 *   i386.socketpair   socketcall(SYS_SOCKETPAIR, {AF_UNIX, ...})
 *   i386              UNAVAILABLE when the kernel has no 32-bit ABI at run time
 *   x32.socket.F      socket(F) through the x32 ABI
 *   call.NAME         a system call with harmless arguments
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/net.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static const char *errname(int e)
{
	static char other[32];

	switch (e) {
	case 0: return "OK";
	case EPERM: return "EPERM";
	case ENOSYS: return "ENOSYS";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
	case ESOCKTNOSUPPORT: return "ESOCKTNOSUPPORT";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EINVAL: return "EINVAL";
	case EACCES: return "EACCES";
	case EFAULT: return "EFAULT";
	case EBADF: return "EBADF";
	case ENOENT: return "ENOENT";
	case ENOMEM: return "ENOMEM";
	case ESRCH: return "ESRCH";
	case ENODEV: return "ENODEV";
	case ENXIO: return "ENXIO";
	case ENOTDIR: return "ENOTDIR";
	case EMFILE: return "EMFILE";
	default:
		snprintf(other, sizeof(other), "E%d", e);
		return other;
	}
}

/* a result: a file descriptor (closed here), 0, or -1 with errno */
static void report(const char *name, long r)
{
	int e = r < 0 ? errno : 0;

	if (r > 2)
		close((int)r);
	printf("%s %s\n", name, errname(e));
}

/* the raw result of a 32-bit call: >= 0, or -errno */
static void report_raw(const char *name, long r)
{
	if (r >= 0) {
		close((int)r);
		printf("%s OK\n", name);
	} else {
		printf("%s %s\n", name, errname((int)-r));
	}
}

#if defined(__x86_64__)
/* a system call of the i386 ABI from this 64-bit process */
static long i386_call(long nr, long a, long b, long c)
{
	int ret;

	__asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory", "cc", "r8", "r9", "r10", "r11");
	return ret;
}

static sigjmp_buf no_ia32;

static void on_segv(int sig)
{
	(void)sig;
	siglongjmp(no_ia32, 1);
}

static void probe_x32(void)
{
	static const int fams[] = { AF_UNIX, AF_INET, AF_PACKET, AF_VSOCK };
	char name[64];

	for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
		snprintf(name, sizeof(name), "x32.socket.%d", fams[i]);
		report(name, syscall(0x40000000 | __NR_socket, fams[i], SOCK_STREAM, 0));
	}
}

static void probe_compat(void)
{
	static const int fams[] = { AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK, AF_ALG };
	/* socketcall's arguments: 32-bit words below 4 GiB */
	uint32_t *args = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
	char name[64];

	if (args == MAP_FAILED)
		return;
	/* a kernel without IA32 emulation at run time answers int 0x80 with a
	 * general protection fault */
	signal(SIGSEGV, on_segv);
	if (sigsetjmp(no_ia32, 1)) {
		printf("i386 UNAVAILABLE\n");
		signal(SIGSEGV, SIG_DFL);
		munmap(args, 4096);
		return;
	}
	i386_call(20 /* getpid */, 0, 0, 0);
	signal(SIGSEGV, SIG_DFL);
	for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
		snprintf(name, sizeof(name), "i386.socket.%d", fams[i]);
		report_raw(name, i386_call(359, fams[i], fams[i] == AF_PACKET ? SOCK_DGRAM : SOCK_STREAM, 0));
		args[0] = (uint32_t)fams[i];
		args[1] = fams[i] == AF_PACKET ? SOCK_DGRAM : SOCK_STREAM;
		args[2] = 0;
		snprintf(name, sizeof(name), "i386.socketcall.%d", fams[i]);
		report_raw(name, i386_call(102, SYS_SOCKET, (long)(uintptr_t)args, 0));
	}
	args[0] = AF_UNIX;
	args[1] = SOCK_STREAM;
	args[2] = 0;
	args[3] = 0;
	report_raw("i386.socketpair", i386_call(102, SYS_SOCKETPAIR, (long)(uintptr_t)args, 0));
	report_raw("i386.unshare", i386_call(310, 0x10000000 /* CLONE_NEWUSER */, 0, 0));
	munmap(args, 4096);
}
#else
static void probe_compat(void)
{
}

static void probe_x32(void)
{
}
#endif

static void probe_sockets(void)
{
	static const int types[] = { SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET, SOCK_RAW };
	char name[64];
	int sv[2];

	for (int f = 0; f < 64; f++) {
		for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
			snprintf(name, sizeof(name), "family.%d.%d", f, types[t]);
			report(name, socket(f, types[t], 0));
		}
		snprintf(name, sizeof(name), "pair.%d", f);
		if (socketpair(f, SOCK_STREAM, 0, sv) == 0) {
			close(sv[0]);
			close(sv[1]);
			printf("%s OK\n", name);
		} else {
			printf("%s %s\n", name, errname(errno));
		}
	}
	report("inet_stream_flags", socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
	report("inet_packet", socket(AF_INET, SOCK_PACKET, 0));
	report("netlink_route", socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0 /* NETLINK_ROUTE */));
	for (int f = 0; f < 64; f += 1) {
		if (f != AF_UNIX && f != AF_INET && f != AF_VSOCK && f != AF_PACKET)
			continue;
		snprintf(name, sizeof(name), "hi.%d", f);
		report(name, syscall(__NR_socket, (1L << 32) | f, SOCK_STREAM, 0));
	}
}

static void probe_calls(void)
{
	char buf[64];
	unsigned long mask = 1;

#define CALL(name, expr) report((name), (expr) < 0 ? -1 : 0)
	CALL("call.memfd_secret", syscall(447, 0));
	CALL("call.modify_ldt", syscall(__NR_modify_ldt, 0, buf, sizeof(buf)));
	CALL("call.mbind", syscall(__NR_mbind, buf, 4096, 0, NULL, 0, 0));
	CALL("call.set_mempolicy", syscall(__NR_set_mempolicy, 0, NULL, 0));
	CALL("call.get_mempolicy", syscall(__NR_get_mempolicy, NULL, NULL, 0, NULL, 0));
	CALL("call.migrate_pages", syscall(__NR_migrate_pages, 0, 1, &mask, &mask));
	CALL("call.move_pages", syscall(__NR_move_pages, 0, 0, NULL, NULL, NULL, 0));
	CALL("call.name_to_handle_at", syscall(__NR_name_to_handle_at, AT_FDCWD, ".", NULL, NULL, 0));
	CALL("call.pkey_alloc", syscall(__NR_pkey_alloc, 0, 0));
	CALL("call.unshare0", syscall(__NR_unshare, 0));
	CALL("call.ptrace", syscall(__NR_ptrace, 2 /* PTRACE_PEEKDATA */, -1, 0, 0)); /* ESRCH unfiltered */
	CALL("call.io_uring_setup", syscall(__NR_io_uring_setup, 1, NULL));
	CALL("call.clone3", syscall(__NR_clone3, NULL, 0));
	report("call.fchmodat2", syscall(452, AT_FDCWD, "/nonexistent-sbxfs-probe", 0755, 0)); /* newer than the review */
	CALL("call.newest_plus_100", syscall(549, 0));
	report("call.personality_query", syscall(__NR_personality, 0xffffffffUL) < 0 ? -1 : 0);
	report("call.personality_norandom", syscall(__NR_personality, 0x0040000UL) < 0 ? -1 : 0);
	report("call.getpid", syscall(__NR_getpid) < 0 ? -1 : 0);
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	report("call.fork", p < 0 ? -1 : waitpid(p, NULL, 0) < 0 ? -1 : 0);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	probe_sockets();
	probe_x32();
	probe_compat();
	probe_calls();
	return fflush(stdout) ? 1 : 0;
}
