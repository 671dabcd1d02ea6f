# SPDX-License-Identifier: MIT
"""A DeerFlow thread keeps its files when its deployment switches to sbxfs
(issue 25 item 3): `sbxfs --import-deerflow DIR` moves every thread's
user-data/{workspace,uploads,outputs} of DeerFlow's base dir into state_dir
(rename on one file system: nothing copied; a copy across file systems),
and the thread's first sandbox owns them (the takeover at acquire gives the
tree to the sandbox's uid).  What cannot be moved safely is left with a
reason: a thread a DeerFlow sandbox container still mounts, a thread that
already has files in state_dir, a symlink, names sbxfs does not allow.
DeerFlow's containers are never touched."""

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import dockerutil
import sbxutil
from conftest import SBXFS_BIN, TMP_ROOT
from sbxutil import read_text

sys.path.insert(0, str(Path(__file__).resolve().parent / "fakes"))
from conftest_docker_example import docker_images  # noqa: E402,F401

DF_UID = 4242  # the uid DeerFlow's gateway or sandboxes wrote as


def deerflow_thread(base, user, thread, files, uid=DF_UID):
    """DeerFlow's layout (reference §5.5, §6.2): base/users/U/threads/T/user-data/D."""
    root = base / "users" / user / "threads" / thread / "user-data"
    for d in ("workspace", "uploads", "outputs"):
        (root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(root / d, 0o777)  # DeerFlow makes them 0777
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    for dirpath, dirs, names in os.walk(base / "users"):
        for n in dirs + names:
            os.lchown(os.path.join(dirpath, n), uid, uid)
    return root


def run_import(inst, base):
    r = subprocess.run([str(SBXFS_BIN), "-c", str(inst.conf), "--import-deerflow", str(base)],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def inodes(root):
    out = {}
    for dirpath, dirs, names in os.walk(root):
        for n in dirs + names:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = os.lstat(p).st_ino
    return out


def job(sbx, name, cmd, timeout=30):
    j = sbx / "jobs" / name
    os.mkdir(j)
    with open(j / "cmd", "w") as f:
        f.write(cmd)
    r = subprocess.run(["cat", str(j / "exit")], capture_output=True, text=True, timeout=timeout)
    return int(r.stdout), read_text(j / "stdout"), read_text(j / "stderr")


@pytest.fixture
def base():
    d = Path(tempfile.mkdtemp(prefix="deerflow-base-", dir=TMP_ROOT))
    yield d
    subprocess.run(["rm", "-rf", "--one-file-system", str(d)], timeout=60)


@pytest.mark.timeout_s(120)
def test_import_moves_threads_and_the_first_sandbox_owns_them(sbxfs, base):
    outside = base / "gateway-secret.txt"  # a file of DeerFlow's host, not of the thread
    outside.write_text("not the sandbox's\n")
    os.chown(outside, DF_UID, DF_UID)
    src = deerflow_thread(base, "alice", "t1", {
        "workspace/src/calc.sh": b"echo 1\n", "workspace/README.md": b"# notes\n",
        "uploads/data.csv": b"a,b\n1,2\n", "outputs/report.txt": b"done\n"})
    os.symlink("src/calc.sh", src / "workspace" / "calc-link")
    os.lchown(src / "workspace" / "calc-link", DF_UID, DF_UID)
    os.link(outside, src / "workspace" / "linked.txt")  # a hard link to a file outside the thread
    os.mknod(src / "workspace" / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    deerflow_thread(base, "bob", "t-2", {"workspace/b.txt": b"bob\n"})
    for skipped in ("acp-workspace", "skills_view"):
        (base / "users" / "alice" / "threads" / "t1" / skipped).mkdir()
    before = {d: inodes(src / d) for d in ("workspace", "uploads", "outputs")}
    tops = {d: os.stat(src / d).st_ino for d in ("workspace", "uploads", "outputs")}

    m = sbxfs(start=False)
    rc, out, err = run_import(m, base)
    assert rc == 0, (out, err)
    assert sorted(out.splitlines()) == ["alice/t1: workspace moved, uploads moved, outputs moved",
                                        "bob/t-2: workspace moved, uploads moved, outputs moved"], out
    assert "2 threads found" in err and "6 directories moved" in err, err
    dst = m.thread_data("alice", "t1") / "user-data"
    for d in ("workspace", "uploads", "outputs"):
        assert not (src / d).exists(), f"{d} is still in DeerFlow's base dir"
        assert os.stat(dst / d).st_ino == tops[d], "not renamed: copied"
        assert inodes(dst / d) == before[d], "the same inodes: nothing was copied"
    # DeerFlow's own files stay where they were
    assert (base / "users" / "alice" / "threads" / "t1" / "acp-workspace").is_dir()

    # the first sandbox of the thread finds its files, owned by its uid
    m.start()
    t = m.mnt / "alice" / "t1"
    os.makedirs(t)
    m.init_pid(t)
    uid = sbxutil.status(t)["uid"]
    for p in ("workspace", "workspace/src", "workspace/src/calc.sh", "workspace/README.md", "uploads/data.csv",
              "outputs/report.txt"):
        st = os.lstat(dst / p)
        assert st.st_uid == uid, f"{p} belongs to {st.st_uid}, not the sandbox's uid {uid}"
        assert not st.st_mode & 0o022, f"{p} is still writable by group or others: {oct(st.st_mode)}"
    assert os.lstat(dst / "workspace" / "calc-link").st_uid == uid
    # a hard link to a file outside, and a device, are left as they were
    assert os.stat(outside).st_uid == DF_UID and outside.read_text() == "not the sandbox's\n"
    assert os.lstat(dst / "workspace" / "null").st_uid == DF_UID, "a device was given to the sandbox"
    assert "1 with several links, 1 devices" in m.log, m.log[-3000:]
    assert read_text(t / "workspace" / "src" / "calc.sh") == "echo 1\n"
    assert read_text(t / "uploads" / "data.csv") == "a,b\n1,2\n"
    code, out, err = job(t, "use", "cat ../uploads/data.csv; echo 'echo 2' >> src/calc.sh; sh src/calc.sh; "
                                   "echo new > ../outputs/new.txt; echo x > linked.txt")
    assert out == "a,b\n1,2\n1\n2\n" and code != 0 and "linked.txt" in err, (code, out, err)
    assert (dst / "outputs" / "new.txt").read_text() == "new\n"
    assert outside.read_text() == "not the sandbox's\n", "the sandbox wrote through a hard link"
    # the mount's user can change them too (no permission mismatch, DESIGN §5)
    with open(t / "outputs" / "report.txt", "a") as f:
        f.write("checked\n")
    # the takeover ran once: a release and reclaim does not walk again
    walks = m.log.count("was uid")
    os.rmdir(t)
    os.mkdir(t)
    assert m.log.count("was uid") == walks
    # bob's thread too
    os.makedirs(m.mnt / "bob" / "t-2")
    assert read_text(m.mnt / "bob" / "t-2" / "workspace" / "b.txt") == "bob\n"


@pytest.mark.timeout_s(120)
def test_import_leaves_what_it_cannot_move_and_says_why(sbxfs, base):
    deerflow_thread(base, "alice", "keep", {"workspace/k.txt": b"k\n"})
    deerflow_thread(base, "alice", "taken", {"workspace/new.txt": b"deerflow's\n", "uploads/u.txt": b"u\n"})
    deerflow_thread(base, "alice", "bad.name", {"workspace/x": b"x\n"})
    deerflow_thread(base, "user.dot", "t", {"workspace/x": b"x\n"})
    linked = base / "users" / "alice" / "threads" / "linked"
    linked.mkdir(parents=True)
    os.symlink("/etc", linked / "user-data")
    m = sbxfs(start=False)
    # state_dir already has files for alice/taken's workspace: never merged
    own = m.thread_data("alice", "taken") / "user-data" / "workspace"
    own.mkdir(parents=True)
    (own / "mine.txt").write_text("sbxfs's\n")
    rc, out, err = run_import(m, base)
    assert rc == 1, (out, err)
    lines = dict(ln.split(": ", 1) for ln in out.splitlines())
    assert lines["alice/keep"] == "workspace moved, uploads moved, outputs moved", out
    assert lines["alice/taken"] == "uploads moved, outputs moved", out
    assert "alice/taken: workspace already has files in state_dir: left (never merged)" in err, err
    assert (own / "mine.txt").read_text() == "sbxfs's\n" and not (own / "new.txt").exists()
    assert (base / "users/alice/threads/taken/user-data/workspace/new.txt").read_text() == "deerflow's\n"
    assert "alice/bad.name: not a thread name" in err and "user user.dot: not a user name" in err, err
    assert "alice/linked: user-data:" in err, err
    assert not (m.thread_data("alice", "linked")).exists(), "a symlinked user-data was followed"
    assert (base / "users/alice/threads/bad.name/user-data/workspace/x").exists()
    # a second run finds nothing more to move and changes nothing
    rc2, out2, err2 = run_import(m, base)
    assert rc2 == 1 and "alice/keep: nothing to import" in out2, (out2, err2)
    # refused outright: a daemon serving the state_dir, DIR = state_dir, no users/ in DIR
    m.start()
    rc, out, err = run_import(m, base)
    assert rc == 1 and "holds" in err and "refusing" in err, err
    m.stop()
    rc, out, err = run_import(m, m.state_dir)
    assert rc == 1 and "overlap" in err, err
    empty = base / "empty"
    empty.mkdir()
    rc, out, err = run_import(m, empty)
    assert rc == 1 and "users" in err, err
    # the command line: no mountpoint beside it
    r = subprocess.run([str(SBXFS_BIN), "--import-deerflow", str(base), str(m.mnt)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "--import-deerflow" in r.stderr, r.stderr


@pytest.mark.timeout_s(120)
def test_import_across_file_systems_copies_then_removes(sbxfs, base):
    """DeerFlow's base dir on another file system (a tmpfs here): the tree is
    copied (modes, times and symlinks kept; FIFOs and sockets left out) and
    DeerFlow's copy removed only once the copy is whole."""
    other = base / "other-fs"
    other.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(other)], check=True, timeout=30)
    try:
        src = deerflow_thread(other, "alice", "t1", {"workspace/a/b.txt": b"b\n", "outputs/o.bin": bytes(range(256))})
        os.symlink("a/b.txt", src / "workspace" / "lnk")
        os.mkfifo(src / "workspace" / "fifo")
        os.chmod(src / "workspace" / "a" / "b.txt", 0o640)
        os.utime(src / "workspace" / "a" / "b.txt", (1000000000, 1000000000))
        m = sbxfs(start=False)
        rc, out, err = run_import(m, other)
        assert rc == 0, (out, err)
        assert out.splitlines() == ["alice/t1: workspace copied (FIFOs, sockets and devices left out), "
                                    "uploads copied, outputs copied"], out
        dst = m.thread_data("alice", "t1") / "user-data"
        assert (dst / "workspace" / "a" / "b.txt").read_text() == "b\n"
        st = os.stat(dst / "workspace" / "a" / "b.txt")
        assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_mtime == 1000000000, st
        assert os.readlink(dst / "workspace" / "lnk") == "a/b.txt"
        assert not os.path.lexists(dst / "workspace" / "fifo")
        assert (dst / "outputs" / "o.bin").read_bytes() == bytes(range(256))
        assert not (src / "workspace").exists() and not (src / "outputs").exists(), "DeerFlow's copy stayed"
        m.start()
        t = m.mnt / "alice" / "t1"
        os.makedirs(t)
        m.init_pid(t)
        assert os.stat(dst / "workspace" / "a" / "b.txt").st_uid == sbxutil.status(t)["uid"]
        assert read_text(t / "workspace" / "a" / "b.txt") == "b\n"
    finally:
        subprocess.run(["umount", "-l", str(other)], timeout=30)


@pytest.mark.timeout_s(180)
def test_a_thread_a_deerflow_container_still_mounts_is_left_and_the_container_untouched(sbxfs, base,
                                                                                          docker_images):
    """DeerFlow's AIO sandbox container of a thread bind-mounts its
    user-data directories (reference §5.5): while it runs, moving them would
    move them under it.  The import leaves that thread (naming the pid),
    moves the others, and never touches the container."""
    busy = deerflow_thread(base, "alice", "busy", {"workspace/w.txt": b"in use\n"})
    deerflow_thread(base, "alice", "idle", {"workspace/i.txt": b"idle\n"})
    cid = dockerutil.docker(
        "run", "-d", "--network", "none", "--label", dockerutil.RUN_LABEL,
        "--label", "deerflow.role=sandbox", "--label", "deerflow.sandbox_id=0123456789abcdef",
        "--name", f"deer-flow-sandbox-{dockerutil.RUN_ID[-12:]}",
        "--mount", f"type=bind,src={busy / 'workspace'},dst=/mnt/user-data/workspace",
        dockerutil.BUSYBOX_IMAGE, "sleep", "300").stdout.strip()
    try:
        before = dockerutil.docker("inspect", "-f", "{{.State.Pid}} {{.State.StartedAt}}", cid).stdout
        m = sbxfs(start=False)
        rc, out, err = run_import(m, base)
        assert rc == 1, (out, err)
        assert "alice/idle: workspace moved, uploads moved, outputs moved" in out, out
        assert "alice/busy: its files are mounted by pid" in err and "drain DeerFlow first" in err, err
        assert (busy / "workspace" / "w.txt").read_text() == "in use\n"
        assert not m.thread_data("alice", "busy").exists()
        # the container runs on, the same one, its files where it had them
        assert dockerutil.docker("inspect", "-f", "{{.State.Pid}} {{.State.StartedAt}}", cid).stdout == before
        r = dockerutil.docker("exec", cid, "cat", "/mnt/user-data/workspace/w.txt")
        assert r.stdout == "in use\n"
        # drained: the next import moves it
        dockerutil.docker("rm", "-f", cid)
        rc, out, err = run_import(m, base)
        assert rc == 0 and "alice/busy: workspace moved" in out, (out, err)
    finally:
        dockerutil.docker("rm", "-f", cid, check=False)


@pytest.mark.timeout_s(120)
def test_state_dir_pointed_at_a_deerflow_base_dir_works_in_place(sbxfs, base):
    """The other way: state_dir is DeerFlow's base dir.  Nothing moves; the
    thread's first sandbox finds its files where DeerFlow left them and is
    given them; DeerFlow's own files beside them stay as they were."""
    src = deerflow_thread(base, "alice", "t1", {"workspace/a.txt": b"from deerflow\n", "uploads/u.txt": b"u\n"})
    (base / "users" / "alice" / "memory.json").write_text("{}")
    (base / "users" / "alice" / "threads" / "t1" / "0123456789abcdef.lock").write_text("")
    ino = os.stat(src / "workspace" / "a.txt").st_ino
    m = sbxfs(config={"state_dir": str(base)})
    t = m.mnt / "alice" / "t1"
    os.makedirs(t)
    m.init_pid(t)
    uid = sbxutil.status(t)["uid"]
    assert read_text(t / "workspace" / "a.txt") == "from deerflow\n"
    assert os.stat(src / "workspace" / "a.txt").st_ino == ino and os.stat(src / "workspace" / "a.txt").st_uid == uid
    code, out, err = job(t, "w", "echo more >> a.txt && cat a.txt ../uploads/u.txt")
    assert (code, out) == (0, "from deerflow\nmore\nu\n"), err
    assert (base / "users" / "alice" / "memory.json").read_text() == "{}"
    assert os.stat(base / "users" / "alice" / "memory.json").st_uid == 0
    # the import refuses this setup: there is nothing to move
    m.stop()
    rc, out, err = run_import(m, base)
    assert rc == 1 and "nothing to import" in err, err
