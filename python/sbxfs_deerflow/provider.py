# SPDX-License-Identifier: MIT
"""SbxfsSandboxProvider: DeerFlow's `SandboxProvider` (the semantics
reference §2) on an sbxfs mount.

    sandbox:
      use: sbxfs_deerflow:SbxfsSandboxProvider

acquire is `mkdir MOUNT/<user>/<thread>` (sbxfs creates the sandbox, or
reclaims the thread's warm one), release is `rmdir` (the sandbox is parked
in sbxfs's warm pool with its files and processes, as DeerFlow's remote
providers park theirs, §2.2).  The id handed out is the sbxfs scope token,
DeerFlow's `derive_sandbox_scope_token(user_id, thread_id)` (§4.1), so
checkpoints and logs that carry it keep their meaning.  get() is the pure,
in-memory lookup §2.2 asks for.  Acquire and release of one (user, thread)
never overlap (§4.2, a lock per scope); several agents of one thread get the
same sandbox, and only the last release parks it when they go through a
lease manager (§3: DeerFlow's, or lease.SandboxLeaseManager).

Network policy (§7) is sbxfs's `events` and `network` files of the sandbox;
skills (§10.3) are copied into its `skills/` and fsync'd, which returns once
the sandbox has them (sbxfs syncs upload-based sandboxes; bind-mount ones
see them at once).
"""

import asyncio
import json
import logging
import os
import re
import shutil
import stat
import threading
import uuid

from .lease import KeyedLocks, run_sync_lifecycle_operation
from .mount import Mount, read_all, write_command
from .sandbox import SbxfsSandbox

log = logging.getLogger(__name__)

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
DECISIONS = ("deny", "allow_temporary", "allow_sandbox")  # §2.2, §7.4
SKILL_CATEGORIES = ("public", "custom", "legacy", "integrations")  # §10.1 SkillProjectionPaths

try:  # DeerFlow's abstract class when DeerFlow is there
    from deerflow.sandbox.sandbox_provider import SandboxProvider as _ProviderBase  # type: ignore
except Exception:  # noqa: BLE001
    class _ProviderBase:
        pass


def _default_user():
    """DeerFlow's effective user when DeerFlow is there (AIO and E2B resolve
    `user_id or get_effective_user_id()`, §4.1), else "default"."""
    try:
        from deerflow.runtime.user_context import get_effective_user_id  # type: ignore

        user = get_effective_user_id()
        if user:
            return str(user)
    except Exception:  # noqa: BLE001
        pass
    return "default"


class SbxfsSandboxProvider(_ProviderBase):
    """DeerFlow's SandboxProvider on an sbxfs mount (§2)."""

    # §2.1: DeerFlow's gateway writes uploads with update_file through the
    # mount (created by the sandbox's uid, on every sbxfs provider, remote
    # ones too), and reads outputs with download_file
    uses_thread_data_mounts = False
    # §2.1: files written through the mount belong to the sandbox's uid
    # (sbxfs, DESIGN §5): nothing to chmod
    needs_upload_permission_adjustment = False
    # §2.1: every tool goes through this thread's own skills/ (each thread
    # has its own projection), filled by sync_agent_skills; there is no host
    # bash to bypass it
    supports_agent_skill_isolation = True

    def __init__(self, mountpoint=None, *, default_user=None, **kwargs):
        self._mount = Mount(mountpoint)
        self._default_user = default_user
        self._lock = threading.Lock()
        self._scopes = KeyedLocks()
        self._sandboxes = {}   # id -> SbxfsSandbox, active through this provider
        self._identity = {}    # id -> (user, thread)
        self._shut = False
        if kwargs:
            log.warning("SbxfsSandboxProvider: unknown arguments ignored: %s", ", ".join(sorted(kwargs)))

    @property
    def mountpoint(self):
        return self._mount.path

    # ---- names -----------------------------------------------------------------------------

    def _names(self, thread_id, user_id):
        user = user_id or self._default_user or _default_user()
        thread = thread_id if thread_id is not None else f"anon-{uuid.uuid4().hex[:12]}"
        for what, v in (("user_id", user), ("thread_id", thread)):
            if not isinstance(v, str) or not _NAME.fullmatch(v):
                raise ValueError(f"{what} {v!r} must match ^[A-Za-z0-9_-]{{1,64}}$ (sbxfs's names, as "
                                 "DeerFlow's thread ids)")
        return user, thread

    def _skills_root(self):
        try:
            return self._mount.config().get("skills", {}).get("container_path") or "/mnt/skills"
        except (OSError, ValueError):
            return "/mnt/skills"

    # ---- lifecycle (§2.2) -------------------------------------------------------------------

    def acquire(self, thread_id=None, *, user_id=None):
        """mkdir of the thread's sandbox directory (creates it, or reclaims
        its warm sandbox); the same user and thread always give the same id.
        An acquire of a sandbox that is active already (another agent, or
        another process on the same mount) reuses it."""
        if self._shut:
            raise RuntimeError("SbxfsSandboxProvider has been shut down")
        user, thread = self._names(thread_id, user_id)
        d = os.path.join(self._mount.path, user, thread)
        with self._scopes.hold((user, thread)):
            try:
                os.makedirs(os.path.join(self._mount.path, user), exist_ok=True)
                os.mkdir(d)
            except FileExistsError:
                pass  # active already: this is its sandbox
            except OSError as e:
                raise OSError(e.errno, f"sbxfs could not acquire {user}/{thread}: {e.strerror}", d) from e
            try:
                # acquire: async (sbxfs's default): the mkdir answered once the
                # create started; `ready` returns once the sandbox is ready, or
                # fails with the create's errno (DeerFlow's acquire returns a
                # usable sandbox). Other threads' acquires do not wait for it.
                read_all(os.path.join(d, "ready"))
            except OSError as e:
                raise OSError(e.errno, f"sbxfs could not acquire {user}/{thread}: {e.strerror}", d) from e
            sid = read_all(os.path.join(d, "id")).decode().strip()
            with self._lock:
                known = self._identity.get(sid)
                if known is not None and known != (user, thread):  # §5.2 identity-collision guard
                    raise RuntimeError(f"sandbox id collision for {sid}: tracked as {known}, requested "
                                       f"{(user, thread)}")
                if sid not in self._sandboxes:
                    self._sandboxes[sid] = SbxfsSandbox(sid, path=d, user=user, thread=thread,
                                                        skills_root=self._skills_root())
                    self._identity[sid] = (user, thread)
        log.info("acquired sbxfs sandbox %s for %s/%s", sid, user, thread)
        return sid

    async def acquire_async(self, thread_id=None, *, user_id=None):
        return await run_sync_lifecycle_operation(self.acquire, thread_id, user_id=user_id)

    def get(self, sandbox_id):
        """§2.2: a pure in-memory lookup, no I/O."""
        with self._lock:
            return self._sandboxes.get(sandbox_id)

    def get_scoped(self, sandbox_id, *, thread_id, user_id):
        """§2.2: the sandbox only if sandbox_id is recorded for exactly this
        (user, thread); None otherwise (fail closed)."""
        user = user_id or self._default_user or _default_user()
        with self._lock:
            if self._identity.get(sandbox_id) == (user, thread_id):
                return self._sandboxes.get(sandbox_id)
        return None

    def release(self, sandbox_id):
        """rmdir: the sandbox goes to sbxfs's warm pool with its files and
        processes (§2.2: "park in the warm pool, not destroy").  Idempotent."""
        with self._lock:
            sb = self._sandboxes.get(sandbox_id)
            ident = self._identity.get(sandbox_id)
        if sb is None:
            return
        with self._scopes.hold(ident):
            with self._lock:
                if self._sandboxes.get(sandbox_id) is not sb:
                    return
                del self._sandboxes[sandbox_id]
                del self._identity[sandbox_id]
            try:
                os.rmdir(sb.path)
            except FileNotFoundError:
                pass  # released already (by another process on the mount)
        log.info("released sbxfs sandbox %s (%s/%s) into the warm pool", sandbox_id, sb.user, sb.thread)

    def reset(self):
        """§2.2: forget what this instance tracks; sandboxes stay as they are
        (sbxfs's own reload is its SIGHUP)."""
        with self._lock:
            self._sandboxes.clear()
            self._identity.clear()

    def shutdown(self):
        """Release every sandbox this instance acquired (into sbxfs's warm
        pool; the daemon destroys them at its own shutdown).  Idempotent."""
        with self._lock:
            if self._shut:
                return
            self._shut = True
            ids = list(self._sandboxes)
        for sid in ids:
            try:
                self.release(sid)
            except OSError as e:
                log.warning("shutdown: release of %s failed: %s", sid, e)

    # ---- skills (§10.3) ---------------------------------------------------------------------

    def sync_agent_skills(self, sandbox_id, *, thread_id, user_id, projection):
        """Make the sandbox's skills exactly the projection's four category
        directories (§10.1 SkillProjectionPaths: public, custom, legacy,
        integrations): everything is checked before anything changes (§10.3:
        non-canonical or symlinked roots, links that are absolute or leave
        their category: ValueError), then changed files are copied, removed
        ones deleted, and an fsync of skills/ returns once the sandbox has
        them."""
        sb = self.get_scoped(sandbox_id, thread_id=thread_id, user_id=user_id) or self.get(sandbox_id)
        if sb is None:
            raise RuntimeError(f"sandbox {sandbox_id} is not active through this provider")
        plan = {}
        for cat in SKILL_CATEGORIES:
            src = projection.get(cat) if isinstance(projection, dict) else getattr(projection, cat, None)
            plan[cat] = _check_skill_root(cat, src)
        skills = os.path.join(sb.path, "skills")
        for cat, src in plan.items():
            _mirror(src, os.path.join(skills, cat))
        fd = os.open(skills, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)  # sbxfs: returns once the sandbox has the change (DESIGN §8)
        finally:
            os.close(fd)

    async def sync_agent_skills_async(self, sandbox_id, *, thread_id, user_id, projection):
        """§2.2: drained on cancellation."""
        return await run_sync_lifecycle_operation(self.sync_agent_skills, sandbox_id, thread_id=thread_id,
                                                  user_id=user_id, projection=projection)

    # ---- network policy (§2.2, §7) ------------------------------------------------------------

    def _net(self):
        try:
            return self._mount.config().get("network", {})
        except (OSError, ValueError):
            return {}

    def sandbox_network_mode(self):
        return self._net().get("mode", "open")

    def sandbox_network_temporary_grant_ttl(self):
        return int(self._net().get("temporary_grant_ttl", 300))

    def _sandbox_net(self, sb):
        try:
            return json.loads(read_all(os.path.join(sb.path, "network")))
        except (OSError, ValueError):
            return None

    def consume_network_policy_events(self, sandbox_id):
        """§7.4 consume: the oldest unsurfaced event as [dict], every other
        unsurfaced one superseded; [] when none (or none can come)."""
        sb = self.get(sandbox_id)
        if sb is None:
            return []
        try:
            fd = os.open(os.path.join(sb.path, "events"), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            data = b""
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                data += chunk
        except BlockingIOError:
            return []  # nothing pending
        except OSError:
            return []
        finally:
            os.close(fd)
        out = []
        for line in data.decode("utf-8", "replace").split("\n"):
            if line.strip():
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                out.append({k: ev.get(k) for k in ("request_id", "host", "port", "method", "created_at")})
        return out

    async def consume_network_policy_events_async(self, sandbox_id):
        return await asyncio.to_thread(self.consume_network_policy_events, sandbox_id)

    def deny_pending_network_policy_events(self, sandbox_id):
        """§7.4 deny-pending: True when done or irrelevant (no allowlist with
        prompt), False when it could not be done."""
        sb = self.get(sandbox_id)
        if sb is None:
            return False
        net = self._sandbox_net(sb)
        if net is None:
            return False
        if net.get("mode") != "allowlist" or net.get("approval") != "prompt":
            return True
        try:
            write_command(os.path.join(sb.path, "network"), "deny-pending\n")
            return True
        except OSError as e:
            log.warning("deny-pending of %s failed: %s", sandbox_id, e)
            return False

    async def deny_pending_network_policy_events_async(self, sandbox_id):
        return await asyncio.to_thread(self.deny_pending_network_policy_events, sandbox_id)

    def decide_network_policy_request(self, sandbox_id, request_id, decision):
        """§7.4 decide: True once decided (the same decision again too);
        False for an unknown sandbox, id or decision, or one decided
        differently (EEXIST)."""
        if decision not in DECISIONS or not isinstance(request_id, str) or not request_id \
                or any(c.isspace() for c in request_id):
            return False
        sb = self.get(sandbox_id)
        if sb is None:
            return False
        try:
            write_command(os.path.join(sb.path, "network"), f"{decision} {request_id}\n")
            return True
        except OSError as e:
            log.info("decision %s on %s of %s refused: %s", decision, request_id, sandbox_id, e)
            return False

    async def decide_network_policy_request_async(self, sandbox_id, request_id, decision):
        return await asyncio.to_thread(self.decide_network_policy_request, sandbox_id, request_id, decision)


# ---- the skills projection ------------------------------------------------------------------

def _check_skill_root(cat, src):
    """The checks of §10.3 before anything changes: a root is None (empty),
    or an absolute canonical directory that is not a symlink; every symlink
    in it is relative and stays inside it; only files, directories and
    symlinks.  Returns the root or None."""
    if src is None:
        return None
    src = os.fspath(src)
    if not os.path.isabs(src) or os.path.normpath(src) != src:
        raise ValueError(f"skills {cat}: {src!r} is not a canonical absolute path")
    if not os.path.lexists(src):
        return None
    if os.path.islink(src) or os.path.realpath(src) != src:
        raise ValueError(f"skills {cat}: {src!r} is (or lies under) a symlink")
    if not os.path.isdir(src):
        raise ValueError(f"skills {cat}: {src!r} is not a directory")
    for dirpath, dirs, files in os.walk(src):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(p)
                if os.path.isabs(target):
                    raise ValueError(f"skills {cat}: {p} is an absolute symlink")
                resolved = os.path.normpath(os.path.join(dirpath, target))
                if resolved != src and not resolved.startswith(src + os.sep):
                    raise ValueError(f"skills {cat}: {p} points outside its category")
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise ValueError(f"skills {cat}: {p} is not a file, a directory or a symlink")
    return src


def _kind(st):
    return "dir" if stat.S_ISDIR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode) else "file"


def _remove(p):
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p)
    else:
        os.unlink(p)


def _mirror(src, dst):
    """dst (on the mount) becomes exactly src: a file is copied only when its
    size or modification time differ (copy2 keeps the time), entries src
    lacks are removed, an entry whose kind changed is replaced."""
    if src is None:
        if os.path.lexists(dst):
            _remove(dst)
        return
    if os.path.lexists(dst) and not (os.path.isdir(dst) and not os.path.islink(dst)):
        _remove(dst)
    os.makedirs(dst, exist_ok=True)
    want = {}
    with os.scandir(src) as it:
        for e in it:
            want[e.name] = e
    with os.scandir(dst) as it:
        have = {e.name: e for e in it}
    for name, e in have.items():
        w = want.get(name)
        if w is None or _kind(w.stat(follow_symlinks=False)) != _kind(e.stat(follow_symlinks=False)):
            _remove(e.path)
    for name, w in want.items():
        s = w.stat(follow_symlinks=False)
        target = os.path.join(dst, name)
        k = _kind(s)
        if k == "dir":
            _mirror(w.path, target)
        elif k == "link":
            link = os.readlink(w.path)
            if not os.path.lexists(target) or os.readlink(target) != link:
                if os.path.lexists(target):
                    os.unlink(target)
                os.symlink(link, target)
        else:
            try:
                t = os.lstat(target)
                same = t.st_size == s.st_size and t.st_mtime_ns == s.st_mtime_ns
            except FileNotFoundError:
                same = False
            if not same:
                shutil.copy2(w.path, target, follow_symlinks=False)
