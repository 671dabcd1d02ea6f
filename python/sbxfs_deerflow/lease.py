# SPDX-License-Identifier: MIT
"""Execution leases (the semantics reference §3) and per-key serialisation
(§4.2), for deployments that drive SbxfsSandboxProvider without DeerFlow's
own lease manager (DeerFlow brings its `SandboxLeaseManager`, which calls
this provider the same way).

* `run_sync_lifecycle_operation` (§3.1): a blocking lifecycle call runs to
  completion on its worker thread even when the awaiting task is
  cancelled; the cancellation is delivered after it.
* `KeyedLocks` (§4.2 AcquireSerializer, synchronous part): one lock per key,
  the table drained back to empty when nobody holds or waits.
* `SandboxLeaseManager` (§3.3): owners (agent executions) bound to a
  sandbox; only the last owner that asked for it releases the provider's
  sandbox (borrowers never do); a binding whose sandbox the provider no
  longer has is dropped without a release; acquire, reuse, retain and
  release of one (user, thread) never overlap; provider calls happen
  outside the metadata lock.
"""

import asyncio
import logging
import threading
import uuid
from contextlib import contextmanager

log = logging.getLogger(__name__)


async def run_sync_lifecycle_operation(func, *args, **kwargs):
    """§3.1: await func(*args, **kwargs) on a worker thread; if the awaiting
    task is cancelled, wait for the worker to finish (a failure then is only
    logged), then re-raise the cancellation."""
    task = asyncio.ensure_future(asyncio.to_thread(func, *args, **kwargs))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                continue  # repeated cancellation cannot interrupt the drain
            except Exception:  # noqa: BLE001
                break
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.warning("Cancelled sandbox client operation failed while draining: %s", task.exception())
        raise


class KeyedLocks:
    """§4.2: a lock per key; entries leave the table when nobody holds or
    waits for them, so any number of keys leaves it empty."""

    def __init__(self):
        self._lock = threading.Lock()
        self._table = {}  # key -> [lock, refs]

    @contextmanager
    def hold(self, key):
        with self._lock:
            entry = self._table.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        entry[0].acquire()
        try:
            yield
        finally:
            entry[0].release()
            with self._lock:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._table[key]

    def __len__(self):
        with self._lock:
            return len(self._table)


class _Binding:
    __slots__ = ("sandbox_id", "thread_key", "release_on_last")

    def __init__(self, sandbox_id, thread_key, release_on_last):
        self.sandbox_id, self.thread_key, self.release_on_last = sandbox_id, thread_key, release_on_last


class SandboxLeaseManager:
    """§3.3 on top of a SandboxProvider (acquire, get, get_scoped, release)."""

    def __init__(self, provider):
        self._provider = provider
        self._meta = threading.RLock()
        self._serial = KeyedLocks()
        self._by_owner = {}          # owner -> _Binding
        self._owners = {}            # sandbox_id -> set(owner)
        self._pending = set()        # sandbox ids whose park was asked for
        self._closed = False

    # ---- bindings (metadata lock held by the caller) --------------------------------------

    def _remove_locked(self, owner, request_release=True):
        """Pop owner's binding; the sandbox id to release, or None."""
        b = self._by_owner.pop(owner, None)
        if b is None:
            return None
        if request_release and b.release_on_last:
            self._pending.add(b.sandbox_id)
        owners = self._owners.get(b.sandbox_id, set())
        owners.discard(owner)
        if owners:
            return None  # others still use it: no release (§3.3 step 4)
        self._owners.pop(b.sandbox_id, None)
        if b.sandbox_id in self._pending:
            self._pending.discard(b.sandbox_id)
            return b.sandbox_id
        return None

    def _bind_locked(self, owner, sandbox_id, thread_key, release_on_last):
        """Bind; the id of a previous sandbox to release, or None."""
        b = self._by_owner.get(owner)
        if b is not None and b.thread_key != thread_key:
            raise RuntimeError(f"sandbox lease owner {owner!r} cannot move between thread identities "
                               f"({b.thread_key} -> {thread_key})")
        previous = None
        if b is not None and b.sandbox_id == sandbox_id:
            b.release_on_last = b.release_on_last or release_on_last  # upgraded, never downgraded
            return None
        if b is not None:
            previous = self._remove_locked(owner)
        self._by_owner[owner] = _Binding(sandbox_id, thread_key, release_on_last)
        self._owners.setdefault(sandbox_id, set()).add(owner)
        return previous

    def _live_binding(self, owner, release_on_last, thread_key):
        """The owner's bound sandbox id if the provider still has it; a stale
        binding is dropped without a release (§3.3 _active_owner_binding).
        An owner bound under another thread is refused (§3.3 binding)."""
        with self._meta:
            b = self._by_owner.get(owner)
            if b is None:
                return None
            if b.thread_key != thread_key:
                raise RuntimeError(f"sandbox lease owner {owner!r} cannot move between thread identities "
                                   f"({b.thread_key} -> {thread_key})")
            sid = b.sandbox_id
        if self._provider.get(sid) is None:
            with self._meta:
                self._remove_locked(owner, request_release=False)
            return None
        with self._meta:
            b = self._by_owner.get(owner)
            if b is not None and b.sandbox_id == sid:
                b.release_on_last = b.release_on_last or release_on_last
                return sid
        return None

    def _check_open(self):
        if self._closed:
            raise RuntimeError("SandboxLeaseManager is closed")

    # ---- the transitions -----------------------------------------------------------------

    def acquire(self, owner, thread_id, *, user_id, release_on_last=True):
        self._check_open()
        key = (user_id, thread_id)
        with self._serial.hold(key):
            sid = self._live_binding(owner, release_on_last, key)
            if sid is not None:
                return sid
            sid = self._provider.acquire(thread_id, user_id=user_id)
            with self._meta:
                previous = self._bind_locked(owner, sid, key, release_on_last)
            if previous is not None:
                self._provider.release(previous)
            return sid

    def reuse_or_acquire(self, owner, sandbox_id, *, thread_id, user_id, release_on_last=True,
                         acquire_release_on_last=True, allow_unscoped_borrow=False):
        self._check_open()
        key = (user_id, thread_id)
        with self._serial.hold(key):
            sid = self._live_binding(owner, release_on_last, key)
            if sid is not None:
                return sid
            found = (self._provider.get(sandbox_id) if allow_unscoped_borrow else
                     self._provider.get_scoped(sandbox_id, thread_id=thread_id, user_id=user_id))
            if found is not None:
                flag, sid = release_on_last, sandbox_id
            else:
                flag, sid = acquire_release_on_last, self._provider.acquire(thread_id, user_id=user_id)
            with self._meta:
                previous = self._bind_locked(owner, sid, key, flag)
            if previous is not None:
                self._provider.release(previous)
            return sid

    def retain(self, owner, sandbox_id, *, thread_id, user_id, release_on_last=True):
        self._check_open()
        key = (user_id, thread_id)
        with self._serial.hold(key):
            with self._meta:
                previous = self._bind_locked(owner, sandbox_id, key, release_on_last)
            if previous is not None:
                self._provider.release(previous)

    def release(self, owner):
        """Idempotent; the provider's release only for the last owner of a
        sandbox whose park was asked for (§3.3 release)."""
        with self._meta:
            b = self._by_owner.get(owner)
        if b is None:
            return
        with self._serial.hold(b.thread_key):
            with self._meta:
                if self._by_owner.get(owner) is not b:
                    return
                sid = b.sandbox_id
                to_release = self._remove_locked(owner)
            try:
                sandbox = self._provider.get(sid)
                if sandbox is not None:
                    sandbox.release_command_scope(owner)
            finally:
                if to_release is not None:
                    self._provider.release(to_release)

    def binding_for(self, owner):
        with self._meta:
            b = self._by_owner.get(owner)
            return b.sandbox_id if b else None

    def close(self):
        self._closed = True

    # ---- async twins (§3.3: drained on cancellation) -------------------------------------

    async def acquire_async(self, owner, thread_id, *, user_id, release_on_last=True):
        return await run_sync_lifecycle_operation(self.acquire, owner, thread_id, user_id=user_id,
                                                  release_on_last=release_on_last)

    async def release_async(self, owner):
        return await run_sync_lifecycle_operation(self.release, owner)


def new_owner_id(prefix="agent"):
    """§3.2: "agent:<uuid4>"-style owner ids."""
    return f"{prefix}:{uuid.uuid4()}"
