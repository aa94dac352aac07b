#!/usr/bin/python3
"""Writes the golden data of gnnrt's scene-encoder tests from an independent
PyTorch 1.13 reference of VectorWorld's VAE scene encoder
(ScenarioDreamerEncoder), written from its formulas: the torch.nn modules
of vectorworld_reference.py (VectorWorld's layout, shared with
bench/scene_encoder.py), so that their state_dict names are the names gnnrt
must give its parameters, and forwards from the layer formulas of
make_batch_golden.py (ResidualMLP, QCNet's attention layer), with PyG-style
batching.

Layout under --out (default tests/golden/batch/scene_encoder/):
  data/            a batch dataset folder of small synthetic scenes (numpy)
  job.pbtxt        the encoder at reduced widths (scripts/scene_encoder_job.py)
                   with its VAE objective; one batch of every scene, 50 Adam steps
  params_init/     <state_dict key>.npy float32 (aliased keys included)
  outputs_init/    eval-mode outputs with params_init: encoder.agent_mu,
                   encoder.lane_mu, their log variances, lane_count_logits
  grads/           the first training step's gradient of every key (float32)
  epoch_losses.npy float64 [50]: the loss of each step (one batch an epoch)
  keys.txt         at vae.yaml's full sizes: every encoder key and its shape,
                   then the count of distinct parameters

The reparameterisation noise is gnnrt's definition (ops/noise.h) computed
here with this script's own Philox4x64-10 (Random123's algorithm) and
Box-Muller: element (r, c) of a reparameterize module's noise at step s is
normal c % 4 of philox(key=(seed, "noise"), counter=(s, module position + 1,
global row r, c // 4)).

Usage: /usr/bin/python3 tests/reference/make_encoder_golden.py [--out DIR]
CI does not run this; its files are committed. A re-run writes identical bytes.
"""
import argparse
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "scripts"))
import make_batch_golden as mbg  # noqa: E402
import scene_encoder_job as jobs  # noqa: E402
from philox import philox4x64  # noqa: E402
import vectorworld_reference as vw  # noqa: E402

torch.set_default_dtype(torch.float64)

# ---- Philox4x64-10 and Box-Muller (Random123; gnnrt's ops/rng.h) ----
NOISE_STREAM = 0x6E6F697365  # "noise"


def normals(words):
    z = []
    for pair in range(2):
        u1 = ((words[2 * pair] >> 11) + 1) * 2.0 ** -53
        u2 = (words[2 * pair + 1] >> 11) * 2.0 ** -53
        radius = math.sqrt(-2.0 * math.log(u1))
        z += [radius * math.cos(2 * math.pi * u2), radius * math.sin(2 * math.pi * u2)]
    return z


def noise(seed, step, op, global_rows, cols):
    out = np.zeros((len(global_rows), cols))
    for i, row in enumerate(global_rows):
        for block in range(0, cols, 4):
            z = normals(philox4x64((step, op, int(row), block // 4), (seed, NOISE_STREAM)))
            for c in range(block, min(cols, block + 4)):
                out[i, c] = z[c - block]
    return torch.tensor(out)


def encode(p, s, bt):
    """ScenarioDreamerEncoder.forward with the parameters p (state_dict
    names, "encoder." prefixed)."""
    xa, _, ga = bt["nodes"]["agent"]
    xl, _, gl = bt["nodes"]["lane"]
    e = bt["edges"]
    scenes = len(bt["y"])
    st, mo, ty = s["state"], s["motion"], s["types"]
    rmlp = lambda name, x, n=2, out=0: mbg.residual_mlp(p, "encoder." + name, x, n, out)  # noqa: E731
    h_static = rmlp("agent_static_mlp", torch.cat([xa[:, :st], xa[:, st + mo:]], dim=1))
    h_motion = rmlp("agent_motion_mlp", torch.cat([xa[:, st:st + mo], xa[:, st + mo:]], dim=1))
    g = torch.sigmoid(rmlp("agent_gate_mlp", xa, 1, s["agent_hidden"]))
    agents = (1 - g) * h_static + g * h_motion
    lanes = rmlp("lane_mlp", xl)
    conns = rmlp("lane_conn_mlp", bt["edge_x"]["l2l"])
    query = p["encoder.Q"].expand(scenes, -1)
    src, dst = e["l2l"]
    for b in range(s["blocks"]):
        n = f"encoder.encoder_transformer_blocks.{b}"
        lanes = mbg.attention(p, f"{n}.l2l_transformer_layer", lanes, lanes, e["l2l"], conns, s["heads"], False)
        down = mbg.linear(p, f"{n}.downsample_lane_emb", lanes)
        agents = mbg.attention(p, f"{n}.l2a_transformer_layer", down, agents, e["l2a"], None, s["agent_heads"], True,
                               shared=True)
        agents = mbg.attention(p, f"{n}.a2a_transformer_layer", agents, agents, e["a2a"], None, s["agent_heads"],
                               False)
        u = f"{n}.update_edge_embeddings"
        node_f = mbg.residual_mlp(p, f"{u}.node_mlp", torch.cat([down[dst], down[src]], dim=1), 2, 0)
        conns = mbg.residual_mlp(p, f"{u}.edge_mlp", torch.cat([node_f, conns], dim=1), 2, 0)
        query = mbg.attention(p, "encoder.l2q_transformer_layer", lanes, query, e["l2q"], None, s["heads"], True,
                              shared=True)
    return {"encoder.agent_mu": mbg.linear(p, "encoder.agent_mu", agents),
            "encoder.lane_mu": mbg.linear(p, "encoder.lane_mu", lanes),
            "encoder.agent_log_var": mbg.linear(p, "encoder.agent_log_var", agents),
            "encoder.lane_log_var": mbg.linear(p, "encoder.lane_log_var", lanes),
            "lane_count_logits": rmlp("pred_lane_cond_dis", query, 2, s["max_lanes"] + 1)}


# Reduced widths: every layer of the full encoder, small enough for CI.
SMALL = dict(jobs.FULL, hidden=16, heads=2, ff=24, agent_hidden=8, agent_heads=2, agent_ff=12, conn_hidden=6,
             lane_latent=5, agent_latent=4, max_lanes=7)
STEPS, LR, SEED = 50, 0.003, 0


def scenes(rng, count):
    """Scene-like data in the `scenes:` layout (model/data/scenes.h): lanes as
    20-point polylines / 100 m, agents [7 state, 12 motion, 3 type],
    every ordered pair connected within a scene, typed lane connections."""
    _, ptr_l = mbg.random_graphs(rng, count, 2, 5)
    _, ptr_a = mbg.random_graphs(rng, count, 1, 4)
    nl, na = ptr_l[-1], ptr_a[-1]
    start = rng.uniform(-0.5, 0.5, size=(nl, 1, 2))
    heading = rng.uniform(0, 2 * np.pi, size=(nl, 1))
    steps = np.arange(20)[None, :, None] * 0.02 * np.stack([np.cos(heading), np.sin(heading)], axis=-1)
    xl = (start + steps).reshape(nl, 40)
    state = rng.normal(size=(na, 7)) * 0.5
    motion = np.cumsum(rng.normal(size=(na, 6, 2)) * 0.1, axis=1).reshape(na, 12)
    types = np.eye(3)[rng.integers(0, 3, size=na)]
    xa = np.concatenate([state, motion, types], axis=1)

    def pairs(ptr_s, ptr_d):
        src, dst, eptr = [], [], [0]
        for g in range(count):
            for i in range(ptr_s[g], ptr_s[g + 1]):
                for j in range(ptr_d[g], ptr_d[g + 1]):
                    src.append(i)
                    dst.append(j)
            eptr.append(len(src))
        return np.array([src, dst], dtype=np.int64).reshape(2, -1), np.array(eptr, dtype=np.int64)

    l2l, l2l_ptr = pairs(ptr_l, ptr_l)
    kind = np.where(l2l[0] == l2l[1], 4, rng.integers(0, 6, size=l2l.shape[1]))
    kind = np.where((l2l[0] != l2l[1]) & (kind == 4), 5, kind)
    rx = np.eye(6)[kind]
    l2a, l2a_ptr = pairs(ptr_l, ptr_a)
    a2a, a2a_ptr = pairs(ptr_a, ptr_a)
    ptr_q = np.arange(count + 1, dtype=np.int64)
    l2q = np.array([np.arange(nl), np.repeat(np.arange(count), np.diff(ptr_l))], dtype=np.int64)
    lane_count = np.diff(ptr_l).astype(np.int64)
    node_sets = {"lane": (xl, ptr_l, xl), "agent": (xa, ptr_a, xa), "query": (np.zeros((count, 1)), ptr_q, None)}
    edge_sets = {("lane", "l2l", "lane"): (l2l, l2l_ptr, rx), ("lane", "l2a", "agent"): (l2a, l2a_ptr),
                 ("agent", "a2a", "agent"): (a2a, a2a_ptr), ("lane", "l2q", "query"): (l2q, ptr_l.copy())}
    return node_sets, edge_sets, lane_count


def draw(model, gen):
    """Initial values, float32: Linear weights and biases uniform within
    torch.nn.Linear's bound, LayerNorms near (1, 0) but not at them (so a
    swapped weight and bias show), Q uniform."""
    drawn = {}
    uniform = lambda shape, bound: (torch.rand(shape, generator=gen, dtype=torch.float32) * 2 - 1) * bound  # noqa: E731
    for _, m in model.named_modules():
        if id(m.weight if hasattr(m, "weight") else m) in drawn:
            continue  # an aliased norm
        if isinstance(m, nn.Linear):
            bound = 1.0 / math.sqrt(m.in_features)
            drawn[id(m.weight)] = uniform(m.weight.shape, bound)
            if m.bias is not None:
                drawn[id(m.bias)] = uniform(m.bias.shape, bound)
        elif isinstance(m, nn.LayerNorm):
            drawn[id(m.weight)] = 1 + 0.1 * torch.randn(m.weight.shape, generator=gen, dtype=torch.float32)
            drawn[id(m.bias)] = 0.1 * torch.randn(m.bias.shape, generator=gen, dtype=torch.float32)
    q = model.encoder.Q
    drawn[id(q)] = uniform(q.shape, 1.0 / math.sqrt(q.shape[1]))
    return {name: drawn[id(t)] for name, t in model.state_dict(keep_vars=True).items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE.parent / "golden" / "batch" / "scene_encoder")
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    s = SMALL

    # The full encoder's keys, shapes and distinct parameter count.
    full = vw.Encoder(jobs.FULL)
    lines = [f"encoder.{k} {'x'.join(str(d) for d in v.shape)}" for k, v in full.state_dict().items()]
    distinct = sum(p.numel() for p in full.parameters())
    (args.out / "keys.txt").write_text("\n".join(sorted(lines)) + f"\nparameters {distinct}\n")
    del full

    rng = np.random.default_rng(23)
    count = 6
    node_sets, edge_sets, lane_count = scenes(rng, count)
    mbg.write_folder(args.out / "data", node_sets, edge_sets, lane_count)
    batch = mbg.batch_of(list(range(count)), node_sets, edge_sets, lane_count)
    job = jobs.encoder_job(s, "scene_encoder_golden", "DATA", STEPS, count, LR, " shuffle: false")
    (args.out / "job.pbtxt").write_text(job)
    names = [line.split('name: "')[1].split('"')[0] for line in job.splitlines() if line.strip().startswith("module {")]
    key = {n: names.index(n) + 1 for n in ("agent_z", "lane_z")}  # a module's dropout/noise key

    model = vw.Model(s)
    p32 = draw(model, torch.Generator().manual_seed(3))
    # Keys of one tensor share its float64 clone.
    clones, params = {}, {}
    for k, v in p32.items():
        if id(v) not in clones:
            clones[id(v)] = v.to(torch.float64).clone().requires_grad_(True)
        params[k] = clones[id(v)]

    xa_rows = np.arange(node_sets["agent"][1][-1])  # every scene in order: global row = batch row
    xl_rows = np.arange(node_sets["lane"][1][-1])
    _, ya, _ = batch["nodes"]["agent"]
    _, yl, _ = batch["nodes"]["lane"]

    def loss_at(step):
        o = encode(params, s, batch)
        za = o["encoder.agent_mu"] + (0.5 * o["encoder.agent_log_var"]).exp() * noise(
            SEED, step, key["agent_z"], xa_rows, s["agent_latent"])
        zl = o["encoder.lane_mu"] + (0.5 * o["encoder.lane_log_var"]).exp() * noise(
            SEED, step, key["lane_z"], xl_rows, s["lane_latent"])
        return (mbg.mse(mbg.linear(params, "recon.agent", za), ya) + mbg.mse(mbg.linear(params, "recon.lane", zl), yl)
                + 0.01 * vw.kl(o["encoder.agent_mu"], o["encoder.agent_log_var"])
                + 0.01 * vw.kl(o["encoder.lane_mu"], o["encoder.lane_log_var"])
                + 0.08 * torch.nn.functional.cross_entropy(o["lane_count_logits"], batch["y"]))

    def save(sub, tensors):
        (args.out / sub).mkdir()
        for k, v in tensors.items():
            np.save(args.out / sub / f"{k}.npy", v.detach().to(torch.float32).numpy())

    save("params_init", p32)
    with torch.no_grad():
        save("outputs_init", encode(params, s, batch))
    opt = torch.optim.Adam(clones.values(), lr=LR, weight_decay=0.0)
    losses = []
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        loss = loss_at(step)
        loss.backward()
        if step == 1:
            # The shared pre-norms' attn_prenorm_x_dst take no part: zero.
            save("grads", {k: torch.zeros_like(v) if v.grad is None else v.grad for k, v in params.items()})
        opt.step()
        losses.append(loss.item())
    np.save(args.out / "epoch_losses.npy", np.array(losses, dtype=np.float64))
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} ({100 * (losses[-1] / losses[0] - 1):.1f}%)")


if __name__ == "__main__":
    main()
