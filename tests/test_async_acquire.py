# SPDX-License-Identifier: MIT
"""`acquire: async` (the default; issue 21 item 0, DESIGN §3): mkdir of a
thread answers once the sandbox is registered and its create started, so a
slow create never holds the user's directory (the kernel keeps a directory
locked for the whole of a mkdir in it: before, 8 mkdirs of one user against
a 3 s create finished at 3, 6, 9 ... 24 s, and a stat of a new name under the
user waited 3.5 s).  Everything inside the new directory waits (parked,
interruptible) until the sandbox is ready, or gets the create's errno, after
which the directory is gone.  `ready` blocks until then; poll(2) on `status`
reports the change.  `acquire: sync` keeps mkdir answering when ready.

Against the OpenSandbox fake (tests/fakes/opensandbox_server.py): its
`delay` fault holds the create's POST (a slow create), `pending_forever`
keeps created sandboxes Pending (the create waits for Running), `http_error`
fails it.  A few cases use the local provider (bubblewrap)."""

import errno
import os
import select
import signal
import threading
import time

import pytest

import test_jobs as J
import test_runtime as R
from remoteutil import fake, sbxfs  # noqa: F401
from sbxutil import read_json, wait_until

CREATE_S = 2.0  # the slow create of these tests
POST = r"^/v1/sandboxes$"


@pytest.fixture
def remote():
    """Only the OpenSandbox fake (one server, many sandboxes)."""
    return "opensandbox"


LOCAL = {"use": "local", "domain": None, "request_timeout": None, "sandbox_timeout": None, "ready_timeout": None}


def slow_creates(fake, ms=int(CREATE_S * 1000), count=None):
    f = {"kind": "delay", "ms": ms, "method": "POST", "path": POST}
    if count is not None:
        f["count"] = count
    fake.fault(f)


def ours(fake):
    return [s for s in fake.sandboxes() if s.get("state") not in ("Terminated", "Failed")]


def state_of(d):
    return read_json(d / "status")["state"]


def timed(fn, *a):
    t0 = time.monotonic()
    r = fn(*a)
    return r, time.monotonic() - t0


def run(d, name, cmd):
    code, out, err = J.run_job(d, name, cmd)
    assert code == 0, (cmd, out, err)
    return out


# A process waiting inside the mount; SIGINT raises in it (see test_runtime.py).
# the interruptible child (SIGINT at its default) and the FUSE-wait probe of test_runtime.py
child, in_fuse_request = R.child, R.in_fuse_request


# ---- parallel creates of one user ----------------------------------------------------------


@pytest.mark.timeout_s(150)
def test_16_concurrent_mkdirs_of_one_user_finish_in_about_one_create(sbxfs, fake):  # noqa: F811
    m = sbxfs()
    alice = m.mnt / "alice"
    os.mkdir(alice)
    slow_creates(fake)
    n = 16
    mk, ready, errs = {}, {}, []
    t0 = time.monotonic()

    def one(i):
        d = alice / f"t{i}"
        try:
            _, mk[i] = timed(os.mkdir, d)
            with open(d / "ready") as f:
                assert f.read() == "ready\n"
            ready[i] = time.monotonic() - t0
        except OSError as e:
            errs.append((i, e))

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    # while the creates are held: a lookup of a new name and a listing of
    # the user answer at once (before: behind the held mkdirs)
    assert wait_until(lambda: len(mk) == n or errs, 20), (mk, errs)
    _, look = timed(os.path.exists, alice / "never-made")
    listing, ls = timed(os.listdir, alice)
    held = len(ours(fake)) < n or any(s.get("state") == "Pending" for s in ours(fake)) or len(ready) < n
    for t in threads:
        t.join(60)
    total = max(ready.values()) if ready else None
    print(f"16 mkdirs of one user, {CREATE_S:.0f} s creates: mkdir max {max(mk.values()) * 1000:.1f} ms, "
          f"all ready at {total:.2f} s; a lookup meanwhile {look * 1000:.1f} ms, ls {ls * 1000:.1f} ms")
    assert not errs, errs
    assert held, "the creates were over before the lookups ran"
    assert sorted(listing) == sorted(f"t{i}" for i in range(n)), listing
    assert max(mk.values()) < 1.0, mk  # answered when the create started, not when it ended
    assert look < 1.0 and ls < 1.0, (look, ls)
    assert total < 2 * CREATE_S + 1.5, f"all ready at {total:.2f} s: the creates did not run in parallel"
    assert len(ours(fake)) == n
    assert run(alice / "t3", "ok", "echo ok") == "ok\n"


@pytest.mark.timeout_s(120)
def test_sync_keeps_mkdir_answering_when_ready(sbxfs, fake):  # noqa: F811
    """acquire: sync: mkdir returns when the sandbox is ready (so mkdirs of
    one user are serialised by the kernel), and a failed create's errno comes
    from mkdir, with nothing left."""
    m = sbxfs(config={"acquire": "sync"})
    assert read_json(m.mnt / ".config")["acquire"] == "sync"
    alice = m.mnt / "alice"
    os.mkdir(alice)
    slow_creates(fake, ms=1500)
    took = {}

    def one(i):
        _, took[i] = timed(os.mkdir, alice / f"s{i}")

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(took) == 3
    assert min(took.values()) >= 1.4, took  # each waited for its create
    assert max(took.values()) >= 3 * 1.5 - 0.3, took  # one after another under alice's lock
    assert state_of(alice / "s0") == "active"
    fake.clear_faults()
    fake.fault({"kind": "http_error", "status": 500, "method": "POST", "path": POST})
    with pytest.raises(OSError) as e:
        os.mkdir(alice / "bad")
    assert e.value.errno == errno.EIO, e.value
    assert not os.path.exists(alice / "bad")
    fake.clear_faults()
    assert len(ours(fake)) == 3


# ---- inside a creating sandbox -------------------------------------------------------------


@pytest.mark.timeout_s(120)
def test_first_access_inside_a_creating_sandbox_waits_then_works(sbxfs, fake):  # noqa: F811
    m = sbxfs()
    os.mkdir(m.mnt / "alice")
    d = m.mnt / "alice" / "t"
    slow_creates(fake, count=1)
    _, took = timed(os.mkdir, d)
    assert took < 1.0, took
    # the directory is there at once; status says creating; id answers
    assert "t" in os.listdir(m.mnt / "alice")
    assert os.path.isdir(d)
    assert state_of(d) == "creating"
    assert len((d / "id").read_text().strip()) == 16
    assert read_json(m.mnt / ".status")["creating"] >= 1
    names, waited = timed(os.listdir, d)
    assert "workspace" in names and "ready" in names and "jobs" in names, names
    assert waited > 0.5, f"a listing of a creating sandbox answered in {waited:.2f} s"
    assert state_of(d) == "active"
    (d / "workspace" / "f").write_text("hi")
    assert run(d, "cat", "cat /mnt/user-data/workspace/f").strip() == "hi"
    # a second mkdir of the name: EEXIST, as before
    with pytest.raises(FileExistsError):
        os.mkdir(d)


@pytest.mark.timeout_s(120)
def test_a_failing_create_gives_its_errno_to_the_waiters_and_the_directory_goes(sbxfs, fake):  # noqa: F811
    m = sbxfs()
    os.mkdir(m.mnt / "alice")
    d = m.mnt / "alice" / "t"
    fake.fault({"kind": "delay", "ms": 1500, "method": "POST", "path": POST, "count": 1})
    fake.fault({"kind": "http_error", "status": 500, "method": "POST", "path": POST, "count": 1})
    os.mkdir(d)
    got = {}

    def wait(name, fn):
        try:
            fn()
            got[name] = 0
        except OSError as e:
            got[name] = e.errno

    ts = [threading.Thread(target=wait, args=("ls", lambda: os.listdir(d)), daemon=True),
          threading.Thread(target=wait, args=("ready", lambda: open(d / "ready").read()), daemon=True),
          threading.Thread(target=wait, args=("ws", lambda: os.stat(d / "workspace")), daemon=True)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert got == {"ls": errno.EIO, "ready": errno.EIO, "ws": errno.EIO}, got
    # the directory is gone at once; nothing is left at the server or on the host
    assert not os.path.exists(d)
    assert "t" not in os.listdir(m.mnt / "alice")
    assert wait_until(lambda: not ours(fake), 20), fake.sandboxes()
    assert not (m.thread_data("alice", "t") / "sandbox.json").exists()
    assert "create failed" in m.log
    st = read_json(m.mnt / ".status")
    assert st["creating"] == 0 and st["active"] == 0, st
    # the name works again
    os.mkdir(d)
    assert run(d, "ok", "echo ok") == "ok\n"
    # a create that fails at once: `ready` read right after the mkdir gets
    # the create's errno if it came first, else ENOENT (the directory was
    # gone already); either way a stat says it is gone and the name works
    # again at once
    e = m.mnt / "alice" / "fast"
    for i in range(5):
        fake.fault({"kind": "http_error", "status": 500, "method": "POST", "path": POST, "count": 1})
        os.mkdir(e)
        with pytest.raises(OSError) as err:
            (e / "ready").read_text()
        assert err.value.errno in (errno.EIO, errno.ENOENT), err.value
        with pytest.raises(FileNotFoundError):
            os.stat(e)
        assert "fast" not in os.listdir(m.mnt / "alice")
    os.mkdir(e)
    assert (e / "ready").read_text() == "ready\n"



@pytest.mark.timeout_s(120)
def test_a_slow_create_answer_is_not_taken_for_a_late_sandbox_of_a_failed_create(sbxfs, fake):  # noqa: F811
    """A create that failed with a server error leaves its scope watched for a sandbox the
    server may still make (the renewer deletes what no box holds, every 3 s).  The next
    create of that scope is listed on the server before its answer arrives (the fake makes
    it, then waits 4.5 s, under the tests' 5 s request_timeout): it must not be deleted as that late sandbox (seen under ASan)."""
    m = sbxfs()
    os.mkdir(m.mnt / "alice")
    d = m.mnt / "alice" / "t"
    fake.fault({"kind": "http_error", "status": 500, "method": "POST", "path": POST, "count": 1})
    os.mkdir(d)
    with pytest.raises(OSError) as err:
        (d / "ready").read_text()
    assert err.value.errno in (errno.EIO, errno.ENOENT), err.value
    assert wait_until(lambda: not os.path.exists(d), 10)
    fake.fault({"kind": "delay_answer", "ms": 4500, "method": "POST", "path": POST, "count": 1})
    os.mkdir(d)
    assert (d / "ready").read_text() == "ready\n"
    assert run(d, "ok", "echo ok") == "ok\n"
    assert len(ours(fake)) == 1, fake.sandboxes()
    assert "appeared after its create had failed" not in m.log, m.log[-3000:]

@pytest.mark.timeout_s(120)
def test_ready_blocks_then_returns_and_poll_on_status_wakes(sbxfs, fake):  # noqa: F811
    m = sbxfs()
    os.mkdir(m.mnt / "alice")
    d = m.mnt / "alice" / "t"
    slow_creates(fake, count=1)
    t0 = time.monotonic()
    os.mkdir(d)
    fd = os.open(d / "status", os.O_RDONLY)
    try:
        assert b'"creating"' in os.pread(fd, 65536, 0)
        p = select.poll()
        p.register(fd, select.POLLPRI)
        assert p.poll(0) == [], "status reported a change before there was one"
        ev = p.poll(30000)
        woke = time.monotonic() - t0
        assert ev and ev[0][1] & select.POLLPRI, ev
        assert b'"active"' in os.pread(fd, 65536, 0)  # pread from 0 shows the new state
    finally:
        os.close(fd)
    assert 1.0 < woke < CREATE_S + 10, woke
    # ready: at once now; and blocking, on a second sandbox
    assert (d / "ready").read_text() == "ready\n"
    slow_creates(fake, count=1)
    os.mkdir(m.mnt / "alice" / "u")
    text, took = timed(lambda: (m.mnt / "alice" / "u" / "ready").read_text())
    assert text == "ready\n" and took > 1.0, took
    rfd = os.open(m.mnt / "alice" / "u" / "ready", os.O_RDONLY)
    try:
        p = select.poll()
        p.register(rfd, select.POLLIN)
        assert p.poll(5000), "ready did not poll readable once ready"
    finally:
        os.close(rfd)


@pytest.mark.timeout_s(120)
def test_sigint_to_a_waiter_answers_eintr_quickly(sbxfs, fake):  # noqa: F811
    m = sbxfs()
    os.mkdir(m.mnt / "alice")
    d = m.mnt / "alice" / "t"
    fake.fault({"kind": "pending_forever"})
    os.mkdir(d)
    procs = [child("open", d / "workspace"), child("read", d / "ready")]
    try:
        for p in procs:
            assert wait_until(lambda: in_fuse_request(p.pid), 20), "the child never waited in the mount"
            t0 = time.monotonic()
            p.send_signal(signal.SIGINT)
            out, _ = p.communicate(timeout=30)
            took = time.monotonic() - t0
            assert out == "interrupted\n", out
            assert took < 1.0, f"an interrupted wait took {took:.2f} s"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    assert state_of(d) == "creating"  # the create goes on
    fake.clear_faults()
    assert (d / "ready").read_text() == "ready\n"
    assert run(d, "ok", "echo ok") == "ok\n"


# ---- hostile ----------------------------------------------------------------------------------


def test_a_bad_acquire_value_is_refused_naming_the_key(sbxfs, fake):  # noqa: F811
    m = sbxfs(config={"acquire": "maybe"}, start=False)
    rc, log = m.run_expect_exit()
    assert rc not in (None, 0), log
    assert "acquire" in log and "async or sync" in log, log


@pytest.mark.timeout_s(150)
def test_50_waiters_on_one_creating_sandbox(sbxfs, fake):  # noqa: F811
    m = sbxfs()
    os.mkdir(m.mnt / "alice")
    d = m.mnt / "alice" / "t"
    slow_creates(fake, count=1)
    os.mkdir(d)
    res, lock = [], threading.Lock()
    ops = [lambda: os.listdir(d), lambda: os.stat(d / "workspace"), lambda: (d / "ready").read_text(),
           lambda: os.path.isdir(d / "jobs"), lambda: os.listdir(d / "workspace")]

    def one(i):
        try:
            ops[i % len(ops)]()
            r = 0
        except OSError as e:
            r = e.errno
        with lock:
            res.append(r)

    t0 = time.monotonic()
    ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(50)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    took = time.monotonic() - t0
    assert res == [0] * 50, res
    assert took < CREATE_S + 15, took
    assert m.running()
    assert run(d, "ok", "echo ok") == "ok\n"


@pytest.mark.timeout_s(120)
def test_rmdir_of_a_creating_sandbox_is_ebusy(sbxfs, fake):  # noqa: F811
    m = sbxfs()
    os.mkdir(m.mnt / "alice")
    d = m.mnt / "alice" / "t"
    fake.fault({"kind": "pending_forever"})
    os.mkdir(d)
    with pytest.raises(OSError) as e:
        os.rmdir(d)
    assert e.value.errno == errno.EBUSY
    assert "rmdir t refused" in m.log
    with pytest.raises(OSError) as e:  # nor the user's directory
        os.rmdir(m.mnt / "alice")
    assert state_of(d) == "creating"
    fake.clear_faults()
    assert (d / "ready").read_text() == "ready\n"
    os.rmdir(d)
    assert not os.path.exists(d)
    assert read_json(m.mnt / ".status")["warm"] == 1


@pytest.mark.timeout_s(180)
def test_kill9_while_creating_then_restart_leaks_nothing(sbxfs, fake):  # noqa: F811
    """The creating record written before the create lets the next start find
    the remote sandbox (adopted into the warm pool, or deleted): nothing
    leaks, and the name works again."""
    m = sbxfs()
    os.mkdir(m.mnt / "alice")
    d = m.mnt / "alice" / "t"
    fake.fault({"kind": "pending_forever"})
    os.mkdir(d)
    assert wait_until(lambda: fake.sandboxes(), 20), "the create never reached the server"
    assert (m.thread_data("alice", "t") / "sandbox.json").exists()
    m.kill9()
    fake.clear_faults()
    m.restart()
    # the half-made sandbox is cleaned up (a creating record is never adopted as ready)
    assert wait_until(lambda: not ours(fake), 30), fake.sandboxes()
    assert not os.path.exists(d)
    os.mkdir(d)
    assert run(d, "ok", "echo ok") == "ok\n"
    assert len(ours(fake)) == 1


# ---- local provider ----------------------------------------------------------------------------


@pytest.mark.timeout_s(120)
def test_local_mkdir_then_use_at_once(sbxfs, fake):  # noqa: F811
    """The local provider's create is fast, but the mkdir still answers
    before it ends: a job started right after the mkdir works (its lookups
    wait), and status/ready say ready."""
    m = sbxfs(config=LOCAL)
    os.mkdir(m.mnt / "alice")
    for i in range(4):
        d = m.mnt / "alice" / f"t{i}"
        os.mkdir(d)
        assert run(d, "ok", "id -u; echo ok").endswith("ok\n")
        assert (d / "ready").read_text() == "ready\n"
        assert state_of(d) == "active"
    assert "acquire: async" in m.log
    os.rmdir(m.mnt / "alice" / "t0")
    os.mkdir(m.mnt / "alice" / "t0")  # a reclaim of a warm sandbox, also through the async path
    assert (m.mnt / "alice" / "t0" / "ready").read_text() == "ready\n"
