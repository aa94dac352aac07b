#!/usr/bin/python3
"""Multi-core training scaling: one model trained on 1, 2, 4 and 8 simulated
NeuronCores (MPI ranks), sparse halo exchange against dense (an all-reduce
of the whole N x F matrix, PyG's distributed full-graph method), on the
synthetic graph and on PubMed.

For every run it reports, per epoch (median over the epochs after the
first, and over --rounds runs of the configuration, interleaved):
  epoch_ms      wall time of one train step + one evaluation (rank 0)
  compute/halo/grad/wait ms   the epoch split by the trainer's counters:
                kernels, graph communication (halo ops and graph-statistic
                all-reduces), gradient all-reduce, the rest (host, metrics,
                waiting for the slowest rank)
  halo_bytes    measured (sent by all ranks, from --metrics) next to the
                partition's prediction (the shards' manifest; dense: ranks x
                N rows of each exchange)
  simulated_ms  the simulated clock (device profile's compute and link figures)
  peak RSS      of every rank (/usr/bin/time), the largest shown
Rank counts above the machine's cores run oversubscribed and are flagged.

Multi-rank runs read shards written by `gnnrt partition` (--shards), so a
rank holds only its share; np = 1 is `gnnrt train` alone (one core, the
whole graph). Targets (issue 13): synthetic np = 2 one thread per rank
>= 1.7x np = 1 one thread; halo bytes equal to the prediction; peak RSS
per rank at np = 2 <= 0.6x np = 1; PubMed sparse >= 2x dense at np = 2.

Usage:
  /usr/bin/python3 bench/scaling.py [--build build] [--ranks 1,2,4,8]
      [--workloads synthetic,synthetic_h90,pubmed] [--epochs 8] [--rounds 3]
      [--synthetic-nodes 250000] [--datasets-root ../shared/datasets] [--out build/bench/scaling]
      [--plot bench/plots/scaling_time_split.png]
Prints a Markdown table; writes OUT/scaling.json and the PNG.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORES = os.cpu_count() or 1

MODEL_GCN = """model {{
  layer {{ type: DROPOUT p: 0.5 }}
  layer {{ type: GCN out: {hidden} }}
  layer {{ type: RELU }}
  layer {{ type: DROPOUT p: 0.5 }}
  layer {{ type: GCN }}
}}
"""
WORKLOADS = {
    # 250k vertices x 10 = 2.5 M directed edges, 64 features, 16 classes; 2% of
    # the edges join random classes: METIS's 2-way replication factor (1.10)
    # is PubMed's (1.09).
    "synthetic": {
        "dataset": 'dataset {{ path: "synthetic:nodes={nodes},avg_degree=10,features=64,classes=16,'
                   'homophily=0.98,seed=1" }}',
        "nodes": 250000,
        "hidden": 64,
        "epochs": 8,
    },
    # The same with 10% random edges: far harder to partition (replication
    # 1.42 at 2 parts), so each rank holds and exchanges much more.
    "synthetic_h90": {
        "dataset": 'dataset {{ path: "synthetic:nodes={nodes},avg_degree=10,features=64,classes=16,'
                   'homophily=0.9,seed=1" }}',
        "nodes": 250000,
        "hidden": 64,
        "epochs": 8,
    },
    "pubmed": {
        "dataset": 'dataset {{ path: "{root}/pubmed_synthx" normalize_features: true }}',
        "hidden": 256,
        "epochs": 20,
    },
}


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def run(cmd, env=None, timeout=3600):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        log(" ".join(map(str, cmd)))
        log(p.stdout[-4000:] + p.stderr[-4000:])
        raise SystemExit(f"failed with exit status {p.returncode}")
    return p.stdout + p.stderr


def top_level(manifest, field):
    """A top-level scalar of the manifest (text format: not indented)."""
    m = re.search(rf"^{field}: (\S+)$", manifest, re.M)
    return float(m.group(1)) if m else None


def write_job(out, name, spec, args):
    job = out / name / "job.pbtxt"
    job.parent.mkdir(parents=True, exist_ok=True)
    dataset = spec["dataset"].format(nodes=spec.get("nodes", 0), root=args.datasets_root)
    job.write_text(f'name: "scaling_{name}"\n{dataset}\n' + MODEL_GCN.format(hidden=spec["hidden"]) +
                   f'schedule {{ epochs: {args.epochs or spec["epochs"]} }}\n'
                   'partition { method: METIS }\n')
    return job


def partition(gnnrt, job, ranks, folder):
    run([gnnrt, "partition", str(job), "--parts", str(ranks), "--out", str(folder)])
    manifest = (folder / "manifest.pbtxt").read_text()
    rows = top_level(manifest, "halo_rows")
    return {
        "replication_factor": top_level(manifest, "replication_factor"),
        "edge_balance": top_level(manifest, "edge_balance"),
        "nodes": top_level(manifest, "num_nodes"),
        "edges": top_level(manifest, "num_edges"),
        "predicted_sparse": top_level(manifest, "halo_bytes_per_epoch"),
        # bytes of one row of every exchange in an epoch
        "row_bytes": top_level(manifest, "halo_bytes_per_epoch") / rows if rows else 0.0,
    }


def train(gnnrt, job, ranks, threads, halo, shards, folder):
    """One run; returns its metrics lines and every rank's peak RSS (MB)."""
    folder.mkdir(parents=True, exist_ok=True)
    metrics = folder / "metrics.jsonl"
    for f in folder.glob("rss.*"):
        f.unlink()
    train_args = [gnnrt, "train", str(job), "--no-cache", "--threads", str(threads),
                  "--metrics", str(metrics)]
    env = dict(os.environ)
    if ranks == 1:
        cmd = ["/usr/bin/time", "-f", "%M", "-o", str(folder / "rss.0"), *train_args]
    else:
        train_args += ["--shards", str(shards), "--halo", halo]
        # Each rank's peak RSS into rss.<rank>.
        wrapped = ('exec /usr/bin/time -f %M -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"')
        cmd = ["mpirun", "--allow-run-as-root", "-np", str(ranks)]
        if ranks > CORES:
            cmd.append("--oversubscribe")
            env["OMPI_MCA_mpi_yield_when_idle"] = "1"
        cmd += ["sh", "-c", wrapped, str(folder), *train_args]
    start = time.perf_counter()
    run(cmd, env=env)
    wall = time.perf_counter() - start
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    rss = [int((folder / f"rss.{r}").read_text().split()[-1]) / 1024 for r in range(ranks)]
    return lines, rss, wall


def summarize(rounds):
    """Medians over the epochs after the first, then over the rounds."""
    def med(key):
        return statistics.median(statistics.median(e[key] for e in lines[1:]) for lines, _, _ in rounds)
    keys = ["ms", "compute_ms", "halo_ms", "grad_ms", "wait_ms", "simulated_ms"]
    row = {k: med(k) for k in keys}
    halo = {e["halo_bytes"] for lines, _, _ in rounds for e in lines}
    row["halo_bytes"] = sorted(halo)
    row["peak_rss_mb"] = max(max(rss) for _, rss, _ in rounds)
    row["rank_rss_mb"] = [max(r) for r in zip(*(rss for _, rss, _ in rounds))]
    row["epoch_ms_rounds"] = [statistics.median(e["ms"] for e in lines[1:]) for lines, _, _ in rounds]
    row["test_acc"] = rounds[0][0][-1]["test_acc"]
    row["loss"] = rounds[0][0][-1]["loss"]
    return row


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    workloads = sorted({r["workload"] for r in results}, key=list(WORKLOADS).index)
    fig, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 4.6), squeeze=False)
    parts = [("compute_ms", "compute", "#4c72b0"), ("halo_ms", "halo exchange", "#dd8452"),
             ("grad_ms", "gradient all-reduce", "#55a868"), ("wait_ms", "waiting / host", "#c44e52")]
    for ax, w in zip(axes[0], workloads):
        rows = [r for r in results if r["workload"] == w]
        labels = [f"np{r['ranks']}\n{r['threads']}t {r['halo'] if r['ranks'] > 1 else ''}"
                  + ("\n(over)" if r["oversubscribed"] else "") for r in rows]
        bottom = [0.0] * len(rows)
        for key, name, color in parts:
            values = [r[key] for r in rows]
            ax.bar(range(len(rows)), values, bottom=bottom, label=name, color=color)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_xticks(range(len(rows)), labels, fontsize=7)
        ax.set_ylabel("ms per epoch (rank 0)")
        ax.set_title(f"{w}: GCN hidden {WORKLOADS[w]['hidden']}", fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle("gnnrt train: epoch time split by rank count and halo mode "
                 f"({CORES} cores; 'over' = oversubscribed)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, default=REPO / "build")
    ap.add_argument("--out", type=Path, default=None, help="default BUILD/bench/scaling")
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--workloads", default="synthetic,synthetic_h90,pubmed")
    ap.add_argument("--epochs", type=int, default=0, help="epochs per run (default per workload)")
    ap.add_argument("--rounds", type=int, default=1, help="runs of every configuration, interleaved")
    ap.add_argument("--synthetic-nodes", type=int, default=WORKLOADS["synthetic"]["nodes"],
                    help="vertices of the synthetic graph (10 edges each)")
    ap.add_argument("--datasets-root", type=Path, default=(REPO / "../shared/datasets").resolve())
    ap.add_argument("--plot", type=Path, default=None, help="default OUT/scaling_time_split.png")
    args = ap.parse_args()
    for w in ("synthetic", "synthetic_h90"):
        WORKLOADS[w]["nodes"] = args.synthetic_nodes
    gnnrt = str(args.build / "launch" / "gnnrt")
    out = (args.out or args.build / "bench" / "scaling").resolve()
    ranks = [int(r) for r in args.ranks.split(",")]
    workloads = args.workloads.split(",")
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}: {', '.join(WORKLOADS)}")
    if "pubmed" in workloads and not (args.datasets_root / "pubmed_synthx" / "x.npy").exists():
        raise SystemExit(f"PubMed not found under {args.datasets_root} (--datasets-root)")

    # Configurations: (workload, ranks, threads per rank, halo mode).
    configs, meta = [], {}
    for w in workloads:
        job = write_job(out, w, WORKLOADS[w], args)
        for p in ranks:
            if p == 1:
                configs += [(w, 1, 1, "-"), (w, 1, min(2, CORES), "-")]
                continue
            log(f"{w}: partitioning for {p} ranks")
            meta[(w, p)] = partition(gnnrt, job, p, out / w / f"shards-{p}")
            configs += [(w, p, 1, "sparse"), (w, p, 1, "dense")]
        meta[(w, "job")] = job
    configs = list(dict.fromkeys(configs))
    runs = {c: [] for c in configs}
    for r in range(args.rounds):
        for c in configs:
            w, p, t, halo = c
            log(f"round {r + 1}/{args.rounds}: {w} np={p} threads={t} halo={halo}")
            runs[c].append(train(gnnrt, meta[(w, "job")], p, t, halo, out / w / f"shards-{p}",
                                 out / w / f"run-np{p}-t{t}-{halo}"))

    results = []
    for c in configs:
        w, p, t, halo = c
        row = {"workload": w, "ranks": p, "threads": t, "halo": halo, "oversubscribed": p * t > CORES}
        row.update(summarize(runs[c]))
        m = meta.get((w, p))
        if m:
            row["replication_factor"] = m["replication_factor"]
            row["nodes"], row["edges"] = m["nodes"], m["edges"]
            row["predicted_halo_bytes"] = (m["predicted_sparse"] if halo == "sparse"
                                           else p * m["nodes"] * m["row_bytes"])
        else:
            row["replication_factor"], row["predicted_halo_bytes"] = 1.0, 0.0
        row["halo_exact"] = row["halo_bytes"] == [row["predicted_halo_bytes"]]
        results.append(row)
    for w in workloads:
        base = next(r for r in results if r["workload"] == w and r["ranks"] == 1 and r["threads"] == 1)
        for r in results:
            if r["workload"] == w:
                r["speedup"] = base["ms"] / r["ms"]
                r["rss_ratio"] = r["peak_rss_mb"] / base["peak_rss_mb"]

    print(f"| workload | np | threads/rank | halo | epoch ms | speedup vs np1 1t | compute | halo | grad "
          f"| wait | halo MB measured | predicted | replication | simulated ms | peak RSS/rank MB "
          f"| RSS vs np1 | test acc |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        over = " (oversubscribed)" if r["oversubscribed"] else ""
        measured = "/".join(f"{b / 1e6:.3f}" for b in r["halo_bytes"])
        print(f"| {r['workload']} | {r['ranks']}{over} | {r['threads']} | {r['halo']} | {r['ms']:.1f} "
              f"| {r['speedup']:.2f}x | {r['compute_ms']:.1f} | {r['halo_ms']:.1f} | {r['grad_ms']:.1f} "
              f"| {r['wait_ms']:.1f} | {measured} | {r['predicted_halo_bytes'] / 1e6:.3f}"
              f"{'' if r['halo_exact'] else ' (differs)'} | {r['replication_factor']:.3f} "
              f"| {r['simulated_ms']:.2f} | {r['peak_rss_mb']:.0f} | {r['rss_ratio']:.2f} "
              f"| {r['test_acc']:.3f} |")

    def find(w, p, halo):
        return next((r for r in results if r["workload"] == w and r["ranks"] == p and r["halo"] == halo
                     and r["threads"] == 1), None)
    targets = []
    for w in ("synthetic", "synthetic_h90"):
        s2 = find(w, 2, "sparse")
        if not s2:
            continue
        targets.append((f"{w} (replication {s2['replication_factor']:.2f}): np=2 (1 thread/rank) vs "
                        "np=1 (1 thread) >= 1.7x", f"{s2['speedup']:.2f}x", s2["speedup"] >= 1.7))
        targets.append((f"{w}: peak RSS per rank np=2 --shards <= 0.6x np=1",
                        f"{s2['rss_ratio']:.3f}x ({s2['peak_rss_mb']:.0f} MB vs "
                        f"{s2['peak_rss_mb'] / s2['rss_ratio']:.0f} MB)", s2["rss_ratio"] <= 0.6))
    sparse = [r for r in results if r["halo"] == "sparse"]
    if sparse:
        exact = sum(r["halo_exact"] for r in sparse)
        targets.append(("measured halo bytes == prediction (every sparse run)", f"{exact} of {len(sparse)}",
                        exact == len(sparse)))
    p2, d2 = find("pubmed", 2, "sparse"), find("pubmed", 2, "dense")
    if p2 and d2:
        targets.append(("PubMed np=2: sparse >= 2x faster than dense", f"{d2['ms'] / p2['ms']:.2f}x",
                        d2["ms"] / p2["ms"] >= 2))
    print("\n| target | measured | met |\n|---|---|---|")
    for name, value, ok in targets:
        print(f"| {name} | {value} | {'yes' if ok else 'NO'} |")

    out.mkdir(parents=True, exist_ok=True)
    with open(out / "scaling.json", "w") as f:
        json.dump({"cores": CORES, "rounds": args.rounds, "results": results,
                   "targets": [{"target": n, "measured": v, "met": ok} for n, v, ok in targets]}, f, indent=1)
    png = args.plot or out / "scaling_time_split.png"
    plot(results, png)
    log(f"wrote {out / 'scaling.json'} and {png}")


if __name__ == "__main__":
    main()
