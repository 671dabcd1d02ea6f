# SPDX-License-Identifier: MIT
"""A seeded chaos workload against a real sbxfs mount (issue 22).

The harness owns one daemon (its own temporary directory, mount.conf and
state_dir) and N sandboxes spread over a few worker threads.  Each worker
drives its own scopes at random: mkdir (acquire or reclaim), rmdir (release),
file creates, appends, renames and unlinks with fsync through the mount,
skills writes, jobs that write a file from inside the sandbox and exit, jobs
that sleep and are killed, job slot removal.  Meanwhile the main thread
kill -9s the daemon at random moments and restarts it over the stale mount
(now and then after an unmount instead), then stops the workers and checks
the invariants of DESIGN §4 against the model it kept of what was
acknowledged:

  * every byte whose write + fsync (or close) succeeded is there, and a
    file whose operation the kill cut short holds one of its two possible
    contents (old or new), never a third;
  * every sandbox that was active or warm is adopted (the same init after a
    reclaim), none duplicated (one cgroup per scope);
  * nothing is left that no sandbox owns: processes in our cgroups, cgroups,
    mounts, pasta processes, state files (sandbox.json of a scope that does
    not exist, *.tmp.* files of an interrupted atomic write);
  * every job is finished with its output, killed as asked, or marked lost,
    never both, never silently gone.

Everything random comes from one random.Random(seed) per worker (seeded from
the run's seed) and one for the killer, so a seed replays the same choices
(the interleaving with the kills is timing, which a seed cannot fix; a
failure prints the seed, the epoch and the operation log around it).
"""

import errno
import glob
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
SBXFS_BIN = Path(os.environ.get("SBXFS_BIN", str(REPO / "sbxfs")))

# errors an operation may get while the daemon is dead or being killed
DEAD_ERRNOS = {errno.ENOTCONN, errno.ECONNABORTED, errno.EIO, errno.ENOENT, errno.EINTR}


FD_LIMIT = 4096


def _limit_fds():
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


class Violation(AssertionError):
    pass


def token(user, thread):
    return hashlib.sha256(f"{user}:{thread}".encode()).hexdigest()[:16]


def _mounts():
    out = []
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                out.append((parts[1].replace("\\040", " "), parts[2]))
    return out


def _proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def _proc_cgroup(pid):
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return f.read()
    except OSError:
        return ""


def _pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


class Daemon:
    """One sbxfs process on the harness's own directory."""

    def __init__(self, base, provider="local", extra=None):
        self.base = Path(base)
        self.mnt = self.base / "mnt"
        self.state_dir = self.base / "state"
        self.conf = self.base / "mount.conf"
        self.log_path = self.base / "sbxfs.log"
        self.mnt.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base, 0o755)
        os.chmod(self.mnt, 0o755)
        # no spares (pool.prewarm): the invariants below name every cgroup by its
        # scope's token, and a claimed spare keeps the spare's (tests/test_spares.py)
        self.cfg = {"use": provider, "state_dir": str(self.state_dir), "replicas": 64, "idle_timeout": 0,
                    "keep_on_exit": False, "pool": {"prewarm": 0}}
        self.configure(**(extra or {}))
        self.proc = None
        self.key = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:8]

    def configure(self, **keys):
        """Set mount.conf keys (read at the next start)."""
        self.cfg.update(keys)
        self.conf.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in self.cfg.items()))

    def start(self, timeout=30):
        logf = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen([str(SBXFS_BIN), "-f", "-c", str(self.conf), str(self.mnt)],
                                         stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                         preexec_fn=_limit_fds)
        finally:
            logf.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Violation(f"sbxfs exited with {self.proc.returncode} at start; log tail:\n{self.log_tail()}")
            if any(mp == str(self.mnt) and t.startswith("fuse") for mp, t in _mounts()):
                try:
                    # not statvfs: while the new daemon detaches the stale
                    # mount, the bare directory beneath answers statvfs
                    os.stat(self.mnt / ".status")
                    return
                except OSError:
                    pass
            time.sleep(0.02)
        raise Violation(f"sbxfs did not mount within {timeout} s; log tail:\n{self.log_tail()}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def umount(self, lazy=False):
        return subprocess.run(["fusermount3", "-uz" if lazy else "-u", str(self.mnt)],
                              capture_output=True, text=True, timeout=30)

    def stop(self, timeout=60):
        if any(mp == str(self.mnt) for mp, _ in _mounts()):
            r = self.umount()
            if r.returncode != 0:
                self.umount(lazy=True)
        if self.proc is not None:
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
                raise Violation(f"sbxfs did not exit within {timeout} s of fusermount3 -u")
        return None

    def log_tail(self, n=40):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # ---- what the daemon owns, seen from the host
    def cgroup_tokens(self):
        """{token: [cgroup dirs]} of this daemon's sandboxes (providers/cgroup.c names)."""
        out = {}
        for top in ["/sys/fs/cgroup/sbxfs"] + glob.glob("/sys/fs/cgroup/*/sbxfs"):
            try:
                names = os.listdir(top)
            except OSError:
                continue
            for d in names:
                k, _, tok = d.partition("-")
                if k == self.key and os.path.isdir(os.path.join(top, d)):
                    out.setdefault(tok, []).append(os.path.join(top, d))
        return out

    def cgroup_procs(self):
        """{pid: token} of every process in one of our sandbox cgroups."""
        out = {}
        for pid in _pids():
            for line in _proc_cgroup(pid).splitlines():
                path = line.split(":", 2)[-1]
                for part in path.split("/"):
                    k, _, tok = part.partition("-")
                    if k == self.key and len(tok) >= 16:
                        out[pid] = tok[:16]
        return out

    def named_procs(self):
        """{pid: cmdline} of processes naming our state_dir (not the daemon)."""
        me = {os.getpid(), self.proc.pid if self.proc else -1}
        out = {}
        for pid in _pids():
            if pid in me:
                continue
            cmd = _proc_cmdline(pid)
            if cmd and str(self.state_dir) in cmd:
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        st = f.read().rsplit(")", 1)[1].split()[0]
                except OSError:
                    continue
                if st not in ("Z", "X"):
                    out[pid] = cmd
        return out

    def fd_count(self):
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return -1

    def cleanup(self):
        """Best effort after a failure: unmount, kill by pid what names our
        state_dir, remove our cgroups."""
        try:
            if self.alive():
                self.stop(timeout=30)
        except Exception:
            pass
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=30)
        if any(mp == str(self.mnt) for mp, _ in _mounts()):
            self.umount(lazy=True)
        for pid in list(self.named_procs()) + list(self.cgroup_procs()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # the open-mode gateway's pinned namespace (providers/local_gw.c)
        pin = self.state_dir / "gateway" / "netns"
        if any(mp == str(pin) for mp, _ in _mounts()):
            subprocess.run(["umount", "-l", str(pin)], capture_output=True, timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = [d for ds in self.cgroup_tokens().values() for d in ds]
            if not left:
                break
            for d in left:
                for root, dirs, _ in sorted(os.walk(d), key=lambda x: -x[0].count("/")):
                    try:
                        os.rmdir(root)
                    except OSError:
                        pass
            time.sleep(0.1)


# --------------------------------------------------------------------------
# the model of what was acknowledged


class Scope:
    def __init__(self, user, thread):
        self.user, self.thread = user, thread
        self.token = token(user, thread)
        self.state = "absent"   # absent | active | warm | unknown
        self.init_pid = None    # the init seen when last acquired
        self.files = {}         # (dir, name) -> bytes acknowledged
        self.maybe = {}         # (dir, name) -> set of possible contents (None = absent)
        self.jobs = {}          # name -> dict(kind, content, killed)
        self.maybe_jobs = set() # slots whose creation or removal the kill cut short
        self.counter = 0
        self.mode = None        # network_mode it was created with
        self.net = None         # chaos_net.NetModel when the run has network decisions

    @property
    def rel(self):
        return f"{self.user}/{self.thread}"


class Chaos:
    def __init__(self, seed, duration=120.0, kills=20, sandboxes=8, workers=4, provider="local",
                 base=None, log=print, umount_every=4, network=True, net_share=0.12):
        self.seed = seed
        self.duration = duration
        self.kills_wanted = kills
        self.provider = provider
        self.log = log
        self.umount_every = umount_every
        self.rng = random.Random(seed)
        self.base = Path(base or tempfile.mkdtemp(prefix=f"sbxfs-chaos-{seed}-"))
        self.d = Daemon(self.base, provider)
        users = ["u0", "u1"]
        self.scopes = [Scope(users[i % 2], f"t{i}") for i in range(sandboxes)]
        self.nworkers = workers
        self.container_prefix = None  # docker: the run's container names (run.py)
        self.epoch = 0
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.paused = True
        self.in_flight = 0
        self.stop_flag = False
        self.violations = []
        self.oplog = []          # (time, epoch, worker, text), bounded
        self.stats = {"ops": 0, "ops_failed_by_kill": 0, "kills": 0, "umounts": 0, "checks": 0,
                      "jobs": 0, "bytes_acked": 0, "fd_max": 0, "restart_s_max": 0.0}
        # network decisions (chaos_net.py): the first sandboxes are created in
        # another mode (open; isolated for docker, which has no bridge here),
        # the others after a restart into allowlist + prompt
        self.net = None
        self.net_share = net_share  # of an allowlist sandbox's operations
        self.first_mode = "open" if provider == "local" else "isolated"
        if network:
            import chaos_net
            self.net = chaos_net.NetChaos(self)
            for s in self.scopes:
                s.net = chaos_net.NetModel()
            self.d.configure(network={"mode": self.first_mode})

    # ---- bookkeeping
    def note(self, wid, text):
        with self.lock:
            self.oplog.append((round(time.monotonic(), 3), self.epoch, wid, text))
            if len(self.oplog) > 4000:
                del self.oplog[:1000]

    def violate(self, text):
        with self.lock:
            self.violations.append(f"[epoch {self.epoch}] {text}")
        self.log(f"VIOLATION: {text}")

    def p(self, scope, *parts):
        return self.d.mnt.joinpath(scope.user, scope.thread, *parts)

    # ---- the workers
    def _enter(self):
        with self.cond:
            while self.paused and not self.stop_flag:
                self.cond.wait(0.2)
            if self.stop_flag:
                return None
            self.in_flight += 1
            return self.epoch

    def _leave(self):
        with self.cond:
            self.in_flight -= 1
            self.cond.notify_all()

    def worker(self, wid, scopes):
        rng = random.Random(f"{self.seed}-{wid}")
        while True:
            ep = self._enter()
            if ep is None:
                return
            s = rng.choice(scopes)
            try:
                self.step(wid, rng, s, ep)
            except Violation as e:
                self.violate(str(e))
            except Exception as e:  # a harness bug must not hang the run
                self.violate(f"{s.rel}: harness error {type(e).__name__}: {e}")
            finally:
                self._leave()

    def failed(self, ep, e, allowed=()):
        """An operation of epoch ep failed with e: expected when the daemon
        was killed since (return True), else a violation."""
        with self.lock:
            killed = ep != self.epoch
        if killed and isinstance(e, OSError):
            self.stats["ops_failed_by_kill"] += 1
            return True
        if isinstance(e, OSError) and e.errno in allowed:
            return False
        raise Violation(f"unexpected error with the daemon up: {type(e).__name__}: {e}")

    def step(self, wid, rng, s, ep):
        self.stats["ops"] += 1
        if s.state in ("absent", "warm", "unknown"):
            return self.op_acquire(wid, s, ep)
        if self.net and s.mode == "allowlist" and rng.random() < self.net_share:
            return self.net.step(wid, rng, s, ep)
        r = rng.random()
        if r < 0.06:
            return self.op_release(wid, s, ep)
        if r < 0.30:
            return self.op_write(wid, rng, s, ep, "workspace")
        if r < 0.45:
            return self.op_append(wid, rng, s, ep)
        if r < 0.52:
            return self.op_rename(wid, rng, s, ep)
        if r < 0.58:
            return self.op_unlink(wid, rng, s, ep)
        if r < 0.66:
            return self.op_write(wid, rng, s, ep, "skills")
        if r < 0.80:
            return self.op_job(wid, rng, s, ep, "write")
        if r < 0.85:
            return self.op_job(wid, rng, s, ep, "sleep")
        if r < 0.92:
            return self.op_job_kill(wid, rng, s, ep)
        return self.op_job_rmdir(wid, rng, s, ep)

    def op_acquire(self, wid, s, ep):
        d = self.p(s)
        prev = s.state
        self.note(wid, f"mkdir {s.rel} ({prev})")
        try:
            os.makedirs(d)
        except OSError as e:
            if e.errno == errno.EEXIST and prev == "unknown":
                pass  # the cut mkdir did land
            elif self.failed(ep, e):
                s.state = "unknown"
                return
        try:
            # acquire: async: the mkdir answered once the create started; the
            # sandbox is acknowledged (active, to be adopted) once ready says so
            (d / "ready").read_text()
            st = json.loads((d / "status").read_text())
        except (OSError, ValueError) as e:
            if isinstance(e, ValueError):
                raise Violation(f"{s.rel}: status is not JSON: {e}")
            if self.failed(ep, e):
                s.state = "unknown"
                return
        pid = st.get("init_pid")
        if prev == "warm" and s.init_pid and pid != s.init_pid:
            raise Violation(f"{s.rel}: reclaim of a warm sandbox gave init {pid}, it was {s.init_pid}")
        mode = st.get("network_mode")
        if s.init_pid is None or pid != s.init_pid:  # a new sandbox
            s.mode = mode
            if s.net:
                s.net.reset()
        elif mode != s.mode:
            raise Violation(f"{s.rel}: created in network mode {s.mode}, its status now says {mode}")
        s.init_pid = pid
        s.state = "active"

    def op_release(self, wid, s, ep):
        self.note(wid, f"rmdir {s.rel}")
        try:
            os.rmdir(self.p(s))
            s.state = "warm"
        except OSError as e:
            if self.failed(ep, e):
                s.state = "unknown"

    def _write_file(self, path, data, append=False):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC), 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)

    def _payload(self, rng, s, tag):
        s.counter += 1
        n = rng.choice([1, 17, 512, 4096, 70000])
        head = f"{s.token}:{tag}:{s.counter}:".encode()
        return (head * (n // len(head) + 1))[:n]

    def op_write(self, wid, rng, s, ep, where):
        names = [k[1] for k in s.files if k[0] == where]
        name = rng.choice(names) if names and rng.random() < 0.3 else f"f{s.counter + 1}"
        key = (where, name)
        data = self._payload(rng, s, name)
        old = s.files.get(key)
        self.note(wid, f"write {s.rel}/{where}/{name} {len(data)}")
        try:
            self._write_file(self.p(s, where, name), data)
        except OSError as e:
            if self.failed(ep, e):
                s.files.pop(key, None)
                # O_TRUNC then write: the old content, or any prefix of the new
                s.maybe[key] = {old, ("prefix", b"", data)} | s.maybe.get(key, set())
            return
        s.files[key] = data
        s.maybe.pop(key, None)
        self.stats["bytes_acked"] += len(data)

    def op_append(self, wid, rng, s, ep):
        names = [k for k in s.files if k[0] == "workspace"]
        if not names:
            return self.op_write(wid, rng, s, ep, "workspace")
        key = rng.choice(names)
        data = self._payload(rng, s, "a")
        old = s.files[key]
        self.note(wid, f"append {s.rel}/{key[1]} {len(data)}")
        try:
            self._write_file(self.p(s, *key), data, append=True)
        except OSError as e:
            if self.failed(ep, e):
                del s.files[key]
                # a cut append may have landed in part: any prefix of it
                s.maybe[key] = {("prefix", old, old + data)}
            return
        s.files[key] = old + data
        self.stats["bytes_acked"] += len(data)

    def op_rename(self, wid, rng, s, ep):
        names = [k for k in s.files if k[0] == "workspace"]
        if not names:
            return
        key = rng.choice(names)
        s.counter += 1
        new = ("workspace", f"r{s.counter}")
        self.note(wid, f"rename {s.rel}/{key[1]} -> {new[1]}")
        data = s.files[key]
        try:
            os.rename(self.p(s, *key), self.p(s, *new))
            # rename is durable once the directory is fsynced
            dfd = os.open(self.p(s, "workspace"), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as e:
            if self.failed(ep, e):
                del s.files[key]
                s.maybe[key] = {data, None}
                s.maybe[new] = {data, None}
            return
        del s.files[key]
        s.files[new] = data

    def op_unlink(self, wid, rng, s, ep):
        names = list(s.files)
        if not names:
            return
        key = rng.choice(names)
        self.note(wid, f"unlink {s.rel}/{key[0]}/{key[1]}")
        data = s.files[key]
        try:
            os.unlink(self.p(s, *key))
        except OSError as e:
            if self.failed(ep, e):
                del s.files[key]
                s.maybe[key] = {data, None}
            return
        del s.files[key]

    def op_job(self, wid, rng, s, ep, kind):
        if len(s.jobs) >= 12:
            return self.op_job_rmdir(wid, rng, s, ep)
        s.counter += 1
        name = f"j{s.counter}"
        content = f"job {name} of {s.token}\n"
        if kind == "write":
            # written and fsynced from inside the sandbox, then announced
            cmd = f"printf '%s' '{content.strip()}' > jf-{name} && sync jf-{name} && echo out-{name}"
        else:
            cmd = "sleep 8; echo late"
        jd = self.p(s, "jobs", name)
        self.note(wid, f"job {s.rel}/{name} {kind}")
        try:
            os.mkdir(jd)
        except OSError as e:
            if self.failed(ep, e):
                s.maybe_jobs.add(name)
            return
        s.jobs[name] = {"kind": kind, "content": content.strip(), "killed": False, "started": False}
        try:
            with open(jd / "cmd", "w") as f:
                f.write(cmd)
        except OSError as e:
            if self.failed(ep, e):
                s.jobs[name]["started"] = None  # unknown
            return
        s.jobs[name]["started"] = True
        self.stats["jobs"] += 1

    def op_job_kill(self, wid, rng, s, ep):
        cands = [n for n, j in s.jobs.items() if j["kind"] == "sleep" and j["started"] and not j["killed"]]
        if not cands:
            return
        name = rng.choice(cands)
        self.note(wid, f"kill {s.rel}/jobs/{name}")
        try:
            with open(self.p(s, "jobs", name, "ctl"), "w") as f:
                f.write("kill")
        except OSError as e:
            if e.errno == errno.ESRCH:
                return  # it has ended on its own (or is being reattached): DESIGN §6
            if self.failed(ep, e):
                s.jobs[name]["killed"] = None  # maybe
            return
        s.jobs[name]["killed"] = True

    def op_job_rmdir(self, wid, rng, s, ep):
        if not s.jobs:
            return
        name = rng.choice(sorted(s.jobs))
        self.note(wid, f"rmdir {s.rel}/jobs/{name}")
        try:
            os.rmdir(self.p(s, "jobs", name))
        except OSError as e:
            if e.errno in (errno.EBUSY, errno.ENOTEMPTY):
                return  # still running: DESIGN §6
            if self.failed(ep, e, allowed=(errno.EBUSY,)):
                s.maybe_jobs.add(name)
                del s.jobs[name]
            return
        del s.jobs[name]

    # ---- the checks
    def check_file(self, s, key, live):
        path = self.p(s, *key) if live else self.d.state_dir.joinpath(
            "users", s.user, "threads", s.thread, *(["user-data", key[0]] if key[0] != "skills" else ["skills"]),
            key[1])
        try:
            got = Path(path).read_bytes()
        except FileNotFoundError:
            got = None
        if key in s.files:
            want = s.files[key]
            if got != want:
                raise Violation(f"{s.rel}/{key[0]}/{key[1]}: acknowledged {len(want)} bytes, found "
                                f"{'nothing' if got is None else len(got)}"
                                f"{'' if got is None else ' (differ at ' + str(_diff_at(got, want)) + ')'}")
            return
        poss = s.maybe.get(key, set())
        for p in poss:
            if isinstance(p, tuple) and p and p[0] == "prefix":
                _, old, new = p
                if got is not None and got.startswith(old) and new.startswith(got):
                    s.files[key] = got
                    break
            elif p == got:
                if got is not None:
                    s.files[key] = got
                break
        else:
            raise Violation(f"{s.rel}/{key[0]}/{key[1]}: after a cut operation found "
                            f"{'nothing' if got is None else str(len(got)) + ' bytes'}, "
                            f"none of the {len(poss)} possible contents")
        s.maybe.pop(key, None)

    def check_scope_files(self, s, live):
        for key in sorted(set(s.files) | set(s.maybe)):
            self.check_file(s, key, live)
        s.maybe.clear()
        if live:
            for where in ("workspace", "skills"):
                try:
                    names = os.listdir(self.p(s, where))
                except OSError as e:
                    raise Violation(f"{s.rel}/{where}: cannot list: {e}")
                for n in names:
                    if n.startswith("jf-"):
                        continue
                    if (where, n) not in s.files:
                        raise Violation(f"{s.rel}/{where}/{n}: a file no acknowledged operation left")

    def check_jobs(self, s):
        for name in sorted(s.maybe_jobs):
            if not self.p(s, "jobs", name).exists():
                continue
            s.jobs.setdefault(name, {"kind": "unknown", "content": None, "killed": False, "started": None})
        s.maybe_jobs.clear()
        try:
            present = set(os.listdir(self.p(s, "jobs")))
        except OSError as e:
            raise Violation(f"{s.rel}/jobs: cannot list: {e}")
        for name in sorted(present - set(s.jobs)):
            raise Violation(f"{s.rel}/jobs/{name}: a job slot nobody created")
        for name, j in sorted(s.jobs.items()):
            if name not in present:
                raise Violation(f"{s.rel}/jobs/{name}: silently gone (state {j})")
            try:
                st = json.loads(self.p(s, "jobs", name, "status").read_text())
            except (OSError, ValueError) as e:
                raise Violation(f"{s.rel}/jobs/{name}/status unreadable: {e}")
            state = st.get("state")
            if j["started"] is True and state == "created":
                raise Violation(f"{s.rel}/jobs/{name}: cmd was acknowledged but state is created")
            if state in ("exited", "killed", "timed_out", "lost"):
                self.check_finished_job(s, name, j, st)

    def check_finished_job(self, s, name, j, st):
        state = st["state"]
        out = self.p(s, "jobs", name, "stdout").read_text(errors="replace")
        try:
            fd = os.open(self.p(s, "jobs", name, "exit"), os.O_RDONLY | os.O_NONBLOCK)
            try:
                ex = os.read(fd, 64).decode().strip()
            finally:
                os.close(fd)
        except OSError as e:
            raise Violation(f"{s.rel}/jobs/{name}: state {state} but exit unreadable: {e}")
        if state == "lost":
            if out.strip() and j["kind"] == "write" and out.strip() == f"out-{name}" and ex == "0":
                raise Violation(f"{s.rel}/jobs/{name}: marked lost but has its full output and exit 0")
            return
        if not ex.lstrip("-").isdigit():
            raise Violation(f"{s.rel}/jobs/{name}: state {state} but exit is {ex!r}")
        if j["kind"] == "write" and state == "exited":
            if ex != "0" or out != f"out-{name}\n":
                raise Violation(f"{s.rel}/jobs/{name}: exited {ex} with stdout {out!r}")
            got = self.p(s, "workspace", f"jf-{name}").read_text()
            if got != j["content"]:
                raise Violation(f"{s.rel}/jobs/{name}: exited 0 but its fsynced file holds {got!r}")
        if j["kind"] == "sleep" and j["killed"] is True and state == "exited" and ex == "0" and "late" not in out:
            raise Violation(f"{s.rel}/jobs/{name}: killed but exited 0 without its output")

    def check_leaks(self, when):
        d = self.d
        live = {s.token for s in self.scopes if s.state in ("active", "warm")}
        maybe = {s.token for s in self.scopes if s.state == "unknown"}
        cg = d.cgroup_tokens()
        for tok in sorted(set(cg) - live - maybe):
            raise Violation(f"{when}: cgroup of a sandbox that does not exist: {cg[tok]}")
        for tok in sorted(live - set(cg)):
            if self.provider == "local":
                raise Violation(f"{when}: sandbox {tok} is live but has no cgroup")
        for pid, tok in sorted(d.cgroup_procs().items()):
            if tok not in live and tok not in maybe:
                raise Violation(f"{when}: process {pid} ({_proc_cmdline(pid)!r}) in the cgroup of {tok}, "
                                f"which no sandbox owns")
        if self.container_prefix:
            self.check_containers(when, live, maybe)
        ours = [(mp, t) for mp, t in _mounts() if mp.startswith(str(self.base))]
        if ours != [(str(d.mnt), "fuse.sbxfs")] and [t for _, t in ours].count("fuse.sbxfs") != 1:
            raise Violation(f"{when}: mounts under the run's directory: {ours}")
        # pasta: the open-mode gateway's one (providers/local_gw.c), recorded
        # in state/gateway/gateway.json, and with network.gateway: false one
        # per open local sandbox, each recorded in the local.json of a
        # sandbox that exists
        owned = set()
        try:
            owned.add(json.loads((d.state_dir / "gateway" / "gateway.json").read_text()).get("pasta_pid"))
        except (OSError, ValueError):
            pass
        for tf in (d.state_dir / "users").glob("*/threads/*"):
            tok = token(tf.parent.parent.name, tf.name)
            try:
                rec = json.loads((tf / "local.json").read_text())
            except (OSError, ValueError):
                continue
            if tok in live or tok in maybe:
                owned.add(rec.get("pasta_pid"))
        for pid, cmd in d.named_procs().items():
            if "pasta" in cmd.split(" ", 1)[0] and pid not in owned:
                raise Violation(f"{when}: pasta {pid} that no sandbox owns: {cmd[:200]}")
        threads = d.state_dir / "users"
        for tf in threads.glob("*/threads/*"):
            if (tf / "sandbox.json").exists():
                tok = token(tf.parent.parent.name, tf.name)
                if tok not in live and tok not in maybe:
                    raise Violation(f"{when}: {tf}/sandbox.json of a sandbox that does not exist")
        tmps = []
        for root, dirs, files in os.walk(d.state_dir):
            if "user-data" in Path(root).parts or "skills" in Path(root).parts:
                dirs[:] = []
                continue
            tmps += [Path(root, f) for f in files if ".tmp." in f]
        # a kill's leftover stays; the live daemon's own atomic write in
        # flight (a job ending during the check writes its result) is gone
        # a moment later
        deadline = time.monotonic() + 3.0
        while tmps and time.monotonic() < deadline:
            time.sleep(0.1)
            tmps = [t for t in tmps if t.exists()]
        if tmps:
            raise Violation(f"{when}: half-written state file left: {tmps[0]}")
        n = d.fd_count()
        self.stats["fd_max"] = max(self.stats["fd_max"], n)
        # the daemon runs with RLIMIT_NOFILE = FD_LIMIT: its shares (docs/security.md)
        # keep a cache of O_PATH handles of up to 3/16 of it; what it holds must stay
        # well inside the limit whatever the workload did before
        if n > FD_LIMIT // 2:
            kinds = {}
            for fd in os.listdir(f"/proc/{d.proc.pid}/fd"):
                try:
                    t = os.readlink(f"/proc/{d.proc.pid}/fd/{fd}")
                except OSError:
                    continue
                t = t.split("[")[0] if "[" in t else os.path.basename(t)
                kinds[t] = kinds.get(t, 0) + 1
            top = sorted(kinds.items(), key=lambda x: -x[1])[:8]
            raise Violation(f"{when}: the daemon holds {n} fds for {len(self.scopes)} sandboxes: {top}")

    def check_containers(self, when, live, maybe):
        """docker: one container per live scope (named <prefix>-<token>), none more."""
        r = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}", "--filter",
                            f"name=^{self.container_prefix}-"], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise Violation(f"{when}: docker ps failed: {r.stderr.strip()}")
        toks = {n.rsplit("-", 1)[1] for n in r.stdout.split()}
        for tok in sorted(toks - live - maybe):
            raise Violation(f"{when}: container {self.container_prefix}-{tok} that no sandbox owns")
        for tok in sorted(live - toks):
            raise Violation(f"{when}: sandbox {tok} is live but has no container")

    def check_after_restart(self):
        """The daemon was killed and restarted: every sandbox is adopted warm,
        nothing leaks, every acknowledged byte and job is there."""
        when = f"restart {self.stats['kills']}"
        st = json.loads((self.d.mnt / ".status").read_text())
        live = [s for s in self.scopes if s.state in ("active", "warm")]
        maybe = [s for s in self.scopes if s.state == "unknown"]
        total = st.get("active", 0) + st.get("warm", 0)
        if st.get("active", 0) != 0:
            raise Violation(f"{when}: {st['active']} sandboxes active right after a restart: {st}")
        if not len(live) <= total <= len(live) + len(maybe):
            raise Violation(f"{when}: {total} sandboxes adopted, expected {len(live)}"
                            f"{'..' + str(len(live) + len(maybe)) if maybe else ''}: {st}")
        self.check_leaks(when)
        for s in self.scopes:
            if s.state == "absent":
                continue
            # unknown (a cut mkdir or rmdir): the same init, or a new sandbox
            # (op_acquire tells them apart by the init)
            s.state = "warm" if s.state != "unknown" else "unknown"
            self.op_acquire("check", s, self.epoch)
            if s.state != "active":
                raise Violation(f"{s.rel}: could not reclaim after restart")
            self.check_scope_files(s, live=True)
            self.check_jobs(s)
            if self.net and s.mode == "allowlist":
                self.net.check(s)
        # after the reclaims: one cgroup per live scope, none more
        self.check_leaks(when + " (after reclaim)")
        if self.net:
            self.net.check_netns(when + " (after reclaim)", {s.token: s.init_pid for s in self.scopes
                                                             if s.state == "active"})
            allow = [s for s in self.scopes if s.mode == "allowlist" and s.state == "active"]
            if allow:
                s = self.rng.choice(allow)
                self.net.probe(s, self.rng)
                if self.stats["kills"] % 5 == 0:
                    self.net.hostile(s)
        self.stats["checks"] += 1

    # ---- the run
    def restart(self):
        t0 = time.monotonic()
        if self.umount_every and self.stats["kills"] % self.umount_every == 0:
            self.d.umount(lazy=True)  # now and then: unmount, then mount
            self.stats["umounts"] += 1
        self.d.start()
        self.stats["restart_s_max"] = max(self.stats["restart_s_max"], round(time.monotonic() - t0, 3))

    def pause(self, timeout=60):
        with self.cond:
            self.paused = True
            deadline = time.monotonic() + timeout
            while self.in_flight and time.monotonic() < deadline:
                self.cond.wait(0.2)
            if self.in_flight:
                raise Violation(f"{self.in_flight} operations still in flight {timeout} s after a kill")

    def resume(self):
        with self.cond:
            self.paused = False
            self.cond.notify_all()

    def run(self):
        self.log(f"chaos: seed {self.seed}, {self.duration:.0f} s, >= {self.kills_wanted} kills, "
                 f"{len(self.scopes)} sandboxes, provider {self.provider}, dir {self.base}")
        t_end = time.monotonic() + self.duration
        threads = []
        finished = False
        try:
            self.d.start()
            if self.net:
                try:
                    self.first_sandboxes()
                except Violation as e:
                    self.violate(str(e))
            per = [self.scopes[i::self.nworkers] for i in range(self.nworkers)]
            for wid, sc in enumerate(per):
                t = threading.Thread(target=self.worker, args=(wid, sc), daemon=True)
                t.start()
                threads.append(t)
            if not self.violations:
                self.resume()
            while not self.violations:
                left = t_end - time.monotonic()
                if left <= 0 and self.stats["kills"] >= self.kills_wanted:
                    break
                if self.kills_wanted == 0:  # load only: the invariants at the end
                    if left <= 0:
                        break
                    time.sleep(min(left, 5.0))
                    continue
                kills_left = max(self.kills_wanted - self.stats["kills"], 1)
                mean = max(min(left / kills_left, 6.0), 0.3) if left > 0 else 0.3
                time.sleep(self.rng.uniform(0.2, 1.6) * mean * 0.6)
                with self.lock:
                    self.paused = True  # no new operation; those in flight meet the kill
                    self.epoch += 1
                self.d.kill9()
                self.stats["kills"] += 1
                self.pause()
                self.restart()
                try:
                    self.check_after_restart()
                except Violation as e:
                    self.violate(str(e))
                    break
                self.resume()
            self.pause()
            if not self.violations:
                self.final_check()
            finished = True
        finally:
            with self.cond:
                self.stop_flag = True
                self.cond.notify_all()
            for t in threads:
                t.join(timeout=30)
            if self.violations or not finished:  # or a harness error: nothing left behind
                self.d.cleanup()
            if self.net:
                self.net.close()
                self.stats.update(self.net.stats)
        return self.report()

    def first_sandboxes(self):
        """Network runs: half the sandboxes made in the first mode, then a
        kill -9 and a restart into allowlist + prompt (they keep their mode)."""
        for s in self.scopes[::2]:
            self.op_acquire("first", s, self.epoch)
            if s.state != "active" or s.mode != self.first_mode:
                raise Violation(f"{s.rel}: not created in {self.first_mode}: state {s.state}, mode {s.mode}")
        with self.lock:
            self.epoch += 1
        self.d.kill9()
        self.stats["kills"] += 1
        self.d.configure(network=self.net.config())
        self.restart()
        self.check_after_restart()

    def final_check(self):
        """Stop cleanly: every sandbox ends, data stays on disk, nothing left."""
        for s in self.scopes:
            if s.state in ("active",):
                self.check_scope_files(s, live=True)
                self.check_jobs(s)
        rc = self.d.stop()
        if rc != 0:
            self.violate(f"sbxfs exited {rc} after fusermount3 -u; log:\n{self.d.log_tail()}")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (self.d.cgroup_procs() or self.d.named_procs()):
            time.sleep(0.1)
        if self.d.cgroup_procs() or self.d.named_procs():
            self.violate(f"processes survive shutdown: {self.d.cgroup_procs()} {self.d.named_procs()}")
        if self.d.cgroup_tokens():
            self.violate(f"cgroups survive shutdown: {self.d.cgroup_tokens()}")
        if self.container_prefix:
            try:
                self.check_containers("after shutdown", set(), set())
            except Violation as e:
                self.violate(str(e))
        if any(mp.startswith(str(self.base)) for mp, _ in _mounts()):
            self.violate("a mount survives shutdown")
        for s in self.scopes:
            try:
                self.check_scope_files(s, live=False)
            except Violation as e:
                self.violate(f"on disk after shutdown: {e}")

    def report(self):
        ok = not self.violations
        lines = [f"chaos seed {self.seed}: {'PASS' if ok else 'FAIL'} {json.dumps(self.stats)}"]
        if not ok:
            lines += [f"  {v}" for v in self.violations[:10]]
            lines.append(f"  replay: python3 tests/chaos/run.py --seed {self.seed} "
                         f"--provider {self.provider} (dir {self.base})")
            with open(self.base / "oplog.txt", "w") as f:
                f.writelines(f"{t} e{ep} w{w} {txt}\n" for t, ep, w, txt in self.oplog)
            lines.append(f"  operation log: {self.base / 'oplog.txt'}; last operations:")
            lines += [f"    {t} e{ep} w{w} {txt}" for t, ep, w, txt in self.oplog[-30:]]
            lines.append("  daemon log tail:\n" + self.d.log_tail())
        return ok, "\n".join(lines)

    def remove(self):
        if not any(mp.startswith(str(self.base)) for mp, _ in _mounts()):
            shutil.rmtree(self.base, ignore_errors=True)


def _diff_at(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))
