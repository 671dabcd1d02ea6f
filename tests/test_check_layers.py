# SPDX-License-Identifier: MIT
"""mk/check-layers (issue 20 point 3): passes on the tree, fails on a copy of
the tree with one bad include planted: a header of a folder above, a FUSE
header below fs/, a circle of two modules of one folder; and not on what
only looks like one (an include in a comment, tests/).  Also the container
layer's own rule (point 3): it names no provider."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "mk" / "check-layers"
FOLDERS = ("common", "runtime", "providers", "net", "skills", "fs")


def check(root):
    r = subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


@pytest.fixture
def tree(tmp_path):
    """A copy of the daemon's sources (only .c and .h of the layer folders)."""
    for f in FOLDERS:
        (tmp_path / f).mkdir()
        for p in (REPO / f).iterdir():
            if p.suffix in (".c", ".h"):
                shutil.copy(p, tmp_path / f / p.name)
    return tmp_path


def plant(path, line):
    text = path.read_text()
    path.write_text(text + "\n" + line + "\n")


def test_the_tree_passes():
    code, out = check(REPO)
    assert code == 0, out


def test_the_copy_passes(tree):
    code, out = check(tree)
    assert code == 0, out


@pytest.mark.parametrize("src,inc,above", [
    ("common/buf.c", '#include "../runtime/work.h"', "runtime/"),
    ("runtime/work.c", '#include "../providers/pool.h"', "providers/"),
    ("providers/pool.c", '#include "../net/net.h"', "net/"),
    ("providers/pool.h", '#include "../skills/skills.h"', "skills/"),
    ("net/net.h", '#include "../fs/node.h"', "fs/"),
    ("skills/skills.c", '#  include "../fs/fswork.h"', "fs/"),
])
def test_a_header_of_a_folder_above_fails(tree, src, inc, above):
    plant(tree / src, inc)
    code, out = check(tree)
    assert code == 1, out
    assert src in out and f"{above} is above" in out, out
    assert "1 finding" in out, out


def test_a_fuse_header_below_fs_fails(tree):
    plant(tree / "runtime" / "park.h", "#include <fuse_lowlevel.h>")
    code, out = check(tree)
    assert code == 1 and "runtime/park.h" in out and "FUSE" in out, out


def test_two_modules_including_each_other_fail(tree):
    (tree / "providers" / "aaa.h").write_text('#include "bbb.h"\n')
    (tree / "providers" / "aaa.c").write_text('#include "aaa.h"\n')
    (tree / "providers" / "bbb.h").write_text("int bbb(void);\n")
    code, out = check(tree)
    assert code == 0, out  # aaa -> bbb only: fine
    (tree / "providers" / "bbb.c").write_text('#include "bbb.h"\n#include "aaa.h"\n')
    code, out = check(tree)
    assert code == 1, out
    assert "providers/" in out and "aaa" in out and "bbb" in out and "circle" in out, out


def test_a_circle_of_three_fails(tree):
    for a, b in (("xa", "xb"), ("xb", "xc"), ("xc", "xa")):
        (tree / "skills" / f"{a}.c").write_text(f'#include "{b}.h"\n')
        (tree / "skills" / f"{a}.h").write_text("\n")
    code, out = check(tree)
    assert code == 1 and "xa -> xb -> xc" in out, out


def test_what_only_looks_like_a_bad_include_passes(tree):
    plant(tree / "common" / "buf.c", '/* see #include "../fs/node.h" */')
    plant(tree / "providers" / "pool.c", '#include "../common/log.h"')  # down: fine
    (tree / "tests").mkdir()
    (tree / "tests" / "t.c").write_text('#include "../fs/node.h"\n')  # tests/ are exempt
    code, out = check(tree)
    assert code == 0, out


def test_the_container_layer_names_no_provider():
    """Issue 20 point 3: the container runtime layer (providers/container*)
    knows nothing of aio or of the docker provider, and tells no kinds of box
    apart by flags; the aio sandbox at a base_url is no container box."""
    layer = sorted((REPO / "providers").glob("container*.[ch]"))
    assert {p.name for p in layer} >= {"container.c", "container_int.h", "container_freeze.c"}, layer
    for p in layer:
        text = p.read_text()
        assert "aio" not in text.lower(), f"{p.name} names aio"
        for name in ("provider_docker", "dockbox", "docker_int.h", "sbxfs-box", "docker_box"):
            assert name not in text, f"{p.name} names the docker provider's {name}"
    cbox = (REPO / "providers" / "container_int.h").read_text().split("struct cbox {", 1)[1].split("};", 1)[0]
    for flag in ("bool aio", "bool remote", "int remote"):
        assert flag not in cbox, f"struct cbox has a kind flag: {flag}"
    abox = (REPO / "providers" / "aio_remote.c").read_text().split("struct abox {", 1)[1].split("};", 1)[0]
    assert "struct cbox" not in abox and "struct dbox" not in abox, abox
