# SPDX-License-Identifier: MIT
"""The daemon the way it is deployed: started without -f (detached), killed
with SIGKILL and started again with the same command over its stale mount,
killed in the middle of an acquire.  DESIGN §4 (crash safety)."""

import os
import random
import signal
import subprocess
import threading
import time

import pytest

import sbxutil
from sbxutil import read_json, read_text, wait_until
from test_jobs import cat, jstatus, mkjob, start, wait_exit


def _bwrap_trees(inst):
    """Root pids of the sandbox process trees of this instance's state_dir
    (bwrap's: an open-mode sandbox's pasta is a tree of its own, counted with
    every other leftover by procs_matching after the stop)."""
    trees = sbxutil.process_trees(inst.state_dir, {inst.proc.pid} if inst.proc else set())
    return [p for p in trees if "bwrap" in (sbxutil.proc_cmdline(p) or "").split(" ", 1)[0]]


@pytest.mark.timeout_s(120)
def test_detached_daemon_runs_jobs_reloads_and_stops(sbxfs):
    inst = sbxfs(config={"idle_timeout": 0, "replicas": 4}, detach=True)
    pid = inst.proc.pid
    assert sbxutil.pid_alive(pid), "the detached daemon is not running"
    assert sbxutil.proc_ppid(pid) != os.getpid(), "the daemon did not detach"
    t = inst.mnt / "alice" / "t"
    os.makedirs(t)
    # the job event thread exists: exit becomes readable
    j = mkjob(t, "j")
    start(j, "echo hello; exit 3")
    assert wait_exit(j, 20) == 3
    assert read_text(j / "stdout") == "hello\n"
    # the reload thread exists: SIGHUP applies a new replicas value
    cfg = inst.conf.read_text().replace("replicas: 4", "replicas: 7")
    assert "replicas: 7" in cfg
    inst.conf.write_text(cfg)
    os.kill(pid, signal.SIGHUP)
    assert wait_until(lambda: read_json(inst.mnt / ".status")["replicas"] == 7, 10), read_json(inst.mnt / ".status")
    # unmount ends it cleanly, sandboxes destroyed
    assert inst.stop() == 0
    assert wait_until(lambda: not sbxutil.pid_alive(pid), 20), "daemon still running after unmount"
    assert not sbxutil.procs_matching(inst.state_dir), "sandbox processes survive the shutdown"


@pytest.mark.timeout_s(60)
def test_detached_daemon_reports_a_failed_start(sbxfs):
    inst = sbxfs(config={"replicas": 0}, detach=True, start=False)
    rc, log = inst.run_expect_exit(timeout=20)
    assert rc == 1, f"status {rc}; log:\n{log}"
    assert "replicas" in log, log
    assert not sbxutil.is_mounted(inst.mnt)


@pytest.mark.timeout_s(120)
@pytest.mark.parametrize("detach", [False, True], ids=["foreground", "detached"])
def test_kill9_then_same_command_adopts_over_the_stale_mount(sbxfs, detach):
    inst = sbxfs(config={"idle_timeout": 0}, detach=detach)
    t = inst.mnt / "alice" / "t"
    os.makedirs(t)
    init = inst.init_pid(t)
    (t / "workspace" / "keep.txt").write_text("kept\n")
    j = mkjob(t, "through")
    start(j, "echo start; sleep 3; echo finished; exit 6")
    assert wait_until(lambda: jstatus(j)["stdout_bytes"] >= 6, 10)
    inst.kill9()
    # the old mount is stale now; the very same command must just work
    r = subprocess.run(["stat", str(inst.mnt)], capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and ("connected" in r.stderr or "connection abort" in r.stderr), r
    inst.start()
    assert sbxutil.mount_fstype(inst.mnt).startswith("fuse")
    st = read_json(inst.mnt / ".status")
    assert st["adopted"] == 1 and st["warm"] == 1, st
    os.makedirs(t)
    assert inst.init_pid(t) == init, "the sandbox was not adopted"
    assert (t / "workspace" / "keep.txt").read_text() == "kept\n"
    assert wait_exit(j, 20) == 6, "the running job lost its real result"
    assert read_text(j / "stdout") == "start\nfinished\n"
    assert jstatus(j)["state"] == "exited"


@pytest.mark.timeout_s(60)
def test_failed_start_never_destroys_adopted_sandboxes(sbxfs):
    inst = sbxfs(config={"idle_timeout": 0})
    t = inst.mnt / "alice" / "t"
    os.makedirs(t)
    ref = sbxutil.ProcRef(inst.init_pid(t))
    inst.kill9()
    # a start that cannot mount: the mountpoint is gone
    inst.umount(lazy=True)
    wait_until(lambda: not sbxutil.is_mounted(inst.mnt), 5)
    os.rmdir(inst.mnt)
    rc, log = inst.run_expect_exit(timeout=20)
    assert rc == 1, log
    assert "cannot mount" in log, log
    assert ref.alive(), f"a failed start destroyed a sandbox:\n{log}"
    inst.mnt.mkdir()
    inst.start()
    os.makedirs(t)
    assert inst.init_pid(t) == ref.pid


@pytest.mark.timeout_s(240)
def test_kill9_during_acquire_leaks_nothing(sbxfs):
    """kill -9 at random moments of a mkdir: the next start finishes or
    destroys every sandbox it finds; at the end nothing of any is left."""
    inst = sbxfs(config={"idle_timeout": 0, "replicas": 100})
    rng = random.Random(7)
    for i in range(15):
        d = inst.mnt / "alice" / f"t{i}"
        os.makedirs(d.parent, exist_ok=True)
        th = threading.Thread(target=lambda: subprocess.run(["mkdir", str(d)], capture_output=True, timeout=30))
        th.start()
        time.sleep(rng.uniform(0, 0.12))
        inst.kill9()
        th.join(40)
        assert not th.is_alive()
        inst.start()  # over the stale mount
        st = read_json(inst.mnt / ".status")
        assert st["creating"] == 0, st
    # every sandbox that exists is known to the daemon (adopted warm)
    st = read_json(inst.mnt / ".status")
    trees = _bwrap_trees(inst)
    assert len(trees) == st["warm"] + st["active"], (trees, st)
    assert inst.stop() == 0
    left = sbxutil.procs_matching(inst.state_dir)
    assert not left, f"sandboxes nobody adopted or destroyed: {left}"
