"""Golden data of gnnrt's sampled mini-batch training (docs/sampling.md),
from an independent reference written from the formulas: the blocks come
from the sampler reference (make_sampler_golden.py, the same rule and
keys), the layers are PyG's SAGEConv, GATConv and GCNConv applied to each
block as docs/sampling.md defines them, written here in torch (float64),
and the optimizer is torch.optim.Adam.

Graph: tests/golden/train/graph (40 nodes, 16 training seeds). Each node
case trains 2 epochs of batches of 6 seeds (6, 6, 4: the last one
partial). The link cases (link_*) split the graph's 80 edges, draw the
negatives and train 2 epochs of batches of 20 positives (docs/sampling.md,
"Link prediction").

Layout under --out (default tests/golden/sampled/):
  <case>/config.json       {"job": <gnnrt job as JSON, dataset.path left to the test>, "steps": n}
  <case>/params_init/      the state_dict gnnrt loads (--params-in), float32
  <case>/params_epoch1/    the state_dict after epoch 1's steps, float32
  <case>/params_final/     the state_dict after the steps (epoch 2), float32
  <case>/losses.npy        float64 [steps]: each step's loss before its update
  <case>/seeds.json        node cases: each step's seeds (to read a failure by)
  <case>/split.json        link cases: the split and the evaluation negatives, pair by pair

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
from philox import below, philox4x64

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


def write_case(d, init, after, losses, job):
    """A case's folder (layout above): the parameters at the start, after
    epoch 1 and at the end, the step losses and config.json."""
    if d.exists():
        shutil.rmtree(d)
    for folder, values in (("params_init", init), ("params_epoch1", after[0]), ("params_final", after[-1])):
        (d / folder).mkdir(parents=True)
        for k, v in values.items():
            np.save(d / folder / f"{k}.npy", v.numpy().astype(np.float32))
            if k.endswith("lin_src.weight"):  # GAT's: PyG lists lin_dst (the same tensor) too
                np.save(d / folder / f"{k.replace('lin_src', 'lin_dst')}.npy", v.numpy().astype(np.float32))
    np.save(d / "losses.npy", np.array(losses, dtype=np.float64))
    (d / "config.json").write_text(json.dumps({"job": job, "steps": len(losses)}, indent=1, sort_keys=True) + "\n")
    return d


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
    job = {"name": f"sampled_{name}", "seed": SEED, "model": {"layer": layers},
           "optimizer": {"kind": "adam", "lr": LR, "weight_decay": wd}, "schedule": {"epochs": EPOCHS},
           "sampling": {"fanout": fanouts, "batch_size": BATCH}}
    d = write_case(out / name, init, after, losses, job)
    (d / "seeds.json").write_text(json.dumps(steps) + "\n")


# ---- link prediction (docs/sampling.md, "Link prediction") ----
# The split and the negatives follow the rule and Philox keys the docs give:
# the distinct undirected edges (u < v) ascending, shuffled by Fisher-Yates
# with draw i = below(philox((ORDER, i, 0, 0), (seed, "links"))[0], i); the
# last val + test held out; negatives drawn in counter order, (u, v) =
# below(words 0 and 1, n), skipped when u == v or (u, v) is an edge or drawn.

LINK_STREAM = 0x6C696E6B73  # "links"
ORDER, VAL_NEG, TEST_NEG, TRAIN_NEG = 1, 2, 3, 4


def draw_negatives(n, count, taken, seed, what):
    out, k = [], 0
    while len(out) < count:
        w = philox4x64((what, k, 0, 0), (seed, LINK_STREAM))
        k += 1
        u, v = below(w[0], n), below(w[1], n)
        if u == v or (u, v) in taken:
            continue
        taken.update({(u, v), (v, u)})
        out.append((u, v))
    return out


def split_links(n, ei, val, test, disjoint, ratio, seed):
    keys = sorted({(min(a, b), max(a, b)) for a, b in zip(ei[0].tolist(), ei[1].tolist()) if a != b})
    for i in range(len(keys), 1, -1):
        j = below(philox4x64((ORDER, i, 0, 0), (seed, LINK_STREAM))[0], i)
        keys[i - 1], keys[j] = keys[j], keys[i - 1]
    e = len(keys)
    nv, nt = int(np.floor(val * e)), int(np.floor(test * e))
    ntr = e - nv - nt
    nd = int(np.floor(disjoint * ntr))
    train, valp, testp = keys[:ntr], keys[ntr:ntr + nv], keys[ntr + nv:]
    taken = {p for k in keys for p in (k, k[::-1])}
    need = lambda m: int(np.ceil(ratio * m))
    return {"train": train, "supervision": train[:nd] if nd else train, "passing": train[nd:], "val": valp,
            "test": testp, "val_neg": draw_negatives(n, need(nv), taken, seed, VAL_NEG),
            "test_neg": draw_negatives(n, need(nt), taken, seed, TEST_NEG), "all": keys}


def csc(n, pairs):
    ins = [sorted({a for a, b in pairs if b == v} | {b for a, b in pairs if a == v}) for v in range(n)]
    indptr, indices = [0], []
    for v in range(n):
        indices += ins[v]
        indptr.append(len(indices))
    return n, indptr, indices


def mlp_score(p, z, ps, pd):
    h = torch.relu((z[ps] * z[pd]) @ p["score.0.weight"].T + p["score.0.bias"])
    return (h @ p["score.2.weight"].T + p["score.2.bias"]).squeeze(-1)


LINK_CASES = {
    # encoder, decoder, fanouts, disjoint_train_ratio, negative_ratio
    "link_sage_dot": ("sage", "dot", [3, 2], 0.0, 1.0),
    "link_gcn_mlp": ("gcn", "mlp", [2, -1], 0.25, 1.5),
}
LINK_BATCH = 20


def run_link_case(name, out):
    kind, decoder, fanouts, disjoint, ratio = LINK_CASES[name]
    x, _, _, _ = load_graph()
    ei = np.load(GRAPH / "edge_index.npy")
    n, f = x.shape
    s = split_links(n, ei, 0.1, 0.2, disjoint, 1.0, SEED)
    graph = csc(n, s["passing"])
    sup = s["supervision"]
    gen = torch.Generator().manual_seed(SEED)
    sh = shapes(kind, f, 8)
    if decoder == "mlp":
        sh.update({"score.0.weight": (8, 8), "score.0.bias": (8,), "score.2.weight": (1, 8), "score.2.bias": (1,)})
    init = {k: (torch.rand(v, generator=gen, dtype=torch.float32) * 0.6 - 0.3) for k, v in sh.items()}
    p = {k: v.double().clone().requires_grad_(True) for k, v in init.items()}
    opt = torch.optim.Adam(list(p.values()), lr=LR)
    model = sage_model if kind == "sage" else gcn_model
    losses, after = [], []
    for epoch in range(EPOCHS):
        order = seed_order(list(range(len(sup))), epoch, SEED)
        taken = {q for k in s["all"] for q in (k, k[::-1])}
        negs = draw_negatives(n, int(np.floor(len(sup) * ratio)), taken, SEED, TRAIN_NEG + (epoch << 8))
        for b in range(0, len(order), LINK_BATCH):
            batch = order[b:b + LINK_BATCH]
            lo, hi = int(np.floor(b * ratio)), int(np.floor((b + len(batch)) * ratio))
            pairs = [sup[i] for i in batch] + negs[lo:hi]
            labels = torch.tensor([1.0] * len(batch) + [0.0] * (hi - lo))
            seeds = sorted({v for q in pairs for v in q})
            smp = sample(graph, seeds, fanouts, False, False, (SEED, epoch, b // LINK_BATCH))
            frontier = smp["frontier"]
            blocks = [(torch.tensor(k["src"], dtype=torch.long), torch.tensor(k["dst"], dtype=torch.long))
                      for k in smp["blocks"]]
            z = model(p, torch.tensor(x[smp["nodes"][:frontier[-1]]], dtype=torch.float64), blocks, frontier)
            ps = torch.tensor([smp["seed_rows"][seeds.index(a)] for a, _ in pairs])
            pd = torch.tensor([smp["seed_rows"][seeds.index(c)] for _, c in pairs])
            score = (z[ps] * z[pd]).sum(-1) if decoder == "dot" else mlp_score(p, z, ps, pd)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(score, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        after.append({k: v.detach().float().clone() for k, v in p.items()})
    job = {"name": name, "seed": SEED,
           "model": {"layer": [{"type": kind, "out": 8}, {"type": "relu"}, {"type": kind, "out": 8}]},
           "optimizer": {"kind": "adam", "lr": LR, "weight_decay": 0}, "schedule": {"epochs": EPOCHS},
           "sampling": {"fanout": fanouts, "batch_size": LINK_BATCH},
           "link": {"val_fraction": 0.1, "test_fraction": 0.2, "disjoint_train_ratio": disjoint,
                    "negative_ratio": ratio, "decoder": decoder, "decoder_hidden": [8] if decoder == "mlp" else []}}
    d = write_case(out / name, init, after, losses, job)
    split = {k: [list(q) for q in s[k]] for k in ("train", "supervision", "val", "test", "val_neg", "test_neg")}
    (d / "split.json").write_text(json.dumps(split) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(HERE.parent / "golden" / "sampled"))
    out = Path(ap.parse_args().out)
    for name in CASES:
        run_case(name, out)
    for name in LINK_CASES:
        run_link_case(name, out)


if __name__ == "__main__":
    main()
