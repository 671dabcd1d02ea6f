# sbxfs - a FUSE filesystem of code-execution sandboxes for AI agents.
#
#   make            build ./sbxfs and its helpers sbxfs-exec, sbxfs-init, sbxfs-box (with -Werror)
#   make run        install missing packages, build, mount /sbx with mount.conf (foreground)
#   make test       install missing packages, build, run the pytest suite
#   make asan       build with AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench      benchmarks side by side with native I/O and bindfs
#   make deps       apt-get install what is missing, then prepare libfuse (below)
#   make install    install into $(PREFIX)
#   make distclean  clean, and also remove build/ (the libfuse built from source)
#
# libfuse: the system's when it is >= 3.16 (kernel FUSE passthrough), else
# built from Debian's newer source package into build/libfuse and linked
# statically; SBXFS_LIBFUSE=system|build forces either (mk/libfuse.mk,
# docs/libfuse.md).

PREFIX ?= /usr/local
MOUNTPOINT ?= /sbx
CONFIG ?= mount.conf
VERSION := 0.1.0

PKGS := libcurl jansson yaml-0.1 libcrypto
CC ?= gcc
CFLAGS ?= -O2 -g
SAN ?=
ALL_CFLAGS = -std=gnu17 -Wall -Wextra -Werror -pthread -D_FILE_OFFSET_BITS=64 \
	  -DSBXFS_VERSION=\"$(VERSION)\" $(if $(filter 1,$(FUSE_PASSTHROUGH)),-DSBXFS_FUSE_PASSTHROUGH=1) \
	  $(FUSE_CFLAGS) $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(CFLAGS) $(SAN)
LDLIBS += $(FUSE_LIBS) $(shell pkg-config --libs $(PKGS) 2>/dev/null) -pthread

COMMON := common/err.o common/buf.o common/log.o common/names.o common/util.o common/config.o common/json.o common/layout.o \
	  common/http.o common/netns.o common/udir.o
PROVIDERS := providers/providers.o providers/registry.o providers/builtin.o providers/pool.o providers/uidpool.o \
	     providers/local.o providers/docker.o providers/docker_api.o providers/docker_jobs.o providers/aio.o \
	     providers/aio_api.o
FS := fs/main.o fs/loop.o fs/dispatch.o fs/node.o fs/handle.o fs/park.o fs/work.o fs/vdir.o fs/vtree.o \
      fs/ctl.o fs/data.o fs/job.o fs/jobfs.o
OBJS := $(COMMON) $(PROVIDERS) $(FS)
HDRS := $(wildcard common/*.h providers/*.h fs/*.h)

DEBIAN_DEPS := build-essential pkg-config libfuse3-dev fuse3 libcurl4-openssl-dev libjansson-dev libyaml-dev \
	       libssl-dev bubblewrap util-linux python3 python3-pytest bindfs fio attr \
	       dpkg-dev meson ninja-build debian-archive-keyring docker.io busybox-static

.PHONY: all run test unit asan bench deps clean distclean install check-style

all: sbxfs sbxfs-exec sbxfs-init sbxfs-box

# FUSE_CFLAGS, FUSE_LIBS, FUSE_PASSTHROUGH (after `all`, the default goal)
include mk/libfuse.mk

sbxfs: $(OBJS)
	$(CC) $(ALL_CFLAGS) -o $@ $(OBJS) $(LDFLAGS) $(LDLIBS)

# The helpers run after setns()/chroot() into a sandbox, where sanitizer
# runtimes cannot work: they are built without $(SAN).  sbxfs-init runs on the
# sandbox's root filesystem, so it is static.
HELPER_CFLAGS = -std=gnu17 -Wall -Wextra -Werror -O2 -g -D_FILE_OFFSET_BITS=64 $(shell pkg-config --cflags jansson 2>/dev/null)

sbxfs-exec: providers/local_exec.c
	$(CC) $(HELPER_CFLAGS) -o $@ $< $(shell pkg-config --libs jansson 2>/dev/null)

sbxfs-init: providers/local_init.c
	$(CC) $(HELPER_CFLAGS) -static -o $@ $<

# pid 1 and job supervisor of docker sandboxes: runs on any image, so static
sbxfs-box: providers/docker_box.c
	$(CC) $(HELPER_CFLAGS) -static -o $@ $<

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

UNIT_OBJS := $(COMMON) providers/providers.o providers/registry.o providers/builtin.o providers/uidpool.o providers/local.o \
	providers/docker.o providers/docker_api.o providers/docker_jobs.o providers/aio.o providers/aio_api.o

tests/unit/unit: tests/unit/unit.c $(UNIT_OBJS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(UNIT_OBJS) $(LDFLAGS) $(LDLIBS)

POOL_TEST_OBJS := $(COMMON) providers/providers.o providers/registry.o providers/pool.o providers/uidpool.o \
	fs/job.o fs/park.o fs/work.o
WRAP_ALLOC := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=strndup

tests/unit/pool_test: tests/unit/pool_test.c tests/unit/fault.c tests/unit/fault.h $(POOL_TEST_OBJS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ tests/unit/pool_test.c tests/unit/fault.c $(POOL_TEST_OBJS) $(WRAP_ALLOC) \
		$(LDFLAGS) $(LDLIBS)

HTTP_TEST_OBJS := $(COMMON) providers/providers.o providers/docker_api.o providers/aio_api.o

tests/unit/http_test: tests/unit/http_test.c tests/unit/canned.c tests/unit/canned.h $(HTTP_TEST_OBJS) $(LIBFUSE_MK)
	$(CC) $(ALL_CFLAGS) -o $@ tests/unit/http_test.c tests/unit/canned.c $(HTTP_TEST_OBJS) $(LDFLAGS) $(LDLIBS)

unit: tests/unit/unit tests/unit/pool_test tests/unit/http_test
	./tests/unit/unit
	./tests/unit/pool_test
	./tests/unit/http_test

test: deps all unit
	/usr/bin/python3 -m pytest -q tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests ran"; exit 1; fi; exit $$rc

asan:
	$(MAKE) clean
	$(MAKE) all tests/unit/unit tests/unit/pool_test tests/unit/http_test CFLAGS="-O1 -g" SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

bench: deps all
	bash bench/run.sh

install: all
	install -D -m 0755 sbxfs $(DESTDIR)$(PREFIX)/bin/sbxfs
	install -D -m 0755 sbxfs-exec $(DESTDIR)$(PREFIX)/libexec/sbxfs/sbxfs-exec
	install -D -m 0755 sbxfs-init $(DESTDIR)$(PREFIX)/libexec/sbxfs/sbxfs-init
	install -D -m 0755 sbxfs-box $(DESTDIR)$(PREFIX)/libexec/sbxfs/sbxfs-box
	install -D -m 0644 mount.conf $(DESTDIR)/etc/sbxfs/mount.conf

check-style:
	@bash .ci/banned-functions

# clean keeps build/ (the libfuse built from source); distclean removes it.
clean:
	rm -f sbxfs sbxfs-exec sbxfs-init sbxfs-box tests/unit/unit tests/unit/pool_test tests/unit/http_test $(OBJS) fs/*.o providers/*.o common/*.o

distclean: clean
	rm -rf build
