#!/usr/bin/python3
"""What make_batch_golden.py's cases share: the layers in torch, written
from PyG's and VectorWorld's formulas (GIN, SAGE, GCN, GAT, MLP, LayerNorm,
ResidualMLP, QCNet attention, DiT blocks, context fusion) and their
initialisation; batch datasets in numpy (PyG Batch layout); batches; and
the training loop that writes a case's parameters, losses and outputs."""
import sys
from pathlib import Path

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
