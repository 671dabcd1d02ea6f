# SPDX-License-Identifier: MIT
"""Provider failures, reload (SIGHUP) and the daemon's command line.

A failed acquire returns an errno, leaves no directory and no process, logs
the cause and shows it in /sbx/.status; SIGHUP applies a new mount.conf to new
acquires only and refuses an invalid one.
"""

import errno
import json
import os
import signal
import subprocess
import time

import sbxutil
from conftest import SBXFS_BIN, dump_yaml


def wait_for(pred, timeout=10.0, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def test_failed_create_leaves_nothing_and_reports(sbxfs, tmp_path):
    # A root filesystem without the mount points bubblewrap needs: the
    # sandbox cannot start.
    rootfs = tmp_path / "emptyroot"
    rootfs.mkdir()
    m = sbxfs(config={"acquire": "sync", "local": {"rootfs": str(rootfs)}, "ready_timeout": 5})
    (m.mnt / "alice").mkdir()
    before = sbxutil.procs_matching(str(m.state_dir))
    try:
        sbxutil.mkdir_ready(m.mnt / "alice" / "t1")  # acquire: async: the errno comes from `ready`
        raise AssertionError("mkdir succeeded on a broken rootfs")
    except OSError as e:
        assert e.errno in (errno.EIO, errno.ETIMEDOUT), e
    assert not (m.mnt / "alice" / "t1").exists()
    assert os.listdir(m.mnt / "alice") == []
    # the open-mode gateway's pasta is the mount's, not the create's: made by
    # the first open create (whether or not it succeeds), ended at the unmount
    gateway = {p for p, c in sbxutil.procs_matching(str(m.state_dir)).items() if "/gateway/" in c}
    left = {p: c for p, c in sbxutil.procs_matching(str(m.state_dir)).items() if p not in gateway}
    assert left == before == {}
    st = json.loads((m.mnt / ".status").read_text())
    assert st["last_error"] and st["last_error"]["scope"] == "alice/t1", st
    assert st["active"] == 0 and st["creating"] == 0
    assert "alice/t1" in m.log and "bubblewrap" in m.log
    assert not (m.thread_data("alice", "t1") / "sandbox.json").exists()
    m.stop()
    assert wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in gateway)), "the gateway outlived the unmount"


def test_sighup_reload_applies_to_new_config_and_refuses_bad(sbxfs):
    m = sbxfs(config={"replicas": 3, "environment": {"GREETING": "one"}})
    (m.mnt / "u").mkdir()
    (m.mnt / "u" / "old").mkdir()
    cfg = dict(m.config)
    cfg["replicas"] = 7
    cfg["environment"] = {"GREETING": "two"}
    m.conf.write_text(dump_yaml(cfg))
    m.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: json.loads((m.mnt / ".config").read_text())["replicas"] == 7)
    assert json.loads((m.mnt / ".status").read_text())["replicas"] == 7
    # a sandbox created before keeps its configuration, a new one gets the new one
    for thread, want in (("old", "one"), ("new", "two")):
        t = m.mnt / "u" / thread
        if not t.exists():
            t.mkdir()
        (t / "jobs" / "g").mkdir()
        (t / "jobs" / "g" / "cmd").write_text('printf "%s" "$GREETING"')
        assert (t / "jobs" / "g" / "exit").read_text() == "0\n"
        assert (t / "jobs" / "g" / "stdout").read_text() == want, thread
    # an invalid file is refused, the running configuration stays
    m.conf.write_text("replicas: 0\n")
    m.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: "reload refused" in m.log)
    assert "replicas" in m.log.split("reload refused")[1].splitlines()[0]
    assert json.loads((m.mnt / ".config").read_text())["replicas"] == 7
    assert m.running()


def test_help_version_and_usage_errors():
    r = subprocess.run([str(SBXFS_BIN), "--version"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stdout.startswith("sbxfs ")
    r = subprocess.run([str(SBXFS_BIN), "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and "MOUNTPOINT" in r.stdout
    r = subprocess.run([str(SBXFS_BIN)], capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and "usage" in r.stderr


def test_missing_rootfs_is_a_config_error(sbxfs, tmp_path):
    m = sbxfs(config={"local": {"rootfs": str(tmp_path / "nope")}}, start=False)
    rc, log = m.run_expect_exit()
    assert rc != 0 and "local.rootfs" in log, log


def test_status_json_of_sandbox_and_metrics(sbxfs):
    m = sbxfs()
    t = m.mnt / "alice" / "thread-1"
    t.mkdir(parents=True)
    st = sbxutil.status(t)  # once the create ended
    for key in ("id", "user", "thread", "provider", "state", "created_at", "acquired_at", "remote_id",
                "network_mode", "skills", "uid", "init_pid"):
        assert key in st, key
    assert st["id"] == "dc977b840cb8638e" and st["state"] == "active" and st["provider"] == "local"
    assert st["uid"] != 0
    os.rmdir(t)
    t.mkdir()
    metrics = (m.mnt / ".metrics").read_text()
    assert 'sbxfs_acquire_seconds_count{kind="cold"} 1' in metrics
    assert 'sbxfs_acquire_seconds_count{kind="warm"} 1' in metrics
    assert 'sbxfs_sandboxes{state="active"} 1' in metrics
