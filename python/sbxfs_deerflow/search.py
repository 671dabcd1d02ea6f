# SPDX-License-Identifier: MIT
"""list_dir, glob and grep over the thread's directories on the mount, with
the contracts of the semantics reference §8 (shared by DeerFlow's remote
providers) and §1.3:

* IGNORE_PATTERNS (§8.1): matched by basename, case-sensitive, on every
  segment of a path relative to the root searched; the root itself is never
  ignored (§8.2: "Descendants whose root-relative path is ignored are
  dropped; the root itself is kept");
* list_dir (§8.2): a missing root raises FileNotFoundError, a directory that
  cannot be read raises OSError ("some files could not be read; narrow the
  path"), never [] on failure (§1.3, §15); at most LIST_LIMIT entries
  (`head -n 500`, whose SIGPIPE counts as success);
* glob and grep (§8.3): one result past the cap is looked at, and
  `truncated` says whether there was one (`head -n (limit+1)`,
  more_than_limit); a missing root raises FileNotFoundError; a directory
  that cannot be read raises OSError (grep status 2, find status 1:
  "narrow the path").

Where the sections are silent, the choices are (README, "Using sbxfs from
DeerFlow"): entries are returned as virtual paths, directories of list_dir
end in "/" (§6.3) and are sorted; a glob pattern without "/" matches the
basename at any depth, one with "/" is anchored at the root and "**" spans
any number of directories; symlinks are listed but never walked into;
grep reads files of at most GREP_MAX_FILE bytes (AIO's max_file_size "1M",
§5.7) that have no NUL byte in their first 8 KiB, searches the first
GREP_LINE_SCAN characters of each line (a bounded regex cost on minified
files) and returns lines cut to GREP_LINE_SHOWN characters (§5.7).
"""

import fnmatch
import os
import re
import stat
from dataclasses import dataclass

# §8.1, verbatim
IGNORE_PATTERNS = (
    ".git", ".svn", ".hg", ".bzr", "node_modules", "__pycache__", ".venv", "venv", ".env", "env", ".tox",
    ".nox", ".eggs", "*.egg-info", "site-packages", "dist", "build", ".next", ".nuxt", ".output", ".turbo",
    "target", "out", ".idea", ".vscode", "*.swp", "*.swo", "*~", ".project", ".classpath", ".settings",
    ".DS_Store", "Thumbs.db", "desktop.ini", "*.lnk", "*.log", "*.tmp", "*.temp", ".upload-*.part", "*.bak",
    "*.cache", ".cache", "logs", ".coverage", "coverage", ".nyc_output", "htmlcov", ".pytest_cache",
    ".mypy_cache", ".ruff_cache",
)
LIST_LIMIT = 500          # §8.2 remote_list_dir_command(limit=500)
GREP_MAX_FILE = 1 << 20   # §5.7 grep max_file_size "1M"
GREP_LINE_SHOWN = 200     # §5.7 "truncate each line to 200 characters"
GREP_LINE_SCAN = 4096
BINARY_SNIFF = 8192

_EXACT = frozenset(p for p in IGNORE_PATTERNS if not any(c in p for c in "*?["))
_GLOBS = re.compile("|".join(fnmatch.translate(p) for p in IGNORE_PATTERNS if any(c in p for c in "*?[")))


try:  # DeerFlow's own GrepMatch when DeerFlow is there, so its tools see their type
    from deerflow.sandbox.search import GrepMatch  # type: ignore
except Exception:  # noqa: BLE001
    @dataclass(frozen=True)
    class GrepMatch:
        """One grep hit (§1.3): path, line_number (1-based), line."""

        path: str
        line_number: int
        line: str


def ignored(name):
    """§8.1: does a basename match an ignore pattern (case-sensitive)?"""
    return name in _EXACT or _GLOBS.match(name) is not None


def _unreadable(path, e):
    return OSError(e.errno, f"some files could not be read ({e.strerror}: {e.filename}); narrow the path", path)


def _match_parts(pat, parts):
    reach = {0}
    for p in pat:
        if p == "**":
            reach = set(range(min(reach), len(parts) + 1))
        else:
            reach = {i + 1 for i in reach if i < len(parts) and fnmatch.fnmatchcase(parts[i], p)}
        if not reach:
            return False
    return len(parts) in reach


def path_matches(pattern, rel):
    """Does rel (relative to the search root, "/"-separated) match pattern?
    No "/" in pattern: the basename, at any depth; else anchored at the root,
    "**" spanning zero or more directories."""
    pattern = pattern.strip("/")
    if "/" not in pattern:
        return pattern == "**" or fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], pattern)
    return _match_parts([p for p in pattern.split("/") if p], rel.split("/"))


def _scan(host):
    """Sorted (name, host path, is_dir) of a directory, ignored names
    dropped; symlinks are not directories here (never walked into)."""
    out = []
    with os.scandir(host) as it:
        for e in it:
            if ignored(e.name):
                continue
            out.append((e.name, e.path, e.is_dir(follow_symlinks=False)))
    out.sort()
    return out


def _root_kind(host, virtual):
    try:
        st = os.stat(host)  # the root was resolved: no symlink left
    except FileNotFoundError:
        raise FileNotFoundError(2, "No such file or directory", virtual) from None
    return st


def list_dir(host, virtual, max_depth=2, limit=LIST_LIMIT):
    """§8.2 / §6.3: the entries under a directory down to max_depth levels
    (1 = its children), directories ending in "/", sorted."""
    if not isinstance(max_depth, int) or max_depth < 0:
        raise ValueError("max_depth must be an integer >= 0")
    st = _root_kind(host, virtual)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(20, "Not a directory", virtual)
    out = []

    def walk(h, v, depth):
        if depth > max_depth or len(out) >= limit:
            return
        try:
            entries = _scan(h)
        except FileNotFoundError:
            if h == host:
                raise FileNotFoundError(2, "No such file or directory", virtual) from None
            return  # removed while we walked
        except OSError as e:
            raise _unreadable(virtual, e) from None
        for name, hp, is_dir in entries:
            if len(out) >= limit:
                return
            vp = f"{v}/{name}"
            out.append(vp + "/" if is_dir else vp)
            if is_dir:
                walk(hp, vp, depth + 1)

    walk(host, virtual.rstrip("/") or "/", 1)
    return sorted(out)


def _walk_files(host, want_dirs):
    """(rel, host path, is_dir) of everything under host, depth first,
    ignored names pruned, symlinks never followed."""
    stack = [("", host)]
    while stack:
        rel_dir, h = stack.pop()
        try:
            entries = _scan(h)
        except FileNotFoundError:
            if h == host:
                raise
            continue
        except OSError as e:
            raise _unreadable(host, e) from None
        subdirs = []
        for name, hp, is_dir in entries:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if is_dir:
                subdirs.append((rel, hp))
                if want_dirs:
                    yield rel, hp, True
            else:
                yield rel, hp, False
        stack.extend(reversed(subdirs))


def _walk_roots(roots, want_dirs):
    """_walk_files over several (prefix, host) roots, as one tree whose
    top-level directories are the prefixes (the virtual /mnt/user-data)."""
    for prefix, h in roots:
        if not prefix:
            yield from _walk_files(h, want_dirs)
            continue
        if want_dirs:
            yield prefix, h, True
        for rel, hp, is_dir in _walk_files(h, want_dirs):
            yield f"{prefix}/{rel}", hp, is_dir


def glob(host, virtual, pattern, include_dirs=False, max_results=200):
    """§1.3 / §8.3: (matches, truncated).  host is a directory on the mount,
    or a list of (name, directory) making up a virtual directory."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("pattern must be a non-empty string")
    if not isinstance(max_results, int) or max_results < 0:
        raise ValueError("max_results must be an integer >= 0")
    if isinstance(host, list):
        roots = host
    else:
        st = _root_kind(host, virtual)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(20, "Not a directory", virtual)
        roots = [("", host)]
    base = virtual.rstrip("/")
    matches = []
    for rel, _, _ in _walk_roots(roots, include_dirs):
        if path_matches(pattern, rel):
            matches.append(f"{base}/{rel}")
            if len(matches) > max_results:  # one past the cap (§8.3)
                return matches[:max_results], True
    return matches, False


def _binary(fd):
    head = os.pread(fd, BINARY_SNIFF, 0)
    return b"\0" in head


def _cut(line):
    line = line.rstrip("\r\n")
    return line if len(line) <= GREP_LINE_SHOWN else line[:GREP_LINE_SHOWN - 3] + "..."


def grep(host, virtual, pattern, glob_pattern=None, literal=False, case_sensitive=False, max_results=100):
    """§1.3 / §8.3: (list of GrepMatch, truncated)."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("pattern must be a non-empty string")
    if not isinstance(max_results, int) or max_results < 0:
        raise ValueError("max_results must be an integer >= 0")
    try:  # validated before any file is read (§5.7 "validate the regex locally first")
        rx = re.compile(re.escape(pattern) if literal else pattern, 0 if case_sensitive else re.IGNORECASE)
    except re.error as e:
        raise ValueError(f"invalid regular expression {pattern!r}: {e}") from None
    if isinstance(host, list):
        files = _walk_roots(host, False)
        base = virtual.rstrip("/")
    else:
        st = _root_kind(host, virtual)
        if stat.S_ISREG(st.st_mode):
            files = [(virtual.rsplit("/", 1)[-1], host, False)]
            base = None
        elif stat.S_ISDIR(st.st_mode):
            files = _walk_files(host, False)
            base = virtual.rstrip("/")
        else:
            raise OSError(22, "not a regular file or a directory", virtual)
    matches = []
    for rel, hp, _ in files:
        if base is not None and glob_pattern and not path_matches(glob_pattern, rel):
            continue
        vpath = f"{base}/{rel}" if base is not None else virtual
        try:
            fd = os.open(hp, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            if base is None:
                raise
            continue  # a symlink, or gone meanwhile
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode) or fst.st_size > GREP_MAX_FILE or _binary(fd):
                continue
            with os.fdopen(os.dup(fd), "r", encoding="utf-8", errors="replace", newline="\n") as f:
                for n, line in enumerate(f, 1):
                    if rx.search(line[:GREP_LINE_SCAN]):
                        matches.append(GrepMatch(path=vpath, line_number=n, line=_cut(line)))
                        if len(matches) > max_results:
                            return matches[:max_results], True
        finally:
            os.close(fd)
    return matches, False
