# SPDX-License-Identifier: MIT
"""DESIGN §3 snapshots/ and ctl's freeze, thaw, restore; §4 Snapshots.

mkdir snapshots/NAME takes a consistent snapshot of workspace, uploads and
outputs; each is read-only (EROFS) with an `info` file; `echo "restore
[THREAD/]NAME" > ctl` makes the data equal to it (EBUSY while a job runs),
`freeze`/`thaw` pause and resume the sandbox.  Ground truth is read on the
host (state_dir), what users see through the mount.  The container
providers run the functions marked "suite" again in test_containers.py."""

import errno
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import sbxutil
from sbxutil import expect_errno, read_json, read_text, wait_until
from test_jobs import jstatus, mkjob, run_job, start, wait_exit, write_ctl
from test_users import accounts, as_user  # noqa: F401 (a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parent / "fakes"))

DATA_DIRS = ("workspace", "uploads", "outputs")
MiB = 1 << 20


# --------------------------------------------------------------------------
# helpers


def acquire(m, user="alice", thread="t"):
    d = m.mnt / user / thread
    os.makedirs(d)
    m.init_pid(d)
    return d


def snap(t, name):
    """mkdir snapshots/NAME; its info."""
    os.mkdir(t / "snapshots" / name)
    return read_json(t / "snapshots" / name / "info")


def ctl(t, cmd):
    """One write of cmd to the sandbox's ctl (raises OSError on refusal)."""
    return write_ctl(t / "ctl", cmd + "\n")


def names(t):
    return sorted(os.listdir(t / "snapshots"))


def host_thread(m, user="alice", thread="t"):
    return m.thread_data(user, thread)


def host_data(m, d, user="alice", thread="t"):
    return host_thread(m, user, thread) / "user-data" / d


def host_snap(m, name, d="workspace", user="alice", thread="t"):
    return host_thread(m, user, thread) / "snapshots" / name / "data" / d


def tree(root, times=True):
    """{relpath: (type, mode, content hash | link target | None, mtime_ns)}
    of everything under root, never following a link nor opening what is
    not a regular file."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            if stat.S_ISREG(st.st_mode) and st.st_size > 256 * MiB:  # a sparse giant: its size
                val = (st.st_size, None)
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                val = (st.st_size, h.hexdigest())
            elif stat.S_ISLNK(st.st_mode):
                val = os.readlink(p)
            else:
                val = None
            mt = st.st_mtime_ns if times and not stat.S_ISLNK(st.st_mode) else None
            out[os.path.relpath(p, root)] = (kind, stat.S_IMODE(st.st_mode), val, mt)
    return out


def trees(m, thread="t"):
    return {d: tree(host_data(m, d, thread=thread)) for d in DATA_DIRS}


def cpu_ticks(pid):
    """utime + stime of a process (clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])  # fields 14 and 15


def job_pid(j):
    assert wait_until(lambda: isinstance(jstatus(j).get("pid"), int), 10), jstatus(j)
    return jstatus(j)["pid"]


# --------------------------------------------------------------------------
# suite: taken, read-only, restored


def test_snapshot_then_restore_after_a_job_deleted_changed_and_added_files(sandbox):
    """suite"""
    m, t = sandbox
    code, _, err = run_job(t, "setup",
                           "mkdir -p src/pkg keep && echo one > src/a.py && echo two > src/pkg/b.py"
                           " && chmod 750 src/pkg && ln -s a.py src/link && seq 1 20000 > big.txt"
                           " && touch -d '2001-09-09 01:46:40' old.txt && chmod 600 old.txt && echo k > keep/k")
    assert code == 0, err
    (t / "uploads" / "in.csv").write_text("1,2\n")
    (t / "outputs" / "r.txt").write_text("result\n")
    before = trees(m)
    info = snap(t, "s1")
    for k in ("created_at", "files", "bytes", "bytes_shared"):
        assert k in info, info
    assert info["files"] == 7 and info["bytes"] == sum(v[2][0] for d in before.values() for v in d.values()
                                                           if v[0] == stat.S_IFREG), info
    assert names(t) == ["s1"]
    # the snapshot is what was there, as it was
    for d in DATA_DIRS:
        assert tree(host_snap(m, "s1", d)) == before[d], d
    assert (t / "snapshots" / "s1" / "workspace" / "src" / "a.py").read_text() == "one\n"
    assert os.readlink(t / "snapshots" / "s1" / "workspace" / "src" / "link") == "a.py"
    assert sorted(os.listdir(t / "snapshots" / "s1")) == ["info", "outputs", "uploads", "workspace"]

    code, _, err = run_job(t, "damage",
                           "rm -rf src/pkg && echo changed > src/a.py && echo new > added.txt && mkdir newdir"
                           " && echo z > newdir/z && rm old.txt && chmod 644 big.txt && rm src/link"
                           " && mkdir src/link && echo in > src/link/file && rm -r keep && echo f > keep")
    assert code == 0, err
    (t / "outputs" / "r.txt").unlink()
    (t / "uploads" / "extra").write_text("e")
    assert trees(m) != before
    for _ in range(2):  # "no such file", which the kernel may cache while the sandbox is watched
        assert not (t / "workspace" / "old.txt").exists() and not (t / "workspace" / "src" / "pkg").exists()
    assert ctl(t, "restore s1") == len("restore s1\n")
    assert trees(m) == before
    # what the restore brought back shows through the mount at once
    assert (t / "workspace" / "old.txt").exists() and (t / "workspace" / "src" / "pkg" / "b.py").exists()
    # through the mount at once, and the sandbox's own files still: a job changes them
    assert (t / "workspace" / "src" / "a.py").read_text() == "one\n"
    assert not (t / "workspace" / "added.txt").exists()
    code, out, err = run_job(t, "after", "echo more >> src/pkg/b.py && cat src/pkg/b.py && cat ../outputs/r.txt")
    assert (code, out) == (0, "two\nmore\nresult\n"), err
    # a restore of the same snapshot again: only what changed is copied
    assert ctl(t, "restore s1") > 0
    assert (t / "workspace" / "src" / "pkg" / "b.py").read_text() == "two\n"


def test_snapshot_is_consistent_while_a_job_writes(sandbox):
    """suite: a job appends numbered lines to a, b, c and d in turn, as fast
    as it can; in every snapshot no file is ahead of one written before it
    and no line is cut (four files: whatever order the copy takes them in,
    one written later is copied after one written earlier)."""
    m, t = sandbox
    j = mkjob(t, "writer")
    start(j, "i=0; while :; do i=$((i+1)); echo $i >> a; echo $i >> b; echo $i >> c; echo $i >> d; done")
    ws = host_data(m, "workspace")
    assert wait_until(lambda: (ws / "d").exists() and (ws / "d").stat().st_size > 2000, 20)
    for k in range(12):
        snap(t, f"s{k}")
        lines = []
        for f in "abcd":
            text = (host_snap(m, f"s{k}") / f).read_text()
            assert text.endswith("\n"), f"s{k}: a line of {f} cut in two"
            lines.append(text.split())
        assert lines[0] == [str(i) for i in range(1, len(lines[0]) + 1)], f"s{k}: a is not 1..n"
        for f, (before, after) in zip("bcd", zip(lines, lines[1:])):
            assert after == before[:len(after)], f"s{k}: {f} is ahead of the file written before it"
        assert len(lines[0]) - len(lines[3]) <= 1, f"s{k}: {[len(x) for x in lines]}"
    write_ctl(j / "ctl", "kill KILL")
    wait_exit(j)


def test_unchanged_files_are_shared_between_snapshots_never_with_live_files(sandbox):
    """suite"""
    m, t = sandbox
    for i in range(20):
        (t / "workspace" / f"f{i}").write_bytes(os.urandom(64 * 1024))
    i1 = snap(t, "s1")
    with open(t / "workspace" / "f0", "ab") as f:
        f.write(b"x")
    i2 = snap(t, "s2")
    assert i2["files"] == 20 and i2["bytes"] == 20 * 64 * 1024 + 1, i2
    if i1["method"] == "reflink":  # every file shares its blocks already
        assert i2["reflinked"] == 20 and i2["bytes_shared"] == i2["bytes"], i2
    else:
        assert i2["linked"] == 19 and i2["copied"] == 1 and i2["shared_with"] == "s1", i2
        assert i2["bytes_shared"] == 19 * 64 * 1024, i2
        for i in range(1, 20):
            assert (host_snap(m, "s1") / f"f{i}").stat().st_ino == \
                (host_snap(m, "s2") / f"f{i}").stat().st_ino
    for i in range(20):
        live = (host_data(m, "workspace") / f"f{i}").stat()
        assert live.st_nlink == 1, f"f{i}: a live file linked to a snapshot"
        assert live.st_ino not in ((host_snap(m, s) / f"f{i}").stat().st_ino for s in ("s1", "s2"))
    # a job changing a file in place never reaches a snapshot
    old = (host_snap(m, "s2") / "f5").read_bytes()
    code, _, err = run_job(t, "inplace", "printf zzzz | dd of=f5 bs=1 seek=0 conv=notrunc 2>/dev/null")
    assert code == 0, err
    assert (host_snap(m, "s1") / "f5").read_bytes() == old
    assert (host_snap(m, "s2") / "f5").read_bytes() == old
    assert (t / "snapshots" / "s1" / "workspace" / "f5").read_bytes() == old


def test_writing_inside_a_snapshot_is_erofs(sandbox):
    """suite"""
    m, t = sandbox
    (t / "workspace" / "f").write_text("f\n")
    os.mkdir(t / "workspace" / "d")
    snap(t, "s")
    s = t / "snapshots" / "s"
    w = s / "workspace"
    expect_errno(lambda: open(w / "f", "w"), errno.EROFS)
    expect_errno(lambda: open(w / "f", "a"), errno.EROFS)
    expect_errno(lambda: open(w / "new", "w"), errno.EROFS)
    expect_errno(lambda: os.truncate(w / "f", 0), errno.EROFS)
    expect_errno(lambda: os.chmod(w / "f", 0o600), errno.EROFS)
    expect_errno(lambda: os.utime(w / "f", (1, 1)), errno.EROFS)
    expect_errno(lambda: os.unlink(w / "f"), errno.EROFS)
    expect_errno(lambda: os.rename(w / "f", w / "g"), errno.EROFS)
    expect_errno(lambda: os.mkdir(w / "e"), errno.EROFS)
    expect_errno(lambda: os.rmdir(w / "d"), errno.EROFS)
    expect_errno(lambda: os.symlink("f", w / "l"), errno.EROFS)
    expect_errno(lambda: os.setxattr(w / "f", "user.k", b"v"), errno.EROFS)
    expect_errno(lambda: os.mkdir(s / "x"), errno.EROFS)
    expect_errno(lambda: open(s / "info", "w"), errno.EROFS)
    assert (w / "f").read_text() == "f\n"
    # a link or a move from the live tree into a snapshot is refused too
    expect_errno(lambda: os.link(t / "workspace" / "f", w / "h"), errno.EROFS, errno.EXDEV, errno.EPERM)
    expect_errno(lambda: os.rename(t / "workspace" / "f", w / "h"), errno.EXDEV, errno.EROFS, errno.EPERM)
    assert tree(host_snap(m, "s")).keys() == {"f", "d"}


# --------------------------------------------------------------------------
# names, limits, errnos


def test_names_limits_and_errnos(sbxfs):
    m = sbxfs(config={"snapshots": {"max_per_thread": 2}})
    assert read_json(m.mnt / ".config")["snapshots"] == {"max_per_thread": 2}
    t = acquire(m)
    (t / "workspace" / "f").write_text("f\n")
    for bad in ("a b", "x" * 65, ".hidden", "a.b", "é"):
        expect_errno(lambda: os.mkdir(t / "snapshots" / bad), errno.EINVAL)
    assert names(t) == []
    assert "invalid name" in m.log
    snap(t, "one")
    expect_errno(lambda: os.mkdir(t / "snapshots" / "one"), errno.EEXIST)
    snap(t, "two")
    expect_errno(lambda: os.mkdir(t / "snapshots" / "three"), errno.EDQUOT)
    assert "max_per_thread is 2" in m.log
    assert names(t) == ["one", "two"]
    assert not [n for n in os.listdir(host_thread(m) / "snapshots") if n.startswith(".")], "a failed take left files"
    # restore: bad names, missing snapshots, missing threads
    for bad in ("restore", "restore ", "restore a b", "restore ../x", "restore a/b/c", "restore /one",
                "restore one/", "restore .one", "restoreone", "freeze now", "thaw x"):
        expect_errno(lambda: ctl(t, bad), errno.EINVAL)
    expect_errno(lambda: ctl(t, "restore nope"), errno.ENOENT)
    expect_errno(lambda: ctl(t, "restore other/one"), errno.ENOENT)
    assert "has no snapshot nope" in m.log
    # rmdir: gone at once, the name free again; a missing one is ENOENT
    os.rmdir(t / "snapshots" / "one")
    assert names(t) == ["two"]
    expect_errno(lambda: os.rmdir(t / "snapshots" / "one"), errno.ENOENT)
    expect_errno(lambda: os.rmdir(t / "snapshots" / "bad name"), errno.ENOENT)
    (t / "workspace" / "f").write_text("g\n")
    snap(t, "one")
    assert (t / "snapshots" / "one" / "workspace" / "f").read_text() == "g\n"
    assert wait_until(lambda: not [n for n in os.listdir(host_thread(m) / "snapshots") if n.startswith(".")], 10)
    # files in snapshots/ itself are not the user's to make
    expect_errno(lambda: open(t / "snapshots" / "file", "w"), errno.EPERM, errno.EACCES)
    # a job running: restore is EBUSY and changes nothing
    j = mkjob(t, "busy")
    start(j, "sleep 60")
    (t / "workspace" / "f").write_text("live\n")
    expect_errno(lambda: ctl(t, "restore two"), errno.EBUSY)
    assert (t / "workspace" / "f").read_text() == "live\n"
    assert "a job is running" in m.log
    write_ctl(j / "ctl", "kill KILL")
    wait_exit(j)
    ctl(t, "restore two")
    assert (t / "workspace" / "f").read_text() == "f\n"


def test_remote_providers_answer_eopnotsupp(sbxfs, tmp_path):
    from osfake import OpenSandboxFake
    srv = OpenSandboxFake(tmp_path / "fake")
    srv.start()
    try:
        m = sbxfs(config={"use": "opensandbox", "domain": f"127.0.0.1:{srv.port}", "request_timeout": 5,
                          "ready_timeout": 20, "sandbox_timeout": 600})
        t = m.mnt / "alice" / "t"
        os.makedirs(t)
        expect_errno(lambda: os.mkdir(t / "snapshots" / "s"), errno.EOPNOTSUPP)
        assert names(t) == []
        expect_errno(lambda: ctl(t, "freeze"), errno.EOPNOTSUPP)
        expect_errno(lambda: ctl(t, "restore s"), errno.ENOENT)
        assert "the opensandbox provider cannot do it" in m.log
        assert sbxutil.status(t)["frozen"] is False
        m.stop()
    finally:
        srv.stop()


# --------------------------------------------------------------------------
# forks, lifetime, crashes


def test_fork_into_another_thread_and_run_a_job_there(sbxfs):
    m = sbxfs()
    t1 = acquire(m, "alice", "t1")
    code, _, err = run_job(t1, "mk", "echo from-t1 > f && mkdir d && echo y > d/y && ln -s f lnk")
    assert code == 0, err
    snap(t1, "base")
    t2 = acquire(m, "alice", "t2")
    (t2 / "workspace" / "mine").write_text("t2's own\n")
    assert ctl(t2, "restore t1/base") > 0
    uid1, uid2 = sbxutil.status(t1)["uid"], sbxutil.status(t2)["uid"]
    assert uid1 != uid2
    assert tree(host_data(m, "workspace", thread="t2")) == tree(host_data(m, "workspace", thread="t1"))
    for p in host_data(m, "workspace", thread="t2").rglob("*"):
        assert os.lstat(p).st_uid == uid2, f"{p} is not t2's sandbox's"
    code, out, err = run_job(t2, "use", "cat f && echo more >> f && cat d/y && id -u && ls")
    assert code == 0, err
    assert out == f"from-t1\ny\n{uid2}\nd\nf\nlnk\n"
    assert (t1 / "workspace" / "f").read_text() == "from-t1\n"  # the source did not change
    assert names(t2) == []  # the snapshot stays t1's
    # a thread of another user is not reachable: only [THREAD/]NAME of the same user
    os.makedirs(m.mnt / "bob" / "b1")
    expect_errno(lambda: ctl(m.mnt / "bob" / "b1", "restore t1/base"), errno.ENOENT)


@pytest.mark.timeout_s(150)
def test_snapshots_survive_release_destroy_and_kill9(sbxfs):
    m = sbxfs()
    t = acquire(m)
    (t / "workspace" / "f").write_text("v1\n")
    snap(t, "keep")
    (t / "workspace" / "f").write_text("v2\n")
    os.rmdir(t)  # release
    os.mkdir(t)
    assert names(t) == ["keep"]
    m.stop()  # unmount: every sandbox destroyed
    m.start()
    os.makedirs(t)
    assert names(t) == ["keep"]
    assert (t / "snapshots" / "keep" / "workspace" / "f").read_text() == "v1\n"
    snap(t, "second")
    m.kill9()
    m.restart()
    os.makedirs(t, exist_ok=True)
    assert names(t) == ["keep", "second"]
    assert read_json(t / "snapshots" / "keep" / "info")["files"] == 1
    ctl(t, "restore keep")
    assert (t / "workspace" / "f").read_text() == "v1\n"


def _big_tree(t, files=200):
    code, _, err = run_job(t, "big", f"for i in $(seq 1 {files}); do head -c 1048576 /dev/urandom > f$i; done",
                           timeout=120)
    assert code == 0, err


@pytest.mark.timeout_s(170)
def test_kill9_during_a_restore_is_finished_at_the_next_start(sbxfs):
    m = sbxfs()
    t = acquire(m)
    _big_tree(t)
    snap(t, "s")
    want = tree(host_snap(m, "s"))
    code, _, err = run_job(t, "wipe", "rm f* && echo extra > extra")
    assert code == 0, err
    journal = host_thread(m) / "restore.json"
    th = threading.Thread(target=lambda: subprocess.run(["sh", "-c", f"echo 'restore s' > {t / 'ctl'}"],
                                                        capture_output=True, timeout=60), daemon=True)
    th.start()
    assert wait_until(journal.exists, 30, interval=0.001), "the restore wrote no journal"
    m.kill9()
    done = len(list(host_data(m, "workspace").glob("f*")))
    assert journal.exists() and done < 200, f"the restore ended ({done} files) before the kill"
    th.join(30)
    m.restart()
    assert not journal.exists(), "the restore was not finished at start"
    assert tree(host_data(m, "workspace")) == want
    assert "restore of s was interrupted: finishing it" in m.log
    assert not [p for p in host_data(m, "workspace").iterdir() if p.name.startswith(".sbxfs-")]
    # the sandbox came back thawed, and works
    os.makedirs(t, exist_ok=True)
    code, out, _ = run_job(t, "after", "ls | wc -l")
    assert (code, out) == (0, "200\n")


@pytest.mark.timeout_s(170)
def test_kill9_during_a_take_leaves_no_snapshot(sbxfs):
    m = sbxfs()
    t = acquire(m)
    _big_tree(t)
    tmp = host_thread(m) / "snapshots" / ".tmp-s"
    th = threading.Thread(target=lambda: subprocess.run(["mkdir", str(t / "snapshots" / "s")], capture_output=True,
                                                        timeout=60), daemon=True)
    th.start()
    assert wait_until(tmp.exists, 30, interval=0.001), "no take in progress seen"
    m.kill9()
    th.join(30)
    m.restart()
    assert not tmp.exists()
    os.makedirs(t, exist_ok=True)
    assert names(t) in ([], ["s"])
    if names(t) == []:
        snap(t, "s")
    assert tree(host_snap(m, "s")) == tree(host_data(m, "workspace"))


# --------------------------------------------------------------------------
# suite: freeze and thaw


def test_freeze_stops_a_busy_loop_and_thaw_resumes_it(sandbox):
    """suite"""
    m, t = sandbox
    j = mkjob(t, "spin")
    start(j, "i=0; while :; do i=$((i+1)); [ $((i % 5000)) = 0 ] && echo $i > progress; done")
    progress = host_data(m, "workspace") / "progress"
    assert wait_until(progress.exists, 10)
    pid = jstatus(j)["pid"]
    cpu = (lambda: cpu_ticks(pid)) if isinstance(pid, int) and sbxutil.pid_alive(pid) else None
    assert ctl(t, "freeze") == len("freeze\n")
    st = sbxutil.status(t)
    assert st["state"] == "frozen" and st["frozen"] is True, st
    js = jstatus(j)
    assert js["state"] == "running" and js["frozen"] is True, js
    p1, c1 = progress.read_text(), cpu() if cpu else None
    time.sleep(1.5)
    assert progress.read_text() == p1, "the loop ran while frozen"
    if cpu:
        assert cpu() == c1, "the loop's CPU time grew while frozen"
    assert ctl(t, "freeze") > 0  # twice: nothing changes
    # no job starts in a frozen sandbox
    j2 = mkjob(t, "later")
    expect_errno(lambda: write_ctl(j2 / "cmd", "true\n"), errno.EBUSY)
    assert ctl(t, "thaw") == len("thaw\n")
    assert wait_until(lambda: progress.read_text() != p1, 10), "thaw did not resume the loop"
    if cpu:
        assert wait_until(lambda: cpu() > c1 + 5, 10), "thaw did not give the loop its CPU back"
    st = sbxutil.status(t)
    assert st["state"] == "active" and st["frozen"] is False, st
    assert jstatus(j)["frozen"] is False
    assert ctl(t, "thaw") > 0
    code, out, _ = run_job(t, "now", "echo ok")
    assert (code, out) == (0, "ok\n")
    write_ctl(j / "ctl", "kill KILL")
    wait_exit(j)


def test_a_frozen_jobs_timeout_does_not_run(sbxfs):
    """suite: timeout 3 s, frozen 5 s: still running while frozen, and
    timed out once it has run 3 s in all."""
    m = sbxfs(config={"bash_command_timeout": 3})
    t = acquire(m)
    j = mkjob(t, "slow")
    start(j, "echo started; sleep 60; echo never")
    assert wait_until(lambda: jstatus(j)["stdout_bytes"] >= 8, 10)
    ctl(t, "freeze")
    time.sleep(5)
    st = jstatus(j)
    assert st["state"] == "running" and st["frozen"], st
    ctl(t, "thaw")
    assert jstatus(j)["state"] == "running"
    wait_exit(j, 30)
    st = jstatus(j)
    assert st["state"] == "timed_out", st
    assert read_text(j / "stdout") == "started\n"


def test_rmdir_of_a_frozen_sandbox_thaws_it(sandbox):
    """suite: what a job left behind runs on in the warm sandbox."""
    m, t = sandbox
    code, _, err = run_job(t, "bg", "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > beat; sleep 0.1; done'"
                           " </dev/null >/dev/null 2>&1 &")
    assert code == 0, err
    beat = host_data(m, "workspace") / "beat"
    assert wait_until(beat.exists, 10)
    ctl(t, "freeze")
    b = beat.read_text()
    time.sleep(1)
    assert beat.read_text() == b
    os.rmdir(t)
    assert wait_until(lambda: beat.read_text() != b, 10), "the released sandbox stayed frozen"
    assert "released: thawed" in m.log
    os.mkdir(t)
    assert sbxutil.status(t)["frozen"] is False
    try:
        ctl(t, "kill")
    except OSError as e:  # aio: the AIO server is the sandbox's own process
        assert e.errno == errno.EOPNOTSUPP


# --------------------------------------------------------------------------
# hostile content


@pytest.mark.timeout_s(170)
def test_hostile_content_is_never_followed_opened_or_filled(sbxfs, tmp_path):
    m = sbxfs()
    t = acquire(m)
    sentinel = tmp_path / "sentinel"
    sentinel.mkdir()
    (sentinel / "keep").write_text("host file\n")
    os.chmod(tmp_path, 0o755)
    shadow = os.stat("/etc/shadow")
    code, _, err = run_job(t, "plant",
                           "ln -s /etc/shadow shadow && ln -s ../../../../../.. up && "
                           f"ln -s {sentinel} tohost && mkdir dd && echo in > dd/x && "
                           "mkfifo fifo && (exec sh -c 'echo through > fifo' >/dev/null 2>&1 &) && "
                           "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.bind('sock')\" && "
                           "truncate -s 1T sparse && printf 'data' | dd of=sparse bs=1 seek=4096 conv=notrunc 2>/dev/null"
                           " && printf n > \"$(printf 'new\\nline')\"")
    assert code == 0, err
    ws = host_data(m, "workspace")
    # a device node (no sandbox can make one; root on the host can): counted, never copied
    os.mknod(ws / "dev", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    free0 = shutil.disk_usage(ws).free
    info = snap(t, "s")
    assert info["specials"] == 2 and info["symlinks"] == 3 and info["skipped_devices"] == 1, info
    assert not os.path.lexists(host_snap(m, "s") / "dev")
    s = host_snap(m, "s")
    assert stat.S_ISFIFO(os.lstat(s / "fifo").st_mode) and stat.S_ISSOCK(os.lstat(s / "sock").st_mode)
    assert os.readlink(s / "shadow") == "/etc/shadow" and os.readlink(s / "up") == "../../../../../.."
    assert (s / "sparse").stat().st_size == 1 << 40 and (s / "sparse").stat().st_blocks * 512 < 4 * MiB
    assert (s / "new\nline").read_text() == "n"
    # through the mount: listed, never followed (nosymfollow)
    sw = t / "snapshots" / "s" / "workspace"
    assert os.readlink(sw / "shadow") == "/etc/shadow"
    expect_errno(lambda: open(sw / "shadow"), errno.ELOOP)
    assert "new\nline" in os.listdir(sw)
    # nobody opened the FIFO: its writer is still waiting for a reader
    code, out, _ = run_job(t, "reader", "timeout 10 cat fifo")
    assert (code, out) == (0, "through\n"), "the FIFO's writer was released: something opened it"
    # the sandbox swaps what the snapshot holds for links to the host
    code, _, err = run_job(t, "swap", f"rm -rf dd fifo sparse && ln -s {sentinel} dd && ln -s /etc fifo && "
                           "ln -s /etc/shadow sparse && rm \"$(printf 'new\\nline')\"")
    assert code == 0, err
    (t / "workspace" / "again").write_text("x")
    # names like the restore's own temporary ones, one a link to a host file
    for k in range(1, 20):
        (t / "workspace" / f".sbxfs-snap.{k:016x}.{k}").write_text("planted")
    os.symlink("/etc/passwd", t / "workspace" / ".sbxfs-snap.0000000000000000.1")
    passwd = os.stat("/etc/passwd")
    ctl(t, "restore s")
    assert os.stat("/etc/passwd").st_mtime_ns == passwd.st_mtime_ns
    assert not [n for n in os.listdir(ws) if n.startswith(".sbxfs-")]
    assert sorted(os.listdir(sentinel)) == ["keep"] and (sentinel / "keep").read_text() == "host file\n"
    assert os.stat("/etc/shadow").st_mtime_ns == shadow.st_mtime_ns and os.path.isdir("/etc")
    assert stat.S_ISDIR(os.lstat(ws / "dd").st_mode) and (ws / "dd" / "x").read_text() == "in\n"
    assert stat.S_ISFIFO(os.lstat(ws / "fifo").st_mode)
    assert stat.S_ISREG(os.lstat(ws / "sparse").st_mode) and (ws / "sparse").stat().st_blocks * 512 < 4 * MiB
    assert (ws / "new\nline").read_text() == "n" and not (ws / "again").exists()
    assert not os.path.lexists(ws / "dev"), "the snapshot has no device: the restore removes it"
    assert free0 - shutil.disk_usage(ws).free < 256 * MiB, "a sparse file was filled"
    assert tree(ws) == tree(s)


@pytest.mark.timeout_s(170)
def test_100000_empty_files(sbxfs):
    m = sbxfs()
    t = acquire(m)
    code, _, err = run_job(t, "many", "mkdir many && cd many && seq 1 100000 | xargs touch", timeout=120)
    assert code == 0, err
    info = snap(t, "s")
    assert info["files"] == 100000, info
    code, _, err = run_job(t, "wipe", "rm -rf many && mkdir many && touch many/other", timeout=120)
    assert code == 0, err
    ctl(t, "restore s")
    got = os.listdir(host_data(m, "workspace") / "many")
    assert len(got) == 100000 and "other" not in got and "100000" in got
    info2 = snap(t, "s2")
    assert info2["files"] == 100000


# --------------------------------------------------------------------------
# XFS: reflinks


@pytest.fixture
def xfs_dir(tmp_path):
    """A loop-mounted XFS image (reflinks), unmounted after the daemon."""
    if not shutil.which("mkfs.xfs"):
        pytest.fail("mkfs.xfs is missing: `make deps` installs xfsprogs")
    img, mnt = tmp_path / "xfs.img", tmp_path / "xfs"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(1200 * MiB)
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(img)], check=True, timeout=60)
    subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True, timeout=60)
    os.chmod(mnt, 0o755)
    os.chmod(tmp_path, 0o755)
    yield mnt
    # the conftest's teardown ends what names its own state_dir; this one is
    # here: a daemon that died leaves its sandboxes (bwrap, pasta) holding it
    for pid in sbxutil.procs_matching(mnt):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sbxutil.remove_sandbox_cgroups(mnt / "state")
    for _ in range(50):
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=60).returncode == 0:
            break
        time.sleep(0.2)
    else:
        subprocess.run(["umount", "-l", str(mnt)], timeout=60)


def test_xfs_state_dir_snapshots_share_blocks(xfs_dir, sbxfs):
    m = sbxfs(config={"state_dir": str(xfs_dir / "state")})
    t = acquire(m)
    code, _, err = run_job(t, "data", "for i in 1 2 3 4; do head -c 16777216 /dev/urandom > f$i; done && echo s > small")
    assert code == 0, err
    free0 = os.statvfs(xfs_dir).f_bfree * os.statvfs(xfs_dir).f_frsize
    info = snap(t, "s1")
    free1 = os.statvfs(xfs_dir).f_bfree * os.statvfs(xfs_dir).f_frsize
    assert info["method"] == "reflink" and info["reflinked"] == 5, info
    assert info["bytes_shared"] == info["bytes"] == 4 * 16 * MiB + 2, info
    assert free0 - free1 < 8 * MiB, f"a reflinked snapshot of 64 MiB took {(free0 - free1) / MiB:.1f} MiB"
    code, _, err = run_job(t, "change", "head -c 4096 /dev/urandom | dd of=f1 conv=notrunc 2>/dev/null && rm f2")
    assert code == 0, err
    want = tree(host_snap(m, "s1"))
    ctl(t, "restore s1")
    assert tree(host_data(m, "workspace")) == want
    free2 = os.statvfs(xfs_dir).f_bfree * os.statvfs(xfs_dir).f_frsize
    assert free1 - free2 < 8 * MiB, "the restore copied instead of sharing blocks"
    m.stop()


# --------------------------------------------------------------------------
# users: a mapped account does it all through the mount; another gets EACCES


@pytest.mark.timeout_s(150)
def test_a_mapped_user_takes_reads_and_restores_snapshots(sbxfs, accounts):
    (a, ua), (b, ub) = accounts
    m = sbxfs(config={"users": {a: ua, b: ub}, "allow_other": True})
    t = m.mnt / a / "t1"
    s = t / "snapshots" / "s"
    res = as_user(ua, [("makedirs", t),
                       ("write", t / "workspace" / "f", "v1\n"),
                       ("mkdir", s),
                       ("read", s / "workspace" / "f"),
                       ("write", t / "workspace" / "f", "v2\n"),
                       ("write", t / "ctl", "restore s\n"),
                       ("read", t / "workspace" / "f"),
                       ("listdir", t / "snapshots"),
                       ("write", s / "workspace" / "new", "x"),
                       ("unlink", s / "workspace" / "f")])
    assert all("ok" in r for r in res[:8]), res
    assert res[3]["ok"] == "v1\n" and res[6]["ok"] == "v1\n" and res[7]["ok"] == ["s"], res
    assert res[8].get("errno") == "EROFS" and res[9].get("errno") == "EROFS", res
    assert os.stat(s / "workspace" / "f").st_uid == ua  # shown as the user's
    assert os.stat(m.workspace_data(a, "t1") / "f").st_uid == ua
    res = as_user(ub, [("listdir", t / "snapshots"), ("read", s / "info"), ("mkdir", t / "snapshots" / "x"),
                       ("write", t / "ctl", "restore s\n")])
    assert all(r.get("errno") == "EACCES" for r in res), res
    assert names(t) == ["s"]
