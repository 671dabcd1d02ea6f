# SPDX-License-Identifier: MIT
"""The sbxfs mount as this package sees it: where it is, whether something
is mounted there, and the few control files it reads and writes.

Everything goes through plain file operations on the mount (the sbxfs
interface, docs/interface.md); nothing here talks to the daemon otherwise.
Control files are read whole with direct I/O semantics (no meaningful
size), so they are read until end of file, never by st_size.
"""

import json
import os

DEFAULT_MOUNTPOINT = "/sbx"
_READ_CHUNK = 1 << 16


class SbxfsNotMountedError(RuntimeError):
    """No sbxfs answers at the mountpoint this package was pointed at."""


def find_mountpoint(mountpoint=None):
    """The mountpoint to use and where that choice came from.

    The argument wins, then $SBXFS_MOUNTPOINT, then DeerFlow's
    `sandbox.mountpoint` when DeerFlow's configuration can be imported (its
    SandboxConfig keeps extra keys), then /sbx."""
    if mountpoint:
        return os.fspath(mountpoint), "the mountpoint argument"
    env = os.environ.get("SBXFS_MOUNTPOINT")
    if env:
        return env, "$SBXFS_MOUNTPOINT"
    try:  # DeerFlow is optional: its config is read only when it is there
        from deerflow.config import get_app_config  # type: ignore

        value = getattr(get_app_config().sandbox, "mountpoint", None)
        if value:
            return os.fspath(value), "sandbox.mountpoint in DeerFlow's config.yaml"
    except Exception:  # noqa: BLE001 - DeerFlow missing or its config unloadable
        pass
    return DEFAULT_MOUNTPOINT, "the default"


def read_all(path, limit=16 << 20):
    """A control or job file read to its end (at most limit bytes)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts, size = [], 0
        while size < limit:
            chunk = os.read(fd, min(_READ_CHUNK, limit - size))
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)
    finally:
        os.close(fd)


def write_command(path, text):
    """One write(2) of a command to a control file (sbxfs reads one command
    per write).  Raises the OSError the daemon answered."""
    data = text.encode() if isinstance(text, str) else text
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        n = os.write(fd, data)
        if n != len(data):
            raise OSError(f"short write to {path}: {n} of {len(data)} bytes")
    finally:
        os.close(fd)


class Mount:
    """An sbxfs mount: `path`, its `.status` and `.config`."""

    def __init__(self, mountpoint=None):
        path, source = find_mountpoint(mountpoint)
        self.path = os.path.abspath(path)
        self.source = source
        self.status()  # fails clearly when nothing is mounted there

    def status(self):
        """/sbx/.status as a dict; SbxfsNotMountedError when there is none."""
        try:
            st = json.loads(read_all(os.path.join(self.path, ".status")))
        except (OSError, ValueError) as e:
            why = getattr(e, "strerror", None) or str(e)
            raise SbxfsNotMountedError(
                f"no sbxfs is mounted at {self.path} (from {self.source}): reading .status failed: {why}. "
                f"Mount it (sbxfs -c /etc/sbxfs/mount.conf {self.path}), or name the mountpoint: "
                "SbxfsSandboxProvider(mountpoint=...), $SBXFS_MOUNTPOINT, or sandbox.mountpoint in "
                "DeerFlow's config.yaml") from e
        if not isinstance(st, dict) or "provider" not in st:
            raise SbxfsNotMountedError(f"{self.path}/.status is not sbxfs's: {st!r:.200}")
        return st

    def config(self):
        """The effective configuration (/sbx/.config), secrets as "***"."""
        return json.loads(read_all(os.path.join(self.path, ".config")))
