#!/usr/bin/env python3
"""The side-by-side table (markdown) of tests/bench/side-by-side.sh.

Arguments: --old/--new (what each side is), --settings, then one RUN per bench run,
"SIDE:N:SECONDS:LOAD_BEFORE:LOAD_AFTER:RAW.jsonl" (SIDE old or new; RAW is run.sh's raw
results). Rows: each workload and target measured by both sides, the median of each side's
runs (every run's value in brackets), and new / old. `local` (a plain directory on the same
disk) runs no Cairn code: its ratio shows how much the machine's load moved between runs.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

ROWS = [
    ("seq_write", "sequential write 1 MiB records + fsync"),
    ("seq_read", "sequential read 1 MiB records (cold)"),
    ("rand_read", "4 KiB random read, QD 16"),
    ("rand_write", "4 KiB random write, QD 16"),
    ("create", "small files: create+write 4 KiB"),
    ("read", "small files: open+read 4 KiB"),
    ("stat", "small files: stat"),
    ("delete", "small files: delete"),
    ("append", "40-byte appends to one file"),
]
TARGETS = ["local", "fuse-2x2", "fuse-4x1", "lib-2x2"]


def fmt(v):
    if v >= 10000:
        return f"{v / 1000:.1f}k"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def load(path):
    samples, checks = {}, {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r["target"] in ("check", "info"):
                checks[(r["op"], r.get("volume", ""))] = r
            else:
                samples.setdefault((r["op"], r["target"]), []).append((r["value"], r["unit"]))
    return samples, checks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--settings", default="")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()

    runs = []
    for spec in a.runs:
        side, n, secs, before, after, path = spec.split(":", 5)
        samples, checks = load(path)
        runs.append(dict(side=side, n=int(n), secs=secs, before=before, after=after,
                         samples=samples, checks=checks))
    if not any(r["side"] == "old" for r in runs) or not any(r["side"] == "new" for r in runs):
        sys.exit("side-by-side.py: need at least one run of each side")

    def values(side, key):
        """Each run's value (the median of its rounds) for `key`, in run order."""
        out, unit = [], None
        for r in runs:
            if r["side"] != side or key not in r["samples"]:
                continue
            vs = r["samples"][key]
            unit = vs[0][1]
            out.append(statistics.median(v for v, _ in vs))
        return out, unit

    o = []
    p = o.append
    p(f"# Side by side — {time.strftime('%Y-%m-%d %H:%M')} on {platform.node()}")
    p("")
    p(f"- **old**: {a.old}")
    p(f"- **new**: {a.new}")
    p(f"- settings: {a.settings}")
    p(f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, kernel {platform.release()}; "
      "one cairnd, bricks and the local directory on the same disk; runs interleaved old, new, old, new, …")
    p("- each cell: median of the runs [each run's value]; new/old > 1 is faster except for "
      "appends (seconds: < 1 is faster); `local` runs no Cairn code, so its new/old is the "
      "machine's noise between the runs")
    p("")
    p("| workload | target | unit | old | new | new/old |")
    p("|---|---|---|---:|---:|---:|")
    for op, text in ROWS:
        for t in TARGETS:
            ov, unit = values("old", (op, t))
            nv, _ = values("new", (op, t))
            if not ov or not nv:
                continue
            om, nm = statistics.median(ov), statistics.median(nv)
            ratio = f"{nm / om:.2f}" if om else "—"
            p(f"| {text} | {t} | {unit} | {fmt(om)} [{', '.join(fmt(v) for v in ov)}] "
              f"| {fmt(nm)} [{', '.join(fmt(v) for v in nv)}] | {ratio} |")
    p("")
    checks = sorted({k for r in runs for k in r["checks"]})
    if checks:
        p("Round trips (the bench's deterministic checks; the same in every run of a side):")
        p("")
        p("| check | old | new |")
        p("|---|---|---|")
        for k in checks:
            cell = {}
            for side in ("old", "new"):
                seen = sorted({r["checks"][k]["detail"] for r in runs if r["side"] == side and k in r["checks"]})
                cell[side] = "; ".join(seen) or "—"
            p(f"| {k[0]} {k[1]} | {cell['old']} | {cell['new']} |")
        p("")
    p("Runs (load average 1/5/15 min before and after each):")
    p("")
    p("| run | side | seconds | load before | load after |")
    p("|---|---|---:|---|---|")
    for r in runs:
        p(f"| {r['n']} | {r['side']} | {r['secs']} | {r['before']} | {r['after']} |")
    print("\n".join(o))


if __name__ == "__main__":
    main()
