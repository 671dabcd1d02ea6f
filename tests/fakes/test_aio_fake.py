# SPDX-License-Identifier: MIT
"""Tests of the fake AIO sandbox server (tests/fakes/aio_server.py), driven the
way a client (DeerFlow's AioSandbox, sbxfs's aio provider) drives the real one:
urllib only, host (bubblewrap) mode.  Every test is bounded (20 s) and every
server it starts is stopped with a check that no process naming its root is
left behind.

    /usr/bin/python3 -m pytest -q tests/fakes/test_aio_fake.py
"""

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aiofake import PYTHON, SERVER, AioFakeServer, Client, procs_naming  # noqa: E402

pytestmark = [
    pytest.mark.timeout_s(20),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"),
]

WS = "/mnt/user-data/workspace"
OPENAPI = Path(os.environ.get("AIO_OPENAPI", "/work/shared/reference/aio/openapi.json"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = AioFakeServer(tmp_path_factory.mktemp("aio")).start()
    yield srv
    srv.stop()
    assert not srv.leaks, f"aio_server left processes behind: {srv.leaks}"


@pytest.fixture
def aio(server):
    """The shared server's client, with faults, log and sessions reset."""
    r = server.api.post("/_fake/reset", {"sessions": True})
    assert r.status == 200
    server.api.post("/_fake/config", {"omit_null": False, "bash_api": True, "version": "1.9.4"})
    server.api.post("/_fake/ready", {"ready": True})
    return server.api


@pytest.fixture
def own_server(tmp_path):
    """Factory for servers with their own command-line options."""
    made = []

    def make(*args, root=None):
        s = AioFakeServer(tmp_path / f"s{len(made)}", *args, root=root).start()
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()
        assert not s.leaks, f"aio_server left processes behind: {s.leaks}"


def ok(r):
    assert r.status == 200, r
    doc = r.json
    assert set(doc) >= {"success", "message", "data"}, doc
    assert doc["success"] is True, doc
    return doc["data"]


def fail(r):
    assert r.status == 200, r
    doc = r.json
    assert doc["success"] is False, doc
    return doc


def bash(aio, command, **kw):
    return ok(aio.post("/v1/bash/exec", {"command": command, **kw}, timeout=kw.get("hard_timeout", 10) + 5))


def wait_no_processes(aio, seconds=5):
    deadline = time.monotonic() + seconds
    while True:
        procs = aio.get("/_fake/processes").json["processes"]
        if not procs:
            return
        assert time.monotonic() < deadline, f"commands still running after {seconds} s: {procs}"
        time.sleep(0.05)


# --------------------------------------------------------------------------
# readiness


def test_sandbox_context_shape(aio, server):
    r = aio.get("/v1/sandbox")
    assert r.status == 200
    assert r.headers["Content-Type"].startswith("application/json")
    doc = r.json
    # SandboxResponse: required home_dir, version, detail; metadata at the top level
    assert doc["success"] is True and isinstance(doc["data"], str)
    assert doc["home_dir"] == "/home/gem" and doc["version"] == "1.9.4"
    sysenv = doc["detail"]["system"]
    for k in ("os", "os_version", "arch", "user", "home_dir", "timezone", "occupied_ports"):
        assert k in sysenv
    assert str(server.port) in sysenv["occupied_ports"]
    assert set(doc["detail"]) >= {"system", "runtime", "utils"}


def test_ready_delay_then_ready(own_server):
    s = own_server("--never-ready")
    # the delay counts from this call, not from the server's start (which a
    # loaded host can put well before the port file is seen)
    t0 = time.monotonic()
    assert s.api.post("/_fake/ready", {"delay": 1.5}).status == 200
    r = s.api.get("/v1/sandbox")
    assert r.status == 503
    assert s.api.post("/v1/bash/exec", {"command": "true"}).status == 503
    # the control channel answers while the API does not
    assert s.api.get("/_fake/health").json["ready"] is False
    # DeerFlow polls every second until 200
    while s.api.get("/v1/sandbox").status != 200:
        assert time.monotonic() - t0 < 5
        time.sleep(0.1)
    assert time.monotonic() - t0 >= 1.4


def test_never_ready_until_told(own_server):
    s = own_server("--never-ready")
    for _ in range(3):
        assert s.api.get("/v1/sandbox").status == 503
    assert s.api.post("/_fake/ready", {"ready": True}).json == {"ready": True}
    assert s.api.get("/v1/sandbox").status == 200
    s.api.post("/_fake/ready", {"ready": False})
    assert s.api.get("/v1/sandbox").status == 503


# --------------------------------------------------------------------------
# bash (pipe) API


def test_bash_exec_separates_streams_and_exit_code(aio):
    d = bash(aio, "printf 'h\\303\\251llo\\n'; echo oops >&2; exit 3")
    assert d["status"] == "completed"
    assert d["exit_code"] == 3
    assert d["stdout"] == "héllo\n" and d["stderr"] == "oops\n"
    assert d["offset"] == len("héllo\n".encode()) and d["stderr_offset"] == 5
    for k in ("session_id", "command_id", "command"):
        assert d[k]
    assert d["command"].startswith("printf")


def test_bash_exec_env_cwd_and_session_rules(aio):
    d = bash(aio, "echo $SECRET; pwd; cd /tmp; export LEAK=1", env={"SECRET": "s3"})
    assert d["stdout"] == "s3\n/home/gem\n"
    sid = d["session_id"]
    # cd and export do not carry over; env is for that command only
    d = bash(aio, 'pwd; echo "[$SECRET][$LEAK]"', session_id=sid)
    assert d["stdout"] == "/home/gem\n[][]\n" and d["session_id"] == sid
    # exec_dir takes effect and becomes the session's default
    d = bash(aio, "pwd", session_id=sid, exec_dir=WS)
    assert d["stdout"] == WS + "\n"
    assert bash(aio, "pwd", session_id=sid)["stdout"] == WS + "\n"
    r = aio.post("/v1/bash/exec", {"command": "pwd", "session_id": sid, "exec_dir": "/nonexistent"})
    assert "does not exist" in fail(r)["message"]
    # an unknown session id is created on first use
    assert bash(aio, "true", session_id="fresh-one")["session_id"] == "fresh-one"
    ids = [s["session_id"] for s in ok(aio.get("/v1/bash/sessions"))]
    assert sid in ids and "fresh-one" in ids


def test_bash_hard_timeout_kills(aio):
    t0 = time.monotonic()
    d = bash(aio, "echo started; sleep 30", hard_timeout=0.5)
    assert time.monotonic() - t0 < 5
    assert d["status"] == "timed_out" and d["exit_code"] is None
    assert d["stdout"] == "started\n"
    assert aio.get("/_fake/processes").json["processes"] == []


def test_bash_timeout_returns_running_then_output_and_kill(aio):
    d = bash(aio, "echo a; sleep 0.8; echo b; sleep 30", timeout=0.3)
    assert d["status"] == "running" and d["exit_code"] is None
    sid, cid = d["session_id"], d["command_id"]
    off, eoff = d["offset"], d["stderr_offset"]
    seen = d["stdout"]
    deadline = time.monotonic() + 5
    while "b\n" not in seen:
        assert time.monotonic() < deadline
        o = ok(aio.post("/v1/bash/output", {"session_id": sid, "command_id": cid, "offset": off,
                                            "stderr_offset": eoff, "wait": True, "wait_timeout": 2}))
        seen += o["stdout"]
        off, eoff = o["offset"], o["stderr_offset"]
        assert o["command"]["status"] == "running"
    assert seen == "a\nb\n"
    # a second exec on a busy session is refused
    assert "busy" in fail(aio.post("/v1/bash/exec", {"command": "true", "session_id": sid}))["message"]
    assert ok(aio.post("/v1/bash/kill", {"session_id": sid, "signal": "SIGKILL"})) is None
    deadline = time.monotonic() + 5
    while True:
        o = ok(aio.post("/v1/bash/output", {"session_id": sid, "offset": off, "stderr_offset": eoff}))
        if o["command"]["status"] != "running":
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert o["command"]["status"] == "killed" and o["command"]["exit_code"] is None
    assert "Unsupported signal" in fail(aio.post("/v1/bash/kill", {"session_id": sid, "signal": "SIGHUP"}))["message"]


def test_bash_async_stdin_write(aio):
    d = bash(aio, 'read line; echo "got:$line"', async_mode=True)
    assert d["status"] == "running" and d["stdout"] == ""
    sid = d["session_id"]
    assert ok(aio.post("/v1/bash/write", {"session_id": sid, "input": "hello\n"})) is None
    out, off = "", 0
    deadline = time.monotonic() + 5
    while True:
        o = ok(aio.post("/v1/bash/output", {"session_id": sid, "offset": off, "wait": True, "wait_timeout": 1}))
        out += o["stdout"]
        off = o["offset"]
        if o["command"]["status"] != "running":
            break
        assert time.monotonic() < deadline
    assert out == "got:hello\n" and o["command"]["status"] == "completed" and o["command"]["exit_code"] == 0


def test_bash_output_never_splits_utf8(aio):
    # 3-byte characters written one byte at a time
    d = bash(aio, "for i in 1 2 3; do printf '\\342'; sleep 0.1; printf '\\202\\254'; sleep 0.1; done", async_mode=True)
    sid, off, got = d["session_id"], 0, ""
    deadline = time.monotonic() + 8
    while True:
        o = ok(aio.post("/v1/bash/output", {"session_id": sid, "offset": off, "wait": True, "wait_timeout": 1}))
        assert "\ufffd" not in o["stdout"]
        got += o["stdout"]
        off = o["offset"]
        if o["command"]["status"] != "running":
            break
        assert time.monotonic() < deadline
    assert got == "€€€" and off == 9


def test_bash_max_output_length_middle_truncation(aio):
    d = bash(aio, "seq 1 20000", max_output_length=100)
    assert d["stdout"].startswith("1\n2\n3\n") and d["stdout"].endswith("19999\n20000\n")
    assert "truncated" in d["stdout"] and len(d["stdout"]) < 200
    assert d["offset"] == len("".join(f"{i}\n" for i in range(1, 20001)))


def test_bash_sessions_create_close(aio):
    info = ok(aio.post("/v1/bash/sessions/create", {"session_id": "s-1", "exec_dir": "/tmp"}))
    assert info["session_id"] == "s-1" and info["status"] == "ready" and info["working_dir"] == "/tmp"
    assert set(info) >= {"created_at", "last_used_at", "command_count"}
    assert bash(aio, "pwd", session_id="s-1")["stdout"] == "/tmp\n"
    d = bash(aio, "sleep 30", session_id="s-1", async_mode=True)
    assert d["status"] == "running"
    assert ok(aio.post("/v1/bash/sessions/s-1/close")) is None
    r = aio.post("/v1/bash/sessions/s-1/close")
    assert r.status == 404 and "session not found" in r.json["message"].lower()
    assert aio.post("/v1/bash/output", {"session_id": "s-1"}).status == 404
    wait_no_processes(aio)


def test_bash_api_absent_on_old_images(own_server):
    s = own_server("--no-bash-api", "--version-string", "1.0.0.93")
    r = s.api.post("/v1/bash/exec", {"command": "true"})
    assert r.status == 404 and r.json == {"detail": "Not Found"}
    assert s.api.get("/v1/sandbox").json["version"] == "1.0.0.93"
    assert ok(s.api.post("/v1/shell/exec", {"command": "echo ok"}))["output"] == "ok\n"


# --------------------------------------------------------------------------
# shell (PTY-style) API


def test_shell_exec_like_deerflow(aio):
    # DeerFlow: {"command", "no_change_timeout": 600}, no id -> a new session
    d = ok(aio.post("/v1/shell/exec", {"command": "echo out; echo err >&2; exit 2", "no_change_timeout": 600}))
    assert d["status"] == "completed" and d["exit_code"] == 2
    assert sorted(d["output"].splitlines()) == ["err", "out"]   # merged like a terminal
    assert d["session_id"] and d["console"][0]["command"].startswith("echo out")
    assert set(d["console"][0]) >= {"ps1", "command", "output"}


def test_shell_session_keeps_cwd_and_env(aio):
    d = ok(aio.post("/v1/shell/sessions/create", {"id": "sh-1", "exec_dir": WS}))
    assert d == {"session_id": "sh-1", "working_dir": WS}
    assert ok(aio.post("/v1/shell/sessions/create", {"id": "sh-1"}))["working_dir"] == WS   # existing: as is
    ok(aio.post("/v1/shell/exec", {"id": "sh-1", "command": "mkdir -p sub && cd sub && export V=42"}))
    d = ok(aio.post("/v1/shell/exec", {"id": "sh-1", "command": 'pwd; echo "v=$V"'}))
    assert d["output"] == f"{WS}/sub\nv=42\n"
    assert d["console"][0]["ps1"].endswith(f"{WS}/sub $")
    v = ok(aio.post("/v1/shell/view", {"id": "sh-1"}))
    assert v["status"] == "completed" and v["exit_code"] == 0 and v["output"] == d["output"]
    sessions = ok(aio.get("/v1/shell/sessions"))["sessions"]
    assert sessions["sh-1"]["working_dir"] == f"{WS}/sub"
    # exec_dir: strict fails on a missing directory, otherwise the session dir is used
    assert "does not exist" in fail(aio.post("/v1/shell/exec", {"id": "sh-1", "command": "pwd",
                                                                "exec_dir": "/nope", "strict": True}))["message"]
    assert ok(aio.post("/v1/shell/exec", {"id": "sh-1", "command": "pwd",
                                          "exec_dir": "/nope"}))["output"] == f"{WS}/sub\n"
    assert ok(aio.delete("/v1/shell/sessions/sh-1")) is None
    r = aio.post("/v1/shell/exec", {"id": "sh-1", "command": "true"})
    # DeerFlow recreates the session on a 404 whose message says "session not found"
    assert r.status == 404 and "session not found" in r.json["message"].lower()
    stats = ok(aio.get("/v1/shell/sessions/stats"))
    assert set(stats) >= {"total_sessions", "active_sessions", "idle_sessions", "max_sessions", "usage_ratio"}


def test_shell_timeouts(aio):
    t0 = time.monotonic()
    d = ok(aio.post("/v1/shell/exec", {"command": "echo x; sleep 30", "hard_timeout": 0.5}))
    assert d["status"] == "hard_timeout" and d["exit_code"] is None and d["output"] == "x\n"
    d = ok(aio.post("/v1/shell/exec", {"command": "echo y; sleep 30", "no_change_timeout": 1}))
    assert d["status"] == "no_change_timeout" and d["exit_code"] is None
    sid = d["session_id"]
    assert time.monotonic() - t0 < 6
    # still running: the session is busy, wait times out, kill terminates it
    assert "busy" in fail(aio.post("/v1/shell/exec", {"id": sid, "command": "true"}))["message"]
    assert ok(aio.post("/v1/shell/wait", {"id": sid, "seconds": 0}))["status"] == "running"
    k = ok(aio.post("/v1/shell/kill", {"id": sid}))
    assert k["status"] == "terminated" and k["exit_code"] is None
    assert ok(aio.post("/v1/shell/view", {"id": sid}))["status"] == "terminated"
    d = ok(aio.post("/v1/shell/exec", {"command": "sleep 30", "async_mode": True}))
    assert d["status"] == "running"
    d = ok(aio.post("/v1/shell/exec", {"command": "sleep 30", "timeout": 0.3}))
    assert d["status"] == "running"
    assert ok(aio.delete("/v1/shell/sessions")) is None
    wait_no_processes(aio)


def test_shell_write_to_process(aio):
    d = ok(aio.post("/v1/shell/exec", {"command": 'read a; echo "a=$a"', "async_mode": True}))
    sid = d["session_id"]
    assert ok(aio.post("/v1/shell/write", {"id": sid, "input": "zz", "press_enter": True}))["status"] in (
        "running", "completed")
    assert ok(aio.post("/v1/shell/wait", {"id": sid, "seconds": 5}))["status"] == "completed"
    assert ok(aio.post("/v1/shell/view", {"id": sid}))["output"] == "a=zz\n"


# --------------------------------------------------------------------------
# validation and routing errors (FastAPI shapes)


def test_validation_errors_422(aio):
    r = aio.post("/v1/bash/exec", {})
    assert r.status == 422
    assert r.json["detail"][0]["loc"] == ["body", "command"] and r.json["detail"][0]["type"] == "missing"
    assert r.json["detail"][0]["msg"] == "Field required"
    r = aio.post("/v1/bash/exec", {"command": 5, "timeout": "soon", "env": {"A": 1}, "async_mode": "maybe"})
    assert r.status == 422
    got = {tuple(e["loc"]): e["type"] for e in r.json["detail"]}
    assert got == {("body", "command"): "string_type", ("body", "timeout"): "float_parsing",
                   ("body", "env", "A"): "string_type", ("body", "async_mode"): "bool_parsing"}
    r = aio.post("/v1/file/write", {"file": "/tmp/x", "content": "x", "encoding": "latin1"})
    assert r.status == 422 and r.json["detail"][0]["type"] == "enum"
    assert r.json["detail"][0]["msg"] == "Input should be 'utf-8', 'base64' or 'raw'"
    r = aio.post("/v1/file/grep", {"path": "/tmp", "pattern": "x", "max_results": 0})
    assert r.status == 422 and r.json["detail"][0]["type"] == "greater_than_equal"
    r = aio.request("POST", "/v1/shell/exec", raw=b'{"command": ', headers={"Content-Type": "application/json"})
    assert r.status == 422 and r.json["detail"][0]["type"] == "json_invalid"
    r = aio.request("POST", "/v1/shell/exec")
    assert r.status == 422 and r.json["detail"][0]["loc"] == ["body"]
    r = aio.request("POST", "/v1/shell/exec", raw=b'{"command": "true"}',
                    headers={"Content-Type": "text/plain"})
    assert r.status == 422 and r.json["detail"][0]["type"] == "model_attributes_type"
    # lax coercion as in pydantic: "1" is an int, 1 is a bool, unknown fields are ignored
    d = ok(aio.post("/v1/bash/exec", {"command": "echo $0", "max_output_length": "1000",
                                      "async_mode": 0, "whatever": [1]}))
    assert d["status"] == "completed"
    r = aio.get("/v1/file/download")
    assert r.status == 422 and r.json["detail"][0]["loc"] == ["query", "path"]
    r = aio.get("/v1/file/download?path=/tmp&change_policy=never")
    assert r.status == 422 and r.json["detail"][0]["loc"] == ["query", "change_policy"]


def test_unknown_routes(aio):
    r = aio.post("/v1/file/delete", {"path": "/tmp/x"})     # not in the 1.9.4 API
    assert r.status == 404 and r.json == {"detail": "Not Found"}
    r = aio.get("/v1/bash/exec")
    assert r.status == 405 and r.json == {"detail": "Method Not Allowed"}
    assert "POST" in r.headers["Allow"]


# --------------------------------------------------------------------------
# file API


def test_file_write_read_roundtrip(aio, server):
    f = f"{WS}/deep/dir/a.txt"
    assert ok(aio.post("/v1/file/write", {"file": f, "content": "one\ntwo\nthree\n"})) == \
        {"file": f, "bytes_written": 14}                                  # parents are created
    assert (server.root / "mnt/user-data/workspace/deep/dir/a.txt").read_text() == "one\ntwo\nthree\n"
    assert ok(aio.post("/v1/file/read", {"file": f}))["content"] == "one\ntwo\nthree\n"
    # DeerFlow's read_file(path, 2, 3) sends start_line 1, end_line 3
    assert ok(aio.post("/v1/file/read", {"file": f, "start_line": 1, "end_line": 3}))["content"] == "two\nthree\n"
    ok(aio.post("/v1/file/write", {"file": f, "content": "four", "append": True, "trailing_newline": True}))
    assert bash(aio, f"cat {f}")["stdout"] == "one\ntwo\nthree\nfour\n"   # commands see API writes
    blob = bytes(range(256)) * 3
    d = ok(aio.post("/v1/file/write", {"file": f"{WS}/b.bin", "content": base64.b64encode(blob).decode(),
                                       "encoding": "base64"}))
    assert d["bytes_written"] == 768
    r = aio.get(f"/v1/file/download?path={WS}/b.bin")
    assert r.status == 200 and r.body == blob
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert 'filename="b.bin"' in r.headers["Content-Disposition"]
    r = aio.get(f"/v1/file/download?path={WS}/b.bin", headers={"Range": "bytes=10-19"})
    assert r.status == 206 and r.body == blob[10:20]
    assert r.headers["Content-Range"] == "bytes 10-19/768"
    ok(aio.post("/v1/file/write", {"file": f"{WS}/raw.bin", "content": "\u00ff\u0000A", "encoding": "raw"}))
    assert (server.root / "mnt/user-data/workspace/raw.bin").read_bytes() == b"\xff\x00A"
    # a file a command made is read and downloaded through the API
    bash(aio, f"printf 'from job' > {WS}/job.txt")
    assert aio.get(f"/v1/file/download?path={WS}/job.txt").body == b"from job"


def test_file_errors_are_file_operation_errors(aio):
    def err(path, body):
        doc = fail(aio.post(path, body))
        e = doc["data"]
        assert set(e) >= {"path", "operation", "message", "error_type", "retryable", "errno", "errno_name",
                          "exception_type"}
        return e

    e = err("/v1/file/read", {"file": f"{WS}/missing.txt"})
    assert (e["error_type"], e["errno_name"], e["exception_type"]) == ("not_found", "ENOENT", "FileNotFoundError")
    assert e["operation"] == "read" and e["path"] == f"{WS}/missing.txt"
    assert err("/v1/file/read", {"file": WS})["error_type"] == "invalid_target"
    bash(aio, f"printf '\\377\\376' > {WS}/latin.bin")
    assert err("/v1/file/read", {"file": f"{WS}/latin.bin"})["error_type"] == "decode_error"
    assert err("/v1/file/write", {"file": "/usr/bin/evil", "content": "x"})["error_type"] == "read_only_filesystem"
    assert err("/v1/file/write", {"file": "relative.txt", "content": "x"})["error_type"] == "invalid_path"
    assert err("/v1/file/write", {"file": f"{WS}/x", "content": "%%%", "encoding": "base64"})["error_type"] == \
        "decode_error"
    assert err("/v1/file/list", {"path": f"{WS}/nope"})["error_type"] == "not_found"
    r = aio.get(f"/v1/file/download?path={WS}/missing.txt")
    assert r.status == 404 and "detail" in r.json
    r = aio.get(f"/v1/file/download?path={WS}")
    assert r.status == 400


def test_file_list(aio):
    for p in ("a.py", "b.txt", ".hidden", "sub/c.py", "sub/deeper/d.py"):
        ok(aio.post("/v1/file/write", {"file": f"{WS}/lst/{p}", "content": "x" * 3}))
    bash(aio, f"ln -s sub {WS}/lst/link")
    d = ok(aio.post("/v1/file/list", {"path": f"{WS}/lst"}))
    names = [f["name"] for f in d["files"]]
    assert names == sorted(names) and set(names) == {"a.py", "b.txt", ".hidden", "sub", "link"}
    assert (d["total_count"], d["directory_count"], d["file_count"]) == (5, 2, 3)
    by = {f["name"]: f for f in d["files"]}
    assert by["a.py"] == {"name": "a.py", "path": f"{WS}/lst/a.py", "is_directory": False, "size": 3,
                          "modified_time": by["a.py"]["modified_time"], "permissions": None, "extension": ".py"}
    assert by["link"]["is_directory"] is True        # a link to a directory counts as one
    d = ok(aio.post("/v1/file/list", {"path": f"{WS}/lst", "recursive": True, "show_hidden": False,
                                      "include_permissions": True}))
    paths = {f["path"] for f in d["files"]}
    assert f"{WS}/lst/sub/deeper/d.py" in paths and f"{WS}/lst/.hidden" not in paths
    assert f"{WS}/lst/link/c.py" not in paths         # never descends through a link
    assert all(re.fullmatch(r"[r-][w-][xsS-][r-][w-][xsS-][r-][w-][xtT-]", f["permissions"]) for f in d["files"])
    d = ok(aio.post("/v1/file/list", {"path": f"{WS}/lst", "recursive": True, "max_depth": 2,
                                      "file_types": [".py"]}))
    assert {f["name"] for f in d["files"] if not f["is_directory"]} == {"a.py", "c.py"}
    d = ok(aio.post("/v1/file/list", {"path": "/"}))
    assert {"mnt", "tmp", "home", "usr", "etc"} <= {f["name"] for f in d["files"]}


def test_file_find_glob_grep_search_replace(aio):
    for p, c in (("a.py", "import os\nprint('TODO one')\n"), ("s/b.py", "x = 1  # todo two\n"),
                 ("s/c.md", "TODO three\n"), ("s/.h.py", "TODO hidden\n")):
        ok(aio.post("/v1/file/write", {"file": f"{WS}/q/{p}", "content": c}))
    d = ok(aio.post("/v1/file/find", {"path": f"{WS}/q", "glob": "*.py"}))
    assert sorted(d["files"]) == [f"{WS}/q/a.py", f"{WS}/q/s/.h.py", f"{WS}/q/s/b.py"]
    d = ok(aio.post("/v1/file/glob", {"path": f"{WS}/q", "pattern": "**/*.py"}))
    assert [f["path"] for f in d["files"]] == [f"{WS}/q/a.py", f"{WS}/q/s/b.py"]
    assert d["total_count"] == 2 and d["truncated"] is False and d["files"][0]["size"] == 28
    d = ok(aio.post("/v1/file/grep", {"path": f"{WS}/q", "pattern": "todo", "case_insensitive": True,
                                      "include": ["*.py"]}))
    got = sorted((m["file"], m["line_number"], m["line_content"]) for m in d["matches"])
    assert got == [(f"{WS}/q/a.py", 2, "print('TODO one')"), (f"{WS}/q/s/.h.py", 1, "TODO hidden"),
                   (f"{WS}/q/s/b.py", 1, "x = 1  # todo two")]
    d = ok(aio.post("/v1/file/grep", {"path": f"{WS}/q", "pattern": "TODO", "fixed_strings": True,
                                      "max_results": 1}))
    assert len(d["matches"]) == 1 and d["truncated"] is True
    d = ok(aio.post("/v1/file/search", {"file": f"{WS}/q/a.py", "regex": "^print"}))
    assert d["matches"] == ["print('TODO one')"] and d["line_numbers"] == [1]
    d = ok(aio.post("/v1/file/replace", {"file": f"{WS}/q/a.py", "old_str": "TODO", "new_str": "DONE"}))
    assert d["replaced_count"] == 1
    assert "DONE one" in ok(aio.post("/v1/file/read", {"file": f"{WS}/q/a.py"}))["content"]


def test_str_replace_editor(aio):
    p = f"{WS}/ed.py"
    d = ok(aio.post("/v1/file/str_replace_editor", {"command": "create", "path": p, "file_text": "a = 1\nb = 2\n"}))
    assert d["prev_exist"] is False
    assert not aio.post("/v1/file/str_replace_editor", {"command": "create", "path": p,
                                                        "file_text": "x"}).json["success"]
    d = ok(aio.post("/v1/file/str_replace_editor", {"command": "str_replace", "path": p,
                                                    "old_str": "b = 2", "new_str": "b = 3"}))
    assert d["new_content"] == "a = 1\nb = 3\n" and d["old_content"] == "a = 1\nb = 2\n"
    d = ok(aio.post("/v1/file/str_replace_editor", {"command": "view", "path": p, "view_range": [2, 2]}))
    assert "     2\tb = 3" in d["output"]
    ok(aio.post("/v1/file/str_replace_editor", {"command": "undo_edit", "path": p}))
    assert ok(aio.post("/v1/file/read", {"file": p}))["content"] == "a = 1\nb = 2\n"


def test_upload(aio, server):
    blob = os.urandom(300_000) + b"\r\n--not-a-boundary\r\n"
    r = aio.upload(f"{WS}/up/data.bin", blob)
    d = ok(r)
    assert d == {"file_path": f"{WS}/up/data.bin", "file_size": len(blob), "success": True}
    assert (server.root / "mnt/user-data/workspace/up/data.bin").read_bytes() == blob
    # field order does not matter; a directory path keeps the file's name
    d = ok(aio.upload("/mnt/user-data/uploads", b"hi", filename="r.txt", field_order=("file", "path")))
    assert d["file_path"] == "/mnt/user-data/uploads/r.txt"
    assert bash(aio, "cat /mnt/user-data/uploads/r.txt")["stdout"] == "hi"
    assert not list((server.root / "mnt/user-data/uploads").glob("*.part"))
    r = aio.upload(None, b"", field_order=())
    assert r.status == 422 and r.json["detail"][0]["loc"] == ["body", "file"]
    e = fail(aio.upload("/usr/lib/x.bin", b"x"))["data"]
    assert e["error_type"] == "read_only_filesystem" and e["operation"] == "upload"


def test_paths_resolve_inside_the_sandbox_view(aio, server, tmp_path):
    # a job's symlink to / is followed as the sandbox sees it, never on the host
    bash(aio, f"ln -s / {WS}/rootlink; ln -s /etc/hostname {WS}/hn")
    ok(aio.post("/v1/file/write", {"file": f"{WS}/rootlink/tmp/through-link.txt", "content": "in sandbox"}))
    assert (server.root / "tmp/through-link.txt").read_text() == "in sandbox"
    assert not Path("/tmp/through-link.txt").exists()
    e = fail(aio.post("/v1/file/write", {"file": f"{WS}/rootlink/etc/passwd2", "content": "x"}))["data"]
    assert e["error_type"] == "read_only_filesystem"
    assert not Path("/etc/passwd2").exists()
    assert aio.get(f"/v1/file/download?path={WS}/hn").body == Path("/etc/hostname").read_bytes()
    # the sandbox: own pid and network namespaces, no capabilities, host dirs read-only
    d = bash(aio, "echo $$; cat /proc/net/dev | grep -c :; grep CapEff /proc/self/status; touch /usr/x; "
                  "ls /root 2>&1 | head -1")
    lines = d["stdout"].splitlines()
    assert int(lines[0]) < 10 and lines[1] == "1" and lines[2].endswith("0000000000000000")
    assert "Read-only" in d["stderr"] or "Permission denied" in d["stderr"]


# --------------------------------------------------------------------------
# control channel


def test_faults_error_delay_drop_malformed(aio):
    f = aio.post("/_fake/faults", {"kind": "error", "path": "^/v1/sandbox$", "times": 2}).json
    assert f["id"] and f["kind"] == "error"
    for _ in range(2):
        r = aio.get("/v1/sandbox")
        assert r.status == 500
        assert r.json == {"success": False, "message": "Internal Server Error", "data": None, "hint": None}
    assert aio.get("/v1/sandbox").status == 200
    # after: the third matching request fails
    aio.post("/_fake/faults", {"kind": "error", "status": 503, "path": "^/v1/sandbox$", "after": 2})
    assert [aio.get("/v1/sandbox").status for _ in range(4)] == [200, 200, 503, 200]
    # retry_after: a 429 (a proxy at capacity) with its Retry-After header
    aio.post("/_fake/faults", {"kind": "error", "status": 429, "retry_after": 3, "path": "^/v1/sandbox$"})
    r = aio.get("/v1/sandbox")
    assert r.status == 429 and r.headers["Retry-After"] == "3" and r.json["success"] is False
    assert "Retry-After" not in aio.get("/v1/sandbox").headers
    aio.post("/_fake/faults", {"kind": "delay", "seconds": 0.7, "path": "^/v1/sandbox$"})
    t0 = time.monotonic()
    assert aio.get("/v1/sandbox").status == 200 and time.monotonic() - t0 >= 0.6
    aio.post("/_fake/faults", {"kind": "drop", "path": "^/v1/bash/exec$", "method": "POST"})
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        aio.post("/v1/bash/exec", {"command": "echo never"})
    # nothing was started for the dropped request (a process of an earlier
    # test may still be ending on a loaded host: wait for it, bounded)
    deadline = time.monotonic() + 10
    while aio.get("/_fake/processes").json["processes"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert aio.get("/_fake/processes").json["processes"] == []
    aio.post("/_fake/faults", {"kind": "malformed_json", "path": "^/v1/file/read$"})
    r = aio.post("/v1/file/read", {"file": "/etc/hostname"})
    assert r.status == 200
    with pytest.raises(ValueError):
        r.json
    aio.post("/_fake/faults", {"kind": "tool_failure", "message": "boom", "path": "^/v1/file/list$"})
    assert fail(aio.post("/v1/file/list", {"path": "/tmp"}))["message"] == "boom"
    aio.post("/_fake/faults", {"kind": "error", "status": 422, "path": "^/v1/shell/exec$"})
    r = aio.post("/v1/shell/exec", {"command": "true"})
    assert r.status == 422 and r.json["detail"][0]["loc"] == ["body"]
    aio.post("/_fake/faults", {"kind": "truncate", "path": "^/v1/sandbox$"})
    with pytest.raises(Exception):
        aio.get("/v1/sandbox")
    assert aio.get("/_fake/faults").json == {"faults": []}
    aio.post("/_fake/faults", {"kind": "error", "times": None})
    assert aio.get("/v1/sandbox").status == 500 and aio.get("/v1/sandbox").status == 500
    assert aio.delete("/_fake/faults").json == {"removed": 1}
    assert aio.post("/_fake/faults", {"kind": "nope"}).status == 400


def test_fault_drip(aio):
    """drip: a download's body one byte every `seconds` (a stall timeout
    never fires), the whole body in the end."""
    ok(aio.post("/v1/file/write", {"file": f"{WS}/drip.txt", "content": "abcdef"}))
    aio.post("/_fake/faults", {"kind": "drip", "seconds": 0.3, "path": "^/v1/file/download$"})
    t0 = time.monotonic()
    r = aio.get(f"/v1/file/download?path={WS}/drip.txt")
    assert (r.status, r.body) == (200, b"abcdef")
    assert time.monotonic() - t0 >= 1.5  # five pauses of 0.3 s
    t0 = time.monotonic()
    assert aio.get(f"/v1/file/download?path={WS}/drip.txt").body == b"abcdef"
    assert time.monotonic() - t0 < 1.5  # times 1 (the default): used up


def test_fault_truncate_of_a_download_cuts_the_files_own_bytes(aio):
    """truncate on a download: the file's headers (its Content-Length) and
    the first half of its own bytes, then the connection closes."""
    import http.client
    ok(aio.post("/v1/file/write", {"file": f"{WS}/cut.txt", "content": "0123456789"}))
    aio.post("/_fake/faults", {"kind": "truncate", "path": "^/v1/file/download$"})
    conn = http.client.HTTPConnection("127.0.0.1", int(aio.base.rsplit(":", 1)[1]), timeout=10)
    try:
        conn.request("GET", f"/v1/file/download?path={WS}/cut.txt")
        r = conn.getresponse()
        assert r.status == 200 and r.headers["Content-Length"] == "10"
        with pytest.raises(http.client.IncompleteRead) as e:
            r.read()
        assert e.value.partial == b"01234"
    finally:
        conn.close()
    assert aio.get(f"/v1/file/download?path={WS}/cut.txt").body == b"0123456789"


def test_request_log_and_counters(aio):
    ok(aio.post("/v1/bash/exec", {"command": "echo x", "env": {"K": "V"}}))
    aio.get("/v1/sandbox")
    aio.post("/v1/bash/exec", {})
    c = aio.get("/_fake/counters").json
    assert c["by_route"] == {"POST /v1/bash/exec": 2, "GET /v1/sandbox": 1} and c["total"] == 3
    assert c["by_status"] == {"200": 2, "422": 1}
    log = aio.get("/_fake/requests?path=^/v1/bash/").json["requests"]
    assert [e["status"] for e in log] == [200, 422]
    assert log[0]["body"] == {"command": "echo x", "env": {"K": "V"}} and log[0]["method"] == "POST"
    assert log[0]["headers"]["Content-Type"] == "application/json"
    later = aio.get(f"/_fake/requests?since={log[0]['seq']}").json["requests"]
    assert [e["path"] for e in later] == ["/v1/sandbox", "/v1/bash/exec"]
    aio.post("/_fake/reset")
    assert aio.get("/_fake/counters").json["total"] == 0


def test_omit_null_mode(aio):
    aio.post("/_fake/config", {"omit_null": True})
    d = aio.post("/v1/bash/exec", {"command": "sleep 0.1", "timeout": 0}).json
    assert "hint" not in d and "exit_code" not in d["data"]
    aio.post("/_fake/config", {"omit_null": False})


def test_api_key(own_server):
    s = own_server("--api-key", "k3y")
    assert s.api.get("/v1/sandbox").status == 401
    assert s.api.get("/v1/sandbox", headers={"X-AIO-API-Key": "k3y"}).status == 200
    assert s.api.get("/v1/sandbox", headers={"Authorization": "Bearer k3y"}).status == 200
    assert s.api.get("/v1/sandbox?api_key=k3y").status == 200
    assert s.api.get("/v1/sandbox", headers={"X-AIO-API-Key": "wrong"}).status == 401
    assert s.api.get("/_fake/health").status == 200


def test_keepalive_and_chunked_bodies(aio, server):
    """One connection, several requests (libcurl reuses connections), and a
    chunked request body (libcurl streams bodies of unknown size that way)."""
    body = json.dumps({"command": "echo chunked"}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        f = s.makefile("rb")
        for _ in range(2):
            s.sendall(b"GET /v1/sandbox HTTP/1.1\r\nHost: x\r\n\r\n")
            status = f.readline()
            assert status.startswith(b"HTTP/1.1 200")
            n = 0
            while (line := f.readline()) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    n = int(line.split(b":")[1])
            f.read(n)
        s.sendall(b"POST /v1/bash/exec HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % 5 + body[:5] + b"\r\n" +
                  b"%x\r\n" % (len(body) - 5) + body[5:] + b"\r\n0\r\n\r\n")
        assert f.readline().startswith(b"HTTP/1.1 200")
        n = 0
        while (line := f.readline()) != b"\r\n":
            if line.lower().startswith(b"content-length:"):
                n = int(line.split(b":")[1])
        assert json.loads(f.read(n))["data"]["stdout"] == "chunked\n"


def test_sigterm_ends_commands_and_removes_temp_root(tmp_path):
    portf = tmp_path / "port"
    p = subprocess.Popen([PYTHON, str(SERVER), "--port", "0", "--port-file", str(portf)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not (portf.exists() and portf.read_text().strip()):
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        c = Client(f"http://127.0.0.1:{int(portf.read_text())}")
        root = c.get("/_fake/health").json["root"]
        assert Path(root).is_dir()
        d = ok(c.post("/v1/bash/exec", {"command": "sleep 60", "async_mode": True}))
        assert d["status"] == "running"
        assert len(c.get("/_fake/processes").json["processes"]) == 1
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0
        assert not Path(root).exists()
        deadline = time.monotonic() + 5
        while procs_naming(root):
            assert time.monotonic() < deadline, procs_naming(root)
            time.sleep(0.05)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
        p.stderr.close()


def test_request_models_match_openapi():
    """The fake's request models against the upstream OpenAPI file: the same
    fields, required sets, nullability, defaults, enums and bounds."""
    if not OPENAPI.exists():
        pytest.skip(f"{OPENAPI} not present (set AIO_OPENAPI)")
    sys.path.insert(0, str(SERVER.parent))
    import aio_server
    schemas = json.loads(OPENAPI.read_text())["components"]["schemas"]

    def types(s):
        if "$ref" in s:
            return types(schemas[s["$ref"].split("/")[-1]])
        if "anyOf" in s:
            return set().union(*(types(x) for x in s["anyOf"]))
        t = s.get("type")
        if "enum" in s:
            return {("enum", tuple(s["enum"]))}
        if t == "array":
            return {("array", tuple(sorted(map(str, types(s["items"])))))}
        if t == "object":
            return {("object", tuple(sorted(map(str, types(s.get("additionalProperties") or {})))))}
        return {t}

    kind_of = {"str": {"string"}, "int": {"integer"}, "num": {"number"}, "bool": {"boolean"},
               "map_str": {("object", ("string",))}, "list_str": {("array", ("string",))},
               "list_int": {("array", ("integer",))}}
    problems = []
    extra_ok = {"StrReplaceEditorRequest": {"page_range", "sheet_name", "row_range", "slide_range",
                                            "enable_metadata"}}
    for model, fields in aio_server.MODELS.items():
        sch = schemas[model]
        props = sch["properties"]
        missing = set(props) - set(fields) - extra_ok.get(model, set())
        if missing or set(fields) - set(props):
            problems.append(f"{model}: fields differ: spec-only {missing}, fake-only {set(fields) - set(props)}")
        for name, f in fields.items():
            if name not in props:
                continue
            ps = props[name]
            ts = types(ps)
            nullable = "null" in ts
            ts.discard("null")
            want = {("enum", tuple(f.enum))} if f.kind == "enum" else kind_of[f.kind]
            if ts != want:
                problems.append(f"{model}.{name}: type {ts} != {want}")
            if f.required != (name in sch.get("required", [])):
                problems.append(f"{model}.{name}: required {f.required}")
            if f.nullable != nullable and not f.required:
                problems.append(f"{model}.{name}: nullable {f.nullable} != {nullable}")
            if "default" in ps and ps["default"] != f.default:
                problems.append(f"{model}.{name}: default {f.default!r} != {ps['default']!r}")
            bounds = {}
            for x in ps.get("anyOf", [ps]):
                for k, mine in (("minimum", "ge"), ("maximum", "le")):
                    if k in x:
                        bounds[mine] = x[k]
            if bounds != {k: getattr(f, k) for k in ("ge", "le") if getattr(f, k) is not None}:
                problems.append(f"{model}.{name}: bounds {bounds}")
    assert not problems, "\n".join(problems)
