# SPDX-License-Identifier: MIT
"""FUSE requests per file operation (issue 23 item 3; docs/performance.md).

The daemon counts the requests it serves by operation
(sbxfs_fuse_requests_total in .metrics).  These tests state what one file
operation costs in requests, on warm caches, so that a change that adds a
round trip to a common path fails here: a warm stat and an `ls -l` after a
listing send none per file, a create is LOOKUP + CREATE + RELEASE and one
GETATTR of its directory, and the daemon reads requests with read(2), not
with a pipe made for each (libfuse >= 3.17 without CAP_SYS_RESOURCE).
"""

import collections
import errno
import os
import shutil
import subprocess
import time

import pytest

from sbxutil import expect_errno, parse_metrics, read_json
from test_uring import needs_uring, param  # noqa: F401 (a fixture)
from test_jobs import run_job

N = 60  # operations per measurement


def _reqs(m):
    with open(m.mnt / ".metrics") as f:
        text = f.read()
    out = collections.Counter()
    for k, v in parse_metrics(text).items():
        if k.startswith('sbxfs_fuse_requests_total{op="'):
            out[k.split('"')[1]] = int(v)
    return out


def _delta(m, fn):
    """Requests fn made, less what reading .metrics costs (measured the same way)."""
    a = _reqs(m)
    b = _reqs(m)
    fn()
    c = _reqs(m)
    d = collections.Counter(c)
    d.subtract(b)
    d.subtract(b - a)
    return collections.Counter({k: v for k, v in d.items() if v > 0})


def test_metrics_count_requests_by_operation(sandbox):
    m, _ = sandbox
    text = (m.mnt / ".metrics").read_text()
    assert "# TYPE sbxfs_fuse_requests_total counter" in text
    names = {k.split('"')[1] for k in parse_metrics(text) if k.startswith("sbxfs_fuse_requests_total{")}
    assert {"lookup", "getattr", "open", "release", "create", "unlink", "opendir", "readdir", "readdirplus",
            "releasedir", "forget", "batch_forget", "write", "read"} <= names, names
    assert _reqs(m)["open"] >= 1 and _reqs(m)["read"] >= 1  # .metrics itself is opened and read


def test_a_missing_name_is_asked_for_once(sandbox):
    m, t = sandbox
    ws = t / "workspace"

    def probe():
        for i in range(N):
            expect_errno(lambda: os.stat(ws / ("missing%d" % i)), errno.ENOENT)

    first = _delta(m, probe)
    assert N <= first["lookup"] < N + 10, first
    # while the watcher serves the sandbox, "no such file" is cached too
    again = _delta(m, probe)
    print("%d lookups of missing names, then again: %s, %s" % (N, dict(first), dict(again)))
    assert again["lookup"] < 5, again
    # and a create (open(name, "w"): no O_EXCL, which makes the kernel ask
    # again) of a name the kernel knows is missing needs no LOOKUP
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    c = _delta(m, lambda: [os.close(os.open(ws / ("missing%d" % i), flags, 0o644)) for i in range(N)])
    assert c["create"] == N and c["lookup"] < 5, c
    assert all((ws / ("missing%d" % i)).exists() for i in range(N))


def test_a_job_end_keeps_the_names_the_host_made(sandbox):
    # each create's LOOKUP answered "no such file" is remembered until the
    # create names it: a job's end (which drops every remembered answer) then
    # leaves the new names cached
    m, t = sandbox
    ws = t / "workspace"
    os.mkdir(ws / "made")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    for i in range(N):
        os.close(os.open(ws / "made" / ("f%d" % i), flags, 0o644))
    expect_errno(lambda: os.stat(ws / "made" / "absent"), errno.ENOENT)
    assert run_job(t, "noop", "true")[0] == 0
    d = _delta(m, lambda: [os.stat(ws / "made" / ("f%d" % i)) for i in range(N)])
    print("stat of %d files made through the mount, after a job's end: %s" % (N, dict(d)))
    assert d["lookup"] < 5, d
    # what was remembered as missing was dropped at the job's end: asked again, once
    a = _delta(m, lambda: [expect_errno(lambda: os.stat(ws / "made" / "absent"), errno.ENOENT) for _ in range(3)])
    assert a["lookup"] == 1, a


def test_a_flood_of_missing_names_is_remembered_up_to_the_bound(sandbox):
    # hostile: a sandbox's reader probing ever new names; at most 4096
    # answers are remembered (and cached), the rest are asked each time
    m, t = sandbox
    ws = t / "workspace"
    os.mkdir(ws / "probe")
    n = 4300

    def probe():
        for i in range(n):
            expect_errno(lambda: os.stat(ws / "probe" / ("n%d" % i)), errno.ENOENT)

    first = _delta(m, probe)
    assert n <= first["lookup"] < n + 10, first
    again = _delta(m, probe)
    print("%d missing names probed twice: %s, then %s" % (n, dict(first), dict(again)))
    assert n - 4096 <= again["lookup"] <= n - 4096 + 20, again
    # a job's end drops them all: everything is asked once more, then cached again
    assert run_job(t, "noop", "true")[0] == 0
    third = _delta(m, probe)
    assert n <= third["lookup"] < n + 10, third


def test_missing_names_are_asked_for_each_time_without_the_watcher(sbxfs):
    m = sbxfs(config={"cache_timeout": 0})
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    m.init_pid(t)
    ws = t / "workspace"
    d = _delta(m, lambda: [expect_errno(lambda: os.stat(ws / "missing"), errno.ENOENT) for _ in range(N)])
    assert N <= d["lookup"] < N + 10, d


def test_a_warm_stat_sends_no_request(sandbox):
    m, t = sandbox
    ws = t / "workspace"
    for i in range(N):
        (ws / ("f%d" % i)).write_bytes(b"x" * 100)
    for i in range(N):
        os.stat(ws / ("f%d" % i))
    d = _delta(m, lambda: [os.stat(ws / ("f%d" % i)) for i in range(N)])
    print("warm stat of %d files: %s" % (N, dict(d)))
    assert sum(d.values()) < 5, d


def test_ls_l_after_a_listing_sends_no_lookup(sandbox):
    # files a job made: the host has no entry of them until it lists the directory
    m, t = sandbox
    ws = t / "workspace"
    assert run_job(t, "mk", "mkdir /mnt/user-data/workspace/d && cd /mnt/user-data/workspace/d && "
                   "for i in $(seq %d); do echo $i > f$i; done" % N)[0] == 0
    d = ws / "d"

    def ls_l():
        with os.scandir(d) as it:
            return [e.stat(follow_symlinks=False).st_size for e in it]

    first = _delta(m, ls_l)
    print("first ls -l of %d files a job made: %s" % (N, dict(first)))
    # the listing is READDIRPLUS: each entry comes with its attributes
    assert first["readdirplus"] >= 1, first
    assert first["lookup"] + first["getattr"] < 5, first
    again = _delta(m, ls_l)
    print("second ls -l: %s" % dict(again))
    assert again["lookup"] + again["getattr"] + again["readdir"] + again["readdirplus"] < 5, again


def test_a_create_is_lookup_create_getattr_release(sandbox):
    m, t = sandbox
    ws = t / "workspace"
    os.mkdir(ws / "c")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    d = _delta(m, lambda: [os.close(os.open(ws / "c" / ("e%d" % i), flags, 0o644)) for i in range(N)])
    print("%d empty creates: %s" % (N, dict(d)))
    assert d["create"] == N, d
    assert d["release"] == N, d
    # the kernel looks the name up first (no atomic create without a cached
    # negative entry) and refreshes the directory's attributes it changed
    assert d["lookup"] <= N + 3 and d["getattr"] <= N + 3, d
    assert sum(d.values()) <= 4 * N + 6, d
    u = _delta(m, lambda: [os.unlink(ws / "c" / ("e%d" % i)) for i in range(N)])
    print("%d unlinks: %s" % (N, dict(u)))
    assert u["unlink"] == N and u["lookup"] < 5, u


def test_hostile_names_and_writes_to_metrics(sandbox):
    m, t = sandbox
    ws = t / "workspace"
    # a name longer than the host allows is the daemon's to refuse (FUSE's own
    # limit is 1024), each time: counted like any lookup; a write to .metrics is refused
    d = _delta(m, lambda: [expect_errno(lambda: os.stat(ws / ("x" * 300)), errno.ENAMETOOLONG) for _ in range(N)])
    assert N <= d["lookup"] < N + 10, d
    with pytest.raises(OSError) as e:
        with open(m.mnt / ".metrics", "w") as f:
            f.write('sbxfs_fuse_requests_total{op="lookup"} 0\n')
    assert e.value.errno in (errno.EACCES, errno.EPERM), e.value
    before = _reqs(m)["lookup"]
    expect_errno(lambda: os.stat(ws / "after-hostile"), errno.ENOENT)
    assert _reqs(m)["lookup"] > before


def _passthrough(m):
    return 'data_path="passthrough"' in (m.mnt / ".metrics").read_text()


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")
def test_requests_are_read_without_a_pipe_each(sandbox, tmp_path):
    m, t = sandbox
    if not _passthrough(m):
        pytest.skip("copy path: requests are spliced (WRITE data)")
    ws = t / "workspace"
    out = tmp_path / "strace.txt"
    s = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=pipe2,splice,read", "-o", str(out), "-p", str(m.daemon_pid())],
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (out.exists() and out.stat().st_size):
            os.stat(ws)  # any request: the tracer is attached once it shows
            expect_errno(lambda: os.stat(ws / "probe"), errno.ENOENT)
            time.sleep(0.05)
        for i in range(N):
            expect_errno(lambda: os.stat(ws / ("missing%d" % i)), errno.ENOENT)
    finally:
        s.terminate()
        s.wait(timeout=30)
    text = out.read_text()
    out.unlink()
    pipes = text.count("pipe2(")
    splices = text.count("splice(")
    print("%d lookups: %d pipe2, %d splice" % (N, pipes, splices))
    assert pipes < 5 and splices < 5, (pipes, splices)


@needs_uring
def test_counted_and_cached_over_io_uring(sbxfs, param):
    # the counters are the daemon's own: the same over io_uring as over /dev/fuse
    m = sbxfs(config={"fuse": {"io_uring": "on"}}, start=False)
    try:
        m.start()
    except pytest.fail.Exception:
        if "without FUSE over io_uring" in m.log:  # SBXFS_BIN built on the system's libfuse
            pytest.skip("this sbxfs is built without FUSE over io_uring")
        raise
    assert read_json(m.mnt / ".status")["fuse_transport"] == "io_uring"
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    m.init_pid(t)
    ws = t / "workspace"
    (ws / "f").write_text("x")
    os.stat(ws / "f")
    probe = lambda: [expect_errno(lambda: os.stat(ws / ("missing%d" % i)), errno.ENOENT) for i in range(N)]
    first = _delta(m, probe)
    assert N <= first["lookup"] < N + 10, first
    again = _delta(m, lambda: (probe(), [os.stat(ws / "f") for _ in range(N)]))
    assert sum(again.values()) < 5, again
