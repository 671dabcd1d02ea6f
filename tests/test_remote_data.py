# SPDX-License-Identifier: MIT
"""Remote files (fs/rfiles.c, fs/rcache.c, DESIGN §5, issue 11 point 3): workspace/,
uploads/ and outputs/ of a remote sandbox are the sandbox's own files,
reached through its files API with a close-to-open cache on the host.

Parametrised over both remote providers against the fake servers
(remoteutil.py): `opensandbox` (tests/fakes/opensandbox_server.py, execd's
files API) and `aio` at a base_url (tests/fakes/aio_server.py, the AIO file
API plus commands).  Only file operations, jobs, and the fakes' own control
channels: their request logs count requests and the bytes they served, their
fault switches make the errors."""

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import test_jobs as J
from remoteutil import fake, remote, sbxfs  # noqa: F401
import sbxutil
from sbxutil import wait_until

MiB = 1 << 20
CHUNK = 4 * MiB  # fs/rfiles_int.h RFILES_CHUNK


# ---- the two fakes behind one face ------------------------------------------------


class Server:
    """What a test needs of either fake: routes, request counts, bytes served,
    faults, and the sandbox's root directory on the host."""

    ROUTES = {
        "opensandbox": {"upload": "POST execd/files/upload", "download": "GET execd/files/download"},
        "aio_url": {"upload": "POST /v1/file/upload", "download": "GET /v1/file/download"},
    }
    PATHS = {  # regexes on the request path, for faults
        "opensandbox": {"upload": r"/files/upload$", "download": r"/files/download$", "info": r"/files/info$",
                        "list": r"/directories/list$"},
        "aio_url": {"upload": r"^/v1/file/upload$", "download": r"^/v1/file/download$", "info": r"^/v1/bash/exec$",
                    "list": r"^/v1/file/list$"},
    }

    def __init__(self, remote, fake):
        self.remote = remote
        self.fake = fake

    def _log(self):
        """[(route, body bytes sent, files uploaded)] of every request so far."""
        if self.remote == "opensandbox":
            return [(e["route"], e.get("resp_bytes", 0), e.get("files") or 0) for e in self.fake.requests()["log"]]
        r = self.fake.api.get("/_fake/requests")
        assert r.status == 200, r
        return [(f"{e['method']} {e['path']}", e.get("resp_bytes") or 0, 1) for e in r.json["requests"]]

    def count(self, what):
        """`what` requests so far."""
        route = self.ROUTES[self.remote][what]
        return sum(1 for r, _, _ in self._log() if r == route)

    def files_uploaded(self):
        """Files uploaded so far (an opensandbox upload request may carry several)."""
        route = self.ROUTES[self.remote]["upload"]
        return sum(n for r, _, n in self._log() if r == route)

    def served(self, what="download"):
        """Body bytes the server sent for `what` requests so far."""
        route = self.ROUTES[self.remote][what]
        return sum(b for r, b, _ in self._log() if r == route)

    def fault(self, what, status=None, delay=None, times=None, body=None, drip=None):
        """Inject a fault on `what` requests: an HTTP status (a canned body
        with status 200), a delay in seconds, or a body dripped one byte
        every `drip` seconds (downloads); `times` requests (None: until
        cleared)."""
        path = self.PATHS[self.remote][what]
        if self.remote == "opensandbox":
            spec = {"path": path}
            if drip is not None:
                spec.update(kind="drip", ms=int(drip * 1000))
            elif body is not None:
                spec.update(kind="reply", status=status or 200, body=body)
            elif delay is not None:
                spec.update(kind="delay", ms=int(delay * 1000))
            else:
                spec.update(kind="http_error", status=status)
            if times is not None:
                spec["count"] = times
            self.fake.fault(spec)
        else:
            spec = {"path": path, "times": times}
            if drip is not None:
                spec.update(kind="drip", seconds=drip)
            elif body is not None:
                spec.update(kind="error", status=status or 200, body=body)
            elif delay is not None:
                spec.update(kind="delay", seconds=delay)
            else:
                spec.update(kind="error", status=status)
            r = self.fake.api.post("/_fake/faults", spec)
            assert r.status == 200, r

    def clear(self):
        if self.remote == "opensandbox":
            self.fake.clear_faults()
        else:
            assert self.fake.api.delete("/_fake/faults").status == 200

    def root(self, d):
        """The sandbox's / on the host."""
        if self.remote == "aio_url":
            return self.fake.root
        from remoteutil import sandbox_id
        return os.path.realpath(self.fake.sandbox(sandbox_id(d))["rootfs"])


@pytest.fixture
def box(sbxfs, remote, fake):  # noqa: F811
    """(instance, sandbox dir alice/t, Server)."""
    m = sbxfs()
    d = m.mnt / "alice" / "t"
    os.makedirs(d)
    sbxutil.wait_ready(d)  # acquire: async: faults set next must not hit the create
    yield m, d, Server(remote, fake)


@pytest.fixture
def bigbox(sbxfs, remote, fake):  # noqa: F811
    """box for tens of MiB in one request: request_timeout bounds each
    request through the mount in total (an upload at close, an open for
    writing), and 5 s is short for 50 MiB on a loaded 2-CPU host."""
    m = sbxfs(config={"request_timeout": 60})
    d = m.mnt / "alice" / "t"
    os.makedirs(d)
    sbxutil.wait_ready(d)  # acquire: async: faults set next must not hit the create
    yield m, d, Server(remote, fake)


def run(d, name, cmd):
    code, out, err = J.run_job(d, name, cmd)
    assert code == 0, (cmd, out, err)
    return out


def json_of(p):
    return json.loads(p.read_text())


def close_errno(fd):
    try:
        os.close(fd)
    except OSError as e:
        return e.errno
    return 0


def sha(b):
    return hashlib.sha256(b).hexdigest()


# ---- contents ------------------------------------------------------------------------


@pytest.mark.timeout_s(240)
def test_50mib_round_trip_both_ways(bigbox):
    _, d, srv = bigbox
    w = d / "workspace"
    data = os.urandom(50 * MiB)
    (w / "up.bin").write_bytes(data)
    out = run(d, "sum", "sha256sum up.bin")
    assert out.split()[0] == sha(data)
    assert sha((w / "up.bin").read_bytes()) == sha(data)  # from the cache
    # the other way: a file the sandbox made, fetched in ranges
    out = run(d, "make", "head -c 52428800 /dev/urandom > down.bin && sha256sum down.bin")
    before = srv.served()
    assert sha((w / "down.bin").read_bytes()) == out.split()[0]
    got = srv.served() - before
    assert 50 * MiB <= got < 51 * MiB, got  # fetched once, every byte
    with open(w / "down.bin", "rb") as f:  # a read at an offset, after the whole read: the cache
        f.seek(30 * MiB)
        assert len(f.read(10)) == 10
    assert srv.served() - before == got


def test_head_of_a_big_file_fetches_a_range_not_the_file(box):
    _, d, srv = box
    out = run(d, "make", "head -c 62914560 /dev/urandom > big && head -c 100 big | sha256sum")
    before = srv.served()
    with open(d / "workspace" / "big", "rb") as f:
        assert sha(f.read(100)) == out.split()[0]
    got = srv.served() - before
    assert 0 < got <= 2 * CHUNK, got  # the first range (and one read ahead), of 60 MiB
    assert os.stat(d / "workspace" / "big").st_size == 60 * MiB
    # and a read in the middle fetches that range only
    before = srv.served()
    with open(d / "workspace" / "big", "rb") as f:
        f.seek(40 * MiB)
        assert len(f.read(4096)) == 4096
    assert 0 < srv.served() - before <= 2 * CHUNK


@pytest.mark.timeout_s(300)
def test_1000_small_files(box):
    _, d, srv = box
    w = d / "workspace" / "many"
    w.mkdir()
    before = srv.count("upload")
    for i in range(1000):
        (w / f"f{i:04d}").write_text(f"{i}\n")
    assert srv.count("upload") - before == 1000  # one upload a file, at its close
    assert sorted(os.listdir(w)) == [f"f{i:04d}" for i in range(1000)]
    out = run(d, "count", "ls many | wc -l; cat many/f0999; cat many/* | wc -l")
    assert out.split() == ["1000", "999", "1000"]
    for i in (0, 500, 999):
        assert (w / f"f{i:04d}").read_text() == f"{i}\n"


def test_rename_truncate_unlink_rmdir_chmod(box):
    _, d, _ = box
    w = d / "workspace"
    (w / "a").write_text("abcdef")
    (w / "sub").mkdir()
    os.rename(w / "a", w / "sub" / "b")
    assert not (w / "a").exists() and (w / "sub" / "b").read_text() == "abcdef"
    (w / "c").write_text("old")
    os.rename(w / "sub" / "b", w / "c")  # replaces
    assert (w / "c").read_text() == "abcdef"
    os.truncate(w / "c", 3)  # not open: through the API
    assert (w / "c").read_text() == "abc"
    with open(w / "c", "r+b") as f:  # open: the cache, uploaded at close
        f.truncate(1)
    assert (w / "c").read_bytes() == b"a"
    os.truncate(w / "c", 5)  # grows with zeros
    assert (w / "c").read_bytes() == b"a\0\0\0\0"
    os.chmod(w / "c", 0o600)
    assert os.stat(w / "c").st_mode & 0o777 == 0o600
    (w / "sub" / "x").write_text("x")
    with pytest.raises(OSError) as e:
        os.rmdir(w / "sub")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as e:
        os.rmdir(w / "nonexistent")
    assert e.value.errno == errno.ENOENT
    os.rename(w / "sub", w / "sub2")  # a directory with its content
    assert (w / "sub2" / "x").read_text() == "x"
    (w / "sub2" / "x").unlink()
    os.rmdir(w / "sub2")
    out = run(d, "ls", "ls -A; cat c | od -An -c | tr -d ' \\n'; echo; stat -c %a c")
    assert out.split("\n")[:3] == ["c", "a\\0\\0\\0\\0", "600"], out
    # a file renamed before its first close lands under its new name
    fd = os.open(w / "early", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"early")
    os.rename(w / "early", w / "late")
    os.close(fd)
    assert run(d, "late", "ls; cat late").split() == ["c", "late", "early"]


def test_a_jobs_change_is_seen_at_the_next_open_after_it_ends(box):
    _, d, _ = box
    f = d / "workspace" / "f"
    f.write_text("mine\n")
    assert f.read_text() == "mine\n"
    assert os.stat(f).st_size == 5
    run(d, "w", "echo theirs, longer > f; mkdir newdir; echo n > newdir/n; rm -f gone")
    assert f.read_text() == "theirs, longer\n"
    assert os.stat(f).st_size == 15
    assert (d / "workspace" / "newdir" / "n").read_text() == "n\n"
    # a file this side holds open across the job: the next open sees the job's
    with open(f, "rb") as held:
        assert held.read() == b"theirs, longer\n"
        run(d, "w2", "echo third > f")
        with open(f, "rb") as again:
            assert again.read() == b"third\n"


def test_a_jobs_change_of_the_same_size_within_the_second_is_seen(box):
    """Revalidation at open compares size and mtime: a change that keeps the
    size, made within the same second, is still a change."""
    _, d, _ = box
    f = d / "workspace" / "same"
    for i in range(3):
        f.write_text("aaaa\n")
        assert f.read_text() == "aaaa\n"
        run(d, f"w{i}", "echo bbbb > same")
        assert f.read_text() == "bbbb\n"


def test_writer_and_reader_of_one_file(box):
    """Two handles through the mount: the reader sees the writer's bytes at once
    (one cache); the sandbox sees them at the writer's close."""
    _, d, _ = box
    p = d / "workspace" / "shared"
    with open(p, "wb", buffering=0) as w:
        w.write(b"hello\n")
        with open(p, "rb") as r:
            assert r.read() == b"hello\n"
    assert run(d, "cat", "cat shared") == "hello\n"


def test_partial_writes_into_a_big_file_and_appends(bigbox):
    _, d, _ = bigbox
    w = d / "workspace"
    run(d, "make", "head -c 20971520 /dev/urandom > big")
    with open(w / "big", "rb") as f:
        data = bytearray(f.read())
    with open(w / "big", "r+b") as f:  # a writer: the whole file, changed in the middle
        f.seek(13 * MiB + 5)
        f.write(b"X" * 100)
    data[13 * MiB + 5:13 * MiB + 105] = b"X" * 100
    with open(w / "big", "ab") as f:
        f.write(b"tail")
    data += b"tail"
    assert run(d, "sum", "sha256sum big").split()[0] == sha(bytes(data))
    assert sha((w / "big").read_bytes()) == sha(bytes(data))
    with open(w / "big", "wb") as f:  # O_TRUNC of a big file: nothing fetched, an empty upload
        pass
    assert run(d, "size", "stat -c %s big") == "0\n"


def test_a_file_removed_while_open_for_writing(box):
    """unlink of an open file: the writer goes on, its close succeeds and
    uploads nothing (the name is gone, as on any file system)."""
    _, d, srv = box
    w = d / "workspace"
    (w / "old").write_text("old\n")
    fd = os.open(w / "tmp", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"one\n")
    os.unlink(w / "tmp")
    os.write(fd, b"two\n")
    os.ftruncate(fd, 2)
    os.fchmod(fd, 0o600)
    before = srv.count("upload")
    os.close(fd)
    assert srv.count("upload") == before
    fd = os.open(w / "old", os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"more\n")
    os.unlink(w / "old")
    os.close(fd)
    assert "tmp" not in os.listdir(w) and "old" not in os.listdir(w)
    assert run(d, "ls", "ls -A | wc -l") == "0\n"


def test_a_file_a_job_removes_while_it_is_read(box):
    _, d, _ = box
    w = d / "workspace"
    run(d, "make", "head -c 16777216 /dev/urandom > vanishing")
    with open(w / "vanishing", "rb") as f:
        assert len(f.read(4096)) == 4096
        run(d, "rm", "rm vanishing")
        f.seek(12 * MiB)
        with pytest.raises(OSError) as e:  # a range not fetched yet: the file is gone
            f.read(4096)
        assert e.value.errno in (errno.ENOENT, errno.ESTALE), e.value
    assert "vanishing" not in os.listdir(w)
    # the sandbox is still there: the file is gone, not the sandbox
    assert run(d, "alive", "echo alive") == "alive\n"


# ---- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("status,err", [(500, errno.EIO), (403, errno.EACCES), (507, errno.ENOSPC),
                                        (504, errno.ETIMEDOUT)])
def test_a_failed_upload_fails_close_and_keeps_the_local_copy(box, status, err):
    _, d, srv = box
    f = d / "workspace" / "keep"
    srv.fault("upload", status=status, times=None)
    fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"precious\n")
    assert close_errno(fd) == err
    assert f.read_bytes() == b"precious\n"  # the local copy, through the mount
    with open(f, "r+b") as h:  # fsync fails the same way while the server does
        with pytest.raises(OSError) as e:
            os.fsync(h.fileno())
        assert e.value.errno == err
        srv.clear()
        os.fsync(h.fileno())  # retried: now it reaches the sandbox
    assert run(d, "cat", "cat keep") == "precious\n"


def test_an_upload_slower_than_request_timeout_is_etimedout(box):
    _, d, srv = box
    f = d / "workspace" / "slow"
    # request_timeout is 5 s (remoteutil): a transfer fails after that long
    # without progress (curl's speed window: the bytes just sent count for
    # a few seconds more), so the answer comes far later than that
    srv.fault("upload", delay=25, times=1)
    fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"late\n")
    assert close_errno(fd) == errno.ETIMEDOUT
    assert f.read_bytes() == b"late\n"
    srv.clear()
    with open(f, "rb+") as h:
        os.fsync(h.fileno())
    assert run(d, "cat", "cat slow") == "late\n"


@pytest.mark.parametrize("status,err", [(500, errno.EIO), (403, errno.EACCES), (504, errno.ETIMEDOUT)])
def test_a_failed_fetch_fails_the_read_and_the_next_read_fetches_again(box, status, err):
    _, d, srv = box
    out = run(d, "make", "head -c 12582912 /dev/urandom > r.bin && sha256sum r.bin")
    srv.fault("download", status=status, times=None)
    with open(d / "workspace" / "r.bin", "rb") as f:
        with pytest.raises(OSError) as e:
            f.read(4096)
        assert e.value.errno == err
        srv.clear()
        f.seek(0)
        assert sha(f.read()) == out.split()[0]


def test_enoent_for_what_a_job_removed(box):
    _, d, _ = box
    w = d / "workspace"
    (w / "doomed").write_text("x")
    (w / "ddir").mkdir()
    assert os.path.exists(w / "doomed")
    run(d, "rm", "rm doomed; rmdir ddir")
    for p in (w / "doomed", w / "ddir"):
        with pytest.raises(OSError) as e:
            os.stat(p)
        assert e.value.errno == errno.ENOENT
    with pytest.raises(OSError) as e:
        open(w / "doomed", "rb")
    assert e.value.errno == errno.ENOENT
    with pytest.raises(OSError) as e:
        os.unlink(w / "doomed")
    assert e.value.errno == errno.ENOENT
    assert "doomed" not in os.listdir(w)


def test_errors_of_namespace_calls(box):
    _, d, srv = box
    w = d / "workspace"
    (w / "f").write_text("x")
    (w / "dir").mkdir()
    with pytest.raises(OSError) as e:
        os.mkdir(w / "dir")
    assert e.value.errno == errno.EEXIST
    with pytest.raises(OSError) as e:
        os.rmdir(w / "f")
    assert e.value.errno == errno.ENOTDIR
    with pytest.raises(OSError) as e:
        os.unlink(w / "dir")
    assert e.value.errno in (errno.EISDIR, errno.EPERM)
    with pytest.raises(OSError) as e:
        os.symlink("/etc/passwd", w / "ln")
    assert e.value.errno == errno.EPERM
    srv.fault("list", status=403, times=None)
    with pytest.raises(OSError) as e:
        os.listdir(w / "dir")
    assert e.value.errno == errno.EACCES
    srv.clear()
    assert os.listdir(w / "dir") == []


# ---- hostile sandboxes and servers ---------------------------------------------------------


def test_a_fifo_a_job_made_never_hangs_a_read(box):
    _, d, _ = box
    run(d, "fifo", "mkfifo fifo; mkfifo -m 666 fifo2; echo ok > plain")
    w = d / "workspace"
    assert {"fifo", "fifo2", "plain"} <= set(os.listdir(w))
    for name in ("fifo", "fifo2"):
        done = []

        def reader(name=name):
            try:
                with open(w / name, "rb") as f:
                    done.append(f.read(10))
            except OSError as e:
                done.append(e.errno)

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), f"a read of the sandbox's FIFO {name} hangs"
        assert done == [errno.ENXIO], done
    assert (w / "plain").read_text() == "ok\n"
    # nothing of the daemon is stuck either: more requests are served
    assert run(d, "after", "echo fine") == "fine\n"


def test_symlinks_a_job_plants_never_lead_to_host_files(box, tmp_path):
    _, d, _ = box
    secret_dir = tmp_path / "hostonly"
    secret_dir.mkdir()
    (secret_dir / "secret").write_text("host secret\n")
    run(d, "plant", f"ln -s {secret_dir}/secret flink; ln -s {secret_dir} dlink; ln -s / rootlink; "
                    "ln -s /etc/hostname elink; echo ok > plain")
    w = d / "workspace"
    names = set(os.listdir(w))
    assert {"flink", "dlink", "rootlink", "plain"} <= names
    for name in ("flink", "dlink", "rootlink", "elink"):
        p = w / name
        try:
            st = os.lstat(p)
        except OSError:
            continue  # not shown is fine
        if os.path.islink(p):
            with pytest.raises(OSError):  # nosymfollow, or no readlink
                os.stat(p)
        try:
            data = open(p, "rb").read()
        except OSError:
            data = b""
        assert b"host secret" not in data
        try:
            listing = os.listdir(p)
        except OSError:
            listing = []
        assert "secret" not in listing, (name, st)
    with pytest.raises(OSError):
        open(w / "dlink" / "secret", "rb")
    assert (w / "plain").read_text() == "ok\n"


def test_names_with_a_newline_round_trip(box):
    _, d, _ = box
    w = d / "workspace"
    run(d, "nl", "touch \"$(printf 'new\\nline')\"; printf x > \"$(printf 'tab\\tname')\"")
    assert {"new\nline", "tab\tname"} <= set(os.listdir(w))
    assert (w / "new\nline").read_text() == ""
    assert (w / "tab\tname").read_text() == "x"
    (w / "mine\nalso").write_text("y\n")
    assert run(d, "cat", "cat \"$(printf 'mine\\nalso')\"") == "y\n"


@pytest.mark.parametrize("bad", ["..", ".", "", "a/b", "/abs"])
def test_a_listing_with_names_no_file_system_has_is_refused(box, bad):
    """A broken or malicious server answers a listing with '..', '.', '' or
    a name with '/': the listing is refused (EIO, logged), never shown or
    followed; the daemon goes on, and the next listing is served."""
    _, d, srv = box
    w = d / "workspace"
    (w / "good").write_text("g")
    if srv.remote == "opensandbox":  # execd names an entry by its path: the name is what follows the last '/'
        path = {"..": "/mnt/user-data/workspace/..", ".": "/mnt/user-data/workspace/.",
                "": "/mnt/user-data/workspace/", "a/b": "/mnt/user-data/workspace/a/", "/abs": "/"}[bad]
        body = [{"path": p, "type": "file", "size": 1, "mode": 644, "modified_at": "2025-01-01T00:00:00Z",
                 "created_at": "2025-01-01T00:00:00Z", "owner": "root", "group": "root"}
                for p in (path, "/mnt/user-data/workspace/good")]
    else:
        body = {"success": True, "message": "ok", "data": {"path": "/mnt/user-data/workspace", "files": [
            {"name": n, "path": f"/mnt/user-data/workspace/{n}", "is_directory": False, "size": 1,
             "modified_time": "2025-01-01T00:00:00+00:00", "permissions": "rw-r--r--", "extension": None}
            for n in (bad, "good")], "total_count": 2, "directory_count": 0, "file_count": 2}}
    srv.fault("list", body=body, times=None)
    try:
        with pytest.raises(OSError) as e:
            os.listdir(w)
        assert e.value.errno == errno.EIO
    finally:
        srv.clear()
    assert os.listdir(w) == ["good"]
    assert (w / "good").read_text() == "g"


# ---- a dripping server, interrupts and deadlines (issue 19 point 4) -----------------------
#
# A hostile execd (or AIO server) that sends one byte every 0.7 s never trips
# a stall timeout: before, an open of a small file (fetched whole at open)
# held its caller in the kernel's request_wait_answer, SIGKILL pending, for
# as long as the server went on.  Every request through the mount is now
# bounded by request_timeout in total, and a FUSE interrupt (the caller got
# a signal) answers EINTR at once.

# A process doing one file operation on the mount.  SIGUSR1 raises inside
# it: a system call the daemon answers with EINTR ends with "interrupted".
CHILD = r'''
import os, signal, sys
class Intr(Exception):
    pass
def on_usr1(sig, frame):
    raise Intr()
signal.signal(signal.SIGUSR1, on_usr1)
op, path = sys.argv[1], sys.argv[2]
try:
    if op == "open":
        fd = os.open(path, os.O_RDONLY)
    elif op == "read":
        fd = os.open(path, os.O_RDONLY)
        print("ready", flush=True)
        os.pread(fd, 4096, int(sys.argv[3]))
    elif op == "close":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b"w" * 65536)
        print("ready", flush=True)
        os.close(fd)
    print("done", flush=True)
except Intr:
    print("interrupted", flush=True)
except OSError as e:
    print("errno", e.errno, flush=True)
'''

DRIP_S = 0.7


def child(op, path, *args):
    return subprocess.Popen([sys.executable, "-c", CHILD, op, str(path), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wchan(pid):
    try:
        with open(f"/proc/{pid}/wchan") as f:
            return f.read()
    except OSError:
        return ""


def in_fuse_request(pid):
    """Whether pid waits for the daemon's answer to a request of its own (the
    kernel's request_wait_answer: a FUSE interrupt reaches the daemon)."""
    w = wchan(pid)
    return "request_wait_answer" in w or "fuse" in w


def waits_on_mount(pid):
    """in_fuse_request, or waiting for a page the kernel asked the daemon for
    (a read of the page cache: a killable wait, no interrupt is sent)."""
    return in_fuse_request(pid) or "folio_wait" in wchan(pid)


def wait_ready(p):
    """A child that prints "ready" before its blocking call."""
    line = p.stdout.readline()
    assert line == "ready\n", (line, p.stderr.read() if p.poll() is not None else "")


def kill_and_time(procs):
    """SIGKILL every process, wait for each: seconds until the last is gone."""
    t0 = time.monotonic()
    for p in procs:
        p.kill()
    for p in procs:
        p.wait(timeout=60)
    return time.monotonic() - t0


@pytest.fixture
def slow(sbxfs, remote, fake):  # noqa: F811
    """(instance, sandbox dir, Server) with a request_timeout far above the
    second a killed caller may wait: only the interrupt can free it early."""
    m = sbxfs(config={"request_timeout": 30})
    d = m.mnt / "alice" / "t"
    os.makedirs(d)
    sbxutil.wait_ready(d)
    procs = []
    yield m, d, Server(remote, fake), procs
    for p in procs:
        if p.poll() is None:
            p.kill()
    Server(remote, fake).clear()  # ends the drips: the fake answers on
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass


@pytest.mark.timeout_s(120)
def test_openers_of_a_dripping_file_killed_are_gone_at_once(slow):
    m, d, srv, procs = slow
    run(d, "make", "head -c 100000 /dev/urandom > drip.bin")
    srv.fault("download", drip=DRIP_S, times=None)
    f = d / "workspace" / "drip.bin"
    # one opener fetches (the drip), the others wait for the same bytes
    procs += [child("open", f) for _ in range(10)]
    assert wait_until(lambda: all(in_fuse_request(p.pid) for p in procs), 20), \
        [(p.pid, p.poll()) for p in procs]
    took = kill_and_time(procs)
    assert took < 1.5, f"killed openers took {took:.2f} s to go (D state until the drip ends)"
    # the daemon serves on: another file, and the same one once the server behaves
    srv.clear()
    assert run(d, "ok", "echo ok") == "ok\n"
    assert len(f.read_bytes()) == 100000
    assert m.running()


@pytest.mark.timeout_s(120)
def test_an_open_of_a_dripping_file_fails_after_request_timeout(sbxfs, remote, fake):  # noqa: F811
    m = sbxfs(config={"request_timeout": 4})
    d = m.mnt / "alice" / "t"
    os.makedirs(d)
    srv = Server(remote, fake)
    run(d, "make", "head -c 100000 /dev/urandom > drip.bin")
    srv.fault("download", drip=DRIP_S, times=None)
    try:
        t0 = time.monotonic()
        p = child("open", d / "workspace" / "drip.bin")
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        srv.clear()
    # ETIMEDOUT: the request's deadline (DESIGN §3's errno of a timeout)
    assert out == f"errno {errno.ETIMEDOUT}\n", (out, err)
    assert took >= 3, took  # not before its time
    assert m.running()
    assert len((d / "workspace" / "drip.bin").read_bytes()) == 100000


@pytest.mark.timeout_s(120)
def test_a_read_miss_from_a_dripping_server(sbxfs, remote, fake):  # noqa: F811
    """A read of what is not cached waits in the page cache (the kernel
    reads ahead asynchronously and sends no interrupt for it): SIGKILL ends
    the reader at once, and the fetch it started ends within request_timeout,
    so the next reader of those pages gets them instead of waiting on the
    drip (before: for as long as the server went on)."""
    m = sbxfs(config={"request_timeout": 4})
    d = m.mnt / "alice" / "t"
    os.makedirs(d)
    srv = Server(remote, fake)
    out = run(d, "make", "head -c 9000000 /dev/urandom > big.bin && sha256sum big.bin")
    f = d / "workspace" / "big.bin"
    srv.fault("download", drip=DRIP_S, times=None)
    procs = []
    try:
        p = child("read", f, 5 * MiB)
        procs.append(p)
        wait_ready(p)  # opened (a big file: no fetch at open)
        assert wait_until(lambda: waits_on_mount(p.pid), 20)
        took = kill_and_time([p])
        assert took < 1.5, f"a killed reader took {took:.2f} s to go"
        srv.clear()
        q = child("read", f, 5 * MiB)  # the same pages: behind the killed reader's fetch
        procs.append(q)
        wait_ready(q)
        got, err = q.communicate(timeout=40)
        assert got == "done\n", (got, err)
    finally:
        srv.clear()
        for x in procs:
            if x.poll() is None:
                x.kill()
                x.wait(timeout=60)
    assert sha(f.read_bytes()) == out.split()[0]  # what the cut fetch left is fetched again
    assert m.running()


@pytest.mark.timeout_s(120)
def test_a_write_back_at_close_is_interrupted(slow):
    m, d, srv, procs = slow
    f = d / "workspace" / "wb.bin"
    # the server takes the upload and answers late (25 s): the close waits
    srv.fault("upload", delay=25, times=None)
    p = child("close", f)
    procs.append(p)
    wait_ready(p)
    assert wait_until(lambda: in_fuse_request(p.pid), 20)
    t0 = time.monotonic()
    p.send_signal(signal.SIGUSR1)
    got, err = p.communicate(timeout=60)
    took = time.monotonic() - t0
    assert got == "interrupted\n", (got, err)
    assert took < 1.5, took
    k = child("close", d / "workspace" / "wb2.bin")
    procs.append(k)
    wait_ready(k)
    assert wait_until(lambda: in_fuse_request(k.pid), 20)
    took = kill_and_time([k])
    assert took < 1.5, f"a killed closer took {took:.2f} s to go"
    srv.clear()
    # the interrupted write-back: the local copy is kept (logged), the next
    # writer's close sends the file
    assert wait_until(lambda: "not uploaded" in m.log or "upload of" in m.log, 10), m.log[-2000:]
    (d / "workspace" / "wb.bin").write_bytes(b"again\n")
    assert run(d, "cat", "cat wb.bin") == "again\n"
    assert m.running()


# ---- the cache --------------------------------------------------------------------------


def cache_bytes(m):
    d = m.thread_data("alice", "t") / "rfiles-cache"
    return sum(p.stat().st_blocks * 512 for p in d.iterdir()) if d.exists() else 0


def test_the_cache_is_kept_under_remote_files_cache_size(sbxfs, remote, fake):  # noqa: F811
    m = sbxfs(config={"remote_files": {"cache_size": "16M"}})
    assert json_of(m.mnt / ".config")["remote_files"] == {"cache_size": 16 * MiB}
    d = m.mnt / "alice" / "t"
    os.makedirs(d)
    srv = Server(remote, fake)
    w = d / "workspace"
    sums = run(d, "make", "for i in 0 1 2 3 4 5; do head -c 4194304 /dev/urandom > f$i; done; sha256sum f*").split()
    for i in range(6):
        assert sha((w / f"f{i}").read_bytes()) == sums[2 * i]
        assert cache_bytes(m) <= 16 * MiB + 4 * MiB, cache_bytes(m)  # soft: the file just read may stay
    # the least recently used went: reading f0 again fetches it again; f5 is still cached
    before = srv.served()
    assert sha((w / "f5").read_bytes()) == sums[10]
    assert srv.served() == before
    assert sha((w / "f0").read_bytes()) == sums[0]
    assert srv.served() - before == 4 * MiB
    # what is open, or not uploaded yet, is never evicted
    with open(w / "f1", "rb") as held:
        big = os.open(w / "new", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(big, b"n" * (8 * MiB))
        for i in (2, 3, 4):
            (w / f"f{i}").read_bytes()
        assert sha(held.read()) == sums[2]
        os.close(big)
    assert sha((w / "new").read_bytes()) == sha(b"n" * (8 * MiB))


def test_status_says_remote_files_keep_their_own_cache(box):
    m, d, _ = box
    # the cache watcher (fs/fswatch.c) is for data directories on the host
    assert json_of(d / "status")["cache"] == "remote"
