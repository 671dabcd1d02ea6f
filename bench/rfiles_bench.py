#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/rfiles_bench.py - remote files (workspace/ of a remote sandbox,
fs/rfiles.c) against curl doing the same requests to the same server
directly, in one run.

    /usr/bin/python3 bench/rfiles_bench.py [--rounds N] [--quick] [--latency-ms MS] [--out FILE]

Needs root (FUSE), ./sbxfs built (or SBXFS_BIN), curl, bubblewrap and
/usr/bin/python3.  The servers are the test fakes (tests/fakes/), started
here and stopped by pid at the end, as are the sbxfs daemons.

Rows (opensandbox, then aio at a base_url), each measured in interleaved
rounds: round j runs sbxfs then curl when j is even, curl then sbxfs when j
is odd (ABAB), after one unrecorded warm-up round:

  read     a 50 MiB file the sandbox made (a job, untimed, a new file each
           round and side): sbxfs: open + read(2) in 1 MiB pieces + close
           through the mount | curl: GET the file's download route to
           /dev/null
  write    50 MiB from memory: sbxfs: create + write(2) in 1 MiB pieces +
           close (the upload) | curl: POST the upload route with the same
           50 MiB from a page-cached file (multipart, as the API wants)
  small    200 files of 4 KiB: sbxfs: create + write + close each, then
           open + read + close each | curl: one process uploading the 200
           files then downloading them, one request each on one kept-alive
           connection (`--next`), as fast as curl can be made to go

--latency-ms MS delays every file request (and, at a base_url, every
command) at the server by MS: a stand-in for the round trip to a server that
is not on this host (the fakes answer on loopback in well under 1 ms).

Ratio = curl's time / sbxfs's time in that round (above 1: sbxfs is faster).
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "fakes"))
sys.path.insert(0, str(HERE))
from aiofake import AioFakeServer  # noqa: E402
from osfake import OpenSandboxFake  # noqa: E402
from remote_bench import Daemon  # noqa: E402

MiB = 1 << 20
WS = "/mnt/user-data/workspace"


class Api:
    """The server's file routes, as curl config blocks."""

    def __init__(self, kind, base, scratch):
        self.kind, self.base, self.scratch = kind, base.rstrip("/"), scratch
        self.nmeta = 0

    def _block(self, lines):
        return "\n".join(["silent", "show-error", "fail", 'noproxy = "*"', 'output = "/dev/null"', *lines]) + "\n"

    def upload(self, path, local):
        if self.kind == "opensandbox":
            self.nmeta += 1
            meta = self.scratch / f"meta{self.nmeta}.json"
            meta.write_text(json.dumps({"path": path, "mode": 644}))
            return self._block([f'url = "{self.base}/files/upload"', f'form = "metadata=@{meta}"',
                                f'form = "file=@{local}"'])
        return self._block([f'url = "{self.base}/v1/file/upload"', f'form = "file=@{local}"', f'form = "path={path}"'])

    def download(self, path):
        q = urllib.parse.quote(path, safe="")
        route = "/files/download" if self.kind == "opensandbox" else "/v1/file/download"
        return self._block([f'url = "{self.base}{route}?path={q}"'])

    def curl(self, blocks, name):
        """One curl process running the blocks in order (kept-alive)."""
        conf = self.scratch / f"{name}.curl"
        conf.write_text("next\n".join(blocks))
        return ["curl", "-K", str(conf)]


def run_curl(argv):
    r = subprocess.run(argv, capture_output=True, timeout=300)
    if r.returncode:
        raise RuntimeError(f"curl failed ({r.returncode}): {r.stderr[-300:]!r}")


def job(sbx, name, cmd):
    j = Path(sbx) / "jobs" / name
    os.mkdir(j)
    (j / "cmd").write_text(cmd)
    code = (j / "exit").read_text().strip()
    if code != "0":
        raise RuntimeError(f"job {name}: exit {code}: {(j / 'stderr').read_text()[-300:]}")
    os.rmdir(j)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_provider(kind, daemon, base, scratch, rounds, big, nsmall):
    sbx = daemon.mnt / "bench" / "t"
    os.makedirs(sbx)
    ws = sbx / "workspace"
    api = Api(kind, base, scratch)
    payload = os.urandom(big)
    (scratch / "payload").write_bytes(payload)
    small = scratch / "small"
    small.mkdir()
    for i in range(nsmall):
        (small / f"s{i:03d}").write_bytes(os.urandom(4096))
    rows = {"read": [], "write": [], "small": []}
    for j in range(rounds + 1):
        job(sbx, f"mk{j}", f"head -c {big} /dev/urandom > r{j}a; head -c {big} /dev/urandom > r{j}b")

        def sbxfs_read():
            with open(ws / f"r{j}a", "rb", buffering=0) as f:
                n = 0
                while True:
                    b = f.read(MiB)
                    if not b:
                        break
                    n += len(b)
            if n != big:
                raise RuntimeError(f"read {n} bytes of {big}")

        def curl_read():
            run_curl(api.curl([api.download(f"{WS}/r{j}b")], f"read{j}"))

        def sbxfs_write():
            with open(ws / f"w{j}a", "wb", buffering=0) as f:
                for o in range(0, big, MiB):
                    f.write(payload[o:o + MiB])

        def curl_write():
            run_curl(api.curl([api.upload(f"{WS}/w{j}b", scratch / "payload")], f"write{j}"))

        def sbxfs_small():
            d = ws / f"s{j}a"
            d.mkdir()
            for i in range(nsmall):
                (d / f"s{i:03d}").write_bytes((small / f"s{i:03d}").read_bytes())
            for i in range(nsmall):
                (d / f"s{i:03d}").read_bytes()

        curl_small_argv = api.curl([api.upload(f"{WS}/s{j}b/s{i:03d}", small / f"s{i:03d}") for i in range(nsmall)] +
                                   [api.download(f"{WS}/s{j}b/s{i:03d}") for i in range(nsmall)], f"small{j}")

        def curl_small():
            run_curl(curl_small_argv)

        for name, a, b in (("read", sbxfs_read, curl_read), ("write", sbxfs_write, curl_write),
                           ("small", sbxfs_small, curl_small)):
            order = (("sbxfs", a), ("curl", b)) if j % 2 == 0 else (("curl", b), ("sbxfs", a))
            t = {side: timed(fn) for side, fn in order}
            if j:  # round 0 is the warm-up
                rows[name].append({"sbxfs": t["sbxfs"], "curl": t["curl"], "ratio": t["curl"] / t["sbxfs"],
                                   "order": "AB" if j % 2 == 0 else "BA"})
        job(sbx, f"rm{j}", f"rm -rf r{j}a r{j}b w{j}a w{j}b s{j}a s{j}b")  # untimed
    os.rmdir(sbx)
    return rows


def summary(kind, name, rows, big, nsmall):
    med = statistics.median
    ratios = [r["ratio"] for r in rows]
    out = {"row": f"{kind}-{name}", "rounds": rows, "sbxfs_s": med(r["sbxfs"] for r in rows),
           "curl_s": med(r["curl"] for r in rows), "ratio": med(ratios), "min": min(ratios), "max": max(ratios)}
    if name == "small":
        out["unit"] = "ms/file (create+read)"
        out["sbxfs"], out["curl"] = out["sbxfs_s"] * 1000 / nsmall, out["curl_s"] * 1000 / nsmall
    else:
        out["unit"] = "MiB/s"
        out["sbxfs"], out["curl"] = big / MiB / out["sbxfs_s"], big / MiB / out["curl_s"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="2 rounds, 8 MiB, 40 files (a smoke run; no figures)")
    ap.add_argument("--latency-ms", type=float, default=0,
                    help="delay every file request at the server by this much (a stand-in for a round trip)")
    ap.add_argument("--out", default=str(HERE / "results" / "rfiles-latest.json"))
    args = ap.parse_args()
    big, nsmall = 50 * MiB, 200
    if args.quick:
        args.rounds, big, nsmall = 2, 8 * MiB, 40
    if os.geteuid() != 0:
        sys.exit("rfiles_bench: must run as root (FUSE)")
    for tool in ("curl", "bwrap", "fusermount3"):
        if not shutil.which(tool):
            sys.exit(f"rfiles_bench: {tool} not installed")
    work = Path(tempfile.mkdtemp(prefix="sbxfs-rfiles-bench.", dir="/var/tmp"))
    results, started = [], []
    try:
        # ---- opensandbox
        osf = OpenSandboxFake(work / "osfake", "--graceful-close", "0")
        osf.start()
        started.append(osf)
        if args.latency_ms:
            osf.fault({"kind": "delay", "ms": args.latency_ms, "path": r"/files|/directories"})
        d = Daemon(work / "os", {"use": "opensandbox", "state_dir": str(work / "os" / "state"),
                                "domain": f"127.0.0.1:{osf.port}", "idle_timeout": 0})
        started.append(d)
        os.makedirs(d.mnt / "bench" / "t")
        execd = json.loads((d.mnt / "bench" / "t" / "status").read_text())["execd"]
        os.rmdir(d.mnt / "bench" / "t")
        (work / "os-scratch").mkdir()
        rows = bench_provider("opensandbox", d, execd, work / "os-scratch", args.rounds, big, nsmall)
        results += [summary("os", n, r, big, nsmall) for n, r in rows.items()]
        d.stop()
        started.remove(d)
        osf.stop()
        started.remove(osf)
        # ---- aio at a base_url
        aio = AioFakeServer(work / "aiofake")
        aio.start()
        started.append(aio)
        if args.latency_ms:
            aio.api.post("/_fake/faults", {"kind": "delay", "seconds": args.latency_ms / 1000, "times": None,
                                           "path": r"^/v1/file/|^/v1/bash/exec$"})
        base = f"http://127.0.0.1:{aio.port}"
        d = Daemon(work / "aio", {"use": "aio", "state_dir": str(work / "aio" / "state"), "base_url": base,
                                 "idle_timeout": 0})
        started.append(d)
        (work / "aio-scratch").mkdir()
        rows = bench_provider("aio", d, base, work / "aio-scratch", args.rounds, big, nsmall)
        results += [summary("aio", n, r, big, nsmall) for n, r in rows.items()]
    finally:
        for s in reversed(started):
            try:
                s.stop()
            except Exception as e:  # noqa: BLE001 - reported, the rest still stops
                print(f"rfiles_bench: stopping {s}: {e}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    lines = [f"{big // MiB} MiB files, {nsmall} small files of 4 KiB; {args.rounds} rounds (ABAB) after a warm-up; "
             "medians", "",
             "| row | unit | sbxfs | curl | ratio curl/sbxfs time (median, min-max) |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['row']} | {r['unit']} | {r['sbxfs']:.1f} | {r['curl']:.1f} | {r['ratio']:.2f} "
                     f"({r['min']:.2f}-{r['max']:.2f}) |")
    table = "\n".join(lines)
    print(table)
    meta = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
            "load": os.getloadavg(), "rounds": args.rounds, "latency_ms": args.latency_ms, "big": big,
            "small": nsmall, "rows": results,
            "command": " ".join(["/usr/bin/python3", "bench/rfiles_bench.py", *sys.argv[1:]])}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(meta, indent=1))
    Path(args.out).with_suffix(".md").write_text(table + "\n")


if __name__ == "__main__":
    main()
