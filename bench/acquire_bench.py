#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/acquire_bench.py - concurrent mkdirs of one user's new threads
against a slow remote create: `acquire: async` (the default) against
`acquire: sync`, in one run.

    /usr/bin/python3 bench/acquire_bench.py [--rounds N] [--threads N] [--create-ms MS] [--out FILE]

Needs root (FUSE), ./sbxfs built (or SBXFS_BIN), bubblewrap (the fake
server runs its sandboxes with it) and /usr/bin/python3.  The server is the
test fake (tests/fakes/opensandbox_server.py) with a `delay` fault holding
every create's POST --create-ms (2000) milliseconds: a slow create.  It and
both daemons are started here and stopped by pid at the end.

Each round runs both daemons, async then sync in even rounds and sync then
async in odd ones (ABAB), after one unrecorded warm-up round.  A round is N
(8) threads of this process each doing mkdir of a new thread directory of
the user `bench`, then a read of its `ready` (which returns once the sandbox
is ready); and, 0.3 s in, a stat of a name that does not exist under the
user (a lookup the kernel must ask the daemon).  Recorded: the time until
every sandbox is ready, the slowest mkdir, and that lookup.  Ratio = sync's
time until all ready / async's (above 1: async is faster).
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "fakes"))
from osfake import OpenSandboxFake  # noqa: E402
from remote_bench import Daemon  # noqa: E402


def one_round(d, tag, n):
    """n concurrent mkdir + ready under d's user `bench`: seconds until all
    ready, the slowest mkdir, a lookup meanwhile."""
    user = d.mnt / "bench"
    mk, errs = [], []
    look = [None]
    t0 = time.perf_counter()

    def one(i):
        p = user / f"{tag}-{i}"
        try:
            a = time.perf_counter()
            os.mkdir(p)
            mk.append(time.perf_counter() - a)
            (p / "ready").read_text()
        except OSError as e:
            errs.append(e)

    def lookup():
        time.sleep(0.3)
        a = time.perf_counter()
        os.path.exists(user / f"{tag}-never")
        look[0] = time.perf_counter() - a

    ths = [threading.Thread(target=one, args=(i,)) for i in range(n)] + [threading.Thread(target=lookup)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(600)
    total = time.perf_counter() - t0
    if errs:
        raise RuntimeError(f"{tag}: {errs[:3]}")
    for i in range(n):  # released (warm; evicted by later creates past replicas)
        os.rmdir(user / f"{tag}-{i}")
    return {"all_ready": total, "mkdir_max": max(mk), "lookup": look[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--create-ms", type=int, default=2000)
    ap.add_argument("--only", choices=("async", "sync"), help="one mode (no ratio): e.g. 64 threads async")
    ap.add_argument("--out", default=str(HERE / "results" / "acquire-latest.json"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("acquire_bench: must run as root (FUSE)")
    for tool in ("bwrap", "fusermount3"):
        if not shutil.which(tool):
            sys.exit(f"acquire_bench: {tool} not installed")
    work = Path(tempfile.mkdtemp(prefix="sbxfs-acquire-bench.", dir="/var/tmp"))
    started, rows = [], []
    try:
        osf = OpenSandboxFake(work / "osfake")
        osf.start()
        started.append(osf)
        osf.fault({"kind": "delay", "ms": args.create_ms, "method": "POST", "path": r"^/v1/sandboxes$"})
        daemons = {}
        modes = (args.only,) if args.only else ("async", "sync")
        for mode in modes:
            d = Daemon(work / mode, {"use": "opensandbox", "state_dir": str(work / mode / "state"),
                                     "domain": f"127.0.0.1:{osf.port}", "acquire": mode,
                                     "replicas": args.threads, "idle_timeout": 0, "ready_timeout": 60})
            started.append(d)
            os.mkdir(d.mnt / "bench")
            daemons[mode] = d
        for j in range(args.rounds + 1):
            order = modes if j % 2 == 0 else tuple(reversed(modes))
            r = {}
            for mode in order:
                r[mode] = one_round(daemons[mode], f"r{j}{mode}", args.threads)
            if j:  # round 0 is the warm-up
                rows.append({"order": "AB" if j % 2 == 0 else "BA", **r,
                             "ratio": r["sync"]["all_ready"] / r["async"]["all_ready"] if len(modes) == 2 else None})
            print(f"round {j}: " + ", ".join(f"{m} all ready {r[m]['all_ready']:.2f} s, mkdir max "
                                             f"{r[m]['mkdir_max'] * 1000:.1f} ms, lookup {r[m]['lookup'] * 1000:.1f} ms"
                                             for m in order), flush=True)
    finally:
        for s in reversed(started):
            try:
                s.stop()
            except Exception as e:  # noqa: BLE001 - reported, the rest still stops
                print(f"acquire_bench: stopping {s}: {e}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)

    def med(mode, key, scale=1.0):
        return statistics.median(r[mode][key] for r in rows) * scale

    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    lines = [f"{args.threads} concurrent mkdirs of one user's new threads, create {args.create_ms} ms "
             f"(OpenSandbox fake), {args.rounds} rounds ABAB, medians:", "",
             "| mode | all ready (s) | slowest mkdir (ms) | a lookup under the user meanwhile (ms) |",
             "|---|---|---|---|"]
    for mode in modes:
        lines.append(f"| {mode} | {med(mode, 'all_ready'):.2f} | {med(mode, 'mkdir_max', 1000):.1f} | "
                     f"{med(mode, 'lookup', 1000):.1f} |")
    if ratios:
        lines += ["", f"ratio sync/async (all ready): {statistics.median(ratios):.2f} "
                      f"({min(ratios):.2f}-{max(ratios):.2f})"]
    table = "\n".join(lines)
    print(table)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"host": platform.node(), "kernel": platform.release(), "threads": args.threads,
                   "create_ms": args.create_ms, "rounds": rows, "table": table}, f, indent=1)


if __name__ == "__main__":
    main()
