# SPDX-License-Identifier: MIT
"""Data directories: complete POSIX filesystems backed by host directories
under state_dir; paths never escape the thread's directory."""

import errno
import hashlib
import io
import os
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import textwrap

import pytest

import sbxutil
from sbxutil import expect_errno

MiB = 1 << 20
GiB = 1 << 30


def run(args, **kw):
    kw.setdefault("timeout", 120)
    return subprocess.run(args, capture_output=True, text=True, **kw)


# --------------------------------------------------------------------------
# big and many


def _chunks(total, seed=b"sbxfs"):
    """A deterministic stream of 1 MiB chunks, each one distinct."""
    base = bytearray(hashlib.shake_256(seed).digest(MiB))
    for i in range(total // MiB):
        struct.pack_into("<Q", base, 0, i)
        struct.pack_into("<Q", base, MiB - 8, i ^ 0x5A5A5A5A5A5A5A5A)
        yield bytes(base)


@pytest.mark.timeout_s(600)
def test_2gib_file_sha256(sandbox):
    m, t = sandbox
    p = t / "workspace" / "big.bin"
    want = hashlib.sha256()
    with open(p, "wb", buffering=0) as f:
        for c in _chunks(2 * GiB):
            want.update(c)
            n = f.write(c)
            assert n == len(c)
        os.fsync(f.fileno())
    assert os.stat(p).st_size == 2 * GiB
    # drop what the page cache holds for this file so the read goes to sbxfs
    fd = os.open(p, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    got = hashlib.sha256()
    total = 0
    with open(p, "rb", buffering=0) as f:
        while True:
            c = f.read(MiB)
            if not c:
                break
            total += len(c)
            got.update(c)
    assert total == 2 * GiB
    assert got.hexdigest() == want.hexdigest()
    assert os.stat(m.workspace_data("alice", "t") / "big.bin").st_size == 2 * GiB
    os.unlink(p)


def _content(i):
    return (f"file {i}\n" * (i % 7 + 1)).encode()


@pytest.mark.timeout_s(300)
def test_untar_small_file_tree(sandbox, tmp_path):
    m, t = sandbox
    n = 3000
    tarball = tmp_path / "tree.tar"
    with tarfile.open(tarball, "w") as tf:
        for i in range(n):
            data = _content(i)
            ti = tarfile.TarInfo(f"tree/d{i % 40:02d}/sub{i % 3}/f{i:05d}.txt")
            ti.size = len(data)
            ti.mode = 0o644
            ti.mtime = 1_600_000_000 + i
            tf.addfile(ti, io.BytesIO(data))
    ws = t / "workspace"
    r = run(["tar", "-x", "--no-same-owner", "-f", str(tarball), "-C", str(ws)], timeout=240)
    assert r.returncode == 0, r.stderr
    count = sum(len(files) for _, _, files in os.walk(ws / "tree"))
    assert count == n
    for i in (0, 1, 777, 1500, 2999):
        p = ws / "tree" / f"d{i % 40:02d}" / f"sub{i % 3}" / f"f{i:05d}.txt"
        assert p.read_bytes() == _content(i)
        assert int(os.stat(p).st_mtime) == 1_600_000_000 + i
    back = m.workspace_data("alice", "t") / "tree"
    assert sum(len(files) for _, _, files in os.walk(back)) == n
    r = run(["rm", "-rf", str(ws / "tree")], timeout=240)
    assert r.returncode == 0, r.stderr
    assert not (ws / "tree").exists()


@pytest.mark.timeout_s(120)
def test_gcc_compile_in_workspace(ws):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed on this machine")
    (ws / "lib.h").write_text("int twice(int);\n")
    (ws / "lib.c").write_text('#include "lib.h"\nint twice(int x) { return 2 * x; }\n')
    (ws / "main.c").write_text(textwrap.dedent("""\
        #include <stdio.h>
        #include "lib.h"
        int main(void) { printf("hello %d\\n", twice(21)); return 0; }
        """))
    r = run([gcc, "-O1", "-c", "lib.c", "-o", "lib.o"], cwd=ws)
    assert r.returncode == 0, r.stderr
    r = run([gcc, "-O1", "main.c", "lib.o", "-o", "hello"], cwd=ws)
    assert r.returncode == 0, r.stderr
    assert os.stat(ws / "hello").st_mode & 0o111
    r = run([str(ws / "hello")])
    assert r.returncode == 0 and r.stdout == "hello 42\n", (r.returncode, r.stdout, r.stderr)


# --------------------------------------------------------------------------
# POSIX operations through workspace/


def test_rename(ws):
    (ws / "a").write_text("A")
    (ws / "b").write_text("B")
    os.rename(ws / "a", ws / "c")
    assert not (ws / "a").exists() and (ws / "c").read_text() == "A"
    os.rename(ws / "c", ws / "b")  # over an existing file
    assert (ws / "b").read_text() == "A" and not (ws / "c").exists()
    os.mkdir(ws / "d1")
    (ws / "d1" / "x").write_text("X")
    os.rename(ws / "d1", ws / "d2")
    assert (ws / "d2" / "x").read_text() == "X"
    os.mkdir(ws / "d3")
    os.rename(ws / "d2" / "x", ws / "d3" / "y")  # across directories
    assert (ws / "d3" / "y").read_text() == "X"
    os.mkdir(ws / "full")
    (ws / "full" / "f").write_text("f")
    expect_errno(lambda: os.rename(ws / "d2", ws / "full"), errno.ENOTEMPTY, errno.EEXIST)
    assert sorted(os.listdir(ws)) == ["b", "d2", "d3", "full"]


def test_rename_noreplace(ws):
    (ws / "src").write_text("new")
    (ws / "dst").write_text("old")
    run(["mv", "-n", str(ws / "src"), str(ws / "dst")])
    assert (ws / "dst").read_text() == "old"
    assert (ws / "src").read_text() == "new"
    r = run(["mv", "-n", str(ws / "src"), str(ws / "fresh")])
    assert r.returncode == 0, r.stderr
    assert (ws / "fresh").read_text() == "new" and not (ws / "src").exists()


def test_hardlink(ws):
    (ws / "a").write_text("one")
    os.link(ws / "a", ws / "b")
    sa, sb = os.stat(ws / "a"), os.stat(ws / "b")
    assert sa.st_nlink == 2 and sb.st_nlink == 2
    assert sa.st_ino == sb.st_ino
    with open(ws / "b", "a") as f:
        f.write("two")
    assert (ws / "a").read_text() == "onetwo"
    os.unlink(ws / "a")
    assert os.stat(ws / "b").st_nlink == 1
    assert (ws / "b").read_text() == "onetwo"


def test_symlink_readlink(ws):
    os.symlink("/etc/passwd", ws / "abs")
    assert os.readlink(ws / "abs") == "/etc/passwd"
    assert stat.S_ISLNK(os.lstat(ws / "abs").st_mode)
    (ws / "target.txt").write_text("T")
    os.symlink("target.txt", ws / "rel")
    assert os.readlink(ws / "rel") == "target.txt"
    # the mount is nosymfollow (DESIGN §3): shown, never followed by the host
    expect_errno(lambda: (ws / "rel").read_text(), errno.ELOOP)
    os.symlink("missing", ws / "dangling")
    assert os.readlink(ws / "dangling") == "missing"
    expect_errno(lambda: os.stat(ws / "dangling"), errno.ELOOP)
    os.unlink(ws / "abs")
    assert not os.path.lexists(ws / "abs")


def test_chmod(ws):
    p = ws / "f"
    p.write_text("x")
    for mode in (0o640, 0o755, 0o600, 0o444):
        os.chmod(p, mode)
        assert stat.S_IMODE(os.stat(p).st_mode) == mode
    os.mkdir(ws / "d")
    os.chmod(ws / "d", 0o700)
    assert stat.S_IMODE(os.stat(ws / "d").st_mode) == 0o700


def test_utime(ws):
    p = ws / "f"
    p.write_text("x")
    os.utime(p, ns=(1_500_000_000_123_456_789, 1_600_000_000_987_654_321))
    st = os.stat(p)
    assert st.st_atime_ns == 1_500_000_000_123_456_789
    assert st.st_mtime_ns == 1_600_000_000_987_654_321
    os.utime(p)  # now
    import time
    assert abs(os.stat(p).st_mtime - time.time()) < 60


def test_truncate(ws):
    p = ws / "f"
    p.write_bytes(b"0123456789" * 10)
    os.truncate(p, 10)
    assert p.read_bytes() == b"0123456789"
    os.truncate(p, 1000)
    data = p.read_bytes()
    assert len(data) == 1000 and data[10:] == b"\0" * 990
    with open(p, "r+b") as f:
        f.truncate(3)
    assert p.read_bytes() == b"012"
    with open(p, "wb") as f:  # O_TRUNC
        pass
    assert os.stat(p).st_size == 0


def test_append(ws):
    p = ws / "log"
    fd1 = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    fd2 = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        for i in range(50):
            os.write(fd1 if i % 2 == 0 else fd2, f"{i:03d}\n".encode())
    finally:
        os.close(fd1)
        os.close(fd2)
    assert p.read_text() == "".join(f"{i:03d}\n" for i in range(50))
    r = run(["/bin/sh", "-c", f"echo more >> {p}"])
    assert r.returncode == 0
    assert p.read_text().endswith("049\nmore\n")


def _host_has_user_xattrs(path):
    probe = path / ".xattr-probe"
    probe.write_text("")
    try:
        os.setxattr(probe, "user.probe", b"1")
        return True
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return False
        raise
    finally:
        probe.unlink()


def test_xattr(sandbox):
    m, t = sandbox
    if not _host_has_user_xattrs(m.base):
        pytest.skip("the host filesystem under the state_dir has no user xattrs")
    p = t / "workspace" / "f"
    p.write_text("x")
    os.setxattr(p, "user.x", b"value")
    assert os.getxattr(p, "user.x") == b"value"
    assert "user.x" in os.listxattr(p)
    os.setxattr(p, "user.big", b"v" * 4000)
    assert os.getxattr(p, "user.big") == b"v" * 4000
    expect_errno(lambda: os.setxattr(p, "user.x", b"v2", os.XATTR_CREATE), errno.EEXIST)
    os.removexattr(p, "user.x")
    expect_errno(lambda: os.getxattr(p, "user.x"), errno.ENODATA)
    assert os.getxattr(m.workspace_data("alice", "t") / "f", "user.big") == b"v" * 4000


def test_statvfs(sandbox):
    m, t = sandbox
    v = os.statvfs(t / "workspace")
    h = os.statvfs(m.state_dir)
    assert v.f_bsize > 0 and v.f_frsize > 0
    assert v.f_blocks > 0 and 0 < v.f_bavail <= v.f_blocks
    assert v.f_namemax >= 255
    total_v, total_h = v.f_blocks * v.f_frsize, h.f_blocks * h.f_frsize
    assert abs(total_v - total_h) <= total_h * 0.05, (total_v, total_h)


def test_fsync(ws):
    p = ws / "f"
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"durable")
        os.fsync(fd)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    dfd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    assert p.read_bytes() == b"durable"


def test_fallocate(ws):
    p = ws / "f"
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, 4 * MiB)
        st = os.fstat(fd)
        assert st.st_size == 4 * MiB
        assert st.st_blocks * 512 >= 4 * MiB
        assert os.pread(fd, 16, 2 * MiB) == b"\0" * 16
    finally:
        os.close(fd)


def test_sparse_file(sandbox):
    m, t = sandbox
    p = t / "workspace" / "sparse"
    with open(p, "wb") as f:
        f.seek(GiB)
        f.write(b"x")
    st = os.stat(p)
    assert st.st_size == GiB + 1
    assert st.st_blocks * 512 < MiB, f"st_blocks={st.st_blocks}: the hole was filled"
    with open(p, "rb") as f:
        assert f.read(4096) == b"\0" * 4096
        f.seek(GiB)
        assert f.read() == b"x"
    assert os.stat(m.workspace_data("alice", "t") / "sparse").st_blocks * 512 < MiB


WRITER = textwrap.dedent("""\
    import os, sys
    path, off, size, byte = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    fd = os.open(path, os.O_WRONLY)
    chunk = bytes([byte]) * 65536
    pos = off
    while pos < off + size:
        os.pwrite(fd, chunk, pos)
        pos += len(chunk)
    os.fsync(fd)
    os.close(fd)
    """)


def test_concurrent_writers_two_processes(ws):
    p = ws / "shared"
    size = 16 * MiB
    with open(p, "wb") as f:
        f.truncate(2 * size)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(p), str(i * size), str(size), str(0x41 + i)])
             for i in range(2)]
    for pr in procs:
        assert pr.wait(timeout=120) == 0
    with open(p, "rb") as f:
        a = f.read(size)
        b = f.read(size)
        assert f.read() == b""
    assert a == b"A" * size
    assert b == b"B" * size


def test_mmap_write_read(ws):
    import mmap
    p = ws / "m"
    p.write_bytes(b"\0" * 8192)
    with open(p, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 8192)
        mm[100:105] = b"hello"
        mm.flush()
        mm.close()
    assert p.read_bytes()[100:105] == b"hello"


def test_data_dirs_are_backed_by_state_dir(sandbox):
    m, t = sandbox
    for sub in ("workspace", "uploads", "outputs"):
        (t / sub / "x.txt").write_text(sub)
        assert (m.thread_data("alice", "t") / "user-data" / sub / "x.txt").read_text() == sub
    (t / "skills" / "s.md").write_text("skill")
    assert (m.thread_data("alice", "t") / "skills" / "s.md").read_text() == "skill"
    os.mkdir(t / "workspace" / "sub")
    assert (m.workspace_data("alice", "t") / "sub").is_dir()
    os.unlink(t / "workspace" / "x.txt")
    assert not (m.workspace_data("alice", "t") / "x.txt").exists()


# --------------------------------------------------------------------------
# escape attempts


def test_dotdot_stays_in_mount(sandbox):
    m, t = sandbox
    ws = t / "workspace"
    up1 = os.path.join(ws, "..")
    up2 = os.path.join(ws, "..", "..")
    assert os.stat(up1).st_ino == os.stat(t).st_ino
    assert os.stat(up2).st_ino == os.stat(m.mnt / "alice").st_ino
    assert {"id", "status"} <= set(os.listdir(up1))
    assert os.listdir(up2) == ["t"]
    assert "user-data" not in os.listdir(up1)
    (ws / "sub").mkdir()
    with open(os.path.join(ws, "sub", "..", "x.txt"), "w") as f:
        f.write("in")
    assert (ws / "x.txt").read_text() == "in"
    flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
    expect_errno(lambda: os.open(os.path.join(ws, "..", "evil"), flags, 0o644), errno.EPERM)
    expect_errno(lambda: os.open(os.path.join(ws, "..", "..", "evil"), flags, 0o644), errno.EPERM)
    td = m.thread_data("alice", "t")
    assert not (td / "evil").exists() and not (td.parent / "evil").exists()
    assert not (td / "user-data" / "evil").exists()


def test_symlink_up_not_followed_by_daemon(sandbox):
    m, t = sandbox
    ws = t / "workspace"
    td = m.thread_data("alice", "t")
    os.symlink("../../", ws / "up")
    assert os.readlink(ws / "up") == "../../"
    # the mount is nosymfollow: the host never follows it (DESIGN §3)
    expect_errno(lambda: os.stat(ws / "up"), errno.ELOOP)
    expect_errno(lambda: os.listdir(ws / "up"), errno.ELOOP)
    flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
    expect_errno(lambda: os.open(ws / "up" / "x", flags, 0o644), errno.ELOOP)
    assert not (td / "x").exists() and not (td / "user-data" / "x").exists()
    # the daemon acts on the link itself, never on what it points at
    outside = m.base / "outside.txt"
    outside.write_text("host")
    os.utime(outside, (1_000_000_000, 1_000_000_000))
    os.symlink(str(outside), ws / "out")
    os.utime(ws / "out", (1_200_000_000, 1_200_000_000), follow_symlinks=False)
    assert int(os.stat(outside).st_mtime) == 1_000_000_000
    os.unlink(ws / "out")
    assert outside.read_text() == "host"
    os.symlink("../../../../../../../..", ws / "deep")
    os.rename(ws / "deep", ws / "deep2")
    assert os.readlink(ws / "deep2") == "../../../../../../../.."
