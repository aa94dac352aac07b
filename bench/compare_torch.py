#!/usr/bin/python3
"""gnnrt's kernels against torch 1.13's CPU paths, on the same machine in the
same run, with a STREAM triad for the memory-bandwidth yardstick.

For each case (op, reduce, E edges, F features, threads) it runs gnnrt's
Google Benchmark binary and every torch path that computes the same thing
(index_add_, scatter_add_, scatter_reduce, index_reduce, PyG's recipes,
torch.sparse.mm with COO or CSR), and compares with the fastest torch path.
Inputs are uniform random, N = E / 10, as in bench/kernels_bench.cc; torch's
message tensors are materialised before timing, as PyG's MessagePassing
holds them.

torch under two allocator settings. glibc hands an allocation above its
mmap threshold (dynamic, at most 32 MiB) to mmap and gives it back to the
kernel on free, so each large torch output is fresh memory whose every
4 KiB page faults on first touch. torch is therefore timed in two worker
processes, started once with these environments:
  default  the environment unchanged
  nommap   MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2^40: no mmap, and no
           trimming of the heap top. Both are needed: MALLOC_MMAP_MAX_=0
           alone also fixes the trim threshold at 128 KiB (setting any
           malloc parameter turns the dynamic threshold off), so freeing a
           large block at the heap top returns it to the kernel all the
           same and the next allocation faults as before (measured here:
           ~50,000 minor faults for a 205 MB torch.zeros either way, 0 with
           both variables)
Each worker reports the median minor page faults of one timed call
(torch_faults_*), so the table shows whether the setting took effect.
gnnrt's kernels_bench runs with --gnnrt-malloc (nommap by default, the same
variables) so both sides see the same allocator.

  ratio     = median torch_ms / median gnnrt_ms (above 1: gnnrt is faster),
              torch_ms the faster of the two torch settings' medians
  pct_triad = median over rounds of gnnrt's effective bytes/s / triad
              bytes/s at the same threads, the triad measured by the same
              benchmark run right after the kernel's timing loop
              (kernels_bench's triad_bytes_per_second)

Each case runs in --rounds rounds (3 by default), one after another: a
fresh gnnrt process for that op, E and F (both thread counts), then torch's
paths in each worker (default then nommap, the other order in every other
round). The first round times every torch path and picks the fastest per
thread count and setting; later rounds time that path again. So both sides
of a ratio, and a kernel and its triad, are measured in the same minutes,
and a slow spell of this shared VM (its random-access speed moves by 2-4x
between minutes; a fresh process also gets fresh pages) shows up as one
round of three, not as the case's figure. A timed torch call includes
freeing its output (as before: the result is dropped inside the timing).

Usage:
  /usr/bin/python3 bench/compare_torch.py --build build [--json FILE] [--quick]
      [--torch-malloc default,nommap] [--gnnrt-malloc nommap|default]
Prints a Markdown table; --json also writes the rows as a JSON list: {op,
reduce, E, F, threads, gnnrt_ms, gnnrt_malloc, torch_ms (faster setting),
torch_path, torch_malloc (which setting was faster), ratio, pct_triad,
triad_gbps, torch_ms_default, torch_path_default, torch_faults_default,
torch_ms_nommap, torch_path_nommap, torch_faults_nommap, gnnrt_ms_rounds,
torch_ms_rounds_default, torch_ms_rounds_nommap} (a setting left out of
--torch-malloc has no fields).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

torch = None  # imported by the --worker processes only (see serve())

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
# glibc malloc settings torch (and gnnrt) run under; see the docstring.
MALLOC = {
    "default": {},
    "nommap": {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)},
}
MALLOC_VARS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
               "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")


def malloc_env(setting):
    """os.environ with `setting`'s variables (and no other malloc variable)."""
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_VARS}
    env.update(MALLOC[setting])
    return env


def run_gnnrt(build, names, es, fs, threads, repetitions=1, env=None):
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
    subprocess.run(cmd, check=True, stdout=sys.stderr, env=env)
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


def minflt():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed(fn, runs):
    """(ms, minor page faults) of each of `runs` calls; the result is freed
    inside the timing."""
    samples = []
    for _ in range(runs):
        f0 = minflt()
        t0 = time.perf_counter()
        fn()
        samples.append(((time.perf_counter() - t0) * 1e3, minflt() - f0))
    return samples


def fastest(paths):
    """Times each path once, repeats those within 1.3x of the best twice more,
    and returns (median ms, path name, median faults per call) of the fastest."""
    first = {}
    for name, fn in paths.items():
        fn()  # warm-up (allocations, lazy init)
        first[name] = timed(fn, 1)
    best = min(t[0][0] for t in first.values())
    medians = {}
    for name, t in first.items():
        if t[0][0] <= 1.3 * best:
            t += timed(paths[name], 2)
        medians[name] = statistics.median(ms for ms, _ in t)
    name = min(medians, key=medians.get)
    return medians[name], name, statistics.median(f for _, f in first[name])


def serve():
    """--worker: times torch's paths on request, one JSON line per line read
    from stdin: {"cmd": "info"}; {"cmd": "case", op, reduce, E, F} builds the
    case's inputs and paths (dropping the previous case's); {"cmd": "time",
    threads, path}: path null times every path (fastest()), else that path
    once. Runs in its own process so that the malloc environment it was
    started with holds from the first allocation."""
    global torch
    import torch as torch_module
    torch = torch_module
    paths = None
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "info":
            reply = {"torch": torch.__version__,
                     "env": {k: os.environ[k] for k in MALLOC_VARS if k in os.environ}}
        elif msg["cmd"] == "case":
            paths = None  # free the previous case's tensors first
            paths = torch_paths(msg["op"], msg["reduce"], msg["E"], msg["F"],
                                torch.Generator().manual_seed(msg["E"] + msg["F"]))
            reply = {"paths": list(paths)}
        elif msg["cmd"] == "time":
            torch.set_num_threads(msg["threads"])
            if msg["path"] is None:
                ms, path, faults = fastest(paths)
            else:
                path = msg["path"]
                (ms, faults), = timed(paths[path], 1)
            reply = {"ms": ms, "path": path, "faults": faults}
        else:
            raise ValueError(f"compare_torch worker: unknown command {msg['cmd']!r}")
        print(json.dumps(reply), flush=True)


class TorchWorker:
    """A `--worker` process started with one malloc setting."""

    def __init__(self, setting):
        self.setting = setting
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=malloc_env(setting))
        self.info = self.call({"cmd": "info"})

    def call(self, msg):
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"compare_torch: the torch worker ({self.setting}) died "
                             f"(exit {self.proc.wait()})")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


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


def csv(allowed):
    def parse(text):
        items = [v for v in text.split(",") if v]
        bad = [v for v in items if v not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {sorted(allowed)}")
        return items
    return parse


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
    ap.add_argument("--torch-malloc", type=csv(MALLOC), default=list(MALLOC),
                    help="torch's malloc settings, one worker process each (default: "
                         "default,nommap); the ratio is against the faster")
    ap.add_argument("--gnnrt-malloc", choices=list(MALLOC), default="nommap",
                    help="the malloc setting kernels_bench runs under (default: nommap)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # internal
    args = ap.parse_args()
    if args.worker:
        serve()
        return
    es = [int(v) for v in args.edges.split(",")]
    fs = [64] if args.quick else [int(v) for v in args.features.split(",")]
    ts = [int(v) for v in args.threads.split(",")]
    wanted = set(args.ops.split(","))
    cases = [c for c in CASES if c[2] in wanted]
    settings = args.torch_malloc
    workers = {m: TorchWorker(m) for m in settings}
    gnnrt_env = malloc_env(args.gnnrt_malloc)

    # Case by case: gnnrt's benchmark for one op, E and F (both thread
    # counts), then torch's paths for it in each worker, so that both sides
    # of each ratio are measured within the same minute on this shared,
    # noisy machine.
    rows = []
    triads = {t: [] for t in ts}
    context = {}
    med = statistics.median
    for E in es:
        for F in fs:
            for op, reduce, name in cases:
                if op == "segment_softmax" and F != 16:
                    continue
                for w in workers.values():
                    w.call({"cmd": "case", "op": op, "reduce": reduce, "E": E, "F": F})
                ours = {t: [] for t in ts}  # (ms, bytes/s, triad bytes/s) per round
                theirs = {(m, t): [] for m in settings for t in ts}  # ms of the fastest path
                faults = {(m, t): [] for m in settings for t in ts}
                best = {}  # (setting, threads) -> torch path
                for rnd in range(args.rounds):
                    gnnrt, context = run_gnnrt(args.build, [name], [E], [F], ts, env=gnnrt_env)
                    order = settings if rnd % 2 == 0 else settings[::-1]
                    for t in ts:
                        key = f"{name}/E:{E}/F:{F}/threads:{t}/real_time"
                        if key not in gnnrt:
                            continue
                        ours[t].append(gnnrt[key])
                        for m in order:
                            r = workers[m].call({"cmd": "time", "threads": t,
                                                 "path": best.get((m, t))})
                            best[(m, t)] = r["path"]
                            theirs[(m, t)].append(r["ms"])
                            faults[(m, t)].append(r["faults"])
                for t in ts:
                    if not ours[t]:
                        continue
                    ms = med(m for m, _, _ in ours[t])
                    torch_ms = {m: med(theirs[(m, t)]) for m in settings}
                    faster = min(torch_ms, key=torch_ms.get)
                    triad_bps = med(tr for _, _, tr in ours[t])
                    pct = med(100.0 * b / tr for _, b, tr in ours[t])
                    triads[t].append(triad_bps)
                    row = {"op": op, "reduce": reduce, "E": E, "F": F, "threads": t,
                           "gnnrt_ms": round(ms, 3), "gnnrt_malloc": args.gnnrt_malloc,
                           "torch_ms": round(torch_ms[faster], 3),
                           "torch_path": best[(faster, t)], "torch_malloc": faster,
                           "ratio": round(torch_ms[faster] / ms, 2), "pct_triad": round(pct, 1),
                           "triad_gbps": round(triad_bps / 1e9, 2)}
                    for m in settings:
                        row[f"torch_ms_{m}"] = round(torch_ms[m], 3)
                        row[f"torch_path_{m}"] = best[(m, t)]
                        row[f"torch_faults_{m}"] = med(faults[(m, t)])
                    row["gnnrt_ms_rounds"] = [round(m, 3) for m, _, _ in ours[t]]
                    for m in settings:
                        row[f"torch_ms_rounds_{m}"] = [round(v, 3) for v in theirs[(m, t)]]
                    rows.append(row)
                    torch_text = "  ".join(
                        f"torch {m} {torch_ms[m]:9.2f} ms ({best[(m, t)]}, "
                        f"{row[f'torch_faults_{m}']:.0f} faults) {row[f'torch_ms_rounds_{m}']}"
                        for m in settings)
                    print(f"{op:16} {reduce:12} E={E:8} F={F:3} t={t} gnnrt {ms:9.2f} ms "
                          f"{row['gnnrt_ms_rounds']}  {torch_text}  x{row['ratio']:.2f} "
                          f"(vs {faster})  {row['pct_triad']:.0f}% of "
                          f"{row['triad_gbps']:.1f} GB/s triad", file=sys.stderr)
    torch_version = next(iter(workers.values())).info["torch"]
    for w in workers.values():
        w.close()
    triad = {t: statistics.median(triads[t]) for t in ts if triads[t]}
    print(f"\nCPU: {context.get('host_name', '?')}, {context.get('num_cpus', '?')} cores; "
          f"torch {torch_version}; {args.rounds} rounds per case; gnnrt under malloc "
          f"{args.gnnrt_malloc}; triad (median over the cases) " +
          ", ".join(f"{triad[t] / 1e9:.1f} GB/s ({t} thread{'s' if t > 1 else ''})" for t in triad))
    print("torch malloc settings: " + "; ".join(
        f"{m} = " + (" ".join(f"{k}={v}" for k, v in MALLOC[m].items()) or "environment unchanged")
        for m in settings) + "; torch / gnnrt uses the faster of them\n")
    heads = {"default": "torch ms, malloc default (path)",
             "nommap": "torch ms, malloc nommap (path)"}
    print("| op | reduce | E | F | threads | gnnrt ms | " +
          " | ".join(heads[m] for m in settings) + " | torch (faster) / gnnrt | % of triad |")
    print("|---|---|---:|---:|---:|---:|" + "---|" * len(settings) + "---:|---:|")
    for r in rows:
        torch_cols = " | ".join(f"{r[f'torch_ms_{m}']:.1f} ({r[f'torch_path_{m}']})"
                                for m in settings)
        print(f"| {r['op']} | {r['reduce']} | {r['E']:.0e} | {r['F']} | {r['threads']} | "
              f"{r['gnnrt_ms']:.1f} | {torch_cols} | {r['ratio']:.2f} | {r['pct_triad']:.0f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
