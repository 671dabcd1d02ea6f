# SPDX-License-Identifier: MIT
"""The DeerFlow package's SandboxProvider (python/sbxfs_deerflow) against a
real sbxfs mount (local provider): how it finds the mount, acquire / get /
get_scoped / release / reset / shutdown (the semantics reference §2), the
execution leases of §3 with two agents of one thread (only the last
release parks the sandbox), network events consumed and decided through the
package (§7), skills synced (§10.3), and an agent's turn (write code, run its
tests, read the failure, fix it, run again)."""

import asyncio
import errno
import os
import threading
import time

import pytest

import sbxutil
from deerflowutil import WS, agent_turn, provider_for, sbxfs_deerflow, scope_token
from sbxutil import read_json, read_text
from test_network import allowlist_conf, cert, servers  # noqa: F401

SbxfsSandboxProvider = sbxfs_deerflow.SbxfsSandboxProvider


def warm(m):
    return read_json(m.mnt / ".status")["warm"]


# --------------------------------------------------------------------------
# finding the mount


def test_nothing_mounted_is_said_clearly(tmp_path, monkeypatch):
    monkeypatch.delenv("SBXFS_MOUNTPOINT", raising=False)
    with pytest.raises(sbxfs_deerflow.SbxfsNotMountedError) as e:
        SbxfsSandboxProvider(mountpoint=str(tmp_path))
    msg = str(e.value)
    assert f"no sbxfs is mounted at {tmp_path}" in msg and "the mountpoint argument" in msg, msg
    monkeypatch.setenv("SBXFS_MOUNTPOINT", str(tmp_path / "env"))
    with pytest.raises(sbxfs_deerflow.SbxfsNotMountedError) as e:
        SbxfsSandboxProvider()
    assert "$SBXFS_MOUNTPOINT" in str(e.value) and str(tmp_path / "env") in str(e.value)


def test_mount_from_the_environment(sbxfs, monkeypatch):
    m = sbxfs()
    monkeypatch.setenv("SBXFS_MOUNTPOINT", str(m.mnt))
    p = SbxfsSandboxProvider()
    assert p.mountpoint == str(m.mnt)
    assert p.acquire("t", user_id="u") == scope_token("u", "t")
    p.shutdown()


# --------------------------------------------------------------------------
# lifecycle (§2.2)


def test_acquire_get_release_reclaim(sbxfs):
    m = sbxfs()
    p = provider_for(m)
    assert (p.uses_thread_data_mounts, p.needs_upload_permission_adjustment,
            p.supports_agent_skill_isolation) == (False, False, True)
    sid = p.acquire("thread-1", user_id="alice")
    assert sid == "dc977b840cb8638e" == scope_token("alice", "thread-1")  # §4.1's golden vector
    d = m.mnt / "alice" / "thread-1"
    pid = m.init_pid(d)
    sb = p.get(sid)
    assert isinstance(sb, sbxfs_deerflow.SbxfsSandbox) and sb.id == sid
    assert p.acquire("thread-1", user_id="alice") == sid and p.get(sid) is sb, "the same user and thread: the same"
    assert p.get("0000000000000000") is None
    # get_scoped: only for exactly this (user, thread) (§2.2, fail closed)
    assert p.get_scoped(sid, thread_id="thread-1", user_id="alice") is sb
    assert p.get_scoped(sid, thread_id="thread-2", user_id="alice") is None
    assert p.get_scoped(sid, thread_id="thread-1", user_id="bob") is None
    sb.write_file(f"{WS}/keep.txt", "kept\n")
    # release parks it in the warm pool with its files and processes
    p.release(sid)
    assert not d.exists() and warm(m) == 1 and p.get(sid) is None
    assert sbxutil.pid_alive(pid)
    p.release(sid)  # idempotent
    assert p.acquire("thread-1", user_id="alice") == sid
    assert sbxutil.init_pid(d) == pid, "reclaimed, not recreated"
    assert p.get(sid).read_file(f"{WS}/keep.txt") == "kept\n"
    # a sandbox made active by someone else on the mount is reused
    os.makedirs(m.mnt / "bob" / "other")
    assert p.acquire("other", user_id="bob") == scope_token("bob", "other")
    # no thread: a sandbox of its own
    anon = p.acquire(None, user_id="alice")
    assert anon != sid and p.get(anon).thread.startswith("anon-")
    # names sbxfs refuses are ValueError, before anything is made
    for bad in ("a b", "x" * 65, "dot.name", ""):
        with pytest.raises(ValueError):
            p.acquire(bad, user_id="alice")
    with pytest.raises(ValueError):
        p.acquire("t", user_id="bad/user")
    # shutdown releases what this instance holds; reset forgets without releasing
    p.shutdown()
    assert not d.exists() and not (m.mnt / "bob" / "other").exists()
    p.shutdown()
    with pytest.raises(RuntimeError):
        p.acquire("thread-1", user_id="alice")
    q = provider_for(m)
    q.acquire("thread-1", user_id="alice")
    q.reset()
    assert q.get(sid) is None and d.exists()


def test_default_user(sbxfs):
    m = sbxfs()
    p = provider_for(m)
    assert p.acquire("t") == scope_token("default", "t")  # DeerFlow's default user when none is given
    q = provider_for(m, default_user="gateway")
    assert q.acquire("t") == scope_token("gateway", "t")


def test_acquire_failure_is_an_oserror_with_the_cause(sbxfs):
    m = sbxfs(config={"users": {"alice": {"uid": 61234, "max_sandboxes": 1}}})
    p = provider_for(m)
    p.acquire("t1", user_id="alice")
    with pytest.raises(OSError) as e:
        p.acquire("t2", user_id="alice")
    assert e.value.errno == errno.EDQUOT and "alice/t2" in str(e.value)
    with pytest.raises(OSError) as e:
        p.acquire("t", user_id="mallory")  # not a user of users:
    assert e.value.errno == errno.EACCES


# --------------------------------------------------------------------------
# leases (§3): two agents of one thread


def test_two_agents_of_one_thread_only_the_last_release_parks(sbxfs):
    m = sbxfs()
    p = provider_for(m)
    leases = sbxfs_deerflow.SandboxLeaseManager(p)
    d = m.mnt / "alice" / "t"
    a, b = sbxfs_deerflow.new_owner_id(), sbxfs_deerflow.new_owner_id("subagent")
    sid = leases.acquire(a, "t", user_id="alice")
    assert leases.acquire(b, "t", user_id="alice") == sid and leases.acquire(a, "t", user_id="alice") == sid
    leases.release(a)
    assert d.exists() and warm(m) == 0, "an owner still uses it: not parked"
    assert p.get(sid).execute_command("echo b still works") == "b still works\n"
    leases.release(a)  # idempotent
    leases.release(b)
    assert not d.exists() and warm(m) == 1, "the last owner's release parks it"
    # a borrower (release_on_last=False: an upload sync) never parks it alone
    c = sbxfs_deerflow.new_owner_id("upload")
    sid = leases.acquire(c, "t", user_id="alice", release_on_last=False)
    leases.release(c)
    assert d.exists(), "a borrower's release parked the sandbox"
    # ... and a normal owner's park request waits for every holder
    leases.retain(c, sid, thread_id="t", user_id="alice", release_on_last=False)
    leases.reuse_or_acquire(a, sid, thread_id="t", user_id="alice")
    leases.release(a)
    assert d.exists()
    leases.release(c)
    assert not d.exists()
    # a binding whose sandbox is gone is dropped and a fresh one acquired
    sid = leases.acquire(a, "t", user_id="alice")
    p.release(sid)
    assert leases.acquire(a, "t", user_id="alice") == sid and d.exists()
    assert leases.binding_for(a) == sid
    # an owner cannot move between thread identities
    with pytest.raises(RuntimeError):
        leases.acquire(a, "other", user_id="alice")
    # reuse of a checkpointed id only through get_scoped (§2.2)
    e = sbxfs_deerflow.new_owner_id()
    other = p.acquire("x", user_id="bob")
    got = leases.reuse_or_acquire(e, other, thread_id="t", user_id="alice")
    assert got == sid, "bob's sandbox must not be borrowed for alice's thread"
    leases.release(a)
    leases.release(e)
    assert not d.exists()


@pytest.mark.timeout_s(120)
def test_concurrent_agents_of_one_thread(sbxfs):
    """Eight agents acquire, run, release the same thread concurrently (§3.3:
    the transitions of one thread never overlap); whenever one runs, the
    sandbox is there; at the end it is parked once."""
    m = sbxfs()
    p = provider_for(m)
    leases = sbxfs_deerflow.SandboxLeaseManager(p)
    errors = []

    def agent(i):
        try:
            for k in range(4):
                owner = f"agent:{i}-{k}"
                sid = leases.acquire(owner, "shared", user_id="alice")
                out = p.get(sid).execute_command(f"echo {i}-{k}")
                if out != f"{i}-{k}\n":
                    errors.append(out)
                leases.release(owner)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(100)
    assert not errors, errors
    assert not (m.mnt / "alice" / "shared").exists() and warm(m) == 1


def test_run_sync_lifecycle_operation_drains_on_cancellation():
    """§3.1: the worker runs to completion; the cancellation comes after."""
    done = threading.Event()

    def slow():
        time.sleep(0.5)
        done.set()
        return 7

    async def main():
        task = asyncio.ensure_future(sbxfs_deerflow.run_sync_lifecycle_operation(slow))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return done.is_set()

    assert asyncio.run(main()) is True, "the cancellation was delivered before the operation ended"
    assert asyncio.run(sbxfs_deerflow.run_sync_lifecycle_operation(lambda: 5)) == 5


def test_async_twins(sbxfs):
    m = sbxfs()
    p = provider_for(m)

    async def main():
        sid = await p.acquire_async("t", user_id="alice")
        assert await p.consume_network_policy_events_async(sid) == []
        assert await p.deny_pending_network_policy_events_async(sid) is True
        assert await p.decide_network_policy_request_async(sid, "x", "deny") is False
        return sid

    sid = asyncio.run(main())
    assert sid == scope_token("alice", "t") and (m.mnt / "alice" / "t").exists()


# --------------------------------------------------------------------------
# network events and decisions (§7)


@pytest.mark.timeout_s(120)
def test_network_events_consumed_and_decided_through_the_package(sbxfs, servers):  # noqa: F811
    m = sbxfs(config=allowlist_conf(servers))
    p = provider_for(m)
    assert p.sandbox_network_mode() == "allowlist" and p.sandbox_network_temporary_grant_ttl() == 30
    sid = p.acquire("t", user_id="alice")
    sb = p.get(sid)
    fetch = "curl -s -o /dev/null -w '%{http_code}\\n' http://api.example.test/x"
    assert sb.execute_command(fetch).startswith("403"), "not allowed yet"
    [ev] = p.consume_network_policy_events(sid)
    assert (ev["host"], ev["port"], ev["method"]) == ("api.example.test", 80, "GET"), ev
    assert set(ev) == {"request_id", "host", "port", "method", "created_at"}
    assert p.consume_network_policy_events(sid) == [], "an event is consumed once"
    assert p.decide_network_policy_request(sid, ev["request_id"], "maybe") is False
    assert p.decide_network_policy_request(sid, "not-a-uuid", "deny") is False
    assert p.decide_network_policy_request(sid, "00000000-0000-4000-8000-000000000000", "deny") is False
    assert p.decide_network_policy_request("0000000000000000", ev["request_id"], "deny") is False
    assert p.decide_network_policy_request(sid, ev["request_id"], "allow_temporary") is True
    assert p.decide_network_policy_request(sid, ev["request_id"], "allow_temporary") is True  # the same again
    assert p.decide_network_policy_request(sid, ev["request_id"], "deny") is False  # a different decision
    assert sb.execute_command(fetch) == "200\n"
    # deny-pending: unsurfaced events are denied, nothing is left to consume
    assert sb.execute_command("curl -s -o /dev/null -w '%{http_code}\\n' http://other.example.test/").startswith("403")
    assert p.deny_pending_network_policy_events(sid) is True
    assert p.consume_network_policy_events(sid) == []
    net = read_json(m.mnt / "alice" / "t" / "network")
    assert {e["host"]: e["decision"] for e in net["events"]} == {"api.example.test": "allow_temporary",
                                                                  "other.example.test": "deny"}, net


def test_network_outside_allowlist_has_no_events(sbxfs):
    m = sbxfs(config={"network": {"mode": "isolated"}})
    p = provider_for(m)
    sid = p.acquire("t", user_id="alice")
    assert p.sandbox_network_mode() == "isolated"
    assert p.consume_network_policy_events(sid) == []
    assert p.deny_pending_network_policy_events(sid) is True  # irrelevant: done (§7.4)
    assert p.decide_network_policy_request(sid, "00000000-0000-4000-8000-000000000000", "deny") is False
    assert p.consume_network_policy_events("unknown") == [] and p.deny_pending_network_policy_events("x") is False


# --------------------------------------------------------------------------
# skills (§10.3)


def projection(root, **cats):
    """DeerFlow's SkillProjectionPaths: public, custom, legacy, integrations."""
    class P:
        pass
    p = P()
    for c in ("public", "custom", "legacy", "integrations"):
        setattr(p, c, str(root / c) if c in cats else None)
        for rel, text in (cats.get(c) or {}).items():
            f = root / c / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(text)
    return p


def test_skills_synced_changed_and_removed(sbxfs, tmp_path):
    m = sbxfs()
    p = provider_for(m)
    sid = p.acquire("t", user_id="alice")
    sb = p.get(sid)
    proj = projection(tmp_path / "v1", public={"pdf/SKILL.md": "# pdf\n", "pdf/scripts/run.sh": "echo pdf\n"},
                      custom={"mine/SKILL.md": "# mine\n"})
    os.symlink("SKILL.md", tmp_path / "v1" / "public" / "pdf" / "README.md")
    p.sync_agent_skills(sid, thread_id="t", user_id="alice", projection=proj)
    out = sb.execute_command("cat /mnt/skills/public/pdf/SKILL.md /mnt/skills/custom/mine/SKILL.md "
                             "/mnt/skills/public/pdf/README.md; sh /mnt/skills/public/pdf/scripts/run.sh")
    assert out == "# pdf\n# mine\n# pdf\npdf\n", out
    host = m.thread_data("alice", "t") / "skills"
    ino = os.stat(host / "custom" / "mine" / "SKILL.md").st_ino
    # a second sync: one file changed, one removed, one category gone
    (tmp_path / "v1" / "public" / "pdf" / "SKILL.md").write_text("# pdf v2\n")
    os.unlink(tmp_path / "v1" / "public" / "pdf" / "scripts" / "run.sh")
    proj.custom = str(tmp_path / "v1" / "custom")
    proj.legacy = None
    p.sync_agent_skills(sid, thread_id="t", user_id="alice", projection=proj)
    assert sb.execute_command("cat /mnt/skills/public/pdf/SKILL.md; ls /mnt/skills/public/pdf/scripts") == "# pdf v2\n"
    assert os.stat(host / "custom" / "mine" / "SKILL.md").st_ino == ino, "an unchanged file was rewritten"
    proj.custom = None
    p.sync_agent_skills(sid, thread_id="t", user_id="alice", projection=proj)
    assert "/mnt/skills/custom" not in sb.execute_command("ls -d /mnt/skills/*")
    # checked before anything changes (§10.3): an absolute symlink, a root that is a symlink
    bad = projection(tmp_path / "bad", public={"x/SKILL.md": "# x\n"})
    os.symlink("/etc/passwd", tmp_path / "bad" / "public" / "x" / "leak")
    with pytest.raises(ValueError):
        p.sync_agent_skills(sid, thread_id="t", user_id="alice", projection=bad)
    os.symlink(tmp_path / "v1" / "public", tmp_path / "linked-root")
    bad2 = projection(tmp_path / "none")
    bad2.public = str(tmp_path / "linked-root")
    with pytest.raises(ValueError):
        p.sync_agent_skills(sid, thread_id="t", user_id="alice", projection=bad2)
    assert read_text(host / "public" / "pdf" / "SKILL.md") == "# pdf v2\n", "a refused sync changed something"
    with pytest.raises(RuntimeError):
        p.sync_agent_skills("0000000000000000", thread_id="t", user_id="alice", projection=proj)


# --------------------------------------------------------------------------
# an agent's turn (local provider; test_deerflow_docker.py plays it on docker)


@pytest.mark.timeout_s(120)
def test_an_agents_turn(sbxfs):
    m = sbxfs()
    log = agent_turn(provider_for(m))
    assert [t[0] for t in log] == ["execute_command", "grep", "execute_command"]
    assert warm(m) == 1
