#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A test server that speaks the AIO sandbox HTTP API (agent-infra/sandbox 1.9.x).

What it is: a fake of the HTTP API of DeerFlow's AIO sandbox image, written from
the upstream OpenAPI file (shared reference aio/openapi.json, info.version 1.9.4),
our summary of it (remote-apis.md section B) and DeerFlow's client
(deerflow-sandbox-semantics.md 5.7, 5.8).  Python 3.11 standard library only.
The black-box tests of sbxfs's `aio` provider talk to it instead of the real
image, which cannot be pulled here.

Run modes
  host mode (default)   every command runs in a bubblewrap sandbox of its own,
                        all of them sharing one per-server root: host /usr, /etc
                        (and /bin, /lib*, /sbin) read-only; a writable host
                        directory (--root) providing /mnt (with
                        /mnt/user-data/{workspace,uploads,outputs}), /tmp and
                        /home; --unshare-pid --unshare-ipc --unshare-net
                        --unshare-uts --cap-drop ALL --die-with-parent.  The file
                        API resolves paths the way the sandbox sees them
                        (symlinks included), so it never reaches outside that
                        view and writes only below /mnt, /tmp and /home.
  --in-container        the entrypoint of a container image: commands run with
                        /bin/sh directly, paths are the container's own.  As pid
                        1 it forks the server and stays behind as a reaper that
                        forwards SIGTERM/SIGINT/SIGHUP.

API (paths, fields and envelopes as in openapi.json)
  GET  /v1/sandbox                     readiness and context (SandboxResponse)
  GET  /v1/sandbox/packages/{python,nodejs}
  POST /v1/bash/exec | /output | /write | /kill,  GET /v1/bash/sessions,
  POST /v1/bash/sessions/create,  POST /v1/bash/sessions/{id}/close
  POST /v1/shell/exec | /view | /wait | /write | /kill,
  POST /v1/shell/sessions/create | /sessions/update,  GET /v1/shell/sessions,
  GET  /v1/shell/sessions/stats,  DELETE /v1/shell/sessions[/{id}]
  POST /v1/file/read | write | replace | search | find | grep | glob | list |
       str_replace_editor | upload (multipart),  GET|HEAD /v1/file/download
  The 1.9.4 API has no delete, mkdir, move or stat route: clients do those with
  an exec (`rm -f -- PATH`), as DeerFlow does; this fake answers 404 for them,
  like the real 1.9.4 image.
  Envelope {success, message, data, hint}; request validation failures are
  FastAPI's 422 {"detail": [{"type", "loc", "msg", "input"}]}; file failures are
  HTTP 200 + success:false + data = FileOperationError; unknown routes are
  404 {"detail": "Not Found"}.

Test control channel (never under /v1; this text is served at GET /_fake/help)
  GET  /_fake/health      {"ok", "pid", "port", "mode", "root", "ready"}
  GET  /_fake/requests    request log (?path=REGEX&since=SEQ); an entry's
                          resp_bytes counts the body bytes sent
  GET  /_fake/counters    {"total", "by_route": {"POST /v1/bash/exec": n}, "by_status"}
  POST /_fake/faults      add a fault (body below); GET lists, DELETE clears,
                          DELETE /_fake/faults/{id} removes one
        {"kind": "error"|"delay"|"drop"|"reset"|"malformed_json"|"truncate"|
                 "tool_failure"|"drip",
         "path": REGEX (default any /v1 path), "method": "POST" (default any),
         "times": N (default 1; null = until removed), "after": K (let K
         matching requests through first), "status": 500, "body": {...},
         "seconds": 2.0 (delay), "message": "...", "retry_after": N (error:
         a Retry-After header, as a proxy at capacity sends with 429/503)}
        error: HTTP `status` with `body` (default: the envelope with success
        false for 5xx, FastAPI's {"detail": ...} for 401/403/404/405/422/503);
        delay: wait `seconds`, then answer normally; drop: close the
        connection without an answer (reset: with a TCP RST); malformed_json:
        200 with a cut JSON body; truncate: 200 whose body ends before its
        Content-Length (a download: half the file's
        own bytes, then the connection closes); tool_failure: 200 {"success": false, "message"};
        drip: a download's body goes one byte every `seconds` (a hostile
        server that never stalls long enough for a client's stall timeout).
        Faults apply before authentication and readiness, in the order added.
  POST /_fake/ready       {"ready": bool} or {"delay": seconds}
  POST /_fake/config      {"omit_null": bool, "bash_api": bool, "version": str}
  POST /_fake/reset       clear faults, log and counters; {"sessions": true}
                          also ends every session and running command
  GET  /_fake/processes   running commands
  POST /_fake/shutdown    exit cleanly

Usage
  /usr/bin/python3 tests/fakes/aio_server.py --port 0 --port-file /tmp/p
  /usr/bin/python3 tests/fakes/aio_server.py --in-container --host 0.0.0.0 --port 8080

Choices where the spec is silent (a client must not depend on them)
  * /v1/bash/exec with an unknown session_id creates that session (v1 creates
    a session on first use); /v1/shell/exec with an unknown id, and the
    session routes with unknown ids, answer 404 with the envelope and a
    message containing "session not found" (what DeerFlow checks).  /v1/shell/exec
    without id makes a fresh session each time.
  * A session runs one command at a time: an exec while one runs gets
    success:false "... is busy".  Commands get a stdin pipe that stays open
    (for /write), so a command reading stdin waits: redirect it.
  * exit_code is set only with status completed; a command killed by signal
    N (not through the API) completes with 128+N.
  * shell output is stdout and stderr merged in order, without a PTY (no \r).
  * timestamps are ISO 8601 in UTC with +00:00; permissions are
    "rwxr-xr-x"; directories have size null; file/search line_numbers count
    from 0, grep line_number from 1; write creates missing parents; upload
    without `path` lands in the home directory, and a `path` naming a
    directory keeps the part's file name; download answers 404/400/403 with
    {"detail"} and honours Range.
"""

import argparse
import base64
import binascii
import bisect
import datetime as _dt
import errno
import fnmatch
import hashlib
import http.server
import json
import os
import platform
import pwd
import queue
import re
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import uuid

AIO_VERSION = "1.9.4"          # info.version of the OpenAPI file this fake follows
DEFAULT_PORT = 8080            # the AIO image's one port (remote-apis.md B.1)
DEFAULT_HOME = "/home/gem"     # the AIO image's home and workspace
SHELL_NO_CHANGE_TIMEOUT = 120  # session default (ShellCreateSessionRequest)
SHELL_TRUNCATE_CHARS = 30000   # ShellExecRequest.truncate
MAX_JSON_BODY = 512 << 20
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STATE_IN_SANDBOX = "/run/aio-fake"

OK_MESSAGE = "Operation successful"


def now_iso():
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


def iso_of(ts):
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat()


# ===========================================================================
# request validation, after the request models of openapi.json (pydantic v2
# lax mode: the error types and messages FastAPI returns)


class F:
    """One field of a request model."""

    def __init__(self, kind, required=False, nullable=True, default=None,
                 enum=None, ge=None, le=None):
        self.kind = kind          # str int num bool map_str list_str list_int enum
        self.required = required
        self.nullable = nullable
        self.default = default
        self.enum = enum
        self.ge = ge
        self.le = le


def R(kind, **kw):
    return F(kind, required=True, nullable=False, **kw)


ENC = ["utf-8", "base64", "raw"]

MODELS = {
    "ShellExecRequest": {
        "id": F("str"), "exec_dir": F("str"), "command": R("str"),
        "async_mode": F("bool", nullable=False, default=False), "timeout": F("num"),
        "strict": F("bool"), "no_change_timeout": F("int"), "hard_timeout": F("num"),
        "preserve_symlinks": F("bool", default=False),
        "truncate": F("bool", nullable=False, default=True)},
    "ShellCreateSessionRequest": {
        "id": F("str", nullable=False), "exec_dir": F("str"),
        "no_change_timeout": F("int"), "preserve_symlinks": F("bool", default=False)},
    "ShellUpdateSessionRequest": {"id": R("str"), "no_change_timeout": F("int")},
    "ShellViewRequest": {"id": R("str")},
    "ShellWaitRequest": {"id": R("str"), "seconds": F("int"), "max_wait_seconds": F("int")},
    "ShellWriteToProcessRequest": {"id": R("str"), "input": R("str"), "press_enter": R("bool")},
    "ShellKillProcessRequest": {"id": R("str")},
    "BashExecRequest": {
        "session_id": F("str"), "command": R("str"), "exec_dir": F("str"),
        "env": F("map_str"), "async_mode": F("bool", nullable=False, default=False),
        "timeout": F("num"), "hard_timeout": F("num"),
        "max_output_length": F("int", nullable=False, default=50000)},
    "BashOutputRequest": {
        "session_id": R("str"), "command_id": F("str"),
        "offset": F("int", nullable=False, default=0),
        "stderr_offset": F("int", nullable=False, default=0),
        "wait": F("bool", nullable=False, default=False),
        "wait_timeout": F("num", nullable=False, default=30)},
    "BashWriteRequest": {"session_id": R("str"), "command_id": F("str"), "input": R("str")},
    "BashKillRequest": {"session_id": R("str"), "signal": F("str", nullable=False, default="SIGTERM")},
    "BashSessionCreateRequest": {"session_id": F("str"), "exec_dir": F("str"), "snapshot_path": F("str")},
    "FileReadRequest": {"file": R("str"), "start_line": F("int"), "end_line": F("int"),
                        "sudo": F("bool", default=False)},
    "FileWriteRequest": {
        "file": R("str"), "content": R("str"), "encoding": F("enum", enum=ENC, default="utf-8"),
        "append": F("bool", default=False), "leading_newline": F("bool", default=False),
        "trailing_newline": F("bool", default=False), "sudo": F("bool", default=False)},
    "FileReplaceRequest": {"file": R("str"), "old_str": R("str"), "new_str": R("str"),
                           "sudo": F("bool", default=False)},
    "FileSearchRequest": {"file": R("str"), "regex": R("str"), "sudo": F("bool", default=False)},
    "FileFindRequest": {"path": R("str"), "glob": R("str")},
    "FileGrepRequest": {
        "path": R("str"), "pattern": R("str"), "include": F("list_str"), "exclude": F("list_str"),
        "case_insensitive": F("bool", default=False), "fixed_strings": F("bool", default=False),
        "context_before": F("int", default=0, ge=0, le=20),
        "context_after": F("int", default=0, ge=0, le=20),
        "max_results": F("int", default=500, ge=1, le=10000),
        "max_file_size": F("str", default="1M"), "multiline": F("bool", default=False),
        "offset": F("int", default=0, ge=0), "type": F("str"),
        "recursive": F("bool", default=True)},
    "FileGlobRequest": {
        "path": R("str"), "pattern": R("str"), "exclude": F("list_str"),
        "include_hidden": F("bool", default=False), "files_only": F("bool", default=True),
        "include_metadata": F("bool", default=True),
        "max_results": F("int", default=5000, ge=1, le=50000),
        "sort_by": F("str", default="path"), "sort_desc": F("bool", default=False)},
    "FileListRequest": {
        "path": R("str"), "recursive": F("bool", default=False),
        "show_hidden": F("bool", default=True), "file_types": F("list_str"),
        "max_depth": F("int"), "include_size": F("bool", default=True),
        "include_permissions": F("bool", default=False),
        "sort_by": F("str", default="name"), "sort_desc": F("bool", default=False)},
    "StrReplaceEditorRequest": {
        "command": R("enum", enum=["view", "create", "str_replace", "insert", "undo_edit"]),
        "path": R("str"), "file_text": F("str"), "old_str": F("str"), "new_str": F("str"),
        "insert_line": F("int"), "view_range": F("list_int", default=[]),
        "replace_mode": F("enum", enum=["ALL", "FIRST", "LAST"])},
}

_BOOL_TRUE = {"1", "on", "t", "true", "y", "yes"}
_BOOL_FALSE = {"0", "off", "f", "false", "n", "no"}


def _expected(values):
    q = [f"'{v}'" for v in values]
    return q[0] if len(q) == 1 else ", ".join(q[:-1]) + " or " + q[-1]


def _coerce(kind, v, loc, errs, f=None):
    """Pydantic v2 lax-mode coercion of one JSON value; appends errors."""
    def err(t, msg, ctx=None):
        e = {"type": t, "loc": loc, "msg": msg, "input": v}
        if ctx is not None:
            e["ctx"] = ctx
        errs.append(e)
        return None

    if kind == "str":
        return v if isinstance(v, str) else err("string_type", "Input should be a valid string")
    if kind == "bool":
        if isinstance(v, bool):
            return v
        if isinstance(v, int) and v in (0, 1):
            return bool(v)
        if isinstance(v, float) and v in (0.0, 1.0):
            return bool(v)
        if isinstance(v, str):
            s = v.strip().lower()
            if s in _BOOL_TRUE:
                return True
            if s in _BOOL_FALSE:
                return False
            return err("bool_parsing", "Input should be a valid boolean, unable to interpret input")
        return err("bool_type", "Input should be a valid boolean")
    if kind == "int":
        if isinstance(v, bool):
            out = int(v)
        elif isinstance(v, int):
            out = v
        elif isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                return err("finite_number", "Input should be a finite number")
            if v != int(v):
                return err("int_from_float", "Input should be a valid integer, got a number with a fractional part")
            out = int(v)
        elif isinstance(v, str):
            try:
                out = int(v.strip())
            except ValueError:
                return err("int_parsing", "Input should be a valid integer, unable to parse string as an integer")
        else:
            return err("int_type", "Input should be a valid integer")
        return _bounds(out, v, loc, errs, f)
    if kind == "num":
        if isinstance(v, bool):
            out = float(v)
        elif isinstance(v, (int, float)):
            out = float(v)
        elif isinstance(v, str):
            try:
                out = float(v.strip())
            except ValueError:
                return err("float_parsing", "Input should be a valid number, unable to parse string as a number")
        else:
            return err("float_type", "Input should be a valid number")
        return _bounds(out, v, loc, errs, f)
    if kind == "enum":
        if isinstance(v, str) and v in f.enum:
            return v
        return err("enum" if f.enum is ENC else "literal_error",
                   f"Input should be {_expected(f.enum)}", {"expected": _expected(f.enum)})
    if kind == "map_str":
        if not isinstance(v, dict):
            return err("dict_type", "Input should be a valid dictionary")
        out = {}
        for k, x in v.items():
            if not isinstance(x, str):
                errs.append({"type": "string_type", "loc": loc + [k],
                             "msg": "Input should be a valid string", "input": x})
            else:
                out[k] = x
        return out
    if kind in ("list_str", "list_int"):
        if not isinstance(v, list):
            return err("list_type", "Input should be a valid list")
        out = []
        for i, x in enumerate(v):
            out.append(_coerce(kind[5:], x, loc + [i], errs))
        return out
    raise AssertionError(kind)


def _bounds(out, v, loc, errs, f):
    if f is None:
        return out
    if f.ge is not None and out < f.ge:
        errs.append({"type": "greater_than_equal", "loc": loc, "msg": f"Input should be greater than or equal to {f.ge}",
                     "input": v, "ctx": {"ge": f.ge}})
        return None
    if f.le is not None and out > f.le:
        errs.append({"type": "less_than_equal", "loc": loc, "msg": f"Input should be less than or equal to {f.le}",
                     "input": v, "ctx": {"le": f.le}})
        return None
    return out


def validate(model, body):
    """Return the model's values (defaults filled) or raise a 422."""
    fields = MODELS[model]
    if not isinstance(body, dict):
        raise ApiError(422, {"detail": [{
            "type": "model_attributes_type", "loc": ["body"],
            "msg": "Input should be a valid dictionary or object to extract fields from",
            "input": body if not isinstance(body, (bytes, bytearray)) else body.decode("utf-8", "replace")}]})
    errs, out = [], {}
    for name, f in fields.items():
        loc = ["body", name]
        if name not in body:
            if f.required:
                errs.append({"type": "missing", "loc": loc, "msg": "Field required", "input": body})
            else:
                out[name] = f.default
            continue
        v = body[name]
        if v is None:
            if f.nullable:
                out[name] = None
                continue
            errs.append({"type": {"str": "string_type", "bool": "bool_type", "int": "int_type",
                                  "num": "float_type", "enum": "enum"}.get(f.kind, "none_type"),
                         "loc": loc, "msg": {"str": "Input should be a valid string",
                                             "bool": "Input should be a valid boolean",
                                             "int": "Input should be a valid integer",
                                             "num": "Input should be a valid number"}.get(
                                                 f.kind, "Input should not be None"),
                         "input": None})
            continue
        out[name] = _coerce(f.kind, v, loc, errs, f)
    if errs:
        raise ApiError(422, {"detail": errs})
    return out


def query_validation(name, value, enum=None, required=True):
    if value is None:
        if required:
            raise ApiError(422, {"detail": [{"type": "missing", "loc": ["query", name],
                                             "msg": "Field required", "input": None}]})
        return None
    if enum is not None and value not in enum:
        raise ApiError(422, {"detail": [{"type": "enum", "loc": ["query", name],
                                         "msg": f"Input should be {_expected(enum)}", "input": value,
                                         "ctx": {"expected": _expected(enum)}}]})
    return value


# ===========================================================================
# errors and envelopes


class ApiError(Exception):
    """An HTTP answer other than the handler's normal one."""

    def __init__(self, status, body, headers=None):
        super().__init__(f"{status}")
        self.status = status
        self.body = body
        self.headers = headers or {}


def envelope(data=None, message=OK_MESSAGE, success=True, hint=None):
    return {"success": success, "message": message, "data": data, "hint": hint}


def failure(message, data=None):
    return envelope(data, message=message, success=False)


def not_found_session(kind, sid):
    # DeerFlow recreates a session when a 404's message says "session not found"
    msg = f"{kind} session not found: {sid}"
    return ApiError(404, envelope(None, message=msg, success=False))


_ERROR_TYPES = {
    errno.ENOENT: "not_found", errno.EACCES: "permission_denied", errno.EPERM: "permission_denied",
    errno.EISDIR: "invalid_target", errno.ENOTDIR: "invalid_target", errno.EEXIST: "already_exists",
    errno.ENOTEMPTY: "invalid_target", errno.EINVAL: "invalid_path", errno.ENAMETOOLONG: "invalid_path",
    errno.ELOOP: "invalid_path", errno.EROFS: "read_only_filesystem", errno.ENOSPC: "no_space_left",
    errno.EDQUOT: "no_space_left",
}
_RETRYABLE = {errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ETIMEDOUT, errno.EIO}


class FileOpError(Exception):
    def __init__(self, path, operation, message, error_type, err=None, exc_type=None):
        super().__init__(message)
        self.data = {
            "path": path, "operation": operation, "message": message, "error_type": error_type,
            "retryable": err in _RETRYABLE if err else False, "errno": err,
            "errno_name": errno.errorcode.get(err) if err else None, "exception_type": exc_type}


def os_error(path, operation, e):
    err = e.errno if isinstance(e, OSError) else None
    etype = _ERROR_TYPES.get(err, "io_error")
    exc = type(e).__name__
    if isinstance(e, OSError) and type(e) is OSError and err is not None:
        # the subclass Python would have raised for this errno
        exc = type(OSError(err, "")).__name__
    msg = f"{os.strerror(err) if err else str(e)}: '{path}'"
    return FileOpError(path, operation, msg, etype, err, exc)


def oserr(code, path=""):
    return OSError(code, os.strerror(code), path)


# ===========================================================================
# processes: one long-lived spawner thread (bwrap --die-with-parent ties a
# sandbox to the *thread* that forked it), output capture, kill, wait


class Spawner:
    def __init__(self):
        self.q = queue.Queue()
        self.t = threading.Thread(target=self._run, name="spawner", daemon=True)
        self.t.start()

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            args, kwargs, box, ev = item
            try:
                box.append(subprocess.Popen(*args, **kwargs))
            except BaseException as e:  # reported to the caller
                box.append(e)
            ev.set()

    def popen(self, *args, **kwargs):
        box, ev = [], threading.Event()
        self.q.put((args, kwargs, box, ev))
        ev.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]


class Proc:
    """One command: stdout/stderr (or merged) in memory, status, exit code."""

    def __init__(self, server, command, argv, cwd, env, merge, kind, session_id):
        self.server = server
        self.id = uuid.uuid4().hex[:16]
        self.command = command
        self.kind = kind
        self.session_id = session_id
        self.cond = threading.Condition()
        self.out = bytearray()
        self.err = bytearray()
        self.merge = merge
        self.started = time.monotonic()
        self.last_change = self.started
        self.ended = None
        self.done = False
        self.returncode = None
        self.kill_reason = None     # "killed" | "timed_out" | "terminated"
        self.hard_timer = None
        self.proc = server.spawner.popen(
            argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
            start_new_session=True, close_fds=True)
        self.pid = self.proc.pid
        self.readers = [threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True)]
        if not merge:
            self.readers.append(threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True))
        for t in self.readers:
            t.start()
        server.register_proc(self)  # before the waiter: a quick exit unregisters it after
        threading.Thread(target=self._wait, daemon=True, name=f"wait-{self.pid}").start()

    def _read(self, f, buf):
        try:
            while True:
                b = f.read1(65536)
                if not b:
                    break
                with self.cond:
                    buf.extend(b)
                    self.last_change = time.monotonic()
                    self.cond.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            try:
                f.close()
            except OSError:
                pass

    def _wait(self):
        rc = self.proc.wait()
        # what the command left running may hold the pipes: drain briefly only
        for t in self.readers:
            t.join(0.3)
        if self.hard_timer:
            self.hard_timer.cancel()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.server.unregister_proc(self)    # first: whoever sees done sees it gone
        with self.cond:
            self.returncode = rc
            self.ended = time.monotonic()
            self.done = True
            self.cond.notify_all()

    # ---- control
    def set_hard_timeout(self, seconds):
        if seconds is None:
            return
        self.hard_timer = threading.Timer(max(0.0, seconds), self.kill, args=(signal.SIGKILL, "timed_out"))
        self.hard_timer.daemon = True
        self.hard_timer.start()

    def kill(self, sig=signal.SIGKILL, reason="killed"):
        with self.cond:
            if self.done:
                return False
            if self.kill_reason is None:
                self.kill_reason = reason
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            try:
                self.proc.send_signal(sig)
            except OSError:
                pass
        return True

    def write_stdin(self, data):
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    # ---- state
    @property
    def exit_code(self):
        if not self.done:
            return None
        rc = self.returncode
        return 128 - rc if rc < 0 else rc

    def bash_status(self):
        with self.cond:
            if not self.done:
                return "running"
            if self.kill_reason == "timed_out":
                return "timed_out"
            if self.kill_reason in ("killed", "terminated"):
                return "killed"
            return "completed"

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while not self.done:
                rem = None if deadline is None else deadline - time.monotonic()
                if rem is not None and rem <= 0:
                    return False
                self.cond.wait(rem if rem is not None else 1.0)
            return True

    def snapshot(self):
        with self.cond:
            return bytes(self.out), bytes(self.err)


def text_of(b):
    return b.decode("utf-8", "replace")


def middle_truncate(s, limit):
    if not limit or limit <= 0 or len(s) <= limit:
        return s
    head = limit // 2
    tail = limit - head
    cut = len(s) - limit
    return s[:head] + f"\n\n... [{cut} characters truncated] ...\n\n" + (s[-tail:] if tail else "")


def utf8_complete(b):
    """Length of the longest prefix of b that ends on a UTF-8 character boundary."""
    n = len(b)
    for back in range(1, min(4, n) + 1):
        c = b[n - back]
        if c & 0xC0 == 0x80:
            continue          # continuation byte: look further back
        need = 1 if c < 0x80 else 2 if c >> 5 == 0b110 else 3 if c >> 4 == 0b1110 else 4 if c >> 3 == 0b11110 else 1
        return n if need <= back else n - back
    return n


# ===========================================================================
# where commands run and how sandbox paths map to host paths


class Env:
    mode = "?"
    nofollow = 0     # O_NOFOLLOW where resolve() has already followed every link

    def __init__(self, home, shell, extra_env):
        self.home = home
        self.shell = shell
        self.extra_env = extra_env

    # paths --------------------------------------------------------------
    def resolve(self, vpath, follow=True):
        """(virtual path, host path or None, writable) of an absolute path;
        the last component may be missing; raises OSError."""
        raise NotImplementedError

    def host(self, vpath, follow=True, write=False):
        vp, hp, writable = self.resolve(vpath, follow)
        if hp is None:
            if write:
                raise oserr(errno.EROFS, vpath)
            if vp == "/":
                return vp, None
            raise oserr(errno.ENOENT, vpath)
        if write and not writable:
            raise oserr(errno.EROFS, vpath)
        return vp, hp

    def is_dir(self, vpath):
        try:
            vp, hp = self.host(vpath)
        except OSError:
            return False
        return vp == "/" or (hp is not None and os.path.isdir(hp))

    def makedirs(self, vpath):
        """mkdir -p, each component resolved as the sandbox sees it."""
        cur = ""
        for p in [p for p in vpath.split("/") if p]:
            cur += "/" + p
            if not self.is_dir(cur):
                _, hp = self.host(cur, write=True)
                os.mkdir(hp)

    # commands -----------------------------------------------------------
    def base_env(self):
        raise NotImplementedError

    def command(self, script, cwd):
        """(argv, host cwd) running `shell -c script` in the sandbox at cwd."""
        raise NotImplementedError


class ContainerEnv(Env):
    mode = "container"

    def __init__(self, home, shell, extra_env):
        super().__init__(home, shell, extra_env)
        for d in ("/mnt/user-data/workspace", "/mnt/user-data/uploads", "/mnt/user-data/outputs",
                  home, "/tmp"):
            try:
                os.makedirs(d, exist_ok=True)
            except OSError:
                pass
        try:
            os.makedirs(STATE_IN_SANDBOX + "/shell", exist_ok=True)
            self.state = STATE_IN_SANDBOX
        except OSError:
            self.state = tempfile.mkdtemp(prefix="aio-fake-")
            os.makedirs(self.state + "/shell", exist_ok=True)
        self.state_host = self.state
        self.root = "/"

    def resolve(self, vpath, follow=True):
        if not vpath.startswith("/"):
            raise oserr(errno.EINVAL, vpath)
        vp = os.path.normpath(vpath)
        if vp.startswith("//"):
            vp = "/" + vp.lstrip("/")
        return vp, vp, True

    def base_env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIO_FAKE_")}
        env.setdefault("PATH", SANDBOX_PATH)
        env["HOME"] = self.home
        env.update(self.extra_env)
        return env

    def command(self, script, cwd):
        return [self.shell, "-c", script], cwd


class HostEnv(Env):
    mode = "host"
    nofollow = os.O_NOFOLLOW
    RO_DIRS = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")

    def __init__(self, root, home, shell, extra_env):
        super().__init__(home, shell, extra_env)
        if not shutil.which("bwrap"):
            raise SystemExit("aio_server: host mode needs bubblewrap (bwrap) on PATH")
        self.root = os.path.realpath(root)
        for d in ("mnt/user-data/workspace", "mnt/user-data/uploads", "mnt/user-data/outputs",
                  "tmp", "home", ".state/shell"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)
        os.chmod(os.path.join(self.root, "tmp"), 0o1777)
        if not home.startswith("/home/") and home != "/home" and not home.startswith(("/mnt/", "/tmp/")):
            raise SystemExit(f"aio_server: --home must be under /home, /mnt or /tmp in host mode, not {home}")
        os.makedirs(self.root + home, exist_ok=True)
        self.state = STATE_IN_SANDBOX
        self.state_host = os.path.join(self.root, ".state")
        self.mounts = {"mnt": (os.path.join(self.root, "mnt"), True),
                       "tmp": (os.path.join(self.root, "tmp"), True),
                       "home": (os.path.join(self.root, "home"), True)}
        self.root_links = {}
        for d in self.RO_DIRS:
            p = "/" + d
            if os.path.islink(p):
                self.root_links[d] = os.readlink(p)
            elif os.path.isdir(p):
                self.mounts[d] = (p, False)

    def _map(self, parts):
        m = self.mounts.get(parts[0])
        if m is None:
            return None, False
        return os.path.join(m[0], *parts[1:]), m[1]

    def resolve(self, vpath, follow=True):
        if not vpath.startswith("/"):
            raise oserr(errno.EINVAL, vpath)
        todo = [p for p in vpath.split("/") if p not in ("", ".")]
        cur = []
        links = 0
        while todo:
            comp = todo.pop(0)
            if comp == "..":
                if cur:
                    cur.pop()
                continue
            cand = cur + [comp]
            last = not todo
            target = None
            if len(cand) == 1 and comp in self.root_links:
                if last and not follow:
                    cur = cand
                    break
                target = self.root_links[comp]
            else:
                hp, _ = self._map(cand)
                if hp is None:
                    if last:
                        cur = cand
                        break
                    raise oserr(errno.ENOENT, vpath)
                try:
                    st = os.lstat(hp)
                except FileNotFoundError:
                    if last:
                        cur = cand
                        break
                    raise oserr(errno.ENOENT, vpath)
                except NotADirectoryError:
                    raise oserr(errno.ENOTDIR, vpath)
                if stat.S_ISLNK(st.st_mode) and (follow or not last):
                    target = os.readlink(hp)
                elif not last and not stat.S_ISDIR(st.st_mode):
                    raise oserr(errno.ENOTDIR, vpath)
            if target is not None:
                links += 1
                if links > 40:
                    raise oserr(errno.ELOOP, vpath)
                if target.startswith("/"):
                    cur = []
                todo = [p for p in target.split("/") if p not in ("", ".")] + todo
                continue
            cur = cand
        vp = "/" + "/".join(cur)
        if not cur:
            return "/", None, False
        if len(cur) == 1 and cur[0] in self.root_links:
            return vp, None, False     # the symlink itself (lstat of /bin)
        hp, writable = self._map(cur)
        return vp, hp, writable

    def root_entries(self):
        """Synthetic listing of '/': (name, is_dir, is_symlink)."""
        out = [(n, True, False) for n in sorted(self.mounts)]
        out += [(n, True, True) for n in sorted(self.root_links)]
        return sorted(out)

    def base_env(self):
        env = {"PATH": SANDBOX_PATH, "HOME": self.home, "LANG": "C.UTF-8",
               "USER": "root", "LOGNAME": "root", "SHELL": self.shell, "HOSTNAME": "aio-sandbox"}
        env.update(self.extra_env)
        return env

    def command(self, script, cwd):
        a = ["bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts",
             "--unshare-cgroup-try", "--hostname", "aio-sandbox", "--die-with-parent",
             "--cap-drop", "ALL"]
        for d in self.RO_DIRS:
            if d in self.root_links:
                a += ["--symlink", self.root_links[d], "/" + d]
            elif d in self.mounts:
                a += ["--ro-bind", "/" + d, "/" + d]
        a += ["--proc", "/proc", "--dev", "/dev",
              "--bind", self.mounts["mnt"][0], "/mnt",
              "--bind", self.mounts["tmp"][0], "/tmp",
              "--bind", self.mounts["home"][0], "/home",
              "--bind", self.state_host, STATE_IN_SANDBOX,
              "--chdir", cwd, self.shell, "-c", script]
        return a, self.root


# ===========================================================================
# sessions


class BashSession:
    def __init__(self, sid, working_dir, snapshot_path=None):
        self.id = sid
        self.working_dir = working_dir
        self.snapshot_path = snapshot_path
        self.created_at = now_iso()
        self.last_used_at = self.created_at
        self.status = "ready"
        self.commands = {}       # command_id -> Proc
        self.current = None      # Proc
        self.count = 0
        self.lock = threading.Lock()

    def info(self):
        cur = self.current
        return {"session_id": self.id, "status": self.status, "working_dir": self.working_dir,
                "created_at": self.created_at, "last_used_at": self.last_used_at,
                "current_command": cur.command if cur is not None and not cur.done else None,
                "command_count": self.count}


class ShellSession:
    def __init__(self, sid, cwd, no_change_timeout):
        self.id = sid
        self.cwd = cwd
        self.no_change_timeout = no_change_timeout or SHELL_NO_CHANGE_TIMEOUT
        self.created = time.time()
        self.created_at = now_iso()
        self.last_used_at = self.created_at
        self.proc = None
        self.console = []
        self.lock = threading.Lock()
        self.key = hashlib.sha256(sid.encode()).hexdigest()[:24]

    def info(self):
        p = self.proc
        running = p is not None and not p.done
        return {"working_dir": self.cwd, "created_at": self.created_at, "last_used_at": self.last_used_at,
                "age_seconds": int(time.time() - self.created),
                "status": "running" if running else "idle",
                "current_command": p.command if running else None}


# ===========================================================================
# control channel state: faults, request log, counters


class Faults:
    KINDS = ("error", "delay", "drop", "reset", "malformed_json", "truncate", "tool_failure", "drip")

    def __init__(self):
        self.lock = threading.Lock()
        self.items = []
        self.next_id = 1

    def add(self, spec):
        kind = spec.get("kind")
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}")
        path = spec.get("path") or r"^/v1/"
        re.compile(path)
        times = spec.get("times", 1)
        if times is not None and (not isinstance(times, int) or times < 1):
            raise ValueError("times must be a positive integer or null")
        after = spec.get("after", 0)
        if not isinstance(after, int) or after < 0:
            raise ValueError("after must be a non-negative integer")
        with self.lock:
            f = {"id": self.next_id, "kind": kind, "path": path,
                 "method": (spec.get("method") or "").upper() or None,
                 "times": times, "after": after, "status": int(spec.get("status", 500)),
                 "body": spec.get("body"), "seconds": float(spec.get("seconds", 1.0)),
                 "message": spec.get("message"), "retry_after": spec.get("retry_after"), "hits": 0}
            self.next_id += 1
            self.items.append(f)
            return dict(f)

    def match(self, method, path):
        with self.lock:
            for f in self.items:
                if f["method"] and f["method"] != method:
                    continue
                if not re.search(f["path"], path):
                    continue
                if f["after"] > 0:
                    f["after"] -= 1
                    continue
                f["hits"] += 1
                if f["times"] is not None:
                    f["times"] -= 1
                    if f["times"] <= 0:
                        self.items.remove(f)
                return dict(f)
        return None

    def list(self):
        with self.lock:
            return [dict(f) for f in self.items]

    def remove(self, fid=None):
        with self.lock:
            if fid is None:
                n = len(self.items)
                self.items.clear()
                return n
            before = len(self.items)
            self.items = [f for f in self.items if f["id"] != fid]
            return before - len(self.items)


class RequestLog:
    MAX = 5000

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.seq = 0
            self.entries = []
            self.by_route = {}
            self.by_status = {}

    def begin(self, method, path, query, headers):
        with self.lock:
            self.seq += 1
            e = {"seq": self.seq, "time": now_iso(), "method": method, "path": path, "query": query,
                 "headers": headers, "body": None, "status": None, "duration_ms": None, "fault": None}
            self.entries.append(e)
            if len(self.entries) > self.MAX:
                del self.entries[: len(self.entries) - self.MAX]
            key = f"{method} {path}"
            self.by_route[key] = self.by_route.get(key, 0) + 1
            return e

    def answered(self, e, status):
        """The status is counted before the answer is sent: a client that asks
        for the counters right after its answer sees it."""
        with self.lock:
            if e.get("counted"):
                return
            e["counted"] = True
            e["status"] = status
            k = str(status)
            self.by_status[k] = self.by_status.get(k, 0) + 1

    def end(self, e, status, t0, resp_bytes=0):
        self.answered(e, status)
        with self.lock:
            e["status"] = status
            e["resp_bytes"] = resp_bytes
            e["duration_ms"] = round((time.monotonic() - t0) * 1000, 3)

    def query(self, path_re=None, since=0):
        with self.lock:
            out = [{k: v for k, v in e.items() if k != "counted"} for e in self.entries if e["seq"] > since]
        if path_re:
            r = re.compile(path_re)
            out = [e for e in out if r.search(e["path"])]
        return out

    def counters(self):
        with self.lock:
            return {"total": self.seq, "by_route": dict(self.by_route), "by_status": dict(self.by_status)}


# ===========================================================================
# the server


class DropConnection(Exception):
    def __init__(self, reset=False):
        super().__init__("drop")
        self.reset = reset


class AioFake:
    def __init__(self, args, env):
        self.args = args
        self.env = env
        self.spawner = Spawner()
        self.started = time.monotonic()
        self.ready_at = None if args.never_ready else self.started + max(0.0, args.ready_delay)
        self.cfg = {"omit_null": False, "bash_api": not args.no_bash_api, "version": args.version_string}
        self.faults = Faults()
        self.log = RequestLog()
        self.lock = threading.Lock()
        self.bash = {}
        self.shell = {}
        self.procs = {}
        self.editor_history = {}
        self.port = None
        self.httpd = None
        self.stopping = threading.Event()
        self.user = pwd.getpwuid(os.getuid()).pw_name if self._has_pw() else str(os.getuid())

    @staticmethod
    def _has_pw():
        try:
            pwd.getpwuid(os.getuid())
            return True
        except KeyError:
            return False

    # ---- bookkeeping
    def register_proc(self, p):
        with self.lock:
            self.procs[p.pid] = p

    def unregister_proc(self, p):
        with self.lock:
            self.procs.pop(p.pid, None)

    def ready(self):
        return self.ready_at is not None and time.monotonic() >= self.ready_at

    def kill_all(self):
        with self.lock:
            procs = list(self.procs.values())
        for p in procs:
            p.kill(signal.SIGKILL, "terminated")
        for p in procs:
            p.wait(5)

    def reset_sessions(self):
        with self.lock:
            self.bash.clear()
            self.shell.clear()
            self.editor_history.clear()
        self.kill_all()

    # ---- command helpers
    def start(self, script, cwd_v, extra_env, merge, kind, session_id, display_cmd, shell_mode=False):
        env = self.env.base_env()
        if shell_mode:
            env.setdefault("TERM", "xterm-256color")
        if extra_env:
            env.update(extra_env)
        argv, hcwd = self.env.command(script, cwd_v)
        if self.env.mode == "container":
            hcwd = cwd_v
        return Proc(self, display_cmd, argv, hcwd, env, merge, kind, session_id)

    def check_dir(self, d):
        if not d or not d.startswith("/"):
            return False
        return self.env.is_dir(d)


# ===========================================================================
# handlers: sandbox


def h_sandbox(srv, req):
    ver = srv.cfg["version"]
    uname = platform.uname()
    tz = os.environ.get("TZ") or "UTC"
    ports = [str(srv.port)]
    text = (f"System Environment (v{ver}, sbxfs test fake):\n"
            f"- {uname.system} {uname.release} ({uname.machine}), without internet access\n"
            f"- User: {srv.user}\n- Home directory: {srv.env.home}\n- Timezone: {tz}\n"
            f"- Occupied Ports: {','.join(ports)}\n\nDevelopment Environment:\n"
            f"- Python {platform.python_version()} (commands: python3)\n\n"
            f"Available Tools:\n- Shell: sh\n")
    return {"success": True, "message": OK_MESSAGE, "data": text, "hint": None,
            "home_dir": srv.env.home, "workspace": srv.env.home, "version": ver,
            "detail": {"system": {"os": uname.system, "os_version": uname.release, "arch": uname.machine,
                                  "user": srv.user, "home_dir": srv.env.home, "workspace": None,
                                  "timezone": tz, "occupied_ports": ports},
                       "runtime": {"python": [{"ver": platform.python_version(), "bin": "python3",
                                               "alias": ["python3"]}], "nodejs": []},
                       "utils": [{"category": "Shell", "tools": [{"name": "sh", "description": "POSIX shell"}]}]}}


def h_packages(srv, req):
    return envelope([])


# ===========================================================================
# handlers: bash (pipe) API


def bash_result(sess, p, max_len, truncate=True):
    # the status first, the output after it: a command that ends in between
    # would otherwise be answered "completed" without its last output (its
    # readers are drained before it is marked done), and a client that stops
    # at "completed" loses that output
    st = p.bash_status()
    out, err = p.snapshot()
    so, se = text_of(out), text_of(err)
    if truncate:
        so, se = middle_truncate(so, max_len), middle_truncate(se, max_len)
    return {"session_id": sess.id, "command_id": p.id, "command": p.command, "status": st,
            "stdout": so, "stderr": se, "exit_code": p.exit_code if st == "completed" else None,
            "offset": len(out), "stderr_offset": len(err)}


def bash_get(srv, sid, create=False, exec_dir=None):
    with srv.lock:
        s = srv.bash.get(sid)
        if s is None:
            if not create:
                raise not_found_session("Bash", sid)
            s = BashSession(sid, exec_dir or srv.env.home)
            srv.bash[sid] = s
        return s


def require_bash_api(srv):
    if not srv.cfg["bash_api"]:
        raise ApiError(404, {"detail": "Not Found"})


def h_bash_create(srv, req):
    require_bash_api(srv)
    b = validate("BashSessionCreateRequest", req.json())
    sid = b["session_id"] or uuid.uuid4().hex
    if b["exec_dir"] is not None and not srv.check_dir(b["exec_dir"]):
        return failure(f"Working directory does not exist: {b['exec_dir']}")
    with srv.lock:
        s = srv.bash.get(sid)
        if s is None:
            s = BashSession(sid, b["exec_dir"] or srv.env.home, b["snapshot_path"])
            srv.bash[sid] = s
        elif b["exec_dir"]:
            s.working_dir = b["exec_dir"]
    return envelope(s.info())


def h_bash_exec(srv, req):
    require_bash_api(srv)
    b = validate("BashExecRequest", req.json())
    sid = b["session_id"] or uuid.uuid4().hex
    if b["exec_dir"] is not None and not srv.check_dir(b["exec_dir"]):
        return failure(f"Working directory does not exist: {b['exec_dir']}")
    for k, v in (b["env"] or {}).items():
        if not k or "=" in k or "\0" in k or "\0" in v:
            return failure(f"Invalid environment variable: {k!r}")
    # v1 creates a bash session on first use of its id
    sess = bash_get(srv, sid, create=True, exec_dir=b["exec_dir"])
    with sess.lock:
        if sess.current is not None and not sess.current.done:
            return failure(f"Bash session {sid} is busy: command {sess.current.id} is still running")
        if b["exec_dir"]:
            sess.working_dir = b["exec_dir"]
        cwd = sess.working_dir if srv.check_dir(sess.working_dir) else srv.env.home
        script = b["command"]
        if sess.snapshot_path:
            script = f". {shlex.quote(sess.snapshot_path)} >/dev/null 2>&1\n" + script
        try:
            p = srv.start(script, cwd, b["env"], False, "bash", sid, b["command"])
        except (OSError, ValueError) as e:
            return failure(f"Failed to start command: {e}")
        p.set_hard_timeout(b["hard_timeout"])
        sess.commands[p.id] = p
        sess.current = p
        sess.count += 1
        sess.last_used_at = now_iso()
    if not b["async_mode"]:
        p.wait(b["timeout"])
    return envelope(bash_result(sess, p, b["max_output_length"], truncate=not b["async_mode"]))


def h_bash_output(srv, req):
    require_bash_api(srv)
    b = validate("BashOutputRequest", req.json())
    sess = bash_get(srv, b["session_id"])
    p = sess.commands.get(b["command_id"]) if b["command_id"] else sess.current
    if b["command_id"] and p is None:
        return failure(f"Command not found: {b['command_id']}")
    if p is None:
        return envelope({"session_id": sess.id, "stdout": "", "stderr": "", "offset": b["offset"],
                         "stderr_offset": b["stderr_offset"], "command": None})
    off, eoff = max(0, b["offset"]), max(0, b["stderr_offset"])
    if b["wait"]:
        deadline = time.monotonic() + max(0.0, b["wait_timeout"])
        with p.cond:
            while not p.done and len(p.out) <= off and len(p.err) <= eoff:
                rem = deadline - time.monotonic()
                if rem <= 0:
                    break
                p.cond.wait(rem)
    out, err = p.snapshot()
    done = p.done
    nout, nerr = out[off:], err[eoff:]
    if not done:   # never split a UTF-8 character between two polls
        nout, nerr = nout[:utf8_complete(nout)], nerr[:utf8_complete(nerr)]
    st = p.bash_status()
    return envelope({"session_id": sess.id, "stdout": text_of(nout), "stderr": text_of(nerr),
                     "offset": off + len(nout), "stderr_offset": eoff + len(nerr),
                     "command": {"command_id": p.id, "command": p.command, "status": st,
                                 "exit_code": p.exit_code if st == "completed" else None}})


def h_bash_write(srv, req):
    require_bash_api(srv)
    b = validate("BashWriteRequest", req.json())
    sess = bash_get(srv, b["session_id"])
    p = sess.commands.get(b["command_id"]) if b["command_id"] else sess.current
    if p is None or p.done:
        return failure("No running command to write to")
    if not p.write_stdin(b["input"].encode()):
        return failure("Failed to write to the command's stdin")
    return envelope(None, message="Input written")


SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL, "SIGINT": signal.SIGINT}


def h_bash_kill(srv, req):
    require_bash_api(srv)
    b = validate("BashKillRequest", req.json())
    sess = bash_get(srv, b["session_id"])
    sig = SIGNALS.get(b["signal"].upper())
    if sig is None:
        return failure(f"Unsupported signal: {b['signal']} (use SIGTERM, SIGKILL or SIGINT)")
    p = sess.current
    if p is None or p.done:
        return failure("No running command in session")
    p.kill(sig, "killed")
    return envelope(None, message=f"Sent {b['signal'].upper()}")


def h_bash_sessions(srv, req):
    require_bash_api(srv)
    with srv.lock:
        return envelope([s.info() for s in srv.bash.values()])


def h_bash_close(srv, req, sid):
    require_bash_api(srv)
    with srv.lock:
        s = srv.bash.pop(sid, None)
    if s is None:
        raise not_found_session("Bash", sid)
    s.status = "closed"
    for p in list(s.commands.values()):
        p.kill(signal.SIGKILL, "killed")
    return envelope(None, message=f"Session {sid} closed")


# ===========================================================================
# handlers: shell (PTY-style) API


def shell_script(sess, srv, command):
    """A /bin/sh script that keeps a session's exported variables and cwd."""
    st = f"{srv.env.state}/shell/{sess.key}"
    return (f"__aio_s={shlex.quote(st)}\n"
            "[ -r \"$__aio_s.env\" ] && . \"$__aio_s.env\" >/dev/null 2>&1\n"
            "trap '__aio_rc=$?; pwd >\"$__aio_s.cwd\" 2>/dev/null; export -p >\"$__aio_s.env\" 2>/dev/null; "
            "exit $__aio_rc' EXIT\n"
            f"eval {shlex.quote(command)}\n")


def shell_refresh_cwd(srv, sess):
    try:
        with open(os.path.join(srv.env.state_host, "shell", sess.key + ".cwd")) as f:
            cwd = f.read().strip()
        if cwd:
            sess.cwd = cwd
    except OSError:
        pass


def shell_ps1(srv, sess):
    cwd = sess.cwd
    if cwd == srv.env.home or cwd.startswith(srv.env.home + "/"):
        cwd = "~" + cwd[len(srv.env.home):]
    return f"{srv.user}@aio-sandbox:{cwd} $"


def shell_status(p):
    if not p.done:
        return "running"
    if p.kill_reason == "timed_out":
        return "hard_timeout"
    if p.kill_reason in ("killed", "terminated"):
        return "terminated"
    return "completed"


def shell_output(p, truncate):
    out, _ = p.snapshot()
    s = text_of(out)
    return middle_truncate(s, SHELL_TRUNCATE_CHARS) if truncate else s


def shell_get(srv, sid):
    with srv.lock:
        s = srv.shell.get(sid)
    if s is None:
        raise not_found_session("Shell", sid)
    return s


def h_shell_create(srv, req):
    b = validate("ShellCreateSessionRequest", req.json())
    sid = b["id"] or uuid.uuid4().hex
    if b["exec_dir"] is not None and not srv.check_dir(b["exec_dir"]):
        return failure(f"Working directory does not exist: {b['exec_dir']}")
    with srv.lock:
        s = srv.shell.get(sid)
        if s is None:       # an existing id is returned as it is
            s = ShellSession(sid, b["exec_dir"] or srv.env.home, b["no_change_timeout"])
            srv.shell[sid] = s
    return envelope({"session_id": s.id, "working_dir": s.cwd})


def h_shell_update(srv, req):
    b = validate("ShellUpdateSessionRequest", req.json())
    s = shell_get(srv, b["id"])
    if b["no_change_timeout"] is not None:
        s.no_change_timeout = b["no_change_timeout"]
    return envelope(None, message="Session updated")


def h_shell_exec(srv, req):
    b = validate("ShellExecRequest", req.json())
    if b["id"]:
        sess = shell_get(srv, b["id"])
    else:
        sess = ShellSession(uuid.uuid4().hex, srv.env.home, None)
        with srv.lock:
            srv.shell[sess.id] = sess
    with sess.lock:
        if sess.proc is not None and not sess.proc.done:
            return failure(f"Shell session {sess.id} is busy: the previous command is still running")
        cwd = sess.cwd
        if b["exec_dir"]:
            if srv.check_dir(b["exec_dir"]):
                cwd = b["exec_dir"]
            elif b["strict"]:
                return failure(f"Working directory does not exist: {b['exec_dir']}")
        if not srv.check_dir(cwd):
            cwd = srv.env.home
        sess.cwd = cwd
        try:
            p = srv.start(shell_script(sess, srv, b["command"]), cwd, None, True, "shell", sess.id,
                          b["command"], shell_mode=True)
        except (OSError, ValueError) as e:
            return failure(f"Failed to start command: {e}")
        p.set_hard_timeout(b["hard_timeout"])
        sess.proc = p
        sess.last_used_at = now_iso()
    nct = b["no_change_timeout"] if b["no_change_timeout"] is not None else sess.no_change_timeout
    status = "running"
    if not b["async_mode"]:
        deadline = None if b["timeout"] is None else time.monotonic() + b["timeout"]
        with p.cond:
            while not p.done:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                if nct and now - p.last_change >= nct:
                    status = "no_change_timeout"
                    break
                waits = [1.0]
                if deadline is not None:
                    waits.append(deadline - now)
                if nct:
                    waits.append(p.last_change + nct - now)
                p.cond.wait(max(0.01, min(waits)))
        if p.done:
            status = shell_status(p)
    if p.done:
        shell_refresh_cwd(srv, sess)
    out = shell_output(p, b["truncate"])
    data = {"session_id": sess.id, "command": b["command"], "status": status, "output": out,
            "console": None, "exit_code": p.exit_code if status == "completed" else None}
    if status == "completed":
        rec = {"ps1": shell_ps1(srv, sess), "command": b["command"], "output": out}
        sess.console.append(rec)
        data["console"] = [rec]
    return envelope(data)


def h_shell_view(srv, req):
    b = validate("ShellViewRequest", req.json())
    s = shell_get(srv, b["id"])
    p = s.proc
    if p is None:
        return envelope({"output": "", "session_id": s.id, "console": s.console[-50:], "status": "completed",
                         "command": None, "exit_code": None})
    st = shell_status(p)
    return envelope({"output": shell_output(p, True), "session_id": s.id, "console": s.console[-50:],
                     "status": st, "command": p.command, "exit_code": p.exit_code if st == "completed" else None})


def h_shell_wait(srv, req):
    b = validate("ShellWaitRequest", req.json())
    s = shell_get(srv, b["id"])
    p = s.proc
    if p is not None:
        secs = b["seconds"] if b["seconds"] is not None else b["max_wait_seconds"]
        p.wait(secs if secs is not None else 30)
        if p.done:
            shell_refresh_cwd(srv, s)
    return envelope({"status": shell_status(p) if p is not None else "completed"})


def h_shell_write(srv, req):
    b = validate("ShellWriteToProcessRequest", req.json())
    s = shell_get(srv, b["id"])
    p = s.proc
    if p is None or p.done:
        return failure("No running process in session")
    data = b["input"] + ("\n" if b["press_enter"] else "")
    if not p.write_stdin(data.encode()):
        return failure("Failed to write to the process")
    return envelope({"status": shell_status(p)})


def h_shell_kill(srv, req):
    b = validate("ShellKillProcessRequest", req.json())
    s = shell_get(srv, b["id"])
    p = s.proc
    if p is None:
        return failure("No process in session")
    if p.done:
        return envelope({"status": shell_status(p), "exit_code": p.exit_code, "returncode": p.exit_code})
    p.kill(signal.SIGKILL, "terminated")
    p.wait(5)
    return envelope({"status": "terminated", "exit_code": None, "returncode": None})


def h_shell_sessions(srv, req):
    with srv.lock:
        return envelope({"sessions": {k: s.info() for k, s in srv.shell.items()}})


def h_shell_stats(srv, req):
    with srv.lock:
        n = len(srv.shell)
        active = sum(1 for s in srv.shell.values() if s.proc is not None and not s.proc.done)
    mx = int(os.environ.get("MAX_SHELL_SESSIONS", "10"))
    return envelope({"total_sessions": n, "active_sessions": active, "idle_sessions": n - active,
                     "max_sessions": mx, "session_timeout": 3600, "usage_ratio": min(1.0, n / mx if mx else 1.0)})


def _end_shell(s):
    if s.proc is not None and not s.proc.done:
        s.proc.kill(signal.SIGKILL, "terminated")


def h_shell_delete_all(srv, req):
    with srv.lock:
        sessions = list(srv.shell.values())
        srv.shell.clear()
    for s in sessions:
        _end_shell(s)
    return envelope(None, message=f"Cleaned up {len(sessions)} sessions")


def h_shell_delete(srv, req, sid):
    with srv.lock:
        s = srv.shell.pop(sid, None)
    if s is None:
        raise not_found_session("Shell", sid)
    _end_shell(s)
    return envelope(None, message=f"Session {sid} cleaned up")


# ===========================================================================
# handlers: file API


def fop(operation, path_field="file"):
    """Decorator: OSError/UnicodeError -> HTTP 200 success:false FileOperationError."""
    def deco(fn):
        def run(srv, req):
            body = req.json()
            try:
                return fn(srv, req, body)
            except FileOpError as e:
                return failure(e.data["message"], e.data)
            except UnicodeDecodeError as e:
                p = body.get(path_field) if isinstance(body, dict) else ""
                fe = FileOpError(p, operation, f"File is not valid UTF-8 text: {e.reason}", "decode_error",
                                 None, "UnicodeDecodeError")
                return failure(fe.data["message"], fe.data)
            except OSError as e:
                p = body.get(path_field) if isinstance(body, dict) else ""
                fe = os_error(p, operation, e)
                return failure(fe.data["message"], fe.data)
        run.__name__ = fn.__name__
        return run
    return deco


def _abs(path, operation):
    if not isinstance(path, str) or not path.startswith("/"):
        raise FileOpError(path, operation, f"Path must be absolute: '{path}'", "invalid_path",
                          errno.EINVAL, "ValueError")
    return path


def open_read(srv, vpath):
    vp, hp = srv.env.host(vpath)
    if hp is None:
        raise oserr(errno.EISDIR, vpath)
    fd = os.open(hp, os.O_RDONLY | srv.env.nofollow | os.O_CLOEXEC | os.O_NONBLOCK)
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise oserr(errno.EISDIR, vpath)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise oserr(errno.EINVAL, vpath)     # never block on a FIFO or device
    os.set_blocking(fd, True)
    return fd, st


def read_all(srv, vpath):
    fd, _ = open_read(srv, vpath)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def write_bytes(srv, vpath, data, append=False, mkparents=True):
    parent = os.path.dirname(vpath.rstrip("/")) or "/"
    if mkparents and not srv.env.is_dir(parent):
        srv.env.makedirs(parent)
    vp, hp = srv.env.host(vpath, write=True)
    flags = os.O_WRONLY | os.O_CREAT | srv.env.nofollow | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(hp, flags, 0o666)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)
    return len(data)


@fop("read")
def h_file_read(srv, req, body):
    b = validate("FileReadRequest", body)
    path = _abs(b["file"], "read")
    text = read_all(srv, path).decode("utf-8")
    if b["start_line"] is not None or b["end_line"] is not None:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[b["start_line"]:b["end_line"]])
    return envelope({"content": text, "file": path})


@fop("write")
def h_file_write(srv, req, body):
    b = validate("FileWriteRequest", body)
    path = _abs(b["file"], "write")
    enc = b["encoding"] or "utf-8"
    c = b["content"]
    if enc == "base64":
        try:
            data = base64.b64decode(c, validate=True)
        except (binascii.Error, ValueError) as e:
            raise FileOpError(path, "write", f"Invalid base64 content: {e}", "decode_error", None, "Error")
    elif enc == "raw":
        try:
            data = c.encode("latin-1")
        except UnicodeEncodeError as e:
            raise FileOpError(path, "write", f"raw content must be characters U+0000..U+00FF: {e.reason}",
                              "decode_error", None, "UnicodeEncodeError")
    else:
        data = (("\n" if b["leading_newline"] else "") + c + ("\n" if b["trailing_newline"] else "")).encode()
    n = write_bytes(srv, path, data, append=bool(b["append"]))
    return envelope({"file": path, "bytes_written": n})


@fop("replace")
def h_file_replace(srv, req, body):
    b = validate("FileReplaceRequest", body)
    path = _abs(b["file"], "replace")
    text = read_all(srv, path).decode("utf-8")
    if b["old_str"] == "":
        raise FileOpError(path, "replace", "old_str must not be empty", "invalid_target", None, "ValueError")
    n = text.count(b["old_str"])
    if n:
        write_bytes(srv, path, text.replace(b["old_str"], b["new_str"]).encode(), mkparents=False)
    return envelope({"file": path, "replaced_count": n})


@fop("search")
def h_file_search(srv, req, body):
    b = validate("FileSearchRequest", body)
    path = _abs(b["file"], "search")
    try:
        rx = re.compile(b["regex"])
    except re.error as e:
        return failure(f"Invalid regular expression: {e}")
    text = read_all(srv, path).decode("utf-8")
    matches, nums = [], []
    for i, line in enumerate(text.splitlines()):
        if rx.search(line):
            matches.append(line)
            nums.append(i)            # counted from 0
    return envelope({"file": path, "matches": matches, "line_numbers": nums})


def walk(srv, vroot, maxdepth=None):
    """Yield (virtual path, relative path, is_dir, lstat, depth) under vroot
    (depth 1 = its entries), never descending through symlinks."""
    vp, hp = srv.env.host(vroot)
    if vp == "/" and hp is None:
        for name, is_dir, is_link in srv.env.root_entries():
            yield ("/" + name, name, is_dir, None, 1)
            if not is_link and (maxdepth is None or maxdepth > 1):
                _, h = srv.env.host("/" + name)
                if h is not None and os.path.isdir(h):
                    yield from _walk_host_dir(srv, h, "/" + name, name, 2, maxdepth)
        return
    if not os.path.isdir(hp):
        raise oserr(errno.ENOTDIR, vroot)
    base = vroot.rstrip("/") or "/"
    yield from _walk_host_dir(srv, hp, base, "", 1, maxdepth)


def _walk_host_dir(srv, hdir, vdir, rel, depth, maxdepth):
    try:
        names = sorted(os.listdir(hdir))
    except OSError:
        return
    for n in names:
        h = os.path.join(hdir, n)
        try:
            st = os.lstat(h)
        except OSError:
            continue
        v = (vdir.rstrip("/") + "/" + n)
        r = (rel + "/" + n) if rel else n
        is_link = stat.S_ISLNK(st.st_mode)
        is_dir = stat.S_ISDIR(st.st_mode) or (is_link and srv.env.is_dir(v))
        yield (v, r, is_dir, st, depth)
        if stat.S_ISDIR(st.st_mode) and (maxdepth is None or depth < maxdepth):
            yield from _walk_host_dir(srv, h, v, r, depth + 1, maxdepth)


def target_stat(srv, v, st):
    """stat of what a listed entry points to (symlinks followed), or its lstat."""
    if st is not None and not stat.S_ISLNK(st.st_mode):
        return st
    try:
        _, hp = srv.env.host(v)
        return os.stat(hp) if hp else st
    except OSError:
        return st


def glob_regex(pattern):
    """Translate a glob with ** (any number of directories) into a regex."""
    i, out = 0, ""
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif c == "*":
            out += "[^/]*"
            i += 1
        elif c == "?":
            out += "[^/]"
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out += re.escape(c)
                i += 1
            else:
                body = pattern[i + 1:j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out += "[" + body.replace("\\", "\\\\") + "]"
                i = j + 1
        else:
            out += re.escape(c)
            i += 1
    return re.compile(out + r"\Z", re.S)


def name_or_path_match(pattern, rel, name):
    if "/" in pattern:
        return bool(glob_regex(pattern).match(rel))
    return fnmatch.fnmatchcase(name, pattern)


def _hidden(rel):
    return any(p.startswith(".") for p in rel.split("/"))


@fop("find", "path")
def h_file_find(srv, req, body):
    b = validate("FileFindRequest", body)
    path = _abs(b["path"], "find")
    files = []
    for v, rel, is_dir, st, depth in walk(srv, path):
        if is_dir:
            continue
        if name_or_path_match(b["glob"], rel, rel.rsplit("/", 1)[-1]):
            files.append(v)
            if len(files) >= 10000:
                break
    return envelope({"path": path, "files": files})


@fop("glob", "path")
def h_file_glob(srv, req, body):
    b = validate("FileGlobRequest", body)
    path = _abs(b["path"], "glob")
    rx = glob_regex(b["pattern"])
    excl = [glob_regex(x) for x in (b["exclude"] or [])]
    out = []
    truncated = False
    total = 0
    for v, rel, is_dir, st, depth in walk(srv, path):
        if not b["include_hidden"] and _hidden(rel):
            continue
        if b["files_only"] and is_dir:
            continue
        if not rx.match(rel):
            continue
        if any(x.match(rel) or x.match(rel.rsplit("/", 1)[-1]) for x in excl):
            continue
        total += 1
        e = {"path": v, "name": rel.rsplit("/", 1)[-1], "is_directory": is_dir, "size": None, "modified_time": None}
        if b["include_metadata"]:
            t = target_stat(srv, v, st)
            if t is not None:
                e["size"] = None if is_dir else t.st_size
                e["modified_time"] = iso_of(t.st_mtime)
        out.append(e)
    key = {"name": lambda e: e["name"], "size": lambda e: e["size"] or 0,
           "modified": lambda e: e["modified_time"] or ""}.get(b["sort_by"], lambda e: e["path"])
    out.sort(key=key, reverse=bool(b["sort_desc"]))
    if len(out) > b["max_results"]:
        out = out[:b["max_results"]]
        truncated = True
    return envelope({"path": path, "pattern": b["pattern"], "files": out, "total_count": total,
                     "truncated": truncated})


RG_TYPES = {"py": ["*.py", "*.pyi"], "js": ["*.js", "*.mjs", "*.cjs", "*.jsx"], "ts": ["*.ts", "*.tsx"],
            "rust": ["*.rs"], "go": ["*.go"], "c": ["*.c", "*.h"], "cpp": ["*.cpp", "*.cc", "*.hpp", "*.hh", "*.h"],
            "java": ["*.java"], "md": ["*.md", "*.markdown"], "markdown": ["*.md", "*.markdown"],
            "json": ["*.json"], "yaml": ["*.yaml", "*.yml"], "sh": ["*.sh", "*.bash"], "txt": ["*.txt"],
            "html": ["*.html", "*.htm"], "css": ["*.css"], "toml": ["*.toml"]}


def parse_size(s):
    if s is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", s, re.I)
    if not m:
        return -1
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


@fop("grep", "path")
def h_file_grep(srv, req, body):
    b = validate("FileGrepRequest", body)
    path = _abs(b["path"], "grep")
    pat = re.escape(b["pattern"]) if b["fixed_strings"] else b["pattern"]
    flags = (re.I if b["case_insensitive"] else 0) | ((re.S | re.M) if b["multiline"] else 0)
    try:
        rx = re.compile(pat, flags)
    except re.error as e:
        return failure(f"Invalid regular expression: {e}")
    limit = parse_size(b["max_file_size"])
    if limit == -1:
        return failure(f"Invalid max_file_size: {b['max_file_size']}")
    includes = list(b["include"] or [])
    if b["type"]:
        if b["type"] not in RG_TYPES:
            return failure(f"Unknown file type: {b['type']}")
        includes += RG_TYPES[b["type"]]
    excludes = b["exclude"] or []
    vp, hp = srv.env.host(path)
    if hp is not None and os.path.isfile(hp):
        candidates = [(path, os.path.basename(path), False, os.lstat(hp), 0)]
    else:
        candidates = walk(srv, path, None if b["recursive"] else 1)
    matches, seen, files_searched, files_matched = [], 0, 0, 0
    skip, maxr = b["offset"] or 0, b["max_results"] or 500
    truncated = False
    for v, rel, is_dir, st, depth in candidates:
        if is_dir or st is None or not stat.S_ISREG(st.st_mode):
            continue
        parts = rel.split("/")
        if any(fnmatch.fnmatchcase(p, x) for x in excludes for p in parts) or \
                any(glob_regex(x).match(rel) for x in excludes if "/" in x):
            continue
        name = parts[-1]
        if includes and not any(fnmatch.fnmatchcase(name, x) or ("/" in x and glob_regex(x).match(rel))
                                for x in includes):
            continue
        if limit is not None and st.st_size > limit:
            continue
        try:
            data = read_all(srv, v)
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue
        files_searched += 1
        text = data.decode("utf-8", "replace")
        lines = text.split("\n")
        if text.endswith("\n"):
            lines = lines[:-1]
        hit = False
        if b["multiline"]:
            starts = [0]
            for ln in lines:
                starts.append(starts[-1] + len(ln) + 1)
            line_hits = sorted({bisect.bisect_right(starts, m.start()) - 1 for m in rx.finditer(text)})
        else:
            line_hits = [i for i, ln in enumerate(lines) if rx.search(ln)]
        for i in line_hits:
            hit = True
            seen += 1
            if seen <= skip:
                continue
            if len(matches) >= maxr:
                truncated = True
                break
            m = {"file": v, "line_number": i + 1, "line_content": lines[i]}
            if b["context_before"]:
                m["context_before"] = lines[max(0, i - b["context_before"]):i]
            if b["context_after"]:
                m["context_after"] = lines[i + 1:i + 1 + b["context_after"]]
            matches.append(m)
        if hit:
            files_matched += 1
        if truncated:
            break
    return envelope({"path": path, "pattern": b["pattern"], "matches": matches, "match_count": len(matches),
                     "files_searched": files_searched, "files_matched": files_matched, "truncated": truncated})


def perm_string(mode):
    return stat.filemode(mode)[1:]


@fop("list", "path")
def h_file_list(srv, req, body):
    b = validate("FileListRequest", body)
    path = _abs(b["path"], "list")
    vp, hp = srv.env.host(path)
    if hp is not None and not os.path.isdir(hp):
        if os.path.exists(hp):
            raise oserr(errno.ENOTDIR, path)
        raise oserr(errno.ENOENT, path)
    exts = [e if e.startswith(".") else "." + e for e in (b["file_types"] or [])]
    files = []
    maxdepth = (b["max_depth"] if b["recursive"] else 1)
    for v, rel, is_dir, st, depth in walk(srv, path, maxdepth):
        if not b["show_hidden"] and _hidden(rel):
            continue
        name = rel.rsplit("/", 1)[-1]
        ext = os.path.splitext(name)[1] if not is_dir else ""
        if exts and not is_dir and ext not in exts:
            continue
        t = target_stat(srv, v, st)
        e = {"name": name, "path": v, "is_directory": is_dir,
             "size": (t.st_size if t is not None and not is_dir else None) if b["include_size"] else None,
             "modified_time": iso_of(t.st_mtime) if t is not None else None,
             "permissions": perm_string(t.st_mode) if (b["include_permissions"] and t is not None) else None,
             "extension": ext or None}
        files.append(e)
    keyf = {"size": lambda e: (e["size"] or 0, e["path"]),
            "modified": lambda e: (e["modified_time"] or "", e["path"]),
            "type": lambda e: (not e["is_directory"], e["extension"] or "", e["name"])}.get(
        b["sort_by"], lambda e: (e["name"], e["path"]))
    files.sort(key=keyf, reverse=bool(b["sort_desc"]))
    nd = sum(1 for e in files if e["is_directory"])
    return envelope({"path": path, "files": files, "total_count": len(files), "directory_count": nd,
                     "file_count": len(files) - nd})


def snippet(text, around_line, n=4):
    lines = text.split("\n")
    start = max(0, around_line - n)
    end = min(len(lines), around_line + n + 1)
    return "\n".join(f"{i + 1:6}\t{lines[i]}" for i in range(start, end))


@fop("str_replace_editor", "path")
def h_file_editor(srv, req, body):
    b = validate("StrReplaceEditorRequest", body)
    path = _abs(b["path"], "str_replace_editor")
    cmd = b["command"]

    def tool_error(msg, prev):
        return failure(msg, {"output": "", "error": msg, "path": path, "prev_exist": prev,
                             "old_content": None, "new_content": None, "metadata": None})

    def result(out, prev, old=None, new=None):
        return envelope({"output": out, "error": None, "path": path, "prev_exist": prev,
                         "old_content": old, "new_content": new, "metadata": None})

    exists = True
    try:
        _, hp = srv.env.host(path)
        exists = hp is None or os.path.exists(hp)
    except OSError:
        exists = False
    if cmd == "create":
        if b["file_text"] is None:
            return tool_error("Parameter `file_text` is required for command: create", exists)
        if exists:
            return tool_error(f"File already exists at: {path}. Cannot overwrite files using command `create`.", True)
        write_bytes(srv, path, b["file_text"].encode())
        srv.editor_history.setdefault(path, []).append(None)
        return result(f"File created successfully at: {path}", False, None, b["file_text"])
    if not exists:
        return tool_error(f"The path {path} does not exist. Please provide a valid path.", False)
    if srv.env.is_dir(path):
        if cmd != "view":
            return tool_error(f"The path {path} is a directory and only the `view` command can be used on directories.", True)
        items = [v for v, rel, is_dir, st, depth in walk(srv, path, 2) if not _hidden(rel)]
        out = (f"Here's the files and directories up to 2 levels deep in {path}, excluding hidden items:\n"
               + "\n".join([path] + items) + "\n")
        return result(out, True)
    text = read_all(srv, path).decode("utf-8")
    if cmd == "view":
        lines = text.split("\n")
        start, end = 1, len(lines)
        vr = b["view_range"] or []
        if vr:
            if len(vr) != 2:
                return tool_error("Invalid `view_range`. It should be a list of two integers.", True)
            start, end = vr[0], (len(lines) if vr[1] == -1 else vr[1])
            if start < 1 or start > len(lines) or end < start or end > len(lines):
                return tool_error(f"Invalid `view_range`: {vr}. Its lines are out of range [1, {len(lines)}].", True)
        out = f"Here's the result of running `cat -n` on {path}:\n" + "\n".join(
            f"{i:6}\t{lines[i - 1]}" for i in range(start, end + 1)) + "\n"
        return result(out, True)
    if cmd == "str_replace":
        old = b["old_str"]
        if old is None:
            return tool_error("Parameter `old_str` is required for command: str_replace", True)
        new = b["new_str"] or ""
        n = text.count(old)
        if n == 0:
            return tool_error(f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}.", True)
        mode = b["replace_mode"]
        if n > 1 and mode is None:
            nums = [text[:m.start()].count("\n") + 1 for m in re.finditer(re.escape(old), text)]
            return tool_error(f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines {nums}. "
                              "Please ensure it is unique.", True)
        if mode == "LAST":
            i = text.rfind(old)
            newtext = text[:i] + new + text[i + len(old):]
        elif mode == "ALL":
            i = text.find(old)
            newtext = text.replace(old, new)
        else:
            i = text.find(old)
            newtext = text[:i] + new + text[i + len(old):]
        write_bytes(srv, path, newtext.encode(), mkparents=False)
        srv.editor_history.setdefault(path, []).append(text)
        line = text[:i].count("\n")
        return result(f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n"
                      + snippet(newtext, line) + "\nReview the changes and make sure they are as expected.",
                      True, text, newtext)
    if cmd == "insert":
        if b["insert_line"] is None or b["new_str"] is None:
            return tool_error("Parameters `insert_line` and `new_str` are required for command: insert", True)
        lines = text.split("\n")
        k = b["insert_line"]
        if k < 0 or k > len(lines):
            return tool_error(f"Invalid `insert_line` parameter: {k}. It should be within the range of lines of the "
                              f"file: [0, {len(lines)}]", True)
        newtext = "\n".join(lines[:k] + b["new_str"].split("\n") + lines[k:])
        write_bytes(srv, path, newtext.encode(), mkparents=False)
        srv.editor_history.setdefault(path, []).append(text)
        return result(f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of the "
                      f"edited file:\n" + snippet(newtext, k), True, text, newtext)
    if cmd == "undo_edit":
        hist = srv.editor_history.get(path)
        if not hist:
            return tool_error(f"No edit history found for {path}.", True)
        prev = hist.pop()
        if prev is None:
            return tool_error(f"No edit history found for {path}.", True)
        write_bytes(srv, path, prev.encode(), mkparents=False)
        return result(f"Last edit to {path} undone successfully. Here's the result of running `cat -n` on {path}:\n"
                      + snippet(prev, 0, 10**9), True, text, prev)
    raise AssertionError(cmd)


# ---- upload (multipart/form-data, streamed to a spool file)


class MultipartError(Exception):
    pass


def parse_multipart(reader, boundary, spool_dir):
    """Parse a multipart body from reader.read(n).  Returns a list of parts:
    {"name", "filename", "headers", "value" (bytes, fields) | "spool" (path), "size"}."""
    delim = b"--" + boundary
    buf = bytearray()
    eof = False

    def fill(n=65536):
        nonlocal eof
        if eof:
            return False
        chunk = reader.read(n)
        if not chunk:
            eof = True
            return False
        buf.extend(chunk)
        return True

    # preamble up to the first delimiter
    while True:
        i = buf.find(delim)
        if i >= 0:
            del buf[:i + len(delim)]
            break
        if len(buf) > len(delim):
            del buf[:len(buf) - len(delim)]
        if not fill():
            raise MultipartError("no multipart boundary found")
    parts = []
    while True:
        while len(buf) < 2 and fill():
            pass
        if buf[:2] == b"--":
            return parts
        if buf[:2] != b"\r\n":
            raise MultipartError("malformed multipart delimiter")
        del buf[:2]
        while True:
            j = buf.find(b"\r\n\r\n")
            if j >= 0:
                break
            if len(buf) > 65536 or not fill():
                raise MultipartError("malformed part headers")
        raw = bytes(buf[:j]).decode("latin-1")
        del buf[:j + 4]
        headers = {}
        for line in raw.split("\r\n"):
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        disp = headers.get("content-disposition", "")
        name = _disp_param(disp, "name")
        filename = _disp_param(disp, "filename")
        part = {"name": name, "filename": filename, "headers": headers, "size": 0}
        sink = None
        if filename is not None:
            fd, sp = tempfile.mkstemp(prefix=".upload-", dir=spool_dir)
            sink = os.fdopen(fd, "wb")
            part["spool"] = sp
        else:
            part["value"] = bytearray()
        end = b"\r\n" + delim
        while True:
            k = buf.find(end)
            if k >= 0:
                data = bytes(buf[:k])
                del buf[:k + len(end)]
                done = True
            else:
                keep = len(end)
                data = bytes(buf[:max(0, len(buf) - keep)])
                del buf[:len(data)]
                done = False
            if data:
                part["size"] += len(data)
                if sink:
                    sink.write(data)
                else:
                    part["value"].extend(data)
                    if len(part["value"]) > (1 << 20):
                        raise MultipartError("form field too large")
            if done:
                break
            if not fill():
                if sink:
                    sink.close()
                parts.append(part)
                raise MultipartError("multipart body ended before its closing boundary")
        if sink:
            sink.close()
        parts.append(part)


def _disp_param(disp, key):
    m = re.search(r'(?:^|;)\s*' + key + r'\*?=("(?:[^"\\]|\\.)*"|[^;]*)', disp, re.I)
    if not m:
        return None
    v = m.group(1).strip()
    if v.startswith('"'):
        v = re.sub(r'\\(.)', r'\1', v[1:-1])
    if v.lower().startswith("utf-8''"):
        v = urllib.parse.unquote(v[7:])
    return v


def h_file_upload(srv, req):
    ctype = req.headers.get("Content-Type", "")
    m = re.search(r'boundary=("?)([^";]+)\1', ctype)
    if not ctype.lower().startswith("multipart/form-data") or not m:
        req.drain()
        raise ApiError(422, {"detail": [{"type": "missing", "loc": ["body", "file"], "msg": "Field required",
                                         "input": None}]})
    spool = srv.env.state_host
    try:
        parts = parse_multipart(req.body_reader(), m.group(2).encode("latin-1"), spool)
    except MultipartError as e:
        raise ApiError(400, {"detail": f"There was an error parsing the body: {e}"})
    try:
        fields = {}
        for p in parts:
            fields.setdefault(p["name"], p)
        fpart, ppart = fields.get("file"), fields.get("path")
        errs = []
        if fpart is None:
            errs.append({"type": "missing", "loc": ["body", "file"], "msg": "Field required", "input": None})
        elif "spool" not in fpart:
            v = fpart["value"].decode("utf-8", "replace")
            errs.append({"type": "value_error", "loc": ["body", "file"],
                         "msg": "Value error, Expected UploadFile, received: <class 'str'>", "input": v,
                         "ctx": {"error": {}}})
        if ppart is not None and "spool" in ppart:
            errs.append({"type": "string_type", "loc": ["body", "path"], "msg": "Input should be a valid string",
                         "input": ppart["filename"]})
        if errs:
            raise ApiError(422, {"detail": errs})
        fname = os.path.basename(fpart["filename"] or "upload") or "upload"
        dest = ppart["value"].decode("utf-8") if ppart is not None else None
        if not dest:
            dest = srv.env.home.rstrip("/") + "/" + fname
        try:
            dest = _abs(dest, "upload")
            if srv.env.is_dir(dest):
                dest = dest.rstrip("/") + "/" + fname
            parent = os.path.dirname(dest) or "/"
            if not srv.env.is_dir(parent):
                srv.env.makedirs(parent)
            _, hparent = srv.env.host(parent, write=True)
            _, hdest = srv.env.host(dest, write=True)
            if os.path.isdir(hdest):
                raise oserr(errno.EISDIR, dest)
            fd, part_path = tempfile.mkstemp(prefix=".aio-upload-", suffix=".part", dir=hparent)
            try:
                with os.fdopen(fd, "wb") as out, open(fpart["spool"], "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
                os.chmod(part_path, 0o666 & ~current_umask())
                os.replace(part_path, hdest)
            except BaseException:
                try:
                    os.unlink(part_path)
                except OSError:
                    pass
                raise
        except FileOpError as e:
            return failure(e.data["message"], e.data)
        except OSError as e:
            fe = os_error(dest, "upload", e)
            return failure(fe.data["message"], fe.data)
        return envelope({"file_path": dest, "file_size": fpart["size"], "success": True},
                        message="File uploaded successfully")
    finally:
        for p in parts:
            if "spool" in p:
                try:
                    os.unlink(p["spool"])
                except OSError:
                    pass


_UMASK = None


def current_umask():
    global _UMASK
    if _UMASK is None:
        u = os.umask(0o022)
        os.umask(u)
        _UMASK = u
    return _UMASK


def h_file_download(srv, req):
    path = query_validation("path", req.query1("path"))
    policy = query_validation("change_policy", req.query1("change_policy"), ["ignore", "abort"], required=False) \
        or "ignore"
    if not path.startswith("/"):
        raise ApiError(400, {"detail": f"Path must be absolute: {path}"})
    try:
        fd, st = open_read(srv, path)
    except OSError as e:
        if e.errno == errno.ENOENT or e.errno == errno.ENOTDIR:
            raise ApiError(404, {"detail": f"File not found: {path}"})
        if e.errno in (errno.EACCES, errno.EPERM):
            raise ApiError(403, {"detail": f"Permission denied: {path}"})
        if e.errno == errno.EISDIR:
            raise ApiError(400, {"detail": f"Path is a directory: {path}"})
        raise ApiError(400, {"detail": f"Cannot download {path}: {os.strerror(e.errno or errno.EIO)}"})
    return ("download", fd, st, path, policy)


# ===========================================================================
# HTTP plumbing


class Request:
    def __init__(self, handler, method, path, query):
        self.h = handler
        self.method = method
        self.path = path
        self.query = query
        self.headers = handler.headers
        self._body = None
        self._consumed = False
        self.logged_body = None

    def query1(self, k):
        v = self.query.get(k)
        return v[-1] if v else None

    def body_reader(self):
        self._consumed = True
        return BodyReader(self.h)

    def raw(self):
        if self._body is None:
            r = self.body_reader()
            chunks, total = [], 0
            while True:
                c = r.read(1 << 20)
                if not c:
                    break
                total += len(c)
                if total > MAX_JSON_BODY:
                    raise ApiError(413, {"detail": "Request body too large"})
                chunks.append(c)
            self._body = b"".join(chunks)
        return self._body

    def drain(self):
        if not self._consumed:
            try:
                self.raw()
            except ApiError:
                self.h.close_connection = True

    def json(self):
        """The body as FastAPI would hand it to a pydantic model."""
        raw = self.raw()
        if not raw:
            raise ApiError(422, {"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required",
                                             "input": None}]})
        ctype = self.headers.get("Content-Type")
        is_json = True
        if ctype:
            mt = ctype.split(";")[0].strip().lower()
            is_json = mt.startswith("application/") and (mt == "application/json" or mt.endswith("+json"))
        if not is_json:
            return raw
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            pos = getattr(e, "pos", 0)
            raise ApiError(422, {"detail": [{"type": "json_invalid", "loc": ["body", pos], "msg": "JSON decode error",
                                             "input": {}, "ctx": {"error": getattr(e, "msg", str(e))}}]})
        self.logged_body = doc
        return doc


class BodyReader:
    """Content-Length or chunked request body as a file-like read(n)."""

    def __init__(self, h):
        self.rf = h.rfile
        te = (h.headers.get("Transfer-Encoding") or "").lower()
        self.chunked = "chunked" in te
        self.left = 0 if self.chunked else int(h.headers.get("Content-Length") or 0)
        self.chunk_left = 0
        self.done = False

    def read(self, n=65536):
        if self.done:
            return b""
        if not self.chunked:
            if self.left <= 0:
                self.done = True
                return b""
            b = self.rf.read(min(n, self.left))
            if not b:
                self.done = True
                return b""
            self.left -= len(b)
            return b
        if self.chunk_left == 0:
            line = self.rf.readline(65537)
            if not line:
                self.done = True
                return b""
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:   # trailers
                    t = self.rf.readline(65537)
                    if t in (b"\r\n", b"\n", b""):
                        break
                self.done = True
                return b""
            self.chunk_left = size
        b = self.rf.read(min(n, self.chunk_left))
        self.chunk_left -= len(b)
        if self.chunk_left == 0:
            self.rf.readline(3)
        if not b:
            self.done = True
        return b


ROUTES = {
    ("GET", "/v1/sandbox"): h_sandbox,
    ("GET", "/v1/sandbox/packages/python"): h_packages,
    ("GET", "/v1/sandbox/packages/nodejs"): h_packages,
    ("POST", "/v1/bash/exec"): h_bash_exec,
    ("POST", "/v1/bash/output"): h_bash_output,
    ("POST", "/v1/bash/write"): h_bash_write,
    ("POST", "/v1/bash/kill"): h_bash_kill,
    ("GET", "/v1/bash/sessions"): h_bash_sessions,
    ("POST", "/v1/bash/sessions/create"): h_bash_create,
    ("POST", "/v1/shell/exec"): h_shell_exec,
    ("POST", "/v1/shell/view"): h_shell_view,
    ("POST", "/v1/shell/wait"): h_shell_wait,
    ("POST", "/v1/shell/write"): h_shell_write,
    ("POST", "/v1/shell/kill"): h_shell_kill,
    ("POST", "/v1/shell/sessions/create"): h_shell_create,
    ("POST", "/v1/shell/sessions/update"): h_shell_update,
    ("GET", "/v1/shell/sessions"): h_shell_sessions,
    ("GET", "/v1/shell/sessions/stats"): h_shell_stats,
    ("DELETE", "/v1/shell/sessions"): h_shell_delete_all,
    ("POST", "/v1/file/read"): h_file_read,
    ("POST", "/v1/file/write"): h_file_write,
    ("POST", "/v1/file/replace"): h_file_replace,
    ("POST", "/v1/file/search"): h_file_search,
    ("POST", "/v1/file/find"): h_file_find,
    ("POST", "/v1/file/grep"): h_file_grep,
    ("POST", "/v1/file/glob"): h_file_glob,
    ("POST", "/v1/file/list"): h_file_list,
    ("POST", "/v1/file/str_replace_editor"): h_file_editor,
    ("POST", "/v1/file/upload"): h_file_upload,
    ("GET", "/v1/file/download"): h_file_download,
    ("HEAD", "/v1/file/download"): h_file_download,
}
PARAM_ROUTES = [
    ("POST", re.compile(r"^/v1/bash/sessions/([^/]+)/close$"), h_bash_close),
    ("DELETE", re.compile(r"^/v1/shell/sessions/([^/]+)$"), h_shell_delete),
]
HELP = __doc__[__doc__.index("Test control channel"):__doc__.index("Usage")]


def strip_nulls(o):
    if isinstance(o, dict):
        return {k: strip_nulls(v) for k, v in o.items() if v is not None}
    if isinstance(o, list):
        return [strip_nulls(v) for v in o]
    return o


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    srv = None  # AioFake, set by main()
    resp_bytes = 0  # body bytes sent for the request being served (the log's resp_bytes)

    def version_string(self):
        return self.server_version

    def setup(self):
        super().setup()
        # uvicorn (the real server) sets TCP_NODELAY on every connection: a
        # response written in two parts (headers, then body) must not wait
        # for the client's delayed ACK on a kept-alive connection
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        if self.srv.args.verbose:
            sys.stderr.write("aio_server: %s - %s\n" % (self.address_string(), fmt % args))

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_HEAD(self):
        self.dispatch("HEAD")

    # ---- sending
    def send_json(self, status, obj, headers=None, close=False):
        if self.srv.cfg["omit_null"] and isinstance(obj, dict) and "success" in obj:
            obj = strip_nulls(obj)
        body = json.dumps(obj, ensure_ascii=False).encode()
        ctype = "application/json"
        if headers and headers.get("Content-Type"):
            ctype = headers.pop("Content-Type")
        self.send_raw(status, body, ctype, headers, close)

    def send_raw(self, status, body, ctype, headers=None, close=False):
        if getattr(self, "log_entry", None) is not None:
            self.srv.log.answered(self.log_entry, status)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
            self.resp_bytes += len(body)
        self.status_sent = status

    def drop(self, reset=False):
        self.close_connection = True
        try:
            if reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.status_sent = 0

    # ---- one request
    def dispatch(self, method):
        self.status_sent = None
        t0 = time.monotonic()
        u = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(u.path)
        query = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        req = Request(self, method, path, query)
        srv = self.srv
        if path.startswith("/_fake/") or path == "/_fake":
            try:
                self.control(req)
            except ApiError as e:
                req.drain()
                self.send_json(e.status, e.body)
            except (ValueError, TypeError, re.error) as e:
                req.drain()
                self.send_json(400, {"error": str(e)})
            return
        hdrs = {k: v for k, v in self.headers.items()
                if k.lower() in ("content-type", "accept", "content-length", "transfer-encoding",
                                 "x-aio-api-key", "authorization", "user-agent", "expect")}
        entry = self.log_entry = srv.log.begin(method, path, {k: v[-1] for k, v in query.items()}, hdrs)
        self.resp_bytes = 0
        self.drip = None
        self.cut = None
        try:
            fault = srv.faults.match(method, path)
            if fault:
                entry["fault"] = fault["kind"]
                if self.apply_fault(fault, req):
                    return
            if srv.args.api_key and not self.authorized(req):
                req.drain()
                raise ApiError(401, {"detail": "Invalid or missing API key"})
            if not srv.ready():
                req.drain()
                raise ApiError(503, {"detail": "Service Unavailable: sandbox is starting"})
            fn, args = self.route(method, path)
            try:
                out = fn(srv, req, *args)
            finally:
                entry["body"] = self.loggable(req)
            req.drain()
            if isinstance(out, tuple) and out and out[0] == "download":
                self.send_download(req, *out[1:])
            elif method == "POST" and path == "/v1/shell/exec" and \
                    "text/event-stream" in (self.headers.get("Accept") or ""):
                ev = ("data: " + json.dumps(out, ensure_ascii=False) + "\n\n").encode()
                self.send_raw(200, ev, "text/event-stream", {"Cache-Control": "no-cache"})
            else:
                self.send_json(200, out)
        except ApiError as e:
            req.drain()
            self.send_json(e.status, e.body, dict(e.headers))
        except DropConnection as d:
            self.drop(d.reset)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            self.status_sent = self.status_sent or 0
        except Exception:
            traceback.print_exc()
            req.drain()
            try:
                self.send_raw(500, b"Internal Server Error", "text/plain; charset=utf-8")
            except OSError:
                self.close_connection = True
        finally:
            srv.log.end(entry, self.status_sent, t0, self.resp_bytes)

    def loggable(self, req):
        if req.logged_body is not None:
            s = json.dumps(req.logged_body)
            return req.logged_body if len(s) <= (1 << 20) else {"_truncated": len(s)}
        if req.path == "/v1/file/upload":
            return {"_multipart": self.headers.get("Content-Length")}
        return None

    def authorized(self, req):
        key = self.srv.args.api_key
        if self.headers.get("X-AIO-API-Key") == key:
            return True
        if (self.headers.get("Authorization") or "") == f"Bearer {key}":
            return True
        return req.query1("api_key") == key

    def route(self, method, path):
        fn = ROUTES.get((method, path))
        if fn is not None:
            return fn, ()
        for m, rx, f in PARAM_ROUTES:
            mm = rx.match(path)
            if mm and m == method:
                return f, (urllib.parse.unquote(mm.group(1)),)
        known = {m for (m, p) in ROUTES if p == path} | {m for m, rx, f in PARAM_ROUTES if rx.match(path)}
        if known:
            raise ApiError(405, {"detail": "Method Not Allowed"}, {"Allow": ", ".join(sorted(known))})
        raise ApiError(404, {"detail": "Not Found"})

    def apply_fault(self, f, req):
        """Returns True when the fault answered (or dropped) the request."""
        kind = f["kind"]
        if kind == "delay":
            self.srv.stopping.wait(f["seconds"])
            return False
        if kind == "drip":  # applied by send_download
            self.drip = f
            return False
        if kind == "truncate" and req.path == "/v1/file/download":
            self.drip = None
            self.cut = f  # applied by send_download: the file's own bytes, cut
            return False
        if kind in ("drop", "reset"):
            self.drop(reset=(kind == "reset"))
            return True
        req.drain()
        if kind == "error":
            st = f["status"]
            body = f["body"]
            if body is None:
                if st == 422:
                    body = {"detail": [{"type": "value_error", "loc": ["body"], "msg": f["message"] or
                                        "Value error, injected by the test", "input": None}]}
                elif st in (404, 405, 503, 401, 403):
                    body = {"detail": f["message"] or http.server.BaseHTTPRequestHandler.responses.get(
                        st, ("Error",))[0]}
                else:
                    body = envelope(None, message=f["message"] or "Internal Server Error", success=False)
            ra = f["retry_after"]
            self.send_json(st, body, {"Retry-After": str(ra)} if ra is not None else None)
        elif kind == "tool_failure":
            self.send_json(200, f["body"] or failure(f["message"] or "Injected tool failure"))
        elif kind == "malformed_json":
            self.send_raw(200, b'{"success": true, "message": "Operation successful", "data": {"', "application/json")
        elif kind == "truncate":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "4096")
            self.end_headers()
            self.wfile.write(b'{"success": true, "data": ')
            self.wfile.flush()
            self.drop()
            self.status_sent = 200
        return True

    def send_download(self, req, fd, st, path, policy):
        f = os.fdopen(fd, "rb")
        try:
            if policy == "abort":
                try:
                    _, hp = self.srv.env.host(path)
                    now = os.stat(hp)
                except OSError:
                    now = None
                if now is None or (now.st_ino, now.st_size, now.st_mtime_ns) != (st.st_ino, st.st_size, st.st_mtime_ns):
                    raise ApiError(409, {"detail": "File changed before download started"})
            size = st.st_size
            start, end = 0, size - 1
            status = 200
            rng = self.headers.get("Range")
            headers = {"Accept-Ranges": "bytes",
                       "Content-Disposition": self._disposition(os.path.basename(path)),
                       "Last-Modified": self.date_time_string(int(st.st_mtime)),
                       "ETag": '"' + hashlib.md5(f"{st.st_mtime}-{size}".encode()).hexdigest() + '"'}
            if rng:
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
                if m and (m.group(1) or m.group(2)):
                    if m.group(1):
                        start = int(m.group(1))
                        end = int(m.group(2)) if m.group(2) else size - 1
                    else:
                        start = max(0, size - int(m.group(2)))
                    end = min(end, size - 1)
                    if start >= size or start > end:
                        raise ApiError(416, {"detail": "Range Not Satisfiable"},
                                       {"Content-Range": f"bytes */{size}"})
                    status = 206
                    headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            length = max(0, end - start + 1)
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(length))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.status_sent = status
            if self.command == "HEAD":
                return
            f.seek(start)
            left = length
            if self.cut is not None:  # half the body, then the connection closes
                self.wfile.write(f.read(length // 2))
                self.wfile.flush()
                self.resp_bytes += length // 2
                self.drop()
                return
            while left > 0:
                if self.drip is not None:  # one byte, then a pause: never silent for long
                    if left < length and self.srv.stopping.wait(self.drip["seconds"]):
                        self.drop()
                        return
                    chunk = f.read(1)
                    if not chunk:
                        self.drop()
                        return
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    self.resp_bytes += 1
                    left -= 1
                    continue
                chunk = f.read(min(1 << 20, left))
                if not chunk:
                    self.drop()      # the file shrank: cut the transfer
                    return
                if policy == "abort":
                    cur = os.fstat(f.fileno())
                    if (cur.st_size, cur.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
                        self.drop()
                        return
                self.wfile.write(chunk)
                self.resp_bytes += len(chunk)
                left -= len(chunk)
        finally:
            f.close()

    @staticmethod
    def _disposition(name):
        try:
            name.encode("latin-1")
            if '"' not in name:
                return f'attachment; filename="{name}"'
        except UnicodeEncodeError:
            pass
        return "attachment; filename*=utf-8''" + urllib.parse.quote(name)

    # ---- the test control channel
    def control(self, req):
        srv = self.srv
        p, m = req.path.rstrip("/"), req.method

        def body():
            raw = req.raw()
            if not raw:
                return {}
            try:
                d = json.loads(raw)
            except ValueError as e:
                raise ApiError(400, {"error": f"invalid JSON: {e}"})
            if not isinstance(d, dict):
                raise ApiError(400, {"error": "body must be a JSON object"})
            return d

        if p == "/_fake/health" and m == "GET":
            return self.send_json(200, {"ok": True, "pid": os.getpid(), "port": srv.port, "mode": srv.env.mode,
                                        "root": srv.env.root, "ready": srv.ready(), "config": srv.cfg})
        if p == "/_fake/help" and m == "GET":
            return self.send_raw(200, HELP.encode(), "text/plain; charset=utf-8")
        if p == "/_fake/requests" and m == "GET":
            since = int(req.query1("since") or 0)
            return self.send_json(200, {"requests": srv.log.query(req.query1("path"), since)})
        if p == "/_fake/counters" and m == "GET":
            return self.send_json(200, srv.log.counters())
        if p == "/_fake/faults":
            if m == "POST":
                return self.send_json(200, srv.faults.add(body()))
            if m == "GET":
                return self.send_json(200, {"faults": srv.faults.list()})
            if m == "DELETE":
                return self.send_json(200, {"removed": srv.faults.remove()})
        mm = re.fullmatch(r"/_fake/faults/(\d+)", p)
        if mm and m == "DELETE":
            n = srv.faults.remove(int(mm.group(1)))
            return self.send_json(200 if n else 404, {"removed": n})
        if p == "/_fake/ready" and m == "POST":
            b = body()
            if "delay" in b:
                srv.ready_at = time.monotonic() + float(b["delay"])
            elif "ready" in b:
                srv.ready_at = time.monotonic() if b["ready"] else None
            else:
                raise ApiError(400, {"error": "give ready: bool or delay: seconds"})
            return self.send_json(200, {"ready": srv.ready()})
        if p == "/_fake/config" and m == "POST":
            b = body()
            for k in ("omit_null", "bash_api"):
                if k in b:
                    srv.cfg[k] = bool(b[k])
            if "version" in b:
                srv.cfg["version"] = str(b["version"])
            return self.send_json(200, srv.cfg)
        if p == "/_fake/reset" and m == "POST":
            b = body()
            srv.faults.remove()
            srv.log.reset()
            if b.get("sessions"):
                srv.reset_sessions()
            return self.send_json(200, {"ok": True})
        if p == "/_fake/processes" and m == "GET":
            with srv.lock:
                procs = [{"pid": x.pid, "kind": x.kind, "session_id": x.session_id, "command_id": x.id,
                          "command": x.command, "age_s": round(time.monotonic() - x.started, 3)}
                         for x in srv.procs.values()]
            return self.send_json(200, {"processes": procs})
        if p == "/_fake/shutdown" and m == "POST":
            self.send_json(200, {"ok": True}, close=True)
            threading.Thread(target=srv_shutdown, args=(srv,), daemon=True).start()
            return None
        raise ApiError(404, {"error": f"unknown control endpoint {m} {p}"})


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def srv_shutdown(srv):
    if srv.stopping.is_set():
        return
    srv.stopping.set()
    srv.kill_all()
    if srv.httpd is not None:
        srv.httpd.shutdown()


def write_port_file(path, port):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".port-", dir=d)
    with os.fdopen(fd, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)


def pid1_init():
    """As a container's pid 1: run the server as a child, reap every orphan,
    forward termination signals, exit with the server's status."""
    child = os.fork()
    if child == 0:
        return
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(s, lambda sig, frm: os.kill(child, sig))
    status = 1
    while True:
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == child:
            status = os.waitstatus_to_exitcode(st)
            status = 128 - status if status < 0 else status
            break
    os._exit(status)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="A fake AIO sandbox server (agent-infra/sandbox 1.9.x API) for tests.")
    ap.add_argument("--host", default=None, help="address to bind (127.0.0.1; 0.0.0.0 with --in-container)")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 = OS picks)")
    ap.add_argument("--port-file", help="write the bound port to this file once listening")
    ap.add_argument("--root", help="host mode: the sandbox's writable root (default: a temporary directory "
                                   "removed at exit)")
    ap.add_argument("--in-container", action="store_true", help="run commands directly (container entrypoint)")
    ap.add_argument("--ready-delay", type=float, default=0.0, help="answer 503 on /v1 until this many seconds passed")
    ap.add_argument("--never-ready", action="store_true", help="answer 503 on /v1 forever (until POST /_fake/ready)")
    ap.add_argument("--home", default=DEFAULT_HOME, help=f"home_dir reported and default cwd (default {DEFAULT_HOME})")
    ap.add_argument("--shell", default="/bin/sh", help="shell running every command (default /bin/sh)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra environment for commands")
    ap.add_argument("--api-key", default=os.environ.get("SANDBOX_API_KEY") or None,
                    help="require X-AIO-API-Key / Bearer / ?api_key= (default: $SANDBOX_API_KEY, else open)")
    ap.add_argument("--no-bash-api", action="store_true", help="behave like an image older than 1.9.3 "
                                                               "(/v1/bash/* answers 404)")
    ap.add_argument("--version-string", default=AIO_VERSION, help="version reported by GET /v1/sandbox")
    ap.add_argument("--verbose", action="store_true", help="log every request to stderr")
    a = ap.parse_args(argv)
    for kv in a.env:
        if "=" not in kv or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", kv.split("=", 1)[0]):
            ap.error(f"--env wants KEY=VALUE, not {kv!r}")
    if a.host is None:
        a.host = "0.0.0.0" if a.in_container else "127.0.0.1"
    return a


def main(argv=None):
    args = parse_args(argv)
    if args.in_container and os.getpid() == 1:
        pid1_init()
    extra = dict(kv.split("=", 1) for kv in args.env)
    made_root = None
    if args.in_container:
        env = ContainerEnv(args.home, args.shell, extra)
    else:
        root = args.root
        if root is None:
            root = made_root = tempfile.mkdtemp(prefix="aio-fake-root-")
        env = HostEnv(root, args.home, args.shell, extra)
    srv = AioFake(args, env)
    Handler.srv = srv
    fam = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    Server.address_family = fam
    httpd = Server((args.host, args.port), Handler)
    srv.httpd = httpd
    srv.port = httpd.server_address[1]
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda sig, frm: threading.Thread(target=srv_shutdown, args=(srv,), daemon=True).start())
    if args.port_file:
        write_port_file(args.port_file, srv.port)
    print(f"aio_server: listening on {args.host}:{srv.port} ({env.mode} mode, root {env.root})",
          file=sys.stderr, flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    finally:
        srv.stopping.set()
        srv.kill_all()
        httpd.server_close()
        if made_root:
            shutil.rmtree(made_root, ignore_errors=True)
    # Reader threads may still block on pipes that a command's leftovers hold
    # open; interpreter finalisation would then abort on their buffer locks.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
