#!/usr/bin/python3
"""The allreduce targets of the collectives issue, from one
`gnnrt bench collectives --json` file: per size, native MPI_Allreduce, the
best own algorithm, auto, and the three ratios (auto against the better of
native and own; own busbw against native's; own latency against native's).

Usage: bench/collectives_targets.py ROWS.json [--ranks 2]
Prints a Markdown table; a cell marked with a cross misses its target:
auto > 1.1x the better of both; own busbw < 0.9x native at >= 1 MiB or
< 1.5x at 64 MiB; own latency > 1.5x native at <= 1 KiB.
"""
import argparse
import collections
import json

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("rows")
ap.add_argument("--ranks", type=int, default=2)
args = ap.parse_args()

by_size = collections.defaultdict(dict)
for r in json.load(open(args.rows)):
    if r["op"] == "allreduce" and r["ranks"] == args.ranks:
        by_size[r["bytes"]][r["algorithm"]] = r["avg_us"]

print("| bytes | native µs | best own µs (algorithm) | auto µs | auto / best of both "
      "| own busbw / native | own latency / native |")
print("|---:|---:|---|---:|---:|---:|---:|")
misses = collections.Counter()
for size in sorted(by_size):
    t = by_size[size]
    own = {a: us for a, us in t.items() if a not in ("native", "auto")}
    if not own or "native" not in t or "auto" not in t:
        print(f"| {size} | (needs native, auto and an own algorithm) | | | | | |")
        continue
    best = min(own, key=own.get)
    auto = t["auto"] / min(own[best], t["native"])
    bw = t["native"] / own[best]  # busbw ratio = inverse time ratio
    lat = own[best] / t["native"]
    auto_miss = auto > 1.1
    bw_miss = (size >= 1 << 20 and bw < 0.9) or (size >= 64 << 20 and bw < 1.5)
    lat_miss = size <= 1024 and lat > 1.5
    misses.update({"auto": auto_miss, "busbw": bw_miss, "latency": lat_miss})
    x = lambda miss: " ✗" if miss else ""
    print(f"| {size} | {t['native']:.1f} | {own[best]:.1f} ({best}) | {t['auto']:.1f} "
          f"| {auto:.2f}{x(auto_miss)} | {bw:.2f}{x(bw_miss)} | {lat:.2f}{x(lat_miss)} |")
print(f"\nmisses: auto {misses['auto']}, busbw {misses['busbw']}, latency {misses['latency']} "
      f"of {len(by_size)} sizes")
