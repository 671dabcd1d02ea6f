# SPDX-License-Identifier: MIT
"""pool.prewarm (issue 21 item 1, DESIGN §4): spares, ready sandboxes of no
scope that a new thread's mkdir claims and binds to its scope without
restarting them (providers/spares.c, providers/local_claim.c)."""

import errno
import json
import os
import signal
import time

import pytest

import sbxutil
import test_jobs as J
from sbxutil import read_json, read_text, wait_until


def spares(m):
    return read_json(m.mnt / ".status")["spares"]


def metrics(m):
    return sbxutil.parse_metrics(read_text(m.mnt / ".metrics"))


def wait_spares(m, n, timeout=30):
    assert wait_until(lambda: spares(m)["ready"] == n and spares(m)["creating"] == 0, timeout), \
        f"expected {n} ready spares: {spares(m)}; log:\n{m.log[-3000:]}"


def spare_inits(m):
    """{token: init pid} of the spares on disk (their local.json)."""
    out = {}
    root = m.state_dir / "spares"
    for d in (root.iterdir() if root.exists() else []):
        try:
            out[d.name] = json.loads((d / "local.json").read_text())["init_pid"]
        except (FileNotFoundError, ValueError, KeyError):
            pass
    return out


def run(d, name, cmd):
    code, out, err = J.run_job(d, name, cmd)
    assert code == 0, (cmd, out, err)
    return out


def start(sbxfs, **cfg):
    conf = {"pool": {"prewarm": 2}, "replicas": 6}
    conf.update(cfg)
    m = sbxfs(config=conf)
    wait_spares(m, conf["pool"]["prewarm"])
    return m


def test_smoke(sbxfs):
    m = start(sbxfs)
    inits = spare_inits(m)
    assert len(inits) == 2, inits
    t = m.mnt / "alice" / "t1"
    os.makedirs(t)
    st = sbxutil.status(t)
    print(st)
    print(m.log[-3000:])
    assert st["from_spare"] is True
    out = run(t, "j1", "id -un; grep passwd /proc/self/mountinfo; ip -o link 2>&1; cat /proc/net/dev")
    print(out)
    print([l for l in open(f"/proc/{st['init_pid']}/mountinfo").read().splitlines() if "etc/" in l or "user-data" in l])
    assert False
