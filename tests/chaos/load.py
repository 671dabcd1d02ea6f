#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Load mode (issue 22 item 5, docs/reliability.md): N sandboxes of several
users under steady job and file traffic, no kills, while the daemon's RSS and
descriptor count are sampled.

    python3 tests/chaos/load.py --seed 5                       # 10 min, 64 sandboxes
    python3 tests/chaos/load.py --seed 5 --duration 3600       # the issue's hour
    python3 tests/chaos/load.py --duration 40 --sandboxes 8 --json

Each worker thread owns a share of the sandboxes and, per step, picks one at
random and does one of: an rmdir + mkdir cycle (release into the warm pool,
then reclaim), stats (the sandbox, its workspace, a file), a file write +
fsync (1 B to 64 kB, a few names per sandbox, overwritten), or a job round
trip (mkdir jobs/N, write cmd, read exit, which waits for the end, check
stdout, rmdir the slot).  It reuses the chaos harness's daemon
(tests/chaos/chaos.py: own directory, mount.conf, state_dir; RLIMIT_NOFILE
4096).

The report: the slope of RSS and descriptor count (least squares over the
samples, per hour), the p50/p99 latency of mkdir (reclaim), stat and a job
round trip in the first and the last tenth of the run, the operation counts,
and every error the workload did not cause (any OSError: nothing is killed,
so every one is unexpected; a wrong job output; the daemon dying; a process
or cgroup left after the unmount).  Exit status 1 when there is one."""

import argparse
import errno
import json
import os
import random
import sys
import threading
import time
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402

OPS = ("mkdir", "stat", "job")


def slope_per_hour(samples):
    """Least-squares slope of [(t_seconds, value)], in value per hour."""
    n = len(samples)
    if n < 2:
        return None
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    den = sum((t - mt) ** 2 for t, _ in samples)
    if den == 0:
        return None
    return sum((t - mt) * (v - mv) for t, v in samples) / den * 3600.0


def _round(x, nd):
    return None if x is None else round(x, nd)


def percentile(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Load:
    def __init__(self, seed, duration=600.0, sandboxes=64, users=4, workers=8, sample_every=5.0,
                 base=None, log=print):
        self.seed, self.duration, self.log = seed, duration, log
        self.sample_every = sample_every
        self.base = Path(base or tempfile.mkdtemp(prefix=f"sbxfs-load-{seed}-"))
        self.d = chaos.Daemon(self.base, "local", {"replicas": max(64, sandboxes)})
        self.scopes = [chaos.Scope(f"u{i % users}", f"t{i}") for i in range(sandboxes)]
        self.nworkers = min(workers, sandboxes)
        self.users = users
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.t0 = None
        self.lat = {op: [] for op in OPS}   # (t since start, seconds)
        self.samples = []                   # (t, rss_kb, fds)
        self.errors = []
        self.counts = {"steps": 0, "mkdir": 0, "rmdir": 0, "stat": 0, "write": 0, "job": 0,
                       "bytes_written": 0}

    # ---- bookkeeping
    def error(self, text):
        with self.lock:
            if len(self.errors) < 200:
                self.errors.append(f"{round(time.monotonic() - self.t0, 1)} s: {text}")
        self.log(f"ERROR: {text}")

    def timed(self, op, fn):
        t = time.monotonic()
        r = fn()
        dt = time.monotonic() - t
        with self.lock:
            self.lat[op].append((t - self.t0, dt))
        return r

    def count(self, k, n=1):
        with self.lock:
            self.counts[k] += n

    def p(self, s, *parts):
        return self.d.mnt.joinpath(s.user, s.thread, *parts)

    # ---- the workload
    def acquire(self, s):
        # mkdir to a usable sandbox: under acquire: async the wait is on ready
        self.timed("mkdir", lambda: (os.makedirs(self.p(s)), self.p(s, "ready").read_text()))
        self.count("mkdir")
        st = json.loads(self.p(s, "status").read_text())
        if s.init_pid and st.get("init_pid") != s.init_pid:
            raise AssertionError(f"{s.rel}: reclaim gave init {st.get('init_pid')}, it was {s.init_pid}")
        s.init_pid = st.get("init_pid")
        s.state = "active"

    def op_cycle(self, s):
        os.rmdir(self.p(s))
        self.count("rmdir")
        s.state = "warm"
        self.acquire(s)

    def op_stat(self, s, rng):
        names = [n for n in s.files] or [None]
        n = rng.choice(names)

        def go():
            os.stat(self.p(s))
            os.stat(self.p(s, "workspace"))
            if n is not None:
                st = os.stat(self.p(s, "workspace", n))
                if st.st_size != len(s.files[n]):
                    raise AssertionError(f"{s.rel}/workspace/{n}: size {st.st_size}, wrote {len(s.files[n])}")
        self.timed("stat", go)
        self.count("stat")

    def op_write(self, s, rng):
        name = f"f{rng.randrange(4)}"
        size = rng.choice([1, 100, 4096, 65536])
        s.counter += 1
        head = f"{s.token}:{s.counter}:".encode()
        data = (head * (size // len(head) + 1))[:size]
        fd = os.open(self.p(s, "workspace", name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        s.files[name] = data
        self.count("write")
        self.count("bytes_written", size)

    def op_job(self, s):
        s.counter += 1
        name = f"j{s.counter}"
        jd = self.p(s, "jobs", name)

        def go():
            os.mkdir(jd)
            with open(jd / "cmd", "w") as f:
                f.write(f"echo out-{name}")
            with open(jd / "exit") as f:
                ex = f.read().strip()
            return ex, (jd / "stdout").read_text()
        ex, out = self.timed("job", go)
        if ex != "0" or out != f"out-{name}\n":
            raise AssertionError(f"{s.rel}/jobs/{name}: exit {ex!r}, stdout {out!r}")
        os.rmdir(jd)
        self.count("job")

    def step(self, s, rng):
        if s.state != "active":
            return self.acquire(s)
        r = rng.random()
        if r < 0.15:
            return self.op_cycle(s)
        if r < 0.45:
            return self.op_stat(s, rng)
        if r < 0.75:
            return self.op_write(s, rng)
        return self.op_job(s)

    def worker(self, wid, scopes):
        rng = random.Random(f"{self.seed}-{wid}")
        while not self.stop.is_set():
            s = rng.choice(scopes)
            self.count("steps")
            try:
                self.step(s, rng)
            except OSError as e:
                self.error(f"{s.rel}: {errno.errorcode.get(e.errno, e.errno)}: {e}")
                if not self.d.alive():
                    return
                s.state = "unknown"
                time.sleep(0.2)  # an error storm must not swamp the report
            except Exception as e:
                self.error(f"{s.rel}: {type(e).__name__}: {e}")

    def sample(self):
        try:
            with open(f"/proc/{self.d.proc.pid}/status") as f:
                rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            return
        self.samples.append((time.monotonic() - self.t0, rss, self.d.fd_count()))

    # ---- the run
    def run(self):
        self.log(f"load: seed {self.seed}, {self.duration:.0f} s, {len(self.scopes)} sandboxes, "
                 f"{self.users} users, {self.nworkers} workers, dir {self.base}")
        threads = []
        try:
            self.d.start()
            self.t0 = time.monotonic()
            per = [self.scopes[i::self.nworkers] for i in range(self.nworkers)]
            for wid, sc in enumerate(per):
                t = threading.Thread(target=self.worker, args=(wid, sc), daemon=True)
                t.start()
                threads.append(t)
            t_end = self.t0 + self.duration
            next_sample = self.t0
            while time.monotonic() < t_end:
                if not self.d.alive():
                    self.error(f"the daemon died (exit {self.d.proc.returncode}); log:\n{self.d.log_tail()}")
                    break
                if time.monotonic() >= next_sample:
                    self.sample()
                    next_sample += self.sample_every
                time.sleep(min(0.5, max(0.0, t_end - time.monotonic())))
            self.sample()
            self.stop.set()
            for t in threads:
                t.join(timeout=60)
                if t.is_alive():
                    self.error("a worker is stuck in an operation 60 s after the end")
            self.elapsed = time.monotonic() - self.t0
            if not self.errors:
                self.finish()
        finally:
            self.stop.set()
            if self.errors:
                self.d.cleanup()
        return self.report()

    def finish(self):
        rc = self.d.stop()
        if rc != 0:
            self.error(f"sbxfs exited {rc} after fusermount3 -u; log:\n{self.d.log_tail()}")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (self.d.cgroup_procs() or self.d.named_procs()):
            time.sleep(0.1)
        if self.d.cgroup_procs() or self.d.named_procs():
            self.error(f"processes survive shutdown: {self.d.cgroup_procs()} {self.d.named_procs()}")
        if self.d.cgroup_tokens():
            self.error(f"cgroups survive shutdown: {self.d.cgroup_tokens()}")

    def window(self, op, first):
        span = getattr(self, "elapsed", self.duration)
        lo, hi = (0.0, span / 10) if first else (span * 0.9, span)
        return [dt for t, dt in self.lat[op] if lo <= t < hi or (not first and t >= hi)]

    def by_tenth(self):
        """[rss_kb, fds] of the last sample in each tenth of the run: where
        a slope comes from (a rise that levels off, or one that does not)."""
        span = getattr(self, "elapsed", self.duration)
        out = []
        for i in range(10):
            xs = [(r, f) for t, r, f in self.samples if t <= span * (i + 1) / 10]
            out.append(list(xs[-1]) if xs else None)
        return out

    def result(self):
        lat = {}
        for op in OPS:
            lat[op] = {}
            for part, first in (("first", True), ("last", False)):
                xs = self.window(op, first)
                lat[op][part] = {"n": len(xs),
                                 "p50_ms": None if not xs else round(percentile(xs, 0.50) * 1000, 1),
                                 "p99_ms": None if not xs else round(percentile(xs, 0.99) * 1000, 1)}
        rss = [(t, r) for t, r, _ in self.samples]
        fds = [(t, f) for t, _, f in self.samples if f >= 0]
        # the first tenth is the warm-up (every sandbox created, caches
        # filling): the slope after it is the one that says "flat"
        warm = getattr(self, "elapsed", self.duration) / 10
        rss_w = [x for x in rss if x[0] >= warm]
        fds_w = [x for x in fds if x[0] >= warm]
        return {
            "seed": self.seed, "duration_s": round(getattr(self, "elapsed", 0.0), 1),
            "sandboxes": len(self.scopes), "users": self.users, "workers": self.nworkers,
            "samples": len(self.samples),
            "rss_kb": {"first": rss[0][1] if rss else None, "last": rss[-1][1] if rss else None,
                       "max": max((r for _, r in rss), default=None),
                       "slope_kb_per_h": _round(slope_per_hour(rss), 1),
                       "slope_after_warmup_kb_per_h": _round(slope_per_hour(rss_w), 1)},
            "fds": {"first": fds[0][1] if fds else None, "last": fds[-1][1] if fds else None,
                    "max": max((f for _, f in fds), default=None),
                    "slope_per_h": _round(slope_per_hour(fds), 2),
                    "slope_after_warmup_per_h": _round(slope_per_hour(fds_w), 2)},
            "by_tenth": self.by_tenth(),
            "series": [[round(t, 1), r, f] for t, r, f in self.samples],
            "latency": lat, "counts": dict(self.counts), "errors": list(self.errors),
            "pass": not self.errors,
        }

    def report(self):
        r = self.result()
        lines = [f"load seed {r['seed']}: {'PASS' if r['pass'] else 'FAIL'}: {r['duration_s']} s, "
                 f"{r['sandboxes']} sandboxes, {r['users']} users, {r['samples']} samples",
                 f"  counts: {json.dumps(r['counts'])}",
                 f"  rss: {r['rss_kb']['first']} -> {r['rss_kb']['last']} kB (max {r['rss_kb']['max']}), "
                 f"slope {r['rss_kb']['slope_kb_per_h']} kB/h, after the first tenth "
                 f"{r['rss_kb']['slope_after_warmup_kb_per_h']} kB/h",
                 f"  fds: {r['fds']['first']} -> {r['fds']['last']} (max {r['fds']['max']}), "
                 f"slope {r['fds']['slope_per_h']} /h, after the first tenth {r['fds']['slope_after_warmup_per_h']} /h",
                 f"  rss kB, fds at the end of each tenth: {r['by_tenth']}",
                 "  latency (ms)   first tenth: n    p50     p99 | last tenth: n    p50     p99"]
        for op in OPS:
            f, la = r["latency"][op]["first"], r["latency"][op]["last"]
            lines.append(f"  {op:<12} {f['n']:>18} {f['p50_ms']!s:>6} {f['p99_ms']!s:>7} "
                         f"| {la['n']:>13} {la['p50_ms']!s:>6} {la['p99_ms']!s:>7}")
        lines.append(f"  unexpected errors: {len(r['errors'])}")
        lines += [f"    {e}" for e in r["errors"][:10]]
        if not r["pass"]:
            lines.append(f"  replay: python3 tests/chaos/load.py --seed {r['seed']} (dir {self.base})")
        return r, "\n".join(lines)

    def remove(self):
        if not any(mp.startswith(str(self.base)) for mp, _ in chaos._mounts()):
            import shutil
            shutil.rmtree(self.base, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--duration", type=float, default=600.0, help="seconds (default 600; the issue asks 3600)")
    ap.add_argument("--sandboxes", type=int, default=64)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds between RSS/fd samples")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 31)
    ld = Load(seed, duration=a.duration, sandboxes=a.sandboxes, users=a.users, workers=a.workers,
              sample_every=a.sample_every, log=lambda s: print(s, file=sys.stderr, flush=True))
    r, text = ld.run()
    print(json.dumps(r, indent=1) if a.json else text, flush=True)
    if r["pass"]:
        ld.remove()
    return 0 if r["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
