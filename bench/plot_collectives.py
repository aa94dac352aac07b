#!/usr/bin/python3
"""Draws `gnnrt bench collectives --json` results: for each operation, latency
(avg over ranks) and bus bandwidth against message size, one line per
algorithm, as one PNG per operation.

    /usr/bin/python3 bench/plot_collectives.py RESULTS.json [MORE.json ...] --out DIR

Several files (e.g. runs at different rank counts) are drawn side by side:
one line per (algorithm, ranks).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} TiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", nargs="+", help="JSON files written by gnnrt bench collectives --json")
    parser.add_argument("--out", default=".", help="folder for the PNG files")
    args = parser.parse_args()

    rows = []
    for path in args.results:
        try:
            with open(path) as f:
                rows.extend(json.load(f))
        except (OSError, ValueError) as e:
            sys.exit(f"plot_collectives.py: cannot read {path}: {e}")
    if not rows:
        sys.exit("plot_collectives.py: no rows")
    os.makedirs(args.out, exist_ok=True)

    for op in sorted({r["op"] for r in rows}):
        fig, (lat, bw) = plt.subplots(1, 2, figsize=(13, 5))
        lines = sorted({(r["algorithm"], r["ranks"]) for r in rows if r["op"] == op},
                       key=lambda k: (k[1], k[0]))
        for algorithm, ranks in lines:
            pts = sorted((r for r in rows if r["op"] == op and r["algorithm"] == algorithm
                          and r["ranks"] == ranks), key=lambda r: r["bytes"])
            over = " (oversubscribed)" if pts and pts[0].get("oversubscribed") else ""
            label = f"{algorithm}, p={ranks}{over}"
            x = [r["bytes"] for r in pts]
            lat.plot(x, [r["avg_us"] for r in pts], marker="o", ms=3, label=label)
            bw.plot(x, [r["busbw"] for r in pts], marker="o", ms=3, label=label)
        for ax in (lat, bw):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("message size (bytes)")
            ax.grid(True, which="both", alpha=0.3)
        lat.set_yscale("log")
        lat.set_ylabel("time per operation, avg over ranks (µs)")
        bw.set_ylabel("bus bandwidth (GB/s)")
        lat.set_title(f"{op}: latency")
        bw.set_title(f"{op}: bus bandwidth")
        lat.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(args.out, f"collectives_{op}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(f"wrote {path} ({len(lines)} lines, sizes {human(min(r['bytes'] for r in rows if r['op'] == op))}"
              f" to {human(max(r['bytes'] for r in rows if r['op'] == op))})")


if __name__ == "__main__":
    main()
