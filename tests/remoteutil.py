# SPDX-License-Identifier: MIT
"""Fixtures for the tests of the remote providers: a test module opts in with

    from remoteutil import fake, remote, sbxfs  # noqa: F401

and every fixture built on `sbxfs` (mnt, sandbox, ws) mounts an sbxfs whose
provider is `remote`: "opensandbox" (a fake OpenSandbox server,
tests/fakes/opensandbox_server.py, lifecycle + execd with sandboxes in real
bubblewrap roots) or "aio_url" (the aio provider at a base_url: a fake AIO
sandbox, tests/fakes/aio_server.py).  Each test gets its own server; only
the servers are fakes.

init_pid(d) of an opensandbox sandbox is its init process in the fake (a
host process: tests kill it to make the sandbox die); of the AIO sandbox,
the server's pid (one existing sandbox, no per-scope process).

After the test, every daemon is stopped (the conftest's cleanup) and the
OpenSandbox server must list no sandbox any more: nothing leaks, unless a
daemon of the test had keep_on_exit.
"""

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "fakes"))
import sbxutil  # noqa: E402
from aiofake import AioFakeServer  # noqa: E402
from osfake import OpenSandboxFake  # noqa: E402

PROVIDERS = ("opensandbox", "aio_url")


def remote_config(remote, fake, extra=None):
    """The mount.conf of a remote-provider test, merged with extra (None
    removes a key)."""
    if remote == "opensandbox":
        cfg = {"use": "opensandbox", "domain": f"127.0.0.1:{fake.port}", "request_timeout": 5,
               "ready_timeout": 20, "sandbox_timeout": 600}
    else:
        cfg = {"use": "aio", "base_url": f"http://127.0.0.1:{fake.port}", "request_timeout": 5,
               "ready_timeout": 20}
    for k, v in (extra or {}).items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


@pytest.fixture(params=PROVIDERS)
def remote(request):
    return request.param


@pytest.fixture
def fake(remote, tmp_path):
    srv = OpenSandboxFake(tmp_path / "fake") if remote == "opensandbox" else AioFakeServer(tmp_path / "fake")
    srv.start()
    yield srv
    srv.stop()


def sandbox_id(d):
    """The remote id of the sandbox of directory d (OpenSandbox's uuid)."""
    sbxutil.wait_ready(d)
    return sbxutil.status(d)["remote_id"].split(":", 1)[1]


def _init_pid(inst, remote, fake, d):
    sbxutil.wait_ready(d)  # acquire: async: the create may still run after mkdir
    if remote == "aio_url":
        return fake.proc.pid
    pid = fake.sandbox(sandbox_id(d))["init_pid"]
    assert isinstance(pid, int) and pid > 1, pid
    inst.track(pid)
    return pid


@pytest.fixture
def sbxfs(request, sbxfs, remote, fake):  # noqa: F811 - overrides conftest's
    """conftest's factory with the remote provider's configuration."""
    made = []

    def make(config=None, **kw):
        inst = sbxfs(config=remote_config(remote, fake, config), start=False,
                     **{k: v for k, v in kw.items() if k != "start"})
        inst.init_pid = lambda d, inst=inst: _init_pid(inst, remote, fake, d)
        inst.fake = fake
        inst.remote = remote
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
    if remote == "opensandbox" and not any(i.config.get("keep_on_exit") for i in made):
        sbxutil.wait_until(lambda: not fake.sandboxes(), 30)
        assert not fake.sandboxes(), f"remote sandboxes left behind: {fake.sandboxes()}"
    if rep is not None and rep.failed:
        print(f"---- fake server log ----\n{fake.log[-4000:]}")


def needs(remote, what):
    """Skip what a remote provider cannot do, with the reason."""
    cannot = {
        "aio_url": {
            "scopes": "one existing AIO sandbox serves one scope at a time",
            "isolation": "an existing AIO sandbox keeps its own network (only open)",
        },
        "opensandbox": {
            "output_after_restart": "execd streams a foreground command's output only to the request that "
                                    "started it: what it writes while no daemon reads is not recoverable",
        },
    }
    reason = cannot.get(remote, {}).get(what)
    if reason:
        pytest.skip(f"{remote}: {reason}")


def all_proc_text():
    """{pid: argv + environ} of every process we may read."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        text = b""
        for f in ("cmdline", "environ"):
            try:
                with open(f"/proc/{d}/{f}", "rb") as fh:
                    text += fh.read() + b"\n"
            except OSError:
                pass
        out[int(d)] = text
    return out


def wait_gone(path, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not os.path.exists(path):
            return True
        time.sleep(0.1)
    return False
