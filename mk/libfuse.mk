# SPDX-License-Identifier: MIT
#
# mk/libfuse.mk - which libfuse sbxfs is built against; included by the top
# Makefile (after its first rule: this file's rules must not become the
# default goal).  mk/libfuse.sh decides (see there and docs/libfuse.md) and writes
# build/libfuse.mk, which defines:
#   FUSE_CFLAGS FUSE_LIBS   used instead of `pkg-config --cflags/--libs fuse3`
#   FUSE_VERSION            e.g. 3.17.2
#   FUSE_SOURCE             system | build
#   FUSE_PASSTHROUGH        1 when the libfuse has kernel FUSE passthrough (>= 3.16)
#   FUSE_IO_URING           1 when it has FUSE over io_uring (>= 3.18, built with liburing)
#
#   make SBXFS_LIBFUSE=system   the system's libfuse, whatever its version
#   make SBXFS_LIBFUSE=build    libfuse built from Debian's newer source package
#   make                        (auto) the system's if >= 3.16, else build it,
#                               else the system's with one line saying so
#
# The script runs on every make (it is quick once the library is built) and
# rewrites build/libfuse.mk only when its content changes: switching the
# variant rebuilds the objects, a no-op make rebuilds nothing.

SBXFS_LIBFUSE ?= auto
export SBXFS_LIBFUSE

LIBFUSE_MK := build/libfuse.mk

# Goals that do not compile anything do not need (or build) a libfuse.
LIBFUSE_QUIET_GOALS := clean distclean deps libfuse check-style check-man uninstall fuzz fuzz-ci fuzz-build fuzz-deps
ifneq ($(if $(MAKECMDGOALS),$(filter-out $(LIBFUSE_QUIET_GOALS),$(MAKECMDGOALS)),all),)
include $(LIBFUSE_MK)
endif

# Not again when make restarts to read the file it has just written.
$(LIBFUSE_MK): FORCE
	@$(if $(MAKE_RESTARTS),:,bash mk/libfuse.sh $@)

# (Re)decide now, trying again a fetch that failed before (make deps runs it).
libfuse:
	@rm -f build/libfuse/fetch-failed
	@bash mk/libfuse.sh $(LIBFUSE_MK)

.PHONY: FORCE libfuse
FORCE:
