# SPDX-License-Identifier: MIT
"""A session-scoped pytest fixture for tests that need dockerd and the locally
built test images: an example of how to use tests/dockerutil.py.

It is not a conftest.py (tests/conftest.py is owned elsewhere), so a test
module opts in by importing the fixture, which pytest then discovers:

    from conftest_docker_example import docker_images   # noqa: F401

    def test_something(docker_images):
        cid = dockerutil.docker("run", "-d", "--network", "none",
                                "--label", dockerutil.RUN_LABEL,
                                docker_images["aio"]).stdout.strip()

What it does, once per session:
  * skips the requesting tests when docker.io is not installed at all;
  * starts dockerd when /var/run/docker.sock does not answer GET /_ping (as in
    CI), waiting up to 30 s, and remembers that it did;
  * builds sbxfs-test-busybox:1 and sbxfs-test-aio:1 with tests/images/build.sh
    (no registry pulls; a no-op when they are up to date);
  * at the end removes every container labelled with this run's RUN_LABEL and
    stops dockerd again if this session started it.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import dockerutil  # noqa: E402


@pytest.fixture(scope="session")
def docker_images():
    """{"busybox": "sbxfs-test-busybox:1", "aio": "sbxfs-test-aio:1"}, ready to run."""
    if not dockerutil.docker_installed():
        pytest.skip("docker.io (docker, dockerd) is not installed")
    dockerutil.ensure_dockerd(timeout=30)
    try:
        dockerutil.ensure_images()
        yield dict(dockerutil.IMAGES)
    finally:
        # Each module that imports this fixture gets its own session-scoped
        # instance; the first teardown removes every container of the run
        # (one label) and stops the dockerd this session started, so the
        # later ones find nothing to do and must not fail on that.
        if dockerutil.ping():
            dockerutil.remove_containers(dockerutil.RUN_LABEL)
        dockerutil.stop_dockerd_if_started()
