# SPDX-License-Identifier: MIT
"""Virtual paths (what an agent names) onto the thread's directories on the
mount (what this process opens).

The sandbox sees /mnt/user-data/{workspace,uploads,outputs} and the skills
at skills.container_path (/mnt/skills); sbxfs shows the same directories at
MOUNT/<user>/<thread>/{workspace,uploads,outputs,skills}.  The rules are
DeerFlow's (the semantics reference):

* a path with a `..` segment, after `\\` became `/`, is refused with
  PermissionError (§6.5 `_reject_path_traversal`, §5.7 download_file);
* a relative path, or one outside /mnt/user-data and the skills root, is
  refused with PermissionError (§6.5 `validate_local_tool_path`; §14: "the
  path must start with the segment mnt/user-data");
* /mnt/user-data itself holds only workspace, uploads and outputs: other
  names under it are refused (§6.5: "Resolved user-data paths must stay
  inside the workspace, uploads or outputs roots");
* the skills are read-only for writes: OSError(EROFS) (§6.3 read-only
  enforcement);
* symlinks are resolved the way the sandbox would resolve them (an absolute
  target is a sandbox path, a relative one is relative to the link's
  directory), and the result must stay inside those roots, else
  PermissionError("path escapes mounted directory") (§6.3 forward
  resolution: "covers both .. and symlink escapes").  The mount itself never
  follows a symlink (it is nosymfollow), so this process resolves them.
"""

import errno
import os
import posixpath
import stat

USER_DATA = "/mnt/user-data"
DATA_DIRS = ("workspace", "uploads", "outputs")
MAX_SYMLINKS = 40  # as the kernel's ELOOP limit


class Resolved:
    """A virtual path resolved: `host` (the path on the mount), `virtual`
    (canonical, symlinks resolved), `writable`."""

    __slots__ = ("host", "virtual", "writable")

    def __init__(self, host, virtual, writable):
        self.host, self.virtual, self.writable = host, virtual, writable

    def __repr__(self):
        return f"Resolved({self.virtual!r} -> {self.host!r})"


def _denied(path, why):
    return PermissionError(errno.EACCES, f"Access denied: {why}", path)


def normalize(path):
    """The canonical absolute virtual path, or PermissionError."""
    if not isinstance(path, str):
        raise TypeError(f"path must be a str, not {type(path).__name__}")
    p = path.replace("\\", "/")
    if ".." in p.split("/"):
        raise _denied(path, "path traversal ('..') is not allowed")
    if not p.startswith("/"):
        raise _denied(path, f"paths must be absolute, under {USER_DATA}")
    parts = [s for s in p.split("/") if s and s != "."]
    return "/" + "/".join(parts)


class PathMap:
    """The roots of one sandbox: virtual prefix -> directory on the mount."""

    def __init__(self, sandbox_dir, skills_root="/mnt/skills"):
        self.sandbox_dir = os.fspath(sandbox_dir)
        self.skills_root = normalize(skills_root or "/mnt/skills")
        self.roots = {f"{USER_DATA}/{d}": (os.path.join(self.sandbox_dir, d), True) for d in DATA_DIRS}
        self.roots[self.skills_root] = (os.path.join(self.sandbox_dir, "skills"), False)

    def _root_of(self, virtual):
        """(root, host_dir, writable) of the longest root holding virtual."""
        best = None
        for root, (host, writable) in self.roots.items():
            if virtual == root or virtual.startswith(root + "/"):
                if best is None or len(root) > len(best[0]):
                    best = (root, host, writable)
        return best

    def is_user_data_root(self, virtual):
        return virtual == USER_DATA

    def resolve(self, path, *, write=False, follow_last=True):
        """Resolve an agent's path.  write: the caller changes it (EROFS on
        the skills).  follow_last: a symlink as the last component is
        resolved too (reads and writes through it, as the sandbox would)."""
        virtual = normalize(path)
        seen = 0
        while True:
            if virtual == USER_DATA:
                if write:
                    raise _denied(path, f"{USER_DATA} itself cannot be written; use its workspace, uploads "
                                        "or outputs")
                return Resolved(None, virtual, False)
            found = self._root_of(virtual)
            if found is None:
                if virtual.startswith(USER_DATA + "/"):
                    raise _denied(path, f"only {', '.join(DATA_DIRS)} exist under {USER_DATA}")
                raise _denied(path, f"path is outside {USER_DATA} and {self.skills_root}")
            root, host_root, writable = found
            rest = virtual[len(root):].lstrip("/")
            parts = rest.split("/") if rest else []
            host = host_root
            link = None
            for i, name in enumerate(parts):
                host = os.path.join(host, name)
                last = i == len(parts) - 1
                if last and not follow_last:
                    break
                try:
                    st = os.lstat(host)
                except FileNotFoundError:
                    break  # the rest does not exist yet (a create)
                except NotADirectoryError:
                    break
                if stat.S_ISLNK(st.st_mode):
                    link = (i, os.readlink(host))
                    break
            if link is None:
                if write and not writable:
                    raise OSError(errno.EROFS, f"Read-only: {root} is read-only in the sandbox", path)
                return Resolved(os.path.join(host_root, *parts), virtual, writable)
            seen += 1
            if seen > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, "Too many levels of symbolic links", path)
            i, target = link
            base = posixpath.join(root, *parts[:i])  # the link's directory, virtual
            joined = target if target.startswith("/") else posixpath.join(base, target)
            rest_after = parts[i + 1:]
            candidate = posixpath.normpath(posixpath.join(joined, *rest_after))
            if not candidate.startswith("/"):
                candidate = "/" + candidate
            if self._root_of(candidate) is None and candidate != USER_DATA:
                raise _denied(path, "path escapes mounted directory (through a symlink)")
            virtual = candidate

    def to_virtual(self, host):
        """The virtual path of a path on the mount under one of the roots."""
        host = os.fspath(host)
        for root, (h, _) in sorted(self.roots.items(), key=lambda kv: -len(kv[1][0])):
            if host == h:
                return root
            if host.startswith(h + os.sep):
                return root + "/" + host[len(h) + 1:].replace(os.sep, "/")
        raise ValueError(f"{host} is not under this sandbox's directories")
