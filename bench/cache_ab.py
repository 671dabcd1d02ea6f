#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The cache watcher's cost on the rows that change names through the mount,
interleaved: sides are sbxfs mounts that differ in binary or configuration
(e.g. the watcher against `cache_timeout: 0`), alternated every round
(rotating order, reversed every other round) so a noisy host moves all sides
alike; prints, per row, each side's median and the median of its per-round
ratios to the first side.

    bench/cache_ab.py [--side LABEL=BINARY[,CACHE_TIMEOUT[,VAR=VALUE...]]] ... [--files 2000] [--rounds 8]

Default sides: "nowatch" = ./sbxfs with cache_timeout 0 (the reference) and
"watch" = ./sbxfs with cache_timeout 300.  A side whose binary is "native"
is a plain directory of the same filesystem (its CPU figures are the
client's alone).  VAR=VALUE: the daemon's
environment (the watcher's bench knobs, SBXFS_TEST_FSWATCH_*: fs/fswatch.c).  Runs as root.  Each side mounts
its own sbxfs (local provider, sandbox bench/t1, state_dir under /var/tmp);
all are unmounted and their daemons stopped (by pid) on exit, also on
Ctrl-C.  Each round, in a fresh directory of the sandbox's workspace:
create + write 4 KiB + close of N files, stat of them (right after the
writes, then warm), stat of N names that do not exist (the second probe),
open + read + close of them (the second time: cached),
readdir, readdir + lstat (`ls -l`), unlink; N empty creates; untar of an
N-file tarball, then `find` (walk + lstat) and `grep -r` (walk + open +
read) of the tree, warm (the tree is removed untimed).  The watcher's counters (events read) are
printed at the end.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

from abutil import teardown, wait_mounted

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROWS = ("create", "create_empty", "stat_after_create", "stat_warm", "stat_missing", "read_cached", "readdir", "ls_l",
        "unlink", "untar", "find", "grep")



TICK = os.sysconf("SC_CLK_TCK")
CPU = {}  # row: CPU seconds of the last timed phase (the daemon's and this process's, with tar)


def cpu_now(pid):
    """CPU seconds used so far by the daemon (every thread) and by this
    process and its waited-for children (tar)."""
    daemon = 0
    if pid:  # None: a native side, no daemon
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        daemon = (int(fields[11]) + int(fields[12])) / TICK
    own = os.times()
    return daemon + own.user + own.system + own.children_user + \
        own.children_system


def timed(fn, pid=None, row=None):
    c0 = cpu_now(pid)
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    CPU[row] = cpu_now(pid) - c0
    return dt


def walk(top, read):
    """find (walk + lstat) or grep -r (walk + open + read) of a tree."""
    for root, dirs, files in os.walk(top):
        for f in files:
            p = os.path.join(root, f)
            if read:
                with open(p, "rb") as fh:
                    fh.read()
            else:
                os.lstat(p)


def one_round(base, r, n, tarball, pid):
    """{row: ops/s, row + "_cpu": CPU microseconds per op} of one round in
    fresh directories under base (pid: the daemon's)."""
    data = b"x" * 4096
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    d = os.path.join(base, "r%d" % r)
    os.mkdir(d)
    names = [os.path.join(d, "f%05d" % k) for k in range(n)]
    out = {}

    def create():
        for p in names:
            fd = os.open(p, flags, 0o644)
            os.write(fd, data)
            os.close(fd)

    def create_empty():
        for p in names:
            os.close(os.open(p + "e", flags, 0o644))

    def missing():
        for p in names:
            try:
                os.stat(p + ".missing")
            except FileNotFoundError:
                pass

    def read_all():
        for p in names:
            fd = os.open(p, os.O_RDONLY)
            os.read(fd, 8192)
            os.close(fd)

    def ls_l():
        with os.scandir(d) as it:
            for e in it:
                e.stat(follow_symlinks=False)

    out["create"] = n / timed(create, pid, "create")
    out["stat_after_create"] = n / timed(lambda: [os.stat(p) for p in names], pid, "stat_after_create")
    out["stat_warm"] = n / timed(lambda: [os.stat(p) for p in names], pid, "stat_warm")
    missing()  # the first probe of each missing name
    out["stat_missing"] = n / timed(missing, pid, "stat_missing")
    out["create_empty"] = n / timed(create_empty, pid, "create_empty")
    os.listdir(d)  # the first listing fills the kernel's cache (when it keeps one)
    out["readdir"] = 2 * n / timed(lambda: os.listdir(d), pid, "readdir")
    out["ls_l"] = 2 * n / timed(ls_l, pid, "ls_l")
    read_all()  # the first open since the write (after ls -l: a read makes the next stat ask again)
    out["read_cached"] = n / timed(read_all, pid, "read_cached")
    out["unlink"] = 2 * n / timed(lambda: [os.unlink(p + s) for p in names for s in ("", "e")], pid, "unlink")
    os.rmdir(d)
    u = os.path.join(base, "u%d" % r)
    os.mkdir(u)
    out["untar"] = n / timed(lambda: subprocess.run(["tar", "xf", tarball, "-C", u], check=True), pid, "untar")
    walk(u, False)  # warm
    out["find"] = n / timed(lambda: walk(u, False), pid, "find")
    walk(u, True)
    out["grep"] = n / timed(lambda: walk(u, True), pid, "grep")
    shutil.rmtree(u)
    for row in ROWS:
        out[row + "_cpu"] = CPU[row] * 1e6 / (2 * n if row in ("readdir", "ls_l", "unlink") else n)
    return out


def parse_side(spec):
    label, _, rest = spec.partition("=")
    binary, *more = rest.split(",")
    ct = int(more[0]) if more and more[0] else 300
    env = dict(kv.split("=", 1) for kv in more[1:])
    return label, os.path.abspath(binary), ct, env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", action="append", help="LABEL=BINARY[,CACHE_TIMEOUT] (the first is the reference)")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--json", help="write every sample here")
    a = ap.parse_args()
    me = os.path.join(REPO, "sbxfs")
    sides = [parse_side(s) for s in (a.side or ["nowatch=%s,0" % me, "watch=%s,300" % me])]

    work = tempfile.mkdtemp(prefix="sbx-cache-ab-", dir="/var/tmp")
    os.chmod(work, 0o755)
    daemons, mounts, paths, pids, mnts = [], [], {}, {}, {}
    try:
        src = os.path.join(work, "src")
        os.mkdir(src)
        for k in range(a.files):
            with open(os.path.join(src, "t%05d" % k), "wb") as f:
                f.write(b"y" * 1024)
        tarball = os.path.join(work, "files.tar")
        with tarfile.open(tarball, "w") as t:
            t.add(src, arcname="tree")
        shutil.rmtree(src)
        for i, (label, binary, ct, env) in enumerate(sides):
            if os.path.basename(binary) == "native":  # a plain directory of the same filesystem
                paths[label] = os.path.join(work, "native%d" % i)
                os.mkdir(paths[label])
                pids[label] = None
                continue
            mnt, state = os.path.join(work, "mnt%d" % i), os.path.join(work, "state%d" % i)
            os.mkdir(mnt)
            conf = os.path.join(work, "mount%d.conf" % i)
            with open(conf, "w") as f:
                f.write("use: local\nstate_dir: %s\ncache_timeout: %d\n" % (state, ct))
            logp = os.path.join(work, "sbxfs%d.log" % i)
            with open(logp, "wb") as log:
                d = subprocess.Popen([binary, "-f", "-c", conf, mnt], stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL, env=dict(os.environ, **env))
            daemons.append(d)
            mounts.append(mnt)
            try:
                wait_mounted(mnt, d)
            except RuntimeError:
                with open(logp, errors="replace") as f:
                    sys.stderr.write(f.read()[-4000:])
                raise
            os.makedirs(os.path.join(mnt, "bench", "t1"))
            p = os.path.join(mnt, "bench", "t1", "workspace", "ab")
            os.mkdir(p)
            paths[label] = p
            pids[label] = d.pid
            mnts[label] = mnt
        labels = [s[0] for s in sides]
        for s in labels:  # warm up
            one_round(paths[s], 1000, 200, tarball, pids[s])
        res = {s: [] for s in labels}
        for r in range(a.rounds):
            order = labels[r % len(labels):] + labels[:r % len(labels)]
            if r % 2:
                order.reverse()
            for s in order:
                res[s].append(one_round(paths[s], r, a.files, tarball, pids[s]))
        load = os.getloadavg()[0]
        print("%d files, %d interleaved rounds, load %.1f; ops/s median [min-max], "
              "ratio to %s per round median [min-max]" % (a.files, a.rounds, load, labels[0]))
        for label, binary, ct, env in sides:
            print("  %s = %s, cache_timeout %d %s" % (label, binary, ct, " ".join("%s=%s" % kv for kv in env.items())))
        for row in ROWS + tuple(r + "_cpu" for r in ROWS if r not in ("readdir", "ls_l", "find")):  # too short
            if row == "create_cpu":
                print("-- CPU microseconds per op, the daemon's and the client's (lower is better; ratio: "
                      "the reference's over the side's, above 1 cheaper)")
            ref = [x[row] for x in res[labels[0]]]
            line = "%-17s %s %8.0f" % (row, labels[0], statistics.median(ref))
            for s in labels[1:]:
                v = [x[row] for x in res[s]]
                rat = [(y / x if row.endswith("_cpu") else x / y) for x, y in zip(v, ref) if x and y] or [0]
                line += " | %s %8.0f %.3fx [%.2f-%.2f]" % (s, statistics.median(v), statistics.median(rat),
                                                          min(rat), max(rat))
            print(line)
        for s, m in mnts.items():
            try:
                with open(os.path.join(m, ".status")) as f:
                    cw = json.load(f).get("cache_watcher")
                print("  %s watcher: %s" % (s, cw))
            except (OSError, ValueError):
                pass
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"files": a.files, "rounds": a.rounds, "load": load,
                           "sides": [list(s) for s in sides], "samples": res}, f, indent=1)
    finally:
        teardown(mounts, daemons, work)


if __name__ == "__main__":
    main()
