# SPDX-License-Identifier: MIT
"""SbxfsSandbox: DeerFlow's `Sandbox` (the semantics reference §1) on one
sbxfs sandbox directory, MOUNT/<user>/<thread>.

File methods work on the thread's directories through the mount (paths.py
maps the agent's /mnt/user-data/... and the skills root onto them); commands
run as sbxfs jobs (jobs.py); list_dir, glob and grep follow §8 (search.py).
Files written here are created by the sandbox's uid (sbxfs does it), so the
sandbox's jobs can change them and no permission fix-up is needed.
"""

import errno
import os
import stat

from . import jobs, search
from .paths import DATA_DIRS, USER_DATA, PathMap

DOWNLOAD_CAP = 100 << 20  # §1.3 / §5.7 / §6.3: 100 MiB, OSError(EFBIG) past it
READ_CAP = 100 << 20      # read_file of a whole file: the same cap

try:  # DeerFlow's abstract class when DeerFlow is there (isinstance checks pass)
    from deerflow.sandbox.sandbox import Sandbox as _SandboxBase  # type: ignore
except Exception:  # noqa: BLE001 - no DeerFlow: a base of our own
    class _SandboxBase:
        def __init__(self, id):
            self._id = id

        @property
        def id(self):
            return self._id


def _split_lines(text):
    """Lines with their "\\n" kept; only "\\n" ends a line (§15: never
    splitlines(), which also splits on \\r, \\x0b, \\x0c, \\x1c...)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


class SbxfsSandbox(_SandboxBase):
    """One sbxfs sandbox as DeerFlow's Sandbox.  Its id is the sbxfs scope
    token (DeerFlow's `derive_sandbox_scope_token`, §4.1)."""

    # §1.2: each command runs in a fresh /bin/sh (a job), no shell survives
    # between calls: an explicit False, which evidence checks trust
    persistent_shell_sessions = False

    def __init__(self, id, *, path, user, thread, skills_root="/mnt/skills"):
        super().__init__(id)
        self._id = id
        self.path = os.fspath(path)
        self.user = user
        self.thread = thread
        self._paths = PathMap(self.path, skills_root)

    @property
    def id(self):
        return self._id

    def __repr__(self):
        return f"SbxfsSandbox({self._id!r}, {self.user}/{self.thread} at {self.path})"

    # ---- commands (§1.3 execute_command) -------------------------------------------------

    def execute_command(self, command, env=None, timeout=None):
        """Run command with /bin/sh in /mnt/user-data/workspace as an sbxfs
        job.  env: per-call variables (keys checked as §1.1, ValueError);
        timeout: seconds, at most the sandbox's bash_command_timeout (a
        longer one gets that).  Returns DeerFlow's combined output text;
        errors come back as "Error: ..." text (§1.3)."""
        jobs.validate_extra_env(env)
        jobs.check_timeout(timeout)
        if not isinstance(command, str):
            raise TypeError(f"command must be a str, not {type(command).__name__}")
        if not command.strip():
            return "(no output)"  # what `sh -c ''` prints; sbxfs refuses an empty job
        if not os.path.isdir(self.path):
            return (f"Error: sandbox {self._id} ({self.user}/{self.thread}) is not active on sbxfs "
                    "(released); acquire it again")
        try:
            result = jobs.run(self.path, command, env=env, timeout=timeout)
        except OSError as e:
            return f"Error: the command could not be run in sandbox {self._id}: {e.strerror or e}"
        return jobs.render(result)

    def execute_command_in_scope(self, command, env=None, timeout=None, *, scope_id=None):
        """§1.3 default: the scope is dropped (each command is its own shell
        already, so scopes never share state)."""
        return self.execute_command(command, env=env, timeout=timeout)

    def release_command_scope(self, scope_id):
        """§1.3 default: nothing is kept per scope."""
        return None

    # ---- files (§1.3) --------------------------------------------------------------------

    def _open_regular(self, path, cap):
        r = self._paths.resolve(path)
        if r.host is None:
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        fd = os.open(r.host, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
            if st.st_size > cap:
                raise OSError(errno.EFBIG, f"file is larger than {cap >> 20} MiB", path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _read_capped(self, fd, cap, path):
        parts, size = [], 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            size += len(b)
            if size > cap:  # it grew while we read
                raise OSError(errno.EFBIG, f"file is larger than {cap >> 20} MiB", path)
            parts.append(b)
        return b"".join(parts)

    def read_file(self, path, start_line=None, end_line=None):
        """Text of a file; start_line and end_line are 1-indexed and both
        inclusive (§1.3); a range past the end gives what there is (maybe
        "").  A file with a NUL byte is binary: OSError (use download_file);
        other bytes that are not UTF-8 read as U+FFFD."""
        for name, v in (("start_line", start_line), ("end_line", end_line)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise TypeError(f"{name} must be an int or None")
        fd = self._open_regular(path, READ_CAP)
        try:
            data = self._read_capped(fd, READ_CAP, path)
        finally:
            os.close(fd)
        if b"\0" in data:
            raise OSError(errno.EINVAL, "binary file (it holds NUL bytes): read it with download_file", path)
        text = data.decode("utf-8", "replace")
        if start_line is None and end_line is None:
            return text
        lines = _split_lines(text)
        first = max(start_line or 1, 1)
        last = len(lines) if end_line is None else end_line
        if last < first:
            return ""
        return "".join(lines[first - 1:last])

    def download_file(self, path):
        """Raw bytes of a file under /mnt/user-data (§1.3): PermissionError
        for traversal or anything outside it, OSError for a file that is
        missing or unreadable, OSError(EFBIG) past 100 MiB."""
        v = self._paths.resolve(path).virtual
        if not (v.startswith(USER_DATA + "/")):
            raise PermissionError(errno.EACCES, f"Access denied: downloads are from {USER_DATA} only", path)
        fd = self._open_regular(path, DOWNLOAD_CAP)
        try:
            return self._read_capped(fd, DOWNLOAD_CAP, path)
        finally:
            os.close(fd)

    def _write(self, path, data, append):
        r = self._paths.resolve(path, write=True)
        parent = os.path.dirname(r.host)
        try:
            os.makedirs(parent, exist_ok=True)  # §1.3: parent directories are created
        except FileExistsError:  # a file where a directory should be
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", path) from None
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
        fd = os.open(r.host, flags, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            os.close(fd)

    def write_file(self, path, content, append=False):
        """Create or overwrite a text file (UTF-8); append=True appends
        (§1.3).  Parent directories are created."""
        if not isinstance(content, str):
            raise TypeError(f"content must be a str, not {type(content).__name__}")
        self._write(path, content.encode("utf-8", "surrogateescape"), append)

    def update_file(self, path, content):
        """Binary write or overwrite (§1.3; the primitive of DeerFlow's
        upload sync, §9)."""
        if not isinstance(content, (bytes, bytearray, memoryview)):
            raise TypeError(f"content must be bytes, not {type(content).__name__}")
        self._write(path, bytes(content), False)

    # ---- listing and search (§1.3, §8) ---------------------------------------------------

    def _user_data_roots(self):
        return [(d, os.path.join(self.path, d)) for d in DATA_DIRS]

    def list_dir(self, path, max_depth=2):
        """Paths under a directory to max_depth levels (§8.2): directories
        end in "/"; FileNotFoundError for a missing path and OSError for one
        that cannot be read, never [] for a failure (§1.3)."""
        r = self._paths.resolve(path)
        if r.host is None:  # /mnt/user-data: its three directories
            out = []
            for d, host in self._user_data_roots():
                if max_depth >= 1:
                    out.append(f"{USER_DATA}/{d}/")
                if max_depth >= 2:
                    out.extend(search.list_dir(host, f"{USER_DATA}/{d}", max_depth - 1))
            return sorted(out)[:search.LIST_LIMIT]
        return search.list_dir(r.host, r.virtual, max_depth)

    def glob(self, path, pattern, *, include_dirs=False, max_results=200):
        """(matches, truncated) of a glob pattern under path (§1.3, §8.3)."""
        r = self._paths.resolve(path)
        host = self._user_data_roots() if r.host is None else r.host
        return search.glob(host, r.virtual, pattern, include_dirs=include_dirs, max_results=max_results)

    def grep(self, path, pattern, *, glob=None, literal=False, case_sensitive=False, max_results=100):
        """(matches, truncated): GrepMatch(path, line_number, line) of a
        regex (or a literal string) in one text file or a tree (§1.3, §8.3);
        case-insensitive unless asked; ValueError for a bad regex."""
        r = self._paths.resolve(path)
        host = self._user_data_roots() if r.host is None else r.host
        return search.grep(host, r.virtual, pattern, glob_pattern=glob, literal=literal,
                           case_sensitive=case_sensitive, max_results=max_results)
