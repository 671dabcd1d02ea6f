#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""
network_bench.py - the network policy's benchmarks (`make bench-network`).

Standalone (stdlib only, run as root after `make`); everything stays on this
machine.  Three rows, each side by side with its peer in the same run, rounds
interleaved so that load on the host moves both sides alike:

  events   latency from a request the proxy blocks (the job's send(), clock
           read inside the sandbox) to poll(2) on `events` waking on the host
           (same kernel clock): p50 / p99 / max over N blocked requests.
  proxy    an allowed 100 MiB plain-HTTP download through the approval proxy
           (curl in an allowlist sandbox, HTTP_PROXY from its environment)
           against the same download made directly by curl on the host;
           ratio = proxied / direct (goal >= 0.9).
  relay    the proxy thread's CPU seconds per GiB relayed (1 GiB downloads
           through it) against one loopback TCP hop carrying the same bytes
           (sendfile into the socket, splice out to /dev/null): the proxy
           does one hop's receive and the next one's send (goal <= 1.2x).
  open     the same download from an open-mode sandbox against the host's
           own curl, from a server in a network namespace the bench makes
           (198.51.100.1 on a veth pair: a "public" host): through the
           gateway (network.gateway on), through a pasta of its own (off),
           and the two side by side, interleaved (goal >= 0.8x).

The server answers GET /big/N with N bytes by sendfile(2) from a file in the
page cache, so the server side costs little and the figures show the path.

    bench/network_bench.py [--rounds 5] [--size-mib 100] [--events 50] [--out FILE]

Cleans up what it made (daemon by pid, mount, netns, veth, scratch dir) also
on errors and Ctrl-C.
"""

import argparse
import fcntl
import json
import os
import platform
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SBXFS = os.environ.get("SBXFS_BIN", os.path.join(REPO, "sbxfs"))
MiB = 1 << 20
LOCK = "/run/lock/sbxfs-test-netlab.lock"
T0 = time.monotonic()

SERVER = r"""
import os, socket, sys, threading
addr, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
def serve(c):
    try:
        req = b""
        while b"\r\n\r\n" not in req:
            b = c.recv(4096)
            if not b:
                return
            req += b
        n = int(req.split(b" ")[1].split(b"/")[-1])  # more than the file: it again and again
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % n)
        sent = 0
        while sent < n:
            off = sent % size
            sent += os.sendfile(c.fileno(), fd, off, min(n - sent, size - off))
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port)); s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


# The peer of the relay row: one loopback TCP hop carrying N bytes with the
# cheapest calls at both ends (sendfile from the page cache into the socket,
# splice from the socket through a pipe into /dev/null), two threads of one
# process; it prints that process's CPU seconds.
HOP = r"""
import fcntl, os, resource, socket, sys, threading
path, n = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(1)
def send():
    c = socket.create_connection(ls.getsockname())
    sent = 0
    while sent < n:
        off = sent % size
        sent += os.sendfile(c.fileno(), fd, off, min(n - sent, size - off))
    c.close()
t = threading.Thread(target=send)
t.start()
c, _ = ls.accept()
r, w = os.pipe()
fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
null = os.open("/dev/null", os.O_WRONLY)
got = 0
while True:
    k = os.splice(c.fileno(), w, 1 << 20)
    if not k:
        break
    got += k
    while k:
        k -= os.splice(r, null, k)
t.join()
u = resource.getrusage(resource.RUSAGE_SELF)
print(got, u.ru_utime + u.ru_stime)
"""


def log(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T0, msg), file=sys.stderr, flush=True)


def sh(*args, check=True, timeout=60):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r


class Bench:
    def __init__(self, args):
        self.args = args
        self.base = tempfile.mkdtemp(prefix="sbxfs-netbench-", dir="/var/tmp")
        os.chmod(self.base, 0o755)
        self.procs = []
        self.daemons = []
        self.mounts = []
        self.netns = []
        self.links = []
        self.lockf = None
        self.blob = os.path.join(self.base, "blob")
        with open(self.blob, "wb") as f:
            chunk = os.urandom(MiB)
            for _ in range(args.size_mib):
                f.write(chunk)
        self.addr = f"127.{os.getpid() % 200 + 20}.77.1"

    # ---- helpers
    def server(self, addr, port, netns=None):
        cmd = [sys.executable, "-c", SERVER, addr, str(port), self.blob]
        if netns:
            cmd = ["ip", "netns", "exec", netns] + cmd
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(p)
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError("the bench server did not start")

    def daemon_of(self, t):
        return self.daemons[self.mounts.index(t.split("/bench/")[0])].pid

    def mount(self, name, network):
        d = os.path.join(self.base, name)
        os.makedirs(os.path.join(d, "mnt"))
        conf = os.path.join(d, "mount.conf")
        with open(conf, "w") as f:
            # no spares (pool.prewarm): each would be one more pasta in the figures
            json.dump({"use": "local", "state_dir": os.path.join(d, "state"), "network": network,
                       "pool": {"prewarm": 0}}, f)
        logf = open(os.path.join(d, "sbxfs.log"), "w")
        p = subprocess.Popen([SBXFS, "-f", "-c", conf, os.path.join(d, "mnt")], stdout=logf, stderr=logf)
        self.daemons.append(p)
        mnt = os.path.join(d, "mnt")
        self.mounts.append(mnt)
        for _ in range(200):
            try:
                os.statvfs(mnt)
                with open("/proc/mounts") as m:
                    if f" {mnt} fuse" in m.read():
                        break
            except OSError:
                pass
            time.sleep(0.05)
        else:
            raise RuntimeError(f"sbxfs did not mount {mnt}")
        t = os.path.join(mnt, "bench", "t1")
        os.makedirs(t)
        with open(os.path.join(t, "ready")) as f:  # acquire: async answers mkdir before
            f.read()
        return t

    def job(self, t, name, cmd, stdin=None, wait=True, timeout=600):
        j = os.path.join(t, "jobs", name)
        os.mkdir(j)
        if stdin is not None:
            with open(os.path.join(j, "stdin"), "w") as f:
                f.write(stdin)
        with open(os.path.join(j, "cmd"), "w") as f:
            f.write(cmd + "\n")
        if not wait:
            return j
        r = subprocess.run(["cat", os.path.join(j, "exit")], capture_output=True, timeout=timeout)
        with open(os.path.join(j, "stdout")) as f:
            out = f.read()
        with open(os.path.join(j, "stderr")) as f:
            err = f.read()
        return int(r.stdout or b"255"), out, err

    @staticmethod
    def curl_speed(out):
        code, speed = out.strip().split()[-2:]
        if code != "200":
            raise RuntimeError(f"download failed: {out!r}")
        return float(speed)

    @staticmethod
    def cpu(pid):
        """user+system CPU seconds of a process so far (0 when it is gone)."""
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError):
            return 0.0

    def host_curl(self, url, helpers):
        """(bytes/s, CPU seconds of curl and the helper processes)."""
        before = [self.cpu(p) for p in helpers]
        r = sh("/usr/bin/time", "-f", "CPU %U %S", "curl", "-s", "-o", "/dev/null", "--noproxy", "*", "-w",
               "%{http_code} %{speed_download}", url, timeout=300)
        cpu = sum(float(x) for x in r.stderr.strip().splitlines()[-1].split()[1:3])
        cpu += sum(self.cpu(p) - b for p, b in zip(helpers, before))
        return self.curl_speed(r.stdout), cpu

    def sandbox_curl(self, t, name, url, helpers):
        before = [self.cpu(p) for p in helpers]
        code, out, err = self.job(t, name, f"/usr/bin/time -f 'CPU %U %S' curl -s -o /dev/null "
                                           f"-w '%{{http_code}} %{{speed_download}}' {url}")
        if code:
            raise RuntimeError(f"job {name}: {err}")
        cpu = sum(float(x) for x in err.strip().splitlines()[-1].split()[1:3])
        cpu += sum(self.cpu(p) - b for p, b in zip(helpers, before))
        return self.curl_speed(out), cpu

    # ---- rows
    def row_events(self, t):
        n = self.args.events
        ws = os.path.join(t, "workspace")
        script = f"""
import os, socket, time
for i in range({n}):
    while not os.path.exists("/mnt/user-data/workspace/go%d" % i):
        time.sleep(0.0005)
    s = socket.create_connection(("127.0.0.1", 3128))
    t = time.time()
    s.sendall(b"CONNECT h%d.bench.test:443 HTTP/1.1\\r\\n\\r\\n" % i)
    s.recv(4096)
    s.close()
    print(i, repr(t), flush=True)
"""
        j = self.job(t, "events", "python3 -", stdin=script, wait=False)
        wakes = {}
        for i in range(n):
            fd = os.open(os.path.join(t, "events"), os.O_RDONLY | os.O_NONBLOCK)
            p = select.poll()
            p.register(fd, select.POLLIN)
            if p.poll(0):
                raise RuntimeError("an event was pending before the request")
            with open(os.path.join(ws, f"go{i}"), "w"):
                pass
            if not p.poll(10000):
                raise RuntimeError("poll did not wake")
            wakes[i] = time.time()
            ev = json.loads(os.read(fd, 65536))
            assert ev["host"] == f"h{i}.bench.test", ev
            os.close(fd)
        subprocess.run(["cat", os.path.join(j, "exit")], capture_output=True, timeout=60)
        with open(os.path.join(j, "stdout")) as f:
            sent = {int(a): float(b) for a, b in (line.split() for line in f if line.strip())}
        lat = sorted((wakes[i] - sent[i]) * 1000 for i in range(n))
        return {"n": n, "p50_ms": lat[n // 2], "p99_ms": lat[min(n - 1, int(n * 0.99))], "min_ms": lat[0],
                "max_ms": lat[-1]}

    def row_throughput(self, name, direct_url, t, sandbox_url, direct_helpers, sandbox_helpers):
        """Interleaved rounds; also the CPU seconds per GiB the whole path
        costs (curl + server + the daemon or pasta): a figure that other load
        on the host moves much less than the throughput."""
        size = self.args.size_mib * MiB
        direct, sbx, dcpu, scpu = [], [], [], []
        for r in range(self.args.rounds):
            # interleaved, alternating which side goes first
            sides = ["direct", "sandbox"]
            if r % 2:
                sides.reverse()
            for side in sides:
                if side == "direct":
                    speed, cpu = self.host_curl(f"{direct_url}/big/{size}", direct_helpers)
                    direct.append(speed)
                    dcpu.append(cpu / (size / (1 << 30)))
                else:
                    speed, cpu = self.sandbox_curl(t, f"{name}{r}", f"{sandbox_url}/big/{size}", sandbox_helpers)
                    sbx.append(speed)
                    scpu.append(cpu / (size / (1 << 30)))
            log(f"{name} round {r}: direct {direct[-1] / MiB:.0f} MiB/s ({dcpu[-1]:.2f} CPU s/GiB), "
                f"sandbox {sbx[-1] / MiB:.0f} MiB/s ({scpu[-1]:.2f} CPU s/GiB)")
        med_d, med_s = statistics.median(direct), statistics.median(sbx)
        return {"direct_mib_s": [med_d / MiB, min(direct) / MiB, max(direct) / MiB],
                "sandbox_mib_s": [med_s / MiB, min(sbx) / MiB, max(sbx) / MiB], "ratio": med_s / med_d,
                "direct_cpu_s_per_gib": statistics.median(dcpu), "sandbox_cpu_s_per_gib": statistics.median(scpu)}

    def row_open_vs_pasta(self, url, tg, tp, ghelpers, phelpers):
        """The gateway's path against a pasta per sandbox, rounds interleaved
        (alternating which goes first)."""
        size = self.args.size_mib * MiB
        g, p = [], []
        for r in range(self.args.rounds):
            sides = ["gw", "pasta"] if r % 2 == 0 else ["pasta", "gw"]
            for side in sides:
                if side == "gw":
                    g.append(self.sandbox_curl(tg, f"vg{r}", f"{url}/big/{size}", ghelpers)[0])
                else:
                    p.append(self.sandbox_curl(tp, f"vp{r}", f"{url}/big/{size}", phelpers)[0])
            log(f"gateway vs pasta round {r}: gateway {g[-1] / MiB:.0f} MiB/s, pasta {p[-1] / MiB:.0f} MiB/s")
        mg, mp = statistics.median(g), statistics.median(p)
        return {"gateway_mib_s": [mg / MiB, min(g) / MiB, max(g) / MiB],
                "pasta_mib_s": [mp / MiB, min(p) / MiB, max(p) / MiB], "ratio": mg / mp}

    @staticmethod
    def thread_cpu(pid, comm):
        """CPU seconds so far of pid's threads named comm."""
        total = 0.0
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if f.read().strip() != comm:
                        continue
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
                total += (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, IndexError):
                pass
        return total

    def row_relay(self, t, sandbox_url):
        """The proxy's CPU per GiB relayed (its thread's ticks over a download
        of relay_mib through it) against one loopback TCP hop (HOP): the proxy
        does one hop's receive and the next one's send, so with no copy
        through user space it costs about one hop.  Interleaved rounds."""
        n = self.args.relay_mib * MiB
        gib = n / (1 << 30)
        daemon = self.daemon_of(t)
        proxy, whole, hop = [], [], []
        for r in range(self.args.rounds):
            for side in (["proxy", "hop"] if r % 2 == 0 else ["hop", "proxy"]):
                if side == "proxy":
                    p0, d0 = self.thread_cpu(daemon, "sbxfs-proxy"), self.cpu(daemon)
                    self.sandbox_curl(t, f"relay{r}", f"{sandbox_url}/big/{n}", [])
                    proxy.append((self.thread_cpu(daemon, "sbxfs-proxy") - p0) / gib)
                    whole.append((self.cpu(daemon) - d0) / gib)
                else:
                    out = sh(sys.executable, "-c", HOP, self.blob, str(n), timeout=300).stdout.split()
                    if int(out[0]) != n:
                        raise RuntimeError(f"the hop carried {out[0]} of {n} bytes")
                    hop.append(float(out[1]) / gib)
            log(f"relay round {r}: proxy thread {proxy[-1]:.3f} CPU s/GiB (daemon {whole[-1]:.3f}), "
                f"one loopback hop {hop[-1]:.3f} CPU s/GiB")
        return {"mib": self.args.relay_mib, "proxy_cpu_s_per_gib": statistics.median(proxy),
                "daemon_cpu_s_per_gib": statistics.median(whole), "hop_cpu_s_per_gib": statistics.median(hop),
                "proxy_range": [min(proxy), max(proxy)], "hop_range": [min(hop), max(hop)],
                "ratio": statistics.median(proxy) / statistics.median(hop)}

    def netns_server(self):
        self.lockf = open(LOCK, "w")
        fcntl.flock(self.lockf, fcntl.LOCK_EX)
        sfx = f"{os.getpid() % 100000:05d}"
        ns, link = f"sbxbn{sfx}", f"sbxb{sfx}"
        sh("ip", "netns", "add", ns)
        self.netns.append(ns)
        sh("ip", "link", "add", link, "type", "veth", "peer", "name", "veth0", "netns", ns)
        self.links.append(link)
        sh("ip", "addr", "add", "198.51.100.254/24", "dev", link)
        sh("ip", "link", "set", link, "up")
        sh("ip", "-n", ns, "addr", "add", "198.51.100.1/24", "dev", "veth0")
        sh("ip", "-n", ns, "link", "set", "veth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", "198.51.100.254")
        self.server("0.0.0.0", 8080, netns=ns)
        return "http://198.51.100.1:8080"

    def run(self):
        res = {}
        self.server(self.addr, 80)
        log(f"server on {self.addr}:80, {self.args.size_mib} MiB blob")
        t = self.mount("allow", {"mode": "allowlist", "approval": "prompt", "allow_domains": ["bench.example.test"],
                                 "allow_private_destinations": True, "hosts": {"bench.example.test": self.addr}})
        if "events" in self.args.only:
            log("events: poll wake-up latency")
            res["events"] = self.row_events(t)
        srv = self.procs[0].pid
        if "proxy" in self.args.only:
            log("proxy: allowed download through the proxy vs direct")
            res["proxy"] = self.row_throughput("proxy", f"http://{self.addr}", t, "http://bench.example.test",
                                               [srv], [srv, self.daemon_of(t)])
        if "relay" in self.args.only:
            log(f"relay: the proxy's CPU per GiB relayed vs one loopback TCP hop ({self.args.relay_mib} MiB)")
            res["relay"] = self.row_relay(t, "http://bench.example.test")
        if "open" in self.args.only:
            url = self.netns_server()
            srv2 = self.procs[-1].pid
            t2 = self.mount("open", {"mode": "open"})
            t3 = self.mount("openpasta", {"mode": "open", "gateway": False})
            with open(os.path.join(t2, "status")) as f:
                gw = json.load(f)["gateway_pasta_pid"]
            with open(os.path.join(t3, "status")) as f:
                pasta = json.load(f)["pasta_pid"]
            log("open: download from a public host, open sandbox (gateway) vs open sandbox (its own pasta) vs the host")
            res["open"] = self.row_throughput("open", url, t2, url, [srv2], [srv2, gw])
            res["open_pasta"] = self.row_throughput("openp", url, t3, url, [srv2], [srv2, pasta])
            res["open_vs_pasta"] = self.row_open_vs_pasta(url, t2, t3, [srv2, gw], [srv2, pasta])
        return res

    def cleanup(self):
        # the servers first: one started by `ip netns exec` lives in a mount
        # namespace of its own, copied from ours with the sbxfs mounts in it,
        # and a daemon whose mount is still referenced there does not exit
        # at fusermount -u (it was killed after 30 s, its sandbox left behind)
        for p in self.procs:
            p.kill()
            p.wait(10)
        for mnt in self.mounts:
            subprocess.run(["fusermount3", "-u", mnt], capture_output=True, timeout=60)
        for p in self.daemons:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        for mnt in self.mounts:
            subprocess.run(["fusermount3", "-uz", mnt], capture_output=True, timeout=30)
        for link in self.links:
            sh("ip", "link", "del", link, check=False)
        for ns in self.netns:
            sh("ip", "netns", "del", ns, check=False)
        if self.lockf:
            fcntl.flock(self.lockf, fcntl.LOCK_UN)
            self.lockf.close()
        shutil.rmtree(self.base, ignore_errors=True)


def table(res, args):
    load = os.getloadavg()
    lines = [f"# sbxfs network bench, {time.strftime('%Y-%m-%d %H:%M:%S')}",
             "",
             f"kernel {platform.release()}, {os.cpu_count()} CPUs, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
             f"{args.rounds} interleaved rounds, {args.size_mib} MiB downloads (curl, plain HTTP, sendfile server)",
             "",
             "| row | sbxfs | peer | ratio |",
             "|---|---|---|---|"]
    if "events" in res:
        e = res["events"]
        lines.append(f"| events: blocked request -> poll(2) wakes (n={e['n']}) | p50 {e['p50_ms']:.2f} ms, "
                     f"p99 {e['p99_ms']:.2f} ms, max {e['max_ms']:.2f} ms | - | - |")
    for k, label, peer in (("proxy", "allowed download through the proxy", "direct from the host"),
                           ("open", "open-mode sandbox (gateway) from a public host", "the host itself"),
                           ("open_pasta", "open-mode sandbox (its own pasta, gateway: false) from a public host",
                            "the host itself")):
        if k in res:
            r = res[k]
            s, d = r["sandbox_mib_s"], r["direct_mib_s"]
            lines.append(f"| {label} | {s[0]:.0f} MiB/s [{s[1]:.0f}-{s[2]:.0f}] | {peer}: {d[0]:.0f} MiB/s "
                         f"[{d[1]:.0f}-{d[2]:.0f}] | {r['ratio']:.2f}x |")
            lines.append(f"| {label}: CPU of the whole path (curl, server, {'daemon' if k == 'proxy' else 'pasta'}) | "
                         f"{r['sandbox_cpu_s_per_gib']:.2f} CPU s/GiB | {r['direct_cpu_s_per_gib']:.2f} CPU s/GiB | "
                         f"{r['direct_cpu_s_per_gib'] / r['sandbox_cpu_s_per_gib']:.2f}x |")
    if "open_vs_pasta" in res:
        r = res["open_vs_pasta"]
        lines.append(f"| open-mode sandbox through the gateway | {r['gateway_mib_s'][0]:.0f} MiB/s "
                     f"[{r['gateway_mib_s'][1]:.0f}-{r['gateway_mib_s'][2]:.0f}] | a pasta of its own: "
                     f"{r['pasta_mib_s'][0]:.0f} MiB/s [{r['pasta_mib_s'][1]:.0f}-{r['pasta_mib_s'][2]:.0f}] | "
                     f"{r['ratio']:.2f}x (goal >= 0.8x) |")
    if "relay" in res:
        r = res["relay"]
        lines.append(f"| proxy relay: its thread's CPU per GiB ({r['mib']} MiB downloads; whole daemon "
                     f"{r['daemon_cpu_s_per_gib']:.3f}) | {r['proxy_cpu_s_per_gib']:.3f} CPU s/GiB "
                     f"[{r['proxy_range'][0]:.3f}-{r['proxy_range'][1]:.3f}] | one loopback TCP hop (sendfile -> "
                     f"splice to /dev/null): {r['hop_cpu_s_per_gib']:.3f} CPU s/GiB "
                     f"[{r['hop_range'][0]:.3f}-{r['hop_range'][1]:.3f}] | {r['ratio']:.2f}x (goal <= 1.2x) |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size-mib", type=int, default=100)
    ap.add_argument("--events", type=int, default=50)
    ap.add_argument("--relay-mib", type=int, default=1024)
    ap.add_argument("--only", default="events,proxy,relay,open")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "network.md"))
    args = ap.parse_args()
    args.only = args.only.split(",")
    if os.geteuid() != 0:
        sys.exit("network_bench.py: must run as root")
    if not os.access(SBXFS, os.X_OK):
        sys.exit(f"network_bench.py: {SBXFS} not built (run make)")
    b = Bench(args)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
    try:
        res = b.run()
    finally:
        b.cleanup()
    text = table(res, args)
    print(text)
    print(json.dumps(res), file=sys.stderr)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
