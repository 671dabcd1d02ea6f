#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/remote_spares_bench.py - mkdir of a brand-new thread of the
opensandbox provider with spares (pool.prewarm 2) against without
(prewarm 0), in one run, against a 1 s create.

    /usr/bin/python3 bench/remote_spares_bench.py [--n N] [--create-s S] [--out FILE]

Needs root (FUSE), ./sbxfs built (or SBXFS_BIN), bubblewrap (the fake
server runs its sandboxes with it) and /usr/bin/python3.  The server is the
test fake (tests/fakes/opensandbox_server.py) with ready_delay --create-s (1):
a sandbox is Pending that long after its create, then Running.  It and both
daemons (acquire: async, the default) are started here and stopped by pid
at the end.

N (20) new threads on each daemon, interleaved one by one (spare, cold,
spare, ...), each timed from mkdir to the end of the read of its `ready`
(which returns once the sandbox is ready: what a caller waits for).  Before
each timed mkdir on the spare daemon, untimed, its spares are back to 2
(the refill runs in the background after a claim, one create each); every
thread is released after its mkdir (warm: replicas is 4 N, so warm
sandboxes never take the room of a refill).  A mkdir
of the spare daemon that did not claim (from_spare false), or of the cold
one that did, fails the run.  Reported: p50 and p99 of each, and cold p50 /
spare p50.
"""

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "fakes"))
from osfake import OpenSandboxFake  # noqa: E402
from remote_bench import Daemon  # noqa: E402


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def spares_ready(d):
    st = json.loads((d.mnt / ".status").read_text())["spares"]
    return st["ready"] if st["creating"] == 0 else -1


def wait_spares(d, n, timeout=60):
    deadline = time.monotonic() + timeout
    while spares_ready(d) != n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"spares not back to {n} within {timeout} s")
        time.sleep(0.005)


def new_thread(d, name, want_spare):
    p = d.mnt / "bench" / name
    t0 = time.perf_counter()
    os.mkdir(p)
    with open(p / "ready") as f:
        f.read()
    dt = time.perf_counter() - t0
    if json.loads((p / "status").read_text()).get("from_spare") is not want_spare:
        raise RuntimeError(f"mkdir {p}: from_spare is not {want_spare}")
    os.rmdir(p)
    return dt * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--create-s", type=float, default=1.0)
    ap.add_argument("--out", default=str(HERE / "results" / "remote-spares-latest.json"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("remote_spares_bench: must run as root (FUSE)")
    for tool in ("bwrap", "fusermount3"):
        if not shutil.which(tool):
            sys.exit(f"remote_spares_bench: {tool} not installed")
    work = Path(tempfile.mkdtemp(prefix="sbxfs-remote-spares-bench.", dir="/var/tmp"))
    started, spare, cold = [], [], []
    try:
        osf = OpenSandboxFake(work / "osfake")
        osf.start()
        started.append(osf)
        osf.config(ready_delay=args.create_s)
        daemons = {}
        for kind, prewarm in (("spare", 2), ("cold", 0)):
            d = Daemon(work / kind, {"use": "opensandbox", "state_dir": str(work / kind / "state"),
                                     "domain": f"127.0.0.1:{osf.port}", "pool": {"prewarm": prewarm},
                                     "replicas": 4 * args.n, "idle_timeout": 0, "ready_timeout": 60})
            started.append(d)
            os.mkdir(d.mnt / "bench")
            daemons[kind] = d
        for i in range(args.n):
            wait_spares(daemons["spare"], 2)
            spare.append(new_thread(daemons["spare"], f"s{i}", True))
            cold.append(new_thread(daemons["cold"], f"c{i}", False))
            print(f"thread {i}: spare {spare[-1]:.1f} ms, cold {cold[-1]:.1f} ms", flush=True)
    finally:
        for s in reversed(started):
            try:
                s.stop()
            except Exception as e:  # noqa: BLE001 - reported, the rest still stops
                print(f"remote_spares_bench: stopping {s}: {e}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    res = {"spare_p50": pct(spare, 0.5), "spare_p99": pct(spare, 0.99), "cold_p50": pct(cold, 0.5),
           "cold_p99": pct(cold, 0.99)}
    res["ratio_p50"] = res["cold_p50"] / res["spare_p50"]
    table = "\n".join([
        f"mkdir of a brand-new thread to ready, opensandbox fake with a {args.create_s:g} s create, "
        f"{args.n} threads each, interleaved:", "",
        "| | p50 (ms) | p99 (ms) |", "|---|---|---|",
        f"| spares (pool.prewarm 2) | {res['spare_p50']:.1f} | {res['spare_p99']:.1f} |",
        f"| no spares (prewarm 0) | {res['cold_p50']:.1f} | {res['cold_p99']:.1f} |", "",
        f"cold p50 / spare p50: {res['ratio_p50']:.0f}x"])
    print(table)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"host": platform.node(), "kernel": platform.release(), "load": os.getloadavg(),
                   "n": args.n, "create_s": args.create_s, "spare_ms": spare, "cold_ms": cold, **res,
                   "table": table}, f, indent=1)


if __name__ == "__main__":
    main()
