# SPDX-License-Identifier: MIT
"""The runtime layer (runtime/work.c, fs/fswork.c; issue 20 point 1): slow
work runs on separate queues for lifecycle (create, destroy) and I/O
(remote reads and writes), each sandbox has a cap on each queue, every item
has a deadline and a cancel token, and a FUSE interrupt cancels the item
behind its request: the HTTP transfer aborts and the request answers EINTR
at once.

Against the fake OpenSandbox server (tests/fakes/opensandbox_server.py): its
`pending_forever` fault holds created sandboxes in Pending (the create waits
for Running), its `delay` fault holds an answer, `drip` sends a download one
byte at a time.  Only file operations and the fake's control channel.

Before this layer, one FIFO of 64 threads served everything: 64 held creates
(or one sandbox's 64 slow reads) made every other sandbox's read wait behind
them, and an interrupt reached a queued item only when its turn came."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import test_jobs as J
from remoteutil import fake, sbxfs  # noqa: F401
from sbxutil import wait_until


@pytest.fixture
def remote():
    """Only the OpenSandbox fake: one server, many sandboxes (the AIO fake
    serves one existing sandbox)."""
    return "opensandbox"


# A process doing one operation on the mount; SIGINT raises inside it, so a
# system call the daemon answers EINTR ends with "interrupted" (Python
# retries a call that EINTR ended only when the handler returns).
CHILD = r'''
import os, signal, sys
# (a suite run in a shell's background starts with SIGINT ignored, and so
# would this child: then the signal never reaches the mount)
signal.signal(signal.SIGINT, signal.default_int_handler)
op, path = sys.argv[1], sys.argv[2]
try:
    print("ready", flush=True)
    if op == "mkdir":
        os.mkdir(path)
    elif op == "open":
        os.close(os.open(path, os.O_RDONLY))
    elif op == "read":
        with open(path) as f:
            f.read()
    print("done", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
except OSError as e:
    print("errno", e.errno, flush=True)
'''


def child(op, path):
    p = subprocess.Popen([sys.executable, "-c", CHILD, op, str(path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    return p


def in_fuse_request(pid):
    try:
        with open(f"/proc/{pid}/wchan") as f:
            w = f.read()
    except OSError:
        return False
    return "request_wait_answer" in w or "fuse" in w


def interrupt(p):
    """SIGINT p (waiting in the mount): (its output, seconds until it ended)."""
    assert wait_until(lambda: in_fuse_request(p.pid), 20), "the child never waited in the mount"
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    return out, time.monotonic() - t0


def run(d, name, cmd):
    code, out, err = J.run_job(d, name, cmd)
    assert code == 0, (cmd, out, err)
    return out


def open_time(path):
    t0 = time.monotonic()
    with open(path, "rb") as f:
        f.read()
    return time.monotonic() - t0


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def ours(fake):
    return [s for s in fake.sandboxes() if s.get("state") not in ("Terminated", "Failed")]


# ---- (a) a slow mkdir interrupted ------------------------------------------------------------


@pytest.mark.timeout_s(150)
@pytest.mark.parametrize("hold", ["pending", "post"])
def test_an_interrupted_slow_mkdir_answers_eintr_and_leaves_nothing(sbxfs, fake, hold):  # noqa: F811
    """hold=pending: the server made the sandbox and keeps it Pending (the
    create waits for Running); hold=post: the server holds the create's
    answer 20 s, then makes the sandbox for a client that went away.
    acquire: sync, where the mkdir itself waits for the create (under async
    the waits inside a creating sandbox are interrupted instead:
    test_async_acquire.py)."""
    m = sbxfs(config={"acquire": "sync"})
    os.mkdir(m.mnt / "alice")
    if hold == "pending":
        fake.fault({"kind": "pending_forever"})
    else:
        fake.fault({"kind": "delay", "ms": 20000, "method": "POST", "path": r"^/v1/sandboxes$", "count": 1})
    p = child("mkdir", m.mnt / "alice" / "t")
    if hold == "pending":
        assert wait_until(lambda: fake.sandboxes(), 20), "the create never reached the server"
    else:  # the create has started (its record is written just before the POST): else an
        # interrupt that came first cancels it before anything reaches the server
        assert wait_until(lambda: (m.thread_data("alice", "t") / "sandbox.json").exists(), 20)
    out, took = interrupt(p)
    assert out == "interrupted\n", out
    assert took < 1.0, f"an interrupted mkdir took {took:.2f} s"
    # nothing registered: no directory, nothing active in the status
    assert not os.path.exists(m.mnt / "alice" / "t")
    assert "t" not in os.listdir(m.mnt / "alice")
    fake.clear_faults()
    if hold == "post":  # the held create ends at the server: a sandbox nobody asked for any more
        # (the fake makes it after its 20 s hold; it may be deleted again
        # before this sees it: then its delete is in the request log)
        assert wait_until(lambda: fake.sandboxes() or any(
            e["route"].startswith("DELETE /v1/sandboxes") for e in fake.requests()["log"]), 40)
        t_made = time.monotonic()
    # the server ends with no sandbox of ours: deleted by the cancelled
    # create, or (hold=post: made 20 s later) by the watch of an unknown create
    assert wait_until(lambda: not ours(fake), 60), fake.sandboxes()
    if hold == "post":
        print(f"the late sandbox was deleted {time.monotonic() - t_made:.1f} s after the server made it")
    assert "interrupted" in m.log or "cancelled" in m.log
    # the same name works again, and nothing of the old create is in the way
    os.mkdir(m.mnt / "alice" / "t")
    assert run(m.mnt / "alice" / "t", "ok", "echo ok") == "ok\n"
    assert len(ours(fake)) == 1
    assert m.running()


@pytest.mark.timeout_s(120)
def test_an_interrupt_before_the_create_starts_answers_at_once(sbxfs, fake):  # noqa: F811
    """Hostile: mkdirs of one scope queue behind each other (its lane of the
    lifecycle queue); interrupting the queued ones answers them at once,
    and the held one afterwards still leaves nothing (acquire: sync)."""
    m = sbxfs(config={"acquire": "sync"})
    os.mkdir(m.mnt / "alice")
    fake.fault({"kind": "pending_forever"})
    procs = [child("mkdir", m.mnt / "alice" / "t") for _ in range(6)]
    try:
        assert wait_until(lambda: fake.sandboxes(), 20)
        for p in procs:
            out, took = interrupt(p)
            assert out in ("interrupted\n", f"errno {17}\n"), out  # EEXIST: raced with another's create
            assert took < 1.0, f"an interrupted mkdir took {took:.2f} s"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    fake.clear_faults()
    assert wait_until(lambda: not ours(fake), 60), fake.sandboxes()
    assert not os.path.exists(m.mnt / "alice" / "t")
    os.mkdir(m.mnt / "alice" / "t")
    assert m.running()


# ---- (b) slow creates do not delay another sandbox's reads -----------------------------------


N_FILES = 40


def make_files(d, prefix, n, size=4096):
    run(d, "mk" + prefix, f"for i in $(seq 0 {n - 1}); do head -c {size} /dev/urandom > {prefix}$i; done")


def timed_opens(d, prefix, n):
    """Open and read n files never opened before (each open fetches it from
    the server: a remote read): the seconds of each."""
    return [open_time(d / "workspace" / f"{prefix}{i}") for i in range(n)]


@pytest.mark.timeout_s(240)
def test_80_slow_creates_do_not_delay_a_read_of_a_ready_sandbox(sbxfs, fake):  # noqa: F811
    m = sbxfs(config={"ready_timeout": 60})
    d = m.mnt / "alice" / "t"
    os.makedirs(d)
    make_files(d, "base", N_FILES)
    make_files(d, "held", N_FILES)
    base = timed_opens(d, "base", N_FILES)
    users = [f"u{i}" for i in range(80)]
    for u in users:
        os.mkdir(m.mnt / u)
    fake.fault({"kind": "pending_forever"})
    errs = []

    def mk(u):
        try:
            os.mkdir(m.mnt / u / "t")
        except OSError as e:
            errs.append(e.errno)

    threads = [threading.Thread(target=mk, args=(u,), daemon=True) for u in users]
    for t in threads:
        t.start()
    try:
        # the creates are held: at least a lifecycle queue's worth at the server
        assert wait_until(lambda: len(fake.sandboxes()) >= 30, 60), len(fake.sandboxes())
        time.sleep(0)  # (no settling wait: the reads start while creates are held)
        held = timed_opens(d, "held", N_FILES)
        still = len([s for s in fake.sandboxes() if s.get("state") == "Pending"])
    finally:
        fake.clear_faults()
        for t in threads:
            t.join(120)
    print(f"read misses: p50 {sorted(base)[N_FILES // 2] * 1000:.1f} ms idle, "
          f"during 80 held creates p50 {sorted(held)[N_FILES // 2] * 1000:.1f} ms "
          f"p99 {p99(held) * 1000:.1f} ms (baseline p99 {p99(base) * 1000:.1f} ms)")
    assert still >= 30, "the creates were not held while the reads ran"
    # 250 ms, or the idle figure's worst plus 250 ms on a loaded host: before,
    # the reads waited for a create to end (seconds).  (100 ms until the
    # lifecycle queue took 64 creates at once (issue 21): the fake server,
    # one Python process, then answers a read behind 64 create handlers, and
    # the first read missed 100 ms by 15-20 ms on the shared 2-CPU host.)
    assert p99(held) < max(0.25, p99(base) + 0.25), (sorted(held), sorted(base))
    assert not errs, errs
    assert m.running()


# ---- (c) hostile I/O: one sandbox's many slow reads, an interrupted read -------------------


@pytest.mark.timeout_s(240)
def test_one_sandboxs_hundreds_of_slow_reads_do_not_delay_another(sbxfs, fake):  # noqa: F811
    m = sbxfs(config={"request_timeout": 60})
    a = m.mnt / "alice" / "t"
    b = m.mnt / "bob" / "t"
    os.makedirs(a)
    os.makedirs(b)
    make_files(a, "a", N_FILES)
    make_files(b, "b", 200, size=100)
    make_files(a, "drip", 1, size=100000)
    bob = fake.sandboxes()
    bob_id = [s["id"] for s in bob if s["id"] != alice_id(fake, a)][0]
    # bob's downloads answer 8 s late: 200 opens queue in bob's lane
    fake.fault({"kind": "delay", "ms": 8000, "sandbox": bob_id, "path": r"/files/download$"})
    procs = []
    try:
        procs = [subprocess.Popen([sys.executable, "-c", CHILD, "open", str(b / "workspace" / f"b{i}")],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(200)]
        assert wait_until(lambda: sum(in_fuse_request(p.pid) for p in procs) >= 150, 60)
        held = timed_opens(a, "a", N_FILES)
        print(f"alice's read misses behind 200 slow reads of bob: p50 {sorted(held)[N_FILES // 2] * 1000:.1f} ms "
              f"p99 {p99(held) * 1000:.1f} ms")
        assert p99(held) < 1.0, sorted(held)
        # (c) a read of a dripping server, interrupted, answers EINTR at once
        fake.fault({"kind": "drip", "ms": 700, "sandbox": alice_id(fake, a), "path": r"/files/download$"})
        p = child("open", a / "workspace" / "drip0")
        out, took = interrupt(p)
        assert out == "interrupted\n", out
        assert took < 1.0, f"an interrupted read took {took:.2f} s"
        # and one of bob's queued opens, interrupted, answers at once too
        q = next(p for p in procs if in_fuse_request(p.pid))
        out, took = interrupt(q)
        assert out == "ready\ninterrupted\n", out
        assert took < 1.0, f"an interrupted queued read took {took:.2f} s"
    finally:
        fake.clear_faults()
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait(60)
    assert m.running()
    assert len((a / "workspace" / "drip0").read_bytes()) == 100000


def alice_id(fake, d):
    from remoteutil import sandbox_id
    return sandbox_id(d)
