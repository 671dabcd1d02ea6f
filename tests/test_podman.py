# SPDX-License-Identifier: MIT
"""The docker provider against Podman's Docker-compatible API (issue 20):
`use: docker` with docker.socket pointing at a private `podman system
service` (tests/podmanutil.py: its own socket and storage, stopped by pid),
running the core of the container tests unchanged: create, a job's stdout
and exit, files through the mount, kill -9 and restart adopting the
containers, rmdir, the isolated and allowlist networks, confinement (the
seccomp profile and the socket-family probe), freeze (pause/unpause), and
hostile cases (a stranger's container under our labels, a dead container).

The image is the suite's sbxfs-test-busybox:1, moved from dockerd with
`docker save | podman load`.  Skipped, with the reason, only when Podman
cannot be installed or its service does not start here."""

import os

import pytest

import containerutil
import podmanutil
import test_containers as C
import test_docker as D
from containerutil import case_label, containers, docker_images, inspect, sbxfs  # noqa: F401
from sbxutil import expect_errno, read_json
from test_network import servers  # noqa: F401


@pytest.fixture(scope="module")
def podman(docker_images):
    try:
        eng = podmanutil.PodmanService()
    except podmanutil.PodmanUnavailable as e:
        pytest.skip(f"podman cannot run here: {e}")
    try:
        eng.load_image(docker_images["busybox"])
        yield eng
    finally:
        eng.stop()


@pytest.fixture(autouse=True)
def _on_podman(podman):
    """Every container helper of containerutil talks to the Podman service."""
    containerutil.ENGINE.update(socket=podman.socket, cli=podman.docker)
    yield
    containerutil.ENGINE.update(socket=None, cli=None)


@pytest.fixture
def provider():
    return "docker"


def test_engine_is_podman(sandbox, podman, case_label):
    """The sandbox's container is Podman's, not dockerd's, and the daemon says
    which engine it talks to."""
    m, t = sandbox
    [c] = containers(case_label)
    assert podman.podman("container", "exists", c["id"], check=False).returncode == 0
    assert "podman" in m.log.lower(), m.log[-2000:]


def test_eight_concurrent_mkdirs_make_one_container(mnt, case_label):
    C.test_eight_concurrent_mkdirs_make_one_container(mnt, case_label)


def test_exit_stdout_stderr_and_status(sandbox):
    C.test_exit_stdout_stderr_and_status(sandbox, "docker")


def test_cwd_uid_and_workspace_sharing(sandbox):
    C.test_cwd_uid_and_workspace_sharing(sandbox)


def test_stdin_is_fed_to_the_command(sandbox):
    C.test_stdin_is_fed_to_the_command(sandbox)


def test_job_changes_are_seen_through_the_mount_at_once(sandbox):
    C.test_job_changes_are_seen_through_the_mount_at_once(sandbox)


def test_kill_with_signal(sandbox):
    C.test_kill_with_signal(sandbox, "kill TERM", 15)


@pytest.mark.timeout_s(150)
def test_kill9_restart_no_orphan_containers_and_reattaches_jobs(mnt, case_label):
    C.test_kill9_restart_no_orphan_containers_and_reattaches_jobs(mnt, case_label)


@pytest.mark.timeout_s(120)
def test_unmount_destroys_sandboxes_keeps_data(mnt, case_label):
    C.test_unmount_destroys_sandboxes_keeps_data(mnt, case_label)


@pytest.mark.timeout_s(120)
def test_dead_container_is_recreated_and_status_says_so(sandbox, case_label):
    C.test_dead_container_is_recreated_and_status_says_so(sandbox, case_label)


def test_no_published_port_and_confinement(sandbox, case_label):
    C.test_no_published_port_and_confinement(sandbox, case_label, "docker")


@pytest.mark.timeout_s(120)
def test_socket_families_and_calls_beyond_dockers_default_are_refused(sandbox, tmp_path):
    C.test_socket_families_and_calls_beyond_dockers_default_are_refused(sandbox, tmp_path)


@pytest.mark.timeout_s(120)
def test_allowlist_through_the_approval_proxy(sbxfs, servers, case_label):  # noqa: F811
    D.test_allowlist_through_the_approval_proxy(sbxfs, servers, case_label)


def test_freeze_then_rmdir_thaws_the_container(sandbox, case_label):
    C.test_freeze_then_rmdir_thaws_the_container(sandbox, case_label)


@pytest.mark.timeout_s(120)
def test_a_wrong_socket_is_refused_with_a_clear_error(sbxfs, podman, tmp_path):
    """Hostile: docker.socket names something that is not an engine; the
    sandbox is refused with EIO and the log names the socket, nothing is made."""
    m = sbxfs(config={"docker": {"socket": str(tmp_path / "nothing.sock")}})
    os.mkdir(m.mnt / "alice")
    expect_errno(lambda: os.mkdir(m.mnt / "alice" / "t"), "EIO")
    assert "nothing.sock" in m.log, m.log[-2000:]
    assert read_json(m.mnt / ".status")["sandboxes"] == 0
