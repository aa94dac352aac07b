#!/usr/bin/python3
"""Writes the golden data of gnnrt's kernel tests from an independent
implementation: PyTorch 1.13 (Debian's python3-torch) and NumPy.

Each case is a folder tests/golden/ops/<op>/<case>/ with meta.json (the op,
its parameters, the input and output names, whether finite differences
apply) and one .npy per array: inputs, grad_out (the upstream gradient) and
the expected outputs and input gradients. Values are computed in float64
from the float32 inputs and stored as float32.

Semantics follow PyG / torch_scatter. Where torch itself differs, the rule
is written out here in torch ops, not taken from gnnrt:
  - scatter/spmm max and min: torch.scatter_reduce splits the gradient among
    tied maxima; torch_scatter sends it to one arg-winner, the lowest edge id.
    gnn_reference's WinnerReduce computes that winner with torch ops (the
    reductions, sum and mean too, are gnn_reference's, as the layers use).
  - segment softmax: PyG's formula (max-subtracted, +1e-16 in the
    denominator), with the max of an all -inf segment taken as 0 so that it
    gives 0, not NaN.
  - dropout: gnn_reference.dropout_uniforms (Threefry4x32-20 in NumPy,
    checked against Random123's known answers) draws the mask.

Usage: /usr/bin/python3 tests/reference/make_golden.py [--out tests/golden/ops]
CI does not run this; the files it writes are committed.
"""
import argparse
import json
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gnn_reference as ref  # noqa: E402
from golden_common import Writer, f32, leaf, matmul_cases  # noqa: E402
from golden_graph_ops import (gen_attention_softmax, gen_gather, gen_head_edges, gen_scatter, gen_sddmm,  # noqa: E402
                              gen_segment_softmax, gen_softmax_pieces, gen_sparse_dropout, gen_sparse_matmul,
                              gen_spmm)

torch.set_default_dtype(torch.float64)


# ---------------------------------------------------------------- dense cases (graph ops: golden_graph_ops.py)


def gen_cross_entropy(w, rng):
    """nll_loss(log_softmax(x)) over the masked rows (torch's cross_entropy
    of those rows): some, all and no rows, a width read at run time (20),
    selected rows filling several of the kernel's blocks (1024 elements
    each), and rows wider than a block."""
    for name, r, c, keep in [("some_rows", 9, 4, 0.5), ("all_rows", 6, 7, 1.0),
                             ("no_rows", 5, 3, 0.0), ("wide", 4, 20, 1.0),
                             ("many_rows", 700, 7, 0.5), ("very_wide", 3, 1100, 1.0)]:
        x = (3 * rng.standard_normal((r, c))).astype(np.float32)
        labels = rng.integers(0, c, r).astype(np.int64)
        mask = rng.random(r) < keep
        xt = leaf(x)
        sel = torch.from_numpy(mask)
        if sel.any():
            loss = torch.nn.functional.cross_entropy(xt[sel], torch.from_numpy(labels)[sel])
        else:
            loss = (xt * 0).sum()  # gnnrt's empty-mask rule, not torch's NaN
        loss.backward()
        w.case("cross_entropy", name, {"rows": r, "classes": c},
               {"x": x, "labels": labels, "mask": mask}, {"loss": loss.reshape(1)}, {},
               {"x": xt.grad})


def gen_dense(w, rng):
    matmul_cases(w, rng, [("square", 8, 8, 8, False, False), ("tall", 33, 5, 3, False, False),
                          ("trans_a", 7, 12, 5, True, False), ("trans_b", 6, 4, 9, False, True),
                          ("both", 5, 3, 130, True, True), ("empty_k", 4, 0, 3, False, False)])

    shapes = [("small", 5, 3), ("wide", 4, 130), ("one", 1, 1), ("empty", 0, 4), ("tall", 300, 7)]
    for name, r, c in shapes:
        x = rng.standard_normal((r, c)).astype(np.float32)
        bias = rng.standard_normal(c).astype(np.float32)
        gout = rng.standard_normal((r, c)).astype(np.float32)
        xt, bt = leaf(x), leaf(bias)
        out = xt + bt
        out.backward(f32(gout))
        w.case("bias_add", name, {"rows": r, "cols": c}, {"x": x, "bias": bias}, {"out": out},
               {"out": gout}, {"x": xt.grad, "bias": bt.grad})

        for act, fn, params in [("relu", torch.relu, {}),
                                ("leaky_relu", lambda t: torch.nn.functional.leaky_relu(t, 0.2),
                                 {"negative_slope": 0.2}),
                                ("elu", lambda t: torch.nn.functional.elu(t, 1.0), {"alpha": 1.0}),
                                ("sigmoid", torch.sigmoid, {}),
                                ("silu", torch.nn.functional.silu, {}),
                                ("gelu_tanh", lambda t: torch.nn.functional.gelu(t, approximate="tanh"), {}),
                                ("exp", torch.exp, {})]:
            # The saturating activations see 4x wider inputs, into their
            # saturation; exp does not saturate (and e^12 terms would drown
            # the finite differences' objective in rounding).
            xa = x if act in ("relu", "leaky_relu", "elu", "exp") else 4 * x
            xt = leaf(xa)
            out = fn(xt)
            out.backward(f32(gout))
            w.case(act, name, dict(params, rows=r, cols=c), {"x": xa}, {"out": out}, {"out": gout},
                   {"x": xt.grad})

        # tanh, abs and a clip to [-0.8, 0.8]: inputs kept 0.05 from the kinks
        # (0 for abs, the bounds for clip) so finite differences stay on one side.
        away = np.where(np.abs(x) < 0.05, x + 0.1, x).astype(np.float32)
        near_bound = np.abs(np.abs(x) - 0.8) < 0.05
        clipped = np.where(near_bound, x + 0.1 * np.sign(x), x).astype(np.float32)
        for act, fn, params, xa in [("tanh", torch.tanh, {}, 2 * x), ("abs", torch.abs, {}, away),
                                    ("clip", lambda t: torch.clamp(t, -0.8, 0.8), {"bound": 0.8}, clipped)]:
            xt = leaf(xa)
            out = fn(xt)
            out.backward(f32(gout))
            w.case(act, name, dict(params, rows=r, cols=c), {"x": xa}, {"out": out}, {"out": gout},
                   {"x": xt.grad})

        if c > 0:
            xt = leaf(3 * x)
            out = torch.log_softmax(xt, dim=1)
            out.backward(f32(gout))
            w.case("log_softmax", name, {"rows": r, "cols": c}, {"x": 3 * x}, {"out": out},
                   {"out": gout}, {"x": xt.grad})

            labels = rng.integers(0, c, r).astype(np.int64 if r % 2 else np.int32)
            mask = rng.random(r) < 0.6
            if r > 0:
                mask[0] = True
                labels[~mask] = -1  # unlabelled rows may hold anything outside the mask
            logp = torch.log_softmax(f32(x), dim=1).numpy().astype(np.float32)
            lt = leaf(logp)
            sel = torch.from_numpy(mask)
            if sel.any():
                loss = torch.nn.functional.nll_loss(lt[sel], torch.from_numpy(labels.astype(np.int64))[sel])
                loss.backward()
                w.case("nll_loss", name, {"rows": r, "classes": c},
                       {"log_prob": logp, "labels": labels, "mask": mask},
                       {"loss": loss.reshape(1)}, {}, {"log_prob": lt.grad})


def gen_columns(w, rng):
    """concat (torch.cat along columns) of three inputs, one of them of
    width 0 in one case, and slice_cols (x[:, begin:begin + width]) at the
    left edge, the middle, the right edge and of width 0."""
    for name, rows, widths in [("small", 5, (2, 3, 1)), ("wide", 3, (70, 1, 65)), ("zero_width", 4, (2, 0, 3)),
                               ("no_rows", 0, (2, 3, 1))]:
        xs = [rng.standard_normal((rows, c)).astype(np.float32) for c in widths]
        gout = rng.standard_normal((rows, sum(widths))).astype(np.float32)
        ts = [leaf(x) for x in xs]
        out = torch.cat(ts, dim=1)
        out.backward(f32(gout))
        w.case("concat", name, {"rows": rows, "widths": list(widths)}, {"a": xs[0], "b": xs[1], "c": xs[2]},
               {"out": out}, {"out": gout}, {"a": ts[0].grad, "b": ts[1].grad, "c": ts[2].grad},
               fd=rows > 0 and 0 not in widths)
    x = rng.standard_normal((6, 9)).astype(np.float32)
    for name, begin, width in [("left", 0, 4), ("middle", 3, 2), ("right", 5, 4), ("all", 0, 9), ("empty", 4, 0)]:
        gout = rng.standard_normal((6, width)).astype(np.float32)
        xt = leaf(x)
        out = xt[:, begin:begin + width]
        out.backward(f32(gout))
        w.case("slice_cols", name, {"begin": begin, "width": width}, {"x": x}, {"out": out}, {"out": gout},
               {"x": xt.grad}, fd=width > 0)


def gen_bce(w):
    """bce_with_logits: torch's binary_cross_entropy_with_logits over the
    masked rows' elements; 0/1 and fractional targets, logits up to +-40
    (where the naive log(sigmoid) overflows). Its own generator, so the
    other cases' draws stay as they were."""
    rng = np.random.default_rng(51)
    for name, r, c, keep in [("small", 7, 1, 0.6), ("all_rows", 5, 3, 1.0), ("no_rows", 4, 1, 0.0),
                             ("large_logits", 6, 2, 1.0)]:
        scale = 20.0 if name == "large_logits" else 2.0
        pred = (rng.standard_normal((r, c)) * scale).astype(np.float32)
        if name == "large_logits":
            pred[0, 0], pred[1, 1] = 40.0, -40.0
        target = (rng.random((r, c)) < 0.5).astype(np.float32)
        target[0, 0] = 0.25  # a soft label
        mask = rng.random(r) < keep
        pt = leaf(pred)
        sel = torch.from_numpy(mask)
        if sel.any():
            loss = torch.nn.functional.binary_cross_entropy_with_logits(pt[sel], f32(target)[sel].double())
        else:
            loss = (pt * 0).sum()
        loss.backward()
        w.case("bce_with_logits", name, {"rows": r, "cols": c},
               {"pred": pred, "target": target, "mask": mask}, {"loss": loss.reshape(1)}, {},
               {"pred": pt.grad})


def gen_losses(w, rng):
    """nll_loss over every row and over none (gnnrt's rule: an empty mask is
    loss 0 with zero gradient, where torch's mean is NaN), mse_loss, and
    count_correct with ties and NaN rows (torch.argmax: a NaN wins, then
    the first of equal maxima)."""
    r, c = 9, 4
    x = rng.standard_normal((r, c)).astype(np.float32)
    logp = torch.log_softmax(f32(x), dim=1).numpy().astype(np.float32)
    labels = rng.integers(0, c, r).astype(np.int64)
    for name, mask in [("all_rows", np.ones(r, bool)), ("no_rows", np.zeros(r, bool))]:
        lt = leaf(logp)
        sel = torch.from_numpy(mask)
        if sel.any():
            loss = torch.nn.functional.nll_loss(lt[sel], torch.from_numpy(labels)[sel])
        else:
            loss = (lt * 0).sum()  # gnnrt's empty-mask rule, not torch's NaN
        loss.backward()
        w.case("nll_loss", name, {"rows": r, "classes": c},
               {"log_prob": logp, "labels": labels, "mask": mask}, {"loss": loss.reshape(1)}, {},
               {"log_prob": lt.grad})

    for name, r, c, keep in [("small", 7, 3, 0.6), ("all_rows", 5, 6, 1.0), ("no_rows", 4, 2, 0.0),
                             ("wide", 3, 130, 0.7)]:
        pred, target = rng.standard_normal((r, c)).astype(np.float32), rng.standard_normal((r, c)).astype(np.float32)
        mask = rng.random(r) < keep
        pt, tt = leaf(pred), leaf(target)
        sel = torch.from_numpy(mask)
        if sel.any():
            loss = torch.nn.functional.mse_loss(pt[sel], tt[sel])
        else:
            loss = (pt * 0).sum() + (tt * 0).sum()
        loss.backward()
        w.case("mse_loss", name, {"rows": r, "cols": c},
               {"pred": pred, "target": target, "mask": mask}, {"loss": loss.reshape(1)}, {},
               {"pred": pt.grad, "target": tt.grad})
        # torch's L1Loss on the same rows (mean of |pred - target|).
        pt, tt = leaf(pred), leaf(target)
        if sel.any():
            loss = torch.nn.functional.l1_loss(pt[sel], tt[sel])
        else:
            loss = (pt * 0).sum() + (tt * 0).sum()
        loss.backward()
        w.case("l1_loss", name, {"rows": r, "cols": c},
               {"pred": pred, "target": target, "mask": mask}, {"loss": loss.reshape(1)}, {},
               {"pred": pt.grad, "target": tt.grad})
        # The linear form: the mean of pred - target over the rows' elements.
        pt, tt = leaf(pred), leaf(target)
        if sel.any():
            loss = (pt[sel] - tt[sel]).mean()
        else:
            loss = (pt * 0).sum() + (tt * 0).sum()
        loss.backward()
        w.case("mean_loss", name, {"rows": r, "cols": c},
               {"pred": pred, "target": target, "mask": mask}, {"loss": loss.reshape(1)}, {},
               {"pred": pt.grad, "target": tt.grad})

    gen_bce(w)

    lp = rng.standard_normal((12, 5)).astype(np.float32)
    lp[3, :] = 1.0            # all tied: the first class
    lp[4, [1, 3]] = 5.0       # two tied maxima: class 1
    lp[5, 2] = np.nan         # a NaN: its class
    lp[6, [0, 4]] = np.nan    # two NaNs: the first
    labels = rng.integers(0, 5, 12).astype(np.int64)
    labels[3], labels[4], labels[5], labels[6] = 0, 1, 2, 0
    mask = np.ones(12, bool)
    mask[[1, 8]] = False
    lt = torch.from_numpy(lp.astype(np.float64))
    sel = torch.from_numpy(mask)
    pred = torch.argmax(lt[sel], dim=1)
    correct = int((pred == torch.from_numpy(labels)[sel]).sum())
    w.case("count_correct", "ties_and_nan", {"rows": 12, "classes": 5},
           {"log_prob": lp, "labels": labels, "mask": mask},
           {"metrics": np.array([correct, int(mask.sum())], np.float64)}, {}, {}, fd=False)
    metrics = rng.standard_normal(8)
    scalar = rng.standard_normal(1).astype(np.float32)
    after = metrics.copy()
    after[5] += float(scalar[0])
    w.case("accumulate", "slot5", {"slots": 8, "slot": 5}, {"scalar": scalar, "metrics_before": metrics},
           {"metrics": after}, {}, {}, fd=False)


def gen_elementwise(w, rng):
    """add, mul, scale, fill, per-head ops of GAT, edge_scale, divide_rows,
    keep_winners."""
    for name, shape in [("small", (5, 3)), ("empty", (0, 4)), ("vector", (17,))]:
        a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
        gout = rng.standard_normal(shape).astype(np.float32)
        for op, fn in [("add", lambda x, y: x + y), ("mul", lambda x, y: x * y)]:
            at, bt = leaf(a), leaf(b)
            out = fn(at, bt)
            out.backward(f32(gout))
            w.case(op, name, {}, {"a": a, "b": b}, {"out": out}, {"out": gout},
                   {"a": at.grad, "b": bt.grad})
        xt = leaf(a)
        out = xt * -1.75
        out.backward(f32(gout))
        w.case("scale", name, {"alpha": -1.75}, {"x": a}, {"out": out}, {"out": gout}, {"x": xt.grad})
    w.case("fill", "ones", {"shape": [3, 2], "value": 0.5}, {}, {"out": np.full((3, 2), 0.5)}, {}, {},
           fd=False)

    def head_dot_case(name, n, h, c):
        """A head_dot case of n rows, h heads of c channels; returns its x."""
        x = rng.standard_normal((n, h * c)).astype(np.float32)
        att = rng.standard_normal((1, h, c)).astype(np.float32)
        xt, at = leaf(x), leaf(att)
        out = (xt.view(n, h, c) * at.view(1, h, c)).sum(-1)
        gout = rng.standard_normal((n, h)).astype(np.float32)
        out.backward(f32(gout))
        w.case("head_dot", name, {"heads": h}, {"x": x, "att": att}, {"out": out}, {"out": gout},
               {"x": xt.grad, "att": at.grad})
        return x

    for name, n, h, c in [("one_head", 6, 1, 4), ("heads", 7, 3, 5), ("empty", 0, 2, 3)]:
        x = head_dot_case(name, n, h, c)
        xt = leaf(x)
        out = xt.view(n, h, c).mean(1)
        gout = rng.standard_normal((n, c)).astype(np.float32)
        out.backward(f32(gout))
        w.case("head_mean", name, {"heads": h}, {"x": x}, {"out": out}, {"out": gout}, {"x": xt.grad})

    for name, e, h, c in [("scalar_weight", 9, 1, 4), ("heads", 8, 3, 2), ("empty", 0, 2, 5)]:
        m = rng.standard_normal((e, h * c)).astype(np.float32)
        wv = rng.standard_normal((e,) if h == 1 and name == "scalar_weight" else (e, h)).astype(np.float32)
        mt, wt = leaf(m), leaf(wv)
        out = (mt.view(e, h, c) * wt.view(e, h, 1)).reshape(e, h * c)
        gout = rng.standard_normal((e, h * c)).astype(np.float32)
        out.backward(f32(gout))
        # The weight's gradient is gnnrt's edge_dot op.
        w.case("edge_scale", name, {}, {"messages": m, "weight": wv}, {"out": out}, {"out": gout},
               {"messages": mt.grad, "weight": wt.grad})

    for name, n, f in [("small", 6, 3), ("empty", 0, 2)]:
        x = rng.standard_normal((n, f)).astype(np.float32)
        deg = rng.integers(0, 4, n).astype(np.int64)
        xt = leaf(x)
        dt = torch.from_numpy(deg.astype(np.float64))
        out = torch.where(dt[:, None] > 0, xt / dt.clamp(min=1)[:, None], torch.zeros(()))
        gout = rng.standard_normal((n, f)).astype(np.float32)
        out.backward(f32(gout))
        w.case("divide_rows", name, {}, {"x": x, "degree": deg}, {"out": out}, {"out": gout},
               {"x": xt.grad})

    e, n, f = 7, 3, 4
    src, dst = rng.integers(0, n, e).astype(np.int32), rng.integers(0, n, e).astype(np.int32)
    g = rng.standard_normal((n, f)).astype(np.float32)
    arg = rng.integers(0, e + 1, (n, f)).astype(np.int32)  # e: no winner here
    gt = leaf(g)
    out = torch.where(torch.from_numpy(arg < e), gt, torch.zeros(()))
    gout = rng.standard_normal((n, f)).astype(np.float32)
    out.backward(f32(gout))
    w.case("keep_winners", "random", {"num_src": n, "num_dst": n},
           {"g": g, "arg": arg, "src": src, "dst": dst}, {"out": out}, {"out": gout}, {"g": gt.grad})

    # 12 heads of 8 channels: gnnrt's head_dot takes heads 0-7 as vectors
    # (an 8 x 8 transpose) and the last 4 one by one. Last in this function,
    # so the cases above keep their draws.
    head_dot_case("eight_channels", 5, 12, 8)


def gen_norms(w, rng):
    """layer_norm in PyG's two modes (torch ops written out), its graph-mode
    moments, and GCN's normalisation (from the graph, and from given
    degrees as on a rank of a partitioned graph)."""
    for name, n, c, eps in [("small", 6, 4, 1e-5), ("wide", 3, 130, 1e-5), ("one_row", 1, 5, 0.1),
                            ("tall", 200, 3, 1e-5)]:
        x = (2 * rng.standard_normal((n, c)) + 0.5).astype(np.float32)
        weight = rng.standard_normal(c).astype(np.float32)
        bias = rng.standard_normal(c).astype(np.float32)
        gout = rng.standard_normal((n, c)).astype(np.float32)
        for per_node in (False, True):
            xt, wt, bt = leaf(x), leaf(weight), leaf(bias)
            if per_node:
                out = torch.nn.functional.layer_norm(xt, (c,), wt, bt, eps)
            else:  # torch_geometric.nn.LayerNorm(mode="graph"), one graph
                xc = xt - xt.mean()
                out = xc / (xc.pow(2).mean().sqrt() + eps) * wt + bt
            out.backward(f32(gout))
            w.case("layer_norm", f"{'node' if per_node else 'graph'}_{name}",
                   {"per_node": per_node, "eps": eps}, {"x": x, "weight": weight, "bias": bias},
                   {"out": out}, {"out": gout}, {"x": xt.grad, "weight": wt.grad, "bias": bt.grad})
        mask = rng.random(n) < 0.5
        xs = x.astype(np.float64)[mask]
        w.case("layer_norm_moments", name, {}, {"x": x, "mask": mask},
               {"moments": np.array([xs.size, xs.sum(), (xs * xs).sum()])}, {}, {}, fd=False)

    for name, n, e, given in [("random", 10, 30, False), ("isolated", 6, 5, False),
                              ("self_loops", 5, 12, False), ("given_degrees", 8, 14, True)]:
        src, dst = rng.integers(0, n, e).astype(np.int32), rng.integers(0, n, e).astype(np.int32)
        if name == "isolated":
            src, dst = src % 3, dst % 3  # nodes 3..5 have no edges
        if name == "self_loops":
            dst[:5] = src[:5]
        deg = torch.zeros(n).index_add_(0, torch.from_numpy(dst.astype(np.int64)), torch.ones(e))
        inputs = {"src": src, "dst": dst}
        if given:
            deg = deg + torch.from_numpy(rng.integers(0, 3, n).astype(np.float64))  # other ranks' edges
            inputs["degree"] = deg.numpy().astype(np.int64)
        dinv = deg.pow(-0.5)
        dinv = torch.where(torch.isinf(dinv), torch.zeros(()), dinv)
        weight = dinv[torch.from_numpy(src.astype(np.int64))] * dinv[torch.from_numpy(dst.astype(np.int64))]
        w.case("gcn_norm", name, {"num_nodes": n}, inputs, {"weight": weight}, {}, {}, fd=False)


def gen_optimizers(w, rng):
    """torch.optim's Adam, AdamW and SGD over three steps with a new gradient
    and learning rate each step (the schedule is a run input in gnnrt)."""
    shape, steps = (4, 3), 3
    lrs = [0.01, 0.005, 0.02]
    cases = [
        ("adam", "adam_update", dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0), False),
        ("adam_l2_betas", "adam_update", dict(betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05), False),
        ("adamw", "adamw_update", dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01), True),
        ("sgd", "sgd_update", dict(momentum=0.0, weight_decay=0.0, nesterov=False), False),
        ("sgd_momentum", "sgd_update", dict(momentum=0.9, weight_decay=5e-4, nesterov=False), False),
        ("sgd_nesterov", "sgd_update", dict(momentum=0.9, weight_decay=0.0, nesterov=True), False),
    ]
    for name, kind, hyper, decoupled in cases:
        p0 = rng.standard_normal(shape).astype(np.float32)
        grads = rng.standard_normal((steps,) + shape).astype(np.float32)
        p = f32(p0).clone().requires_grad_(True)
        if kind == "sgd_update":
            opt = torch.optim.SGD([p], lr=lrs[0], **hyper)
        elif decoupled:
            opt = torch.optim.AdamW([p], lr=lrs[0], **hyper)
        else:
            opt = torch.optim.Adam([p], lr=lrs[0], **hyper)
        for k in range(steps):
            opt.param_groups[0]["lr"] = lrs[k]
            p.grad = f32(grads[k])
            opt.step()
        state = opt.state[p]
        params = {"lr": lrs, "weight_decay": hyper["weight_decay"]}
        outputs = {"param": p.detach()}
        if kind == "sgd_update":
            params.update(momentum=hyper["momentum"], nesterov=hyper["nesterov"])
            if hyper["momentum"]:
                outputs["param.momentum_buffer"] = state["momentum_buffer"]
            op = "sgd_update"
        else:
            params.update(beta1=hyper["betas"][0], beta2=hyper["betas"][1], eps=hyper["eps"],
                          decoupled=decoupled)
            outputs["param.exp_avg"] = state["exp_avg"]
            outputs["param.exp_avg_sq"] = state["exp_avg_sq"]
            op = "adam_update"
        w.case(op, name, params, {"param_init": p0, "grads": grads}, outputs, {}, {}, fd=False)


def gen_dropout(w, rng):
    for name, r, c, p, seed, step, op, rows in [
        ("half", 20, 13, 0.5, 1, 0, 3, None), ("sparse_rows", 6, 64, 0.2, 2**40 + 7, 9, 1, [5, 100, 7, 2**33, 0, 1]),
        ("keep_all", 4, 9, 0.0, 3, 1, 0, None), ("drop_all", 4, 9, 1.0, 3, 1, 0, None),
        ("wide", 3, 130, 0.7, 11, 123456, 2, None),
        # The kernel's layouts: one column, whole blocks of 64 elements over
        # many rows with a partial one at the end, and a step beyond 32 bits
        # (the counter's last word); rows of whole blocks at global rows, and
        # rows of an odd width at global rows (a draw per element).
        ("one_column", 150, 1, 0.5, 4, 2, 5, None), ("whole_blocks", 150, 8, 0.3, 5, 2**32 + 3, 2, None),
        ("global_blocks", 5, 128, 0.4, 6, 3, 7, [9, 2, 2**40, 4, 0]),
        ("global_odd", 7, 3, 0.5, 7, 4, 8, [6, 5, 4, 3, 2, 1, 2**35])]:
        # The later cases draw from their own generator, so the cases before
        # them (and every later op's) keep their data.
        src = rng if name not in ("one_column", "whole_blocks", "global_blocks", "global_odd") \
            else np.random.default_rng(r * c)
        x = src.standard_normal((r, c)).astype(np.float32)
        gout = src.standard_normal((r, c)).astype(np.float32)
        global_rows = np.arange(r, dtype=np.int64) if rows is None else np.array(rows, np.int64)
        mask = ref.dropout_uniforms(seed, step, op, global_rows, c) >= p
        scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
        out = x.astype(np.float64) * mask * scale
        inputs = {"x": x}
        if rows is not None:
            inputs["global_rows"] = global_rows
        w.case("dropout", name, {"p": p, "seed": seed, "step": step, "op": op, "cols": c}, inputs,
               {"out": out}, {"out": gout}, {"x": gout.astype(np.float64) * mask * scale}, fd=False)


def gen_padded_matmul(w, rng):
    # Products gnnrt computes at a padded width (ops/dense.cc: C's columns
    # when n % 8 is 5-7 and k >= 32, its rows when m % 8 is 7 and n >= 32),
    # each with its gradients, which are padded products of their own:
    # GAT's classifier x W^T (n = 7, rows in blocks; grad_b is [7, 64]), a
    # transposed a (one block), 13 columns, and 15 rows.
    matmul_cases(w, rng, [("pad_cols", 600, 64, 7, False, True), ("pad_cols_trans_a", 40, 36, 6, True, False),
                          ("pad_cols_13", 20, 33, 13, False, False), ("pad_rows", 15, 10, 40, False, False)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "golden" / "ops"))
    args = ap.parse_args()
    root = Path(args.out)
    if root.exists():
        shutil.rmtree(root)
    w = Writer(root)
    for gen in [gen_scatter, gen_gather, gen_spmm, gen_sddmm, gen_segment_softmax, gen_dense, gen_dropout,
                gen_losses, gen_elementwise, gen_norms, gen_softmax_pieces, gen_optimizers,
                gen_sparse_matmul, gen_sparse_dropout, gen_padded_matmul, gen_attention_softmax,
                gen_cross_entropy, gen_columns, gen_head_edges]:
        gen(w, np.random.default_rng(zlib.crc32(gen.__name__.encode())))
    print(f"wrote {w.count} cases under {root} (torch {torch.__version__}, numpy {np.__version__})")


if __name__ == "__main__":
    main()
