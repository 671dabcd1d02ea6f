# SPDX-License-Identifier: MIT
"""Tests of tests/fakes/opensandbox_server.py, driven the way a client drives
OpenSandbox: lifecycle calls with the API key, the endpoint API, then execd at
"http://" + endpoint with the endpoint's headers.  Only http.client is used.

Every test starts its own fake (a subprocess) and stops it with SIGTERM; the
teardown checks that no sandbox process and no sandbox directory is left.
"""

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest

pytestmark = pytest.mark.timeout_s(20)

SERVER = Path(__file__).resolve().with_name("opensandbox_server.py")
CREATE = {"image": {"uri": "python:3.11"}, "entrypoint": ["tail", "-f", "/dev/null"],
          "timeout": 600, "resourceLimits": {"cpu": "1", "memory": "2Gi"},
          "metadata": {"owner": "cclient", "slot": "a1"}, "secureAccess": False}


def events_of(raw_lines):
    """SSE lines -> event dicts (optional "data: " prefix, blank lines skipped)."""
    out = []
    for line in raw_lines:
        line = line.strip()
        if not line or line.startswith((":", "event:", "id:", "retry:")):
            continue
        if line.startswith("data:"):
            line = line[5:].strip()
        out.append(json.loads(line))
    return out


class Fake:
    def __init__(self, base, args):
        base.mkdir(parents=True)
        self.base = base
        self.root = base / "root"
        self.port_file = base / "port"
        self.api_key = None
        if "--api-key" in args:
            self.api_key = args[list(args).index("--api-key") + 1]
        self.log = open(base / "server.log", "wb")
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--root", str(self.root),
                                      "--port-file", str(self.port_file), *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not self.port_file.exists():
            assert self.proc.poll() is None, self.logtext()
            assert time.monotonic() < deadline, "fake did not announce its port"
            time.sleep(0.02)
        self.port = int(self.port_file.read_text())
        self.namespaces = set()

    def logtext(self):
        self.log.flush()
        return (self.base / "server.log").read_text(errors="replace")

    # ---- HTTP

    def request(self, method, path, body=None, headers=None, auth=True, timeout=15):
        h = dict(headers or {})
        if auth and self.api_key and "OPEN-SANDBOX-API-KEY" not in h:
            h["OPEN-SANDBOX-API-KEY"] = self.api_key
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, r.headers, data
        finally:
            c.close()

    def call(self, method, path, body=None, **kw):
        st, h, data = self.request(method, path, body, **kw)
        doc = json.loads(data) if data and h.get("Content-Type", "").startswith("application/json") else data
        return st, h, doc

    def ctl(self, method, path, body=None):
        st, _, doc = self.call(method, "/_fake" + path, body, auth=False)
        assert st == 200, (st, doc)
        return doc

    # ---- sandboxes

    def create(self, **over):
        req = dict(CREATE)
        req.update(over)
        st, _, doc = self.call("POST", "/v1/sandboxes", req)
        assert st == 202, doc
        return doc["id"]

    def state(self, sid):
        st, _, doc = self.call("GET", f"/v1/sandboxes/{sid}")
        return doc["status"]["state"] if st == 200 else st

    def wait_state(self, sid, want, timeout=5):
        deadline = time.monotonic() + timeout
        while True:
            s = self.state(sid)
            if s == want:
                return
            assert time.monotonic() < deadline, f"{sid} is {s}, not {want}"
            time.sleep(0.05)

    def running(self, **over):
        sid = self.create(**over)
        self.wait_state(sid, "Running")
        self.remember(sid)
        return sid

    def remember(self, sid):
        info = self.ctl("GET", f"/sandboxes/{sid}")
        try:
            self.namespaces.add(os.readlink(f"/proc/{info['init_pid']}/ns/pid"))
        except (OSError, TypeError):
            pass

    def endpoint(self, sid, proxy=False):
        q = "?use_server_proxy=true" if proxy else ""
        st, _, doc = self.call("GET", f"/v1/sandboxes/{sid}/endpoints/44772{q}")
        assert st == 200, doc
        host, _, prefix = doc["endpoint"].partition("/")
        assert host == f"127.0.0.1:{self.port}"
        return ("/" + prefix if prefix else ""), doc.get("headers", {})

    def execd(self, sid, method, path, body=None, headers=None, proxy=False, **kw):
        prefix, eh = self.endpoint(sid, proxy)
        h = dict(eh)
        h.update(headers or {})
        return self.call(method, prefix + path, body, headers=h, auth=False, **kw)

    def run(self, sid, cmd, timing=False, **fields):
        """POST /command; -> (events, raw lines[, arrival times])."""
        prefix, eh = self.endpoint(sid)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        c.request("POST", prefix + "/command", body=json.dumps(dict(command=cmd, **fields)),
                  headers=dict(eh, **{"Content-Type": "application/json"}))
        r = c.getresponse()
        assert r.status == 200, r.read()
        assert r.headers["Content-Type"] == "text/event-stream"
        raw, times = [], []
        try:
            while True:
                line = r.readline()
                if not line:
                    break
                raw.append(line.decode())
                times.append(time.monotonic())
        finally:
            c.close()
        evs = events_of(raw)
        if timing:
            return evs, raw, [t for t, l in zip(times, raw) if l.strip()]
        return evs, raw

    # ---- teardown

    def leftovers(self, before):
        """Processes of our sandboxes: in one of their pid namespaces, or
        naming our root on their command line, and started before `before`
        (clock ticks since boot).  The start time matters because a pid
        namespace's inode number is reused once it is gone."""
        left = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == self.proc.pid:
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    started = int(f.read().rsplit(b")", 1)[1].split()[19])
                if started > before:
                    continue
                if os.readlink(f"/proc/{name}/ns/pid") in self.namespaces:
                    left.append(int(name))
                    continue
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read()
            except (OSError, IndexError, ValueError):
                continue
            if str(self.root).encode() in cmd:
                left.append(int(name))
        return left

    def stop(self):
        with open("/proc/uptime") as f:
            before = int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK")) + 1
        if self.proc.poll() is None:
            try:
                for s in self.ctl("GET", "/state")["sandboxes"]:
                    self.remember(s["id"])
            except Exception:
                pass
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("fake ignored SIGTERM")
        self.log.close()
        deadline = time.monotonic() + 5
        while self.leftovers(before) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = self.leftovers(before)
        desc = []
        for p in left:
            try:
                st = dict(ln.split(":", 1) for ln in open(f"/proc/{p}/status").read().splitlines() if ":" in ln)
                desc.append(f"{p} {st['Name'].strip()} {st['State'].strip()} ppid={st['PPid'].strip()} "
                            + open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode())
            except OSError:
                desc.append(str(p))
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not left, f"processes left behind: {desc}"
        assert not self.root.exists() or not list(self.root.iterdir()), list(self.root.iterdir())


@pytest.fixture
def fake(tmp_path):
    made = []

    def start(*args):
        f = Fake(tmp_path / f"fake{len(made)}", [str(a) for a in args])
        made.append(f)
        return f

    yield start
    errors = []
    for f in made:
        try:
            f.stop()
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, errors


@pytest.fixture
def srv(fake):
    return fake("--graceful-close", "0.05", "--ready-delay", "0.2")


def multipart(pairs, boundary="------------------------sbxfsBoundary7MA4YWxk"):
    """A body as libcurl's mime API builds it: metadata (a file part) + file."""
    out = []
    for meta, name, data in pairs:
        if meta is not None:
            out.append(f"--{boundary}\r\nContent-Disposition: form-data; name=\"metadata\"; "
                       f"filename=\"metadata\"\r\nContent-Type: application/json\r\n\r\n".encode()
                       + json.dumps(meta).encode() + b"\r\n")
        if data is not None:
            out.append(f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                       f"filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n".encode()
                       + data + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def upload(f, sid, pairs):
    body, h = multipart(pairs)
    return f.execd(sid, "POST", "/files/upload", body, headers=h)


# --------------------------------------------------------------------------
# lifecycle


def test_create_get_list_delete(srv):
    st, h, doc = srv.call("POST", "/v1/sandboxes", CREATE)
    assert st == 202
    uuid.UUID(doc["id"])
    assert doc["status"]["state"] == "Pending"
    assert {"id", "status", "metadata", "expiresAt", "createdAt", "entrypoint"} <= set(doc)
    assert "image" not in doc and "snapshotId" not in doc
    sid = doc["id"]
    created = datetime.fromisoformat(doc["createdAt"].replace("Z", "+00:00"))
    expires = datetime.fromisoformat(doc["expiresAt"].replace("Z", "+00:00"))
    assert abs((expires - created).total_seconds() - 600) < 1
    srv.wait_state(sid, "Running")
    srv.remember(sid)
    st, _, doc = srv.call("GET", f"/v1/sandboxes/{sid}")
    assert st == 200 and doc["image"] == {"uri": "python:3.11"}
    assert doc["metadata"] == {"owner": "cclient", "slot": "a1"}
    assert doc["status"]["reason"] == "CONTAINER_RUNNING" and "lastTransitionAt" in doc["status"]
    assert doc["entrypoint"] == ["tail", "-f", "/dev/null"]
    st, _, lst = srv.call("GET", "/v1/sandboxes")
    assert st == 200 and [i["id"] for i in lst["items"]] == [sid]
    assert lst["pagination"] == {"page": 1, "pageSize": 20, "totalItems": 1, "totalPages": 1, "hasNextPage": False}
    # also mounted at the root, as the FastAPI server does
    assert srv.call("GET", f"/sandboxes/{sid}")[0] == 200
    st, h, body = srv.request("DELETE", f"/v1/sandboxes/{sid}")
    assert st == 204 and body == b"" and h["X-Request-ID"]
    st, h, doc = srv.call("GET", f"/v1/sandboxes/{sid}")
    assert st == 404 and doc == {"code": "DOCKER::SANDBOX_NOT_FOUND", "message": f"Sandbox {sid} not found."}
    assert srv.call("DELETE", f"/v1/sandboxes/{sid}")[0] == 404
    st, _, doc = srv.call("GET", "/health", auth=False)
    assert st == 200 and doc == {"status": "healthy"}


def test_validation_shapes(srv):
    def create(body, raw=None):
        return srv.call("POST", "/v1/sandboxes", raw if raw is not None else body,
                        headers={"Content-Type": "application/json"})

    st, _, doc = create({k: v for k, v in CREATE.items() if k != "resourceLimits"})
    assert st == 422 and doc["detail"][0]["type"] == "value_error" and doc["detail"][0]["loc"] == ["body"]
    assert "resourceLimits" in doc["detail"][0]["msg"]
    st, _, doc = create(dict(CREATE, timeout=30))
    assert st == 422
    assert doc["detail"][0]["loc"] == ["body", "timeout"] and doc["detail"][0]["type"] == "greater_than_equal"
    assert set(doc["detail"][0]) >= {"loc", "msg", "type"}
    st, _, doc = create(dict(CREATE, snapshotId="snap1"))
    assert st == 422 and "Exactly one of image or snapshotId" in doc["detail"][0]["msg"]
    st, _, doc = create({k: v for k, v in CREATE.items() if k != "entrypoint"})
    assert st == 422 and "entrypoint" in doc["detail"][0]["msg"]
    st, _, doc = create(dict(CREATE, entrypoint=[]))
    assert st == 422 and doc["detail"][0]["type"] == "too_short"
    st, _, doc = create(dict(CREATE, image={}))
    assert st == 422 and doc["detail"][0]["loc"] == ["body", "image", "uri"] and doc["detail"][0]["type"] == "missing"
    st, _, doc = create(None, raw=b'{"image": ')
    assert st == 422 and doc["detail"][0]["type"] == "json_invalid"
    st, _, doc = create(dict(CREATE, env={"A": 1}))
    assert st == 422 and doc["detail"][0]["loc"] == ["body", "env", "A"]
    st, _, doc = create(dict(CREATE, metadata={"owner": "not ok!"}))
    assert st == 400 and doc["code"] == "SANDBOX::INVALID_METADATA_LABEL" and doc["message"]
    st, _, doc = create(dict(CREATE, metadata={"opensandbox.io/x": "y"}))
    assert st == 400 and doc["code"] == "SANDBOX::INVALID_METADATA_LABEL"
    st, _, doc = create(dict(CREATE, metadata={"example.com/team": "ml", "a_b.c": ""}))
    assert st == 202
    assert srv.call("GET", "/v1/sandboxes?pageSize=0")[0] == 422
    assert srv.call("GET", "/v1/sandboxes?pageSize=201")[0] == 422
    st, _, doc = srv.call("GET", "/v1/sandboxes?page=x")
    assert st == 422 and doc["detail"][0]["loc"] == ["query", "page"]
    st, _, doc = srv.call("GET", "/v1/sandboxes?metadata=" + quote("owner"))
    assert st == 400 and doc["code"] == "INVALID_METADATA_FORMAT"
    sid = srv.call("GET", "/v1/sandboxes")[2]["items"][0]["id"]
    st, _, doc = srv.call("POST", f"/v1/sandboxes/{sid}/renew-expiration", {})
    assert st == 422 and doc["detail"][0]["loc"] == ["body", "expiresAt"]
    st, _, doc = srv.call("GET", f"/v1/sandboxes/{sid}/endpoints/abc")
    assert st == 422 and doc["detail"][0]["loc"] == ["path", "port"]
    st, _, doc = srv.call("GET", f"/v1/sandboxes/{sid}/endpoints/0")
    assert st == 400 and doc["code"] == "DOCKER::INVALID_PORT"
    st, _, doc = srv.call("GET", "/v1/nothing")
    assert st == 404 and set(doc) == {"code", "message"}


def test_api_key(fake):
    f = fake("--api-key", "s3cret", "--ready-delay", "0", "--graceful-close", "0")
    st, _, doc = f.call("GET", "/v1/sandboxes", auth=False)
    assert st == 401 and doc["code"] == "MISSING_API_KEY" and doc["message"]
    st, _, doc = f.call("GET", "/v1/sandboxes", headers={"OPEN-SANDBOX-API-KEY": "nope"})
    assert st == 401 and doc["code"] == "INVALID_API_KEY"
    st, _, doc = f.call("GET", "/v1/sandboxes/whatever", auth=False)
    assert st == 401
    assert f.call("GET", "/health", auth=False)[0] == 200
    sid = f.running()
    # execd never sees the lifecycle key; the proxy route is exempt from it
    for proxy in (False, True):
        prefix, eh = f.endpoint(sid, proxy)
        st, _, body = f.request("GET", prefix + "/ping", headers=eh, auth=False)
        assert st == 200 and body == b""


def test_request_id(srv):
    st, h, _ = srv.request("GET", "/v1/sandboxes", headers={"X-Request-ID": "req-abc-123"})
    assert h["X-Request-ID"] == "req-abc-123"
    st, h, _ = srv.request("GET", "/v1/sandboxes/nope")
    assert st == 404 and uuid.UUID(h["X-Request-ID"])
    sid = srv.running()
    st, h, _ = srv.execd(sid, "GET", "/ping", headers={"X-Request-ID": "r2"})
    assert h["X-Request-ID"] == "r2"


def test_list_filters_and_pages(fake):
    f = fake("--ready-delay", "0", "--graceful-close", "0")
    a1 = f.create(metadata={"owner": "a", "slot": "1"})
    a2 = f.create(metadata={"owner": "a", "slot": "2"})
    b = f.create(metadata={"owner": "b", "note": "Demo.Test"})
    for s in (a1, a2, b):
        f.remember(s)

    def ids(q):
        st, _, doc = f.call("GET", "/v1/sandboxes?" + q)
        assert st == 200, doc
        return [i["id"] for i in doc["items"]], doc["pagination"]

    assert ids("")[0] == [b, a2, a1]  # newest first
    assert ids("metadata=" + quote("owner=a"))[0] == [a2, a1]
    assert ids("metadata=" + quote(urlencode({"owner": "a", "slot": "2"})))[0] == [a2]
    assert ids("metadata=owner%3Da%26slot%3D2")[0] == [a2]
    assert ids("metadata=" + quote("note=Demo.Test"))[0] == [b]
    assert ids("state=running")[0] == [b, a2, a1]
    assert ids("state=Paused")[0] == []
    assert ids("state=Paused&state=Running&metadata=" + quote("owner=b"))[0] == [b]
    items, pg = ids("pageSize=2")
    assert items == [b, a2] and pg == {"page": 1, "pageSize": 2, "totalItems": 3, "totalPages": 2, "hasNextPage": True}
    items, pg = ids("pageSize=2&page=2")
    assert items == [a1] and pg["hasNextPage"] is False
    assert ids("page=5")[0] == []


def test_endpoints_and_ping(srv):
    sid = srv.running()
    st, _, doc = srv.call("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    assert doc == {"endpoint": f"127.0.0.1:{srv.port}/{sid}/44772"}
    st, _, doc = srv.call("GET", f"/v1/sandboxes/{sid}/endpoints/44772?use_server_proxy=true")
    assert doc == {"endpoint": f"127.0.0.1:{srv.port}/sandboxes/{sid}/proxy/44772"}
    srv.ctl("POST", "/config", {"endpoint_style": "header"})
    st, _, doc = srv.call("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    assert doc == {"endpoint": f"127.0.0.1:{srv.port}", "headers": {"OpenSandbox-Ingress-To": f"{sid}-44772"}}
    # every shape reaches execd
    for path, h in ((f"/{sid}/44772/ping", {}), (f"/sandboxes/{sid}/proxy/44772/ping", {}),
                    (f"/v1/sandboxes/{sid}/proxy/44772/ping", {}),
                    ("/ping", {"OpenSandbox-Ingress-To": f"{sid}-44772"})):
        st, _, body = srv.request("GET", path, headers=h, auth=False)
        assert (st, body) == (200, b""), path
    # the egress port resolves but nothing answers there
    st, _, doc = srv.call("GET", f"/v1/sandboxes/{sid}/endpoints/18080")
    assert st == 200
    st, _, doc = srv.call("GET", f"/{sid}/18080/health")
    assert st == 502 and doc["code"]
    assert srv.call("GET", f"/{uuid.uuid4()}/44772/ping")[0] == 404
    assert srv.call("GET", f"/v1/sandboxes/{uuid.uuid4()}/endpoints/44772")[0] == 404
    # execd is unreachable until Running
    srv.ctl("POST", "/config", {"ready_delay": 2.0})
    sid2 = srv.create()
    srv.remember(sid2)
    st, _, doc = srv.call("GET", f"/{sid2}/44772/ping")
    assert st == 502 and srv.state(sid2) == "Pending"
    srv.wait_state(sid2, "Running")
    assert srv.request("GET", f"/{sid2}/44772/ping")[0] == 200


def test_execd_token(fake):
    f = fake("--execd-token", "tok", "--ready-delay", "0")
    sid = f.running()
    st, _, doc = f.execd(sid, "GET", "/ping")
    assert st == 401 and doc == {"error": "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}
    assert f.execd(sid, "GET", "/ping", headers={"X-EXECD-ACCESS-TOKEN": "tok"})[0] == 200


# --------------------------------------------------------------------------
# commands


def test_command_streams_as_produced_data_form(srv):
    sid = srv.running()
    t0 = time.monotonic()
    evs, raw, times = srv.run(sid, "for i in 1 2 3; do echo $i; sleep 1; done", timing=True)
    assert all(line.startswith("data: ") for line in raw if line.strip())
    assert [e["type"] for e in evs][0] == "init" and evs[0]["text"]
    outs = [(e, t) for e, t in zip(evs, times) if e["type"] == "stdout"]
    assert [e["text"] for e, _ in outs] == ["1", "2", "3"]
    end = times[-1]
    assert evs[-1]["type"] == "execution_complete" and evs[-1]["execution_time"] >= 2500
    assert "error" not in evs[-1] and isinstance(evs[-1]["timestamp"], int)
    # "1" arrived about 2 s before the end, "2" about 1 s before it
    assert end - outs[0][1] > 1.5 and end - outs[1][1] > 0.5
    assert outs[0][1] - t0 < 2.0


def test_command_bare_form_lines_and_exit_codes(fake):
    f = fake("--sse-form", "bare", "--ready-delay", "0", "--graceful-close", "0", "--ping-interval", "0.3")
    sid = f.running()
    evs, raw = f.run(sid, r"printf 'a\r\nb\rc\n\nd'; echo err >&2; exit 3")
    assert not any(line.startswith("data:") for line in raw)
    assert all(line.startswith("{") for line in raw if line.strip())
    assert "".join(raw).endswith("}\n\n")
    assert [e["text"] for e in evs if e["type"] == "stdout"] == ["a", "b", "c", "\n", "d"]
    assert [e["text"] for e in evs if e["type"] == "stderr"] == ["err"]
    assert evs[-1]["type"] == "error"
    assert evs[-1]["error"] == {"ename": "CommandExecError", "evalue": "3", "traceback": ["exit status 3"]}
    evs, _ = f.run(sid, "sleep 1; true")
    assert evs[-1]["type"] == "execution_complete"
    assert len([e for e in evs if e["type"] == "ping"]) >= 2
    assert all(e["text"] == "pong" for e in evs if e["type"] == "ping")
    # switch the framing at run time
    f.ctl("POST", "/config", {"sse_form": "data"})
    _, raw = f.run(sid, "true")
    assert all(line.startswith("data: {") for line in raw if line.strip())


def test_first_command_right_after_create(fake):
    # bwrap announces its child before the new root is built: the fake must
    # not let a command in before the root and cwd are the sandbox's
    f = fake("--ready-delay", "0", "--graceful-close", "0")
    for _ in range(6):
        sid = f.running()
        evs, _ = f.run(sid, "pwd; ls /usr/bin/env; cd .. && pwd")
        assert [e["text"] for e in evs if e["type"] == "stdout"] == ["/", "/usr/bin/env", "/"]
        assert [e for e in evs if e["type"] == "stderr"] == []


def test_command_timeout_kills_group(srv):
    sid = srv.running()
    t0 = time.monotonic()
    evs, _ = srv.run(sid, "sleep 30 & sleep 30; echo never", timeout=500)
    assert time.monotonic() - t0 < 5
    assert evs[-1]["type"] == "error"
    assert evs[-1]["error"]["evalue"] == "-1" and evs[-1]["error"]["traceback"] == ["signal: killed"]
    cid = evs[0]["text"]
    st, _, doc = srv.execd(sid, "GET", f"/command/status/{cid}")
    assert st == 200 and doc["running"] is False and doc["exit_code"] == -1 and doc["error"] == "signal: killed"
    assert doc["content"].startswith("sleep 30") and doc["started_at"] and doc["finished_at"]
    # the backgrounded sleep was in the group too
    evs, _ = srv.run(sid, "pgrep -c -x sleep || true")
    assert [e["text"] for e in evs if e["type"] == "stdout"] == ["0"]


@pytest.mark.timeout_s(60)
def test_command_interrupt(srv):
    sid = srv.running()
    result = {}

    def bg(cmd, key):
        result[key] = srv.run(sid, cmd)[0]

    for cmd, key in (("sleep 30", "plain"),
                     ("trap 'echo got; exit 7' TERM; touch /tmp/armed-trap; sleep 30 & wait", "trap"),
                     ("trap 'echo int; exit 5' INT; touch /tmp/armed-int; sleep 30 & wait", "int")):
        if key == "int":
            srv.ctl("POST", "/config", {"interrupt_signal": "INT"})
        th = threading.Thread(target=bg, args=(cmd, key))
        th.start()
        deadline = time.monotonic() + 5
        cid = None
        while cid is None and time.monotonic() < deadline:
            cmds = srv.ctl("GET", f"/sandboxes/{sid}")["commands"]
            running = [c for c in cmds if c["running"] and c["content"] == cmd]
            cid = running[0]["id"] if running else None
            time.sleep(0.05)
        assert cid
        if key != "plain":  # signal only once the shell has set its trap
            armed = f"test -e /tmp/armed-{key} && echo armed || true"
            while [e["text"] for e in srv.run(sid, armed)[0] if e["type"] == "stdout"] != ["armed"]:
                assert time.monotonic() < deadline + 10
                time.sleep(0.05)
        st, _, body = srv.execd(sid, "DELETE", f"/command?id={cid}")
        assert st == 200
        th.join(10)
        assert not th.is_alive()
    assert result["plain"][-1]["error"]["evalue"] == "-1"
    assert result["plain"][-1]["error"]["traceback"] == ["signal: terminated"]
    assert result["trap"][-1]["error"]["evalue"] == "7"
    assert [e["text"] for e in result["trap"] if e["type"] == "stdout"] == ["got"]
    assert result["int"][-1]["error"]["evalue"] == "5"
    assert [e["text"] for e in result["int"] if e["type"] == "stdout"] == ["int"]
    st, _, doc = srv.execd(sid, "DELETE", "/command")
    assert st == 400 and doc["code"] == "MISSING_QUERY"
    st, _, doc = srv.execd(sid, "DELETE", "/command?id=nope")
    assert st == 500 and doc["code"] == "RUNTIME_ERROR"
    st, _, doc = srv.execd(sid, "GET", "/command/status/nope")
    assert st == 404


def test_background_command_status_and_logs(srv):
    sid = srv.running()
    evs, _ = srv.run(sid, "echo one; echo two >&2; while [ ! -e /tmp/go-bg ]; do sleep 0.05; done; echo three",
                     background=True)
    assert [e["type"] for e in evs] == ["init", "execution_complete"]
    cid = evs[0]["text"]
    st, _, doc = srv.execd(sid, "GET", f"/command/status/{cid}")
    assert doc["running"] is True and "exit_code" not in doc and "finished_at" not in doc
    deadline = time.monotonic() + 5
    while True:
        st, h, body = srv.execd(sid, "GET", f"/command/{cid}/logs")
        if body == b"one\ntwo\n" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert st == 200 and h["Content-Type"].startswith("text/plain") and body == b"one\ntwo\n"
    cur = int(h["EXECD-COMMANDS-TAIL-CURSOR"])
    assert cur == len(body)
    srv.run(sid, "touch /tmp/go-bg")
    deadline = time.monotonic() + 5
    while srv.execd(sid, "GET", f"/command/status/{cid}")[2]["running"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    st, _, doc = srv.execd(sid, "GET", f"/command/status/{cid}")
    assert doc["exit_code"] == 0 and "error" not in doc and doc["finished_at"]
    st, h, body = srv.execd(sid, "GET", f"/command/{cid}/logs?cursor={cur}")
    assert body == b"three\n" and int(h["EXECD-COMMANDS-TAIL-CURSOR"]) == cur + 6
    fg = srv.run(sid, "true")[0][0]["text"]
    assert srv.execd(sid, "GET", f"/command/{fg}/logs")[0] == 400


def test_command_env_cwd_uid_and_errors(fake):
    f = fake("--ready-delay", "0", "--graceful-close", "0")
    sid = f.running(env={"FOO": "bar", "GONE": None})
    evs, _ = f.run(sid, 'echo "$FOO $BAZ ${GONE-unset}"; pwd; id -u; echo $HOME', cwd="/tmp", envs={"BAZ": "q"})
    assert [e["text"] for e in evs if e["type"] == "stdout"] == ["bar q unset", "/tmp", "0", "/root"]
    evs, _ = f.run(sid, "id -u; id -g", uid=65534)
    assert [e["text"] for e in evs if e["type"] == "stdout"] == ["65534", "65534"]
    evs, _ = f.run(sid, "pwd", cwd="~")
    assert [e["text"] for e in evs if e["type"] == "stdout"] == ["/root"]
    for body, code in (({"command": "true", "cwd": "/nope"}, "INVALID_REQUEST_BODY"),
                       ({"command": "true", "cwd": "/etc/passwd"}, "INVALID_REQUEST_BODY"),
                       ({"command": ""}, "INVALID_REQUEST_BODY"),
                       ({"command": "true", "gid": 1}, "INVALID_REQUEST_BODY"),
                       ({"command": "true", "timeout": -1}, "INVALID_REQUEST_BODY"),
                       ({"command": "true", "envs": {"A": 1}}, "INVALID_REQUEST_BODY")):
        st, h, doc = f.execd(sid, "POST", "/command", body)
        assert st == 400 and doc["code"] == code and doc["message"], body
    st, _, doc = f.execd(sid, "POST", "/command", b"{not json", headers={"Content-Type": "application/json"})
    assert st == 400 and doc["code"] == "INVALID_REQUEST_BODY"


def test_sandbox_is_shared_and_confined(srv):
    sid = srv.running()
    evs, _ = srv.run(sid, "echo hi > /tmp/x; mkdir -p /workspace; (sleep 30 &); hostname")
    host = [e["text"] for e in evs if e["type"] == "stdout"]
    assert evs[-1]["type"] == "execution_complete"
    evs, _ = srv.run(sid, "cat /tmp/x; pgrep -c -x sleep; hostname; test -e /work && echo LEAK || echo confined;"
                          " touch /usr/x 2>/dev/null || echo ro; ip -o link 2>/dev/null | wc -l; ls /mnt")
    out = [e["text"] for e in evs if e["type"] == "stdout"]
    assert out[:5] == ["hi", "1", host[0], "confined", "ro"]
    assert not os.path.exists("/usr/x")
    # the sandbox's / is the fake's rootfs directory for it
    info = srv.ctl("GET", f"/sandboxes/{sid}")
    assert Path(info["rootfs"], "tmp/x").read_text() == "hi\n"
    assert info["init_pid"] and info["commands"]


# --------------------------------------------------------------------------
# files


def test_upload_download_range(srv):
    sid = srv.running()
    data = bytes(range(256)) * 40
    st, _, body = upload(srv, sid, [
        ({"path": "/mnt/user-data/workspace/a.txt", "owner": None, "group": None, "mode": 755}, "a.txt", b"hello world"),
        ({"path": "/tmp/deep/b.bin", "mode": 600}, "/tmp/deep/b.bin", data),
        ({"path": "~/home.txt", "mode": 644}, "home.txt", b"at home")])
    assert (st, body) == (200, b"")
    evs, _ = srv.run(sid, "cat /mnt/user-data/workspace/a.txt; echo; stat -c %a /mnt/user-data/workspace/a.txt;"
                          " cat /root/home.txt")
    assert [e["text"] for e in evs if e["type"] == "stdout"] == ["hello world", "755", "at home"]
    st, h, body = srv.execd(sid, "GET", "/files/download?path=" + quote("/tmp/deep/b.bin"))
    assert st == 200 and body == data and h["Content-Type"] == "application/octet-stream"
    assert h["Content-Length"] == str(len(data)) and h["Content-Disposition"] == 'attachment; filename="b.bin"'
    for rng, start, end in (("bytes=2-5", 2, 5), ("bytes=10-", 10, len(data) - 1), ("bytes=-3", len(data) - 3, len(data) - 1),
                            ("bytes=100-999999", 100, len(data) - 1)):
        st, h, body = srv.execd(sid, "GET", "/files/download?path=/tmp/deep/b.bin", headers={"Range": rng})
        assert st == 206 and body == data[start:end + 1], rng
        assert h["Content-Range"] == f"bytes {start}-{end}/{len(data)}"
    for rng in ("bytes=99999-", "bytes=abc", "bytes=5-2"):
        st, _, doc = srv.execd(sid, "GET", "/files/download?path=/tmp/deep/b.bin", headers={"Range": rng})
        assert st == 416 and doc["code"] == "UNKNOWN", rng
    st, _, doc = srv.execd(sid, "GET", "/files/download?path=/tmp/missing")
    assert st == 404 and doc["code"] == "FILE_NOT_FOUND"
    st, _, doc = srv.execd(sid, "GET", "/files/download")
    assert st == 400 and doc["code"] == "MISSING_QUERY"
    st, _, doc = srv.execd(sid, "GET", "/files/info?path=/mnt/user-data/workspace/a.txt&path=/tmp/deep")
    a = doc["/mnt/user-data/workspace/a.txt"]
    assert a["type"] == "file" and a["size"] == 11 and a["mode"] == 755 and a["owner"] == "root" and a["group"] == "root"
    assert set(a) == {"path", "type", "size", "modified_at", "created_at", "owner", "group", "mode"}
    assert doc["/tmp/deep"]["type"] == "directory" and doc["/tmp/deep"]["mode"] == 755
    assert srv.execd(sid, "GET", "/files/info?path=/tmp/nope&path=/tmp/deep")[0] == 404
    # upload errors
    assert upload(srv, sid, [(None, "x", b"x")])[2]["code"] == "INVALID_FILE_METADATA"
    assert upload(srv, sid, [({"path": "/tmp/y"}, None, None)])[2]["code"] == "INVALID_FILE_CONTENT"
    assert upload(srv, sid, [({"path": "/tmp/y"}, "y", b"1"), ({"path": "/tmp/z"}, None, None)])[2]["code"] == "INVALID_FILE"
    assert upload(srv, sid, [({"path": ""}, "y", b"1")])[2]["code"] == "INVALID_FILE_METADATA"
    assert upload(srv, sid, [])[2]["code"] == "INVALID_FILE"
    # metadata sent as a plain form field (no filename) does not count
    body, h = multipart([(None, "f", b"data")])
    body = (b'--B\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n{"path":"/tmp/q"}\r\n'
            b'--B\r\nContent-Disposition: form-data; name="file"; filename="q"\r\n\r\nq\r\n--B--\r\n')
    st, _, doc = srv.execd(sid, "POST", "/files/upload", body, headers={"Content-Type": "multipart/form-data; boundary=B"})
    assert st == 400 and doc["code"] == "INVALID_FILE_METADATA"


def test_files_api(srv):
    sid = srv.running()

    def ex(method, path, body=None):
        return srv.execd(sid, method, path, body)

    assert ex("POST", "/directories", {"/w/a/b": {"mode": 700}, "/w/c": {"mode": 755, "owner": "nobody"}})[0] == 200
    info = ex("GET", "/files/info?path=/w/a/b&path=/w/c")[2]
    assert info["/w/a/b"]["mode"] == 700 and info["/w/c"]["owner"] == "nobody"
    upload(srv, sid, [({"path": "/w/a/x.py", "mode": 644}, "x.py", b"print('a')\nprint('a')\n"),
                      ({"path": "/w/c/y.txt", "mode": 644}, "y.txt", b"y")])
    srv.run(sid, "ln -s /w/c /w/link")
    st, _, lst = ex("GET", "/directories/list?path=/w")
    assert st == 200 and [(e["path"], e["type"]) for e in lst] == [("/w/a", "directory"), ("/w/c", "directory"),
                                                                   ("/w/link", "symlink")]
    st, _, lst = ex("GET", "/directories/list?path=/w&depth=2")
    assert [e["path"] for e in lst] == ["/w/a", "/w/a/b", "/w/a/x.py", "/w/c", "/w/c/y.txt", "/w/link"]
    assert ex("GET", "/directories/list?path=/w&depth=0")[2] == []
    assert ex("GET", "/directories/list?path=/w/none")[0] == 404
    assert ex("GET", "/directories/list?path=/w/a/x.py")[0] == 400
    assert ex("GET", "/directories/list?path=/w/link")[0] == 400
    assert ex("GET", "/directories/list?path=/w&depth=x")[0] == 400
    st, _, found = ex("GET", "/files/search?path=/w&pattern=" + quote("*.py"))
    assert [e["path"] for e in found] == ["/w/a/x.py"]
    st, _, found = ex("GET", "/files/search?path=/w")
    assert [e["path"] for e in found] == ["/w/a/x.py", "/w/c/y.txt", "/w/link"]
    assert ex("GET", "/files/search?path=/nowhere")[0] == 404
    st, _, doc = ex("POST", "/files/replace?verbose=true", {"/w/a/x.py": {"old": "'a'", "new": "'b'"}})
    assert st == 200 and doc == {"/w/a/x.py": {"replacedCount": 2}}
    assert ex("GET", "/files/download?path=/w/a/x.py")[2] == b"print('b')\nprint('b')\n"
    assert ex("POST", "/files/replace", {"/w/a/x.py": {"old": "", "new": "z"}})[0] == 400
    assert ex("POST", "/files/permissions", {"/w/a/x.py": {"mode": 600, "owner": "nobody", "group": "nogroup"}})[0] == 200
    i = ex("GET", "/files/info?path=/w/a/x.py")[2]["/w/a/x.py"]
    assert (i["mode"], i["owner"], i["group"]) == (600, "nobody", "nogroup")
    assert ex("POST", "/files/mv", [{"src": "/w/a/x.py", "dest": "/w/new/dir/x.py"}])[0] == 200
    assert ex("GET", "/files/info?path=/w/new/dir/x.py")[0] == 200
    assert ex("POST", "/files/mv", [{"src": "/w/a/x.py", "dest": "/w/q"}])[2]["code"] == "FILE_NOT_FOUND"
    assert ex("POST", "/files/mv", [{"src": "/w/c/y.txt", "dest": "/w/new/dir/x.py"}])[0] == 500
    st, _, doc = ex("DELETE", "/files?path=/w/c")
    assert st == 500 and doc["code"] == "RUNTIME_ERROR"
    assert ex("DELETE", "/files?path=/w/c/y.txt&path=/w/missing")[0] == 200
    assert ex("GET", "/files/info?path=/w/c/y.txt")[0] == 404
    assert ex("DELETE", "/directories?path=/w/a&path=/w/missing")[0] == 200
    assert ex("GET", "/files/info?path=/w/a")[0] == 404
    st, _, m = ex("GET", "/metrics")
    assert st == 200 and {"cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib", "timestamp"} <= set(m)
    assert ex("GET", "/no/such/route")[0] == 404


def test_files_api_stays_inside_the_sandbox(srv):
    sid = srv.running()
    srv.run(sid, "ln -s / /tmp/hostroot; ln -s /work /tmp/work; ln -s ../../.. /tmp/up")
    for p in ("/tmp/hostroot/work", "/tmp/work", "/tmp/up/work", "/../../work"):
        st, _, doc = srv.execd(sid, "GET", "/files/info?path=" + quote(p))
        assert st == 404, p
    # /usr and /etc are the host's, read-only
    st, _, doc = srv.execd(sid, "GET", "/files/download?path=/etc/hostname")
    assert st == 200
    for p in ("/usr/evil", "/tmp/hostroot/usr/evil", "/etc/evil"):
        st, _, doc = upload(srv, sid, [({"path": p}, "e", b"x")])
        assert st == 500 and doc["code"] == "RUNTIME_ERROR", p
        assert not os.path.exists("/" + p.split("/")[-2] + "/evil")
    assert srv.execd(sid, "DELETE", "/directories?path=/usr")[0] == 500
    assert srv.execd(sid, "DELETE", "/directories?path=/")[0] == 500
    assert os.path.isdir("/usr/bin")


# --------------------------------------------------------------------------
# expiry, metadata, pause, entrypoint


def test_expiry_and_renew(srv):
    sid = srv.running(timeout=60)
    soon = datetime.now(timezone.utc) + timedelta(seconds=2.5)
    st, _, doc = srv.call("POST", f"/v1/sandboxes/{sid}/renew-expiration",
                          {"expiresAt": soon.isoformat().replace("+00:00", "Z")})
    assert st == 200 and abs(datetime.fromisoformat(doc["expiresAt"].replace("Z", "+00:00")).timestamp()
                             - soon.timestamp()) < 0.01
    assert srv.call("GET", f"/v1/sandboxes/{sid}")[2]["expiresAt"] == doc["expiresAt"]
    past = (datetime.now(timezone.utc) - timedelta(seconds=5)).isoformat()
    st, _, doc = srv.call("POST", f"/v1/sandboxes/{sid}/renew-expiration", {"expiresAt": past})
    assert st == 400 and doc["code"] == "DOCKER::INVALID_EXPIRATION"
    deadline = time.monotonic() + 6
    while srv.call("GET", f"/v1/sandboxes/{sid}")[0] != 404:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert srv.call("GET", f"/{sid}/44772/ping")[0] == 404
    assert srv.call("POST", f"/v1/sandboxes/{sid}/renew-expiration", {"expiresAt": soon.isoformat()})[0] == 404
    forever = srv.running(timeout=None)
    doc = srv.call("GET", f"/v1/sandboxes/{forever}")[2]
    assert "expiresAt" not in doc
    later = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    st, _, doc = srv.call("POST", f"/v1/sandboxes/{forever}/renew-expiration", {"expiresAt": later})
    assert st == 409 and doc["code"] == "DOCKER::INVALID_EXPIRATION"


@pytest.mark.timeout_s(60)
def test_timeout_limits_and_renew_on_access(fake):
    f = fake("--renew-intent", "--max-timeout", "3600", "--min-timeout", "2", "--ready-delay", "0")
    st, _, doc = f.call("POST", "/v1/sandboxes", dict(CREATE, timeout=7200))
    assert st == 400 and doc["code"] == "SANDBOX::INVALID_PARAMETER"
    st, _, doc = f.call("POST", "/v1/sandboxes", dict(CREATE, timeout=1))
    assert st == 422 and doc["detail"][0]["ctx"] == {"ge": 2}
    st, _, doc = f.call("POST", "/v1/sandboxes", dict(CREATE, extensions={"access.renew.extend.seconds": "10"}))
    assert st == 400 and doc["code"] == "SANDBOX::INVALID_PARAMETER"
    sid = f.running(timeout=60, extensions={"access.renew.extend.seconds": "300"})

    def left():
        exp = f.call("GET", f"/v1/sandboxes/{sid}")[2]["expiresAt"]
        return datetime.fromisoformat(exp.replace("Z", "+00:00")).timestamp() - time.time()

    assert left() < 61
    f.execd(sid, "GET", "/ping")
    assert 295 < left() < 301
    short = f.running(timeout=4)  # a short TTL, allowed by --min-timeout
    f.wait_state(short, 404, timeout=12)


def test_metadata_patch(srv):
    sid = srv.running()
    st, _, doc = srv.call("PATCH", f"/v1/sandboxes/{sid}/metadata", {"slot": "b2", "owner": None, "new": "x"})
    assert st == 200 and doc["metadata"] == {"slot": "b2", "new": "x"} and doc["id"] == sid
    st, _, doc = srv.call("PATCH", f"/v1/sandboxes/{sid}/metadata", {})
    assert st == 200 and doc["metadata"] == {"slot": "b2", "new": "x"}
    st, _, doc = srv.call("PATCH", f"/v1/sandboxes/{sid}/metadata", {"opensandbox.io/k": "v"})
    assert st == 400 and doc["code"] == "SANDBOX::INVALID_METADATA_LABEL"
    st, _, doc = srv.call("PATCH", f"/v1/sandboxes/{sid}/metadata", {"k": 5})
    assert st == 422
    assert srv.call("PATCH", f"/v1/sandboxes/{uuid.uuid4()}/metadata", {})[0] == 404


def test_pause_resume(srv):
    sid = srv.running()
    srv.run(sid, "(sleep 30 &)")
    st, _, body = srv.request("POST", f"/v1/sandboxes/{sid}/pause")
    assert st == 202 and body == b""
    srv.wait_state(sid, "Paused")
    st, _, doc = srv.call("GET", f"/{sid}/44772/ping")
    assert st == 502
    assert srv.call("POST", f"/v1/sandboxes/{sid}/pause")[2]["code"] == "DOCKER::SANDBOX_NOT_RUNNING"
    assert srv.call("POST", f"/v1/sandboxes/{sid}/resume")[0] == 202
    srv.wait_state(sid, "Running")
    evs, _ = srv.run(sid, "pgrep -c -x sleep")
    assert [e["text"] for e in evs if e["type"] == "stdout"] == ["1"]
    assert srv.call("POST", f"/v1/sandboxes/{sid}/resume")[0] == 409


def test_entrypoint_exit_states(fake):
    f = fake("--ready-delay", "0")
    ok = f.create(entrypoint=["sh", "-c", "exit 0"])
    bad = f.create(entrypoint=["sh", "-c", "exit 3"])
    missing = f.create(entrypoint=["no-such-binary-here"])
    f.wait_state(ok, "Terminated")
    f.wait_state(bad, "Failed")
    f.wait_state(missing, "Failed")
    st, _, doc = f.call("GET", "/v1/sandboxes?state=Failed")
    assert {i["id"] for i in doc["items"]} == {bad, missing}
    assert f.call("GET", f"/{ok}/44772/ping")[0] == 502
    assert f.request("DELETE", f"/v1/sandboxes/{bad}")[0] == 204


# --------------------------------------------------------------------------
# faults and the control channel


def test_fault_http_error(srv):
    srv.ctl("POST", "/faults", {"kind": "http_error", "method": "POST", "path": "^/v1/sandboxes$",
                                "count": 2, "status": 503, "code": "DOCKER::UNAVAILABLE", "message": "busy"})
    for _ in range(2):
        st, h, doc = srv.call("POST", "/v1/sandboxes", CREATE)
        assert st == 503 and doc == {"code": "DOCKER::UNAVAILABLE", "message": "busy"} and h["X-Request-ID"]
    assert srv.ctl("GET", "/faults") == []
    # a rate-limiting gateway: 429 with Retry-After
    srv.ctl("POST", "/faults", {"kind": "http_error", "method": "POST", "path": "^/v1/sandboxes$", "count": 1,
                                "status": 429, "retry_after": 3})
    st, h, doc = srv.call("POST", "/v1/sandboxes", CREATE)
    assert st == 429 and h["Retry-After"] == "3" and doc["code"]
    sid = srv.create()
    srv.wait_state(sid, "Running")
    srv.remember(sid)
    f = srv.ctl("POST", "/faults", {"kind": "http_error", "path": "/files/info$"})
    st, _, doc = srv.execd(sid, "GET", "/files/info?path=/tmp")
    assert st == 500 and doc["code"] == "RUNTIME_ERROR" and doc["message"]
    st, _, doc = srv.execd(sid, "GET", "/files/info?path=/tmp")
    assert st == 500
    srv.ctl("DELETE", f"/faults/{f['id']}")
    assert srv.execd(sid, "GET", "/files/info?path=/tmp")[0] == 200


@pytest.mark.timeout_s(60)
def test_fault_delay_and_ping_fail(srv):
    sid = srv.running()
    srv.ctl("POST", "/faults", {"kind": "delay", "ms": 2000, "path": "/ping$", "count": 1})
    t0 = time.monotonic()
    assert srv.execd(sid, "GET", "/ping")[0] == 200
    assert time.monotonic() - t0 >= 2.0
    t0 = time.monotonic()
    assert srv.execd(sid, "GET", "/ping")[0] == 200
    assert time.monotonic() - t0 < 2.0  # count 1: the delay was used up
    t0 = time.monotonic()
    srv.ctl("POST", "/faults", {"kind": "ping_fail", "seconds": 3})
    assert srv.execd(sid, "GET", "/ping")[0] == 502
    while srv.execd(sid, "GET", "/ping")[0] != 200:
        assert time.monotonic() - t0 < 10
        time.sleep(0.1)
    assert time.monotonic() - t0 >= 3.0
    srv.ctl("POST", "/faults", {"kind": "ping_fail", "seconds": None, "sandbox": sid})
    assert srv.execd(sid, "GET", "/ping")[0] == 502
    assert srv.execd(sid, "GET", "/files/info?path=/tmp")[0] == 200
    srv.ctl("DELETE", "/faults")
    assert srv.execd(sid, "GET", "/ping")[0] == 200


def test_fault_drop_stream(srv):
    sid = srv.running()
    srv.ctl("POST", "/faults", {"kind": "drop_stream", "path": "/command$", "after_events": 2, "count": 1})
    prefix, eh = srv.endpoint(sid)
    with pytest.raises(http.client.IncompleteRead) as ei:
        srv.request("POST", prefix + "/command", {"command": "echo a; sleep 0.3; echo b; echo done > /tmp/finished"},
                    headers=eh, auth=False)
    evs = events_of(ei.value.partial.decode().splitlines())
    assert [e["type"] for e in evs] == ["init", "stdout"]
    # the command itself carried on
    deadline = time.monotonic() + 5
    while srv.execd(sid, "GET", "/files/info?path=/tmp/finished")[0] != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    upload(srv, sid, [({"path": "/tmp/big"}, "big", b"z" * 100000)])
    srv.ctl("POST", "/faults", {"kind": "drop_stream", "path": "/files/download$", "after_bytes": 1000, "count": 1})
    with pytest.raises(http.client.IncompleteRead):
        srv.execd(sid, "GET", "/files/download?path=/tmp/big")
    assert srv.execd(sid, "GET", "/files/download?path=/tmp/big")[2] == b"z" * 100000


@pytest.mark.timeout_s(60)
def test_fault_drip(srv):
    """drip: a download's body one byte every ms milliseconds (a stall
    timeout never fires), the whole body in the end; other routes as usual."""
    sid = srv.running()
    upload(srv, sid, [({"path": "/tmp/d"}, "d", b"abcdef")])
    for bad in ({"kind": "drip", "ms": 0}, {"kind": "drip", "ms": "x"}):
        st, _, doc = srv.call("POST", "/_fake/faults", bad, auth=False)
        assert st == 400, (bad, st, doc)
    srv.ctl("POST", "/faults", {"kind": "drip", "ms": 300, "path": "/files/download$", "count": 1})
    t0 = time.monotonic()
    st, h, body = srv.execd(sid, "GET", "/files/download?path=/tmp/d")
    assert (st, body, h["Content-Length"]) == (200, b"abcdef", "6")
    assert time.monotonic() - t0 >= 1.5  # five pauses of 0.3 s
    t0 = time.monotonic()
    assert srv.execd(sid, "GET", "/files/download?path=/tmp/d")[2] == b"abcdef"
    assert time.monotonic() - t0 < 1.5  # count 1: used up
    srv.ctl("POST", "/faults", {"kind": "drip", "ms": 200, "path": "/files/download$"})
    st, _, body = srv.execd(sid, "GET", "/files/download?path=/tmp/d", headers={"Range": "bytes=2-3"})
    assert (st, body) == (206, b"cd")
    srv.ctl("DELETE", "/faults")


def test_fault_malformed_json(srv):
    sid = srv.running()
    srv.ctl("POST", "/faults", {"kind": "malformed_json", "path": "^/v1/sandboxes/", "count": 1})
    st, h, body = srv.request("GET", f"/v1/sandboxes/{sid}")
    assert st == 200 and h["Content-Type"] == "application/json"
    with pytest.raises(ValueError):
        json.loads(body)
    assert srv.call("GET", f"/v1/sandboxes/{sid}")[2]["id"] == sid
    srv.ctl("POST", "/faults", {"kind": "malformed_json", "path": "/command$", "count": 1, "after_events": 1})
    prefix, eh = srv.endpoint(sid)
    st, _, body = srv.request("POST", prefix + "/command", {"command": "echo hi"}, headers=eh, auth=False)
    frames = [b for b in body.decode().split("\n\n") if b.strip()]
    json.loads(frames[0][5:])
    with pytest.raises(ValueError):
        json.loads(frames[1][5:])
    assert json.loads(frames[-1][5:])["type"] == "execution_complete"


def test_force_expire_pending_forever_and_forced_state(srv):
    sid = srv.running()
    srv.run(sid, "(sleep 30 &)")
    result = {}

    def foreground():
        prefix, eh = srv.endpoint(sid)
        try:
            result["body"] = srv.request("POST", prefix + "/command", {"command": "echo started; sleep 30"},
                                         headers=eh, auth=False)[2]
        except http.client.IncompleteRead as e:
            result["body"] = e.partial

    th = threading.Thread(target=foreground)
    th.start()
    deadline = time.monotonic() + 5
    while not any(c["running"] for c in srv.ctl("GET", f"/sandboxes/{sid}")["commands"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)
    srv.ctl("POST", f"/sandboxes/{sid}/expire")
    assert srv.call("GET", f"/v1/sandboxes/{sid}")[0] == 404
    th.join(10)
    assert not th.is_alive()
    # the container went away under the stream: no terminal event
    types = [e["type"] for e in events_of(result["body"].decode().splitlines())]
    assert types[0] == "init" and "error" not in types and "execution_complete" not in types
    f = srv.ctl("POST", "/faults", {"kind": "pending_forever"})
    sid2 = srv.create()
    srv.remember(sid2)
    time.sleep(0.8)
    assert srv.state(sid2) == "Pending"
    assert srv.call("GET", f"/{sid2}/44772/ping")[0] == 502
    srv.ctl("DELETE", f"/faults/{f['id']}")
    srv.wait_state(sid2, "Running")
    doc = srv.ctl("POST", f"/sandboxes/{sid2}/state", {"state": "Unknown"})
    assert doc["status"]["state"] == "Unknown"
    assert srv.call("GET", f"/{sid2}/44772/ping")[0] == 502


def test_request_log_and_reset(srv):
    sid = srv.running()
    srv.execd(sid, "GET", "/ping", headers={"X-Request-ID": "log-me"})
    srv.call("GET", "/v1/sandboxes/nope")
    log = srv.ctl("GET", "/requests")
    c = log["counters"]
    assert c["POST /v1/sandboxes"] == 1 and c["GET execd/ping"] == 1 and c["GET /v1/sandboxes/{id}"] >= 2
    assert c["GET /v1/sandboxes/{id}/endpoints/{port}"] == 1
    assert log["status"]["404"] == 1
    e = [x for x in log["log"] if x["request_id"] == "log-me"][0]
    assert e["method"] == "GET" and e["path"] == f"/{sid}/44772/ping" and e["status"] == 200
    assert e["sandbox"] == sid and e["req_bytes"] == 0 and e["resp_bytes"] == 0
    create = [x for x in log["log"] if x["route"] == "POST /v1/sandboxes"][0]
    assert create["status"] == 202 and create["req_bytes"] > 0 and create["resp_bytes"] > 0
    since = log["seq"]
    srv.call("GET", "/v1/sandboxes")
    assert [x["route"] for x in srv.ctl("GET", f"/requests?since={since}")["log"]] == ["GET /v1/sandboxes"]
    srv.ctl("POST", "/faults", {"kind": "delay", "ms": 1})
    srv.ctl("POST", "/reset", {})
    log = srv.ctl("GET", "/requests")
    assert log["log"] == [] and log["counters"] == {} and srv.ctl("GET", "/faults") == []
    assert srv.state(sid) == "Running"
    srv.ctl("POST", "/reset", {"sandboxes": True})
    assert srv.call("GET", f"/v1/sandboxes/{sid}")[0] == 404
    assert srv.ctl("GET", "/state")["sandboxes"] == []


def test_sigterm_cleans_up(fake):
    f = fake("--ready-delay", "0", "--graceful-close", "0")
    sids = [f.running(), f.running()]
    for sid in sids:
        evs, _ = f.run(sid, "sleep 60", background=True)
    result = {}

    def foreground():
        try:
            result["events"] = f.run(sids[0], "sleep 60")[0]
        except (http.client.HTTPException, OSError) as e:
            result["error"] = e

    th = threading.Thread(target=foreground)
    th.start()
    time.sleep(0.5)
    for sid in sids:
        f.remember(sid)
    assert len(list(f.root.iterdir())) == 2
    f.stop()  # SIGTERM; asserts no process and no directory is left
    th.join(10)
    assert not th.is_alive()
    # the stream died with the server, before any terminal event
    assert "error" in result or result["events"][-1]["type"] not in ("execution_complete", "error")
