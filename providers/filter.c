/* SPDX-License-Identifier: MIT */
/*
 * filter.c - the system-call policy of sandboxes (see filter.h): its tables,
 * the list of rules made from them (filter_rules_make), and the two outputs
 * of that one list: a libseccomp filter exported to BPF for local sandboxes,
 * and a Docker seccomp profile for containers.
 *
 * Why Docker's model (deny by default, allow what libseccomp knows less a
 * deny table) and not our own allow list: a sandbox runs whatever an agent
 * installs, so the allow side must follow the kernel rather than a list we
 * keep; what the table must get right is the calls that reach kernel code a
 * sandboxed uid has no business with.  Docker 20.10's default profile (the
 * engine sbxfs supports) is the floor: everything it denies to a container
 * without capabilities is denied here too (docs/security.md has the table),
 * and then some.  System calls newer than the review (filter_newest) fail
 * with ENOSYS, as runc makes them fail under Docker: libc falls back, and a
 * new kernel interface is not open to sandboxes before someone looked at it.
 *
 * Rules and libseccomp, the points that decide how the table is written:
 * - one rule may compare an argument only once (libseccomp 2.5 refuses a
 *   second comparison; runc splits such a rule into several, i.e. ORs them),
 *   so "family not in the list" is written as allow rules for each allowed
 *   family plus deny rules that cover every other value;
 * - the kernel reads socket()'s `int domain` as 32 bits, seccomp sees the
 *   64-bit register: the rules compare all 64 bits, so a value with high bits
 *   set matches no allow rule and falls into "greater than the highest
 *   allowed family" (EAFNOSUPPORT), and never slips past an equality test;
 * - on x86, libseccomp turns a rule on socket() into one on socketcall(2)
 *   too, where the arguments are in memory: it drops the family comparison
 *   and keeps the others at the wrong places (an allow rule on socket()
 *   became "socketcall(SYS_SOCKET) allowed when the pointer has bit 3
 *   clear").  So socketcall's SYS_SOCKET and SYS_SOCKETPAIR get their own
 *   deny rules first, with the errno the socket() deny rules use: the
 *   translated deny rules are then the same rule, the translated allow
 *   rules are shadowed by it.  32-bit programs that create sockets through
 *   socketcall get EAFNOSUPPORT; socket(2) (x86 has it since Linux 4.3) is
 *   filtered by family as on x86-64.  x32 has no socketcall;
 * - rules with libseccomp's default action (EPERM, unconditional) are
 *   left out of the BPF (libseccomp refuses them) but stay in the profile
 *   and count for the newest-call bound, as runc counts them.
 */
#define _GNU_SOURCE
#include "filter.h"

#include <errno.h>
#include <jansson.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/net.h>
#include <sched.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define FILTER_ALLOW (-1)            /* a rule's action: allow (otherwise an errno) */
#define FILTER_MAX_RULES 1024
#define FILTER_NR_SCAN 1024          /* system call numbers looked up per architecture */
#define FILTER_X32_BIT 0x40000000u
/* socket()'s type: SOCK_PACKET (10) is the only type with bit 3 set, and the
 * kernel turns socket(AF_INET, SOCK_PACKET) into a packet socket */
#define FILTER_SOCK_TYPE_BIT 0x8u
#define FILTER_NS_FLAGS                                                                                         \
	((uint64_t)(CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | \
		    CLONE_NEWNET))

/* The newest system call this table was reviewed against (Linux 5.16, the
 * newest one Docker 20.10's profile names).  Since Linux 5.1 new calls have
 * the same number on every architecture, so one name bounds them all: a
 * call numbered above it fails with ENOSYS until the table is reviewed
 * again and this line moves. */
static const char filter_newest[] = "futex_waitv";

/* The socket families a sandbox may create: all are network-namespaced (a
 * sandbox in its own namespace reaches only what it has there; netlink
 * protocols the kernel keeps to the initial namespace refuse other ones). */
static const int filter_families[] = { AF_UNIX, AF_INET, AF_INET6, AF_NETLINK };

/* personality(2) values Docker allows: Linux, PER_LINUX32, UNAME26, both,
 * and the query 0xffffffff. */
static const uint64_t filter_personas[] = { 0x0, 0x8, 0x20000, 0x20008, 0xffffffff };

struct filter_deny {
	const char *name;
	int err;
};

/* Denied calls, whatever their arguments.  EPERM as under Docker; ENOSYS
 * where a kernel may lack the call, which programs handle.  Names this
 * machine's libseccomp does not know are skipped. */
static const struct filter_deny filter_denied[] = {
	/* mounts: a sandbox's view of the filesystem is fixed */
	{ "mount", EPERM }, { "umount", EPERM }, { "umount2", EPERM }, { "pivot_root", EPERM }, { "chroot", EPERM },
	{ "move_mount", EPERM }, { "open_tree", EPERM }, { "fsopen", EPERM }, { "fsconfig", EPERM },
	{ "fsmount", EPERM }, { "fspick", EPERM }, { "mount_setattr", EPERM },
	/* namespaces (clone: by flags, below) and the host's names */
	{ "unshare", EPERM }, { "setns", EPERM }, { "sethostname", EPERM }, { "setdomainname", EPERM },
	/* the kernel's keyrings */
	{ "keyctl", EPERM }, { "add_key", EPERM }, { "request_key", EPERM },
	/* other processes */
	{ "ptrace", EPERM }, { "process_vm_readv", EPERM }, { "process_vm_writev", EPERM }, { "kcmp", EPERM },
	{ "pidfd_getfd", EPERM }, { "process_madvise", EPERM },
	/* the kernel's internals: bpf, perf, io_uring, userfaultfd, handles */
	{ "bpf", EPERM }, { "perf_event_open", EPERM }, { "userfaultfd", EPERM }, { "lookup_dcookie", EPERM },
	{ "io_uring_setup", EPERM }, { "io_uring_enter", EPERM }, { "io_uring_register", EPERM },
	{ "fanotify_init", EPERM }, { "name_to_handle_at", EPERM }, { "open_by_handle_at", EPERM },
	/* memory placement: NUMA policy and page migration, protection keys */
	{ "mbind", EPERM }, { "set_mempolicy", EPERM }, { "get_mempolicy", EPERM }, { "migrate_pages", EPERM },
	{ "move_pages", EPERM }, { "set_mempolicy_home_node", EPERM }, { "pkey_alloc", EPERM },
	{ "pkey_free", EPERM }, { "pkey_mprotect", EPERM },
	/* optional features a kernel may lack: programs expect ENOSYS */
	{ "memfd_secret", ENOSYS }, { "modify_ldt", ENOSYS }, { "vm86", ENOSYS }, { "vm86old", ENOSYS },
	/* the machine */
	{ "kexec_load", EPERM }, { "kexec_file_load", EPERM }, { "init_module", EPERM }, { "finit_module", EPERM },
	{ "delete_module", EPERM }, { "reboot", EPERM }, { "swapon", EPERM }, { "swapoff", EPERM },
	{ "acct", EPERM }, { "quotactl", EPERM }, { "quotactl_fd", EPERM }, { "syslog", EPERM },
	{ "iopl", EPERM }, { "ioperm", EPERM }, { "settimeofday", EPERM }, { "stime", EPERM },
	{ "clock_settime", EPERM }, { "clock_settime64", EPERM }, { "clock_adjtime", EPERM }, { "vhangup", EPERM },
	{ "ustat", EPERM }, { "sysfs", EPERM }, { "uselib", EPERM }, { "_sysctl", EPERM }, { "bdflush", EPERM },
	/* x86's pre-POSIX calls (libc uses their successors) */
	{ "sigaction", EPERM }, { "signal", EPERM }, { "sigpending", EPERM }, { "sigsuspend", EPERM },
	{ "sgetmask", EPERM }, { "ssetmask", EPERM }, { "nice", EPERM }, { "readdir", EPERM },
	{ "oldstat", EPERM }, { "oldfstat", EPERM }, { "oldlstat", EPERM }, { "olduname", EPERM },
	{ "oldolduname", EPERM }, { "ulimit", EPERM }, { "idle", EPERM },
	/* numbers the kernel never implemented or removed */
	{ "create_module", ENOSYS }, { "get_kernel_syms", ENOSYS }, { "query_module", ENOSYS },
	{ "nfsservctl", ENOSYS }, { "afs_syscall", ENOSYS }, { "getpmsg", ENOSYS }, { "putpmsg", ENOSYS },
	{ "security", ENOSYS }, { "tuxcall", ENOSYS }, { "vserver", ENOSYS }, { "break", ENOSYS },
	{ "ftime", ENOSYS }, { "gtty", ENOSYS }, { "stty", ENOSYS }, { "lock", ENOSYS }, { "mpx", ENOSYS },
	{ "prof", ENOSYS }, { "profil", ENOSYS },
	{ NULL, 0 },
};

/* Calls with rules on their arguments (below), kept out of the plain allow list. */
static const char *const filter_conditional[] = { "socket", "socketpair", "socketcall", "clone", "clone3",
	"personality", NULL };

struct filter_arch {
	uint32_t token;     /* libseccomp's */
	const char *oci;    /* the profile's name, NULL: the profile names no architecture */
	uint32_t audit;     /* AUDIT_ARCH_* the kernel reports */
	uint32_t nr_base;   /* x32: its numbers have bit 30 set */
};

#if defined(__x86_64__)
static const struct filter_arch filter_arches[] = {
	{ SCMP_ARCH_X86_64, "SCMP_ARCH_X86_64", AUDIT_ARCH_X86_64, 0 },
	{ SCMP_ARCH_X86, "SCMP_ARCH_X86", AUDIT_ARCH_I386, 0 },
	{ SCMP_ARCH_X32, "SCMP_ARCH_X32", AUDIT_ARCH_X86_64, FILTER_X32_BIT },
};
#elif defined(__aarch64__)
static const struct filter_arch filter_arches[] = {
	{ SCMP_ARCH_AARCH64, "SCMP_ARCH_AARCH64", AUDIT_ARCH_AARCH64, 0 },
	{ SCMP_ARCH_ARM, "SCMP_ARCH_ARM", AUDIT_ARCH_ARM, 0 },
};
#else
/* another machine: its native ABI only (libseccomp's tokens are the
 * AUDIT_ARCH values there) */
static const struct filter_arch filter_arches[] = { { SCMP_ARCH_NATIVE, NULL, 0, 0 } };
#endif
#define FILTER_N_ARCHES (sizeof(filter_arches) / sizeof(filter_arches[0]))

struct filter_cmp {
	unsigned arg;
	enum scmp_compare op;
	uint64_t a, b; /* libseccomp's datum_a and datum_b (MASKED_EQ: mask, value) */
};

struct filter_rule {
	const char *name;
	int action;    /* FILTER_ALLOW or an errno */
	unsigned n;    /* comparisons, each on another argument */
	struct filter_cmp cmp[2];
};

/* The rules in the order they must be added (libseccomp is sensitive to it,
 * see the top of the file), and the names of the allow list (libseccomp's
 * strings, owned). */
struct filter_rules {
	struct filter_rule v[FILTER_MAX_RULES];
	size_t n;
	char *names[FILTER_MAX_RULES];
	size_t n_names;
};

static int filter_add(struct filter_rules *r, const char *name, int action, unsigned n, struct filter_cmp c0,
	struct filter_cmp c1)
{
	if (r->n >= FILTER_MAX_RULES)
		return -1;
	r->v[r->n++] = (struct filter_rule){ name, action, n, { c0, c1 } };
	return 0;
}

#define CMP_NONE ((struct filter_cmp){ 0, SCMP_CMP_EQ, 0, 0 })
#define CMP(arg, op, a, b) ((struct filter_cmp){ (arg), (op), (a), (b) })

static bool filter_family_allowed(uint64_t v)
{
	for (size_t i = 0; i < sizeof(filter_families) / sizeof(filter_families[0]); i++)
		if ((uint64_t)filter_families[i] == v)
			return true;
	return false;
}

/* socket() or socketpair(): every value of the family is covered by one
 * rule, so none depends on the default. */
static int filter_socket_rules(struct filter_rules *r, const char *call)
{
	uint64_t top = 0;
	int e = 0;

	for (size_t i = 0; i < sizeof(filter_families) / sizeof(filter_families[0]); i++)
		if ((uint64_t)filter_families[i] > top)
			top = (uint64_t)filter_families[i];
	e |= filter_add(r, call, EAFNOSUPPORT, 1, CMP(0, SCMP_CMP_GT, top, 0), CMP_NONE);
	for (uint64_t v = 0; v < top; v++)
		if (!filter_family_allowed(v))
			e |= filter_add(r, call, EAFNOSUPPORT, 1, CMP(0, SCMP_CMP_EQ, v, 0), CMP_NONE);
	for (size_t i = 0; i < sizeof(filter_families) / sizeof(filter_families[0]); i++) {
		uint64_t f = (uint64_t)filter_families[i];
		e |= filter_add(r, call, FILTER_ALLOW, 2, CMP(0, SCMP_CMP_EQ, f, 0),
			CMP(1, SCMP_CMP_MASKED_EQ, FILTER_SOCK_TYPE_BIT, 0));
		e |= filter_add(r, call, EAFNOSUPPORT, 2, CMP(0, SCMP_CMP_EQ, f, 0),
			CMP(1, SCMP_CMP_MASKED_EQ, FILTER_SOCK_TYPE_BIT, FILTER_SOCK_TYPE_BIT));
	}
	return e ? -1 : 0;
}

static int filter_arg_rules(struct filter_rules *r)
{
	int e = 0;

	/* x86's multiplexer first (see the top of the file) */
	e |= filter_add(r, "socketcall", EAFNOSUPPORT, 1, CMP(0, SCMP_CMP_EQ, SYS_SOCKET, 0), CMP_NONE);
	e |= filter_add(r, "socketcall", EAFNOSUPPORT, 1, CMP(0, SCMP_CMP_EQ, SYS_SOCKETPAIR, 0), CMP_NONE);
	for (uint64_t call = SYS_BIND; call <= SYS_SENDMMSG; call++)
		if (call != SYS_SOCKETPAIR)
			e |= filter_add(r, "socketcall", FILTER_ALLOW, 1, CMP(0, SCMP_CMP_EQ, call, 0), CMP_NONE);
	e |= filter_socket_rules(r, "socket");
	e |= filter_socket_rules(r, "socketpair");
	/* no new namespaces: clone without any CLONE_NEW* flag (flags are the
	 * first argument on every architecture listed above) */
	e |= filter_add(r, "clone", FILTER_ALLOW, 1, CMP(0, SCMP_CMP_MASKED_EQ, FILTER_NS_FLAGS, 0), CMP_NONE);
	/* clone3's flags are in memory, out of a filter's reach: ENOSYS makes
	 * libc fall back to clone */
	e |= filter_add(r, "clone3", ENOSYS, 0, CMP_NONE, CMP_NONE);
	for (size_t i = 0; i < sizeof(filter_personas) / sizeof(filter_personas[0]); i++)
		e |= filter_add(r, "personality", FILTER_ALLOW, 1, CMP(0, SCMP_CMP_EQ, filter_personas[i], 0), CMP_NONE);
	return e ? -1 : 0;
}

static bool filter_special(const char *name)
{
	for (int i = 0; filter_conditional[i]; i++)
		if (!strcmp(filter_conditional[i], name))
			return true;
	for (int i = 0; filter_denied[i].name; i++)
		if (!strcmp(filter_denied[i].name, name))
			return true;
	return false;
}

static uint32_t filter_token(const struct filter_arch *a)
{
	return a->token == SCMP_ARCH_NATIVE ? seccomp_arch_native() : a->token;
}

static uint32_t filter_audit(const struct filter_arch *a)
{
	return a->audit ? a->audit : seccomp_arch_native();
}

/* Every call libseccomp knows on one of the architectures, up to
 * filter_newest, that has no rule of its own. */
static int filter_known(struct filter_rules *r)
{
	for (size_t i = 0; i < FILTER_N_ARCHES; i++) {
		uint32_t token = filter_token(&filter_arches[i]);
		int newest = seccomp_syscall_resolve_name_arch(token, filter_newest);

		for (uint32_t n = 0; n < FILTER_NR_SCAN; n++) {
			int nr = (int)(filter_arches[i].nr_base | n);
			char *name;
			bool seen = false;

			/* a libseccomp older than the review knows nothing past it */
			if (newest >= 0 && nr > newest)
				break;
			name = seccomp_syscall_resolve_num_arch(token, nr);
			if (!name)
				continue;
			for (size_t k = 0; k < r->n_names && !seen; k++)
				seen = !strcmp(r->names[k], name);
			if (seen || filter_special(name)) {
				free(name);
				continue;
			}
			if (r->n_names >= FILTER_MAX_RULES) {
				free(name);
				return -1;
			}
			r->names[r->n_names++] = name;
		}
	}
	return 0;
}

static void filter_rules_free(struct filter_rules *r)
{
	for (size_t i = 0; i < r->n_names; i++)
		free(r->names[i]);
	free(r);
}

static struct filter_rules *filter_rules_make(char *err, size_t errlen)
{
	struct filter_rules *r = calloc(1, sizeof(*r));
	int e;

	if (!r) {
		snprintf(err, errlen, "seccomp: out of memory");
		return NULL;
	}
	e = filter_arg_rules(r);
	for (int i = 0; !e && filter_denied[i].name; i++)
		e = filter_add(r, filter_denied[i].name, filter_denied[i].err, 0, CMP_NONE, CMP_NONE);
	if (!e)
		e = filter_known(r);
	for (size_t i = 0; !e && i < r->n_names; i++)
		e = filter_add(r, r->names[i], FILTER_ALLOW, 0, CMP_NONE, CMP_NONE);
	if (e) {
		snprintf(err, errlen, "seccomp: more than %d rules", FILTER_MAX_RULES);
		filter_rules_free(r);
		return NULL;
	}
	return r;
}

/* ---- the BPF filter of local sandboxes --------------------------------------------------- */

static uint32_t filter_action(int action)
{
	return action == FILTER_ALLOW ? SCMP_ACT_ALLOW : SCMP_ACT_ERRNO((uint32_t)action);
}

static int filter_ctx_rules(scmp_filter_ctx ctx, const struct filter_rules *r, char *err, size_t errlen)
{
	for (size_t i = 0; i < r->n; i++) {
		const struct filter_rule *ru = &r->v[i];
		struct scmp_arg_cmp c[2];
		int nr = seccomp_syscall_resolve_name(ru->name), rc;

		if (nr == __NR_SCMP_ERROR || (ru->action == EPERM && ru->n == 0))
			continue; /* unknown here, or the default action */
		for (unsigned k = 0; k < ru->n; k++)
			c[k] = (struct scmp_arg_cmp){ ru->cmp[k].arg, ru->cmp[k].op, ru->cmp[k].a, ru->cmp[k].b };
		rc = seccomp_rule_add_array(ctx, filter_action(ru->action), nr, ru->n, c);
		if (rc) {
			snprintf(err, errlen, "seccomp: cannot add the rule %zu for %s: %s", i, ru->name, strerror(-rc));
			return -1;
		}
	}
	return 0;
}

/* The highest number any rule names on an architecture (runc's bound). */
static int filter_max_nr(const struct filter_rules *r, uint32_t token)
{
	int max = -1;

	for (size_t i = 0; i < r->n; i++) {
		int nr = seccomp_syscall_resolve_name_arch(token, r->v[i].name);
		if (nr > max)
			max = nr;
	}
	return max;
}

#define STUB_MAX 64

struct stub {
	struct sock_filter v[STUB_MAX];
	size_t n;
	size_t to_enosys[STUB_MAX], n_enosys; /* jumps (jt) to patch */
	size_t to_filter[STUB_MAX], n_filter; /* ja to patch */
};

static void stub_emit(struct stub *s, struct sock_filter insn)
{
	if (s->n < STUB_MAX)
		s->v[s->n] = insn;
	s->n++;
}

/* "nr > max: ENOSYS, else the filter" for the number just loaded */
static void stub_bound(struct stub *s, uint32_t max)
{
	s->to_enosys[s->n_enosys++] = s->n;
	stub_emit(s, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, max, 0, 0));
	s->to_filter[s->n_filter++] = s->n;
	stub_emit(s, (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, 0));
}

/* What runc puts before Docker's filter: a call numbered above the highest
 * the rules name fails with ENOSYS (a new call must look absent, not
 * forbidden, or libc does not fall back).  One section per kernel
 * architecture; x86-64's also bounds x32's numbers. */
static int filter_stub(const struct filter_rules *r, struct buf *out)
{
	struct stub s = { .n = 0 };
	bool done[FILTER_N_ARCHES] = { false };

	stub_emit(&s, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 4)); /* seccomp_data.arch */
	for (size_t i = 0; i < FILTER_N_ARCHES; i++) {
		uint32_t audit = filter_audit(&filter_arches[i]);
		int plain = -1, x32 = -1;
		size_t jeq;

		if (done[i])
			continue;
		for (size_t k = i; k < FILTER_N_ARCHES; k++) {
			if (filter_audit(&filter_arches[k]) != audit)
				continue;
			done[k] = true;
			if (filter_arches[k].nr_base)
				x32 = filter_max_nr(r, filter_token(&filter_arches[k]));
			else
				plain = filter_max_nr(r, filter_token(&filter_arches[k]));
		}
		jeq = s.n;
		stub_emit(&s, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, audit, 0, 0));
		stub_emit(&s, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0)); /* seccomp_data.nr */
		if (x32 >= 0) {
			stub_emit(&s, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, FILTER_X32_BIT, 2, 0));
			stub_bound(&s, plain >= 0 ? (uint32_t)plain : FILTER_X32_BIT - 1);
			stub_bound(&s, (uint32_t)x32);
		} else {
			stub_bound(&s, plain >= 0 ? (uint32_t)plain : UINT32_MAX);
		}
		if (s.n < STUB_MAX)
			s.v[jeq].jf = (uint8_t)(s.n - jeq - 1);
	}
	s.to_filter[s.n_filter++] = s.n; /* another architecture: the filter's bad-arch action */
	stub_emit(&s, (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, 0));
	stub_emit(&s, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
	if (s.n > STUB_MAX)
		return -1;
	for (size_t i = 0; i < s.n_enosys; i++)
		s.v[s.to_enosys[i]].jt = (uint8_t)(s.n - 1 - s.to_enosys[i] - 1);
	for (size_t i = 0; i < s.n_filter; i++)
		s.v[s.to_filter[i]].k = (uint32_t)(s.n - s.to_filter[i] - 1);
	return buf_add(out, s.v, s.n * sizeof(s.v[0]));
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
	struct filter_rules *r = filter_rules_make(err, errlen);
	scmp_filter_ctx ctx = NULL;
	size_t start = out->len;
	int rc = -1;

	if (!r)
		return -1;
	ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	if (!ctx) {
		snprintf(err, errlen, "seccomp: cannot initialise libseccomp");
		goto out;
	}
	for (size_t i = 0; i < FILTER_N_ARCHES; i++) {
		uint32_t token = filter_token(&filter_arches[i]);
		int e = token == seccomp_arch_native() ? 0 : seccomp_arch_add(ctx, token);
		if (e && e != -EEXIST) {
			snprintf(err, errlen, "seccomp: cannot add an architecture: %s", strerror(-e));
			goto out;
		}
	}
	/* a binary tree of the calls, as runc asks for: the program stays far
	 * below BPF_MAXINSNS with ~400 calls on three architectures */
	(void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS)) {
		snprintf(err, errlen, "seccomp: cannot set the action for other architectures");
		goto out;
	}
	if (filter_ctx_rules(ctx, r, err, errlen))
		goto out;
	if (filter_stub(r, out) || filter_export(ctx, out)) {
		snprintf(err, errlen, "seccomp: cannot export the sandbox filter: %s", strerror(errno));
		goto out;
	}
	if ((out->len - start) / sizeof(struct sock_filter) > BPF_MAXINSNS) {
		snprintf(err, errlen, "seccomp: the filter has %zu instructions, more than the kernel's %d",
			(out->len - start) / sizeof(struct sock_filter), BPF_MAXINSNS);
		goto out;
	}
	rc = 0;
out:
	if (ctx)
		seccomp_release(ctx);
	filter_rules_free(r);
	return rc;
}

/* ---- the Docker profile ------------------------------------------------------------------- */

static const char *filter_op_name(enum scmp_compare op)
{
	switch (op) {
	case SCMP_CMP_NE:
		return "SCMP_CMP_NE";
	case SCMP_CMP_LT:
		return "SCMP_CMP_LT";
	case SCMP_CMP_LE:
		return "SCMP_CMP_LE";
	case SCMP_CMP_EQ:
		return "SCMP_CMP_EQ";
	case SCMP_CMP_GE:
		return "SCMP_CMP_GE";
	case SCMP_CMP_GT:
		return "SCMP_CMP_GT";
	case SCMP_CMP_MASKED_EQ:
		return "SCMP_CMP_MASKED_EQ";
	default:
		return "SCMP_CMP_EQ";
	}
}

/* One entry of the profile's "syscalls": the rule, and the plain rules with
 * the same action right after it (their names share the entry). */
static json_t *filter_entry(const struct filter_rules *r, size_t *i)
{
	const struct filter_rule *ru = &r->v[*i];
	json_t *e = json_object(), *names = json_array(), *args = json_array();
	int bad = !e || !names || !args;

	bad |= json_array_append_new(names, json_string(ru->name));
	for (size_t k = *i + 1; ru->n == 0 && k < r->n && r->v[k].n == 0 && r->v[k].action == ru->action; k++) {
		bad |= json_array_append_new(names, json_string(r->v[k].name));
		*i = k;
	}
	bad |= json_object_set(e, "names", names);
	bad |= json_object_set_new(e, "action", json_string(ru->action == FILTER_ALLOW ? "SCMP_ACT_ALLOW" :
											 "SCMP_ACT_ERRNO"));
	if (ru->action != FILTER_ALLOW)
		bad |= json_object_set_new(e, "errnoRet", json_integer(ru->action));
	for (unsigned k = 0; k < ru->n; k++)
		bad |= json_array_append_new(args, json_pack("{s:i,s:I,s:I,s:s}", "index", (int)ru->cmp[k].arg, "value",
							  (json_int_t)ru->cmp[k].a, "valueTwo", (json_int_t)ru->cmp[k].b,
							  "op", filter_op_name(ru->cmp[k].op)));
	if (ru->n)
		bad |= json_object_set(e, "args", args);
	json_decref(names);
	json_decref(args);
	if (bad) {
		json_decref(e);
		return NULL;
	}
	return e;
}

int filter_profile(struct buf *out, char *err, size_t errlen)
{
	struct filter_rules *r = filter_rules_make(err, errlen);
	json_t *root = NULL, *arches = json_array(), *calls = json_array();
	char *text = NULL;
	int bad, rc = -1;

	if (!r)
		goto out;
	root = json_pack("{s:s,s:i}", "defaultAction", "SCMP_ACT_ERRNO", "defaultErrnoRet", EPERM);
	bad = !root || !arches || !calls;
	for (size_t i = 0; !bad && i < FILTER_N_ARCHES; i++)
		if (filter_arches[i].oci)
			bad |= json_array_append_new(arches, json_string(filter_arches[i].oci));
	for (size_t i = 0; !bad && i < r->n; i++)
		bad |= json_array_append_new(calls, filter_entry(r, &i));
	if (!bad && json_array_size(arches))
		bad |= json_object_set(root, "architectures", arches);
	bad |= json_object_set(root, "syscalls", calls);
	text = bad ? NULL : json_dumps(root, JSON_COMPACT);
	if (!text || buf_adds(out, text)) {
		snprintf(err, errlen, "seccomp: cannot write the container profile: out of memory");
		goto out;
	}
	rc = 0;
out:
	free(text);
	json_decref(root);
	json_decref(arches);
	json_decref(calls);
	if (r)
		filter_rules_free(r);
	return rc;
}
