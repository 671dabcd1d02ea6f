#!/bin/bash
# SPDX-License-Identifier: MIT
# bench/run.sh - `make bench`: sbxfs against native I/O, bindfs and bubblewrap, in one run,
# every row a pair measured in interleaved rounds (bench/bench.py does the measuring).
#
#   bench/run.sh [--quick] [--only GROUP[,GROUP.ROW...]] [--rounds N] [--warmup N]
#   bench/run.sh --list
#
# Needs root, ./sbxfs built (or SBXFS_BIN=/path/to/sbxfs), bindfs, bwrap, fusermount3.
# Prints a markdown table and writes bench/results/latest.md and latest.json.
# Everything lives in a scratch dir under /var/tmp (not tmpfs); whatever happens,
# the trap unmounts what is mounted there, kills the daemons it started (by pid)
# and removes the scratch dir.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
PY=/usr/bin/python3
export SBXFS_BIN=${SBXFS_BIN:-$repo/sbxfs}

for a in "$@"; do
	case $a in --list|-h|--help) exec "$PY" "$here/bench.py" "$@" ;; esac
done
if [ "$(id -u)" != 0 ]; then
	echo "bench/run.sh: must run as root" >&2
	exit 1
fi
if [ ! -x "$SBXFS_BIN" ]; then
	echo "bench/run.sh: $SBXFS_BIN not built (run make, or set SBXFS_BIN)" >&2
	exit 1
fi
for t in bindfs bwrap fusermount3 setpriv tar grep find; do
	command -v "$t" >/dev/null || { echo "bench/run.sh: $t not installed" >&2; exit 1; }
done

work=$(mktemp -d /var/tmp/sbxfs-bench.XXXXXX)
pypid= wdpid=

cleanup() {
	local rc=$? mp pidf pid
	set +e
	trap - INT TERM
	[ -n "$wdpid" ] && kill "$wdpid" 2>/dev/null
	# the driver cleans up after itself on SIGTERM; give it a moment
	if [ -n "$pypid" ] && kill -0 "$pypid" 2>/dev/null; then
		kill -TERM "$pypid" 2>/dev/null
		for _ in $(seq 150); do kill -0 "$pypid" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$pypid" 2>/dev/null
	fi
	# innermost mounts first (bindfs sits on the state_dir of the main daemon)
	for mp in $(awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r); do
		umount "$mp" 2>/dev/null || fusermount3 -u "$mp" 2>/dev/null || umount -l "$mp"
	done
	for pidf in "$work"/daemon-*.pid; do
		[ -e "$pidf" ] || continue
		pid=$(cat "$pidf")
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null
			for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
			kill -KILL "$pid" 2>/dev/null
		fi
	done
	# last resort: sandboxes of a daemon that died without cleaning up name our scratch
	# dir in their bwrap command line; SIGKILL of their pid 1 ends each one
	for pid in $(grep -lF "$work/" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
		[ "$pid" != "$$" ] && kill -KILL "$pid" 2>/dev/null
	done
	# ... and a sandbox whose bwrap has gone is a process in a mount namespace of
	# its own with our scratch dir in its mounts (every process of ours sees the
	# bench's FUSE mounts there too, hence the namespace test)
	selfns=$(readlink /proc/self/ns/mnt)
	for d in /proc/[0-9]*; do
		ns=$(readlink "$d/ns/mnt" 2>/dev/null) || continue
		[ "$ns" != "$selfns" ] && grep -qF "$work/" "$d/mountinfo" 2>/dev/null && kill -KILL "${d#/proc/}" 2>/dev/null
	done
	if ! awk -v w="$work/" 'index($2, w) == 1 { f = 1 } END { exit !f }' /proc/mounts; then
		rm -rf --one-file-system "$work"
	else
		echo "bench/run.sh: mounts left under $work, not removing it" >&2
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cd "$repo"
SBXFS_BENCH_CMD="bash bench/run.sh${*:+ $*}" "$PY" "$here/bench.py" --workdir "$work" "$@" &
pypid=$!
# hard stop after 15 minutes (the driver aims at < 10)
(
	trap 'kill "$sp" 2>/dev/null; exit 0' TERM
	sleep 900 & sp=$!
	wait "$sp"
	echo "bench/run.sh: 15 minute limit, stopping" >&2
	kill -TERM "$pypid"
) &
wdpid=$!
rc=0
wait "$pypid" || rc=$?
pypid=
exit "$rc"
