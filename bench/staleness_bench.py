#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/staleness_bench.py - how long a job's change takes to show through the mount
(issue 23: the cache watcher, fs/fswatch.c), with the watcher and without it.

    /usr/bin/python3 bench/staleness_bench.py [--changes N] [--out FILE]

Needs root (FUSE), ./sbxfs built (or SBXFS_BIN), bubblewrap, python3 inside the sandbox
(the local provider binds the host's /usr).  For each configuration (the default, i.e.
cache_timeout 300 with the watcher, and `cache_timeout: 0`, the short timeouts without it) a
daemon is started, a sandbox acquired, and one job makes N changes 5-20 ms apart, a third
each of:
  rename   a new file renamed over `v` (the host's cached name must go: the inode number
           `stat v` shows)
  append   a 64-byte record appended to `a` (the host's cached attributes: stat size)
  create   a new file in the directory `c/` (the host's cached listing: listdir length)
The views are polled with stat and a listing of `c/` only: an open would revalidate the
name, and a listing of the directory of `v` and `a` would refresh their attributes
(READDIRPLUS), either hiding the cache being measured.
printing for each its kind, sequence number and CLOCK_REALTIME time.  Meanwhile this process
polls all three views in a loop (primed before the job starts) and notes when each change
is first visible.  Delay = first seen - made; the table gives p50, p99 and max per kind.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from bench import Daemon  # noqa: E402

REC = 64
JOB = r'''
import os, random, sys, time
os.chdir("/mnt/user-data/workspace/st")
r = random.Random(7)
seq = {"rename": 0, "append": 0, "create": 0}
for i in range(%(n)d):
    time.sleep(r.uniform(0.005, 0.02))
    kind = ("rename", "append", "create")[i %% 3]
    seq[kind] += 1
    s = seq[kind]
    if kind == "rename":
        with open("v.tmp", "w") as f:
            f.write(str(s))
        ino = os.stat("v.tmp").st_ino
        t = time.time_ns()
        os.rename("v.tmp", "v")
        s = ino
    elif kind == "append":
        with open("a", "a") as f:
            f.write(("%%d" %% s).ljust(%(rec)d - 1) + "\n")
            f.flush()
            t = time.time_ns()
    else:
        open("c/n%%06d" %% s, "w").close()
        t = time.time_ns()
    print(kind, s, t)
sys.stdout.flush()
'''


def write_ctl(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def measure(binary, workdir, name, conf, changes):
    d = Daemon(binary, workdir, name, 4, conf)
    d.start()
    try:
        sbx = os.path.join(d.mnt, "bench", "t1")
        os.makedirs(sbx)
        st = os.path.join(sbx, "workspace", "st")
        os.mkdir(st)
        with open(os.path.join(st, "v"), "w") as f:
            f.write("0")
        open(os.path.join(st, "a"), "w").close()
        os.mkdir(os.path.join(st, "c"))
        for _ in range(3):  # prime the host's caches
            os.stat(os.path.join(st, "v")), os.stat(os.path.join(st, "a")), os.listdir(os.path.join(st, "c"))
        status = open(os.path.join(sbx, "status")).read()
        job = os.path.join(sbx, "jobs", "st")
        os.mkdir(job)
        write_ctl(os.path.join(job, "cmd"), "python3 - <<'EOF'\n%sEOF\n" % (JOB % {"n": changes, "rec": REC}))
        seen = {"rename": {}, "append": {}, "create": {}}
        last = {"rename": 0, "append": 0, "create": 0}
        polls = 0
        deadline = time.monotonic() + changes * 0.05 + 60
        statefile = os.path.join(job, "status")
        while time.monotonic() < deadline:
            now = time.time_ns()
            try:
                ino = os.stat(os.path.join(st, "v")).st_ino
                seen["rename"].setdefault(ino, now)
            except OSError:
                pass
            vals = {"append": os.stat(os.path.join(st, "a")).st_size // REC,
                    "create": len(os.listdir(os.path.join(st, "c")))}
            for k, v in vals.items():
                for s in range(last[k] + 1, v + 1):
                    seen[k][s] = now
                last[k] = max(last[k], v)
            polls += 1
            if polls % 200 == 0 and '"running"' not in open(statefile).read():
                break
        time.sleep(1.5)  # the stragglers of the short timeouts
        now = time.time_ns()
        out = open(os.path.join(job, "stdout")).read().split("\n")
        delays = {"rename": [], "append": [], "create": []}
        made = [ln.split() for ln in out if ln.strip()]
        # a rename is shown once its file or a later one is: the first time any of
        # them was seen (a poll may miss a file renamed over again 5 ms later)
        renames = [(int(s), int(t)) for k, s, t in made if k == "rename"]
        first = now
        shown = {}
        for ino, t in reversed(renames):
            first = min(first, seen["rename"].get(ino, now))
            shown[(ino, t)] = first
        for k, s, t in made:
            s, t = int(s), int(t)
            if k == "rename":
                at = shown[(s, t)]
            else:  # counts: seen[k][s] is when the count first reached s
                at = seen[k].get(s, now)  # else only after the job ended (or never)
            delays[k].append(max(0, at - t) / 1e6)
        return delays, polls, status
    finally:
        d.stop(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--changes", type=int, default=600)
    ap.add_argument("--sbxfs", default=os.environ.get("SBXFS_BIN", str(REPO / "sbxfs")))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sbxfs-stale-", dir="/var/tmp")
    lines = ["| configuration | change | n | p50 ms | p99 ms | max ms |", "|---|---|---|---|---|---|"]
    try:
        for name, conf in (("watched", ""), ("short", "cache_timeout: 0\n")):
            delays, polls, _ = measure(a.sbxfs, work, name, conf, a.changes)
            label = "cache_timeout 300, watcher" if name == "watched" else "cache_timeout 0 (no watcher)"
            for k, xs in delays.items():
                if xs:
                    lines.append("| %s | %s | %d | %.1f | %.1f | %.1f |" % (
                        label, k, len(xs), statistics.median(xs), pct(xs, 0.99), max(xs)))
            allx = sum(delays.values(), [])
            lines.append("| %s | all (%d host polls) | %d | %.1f | %.1f | %.1f |" % (
                label, polls, len(allx), statistics.median(allx), pct(allx, 0.99), max(allx)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
