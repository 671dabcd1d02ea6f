#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""coldstart_steps.py - where a cold mkdir's time goes, for one or more sbxfs binaries side by
side (e.g. before and after a change), against bubblewrap started directly with the same
namespaces (rows_sandbox.py's peer).

    /usr/bin/python3 bench/coldstart_steps.py [--mode isolated|open] [--spares] [-n 15] SBXFS [SBXFS ...]

(SBXFS@pasta: that binary with `network.gateway: false`, to compare open mode's two paths.)
Root, bubblewrap, fusermount3; each SBXFS needs its sbxfs-exec and sbxfs-init next to it. Every
binary gets a daemon of its own in debug mode (-d), in a scratch dir under /var/tmp; each
round does one cold mkdir + read of `ready` on every daemon (in alternating order) and one peer
sandbox to ready; the first round is a warm-up. Prints the medians of mkdir-to-ready, their
ratio to the peer's, and the medians of the steps the daemon logs for each create (`local:
create steps` and `pool: create steps`, debug lines; docs/performance.md, "Cold start").
--spares: the daemons keep 2 spares (pool.prewarm 2) and each mkdir claims one (its spares are
back to 2, untimed, before it; a mkdir that did not claim fails the run); the steps are then
`local: claim steps` and the pool's.
"""
import json
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rows_sandbox import PeerSandbox, _acquire, make_peer_dir  # noqa: E402


def mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


def start(binary, base, mode, prewarm=0):
    os.makedirs(base + "/state")
    os.makedirs(base + "/mnt")
    # BINARY@pasta: that binary with network.gateway: false (open mode: a pasta per sandbox)
    extra = "  gateway: false\n" if binary.endswith("@pasta") else ""
    binary = binary[:-len("@pasta")] if extra else binary
    with open(base + "/mount.conf", "w") as f:
        # no spares unless --spares: a "cold" mkdir would claim one (pool.prewarm is 2 by default)
        f.write("use: local\nstate_dir: %s/state\nreplicas: 256\nidle_timeout: 0\npool:\n  prewarm: %d\n"
                "network:\n  mode: %s\n%s" % (base, prewarm, mode, extra))
    p = subprocess.Popen([binary, "-d", "-c", base + "/mount.conf", base + "/mnt"],
                         stdin=subprocess.DEVNULL, stdout=open(base + "/daemon.log", "ab"),
                         stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not mounted(base + "/mnt"):
        if p.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("%s did not mount (see %s/daemon.log)" % (binary, base))
        time.sleep(0.02)
    os.mkdir(base + "/mnt/u")
    return p


def spares_back(mnt, want=2):
    deadline = time.monotonic() + 30
    while True:
        with open(mnt + "/.status") as f:
            st = json.load(f)["spares"]
        if st["creating"] == 0 and st["ready"] == want:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("%s: spares not back to %d within 30 s: %s" % (mnt, want, st))
        time.sleep(0.005)


def steps(logpath):
    out = {}
    with open(logpath, errors="replace") as f:
        for line in f:
            m = re.search(r"(?:create|claim) steps \(ms\):(.*)", line)
            if m:
                toks = m.group(1).split()
                for k, v in zip(toks[0::2], toks[1::2]):
                    out.setdefault(k, []).append(float(v))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="isolated", choices=("isolated", "open", "allowlist"))
    ap.add_argument("-n", type=int, default=15)
    ap.add_argument("--spares", action="store_true")
    ap.add_argument("sbxfs", nargs="+")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="sbxfs-coldstart.", dir="/var/tmp")
    daemons = []
    try:
        for k, b in enumerate(a.sbxfs):
            base = "%s/d%d" % (root, k)
            daemons.append((base, start(os.path.abspath(b), base, a.mode, 2 if a.spares else 0)))
        peer = root + "/peer"
        make_peer_dir(peer)
        xs, ys = [[] for _ in daemons], []
        for i in range(a.n + 1):
            order = list(range(len(daemons)))[::-1 if i % 2 else 1]
            for k in order:
                if a.spares:
                    spares_back(daemons[k][0] + "/mnt")
                t = time.perf_counter()
                _acquire("%s/mnt/u/t%d" % (daemons[k][0], i))
                if i:
                    xs[k].append(time.perf_counter() - t)
                with open("%s/mnt/u/t%d/status" % (daemons[k][0], i)) as f:
                    if json.load(f).get("from_spare") is not a.spares:
                        raise RuntimeError("t%d: from_spare is not %s" % (i, a.spares))
            s = PeerSandbox(peer)
            if i:
                ys.append(s.ready_s)
            s.kill()
        yb = statistics.median(ys) * 1e3
        print("mode %s%s, %d rounds, load %s: bwrap (own netns) to ready, median %.2f ms"
              % (a.mode, ", claiming spares" if a.spares else "", a.n, open("/proc/loadavg").read().split()[0], yb))
        for k, b in enumerate(a.sbxfs):
            m = statistics.median(xs[k]) * 1e3
            print("  %s: mkdir to ready, median %.2f ms = %.2fx bwrap" % (b, m, m / yb))
    finally:
        for base, p in daemons:
            subprocess.run(["fusermount3", "-u", base + "/mnt"], capture_output=True)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
    for k, b in enumerate(a.sbxfs):
        st = steps(daemons[k][0] + "/daemon.log")
        print("  steps of %s (median ms): %s" % (b, " ".join("%s %.2f" % (s, statistics.median(v))
                                                            for s, v in st.items())))
    if not any(mounted(base + "/mnt") for base, _ in daemons):
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
