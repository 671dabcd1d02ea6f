# SPDX-License-Identifier: MIT
"""pool.prewarm for the opensandbox provider (issue 21 item 1): spares are
remote sandboxes of no scope made ahead of need; a new thread's mkdir
claims one (providers/opensandbox_claim.c) instead of waiting for a create.

The fake OpenSandbox server (tests/fakes/opensandbox_server.py) is given a
1 s create (ready_delay: Pending for 1 s, then Running), the bench row's
setting.  Whether a sandbox came from a spare is read from .metrics
(claims), the sandbox's status (from_spare, its sandbox id being a
spare's, on disk in state_dir/spares/<token>/opensandbox.json) and the
server's list, never from timing.  After every test the fixture checks
that the server lists no sandbox any more (remoteutil.py)."""

import json
import os
import time
import urllib.request

import pytest

import sbxutil
import test_jobs as J
from remoteutil import fake, remote, sbxfs, sandbox_id  # noqa: F401
from sbxutil import read_json, wait_until

pytestmark = pytest.mark.parametrize("remote", ["opensandbox"], indirect=True)

CREATE_S = 1  # the fake's create time (Pending -> Running)


spares = sbxutil.spares
claims = sbxutil.spare_claims


def wait_spares(m, n, timeout=40):
    sbxutil.wait_spares(m, n, timeout)


def spare_ids(m):
    """{spare token: remote sandbox id} of the spares on disk."""
    return sbxutil.spare_records(m, "opensandbox.json", "id")


def metadata(fake, sid):
    """A sandbox's metadata, as the lifecycle API answers it."""
    req = urllib.request.Request(f"http://127.0.0.1:{fake.port}/v1/sandboxes/{sid}")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10) as r:
        return json.loads(r.read())["metadata"]


def server_ids(fake):
    return {s["id"] for s in fake.sandboxes()}


def start(sbxfs, fake, prewarm=2, **cfg):
    fake.config(ready_delay=CREATE_S)
    conf = {"pool": {"prewarm": prewarm}, "replicas": 6}
    conf.update(cfg)
    m = sbxfs(config=conf)
    wait_spares(m, prewarm)
    return m


def run(d, name, cmd):
    code, out, err = J.run_job(d, name, cmd)
    assert code == 0, (cmd, out, err)
    return out


def new_thread(m, user, thread):
    d = m.mnt / user / thread
    os.makedirs(d)
    sbxutil.wait_ready(d)
    return d


def test_new_thread_claims_a_spare_with_its_env_skills_and_files(sbxfs, fake, tmp_path):
    """A new thread binds a spare: its status and .metrics say so, the
    remote sandbox is the spare's, its record moved to the thread, and a
    job sees the configuration's environment, the skills library and the
    thread's own skill (synced by upload after the claim) and the files
    written through the mount; a second thread gets the other spare and
    none of the first one's files."""
    lib = tmp_path / "skills-lib"
    lib.mkdir()
    (lib / "lib.md").write_text("library skill\n")
    m = start(sbxfs, fake, environment={"GREETING": "hi"}, skills={"path": str(lib)})
    ids = spare_ids(m)
    assert len(ids) == 2 and set(ids.values()) == server_ids(fake), (ids, fake.sandboxes())
    assert claims(m) == (0, 0)

    t = new_thread(m, "alice", "t")
    st = sbxutil.status(t)
    sid = sandbox_id(t)
    assert st["from_spare"] is True and sid in ids.values(), (st, ids)
    assert claims(m) == (1, 0)
    tok = next(k for k, v in ids.items() if v == sid)
    rec = json.loads((m.thread_data("alice", "t") / "opensandbox.json").read_text())
    assert rec["id"] == sid and rec["scope"] == tok, rec
    assert not (m.state_dir / "spares" / tok).exists()
    # the server's metadata stays the spare's (the API cannot change it)
    meta = metadata(fake, sid)
    assert meta.get("sbxfs-scope") == tok and "sbxfs-user" not in meta, meta

    (t / "workspace" / "f").write_text("from the mount\n")
    (t / "skills" / "own.md").write_text("own skill\n")
    fd = os.open(t / "skills", os.O_RDONLY)
    try:
        os.fsync(fd)  # returns once the sandbox has it
    finally:
        os.close(fd)
    out = run(t, "j", "echo $GREETING; cat /mnt/skills/lib.md /mnt/skills/own.md /mnt/user-data/workspace/f; "
                      "ls /mnt/user-data | tr '\\n' ' '")
    assert out.splitlines() == ["hi", "library skill", "own skill", "from the mount", "outputs uploads workspace "], out

    # another user's new thread: the other spare, none of alice's files
    t2 = new_thread(m, "bob", "t2")
    sid2 = sandbox_id(t2)
    assert sbxutil.status(t2)["from_spare"] is True and sid2 in ids.values() and sid2 != sid
    out = run(t2, "j", "ls -A /mnt/user-data/workspace | wc -l; cat /mnt/skills/lib.md; ls /mnt/skills")
    assert out.splitlines() == ["0", "library skill", "lib.md"], out
    assert claims(m) == (2, 0)


def test_warm_thread_reclaims_its_own_sandbox_not_a_spare(sbxfs, fake):
    m = start(sbxfs, fake)
    t = new_thread(m, "alice", "t")
    sid = sandbox_id(t)
    os.rmdir(t)
    wait_spares(m, 2)
    before = spare_ids(m)
    os.mkdir(t)
    assert sandbox_id(t) == sid and sid not in before.values()
    assert claims(m) == (1, 0), "a thread with a warm sandbox must not take a spare"
    assert spare_ids(m) == before


def test_refilled_after_each_claim_and_renewed_like_any_sandbox(sbxfs, fake):
    """Spares are remade after a claim (within replicas), and their expiry
    is renewed (sandbox_timeout 3 s: a spare not renewed would be gone)."""
    fake.config(min_timeout=1)
    m = start(sbxfs, fake, replicas=3, sandbox_timeout=3)
    first = spare_ids(m)
    time.sleep(5)  # past the TTL: the renewer keeps the spares
    assert spare_ids(m) == first and set(first.values()) <= server_ids(fake), (first, fake.sandboxes())
    assert spares(m)["lost"] == 0
    t = new_thread(m, "alice", "t")
    assert sbxutil.status(t)["from_spare"] is True
    wait_spares(m, 2)  # replicas 3: one active + two spares
    second = spare_ids(m)
    assert len(set(second.values()) - set(first.values())) == 1, (first, second)
    assert spares(m)["made"] == 3, spares(m)
    new_thread(m, "alice", "u")
    wait_spares(m, 1)  # replicas leaves room for one
    assert claims(m) == (2, 0)
    assert len(fake.sandboxes()) == 3
    renewals = fake.requests()["counters"].get("POST /v1/sandboxes/{id}/renew-expiration", 0)
    assert renewals >= 4, fake.requests()["counters"]


@pytest.mark.timeout_s(120)
def test_spare_expired_behind_our_back_is_destroyed_and_replaced(sbxfs, fake):
    """The server drops a spare (it expired): the renewer's 404 marks it
    gone, the reaper destroys it (spares.lost) and a new one is made."""
    fake.config(min_timeout=1)
    m = start(sbxfs, fake, sandbox_timeout=3, idle_check_interval=1)
    ids = spare_ids(m)
    tok, sid = sorted(ids.items())[0]
    fake.expire(sid)
    assert wait_until(lambda: spares(m)["lost"] == 1, 20), spares(m)
    wait_spares(m, 2)
    now = spare_ids(m)
    assert tok not in now and sid not in now.values() and len(now) == 2, (ids, now)
    assert "spare is gone behind our back" in m.log
    assert set(now.values()) == server_ids(fake)


@pytest.mark.timeout_s(150)
def test_spares_and_claimed_sandbox_adopted_after_kill9(sbxfs, fake):
    """After a kill -9: the spares are adopted as spares (discovery, which
    deletes sandboxes no record names, leaves them alone), the claimed one
    as the thread's by its record (its metadata names the spare); both are
    usable, and the unmount deletes everything."""
    m = start(sbxfs, fake)
    t = new_thread(m, "alice", "t")
    sid = sandbox_id(t)
    run(t, "w", "echo kept > /mnt/user-data/workspace/k")
    wait_spares(m, 2)
    before = spare_ids(m)
    m.kill9()
    m.umount(lazy=True)
    m.restart()
    wait_spares(m, 2)
    st = spares(m)
    assert st["adopted"] == 2 and st["made"] == 0, st
    assert spare_ids(m) == before
    assert read_json(m.mnt / ".status")["adopted"] == 1
    assert server_ids(fake) == set(before.values()) | {sid}, fake.sandboxes()
    os.mkdir(t)  # adopted warm: reclaimed, not a spare
    assert sandbox_id(t) == sid
    assert run(t, "r", "cat /mnt/user-data/workspace/k") == "kept\n"
    assert claims(m) == (0, 0)
    u = new_thread(m, "alice", "u")
    assert sandbox_id(u) in before.values() and claims(m) == (1, 0)
    assert m.stop() == 0
    assert fake.sandboxes() == [] and not list((m.state_dir / "spares").iterdir())


@pytest.mark.timeout_s(120)
def test_claim_of_a_dead_spare_destroys_it_and_creates_cold(sbxfs, fake):
    """Both spares fail behind the daemon's back: one expired (404), the
    other's execd answers 502 on /ping.  Each mkdir takes one (replicas 2
    leaves no room for a refill), finds it dead at its claim (log line),
    destroys it and creates cold; no dead spare is left on the server."""
    m = start(sbxfs, fake, replicas=2)
    ids = sorted(spare_ids(m).values())
    fake.expire(ids[0])
    fake.fault({"kind": "ping_fail", "sandbox": ids[1]})
    made = []
    for name in ("a", "b"):
        d = new_thread(m, "alice", name)
        assert sbxutil.status(d)["from_spare"] is False and sandbox_id(d) not in ids
        assert run(d, "j", "echo ok") == "ok\n"
        made.append(sandbox_id(d))
    assert claims(m) == (0, 2)
    assert m.log.count("failed its health check") == 2 and "creating cold" in m.log, m.log[-3000:]
    assert "404" in m.log and "injected ping_fail" in m.log
    assert spares(m)["ready"] == 0 and not list((m.state_dir / "spares").iterdir())
    assert wait_until(lambda: server_ids(fake) == set(made), 10), (made, fake.sandboxes())


@pytest.mark.timeout_s(150)
def test_spare_create_errors_logged_and_nothing_leaks(sbxfs, fake):
    """The spares' creates answered 500; then, after a restart, slower than
    request_timeout (the server makes them late: they are deleted when they
    appear).  Each failure is logged and counted, nothing is left on the
    server; the next mkdir creates cold and brings the spares back."""
    fake.config(ready_delay=CREATE_S)
    fake.fault({"kind": "http_error", "status": 500, "method": "POST", "path": "^/v1/sandboxes$", "count": 2})
    m = sbxfs(config={"pool": {"prewarm": 2}, "replicas": 6})
    assert wait_until(lambda: spares(m)["make_failures"] == 2 and spares(m)["creating"] == 0, 20), spares(m)
    assert m.log.count("create of a spare failed: ") == 2 and "500" in m.log, m.log[-3000:]
    assert fake.sandboxes() == []
    assert m.stop() == 0
    fake.fault({"kind": "delay", "ms": 7000, "method": "POST", "path": "^/v1/sandboxes$", "count": 2})
    m.start()
    assert wait_until(lambda: spares(m)["make_failures"] == 2 and spares(m)["creating"] == 0, 30), spares(m)
    assert "timed out" in m.log and m.log.count("create of a spare failed: ") == 4, m.log[-3000:]

    def late_ones_deleted():
        c = fake.requests()["counters"]
        return c.get("DELETE /v1/sandboxes/{id}", 0) >= 2 and not fake.sandboxes()
    assert wait_until(late_ones_deleted, 40), (fake.requests()["counters"], fake.sandboxes())
    assert "appeared after its create had failed: deleted" in m.log
    assert not list((m.state_dir / "spares").iterdir())
    t = new_thread(m, "alice", "t")  # no spare: cold, then the refill
    assert sbxutil.status(t)["from_spare"] is False
    wait_spares(m, 2)
    assert server_ids(fake) == set(spare_ids(m).values()) | {sandbox_id(t)}, fake.sandboxes()


def test_hostile_threads_cannot_reach_each_others_or_a_spares_data(sbxfs, fake):
    """A claimed thread's files live in its own remote sandbox: a thread of
    another user that claims the next spare sees none of them, a released
    and destroyed thread's sandbox never comes back as a spare, and a
    thread named after a spare's token is just a thread."""
    m = start(sbxfs, fake, replicas=4)
    a = new_thread(m, "alice", "a")
    run(a, "w", "echo secret > /mnt/user-data/workspace/s; echo s > /mnt/user-data/outputs/o")
    sid_a = sandbox_id(a)
    wait_spares(m, 2)
    tok = sorted(spare_ids(m))[0]
    b = new_thread(m, "spare", tok)  # a user named "spare", a thread named as a spare's token
    assert sbxutil.status(b)["from_spare"] is True
    out = run(b, "j", "ls -A /mnt/user-data/workspace /mnt/user-data/outputs; cat /mnt/user-data/workspace/s 2>&1; true")
    assert "secret" not in out and "No such file" in out, out
    assert not list((b / "workspace").iterdir())
    # alice's thread released: its sandbox is hers (warm), never a spare
    os.rmdir(a)
    c = new_thread(m, "carol", "c")
    assert sandbox_id(c) != sid_a and sid_a not in spare_ids(m).values()
    assert run(c, "j", "ls -A /mnt/user-data/workspace | wc -l") == "0\n"


def test_none_left_after_unmount(sbxfs, fake):
    m = start(sbxfs, fake)
    new_thread(m, "alice", "t")
    wait_spares(m, 2)
    assert len(fake.sandboxes()) == 3
    assert m.stop() == 0
    assert fake.sandboxes() == [], fake.sandboxes()
    assert not list((m.state_dir / "spares").iterdir())


def test_users_mapping_gives_skills_to_the_claiming_users_uid(sbxfs, fake):
    """users: maps alice to a uid: the claimed sandbox's host-side skills/
    is hers, as after a cold create (the spare, made for nobody, had none)."""
    uid = 61777
    m = start(sbxfs, fake, users={"alice": uid})
    t = new_thread(m, "alice", "t")
    st = sbxutil.status(t)
    assert st["from_spare"] is True and st["uid"] == uid, st
    assert (m.thread_data("alice", "t") / "skills").stat().st_uid == uid
    (t / "skills" / "mine.md").write_text("mine\n")
    assert (m.thread_data("alice", "t") / "skills" / "mine.md").stat().st_uid == uid


def test_concurrent_new_threads_claim_different_spares(sbxfs, fake):
    import threading
    m = start(sbxfs, fake)
    ids = set(spare_ids(m).values())
    os.makedirs(m.mnt / "alice")
    ts = [m.mnt / "alice" / f"c{i}" for i in range(2)]
    th = [threading.Thread(target=os.mkdir, args=(t,)) for t in ts]
    for x in th:
        x.start()
    for x in th:
        x.join(30)
    got = [sandbox_id(t) for t in ts]
    assert set(got) == ids and all(sbxutil.status(t)["from_spare"] for t in ts), (got, ids)
    assert claims(m) == (2, 0)
    outs = [run(t, "j", f"echo {t.name} > /mnt/user-data/workspace/me; ls /mnt/user-data/workspace") for t in ts]
    assert outs == ["me\n", "me\n"], outs
    assert [(t / "workspace" / "me").read_text() for t in ts] == ["c0\n", "c1\n"]
