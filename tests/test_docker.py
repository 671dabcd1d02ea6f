# SPDX-License-Identifier: MIT
"""The docker provider (DESIGN §5, issue 10): jobs through the Engine exec
API, a sandbox's workspace mounted into a second real container, the job's
command and environment on no host argv or environ, the failure paths
(dockerd stopped mid-run with a private dockerd this module starts, an image
that does not exist, a container name taken by a stranger, a job that kills
its own supervisor), network modes, configuration errors.  Every container
carries the test's label and is removed after the test."""

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import dockerutil
import sbxutil
import seccomputil
import test_jobs as J
import test_runtime as R
from containerutil import (CASE_LABEL, DockerProxy, case_label, containers, docker_images, inspect,  # noqa: F401
                           provider_config, sbxfs, wait_containers)
from sbxutil import expect_errno, mkdir_ready, read_json, read_text, wait_until
from test_network import allowlist_conf, cert, consume, servers, write_network  # noqa: F401


@pytest.fixture
def provider():
    return "docker"


def acquire(m, user="alice", thread="t"):
    d = m.mnt / user / thread
    os.makedirs(d)
    m.init_pid(d)
    return d


# --------------------------------------------------------------------------
# jobs through the Engine exec API


@pytest.mark.timeout_s(120)
def test_an_interrupted_create_aborts_the_request_and_removes_the_container(sbxfs, case_label):
    """A mkdir interrupted (SIGINT) while dockerd's answer to the create is
    held (a proxy in front of the socket keeps it; the container exists):
    the mkdir answers EINTR at once, the request to dockerd is aborted, and
    the container dockerd made is found by the create's recorded intent and
    removed at once, not left for the next create or start (before, its
    check ran under the cancelled token and failed)."""
    proxy = DockerProxy()
    try:
        # acquire: sync: the mkdir itself waits for the create (what is interrupted)
        m = sbxfs(config={"acquire": "sync", "docker": {"socket": proxy.path}})
        os.mkdir(m.mnt / "alice")
        proxy.hold_create = True
        p = R.child("mkdir", m.mnt / "alice" / "t")
        assert proxy.answered.wait(60), "the create never reached dockerd"
        assert len(containers(case_label)) == 1
        out, took = R.interrupt(p)
        assert out == "interrupted\n", out
        assert took < 1.0, f"an interrupted mkdir took {took:.2f} s"
        proxy.release()
        t0 = time.monotonic()
        assert wait_containers(case_label, 0, 15) == [], "the cancelled create's container was left:\n" + m.log[-3000:]
        print(f"the container was removed {time.monotonic() - t0:.2f} s after the interrupt")
        assert not (m.thread_data("alice", "t") / "docker.json").exists()
        # the scope works afterwards, with one container
        os.mkdir(m.mnt / "alice" / "t")
        code, out, _ = J.run_job(m.mnt / "alice" / "t", "ok", "echo fine")
        assert code == 0 and out == "fine\n"
        assert len(containers(case_label)) == 1
        assert m.stop() == 0
        assert wait_containers(case_label, 0, 20) == []
    finally:
        proxy.close()


@pytest.mark.timeout_s(120)
def test_jobs_through_the_engine_exec_api(sbxfs, case_label):
    m = sbxfs(config={"docker": {"exec": "engine"}, "bash_command_timeout": 8})
    t = acquire(m)
    assert sbxutil.status(t)["exec"] == "engine"
    code, out, err = J.run_job(t, "a", "echo out; echo err >&2; id -u; exit 4")
    assert code == 4 and out.splitlines()[0] == "out" and err == "err\n"
    assert out.splitlines()[1] == str(sbxutil.status(t)["uid"])
    # a running job is an exec of the container; kill reaches it
    j = J.mkjob(t, "k")
    J.start_ready(j)
    [c] = containers(case_label)
    assert inspect(c["id"])["ExecIDs"], "the job is not an Engine exec"
    J.write_ctl(j / "ctl", "kill")
    assert J.wait_exit(j, 10) == 143 and J.jstatus(j)["state"] == "killed"
    # the timeout
    j = J.mkjob(t, "slow")
    J.start(j, "echo started; sleep 30")
    assert J.wait_exit(j, 20) > 128 and J.jstatus(j)["state"] == "timed_out"
    # a job that runs on while the daemon is down gets its real result
    j = J.mkjob(t, "through")
    J.start(j, "echo start; sleep 2; echo finished; exit 6")
    assert wait_until(lambda: J.jstatus(j)["stdout_bytes"] >= 6, 10)
    m.kill9()
    m.umount(lazy=True)
    m.restart()
    os.makedirs(t, exist_ok=True)
    assert J.wait_exit(j, 20) == 6 and read_text(j / "stdout") == "start\nfinished\n"


# --------------------------------------------------------------------------
# the job's command and environment are on no host process's argv/environ


@pytest.mark.timeout_s(60)
def test_command_and_environment_on_no_host_argv_or_environ(sandbox):
    m, t = sandbox
    cmd_marker = f"cmdmark{random.randint(10**8, 10**9)}"
    env_marker = f"envmark{random.randint(10**8, 10**9)}"
    uid = sbxutil.status(t)["uid"]
    j = J.mkjob(t, "secret")
    J.start(j, f"echo ready; X={cmd_marker}; sleep 30", env=f"SECRET_THING={env_marker}\n")
    assert wait_until(lambda: J.jstatus(j)["stdout_bytes"] >= 6, 10)
    with_cmd, with_env = [], []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if cmd_marker.encode() in Path(f"/proc/{d}/cmdline").read_bytes():
                with_cmd.append((d, sbxutil.proc_cmdline(int(d))))
            if env_marker.encode() in Path(f"/proc/{d}/environ").read_bytes():
                with_env.append(int(d))
        except OSError:
            pass
    assert not with_cmd, f"the job's command is on a host argv: {with_cmd}"
    # only the job's own processes (the sandbox uid, not the supervisor) carry its environment
    assert with_env, "the job does not have its environment"
    for pid in with_env:
        assert J.uid_of(pid) == uid and "sbxfs-box" not in (sbxutil.proc_cmdline(pid) or ""), \
            (pid, sbxutil.proc_cmdline(pid))
    J.write_ctl(j / "ctl", "kill KILL")
    J.wait_exit(j)


@pytest.mark.timeout_s(60)
def test_job_cannot_reach_the_job_files_or_its_supervisor(sandbox):
    m, t = sandbox
    code, out, err = J.run_job(t, "probe",
                               "for f in 0 1 2; do case $(readlink /proc/$$/fd/$f) in */jobs/probe/*) "
                               "echo holds-a-job-file;; esac; done; "
                               "ls /proc/$PPID/fd >/dev/null 2>&1 && echo saw-supervisor-fds; "
                               "cat /proc/$PPID/environ >/dev/null 2>&1 && echo read-supervisor-env; "
                               "kill -TERM $PPID && echo signalled; sleep 0.2; "
                               "ls /run/sbxfs; echo done")
    assert code == 0, err
    # its stdout and stderr are pipes the supervisor copies: it holds no job file to reopen
    assert "holds-a-job-file" not in out and "saw-supervisor-fds" not in out and "read-supervisor-env" not in out, out
    assert out.endswith("done\n") and "sbxfs-box" in out
    # SIGTERM from the job: the supervisor ignores it and reports the real end
    assert J.jstatus(t / "jobs" / "probe")["state"] == "exited"


@pytest.mark.timeout_s(60)
def test_a_job_that_kills_its_supervisor_is_lost_and_harms_nothing(sandbox):
    m, t = sandbox
    j = J.mkjob(t, "rogue")
    J.start(j, "kill -KILL $PPID; sleep 1; echo still here")
    assert J.wait_exit(j, 15) == 255
    st = J.jstatus(j)
    assert st["state"] == "lost", st
    code, out, _ = J.run_job(t, "next", "echo fine")
    assert code == 0 and out == "fine\n"


# A job that watches the pids the next processes get and tries to ptrace
# each (the sandbox uid may trace its own dumpable processes), until the
# file "stop" appears: "attached PID EXE" when it got a supervisor.
GRAB_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <time.h>
#include <unistd.h>

static long last_pid(void)
{
	char b[32] = "";
	int fd = open("/proc/sys/kernel/ns_last_pid", O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, b, sizeof(b) - 1) : -1;
	if (fd >= 0)
		close(fd);
	return n > 0 ? strtol(b, NULL, 10) : -1;
}

int main(void)
{
	time_t end = time(NULL) + 60;
	long tries = 0;

	while (time(NULL) < end && access("stop", F_OK)) {
		long last = last_pid();
		/* the runtime's threads take pids too (runc's, in engine mode) */
		for (long pid = last - 24; pid <= last + 2; pid++) {
			char path[64], exe[256] = "";
			ssize_t l;

			if (pid <= 1 || pid == getpid())
				continue;
			/* only supervisors (a seized job process would stay ours) */
			snprintf(path, sizeof(path), "/proc/%ld/exe", pid);
			l = readlink(path, exe, sizeof(exe) - 1);
			exe[l > 0 ? l : 0] = '\0';
			if (!strstr(exe, "sbxfs-box"))
				continue;
			tries++;
			if (ptrace(PTRACE_SEIZE, (pid_t)pid, 0, 0) == 0) {
				printf("attached %ld %s\n", pid, exe);
				return 0; /* our end lets it go */
			}
		}
	}
	printf("none %ld\n", tries);
	return 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
@pytest.mark.timeout_s(120)
@pytest.mark.parametrize("mode", ["init", "engine"])
def test_a_job_cannot_ptrace_the_supervisor_of_another(sbxfs, tmp_path, mode):
    """Supervisors run as the sandbox uid.  One that is dumpable for a moment
    (from its execve to its PR_SET_DUMPABLE) can be ptrace-attached by a job
    watching the next pids, and is then that job's: another job's output and
    result files, its limits.  A supervisor is never dumpable."""
    src = tmp_path / "grab.c"
    src.write_text(GRAB_C)
    r = subprocess.run(["gcc", "-static", "-O2", "-o", str(tmp_path / "grab"), str(src)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    m = sbxfs(config={"docker": {"exec": mode}})
    t = acquire(m)
    shutil.copy(tmp_path / "grab", t / "workspace" / "grab")
    os.chmod(t / "workspace" / "grab", 0o755)
    j = J.mkjob(t, "grab")
    J.start(j, "./grab")
    for i in range(30):
        code, _, err = J.run_job(t, f"v{i}", "true")
        assert code == 0, err
        if J.jstatus(j)["state"] != "running":
            break
    (t / "workspace" / "stop").write_text("")
    assert J.wait_exit(j, 30) == 0, read_text(j / "stderr")
    out = read_text(j / "stdout")
    assert out.startswith("none"), f"a job took hold of another job's supervisor: {out}"


# --------------------------------------------------------------------------
# the seccomp profile against Docker's own


@pytest.mark.timeout_s(120)
def test_profile_is_nowhere_looser_than_dockers_default(sandbox, case_label):
    """The profile sbxfs gives dockerd (filter.c) against the default profile
    of this very engine, both as dockerd resolved them for a container
    without capabilities (the OCI bundle runc got): every call, and every
    argument of the calls with conditions, that Docker's default refuses is
    refused by ours; and Docker's lets vsock through, ours does not."""
    m, t = sandbox
    [c] = containers(case_label)
    ours = seccomputil.oci_seccomp(c["id"])
    cid = dockerutil.docker("run", "-d", "--label", dockerutil.RUN_LABEL, "--cap-drop", "ALL", "--security-opt",
                            "no-new-privileges", "--network", "none", dockerutil.BUSYBOX_IMAGE,
                            "sleep", "120").stdout.strip()
    try:
        docker = seccomputil.oci_seccomp(cid)
    finally:
        dockerutil.docker("rm", "-f", cid, check=False)
    assert docker["defaultAction"] == "SCMP_ACT_ERRNO" and ours["defaultAction"] == "SCMP_ACT_ERRNO"
    assert seccomputil.looser(ours, docker) == []
    vsock = [40, 1, 0, 0, 0, 0]
    assert seccomputil.allows(docker, "socket", vsock) and not seccomputil.allows(ours, "socket", vsock)
    # and the sandbox works under it
    code, out, err = J.run_job(t, "ok", "echo alive; ls /mnt/user-data/workspace >/dev/null && echo listed")
    assert code == 0 and out == "alive\nlisted\n", (out, err)


# --------------------------------------------------------------------------
# a sandbox's workspace in another container


@pytest.mark.timeout_s(120)
def test_workspace_mounted_into_a_second_container(sbxfs, case_label):
    m = sbxfs(config={"allow_other": True})
    t = acquire(m, "alice", "t1")
    acquire(m, "alice", "t2")
    (t / "workspace" / "f.txt").write_text("from the mount\n")
    (t / "uploads" / "secret.txt").write_text("uploads secret\n")
    (m.mnt / "alice" / "t2" / "workspace" / "other.txt").write_text("other sandbox\n")
    # the sandbox plants symlinks pointing out of its workspace
    code, _, err = J.run_job(t, "plant", "ln -s ../uploads/secret.txt up; ln -s /etc/shadow abs; "
                                         "ln -s ../../../../../../../../etc/shadow rel; "
                                         "ln -s ../../t2/workspace/other.txt sib")
    assert code == 0, err
    host_shadow = Path("/etc/shadow").read_text().splitlines()[0]
    script = ("ls -a /w | sort | tr '\\n' ' '; echo; cat /w/f.txt; echo from-second > /w/g.txt; "
              "for l in up abs rel sib; do echo \"== $l\"; cat /w/$l 2>&1 | head -1; done")
    r = dockerutil.docker("run", "--rm", "--network", "none", "--label", dockerutil.RUN_LABEL,
                          "--label", f"{CASE_LABEL}={case_label}", "-v", f"{t / 'workspace'}:/w",
                          dockerutil.IMAGES["busybox"], "sh", "-c", script, timeout=60)
    out = r.stdout
    assert out.splitlines()[0].split() == [".", "..", "abs", "f.txt", "rel", "sib", "up"], out
    assert "from the mount" in out
    assert "uploads secret" not in out and "other sandbox" not in out, out
    assert host_shadow not in out, "the second container followed a planted symlink to the host's /etc/shadow"
    # what it wrote is the sandbox's, and nothing else changed
    assert (t / "workspace" / "g.txt").read_text() == "from-second\n"
    code, out, _ = J.run_job(t, "see", "cat g.txt")
    assert code == 0 and out == "from-second\n"
    assert sorted(os.listdir(m.mnt / "alice" / "t2" / "workspace")) == ["other.txt"]
    assert sorted(os.listdir(t / "uploads")) == ["secret.txt"]


# --------------------------------------------------------------------------
# failure paths


class PrivateDockerd:
    """A dockerd of this test only: own socket, data and exec roots, a
    default bridge of its own (a bridge interface this test makes, a free
    10.213.N.0/24), no iptables of its own (the suite's dockerd owns Docker's
    chains); stopped and started by its pid.

    Never "--bridge none": a dockerd started so deletes the host's docker0
    (moby's removeDefaultBridgeInterface), the bridge of the suite's dockerd,
    whose containers then cannot start on Docker's default network ("could
    not find bridge docker0") until it is made again."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix=f"sbxfs-dockerd-{os.getpid()}-", dir="/tmp"))
        self.sock = self.dir / "docker.sock"
        self.proc = None
        self.bridge = f"sbxbr{os.getpid() % 1000000}"
        used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=30).stdout
        free = [n for n in range(1, 255) if f" 10.213.{n}." not in used]
        assert free, "no free 10.213.N.0/24 for a test bridge"
        self.addr = f"10.213.{random.choice(free)}.1/24"
        self.made = False

    def env(self):
        return {**os.environ, "DOCKER_HOST": f"unix://{self.sock}"}

    def docker(self, *args, timeout=60, check=True, input=None):
        r = subprocess.run([dockerutil.docker_bin(), *args], capture_output=True, text=True, timeout=timeout,
                           env=self.env(), input=input)
        if check and r.returncode:
            raise RuntimeError(f"docker {args}: {r.stderr}")
        return r

    def net_args(self):
        if not self.made:
            for cmd in (["link", "add", self.bridge, "type", "bridge"], ["addr", "add", self.addr, "dev", self.bridge],
                        ["link", "set", self.bridge, "up"]):
                subprocess.run(["ip", *cmd], check=True, capture_output=True, timeout=30)
                self.made = True
        return ["--bridge", self.bridge, "--iptables=false", "--ip-masq=false"]

    def remove_bridge(self):
        if self.made:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
            self.made = False

    def start(self):
        log = open(self.dir / "dockerd.log", "ab")
        self.proc = subprocess.Popen(
            [shutil.which("dockerd"), "-H", f"unix://{self.sock}", "--data-root", str(self.dir / "data"),
             "--exec-root", str(self.dir / "exec"), "--pidfile", str(self.dir / "docker.pid"),
             *self.net_args()],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        assert wait_until(lambda: self.docker("version", check=False, timeout=10).returncode == 0, 40), \
            (self.dir / "dockerd.log").read_text()[-3000:]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def load(self, image):
        img = subprocess.run([dockerutil.docker_bin(), "save", image], capture_output=True, timeout=120, check=True)
        r = subprocess.run([dockerutil.docker_bin(), "load"], input=img.stdout, capture_output=True, timeout=120,
                           env=self.env())
        assert r.returncode == 0, r.stderr

    def containers(self, label):
        r = self.docker("ps", "-aq", "--filter", f"label={label}")
        return r.stdout.split()


def dockerd_fixture(d, case_label):
    """Start d, load the busybox image into it; after the test remove the
    test's containers, stop it, remove its files and its bridge, and check
    that the suite's dockerd still has its bridge."""
    before = dockerutil.bridge_problem()
    try:
        d.start()
        d.load(dockerutil.IMAGES["busybox"])
        yield d
    finally:
        try:
            if d.proc and d.proc.poll() is None:
                ids = d.containers(f"{CASE_LABEL}={case_label}")
                if ids:
                    d.docker("rm", "-f", *ids, check=False, timeout=120)
        finally:
            d.stop()
            d.remove_bridge()
            subprocess.run(["rm", "-rf", str(d.dir)], capture_output=True, timeout=120)
    if before is None:
        assert dockerutil.bridge_problem() is None, "a private dockerd took the suite's bridge away"


@pytest.fixture
def private_dockerd(docker_images, case_label):
    if not shutil.which("dockerd"):
        pytest.skip("dockerd is not installed")
    yield from dockerd_fixture(PrivateDockerd(), case_label)


@pytest.mark.timeout_s(240)
def test_dockerd_stopped_mid_run(sbxfs, private_dockerd, case_label):
    d = private_dockerd
    m = sbxfs(config={"acquire": "sync", "docker": {"socket": str(d.sock)}})
    t1 = acquire(m, "alice", "t1")
    code, out, _ = J.run_job(t1, "a", "echo before")
    assert code == 0 and out == "before\n"
    d.stop()
    mark = len(m.log)
    expect_errno(lambda: mkdir_ready(m.mnt / "alice" / "t2"), errno.EIO)
    assert not (m.mnt / "alice" / "t2").exists()
    lines = [ln for ln in m.log[mark:].splitlines() if "error" in ln]
    named = [ln for ln in lines if "dockerd" in ln]
    assert len(named) == 1 and str(d.sock) in named[0], lines
    # dockerd back: sbxfs works again without a restart
    d.start()
    t2 = acquire(m, "alice", "t2")
    code, out, _ = J.run_job(t2, "a", "echo after")
    assert code == 0 and out == "after\n"
    # t1's container ended with dockerd: its next reclaim makes a new one
    os.rmdir(t1)
    os.mkdir(t1)
    assert "recreated" in sbxutil.status(t1).get("last_event", "")
    code, out, _ = J.run_job(t1, "b", "echo again")
    assert code == 0 and out == "again\n"
    assert m.stop() == 0
    assert d.containers(f"{CASE_LABEL}={case_label}") == [], "containers left behind"


@pytest.mark.timeout_s(60)
def test_image_that_does_not_exist(sbxfs, case_label):
    m = sbxfs(config={"acquire": "sync", "image": "sbxfs-no-such-image:404"})
    expect_errno(lambda: mkdir_ready(m.mnt / "alice" / "t", parents=True), errno.EIO)
    assert "image 'sbxfs-no-such-image:404' not found" in m.log, m.log[-2000:]
    assert not (m.mnt / "alice" / "t").exists()
    assert containers(case_label) == []
    st = read_json(m.mnt / ".status")
    assert st["last_error"] and st["last_error"]["scope"] == "alice/t", st


@pytest.mark.timeout_s(60)
def test_a_container_name_taken_by_a_stranger_is_left_alone(sbxfs, case_label):
    m = sbxfs(config={"acquire": "sync"})
    os.mkdir(m.mnt / "alice")
    token = sbxutil.SCOPE_TOKEN_ALICE_THREAD1
    name = f"{m.config['container_prefix']}-{token}"
    dockerutil.docker("run", "-d", "--network", "none", "--name", name, "--label", dockerutil.RUN_LABEL,
                      "--label", f"{CASE_LABEL}={case_label}", dockerutil.IMAGES["busybox"], "sleep", "600")
    expect_errno(lambda: mkdir_ready(m.mnt / "alice" / "thread-1"), errno.EIO)
    assert "taken by a container this sbxfs did not make" in m.log
    [c] = containers(case_label)
    assert c["name"] == name and c["state"] == "running", "sbxfs touched a container it did not make"
    assert m.stop() == 0
    [c] = containers(case_label)
    assert c["state"] == "running"


@pytest.mark.timeout_s(90)
def test_containers_of_another_state_dir_are_never_touched(sbxfs, case_label):
    a = sbxfs()
    da = acquire(a, "alice", "t")
    b = sbxfs()   # another daemon, another state_dir, the same dockerd
    db = acquire(b, "alice", "t")
    assert len(containers(case_label)) == 2
    b.kill9()
    b.umount(lazy=True)
    b.restart()   # its discovery sees only its own container
    assert len(containers(case_label)) == 2
    assert b.stop() == 0
    left = containers(case_label)
    assert len(left) == 1 and sbxutil.status(da)["container"] == left[0]["name"], left
    J.run_job(da, "ok", "true")


@pytest.mark.timeout_s(120)
def test_allowlist_through_the_approval_proxy(sbxfs, servers, case_label):
    """An allowlist container (Docker's "none") has loopback only; the
    daemon serves the approval proxy inside its network namespace, jobs get
    the proxy variables, a denied host becomes an event, and a grant lets
    the retry through (busybox wget honours http_proxy)."""
    m = sbxfs(config=allowlist_conf(servers))
    t = acquire(m)
    st = sbxutil.status(t)
    assert inspect(st["container"])["HostConfig"]["NetworkMode"] == "none"
    assert "note" not in st or "egress" not in st["note"], st
    code, out, _ = J.run_job(t, "net", "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
    assert out.split() == ["lo"], out
    assert read_json(t / "network")["proxy"] == "http://127.0.0.1:3128"
    get = "wget -q -O- http://{}/p 2>&1; echo \" rc=$?\""
    code, out, _ = J.run_job(t, "ok", get.format("static.example.test"))
    assert out.startswith("static.example.test GET /p") and out.rstrip().endswith("rc=0"), out
    code, out, _ = J.run_job(t, "denied", get.format("api.example.test"))
    assert "rc=0" not in out and not servers["api.example.test"][0].requests, out
    ev = consume(t)
    assert (ev["host"], ev["port"], ev["method"]) == ("api.example.test", 80, "GET"), ev
    write_network(t, f"allow_temporary {ev['request_id']}\n")
    code, out, _ = J.run_job(t, "granted", get.format("api.example.test"))
    assert out.startswith("api.example.test GET /p") and out.rstrip().endswith("rc=0"), out
    # a direct connection (no proxy) has nowhere to go
    code, out, _ = J.run_job(t, "direct", "http_proxy= wget -q -T 3 -O- http://{}/p 2>&1; echo \" rc=$?\"".format(
        servers["static.example.test"][0].addr))
    assert "rc=0" not in out, out
    assert m.stop() == 0


def open_mode_checks(o, inspect_fn):
    """A sandbox of o (network.mode open) is on the bridge, and its egress
    rules (in the container's namespace) refuse the bridge's gateway (a
    private address: the host) at once."""
    t = o.mnt / "alice" / "t"
    os.makedirs(t)
    st = sbxutil.status(t)
    c = inspect_fn(st["container"])
    assert c["HostConfig"]["NetworkMode"] == "bridge", c["HostConfig"]
    gw = c["NetworkSettings"]["Gateway"]
    assert gw, c["NetworkSettings"]
    code, out, _ = J.run_job(t, "gw", f"wget -q -T 3 -O- http://{gw}:1/ 2>&1; echo \" rc=$?\"")
    assert "rc=0" not in out and "rc=" in out, out
    assert o.stop() == 0


@pytest.mark.timeout_s(120)
def test_open_mode_on_the_bridge(sbxfs, case_label, request):
    """Open mode runs on every run: on the suite's dockerd (one the suite
    starts always has its default bridge: dockerutil.ensure_dockerd), or,
    where a dockerd the suite did not start has none, on a private one with
    a bridge of its own."""
    problem = dockerutil.bridge_problem()
    assert not (problem and dockerutil.started_dockerd()), f"the suite's own dockerd has no bridge: {problem}"
    if problem is None:
        open_mode_checks(sbxfs(config={"network": {"mode": "open"}}), inspect)
        return
    d = request.getfixturevalue("private_dockerd")
    o = sbxfs(config={"network": {"mode": "open"}, "docker": {"socket": str(d.sock)}})
    open_mode_checks(o, lambda c: json.loads(d.docker("inspect", c).stdout)[0])


@pytest.mark.timeout_s(180)
def test_open_mode_on_a_dockerd_with_a_bridge_of_its_own(sbxfs, private_dockerd, case_label):
    """dockerd --bridge IFACE (a bridge made for it, no iptables of its
    own): open mode's container is on it and the gateway is refused."""
    d = private_dockerd
    o = sbxfs(config={"network": {"mode": "open"}, "docker": {"socket": str(d.sock)}})
    open_mode_checks(o, lambda c: json.loads(d.docker("inspect", c).stdout)[0])
    assert d.containers(f"{CASE_LABEL}={case_label}") == [], "containers left behind"


def test_configuration_shown_and_refused(sbxfs, case_label):
    m = sbxfs(config={"docker": {"exec": "engine", "uid_base": 300000}})
    c = read_json(m.mnt / ".config")
    assert c["docker"]["exec"] == "engine" and c["docker"]["uid_base"] == 300000
    assert c["docker"]["labels"][CASE_LABEL] == case_label
    assert c["resources"]["memory"] == 2 << 30
    for bad, rule in [({"image": None}, "image: the docker provider needs an image"),
                      ({"docker": {"exec": "fork"}}, "docker.exec: must be init or engine"),
                      ({"docker": {"labels": {"org.sbxfs.user": "x"}}}, "sbxfs's own"),
                      ({"resources": {"memory": "1K"}}, "resources.memory")]:
        b = sbxfs(config=bad, start=False)
        rc, log = b.run_expect_exit(timeout=10)
        assert rc not in (0, None) and rule in log, (bad, log)
    b = sbxfs(start=False, env={"DOCKER_HOST": "tcp://127.0.0.1:2375"})
    rc, log = b.run_expect_exit(timeout=10)
    assert rc not in (0, None) and "unix socket only" in log, log


def _freezer_of(pid):
    """The freezer control of pid's cgroup and what freezes/thaws it: v1
    freezer.state, or v2 cgroup.freeze."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        if ":freezer:" in line:
            return Path("/sys/fs/cgroup/freezer" + line.split(":", 2)[2]) / "freezer.state", "FROZEN", "THAWED"
    rel = Path(f"/proc/{pid}/cgroup").read_text().splitlines()[-1].split("::", 1)[1]
    return Path("/sys/fs/cgroup" + rel) / "cgroup.freeze", "1", "0"


@pytest.mark.timeout_s(60)
def test_a_thaw_that_dockerd_refuses_is_taken_from_the_freezer(sandbox):
    """dockerd's idea of "paused" and the kernel's freezer can differ (seen
    under load: a pause answered while the processes ran, then an unpause
    refused with "cannot resume a running process").  Here the freezer is
    thawed behind dockerd's back: the sandbox's thaw then reads the freezer,
    succeeds (its processes run: that is a thaw) and says so in the log;
    jobs run after it."""
    m, t = sandbox
    pid = read_json(t / "status")["init_pid"]
    ctl, frozen, thawed = _freezer_of(pid)
    J.write_ctl(t / "ctl", "freeze\n")
    assert ctl.read_text().strip() == frozen
    ctl.write_text(thawed)
    assert wait_until(lambda: ctl.read_text().strip() == thawed, 5)
    J.write_ctl(t / "ctl", "thaw\n")
    assert "its freezer says it runs: thawed" in m.log, m.log[-2000:]
    code, out, _ = J.run_job(t, "after", "echo fine")
    assert code == 0 and out == "fine\n"
