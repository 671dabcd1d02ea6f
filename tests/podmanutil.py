# SPDX-License-Identifier: MIT
"""Podman for the pytest suite: a private `podman system service` (Podman's
Docker-compatible API) that the docker provider is pointed at, next to the
shared dockerd.

    import podmanutil
    eng = podmanutil.PodmanService()    # raises PodmanUnavailable with the reason
    eng.load_image("sbxfs-test-busybox:1")   # docker save | podman load
    ... use: docker, docker.socket: eng.socket ...
    eng.docker("ps", "-a")               # the docker CLI against Podman (-H)
    eng.stop()                           # by pid; removes its containers and storage

The service runs with its own storage (--root, --runroot, --tmpdir under a
temporary directory), cgroupfs (no systemd here) and a file event log, on
its own socket /run/sbxfs-test-podman-<pid>.sock: nothing is shared with the
host's Podman, if any.  The test image is the one tests/images/build.sh built
for dockerd, moved over with `docker save | podman load`, so both engines
run the same bytes with the same configuration (user, labels, CMD).
"""

import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import dockerutil


class PodmanUnavailable(RuntimeError):
    """Podman is not installed, or its service cannot run here."""


def ensure_installed():
    """Install Debian's podman when missing (root, apt-get); the reason when
    it cannot be."""
    if shutil.which("podman"):
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "podman is not installed (apt-get install podman) and this is not root with apt-get"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "-qq", "podman"], capture_output=True, text=True,
                       timeout=600, env=env)
    if r.returncode:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=600, env=env)
        r = subprocess.run(["apt-get", "install", "-y", "-qq", "podman"], capture_output=True, text=True,
                           timeout=600, env=env)
    if r.returncode or not shutil.which("podman"):
        return f"apt-get install podman failed: {r.stderr.strip()[-500:]}"
    return None


class PodmanService:
    """A private `podman system service --time=0` on its own socket and storage."""

    def __init__(self, timeout=30.0):
        why = ensure_installed()
        if why:
            raise PodmanUnavailable(why)
        if os.geteuid() != 0:
            raise PodmanUnavailable("the suite runs rootful Podman (as dockerd): needs root")
        self.dir = Path(tempfile.mkdtemp(prefix="sbxt-podman-"))
        self.socket = f"/run/sbxfs-test-podman-{os.getpid()}.sock"
        self.host = "unix://" + self.socket
        self.log = self.dir / "service.log"
        try:
            os.unlink(self.socket)
        except OSError:
            pass
        self.global_args = ["--root", str(self.dir / "root"), "--runroot", str(self.dir / "runroot"),
                            "--tmpdir", str(self.dir / "tmp"), "--cgroup-manager", "cgroupfs",
                            "--events-backend", "file"]
        # Podman (rootful) raises a container's RLIMIT_NOFILE to 1048576 by
        # default (and RLIMIT_NPROC to its own); where this process's hard limit is lower and cannot be
        # raised (a CI sandbox: "error setting rlimit type 7") runc refuses
        # to start the container.  Its own containers.conf keeps the limit
        # this process has, as dockerd's containers inherit dockerd's.
        limits = []
        for name, which in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
            hard = resource.getrlimit(which)[1]
            hard = -1 if hard == resource.RLIM_INFINITY else hard
            if name == "nproc":   # the service lowers its own to 32768 (podman 4.3), then cannot give more
                hard = 32768 if hard < 0 else min(hard, 32768)
            limits.append(f'"{name}={hard}:{hard}"')
        conf = self.dir / "containers.conf"
        conf.write_text(f"[containers]\ndefault_ulimits = [{', '.join(limits)}]\n")
        self.env = dict(os.environ, CONTAINERS_CONF=str(conf))
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(["podman", *self.global_args, "system", "service", "--time=0", self.host],
                                         stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                         start_new_session=True, env=self.env)
        deadline = time.monotonic() + timeout
        while not dockerutil.ping_socket(self.socket):
            if self.proc.poll() is not None or time.monotonic() >= deadline:
                tail = self.log.read_text(errors="replace")[-2000:]
                self.stop()
                raise PodmanUnavailable(f"podman system service did not answer on {self.socket} "
                                        f"within {timeout} s:\n{tail}")
            time.sleep(0.1)

    def podman(self, *args, check=True, timeout=120, **kw):
        """The podman CLI on this service's storage."""
        r = subprocess.run(["podman", *self.global_args, *args], capture_output=True, timeout=timeout, env=self.env,
                           **kw)
        if check and r.returncode:
            raise RuntimeError(f"podman {' '.join(args)} failed ({r.returncode}): {r.stderr!r}")
        return r

    def docker(self, *args, check=True, timeout=120, input=None):
        """The docker CLI against this service (Podman's compat API)."""
        r = subprocess.run([dockerutil.docker_bin(), "-H", self.host, *args], capture_output=True, text=True,
                           timeout=timeout, input=input)
        if check and r.returncode:
            raise RuntimeError(f"docker -H {self.host} {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def load_image(self, name):
        """Copy image name from dockerd into this Podman (same id, same config)."""
        save = subprocess.Popen([dockerutil.docker_bin(), "save", name], stdout=subprocess.PIPE)
        try:
            self.podman("load", stdin=save.stdout, timeout=300)
        finally:
            save.stdout.close()
            save.wait(60)
        if save.returncode:
            raise RuntimeError(f"docker save {name} failed ({save.returncode})")

    def stop(self, timeout=30.0):
        """Remove every container, stop the service by its pid, delete the storage."""
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.podman("rm", "-f", "-a", "-t", "0", check=False, timeout=120)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # container storage may hold mounts (overlay, shm): unmount what is under the directory
        for line in reversed(Path("/proc/self/mounts").read_text().splitlines()):
            mp = line.split()[1]
            if mp.startswith(str(self.dir) + "/"):
                subprocess.run(["umount", "-l", mp], capture_output=True, timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)
        try:
            os.unlink(self.socket)
        except OSError:
            pass
