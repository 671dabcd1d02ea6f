# SPDX-License-Identifier: MIT
"""Test servers for the network-policy tests (tests/test_network.py).

Everything stays on this machine:

* LoopbackHTTP / LoopbackTLS: servers on a random 127.x.y.z address of the
  host's loopback, on port 80 or 443 (the only ports the approval proxy lets
  through), named in mount.conf with `network.hosts` and reached with
  `network.allow_private_destinations: true`.  A random address per server
  keeps concurrent test runs apart.
* NetLab: two network namespaces made by the test itself, each joined to
  the host by a veth pair: "pub" with 198.51.100.1 (a TEST-NET address
  standing for a public host) and "priv" with a 10.x address standing for a
  private one, which also answers on 169.254.169.254 (the metadata
  address).  Each runs a TCP server (port 8080: answers its name) and a UDP
  echo (port 8081).  Set-up and tear-down hold a lock file, so two runs on
  one machine never fight over the addresses, and remove everything they
  made (servers by pid, links, namespaces).
"""

import fcntl
import http.server
import os
import random
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

LOCK = "/run/lock/sbxfs-test-netlab.lock"


def random_loopback():
    return f"127.{random.randint(16, 250)}.{random.randint(1, 250)}.{random.randint(1, 250)}"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _answer(self):
        srv = self.server
        srv.requests.append((self.command, self.path, dict(self.headers.items())))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if self.command == "POST" else b""
        if srv.delay:
            time.sleep(srv.delay)
        if self.path.startswith("/big/"):
            size = int(self.path.split("/")[2])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b"x" * (1 << 20)
            left = size
            while left > 0:
                n = min(left, len(chunk))
                self.wfile.write(chunk[:n])
                left -= n
            return
        out = f"{srv.name} {self.command} {self.path} {len(body)}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = do_HEAD = _answer


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512
    allow_reuse_address = True


class LoopbackHTTP:
    """An HTTP server on ADDR:80 of the host's loopback; .requests lists
    (method, path, headers) of every request it answered.  With tls (cert,
    key) it speaks HTTPS and .sni lists the names its ClientHellos gave;
    tls_curve limits its TLS 1.3 key exchange to that group."""

    def __init__(self, name, port=80, addr=None, delay=0.0, tls=None, tls_curve=None):
        self.addr = addr or random_loopback()
        self.port = port
        self.srv = _Server((self.addr, port), _Handler)
        self.srv.name = name
        self.srv.requests = []
        self.srv.delay = delay
        self.sni = []
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls[0], tls[1])
            if tls_curve:  # the only group it takes: a ClientHello whose key share is another gets a HelloRetryRequest
                ctx.set_ecdh_curve(tls_curve)
            ctx.sni_callback = lambda obj, sni, c: self.sni.append(sni)
            self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
        self.th = threading.Thread(target=self.srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self.th.start()

    @property
    def requests(self):
        return self.srv.requests

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
        self.th.join(5)


def make_cert(directory):
    key, crt = os.path.join(directory, "key.pem"), os.path.join(directory, "crt.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
                    "-days", "2", "-subj", "/CN=sbxfs-test", "-addext",
                    "subjectAltName=DNS:*.example.test,DNS:*.pypi.example,DNS:pypi.example"],
                   check=True, capture_output=True, timeout=60)
    return crt, key


class HostTCP:
    """A TCP server of the host (any address) that answers its name and
    counts connections."""

    def __init__(self, addr="127.0.0.1", family=socket.AF_INET, abstract=None):
        if abstract:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind("\0" + abstract)
            self.port = None
        else:
            self.sock = socket.socket(family)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((addr, 0))
            self.port = self.sock.getsockname()[1]
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.accepted = 0
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
            self.accepted += 1
            try:
                c.sendall(b"host\n")
            except OSError:
                pass
            c.close()

    def close(self):
        self.stop.set()
        self.th.join(5)
        self.sock.close()


SERVER = r"""
import socket, sys, threading
name = sys.argv[1]
# every socket listens before "ready" is printed: a test connects at once
t = socket.socket(socket.AF_INET6)
t.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("::", 8080)); t.listen(64)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("0.0.0.0", 8081))
b = socket.socket()
b.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
b.bind(("0.0.0.0", 8082)); b.listen(16)
def tcp():
    while True:
        c, a = t.accept()
        try:
            c.sendall((name + " " + a[0] + "\n").encode())
        except OSError:
            pass
        c.close()
def udp():
    while True:
        d, a = u.recvfrom(2048)
        u.sendto(name.encode() + b" " + d, a)
def big():
    chunk = b"x" * (1 << 20)
    while True:
        c, a = b.accept()
        def send(c=c):
            try:
                n = int(c.recv(64).decode().strip())
                while n > 0:
                    k = c.send(chunk[:min(n, len(chunk))]); n -= k
            except OSError:
                pass
            c.close()
        threading.Thread(target=send, daemon=True).start()
threading.Thread(target=udp, daemon=True).start()
threading.Thread(target=big, daemon=True).start()
print("ready", flush=True)
tcp()
"""


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r


class NetLab:
    PUB = "198.51.100.1"
    PUB_HOST = "198.51.100.254"
    PUB6 = "2001:db8:5b::1"  # a documentation address: public as far as the policy goes
    PUB6_HOST = "2001:db8:5b::fe"
    META = "169.254.169.254"

    def __init__(self):
        self.lockf = open(LOCK, "w")
        deadline = time.monotonic() + 120
        while True:
            try:
                fcntl.flock(self.lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError("another test run holds the netlab lock for 120 s")
                time.sleep(0.2)
        sfx = f"{os.getpid() % 100000:05d}"
        self.ns = {"pub": f"sbxtp{sfx}", "priv": f"sbxtq{sfx}"}
        self.links = {"pub": f"sbxp{sfx}", "priv": f"sbxq{sfx}"}
        octet = random.randint(16, 250)
        self.PRIV = f"10.213.{octet}.1"
        self.PRIV_HOST = f"10.213.{octet}.254"
        self.procs = []
        self.meta_route = False
        try:
            self._up("pub", self.PUB, self.PUB_HOST)
            self._up("priv", self.PRIV, self.PRIV_HOST)
            sh("ip", "-n", self.ns["priv"], "addr", "add", f"{self.META}/32", "dev", "veth0")
            sh("ip", "route", "add", f"{self.META}/32", "dev", self.links["priv"])
            self.meta_route = True
            for k in ("pub", "priv"):
                p = subprocess.Popen(["ip", "netns", "exec", self.ns[k], sys.executable, "-c", SERVER, k],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                self.procs.append(p)
                if p.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"the {k} test server did not start")
        except BaseException:
            self.close()
            raise

    def _up(self, k, addr, host_addr):
        ns, link = self.ns[k], self.links[k]
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", link, "type", "veth", "peer", "name", "veth0", "netns", ns)
        sh("ip", "addr", "add", f"{host_addr}/24", "dev", link)
        if k == "pub":  # IPv6 too (nodad: usable at once)
            sh("ip", "-6", "addr", "add", f"{self.PUB6_HOST}/64", "dev", link, "nodad")
            sh("ip", "-n", ns, "-6", "addr", "add", f"{self.PUB6}/64", "dev", "veth0", "nodad")
        sh("ip", "link", "set", link, "up")
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "veth0")
        sh("ip", "-n", ns, "link", "set", "veth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", host_addr)

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait(10)
        if self.meta_route:
            sh("ip", "route", "del", f"{self.META}/32", "dev", self.links["priv"], check=False)
        for k in ("pub", "priv"):
            sh("ip", "link", "del", self.links[k], check=False)
            sh("ip", "netns", "del", self.ns[k], check=False)
        fcntl.flock(self.lockf, fcntl.LOCK_UN)
        self.lockf.close()


def tmpdir():
    return tempfile.mkdtemp(prefix="sbxfs-netlab-")


def rmtree(d):
    shutil.rmtree(d, ignore_errors=True)
