#!/usr/bin/python3
"""Writes the golden data of gnnrt's batch-training tests (module-graph
models over batches of small graphs) from an independent PyTorch 1.13
reference written from the formulas, with PyG-style batching: a batch's
graphs concatenated, node rows offset, no padding.

Layout under --out (default tests/golden/batch/):
  <case>/data/           a batch dataset folder (manifest.pbtxt + .npy,
                         docs/file-formats.md), made here with numpy
  <case>/job.pbtxt       the gnnrt job (batching.shuffle false: batches are
                         graphs 0..B-1, B..2B-1, ...; the last one partial)
  <case>/params_init/    <state_dict key>.npy float32, drawn here (GINConv's eps
                         buffer, 0, as PyG lists it)
  <case>/epoch_losses.npy float64 [epochs]: the mean of each epoch's batch losses
  <case>/params_final/   after every step of every epoch
  <case>/outputs/        <module>.npy: the model's outputs with params_final,
                         eval mode, every graph in order (what `gnnrt infer`
                         writes): per graph [G, W], per node [rows, W]

Steps run in float64 from the float32 initial values (the exact result a
float32 implementation is compared with). Cases:
  gin_sum_pool    two GINConv layers over "atom"/"bond", sum pooling,
                  an MLP head, MSE on the graph target.
  hetero          two node sets a and b; SAGE over a->a (mean, then SiLU)
                  and the bipartite a->b (PyG's (x_src, x_dst)), a residual
                  add of a Linear of b.x, ReLU, mean pooling, broadcast back
                  to b, another residual, a concatenation with the
                  broadcast, LayerNorm, tanh-GELU, a slice of the features,
                  max pooling, an MLP head (graph MSE) plus 0.5 x a per-node
                  MSE on b.y through a Linear.
  gcn_gat         GCNConv and GATConv (2 heads, concatenated) over a->a
                  (with some self loops, which both drop, adding one per
                  row), a bipartite GATConv a->b (3 heads averaged, its own
                  lin_src and lin_dst, no self loops), ELU, mean pooling over
                  b, a Linear head (graph MSE).
  graph_classes   (below) graph classification with a per-node L1 term.
  scene_layers    VectorWorld's ResidualMLP and QCNet's attention layer
                  (bipartite and not, with and without edge features, a
                  shared pre-norm), the EdgeFeatureUpdate pattern, the
                  agent gate and the query token (case_scene_layers).
  dit             GlobalContextFusion as the condition, two DiT blocks
                  (adaLN), DiT's final layer (case_dit).

Usage: /usr/bin/python3 tests/reference/make_batch_golden.py [--out DIR]
CI does not run this; its files are committed. A re-run writes identical bytes.
"""
import argparse
import shutil
from pathlib import Path

import sys

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gnn_reference as ref  # noqa: E402

torch.set_default_dtype(torch.float64)


def scatter(src, index, rows, reduce):
    """out[r] = reduce over {i: index[i] = r} of src[i]; empty rows give 0."""
    out = torch.zeros((rows,) + tuple(src.shape[1:]), dtype=src.dtype)
    if reduce in ("sum", "mean"):
        out = out.index_add(0, index, src)
        if reduce == "mean":
            count = torch.zeros(rows, dtype=src.dtype).index_add(0, index, torch.ones(len(index)))
            out = out / count.clamp(min=1).unsqueeze(-1)
        return out
    full = torch.full((rows,) + tuple(src.shape[1:]), -float("inf"), dtype=src.dtype)
    full = full.scatter_reduce(0, index.unsqueeze(-1).expand_as(src), src, reduce="amax", include_self=True)
    return torch.where(torch.isinf(full), torch.zeros_like(full), full)


def linear(p, prefix, x, bias=True):
    y = x @ p[prefix + ".weight"].T
    return y + p[prefix + ".bias"] if bias else y


def gin(p, name, x_src, x_dst, ei, eps=0.0):
    agg = scatter(x_src[ei[0]], ei[1], x_dst.shape[0], "sum")
    h = torch.relu(linear(p, name + ".nn.0", (1 + eps) * x_dst + agg))
    return linear(p, name + ".nn.2", h)


def sage(p, name, x_src, x_dst, ei, aggr):
    agg = scatter(x_src[ei[0]], ei[1], x_dst.shape[0], aggr)
    return linear(p, name + ".lin_l", agg) + linear(p, name + ".lin_r", x_dst, bias=False)


def gcn(p, name, x, ei):
    n = x.shape[0]
    src, dst = ref.with_self_loops(ei, n)
    deg = torch.bincount(dst, minlength=n).to(x.dtype).pow(-0.5)
    deg = deg.masked_fill(torch.isinf(deg), 0.0)
    h = x @ p[name + ".lin.weight"].T
    return scatter((deg[src] * deg[dst]).view(-1, 1) * h[src], dst, n, "sum") + p[name + ".bias"]


def gat(p, name, x_src, x_dst, ei, heads, channels, concat, bipartite, slope=0.2):
    ns, nd = x_src.shape[0], x_dst.shape[0]
    hs = (x_src @ p[name + ".lin_src.weight"].T).view(ns, heads, channels)
    hd = (x_dst @ p[name + ".lin_dst.weight"].T).view(nd, heads, channels) if bipartite else hs
    src, dst = ei if bipartite else ref.with_self_loops(ei, ns)
    a_s = (hs * p[name + ".att_src"]).sum(-1)
    a_d = (hd * p[name + ".att_dst"]).sum(-1)
    e = torch.nn.functional.leaky_relu(a_s[src] + a_d[dst], slope)
    alpha = ref.segment_softmax(e, dst, nd)
    out = torch.zeros(nd, heads, channels).index_add(0, dst, hs[src] * alpha.unsqueeze(-1))
    out = out.reshape(nd, heads * channels) if concat else out.mean(dim=1)
    return out + p[name + ".bias"]


def mlp(p, name, x, layers):
    for i in range(layers):
        if i > 0:
            x = torch.relu(x)
        x = linear(p, f"{name}.{2 * i}", x)
    return x


def mse(a, b):
    return ((a - b) ** 2).mean()


def layer_norm(p, prefix, x, affine=True):
    if not affine:
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=1e-5)
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), p[prefix + ".weight"], p[prefix + ".bias"], 1e-5)


def residual_mlp(p, name, x, layers, out):
    """VectorWorld's ResidualMLP (vectorworld/utils/layers.py), from its formulas."""
    h = x
    for i in range(layers):
        h = layer_norm(p, f"{name}.norms.{i}", linear(p, f"{name}.linears.{i}", h))
        if i < layers - 1:
            h = torch.relu(h)
    res = layer_norm(p, f"{name}.transform_norm", linear(p, f"{name}.transform_linear", x))
    h = torch.relu(h + res)
    return linear(p, f"{name}.linear_out", h) if out else h


def attention(p, name, x_src, x_dst, ei, r, heads, bipartite, shared=False):
    """QCNet's attention layer as VectorWorld's AttentionLayer computes it:
    pre-norms, q from the destinations, k (no bias) and v from the sources
    plus r's projections, per-head scaled dot products, softmax per
    destination, the gated update, to_out, post-norm and residual, then the
    feed-forward block."""
    n = name
    xs = layer_norm(p, n + ".attn_prenorm_x_src", x_src)
    xd = layer_norm(p, n + (".attn_prenorm_x_src" if shared else ".attn_prenorm_x_dst"), x_dst) if bipartite else xs
    hd = p[n + ".to_q.weight"].shape[0]
    d = hd // heads
    q = linear(p, n + ".to_q", xd).view(-1, heads, d)
    k = linear(p, n + ".to_k", xs, bias=False).view(-1, heads, d)
    v = linear(p, n + ".to_v", xs).view(-1, heads, d)
    src, dst = ei
    kj, vj = k[src], v[src]
    if r is not None:
        rn = layer_norm(p, n + ".attn_prenorm_r", r)
        kj = kj + linear(p, n + ".to_k_r", rn, bias=False).view(-1, heads, d)
        vj = vj + linear(p, n + ".to_v_r", rn).view(-1, heads, d)
    sim = (q[dst] * kj).sum(dim=-1) * d ** -0.5
    attn = ref.segment_softmax(sim, dst, x_dst.shape[0])
    agg = torch.zeros(x_dst.shape[0], heads, d).index_add(0, dst, vj * attn.unsqueeze(-1)).view(-1, hd)
    g = torch.sigmoid(linear(p, n + ".to_g", torch.cat([agg, xd], dim=-1)))
    update = agg + g * (linear(p, n + ".to_s", xd) - agg)
    x = x_dst + layer_norm(p, n + ".attn_postnorm", linear(p, n + ".to_out", update))
    h = linear(p, n + ".ff_mlp.3", torch.relu(linear(p, n + ".ff_mlp.0", layer_norm(p, n + ".ff_prenorm", x))))
    return x + layer_norm(p, n + ".ff_postnorm", h)


# ---- datasets (numpy; PyG Batch layout: rows concatenated, ptr offsets) ----

def random_graphs(rng, graphs, lo, hi):
    sizes = rng.integers(lo, hi + 1, size=graphs)
    return sizes, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def edges_within(rng, ptr_s, ptr_d, per_graph, directed_pairs=None):
    src, dst, eptr = [], [], [0]
    for g in range(len(ptr_s) - 1):
        ns, nd = ptr_s[g + 1] - ptr_s[g], ptr_d[g + 1] - ptr_d[g]
        count = per_graph(ns, nd)
        if ns > 0 and nd > 0:
            s = rng.integers(0, ns, size=count) + ptr_s[g]
            d = rng.integers(0, nd, size=count) + ptr_d[g]
            src += s.tolist()
            dst += d.tolist()
        eptr.append(len(src))
    return np.array([src, dst], dtype=np.int64).reshape(2, -1), np.array(eptr, dtype=np.int64)


def write_folder(folder, node_sets, edge_sets, graph_y):
    folder.mkdir(parents=True)
    lines = []
    for name, (x, ptr, y) in node_sets.items():
        np.save(folder / f"{name}.x.npy", x.astype(np.float32))
        np.save(folder / f"{name}.ptr.npy", ptr)
        target = ""
        if y is not None:
            np.save(folder / f"{name}.y.npy", y.astype(np.float32))
            target = f' target: "{name}.y.npy"'
        lines.append(f'node_set {{ name: "{name}"{target} }}')
    for (s, rel, d), es in edge_sets.items():
        ei, eptr = es[0], es[1]
        np.save(folder / f"{rel}.edge_index.npy", ei)
        np.save(folder / f"{rel}.ptr.npy", eptr)
        features = ""
        if len(es) > 2:  # edge features
            np.save(folder / f"{rel}.x.npy", es[2].astype(np.float32))
            features = f' features: "{rel}.x.npy"'
        lines.append(f'edge_set {{ source: "{s}" relation: "{rel}" destination: "{d}"{features} }}')
    np.save(folder / "graph.y.npy", graph_y if graph_y.dtype == np.int64 else graph_y.astype(np.float32))
    lines.append('graph_target: "graph.y.npy"')
    (folder / "manifest.pbtxt").write_text("\n".join(lines) + "\n")


def torch_linear_init(gen, out, inp):
    bound = 1.0 / np.sqrt(inp)
    w = (torch.rand((out, inp), generator=gen, dtype=torch.float32) * 2 - 1) * bound
    b = (torch.rand((out,), generator=gen, dtype=torch.float32) * 2 - 1) * bound
    return w, b


def train(case_dir, params32, forward, batches, epochs, lr, job_text, outputs=None, momentum=None, buffers=None):
    """Adam, or SGD with `momentum` when given. `buffers` (float32, e.g.
    GINConv's eps) are written beside the parameters, as PyG's state_dict
    lists them, and not trained."""
    # Keys that share a tensor (a module under two names) share its clone.
    clones, params = {}, {}
    for k, v in params32.items():
        if id(v) not in clones:
            clones[id(v)] = v.to(torch.float64).clone().requires_grad_(True)
        params[k] = clones[id(v)]
    opt = (torch.optim.Adam(clones.values(), lr=lr, weight_decay=0.0) if momentum is None
           else torch.optim.SGD(clones.values(), lr=lr, momentum=momentum))
    epoch_losses = []
    for _ in range(epochs):
        losses = []
        for batch in batches:
            opt.zero_grad()
            loss = forward(params, batch)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        epoch_losses.append(np.mean(losses))
    for sub in ("params_init", "params_final"):
        (case_dir / sub).mkdir(parents=True)
    for k, v in params32.items():
        np.save(case_dir / "params_init" / f"{k}.npy", v.numpy())
        np.save(case_dir / "params_final" / f"{k}.npy", params[k].detach().to(torch.float32).numpy())
    for k, v in (buffers or {}).items():
        for sub in ("params_init", "params_final"):
            np.save(case_dir / sub / f"{k}.npy", v.to(torch.float32).numpy())
    np.save(case_dir / "epoch_losses.npy", np.array(epoch_losses, dtype=np.float64))
    if outputs is not None:
        (case_dir / "outputs").mkdir()
        with torch.no_grad():
            per_batch = [outputs(params, b) for b in batches]
        for name in per_batch[0]:
            value = torch.cat([o[name] for o in per_batch]).to(torch.float32).numpy()
            np.save(case_dir / "outputs" / f"{name}.npy", value)
    (case_dir / "job.pbtxt").write_text(job_text)


def batch_of(ids, node_sets, edge_sets, graph_y):
    """PyG-style batch of graphs `ids`: per node set x, y and graph index;
    per edge set edge_index re-offset to the batch's rows."""
    out = {"nodes": {}, "edges": {}, "edge_x": {},
           "y": torch.tensor(graph_y[ids], dtype=torch.int64 if graph_y.dtype == np.int64 else torch.float64)}
    first = {}
    for name, (x, ptr, y) in node_sets.items():
        rows, gidx, start = [], [], {}
        for k, g in enumerate(ids):
            start[g] = len(rows)
            rows += list(range(ptr[g], ptr[g + 1]))
            gidx += [k] * (ptr[g + 1] - ptr[g])
        first[name] = (start, ptr)
        out["nodes"][name] = (torch.tensor(x[rows], dtype=torch.float64),
                              None if y is None else torch.tensor(y[rows], dtype=torch.float64),
                              torch.tensor(gidx, dtype=torch.int64))
    for (s, rel, d), es in edge_sets.items():
        ei, eptr = es[0], es[1]
        src, dst, picked = [], [], []
        for g in ids:
            for e in range(eptr[g], eptr[g + 1]):
                src.append(ei[0, e] - first[s][1][g] + first[s][0][g])
                dst.append(ei[1, e] - first[d][1][g] + first[d][0][g])
                picked.append(e)
        out["edges"][rel] = torch.tensor([src, dst], dtype=torch.int64).reshape(2, -1)
        if len(es) > 2:
            out["edge_x"][rel] = torch.tensor(es[2][picked], dtype=torch.float64).reshape(len(picked), -1)
    return out


def case_gin(out):
    rng = np.random.default_rng(7)
    graphs, types = 14, 5
    sizes, ptr = random_graphs(rng, graphs, 3, 9)
    atom_type = rng.integers(0, types, size=ptr[-1])
    x = np.eye(types, dtype=np.float32)[atom_type]
    ei, eptr = edges_within(rng, ptr, ptr, lambda ns, nd: 2 * ns)
    graph_y = rng.normal(size=(graphs, 1))
    node_sets = {"atom": (x, ptr, None)}
    edge_sets = {("atom", "bond", "atom"): (ei, eptr)}
    case_dir = out / "gin_sum_pool"
    write_folder(case_dir / "data", node_sets, edge_sets, graph_y)
    gen = torch.Generator().manual_seed(1)
    p = {}
    for name, (i, h, o) in {"conv1": (types, 16, 16), "conv2": (16, 16, 16)}.items():
        p[f"{name}.nn.0.weight"], p[f"{name}.nn.0.bias"] = torch_linear_init(gen, h, i)
        p[f"{name}.nn.2.weight"], p[f"{name}.nn.2.bias"] = torch_linear_init(gen, o, h)
    p["head.0.weight"], p["head.0.bias"] = torch_linear_init(gen, 16, 16)
    p["head.2.weight"], p["head.2.bias"] = torch_linear_init(gen, 1, 16)
    batch_size, epochs = 4, 3
    batches = [batch_of(list(range(s, min(s + batch_size, graphs))), node_sets, edge_sets, graph_y)
               for s in range(0, graphs, batch_size)]

    def outputs(params, b):
        x, _, gidx = b["nodes"]["atom"]
        ei = b["edges"]["bond"]
        h = torch.relu(gin(params, "conv1", x, x, ei))
        h = gin(params, "conv2", h, h, ei)
        g = scatter(h, gidx, len(b["y"]), "sum")
        return {"head": mlp(params, "head", g, 2), "conv2": h}

    def forward(params, b):
        return mse(outputs(params, b)["head"], b["y"])

    job = f"""name: "batch_gin_sum_pool"
dataset {{ path: "DATA" }}
model {{
  module {{ name: "conv1" input: "atom.x" gin {{ edges: "bond" out: 16 hidden: 16 }} }}
  module {{ name: "act1" input: "conv1" relu {{}} }}
  module {{ name: "conv2" input: "act1" gin {{ edges: "bond" out: 16 hidden: 16 }} }}
  module {{ name: "pool" input: "conv2" pool {{ reduce: SUM }} }}
  module {{ name: "head" input: "pool" mlp {{ hidden: 16 out: 1 }} }}
  loss_term {{ input: "head" target: "graph.y" kind: MSE }}
}}
optimizer {{ kind: ADAM lr: 0.01 weight_decay: 0 }}
schedule {{ epochs: {epochs} }}
batching {{ batch_size: {batch_size} shuffle: false }}
"""
    train(case_dir, p, forward, batches, epochs, 0.01, job, outputs,
          buffers={"conv1.eps": torch.zeros(1), "conv2.eps": torch.zeros(1)})


def case_hetero(out):
    rng = np.random.default_rng(11)
    graphs, fa, fb = 11, 6, 4
    _, ptr_a = random_graphs(rng, graphs, 2, 7)
    _, ptr_b = random_graphs(rng, graphs, 0, 4)  # some graphs have no b rows
    xa = rng.normal(size=(ptr_a[-1], fa))
    xb = rng.normal(size=(ptr_b[-1], fb))
    yb = rng.normal(size=(ptr_b[-1], 1))
    aa, aa_ptr = edges_within(rng, ptr_a, ptr_a, lambda ns, nd: 2 * ns)
    ab, ab_ptr = edges_within(rng, ptr_a, ptr_b, lambda ns, nd: ns + nd)
    graph_y = rng.normal(size=(graphs, 1))
    node_sets = {"a": (xa, ptr_a, None), "b": (xb, ptr_b, yb)}
    edge_sets = {("a", "aa", "a"): (aa, aa_ptr), ("a", "ab", "b"): (ab, ab_ptr)}
    case_dir = out / "hetero"
    write_folder(case_dir / "data", node_sets, edge_sets, graph_y)
    gen = torch.Generator().manual_seed(2)
    p = {}
    p["s1.lin_l.weight"], p["s1.lin_l.bias"] = torch_linear_init(gen, 8, fa)
    p["s1.lin_r.weight"], _ = torch_linear_init(gen, 8, fa)
    p["s2.lin_l.weight"], p["s2.lin_l.bias"] = torch_linear_init(gen, 8, 8)
    p["s2.lin_r.weight"], _ = torch_linear_init(gen, 8, fb)
    p["skip.weight"], p["skip.bias"] = torch_linear_init(gen, 8, fb)
    p["head.0.weight"], p["head.0.bias"] = torch_linear_init(gen, 8, 8)
    p["head.2.weight"], p["head.2.bias"] = torch_linear_init(gen, 1, 8)
    p["node_head.weight"], p["node_head.bias"] = torch_linear_init(gen, 1, 8)
    p["norm.weight"] = 1 + 0.1 * torch.randn(16, generator=gen, dtype=torch.float32)
    p["norm.bias"] = 0.1 * torch.randn(16, generator=gen, dtype=torch.float32)
    batch_size, epochs = 3, 3
    batches = [batch_of(list(range(s, min(s + batch_size, graphs))), node_sets, edge_sets, graph_y)
               for s in range(0, graphs, batch_size)]

    def outputs(params, bt):
        xa, _, _ = bt["nodes"]["a"]
        xb, yb, gb = bt["nodes"]["b"]
        g = len(bt["y"])
        h1 = torch.nn.functional.silu(sage(params, "s1", xa, xa, bt["edges"]["aa"], "mean"))
        hb = sage(params, "s2", h1, xb, bt["edges"]["ab"], "mean")
        r = torch.relu(hb + linear(params, "skip", xb))
        pooled = scatter(r, gb, g, "mean")
        r3 = r + pooled[gb]
        mix = torch.cat([r3, pooled[gb]], dim=1)
        normed = torch.nn.functional.layer_norm(mix, (16,), params["norm.weight"], params["norm.bias"], 1e-5)
        act = torch.nn.functional.gelu(normed, approximate="tanh")
        top = scatter(act[:, 4:12], gb, g, "max")
        return {"head": mlp(params, "head", top, 2), "node_head": linear(params, "node_head", r3)}

    def forward(params, bt):
        o = outputs(params, bt)
        _, yb, _ = bt["nodes"]["b"]
        graph_loss = mse(o["head"], bt["y"])
        node_loss = mse(o["node_head"], yb) if len(yb) else torch.zeros(())
        return graph_loss + 0.5 * node_loss

    job = f"""name: "batch_hetero"
dataset {{ path: "DATA" }}
model {{
  module {{ name: "s1" input: "a.x" sage {{ edges: "aa" out: 8 aggr: MEAN }} }}
  module {{ name: "s1_act" input: "s1" activation {{ kind: SILU }} }}
  module {{ name: "s2" input: "s1_act" input: "b.x" sage {{ edges: "ab" out: 8 aggr: MEAN }} }}
  module {{ name: "skip" input: "b.x" linear {{ out: 8 }} }}
  module {{ name: "sum1" input: "s2" input: "skip" add {{}} }}
  module {{ name: "r" input: "sum1" relu {{}} }}
  module {{ name: "pooled" input: "r" pool {{ reduce: MEAN }} }}
  module {{ name: "back" input: "pooled" broadcast {{ node_set: "b" }} }}
  module {{ name: "r3" input: "r" input: "back" add {{}} }}
  module {{ name: "mix" input: "r3" input: "back" concat {{}} }}
  module {{ name: "norm" input: "mix" layer_norm {{}} }}
  module {{ name: "act" input: "norm" activation {{ kind: GELU_TANH }} }}
  module {{ name: "part" input: "act" slice {{ begin: 4 width: 8 }} }}
  module {{ name: "top" input: "part" pool {{ reduce: MAX }} }}
  module {{ name: "head" input: "top" mlp {{ hidden: 8 out: 1 }} }}
  module {{ name: "node_head" input: "r3" linear {{ out: 1 }} }}
  loss_term {{ input: "head" target: "graph.y" kind: MSE }}
  loss_term {{ input: "node_head" target: "b.y" kind: MSE weight: 0.5 }}
}}
optimizer {{ kind: ADAM lr: 0.01 weight_decay: 0 }}
schedule {{ epochs: {epochs} }}
batching {{ batch_size: {batch_size} shuffle: false }}
"""
    train(case_dir, p, forward, batches, epochs, 0.01, job, outputs)


def case_gcn_gat(out):
    rng = np.random.default_rng(13)
    graphs, fa, fb = 10, 5, 3
    _, ptr_a = random_graphs(rng, graphs, 2, 8)
    _, ptr_b = random_graphs(rng, graphs, 1, 4)
    xa = rng.normal(size=(ptr_a[-1], fa))
    xb = rng.normal(size=(ptr_b[-1], fb))
    aa, aa_ptr = edges_within(rng, ptr_a, ptr_a, lambda ns, nd: 2 * ns)  # some land on their own row
    ab, ab_ptr = edges_within(rng, ptr_a, ptr_b, lambda ns, nd: ns + 2 * nd)
    graph_y = rng.normal(size=(graphs, 1))
    node_sets = {"a": (xa, ptr_a, None), "b": (xb, ptr_b, None)}
    edge_sets = {("a", "aa", "a"): (aa, aa_ptr), ("a", "ab", "b"): (ab, ab_ptr)}
    case_dir = out / "gcn_gat"
    write_folder(case_dir / "data", node_sets, edge_sets, graph_y)
    gen = torch.Generator().manual_seed(3)

    def uni(*shape):
        return (torch.rand(shape, generator=gen, dtype=torch.float32) * 2 - 1) * 0.5

    p = {"c1.lin.weight": uni(8, fa), "c1.bias": uni(8),
         "g1.lin_src.weight": uni(8, 8), "g1.att_src": uni(1, 2, 4), "g1.att_dst": uni(1, 2, 4), "g1.bias": uni(8),
         "g2.lin_src.weight": uni(15, 8), "g2.lin_dst.weight": uni(15, fb), "g2.att_src": uni(1, 3, 5),
         "g2.att_dst": uni(1, 3, 5), "g2.bias": uni(5)}
    p["head.weight"], p["head.bias"] = torch_linear_init(gen, 1, 5)
    # PyG's GATConv over one node set: lin_dst is lin_src, two state_dict names.
    p["g1.lin_dst.weight"] = p["g1.lin_src.weight"]
    batch_size, epochs = 4, 3
    batches = [batch_of(list(range(s, min(s + batch_size, graphs))), node_sets, edge_sets, graph_y)
               for s in range(0, graphs, batch_size)]

    def outputs(params, bt):
        xa, _, _ = bt["nodes"]["a"]
        xb, _, gb = bt["nodes"]["b"]
        h = torch.relu(gcn(params, "c1", xa, bt["edges"]["aa"]))
        h = gat(params, "g1", h, h, bt["edges"]["aa"], 2, 4, True, False)
        hb = torch.nn.functional.elu(gat(params, "g2", h, xb, bt["edges"]["ab"], 3, 5, False, True))
        return {"head": linear(params, "head", scatter(hb, gb, len(bt["y"]), "mean")), "g2": hb}

    def forward(params, bt):
        return mse(outputs(params, bt)["head"], bt["y"])

    job = f"""name: "batch_gcn_gat"
dataset {{ path: "DATA" }}
model {{
  module {{ name: "c1" input: "a.x" gcn {{ edges: "aa" out: 8 }} }}
  module {{ name: "r1" input: "c1" relu {{}} }}
  module {{ name: "g1" input: "r1" gat {{ edges: "aa" out: 4 heads: 2 }} }}
  module {{ name: "g2" input: "g1" input: "b.x" gat {{ edges: "ab" out: 5 heads: 3 concat: false }} }}
  module {{ name: "e2" input: "g2" elu {{}} }}
  module {{ name: "pool" input: "e2" pool {{ reduce: MEAN }} }}
  module {{ name: "head" input: "pool" linear {{ out: 1 }} }}
  loss_term {{ input: "head" target: "graph.y" kind: MSE }}
}}
optimizer {{ kind: ADAM lr: 0.01 weight_decay: 0 }}
schedule {{ epochs: {epochs} }}
batching {{ batch_size: {batch_size} shuffle: false }}
"""
    # gnnrt's output "e2" is what the reference calls g2 after its ELU.
    def named(params, bt):
        o = outputs(params, bt)
        return {"head": o["head"], "e2": o["g2"]}

    train(case_dir, p, forward, batches, epochs, 0.01, job, named)


def case_graph_classes(out):
    """GIN, mean pooling, a Linear to 3 classes, cross-entropy on integer
    graph labels (graph classification), and an L1 loss on the atoms'
    degrees through a per-node Linear, weighted 0.3."""
    rng = np.random.default_rng(17)
    graphs, types = 13, 4
    _, ptr = random_graphs(rng, graphs, 3, 8)
    x = np.eye(types, dtype=np.float32)[rng.integers(0, types, size=ptr[-1])]
    ei, eptr = edges_within(rng, ptr, ptr, lambda ns, nd: 2 * ns)
    degree = np.bincount(ei[1], minlength=ptr[-1]).astype(np.float32).reshape(-1, 1)
    labels = rng.integers(0, 3, size=graphs).astype(np.int64)
    node_sets = {"atom": (x, ptr, degree)}
    edge_sets = {("atom", "bond", "atom"): (ei, eptr)}
    case_dir = out / "graph_classes"
    write_folder(case_dir / "data", node_sets, edge_sets, labels)
    gen = torch.Generator().manual_seed(4)
    p = {}
    p["conv.nn.0.weight"], p["conv.nn.0.bias"] = torch_linear_init(gen, 12, types)
    p["conv.nn.2.weight"], p["conv.nn.2.bias"] = torch_linear_init(gen, 12, 12)
    p["cls.weight"], p["cls.bias"] = torch_linear_init(gen, 3, 12)
    p["deg.weight"], p["deg.bias"] = torch_linear_init(gen, 1, 12)
    batch_size, epochs = 5, 3
    batches = [batch_of(list(range(s, min(s + batch_size, graphs))), node_sets, edge_sets, labels)
               for s in range(0, graphs, batch_size)]

    def outputs(params, b):
        xa, _, gidx = b["nodes"]["atom"]
        h = torch.relu(gin(params, "conv", xa, xa, b["edges"]["bond"]))
        return {"cls": linear(params, "cls", scatter(h, gidx, len(b["y"]), "mean")), "deg": linear(params, "deg", h)}

    def forward(params, b):
        o = outputs(params, b)
        _, yd, _ = b["nodes"]["atom"]
        return (torch.nn.functional.cross_entropy(o["cls"], b["y"]) +
                0.3 * torch.nn.functional.l1_loss(o["deg"], yd))

    job = f"""name: "batch_graph_classes"
dataset {{ path: "DATA" }}
model {{
  module {{ name: "conv" input: "atom.x" gin {{ edges: "bond" out: 12 }} }}
  module {{ name: "act" input: "conv" relu {{}} }}
  module {{ name: "pool" input: "act" pool {{ reduce: MEAN }} }}
  module {{ name: "cls" input: "pool" linear {{ out: 3 }} }}
  module {{ name: "deg" input: "act" linear {{ out: 1 }} }}
  loss_term {{ input: "cls" target: "graph.y" kind: CROSS_ENTROPY }}
  loss_term {{ input: "deg" target: "atom.y" kind: L1 weight: 0.3 }}
}}
optimizer {{ kind: ADAM lr: 0.01 weight_decay: 0 }}
schedule {{ epochs: {epochs} }}
batching {{ batch_size: {batch_size} shuffle: false }}
"""
    train(case_dir, p, forward, batches, epochs, 0.01, job, outputs, buffers={"conv.eps": torch.zeros(1)})


def dit_block(p, name, x, c, ei, heads, qk_norm=False, rel_bias=False, rel_gate=False, clip=0):
    """DiT's block with adaLN-Zero conditioning (VectorWorld's DiTBlock and
    AttentionLayerDiT, with its options), from their formulas."""
    w = x.shape[1]
    mod = linear(p, name + ".adaLN_modulation.1", torch.nn.functional.silu(c))
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mod.chunk(6, dim=1)

    def modulate(t, shift, scale):
        return t * (1 + scale) + shift

    def norm(t):
        return torch.nn.functional.layer_norm(t, (w,), eps=1e-6)

    h = modulate(norm(x), shift_msa, scale_msa)
    d = w // heads
    q = linear(p, name + ".attn.to_q", h).view(-1, heads, d)
    k = linear(p, name + ".attn.to_k", h).view(-1, heads, d)
    v = linear(p, name + ".attn.to_v", h).view(-1, heads, d)
    if qk_norm:  # LayerNorm(head_dim) over each head
        q = layer_norm(p, name + ".attn.q_norm", q)
        k = layer_norm(p, name + ".attn.k_norm", k)
    src, dst = ei
    sim = (q[dst] * k[src]).sum(dim=-1) * d ** -0.5
    gate = None
    if rel_bias:
        u = layer_norm(p, name + ".attn.rel_norm", linear(p, name + ".attn.rel_proj", h))
        feat = torch.cat([u[dst], u[src], torch.abs(u[dst] - u[src])], dim=-1)
        feat = linear(p, name + ".attn.edge_mlp.2",
                      torch.nn.functional.silu(linear(p, name + ".attn.edge_mlp.0", feat)))
        sim = sim + linear(p, name + ".attn.edge_to_bias", feat, bias=False)
        if rel_gate:
            gate = 1.0 + torch.tanh(linear(p, name + ".attn.edge_to_gate", feat, bias=False))
    if clip > 0:
        sim = torch.clamp(sim, -clip, clip)
    attn = ref.segment_softmax(sim, dst, x.shape[0])
    msg = v[src] * attn.unsqueeze(-1)
    if gate is not None:
        msg = msg * gate.unsqueeze(-1)
    agg = torch.zeros(x.shape[0], heads, d).index_add(0, dst, msg).view(-1, w)
    x = x + gate_msa * linear(p, name + ".attn.proj", agg)
    h2 = modulate(norm(x), shift_mlp, scale_mlp)
    m = linear(p, name + ".mlp.fc2", torch.nn.functional.gelu(linear(p, name + ".mlp.fc1", h2), approximate="tanh"))
    return x + gate_mlp * m


def dit_final(p, name, x, c):
    """DiT's final layer: linear(LN(x) (1 + scale) + shift), adaLN-conditioned."""
    shift, scale = linear(p, name + ".adaLN_modulation.1", torch.nn.functional.silu(c)).chunk(2, dim=1)
    h = torch.nn.functional.layer_norm(x, (x.shape[1],), eps=1e-6) * (1 + scale) + shift
    return linear(p, name + ".linear", h)


def context_fusion(p, name, a, ga, b, gb, graphs, var_scale):
    """VectorWorld's GlobalContextFusion: per-graph means of a and of
    agent_to_hidden(b) (each plus var_scale x relu(E[x^2] - E[x]^2)),
    concatenated, fuse_mlp (Linear, SiLU, Linear), ctx_to_c (no bias)."""
    def context(v, gi):
        mean = scatter(v, gi, graphs, "mean")
        if var_scale:
            mean = mean + var_scale * torch.relu(scatter(v * v, gi, graphs, "mean") - mean * mean)
        return mean
    up = linear(p, name + ".agent_to_hidden", b)
    h = torch.cat([context(a, ga), context(up, gb)], dim=1)
    h = linear(p, name + ".fuse_mlp.2", torch.nn.functional.silu(linear(p, name + ".fuse_mlp.0", h)))
    return linear(p, name + ".ctx_to_c", h, bias=False)


def init_dit_block(gen, p, name, w, hidden, heads=1, qk_norm=False, rel=0, edge=0, rel_gate=False, **_):
    p[f"{name}.adaLN_modulation.1.weight"], p[f"{name}.adaLN_modulation.1.bias"] = torch_linear_init(gen, 6 * w, w)
    for lin in ("attn.to_q", "attn.to_k", "attn.to_v", "attn.proj"):
        p[f"{name}.{lin}.weight"], p[f"{name}.{lin}.bias"] = torch_linear_init(gen, w, w)
    p[f"{name}.mlp.fc1.weight"], p[f"{name}.mlp.fc1.bias"] = torch_linear_init(gen, hidden, w)
    p[f"{name}.mlp.fc2.weight"], p[f"{name}.mlp.fc2.bias"] = torch_linear_init(gen, w, hidden)
    if qk_norm:
        init_norm(gen, p, f"{name}.attn.q_norm", w // heads)
        init_norm(gen, p, f"{name}.attn.k_norm", w // heads)
    if rel:
        p[f"{name}.attn.rel_proj.weight"], p[f"{name}.attn.rel_proj.bias"] = torch_linear_init(gen, rel, w)
        init_norm(gen, p, f"{name}.attn.rel_norm", rel)
        p[f"{name}.attn.edge_mlp.0.weight"], p[f"{name}.attn.edge_mlp.0.bias"] = torch_linear_init(gen, 2 * edge, 3 * rel)
        p[f"{name}.attn.edge_mlp.2.weight"], p[f"{name}.attn.edge_mlp.2.bias"] = torch_linear_init(gen, edge, 2 * edge)
        p[f"{name}.attn.edge_to_bias.weight"], _ = torch_linear_init(gen, heads, edge)
        if rel_gate:
            p[f"{name}.attn.edge_to_gate.weight"], _ = torch_linear_init(gen, heads, edge)


def train_scene_case(case_dir, params32, outputs, batches, epochs, batch_size, name, modules):
    """The scene cases' job and objective: `modules` (job text) ending in
    "head" (per graph) and "agent_head" (per agent); graph MSE plus 0.5 x
    the per-agent MSE; SGD with momentum (why: case_scene_layers)."""
    def forward(params, bt):
        o = outputs(params, bt)
        _, ya, _ = bt["nodes"]["agent"]
        return mse(o["head"], bt["y"]) + 0.5 * mse(o["agent_head"], ya)

    job = f"""name: "{name}"
dataset {{ path: "DATA" }}
model {{
{modules}  loss_term {{ input: "head" target: "graph.y" kind: MSE }}
  loss_term {{ input: "agent_head" target: "agent.y" kind: MSE weight: 0.5 }}
}}
optimizer {{ kind: SGD lr: 0.01 momentum: 0.9 weight_decay: 0 }}
schedule {{ epochs: {epochs} }}
batching {{ batch_size: {batch_size} shuffle: false }}
"""
    train(case_dir, params32, forward, batches, epochs, 0.01, job, outputs, momentum=0.9)


# DiT blocks: name, hidden, {heads, mlp_ratio[, attention options]}.
DIT_BLOCKS = [("blk1", 16, {"heads": 2, "mlp_ratio": 2}), ("blk2", 12, {"heads": 4, "mlp_ratio": 1.5})]
# AttentionLayerDiT's options: q/k norms, the relational bias and gate and a
# logit clip that clamps some of the logits (a fifth to a third of them).
DIT_RELATIONAL_BLOCKS = [
    ("blk1", 16, {"heads": 2, "mlp_ratio": 2, "qk_norm": True, "rel": 6, "edge": 5, "rel_gate": True, "clip": 1.5}),
    ("blk2", 12, {"heads": 4, "mlp_ratio": 1.5, "rel": 4, "edge": 3}),
]


def dit_text(name, inp, o):
    opts = f"edges: \"a2a\" heads: {o['heads']} mlp_ratio: {o['mlp_ratio']}"
    if o.get("qk_norm"):
        opts += " qk_norm: true"
    if o.get("rel"):
        opts += f" rel_bias: true rel_dim: {o['rel']} edge_dim: {o['edge']}"
    if o.get("rel_gate"):
        opts += " rel_gate: true"
    if o.get("clip"):
        opts += f" logit_clip: {o['clip']}"
    return f'  module {{ name: "{name}" input: "{inp}" input: "cond" dit_block {{ {opts} }} }}\n'


def case_dit(out, case="dit", blocks=DIT_BLOCKS):
    """VectorWorld's DiT-side layers: GlobalContextFusion of lanes and
    agents (with the variance term) as the per-graph condition, broadcast
    to the agents; two DiT blocks (adaLN conditioning) over agent->agent
    edges (`blocks`: dit, plain; dit_relational, with q/k norms, the
    relational bias and gate and the logit clip); DiT's final layer. Every
    parameter drawn non-zero (the zero initialisations would leave most of
    them without a gradient at the first step). Sum pooling and a Linear
    head (graph MSE) plus 0.5 x a per-agent MSE through the final layer.
    SGD with momentum, as scene_layers."""
    rng = np.random.default_rng(19)
    graphs, fa, fl = 8, 5, 4
    _, ptr = random_graphs(rng, graphs, 1, 6)
    _, ptr_l = random_graphs(rng, graphs, 1, 5)
    xa = rng.normal(size=(ptr[-1], fa))
    ya = rng.normal(size=(ptr[-1], 1))
    xl = rng.normal(size=(ptr_l[-1], fl))
    a2a, a2a_ptr = edges_within(rng, ptr, ptr, lambda ns, nd: ns * nd)
    graph_y = rng.normal(size=(graphs, 1))
    node_sets = {"agent": (xa, ptr, ya), "lane": (xl, ptr_l, None)}
    edge_sets = {("agent", "a2a", "agent"): (a2a, a2a_ptr)}
    case_dir = out / case
    write_folder(case_dir / "data", node_sets, edge_sets, graph_y)
    gen = torch.Generator().manual_seed(7)
    p = {}
    w = 8
    p["emb.weight"], p["emb.bias"] = torch_linear_init(gen, w, fa)
    p["lane_emb.weight"], p["lane_emb.bias"] = torch_linear_init(gen, w, fl)
    p["ctx.agent_to_hidden.weight"], p["ctx.agent_to_hidden.bias"] = torch_linear_init(gen, w, w)
    p["ctx.fuse_mlp.0.weight"], p["ctx.fuse_mlp.0.bias"] = torch_linear_init(gen, w, 2 * w)
    p["ctx.fuse_mlp.2.weight"], p["ctx.fuse_mlp.2.bias"] = torch_linear_init(gen, w, w)
    p["ctx.ctx_to_c.weight"], _ = torch_linear_init(gen, w, w)
    for name, hidden, o in blocks:
        init_dit_block(gen, p, name, w, hidden, **o)
    p["fin.adaLN_modulation.1.weight"], p["fin.adaLN_modulation.1.bias"] = torch_linear_init(gen, 2 * w, w)
    p["fin.linear.weight"], p["fin.linear.bias"] = torch_linear_init(gen, 3, w)
    p["head.weight"], p["head.bias"] = torch_linear_init(gen, 1, w)
    p["agent_head.weight"], p["agent_head.bias"] = torch_linear_init(gen, 1, 3)
    batch_size, epochs = 3, 3
    batches = [batch_of(list(range(s, min(s + batch_size, graphs))), node_sets, edge_sets, graph_y)
               for s in range(0, graphs, batch_size)]

    def outputs(params, bt):
        xa, _, ga = bt["nodes"]["agent"]
        xl, _, gl = bt["nodes"]["lane"]
        g = len(bt["y"])
        emb = linear(params, "emb", xa)
        lane = linear(params, "lane_emb", xl)
        cond = context_fusion(params, "ctx", lane, gl, emb, ga, g, 0.5)[ga]
        h = emb
        for name, _hidden, o in blocks:
            h = dit_block(params, name, h, cond, bt["edges"]["a2a"], o["heads"], o.get("qk_norm", False),
                          bool(o.get("rel")), o.get("rel_gate", False), o.get("clip", 0))
        fin = dit_final(params, "fin", h, cond)
        return {"head": linear(params, "head", scatter(h, ga, g, "sum")),
                "agent_head": linear(params, "agent_head", fin)}

    modules = """  module { name: "emb" input: "agent.x" linear { out: 8 } }
  module { name: "lane_emb" input: "lane.x" linear { out: 8 } }
  module { name: "ctx" input: "lane_emb" input: "emb" context_fusion { out: 8 var_scale: 0.5 } }
  module { name: "cond" input: "ctx" broadcast { node_set: "agent" } }
""" + dit_text("blk1", "emb", blocks[0][2]) + dit_text("blk2", "blk1", blocks[1][2]) + """\
  module { name: "fin" input: "blk2" input: "cond" dit_final { out: 3 } }
  module { name: "sum" input: "blk2" pool { reduce: SUM } }
  module { name: "head" input: "sum" linear { out: 1 } }
  module { name: "agent_head" input: "fin" linear { out: 1 } }
"""
    train_scene_case(case_dir, p, outputs, batches, epochs, batch_size, "batch_" + case, modules)


def init_residual_mlp(gen, p, name, inp, hidden, layers, out):
    for i in range(layers):
        p[f"{name}.linears.{i}.weight"], p[f"{name}.linears.{i}.bias"] = torch_linear_init(gen, hidden, inp if i == 0 else hidden)
        init_norm(gen, p, f"{name}.norms.{i}", hidden)
    p[f"{name}.transform_linear.weight"], p[f"{name}.transform_linear.bias"] = torch_linear_init(gen, hidden, inp)
    init_norm(gen, p, f"{name}.transform_norm", hidden)
    if out:
        p[f"{name}.linear_out.weight"], p[f"{name}.linear_out.bias"] = torch_linear_init(gen, out, hidden)


def init_norm(gen, p, prefix, width):
    # Near the defaults (1, 0), drawn so that a swapped weight and bias show.
    p[prefix + ".weight"] = 1 + 0.1 * torch.randn(width, generator=gen, dtype=torch.float32)
    p[prefix + ".bias"] = 0.1 * torch.randn(width, generator=gen, dtype=torch.float32)


def init_attention(gen, p, name, width, heads, ff, bipartite, r_width=0):
    hd = width  # head_dim = width / heads
    p[f"{name}.to_q.weight"], p[f"{name}.to_q.bias"] = torch_linear_init(gen, hd, width)
    p[f"{name}.to_k.weight"], _ = torch_linear_init(gen, hd, width)
    p[f"{name}.to_v.weight"], p[f"{name}.to_v.bias"] = torch_linear_init(gen, hd, width)
    if r_width:
        p[f"{name}.to_k_r.weight"], _ = torch_linear_init(gen, hd, r_width)
        p[f"{name}.to_v_r.weight"], p[f"{name}.to_v_r.bias"] = torch_linear_init(gen, hd, r_width)
        init_norm(gen, p, f"{name}.attn_prenorm_r", r_width)
    p[f"{name}.to_s.weight"], p[f"{name}.to_s.bias"] = torch_linear_init(gen, hd, width)
    p[f"{name}.to_g.weight"], p[f"{name}.to_g.bias"] = torch_linear_init(gen, hd, hd + width)
    p[f"{name}.to_out.weight"], p[f"{name}.to_out.bias"] = torch_linear_init(gen, width, hd)
    p[f"{name}.ff_mlp.0.weight"], p[f"{name}.ff_mlp.0.bias"] = torch_linear_init(gen, ff, width)
    p[f"{name}.ff_mlp.3.weight"], p[f"{name}.ff_mlp.3.bias"] = torch_linear_init(gen, width, ff)
    for norm in ["attn_prenorm_x_src"] + (["attn_prenorm_x_dst"] if bipartite else []) + \
            ["attn_postnorm", "ff_prenorm", "ff_postnorm"]:
        init_norm(gen, p, f"{name}.{norm}", width)
    if not bipartite:
        # VectorWorld's attn_prenorm_x_dst = attn_prenorm_x_src: one module,
        # two state_dict names.
        p[f"{name}.attn_prenorm_x_dst.weight"] = p[f"{name}.attn_prenorm_x_src.weight"]
        p[f"{name}.attn_prenorm_x_dst.bias"] = p[f"{name}.attn_prenorm_x_src.bias"]


def case_scene_layers(out):
    """VectorWorld's layers on a small scene-like set: node sets lane and
    agent; lane->lane edges with connection features, lane->agent,
    agent->agent. ResidualMLP embeddings (nodes and edges, with and
    without linear_out); attention over l2l with edge features, bipartite
    l2a (own pre-norms) and l2a2 (shared pre-norm, attn_prenorm_x_dst
    unused), a2a without; the EdgeFeatureUpdate pattern (gathers of both
    endpoints, concatenations, ResidualMLPs) feeding a second l2l
    attention; a LayerNorm without affine parameters, a sigmoid; the
    agents' gated embedding (1 - g) static + g motion (scale, mul, add); a
    learnable query token per scene (node set query, lane->query edges,
    attention with a shared pre-norm); mean and sum pooling, a Linear head
    (graph MSE) plus 0.5 x a per-agent MSE. SGD with momentum, not Adam: with Adam this case's parameters after 9
    steps hang on near-cancelling moments (one element's second gradient
    undoes its first), where float32 rounding in the gradients (about 1e-5
    of their scale, in torch's float32 as in gnnrt's) moves a parameter by
    far more than the tolerance; SGD keeps the comparison to the formulas."""
    rng = np.random.default_rng(17)
    graphs, fl, fa, fr = 9, 6, 5, 3
    _, ptr_l = random_graphs(rng, graphs, 2, 6)
    _, ptr_a = random_graphs(rng, graphs, 1, 4)
    xl = rng.normal(size=(ptr_l[-1], fl))
    xa = rng.normal(size=(ptr_a[-1], fa))
    ya = rng.normal(size=(ptr_a[-1], 2))
    l2l, l2l_ptr = edges_within(rng, ptr_l, ptr_l, lambda ns, nd: 2 * ns)
    rx = rng.normal(size=(l2l.shape[1], fr))
    l2a, l2a_ptr = edges_within(rng, ptr_l, ptr_a, lambda ns, nd: ns + nd)
    a2a, a2a_ptr = edges_within(rng, ptr_a, ptr_a, lambda ns, nd: ns * nd)
    graph_y = rng.normal(size=(graphs, 1))
    # One query row a scene, every lane of the scene pointing at it.
    ptr_q = np.arange(graphs + 1, dtype=np.int64)
    xq = np.zeros((graphs, 1))
    l2q = np.array([[l for g in range(graphs) for l in range(ptr_l[g], ptr_l[g + 1])],
                    [g for g in range(graphs) for _ in range(ptr_l[g], ptr_l[g + 1])]], dtype=np.int64)
    l2q_ptr = ptr_l.copy()
    node_sets = {"lane": (xl, ptr_l, None), "agent": (xa, ptr_a, ya), "query": (xq, ptr_q, None)}
    edge_sets = {("lane", "l2l", "lane"): (l2l, l2l_ptr, rx), ("lane", "l2a", "agent"): (l2a, l2a_ptr),
                 ("agent", "a2a", "agent"): (a2a, a2a_ptr), ("lane", "l2q", "query"): (l2q, l2q_ptr)}
    case_dir = out / "scene_layers"
    write_folder(case_dir / "data", node_sets, edge_sets, graph_y)
    gen = torch.Generator().manual_seed(5)
    p = {}
    w, heads, ff, rw = 8, 2, 12, 4
    init_residual_mlp(gen, p, "lane_emb", fl, w, 2, 0)
    init_residual_mlp(gen, p, "static_emb", fa, 6, 1, w)
    init_residual_mlp(gen, p, "motion_emb", fa, w, 2, 0)
    init_residual_mlp(gen, p, "gate_logit", fa, w, 1, w)
    p["Q"] = torch.rand((1, w), generator=gen, dtype=torch.float32) * 2 - 1
    init_attention(gen, p, "l2q", w, heads, ff, True)
    init_residual_mlp(gen, p, "conn", fr, rw, 1, 0)
    init_attention(gen, p, "l2l", w, heads, ff, False, rw)
    init_attention(gen, p, "l2a", w, heads, ff, True)
    init_attention(gen, p, "l2a2", w, heads, ff, True)
    init_attention(gen, p, "a2a", w, heads, ff, False)
    init_residual_mlp(gen, p, "edge_node", 2 * w, rw, 2, 0)
    init_residual_mlp(gen, p, "edge_mlp", 2 * rw, rw, 2, 0)
    init_attention(gen, p, "l2l_b", w, heads, ff, False, rw)
    p["head.weight"], p["head.bias"] = torch_linear_init(gen, 1, 3 * w)
    p["agent_head.weight"], p["agent_head.bias"] = torch_linear_init(gen, 2, w)
    batch_size, epochs = 4, 3
    batches = [batch_of(list(range(s, min(s + batch_size, graphs))), node_sets, edge_sets, graph_y)
               for s in range(0, graphs, batch_size)]

    def outputs(params, bt):
        xl, _, gl = bt["nodes"]["lane"]
        xa, _, ga = bt["nodes"]["agent"]
        g = len(bt["y"])
        e = bt["edges"]
        lane = residual_mlp(params, "lane_emb", xl, 2, 0)
        # VectorWorld's agent gating: (1 - g) static + g motion.
        g_agent = torch.sigmoid(residual_mlp(params, "gate_logit", xa, 1, w))
        agent = (1 - g_agent) * residual_mlp(params, "static_emb", xa, 1, w) + g_agent * residual_mlp(params, "motion_emb", xa, 2, 0)
        conn = residual_mlp(params, "conn", bt["edge_x"]["l2l"], 1, 0)
        lane1 = attention(params, "l2l", lane, lane, e["l2l"], conn, heads, False)
        agent1 = attention(params, "l2a", lane1, agent, e["l2a"], None, heads, True)
        agent2 = attention(params, "l2a2", lane1, layer_norm(params, "", agent1, affine=False), e["l2a"], None,
                           heads, True, shared=True)
        agent3 = attention(params, "a2a", agent2, agent2, e["a2a"], None, heads, False)
        src, dst = e["l2l"]
        node_f = residual_mlp(params, "edge_node", torch.cat([lane1[dst], lane1[src]], dim=1), 2, 0)
        conn2 = residual_mlp(params, "edge_mlp", torch.cat([node_f, conn], dim=1), 2, 0)
        lane2 = attention(params, "l2l_b", lane1, lane1, e["l2l"], conn2, heads, False)
        query = attention(params, "l2q", lane2, params["Q"].expand(g, -1), e["l2q"], None, heads, True, shared=True)
        pooled = torch.cat([scatter(agent3, ga, g, "mean"), torch.sigmoid(scatter(lane2, gl, g, "sum")), query], dim=1)
        return {"head": linear(params, "head", pooled), "agent_head": linear(params, "agent_head", agent3)}

    modules = """  module { name: "lane_emb" input: "lane.x" residual_mlp { hidden: 8 hidden_layers: 2 } }
  module { name: "static_emb" input: "agent.x" residual_mlp { hidden: 6 hidden_layers: 1 out: 8 } }
  module { name: "motion_emb" input: "agent.x" residual_mlp { hidden: 8 } }
  module { name: "gate_logit" input: "agent.x" residual_mlp { hidden: 8 hidden_layers: 1 out: 8 } }
  module { name: "gate" input: "gate_logit" activation { kind: SIGMOID } }
  module { name: "keep" input: "gate" scale { alpha: -1 beta: 1 } }
  module { name: "kept" input: "keep" input: "static_emb" mul {} }
  module { name: "moved" input: "gate" input: "motion_emb" mul {} }
  module { name: "agent_emb" input: "kept" input: "moved" add {} }
  module { name: "conn" input: "l2l.x" residual_mlp { hidden: 4 hidden_layers: 1 } }
  module { name: "l2l" input: "lane_emb" input: "conn" attention { edges: "l2l" heads: 2 feedforward: 12 } }
  module { name: "l2a" input: "l2l" input: "agent_emb" attention { edges: "l2a" heads: 2 feedforward: 12 } }
  module { name: "plain" input: "l2a" layer_norm { affine: false } }
  module { name: "l2a2" input: "l2l" input: "plain" attention { edges: "l2a" heads: 2 feedforward: 12 shared_prenorm: true } }
  module { name: "a2a" input: "l2a2" attention { edges: "a2a" heads: 2 feedforward: 12 } }
  module { name: "at_dst" input: "l2l" gather { edges: "l2l" destination: true } }
  module { name: "at_src" input: "l2l" gather { edges: "l2l" } }
  module { name: "ends" input: "at_dst" input: "at_src" concat {} }
  module { name: "edge_node" input: "ends" residual_mlp { hidden: 4 } }
  module { name: "edge_in" input: "edge_node" input: "conn" concat {} }
  module { name: "edge_mlp" input: "edge_in" residual_mlp { hidden: 4 } }
  module { name: "l2l_b" input: "l2l" input: "edge_mlp" attention { edges: "l2l" heads: 2 feedforward: 12 } }
  module { name: "agents" input: "a2a" pool { reduce: MEAN } }
  module { name: "lanes" input: "l2l_b" pool { reduce: SUM } }
  module { name: "lanes_act" input: "lanes" activation { kind: SIGMOID } }
  module { name: "Q" token { node_set: "query" width: 8 } }
  module { name: "l2q" input: "l2l_b" input: "Q" attention { edges: "l2q" heads: 2 feedforward: 12 shared_prenorm: true } }
  module { name: "queries" input: "l2q" pool { reduce: SUM } }
  module { name: "both" input: "agents" input: "lanes_act" input: "queries" concat {} }
  module { name: "head" input: "both" linear { out: 1 } }
  module { name: "agent_head" input: "a2a" linear { out: 2 } }
"""
    train_scene_case(case_dir, p, outputs, batches, epochs, batch_size, "batch_scene_layers", modules)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "golden" / "batch")
    args = parser.parse_args()
    # Each case's folder afresh; scene_encoder/ beside them is
    # make_encoder_golden.py's.
    args.out.mkdir(parents=True, exist_ok=True)
    for case in ("gin_sum_pool", "hetero", "gcn_gat", "graph_classes", "scene_layers", "dit", "dit_relational"):
        shutil.rmtree(args.out / case, ignore_errors=True)
    case_gin(args.out)
    case_hetero(args.out)
    case_gcn_gat(args.out)
    case_graph_classes(args.out)
    case_scene_layers(args.out)
    case_dit(args.out)
    case_dit(args.out, "dit_relational", DIT_RELATIONAL_BLOCKS)


if __name__ == "__main__":
    main()
