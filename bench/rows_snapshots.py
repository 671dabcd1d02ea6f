# SPDX-License-Identifier: MIT
"""
rows_snapshots.py - snapshots/ and ctl's restore (issue 24) against the tools a person
would use instead: `cp -a` of the workspace, `rsync -a --link-dest` of it against the
previous copy, and a full copy back.

Group: snapshots.  A workspace of 1 GiB in 10 000 files (100 KiB each; --quick: 1000 files
of 32 KiB) lives in a sandbox of a daemon of its own (fixture "snapsrc": state_dir on the
scratch filesystem, ext4 here; "snapsrc-xfs": state_dir on a loop-mounted XFS image the
bench makes with Debian's xfsprogs, reflinks on).  The peers work on the same files on the
same filesystem: they copy that sandbox's workspace directory on the host.

Rows (each side's state is reset untimed inside the round; a `sync` precedes every timed
operation, so neither side pays for the other's writeback):
  first    mkdir snapshots/NAME with no earlier snapshot  vs  cp -a of the workspace
  second   mkdir snapshots/NAME after 1 % of the files changed (the same 100 files are
           rewritten each round; the base snapshot is the newest)  vs  cp -a  and  vs
           rsync -a --link-dest=<a copy of the base>
  restore  restore of the base snapshot after the same 1 % changed  vs  cp -a of the
           snapshot into a new directory (a full copy back)
  freeze   (solo) the time each snapshot keeps the sandbox frozen (its info's freeze_ms),
           p50 and p99 of n snapshots taken after 1 % changed, while a job in the sandbox
           appends to a file without pause
and the same four with the suffix _xfs on XFS (where cp -a reflinks too: coreutils 9).
"""

import json
import os
import shutil
import statistics
import subprocess
import time

from bench import (Daemon, Metric, Target, call_with_timeout, describe_group, fixture, log, row)

describe_group("snapshots", "mkdir snapshots/NAME and ctl restore vs cp -a, rsync --link-dest "
                            "(a 1 GiB workspace in 10 000 files; ext4, and XFS with reflinks)")

USER, THREAD = "bench", "snap"
CHANGED_FRACTION = 100  # 1 file in 100 changes between the base and a round's snapshot
XFS_IMAGE_BYTES = 4 << 30


def _params():
    return {"files": (10000, 1000), "size": (100 * 1024, 32 * 1024), "freeze_n": (20, 5)}


# --------------------------------------------------------------------------
# the source: a sandbox whose workspace holds the files
# --------------------------------------------------------------------------

class SnapSource:
    """A daemon of its own with one sandbox (bench/snap) holding the workspace."""

    def __init__(self, ctx, name, files, size, xfs=False):
        self.files, self.size = files, size
        self.base = os.path.join(ctx.workdir, name)
        self.state = os.path.join(self.base, "state")
        os.makedirs(self.state, exist_ok=True)
        self.image = None
        if xfs:
            if not shutil.which("mkfs.xfs"):
                raise RuntimeError("mkfs.xfs is missing: `make deps` installs xfsprogs")
            self.image = os.path.join(ctx.workdir, name + ".img")
            with open(self.image, "wb") as f:
                f.truncate(XFS_IMAGE_BYTES)
            subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", self.image], check=True, timeout=120)
            subprocess.run(["mount", "-o", "loop", self.image, self.state], check=True, timeout=60)
        self.daemon = Daemon(ctx.sbxfs_bin, ctx.workdir, name, 8)
        self.daemon.start()
        self.sandbox = os.path.join(self.daemon.mnt, USER, THREAD)
        call_with_timeout(lambda: os.makedirs(self.sandbox), 60, "mkdir " + self.sandbox)
        self.thread_dir = os.path.join(self.state, "users", USER, "threads", THREAD)
        self.ws = os.path.join(self.thread_dir, "user-data", "workspace")
        self.snaps = os.path.join(self.sandbox, "snapshots")
        st = json.load(open(os.path.join(self.sandbox, "status")))
        self.uid = st["uid"]
        self.fill()
        self.peer_root = os.path.join(self.state, "peer")  # the peers copy on this filesystem
        os.makedirs(self.peer_root, exist_ok=True)
        self.seq = 0

    def fill(self):
        """files x size bytes of random data in 100 directories, the sandbox's."""
        log("snapshots: writing %d files of %d bytes into %s" % (self.files, self.size, self.ws))
        chunk = os.urandom(1 << 20)
        for i in range(self.files):
            d = os.path.join(self.ws, "d%02d" % (i % 100))
            if not os.path.isdir(d):
                os.mkdir(d)
                os.chown(d, self.uid, self.uid)
            p = os.path.join(d, "f%05d" % i)
            with open(p, "wb") as f:
                off = (i * 4096) % (len(chunk) - self.size)
                f.write(chunk[off:off + self.size])
            os.chown(p, self.uid, self.uid)
        os.sync()

    def change(self):
        """Rewrite 1 % of the files (always the same ones), as a job would."""
        for i in range(0, self.files, CHANGED_FRACTION):
            p = os.path.join(self.ws, "d%02d" % (i % 100), "f%05d" % i)
            with open(p, "r+b") as f:
                f.write(os.urandom(4096))

    def name(self, prefix):
        self.seq += 1
        return "%s%d" % (prefix, self.seq)

    def snapshot(self, name):
        os.mkdir(os.path.join(self.snaps, name))
        with open(os.path.join(self.snaps, name, "info")) as f:
            return json.load(f)

    def drop(self, name):
        """rmdir a snapshot, and wait until its files are gone (untimed)."""
        os.rmdir(os.path.join(self.snaps, name))
        root = os.path.join(self.thread_dir, "snapshots")
        deadline = time.monotonic() + 300
        while any(n.startswith(".del-") for n in os.listdir(root)):
            if time.monotonic() > deadline:
                raise RuntimeError("snapshot %s not removed after 300 s" % name)
            time.sleep(0.05)

    def drop_all(self):
        for n in os.listdir(self.snaps):
            self.drop(n)

    def ctl(self, cmd):
        fd = os.open(os.path.join(self.sandbox, "ctl"), os.O_WRONLY)
        try:
            os.write(fd, (cmd + "\n").encode())
        finally:
            os.close(fd)

    def close(self):
        if self.daemon.proc is not None:
            self.daemon.stop()
        if self.image:
            for _ in range(50):
                if subprocess.run(["umount", self.state], capture_output=True).returncode == 0:
                    break
                time.sleep(0.2)
            else:
                subprocess.run(["umount", "-l", self.state], capture_output=True)
            os.unlink(self.image)


def _source_fixture(ctx, name, xfs):
    p = {k: (v[1] if ctx.quick else v[0]) for k, v in _params().items()}
    src = SnapSource(ctx, name, p["files"], p["size"], xfs=xfs)
    try:
        yield Target(name, src.peer_root, "a sandbox of a daemon of its own whose workspace holds "
                     "%d files of %d bytes (%s)" % (src.files, src.size, "XFS, reflinks" if xfs else
                                                   "the scratch filesystem"), src=src)
    finally:
        src.close()


@fixture("snapsrc", "a daemon of its own (state_dir on the scratch filesystem) with a 1 GiB "
                    "workspace in 10 000 files")
def fixture_snapsrc(ctx):
    yield from _source_fixture(ctx, "snapsrc", False)


@fixture("snapsrc-xfs", "a daemon of its own whose state_dir is a loop-mounted XFS image (mkfs.xfs "
                        "-m reflink=1) with a 1 GiB workspace in 10 000 files")
def fixture_snapsrc_xfs(ctx):
    yield from _source_fixture(ctx, "snapsrc-xfs", True)


def _peer(name, what):
    @fixture(name, what)
    def fx(ctx):
        yield Target(name, ctx.scratch(name), what)
    return fx


_peer("cp-a", "`cp -a` of the sandbox's workspace directory on the host, into a new directory on "
              "the same filesystem (coreutils 9: reflinks where the filesystem can)")
_peer("rsync-link-dest", "`rsync -a --link-dest=BASE` of the workspace into a new directory, BASE "
                         "a copy of it made when the base snapshot was taken (unchanged files are "
                         "hard links to BASE)")


# --------------------------------------------------------------------------
# one side of a round
# --------------------------------------------------------------------------

def _timed(ctx, fn):
    os.sync()
    with ctx.timer() as tm:
        fn()
    return tm.s


def _cp(src, dst):
    subprocess.run(["cp", "-a", src, dst], check=True)


def _rm(path):
    subprocess.run(["rm", "-rf", "--one-file-system", path], check=True)


def _src(ctx, xfs):
    return ctx.fixture("snapsrc-xfs" if xfs else "snapsrc").info["src"]


def _first(ctx, t, xfs):
    src = _src(ctx, xfs)
    if t.kind == "cp-a":
        dst = os.path.join(src.peer_root, "cp-first")
        s = _timed(ctx, lambda: _cp(src.ws, dst))
        _rm(dst)
        return s
    src.drop_all()
    name = src.name("first")
    s = _timed(ctx, lambda: src.snapshot(name))
    src.drop(name)
    return s


def _base(src):
    """The base snapshot (and the rsync peer's base copy): made once, kept."""
    if not getattr(src, "base_name", None):
        src.drop_all()
        src.base_name = src.name("base")
        src.snapshot(src.base_name)
        src.base_copy = os.path.join(src.peer_root, "rsync-base")
        _cp(src.ws, src.base_copy)
    return src.base_name


def _second(ctx, t, xfs):
    src = _src(ctx, xfs)
    _base(src)
    src.change()
    if t.kind == "cp-a":
        dst = os.path.join(src.peer_root, "cp-second")
        s = _timed(ctx, lambda: _cp(src.ws, dst))
        _rm(dst)
        return {"time": s}
    if t.kind == "rsync-link-dest":
        dst = os.path.join(src.peer_root, "rsync-second")
        s = _timed(ctx, lambda: subprocess.run(["rsync", "-a", "--link-dest=" + src.base_copy,
                                                src.ws + "/", dst + "/"], check=True))
        _rm(dst)
        return {"time": s}
    name = src.name("second")
    s = _timed(ctx, lambda: src.snapshot(name))
    with open(os.path.join(src.snaps, name, "info")) as f:
        info = json.load(f)
    src.drop(name)
    return {"time": s, "copied": info["bytes_copied"] / (1 << 20)}


def _restore(ctx, t, xfs):
    src = _src(ctx, xfs)
    base = _base(src)
    if t.kind == "cp-a":
        snapdata = os.path.join(src.thread_dir, "snapshots", base, "data", "workspace")
        dst = os.path.join(src.peer_root, "cp-restore")
        s = _timed(ctx, lambda: _cp(snapdata, dst))
        _rm(dst)
        return s
    src.change()
    return _timed(ctx, lambda: src.ctl("restore " + base))


def _freeze(ctx, t, xfs):
    """n snapshots after 1 % changed each, while a job appends to a file."""
    src = _src(ctx, xfs)
    _base(src)
    jobs = os.path.join(src.sandbox, "jobs")
    job = os.path.join(jobs, src.name("writer"))
    os.mkdir(job)
    with open(os.path.join(job, "cmd"), "w") as f:
        f.write("while :; do date +%s%N >> /tmp/beat; done\n")
    freeze, took = [], []
    try:
        for _ in range(ctx.p.freeze_n):
            src.change()
            name = src.name("fz")
            os.sync()
            info = src.snapshot(name)
            freeze.append(info["freeze_ms"])
            took.append(info["took_ms"])
            src.drop(name)
    finally:
        fd = os.open(os.path.join(job, "ctl"), os.O_WRONLY)
        os.write(fd, b"kill KILL")
        os.close(fd)
    q = statistics.quantiles(freeze, n=100, method="inclusive") if len(freeze) > 1 else freeze * 99
    return {"p50": statistics.median(freeze), "p99": q[98], "took": statistics.median(took)}


FIRST_T = "first snapshot of {files} files (no earlier snapshot) — peer: the same tree, cp -a"
SECOND_T = "second snapshot after 1 % of the files changed — peer: cp -a / rsync -a --link-dest"
RESTORE_T = "restore of the 1 % changed — peer: a full copy back (cp -a of the snapshot)"


@row("snapshots", name="first", peer="cp-a", unit="s", title=FIRST_T, params=_params(), timeout=900)
def first(ctx, t):
    """sbxfs: mkdir snapshots/NAME with no snapshot before it (every file copied, or reflinked
    on XFS), then rmdir and wait until its files are gone (untimed); cp-a: cp -a of the
    workspace into a new directory, then rm -rf (untimed)."""
    return _first(ctx, t, False)


@row("snapshots", name="second", peers=("cp-a", "rsync-link-dest"), params=_params(), timeout=900,
     metrics=[Metric("time", "s", SECOND_T),
              Metric("copied", "MiB", "bytes the second snapshot copied (the rest shared)", higher=False)])
def second(ctx, t):
    """Every round first rewrites 4 KiB of the same 1 % of the files (untimed), then: sbxfs
    mkdir snapshots/NAME (the base snapshot, taken once, is the newest: unchanged files are
    hard links to its copies on ext4), rmdir after; cp-a: cp -a of the workspace; rsync: rsync
    -a --link-dest=BASE, BASE a cp -a made with the base snapshot."""
    return _second(ctx, t, False)


@row("snapshots", name="restore", peer="cp-a", unit="s", title=RESTORE_T, params=_params(), timeout=900)
def restore(ctx, t):
    """sbxfs: rewrite the same 1 % of the files (untimed), then `restore BASE` > ctl (the
    sandbox frozen meanwhile; unchanged files stay, the 1 % are copied back); cp-a: cp -a of
    the base snapshot's files into a new directory."""
    return _restore(ctx, t, False)


@row("snapshots", name="freeze", peers=(), params=_params(), timeout=900, rounds=1, warmup=0,
     metrics=[Metric("p50", "ms", "sandbox frozen by a snapshot (1 % changed, a job writing), p50 of {freeze_n}"),
              Metric("p99", "ms", "... p99"),
              Metric("took", "ms", "the whole snapshot, p50")])
def freeze(ctx, t):
    """Solo: n snapshots, each after 1 % of the files changed, while a job appends to a file
    in a loop; the freeze each imposed (from its info: freeze_ms) and its whole time."""
    return _freeze(ctx, t, False)


@row("snapshots", name="first_xfs", peer="cp-a", unit="s", title=FIRST_T + " (XFS)", params=_params(),
     timeout=900)
def first_xfs(ctx, t):
    """As `first`, with state_dir (and the peer's copy) on XFS with reflinks."""
    return _first(ctx, t, True)


@row("snapshots", name="second_xfs", peers=("cp-a", "rsync-link-dest"), params=_params(), timeout=900,
     metrics=[Metric("time", "s", SECOND_T + " (XFS)"),
              Metric("copied", "MiB", "bytes the second snapshot copied (the rest shared)", higher=False)])
def second_xfs(ctx, t):
    """As `second`, on XFS."""
    return _second(ctx, t, True)


@row("snapshots", name="restore_xfs", peer="cp-a", unit="s", title=RESTORE_T + " (XFS)", params=_params(),
     timeout=900)
def restore_xfs(ctx, t):
    """As `restore`, on XFS."""
    return _restore(ctx, t, True)


@row("snapshots", name="freeze_xfs", peers=(), params=_params(), timeout=900, rounds=1, warmup=0,
     metrics=[Metric("p50", "ms", "sandbox frozen by a snapshot on XFS, p50 of {freeze_n}"),
              Metric("p99", "ms", "... p99"),
              Metric("took", "ms", "the whole snapshot, p50")])
def freeze_xfs(ctx, t):
    """As `freeze`, on XFS."""
    return _freeze(ctx, t, True)
