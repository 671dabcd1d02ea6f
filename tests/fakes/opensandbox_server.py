#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""opensandbox_server.py -- a spec-faithful fake OpenSandbox server for tests.

One process, one listening port on 127.0.0.1, Python 3.11 standard library only.
It serves both OpenSandbox surfaces, written from the upstream OpenAPI files in
shared/reference/opensandbox/ (sandbox-lifecycle.yml, execd-api.yaml) and the
summary in shared/reference/remote-apis.md section A:

* the lifecycle API (remote-apis.md A.3-A.9), mounted at /v1/... and at / as the
  real FastAPI server does: POST/GET /sandboxes (metadata + state filters,
  page/pageSize), GET/DELETE /sandboxes/{id}, PATCH .../metadata,
  POST .../pause, .../resume, .../renew-expiration, GET .../endpoints/{port}
  (use_server_proxy), GET /health;
* execd (A.10), the daemon that runs "inside" every sandbox: GET /ping,
  POST /command (SSE), DELETE /command?id=, GET /command/status/{id},
  GET /command/{id}/logs, POST /files/upload (multipart, RFC 7578),
  GET /files/download (Range), GET /files/info, DELETE /files,
  GET /directories/list, POST/DELETE /directories, GET /files/search,
  POST /files/mv, POST /files/permissions, POST /files/replace, GET /metrics.

Sandboxes are real.  Each one is a bubblewrap "container" whose init runs the
create request's `entrypoint` (the image is ignored: the host's /usr is the
image).  Its root is a private host directory ROOT/<id>/rootfs bound at /, with
the host's /usr and /etc (and any /lib*, /bin, /sbin that are not symlinks into
/usr) bound read-only on top, a fresh /proc and a minimal /dev; every other
path -- /tmp, /root, /home, /mnt/user-data/..., /workspace, anything -- is a
plain writable directory of ROOT/<id>/rootfs.  Namespaces: --unshare-pid
--unshare-ipc --unshare-uts --unshare-net (loopback only) --die-with-parent.
Processes run as root with Docker's default capability set minus NET_RAW,
MKNOD and AUDIT_WRITE (OpenSandbox's sample drop list) and no_new_privs.
Commands join the sandbox's namespaces with nsenter(1), so background
processes survive their command and share /tmp, loopback and pids with later
ones, as in a container.  The execd files API works on the same tree from the
host side, resolving every path (symlinks included) inside the sandbox's view,
so a sandbox symlink never reaches a host file; /usr and /etc are read-only
(writes give 500 RUNTIME_ERROR), /proc and /dev contents are not served.

EXECD ROUTING.  All three shapes are always accepted; the endpoint API returns
one of them (CLI --endpoint-style, or /_fake/config):
  uri (default)  GET /v1/sandboxes/{id}/endpoints/44772
                   -> {"endpoint": "127.0.0.1:PORT/{id}/44772"}
                 (the Kubernetes "uri" gateway shape of A.6.7: an endpoint with
                 a path prefix, no headers)
  header         -> {"endpoint": "127.0.0.1:PORT",
                     "headers": {"OpenSandbox-Ingress-To": "{id}-44772"}}
                 (the header-routed gateway shape: any request carrying that
                 header is execd's, whatever its path)
  ?use_server_proxy=true
                 -> {"endpoint": "127.0.0.1:PORT/sandboxes/{id}/proxy/44772"}
                 (the lifecycle server's proxy route, no /v1, exempt from the
                 API key, also served under /v1)
The host part is --eip if given, else the Host header of the request.  A
client does exactly what A.7 says: execd_base = "http://" + endpoint, then
execd_base + "/command" etc., adding the returned headers to every execd call
and NOT sending OPEN-SANDBOX-API-KEY.  Requests to a sandbox that is not
Running (Pending, Paused, Terminated...) or to any port other than 44772 (the
sandbox network is unshared; nothing is forwarded) get 502
{"code": "SANDBOX::ENDPOINT_UNREACHABLE", ...}; an unknown id gets 404
DOCKER::SANDBOX_NOT_FOUND.  --execd-token T makes execd require
X-EXECD-ACCESS-TOKEN: T (401 {"error": ...} otherwise, A.3).

SSE.  POST /command answers 200 text/event-stream, chunked.  Each event is one
compact JSON object followed by a blank line; --sse-form data (default, the
standard SSE framing) writes "data: {...}\n\n", --sse-form bare (what
upstream execd writes) writes "{...}\n\n".  Events:
  {"type":"init","text":"<command id>","timestamp":ms}
  {"type":"stdout"|"stderr","text":"<one line, no terminator>","timestamp":ms}
      (\n, \r, \r\n end a line; an empty line is sent as "\n"; a final
      partial line is flushed at exit; files are tailed every 50 ms)
  {"type":"ping","text":"pong","timestamp":ms}    every --ping-interval s
  {"type":"execution_complete","execution_time":ms,"timestamp":ms}  exit 0
  {"type":"error","error":{"ename":"CommandExecError","evalue":"<N>",
      "traceback":["exit status N"]},"timestamp":ms}               exit N != 0
      killed by a signal (timeout, interrupt): evalue "-1",
      traceback ["signal: killed"] / ["signal: terminated"] ...
      failed to start: evalue = the error message
then the connection is held --graceful-close s (upstream: 1 s) and the chunked
body ends.  Background commands: init, then execution_complete at once.
Timeouts (ms) SIGKILL the command's process group.  DELETE /command?id= sends
SIGTERM to the group and SIGKILL after 3 s, like upstream execd's killPid
(--interrupt-signal INT switches to SIGINT); unknown id -> 500 RUNTIME_ERROR.
If the client goes away the command still runs to its end (as upstream); if
the sandbox is deleted or expires, its streams are cut (no terminal event).
GET /command/status/{id} -> {"id","content","running","exit_code"?,"error"?,
"started_at","finished_at"?} (exit_code -1 after a signal; unknown id 404).
GET /command/{id}/logs?cursor=N (background commands only, else 400): the
combined output after byte N, header EXECD-COMMANDS-TAIL-CURSOR = the next
cursor; the spec calls it a line cursor, upstream execd uses a byte offset,
so a client should treat it as opaque.

AUTH.  --api-key K: every lifecycle route except /health and the proxy routes
needs OPEN-SANDBOX-API-KEY: K; missing -> 401 {"code":"MISSING_API_KEY",...},
wrong -> 401 {"code":"INVALID_API_KEY",...}.  Without --api-key all is open.

ERRORS.  Lifecycle: {"code","message"} (codes namespaced as the Docker runtime:
DOCKER::SANDBOX_NOT_FOUND, DOCKER::INVALID_EXPIRATION, DOCKER::INVALID_PORT,
SANDBOX::INVALID_METADATA_LABEL, INVALID_METADATA_FORMAT, ...); request
validation -> 422 {"detail":[{"type","loc","msg","input"[,"ctx"]}]} in
pydantic v2's shape.  execd: {"code","message"} with INVALID_REQUEST_BODY,
MISSING_QUERY, INVALID_FILE, INVALID_FILE_METADATA, INVALID_FILE_CONTENT,
FILE_NOT_FOUND, RUNTIME_ERROR, UNKNOWN.  Every response carries X-Request-ID
(the client's, echoed, or a new uuid4).

LIFECYCLE MODEL.  create -> 202, state Pending; Running --ready-delay s later
(0: Running at once).  timeout (>= 60 s, or null for no expiry) sets
expiresAt; at expiresAt the sandbox is killed and removed (GET/DELETE -> 404,
as the Docker runtime does, A.9); renew-expiration sets a new absolute time
(400 if not in the future, 409 if the sandbox has no TTL).  pause/resume:
Pausing -> Paused (SIGSTOP of every process) and Resuming -> Running.  When
the entrypoint exits the sandbox becomes Terminated (code 0) or Failed and
stays listed until deleted or expired.  With --renew-intent, a sandbox
created with extensions["access.renew.extend.seconds"] gets expiresAt pushed
to now + that on every execd request (OSEP-0009 renew-on-access).

CONTROL CHANNEL (test side channel, not part of any API; never authenticated,
never logged, never faulted), JSON in and out:
  GET    /_fake/state                    config, port, sandboxes (host paths)
  GET    /_fake/sandboxes/{id}           one sandbox: rootfs, init pid, commands
  POST   /_fake/sandboxes/{id}/expire    expire now (as the TTL timer would)
  POST   /_fake/sandboxes/{id}/state     {"state","reason"?,"message"?} force it
  GET    /_fake/requests[?since=SEQ]     {"seq","total","counters","status",
                                          "log":[{"seq","ts","method","path",
                                          "query","route","sandbox","status",
                                          "req_bytes","resp_bytes",
                                          "request_id","faults","ms",
                                          "files" (uploads: files in the
                                          request, else null)}]}
                                         (an entry is added when its response
                                         ends: a stream logs when it closes;
                                         routes look like "POST /v1/sandboxes",
                                         "GET /v1/sandboxes/{id}",
                                         "POST execd/command")
  POST   /_fake/reset                    {"sandboxes": bool}: clear faults,
                                          log and counters (and sandboxes)
  GET    /_fake/faults                   the active faults
  POST   /_fake/faults                   add one, answers {"id": N, ...}
  DELETE /_fake/faults[/{id}]            remove all / one
  GET|POST /_fake/config                 read / change runtime settings: any of
                                          api_key, sse_form, ready_delay,
                                          endpoint_style, eip, execd_token,
                                          max_timeout, min_timeout,
                                          renew_intent, ping_interval,
                                          graceful_close, interrupt_signal,
                                          interrupt_grace
Fault object: {"kind": K, "method"?: "POST", "path"?: REGEX (re.search on the
request path, query excluded), "count"?: N (the next N matching requests;
absent = until removed), "sandbox"?: ID (only that sandbox's execd
requests), ...}; POST answers the fault with its "id".  Kinds:
  http_error      "status" (500), "code", "message": answer that error
                  (lifecycle or execd {"code","message"} shape) instead;
                  "retry_after": N adds "Retry-After: N" (a 429 or 503 of
                  a rate-limiting gateway in front of the server)
  delay           "ms": sleep before handling
  delay_answer    "ms": POST /sandboxes makes the sandbox (listed at once),
                  then sleeps before answering
  drop_stream     close the connection mid-body: an SSE stream after
                  "after_events" (1) events were sent, another body after
                  "after_bytes" bytes (default: half of it)
  malformed_json  JSON bodies are cut in half (status and headers kept); in
                  SSE the event at 0-based index "after_events" (1: the first
                  after init) is cut
  ping_fail       "seconds" (null = until removed): execd GET /ping -> 502
  pending_forever while present, matching sandboxes stay Pending
  reply           "status" (200), "body" (any JSON): answer exactly that
                  (e.g. a listing with hostile names a broken or malicious
                  server could send)
  drip            "ms" (700): GET /files/download sends its body one byte
                  every "ms" milliseconds (a hostile execd that never stalls
                  long enough for a client's stall timeout); the transfer
                  ends when the client goes away or the server stops

CLI: --root DIR (required; sandboxes live in DIR/<id>), --port N (0 = OS
chooses), --port-file PATH (the port, written atomically once listening),
--api-key K, --sse-form bare|data, --ready-delay S (0.2), --endpoint-style
uri|header, --eip HOST, --execd-token T, --max-timeout S, --min-timeout S
(60, the spec's minimum; lower it to test short TTLs), --renew-intent,
--ping-interval S (3), --graceful-close S (1), --interrupt-signal TERM|INT,
--verbose.  SIGTERM/SIGINT: kill every sandbox process and remove ROOT/<id>.
After a kill -9 the sandboxes still die (bwrap --die-with-parent, which is why
bwrap is forked from the main thread) but ROOT/<id> stays for the test to
remove.

NOT IMPLEMENTED (deliberately): snapshots (create -> 400
SANDBOX::API_NOT_SUPPORTED, list empty, get/delete 404), snapshotId, pool
mode (extensions.poolRef), volumes (400 SANDBOX::API_NOT_SUPPORTED), signed
endpoints (?expires -> 400), secureAccess enforcement (accepted, no header),
networkPolicy and credentialProxy enforcement (validated, the sandbox network
is always loopback-only), the egress sidecar (port 18080 resolves but is
unreachable), image pulling and registry auth, resourceLimits enforcement
(validated and echoed only), execd's /code* (Jupyter), /session*,
/metrics/watch and /proxy/{port}, WebSocket proxying, seccomp.  Path
resolution for the files API is not race-free against a sandbox process that
swaps a directory for a symlink while a request is being served (the tests
own the sandboxes; this is a fake, not a security boundary).
"""

import argparse
import datetime
import fnmatch
import grp
import json
import math
import os
import pwd
import queue
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, parse_qsl, urlsplit

EXECD_PORT = 44772
BWRAP = "/usr/bin/bwrap"
NSENTER = "/usr/bin/nsenter"
SETPRIV = "/usr/bin/setpriv"
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Docker's default capability set without NET_RAW, MKNOD and AUDIT_WRITE
# (OpenSandbox's sample docker.drop_capabilities)
CAPS = ["chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid",
        "setpcap", "setfcap", "net_bind_service", "sys_chroot"]
TAIL_INTERVAL = 0.05
SIGNAMES = {1: "hangup", 2: "interrupt", 3: "quit", 4: "illegal instruction",
            5: "trace/breakpoint trap", 6: "aborted", 7: "bus error",
            8: "floating point exception", 9: "killed", 10: "user defined signal 1",
            11: "segmentation fault", 12: "user defined signal 2", 13: "broken pipe",
            14: "alarm clock", 15: "terminated"}
LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PROXY_RE = re.compile(r"^(?:/v1)?/sandboxes/([^/]+)/proxy/(\d+)(/.*)?$")
URI_RE = re.compile(r"^/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/(\d+)(/.*)?$")
TERM_RE = re.compile(rb"\r\n|\r|\n")
MISSING = object()


# --------------------------------------------------------------------------
# time


def iso_utc(ts):
    """Lifecycle timestamps, as the Python server writes them."""
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def go_time(ns):
    """execd timestamps: Go's RFC3339Nano in UTC (trailing zeros trimmed)."""
    sec, frac = divmod(int(ns), 10 ** 9)
    s = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    if frac:
        s += "." + f"{frac:09d}".rstrip("0")
    return s + "Z"


def now_ms():
    return int(time.time() * 1000)


def parse_datetime(s):
    """RFC 3339 / ISO 8601 -> epoch seconds; naive times are UTC."""
    if not isinstance(s, str):
        raise ValueError("not a string")
    t = s.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    dt = datetime.datetime.fromisoformat(t)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return dt.timestamp()


# --------------------------------------------------------------------------
# errors


class ApiError(Exception):
    """A {"code","message"} error (lifecycle and execd share the shape)."""

    def __init__(self, status, code, message=None, body=None):
        super().__init__(message or code)
        self.status = status
        self.code = code
        self.message = message
        self.body = body

    def json(self):
        if self.body is not None:
            return self.body
        d = {"code": self.code}
        if self.message is not None:
            d["message"] = self.message
        return d


class ValidationFailed(Exception):
    """FastAPI/pydantic request validation: 422 {"detail": [...]}."""

    def __init__(self, errors):
        super().__init__("validation failed")
        self.errors = errors


def not_found(sid):
    return ApiError(404, "DOCKER::SANDBOX_NOT_FOUND", f"Sandbox {sid} not found.")


def v_err(typ, loc, msg, inp, ctx=None):
    d = {"type": typ, "loc": list(loc), "msg": msg, "input": inp}
    if ctx is not None:
        d["ctx"] = ctx
    return d


def v_missing(loc, parent):
    return v_err("missing", loc, "Field required", parent)


# --------------------------------------------------------------------------
# request validation (pydantic-like, lax where pydantic is lax)


class V:
    """Collects pydantic-style errors while coercing a JSON document."""

    def __init__(self):
        self.errors = []

    def str_(self, val, loc):
        if isinstance(val, str):
            return val
        self.errors.append(v_err("string_type", loc, "Input should be a valid string", val))
        return None

    def int_(self, val, loc):
        if isinstance(val, bool):
            self.errors.append(v_err("int_type", loc, "Input should be a valid integer", val))
            return None
        if isinstance(val, int):
            return val
        if isinstance(val, float):
            if val.is_integer():
                return int(val)
            self.errors.append(v_err("int_from_float", loc,
                                     "Input should be a valid integer, got a number with a fractional part", val))
            return None
        if isinstance(val, str):
            try:
                return int(val.strip())
            except ValueError:
                self.errors.append(v_err("int_parsing", loc,
                                         "Input should be a valid integer, unable to parse string as an integer", val))
                return None
        self.errors.append(v_err("int_type", loc, "Input should be a valid integer", val))
        return None

    def bool_(self, val, loc):
        if isinstance(val, bool):
            return val
        if isinstance(val, int) and val in (0, 1):
            return bool(val)
        if isinstance(val, str) and val.lower() in ("true", "false", "1", "0", "yes", "no", "on", "off", "t", "f", "y", "n"):
            return val.lower() in ("true", "1", "yes", "on", "t", "y")
        self.errors.append(v_err("bool_parsing" if isinstance(val, str) else "bool_type", loc,
                                 "Input should be a valid boolean", val))
        return None

    def dict_(self, val, loc):
        if isinstance(val, dict):
            return val
        self.errors.append(v_err("dict_type", loc, "Input should be a valid dictionary", val))
        return None

    def model_(self, val, loc):
        if isinstance(val, dict):
            return val
        self.errors.append(v_err("model_attributes_type", loc,
                                 "Input should be a valid dictionary or object to extract fields from", val))
        return None

    def list_(self, val, loc):
        if isinstance(val, list):
            return val
        self.errors.append(v_err("list_type", loc, "Input should be a valid list", val))
        return None

    def literal_(self, val, loc, choices):
        if val in choices:
            return val
        expected = ", ".join(repr(c) for c in choices[:-1]) + " or " + repr(choices[-1]) if len(choices) > 1 else repr(choices[0])
        self.errors.append(v_err("literal_error", loc, f"Input should be {expected}", val, {"expected": expected}))
        return None

    def str_map(self, val, loc, allow_null=False):
        d = self.dict_(val, loc)
        if d is None:
            return None
        out = {}
        for k, v in d.items():
            if v is None and allow_null:
                out[k] = None
                continue
            s = self.str_(v, loc + [k])
            if s is not None:
                out[k] = s
        return out


def validate_create(body, min_timeout=60):
    """CreateSandboxRequest -> normalised dict, or ValidationFailed (422)."""
    v = V()
    if body is MISSING:
        raise ValidationFailed([v_missing(["body"], None)])
    b = v.model_(body, ["body"])
    if b is None:
        raise ValidationFailed(v.errors)
    out = {}
    image = b.get("image")
    if image is not None:
        im = v.model_(image, ["body", "image"])
        if im is not None:
            if "uri" not in im:
                v.errors.append(v_missing(["body", "image", "uri"], im))
            else:
                uri = v.str_(im["uri"], ["body", "image", "uri"])
                out["image"] = {"uri": uri}
            auth = im.get("auth")
            if auth is not None:
                a = v.model_(auth, ["body", "image", "auth"])
                if a is not None:
                    for f in ("username", "password"):
                        if a.get(f) is not None:
                            v.str_(a[f], ["body", "image", "auth", f])
    snap = b.get("snapshotId")
    if snap is not None:
        out["snapshotId"] = v.str_(snap, ["body", "snapshotId"])
    ep = b.get("entrypoint")
    if ep is not None:
        lst = v.list_(ep, ["body", "entrypoint"])
        if lst is not None:
            if len(lst) < 1:
                v.errors.append(v_err("too_short", ["body", "entrypoint"],
                                      "List should have at least 1 item after validation, not 0", lst,
                                      {"field_type": "List", "min_length": 1, "actual_length": 0}))
            else:
                out["entrypoint"] = [v.str_(x, ["body", "entrypoint", i]) for i, x in enumerate(lst)]
    timeout = b.get("timeout")
    if timeout is not None:
        t = v.int_(timeout, ["body", "timeout"])
        if t is not None:
            if t < min_timeout:
                v.errors.append(v_err("greater_than_equal", ["body", "timeout"],
                                      f"Input should be greater than or equal to {min_timeout}", timeout,
                                      {"ge": min_timeout}))
            else:
                out["timeout"] = t
    else:
        out["timeout"] = None
    if b.get("resourceLimits") is not None:
        out["resourceLimits"] = v.str_map(b["resourceLimits"], ["body", "resourceLimits"])
    if b.get("env") is not None:
        out["env"] = v.str_map(b["env"], ["body", "env"], allow_null=True)
    if b.get("metadata") is not None:
        out["metadata"] = v.str_map(b["metadata"], ["body", "metadata"])
    if b.get("extensions") is not None:
        out["extensions"] = v.str_map(b["extensions"], ["body", "extensions"])
    plat = b.get("platform")
    if plat is not None:
        p = v.model_(plat, ["body", "platform"])
        if p is not None:
            pp = {}
            for f, choices in (("os", ["linux", "windows"]), ("arch", ["amd64", "arm64"])):
                if f not in p:
                    v.errors.append(v_missing(["body", "platform", f], p))
                else:
                    pp[f] = v.literal_(p[f], ["body", "platform", f], choices)
            out["platform"] = pp
    np_ = b.get("networkPolicy")
    if np_ is not None:
        n = v.model_(np_, ["body", "networkPolicy"])
        if n is not None:
            if n.get("defaultAction") is not None:
                v.literal_(n["defaultAction"], ["body", "networkPolicy", "defaultAction"], ["allow", "deny"])
            if n.get("egress") is not None:
                eg = v.list_(n["egress"], ["body", "networkPolicy", "egress"])
                for i, r in enumerate(eg or []):
                    loc = ["body", "networkPolicy", "egress", i]
                    rr = v.model_(r, loc)
                    if rr is None:
                        continue
                    for f in ("action", "target"):
                        if f not in rr:
                            v.errors.append(v_missing(loc + [f], rr))
                    if "action" in rr:
                        v.literal_(rr["action"], loc + ["action"], ["allow", "deny"])
                    if "target" in rr:
                        v.str_(rr["target"], loc + ["target"])
            out["networkPolicy"] = n
    cp = b.get("credentialProxy")
    if cp is not None:
        c = v.model_(cp, ["body", "credentialProxy"])
        if c is not None and c.get("enabled") is not None:
            v.bool_(c["enabled"], ["body", "credentialProxy", "enabled"])
    if b.get("secureAccess") is not None:
        out["secureAccess"] = v.bool_(b["secureAccess"], ["body", "secureAccess"])
    if b.get("volumes") is not None:
        out["volumes"] = v.list_(b["volumes"], ["body", "volumes"])
    if v.errors:
        raise ValidationFailed(v.errors)
    # model validators run after the fields validated
    ext = out.get("extensions") or {}
    pool = ext.get("poolRef")

    def model_error(msg):
        raise ValidationFailed([v_err("value_error", ["body"], "Value error, " + msg, body, {"error": {}})])

    if pool is None and (("image" in out) == ("snapshotId" in out)):
        model_error("Exactly one of image or snapshotId must be provided")
    if pool is not None and "snapshotId" in out:
        model_error("snapshotId cannot be combined with extensions.poolRef")
    if "image" in out and "entrypoint" not in out and pool is None:
        model_error("entrypoint is required when image is provided")
    if not out.get("resourceLimits") and pool is None:
        model_error("resourceLimits is required when extensions.poolRef is not provided")
    return out


def check_labels(meta):
    """Kubernetes label rules for metadata (400 SANDBOX::INVALID_METADATA_LABEL)."""
    for k, val in meta.items():
        bad = None
        prefix, sep, name = k.rpartition("/")
        if sep:
            if prefix == "opensandbox.io" or prefix.endswith(".opensandbox.io"):
                bad = f"metadata key {k!r} uses the reserved prefix opensandbox.io/"
            elif not prefix or len(prefix) > 253 or not DNS_SUBDOMAIN_RE.match(prefix):
                bad = f"metadata key {k!r}: prefix must be a DNS subdomain"
        if bad is None and (not name or len(name) > 63 or not LABEL_NAME_RE.match(name)):
            bad = (f"metadata key {k!r}: name must be 63 characters or less, beginning and ending "
                   "with an alphanumeric character with dashes, underscores, dots and alphanumerics between")
        if bad is None and val is not None and (len(val) > 63 or (val and not LABEL_NAME_RE.match(val))):
            bad = (f"metadata value {val!r} for key {k!r}: must be 63 characters or less, empty or "
                   "beginning and ending with an alphanumeric character")
        if bad:
            raise ApiError(400, "SANDBOX::INVALID_METADATA_LABEL", bad)


# --------------------------------------------------------------------------
# multipart/form-data (RFC 7578 on RFC 2046)


class MultipartError(Exception):
    pass


def parse_header_params(value):
    """'form-data; name="a"; filename="b"' -> ('form-data', {'name': 'a', ...})."""
    items = []
    cur = []
    i = 0
    inq = False
    while i < len(value):
        c = value[i]
        if inq:
            if c == "\\" and i + 1 < len(value):
                cur.append(value[i + 1])
                i += 2
                continue
            if c == '"':
                inq = False
            else:
                cur.append(c)
        elif c == '"':
            inq = True
        elif c == ";":
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    items.append("".join(cur))
    main = items[0].strip().lower()
    params = {}
    for it in items[1:]:
        k, eq, val = it.partition("=")
        if not eq:
            continue
        k = k.strip().lower()
        val = val.strip()
        if k.endswith("*"):  # RFC 5987 ext-value: charset'lang'pct-encoded
            from urllib.parse import unquote
            parts = val.split("'", 2)
            if len(parts) == 3:
                try:
                    val = unquote(parts[2], encoding=parts[0] or "utf-8")
                except LookupError:
                    val = unquote(parts[2])
            k = k[:-1]
        params[k] = val
    return main, params


class Part:
    def __init__(self, headers, data):
        self.headers = headers
        self.data = data
        disp, params = parse_header_params(headers.get("content-disposition", ""))
        if disp != "form-data":
            raise MultipartError("part without Content-Disposition: form-data")
        self.name = params.get("name")
        self.filename = params.get("filename")
        self.content_type = headers.get("content-type", "text/plain")


def parse_multipart(body, content_type):
    ctype, params = parse_header_params(content_type or "")
    if ctype != "multipart/form-data":
        raise MultipartError("request Content-Type isn't multipart/form-data")
    boundary = params.get("boundary")
    if not boundary or len(boundary) > 70:
        raise MultipartError("no multipart boundary param in Content-Type")
    delim = b"--" + boundary.encode("latin-1")
    if body.startswith(delim):
        pos = len(delim)
    else:
        first = body.find(b"\r\n" + delim)
        if first < 0:
            raise MultipartError("multipart: NextPart: EOF")
        pos = first + 2 + len(delim)
    parts = []
    while True:
        if body.startswith(b"--", pos):
            break  # close-delimiter
        eol = body.find(b"\r\n", pos)
        if eol < 0 or body[pos:eol].strip(b" \t"):
            raise MultipartError("multipart: malformed delimiter line")
        pos = eol + 2
        end = body.find(b"\r\n" + delim, pos)
        if end < 0:
            raise MultipartError("multipart: NextPart: EOF")
        raw = body[pos:end]
        if raw.startswith(b"\r\n"):
            head, data = b"", raw[2:]
        else:
            he = raw.find(b"\r\n\r\n")
            if he < 0:
                raise MultipartError("multipart: malformed part headers")
            head, data = raw[:he], raw[he + 4:]
        headers = {}
        last = None
        for line in head.split(b"\r\n"):
            if not line:
                continue
            if line[:1] in (b" ", b"\t") and last:  # obsolete folding
                headers[last] += " " + line.strip().decode("utf-8", "replace")
                continue
            k, colon, val = line.partition(b":")
            if not colon:
                raise MultipartError("multipart: malformed part header line")
            last = k.strip().decode("latin-1").lower()
            headers[last] = val.strip().decode("utf-8", "replace")
        parts.append(Part(headers, data))
        pos = end + 2 + len(delim)
    return parts


# --------------------------------------------------------------------------
# names


def clean_path(p):
    """Lexically cleaned absolute path (Go's filepath.Clean of "/" + p)."""
    out = []
    for c in p.split("/"):
        if c in ("", "."):
            continue
        if c == "..":
            if out:
                out.pop()
        else:
            out.append(c)
    return "/" + "/".join(out)


def user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def lookup_uid(name):
    if name.isdigit():
        return int(name)
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        raise ApiError(500, "RUNTIME_ERROR", f"user: unknown user {name}")


def lookup_gid(name):
    if name.isdigit():
        return int(name)
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ApiError(500, "RUNTIME_ERROR", f"group: unknown group {name}")


def octal_digits(mode):
    """644 -> 0o644 (the decimal digits of execd's `mode` are octal)."""
    try:
        return int(str(int(mode)), 8)
    except (TypeError, ValueError):
        raise ApiError(400, "INVALID_REQUEST_BODY", f"invalid mode {mode!r}: digits must be octal")


def process_group_members(pgid, exclude=None):
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == exclude:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[0] != b"Z" and int(fields[2]) == pgid:
            out.append(int(name))
    return out


def pidns_members(pid):
    try:
        ns = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return []
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == ns:
                    out.append(int(name))
            except OSError:
                pass
    return out


# --------------------------------------------------------------------------
# the sandbox's filesystem, seen from the host


class Resolved:
    def __init__(self, spath, host, ro, st):
        self.spath = spath      # canonical path inside the sandbox
        self.host = host        # host path (None inside /proc, /dev)
        self.ro = ro
        self.st = st            # lstat of host, None when missing

    @property
    def exists(self):
        return self.st is not None

    @property
    def is_dir(self):
        return self.st is not None and stat.S_ISDIR(self.st.st_mode)


class SandboxFS:
    """Paths of a sandbox resolved in its own view (symlinks included)."""

    def __init__(self, rootfs, ro_mounts, virtual=("/proc", "/dev")):
        self.rootfs = rootfs
        self.ro_mounts = dict(ro_mounts)   # sandbox path -> host path
        self.virtual = tuple(virtual)

    def host(self, sp):
        for mp, hp in self.ro_mounts.items():
            if sp == mp or sp.startswith(mp + "/"):
                return hp + sp[len(mp):], True
        for mp in self.virtual:
            if sp == mp:
                return self.rootfs + sp, True
            if sp.startswith(mp + "/"):
                return None, True
        return (self.rootfs if sp == "/" else self.rootfs + sp), False

    def resolve(self, path, follow=True):
        if not path.startswith("/"):
            path = "/" + path
        todo = [p for p in path.split("/") if p not in ("", ".")]
        cur = []
        links = 0
        while todo:
            comp = todo.pop(0)
            if comp == "..":
                if cur:
                    cur.pop()
                continue
            cand = cur + [comp]
            sp = "/" + "/".join(cand)
            hp, ro = self.host(sp)
            if hp is None:
                cur = cand
                continue
            try:
                st = os.lstat(hp)
            except FileNotFoundError:
                cur = cand
                for p in todo:  # the rest cannot hold symlinks: it does not exist
                    if p == "..":
                        if cur:
                            cur.pop()
                    else:
                        cur.append(p)
                sp = "/" + "/".join(cur)
                hp, ro = self.host(sp)
                return Resolved(sp, hp, ro, None)
            except NotADirectoryError:
                raise ApiError(500, "RUNTIME_ERROR", f"{path}: not a directory")
            if stat.S_ISLNK(st.st_mode) and (todo or follow):
                links += 1
                if links > 40:
                    raise ApiError(500, "RUNTIME_ERROR", f"{path}: too many levels of symbolic links")
                target = os.readlink(hp)
                if target.startswith("/"):
                    cur = []
                todo = [p for p in target.split("/") if p not in ("", ".")] + todo
                continue
            if todo and not stat.S_ISDIR(st.st_mode):
                raise ApiError(500, "RUNTIME_ERROR", f"{path}: not a directory")
            cur = cand
        sp = "/" + "/".join(cur)
        hp, ro = self.host(sp)
        st = None
        if hp is not None:
            try:
                st = os.lstat(hp)
            except FileNotFoundError:
                st = None
        elif sp.startswith(self.virtual):
            st = None
        return Resolved(sp, hp, ro, st)

    def writable(self, r, what):
        if r.host is None or r.ro or r.spath == "/" or r.spath in self.ro_mounts or r.spath in self.virtual:
            raise ApiError(500, "RUNTIME_ERROR", f"{what} {r.spath}: read-only file system")

    def makedirs(self, path, mode=0o755):
        r = self.resolve(path)
        if r.exists:
            if not r.is_dir:
                raise ApiError(500, "RUNTIME_ERROR", f"mkdir {r.spath}: not a directory")
            return r
        parent = os.path.dirname(r.spath)
        if parent != r.spath:
            self.makedirs(parent, 0o755)
        r = self.resolve(r.spath)
        if r.exists:
            return r
        self.writable(r, "mkdir")
        os.mkdir(r.host, mode)
        return self.resolve(r.spath)

    def info(self, spath, st):
        if stat.S_ISDIR(st.st_mode):
            t = "directory"
        elif stat.S_ISREG(st.st_mode):
            t = "file"
        elif stat.S_ISLNK(st.st_mode):
            t = "symlink"
        else:
            t = "other"
        return {"path": spath, "type": t, "size": st.st_size,
                "modified_at": go_time(st.st_mtime_ns), "created_at": go_time(st.st_ctime_ns),
                "owner": user_name(st.st_uid), "group": group_name(st.st_gid),
                "mode": int(format(st.st_mode & 0o777, "o"))}

    def children(self, r):
        """(spath, host, lstat) of a directory's entries, sorted by name."""
        if r.host is None:
            return []
        if r.spath in self.virtual:
            return []
        out = []
        for name in sorted(os.listdir(r.host)):
            sp = (r.spath.rstrip("/") + "/" + name)
            hp, _ = self.host(sp)
            if hp is None:
                continue
            try:
                out.append((sp, hp, os.lstat(hp)))
            except OSError:
                pass
        return out

    def chmod_chown(self, r, mode, owner, group, default_owner=False):
        self.writable(r, "chmod")
        if mode:
            os.chmod(r.host, octal_digits(mode), follow_symlinks=False)
        owner = owner or ""
        group = group or ""
        if owner or group:
            uid = lookup_uid(owner) if owner else -1
            gid = lookup_gid(group) if group else -1
            if owner and not group:
                try:
                    gid = pwd.getpwuid(uid).pw_gid
                except KeyError:
                    gid = uid
            os.chown(r.host, uid, gid, follow_symlinks=False)
        elif default_owner:
            os.chown(r.host, os.getuid(), os.getgid(), follow_symlinks=False)


# --------------------------------------------------------------------------
# output tailing


class LineTail:
    """Tails a file; yields lines split on \\n, \\r and \\r\\n."""

    def __init__(self, path):
        self.path = path
        self.fd = None
        self.cur = b""
        self.after_cr = False

    def read(self, final=False):
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return []
        chunks = []
        while True:
            b = os.read(self.fd, 1 << 16)
            if not b:
                break
            chunks.append(b)
        data = b"".join(chunks)
        if self.after_cr and data.startswith(b"\n"):
            data = data[1:]
        if data:
            self.after_cr = False
        buf = self.cur + data
        parts = TERM_RE.split(buf)
        self.cur = parts.pop()
        if data and buf.endswith(b"\r"):
            self.after_cr = True
        out = [p.decode("utf-8", "replace") if p else "\n" for p in parts]
        if final:
            if self.cur:
                out.append(self.cur.decode("utf-8", "replace"))
                self.cur = b""
            self.close()
        return out

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# --------------------------------------------------------------------------
# commands


def exit_info(rc):
    """Popen returncode -> (exit_code, error) as Go's exec reports them."""
    if rc == 0:
        return 0, ""
    if rc > 0:
        return rc, f"exit status {rc}"
    return -1, "signal: " + SIGNAMES.get(-rc, f"signal {-rc}")


class Command:
    def __init__(self, sb, content, background, timeout_ms):
        self.sb = sb
        self.id = uuid.uuid4().hex
        self.content = content
        self.background = background
        self.timeout_ms = timeout_ms
        self.started = time.time()
        self.started_ns = time.time_ns()
        self.finished_ns = None
        self.exit_code = None
        self.error = ""
        self.proc = None
        self.done = threading.Event()
        base = os.path.join(sb.rundir, self.id)
        if background:
            self.out_path = self.err_path = base + ".output"
        else:
            self.out_path, self.err_path = base + ".stdout", base + ".stderr"

    def start(self, cwd, env, uid, gid):
        argv = [NSENTER, "-t", str(self.sb.init_pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w", "--",
                SETPRIV]
        if uid is not None:
            if gid is None:
                try:
                    gid = pwd.getpwuid(uid).pw_gid
                except KeyError:
                    gid = uid
            argv += ["--reuid", str(uid), "--regid", str(gid), "--clear-groups"]
        argv += ["--bounding-set", "-all," + ",".join("+" + c for c in CAPS), "--no-new-privs", "--",
                 "/bin/sh", "-c", 'cd -- "$1" || exit 1; shift; exec "$@"', "sh", cwd,
                 "/bin/bash" if os.path.exists("/usr/bin/bash") else "/bin/sh", "-c", self.content]
        out = os.open(self.out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        err = out if self.err_path == self.out_path else os.open(
            self.err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         env=env, start_new_session=True, close_fds=True)
        finally:
            os.close(out)
            if err != out:
                os.close(err)
        self.pgid = self.proc.pid
        threading.Thread(target=self._wait, name=f"cmd-{self.id[:8]}", daemon=True).start()

    def _wait(self):
        rc = None
        if self.timeout_ms:
            try:
                rc = self.proc.wait(timeout=self.timeout_ms / 1000.0)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
        if rc is None:
            rc = self.proc.wait()
        self.exit_code, self.error = exit_info(rc)
        self.finished_ns = time.time_ns()
        self.done.set()

    @property
    def running(self):
        return self.proc is not None and not self.done.is_set()

    def kill(self, sig):
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def interrupt(self, sig, grace):
        """upstream killPid: signal the group, SIGKILL after `grace` s."""
        if not self.running:
            return
        members = process_group_members(self.pgid, exclude=self.pgid)
        if members:
            # nsenter passes its child's fate on; signalling it too would
            # report nsenter's death instead of the command's
            for p in members:
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass
        else:
            self.kill(sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if self.done.is_set() and not process_group_members(self.pgid):
                return
            time.sleep(0.05)
        self.kill(signal.SIGKILL)

    def status_json(self):
        d = {"id": self.id, "content": self.content, "running": self.running}
        if self.done.is_set():
            d["exit_code"] = self.exit_code
            if self.error:
                d["error"] = self.error
        d["started_at"] = go_time(self.started_ns)
        if self.done.is_set():
            d["finished_at"] = go_time(self.finished_ns)
        return d


# --------------------------------------------------------------------------
# sandboxes


class Sandbox:
    def __init__(self, app, req):
        self.app = app
        self.id = str(uuid.uuid4())
        self.image = (req.get("image") or {}).get("uri")
        self.entrypoint = req.get("entrypoint") or ["tail", "-f", "/dev/null"]
        self.timeout = req.get("timeout")
        self.env = {k: v for k, v in (req.get("env") or {}).items() if v is not None}
        self.metadata = dict(req.get("metadata") or {})
        self.resource_limits = req.get("resourceLimits") or {}
        self.platform = req.get("platform")
        self.extensions = req.get("extensions") or {}
        self.created = time.time()
        self.expires = self.created + self.timeout if self.timeout else None
        self.ready_at = self.created + max(0.0, float(app.cfg["ready_delay"]))
        self.state = "Pending"
        self.reason = "CONTAINER_STARTING"
        self.message = "Sandbox container is starting."
        self.last_transition = self.created
        self.forced = False
        self.transition_at = None
        self.dir = os.path.join(app.root, self.id)
        self.rootfs = os.path.join(self.dir, "rootfs")
        self.rundir = os.path.join(self.dir, "run")
        self.hostname = self.id.replace("-", "")[:12]
        self.init_proc = None
        self.init_pid = None
        self.commands = {}
        self.lock = threading.Lock()
        self.destroyed = threading.Event()
        self.fs = None

    # ---- state

    def set_state(self, state, reason, message):
        if self.state != state:
            self.last_transition = time.time()
        self.state, self.reason, self.message = state, reason, message

    def alive(self):
        return self.init_proc is not None and self.init_proc.poll() is None

    def to_json(self, create=False):
        d = {"id": self.id}
        if not create and self.image is not None:
            d["image"] = {"uri": self.image}
        d["status"] = {"state": self.state, "reason": self.reason, "message": self.message,
                       "lastTransitionAt": iso_utc(self.last_transition)}
        d["metadata"] = dict(self.metadata)
        if self.platform:
            d["platform"] = dict(self.platform)
        d["entrypoint"] = list(self.entrypoint)
        if self.expires is not None:
            d["expiresAt"] = iso_utc(self.expires)
        d["createdAt"] = iso_utc(self.created)
        return d

    def base_env(self):
        env = {"PATH": SANDBOX_PATH, "HOME": "/root", "HOSTNAME": self.hostname}
        env.update(self.env)
        return env

    def expand(self, path, env):
        """execd's ~ and $VAR expansion (unknown variables become empty)."""
        if path == "~" or path.startswith("~/"):
            path = env.get("HOME", "/root") + path[1:]
        path = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)",
                      lambda m: env.get(m.group(1) or m.group(2), ""), path)
        if not path.startswith("/"):
            path = "/" + path
        return path

    # ---- start / stop

    def prepare(self):
        os.makedirs(self.rootfs, 0o755)
        os.makedirs(self.rundir, 0o700)
        os.chmod(self.dir, 0o755)
        os.chmod(self.rootfs, 0o755)
        ro = {"/usr": "/usr", "/etc": "/etc"}
        for d in ("usr", "etc", "proc", "dev", "tmp", "root", "home", "mnt", "opt", "run", "srv", "var", "var/tmp"):
            os.makedirs(os.path.join(self.rootfs, d), exist_ok=True)
        os.chmod(os.path.join(self.rootfs, "tmp"), 0o1777)
        os.chmod(os.path.join(self.rootfs, "var/tmp"), 0o1777)
        os.chmod(os.path.join(self.rootfs, "root"), 0o700)
        for d in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            hp = "/" + d
            if os.path.islink(hp):
                os.symlink(os.readlink(hp), os.path.join(self.rootfs, d))
            elif os.path.isdir(hp):
                os.makedirs(os.path.join(self.rootfs, d), exist_ok=True)
                ro["/" + d] = hp
        self.fs = SandboxFS(self.rootfs, ro)

    def start(self):
        args = [BWRAP, "--bind", self.rootfs, "/"]
        for sp, hp in self.fs.ro_mounts.items():
            args += ["--ro-bind", hp, sp]
        args += ["--proc", "/proc", "--dev", "/dev",
                 "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
                 "--hostname", self.hostname, "--die-with-parent", "--cap-drop", "ALL"]
        for c in CAPS:
            args += ["--cap-add", "CAP_" + c.upper()]
        r, w = os.pipe()
        args += ["--info-fd", str(w), "--chdir", "/", "--"] + list(self.entrypoint)
        log = os.open(os.path.join(self.rundir, "entrypoint.log"),
                      os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            # bwrap's --die-with-parent is PR_SET_PDEATHSIG, which fires when
            # the *thread* that forked it ends: fork from the main thread
            self.init_proc = self.app.spawner.call(lambda: subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.base_env(),
                pass_fds=(w,), start_new_session=True))
        finally:
            os.close(w)
            os.close(log)
        info = b""
        deadline = time.monotonic() + 10
        try:
            while time.monotonic() < deadline:
                try:
                    json.loads(info)
                    break
                except ValueError:
                    pass
                rl, _, _ = select.select([r], [], [], 0.1)
                if rl:
                    b = os.read(r, 4096)
                    if not b:
                        break
                    info += b
        finally:
            os.close(r)
        try:
            self.init_pid = int(json.loads(info)["child-pid"])
        except (ValueError, KeyError, TypeError):
            self.init_pid = None
        # bwrap reports child-pid before the child has built the new root;
        # it is ready once its root and its cwd (--chdir /, done last) are our
        # rootfs.  Commands inherit both through nsenter -r -w; nsenter -r
        # without -w would keep the caller's host cwd, outside the sandbox.
        if self.init_pid:
            want = os.stat(self.rootfs)
            want = (want.st_dev, want.st_ino)
            while time.monotonic() < deadline and self.init_proc.poll() is None:
                try:
                    r = os.stat(f"/proc/{self.init_pid}/root")
                    c = os.stat(f"/proc/{self.init_pid}/cwd")
                    if (r.st_dev, r.st_ino) == want == (c.st_dev, c.st_ino):
                        break
                except OSError:
                    pass
                time.sleep(0.002)
        threading.Thread(target=self._watch_init, name=f"init-{self.id[:8]}", daemon=True).start()

    def _watch_init(self):
        rc = self.init_proc.wait()
        if self.destroyed.is_set():
            return
        with self.app.lock:
            if self.forced:
                return
            if rc == 0:
                self.set_state("Terminated", "CONTAINER_EXITED", "Sandbox container exited with code 0.")
            else:
                try:
                    with open(os.path.join(self.rundir, "entrypoint.log"), "rb") as f:
                        tail = f.read()[-400:].decode("utf-8", "replace").strip()
                except OSError:
                    tail = ""
                self.set_state("Failed", "CONTAINER_EXITED",
                               f"Sandbox container exited with code {rc}." + (f" {tail}" if tail else ""))

    def pause_processes(self, sig):
        if self.init_pid:
            for p in pidns_members(self.init_pid):
                try:
                    os.kill(p, sig)
                except ProcessLookupError:
                    pass

    def destroy(self):
        """Kill everything and remove the sandbox's directory."""
        self.destroyed.set()
        with self.lock:
            cmds = list(self.commands.values())
        for c in cmds:
            if c.running:
                c.kill(signal.SIGKILL)
        # SIGKILL of the namespace's pid 1 ends every process in it; the
        # outer bwrap then reaps it and exits.  Killing the outer bwrap first
        # would orphan the init's zombie to the host's pid 1.
        if self.init_pid:
            try:
                os.kill(self.init_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.init_proc is not None:
            try:
                self.init_proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.init_proc.kill()
                try:
                    self.init_proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        for c in cmds:
            if c.proc is not None:
                try:
                    c.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    c.kill(signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------
# faults and the request log


FAULT_KINDS = ("http_error", "delay", "drop_stream", "malformed_json", "ping_fail", "pending_forever", "reply",
               "drip", "delay_answer")


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.items = []
        self.next_id = 1

    def add(self, spec):
        if not isinstance(spec, dict):
            raise ValueError("a fault is a JSON object")
        kind = spec.get("kind")
        if kind not in FAULT_KINDS:
            raise ValueError(f"kind must be one of {', '.join(FAULT_KINDS)}")
        f = dict(spec)
        if f.get("path") is not None:
            try:
                f["_re"] = re.compile(f["path"])
            except re.error as e:
                raise ValueError(f"path: bad regex: {e}")
        count = f.get("count")
        if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 1):
            raise ValueError("count must be an integer >= 1 (or absent)")
        if kind == "http_error":
            st = f.setdefault("status", 500)
            if not isinstance(st, int) or not 400 <= st <= 599:
                raise ValueError("status must be 400..599")
        if kind == "reply":
            st = f.setdefault("status", 200)
            if not isinstance(st, int) or not 200 <= st <= 599:
                raise ValueError("status must be 200..599")
        if kind in ("delay", "delay_answer") and not isinstance(f.get("ms"), (int, float)):
            raise ValueError(f"{kind} needs ms")
        if kind == "drip":
            ms = f.setdefault("ms", 700)
            if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms <= 0:
                raise ValueError("drip needs ms > 0")
        if kind == "ping_fail":
            sec = f.get("seconds")
            if sec is not None and not isinstance(sec, (int, float)):
                raise ValueError("seconds must be a number or null")
        for k in ("after_events", "after_bytes"):
            if f.get(k) is not None and (not isinstance(f[k], int) or f[k] < 0):
                raise ValueError(f"{k} must be an integer >= 0")
        with self.lock:
            f["id"] = self.next_id
            self.next_id += 1
            f["added_at"] = time.time()
            self.items.append(f)
        return self.public(f)

    @staticmethod
    def public(f):
        return {k: v for k, v in f.items() if not k.startswith("_")}

    def list(self):
        with self.lock:
            self._expire()
            return [self.public(f) for f in self.items]

    def remove(self, fid):
        with self.lock:
            n = len(self.items)
            self.items = [f for f in self.items if f["id"] != fid]
            return len(self.items) != n

    def clear(self):
        with self.lock:
            self.items = []

    def _expire(self):
        now = time.time()
        self.items = [f for f in self.items if not (
            f["kind"] == "ping_fail" and f.get("seconds") is not None and now > f["added_at"] + f["seconds"])]

    @staticmethod
    def _matches(f, method, path, sid):
        if f.get("method") and f["method"].upper() != method:
            return False
        if f.get("_re") is not None and not f["_re"].search(path):
            return False
        if f.get("sandbox") and f["sandbox"] != sid:
            return False
        return True

    def take(self, kinds, method, path, sid):
        """Faults of these kinds matching a request; consumes their counts."""
        out = []
        with self.lock:
            self._expire()
            for f in list(self.items):
                if f["kind"] in kinds and self._matches(f, method, path, sid):
                    out.append(self.public(f))
                    if f.get("count") is not None:
                        f["count"] -= 1
                        if f["count"] <= 0:
                            self.items.remove(f)
        return out

    def pending_hold(self, sid):
        with self.lock:
            return any(f["kind"] == "pending_forever" and (not f.get("sandbox") or f["sandbox"] == sid)
                       for f in self.items)


class RequestLog:
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.seq = 0
            self.entries = deque(maxlen=20000)
            self.counters = {}
            self.status = {}

    def add(self, e):
        with self.lock:
            self.seq += 1
            e["seq"] = self.seq
            self.entries.append(e)
            self.counters[e["route"]] = self.counters.get(e["route"], 0) + 1
            k = str(e["status"])
            self.status[k] = self.status.get(k, 0) + 1

    def snapshot(self, since=0):
        with self.lock:
            return {"seq": self.seq, "total": self.seq, "counters": dict(self.counters),
                    "status": dict(self.status), "log": [dict(e) for e in self.entries if e["seq"] > since]}


# --------------------------------------------------------------------------
# the application


class Spawner:
    """Runs callables on the main thread (see Sandbox.start)."""

    def __init__(self):
        self.q = queue.Queue()
        self.closed = False

    def call(self, fn):
        if threading.current_thread() is threading.main_thread():
            return fn()
        if self.closed:
            raise RuntimeError("server is shutting down")
        box = {}
        ev = threading.Event()
        self.q.put((fn, box, ev))
        ev.wait()
        if "exc" in box:
            raise box["exc"]
        return box["val"]

    def run_one(self, timeout):
        try:
            fn, box, ev = self.q.get(timeout=timeout)
        except queue.Empty:
            return
        try:
            box["val"] = fn()
        except BaseException as e:  # handed to the caller
            box["exc"] = e
        ev.set()

    def close(self):
        self.closed = True
        while True:
            try:
                fn, box, ev = self.q.get_nowait()
            except queue.Empty:
                return
            box["exc"] = RuntimeError("server is shutting down")
            ev.set()


CONFIG_KEYS = {"api_key": (str, type(None)), "sse_form": str, "ready_delay": (int, float),
               "endpoint_style": str, "eip": (str, type(None)), "execd_token": (str, type(None)),
               "max_timeout": (int, type(None)), "min_timeout": int, "renew_intent": bool, "ping_interval": (int, float),
               "graceful_close": (int, float), "interrupt_signal": str, "interrupt_grace": (int, float)}


class App:
    def __init__(self, args):
        self.root = os.path.abspath(args.root)
        os.makedirs(self.root, exist_ok=True)
        self.cfg = {"api_key": args.api_key or None, "sse_form": args.sse_form,
                    "ready_delay": args.ready_delay, "endpoint_style": args.endpoint_style,
                    "eip": args.eip, "execd_token": args.execd_token or None,
                    "max_timeout": args.max_timeout, "min_timeout": args.min_timeout,
                    "renew_intent": args.renew_intent,
                    "ping_interval": args.ping_interval, "graceful_close": args.graceful_close,
                    "interrupt_signal": args.interrupt_signal, "interrupt_grace": 3.0}
        self.verbose = args.verbose
        self.lock = threading.RLock()
        self.sandboxes = {}
        self.faults = Faults()
        self.log = RequestLog()
        self.spawner = Spawner()
        self.stop = threading.Event()
        self.port = None
        self.reaping = []   # threads destroying expired sandboxes

    def set_config(self, changes):
        if not isinstance(changes, dict):
            raise ValueError("config is a JSON object")
        for k, val in changes.items():
            if k not in CONFIG_KEYS:
                raise ValueError(f"unknown config key {k}")
            if not isinstance(val, CONFIG_KEYS[k]) or (isinstance(val, bool) and k != "renew_intent"):
                raise ValueError(f"bad value for {k}")
        if changes.get("sse_form", "data") not in ("data", "bare"):
            raise ValueError("sse_form is data or bare")
        if changes.get("endpoint_style", "uri") not in ("uri", "header"):
            raise ValueError("endpoint_style is uri or header")
        if changes.get("interrupt_signal", "TERM") not in ("TERM", "INT"):
            raise ValueError("interrupt_signal is TERM or INT")
        with self.lock:
            self.cfg.update(changes)

    def get(self, sid):
        with self.lock:
            return self.sandboxes.get(sid)

    def create(self, req):
        sb = Sandbox(self, req)
        sb.prepare()
        try:
            sb.start()
        except Exception as e:
            shutil.rmtree(sb.dir, ignore_errors=True)
            raise ApiError(500, "DOCKER::SANDBOX_START_FAILED", f"Failed to start sandbox: {e}")
        with self.lock:
            self.sandboxes[sb.id] = sb
            if self.cfg["ready_delay"] <= 0 and not self.faults.pending_hold(sb.id) and sb.alive():
                sb.set_state("Running", "CONTAINER_RUNNING", "Sandbox container started successfully.")
        return sb

    def remove(self, sid):
        with self.lock:
            sb = self.sandboxes.pop(sid, None)
        if sb is not None:
            sb.destroy()
        return sb

    def tick(self):
        """Pending->Running, Pausing->Paused, Resuming->Running, expiry."""
        now = time.time()
        expired = []
        with self.lock:
            for sb in list(self.sandboxes.values()):
                if sb.expires is not None and now >= sb.expires:
                    self.sandboxes.pop(sb.id, None)
                    expired.append(sb)
                    continue
                if sb.forced:
                    continue
                if sb.state == "Pending" and now >= sb.ready_at and not self.faults.pending_hold(sb.id):
                    if sb.alive():
                        sb.set_state("Running", "CONTAINER_RUNNING", "Sandbox container is running.")
                elif sb.state == "Pausing" and now >= sb.transition_at:
                    sb.pause_processes(signal.SIGSTOP)
                    sb.set_state("Paused", "CONTAINER_PAUSED", "Sandbox container is paused.")
                elif sb.state == "Resuming" and now >= sb.transition_at:
                    sb.pause_processes(signal.SIGCONT)
                    sb.set_state("Running", "CONTAINER_RUNNING", "Sandbox container is running.")
        for sb in expired:
            t = threading.Thread(target=sb.destroy, name=f"expire-{sb.id[:8]}", daemon=True)
            t.start()
            with self.lock:
                self.reaping = [x for x in self.reaping if x.is_alive()] + [t]

    def ticker(self):
        while not self.stop.wait(0.05):
            try:
                self.tick()
            except Exception:
                traceback.print_exc()

    def shutdown(self):
        self.stop.set()
        with self.lock:
            sbs = list(self.sandboxes.values())
            self.sandboxes.clear()
            reaping = list(self.reaping)
        for sb in sbs:
            try:
                sb.destroy()
            except Exception:
                traceback.print_exc()
        for t in reaping:
            t.join(20)

    def state_json(self):
        with self.lock:
            sbs = list(self.sandboxes.values())
            cfg = dict(self.cfg)
        return {"port": self.port, "root": self.root, "config": cfg,
                "sandboxes": [self.sandbox_debug(sb) for sb in sbs]}

    @staticmethod
    def sandbox_debug(sb):
        with sb.lock:
            cmds = [c.status_json() | {"background": c.background} for c in sb.commands.values()]
        return {"id": sb.id, "state": sb.state, "dir": sb.dir, "rootfs": sb.rootfs,
                "init_pid": sb.init_pid, "bwrap_pid": sb.init_proc.pid if sb.init_proc else None,
                "expiresAt": iso_utc(sb.expires) if sb.expires else None, "commands": cmds}


APP = None


# --------------------------------------------------------------------------
# HTTP


class EventStream:
    """A chunked text/event-stream response."""

    def __init__(self, h, form, drop_after=None, malformed_at=None):
        self.h = h
        self.form = form
        self.drop_after = drop_after
        self.malformed_at = malformed_at
        self.n = 0
        self.closed = False

    def start(self):
        h = self.h
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "keep-alive")
        h.send_header("X-Accel-Buffering", "no")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.flush()

    def _write(self, data, flush=True):
        if self.closed:
            return
        try:
            self.h.wfile.write(data)
            if flush:
                self.h.wfile.flush()
            self.h.resp_bytes += len(data)
        except OSError:
            self.closed = True
            self.h.close_connection = True

    def send(self, ev):
        if self.closed:
            return
        text = json.dumps(ev, separators=(",", ":"), ensure_ascii=False)
        if self.malformed_at is not None and self.n == self.malformed_at:
            text = text[:max(1, len(text) // 2)]
        frame = (("data: " + text) if self.form == "data" else text).encode() + b"\n\n"
        self._write(b"%x\r\n" % len(frame) + frame + b"\r\n")
        self.n += 1
        if self.drop_after is not None and self.n >= self.drop_after:
            self.abort()

    def finish(self):
        # not flushed here: http.server flushes once the request is logged
        self._write(b"0\r\n\r\n", flush=False)

    def abort(self):
        self.closed = True
        self.h.abort_connection()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "opensandbox-fake/1.0"
    request_id = "-"
    # buffered: a plain response reaches the socket when http.server flushes
    # after dispatch() returns, i.e. after the request log has its entry, so
    # a client that got an answer always finds it in /_fake/requests
    wbufsize = 1 << 16

    # ---- plumbing

    def setup(self):
        super().setup()
        # execd (Go's net/http) and the lifecycle server (uvicorn) set
        # TCP_NODELAY: events flushed one by one must not wait for the
        # client's delayed ACK on a kept-alive connection
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        if APP is not None and APP.verbose:
            sys.stderr.write("opensandbox-fake: %s\n" % (fmt % args))

    def handle_expect_100(self):
        ok = super().handle_expect_100()
        self.wfile.flush()
        return ok

    def send_response(self, code, message=None):
        super().send_response(code, message)
        self.send_header("X-Request-ID", self.request_id)
        self.status = code

    def abort_connection(self):
        self.close_connection = True
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def do_GET(self):
        self.dispatch()

    do_POST = do_DELETE = do_PATCH = do_PUT = do_HEAD = do_OPTIONS = do_GET

    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ValueError("truncated chunked body")
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        if n < 0:
            raise ValueError("negative Content-Length")
        data = self.rfile.read(n) if n else b""
        if len(data) != n:
            raise ValueError("truncated body")
        return data

    def send_bytes(self, status, body, ctype=None, headers=None):
        self.send_response(status)
        if ctype and status != 204:
            self.send_header("Content-Type", ctype)
        if status != 204 and status >= 200:
            self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command == "HEAD" or status == 204:
            return
        drop = self.fault_of("drop_stream")
        if drop is not None and body:
            n = drop.get("after_bytes")
            n = len(body) // 2 if n is None else min(n, len(body))
            self.wfile.write(body[:n])
            self.resp_bytes += n
            self.abort_connection()
            return
        self.wfile.write(body)
        self.resp_bytes += len(body)

    def send_json(self, status, obj, headers=None):
        body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
        if self.fault_of("malformed_json") is not None:
            body = body[:max(1, len(body) // 2)]
        self.send_bytes(status, body, "application/json", headers)

    def send_api_error(self, e):
        self.send_json(e.status, e.json())

    def fault_of(self, kind):
        for f in getattr(self, "faults", ()):
            if f["kind"] == kind:
                return f
        return None

    # ---- dispatch

    def dispatch(self):
        t0 = time.monotonic()
        self.request_id = self.headers.get("X-Request-ID") or str(uuid.uuid4())
        self.status = None
        self.resp_bytes = 0
        self.files = None
        self.faults = []
        self.route = "?"
        self.sid = None
        url = urlsplit(self.path)
        self.upath = url.path or "/"
        self.raw_query = url.query
        self.query = parse_qs(url.query, keep_blank_values=True)
        control = self.upath == "/_fake" or self.upath.startswith("/_fake/")
        try:
            self.body = self.read_body()
        except ValueError as e:
            self.body = b""
            self.close_connection = True
            self.send_json(400, {"code": "GENERAL::BAD_REQUEST", "message": f"bad request body: {e}"})
            return
        try:
            if control:
                self.control()
                return
            ex = self.match_execd()
            self.faults = APP.faults.take(("http_error", "delay", "drop_stream", "malformed_json", "reply", "drip",
                                           "delay_answer"),
                                          self.command, self.upath, ex[0] if ex else None)
            d = self.fault_of("delay")
            if d is not None:
                time.sleep(d["ms"] / 1000.0)
            he = self.fault_of("http_error")
            if he is not None:
                self.route = "fault"
                default = "RUNTIME_ERROR" if ex else "GENERAL::UNKNOWN_ERROR"
                hdrs = {"Retry-After": str(he["retry_after"])} if he.get("retry_after") is not None else None
                self.send_json(he["status"], {"code": he.get("code") or default,
                                              "message": he.get("message") or "injected fault"}, hdrs)
                return
            rp = self.fault_of("reply")
            if rp is not None:
                self.route = "fault"
                self.send_json(rp["status"], rp.get("body"))
                return
            if ex:
                self.execd(*ex)
            else:
                self.lifecycle()
        except ApiError as e:
            self.send_api_error(e)
        except ValidationFailed as e:
            self.send_json(422, {"detail": e.errors})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a bug in the fake: say so loudly
            traceback.print_exc()
            if self.status is None:
                try:
                    self.send_json(500, {"code": "GENERAL::UNKNOWN_ERROR", "message": f"fake server bug: {e!r}"})
                except OSError:
                    pass
            self.close_connection = True
        finally:
            if not control:
                APP.log.add({"ts": time.time(), "method": self.command, "path": self.upath,
                             "query": self.raw_query, "route": self.route, "sandbox": self.sid,
                             "status": self.status, "req_bytes": len(self.body),
                             "resp_bytes": self.resp_bytes, "request_id": self.request_id, "files": self.files,
                             "faults": [f["kind"] for f in self.faults],
                             "ms": round((time.monotonic() - t0) * 1000, 1)})

    def match_execd(self):
        m = PROXY_RE.match(self.upath)
        if m:
            return m.group(1), int(m.group(2)), m.group(3) or "/", "server_proxy"
        m = URI_RE.match(self.upath)
        if m:
            return m.group(1), int(m.group(2)), m.group(3) or "/", "uri"
        hdr = self.headers.get("OpenSandbox-Ingress-To")
        if hdr:
            sid, _, port = hdr.strip().rpartition("-")
            if sid and port.isdigit():
                return sid, int(port), self.upath, "header"
        return None

    # ---- control channel

    def control(self):
        p = self.upath.rstrip("/")
        m = self.command
        try:
            body = json.loads(self.body) if self.body.strip() else {}
        except ValueError as e:
            return self.send_json(400, {"error": f"bad JSON: {e}"})
        seg = p.split("/")[2:]
        try:
            if seg == ["state"] and m == "GET":
                return self.send_json(200, APP.state_json())
            if seg == ["requests"] and m == "GET":
                since = int(self.query.get("since", ["0"])[-1] or 0)
                return self.send_json(200, APP.log.snapshot(since))
            if seg == ["reset"] and m == "POST":
                APP.faults.clear()
                APP.log.reset()
                if body.get("sandboxes"):
                    with APP.lock:
                        ids = list(APP.sandboxes)
                    for sid in ids:
                        APP.remove(sid)
                return self.send_json(200, {"ok": True})
            if seg == ["faults"]:
                if m == "GET":
                    return self.send_json(200, APP.faults.list())
                if m == "POST":
                    return self.send_json(200, APP.faults.add(body))
                if m == "DELETE":
                    APP.faults.clear()
                    return self.send_json(200, {"ok": True})
            if len(seg) == 2 and seg[0] == "faults" and m == "DELETE":
                if APP.faults.remove(int(seg[1])):
                    return self.send_json(200, {"ok": True})
                return self.send_json(404, {"error": "no such fault"})
            if seg == ["config"]:
                if m == "POST":
                    APP.set_config(body)
                with APP.lock:
                    return self.send_json(200, dict(APP.cfg))
            if len(seg) >= 2 and seg[0] == "sandboxes":
                sb = APP.get(seg[1])
                if sb is None:
                    return self.send_json(404, {"error": "no such sandbox"})
                if len(seg) == 2 and m == "GET":
                    return self.send_json(200, App.sandbox_debug(sb))
                if seg[2:] == ["expire"] and m == "POST":
                    with APP.lock:
                        sb.expires = time.time()
                    APP.tick()
                    return self.send_json(200, {"ok": True})
                if seg[2:] == ["state"] and m == "POST":
                    st = body.get("state")
                    if not isinstance(st, str) or not st:
                        return self.send_json(400, {"error": "state is a non-empty string"})
                    with APP.lock:
                        sb.forced = True
                        sb.set_state(st, body.get("reason", "FORCED_BY_TEST"),
                                     body.get("message", f"State forced to {st} by the test."))
                    return self.send_json(200, sb.to_json())
        except ValueError as e:
            return self.send_json(400, {"error": str(e)})
        return self.send_json(404, {"error": f"unknown control route {m} {self.upath}"})

    # ---- lifecycle API

    def check_api_key(self):
        key = APP.cfg["api_key"]
        if not key:
            return
        got = self.headers.get("OPEN-SANDBOX-API-KEY")
        if not got:
            raise ApiError(401, "MISSING_API_KEY",
                           "Authentication credentials are missing. Provide API key via OPEN-SANDBOX-API-KEY header.")
        if got != key:
            raise ApiError(401, "INVALID_API_KEY", "Authentication credentials are invalid. Check your API key and try again.")

    def json_body_422(self):
        if not self.body.strip():
            return MISSING
        try:
            return json.loads(self.body)
        except json.JSONDecodeError as e:
            raise ValidationFailed([v_err("json_invalid", ["body", e.pos], "JSON decode error", {},
                                          {"error": e.msg})])
        except UnicodeDecodeError as e:
            raise ValidationFailed([v_err("json_invalid", ["body", 0], "JSON decode error", {},
                                          {"error": str(e)})])

    def query_int(self, name, default, ge=None, le=None):
        vals = self.query.get(name)
        if not vals:
            return default
        raw = vals[-1]
        try:
            n = int(raw)
        except ValueError:
            raise ValidationFailed([v_err("int_parsing", ["query", name],
                                          "Input should be a valid integer, unable to parse string as an integer", raw)])
        if ge is not None and n < ge:
            raise ValidationFailed([v_err("greater_than_equal", ["query", name],
                                          f"Input should be greater than or equal to {ge}", raw, {"ge": ge})])
        if le is not None and n > le:
            raise ValidationFailed([v_err("less_than_equal", ["query", name],
                                          f"Input should be less than or equal to {le}", raw, {"le": le})])
        return n

    def lifecycle(self):
        p = self.upath
        if p == "/v1" or p.startswith("/v1/"):
            p = p[3:] or "/"
        seg = [s for s in p.split("/") if s]
        m = self.command
        if seg == ["health"]:
            self.route = "GET /health"
            if m != "GET":
                raise ApiError(405, "GENERAL::UNKNOWN_ERROR", "Method Not Allowed")
            return self.send_json(200, {"status": "healthy"})
        self.check_api_key()
        if seg and seg[0] == "sandboxes":
            if len(seg) > 1:
                self.sid = seg[1]
            if len(seg) == 1:
                if m == "POST":
                    self.route = "POST /v1/sandboxes"
                    return self.create_sandbox()
                if m == "GET":
                    self.route = "GET /v1/sandboxes"
                    return self.list_sandboxes()
            elif len(seg) == 2:
                if m == "GET":
                    self.route = "GET /v1/sandboxes/{id}"
                    return self.send_json(200, self.sandbox_or_404(seg[1]).to_json())
                if m == "DELETE":
                    self.route = "DELETE /v1/sandboxes/{id}"
                    self.sandbox_or_404(seg[1])
                    if APP.remove(seg[1]) is None:
                        raise not_found(seg[1])
                    return self.send_bytes(204, b"")
            elif len(seg) == 3:
                action = seg[2]
                if action == "metadata" and m == "PATCH":
                    self.route = "PATCH /v1/sandboxes/{id}/metadata"
                    return self.patch_metadata(seg[1])
                if action in ("pause", "resume") and m == "POST":
                    self.route = f"POST /v1/sandboxes/{{id}}/{action}"
                    return self.pause_resume(seg[1], action)
                if action == "renew-expiration" and m == "POST":
                    self.route = "POST /v1/sandboxes/{id}/renew-expiration"
                    return self.renew(seg[1])
                if action == "snapshots" and m == "POST":
                    self.route = "POST /v1/sandboxes/{id}/snapshots"
                    self.sandbox_or_404(seg[1])
                    raise ApiError(400, "SANDBOX::API_NOT_SUPPORTED", "Snapshots are not supported by this server.")
            elif len(seg) == 4 and seg[2] == "endpoints" and m == "GET":
                self.route = "GET /v1/sandboxes/{id}/endpoints/{port}"
                return self.endpoint(seg[1], seg[3])
        if seg and seg[0] == "snapshots":
            if len(seg) == 1 and m == "GET":
                self.route = "GET /v1/snapshots"
                page = self.query_int("page", 1, ge=1)
                size = self.query_int("pageSize", 20, ge=1)
                return self.send_json(200, {"items": [], "pagination": {
                    "page": page, "pageSize": size, "totalItems": 0, "totalPages": 0, "hasNextPage": False}})
            if len(seg) == 2 and m in ("GET", "DELETE"):
                self.route = f"{m} /v1/snapshots/{{id}}"
                raise ApiError(404, "DOCKER::SNAPSHOT_NOT_FOUND", f"Snapshot {seg[1]} not found.")
        self.route = "unknown"
        raise ApiError(404, "GENERAL::UNKNOWN_ERROR", "Not Found")

    def sandbox_or_404(self, sid):
        sb = APP.get(sid)
        if sb is None:
            raise not_found(sid)
        return sb

    def create_sandbox(self):
        req = validate_create(self.json_body_422(), APP.cfg["min_timeout"])
        if req.get("metadata"):
            check_labels(req["metadata"])
        ext = req.get("extensions") or {}
        if "access.renew.extend.seconds" in ext:
            s = ext["access.renew.extend.seconds"]
            if not re.fullmatch(r"[0-9]+", s) or not 300 <= int(s) <= 86400:
                raise ApiError(400, "SANDBOX::INVALID_PARAMETER",
                               "extensions['access.renew.extend.seconds'] must be an integer from 300 to 86400.")
        if "poolRef" in ext:
            raise ApiError(400, "SANDBOX::API_NOT_SUPPORTED", "Pool mode (extensions.poolRef) is not supported by this runtime.")
        if "snapshotId" in req:
            raise ApiError(400, "SANDBOX::API_NOT_SUPPORTED", "Restoring from snapshots is not supported by this server.")
        if req.get("volumes"):
            raise ApiError(400, "SANDBOX::API_NOT_SUPPORTED", "Volumes are not supported by this server.")
        mx = APP.cfg["max_timeout"]
        if req.get("timeout") and mx and req["timeout"] > mx:
            raise ApiError(400, "SANDBOX::INVALID_PARAMETER",
                           f"timeout {req['timeout']} exceeds the maximum of {mx} seconds.")
        sb = APP.create(req)
        self.sid = sb.id
        da = self.fault_of("delay_answer")
        if da is not None:  # made (listed from now on), answered later: a slow network or gateway
            time.sleep(da["ms"] / 1000.0)
        with APP.lock:
            doc = sb.to_json(create=True)
        self.send_json(202, doc)

    def list_sandboxes(self):
        states = {s.lower() for s in self.query.get("state", []) if s}
        meta_raw = self.query.get("metadata", [""])[-1]
        filters = []
        if meta_raw:
            try:
                filters = parse_qsl(meta_raw, keep_blank_values=True, strict_parsing=True)
            except ValueError:
                raise ApiError(400, "INVALID_METADATA_FORMAT",
                               f"Invalid metadata format {meta_raw!r}: expected k=v pairs joined with '&'.")
        page = self.query_int("page", 1, ge=1)
        size = self.query_int("pageSize", 20, ge=1, le=200)
        with APP.lock:
            sbs = sorted(APP.sandboxes.values(), key=lambda s: s.created, reverse=True)
            sel = [s for s in sbs
                   if (not states or s.state.lower() in states)
                   and all(s.metadata.get(k) == v for k, v in filters)]
            total = len(sel)
            items = [s.to_json() for s in sel[(page - 1) * size: page * size]]
        pages = math.ceil(total / size) if total else 0
        self.send_json(200, {"items": items, "pagination": {
            "page": page, "pageSize": size, "totalItems": total, "totalPages": pages,
            "hasNextPage": page < pages}})

    def patch_metadata(self, sid):
        sb = self.sandbox_or_404(sid)
        body = self.json_body_422()
        if body is MISSING:
            raise ValidationFailed([v_missing(["body"], None)])
        v = V()
        d = v.dict_(body, ["body"])
        if d is not None:
            for k, val in d.items():
                if val is not None:
                    v.str_(val, ["body", k])
        if v.errors:
            raise ValidationFailed(v.errors)
        check_labels(d)
        with APP.lock:
            for k, val in d.items():
                if val is None:
                    sb.metadata.pop(k, None)
                else:
                    sb.metadata[k] = val
            doc = sb.to_json()
        self.send_json(200, doc)

    def pause_resume(self, sid, action):
        sb = self.sandbox_or_404(sid)
        with APP.lock:
            if action == "pause":
                if sb.state != "Running":
                    raise ApiError(409, "DOCKER::SANDBOX_NOT_RUNNING",
                                   f"Sandbox {sid} is {sb.state}; only a Running sandbox can be paused.")
                sb.set_state("Pausing", "CONTAINER_PAUSING", "Sandbox container is pausing.")
            else:
                if sb.state != "Paused":
                    raise ApiError(409, "DOCKER::SANDBOX_NOT_PAUSED",
                                   f"Sandbox {sid} is {sb.state}; only a Paused sandbox can be resumed.")
                sb.set_state("Resuming", "CONTAINER_RESUMING", "Sandbox container is resuming.")
            sb.transition_at = time.time() + 0.1
        self.send_bytes(202, b"")

    def renew(self, sid):
        sb = self.sandbox_or_404(sid)
        body = self.json_body_422()
        if body is MISSING:
            raise ValidationFailed([v_missing(["body"], None)])
        v = V()
        d = v.model_(body, ["body"])
        if d is None:
            raise ValidationFailed(v.errors)
        if "expiresAt" not in d:
            raise ValidationFailed([v_missing(["body", "expiresAt"], d)])
        try:
            new = parse_datetime(d["expiresAt"])
        except (ValueError, TypeError, OverflowError):
            raise ValidationFailed([v_err("datetime_from_date_parsing", ["body", "expiresAt"],
                                          "Input should be a valid datetime or date, invalid character in year",
                                          d["expiresAt"], {"error": "invalid character in year"})])
        with APP.lock:
            if sb.expires is None:
                raise ApiError(409, "DOCKER::INVALID_EXPIRATION",
                               f"Sandbox {sid} has no expiration (manual cleanup); it cannot be renewed.")
            if new <= time.time():
                raise ApiError(400, "DOCKER::INVALID_EXPIRATION", "New expiration time must be in the future.")
            sb.expires = new
        self.send_json(200, {"expiresAt": iso_utc(new)})

    def endpoint(self, sid, port_s):
        sb = self.sandbox_or_404(sid)
        try:
            port = int(port_s)
        except ValueError:
            raise ValidationFailed([v_err("int_parsing", ["path", "port"],
                                          "Input should be a valid integer, unable to parse string as an integer", port_s)])
        if not 1 <= port <= 65535:
            raise ApiError(400, "DOCKER::INVALID_PORT", f"Port {port} is out of range 1..65535.")
        proxy = False
        if "use_server_proxy" in self.query:
            proxy = V().bool_(self.query["use_server_proxy"][-1], ["query", "use_server_proxy"])
            if proxy is None:
                raise ValidationFailed([v_err("bool_parsing", ["query", "use_server_proxy"],
                                              "Input should be a valid boolean, unable to interpret input",
                                              self.query["use_server_proxy"][-1])])
        if "expires" in self.query:
            if proxy:
                raise ApiError(400, "SANDBOX::INVALID_PARAMETER", "expires cannot be combined with use_server_proxy.")
            raise ApiError(400, "SANDBOX::API_NOT_SUPPORTED", "Signed endpoints (expires) are not supported by this runtime.")
        eip = APP.cfg["eip"]
        if eip:
            host = eip if ":" in eip else f"{eip}:{APP.port}"
        else:
            host = self.headers.get("Host") or f"127.0.0.1:{APP.port}"
        doc = {}
        if proxy:
            doc["endpoint"] = f"{host}/sandboxes/{sb.id}/proxy/{port}"
        elif APP.cfg["endpoint_style"] == "header":
            doc["endpoint"] = host
            doc["headers"] = {"OpenSandbox-Ingress-To": f"{sb.id}-{port}"}
        else:
            doc["endpoint"] = f"{host}/{sb.id}/{port}"
        self.send_json(200, doc)

    # ---- execd

    def execd(self, sid, port, rest, via):
        self.sid = sid
        self.route = f"{self.command} execd{rest}"
        sb = APP.get(sid)
        if sb is None:
            raise not_found(sid)
        if port != EXECD_PORT:
            raise ApiError(502, "SANDBOX::ENDPOINT_UNREACHABLE",
                           f"Nothing is reachable on port {port} of sandbox {sid} (only execd, {EXECD_PORT}).")
        with APP.lock:
            state, alive = sb.state, sb.alive()
        if state != "Running" or not alive:
            raise ApiError(502, "SANDBOX::ENDPOINT_UNREACHABLE",
                           f"Sandbox {sid} is {state}: execd is not reachable.")
        ext = sb.extensions.get("access.renew.extend.seconds")
        if ext and APP.cfg["renew_intent"]:
            with APP.lock:
                if sb.expires is not None:
                    sb.expires = max(sb.expires, time.time() + int(ext))
        tok = APP.cfg["execd_token"]
        if tok and self.headers.get("X-EXECD-ACCESS-TOKEN") != tok:
            self.route = f"{self.command} execd(unauthorized)"
            return self.send_json(401, {"error": "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"})
        m = self.command
        r = rest.rstrip("/") or "/"
        seg = [s for s in r.split("/") if s]
        if r == "/ping" and m == "GET":
            if APP.faults.take(("ping_fail",), m, self.upath, sid):
                self.faults.append({"kind": "ping_fail"})
                raise ApiError(502, "SANDBOX::ENDPOINT_UNREACHABLE", "execd is not ready (injected ping_fail).")
            return self.send_bytes(200, b"")
        if r == "/command":
            if m == "POST":
                return self.run_command(sb)
            if m == "DELETE":
                return self.interrupt_command(sb)
        if len(seg) == 3 and seg[:2] == ["command", "status"] and m == "GET":
            self.route = "GET execd/command/status/{id}"
            return self.command_status(sb, seg[2])
        if len(seg) == 3 and seg[0] == "command" and seg[2] == "logs" and m == "GET":
            self.route = "GET execd/command/{id}/logs"
            return self.command_logs(sb, seg[1])
        table = {("POST", "/files/upload"): self.files_upload,
                 ("GET", "/files/download"): self.files_download,
                 ("GET", "/files/info"): self.files_info,
                 ("DELETE", "/files"): self.files_delete,
                 ("GET", "/directories/list"): self.dirs_list,
                 ("POST", "/directories"): self.dirs_make,
                 ("DELETE", "/directories"): self.dirs_delete,
                 ("GET", "/files/search"): self.files_search,
                 ("POST", "/files/mv"): self.files_mv,
                 ("POST", "/files/permissions"): self.files_permissions,
                 ("POST", "/files/replace"): self.files_replace,
                 ("GET", "/metrics"): self.metrics}
        fn = table.get((m, r))
        if fn is None:
            self.route = f"{m} execd(unknown)"
            return self.send_bytes(404, b"404 page not found", "text/plain")
        try:
            return fn(sb)
        except FileNotFoundError as e:
            raise ApiError(404, "FILE_NOT_FOUND", f"file not found: {e.filename or e}")
        except OSError as e:
            raise ApiError(500, "RUNTIME_ERROR", f"{e.strerror or e}: {e.filename or ''}".rstrip(": "))

    def execd_json(self):
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, "INVALID_REQUEST_BODY", f"error parsing request, MAYBE invalid body format. {e}")

    def qpath(self, required=True):
        vals = self.query.get("path")
        if not vals or (required and vals[-1] == ""):
            raise ApiError(400, "MISSING_QUERY", "missing query parameter 'path'")
        return vals

    # -- commands

    def run_command(self, sb):
        req = self.execd_json()
        if not isinstance(req, dict):
            raise ApiError(400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. not an object")

        def bad(msg):
            raise ApiError(400, "INVALID_REQUEST_BODY", f"invalid request, validation error {msg}")

        cmd = req.get("command")
        if not isinstance(cmd, str):
            if cmd is None:
                bad("command is required")
            raise ApiError(400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. command must be a string")
        if cmd.strip() == "":
            bad("command is required")
        cwd = req.get("cwd") or ""
        if not isinstance(cwd, str):
            bad("cwd must be a string")
        background = req.get("background", False)
        if background is None:
            background = False
        if not isinstance(background, bool):
            bad("background must be a boolean")
        timeout = req.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0):
            bad("timeout must be a non-negative integer (milliseconds)")
        uid, gid = req.get("uid"), req.get("gid")
        for name, val in (("uid", uid), ("gid", gid)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 0):
                bad(f"{name} must be a non-negative integer")
        if gid is not None and uid is None:
            bad("gid requires uid")
        envs = req.get("envs") or {}
        if not isinstance(envs, dict) or not all(isinstance(v, str) for v in envs.values()):
            raise ApiError(400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. envs must map strings to strings")
        env = sb.base_env()
        env.update(envs)
        if cwd:
            wd = sb.expand(cwd, env)
            rr = sb.fs.resolve(wd)
            if not rr.exists:
                bad(f"working directory {cwd} does not exist")
            if not rr.is_dir:
                bad(f"working directory {cwd} is not a directory")
            wd = rr.spath
        else:
            wd = "/"
        c = Command(sb, cmd, background, timeout or 0)
        start_error = None
        try:
            c.start(wd, env, uid, gid)
        except OSError as e:
            start_error = str(e)
        with sb.lock:
            sb.commands[c.id] = c
        drop = self.fault_of("drop_stream")
        mal = self.fault_of("malformed_json")
        st = EventStream(self, APP.cfg["sse_form"],
                         drop_after=(drop.get("after_events", 1) if drop else None),
                         malformed_at=(mal.get("after_events", 1) if mal else None))
        st.start()
        st.send({"type": "init", "text": c.id, "timestamp": now_ms()})
        if start_error is not None:
            c.exit_code, c.error, c.finished_ns = 255, start_error, time.time_ns()
            c.done.set()
            st.send({"type": "error", "error": {"ename": "CommandExecError", "evalue": start_error,
                                                "traceback": [start_error]}, "timestamp": now_ms()})
            return self.end_stream(st)
        if background:
            ms = int((time.time() - c.started) * 1000)
            ev = {"type": "execution_complete", "timestamp": now_ms()}
            if ms:
                ev = {"type": "execution_complete", "execution_time": ms, "timestamp": now_ms()}
            st.send(ev)
            return self.end_stream(st)
        out, err = LineTail(c.out_path), LineTail(c.err_path)
        interval = float(APP.cfg["ping_interval"])
        next_ping = time.monotonic() + interval if interval > 0 else None
        try:
            while True:
                finished = c.done.wait(TAIL_INTERVAL)
                if sb.destroyed.is_set():
                    # the container is gone: the connection dies with it
                    st.abort()
                    c.done.wait(5)
                    return
                for line in out.read(final=finished):
                    st.send({"type": "stdout", "text": line, "timestamp": now_ms()})
                for line in err.read(final=finished):
                    st.send({"type": "stderr", "text": line, "timestamp": now_ms()})
                if finished:
                    break
                if next_ping is not None and time.monotonic() >= next_ping:
                    st.send({"type": "ping", "text": "pong", "timestamp": now_ms()})
                    next_ping += interval
        finally:
            out.close()
            err.close()
        if c.exit_code == 0:
            ms = (c.finished_ns - c.started_ns) // 1_000_000
            ev = {"type": "execution_complete", "timestamp": now_ms()}
            if ms:
                ev = {"type": "execution_complete", "execution_time": ms, "timestamp": now_ms()}
        else:
            ev = {"type": "error", "error": {"ename": "CommandExecError", "evalue": str(c.exit_code),
                                             "traceback": [c.error]}, "timestamp": now_ms()}
        st.send(ev)
        self.end_stream(st)

    def end_stream(self, st):
        if not st.closed:
            hold = float(APP.cfg["graceful_close"])
            if hold > 0:
                time.sleep(hold)
            st.finish()

    def interrupt_command(self, sb):
        self.route = "DELETE execd/command"
        cid = (self.query.get("id") or [""])[-1]
        if not cid:
            raise ApiError(400, "MISSING_QUERY", "missing query parameter 'id'")
        with sb.lock:
            c = sb.commands.get(cid)
        if c is None:
            raise ApiError(500, "RUNTIME_ERROR", "error interruptting code context. no such session")
        sig = signal.SIGINT if APP.cfg["interrupt_signal"] == "INT" else signal.SIGTERM
        c.interrupt(sig, float(APP.cfg["interrupt_grace"]))
        self.send_bytes(200, b"")

    def command_status(self, sb, cid):
        with sb.lock:
            c = sb.commands.get(cid)
        if c is None:
            raise ApiError(404, "INVALID_REQUEST_BODY", f"command not found: {cid}")
        self.send_json(200, c.status_json())

    def command_logs(self, sb, cid):
        """Output after a byte cursor (upstream execd's cursor is an offset
        into the combined output file, whatever the spec's wording)."""
        with sb.lock:
            c = sb.commands.get(cid)
        if c is None:
            raise ApiError(404, "INVALID_REQUEST_BODY", f"command not found: {cid}")
        if not c.background:
            raise ApiError(400, "INVALID_REQUEST_BODY", f"command {cid} is not running in background")
        cur = 0
        if self.query.get("cursor"):
            try:
                cur = int(self.query["cursor"][-1])
            except ValueError:
                raise ApiError(400, "INVALID_REQUEST_BODY", "cursor must be an integer")
            if cur < 0:
                raise ApiError(400, "INVALID_REQUEST_BODY", "cursor cannot be negative")
        with open(c.out_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            cur = min(cur, size)
            f.seek(cur)
            data = f.read()
            end = cur + len(data)
        self.send_bytes(200, data, "text/plain; charset=utf-8", {"EXECD-COMMANDS-TAIL-CURSOR": str(end)})

    # -- files

    def files_upload(self, sb):
        self.route = "POST execd/files/upload"
        try:
            parts = parse_multipart(self.body, self.headers.get("Content-Type"))
        except MultipartError as e:
            raise ApiError(400, "INVALID_FILE", f"error parsing multipart form: {e}")
        if not parts:
            raise ApiError(400, "INVALID_FILE", "multipart form is empty")
        # Go's ParseMultipartForm: a part is a file iff it has a filename
        metas = [p for p in parts if p.name == "metadata" and p.filename]
        files = [p for p in parts if p.name == "file" and p.filename]
        if not metas:
            raise ApiError(400, "INVALID_FILE_METADATA", "metadata file is missing (send it as a file part)")
        if not files:
            raise ApiError(400, "INVALID_FILE_CONTENT", "file is missing")
        if len(metas) != len(files):
            raise ApiError(400, "INVALID_FILE", f"metadata count {len(metas)} does not match file count {len(files)}")
        env = sb.base_env()
        self.files = len(files)
        for meta, f in zip(metas, files):
            try:
                md = json.loads(meta.data)
            except (ValueError, UnicodeDecodeError) as e:
                raise ApiError(400, "INVALID_FILE_METADATA", f"invalid metadata: {e}")
            if not isinstance(md, dict):
                raise ApiError(400, "INVALID_FILE_METADATA", "invalid metadata: not an object")
            path = md.get("path")
            if not isinstance(path, str) or not path:
                raise ApiError(400, "INVALID_FILE_METADATA", "metadata path is empty")
            mode = md.get("mode") or 0
            if isinstance(mode, bool) or not isinstance(mode, int):
                raise ApiError(400, "INVALID_FILE_METADATA", "metadata mode must be an integer")
            owner, group = md.get("owner") or "", md.get("group") or ""
            if not isinstance(owner, str) or not isinstance(group, str):
                raise ApiError(400, "INVALID_FILE_METADATA", "metadata owner/group must be strings")
            r = sb.fs.resolve(sb.expand(path, env))
            if r.is_dir:
                raise ApiError(500, "RUNTIME_ERROR", f"open {r.spath}: is a directory")
            sb.fs.writable(r, "open")
            sb.fs.makedirs(os.path.dirname(r.spath))
            r = sb.fs.resolve(r.spath)
            sb.fs.writable(r, "open")
            fd = os.open(r.host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(f.data)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            finally:
                os.close(fd)
            sb.fs.chmod_chown(sb.fs.resolve(r.spath), mode, owner, group, default_owner=True)
        self.send_bytes(200, b"")

    def files_download(self, sb):
        self.route = "GET execd/files/download"
        path = self.qpath()[-1]
        r = sb.fs.resolve(path)
        if not r.exists or r.host is None:
            raise ApiError(404, "FILE_NOT_FOUND", f"file not found: {path}")
        if r.is_dir:
            raise ApiError(500, "RUNTIME_ERROR", f"{path} is a directory")
        fd = os.open(r.host, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ApiError(500, "RUNTIME_ERROR", f"{path} is not a regular file")
            size = st.st_size
            start, end, status = 0, size - 1, 200
            rng = self.headers.get("Range")
            if rng is not None and "," not in rng:
                mm = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", rng)
                ok = mm is not None and (mm.group(1) or mm.group(2))
                if ok:
                    if mm.group(1):
                        start = int(mm.group(1))
                        end = int(mm.group(2)) if mm.group(2) else size - 1
                        ok = start < size and end >= start
                        end = min(end, size - 1)
                    else:
                        n = int(mm.group(2))
                        ok = n > 0 and size > 0
                        start, end = max(0, size - n), size - 1
                if not ok:
                    self.send_json(416, {"code": "UNKNOWN"}, {"Content-Range": f"bytes */{size}"})
                    return
                status = 206
            length = max(0, end - start + 1)
            base = os.path.basename(r.spath).replace('"', "")
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Disposition", f'attachment; filename="{base}"')
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Last-Modified", self.date_time_string(st.st_mtime))
            self.send_header("Content-Length", str(length))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.end_headers()
            drop = self.fault_of("drop_stream")
            limit = length
            if drop is not None:
                limit = drop.get("after_bytes")
                limit = length // 2 if limit is None else min(limit, length)
            os.lseek(fd, start, os.SEEK_SET)
            sent = 0
            drip = self.fault_of("drip")
            while sent < limit:
                if drip is not None:  # one byte, then a pause: never silent for long
                    if sent:
                        time.sleep(drip["ms"] / 1000.0)
                    b = os.read(fd, 1)
                    if not b:
                        break
                    self.wfile.write(b)
                    self.wfile.flush()
                    sent += 1
                    self.resp_bytes += 1
                    continue
                b = os.read(fd, min(1 << 20, limit - sent))
                if not b:
                    break
                self.wfile.write(b)
                sent += len(b)
                self.resp_bytes += len(b)
            if drop is not None:
                self.abort_connection()
        finally:
            os.close(fd)

    def files_info(self, sb):
        self.route = "GET execd/files/info"
        out = {}
        for p in self.query.get("path", []):
            r = sb.fs.resolve(p)
            if not r.exists or r.host is None:
                raise ApiError(404, "FILE_NOT_FOUND", f"file not found: {p}")
            st = os.stat(r.host)
            out[p] = sb.fs.info(clean_path(p), st)
        self.send_json(200, out)

    def files_delete(self, sb):
        self.route = "DELETE execd/files"
        for p in self.query.get("path", []):
            r = sb.fs.resolve(p, follow=False)
            if not r.exists:
                continue
            if r.is_dir:
                raise ApiError(500, "RUNTIME_ERROR", f"remove {p}: path is a directory")
            sb.fs.writable(r, "remove")
            os.unlink(r.host)
        self.send_bytes(200, b"")

    def dirs_list(self, sb):
        self.route = "GET execd/directories/list"
        path = self.qpath()[-1]
        depth = 1
        if self.query.get("depth"):
            try:
                depth = int(self.query["depth"][-1])
            except ValueError:
                raise ApiError(400, "INVALID_REQUEST_BODY", "depth must be an integer")
            if depth < 0:
                raise ApiError(400, "INVALID_REQUEST_BODY", "depth must be >= 0")
        r = sb.fs.resolve(path, follow=False)
        if not r.exists:
            raise ApiError(404, "FILE_NOT_FOUND", f"directory not found: {path}")
        if stat.S_ISLNK(r.st.st_mode):
            raise ApiError(400, "INVALID_REQUEST_BODY", f"{path} is a symbolic link; pass the real directory")
        if not r.is_dir:
            raise ApiError(400, "INVALID_REQUEST_BODY", f"{path} is not a directory")
        out = []

        def walk(rr, level):
            for sp, hp, st in sb.fs.children(rr):
                out.append(sb.fs.info(sp, st))
                if level < depth and stat.S_ISDIR(st.st_mode):
                    walk(sb.fs.resolve(sp, follow=False), level + 1)

        if depth > 0:
            walk(r, 1)
        self.send_json(200, out)

    def dirs_make(self, sb):
        self.route = "POST execd/directories"
        req = self.execd_json()
        if not isinstance(req, dict):
            raise ApiError(400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. not an object")
        for path, perm in req.items():
            perm = perm or {}
            if not isinstance(perm, dict):
                raise ApiError(400, "INVALID_REQUEST_BODY", f"permission of {path} must be an object")
            mode = perm.get("mode") or 0
            if isinstance(mode, bool) or not isinstance(mode, int):
                raise ApiError(400, "INVALID_REQUEST_BODY", "mode must be an integer")
            r = sb.fs.makedirs(path, 0o755)
            sb.fs.chmod_chown(r, mode, perm.get("owner"), perm.get("group"))
        self.send_bytes(200, b"")

    def dirs_delete(self, sb):
        self.route = "DELETE execd/directories"
        for p in self.query.get("path", []):
            r = sb.fs.resolve(p, follow=False)
            if not r.exists:
                continue
            sb.fs.writable(r, "remove")
            if r.is_dir:
                shutil.rmtree(r.host)
            else:
                os.unlink(r.host)
        self.send_bytes(200, b"")

    def files_search(self, sb):
        self.route = "GET execd/files/search"
        path = self.qpath()[-1]
        pattern = (self.query.get("pattern") or ["**"])[-1] or "**"
        r = sb.fs.resolve(path)
        if not r.exists:
            raise ApiError(404, "FILE_NOT_FOUND", f"directory not found: {path}")
        if not r.is_dir:
            raise ApiError(400, "INVALID_REQUEST_BODY", f"{path} is not a directory")
        out = []

        def walk(rr):
            for sp, hp, st in sb.fs.children(rr):
                if stat.S_ISDIR(st.st_mode):
                    walk(sb.fs.resolve(sp, follow=False))
                elif pattern == "**" or fnmatch.fnmatchcase(os.path.basename(sp), pattern.replace("**", "*")):
                    out.append(sb.fs.info(sp, st))

        walk(r)
        self.send_json(200, out)

    def files_mv(self, sb):
        self.route = "POST execd/files/mv"
        req = self.execd_json()
        if not isinstance(req, list):
            raise ApiError(400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. expected an array")
        for it in req:
            if not isinstance(it, dict) or not isinstance(it.get("src"), str) or not isinstance(it.get("dest"), str) \
                    or not it["src"] or not it["dest"]:
                raise ApiError(400, "INVALID_REQUEST_BODY", "each item needs src and dest")
            src = sb.fs.resolve(it["src"], follow=False)
            if not src.exists:
                raise ApiError(404, "FILE_NOT_FOUND", f"file not found: {it['src']}")
            sb.fs.writable(src, "rename")
            dest = sb.fs.resolve(it["dest"], follow=False)
            if dest.exists:
                raise ApiError(500, "RUNTIME_ERROR", f"rename {it['src']} {it['dest']}: file exists")
            sb.fs.makedirs(os.path.dirname(dest.spath))
            dest = sb.fs.resolve(dest.spath, follow=False)
            sb.fs.writable(dest, "rename")
            if dest.spath == src.spath or dest.spath.startswith(src.spath.rstrip("/") + "/"):
                raise ApiError(500, "RUNTIME_ERROR", f"rename {it['src']} {it['dest']}: invalid argument")
            os.rename(src.host, dest.host)
        self.send_bytes(200, b"")

    def files_permissions(self, sb):
        self.route = "POST execd/files/permissions"
        req = self.execd_json()
        if not isinstance(req, dict):
            raise ApiError(400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. not an object")
        for path, perm in req.items():
            if not isinstance(perm, dict):
                raise ApiError(400, "INVALID_REQUEST_BODY", f"permission of {path} must be an object")
            mode = perm.get("mode") or 0
            if isinstance(mode, bool) or not isinstance(mode, int):
                raise ApiError(400, "INVALID_REQUEST_BODY", "mode must be an integer")
            r = sb.fs.resolve(path)
            if not r.exists:
                raise ApiError(500, "RUNTIME_ERROR", f"chmod {path}: no such file or directory")
            sb.fs.chmod_chown(r, mode, perm.get("owner"), perm.get("group"))
        self.send_bytes(200, b"")

    def files_replace(self, sb):
        self.route = "POST execd/files/replace"
        req = self.execd_json()
        if not isinstance(req, dict):
            raise ApiError(400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. not an object")
        verbose = (self.query.get("verbose") or ["false"])[-1].lower() in ("true", "1")
        jobs = []
        for path, it in req.items():
            if not isinstance(it, dict) or not isinstance(it.get("old"), str) or not isinstance(it.get("new"), str):
                raise ApiError(400, "INVALID_REQUEST_BODY", f"{path}: old and new are required strings")
            if it["old"] == "":
                raise ApiError(400, "INVALID_REQUEST_BODY", f"{path}: old must not be empty")
            jobs.append((path, it["old"], it["new"]))
        counts = {}
        for path, old, new in jobs:
            r = sb.fs.resolve(path)
            if not r.exists:
                raise ApiError(500, "RUNTIME_ERROR", f"open {path}: no such file or directory")
            if r.is_dir:
                raise ApiError(500, "RUNTIME_ERROR", f"read {path}: is a directory")
            sb.fs.writable(r, "write")
            with open(r.host, "rb") as f:
                data = f.read()
            o, n = old.encode(), new.encode()
            counts[path] = {"replacedCount": data.count(o)}
            if counts[path]["replacedCount"]:
                mode = os.stat(r.host).st_mode
                with open(r.host, "wb") as f:
                    f.write(data.replace(o, n))
                os.chmod(r.host, stat.S_IMODE(mode))
        if verbose:
            return self.send_json(200, counts)
        self.send_bytes(200, b"")

    def metrics(self, sb):
        self.route = "GET execd/metrics"
        mem = {}
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    mem[k] = int(v.split()[0])
        except (OSError, ValueError, IndexError):
            pass
        total = mem.get("MemTotal", 0) / 1024.0
        avail = mem.get("MemAvailable", 0) / 1024.0
        load = os.getloadavg()[0]
        cpus = float(os.cpu_count() or 1)
        self.send_json(200, {"cpu_count": cpus, "cpu_used_pct": round(min(100.0, 100.0 * load / cpus), 2),
                             "mem_total_mib": round(total, 2), "mem_used_mib": round(total - avail, 2),
                             "timestamp": now_ms()})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client (or a drop_stream fault) went away: not a bug
        super().handle_error(request, client_address)


def main(argv=None):
    global APP
    ap = argparse.ArgumentParser(description="Fake OpenSandbox lifecycle server + execd (tests only).")
    ap.add_argument("--root", required=True, help="directory for sandboxes (DIR/<id>)")
    ap.add_argument("--port", type=int, default=0, help="0: let the OS choose")
    ap.add_argument("--port-file", help="write the port here once listening")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--sse-form", choices=("data", "bare"), default="data")
    ap.add_argument("--ready-delay", type=float, default=0.2)
    ap.add_argument("--endpoint-style", choices=("uri", "header"), default="uri")
    ap.add_argument("--eip", default=None)
    ap.add_argument("--execd-token", default=None)
    ap.add_argument("--max-timeout", type=int, default=None, help="server.max_sandbox_timeout_seconds")
    ap.add_argument("--min-timeout", type=int, default=60, help="smallest create timeout (the spec's 60)")
    ap.add_argument("--renew-intent", action="store_true")
    ap.add_argument("--ping-interval", type=float, default=3.0)
    ap.add_argument("--graceful-close", type=float, default=1.0)
    ap.add_argument("--interrupt-signal", choices=("TERM", "INT"), default="TERM")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    for tool in (BWRAP, NSENTER, SETPRIV):
        if not os.access(tool, os.X_OK):
            ap.error(f"{tool} is required")
    os.umask(0o022)
    APP = App(args)
    httpd = Server(("127.0.0.1", args.port), Handler)
    APP.port = httpd.server_address[1]

    def on_signal(signum, frame):
        APP.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="http", daemon=True).start()
    threading.Thread(target=APP.ticker, name="ticker", daemon=True).start()
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{APP.port}\n")
        os.replace(tmp, args.port_file)
    print(f"opensandbox-fake listening on http://127.0.0.1:{APP.port} root={APP.root}", flush=True)
    try:
        while not APP.stop.is_set():
            APP.spawner.run_one(0.1)
    finally:
        APP.spawner.close()
        httpd.shutdown()
        httpd.server_close()
        APP.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
