#!/usr/bin/python3
"""Full-graph GNN training and inference in PyTorch 1.13 on the CPU: the
yardstick for gnnrt's trainer on the same machine.

The models are tests/reference/gnn_reference.py's (PyG 2.3's layers written
with plain torch ops, the path PyG itself takes on a CPU without
torch_scatter/torch_sparse: gather the messages, then index_add /
scatter_reduce). For each (model, data set, threads, dropout) it measures,
in a fresh subprocess so that peak memory belongs to that configuration
alone:

  train_ms     median of one step: forward + masked NLL + backward + Adam
               (lr 0.01, weight decay 5e-4), model.train()
  infer_ms     median of one eval-mode forward under torch.no_grad()
  peak_rss_mb  the process's ru_maxrss at the end (Python + torch + data +
               the timed runs); import_rss_mb is ru_maxrss right after
               importing torch, to tell the interpreter's share apart

Each timing follows 3 warm-up calls and repeats until it has at least
--min-reps samples and --min-seconds of them. GCN recomputes its self loops
and normalisation every call, as PyG does with its default cached=False.

Dropout (--dropout, default on,off: both variants of every configuration):
  on   the models' own probabilities below (input, hidden and, for GAT,
       attention dropout)
  off  every probability 0: the input and hidden dropout and GAT's
       attention dropout (build_model(dropout=0) reaches all of them; on
       the CPU F.dropout with p = 0 returns its input, and the worker checks
       that a train-mode forward equals the eval-mode one), so the train
       step is the same arithmetic without any mask
gnnrt's train_bench gets the same choice (--dropout on|off).

Models (--models): gcn (hidden 16, dropout 0.5 on the input and the hidden
layer), sage (mean, hidden 16, dropout 0.5), gat (8 heads x 8, dropout 0.6
on the input, the hidden layer and the attention, one output head), gcn256
(gcn with hidden 256; PubMed only). Data sets (--datasets): cora, citeseer,
pubmed (folder pubmed_synthx) under --datasets-root.

With --gnnrt BINARY it runs gnnrt's build/bench/train_bench right after
torch on each configuration (--dropout on|off, --features from
--gnnrt-features: auto | dense | sparse) and prints a comparison table
first: the torch / gnnrt ratios (above 1: gnnrt is faster / smaller) and,
where train_bench reports them, the features' form it ran (dense or
sparse) and its roofline floor for the train step, as issue 15 defines it,
  floor_ms = must_move_bytes / triad + step_flops / sgemm
from the bytes the step must move (features, graph indices, parameters,
gradients and Adam moments, labels, each forward value written and read
once), the compiled step's flops (gnnrt's cost model), the triad
bandwidth measured at that thread count and the SGEMM rate of one core,
with train_ms / floor_ms ("gnnrt train / floor"). On two threads the
all-cores floor prices the flops at the SGEMM rate of both threads
("train / all-cores floor", stricter; the tables' floor before
2026-12-01). The cost-model floor puts the cost model's bytes (every op's
operands and results) in place of what must move. Fields an older
train_bench does not print show as "-".

Rounds (--rounds R, default 1): each configuration runs R times in a row,
torch then gnnrt, each in a fresh process, and its row holds the medians of
the rounds (train_ms, infer_ms, floor_ms, triad_gbs, sgemm_gflops, and
floor_multiple as the median of each round's train_ms / floor_ms, the
same for the all-cores floor, so a
round's time meets the floor measured in its own minute); peak RSS is the
largest. The rounds' own figures are kept under "rounds". This VM's triad
moves by 1.5x from minute to minute, and a single round's floor with it.
On two threads the table also gives train_bench's core_round_trip_ns (a
cache line from one thread to the other and back): this VM's two cores
either share a cache complex (100-170 ns) or not (450-620 ns), which
decides whether a small step gains from the second thread at all.

Usage:
  /usr/bin/python3 bench/compare_torch_train.py [--models gcn,sage,gat,gcn256]
      [--datasets cora,citeseer,pubmed] [--threads 1,2] [--dropout on,off]
      [--gnnrt build/bench/train_bench [--gnnrt-features auto]] [--flush-denormals on]
      [--rounds R] [--json FILE]
Prints Markdown tables and writes the rows as a JSON list to --json
(default build/bench/compare_torch_train.json): torch rows are
{system: "torch", model, model_key, dataset, hidden, heads, threads,
dropout ("on"/"off"), dropout_p, train_ms, infer_ms, peak_rss_mb,
import_rss_mb, reps_train, reps_infer, blas_kernels, flush_denormals}; gnnrt rows are
train_bench's object (with dropout, features, step_bytes, step_flops,
triad_gbs, sgemm_gflops, sgemm_all_gflops, blas_kernels,
core_round_trip_ns, floor_ms, floor_multiple, all_cores_floor_ms,
all_cores_floor_multiple where it prints them) plus model and model_key.
blas_kernels is the kernel set OpenBLAS picked for the CPU (both sides
load the same libopenblas here); the floor's SGEMM rate depends on it, and
Debian's OpenBLAS 0.3.21 picks a slower kernel set on some AVX-512 CPUs
(docs/benchmarks.md). Both sides flush subnormal floats to
zero (gnnrt's default, torch.set_flush_denormal(True); --flush-denormals
off: neither does): after ~1,500 steps
Adam's moments of weights that no longer get gradient become subnormal, and
each such operand costs x86 a microcode assist.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATASET_FOLDERS = {"cora": "cora", "citeseer": "citeseer", "pubmed": "pubmed_synthx"}
# --models name -> reference model and its settings; `datasets` restricts where it runs
MODELS = {
    "gcn": {"model": "gcn", "hidden": 16, "dropout": 0.5},
    "sage": {"model": "sage", "hidden": 16, "dropout": 0.5, "aggr": "mean"},
    "gat": {"model": "gat", "hidden": 8, "heads": 8, "dropout": 0.6},
    "gcn256": {"model": "gcn", "hidden": 256, "dropout": 0.5, "datasets": ["pubmed"]},
}
DROPOUT = ("on", "off")  # on: MODELS' probabilities; off: every p = 0
LR, WEIGHT_DECAY = 0.01, 5e-4
WARMUP = 3


def measure(fn, min_reps, min_seconds):
    for _ in range(WARMUP):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), len(times)


def worker(job):
    """Runs one configuration in this (fresh) process; returns its row."""
    import resource

    import torch
    import_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # gnnrt flushes subnormal floats to zero while it runs (the job's
    # device.flush_denormals, on by default), so torch computes the same way
    # (--flush-denormals off: neither): set before its OpenMP threads start,
    # which inherit the mode.
    want = job["flush_denormals"] == "on"
    flush = bool(torch.set_flush_denormal(want)) and want
    torch.set_num_threads(job["threads"])
    sys.path.insert(0, str(REPO / "tests" / "reference"))
    import gnn_reference as ref
    import gnn_jobs as jobs

    spec = MODELS[job["model_key"]]
    g = jobs.load_dataset(Path(job["datasets_root"]) / DATASET_FOLDERS[job["dataset"]])
    # "off": p = 0 everywhere. build_model's dropout also sets the input
    # dropout (input_dropout=None follows it) and GAT's attention dropout.
    p = spec["dropout"] if job["dropout"] == "on" else 0.0
    torch.manual_seed(0)
    model = ref.build_model(spec["model"], g.num_features, spec["hidden"], g.num_classes,
                            dropout=p, input_dropout=p, aggr=spec.get("aggr", "mean"),
                            heads=spec.get("heads", 1))
    if p == 0.0:
        # No dropout anywhere: a train-mode forward is the eval-mode one.
        with torch.no_grad():
            same = torch.equal(model.train()(g.x, g.edge_index),
                               model.eval()(g.x, g.edge_index))
        if not same:
            raise SystemExit("compare_torch_train: dropout off, but train mode differs from eval")
    opt = ref.make_optimizer("adam", model.parameters(), LR, WEIGHT_DECAY)

    train_ms, reps_train = measure(lambda: jobs.train_step(model, g, opt),
                                   job["min_reps"], job["min_seconds"])
    infer_ms, reps_infer = measure(lambda: jobs.predict(model, g),
                                   job["min_reps"], job["min_seconds"])
    return {"system": "torch", "model": spec["model"], "model_key": job["model_key"],
            "dataset": job["dataset"], "hidden": spec["hidden"], "heads": spec.get("heads", 1),
            "threads": job["threads"], "dropout": job["dropout"], "dropout_p": p,
            "train_ms": round(train_ms, 3), "infer_ms": round(infer_ms, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "import_rss_mb": round(import_rss_mb, 1),
            "reps_train": reps_train, "reps_infer": reps_infer,
            "blas_kernels": blas_kernels(), "flush_denormals": "on" if flush else "off"}


def blas_kernels():
    """The kernel set of the OpenBLAS that torch loaded (Debian's torch links
    it through libblas.so.3), or None where this process has none."""
    import ctypes
    try:
        lib = ctypes.CDLL("libopenblas.so.0", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None
    try:
        lib.openblas_get_corename.restype = ctypes.c_char_p
    except AttributeError:  # a libopenblas without it
        return None
    return lib.openblas_get_corename().decode()


def run_job(job):
    env = dict(os.environ)
    # Pin every pool a library may start to the measured thread count.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(job["threads"])
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(job)],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"compare_torch_train: {job['model_key']} on {job['dataset']} with "
                         f"{job['threads']} thread(s), dropout {job['dropout']} failed "
                         f"(exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_gnnrt(binary, job):
    """The same configuration through gnnrt's train_bench (its own process)."""
    proc = subprocess.run(
        [str(binary), "--dataset-dir",
         str(Path(job["datasets_root"]) / DATASET_FOLDERS[job["dataset"]]),
         "--dataset-name", job["dataset"], "--model", job["model_key"],
         "--threads", str(job["threads"]), "--min-reps", str(job["min_reps"]),
         "--min-seconds", str(job["min_seconds"]), "--dropout", job["dropout"],
         "--features", job["gnnrt_features"], "--flush-denormals", job["flush_denormals"]],
        capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"compare_torch_train: gnnrt {job['model_key']} on {job['dataset']}, "
                         f"dropout {job['dropout']} failed (exit {proc.returncode})")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["model"] = MODELS[job["model_key"]]["model"]
    row["model_key"] = job["model_key"]
    row.setdefault("dropout", job["dropout"])
    return row


def combine(rounds):
    """One row from a configuration's rounds: medians (see --rounds)."""
    if len(rounds) == 1:
        return rounds[0]
    row = dict(rounds[0])
    for key in ("train_ms", "infer_ms", "floor_ms", "all_cores_floor_ms", "cost_model_floor_ms",
                "triad_gbs", "sgemm_gflops", "sgemm_all_gflops", "core_round_trip_ns"):
        if all(r.get(key) is not None for r in rounds):
            row[key] = statistics.median(r[key] for r in rounds)
    for floor in ("floor", "all_cores_floor"):
        if all(f"{floor}_ms" in r for r in rounds):
            row[f"{floor}_multiple"] = statistics.median(r["train_ms"] / r[f"{floor}_ms"] for r in rounds)
    row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in rounds)
    row["rounds"] = [{k: r[k] for k in ("train_ms", "infer_ms", "floor_ms", "all_cores_floor_ms",
                                        "triad_gbs", "core_round_trip_ns") if k in r} for r in rounds]
    return row


def fmt(value, spec=".1f", suffix=""):
    """value formatted, or "-" where a (older) train_bench did not report it."""
    return "-" if value is None else f"{value:{spec}}{suffix}"


def print_comparison(rows):
    """torch / gnnrt ratios per configuration (> 1: gnnrt is faster / smaller),
    with gnnrt's features' form and its train step against its roofline floor."""
    by_key = {}
    for r in rows:
        key = (r["model_key"], r["dataset"], r["threads"], r.get("dropout", "on"))
        by_key.setdefault(key, {})[r["system"]] = r
    print("| model | dataset | threads | dropout | torch train ms | gnnrt train ms | "
          "train speed-up | gnnrt features | floor ms | gnnrt train / floor | train / all-cores floor | "
          "cost-model floor ms | torch infer ms | gnnrt infer ms | infer speed-up | torch RSS MB | "
          "gnnrt RSS MB | core round trip ns |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (key, dataset, threads, dropout), pair in by_key.items():
        if "torch" not in pair or "gnnrt" not in pair:
            continue
        t, g = pair["torch"], pair["gnnrt"]
        floor_ms = g.get("floor_ms")
        multiple = g.get("floor_multiple")
        if multiple is None and floor_ms:
            multiple = g["train_ms"] / floor_ms
        print(f"| {key} | {dataset} | {threads} | {dropout} | {t['train_ms']:.1f} | "
              f"{g['train_ms']:.2f} | {t['train_ms'] / g['train_ms']:.2f}x | "
              f"{g.get('features', '-')} | {fmt(floor_ms, '.2f')} | {fmt(multiple, '.2f', 'x')} | "
              f"{fmt(g.get('all_cores_floor_multiple'), '.2f', 'x')} | "
              f"{fmt(g.get('cost_model_floor_ms'), '.2f')} | "
              f"{t['infer_ms']:.1f} | {g['infer_ms']:.1f} | {t['infer_ms'] / g['infer_ms']:.2f}x | "
              f"{t['peak_rss_mb']:.0f} | {g['peak_rss_mb']:.0f} | "
              f"{fmt(g.get('core_round_trip_ns'), '.0f')} |")
    print()
    by_system = {}
    for r in rows:
        if r.get("blas_kernels"):
            by_system.setdefault(r["system"], set()).add(r["blas_kernels"])
    if by_system:
        print("OpenBLAS kernels: " + "; ".join(f"{s} {', '.join(sorted(k))}"
                                               for s, k in sorted(by_system.items())))
        print()


def csv_list(allowed):
    def parse(text):
        items = [s for s in text.split(",") if s]
        bad = [s for s in items if s not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad}; choose from {sorted(allowed)}")
        return items
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=csv_list(MODELS), default=list(MODELS))
    ap.add_argument("--datasets", type=csv_list(DATASET_FOLDERS), default=list(DATASET_FOLDERS))
    ap.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=[1, 2])
    ap.add_argument("--dropout", type=csv_list(DROPOUT), default=list(DROPOUT),
                    help="on: the models' dropout; off: every p = 0, GAT's attention "
                         "dropout too (default: on,off)")
    ap.add_argument("--datasets-root", type=Path, default=REPO.parent / "shared" / "datasets")
    ap.add_argument("--min-reps", type=int, default=10)
    ap.add_argument("--min-seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run each configuration this many times (torch, then gnnrt) and report "
                         "the medians (default: %(default)s)")
    ap.add_argument("--json", type=Path, default=REPO / "build" / "bench" / "compare_torch_train.json",
                    help="write the rows here as a JSON list (default: %(default)s)")
    ap.add_argument("--gnnrt", type=Path,
                    help="also run gnnrt's build/bench/train_bench on each configuration, right "
                         "after torch, and print the speed-up and memory ratios")
    ap.add_argument("--gnnrt-features", choices=["auto", "dense", "sparse"], default="auto",
                    help="train_bench's --features: the form of gnnrt's input features "
                         "(auto: sparse when mostly zero; default: auto)")
    ap.add_argument("--flush-denormals", choices=["on", "off"], default="on",
                    help="on: both sides flush subnormal floats to zero (gnnrt's default, "
                         "torch.set_flush_denormal(True)); off: neither does (default: on)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one configuration
    args = ap.parse_args()

    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return

    rows = []
    for dataset in args.datasets:
        for key in args.models:
            if dataset not in MODELS[key].get("datasets", [dataset]):
                continue
            for threads in args.threads:
                for dropout in args.dropout:
                    job = {"model_key": key, "dataset": dataset, "threads": threads,
                           "dropout": dropout, "gnnrt_features": args.gnnrt_features,
                           "flush_denormals": args.flush_denormals,
                           "datasets_root": str(args.datasets_root.resolve()),
                           "min_reps": args.min_reps, "min_seconds": args.min_seconds}
                    print(f"running {key} on {dataset}, {threads} thread(s), dropout {dropout}",
                          file=sys.stderr)
                    torch_rounds, gnnrt_rounds = [], []
                    for _ in range(args.rounds):
                        torch_rounds.append(run_job(job))
                        if args.gnnrt:
                            gnnrt_rounds.append(run_gnnrt(args.gnnrt, job))
                    rows.append(combine(torch_rounds))
                    if args.gnnrt:
                        rows.append(combine(gnnrt_rounds))

    if args.gnnrt:
        print_comparison(rows)
    print("| system | model | dataset | hidden | threads | dropout | train ms | infer ms | "
          "peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        hidden = f"{r['heads']}x{r['hidden']}" if r["model"] == "gat" else str(r["hidden"])
        print(f"| {r['system']} | {r['model']} | {r['dataset']} | {hidden} | {r['threads']} | "
              f"{r.get('dropout', '-')} | {r['train_ms']:.2f} | {r['infer_ms']:.2f} | "
              f"{r['peak_rss_mb']:.0f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
