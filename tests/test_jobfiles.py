# SPDX-License-Identifier: MIT
"""Job files agents and shells can rely on (DESIGN §6): a command written in
many write(2) calls runs whole and starts at close; readers never wait
forever (rmdir answers them, a never-started job is ESRCH); stdout/stderr
report their size; stdin has a cap."""

import errno
import os
import subprocess
import threading
import time

import pytest

import sbxutil
from sbxutil import expect_errno, read_json, read_text, wait_until
from test_jobs import cat, jstatus, mkjob, start, wait_exit, write_ctl

MiB = 1 << 20


def _script(lines):
    return "".join(f"echo line-{i:05d} $((1 + {i}))\n" for i in range(lines))


@pytest.mark.timeout_s(60)
def test_command_in_many_writes_runs_whole(sandbox):
    m, t = sandbox
    j = mkjob(t, "big")
    text = _script(3600)  # ~100 KiB, several FUSE writes
    assert len(text) > 100 * 1024
    fd = os.open(j / "cmd", os.O_WRONLY)
    try:
        for off in range(0, len(text), 4096):  # an agent writing in chunks
            assert os.write(fd, text[off:off + 4096].encode()) == len(text[off:off + 4096])
        # nothing runs before the writer closes
        assert jstatus(j)["state"] == "created"
    finally:
        os.close(fd)
    assert jstatus(j)["state"] in ("running", "exited"), "a read after close must see the job started"
    assert wait_exit(j, 30) == 0
    out = read_text(j / "stdout").splitlines()
    assert len(out) == 3600 and out[0] == "line-00000 1" and out[-1] == "line-03599 3600", (len(out), out[-1:])


@pytest.mark.timeout_s(60)
def test_shell_heredoc_and_multiline_echo(sandbox):
    m, t = sandbox
    j1, j2 = mkjob(t, "heredoc"), mkjob(t, "echo")
    r = subprocess.run(["bash", "-c", f"cat > {j1}/cmd <<'EOF'\necho one\necho two\necho three\nEOF\n"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["sh", "-c", f"printf 'echo a\\necho b\\n' > {j2}/cmd"], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 0, r.stderr
    assert wait_exit(j1) == 0 and wait_exit(j2) == 0
    assert read_text(j1 / "stdout") == "one\ntwo\nthree\n"
    assert read_text(j2 / "stdout") == "a\nb\n"


def test_start_error_is_the_error_of_close(sandbox):
    m, t = sandbox
    j = mkjob(t, "j")
    fd = os.open(j / "cmd", os.O_WRONLY)
    os.write(fd, b"  \n\n")
    expect_errno(lambda: os.close(fd), errno.EINVAL)
    assert jstatus(j)["state"] == "created"
    expect_errno(lambda: write_ctl(j / "cmd", b"echo \0 x\n"), errno.EINVAL)
    assert jstatus(j)["state"] == "created"
    start(j, "echo fine")
    assert wait_exit(j) == 0


def test_fsync_of_cmd_starts_the_job(sandbox):
    m, t = sandbox
    j = mkjob(t, "j")
    fd = os.open(j / "cmd", os.O_WRONLY)
    try:
        os.write(fd, b"echo synced\n")
        os.fsync(fd)
        assert jstatus(j)["state"] in ("running", "exited")
        expect_errno(lambda: os.write(fd, b"echo more\n"), errno.EBUSY)
    finally:
        os.close(fd)
    assert wait_exit(j) == 0 and read_text(j / "stdout") == "synced\n"


def test_exit_of_a_never_started_job_is_esrch(sandbox):
    m, t = sandbox
    j = mkjob(t, "idle")
    t0 = time.monotonic()
    rc, out, err = cat(j / "exit", timeout=10)
    assert rc != 0 and b"No such process" in err, (rc, out, err)
    assert time.monotonic() - t0 < 5
    assert cat(j / "stdout", timeout=10)[:2] == (0, b"")


@pytest.mark.timeout_s(60)
def test_rmdir_of_a_job_answers_its_blocked_readers(sandbox):
    m, t = sandbox
    j = mkjob(t, "slot")
    writer = os.open(j / "cmd", os.O_WRONLY)  # someone is about to start it: readers wait
    try:
        readers = [subprocess.Popen(["cat", str(j / f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                   for f in ("exit", "stdout", "exit")]
        time.sleep(1.0)
        assert all(p.poll() is None for p in readers), "readers did not wait"
        os.rmdir(j)
        for p in readers:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                raise AssertionError("a reader stayed blocked after rmdir of its job")
            assert p.returncode != 0
    finally:
        os.close(writer)
    assert not (t / "jobs" / "slot").exists()
    assert m.stop() == 0, "unmount failed: a request is still held"


@pytest.mark.timeout_s(60)
def test_stdout_size_grows_and_tail_f_never_sees_a_truncation(sandbox):
    m, t = sandbox
    j = mkjob(t, "ticks")
    tail = subprocess.Popen(["tail", "-f", str(j / "stdout")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = b""
    try:
        start(j, "for i in 1 2 3; do echo tick-$i; sleep 1; done")
        sizes = []
        for _ in range(8):
            sizes.append(os.stat(j / "stdout").st_size)
            time.sleep(0.4)
        assert wait_exit(j) == 0
        assert sizes == sorted(sizes) and 0 < max(sizes), sizes
        assert os.stat(j / "stdout").st_size == len("tick-1\ntick-2\ntick-3\n")
        st = os.stat(j / "status")
        assert st.st_size == len(read_text(j / "status").encode()), "status size is not its length"
        assert os.stat(j / "exit").st_size == 2
        out = sbxutil.read_until(tail, lambda o: o.count(b"tick-") == 3, 20)
        time.sleep(1.5)  # and a check of tail's after the end: no "file truncated"
    finally:
        tail.terminate()
        rest, err = tail.communicate(timeout=10)
        out += rest
    assert b"truncated" not in err, err
    assert out.decode().count("tick-") == 3, out


@pytest.mark.timeout_s(120)
def test_stdin_has_a_cap(sandbox):
    m, t = sandbox
    j = mkjob(t, "in")
    chunk = b"x" * MiB
    fd = os.open(j / "stdin", os.O_WRONLY)
    try:
        for _ in range(64):
            assert os.write(fd, chunk) == MiB
        expect_errno(lambda: os.write(fd, b"one byte more"), errno.EFBIG)
    finally:
        os.close(fd)
    start(j, "wc -c")
    assert wait_exit(j) == 0
    assert read_text(j / "stdout").strip() == str(64 * MiB)
    assert "stdin" in m.log and "refused" in m.log


def test_non_utf8_command_runs(sandbox):
    m, t = sandbox
    j = mkjob(t, "bytes")
    assert write_ctl(j / "cmd", b"printf '\\377ok\\n' # \xff\xfe caf\xe9\n") > 0
    assert wait_exit(j) == 0
    assert open(j / "stdout", "rb").read() == b"\xffok\n"
    assert "caf" in jstatus(j)["cmd"]
