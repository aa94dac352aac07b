#!/usr/bin/env python3
"""gnnrt's kernels against torch 1.13's CPU paths, on the same machine in the
same run, with a STREAM triad for the memory-bandwidth yardstick.

For each case (op, reduce, E edges, F features, threads) it runs gnnrt's
Google Benchmark binary and every torch path that computes the same thing
(index_add_, scatter_add_, scatter_reduce, index_reduce, PyG's recipes,
torch.sparse.mm with COO or CSR), and compares with the fastest torch path.
Inputs are uniform random, N = E / 10, as in bench/kernels_bench.cc; torch's
message tensors are materialised before timing, as PyG's MessagePassing
holds them.

  ratio     = median torch_ms / median gnnrt_ms (above 1: gnnrt is faster)
  pct_triad = median over rounds of gnnrt's effective bytes/s / triad
              bytes/s at the same threads, the triad measured by the same
              benchmark run right after the kernel's timing loop
              (kernels_bench's triad_bytes_per_second)

Each case runs in --rounds rounds (3 by default), one after another: a
fresh gnnrt process for that op, E and F (both thread counts), then torch's
paths. The first round times every torch path and picks the fastest per
thread count; later rounds time that path again. So both sides of a ratio,
and a kernel and its triad, are measured in the same minutes, and a slow
spell of this shared VM (its random-access speed moves by 2-4x between
minutes; a fresh process also gets fresh pages) shows up as one round of
three, not as the case's figure.

Usage:
  /usr/bin/python3 bench/compare_torch.py --build build [--json FILE] [--quick]
Prints a Markdown table; --json also writes the rows as a JSON list.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

# op, reduce, gnnrt benchmark name
CASES = [
    ("scatter", "sum", "scatter_sum"),
    ("scatter", "mean", "scatter_mean"),
    ("scatter", "max", "scatter_max"),
    ("scatter", "min", "scatter_min"),
    ("spmm", "sum", "spmm_sum"),
    ("spmm", "weighted_sum", "spmm_weighted_sum"),
    ("spmm", "mean", "spmm_mean"),
    ("spmm", "max", "spmm_max"),
    ("gather", "-", "gather"),
    ("sddmm", "dot", "sddmm_dot"),
    ("segment_softmax", "-", "segment_softmax"),
]
HEADS = 4  # as in kernels_bench.cc


def run_gnnrt(build, names, es, fs, threads, repetitions=1):
    exe = os.path.join(build, "bench", "kernels_bench")
    alt = "|".join(names)
    e_alt = "|".join(str(e) for e in es)
    f_alt = "|".join(str(f) for f in fs)
    t_alt = "|".join(str(t) for t in threads)
    filt = f"^({alt})/E:({e_alt})/F:({f_alt})/threads:({t_alt})/"
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = tmp.name
    cmd = [exe, f"--benchmark_filter={filt}", f"--benchmark_repetitions={repetitions}",
           f"--benchmark_out={out}", "--benchmark_out_format=json"]
    if repetitions > 1:
        cmd.append("--benchmark_report_aggregates_only=true")
    print("running:", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    with open(out) as f:
        data = json.load(f)
    os.unlink(out)
    results = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name", "median") != "median":
            continue
        ms = b["real_time"] * {"ms": 1.0, "us": 1e-3, "ns": 1e-6, "s": 1e3}[b["time_unit"]]
        results[b["run_name"]] = (ms, b.get("bytes_per_second", 0.0),
                                  b.get("triad_bytes_per_second", 0.0))
    return results, data.get("context", {})


def timed(fn, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def fastest(paths):
    """Times each path once, repeats those within 1.3x of the best twice more,
    and returns (median ms, path name) of the fastest."""
    first = {}
    for name, fn in paths.items():
        fn()  # warm-up (allocations, lazy init)
        first[name] = timed(fn, 1)
    best = min(t[0] for t in first.values())
    medians = {}
    for name, t in first.items():
        if t[0] <= 1.3 * best:
            t += timed(paths[name], 2)
        medians[name] = statistics.median(t)
    name = min(medians, key=medians.get)
    return medians[name], name


def torch_paths(op, reduce, E, F, gen):
    N = E // 10
    src = torch.randint(0, N, (E,), generator=gen)
    dst = torch.randint(0, N, (E,), generator=gen)
    x = torch.randn(N, F, generator=gen)
    if op == "scatter":
        msg = torch.randn(E, F, generator=gen)
        idx = dst
        exp = idx[:, None].expand(E, F)
        z = lambda: torch.zeros(N, F)
        if reduce == "sum":
            return {
                "index_add_": lambda: z().index_add_(0, idx, msg),
                "scatter_add_": lambda: z().scatter_add_(0, exp, msg),
                "scatter_reduce(sum)": lambda: z().scatter_reduce_(0, exp, msg, "sum", include_self=False),
            }
        if reduce == "mean":
            def pyg_mean():
                s = z().index_add_(0, idx, msg)
                c = torch.zeros(N).index_add_(0, idx, torch.ones(E)).clamp_(min=1)
                return s / c[:, None]
            return {
                "scatter_reduce(mean)": lambda: z().scatter_reduce_(0, exp, msg, "mean", include_self=False),
                "index_reduce(mean)": lambda: z().index_reduce_(0, idx, msg, "mean", include_self=False),
                "pyg sum/count": pyg_mean,
            }
        r = "amax" if reduce == "max" else "amin"
        return {
            f"scatter_reduce({r})": lambda: z().scatter_reduce_(0, exp, msg, r, include_self=False),
            f"index_reduce({r})": lambda: z().index_reduce_(0, idx, msg, r, include_self=False),
        }
    if op == "spmm":
        w = torch.rand(E, generator=gen) if reduce == "weighted_sum" else torch.ones(E)
        if reduce == "mean":
            deg = torch.zeros(N).index_add_(0, dst, torch.ones(E)).clamp_(min=1)
            w = 1.0 / deg[dst]
        paths = {}
        if reduce != "max":
            coo = torch.sparse_coo_tensor(torch.stack([dst, src]), w, (N, N)).coalesce()
            csr = coo.to_sparse_csr()
            paths["sparse.mm(coo)"] = lambda: torch.sparse.mm(coo, x)
            paths["sparse.mm(csr)"] = lambda: torch.sparse.mm(csr, x)
        gathered = lambda: x.index_select(0, src)  # PyG MessagePassing: gather, then scatter
        z = lambda: torch.zeros(N, F)
        if reduce in ("sum", "weighted_sum"):
            scale = (lambda m: m * w[:, None]) if reduce == "weighted_sum" else (lambda m: m)
            paths["gather+index_add_"] = lambda: z().index_add_(0, dst, scale(gathered()))
        elif reduce == "mean":
            paths["gather+index_reduce(mean)"] = lambda: z().index_reduce_(0, dst, gathered(), "mean", include_self=False)
        else:
            paths["gather+index_reduce(amax)"] = lambda: z().index_reduce_(0, dst, gathered(), "amax", include_self=False)
            exp = dst[:, None].expand(E, F)
            paths["gather+scatter_reduce(amax)"] = lambda: z().scatter_reduce_(0, exp, gathered(), "amax", include_self=False)
        return paths
    if op == "gather":
        return {"index_select": lambda: x.index_select(0, src), "x[index]": lambda: x[src]}
    if op == "sddmm":
        y = torch.randn(N, F, generator=gen)
        return {"(a[src]*b[dst]).sum": lambda: (x[src] * y[dst]).view(E, HEADS, F // HEADS).sum(-1)}
    if op == "segment_softmax":
        s = torch.randn(E, HEADS, generator=gen)
        exp = dst[:, None].expand(E, HEADS)
        def pyg_softmax():
            m = torch.zeros(N, HEADS).scatter_reduce_(0, exp, s, "amax", include_self=False)
            e = (s - m[dst]).exp()
            d = torch.zeros(N, HEADS).index_add_(0, dst, e)
            return e / (d[dst] + 1e-16)
        return {"pyg softmax": pyg_softmax}
    raise ValueError(op)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="gnnrt build directory")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("--quick", action="store_true", help="F = 64 only")
    ap.add_argument("--edges", default="1000000,4000000")
    ap.add_argument("--features", default="16,64,128")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--ops", default=",".join(c[2] for c in CASES), help="gnnrt benchmark names")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds per case (fresh gnnrt process, then torch); medians are reported")
    args = ap.parse_args()
    es = [int(v) for v in args.edges.split(",")]
    fs = [64] if args.quick else [int(v) for v in args.features.split(",")]
    ts = [int(v) for v in args.threads.split(",")]
    wanted = set(args.ops.split(","))
    cases = [c for c in CASES if c[2] in wanted]

    # Case by case: gnnrt's benchmark for one op, E and F (both thread
    # counts), then torch's paths for it, so that both sides of each ratio are
    # measured within the same minute on this shared, noisy machine.
    rows = []
    triads = {t: [] for t in ts}
    context = {}
    med = statistics.median
    for E in es:
        for F in fs:
            for op, reduce, name in cases:
                if op == "segment_softmax" and F != 16:
                    continue
                paths = torch_paths(op, reduce, E, F, torch.Generator().manual_seed(E + F))
                ours = {t: [] for t in ts}    # (ms, bytes/s, triad bytes/s) per round
                theirs = {t: [] for t in ts}  # torch ms of the fastest path
                best = {}
                for _ in range(args.rounds):
                    gnnrt, context = run_gnnrt(args.build, [name], [E], [F], ts)
                    for t in ts:
                        key = f"{name}/E:{E}/F:{F}/threads:{t}/real_time"
                        if key not in gnnrt:
                            continue
                        ours[t].append(gnnrt[key])
                        torch.set_num_threads(t)
                        if t not in best:
                            torch_ms, best[t] = fastest(paths)
                            theirs[t].append(torch_ms)
                        else:
                            theirs[t] += timed(paths[best[t]], 1)
                for t in ts:
                    if not ours[t]:
                        continue
                    ms = med(m for m, _, _ in ours[t])
                    torch_ms = med(theirs[t])
                    triad_bps = med(tr for _, _, tr in ours[t])
                    pct = med(100.0 * b / tr for _, b, tr in ours[t])
                    triads[t].append(triad_bps)
                    row = {"op": op, "reduce": reduce, "E": E, "F": F, "threads": t,
                           "gnnrt_ms": round(ms, 3), "torch_ms": round(torch_ms, 3),
                           "ratio": round(torch_ms / ms, 2), "pct_triad": round(pct, 1),
                           "triad_gbps": round(triad_bps / 1e9, 2), "torch_path": best[t],
                           "gnnrt_ms_rounds": [round(m, 3) for m, _, _ in ours[t]],
                           "torch_ms_rounds": [round(m, 3) for m in theirs[t]]}
                    rows.append(row)
                    print(f"{op:16} {reduce:12} E={E:8} F={F:3} t={t} gnnrt {ms:9.2f} ms  "
                          f"torch {torch_ms:9.2f} ms ({best[t]})  x{row['ratio']:.2f}  "
                          f"{row['pct_triad']:.0f}% of {row['triad_gbps']:.1f} GB/s triad  "
                          f"rounds gnnrt {row['gnnrt_ms_rounds']} torch {row['torch_ms_rounds']}",
                          file=sys.stderr)
                del paths
    triad = {t: statistics.median(triads[t]) for t in ts if triads[t]}
    print(f"\nCPU: {context.get('host_name', '?')}, {context.get('num_cpus', '?')} cores; "
          f"torch {torch.__version__}; {args.rounds} rounds per case; triad (median over the cases) " +
          ", ".join(f"{triad[t] / 1e9:.1f} GB/s ({t} thread{'s' if t > 1 else ''})" for t in triad) + "\n")
    print("| op | reduce | E | F | threads | gnnrt ms | torch ms (fastest path) | torch / gnnrt | % of triad |")
    print("|---|---|---:|---:|---:|---:|---|---:|---:|")
    for r in rows:
        print(f"| {r['op']} | {r['reduce']} | {r['E']:.0e} | {r['F']} | {r['threads']} | "
              f"{r['gnnrt_ms']:.1f} | {r['torch_ms']:.1f} ({r['torch_path']}) | "
              f"{r['ratio']:.2f} | {r['pct_triad']:.0f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
