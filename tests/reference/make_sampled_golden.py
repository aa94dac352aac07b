"""Golden data of gnnrt's sampled mini-batch training (docs/sampling.md),
from an independent reference written from the formulas: the blocks come
from the sampler reference (make_sampler_golden.py, the same rule and
keys), the layers are PyG's SAGEConv, GATConv and GCNConv applied to each
block as docs/sampling.md defines them, written here in torch (float64),
and the optimizer is torch.optim.Adam.

Graph: tests/golden/train/graph (40 nodes, 16 training seeds). Each case
trains 2 epochs of batches of 6 seeds (6, 6, 4: the last one partial).

Layout under --out (default tests/golden/sampled/):
  <case>/config.json       {"job": <gnnrt job as JSON, dataset.path left to the test>, "steps": n}
  <case>/params_init/      the state_dict gnnrt loads (--params-in), float32
  <case>/params_epoch1/    the state_dict after epoch 1's steps, float32
  <case>/params_final/     the state_dict after the steps (epoch 2), float32
  <case>/losses.npy        float64 [steps]: each step's loss before its update
  <case>/seeds.json        each step's seeds (to read a failure by)

Usage: /usr/bin/python3 tests/reference/make_sampled_golden.py [--out DIR]
CI does not run this; its files are committed. A re-run writes identical bytes.
"""
import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from make_sampler_golden import sample, seed_order

HERE = Path(__file__).resolve().parent
GRAPH = HERE.parent / "golden" / "train" / "graph"
torch.set_default_dtype(torch.float64)


def load_graph():
    x = np.load(GRAPH / "x.npy").astype(np.float32)
    y = np.load(GRAPH / "y.npy")
    ei = np.load(GRAPH / "edge_index.npy")
    n = x.shape[0]
    ins = [sorted({int(s) for s, d in zip(ei[0], ei[1]) if d == v and s != v}) for v in range(n)]
    indptr, indices = [0], []
    for v in range(n):
        indices += ins[v]
        indptr.append(len(indices))
    train = [int(v) for v in np.nonzero(np.load(GRAPH / "train_mask.npy"))[0]]
    return x, y, (n, indptr, indices), train


# ---- layers on a block: x_src [n_src, F] -> [n_dst, out]; the destinations are the first n_dst sources ----

def sage(p, name, x, src, dst, n_dst):
    agg = torch.zeros(n_dst, x.shape[1])
    cnt = torch.zeros(n_dst)
    agg.index_add_(0, dst, x[src])
    cnt.index_add_(0, dst, torch.ones(len(src)))
    agg = agg / cnt.clamp(min=1).unsqueeze(1)
    return agg @ p[name + ".lin_l.weight"].T + p[name + ".lin_l.bias"] + x[:n_dst] @ p[name + ".lin_r.weight"].T


def with_loops(src, dst, n_dst):
    loop = torch.arange(n_dst)
    return torch.cat([src, loop]), torch.cat([dst, loop])


def gat(p, name, x, src, dst, n_dst, heads, concat):
    w = p[name + ".lin_src.weight"]
    c = w.shape[0] // heads
    h = (x @ w.T).view(-1, heads, c)
    a_src = (h * p[name + ".att_src"]).sum(-1)
    a_dst = (h[:n_dst] * p[name + ".att_dst"]).sum(-1)
    s, d = with_loops(src, dst, n_dst)
    e = torch.nn.functional.leaky_relu(a_src[s] + a_dst[d], 0.2)
    m = torch.full((n_dst, heads), -float("inf")).scatter_reduce(0, d.unsqueeze(1).expand(-1, heads), e, "amax")
    ex = torch.exp(e - m[d])
    den = torch.zeros(n_dst, heads).index_add_(0, d, ex)
    alpha = ex / den[d]
    out = torch.zeros(n_dst, heads, c).index_add_(0, d, alpha.unsqueeze(-1) * h[s])
    out = out.reshape(n_dst, heads * c) if concat else out.mean(1)
    return out + p[name + ".bias"]


def gcn(p, name, x, src, dst, n_dst):
    n_src = x.shape[0]
    s, d = with_loops(src, dst, n_dst)
    deg = torch.ones(n_src)  # a source that is no destination has its loop only
    deg[:n_dst] = torch.zeros(n_dst).index_add_(0, d, torch.ones(len(d)))
    w = deg[s].rsqrt() * deg[d].rsqrt()
    h = x @ p[name + ".lin.weight"].T
    out = torch.zeros(n_dst, h.shape[1]).index_add_(0, d, w.unsqueeze(1) * h[s])
    return out + p[name + ".bias"]


# ---- cases ----

def sage_model(p, x, blocks, frontier):
    b1, b0 = blocks[1], blocks[0]
    h = torch.relu(sage(p, "conv1", x, b1[0], b1[1], frontier[1]))
    return sage(p, "conv2", h, b0[0], b0[1], frontier[0])


def gat_model(p, x, blocks, frontier):
    b1, b0 = blocks[1], blocks[0]
    h = torch.nn.functional.elu(gat(p, "conv1", x, b1[0], b1[1], frontier[1], 2, True))
    return gat(p, "conv2", h, b0[0], b0[1], frontier[0], 1, False)


def gcn_model(p, x, blocks, frontier):
    b1, b0 = blocks[1], blocks[0]
    h = torch.relu(gcn(p, "conv1", x, b1[0], b1[1], frontier[1]))
    return gcn(p, "conv2", h, b0[0], b0[1], frontier[0])


def shapes(kind, f, c):
    if kind == "sage":
        return {"conv1.lin_l.weight": (8, f), "conv1.lin_l.bias": (8,), "conv1.lin_r.weight": (8, f),
                "conv2.lin_l.weight": (c, 8), "conv2.lin_l.bias": (c,), "conv2.lin_r.weight": (c, 8)}
    if kind == "gat":
        return {"conv1.lin_src.weight": (8, f), "conv1.att_src": (1, 2, 4), "conv1.att_dst": (1, 2, 4),
                "conv1.bias": (8,), "conv2.lin_src.weight": (c, 8), "conv2.att_src": (1, 1, c),
                "conv2.att_dst": (1, 1, c), "conv2.bias": (c,)}
    return {"conv1.lin.weight": (8, f), "conv1.bias": (8,), "conv2.lin.weight": (c, 8), "conv2.bias": (c,)}


CASES = {
    "sage": (sage_model, [{"type": "sage", "out": 8}, {"type": "relu"}, {"type": "sage"}], [3, 2], 0.0),
    "gat": (gat_model, [{"type": "gat", "heads": 2, "out": 4}, {"type": "elu"},
                        {"type": "gat", "heads": 1, "concat": False}], [3, -1], 5e-4),
    "gcn": (gcn_model, [{"type": "gcn", "out": 8}, {"type": "relu"}, {"type": "gcn"}], [2, 2], 0.0),
}
SEED, BATCH, EPOCHS, LR = 3, 6, 2, 0.01


def run_case(name, out):
    model, layers, fanouts, wd = CASES[name]
    x, y, graph, train = load_graph()
    f, c = x.shape[1], int(y.max()) + 1
    gen = torch.Generator().manual_seed(SEED)
    init = {k: (torch.rand(s, generator=gen, dtype=torch.float32) * 0.6 - 0.3) for k, s in shapes(name, f, c).items()}
    p = {k: v.double().clone().requires_grad_(True) for k, v in init.items()}
    opt = torch.optim.Adam(list(p.values()), lr=LR, weight_decay=wd)
    losses, steps, after = [], [], []
    for epoch in range(EPOCHS):
        order = seed_order(train, epoch, SEED)
        for b in range(0, len(order), BATCH):
            seeds = order[b:b + BATCH]
            s = sample(graph, seeds, fanouts, False, False, (SEED, epoch, b // BATCH))
            frontier = s["frontier"]
            blocks = [(torch.tensor(k["src"], dtype=torch.long), torch.tensor(k["dst"], dtype=torch.long))
                      for k in s["blocks"]]
            xb = torch.tensor(x[s["nodes"][:frontier[-1]]], dtype=torch.float64)
            logits = model(p, xb, blocks, frontier)
            rows = torch.tensor(s["seed_rows"])
            loss = torch.nn.functional.cross_entropy(logits[rows], torch.tensor(y[seeds]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            steps.append(seeds)
        after.append({k: v.detach().float().clone() for k, v in p.items()})
    d = out / name
    if d.exists():
        shutil.rmtree(d)
    for folder, values in (("params_init", init), ("params_epoch1", after[0]), ("params_final", after[-1])):
        (d / folder).mkdir(parents=True)
        for k, v in values.items():
            np.save(d / folder / f"{k}.npy", v.numpy().astype(np.float32))
            if name == "gat" and k.endswith("lin_src.weight"):  # PyG lists lin_dst (the same tensor) too
                np.save(d / folder / f"{k.replace('lin_src', 'lin_dst')}.npy", v.numpy().astype(np.float32))
    np.save(d / "losses.npy", np.array(losses, dtype=np.float64))
    job = {"name": f"sampled_{name}", "seed": SEED, "model": {"layer": layers},
           "optimizer": {"kind": "adam", "lr": LR, "weight_decay": wd}, "schedule": {"epochs": EPOCHS},
           "sampling": {"fanout": fanouts, "batch_size": BATCH}}
    (d / "config.json").write_text(json.dumps({"job": job, "steps": len(losses)}, indent=1, sort_keys=True) + "\n")
    (d / "seeds.json").write_text(json.dumps(steps) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(HERE.parent / "golden" / "sampled"))
    out = Path(ap.parse_args().out)
    for name in CASES:
        run_case(name, out)


if __name__ == "__main__":
    main()
