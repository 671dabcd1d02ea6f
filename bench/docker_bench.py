#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/docker_bench.py - the docker provider against the docker CLI, in one run.

    /usr/bin/python3 bench/docker_bench.py [--rounds N] [--many N] [--quick] [--out FILE]
    /usr/bin/python3 bench/docker_bench.py --spares [--spare-n N]

Needs root, ./sbxfs built (or SBXFS_BIN), and a dockerd (started here through
tests/dockerutil.py when none answers) with the locally built test image
sbxfs-test-busybox:1 (tests/images/build.sh; nothing is pulled).

Rows, each measured in interleaved rounds: round j runs sbxfs then the CLI
when j is even, the CLI then sbxfs when j is odd (ABAB), after one unrecorded
warm-up round, so what ran just before falls on both sides equally.  Ratio =
CLI time / sbxfs time in that round (above 1: sbxfs is faster); the table
shows the median ratio and its range beside the median times.

  cold      sbxfs: mkdir of a new scope (a new container, returns when its init
            answers)  |  CLI: docker run -d --network none IMAGE sleep + the
            readiness wait `docker inspect -f {{.State.Running}}` -> true
  warm      sbxfs: mkdir of a released scope (warm reclaim: inspect + ping)
            |  CLI: docker inspect -f {{.State.Running}} (the health check a
            script does before reusing a container)
  job       sbxfs: mkdir jobs/N, write `true` to cmd, read exit (docker.exec:
            init, the default)  |  CLI: docker exec C true
  job-engine  the same through the Engine exec API (docker.exec: engine)
            |  CLI: docker exec C true
  spare     (--spares, a run of its own) p50/p99 of mkdir of a brand-new
            thread to ready on a daemon with pool.prewarm 2 (claims a spare
            container) | the same on a daemon with prewarm 0 (cold create) |
            docker run -d + readiness; interleaved one of each per round, the
            order rotating; before each round, untimed, the spares are back
            to 2 (refilled in the background after a claim)
  many      N sandboxes acquired at once (N users, one thread each, so the
            mkdirs run concurrently) | N concurrent `docker run -d`: total
            time; the daemon's VmRSS before and after; the unmount teardown.

Goals (issue 10): cold at most 0.8x the CLI's time (ratio >= 1.25) and the
job round trip at most 0.5x (ratio >= 2).  Everything this run made carries
the label sbxfs-bench.run=<run id> and is removed at the end (also on
Ctrl-C); daemons are stopped by their pid.
"""

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))
import dockerutil  # noqa: E402

SBXFS = Path(os.environ.get("SBXFS_BIN", str(REPO / "sbxfs")))
IMAGE = dockerutil.IMAGES["busybox"]
RUN = f"bench-{os.getpid()}-{int(time.time())}"
LABEL = f"sbxfs-bench.run={RUN}"
DAEMONS = []  # every sbxfs this run started (stopped by pid at the end)


def log(msg):
    print(f"[docker_bench] {msg}", file=sys.stderr, flush=True)


def docker(*args, check=True, timeout=120):
    r = subprocess.run([dockerutil.docker_bin(), *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode:
        raise RuntimeError(f"docker {' '.join(args)}: {r.stderr.strip()}")
    return r


def vmrss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Daemon:
    """An sbxfs of this run: docker provider, its own state_dir and prefix."""

    def __init__(self, work, name, extra="", prewarm=0):
        self.dir = work / name
        self.mnt = self.dir / "mnt"
        self.mnt.mkdir(parents=True)
        self.conf = self.dir / "mount.conf"
        self.conf.write_text(
            f"use: docker\nimage: {IMAGE}\nstate_dir: {self.dir / 'state'}\n"
            f"container_prefix: sbxb-{os.getpid()}-{name}\nreplicas: 100000\nidle_timeout: 0\n"
            f"pool:\n  prewarm: {prewarm}\n"
            f"network:\n  mode: isolated\n"
            f"docker:\n  labels:\n    sbxfs-bench.run: {RUN}\n{extra}")
        self.proc = None

    def start(self):
        logf = open(self.dir / "sbxfs.log", "ab")
        self.proc = subprocess.Popen([str(SBXFS), "-f", "-c", str(self.conf), str(self.mnt)], stdin=subprocess.DEVNULL,
                                     stdout=logf, stderr=logf)
        logf.close()
        DAEMONS.append(self.proc)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.statvfs(self.mnt)
                if any(line.split()[1] == str(self.mnt) for line in open("/proc/mounts")):
                    return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"sbxfs did not mount: {(self.dir / 'sbxfs.log').read_text()[-2000:]}")

    def stop(self):
        t0 = time.monotonic()
        subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True, timeout=300)
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.wait(300)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        subprocess.run(["fusermount3", "-uz", str(self.mnt)], capture_output=True, timeout=30)
        return time.monotonic() - t0


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def pair_rows(name, rounds, sbx, cli, what):
    """Interleaved rounds of (sbx, cli), each a function taking the round
    number and returning seconds.  Round -1 is the warm-up."""
    s, c = [], []
    for j in range(-1, rounds):
        if j % 2 == 0:
            a, b = sbx(j), cli(j)
        else:
            b, a = cli(j), sbx(j)
        if j >= 0:
            s.append(a)
            c.append(b)
    ratios = [cb / sa for sa, cb in zip(s, c)]
    row = {"row": name, "what": what, "sbxfs_s": s, "cli_s": c, "ratios": ratios,
           "sbxfs_median_ms": statistics.median(s) * 1000, "cli_median_ms": statistics.median(c) * 1000,
           "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
    log(f"{name}: sbxfs {row['sbxfs_median_ms']:.1f} ms, CLI {row['cli_median_ms']:.1f} ms, "
        f"ratio {row['ratio_median']:.2f} [{row['ratio_min']:.2f}-{row['ratio_max']:.2f}]")
    return row


def cli_container(name):
    docker("run", "-d", "--network", "none", "--label", LABEL, "--name", name, IMAGE, "sleep", "1000000")


def cli_run_timed(name):
    """`docker run -d` of name until docker inspect says it runs (the peer's
    acquire), timed; the container is removed after."""
    def go():
        cli_container(name)
        while docker("inspect", "-f", "{{.State.Running}}", name).stdout.strip() != "true":
            time.sleep(0.01)
    t = timed(go)
    docker("rm", "-f", name, check=False)
    return t


def acquire(d):
    """mkdir of a thread to a ready sandbox (under `acquire: async`, the
    default, mkdir answers when the create started; `ready` when it ended)."""
    os.mkdir(d)
    (d / "ready").read_text()


def bench(args, work):
    rows = []
    d = Daemon(work, "a").start()
    e = Daemon(work, "e", extra="  exec: engine\n").start()
    os.mkdir(d.mnt / "u")
    os.mkdir(e.mnt / "u")

    # cold: a new scope each round / a new container each round
    def sbx_cold(j):
        return timed(lambda: acquire(d.mnt / "u" / f"cold{j + 1}"))

    def cli_cold(j):
        return cli_run_timed(f"sbxb-{os.getpid()}-cli-cold{j + 1}")

    rows.append(pair_rows("cold", args.rounds, sbx_cold, cli_cold,
                          "mkdir of a new scope vs docker run -d + readiness"))

    # warm: reclaim a released sandbox / health check of a running container
    acquire(d.mnt / "u" / "warm")
    cli_container(f"sbxb-{os.getpid()}-cli-warm")

    def sbx_warm(j):
        os.rmdir(d.mnt / "u" / "warm")
        return timed(lambda: acquire(d.mnt / "u" / "warm"))

    def cli_warm(j):
        return timed(lambda: docker("inspect", "-f", "{{.State.Running}}", f"sbxb-{os.getpid()}-cli-warm"))

    rows.append(pair_rows("warm", args.rounds, sbx_warm, cli_warm,
                          "mkdir of a warm scope vs docker inspect (health)"))

    # job round trip
    for daemon, row in ((d, "job"), (e, "job-engine")):
        sbx = daemon.mnt / "u" / "jobs-sbx"
        os.mkdir(sbx)
        seq = [0]

        def sbx_job(j, sbx=sbx, seq=seq):
            seq[0] += 1
            jd = sbx / "jobs" / f"j{seq[0]}"

            def go():
                os.mkdir(jd)
                with open(jd / "cmd", "w") as f:
                    f.write("true")
                with open(jd / "exit") as f:
                    assert f.read() == "0\n"
            return timed(go)

        def cli_job(j):
            return timed(lambda: docker("exec", f"sbxb-{os.getpid()}-cli-warm", "true"))

        rows.append(pair_rows(row, args.rounds * 2, sbx_job, cli_job,
                              f"jobs/N: cmd `true`, read exit ({'engine exec API' if row == 'job-engine' else 'init'})"
                              " vs docker exec C true"))
    e.stop()

    # many at once
    n = args.many
    m = Daemon(work, "many").start()
    rss0 = vmrss_kib(m.proc.pid)
    errs = []

    def one(i):
        try:
            os.makedirs(m.mnt / f"u{i}" / "t")
            (m.mnt / f"u{i}" / "t" / "ready").read_text()
        except OSError as ex:
            errs.append(ex)

    ths = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    [t.start() for t in ths]
    [t.join(600) for t in ths]
    sbx_total = time.perf_counter() - t0
    rss1 = vmrss_kib(m.proc.pid)
    made = len(docker("ps", "-q", "--filter", f"label={LABEL}").stdout.split())
    cerrs = []

    def cli_one(i):
        r = docker("run", "-d", "--network", "none", "--label", LABEL, IMAGE, "sleep", "1000000", check=False,
                   timeout=600)
        if r.returncode:
            cerrs.append(r.stderr)

    ths = [threading.Thread(target=cli_one, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    [t.start() for t in ths]
    [t.join(600) for t in ths]
    cli_total = time.perf_counter() - t0
    teardown = m.stop()
    left = docker("ps", "-aq", "--filter", f"label=sbxfs-bench.run={RUN}", "--filter",
                  f"name=sbxb-{os.getpid()}-many").stdout.split()
    many = {"row": "many", "n": n, "sbxfs_total_s": sbx_total, "cli_total_s": cli_total, "sbxfs_errors": len(errs),
            "cli_errors": len(cerrs), "rss_before_kib": rss0, "rss_after_kib": rss1, "teardown_s": teardown,
            "containers_left_after_unmount": len(left), "running_during": made}
    log(f"many: {n} sandboxes in {sbx_total:.2f} s ({len(errs)} errors) vs {n} docker run -d in {cli_total:.2f} s; "
        f"RSS {rss0} -> {rss1} KiB; teardown {teardown:.2f} s; {len(left)} left")
    d.stop()
    return rows, many


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def spares_ready(mnt):
    st = json.loads((mnt / ".status").read_text())["spares"]
    return st["ready"] if st["creating"] == 0 else -1


def bench_spares(args, work):
    """The spare row (see the top): p50/p99 of n rounds."""
    sp = Daemon(work, "spare", prewarm=2).start()
    co = Daemon(work, "nospare").start()
    for d in (sp, co):
        os.mkdir(d.mnt / "u")
    xs = {"spare": [], "cold": [], "docker run": []}

    def one(kind, i):
        if kind == "docker run":
            return cli_run_timed(f"sbxb-{os.getpid()}-cli-spare{i}")
        d = sp if kind == "spare" else co
        p = d.mnt / "u" / f"t{i}"
        t = timed(lambda: acquire(p))
        if json.loads((p / "status").read_text()).get("from_spare") is not (kind == "spare"):
            raise RuntimeError(f"mkdir {p}: from_spare is not {kind == 'spare'}")
        os.rmdir(p)
        return t

    kinds = list(xs)
    for i in range(-1, args.spare_n):
        deadline = time.monotonic() + 60
        while spares_ready(sp.mnt) != 2:
            if time.monotonic() > deadline:
                raise RuntimeError("spares not refilled within 60 s: " + (sp.dir / "sbxfs.log").read_text()[-2000:])
            time.sleep(0.005)
        order = kinds[i % 3:] + kinds[:i % 3]
        for k in order:
            t = one(k, i + 1)
            if i >= 0:
                xs[k].append(t * 1000)
    sp.stop()
    co.stop()
    res = {k: {"p50_ms": pct(v, 0.5), "p99_ms": pct(v, 0.99), "n": len(v)} for k, v in xs.items()}
    for k, v in res.items():
        log(f"spare row: {k}: p50 {v['p50_ms']:.1f} ms, p99 {v['p99_ms']:.1f} ms (n={v['n']})")
    return res


def spare_table(res):
    out = [f"# docker spares ({time.strftime('%Y-%m-%d %H:%M')}, {platform.release()}, {os.cpu_count()} CPUs, "
           f"load {os.getloadavg()[0]:.2f}; `{' '.join(sys.argv)}`)", "",
           "| mkdir of a brand-new thread to ready | p50 | p99 | n |", "|---|---|---|---|"]
    for k, what in (("spare", "claiming a spare (pool.prewarm 2)"), ("cold", "without spares (cold create)"),
                    ("docker run", "`docker run -d` + readiness (`docker inspect`)")):
        v = res[k]
        out.append(f"| {what} | {v['p50_ms']:.1f} ms | {v['p99_ms']:.1f} ms | {v['n']} |")
    out += ["", f"cold p50 / spare p50: {res['cold']['p50_ms'] / res['spare']['p50_ms']:.1f}x; "
                f"docker run p50 / spare p50: {res['docker run']['p50_ms'] / res['spare']['p50_ms']:.1f}x", ""]
    return "\n".join(out)


def table(rows, many, args):
    out = [f"# docker provider vs docker CLI ({time.strftime('%Y-%m-%d %H:%M')}, {platform.release()}, "
           f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; `{' '.join(sys.argv)}`)", "",
           "| row | what (sbxfs vs CLI) | sbxfs median | CLI median | ratio CLI/sbxfs (median [min-max]) | goal |",
           "|---|---|---|---|---|---|"]
    goals = {"cold": 1.25, "job": 2.0}
    for r in rows:
        g = goals.get(r["row"])
        verdict = "" if g is None else ("met" if r["ratio_median"] >= g else "not met") + f" (>= {g})"
        out.append(f"| {r['row']} | {r['what']} | {r['sbxfs_median_ms']:.1f} ms | {r['cli_median_ms']:.1f} ms | "
                   f"{r['ratio_median']:.2f} [{r['ratio_min']:.2f}-{r['ratio_max']:.2f}] | {verdict} |")
    out += ["", f"many: {many['n']} sandboxes acquired at once in {many['sbxfs_total_s']:.2f} s "
                f"({many['sbxfs_errors']} errors); {many['n']} concurrent `docker run -d` in "
                f"{many['cli_total_s']:.2f} s; sbxfs VmRSS {many['rss_before_kib']} KiB before, "
                f"{many['rss_after_kib']} KiB with {many['n']} sandboxes; unmount removed them in "
                f"{many['teardown_s']:.2f} s, {many['containers_left_after_unmount']} left.", ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--many", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="4 rounds, 20 sandboxes")
    ap.add_argument("--spares", action="store_true", help="the spare row only (into results/docker-spares.md)")
    ap.add_argument("--spare-n", type=int, default=30, help="rounds of the spare row")
    ap.add_argument("--out", default=str(HERE / "results" / "docker.md"))
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.many = 4, 20
    if os.geteuid() != 0:
        sys.exit("docker_bench: must run as root")
    if not SBXFS.exists():
        sys.exit(f"docker_bench: {SBXFS} not built (make)")
    dockerutil.ensure_dockerd()
    dockerutil.ensure_images(("busybox",))
    work = Path(tempfile.mkdtemp(prefix="sbxfs-docker-bench.", dir="/var/tmp"))

    def cleanup(*_):
        for mp in [line.split()[1] for line in open("/proc/mounts") if line.split()[1].startswith(str(work))]:
            subprocess.run(["fusermount3", "-uz", mp], capture_output=True, timeout=30)
        for p in DAEMONS:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        ids = docker("ps", "-aq", "--filter", f"label={LABEL}", check=False).stdout.split()
        if ids:
            docker("rm", "-f", *ids, check=False, timeout=600)
        shutil.rmtree(work, ignore_errors=True)

    signal.signal(signal.SIGTERM, lambda *a: (cleanup(), sys.exit(1)))
    try:
        if args.spares:
            res = bench_spares(args, work)
            text = spare_table(res)
            out = Path(args.out).with_name("docker-spares.md")
            out.write_text(text + "\n")
            out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
            print(text)
            return
        rows, many = bench(args, work)
        text = table(rows, many, args)
        print(text)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps({"rows": rows, "many": many}, indent=1) + "\n")
    finally:
        cleanup()


if __name__ == "__main__":
    main()
