# SPDX-License-Identifier: MIT
"""Long kernel caches kept fresh by change notifications (issue 23, fs/fswatch.c).

Data entries and attributes are cached for cache_timeout (minutes) while the
fanotify watcher tells the kernel of every change a sandbox makes from inside.
Each test primes the host's caches (lookups, open files, listings, a mmap)
while no job runs, then a job changes the files and keeps running: the host
view must be right within BOUND seconds (polled; the delay is printed).
Before the watcher, what was primed stayed cached for 10 s while the job ran.
"""

import errno
import json
import mmap
import os
import re
import threading
import time

import pytest

from sbxutil import read_json, wait_until
from test_jobs import mkjob, start, wait_exit, write_ctl

BOUND = 2.0        # seconds a host view may lag a job's change (polled)
INSIDE = "/mnt/user-data/workspace"
DELAYS = []        # (case, seconds): printed at the end of each test


def _poll(case, pred, bound=BOUND):
    """Poll pred until true or bound seconds: the delay; fails with the
    last value seen."""
    t0 = time.monotonic()
    last = None
    while True:
        try:
            last = pred()
        except OSError as e:
            last = e
        if last is True:
            d = time.monotonic() - t0
            DELAYS.append((case, d))
            print(f"delay {case}: {d * 1000:.1f} ms")
            return d
        if time.monotonic() - t0 > bound:
            pytest.fail(f"{case}: host view still stale after {bound} s (last: {last!r})")
        time.sleep(0.002)


class Change:
    """A job that runs script inside the sandbox, marks it done, and keeps
    running (so the sandbox is busy while the host looks) until ended."""

    n = 0

    def __init__(self, t, script):
        Change.n += 1
        self.t = t
        self.done = t / "workspace" / f".done-{Change.n}"
        self.job = mkjob(t, f"change{Change.n}")
        start(self.job, f"set -e\ncd {INSIDE}\n{script}\n: > {INSIDE}/{self.done.name}\nexec sleep 120")
        assert wait_until(self.done.exists, 30, 0.005), f"job {self.job.name} did not finish its change"
        assert read_json(self.job / "status")["state"] == "running"

    def end(self):
        write_ctl(self.job / "ctl", "kill")
        wait_exit(self.job, 30)
        os.unlink(self.done)


def _ws(t):
    return t / "workspace"


def _acquire(m, thread):
    """alice/thread acquired, its init recorded: teardown ends it by pid
    whatever the daemon does (a sandbox made here and not recorded outlived
    a killed daemon once)."""
    t = m.mnt / "alice" / thread
    os.makedirs(t)
    m.init_pid(t)
    return t


def test_status_says_long_and_config_shows_timeout(sandbox):
    m, t = sandbox
    st = read_json(t / "status")
    assert st["cache"] == "long", st
    top = read_json(m.mnt / ".status")
    assert top["cache_watcher"]["state"] == "fanotify", top
    assert read_json(m.mnt / ".config")["cache_timeout"] == 300


def test_rename_and_remove_under_cached_lookups_and_listing(sandbox):
    m, t = sandbox
    ws = _ws(t)
    for name in ("a", "gone"):
        (ws / name).write_text(name)
    os.mkdir(ws / "d")
    (ws / "d" / "x").write_text("x")
    # prime: lookups, attributes, listings
    for _ in range(3):
        os.stat(ws / "a"), os.stat(ws / "gone"), os.stat(ws / "d" / "x")
        sorted(os.listdir(ws)), os.listdir(ws / "d")
    c = Change(t, "mv a b\nrm gone\nmv d/x d/y")
    try:
        _poll("rename: old name", lambda: not os.path.lexists(ws / "a"))
        _poll("rename: new name", lambda: (ws / "b").read_text() == "a")
        _poll("remove", lambda: not os.path.lexists(ws / "gone"))
        _poll("listing", lambda: sorted(n for n in os.listdir(ws) if not n.startswith(".done")) == ["b", "d"])
        _poll("listing of a subdirectory", lambda: os.listdir(ws / "d") == ["y"])
        with pytest.raises(FileNotFoundError):
            os.stat(ws / "d" / "x")
    finally:
        c.end()


def test_names_a_job_makes_show_though_the_host_found_them_missing(sandbox):
    # "no such file" is cached too while the watcher serves the sandbox: a
    # name a job creates, links, renames to or makes a directory of must
    # show within the bound all the same (issue 23 item 3)
    m, t = sandbox
    ws = _ws(t)
    (ws / "src").write_text("s")
    os.mkdir(ws / "sub")
    names = ("new", "sub/new", "linked", "moved", "newdir", "sym")
    for _ in range(3):
        for n in names:
            with pytest.raises(FileNotFoundError):
                os.stat(ws / n)
    c = Change(t, "echo n > new\necho s > sub/new\nln src linked\necho m > tmp\nmv tmp moved\n"
               "mkdir newdir\nln -s src sym")
    try:
        _poll("created", lambda: (ws / "new").read_text() == "n\n")
        _poll("created in a subdirectory", lambda: (ws / "sub" / "new").read_text() == "s\n")
        _poll("hard link", lambda: os.stat(ws / "linked").st_ino == os.stat(ws / "src").st_ino)
        _poll("renamed to", lambda: (ws / "moved").read_text() == "m\n")
        _poll("mkdir", lambda: os.path.isdir(ws / "newdir"))
        _poll("symlink", lambda: os.readlink(ws / "sym") == "src")
    finally:
        c.end()
    # and a name a job removes is missing again, for good
    for _ in range(2):
        os.stat(ws / "new")
    c = Change(t, "rm new")
    try:
        _poll("removed again", lambda: not os.path.lexists(ws / "new"))
        for _ in range(3):
            assert not os.path.lexists(ws / "new")
    finally:
        c.end()


def test_truncate_append_recreate_with_open_files(sandbox):
    m, t = sandbox
    ws = _ws(t)
    (ws / "trunc").write_bytes(b"t" * 5000)
    (ws / "app").write_bytes(b"first\n")
    (ws / "re").write_bytes(b"old\n")
    fds = {n: os.open(ws / n, os.O_RDONLY) for n in ("trunc", "app", "re")}
    try:
        old_ino = os.stat(ws / "re").st_ino
        for n, fd in fds.items():  # prime attributes and pages
            os.fstat(fd), os.stat(ws / n), os.pread(fd, 8192, 0)
        c = Change(t, "truncate -s 0 trunc\necho second >> app\nrm re\necho new > re")
        try:
            _poll("truncate: stat", lambda: os.stat(ws / "trunc").st_size == 0)
            _poll("truncate: fstat of an open file", lambda: os.fstat(fds["trunc"]).st_size == 0)
            _poll("truncate: read of an open file", lambda: os.pread(fds["trunc"], 10, 0) == b"")
            _poll("append: stat", lambda: os.stat(ws / "app").st_size == 13)
            _poll("append: fstat of an open file", lambda: os.fstat(fds["app"]).st_size == 13)
            _poll("append: read of an open file", lambda: os.pread(fds["app"], 100, 0) == b"first\nsecond\n")
            _poll("recreate: new inode", lambda: os.stat(ws / "re").st_ino != old_ino)
            _poll("recreate: content", lambda: (ws / "re").read_bytes() == b"new\n")
            # the old open file is the removed file, unchanged
            assert os.pread(fds["re"], 100, 0) == b"old\n"
        finally:
            c.end()
    finally:
        for fd in fds.values():
            os.close(fd)


def test_mmap_sees_a_job_overwrite(sandbox):
    m, t = sandbox
    ws = _ws(t)
    (ws / "map").write_bytes(b"a" * 8192)
    fd = os.open(ws / "map", os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, 8192, prot=mmap.PROT_READ)
        try:
            assert mm[:4] == b"aaaa" and mm[4096:4100] == b"aaaa"
            before = os.fstat(fd).st_mtime_ns
            c = Change(t, "printf ZZZZ | dd of=map bs=1 seek=4096 conv=notrunc status=none")
            try:
                _poll("mmap overwrite", lambda: mm[4096:4100] == b"ZZZZ")
                assert mm[:4] == b"aaaa"
                _poll("mmap: fstat mtime", lambda: os.fstat(fd).st_mtime_ns != before)
                assert os.pread(fd, 4, 4096) == b"ZZZZ"
            finally:
                c.end()
        finally:
            mm.close()
    finally:
        os.close(fd)


def test_directory_replaced_by_a_file_and_back(sandbox):
    m, t = sandbox
    ws = _ws(t)
    os.mkdir(ws / "d")
    (ws / "d" / "inner").write_text("i")
    for _ in range(2):
        os.stat(ws / "d"), os.listdir(ws / "d"), os.stat(ws / "d" / "inner")
    watched = read_json(m.mnt / ".status")["cache_watcher"]["directories"]
    c = Change(t, "rm -r d\necho file > d")
    try:
        # the removed directory's watch goes with it
        _poll("dir removed: unwatched",
              lambda: read_json(m.mnt / ".status")["cache_watcher"]["directories"] == watched - 1)
        _poll("dir -> file: type", lambda: os.path.isfile(ws / "d") and not os.path.isdir(ws / "d"))
        _poll("dir -> file: content", lambda: (ws / "d").read_text() == "file\n")
        with pytest.raises(NotADirectoryError):
            os.stat(ws / "d" / "inner")
    finally:
        c.end()
    for _ in range(2):
        os.stat(ws / "d")
    c = Change(t, "rm d\nmkdir d\necho back > d/again")
    try:
        _poll("file -> dir: type", lambda: os.path.isdir(ws / "d"))
        _poll("file -> dir: listing", lambda: os.listdir(ws / "d") == ["again"])
        assert (ws / "d" / "again").read_text() == "back\n"
    finally:
        c.end()


def test_hard_links_changed_from_inside(sandbox):
    m, t = sandbox
    ws = _ws(t)
    (ws / "orig").write_text("o")
    for _ in range(2):
        assert os.stat(ws / "orig").st_nlink == 1
    c = Change(t, "ln orig link1\nln orig link2")
    try:
        _poll("link: nlink up", lambda: os.stat(ws / "orig").st_nlink == 3)
        assert os.stat(ws / "link1").st_ino == os.stat(ws / "orig").st_ino
    finally:
        c.end()
    os.stat(ws / "link2")
    c = Change(t, "rm link1 link2")
    try:
        _poll("unlink: nlink down", lambda: os.stat(ws / "orig").st_nlink == 1)
        _poll("unlink: name gone", lambda: not os.path.lexists(ws / "link2"))
    finally:
        c.end()
    # a link replaced by another file
    os.link(ws / "orig", ws / "l3")
    for _ in range(2):
        os.stat(ws / "l3"), os.stat(ws / "orig")
    c = Change(t, "rm l3\necho other > l3")
    try:
        _poll("link replaced: nlink", lambda: os.stat(ws / "orig").st_nlink == 1)
        _poll("link replaced: other file", lambda: os.stat(ws / "l3").st_ino != os.stat(ws / "orig").st_ino)
    finally:
        c.end()


def test_cache_timeout_zero_keeps_the_short_timeouts(sbxfs):
    m = sbxfs(config={"cache_timeout": 0})
    t = _acquire(m, "t")
    assert read_json(t / "status")["cache"] == "short (watcher off)"
    assert read_json(m.mnt / ".status")["cache_watcher"]["state"] == "off"
    assert "cache_timeout is 0" in m.log


@pytest.mark.parametrize("value", [-1, "soon", 86401])
def test_bad_cache_timeout_refused(sbxfs, value):
    inst = sbxfs(config={"cache_timeout": value}, start=False)
    rc, log = inst.run_expect_exit(timeout=10)
    assert rc == 1, log
    assert any(ln.startswith("sbxfs: config error: ") and "cache_timeout" in ln for ln in log.splitlines()), log


@pytest.mark.timeout_s(120)
def test_overflow_falls_back_to_short_timeouts(sbxfs):
    # test-only knob: the watcher sleeps 1.5 s before each read, so a burst
    # of 40 000 creates overflows the kernel's queue (16 384 events)
    m = sbxfs(env={"SBXFS_TEST_FSWATCH_STALL_MS": "1500"})
    t = _acquire(m, "t")
    ws = _ws(t)
    (ws / "keep").write_text("1")
    os.mkdir(ws / "many")  # known to the kernel, so watched
    for _ in range(2):
        os.stat(ws / "keep"), os.listdir(ws / "many")
        assert not os.path.lexists(ws / "ghost")  # "no such file", cached
    assert read_json(t / "status")["cache"] == "long"
    c = Change(t, "cd many\ni=0\nwhile [ $i -lt 40000 ]; do : > f$i; i=$((i+1)); done\n"
               "cd ..\necho 22 > keep\necho g > ghost")
    try:
        _poll("overflow: status", lambda: read_json(t / "status")["cache"] == "short (watcher overflow)", 30)
        assert re.search(r"event queue overflow: data caches take the short timeouts", m.log), m.log[-3000:]
        assert read_json(m.mnt / ".status")["cache_watcher"]["overflows"] >= 1
        # what was lost is dropped from the kernel's caches at the overflow
        _poll("overflow: a change in the lost events", lambda: (ws / "keep").read_text() == "22\n", 10)
        _poll("overflow: a name made in the lost events", lambda: (ws / "ghost").read_text() == "g\n", 10)
        assert len(os.listdir(ws / "many")) == 40000
    finally:
        c.end()


@pytest.mark.timeout_s(180)
def test_flood_of_changes_does_not_stall_other_sandboxes(mnt):
    m = mnt
    a = _acquire(m, "flood")
    b = _acquire(m, "calm")
    (b / "workspace" / "f").write_text("calm")
    # 100 000 changes as fast as python makes them (creates, renames, appends, removes)
    # in a directory the kernel knows, so every one is an event for the watcher
    os.mkdir(a / "workspace" / "fl")
    os.listdir(a / "workspace" / "fl")
    # (and at most 60 s of them, so a loaded host still ends the flood well
    # inside the test's limit: the job never outlives the test)
    (a / "workspace" / "flood.py").write_text(
        "import os, time\nos.chdir('fl')\nend = time.monotonic() + 60\n"
        "for i in range(25000):\n"
        "    open('a%d' % i, 'w').close()\n    os.rename('a%d' % i, 'b%d' % i)\n"
        "    with open('b%d' % i, 'a') as f:\n        f.write('x')\n    os.unlink('b%d' % i)\n"
        "    if i % 100 == 0 and time.monotonic() > end:\n        break\n")
    j = mkjob(a, "flood")
    start(j, f"cd {INSIDE} && python3 flood.py")
    lat = []
    t_end = time.monotonic() + 90
    n = 0
    try:
        while read_json(j / "status")["state"] == "running" and time.monotonic() < t_end:
            t0 = time.monotonic()
            os.stat(b / "workspace" / "f")
            with open(b / "workspace" / f"w{n % 10}", "w") as f:
                f.write("y")
            os.listdir(b / "workspace")
            read_json(b / "status")
            lat.append(time.monotonic() - t0)
            n += 1
        assert wait_exit(j, 60) == 0
    finally:
        if read_json(j / "status")["state"] == "running":
            write_ctl(j / "ctl", "kill")
    assert lat, "the flood ended before any request was timed"
    ev = read_json(m.mnt / ".status")["cache_watcher"]["events"]
    assert ev >= 10000, f"the watcher saw {ev} events of the flood"
    lat.sort()
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    print(f"other sandbox during the flood: {len(lat)} rounds, p50 {lat[len(lat) // 2] * 1000:.1f} ms, "
          f"p99 {p99 * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms")
    assert lat[-1] < 2.0, f"a request of another sandbox took {lat[-1]:.2f} s during the flood"
    # and the flooding sandbox's view is right once it ends
    _poll("after the flood", lambda: os.listdir(a / "workspace" / "fl") == [])
    st = read_json(b / "status")["cache"]
    assert st in ("long", "short (watcher overflow)"), st


@pytest.mark.timeout_s(180)
def test_watch_limit_puts_that_sandbox_alone_on_short_timeouts(mnt):
    m = mnt
    big = _acquire(m, "big")
    other = _acquire(m, "other")
    ws = _ws(big)
    os.mkdir(ws / "tree")
    # 16 500 directories made inside, then learned by the host: past the cap of
    # 16 384 watched directories per sandbox
    (ws / "mk.py").write_text("import os\nfor i in range(16500):\n    os.mkdir('tree/d%05d' % i)\n")
    j = mkjob(big, "mk")
    start(j, f"cd {INSIDE} && python3 mk.py")
    assert wait_exit(j, 120) == 0
    n = 0
    with os.scandir(ws / "tree") as it:
        for e in it:
            e.stat(follow_symlinks=False)
            n += 1
    assert n == 16500
    for d in ("d00000", "d16499"):
        os.stat(ws / "tree" / d)
    _poll("limit: status", lambda: read_json(big / "status")["cache"] == "short (watch limit)", 10)
    assert "watch limit reached: 16384 directories" in m.log
    # only that sandbox
    assert read_json(other / "status")["cache"] == "long"
    # and its changes still show (the short timeouts, the watched part invalidated)
    (ws / "f").write_text("1")
    os.stat(ws / "f")
    c = Change(big, "echo 22 > f")
    try:
        _poll("limit: a change", lambda: os.stat(ws / "f").st_size == 3)
    finally:
        c.end()


def test_release_lets_go_of_the_watches(mnt):
    m = mnt
    t = _acquire(m, "r")
    for d in ("a", "b", "c"):
        os.mkdir(_ws(t) / d)
        os.listdir(_ws(t) / d)
    assert read_json(m.mnt / ".status")["cache_watcher"]["directories"] >= 4
    os.rmdir(t)
    _poll("release: no watch left",
          lambda: read_json(m.mnt / ".status")["cache_watcher"]["directories"] == 0, 10)
    # reacquired: a new view, watched again
    _acquire(m, "r")
    os.listdir(_ws(t) / "a")
    assert read_json(t / "status")["cache"] == "long"
    assert read_json(m.mnt / ".status")["cache_watcher"]["directories"] >= 2


@pytest.mark.timeout_s(120)
def test_a_detached_daemon_keeps_its_watcher(sbxfs):
    # the watcher is a thread: it must be started after the detaching fork
    m = sbxfs(detach=True)
    t = _acquire(m, "t")
    ws = _ws(t)
    (ws / "f").write_text("1")
    for _ in range(2):
        os.stat(ws / "f")
    assert read_json(t / "status")["cache"] == "long"
    c = Change(t, "echo 22 > f")
    try:
        _poll("detached: a change", lambda: os.stat(ws / "f").st_size == 3)
    finally:
        c.end()


def _events(m):
    return read_json(m.mnt / ".status")["cache_watcher"]["events"]


@pytest.mark.parametrize("ignored", [True, False])
def test_host_writes_through_the_mount_stay_out_of_the_queue(sbxfs, ignored):
    # the host's writes through the mount are the daemon's backing files
    # written through the daemon's own mount of state_dir: an ignore mark on
    # that mount keeps them out of fanotify's queue (the watcher would read
    # and drop each); a job's writes, through its own bind mounts, still come
    env = {} if ignored else {"SBXFS_TEST_FSWATCH_NO_MOUNT_IGNORE": "1"}
    m = sbxfs(env=env)
    t = _acquire(m, "t")
    ws = _ws(t)
    (ws / "log").write_text("")
    os.listdir(ws)
    if ignored:
        assert "no ignore mark" not in m.log
    e0 = _events(m)
    for i in range(40):  # paced: queued events of one writer and file merge
        with open(ws / "log", "a") as f:
            f.write("line %d\n" % i)
        time.sleep(0.01)
    c = Change(t, "echo job >> log")
    try:
        # the queue is read in order: the job's change seen, the host's writes were read too
        _poll("a job's append after the host's", lambda: (ws / "log").read_text().endswith("line 39\njob\n"))
        n = _events(m) - e0
        print(f"events for 40 host appends and a job's change: {n}")
        if ignored:
            assert n < 20, f"{n} events: the host's writes were queued"
        else:
            # each append is a write and a close (80 events; fewer when the kernel
            # merges what waits in its queue on a loaded host)
            assert n >= 20, f"{n} events: without the mark each host write is an event"
    finally:
        c.end()
