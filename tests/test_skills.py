# SPDX-License-Identifier: MIT
"""skills/ (DESIGN §8) with a provider that mounts it (local): the limits,
the symlink rule, copies never links, the skills.path library, and the
status a mount provider gives (every generation synced at once).  The
upload sync against the remote providers is in test_skills_sync.py."""

import errno
import json
import os

import pytest


def status(d):
    return json.loads((d / "status").read_text())["skills"]


def test_mount_provider_reports_every_generation_synced(sandbox):
    _, d = sandbox
    sk = d / "skills"
    before = status(d)
    assert before["state"] == "mounted"
    (sk / "a").mkdir()
    (sk / "a" / "SKILL.md").write_text("hello\n")
    os.rename(sk / "a" / "SKILL.md", sk / "a" / "README.md")
    (sk / "a" / "README.md").unlink()
    after = status(d)
    assert after["generation_written"] >= before["generation_written"] + 4
    assert after["generation_synced"] == after["generation_written"]
    assert after["last_error"] is None
    # fsync under skills/ of a mount provider: nothing to wait for
    fd = os.open(sk / "a", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_symlinks_absolute_or_leaving_skills_are_refused(sandbox):
    _, d = sandbox
    sk = d / "skills"
    (sk / "pkg" / "sub").mkdir(parents=True)
    (sk / "pkg" / "f").write_text("x")
    for where, target in [(sk / "abs", "/etc/passwd"), (sk / "up", "../workspace"),
                          (sk / "pkg" / "sub" / "far", "../../../x"), (sk / "pkg" / "root", "/")]:
        with pytest.raises(OSError) as e:
            os.symlink(target, where)
        assert e.value.errno == errno.EPERM, (where, target)
        assert not os.path.lexists(where)
    os.symlink("../f", sk / "pkg" / "sub" / "ok")
    os.symlink("pkg/./sub/../f", sk / "ok2")
    assert os.readlink(sk / "pkg" / "sub" / "ok") == "../f"


def test_no_links_or_renames_between_skills_and_other_dirs(sandbox):
    _, d = sandbox
    (d / "workspace" / "w").write_text("w")
    (d / "skills" / "s").write_text("s")
    for src, dst in [(d / "workspace" / "w", d / "skills" / "w"), (d / "skills" / "s", d / "workspace" / "s")]:
        with pytest.raises(OSError) as e:
            os.link(src, dst)
        assert e.value.errno == errno.EXDEV
        with pytest.raises(OSError) as e:
            os.rename(src, dst)
        assert e.value.errno == errno.EXDEV
    # mv copies across: the result is a separate file
    os.makedirs(d / "skills" / "moved")


def test_no_fifos_in_skills(sandbox):
    _, d = sandbox
    with pytest.raises(OSError) as e:
        os.mkfifo(d / "skills" / "p")
    assert e.value.errno == errno.EPERM


def test_limits_give_efbig_and_enospc(sbxfs):
    inst = sbxfs(config={"skills": {"max_file_size": "1M", "max_total_size": "3M", "max_files": 5}})
    d = inst.mnt / "alice" / "t"
    os.makedirs(d)
    sk = d / "skills"
    # one file over max_file_size: EFBIG at the write that crosses it
    with open(sk / "big", "wb", buffering=0) as f:
        f.write(b"x" * (1 << 20))
        with pytest.raises(OSError) as e:
            f.write(b"y")
        assert e.value.errno == errno.EFBIG
    assert (sk / "big").stat().st_size == 1 << 20
    with pytest.raises(OSError) as e:
        os.truncate(sk / "big", (1 << 20) + 1)
    assert e.value.errno == errno.EFBIG
    # all files' bytes over max_total_size: ENOSPC
    (sk / "b2").write_bytes(b"x" * (1 << 20))
    (sk / "b3").write_bytes(b"x" * (1 << 20))
    with pytest.raises(OSError) as e:
        with open(sk / "b4", "wb", buffering=0) as f:
            f.write(b"x" * 4096)
    assert e.value.errno == errno.ENOSPC
    # room comes back when files go
    (sk / "b3").unlink()
    (sk / "b4").write_bytes(b"x" * 4096)
    # the number of files: 5
    for i in range(5):
        p = sk / f"n{i}"
        if len([x for x in os.listdir(sk) if not (sk / x).is_dir()]) >= 5:
            with pytest.raises(OSError) as e:
                p.write_text("n")
            assert e.value.errno == errno.ENOSPC
            break
        p.write_text("n")
    else:
        pytest.fail("max_files was never reached")
    # workspace/ has no such limits
    (d / "workspace" / "big").write_bytes(b"x" * (2 << 20))


def test_library_is_copied_never_linked(sbxfs, tmp_path):
    lib = tmp_path / "lib"
    (lib / "public" / "pdf").mkdir(parents=True)
    (lib / "public" / "pdf" / "SKILL.md").write_text("# pdf\n")
    (lib / "public" / "pdf" / "run.sh").write_text("#!/bin/sh\necho pdf\n")
    os.chmod(lib / "public" / "pdf" / "run.sh", 0o755)
    os.symlink("SKILL.md", lib / "public" / "pdf" / "link.md")
    os.symlink("/etc/passwd", lib / "public" / "pdf" / "evil")
    os.chmod(tmp_path, 0o755)
    inst = sbxfs(config={"skills": {"path": str(lib)}})
    d = inst.mnt / "alice" / "t"
    os.makedirs(d)
    sk = d / "skills" / "public" / "pdf"
    assert (sk / "SKILL.md").read_text() == "# pdf\n"
    assert os.stat(sk / "run.sh").st_mode & 0o777 == 0o755
    assert os.readlink(sk / "link.md") == "SKILL.md"
    assert not os.path.lexists(sk / "evil")
    host = inst.thread_data("alice", "t") / "skills" / "public" / "pdf" / "SKILL.md"
    assert os.stat(host).st_ino != os.stat(lib / "public" / "pdf" / "SKILL.md").st_ino
    assert os.stat(host).st_nlink == 1
    # the sandbox sees the copy
    job = d / "jobs" / "j"
    job.mkdir()
    (job / "cmd").write_text("cat /mnt/skills/public/pdf/SKILL.md")
    assert (job / "exit").read_text().strip() == "0"
    assert (job / "stdout").read_text() == "# pdf\n"
    # editing the copy never touches the library
    (sk / "SKILL.md").write_text("changed\n")
    assert (lib / "public" / "pdf" / "SKILL.md").read_text() == "# pdf\n"
