# SPDX-License-Identifier: MIT
"""DESIGN §7, issue 21 item 2: one network for every open sandbox.

Open sandboxes (network.gateway on, the default) reach the outside through
one gateway network namespace the daemon owns (pinned at
STATE/gateway/netns), one pasta for all of them, and a veth pair each.
Everything is judged from the host with real traffic: the test's own
namespaces stand for a public host (198.51.100.1) and a private one
(netlab.NetLab), probes run as jobs inside the sandboxes.
"""

import os
import signal
import socket
import subprocess
import time

import pytest

import netlab
import sbxutil
from sbxutil import wait_until
from test_jobs import acquire, run_job
from test_network import OPEN_PROBE, py, lab  # noqa: F401

OPEN = {"network": {"mode": "open"}}


def gateway_pin(m):
    return m.state_dir / "gateway" / "netns"


def pin_mounted(m):
    pin = str(gateway_pin(m))
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == pin for line in f)


def gateway_pasta(t):
    st = sbxutil.status(t)
    assert "gateway_pasta_pid" in st, st
    return sbxutil.ProcRef(st["gateway_pasta_pid"])


def pastas_of(m):
    """Live pasta processes whose command line names this instance."""
    return {pid: c for pid, c in sbxutil.procs_matching(m.state_dir).items() if "pasta" in c and "/bin/sh" not in c}


def in_gateway(m, *cmd):
    return subprocess.run(["nsenter", f"--net={gateway_pin(m)}", *cmd], capture_output=True, text=True, timeout=30)


def probe(t, lab, name="probe", targets=None):
    targets = targets or [("pub", lab.PUB)]
    return py(t, name, "TARGETS = %r\n" % (targets,) + OPEN_PROBE)


@pytest.mark.timeout_s(150)
def test_open_sandbox_reaches_a_public_host_through_the_gateway(sbxfs, lab):
    m = sbxfs(config=OPEN)
    t = acquire(m)
    st = sbxutil.status(t)
    assert st["network_mode"] == "open" and "pasta_pid" not in st, st
    assert st["net_address"].startswith("10.201."), st
    pasta = m.track(st["gateway_pasta_pid"])
    assert pasta.alive() and pin_mounted(m)
    r = py(t, "probe", f"TARGETS = [('pub', {lab.PUB!r}), ('priv', {lab.PRIV!r}), ('meta', {lab.META!r})]\n"
           + OPEN_PROBE)
    assert r["pub"].startswith("connected pub"), r
    assert r["pub_udp"] == "answered pub ping", r
    for k in ("priv", "meta", "priv_udp", "meta_udp"):
        assert r[k].startswith("failed"), f"the open sandbox reached a private destination: {r}"
