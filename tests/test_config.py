# SPDX-License-Identifier: MIT
"""mount.conf validation (DESIGN §5, README "Configuration"): a bad key stops the
daemon at start with one line naming the key; unknown keys warn; .config
never shows a secret."""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

import sbxutil
from sbxutil import read_json, read_text

# (id, overrides, words that the error line must contain)
BAD = [
    ("replicas-0", {"replicas": 0}, ["replicas"]),
    ("replicas-x", {"replicas": "x"}, ["replicas"]),
    ("idle_timeout-negative", {"idle_timeout": -1}, ["idle_timeout"]),
    ("state_dir-relative", {"state_dir": "relative/state"}, ["state_dir"]),
    ("environment-bad-key", {"environment": {"GOOD": "1", "1BAD": "x"}}, ["1BAD"]),
    ("use-nosuch", {"use": "nosuch"}, ["use"]),
    ("network-mode-weird", {"network": {"mode": "weird"}}, ["network", "mode"]),
    ("users-scalar", {"users": 7}, ["users"]),
    ("skills-container_path-relative", {"skills": {"container_path": "relative/skills"}},
     ["container_path"]),
    ("remote_files-cache_size-small", {"remote_files": {"cache_size": "1M"}}, ["remote_files.cache_size"]),
    ("remote_files-cache_size-x", {"remote_files": {"cache_size": "lots"}}, ["remote_files.cache_size"]),
    ("snapshots-max_per_thread-0", {"snapshots": {"max_per_thread": 0}}, ["snapshots.max_per_thread"]),
    ("snapshots-max_per_thread-big", {"snapshots": {"max_per_thread": 5000}}, ["snapshots.max_per_thread"]),
    ("snapshots-max_per_thread-x", {"snapshots": {"max_per_thread": "many"}}, ["snapshots.max_per_thread"]),
]


def _check_refused(inst, rc, log, words, t0):
    elapsed = time.monotonic() - t0
    assert rc is not None, f"daemon still running after 10 s; log:\n{log}"
    assert rc == 1, f"exit status {rc}, want 1; log:\n{log}"
    assert elapsed < 5, f"took {elapsed:.1f} s to refuse the config"
    assert not sbxutil.is_mounted(inst.mnt), "mounted despite a bad config"
    lines = [ln for ln in log.splitlines() if "config error" in ln]
    assert lines, f"no 'config error' line in stderr:\n{log}"
    assert any(ln.startswith("sbxfs: config error: ") for ln in lines), lines
    for w in words:
        assert any(w in ln for ln in lines), f"error line does not name {w!r}: {lines}"


@pytest.mark.parametrize("overrides,words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_config_refused(sbxfs, overrides, words):
    inst = sbxfs(config=overrides, start=False)
    t0 = time.monotonic()
    rc, log = inst.run_expect_exit(timeout=10)
    _check_refused(inst, rc, log, words, t0)
    if "state_dir" in overrides:
        assert not (inst.base / "relative").exists(), "a relative state_dir was created"


def test_yaml_syntax_error_refused(sbxfs, tmp_path):
    raw = "use: local\nstate_dir: /tmp/x\nreplicas: [1, 2\nidle_timeout: 5\n"
    inst = sbxfs(raw_config=raw, start=False)
    t0 = time.monotonic()
    rc, log = inst.run_expect_exit(timeout=10)
    _check_refused(inst, rc, log, [], t0)
    line = [ln for ln in log.splitlines() if "config error" in ln][0]
    assert "line" in line.lower() and "yaml" in line.lower(), line


def test_missing_config_file_refused(sbxfs):
    inst = sbxfs(start=False)
    inst.conf.unlink()
    t0 = time.monotonic()
    rc, log = inst.run_expect_exit(timeout=10)
    _check_refused(inst, rc, log, [str(inst.conf)], t0)


def test_unknown_key_warns_and_mounts(sbxfs):
    inst = sbxfs(config={"frobnicate": 1, "replicas": 2})
    assert sbxutil.is_mounted(inst.mnt)
    warn = [ln for ln in inst.log.splitlines() if "frobnicate" in ln]
    assert warn, f"no warning naming the unknown key:\n{inst.log}"
    assert re.search(r"warning", warn[0], re.I) and "unknown" in warn[0], warn
    assert read_json(inst.mnt / ".status")["replicas"] == 2
    os.makedirs(inst.mnt / "alice" / "t")
    assert (inst.mnt / "alice" / "t" / "workspace").is_dir()


def test_config_never_shows_secrets(sbxfs):
    secrets = ["s3cr3t-value", "env-s3cr3t-from-daemon-env", "k3y-value"]
    inst = sbxfs(config={
        "environment": {"API_TOKEN": "s3cr3t-value", "FROM_ENV": "$SBXFS_TEST_SECRET"},
        "api_key": "k3y-value",
    }, env={"SBXFS_TEST_SECRET": "env-s3cr3t-from-daemon-env"})
    shown = read_text(inst.mnt / ".config")
    for s in secrets:
        assert s not in shown, f"secret {s!r} visible in .config:\n{shown}"
    assert "API_TOKEN" in shown and "FROM_ENV" in shown and "api_key" in shown, shown
    assert "***" in shown, shown
    os.makedirs(inst.mnt / "alice" / "t")
    for p in (inst.mnt / ".status", inst.mnt / "alice" / "t" / "status"):
        txt = read_text(p)
        for s in secrets:
            assert s not in txt, f"secret {s!r} visible in {p}"


def test_config_shows_effective_values(sbxfs):
    inst = sbxfs(config={"replicas": 5, "idle_timeout": 77})
    shown = read_text(inst.mnt / ".config")
    assert re.search(r"replicas\W+5\b", shown), shown
    assert re.search(r"idle_timeout\W+77\b", shown), shown
    st = read_json(inst.mnt / ".status")
    assert st["replicas"] == 5 and st["idle_timeout"] == 77, st


def test_deerflow_sandbox_section(sbxfs):
    inst = sbxfs(config={
        "use": None,
        "sandbox": {"use": "deerflow.sandbox.local:LocalSandboxProvider", "replicas": 4},
    })
    st = read_json(inst.mnt / ".status")
    assert st["provider"] == "local" and st["replicas"] == 4, st


# --------------------------------------------------------------------------
# DeerFlow's config.yaml read as DeerFlow reads it (issue 25 item 4; the
# semantics reference §5.1, §6.2, §13)

SBXFS = Path(os.environ.get("SBXFS_BIN", str(Path(__file__).resolve().parent.parent / "sbxfs")))


def check_config(path, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([str(SBXFS), "--check-config", str(path)], capture_output=True, text=True, env=e,
                          timeout=30)


def deerflow_yaml(tmp_path, sandbox, extra=""):
    """A DeerFlow config.yaml: models, tools and the sandbox: section."""
    conf = tmp_path / "config.yaml"
    conf.write_text("config_version: 46\nmodels:\n  - name: gpt\n    use: langchain_openai:ChatOpenAI\n"
                    f"state_dir: {tmp_path}/state\nsandbox:\n" +
                    "".join(f"  {line}\n" for line in sandbox.strip("\n").split("\n")) + extra)
    return conf


def test_float_timeouts_as_deerflow_reads_them(sbxfs, tmp_path):
    """ready_timeout/request_timeout/sandbox_timeout are floats in DeerFlow
    (OpenSandbox: finite, positive), bash_command_timeout and idle_timeout
    pydantic ints (30.0 accepted, 30.5 refused); fractions round up."""
    conf = deerflow_yaml(tmp_path, """
use: deerflow.sandbox.local:LocalSandboxProvider
ready_timeout: 30.0
request_timeout: 2.5
sandbox_timeout: 600.25
bash_command_timeout: 45.0
idle_timeout: 900.0
idle_check_interval: 0.5
""")
    r = check_config(conf)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert (shown["ready_timeout"], shown["request_timeout"], shown["sandbox_timeout"]) == (30, 3, 601), shown
    assert (shown["bash_command_timeout"], shown["idle_timeout"], shown["idle_check_interval"]) == (45, 900, 1)
    # the daemon runs with them: a job's timeout is the whole-second value
    m = sbxfs(raw_config=conf.read_text().replace(f"{tmp_path}/state", "STATE"), start=False)
    m.conf.write_text(conf.read_text().replace(f"{tmp_path}/state", str(m.state_dir)))
    m.start()
    os.makedirs(m.mnt / "alice" / "t")
    os.mkdir(m.mnt / "alice" / "t" / "jobs" / "j")
    assert read_json(m.mnt / "alice" / "t" / "jobs" / "j" / "status")["timeout"] == 45
    assert read_json(m.mnt / ".config")["ready_timeout"] == 30


BAD_DEERFLOW = [
    ("bash_command_timeout-fraction", "bash_command_timeout: 30.5", ["bash_command_timeout", "whole number"]),
    ("idle_timeout-fraction", "idle_timeout: 0.5", ["idle_timeout", "whole number"]),
    ("ready_timeout-inf", "ready_timeout: .inf", ["ready_timeout"]),
    ("ready_timeout-nan", "ready_timeout: .nan", ["ready_timeout"]),
    ("ready_timeout-zero", "ready_timeout: 0.0", ["ready_timeout"]),
    ("request_timeout-negative", "request_timeout: -2.5", ["request_timeout"]),
    ("request_timeout-hex", "request_timeout: 0x10", ["request_timeout"]),
    ("sandbox_timeout-word", "sandbox_timeout: forever", ["sandbox_timeout"]),
    ("port", "port: 8080", ["port", "publishes no host port"]),
    ("auto_start-false", "auto_start: false", ["auto_start", "base_url"]),
    ("auto_start-false-empty-base_url", 'auto_start: false\nbase_url: ""', ["auto_start", "base_url"]),
    ("auto_start-word", "auto_start: maybe", ["auto_start"]),
]


@pytest.mark.parametrize("line,words", [b[1:] for b in BAD_DEERFLOW], ids=[b[0] for b in BAD_DEERFLOW])
def test_deerflow_keys_refused_with_the_reason(sbxfs, line, words):
    inst = sbxfs(raw_config="state_dir: STATE\nsandbox:\n  use: deerflow.sandbox.local:LocalSandboxProvider\n"
                            + "".join(f"  {ln}\n" for ln in line.split("\n")), start=False)
    inst.conf.write_text(inst.conf.read_text().replace("STATE", str(inst.state_dir)))
    t0 = time.monotonic()
    rc, log = inst.run_expect_exit(timeout=10)
    _check_refused(inst, rc, log, words, t0)


def test_auto_start_false_with_base_url_and_port_null_accepted(tmp_path):
    """auto_start: false is what an existing sandbox at base_url means
    (nothing is started); port: null is DeerFlow's default."""
    conf = deerflow_yaml(tmp_path, """
use: deerflow.community.aio_sandbox:AioSandboxProvider
base_url: http://127.0.0.1:9
auto_start: false
port: null
""")
    r = check_config(conf)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown["auto_start"] is False and shown["base_url"] == "http://127.0.0.1:9", shown
    conf = deerflow_yaml(tmp_path, "use: deerflow.sandbox.local:LocalSandboxProvider\nauto_start: true\n")
    r = check_config(conf)
    assert r.returncode == 0 and json.loads(r.stdout)["auto_start"] is True, r.stderr


def test_missing_variable_becomes_empty_as_in_deerflow(sbxfs):
    """$VAR of the daemon's environment; a missing one is "" (reference §5.1),
    in environment and in a mount's path (which then must still be absolute)."""
    m = sbxfs(config={"environment": {"SET_ONE": "$SBXFS_CT_SET", "MISSING": "$SBXFS_CT_NO_SUCH_VARIABLE",
                                      "BRACED": "${SBXFS_CT_NO_SUCH_VARIABLE}"}},
              env={"SBXFS_CT_SET": "value"})
    os.makedirs(m.mnt / "alice" / "t")
    j = m.mnt / "alice" / "t" / "jobs" / "e"
    os.mkdir(j)
    with open(j / "cmd", "w") as f:
        f.write('printf "[%s][%s:%s][%s:%s]\\n" "$SET_ONE" "${MISSING+set}" "$MISSING" "${BRACED+set}" "$BRACED"')
    r = subprocess.run(["cat", str(j / "exit")], capture_output=True, text=True, timeout=30)
    assert r.stdout == "0\n", r
    assert read_text(j / "stdout") == "[value][set:][set:]\n"
    env = read_json(m.mnt / ".config")["environment"]
    assert env["MISSING"] == "$SBXFS_CT_NO_SUCH_VARIABLE" and env["SET_ONE"] == "$SBXFS_CT_SET", env
    # in mounts: a missing variable is "", which is no absolute path
    inst = sbxfs(config={"mounts": [{"host_path": "$SBXFS_CT_NO_SUCH_VARIABLE", "container_path": "/opt/data"}]},
                 start=False)
    t0 = time.monotonic()
    rc, log = inst.run_expect_exit(timeout=10)
    _check_refused(inst, rc, log, ["mounts[0].host_path", "got '' from $SBXFS_CT_NO_SUCH_VARIABLE"], t0)


@pytest.mark.timeout_s(120)
def test_mounts_validated_and_working(sbxfs, tmp_path):
    """mounts: the host path must exist; container paths never overlap the
    sandbox's data (/mnt/user-data), its skills or each other; host paths
    never overlap state_dir or the skills library.  Good ones are mounted,
    read-only where asked, and $VAR resolves in them."""
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    os.chmod(rw, 0o777)
    (ro / "data.txt").write_text("read only data\n")
    os.chmod(tmp_path, 0o755)
    probe = sbxfs(start=False)
    bad = [
        ([{"host_path": str(tmp_path / "nope"), "container_path": "/opt/x"}], {},
         ["mounts[0]", "host_path", "No such file"]),
        ([{"host_path": str(ro), "container_path": "/mnt/user-data/x"}], {}, ["mounts[0]", "/mnt/user-data"]),
        ([{"host_path": str(ro), "container_path": "/mnt"}], {}, ["mounts[0]", "/mnt/user-data"]),
        ([{"host_path": str(ro), "container_path": "/"}], {}, ["mounts[0]", "/mnt/user-data"]),
        ([{"host_path": str(ro), "container_path": "/mnt/skills/extra"}], {}, ["mounts[0]", "skills.container_path"]),
        ([{"host_path": str(ro), "container_path": "/opt/tools"}], {"skills": {"container_path": "/opt"}},
         ["mounts[0]", "skills.container_path /opt"]),
        ([{"host_path": str(ro), "container_path": "/opt/a"}, {"host_path": str(rw), "container_path": "/opt/a/"}],
         {}, ["mounts[1]", "mounts[0]"]),
        ([{"host_path": str(probe.base), "container_path": "/opt/a"}], {}, ["mounts[0]", "state_dir"]),
        ([{"host_path": str(probe.state_dir / "users"), "container_path": "/opt/a"}], {}, ["mounts[0]", "state_dir"]),
        ([{"host_path": str(ro), "container_path": "/opt/a"}], {"skills": {"path": str(tmp_path)}},
         ["mounts[0]", "skills.path"]),
        ([{"host_path": str(ro), "container_path": "/run/sbxfs/x"}], {}, ["mounts[0]", "/run/sbxfs"]),
        ([{"host_path": "relative/x", "container_path": "/opt/a"}], {}, ["mounts[0].host_path", "absolute"]),
        ([{"host_path": str(ro), "container_path": "/opt/../mnt/user-data"}], {},
         ["mounts[0].container_path", "canonical"]),
    ]
    for mounts, extra, words in bad:
        inst = sbxfs(config={"mounts": mounts, **extra}, start=False)
        if "state_dir" in words:  # the overlap is with this instance's own state_dir
            (inst.state_dir / "users").mkdir(parents=True, exist_ok=True)
            for mnt in mounts:
                mnt["host_path"] = mnt["host_path"].replace(str(probe.base), str(inst.base))
            inst.config["mounts"] = mounts
            from conftest import dump_yaml
            inst.conf.write_text(dump_yaml(inst.config))
        t0 = time.monotonic()
        rc, log = inst.run_expect_exit(timeout=10)
        _check_refused(inst, rc, log, words, t0)
    # good mounts, one through a variable
    m = sbxfs(config={"mounts": [{"host_path": str(ro), "container_path": "/opt/ro", "read_only": True},
                                 {"host_path": "$SBXFS_CT_RW", "container_path": "/opt/rw"}]},
              env={"SBXFS_CT_RW": str(rw)})
    shown = read_json(m.mnt / ".config")["mounts"]
    assert shown == [{"host_path": str(ro), "container_path": "/opt/ro", "read_only": True},
                     {"host_path": str(rw), "container_path": "/opt/rw", "read_only": False}], shown
    os.makedirs(m.mnt / "alice" / "t")
    j = m.mnt / "alice" / "t" / "jobs" / "m"
    os.mkdir(j)
    with open(j / "cmd", "w") as f:
        f.write("cat /opt/ro/data.txt; echo x > /opt/ro/new && echo WROTE-RO; echo from-sandbox > /opt/rw/out.txt")
    r = subprocess.run(["cat", str(j / "exit")], capture_output=True, text=True, timeout=30)
    assert r.stdout == "0\n", (r, read_text(j / "stderr"))
    assert read_text(j / "stdout") == "read only data\n", read_text(j / "stdout")
    assert "Read-only" in read_text(j / "stderr")
    assert (rw / "out.txt").read_text() == "from-sandbox\n" and not (ro / "new").exists()


@pytest.mark.timeout_s(120)
@pytest.mark.parametrize("value", ["0", "0.0"])
def test_idle_timeout_zero_turns_the_reaper_off(sbxfs, value):
    """idle_timeout: 0 (or DeerFlow's 0.0): a released sandbox stays warm past
    many reaper intervals and is reclaimed with its processes."""
    m = sbxfs(raw_config=f"use: local\nstate_dir: STATE\nidle_timeout: {value}\nidle_check_interval: 1\n",
              start=False)
    m.conf.write_text(m.conf.read_text().replace("STATE", str(m.state_dir)))
    m.start()
    assert read_json(m.mnt / ".config")["idle_timeout"] == 0
    d = m.mnt / "alice" / "t"
    os.makedirs(d)
    pid = m.init_pid(d)
    os.rmdir(d)
    assert read_json(m.mnt / ".status")["warm"] == 1
    # a reaper that ran with any positive timeout would have ended it by now
    # (idle_check_interval 1 s); the log shows the reaper is off
    time.sleep(4)
    st = read_json(m.mnt / ".status")
    assert st["warm"] == 1 and st["idle_timeout"] == 0, st
    os.mkdir(d)
    assert sbxutil.init_pid(d) == pid, "the warm sandbox was reclaimed, not recreated"
    assert sbxutil.pid_alive(pid)


def test_one_config_yaml_serves_deerflow_and_sbxfs(sbxfs, tmp_path):
    """DeerFlow's config.yaml with `use: sbxfs_deerflow:SbxfsSandboxProvider`
    (DeerFlow runs on the mount through the package) also starts the
    daemon: its provider is `provider` beside it (local when absent), and
    the package's `mountpoint` key is accepted."""
    conf = deerflow_yaml(tmp_path, """
use: sbxfs_deerflow:SbxfsSandboxProvider
mountpoint: /sbx
provider: docker
image: busybox:1
""")
    r = check_config(conf)
    assert r.returncode == 0 and json.loads(r.stdout)["use"] == "docker", r.stderr
    assert "unknown key" not in r.stderr, r.stderr
    conf = deerflow_yaml(tmp_path, "use: sbxfs_deerflow:SbxfsSandboxProvider\nmountpoint: /sbx\nreplicas: 2\n")
    m = sbxfs(raw_config=conf.read_text().replace(f"{tmp_path}/state", "STATE"), start=False)
    m.conf.write_text(m.conf.read_text().replace("STATE", str(m.state_dir)))
    m.start()
    st = read_json(m.mnt / ".status")
    assert st["provider"] == "local" and st["replicas"] == 2, st
    conf = deerflow_yaml(tmp_path, "use: sbxfs_deerflow:SbxfsSandboxProvider\nprovider: nosuch\n")
    r = check_config(conf)
    assert r.returncode == 1 and "use:" in r.stderr and "nosuch" in r.stderr, r.stderr
