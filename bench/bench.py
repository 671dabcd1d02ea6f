#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""
bench.py - the sbxfs benchmark driver (`make bench` -> bench/run.sh -> here).

It mounts a real sbxfs (local provider) on a scratch directory under /var/tmp
and measures, in one run and side by side:

  * file I/O through /sbx/<user>/<thread>/workspace ("sbxfs") against the same
    work done directly on the backing directory under state_dir ("native") and
    through a bindfs mount of that backing directory ("bindfs", a plain
    pass-through FUSE filesystem: the floor for any FUSE design);
  * sandbox lifecycle (mkdir = acquire, jobs/ round trip, 1000 sandboxes)
    against starting the same bubblewrap sandbox directly (peer_bwrap_argv()).

Every figure is the median of N runs with [min-max]; latency rows give p50 and
p99 over their samples.  Ratios read "sbxfs speed as a multiple of the peer":
throughput sbxfs/peer, latency peer/sbxfs, so 1.00x is parity, below 1 slower.

Python stdlib only; run as root with Debian's /usr/bin/python3.
"""

import argparse
import io
import json
import os
import platform
import random
import select
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from datetime import datetime, timezone

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
GiB = 1 << 30
SIDES = ("sbxfs", "native", "bindfs")
ROWS = ("seqwrite", "seqread", "randread", "smallfiles", "tree", "acquire", "job", "many")
USER = "bench"
THREAD = "t1"
PEER_UID = 200999          # uid of the directly started bubblewrap peer
NEEDLE = "SBXFS_NEEDLE_7f3a"
# the bindfs peer: plain pass-through FUSE with its default options (Debian 12: bindfs 1.14
# on libfuse 2, single-threaded, no big_writes so writes arrive 4 KiB at a time)
BINDFS_ARGS = ["--no-allow-other"]

T0 = time.monotonic()


def log(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T0, msg), file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# The peer: the bubblewrap sandbox the local provider starts, run directly.
# Keep this in sync with providers/local.c (one place on purpose).
# --------------------------------------------------------------------------

def _av_dirs(argv, path):
    """--perms 0755 --dir for every ancestor of a mount point (as providers/local.c does)."""
    parts = path.strip("/").split("/")
    for k in range(1, len(parts)):
        argv += ["--perms", "0755", "--dir", "/" + "/".join(parts[:k])]


def peer_bwrap_argv(peer_dir, inner, info_fd=None, uid=PEER_UID, token="0123456789abcdef"):
    """argv of the bubblewrap sandbox that sbxfs's local provider starts (local_build_argv()
    in providers/local.c, network mode open, no extra mounts, skills at /mnt/skills).
    The daemon's pid 1 is its own helper (/run/sbxfs-init: drops to the uid, no caps,
    no_new_privs, "ready" on fd 4, reaps orphans); the peer does the same with
    setpriv + sh, the standard tools, so the bwrap flags are identical and only pid 1 differs.

    peer_dir:  host dir holding workspace/ uploads/ outputs/ skills/ (see make_peer_dir)
    inner:     the shell command run inside (as the unprivileged uid)
    info_fd:   pass --info-fd N (bwrap writes {"child-pid": ...} there)
    """
    argv = ["bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sbx-" + token,
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
    import fcntl
    nfd = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return nfd


class PeerSandbox:
    """A persistent bubblewrap sandbox started directly: ready when 'ready' arrives on fd 4."""

    def __init__(self, workspace, uid=PEER_UID):
        info_r, info_w = [_high_fd(f) for f in os.pipe()]
        ready_r, ready_w = [_high_fd(f) for f in os.pipe()]
        argv = peer_bwrap_argv(workspace, PEER_INIT, info_fd=3, uid=uid)
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


def peer_oneshot(workspace, cmd="true"):
    """Run cmd once in a fresh bubblewrap sandbox; returns seconds."""
    argv = peer_bwrap_argv(workspace, cmd)
    t = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, os.environ)
    _, st = os.waitpid(pid, 0)
    dt = time.perf_counter() - t
    if os.waitstatus_to_exitcode(st) != 0:
        raise RuntimeError("peer bwrap %r exited %d" % (cmd, os.waitstatus_to_exitcode(st)))
    return dt


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

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


def call_with_timeout(fn, secs, what):
    """Run fn() in a thread; raise TimeoutError if it has not returned after secs.
    (A FUSE call that hangs stays stuck in its thread; cleanup unmounts/kills later.)"""
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
        raise TimeoutError("%s: no answer after %ss" % (what, secs))
    if "e" in res:
        raise res["e"]
    return res.get("v")


def pct(samples, p):
    s = sorted(samples)
    if not s:
        return None
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))  # nearest rank
    return s[k]


def median(samples):
    s = sorted(samples)
    n = len(s)
    if n == 0:
        return None
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def fmt(v):
    if v is None:
        return "?"
    a = abs(v)
    if a >= 1000:
        return "%.0f" % v
    if a >= 100:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    if a >= 1:
        return "%.2f" % v
    return "%.3f" % v


# --------------------------------------------------------------------------
# mounts
# --------------------------------------------------------------------------

class Daemon:
    """One sbxfs daemon in the foreground, its mountpoint and state_dir."""

    def __init__(self, binary, workdir, name, replicas, extra_conf=""):
        self.binary = binary
        self.base = os.path.join(workdir, name)
        self.state = os.path.join(self.base, "state")
        self.mnt = os.path.join(self.base, "mnt")
        self.conf = os.path.join(self.base, "mount.conf")
        self.logpath = os.path.join(self.base, "daemon.log")
        self.pidfile = os.path.join(workdir, "daemon-%s.pid" % name)
        os.makedirs(self.state, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        with open(self.conf, "w") as f:
            f.write("use: local\nstate_dir: %s\nreplicas: %d\nidle_timeout: 0\n%s"
                    % (self.state, replicas, extra_conf))
        self.proc = None

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
        return [l for l in lines if any((" %s " % w) in l.lower() or l.lower().startswith("sbxfs: %s" % w)
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


# --------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------

class Row:
    """One table row.  cells[side] = list of samples (or an error string)."""

    def __init__(self, name, unit, higher_better, mode="median", peer_label=None,
                 sides=SIDES):
        self.name, self.unit, self.hib, self.mode = name, unit, higher_better, mode
        self.peer_label = peer_label   # e.g. "bwrap" when "native" column holds the bwrap peer
        self.sides = sides
        self.cells = {}
        self.note = ""

    def add(self, side, v):
        c = self.cells.setdefault(side, [])
        if isinstance(c, list):
            c.append(v)

    def fail(self, side, msg):
        self.cells[side] = "error: %s" % msg

    def value(self, side):
        c = self.cells.get(side)
        if not isinstance(c, list) or not c:
            return None
        if self.mode == "p50":
            return pct(c, 50)
        if self.mode == "p99":
            return pct(c, 99)
        if self.mode == "single":
            return c[0]
        return median(c)

    def cell(self, side):
        if side not in self.sides:
            return "—"
        c = self.cells.get(side)
        if c is None:
            return "n/a"
        if isinstance(c, str):
            return c.replace("|", "/")
        if not c:
            return "n/a"
        v = self.value(side)
        if self.mode == "single" or len(c) == 1:
            return fmt(v)
        if self.mode == "p99":
            return "%s (n=%d)" % (fmt(v), len(c))
        return "%s [%s–%s]" % (fmt(v), fmt(min(c)), fmt(max(c)))

    def ratios(self):
        s = self.value("sbxfs")
        out = []
        for side, label in (("native", self.peer_label or "native"), ("bindfs", "bindfs")):
            if side not in self.sides:
                continue
            p = self.value(side)
            if s is None or p is None or s == 0 or p == 0:
                continue
            r = s / p if self.hib else p / s
            out.append(("%.2fx %s" if side == "native" else "%.2fx vs %s") % (r, label))
        return ", ".join(out) if out else "—"


class Bench:
    def __init__(self, args):
        self.a = args
        q = args.quick
        self.seq_bytes = 64 * MiB if q else GiB
        self.rand_file = 32 * MiB if q else 256 * MiB
        self.rand_ops = 2000 if q else 20000
        self.nfiles = 1000 if q else 10000
        self.tree_files = 500 if q else 5000
        self.cold_samples = 5 if q else 30
        self.warm_samples = 20 if q else 100
        self.job_samples = 10 if q else 50
        self.many = 20 if q else 1000
        self.n_big = args.runs or 3
        self.n_small = args.runs or 5
        self.rows = []
        self.notes = []
        self.workdir = args.workdir
        self.daemon = None
        self.bindfs = None
        self.dirs = {}
        self.W = None
        self.backing = None
        self.load0 = loadavg()
        self.foreign_mounts = count_fstype("fuse.sbxfs")

    # ---- setup / teardown -------------------------------------------------
    def setup(self):
        os.makedirs(self.workdir, exist_ok=True)
        if self.a.skip_sbxfs:
            self.backing = os.path.join(self.workdir, "backing")
            os.makedirs(self.backing, exist_ok=True)
        else:
            self.daemon = Daemon(self.a.sbxfs, self.workdir, "main", 64)
            log("starting %s" % self.a.sbxfs)
            self.daemon.start()
            os.makedirs(os.path.join(self.daemon.mnt, USER, THREAD))
            self.W = os.path.join(self.daemon.mnt, USER, THREAD, "workspace")
            self.backing = os.path.join(self.daemon.state, "users", USER, "threads", THREAD,
                                        "user-data", "workspace")
            if not os.path.isdir(self.backing):
                raise RuntimeError("backing dir %s missing after mkdir" % self.backing)
            self.dirs["sbxfs"] = os.path.join(self.W, "sbx-run")
            os.makedirs(self.dirs["sbxfs"], exist_ok=True)
        self.dirs["native"] = os.path.join(self.backing, "native-run")
        os.makedirs(self.dirs["native"], exist_ok=True)
        bm = os.path.join(self.workdir, "bindmnt")
        self.bindfs = Bindfs(self.backing, bm)
        self.dirs["bindfs"] = os.path.join(bm, "bindfs-run")
        os.makedirs(self.dirs["bindfs"], exist_ok=True)
        self.peer_ws = os.path.join(self.workdir, "peer")
        make_peer_dir(self.peer_ws)

    def teardown(self):
        if self.bindfs:
            self.bindfs.stop()
            self.bindfs = None
        if self.daemon:
            errs = self.daemon.log_lines()
            if errs:
                self.notes.append("daemon log (main instance) has %d error/warning lines, first: `%s`"
                                  % (len(errs), errs[0][:200]))
            td = self.daemon.stop()
            left = count_procs_mentioning(self.daemon.state + "/")
            self.notes.append("main daemon: unmount to exit %s; processes naming its state_dir "
                              "left afterwards: %d" % ("%.2f s" % td if td is not None else
                                                       "FAILED (had to be killed)", left))
            self.daemon = None

    def sides(self):
        return [s for s in SIDES if s in self.dirs]

    def loop(self, row_objs, n, fn):
        """run fn(side, i) -> dict(rowname -> value) n times per side, sides interleaved."""
        for i in range(n):
            order = self.sides()
            order = order[i % len(order):] + order[:i % len(order)]
            for side in order:
                if any(isinstance(r.cells.get(side), str) for r in row_objs):
                    continue  # this side already failed
                try:
                    vals = fn(side, i)
                    for r in row_objs:
                        if r.name in vals:
                            r.add(side, vals[r.name])
                except Exception as e:  # noqa: BLE001 - a broken side is a result
                    log("%s on %s failed: %r" % (row_objs[0].name, side, e))
                    for r in row_objs:
                        r.fail(side, "%s" % (e.__class__.__name__ + ": " + str(e))[:90])

    # ---- 1/2 sequential ---------------------------------------------------
    def row_seq(self, do_write, do_read):
        size = self.seq_bytes
        label = "%d MiB" % (size // MiB) if size < GiB else "%d GiB" % (size // GiB)
        buf = random.Random(1).randbytes(MiB)
        rw = Row("seq write %s, 1 MiB writes + fsync (MB/s)" % label, "MB/s", True)
        rc = Row("seq read %s cold (MB/s)" % label, "MB/s", True)
        rh = Row("seq read %s cached (MB/s)" % label, "MB/s", True)

        def write_file(path):
            t = time.perf_counter()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                for _ in range(size // MiB):
                    n = os.write(fd, buf)
                    if n != MiB:
                        raise IOError("short write %d" % n)
                os.fsync(fd)
            finally:
                os.close(fd)
            return time.perf_counter() - t

        rbuf = bytearray(MiB)
        mv = memoryview(rbuf)

        def read_file(path):
            t = time.perf_counter()
            total = 0
            with open(path, "rb", buffering=0) as f:
                while True:
                    n = f.readinto(mv)
                    if not n:
                        break
                    total += n
            dt = time.perf_counter() - t
            if total != size:
                raise IOError("read %d of %d bytes" % (total, size))
            return dt

        def one(side, i):
            path = os.path.join(self.dirs[side], "seq.bin")
            out = {}
            if do_write or not os.path.exists(path):
                if os.path.exists(path):
                    os.unlink(path)
                drop_caches()
                dt = write_file(path)
                out[rw.name] = size / dt / 1e6
            if do_read:
                drop_caches()
                out[rc.name] = size / read_file(path) / 1e6
                read_file(path)
                out[rh.name] = size / read_file(path) / 1e6
            return out

        rows = ([rw] if do_write else []) + ([rc, rh] if do_read else [])
        self.loop(rows, self.n_big, one)
        for side in self.sides():
            p = os.path.join(self.dirs[side], "seq.bin")
            if os.path.exists(p):
                os.unlink(p)
        self.rows += rows

    # ---- 3 random reads ---------------------------------------------------
    def row_rand(self):
        size, nops = self.rand_file, self.rand_ops
        rh = Row("4 KiB random pread, %d MiB file, cached (ops/s)" % (size // MiB), "ops/s", True)
        rc = Row("4 KiB random pread, %d MiB file, after drop_caches (ops/s)" % (size // MiB),
                 "ops/s", True)
        buf = random.Random(2).randbytes(MiB)
        offs = [o * 4096 for o in random.Random(3).choices(range(size // 4096), k=nops)]
        rbuf = bytearray(4096)

        def prepare(path):
            if os.path.exists(path) and os.path.getsize(path) == size:
                return
            with open(path, "wb") as f:
                for _ in range(size // MiB):
                    f.write(buf)

        def run(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                t = time.perf_counter()
                for o in offs:
                    if os.preadv(fd, [rbuf], o) != 4096:
                        raise IOError("short read at %d" % o)
                return nops / (time.perf_counter() - t)
            finally:
                os.close(fd)

        def one(side, i):
            path = os.path.join(self.dirs[side], "rand.bin")
            prepare(path)
            drop_caches()
            cold = run(path)
            # warm: read the whole file once, then the same random pattern
            with open(path, "rb", buffering=0) as f:
                while f.read(MiB):
                    pass
            warm = run(path)
            return {rc.name: cold, rh.name: warm}

        self.loop([rh, rc], self.n_small, one)
        for side in self.sides():
            p = os.path.join(self.dirs[side], "rand.bin")
            if os.path.exists(p):
                os.unlink(p)
        self.rows += [rh, rc]

    # ---- 4 small files ----------------------------------------------------
    def row_smallfiles(self):
        n = self.nfiles
        rcr = Row("create+write 4 KiB+close, %d files (ops/s)" % n, "ops/s", True)
        rst = Row("stat %d files, right after creating them (ops/s)" % n, "ops/s", True)
        run_ = Row("unlink %d files (ops/s)" % n, "ops/s", True)
        data = b"x" * 4096
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL

        def one(side, i):
            d = os.path.join(self.dirs[side], "small")
            rmtree(d)
            os.mkdir(d)
            names = [os.path.join(d, "f%05d" % k) for k in range(n)]
            t = time.perf_counter()
            for p in names:
                fd = os.open(p, flags, 0o644)
                os.write(fd, data)
                os.close(fd)
            c = n / (time.perf_counter() - t)
            t = time.perf_counter()
            for p in names:
                os.stat(p)
            s = n / (time.perf_counter() - t)
            t = time.perf_counter()
            for p in names:
                os.unlink(p)
            u = n / (time.perf_counter() - t)
            os.rmdir(d)
            return {rcr.name: c, rst.name: s, run_.name: u}

        self.loop([rcr, rst, run_], self.n_big, one)
        self.rows += [rcr, rst, run_]

    # ---- 5 source tree ----------------------------------------------------
    def make_tarball(self):
        path = os.path.join(self.workdir, "tree-%d.tar" % self.tree_files)
        if os.path.exists(path):
            return path
        rnd = random.Random(5)
        words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rnd.randint(2, 10)))
                 for _ in range(2000)]
        lines, clen = [], 0
        while clen < 2 * MiB:
            line = "    " * rnd.randint(0, 3) + " ".join(rnd.choices(words, k=rnd.randint(2, 12))) + "\n"
            lines.append(line)
            clen += len(line)
        corpus = "".join(lines).encode()
        total = 0
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
            made = set()

            def add_dir(d):
                if d in made or d == ".":
                    return
                add_dir(os.path.dirname(d) or ".")
                ti = tarfile.TarInfo(d)
                ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 1700000000
                tf.addfile(ti)
                made.add(d)

            per_leaf = 10
            for k in range(self.tree_files):
                leaf = k // per_leaf
                d = "src/mod%02d/pkg%02d/sub%d" % (leaf // 50, (leaf // 5) % 10, leaf % 5)
                add_dir(d)
                size = int(min(32768, max(64, rnd.lognormvariate(8.2, 1.0))))
                off = rnd.randrange(0, len(corpus) - size)
                body = corpus[off:off + size]
                if k % 50 == 7:
                    body = body[:size // 2] + ("\n# %s marker\n" % NEEDLE).encode() + body[size // 2:]
                ti = tarfile.TarInfo("%s/file%04d.%s" % (d, k, ("c", "h", "py", "txt")[k % 4]))
                ti.size, ti.mode, ti.mtime = len(body), 0o644, 1700000000
                tf.addfile(ti, io.BytesIO(body))
                total += len(body)
        self.tree_meta = (self.tree_files, len(made), total)
        log("tarball %s: %d files, %d dirs, %.1f MB" % (path, self.tree_files, len(made), total / 1e6))
        return path

    def row_tree(self):
        tarball = self.make_tarball()
        nf, nd, tb = self.tree_meta
        rx = Row("untar %d files / %.0f MB, `tar -x` (s)" % (nf, tb / 1e6), "s", False)
        rfc = Row("`find . | wc -l` cold (s)", "s", False)
        rfw = Row("`find . | wc -l` warm (s)", "s", False)
        rgc = Row("`grep -r PATTERN .` cold (s)", "s", False)
        rgw = Row("`grep -r PATTERN .` warm (s)", "s", False)
        rrm = Row("`rm -rf` the tree (s)", "s", False)
        want_find = nf + nd + 1 + 0  # '.', dirs, files (the tar has a top dir 'src' among nd)
        want_grep = len([k for k in range(nf) if k % 50 == 7])

        def timed(argv, cwd):
            t = time.perf_counter()
            r = subprocess.run(argv, cwd=cwd, capture_output=True)
            return time.perf_counter() - t, r

        def one(side, i):
            d = os.path.join(self.dirs[side], "tree")
            rmtree(d)
            os.mkdir(d)
            drop_caches()
            out = {}
            dt, r = timed(["tar", "-xf", tarball, "--no-same-owner", "--no-same-permissions"], d)
            if r.returncode != 0:
                raise RuntimeError("tar: %s" % r.stderr.decode()[:200])
            out[rx.name] = dt
            for nm, cold in ((rfc.name, True), (rfw.name, False)):
                if cold:
                    drop_caches()
                dt, r = timed(["sh", "-c", "find . | wc -l"], d)
                got = int(r.stdout.strip() or 0)
                if got != want_find:
                    raise RuntimeError("find counted %d entries, want %d" % (got, want_find))
                out[nm] = dt
            for nm, cold in ((rgc.name, True), (rgw.name, False)):
                if cold:
                    drop_caches()
                dt, r = timed(["grep", "-rl", NEEDLE, "."], d)
                got = len(r.stdout.splitlines())
                if got != want_grep:
                    raise RuntimeError("grep found %d files, want %d" % (got, want_grep))
                out[nm] = dt
            dt, r = timed(["rm", "-rf", "tree"], self.dirs[side])
            if r.returncode != 0:
                raise RuntimeError("rm -rf: %s" % r.stderr.decode()[:200])
            out[rrm.name] = dt
            return out

        rows = [rx, rfc, rfw, rgc, rgw, rrm]
        self.loop(rows, self.n_big, one)
        self.rows += rows

    # ---- 6 acquire latency ------------------------------------------------
    def row_acquire(self):
        peer_sides = ("sbxfs", "native")
        c50 = Row("mkdir (acquire) cold, p50 (ms) — peer: bwrap to ready", "ms", False, "p50", "bwrap", peer_sides)
        c99 = Row("mkdir (acquire) cold, p99 (ms) — peer: bwrap to ready", "ms", False, "p99", "bwrap", peer_sides)
        w50 = Row("mkdir (acquire) warm reclaim, p50 (ms)", "ms", False, "p50", None, ("sbxfs",))
        w99 = Row("mkdir (acquire) warm reclaim, p99 (ms)", "ms", False, "p99", None, ("sbxfs",))
        r50 = Row("rmdir (release to warm pool), p50 (ms)", "ms", False, "p50", None, ("sbxfs",))
        rows = [c50, c99, w50, w99, r50]
        self.rows += rows
        # peer
        try:
            for i in range(self.cold_samples):
                p = PeerSandbox(self.peer_ws)
                p.kill()
                for r in (c50, c99):
                    r.add("native", p.ready_s * 1e3)
        except Exception as e:  # noqa: BLE001
            for r in (c50, c99):
                r.fail("native", str(e)[:90])
        if not self.daemon:
            return
        udir = os.path.join(self.daemon.mnt, USER)
        tag = "%x" % (int(time.time()) & 0xffffff)
        try:
            for i in range(self.cold_samples):
                d = os.path.join(udir, "cold-%s-%03d" % (tag, i))
                t = time.perf_counter()
                call_with_timeout(lambda: os.mkdir(d), 60, "mkdir " + d)
                dt = time.perf_counter() - t
                for r in (c50, c99):
                    r.add("sbxfs", dt * 1e3)
                call_with_timeout(lambda: os.rmdir(d), 60, "rmdir " + d)
        except Exception as e:  # noqa: BLE001
            log("cold acquire failed: %r" % e)
            for r in (c50, c99):
                r.fail("sbxfs", str(e)[:90])
        try:
            d = os.path.join(udir, "warm-%s" % tag)
            call_with_timeout(lambda: os.mkdir(d), 60, "mkdir " + d)
            call_with_timeout(lambda: os.rmdir(d), 60, "rmdir " + d)
            for i in range(self.warm_samples):
                t = time.perf_counter()
                call_with_timeout(lambda: os.mkdir(d), 60, "mkdir " + d)
                t2 = time.perf_counter()
                call_with_timeout(lambda: os.rmdir(d), 60, "rmdir " + d)
                t3 = time.perf_counter()
                for r in (w50, w99):
                    r.add("sbxfs", (t2 - t) * 1e3)
                r50.add("sbxfs", (t3 - t2) * 1e3)
        except Exception as e:  # noqa: BLE001
            log("warm acquire failed: %r" % e)
            for r in (w50, w99, r50):
                r.fail("sbxfs", str(e)[:90])
        metrics = self.read_ctl(".metrics")
        if metrics:
            acq = [l for l in metrics.splitlines() if l.startswith("sbxfs_acquire_seconds_count")]
            if acq:
                self.notes.append("daemon .metrics after acquire row: " + "; ".join(acq))

    def read_ctl(self, name):
        try:
            with open(os.path.join(self.daemon.mnt, name), "rb") as f:
                return f.read().decode(errors="replace")
        except OSError as e:
            self.notes.append("reading /sbx/%s failed: %s" % (name, e))
            return None

    # ---- 7 jobs -------------------------------------------------------------
    def row_job(self):
        peer_sides = ("sbxfs", "native")
        j50 = Row("job round trip `true`, p50 (ms) — peer: one-shot bwrap", "ms", False, "p50", "bwrap", peer_sides)
        j99 = Row("job round trip `true`, p99 (ms) — peer: one-shot bwrap", "ms", False, "p99", "bwrap", peer_sides)
        self.rows += [j50, j99]
        try:
            for i in range(self.job_samples):
                dt = peer_oneshot(self.peer_ws, "true")
                for r in (j50, j99):
                    r.add("native", dt * 1e3)
        except Exception as e:  # noqa: BLE001
            for r in (j50, j99):
                r.fail("native", str(e)[:90])
        if not self.daemon:
            return
        jobs = os.path.join(self.daemon.mnt, USER, THREAD, "jobs")
        if not os.path.isdir(jobs):
            for r in (j50, j99):
                r.cells["sbxfs"] = "n/a (jobs not available)"
            return

        def roundtrip(name):
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
                raise RuntimeError("job %s exit file said %r" % (name, out))
            os.rmdir(jd)
            return dt

        tag = "%x" % (int(time.time()) & 0xffffff)
        try:
            for i in range(self.job_samples):
                dt = call_with_timeout(lambda: roundtrip("j%s-%03d" % (tag, i)), 60, "job round trip")
                for r in (j50, j99):
                    r.add("sbxfs", dt * 1e3)
        except Exception as e:  # noqa: BLE001
            log("job row failed: %r" % e)
            for r in (j50, j99):
                r.fail("sbxfs", str(e)[:90])

    # ---- 8 many sandboxes ---------------------------------------------------
    def row_many(self):
        n = self.many
        peer_sides = ("sbxfs", "native")
        ra = Row("acquire %d sandboxes, sequential mkdir, total (s) — peer: %d bwrap" % (n, n),
                 "s", False, "single", "bwrap", peer_sides)
        rm = Row("daemon VmRSS with %d active (MiB) [at mount]" % n, "MiB", False, "single", None, ("sbxfs",))
        rt = Row("unmount with %d active: teardown until daemon exit (s) — peer: SIGKILL %d bwrap"
                 % (n, n), "s", False, "single", "bwrap", peer_sides)
        self.rows += [ra, rm, rt]
        budget = self.a.many_budget
        # peer: n persistent bwrap sandboxes alive at once
        peers = []
        try:
            t = time.perf_counter()
            for i in range(n):
                peers.append(PeerSandbox(self.peer_ws))
                if time.perf_counter() - t > budget:
                    break
            dt = time.perf_counter() - t
            ra.add("native", dt)
            if len(peers) < n:
                ra.note += " peer stopped at %d after budget" % len(peers)
        except Exception as e:  # noqa: BLE001
            ra.fail("native", str(e)[:90])
        t = time.perf_counter()
        for p in peers:
            p.kill()
        if peers:
            rt.add("native", time.perf_counter() - t)
        if self.a.skip_sbxfs:
            return
        d = Daemon(self.a.sbxfs, self.workdir, "many", max(2000, 2 * n))
        try:
            d.start()
            rss0 = vmrss_kib(d.proc.pid)
            procs0 = count_procs_mentioning(d.state + "/")
            os.mkdir(os.path.join(d.mnt, USER))
            t = time.perf_counter()
            done = 0
            err = None
            for i in range(n):
                p = os.path.join(d.mnt, USER, "m%04d" % i)
                try:
                    call_with_timeout(lambda: os.mkdir(p), 60, "mkdir " + p)
                except Exception as e:  # noqa: BLE001
                    err = "after %d: %s" % (done, e)
                    break
                done += 1
                if time.perf_counter() - t > budget:
                    err = "stopped at %d after the %ss budget" % (done, budget)
                    break
            dt = time.perf_counter() - t
            rss1 = vmrss_kib(d.proc.pid)
            procs1 = count_procs_mentioning(d.state + "/")
            if done == n:
                ra.add("sbxfs", dt)
            else:
                ra.cells["sbxfs"] = "%s in %.1f s (%s)" % (done, dt, err[:80])
            if rss1 is not None:
                rm.add("sbxfs", rss1 / 1024)
                rm.cells["sbxfs"] = "%.1f [%.1f] (+%.1f KiB/sandbox)" % (
                    rss1 / 1024, (rss0 or 0) / 1024, (rss1 - (rss0 or 0)) / max(done, 1))
            st = None
            try:
                with open(os.path.join(d.mnt, ".status"), "rb") as f:
                    st = json.loads(f.read())
            except (OSError, ValueError) as e:
                self.notes.append("many: /sbx/.status unreadable: %s" % e)
            self.notes.append("many: %d acquired in %.1f s (%.1f ms each); processes naming its "
                              "state_dir (bwrap argv) %d -> %d; .status active=%s warm=%s"
                              % (done, dt, dt * 1e3 / max(done, 1), procs0, procs1,
                                 st and st.get("active"), st and st.get("warm")))
            td = d.stop(timeout=max(120, budget))
            left = count_procs_mentioning(d.state + "/")
            if td is not None:
                rt.add("sbxfs", td)
            else:
                rt.fail("sbxfs", "daemon did not exit after unmount")
            self.notes.append("many: after unmount, processes naming its state_dir left: %d" % left)
            errs = d.log_lines()
            if errs:
                self.notes.append("many: daemon log has %d error/warning lines, first: `%s`"
                                  % (len(errs), errs[0][:200]))
        except Exception as e:  # noqa: BLE001
            log("many row failed: %r" % e)
            ra.fail("sbxfs", str(e)[:90])
        finally:
            if d.proc is not None:
                d.stop(timeout=30)

    # ---- table --------------------------------------------------------------
    def table(self):
        out = ["| row | sbxfs (median [min–max]) | native | bindfs | ratio(s) |",
               "|---|---|---|---|---|"]
        for r in self.rows:
            name = r.name + ((" (%s)" % r.note.strip()) if r.note else "")
            out.append("| %s |" % " | ".join(
                c.replace("|", "\\|") for c in
                (name, r.cell("sbxfs"), r.cell("native"), r.cell("bindfs"), r.ratios())))
        return "\n".join(out)

    def header(self, cmd):
        cpu = "?"
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        cpu = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        ver = "n/a"
        if not self.a.skip_sbxfs:
            try:
                ver = subprocess.run([self.a.sbxfs, "--version"], capture_output=True,
                                     timeout=5).stdout.decode().strip() or "?"
            except Exception:  # noqa: BLE001
                pass
        try:
            bver = subprocess.run(["bindfs", "--version"], capture_output=True,
                                  timeout=5).stdout.decode().strip()
        except Exception:  # noqa: BLE001
            bver = "bindfs ?"
        return "\n".join([
            "# sbxfs benchmark",
            "",
            "- date: %s" % datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "- kernel: %s" % platform.release(),
            "- CPU: %s × %d" % (cpu, os.cpu_count() or 0),
            "- command: `%s`" % cmd,
            "- sbxfs: `%s` (%s); config: use local, replicas 64, idle_timeout 0" % (self.a.sbxfs, ver),
            "- scratch: %s (on %s)" % (self.workdir, fs_type(self.workdir)),
            "- load average at start %s, at end %s; other fuse.sbxfs mounts on the host during "
            "the run: %d (other daemons and tests compete for the 2 CPUs; compare columns, "
            "not runs)" % (self.load0, loadavg(), self.foreign_mounts),
            "- mode: %s; N=%d for big rows, %d for small ones; each figure is the median of N runs "
            "[min–max]; latency rows give p50 / p99 over their samples"
            % ("quick" if self.a.quick else "full", self.n_big, self.n_small),
            "- columns: sbxfs = through the mount (`/sbx/bench/t1/workspace`); native = the same "
            "backing dir under state_dir, directly; bindfs = `bindfs %s` of that "
            "backing dir (%s, default options: libfuse 2, single-threaded, 4 KiB writes). For sandbox rows the native column holds the peer "
            "named in the row (bubblewrap started directly with the local provider's flags)."
            % (" ".join(BINDFS_ARGS), bver),
            "- ratios: sbxfs speed as a multiple of the peer (throughput sbxfs/peer, time "
            "peer/sbxfs): `0.80x native` = sbxfs does 80% of native's work per second; "
            "`2.00x vs bindfs` = sbxfs is twice as fast as bindfs.",
            "",
        ])


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def count_fstype(fstype):
    with open("/proc/mounts") as f:
        return sum(1 for line in f if line.split()[2] == fstype)


def fs_type(path):
    best, typ = "", "?"
    rp = os.path.realpath(path)
    with open("/proc/mounts") as f:
        for line in f:
            p = line.split()
            if (rp == p[1] or rp.startswith(p[1].rstrip("/") + "/")) and len(p[1]) > len(best):
                best, typ = p[1], p[2]
    return typ


def main():
    ap = argparse.ArgumentParser(description="sbxfs benchmark (see bench/run.sh)")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run in under a minute")
    ap.add_argument("--only", default="", help="comma-separated rows: " + ",".join(ROWS))
    ap.add_argument("--runs", type=int, default=0, help="override N (runs per figure)")
    ap.add_argument("--sbxfs", default=os.environ.get("SBXFS_BIN", os.path.join(REPO, "sbxfs")))
    ap.add_argument("--skip-sbxfs", action="store_true",
                    help="no daemon: measure the native, bindfs and bwrap columns only")
    ap.add_argument("--workdir", default=None, help="scratch dir (default: new dir under /var/tmp)")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "latest.md"))
    ap.add_argument("--many-budget", type=float, default=240.0,
                    help="seconds the 1000-sandbox row may spend acquiring (per side)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench.py: must run as root (drop_caches, bubblewrap uids, mounts)")
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    for x in only:
        if x not in ROWS:
            sys.exit("bench.py: unknown row %r (rows: %s)" % (x, ", ".join(ROWS)))
    if not a.skip_sbxfs and not os.access(a.sbxfs, os.X_OK):
        sys.exit("bench.py: %s not found or not executable (build with `make`, set SBXFS_BIN, "
                 "or pass --skip-sbxfs)" % a.sbxfs)
    own_workdir = a.workdir is None
    if own_workdir:
        a.workdir = tempfile.mkdtemp(prefix="sbxfs-bench.", dir="/var/tmp")

    def on_term(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    b = Bench(a)
    cmd = " ".join(shlex.quote(x) for x in [os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])
    rc = 0
    try:
        b.setup()
        want = only or list(ROWS)
        steps = [("seqwrite", lambda: b.row_seq(True, "seqread" in want)),
                 ("seqread", lambda: b.row_seq(False, True))]
        if "seqwrite" in want:
            steps.pop()   # seqwrite did the reads too
        steps += [("randread", b.row_rand), ("smallfiles", b.row_smallfiles), ("tree", b.row_tree),
                  ("acquire", b.row_acquire), ("job", b.row_job)]
        for name, fn in steps:
            if name in want:
                log("row %s" % name)
                fn()
        b.teardown()   # before "many": it runs its own daemon
        if "many" in want:
            log("row many")
            b.row_many()
    except BaseException as e:
        rc = 1
        log("aborted: %r" % e)
        b.notes.append("run aborted: %r" % e)
        if isinstance(e, KeyboardInterrupt):
            rc = 130
    finally:
        b.teardown()
        if own_workdir:
            rmtree(a.workdir)
    text = b.header(cmd) + "\n" + b.table() + "\n"
    if b.notes:
        text += "\nNotes:\n\n" + "\n".join("- " + n for n in b.notes) + "\n"
    text += "\nTotal bench time: %.0f s\n" % (time.monotonic() - T0)
    print(text)
    out = a.out
    if rc != 0:   # never clobber the last complete results with an aborted run
        out = os.path.splitext(out)[0] + ".aborted.md"
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    log("wrote %s" % out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
