# SPDX-License-Identifier: MIT
"""
rows_sandbox.py - sandbox lifecycle rows of the sbxfs benchmark, and their peer: the
bubblewrap sandbox that the local provider starts, run directly ("bwrap" fixture).

Groups: acquire (mkdir of a new sandbox vs bwrap to ready; warm reclaim and release,
which have no peer), job (a `true` job through jobs/ vs a one-shot bwrap), many (1000
sandboxes on a daemon of their own: acquire, memory, teardown at unmount).

peer_bwrap_argv() mirrors local_build_argv() in providers/local.c: keep them in sync.
"""

import fcntl
import json
import os
import select
import signal
import statistics
import time

from bench import (Metric, Target, call_with_timeout, count_procs_mentioning, describe_group,
                   fixture, row, vmrss_kib)

PEER_UID = 200999          # uid of the directly started bubblewrap peer

describe_group("acquire", "mkdir of a sandbox directory (acquire) and rmdir (release)")
describe_group("job", "a job's round trip through jobs/: mkdir, write cmd, read exit")
describe_group("many", "1000 sandboxes on one daemon of their own")


# --------------------------------------------------------------------------
# The peer: the bubblewrap sandbox the local provider starts, run directly.
# --------------------------------------------------------------------------

def _av_dirs(argv, path):
    """--perms 0755 --dir for every ancestor of a mount point (as providers/local.c does)."""
    parts = path.strip("/").split("/")
    for k in range(1, len(parts)):
        argv += ["--perms", "0755", "--dir", "/" + "/".join(parts[:k])]


def peer_bwrap_argv(peer_dir, inner, info_fd=None, uid=PEER_UID, token="0123456789abcdef"):
    """argv of the bubblewrap sandbox that sbxfs's local provider starts (local_build_argv()
    in providers/local.c, no extra mounts, skills at /mnt/skills): the same namespaces, a
    network namespace of its own included (every mode has one: loopback only until the
    daemon gives it more; before 2026-12-02 the peer had none, and a netns costs time).
    The daemon's pid 1 is its own helper (/run/sbxfs-init: drops to the uid, no caps,
    no_new_privs, "ready" on fd 4, reaps orphans); the peer does the same with
    setpriv + sh, the standard tools, so the bwrap flags are identical and only pid 1 differs.

    peer_dir:  host dir holding workspace/ uploads/ outputs/ skills/ (see make_peer_dir)
    inner:     the shell command run inside (as the unprivileged uid)
    info_fd:   pass --info-fd N (bwrap writes {"child-pid": ...} there)
    """
    argv = ["bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--unshare-net", "--hostname", "sbx-" + token,
            "--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    argv += ["--ro-bind", "/etc", "/etc",
             "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    for how, sub, dst in (("--bind", "workspace", "/mnt/user-data/workspace"),
                          ("--bind", "uploads", "/mnt/user-data/uploads"),
                          ("--bind", "outputs", "/mnt/user-data/outputs"),
                          ("--ro-bind", "skills", "/mnt/skills")):
        _av_dirs(argv, dst)
        argv += [how, os.path.join(peer_dir, sub), dst]
    argv += ["--perms", "0755", "--tmpfs", "/run", "--as-pid-1"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    argv += ["--", "/usr/bin/setpriv", "--reuid=%d" % uid, "--regid=%d" % uid,
             "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
             "/bin/sh", "-c", inner]
    return argv


# what the persistent peer runs (the daemon's init command)
PEER_INIT = "echo ready >&4; exec 4>&-; exec sleep 2147483647"


def make_peer_dir(path, uid=PEER_UID):
    for sub in ("workspace", "uploads", "outputs", "skills"):
        os.makedirs(os.path.join(path, sub), exist_ok=True)
        os.chown(os.path.join(path, sub), uid, uid)


def _high_fd(fd):
    """Move fd to >= 10 (close-on-exec) so dup2 onto 3/4 in the child is never a no-op."""
    nfd = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return nfd


class PeerSandbox:
    """A persistent bubblewrap sandbox started directly: ready when 'ready' arrives on fd 4."""

    def __init__(self, peer_dir, uid=PEER_UID):
        info_r, info_w = [_high_fd(f) for f in os.pipe()]
        ready_r, ready_w = [_high_fd(f) for f in os.pipe()]
        argv = peer_bwrap_argv(peer_dir, PEER_INIT, info_fd=3, uid=uid)
        t = time.perf_counter()
        self.pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, info_w, 3), (os.POSIX_SPAWN_DUP2, ready_w, 4)])
        os.close(info_w)
        os.close(ready_w)
        buf = b""
        while b"ready" not in buf:
            r, _, _ = select.select([ready_r], [], [], 30)
            if not r:
                break
            chunk = os.read(ready_r, 64)
            if not chunk:
                break
            buf += chunk
        self.ready_s = time.perf_counter() - t
        os.close(ready_r)
        self.child_pid = None
        info = b""
        try:
            while True:
                r, _, _ = select.select([info_r], [], [], 5)
                if not r:
                    break
                chunk = os.read(info_r, 4096)
                if not chunk:
                    break
                info += chunk
                try:
                    self.child_pid = int(json.loads(info)["child-pid"])
                    break
                except ValueError:
                    continue
        finally:
            os.close(info_r)
        if b"ready" not in buf:
            self.kill()
            raise RuntimeError("peer bwrap sandbox did not become ready: %r" % buf)

    def kill(self):
        # the sandbox's init is pid 1 of its namespace: SIGKILL from outside ends it all
        for p in (self.child_pid, self.pid):
            if p:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def peer_oneshot(peer_dir, cmd="true"):
    """Run cmd once in a fresh bubblewrap sandbox; returns seconds."""
    argv = peer_bwrap_argv(peer_dir, cmd)
    t = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, os.environ)
    _, st = os.waitpid(pid, 0)
    dt = time.perf_counter() - t
    if os.waitstatus_to_exitcode(st) != 0:
        raise RuntimeError("peer bwrap %r exited %d" % (cmd, os.waitstatus_to_exitcode(st)))
    return dt


@fixture("bwrap", "bubblewrap started directly with the local provider's flags "
                  "(peer_bwrap_argv() in bench/rows_sandbox.py; pid 1 is setpriv + sh "
                  "instead of sbxfs-init), on a peer dir under the scratch dir")
def fixture_bwrap(ctx):
    d = ctx.scratch("peer")
    make_peer_dir(d)
    yield Target("bwrap", os.path.join(d, "workspace"), peer_dir=d)


# --------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------

def _ms_median(xs):
    return statistics.median(xs) * 1e3


@row("acquire", name="mkdir", peer="bwrap", params={"k": (5, 3), "warm_k": (20, 5)},
     metrics=[Metric("cold", "ms", "mkdir (acquire) of a new sandbox, median of {k} — "
                                   "peer: bwrap to ready"),
              Metric("warm", "ms", "mkdir (acquire) warm reclaim, median of {warm_k}"),
              Metric("release", "ms", "rmdir (release to the warm pool), median of {warm_k}"),
              Metric("cold_open", "ms", "mkdir (acquire) of a new sandbox in network mode open "
                                        "(the default: a veth pair into the gateway each), median of {k}"),
              Metric("pasta_pss", "MiB", "memory (Pss) of the gateway's pasta, once for every open sandbox")])
def acquire(ctx, t):
    """sbxfs: k mkdirs of new thread directories (each a cold start), then warm_k
    rmdir+mkdir cycles of one thread; bwrap: k persistent peer sandboxes started to ready
    and killed. Each value is the median of the round's samples."""
    if t.kind == "bwrap":
        xs = []
        for _ in range(ctx.p.k):
            p = PeerSandbox(t.info["peer_dir"])
            xs.append(p.ready_s)
            p.kill()
        return {"cold": _ms_median(xs)}
    udir = os.path.join(t.info["mnt"], t.info["user"])
    tag = "%x" % (time.monotonic_ns() & 0xffffffff)
    cold = []
    for i in range(ctx.p.k):
        d = os.path.join(udir, "c%s-%d" % (tag, i))
        with ctx.timer() as tm:
            _acquire(d)
        cold.append(tm.s)
        os.rmdir(d)
    d = os.path.join(udir, "w%s" % tag)
    _acquire(d)
    warm, rel = [], []
    for _ in range(ctx.p.warm_k):
        with ctx.timer() as tr:
            os.rmdir(d)
        with ctx.timer() as tm:
            _acquire(d)
        rel.append(tr.s)
        warm.append(tm.s)
    os.rmdir(d)
    cold_open, pss = _acquire_open(ctx)
    return {"cold": _ms_median(cold), "warm": _ms_median(warm), "release": _ms_median(rel),
            "cold_open": _ms_median(cold_open), "pasta_pss": pss}


def _acquire(d):
    """mkdir of a thread to a ready sandbox: under `acquire: async` (the
    default) mkdir answers once the create started and `ready` returns once
    it is ready, so the time of both is the one bwrap's row compares with."""
    os.mkdir(d)
    with open(os.path.join(d, "ready"), "rb") as f:
        f.read()


def _pss_mib(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _acquire_open(ctx):
    """k cold mkdirs on a daemon of its own in network mode open (one gateway, one
    pasta for all); returns their times and the Pss of the gateway's pasta."""
    name = "open-%x" % (time.monotonic_ns() & 0xffffffff)
    times, pss = [], []
    with ctx.daemon(name, replicas=64, extra_conf="network:\n  mode: open\n") as d:
        udir = os.path.join(d.mnt, "bench")
        os.mkdir(udir)
        for i in range(ctx.p.k):
            p = os.path.join(udir, "o%d" % i)
            with ctx.timer() as tm:
                call_with_timeout(lambda: _acquire(p), 60, "mkdir " + p)
            times.append(tm.s)
        needle = (d.state + "/").encode()
        found = {}
        for pid in (int(x) for x in os.listdir("/proc") if x.isdigit()):
            try:
                with open("/proc/%d/comm" % pid) as f:
                    comm = f.read().strip()
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    cmdline = f.read()
                with open("/proc/%d/stat" % pid) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if comm.startswith("pas") and needle in cmdline:
                found[pid] = ppid
        # a short-lived child pasta clones to work in the namespace has its
        # parent's name and command line: count each pasta once
        for pid, ppid in found.items():
            if ppid not in found:
                v = _pss_mib(pid)
                if v is not None:
                    pss.append(v)
    if len(pss) != 1:
        raise RuntimeError("expected the gateway's one pasta process for %d open sandboxes, found %d"
                           % (ctx.p.k, len(pss)))
    return times, statistics.median(pss)


def _spares_ready(mnt):
    with open(os.path.join(mnt, ".status")) as f:
        st = json.load(f)["spares"]
    return st["ready"] if st["creating"] == 0 else -1


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


@row("acquire", name="spare", peers=(), params={"n": (40, 8)}, rounds=3, warmup=0, timeout=900,
     metrics=[Metric("spare_p50", "ms", "mkdir of a brand-new thread to ready, claiming a spare "
                                        "(pool.prewarm 2), p50 of {n}"),
              Metric("spare_p99", "ms", "the same, p99"),
              Metric("cold_p50", "ms", "mkdir of a brand-new thread to ready without spares "
                                       "(prewarm 0), p50 of {n}"),
              Metric("cold_p99", "ms", "the same, p99"),
              Metric("ratio_p50", "x", "cold p50 / spare p50", higher=True)])
def acquire_spare(ctx, t):
    """Two daemons of their own (network mode isolated, like the other acquire rows),
    one with pool.prewarm 2 and one with 0; n new threads on each, interleaved one
    by one (spare, cold, spare, ...), each timed from mkdir to its `ready` read.
    Before each timed mkdir on the spare daemon, untimed, its spares are back to 2
    (the refill runs in the background after a claim); every thread is released
    after its mkdir. A mkdir that did not claim (from_spare false) fails the row."""
    tag = "%x" % (time.monotonic_ns() & 0xffffffff)
    spare, cold = [], []
    with ctx.daemon("spare-" + tag, replicas=4 * ctx.p.n, extra_conf="pool:\n  prewarm: 2\n") as ds, \
            ctx.daemon("cold-" + tag, replicas=4 * ctx.p.n) as dc:
        for d in (ds, dc):
            os.mkdir(os.path.join(d.mnt, "bench"))
        for i in range(ctx.p.n):
            deadline = time.monotonic() + 30
            while _spares_ready(ds.mnt) != 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("spares not refilled within 30 s: %s" % ds.log_tail())
                time.sleep(0.005)
            for d, xs in ((ds, spare), (dc, cold)):
                p = os.path.join(d.mnt, "bench", "t%d" % i)
                with ctx.timer() as tm:
                    call_with_timeout(lambda: _acquire(p), 60, "mkdir " + p)
                xs.append(tm.s * 1e3)
                with open(os.path.join(p, "status")) as f:
                    if json.load(f).get("from_spare") is not (d is ds):
                        raise RuntimeError("mkdir %s: from_spare is not %s" % (p, d is ds))
                os.rmdir(p)
    return {"spare_p50": _pct(spare, 0.5), "spare_p99": _pct(spare, 0.99), "cold_p50": _pct(cold, 0.5),
            "cold_p99": _pct(cold, 0.99), "ratio_p50": _pct(cold, 0.5) / _pct(spare, 0.5)}


def _job_roundtrip(jobs, name):
    jd = os.path.join(jobs, name)
    t = time.perf_counter()
    os.mkdir(jd)
    fd = os.open(os.path.join(jd, "cmd"), os.O_WRONLY)
    try:
        os.write(fd, b"true")
    finally:
        os.close(fd)
    fd = os.open(os.path.join(jd, "exit"), os.O_RDONLY)
    out = b""
    try:
        while True:
            c = os.read(fd, 64)
            if not c:
                break
            out += c
    finally:
        os.close(fd)
    dt = time.perf_counter() - t
    if out.strip() != b"0":
        raise RuntimeError("job %s: exit file said %r" % (name, out))
    os.rmdir(jd)
    return dt


@row("job", name="true", peer="bwrap", unit="ms", params={"k": (10, 3)},
     title="job round trip `true` (mkdir, write cmd, read exit), median of {k} — "
           "peer: one-shot bwrap `true`")
def job_true(ctx, t):
    """sbxfs: k jobs `true` in the fixture's sandbox; bwrap: k one-shot sandboxes running
    `true`. The value is the median of the round's samples."""
    if t.kind == "bwrap":
        return _ms_median([peer_oneshot(t.info["peer_dir"], "true") for _ in range(ctx.p.k)])
    jobs = os.path.join(t.info["sandbox"], "jobs")
    if not os.path.isdir(jobs):
        raise RuntimeError("n/a: this sbxfs has no jobs/")
    tag = "%x" % (time.monotonic_ns() & 0xffffffff)
    return _ms_median([_job_roundtrip(jobs, "j%s-%d" % (tag, i)) for i in range(ctx.p.k)])


@row("many", name="sandboxes", peer="bwrap", params={"n": (1000, 20)}, rounds=4, warmup=0, timeout=900,
     metrics=[Metric("acquire", "s", "acquire {n} sandboxes, sequential mkdir, total — "
                                     "peer: {n} persistent bwrap to ready"),
              Metric("teardown", "s", "unmount with {n} active, until daemon exit — "
                                      "peer: SIGKILL {n} bwrap + reap"),
              Metric("rss", "MiB", "daemon VmRSS with {n} active"),
              Metric("rss_per_sandbox", "KiB", "daemon VmRSS growth per active sandbox")])
def many(ctx, t):
    """sbxfs: a daemon of its own (replicas 2n); mkdir n sandboxes, read its VmRSS, unmount and
    wait for it to exit; no process naming its state_dir may be left. bwrap: start n
    persistent peer sandboxes, then SIGKILL and reap them all."""
    n = ctx.p.n
    if t.kind == "bwrap":
        peers = []
        try:
            with ctx.timer() as ta:
                for _ in range(n):
                    peers.append(PeerSandbox(t.info["peer_dir"]))
        finally:
            with ctx.timer() as tk:
                for p in peers:
                    p.kill()
        return {"acquire": ta.s, "teardown": tk.s}
    name = "many-%x" % (time.monotonic_ns() & 0xffffffff)
    with ctx.daemon(name, replicas=max(2000, 2 * n)) as d:
        rss0 = vmrss_kib(d.pid)
        os.mkdir(os.path.join(d.mnt, "bench"))
        with ctx.timer() as ta:
            for i in range(n):
                p = os.path.join(d.mnt, "bench", "m%04d" % i)
                call_with_timeout(lambda: _acquire(p), 60, "mkdir " + p)
        rss1 = vmrss_kib(d.pid)
        with open(os.path.join(d.mnt, ".status"), "rb") as f:
            st = json.loads(f.read())
        if st.get("active") != n:
            raise RuntimeError(".status says active=%s after %d mkdirs" % (st.get("active"), n))
        td = d.stop(timeout=300)
        if td is None:
            raise RuntimeError("daemon did not exit after unmount")
        left = count_procs_mentioning(d.state + "/")
        if left:
            raise RuntimeError("%d processes naming the state_dir left after unmount" % left)
    ctx.note("many: daemon VmRSS %.1f MiB at mount" % ((rss0 or 0) / 1024))
    return {"acquire": ta.s, "teardown": td, "rss": rss1 / 1024,
            "rss_per_sandbox": (rss1 - (rss0 or 0)) / n}
