# SPDX-License-Identifier: MIT
"""pool.prewarm for the docker provider (issue 21 item 1): spare containers,
made ahead with empty mount points and an init that runs as root with
CAP_SETUID/SETGID/SETPCAP only, bound to a new thread at its mkdir without
a restart (providers/container.c "spares", providers/claim_mount.c,
helpers/docker_box.c "sbxfs-box spare").

Whether a sandbox came from a spare is read from .metrics, .status and the
container ids on disk (state_dir/spares/<token>/docker.json), never from
timing.  Counts are small: a container start costs about a second here."""

import json
import os
import subprocess

import pytest

import sbxutil
import test_jobs as J
from containerutil import case_label, cli, containers, docker_images, inspect, sbxfs, scope_token  # noqa: F401
from sbxutil import wait_until


@pytest.fixture
def provider():
    return "docker"


spares = sbxutil.spares
claims = sbxutil.spare_claims


def wait_spares(m, n, timeout=90):
    sbxutil.wait_spares(m, n, timeout)


def spare_records(m):
    """{token: docker.json} of the spares on disk."""
    return sbxutil.spare_records(m, "docker.json")


def start(sbxfs, prewarm=1, **cfg):
    conf = {"pool": {"prewarm": prewarm}, "replicas": 4}
    conf.update(cfg)
    m = sbxfs(config=conf)
    wait_spares(m, prewarm)
    return m


def run(d, name, cmd):
    code, out, err = J.run_job(d, name, cmd)
    assert code == 0, (cmd, out, err)
    return out


# What a job sees of who and where it is: what a claim must make the thread's.
PROBE = ("id -u; id -g; hostname; stat -c '%u %g' /mnt/user-data/workspace /mnt/user-data/outputs; "
         "ls /mnt/user-data | tr '\\n' ' '; echo; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | "
         "tr '\\n' ' '; echo; grep -E '^(Groups|CapPrm|CapEff|CapBnd|NoNewPrivs)' /proc/self/status; "
         "cat /mnt/skills/s.md; touch /mnt/skills/x 2>/dev/null || echo ro; ls /mnt/user-data/workspace; "
         "cat /etc/hostname; grep \"$(hostname)\" /etc/hosts | wc -l")


def normalised(out, uid, gid, token):
    return out.replace(f"sbx-{token}", "HOST").replace(str(uid), "UID").replace(str(gid), "GID")


@pytest.mark.timeout_s(240)
def test_claim_gives_what_a_cold_create_gives_and_a_dead_spare_falls_back(sbxfs, case_label):
    """t1 claims the spare: its job shows the uid, gid, groups, hostname,
    ownership, network, capabilities and read-only skills a cold create
    gives, its data attached; then the refilled spare is `docker kill`ed
    behind the daemon's back: t2's mkdir finds it dead, destroys it (log
    line) and creates cold, and both probes are the same but for the
    thread's own uid and hostname.  Hostile: the claimed job cannot mount,
    set the hostname, reach another thread's data or the spare's empty
    mount points, nor ask its init for another claim."""
    m = start(sbxfs)
    recs = spare_records(m)
    assert len(recs) == 1, recs
    spare_id = next(iter(recs.values()))["id"]
    assert inspect(spare_id)["Config"]["Labels"]["org.sbxfs.spare"] == next(iter(recs))
    os.makedirs(m.mnt / "alice" / "t1")
    (m.mnt / "alice" / "t1" / "workspace" / "mine").write_text("t1")
    (m.thread_data("alice", "t1") / "skills" / "s.md").write_text("skill\n")
    st1 = sbxutil.status(m.mnt / "alice" / "t1")
    assert st1["from_spare"] is True, st1
    assert claims(m)[0] >= 1
    # t1's record moved with the container: the spare's directory is gone
    rec1 = json.loads((m.thread_data("alice", "t1") / "docker.json").read_text())
    assert rec1["id"] == spare_id and rec1["uid"] == st1["uid"], (rec1, st1)
    out1 = run(m.mnt / "alice" / "t1", "p", PROBE)
    u1, g1 = out1.split()[0:2]
    assert u1 == str(st1["uid"]) and int(u1) > 0
    assert out1.splitlines()[2] == f"sbx-{scope_token('alice', 't1')}", out1

    # hostile, in the claimed sandbox
    sd = str(m.state_dir)
    hostile = run(m.mnt / "alice" / "t1", "h", f"""
        mount -t tmpfs x /tmp 2>/dev/null && echo mounted || echo no-mount
        hostname evil 2>/dev/null && echo renamed || echo no-rename
        ls {sd} 2>&1 | grep -c 'No such file'
        cat /mnt/user-data/workspace/../../../{sd}/users 2>&1 | grep -c 'No such file'
        ls /mnt/user-data/workspace""")
    assert hostile.split() == ["no-mount", "no-rename", "1", "1", "mine"], hostile
    # a process of the container (root inside, in its network namespace)
    # asks the init for a claim: refused (only the daemon, outside, may)
    pid = st1["init_pid"]
    probe = ("import socket;s=socket.socket(socket.AF_UNIX,socket.SOCK_SEQPACKET);s.connect('\\0sbxfs-box');"
             "s.send(b'claim 4242 4242');s.settimeout(3);\ntry: print(s.recv(64))\nexcept Exception as e: print('none')")
    r = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "--setuid=4242", "--setgid=4242", "/usr/bin/python3",
                        "-c", probe], capture_output=True, text=True, timeout=30)
    assert "claimed" not in r.stdout, r.stdout
    assert run(m.mnt / "alice" / "t1", "u", "id -u").strip() == u1

    # the refilled spare, killed behind the daemon's back: a cold create
    wait_spares(m, 1)
    recs = spare_records(m)
    dead = next(iter(recs.values()))["id"]
    assert dead != spare_id
    cli("kill", dead, timeout=60)
    assert wait_until(lambda: not inspect(dead)["State"]["Running"], 30)
    os.makedirs(m.mnt / "alice" / "t3")
    (m.mnt / "alice" / "t3" / "workspace" / "mine").write_text("t3")
    (m.thread_data("alice", "t3") / "skills" / "s.md").write_text("skill\n")
    st3 = sbxutil.status(m.mnt / "alice" / "t3")
    assert st3["from_spare"] is False, st3
    assert claims(m)[1] == 1, claims(m)
    assert "creating cold" in m.log, m.log[-3000:]
    assert wait_until(lambda: not [c for c in containers(case_label) if c["id"].startswith(dead[:12])], 30), \
        "the dead spare's container was left"
    out3 = run(m.mnt / "alice" / "t3", "p", PROBE)
    u3, g3 = out3.split()[0:2]
    assert normalised(out1, u1, g1, scope_token("alice", "t1")) == \
        normalised(out3, u3, g3, scope_token("alice", "t3")), (out1, out3)
    assert "CapBnd:\t0000000000000000" in out1 and "Groups:\t" + g1 in out1, out1
    wait_spares(m, 1)
    assert m.stop() == 0
    assert containers(case_label) == [], containers(case_label)


@pytest.mark.timeout_s(300)
def test_warm_refill_adoption_after_kill9_and_nothing_left(sbxfs, case_label):
    """A claim is refilled with another container; the claimed thread's
    sandbox, warm, is reclaimed by its thread without taking the spare;
    after kill -9 and a restart the spare is adopted as a spare and the
    claimed container as the thread's sandbox (decided by the records: its
    spare label stays), never as a spare; unmount leaves no container."""
    m = start(sbxfs)
    first = next(iter(spare_records(m).values()))["id"]
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    st = sbxutil.status(t)
    assert st["from_spare"] is True and claims(m) == (1, 0)
    wait_spares(m, 1)
    second = next(iter(spare_records(m).values()))["id"]
    assert second != first
    # warm: its own container again, the spare untouched
    os.rmdir(t)
    os.mkdir(t)
    assert sbxutil.status(t)["init_pid"] == st["init_pid"]
    assert claims(m) == (1, 0)
    assert next(iter(spare_records(m).values()))["id"] == second
    m.kill9()
    m.restart()
    wait_spares(m, 1)
    assert spares(m)["adopted"] == 1, spares(m)
    assert next(iter(spare_records(m).values()))["id"] == second, "the spare was not adopted as the spare"
    assert "a claim was interrupted" not in m.log
    # discovery leaves spares (claimed or not) to their records: no stranger warning
    assert "is not one it made" not in m.log, m.log[-3000:]
    os.mkdir(t)  # adopted warm: the same container, the thread's uid and hostname
    st2 = sbxutil.status(t)
    assert st2["init_pid"] == st["init_pid"], st2
    assert run(t, "j", "id -u; hostname").split() == [str(st["uid"]), f"sbx-{scope_token('alice', 't')}"]
    assert claims(m) == (0, 0)  # counters are per daemon; the adopted thread claimed nothing
    run(t, "w", "echo kept > /mnt/user-data/workspace/f")
    ids = {c["id"][:12] for c in containers(case_label)}
    assert ids == {first[:12], second[:12]}, ids
    assert m.stop() == 0
    assert containers(case_label) == [], containers(case_label)
    assert not list((m.state_dir / "spares").iterdir())
    # the thread's data outlived its sandbox: a spare claimed for it attaches it, uid kept
    m.start()
    wait_spares(m, 1)
    os.mkdir(t)
    st3 = sbxutil.status(t)
    assert st3["from_spare"] is True and st3["uid"] == st["uid"], (st3, st)
    assert run(t, "r", "cat /mnt/user-data/workspace/f; stat -c %u /mnt/user-data/workspace/f").split() == \
        ["kept", str(st["uid"])]
    assert m.stop() == 0
    assert containers(case_label) == [], containers(case_label)


@pytest.mark.timeout_s(180)
def test_spare_whose_init_took_a_uid_is_not_adopted(sbxfs, case_label):
    """A claim cut short by a crash after the spare's init took a thread's
    uid: at the next start the spare is destroyed, not adopted (its record
    is still the spare's, but what runs in it is no longer a spare)."""
    m = start(sbxfs)
    tok, rec = next(iter(spare_records(m).items()))
    m.kill9()
    # what the daemon's claim does first, done by hand (as root, outside)
    probe = ("import socket;s=socket.socket(socket.AF_UNIX,socket.SOCK_SEQPACKET);"
             "s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1);s.connect('\\0sbxfs-box');"
             "s.send(b'claim 4242 4242');s.settimeout(5);print(s.recv(64).decode())")
    r = subprocess.run(["nsenter", f"--net=/proc/{rec['init_pid']}/ns/net", "/usr/bin/python3", "-c", probe],
                       capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == "claimed", (r.stdout, r.stderr)
    m.restart()
    wait_spares(m, 1)
    assert "a claim was interrupted" in m.log, m.log[-3000:]
    assert wait_until(lambda: not [c for c in containers(case_label) if c["id"].startswith(rec["id"][:12])], 30)
    assert tok not in spare_records(m)
    assert m.stop() == 0
    assert containers(case_label) == []


def test_bad_claim_requests_refused_by_the_spare_init(sbxfs, case_label):
    """Hostile requests to a spare's init (root outside, as the daemon):
    uid 0, gid 0, junk, an overflow: each answered with an error and the
    init stays root, unclaimed; the spare is still claimed fine after."""
    m = start(sbxfs)
    rec = next(iter(spare_records(m).values()))
    for req in (b"claim 0 5", b"claim 5 0", b"claim x y", b"claim 5 5 5", b"claim 99999999999 5", b"claim"):
        probe = ("import socket,sys;s=socket.socket(socket.AF_UNIX,socket.SOCK_SEQPACKET);s.connect('\\0sbxfs-box');"
                 f"s.send({req!r});s.settimeout(5);print(s.recv(64).decode())")
        r = subprocess.run(["nsenter", f"--net=/proc/{rec['init_pid']}/ns/net", "/usr/bin/python3", "-c", probe],
                           capture_output=True, text=True, timeout=30)
        assert r.stdout.startswith("error"), (req, r.stdout, r.stderr)
        with open(f"/proc/{rec['init_pid']}/status") as f:
            assert [ln.split()[1] for ln in f if ln.startswith("Uid:")] == ["0"]
    os.makedirs(m.mnt / "alice" / "t")
    assert sbxutil.status(m.mnt / "alice" / "t")["from_spare"] is True
    assert claims(m) == (1, 0)


@pytest.mark.timeout_s(180)
def test_open_mode_and_engine_exec_in_a_claimed_spare(sbxfs, case_label):
    """Network mode open (Docker's bridge) and docker.exec: engine: the
    claimed spare's job, started through the Engine exec API as the box's
    uid, runs as the thread's uid with the interfaces a cold create gives
    (a cold one made after, the spare killed, shows the same)."""
    m = start(sbxfs, network={"mode": "open"}, docker={"exec": "engine"})
    probe = ("id -u; id -g; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; echo; "
             "cat /etc/hostname; grep \"$(hostname)\" /etc/hosts | wc -l; hostname")
    os.makedirs(m.mnt / "alice" / "a")
    st = sbxutil.status(m.mnt / "alice" / "a")
    assert st["from_spare"] is True and st["network_mode"] == "open", st
    out = run(m.mnt / "alice" / "a", "p", probe).split("\n")
    assert out[0] == str(st["uid"]) and "eth0" in out[2].split(), out
    # Docker's /etc/hostname and /etc/hosts name the thread's hostname, as in a cold create
    assert out[3] == out[5] == f"sbx-{scope_token('alice', 'a')}" and out[4] == "1", out
    wait_spares(m, 1)
    cli("kill", next(iter(spare_records(m).values()))["id"], timeout=60)
    os.makedirs(m.mnt / "alice" / "b")
    st2 = sbxutil.status(m.mnt / "alice" / "b")
    assert st2["from_spare"] is False, st2
    out2 = run(m.mnt / "alice" / "b", "p", probe).split("\n")
    assert out2[0] == str(st2["uid"]) and out2[2] == out[2] and out2[4] == "1", (out, out2)
    assert m.stop() == 0
    assert containers(case_label) == []


@pytest.mark.timeout_s(180)
def test_idle_spare_reaped_then_back_on_demand(sbxfs, case_label):
    """A spare unused for idle_timeout is destroyed like a warm sandbox (its
    container removed, its directory gone) and not refilled until a mkdir
    wants a sandbox again: that one is cold, and the spare comes back."""
    m = start(sbxfs, idle_timeout=1, idle_check_interval=1)
    cid = next(iter(spare_records(m).values()))["id"]
    assert wait_until(lambda: spares(m)["ready"] == 0 and spares(m)["reaps"] == 1, 30), spares(m)
    assert wait_until(lambda: not [c for c in containers(case_label) if c["id"].startswith(cid[:12])], 30)
    assert spare_records(m) == {}
    os.makedirs(m.mnt / "alice" / "t")
    assert sbxutil.status(m.mnt / "alice" / "t")["from_spare"] is False
    # made again (a counter: with idle_timeout 1 it may be reaped again at once)
    assert wait_until(lambda: spares(m)["made"] >= 2, 60), spares(m)
    assert m.stop() == 0
    assert containers(case_label) == []


@pytest.mark.timeout_s(180)
def test_allowlist_spare_gets_its_proxy_at_claim(sbxfs, case_label):
    """Network mode allowlist: the claimed spare's network namespace gets the
    approval proxy's listener from the pool's hook at claim, as a cold
    create does: the job's HTTPS_PROXY names it and it listens there."""
    m = start(sbxfs, network={"mode": "allowlist", "allow_domains": ["static.example.test"]})
    t = m.mnt / "alice" / "t"
    os.makedirs(t)
    st = sbxutil.status(t)
    assert st["from_spare"] is True and st["network_mode"] == "allowlist", st
    # the listener is there, served by the daemon inside the container's network namespace
    out = run(t, "j", "echo $HTTPS_PROXY; netstat -ltn | grep -c '127.0.0.1:3128 '; "
                      "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
    lines = out.splitlines()
    assert lines[:2] == ["http://127.0.0.1:3128", "1"], out
    assert lines[2:] == ["lo"], out
    assert m.stop() == 0
    assert containers(case_label) == []
