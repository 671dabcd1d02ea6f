# SPDX-License-Identifier: MIT
"""The aio provider (DeerFlow's AioSandboxProvider) against the fake AIO
image (tests/fakes/aio_server.py in sbxfs-test-aio:1): readiness with a
short back-off, a server that never becomes ready, the API reached only
inside the container's network namespace, the shell API of images without
/v1/bash, an unhealthy server recreated, the API key, DeerFlow's class path
and config.yaml shape."""

import errno
import json
import os
import socket
import time
from datetime import datetime

import pytest

import dockerutil
import sbxutil
import test_jobs as J
import test_runtime as R
from containerutil import (case_label, containers, docker_images, inspect, provider_config,  # noqa: F401
                           sbxfs, wait_containers)
from sbxutil import expect_errno, mkdir_ready, read_json, read_text, wait_until
from test_network import allowlist_conf, cert, consume, servers, write_network  # noqa: F401


@pytest.fixture
def provider():
    return "aio"


def acquire(m, user="alice", thread="t"):
    d = m.mnt / user / thread
    os.makedirs(d)
    m.init_pid(d)
    return d


def fake(t, requests):
    """Requests to the sandbox's AIO server from inside its network
    namespace (the test's own path there: nsenter)."""
    return dockerutil.netns_http(sbxutil.init_pid(t), requests)


@pytest.mark.timeout_s(60)
def test_never_ready_fails_after_ready_timeout_and_removes_the_container(sbxfs, case_label):
    m = sbxfs(config={"acquire": "sync", "ready_timeout": 3, "aio": {"command": ["--never-ready"]}})
    t0 = time.monotonic()
    expect_errno(lambda: mkdir_ready(m.mnt / "alice" / "t", parents=True), errno.ETIMEDOUT, errno.EIO)
    took = time.monotonic() - t0
    assert 3 <= took < 10, took
    assert "not ready within ready_timeout (3 s)" in m.log, m.log[-2000:]
    assert not (m.mnt / "alice" / "t").exists()
    assert wait_containers(case_label, 0, 20) == [], "the container of a failed acquire was left"
    assert read_json(m.mnt / ".status")["active"] == 0


def _in_netns_of_container(m, case):
    """Whether the daemon has an fd on the network namespace of the case's
    running container."""
    for c in containers(case):
        pid = inspect(c["id"])["State"]["Pid"]
        try:
            ns = os.readlink(f"/proc/{pid}/ns/net") if pid else None
            fds = os.listdir(f"/proc/{m.proc.pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if ns and os.readlink(f"/proc/{m.proc.pid}/fd/{fd}") == ns:
                    return True
            except OSError:
                pass
    return False


@pytest.mark.timeout_s(120)
def test_an_interrupted_mkdir_stops_the_create_and_removes_its_container(sbxfs, case_label):
    """A create cancelled (issue 20: SIGINT to the mkdir, whose FUSE interrupt
    cancels the create's work) stops at once: the mkdir answers EINTR, the
    readiness wait ends and the container it made is removed, long before
    ready_timeout (60 s here: the server never becomes ready).  Before, the
    wait ran to ready_timeout with the container left up."""
    # acquire: sync: the mkdir itself waits for the create (what is interrupted)
    m = sbxfs(config={"acquire": "sync", "ready_timeout": 60, "aio": {"command": ["--never-ready"]}})
    os.mkdir(m.mnt / "alice")
    p = R.child("mkdir", m.mnt / "alice" / "t")
    # the create waits for the server (which never answers): the daemon
    # holds an fd on the container's network namespace while it polls
    assert wait_until(lambda: _in_netns_of_container(m, case_label), 30), "the create never waited for its server"
    out, took = R.interrupt(p)
    assert out == "interrupted\n", out
    assert took < 1.0, f"an interrupted mkdir took {took:.2f} s"
    t0 = time.monotonic()
    assert wait_containers(case_label, 0, 15) == [], "the cancelled create's container was left"
    print(f"the container was removed {time.monotonic() - t0:.2f} s after the interrupt")
    assert wait_until(lambda: "the create was cancelled while the AIO server" in m.log, 10), m.log[-3000:]
    assert not (m.mnt / "alice" / "t").exists()
    st = read_json(m.mnt / ".status")
    assert st["active"] == 0 and st["warm"] == 0, st
    # hostile: the same scope again, interrupted at once, leaves nothing either
    p = R.child("mkdir", m.mnt / "alice" / "t")
    out, took = R.interrupt(p)
    assert out == "interrupted\n" and took < 1.0, (out, took)
    assert wait_containers(case_label, 0, 15) == []
    assert m.running()


@pytest.mark.timeout_s(60)
def test_readiness_polls_with_a_short_back_off(sbxfs):
    m = sbxfs(config={"aio": {"command": ["--ready-delay", "2.0"]}})
    t = acquire(m)
    # DeerFlow polls every 1 s; a back-off from 20 ms doubling to 500 ms
    # polls at least 3 times in the 2 s the server answers 503 (DeerFlow: 2)
    # and answers well within a second after the server is up.  Read from
    # the server's own log, so a slow container start does not count.
    [r] = fake(t, [{"path": "/_fake/requests?path=^/v1/sandbox$"}])
    polls = [(datetime.fromisoformat(x["time"]).timestamp(), x["status"]) for x in r["json"]["requests"]
             if x["method"] == "GET"]
    first_ok = next(i for i, (_, st) in enumerate(polls) if st == 200)
    refused = polls[:first_ok]
    assert len(refused) >= 3 and all(st == 503 for _, st in refused), polls
    assert polls[first_ok][0] - refused[-1][0] < 0.9, polls


def test_api_only_inside_the_container_network_namespace(sandbox, case_label):
    m, t = sandbox
    [c] = containers(case_label)
    assert c["ports"] == ""
    info = inspect(c["id"])
    assert info["HostConfig"]["NetworkMode"] == "none" and not info["NetworkSettings"]["Ports"]
    # the sandbox's API answers inside its namespace, and sbxfs used it there
    [r] = fake(t, [{"path": "/_fake/counters"}])
    assert r["status"] == 200 and r["json"]["by_route"].get("GET /v1/sandbox", 0) >= 1, r
    # and nothing answers for it on the host's loopback (no published port)
    s = socket.socket()
    s.settimeout(1)
    try:
        reached = s.connect_ex(("127.0.0.1", dockerutil.AIO_PORT)) == 0
    finally:
        s.close()
    assert not reached or dockerutil.docker("ps", "--filter", f"publish={dockerutil.AIO_PORT}", "-q").stdout.strip() \
        not in {c["id"][:12]}, "the sandbox's API is published on the host"


@pytest.mark.timeout_s(60)
def test_jobs_use_the_bash_api_with_separate_streams(sandbox):
    m, t = sandbox
    code, out, err = J.run_job(t, "a", "echo out; echo err >&2; exit 5", env="ONLY_THIS_JOB=yes\n")
    assert (code, out, err) == (5, "out\n", "err\n")
    [r] = fake(t, [{"path": "/_fake/requests?path=/v1/bash/exec"}])
    body = [x for x in r["json"]["requests"] if x["path"] == "/v1/bash/exec"][-1]["body"]
    assert body["env"]["ONLY_THIS_JOB"] == "yes" and body["async_mode"] is True
    assert body["exec_dir"] == "/mnt/user-data/workspace"
    # the command text travels in a file, never on the server's `sh -c` argv
    assert "echo out" not in body["command"] and "/run/sbxfs/jobs/a/cmd" in body["command"]
    assert sbxutil.status(t)["exec"] == "aio-bash"


@pytest.mark.timeout_s(90)
def test_images_without_the_bash_api_use_the_shell_api(sbxfs):
    m = sbxfs(config={"aio": {"command": ["--no-bash-api"]}, "bash_command_timeout": 3})
    t = acquire(m)
    code, out, err = J.run_job(t, "a", "echo out; echo err >&2; echo $WHO; exit 5", env="WHO=shell\n")
    assert code == 5
    assert out == "out\nerr\nshell\n" and err == "", (out, err)   # the PTY API merges the streams
    assert sbxutil.status(t)["exec"] == "aio-shell"
    assert "no /v1/bash API" in m.log
    j = J.mkjob(t, "k")
    J.start_ready(j)
    J.write_ctl(j / "ctl", "kill KILL")
    assert J.wait_exit(j, 10) == 137 and J.jstatus(j)["state"] == "killed"
    j = J.mkjob(t, "slow")
    J.start(j, "echo started; sleep 30")
    assert J.wait_exit(j, 20) > 128 and J.jstatus(j)["state"] == "timed_out"


@pytest.mark.timeout_s(90)
def test_an_unhealthy_server_is_recreated(sandbox, case_label):
    m, t = sandbox
    (t / "workspace" / "keep").write_text("k\n")
    [c] = containers(case_label)
    [r] = fake(t, [{"method": "POST", "path": "/_fake/ready", "json": {"ready": False}}])
    assert r["status"] == 200
    os.rmdir(t)
    os.mkdir(t)
    st = sbxutil.status(t)
    assert "recreated" in st.get("last_event", ""), st
    [c2] = wait_containers(case_label, 1)
    assert c2["id"] != c["id"]
    assert (t / "workspace" / "keep").read_text() == "k\n"


@pytest.mark.timeout_s(60)
def test_api_key(sbxfs, case_label):
    m = sbxfs(config={"environment": {"SANDBOX_API_KEY": "$SBXFS_T_AIO_KEY"}, "aio": {"api_key": "$SBXFS_T_AIO_KEY"}},
              env={"SBXFS_T_AIO_KEY": "k-123"})
    t = acquire(m)
    code, out, _ = J.run_job(t, "a", "echo authorised")
    assert code == 0 and out == "authorised\n"
    assert "k-123" not in read_text(m.mnt / ".config")
    assert "k-123" not in m.log
    bad = sbxfs(config={"acquire": "sync", "environment": {"SANDBOX_API_KEY": "right"}, "aio": {"api_key": "wrong"}})
    expect_errno(lambda: mkdir_ready(bad.mnt / "alice" / "t", parents=True), errno.EACCES)
    assert "refuses the API key" in bad.log


def test_deerflow_class_path_and_config_yaml(sbxfs, case_label):
    cfg = provider_config("aio", case_label)
    raw = {"sandbox": {"use": "deerflow.community.aio_sandbox:AioSandboxProvider", "image": cfg["image"],
                       "container_prefix": cfg["container_prefix"], "network": cfg["network"],
                       "aio": cfg["aio"]},
           "models": [{"name": "unrelated DeerFlow key"}]}
    import conftest
    m = sbxfs(start=False)
    m.conf.write_text(conftest.dump_yaml({**raw, "state_dir": str(m.state_dir)}))
    m.start()
    assert read_json(m.mnt / ".status")["provider"] == "aio"
    t = acquire(m)
    code, out, _ = J.run_job(t, "a", "echo deerflow")
    assert code == 0 and out == "deerflow\n"


def test_configuration_refused(sbxfs):
    # base_url is the remote mode (test_remote.py): an existing sandbox keeps its network
    for bad, rule in [({"base_url": "http://127.0.0.1:8080"}, "network.mode: an existing AIO sandbox (base_url)"),
                      ({"aio": {"user": "root"}}, "aio.user: must be sandbox or image"),
                      ({"aio": {"port": 0}}, "aio.port: must be an integer between 1 and 65535")]:
        b = sbxfs(config=bad, start=False)
        rc, log = b.run_expect_exit(timeout=10)
        assert rc not in (0, None) and rule in log, (bad, log)


@pytest.mark.timeout_s(120)
def test_allowlist_through_the_approval_proxy(sbxfs, servers, case_label):
    """The AIO container's jobs (started by the AIO server) get the proxy
    variables; the daemon's proxy in the container's namespace is their
    only way out; a denied host becomes an event a grant lets through."""
    m = sbxfs(config=allowlist_conf(servers))
    t = acquire(m)
    assert inspect(sbxutil.status(t)["container"])["HostConfig"]["NetworkMode"] == "none"
    get = ("python3 -c \"import urllib.request as u, sys; "
           "print(u.urlopen('http://' + sys.argv[1] + '/p', timeout=10).read().decode())\" {} 2>&1; echo \" rc=$?\"")
    code, out, _ = J.run_job(t, "ok", get.format("static.example.test"))
    assert out.startswith("static.example.test GET /p") and out.rstrip().endswith("rc=0"), out
    code, out, _ = J.run_job(t, "denied", get.format("api.example.test"))
    assert "403" in out and "rc=0" not in out and not servers["api.example.test"][0].requests, out
    ev = consume(t)
    assert (ev["host"], ev["port"]) == ("api.example.test", 80), ev
    write_network(t, f"allow_sandbox {ev['request_id']}")
    code, out, _ = J.run_job(t, "granted", get.format("api.example.test"))
    assert out.startswith("api.example.test GET /p") and out.rstrip().endswith("rc=0"), out
    assert m.stop() == 0
