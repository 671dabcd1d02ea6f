# SPDX-License-Identifier: MIT
"""rows_load.py - the mount under slow acquires (issue: slow acquires must not
stall the mount).

A daemon of its own, built with the bench-only `slow` provider (./sbxfs-slow:
the local provider whose create first sleeps SBXFS_SLOW_CREATE_MS, 2000 ms
here, standing for a docker or remote create).  One sandbox exists with a
1 MiB file in its workspace; then 64 mkdirs of new scopes start at once (each
in a user directory of its own: the kernel serialises mkdirs inside one
directory), and while they are in flight the main thread times stat of that
file, listdir of its workspace and open+read of it.  Reported: p50/p99 of
each (ms), and how many of the 64 acquires completed, and when.

No peer: nothing else does this.  The old daemon ran every create on a FUSE
worker, so 32 slow creates stopped the mount until they finished.
"""

import json
import os
import threading
import time

import bench
from bench import Metric, describe_group, row

describe_group("acquire-load", "stat, ls and reads of one sandbox while 64 slow (2 s) creates run")

SLOW_BIN = os.environ.get("SBXFS_SLOW_BIN") or os.path.join(bench.REPO, "sbxfs-slow")


def _p(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000.0 if s else float("nan")


class _SlowDaemon(bench.Daemon):
    def __init__(self, workdir, name, delay_ms):
        super().__init__(SLOW_BIN, workdir, name, 200)
        with open(self.conf, "w") as f:
            f.write("use: slow\nstate_dir: %s\nreplicas: 200\nidle_timeout: 0\nready_timeout: 60\n" % self.state)
        os.environ["SBXFS_SLOW_CREATE_MS"] = str(delay_ms)


class _Sampler:
    """A forked child that times stat, listdir and open+read of one file in a
    loop (5 ms apart) from go() until stop(), and hands the samples back."""

    def __init__(self, path, ws):
        self.go_r, self.go_w = os.pipe()
        self.res_r, res_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.go_w)
            os.close(self.res_r)
            try:
                out = self._run(path, ws)
                data = json.dumps(out).encode()
                while data:
                    data = data[os.write(res_w, data):]
            finally:
                os._exit(0)
        os.close(self.go_r)
        os.close(res_w)

    def _run(self, path, ws):
        os.read(self.go_r, 1)
        os.set_blocking(self.go_r, False)
        stat_s, ls_s, read_s = [], [], []
        while True:
            try:
                if os.read(self.go_r, 1) == b"":
                    break
            except BlockingIOError:
                pass
            a = time.monotonic()
            os.stat(path)
            b = time.monotonic()
            os.listdir(ws)
            c = time.monotonic()
            with open(path, "rb") as f:
                f.read()
            e = time.monotonic()
            stat_s.append(b - a)
            ls_s.append(c - b)
            read_s.append(e - c)
            time.sleep(0.005)
        return [stat_s, ls_s, read_s]

    def go(self):
        os.write(self.go_w, b"g")

    def stop(self):
        os.close(self.go_w)
        chunks = []
        while True:
            b = os.read(self.res_r, 1 << 16)
            if not b:
                break
            chunks.append(b)
        os.close(self.res_r)
        os.waitpid(self.pid, 0)
        return json.loads(b"".join(chunks) or b"[[], [], []]")


@row("acquire-load", peers=(), rounds=2, warmup=0, timeout=300,
     params={"n": (64, 16), "delay": (2000, 1000)},
     metrics=[Metric("stat_p50", "ms", "stat of a file of another sandbox, p50"),
              Metric("stat_p99", "ms", "stat of a file of another sandbox, p99"),
              Metric("ls_p99", "ms", "listdir of its workspace, p99"),
              Metric("read_p99", "ms", "open+read 1 MiB+close, p99"),
              Metric("acquired", "count", "acquires that completed (of n)"),
              Metric("all_done", "s", "time until every acquire completed")])
def slow_creates(ctx, t):
    if not os.access(SLOW_BIN, os.X_OK):
        raise RuntimeError("%s is missing: run `make sbxfs-slow` (make bench does)" % SLOW_BIN)
    d = _SlowDaemon(ctx.workdir, "load%d" % int(time.time() * 1000), ctx.p.delay)
    d.start()
    try:
        probe = os.path.join(d.mnt, "probe", "t")
        os.makedirs(probe)  # one slow create, before the load
        ws = os.path.join(probe, "workspace")
        path = os.path.join(ws, "f")
        with open(path, "wb") as f:
            f.write(os.urandom(1 << 20))
        for i in range(ctx.p.n):
            os.mkdir(os.path.join(d.mnt, "u%d" % i))
        done, errors = [], []

        def acquire(i):
            try:
                os.mkdir(os.path.join(d.mnt, "u%d" % i, "t"))
                done.append(time.monotonic())
            except OSError as e:
                errors.append(e)

        # The sampler is a process of its own: in this one it would wait for
        # the GIL behind the 64 acquire threads (5 ms switch interval), and
        # those waits would be counted as the mount's latency.
        sampler = _Sampler(path, ws)
        threads = [threading.Thread(target=acquire, args=(i,)) for i in range(ctx.p.n)]
        t0 = time.monotonic()
        sampler.go()
        for th in threads:
            th.start()
        while len(done) + len(errors) < ctx.p.n and time.monotonic() - t0 < 240:
            time.sleep(0.01)
        stat_s, ls_s, read_s = sampler.stop()
        for th in threads:
            th.join(300)
        return {"stat_p50": _p(stat_s, 0.5), "stat_p99": _p(stat_s, 0.99), "ls_p99": _p(ls_s, 0.99),
                "read_p99": _p(read_s, 0.99), "acquired": float(len(done)),
                "all_done": (max(done) - t0) if done else float("nan")}
    finally:
        d.stop(timeout=120)
