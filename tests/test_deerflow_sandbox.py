# SPDX-License-Identifier: MIT
"""The DeerFlow package's Sandbox (python/sbxfs_deerflow) against a real
sbxfs mount with the local provider: every method of the semantics
reference §1.3 with its edge cases, and the list and search contracts of
§8.  The package is imported from the source tree (deerflowutil)."""

import errno
import os
import time

import pytest

import sbxutil
from deerflowutil import WS, provider_for, sbxfs_deerflow, scope_token
from sbxutil import read_json, read_text

UD = "/mnt/user-data"


@pytest.fixture
def box(sbxfs):
    """(instance, provider, sandbox) with alice/t acquired through the package."""
    m = sbxfs(config={"bash_command_timeout": 20})
    p = provider_for(m)
    sid = p.acquire("t", user_id="alice")
    m.init_pid(m.mnt / "alice" / "t")
    return m, p, p.get(sid)


def host(m, rel):
    return m.mnt / "alice" / "t" / rel


# --------------------------------------------------------------------------
# execute_command (§1.1, §1.3; output as §6.3 and §5.7)


def test_execute_command_output_format(box):
    m, p, sb = box
    assert sb.persistent_shell_sessions is False  # §1.2: declared, explicitly False
    assert sb.execute_command("echo out") == "out\n"
    assert sb.execute_command("pwd") == f"{WS}\n"
    assert sb.execute_command("true") == "(no output)"
    assert sb.execute_command("   ") == "(no output)"
    assert sb.execute_command("echo out; echo err >&2") == "out\n\nStd Error:\nerr\n"
    assert sb.execute_command("echo out; exit 3") == "out\n\nExit Code: 3"
    assert sb.execute_command("exit 4") == "\nExit Code: 4"
    assert sb.execute_command("echo e >&2; exit 5") == "\nStd Error:\ne\n\nExit Code: 5"
    # a script of several lines, bytes that are not UTF-8 shown as U+FFFD
    assert sb.execute_command("a=1\nb=2\necho $((a + b))") == "3\n"
    assert sb.execute_command("printf 'x\\377y'") == "x\ufffdy"
    # in the scope of a subagent: the same (each command is its own shell)
    assert sb.execute_command_in_scope("echo s", scope_id="agent:1") == "s\n"
    assert sb.release_command_scope("agent:1") is None


def test_execute_command_env_values_never_reach_the_command(box):
    m, p, sb = box
    env = {"SECRET": "s3cr3t value with 'quotes' and $(rm -rf /) and `id`",
           "PEM": "-----BEGIN KEY-----\nAAAA\n-----END KEY-----", "EMPTY": "", "_U8": "caf\u00e9"}
    out = sb.execute_command('printf "[%s]\\n[%s]\\n[%s]\\n[%s]\\n" "$SECRET" "$PEM" "${EMPTY-unset}" "$_U8"',
                             env=env)
    assert out == f"[{env['SECRET']}]\n[{env['PEM']}]\n[]\n[caf\u00e9]\n", out
    # nothing of the values is in the command text sbxfs recorded
    jobs_dir = host(m, "jobs")
    for name in os.listdir(jobs_dir):
        st = read_json(jobs_dir / name / "status")
        assert "s3cr3t" not in st["cmd"] and "BEGIN KEY" not in st["cmd"], st
    # env of one call does not leak into the next
    assert sb.execute_command('echo "[${SECRET-unset}]"') == "[unset]\n"


@pytest.mark.parametrize("key", ["1BAD", "A-B", "A B", "", "A;rm -rf /", "A=B", "\u00e9", 5, None])
def test_execute_command_bad_env_key_is_valueerror(box, key):
    m, p, sb = box
    before = sorted(os.listdir(host(m, "jobs")))
    with pytest.raises(ValueError) as e:
        sb.execute_command("echo never", env={"GOOD": "1", key: "x"})
    assert "is not a valid POSIX environment variable name" in str(e.value)
    assert "^[A-Za-z_][A-Za-z0-9_]*$" in str(e.value)
    assert sorted(os.listdir(host(m, "jobs"))) == before, "a refused env ran nothing"


def test_execute_command_env_nul_and_bad_timeout_are_valueerror(box):
    m, p, sb = box
    with pytest.raises(ValueError):
        sb.execute_command("true", env={"A": "x\0y"})
    for bad in (0, -1, float("inf"), float("nan"), "5", True):
        with pytest.raises(ValueError):
            sb.execute_command("true", timeout=bad)
    assert sb.execute_command("echo ok", env=None, timeout=None) == "ok\n"
    assert sb.execute_command("echo ok", env={}) == "ok\n"


@pytest.mark.timeout_s(120)
def test_execute_command_timeout_fires(box):
    m, p, sb = box
    t0 = time.monotonic()
    out = sb.execute_command("echo started; sleep 60; echo never", timeout=1.5)
    assert out.startswith("started\n"), out
    assert "Command timed out after 1.5 seconds and was terminated." in out, out
    assert out.endswith("\nExit Code: 124") and "never" not in out, out
    assert time.monotonic() - t0 < 50, "the per-call timeout did not apply (the configured one is 20 s)"
    # a timeout past bash_command_timeout gets that cap (20 s here), not an error
    out = sb.execute_command("echo fine", timeout=3600)
    assert out == "fine\n", out
    st = [read_json(host(m, "jobs") / n / "status") for n in sorted(os.listdir(host(m, "jobs")))]
    assert [s["timeout"] for s in st[-2:]] == [2, 20], st


def test_background_processes_outlive_their_command(box):
    m, p, sb = box
    assert sb.execute_command("(sleep 1; echo late > late.txt) >/dev/null 2>&1 &\necho started") == "started\n"
    assert sbxutil.wait_until(lambda: (host(m, "workspace") / "late.txt").exists(), 20)
    assert sb.execute_command("cat late.txt") == "late\n"


def test_huge_output_is_cut_with_deerflows_notice(box):
    m, p, sb = box
    out = sb.execute_command("head -c 11000000 /dev/zero | tr '\\0' a; echo tail >&2")
    cap = 10 << 20
    assert out.startswith("a" * 100)
    assert f"\n... [output truncated after {cap} of 11000000 bytes; remaining output discarded] ..." in out
    assert out.endswith("\nStd Error:\ntail\n"), out[-200:]


def test_execute_command_in_a_released_sandbox_is_an_error_text(box):
    m, p, sb = box
    os.rmdir(m.mnt / "alice" / "t")  # released behind the provider's back
    out = sb.execute_command("echo x")
    assert out.startswith("Error: ") and "not active" in out, out


# --------------------------------------------------------------------------
# read_file, write_file, update_file, download_file (§1.3)


def test_write_read_update_round_trip(box):
    m, p, sb = box
    sb.write_file(f"{WS}/deep/er/notes.md", "one\ntwo\n")
    assert read_text(host(m, "workspace/deep/er/notes.md")) == "one\ntwo\n"
    sb.write_file(f"{WS}/deep/er/notes.md", "three\n", append=True)
    assert sb.read_file(f"{WS}/deep/er/notes.md") == "one\ntwo\nthree\n"
    sb.write_file(f"{WS}/deep/er/notes.md", "replaced \u2713\n")
    assert sb.read_file(f"{WS}/deep/er/notes.md") == "replaced \u2713\n"
    data = bytes(range(256)) * 4
    sb.update_file(f"{UD}/uploads/blob.bin", data)
    assert sb.download_file(f"{UD}/uploads/blob.bin") == data
    sb.update_file(f"{UD}/outputs/o.txt", bytearray(b"out"))
    # files the package wrote belong to the sandbox's uid: its jobs change them
    uid = sbxutil.status(m.mnt / "alice" / "t")["uid"]
    assert os.stat(m.workspace_data("alice", "t") / "deep" / "er" / "notes.md").st_uid == uid
    assert os.stat(m.workspace_data("alice", "t") / "deep").st_uid == uid
    assert sb.execute_command("echo job >> deep/er/notes.md && cat ../uploads/blob.bin | wc -c") == "1024\n"
    assert sb.read_file(f"{WS}/deep/er/notes.md") == "replaced \u2713\njob\n"
    with pytest.raises(TypeError):
        sb.update_file(f"{WS}/x", "text")
    with pytest.raises(TypeError):
        sb.write_file(f"{WS}/x", b"bytes")


def test_read_file_line_ranges(box):
    m, p, sb = box
    sb.write_file(f"{WS}/f.txt", "l1\nl2\r\nl3\x0bstill3\nl4")
    f = f"{WS}/f.txt"
    assert sb.read_file(f, 1, 1) == "l1\n"
    assert sb.read_file(f, 2, 3) == "l2\r\nl3\x0bstill3\n"   # only \n ends a line
    assert sb.read_file(f, 4, 4) == "l4"                       # the last line has no newline
    assert sb.read_file(f, 3) == "l3\x0bstill3\nl4"
    assert sb.read_file(f, None, 2) == "l1\nl2\r\n"
    assert sb.read_file(f, 2, 99) == "l2\r\nl3\x0bstill3\nl4"  # past the end: what there is
    assert sb.read_file(f, 5, 9) == "" and sb.read_file(f, 99) == ""
    assert sb.read_file(f, 3, 2) == ""                         # end before start
    assert sb.read_file(f, 0, 1) == "l1\n"                     # start < 1 counts from 1
    sb.write_file(f"{WS}/empty.txt", "")
    assert sb.read_file(f"{WS}/empty.txt") == "" and sb.read_file(f"{WS}/empty.txt", 1, 1) == ""
    with pytest.raises(TypeError):
        sb.read_file(f, "1", 2)


def test_read_file_binary_and_non_utf8(box):
    m, p, sb = box
    sb.update_file(f"{WS}/latin1.txt", "caf\xe9\n".encode("latin-1"))
    assert sb.read_file(f"{WS}/latin1.txt") == "caf\ufffd\n"
    sb.update_file(f"{WS}/img.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    with pytest.raises(OSError) as e:
        sb.read_file(f"{WS}/img.png")
    assert e.value.errno == errno.EINVAL and "download_file" in str(e.value)
    assert sb.download_file(f"{WS}/img.png") == b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"


def test_missing_and_directory_paths(box):
    m, p, sb = box
    with pytest.raises(FileNotFoundError):
        sb.read_file(f"{WS}/nope.txt")
    with pytest.raises(FileNotFoundError):
        sb.download_file(f"{UD}/outputs/nope.bin")
    with pytest.raises(IsADirectoryError):
        sb.read_file(WS)
    with pytest.raises(IsADirectoryError):
        sb.download_file(f"{UD}/uploads")
    with pytest.raises(OSError):  # download errors are OSError (§1.3), local and remote alike
        sb.download_file(f"{UD}/uploads/missing")
    sb.write_file(f"{WS}/f", "a file")
    with pytest.raises(NotADirectoryError):
        sb.write_file(f"{WS}/f/under-a-file", "x")
    with pytest.raises(NotADirectoryError):
        sb.read_file(f"{WS}/f/under-a-file")


@pytest.mark.parametrize("path", [
    f"{WS}/../../../etc/passwd", f"{WS}/a/../../uploads/x", "..\\..\\etc\\passwd", f"{UD}/../user-data/x",
    "/etc/passwd", "relative/path.txt", "workspace/x", "/mnt/user-datax/x", f"{UD}/other/x", "/mnt/skillsx/y",
    "/", "",
])
def test_traversal_and_outside_paths_are_permissionerror(box, path):
    m, p, sb = box
    for call in (lambda: sb.read_file(path), lambda: sb.download_file(path), lambda: sb.write_file(path, "x"),
                 lambda: sb.update_file(path, b"x"), lambda: sb.list_dir(path), lambda: sb.glob(path, "*"),
                 lambda: sb.grep(path, "x")):
        with pytest.raises(PermissionError):
            call()
    assert not os.path.exists("/etc/passwd-x")


def test_symlinks_resolve_as_in_the_sandbox_and_never_escape(box):
    m, p, sb = box
    sb.write_file(f"{UD}/uploads/real.txt", "uploaded\n")
    sb.execute_command("ln -s ../uploads/real.txt rel-link; ln -s /mnt/user-data/uploads abs-dir; "
                       "ln -s /etc/passwd escape; ln -s ../../../../etc escape-dir; ln -s loop1 loop2; "
                       "ln -s loop2 loop1; ln -s /mnt/skills skills-link")
    assert sb.read_file(f"{WS}/rel-link") == "uploaded\n"
    assert sb.read_file(f"{WS}/abs-dir/real.txt") == "uploaded\n"
    assert sb.download_file(f"{WS}/abs-dir/real.txt") == b"uploaded\n"
    sb.write_file(f"{WS}/abs-dir/via-link.txt", "through a link\n")
    assert read_text(host(m, "uploads/via-link.txt")) == "through a link\n"
    for path in (f"{WS}/escape", f"{WS}/escape-dir/passwd", f"{WS}/escape-dir"):
        with pytest.raises(PermissionError) as e:
            sb.read_file(path)
        assert "escapes" in str(e.value)
        with pytest.raises(PermissionError):
            sb.list_dir(path)
    with pytest.raises(OSError) as e:
        sb.read_file(f"{WS}/loop1")
    assert e.value.errno == errno.ELOOP
    # the skills through a link are still read-only
    with pytest.raises(OSError) as e:
        sb.write_file(f"{WS}/skills-link/x.md", "x")
    assert e.value.errno == errno.EROFS


def test_user_data_root_and_skills(box):
    m, p, sb = box
    with pytest.raises(PermissionError):
        sb.write_file(f"{UD}/top.txt", "no")
    (host(m, "skills") / "public" / "demo").mkdir(parents=True)
    (host(m, "skills") / "public" / "demo" / "SKILL.md").write_text("# demo skill\n")
    assert sb.read_file("/mnt/skills/public/demo/SKILL.md") == "# demo skill\n"
    assert "/mnt/skills/public/demo/SKILL.md" in sb.list_dir("/mnt/skills", 3)
    hits, _ = sb.grep("/mnt/skills", "demo")
    assert [h.path for h in hits] == ["/mnt/skills/public/demo/SKILL.md"]
    for call in (lambda: sb.write_file("/mnt/skills/public/new.md", "x"),
                 lambda: sb.update_file("/mnt/skills/public/demo/SKILL.md", b"x")):
        with pytest.raises(OSError) as e:
            call()
        assert e.value.errno == errno.EROFS
    with pytest.raises(PermissionError):  # downloads are from /mnt/user-data only (§1.3)
        sb.download_file("/mnt/skills/public/demo/SKILL.md")


@pytest.mark.timeout_s(120)
def test_download_past_100_mib_is_efbig(box):
    m, p, sb = box
    with open(host(m, "outputs/huge.bin"), "wb") as f:
        f.truncate((100 << 20) + 1)  # sparse
    with pytest.raises(OSError) as e:
        sb.download_file(f"{UD}/outputs/huge.bin")
    assert e.value.errno == errno.EFBIG
    with open(host(m, "outputs/huge.bin"), "r+b") as f:
        f.truncate(100 << 20)
    assert len(sb.download_file(f"{UD}/outputs/huge.bin")) == 100 << 20


# --------------------------------------------------------------------------
# list_dir, glob, grep (§1.3, §8)


def tree(sb):
    for rel, text in {
        "src/app.py": "import os\nprint('Hello')\n", "src/util/helpers.py": "def helper():\n    return 42\n",
        "src/util/deep/deeper/x.py": "x = 1\n", "README.md": "# Hello project\nhello again\n",
        "node_modules/pkg/index.js": "hello from node_modules\n", ".git/config": "hello git\n",
        "build/out.py": "hello build\n", "debug.log": "hello log\n", "docs/guide.txt": "HELLO upper\n",
        "src/notes.md~": "hello backup\n",
    }.items():
        sb.write_file(f"{WS}/{rel}", text)


def test_list_dir_depth_order_ignores_and_errors(box):
    m, p, sb = box
    tree(sb)
    got = sb.list_dir(WS)
    assert got == [f"{WS}/README.md", f"{WS}/docs/", f"{WS}/docs/guide.txt", f"{WS}/src/", f"{WS}/src/app.py",
                   f"{WS}/src/util/"], got
    assert sb.list_dir(WS, max_depth=1) == [f"{WS}/README.md", f"{WS}/docs/", f"{WS}/src/"]
    deep = sb.list_dir(f"{WS}/src", max_depth=10)
    assert f"{WS}/src/util/deep/deeper/x.py" in deep and f"{WS}/src/notes.md~" not in deep
    # the root itself is never ignored (§8.2)
    assert sb.list_dir(f"{WS}/node_modules") == [f"{WS}/node_modules/pkg/", f"{WS}/node_modules/pkg/index.js"]
    assert sb.list_dir(UD, 1) == [f"{UD}/outputs/", f"{UD}/uploads/", f"{UD}/workspace/"]
    assert f"{WS}/src/" in sb.list_dir(UD, 3)
    # failures are never [] (§1.3, §15)
    with pytest.raises(FileNotFoundError):
        sb.list_dir(f"{WS}/missing")
    with pytest.raises(NotADirectoryError):
        sb.list_dir(f"{WS}/README.md")
    sb.execute_command("mkdir empty")
    assert sb.list_dir(f"{WS}/empty") == []
    with pytest.raises(ValueError):
        sb.list_dir(WS, max_depth=-1)


def test_list_dir_limit_is_500(box):
    m, p, sb = box
    sb.execute_command("mkdir many && cd many && i=0; while [ $i -lt 600 ]; do : > f$i; i=$((i+1)); done")
    got = sb.list_dir(f"{WS}/many")
    assert len(got) == 500 and got == sorted(got)


def test_glob_patterns_ignores_and_truncation(box):
    m, p, sb = box
    tree(sb)
    ms, tr = sb.glob(WS, "*.py")  # no "/": the basename, at any depth
    assert sorted(ms) == [f"{WS}/src/app.py", f"{WS}/src/util/deep/deeper/x.py", f"{WS}/src/util/helpers.py"]
    assert not tr, "build/ is ignored"
    ms, _ = sb.glob(WS, "src/*.py")  # anchored at the root
    assert ms == [f"{WS}/src/app.py"]
    ms, _ = sb.glob(WS, "src/**/*.py")  # ** spans zero or more directories
    assert sorted(ms) == sorted([f"{WS}/src/app.py", f"{WS}/src/util/helpers.py", f"{WS}/src/util/deep/deeper/x.py"])
    ms, _ = sb.glob(WS, "util", include_dirs=True)
    assert ms == [f"{WS}/src/util"]
    assert sb.glob(WS, "util") == ([], False)
    # one past the cap decides `truncated` (§8.3)
    assert sb.glob(WS, "*.py", max_results=3)[1] is False
    ms, tr = sb.glob(WS, "*.py", max_results=2)
    assert len(ms) == 2 and tr is True
    assert sb.glob(WS, "*.py", max_results=0) == ([], True)
    assert sb.glob(f"{WS}/node_modules", "*.js")[0] == [f"{WS}/node_modules/pkg/index.js"]
    ms, _ = sb.glob(UD, "workspace/src/*.py")
    assert ms == [f"{WS}/src/app.py"]
    with pytest.raises(FileNotFoundError):
        sb.glob(f"{WS}/missing", "*")
    with pytest.raises(ValueError):
        sb.glob(WS, "")


def test_grep_options_limits_and_errors(box):
    m, p, sb = box
    tree(sb)
    hits, tr = sb.grep(WS, "hello")  # case-insensitive by default; ignored dirs and *.log, *~ skipped
    assert sorted((h.path, h.line_number, h.line) for h in hits) == [
        (f"{WS}/README.md", 1, "# Hello project"), (f"{WS}/README.md", 2, "hello again"),
        (f"{WS}/docs/guide.txt", 1, "HELLO upper"), (f"{WS}/src/app.py", 2, "print('Hello')")], hits
    assert not tr
    hits, _ = sb.grep(WS, "Hello", case_sensitive=True)
    assert sorted(h.path for h in hits) == [f"{WS}/README.md", f"{WS}/src/app.py"]
    hits, _ = sb.grep(WS, "hello", glob="*.md")
    assert {h.path for h in hits} == {f"{WS}/README.md"}
    hits, _ = sb.grep(WS, "hello", glob="docs/*")
    assert [h.path for h in hits] == [f"{WS}/docs/guide.txt"]
    sb.write_file(f"{WS}/re.txt", "a.c\nabc\n(x)\n")
    assert [h.line for h in sb.grep(f"{WS}/re.txt", "a.c")[0]] == ["a.c", "abc"]
    assert [h.line for h in sb.grep(f"{WS}/re.txt", "a.c", literal=True)[0]] == ["a.c"]
    assert [h.line for h in sb.grep(f"{WS}/re.txt", "(x)", literal=True)[0]] == ["(x)"]
    hits, tr = sb.grep(f"{WS}/re.txt", "^", max_results=3)
    assert len(hits) == 3 and not tr
    hits, tr = sb.grep(f"{WS}/re.txt", "^", max_results=2)
    assert len(hits) == 2 and tr
    with pytest.raises(ValueError):
        sb.grep(WS, "([unclosed")
    with pytest.raises(FileNotFoundError):
        sb.grep(f"{WS}/missing", "x")
    # long lines are cut to 200 characters; binary and big files are skipped
    sb.write_file(f"{WS}/long.txt", "needle " + "x" * 500 + "\n")
    [h] = sb.grep(f"{WS}/long.txt", "needle")[0]
    assert len(h.line) == 200 and h.line.endswith("...")
    sb.update_file(f"{WS}/bin.dat", b"needle\0binary\n")
    with open(host(m, "workspace/big.txt"), "w") as f:
        f.write(("filler\n" * 160000) + "needle\n")
    assert {h.path for h in sb.grep(WS, "needle")[0]} == {f"{WS}/long.txt"}
    assert type(h).__name__ == "GrepMatch" and isinstance(h, sbxfs_deerflow.GrepMatch)


def test_the_id_is_deerflows_scope_token(box):
    m, p, sb = box
    assert sb.id == scope_token("alice", "t") == read_text(m.mnt / "alice" / "t" / "id").strip()
