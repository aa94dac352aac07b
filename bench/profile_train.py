#!/usr/bin/python3
"""Where a train step's time goes, per configuration.

Runs build/bench/train_bench --profile N for each model, data set, thread
count and dropout setting, and sums its per-op median times (the op trace
`gnnrt train --trace` writes, runtime/core.h) into the classes of work the
floor counts differently:

  first layer  the sparse product of the input features and its weight
               gradient, the sparse input's dropout (sparse features:
               train_bench's --features auto on Cora, CiteSeer, PubMed)
  blas         the dense matmuls (OpenBLAS)
  aggregate    spmm, scatter, gather and their gradients, gcn_norm
  attention    sddmm, head_dot, the segment and attention softmaxes and
               their gradients, edge_scale
  elementwise  bias, activations, dropout, losses and their gradients
  optimizer    adam / sgd updates
  executor     the median step's wall time minus its ops' summed times

Prints a markdown table and writes JSON (one object per configuration:
wall_us, ops_us, classes {name: us}, top [[kind, scope, us], ...]).

    /usr/bin/python3 bench/profile_train.py --gnnrt build/bench/train_bench
"""
import argparse
import itertools
import json
import os
import re
import subprocess
import sys

CLASSES = {
    "first layer": {"sparse_matmul", "sparse_matmul_grad_b", "sparse_dropout"},
    "blas": {"matmul"},
    "aggregate": {"spmm", "spmm_grad_x", "spmm_grad_w", "scatter", "scatter_grad", "gather",
                  "gather_grad", "gcn_norm", "divide_rows", "keep_winners"},
    "attention": {"sddmm_add", "sddmm_dot", "sddmm_add_grad_a", "sddmm_add_grad_b",
                  "sddmm_dot_grad_a", "sddmm_dot_grad_b", "head_dot", "head_dot_grad_x",
                  "head_dot_grad_att", "head_mean", "head_mean_grad", "segment_softmax",
                  "segment_softmax_grad", "attention_softmax", "attention_softmax_grad",
                  "segment_max", "segment_exp_sum", "segment_exp_sum_grad",
                  "segment_softmax_apply", "segment_softmax_apply_grad_s", "edge_scale",
                  "edge_dot"},
    "optimizer": {"adam_update", "sgd_update"},
}
ORDER = ["first layer", "blas", "aggregate", "attention", "elementwise", "optimizer", "executor"]
# train_bench's lines: "  45.2 us  3.9%   12 spmm  conv1  2t [2708,64]"; an
# op may have no scope ("accumulate") and no shape.
OP_LINE = re.compile(r"^\s*([\d.]+) us\s+[\d.]+%\s+(\d+) (\S+)\s+(\S*)\s+(\d+)t")
STEP_LINE = re.compile(r"median step: wall ([\d.]+) us, its ops ([\d.]+) us")
OPS_LINE = re.compile(r"train step: (\d+) ops")


def op_class(kind):
    for name, kinds in CLASSES.items():
        if kind in kinds:
            return name
    return "elementwise"


def profile(gnnrt, data_dir, model, threads, dropout, steps, min_seconds):
    cmd = [gnnrt, "--dataset-dir", data_dir, "--model", model, "--threads", str(threads),
           "--dropout", dropout, "--min-seconds", str(min_seconds), "--profile", str(steps)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = ops = count = None
    classes = dict.fromkeys(ORDER, 0.0)
    top = []
    for line in p.stderr.splitlines():
        m = STEP_LINE.search(line)
        if m:
            wall, ops = float(m.group(1)), float(m.group(2))
            continue
        m = OPS_LINE.search(line)
        if m:
            count = int(m.group(1))
            continue
        m = OP_LINE.match(line)
        if m:
            us, kind, scope = float(m.group(1)), m.group(3), m.group(4)
            classes[op_class(kind)] += us
            top.append([kind, scope, us])
    if wall is None or count != len(top):
        sys.exit(f"read {len(top)} ops of {count} from the profile in the output of "
                 f"{' '.join(cmd)}:\n{p.stderr}")
    # The classes sum the per-op medians, the step's "its ops" is the median
    # of per-step sums; the executor share is the wall time beyond the latter.
    classes["executor"] = max(wall - ops, 0.0)
    return {"model": model, "dataset": os.path.basename(os.path.normpath(data_dir)),
            "threads": threads, "dropout": dropout, "wall_us": wall, "ops_us": ops,
            "classes": classes, "top": top[:3]}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gnnrt", default=os.path.join(here, "..", "build", "bench", "train_bench"))
    ap.add_argument("--datasets", default=os.path.join(here, "..", "..", "shared", "datasets"))
    ap.add_argument("--data", default="cora,citeseer")
    ap.add_argument("--models", default="gcn,sage,gat")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dropout", default="on,off")
    ap.add_argument("--steps", type=int, default=200, help="traced steps per configuration")
    ap.add_argument("--min-seconds", type=float, default=0.5,
                    help="timed runs before tracing (the thread tuner settles in them)")
    ap.add_argument("--json", help="default: next to train_bench, profile_train.json")
    args = ap.parse_args()
    rows = []
    for data, model, threads, dropout in itertools.product(
            args.data.split(","), args.models.split(","),
            [int(t) for t in args.threads.split(",")], args.dropout.split(",")):
        print(f"profiling {model} on {data}, {threads} thread(s), dropout {dropout}",
              file=sys.stderr)
        rows.append(profile(args.gnnrt, os.path.join(args.datasets, data), model, threads,
                            dropout, args.steps, args.min_seconds))
    print("| model | dataset | threads | dropout | step µs | " +
          " | ".join(f"{c} µs (%)" for c in ORDER) + " | slowest op |")
    print("|---|---|---:|---|---:|" + "---:|" * len(ORDER) + "---|")
    for r in rows:
        cells = [f"{r['classes'][c]:.0f} ({100 * r['classes'][c] / r['wall_us']:.0f})"
                 for c in ORDER]
        kind, scope, us = r["top"][0]
        print(f"| {r['model']} | {r['dataset']} | {r['threads']} | {r['dropout']} | "
              f"{r['wall_us']:.0f} | " + " | ".join(cells) + f" | {kind} ({scope}) {us:.0f} |")
    out = args.json or os.path.join(os.path.dirname(os.path.abspath(args.gnnrt)),
                                    "profile_train.json")
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
