# SPDX-License-Identifier: MIT
"""mount.conf validation (DESIGN §5, README "Configuration"): a bad key stops the
daemon at start with one line naming the key; unknown keys warn; .config
never shows a secret."""

import os
import re
import time

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
