# SPDX-License-Identifier: MIT
"""Issue 22 point 4: state_dir's filesystem fills up.

state_dir is a small ext4 on a loop device made by the test.  While jobs
write output and the daemon saves records, the disk is filled through the
mount: writers get ENOSPC (never EIO, never a hang), no record file is left
torn or half-written (every JSON record under state_dir parses, no *.tmp.*
is left), reads, status and rmdir keep working, and once space is freed
writes, jobs and new sandboxes work again.

Teardown, whatever happened: the daemon is stopped (by its pid if need be)
and what names the state_dir killed by pid, then the filesystem is
unmounted, then the loop device detached."""

import errno
import json
import os
import subprocess
import time

import pytest

import sbxutil
import test_jobs as J
from sbxutil import read_json, wait_until

DENY_JOB = ("python3 -c \"import socket; s=socket.create_connection(('127.0.0.1',3128)); "
            "s.sendall(b'CONNECT api.example.test:443 HTTP/1.1\\r\\n\\r\\n'); print(s.recv(999).decode())\"")


def _event(t):
    fd = os.open(t / "events", os.O_RDONLY | os.O_NONBLOCK)
    try:
        return json.loads(os.read(fd, 65536))
    except BlockingIOError:
        return None
    finally:
        os.close(fd)


def _decision(t, rid):
    return {e["request_id"]: e.get("decision") for e in read_json(t / "network")["events"]}.get(rid, "missing")

MiB = 1 << 20


def _run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60)


@pytest.fixture
def small_state(sbxfs, tmp_path):
    """An sbxfs (not started) whose state_dir is a 48 MiB ext4 on a loop device."""
    inst = sbxfs(config={"network": {"mode": "allowlist", "approval": "prompt",
                                     "allow_domains": ["static.example.test"]}}, start=False)
    img = tmp_path / "state.img"
    with open(img, "wb") as f:
        f.truncate(48 * MiB)
    r = _run("mkfs.ext4", "-q", "-F", "-m", "0", "-N", "4096", str(img))
    assert r.returncode == 0, r.stderr
    r = _run("losetup", "--find", "--show", str(img))
    if r.returncode != 0:
        pytest.skip(f"no loop device here: {r.stderr.strip()}")
    loop = r.stdout.strip()
    mounted = False
    try:
        inst.state_dir.mkdir(exist_ok=True)
        r = _run("mount", "-t", "ext4", loop, str(inst.state_dir))
        assert r.returncode == 0, r.stderr
        mounted = True
        os.chmod(inst.state_dir, 0o755)
        yield inst
    finally:
        if inst.proc is not None:
            inst.cleanup()  # unmount the FUSE mount, stop the daemon, kill leftovers by pid
        if mounted:
            r = _run("umount", str(inst.state_dir))
            if r.returncode != 0:
                _run("umount", "-l", str(inst.state_dir))
        _run("losetup", "-d", loop)


def _fill(path, chunk=1 * MiB, limit=64 * MiB):
    """Write path until the filesystem is full: returns (bytes, errno)."""
    n = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        buf = b"f" * chunk
        while n < limit:
            try:
                n += os.write(fd, buf)
            except OSError as e:
                return n, e.errno
        try:
            os.fsync(fd)
        except OSError as e:
            return n, e.errno
        return n, None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _records_whole(state_dir):
    """Every record the daemon keeps under state_dir (JSON files outside the
    data directories) parses, and no half-written *.tmp.* is left."""
    bad = []
    for root, dirs, files in os.walk(state_dir):
        parts = root.split(os.sep)
        if "user-data" in parts or "skills" in parts or "lost+found" in parts:
            dirs[:] = []
            continue
        for f in files:
            p = os.path.join(root, f)
            if ".tmp." in f:
                bad.append(f"half-written: {p}")
            elif f.endswith(".json"):
                try:
                    with open(p) as fh:
                        json.load(fh)
                except ValueError as e:
                    bad.append(f"torn: {p}: {e}")
    return bad


@pytest.mark.timeout_s(150)
def test_full_state_dir_gives_enospc_keeps_records_whole_and_recovers(small_state):
    m = small_state
    m.start()
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    m.init_pid(t)
    keep = t / "workspace" / "keep.txt"
    with open(keep, "wb") as f:
        f.write(b"kept\n")
        f.flush()
        os.fsync(f.fileno())

    # a network event waiting for a decision
    d = J.mkjob(t, "deny")
    J.start(d, DENY_JOB)
    ev = wait_until(lambda: _event(t), 20)
    assert ev, "no network event"
    rid = ev["request_id"]
    undecided = _decision(t, rid)

    # jobs that write output into state_dir while it fills
    writers = []
    for i in range(3):
        j = J.mkjob(t, f"w{i}")
        # a writer stops once its output is refused (EPIPE kills its tr):
        # 4000 more rounds of two processes each would take minutes on a loaded host
        J.start(j, "i=0; while [ $i -lt 4000 ]; do head -c 8192 /dev/zero | tr '\\0' x || break; i=$((i+1)); done")
        writers.append(j)
    inside = J.mkjob(t, "inside")
    J.start(inside, "dd if=/dev/zero of=big bs=1M count=80 2>&1; echo dd=$?")

    n, err = _fill(t / "workspace" / "fill")
    assert err == errno.ENOSPC, f"filling the disk through the mount: {n} bytes then {err and errno.errorcode[err]}"

    # while full: the job files' records, decisions and sandboxes give ENOSPC or work
    for i in range(3):
        try:
            j = J.mkjob(t, f"full{i}")
            J.start(j, "echo hi")
        except OSError as e:
            assert e.errno == errno.ENOSPC, f"job start on a full disk: {e}"
    # a decision the disk cannot record is refused and changes nothing (it
    # would be gone after a restart)
    # (what the refused job starts freed is taken again first: the disk must be full now)
    _, err = _fill(t / "workspace" / "fill-top", chunk=1024)
    assert err == errno.ENOSPC
    sbxutil.expect_errno(lambda: J.write_ctl(t / "network", f"allow_sandbox {rid}"), errno.ENOSPC)
    assert _decision(t, rid) == undecided, read_json(t / "network")
    assert "network" in m.log and "No space left" in m.log
    try:
        sbxutil.mkdir_ready(m.mnt / "alice" / "other")
    except OSError as e:
        # acquire: async: ENOENT when the create had failed (ENOSPC) before
        # `ready` was read: the directory was gone already
        assert e.errno in (errno.ENOSPC, errno.ENOENT), f"mkdir of a sandbox on a full disk: {e}"
        assert not (m.mnt / "alice" / "other").exists()
    small = t / "workspace" / "small"
    try:
        with open(small, "wb") as f:
            f.write(b"s" * 65536)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        assert e.errno == errno.ENOSPC, f"a write on a full disk: {e}"

    # reads, status and rmdir keep working
    for j in writers + [inside]:
        assert J.wait_exit(j, 60) >= 0
        assert read_json(j / "status")["state"] in ("exited", "killed", "lost"), read_json(j / "status")
    assert keep.read_bytes() == b"kept\n"
    assert sbxutil.status(t)["state"] == "active"
    assert read_json(m.mnt / ".status")
    assert not _records_whole(m.state_dir), _records_whole(m.state_dir)
    os.rmdir(t)
    assert not t.exists()
    os.mkdir(t)
    assert keep.read_bytes() == b"kept\n"

    # free the space: everything resumes
    os.unlink(t / "workspace" / "fill")
    os.unlink(t / "workspace" / "fill-top")
    for name in ("big", "small"):
        try:
            os.unlink(t / "workspace" / name)
        except FileNotFoundError:
            pass
    for j in writers:
        os.rmdir(j)
    assert wait_until(lambda: os.statvfs(m.state_dir).f_bavail * os.statvfs(m.state_dir).f_frsize > 16 * MiB, 20)
    with open(t / "workspace" / "after", "wb") as f:
        f.write(b"a" * MiB)
        f.flush()
        os.fsync(f.fileno())
    assert (t / "workspace" / "after").stat().st_size == MiB
    code, out, _ = J.run_job(t, "after", "echo ok; cat keep.txt")
    assert (code, out) == (0, "ok\nkept\n")
    J.write_ctl(t / "network", f"allow_sandbox {rid}")
    decided = _decision(t, rid)
    assert decided != undecided, read_json(t / "network")
    os.mkdir(m.mnt / "alice" / "t2")
    code, out, _ = J.run_job(m.mnt / "alice" / "t2", "j", "echo two")
    assert (code, out) == (0, "two\n")
    assert not _records_whole(m.state_dir), _records_whole(m.state_dir)

    # a kill -9 on a disk that was full: the records the next start reads are whole
    m.kill9()
    m.restart()
    os.mkdir(t)
    assert keep.read_bytes() == b"kept\n"
    assert not _records_whole(m.state_dir), _records_whole(m.state_dir)
    assert _decision(t, rid) == decided, read_json(t / "network")
    # the jobs that ended while their result could not be saved: finished
    # or lost, with an exit to read, never running for ever or gone
    for name in ["inside", "after"]:
        j = t / "jobs" / name
        st = read_json(j / "status")
        assert st["state"] in ("exited", "killed", "lost"), st
        assert J.wait_exit(j, 10) >= 0
    assert m.stop() == 0
