#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/skills_bench.py - the skills upload sync (skills/) against
re-uploading every file, what DeerFlow's upload-based providers do, through
the same HTTP API to the same server, in one run.

    /usr/bin/python3 bench/skills_bench.py [--rounds N] [--quick] [--latency-ms MS] [--out FILE]

Needs root (FUSE), ./sbxfs built (or SBXFS_BIN), bubblewrap and
/usr/bin/python3.  The servers are the test fakes (tests/fakes/), started
here and stopped by pid at the end, as are the sbxfs daemons.

The tree: 445 files in 15 skills of 3 directories each (1-9 KiB of text
each, 2.2 MiB in all), made once in a scratch directory.

Rows (opensandbox, then aio at a base_url), each measured in interleaved
rounds: round j runs sbxfs then the peer when j is even, the peer then sbxfs
when j is odd (ABAB), after one unrecorded warm-up round:

  initial   sbxfs: copy the tree into skills/rJ/ through the mount and
            fsync(skills/): it returns once the sandbox has every file
            | peer: copy the tree into a host directory rJ/ (the skills
            directory DeerFlow projects) and upload every file of it, one
            request a file on one kept-alive connection (DeerFlow's
            update_file(path, bytes) per file), to /mnt/skills-peer/rJ/
  change    sbxfs: append a line to one file of skills/rJ/ and fsync it
            | peer: the same append to its host copy, then upload the whole
            tree again (DeerFlow has no diff: a sync uploads every file)

Each side's requests and request bytes (bodies) are counted in the fake's
request log.

--latency-ms MS delays every file request (and, at a base_url, every
command) at the server by MS: a stand-in for the round trip to a server that
is not on this host (the fakes answer on loopback in well under 1 ms).

Ratio = peer's time / sbxfs's time in that round (above 1: sbxfs is
faster).  After each round, skills/rJ/ is removed and synced
(untimed), so the tree stays under the default skills.max_files.
"""

import argparse
import http.client
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "fakes"))
sys.path.insert(0, str(HERE))
from aiofake import AioFakeServer  # noqa: E402
from osfake import OpenSandboxFake  # noqa: E402
from remote_bench import Daemon  # noqa: E402

NFILES = 445


def make_tree(root):
    """445 files, 15 skills x 3 directories, deterministic contents."""
    total = 0
    for i in range(NFILES):
        p = root / f"skill{i % 15:02d}" / f"d{(i // 15) % 3}"
        p.mkdir(parents=True, exist_ok=True)
        size = 1024 + (i * 733) % 8192
        line = f"skill file {i}: " + "lorem ipsum dolor sit amet " * 4 + "\n"
        data = (line * (size // len(line) + 1))[:size].encode()
        (p / f"f{i:03d}.md").write_bytes(data)
        total += size
    return total


def tree_files(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


# ---- the peer: one request a file on one kept-alive connection ----------------------------


def multipart(parts):
    """parts: [(name, filename or None, bytes)] -> (body, content type)."""
    boundary = "----bench" + uuid.uuid4().hex
    out = []
    for name, filename, data in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out.append(f"--{boundary}\r\nContent-Disposition: {disp}\r\nContent-Type: application/octet-stream\r\n\r\n"
                   .encode() + data + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


class Uploader:
    """What DeerFlow's update_file(path, bytes) does over the server's API,
    through a kept-alive http.client connection (the SDKs use httpx)."""

    def __init__(self, kind, base):
        u = urllib.parse.urlsplit(base)
        self.kind = kind
        self.prefix = u.path.rstrip("/")
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)

    def put(self, path, data):
        if self.kind == "opensandbox":
            meta = json.dumps({"path": path, "mode": 644}).encode()
            body, ctype = multipart([("metadata", "metadata", meta), ("file", os.path.basename(path), data)])
            route = self.prefix + "/files/upload"
        else:
            body, ctype = multipart([("file", os.path.basename(path), data), ("path", None, path.encode())])
            route = self.prefix + "/v1/file/upload"
        self.conn.request("POST", route, body=body, headers={"Content-Type": ctype})
        r = self.conn.getresponse()
        text = r.read()
        if r.status != 200 or (self.kind == "aio" and not json.loads(text).get("success")):
            raise RuntimeError(f"upload {path}: {r.status} {text[:200]!r}")

    def close(self):
        self.conn.close()


def peer_upload_all(up, src, dest):
    for p in tree_files(src):
        up.put(f"{dest}/{p.relative_to(src)}", p.read_bytes())


# ---- the request logs -------------------------------------------------------------------


class Log:
    def __init__(self, kind, fake):
        self.kind, self.fake = kind, fake

    def mark(self):
        if self.kind == "opensandbox":
            return self.fake.requests()["seq"]
        return self.fake.api.get("/_fake/counters").json["total"]

    def since(self, seq):
        """(requests, upload requests, request body bytes) after seq."""
        if self.kind == "opensandbox":
            log = self.fake.requests(seq)["log"]
            return (len(log), sum(1 for e in log if e["route"] == "POST execd/files/upload"),
                    sum(e["req_bytes"] for e in log))
        log = self.fake.api.get(f"/_fake/requests?since={seq}").json["requests"]
        return (len(log), sum(1 for e in log if e["path"] == "/v1/file/upload"),
                sum(int((e.get("headers") or {}).get("Content-Length") or (e.get("headers") or {}).get(
                    "content-length") or 0) for e in log))


def fsync_path(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def timed(fn, log):
    seq = log.mark()
    t0 = time.perf_counter()
    fn()
    t = time.perf_counter() - t0
    reqs, ups, nbytes = log.since(seq)
    return {"s": t, "requests": reqs, "uploads": ups, "bytes": nbytes}


def bench_provider(kind, fake, daemon, base, src, rounds):
    sbx = daemon.mnt / "bench" / "t"
    os.makedirs(sbx)
    sk = sbx / "skills"
    log = Log(kind, fake)
    up = Uploader(kind, base)
    host = src.parent / f"host-{kind}"  # the peer's skills directory
    host.mkdir()
    rows = {"initial": [], "change": []}
    try:
        for j in range(rounds + 1):
            mine, peer_dest = sk / f"r{j}", f"/mnt/skills-peer/r{j}"

            def sbxfs_initial():
                shutil.copytree(src, mine)
                fsync_path(sk)

            def peer_initial():
                shutil.copytree(src, host / f"r{j}")
                peer_upload_all(up, host / f"r{j}", peer_dest)

            rel = Path("skill03") / "d1" / "f108.md"

            def sbxfs_change():
                with open(mine / rel, "ab") as f:
                    f.write(b"changed\n")
                    f.flush()
                    os.fsync(f.fileno())

            def peer_change():
                with open(host / f"r{j}" / rel, "ab") as f:
                    f.write(b"changed\n")
                peer_upload_all(up, host / f"r{j}", peer_dest)

            for name, a, b in (("initial", sbxfs_initial, peer_initial), ("change", sbxfs_change, peer_change)):
                order = (("sbxfs", a), ("peer", b)) if j % 2 == 0 else (("peer", b), ("sbxfs", a))
                res = {side: timed(fn, log) for side, fn in order}
                if j:  # round 0 is the warm-up
                    res["ratio"] = res["peer"]["s"] / res["sbxfs"]["s"]
                    res["order"] = "AB" if j % 2 == 0 else "BA"
                    rows[name].append(res)
            shutil.rmtree(mine)  # untimed: the next round's tree is new again
            shutil.rmtree(host / f"r{j}")
            fsync_path(sk)
    finally:
        up.close()
    st = json.loads((sbx / "status").read_text())["skills"]
    if st["state"] != "synced":
        raise RuntimeError(f"skills not synced at the end: {st}")
    os.rmdir(sbx)
    return rows


def summary(kind, name, rows):
    med = statistics.median
    ratios = [r["ratio"] for r in rows]
    return {"row": f"{kind}-{name}", "rounds": rows,
            "sbxfs_ms": med(r["sbxfs"]["s"] for r in rows) * 1000, "peer_ms": med(r["peer"]["s"] for r in rows) * 1000,
            "sbxfs_uploads": med(r["sbxfs"]["uploads"] for r in rows),
            "peer_uploads": med(r["peer"]["uploads"] for r in rows),
            "sbxfs_requests": med(r["sbxfs"]["requests"] for r in rows),
            "peer_requests": med(r["peer"]["requests"] for r in rows),
            "sbxfs_bytes": med(r["sbxfs"]["bytes"] for r in rows), "peer_bytes": med(r["peer"]["bytes"] for r in rows),
            "ratio": med(ratios), "min": min(ratios), "max": max(ratios)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="2 rounds (a smoke run; no figures)")
    ap.add_argument("--latency-ms", type=float, default=0,
                    help="delay every file request at the server by this much (a stand-in for a round trip)")
    ap.add_argument("--out", default=str(HERE / "results" / "skills-latest.json"))
    args = ap.parse_args()
    if args.quick:
        args.rounds = 2
    if os.geteuid() != 0:
        sys.exit("skills_bench: must run as root (FUSE)")
    for tool in ("bwrap", "fusermount3"):
        if not shutil.which(tool):
            sys.exit(f"skills_bench: {tool} not installed")
    work = Path(tempfile.mkdtemp(prefix="sbxfs-skills-bench.", dir="/var/tmp"))
    results, started = [], []
    try:
        src = work / "tree"
        total = make_tree(src)
        # ---- opensandbox
        osf = OpenSandboxFake(work / "osfake", "--graceful-close", "0")
        osf.start()
        started.append(osf)
        if args.latency_ms:
            osf.fault({"kind": "delay", "ms": args.latency_ms, "path": r"/files|/directories"})
        d = Daemon(work / "os", {"use": "opensandbox", "state_dir": str(work / "os" / "state"),
                                "domain": f"127.0.0.1:{osf.port}", "idle_timeout": 0})
        started.append(d)
        # execd's endpoint is known once the sandbox exists: make it, read it, release it
        os.makedirs(d.mnt / "bench" / "t")
        execd = json.loads((d.mnt / "bench" / "t" / "status").read_text())["execd"]
        os.rmdir(d.mnt / "bench" / "t")
        rows = bench_provider("opensandbox", osf, d, execd, src, args.rounds)
        results += [summary("os", n, r) for n, r in rows.items()]
        d.stop()
        started.remove(d)
        osf.stop()
        started.remove(osf)
        # ---- aio at a base_url
        aio = AioFakeServer(work / "aiofake")
        aio.start()
        started.append(aio)
        if args.latency_ms:
            aio.api.post("/_fake/faults", {"kind": "delay", "seconds": args.latency_ms / 1000, "times": None,
                                           "path": r"^/v1/file/|^/v1/bash/exec$"})
        base = f"http://127.0.0.1:{aio.port}"
        d = Daemon(work / "aio", {"use": "aio", "state_dir": str(work / "aio" / "state"), "base_url": base,
                                 "idle_timeout": 0})
        started.append(d)
        rows = bench_provider("aio", aio, d, base, src, args.rounds)
        results += [summary("aio", n, r) for n, r in rows.items()]
    finally:
        for s in reversed(started):
            try:
                s.stop()
            except Exception as e:  # noqa: BLE001 - reported, the rest still stops
                print(f"skills_bench: stopping {s}: {e}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    lines = [f"{NFILES} files, {total} bytes; {args.rounds} rounds (ABAB) after a warm-up; medians",
             "",
             "| row | sbxfs ms | peer ms | ratio peer/sbxfs (median, min-max) | uploads sbxfs / peer "
             "| requests sbxfs / peer | bytes sent sbxfs / peer |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['row']} | {r['sbxfs_ms']:.1f} | {r['peer_ms']:.1f} | {r['ratio']:.2f} "
                     f"({r['min']:.2f}-{r['max']:.2f}) | {r['sbxfs_uploads']:g} / {r['peer_uploads']:g} | "
                     f"{r['sbxfs_requests']:g} / {r['peer_requests']:g} | {r['sbxfs_bytes']:.0f} / {r['peer_bytes']:.0f} |")
    table = "\n".join(lines)
    print(table)
    meta = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
            "load": os.getloadavg(), "rounds": args.rounds, "latency_ms": args.latency_ms, "files": NFILES,
            "bytes": total, "rows": results,
            "command": " ".join(["/usr/bin/python3", "bench/skills_bench.py", *sys.argv[1:]])}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(meta, indent=1))
    Path(args.out).with_suffix(".md").write_text(table + "\n")


if __name__ == "__main__":
    main()
