# SPDX-License-Identifier: MIT
"""The DeerFlow package as a package: `pip install ./python` installs it
(Debian's pip, offline, no build isolation), DeerFlow's `use:` class path
resolves to the provider, and it needs nothing but the standard library
(DeerFlow itself is optional).  `make install` / `make uninstall` of it:
tests/test_operations.py."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "python" / "sbxfs_deerflow"
PYTHON = "/usr/bin/python3"


@pytest.mark.timeout_s(120)
def test_pip_install_and_deerflows_use_path(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(REPO / "python", src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    target = tmp_path / "site"
    r = subprocess.run([PYTHON, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation",
                        "--root-user-action=ignore", "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (target / "sbxfs_deerflow" / "provider.py").is_file()
    assert list(target.glob("sbxfs_deerflow-0.1.0.dist-info"))
    # DeerFlow resolves `use: module:Class` with importlib (§2.3)
    probe = ("import importlib, sbxfs_deerflow; mod, cls = 'sbxfs_deerflow:SbxfsSandboxProvider'.split(':'); "
             "c = getattr(importlib.import_module(mod), cls); print(c.__name__, sbxfs_deerflow.__version__, "
             "sbxfs_deerflow.__file__)")
    r = subprocess.run([PYTHON, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); {probe}"],
                       capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    name, version, path = r.stdout.split()
    assert (name, version) == ("SbxfsSandboxProvider", "0.1.0") and path.startswith(str(target)), r.stdout
    # without a mount it says so (and does not hang)
    r = subprocess.run([PYTHON, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); "
                        "from sbxfs_deerflow import SbxfsSandboxProvider as P; P(mountpoint='/nonexistent/sbx')"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "SbxfsNotMountedError: no sbxfs is mounted at /nonexistent/sbx" in r.stderr


def test_standard_library_only():
    """Every import of the package is the standard library's, its own, or
    DeerFlow's inside a try (optional)."""
    stdlib = set(sys.stdlib_module_names)
    for f in sorted(PKG.glob("*.py")):
        tree = ast.parse(f.read_text())
        guarded = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Try):
                for sub in node.body:
                    for n in ast.walk(sub):
                        guarded.add(id(n))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    continue  # the package's own modules
                names = [node.module]
            else:
                continue
            for n in names:
                top = n.split(".")[0]
                if top == "deerflow":
                    assert id(node) in guarded, f"{f.name}: DeerFlow imported outside a try"
                else:
                    assert top in stdlib, f"{f.name}: {n} is not in the standard library"
