#!/bin/bash
# SPDX-License-Identifier: MIT
#
# build.sh - build the Docker images the sbxfs tests use, without pulling anything.
#
#   sbxfs-test-busybox:1  Debian's static busybox, root + `sandbox` (1000), CMD /bin/sh
#   sbxfs-test-aio:1      busybox + the host's python3.11 + tests/fakes/aio_server.py,
#                         ENTRYPOINT aio_server.py --in-container on port 8080
#
# Each image carries the label org.sbxfs.test.input-hash, a hash of everything
# it is made of (files, their content, the image configuration); an image whose
# label matches is left alone, so a second run only checks (about 2 s).  The
# work is done by rootfs.py next to this file; a lock serialises concurrent runs.
#
# Usage: tests/images/build.sh [busybox] [aio]     (default: both)
# Needs: a running dockerd (tests/dockerutil.py starts one), busybox-static
# (installed here with apt-get when missing and we are root), python3.11.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
[ -x "$py" ] || py=python3
docker=${DOCKER:-docker}
[ -x /usr/bin/docker ] && [ -z "${DOCKER:-}" ] && docker=/usr/bin/docker
export DOCKER=$docker

images=("$@")
[ ${#images[@]} -gt 0 ] || images=(busybox aio)

if ! dpkg-query -W -f='${Status}\n' busybox-static 2>/dev/null | grep -q 'ok installed'; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "build.sh: installing busybox-static"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null ||
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; }
	else
		echo "build.sh: busybox-static is not installed (apt-get install busybox-static)" >&2
		exit 1
	fi
fi

if ! "$docker" version --format '{{.Server.Version}}' >/dev/null 2>&1; then
	echo "build.sh: dockerd does not answer ($docker version); start it first" >&2
	exit 1
fi

lock=${SBXFS_IMAGE_LOCK:-/tmp/sbxfs-test-images.lock}
exec 9>"$lock"
flock -w 600 9 || { echo "build.sh: could not take $lock" >&2; exit 1; }

exec "$py" "$here/rootfs.py" ensure "${images[@]}"
