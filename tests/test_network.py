# SPDX-License-Identifier: MIT
"""DESIGN §7: network policy, with real traffic on this machine only.

* open: own network namespace with a veth pair into the daemon's gateway (or
  pasta of its own, network.gateway off) and an nftables ruleset; the test's
  own namespaces stand for a public host (198.51.100.1) and a private one
  (10.x, also answering on 169.254.169.254) - netlab.NetLab;
* isolated: loopback only, no proxy;
* allowlist: the approval proxy on 127.0.0.1:3128 inside the sandbox, test
  servers on the host's loopback named with network.hosts (and
  allow_private_destinations, which is what lets the proxy reach them);
  events and decisions through the `events` and `network` files; hostile
  input to the proxy.

Every probe runs as a job inside the sandbox (python3 or curl) and is judged
from the host.
"""

import errno
import json
import os
import random
import re
import select
import signal
import socket
import subprocess
import threading
import time

import pytest

import netlab
import sbxutil
from sbxutil import expect_errno, read_json, read_text, wait_until
from test_jobs import acquire, mkjob, run_job, start, wait_exit, jstatus  # noqa: F401

NAMES = ["static.example.test", "files.pypi.example", "pypi.example", "api.example.test", "other.example.test",
         "held.example.test"]

# A small library prepended to the jobs' python scripts: raw conversations
# with the proxy, and a hand-made TLS ClientHello.
PYLIB = r'''
import json, os, socket, struct, sys, time
P = ("127.0.0.1", 3128)
def raw(data, timeout=20, pause=None):
    s = socket.create_connection(P, timeout=timeout)
    if pause is None:
        s.sendall(data)
    else:
        for part in data:
            s.sendall(part); time.sleep(pause)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        out += b"<timeout>"
    except ConnectionResetError:
        out += b"<reset>"
    s.close()
    return out
def hello(sni, ech=False):
    ext = b""
    if sni is not None:
        n = sni.encode()
        sn = b"\x00" + struct.pack(">H", len(n)) + n
        ext += struct.pack(">HH", 0, len(sn) + 2) + struct.pack(">H", len(sn)) + sn
    ext += struct.pack(">HH", 0x2b, 3) + b"\x02\x03\x04"
    if ech:
        ext += struct.pack(">HH", 0xfe0d, 4) + b"\0\0\0\0"
    body = b"\x03\x03" + os.urandom(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00" + struct.pack(">H", len(ext)) + ext
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs
def tunnel(host, sni, ech=False, timeout=20):
    s = socket.create_connection(P, timeout=timeout)
    s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host, host)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            return head, b""
        head += b
    if not head.startswith(b"HTTP/1.1 200"):
        return head + s.recv(65536), b""
    s.sendall(hello(sni, ech))
    rest = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            rest += b
    except (socket.timeout, ConnectionResetError):
        pass
    return head, rest
def show(**kw):
    print(json.dumps({k: (v.decode("latin-1") if isinstance(v, bytes) else v) for k, v in kw.items()}))
'''


def tag():
    return f"{random.randint(0, 1 << 40):010x}"


def py(sbx, name, body, timeout=60):
    """Run PYLIB + body as a python job; its last stdout line parsed as JSON."""
    code, out, err = run_job(sbx, name, "python3 -", stdin=PYLIB + body, timeout=timeout)
    assert code == 0, f"job {name} failed ({code}): {err}\n{out}"
    return json.loads(out.strip().splitlines()[-1])


def request_id(text):
    m = re.search(r"\(request ([0-9a-f-]{36})\)", text)
    return m.group(1) if m else None


def write_network(t, text):
    data = text.encode() if isinstance(text, str) else text
    fd = os.open(t / "network", os.O_WRONLY)
    try:
        return os.write(fd, data)
    finally:
        os.close(fd)


def network(t):
    return read_json(t / "network")


def events_nb(t):
    """One non-blocking read of events: the line, or None for EAGAIN."""
    fd = os.open(t / "events", os.O_RDONLY | os.O_NONBLOCK)
    try:
        return os.read(fd, 65536).decode()
    except BlockingIOError:
        return None
    finally:
        os.close(fd)


def consume(t, timeout=20):
    """`cat events` (blocking): one event."""
    r = subprocess.run(["cat", str(t / "events")], capture_output=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert len(lines) == 1, f"one event per read, got {r.stdout!r}"
    return json.loads(lines[0])


# --------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def cert():
    d = netlab.tmpdir()
    try:
        yield netlab.make_cert(d)
    finally:
        netlab.rmtree(d)


@pytest.fixture
def servers(cert):
    """name -> LoopbackHTTP on :80 and LoopbackHTTP+TLS on :443 of one random
    loopback address per name."""
    made = {}
    try:
        for n in NAMES:
            addr = netlab.random_loopback()
            made[n] = (netlab.LoopbackHTTP(n, 80, addr), netlab.LoopbackHTTP(n, 443, addr, tls=cert))
        yield made
    finally:
        for a, b in made.values():
            a.close()
            b.close()


def allowlist_conf(servers, **over):
    net = {"mode": "allowlist", "allow_domains": ["static.example.test", "*.pypi.example"], "approval": "prompt",
           "temporary_grant_ttl": 30, "allow_private_destinations": True,
           "hosts": {n: s[0].addr for n, s in servers.items()}}
    net.update(over)
    return {"network": net}


@pytest.fixture
def allow(sbxfs, servers):
    """(instance, sandbox dir, servers) in allowlist + prompt."""
    m = sbxfs(config=allowlist_conf(servers))
    return m, acquire(m), servers


# --------------------------------------------------------------------------
# every mode: a namespace of its own


HOST_PROBE = r'''
import socket, sys
out = {}
for name, fam, addr in TARGETS:
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(addr if fam != socket.AF_UNIX else addr)
        out[name] = "connected " + s.recv(100).decode().strip()
    except Exception as e:
        out[name] = "failed " + type(e).__name__
    s.close()
show(**out)
'''


def host_targets(lo, lo6, abstract, eth):
    t = [("lo", "socket.AF_INET", ("127.0.0.1", lo.port)), ("abstract", "socket.AF_UNIX", "\0" + abstract)]
    if lo6:
        t.append(("lo6", "socket.AF_INET6", ("::1", lo6.port)))
    if eth:
        t.append(("eth", "socket.AF_INET", (eth[0], eth[1].port)))
    return "TARGETS = [" + ", ".join(f"({n!r}, {f}, {a!r})" for n, f, a in t) + "]\n"


def host_address():
    """A non-loopback address of this host, or None."""
    r = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True)
    m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", r.stdout)
    return m.group(1) if m else None


@pytest.mark.timeout_s(120)
@pytest.mark.parametrize("mode", ["open", "isolated", "allowlist"])
def test_host_services_unreachable_in_every_mode(sbxfs, mode):
    """The host's 127.0.0.1 and ::1 services, its abstract unix sockets and its
    own addresses are out of reach, whatever the mode."""
    m = sbxfs(config={"network": {"mode": mode}})
    t = acquire(m)
    assert sbxutil.status(t)["network_mode"] == mode
    lo = netlab.HostTCP("127.0.0.1")
    lo6 = netlab.HostTCP("::1", socket.AF_INET6)
    name = f"sbxfs-test-{tag()}"
    ab = netlab.HostTCP(abstract=name)
    addr = host_address()
    eth = netlab.HostTCP("0.0.0.0") if addr else None
    try:
        # the servers answer the host itself
        with socket.create_connection(("127.0.0.1", lo.port), timeout=3) as c:
            assert c.recv(10) == b"host\n"
        r = py(t, "probe", host_targets(lo, lo6, name, (addr, eth) if addr else None) + HOST_PROBE)
        for k, v in r.items():
            assert v.startswith("failed"), f"{mode}: the sandbox reached the host's {k}: {r}"
        assert lo.accepted == 1 and lo6.accepted == 0 and ab.accepted == 0
        assert eth is None or eth.accepted == 0
    finally:
        for s in (lo, lo6, ab, eth):
            if s:
                s.close()


@pytest.mark.timeout_s(120)
@pytest.mark.parametrize("mode", ["open", "isolated"])
def test_no_proxy_and_no_events_outside_allowlist(sbxfs, mode):
    m = sbxfs(config={"network": {"mode": mode, "allow_domains": ["a.example"]}})
    t = acquire(m)
    code, out, err = run_job(t, "env", "env")
    assert "_proxy=" not in out.lower(), out
    code, out, err = run_job(t, "port", "python3 -c \"import socket; "
                             "socket.create_connection(('127.0.0.1', 3128), timeout=2)\" 2>&1 | tail -1")
    assert "ConnectionRefusedError" in out, f"something listens on 3128 in {mode} mode: {out}"
    # events: an empty file at once, readable for poll; network says why
    assert events_nb(t) == ""
    assert consume_empty(t)
    n = network(t)
    assert n["mode"] == mode and n["events"] == [] and n["grants"] == [] and n["proxy"] is None
    assert n["events_available"] is False and "allowlist" in n["reason"]
    assert write_network(t, "deny-pending\n") == 13
    expect_errno(lambda: write_network(t, "deny 0123abcd-0000-4000-8000-000000000000\n"), errno.ENOENT)


def consume_empty(t):
    r = subprocess.run(["cat", str(t / "events")], capture_output=True, timeout=10)
    return r.returncode == 0 and r.stdout == b""


# --------------------------------------------------------------------------
# open


@pytest.fixture
def lab():
    lab = netlab.NetLab()
    try:
        yield lab
    finally:
        lab.close()


OPEN_PROBE = r'''
import socket
out = {}
for name, addr in TARGETS:
    try:
        s = socket.create_connection((addr, 8080), timeout=4)
        out[name] = "connected " + s.recv(100).decode().strip()
        s.close()
    except Exception as e:
        out[name] = "failed " + type(e).__name__
for name, addr in TARGETS:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(3)
    try:
        u.sendto(b"ping", (addr, 8081))
        out[name + "_udp"] = "answered " + u.recvfrom(100)[0].decode()
    except Exception as e:
        out[name + "_udp"] = "failed " + type(e).__name__
show(**out)
'''


@pytest.mark.timeout_s(150)
def test_open_reaches_public_only(sbxfs, lab):
    # the host itself reaches all three: what the sandbox misses, policy took
    for addr in (lab.PUB, lab.PRIV, lab.META):
        with socket.create_connection((addr, 8080), timeout=5) as c:
            assert c.recv(100).startswith(b"pub" if addr == lab.PUB else b"priv")
    m = sbxfs(config={"network": {"mode": "open"}})
    t = acquire(m)
    st = sbxutil.status(t)
    assert st["network_mode"] == "open" and st["gateway_pasta_pid"] > 1
    m.track(st["gateway_pasta_pid"])
    targets = f"TARGETS = [('pub', {lab.PUB!r}), ('priv', {lab.PRIV!r}), ('meta', {lab.META!r})]\n"
    r = py(t, "probe", targets + OPEN_PROBE)
    assert r["pub"].startswith("connected pub"), r
    assert r["pub_udp"] == "answered pub ping", r
    for k in ("priv", "meta", "priv_udp", "meta_udp"):
        assert r[k].startswith("failed"), f"the open sandbox reached a private destination: {r}"
    # no proxy variables in open mode
    code, out, _ = run_job(t, "env", "env")
    assert "_proxy=" not in out.lower()


@pytest.mark.timeout_s(150)
def test_open_private_destinations_allowed_by_the_override(sbxfs, lab):
    m = sbxfs(config={"network": {"mode": "open", "allow_private_destinations": True}})
    t = acquire(m)
    targets = f"TARGETS = [('pub', {lab.PUB!r}), ('priv', {lab.PRIV!r}), ('meta', {lab.META!r})]\n"
    r = py(t, "probe", targets + OPEN_PROBE)
    assert r["pub"].startswith("connected") and r["priv"].startswith("connected priv"), r
    assert r["meta"].startswith("connected priv"), r


@pytest.mark.timeout_s(150)
def test_open_ruleset_cannot_be_changed_by_the_sandbox(sbxfs, lab):
    m = sbxfs(config={"network": {"mode": "open"}})
    t = acquire(m)
    code, out, err = run_job(t, "nft", "nft flush ruleset 2>&1; echo rc=$?; ip route add 10.213.0.0/16 dev lo 2>&1; "
                             "echo rc=$?; ip link set lo down 2>&1; echo rc=$?")
    assert out.count("rc=0") == 0, out
    r = py(t, "probe", f"TARGETS = [('priv', {lab.PRIV!r})]\n" + OPEN_PROBE)
    assert r["priv"].startswith("failed"), r
    init = sbxutil.init_pid(t)
    rules = subprocess.run(["nsenter", "-t", str(init), "-n", "nft", "list", "table", "inet", "sbxfs"],
                           capture_output=True, text=True, timeout=10)
    assert rules.returncode == 0 and "169.254.0.0/16" in rules.stdout, rules.stdout + rules.stderr


@pytest.mark.timeout_s(150)
def test_open_pasta_adopted_after_kill9_and_ended_with_the_sandbox(sbxfs):
    """network.gateway off: a pasta per sandbox (the gateway's own test is
    tests/test_gateway.py)."""
    m = sbxfs(config={"network": {"mode": "open", "gateway": False}})
    t = acquire(m)
    pasta = m.track(sbxutil.status(t)["pasta_pid"])
    init = m.track(sbxutil.init_pid(t))
    assert pasta.alive()
    m.kill9()
    assert pasta.alive() and init.alive(), "the sandbox's network must outlive the daemon"
    m.restart()
    t = acquire(m)  # reclaimed from the warm pool: the same sandbox
    st = sbxutil.status(t)
    assert st["init_pid"] == init.pid and st["pasta_pid"] == pasta.pid
    m.stop()
    assert wait_until(lambda: not pasta.alive() and not init.alive(), 10), "pasta outlived its sandbox"


@pytest.mark.timeout_s(150)
def test_adopted_sandboxes_keep_the_network_mode_they_were_created_with(sbxfs, servers):
    """A daemon restarted with another network.mode adopts each sandbox with
    the mode it was created with (network.json), and says so: status's
    network_mode, the network view and the jobs' proxy environment agree.
    The chaos run found status giving the new configuration's mode."""
    import conftest
    m = sbxfs(config={"network": {"mode": "open"}})
    a = acquire(m, "alice", "a")
    init_a = sbxutil.init_pid(a)
    m.kill9()
    m.conf.write_text(conftest.dump_yaml({**m.config, **allowlist_conf(servers)}))
    m.restart()
    a = acquire(m, "alice", "a")
    b = acquire(m, "alice", "b")
    assert sbxutil.init_pid(a) == init_a, "not the same sandbox"
    m.kill9()
    m.conf.write_text(conftest.dump_yaml({**m.config, "network": {"mode": "isolated"}}))
    m.restart()
    for t, mode in ((a, "open"), (b, "allowlist")):
        os.makedirs(t)
        assert sbxutil.status(t)["network_mode"] == mode, (t, sbxutil.status(t))
        assert network(t)["mode"] == mode
        code, out, err = run_job(t, "env", "printf '%s' \"$http_proxy\"", timeout=30)
        assert out == ("http://127.0.0.1:3128" if mode == "allowlist" else ""), (mode, out, err)
    r = py(b, "static", "show(a=raw(b'GET http://static.example.test/k HTTP/1.1\\r\\nHost: static.example.test\\r\\n\\r\\n'))")
    assert r["a"].startswith("HTTP/1.1 200"), r
    # a sandbox made now has the current configuration's mode
    c = acquire(m, "alice", "c")
    assert sbxutil.status(c)["network_mode"] == "isolated"


@pytest.mark.timeout_s(150)
def test_open_sandbox_without_pasta_is_recreated(sbxfs):
    """network.gateway off (on, the gateway restarts its pasta: test_gateway.py)."""
    m = sbxfs(config={"network": {"mode": "open", "gateway": False}})
    t = acquire(m)
    st = sbxutil.status(t)
    init = m.track(st["init_pid"])
    pasta = sbxutil.ProcRef(st["pasta_pid"])
    os.kill(pasta.pid, signal.SIGKILL)
    assert wait_until(lambda: not pasta.alive(), 10)
    os.rmdir(t)
    t = acquire(m)
    st2 = sbxutil.status(t)
    m.track(st2["pasta_pid"])
    assert st2["init_pid"] != init.pid, "a sandbox that lost its network was reclaimed as healthy"
    assert wait_until(lambda: not init.alive(), 10)
    assert "health check" in st2.get("last_event", ""), st2


# --------------------------------------------------------------------------
# allowlist: the proxy


@pytest.mark.timeout_s(120)
def test_allowlist_environment_and_static_rules(allow):
    m, t, servers = allow
    code, out, err = run_job(t, "env", "env | sort")
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        assert env.get(k) == "http://127.0.0.1:3128", (k, out)
    assert env.get("NO_PROXY") == "localhost,127.0.0.1,::1" and env.get("no_proxy") == "localhost,127.0.0.1,::1"
    # curl through the environment's proxy: exact and wildcard names, plain and TLS
    script = ("for u in http://static.example.test/a https://static.example.test/b http://files.pypi.example/c "
              "https://files.pypi.example/d http://pypi.example/e https://api.example.test/f; do "
              "printf '%s ' $u; curl -sk -o /tmp/body -w '%{http_code}' $u; echo \" $(head -c 80 /tmp/body)\"; done")
    code, out, err = run_job(t, "curl", script, timeout=60)
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert lines["http://static.example.test/a"].startswith("200 static.example.test GET /a"), out
    assert lines["https://static.example.test/b"].startswith("200 static.example.test GET /b"), out
    assert lines["http://files.pypi.example/c"].startswith("200 files.pypi.example GET /c"), out
    assert lines["https://files.pypi.example/d"].startswith("200 files.pypi.example GET /d"), out
    # the wildcard never matches the apex; curl shows the CONNECT refusal as 000
    assert lines["http://pypi.example/e"].startswith("403 Sandbox network policy denied pypi.example:80"), out
    assert lines["https://api.example.test/f"].startswith("000") or "403" in lines["https://api.example.test/f"]
    assert servers["static.example.test"][1].sni == ["static.example.test"]
    assert not servers["pypi.example"][0].requests and not servers["api.example.test"][1].sni
    # the upstream saw one clean origin-form request
    method, path, headers = servers["static.example.test"][0].requests[0]
    assert (method, path) == ("GET", "/a")
    assert headers.get("Connection") == "close" and "Proxy-Connection" not in headers, headers


@pytest.mark.timeout_s(150)
def test_prompt_flow_end_to_end_with_ttl(allow):
    m, t, servers = allow
    fetch = "curl -sk -o /tmp/b -w '%{http_code}' https://api.example.test/x; echo \" $(cat /tmp/b)\""
    # blocked: the CONNECT answer names the host and a request id
    r = py(t, "denied", "h, rest = tunnel('api.example.test', 'api.example.test')\nshow(head=h)")
    assert r["head"].startswith("HTTP/1.1 403"), r
    assert "api.example.test:443" in r["head"]
    rid = request_id(r["head"])
    assert rid, r
    ev = consume(t)
    assert ev == {"request_id": rid, "host": "api.example.test", "port": 443, "method": "CONNECT",
                  "created_at": ev["created_at"]}
    assert abs(ev["created_at"] - time.time()) < 60
    assert write_network(t, f"allow_temporary {rid}\n") == len(rid) + 17
    code, out, err = run_job(t, "retry", fetch, timeout=30)
    assert out.startswith("200 api.example.test GET /x"), (out, err)
    n = network(t)
    assert n["mode"] == "allowlist" and n["approval"] == "prompt" and n["ttl"] == 30
    assert n["allow_domains"] == ["static.example.test", "*.pypi.example"]
    assert n["proxy"] == "http://127.0.0.1:3128" and n["events_available"] is True
    g = [g for g in n["grants"] if g["host"] == "api.example.test"]
    assert len(g) == 1 and g[0]["port"] == 443 and g[0]["expires_at"] - time.time() <= 30
    e = [e for e in n["events"] if e["request_id"] == rid]
    assert e and e[0]["decision"] == "allow_temporary" and e[0]["surfaced"] is True
    # after the ttl: blocked again, with a new event
    time.sleep(max(0.0, g[0]["expires_at"] - time.time()) + 1.0)
    code, out, err = run_job(t, "expired", fetch, timeout=30)
    assert not out.startswith("200"), out
    assert all(g["host"] != "api.example.test" for g in network(t)["grants"])
    ev2 = consume(t)
    assert ev2["host"] == "api.example.test" and ev2["request_id"] != rid
    metrics = sbxutil.parse_metrics(read_text(m.mnt / ".metrics"))
    assert metrics["sbxfs_network_events_total"] >= 2


@pytest.mark.timeout_s(120)
def test_allow_sandbox_deny_and_decisions(allow):
    m, t, servers = allow
    body = ("a = raw(b'GET http://api.example.test/1 HTTP/1.1\\r\\nHost: api.example.test\\r\\n\\r\\n')\n"
            "b = raw(b'GET http://other.example.test/1 HTTP/1.1\\r\\nHost: other.example.test\\r\\n\\r\\n')\n"
            "show(a=a, b=b)")
    r = py(t, "first", body)
    ida, idb = request_id(r["a"]), request_id(r["b"])
    assert ida and idb and ida != idb, r
    # decide both (deciding works on unsurfaced events too)
    assert write_network(t, f"allow_sandbox {ida}") > 0
    assert write_network(t, f"allow_sandbox {ida}\n") > 0  # the same decision twice
    assert write_network(t, f"deny {idb}\n") > 0
    assert write_network(t, f"deny {idb}\n") > 0
    expect_errno(lambda: write_network(t, f"deny {ida}\n"), errno.EEXIST)
    expect_errno(lambda: write_network(t, f"allow_temporary {ida}\n"), errno.EEXIST)
    expect_errno(lambda: write_network(t, f"allow_sandbox {idb}\n"), errno.EEXIST)
    expect_errno(lambda: write_network(t, "deny 0123abcd-0000-4000-8000-000000000000\n"), errno.ENOENT)
    r = py(t, "second", body)
    assert r["a"].startswith("HTTP/1.1 200") and "api.example.test GET /1" in r["a"], r
    assert r["b"].startswith("HTTP/1.1 403") and request_id(r["b"]) not in (None, idb), r
    n = network(t)
    grants = {(g["host"], g["port"]): g["expires_at"] for g in n["grants"]}
    assert grants == {("api.example.test", 80): None}, n["grants"]
    dec = {e["request_id"]: e["decision"] for e in n["events"]}
    assert dec[ida] == "allow_sandbox" and dec[idb] == "deny"
    # the grant stays across a release and a reclaim (the sandbox lives on)
    os.rmdir(t)
    t = acquire(m)
    r = py(t, "third", body)
    assert r["a"].startswith("HTTP/1.1 200"), r


@pytest.mark.timeout_s(120)
def test_malformed_network_writes_change_nothing(allow):
    m, t, servers = allow
    r = py(t, "deny", "show(a=raw(b'CONNECT api.example.test:443 HTTP/1.1\\r\\n\\r\\n'))")
    rid = request_id(r["a"])
    before = read_text(t / "network")
    bad = [b"\n", b"bogus\n", b"allow_temporary\n", f"allow_temporary {rid} extra\n".encode(),
           f"allow_temporary {rid[:-1]}\n".encode(), b"allow_temporary not-an-id\n", b"deny-pending now\n",
           f"ALLOW_TEMPORARY {rid}\n".encode(), f"allow_temporary {rid}\nallow_sandbox {rid}\n".encode(),
           f"superseded {rid}\n".encode(), b"\x00\x01\x02", b"x" * 5000]
    for data in bad:
        expect_errno(lambda: write_network(t, data), errno.EINVAL)
    assert read_text(t / "network") == before
    assert "malformed command" in m.log
    # and the event is still pending, undecided
    assert consume(t)["request_id"] == rid


@pytest.mark.timeout_s(120)
def test_reuse_supersede_and_deny_pending(allow):
    m, t, servers = allow
    twice = ("a1 = raw(b'CONNECT api.example.test:443 HTTP/1.1\\r\\n\\r\\n')\n"
             "a2 = raw(b'CONNECT api.example.test:443 HTTP/1.1\\r\\n\\r\\n')\n"
             "b = raw(b'CONNECT other.example.test:443 HTTP/1.1\\r\\n\\r\\n')\n"
             "c = raw(b'CONNECT held.example.test:443 HTTP/1.1\\r\\n\\r\\n')\n"
             "show(a1=a1, a2=a2, b=b, c=c)")
    r = py(t, "twice", twice)
    a1, a2, b, c = (request_id(r[k]) for k in ("a1", "a2", "b", "c"))
    assert a1 and a1 == a2, f"a retry within 30 s must reuse the event: {r}"
    assert len({a1, b, c}) == 3
    # consume: the oldest, the others superseded
    assert consume(t)["request_id"] == a1
    dec = {e["request_id"]: e["decision"] for e in network(t)["events"]}
    assert dec == {a1: None, b: "superseded", c: "superseded"}, dec
    assert events_nb(t) is None  # nothing pending
    expect_errno(lambda: write_network(t, f"allow_temporary {b}\n"), errno.EEXIST)
    # a retry of a superseded destination makes a fresh event; the surfaced one is reused
    r = py(t, "again", twice)
    assert request_id(r["a1"]) == a1
    b2, c2 = request_id(r["b"]), request_id(r["c"])
    assert b2 not in (b, None) and c2 not in (c, None)
    # deny-pending: the unsurfaced ones, never the surfaced one
    assert write_network(t, "deny-pending\n") == 13
    dec = {e["request_id"]: e["decision"] for e in network(t)["events"]}
    assert dec[b2] == "deny" and dec[c2] == "deny" and dec[a1] is None, dec
    assert events_nb(t) is None
    assert write_network(t, f"allow_temporary {a1}\n") > 0


@pytest.mark.timeout_s(120)
def test_approval_deny_records_nothing(sbxfs, servers):
    m = sbxfs(config=allowlist_conf(servers, approval="deny"))
    t = acquire(m)
    r = py(t, "deny", "show(a=raw(b'GET http://api.example.test/ HTTP/1.1\\r\\nHost: api.example.test\\r\\n\\r\\n'),"
                      " s=raw(b'GET http://static.example.test/ HTTP/1.1\\r\\nHost: static.example.test\\r\\n\\r\\n'))")
    assert r["a"].startswith("HTTP/1.1 403") and "api.example.test:80" in r["a"], r
    assert request_id(r["a"]) is None and "X-Sbxfs-Request-Id" not in r["a"], r
    assert r["s"].startswith("HTTP/1.1 200"), r
    assert network(t)["events"] == [] and consume_empty(t)
    assert network(t)["events_available"] is False


# --------------------------------------------------------------------------
# events: waiting, O_NONBLOCK, poll


DENY_JOB = ("python3 -c \"import socket; s=socket.create_connection(('127.0.0.1',3128)); "
            "s.sendall(b'CONNECT HOST:443 HTTP/1.1\\r\\n\\r\\n'); print(s.recv(999).decode())\"")


@pytest.mark.timeout_s(120)
def test_events_nonblock_and_poll_wakeup(allow):
    m, t, servers = allow
    assert events_nb(t) is None  # EAGAIN
    fd = os.open(t / "events", os.O_RDONLY | os.O_NONBLOCK)
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        assert p.poll(0) == []
        j = mkjob(t, "deny")
        start(j, DENY_JOB.replace("HOST", "api.example.test"))
        t0 = time.monotonic()
        ev = p.poll(20000)
        assert ev and ev[0][1] & select.POLLIN, "poll did not report the new event"
        assert time.monotonic() - t0 < 10
        line = os.read(fd, 65536).decode()
        assert line.endswith("\n") and line.count("\n") == 1, line
        ev = json.loads(line)
        assert ev["host"] == "api.example.test" and ev["port"] == 443 and ev["method"] == "CONNECT"
        assert os.read(fd, 65536) == b""  # one event per open
        assert wait_exit(j, 20) == 0
        assert request_id(read_text(j / "stdout")) == ev["request_id"]
    finally:
        os.close(fd)
    # select(2) and a fresh open: readable only while an event is pending
    fd = os.open(t / "events", os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert select.select([fd], [], [], 0)[0] == []
        run_job(t, "deny2", DENY_JOB.replace("HOST", "other.example.test"))
        assert select.select([fd], [], [], 10)[0] == [fd]
        assert json.loads(os.read(fd, 65536))["host"] == "other.example.test"
    finally:
        os.close(fd)


@pytest.mark.timeout_s(120)
def test_events_blocking_read_waits_for_the_next_event(allow):
    m, t, servers = allow
    got = {}

    def reader():
        got["line"] = subprocess.run(["cat", str(t / "events")], capture_output=True, timeout=60).stdout
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    time.sleep(0.5)
    assert th.is_alive(), "a read of events with nothing pending must wait"
    code, out, _ = run_job(t, "deny", DENY_JOB.replace("HOST", "api.example.test"))
    th.join(20)
    assert got.get("line", b"").count(b"\n") == 1, got
    ev = json.loads(got["line"])
    assert ev["host"] == "api.example.test" and ev["request_id"] == request_id(out)
    assert events_nb(t) is None


@pytest.mark.timeout_s(120)
def test_events_reader_answered_at_rmdir(allow):
    m, t, servers = allow
    proc = subprocess.Popen(["cat", str(t / "events")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(0.5)
    assert proc.poll() is None
    os.rmdir(t)
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("a reader of events still waits after rmdir of its sandbox")
    assert proc.returncode != 0 and b"No such file" in err, (out, err)


# --------------------------------------------------------------------------
# approval_wait


HELD = r'''
t0 = time.time()
r = raw(b"GET http://api.example.test/held HTTP/1.1\r\nHost: api.example.test\r\n\r\n", timeout=60)
show(r=r, took=time.time() - t0)
'''


@pytest.mark.timeout_s(150)
@pytest.mark.parametrize("decision", ["allow_temporary", "deny", None])
def test_approval_wait_holds_the_connection(sbxfs, servers, decision):
    m = sbxfs(config=allowlist_conf(servers, approval_wait=5 if decision is None else 40))
    t = acquire(m)
    j = mkjob(t, "held")
    start(j, "python3 -", stdin=PYLIB + HELD)
    if decision:
        ev = consume(t, timeout=30)  # blocks until the held request is recorded
        assert ev["host"] == "api.example.test" and ev["method"] == "GET"
        time.sleep(0.5)
        assert jstatus(j)["state"] == "running", "the connection was not held"
        assert write_network(t, f"{decision} {ev['request_id']}\n") > 0
    assert wait_exit(j, 60) == 0
    r = json.loads(read_text(j / "stdout").splitlines()[-1])
    if decision == "allow_temporary":
        assert r["r"].startswith("HTTP/1.1 200") and "api.example.test GET /held" in r["r"], r
        assert r["took"] < 30
    elif decision == "deny":
        assert r["r"].startswith("HTTP/1.1 403") and "deny" in r["r"], r
        assert r["took"] < 30
    else:
        assert r["r"].startswith("HTTP/1.1 403") and "approval_wait" in r["r"], r
        assert 4 <= r["took"] < 15, r


# --------------------------------------------------------------------------
# restart


@pytest.mark.timeout_s(150)
def test_events_and_grants_survive_a_restart_while_the_sandbox_lives(allow):
    m, t, servers = allow
    body = ("a = raw(b'GET http://api.example.test/p HTTP/1.1\\r\\nHost: api.example.test\\r\\n\\r\\n')\n"
            "b = raw(b'GET http://other.example.test/p HTTP/1.1\\r\\nHost: other.example.test\\r\\n\\r\\n')\n"
            "show(a=a, b=b)")
    r = py(t, "first", body)
    ida, idb = request_id(r["a"]), request_id(r["b"])
    assert write_network(t, f"allow_sandbox {ida}\n") > 0
    init = m.track(sbxutil.init_pid(t))
    m.kill9()
    m.restart()
    t = acquire(m)
    assert sbxutil.init_pid(t) == init.pid, "not the same sandbox"
    n = network(t)
    assert {(g["host"], g["port"], g["expires_at"]) for g in n["grants"]} == {("api.example.test", 80, None)}
    assert {e["request_id"]: e["decision"] for e in n["events"]} == {ida: "allow_sandbox", idb: None}
    assert n["proxy"] == "http://127.0.0.1:3128"
    assert consume(t)["request_id"] == idb  # still pending
    r = py(t, "second", body)
    assert r["a"].startswith("HTTP/1.1 200"), r
    # a clean stop destroys the sandbox: its grants go with it
    m.stop()
    assert not (m.thread_data("alice", "t") / "network.json").exists()
    m.start()
    t = acquire(m)
    assert sbxutil.init_pid(t) != init.pid
    n = network(t)
    assert n["grants"] == [] and n["events"] == []
    r = py(t, "third", body)
    assert r["a"].startswith("HTTP/1.1 403"), r


# --------------------------------------------------------------------------
# hostile input to the proxy


HOSTILE = r'''
out = {}
out["connect22"] = raw(b"CONNECT static.example.test:22 HTTP/1.1\r\nHost: static.example.test:22\r\n\r\n")
out["http8080"] = raw(b"GET http://static.example.test:8080/ HTTP/1.1\r\nHost: static.example.test:8080\r\n\r\n")
out["ip4"] = raw(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n")
out["ip4http"] = raw(b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
out["ip6"] = raw(b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n")
out["ipint"] = raw(b"CONNECT 2130706433:443 HTTP/1.1\r\n\r\n")
out["iphex"] = raw(b"GET http://0x7f.1/ HTTP/1.1\r\nHost: 0x7f.1\r\n\r\n")
h, rest = tunnel("static.example.test", "other.example.test")
out["sni_mismatch"] = h + b"|" + rest
h, rest = tunnel("static.example.test", "static.example.test", ech=True)
out["ech"] = h + b"|" + rest
h, rest = tunnel("static.example.test", None)
out["no_sni"] = h + b"|" + rest
out["pipelined"] = raw(b"GET http://static.example.test/first HTTP/1.1\r\nHost: static.example.test\r\n\r\n"
                       b"GET http://static.example.test/second HTTP/1.1\r\nHost: static.example.test\r\n\r\n")
out["post_then_pipelined"] = raw(b"POST http://static.example.test/post HTTP/1.1\r\nHost: static.example.test\r\n"
                                 b"Content-Length: 5\r\n\r\nhelloGET http://static.example.test/smuggled HTTP/1.1\r\n"
                                 b"Host: static.example.test\r\n\r\n")
out["chunked"] = raw(b"POST http://static.example.test/chunked HTTP/1.1\r\nHost: static.example.test\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /smuggled2 HTTP/1.1\r\n\r\n")
out["oversized"] = raw(b"GET http://static.example.test/ HTTP/1.1\r\nHost: static.example.test\r\nX-Big: "
                       + b"a" * 70000 + b"\r\n\r\n")
out["folded"] = raw(b"GET http://static.example.test/ HTTP/1.1\r\nHost: static.example.test\r\nX-A: 1\r\n"
                    b" folded\r\n\r\n")
out["cl_te"] = raw(b"POST http://static.example.test/ HTTP/1.1\r\nHost: static.example.test\r\nContent-Length: 5\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
out["http2"] = raw(b"GET http://static.example.test/ HTTP/2.0\r\nHost: static.example.test\r\n\r\n")
out["preface"] = raw(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
out["origin"] = raw(b"GET / HTTP/1.1\r\nHost: static.example.test\r\n\r\n")
out["host_mismatch"] = raw(b"GET http://static.example.test/ HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
out["expect"] = raw(b"PUT http://static.example.test/ HTTP/1.1\r\nHost: static.example.test\r\n"
                    b"Expect: 100-continue\r\nContent-Length: 1\r\n\r\n")
out["https_abs"] = raw(b"GET https://static.example.test/ HTTP/1.1\r\nHost: static.example.test\r\n\r\n")
out["nxdomain_denied"] = raw(b"CONNECT no-such-host.invalid:443 HTTP/1.1\r\n\r\n")
show(**out)
'''


@pytest.mark.timeout_s(150)
def test_hostile_requests(allow):
    m, t, servers = allow
    r = py(t, "hostile", HOSTILE, timeout=120)
    st = servers["static.example.test"]

    def status(k):
        return r[k].split("\r\n", 1)[0]
    assert status("connect22").startswith("HTTP/1.1 403") and "443" in r["connect22"], r["connect22"]
    assert status("http8080").startswith("HTTP/1.1 403") and "port 80" in r["http8080"], r["http8080"]
    for k in ("ip4", "ip4http", "ip6", "ipint", "iphex"):
        assert status(k).startswith("HTTP/1.1 403") and "IP literal" in r[k], (k, r[k])
        assert request_id(r[k]) is None
    # SNI must name the CONNECT host; ECH is refused; the server never sees a handshake
    alert = "\x15\x03\x03\x00\x02\x02\x31"
    for k in ("sni_mismatch", "ech", "no_sni"):
        head, rest = r[k].split("|", 1)
        assert head.startswith("HTTP/1.1 200"), (k, r[k])
        assert rest == alert, (k, rest)
    assert st[1].sni == [], f"a refused ClientHello reached the server: {st[1].sni}"
    # one request per connection: the second is never forwarded
    assert status("pipelined") == "HTTP/1.1 200 OK" and r["pipelined"].count("HTTP/1.") == 1, r["pipelined"]
    assert "GET /first" in r["pipelined"]
    assert status("post_then_pipelined") == "HTTP/1.1 200 OK" and "POST /post 5" in r["post_then_pipelined"]
    assert status("chunked") == "HTTP/1.1 200 OK" and "POST /chunked" in r["chunked"], r["chunked"]
    paths = [p for _, p, _ in st[0].requests]
    assert "/first" in paths and "/post" in paths and "/chunked" in paths
    assert not any("second" in p or "smuggled" in p for p in paths), paths
    assert status("oversized") == "HTTP/1.1 431 Request Header Fields Too Large", status("oversized")
    assert status("folded") == "HTTP/1.1 400 Bad Request" and "folding" in r["folded"]
    assert status("cl_te") == "HTTP/1.1 400 Bad Request" and "Content-Length" in r["cl_te"]
    assert status("http2") == "HTTP/1.1 505 HTTP Version Not Supported"
    assert status("preface") in ("HTTP/1.1 400 Bad Request", "HTTP/1.1 505 HTTP Version Not Supported")
    assert status("origin") == "HTTP/1.1 400 Bad Request"
    assert status("host_mismatch") == "HTTP/1.1 400 Bad Request"
    assert status("expect") == "HTTP/1.1 417 Expectation Failed"
    assert status("https_abs") == "HTTP/1.1 400 Bad Request"
    # policy before DNS: an unknown name is refused (and recorded), never looked up first
    assert status("nxdomain_denied") == "HTTP/1.1 403 Forbidden" and request_id(r["nxdomain_denied"])
    # none of the refusals but the last recorded an event
    hosts = [e["host"] for e in network(t)["events"]]
    assert hosts == ["no-such-host.invalid"], hosts
    assert len([p for p in paths if p == "/"]) == 0


# A TLS 1.3 conversation by hand: a first ClientHello whose key share (x25519)
# the server does not take, so it answers HelloRetryRequest; then a second
# ClientHello with a P-256 key share (the curve's generator: a valid point)
# naming SECOND.  What came back after it is printed.
HRR = r'''
MAGIC = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")
G = bytes.fromhex("046b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296"
                  "4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5")
def ext(t, body):
    return struct.pack(">HH", t, len(body)) + body
def hello13(sni, group, key, rnd, sid):
    n = sni.encode()
    e = ext(0, struct.pack(">H", len(n) + 3) + b"\0" + struct.pack(">H", len(n)) + n)
    e += ext(0x2b, b"\x02\x03\x04") + ext(0x0a, b"\x00\x04\x00\x1d\x00\x17")
    e += ext(0x0d, b"\x00\x06\x08\x04\x04\x03\x04\x01")
    ks = struct.pack(">HH", group, len(key)) + key
    e += ext(0x33, struct.pack(">H", len(ks)) + ks)
    body = b"\x03\x03" + rnd + bytes([len(sid)]) + sid + b"\x00\x02\x13\x01\x01\x00" + struct.pack(">H", len(e)) + e
    hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs
def record(s):
    out = b""
    while len(out) < 5 or len(out) < 5 + struct.unpack(">H", out[3:5])[0]:
        b = s.recv(65536)
        if not b:
            break
        out += b
    return out
def retry(host, second):
    s = socket.create_connection(P, timeout=20)
    s.sendall(("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (host, host)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    rnd, sid = os.urandom(32), os.urandom(32)
    s.sendall(hello13(host, 0x1d, os.urandom(32), rnd, sid))
    first = record(s)
    asked = first[:1] == b"\x16" and first[5:6] == b"\x02" and first[11:43] == MAGIC
    s.sendall(bytes.fromhex("140303000101") + hello13(second, 0x17, G, rnd, sid))
    after = record(s)
    if after[:1] == b"\x15":  # an alert: the connection must end with it
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                after += b
        except socket.timeout:
            after += b"<open>"
    s.close()
    return {"head": head.split(b"\r\n")[0].decode(), "asked_again": asked, "after": after[:11].hex()}
show(same=json.dumps(retry(HOST, HOST)), other=json.dumps(retry(HOST, "other.example.test")))
'''


@pytest.mark.timeout_s(120)
def test_second_clienthello_after_a_helloretryrequest_is_checked(sbxfs, servers, cert):
    """TLS 1.3: a server that answers HelloRetryRequest gets a second
    ClientHello; one naming another host than the CONNECT's is refused (the
    proxy's access_denied alert, then the end of the connection) and never
    reaches the server, one naming the same host goes through."""
    name = "hrr.pypi.example"
    hrr = netlab.LoopbackHTTP(name, 443, tls=cert, tls_curve="prime256v1")
    try:
        conf = allowlist_conf(servers)
        conf["network"]["hosts"][name] = hrr.addr
        m = sbxfs(config=conf)
        t = acquire(m)
        r = py(t, "hrr", f"HOST = {name!r}\n" + HRR)
        same, other = json.loads(r["same"]), json.loads(r["other"])
        for x in (same, other):
            assert x["head"] == "HTTP/1.1 200 Connection Established" and x["asked_again"], x
        # the same name: the server's ServerHello (not another HelloRetryRequest)
        sh = bytes.fromhex(same["after"])
        assert sh[:1] == b"\x16" and sh[5:6] == b"\x02", same
        # another name: refused by the proxy, and the server never saw it
        assert bytes.fromhex(other["after"]) == b"\x15\x03\x03\x00\x02\x02\x31", other
        assert hrr.sni.count(name) == 3 and "other.example.test" not in hrr.sni, hrr.sni
        assert "names another host (after a HelloRetryRequest)" in m.log, m.log[-2000:]
    finally:
        hrr.close()


@pytest.mark.timeout_s(120)
def test_private_dns_answer_refused_without_the_override(sbxfs, servers):
    conf = allowlist_conf(servers, allow_private_destinations=False,
                          allow_domains=["static.example.test", "meta.example.test", "ten.example.test"])
    conf["network"]["hosts"].update({"meta.example.test": ["198.51.100.9", "169.254.169.254"],
                                     "ten.example.test": "10.1.2.3"})
    m = sbxfs(config=conf)
    t = acquire(m)
    r = py(t, "dns", "show(a=raw(b'GET http://static.example.test/ HTTP/1.1\\r\\nHost: static.example.test\\r\\n\\r\\n'),"
                     " b=raw(b'CONNECT meta.example.test:443 HTTP/1.1\\r\\n\\r\\n'),"
                     " c=raw(b'CONNECT ten.example.test:443 HTTP/1.1\\r\\n\\r\\n'),"
                     " d=raw(b'CONNECT localhost:443 HTTP/1.1\\r\\n\\r\\n'))")
    for k in ("a", "b", "c"):
        assert r[k].startswith("HTTP/1.1 403") and "private" in r[k], (k, r[k])
    assert "169.254.169.254" in r["b"] and "10.1.2.3" in r["c"]
    assert r["d"].startswith("HTTP/1.1 403")  # not allowed (an event), and could never be
    assert not servers["static.example.test"][0].requests


@pytest.mark.timeout_s(120)
def test_slowloris_client_times_out(allow):
    m, t, servers = allow
    body = r'''
s = socket.create_connection(P, timeout=40)
s.sendall(b"GET http://static.example.test/ HTTP/1.1\r\nHost: static.example.test\r\n")
t0 = time.time(); out = b""
while time.time() - t0 < 35:
    try:
        s.sendall(b"X")
    except OSError:
        break
    r, _, _ = __import__("select").select([s], [], [], 1.0)
    if r:
        b = s.recv(4096)
        out += b
        if not b or b"\r\n\r\n" in out:
            break
show(out=out, took=time.time() - t0)
'''
    r = py(t, "slow", body, timeout=60)
    assert r["out"].startswith("HTTP/1.1 408"), r
    assert 13 <= r["took"] < 20, r
    assert not servers["static.example.test"][0].requests


@pytest.mark.timeout_s(150)
def test_two_hundred_parallel_connections(sbxfs):
    slow = netlab.LoopbackHTTP("static.example.test", 80, delay=1.0)
    try:
        conf = {"network": {"mode": "allowlist", "allow_domains": ["static.example.test"],
                            "allow_private_destinations": True, "hosts": {"static.example.test": slow.addr}}}
        m = sbxfs(config=conf)
        t = acquire(m)
        body = r'''
import threading
res = [None] * 200
def one(i):
    try:
        res[i] = raw(("GET http://static.example.test/%d HTTP/1.1\r\nHost: static.example.test\r\n\r\n" % i).encode(),
                     timeout=60)[:12]
    except Exception as e:
        res[i] = repr(e).encode()
t0 = time.time()
th = [threading.Thread(target=one, args=(i,)) for i in range(200)]
for x in th: x.start()
for x in th: x.join()
show(ok=sum(1 for x in res if x.startswith(b"HTTP/1.1 200")), bad=[x.decode() for x in res if not x.startswith(b"HTTP/1.1 200")][:5], took=time.time() - t0)
'''
        r = py(t, "parallel", body, timeout=120)
        assert r["ok"] == 200, r
        # the server held them all at once (1 s each): they ran in parallel
        assert r["took"] < 30, r
        assert len(slow.requests) == 200
        metrics = sbxutil.parse_metrics(read_text(m.mnt / ".metrics"))
        assert metrics['sbxfs_proxy_connections_total{result="allowed"}'] >= 200
        assert wait_until(lambda: sbxutil.parse_metrics(read_text(m.mnt / ".metrics"))["sbxfs_proxy_connections"] == 0,
                          10)
    finally:
        slow.close()


@pytest.mark.timeout_s(120)
def test_large_download_and_upload_through_the_proxy(allow):
    m, t, servers = allow
    size = 64 << 20
    code, out, err = run_job(t, "big", f"curl -s -o /dev/null -w '%{{http_code}} %{{size_download}}' "
                             f"http://static.example.test/big/{size}; echo; "
                             f"curl -sk -o /dev/null -w '%{{http_code}} %{{size_download}}' "
                             f"https://static.example.test/big/{size}; echo; "
                             "head -c 3000000 /dev/zero > /tmp/up; "
                             "curl -s -H 'Expect:' -X POST --data-binary @/tmp/up http://static.example.test/up",
                             timeout=90)
    lines = out.splitlines()
    assert lines[0] == f"200 {size}" and lines[1] == f"200 {size}", (out, err)
    assert lines[2] == "static.example.test POST /up 3000000", (out, err)


def _cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.timeout_s(120)
def test_client_reset_while_waiting_costs_nothing(sbxfs):
    """A client that resets its connection while the proxy waits for the
    server (or holds it for approval) must not make the loop spin."""
    slow = netlab.LoopbackHTTP("static.example.test", 80, delay=4.0)
    try:
        conf = {"network": {"mode": "allowlist", "allow_domains": ["static.example.test"], "approval_wait": 10,
                            "allow_private_destinations": True, "hosts": {"static.example.test": slow.addr}}}
        m = sbxfs(config=conf)
        t = acquire(m)
        body = r'''
for req in (b"GET http://static.example.test/slow HTTP/1.1\r\nHost: static.example.test\r\n\r\n",
            b"CONNECT held.example.test:443 HTTP/1.1\r\n\r\n"):
    s = socket.create_connection(P)
    s.sendall(req)
    time.sleep(0.5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()  # a reset
show(ok=1)
'''
        py(t, "reset", body)
        before = _cpu_seconds(m.proc.pid)
        time.sleep(3)
        spent = _cpu_seconds(m.proc.pid) - before
        assert spent < 0.5, f"the daemon spent {spent:.2f} s of CPU in 3 s after two resets"
        assert wait_until(lambda: sbxutil.parse_metrics(read_text(m.mnt / ".metrics"))["sbxfs_proxy_connections"] <= 1,
                          10)
    finally:
        slow.close()


class _LoopbackServer:
    """A server on a random loopback address and the given port whose
    thread accepts connections one after another and hands each to
    serve(conn), which owns it."""

    def __init__(self, port):
        self.addr = netlab.random_loopback()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((self.addr, port))
        self.sock.listen(128)
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            self.serve(c)

    def close(self):
        self.stop.set()
        self.th.join(5)
        self.sock.close()


class _Drip(_LoopbackServer):
    """Once its client has said something, sends 2000 bytes every
    millisecond (as a server on the internet sends segments) for as long as
    they are taken, and never reads again."""

    dripped = 0

    def serve(self, c):
        c.settimeout(10)
        try:
            c.recv(65536)
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.setblocking(False)
            while not self.stop.is_set() and self.dripped < (24 << 20):
                try:
                    self.dripped += c.send(b"d" * 2000)
                except BlockingIOError:
                    pass
                time.sleep(0.001)
            self.stop.wait(20)
        except OSError:
            pass
        c.close()


STILL = r'''
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.settimeout(20)
s.connect(P)
s.sendall(b"CONNECT drip.example.test:443 HTTP/1.1\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
assert head.startswith(b"HTTP/1.1 200"), head
s.sendall(hello("drip.example.test"))
time.sleep(40)
'''


@pytest.mark.timeout_s(120)
def test_tunnel_to_a_client_that_reads_nothing_costs_nothing(sbxfs):
    """A server that sends in tiny pieces to a client that reads nothing:
    once the client's buffers and the relay's pipe are full, the loop waits
    for the client, it does not spin (a pipe fills by its slots, one per
    piece, long before its byte count says so)."""
    drip = _Drip(443)
    try:
        conf = {"network": {"mode": "allowlist", "allow_domains": ["drip.example.test"],
                            "allow_private_destinations": True, "hosts": {"drip.example.test": drip.addr}}}
        m = sbxfs(config=conf)
        t = acquire(m)
        j = mkjob(t, "still")
        start(j, "python3 -", stdin=PYLIB + STILL)
        last = [-1]

        def stalled():
            d, last[0] = last[0], drip.dripped
            return d == drip.dripped
        assert wait_until(stalled, 60, interval=2), (drip.dripped, read_text(j / "stderr"))
        before = _cpu_seconds(m.proc.pid)
        time.sleep(3)
        spent = _cpu_seconds(m.proc.pid) - before
        assert spent < 0.5, f"the daemon spent {spent:.2f} s of CPU in 3 s on a tunnel to a client that reads nothing"
        assert jstatus(j)["state"] == "running", "the tunnel ended before the measure"
    finally:
        drip.close()


HOLD_OPEN = r'''
while not os.path.exists("go"):
    time.sleep(0.05)
socks = []
for i in range(100):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(P)
    except BlockingIOError:
        pass
    socks.append(s)
print(json.dumps({"opened": len(socks)}), flush=True)
time.sleep(12)
'''


@pytest.mark.timeout_s(120)
def test_out_of_file_descriptors_costs_nothing(sbxfs):
    """The daemon out of file descriptors (here: a lowered limit; in life:
    many sandboxes' tunnels, 6 descriptors each): connections wait in the
    listener's backlog, the loop neither spins on accept nor floods the log."""
    import resource
    m = sbxfs(config={"network": {"mode": "allowlist", "allow_domains": ["static.example.test"]}})
    t = acquire(m)
    pid = m.proc.pid
    j = mkjob(t, "hold")
    start(j, "python3 -", stdin=PYLIB + HOLD_OPEN)
    assert wait_until(lambda: jstatus(j)["state"] == "running", 10)
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    out = m.thread_data("alice", "t") / "jobs" / "hold" / "stdout"  # read beside the mount: it needs descriptors
    try:
        n = len(os.listdir(f"/proc/{pid}/fd")) + 20
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (n, old[1]))
        (m.workspace_data("alice", "t") / "go").write_text("")
        assert wait_until(lambda: '"opened"' in out.read_text(), 20)
        time.sleep(0.5)
        lines = m.log.count("out of file descriptors")
        before = _cpu_seconds(pid)
        time.sleep(3)
        spent = _cpu_seconds(pid) - before
        lines = m.log.count("out of file descriptors") - lines
        assert spent < 0.5, f"the daemon spent {spent:.2f} s of CPU in 3 s out of file descriptors"
        assert lines < 10, f"{lines} log lines in 3 s out of file descriptors"
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
    # descriptors again: the listener is served again
    r = py(t, "after", "show(a=raw(b'CONNECT api.example.test:443 HTTP/1.1\\r\\n\\r\\n'))")
    assert r["a"].startswith("HTTP/1.1 403"), r


class _Quiet(_LoopbackServer):
    """Keeps every connection open, never sending or reading."""

    def __init__(self, port):
        self.conns = []
        super().__init__(port)

    def serve(self, c):
        self.conns.append(c)

    def close(self):
        super().close()
        for c in self.conns:
            c.close()


TUNNELS = r'''
while not os.path.exists("go"):
    time.sleep(0.05)
socks = []
for i in range(40):
    s = socket.create_connection(P, timeout=20)
    s.sendall(b"CONNECT quiet.example.test:443 HTTP/1.1\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    s.sendall(hello("quiet.example.test"))
    socks.append(s)
print(json.dumps({"opened": len(socks)}), flush=True)
time.sleep(15)
'''


def _pipe_sizes(pid):
    """{pipe inode: size} of the pipes open in process pid."""
    import fcntl
    sizes = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if not target.startswith("pipe:") or target in sizes:
            continue
        try:
            f = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            sizes[target] = fcntl.fcntl(f, 1032)  # F_GETPIPE_SZ
        finally:
            os.close(f)
    return sizes


@pytest.mark.timeout_s(120)
def test_tunnels_that_never_read_pin_little_daemon_memory(sbxfs):
    """What a relay's pipes hold is the daemon's memory (root has no pipe
    limit): a job holding 40 tunnels open gets 1 MiB pipes for its first 16
    pipes only, the kernel's 64 KiB for the rest (512 tunnels, the most a
    sandbox may have, could otherwise pin a GiB)."""
    quiet = _Quiet(443)
    try:
        conf = {"network": {"mode": "allowlist", "allow_domains": ["quiet.example.test"],
                            "allow_private_destinations": True, "hosts": {"quiet.example.test": quiet.addr}}}
        m = sbxfs(config=conf)
        t = acquire(m)
        j = mkjob(t, "tunnels")
        start(j, "python3 -", stdin=PYLIB + TUNNELS)
        assert wait_until(lambda: jstatus(j)["state"] == "running", 10)
        # the daemon's other pipes (libfuse's splice pipes, up to one a FUSE
        # worker) are there before; the test reads beside the mount meanwhile
        before = _pipe_sizes(m.proc.pid)
        out = m.thread_data("alice", "t") / "jobs" / "tunnels" / "stdout"
        (m.workspace_data("alice", "t") / "go").write_text("")
        assert wait_until(lambda: '"opened"' in out.read_text(), 60), read_text(j / "stderr")
        after = _pipe_sizes(m.proc.pid)
        new = sorted(size for ino, size in after.items() if ino not in before)
        big = [size for size in new if size > 65536]
        assert len(new) >= 80, new  # two a tunnel
        assert 1 <= len(big) <= 16, new
        assert all(size == 1 << 20 for size in big), new
    finally:
        quiet.close()


# --------------------------------------------------------------------------
# review: resolver starvation and slow work on the proxy thread

# getaddrinfo() for names starting with "slow-" hangs $SBXFS_SLOW_S seconds (3 if
# unset: a resolver that never answers, cut short) and is counted in
# $SBXFS_SLOW_LOG; other names resolve.
_SLOW_DNS = r'''
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
	int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **) =
		(int (*)(const char *, const char *, const struct addrinfo *, struct addrinfo **))dlsym(RTLD_NEXT, "getaddrinfo");
	const char *log = getenv("SBXFS_SLOW_LOG");
	if (node && !strncmp(node, "slow-", 5)) {
		int fd = log ? open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600) : -1;
		if (fd >= 0) {
			if (write(fd, "x", 1) < 0) {}
			close(fd);
		}
		sleep(getenv("SBXFS_SLOW_S") ? (unsigned)atoi(getenv("SBXFS_SLOW_S")) : 3);
		return EAI_AGAIN;
	}
	return real(node, service, hints, res);
}
'''


@pytest.fixture
def slow_dns():
    from pathlib import Path
    d = Path(netlab.tmpdir())
    try:
        (d / "slow.c").write_text(_SLOW_DNS)
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(d / "slow.so"), str(d / "slow.c"), "-ldl"],
                       check=True, capture_output=True, timeout=60)
        yield d
    finally:
        netlab.rmtree(d)


def _preload(lib):
    """LD_PRELOAD for the daemon: an ASan build's runtime must come first in
    the initial library list, or it refuses to start."""
    from conftest import SBXFS_BIN
    out = subprocess.run(["ldd", str(SBXFS_BIN)], capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"libasan\.so\S*\s+=>\s+(\S+)", out)
    return f"{m.group(1)} {lib}" if m else str(lib)


def _hog(sbx, name, n, hold):
    """A job opening n proxy connections to names whose lookups hang, closed
    after hold seconds."""
    j = mkjob(sbx, name)
    start(j, "python3 -", stdin=PYLIB + r'''
ss = []
for i in range(%d):
    s = socket.create_connection(P, timeout=10)
    s.sendall(("GET http://slow-%%d.pypi.example/ HTTP/1.1\r\nHost: slow-%%d.pypi.example\r\n\r\n" %% (i, i)).encode())
    ss.append(s)
time.sleep(%g)
for s in ss:
    s.close()
print("closed")
''' % (n, hold))
    return j


def _static_get(sbx):
    """A request of sbx's to a name of network.hosts (no DNS at all): its
    answer and how long it took."""
    return py(sbx, "fast", "t0 = time.time()\n"
                           "o = raw(b'GET http://static.example.test/b HTTP/1.1\\r\\nHost: static.example.test\\r\\n\\r\\n')\n"
                           "show(out=o, took=time.time() - t0)", timeout=40)


@pytest.mark.timeout_s(90)
def test_hanging_lookups_of_one_sandbox_do_not_stall_the_others(sbxfs, servers, slow_dns):
    log = slow_dns / "lookups"
    m = sbxfs(config=allowlist_conf(servers),
              env={"LD_PRELOAD": _preload(slow_dns / "slow.so"), "SBXFS_SLOW_LOG": str(log), "SBXFS_SLOW_S": "6"})
    a, b = acquire(m, "alice"), acquire(m, "bob")
    # a: 12 connections to names whose lookups hang 6 s (allowed by
    # *.pypi.example), dropped after 2 s
    hog = _hog(a, "hog", 12, 2)
    assert wait_until(lambda: log.exists() and log.stat().st_size >= 1, 10), "the slow lookups never started"
    t0 = time.monotonic()
    # b: a name of network.hosts, no DNS at all: it must not wait behind a's lookups
    r = _static_get(b)
    assert r["out"].startswith("HTTP/1.1 200"), r
    assert r["took"] < 5, r
    assert wait_exit(hog, 20) == 0
    # a's requests whose clients went away are never looked up: the lookups
    # started before the close are all there is
    time.sleep(max(0.0, 8 - (time.monotonic() - t0)))
    n = log.stat().st_size
    assert n <= 2, f"{n} lookups for a sandbox that gave up after 2 s (at most 2 run at a time)"


@pytest.mark.timeout_s(90)
def test_sandboxes_whose_lookups_hang_get_resolver_threads_of_their_own(sbxfs, servers, slow_dns):
    # two hostile sandboxes hold every thread the proxy starts with (2 each),
    # their lookups hanging 8 s: bob's lookup gets a thread of its own at once
    log = slow_dns / "lookups"
    m = sbxfs(config=allowlist_conf(servers),
              env={"LD_PRELOAD": _preload(slow_dns / "slow.so"), "SBXFS_SLOW_LOG": str(log), "SBXFS_SLOW_S": "8"})
    a, c, b = acquire(m, "alice"), acquire(m, "carol"), acquire(m, "bob")
    hogs = [_hog(a, "hog", 12, 3), _hog(c, "hog", 12, 3)]
    assert wait_until(lambda: log.exists() and log.stat().st_size >= 4, 10), "the slow lookups never started"
    t0 = time.monotonic()
    r = _static_get(b)
    assert r["out"].startswith("HTTP/1.1 200"), r
    assert r["took"] < 5, r
    # one thread more for bob's lookup, not one per waiting request
    assert len(_threads(m.daemon_pid(), "sbxfs-resolve")) == 5
    for h in hogs:
        assert wait_exit(h, 20) == 0
    # still at most 2 lookups of each hog at a time, and none after they left
    time.sleep(max(0.0, 10 - (time.monotonic() - t0)))
    n = log.stat().st_size
    assert n <= 4, f"{n} lookups for two sandboxes that gave up after 3 s (at most 2 each at a time)"
    assert "every resolver thread was busy: started thread 5" in m.log, m.log[-2000:]


def _threads(pid, name):
    """The ids of pid's threads named name."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == name:
                    out.append(int(tid))
        except FileNotFoundError:
            pass
    return out


def _proxy_tid(pid):
    t = _threads(pid, "sbxfs-proxy")
    return t[0] if t else None


@pytest.mark.timeout_s(90)
def test_recording_an_event_never_waits_for_the_disk_on_the_proxy_thread(sbxfs, servers):
    m = sbxfs(config=allowlist_conf(servers))
    a, b = acquire(m, "alice"), acquire(m, "bob")
    state = m.thread_data("alice", "t") / "network.json"
    assert state.is_file(), state
    tid = _proxy_tid(m.daemon_pid())
    assert tid, "no sbxfs-proxy thread"
    # a disk that never answers, for the proxy thread only: util_write_atomic's
    # open() of its temporary file blocks on a FIFO until a reader comes
    fifo = state.parent / f"network.json.tmp.{tid}"
    os.mkfifo(fifo, 0o600)
    try:
        denied = mkjob(a, "denied")
        start(denied, "python3 -", stdin=PYLIB + "show(o=raw(b'CONNECT denied.example.test:443 HTTP/1.1\\r\\n\\r\\n',"
                                                 " timeout=10))")
        assert wait_until(lambda: network(a)["events"], 10), "the denial was not recorded"
        r = py(b, "fast", "t0 = time.time()\n"
                          "o = raw(b'GET http://static.example.test/b HTTP/1.1\\r\\nHost: static.example.test\\r\\n\\r\\n',"
                          " timeout=8)\n"
                          "show(out=o, took=time.time() - t0)", timeout=40)
        assert r["out"].startswith("HTTP/1.1 200"), r
        assert r["took"] < 5, r
        assert wait_exit(denied, 20) == 0
        out = read_text(denied / "stdout")
        assert json.loads(out)["o"].startswith("HTTP/1.1 403"), out
        # the file is still written, by another thread
        assert wait_until(lambda: state.is_file() and "denied.example.test" in state.read_text(), 10)
    finally:
        if os.path.exists(fifo):  # a writer stuck in open() gets its reader
            fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
            time.sleep(0.5)
            os.close(fd)
        for p in (fifo, state):
            if os.path.lexists(p) and not os.path.isfile(p) and not os.path.islink(p):
                os.unlink(p)


@pytest.mark.timeout_s(90)
def test_a_flood_of_refused_connections_is_logged_in_brief(allow):
    """A job that opens 300 refused connections in a burst gets at most 10
    log lines a second for them, and one line counting the rest; its
    clients all still get their 403."""
    m, t, _ = allow
    r = py(t, "flood", "n = 0\n"
                       "t0 = time.time()\n"
                       "for i in range(300):\n"
                       "    n += raw(b'CONNECT denied%d.example.test:443 HTTP/1.1\\r\\n\\r\\n' % i)"
                       ".startswith(b'HTTP/1.1 403')\n"
                       "show(n=n, took=time.time() - t0)", timeout=60)
    assert r["n"] == 300, r

    def logged():
        """(403 lines logged, 403s counted in the summary lines)"""
        lines = sum(1 for ln in m.log.splitlines() if "proxy: 403" in ln)
        return lines, sum(int(x) for x in re.findall(r"proxy: (\d+) more such lines not logged", m.log))

    # the next scan logs the count of a second that has ended
    wait_until(lambda: sum(logged()) >= 300, 10)
    lines, counted = logged()
    assert lines <= 10 * (int(r["took"]) + 2), f"{lines} lines in {r['took']:.1f} s"
    assert lines + counted >= 300, (lines, counted)


HOLD_MANY = r'''
while not os.path.exists("go"):
    time.sleep(0.05)
socks = []
for i in range(30):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(P)
    except BlockingIOError:
        pass
    socks.append(s)
def alive(s):
    try:
        return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True  # connected, nothing said: the proxy holds it
    except OSError:
        return False
time.sleep(2)  # the proxy has accepted (or refused: closed) every one
print(json.dumps({"alive": sum(map(alive, socks))}), flush=True)
t0 = time.time()
while not os.path.exists("stop") and time.time() - t0 < 12:
    time.sleep(0.05)
'''


@pytest.mark.timeout_s(180)
def test_one_users_sandboxes_cannot_take_the_whole_proxy(sbxfs):
    """Connections are capped per sandbox, per user and in all, the caps
    derived from the daemon's descriptor limit (lowered here): three
    sandboxes of one user holding 30 idle connections each get the user's
    cap between them, the refusal is logged, and another user's sandbox is
    still served."""
    import resource
    m = sbxfs(config={"network": {"mode": "allowlist", "allow_domains": ["static.example.test"]}})
    alice = [acquire(m, "alice", f"t{i}") for i in range(3)]
    bob = acquire(m, "bob", "t")
    pid = m.proc.pid
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    jobs = []
    try:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (2048, old[1]))
        time.sleep(0.3)  # the daemon reads its limit again at most every 100 ms
        shares = sbxutil.fd_shares(2048)
        per_sbx, per_user = shares["proxy_connections_sandbox"], shares["proxy_connections_user"]
        assert per_sbx < 30 and per_user < 3 * per_sbx and per_user < shares["proxy_connections"]  # the user's binds  # the user cap binds
        for i, t in enumerate(alice):
            j = mkjob(t, "hold")
            start(j, "python3 -", stdin=PYLIB + HOLD_MANY)
            jobs.append(j)
        assert wait_until(lambda: all(jstatus(j)["state"] == "running" for j in jobs), 20)
        for i in range(3):
            (m.workspace_data("alice", f"t{i}") / "go").write_text("")
        outs = [m.thread_data("alice", f"t{i}") / "jobs" / "hold" / "stdout" for i in range(3)]
        assert wait_until(lambda: all('"alive"' in o.read_text() for o in outs), 30), [o.read_text() for o in outs]
        alive = [json.loads(o.read_text())["alive"] for o in outs]
        assert max(alive) <= per_sbx and sum(alive) == per_user, (alive, per_sbx, per_user)
        got = sbxutil.parse_metrics(read_text(m.mnt / ".metrics"))
        for k, v in shares.items():
            if k.startswith("proxy"):
                assert got['sbxfs_fds_budget{share="%s"}' % k] == v, (k, got)
        assert got["sbxfs_proxy_connections"] == per_user, got
        assert got['sbxfs_budget_refusals_total{share="proxy",cap="user"}'] >= 1, got
        assert got['sbxfs_budget_refusals_total{share="proxy",cap="sandbox"}'] >= 1, got
        assert re.search(r"alice/t\d: refused: \d+ proxy connections would pass the %d allowed a user \(ENFILE"
                         % per_user, m.log), m.log[-3000:]
        # while alice holds all she may, bob's sandbox is served
        r = py(bob, "served", "show(a=raw(b'CONNECT api.example.test:443 HTTP/1.1\\r\\n\\r\\n'))")
        assert r["a"].startswith("HTTP/1.1 403"), r
    finally:
        for i in range(3):
            (m.workspace_data("alice", f"t{i}") / "stop").write_text("")
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
    for j in jobs:
        assert wait_exit(j, 30) == 0, read_text(j / "stderr")
