# SPDX-License-Identifier: MIT
"""DESIGN §4: lifecycle — warm reclaim, replicas eviction, idle reaper,
concurrent acquire, crash adoption, shutdown."""

import errno
import os
import signal
import threading
import time

import pytest

import sbxutil
from sbxutil import ProcRef, expect_errno, read_json, read_text, wait_until


def acquire(m, user, thread):
    d = m.mnt / user / thread
    os.makedirs(d)
    return d, m.init_pid(d)


def test_warm_reclaim_keeps_files_and_sandbox(mnt):
    t, pid = acquire(mnt, "alice", "t")
    (t / "workspace" / "keep.txt").write_text("kept\n")
    (t / "outputs" / "o.txt").write_text("out\n")
    created = read_json(t / "status")["created_at"]
    ref = ProcRef(pid)
    os.rmdir(t)
    assert not t.exists()
    assert ref.alive(), "release must park the sandbox, not destroy it"
    st = read_json(mnt.mnt / ".status")
    assert st["warm"] == 1 and st["active"] == 0, st
    os.mkdir(t)
    assert mnt.init_pid(t) == pid
    assert read_json(t / "status")["created_at"] == created
    assert (t / "workspace" / "keep.txt").read_text() == "kept\n"
    assert (t / "outputs" / "o.txt").read_text() == "out\n"
    st = read_json(mnt.mnt / ".status")
    assert st["warm"] == 0 and st["active"] == 1, st
    m = sbxutil.parse_metrics(read_text(mnt.mnt / ".metrics"))
    warm = [v for k, v in m.items() if k.startswith("sbxfs_acquire_seconds_count") and 'kind="warm"' in k]
    assert warm and warm[0] >= 1, m


def test_failed_health_check_creates_fresh_sandbox(mnt):
    t, pid = acquire(mnt, "alice", "t")
    (t / "workspace" / "keep.txt").write_text("kept\n")
    os.rmdir(t)
    os.kill(pid, signal.SIGKILL)  # the warm sandbox dies behind sbxfs's back
    assert wait_until(lambda: not sbxutil.pid_alive(pid), 5)
    os.mkdir(t)
    new = mnt.init_pid(t)
    assert new != pid
    assert sbxutil.pid_alive(new)
    assert (t / "workspace" / "keep.txt").read_text() == "kept\n"


@pytest.mark.timeout_s(120)
def test_replicas_evicts_oldest_warm(sbxfs):
    m = sbxfs(config={"replicas": 2})
    refs = {}
    for th in ("t1", "t2", "t3"):
        d, pid = acquire(m, "alice", th)
        (d / "workspace" / "f").write_text(th)
        refs[th] = ProcRef(pid)
        os.rmdir(d)
    assert wait_until(lambda: not refs["t1"].alive(), 10), \
        f"oldest warm sandbox t1 (pid {refs['t1'].pid}) was not evicted"
    assert refs["t2"].alive(), "t2 must stay warm"
    assert refs["t3"].alive(), "t3 must stay warm"
    st = read_json(m.mnt / ".status")
    assert st["warm"] == 2 and st["active"] == 0, st
    metrics = sbxutil.parse_metrics(read_text(m.mnt / ".metrics"))
    assert metrics.get("sbxfs_evictions_total") == 1, metrics
    # the evicted scope's data stays; t2 is reclaimed warm
    assert (m.workspace_data("alice", "t1") / "f").read_text() == "t1"
    os.mkdir(m.mnt / "alice" / "t2")
    assert m.init_pid(m.mnt / "alice" / "t2") == refs["t2"].pid


@pytest.mark.timeout_s(120)
def test_replicas_never_evicts_active(sbxfs):
    m = sbxfs(config={"replicas": 1})
    d1, p1 = acquire(m, "alice", "t1")
    d2, p2 = acquire(m, "alice", "t2")  # over the cap: warning, created anyway
    assert sbxutil.pid_alive(p1) and sbxutil.pid_alive(p2)
    assert read_json(m.mnt / ".status")["active"] == 2


@pytest.mark.timeout_s(120)
def test_idle_reaper(sbxfs):
    m = sbxfs(config={"idle_timeout": 2, "idle_check_interval": 1})
    t, pid = acquire(m, "alice", "t")
    (t / "workspace" / "data.txt").write_text("stay\n")
    busy, busy_pid = acquire(m, "alice", "busy")  # active: never reaped
    ref = ProcRef(pid)
    os.rmdir(t)
    assert wait_until(lambda: not ref.alive(), 10), f"warm sandbox {pid} not reaped within 10 s"
    assert (m.workspace_data("alice", "t") / "data.txt").read_text() == "stay\n"
    assert sbxutil.pid_alive(busy_pid), "an active sandbox was reaped"
    st = read_json(m.mnt / ".status")
    assert st["warm"] == 0 and st["active"] == 1, st
    metrics = sbxutil.parse_metrics(read_text(m.mnt / ".metrics"))
    assert metrics.get("sbxfs_reaps_total", 0) >= 1, metrics
    os.mkdir(t)
    assert m.init_pid(t) != pid
    assert (t / "workspace" / "data.txt").read_text() == "stay\n"


@pytest.mark.timeout_s(120)
def test_concurrent_mkdir_one_sandbox(mnt):
    os.mkdir(mnt.mnt / "alice")
    t = mnt.mnt / "alice" / "t"
    n = 16
    barrier = threading.Barrier(n)
    results = [None] * n

    def worker(i):
        barrier.wait()
        try:
            os.mkdir(t)
            results[i] = 0
        except OSError as e:
            results[i] = e.errno

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert all(r is not None for r in results), f"mkdir hung: {results}"
    ok = results.count(0)
    others = [sbxutil.errname(r) for r in results if r != 0]
    assert ok == 1, f"{ok} mkdirs succeeded: {[sbxutil.errname(r) if r else 0 for r in results]}"
    assert set(others) == {"EEXIST"}, others
    pid = mnt.init_pid(t)
    trees = sbxutil.process_trees(mnt.workspace_data("alice", "t"))
    assert len(trees) == 1, {p: sbxutil.proc_cmdline(p) for p in trees}
    assert pid in sbxutil.descendants_and_self(trees[0])
    st = read_json(mnt.mnt / ".status")
    assert st["active"] == 1 and st["creating"] == 0, st


@pytest.mark.timeout_s(120)
def test_concurrent_mkdir_different_scopes(mnt):
    os.mkdir(mnt.mnt / "alice")
    n = 3  # within the default replicas cap
    errs = [None] * n
    barrier = threading.Barrier(n)

    def worker(i):
        barrier.wait()
        try:
            os.mkdir(mnt.mnt / "alice" / f"t{i}")
            errs[i] = 0
        except OSError as e:
            errs[i] = e.errno

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    [th.start() for th in ths]
    [th.join(60) for th in ths]
    assert errs == [0] * n, errs
    pids = {mnt.init_pid(mnt.mnt / "alice" / f"t{i}") for i in range(n)}
    assert len(pids) == n


def _sandbox_procs(m):
    return {pid: ProcRef(pid) for pid in sbxutil.procs_matching(m.state_dir, {m.proc.pid})}


@pytest.mark.timeout_s(150)
def test_kill9_restart_adopts_and_leaks_nothing(mnt):
    a, pa = acquire(mnt, "alice", "active")
    w, pw = acquire(mnt, "alice", "warm")
    (a / "workspace" / "a.txt").write_text("A\n")
    (w / "workspace" / "w.txt").write_text("W\n")
    os.rmdir(w)
    before = {"active": ProcRef(pa), "warm": ProcRef(pw)}
    trees = {name: [ProcRef(p) for p in sbxutil.descendants_and_self(ref.pid)]
             for name, ref in before.items()}
    others = _sandbox_procs(mnt)
    for refs in trees.values():
        for r in refs:
            mnt.tracked.append(r)

    mnt.kill9()
    r = mnt.umount(lazy=True)
    assert r.returncode == 0, r.stderr
    mnt.restart()

    for name, ref in before.items():
        d = mnt.mnt / "alice" / name
        os.mkdir(d)
        new = mnt.init_pid(d)
        if new == ref.pid:
            assert ref.alive()
        else:
            # not adopted: everything it ran must be gone, nothing orphaned
            alive = [r for r in trees[name] if r.alive()]
            assert not alive, f"{name}: old sandbox processes orphaned: {alive}"
    assert (a / "workspace" / "a.txt").read_text() == "A\n"
    assert (mnt.mnt / "alice" / "warm" / "workspace" / "w.txt").read_text() == "W\n"
    # any other process of the old daemon's sandboxes is adopted or gone
    st = read_json(mnt.mnt / ".status")
    assert st["active"] == 2, st
    live_now = set(sbxutil.procs_matching(mnt.state_dir, {mnt.proc.pid}))
    for pid, ref in others.items():
        if ref.alive():
            assert pid in live_now
    for name in before:
        os.rmdir(mnt.mnt / "alice" / name)
    assert mnt.stop() == 0
    leftovers = [r for refs in trees.values() for r in refs if r.alive()]
    assert not leftovers, f"processes survive shutdown after adoption: {leftovers}"
    assert not sbxutil.procs_matching(mnt.state_dir), "sandbox processes survive shutdown"


@pytest.mark.timeout_s(150)
def test_kill9_restart_reports_adopted_warm(mnt):
    """Adoption puts the sandboxes in the warm pool (DESIGN §4)."""
    a, pa = acquire(mnt, "alice", "t")
    mnt.kill9()
    mnt.umount(lazy=True)
    mnt.restart()
    st = read_json(mnt.mnt / ".status")
    assert st["warm"] == 1 and st["active"] == 0, st
    os.mkdir(a)
    assert mnt.init_pid(a) == pa


@pytest.mark.timeout_s(120)
def test_unmount_destroys_sandboxes_keeps_data(mnt):
    a, pa = acquire(mnt, "alice", "t1")
    w, pw = acquire(mnt, "bob", "t2")
    (a / "workspace" / "a.txt").write_text("A\n")
    (w / "uploads" / "u.txt").write_text("U\n")
    os.rmdir(w)
    refs = [ProcRef(p) for p in sbxutil.descendants_and_self(pa) + sbxutil.descendants_and_self(pw)]
    if mnt.config.get("use", "local") == "local":  # test_containers.py runs this too
        assert sbxutil.sandbox_cgroups(mnt.state_dir), "the sandboxes have no cgroups to check"
    rc = mnt.stop()
    assert rc == 0, f"exit status {rc}; log:\n{mnt.log}"
    assert not sbxutil.is_mounted(mnt.mnt)
    assert wait_until(lambda: not any(r.alive() for r in refs), 5), \
        f"sandbox processes survive unmount: {[r for r in refs if r.alive()]}"
    assert not sbxutil.procs_matching(mnt.state_dir)
    # their cgroups too (removed once every sandbox has ended: cgroup.h)
    assert sbxutil.sandbox_cgroups(mnt.state_dir) == []
    assert (mnt.workspace_data("alice", "t1") / "a.txt").read_text() == "A\n"
    assert (mnt.thread_data("bob", "t2") / "user-data" / "uploads" / "u.txt").read_text() == "U\n"


@pytest.mark.timeout_s(120)
def test_sigterm_destroys_sandboxes(mnt):
    a, pa = acquire(mnt, "alice", "t1")
    ref = ProcRef(pa)
    mnt.proc.send_signal(signal.SIGTERM)
    mnt.proc.wait(timeout=30)  # the exit status on a signal is not in the contract
    assert wait_until(lambda: not sbxutil.is_mounted(mnt.mnt), 5)
    assert wait_until(lambda: not ref.alive(), 5)
    assert sbxutil.sandbox_cgroups(mnt.state_dir) == []


@pytest.mark.timeout_s(120)
def test_keep_on_exit_then_adopt(sbxfs):
    m = sbxfs(config={"keep_on_exit": True})
    a, pa = acquire(m, "alice", "t1")
    (a / "workspace" / "k").write_text("k")
    assert m.stop() == 0
    assert sbxutil.pid_alive(pa), "keep_on_exit: true must leave the sandbox running"
    m.restart()
    os.mkdir(a)
    assert m.init_pid(a) == pa
    assert (a / "workspace" / "k").read_text() == "k"


def test_second_daemon_on_same_state_dir_refused(sbxfs, mnt):
    other = sbxfs(start=False, config={"state_dir": str(mnt.state_dir)})
    rc, log = other.run_expect_exit(timeout=10)
    assert rc == 1, f"rc={rc}; log:\n{log}"
    assert "sbxfs.lock" in log and str(mnt.proc.pid) in log, log
    assert not sbxutil.is_mounted(other.mnt)
