# SPDX-License-Identifier: MIT
"""Fixtures for the sbxfs black-box suite.

`sbxfs` is a factory: `m = sbxfs(config={...}, env={...})` writes a mount.conf,
starts `sbxfs -f -c CONF MNT` and waits (10 s at most) until MNT is mounted.
The object has .mnt, .state_dir, .log, .proc, .stop(), .kill9(), .restart().

Teardown always runs, even when the test failed or timed out: fusermount3 -u
(then -uz), SIGTERM/SIGKILL of the daemon by its pid, SIGKILL by pid of any
leftover process whose command line names this test's state_dir (bwrap
sandboxes) or that the test recorded as a sandbox init, then the temporary
directory is removed.  A session-level check fails the run if any FUSE mount
of this run is still in the mount table at the end.

Every test has a time limit (default 180 s; @pytest.mark.timeout_s(N)):
SIGALRM raises in the test, and a watchdog SIGKILLs the daemons 10 s later
so a test stuck in a FUSE request is released (ENOTCONN).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sbxutil  # noqa: E402

try:
    import yaml  # noqa: F401
    HAVE_YAML = True
except ImportError:  # pragma: no cover - depends on the machine
    HAVE_YAML = False

TESTS_DIR = str(Path(__file__).resolve().parent)
REPO = Path(__file__).resolve().parent.parent
SBXFS_BIN = Path(os.environ.get("SBXFS_BIN", str(REPO / "sbxfs")))
RUN_PREFIX = f"sbxfs-t{os.getpid()}-"
TMP_ROOT = Path(os.environ.get("SBXFS_TEST_TMP", tempfile.gettempdir()))
MOUNT_TIMEOUT = 10.0
DEFAULT_TEST_TIMEOUT = 180
# SBXFS_TEST_FUSE_IO_URING=off|auto|on: every daemon of the run gets
# `fuse: {io_uring: VALUE}` unless its test sets `fuse` itself (run the data
# and metadata tests over io_uring: docs/libfuse.md).  With `on` the daemon
# switches the host's enable_uring to Y; the session puts back what it was.
FUSE_IO_URING = os.environ.get("SBXFS_TEST_FUSE_IO_URING", "")
URING_PARAM = Path("/sys/module/fuse/parameters/enable_uring")

_live = []  # every SbxfsInstance of the current test, for the watchdog


# --------------------------------------------------------------------------
# YAML


def _yaml_scalar(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    return json.dumps(str(v))  # a JSON string is a valid YAML double-quoted scalar


def _yaml_lines(obj, indent=0):
    pad = "  " * indent
    lines = []
    if isinstance(obj, dict):
        if not obj:
            return [pad + "{}"]
        for k, v in obj.items():
            key = _yaml_scalar(k) if not isinstance(k, str) else json.dumps(k)
            if isinstance(v, (dict, list)) and v:
                lines.append(f"{pad}{key}:")
                lines.extend(_yaml_lines(v, indent + 1))
            elif isinstance(v, dict):
                lines.append(f"{pad}{key}: {{}}")
            elif isinstance(v, list):
                lines.append(f"{pad}{key}: []")
            else:
                lines.append(f"{pad}{key}: {_yaml_scalar(v)}")
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, (dict, list)) and v:
                sub = _yaml_lines(v, indent + 1)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{pad}- {_yaml_scalar(v) if not isinstance(v, (dict, list)) else json.dumps(v)}")
    else:
        lines.append(pad + _yaml_scalar(obj))
    return lines


def dump_yaml(obj):
    if HAVE_YAML:
        import yaml
        return yaml.safe_dump(obj, default_flow_style=False, sort_keys=False)
    return "\n".join(_yaml_lines(obj)) + "\n"


# --------------------------------------------------------------------------
# one daemon


class DetachedProc:
    """The daemon started without -f: not our child once it has detached.
    Quacks like the bits of subprocess.Popen the suite uses; it is found
    by the pid the daemon writes into its state_dir lock file and watched
    by pid and start time (never signalled once it is gone)."""

    def __init__(self, pid):
        self.pid = pid
        self.ref = sbxutil.ProcRef(pid)
        self.returncode = None

    def poll(self):
        if self.returncode is None and not self.ref.alive():
            self.returncode = 0  # its real status went to its parent (init)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"sbxfs pid {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode

    def _signal(self, sig):
        if self.ref.alive():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self):
        self._signal(signal.SIGTERM)

    def kill(self):
        self._signal(signal.SIGKILL)


class SbxfsInstance:
    def __init__(self, config=None, env=None, raw_config=None, args=(), detach=False):
        self.base = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=TMP_ROOT))
        os.chmod(self.base, 0o755)  # other uids (users: tests, sandboxes) traverse it
        self.mnt = self.base / "mnt"
        self.state_dir = self.base / "state"
        self.conf = self.base / "mount.conf"
        self.log_path = self.base / "sbxfs.log"
        self.mnt.mkdir()
        os.chmod(self.mnt, 0o755)
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.args = list(args)
        self.detach = detach  # start without -f, as an administrator would
        self.ignored_signals = ()  # started with these ignored (nohup, a script's `&`)
        self.proc = None
        self.tracked = []  # ProcRefs of sandbox processes seen by the test
        self.leaks = []
        # pool.prewarm 0 unless a test asks for spares (tests/test_spares.py):
        # most tests count sandboxes and processes, and spares change those
        self.config = {"use": "local", "state_dir": str(self.state_dir), "pool": {"prewarm": 0}}
        if FUSE_IO_URING:
            self.config["fuse"] = {"io_uring": FUSE_IO_URING}
        for k, v in (config or {}).items():
            if v is None:
                self.config.pop(k, None)
            else:
                self.config[k] = v
        if raw_config is not None:
            self.conf.write_text(raw_config)
        else:
            self.conf.write_text(dump_yaml(self.config))
        _live.append(self)

    # ---- paths
    def thread_data(self, user, thread):
        return self.state_dir / "users" / user / "threads" / thread

    def workspace_data(self, user, thread):
        return self.thread_data(user, thread) / "user-data" / "workspace"

    # ---- log
    @property
    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # ---- process
    def command(self):
        fg = [] if self.detach else ["-f"]
        return [str(SBXFS_BIN), *fg, "-c", str(self.conf), *self.args, str(self.mnt)]

    def daemon_pid(self):
        """The pid the running daemon wrote into its lock file, or None."""
        try:
            txt = (self.state_dir / "sbxfs.lock").read_text().strip()
            return int(txt) if txt else None
        except (FileNotFoundError, ValueError):
            return None

    def _spawn(self):
        if not SBXFS_BIN.exists():
            pytest.fail(f"daemon binary {SBXFS_BIN} does not exist (run make)")
        logf = open(self.log_path, "ab")
        try:
            ignored = tuple(self.ignored_signals)
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                env=self.env, cwd=str(self.base),
                preexec_fn=(lambda: [signal.signal(s, signal.SIG_IGN) for s in ignored]) if ignored else None)
        finally:
            logf.close()
        if self.detach:
            # the launcher exits once the daemon is up (0) or has failed (1)
            try:
                rc = self.proc.wait(timeout=MOUNT_TIMEOUT + 20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                pytest.fail(f"sbxfs (without -f) did not return within {MOUNT_TIMEOUT + 20} s")
            if rc != 0:
                return  # start() / run_expect_exit() look at the status
            pid = self.daemon_pid()
            if pid is None:
                pytest.fail(f"detached sbxfs wrote no pid into its lock file; log:\n{self.log}")
            self.proc = DetachedProc(pid)

    def start(self):
        self._spawn()
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while time.monotonic() < deadline:
            fst = sbxutil.mount_fstype(self.mnt)
            if fst is not None and fst.startswith("fuse") and self._answers():
                self._check_transport()
                return self
            if self.proc.poll() is not None:
                pytest.fail(f"sbxfs exited with status {self.proc.returncode} before mounting; log:\n{self.log}")
            time.sleep(0.05)
        pytest.fail(f"sbxfs did not mount {self.mnt} within {MOUNT_TIMEOUT} s; log:\n{self.log}")

    def _check_transport(self):
        """Under SBXFS_TEST_FUSE_IO_URING=on, a daemon given that setting by the conftest
        serves its mount over io_uring, or the run is not what it claims to be."""
        if FUSE_IO_URING != "on" or self.config.get("fuse") != {"io_uring": "on"}:
            return
        st = json.loads((self.mnt / ".status").read_text())
        if st.get("fuse_transport") != "io_uring":
            pytest.fail(f"SBXFS_TEST_FUSE_IO_URING=on but .status says {st.get('fuse_transport')!r}: "
                        f"{st.get('io_uring')}; log:\n{self.log}")

    def _answers(self):
        """The mount is served (a stale mount of a killed daemon is ENOTCONN
        or ECONNABORTED;
        statfs always asks the daemon, stat may answer from a cache)."""
        try:
            os.statvfs(self.mnt)
            return True
        except OSError:
            return False

    def run_expect_exit(self, timeout=10):
        """Start the daemon expecting it to refuse to run: returns (rc, log).
        rc is None when it was still running after timeout."""
        self._spawn()
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        return rc, self.log

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def umount(self, lazy=False):
        args = ["fusermount3", "-uz" if lazy else "-u", str(self.mnt)]
        return subprocess.run(args, capture_output=True, text=True, timeout=30)

    def stop(self, timeout=30):
        """fusermount3 -u and wait for the daemon to exit; returns its status."""
        if sbxutil.is_mounted(self.mnt):
            r = self.umount()
            if r.returncode != 0 and sbxutil.is_mounted(self.mnt):
                self.umount(lazy=True)
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"sbxfs did not exit within {timeout} s of fusermount3 -u; log:\n{self.log}")

    def kill9(self):
        if self.running():
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def restart(self):
        if self.running():
            self.stop()
        if sbxutil.is_mounted(self.mnt):  # stale after a kill -9
            self.umount(lazy=True)
            sbxutil.wait_until(lambda: not sbxutil.is_mounted(self.mnt), 5)
        return self.start()

    # ---- sandboxes
    def track(self, pid):
        """Remember a sandbox process so teardown can end it if sbxfs leaks it."""
        ref = sbxutil.ProcRef(pid)
        self.tracked.append(ref)
        return ref

    def init_pid(self, sandbox_dir):
        pid = sbxutil.init_pid(sandbox_dir)
        self.track(pid)
        return pid

    # ---- teardown
    def cleanup(self):
        if sbxutil.is_mounted(self.mnt):
            try:
                r = self.umount()
                if r.returncode != 0 or sbxutil.is_mounted(self.mnt):
                    self.umount(lazy=True)
            except subprocess.TimeoutExpired:
                self.umount(lazy=True)
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=10)
        if sbxutil.is_mounted(self.mnt):
            self.umount(lazy=True)
        # the open-mode gateway's pinned namespace (and its directory's own
        # mount), if a daemon left them
        for path in (self.state_dir / "gateway" / "netns", self.state_dir / "gateway"):
            with open("/proc/self/mountinfo") as f:
                if any(line.split()[4] == str(path) for line in f):
                    if path.name == "netns":
                        self.leaks.append(f"gateway namespace {path}")
                    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)
        # leftovers: processes naming our state_dir, and recorded inits
        exclude = {self.proc.pid} if self.proc is not None else set()
        for pid, cmd in sbxutil.procs_matching(self.state_dir, exclude).items():
            self.leaks.append(f"{pid}: {cmd}")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for ref in self.tracked:
            if ref.alive():
                self.leaks.append(f"{ref.pid}: {sbxutil.proc_cmdline(ref.pid)}")
                ref.kill()
        if self.proc is None or self.proc.poll() is not None:  # its sandboxes are gone too
            # a daemon that died (kill -9, the watchdog) left its sandboxes'
            # inits running, also those the test did not record
            self.leaks += sbxutil.kill_sandbox_cgroups(self.state_dir)
            for d in sbxutil.remove_sandbox_cgroups(self.state_dir):
                self.leaks.append(f"cgroup {d}")
        self.leaks = sorted(set(self.leaks))
        if self.leaks and not self.config.get("keep_on_exit"):
            warnings.warn(f"sbxfs left processes behind (killed): {self.leaks}")
        if self in _live:
            _live.remove(self)
        if not sbxutil.is_mounted(self.mnt) and not os.environ.get("SBXFS_TEST_KEEP"):
            shutil.rmtree(self.base, ignore_errors=True)


# --------------------------------------------------------------------------
# fixtures


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout_s(n): per-test time limit in seconds")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    limit = getattr(item, "_sbx_timed_out", None)
    if limit and rep.when == "call" and not rep.failed:
        rep.outcome = "failed"
        rep.longrepr = f"test exceeded its {limit} s time limit"
    setattr(item, "rep_" + rep.when, rep)


class TimeLimitExceeded(Exception):
    pass


@pytest.fixture(autouse=True)
def _time_limit(request):
    m = request.node.get_closest_marker("timeout_s")
    limit = int(m.args[0]) if m else DEFAULT_TEST_TIMEOUT

    def on_alarm(signum, frame):
        request.node._sbx_timed_out = limit
        # raise only inside the suite's own code: an exception thrown into
        # pytest's machinery can be swallowed; elsewhere try again in 1 s
        if frame is not None and frame.f_code.co_filename.startswith(TESTS_DIR):
            raise TimeLimitExceeded(f"test exceeded its {limit} s time limit")
        signal.alarm(1)

    def watchdog():
        # the main thread may be stuck in a FUSE request that SIGALRM cannot
        # interrupt: kill the daemons (by pid) so the request fails
        for inst in list(_live):
            if inst.running():
                try:
                    os.kill(inst.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit)
    timer = threading.Timer(limit + 10, watchdog)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        signal.alarm(0)
        timer.cancel()
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def sbxfs(request):
    """Factory: sbxfs(config=None, env=None, raw_config=None, start=True,
    args=(), detach=False)."""
    made = []

    def make(config=None, env=None, raw_config=None, start=True, args=(), detach=False):
        inst = SbxfsInstance(config=config, env=env, raw_config=raw_config, args=args, detach=detach)
        made.append(inst)
        if start:
            inst.start()
        return inst

    yield make
    failed = getattr(request.node, "rep_call", None)
    failed = failed is not None and failed.failed
    for inst in reversed(made):
        if failed:
            print(f"---- sbxfs log ({inst.log_path}) ----\n{inst.log[-8000:]}")
        inst.cleanup()


@pytest.fixture
def mnt(sbxfs):
    """A mounted sbxfs with the default test configuration."""
    return sbxfs()


@pytest.fixture
def sandbox(mnt):
    """(instance, sandbox_dir) with alice/t acquired."""
    d = mnt.mnt / "alice" / "t"
    os.makedirs(d)
    mnt.init_pid(d)
    return mnt, d


@pytest.fixture
def ws(sandbox):
    return sandbox[1] / "workspace"


@pytest.fixture(scope="session", autouse=True)
def _uring_param_restored():
    """What the host's enable_uring was before a run with SBXFS_TEST_FUSE_IO_URING, put
    back after it (other runs leave it alone: test_uring.py restores its own)."""
    before = None
    if FUSE_IO_URING:
        try:
            before = URING_PARAM.read_text().strip()
        except OSError:
            pass
    yield
    if before is not None and URING_PARAM.read_text().strip() != before:
        URING_PARAM.write_text(before)


@pytest.fixture(scope="session", autouse=True)
def _no_mount_left_behind():
    yield
    prefix = str(TMP_ROOT / RUN_PREFIX)
    left = [(mp, fs) for mp, fs in sbxutil.mounts() if mp.startswith(prefix)]
    for mp, _ in left:
        subprocess.run(["fusermount3", "-uz", mp], capture_output=True, timeout=30)
    assert not left, f"mounts of this test run left behind: {left}"
