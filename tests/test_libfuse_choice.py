# SPDX-License-Identifier: MIT
"""mk/libfuse.sh's choice of libfuse (docs/libfuse.md): Debian unstable's fuse3 first (3.18,
FUSE over io_uring), then trixie's, then the system's, with one line saying why.

Hermetic: the script runs on a copy of mk/ in a scratch tree, against a local mirror
that has no such suite (every fetch fails as an offline or broken mirror would); the
repository's own build/libfuse is never touched.  What the real mirror gives is in
build/libfuse.mk of the tree (test_this_tree_is_built_on_3_18)."""

import http.server
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def empty_mirror():
    """A local HTTP server that answers 404 to everything."""
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_error(404)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/debian"
    srv.shutdown()
    srv.server_close()


def run_script(tmp_path, mirror, mode, suites=None):
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "mk", tree / "mk")
    env = dict(os.environ, SBXFS_LIBFUSE=mode, SBXFS_DEBIAN_MIRROR=mirror)
    env.pop("SBXFS_LIBFUSE_SUITE", None)
    if suites:
        env["SBXFS_LIBFUSE_SUITE"] = suites
    return tree, subprocess.run(["bash", str(tree / "mk" / "libfuse.sh")], capture_output=True, text=True,
                                env=env, timeout=120)


needs_apt = pytest.mark.skipif(not shutil.which("apt-get") or
                               not Path("/usr/share/keyrings/debian-archive-keyring.gpg").exists(),
                               reason="needs apt-get and debian-archive-keyring")


@needs_apt
def test_unfetchable_suites_fall_back_to_the_system_with_one_line(tmp_path, empty_mirror):
    tree, r = run_script(tmp_path, empty_mirror, "auto")
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if "unavailable" in ln]
    assert len(notes) == 1, r.stderr
    # both suites tried, in order, each named with its cause
    assert re.search(r"\(sid\):.*\(trixie\):", notes[0]), notes[0]
    assert "FUSE_SOURCE := system" in r.stdout and "FUSE_IO_URING := 0" in r.stdout, r.stdout
    assert (tree / "build" / "libfuse" / "fetch-failed").exists()
    assert not (tree / "build" / "libfuse" / "prefix").exists()


@needs_apt
def test_build_mode_fails_naming_the_suites(tmp_path, empty_mirror):
    _, r = run_script(tmp_path, empty_mirror, "build", suites="sid")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "SBXFS_LIBFUSE=build: could not fetch fuse3 source (sid)" in r.stderr, r.stderr
    assert "trixie" not in r.stderr, "one suite given: only that one is tried"


def test_this_tree_is_built_on_3_18():
    """`make` on this Debian 12 machine picked unstable's 3.18 with io_uring (or the
    system's, when SBXFS_LIBFUSE=system chose it)."""
    mk = (REPO / "build" / "libfuse.mk").read_text()
    if "FUSE_SOURCE := system" in mk:
        pytest.skip("built on the system's libfuse (SBXFS_LIBFUSE=system or no network)")
    assert re.search(r"^FUSE_VERSION := 3\.(1[89]|[2-9]\d)", mk, re.M), mk
    assert "FUSE_IO_URING := 1" in mk and "-luring" in mk, mk
