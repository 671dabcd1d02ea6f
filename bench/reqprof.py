#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""FUSE requests per file operation, and the daemon's system calls per
request: the profile behind docs/performance.md's "requests per operation".

    bench/reqprof.py [--sbxfs ./sbxfs] [-n 500] [--conf 'cache_timeout: 0'] [--no-perf]

Runs as root.  Mounts its own sbxfs (local provider, sandbox prof/t1, state_dir
under /var/tmp), makes a tree in the sandbox's workspace, and runs each
operation N times after a warm-up (the caches the kernel keeps are warm:
what an agent's tools meet on their second look).  For each operation:

- FUSE requests per operation, by opcode: the daemon's counters in .metrics
  (sbxfs_fuse_requests_total) before and after, less the requests of
  reading .metrics itself (measured the same way);
- the daemon's system calls per operation and per request, and its CPU
  time per operation: `perf stat -e raw_syscalls:sys_enter,task-clock -p
  <daemon>` around the loop (without perf: not shown);
- ops/s on the mount and on a native directory of the same filesystem,
  measured back to back (a rough ratio; the interleaved benches,
  cache_ab.py and smallfiles_ab.py, are the figures to quote).

The mount is unmounted and the daemon stopped (by pid) on exit, also on
Ctrl-C.
"""

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from abutil import teardown, wait_mounted

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RX = re.compile(r'^sbxfs_fuse_requests_total\{op="(\w+)"\} (\d+)$', re.M)


def requests(mnt):
    with open(os.path.join(mnt, ".metrics")) as f:
        return collections.Counter({k: int(v) for k, v in RX.findall(f.read())})


class Perf:
    """perf stat of the daemon's system calls, started and stopped around a loop."""

    def __init__(self, pid, work):
        self.pid, self.work, self.p = pid, work, None

    def __enter__(self):
        self.out = os.path.join(self.work, "perf.stat")
        ctl, ack = os.path.join(self.work, "perf.ctl"), os.path.join(self.work, "perf.ack")
        for p in (ctl, ack):
            if os.path.exists(p):
                os.unlink(p)
            os.mkfifo(p)
        self.p = subprocess.Popen(["perf", "stat", "-x,", "-o", self.out, "-e", "raw_syscalls:sys_enter,task-clock",
                                   "-p", str(self.pid), "-D", "-1", "--control", "fifo:%s,%s" % (ctl, ack)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ctl = open(ctl, "w")
        self.ack = open(ack)
        self.cmd("enable")
        return self

    def cmd(self, c):
        self.ctl.write(c + "\n")
        self.ctl.flush()
        self.ack.readline()

    def __exit__(self, *exc):
        self.cmd("disable")
        self.p.send_signal(signal.SIGINT)
        self.p.wait(timeout=30)
        self.ctl.close()
        self.ack.close()
        self.calls, self.cpu_ms = 0, 0.0
        with open(self.out) as f:
            for line in f:
                x = line.strip().split(",")
                if len(x) >= 3 and x[2] == "raw_syscalls:sys_enter" and x[0].isdigit():
                    self.calls = int(x[0])
                elif len(x) >= 3 and x[2].startswith("task-clock"):
                    try:
                        self.cpu_ms = float(x[0])
                    except ValueError:
                        pass


def make_tree(d, nfiles, ndirs):
    """ndirs directories of nfiles/ndirs 4 KiB files each, plus the flat
    directory "flat" of nfiles files (stat, open, ls -l)."""
    os.mkdir(d)
    flat = os.path.join(d, "flat")
    os.mkdir(flat)
    data = b"hello world\n" * 341
    for k in range(nfiles):
        with open(os.path.join(flat, "f%05d" % k), "wb") as f:
            f.write(data)
    tree = os.path.join(d, "tree")
    os.mkdir(tree)
    for j in range(ndirs):
        sub = os.path.join(tree, "d%03d" % j)
        os.mkdir(sub)
        for k in range(max(1, nfiles // ndirs)):
            with open(os.path.join(sub, "g%04d.txt" % k), "wb") as f:
                f.write(data)


def ops(d, n):
    """name -> (function doing the operation n times, how many operations it is)."""
    flat = os.path.join(d, "flat")
    names = [os.path.join(flat, "f%05d" % k) for k in range(n)]
    new = [os.path.join(d, "new", "c%05d" % k) for k in range(n)]
    new0 = [os.path.join(d, "new", "e%05d" % k) for k in range(n)]
    missing = [os.path.join(flat, "missing%05d" % k) for k in range(n)]
    tree = os.path.join(d, "tree")
    data = b"x" * 4096
    wflags = os.O_WRONLY | os.O_CREAT | os.O_EXCL

    def stat():
        for p in names:
            os.stat(p)

    def stat_missing():
        for p in missing:
            try:
                os.stat(p)
            except FileNotFoundError:
                pass

    def read():
        for p in names:
            fd = os.open(p, os.O_RDONLY)
            os.read(fd, 8192)
            os.close(fd)

    def create():
        for p in new:
            fd = os.open(p, wflags, 0o644)
            os.write(fd, data)
            os.close(fd)

    def create0():
        for p in new0:
            os.close(os.open(p, wflags, 0o644))

    def stat_after_write():
        for p in new:
            os.stat(p)

    def unlink():
        for p in new + new0:
            os.unlink(p)

    def readdir():
        os.listdir(flat)

    def ls_l():
        with os.scandir(flat) as it:
            for e in it:
                e.stat(follow_symlinks=False)

    def find():
        for root, dirs, files in os.walk(tree):
            for f in files:
                os.lstat(os.path.join(root, f))

    def grep():
        for root, dirs, files in os.walk(tree):
            for f in files:
                with open(os.path.join(root, f), "rb") as fh:
                    fh.read()

    nt = sum(len(f) for _, _, f in os.walk(tree))
    # order matters: create before the stat after it, unlink last
    return [("stat (warm)", stat, n), ("lookup of a missing name", stat_missing, n),
            ("open + read 4 KiB + close (cached)", read, n),
            ("create + write 4 KiB + close", create, n), ("stat right after the write", stat_after_write, n),
            ("create + close (empty)", create0, n), ("unlink", unlink, 2 * n),
            ("readdir (listing cached)", readdir, 1), ("ls -l (readdir + lstat)", ls_l, 1),
            ("find (walk + lstat)", find, 1), ("grep -r (walk + read)", grep, 1)], nt


def run(d, n, mnt=None, pid=None, work=None, use_perf=True):
    os.makedirs(os.path.join(d, "new"), exist_ok=True)
    table, nt = ops(d, n)
    rows = []
    for label, fn, count in table:
        if label.startswith("create"):
            pass  # nothing to warm: each create is new
        elif not label.startswith("stat right") and not label.startswith("unlink"):
            fn()  # warm-up: the kernel's caches hold what an earlier look left
        r0 = requests(mnt) if mnt else None
        if mnt and use_perf:
            with Perf(pid, work) as p:
                t = time.perf_counter()
                fn()
                dt = time.perf_counter() - t
            calls, cpu = p.calls, p.cpu_ms
        else:
            t = time.perf_counter()
            fn()
            dt = time.perf_counter() - t
            calls, cpu = None, None
        req = None
        if mnt:
            req = requests(mnt) - r0
            req.subtract(METRICS_COST)
            req = collections.Counter({k: v for k, v in req.items() if v > 0})
        if calls is not None:  # the tracer slows the daemon: time an untraced pass too
            if label.startswith(("create", "unlink", "stat right")):
                dt = None  # not repeatable on the same names
            else:
                t = time.perf_counter()
                fn()
                dt = time.perf_counter() - t
        rows.append((label, count, dt, req, calls, cpu))
    return rows, nt


METRICS_COST = collections.Counter()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sbxfs", default=os.path.join(REPO, "sbxfs"))
    ap.add_argument("-n", type=int, default=500, help="files per operation")
    ap.add_argument("--conf", default="", help="more lines of mount.conf, e.g. 'cache_timeout: 0'")
    ap.add_argument("--no-perf", action="store_true")
    a = ap.parse_args()
    use_perf = not a.no_perf and shutil.which("perf") is not None
    work = tempfile.mkdtemp(prefix="sbx-reqprof-", dir="/var/tmp")
    os.chmod(work, 0o755)
    mnt, state = os.path.join(work, "mnt"), os.path.join(work, "state")
    os.mkdir(mnt)
    conf = os.path.join(work, "mount.conf")
    with open(conf, "w") as f:
        f.write("use: local\nstate_dir: %s\nidle_timeout: 0\n%s\n" % (state, a.conf.replace("\\n", "\n")))
    logp = os.path.join(work, "sbxfs.log")
    daemons = []
    try:
        with open(logp, "wb") as log:
            d = subprocess.Popen([os.path.abspath(a.sbxfs), "-f", "-c", conf, mnt], stdout=log, stderr=log,
                                 stdin=subprocess.DEVNULL)
        daemons.append(d)
        wait_mounted(mnt, d)
        os.makedirs(os.path.join(mnt, "prof", "t1"))
        base = os.path.join(mnt, "prof", "t1", "workspace", "p")
        native = os.path.join(work, "native")
        ndirs = max(1, a.n // 20)
        make_tree(base, a.n, ndirs)
        make_tree(native, a.n, ndirs)
        r0 = requests(mnt)
        r1 = requests(mnt)
        METRICS_COST.update(r1 - r0)
        rows, nt = run(base, a.n, mnt, d.pid, work, use_perf)
        nrows, _ = run(native, a.n)
        print("sbxfs %s, %d files per operation (find, grep: %d files in %d directories), conf %r, load %.1f"
              % (a.sbxfs, a.n, nt, ndirs, a.conf, os.getloadavg()[0]))
        print()
        print("| operation | FUSE requests per op, by opcode | daemon syscalls per op | per request "
              "| daemon CPU µs per op | sbxfs / native ops/s |")
        print("|---|---|---|---|---|---|")
        for (label, count, dt, req, calls, cpu), (_, _, ndt, _, _, _) in zip(rows, nrows):
            per = count if count > 1 else 1
            nreq = sum(req.values())
            what = ", ".join("%s %s" % (k.upper(), fmt(v / per)) for k, v in req.most_common()) or "none"
            sc = "%s" % fmt(calls / per) if calls is not None else "-"
            spr = "%.1f" % (calls / nreq) if calls is not None and nreq else "-"
            ratio = "%.2fx" % (ndt / dt) if dt else "(see cache_ab.py)"
            cu = fmt(cpu * 1e3 / per) if cpu is not None else "-"
            print("| %s | %s = %s | %s | %s | %s | %s |" % (label, fmt(nreq / per), what, sc, spr, cu, ratio))
        print()
        print("(find, grep, readdir, ls -l: per run over the whole directory or tree, not per file)")
    finally:
        teardown([mnt], daemons, work)


def fmt(x):
    return "%.0f" % x if x >= 100 else "%.2f" % x if x < 10 else "%.1f" % x


if __name__ == "__main__":
    main()
