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
from batch_reference import (attention, batch_of, context_fusion, dit_block, dit_final, edges_within,  # noqa: E402
                             gat, gcn, gin, init_attention, init_dit_block, init_residual_mlp, layer_norm, linear,
                             mlp, mse, random_graphs, residual_mlp, sage, scatter, torch_linear_init, train,
                             train_scene_case, write_folder)

torch.set_default_dtype(torch.float64)


# ---- cases ----


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
