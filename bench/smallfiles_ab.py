#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Small-file rows of the bench, interleaved: sbxfs and bindfs alternate
(A B A B ...) so a noisy host moves both sides alike; prints the median of
the per-pair ratios and their spread.

    bench/smallfiles_ab.py [--sbxfs ./sbxfs [--sbxfs OTHER ...]] [--files 2000] [--rounds 7]

Runs as root.  Mounts its own sbxfs (local provider, a sandbox bench/t1;
one mount per --sbxfs binary, to compare builds) and a bindfs of a plain
directory on the same filesystem under /var/tmp; all are unmounted and their
daemons stopped (by pid) on exit, also on Ctrl-C.  The order of the sides
rotates every round.
Each round: create+write 4 KiB+close of N files (O_CREAT|O_EXCL), stat of
the N files, unlink of the N files, timed separately.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from abutil import teardown, wait_mounted

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def one_round(d, n):
    """Times of the three phases: {op: (ops/s over the phase, ops/s at the
    median latency of one op)}.  The median of single-op latencies is less
    moved by a burst of load on a shared host than the phase's throughput."""
    data = b"x" * 4096
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    os.mkdir(d)
    names = [os.path.join(d, "f%05d" % k) for k in range(n)]
    clock = time.perf_counter
    out = {}
    for op in ("create", "stat", "unlink"):
        lat = []
        t0 = clock()
        for p in names:
            t = clock()
            if op == "create":
                fd = os.open(p, flags, 0o644)
                os.write(fd, data)
                os.close(fd)
            elif op == "stat":
                os.stat(p)
            else:
                os.unlink(p)
            lat.append(clock() - t)
        out[op] = (n / (clock() - t0), 1 / statistics.median(lat))
    os.rmdir(d)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sbxfs", action="append", help="daemon binary (repeat to compare builds)")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--pause", action="store_true", help="print the daemon pids and wait for Enter before timing")
    a = ap.parse_args()
    bins = a.sbxfs or [os.path.join(REPO, "sbxfs")]

    work = tempfile.mkdtemp(prefix="sbx-ab-", dir="/var/tmp")
    os.chmod(work, 0o755)
    bmnt, plain = os.path.join(work, "bmnt"), os.path.join(work, "plain")
    os.mkdir(bmnt)
    os.mkdir(plain)
    daemons, mounts, sides = [], [bmnt], {}
    try:
        for i, b in enumerate(bins):
            mnt, state = os.path.join(work, "mnt%d" % i), os.path.join(work, "state%d" % i)
            os.mkdir(mnt)
            conf = os.path.join(work, "mount%d.conf" % i)
            with open(conf, "w") as f:
                f.write("use: local\nstate_dir: %s\npool:\n  prewarm: 0\n" % state)
            logp = os.path.join(work, "sbxfs%d.log" % i)
            with open(logp, "wb") as log:
                d = subprocess.Popen([b, "-f", "-c", conf, mnt], stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            daemons.append(d)
            mounts.append(mnt)
            try:
                wait_mounted(mnt, d)
            except RuntimeError:
                with open(logp, errors="replace") as f:
                    sys.stderr.write(f.read()[-4000:])
                raise
            os.makedirs(os.path.join(mnt, "bench", "t1"))
            label = "sbxfs" if len(bins) == 1 else "sbxfs%d" % i
            sides[label] = os.path.join(mnt, "bench", "t1", "workspace", "small")
        subprocess.run(["bindfs", "--no-allow-other", plain, bmnt], check=True)
        wait_mounted(bmnt, None)
        sides["bindfs"] = os.path.join(bmnt, "small")
        if a.pause:
            print("sbxfs pids %s; press Enter" % [d.pid for d in daemons], flush=True)
            sys.stdin.readline()
        for s in sides.values():  # warm up
            one_round(s, 200)
        names = list(sides)
        res = {s: [] for s in names}
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            if r % 2:
                order.reverse()
            for s in order:
                res[s].append(one_round(sides[s], a.files))
        print("%d files, %d interleaved rounds (ops/s: median [min-max]; ratio to bindfs per round: "
              "median [min-max])" % (a.files, a.rounds))
        for label, path in ((l, b) for l, b in zip([n for n in names if n != "bindfs"], bins)):
            print("  %s = %s" % (label, path))
        for k, what in ((0, "throughput of the phase"), (1, "1 / median latency of one op")):
            print("-- %s" % what)
            for op in ("create", "stat", "unlink"):
                bf = [x[op][k] for x in res["bindfs"]]
                line = "%-7s bindfs %7.0f [%.0f-%.0f]" % (op, statistics.median(bf), min(bf), max(bf))
                for s in names:
                    if s == "bindfs":
                        continue
                    sb = [x[op][k] for x in res[s]]
                    ratios = [x / y for x, y in zip(sb, bf)]
                    line += " | %s %7.0f [%.0f-%.0f] %.2fx [%.2f-%.2f]" % (
                        s, statistics.median(sb), min(sb), max(sb), statistics.median(ratios), min(ratios),
                        max(ratios))
                print(line)
    finally:
        teardown(mounts, daemons, work)


if __name__ == "__main__":
    main()
