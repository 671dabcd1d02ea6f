/* SPDX-License-Identifier: MIT */
/*
 * filter_test.c - the sandboxes' seccomp policy (providers/filter.c), run
 * through a classic-BPF interpreter: every architecture and argument a
 * hostile job could use, including the ones this machine's kernel may not
 * run (i386 and x32 system calls, a foreign architecture), with exact
 * results.  Checked twice: on the BPF program local sandboxes load, and on
 * a filter built from the Docker profile the way runc builds it (libseccomp,
 * one rule per name, the same-argument split), which is what containers get.
 * The last line is "N passed, N failed".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <jansson.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/net.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../common/buf.h"
#include "../../providers/filter.h"
#include "check.h"

#define ALLOW SECCOMP_RET_ALLOW
#define ERRNO(e) (SECCOMP_RET_ERRNO | (e))
#define KILL_PROCESS SECCOMP_RET_KILL_PROCESS
#define BAD 0xdeadbeefu /* the interpreter met an instruction it does not know */

#define X32 0x40000000u

struct prog {
	const struct sock_filter *v;
	size_t n;
};

/* seccomp_data: nr, arch, instruction_pointer, args[6] (little-endian words) */
static uint32_t word(int nr, uint32_t arch, const uint64_t args[6], uint32_t off)
{
	if (off == 0)
		return (uint32_t)nr;
	if (off == 4)
		return arch;
	if (off >= 16 && off < 64)
		return (uint32_t)(args[(off - 16) / 8] >> ((off - 16) % 8 ? 32 : 0));
	return 0;
}

static uint32_t run(const struct prog *p, uint32_t arch, int nr, uint64_t a0, uint64_t a1)
{
	uint64_t args[6] = { a0, a1, 0, 0, 0, 0 };
	uint32_t A = 0, X = 0, M[BPF_MEMWORDS] = { 0 };

	for (size_t pc = 0; pc < p->n; pc++) {
		const struct sock_filter *f = &p->v[pc];
		uint32_t src = BPF_SRC(f->code) == BPF_X ? X : f->k;

		switch (BPF_CLASS(f->code)) {
		case BPF_LD:
			if (BPF_MODE(f->code) == BPF_ABS)
				A = word(nr, arch, args, f->k);
			else if (BPF_MODE(f->code) == BPF_IMM)
				A = f->k;
			else if (BPF_MODE(f->code) == BPF_MEM)
				A = M[f->k % BPF_MEMWORDS];
			else
				return BAD;
			break;
		case BPF_LDX:
			X = BPF_MODE(f->code) == BPF_MEM ? M[f->k % BPF_MEMWORDS] : f->k;
			break;
		case BPF_ST:
			M[f->k % BPF_MEMWORDS] = A;
			break;
		case BPF_STX:
			M[f->k % BPF_MEMWORDS] = X;
			break;
		case BPF_ALU:
			switch (BPF_OP(f->code)) {
			case BPF_AND: A &= src; break;
			case BPF_OR: A |= src; break;
			case BPF_ADD: A += src; break;
			case BPF_SUB: A -= src; break;
			case BPF_RSH: A >>= src; break;
			case BPF_LSH: A <<= src; break;
			default: return BAD;
			}
			break;
		case BPF_JMP:
			switch (BPF_OP(f->code)) {
			case BPF_JA: pc += f->k; break;
			case BPF_JEQ: pc += A == src ? f->jt : f->jf; break;
			case BPF_JGT: pc += A > src ? f->jt : f->jf; break;
			case BPF_JGE: pc += A >= src ? f->jt : f->jf; break;
			case BPF_JSET: pc += (A & src) ? f->jt : f->jf; break;
			default: return BAD;
			}
			break;
		case BPF_RET:
			return BPF_RVAL(f->code) == BPF_A ? A : f->k;
		case BPF_MISC:
			if (BPF_MISCOP(f->code) == BPF_TAX)
				X = A;
			else
				A = X;
			break;
		default:
			return BAD;
		}
	}
	return BAD; /* fell off the end */
}

/* What both the local filter and the containers' must do. */
static void check_policy(const struct prog *p, const char *what)
{
	static const int allowed[] = { AF_UNIX, AF_INET, AF_INET6, AF_NETLINK };
	int before = failed;

	/* every family on x86-64, x32 and i386's socket(2), socket and socketpair */
	for (uint64_t f = 0; f < 64; f++) {
		uint32_t want = ERRNO(EAFNOSUPPORT);
		for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
			if (f == (uint64_t)allowed[i])
				want = ALLOW;
		CHECK(run(p, AUDIT_ARCH_X86_64, 41, f, SOCK_STREAM) == want);
		CHECK(run(p, AUDIT_ARCH_X86_64, 41, f, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK) == want);
		CHECK(run(p, AUDIT_ARCH_X86_64, 53, f, SOCK_STREAM) == want);
		CHECK(run(p, AUDIT_ARCH_X86_64, X32 | 41, f, SOCK_STREAM) == want);
		CHECK(run(p, AUDIT_ARCH_I386, 359, f, SOCK_STREAM) == want);
		CHECK(run(p, AUDIT_ARCH_I386, 360, f, SOCK_STREAM) == want);
	}
	/* the kernel reads int domain: high bits must not let AF_VSOCK (40) through */
	CHECK(run(p, AUDIT_ARCH_X86_64, 41, (1ULL << 32) | 40, SOCK_STREAM) == ERRNO(EAFNOSUPPORT));
	CHECK(run(p, AUDIT_ARCH_X86_64, 41, (1ULL << 32) | AF_INET, SOCK_STREAM) == ERRNO(EAFNOSUPPORT));
	CHECK(run(p, AUDIT_ARCH_X86_64, 41, UINT64_MAX, SOCK_STREAM) == ERRNO(EAFNOSUPPORT));
	CHECK(run(p, AUDIT_ARCH_X86_64, 41, 0xffffffffULL, SOCK_STREAM) == ERRNO(EAFNOSUPPORT));
	/* socket(AF_INET, SOCK_PACKET) is a packet socket */
	CHECK(run(p, AUDIT_ARCH_X86_64, 41, AF_INET, 10) == ERRNO(EAFNOSUPPORT));
	CHECK(run(p, AUDIT_ARCH_X86_64, 41, AF_INET, 10 | SOCK_CLOEXEC) == ERRNO(EAFNOSUPPORT));
	CHECK(run(p, AUDIT_ARCH_I386, 359, AF_INET, 10) == ERRNO(EAFNOSUPPORT));
	/* i386's socketcall: creating a socket through it is refused whatever
	 * the pointer (libseccomp once compared the pointer's bit 3 here) */
	for (uint64_t ptr = 0x10000; ptr < 0x10010; ptr++) {
		CHECK(run(p, AUDIT_ARCH_I386, 102, SYS_SOCKET, ptr) == ERRNO(EAFNOSUPPORT));
		CHECK(run(p, AUDIT_ARCH_I386, 102, SYS_SOCKETPAIR, ptr) == ERRNO(EAFNOSUPPORT));
	}
	CHECK(run(p, AUDIT_ARCH_I386, 102, SYS_CONNECT, 0x10000) == ALLOW);
	CHECK(run(p, AUDIT_ARCH_I386, 102, SYS_SEND, 0x10000) == ALLOW);
	CHECK(run(p, AUDIT_ARCH_I386, 102, SYS_SENDMMSG, 0x10000) == ALLOW);
	CHECK(run(p, AUDIT_ARCH_I386, 102, 21, 0x10000) == ERRNO(EPERM));
	/* the calls issue 19 found looser than Docker's default, and others */
	CHECK(run(p, AUDIT_ARCH_X86_64, 447, 0, 0) == ERRNO(ENOSYS));  /* memfd_secret */
	CHECK(run(p, AUDIT_ARCH_X86_64, 154, 0, 0) == ERRNO(ENOSYS));  /* modify_ldt */
	CHECK(run(p, AUDIT_ARCH_I386, 123, 0, 0) == ERRNO(ENOSYS));    /* modify_ldt */
	CHECK(run(p, AUDIT_ARCH_X86_64, 237, 0, 0) == ERRNO(EPERM));   /* mbind */
	CHECK(run(p, AUDIT_ARCH_X86_64, 238, 0, 0) == ERRNO(EPERM));   /* set_mempolicy */
	CHECK(run(p, AUDIT_ARCH_X86_64, 239, 0, 0) == ERRNO(EPERM));   /* get_mempolicy */
	CHECK(run(p, AUDIT_ARCH_X86_64, 256, 0, 0) == ERRNO(EPERM));   /* migrate_pages */
	CHECK(run(p, AUDIT_ARCH_X86_64, 279, 0, 0) == ERRNO(EPERM));   /* move_pages */
	CHECK(run(p, AUDIT_ARCH_X86_64, 303, 0, 0) == ERRNO(EPERM));   /* name_to_handle_at */
	CHECK(run(p, AUDIT_ARCH_X86_64, 330, 0, 0) == ERRNO(EPERM));   /* pkey_alloc */
	CHECK(run(p, AUDIT_ARCH_X86_64, 101, 0, 0) == ERRNO(EPERM));   /* ptrace */
	CHECK(run(p, AUDIT_ARCH_X86_64, 425, 0, 0) == ERRNO(EPERM));   /* io_uring_setup */
	CHECK(run(p, AUDIT_ARCH_X86_64, 272, 0, 0) == ERRNO(EPERM));   /* unshare, any flags */
	CHECK(run(p, AUDIT_ARCH_I386, 310, 0, 0) == ERRNO(EPERM));     /* unshare */
	CHECK(run(p, AUDIT_ARCH_X86_64, X32 | 272, 0, 0) == ERRNO(EPERM));
	CHECK(run(p, AUDIT_ARCH_X86_64, 435, 0, 0) == ERRNO(ENOSYS));  /* clone3 */
	CHECK(run(p, AUDIT_ARCH_X86_64, 56, 0x3d0f00, 0) == ALLOW);    /* clone: a thread */
	CHECK(run(p, AUDIT_ARCH_X86_64, 56, 0x11 /* SIGCHLD: fork */, 0) == ALLOW);
	CHECK(run(p, AUDIT_ARCH_X86_64, 56, 0x10000000 | 0x11, 0) == ERRNO(EPERM)); /* CLONE_NEWUSER */
	CHECK(run(p, AUDIT_ARCH_X86_64, 56, 0x40000000 | 0x11, 0) == ERRNO(EPERM)); /* CLONE_NEWNET */
	CHECK(run(p, AUDIT_ARCH_I386, 120, 0x10000000, 0) == ERRNO(EPERM));
	CHECK(run(p, AUDIT_ARCH_X86_64, 135, 0, 0) == ALLOW);          /* personality */
	CHECK(run(p, AUDIT_ARCH_X86_64, 135, 0xffffffff, 0) == ALLOW);
	CHECK(run(p, AUDIT_ARCH_X86_64, 135, 0x20008, 0) == ALLOW);
	CHECK(run(p, AUDIT_ARCH_X86_64, 135, 0x0040000, 0) == ERRNO(EPERM));
	CHECK(run(p, AUDIT_ARCH_X86_64, 165, 0, 0) == ERRNO(EPERM));   /* mount */
	CHECK(run(p, AUDIT_ARCH_X86_64, 0, 0, 0) == ALLOW);            /* read */
	CHECK(run(p, AUDIT_ARCH_X86_64, 59, 0, 0) == ALLOW);           /* execve */
	CHECK(run(p, AUDIT_ARCH_X86_64, X32 | 0, 0, 0) == ALLOW);
	CHECK(run(p, AUDIT_ARCH_X86_64, X32 | 512, 0, 0) == ALLOW);    /* x32's rt_sigaction */
	CHECK(run(p, AUDIT_ARCH_I386, 3, 0, 0) == ALLOW);              /* read */
	CHECK(run(p, AUDIT_ARCH_X86_64, 449, 0, 0) == ALLOW);          /* futex_waitv: the newest reviewed */
	CHECK(run(p, AUDIT_ARCH_X86_64, 450, 0, 0) == ERRNO(EPERM));   /* set_mempolicy_home_node */
	CHECK(run(p, 0x40000028 /* AUDIT_ARCH_ARM */, 0, 0, 0) == KILL_PROCESS || run(p, 0x40000028, 0, 0, 0) ==
		SECCOMP_RET_KILL_THREAD);
	if (failed != before)
		fprintf(stderr, "  (%s)\n", what);
}

static void check_local(void)
{
	struct buf b = BUF_INIT(1 << 20);
	char err[256] = "";
	struct prog p;

	CHECK(filter_build(&b, err, sizeof(err)) == 0);
	if (!b.len) {
		fprintf(stderr, "filter_build: %s\n", err);
		return;
	}
	p = (struct prog){ (const struct sock_filter *)b.ptr, b.len / sizeof(struct sock_filter) };
	CHECK(p.n <= BPF_MAXINSNS);
	check_policy(&p, "the local filter");
	/* newer than the review: ENOSYS, so libc falls back (as runc does it) */
	CHECK(run(&p, AUDIT_ARCH_X86_64, 452, 0, 0) == ERRNO(ENOSYS)); /* fchmodat2 */
	CHECK(run(&p, AUDIT_ARCH_X86_64, 470, 0, 0) == ERRNO(ENOSYS));
	CHECK(run(&p, AUDIT_ARCH_I386, 452, 0, 0) == ERRNO(ENOSYS));
	CHECK(run(&p, AUDIT_ARCH_X86_64, X32 | 600, 0, 0) == ERRNO(ENOSYS));
	printf("local filter: %zu instructions\n", p.n);
	buf_free(&b);
}

/* The profile as runc turns it into a filter (libcontainer/seccomp):
 * libseccomp's rule_add per name, a rule whose action is the default one
 * skipped, comparisons of one argument split into rules of their own. */
static scmp_filter_ctx runc_filter(json_t *prof)
{
	json_t *calls = json_object_get(prof, "syscalls"), *arches = json_object_get(prof, "architectures"), *c, *a;
	uint32_t def = SCMP_ACT_ERRNO((uint32_t)json_integer_value(json_object_get(prof, "defaultErrnoRet")));
	scmp_filter_ctx ctx = seccomp_init(def);
	size_t i, k;

	CHECK(!strcmp(json_string_value(json_object_get(prof, "defaultAction")), "SCMP_ACT_ERRNO"));
	json_array_foreach(arches, i, a) {
		char name[32];
		size_t j;
		const char *s = json_string_value(a) + strlen("SCMP_ARCH_");
		for (j = 0; s[j] && j < sizeof(name) - 1; j++)
			name[j] = (char)(s[j] >= 'A' && s[j] <= 'Z' ? s[j] - 'A' + 'a' : s[j]);
		name[j] = '\0';
		int rc = seccomp_arch_add(ctx, seccomp_arch_resolve_name(name));
		CHECK(rc == 0 || rc == -EEXIST);
	}
	json_array_foreach(calls, i, c) {
		json_t *names = json_object_get(c, "names"), *args = json_object_get(c, "args"), *n, *x;
		const char *action = json_string_value(json_object_get(c, "action"));
		uint32_t act = !strcmp(action, "SCMP_ACT_ALLOW") ?
				       SCMP_ACT_ALLOW :
				       SCMP_ACT_ERRNO((uint32_t)json_integer_value(json_object_get(c, "errnoRet")));
		struct scmp_arg_cmp cmp[6];
		unsigned seen = 0, nc = 0;

		json_array_foreach(args, k, x) {
			unsigned idx = (unsigned)json_integer_value(json_object_get(x, "index"));
			const char *op = json_string_value(json_object_get(x, "op"));
			enum scmp_compare o = !strcmp(op, "SCMP_CMP_EQ") ? SCMP_CMP_EQ :
					      !strcmp(op, "SCMP_CMP_GT") ? SCMP_CMP_GT :
					      !strcmp(op, "SCMP_CMP_MASKED_EQ") ? SCMP_CMP_MASKED_EQ : _SCMP_CMP_MIN;
			CHECK(o != _SCMP_CMP_MIN);
			CHECK(!(seen & (1u << idx))); /* runc would OR them */
			seen |= 1u << idx;
			cmp[nc++] = (struct scmp_arg_cmp){ idx, o, (uint64_t)json_integer_value(json_object_get(x, "value")),
				(uint64_t)json_integer_value(json_object_get(x, "valueTwo")) };
		}
		if (act == def)
			continue;
		json_array_foreach(names, k, n) {
			int nr = seccomp_syscall_resolve_name(json_string_value(n));
			if (nr == __NR_SCMP_ERROR)
				continue;
			int rc = seccomp_rule_add_array(ctx, act, nr, nc, cmp);
			if (rc)
				fprintf(stderr, "runc would fail on %s: %s\n", json_string_value(n), strerror(-rc));
			CHECK(rc == 0);
		}
	}
	return ctx;
}

static void check_profile(void)
{
	struct buf b = BUF_INIT(1 << 20), bpf = BUF_INIT(1 << 20);
	char err[256] = "", chunk[4096];
	json_error_t jerr;
	json_t *prof;
	scmp_filter_ctx ctx;
	ssize_t n;
	int fd;

	CHECK(filter_profile(&b, err, sizeof(err)) == 0);
	prof = b.len ? json_loadb(b.ptr, b.len, 0, &jerr) : NULL;
	CHECK(prof != NULL);
	if (!prof)
		return;
	printf("container profile: %zu bytes\n", b.len);
	ctx = runc_filter(prof);
	fd = memfd_create("filter_test", MFD_CLOEXEC);
	CHECK(fd >= 0 && seccomp_export_bpf(ctx, fd) == 0 && lseek(fd, 0, SEEK_SET) == 0);
	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		CHECK(buf_add(&bpf, chunk, (size_t)n) == 0);
	close(fd);
	struct prog p = { (const struct sock_filter *)bpf.ptr, bpf.len / sizeof(struct sock_filter) };
	check_policy(&p, "the container profile under runc");
	seccomp_release(ctx);
	json_decref(prof);
	buf_free(&b);
	buf_free(&bpf);
}

int main(void)
{
	check_local();
	check_profile();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
