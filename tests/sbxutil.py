# SPDX-License-Identifier: MIT
"""Helpers shared by the black-box tests: process table scans, mount table,
status/metrics parsing.  Nothing here talks to sbxfs except through files."""

import errno
import glob
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

SCOPE_TOKEN_ALICE_THREAD1 = "dc977b840cb8638e"


# --------------------------------------------------------------------------
# mount table


def mounts():
    """[(mountpoint, fstype)] from /proc/mounts (octal escapes decoded)."""
    out = []
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3:
                continue
            mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[1])
            out.append((mp, parts[2]))
    return out


def mount_fstype(path):
    path = str(path)
    found = None
    for mp, fstype in mounts():
        if mp == path:
            found = fstype  # last one wins (stacked mounts)
    return found


def is_mounted(path):
    return mount_fstype(path) is not None


# --------------------------------------------------------------------------
# processes


class ProcRef:
    """A process identified by pid *and* start time, so pid reuse never makes
    a dead process look alive (or makes us signal a stranger)."""

    def __init__(self, pid):
        self.pid = int(pid)
        self.start = proc_starttime(self.pid)

    def alive(self):
        if self.start is None:
            return False
        st = proc_stat(self.pid)
        if st is None:
            return False
        state, start = st
        return start == self.start and state not in ("Z", "X")

    def kill(self):
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def __repr__(self):
        return f"ProcRef(pid={self.pid}, alive={self.alive()}, cmd={proc_cmdline(self.pid)!r})"


def proc_stat(pid):
    """(state, starttime) of pid, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm may contain spaces and parentheses: split after the last ')'
    rest = data[data.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); starttime is field 22 -> rest[19]
    return rest[0], int(rest[19])


def proc_starttime(pid):
    st = proc_stat(pid)
    return None if st is None else st[1]


def proc_ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    rest = data[data.rindex(")") + 2:].split()
    return int(rest[1])


def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def pid_alive(pid):
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def sandbox_cgroups(state_dir):
    """The cgroup directories of the sandboxes of the daemon of state_dir,
    in every hierarchy (named <key>-<token> under sbxfs/, key the first 8 hex
    digits of sha256(state_dir): providers/cgroup.c), deepest first."""
    keys = {hashlib.sha256(str(p).encode()).hexdigest()[:8] for p in (state_dir, os.path.realpath(state_dir))}
    found = []
    for top in glob.glob("/sys/fs/cgroup/*/sbxfs") + glob.glob("/sys/fs/cgroup/sbxfs"):
        for d in os.listdir(top):
            if d.split("-", 1)[0] in keys and os.path.isdir(os.path.join(top, d)):
                for root, dirs, _ in os.walk(os.path.join(top, d)):
                    found.append(root)
    return sorted(found, key=lambda d: d.count("/"), reverse=True)


def kill_sandbox_cgroups(state_dir):
    """SIGKILL every process still in the sandbox cgroups of the daemon of
    state_dir (a daemon that died without ending its sandboxes leaves their
    inits running: sbxfs-init is pid 1 of its namespace, not bubblewrap's
    child to kill, and its command line does not name state_dir).  Returns
    ["pid: cmdline"] of those found."""
    found = []
    for d in sandbox_cgroups(state_dir):
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                pids = [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            continue
        for pid in pids:
            found.append(f"{pid}: {proc_cmdline(pid)}")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return found


def remove_sandbox_cgroups(state_dir, timeout=5):
    """Remove what sandbox_cgroups() finds (a test that kill -9s the daemon
    and ends its sandboxes by pid leaves them; the next start would adopt or
    clean them, but no next start comes).  A cgroup whose processes are
    still exiting is retried until timeout; returns those left."""
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for d in sandbox_cgroups(state_dir):
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(d)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def procs_matching(substr, exclude=()):
    """Live processes whose command line contains substr: {pid: cmdline}."""
    substr = str(substr)
    me = os.getpid()
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        if pid == me or pid in exclude:
            continue
        cmd = proc_cmdline(pid)
        if cmd and substr in cmd and pid_alive(pid):
            out[pid] = cmd
    return out


def process_trees(substr, exclude=()):
    """Root pids of the process trees whose members' command lines contain
    substr (a bwrap sandbox is 2-3 processes with the same command line: the
    outside monitor, the namespace's pid 1, ...; it counts once)."""
    procs = procs_matching(substr, exclude)
    roots = []
    for pid in procs:
        if proc_ppid(pid) not in procs:
            roots.append(pid)
    return sorted(roots)


def descendants_and_self(pid):
    """pid and every process below it (host pid namespace view)."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            pp = proc_ppid(int(d))
            if pp is not None:
                children.setdefault(pp, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def wait_until(pred, timeout, interval=0.1):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def read_until(proc, done, timeout):
    """Read proc's stdout (a pipe) until done(bytes read so far) is true, it
    ends, or timeout seconds pass; returns the bytes."""
    out = b""
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    while not done(out) and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.2)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
    return out


# --------------------------------------------------------------------------
# control files


def read_text(path):
    with open(path, "r") as f:
        return f.read()


def read_json(path):
    txt = read_text(path)
    try:
        return json.loads(txt)
    except ValueError as e:
        raise AssertionError(f"{path} is not JSON: {e}: {txt!r}")


def status(sandbox_dir):
    """A sandbox's status once its create has ended (acquire: async: a mkdir
    answers before; the raw file says "creating" meanwhile)."""
    try:
        wait_ready(sandbox_dir)
    except OSError:
        pass  # the status read says what is wrong
    return read_json(Path(sandbox_dir) / "status")


def wait_ready(sandbox_dir):
    """Under `acquire: async` (the default) mkdir of a thread answers once its
    create started: reading its `ready` file returns once the sandbox is
    ready, or raises the create's errno (under `acquire: sync` at once)."""
    with open(Path(sandbox_dir) / "ready") as f:
        return f.read()


def mkdir_ready(sandbox_dir, parents=False):
    """mkdir of a thread and the wait for its sandbox: the create's errno is
    raised whichever `acquire:` mode (from mkdir, or from `ready`)."""
    if parents:
        os.makedirs(sandbox_dir)
    else:
        os.mkdir(sandbox_dir)
    wait_ready(sandbox_dir)


def init_pid(sandbox_dir):
    wait_ready(sandbox_dir)
    st = status(sandbox_dir)
    assert "init_pid" in st, f"status has no init_pid: {st}"
    pid = st["init_pid"]
    assert isinstance(pid, int) and pid > 1, f"bad init_pid in status: {st}"
    return pid


def parse_metrics(text):
    """{'name{labels}': float} for every sample line of Prometheus text."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([A-Za-z_:][A-Za-z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)", line)
        if m:
            try:
                out[m.group(1)] = float(m.group(2))
            except ValueError:
                pass
    return out


def fd_shares(limit):
    """The daemon's descriptor shares for RLIMIT_NOFILE = limit, as
    docs/security.md states them (common/budget.c computes the same)."""
    reserve = min(512 + limit // 16, limit // 2)
    avail = limit - reserve
    data = avail * 3 // 8
    proxy = min((avail * 3 // 8) // 6, 8192)
    s = {"reserve": reserve, "data_cache": max(avail * 3 // 16, 16), "rfiles_cache": max(avail // 16, 4),
         "data": data, "data_sandbox": max(data // 8, 4), "data_user": data // 2,
         "proxy_connections": proxy, "proxy_connections_sandbox": max(min(proxy // 4, 512), 4),
         "proxy_connections_user": proxy // 2}
    for k in ("data", "proxy_connections"):
        s[k + "_user"] = max(s[k + "_user"], s[k + "_sandbox"])
        s[k] = max(s[k], s[k + "_user"])
    return s


def expect_errno(fn, *errnos):
    """Call fn(); it must raise OSError with one of errnos.  Returns the error."""
    try:
        r = fn()
    except OSError as e:
        names = "/".join(errno.errorcode.get(x, str(x)) for x in errnos)
        got = errno.errorcode.get(e.errno, str(e.errno))
        assert e.errno in errnos, f"expected {names}, got {got}: {e}"
        return e
    names = "/".join(errno.errorcode.get(x, str(x)) for x in errnos)
    raise AssertionError(f"expected {names}, but the call succeeded (returned {r!r})")


def errname(e):
    return errno.errorcode.get(e, str(e))


def make_no_build(*args, timeout=170):
    """Run make in the repository for a goal that must not compile (install,
    uninstall, check-man): the suite tests the binaries it was given, and a
    rebuild here would replace them mid-run (an ASan build by a plain one).
    `-o all` keeps make from remaking them; the libfuse variant they were
    built with is passed on, so build/libfuse.mk is not rewritten."""
    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    try:
        m = re.search(r"SBXFS_LIBFUSE=(\w+)", (repo / "build" / "libfuse.mk").read_text())
        if m:
            env["SBXFS_LIBFUSE"] = m.group(1)
    except OSError:
        pass
    return subprocess.run(["make", "-s", "-o", "all", *args], cwd=repo, capture_output=True, text=True,
                          timeout=timeout, env=env)


# ---- spares (pool.prewarm): what tests/test_*spares.py read ------------------------------

def spares(m):
    """The `spares` object of m's .status."""
    return read_json(m.mnt / ".status")["spares"]


def spare_claims(m):
    """(claims that worked, claims that failed) from m's .metrics."""
    mt = parse_metrics(read_text(m.mnt / ".metrics"))
    return (mt.get('sbxfs_spare_claims_total{result="ok"}', 0), mt.get('sbxfs_spare_claims_total{result="failed"}', 0))


def wait_spares(m, n, timeout):
    assert wait_until(lambda: spares(m)["ready"] == n and spares(m)["creating"] == 0, timeout), \
        f"expected {n} ready spares: {spares(m)}; log:\n{m.log[-3000:]}"


def spare_records(m, record, key=None):
    """{spare token: its provider record (state_dir/spares/TOKEN/RECORD), or that key of it}
    of the spares on disk."""
    out = {}
    root = m.state_dir / "spares"
    for d in (root.iterdir() if root.exists() else []):
        try:
            j = json.loads((d / record).read_text())
            out[d.name] = j[key] if key else j
        except (FileNotFoundError, ValueError, KeyError):
            pass
    return out
