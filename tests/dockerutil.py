# SPDX-License-Identifier: MIT
"""Docker helpers for the pytest suite: start dockerd when it is not running,
build the locally made test images, find and remove the containers a test run
labelled, and reach a container's port from the host through its network
namespace (nsenter), so no port is ever published.

Tests may use the docker CLI; the sbxfs daemon itself never does (it speaks the
Engine API on the unix socket).

    import dockerutil
    started = dockerutil.ensure_dockerd()      # True when this process started it
    dockerutil.ensure_images()                 # tests/images/build.sh (no pulls)
    cid = dockerutil.docker("run", "-d", "--network", "none",
                            "--label", dockerutil.RUN_LABEL, dockerutil.AIO_IMAGE).stdout.strip()
    pid = dockerutil.container_pid(cid)
    [r] = dockerutil.netns_http(pid, [{"method": "GET", "path": "/v1/sandbox",
                                       "until_status": 200, "retry_for": 15}])
    dockerutil.remove_containers(dockerutil.RUN_LABEL)
    dockerutil.stop_dockerd_if_started()

Environment: DOCKER_HOST=unix:///path talks to (and starts dockerd on) that
socket; SBXFS_DOCKERD_ARGS adds arguments to a dockerd started here (e.g.
"--storage-driver vfs --iptables=false" in a nested CI container); DOCKER
names the docker CLI (default /usr/bin/docker).

Every container a test creates must carry RUN_LABEL (org.sbxfs.test=<run id>),
unique to this pytest process, so cleanup never touches another run's
containers.  A session-scoped fixture built on these helpers is in
tests/fakes/conftest_docker_example.py.
"""

import atexit
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent
BUILD_SH = TESTS / "images" / "build.sh"
BUSYBOX_IMAGE = "sbxfs-test-busybox:1"
AIO_IMAGE = "sbxfs-test-aio:1"
AIO_PORT = 8080                      # the AIO image's API port (remote-apis.md B.1)
IMAGES = {"busybox": BUSYBOX_IMAGE, "aio": AIO_IMAGE}
TEST_LABEL = "org.sbxfs.test"
RUN_ID = f"pytest-{os.getpid()}-{int(time.time())}"
RUN_LABEL = f"{TEST_LABEL}={RUN_ID}"
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"

_started = None          # the dockerd we started: {"proc": Popen, "log": path}


class DockerUnavailable(RuntimeError):
    """Docker is not installed, or dockerd cannot be started here."""


def docker_bin():
    exe = os.environ.get("DOCKER")
    if exe:
        return exe
    if os.path.exists("/usr/bin/docker"):      # Debian's docker.io
        return "/usr/bin/docker"
    return shutil.which("docker")


def docker_socket():
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host[len("unix://"):]
    return "/var/run/docker.sock"


def docker_installed():
    return docker_bin() is not None and shutil.which("dockerd") is not None


def ping_socket(path, timeout=2.0):
    """True when the Engine API on the unix socket path (dockerd's or a
    Podman service's) answers GET /_ping with 200 OK."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return False
    return data.startswith(b"HTTP/1.") and b" 200 " in data.split(b"\r\n", 1)[0]


def ping(timeout=2.0):
    """True when dockerd answers GET /_ping with 200 OK."""
    return ping_socket(docker_socket(), timeout)


def _remove_stale_pidfile(path="/var/run/docker.pid"):
    try:
        pid = int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        comm = None
    if comm != "dockerd":
        try:
            os.unlink(path)
        except OSError:
            pass


def _bridge_off(args):
    """Whether dockerd arguments take Docker's default bridge away."""
    for i, a in enumerate(args):
        if a in ("--bridge=none", "-b=none") or (a in ("--bridge", "-b") and args[i + 1:i + 2] == ["none"]):
            return True
    return False


def _start(argv, timeout):
    """Start dockerd with argv; (proc, log, answered)."""
    fd, log = tempfile.mkstemp(prefix="sbxfs-dockerd-", suffix=".log")
    with os.fdopen(fd, "wb") as logf:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ping():
            return proc, log, True
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    return proc, log, False


def ensure_dockerd(timeout=30.0):
    """Make sure dockerd answers on its socket; start it (log in a temporary
    file) when it does not.  Returns True when this call started it.

    A dockerd started here keeps Docker's default bridge network (the docker
    provider's open mode runs on it; tests/test_docker.py tests that on every
    run): SBXFS_DOCKERD_ARGS may add arguments but "--bridge none" is refused
    (such a dockerd also deletes the host's docker0, moby's
    removeDefaultBridgeInterface: no test may start one, see test_docker's
    PrivateDockerd).
    Where dockerd cannot program iptables (a nested CI container, a kernel
    without the legacy or nf_tables iptables modules) it is started again
    with --iptables=false: the bridge stays, only Docker's NAT rules go (open
    mode's own egress rules are sbxfs's nftables in the container)."""
    global _started
    if ping(timeout=10.0):  # a loaded host's dockerd can be slow to answer, not absent
        return False
    if _started is not None and _started["proc"].poll() is None:
        raise DockerUnavailable(f"the dockerd we started does not answer; log {_started['log']}")
    if not docker_installed():
        raise DockerUnavailable("docker.io is not installed (docker and dockerd)")
    if os.geteuid() != 0:
        raise DockerUnavailable("starting dockerd needs root")
    extra = shlex.split(os.environ.get("SBXFS_DOCKERD_ARGS", ""))
    if _bridge_off(extra):
        raise DockerUnavailable("SBXFS_DOCKERD_ARGS takes the default bridge away (--bridge none): "
                                "the docker provider's open mode needs it")
    argv = [shutil.which("dockerd")]
    if docker_socket() != "/var/run/docker.sock":
        argv += ["-H", "unix://" + docker_socket()]
    argv += extra
    if "--pidfile" not in " ".join(argv) and "-p" not in argv:
        _remove_stale_pidfile()
    attempts = [argv]
    if not any(a.startswith("--iptables") for a in argv):
        attempts.append(argv + ["--iptables=false", "--ip-masq=false"])
    tail = ""
    for i, a in enumerate(attempts):
        proc, log, ok = _start(a, timeout)
        _started = {"proc": proc, "log": log}
        if ok:
            atexit.register(stop_dockerd_if_started)
            return True
        tail = Path(log).read_text(errors="replace")[-3000:]
        stop_dockerd_if_started()
        if i + 1 < len(attempts) and "iptables" not in tail:
            break   # not an iptables failure: starting without them changes nothing
    raise DockerUnavailable(f"dockerd did not answer within {timeout} s:\n{tail}")


def bridge_problem(env=None):
    """Why the dockerd the docker CLI reaches (env's DOCKER_HOST) cannot put a
    container on Docker's default bridge network, or None when it can."""
    r = subprocess.run([docker_bin(), "network", "inspect", "bridge", "--format", "{{json .}}"],
                       capture_output=True, text=True, timeout=60, env=env)
    if r.returncode:
        return f"it has no network named bridge (started with --bridge none?): {r.stderr.strip()}"
    try:
        net = json.loads(r.stdout or "null") or {}
    except ValueError:
        net = {}
    cfg = (net.get("IPAM") or {}).get("Config") or []
    if not cfg or not cfg[0].get("Subnet"):
        return "its bridge network has no subnet"
    # its interface: a dockerd started with --bridge none anywhere on the
    # host deletes docker0 (moby's removeDefaultBridgeInterface)
    iface = (net.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
    if not os.path.exists(f"/sys/class/net/{iface}"):
        return f"its bridge interface {iface} is gone (a dockerd started with --bridge none deletes docker0)"
    return None


def started_dockerd():
    """The dockerd we started ({"proc", "log"}) or None."""
    return _started


def stop_dockerd_if_started(timeout=30.0):
    """Stop the dockerd that ensure_dockerd() started (by its pid), if any."""
    global _started
    if _started is None:
        return False
    proc, log = _started["proc"], _started["log"]
    _started = None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    try:
        os.unlink(log)
    except OSError:
        pass
    return True


def docker(*args, check=True, timeout=120, input=None):
    """Run the docker CLI; returns the CompletedProcess (text)."""
    exe = docker_bin()
    if exe is None:
        raise DockerUnavailable("docker CLI not found")
    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, input=input)
    if check and r.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def ensure_images(names=("busybox", "aio"), timeout=600):
    """Build the test images with tests/images/build.sh (only what changed).
    Returns build.sh's report."""
    env = dict(os.environ)
    env.setdefault("DOCKER", docker_bin() or "docker")
    r = subprocess.run(["bash", str(BUILD_SH), *names], capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"tests/images/build.sh failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def containers_with_label(label=RUN_LABEL):
    """Ids of containers (running or not) carrying label (KEY or KEY=VALUE)."""
    r = docker("ps", "-aq", "--no-trunc", "--filter", f"label={label}")
    return [x for x in r.stdout.split() if x]


def remove_containers(label=RUN_LABEL):
    """docker rm -f -v every container with label; returns how many."""
    ids = containers_with_label(label)
    if ids:
        docker("rm", "-f", "-v", *ids, check=False, timeout=120)
    return len(ids)


def container_pid(cid):
    """Host pid of a running container's first process (0 when not running)."""
    return int(docker("inspect", "-f", "{{.State.Pid}}", cid).stdout.strip())


_NETNS_CLIENT = r"""
import json, sys, time, urllib.error, urllib.request
o = urllib.request.build_opener(urllib.request.ProxyHandler({}))
spec = json.loads(sys.argv[1])
out = []
for r in spec["requests"]:
    deadline = time.monotonic() + r.get("retry_for", 0)
    while True:
        data = None
        headers = {"Accept": "application/json"}
        if r.get("json") is not None:
            data = json.dumps(r["json"]).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(spec["base"] + r["path"], data=data, method=r.get("method", "GET"),
                                     headers=headers)
        try:
            with o.open(req, timeout=r.get("timeout", 10)) as resp:
                res = {"status": resp.status, "body": resp.read().decode("utf-8", "replace")}
        except urllib.error.HTTPError as e:
            res = {"status": e.code, "body": e.read().decode("utf-8", "replace")}
        except OSError as e:
            res = {"status": None, "error": str(e)}
        want = r.get("until_status")
        if want is None or res["status"] == want or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    out.append(res)
print(json.dumps(out))
"""


def netns_http(pid, requests, port=AIO_PORT, timeout=120):
    """HTTP requests to 127.0.0.1:port inside the network namespace of host
    process pid (a container's), made by a python3 run under
    `nsenter --net=/proc/PID/ns/net`.  requests: [{"method", "path", "json"?,
    "until_status"?, "retry_for"? (s), "timeout"?}].  Returns [{"status",
    "body"|"error", "json" (parsed body or None)}]."""
    spec = {"base": f"http://127.0.0.1:{port}", "requests": requests}
    r = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", PYTHON, "-c", _NETNS_CLIENT, json.dumps(spec)],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"nsenter client failed ({r.returncode}): {r.stderr.strip()}")
    out = json.loads(r.stdout)
    for x in out:
        try:
            x["json"] = json.loads(x["body"]) if x.get("body") else None
        except ValueError:
            x["json"] = None
    return out
