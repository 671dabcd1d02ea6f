# SPDX-License-Identifier: MIT
"""execute_command as an sbxfs job (docs/interface.md, Jobs), and its output
in DeerFlow's combined format.

A command runs in a job slot of its own, MOUNT/<user>/<thread>/jobs/<name>:
the environment goes to the slot's `env` file as NUL-separated KEY=VALUE
entries (values may hold anything, newlines too; they reach no argv and no
command text), the per-call timeout to its `timeout` file, the command to
`cmd` (the job starts when that file is closed); `exit` blocks until the
end, then stdout, stderr and status are read.

Keys are checked first, as every DeerFlow sandbox does (§1.1
`_validate_extra_env`, with its message).  The text returned is DeerFlow's
(§6.3 local sandbox, §5.7 AIO statuses):

    stdout [+ "\\nStd Error:\\n" + stderr] [+ "\\nExit Code: N" if N != 0]

or "(no output)"; a command past its timeout gets the timeout notice and
"Exit Code: 124" (§5.7 hard_timeout), one killed before its end "Command was
killed before completion." (§5.7 killed), each stream is cut at
OUTPUT_CAP bytes with §6.3's notice, and an outcome sbxfs could not learn
(the job was lost) is an "Error: ..." text, as DeerFlow returns errors
(§1.3), never a replay.

Slots are kept after the command ends: a process a command left in the
background (`server &`) lives in its slot's cgroup, and removing the slot
would end it.  The oldest finished slots beyond KEEP_SLOTS are removed.
"""

import json
import math
import os
import re
import secrets
import time

from .mount import read_all, write_command

OUTPUT_CAP = 10 << 20           # §6.3: at most 10 MiB of each stream
KEEP_SLOTS = 256
SLOT_PREFIX = "df-"
TIMEOUT_EXIT_CODE = 124         # §5.7 hard_timeout renders "Exit Code: 124"
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def validate_extra_env(env):
    """§1.1 `_validate_extra_env`: None and {} pass; a key that is not a
    string or not a POSIX name raises ValueError naming it and the rule.
    Values are not validated (they may hold anything but NUL, which no
    environment can carry)."""
    if not env:
        return
    for k, v in env.items():
        if not isinstance(k, str) or not _ENV_KEY.fullmatch(k):
            raise ValueError(
                f"extra_env key {k!r} is not a valid POSIX environment variable name (must match "
                "^[A-Za-z_][A-Za-z0-9_]*$). This protects shell-using sandbox implementations from command "
                "injection via the key.")
        if not isinstance(v, str):
            raise ValueError(f"extra_env value of {k!r} must be a string, not {type(v).__name__}")
        if "\0" in v:
            raise ValueError(f"extra_env value of {k!r} contains a NUL byte, which no environment can carry")


def check_timeout(timeout):
    """None, or a positive finite number of seconds (ValueError otherwise)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return timeout


class JobResult:
    __slots__ = ("state", "exit", "stdout", "stderr", "stdout_bytes", "stderr_bytes", "timeout", "reason",
                 "error")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))


def _slot_name():
    # time first: names sort by age, for pruning
    return f"{SLOT_PREFIX}{time.time_ns():x}-{secrets.token_hex(4)}"


def _read_stream(path, cap):
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts, size = [], 0
        while size < cap:
            b = os.read(fd, min(1 << 20, cap - size))
            if not b:
                break
            parts.append(b)
            size += len(b)
        return b"".join(parts)
    finally:
        os.close(fd)


def _prune(jobs_dir):
    try:
        names = sorted(n for n in os.listdir(jobs_dir) if n.startswith(SLOT_PREFIX))
    except OSError:
        return
    for name in names[:max(0, len(names) - KEEP_SLOTS)]:
        try:
            os.rmdir(os.path.join(jobs_dir, name))
        except OSError:
            pass  # still running (EBUSY), or gone


def run(sandbox_dir, command, env=None, timeout=None):
    """Run command in the sandbox; returns a JobResult (never raises for
    what the command did; OSError when the sandbox cannot take a job)."""
    jobs_dir = os.path.join(sandbox_dir, "jobs")
    slot = os.path.join(jobs_dir, _slot_name())
    os.mkdir(slot)
    if env:
        entries = b"".join(f"{k}={v}".encode("utf-8", "surrogateescape") + b"\0" for k, v in env.items())
        write_command(os.path.join(slot, "env"), entries)
    applied_timeout = None
    if timeout is not None:
        try:
            # a decimal the daemon reads (no exponent), never rounded down to 0
            write_command(os.path.join(slot, "timeout"), f"{math.ceil(timeout * 1000) / 1000:.3f}")
            applied_timeout = timeout
        except OSError as e:
            if e.errno != 22:  # EINVAL: past bash_command_timeout, which then applies
                raise
    data = command.encode("utf-8", "surrogateescape")
    fd = os.open(os.path.join(slot, "cmd"), os.O_WRONLY | os.O_CLOEXEC)
    try:
        off = 0
        while off < len(data):
            off += os.write(fd, data[off:off + (1 << 20)])
    finally:
        os.close(fd)  # starts the job; its error is the start's
    try:
        code = int(read_all(os.path.join(slot, "exit")).strip() or b"255")
    except BaseException:
        # interrupted (KeyboardInterrupt, a signal): the command must not
        # outlive the caller that gave up on it
        try:
            write_command(os.path.join(slot, "ctl"), "kill")
        except OSError:
            pass
        raise
    st = json.loads(read_all(os.path.join(slot, "status")))
    out = _read_stream(os.path.join(slot, "stdout"), OUTPUT_CAP)
    err = _read_stream(os.path.join(slot, "stderr"), OUTPUT_CAP)
    _prune(jobs_dir)
    return JobResult(state=st.get("state"), exit=code, stdout=out, stderr=err,
                     stdout_bytes=st.get("stdout_bytes") or len(out), stderr_bytes=st.get("stderr_bytes") or len(err),
                     timeout=st.get("timeout") if applied_timeout is None else applied_timeout,
                     reason=st.get("reason"))


def _stream_text(data, total):
    text = data.decode("utf-8", "replace")
    if total > len(data):  # §6.3's notice
        text += f"\n... [output truncated after {len(data)} of {total} bytes; remaining output discarded] ..."
    return text


def render(r):
    """DeerFlow's combined output of a JobResult (§6.3, §5.7)."""
    if r.state in ("lost", "failed"):
        return ("Error: Sandbox command outcome is unknown and the command was not retried "
                f"(sbxfs job {r.state}: {_stream_text(r.stderr, r.stderr_bytes).strip() or 'no detail'}).")
    out = _stream_text(r.stdout, r.stdout_bytes)
    if r.stderr or r.stderr_bytes:
        out += "\nStd Error:\n" + _stream_text(r.stderr, r.stderr_bytes)
    if r.state == "timed_out":
        t = r.timeout
        out += (f"\nCommand timed out after {t:g} seconds and was terminated. To run a long-lived process, "
                "start it in the background with &." if isinstance(t, (int, float)) else
                "\nCommand timed out and was terminated.")
        return out + f"\nExit Code: {TIMEOUT_EXIT_CODE}"
    if r.state == "killed":
        why = " (its output passed resources.output)" if r.reason == "output limit" else ""
        out += f"\nCommand was killed before completion{why}."
    if r.exit:
        out += f"\nExit Code: {r.exit}"
    return out if out else "(no output)"
