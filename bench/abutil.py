# SPDX-License-Identifier: MIT
"""What the A/B benches (smallfiles_ab.py, cache_ab.py) share: waiting for a
daemon's mount, and taking every mount and daemon of a run down again."""

import shutil
import signal
import subprocess
import time


def mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


def wait_mounted(path, proc, secs=15):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if mounted(path):
            return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("daemon exited before mounting %s" % path)
        time.sleep(0.05)
    raise RuntimeError("%s not mounted after %d s" % (path, secs))


def teardown(mounts, daemons, work):
    """Unmount (lazily if need be), wait for the daemons (SIGKILL after a
    minute), remove the run's directory."""
    for m in mounts:
        if mounted(m):
            subprocess.run(["fusermount3", "-u", m], capture_output=True)
            if mounted(m):
                subprocess.run(["fusermount3", "-uz", m], capture_output=True)
    for d in daemons:
        try:
            d.wait(timeout=60)
        except subprocess.TimeoutExpired:
            d.send_signal(signal.SIGKILL)
            d.wait()
    shutil.rmtree(work, ignore_errors=True)
