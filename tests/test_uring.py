# SPDX-License-Identifier: MIT
"""FUSE over io_uring (fuse.io_uring, fs/uring.c, docs/libfuse.md).

What "in use" means here is the kernel's own account, not the daemon's word: the daemon
holds one io_uring per CPU (anon_inode:[io_uring] in /proc/PID/fd) whose completion
counter (CqTail in /proc/PID/fdinfo) moves by one per request the mount serves, and its
ring threads are named fuse-ring-N.  Over /dev/fuse it holds no io_uring at all.

Over io_uring libfuse passes no interrupt on to a request; a parked read is interrupted
by fs/sigwatch.c instead (test_signals_interrupt_a_parked_read_over_io_uring).

The host's enable_uring module parameter is changed only by the daemon under
`io_uring: on`, or by these tests; each test that may change it puts it back (a live
mount over io_uring keeps working when it goes back to N: Linux 6.18 checks it only when
a ring is set up).
"""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

import sbxutil
from conftest import SBXFS_BIN, dump_yaml
from sbxutil import read_json, read_text

REPO = Path(__file__).resolve().parent.parent
PARAM = Path("/sys/module/fuse/parameters/enable_uring")
COPY_BIN = REPO / "build" / "copy" / "sbxfs"  # the system's libfuse (3.14 on Debian 12)


def _libfuse_has_uring():
    try:
        mk = (REPO / "build" / "libfuse.mk").read_text()
    except OSError:
        return False
    return re.search(r"^FUSE_IO_URING := 1$", mk, re.M) is not None


def _param_writable():
    return PARAM.exists() and os.access(PARAM, os.W_OK)


needs_uring = pytest.mark.skipif(
    not (_libfuse_has_uring() and _param_writable()),
    reason="needs a libfuse built with io_uring (build/libfuse.mk FUSE_IO_URING := 1) and a "
           "writable " + str(PARAM))


@pytest.fixture
def param():
    """The host's enable_uring, put back as it was after the test."""
    before = PARAM.read_text().strip()
    yield before
    if PARAM.read_text().strip() != before:
        PARAM.write_text(before)


def set_param(v):
    PARAM.write_text(v)
    assert PARAM.read_text().strip() == v


def daemon_pid(inst):
    pid = inst.daemon_pid()
    assert pid, "no daemon pid in the lock file"
    return pid


def rings(pid):
    """{fd: CqTail} of the io_uring instances the process holds."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:[io_uring]":
                continue
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        m = re.search(r"^CqTail:\s*(\d+)", info, re.M)
        if m:
            out[fd] = int(m.group(1))
    return out


def ring_threads(pid):
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            names.append(Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip())
        except OSError:
            pass
    return sorted(n for n in names if n.startswith("fuse-ring-"))


def completions(before, after):
    return sum((after[fd] - before.get(fd, 0)) % (1 << 32) for fd in after)


def lookups(mnt, n, tag):
    for k in range(n):
        try:
            os.stat(mnt / f"{tag}{k}")
        except FileNotFoundError:
            pass


def transport(inst):
    return read_json(inst.mnt / ".status")


# ---- io_uring in use -------------------------------------------------------------

@needs_uring
def test_on_serves_the_mount_over_io_uring(sbxfs, param):
    set_param("N")
    inst = sbxfs(config={"fuse": {"io_uring": "on"}})
    pid = daemon_pid(inst)
    st = transport(inst)
    assert st["fuse_transport"] == "io_uring", st
    assert st["io_uring"]["mode"] == "on" and st["io_uring"]["reason"] is None, st
    ncpu = os.cpu_count()
    assert st["io_uring"]["queues"] == ncpu and st["io_uring"]["queue_depth"] == 64, st
    # `on` switched the host's parameter, and said so
    assert PARAM.read_text().strip() == "Y"
    assert re.search(r"switched \S*enable_uring from N to Y", inst.log), inst.log
    # the kernel's account: one ring per CPU, each request a completion on one of them
    assert ring_threads(pid) == [f"fuse-ring-{q}" for q in range(ncpu)]
    before = rings(pid)
    assert len(before) == ncpu, before
    lookups(inst.mnt, 300, "nosuch")
    done = completions(before, rings(pid))
    assert done >= 300, f"{done} ring completions for 300 lookups of new names"
    # what only /dev/fuse carries (FORGET) keeps working beside the rings
    read_text(inst.mnt / ".status")


@needs_uring
def test_data_and_jobs_over_io_uring(sbxfs, param):
    inst = sbxfs(config={"fuse": {"io_uring": "on"}, "replicas": 1})
    pid = daemon_pid(inst)
    sb = inst.mnt / "alice" / "t"
    sbxutil.mkdir_ready(sb, parents=True)
    ws = sb / "workspace"
    before = rings(pid)
    (ws / "d").mkdir()
    for k in range(50):
        (ws / "d" / f"f{k}").write_bytes(b"x" * (k * 100))
    assert sorted(os.listdir(ws / "d")) == sorted(f"f{k}" for k in range(50))
    assert all((ws / "d" / f"f{k}").stat().st_size == k * 100 for k in range(50))
    os.rename(ws / "d" / "f1", ws / "d" / "g1")
    os.unlink(ws / "d" / "f2")
    assert (ws / "d" / "g1").read_bytes() == b"x" * 100
    assert not (ws / "d" / "f2").exists()
    # on the host side, as written
    host = inst.workspace_data("alice", "t") / "d"
    assert (host / "g1").read_bytes() == b"x" * 100 and not (host / "f1").exists()
    # a job: its cmd written, its exit read (a parked read answered over the ring)
    (sb / "jobs" / "j").mkdir()
    (sb / "jobs" / "j" / "cmd").write_text("echo over-the-ring; exit 3\n")
    assert read_text(sb / "jobs" / "j" / "exit").strip() == "3"
    assert read_text(sb / "jobs" / "j" / "stdout") == "over-the-ring\n"
    assert completions(before, rings(pid)) >= 100
    assert transport(inst)["fuse_transport"] == "io_uring"


def _blocked_reader(path, block=()):
    def pre():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set(block))
    return subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=pre)


@needs_uring
@pytest.mark.timeout_s(90)
def test_signals_interrupt_a_parked_read_over_io_uring(sbxfs, param):
    """libfuse passes no FUSE_INTERRUPT on to ring requests; sigwatch.c watches the
    requester's pending signals instead: a blocked read of `exit` ends at a signal, a
    blocked (masked) signal leaves it waiting, and the job is not touched."""
    inst = sbxfs(config={"fuse": {"io_uring": "on"}, "replicas": 1})
    assert transport(inst)["fuse_transport"] == "io_uring"
    sb = inst.mnt / "alice" / "t"
    sbxutil.mkdir_ready(sb, parents=True)
    (sb / "jobs" / "long").mkdir()
    (sb / "jobs" / "long" / "cmd").write_text("sleep 300\n")
    exitf = sb / "jobs" / "long" / "exit"
    for sig in (signal.SIGINT, signal.SIGKILL):
        p = _blocked_reader(exitf)
        try:
            time.sleep(0.5)
            assert p.poll() is None, p.communicate()
            t0 = time.monotonic()
            p.send_signal(sig)
            p.wait(timeout=30)  # without the watch: until the job ends (300 s)
            assert p.returncode == -sig
            assert time.monotonic() - t0 < 10
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    # hostile: a signal the reader blocks does not interrupt it
    p = _blocked_reader(exitf, block=(signal.SIGUSR1,))
    try:
        time.sleep(0.5)
        p.send_signal(signal.SIGUSR1)
        time.sleep(1.0)  # 20 watch periods
        assert p.poll() is None, "a blocked signal interrupted the read"
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        assert p.returncode == -signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    st = json.loads(read_text(sb / "jobs" / "long" / "status"))
    assert st["state"] == "running", st
    # many readers at once, all interrupted
    ps = [_blocked_reader(exitf) for _ in range(20)]
    try:
        time.sleep(1.0)
        assert all(q.poll() is None for q in ps)
        for q in ps:
            q.send_signal(signal.SIGINT)
        for q in ps:
            q.wait(timeout=30)
        assert all(q.returncode == -signal.SIGINT for q in ps)
    finally:
        for q in ps:
            if q.poll() is None:
                q.kill()
                q.wait(10)
    (sb / "jobs" / "long" / "ctl").write_text("kill\n")
    assert read_text(exitf).strip() == "143"


@needs_uring
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs")
@pytest.mark.timeout_s(90)
def test_a_full_queue_waits_for_its_cpu_only(sbxfs, param):
    """io_uring_queue_depth 1: a read parked from CPU 0 holds CPU 0's only ring entry.
    A stat from CPU 0 then waits in the kernel (documented), CPU 1 is served meanwhile,
    and interrupting the parked read frees the entry: the waiting stat completes."""
    inst = sbxfs(config={"fuse": {"io_uring": "on", "io_uring_queue_depth": 1}, "replicas": 1})
    assert transport(inst)["io_uring"]["queue_depth"] == 1
    sb = inst.mnt / "alice" / "t"
    sbxutil.mkdir_ready(sb, parents=True)
    (sb / "jobs" / "long").mkdir()
    (sb / "jobs" / "long" / "cmd").write_text("sleep 300\n")
    reader = subprocess.Popen(["taskset", "-c", "0", "cat", str(sb / "jobs" / "long" / "exit")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    stat0 = None
    try:
        time.sleep(1.0)
        assert reader.poll() is None, reader.communicate()
        stat0 = subprocess.Popen(["taskset", "-c", "0", "stat", str(inst.mnt / "nosuch-cpu0")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        assert stat0.poll() is None, "CPU 0's queue had room for a second request"
        r = subprocess.run(["taskset", "-c", "1", "stat", str(inst.mnt / "nosuch-cpu1")],
                           capture_output=True, timeout=20)
        assert r.returncode == 1 and b"No such file" in r.stderr, r
        reader.send_signal(signal.SIGINT)
        reader.wait(timeout=30)
        assert reader.returncode == -signal.SIGINT
        stat0.wait(timeout=30)
        assert stat0.returncode == 1  # ENOENT: it was answered
    finally:
        for p in (reader, stat0):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)
    (sb / "jobs" / "long" / "ctl").write_text("kill\n")


WORK_IDLE_SECONDS = 30  # runtime/work.h: an idle work thread leaves after it, unless kept


@needs_uring
@pytest.mark.timeout_s(180)
def test_answers_from_threads_that_end_leave_the_rings_whole(sbxfs, param):
    """A request answered by a thread other than its ring's (here `acquire: sync`: the
    mkdir is answered by a lifecycle work thread) has its ring entry's next fetch
    submitted by that thread, and the kernel cancels it when the thread exits.  Work
    threads leave after WORK_IDLE_SECONDS idle: over io_uring they must stay, else the
    next request given to that entry fails (ECANCELED, seen) or the queue runs dry."""
    inst = sbxfs(config={"fuse": {"io_uring": "on", "io_uring_queue_depth": 2}, "acquire": "sync",
                         "replicas": 8})
    assert transport(inst)["fuse_transport"] == "io_uring"
    ncpu = os.cpu_count() or 1
    # mkdirs from every CPU, each answered by a work thread
    for cpu in range(ncpu):
        for i in range(2):
            r = subprocess.run(["taskset", "-c", str(cpu), "mkdir", "-p", str(inst.mnt / "alice" / f"c{cpu}t{i}")],
                               capture_output=True, timeout=60)
            assert r.returncode == 0, r
    time.sleep(WORK_IDLE_SECONDS + 8)
    probe = ("import os, sys\n"
             "bad = []\n"
             "for k in range(40):\n"
             "    try:\n"
             "        os.stat(sys.argv[1] + '/nosuch%d' % k)\n"
             "    except FileNotFoundError:\n"
             "        pass\n"
             "    except OSError as e:\n"
             "        bad.append(e.errno)\n"
             "os.mkdir(sys.argv[2])\n"
             "print(bad)\n")
    for cpu in range(ncpu):
        r = subprocess.run(["taskset", "-c", str(cpu), "/usr/bin/python3", "-c", probe, str(inst.mnt),
                            str(inst.mnt / "alice" / f"after{cpu}")], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "[]", (cpu, r.stdout, r.stderr)
    assert "ECANCELED" not in inst.log and inst.running()


@needs_uring
def test_unmount_ends_the_daemon_and_its_rings(sbxfs, param):
    inst = sbxfs(config={"fuse": {"io_uring": "on"}})
    pid = daemon_pid(inst)
    assert ring_threads(pid)
    subprocess.run(["fusermount3", "-u", str(inst.mnt)], check=True, timeout=30)
    assert sbxutil.wait_until(lambda: not sbxutil.pid_alive(pid), 30), "daemon still running after unmount"
    assert not sbxutil.is_mounted(inst.mnt)


# ---- fallback --------------------------------------------------------------------

@needs_uring
def test_auto_falls_back_when_the_module_parameter_is_off(sbxfs, param):
    set_param("N")
    inst = sbxfs(config={"fuse": {"io_uring": "auto"}})
    pid = daemon_pid(inst)
    st = transport(inst)
    assert st["fuse_transport"] == "dev_fuse", st
    assert "enable_uring is N" in st["io_uring"]["reason"], st
    lines = [ln for ln in inst.log.splitlines() if "fuse.io_uring: auto" in ln]
    assert len(lines) == 1 and "/dev/fuse" in lines[0] and "enable_uring is N" in lines[0], inst.log
    assert PARAM.read_text().strip() == "N", "auto changed the host's parameter"
    assert rings(pid) == {} and ring_threads(pid) == []
    (inst.mnt / "alice" / "t").mkdir(parents=True)
    assert (inst.mnt / "alice" / "t" / "workspace").is_dir()


@needs_uring
def test_auto_uses_io_uring_when_the_kernel_offers_it(sbxfs, param):
    set_param("Y")
    inst = sbxfs(config={"fuse": {"io_uring": "auto"}})
    pid = daemon_pid(inst)
    assert transport(inst)["fuse_transport"] == "io_uring"
    before = rings(pid)
    lookups(inst.mnt, 100, "auto")
    assert completions(before, rings(pid)) >= 100


@pytest.mark.skipif(not PARAM.exists(), reason="no FUSE over io_uring in this kernel")
def test_off_is_the_default_and_touches_nothing(sbxfs, param):
    # hostile: libfuse's own switch in the environment does not override the key
    # (no fuse key at all, also when SBXFS_TEST_FUSE_IO_URING gives every daemon one)
    inst = sbxfs(config={"fuse": None}, env={"FUSE_URING_ENABLE": "1"})
    pid = daemon_pid(inst)
    st = transport(inst)
    assert st["fuse_transport"] == "dev_fuse" and st["io_uring"]["mode"] == "off", st
    assert st["io_uring"]["reason"] == "fuse.io_uring is off", st
    assert rings(pid) == {} and ring_threads(pid) == []
    assert PARAM.read_text().strip() == param
    assert "FUSE_URING_ENABLE" in inst.log and "ignored" in inst.log
    assert json.loads(read_text(inst.mnt / ".config"))["fuse"] == {"io_uring": "off",
                                                                   "io_uring_queue_depth": 64}


@pytest.mark.skipif(not COPY_BIN.exists(), reason="build/copy/sbxfs not built (make build/copy/sbxfs)")
def test_libfuse_without_io_uring(sbxfs, param, monkeypatch):
    """The daemon built on the system's libfuse (3.14): auto mounts over /dev/fuse with
    the reason; on refuses to start, naming it, and changes nothing."""
    import conftest
    monkeypatch.setattr(conftest, "SBXFS_BIN", COPY_BIN)
    inst = sbxfs(config={"fuse": {"io_uring": "auto"}})
    st = transport(inst)
    assert st["fuse_transport"] == "dev_fuse", st
    assert "without FUSE over io_uring" in st["io_uring"]["reason"], st
    assert rings(daemon_pid(inst)) == {}
    inst = sbxfs(config={"fuse": {"io_uring": "on"}}, start=False)
    t0 = time.monotonic()
    rc, log = inst.run_expect_exit(timeout=10)
    assert rc == 1, log
    assert time.monotonic() - t0 < 5
    assert not sbxutil.is_mounted(inst.mnt)
    assert "fuse.io_uring is on, but this sbxfs is built with libfuse 3." in log, log
    assert PARAM.read_text().strip() == param


# ---- configuration ---------------------------------------------------------------

@needs_uring
def test_reload_keeps_the_transport_and_says_so(sbxfs, param):
    inst = sbxfs(config={"fuse": {"io_uring": "on"}})
    pid = daemon_pid(inst)
    conf = dict(inst.config, fuse={"io_uring": "off"}, replicas=7)
    inst.conf.write_text(dump_yaml(conf))
    os.kill(pid, signal.SIGHUP)
    assert sbxutil.wait_until(lambda: "configuration reloaded" in inst.log, 20), inst.log
    assert "takes effect at the next mount" in inst.log, inst.log
    st = transport(inst)
    assert st["replicas"] == 7 and st["fuse_transport"] == "io_uring", st
    before = rings(pid)
    lookups(inst.mnt, 50, "after-reload")
    assert completions(before, rings(pid)) >= 50


BAD = [
    ("word", {"io_uring": "maybe"}, "fuse.io_uring"),
    ("number", {"io_uring": 2}, "fuse.io_uring"),
    ("list", {"io_uring": ["on"]}, "fuse.io_uring"),
    ("empty", {"io_uring": ""}, "fuse.io_uring"),
    ("depth-0", {"io_uring_queue_depth": 0}, "fuse.io_uring_queue_depth"),
    ("depth-big", {"io_uring_queue_depth": 5000}, "fuse.io_uring_queue_depth"),
    ("depth-word", {"io_uring_queue_depth": "deep"}, "fuse.io_uring_queue_depth"),
]


@pytest.mark.parametrize("fuse,key", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_values_refused(sbxfs, param, fuse, key):
    inst = sbxfs(config={"fuse": fuse}, start=False)
    t0 = time.monotonic()
    rc, log = inst.run_expect_exit(timeout=10)
    assert rc == 1, f"exit status {rc}; log:\n{log}"
    assert time.monotonic() - t0 < 5
    assert not sbxutil.is_mounted(inst.mnt)
    lines = [ln for ln in log.splitlines() if ln.startswith("sbxfs: config error: ")]
    assert lines and key in lines[0], log
    assert PARAM.read_text().strip() == param, "a refused config changed the host"


def test_fuse_section_must_be_a_mapping(sbxfs):
    inst = sbxfs(config={"fuse": "on"}, start=False)
    rc, log = inst.run_expect_exit(timeout=10)
    assert rc == 1 and "config error" in log and "fuse" in log, log


@pytest.mark.parametrize("value,mode", [("off", "off"), ("auto", "auto"), ("on", "on"),
                                        (True, "on"), (False, "off")])
def test_check_config_reads_the_spellings(tmp_path, value, mode):
    conf = tmp_path / "mount.conf"
    conf.write_text(dump_yaml({"use": "local", "state_dir": str(tmp_path / "s"),
                               "fuse": {"io_uring": value, "io_uring_queue_depth": 16}}))
    r = subprocess.run([str(SBXFS_BIN), "--check-config", str(conf)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert f'"io_uring": "{mode}"' in r.stdout or f'"io_uring":"{mode}"' in r.stdout, r.stdout
