#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/remote_bench.py - jobs of the remote providers against curl doing
the same request to the same server, in one run.

    /usr/bin/python3 bench/remote_bench.py [--rounds N] [--jobs N] [--quick] [--out FILE]

Needs root (FUSE), ./sbxfs built (or SBXFS_BIN), curl, bubblewrap (the fake
servers run their sandboxes with it) and /usr/bin/python3.  The servers are
the test fakes (tests/fakes/opensandbox_server.py, aio_server.py), started
here and stopped by pid at the end, as is the sbxfs daemon.

Rows, each measured in interleaved rounds: round j runs sbxfs then curl when
j is even, curl then sbxfs when j is odd (ABAB), after one unrecorded warm-up
round.  Ratio = curl's time / sbxfs's time in that round (above 1: sbxfs is
faster); the table shows the median ratio and its range beside the medians.

  os-job      opensandbox: a job round trip, `true`: sbxfs: mkdir jobs/N,
              write the command to cmd, read exit  |  curl: POST {execd}/command
              {"command": "true", "cwd": "/mnt/user-data/workspace"} and read
              the event stream to its end
  os-output   the same with `seq 1 20000` (20 000 lines, 109 KB: one event
              per line)
  aio-job     aio at a base_url: the job round trip  |  curl: POST
              /v1/bash/exec {"command": "true", "exec_dir": ...} (synchronous:
              the answer carries the exit code)

The OpenSandbox fake runs with --graceful-close 0: upstream execd holds a
command's stream about 1 s after its last event; sbxfs stops reading at the
terminal event, curl reads to the end of the stream, so with the hold curl
would lose a second a job that this row does not count.  curl is a process
per request (as a script would run it); the sbxfs side is three syscalls
sequences from this process (mkdir, write, read), no process.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "fakes"))
from aiofake import AioFakeServer  # noqa: E402
from osfake import OpenSandboxFake  # noqa: E402

SBXFS = Path(os.environ.get("SBXFS_BIN", str(REPO / "sbxfs")))


class Daemon:
    def __init__(self, work, config):
        self.work = Path(work)
        self.mnt = self.work / "mnt"
        self.mnt.mkdir(parents=True)
        self.conf = self.work / "mount.conf"
        self.conf.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in config.items()))
        self.log = open(self.work / "sbxfs.log", "ab")
        self.proc = subprocess.Popen([str(SBXFS), "-f", "-c", str(self.conf), str(self.mnt)],
                                     stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.statvfs(self.mnt)
                if os.path.ismount(self.mnt):
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError((self.work / "sbxfs.log").read_text())
            time.sleep(0.05)
        raise RuntimeError("sbxfs did not mount")

    def stop(self):
        subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True, timeout=60)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # by its pid
            self.proc.wait(10)
        self.log.close()


class JobSide:
    """sbxfs's job round trip in one sandbox directory."""

    def __init__(self, sbx, cmd, prefix):
        self.jobs = Path(sbx) / "jobs"
        self.cmd = cmd.encode() + b"\n"
        self.prefix = prefix
        self.n = 0

    def once(self):
        self.n += 1
        j = self.jobs / f"{self.prefix}{self.n}"
        os.mkdir(j)
        fd = os.open(j / "cmd", os.O_WRONLY)
        os.write(fd, self.cmd)
        os.close(fd)
        with open(j / "exit", "rb") as f:
            code = f.read()
        if code.strip() != b"0":
            raise RuntimeError(f"job {j} exited {code!r}")


def curl_side(url, body, headers=()):
    argv = ["curl", "-sS", "-N", "--fail", "-o", "/dev/null", "-X", "POST", "-H", "Content-Type: application/json",
            "--noproxy", "*", "-d", json.dumps(body), url]
    for h in headers:
        argv[1:1] = ["-H", h]

    def once():
        r = subprocess.run(argv, capture_output=True, timeout=60)
        if r.returncode:
            raise RuntimeError(f"curl failed: {r.stderr!r}")
    return once


def measure(name, a, b, rounds, n):
    """ABAB rounds of n calls each side: per-call seconds, ratio b/a."""
    rows = []
    for j in range(rounds + 1):
        order = (("sbxfs", a), ("curl", b)) if j % 2 == 0 else (("curl", b), ("sbxfs", a))
        t = {}
        for side, fn in order:
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            t[side] = (time.perf_counter() - t0) / n
        if j:  # round 0 is the warm-up
            rows.append({"sbxfs": t["sbxfs"], "curl": t["curl"], "ratio": t["curl"] / t["sbxfs"],
                         "order": "AB" if j % 2 == 0 else "BA"})
    ratios = [r["ratio"] for r in rows]
    return {"row": name, "rounds": rows, "sbxfs_ms": statistics.median(r["sbxfs"] for r in rows) * 1000,
            "curl_ms": statistics.median(r["curl"] for r in rows) * 1000, "ratio": statistics.median(ratios),
            "min": min(ratios), "max": max(ratios)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=20, help="calls per side per round")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "remote-latest.json"))
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.jobs = 4, 5
    if os.geteuid() != 0:
        sys.exit("remote_bench: must run as root (FUSE)")
    for tool in ("curl", "bwrap", "fusermount3"):
        if not shutil.which(tool):
            sys.exit(f"remote_bench: {tool} not installed")
    work = Path(tempfile.mkdtemp(prefix="sbxfs-remote-bench.", dir="/var/tmp"))
    results, started = [], []
    try:
        # ---- opensandbox
        osf = OpenSandboxFake(work / "osfake", "--graceful-close", "0")
        osf.start()
        started.append(osf)
        d = Daemon(work / "os", {"use": "opensandbox", "state_dir": str(work / "os" / "state"),
                                "domain": f"127.0.0.1:{osf.port}", "replicas": 4, "idle_timeout": 0})
        started.append(d)
        sbx = d.mnt / "bench" / "t"
        os.makedirs(sbx)
        (sbx / "ready").read_text()  # acquire: async: the create ends here
        execd = json.loads((sbx / "status").read_text())["execd"]
        body = {"command": "true", "cwd": "/mnt/user-data/workspace"}
        results.append(measure("os-job", JobSide(sbx, "true", "t").once, curl_side(execd + "/command", body),
                               args.rounds, args.jobs))
        out = "seq 1 20000"
        results.append(measure("os-output", JobSide(sbx, out, "o").once,
                               curl_side(execd + "/command", {"command": out, "cwd": "/mnt/user-data/workspace"}),
                               args.rounds, max(2, args.jobs // 4)))
        d.stop()
        started.remove(d)
        # ---- aio at a base_url
        aio = AioFakeServer(work / "aiofake")
        aio.start()
        started.append(aio)
        d = Daemon(work / "aio", {"use": "aio", "state_dir": str(work / "aio" / "state"),
                                 "base_url": f"http://127.0.0.1:{aio.port}", "idle_timeout": 0})
        started.append(d)
        sbx = d.mnt / "bench" / "t"
        os.makedirs(sbx)
        body = {"command": "true", "exec_dir": "/mnt/user-data/workspace"}
        results.append(measure("aio-job", JobSide(sbx, "true", "a").once,
                               curl_side(f"http://127.0.0.1:{aio.port}/v1/bash/exec", body), args.rounds, args.jobs))
    finally:
        for s in reversed(started):
            try:
                s.stop()
            except Exception as e:  # noqa: BLE001 - reported, the rest still stops
                print(f"remote_bench: stopping {s}: {e}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    lines = ["| row | sbxfs (ms/job) | curl (ms/request) | ratio curl/sbxfs (median, min-max) |",
             "|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['row']} | {r['sbxfs_ms']:.1f} | {r['curl_ms']:.1f} | "
                     f"{r['ratio']:.2f} ({r['min']:.2f}-{r['max']:.2f}) |")
    table = "\n".join(lines)
    print(table)
    meta = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
            "load": os.getloadavg(), "rounds": args.rounds, "jobs": args.jobs, "rows": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(meta, indent=1))
    Path(args.out).with_suffix(".md").write_text(table + "\n")


if __name__ == "__main__":
    main()
