#!/bin/bash
# SPDX-License-Identifier: MIT
# bench/profile_smallfiles.sh - where the small-file path spends its requests and syscalls.
#
#   bench/profile_smallfiles.sh [-n FILES] [-k]      (as root, after make)
#
# Mounts a private sbxfs (local provider, generated mount.conf in a scratch dir under
# /var/tmp), acquires one sandbox and runs the small-file loop of `bench/run.sh --only
# smallfiles` in its workspace, one phase at a time:
#
#   create   open(O_CREAT|O_EXCL) + write 4 KiB + close, N files
#   stat     stat each of them
#   read     open + read + close each of them (the first open since the create)
#   reread   the same again
#   unlink   unlink each of them
#   create0  open(O_CREAT|O_EXCL) + close, N empty files (the metadata path alone)
#
# Caches are dropped before each create phase, as the bench does (see rows_files.py).
#
# The phases run in that order three times on fresh files:
#   1. under perf (if installed), with no tracer in the daemon's way:
#      - `perf stat -p <daemon pid>`: the daemon's syscalls (raw_syscalls:sys_enter),
#        CPU time and context switches, per file operation;
#      - `perf record` of the kernel's fuse:fuse_request_send/_end tracepoints for this
#        mount's connection only: FUSE requests per file operation by opcode, and each
#        opcode's round trip (kernel sends -> daemon replies) in microseconds;
#   2. on a native directory of the same filesystem, for the ops/s the host allowed then
#      (other load on the machine moves both);
#   3. under `strace -f -c -p <daemon pid>`: the daemon's syscalls per file operation, by
#      name (strace slows the daemon down a lot; its counts are right, its times are not);
#   4. with 50 files, under a full `strace -f -xx` of the daemon: every FUSE request is
#      decoded from /dev/fuse (opcode, target, name, reply), each syscall is charged to the
#      request its thread was serving, and the requests of the first file of each phase are
#      listed in order: syscalls per request type, and which requests one operation makes.
#
# Prints a report; -k keeps the scratch dir (raw perf and strace output) and says where.
# Whatever happens, the trap unmounts, stops the daemon (by pid) and the tracers it started.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
PY=/usr/bin/python3
SBXFS_BIN=${SBXFS_BIN:-$repo/sbxfs}
N=2000
keep=0
while getopts "n:kh" o; do
	case $o in
	n) N=$OPTARG ;;
	k) keep=1 ;;
	*) sed -n '3,28p' "$0"; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "profile_smallfiles.sh: must run as root" >&2; exit 1; }
[ -x "$SBXFS_BIN" ] || { echo "profile_smallfiles.sh: $SBXFS_BIN not built (make)" >&2; exit 1; }
command -v strace >/dev/null || { echo "profile_smallfiles.sh: strace not installed" >&2; exit 1; }
have_perf=0
if command -v perf >/dev/null && perf stat -e raw_syscalls:sys_enter -o /dev/null true 2>/dev/null; then
	have_perf=1
fi
have_fusetp=0
if [ "$have_perf" = 1 ] && { [ -d /sys/kernel/tracing/events/fuse ] || [ -d /sys/kernel/debug/tracing/events/fuse ]; }; then
	have_fusetp=1
fi

work=$(mktemp -d /var/tmp/sbxfs-prof.XXXXXX)
dpid= tpids=() tfds=()

cleanup() {
	local rc=$? p
	set +e
	for p in "${tpids[@]}"; do kill -INT "$p" 2>/dev/null; done
	if grep -q " $work/mnt " /proc/mounts; then
		fusermount3 -u "$work/mnt" 2>/dev/null || umount -l "$work/mnt"
	fi
	if [ -n "$dpid" ]; then
		for _ in $(seq 50); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.2; done
		kill -TERM "$dpid" 2>/dev/null
		for _ in $(seq 25); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$dpid" 2>/dev/null
	fi
	if [ "$keep" = 1 ]; then
		echo "profile_smallfiles.sh: raw output kept in $work" >&2
	elif ! grep -q " $work/" /proc/mounts; then
		rm -rf --one-file-system "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$work/state" "$work/mnt" "$work/out"
printf 'use: local\nstate_dir: %s\nreplicas: 4\nidle_timeout: 0\n' "$work/state" >"$work/mount.conf"
"$SBXFS_BIN" -f -c "$work/mount.conf" "$work/mnt" >"$work/daemon.log" 2>&1 &
dpid=$!
for _ in $(seq 150); do
	grep -q " $work/mnt fuse.sbxfs " /proc/mounts && break
	kill -0 "$dpid" 2>/dev/null || { cat "$work/daemon.log" >&2; exit 1; }
	sleep 0.1
done
grep -q " $work/mnt fuse.sbxfs " /proc/mounts || { echo "sbxfs did not mount" >&2; exit 1; }
mkdir -p "$work/mnt/prof/t1"
ws=$work/mnt/prof/t1/workspace     # the sandbox's workspace through the mount
# the FUSE connection id the tracepoints carry: the mount's kernel dev_t (major << 20 | minor)
conn=$("$PY" -c 'import os,sys; d=os.stat(sys.argv[1]).st_dev; print(os.major(d) << 20 | os.minor(d))' "$work/mnt")

cat >"$work/loop.py" <<'EOF'
# the small-file loop of bench/rows_files.py, one phase per call: loop.py PHASE DIR N
import os, sys, time
phase, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
names = [os.path.join(d, "f%05d" % k) for k in range(n)]
data = b"x" * 4096
t = time.perf_counter()
if phase == "create":
    for p in names:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.close(fd)
elif phase == "create0":
    for p in names:
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
elif phase == "stat":
    for p in names:
        os.stat(p)
elif phase in ("read", "reread"):
    for p in names:
        fd = os.open(p, os.O_RDONLY)
        os.read(fd, 8192)
        os.close(fd)
elif phase == "unlink":
    for p in names:
        os.unlink(p)
print("%.6f" % (time.perf_counter() - t))
EOF

PHASES="create stat read reread unlink create0"

# run_phase PHASE DIR OUTPREFIX: the loop, its elapsed seconds into OUTPREFIX.secs
run_phase() {
	"$PY" "$work/loop.py" "$1" "$2" "$N" >"$3.secs"
}
# before a create phase: ext4 scans past free inodes deleted in the last 30 s whose
# inode-table block is cached (recently_deleted()); after many unlinks on the filesystem
# that scan dominated creates, native ones too. Dropping caches removes what earlier phases
# left cached (other processes' deletes still count: see rows_files.py).
settle() {
	case $1 in create|create0) sync; echo 3 >/proc/sys/vm/drop_caches; sleep 0.2 ;; esac
}

# perf tool with a control fifo: starts disabled, "enable" / "disable" acknowledged
perf_start() { # NAME ARGS...
	local name=$1; shift
	rm -f "$work/$name.ctl" "$work/$name.ack"
	mkfifo "$work/$name.ctl" "$work/$name.ack"
	perf "$@" -D -1 --control "fifo:$work/$name.ctl,$work/$name.ack" >"$work/out/$name.stderr" 2>&1 &
	tpids+=($!)
	eval "exec {${name}_c}<>\"$work/$name.ctl\" {${name}_a}<>\"$work/$name.ack\""
	eval "tfds+=(\$${name}_c \$${name}_a)"
}
perf_cmd() { # NAME enable|disable
	local c a
	eval "c=\${${1}_c} a=\${${1}_a}"
	echo "$2" >&"$c"
	read -r -t 20 _ <&"$a" || { echo "perf $1: no ack for $2" >&2; exit 1; }
}
stop_tracers() {
	local p
	for p in "${tpids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	for p in "${tpids[@]}"; do wait "$p" 2>/dev/null || true; done
	for p in "${tfds[@]}"; do eval "exec $p>&-"; done
	tpids=() tfds=()
}

# ---- pass 1: perf ----------------------------------------------------------
if [ "$have_perf" = 1 ]; then
	d=$ws/perf
	mkdir "$d"
	for ph in $PHASES; do
		[ "$ph" = create0 ] && { rm -rf "$d"; mkdir "$d"; }
		perf_start pstat stat -x, -o "$work/out/perf-$ph.stat" \
			-e task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter -p "$dpid"
		if [ "$have_fusetp" = 1 ]; then
			perf_start prec record -q -a -o "$work/out/perf-$ph.data" \
				-e fuse:fuse_request_send --filter "connection == $conn" \
				-e fuse:fuse_request_end --filter "connection == $conn"
		fi
		sleep 0.3
		settle "$ph"
		perf_cmd pstat enable
		[ "$have_fusetp" = 1 ] && perf_cmd prec enable
		run_phase "$ph" "$d" "$work/out/perf-$ph"
		perf_cmd pstat disable
		[ "$have_fusetp" = 1 ] && perf_cmd prec disable
		stop_tracers
		if [ "$have_fusetp" = 1 ]; then
			perf script -i "$work/out/perf-$ph.data" -F time,event,trace --ns \
				>"$work/out/perf-$ph.script" 2>/dev/null || true
		fi
	done
	rm -rf "$d"
fi

# ---- pass 2: native ----------------------------------------------------------
d=$work/native
mkdir "$d"
for ph in $PHASES; do
	[ "$ph" = create0 ] && { rm -rf "$d"; mkdir "$d"; }
	settle "$ph"
	run_phase "$ph" "$d" "$work/out/native-$ph"
done
rm -rf "$d"

# ---- pass 2: strace --------------------------------------------------------
d=$ws/strace
mkdir "$d"
for ph in $PHASES; do
	[ "$ph" = create0 ] && { rm -rf "$d"; mkdir "$d"; }
	settle "$ph"
	strace -f -c -o "$work/out/strace-$ph.txt" -p "$dpid" 2>"$work/out/strace-$ph.stderr" &
	tpids+=($!)
	for _ in $(seq 100); do grep -q "attached" "$work/out/strace-$ph.stderr" && break; sleep 0.1; done
	sleep 0.3
	run_phase "$ph" "$d" "$work/out/strace-$ph"
	sleep 0.2
	stop_tracers
done
rm -rf "$d"

# ---- pass 4: decoded requests -------------------------------------------------
NT=50
fusefd=$(for f in /proc/"$dpid"/fd/*; do [ "$(readlink "$f")" != /dev/fuse ] || basename "$f"; done | head -1)
d=$ws/decode
mkdir "$d"
for ph in $PHASES; do
	[ "$ph" = create0 ] && { rm -rf "$d"; mkdir "$d"; }
	settle "$ph"
	strace -f -xx -s 512 -o "$work/out/trace-$ph.txt" -p "$dpid" 2>"$work/out/trace-$ph.stderr" &
	tpids+=($!)
	for _ in $(seq 100); do grep -q "attached" "$work/out/trace-$ph.stderr" && break; sleep 0.1; done
	sleep 0.3
	"$PY" "$work/loop.py" "$ph" "$d" "$NT" >/dev/null
	sleep 0.2
	stop_tracers
done
rm -rf "$d"

# ---- report ----------------------------------------------------------------
"$PY" - "$work/out" "$N" "$have_perf" "$have_fusetp" "$PHASES" "$(uname -r)" "$(nproc)" "$("$SBXFS_BIN" --version 2>/dev/null)" "$fusefd" "$NT" <<'EOF'
import collections, os, re, statistics, sys
out, n, have_perf, have_tp, phases = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1", sys.argv[5].split()
what = {"create": "open(O_CREAT|O_EXCL) + write 4 KiB + close",
        "stat": "stat", "read": "open + read 4 KiB + close, the first open since the create",
        "reread": "open + read 4 KiB + close, again",
        "unlink": "unlink", "create0": "open(O_CREAT|O_EXCL) + close, empty file"}
print("# sbxfs small-file path profile")
print()
print("%s, kernel %s, %s CPUs; %d files per phase; figures are per file operation" % (sys.argv[8] or "sbxfs", sys.argv[6], sys.argv[7], n))
print("(the daemon's side only: the client makes 3 syscalls per create and read, 1 per stat and unlink, 2 per create0;")
print(" caches dropped before each create phase; native = the same loop on a native dir of that filesystem, run after the perf pass)")

def perf_stat(path):
    vals = {}
    try:
        for line in open(path):
            f = line.strip().split(",")
            if len(f) >= 3 and f[0] and f[0][0].isdigit():
                try:
                    vals[f[2]] = float(f[0])
                except ValueError:
                    pass
    except OSError:
        pass
    return vals

def fuse_requests(path):
    send, lat, errs = collections.Counter(), collections.defaultdict(list), collections.Counter()
    pending = {}
    try:
        for line in open(path):
            m = re.search(r"(\d+\.\d+):\s+fuse:fuse_request_(send|end):.*?req (\d+)(.*)", line)
            if not m:
                continue
            ts, kind, req, rest = float(m.group(1)), m.group(2), m.group(3), m.group(4)
            if kind == "send":
                op = re.search(r"\((FUSE_\w+)\)", rest)
                op = op.group(1)[5:] if op else "?"
                send[op] += 1
                pending[req] = (op, ts)
            elif req in pending:
                op, t0 = pending.pop(req)
                lat[op].append((ts - t0) * 1e6)
                e = re.search(r"error (-?\d+)", rest)
                if e and e.group(1) != "0":
                    errs[(op, int(e.group(1)))] += 1
    except OSError:
        pass
    return send, lat, errs

def strace_counts(path):
    calls, errors = collections.Counter(), collections.Counter()
    try:
        for line in open(path):
            f = line.split()
            if len(f) >= 5 and re.match(r"^[\d.]+$", f[0]) and f[-1] != "total":
                name = f[-1]
                if len(f) == 6:
                    calls[name], errors[name] = int(f[3]), int(f[4])
                else:
                    calls[name] = int(f[3])
    except OSError:
        pass
    return calls, errors

def secs(path):
    try:
        return float(open(path).read().strip())
    except (OSError, ValueError):
        return None

import struct
FUSE_OPS = {1: "LOOKUP", 2: "FORGET", 3: "GETATTR", 4: "SETATTR", 9: "MKDIR", 10: "UNLINK", 11: "RMDIR",
            14: "OPEN", 15: "READ", 16: "WRITE", 18: "RELEASE", 20: "FSYNC", 22: "GETXATTR", 25: "FLUSH",
            27: "OPENDIR", 28: "READDIR", 29: "RELEASEDIR", 34: "ACCESS", 35: "CREATE", 42: "BATCH_FORGET",
            44: "READDIRPLUS", 52: "STATX"}
# where the name starts after the 40-byte header, for requests that carry one
NAME_AT = {1: 0, 10: 0, 11: 0, 9: 8, 35: 16, 22: 8}
fusefd, nt = sys.argv[9], int(sys.argv[10])

def unhex(s):
    return bytes.fromhex(s.replace("\\x", ""))

def decode_trace(path):
    """-> (requests in order, {opcode: Counter(syscall)}, {opcode: count})"""
    pending = {}      # tid -> (syscall, fd) of an unfinished call
    serving = {}      # tid -> request dict being served
    reqs, by_unique = [], {}
    sys_by_op, n_by_op = collections.defaultdict(collections.Counter), collections.Counter()
    rx_call = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\((\d+)?)(.*)$")
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return [], sys_by_op, n_by_op
    for line in lines:
        m = rx_call.match(line)
        if not m:
            continue
        tid, resumed, name, fd, rest = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
        if resumed:
            name, fd = pending.pop(tid, (resumed, None))
        elif rest.rstrip().endswith("<unfinished ...>"):
            pending[tid] = (name, fd)
            continue
        if name in ("exited", "killed") or name is None:
            continue
        if name == "read" and fd == fusefd:
            mm = re.search(r'"((?:\\x[0-9a-f]{2})+)"', rest)
            if not mm:
                continue
            b = unhex(mm.group(1))
            if len(b) < 40:
                continue
            _, op, unique, nodeid = struct.unpack_from("<IIQQ", b, 0)
            r = {"op": FUSE_OPS.get(op, str(op)), "opc": op, "unique": unique, "node": nodeid,
                 "name": None, "reply": None, "err": 0, "sys": collections.Counter()}
            if op in NAME_AT and len(b) > 40 + NAME_AT[op]:
                r["name"] = b[40 + NAME_AT[op]:].split(b"\0")[0].decode(errors="replace")
            reqs.append(r)
            by_unique[unique] = r
            serving[tid] = r
            continue
        r = serving.get(tid)
        if name == "writev" and fd == fusefd:
            bases = re.findall(r'iov_base="((?:\\x[0-9a-f]{2})*)"', rest)
            if bases:
                h = unhex(bases[0])
                if len(h) >= 16:
                    _, err, unique = struct.unpack_from("<IiQ", h, 0)
                    rq = by_unique.get(unique)
                    if rq:
                        rq["err"] = err
                        if len(bases) > 1 and rq["opc"] in (1, 9, 35) and err == 0:
                            body = unhex(bases[1])
                            if len(body) >= 8:
                                rq["reply"] = struct.unpack_from("<Q", body, 0)[0]
                        r = rq
        if r is not None:
            r["sys"][name] += 1
    for r in reqs:
        n_by_op[r["op"]] += 1
        sys_by_op[r["op"]].update(r["sys"])
    return reqs, sys_by_op, n_by_op

def first_op_requests(reqs, phase):
    """the requests of the first file operation: from the request naming f00000 (or, for
    phases that look nothing up, a fixed share) up to the one naming f00001"""
    names = {}
    for r in reqs:
        if r["reply"]:
            names[r["reply"]] = r["name"]
    start = next((i for i, r in enumerate(reqs) if r["name"] == "f00000"), None)
    end = next((i for i, r in enumerate(reqs) if r["name"] == "f00001"), None)
    if start is None or end is None:
        # no names (stat, read): the operation starts with the first opcode that comes once
        # per file; show the span from its middle occurrence to the next one
        count = collections.Counter(r["op"] for r in reqs)
        lead = next((r["op"] for r in reqs if count[r["op"]] >= nt), None)
        at = [i for i, r in enumerate(reqs) if r["op"] == lead]
        if len(at) < 2:
            return []
        k = len(at) // 2
        start, end = at[k - 1], at[k]
    out = []
    for r in reqs[start:end]:
        tgt = names.get(r["node"], "node %x" % r["node"] if r["node"] != 1 else "mount root")
        s = "%s(%s%s)" % (r["op"], tgt, (", \"%s\"" % r["name"]) if r["name"] else "")
        if r["err"]:
            s += " = %s" % (os.strerror(-r["err"]) if r["err"] < 0 else r["err"])
        s += " [%s]" % ", ".join("%s%s" % (k, "" if v == 1 else "×%d" % v) for k, v in r["sys"].items())
        out.append(s)
    return out

rows = []
for ph in phases:
    print()
    print("## %s: %s" % (ph, what[ph]))
    if have_perf:
        s = secs(os.path.join(out, "perf-%s.secs" % ph))
        v = perf_stat(os.path.join(out, "perf-%s.stat" % ph))
        sc = v.get("raw_syscalls:sys_enter")
        tc = v.get("task-clock")       # msec
        cs = v.get("context-switches")
        ns = secs(os.path.join(out, "native-%s.secs" % ph))
        print("- without strace: %d ops in %.3f s = %.0f ops/s (native dir: %.0f ops/s); "
              "daemon: %s syscalls/op, %s µs CPU/op (user + kernel), %s context switches/op"
              % (n, s or 0, n / s if s else 0, n / ns if ns else 0,
                 "%.1f" % (sc / n) if sc is not None else "?",
                 "%.1f" % (tc * 1e3 / n) if tc is not None else "?",
                 "%.1f" % (cs / n) if cs is not None else "?"))
        if have_tp:
            send, lat, errs = fuse_requests(os.path.join(out, "perf-%s.script" % ph))
            tot = sum(send.values())
            parts = []
            for op, c in send.most_common():
                l = lat.get(op)
                parts.append("%s %.2f%s" % (op, c / n, (" (%.0f µs)" % statistics.median(l)) if l else ""))
            print("- FUSE requests/op: %.2f = %s" % (tot / n, ", ".join(parts) or "none"))
            if errs:
                print("- request errors: " + ", ".join("%s %s ×%.2f/op" % (op, os.strerror(-e) if e < 0 else e, c / n)
                                                      for (op, e), c in errs.most_common()))
            rows.append((ph, n / s if s else None, n / ns if ns else None, tot / n, sc / n if sc is not None else None,
                         tc * 1e3 / n if tc is not None else None))
    calls, errors = strace_counts(os.path.join(out, "strace-%s.txt" % ph))
    tot = sum(calls.values())
    s2 = secs(os.path.join(out, "strace-%s.secs" % ph))
    print("- under strace -f -c: %.1f daemon syscalls/op (%s ops/s while traced):" % (tot / n, "%.0f" % (n / s2) if s2 else "?"))
    for name, c in calls.most_common():
        if c / n < 0.01:
            continue
        e = errors.get(name)
        print("    %-16s %6.2f/op%s" % (name, c / n, ("   (%.2f/op failed)" % (e / n)) if e else ""))
    reqs, sys_by_op, n_by_op = decode_trace(os.path.join(out, "trace-%s.txt" % ph))
    if reqs:
        print("- the requests of one operation, each with the daemon syscalls its thread made while "
              "serving it (targets are named when their LOOKUP or CREATE is in the trace):")
        for s_ in first_op_requests(reqs, ph):
            print("    " + s_)
        print("- daemon syscalls per request, by type (%d files under strace -f):" % nt)
        for op, c in n_by_op.most_common():
            tot_ = sum(sys_by_op[op].values())
            print("    %-12s ×%-5d %4.1f syscalls each: %s" % (op, c, tot_ / c, ", ".join(
                "%s %.2f" % (k, v / c) for k, v in sys_by_op[op].most_common())))
if rows:
    print()
    print("## summary (perf pass)")
    print()
    print("| phase | sbxfs ops/s | native ops/s | FUSE requests/op | daemon syscalls/op | daemon CPU µs/op |")
    print("|---|---|---|---|---|---|")
    for ph, ops, nops, rq, sc, cpu in rows:
        print("| %s | %s | %s | %.2f | %s | %s |" % (ph, "%.0f" % ops if ops else "?", "%.0f" % nops if nops else "?", rq,
              "%.1f" % sc if sc is not None else "?", "%.1f" % cpu if cpu is not None else "?"))
EOF
