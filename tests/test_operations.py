# SPDX-License-Identifier: MIT
"""Operations (issue 13): the daemon as an administrator installs and runs
it.  `make install` and `make uninstall`; mount(8) through Debian's
mount.fuse3 and an fstab line (`mount -a -T`); the generic options fstab
adds; `--check-config`; systemd's notify protocol (READY=1 only once the
mount answers, RELOADING/READY around a SIGHUP sent with kill, STOPPING=1,
WATCHDOG=1); the man pages (lint, --help, --version); .health and the
Prometheus exposition of .metrics.

systemd is not pid 1 on the machines this suite runs on, so no test calls a
real systemctl: the units are checked with `systemd-analyze verify` (which
needs no running systemd), the notify protocol with a datagram socket of the
test's own as NOTIFY_SOCKET, and `systemctl reload` with the signal its
ExecReload= sends (kill -HUP)."""

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest

import conftest
import sbxutil
from sbxutil import read_json, read_text, wait_until
from test_jobs import cat, mkjob, start, wait_exit

REPO = Path(__file__).resolve().parent.parent
SBXFS = conftest.SBXFS_BIN
VERSION_RE = re.compile(r"^\.Os sbxfs (\S+)$", re.M)


def make(*args, timeout=170):
    return sbxutil.make_no_build(*args, timeout=timeout)


def mode(p):
    return stat.S_IMODE(os.lstat(p).st_mode)


# --------------------------------------------------------------------------
# make install / uninstall


@pytest.mark.timeout_s(180)
def test_make_install_layout_modes_and_uninstall(tmp_path):
    dest = tmp_path / "root"
    r = make("install", f"DESTDIR={dest}", "PREFIX=/usr/local")
    assert r.returncode == 0, r.stdout + r.stderr
    usr = dest / "usr" / "local"
    expect = {
        usr / "bin" / "sbxfs": 0o755,
        usr / "libexec" / "sbxfs" / "sbxfs-exec": 0o755,
        usr / "libexec" / "sbxfs" / "sbxfs-init": 0o755,
        usr / "share" / "man" / "man8" / "sbxfs.8": 0o644,
        usr / "share" / "man" / "man5" / "sbxfs.conf.5": 0o644,
        usr / "lib" / "systemd" / "system" / "sbxfs.service": 0o644,
        usr / "share" / "doc" / "sbxfs" / "examples" / "sbx.mount": 0o644,
        usr / "share" / "doc" / "sbxfs" / "examples" / "sbxfs.service.d" / "docker.conf": 0o644,
        dest / "etc" / "sbxfs" / "mount.conf": 0o600,
    }
    for p, m in expect.items():
        assert p.is_file(), f"{p} not installed"
        assert mode(p) == m, f"{p}: mode {oct(mode(p))}, expected {oct(m)}"
    # the DeerFlow package, where Debian's python3 looks for this prefix
    pyver = "%d.%d" % tuple(int(x) for x in subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True,
        timeout=30).stdout.split())
    site = usr / "lib" / f"python{pyver}" / "dist-packages"
    assert (site / "sbxfs_deerflow" / "provider.py").is_file() and list(site.glob("sbxfs_deerflow-*.dist-info"))
    r = subprocess.run(["/usr/bin/python3", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); "
                        "import sbxfs_deerflow; print(sbxfs_deerflow.SbxfsSandboxProvider.__name__)"],
                       capture_output=True, text=True, timeout=30)
    assert r.stdout == "SbxfsSandboxProvider\n", r.stderr
    assert str(usr / "lib" / f"python{pyver}" / "dist-packages").replace(str(dest), "") in subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print(sys.path)"], capture_output=True, text=True,
        timeout=30).stdout, "the site directory is not on Debian's python3 path"
    assert not (REPO / "python" / "build").exists() and not list((REPO / "python").glob("*.egg-info"))
    state = dest / "var" / "lib" / "sbxfs"
    assert state.is_dir() and mode(state) == 0o700, f"state_dir mode {oct(mode(state))}"
    unit = (usr / "lib" / "systemd" / "system" / "sbxfs.service").read_text()
    assert "ExecStart=/usr/local/bin/sbxfs -f " in unit, unit
    assert "@" not in unit.replace("$MAINPID", ""), "unsubstituted @VAR@ in the unit"
    conf = (dest / "etc" / "sbxfs" / "mount.conf").read_text()
    assert "state_dir: /var/lib/sbxfs" in conf

    # the installed binary finds its helpers in ../libexec/sbxfs (the
    # preflight of --check-config looks for them), and its config is good
    good = tmp_path / "good.conf"
    good.write_text(f"state_dir: {tmp_path}/never\n")
    r = subprocess.run([str(usr / "bin" / "sbxfs"), "--check-config", str(good)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "never").exists()

    # an existing mount.conf is never replaced, and keeps its mode
    mine = "# the administrator's\nreplicas: 9\n"
    (dest / "etc" / "sbxfs" / "mount.conf").write_text(mine)
    r = make("install", f"DESTDIR={dest}", "PREFIX=/usr/local")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (dest / "etc" / "sbxfs" / "mount.conf").read_text() == mine
    assert mode(dest / "etc" / "sbxfs" / "mount.conf") == 0o600
    assert "keeping" in r.stdout, r.stdout

    # uninstall removes what install put there, keeps configuration and data
    (state / "users").mkdir()
    r = make("uninstall", f"DESTDIR={dest}", "PREFIX=/usr/local")
    assert r.returncode == 0, r.stdout + r.stderr
    for p in expect:
        if p.name != "mount.conf":
            assert not p.exists(), f"{p} left by make uninstall"
    assert not site.exists(), f"{site} left by make uninstall"
    assert (dest / "etc" / "sbxfs" / "mount.conf").read_text() == mine
    assert (state / "users").is_dir()


# --------------------------------------------------------------------------
# systemd units (systemd is not pid 1 here: verify only)


@pytest.mark.timeout_s(180)
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed (package systemd)")
def test_units_pass_systemd_analyze_verify(tmp_path):
    """Installed without DESTDIR under a temporary prefix, so that the
    binaries the units name exist (verify checks them), and the man: links
    resolve against the installed pages."""
    pre = tmp_path / "usr"
    r = make("install", f"PREFIX={pre}", f"SYSCONFDIR={tmp_path}/etc", f"STATEDIR={tmp_path}/state")
    assert r.returncode == 0, r.stdout + r.stderr
    service = pre / "lib" / "systemd" / "system" / "sbxfs.service"
    mount_unit = tmp_path / "sbx.mount"  # the name must match Where=/sbx
    shutil.copy(pre / "share" / "doc" / "sbxfs" / "examples" / "sbx.mount", mount_unit)
    env = dict(os.environ, MANPATH=str(pre / "share" / "man"))
    man = [] if shutil.which("man") else ["--man=no"]
    for unit in (service, mount_unit):
        r = subprocess.run(["systemd-analyze", "verify", *man, str(unit)], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode == 0 and not r.stderr.strip(), f"{unit.name}:\n{r.stdout}{r.stderr}"

    text = service.read_text()
    for line in ("Type=notify", "NotifyAccess=main", "KillMode=process", "Restart=on-failure",
                 "ExecReload=/bin/kill -HUP $MAINPID", f"ExecReload={pre}/bin/sbxfs --check-config ${{SBXFS_CONFIG}}",
                 f"ExecStartPre={pre}/bin/sbxfs --check-config ${{SBXFS_CONFIG}}", "WatchdogSec="):
        assert line in text, f"sbxfs.service lacks {line!r}"
    after = [ln for ln in text.splitlines() if ln.startswith("After=")]
    assert after and "docker.service" in after[0], after
    assert not re.search(r"^(Wants|Requires)=.*docker", text, re.M), "docker must not be pulled in by default"
    mtext = mount_unit.read_text()
    for line in ("What=sbxfs", "Where=/sbx", "Type=fuse.sbxfs", f"Options=config={tmp_path}/etc/sbxfs/mount.conf"):
        assert line in mtext, f"sbx.mount lacks {line!r}"
    r = make("uninstall", f"PREFIX={pre}", f"SYSCONFDIR={tmp_path}/etc", f"STATEDIR={tmp_path}/state")
    assert r.returncode == 0 and not service.exists()


# --------------------------------------------------------------------------
# mount(8) through mount.fuse3, fstab


class Helper:
    """mount.fuse3 runs the helper named by the type (fuse.NAME -> NAME)
    through /bin/sh with its default PATH (mount(8) passes helpers no PATH):
    a uniquely named link to this tree's sbxfs in /usr/local/sbin, so that
    concurrent runs never share one; removed afterwards."""

    def __init__(self):
        self.name = f"sbxfs-t{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.link = Path("/usr/local/sbin") / self.name

    def __enter__(self):
        self.link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(SBXFS, self.link)
        return self

    def __exit__(self, *exc):
        try:
            self.link.unlink()
        except FileNotFoundError:
            pass

    @property
    def fstype(self):
        return "fuse." + self.name


def adopt_detached(inst):
    """The daemon that mount.fuse3 started: watched (and, at teardown,
    ended) by the fixture through the pid in its lock file."""
    pid = wait_until(inst.daemon_pid, 10)
    assert pid, f"no pid in the lock file; log:\n{inst.log}"
    inst.proc = conftest.DetachedProc(pid)
    return pid


def mount_options(mnt):
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if f[4] == str(mnt):
            return set(f[5].split(",")), line.split(" - ")[1].split()
    return None, None


@pytest.mark.timeout_s(120)
def test_mount_t_fuse_sbxfs_through_mount_fuse3_and_umount(sbxfs):
    inst = sbxfs(config={"idle_timeout": 0}, start=False)
    with Helper() as h:
        r = subprocess.run(["mount", "-t", h.fstype, "sbxfs", str(inst.mnt), "-o", f"config={inst.conf},nofail"],
                           capture_output=True, text=True, timeout=60, cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
    pid = adopt_detached(inst)
    assert sbxutil.proc_ppid(pid) != os.getpid()
    opts, super_ = mount_options(inst.mnt)
    assert super_[0] == "fuse.sbxfs", super_
    # mount.fuse3 passed `dev,suid`: not honoured
    assert {"nosuid", "nodev", "nosymfollow"} <= opts, opts
    t = inst.mnt / "alice" / "t"
    os.makedirs(t)
    init = inst.init_pid(t)
    j = mkjob(t, "j")
    start(j, "echo through mount.fuse3")
    assert wait_exit(j, 20) == 0
    assert cat(j / "stdout")[1] == b"through mount.fuse3\n"
    assert read_text(inst.mnt / ".health") == "ok\n"
    r = subprocess.run(["umount", str(inst.mnt)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert wait_until(lambda: not sbxutil.pid_alive(pid), 30), "daemon still running after umount"
    assert not sbxutil.is_mounted(inst.mnt)
    assert not sbxutil.pid_alive(init), "umount left the sandbox running (keep_on_exit is false)"
    assert not sbxutil.procs_matching(inst.state_dir), "sandbox processes survive the umount"


@pytest.mark.timeout_s(150)
def test_fstab_line_mounts_with_mount_a_and_umount_keeps_sandboxes_per_keep_on_exit(sbxfs, tmp_path):
    """The fstab line of the man page (nofail, _netdev and x-systemd.* added),
    mounted by `mount -a -T`.  With keep_on_exit, umount leaves the sandbox
    and a running job for the next mount, which adopts both: the upgrade
    procedure of the README."""
    inst = sbxfs(config={"keep_on_exit": True, "idle_timeout": 0}, start=False)
    with Helper() as h:
        fstab = tmp_path / "fstab"
        fstab.write_text(f"# test fstab\nsbxfs {inst.mnt} {h.fstype} "
                         f"config={inst.conf},nofail,_netdev,x-systemd.requires=docker.service,"
                         "x-systemd.mount-timeout=30,rw 0 0\n")

        def mount_all():
            r = subprocess.run(["mount", "-a", "-T", str(fstab)], capture_output=True, text=True, timeout=60, cwd="/")
            assert r.returncode == 0, r.stdout + r.stderr

        mount_all()
        pid = adopt_detached(inst)
        assert sbxutil.mount_fstype(inst.mnt) == "fuse.sbxfs"
        # the mount is what the man page's line describes: `mount -a` of
        # that line (type fuse.sbxfs) finds it mounted and does nothing
        plain = tmp_path / "fstab.plain"
        plain.write_text(f"sbxfs {inst.mnt} fuse.sbxfs config={inst.conf},nofail 0 0\n")
        # (from /, as at boot: libmount takes a source that names a file in
        # the current directory, like this tree's ./sbxfs, for that file)
        r = subprocess.run(["mount", "-a", "-T", str(plain)], capture_output=True, text=True, timeout=60, cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        assert inst.daemon_pid() == pid
        t = inst.mnt / "alice" / "t"
        os.makedirs(t)
        init = inst.init_pid(t)
        (t / "workspace" / "kept").write_text("kept")
        j = mkjob(t, "slow")
        start(j, "sleep 3; echo finished")
        r = subprocess.run(["umount", str(inst.mnt)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert wait_until(lambda: not sbxutil.pid_alive(pid), 30), "daemon still running after umount"
        assert sbxutil.pid_alive(init), "keep_on_exit: the sandbox must outlive the umount"

        mount_all()  # the "new version" starts: adopts
        pid2 = adopt_detached(inst)
        assert pid2 != pid
    assert read_json(inst.mnt / ".status")["adopted"] == 1
    os.mkdir(t)
    assert inst.init_pid(t) == init
    assert (t / "workspace" / "kept").read_text() == "kept"
    assert wait_exit(j, 30) == 0
    assert cat(j / "stdout")[1] == b"finished\n", "the job that ran across the restart lost its output"
    inst.config["keep_on_exit"] = False  # teardown: no leak warning for what we end here
    inst.conf.write_text(conftest.dump_yaml(inst.config))
    os.kill(pid2, signal.SIGHUP)
    assert wait_until(lambda: read_json(inst.mnt / ".config")["keep_on_exit"] is False, 10)
    assert inst.stop() == 0
    assert wait_until(lambda: not sbxutil.pid_alive(init), 20)


@pytest.mark.timeout_s(90)
def test_generic_mount_options_are_ignored_and_real_ones_passed(sbxfs):
    generic = ("rw,defaults,auto,noauto,user,nouser,users,owner,group,nofail,_netdev,x-systemd.automount,"
               "x-systemd.requires=docker.service,comment=systemd.automount,suid,dev,default_permissions")
    inst = sbxfs(args=["-o", generic, "-o", "noatime", "sbxfs"])  # [SOURCE] MOUNTPOINT
    opts, super_ = mount_options(inst.mnt)
    assert {"nosuid", "nodev", "noatime"} <= opts, opts
    assert "allow_other" not in super_[-1], super_
    os.makedirs(inst.mnt / "alice" / "t")
    inst.init_pid(inst.mnt / "alice" / "t")
    assert inst.stop() == 0

    # a read-only mount: a real kernel option, passed through
    ro = sbxfs(args=["-o", "ro"])
    with pytest.raises(OSError) as e:
        os.mkdir(ro.mnt / "bob")
    assert e.value.errno == 30, e.value  # EROFS
    assert ro.stop() == 0


@pytest.mark.timeout_s(90)
@pytest.mark.parametrize("opt,status,needle", [
    ("allow_other", 1, "allow_other"),      # mount.conf says false
    ("subtype=other", 2, "subtype"),
    ("no_such_fuse_option", 1, "no_such_fuse_option"),  # libfuse refuses it
    ("config=", 2, "config="),
], ids=["allow_other", "subtype", "unknown", "empty-config"])
def test_refused_mount_options(sbxfs, opt, status, needle):
    inst = sbxfs(args=["-o", opt], start=False)
    rc, log = inst.run_expect_exit(timeout=20)
    assert rc == status, f"-o {opt}: status {rc}; log:\n{log}"
    assert needle in log, log
    assert not sbxutil.is_mounted(inst.mnt)


@pytest.mark.timeout_s(60)
def test_allow_other_on_the_command_line_agrees_with_mount_conf(sbxfs):
    inst = sbxfs(config={"allow_other": True}, args=["-o", "allow_other"])
    _, super_ = mount_options(inst.mnt)
    assert "allow_other" in super_[-1], super_


@pytest.mark.timeout_s(60)
def test_c_and_o_config_must_agree(sbxfs, tmp_path):
    other = tmp_path / "other.conf"
    other.write_text("replicas: 2\n")
    inst = sbxfs(args=["-o", f"config={other}"], start=False)
    rc, log = inst.run_expect_exit(timeout=20)
    assert rc == 2 and "name different files" in log, log
    same = sbxfs(start=False)  # -c CONF and -o config=CONF: the same file
    same.args = ["-o", f"config={same.conf}"]
    same.start()
    assert read_json(same.mnt / ".config")["config_file"] == str(same.conf)


# --------------------------------------------------------------------------
# --check-config


def check_config(path, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([str(SBXFS), "--check-config", str(path)], capture_output=True, text=True, env=e,
                          timeout=30)


def test_check_config_good_file_prints_masked_config_and_creates_nothing(tmp_path):
    state = tmp_path / "deep" / "state"
    conf = tmp_path / "mount.conf"
    conf.write_text(f"""state_dir: {state}
replicas: 5
api_key: sk-live-123456
environment:
  OPENAI_API_KEY: plain-secret-value
  FROM_ENV: $SBXFS_TEST_VALUE
  GREETING: hello
no_such_key: 1
""")
    r = check_config(conf, {"SBXFS_TEST_VALUE": "resolved-secret"})
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown["replicas"] == 5 and shown["state_dir"] == str(state)
    assert shown["api_key"] == "***"
    assert shown["environment"] == {"OPENAI_API_KEY": "***", "FROM_ENV": "$SBXFS_TEST_VALUE", "GREETING": "hello"}
    for secret in ("sk-live-123456", "plain-secret-value", "resolved-secret"):
        assert secret not in r.stdout + r.stderr
    assert "no_such_key" in r.stderr, "an unknown key is a warning on stderr"
    # no side effects: nothing made on the host
    assert not (tmp_path / "deep").exists(), "--check-config created the state_dir"
    assert sorted(os.listdir(tmp_path)) == ["mount.conf"]


def test_check_config_reads_a_deerflow_config_yaml(tmp_path):
    conf = tmp_path / "config.yaml"
    conf.write_text(f"""models:
  - name: gpt
sandbox:
  use: deerflow.sandbox.local:LocalSandboxProvider
  replicas: 4
  idle_timeout: 900
state_dir: {tmp_path}/s
""")
    r = check_config(conf)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert (shown["use"], shown["replicas"], shown["idle_timeout"]) == ("local", 4, 900)


@pytest.mark.parametrize("text,needle", [
    ("replicas: 0\n", "replicas"),
    ("resources:\n  memory: lots\n", "resources.memory"),
    ("use: nosuchprovider\n", "use"),
    ("replicas: [1\n", "YAML"),
    ("local:\n  uid_base: 65534\n  uid_count: 1\n", "local.uid_base"),  # overlaps the account nobody
    ("local:\n  rootfs: /nonexistent/rootfs\n", "local.rootfs"),
], ids=["replicas", "memory", "use", "syntax", "uid-range", "rootfs"])
def test_check_config_bad_files(tmp_path, text, needle):
    conf = tmp_path / "bad.conf"
    conf.write_text(f"state_dir: {tmp_path}/state\n" + text)
    r = check_config(conf)
    assert r.returncode == 1, f"status {r.returncode}: {r.stdout}{r.stderr}"
    assert needle in r.stderr, r.stderr
    assert r.stdout == "", "a bad file prints no configuration"
    assert not (tmp_path / "state").exists()


def test_log_lines_carry_journald_priorities_when_stderr_is_the_journal(tmp_path):
    """systemd sets JOURNAL_STREAM to the device:inode of the stderr it
    gives a service; "<N>" then sets each line's priority."""
    conf = tmp_path / "c.conf"
    conf.write_text(f"state_dir: {tmp_path}/s\nno_such_key: 1\n")
    err = tmp_path / "stderr"
    for journal in (True, False):
        with open(err, "w+") as f:
            st = os.fstat(f.fileno())
            env = dict(os.environ, JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}" if journal else "1:1")
            r = subprocess.run([str(SBXFS), "--check-config", str(conf)], stdout=subprocess.DEVNULL, stderr=f,
                               env=env, timeout=30)
        assert r.returncode == 0
        line = next(ln for ln in err.read_text().splitlines() if "no_such_key" in ln)
        assert re.match(r"^<4>sbxfs\[\d+\]: warning config: " if journal else r"^sbxfs\[\d+\]: warning config: ",
                        line), line


def test_check_config_usage(tmp_path):
    r = check_config(tmp_path / "missing.conf")
    assert r.returncode == 1 and "missing.conf" in r.stderr, r.stderr
    r = subprocess.run([str(SBXFS), "--check-config"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r
    r = subprocess.run([str(SBXFS), "--check-config", "/dev/null", "/mnt"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2, r


# --------------------------------------------------------------------------
# systemd's notify protocol, with a socket of the test's own


class NotifySocket:
    def __init__(self, directory):
        self.path = str(Path(directory) / "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def recv(self, timeout=10):
        """One message as {KEY: value}, or None after timeout."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536).decode()
        except socket.timeout:
            return None
        return dict(line.split("=", 1) for line in data.splitlines() if "=" in line)

    def close(self):
        self.sock.close()


@pytest.mark.timeout_s(150)
def test_notify_ready_after_mount_answers_reload_and_stopping(sbxfs):
    """Started without -f as a Type=notify unit with NotifyAccess=all would
    start it, with a sandbox a previous run kept: MAINPID= of the detached
    daemon first, READY=1 once the mount answers and adoption is done;
    kill -HUP (ExecReload=) gives RELOADING=1 then READY=1; umount gives
    STOPPING=1."""
    first = sbxfs(config={"keep_on_exit": True, "idle_timeout": 0, "replicas": 4})
    os.makedirs(first.mnt / "alice" / "t")
    init = first.init_pid(first.mnt / "alice" / "t")
    assert first.stop() == 0

    inst = first  # the same state_dir, now started as the unit would
    inst.config["keep_on_exit"] = False
    inst.conf.write_text(conftest.dump_yaml(inst.config))
    inst.detach = True
    ns = NotifySocket(inst.base)
    inst.env["NOTIFY_SOCKET"] = ns.path
    try:
        inst.start()  # returns once the launcher exited 0
        # first MAINPID= alone, sent before the launcher exits (a Type=notify
        # unit whose main process exits before READY=1 would fail otherwise)
        msg = ns.recv(20)
        assert msg and set(msg) == {"MAINPID"} and int(msg["MAINPID"]) == inst.proc.pid, msg
        msg = ns.recv(20)
        assert msg and msg.get("READY") == "1", msg
        # at READY=1: the mount answers at once, adoption is done
        t0 = time.monotonic()
        os.statvfs(inst.mnt)
        assert time.monotonic() - t0 < 2
        assert read_json(inst.mnt / ".status")["adopted"] == 1
        assert int(msg["MAINPID"]) == inst.daemon_pid() == inst.proc.pid
        assert str(inst.mnt) in msg.get("STATUS", ""), msg

        # systemctl reload: ExecReload= sends SIGHUP
        inst.conf.write_text(inst.conf.read_text().replace("replicas: 4", "replicas: 6"))
        os.kill(inst.proc.pid, signal.SIGHUP)
        m1, m2 = ns.recv(10), ns.recv(10)
        assert m1 and m1.get("RELOADING") == "1" and int(m1["MONOTONIC_USEC"]) > 0, m1
        assert m2 and m2.get("READY") == "1" and "reloaded" in m2.get("STATUS", ""), m2
        assert read_json(inst.mnt / ".status")["replicas"] == 6
        # an invalid file: refused, and READY=1 says so; the old one stays
        good = inst.conf.read_text()
        inst.conf.write_text("replicas: 0\n")
        os.kill(inst.proc.pid, signal.SIGHUP)
        m1, m2 = ns.recv(10), ns.recv(10)
        assert m1.get("RELOADING") == "1" and m2.get("READY") == "1" and "refused" in m2.get("STATUS", ""), (m1, m2)
        assert read_json(inst.mnt / ".status")["replicas"] == 6
        inst.conf.write_text(good)

        pid = inst.proc.pid
        r = subprocess.run(["umount", str(inst.mnt)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        msg = ns.recv(20)
        assert msg and msg.get("STOPPING") == "1", msg
        assert wait_until(lambda: not sbxutil.pid_alive(pid), 30)
        assert not sbxutil.pid_alive(init), "the adopted sandbox must be destroyed (keep_on_exit now false)"
        assert ns.recv(0.5) is None, "nothing after STOPPING=1"
    finally:
        ns.close()


@pytest.mark.timeout_s(60)
def test_notify_no_ready_when_the_start_fails(sbxfs):
    inst = sbxfs(config={"replicas": 0}, start=False, detach=True)
    ns = NotifySocket(inst.base)
    inst.env["NOTIFY_SOCKET"] = ns.path
    try:
        rc, log = inst.run_expect_exit(timeout=20)
        assert rc == 1, log
        assert ns.recv(1) is None, "READY=1 for a daemon that did not start"
    finally:
        ns.close()


@pytest.mark.timeout_s(60)
def test_watchdog_pings_while_the_mount_answers(sbxfs, tmp_path):
    ns = NotifySocket(tmp_path)
    try:
        inst = sbxfs(env={"NOTIFY_SOCKET": ns.path, "WATCHDOG_USEC": "400000"})
        msg = ns.recv(10)
        assert msg and msg.get("READY") == "1", msg
        assert int(msg["MAINPID"]) == inst.proc.pid
        t0 = time.monotonic()
        pings = 0
        while pings < 3 and time.monotonic() - t0 < 5:
            m = ns.recv(2)
            if m and m.get("WATCHDOG") == "1":
                pings += 1
        assert pings == 3, "fewer than 3 WATCHDOG=1 in 5 s with WATCHDOG_USEC=400000"
        assert time.monotonic() - t0 < 2.5, "pings are not every WATCHDOG_USEC/2"
        assert inst.stop() == 0
    finally:
        ns.close()


# --------------------------------------------------------------------------
# man pages, --help, --version


def test_man_pages_lint_clean():
    r = make("check-man", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    for page in ("sbxfs.8", "sbxfs.conf.5"):
        r = subprocess.run(["mandoc", "-T", "lint", "-W", "warning", str(REPO / "man" / page)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


def man_options(page):
    """The options the OPTIONS section of an mdoc page lists: -x, --long."""
    text = (REPO / "man" / page).read_text()
    sect = text.split(".Sh OPTIONS", 1)[1].split("\n.Sh ", 1)[0]
    opts = set()
    for line in sect.splitlines():
        if line.startswith(".It "):
            for m in re.finditer(r"Fl (\\-)?([A-Za-z][-A-Za-z]*)", line):
                opts.add(("--" if m.group(1) else "-") + m.group(2))
    return opts


def test_help_lists_every_option_of_the_man_page_and_version_matches():
    opts = man_options("sbxfs.8")
    assert {"-c", "--config", "-o", "-f", "-d", "--check-config", "-h", "--help", "-V", "--version"} <= opts, opts
    for flag in ("--help", "-h"):
        r = subprocess.run([str(SBXFS), flag], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r
        words = set(re.findall(r"(?<![\w-])(--?[A-Za-z][-A-Za-z]*)", r.stdout))
        assert opts <= words, f"sbxfs {flag} lacks {opts - words}:\n{r.stdout}"
        assert "sbxfs(8)" in r.stdout and "sbxfs.conf(5)" in r.stdout
    for flag in ("--version", "-V"):
        r = subprocess.run([str(SBXFS), flag], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r
        for page in ("sbxfs.8", "sbxfs.conf.5"):
            ver = VERSION_RE.search((REPO / "man" / page).read_text()).group(1)
            assert r.stdout == f"sbxfs {ver}\n", (page, r.stdout)
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^VERSION := (\S+)$", makefile, re.M).group(1) == ver
    r = subprocess.run([str(SBXFS), "--no-such-option"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2


# --------------------------------------------------------------------------
# .health and .metrics


def test_health_ok_degraded_by_a_failed_create_and_ok_again(sbxfs):
    inst = sbxfs()
    h = inst.mnt / ".health"
    assert read_text(h) == "ok\n"
    st = os.stat(h)
    assert stat.S_IMODE(st.st_mode) == 0o444
    os.mkdir(inst.mnt / "bob")
    # the thread directories cannot be made: a state_dir failure
    threads = inst.state_dir / "users" / "bob" / "threads"
    threads.parent.mkdir(parents=True, exist_ok=True)
    threads.write_text("in the way")
    with pytest.raises(OSError):
        sbxutil.mkdir_ready(inst.mnt / "bob" / "t")
    line = read_text(h)
    assert line.startswith("degraded: last sandbox create failed") and "state_dir" in line, line
    assert line.endswith("\n") and line.count("\n") == 1
    assert "bob" not in line, "the user's name is not for every reader of .health"
    m = sbxutil.parse_metrics(read_text(inst.mnt / ".metrics"))
    assert m['sbxfs_errors_total{kind="state_dir"}'] == 1 and m["sbxfs_healthy"] == 0, m
    threads.unlink()
    os.mkdir(inst.mnt / "bob" / "t")
    inst.init_pid(inst.mnt / "bob" / "t")
    assert read_text(h) == "ok\n", "a create that succeeded clears the failure"
    assert sbxutil.parse_metrics(read_text(inst.mnt / ".metrics"))["sbxfs_healthy"] == 1


def test_health_degraded_when_the_provider_checks_fail(sbxfs):
    """A reload to a uid range that overlaps an account: accepted (it takes
    effect at the next start), and .health says the next start would fail."""
    inst = sbxfs()
    assert read_text(inst.mnt / ".health") == "ok\n"
    cfg = dict(inst.config, local={"uid_base": 65534, "uid_count": 1})
    inst.conf.write_text(conftest.dump_yaml(cfg))
    os.kill(inst.proc.pid, signal.SIGHUP)
    assert wait_until(lambda: read_json(inst.mnt / ".config")["local"]["uid_base"] == 65534, 10)
    line = read_text(inst.mnt / ".health")
    assert line.startswith("degraded: ") and "local.uid_base" in line, line


METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
SAMPLE_RE = re.compile(rf"^({METRIC_NAME})(\{{(?:{LABEL})(?:,{LABEL})*\}})? (\S+)$")


def check_exposition(text):
    """The Prometheus text format 0.0.4, strictly: every family has HELP then
    TYPE before its samples, once; sample names belong to the family (with
    _bucket/_sum/_count for histograms, _total for counters); label values
    quoted and escaped; values are floats; histogram buckets cumulative with
    +Inf equal to _count.  Returns {family: type}."""
    assert text.endswith("\n")
    types, helps, current, seen_samples = {}, set(), None, set()
    buckets = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            assert re.fullmatch(METRIC_NAME, name) and name not in helps, line
            helps.add(name)
            current = name
        elif line.startswith("# TYPE "):
            _, _, name, typ = line.split()
            assert name == current and name not in types, f"TYPE without its HELP first: {line}"
            assert typ in ("counter", "gauge", "histogram", "summary", "untyped"), line
            assert name not in seen_samples, f"TYPE after samples of {name}"
            types[name] = typ
        else:
            m = SAMPLE_RE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, labels, value = m.groups()
            float(value.replace("+Inf", "inf"))
            fam = current
            typ = types.get(fam)
            assert typ, f"sample before its TYPE: {line}"
            allowed = {fam} if typ != "histogram" else {fam + "_bucket", fam + "_sum", fam + "_count"}
            assert name in allowed, f"{name} outside its family {fam} ({typ})"
            if typ == "counter":
                assert fam.endswith("_total"), fam
            if name.endswith("_bucket"):
                key = re.sub(r',?le="[^"]*"', "", labels)
                le = re.search(r'le="([^"]*)"', labels).group(1)
                buckets.setdefault(key, []).append((float(le.replace("+Inf", "inf")), float(value)))
            if name.endswith("_count") and typ == "histogram":
                key = labels or "{}"
                b = buckets[key]
                assert b[-1][0] == float("inf") and b[-1][1] == float(value), (key, b, value)
            seen_samples.add(fam)
    for key, b in buckets.items():
        les = [x[0] for x in b]
        assert les == sorted(les), key
        counts = [x[1] for x in b]
        assert counts == sorted(counts), f"buckets not cumulative: {key} {counts}"
    assert helps == set(types), "HELP without TYPE"
    return types


def test_metrics_are_valid_prometheus_exposition(sbxfs):
    inst = sbxfs()
    os.makedirs(inst.mnt / "alice" / "t")
    inst.init_pid(inst.mnt / "alice" / "t")
    os.rmdir(inst.mnt / "alice" / "t")
    os.mkdir(inst.mnt / "alice" / "t")
    text = read_text(inst.mnt / ".metrics")
    types = check_exposition(text)
    # every family the man page documents, with its type
    man = (REPO / "man" / "sbxfs.8").read_text().split(".Sh METRICS", 1)[1].split("\n.Sh ", 1)[0]
    documented = dict(re.findall(r"^\.It Li (sbxfs_\w+) Pq (\w+)", man, re.M))
    assert documented == types, f"man page {documented} vs .metrics {types}"
    m = sbxutil.parse_metrics(text)
    assert m['sbxfs_acquire_seconds_count{kind="cold"}'] == 1
    assert m['sbxfs_acquire_seconds_count{kind="warm"}'] == 1
    assert m['sbxfs_sandboxes{state="active"}'] == 1
    assert m["sbxfs_healthy"] == 1 and m["sbxfs_replicas"] == 3
    assert m["sbxfs_state_dir_free_bytes"] > 0
    assert abs(m["sbxfs_start_time_seconds"] - time.time()) < 600
    assert any(k.startswith("sbxfs_info{version=") for k in m)
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:  # python3-prometheus-client: make deps installs it
        pytest.skip("python3-prometheus-client not installed: the reference parser was not run")
    fams = {f.name: f.type for f in text_string_to_metric_families(text)}
    # the client library names counter families without _total
    assert {k[:-6] if v == "counter" else k: v for k, v in types.items()} == fams, fams
