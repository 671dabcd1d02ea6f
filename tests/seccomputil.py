# SPDX-License-Identifier: MIT
"""The sandboxes' seccomp policy seen from inside and from dockerd, for the
tests of every provider (test_security.py, test_containers.py,
test_docker.py):

    path = seccomputil.build_probe(tmp_dir)       # tests/probes/seccomp_probe.c, static
    res = seccomputil.parse(job_stdout)           # {probe: "OK" | errno name}
    assert seccomputil.problems(res) == []        # what the policy promises
    ours = seccomputil.oci_seccomp(container_id)  # the filter runc was given
    assert seccomputil.looser(ours, docker) == []

The probe only creates sockets (and closes them): it never connects, binds
or sends, so nothing reaches the hypervisor's side of vsock."""

import glob
import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

PROBE_SRC = Path(__file__).resolve().parent / "probes" / "seccomp_probe.c"
GCC = shutil.which("gcc")

ALLOWED = {socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK}
AF_PACKET, AF_VSOCK, AF_ALG = 17, 40, 38


def build_probe(dest_dir):
    """Compile the probe, static, into dest_dir; its path."""
    out = Path(dest_dir) / "seccomp_probe"
    r = subprocess.run([GCC, "-static", "-O2", "-o", str(out), str(PROBE_SRC)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    os.chmod(out, 0o755)
    return out


def parse(out):
    res = {}
    for line in out.splitlines():
        k, _, v = line.partition(" ")
        res[k] = v
    return res


def problems(res):
    """What the probe's results break of the policy (filter.h), one line each."""
    bad = []

    def want(key, *ok):
        got = res.get(key)
        if got not in ok:
            bad.append(f"{key}: {got} (want {' or '.join(ok)})")

    for f in range(64):
        for t in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET, socket.SOCK_RAW):
            if f not in ALLOWED:
                want(f"family.{f}.{t}", "EAFNOSUPPORT")
        if f not in ALLOWED:
            want(f"pair.{f}", "EAFNOSUPPORT")
    for key in ("family.1.1", "family.1.2", "family.1.5", "family.2.1", "family.2.2", "pair.1",
                "inet_stream_flags", "netlink_route"):
        want(key, "OK")
    if socket.has_ipv6 and os.path.exists("/proc/net/if_inet6"):
        want("family.10.1", "OK")
    want("inet_packet", "EAFNOSUPPORT")  # socket(AF_INET, SOCK_PACKET) is a packet socket
    for f in (socket.AF_UNIX, socket.AF_INET, AF_PACKET, AF_VSOCK):
        want(f"hi.{f}", "EAFNOSUPPORT")  # (1 << 32) | family: the kernel reads the low 32 bits
    for f in (AF_PACKET, AF_VSOCK):
        want(f"x32.socket.{f}", "EAFNOSUPPORT")
    for f in (socket.AF_UNIX, socket.AF_INET):
        want(f"x32.socket.{f}", "OK", "ENOSYS")  # ENOSYS: a kernel without the x32 ABI
    if res.get("i386") != "UNAVAILABLE":
        for f in (AF_PACKET, AF_VSOCK, AF_ALG):
            want(f"i386.socket.{f}", "EAFNOSUPPORT")
        for f in (socket.AF_UNIX, socket.AF_INET, AF_VSOCK):
            want(f"i386.socketcall.{f}", "EAFNOSUPPORT")
        want("i386.socket.2", "OK")
        want("i386.socketpair", "EAFNOSUPPORT")
        want("i386.unshare", "EPERM")
    for name in ("mbind", "set_mempolicy", "get_mempolicy", "migrate_pages", "move_pages", "name_to_handle_at",
                 "pkey_alloc", "unshare0", "ptrace", "io_uring_setup", "personality_norandom"):
        want(f"call.{name}", "EPERM")
    for name in ("memfd_secret", "modify_ldt", "clone3", "fchmodat2"):
        want(f"call.{name}", "ENOSYS")
    for name in ("personality_query", "getpid", "fork"):
        want(f"call.{name}", "OK")
    return bad


# --------------------------------------------------------------------------
# the profile runc was given, and Docker's own


def oci_seccomp(cid, timeout=10):
    """linux.seccomp of a running container's OCI bundle (what dockerd
    resolved its profile to, for this container's capabilities)."""
    pats = [f"/run/docker/containerd/daemon/io.containerd.runtime.v*.task/moby/{cid}/config.json",
            f"/run/containerd/io.containerd.runtime.v*.task/moby/{cid}/config.json",
            f"/var/run/docker/containerd/daemon/io.containerd.runtime.v*.task/moby/{cid}/config.json"]
    for p in pats:
        for f in glob.glob(p):
            with open(f) as fh:
                return json.load(fh)["linux"]["seccomp"]
    raise AssertionError(f"no OCI bundle for container {cid} under /run")


def kernel_names():
    """The x86-64, i386 and x32 system call names of this machine's headers."""
    names = set()
    for f in glob.glob("/usr/include/*/asm/unistd_*.h") + glob.glob("/usr/include/asm/unistd_*.h"):
        with open(f) as fh:
            names |= set(re.findall(r"#define __NR_(\w+)\s", fh.read()))
    return names


def _match(arg, vals):
    v = vals[arg["index"]]
    a, b, op = arg["value"], arg.get("valueTwo", 0), arg["op"]
    return {"SCMP_CMP_EQ": v == a, "SCMP_CMP_NE": v != a, "SCMP_CMP_GT": v > a, "SCMP_CMP_GE": v >= a,
            "SCMP_CMP_LT": v < a, "SCMP_CMP_LE": v <= a, "SCMP_CMP_MASKED_EQ": (v & a) == b}[op]


def allows(prof, name, vals):
    """Does the profile let `name` through with arguments vals (a0..a5)?
    runc ORs comparisons of one argument: a rule with two is read that way."""
    if prof["defaultAction"] == "SCMP_ACT_ALLOW":
        raise AssertionError("a deny-list profile: not what either side uses")
    for rule in prof.get("syscalls") or []:
        if rule["action"] != "SCMP_ACT_ALLOW" or name not in rule["names"]:
            continue
        args = rule.get("args") or []
        idx = [a["index"] for a in args]
        if len(set(idx)) < len(idx):
            if not args or any(_match(a, vals) for a in args):
                return True
        elif all(_match(a, vals) for a in args):
            return True
    return False


ARG0 = sorted(set(range(64)) | {0x8, 0x20000, 0x20008, 0x40000, 0xffffffff, (1 << 32) | 2, (1 << 32) | 40,
                                 (1 << 64) - 1, 0x3d0f00, 0x11} | {f | 0x11 for f in (
                                     0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
                                     0x40000000)})
ARG1 = [0, 1, 2, 3, 5, 10, 0x80001, 0x80802, 0x10008]


def looser(ours, docker):
    """Calls (with arguments) Docker's default denies and our profile lets
    through; [] when ours is nowhere looser."""
    conditional = {n for p in (ours, docker) for r in p.get("syscalls") or [] if r.get("args")
                   for n in r["names"]}
    names = kernel_names() | {n for p in (ours, docker) for r in p.get("syscalls") or [] for n in r["names"]}
    out = []
    for name in sorted(names):
        samples = [(a0, a1) for a0 in ARG0 for a1 in ARG1] if name in conditional else [(0, 0)]
        for a0, a1 in samples:
            vals = [a0, a1, 0, 0, 0, 0]
            if allows(ours, name, vals) and not allows(docker, name, vals):
                out.append(f"{name}({a0:#x}, {a1:#x})")
    return out
