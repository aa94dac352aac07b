#!/usr/bin/python3
"""Sampled mini-batch training (docs/sampling.md) on the products-like graph:
the sampler's throughput against PyG's and against this machine's
random-access limit, and a 3-layer SAGE's training step against a torch
reference on the same blocks.

Graph: --graph (default the full products-like size, 2.45 M nodes, 123.7 M
directed edges, 100 features, 47 classes). Model: 3-layer SAGE, hidden 256,
ReLU between, fanouts [15, 10, 5], batches of 1024 seeds; Adam lr 0.003.

Reports:
  sampler     seeds/s and sampled edges/s, sampling alone and with the
              features gathered, on 1 and 2 threads (build/bench/sample_bench);
              the random-access limit: independent and dependent reads/s of an
              int32 array the size of the graph's in-edges. Targets (issue 51):
              >= 14,000 seeds/s alone and >= 7,000 with features on 1 thread
              (2x PyG 2.3's sampler here); sampled edges/s within 2x of the
              independent-read rate.
  training    gnnrt train on --train-graph (default the example's 100,000-node
              graph) for --epochs epochs at 1 thread, on one rank and on two
              (mpirun -np 2; also the bytes the sampler sent a rank an epoch,
              and each configuration's peak RSS a rank, target np 2 <= 0.6x np 1): step time (the steps'
              time without the sampler's wait, per step), epoch time, time
              waiting for the sampler (% of the step; target < 10%), padding
              (target <= 25% of rows), compiles against buckets used, the best
              validation epoch's test accuracy (steps' time: the epoch's
              --metrics ms less infer_ms and sampler_wait_ms).
  torch       the same model in torch 1.13 (float32, 1 thread) on the blocks
              of one batch of the same graph (sample_bench --dump): forward,
              cross-entropy on the seeds, backward, Adam; aggregation by
              index_add_ or by a CSR sparse matmul, the faster; median over
              --reps steps. Target: gnnrt's step >= 3x faster.

Prints a table; JSON in build/bench/results/sampled.json; a PNG in
bench/plots/sampled.png.

  /usr/bin/python3 bench/sampled.py [--build build] [--graph products] [--epochs 3] [--quick]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--graph", default="products", help="the sampler's graph")
ap.add_argument("--train-graph", default="products:nodes=100000,edges=2525000")
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--batches", type=int, default=20)
ap.add_argument("--reps", type=int, default=10)
ap.add_argument("--cora", default="../shared/datasets/cora", help="link prediction's dataset")
ap.add_argument("--link-only", action="store_true", help="only the Cora link prediction")
ap.add_argument("--quick", action="store_true", help="a 200,000-node graph for the sampler, 1 epoch")
ap.add_argument("--memory", action="store_true",
                help="also the peak RSS a rank at np 1 and 2 on a 1,000,000-node graph, 1 epoch (about 7 minutes)")
ap.add_argument("--memory-graph", default="products:nodes=1000000,edges=25250000")
ap.add_argument("--json", default="build/bench/results/sampled.json")
ap.add_argument("--plot", default="bench/plots/sampled.png")
args = ap.parse_args()
if args.quick:
    args.graph, args.epochs, args.batches = "products:nodes=200000,edges=5050000", 1, 8
BUILD = Path(args.build)
OUT = BUILD / "bench" / "sampled"
OUT.mkdir(parents=True, exist_ok=True)
FANOUTS, BATCH, HIDDEN = "15,10,5", 1024, 256
CORES = os.cpu_count() or 1
env = dict(os.environ, OMP_WAIT_POLICY="passive")


def lines(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, **kw).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def sampler():
    res = lines([str(BUILD / "bench" / "sample_bench"), "--graph", args.graph, "--fanouts", FANOUTS, "--batch",
                 str(BATCH), "--batches", str(args.batches), "--threads", "1,2", "--random-access"])
    return {"generate": res[0], "random_access": res[1], "runs": res[2:]}


def rss_mb(path):
    return int(Path(path).read_text().split()[-1]) / 1024


def predicted_bytes(r, ranks, batches, features=100):
    """A rank's bytes sent in an epoch, from its sampled counts (docs/sampling.md,
    "Message volume"): its seeds local (each batch's seeds go to their owners as
    far as the balance allows), about (R - 1)/R of its other nodes remote; per
    remote drawing-frontier row an id out and a count back (8 bytes), per edge
    drawn for it its source (4), per remote node an id and its features (4 + 4 F);
    and 8 bytes to each other rank per exchange (L hops + features + labels)."""
    if ranks == 1:
        return 0
    hops = len(FANOUTS.split(","))
    share = (ranks - 1) / ranks
    rows, seeds = r["sampled_frontier_rows"], r["sampled_seeds"]
    remote_rows = rows - hops * seeds  # every frontier holds the seeds
    counts = 8 * remote_rows + 4 * r["sampled_edges"] * remote_rows / max(rows, 1) \
        + (4 + 4 * features) * (r["sampled_nodes"] - seeds)
    return share * counts + 8 * (ranks - 1) * (hops + 2) * batches


def train(ranks=1, label="", graph=None, sets=(), features=100, epochs=None):
    graph = graph or args.train_graph
    folder = OUT / f"np{ranks}{label}"
    folder.mkdir(parents=True, exist_ok=True)
    metrics = folder / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    cmd = [str((BUILD / "launch" / "gnnrt").resolve()), "train", "examples/products_sage.pbtxt", "--set",
           f"dataset.path={graph}", "--set", f"schedule.epochs={epochs or args.epochs}", "--threads", "1",
           *sum((["--set", s] for s in sets), []), "--metrics", str(metrics), "--no-cache"]
    if ranks == 1:
        cmd = ["/usr/bin/time", "-f", "%M", "-o", str(folder / "rss.0"), *cmd]
    else:
        cmd = ["mpirun", "--allow-run-as-root", "-np", str(ranks), "sh", "-c",
               'exec /usr/bin/time -f %M -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"', str(folder), *cmd]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    start = time.time()
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    wall = time.time() - start
    recs = [json.loads(l) for l in metrics.read_text().splitlines()]
    later = recs[1:] or recs  # the first epoch compiles
    steps = [r["step"] - (recs[i - 1]["step"] if i else 0) for i, r in enumerate(recs)][len(recs) - len(later):]
    # The steps' time: the epoch's, less the evaluation and the waits for the sampler.
    step_ms = [(r["ms"] - r["infer_ms"] - r["sampler_wait_ms"]) / s for r, s in zip(later, steps)]
    wait_pct = [100 * r["sampler_wait_ms"] / (r["ms"] - r["infer_ms"]) for r in later]
    best = max(recs, key=lambda r: r["val_acc"])
    return {"graph": graph, "settings": list(sets), "ranks": ranks, "epochs": len(recs), "wall_s": wall,
            "step_ms": statistics.median(step_ms), "epoch_ms": statistics.median(r["ms"] for r in later),
            "sampler_wait_percent": statistics.median(wait_pct),
            "padding_rows_percent": recs[-1]["padding_rows_percent"],
            "padding_edges_percent": recs[-1]["padding_edges_percent"],
            "buckets_used": recs[-1]["buckets_used"], "compiles": recs[-1].get("compiles"),
            "sampler_bytes_sent_per_epoch": statistics.median(r["sampler_bytes_sent"] for r in later),
            "predicted_bytes_per_epoch": statistics.median(predicted_bytes(r, ranks, s, features)
                                                           for r, s in zip(later, steps)),
            "peak_rss_mb": max(rss_mb(folder / f"rss.{r}") for r in range(ranks)),
            "best_val_acc": best["val_acc"], "test_acc": best["test_acc"], "records": recs}


def torch_step():
    import torch
    torch.set_num_threads(1)
    dump = OUT / "blocks"
    lines([str(BUILD / "bench" / "sample_bench"), "--graph", args.train_graph, "--fanouts", FANOUTS, "--batch",
           str(BATCH), "--dump", str(dump)])
    frontier = np.load(dump / "frontier.npy")
    blocks = [(torch.from_numpy(np.load(dump / f"block{h}_src.npy").astype(np.int64)),
               torch.from_numpy(np.load(dump / f"block{h}_dst.npy").astype(np.int64))) for h in range(3)]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(int(frontier[-1]), 100, generator=g)
    y = torch.randint(0, 47, (int(frontier[0]),), generator=g)
    widths = [100, HIDDEN, HIDDEN, 47]
    lins = [(torch.nn.Linear(widths[i], widths[i + 1]), torch.nn.Linear(widths[i], widths[i + 1], bias=False))
            for i in range(3)]
    params = [p for l, r in lins for p in list(l.parameters()) + list(r.parameters())]
    opt = torch.optim.Adam(params, lr=0.003)

    def mean_index_add(h, src, dst, n_dst):
        out = torch.zeros(n_dst, h.shape[1]).index_add_(0, dst, h[src])
        deg = torch.zeros(n_dst).index_add_(0, dst, torch.ones(len(dst))).clamp(min=1)
        return out / deg.unsqueeze(1)

    csr = {}

    def mean_csr(h, src, dst, n_dst):
        key = (len(src), n_dst)
        if key not in csr:
            deg = torch.zeros(n_dst).index_add_(0, dst, torch.ones(len(dst))).clamp(min=1)
            a = torch.sparse_coo_tensor(torch.stack([dst, src]), 1.0 / deg[dst], (n_dst, h.shape[0])).coalesce()
            csr[key] = a.to_sparse_csr()
        return csr[key] @ h

    def step(aggregate):
        h = x
        for layer in range(3):
            src, dst = blocks[2 - layer]
            n_dst = int(frontier[2 - layer])
            lin_l, lin_r = lins[layer]
            h = lin_l(aggregate(h, src, dst, n_dst)) + lin_r(h[:n_dst])
            if layer < 2:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h, y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    out = {}
    for name, agg in (("index_add", mean_index_add), ("csr", mean_csr)):
        for _ in range(2):
            step(agg)
        times = []
        for _ in range(args.reps):
            t = time.perf_counter()
            step(agg)
            times.append(1e3 * (time.perf_counter() - t))
        out[name] = statistics.median(times)
    out["step_ms"] = min(out["index_add"], out["csr"])
    out["edges"] = int(sum(len(b[0]) for b in blocks))
    out["nodes"] = int(frontier[-1])
    # The step's dense floor: its matrix products alone (lin_l and lin_r a
    # layer: forward, the weights' gradients, and the inputs' but layer 0's),
    # each timed in torch on this BLAS. gnnrt calls the same OpenBLAS, so
    # the step against torch cannot beat torch's step against this floor.
    def mm_ms(a, b):
        x, y = torch.randn(*a), torch.randn(*b)
        x @ y
        times = []
        for _ in range(3):
            t = time.perf_counter()
            x @ y
            times.append(1e3 * (time.perf_counter() - t))
        return statistics.median(times)
    floor = 0.0
    for layer in range(3):
        n, i, o = int(frontier[2 - layer]), widths[layer], widths[layer + 1]
        products = mm_ms((n, i), (i, o)) + mm_ms((o, n), (n, i)) + (mm_ms((n, o), (o, i)) if layer else 0)
        floor += 2 * products  # lin_l and lin_r
    out["gemm_floor_ms"] = floor
    out["gemm_gflop"] = sum(2 * (3 if layer else 2) * 2 * int(frontier[2 - layer]) * widths[layer] * widths[layer + 1]
                            for layer in range(3)) / 1e9
    # The BLAS torch runs on (Debian's libblas.so.3 alternative: OpenBLAS
    # when installed, else the reference BLAS, about 10x slower here).
    maps = Path("/proc/self/maps").read_text().splitlines()
    out["blas"] = sorted({l.split()[-1] for l in maps if "blas" in l.split()[-1]})
    return out


def gnnrt_link(name, *sets):
    """examples/cora_link.pbtxt with `sets`: wall time, and the best validation epoch's scores."""
    metrics = OUT / f"link_{name}.jsonl"
    metrics.unlink(missing_ok=True)
    cmd = [str((BUILD / "launch" / "gnnrt").resolve()), "train", "examples/cora_link.pbtxt", "--set",
           f"dataset.path={args.cora}", *sum((["--set", s] for s in sets), []), "--threads", "1", "--metrics",
           str(metrics), "--no-cache"]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    start = time.time()
    subprocess.run(cmd, check=True, env=env, capture_output=True)
    wall = time.time() - start
    recs = [json.loads(l) for l in metrics.read_text().splitlines()]
    best = max(recs, key=lambda r: r["val_auc"])
    return {"wall_s": wall, "epochs": len(recs), "best_epoch": recs.index(best) + 1, "val_auc": best["val_auc"],
            "test_auc": best["test_auc"], "test_hits@50": best["test_hits@50"], "test_mrr": best["test_mrr"],
            "epoch_ms": statistics.median(r["ms"] for r in recs[1:])}


def torch_link(epochs=100):
    """PyG's examples/link_pred.py in torch 1.13 (1 thread): the same split (drawn by
    the test reference from the same keys), GCN 128 -> 64 (D^-1/2 (A + I) D^-1/2 as
    a sparse matrix), dot decoder, BCE with logits, Adam 0.01; training negatives
    uniform non-edges from torch's generator, one per positive each epoch;
    validation over the training graph, test over training + validation edges
    (PyG's val_data and test_data) with the best validation epoch's parameters."""
    import torch
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "reference"))
    from make_sampled_golden import split_links
    torch.set_default_dtype(torch.float32)  # the reference module works in float64
    torch.set_num_threads(1)
    torch.manual_seed(0)
    d = Path(args.cora)
    x = np.load(d / "x.npy").astype(np.float64)
    x = x - x.min()
    x = torch.tensor(x / np.maximum(x.sum(1, keepdims=True), 1), dtype=torch.float32)
    n = x.shape[0]
    start = time.time()
    s = split_links(n, np.load(d / "edge_index.npy"), 0.05, 0.1, 0.0, 1.0, 0)

    def gcn_matrix(pairs):
        both = pairs + [(b, a) for a, b in pairs]
        src = torch.tensor([a for a, _ in both] + list(range(n)))
        dst = torch.tensor([b for _, b in both] + list(range(n)))
        deg = torch.zeros(n).index_add_(0, dst, torch.ones(len(dst)))
        w = deg[src].rsqrt() * deg[dst].rsqrt()
        return torch.sparse_coo_tensor(torch.stack([dst, src]), w, (n, n)).coalesce()

    train_adj, test_adj = gcn_matrix(s["train"]), gcn_matrix(s["train"] + s["val"])
    lin1, lin2 = torch.nn.Linear(x.shape[1], 128), torch.nn.Linear(128, 64)
    for lin in (lin1, lin2):  # GCNConv's reset_parameters: glorot weights, zero bias
        torch.nn.init.xavier_uniform_(lin.weight)
        torch.nn.init.zeros_(lin.bias)
    opt = torch.optim.Adam([*lin1.parameters(), *lin2.parameters()], lr=0.01)
    edges = {q for k in s["all"] for q in (k, k[::-1])}

    def encode(adj):
        h = torch.relu(torch.sparse.mm(adj, x @ lin1.weight.T) + lin1.bias)
        return torch.sparse.mm(adj, h @ lin2.weight.T) + lin2.bias

    def auc(z, pos, neg):
        score = lambda ps: (z[[a for a, _ in ps]] * z[[b for _, b in ps]]).sum(-1).numpy()
        p, q = score(pos), np.sort(score(neg))
        return float((np.searchsorted(q, p, "left") + np.searchsorted(q, p, "right")).sum() / 2 / (len(p) * len(q)))

    pos = torch.tensor(s["train"])
    best, best_state = (-1.0, 0), None
    train_start = time.time()
    for epoch in range(epochs):
        neg = []
        while len(neg) < len(pos):
            u, v = torch.randint(0, n, (2,)).tolist()
            if u != v and (u, v) not in edges:
                neg.append((u, v))
        pairs = torch.cat([pos, torch.tensor(neg)])
        labels = torch.cat([torch.ones(len(pos)), torch.zeros(len(neg))])
        z = encode(train_adj)
        loss = torch.nn.functional.binary_cross_entropy_with_logits((z[pairs[:, 0]] * z[pairs[:, 1]]).sum(-1), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            val = auc(encode(train_adj), s["val"], s["val_neg"])
        if val > best[0]:
            best = (val, epoch + 1)
            best_state = [t.detach().clone() for t in (lin1.weight, lin1.bias, lin2.weight, lin2.bias)]
    train_s = time.time() - train_start
    with torch.no_grad():
        for t, v in zip((lin1.weight, lin1.bias, lin2.weight, lin2.bias), best_state):
            t.copy_(v)
        test = auc(encode(test_adj), s["test"], s["test_neg"])
    return {"wall_s": time.time() - start, "train_s": train_s, "epochs": epochs, "best_epoch": best[1],
            "val_auc": best[0], "test_auc": test}


def link():
    r = {"gnnrt_gcn_full_batch": gnnrt_link("gcn"),
         "gnnrt_sage_sampled": gnnrt_link("sage", "model.layer[0].type=SAGE", "model.layer[2].type=SAGE",
                                          "sampling.fanout=10,10", "sampling.batch_size=256", "schedule.epochs=10")}
    try:
        r["torch_gcn_full_batch"] = torch_link()
    except ImportError:
        pass
    return r


def print_link(results):
    for name, r in results.items():
        print(f"link prediction on Cora, {name}: test AUC {r['test_auc']:.4f} (best validation {r['val_auc']:.4f} at "
              f"epoch {r['best_epoch']} of {r['epochs']}), wall {r['wall_s']:.1f} s")


def main():
    result = {"date": time.strftime("%Y-%m-%d"), "cores": CORES, "fanouts": FANOUTS, "batch": BATCH}
    if args.link_only:
        result["link"] = link()
        path = Path(args.json).with_name("sampled_link.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
        print_link(result["link"])
        return
    result["sampler"] = sampler()
    result["training"] = train(1)
    result["training_np2"] = train(2)
    result["training_np2_in_step"] = train(2, "_in_step", sets=["sampling.prefetch=0"])
    # Ownership: contiguous ranges against METIS parts, on a loaded graph (the
    # synthetic SBM, its classes spread over the ids; METIS needs the whole graph).
    sbm = "synthetic:nodes=100000,classes=47,avg_degree=25,features=100,train_per_class=170,num_val=2000,num_test=5000"
    result["ownership"] = {o: train(2, f"_{o}", graph=sbm, sets=[f"sampling.ownership={o.upper()}"])
                           for o in ("ranges", "metis")}
    if args.memory:  # where the graph, not the sampled neighbourhoods, sets the memory
        result["memory"] = {f"np{r}": train(r, "_memory", graph=args.memory_graph, epochs=1) for r in (1, 2)}
    try:
        result["torch"] = torch_step()
        result["speedup_vs_torch"] = result["torch"]["step_ms"] / result["training"]["step_ms"]
    except ImportError:
        result["torch"] = None
    if Path(args.cora).exists():
        result["link"] = link()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")

    s = result["sampler"]
    ra = s["random_access"]
    print(f"\ngraph {args.graph}: {s['generate']['nodes']} nodes, {s['generate']['directed_edges']} directed edges "
          f"(generated in {s['generate']['seconds']:.1f} s)")
    print(f"random access over {ra['array_bytes'] / 2**20:.0f} MiB: independent {ra['independent_reads_per_s'] / 1e6:.1f} M "
          f"reads/s, dependent {ra['dependent_reads_per_s'] / 1e6:.1f} M reads/s")
    print(f"{'measure':<20}{'threads':>8}{'seeds/s':>10}{'M edges/s':>11}{'edges/batch':>13}{'of random':>11}")
    for r in s["runs"]:
        print(f"{r['measure']:<20}{r['threads']:>8}{r['seeds_per_s']:>10.0f}{r['edges_per_s'] / 1e6:>11.2f}"
              f"{r['edges_per_batch']:>13.0f}{r['edges_per_s'] / ra['independent_reads_per_s']:>11.2f}")
    t = result["training"]
    print(f"\ntraining ({t['graph']}, 1 thread): step {t['step_ms']:.1f} ms, epoch {t['epoch_ms']:.0f} ms, "
          f"sampler wait {t['sampler_wait_percent']:.1f}% of the step, padding {t['padding_rows_percent']:.1f}% rows "
          f"{t['padding_edges_percent']:.1f}% edges, {t['buckets_used']} buckets used, best val {t['best_val_acc']:.4f} "
          f"test {t['test_acc']:.4f}")
    t2 = result["training_np2"]
    print(f"np 2 ({CORES} cores): step {t2['step_ms']:.1f} ms, epoch {t2['epoch_ms']:.0f} ms (np 1: {t['epoch_ms']:.0f}), "
          f"sampler wait {t2['sampler_wait_percent']:.1f}% of the step, "
          f"{t2['sampler_bytes_sent_per_epoch'] / 2**20:.1f} MiB sent a rank an epoch (predicted from the sampled "
          f"counts {t2['predicted_bytes_per_epoch'] / 2**20:.1f} MiB, "
          f"{t2['sampler_bytes_sent_per_epoch'] / t2['predicted_bytes_per_epoch']:.2f}x); peak RSS a rank "
          f"{t2['peak_rss_mb']:.0f} MB against {t['peak_rss_mb']:.0f} MB at np 1 ({t2['peak_rss_mb'] / t['peak_rss_mb']:.2f}x)")
    if "memory" in result:
        m1, m2 = result["memory"]["np1"], result["memory"]["np2"]
        print(f"peak RSS a rank on {args.memory_graph}, 1 epoch: np 1 {m1['peak_rss_mb']:.0f} MB, np 2 "
              f"{m2['peak_rss_mb']:.0f} MB ({m2['peak_rss_mb'] / m1['peak_rss_mb']:.2f}x)")
    t3 = result["training_np2_in_step"]
    print(f"np 2 sampled in the step (prefetch 0): step {t3['step_ms']:.1f} ms, epoch {t3['epoch_ms']:.0f} ms, "
          f"sampler wait {t3['sampler_wait_percent']:.1f}% of the step")
    for o, r in result["ownership"].items():
        print(f"np 2 on {r['graph']}, {o}: {r['sampler_bytes_sent_per_epoch'] / 2**20:.1f} MiB sent a rank an epoch "
              f"(predicted {r['predicted_bytes_per_epoch'] / 2**20:.1f} MiB at (R-1)/R remote), epoch {r['epoch_ms']:.0f} ms")
    if result["torch"]:
        tr = result["torch"]
        print(f"torch step on one batch's blocks ({tr['nodes']} nodes, {tr['edges']} edges): index_add "
              f"{tr['index_add']:.1f} ms, csr {tr['csr']:.1f} ms; gnnrt {result['speedup_vs_torch']:.2f}x")
        print(f"  the step's matrix products alone ({tr['gemm_gflop']:.1f} GFLOP, torch on {', '.join(tr['blas'])}): "
              f"{tr['gemm_floor_ms']:.1f} ms; gnnrt {t['step_ms'] / tr['gemm_floor_ms']:.2f}x and torch "
              f"{tr['step_ms'] / tr['gemm_floor_ms']:.2f}x that floor")
    print_link(result.get("link", {}))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        for measure in ("sample", "sample_and_gather"):
            rs = [r for r in s["runs"] if r["measure"] == measure]
            ax[0].plot([r["threads"] for r in rs], [r["seeds_per_s"] for r in rs], "o-", label=f"gnnrt {measure}")
        ax[0].axhline(7000, ls="--", c="gray", label="PyG 2.3 sampler (anchor)")
        ax[0].axhline(3600, ls=":", c="gray", label="PyG with features (anchor)")
        ax[0].set_xlabel("threads")
        ax[0].set_ylabel("seeds / s")
        ax[0].legend(fontsize=7)
        if result["torch"]:
            ax[1].bar(["gnnrt", "torch"], [t["step_ms"], result["torch"]["step_ms"]])
            ax[1].set_ylabel("ms per step (1 thread)")
        fig.tight_layout()
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=100)
    except ImportError:
        pass


main()
