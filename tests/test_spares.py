# SPDX-License-Identifier: MIT
"""pool.prewarm (issue 21 item 1, DESIGN §4): spares, ready sandboxes of no
scope that a new thread's mkdir claims and binds to its scope without
restarting them (providers/spares.c, providers/local_claim.c).

Whether a sandbox came from a spare is read from .metrics (claims) and the
sandbox's status (from_spare, its init pid being a spare's), never from
timing.  Spares show up in the usual leftover checks: their bubblewrap
command lines name the state_dir, and their cgroups are the daemon's."""

import json
import os
import signal
import time

import pytest

import sbxutil
import test_jobs as J
from conftest import dump_yaml
from sbxutil import read_json, read_text, wait_until


spares = sbxutil.spares
claims = sbxutil.spare_claims


def metrics(m):
    return sbxutil.parse_metrics(read_text(m.mnt / ".metrics"))


def wait_spares(m, n, timeout=30):
    sbxutil.wait_spares(m, n, timeout)


def spare_inits(m):
    """{token: init pid} of the spares on disk (their local.json)."""
    return sbxutil.spare_records(m, "local.json", "init_pid")


def run(d, name, cmd):
    code, out, err = J.run_job(d, name, cmd)
    assert code == 0, (cmd, out, err)
    return out


def proc_uid(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return None


def start(sbxfs, prewarm=2, **cfg):
    conf = {"pool": {"prewarm": prewarm}, "replicas": 6}
    conf.update(cfg)
    m = sbxfs(config=conf)
    wait_spares(m, prewarm)
    for pid in spare_inits(m).values():
        m.track(pid)
    return m


def reconfigure(m, **cfg):
    m.config.update(cfg)
    m.conf.write_text(dump_yaml(m.config))


# A job's view of who and where it is: what a claim must make the thread's.
PROBE = ("id -u; id -g; id -un; hostname; stat -c '%u %g' /mnt/user-data/workspace /mnt/user-data/outputs; "
         "ls /mnt/user-data | tr '\\n' ' '; echo; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; echo")


def test_new_thread_claims_spare_with_the_threads_identity(sbxfs):
    """A cold create first (prewarm 0), its sandbox destroyed at unmount;
    then with spares the same thread and a new one claim: the job shows
    what a cold create shows (uid, gid, name, ownership, network), with the
    earlier data attached, not copied."""
    m = sbxfs(config={"pool": {"prewarm": 0}, "replicas": 6, "environment": {"GREETING": "hi"}})
    t1 = m.mnt / "alice" / "t1"
    sbxutil.mkdir_ready(t1, parents=True)
    (m.thread_data("alice", "t1") / "skills" / "s.md").write_text("skill\n")
    probe = PROBE + "; echo $GREETING; cat /mnt/skills/s.md; touch /mnt/skills/x 2>/dev/null || echo ro"
    cold = run(t1, "j", probe + "; echo cold > /mnt/user-data/workspace/f")
    cold_status = sbxutil.status(t1)
    assert cold_status["from_spare"] is False, cold_status
    m.stop()
    reconfigure(m, pool={"prewarm": 2})
    m.start()
    wait_spares(m, 2)
    inits = set(spare_inits(m).values())
    assert len(inits) == 2, inits
    for pid in inits:
        m.track(pid)
    assert claims(m) == (0, 0)

    os.mkdir(t1)
    st = sbxutil.status(t1)
    assert st["from_spare"] is True and st["init_pid"] in inits, (st, inits)
    assert claims(m) == (1, 0)
    assert st["uid"] == cold_status["uid"], (st, cold_status)
    warm = run(t1, "j2", probe + "; cat /mnt/user-data/workspace/f; echo claimed >> /mnt/user-data/workspace/f")
    assert warm.splitlines()[:-1] == cold.splitlines(), (warm, cold)
    assert warm.splitlines()[-1] == "cold"
    f = m.workspace_data("alice", "t1") / "f"
    assert f.read_text() == "cold\nclaimed\n" and f.stat().st_uid == st["uid"]
    lines = warm.splitlines()
    assert lines[0] == str(st["uid"]) and lines[3] == f"sbx-{st['id']}", lines
    assert lines[6].split() == ["outputs", "uploads", "workspace"], lines
    assert lines[8:11] == ["hi", "skill", "ro"], lines  # environment and skills (read-only)
    # the init itself took the thread's uid (it was root, waiting, as a spare)
    assert proc_uid(st["init_pid"]) == st["uid"]

    # a brand-new thread of another user: its own uid and files
    t2 = m.mnt / "bob" / "t2"
    os.makedirs(t2)
    st2 = sbxutil.status(t2)
    assert st2["from_spare"] is True and st2["init_pid"] != st["init_pid"], st2
    out = run(t2, "j", PROBE + "; touch /mnt/user-data/outputs/o; ls /mnt/user-data/workspace | wc -l")
    assert out.splitlines()[0] == str(st2["uid"]) and st2["uid"] != st["uid"], (out, st2)
    assert out.splitlines()[-1] == "0", out
    assert (m.thread_data("bob", "t2") / "user-data" / "outputs" / "o").stat().st_uid == st2["uid"]
    assert claims(m) == (2, 0)


def test_network_mode_isolated_is_the_threads(sbxfs):
    m = start(sbxfs, network={"mode": "isolated"})
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    st = sbxutil.status(t)
    assert st["from_spare"] is True and st["network_mode"] == "isolated", st
    out = run(t, "j", "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
    assert out.split() == ["lo"], out


def test_open_mode_spare_has_its_network(sbxfs):
    m = start(sbxfs)
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    st = sbxutil.status(t)
    # its veth pair into the gateway, made with the spare (docs/network.md)
    assert st["from_spare"] is True and st["network_mode"] == "open", st
    assert st.get("net_address") and st.get("gateway_pasta_pid"), st
    out = run(t, "j", "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
    assert "lo" in out.split() and len(out.split()) == 2, out


def test_allowlist_spare_gets_its_proxy_at_claim(sbxfs):
    m = start(sbxfs, network={"mode": "allowlist", "allow_domains": ["static.example.test"]})
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    st = sbxutil.status(t)
    assert st["from_spare"] is True and st["network_mode"] == "allowlist", st
    out = run(t, "j", "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 3128), 5); print('proxy')\"; "
                      "echo $HTTPS_PROXY")
    assert out.split() == ["proxy", "http://127.0.0.1:3128"], out


def test_users_mapping_uid_given_at_claim(sbxfs):
    uid = 61777
    m = start(sbxfs, users={"alice": uid})
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    st = sbxutil.status(t)
    assert st["from_spare"] is True and st["uid"] == uid, st
    out = run(t, "j", "id -u; touch /mnt/user-data/workspace/w; stat -c %u /proc/1")
    assert out.split() == [str(uid), str(uid)], out
    assert (m.workspace_data("alice", "t") / "w").stat().st_uid == uid


def test_reload_to_prewarm_zero_destroys_spares(sbxfs):
    m = start(sbxfs)
    pids = list(spare_inits(m).values())
    reconfigure(m, pool={"prewarm": 0})
    m.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: spares(m)["prewarm"] == 0 and spares(m)["ready"] == 0, 10), spares(m)
    assert wait_until(lambda: not any(sbxutil.pid_alive(p) for p in pids), 5)
    os.makedirs(m.mnt / "alice" / "t")
    assert sbxutil.status(m.mnt / "alice" / "t")["from_spare"] is False
    assert spares(m)["creating"] == 0 and not list((m.state_dir / "spares").iterdir())


def test_warm_thread_reclaims_its_own_sandbox_not_a_spare(sbxfs):
    m = start(sbxfs)
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    pid = sbxutil.status(t)["init_pid"]
    assert claims(m) == (1, 0)
    os.rmdir(t)
    wait_spares(m, 2)
    spare_pids = set(spare_inits(m).values())
    os.mkdir(t)
    st = sbxutil.status(t)
    assert st["init_pid"] == pid and st["init_pid"] not in spare_pids, (st, spare_pids)
    assert claims(m) == (1, 0), "a thread with a warm sandbox must not take a spare"
    assert set(spare_inits(m).values()) == spare_pids


def test_concurrent_new_threads_claim_different_spares(sbxfs):
    import threading
    m = start(sbxfs)
    spare_pids = set(spare_inits(m).values())
    ts = [m.mnt / "alice" / f"c{i}" for i in range(2)]
    os.makedirs(m.mnt / "alice")
    th = [threading.Thread(target=os.mkdir, args=(t,)) for t in ts]
    for x in th:
        x.start()
    for x in th:
        x.join(30)
    sts = [sbxutil.status(t) for t in ts]
    assert all(st["from_spare"] for st in sts), sts
    assert {st["init_pid"] for st in sts} == spare_pids, (sts, spare_pids)
    assert claims(m) == (2, 0)
    outs = [run(t, "j", "id -u; hostname") for t in ts]
    assert [o.split() for o in outs] == [[str(st["uid"]), f"sbx-{st['id']}"] for st in sts], outs


def test_refilled_after_each_claim_within_replicas(sbxfs):
    m = start(sbxfs, replicas=4)
    seen = set(spare_inits(m).values())
    for i in range(2):
        os.makedirs(m.mnt / "alice" / f"t{i}")
        assert sbxutil.status(m.mnt / "alice" / f"t{i}")["from_spare"] is True
        want = min(2, 4 - (i + 1))  # replicas counts the spares
        wait_spares(m, want)
        now = set(spare_inits(m).values())
        for pid in now - seen:
            m.track(pid)
        seen |= now
    assert claims(m) == (2, 0)
    assert spares(m)["made"] >= 4, spares(m)
    st = read_json(m.mnt / ".status")
    assert st["active"] == 2 and st["spares"]["ready"] == 2, st
    # a third and fourth thread: both claim; replicas leaves no room for more
    for i in (2, 3):
        os.makedirs(m.mnt / "alice" / f"t{i}")
        sbxutil.status(m.mnt / "alice" / f"t{i}")
    assert claims(m) == (4, 0)
    # a refill is queued (creating) before the claim's sandbox is ready: none may be
    assert spares(m)["ready"] == 0 and spares(m)["creating"] == 0, spares(m)


def test_spares_reaped_after_idle_timeout_then_back_on_demand(sbxfs):
    m = start(sbxfs, idle_timeout=2, idle_check_interval=1)
    pids = list(spare_inits(m).values())
    assert wait_until(lambda: spares(m)["ready"] == 0, 15), spares(m)
    assert spares(m)["reaps"] == 2, spares(m)
    assert wait_until(lambda: not any(sbxutil.pid_alive(p) for p in pids), 5)
    assert not sbxutil.procs_matching(m.state_dir / "spare-identity", {m.proc.pid})
    assert wait_until(lambda: not list((m.state_dir / "spares").iterdir()), 5)
    # no spare: the next thread is created cold, and the spares come back
    os.makedirs(m.mnt / "alice" / "t")
    assert sbxutil.status(m.mnt / "alice" / "t")["from_spare"] is False
    wait_spares(m, 2)
    for pid in spare_inits(m).values():
        m.track(pid)


@pytest.mark.timeout_s(120)
def test_spares_adopted_after_kill9_and_claimable(sbxfs):
    m = start(sbxfs)
    before = spare_inits(m)
    m.kill9()
    assert all(sbxutil.pid_alive(p) for p in before.values()), "a kill -9 of the daemon must not end spares"
    m.restart()
    wait_spares(m, 2)
    st = spares(m)
    assert st["adopted"] == 2 and st["made"] == 0, st
    assert spare_inits(m) == before
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    s = sbxutil.status(t)
    assert s["from_spare"] is True and s["init_pid"] in before.values(), (s, before)
    assert run(t, "j", "id -u").strip() == str(s["uid"])
    assert claims(m) == (1, 0)


@pytest.mark.timeout_s(120)
def test_interrupted_spare_create_cleaned_at_start(sbxfs):
    """A spare whose record says "creating" (the daemon died during its
    create) is never adopted: its processes and cgroups are ended."""
    m = start(sbxfs)
    before = spare_inits(m)
    m.kill9()
    tok = sorted(before)[0]
    rec = m.state_dir / "spares" / tok / "spare.json"
    j = json.loads(rec.read_text())
    j["state"] = "creating"
    rec.write_text(json.dumps(j))
    m.restart()
    wait_spares(m, 2)
    assert wait_until(lambda: not sbxutil.pid_alive(before[tok]), 5)
    assert spares(m)["adopted"] == 1, spares(m)
    for pid in spare_inits(m).values():
        m.track(pid)


@pytest.mark.timeout_s(120)
def test_interrupted_claim_spare_not_adopted(sbxfs):
    """A spare whose claim FIFO is gone (a claim cut short by a crash, after
    the init took a thread's uid) is ended at start, not adopted."""
    m = start(sbxfs)
    before = spare_inits(m)
    m.kill9()
    tok = sorted(before)[0]
    os.unlink(f"/proc/{before[tok]}/root/run/sbxfs-claim")
    m.restart()
    wait_spares(m, 2)
    assert wait_until(lambda: not sbxutil.pid_alive(before[tok]), 5)
    assert spares(m)["adopted"] == 1, spares(m)
    assert "claim FIFO is gone" in m.log
    for pid in spare_inits(m).values():
        m.track(pid)


@pytest.mark.timeout_s(120)
def test_claimed_sandbox_adopted_after_kill9_and_ended_at_unmount(sbxfs):
    """A claimed sandbox keeps its spare's cgroups (local.json "cgroup"):
    after a kill -9 it is adopted as the thread's, reclaimed, and destroyed
    at unmount with nothing left."""
    m = start(sbxfs)
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    st = sbxutil.status(t)
    assert st["from_spare"] is True
    rec = json.loads((m.thread_data("alice", "t") / "local.json").read_text())
    assert rec["cgroup"] != st["id"] and rec["init_pid"] == st["init_pid"], (rec, st)
    wait_spares(m, 2)
    m.kill9()
    m.restart()
    wait_spares(m, 2)
    os.mkdir(t)  # adopted warm: reclaimed, the same init
    assert sbxutil.status(t)["init_pid"] == st["init_pid"]
    assert run(t, "j", "id -u").strip() == str(st["uid"])
    pids = list(spare_inits(m).values()) + [st["init_pid"]]
    assert m.stop() == 0
    assert not any(sbxutil.pid_alive(p) for p in pids)
    assert sbxutil.sandbox_cgroups(m.state_dir) == []
    assert not sbxutil.procs_matching(m.state_dir)


def test_none_left_after_unmount(sbxfs):
    m = start(sbxfs)
    os.makedirs(m.mnt / "alice" / "t")
    sbxutil.status(m.mnt / "alice" / "t")
    wait_spares(m, 2)
    pids = list(spare_inits(m).values())
    pasta = [p for p in sbxutil.procs_matching("pasta", {m.proc.pid}) if sbxutil.proc_ppid(p) in pids]
    assert m.stop() == 0
    assert not sbxutil.procs_matching(m.state_dir), sbxutil.procs_matching(m.state_dir)
    assert not any(sbxutil.pid_alive(p) for p in pids + pasta)
    assert sbxutil.sandbox_cgroups(m.state_dir) == []
    assert not list((m.state_dir / "spares").iterdir())


def test_failed_claim_destroys_spare_and_creates_cold(sbxfs):
    """Both spares' inits are killed behind the daemon's back: the mkdir
    takes one, finds it dead, destroys it (log line naming the cause) and
    creates the sandbox cold; the thread works."""
    m = start(sbxfs)
    pids = list(spare_inits(m).values())
    for p in pids:
        os.kill(p, signal.SIGKILL)
    assert wait_until(lambda: not any(sbxutil.pid_alive(p) for p in pids), 5)
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    st = sbxutil.status(t)
    assert st["from_spare"] is False and st["init_pid"] not in pids, st
    assert run(t, "j", "id -u").strip() == str(st["uid"])
    assert claims(m) == (0, 1)
    assert "failed its health check" in m.log and "creating cold" in m.log, m.log[-2000:]
    # the dead spare is gone (its directory and cgroup), the rest refilled
    wait_spares(m, 2)
    for pid in spare_inits(m).values():
        m.track(pid)
    assert len(list((m.state_dir / "spares").iterdir())) == 2


def test_hostile_claimed_job_sees_no_spare_nor_host_data(sbxfs):
    m = start(sbxfs, replicas=8)
    os.makedirs(m.mnt / "bob" / "other")
    (m.mnt / "bob" / "other" / "workspace" / "secret").write_text("bob's\n")
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    st = sbxutil.status(t)
    assert st["from_spare"] is True, st
    wait_spares(m, 2)
    others = [str(p) for p in spare_inits(m).values()]
    sd = str(m.state_dir)
    out = run(t, "j", f"""
        ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '; echo
        test -e /run/sbxfs-claim && echo fifo-present || echo no-fifo
        ls {sd} 2>&1 | head -1
        grep {sd}/spares /proc/self/mountinfo | head -1; echo
        cat /mnt/user-data/workspace/secret 2>&1 | head -1
        stat -c %u /proc/1
        mount -t tmpfs x /tmp 2>&1 | head -1; echo mount=$?
        """)
    lines = out.splitlines()
    pids = lines[0].split()
    assert not set(pids) & set(others) or all(int(p) < 20 for p in pids), (pids, others)
    assert "1" in pids and all(int(p) < 100 for p in pids), pids  # its own pid namespace only
    assert lines[1] == "no-fifo", lines
    assert "No such file" in lines[2], lines
    assert lines[3] == "", f"no spare's directory may be mounted in a claimed sandbox: {lines[3]}"
    assert "No such file" in lines[4], lines
    assert lines[5] == str(st["uid"]), lines
    assert "mount=" in lines[-1] and "bob's" not in out


def test_spare_create_failure_logged_and_mkdir_creates_cold(sbxfs):
    """state_dir/spares is a file (hostile state_dir): no spare can be made;
    the failures are counted and logged, and threads are created cold."""
    m = sbxfs(config={"pool": {"prewarm": 2}, "replicas": 6}, start=False)
    m.state_dir.mkdir(parents=True, exist_ok=True)
    (m.state_dir / "spares").write_text("not a directory\n")
    m.start()
    assert wait_until(lambda: spares(m)["make_failures"] == 2 and spares(m)["creating"] == 0, 10), spares(m)
    assert "cannot record the spare" in m.log
    os.makedirs(m.mnt / "alice" / "t")
    st = sbxutil.status(m.mnt / "alice" / "t")
    assert st["from_spare"] is False and st["state"] == "active", st
    assert run(m.mnt / "alice" / "t", "j", "id -u").strip() == str(st["uid"])
    assert wait_until(lambda: spares(m)["creating"] == 0, 10)
    assert spares(m)["ready"] == 0 and metrics(m)['sbxfs_spare_events_total{event="make_failed"}'] >= 2


@pytest.mark.parametrize("value,words", [
    (-1, ["pool.prewarm", "between 0"]),
    ("two", ["pool.prewarm", "integer"]),
    (1.5, ["pool.prewarm", "integer"]),
    (4, ["pool.prewarm", "replicas (3)"]),
])
def test_bad_prewarm_refused(sbxfs, value, words):
    inst = sbxfs(config={"pool": {"prewarm": value}}, start=False)
    t0 = time.monotonic()
    rc, log = inst.run_expect_exit(timeout=10)
    assert rc == 1 and time.monotonic() - t0 < 5, log
    lines = [ln for ln in log.splitlines() if "config error" in ln]
    assert lines, log
    for w in words:
        assert any(w in ln for ln in lines), (w, lines)
    assert not sbxutil.is_mounted(inst.mnt)


def test_prewarm_zero_and_default(sbxfs):
    m = sbxfs(config={"pool": {"prewarm": 0}})
    assert spares(m)["prewarm"] == 0 and not (m.state_dir / "spares").exists()
    m.stop()
    m2 = sbxfs(config={"pool": None, "replicas": 1})  # the default, capped by replicas
    wait_spares(m2, 1)
    assert spares(m2)["prewarm"] == 1
    for pid in spare_inits(m2).values():
        m2.track(pid)
