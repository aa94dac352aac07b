#!/usr/bin/env python3
"""Writes the golden data of gnnrt's training tests from the independent
reference in gnn_reference.py (PyTorch 1.13, PyG 2.3 semantics).

Layout under --out (default tests/golden/train/):
  graph/                 a 40-node random graph in the layout of
                         /work/shared/datasets: x.npy float32 [40, 12],
                         y.npy int64 [40] (4 classes), edge_index.npy int64
                         [2, 160] (symmetric, no self loops, no duplicates,
                         sorted by (src, dst)), train/val/test_mask.npy bool
                         (16 / 12 / 12 nodes). Node `isolated` has no edge,
                         node `leaf` exactly one; both are training nodes.
  graph_meta.json        the ids of those two nodes, sizes and seed (kept out
                         of graph/ so that graph/ holds only the data set files)
  <case>/config.json     model, optimizer and schedule (see CASES)
  <case>/params_init/    <PyG parameter name>.npy, float32, as built after
                         torch.manual_seed(seed)
  <case>/grads_init/     d loss / d param at params_init (first step, before
                         weight decay and the optimizer): separates backward
                         errors from optimizer errors
  <case>/params_final/   after `steps` optimizer steps
  <case>/losses.npy      float32 [steps]: the loss of each step, before its update
  <case>/logits.npy      float32 [N, classes]: log_softmax of params_final, eval mode

Every step is a full-graph step in model.train() with all dropout at 0, so
the run is deterministic. Initial parameters are drawn in float32 (as PyG
draws them); the steps are then computed in float64 from those float32
values and the results stored as float32, so a float32 implementation is
compared with the exact result rather than with torch's rounding.

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

NUM_NODES, NUM_FEATURES, NUM_CLASSES = 40, 12, 4
UNDIRECTED_EDGES = 80  # 160 directed entries
SPLIT = (16, 12, 12)   # train, val, test

BASE = {"hidden": 8, "lr": 0.01, "weight_decay": 5e-4, "optimizer": "adam", "steps": 5,
        "dropout": 0.0, "seed": 0}
# case folder -> what differs from BASE
CASES = {
    "gcn": {"model": "gcn"},
    "sage_mean": {"model": "sage", "aggr": "mean"},
    "sage_max": {"model": "sage", "aggr": "max"},
    "gat": {"model": "gat", "heads": 2, "out_heads": 1},
    # Seed 0 makes a hidden unit of conv2 come alive at step 5 with a
    # gradient of 7e-5 left after cancellation; float32 summation order
    # alone moved it by 0.3% (torch float32 vs float64: 0.01%), and Adam
    # turns that into 2e-5 of parameter. Seed 1 has no such unit.
    "gin": {"model": "gin", "gin_eps": 0.0, "seed": 1},
    # hidden 16 > 12 inputs: the compiler moves conv1's aggregation before its
    # widening matmul (the other cases narrow).
    "gcn_wide": {"model": "gcn", "hidden": 16},
    "gcn_adamw": {"model": "gcn", "optimizer": "adamw", "weight_decay": 0.01},
    "gcn_layernorm": {"model": "gcn_ln", "norm_mode": "graph"},
    "gcn_layernorm_node": {"model": "gcn_ln", "norm_mode": "node"},
    "gcn_mse": {"model": "gcn_mse"},
    "gcn_sgd": {"model": "gcn", "optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
                "weight_decay": 5e-4},
}
# torch's defaults, written out so that a reader of config.json needs no torch
OPTIMIZER_DEFAULTS = {
    "adam": {"betas": [0.9, 0.999], "adam_eps": 1e-8},
    "adamw": {"betas": [0.9, 0.999], "adam_eps": 1e-8},
    "sgd": {"dampening": 0.0, "nesterov": False},
}


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

    g = ref.Graph(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(edge_index),
                  **{k: torch.from_numpy(v) for k, v in masks.items()})
    check_graph(g, isolated, leaf)
    return g, {"isolated": isolated, "leaf": leaf}


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


def case_config(name):
    cfg = dict(BASE, **CASES[name])
    cfg.update(OPTIMIZER_DEFAULTS[cfg["optimizer"]])
    cfg.update({"graph": "../graph", "in_channels": NUM_FEATURES, "num_classes": NUM_CLASSES,
                "reference_dtype": "float64"})
    return cfg


def build(cfg):
    torch.manual_seed(cfg["seed"])
    return ref.build_model(cfg["model"], cfg["in_channels"], cfg["hidden"], cfg["num_classes"],
                           dropout=cfg["dropout"], input_dropout=cfg["dropout"],
                           aggr=cfg.get("aggr", "mean"), heads=cfg.get("heads", 1),
                           out_heads=cfg.get("out_heads", 1), eps=cfg.get("gin_eps", 0.0),
                           norm_mode=cfg.get("norm_mode", "graph"))


def write_case(root: Path, name: str, g64):
    cfg = case_config(name)
    d = root / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True) + "\n")

    model = build(cfg)
    ref.save_params(model, d / "params_init")
    model.double()

    model.train()
    loss = ref.model_loss(model, g64)
    loss.backward()
    grads = {k: p.grad for k, p in ref.named_params(model).items()}
    ref.save_params(grads, d / "grads_init")
    # Adam's first step moves each parameter by about lr * sign(g): a
    # gradient within float32 noise of 0 would make the golden fragile.
    decay = cfg["weight_decay"] if cfg["optimizer"] == "adam" else 0.0
    g_eff = torch.cat([(grads[k] + decay * p).flatten()
                       for k, p in ref.named_params(model).items()]).abs()
    smallest = g_eff[g_eff > 0].min().item()
    model.zero_grad(set_to_none=True)

    opt = ref.make_optimizer(cfg["optimizer"], model.parameters(), cfg["lr"],
                             cfg["weight_decay"], cfg.get("momentum", 0.0))
    losses = ref.train_steps(model, g64, opt, cfg["steps"])
    ref.save_params(model, d / "params_final")
    np.save(d / "losses.npy", np.array(losses, dtype=np.float32))
    logits = ref.predict(model, g64)
    np.save(d / "logits.npy", logits.numpy().astype(np.float32))
    acc = (logits.argmax(1) == g64.y)[g64.test_mask].double().mean().item()
    return losses, smallest, acc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).resolve().parent
    ap.add_argument("--out", type=Path, default=here.parent / "golden" / "train")
    args = ap.parse_args()

    # One thread: the float reductions inside torch's CPU kernels then run in
    # one fixed order, so re-runs give identical bytes.
    torch.set_num_threads(1)
    g, special = make_graph(seed=0)
    shutil.rmtree(args.out / "graph", ignore_errors=True)
    ref.save_dataset(g, args.out / "graph")
    meta = dict(special, num_nodes=NUM_NODES, num_features=NUM_FEATURES,
                num_classes=NUM_CLASSES, num_edges=int(g.edge_index.shape[1]), seed=0)
    (args.out / "graph_meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")

    g64 = g.to(torch.float64)
    print(f"{'case':10s} {'optimizer':9s} {'loss[0]':>9s} {'loss[-1]':>9s} {'min|g|':>9s} test_acc")
    for name in CASES:
        losses, smallest, acc = write_case(args.out, name, g64)
        cfg = case_config(name)
        flag = "  <- fragile Adam sign" if smallest < 1e-5 and cfg["optimizer"] != "sgd" else ""
        print(f"{name:10s} {cfg['optimizer']:9s} {losses[0]:9.5f} {losses[-1]:9.5f} "
              f"{smallest:9.2e} {acc:.2f}{flag}")
    files = [p for p in args.out.rglob("*") if p.is_file()]
    size_kib = sum(p.stat().st_size for p in files) / 1024
    print(f"{len(files)} files, {size_kib:.1f} KiB in {args.out}")


if __name__ == "__main__":
    main()
