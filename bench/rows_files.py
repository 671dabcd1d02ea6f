# SPDX-License-Identifier: MIT
"""
rows_files.py - file I/O rows of the sbxfs benchmark: sbxfs's workspace against a native
directory and against bindfs, each pair in interleaved rounds (see bench.py).

Groups: seqwrite, seqread (cold, cached, mmap), randread (4 KiB pread, cached and cold),
smallfiles (create / stat / unlink, open+read+close, readdir of a big directory),
tree (untar, find, grep -r, rm -rf of a generated source tree).

Every round does its own untimed set-up (a fresh directory, drop_caches for the cold
figures, an untimed first read for the cached ones), so the two sides of a round start
from the same state whatever the other side did before.
"""

import io
import mmap
import os
import random
import subprocess
import tarfile

from bench import MiB, Metric, describe_group, log, rmtree, row

FILE_PEERS = ("native", "bindfs")
# the data rows also compare the two data paths: the same daemon built on the
# system's libfuse (3.14 on Debian 12: every byte copied through the daemon)
DATA_PEERS = FILE_PEERS + ("sbxfs-copy",)
# the metadata rows also compare the two transports when asked
# (SBXFS_BENCH_URING=1): the same daemon with fuse.io_uring: on, and its
# control, a second daemon set up the same way with fuse.io_uring: off
META_PEERS = FILE_PEERS + (("sbxfs-uring", "sbxfs-devfuse") if os.environ.get("SBXFS_BENCH_URING") == "1" else ())

describe_group("seqwrite", "one big file written in 1 MiB writes, then fsync")
describe_group("seqread", "one big file read sequentially: after drop_caches, from the page "
                          "cache, and through mmap")
describe_group("randread", "4 KiB preads at random offsets of one file")
describe_group("smallfiles", "many 4 KiB files: the metadata path (one FUSE round trip or more "
                             "per call)")
describe_group("tree", "a generated source tree: untar, find, grep -r, rm -rf")

_PATTERN = random.Random(1).randbytes(MiB)


def _write_file(path, size, fsync=True):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(size // MiB):
            if os.write(fd, _PATTERN) != MiB:
                raise IOError("short write")
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


_RBUF = bytearray(MiB)


def _read_file(path, size):
    total = 0
    mv = memoryview(_RBUF)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(mv)
            if not n:
                break
            total += n
    if total != size:
        raise IOError("read %d of %d bytes" % (total, size))


def _mmap_read(path, size):
    with open(path, "rb") as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            if len(mm) != size:
                raise IOError("mapped %d of %d bytes" % (len(mm), size))
            mv = memoryview(mm)
            try:
                for off in range(0, size, MiB):
                    _RBUF[:] = mv[off:off + MiB]      # page faults -> readahead through the fs
            finally:
                mv.release()


# ---- seqwrite ---------------------------------------------------------------

@row("seqwrite", name="write", peers=DATA_PEERS, unit="MB/s",
     title="seq write {mib} MiB, 1 MiB writes + fsync", params={"mib": (256, 32)})
def seq_write(ctx, t):
    """Create a file, write it in 1 MiB writes, fsync, close (caches dropped before)."""
    path = t.path("seq.bin")
    if os.path.exists(path):
        os.unlink(path)
    ctx.drop_caches()
    size = ctx.p.mib * MiB
    with ctx.timer() as tm:
        _write_file(path, size)
    os.unlink(path)
    return size / tm.s / 1e6


# ---- seqread ----------------------------------------------------------------

def _prepare_seq(ctx, t):
    path = t.path("seq.bin")
    _write_file(path, ctx.p.mib * MiB)
    return path


@row("seqread", name="read", peers=DATA_PEERS, params={"mib": (256, 32)}, prepare=_prepare_seq,
     metrics=[Metric("cold", "MB/s", "seq read {mib} MiB after drop_caches"),
              Metric("cached", "MB/s", "seq read {mib} MiB cached"),
              Metric("mmap_cold", "MB/s", "mmap read {mib} MiB after drop_caches"),
              Metric("mmap_cached", "MB/s", "mmap read {mib} MiB cached")])
def seq_read(ctx, t):
    """read(2) in 1 MiB chunks and mmap + memcpy, each cold (drop_caches) and cached
    (an untimed read first)."""
    path, size = t.state, ctx.p.mib * MiB
    out = {}
    ctx.drop_caches()
    with ctx.timer() as tm:
        _read_file(path, size)
    out["cold"] = size / tm.s / 1e6
    _read_file(path, size)
    with ctx.timer() as tm:
        _read_file(path, size)
    out["cached"] = size / tm.s / 1e6
    ctx.drop_caches()
    with ctx.timer() as tm:
        _mmap_read(path, size)
    out["mmap_cold"] = size / tm.s / 1e6
    _mmap_read(path, size)
    with ctx.timer() as tm:
        _mmap_read(path, size)
    out["mmap_cached"] = size / tm.s / 1e6
    return out


# ---- randread ---------------------------------------------------------------

def _prepare_rand(ctx, t):
    path = t.path("rand.bin")
    _write_file(path, ctx.p.mib * MiB)
    offs = [o * 4096 for o in random.Random(3).choices(range(ctx.p.mib * MiB // 4096),
                                                       k=ctx.p.ops)]
    return path, offs


def _rand_run(path, offs):
    buf = bytearray(4096)
    fd = os.open(path, os.O_RDONLY)
    try:
        for o in offs:
            if os.preadv(fd, [buf], o) != 4096:
                raise IOError("short read at %d" % o)
    finally:
        os.close(fd)


@row("randread", name="pread", peers=DATA_PEERS, params={"mib": (256, 32), "ops": (10000, 2000)},
     prepare=_prepare_rand,
     metrics=[Metric("cached", "ops/s", "4 KiB random pread, {mib} MiB file, cached, {ops} reads"),
              Metric("cold", "ops/s", "4 KiB random pread, {mib} MiB file, after drop_caches, "
                                      "{ops} reads")])
def rand_read(ctx, t):
    """The same random offsets on both sides; cold after drop_caches, cached after reading
    the whole file once."""
    path, offs = t.state
    out = {}
    ctx.drop_caches()
    with ctx.timer() as tm:
        _rand_run(path, offs)
    out["cold"] = len(offs) / tm.s
    _read_file(path, ctx.p.mib * MiB)
    with ctx.timer() as tm:
        _rand_run(path, offs)
    out["cached"] = len(offs) / tm.s
    return out


# ---- smallfiles -------------------------------------------------------------

_DATA4K = b"x" * 4096


@row("smallfiles", peers=META_PEERS, params={"n": (2000, 500)},
     metrics=[Metric("create", "ops/s", "create+write 4 KiB+close, {n} files"),
              Metric("stat", "ops/s", "stat {n} files right after creating them"),
              Metric("unlink", "ops/s", "unlink {n} files"),
              Metric("create_empty", "ops/s", "create+close, {n} empty files")])
def create_stat_unlink(ctx, t):
    """In a fresh directory: create N files (open O_CREAT|O_EXCL, write 4 KiB, close), then
    stat each, then unlink each; then create N empty files (open O_CREAT|O_EXCL, close) in
    another fresh directory, removed untimed. Four timings from one round. The empty-file
    create is the metadata path alone: the 4 KiB writes also meet the host's dirty-page
    throttling, which other processes' writes set off.

    Caches are dropped before each create loop (untimed). ext4's inode allocator skips free
    inodes deleted in the last 30 s whose inode-table block is cached (recently_deleted() in
    find_inode_bit()); after many unlinks on the filesystem (earlier rounds, the other side,
    other processes on this host) that scan took 60-70 % of a create's CPU time, native and
    sbxfs alike, and native creates fell from ~50 000/s to ~1 000/s. Dropping the caches
    removes what our own earlier rounds left cached; what other processes keep deleting on
    the same filesystem still costs 30-50 % (perf, 2026-12-01), so on a busy host the create
    rows measure ext4 about as much as sbxfs."""
    d = t.fresh("c")
    names = [os.path.join(d, "f%05d" % k) for k in range(ctx.p.n)]
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    ctx.drop_caches()
    with ctx.timer() as tc:
        for p in names:
            fd = os.open(p, flags, 0o644)
            os.write(fd, _DATA4K)
            os.close(fd)
    with ctx.timer() as ts:
        for p in names:
            os.stat(p)
    with ctx.timer() as tu:
        for p in names:
            os.unlink(p)
    os.rmdir(d)
    d = t.fresh("e")
    names = [os.path.join(d, "f%05d" % k) for k in range(ctx.p.n)]
    ctx.drop_caches()
    with ctx.timer() as te:
        for p in names:
            os.close(os.open(p, flags, 0o644))
    rmtree(d)
    n = len(names)
    return {"create": n / tc.s, "stat": n / ts.s, "unlink": n / tu.s, "create_empty": n / te.s}


def _make_files(d, n, data):
    os.makedirs(d, exist_ok=True)
    names = [os.path.join(d, "f%05d" % k) for k in range(n)]
    for p in names:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        if data:
            os.write(fd, data)
        os.close(fd)
    return names


def _prepare_small_read(ctx, t):
    return _make_files(t.path("files"), ctx.p.n, _DATA4K)


@row("smallfiles", peers=META_PEERS, unit="ops/s", params={"n": (2000, 500)},
     prepare=_prepare_small_read,
     title="open+read 4 KiB+close, {n} files (cached)")
def open_read_close(ctx, t):
    """open, read the whole 4 KiB file, close, for N files written during prepare
    (their data is in the page cache: this is the open/release path)."""
    names = t.state
    with ctx.timer() as tm:
        for p in names:
            fd = os.open(p, os.O_RDONLY)
            if len(os.read(fd, 8192)) != 4096:
                raise IOError("short read of %s" % p)
            os.close(fd)
    return len(names) / tm.s


def _prepare_bigdir(ctx, t):
    d = t.path("big")
    _make_files(d, ctx.p.n, b"")
    return d


@row("smallfiles", peers=META_PEERS, params={"n": (10000, 2000), "reps": (3, 2)},
     prepare=_prepare_bigdir,
     metrics=[Metric("readdir", "entries/s", "readdir of a {n}-entry dir (listdir ×{reps})"),
              Metric("readdir_stat", "entries/s",
                     "readdir + lstat each entry, {n}-entry dir (`ls -l`-like, ×{reps})")])
def readdir(ctx, t):
    """os.listdir of a directory of N empty files, and scandir + lstat of every entry;
    repeated reps times per round (warm: no drop_caches)."""
    d, n, reps = t.state, ctx.p.n, ctx.p.reps
    with ctx.timer() as tl:
        for _ in range(reps):
            if len(os.listdir(d)) != n:
                raise IOError("listdir(%s) found the wrong number of entries" % d)
    with ctx.timer() as ts:
        for _ in range(reps):
            k = 0
            with os.scandir(d) as it:
                for e in it:
                    e.stat(follow_symlinks=False)
                    k += 1
            if k != n:
                raise IOError("scandir(%s) found %d of %d entries" % (d, k, n))
    return {"readdir": n * reps / tl.s, "readdir_stat": n * reps / ts.s}


# ---- tree -------------------------------------------------------------------

NEEDLE = "SBXFS_NEEDLE_7f3a"


def make_tarball(ctx, nfiles):
    """A deterministic source-like tree: nfiles files (lognormal sizes, 64 B - 32 KiB) in
    nested directories, 1 in 50 containing NEEDLE. Cached for the run."""
    key = ("tarball", nfiles)
    if key in ctx.cache:
        return ctx.cache[key]
    path = os.path.join(ctx.scratch("inputs"), "tree-%d.tar" % nfiles)
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
    made = set()
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        def add_dir(d):
            if d in made or d == ".":
                return
            add_dir(os.path.dirname(d) or ".")
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, 1700000000
            tf.addfile(ti)
            made.add(d)

        for k in range(nfiles):
            leaf = k // 10
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
    meta = {"path": path, "files": nfiles, "dirs": len(made), "bytes": total,
            "find": nfiles + len(made) + 1, "grep": len([k for k in range(nfiles) if k % 50 == 7])}
    log("tarball %s: %d files, %d dirs, %.1f MB" % (path, nfiles, len(made), total / 1e6))
    ctx.cache[key] = meta
    return meta


def _run(argv, cwd):
    return subprocess.run(argv, cwd=cwd, capture_output=True)


@row("tree", name="walk", peers=META_PEERS, params={"files": (2000, 300)},
     metrics=[Metric("untar", "s", "untar {files} files, `tar -x`"),
              Metric("find_cold", "s", "`find . | wc -l` after drop_caches"),
              Metric("find_warm", "s", "`find . | wc -l` warm"),
              Metric("grep_cold", "s", "`grep -rl PATTERN .` after drop_caches"),
              Metric("grep_warm", "s", "`grep -rl PATTERN .` warm"),
              Metric("rm", "s", "`rm -rf` the tree")])
def tree(ctx, t):
    """Untar the generated tree into a fresh directory, walk it with find and grep (cold after
    drop_caches, then warm), remove it with rm -rf; every step checked for its result."""
    tb = make_tarball(ctx, ctx.p.files)
    base = t.fresh("tree")
    d = os.path.join(base, "t")
    os.mkdir(d)
    out = {}
    ctx.drop_caches()
    with ctx.timer() as tm:
        r = _run(["tar", "-xf", tb["path"], "--no-same-owner", "--no-same-permissions"], d)
    if r.returncode != 0:
        raise RuntimeError("tar: %s" % r.stderr.decode()[:200])
    out["untar"] = tm.s
    for key, cold in (("find_cold", True), ("find_warm", False)):
        if cold:
            ctx.drop_caches()
        with ctx.timer() as tm:
            r = _run(["sh", "-c", "find . | wc -l"], d)
        got = int(r.stdout.strip() or 0)
        if got != tb["find"]:
            raise RuntimeError("find counted %d entries, want %d" % (got, tb["find"]))
        out[key] = tm.s
    for key, cold in (("grep_cold", True), ("grep_warm", False)):
        if cold:
            ctx.drop_caches()
        with ctx.timer() as tm:
            r = _run(["grep", "-rl", NEEDLE, "."], d)
        got = len(r.stdout.splitlines())
        if got != tb["grep"]:
            raise RuntimeError("grep found %d files, want %d" % (got, tb["grep"]))
        out[key] = tm.s
    with ctx.timer() as tm:
        r = _run(["rm", "-rf", "t"], base)
    if r.returncode != 0:
        raise RuntimeError("rm -rf: %s" % r.stderr.decode()[:200])
    out["rm"] = tm.s
    rmtree(base)
    return out
