# SPDX-License-Identifier: MIT
"""DESIGN §3: the namespace — walk-through, name and depth errors, control
files, reuse (EEXIST)."""

import errno
import json
import os
import subprocess
from datetime import datetime

import pytest

import sbxutil
from sbxutil import expect_errno, read_json, read_text

STATUS_KEYS = {"id", "user", "thread", "provider", "state", "created_at", "acquired_at",
               "remote_id", "init_pid", "uid", "network_mode", "skills"}
ROOT_STATUS_KEYS = {"provider", "version", "uptime", "active", "warm", "creating", "replicas",
                    "idle_timeout", "idle_check_interval", "last_error"}


def sh(cmd, **kw):
    return subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=60, **kw)


def parse_iso(s):
    assert isinstance(s, str), s
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_walk_through(mnt):
    sbx = mnt.mnt
    assert sbxutil.mount_fstype(sbx) == "fuse.sbxfs"
    t = sbx / "alice" / "thread-1"

    r = sh(f"mkdir -p {t}")
    assert r.returncode == 0, r.stderr
    assert t.is_dir()
    assert sorted(os.listdir(sbx / "alice")) == ["thread-1"]
    names = set(os.listdir(t))
    for n in ("id", "status", "workspace", "uploads", "outputs", "skills"):
        assert n in names, f"{n} missing from {sorted(names)}"
    for n in ("workspace", "uploads", "outputs", "skills"):
        assert (t / n).is_dir()

    r = sh(f"cat {t}/id")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == sbxutil.SCOPE_TOKEN_ALICE_THREAD1

    r = sh(f"cat {t}/status")
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    missing = STATUS_KEYS - set(st)
    assert not missing, f"status lacks {missing}: {st}"
    assert st["id"] == sbxutil.SCOPE_TOKEN_ALICE_THREAD1
    assert st["user"] == "alice" and st["thread"] == "thread-1"
    assert st["provider"] == "local"
    assert st["state"] == "active"
    parse_iso(st["created_at"])
    parse_iso(st["acquired_at"])
    pid = mnt.init_pid(t)
    assert st["remote_id"] == f"pid:{pid}"
    assert sbxutil.pid_alive(pid), f"init pid {pid} from status is not a live process"

    r = sh(f"echo hi > {t}/workspace/a.txt")
    assert r.returncode == 0, r.stderr
    assert read_text(t / "workspace" / "a.txt") == "hi\n"
    assert (mnt.workspace_data("alice", "thread-1") / "a.txt").read_text() == "hi\n"

    r = sh(f"rmdir {t}")
    assert r.returncode == 0, r.stderr
    assert not t.exists()
    assert "thread-1" not in os.listdir(sbx / "alice")

    r = sh(f"mkdir {t}")
    assert r.returncode == 0, r.stderr
    assert read_text(t / "workspace" / "a.txt") == "hi\n"

    for name in (".status", ".metrics", ".config"):
        r = sh(f"cat {sbx}/{name}")
        assert r.returncode == 0, f"cat {name}: {r.stderr}"
        assert r.stdout.strip(), f"{name} is empty"
    rs = read_json(sbx / ".status")
    missing = ROOT_STATUS_KEYS - set(rs)
    assert not missing, f".status lacks {missing}: {rs}"
    assert rs["provider"] == "local"
    assert rs["active"] == 1
    metrics = sbxutil.parse_metrics(read_text(sbx / ".metrics"))
    assert any(k.startswith("sbxfs_sandboxes") for k in metrics), metrics
    assert "replicas" in read_text(sbx / ".config")


def test_root_listing_and_user_dir(mnt):
    names = set(os.listdir(mnt.mnt))
    assert {".status", ".metrics", ".config", ".health"} <= names
    os.mkdir(mnt.mnt / "bob")
    assert "bob" in os.listdir(mnt.mnt)
    assert (mnt.mnt / "bob").is_dir()
    assert os.listdir(mnt.mnt / "bob") == []


BAD_NAMES = ["a b", "x" * 65, ".hidden", "a.b", "é", "a:b", "..."]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_bad_user_name_is_einval(mnt, name):
    before = set(os.listdir(mnt.mnt))
    expect_errno(lambda: os.mkdir(mnt.mnt / name), errno.EINVAL)
    assert set(os.listdir(mnt.mnt)) == before
    assert not (mnt.state_dir / "users" / name).exists()


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_bad_thread_name_is_einval(mnt, name):
    os.mkdir(mnt.mnt / "alice")
    expect_errno(lambda: os.mkdir(mnt.mnt / "alice" / name), errno.EINVAL)
    assert os.listdir(mnt.mnt / "alice") == []
    assert not (mnt.thread_data("alice", name)).exists()


def test_name_boundaries_accepted(mnt):
    u = "U_-9" + "x" * 60  # 64 characters, every allowed class
    assert len(u) == 64
    d = mnt.mnt / u / ("T-_0" + "y" * 60)
    os.makedirs(d)
    assert (d / "workspace").is_dir()


def test_mkdir_p_bad_thread_creates_nothing(mnt):
    r = sh(f"mkdir -p '{mnt.mnt}/alice/a b'")
    assert r.returncode != 0
    assert "Invalid argument" in r.stderr, r.stderr
    assert os.listdir(mnt.mnt / "alice") == []


def test_wrong_depth_mkdir_is_eperm(sandbox):
    m, t = sandbox
    expect_errno(lambda: os.mkdir(t / "x"), errno.EPERM)
    expect_errno(lambda: os.mkdir(t / "x" / "y"), errno.ENOENT, errno.EPERM)
    assert "x" not in os.listdir(t)


def test_files_at_root_and_user_dirs_are_eperm(sandbox):
    m, t = sandbox
    flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
    for d in (m.mnt, m.mnt / "alice", t):
        expect_errno(lambda: os.open(d / "f", flags, 0o644), errno.EPERM)
        assert "f" not in os.listdir(d)
    # a dot-name at the root cannot be made either
    expect_errno(lambda: os.open(m.mnt / ".mine", flags, 0o644), errno.EPERM, errno.EINVAL)


CONTROL = ["id", "status"]
ROOT_CONTROL = [".status", ".metrics", ".config", ".health"]


def _control_paths(m, t):
    return [t / n for n in CONTROL] + [m.mnt / n for n in ROOT_CONTROL]


def test_control_files_cannot_be_opened_for_writing(sandbox):
    m, t = sandbox
    idv = read_text(t / "id")
    for p in _control_paths(m, t):
        for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND):
            def attempt():
                fd = os.open(p, flags)
                try:
                    os.write(fd, b"garbage\n")
                finally:
                    os.close(fd)
            expect_errno(attempt, errno.EPERM, errno.EACCES)
        expect_errno(lambda: os.truncate(p, 0), errno.EPERM, errno.EACCES)
    assert read_text(t / "id") == idv
    assert read_json(t / "status")["state"] == "active"


def test_control_files_mode_is_read_only(sandbox):
    m, t = sandbox
    for p in _control_paths(m, t):
        st = os.stat(p)
        assert st.st_mode & 0o222 == 0, f"{p} mode {oct(st.st_mode)} is writable"


def test_control_files_cannot_be_removed_or_renamed(sandbox):
    m, t = sandbox
    for p in _control_paths(m, t):
        expect_errno(lambda: os.unlink(p), errno.EPERM)
        expect_errno(lambda: os.rename(p, p.parent / (p.name + "2")), errno.EPERM)
        assert p.exists()
    # nor replaced by a rename from a data directory
    f = t / "workspace" / "f"
    f.write_text("x")
    expect_errno(lambda: os.rename(f, t / "id"), errno.EPERM, errno.EXDEV)
    assert len(read_text(t / "id").strip()) == 16
    # data directories cannot be removed or renamed out from under the sandbox
    for n in ("workspace", "uploads", "outputs", "skills"):
        expect_errno(lambda: os.rmdir(t / n), errno.EPERM, errno.EACCES, errno.ENOTEMPTY, errno.EBUSY)
        assert (t / n).is_dir()


def test_control_files_cannot_be_created(sandbox):
    m, t = sandbox
    flags = os.O_CREAT | os.O_WRONLY | os.O_EXCL
    for name in ("events2", "newfile", "id2"):
        expect_errno(lambda: os.open(t / name, flags, 0o644), errno.EPERM)
    expect_errno(lambda: os.symlink("workspace", t / "ln"), errno.EPERM)
    expect_errno(lambda: os.link(t / "id", t / "id-link"), errno.EPERM)


def test_mkdir_active_scope_is_eexist(sandbox):
    m, t = sandbox
    pid = m.init_pid(t)
    expect_errno(lambda: os.mkdir(t), errno.EEXIST)
    expect_errno(lambda: os.mkdir(m.mnt / "alice"), errno.EEXIST)
    assert m.init_pid(t) == pid
    r = sh(f"mkdir -p {t}")  # mkdir -p of an active sandbox is fine
    assert r.returncode == 0, r.stderr


def test_user_dir_rmdir(sandbox):
    m, t = sandbox
    expect_errno(lambda: os.rmdir(m.mnt / "alice"), errno.ENOTEMPTY)
    os.rmdir(t)
    os.rmdir(m.mnt / "alice")
    assert "alice" not in os.listdir(m.mnt)
    expect_errno(lambda: os.rmdir(m.mnt / "nobody"), errno.ENOENT)
    expect_errno(lambda: os.rmdir(m.mnt / ".status"), errno.ENOTDIR, errno.EPERM)


def test_rmdir_of_released_scope_is_enoent(sandbox):
    m, t = sandbox
    os.rmdir(t)
    expect_errno(lambda: os.rmdir(t), errno.ENOENT)
    expect_errno(lambda: os.stat(t / "id"), errno.ENOENT)


def test_bad_lookups_are_enoent(sandbox):
    m, t = sandbox
    for p in (m.mnt / "nobody", m.mnt / "alice" / "nothread", t / "nofile", m.mnt / ".nothing"):
        expect_errno(lambda: os.stat(p), errno.ENOENT)
