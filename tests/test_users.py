# SPDX-License-Identifier: MIT
"""users: + allow_other (DESIGN §3 "Ownership and access"): a non-root
account creates and uses its own sandbox and gets EACCES on another user's
directory.  The accounts are made with useradd and removed afterwards."""

import errno
import grp
import json
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys

import pytest

import sbxutil

SETPRIV = shutil.which("setpriv")


def _free_uid(start=61000, taken=()):
    uid = start
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            if uid not in taken:
                return uid
        uid += 1


@pytest.fixture
def accounts():
    if os.geteuid() != 0:
        pytest.skip("needs root to create accounts")
    if SETPRIV is None or shutil.which("useradd") is None:
        pytest.skip("setpriv/useradd not installed on this machine")
    made = []
    try:
        for _ in range(2):
            uid = _free_uid(taken=[u for _, u in made])
            name = "sbxtest" + secrets.token_hex(3)
            r = subprocess.run(["useradd", "-M", "-N", "-u", str(uid), name],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
            made.append((name, uid))
        yield made
    finally:
        for name, _ in made:
            subprocess.run(["userdel", name], capture_output=True, timeout=30)


AS_USER = r"""
import errno, json, os, sys
ops = json.loads(sys.argv[1])
out = []
for op, path, *rest in ops:
    try:
        if op == "makedirs":
            os.makedirs(path, exist_ok=True); r = 0
        elif op == "mkdir":
            os.mkdir(path); r = 0
        elif op == "write":
            with open(path, "w") as f:
                f.write(rest[0])
            r = 0
        elif op == "read":
            with open(path) as f:
                r = f.read()
        elif op == "listdir":
            r = sorted(os.listdir(path))
        elif op == "stat":
            st = os.stat(path); r = [st.st_uid, st.st_mode]
        elif op == "chdir":
            os.chdir(path); r = 0
        elif op == "unlink":
            os.unlink(path); r = 0
        elif op == "rmdir":
            os.rmdir(path); r = 0
        else:
            r = "bad op"
        out.append({"ok": r})
    except OSError as e:
        out.append({"errno": errno.errorcode.get(e.errno, str(e.errno)), "msg": str(e)})
print(json.dumps(out))
"""


def as_user(uid, ops):
    """Run file operations as uid (setpriv, no supplementary groups)."""
    ops = [[op, str(p), *rest] for op, p, *rest in ops]
    r = subprocess.run([SETPRIV, "--reuid", str(uid), "--regid", str(uid), "--clear-groups",
                        sys.executable, "-c", AS_USER, json.dumps(ops)],
                       capture_output=True, text=True, timeout=120, cwd="/")
    assert r.returncode == 0, f"as uid {uid}: rc {r.returncode}: {r.stderr}"
    return json.loads(r.stdout)


@pytest.mark.timeout_s(150)
def test_users_own_sandboxes_and_eacces_for_others(sbxfs, accounts):
    (a, ua), (b, ub) = accounts
    m = sbxfs(config={"users": {a: ua, b: ub}, "allow_other": True})
    sbx = m.mnt
    ta = sbx / a / "t1"

    # user A creates and uses its own sandbox
    res = as_user(ua, [("makedirs", ta),
                       ("write", ta / "workspace" / "mine.txt", "from A\n"),
                       ("read", ta / "workspace" / "mine.txt"),
                       ("read", ta / "id"),
                       ("listdir", ta)])
    assert all("ok" in r for r in res), res
    assert res[2]["ok"] == "from A\n"
    assert len(res[3]["ok"].strip()) == 16
    assert {"id", "status", "workspace"} <= set(res[4]["ok"])

    st = os.stat(sbx / a)
    assert st.st_uid == ua and stat.S_IMODE(st.st_mode) == 0o700, (st.st_uid, oct(st.st_mode))
    assert os.stat(ta).st_uid == ua
    assert os.stat(ta / "workspace").st_uid == ua
    assert os.stat(ta / "workspace" / "mine.txt").st_uid == ua
    # on the host the data belongs to the user's uid as well (DESIGN §5)
    assert os.stat(m.workspace_data(a, "t1") / "mine.txt").st_uid == ua
    # the sandbox's processes, its pid 1 included, run as that uid, not as root
    pid = m.init_pid(ta)
    assert sbxutil.status(ta)["uid"] == ua
    inside = sbxutil.descendants_and_self(pid)
    assert pid in inside
    for p in inside:
        with open(f"/proc/{p}/status") as f:
            uids = [ln.split()[1:] for ln in f if ln.startswith("Uid:")][0]
        assert all(int(u) == ua for u in uids), f"sandbox process {p} runs as uids {uids}"

    # user B: EACCES on A's directory, its own sandbox works
    res = as_user(ub, [("listdir", sbx / a),
                       ("chdir", sbx / a),
                       ("stat", ta),
                       ("read", ta / "workspace" / "mine.txt"),
                       ("write", ta / "workspace" / "intruder.txt", "x"),
                       ("mkdir", sbx / a / "t2"),
                       ("makedirs", sbx / b / "tb"),
                       ("write", sbx / b / "tb" / "workspace" / "b.txt", "B")])
    for r in res[:6]:
        assert r.get("errno") == "EACCES", res
    assert "ok" in res[6] and "ok" in res[7], res
    assert not (m.workspace_data(a, "t1") / "intruder.txt").exists()
    assert not (sbx / a / "t2").exists()

    # user A cannot make B's directory contents or take B's name
    res = as_user(ua, [("mkdir", sbx / b / "ta"),
                       ("listdir", sbx / b)])
    assert res[0].get("errno") in ("EACCES", "EPERM"), res
    assert res[1].get("errno") == "EACCES", res

    # root can still see everything
    assert (ta / "workspace" / "mine.txt").read_text() == "from A\n"


@pytest.mark.timeout_s(150)
def test_user_cannot_create_other_users_dir(sbxfs, accounts):
    (a, ua), (b, ub) = accounts
    m = sbxfs(config={"users": {a: ua, b: ub}, "allow_other": True})
    res = as_user(ua, [("mkdir", m.mnt / b), ("makedirs", m.mnt / b / "t")])
    assert res[0].get("errno") in ("EACCES", "EPERM") or \
        res[1].get("errno") in ("EACCES", "EPERM"), res
    assert not (m.mnt / b / "t").exists()
    assert not m.thread_data(b, "t").exists()
    # and an account that is not in users: gets nothing
    res = as_user(ub, [("mkdir", m.mnt / "stranger")])
    assert res[0].get("errno") in ("EACCES", "EPERM"), res


@pytest.mark.timeout_s(150)
def test_the_sandbox_names_a_host_account_and_its_group(sbxfs, accounts):
    """users: passwd maps a user to its host account: the sandbox's passwd and
    group name the account and its host group (the only case where the daemon
    asks the name service); a thread of the uid range gets the sbxfs user's
    name for both, with no lookup."""
    (a, ua), _ = accounts
    gid = pwd.getpwuid(ua).pw_gid
    gname = grp.getgrgid(gid).gr_name
    m = sbxfs(config={"users": "passwd", "allow_other": True})
    res = as_user(ua, [("makedirs", m.mnt / a / "t1"), ("read", m.mnt / a / "t1" / "ready")])
    assert all("ok" in r for r in res), res
    etc = m.thread_data(a, "t1") / "etc"
    assert f"{a}:x:{ua}:{gid}:" in (etc / "passwd").read_text()
    assert (etc / "group").read_text().splitlines()[-1] == f"{gname}:x:{gid}:"
    for f in ("passwd", "group"):
        assert stat.S_IMODE((etc / f).stat().st_mode) == 0o644


def test_a_range_uid_sandbox_names_the_sbxfs_user(sbxfs):
    m = sbxfs()
    sbxutil.mkdir_ready(m.mnt / "carol" / "t1", parents=True)
    uid = sbxutil.status(m.mnt / "carol" / "t1")["uid"]
    etc = m.thread_data("carol", "t1") / "etc"
    assert f"carol:x:{uid}:{uid}:" in (etc / "passwd").read_text()
    assert (etc / "group").read_text().splitlines()[-1] == f"carol:x:{uid}:"
    assert not list(etc.glob("*.tmp.*"))
