# SPDX-License-Identifier: MIT
"""Fixtures and helpers for the tests of the container providers (docker,
aio): a test module opts in with

    from containerutil import docker_images, provider, sbxfs, case_label  # noqa: F401

and then every fixture built on `sbxfs` (mnt, sandbox, ws) mounts an sbxfs
whose provider is `provider` ("docker" or "aio", or whatever the module
parametrises), with a locally built image, network.mode isolated (Docker's
"none": this machine's dockerd may have no usable bridge), a container_prefix
and labels unique to the test, so concurrent runs never meet.

After the test every daemon it started is stopped (the conftest's cleanup),
then every container carrying the test's label is removed (docker rm -f,
bounded); containers left over by the daemon are reported in the teardown.
"""

import hashlib
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "fakes"))
import dockerutil  # noqa: E402
from conftest_docker_example import docker_images  # noqa: E402,F401

CASE_LABEL = "org.sbxfs.testcase"
# The engine the container tests talk to: dockerd (the default), or a Podman
# service (tests/test_podman.py sets it): "socket" goes into docker.socket,
# "cli" runs the docker CLI against it.
ENGINE = {"socket": None, "cli": None}
PROVIDERS = ("docker", "aio")
_seq = [0]


def case_id(nodeid):
    return hashlib.sha256(f"{dockerutil.RUN_ID}:{nodeid}".encode()).hexdigest()[:12]


def provider_config(provider, case, extra=None):
    """The mount.conf of a container-provider test, merged with extra (the
    test's own keys win; network and the provider section merge)."""
    _seq[0] += 1
    cfg = {
        "use": provider,
        "image": dockerutil.IMAGES["busybox" if provider == "docker" else "aio"],
        "container_prefix": f"sbxt-{case}-{_seq[0]}",
        "ready_timeout": 30,
        "network": {"mode": "isolated"},
        provider if provider in ("docker", "aio") else "docker": {
            "labels": {dockerutil.TEST_LABEL: dockerutil.RUN_ID, CASE_LABEL: case},
        },
    }
    if ENGINE["socket"]:
        cfg["docker"]["socket"] = ENGINE["socket"]
    for k, v in (extra or {}).items():
        if k in ("network", "docker", "aio") and isinstance(v, dict) and isinstance(cfg.get(k), dict):
            merged = dict(cfg[k])
            merged.update(v)
            cfg[k] = merged
        else:
            cfg[k] = v
    return cfg


@pytest.fixture
def case_label(request):
    """The label value every container of this test carries."""
    return case_id(request.node.nodeid)


@pytest.fixture(params=PROVIDERS)
def provider(request):
    return request.param


@pytest.fixture
def sbxfs(request, sbxfs, provider, docker_images, case_label):  # noqa: F811 - overrides conftest's
    """conftest's factory with the container provider's configuration."""
    made = []

    def make(config=None, **kw):
        inst = sbxfs(config=provider_config(provider, case_label, config), start=False,
                     **{k: v for k, v in kw.items() if k != "start"})
        made.append(inst)
        if kw.get("start", True):
            inst.start()
        return inst

    yield make
    rep = getattr(request.node, "rep_call", None)
    for inst in made:
        if rep is not None and rep.failed:
            print(f"---- sbxfs log ({inst.log_path}) ----\n{inst.log[-8000:]}")
        inst.cleanup()
    left = containers(case_label)
    if left:
        cli("rm", "-f", "-v", *[c["id"] for c in left], check=False, timeout=120)


def cli(*args, **kw):
    """The docker CLI against the engine under test."""
    return (ENGINE["cli"] or dockerutil.docker)(*args, **kw)


def containers(case, all_states=True):
    """[{id, name, state, labels}] of the containers of a test case."""
    args = ["ps", "--no-trunc", "--format", "{{json .}}", "--filter", f"label={CASE_LABEL}={case}"]
    if all_states:
        args.insert(1, "-a")
    r = cli(*args, timeout=60)
    out = []
    for line in r.stdout.splitlines():
        if line.strip():
            d = json.loads(line)
            out.append({"id": d["ID"], "name": d["Names"], "state": d["State"], "ports": d.get("Ports", "")})
    return out


def wait_containers(case, n, timeout=20):
    """Wait until the test case has n containers (any state); returns them."""
    deadline = time.monotonic() + timeout
    while True:
        c = containers(case)
        if len(c) == n or time.monotonic() >= deadline:
            return c
        time.sleep(0.2)


def inspect(name):
    r = cli("inspect", name, timeout=60)
    return json.loads(r.stdout)[0]


def needs(provider, *what):
    """Skip what a provider declares it cannot do (provider.h caps and the
    AIO API's limits)."""
    cannot = {
        "aio": {
            "signals": "the AIO API sends SIGTERM, SIGKILL and SIGINT only (no SBX_CAP_SIGNALS)",
            "escaped": "the AIO API kills a command's process group: processes that setsid() away survive",
            "big_output": "the AIO fake keeps a command's whole output in memory",
            "python": None,
        },
        "docker": {
            "python": "the busybox test image has no python3",
        },
    }
    for w in what:
        reason = cannot.get(provider, {}).get(w)
        if reason:
            pytest.skip(f"{provider}: {reason}")


def free_name():
    return f"sbxt-{os.getpid()}-{time.monotonic_ns() % 10**9}"


def scope_token(user, thread):
    """DESIGN §4's scope token."""
    return hashlib.sha256(f"{user}:{thread}".encode()).hexdigest()[:16]


class DockerProxy:
    """A unix-socket proxy in front of the engine under test (dockerd, or
    ENGINE's Podman) for the daemon's Engine API calls (docker.socket /
    aio.socket).  Bytes pass through unchanged; with
    hold_create set, once a connection carries POST .../containers/create,
    dockerd's answer to it is kept from the daemon (answered is set when it
    arrives: the container exists) until release().  So a test can kill -9
    the daemon between its create request and the answer."""

    def __init__(self):
        self.path = f"/tmp/sbxt-dockerd-{os.getpid()}-{time.monotonic_ns() % 10**9}.sock"
        self.hold_create = False
        self.answered = threading.Event()
        self.released = threading.Event()
        self.held = b""
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(64)
        self.closing = False
        self.conns = []
        self.th = threading.Thread(target=self._accept, daemon=True)
        self.th.start()

    def _accept(self):
        while not self.closing:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                u.connect(ENGINE["socket"] or dockerutil.docker_socket())
            except OSError:
                c.close()
                continue
            self.conns += [c, u]
            state = {"create": False}
            threading.Thread(target=self._pipe, args=(c, u, state, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, state, False), daemon=True).start()

    def _pipe(self, src, dst, state, upstream):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if upstream and self.hold_create and b"/containers/create" in b:
                    state["create"] = True
                if not upstream and state["create"]:
                    self.held += b
                    self.answered.set()
                    self.released.wait()
                    continue  # the daemon never hears it
                dst.sendall(b)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def release(self):
        """Drop what was held (its connection's daemon is gone) and pass
        everything through from now on."""
        self.hold_create = False
        self.released.set()

    def close(self):
        self.closing = True
        self.release()
        self.srv.close()
        for s in self.conns:
            try:
                s.close()
            except OSError:
                pass
        try:
            os.unlink(self.path)
        except OSError:
            pass
