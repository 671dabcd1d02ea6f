# SPDX-License-Identifier: MIT
"""Tests of the locally built Docker test images (tests/images/build.sh):
sbxfs-test-busybox:1 runs a shell as root and as an unprivileged user, and
sbxfs-test-aio:1 serves the fake AIO API on port 8080 inside a container
without network, reached from the host through the container's network
namespace (nsenter), never through a published port.  dockerd is started when
it is not running (and stopped again at the end); no test leaves a container
behind.

    /usr/bin/python3 -m pytest -q tests/fakes/test_images.py
"""

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import dockerutil  # noqa: E402
from conftest_docker_example import docker_images  # noqa: E402,F401  (the fixture)


@pytest.fixture
def labelled(docker_images):
    """Runs the test, then checks that it left no container of this run behind."""
    yield dockerutil.RUN_LABEL
    left = dockerutil.containers_with_label(dockerutil.RUN_LABEL)
    dockerutil.remove_containers(dockerutil.RUN_LABEL)
    assert not left, f"containers left behind: {left}"


@pytest.mark.timeout_s(120)
def test_images_are_labelled_and_rebuild_is_a_no_op(docker_images):
    for name, ref in docker_images.items():
        labels = dockerutil.docker("image", "inspect", "-f", "{{json .Config.Labels}}", ref).stdout
        assert "org.sbxfs.test.input-hash" in labels and f'"org.sbxfs.test.image":"{name}"' in labels
    t0 = time.monotonic()
    report = dockerutil.ensure_images()
    assert time.monotonic() - t0 < 60
    assert report.count("up to date") == 2, report
    cfg = dockerutil.docker("image", "inspect", "-f", "{{json .Config.Entrypoint}} {{json .Config.ExposedPorts}}",
                            docker_images["aio"]).stdout
    assert "/opt/aio-fake/aio_server.py" in cfg and "--in-container" in cfg and '"8080/tcp"' in cfg
    assert dockerutil.docker("image", "inspect", "-f", "{{json .Config.Cmd}}",
                             docker_images["busybox"]).stdout.strip() == '["/bin/sh"]'


@pytest.mark.timeout_s(60)
def test_busybox_image_runs_commands(docker_images, labelled):
    img = docker_images["busybox"]
    r = dockerutil.docker("run", "--rm", "--network", "none", "--label", labelled, img,
                          "sh", "-c", "id; echo hello from busybox; ls -ld /tmp | cut -c1-10; "
                                      "ls -d /mnt/user-data/workspace /mnt/user-data/uploads "
                                      "/mnt/user-data/outputs; seq 3 | wc -l")
    lines = r.stdout.splitlines()
    assert lines[0] == "uid=0(root) gid=0(root) groups=0(root)"
    assert lines[1] == "hello from busybox"
    assert lines[2] == "drwxrwxrwt"
    assert sorted(lines[3:6]) == ["/mnt/user-data/outputs", "/mnt/user-data/uploads", "/mnt/user-data/workspace"]
    assert lines[6].strip() == "3"
    # the unprivileged user cannot read /etc/shadow
    r = dockerutil.docker("run", "--rm", "--network", "none", "--user", "1000:1000", "--label", labelled, img,
                          "sh", "-c", "id; cat /etc/shadow; echo rc=$?")
    assert r.stdout.splitlines()[0] == "uid=1000(sandbox) gid=1000(sandbox) groups=1000(sandbox)"
    assert "rc=1" in r.stdout and "Permission denied" in r.stderr
    # the default command is a shell
    r = dockerutil.docker("run", "--rm", "-i", "--network", "none", "--label", labelled, img,
                          input="echo $((6*7))\n")
    assert r.stdout.strip() == "42"


@pytest.mark.timeout_s(90)
def test_aio_image_serves_the_api_in_its_network_namespace(docker_images, labelled):
    cid = dockerutil.docker("run", "-d", "--network", "none", "--label", labelled,
                            docker_images["aio"]).stdout.strip()
    try:
        ports = dockerutil.docker("inspect", "-f", "{{json .NetworkSettings.Ports}}", cid).stdout.strip()
        assert ports in ("{}", "null"), ports          # nothing published on the host
        pid = dockerutil.container_pid(cid)
        assert pid > 0
        ready, ex, wr, rd, sh = dockerutil.netns_http(pid, [
            {"method": "GET", "path": "/v1/sandbox", "until_status": 200, "retry_for": 20},
            {"method": "POST", "path": "/v1/bash/exec",
             "json": {"command": "echo hi; echo err >&2; id -u; cat /etc/os-release | head -1; exit 4"}},
            {"method": "POST", "path": "/v1/file/write",
             "json": {"file": "/mnt/user-data/workspace/x.txt", "content": "from the API"}},
            {"method": "POST", "path": "/v1/bash/exec", "json": {"command": "cat /mnt/user-data/workspace/x.txt"}},
            {"method": "POST", "path": "/v1/shell/exec", "json": {"command": "cd /tmp; pwd", "no_change_timeout": 600}},
        ])
        assert ready["status"] == 200, ready
        assert ready["json"]["home_dir"] == "/home/gem" and ready["json"]["version"] == "1.9.4"
        d = ex["json"]["data"]
        assert (d["status"], d["exit_code"], d["stderr"]) == ("completed", 4, "err\n")
        assert d["stdout"].splitlines()[:3] == ["hi", "0", 'NAME="sbxfs test image"']
        assert wr["json"]["success"] is True
        assert rd["json"]["data"]["stdout"] == "from the API"
        assert sh["json"]["data"]["output"] == "/tmp\n"
        # docker stop: the fake, as pid 1, forwards SIGTERM and exits 0 at once
        t0 = time.monotonic()
        dockerutil.docker("stop", "-t", "10", cid)
        assert time.monotonic() - t0 < 8
        assert dockerutil.docker("inspect", "-f", "{{.State.ExitCode}}", cid).stdout.strip() == "0"
    finally:
        dockerutil.docker("rm", "-f", "-v", cid, check=False)
    assert cid not in dockerutil.containers_with_label(labelled)
