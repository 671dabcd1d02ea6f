# SPDX-License-Identifier: MIT
"""The remote providers (issue 11): `opensandbox` (an OpenSandbox server:
lifecycle API + execd) and `aio` at a `base_url` (an existing AIO sandbox),
against the fake servers of tests/fakes (remoteutil.py), through a real
mount: the lifecycle (DESIGN §4) and jobs (§6) suites as they apply to a
sandbox that lives on a server, terminal failures (a sandbox that vanished
remotely is invalidated), renewal, adoption after kill -9, every fault
switch of the fakes (the daemon stays up, the errno is right and bounded by
request_timeout, no remote sandbox leaks), secrets, and hostile
configuration.  What a provider cannot do is skipped with the reason.

The files under workspace/ of a remote sandbox are the sandbox's own once
the FUSE layer's remote-files backend drives the providers' files ops; the
tests here go through jobs (which run in the sandbox) for what the sandbox
sees, so they hold either way."""

import errno
import json
import os
import signal
import socket
import threading
import time
import urllib.request

import pytest

import sbxutil
import test_jobs as J
import test_lifecycle as L
from remoteutil import (all_proc_text, fake, needs, remote, remote_config, sandbox_id, sbxfs,  # noqa: F401
                        wait_gone)
from sbxutil import ProcRef, expect_errno, mkdir_ready, read_json, read_text, wait_until


# tests of what one provider alone has (its fake's switches, its API)
OS_ONLY = pytest.mark.parametrize("remote", ["opensandbox"], indirect=True)
AIO_ONLY = pytest.mark.parametrize("remote", ["aio_url"], indirect=True)


def acquire(m, user="alice", thread="t"):
    d = m.mnt / user / thread
    sbxutil.mkdir_ready(d, parents=True)
    return d


def ident(d):
    """What names one sandbox: its remote id and its creation time."""
    st = sbxutil.status(d)
    return st["remote_id"], st["created_at"]


def os_api(fake, method, path, key=None):
    """The fake OpenSandbox's lifecycle API, as a client would call it."""
    h = {"OPEN-SANDBOX-API-KEY": key} if key else {}
    req = urllib.request.Request(f"http://127.0.0.1:{fake.port}/v1{path}", method=method, headers=h)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def running(fake):
    return [s for s in fake.sandboxes() if s["state"] == "Running"]


def job(t, name, cmd, **kw):
    return J.run_job(t, name, cmd, **kw)


# --------------------------------------------------------------------------
# lifecycle


def test_mkdir_makes_a_remote_sandbox_that_jobs_run_in(sbxfs, remote, fake):
    m = sbxfs()
    t = acquire(m)
    st = sbxutil.status(t)
    assert st["provider"] == ("opensandbox" if remote == "opensandbox" else "aio") and st["state"] == "active", st
    code, out, err = job(t, "ls", "pwd; ls /mnt/user-data; test -d /mnt/skills && echo skills")
    assert code == 0, err
    assert out == "/mnt/user-data/workspace\noutputs\nuploads\nworkspace\nskills\n", out
    if remote == "opensandbox":
        [sb] = fake.sandboxes()
        assert st["remote_id"] == f"opensandbox:{sb['id']}" and st["sandbox_id"] == sb["id"]
        meta = os_api(fake, "GET", f"/sandboxes/{sb['id']}")["metadata"]
        assert meta["sbxfs-scope"] == read_text(t / "id").strip() and meta["sbxfs-provider"] == "opensandbox"
        assert meta["sbxfs-user"] == "alice" and meta["sbxfs-thread"] == "t"
        assert len(meta["sbxfs-state-id"]) == 8, meta
        assert st["expires_at"] and st["execd"].startswith(f"http://127.0.0.1:{fake.port}/"), st
    else:
        marker = json.loads((fake.root / "mnt" / "user-data" / ".sbxfs-scope.json").read_text())
        assert marker["scope"] == read_text(t / "id").strip() and marker["user"] == "alice", marker
        assert st["base_url"] == f"http://127.0.0.1:{fake.port}"


@OS_ONLY
def test_metadata_of_a_name_that_is_no_label_value(sbxfs, remote, fake):
    """A user name may begin with _ (valid for sbxfs, not a Kubernetes label
    value): the sandbox carries the scope token alone."""
    m = sbxfs()
    t = acquire(m, "_u", "t-")
    [sb] = fake.sandboxes()
    meta = os_api(fake, "GET", f"/sandboxes/{sb['id']}")["metadata"]
    assert meta["sbxfs-scope"] == read_text(t / "id").strip()
    assert "sbxfs-user" not in meta and "sbxfs-thread" not in meta, meta


def test_warm_reclaim_keeps_the_sandbox_and_its_files(sbxfs, remote, fake):
    m = sbxfs()
    t = acquire(m)
    first = ident(t)
    code, _, err = job(t, "w", "echo kept > /mnt/user-data/workspace/keep.txt")
    assert code == 0, err
    os.rmdir(t)
    assert not t.exists()
    st = read_json(m.mnt / ".status")
    assert st["warm"] == 1 and st["active"] == 0, st
    os.mkdir(t)
    assert ident(t) == first
    code, out, _ = job(t, "r", "cat /mnt/user-data/workspace/keep.txt")
    assert (code, out) == (0, "kept\n")
    if remote == "opensandbox":
        assert len(fake.sandboxes()) == 1


def test_warm_sandbox_that_died_is_recreated_and_status_says_so(sbxfs, remote, fake):
    m = sbxfs()
    t = acquire(m)
    first = ident(t)
    os.rmdir(t)
    if remote == "opensandbox":
        os.kill(fake.sandbox(first[0].split(":", 1)[1])["init_pid"], signal.SIGKILL)
        assert wait_until(lambda: fake.sandboxes()[0]["state"] == "Failed", 10), fake.sandboxes()
    else:
        (fake.root / "mnt" / "user-data" / ".sbxfs-scope.json").unlink()  # the sandbox was reset behind us
    os.mkdir(t)
    if remote == "opensandbox":
        assert ident(t) != first
    st = sbxutil.status(t)
    assert "recreated" in st.get("last_event", ""), st
    code, out, _ = job(t, "alive", "echo alive")
    assert (code, out) == (0, "alive\n")
    if remote == "opensandbox":
        assert [s["state"] for s in fake.sandboxes()] == ["Running"], "the dead sandbox was not deleted"


@pytest.mark.timeout_s(120)
@OS_ONLY
def test_renewal_keeps_a_short_ttl_alive_then_expiry_invalidates(sbxfs, remote, fake):
    """sandbox_timeout 3 s: the expiry is pushed while the sandbox is active
    and while it is warm; when the server drops it anyway (it expired), the
    sandbox is invalidated: its directory goes, status says why, and the next
    mkdir makes a fresh one."""
    fake.config(min_timeout=1)
    m = sbxfs(config={"sandbox_timeout": 3})
    t = acquire(m)
    sid = sandbox_id(t)
    time.sleep(5)  # past the TTL: renewals keep it
    assert [s["id"] for s in running(fake)] == [sid]
    os.rmdir(t)
    time.sleep(4)  # warm: still renewed
    assert [s["id"] for s in running(fake)] == [sid]
    renewals = fake.requests()["counters"].get("POST /v1/sandboxes/{id}/renew-expiration", 0)
    assert renewals >= 4, fake.requests()["counters"]
    mkdir_ready(t)
    fake.expire(sid)  # the server lets it go (expired, or someone deleted it)
    assert wait_gone(t, 20), "an expired sandbox's directory must disappear"
    st = read_json(m.mnt / ".status")
    assert st["active"] == 0 and "gone" in json.dumps(st.get("last_error")), st
    os.mkdir(t)
    assert sandbox_id(t) != sid
    ev = sbxutil.status(t).get("last_event", "")
    assert "invalidated" in ev and "404" in ev, ev
    code, out, _ = job(t, "fresh", "echo fresh")
    assert (code, out) == (0, "fresh\n")


@OS_ONLY
def test_active_sandbox_deleted_behind_our_back_is_invalidated(sbxfs, remote, fake):
    m = sbxfs()
    t = acquire(m)
    sid = sandbox_id(t)
    os_api(fake, "DELETE", f"/sandboxes/{sid}")
    # the next thing that talks to it finds out: a job
    j = J.mkjob(t, "after")
    try:
        J.start(j, "echo never")
    except OSError:
        pass
    assert wait_gone(t, 20)
    os.mkdir(t)
    assert sandbox_id(t) != sid
    assert "invalidated" in sbxutil.status(t).get("last_event", "")


@pytest.mark.timeout_s(120)
def test_replicas_evict_the_oldest_warm_remote_sandbox(sbxfs, remote, fake):
    needs(remote, "scopes")
    m = sbxfs(config={"replicas": 2})
    ids = {}
    for th in ("t1", "t2", "t3"):
        d = acquire(m, "alice", th)
        ids[th] = sandbox_id(d)
        os.rmdir(d)
    assert wait_until(lambda: {s["id"] for s in fake.sandboxes()} == {ids["t2"], ids["t3"]}, 15), fake.sandboxes()
    metrics = sbxutil.parse_metrics(read_text(m.mnt / ".metrics"))
    assert metrics.get("sbxfs_evictions_total") == 1, metrics


@AIO_ONLY
def test_base_url_serves_one_scope_at_a_time(sbxfs, remote, fake):
    m = sbxfs(config={"acquire": "sync"})
    a = acquire(m, "alice", "a")
    code, _, _ = job(a, "w", "echo secret > /mnt/user-data/workspace/alice.txt; echo s > /mnt/skills/s")
    assert code == 0
    os.mkdir(m.mnt / "bob")
    expect_errno(lambda: mkdir_ready(m.mnt / "bob" / "b"), errno.EBUSY)
    assert not (m.mnt / "bob" / "b").exists()
    os.rmdir(a)  # warm: the next scope's create evicts it (replicas 1) and gets it clean
    b = acquire(m, "bob", "b")
    code, out, _ = job(b, "ls", "ls -A /mnt/user-data/workspace /mnt/skills")
    assert code == 0 and "alice.txt" not in out and "\ns\n" not in out, out
    assert read_json(m.mnt / ".config")["replicas"] == 1


@pytest.mark.timeout_s(120)
def test_idle_reaper_deletes_the_remote_sandbox(sbxfs, remote, fake):
    m = sbxfs(config={"idle_timeout": 2, "idle_check_interval": 1})
    t = acquire(m)
    os.rmdir(t)
    metrics = lambda: sbxutil.parse_metrics(read_text(m.mnt / ".metrics"))  # noqa: E731
    assert wait_until(lambda: metrics().get("sbxfs_reaps_total", 0) >= 1, 15), metrics()
    if remote == "opensandbox":
        assert wait_until(lambda: fake.sandboxes() == [], 10), fake.sandboxes()
    else:
        assert wait_until(lambda: not (fake.root / "mnt" / "user-data" / ".sbxfs-scope.json").exists(), 10)


@pytest.mark.timeout_s(120)
def test_concurrent_mkdirs_make_one_remote_sandbox(sbxfs, remote, fake):
    m = sbxfs()
    os.mkdir(m.mnt / "alice")
    t = m.mnt / "alice" / "t"
    n = 8
    barrier = threading.Barrier(n)
    results = [None] * n

    def worker(i):
        barrier.wait()
        try:
            os.mkdir(t)
            results[i] = 0
        except OSError as e:
            results[i] = e.errno

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    [th.start() for th in ths]
    [th.join(60) for th in ths]
    assert results.count(0) == 1, [sbxutil.errname(r) if r else 0 for r in results]
    assert {sbxutil.errname(r) for r in results if r} == {"EEXIST"}
    sbxutil.wait_ready(t)
    if remote == "opensandbox":
        assert len(fake.sandboxes()) == 1


@pytest.mark.timeout_s(120)
def test_concurrent_mkdir_different_scopes(sbxfs, remote):
    needs(remote, "scopes")
    L.test_concurrent_mkdir_different_scopes(sbxfs())


@pytest.mark.timeout_s(150)
def test_kill9_restart_adopts_by_record_and_leaks_nothing(sbxfs, remote, fake):
    m = sbxfs()
    a = acquire(m, "alice", "active")
    code, _, _ = job(a, "w", "echo A > /mnt/user-data/workspace/a.txt")
    ids = {"active": ident(a)}
    if remote == "opensandbox":
        w = acquire(m, "alice", "warm")
        ids["warm"] = ident(w)
        os.rmdir(w)
    m.kill9()
    m.umount(lazy=True)
    m.restart()
    st = read_json(m.mnt / ".status")
    assert st["warm"] == len(ids) and st["adopted"] == len(ids) and st["active"] == 0, st
    for name, before in ids.items():
        d = m.mnt / "alice" / name
        os.mkdir(d)
        assert ident(d) == before, f"{name}: not adopted"
    code, out, _ = job(m.mnt / "alice" / "active", "r", "cat /mnt/user-data/workspace/a.txt")
    assert (code, out) == (0, "A\n")
    if remote == "opensandbox":
        assert len(fake.sandboxes()) == 2
    assert m.stop() == 0  # and the fixture checks that nothing is left on the server


@pytest.mark.timeout_s(150)
@OS_ONLY
def test_kill9_restart_adopts_by_metadata_when_the_record_is_lost(sbxfs, remote, fake):
    """The provider's own record (the sandbox id) lost, the pool's says the
    sandbox was ready: the next start finds it by metadata (state_id, scope)
    and adopts it."""
    m = sbxfs()
    t = acquire(m)
    sid = sandbox_id(t)
    code, _, _ = job(t, "w", "echo meta > /mnt/user-data/workspace/m")
    m.kill9()
    m.umount(lazy=True)
    (m.thread_data("alice", "t") / "opensandbox.json").unlink()
    m.restart()
    assert read_json(m.mnt / ".status")["adopted"] == 1
    os.mkdir(t)
    assert sandbox_id(t) == sid
    assert job(t, "r", "cat /mnt/user-data/workspace/m")[1] == "meta\n"
    assert [s["id"] for s in fake.sandboxes()] == [sid]


@pytest.mark.timeout_s(150)
@OS_ONLY
def test_unrecorded_remote_sandboxes_are_removed_at_start(sbxfs, remote, fake):
    """A kill -9 between the create and its records: the next start finds the
    sandboxes by metadata (discover) and deletes them, also one whose user
    name is no label value (only its scope token says it is ours)."""
    m = sbxfs()
    acquire(m, "alice", "t")
    acquire(m, "_x", "t")
    assert len(fake.sandboxes()) == 2
    m.kill9()
    m.umount(lazy=True)
    for user in ("alice", "_x"):
        for rec in ("sandbox.json", "opensandbox.json"):
            (m.thread_data(user, "t") / rec).unlink()
    m.restart()
    assert wait_until(lambda: fake.sandboxes() == [], 20), fake.sandboxes()
    assert read_json(m.mnt / ".status")["warm"] == 0


@pytest.mark.timeout_s(120)
def test_unmount_and_sigterm_delete_the_remote_sandboxes(sbxfs, remote, fake):
    m = sbxfs()
    acquire(m, "alice", "t1")
    if remote == "opensandbox":
        acquire(m, "bob", "t2")
        os.rmdir(m.mnt / "bob" / "t2")
    assert m.stop() == 0
    if remote == "opensandbox":
        assert wait_until(lambda: fake.sandboxes() == [], 10), fake.sandboxes()
    else:
        assert not (fake.root / "mnt" / "user-data" / ".sbxfs-scope.json").exists()
    m2 = sbxfs()
    acquire(m2, "carol", "t")
    m2.proc.send_signal(signal.SIGTERM)
    m2.proc.wait(timeout=30)
    if remote == "opensandbox":
        assert wait_until(lambda: fake.sandboxes() == [], 10), fake.sandboxes()


@pytest.mark.timeout_s(120)
def test_keep_on_exit_then_adopt(sbxfs, remote, fake):
    m = sbxfs(config={"keep_on_exit": True})
    t = acquire(m)
    before = ident(t)
    code, _, _ = job(t, "w", "echo k > /mnt/user-data/workspace/k")
    assert m.stop() == 0
    if remote == "opensandbox":
        assert len(running(fake)) == 1, "keep_on_exit: the remote sandbox must stay"
    m.restart()
    os.mkdir(t)
    assert ident(t) == before
    code, out, _ = job(t, "r", "cat /mnt/user-data/workspace/k")
    assert (code, out) == (0, "k\n")
    # the test's own end: let the daemon destroy it
    m.config["keep_on_exit"] = False
    import conftest
    m.conf.write_text(conftest.dump_yaml(m.config))
    m.stop()
    m.restart()
    assert m.stop() == 0
    if remote == "opensandbox":
        assert wait_until(lambda: fake.sandboxes() == [], 10), fake.sandboxes()


def test_network_file_says_who_enforces_egress(sbxfs, remote, fake):
    cfg = {"network": {"mode": "allowlist", "allow_domains": ["pypi.org"]}} if remote == "opensandbox" else {}
    m = sbxfs(config=cfg)
    t = acquire(m)
    net = read_json(t / "network")
    assert net["enforced_by"] and not net["events_available"], net
    assert ("opensandbox" if remote == "opensandbox" else "AIO") in net["enforced_by"], net


# --------------------------------------------------------------------------
# jobs


def test_job_exit_stdout_stderr_and_status(sandbox):
    m, t = sandbox
    j = J.mkjob(t, "j1")
    J.start(j, "echo out; echo err >&2; exit 7")
    assert J.wait_exit(j) == 7
    assert read_text(j / "stdout") == "out\n" and read_text(j / "stderr") == "err\n"
    st = J.jstatus(j)
    assert st["state"] == "exited" and st["exit"] == 7 and st["signal"] == 0, st
    assert st["stdout_bytes"] == 4 and st["stderr_bytes"] == 4 and st["timeout"] == 600, st
    j0 = J.mkjob(t, "j0")
    J.start(j0, "true")
    assert J.wait_exit(j0) == 0 and read_text(j0 / "stdout") == ""


def test_job_runs_with_sh_in_the_workspace(sandbox):
    m, t = sandbox
    # execd runs bash -c: sbxfs hands the text to /bin/sh, and nothing of
    # how it travelled stays in the job's environment
    code, out, err = job(t, "sh", 'pwd; [ -z "$SBXFS_CMD" ] && [ -z "$SBXFS_C" ] && echo clean; '
                                  'x=1; [ "${BASH_VERSION:-}" ] && echo bash || echo sh')
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:2] == ["/mnt/user-data/workspace", "clean"], out


def test_env_file_and_config_environment(sbxfs):
    J.test_env_file_and_config_environment(sbxfs)


def test_env_values_with_newlines_in_nul_separated_entries(sandbox):
    J.test_env_values_with_newlines_in_nul_separated_entries(sandbox)


def test_stdin_is_fed_to_the_command(sandbox):
    J.test_stdin_is_fed_to_the_command(sandbox)


def test_large_stdin_with_cp(sandbox, tmp_path):
    J.test_large_stdin_with_cp(sandbox, tmp_path)


def test_commands_that_are_not_utf8_and_big_commands(sandbox):
    m, t = sandbox
    j = J.mkjob(t, "bin")
    J.write_ctl(j / "cmd", b"x='\xff\xfe'; printf '%s' \"$x\" | od -An -tx1 | tr -d ' \\n'; echo\n")
    assert J.wait_exit(j) == 0
    assert read_text(j / "stdout") == "fffe\n"
    big = "true; " * 40000 + "echo big"  # 240 KB: over one environment string
    code, out, err = job(t, "big", big)
    assert (code, out) == (0, "big\n"), err


@pytest.mark.timeout_s(60)
def test_stdout_streams_while_running(sandbox):
    J.test_stdout_streams_while_running(sandbox)


@pytest.mark.timeout_s(90)
def test_bash_command_timeout(sbxfs):
    J.test_bash_command_timeout(sbxfs)


@pytest.mark.timeout_s(120)
def test_job_timeout_file(sbxfs):
    J.test_job_timeout_file(sbxfs)


@pytest.mark.timeout_s(60)
def test_kill_ends_job(sandbox):
    J.test_kill_ends_job(sandbox)


# execd interrupts (SIGTERM, then SIGKILL after its grace): "kill" and "kill
# KILL" both interrupt, and the status names the signal that ended the
# command; the AIO API sends SIGTERM, SIGKILL and SIGINT as asked
KILLS = {"opensandbox": {"kill": 15, "kill KILL": 15, "kill 9": 15, "kill TERM": 15, "kill SIGINT": None},
         "aio_url": {"kill": 15, "kill KILL": 9, "kill 9": 9, "kill TERM": 15, "kill SIGINT": 2}}


@pytest.mark.timeout_s(60)
@pytest.mark.parametrize("spec", ["kill", "kill KILL"])
def test_kill_right_after_start(sandbox, remote, spec):
    m, t = sandbox
    j = J.mkjob(t, "k")
    J.start(j, "sleep 100")
    assert J.jstatus(j)["state"] == "running"
    J.write_ctl(j / "ctl", spec)
    sig = KILLS[remote][spec]
    assert J.wait_exit(j, 10) == 128 + sig
    st = J.jstatus(j)
    assert st["state"] == "killed" and st["signal"] == sig, st


@pytest.mark.timeout_s(60)
@pytest.mark.parametrize("spec", ["kill 9", "kill TERM", "kill SIGINT", "kill SIGUSR1"])
def test_kill_with_signal(sandbox, remote, spec):
    m, t = sandbox
    j = J.mkjob(t, "k")
    J.start_ready(j)
    sig = KILLS[remote].get(spec)
    if sig is None:
        expect_errno(lambda: J.write_ctl(j / "ctl", spec), errno.EOPNOTSUPP)
        assert J.jstatus(j)["state"] == "running"
        J.write_ctl(j / "ctl", "kill KILL")
        sig = KILLS[remote]["kill KILL"]
    else:
        J.write_ctl(j / "ctl", spec)
    assert J.wait_exit(j, 10) == 128 + sig
    st = J.jstatus(j)
    assert st["state"] == "killed" and st["signal"] == sig, st


@pytest.mark.timeout_s(60)
def test_kill_escalates_for_a_job_that_ignores_term(sandbox, remote):
    if remote == "aio_url":
        pytest.skip("the AIO fake (host mode) runs each command in a bubblewrap of its own, which any signal ends")
    J.test_kill_escalates_for_a_job_that_ignores_term(sandbox)


@pytest.mark.timeout_s(90)
def test_jobs_survive_release_and_reclaim(sandbox):
    m, t = sandbox
    before = ident(t)
    code, _, _ = job(t, "done", "echo finished output; echo e >&2; exit 3")
    assert code == 3
    j2 = J.mkjob(t, "running")
    J.start(j2, "sleep 3; echo late")
    os.rmdir(t)
    os.mkdir(t)
    assert ident(t) == before, "not a warm reclaim"
    assert sorted(os.listdir(t / "jobs")) == ["done", "running"]
    assert J.wait_exit(t / "jobs" / "done") == 3
    assert read_text(t / "jobs" / "done" / "stdout") == "finished output\n"
    assert J.wait_exit(j2, 15) == 0
    assert read_text(j2 / "stdout") == "late\n"


@pytest.mark.timeout_s(120)
def test_job_output_survives_daemon_restart(sandbox):
    J.test_job_output_survives_daemon_restart(sandbox)


@pytest.mark.timeout_s(120)
def test_running_job_survives_daemon_kill9(sandbox):
    """The job's real exit status after a kill -9 of the daemon; its output
    in full where the API keeps it (AIO), else what arrived before the
    crash, and the status says what is missing (execd)."""
    m, t = sandbox
    j = J.mkjob(t, "through")
    J.start(j, "echo start; sleep 4; echo finished; exit 6")
    assert wait_until(lambda: J.jstatus(j)["stdout_bytes"] >= 6, 10)
    m.kill9()
    m.restart()
    os.makedirs(t, exist_ok=True)
    assert J.wait_exit(j, 30) == 6
    st = J.jstatus(j)
    assert st["state"] == "exited" and st["exit"] == 6, st
    if m.remote == "aio_url":
        assert read_text(j / "stdout") == "start\nfinished\n"
    else:
        assert read_text(j / "stdout").startswith("start\n")
        result = json.loads((m.thread_data("alice", "t") / "jobs" / "through" / "result").read_text())
        assert "missing" in result.get("note", ""), result


@pytest.mark.timeout_s(120)
@OS_ONLY
def test_job_of_a_sandbox_that_vanished_while_the_daemon_was_down_is_lost(sandbox, remote, fake):
    m, t = sandbox
    sid = sandbox_id(t)
    init = ProcRef(fake.sandbox(sid)["init_pid"])
    j = J.mkjob(t, "victim")
    J.start(j, "echo start; sleep 100")
    assert wait_until(lambda: J.jstatus(j)["stdout_bytes"] >= 6, 10)
    m.kill9()
    m.umount(lazy=True)
    fake.expire(sid)
    assert wait_until(lambda: not init.alive(), 15), "the fake did not end the expired sandbox"
    m.restart()
    os.makedirs(t, exist_ok=True)
    rc, out, _ = J.cat(j / "exit", 15)
    assert rc == 0 and out.strip().isdigit()
    assert J.jstatus(j)["state"] == "lost", J.jstatus(j)
    assert read_text(j / "stdout") == "start\n"
    assert sandbox_id(t) != sid


HOST_MODE = "the AIO fake (host mode) runs each command in a sandbox of its own (pids, loopback)"


@pytest.mark.timeout_s(60)
def test_background_process_visible_to_next_job(sandbox, remote):
    if remote == "aio_url":
        pytest.skip(HOST_MODE)
    J.test_background_process_visible_to_next_job(sandbox)


@pytest.mark.timeout_s(90)
def test_server_of_one_job_reachable_from_another(sbxfs, remote):
    if remote == "aio_url":
        pytest.skip(HOST_MODE)
    m = sbxfs()
    t = acquire(m)
    port = J.free_port()
    code, _, err = job(t, "a", f"cd /tmp && echo served > s.txt && python3 -m http.server {port} --bind 127.0.0.1 "
                               f">/dev/null 2>&1 &")
    assert code == 0, err
    client = ("import sys, time, urllib.request\n"
              "for i in range(50):\n"
              "    try:\n"
              f"        sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:{port}/s.txt', timeout=2)"
              ".read().decode()); break\n"
              "    except Exception as e:\n"
              "        err = e; time.sleep(0.2)\n"
              "else:\n"
              "    print('failed', err)\n")
    code, out, err = job(t, "b", "NO_PROXY='*' python3 -", stdin=client, timeout=30)
    assert out == "served\n", (out, err)
    job(t, "c", f"pkill -f 'http[.]server {port}'")


@pytest.mark.timeout_s(180)
def test_20_concurrent_jobs_across_4_sandboxes(sbxfs, remote):
    needs(remote, "scopes")
    m = sbxfs(config={"replicas": 4})
    sbxs = [acquire(m, "alice", f"t{i}") for i in range(4)]
    results, errors = {}, []

    def one(si, ji):
        try:
            j = J.mkjob(sbxs[si], f"j{ji}")
            J.start(j, f'sleep 1; echo "$JOB_ID"; echo {si} > w{ji}; cat w{ji}; exit {ji}', env=f"JOB_ID=job-{si}-{ji}\n")
            results[(si, ji)] = (J.wait_exit(j, 60), read_text(j / "stdout"))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((si, ji, repr(e)))

    ths = [threading.Thread(target=one, args=(si, ji), daemon=True) for si in range(4) for ji in range(5)]
    [th.start() for th in ths]
    [th.join(120) for th in ths]
    assert not errors, errors
    assert results == {(si, ji): (ji, f"job-{si}-{ji}\n{si}\n") for si in range(4) for ji in range(5)}


def test_kill_all_is_refused_or_ends_the_scopes_commands(sandbox, remote):
    m, t = sandbox
    j = J.mkjob(t, "long")
    J.start_ready(j)
    if remote == "opensandbox":
        expect_errno(lambda: J.write_ctl(t / "ctl", "kill"), errno.EOPNOTSUPP)
        J.write_ctl(j / "ctl", "kill KILL")
        assert J.wait_exit(j, 15) == 128 + KILLS[remote]["kill KILL"]
    else:
        J.write_ctl(t / "ctl", "kill")
        assert J.wait_exit(j, 15) == 137
    assert J.jstatus(j)["state"] == "killed"


# --------------------------------------------------------------------------
# faults: the daemon stays up, the errno is right and bounded, nothing leaks


CREATE_FAULTS = [
    ({"kind": "http_error", "path": "^/v1/sandboxes$", "method": "POST", "status": 500, "count": 1}, errno.EIO),
    ({"kind": "http_error", "path": "^/v1/sandboxes$", "method": "POST", "status": 401, "code": "INVALID_API_KEY",
      "count": 1}, errno.EACCES),
    ({"kind": "malformed_json", "path": "^/v1/sandboxes$", "method": "POST", "count": 1}, errno.EIO),
    ({"kind": "delay", "ms": 8000, "path": "^/v1/sandboxes$", "method": "POST", "count": 1}, errno.ETIMEDOUT),
    ({"kind": "drop_stream", "path": "^/v1/sandboxes$", "method": "POST", "count": 1}, errno.EIO),
    ({"kind": "http_error", "path": "/endpoints/", "status": 500}, errno.EIO),
    ({"kind": "ping_fail"}, errno.ETIMEDOUT),
    ({"kind": "pending_forever"}, errno.ETIMEDOUT),
    ({"kind": "http_error", "path": "^/[0-9a-f-]+/44772/directories$", "status": 500}, errno.EIO),
]


@pytest.mark.timeout_s(120)
@pytest.mark.parametrize("spec,want", CREATE_FAULTS, ids=lambda v: v["kind"] + "-" + v.get("path", "") if
                         isinstance(v, dict) else errno.errorcode[v])
@OS_ONLY
def test_create_fault_gives_the_errno_and_leaves_nothing(sbxfs, remote, fake, spec, want):
    m = sbxfs(config={"acquire": "sync", "request_timeout": 2, "ready_timeout": 3})
    fake.fault(spec)
    os.mkdir(m.mnt / "alice")
    t0 = time.monotonic()
    e = expect_errno(lambda: mkdir_ready(m.mnt / "alice" / "t"), want)
    took = time.monotonic() - t0
    assert took < 15, f"mkdir took {took:.1f} s with request_timeout 2 and ready_timeout 3"
    assert e.errno == want
    assert not (m.mnt / "alice" / "t").exists()
    assert m.running() and os.statvfs(m.mnt)
    assert read_json(m.mnt / ".status")["last_error"], read_json(m.mnt / ".status")
    # a late sandbox (the server made it after sbxfs gave up) is deleted too
    assert wait_until(lambda: fake.sandboxes() == [], 40), fake.sandboxes()
    fake.clear_faults()
    os.mkdir(m.mnt / "alice" / "t")
    code, out, _ = job(m.mnt / "alice" / "t", "ok", "echo ok")
    assert (code, out) == (0, "ok\n")


@pytest.mark.timeout_s(90)
@pytest.mark.parametrize("spec", [
    {"kind": "drop_stream", "path": "/command$", "method": "POST", "after_events": 2, "count": 1},
    {"kind": "malformed_json", "path": "/command$", "method": "POST", "after_events": 3, "count": 1},
], ids=["drop_stream", "malformed_json"])
@OS_ONLY
def test_broken_command_stream_still_gives_the_exit_status(sandbox, remote, fake, spec):
    m, t = sandbox
    fake.fault(spec)
    j = J.mkjob(t, "b")
    J.start(j, "echo one; sleep 1; echo two; sleep 1; exit 5")
    assert J.wait_exit(j, 30) == 5
    assert J.jstatus(j)["state"] == "exited"
    assert read_text(j / "stdout").startswith("one\n")
    assert m.running()
    code, out, _ = job(t, "after", "echo after")
    assert (code, out) == (0, "after\n")


@pytest.mark.timeout_s(60)
def test_command_refused_by_the_server(sandbox, remote, fake):
    m, t = sandbox
    if remote == "opensandbox":
        fake.fault({"kind": "http_error", "path": "/command$", "method": "POST", "status": 500, "count": 1})
    else:
        fake.api.post("/_fake/faults", {"kind": "error", "path": "^/v1/bash/exec$", "status": 500, "times": 1})
    j = J.mkjob(t, "refused")
    # the write of cmd fails (the job did not start) and the slot stays usable
    expect_errno(lambda: J.start(j, "echo never"), errno.EIO)
    assert J.jstatus(j)["state"] == "created", J.jstatus(j)
    assert m.running()
    J.start(j, "echo now")
    assert J.wait_exit(j, 15) == 0 and read_text(j / "stdout") == "now\n"


@pytest.mark.timeout_s(90)
@pytest.mark.parametrize("variant", ["bare_sse", "header_endpoint", "server_proxy"])
@OS_ONLY
def test_execd_endpoint_and_stream_forms(sbxfs, remote, fake, variant):
    cfg = {}
    if variant == "bare_sse":
        fake.config(sse_form="bare")
    elif variant == "header_endpoint":
        fake.config(endpoint_style="header")
    else:
        cfg["use_server_proxy"] = True
    m = sbxfs(config=cfg)
    t = acquire(m)
    code, out, err = job(t, "j", "echo a; echo b >&2; exit 2")
    assert (code, out, err) == (2, "a\n", "b\n")
    if variant == "server_proxy":
        assert "/sandboxes/" in sbxutil.status(t)["execd"] and "/proxy/44772" in sbxutil.status(t)["execd"]


@pytest.mark.timeout_s(60)
@AIO_ONLY
def test_aio_sandbox_not_answering_is_etimedout(sbxfs, remote, fake):
    m = sbxfs(config={"acquire": "sync", "ready_timeout": 2, "request_timeout": 2})
    fake.api.post("/_fake/ready", {"ready": False})
    os.mkdir(m.mnt / "alice")
    t0 = time.monotonic()
    expect_errno(lambda: mkdir_ready(m.mnt / "alice" / "t"), errno.ETIMEDOUT)
    assert time.monotonic() - t0 < 10
    assert m.running()
    fake.api.post("/_fake/ready", {"ready": True})
    os.mkdir(m.mnt / "alice" / "t")


def test_server_that_is_not_there(sbxfs, remote, fake):
    """A domain or base_url where nothing listens: mkdir fails at once, with
    a line naming the server; the daemon stays up."""
    dead = J.free_port()
    key = "domain" if remote == "opensandbox" else "base_url"
    m = sbxfs(config={"acquire": "sync", key: f"127.0.0.1:{dead}" if remote == "opensandbox" else f"http://127.0.0.1:{dead}",
                      "ready_timeout": 2, "request_timeout": 2})
    os.mkdir(m.mnt / "alice")
    e = expect_errno(lambda: mkdir_ready(m.mnt / "alice" / "t"), errno.EIO, errno.ETIMEDOUT)
    assert e
    assert m.running() and f"127.0.0.1:{dead}" in m.log


# --------------------------------------------------------------------------
# a hostile server: the execd endpoint it answers (issue 19 point 3)


HOSTILE_ENDPOINTS = {
    # raw bytes to a host service on loopback (a Redis SET, say)
    "gopher": "gopher://127.0.0.1:{port}/_SET%20pwned%201%0D%0AQUIT%0D%0A#",
    "dict": "dict://127.0.0.1:{port}/info#",
    # a local file as execd's answers ('#' cuts the path the client appends)
    "file": "file:///etc/hostname#",
    # credentials sent to whoever listens there
    "userinfo": "http://user@127.0.0.1:{port}/x",
    "https_for_http": "https://127.0.0.1:{port}/x",
    "fragment": "127.0.0.1:{port}/x#",
}


@pytest.mark.timeout_s(90)
@pytest.mark.parametrize("kind", list(HOSTILE_ENDPOINTS))
@OS_ONLY
def test_a_hostile_execd_endpoint_is_refused(sbxfs, remote, fake, kind):
    """The daemon (root) goes where the server's endpoint points, but only
    over the configured protocol: another scheme, credentials or a
    fragment are refused with a log line naming the endpoint, nothing
    reaches a loopback listener, mkdir fails at once with EIO and leaves
    nothing behind."""
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        lst.bind(("127.0.0.1", 0))
        lst.listen(16)
        lst.setblocking(False)
        port = lst.getsockname()[1]
        endpoint = HOSTILE_ENDPOINTS[kind].format(port=port)
        fake.fault({"kind": "reply", "path": "/endpoints/44772$", "body": {"endpoint": endpoint}})
        m = sbxfs(config={"acquire": "sync", "request_timeout": 2, "ready_timeout": 8})
        os.mkdir(m.mnt / "alice")
        t0 = time.monotonic()
        try:
            mkdir_ready(m.mnt / "alice" / "t")
            err = 0
        except OSError as e:
            err = e.errno
        took = time.monotonic() - t0
        reached = 0
        while True:
            try:
                conn, _ = lst.accept()
            except BlockingIOError:
                break
            conn.close()
            reached += 1
    finally:
        lst.close()
    assert reached == 0, f"the daemon connected {reached} times to the test's listener ({endpoint})"
    assert err == errno.EIO, errno.errorcode.get(err, err)
    shown = endpoint.replace("user@", "***@")
    lines = [ln for ln in m.log.splitlines() if "refused the execd endpoint" in ln]
    assert lines and shown[:40] in lines[0], m.log[-3000:]
    assert "user@" not in m.log
    # refused once, not asked again until ready_timeout
    asked = [e for e in fake.requests()["log"] if "/endpoints/44772" in e["path"]]
    assert len(asked) == 1, asked
    assert took < 8, took
    assert not (m.mnt / "alice" / "t").exists()
    assert wait_until(lambda: fake.sandboxes() == [], 30), fake.sandboxes()
    assert m.running()
    fake.clear_faults()
    os.mkdir(m.mnt / "alice" / "t")
    assert job(m.mnt / "alice" / "t", "ok", "echo ok")[:2] == (0, "ok\n")


def test_plain_http_warning_parses_the_host(sbxfs, remote, fake):
    """localhost.evil.example is not this host: plain HTTP to it is
    warned about (it was taken for loopback by its prefix)."""
    url = "http://localhost.evil.example:1"
    key = "domain" if remote == "opensandbox" else "base_url"
    m = sbxfs(config={key: url})
    assert wait_until(lambda: "plain HTTP to" in m.log, 5), m.log
    assert "localhost.evil.example" in [ln for ln in m.log.splitlines() if "plain HTTP to" in ln][0]
    m2 = sbxfs(config={key: f"http://127.0.0.1:{fake.port}"})
    assert "plain HTTP to" not in m2.log


# --------------------------------------------------------------------------
# secrets and configuration


@OS_ONLY
def test_api_key_is_sent_and_never_shown(sbxfs, remote, fake, tmp_path):
    secret = "sbxfs-test-key-" + os.urandom(8).hex()
    fake.config(api_key=secret)
    m = sbxfs(config={"api_key": secret})
    t = acquire(m)
    code, out, _ = job(t, "j", "echo ok")
    assert (code, out) == (0, "ok\n")
    shown = read_text(m.mnt / ".config")
    assert secret not in shown and json.loads(shown)["opensandbox"]["api_key"] == "***"
    assert secret not in read_text(t / "status") and secret not in read_text(m.mnt / ".status")
    assert secret not in m.log
    leaks = {pid: txt for pid, txt in all_proc_text().items() if secret.encode() in txt}
    assert not leaks, f"the API key is in the argv or environment of {sorted(leaks)}"
    # a wrong key: EACCES, said in the log (without the key)
    m2 = sbxfs(config={"acquire": "sync", "api_key": "wrong-" + secret[-6:]})
    os.mkdir(m2.mnt / "bob")
    expect_errno(lambda: mkdir_ready(m2.mnt / "bob" / "t"), errno.EACCES)
    assert "INVALID_API_KEY" in m2.log and secret not in m2.log


@OS_ONLY
def test_env_fallbacks_and_warnings(sbxfs, remote, fake):
    secret = "env-key-" + os.urandom(6).hex()
    fake.config(api_key=secret)
    m = sbxfs(config={"domain": None}, env={"OPEN_SANDBOX_DOMAIN": f"127.0.0.1:{fake.port}",
                                             "OPEN_SANDBOX_API_KEY": secret})
    t = acquire(m)
    assert job(t, "j", "echo env")[1] == "env\n"
    cfg = read_json(m.mnt / ".config")["opensandbox"]
    assert cfg["api_key"] == "***" and cfg["api_key_from"] == "OPEN_SANDBOX_API_KEY", cfg
    assert cfg["domain_from"] == "OPEN_SANDBOX_DOMAIN", cfg
    assert secret not in read_text(m.mnt / ".config") and secret not in m.log
    fake.config(api_key=None)
    # neither: DeerFlow's warnings; plain HTTP to another host: a warning too
    m2 = sbxfs(config={"domain": "192.0.2.1:9"}, env={"OPEN_SANDBOX_API_KEY": ""})
    assert "no api_key" in m2.log and "plain HTTP" in m2.log, m2.log


@pytest.mark.parametrize("cfg,key", [
    ({"use": "aio", "base_url": "ftp://example.org"}, "base_url"),
    ({"use": "aio", "base_url": "http://exa mple.org"}, "base_url"),
    ({"use": "aio", "base_url": "http://user:pw@example.org"}, "base_url"),
    ({"use": "aio", "base_url": "http://example.org/?x=1"}, "base_url"),
    ({"use": "aio", "base_url": "http://127.0.0.1:1", "network": {"mode": "isolated"}}, "network.mode"),
    ({"use": "opensandbox", "domain": "exa mple.org"}, "domain"),
    ({"use": "opensandbox", "domain": "gopher://x"}, "domain"),
    ({"use": "opensandbox", "domain": "a@b:1"}, "domain"),
    ({"use": "opensandbox", "protocol": "ftp"}, "protocol"),
    ({"use": "opensandbox", "opensandbox": {"entrypoint": []}}, "opensandbox.entrypoint"),
])
def test_bad_remote_configuration_stops_the_daemon(tmp_path, cfg, key):
    import conftest
    inst = conftest.SbxfsInstance(config=cfg)
    try:
        rc, log = inst.run_expect_exit(timeout=10)
        assert rc == 1, log
        assert key in log, log
    finally:
        inst.cleanup()


def test_unknown_keys_warn_and_the_daemon_runs(sbxfs, remote):
    section = "opensandbox" if remote == "opensandbox" else "aio"
    m = sbxfs(config={section: {"no_such_key": 1}})
    assert f"{section}.no_such_key: unknown key" in m.log, m.log
    acquire(m)


def test_huge_and_malformed_answers_keep_the_daemon_up(sbxfs, remote, tmp_path):
    """A lifecycle server that answers 20 MiB of garbage, then one that
    answers half a JSON document: EIO, the daemon answers on."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        mode = "huge"

        def log_message(self, *a):
            pass

        def do_GET(self):
            self.do_POST()

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(n)
            body = b"[" * (20 << 20) if Handler.mode == "huge" else b'{"id": "x", "status": {"sta'
            self.send_response(202 if Handler.mode == "huge" else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        port = srv.server_address[1]
        cfg = {"domain": f"127.0.0.1:{port}"} if remote == "opensandbox" else {"base_url": f"http://127.0.0.1:{port}"}
        cfg.update({"request_timeout": 3, "ready_timeout": 3})
        m = sbxfs(config={**cfg, "acquire": "sync"})
        os.mkdir(m.mnt / "alice")
        expect_errno(lambda: mkdir_ready(m.mnt / "alice" / "t"), errno.EIO, errno.ETIMEDOUT)
        Handler.mode = "half"
        expect_errno(lambda: mkdir_ready(m.mnt / "alice" / "t"), errno.EIO, errno.ETIMEDOUT)
        assert m.running() and os.statvfs(m.mnt)
    finally:
        srv.shutdown()
