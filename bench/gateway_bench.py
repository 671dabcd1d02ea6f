#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""
gateway_bench.py - what an open sandbox's network costs (issue 21 item 2).

Standalone (stdlib only, run as root after `make`).  For each of three
configurations, in interleaved rounds (the order rotates each round), a
daemon of its own makes N sandboxes (default 100) and the bench reads:

  * Pss of every process it started (the daemon, bubblewrap, the inits, and
    the pastas: the gateway's one, or one per sandbox), /proc/PID/smaps_rollup;
  * the kernel's own memory (/proc/meminfo Slab + KernelStack + PageTables +
    Percpu) after the first sandbox (the gateway is made with it) and after
    the N more: the veth pairs,
    namespaces, nftables tables, sockets;
  * root's inotify instances (anon_inode:inotify fds of uid-0 processes);
  * pasta processes.

  isolated       network.mode isolated: a namespace with lo only (the floor)
  open-gateway   network.mode open, network.gateway on (the default)
  open-pasta     network.mode open, network.gateway off (a pasta each)

The network's cost per open sandbox is the difference to `isolated`, per
sandbox.  The gateway's own cost (its pasta's Pss) is stated once.

    bench/gateway_bench.py [--n 100] [--rounds 3] [--only isolated,open-gateway,open-pasta]
                           [--out bench/results/gateway.md]
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SBXFS = os.environ.get("SBXFS_BIN", os.path.join(REPO, "sbxfs"))
CONFIGS = {
    "isolated": {"mode": "isolated"},
    "open-gateway": {"mode": "open"},
    "open-pasta": {"mode": "open", "gateway": False},
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def kernel_kib():
    want = ("Slab", "KernelStack", "PageTables", "Percpu")
    total = 0
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            if k in want:
                total += int(v.split()[0])
    return total


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def procs():
    """{pid: (uid, cmdline, comm)} of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{d}").st_uid
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{d}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        out[int(d)] = (uid, cmd, comm)
    return out


def root_inotify():
    n = 0
    for pid, (uid, _, _) in procs().items():
        if uid != 0:
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify":
                        n += 1
                except OSError:
                    pass
        except OSError:
            pass
    return n


def parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class Daemon:
    def __init__(self, base, name, network, n):
        self.dir = os.path.join(base, name)
        self.mnt = os.path.join(self.dir, "mnt")
        self.state = os.path.join(self.dir, "state")
        os.makedirs(self.mnt)
        conf = os.path.join(self.dir, "mount.conf")
        with open(conf, "w") as f:
            json.dump({"use": "local", "state_dir": self.state, "network": network, "replicas": n + 10,
                       "idle_timeout": 0, "resources": {"memory": "256m", "pids": 64}}, f)
        self.logf = open(os.path.join(self.dir, "sbxfs.log"), "w")
        self.proc = subprocess.Popen([SBXFS, "-f", "-c", conf, self.mnt], stdout=self.logf, stderr=self.logf)
        for _ in range(400):
            try:
                os.statvfs(self.mnt)
                with open("/proc/mounts") as m:
                    if f" {self.mnt} fuse" in m.read():
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"sbxfs did not mount {self.mnt}")

    def ours(self):
        """Pids this daemon started: itself, processes naming its state_dir
        (bubblewrap, pasta), and the sandboxes' inits and their children."""
        mine = {self.proc.pid}
        table = procs()
        for pid, (_, cmd, comm) in table.items():
            if self.state in cmd:
                mine.add(pid)
        # children of bubblewrap (the inits), by parent pid
        changed = True
        while changed:
            changed = False
            for pid in table:
                if pid in mine:
                    continue
                ppid = parent(pid)
                if ppid in mine and ppid != self.proc.pid:
                    mine.add(pid)
                    changed = True
        return mine, table

    def stop(self):
        subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True, timeout=120)
        try:
            self.proc.wait(180)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True, timeout=30)
        self.logf.close()


def one(base, name, network, n, rnd):
    d = Daemon(base, f"{name}-{rnd}", network, n)
    try:
        udir = os.path.join(d.mnt, "bench")
        os.mkdir(udir)
        # one sandbox first: the gateway (when there is one) exists from here
        first = os.path.join(udir, "t0")
        os.mkdir(first)
        with open(os.path.join(first, "ready")) as f:
            f.read()
        time.sleep(0.5)
        k0, ino0 = kernel_kib(), root_inotify()
        t0 = time.monotonic()
        dirs = []
        for i in range(1, n + 1):
            p = os.path.join(udir, f"t{i}")
            os.mkdir(p)
            dirs.append(p)
        for p in dirs:
            with open(os.path.join(p, "ready")) as f:
                f.read()
        made = time.monotonic() - t0
        time.sleep(1.0)  # the kernel's deferred frees of the creates settle
        k1, ino1 = kernel_kib(), root_inotify()
        mine, table = d.ours()
        pss = sum(pss_kib(p) for p in mine)
        pastas = [p for p in mine if table[p][2].startswith("pas")]
        # a pasta's short-lived clones carry its name: count each once
        pastas = [p for p in pastas if parent(p) not in pastas]
        pasta_pss = sum(pss_kib(p) for p in pastas)
        out = {"kernel_kib": k1 - k0, "pss_kib": pss * n / (n + 1), "pastas": len(pastas), "pasta_pss_kib": pasta_pss,
               "inotify": ino1 - ino0, "create_s": made}
    finally:
        t = time.monotonic()
        d.stop()
        log(f"  {name}: unmount {time.monotonic() - t:.2f} s")
    out["unmount_s"] = time.monotonic() - t
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(CONFIGS), help="configurations, comma-separated")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results", "gateway.md"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("gateway_bench.py: must run as root")
    base = tempfile.mkdtemp(prefix="sbxfs-gwbench-", dir="/var/tmp")
    os.chmod(base, 0o755)
    names = [k for k in CONFIGS if k in args.only.split(",")]
    res = {k: [] for k in names}
    try:
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                v = one(base, name, CONFIGS[name], args.n, r)
                res[name].append(v)
                log(f"round {r} {name}: kernel +{v['kernel_kib'] / args.n:.0f} KiB/sandbox, Pss "
                    f"{v['pss_kib'] / 1024:.1f} MiB in all, pastas {v['pastas']} ({v['pasta_pss_kib'] / 1024:.1f} MiB), "
                    f"root inotify +{v['inotify']}, {args.n} creates {v['create_s']:.1f} s")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    n = args.n

    def med(name, k):
        return statistics.median(x[k] for x in res[name])

    load = os.getloadavg()
    lines = [f"# sbxfs open-mode network cost, {time.strftime('%Y-%m-%d %H:%M:%S')}", "",
             f"kernel {platform.release()}, {os.cpu_count()} CPUs, load {load[0]:.2f}; {n} sandboxes per daemon, "
             f"{args.rounds} interleaved rounds, medians (`bench/gateway_bench.py --n {n} --rounds {args.rounds}`)", "",
             "| configuration | kernel memory per sandbox | Pss of everything started, per sandbox | pasta processes "
             "(Pss) | root inotify instances added | creates of the N | unmount with N+1 |",
             "|---|---|---|---|---|---|---|"]
    for name in names:
        lines.append(f"| {name} | {med(name, 'kernel_kib') / n:.0f} KiB | {med(name, 'pss_kib') / n:.0f} KiB | "
                     f"{med(name, 'pastas'):.0f} ({med(name, 'pasta_pss_kib') / 1024:.1f} MiB) | "
                     f"{med(name, 'inotify'):.0f} | {med(name, 'create_s'):.1f} s | {med(name, 'unmount_s'):.2f} s |")
    if "isolated" not in names or "open-gateway" not in names:
        text = "\n".join(lines) + "\n"
        print(text)
        with open(args.out, "w") as f:
            f.write(text)
        return
    iso_k, iso_p = med("isolated", "kernel_kib"), med("isolated", "pss_kib")
    lines += ["", "The network's cost per open sandbox (minus `isolated`, per sandbox):", ""]
    gw_pasta = med("open-gateway", "pasta_pss_kib")
    lines.append(f"* open-gateway: kernel {(med('open-gateway', 'kernel_kib') - iso_k) / n:.0f} KiB, processes "
                 f"{(med('open-gateway', 'pss_kib') - gw_pasta * n / (n + 1) - iso_p) / n:.0f} KiB (Pss, the "
                 f"gateway's pasta left out: it is counted once below)")
    if "open-pasta" in names:
        lines.append(f"* open-pasta: kernel {(med('open-pasta', 'kernel_kib') - iso_k) / n:.0f} KiB, processes "
                     f"{(med('open-pasta', 'pss_kib') - iso_p) / n:.0f} KiB (Pss)")
    lines.append(f"* the gateway's own cost, once: its pasta, {med('open-gateway', 'pasta_pss_kib') / 1024:.1f} MiB "
                 f"Pss, one process, one inotify instance")
    text = "\n".join(lines) + "\n"
    print(text)
    print(json.dumps(res), file=sys.stderr)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
