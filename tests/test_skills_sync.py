# SPDX-License-Identifier: MIT
"""The skills upload sync (skills/, DESIGN §8, issue 11 point 4) against both
remote providers and their fake servers (remoteutil.py): opensandbox and aio
at a base_url, which cannot mount the host's skills/ tree.  What reached the
sandbox is read from the sandbox's own root on the host (the fakes' real
bubblewrap roots) and through jobs; what it cost is counted in the fakes'
request logs.  test_skills.py has the rules every provider shares."""

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

import sbxutil
import test_jobs as J
from remoteutil import fake, remote, sbxfs  # noqa: F401
from sbxutil import wait_until
from test_remote_data import Server, box  # noqa: F401


def make_tree(root, n=445, tag="file"):
    """n files in 15 skills of 3 directories each."""
    for i in range(n):
        p = root / f"skill{i % 15:02d}" / f"d{(i // 15) % 3}"
        p.mkdir(parents=True, exist_ok=True)
        (p / f"f{i:03d}.md").write_text(f"{tag} {i}\n")


def skills_status(d):
    return json.loads((d / "status").read_text())["skills"]


def fsync_path(p):
    fd = os.open(p, os.O_RDONLY | (os.O_DIRECTORY if p.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def in_sandbox(srv, d):
    """The sandbox's skills path (/mnt/skills) on the host."""
    return Path(srv.root(d)) / "mnt" / "skills"


def tree_of(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_initial_445_files_then_one_change_uploads_one_file(box):
    _, d, srv = box
    sk = d / "skills"
    before, reqs = srv.files_uploaded(), srv.count("upload")
    make_tree(sk)
    fsync_path(sk)  # returns once the sandbox has all of it
    if srv.remote == "opensandbox":  # execd takes many files a request: batches of 64
        assert srv.files_uploaded() - before == 445 and srv.count("upload") - reqs == 7
    else:  # one request a file, and one list of the 61 directories to make
        assert srv.count("upload") - reqs == 445 + 1
    st = skills_status(d)
    assert st["state"] == "synced" and st["generation_synced"] == st["generation_written"], st
    assert st["last_error"] is None and st["files_uploaded"] == 445, st
    assert tree_of(in_sandbox(srv, d)) == tree_of(sk)
    code, out, _ = J.run_job(d, "n", "find /mnt/skills -type f | wc -l; cat /mnt/skills/skill03/d1/f108.md")
    assert out.split() == ["445", "file", "108"]
    # one changed file: one upload, and nothing else is sent again
    before, reqs = srv.files_uploaded(), srv.count("upload")
    with open(sk / "skill03" / "d1" / "f108.md", "w") as f:
        f.write("changed\n")
        f.flush()
        os.fsync(f.fileno())
    assert srv.files_uploaded() - before == 1 and srv.count("upload") - reqs == 1
    assert (in_sandbox(srv, d) / "skill03" / "d1" / "f108.md").read_text() == "changed\n"
    st2 = skills_status(d)
    assert st2["files_uploaded"] == 446 and st2["generation_synced"] > st["generation_synced"], st2
    # a touch that changes nothing uploads nothing
    before = srv.files_uploaded()
    os.utime(sk / "skill03" / "d1" / "f108.md")
    fsync_path(sk)
    assert srv.files_uploaded() == before
    m = sbxutil.parse_metrics((d.parent.parent / ".metrics").read_text())
    assert m.get("sbxfs_skill_files_uploaded_total", 0) >= 446, m


def test_deletions_and_renames_propagate(box):
    _, d, srv = box
    sk = d / "skills"
    make_tree(sk, 30)
    fsync_path(sk)
    (sk / "skill00" / "d0" / "f000.md").unlink()
    subprocess.run(["rm", "-rf", str(sk / "skill01")], check=True)
    os.rename(sk / "skill02", sk / "renamed")
    fsync_path(sk)
    got = in_sandbox(srv, d)
    assert not (got / "skill00" / "d0" / "f000.md").exists()
    assert not (got / "skill01").exists() and not (got / "skill02").exists()
    assert tree_of(got) == tree_of(sk)
    _, out, _ = J.run_job(d, "ls", "test -e /mnt/skills/skill00/d0/f000.md || echo gone1; "
                                   "test -e /mnt/skills/skill01 || echo gone2; cat /mnt/skills/renamed/d0/f002.md")
    assert out.split() == ["gone1", "gone2", "file", "2"]


def test_fsync_waits_for_the_sync(box):
    """With every upload slowed down, fsync still returns only once the
    sandbox has the file: what the sandbox has is read right after it."""
    _, d, srv = box
    sk = d / "skills"
    (sk / "a").mkdir()
    fsync_path(sk)
    srv.fault("upload", delay=1.5, times=None)
    try:
        with open(sk / "a" / "SKILL.md", "w") as f:
            f.write("# a\n")
            f.flush()
            os.fsync(f.fileno())
            assert (in_sandbox(srv, d) / "a" / "SKILL.md").read_text() == "# a\n"
        (sk / "a" / "more.md").write_text("more\n")
        fsync_path(sk / "a")  # a directory's fsync waits as well
        assert (in_sandbox(srv, d) / "a" / "more.md").read_text() == "more\n"
    finally:
        srv.clear()


def test_fsync_fails_with_the_syncs_error_then_succeeds_when_the_server_does(box):
    _, d, srv = box
    sk = d / "skills"
    fsync_path(sk)
    srv.fault("upload", status=507, times=None)
    (sk / "x.md").write_text("x\n")
    make_tree(sk / "many", 100)  # several batches where the API takes many files a request
    with pytest.raises(OSError) as e:
        fsync_path(sk)
    assert e.value.errno == errno.ENOSPC
    st = skills_status(d)
    assert st["state"] in ("error", "pending", "syncing") and "skills/" in (st["last_error"] or ""), st
    assert st["generation_synced"] < st["generation_written"], st
    srv.clear()
    fsync_path(sk)  # the sync it asks for now succeeds: not the old error
    assert (in_sandbox(srv, d) / "x.md").read_text() == "x\n"
    assert tree_of(in_sandbox(srv, d)) == tree_of(sk)
    st = skills_status(d)
    assert st["state"] == "synced" and st["generation_synced"] == st["generation_written"], st


def test_status_shows_the_generations_of_a_sync_in_flight(box):
    _, d, srv = box
    sk = d / "skills"
    fsync_path(sk)
    s0 = skills_status(d)
    srv.fault("upload", delay=1, times=None)
    try:
        make_tree(sk, 6)
        assert wait_until(lambda: skills_status(d)["state"] == "syncing", 30), skills_status(d)
        st = skills_status(d)
        assert st["generation_written"] > s0["generation_written"], (s0, st)
        assert st["generation_synced"] < st["generation_written"], st
    finally:
        srv.clear()
    fsync_path(sk)
    st = skills_status(d)
    assert st["state"] == "synced" and st["generation_synced"] == st["generation_written"], st


def test_rmdir_during_a_sync_drains_it(box):
    m, d, srv = box
    sk = d / "skills"
    fsync_path(sk)
    root = in_sandbox(srv, d)
    srv.fault("upload", delay=0.3, times=None)
    try:
        make_tree(sk, 12)
        assert wait_until(lambda: skills_status(d)["state"] == "syncing", 30), skills_status(d)
        os.rmdir(d)  # waits for the sync: the warm sandbox has every file
    finally:
        srv.clear()
    assert len(list(root.rglob("*.md"))) == 12
    host_tree = tree_of(m.thread_data("alice", "t") / "skills")
    assert tree_of(root) == host_tree
    before = srv.files_uploaded()
    os.makedirs(d)  # reclaimed: nothing to upload again
    fsync_path(d / "skills")
    assert srv.files_uploaded() == before
    assert skills_status(d)["state"] == "synced"


def test_modes_and_names_an_api_could_expand_arrive_as_they_are(box):
    _, d, srv = box
    sk = d / "skills"
    for name, mode in (("open", 0o755), ("private", 0o700), ("group", 0o750)):
        (sk / name).mkdir()
        os.chmod(sk / name, mode)
        for f, fmode in (("run.sh", 0o755), ("key.md", 0o600), ("$HOME.md", 0o644), ("~tilde", 0o644)):
            (sk / name / f).write_text(f"{name}/{f}\n")
            os.chmod(sk / name / f, fmode)
    fsync_path(sk)
    got = in_sandbox(srv, d)
    assert tree_of(got) == tree_of(sk)
    for p in sk.rglob("*"):
        q = got / p.relative_to(sk)
        assert os.stat(q).st_mode & 0o777 == os.stat(p).st_mode & 0o777, p


# A non-root writer: what a user mapped by `users:` does under skills/.
WRITER = r"""
import json, os, sys
root = sys.argv[1]
st = os.stat(root)
os.makedirs(os.path.join(root, "mine", "docs"))
with open(os.path.join(root, "mine", "SKILL.md"), "w") as f:
    f.write("# mine\n")
    f.flush()
    os.fsync(f.fileno())  # returns once the sandbox has it
with open(os.path.join(root, "mine", "docs", "how.md"), "w") as f:
    f.write("how\n")
fd = os.open(os.path.join(root, "mine", "docs"), os.O_RDONLY | os.O_DIRECTORY)
os.fsync(fd)
os.close(fd)
print(json.dumps({"uid": st.st_uid, "mode": st.st_mode & 0o7777}))
"""


def _free_uid(start=62000):
    import pwd
    uid = start
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


@pytest.mark.timeout_s(120)
def test_a_mapped_user_writes_skills_and_the_sandbox_sees_them(sbxfs, remote, fake):
    """skills/ of a remote sandbox is the mapped user's (as on the local
    provider), not root's: that user, not root, adds a skill and the sandbox
    has it once fsync returns."""
    import shutil
    import sys
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or not setpriv:
        pytest.skip("needs root and setpriv")
    uid = _free_uid()
    m = sbxfs(config={"users": {"alice": uid}, "allow_other": True})
    d = m.mnt / "alice" / "t"
    os.makedirs(d)
    r = subprocess.run([setpriv, "--reuid", str(uid), "--regid", str(uid), "--clear-groups", sys.executable, "-c",
                        WRITER, str(d / "skills")], capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, f"the user could not write under skills/: {r.stderr}"
    st = json.loads(r.stdout)
    assert st["uid"] == uid and st["mode"] & 0o700 == 0o700, st
    srv = Server(remote, fake)
    inside = in_sandbox(srv, d)
    assert (inside / "mine" / "SKILL.md").read_text() == "# mine\n"
    assert (inside / "mine" / "docs" / "how.md").read_text() == "how\n"
    code, out, _ = J.run_job(d, "see", "cat /mnt/skills/mine/SKILL.md /mnt/skills/mine/docs/how.md")
    assert code == 0 and out == "# mine\nhow\n", out
    # on the host the files are the user's, as the local provider's are
    host = m.thread_data("alice", "t") / "skills" / "mine"
    assert host.stat().st_uid == uid and (host / "SKILL.md").stat().st_uid == uid
    assert sbxutil.status(d)["uid"] == uid
