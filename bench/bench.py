#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""
bench.py - the sbxfs benchmark driver (`make bench` -> bench/run.sh -> here).

Every row of the table is a *pair*: sbxfs against one named peer (a native
directory, a bindfs mount, bubblewrap started directly, ...), measured in the
same run in interleaved rounds.  Round j runs sbxfs then the peer when j is
even and the peer then sbxfs when j is odd (A B, B A, A B, ...), so a slow
drift of the host (other benchmarks, test suites, page-cache pressure) lands
on both sides alike.  Each round gives one ratio; a row reports the median of
those per-pair ratios with their spread (min-max and IQR), the absolute
medians of both sides, and a verdict in words.  Absolute figures from a noisy
host are context; the per-pair ratios are the result.

This file is the driver core and the API; rows live in bench/rows_*.py, which
are imported at start (see bench/README.md, "Adding a row"):

    from bench import row

    @row("smallfiles", peers=("native", "bindfs"), unit="ops/s",
         title="create+close, {n} empty files", params={"n": (2000, 300)})
    def create_empty(ctx, t):
        d = t.fresh("c")                      # a new directory on this side
        with ctx.timer() as tm:
            for k in range(ctx.p.n):
                os.close(os.open(os.path.join(d, "f%d" % k), os.O_CREAT | os.O_WRONLY))
        return ctx.p.n / tm.s

A fixture (sbxfs, native, bindfs, bwrap, ...) is a generator registered with
@fixture(name) that sets something up once per run, yields a Target and tears
it down at the end.  The driver gives each pair row a fresh directory on each
side (t.dir) and removes it afterwards.

Python stdlib only; run as root with Debian's /usr/bin/python3.
"""

import argparse
import contextlib
import gc
import glob
import importlib
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from datetime import datetime, timezone

if __name__ == "__main__":
    # row modules do `from bench import row`: let them find this very module
    sys.modules["bench"] = sys.modules[__name__]

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MiB = 1 << 20
GiB = 1 << 30
SBX_USER = "bench"
SBX_THREAD = "t1"
# the bindfs peer: plain pass-through FUSE with its default options (Debian 12: bindfs 1.14
# on libfuse 2, single-threaded, no big_writes so writes arrive 4 KiB at a time)
BINDFS_ARGS = ["--no-allow-other"]
# an even number of rounds gives as many A-first as B-first rounds (ABBA balance)
DEFAULT_ROUNDS, DEFAULT_WARMUP = 8, 1
QUICK_ROUNDS, QUICK_WARMUP = 4, 0

T0 = time.monotonic()
STARTED = datetime.now(timezone.utc)


def log(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T0, msg), file=sys.stderr, flush=True)


# ==========================================================================
# The API: fixtures, targets, rows, the context handed to rows
# ==========================================================================

FIXTURES = {}      # name -> Fixture
ROWS = []          # RowDef, in registration order (the table's order)
GROUPS = {}        # group -> one-line description (from describe_group or the first row)

# Groups other issues will add. Extension points, not rows: `--only NAME` says so and
# runs nothing. bench/README.md ("Planned groups") says which fixture each one needs.
PLANNED_GROUPS = {
    "docker": "sbxfs's docker provider against the docker CLI on the same image: acquire "
              "(`docker run -d` + ready) vs mkdir, exec (`docker exec true`) vs jobs/, file "
              "copy (`docker cp`) vs cp into workspace/; needs a `docker` peer fixture",
    "proxy": "egress proxy throughput and connection latency: a job fetching from a local "
             "HTTP server through sbxfs's proxy vs the same job with the network open (or "
             "curl on the host); needs a `direct-net` peer fixture and an HTTP server fixture",
    "remote": "remote files (opensandbox / aio providers): read, write, stat through the mount "
              "vs curl against the same file API of the fake or real server; needs a "
              "`curl` peer fixture",
    "acquire-load": "acquire latency (mkdir p50/p99) while N jobs burn CPU and do I/O in other "
                    "sandboxes, vs starting bubblewrap directly under the same load; needs "
                    "a load fixture shared by both sides",
}


class Target:
    """One side of a pair: where a row's work happens.

    kind      the fixture's name ("sbxfs", "native", "bindfs", "bwrap", ...)
    root      the fixture's directory (sbxfs: the sandbox's workspace through the mount)
    dir       a fresh directory for this row on this side (made and removed by the driver)
    info      fixture details for rows that need more than a directory, e.g. for sbxfs:
              info["mnt"], info["daemon"] (a Daemon), info["sandbox"] (/mnt/bench/t1)
    state     whatever the row's prepare(ctx, target) returned (once per side and row)
    describe  one line for the report header
    """

    def __init__(self, kind, root, describe="", **info):
        self.kind, self.root, self.describe, self.info = kind, root, describe, info
        self.dir = None
        self.state = None
        self._seq = 0

    def for_row(self, dirname):
        t = Target(self.kind, self.root, self.describe, **self.info)
        t.dir = os.path.join(self.root, dirname)
        rmtree(t.dir)
        os.makedirs(t.dir)
        return t

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def fresh(self, prefix="r"):
        """A new, empty directory under t.dir (a different one at every call)."""
        self._seq += 1
        d = os.path.join(self.dir, "%s%04d" % (prefix, self._seq))
        os.mkdir(d)
        return d


class Fixture:
    def __init__(self, name, fn, describe):
        self.name, self.fn, self.describe = name, fn, describe


def fixture(name, describe=""):
    """Register a fixture: a generator fn(ctx) that sets up, yields a Target, and tears
    down after the yield (in a finally:). Set up lazily, at most once per run."""
    def deco(fn):
        if name in FIXTURES:
            raise ValueError("fixture %r registered twice" % name)
        FIXTURES[name] = Fixture(name, fn, describe or (fn.__doc__ or "").strip().split("\n")[0])
        return fn
    return deco


def describe_group(name, text):
    """One line about a group, shown by --list and above its table."""
    GROUPS[name] = text


class Metric:
    """One measured quantity of a row. higher=None: from the unit (s, ms, us: lower is better)."""

    def __init__(self, key, unit, title=None, higher=None):
        self.key, self.unit, self.title = key, unit, title or key
        self.higher = (unit not in ("s", "ms", "us", "µs")) if higher is None else higher


class RowDef:
    def __init__(self, group, name, fn, peers, metrics, params, prepare, rounds, warmup,
                 timeout, doc):
        self.group, self.name, self.fn, self.peers = group, name, fn, peers
        self.metrics, self.params, self.prepare = metrics, params, prepare
        self.rounds, self.warmup, self.timeout, self.doc = rounds, warmup, timeout, doc

    @property
    def id(self):
        return "%s.%s" % (self.group, self.name)


def row(group, peer=None, peers=None, unit=None, title=None, metrics=None, params=None,
        prepare=None, rounds=None, warmup=None, timeout=600, name=None):
    """Register fn(ctx, target) as a row of `group`, paired with each peer fixture.

    peer / peers   fixture name(s) to pair sbxfs with; one table row per peer, each
                   measured in its own interleaved rounds. peers=() makes a solo row
                   (sbxfs only: absolute figures, no ratio).
    unit, title    for a single-metric row: fn returns one number in that unit. Units
                   s/ms/us are "lower is better", anything else (MB/s, ops/s) higher.
    metrics        instead of unit/title: a list of Metric(key, unit, title); fn returns
                   {key: value} (a side may leave a key out: that metric is then solo).
    params         {"name": (full, quick)} or {"name": value}: sizes, read as ctx.p.name
                   and usable in titles as {name}.
    prepare        prepare(ctx, target) -> state, once per side before the rounds,
                   untimed; the rounds see it as target.state.
    rounds, warmup override --rounds / --warmup for this row (e.g. a slow row).
    timeout        seconds one call of fn may take before the run is aborted.
    """
    def deco(fn):
        if metrics is None:
            if unit is None:
                raise ValueError("row %s: give unit= (or metrics=)" % fn.__name__)
            ms = [Metric(name or fn.__name__, unit, title or name or fn.__name__)]
        else:
            ms = list(metrics)
        if peers is not None and peer is not None:
            raise ValueError("row %s: give peer= or peers=, not both" % fn.__name__)
        ps = (peer,) if peer is not None else tuple(peers if peers is not None else ())
        rd = RowDef(group, name or fn.__name__, fn, ps, ms, dict(params or {}), prepare,
                    rounds, warmup, timeout, (fn.__doc__ or "").strip())
        if any(r.id == rd.id for r in ROWS):
            raise ValueError("row %s registered twice" % rd.id)
        ROWS.append(rd)
        GROUPS.setdefault(group, "")
        return fn
    return deco


class Timer:
    def __enter__(self):
        self.t = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.s = time.perf_counter() - self.t
        return False


class Ctx:
    """What a row function gets besides its target.

    ctx.p            the row's params for this mode (ctx.p.n, ...)
    ctx.quick        True in --quick mode
    ctx.timer()      with ctx.timer() as tm: ...; tm.s is the elapsed seconds
    ctx.drop_caches() sync + echo 3 > /proc/sys/vm/drop_caches
    ctx.fixture(n)   the Target of fixture n (set up on first use)
    ctx.scratch(n)   a directory of the run's scratch area (created), for inputs
    ctx.cache        a dict shared by all rows of the run (e.g. a generated tarball)
    ctx.note(text)   a line for the report's notes
    ctx.daemon(name, replicas=..., extra_conf="")
                     context manager: a separate sbxfs daemon of its own (a Daemon)
    """

    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.workdir = args.workdir
        self.sbxfs_bin = args.sbxfs
        self.notes = []
        self.cache = {}
        self.p = types.SimpleNamespace()
        self._stack = contextlib.ExitStack()
        self._targets = {}

    def timer(self):
        return Timer()

    def drop_caches(self):
        drop_caches()

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)

    def scratch(self, name):
        d = os.path.join(self.workdir, name)
        os.makedirs(d, exist_ok=True)
        return d

    def fixture(self, name):
        if name not in self._targets:
            if name not in FIXTURES:
                raise KeyError("no fixture %r (fixtures: %s)" % (name, ", ".join(sorted(FIXTURES))))
            log("fixture %s: setting up" % name)
            cm = contextlib.contextmanager(FIXTURES[name].fn)(self)
            self._targets[name] = self._stack.enter_context(cm)
        return self._targets[name]

    @contextlib.contextmanager
    def daemon(self, name, replicas=64, extra_conf=""):
        d = Daemon(self.sbxfs_bin, self.workdir, name, replicas, extra_conf)
        try:
            d.start()
            yield d
        finally:
            if d.proc is not None:
                d.stop(timeout=60)

    def close(self):
        self._stack.close()
        self._targets.clear()


# ==========================================================================
# helpers
# ==========================================================================

def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def in_proc_mounts(path, fstype=None):
    path = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            mp = parts[1].replace("\\040", " ")
            if mp == path and (fstype is None or parts[2] == fstype):
                return True
    return False


def vmrss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def count_procs_mentioning(text):
    """processes whose command line mentions text (a daemon's state_dir: its bwrap sandboxes
    bind directories from there, so this counts live sandboxes of that daemon only)."""
    n = 0
    needle = text.encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                if needle in f.read() and int(d) != os.getpid():
                    n += 1
        except OSError:
            pass
    return n


def rmtree(path):
    if os.path.lexists(path):
        subprocess.run(["rm", "-rf", "--one-file-system", path], check=False)


class BenchAbort(Exception):
    """A call hung or the run was interrupted: stop everything, write what we have."""


def call_with_timeout(fn, secs, what):
    """Run fn() in a thread; BenchAbort if it has not returned after secs. (A FUSE call
    that hangs stays stuck in its thread; the teardown unmounts and kills later.)"""
    res = {}

    def run():
        try:
            res["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            res["e"] = e
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(secs)
    if th.is_alive():
        raise BenchAbort("%s: no answer after %ss" % (what, secs))
    if "e" in res:
        raise res["e"]
    return res.get("v")


def median(xs):
    return statistics.median(xs) if xs else None


def quartiles(xs):
    """(q1, q3) by linear interpolation between order statistics (inclusive method)."""
    if len(xs) < 2:
        return (xs[0], xs[0]) if xs else (None, None)
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


def fmt(v):
    if v is None:
        return "?"
    a = abs(v)
    if a >= 100:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    if a >= 1:
        return "%.2f" % v
    return "%.3f" % v


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def count_fstype(fstype):
    with open("/proc/mounts") as f:
        return sum(1 for line in f if line.split()[2] == fstype)


def fs_type(path):
    """The file system path is on, "ext4 without a journal" when it is one: there ext4's
    inode allocator skips (and reads) every inode freed in the last 60-300 s
    (recently_deleted() in fs/ext4/ialloc.c), so rows that create files run slower for a
    few minutes after rows that deleted many (docs/performance.md, 2026-12-03)."""
    best, typ, dev = "", "?", ""
    rp = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            p = line.split()
            if (rp == p[1] or rp.startswith(p[1].rstrip("/") + "/")) and len(p[1]) > len(best):
                best, typ, dev = p[1], p[2], p[0]
    if typ == "ext4" and dev.startswith("/dev/"):
        try:
            with open("/sys/fs/ext4/%s/journal_task" % os.path.basename(dev)) as f:
                if f.read().strip() in ("", "<none>"):
                    typ = "ext4 without a journal"
        except OSError:
            pass
    return typ


# ==========================================================================
# mounts: an sbxfs daemon, a bindfs mount
# ==========================================================================

class Daemon:
    """One sbxfs daemon in the foreground (local provider), its mountpoint and state_dir,
    all under workdir/name; mount.conf is generated there."""

    def __init__(self, binary, workdir, name, replicas, extra_conf=""):
        self.binary = binary
        self.base = os.path.join(workdir, name)
        self.state = os.path.join(self.base, "state")
        self.mnt = os.path.join(self.base, "mnt")
        self.conf = os.path.join(self.base, "mount.conf")
        self.logpath = os.path.join(self.base, "daemon.log")
        self.pidfile = os.path.join(workdir, "daemon-%s.pid" % name)  # run.sh's cleanup reads these
        self.replicas = replicas
        os.makedirs(self.state, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        # network mode isolated unless a row asks otherwise: the bwrap peer has a
        # loopback-only namespace too, and the default mode (open) adds a veth
        # pair into the gateway per sandbox, measured by its own metrics
        # (acquire.mkdir cold_open; bench/gateway_bench.py)
        if "network:" not in extra_conf:
            extra_conf += "network:\n  mode: isolated\n"
        # no spares unless a row asks for them (acquire.spare): a "cold" mkdir
        # would otherwise claim one, and spares count as sandboxes
        if "pool:" not in extra_conf:
            extra_conf += "pool:\n  prewarm: 0\n"
        with open(self.conf, "w") as f:
            f.write("use: local\nstate_dir: %s\nreplicas: %d\nidle_timeout: 0\n%s"
                    % (self.state, replicas, extra_conf))
        self.proc = None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self, timeout=30):
        self.logf = open(self.logpath, "ab")
        self.proc = subprocess.Popen([self.binary, "-f", "-c", self.conf, self.mnt],
                                     stdin=subprocess.DEVNULL, stdout=self.logf,
                                     stderr=subprocess.STDOUT)
        with open(self.pidfile, "w") as f:
            f.write("%d\n" % self.proc.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if in_proc_mounts(self.mnt, "fuse.sbxfs"):
                return
            if self.proc.poll() is not None:
                raise RuntimeError("sbxfs exited %d before mounting; log:\n%s"
                                   % (self.proc.returncode, self.log_tail()))
            time.sleep(0.02)
        raise RuntimeError("sbxfs not in /proc/mounts after %ss; log:\n%s"
                           % (timeout, self.log_tail()))

    def log_tail(self, n=20):
        try:
            with open(self.logpath, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""

    def log_lines(self, level_words=("error", "warning")):
        try:
            with open(self.logpath, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return []
        return [ln for ln in lines if any((" %s " % w) in ln.lower()
                                         or ln.lower().startswith("sbxfs: %s" % w)
                                         for w in level_words)]

    def stop(self, timeout=120):
        """Unmount and wait for the daemon to exit; returns seconds (None if it had to be killed)."""
        if self.proc is None:
            return None
        t = time.perf_counter()
        if in_proc_mounts(self.mnt):
            r = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
            if r.returncode != 0:
                log("fusermount3 -u %s: %s; lazy unmount" % (self.mnt, r.stderr.decode().strip()))
                subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        try:
            self.proc.wait(timeout)
            dt = time.perf_counter() - t
        except subprocess.TimeoutExpired:
            log("sbxfs pid %d still running %ss after unmount: SIGTERM" % (self.proc.pid, timeout))
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            dt = None
        if in_proc_mounts(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        self.logf.close()
        try:
            os.unlink(self.pidfile)
        except OSError:
            pass
        self.proc = None
        return dt


class Bindfs:
    def __init__(self, src, mnt):
        self.src, self.mnt = src, mnt
        os.makedirs(mnt, exist_ok=True)
        subprocess.run(["bindfs"] + BINDFS_ARGS + [src, mnt], check=True)
        if not in_proc_mounts(mnt):
            raise RuntimeError("bindfs did not mount %s" % mnt)

    def stop(self):
        if in_proc_mounts(self.mnt):
            r = subprocess.run(["umount", self.mnt], capture_output=True)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", self.mnt], capture_output=True)


def tool_version(argv):
    try:
        r = subprocess.run(argv, capture_output=True, timeout=5)
        return (r.stdout or r.stderr).decode(errors="replace").strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        return "?"


# ==========================================================================
# the built-in file fixtures (bwrap lives in rows_sandbox.py, beside its rows)
# ==========================================================================

@fixture("sbxfs", "through the mount: a sandbox's workspace, /sbx/bench/t1/workspace, of an "
                  "sbxfs daemon started from the repo with a generated mount.conf (local "
                  "provider, replicas 256, idle_timeout 0, network mode isolated)")
def fixture_sbxfs(ctx):
    # SBXFS_BENCH_CONF: extra mount.conf lines, e.g. "cache_timeout: 0" for the short
    # timeouts without the cache watcher (docs/performance.md, "before/after" of issue 23)
    extra = os.environ.get("SBXFS_BENCH_CONF", "")
    if extra:
        ctx.note("sbxfs fixture: extra mount.conf lines: `%s`" % extra.replace("\n", "; "))
    # SBXFS_BENCH_FUSE_IO_URING=off|auto|on: this daemon's fuse.io_uring (every row's
    # sbxfs side over io_uring); the host's enable_uring is put back after the run
    mode = os.environ.get("SBXFS_BENCH_FUSE_IO_URING", "")
    before = None
    if mode and os.path.exists(URING_PARAM):
        with open(URING_PARAM) as f:
            before = f.read().strip()
    conf = (extra + "\n" if extra else "") + ("fuse:\n  io_uring: \"%s\"\n" % mode if mode else "")
    d = Daemon(ctx.sbxfs_bin, ctx.workdir, "sbxfs", 256, conf)
    try:
        d.start()
        sandbox = os.path.join(d.mnt, SBX_USER, SBX_THREAD)
        call_with_timeout(lambda: os.makedirs(sandbox), 60, "mkdir " + sandbox)
        ws = os.path.join(sandbox, "workspace")
        ctx.note("data path of sbxfs: %s" % data_path_of(d.mnt))
        ctx.note("transport of sbxfs: %s" % status_of(d.mnt).get("fuse_transport", "unknown"))
        yield Target("sbxfs", ws, FIXTURES["sbxfs"].describe, mnt=d.mnt, daemon=d,
                     sandbox=sandbox, user=SBX_USER, thread=SBX_THREAD)
    finally:
        if d.proc is not None:
            errs = d.log_lines()
            if errs:
                ctx.note("sbxfs fixture: daemon log has %d error/warning lines, first: `%s`"
                         % (len(errs), errs[0][:200]))
            td = d.stop()
            left = count_procs_mentioning(d.state + "/")
            ctx.note("sbxfs fixture: unmount to daemon exit %s; processes naming its state_dir "
                     "left afterwards: %d" % ("%.2f s" % td if td is not None else
                                              "FAILED (had to be killed)", left))
        if before is not None:
            with open(URING_PARAM, "w") as f:
                f.write(before)


COPY_BIN = os.path.join(REPO, "build", "copy", "sbxfs")


@fixture("sbxfs-copy", "the same sbxfs built on the system's libfuse (build/copy/sbxfs, `make "
                       "build/copy/sbxfs`; 3.14 on Debian 12): the copy data path, every byte through "
                       "the daemon")
def fixture_sbxfs_copy(ctx):
    if not os.access(COPY_BIN, os.X_OK):
        raise RuntimeError("%s is missing: `make build/copy/sbxfs` (make bench does)" % COPY_BIN)
    d = Daemon(COPY_BIN, ctx.workdir, "sbxfs-copy", 16)
    try:
        d.start()
        sandbox = os.path.join(d.mnt, SBX_USER, SBX_THREAD)
        call_with_timeout(lambda: os.makedirs(sandbox), 60, "mkdir " + sandbox)
        ctx.note("data path of sbxfs-copy: %s" % data_path_of(d.mnt))
        yield Target("sbxfs-copy", os.path.join(sandbox, "workspace"), FIXTURES["sbxfs-copy"].describe,
                     mnt=d.mnt, daemon=d, sandbox=sandbox)
    finally:
        if d.proc is not None:
            d.stop()


URING_PARAM = "/sys/module/fuse/parameters/enable_uring"


def _transport_daemon(ctx, name, mode, want):
    """A second daemon like the sbxfs fixture's (16 replicas), with fuse.io_uring: mode;
    the host's enable_uring is put back as it was when it stops."""
    try:
        with open(URING_PARAM) as f:
            before = f.read().strip()
    except OSError as e:
        raise RuntimeError("this kernel has no FUSE over io_uring (%s: %s)" % (URING_PARAM, e))
    d = Daemon(ctx.sbxfs_bin, ctx.workdir, name, 16, "fuse:\n  io_uring: \"%s\"\n" % mode)
    try:
        d.start()
        sandbox = os.path.join(d.mnt, SBX_USER, SBX_THREAD)
        call_with_timeout(lambda: os.makedirs(sandbox), 60, "mkdir " + sandbox)
        transport = status_of(d.mnt).get("fuse_transport", "unknown")
        ctx.note("transport of %s: %s" % (name, transport))
        if transport != want:
            raise RuntimeError("%s: .status says fuse_transport %s; log:\n%s"
                               % (name, transport, d.log_tail()))
        yield Target(name, os.path.join(sandbox, "workspace"), FIXTURES[name].describe,
                     mnt=d.mnt, daemon=d, sandbox=sandbox)
    finally:
        if d.proc is not None:
            d.stop()
        with open(URING_PARAM, "w") as f:
            f.write(before)


@fixture("sbxfs-uring", "the same sbxfs with `fuse: {io_uring: on}`, a daemon of its own "
                        "(16 replicas): requests come through per-CPU io_uring rings instead of "
                        "/dev/fuse reads (the kernel's enable_uring is switched to Y by the "
                        "daemon, and back to what it was after the run)")
def fixture_sbxfs_uring(ctx):
    yield from _transport_daemon(ctx, "sbxfs-uring", "on", "io_uring")


@fixture("sbxfs-devfuse", "the control of sbxfs-uring: a daemon of its own set up the same way "
                          "(16 replicas), with `fuse: {io_uring: off}` (/dev/fuse, as the sbxfs "
                          "fixture)")
def fixture_sbxfs_devfuse(ctx):
    yield from _transport_daemon(ctx, "sbxfs-devfuse", "off", "dev_fuse")


def status_of(mnt):
    try:
        with open(os.path.join(mnt, ".status")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def data_path_of(mnt):
    """What the daemon's .status says its data path is (passthrough or copy)."""
    try:
        with open(os.path.join(mnt, ".status")) as f:
            return json.load(f).get("data_path", "unknown")
    except (OSError, ValueError):
        return "unknown"


@fixture("native", "a plain directory on the same filesystem as sbxfs's state_dir "
                   "(the scratch dir under /var/tmp), used directly")
def fixture_native(ctx):
    yield Target("native", ctx.scratch("native"), FIXTURES["native"].describe)


@fixture("bindfs", "`bindfs --no-allow-other` of a directory on that same filesystem "
                   "(pass-through FUSE, default options: libfuse 2, single-threaded, "
                   "4 KiB writes)")
def fixture_bindfs(ctx):
    src, mnt = ctx.scratch("bindfs-src"), ctx.scratch("bindfs-mnt")
    b = Bindfs(src, mnt)
    try:
        yield Target("bindfs", mnt, "%s (%s)" % (FIXTURES["bindfs"].describe,
                                                 tool_version(["bindfs", "--version"])))
    finally:
        b.stop()


# ==========================================================================
# the driver core: interleaved pairs, statistics, report
# ==========================================================================

class MetricResult:
    def __init__(self, rd, peer, metric):
        self.rd, self.peer, self.m = rd, peer, metric
        self.sbx, self.other, self.ratios = [], [], []
        self.rounds = []       # [{"round", "order", "sbxfs", "peer", "ratio", "t"}]
        self.error = None
        self.load = [None, None]

    def add_round(self, j, order, vals, t):
        s = vals.get("sbxfs", {}).get(self.m.key)
        p = vals.get("peer", {}).get(self.m.key)
        r = None
        if s is not None:
            self.sbx.append(s)
        if p is not None:
            self.other.append(p)
        if s is not None and p is not None and s > 0 and p > 0:
            r = s / p if self.m.higher else p / s
            self.ratios.append(r)
        self.rounds.append({"round": j, "order": order, "sbxfs": s, "peer": p, "ratio": r,
                            "t": round(t, 3)})

    def verdict(self):
        if self.error:
            return "error"
        if not self.peer or not self.other:
            return "no peer: absolute figures only"
        rs = self.ratios
        n = len(rs)
        if n == 0:
            return "no complete pair"
        k = sum(1 for r in rs if r > 1)
        if all(0.9 <= r <= 1.1 for r in rs):
            return "parity: every pair within ±10 %"
        if k == n:
            return "sbxfs faster in every pair (%d/%d)" % (k, n)
        if k == 0:
            return "sbxfs slower in every pair (%d/%d)" % (n, n)
        if k >= 0.75 * n:
            return "sbxfs faster in %d/%d pairs" % (k, n)
        if k <= 0.25 * n:
            return "sbxfs slower in %d/%d pairs" % (n - k, n)
        return "mixed: sbxfs faster in %d/%d pairs" % (k, n)

    def order_effect(self):
        """Median ratio of the rounds where sbxfs ran first (AB) and of those where the peer
        ran first (BA): far apart means the row is sensitive to what ran just before it."""
        ab = [r["ratio"] for r in self.rounds if r["ratio"] is not None and r["order"] == "AB"]
        ba = [r["ratio"] for r in self.rounds if r["ratio"] is not None and r["order"] == "BA"]
        if not ab or not ba:
            return None
        return {"AB": median(ab), "BA": median(ba)}

    def title(self, params):
        try:
            return self.m.title.format(**params)
        except (KeyError, IndexError, ValueError):
            return self.m.title

    def to_json(self, params):
        def st(xs):
            if not xs:
                return None
            q1, q3 = quartiles(xs)
            return {"median": median(xs), "min": min(xs), "max": max(xs), "q1": q1, "q3": q3,
                    "n": len(xs), "samples": xs}
        return {"group": self.rd.group, "row": self.rd.name, "metric": self.m.key,
                "id": "%s.%s" % (self.rd.id, self.m.key) if len(self.rd.metrics) > 1 else self.rd.id,
                "title": self.title(params), "unit": self.m.unit,
                "higher_is_better": self.m.higher, "peer": self.peer,
                "sbxfs": st(self.sbx), "peer_stats": st(self.other),
                "ratio": st(self.ratios), "verdict": self.verdict(), "error": self.error,
                "order_effect": self.order_effect(), "rounds": self.rounds, "loadavg": self.load,
                "params": params}


def resolve_params(rd, quick):
    out = {}
    for k, v in rd.params.items():
        if isinstance(v, tuple) and len(v) == 2:
            out[k] = v[1] if quick else v[0]
        else:
            out[k] = v
    return out


def run_side(ctx, rd, t, what):
    gc.collect()
    gc.disable()
    try:
        v = call_with_timeout(lambda: rd.fn(ctx, t), rd.timeout, what)
    finally:
        gc.enable()
    if isinstance(v, dict):
        return v
    if isinstance(v, (int, float)):
        return {rd.metrics[0].key: float(v)}
    raise TypeError("row %s returned %r (want a number or a dict)" % (rd.id, v))


def run_pair(ctx, rd, peer, rounds, warmup):
    """Measure one pair row: sbxfs against `peer` (None: solo) in interleaved rounds."""
    params = resolve_params(rd, ctx.quick)
    ctx.p = types.SimpleNamespace(**params)
    results = [MetricResult(rd, peer, m) for m in rd.metrics]
    for r in results:
        r.load[0] = loadavg()
    label = "%s vs %s" % (rd.id, peer) if peer else rd.id
    dirname = "%s-%s" % (rd.id, peer or "solo")
    sides = []
    try:
        try:
            sides.append(("sbxfs", ctx.fixture("sbxfs").for_row(dirname)))
            if peer:
                sides.append(("peer", ctx.fixture(peer).for_row(dirname)))
            if rd.prepare:
                for _, t in sides:
                    log("%s: prepare %s" % (label, t.kind))
                    t.state = call_with_timeout(lambda: rd.prepare(ctx, t), rd.timeout,
                                                "%s prepare on %s" % (label, t.kind))
            for i in range(warmup + rounds):
                j = i - warmup          # measured round index; < 0 = warm-up
                order = sides if (j % 2 == 0) else sides[::-1]
                vals = {}
                t_round = time.monotonic() - T0
                for role, t in order:
                    vals[role] = run_side(ctx, rd, t, "%s on %s" % (label, t.kind))
                if j >= 0:
                    for r in results:
                        r.add_round(j, "".join("A" if role == "sbxfs" else "B" for role, _ in order),
                                    vals, t_round)
            ratios = results[0].ratios
            log("%s: %d rounds; %s ratio median %s" % (
                label, rounds, results[0].m.key,
                ("%.2f" % median(ratios)) if ratios else "—"))
        except BenchAbort:
            raise
        except Exception as e:  # noqa: BLE001 - a broken row is a result, the run goes on
            msg = "%s: %s" % (e.__class__.__name__, str(e).splitlines()[0] if str(e) else "")
            log("%s failed: %s" % (label, msg))
            for r in results:
                r.error = msg[:160]
    finally:
        for _, t in sides:
            try:
                call_with_timeout(lambda: rmtree(t.dir), 300, "rm -rf " + t.dir)
            except BenchAbort:
                raise
            except Exception as e:  # noqa: BLE001
                log("cleanup of %s failed: %r" % (t.dir, e))
    for r in results:
        r.load[1] = loadavg()
    return results, params


# ---- report ---------------------------------------------------------------

def cell(xs):
    if not xs:
        return "—"
    if len(xs) == 1:
        return fmt(xs[0])
    return "%s [%s–%s]" % (fmt(median(xs)), fmt(min(xs)), fmt(max(xs)))


def ratio_cells(rs):
    if not rs:
        return "—", "—"
    q1, q3 = quartiles(rs)
    return ("%.2f×" % median(rs),
            "%.2f–%.2f (IQR %.2f–%.2f)" % (min(rs), max(rs), q1, q3))


def table(results):
    out = []
    group = None
    for res, params in results:
        g = res.rd.group
        if g != group:
            group = g
            if out:
                out.append("")
            out.append("### %s" % g + ((" — " + GROUPS[g]) if GROUPS.get(g) else ""))
            out.append("")
            out.append("| row | peer | sbxfs median [min–max] | peer median [min–max] "
                       "| ratio (median of pairs) | ratio spread: min–max (IQR) | verdict |")
            out.append("|---|---|---|---|---|---|---|")
        name = "%s (%s)" % (res.title(params), res.m.unit)
        if res.error:
            cells = [name, res.peer or "—", "error: " + res.error, "", "", "", "error"]
        else:
            rm, rs = ratio_cells(res.ratios)
            cells = [name, (res.peer or "—") if res.other else "—", cell(res.sbx),
                     cell(res.other), rm, rs, res.verdict()]
        out.append("| %s |" % " | ".join(c.replace("|", "\\|") for c in cells))
    return "\n".join(out)


def header(ctx, cmd, rounds, warmup, used_fixtures):
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    commit = "?"
    try:
        commit = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                                capture_output=True, timeout=5).stdout.decode().strip() or "?"
    except Exception:  # noqa: BLE001
        pass
    meta = {
        "started": STARTED.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "kernel": platform.release(),
        "cpu": "%s × %d" % (cpu, os.cpu_count() or 0),
        "command": cmd,
        "sbxfs": "%s (%s, commit %s)" % (ctx.sbxfs_bin, tool_version([ctx.sbxfs_bin, "--version"]),
                                         commit),
        "scratch": "%s (on %s)" % (ctx.workdir, fs_type(ctx.workdir)),
        "loadavg_start": ctx.load0, "loadavg_end": loadavg(),
        "foreign_sbxfs_mounts": ctx.foreign_mounts,
        "mode": "quick" if ctx.quick else "full",
        "rounds": rounds, "warmup": warmup,
        "fixtures": {n: FIXTURES[n].describe for n in used_fixtures},
    }
    lines = [
        "# sbxfs benchmark",
        "",
        "- started %s, finished %s; kernel %s; CPU %s" % (meta["started"], meta["date"],
                                                          meta["kernel"], meta["cpu"]),
        "- command: `%s`" % cmd,
        "- sbxfs: `%s`" % meta["sbxfs"],
        "- scratch: %s" % meta["scratch"],
        "- load average at start %s, at end %s; other fuse.sbxfs mounts on the host at start: %d"
        % (meta["loadavg_start"], meta["loadavg_end"], meta["foreign_sbxfs_mounts"]),
        "- mode: %s; %d measured rounds per pair row (fewer where a row says so) after %d "
        "warm-up round(s); round j runs sbxfs first when j is even, the peer first when odd "
        "(A B, B A, ...)" % (meta["mode"], rounds, warmup),
        "- ratio: sbxfs's speed as a multiple of the peer's, per round (throughput sbxfs/peer, "
        "time peer/sbxfs): above 1 sbxfs is faster. The ratio column is the median of the "
        "per-round ratios, not the ratio of the medians.",
        "- verdict: \"faster/slower in every pair\" when all rounds agree; \"k/n pairs\" when "
        "at least 3/4 agree; \"mixed\" otherwise; \"parity\" when every pair is within ±10 %.",
    ]
    for n in used_fixtures:
        lines.append("- %s: %s" % (n, FIXTURES[n].describe))
    return "\n".join(lines) + "\n", meta


def _sig(x):
    """floats to 5 significant digits: more is noise here, and it keeps the file small"""
    if isinstance(x, float):
        return float("%.5g" % x)
    if isinstance(x, dict):
        return {k: _sig(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_sig(v) for v in x]
    return x


def write_json(doc, f):
    """The results document, one row per line (small, and diffs read row by row)."""
    doc = _sig(doc)
    f.write("{\n")
    keys = list(doc)
    for i, k in enumerate(keys):
        end = ",\n" if i < len(keys) - 1 else "\n"
        if k == "rows":
            f.write(' "rows": [\n')
            for j, r in enumerate(doc[k]):
                f.write("  " + json.dumps(r, ensure_ascii=False) + (",\n" if j < len(doc[k]) - 1 else "\n"))
            f.write(" ]" + end)
        else:
            f.write(" %s: %s%s" % (json.dumps(k), json.dumps(doc[k], ensure_ascii=False), end))
    f.write("}\n")


# ==========================================================================
# main
# ==========================================================================

def load_row_modules():
    for path in sorted(glob.glob(os.path.join(HERE, "rows_*.py"))):
        mod = os.path.splitext(os.path.basename(path))[0]
        if HERE not in sys.path:
            sys.path.insert(0, HERE)
        importlib.import_module(mod)


def select_rows(only):
    if not only:
        return list(ROWS)
    want = []
    for tok in only:
        if tok in PLANNED_GROUPS and tok not in GROUPS:
            raise SystemExit("bench.py: group %r is planned, no rows yet: %s (see bench/README.md, "
                             "\"Planned groups\")" % (tok, PLANNED_GROUPS[tok]))
        hits = [r for r in ROWS if r.group == tok or r.id == tok]
        if not hits:
            raise SystemExit("bench.py: unknown group or row %r (groups: %s; rows: %s)"
                             % (tok, ", ".join(GROUPS), ", ".join(r.id for r in ROWS)))
        want += [r for r in hits if r not in want]
    return [r for r in ROWS if r in want]


def list_rows():
    print("groups and rows (run: bench/run.sh --only GROUP[,GROUP.ROW...]):")
    for g in GROUPS:
        print("  %s%s" % (g, (" - " + GROUPS[g]) if GROUPS[g] else ""))
        for r in ROWS:
            if r.group == g:
                print("    %-34s peers: %-16s metrics: %s" % (
                    r.id, ",".join(r.peers) or "(solo)", ", ".join(m.key for m in r.metrics)))
    print("fixtures:")
    for n, f in FIXTURES.items():
        print("  %-8s %s" % (n, f.describe))
    print("planned groups (extension points, no rows yet):")
    for g, d in PLANNED_GROUPS.items():
        if g not in GROUPS:
            print("  %-13s %s" % (g, d))


def main():
    ap = argparse.ArgumentParser(description="sbxfs benchmark: sbxfs against named peers in "
                                             "interleaved rounds (see bench/README.md)")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes, %d rounds, no warm-up: a smoke run (< 2 minutes)" % QUICK_ROUNDS)
    ap.add_argument("--only", default="", help="comma-separated groups or GROUP.ROW ids (--list)")
    ap.add_argument("--rounds", "--runs", dest="rounds", type=int, default=0,
                    help="measured rounds (pairs) per row (default %d, --quick %d)"
                    % (DEFAULT_ROUNDS, QUICK_ROUNDS))
    ap.add_argument("--warmup", type=int, default=-1,
                    help="unrecorded warm-up rounds per row (default %d, --quick %d)"
                    % (DEFAULT_WARMUP, QUICK_WARMUP))
    ap.add_argument("--list", action="store_true", help="list groups, rows, fixtures and exit")
    ap.add_argument("--sbxfs", default=os.environ.get("SBXFS_BIN", os.path.join(REPO, "sbxfs")))
    ap.add_argument("--workdir", default=None, help="scratch dir (default: new dir under /var/tmp)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "latest.md"),
                    help="markdown output; the JSON goes beside it (.json)")
    a = ap.parse_args()
    load_row_modules()
    if a.list:
        list_rows()
        return 0
    if os.geteuid() != 0:
        sys.exit("bench.py: must run as root (drop_caches, bubblewrap uids, mounts)")
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    rows = select_rows(only)
    if not os.access(a.sbxfs, os.X_OK):
        sys.exit("bench.py: %s not found or not executable (build with `make`, or set SBXFS_BIN)"
                 % a.sbxfs)
    rounds = a.rounds or (QUICK_ROUNDS if a.quick else DEFAULT_ROUNDS)
    warmup = a.warmup if a.warmup >= 0 else (QUICK_WARMUP if a.quick else DEFAULT_WARMUP)
    if rounds < 1:
        sys.exit("bench.py: --rounds must be >= 1")
    own_workdir = a.workdir is None
    if own_workdir:
        a.workdir = tempfile.mkdtemp(prefix="sbxfs-bench.", dir="/var/tmp")
    os.makedirs(a.workdir, exist_ok=True)

    def on_term(signum, frame):
        raise BenchAbort("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    ctx = Ctx(a)
    ctx.load0 = loadavg()
    ctx.foreign_mounts = count_fstype("fuse.sbxfs")
    cmd = os.environ.get("SBXFS_BENCH_CMD") or " ".join(
        shlex.quote(x) for x in [os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])
    results = []
    used = ["sbxfs"]
    aborted = None
    try:
        for rd in rows:
            r_rounds = rd.rounds if (rd.rounds and not a.rounds) else rounds
            if rd.rounds and not a.rounds and a.quick:
                r_rounds = min(rd.rounds, rounds)
            r_warm = warmup if rd.warmup is None else min(rd.warmup, warmup)
            for peer in (rd.peers or (None,)):
                if peer and peer not in used:
                    used.append(peer)
                log("row %s%s: %d rounds + %d warm-up" % (rd.id, (" vs " + peer) if peer else "",
                                                         r_rounds, r_warm))
                res, params = run_pair(ctx, rd, peer, r_rounds, r_warm)
                results += [(r, params) for r in res]
    except (BenchAbort, KeyboardInterrupt) as e:
        aborted = "%s: %s" % (e.__class__.__name__, e)
        log("aborted: %s" % aborted)
        ctx.note("run aborted: %s" % aborted)
    finally:
        try:
            ctx.close()
        except Exception as e:  # noqa: BLE001
            ctx.note("fixture teardown failed: %r" % e)
        if own_workdir:
            rmtree(a.workdir)
    for r, params in results:
        oe = r.order_effect()
        if oe and oe["BA"] > 0 and not 0.8 <= oe["AB"] / oe["BA"] <= 1.25:
            ctx.note("order-sensitive: %s vs %s, \"%s\": median ratio %.2f when sbxfs ran first, "
                     "%.2f when the peer did (balanced rounds average this out)"
                     % (r.rd.id, r.peer, r.title(params), oe["AB"], oe["BA"]))
    total = time.monotonic() - T0
    head, meta = header(ctx, cmd, rounds, warmup, [u for u in used if u in FIXTURES])
    text = head + "\n" + table(results) + "\n"
    if ctx.notes:
        text += "\nNotes:\n\n" + "\n".join("- " + n for n in ctx.notes) + "\n"
    text += "\nTotal bench time: %.0f s\n" % total
    print(text)
    out = a.out
    if aborted:   # never clobber the last complete results with an aborted run
        out = os.path.splitext(out)[0] + ".aborted.md"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    meta["total_seconds"] = round(total, 1)
    meta["aborted"] = aborted
    doc = {"meta": meta, "rows": [r.to_json(p) for r, p in results], "notes": ctx.notes,
           "planned_groups": {g: d for g, d in PLANNED_GROUPS.items() if g not in GROUPS}}
    jout = os.path.splitext(out)[0] + ".json"
    with open(jout, "w") as f:
        write_json(doc, f)
    log("wrote %s and %s" % (out, jout))
    return 1 if aborted else 0


if __name__ == "__main__":
    sys.exit(main())
