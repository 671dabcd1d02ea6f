# sbxfs - a FUSE filesystem of code-execution sandboxes for AI agents.
#
#   make            build ./sbxfs and its helpers sbxfs-exec, sbxfs-init, sbxfs-box (with -Werror)
#   make run        install missing packages, build, mount /sbx with mount.conf (foreground)
#   make test       install missing packages, build, run the pytest suite
#   make asan       build with AddressSanitizer + UndefinedBehaviorSanitizer (and lock assertions)
#   make tsan-unit  the threaded C unit tests under ThreadSanitizer (build/tsan/, lock assertions on)
#   make bench      benchmarks side by side with native I/O and bindfs
#   make bench-remote  the remote providers against curl and against re-uploading every skill,
#                   and concurrent mkdirs of one user (acquire: async against sync)
#   make deps       apt-get install what is missing, then prepare libfuse (below)
#   make install    install into $(DESTDIR)$(PREFIX) (and /etc, /var/lib: see below), and the
#                   DeerFlow package sbxfs_deerflow into $(PYTHON)'s site directory there
#   make uninstall  remove what install put there (keeps mount.conf and state_dir)
#   make check-man  lint the man pages (mandoc) and check their version
#   make fuzz       libFuzzer on the parsers of hostile input, FUZZ_TIME s each (tests/fuzz/)
#   make distclean  clean, and also remove build/ (the libfuse built from source)
#
# libfuse: the system's when it is >= 3.16 (kernel FUSE passthrough), else
# built from Debian's newer source package (unstable's 3.18 with FUSE over
# io_uring, else trixie's 3.17) into build/libfuse and linked
# statically; SBXFS_LIBFUSE=system|build forces either (mk/libfuse.mk,
# docs/libfuse.md).

PREFIX ?= /usr/local
# The local provider finds its helpers in <bindir>/../libexec/sbxfs/, so
# bin/ and libexec/ are always siblings under PREFIX.
BINDIR = $(PREFIX)/bin
HELPERDIR = $(PREFIX)/libexec/sbxfs
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/sbxfs
# /usr/local/lib/systemd/system is on systemd's search path too
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc
STATEDIR ?= /var/lib/sbxfs
MOUNTPOINT ?= /sbx
CONFIG ?= mount.conf
VERSION := 0.1.0
# The DeerFlow package (python/) goes into Debian's python3's site directory
# for this PREFIX (/usr/local/lib/python3.X/dist-packages is on its path).
PYTHON ?= /usr/bin/python3
PYVER = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYSITE ?= $(PREFIX)/lib/python$(PYVER)/dist-packages

PKGS := libcurl jansson yaml-0.1 libcrypto libseccomp libnftables libsystemd
CC ?= gcc
CFLAGS ?= -O2 -g
SAN ?=
ALL_CFLAGS = -std=gnu17 -Wall -Wextra -Werror -pthread -D_FILE_OFFSET_BITS=64 \
	  -DSBXFS_VERSION=\"$(VERSION)\" $(if $(filter 1,$(FUSE_PASSTHROUGH)),-DSBXFS_FUSE_PASSTHROUGH=1) \
	  $(if $(filter 1,$(FUSE_IO_URING)),-DSBXFS_FUSE_IO_URING=1) \
	  $(FUSE_CFLAGS) $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(CFLAGS) $(SAN)
LDLIBS += $(FUSE_LIBS) $(shell pkg-config --libs $(PKGS) 2>/dev/null) -pthread

COMMON := common/err.o common/buf.o common/log.o common/names.o common/util.o common/config.o common/json.o common/layout.o \
	  common/idrange.o common/cfgread.o common/http.o common/netns.o common/rtnl.o common/udir.o common/budget.o common/token.o
# common/ parts that need libnftables (egress) and its address table (policy)
COMMON_NET := common/policy.o common/egress.o
# runtime/: the work queues, the park queue (below FUSE: no FUSE header)
RUNTIME := runtime/work.o runtime/park.o
PROVIDERS := providers/providers.o providers/api.o providers/registry.o providers/builtin.o providers/pool.o providers/spares.o providers/uidpool.o \
	     providers/local.o providers/local_spawn.o providers/local_claim.o providers/claim_mount.o providers/local_jobs.o providers/local_net.o providers/local_gw.o providers/local_pasta.o providers/cgroup.o providers/filter.o providers/local_etc.o \
	     providers/container.o providers/docker.o providers/docker_api.o providers/docker_jobs.o providers/aio.o providers/aio_jobs.o providers/aio_api.o providers/aio_remote.o providers/scriptfs.o \
	     providers/opensandbox.o providers/opensandbox_renew.o providers/opensandbox_api.o providers/opensandbox_sse.o \
	     providers/opensandbox_jobs.o providers/jobrun.o providers/record.o providers/opensandbox_files.o providers/opensandbox_claim.o \
	     providers/snapshot.o providers/sbxsnap.o providers/container_freeze.o
FS := fs/main.o fs/args.o fs/service.o fs/loop.o fs/dispatch.o fs/node.o fs/handle.o fs/fsbx.o fs/fspark.o fs/fswork.o fs/skillsfs.o fs/vdir.o fs/vtree.o fs/acquire.o \
      fs/reports.o fs/data.o fs/fswatch.o fs/dlock.o fs/nodefd.o fs/rfiles.o fs/rcache.o fs/job.o fs/jobwatch.o fs/cmdbuf.o fs/jobfs.o fs/sbxctl.o fs/netfs.o fs/import.o fs/snapfs.o fs/uring.o fs/sigwatch.o
# net/: the network policy (policy, events and grants, the proxy, egress rules)
NET_POLICY := net/netpol.o net/httpreader.o net/tls.o
NET := $(NET_POLICY) net/resolve.o net/proxy.o net/net.o
# skills/: the skill projection (manifest, diff, the upload sync)
SKILLS_PURE := skills/manifest.o skills/library.o
SKILLS := $(SKILLS_PURE) skills/skills.o
OBJS := $(COMMON) $(COMMON_NET) $(RUNTIME) $(PROVIDERS) $(FS) $(NET) $(SKILLS)
HDRS := $(wildcard common/*.h runtime/*.h providers/*.h fs/*.h net/*.h skills/*.h)

DEBIAN_DEPS := build-essential pkg-config libfuse3-dev fuse3 libcurl4-openssl-dev libjansson-dev libyaml-dev \
	       libssl-dev libseccomp-dev bubblewrap util-linux python3 python3-pytest bindfs fio attr \
	       dpkg-dev meson ninja-build debian-archive-keyring liburing-dev libnuma-dev \
	       passt nftables libnftables-dev iproute2 curl openssl \
	       libsystemd-dev mandoc systemd python3-prometheus-client docker.io busybox-static \
	       python3-pip python3-setuptools python3-wheel xfsprogs rsync podman

.PHONY: all run test unit asan tsan-unit bench bench-network bench-remote deps clean distclean install uninstall check-style check-man check-layers \
	fuzz fuzz-ci fuzz-build fuzz-deps

all: sbxfs sbxfs-exec sbxfs-init sbxfs-box

# FUSE_CFLAGS, FUSE_LIBS, FUSE_PASSTHROUGH (after `all`, the default goal)
include mk/libfuse.mk

sbxfs: $(OBJS)
	$(CC) $(ALL_CFLAGS) -o $@ $(OBJS) $(LDFLAGS) $(LDLIBS)

# The helpers (providers/helpers/: programs of their own, none of the
# daemon's modules) run after setns()/chroot() into a sandbox, where sanitizer
# runtimes cannot work: they are built without $(SAN).  sbxfs-init runs on the
# sandbox's root filesystem, so it is static.
# sbxfs-exec runs as root: it links nothing but libc.
HELPER_CFLAGS = -std=gnu17 -Wall -Wextra -Werror -O2 -g -D_FILE_OFFSET_BITS=64
EXEC_SRCS := providers/helpers/local_exec.c providers/helpers/local_pump.c

sbxfs-exec: $(EXEC_SRCS) providers/helpers/local_exec.h
	$(CC) $(HELPER_CFLAGS) -o $@ $(EXEC_SRCS)

sbxfs-init: providers/helpers/local_init.c
	$(CC) $(HELPER_CFLAGS) -static -o $@ $<

# pid 1 and job supervisor of docker sandboxes: runs on any image, so static;
# execute-only, so the kernel starts it non-dumpable (helpers/docker_box.c)
sbxfs-box: providers/helpers/docker_box.c
	$(CC) $(HELPER_CFLAGS) -static -o $@ $<
	chmod 0711 $@

%.o: %.c $(HDRS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

deps:
	@missing=$$(for p in $(DEBIAN_DEPS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@# then libfuse, unless this make already did it on starting (make test, make run)
	@$(if $(filter $(LIBFUSE_MK),$(MAKEFILE_LIST)),:,$(MAKE) --no-print-directory libfuse)

run: deps all
	mkdir -p $(MOUNTPOINT)
	./sbxfs -f -c $(CONFIG) $(MOUNTPOINT)

UNIT_OBJS := $(COMMON) fs/args.o providers/providers.o providers/api.o providers/registry.o providers/builtin.o providers/uidpool.o \
	providers/local.o providers/local_spawn.o providers/local_claim.o providers/claim_mount.o providers/local_jobs.o providers/local_net.o providers/local_gw.o providers/local_pasta.o providers/cgroup.o providers/filter.o providers/local_etc.o \
	providers/container.o providers/docker.o providers/docker_api.o providers/docker_jobs.o providers/aio.o providers/aio_jobs.o providers/aio_api.o providers/aio_remote.o providers/scriptfs.o \
	providers/opensandbox.o providers/opensandbox_renew.o providers/opensandbox_api.o providers/opensandbox_sse.o \
	providers/opensandbox_jobs.o providers/jobrun.o providers/record.o providers/opensandbox_files.o providers/opensandbox_claim.o \
	providers/container_freeze.o $(COMMON_NET)

tests/unit/unit: tests/unit/unit.c $(UNIT_OBJS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(UNIT_OBJS) $(LDFLAGS) $(LDLIBS)

POOL_TEST_OBJS := $(COMMON) $(RUNTIME) providers/providers.o providers/api.o providers/registry.o providers/pool.o providers/spares.o providers/record.o providers/uidpool.o \
	fs/job.o fs/jobwatch.o fs/fsbx.o fs/fspark.o fs/sigwatch.o fs/fswork.o fs/uring.o
WRAP_ALLOC := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup

tests/unit/pool_test: tests/unit/pool_test.c tests/unit/fault.c tests/unit/fault.h $(POOL_TEST_OBJS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ tests/unit/pool_test.c tests/unit/fault.c $(POOL_TEST_OBJS) $(WRAP_ALLOC) \
		$(LDFLAGS) $(LDLIBS)

# the network policy's pure parts: names and addresses, events and grants,
# the HTTP and TLS readers, the nftables ruleset text
NET_TEST_OBJS := $(COMMON) $(COMMON_NET) $(NET_POLICY) net/resolve.o

tests/unit/net_test: tests/unit/net_test.c $(NET_TEST_OBJS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(NET_TEST_OBJS) $(LDFLAGS) $(LDLIBS)

# net/net.c with providers made up by the test (enforced_by, none, a netns)
NET_GLUE_OBJS := $(POOL_TEST_OBJS) $(COMMON_NET) $(NET)

tests/unit/net_glue_test: tests/unit/net_glue_test.c $(NET_GLUE_OBJS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(NET_GLUE_OBJS) $(LDFLAGS) $(LDLIBS)

HTTP_TEST_OBJS := $(COMMON) providers/providers.o providers/api.o providers/docker_api.o providers/aio_api.o \
	providers/opensandbox_api.o providers/opensandbox_sse.o

tests/unit/http_test: tests/unit/http_test.c tests/unit/canned.c tests/unit/canned.h $(HTTP_TEST_OBJS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ tests/unit/http_test.c tests/unit/canned.c $(HTTP_TEST_OBJS) $(LDFLAGS) $(LDLIBS)

# skills/ over the pool and the fault provider's skills ops
SKILLS_TEST_OBJS := $(POOL_TEST_OBJS) $(SKILLS)

tests/unit/skills_test: tests/unit/skills_test.c tests/unit/fault.c tests/unit/fault.h $(SKILLS_TEST_OBJS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ tests/unit/skills_test.c tests/unit/fault.c $(SKILLS_TEST_OBJS) $(LDFLAGS) $(LDLIBS)

# the remote providers' files and skills ops against the fake servers (tests/fakes)
# runtime/work.c: lanes, caps, round-robin, cancel and claim
tests/unit/work_test: tests/unit/work_test.c tests/unit/check.h $(COMMON) $(RUNTIME) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ tests/unit/work_test.c $(COMMON) $(RUNTIME) $(LDFLAGS) $(LDLIBS)

tests/unit/remote_test: tests/unit/remote_test.c $(UNIT_OBJS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(UNIT_OBJS) $(LDFLAGS) $(LDLIBS)

# the seccomp policy through a BPF interpreter, for every architecture (providers/filter.c)
tests/unit/filter_test: tests/unit/filter_test.c tests/unit/check.h providers/filter.o $(COMMON) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ $< providers/filter.o $(COMMON) $(LDFLAGS) $(LDLIBS)

# common/lock.h's assertions and fs/cmdbuf.c's writers against a taker; built
# from sources with SBXFS_LOCK_DEBUG (a struct lock has an owner field then,
# so its users are compiled here, not linked from the release objects)
LOCK_TEST_SRCS := tests/unit/lock_test.c fs/cmdbuf.c common/buf.c

tests/unit/lock_test: $(LOCK_TEST_SRCS) common/lock.h fs/cmdbuf.h tests/unit/check.h
	$(CC) $(ALL_CFLAGS) -DSBXFS_LOCK_DEBUG -o $@ $(LOCK_TEST_SRCS) -pthread

# ThreadSanitizer: the unit tests that run threads, each compiled from its
# sources in one command into build/tsan/ (the release objects stay as they
# are), with lock assertions on.  A report fails the run (halt_on_error).
TSAN_FLAGS := -O1 -g -fsanitize=thread -fno-omit-frame-pointer -DSBXFS_LOCK_DEBUG
TSAN_CC = $(CC) $(filter-out -O2,$(ALL_CFLAGS)) $(TSAN_FLAGS)
TSAN_BINS := build/tsan/lock_test build/tsan/pool_test build/tsan/skills_test build/tsan/net_glue_test

build/tsan/lock_test: $(LOCK_TEST_SRCS) $(HDRS) tests/unit/check.h
	@mkdir -p build/tsan
	$(TSAN_CC) -o $@ $(LOCK_TEST_SRCS)
build/tsan/pool_test: tests/unit/pool_test.c tests/unit/fault.c $(POOL_TEST_OBJS:.o=.c) $(HDRS) $(LIBFUSE_MK)
	@mkdir -p build/tsan
	$(TSAN_CC) -o $@ tests/unit/pool_test.c tests/unit/fault.c $(POOL_TEST_OBJS:.o=.c) $(WRAP_ALLOC) $(LDFLAGS) $(LDLIBS)
build/tsan/skills_test: tests/unit/skills_test.c tests/unit/fault.c $(SKILLS_TEST_OBJS:.o=.c) $(HDRS) $(LIBFUSE_MK)
	@mkdir -p build/tsan
	$(TSAN_CC) -o $@ tests/unit/skills_test.c tests/unit/fault.c $(SKILLS_TEST_OBJS:.o=.c) $(LDFLAGS) $(LDLIBS)
build/tsan/net_glue_test: tests/unit/net_glue_test.c $(NET_GLUE_OBJS:.o=.c) $(HDRS) $(LIBFUSE_MK)
	@mkdir -p build/tsan
	$(TSAN_CC) -o $@ tests/unit/net_glue_test.c $(NET_GLUE_OBJS:.o=.c) $(LDFLAGS) $(LDLIBS)

tsan-unit: $(TSAN_BINS)
	set -e; for t in $(TSAN_BINS); do echo "== $$t"; \
		TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 $(TSAN_OPTIONS)" ./$$t; done

unit: tests/unit/unit tests/unit/pool_test tests/unit/net_test tests/unit/net_glue_test tests/unit/http_test \
	tests/unit/skills_test tests/unit/remote_test tests/unit/filter_test tests/unit/lock_test tests/unit/work_test
	./tests/unit/lock_test
	./tests/unit/work_test
	./tests/unit/filter_test
	./tests/unit/skills_test
	./tests/unit/unit
	./tests/unit/pool_test
	./tests/unit/net_test
	./tests/unit/net_glue_test
	./tests/unit/http_test
	./tests/unit/remote_test

test: deps all unit
	/usr/bin/python3 -m pytest -q tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran"; exit 1; fi; exit $$rc

asan:
	$(MAKE) clean
	$(MAKE) all tests/unit/unit tests/unit/pool_test tests/unit/net_test tests/unit/net_glue_test tests/unit/http_test tests/unit/skills_test tests/unit/remote_test tests/unit/filter_test tests/unit/lock_test tests/unit/work_test CFLAGS="-O1 -g -DSBXFS_LOCK_DEBUG" SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

# The bench's slow provider (bench/slow_provider.c): the daemon's objects
# with a provider table of its own, never installed.
BENCH_OBJS := $(filter-out providers/builtin.o,$(OBJS))
sbxfs-slow: bench/slow_provider.c $(BENCH_OBJS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ bench/slow_provider.c $(BENCH_OBJS) $(LDFLAGS) $(LDLIBS)

# The same daemon on the system's libfuse (3.14 on Debian 12: the copy data
# path), for the bench to show both data paths side by side.  One compiler
# run over every source, objects of its own, never installed.
DAEMON_SRCS := $(OBJS:.o=.c)
build/copy/sbxfs: $(DAEMON_SRCS) $(HDRS) sbxfs-exec sbxfs-init
	@mkdir -p build/copy
	$(CC) -std=gnu17 -Wall -Wextra -Werror -pthread -D_FILE_OFFSET_BITS=64 -DSBXFS_VERSION=\"$(VERSION)\" \
		$$(pkg-config --cflags fuse3 $(PKGS)) $(CFLAGS) -o $@ $(DAEMON_SRCS) $$(pkg-config --libs fuse3 $(PKGS)) -pthread
	ln -sf ../../sbxfs-exec build/copy/sbxfs-exec
	ln -sf ../../sbxfs-init build/copy/sbxfs-init

bench: deps all sbxfs-slow build/copy/sbxfs
	bash bench/run.sh

# the network policy: events wake-up latency, proxy and open-mode throughput
bench-network: deps all
	/usr/bin/python3 bench/network_bench.py

# The remote providers against curl (jobs, remote files) and DeerFlow's
# re-upload of every skill file, on the test fakes (bench/README.md).
bench-remote: all
	/usr/bin/python3 bench/remote_bench.py
	/usr/bin/python3 bench/rfiles_bench.py
	/usr/bin/python3 bench/skills_bench.py
	/usr/bin/python3 bench/acquire_bench.py

# ---- fuzzing (tests/fuzz/, docs/security.md "Fuzzing") ---------------------
# libFuzzer harnesses of the parsers that read what a hostile party sends,
# linked against the daemon's own objects compiled by clang with the
# sanitizers into build/fuzz/obj (never mixed with the gcc objects).
#   make fuzz                 every target FUZZ_TIME seconds (default 300)
#   make fuzz FUZZ_TARGETS=tls FUZZ_TIME=600
#   make fuzz-ci              every target 60 s from the committed seeds (CI)
# New inputs go to build/fuzz/corpus/<target>/ (kept between runs); a crash,
# hang or leak fails the run and leaves its reproducer in
# build/fuzz/crashes/<target>/ (replay: build/fuzz/bin/fuzz-<target> FILE).
FUZZ_DEPS := clang libclang-rt-14-dev llvm-14
FUZZ_TARGETS ?= http tls sse demux json config
FUZZ_TIME ?= 300
FUZZ_CC := clang
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS = -std=gnu17 -Wall -Wextra -Werror -pthread -D_FILE_OFFSET_BITS=64 -DSBXFS_VERSION=\"$(VERSION)\" \
	      $(shell pkg-config --cflags $(PKGS) 2>/dev/null) -O1 -g $(FUZZ_SAN)
FUZZ_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -pthread
# the daemon's objects each harness needs
FUZZ_API_OBJS := $(COMMON) providers/providers.o providers/api.o
FUZZ_OBJS_http := net/httpreader.o common/policy.o common/names.o common/buf.o
FUZZ_OBJS_tls := net/tls.o
FUZZ_OBJS_sse := common/buf.o providers/opensandbox_sse.o
FUZZ_OBJS_demux := $(FUZZ_API_OBJS) providers/docker_api.o
FUZZ_OBJS_json := $(FUZZ_API_OBJS) providers/docker_api.o providers/aio_api.o providers/opensandbox_api.o \
	providers/opensandbox_sse.o
FUZZ_OBJS_config := $(UNIT_OBJS)
FUZZ_BINS := $(foreach t,$(FUZZ_TARGETS),build/fuzz/bin/fuzz-$(t))
.PRECIOUS: build/fuzz/obj/%.o

build/fuzz/obj/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

.SECONDEXPANSION:
build/fuzz/bin/fuzz-%: tests/fuzz/%.c tests/fuzz/fuzz.h $$(addprefix build/fuzz/obj/,$$(FUZZ_OBJS_$$*))
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(addprefix build/fuzz/obj/,$(FUZZ_OBJS_$*)) $(FUZZ_LIBS)

fuzz-deps:
	@missing=$$(for p in $(FUZZ_DEPS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-deps
	@$(MAKE) --no-print-directory fuzz-build
	bash tests/fuzz/run.sh $(FUZZ_TIME) $(FUZZ_TARGETS)

fuzz-ci:
	@$(MAKE) --no-print-directory fuzz FUZZ_TIME=60

# Files generated for install: the units and mount.conf with the paths of
# this PREFIX, SYSCONFDIR and STATEDIR.
SUBST = sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@STATEDIR@|$(STATEDIR)|g'
GENERATED := build/install/sbxfs.service build/install/sbx.mount build/install/mount.conf

build/install/%: systemd/%.in FORCE
	@mkdir -p build/install
	@$(SUBST) $< >$@.tmp && mv -f $@.tmp $@

build/install/mount.conf: mount.conf FORCE
	@mkdir -p build/install
	@sed -e 's|^state_dir: .*|state_dir: $(STATEDIR)|' mount.conf >$@.tmp && mv -f $@.tmp $@

# mount.conf may hold api keys and secrets: 0600, and an existing one is
# never replaced (the default goes to DOCDIR/examples for comparison).
# state_dir holds every sandbox's data: 0700.
install: all $(GENERATED)
	install -D -m 0755 sbxfs $(DESTDIR)$(BINDIR)/sbxfs
	install -D -m 0755 sbxfs-exec $(DESTDIR)$(HELPERDIR)/sbxfs-exec
	install -D -m 0755 sbxfs-init $(DESTDIR)$(HELPERDIR)/sbxfs-init
	install -D -m 0711 sbxfs-box $(DESTDIR)$(HELPERDIR)/sbxfs-box
	install -D -m 0644 man/sbxfs.8 $(DESTDIR)$(MANDIR)/man8/sbxfs.8
	install -D -m 0644 man/sbxfs.conf.5 $(DESTDIR)$(MANDIR)/man5/sbxfs.conf.5
	install -D -m 0644 build/install/sbxfs.service $(DESTDIR)$(UNITDIR)/sbxfs.service
	install -D -m 0644 build/install/sbx.mount $(DESTDIR)$(DOCDIR)/examples/sbx.mount
	install -D -m 0644 systemd/docker.conf $(DESTDIR)$(DOCDIR)/examples/sbxfs.service.d/docker.conf
	install -D -m 0644 build/install/mount.conf $(DESTDIR)$(DOCDIR)/examples/mount.conf
	install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/sbxfs
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/sbxfs/mount.conf ]; then \
		echo "keeping $(DESTDIR)$(SYSCONFDIR)/sbxfs/mount.conf (the default is $(DOCDIR)/examples/mount.conf)"; \
	else \
		echo "install -m 0600 build/install/mount.conf $(DESTDIR)$(SYSCONFDIR)/sbxfs/mount.conf"; \
		install -m 0600 build/install/mount.conf $(DESTDIR)$(SYSCONFDIR)/sbxfs/mount.conf; \
	fi
	install -d -m 0700 $(DESTDIR)$(STATEDIR)
	chmod 0700 $(DESTDIR)$(STATEDIR)
	@# the package is built from a copy: setuptools leaves build files where it builds
	rm -rf build/python && mkdir -p build && cp -r python build/python
	$(PYTHON) -m pip install --quiet --no-deps --no-index --no-build-isolation --upgrade --root-user-action=ignore \
		--target $(DESTDIR)$(PYSITE) build/python
	rm -rf build/python build/tsan
	@$(if $(DESTDIR),:,echo "installed; for systemd: systemctl daemon-reload && systemctl enable --now sbxfs")

# Configuration and sandbox data stay: remove them by hand if wanted.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/sbxfs $(DESTDIR)$(HELPERDIR)/sbxfs-exec $(DESTDIR)$(HELPERDIR)/sbxfs-init \
		$(DESTDIR)$(HELPERDIR)/sbxfs-box
	-rmdir $(DESTDIR)$(HELPERDIR) 2>/dev/null
	rm -f $(DESTDIR)$(MANDIR)/man8/sbxfs.8 $(DESTDIR)$(MANDIR)/man5/sbxfs.conf.5
	rm -f $(DESTDIR)$(UNITDIR)/sbxfs.service
	rm -rf $(DESTDIR)$(DOCDIR)
	rm -rf $(DESTDIR)$(PYSITE)/sbxfs_deerflow $(DESTDIR)$(PYSITE)/sbxfs_deerflow-*.dist-info
	-rmdir $(DESTDIR)$(PYSITE) $(DESTDIR)$(PREFIX)/lib/python$(PYVER) 2>/dev/null
	@echo "kept $(DESTDIR)$(SYSCONFDIR)/sbxfs/mount.conf and $(DESTDIR)$(STATEDIR) (sandbox data)"

# Lint clean (mandoc -T lint: no warning), and the version they name is
# this one.  `sbxfs --help` against the pages: tests/test_operations.py.
MANPAGES := man/sbxfs.8 man/sbxfs.conf.5
check-man:
	@mandoc -T lint -W warning $(MANPAGES); rc=$$?; \
	if [ $$rc -ne 0 ]; then echo "man pages: mandoc -T lint found problems"; exit 1; fi
	@for p in $(MANPAGES); do \
		grep -qx '\.Os sbxfs $(VERSION)' $$p || { echo "$$p: .Os must say sbxfs $(VERSION)"; exit 1; }; \
	done
	@echo "man pages: lint clean, version $(VERSION)"

check-style: check-layers
	@bash .ci/banned-functions

# includes go down the layers (common -> runtime -> providers -> net, skills -> fs)
check-layers:
	@python3 mk/check-layers

# clean keeps build/ (the libfuse built from source); distclean removes it.
clean:
	rm -f sbxfs sbxfs-exec sbxfs-init sbxfs-box tests/unit/unit tests/unit/pool_test tests/unit/net_test \
		tests/unit/net_glue_test tests/unit/http_test tests/unit/skills_test tests/unit/remote_test tests/unit/lock_test tests/unit/work_test sbxfs-slow $(OBJS) \
		fs/*.o runtime/*.o providers/*.o common/*.o net/*.o skills/*.o
	rm -rf build/python build/tsan
	rm -rf build/fuzz/obj build/fuzz/bin

distclean: clean
	rm -rf build
