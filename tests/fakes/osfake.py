# SPDX-License-Identifier: MIT
"""Test-side helper for tests/fakes/opensandbox_server.py: start and stop a
fake OpenSandbox server (lifecycle + execd) as a process, and a small urllib
client for its /_fake control channel.

    from osfake import OpenSandboxFake
    with OpenSandboxFake(tmp_path) as srv:
        srv.sandboxes()                      # [{id, state, init_pid, ...}]
        srv.fault({"kind": "http_error", "path": "^/v1/sandboxes$", "count": 1})

The server runs in its own process group; stop() sends SIGTERM (then
SIGKILL to its group after 10 s), by pid.  Secrets (an API key) are set
through the control channel, never on the server's command line, so a test
can look for them in every process's argv and environment.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

SERVER = Path(__file__).resolve().parent / "opensandbox_server.py"
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class OpenSandboxFake:
    def __init__(self, workdir, *args, api_key=None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.root = self.workdir / "osroot"
        self.port_file = self.workdir / f"osport-{uuid.uuid4().hex[:8]}"
        self.log_path = self.workdir / "opensandbox_server.log"
        self.args = list(args)
        self.api_key = api_key
        self.proc = None
        self.port = None

    def start(self, timeout=15):
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [PYTHON, str(SERVER), "--root", str(self.root), "--port-file", str(self.port_file),
                 "--ready-delay", "0", *self.args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.port_file.exists() and self.port_file.read_text().strip():
                self.port = int(self.port_file.read_text())
                if self.api_key:
                    self.config(api_key=self.api_key)
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"opensandbox_server exited ({self.proc.returncode}):\n{self.log}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"opensandbox_server did not write its port within {timeout} s:\n{self.log}")

    @property
    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def ctl(self, method, path, body=None, timeout=15):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/_fake{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with _opener.open(req, timeout=timeout) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            raise AssertionError(f"/_fake{path}: {e.code} {e.read()!r}")

    def config(self, **kw):
        return self.ctl("POST", "/config", kw)

    def sandboxes(self):
        return self.ctl("GET", "/state")["sandboxes"]

    def sandbox(self, sid):
        return self.ctl("GET", f"/sandboxes/{sid}")

    def fault(self, spec):
        return self.ctl("POST", "/faults", spec)["id"]

    def clear_faults(self):
        self.ctl("DELETE", "/faults")

    def expire(self, sid):
        self.ctl("POST", f"/sandboxes/{sid}/expire", {})

    def requests(self, since=0):
        return self.ctl("GET", f"/requests?since={since}")

    def stop(self, timeout=10):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait(5)
        return rc

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
