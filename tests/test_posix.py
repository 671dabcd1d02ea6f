# SPDX-License-Identifier: MIT
"""POSIX semantics of the data directories (issue 8, data path) and the
sizes of job files: each test failed on the code before the fix.

Modes as asked (the daemon's umask is 0), fstat of an open file whose name
is gone, O_DIRECT, set-id bits and setgid directories (files are created by
the sandbox's uid, not by root and then chowned), readdirplus while a job
deletes, a create that cannot be answered is undone, and job output files
that report their size."""

import errno
import grp
import json
import mmap
import os
import re
import resource
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import sbxutil
from sbxutil import expect_errno, wait_until
from test_users import SETPRIV, accounts  # noqa: F401  (accounts is a fixture)

MiB = 1 << 20


# --------------------------------------------------------------------------
# helpers


class umask:
    """with umask(0): ... sets this process's umask for the block."""

    def __init__(self, mask):
        self.mask = mask

    def __enter__(self):
        self.old = os.umask(self.mask)

    def __exit__(self, *exc):
        os.umask(self.old)


def write_ctl(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        return os.write(fd, data.encode() if isinstance(data, str) else data)
    finally:
        os.close(fd)


def start_job(sbx, name, cmd):
    j = sbx / "jobs" / name
    os.mkdir(j)
    write_ctl(j / "cmd", cmd + "\n")
    return j


def wait_job(j, timeout=60):
    r = subprocess.run(["cat", str(j / "exit")], capture_output=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def run_job(sbx, name, cmd, timeout=60):
    j = start_job(sbx, name, cmd)
    code = wait_job(j, timeout)
    out = subprocess.run(["cat", str(j / "stdout")], capture_output=True, timeout=10).stdout
    err = subprocess.run(["cat", str(j / "stderr")], capture_output=True, timeout=10).stdout
    return code, out.decode(errors="replace"), err.decode(errors="replace")


def host_mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


# --------------------------------------------------------------------------
# 1. the caller's umask is applied once


def test_umask_0_keeps_the_modes_asked_for(sandbox):
    m, t = sandbox
    ws, back = t / "workspace", m.workspace_data("alice", "t")
    with umask(0):
        os.close(os.open(ws / "f620", os.O_CREAT | os.O_WRONLY, 0o620))
        os.close(os.open(ws / "f666", os.O_CREAT | os.O_WRONLY, 0o666))
        os.mkdir(ws / "d777", 0o777)
        os.mkfifo(ws / "p666", 0o666)
    with umask(0o027):
        os.close(os.open(ws / "f640", os.O_CREAT | os.O_WRONLY, 0o666))
        os.mkdir(ws / "d750", 0o777)
    for name, mode in (("f620", 0o620), ("f666", 0o666), ("d777", 0o777), ("p666", 0o666),
                       ("f640", 0o640), ("d750", 0o750)):
        assert host_mode(ws / name) == mode, (name, oct(host_mode(ws / name)))
        assert host_mode(back / name) == mode, (name, oct(host_mode(back / name)))


def test_jobs_keep_umask_022(sandbox):
    m, t = sandbox
    code, out, err = run_job(t, "u", "umask; touch made; mkdir madedir")
    assert code == 0, err
    assert out.strip() == "0022"
    assert host_mode(t / "workspace" / "made") == 0o644
    assert host_mode(t / "workspace" / "madedir") == 0o755


# --------------------------------------------------------------------------
# 2. fstat of an open file whose name is gone


def test_open_unlink_fstat(ws):
    fd = os.open(ws / "scratch", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        os.write(fd, b"x" * 5000)
        os.unlink(ws / "scratch")
        st = os.fstat(fd)
        assert st.st_size == 5000 and st.st_nlink == 0
        os.write(fd, b"y" * 1000)  # still a working file
        assert os.fstat(fd).st_size == 6000
        assert os.pread(fd, 3, 4999) == b"xyy"
        os.ftruncate(fd, 10)
        assert os.fstat(fd).st_size == 10
    finally:
        os.close(fd)
    expect_errno(lambda: os.stat(ws / "scratch"), errno.ENOENT)
    assert os.listdir(ws) == []


def test_python_tempfile_patterns(ws):
    with tempfile.TemporaryFile(dir=ws) as f:  # mkstemp + unlink here (no O_TMPFILE on FUSE)
        f.write(b"hello world")
        f.flush()
        assert os.fstat(f.fileno()).st_size == 11
        f.seek(0)
        assert f.read() == b"hello world"
    with tempfile.NamedTemporaryFile(dir=ws) as f:
        f.write(b"abc")
        f.flush()
        assert os.stat(f.name).st_size == 3
        assert os.fstat(f.fileno()).st_nlink == 1
    with tempfile.SpooledTemporaryFile(max_size=10, dir=ws) as f:
        f.write(b"more than ten bytes")  # rolls over to a TemporaryFile
        f.seek(0)
        assert f.read() == b"more than ten bytes"
        assert os.fstat(f.fileno()).st_size == 19
    fd, name = tempfile.mkstemp(dir=ws)
    os.unlink(name)
    os.write(fd, b"z" * 100)
    assert os.fstat(fd).st_size == 100
    os.close(fd)
    assert os.listdir(ws) == []


def test_name_removed_by_a_job_is_enoent_unless_open(sandbox):
    m, t = sandbox
    ws = t / "workspace"
    (ws / "gone").write_text("a")
    (ws / "held").write_text("bb")
    assert os.stat(ws / "gone").st_size == 1  # cached by the kernel
    fd = os.open(ws / "held", os.O_RDONLY)
    try:
        code, _, err = run_job(t, "rm", "rm gone held")
        assert code == 0, err
        expect_errno(lambda: os.stat(ws / "gone"), errno.ENOENT)
        st = os.fstat(fd)
        assert st.st_nlink == 0 and st.st_size == 2
        assert os.pread(fd, 10, 0) == b"bb"
    finally:
        os.close(fd)
    expect_errno(lambda: os.stat(ws / "held"), errno.ENOENT)


def test_a_name_a_job_removed_or_moved_is_made_anew_not_written_into_the_old_file(sandbox):
    # The kernel caches names for 10 s.  When a job removes or renames a
    # file, writing its old name through the mount must make a new file, not
    # write into the removed one (lost) or the renamed one (clobbered).
    m, t = sandbox
    ws = t / "workspace"
    for i in range(3):
        for name in ("held", "moved", "linked", "plain"):
            (ws / name).write_text("old")
            assert os.stat(ws / name).st_nlink == 1  # cached by the kernel
        fd = os.open(ws / "held", os.O_RDONLY)
        code, _, err = run_job(t, f"change{i}", "rm held plain && mv moved moved.bak && ln linked linked.2 && rm linked")
        assert code == 0, err
        assert os.fstat(fd).st_nlink == 0
        os.close(fd)
        for name in ("held", "moved", "linked", "plain"):
            expect_errno(lambda: os.stat(ws / name), errno.ENOENT)
            (ws / name).write_text(f"new {i}")
        code, out, err = run_job(t, f"show{i}", "cat held moved linked plain moved.bak linked.2; rm moved.bak linked.2")
        assert code == 0, err
        assert out == f"new {i}" * 4 + "old" * 2


def test_open_of_a_name_a_running_job_removed_makes_a_new_file(sandbox):
    # While the job still runs the kernel's entry is not dropped yet (names
    # are trusted up to 1 s then, and this one up to 10 s): the daemon answers
    # an open of the removed file with ESTALE, the kernel looks again, and
    # O_CREAT makes a new file, which the job sees.
    m, t = sandbox
    ws = t / "workspace"
    (ws / "f").write_text("old")
    assert os.stat(ws / "f").st_size == 3
    j = start_job(t, "rm", "rm f && echo removed && while [ ! -e go ]; do sleep 0.05; done; cat f")
    wait_until(lambda: os.stat(j / "stdout").st_size == len("removed\n"), 20)
    with open(ws / "f", "w") as f:  # O_CREAT | O_TRUNC
        f.write("new")
    (ws / "go").write_text("")
    assert wait_job(j) == 0, (j / "stderr").read_text()
    assert (j / "stdout").read_text() == "removed\nnew"


# --------------------------------------------------------------------------
# 3. O_DIRECT


def test_dd_oflag_direct_and_iflag_direct(sandbox):
    m, t = sandbox
    ws = t / "workspace"
    r = subprocess.run(["dd", "if=/dev/urandom", f"of={ws / 'direct.bin'}", "bs=1M", "count=8",
                        "oflag=direct", "status=none"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert os.stat(ws / "direct.bin").st_size == 8 * MiB
    want = (m.workspace_data("alice", "t") / "direct.bin").read_bytes()
    assert len(want) == 8 * MiB
    r = subprocess.run(["dd", f"if={ws / 'direct.bin'}", "of=/dev/stdout", "bs=1M", "iflag=direct",
                        "status=none"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == want


def test_o_direct_aligned_buffers(ws):
    buf = mmap.mmap(-1, MiB)  # page aligned, as O_DIRECT wants
    buf.write(bytes(range(256)) * (MiB // 256))
    fd = os.open(ws / "d", os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
    try:
        assert os.writev(fd, [buf]) == MiB
        assert os.pwritev(fd, [buf], 4 * MiB) == MiB
    finally:
        os.close(fd)
    assert os.stat(ws / "d").st_size == 5 * MiB
    back = mmap.mmap(-1, MiB)
    fd = os.open(ws / "d", os.O_RDONLY | os.O_DIRECT)
    try:
        assert os.preadv(fd, [back], 4 * MiB) == MiB
        assert back[:] == buf[:]
        assert os.preadv(fd, [back], 2 * MiB) == MiB
        assert back[:] == bytes(MiB)  # the hole
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# 4. created by the sandbox's uid: set-id bits, setgid directories


def test_setid_bits_are_kept_on_create(sandbox):
    m, t = sandbox
    ws, back = t / "workspace", m.workspace_data("alice", "t")
    with umask(0):
        os.close(os.open(ws / "suid", os.O_CREAT | os.O_WRONLY, 0o4755))
        os.close(os.open(ws / "sgid", os.O_CREAT | os.O_WRONLY, 0o2755))
        os.mkdir(ws / "sticky", 0o1777)
    assert host_mode(ws / "suid") == 0o4755
    assert host_mode(back / "suid") == 0o4755
    assert host_mode(ws / "sgid") == 0o2755  # the sandbox's gid is the file's group
    assert host_mode(ws / "sticky") == 0o1777
    uid = sbxutil.status(t)["uid"]
    for name in ("suid", "sgid", "sticky"):
        st = os.lstat(back / name)
        assert (st.st_uid, st.st_gid) == (uid, uid), name  # no chown needed, none done


SETID_AS_USER = r"""
import json, os, sys
ws = sys.argv[1]
os.umask(0)
def write(name, flags=os.O_WRONLY, data=b"x"):
    fd = os.open(os.path.join(ws, name), flags, 0o4755)
    try:
        if data:
            os.write(fd, data)
    finally:
        os.close(fd)
write("w_suid")
write("w_sgid_x")
write("w_sgid_nox")
write("w_plain")
os.truncate(os.path.join(ws, "t_suid"), 1)
write("o_suid", os.O_WRONLY | os.O_TRUNC, b"")
fd = os.open(os.path.join(ws, "f_suid"), os.O_WRONLY)
os.posix_fallocate(fd, 0, 8192)
os.close(fd)
write("n_suid", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
print(json.dumps({n: os.stat(os.path.join(ws, n)).st_mode & 0o7777 for n in sorted(os.listdir(ws))}))
"""


@pytest.mark.timeout_s(150)
def test_setid_bits_go_with_an_unprivileged_write_or_truncate(sbxfs, accounts):  # noqa: F811
    """The daemon removes set-id bits itself (FUSE_CAP_HANDLE_KILLPRIV_V2,
    which spares a GETXATTR before every write): a write, truncate,
    O_TRUNC open or fallocate by a user clears set-user-ID, and
    set-group-ID when the group may execute, as on a local file system,
    on the passthrough path as well; root's writes keep them."""
    (a, ua), _ = accounts
    m = sbxfs(config={"users": {a: ua}, "allow_other": True})
    t = m.mnt / a / "t"
    os.makedirs(t)
    m.init_pid(t)
    ws, back = t / "workspace", m.workspace_data(a, "t")
    modes = {"w_suid": 0o4777, "w_sgid_x": 0o2777, "w_sgid_nox": 0o2767, "w_plain": 0o777,
             "t_suid": 0o4777, "o_suid": 0o4777, "f_suid": 0o4777, "r_suid": 0o4777}
    with umask(0):
        for name, mode in modes.items():
            (ws / name).write_bytes(b"0123")
            os.chmod(ws / name, mode)
    with open(ws / "r_suid", "r+b") as f:  # root keeps the bits
        f.write(b"root")
    os.truncate(ws / "r_suid", 2)
    r = subprocess.run([SETPRIV, "--reuid", str(ua), "--regid", str(ua), "--clear-groups", sys.executable, "-c",
                        SETID_AS_USER, str(ws)], capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    want = {"w_suid": 0o777, "w_sgid_x": 0o777, "w_sgid_nox": 0o2767, "w_plain": 0o777, "t_suid": 0o777,
            "o_suid": 0o777, "f_suid": 0o777, "r_suid": 0o4777, "n_suid": 0o755}
    assert {k: oct(v) for k, v in seen.items()} == {k: oct(v) for k, v in want.items()}
    for name, mode in want.items():  # the host file says the same
        assert host_mode(back / name) == mode, name
    assert (ws / "w_suid").read_bytes() == b"x123"
    assert (ws / "o_suid").read_bytes() == b""


def _some_group():
    for name in ("users", "staff", "adm", "daemon"):
        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            pass
    return 100


def test_setgid_directory_passes_on_its_group(sandbox):
    m, t = sandbox
    ws, back = t / "workspace", m.workspace_data("alice", "t")
    gid = _some_group()
    os.mkdir(ws / "shared")
    os.chown(ws / "shared", -1, gid)
    os.chmod(ws / "shared", 0o2775)
    assert os.stat(back / "shared").st_gid == gid
    (ws / "shared" / "file").write_text("x")
    os.mkdir(ws / "shared" / "sub")
    os.symlink("file", ws / "shared" / "link")
    os.mkfifo(ws / "shared" / "fifo")
    for name in ("file", "sub", "link", "fifo"):
        assert os.lstat(ws / "shared" / name).st_gid == gid, name
        assert os.lstat(back / "shared" / name).st_gid == gid, name
    assert os.stat(back / "shared" / "sub").st_mode & stat.S_ISGID  # and the bit to new dirs
    # a job sees the same group on what the host created
    code, out, err = run_job(t, "g", "stat -c %g shared/file shared/sub")
    assert code == 0, err
    assert out.split() == [str(gid), str(gid)]


def test_create_needs_a_directory_the_sandbox_can_write(sandbox):
    """Creation runs as the sandbox's uid: a directory its owner cannot
    write refuses a create also for root (docs/interface.md)."""
    m, t = sandbox
    ws = t / "workspace"
    os.mkdir(ws / "ro")
    os.chmod(ws / "ro", 0o555)
    expect_errno(lambda: (ws / "ro" / "f").write_text("x"), errno.EACCES)
    expect_errno(lambda: os.mkdir(ws / "ro" / "d"), errno.EACCES)
    os.chmod(ws / "ro", 0o755)
    (ws / "ro" / "f").write_text("x")
    assert (ws / "ro" / "f").read_text() == "x"


# --------------------------------------------------------------------------
# 5. readdirplus while a job deletes


@pytest.mark.timeout_s(120)
def test_listing_while_a_job_deletes_is_complete(sandbox):
    """A job removes files while the host lists the directory and stats each
    entry (which makes the kernel use READDIRPLUS for every batch): an entry
    that vanished between the daemon's readdir and its lookup is skipped and
    the listing goes on.  (Before, the listing silently ended there.)"""
    m, t = sandbox
    ws = t / "workspace"
    os.mkdir(ws / "churn")
    stable = {f"s{i:04d}" for i in range(500)}
    for n in stable:
        (ws / "churn" / n).write_text("")
    script = (
        "import os, time\n"
        "os.chdir('churn')\n"
        "k = 0\n"
        "for k in range(500): open('c%06d' % k, 'w').close()\n"
        "open('../ready', 'w').close()\n"
        "end = time.time() + 20\n"
        "while time.time() < end and not os.path.exists('../stop'):\n"
        "    for n in sorted(x for x in os.listdir('.') if x[0] == 'c')[:50]: os.unlink(n)\n"
        "    for i in range(50): open('c%06d' % (k + i), 'w').close()\n"  # never a name again
        "    k += 50\n"
        "    time.sleep(0.02)\n")
    (ws / "churn.py").write_text(script)
    j = start_job(t, "churn", "python3 churn.py")
    assert wait_until(lambda: (m.workspace_data("alice", "t") / "ready").exists(), 30)
    failures, short, listings = [], [], 0
    end = time.monotonic() + 4
    while time.monotonic() < end:
        seen = set()
        try:
            with os.scandir(ws / "churn") as it:
                for e in it:
                    seen.add(e.name)
                    try:
                        e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        pass  # removed since it was listed: fine
        except OSError as e:
            failures.append(e)
            continue
        listings += 1
        if not stable <= seen:
            short.append(len(stable - seen))
        assert all(re.fullmatch(r"[sc]\d+", n) for n in seen)
    (m.workspace_data("alice", "t") / "stop").write_text("")
    assert wait_job(j) == 0
    assert not failures, f"{len(failures)} listings failed: {failures[:3]}"
    assert not short, f"{len(short)} of {listings} listings missed files that were never removed: {short[:10]}"
    assert listings >= 3, listings


# --------------------------------------------------------------------------
# 6. a create that cannot be answered leaves nothing behind


def _lowest_free_fds(pid, n):
    # Two readings that agree: a daemon thread may hold an fd for a moment
    # (the health monitor reads /proc/self), and one that is gone right
    # after the reading would leave a second free fd under the limit.
    used, prev = None, {-1}
    for _ in range(50):
        used = {int(x) for x in os.listdir(f"/proc/{pid}/fd")}
        if used == prev:
            break
        prev = used
        time.sleep(0.005)
    out, f = [], 0
    while len(out) < n:
        if f not in used:
            out.append(f)
        f += 1
    return out


def test_failed_create_is_undone(sandbox):
    """The daemon runs out of fds between creating the file and taking the
    O_PATH handle of its node (its RLIMIT_NOFILE is lowered so exactly one
    more fd fits): the create fails with EMFILE and the file is removed.
    (mkdir, mknod and symlink undo the same way, but they need no fd before
    that point, so the limit cannot stop them there from outside.)"""
    m, t = sandbox
    ws, back = t / "workspace", m.workspace_data("alice", "t")
    pid = m.proc.pid
    os.listdir(ws)  # everything the kernel needs is looked up
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    errs = []
    try:
        for i in range(20):
            f1, f2 = _lowest_free_fds(pid, 2)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (f2, old[1]))
            try:
                os.close(os.open(ws / f"new{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
                errs.append(None)
            except OSError as e:
                errs.append(e.errno)
            finally:
                resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
            if errs[-1] == errno.EMFILE:
                break
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
    assert errno.EMFILE in errs, errs  # the limit hit the create (else: retried 20 times)
    i = errs.index(errno.EMFILE)
    assert not (back / f"new{i}").exists(), "the failed create left its file on the host"
    expect_errno(lambda: os.stat(ws / f"new{i}"), errno.ENOENT)
    (ws / "after").write_text("ok")  # and the daemon is fine
    assert (ws / "after").read_text() == "ok"


# --------------------------------------------------------------------------
# 7. job output files report their size


@pytest.mark.timeout_s(120)
def test_job_stdout_size_while_running_and_after(sandbox):
    m, t = sandbox
    j = start_job(t, "sz", "printf '%01000d' 0; printf 'e%.0s' 1 2 3 >&2; "
                           "while [ ! -e stop ]; do sleep 0.05; done; printf '%0500d' 0")
    assert wait_until(lambda: os.stat(j / "stderr").st_size == 3, 20), os.stat(j / "stderr").st_size
    assert os.stat(j / "stdout").st_size == 1000
    assert os.stat(j / "exit").st_size == 0  # nothing to read yet
    (t / "workspace" / "stop").write_text("")
    assert wait_job(j) == 0
    assert os.stat(j / "stdout").st_size == 1500
    for name in ("stdout", "stderr", "exit", "status", "cmd"):
        data = (j / name).read_bytes()
        assert os.stat(j / name).st_size == len(data), name
    assert (j / "exit").read_bytes() == b"0\n"
    for name in ("id", "status"):  # the sandbox's control files too
        assert os.stat(t / name).st_size == len((t / name).read_bytes()), name
    assert os.stat(t / "id").st_size == 17


@pytest.mark.timeout_s(120)
def test_tail_f_of_job_output_never_sees_it_truncated(sandbox):
    m, t = sandbox
    j = start_job(t, "tail", "for i in $(seq 1 12); do echo line$i; sleep 0.2; done")
    tail = subprocess.Popen(["tail", "-n", "+1", "-f", str(j / "stdout")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    out = b""
    try:
        assert wait_job(j) == 0
        # tail checks the size about every second
        out = sbxutil.read_until(tail, lambda o: b"line12\n" in o, 20)
        time.sleep(1.5)  # and a check of tail's after the end: no "file truncated"
    finally:
        tail.terminate()
        rest, err = tail.communicate(timeout=10)
        out += rest
    assert b"truncated" not in err, err
    lines = out.decode().split()
    assert lines == [f"line{i}" for i in range(1, 13)], (lines, err)
