# SPDX-License-Identifier: MIT
"""DESIGN §5 (local provider): what a job inside a sandbox can and cannot
reach.  Every probe runs as a job through jobs/ and is judged from the host."""

import os
import random
import re
import socket
import threading

import pytest

import sbxutil
from test_jobs import acquire, mkjob, run_job, start, wait_exit, jstatus  # noqa: F401
from sbxutil import read_text, wait_until


def tag():
    return f"{random.randint(0, 1 << 40):010x}"


def probe_reads(paths):
    """A shell script that tries to read each path and prints LEAK <path> with
    the content when that works."""
    lines = []
    for p in paths:
        lines.append(f'if c=$(cat "{p}" 2>/dev/null); then echo "LEAK {p}: $c"; fi')
    return "\n".join(lines)


def find_name(pattern):
    """Search the whole visible tree (but /proc) for a file name."""
    return f"find / -path /proc -prune -o -name '{pattern}' -print 2>/dev/null; true"


# --------------------------------------------------------------------------
# files outside the sandbox


@pytest.mark.timeout_s(120)
def test_cannot_read_file_planted_in_root(sandbox):
    m, t = sandbox
    name = f"sbxfs-secret-{tag()}"
    secret = f"SECRET-{tag()}"
    planted = f"/root/{name}"
    with open(os.open(planted, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(secret + "\n")
    try:
        paths = [planted, f"/proc/1/root/root/{name}", f"/proc/self/root/root/{name}",
                 f"/mnt/user-data/workspace/../../../root/{name}", f"/proc/1/cwd/root/{name}"]
        code, out, err = run_job(t, "probe", probe_reads(paths) + "\n" + find_name(name) + "\necho end",
                                 timeout=90)
        assert code == 0, err
        assert "LEAK" not in out and secret not in out, out
        assert name not in out, f"the job can see the planted file: {out}"
        assert out.endswith("end\n")
    finally:
        os.unlink(planted)


@pytest.mark.timeout_s(120)
def test_cannot_read_another_sandbox_state(mnt):
    m = mnt
    t = acquire(m, "alice", "t")
    bob = acquire(m, "bob", "x")
    name = f"bob-secret-{tag()}.txt"
    secret = f"BOBSECRET-{tag()}"
    (bob / "workspace" / name).write_text(secret + "\n")
    (bob / "outputs" / name).write_text(secret + "\n")
    # and a thread of bob's with data on disk but no sandbox
    cold = m.workspace_data("bob", "cold")
    cold.mkdir(parents=True)
    (cold / name).write_text(secret + "\n")
    host_ws = m.workspace_data("bob", "x")
    assert (host_ws / name).read_text() == secret + "\n"
    bob_init = sbxutil.init_pid(bob)
    paths = [host_ws / name, cold / name, m.thread_data("bob", "x") / "user-data" / "outputs" / name,
             f"/proc/{bob_init}/root/mnt/user-data/workspace/{name}",
             f"/mnt/user-data/workspace/../../../{host_ws}/{name}",
             f"/mnt/user-data/workspace/{name}", f"/mnt/user-data/outputs/{name}"]
    script = probe_reads(paths)
    script += f'\nfor p in /proc/[0-9]*/root/mnt/user-data/workspace/{name}; do ' \
              f'if c=$(cat "$p" 2>/dev/null); then echo "LEAK $p: $c"; fi; done'
    script += f"\nls -d {m.state_dir} 2>/dev/null && echo 'STATE VISIBLE'"
    script += "\n" + find_name(name) + "\necho end"
    code, out, err = run_job(t, "probe", script, timeout=90)
    assert code == 0, err
    assert "LEAK" not in out and secret not in out, out
    assert "STATE VISIBLE" not in out, out
    assert name not in out, out
    assert out.endswith("end\n"), out


def test_cannot_write_system_dirs_or_host_tmp(sandbox):
    m, t = sandbox
    tg = tag()
    targets = [f"/usr/sbxfs-probe-{tg}", f"/usr/bin/sbxfs-probe-{tg}", f"/etc/sbxfs-probe-{tg}",
               f"/mnt/skills/sbxfs-probe-{tg}", f"/sbxfs-probe-{tg}", f"{m.base}/sbxfs-probe-{tg}"]
    script = "\n".join(f'if ( echo x > "{p}" ) 2>/dev/null; then echo "WROTE {p}"; fi' for p in targets)
    script += '\nif ( echo x >> /etc/passwd ) 2>/dev/null; then echo "WROTE /etc/passwd"; fi'
    script += f'\n( echo x > /tmp/sbxfs-probe-{tg} ) 2>/dev/null\necho end'
    passwd = read_text("/etc/passwd")
    code, out, err = run_job(t, "probe", script)
    assert code == 0, err
    assert "WROTE" not in out, out
    assert out == "end\n", out
    for p in targets:
        assert not os.path.exists(p), f"{p} appeared on the host"
    assert not os.path.exists(f"/tmp/sbxfs-probe-{tg}"), "the job wrote the host's /tmp"
    assert read_text("/etc/passwd") == passwd


def test_private_tmp_is_writable_and_not_the_hosts(sandbox):
    """A sandbox has a private /tmp (DESIGN §5): programs can use it, the host
    never sees it, and the sandbox's next job finds what the last one left."""
    m, t = sandbox
    tg = tag()
    code, out, err = run_job(t, "w", f"echo private > /tmp/sbxfs-tmp-{tg} && cat /tmp/sbxfs-tmp-{tg}; "
                             "mktemp && echo mktemp-ok")
    assert code == 0, f"writing /tmp inside the sandbox fails: {err!r}"
    assert out.startswith("private\n") and "mktemp-ok" in out, (out, err)
    assert not os.path.exists(f"/tmp/sbxfs-tmp-{tg}")
    code, out, err = run_job(t, "r", f"cat /tmp/sbxfs-tmp-{tg}")
    assert code == 0 and out == "private\n", (out, err)


# --------------------------------------------------------------------------
# processes, privileges


def test_sees_only_its_own_processes(sandbox):
    m, t = sandbox
    script = r"""for d in /proc/[0-9]*; do printf '%s %s\n' "${d#/proc/}" "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)"; done
kill -0 DPID 2>/dev/null && echo "SIGNAL DAEMON" "OK"
echo end""".replace("DPID", str(m.proc.pid))
    code, out, err = run_job(t, "ps", script)
    assert code == 0, err
    lines = [l for l in out.splitlines() if l and l not in ("end",)]
    procs = {int(l.split(" ", 1)[0]): l.split(" ", 1)[1] if " " in l else "" for l in lines
             if l.split(" ", 1)[0].isdigit()}
    assert "SIGNAL DAEMON OK" not in out.splitlines(), out
    assert 1 in procs, f"no pid 1 in the job's pid namespace: {out}"
    assert len(procs) <= 8, f"the job sees {len(procs)} processes: {out}"
    host_me = os.getpid()
    for pid, cmd in procs.items():
        assert "sbxfs -f" not in cmd and "pytest" not in cmd, f"host process visible: {pid} {cmd}"
    # the host sees many more (sanity: the check above means something)
    assert len([d for d in os.listdir("/proc") if d.isdigit()]) > len(procs)
    assert host_me not in procs or "pytest" not in procs.get(host_me, "")


def test_no_capabilities_unprivileged_uid(sandbox):
    m, t = sandbox
    uid = sbxutil.status(t)["uid"]
    code, out, err = run_job(t, "caps", "grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' "
                             "/proc/self/status; id -u")
    assert code == 0, err
    f = dict(re.findall(r"^(\w+):\s+(.*)$", out, re.M))
    assert int(f["CapEff"], 16) == 0, out
    assert int(f["CapPrm"], 16) == 0, out
    assert int(f["CapInh"], 16) == 0 and int(f["CapAmb"], 16) == 0, out
    assert f["NoNewPrivs"].strip() == "1", out
    uids = [int(x) for x in f["Uid"].split()]
    gids = [int(x) for x in f["Gid"].split()]
    assert all(u == uid for u in uids) and uid != 0, (uid, out)
    assert all(g != 0 for g in gids), out
    assert out.splitlines()[-1] == str(uid)
    # the same uid on the host (not root mapped into a user namespace)
    j = mkjob(t, "hostview")
    start(j, "echo ready; sleep 30")
    assert wait_until(lambda: jstatus(j)["stdout_bytes"] >= 6, 10)
    hpid = jstatus(j)["pid"]  # the job's host pid
    try:
        assert sbxutil.pid_alive(hpid), f"job pid {hpid} is not a live host process"
        hst = read_text(f"/proc/{hpid}/status")
        hf = dict(re.findall(r"^(\w+):\s+(.*)$", hst, re.M))
        assert [int(x) for x in hf["Uid"].split()] == [uid] * 4, hst
        assert int(hf["CapEff"], 16) == 0 and hf["NoNewPrivs"].strip() == "1", hst
    finally:
        write_ctl_kill(j)
        wait_exit(j, 10)


def write_ctl_kill(j):
    fd = os.open(j / "ctl", os.O_WRONLY)
    try:
        os.write(fd, b"kill KILL")
    finally:
        os.close(fd)


def test_etc_shadow_and_root_owned_files_unreadable(sandbox):
    m, t = sandbox
    assert os.path.exists("/etc/shadow")
    code, out, err = run_job(t, "shadow", "cat /etc/shadow; echo rc=$?; su -c id root </dev/null; echo su=$?")
    assert "rc=0" not in out, f"/etc/shadow is readable from a job: {out}"
    assert "root:" not in out.split("rc=")[0]
    # the sandbox's /etc is a curated copy without shadow (issue 7); a
    # local.rootfs may still have one, which the uid cannot read
    assert "Permission denied" in err or "No such file or directory" in err, err
    assert "uid=0" not in out, out


@pytest.mark.timeout_s(120)
def test_other_workspaces_invisible(mnt):
    m = mnt
    mine = acquire(m, "alice", "t")
    others = [acquire(m, "alice", "t2"), acquire(m, "bob", "x")]
    tg = tag()
    (mine / "workspace" / f"mine-{tg}.txt").write_text("mine\n")
    (mine / "uploads" / f"up-{tg}.txt").write_text("up\n")
    for i, o in enumerate(others):
        (o / "workspace" / f"other{i}-{tg}.txt").write_text("other\n")
        (o / "uploads" / f"other{i}-up-{tg}.txt").write_text("other\n")
        (o / "outputs" / f"other{i}-out-{tg}.txt").write_text("other\n")
    code, out, err = run_job(mine, "ls", "ls -A /mnt/user-data; echo --; ls -A /mnt/user-data/workspace; echo --; "
                             "ls -A /mnt/user-data/uploads /mnt/user-data/outputs; echo --; " +
                             find_name(f"other*-{tg}*"), timeout=90)
    assert code == 0, err
    parts = out.split("--\n")
    assert parts[0].split() == ["outputs", "uploads", "workspace"], out
    assert parts[1].split() == [f"mine-{tg}.txt"], out
    assert f"up-{tg}.txt" in parts[2] and "other" not in parts[2], out
    assert parts[3] == "", f"another sandbox's files are visible: {parts[3]}"


# --------------------------------------------------------------------------
# network


class HostServer:
    """A TCP server on the host's 127.0.0.1 that records who connected."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            self.accepted += 1
            try:
                c.sendall(b"hello from the host\n")
            finally:
                c.close()

    def close(self):
        self.stop.set()
        self.th.join(5)
        self.sock.close()


CONNECT = """import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", PORT), timeout=3)
    print("connected", s.recv(100).decode().strip())
except Exception as e:
    print("failed", type(e).__name__, e)
"""


@pytest.mark.timeout_s(90)
@pytest.mark.parametrize("mode", ["isolated", "open"])
def test_host_loopback_unreachable_in_every_mode(sbxfs, mode):
    """Every mode has a network namespace of its own (DESIGN §7; more in
    test_network.py): even open mode never reaches the host's 127.0.0.1."""
    m = sbxfs(config={"network": {"mode": mode}})
    t = acquire(m)
    assert sbxutil.status(t)["network_mode"] == mode
    srv = HostServer()
    try:
        code, out, err = run_job(t, "net", "python3 -", stdin=CONNECT.replace("PORT", str(srv.port)), timeout=30)
        assert code == 0, err
        assert out.startswith("failed"), f"a {mode} sandbox reached the host's 127.0.0.1: {out}"
        assert srv.accepted == 0
    finally:
        srv.close()


@pytest.mark.timeout_s(90)
def test_two_sandboxes_do_not_see_each_other(mnt):
    m = mnt
    a = acquire(m, "alice", "t")
    b = acquire(m, "bob", "x")
    ua, ub = sbxutil.status(a)["uid"], sbxutil.status(b)["uid"]
    assert ua != ub, "two sandboxes share a uid"
    ta, tb = str(random.randint(100000, 499999)), str(random.randint(500000, 999999))
    ja, jb = mkjob(a, "bg"), mkjob(b, "bg")
    start(ja, f"echo ready; sleep {ta}")
    start(jb, f"echo ready; sleep {tb}")
    assert wait_until(lambda: jstatus(ja)["stdout_bytes"] >= 6 and jstatus(jb)["stdout_bytes"] >= 6, 10)
    try:
        results = {}

        def look(name, d):
            results[name] = run_job(d, "ps", "ps -eo pid,user,args; echo; ls /proc | grep -c '^[0-9]'")

        ths = [threading.Thread(target=look, args=("a", a), daemon=True),
               threading.Thread(target=look, args=("b", b), daemon=True)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(60)
        assert set(results) == {"a", "b"}
        out_a, out_b = results["a"][1], results["b"][1]
        assert f"sleep {ta}" in out_a and f"sleep {tb}" not in out_a, out_a
        assert f"sleep {tb}" in out_b and f"sleep {ta}" not in out_b, out_b
        # and from a job of alice's, bob's processes cannot be signalled
        code, out, _ = run_job(a, "kill", f"pkill -f '^sleep {tb}$'; echo rc=$?")
        assert "rc=1" in out, out
        assert jstatus(jb)["state"] == "running"
    finally:
        write_ctl_kill(ja)
        write_ctl_kill(jb)
        wait_exit(ja, 10)
        wait_exit(jb, 10)
