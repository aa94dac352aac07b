#!/usr/bin/python3
"""Writes the golden data of gnnrt's training tests from the independent
reference in gnn_reference.py (PyTorch 1.13, PyG 2.3 semantics).

Each case is a gnnrt job (the model, optimizer and schedule of job.proto,
as JSON with its field names) that the reference interprets itself
(gnn_jobs.JobModel): gnnrt's test builds the same job, loads the same
initial parameters and compares.

Layout under --out (default tests/golden/train/):
  graph/                 a 40-node random graph in the layout of
                         /work/shared/datasets: x.npy float32 [40, 12],
                         y.npy int64 [40] (4 classes), edge_index.npy int64
                         [2, 160] (symmetric, no self loops, no duplicates,
                         sorted by (src, dst)), train/val/test_mask.npy bool
                         (16 / 12 / 12 nodes). Node `isolated` has no edge,
                         node `leaf` exactly one; both are training nodes.
  graph_directed/        the same nodes with 150 directed edges in random
                         order, 10 of them duplicates and 6 self loops
                         (so a source/destination swap or a lost duplicate
                         shows).
  graph_ties/            graph's edges with integer features in {-1, 0, 1}:
                         max aggregations meet tied maxima.
  graph_meta.json        the ids of the special nodes, sizes and seed
  <case>/config.json     {"job": <job as JSON>, "graph": <folder>, "steps": n}
  <case>/params_init/    <PyG parameter name>.npy, float32, drawn after
                         torch.manual_seed(job.seed)
  <case>/grads_init/     d loss / d param at params_init (first step, before
                         weight decay and the optimizer): separates backward
                         errors from optimizer errors
  <case>/params_final/   after `steps` optimizer steps
  <case>/state_dict/     torch's model.state_dict() after the steps, one
                         <key>.npy per key (float32) with the buffers (GIN's
                         eps) and aliases (GAT's lin_dst) PyG lists: the keys
                         gnnrt's --params-out must write and --params-in load
  <case>/losses.npy      float32 [steps]: the loss of each step, before its update
  <case>/lrs.npy         float64 [steps]: the learning rate of each step, from
                         torch.optim.lr_scheduler
  <case>/logits.npy      float32 [N, classes]: the model's output of
                         params_final in eval mode (log_softmax, or raw for mse)

Every step is a full-graph step in model.train(); dropout draws gnnrt's
documented masks (gnn_reference.dropout_mask), so cases with dropout are
deterministic too. Initial parameters are drawn in float32 (as PyG draws
them); the steps are then computed in float64 from those float32 values and
the results stored as float32, so a float32 implementation is compared with
the exact result rather than with torch's rounding.

Usage: /usr/bin/python3 tests/reference/make_train_golden.py [--out DIR]
CI does not run this; the files it writes are committed. A re-run writes
identical bytes.
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gnn_reference as ref  # noqa: E402
import gnn_jobs as jobs  # noqa: E402

NUM_NODES, NUM_FEATURES, NUM_CLASSES = 40, 12, 4
UNDIRECTED_EDGES = 80  # 160 directed entries
SPLIT = (16, 12, 12)   # train, val, test



def layer(type_, **fields):
    return dict(type=type_, **fields)


def two_layer(conv, hidden=8, act="relu", **conv_fields):
    return [layer(conv, out=hidden, **conv_fields), layer(act), layer(conv, **conv_fields)]


ADAM = {"kind": "adam", "lr": 0.01, "weight_decay": 5e-4}
# case folder -> (graph, layers, optimizer, schedule, extra job fields)
CASES = {
    "gcn": ("graph", two_layer("gcn"), ADAM, {}, {}),
    # hidden 16 > 12 inputs: the compiler moves conv1's aggregation before its
    # widening matmul (the other cases narrow).
    "gcn_wide": ("graph", two_layer("gcn", hidden=16), ADAM, {}, {}),
    "sage_mean": ("graph", two_layer("sage", aggr="mean"), ADAM, {}, {}),
    "sage_max": ("graph", two_layer("sage", aggr="max"), ADAM, {}, {}),
    # Tied maxima: gnnrt and the reference both send a tie's gradient to
    # the lowest edge id (torch_scatter's rule).
    "sage_max_ties": ("graph_ties", two_layer("sage", aggr="max"), ADAM, {}, {}),
    "gat": ("graph", [layer("gat", out=8, heads=2), layer("elu"), layer("gat", heads=1, concat=False)],
            ADAM, {}, {}),
    # Several heads averaged (head_mean), no bias, another slope, attention
    # and feature dropout.
    "gat_heads_mean": ("graph", [layer("dropout", p=0.3),
                                 layer("gat", out=6, heads=3, negative_slope=0.1, attention_dropout=0.25),
                                 layer("elu"),
                                 layer("gat", heads=3, concat=False, bias=False, attention_dropout=0.25)],
                       ADAM, {}, {}),
    # Seed 0 makes a hidden unit of conv2 come alive at step 5 with a
    # gradient of 7e-5 left after cancellation; float32 summation order
    # alone moved it by 0.3% (torch float32 vs float64: 0.01%), and Adam
    # turns that into 2e-5 of parameter. Seed 1 has no such unit.
    "gin": ("graph", [layer("gin", out=8, hidden=8), layer("relu"), layer("gin", hidden=8)], ADAM, {},
            {"seed": 1}),
    "gin_eps": ("graph", [layer("gin", out=8, hidden=8, eps=0.3), layer("relu"),
                          layer("gin", hidden=8, eps=-0.2)], ADAM, {}, {"seed": 1}),
    # eps a parameter (PyG's train_eps): its gradient and Adam steps.
    "gin_train_eps": ("graph", [layer("gin", out=8, hidden=8, eps=0.1, train_eps=True), layer("relu"),
                                layer("gin", hidden=8, train_eps=True)], ADAM, {}, {"seed": 1}),
    "gcn_adamw": ("graph", two_layer("gcn"), {"kind": "adamw", "lr": 0.01, "weight_decay": 0.01}, {}, {}),
    "gcn_sgd": ("graph", two_layer("gcn"),
                {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}, {}, {}),
    "gcn_sgd_nesterov": ("graph", two_layer("gcn"),
                         {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True,
                          "weight_decay": 0.0}, {}, {}),
    "gcn_layernorm": ("graph", [layer("gcn", out=8), layer("layer_norm", mode="graph"), layer("relu"),
                                layer("gcn")], ADAM, {}, {}),
    "gcn_layernorm_node": ("graph", [layer("gcn", out=8), layer("layer_norm", mode="node"), layer("relu"),
                                     layer("gcn")], ADAM, {}, {}),
    "gcn_mse": ("graph", [layer("gcn", out=8), layer("relu"), layer("gcn")], ADAM, {}, {"loss": "mse"}),
    # Dropout on the input and the hidden layer (gnnrt's masks).
    "gcn_dropout": ("graph", [layer("dropout", p=0.5), layer("gcn", out=8), layer("relu"),
                              layer("dropout", p=0.5), layer("gcn")], ADAM, {}, {"seed": 3}),
    # Three layers, no bias, a standalone linear head, normalised features,
    # non-default Adam betas and eps, warm-up then cosine decay.
    "deep_linear": ("graph", [layer("gcn", out=10, bias=False), layer("relu"), layer("gcn", out=8),
                              layer("relu"), layer("linear", out=6), layer("elu"),
                              layer("linear", bias=False)],
                    {"kind": "adam", "lr": 0.02, "weight_decay": 1e-3, "beta1": 0.8, "beta2": 0.99,
                     "eps": 1e-6},
                    {"epochs": 8, "lr_schedule": "cosine", "warmup_epochs": 2},
                    {"normalize_features": True}),
    # A directed graph with duplicate edges and self loops; a step schedule.
    "directed_gcn_sage": ("graph_directed", [layer("gcn", out=8), layer("relu"), layer("sage", aggr="mean")],
                          ADAM, {"epochs": 5, "lr_schedule": "step", "step_size": 2, "gamma": 0.5}, {}),
    "directed_gat": ("graph_directed", [layer("gat", out=4, heads=2), layer("elu"),
                                        layer("gat", heads=2, concat=False)], ADAM, {}, {}),
}
STEPS = 5


def make_job(name):
    graph, layers, optimizer, schedule, extra = CASES[name]
    extra = dict(extra)
    model = {"layer": layers}
    if "loss" in extra:
        model["loss"] = extra.pop("loss")
    job = {"name": name, "model": model, "optimizer": dict(optimizer),
           "schedule": dict({"epochs": STEPS}, **schedule), "seed": extra.pop("seed", 0)}
    if extra.pop("normalize_features", False):
        job["dataset"] = {"normalize_features": True}
    assert not extra, extra
    return graph, job


def make_graph(seed: int = 0):
    """Random graph with learnable labels (features = class centroid + noise);
    connected apart from the isolated node. Continuous features keep max
    aggregation free of ties (tie gradients differ between torch and
    torch_scatter)."""
    rng = np.random.default_rng(seed)
    n = NUM_NODES
    perm = rng.permutation(n)
    train, val, test = np.split(perm, np.cumsum(SPLIT)[:2])
    isolated, leaf = int(train[0]), int(train[1])
    core = np.array([v for v in range(n) if v not in (isolated, leaf)])

    edges = set()
    order = rng.permutation(core)
    for k in range(1, len(order)):  # random spanning tree: no other node is isolated
        a, b = int(order[k]), int(order[rng.integers(k)])
        edges.add((min(a, b), max(a, b)))
    while len(edges) < UNDIRECTED_EDGES - 1:
        a, b = (int(v) for v in rng.choice(core, size=2, replace=False))
        edges.add((min(a, b), max(a, b)))
    anchor = int(rng.choice(core))
    edges.add((min(leaf, anchor), max(leaf, anchor)))

    und = np.array(sorted(edges), dtype=np.int64).T
    src = np.concatenate([und[0], und[1]])
    dst = np.concatenate([und[1], und[0]])
    order = np.lexsort((dst, src))  # PyG's coalesce order: by src, then dst
    edge_index = np.stack([src[order], dst[order]])

    y = rng.integers(0, NUM_CLASSES, size=n).astype(np.int64)
    centroids = rng.standard_normal((NUM_CLASSES, NUM_FEATURES))
    x = (centroids[y] + rng.standard_normal((n, NUM_FEATURES))).astype(np.float32)

    masks = {}
    for name, ids in (("train_mask", train), ("val_mask", val), ("test_mask", test)):
        m = np.zeros(n, dtype=bool)
        m[ids] = True
        masks[name] = m

    g = jobs.Graph(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(edge_index),
                  **{k: torch.from_numpy(v) for k, v in masks.items()})
    check_graph(g, isolated, leaf)
    return g, {"isolated": isolated, "leaf": leaf}


def make_directed(g, seed=1):
    """graph's nodes and labels with random directed edges: duplicates and
    self loops included, in no particular order."""
    rng = np.random.default_rng(seed)
    n = NUM_NODES
    src = rng.integers(0, n, 134)
    dst = rng.integers(0, n, 134)
    loops = rng.choice(n, 6, replace=False)
    dup = rng.choice(134, 10, replace=False)
    src = np.concatenate([src, loops, src[dup]])
    dst = np.concatenate([dst, loops, dst[dup]])
    order = rng.permutation(len(src))
    edge_index = torch.from_numpy(np.stack([src[order], dst[order]]).astype(np.int64))
    return jobs.Graph(g.x, g.y, edge_index, g.train_mask, g.val_mask, g.test_mask)


def make_ties(g, seed=2):
    """graph with features in {-1, 0, 1}: tied maxima everywhere."""
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.integers(-1, 2, tuple(g.x.shape)).astype(np.float32))
    return jobs.Graph(x, g.y, g.edge_index, g.train_mask, g.val_mask, g.test_mask)


def check_graph(g, isolated, leaf):
    ei = g.edge_index.numpy()
    src, dst = ei
    pairs = set(zip(src.tolist(), dst.tolist()))
    assert ei.shape == (2, 2 * UNDIRECTED_EDGES), ei.shape
    assert len(pairs) == ei.shape[1], "duplicate edges"
    assert all((b, a) in pairs for a, b in pairs), "not symmetric"
    assert not np.any(src == dst), "self loop"
    assert np.all(np.diff(src * NUM_NODES + dst) > 0), "not sorted by (src, dst)"
    deg = np.bincount(dst, minlength=NUM_NODES)
    assert deg[isolated] == 0 and deg[leaf] == 1
    assert np.count_nonzero(deg == 0) == 1, "more than one isolated node"
    masks = np.stack([g.train_mask.numpy(), g.val_mask.numpy(), g.test_mask.numpy()])
    assert masks.sum(axis=1).tolist() == list(SPLIT) and masks.sum(axis=0).max() == 1


def write_case(root: Path, name: str, graphs):
    graph, job = make_job(name)
    d = root / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"job": job, "graph": graph, "steps": STEPS},
                                              indent=1, sort_keys=True) + "\n")
    g64 = graphs[graph].to(torch.float64)
    if job.get("dataset", {}).get("normalize_features"):
        g64 = jobs.Graph(jobs.normalize_features(g64.x), g64.y, g64.edge_index,
                        g64.train_mask, g64.val_mask, g64.test_mask)
    torch.manual_seed(job["seed"])
    model = jobs.JobModel(job["model"], NUM_FEATURES, NUM_CLASSES)
    model.context.seed = job["seed"]
    jobs.save_params(model, d / "params_init")
    model.double()

    model.train()
    model.context.step = 1
    loss = jobs.model_loss(model, g64)
    loss.backward()
    grads = {k: p.grad for k, p in jobs.named_params(model).items()}
    jobs.save_params(grads, d / "grads_init")
    # Adam's first step moves each parameter by about lr * sign(g): a
    # gradient within float32 noise of 0 would make the golden fragile.
    opt_cfg = job["optimizer"]
    decay = opt_cfg.get("weight_decay", 5e-4) if opt_cfg["kind"] == "adam" else 0.0
    g_eff = torch.cat([(grads[k] + decay * p).flatten()
                       for k, p in jobs.named_params(model).items()]).abs()
    smallest = g_eff[g_eff > 0].min().item()
    model.zero_grad(set_to_none=True)

    opt = jobs.job_optimizer(opt_cfg, model.parameters())
    lrs = jobs.job_learning_rates(job, STEPS)
    losses = []
    for step in range(1, STEPS + 1):
        model.context.step = step
        opt.param_groups[0]["lr"] = lrs[step - 1]
        losses.append(jobs.train_step(model, g64, opt))
    jobs.save_params(model, d / "params_final")
    jobs.save_params(model.state_dict(), d / "state_dict")
    np.save(d / "losses.npy", np.array(losses, dtype=np.float32))
    np.save(d / "lrs.npy", np.array(lrs, dtype=np.float64))
    logits = jobs.predict(model, g64)
    np.save(d / "logits.npy", logits.numpy().astype(np.float32))
    acc = (logits.argmax(1) == g64.y)[g64.test_mask].double().mean().item()
    return job, losses, smallest, acc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).resolve().parent
    ap.add_argument("--out", type=Path, default=here.parent / "golden" / "train")
    args = ap.parse_args()

    # One thread: the float reductions inside torch's CPU kernels then run in
    # one fixed order, so re-runs give identical bytes.
    torch.set_num_threads(1)
    g, special = make_graph(seed=0)
    graphs = {"graph": g, "graph_directed": make_directed(g), "graph_ties": make_ties(g)}
    for folder, graph in graphs.items():
        shutil.rmtree(args.out / folder, ignore_errors=True)
        jobs.save_dataset(graph, args.out / folder)
    meta = dict(special, num_nodes=NUM_NODES, num_features=NUM_FEATURES,
                num_classes=NUM_CLASSES, num_edges=int(g.edge_index.shape[1]), seed=0)
    (args.out / "graph_meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    for stale in args.out.iterdir():  # cases that no longer exist
        if stale.is_dir() and stale.name not in CASES and stale.name not in graphs:
            shutil.rmtree(stale)

    print(f"{'case':20s} {'optimizer':9s} {'loss[0]':>9s} {'loss[-1]':>9s} {'min|g|':>9s} test_acc")
    for name in CASES:
        job, losses, smallest, acc = write_case(args.out, name, graphs)
        kind = job["optimizer"]["kind"]
        flag = "  <- fragile Adam sign" if smallest < 1e-5 and kind != "sgd" else ""
        print(f"{name:20s} {kind:9s} {losses[0]:9.5f} {losses[-1]:9.5f} {smallest:9.2e} {acc:.2f}{flag}")
    files = [p for p in args.out.rglob("*") if p.is_file()]
    size_kib = sum(p.stat().st_size for p in files) / 1024
    print(f"{len(files)} files, {size_kib:.1f} KiB in {args.out}")


if __name__ == "__main__":
    main()
