# SPDX-License-Identifier: MIT
"""Kernel FUSE passthrough (issue 14): on a build with libfuse >= 3.16 and a
kernel >= 6.9, data files really take the passthrough path, counted by the
daemon (.metrics sbxfs_data_opens_total), and keep the semantics the rest of
the suite checks through it (a job's appends seen by an open reader, mmap).

On the copy build (the system's libfuse 3.14) these tests are skipped: CI runs
the suite on both builds."""

import mmap
import os
import platform
import re
from pathlib import Path

import pytest

import sbxutil
from test_jobs import run_job

REPO = Path(__file__).resolve().parent.parent


def _build_has_passthrough():
    try:
        text = (REPO / "build" / "libfuse.mk").read_text()
    except OSError:
        return False
    return "FUSE_PASSTHROUGH := 1" in text


def _kernel_has_passthrough():
    m = re.match(r"(\d+)\.(\d+)", platform.release())
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (6, 9)


@pytest.fixture
def pt(sandbox):
    inst, d = sandbox
    if not (_build_has_passthrough() and _kernel_has_passthrough()):
        pytest.skip("the copy build (libfuse < 3.16) or a kernel before 6.9")
    st = sbxutil.read_json(inst.mnt / ".status")
    assert st["data_path"] == "passthrough", st
    return inst, d


def _opens(inst):
    m = sbxutil.parse_metrics((inst.mnt / ".metrics").read_text())
    return (m['sbxfs_data_opens_total{path="passthrough"}'], m['sbxfs_data_opens_total{path="copy"}'])


def test_data_files_take_the_passthrough_path(pt):
    inst, d = pt
    ws = d / "workspace"
    p0, c0 = _opens(inst)
    data = os.urandom(3 << 20)
    (ws / "f.bin").write_bytes(data)
    assert (ws / "f.bin").read_bytes() == data
    with open(ws / "f.bin", "r+b") as f:
        f.seek(1 << 20)
        f.write(b"x" * 10)
    p1, c1 = _opens(inst)
    assert p1 - p0 >= 3, (p0, p1)
    assert c1 == c0, f"{c1 - c0} opens took the copy path"
    assert "cannot be a passthrough backing file" not in inst.log


def test_a_jobs_append_is_seen_by_an_open_reader(pt):
    """No FUSE page cache between the reader and the host file: bytes a job
    appends in the sandbox are read through a file opened before, at once."""
    inst, d = pt
    ws = d / "workspace"
    (ws / "log.txt").write_bytes(b"first\n")
    with open(ws / "log.txt", "rb") as f:
        assert f.read() == b"first\n"
        code, _, err = run_job(d, "app", "printf 'second\\n' >> /mnt/user-data/workspace/log.txt")
        assert code == 0, err
        assert f.read() == b"second\n"
        f.seek(0)
        assert f.read() == b"first\nsecond\n"
    assert os.stat(ws / "log.txt").st_size == len(b"first\nsecond\n")


def test_mmap_through_passthrough(pt):
    inst, d = pt
    ws = d / "workspace"
    (ws / "m.bin").write_bytes(b"\0" * 8192)
    p0, c0 = _opens(inst)
    with open(ws / "m.bin", "r+b") as f:
        with mmap.mmap(f.fileno(), 8192) as m:
            m[4096:4101] = b"hello"
            m.flush()
    assert inst.workspace_data("alice", "t").joinpath("m.bin").read_bytes()[4096:4101] == b"hello"
    p1, c1 = _opens(inst)
    assert p1 > p0 and c1 == c0
