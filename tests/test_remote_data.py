# SPDX-License-Identifier: MIT
"""Remote files (fs/rfiles.c) and the skills upload sync (skills/) against the
real opensandbox provider and the OpenSandbox test server
(tests/fakes/opensandbox_server.py): only file operations, jobs, and the
fake's own request log (/_fake/requests) to count what reached the server.

Skipped when this build has no opensandbox provider (the provider comes from
the remote branch)."""

import errno
import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "fakes" / "opensandbox_server.py"


def _has_provider(name):
    conf = Path("/tmp") / f"sbxfs-probe-{os.getpid()}.conf"
    conf.write_text(f"use: {name}\nstate_dir: /tmp/sbxfs-probe-{os.getpid()}\n")
    try:
        r = subprocess.run([str(REPO / "sbxfs"), "--check-config", str(conf)], capture_output=True, text=True,
                           timeout=30)
        return "must name a provider" not in r.stderr
    finally:
        conf.unlink()


pytestmark = pytest.mark.skipif(not _has_provider("opensandbox"), reason="no opensandbox provider in this build")


class Fake:
    def __init__(self, base):
        base.mkdir(parents=True, exist_ok=True)
        self.base = base
        self.log = open(base / "fake.log", "wb")
        self.proc = subprocess.Popen([sys.executable, str(FAKE), "--root", str(base / "root"), "--port-file",
                                      str(base / "port"), "--ready-delay", "0", "--graceful-close", "0"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while not (base / "port").exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, "the fake did not start"
            time.sleep(0.05)
        self.port = int((base / "port").read_text())

    def ctl(self, method, path, body=None):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/_fake/{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=15) as r:
            text = r.read()
        return json.loads(text) if text else None

    def counters(self):
        return self.ctl("GET", "requests")["counters"]

    def uploads(self):
        return sum(v for k, v in self.counters().items() if k.endswith("files/upload"))

    def rootfs(self):
        sbs = self.ctl("GET", "state")["sandboxes"]
        assert len(sbs) == 1
        sb = sbs[0] if isinstance(sbs, list) else next(iter(sbs.values()))
        return Path(sb["rootfs"])

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture
def remote(sbxfs, tmp_path):
    fake = Fake(tmp_path / "fake")
    inst = sbxfs(config={"use": "opensandbox", "domain": f"127.0.0.1:{fake.port}", "protocol": "http",
                         "replicas": 2})
    d = inst.mnt / "alice" / "t"
    os.makedirs(d)
    yield inst, d, fake
    try:
        os.rmdir(d)
    except OSError:
        pass
    inst.stop()
    fake.stop()


def run(d, name, cmd):
    j = d / "jobs" / name
    j.mkdir()
    (j / "cmd").write_text(cmd)
    code = int((j / "exit").read_text())
    return code, (j / "stdout").read_text()


def wait_for(pred, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


# ---- remote files ----------------------------------------------------------------


def test_50mib_round_trip(remote):
    _, d, _ = remote
    data = os.urandom(50 << 20)
    (d / "workspace" / "big").write_bytes(data)
    code, out = run(d, "sum", "sha256sum /mnt/user-data/workspace/big")
    assert code == 0 and out.split()[0] == hashlib.sha256(data).hexdigest()
    assert (d / "workspace" / "big").read_bytes() == data
    with open(d / "workspace" / "big", "rb") as f:  # a ranged read: one piece, not the file
        f.seek(30 << 20)
        assert f.read(10) == data[30 << 20:(30 << 20) + 10]


def test_1000_small_files(remote):
    _, d, _ = remote
    w = d / "workspace" / "many"
    w.mkdir()
    for i in range(1000):
        (w / f"f{i:04d}").write_text(f"{i}\n")
    assert len(os.listdir(w)) == 1000
    code, out = run(d, "count", "ls /mnt/user-data/workspace/many | wc -l; cat /mnt/user-data/workspace/many/f0999")
    assert code == 0 and out.split() == ["1000", "999"]
    assert (w / "f0500").read_text() == "500\n"


def test_rename_truncate_unlink_rmdir(remote):
    _, d, _ = remote
    w = d / "workspace"
    (w / "a").write_text("abcdef")
    (w / "sub").mkdir()
    os.rename(w / "a", w / "sub" / "b")
    assert not (w / "a").exists() and (w / "sub" / "b").read_text() == "abcdef"
    (w / "c").write_text("old")
    os.rename(w / "sub" / "b", w / "c")  # replaces
    assert (w / "c").read_text() == "abcdef"
    os.truncate(w / "c", 3)
    assert (w / "c").read_text() == "abc"
    with open(w / "c", "r+b") as f:
        f.truncate(1)
    assert (w / "c").read_bytes() == b"a"
    with pytest.raises(OSError) as e:
        os.rmdir(w / "sub") if os.listdir(w / "sub") else os.rmdir(w / "nonexistent")
    assert e.value.errno == errno.ENOENT
    (w / "sub" / "x").write_text("x")
    with pytest.raises(OSError) as e:
        os.rmdir(w / "sub")
    assert e.value.errno == errno.ENOTEMPTY
    (w / "sub" / "x").unlink()
    os.rmdir(w / "sub")
    code, out = run(d, "ls", "ls /mnt/user-data/workspace; cat /mnt/user-data/workspace/c")
    assert out.split() == ["c", "a"]


def test_a_jobs_change_is_seen_at_the_next_open(remote):
    _, d, _ = remote
    f = d / "workspace" / "f"
    f.write_text("mine\n")
    assert f.read_text() == "mine\n"
    code, _ = run(d, "w", "echo theirs > /mnt/user-data/workspace/f; mkdir /mnt/user-data/workspace/newdir")
    assert code == 0
    assert f.read_text() == "theirs\n"
    assert (d / "workspace" / "newdir").is_dir()


def test_hostile_names_and_types_from_a_job(remote):
    _, d, _ = remote
    code, _ = run(d, "plant", "cd /mnt/user-data/workspace && mkfifo fifo && ln -s /etc/passwd link && "
                              "touch \"$(printf 'new\\nline')\" && echo ok > plain")
    assert code == 0
    names = set(os.listdir(d / "workspace"))
    assert {"fifo", "link", "new\nline", "plain"} <= names
    assert (d / "workspace" / "new\nline").read_text() == ""
    with pytest.raises(OSError):
        (d / "workspace" / "fifo").read_text()  # never opened on the sandbox's side
    assert (d / "workspace" / "plain").read_text() == "ok\n"


def test_failed_upload_fails_close_and_keeps_the_copy(remote):
    _, d, fake = remote
    f = d / "workspace" / "keep"
    fake.ctl("POST", "faults", {"kind": "http_error", "status": 500, "path": "files/upload"})
    fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"precious")
    with pytest.raises(OSError) as e:
        os.close(fd)
    assert e.value.errno == errno.EIO
    assert f.read_bytes() == b"precious"  # the local copy
    fake.ctl("DELETE", "faults")
    with open(f, "r+b") as h:
        os.fsync(h.fileno())  # retried: now it reaches the sandbox
    code, out = run(d, "cat", "cat /mnt/user-data/workspace/keep")
    assert out == "precious"


# ---- skills -----------------------------------------------------------------------


def make_tree(root, n=445):
    for i in range(n):
        p = root / f"skill{i % 15:02d}" / f"d{(i // 15) % 3}"
        p.mkdir(parents=True, exist_ok=True)
        (p / f"f{i:03d}.md").write_text(f"file {i}\n")


def skills_status(d):
    return json.loads((d / "status").read_text())["skills"]


def fsync_dir(p):
    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_skills_initial_sync_then_one_change_is_one_upload(remote):
    _, d, fake = remote
    sk = d / "skills"
    before = fake.uploads()
    make_tree(sk)
    fsync_dir(sk)  # returns once the sandbox has all of it
    assert fake.uploads() - before == 445
    st = skills_status(d)
    assert st["generation_synced"] == st["generation_written"] and st["state"] == "synced"
    code, out = run(d, "n", "find /mnt/skills -type f | wc -l; cat /mnt/skills/skill03/d1/f108.md")
    assert out.split() == ["445", "file", "108"]
    before = fake.uploads()
    with open(sk / "skill03" / "d1" / "f108.md", "w") as f:
        f.write("changed\n")
        f.flush()
        os.fsync(f.fileno())
    assert fake.uploads() - before == 1
    code, out = run(d, "c", "cat /mnt/skills/skill03/d1/f108.md")
    assert out == "changed\n"


def test_skills_deletions_propagate(remote):
    _, d, fake = remote
    sk = d / "skills"
    make_tree(sk, 30)
    fsync_dir(sk)
    (sk / "skill00" / "d0" / "f000.md").unlink()
    subprocess.run(["rm", "-rf", str(sk / "skill01")], check=True)
    fsync_dir(sk)
    code, out = run(d, "ls", "test -e /mnt/skills/skill00/d0/f000.md || echo gone1; "
                             "test -e /mnt/skills/skill01 || echo gone2")
    assert out.split() == ["gone1", "gone2"]


def test_skills_rmdir_drains_a_running_sync(remote):
    inst, d, fake = remote
    sk = d / "skills"
    fake.ctl("POST", "faults", {"kind": "delay", "ms": 50, "path": "files/upload"})
    make_tree(sk, 40)
    os.rmdir(d)  # waits for the sync: the warm sandbox has every file
    fake.ctl("DELETE", "faults")
    files = list((fake.rootfs() / "mnt" / "skills").rglob("*.md"))
    assert len(files) == 40
    os.makedirs(d)  # reclaimed: nothing to upload again
    before = fake.uploads()
    fsync_dir(d / "skills")
    assert fake.uploads() == before
