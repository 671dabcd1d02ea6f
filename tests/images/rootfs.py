#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Root filesystems of the locally built test images, and their import into Docker.

What it is: the worker behind tests/images/build.sh.  It describes each image
as a manifest (path, kind, mode, owner, source), hashes the manifest together
with the image configuration and the content of every file it copies, and
imports a deterministic tarball with `docker import` only when the hash
differs from the image's `org.sbxfs.test.input-hash` label.  Nothing is ever
pulled from a registry: every byte comes from this host's Debian packages
(busybox-static, python3.11) and from this repository.

Images
  sbxfs-test-busybox:1   /bin/busybox + applet links, /etc/{passwd,group,shadow}
                         with root and `sandbox` (1000:1000), /tmp 1777,
                         /mnt/user-data/{workspace,uploads,outputs}; CMD /bin/sh
  sbxfs-test-aio:1       the same base + the host's python3.11 (binary, the
                         shared libraries ldd names, the standard library) +
                         tests/fakes/aio_server.py; ENTRYPOINT
                         python3 -S -u /opt/aio-fake/aio_server.py --in-container
                         --host 0.0.0.0 --port 8080 (the AIO image's port);
                         user `gem` (1000:1000) with home /home/gem

Usage
  rootfs.py hash NAME            print the input hash of busybox|aio
  rootfs.py tar NAME OUT.tar     write the rootfs tarball
  rootfs.py ensure NAME...       build and import what is missing or stale
"""

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
AIO_SERVER = os.path.join(REPO, "tests", "fakes", "aio_server.py")
LABEL_HASH = "org.sbxfs.test.input-hash"
LABEL_ROLE = "org.sbxfs.test.image"
FIXED_MTIME = 1700000000            # generated files: reproducible tarballs
PY_VER = "3.11"
PY_BIN = f"/usr/bin/python{PY_VER}"
PY_LIB = f"/usr/lib/python{PY_VER}"
PY_LIB_SKIP = {"test", "lib2to3", "ensurepip", "idlelib", "tkinter", "turtledemo", "pydoc_data",
               f"config-{PY_VER}-x86_64-linux-gnu", "site-packages", "dist-packages", "EXTERNALLY-MANAGED"}
AIO_PORT = 8080
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BUMP = "1"                          # change to force a rebuild of every image

IMAGES = {"busybox": "sbxfs-test-busybox:1", "aio": "sbxfs-test-aio:1"}


def find_busybox():
    for p in ("/bin/busybox", "/usr/bin/busybox"):
        if os.path.exists(p):
            real = os.path.realpath(p)
            with open(real, "rb") as f:
                is_elf = f.read(4) == b"\x7fELF"
            if is_elf and not elf_has_interp(real):
                return real
    raise SystemExit("rootfs.py: a static busybox is needed: apt-get install busybox-static")


def elf_has_interp(path):
    """True when the ELF file has a PT_INTERP program header (dynamically linked)."""
    import struct
    with open(path, "rb") as f:
        e = f.read(64)
        if e[4] != 2:            # ELFCLASS64 only
            return True
        phoff, = struct.unpack_from("<Q", e, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", e, 0x36)
        f.seek(phoff)
        ph = f.read(phentsize * phnum)
    return any(struct.unpack_from("<I", ph, i * phentsize)[0] == 3 for i in range(phnum))


class Manifest:
    """Entries: path -> dict(kind=dir|file|link, mode, uid, gid, src|data|target, mtime)."""

    def __init__(self):
        self.e = {}

    def dir(self, path, mode=0o755, uid=0, gid=0):
        path = os.path.normpath(path).strip("/")
        parts = path.split("/")
        for i in range(1, len(parts)):
            p = "/".join(parts[:i])
            if p not in self.e:
                self.e[p] = {"kind": "dir", "mode": 0o755, "uid": 0, "gid": 0}
        self.e[path] = {"kind": "dir", "mode": mode, "uid": uid, "gid": gid}

    def _parent(self, path):
        d = os.path.dirname(path)
        if d and d not in self.e:
            self.dir(d)

    def data(self, path, content, mode=0o644, uid=0, gid=0):
        path = os.path.normpath(path).strip("/")
        self._parent(path)
        if isinstance(content, str):
            content = content.encode()
        self.e[path] = {"kind": "file", "mode": mode, "uid": uid, "gid": gid, "data": content}

    def copy(self, path, src, mode=None):
        path = os.path.normpath(path).strip("/")
        self._parent(path)
        st = os.stat(src)
        self.e[path] = {"kind": "file", "mode": mode if mode is not None else (st.st_mode & 0o7777),
                        "uid": 0, "gid": 0, "src": src, "mtime": int(st.st_mtime)}

    def link(self, path, target):
        path = os.path.normpath(path).strip("/")
        self._parent(path)
        self.e[path] = {"kind": "link", "target": target, "mode": 0o777, "uid": 0, "gid": 0}

    def digest(self, config):
        h = hashlib.sha256()
        h.update(json.dumps(config, sort_keys=True).encode())
        for p in sorted(self.e):
            x = self.e[p]
            meta = {k: v for k, v in x.items() if k not in ("data", "src")}
            h.update(json.dumps([p, meta], sort_keys=True).encode())
            if "data" in x:
                h.update(hashlib.sha256(x["data"]).digest())
            if "src" in x:
                h.update(file_sha256(x["src"]))
        return h.hexdigest()[:32]

    def write_tar(self, out):
        with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tf:
            for p in sorted(self.e):
                x = self.e[p]
                ti = tarfile.TarInfo(p)
                ti.mode, ti.uid, ti.gid = x["mode"], x["uid"], x["gid"]
                ti.uname = ti.gname = ""
                ti.mtime = x.get("mtime", FIXED_MTIME)
                if x["kind"] == "dir":
                    ti.type = tarfile.DIRTYPE
                    tf.addfile(ti)
                elif x["kind"] == "link":
                    ti.type = tarfile.SYMTYPE
                    ti.linkname = x["target"]
                    tf.addfile(ti)
                elif "data" in x:
                    ti.size = len(x["data"])
                    tf.addfile(ti, io.BytesIO(x["data"]))
                else:
                    ti.size = os.path.getsize(x["src"])
                    with open(x["src"], "rb") as f:
                        tf.addfile(ti, f)


_sha_cache = {}


def file_sha256(path):
    d = _sha_cache.get(path)
    if d is None:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        d = _sha_cache[path] = h.digest()
    return d


def base(m, user, home):
    """The busybox base shared by both images."""
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "etc", "proc", "sys", "dev", "run",
              "var/tmp", "opt", "mnt/user-data"):
        m.dir(d)
    m.dir("tmp", 0o1777)
    m.dir("var/tmp", 0o1777)
    m.dir("root", 0o700)
    m.dir(home.strip("/"), 0o755, 1000, 1000)
    for d in ("workspace", "uploads", "outputs"):
        m.dir(f"mnt/user-data/{d}", 0o777)
    bb = find_busybox()
    m.copy("bin/busybox", bb, 0o755)
    applets = subprocess.run([bb, "--list-full"], capture_output=True, text=True, check=True).stdout.split()
    for a in applets:
        a = a.strip("/")
        if a != "bin/busybox":
            m.link(a, "/bin/busybox")
    m.data("etc/passwd", f"root:x:0:0:root:/root:/bin/sh\n{user}:x:1000:1000:{user}:{home}:/bin/sh\n"
                         "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
    m.data("etc/group", f"root:x:0:\n{user}:x:1000:\nnogroup:x:65534:\n")
    m.data("etc/shadow", f"root:*:19700:0:99999:7:::\n{user}:!:19700:0:99999:7:::\nnobody:!:19700::::::\n",
           mode=0o640)
    m.data("etc/os-release", 'NAME="sbxfs test image"\nID=sbxfs-test\nPRETTY_NAME="sbxfs test image (busybox)"\n')
    m.data("etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n")


def ldd_deps(paths):
    """Absolute library paths (as the loader names them) needed by the ELF files."""
    out = set()
    for p in paths:
        r = subprocess.run(["ldd", p], capture_output=True, text=True)
        if r.returncode != 0:
            continue
        for line in r.stdout.splitlines():
            m = re.search(r"=>\s+(/\S+)", line) or re.match(r"\s*(/\S+)\s+\(", line)
            if m:
                out.add(m.group(1))
    return out


def manifest_busybox():
    m = Manifest()
    base(m, "sandbox", "/home/sandbox")
    config = {"changes": ['CMD ["/bin/sh"]', f"ENV PATH={PATH_ENV}", "WORKDIR /"], "bump": BUMP}
    return m, config


def manifest_aio():
    if not os.path.exists(PY_BIN):
        raise SystemExit(f"rootfs.py: {PY_BIN} is missing (apt-get install python3.11-minimal)")
    m = Manifest()
    base(m, "gem", "/home/gem")
    m.copy(PY_BIN.lstrip("/"), os.path.realpath(PY_BIN), 0o755)
    m.link("usr/bin/python3", f"python{PY_VER}")
    elves = [PY_BIN]
    for root, dirs, files in os.walk(PY_LIB):
        rel = os.path.relpath(root, PY_LIB)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in PY_LIB_SKIP]
        dirs.sort()
        for f in sorted(files):
            if rel == "." and f in PY_LIB_SKIP:
                continue
            src = os.path.join(root, f)
            if os.path.islink(src):
                m.link(os.path.normpath(os.path.join(PY_LIB, rel, f)).lstrip("/"), os.readlink(src))
                continue
            m.copy(os.path.normpath(os.path.join(PY_LIB, rel, f)).lstrip("/"), src)
            if f.endswith(".so"):
                elves.append(src)
    for lib in sorted(ldd_deps(elves)):
        m.copy(lib.lstrip("/"), os.path.realpath(lib), 0o755)
    m.copy("opt/aio-fake/aio_server.py", AIO_SERVER, 0o755)
    entry = ["/usr/bin/python3", "-S", "-u", "/opt/aio-fake/aio_server.py", "--in-container",
             "--host", "0.0.0.0", "--port", str(AIO_PORT)]
    config = {"changes": [f"ENTRYPOINT {json.dumps(entry)}", "CMD []", f"EXPOSE {AIO_PORT}/tcp",
                          f"ENV PATH={PATH_ENV}", "ENV HOME=/home/gem", "ENV LANG=C.UTF-8",
                          "WORKDIR /home/gem"],
              "bump": BUMP}
    return m, config


MANIFESTS = {"busybox": manifest_busybox, "aio": manifest_aio}


def docker(*args, check=True, capture=True, timeout=600):
    exe = os.environ.get("DOCKER") or ("/usr/bin/docker" if os.path.exists("/usr/bin/docker") else "docker")
    r = subprocess.run([exe, *args], capture_output=capture, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise SystemExit(f"rootfs.py: docker {args[0]} failed ({r.returncode}): "
                         f"{(r.stderr or '').strip()}")
    return r


def image_label(ref, label):
    r = docker("image", "inspect", "-f", f'{{{{ index .Config.Labels "{label}" }}}}', ref, check=False)
    return r.stdout.strip() if r.returncode == 0 else None


def image_id(ref):
    r = docker("image", "inspect", "-f", "{{.Id}}", ref, check=False)
    return r.stdout.strip() if r.returncode == 0 else None


def ensure(name):
    ref = IMAGES[name]
    t0 = time.monotonic()
    m, config = MANIFESTS[name]()
    h = m.digest(config)
    have = image_label(ref, LABEL_HASH)
    if have == h:
        print(f"{ref}: up to date (input hash {h}, checked in {time.monotonic() - t0:.1f} s)")
        return False
    old = image_id(ref)
    tmp = tempfile.mkdtemp(prefix="sbxfs-image-")
    try:
        tar = os.path.join(tmp, "rootfs.tar")
        m.write_tar(tar)
        size = os.path.getsize(tar)
        args = ["import"]
        for c in config["changes"] + [f"LABEL {LABEL_HASH}={h}", f"LABEL {LABEL_ROLE}={name}"]:
            args += ["--change", c]
        args += ["--message", f"sbxfs test image {name} (tests/images/build.sh)", tar, ref]
        docker(*args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    new = image_id(ref)
    if old and old != new:
        # the previous build, now untagged: remove it unless a container still uses it
        tags = docker("image", "inspect", "-f", "{{len .RepoTags}}", old, check=False).stdout.strip()
        if tags == "0":
            docker("image", "rm", old, check=False)
    why = "stale" if have else "missing"
    print(f"{ref}: built ({why}; input hash {h}; {len(m.e)} entries, {size / 1e6:.1f} MB rootfs, "
          f"{time.monotonic() - t0:.1f} s)")
    return True


def main(argv):
    if len(argv) >= 2 and argv[0] == "hash" and argv[1] in MANIFESTS:
        m, config = MANIFESTS[argv[1]]()
        print(m.digest(config))
        return 0
    if len(argv) == 3 and argv[0] == "tar" and argv[1] in MANIFESTS:
        m, config = MANIFESTS[argv[1]]()
        m.write_tar(argv[2])
        return 0
    if len(argv) >= 2 and argv[0] == "ensure" and all(n in MANIFESTS for n in argv[1:]):
        for n in argv[1:]:
            ensure(n)
        return 0
    print(__doc__[__doc__.index("Usage"):], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
