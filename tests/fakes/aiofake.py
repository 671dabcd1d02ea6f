# SPDX-License-Identifier: MIT
"""Test-side helpers for tests/fakes/aio_server.py: start and stop a fake AIO
server on the host (bubblewrap mode), and a small urllib client for its API and
its /_fake control channel.

    from aiofake import AioFakeServer
    with AioFakeServer(tmp_path) as srv:          # or srv = AioFakeServer(...).start()
        r = srv.api.post("/v1/bash/exec", {"command": "echo hi"})
        assert r.status == 200 and r.json["data"]["stdout"] == "hi\\n"
        srv.api.post("/_fake/faults", {"kind": "error", "path": "^/v1/bash/exec$"})

The server runs in its own process group; stop() sends SIGTERM, then SIGKILL
after 10 s, and reports (leaked) any process left whose command line names the
server's root directory.  Only the standard library is used, so sbxfs's
black-box tests can import this too (sys.path.insert the tests/fakes dir).
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

SERVER = Path(__file__).resolve().parent / "aio_server.py"
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via an http_proxy


class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Resp {self.status} {self.body[:300]!r}>"


class Client:
    """urllib client; never raises on an HTTP status (only on transport errors)."""

    def __init__(self, base):
        self.base = base.rstrip("/")

    def request(self, method, path, body=None, raw=None, headers=None, timeout=15):
        h = {"Accept": "application/json"}
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with _opener.open(req, timeout=timeout) as r:
                return Resp(r.status, r.headers, r.read())
        except urllib.error.HTTPError as e:
            return Resp(e.code, e.headers, e.read())

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        if body is None and "raw" not in kw:
            body = {}
        return self.request("POST", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def upload(self, dest_path, content, filename="blob.bin", field_order=("path", "file"), timeout=30):
        """POST /v1/file/upload as multipart/form-data (fields `file`, `path`)."""
        boundary = "----aiofake" + uuid.uuid4().hex
        parts = []
        for name in field_order:
            if name == "path" and dest_path is not None:
                parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="path"\r\n\r\n'
                             .encode() + dest_path.encode() + b"\r\n")
            elif name == "file":
                parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                             f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
                             .encode() + content + b"\r\n")
        data = b"".join(parts) + f"--{boundary}--\r\n".encode()
        return self.request("POST", "/v1/file/upload", raw=data, timeout=timeout,
                            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})


def procs_naming(text):
    """{pid: cmdline} of processes whose command line contains text."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            out[int(d)] = cmd
    return out


class AioFakeServer:
    def __init__(self, workdir, *args, root=None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.root = Path(root) if root else self.workdir / "root"
        self.port_file = self.workdir / f"port-{uuid.uuid4().hex[:8]}"
        self.log_path = self.workdir / "aio_server.log"
        self.args = list(args)
        self.proc = None
        self.port = None
        self.api = None
        self.leaks = {}

    def start(self, timeout=10):
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [PYTHON, str(SERVER), "--port", "0", "--port-file", str(self.port_file),
                 "--root", str(self.root), *self.args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.port_file.exists() and self.port_file.read_text().strip():
                self.port = int(self.port_file.read_text())
                self.api = Client(f"http://127.0.0.1:{self.port}")
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"aio_server exited ({self.proc.returncode}):\n{self.log}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"aio_server did not write its port within {timeout} s:\n{self.log}")

    @property
    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout=10):
        """SIGTERM (SIGKILL after timeout); returns the exit status."""
        rc = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                rc = self.proc.wait(5)
        # anything still naming our root is a leak: report it and end it
        for _ in range(50):
            self.leaks = procs_naming(str(self.root))
            if not self.leaks:
                break
            time.sleep(0.1)
        for pid in self.leaks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return rc

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
