#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run the chaos workload by hand (docs/reliability.md).

    python3 tests/chaos/run.py --short --seed 7            # 2 min, >= 20 kills, local
    python3 tests/chaos/run.py --long --seed 7             # 30 min, >= 200 kills
    python3 tests/chaos/run.py --long --provider docker --seed 7
    python3 tests/chaos/run.py --seed 7 --no-network       # without network decisions

Prints the figures; exit status 1 and the seed, the violations, the last
operations and the daemon's log when an invariant breaks (the run's
directory is kept for a post-mortem)."""

import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=None)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--short", action="store_true", help="2 minutes, >= 20 kills (the default)")
    mode.add_argument("--long", action="store_true", help="30 minutes, >= 200 kills")
    ap.add_argument("--provider", choices=("local", "docker"), default="local")
    ap.add_argument("--sandboxes", type=int, default=None)
    ap.add_argument("--duration", type=float, default=None, help="seconds (overrides the mode)")
    ap.add_argument("--kills", type=int, default=None, help="at least this many kill -9s (0: none, load only)")
    ap.add_argument("--no-network", action="store_true", help="no network decisions (chaos_net.py)")
    ap.add_argument("--net-share", type=float, default=0.12, help="network operations' share in allowlist sandboxes")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 31)
    dur, kills, n = (1800.0, 200, 16) if a.long else (120.0, 20, 8)
    c = chaos.Chaos(seed, duration=a.duration or dur, kills=kills if a.kills is None else a.kills,
                    sandboxes=a.sandboxes or n,
                    provider=a.provider, log=lambda s: print(s, flush=True), network=not a.no_network,
                    net_share=a.net_share)
    if a.provider == "docker":
        # an image built locally (tests/images/build.sh busybox); container names
        # of this run only, so no other daemon's container is ever in the way
        # (network: isolated, then allowlist: no docker0 bridge needed)
        c.d.configure(image=os.environ.get("SBXFS_CHAOS_IMAGE", "sbxfs-test-busybox:1"),
                      container_prefix=f"sbxchaos-{seed % 100000}")
        if a.no_network:
            c.d.configure(network={"mode": "isolated"})
        c.container_prefix = f"sbxchaos-{seed % 100000}"
    ok, text = c.run()
    print(text, flush=True)
    if ok:
        c.remove()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
