# SPDX-License-Identifier: MIT
"""The DeerFlow package on the docker provider: the agent's turn of
deerflowutil (write code and its tests, run them, read the failure, fix,
run again) in a container of the busybox test image (/bin/sh and busybox
only, so the turn is a shell script with shell tests), and the Sandbox
methods that depend on the provider (commands, env, timeout, files written
through the mount used by the container's jobs)."""

import os

import pytest

from containerutil import case_label, containers, docker_images, sbxfs  # noqa: F401
from deerflowutil import WS, agent_turn, provider_for
from sbxutil import read_json


@pytest.fixture
def provider():
    return "docker"


@pytest.mark.timeout_s(180)
def test_an_agents_turn_on_docker(sbxfs, case_label):  # noqa: F811
    m = sbxfs()
    p = provider_for(m)
    log = agent_turn(p)
    assert [t[0] for t in log] == ["execute_command", "grep", "execute_command"]
    assert read_json(m.mnt / ".status")["warm"] == 1
    [c] = containers(case_label)
    assert c["state"] == "running", c  # parked: the container keeps running


@pytest.mark.timeout_s(180)
def test_commands_env_and_timeout_on_docker(sbxfs):  # noqa: F811
    m = sbxfs(config={"bash_command_timeout": 30})
    p = provider_for(m)
    sb = p.get(p.acquire("t", user_id="alice"))
    out = sb.execute_command('printf "[%s][%s]\\n" "$K" "$MULTI"; id -u; echo err >&2; exit 2',
                             env={"K": "v w", "MULTI": "a\nb"})
    uid = read_json(m.mnt / "alice" / "t" / "status")["uid"]
    assert out == f"[v w][a\nb]\n{uid}\n\nStd Error:\nerr\n\nExit Code: 2", out
    out = sb.execute_command("echo started; sleep 25", timeout=1)
    assert out.startswith("started\n") and out.endswith("Command timed out after 1 seconds and was terminated. "
                                                       "To run a long-lived process, start it in the background "
                                                       "with &.\nExit Code: 124"), out
    sb.write_file(f"{WS}/from-gateway.txt", "uploaded by the gateway\n")
    assert sb.execute_command("cat from-gateway.txt && echo changed >> from-gateway.txt") == \
        "uploaded by the gateway\n"
    assert sb.read_file(f"{WS}/from-gateway.txt") == "uploaded by the gateway\nchanged\n"
    with pytest.raises(ValueError):
        sb.execute_command("true", env={"BAD KEY": "x"})
    p.shutdown()
    assert not os.path.exists(m.mnt / "alice" / "t")
