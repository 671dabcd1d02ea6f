#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""
compare_runs.py - which results of several `make bench` runs reproduce.

    bench/compare_runs.py RUN1.json RUN2.json [RUN3.json ...]

Reads the JSON that bench.py writes beside each table (bench/results/latest.json) and prints,
for every row present in all runs, the median per-pair ratio of each run, their range, the
range of all pairs, and whether the direction held:

  reproduces: faster   every run's median ratio > 1 and, in every run, >= 3/4 of its pairs > 1
  reproduces: slower   the same below 1
  parity (±10 %)       every run's median ratio within 0.90-1.10
  does not reproduce   anything else: the row's direction depends on the run

docs/performance.md states only rows that reproduce, with the ranges this prints.
Python stdlib only.
"""

import json
import sys


def classify(runs):
    meds = [r["ratio"]["median"] for r in runs]
    if all(0.9 <= m <= 1.1 for m in meds):
        return "parity (±10 %)"

    def share(r, above):
        xs = r["ratio"]["samples"]
        return sum(1 for x in xs if (x > 1) == above) / len(xs)
    if all(m > 1 for m in meds) and all(share(r, True) >= 0.75 for r in runs):
        return "reproduces: faster"
    if all(m < 1 for m in meds) and all(share(r, False) >= 0.75 for r in runs):
        return "reproduces: slower"
    return "does not reproduce"


def main(paths):
    docs = [json.load(open(p)) for p in paths]
    keyed = []
    for d in docs:
        keyed.append({(r["id"], r["peer"]): r for r in d["rows"]})
    print("runs: " + "; ".join("%s (%s, %s s, load %s -> %s)" % (
        p, d["meta"]["date"], d["meta"].get("total_seconds"), d["meta"]["loadavg_start"],
        d["meta"]["loadavg_end"]) for p, d in zip(paths, docs)))
    print()
    print("| row | peer | median ratio per run | range of run medians | all pairs min–max "
          "| result |")
    print("|---|---|---|---|---|---|")
    for key, r0 in keyed[0].items():
        runs = [k.get(key) for k in keyed]
        if any(r is None for r in runs):
            continue
        name = "%s (%s)" % (r0["title"], r0["unit"])
        if any(r["error"] for r in runs):
            print("| %s | %s | error in a run | | | — |" % (name, r0["peer"] or "—"))
            continue
        if not r0["peer"] or any(not r["ratio"] for r in runs):
            meds = [r["sbxfs"]["median"] for r in runs]
            print("| %s | — | %s (absolute) | %.3g–%.3g | | no peer |" % (
                name, " / ".join("%.3g" % m for m in meds), min(meds), max(meds)))
            continue
        meds = [r["ratio"]["median"] for r in runs]
        lo = min(r["ratio"]["min"] for r in runs)
        hi = max(r["ratio"]["max"] for r in runs)
        print("| %s | %s | %s | %.2f–%.2f× | %.2f–%.2f× | %s |" % (
            name.replace("|", "\\|"), r0["peer"], " / ".join("%.2f" % m for m in meds),
            min(meds), max(meds), lo, hi, classify(runs)))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().split("\n\n")[1])
    main(sys.argv[1:])
