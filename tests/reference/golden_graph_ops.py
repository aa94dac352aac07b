#!/usr/bin/python3
"""make_golden.py's cases of the graph ops: scatter, gather, spmm, sddmm,
per-head edge ops, segment and attention softmax and their pieces, sparse
matrix products and sparse dropout."""
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gnn_reference as ref  # noqa: E402
from golden_common import (REDUCES, f32, graph_inputs, leaf, make_index, make_values, scatter_ref,  # noqa: E402
                           segment_softmax_ref, sparse_entries)


# (name, E, N, F, index dtype, kind); kind shapes the values and indices.
SCATTER_CASES = [
    ("random", 200, 30, 3, np.int64, "random"),
    ("duplicates", 60, 5, 64, np.int32, "random"),
    ("empty_segments", 40, 20, 3, np.int64, "sparse"),
    ("ties", 80, 6, 3, np.int32, "ties"),
    ("one_edge", 1, 4, 1, np.int64, "random"),
    ("zero_edges", 0, 3, 3, np.int32, "random"),
    ("wide", 40, 10, 130, np.int64, "random"),
    ("single_node", 10, 1, 64, np.int32, "random"),
]


def gen_scatter(w, rng):
    for reduce in REDUCES:
        for name, e, n, f, idt, kind in SCATTER_CASES:
            index = make_index(rng, e, n, kind).astype(idt)
            src = make_values(rng, (e, f), kind)
            gout = rng.standard_normal((n, f)).astype(np.float32)
            s = leaf(src)
            out, arg = scatter_ref(s, torch.from_numpy(index.astype(np.int64)), n, reduce)
            out.backward(f32(gout))
            outputs = {"out": out}
            if arg is not None:
                outputs["arg"] = arg.numpy().astype(np.int64)
            w.case("scatter", f"{reduce}_{name}", {"reduce": reduce, "num_rows": n, "features": f},
                   {"src": src, "index": index}, outputs, {"out": gout}, {"src": s.grad},
                   fd=not (kind == "ties" and reduce in ("max", "min")))


def gen_gather(w, rng):
    for name, e, n, f, idt, kind in SCATTER_CASES:
        index = make_index(rng, e, n, kind).astype(idt)
        x = make_values(rng, (n, f), kind)
        gout = rng.standard_normal((e, f)).astype(np.float32)
        xt = leaf(x)
        out = xt.index_select(0, torch.from_numpy(index.astype(np.int64)))
        out.backward(f32(gout))
        w.case("gather", name, {"num_rows": n, "features": f}, {"x": x, "index": index},
               {"out": out}, {"out": gout}, {"x": xt.grad})


# (name, E, N_src, N_dst, F, index dtype, kind, weight: none | edge | head2)
GRAPH_CASES = [
    ("random", 200, 25, 30, 4, np.int64, "random", "edge"),
    ("duplicates", 60, 4, 5, 64, np.int32, "random", "none"),
    ("empty_segments", 40, 12, 20, 3, np.int64, "sparse", "edge"),
    ("ties", 80, 5, 6, 4, np.int32, "ties", "none"),
    ("one_edge", 1, 2, 4, 1, np.int64, "random", "edge"),
    ("zero_edges", 0, 3, 3, 6, np.int32, "random", "head2"),
    ("wide", 40, 8, 10, 130, np.int64, "random", "head2"),
    ("single_node", 10, 1, 1, 64, np.int32, "random", "head2"),
]


def gen_spmm(w, rng):
    for reduce in REDUCES:
        for name, e, ns, nd, f, idt, kind, wmode in GRAPH_CASES:
            src, dst = graph_inputs(rng, e, ns, nd, kind, idt)
            x = make_values(rng, (ns, f), kind)
            inputs = {"x": x, "src": src, "dst": dst}
            heads = {"none": 0, "edge": 1, "head2": 2}[wmode]
            xt = leaf(x)
            si = torch.from_numpy(src.astype(np.int64))
            di = torch.from_numpy(dst.astype(np.int64))
            msg = xt[si]
            grads = {}
            if heads:
                wv = (rng.uniform(0.5, 1.5, (e,) if heads == 1 else (e, heads))).astype(np.float32)
                inputs["weight"] = wv
                wt = leaf(wv)
                if heads == 1:
                    msg = msg * wt[:, None]
                else:
                    msg = (msg.view(e, heads, f // heads) * wt[:, :, None]).reshape(e, f)
            if reduce == "sum" and heads <= 1:
                # torch.sparse.mm gives the output and d/dx; its gradient for the
                # sparse values is per coalesced (dst, src) pair, so d/dw comes
                # from the same adjacency built densely (duplicates accumulate),
                # and the two paths must agree on the output.
                vals = wt if heads else torch.ones(e)
                sp = torch.sparse_coo_tensor(torch.stack([di, si]), vals.detach(), (nd, ns))
                out_sparse = torch.sparse.mm(sp, xt)
                a = torch.zeros(nd, ns).index_put((di, si), vals, accumulate=True)
                out, arg = a @ xt.detach(), None
                assert torch.allclose(out, out_sparse, atol=1e-12)
                out = out_sparse + (out - out.detach())  # value from sparse.mm, d/dw from A
            else:
                out, arg = scatter_ref(msg, di, nd, reduce)
            gout = rng.standard_normal((nd, f)).astype(np.float32)
            out.backward(f32(gout))
            grads["x"] = xt.grad
            if heads:
                grads["weight"] = wt.grad
            outputs = {"out": out}
            if arg is not None:
                outputs["arg"] = arg.numpy().astype(np.int64)
            w.case("spmm", f"{reduce}_{name}",
                   {"reduce": reduce, "num_src": ns, "num_dst": nd, "features": f},
                   inputs, outputs, {"out": gout}, grads,
                   fd=not (kind == "ties" and reduce in ("max", "min")))


def gen_sddmm(w, rng):
    for name, e, ns, nd, f, idt, kind, wmode in GRAPH_CASES:
        heads = 2 if f % 2 == 0 else 1
        src, dst = graph_inputs(rng, e, ns, nd, kind, idt)
        a, b = make_values(rng, (ns, f), kind), make_values(rng, (nd, f), kind)
        at, bt = leaf(a), leaf(b)
        si, di = torch.from_numpy(src.astype(np.int64)), torch.from_numpy(dst.astype(np.int64))
        out = (at[si] * bt[di]).view(e, heads, f // heads).sum(-1)
        gout = rng.standard_normal((e, heads)).astype(np.float32)
        out.backward(f32(gout))
        w.case("sddmm_dot", name, {"num_src": ns, "num_dst": nd, "features": f, "heads": heads},
               {"a": a, "b": b, "src": src, "dst": dst}, {"out": out}, {"out": gout},
               {"a": at.grad, "b": bt.grad})

        heads = [1, 2, 3, 8][len(name) % 4]
        a, b = make_values(rng, (ns, heads), kind), make_values(rng, (nd, heads), kind)
        at, bt = leaf(a), leaf(b)
        out = at[si] + bt[di]
        gout = rng.standard_normal((e, heads)).astype(np.float32)
        out.backward(f32(gout))
        w.case("sddmm_add", name, {"num_src": ns, "num_dst": nd, "heads": heads},
               {"a": a, "b": b, "src": src, "dst": dst}, {"out": out}, {"out": gout},
               {"a": at.grad, "b": bt.grad})


def gen_head_edges(w, rng):
    """Edge rows shared by heads against node rows split into heads (the
    attention's edge-feature terms), each written with plain indexing."""
    for name, e, ns, nd, f, idt, kind, _wmode in GRAPH_CASES:
        heads = [1, 2, 3, 8][len(name) % 4]
        k = max(1, f // 2)
        src, dst = graph_inputs(rng, e, ns, nd, kind, idt)
        di = torch.from_numpy(dst.astype(np.int64))
        graph = {"src": src, "dst": dst}
        params = {"num_src": ns, "num_dst": nd, "heads": heads, "k": k}
        a = make_values(rng, (nd, heads * k), kind)
        r = make_values(rng, (e, k), kind)
        wv = make_values(rng, (e, heads), kind)

        at, rt = leaf(a), leaf(r)
        out = (at[di].view(e, heads, k) * rt[:, None, :]).sum(-1)
        gout = rng.standard_normal((e, heads)).astype(np.float32)
        out.backward(f32(gout))
        w.case("edge_head_dot", name, params, {"a": a, "r": r, **graph}, {"out": out}, {"out": gout},
               {"a": at.grad, "r": rt.grad})

        wt, rt = leaf(wv), leaf(r)
        msg = (wt[:, :, None] * rt[:, None, :]).reshape(e, heads * k)
        out = torch.zeros(nd, heads * k, dtype=torch.float64).index_add(0, di, msg)
        gout = rng.standard_normal((nd, heads * k)).astype(np.float32)
        out.backward(f32(gout))
        w.case("head_scatter", name, params, {"w": wv, "r": r, **graph}, {"out": out}, {"out": gout},
               {"w": wt.grad, "r": rt.grad})

        wt, at = leaf(wv), leaf(a)
        out = (wt[:, :, None] * at[di].view(e, heads, k)).sum(1)
        gout = rng.standard_normal((e, k)).astype(np.float32)
        out.backward(f32(gout))
        w.case("head_gather", name, params, {"w": wv, "a": a, **graph}, {"out": out}, {"out": gout},
               {"w": wt.grad, "a": at.grad})

    # Per-head products: x [m, H*P] times w's row blocks.
    for name, m, heads, p, q, trans in [("small", 5, 2, 3, 4, False), ("small_t", 5, 2, 3, 4, True),
                                        ("one_head", 7, 1, 6, 5, False), ("eight_heads_t", 9, 8, 4, 6, True),
                                        ("no_rows", 0, 3, 2, 2, False)]:
        x = rng.standard_normal((m, heads * p)).astype(np.float32)
        wv = rng.standard_normal((heads * q, p) if trans else (heads * p, q)).astype(np.float32)
        xt, wt = leaf(x), leaf(wv)
        blocks = []
        for h in range(heads):
            xh = xt[:, h * p:(h + 1) * p]
            blocks.append(xh @ (wt[h * q:(h + 1) * q].T if trans else wt[h * p:(h + 1) * p]))
        out = torch.cat(blocks, 1)
        gout = rng.standard_normal((m, heads * q)).astype(np.float32)
        out.backward(f32(gout))
        w.case("head_matmul", name, {"heads": heads, "trans_w": trans}, {"x": x, "w": wv}, {"out": out},
               {"out": gout}, {"x": xt.grad, "w": wt.grad})

    # Heads as rows: [N, H*D] -> [N*H, D] (q/k norms normalise each head).
    for name, shape, to in [("heads_to_rows", (3, 8), (12, 2)), ("empty", (0, 6), (0, 3))]:
        x = rng.standard_normal(shape).astype(np.float32)
        xt = leaf(x)
        out = xt.reshape(to)
        gout = rng.standard_normal(to).astype(np.float32)
        out.backward(f32(gout))
        w.case("reshape", name, {"shape": list(to)}, {"x": x}, {"out": out}, {"out": gout}, {"x": xt.grad})


def gen_segment_softmax(w, rng):
    cases = [(name, e, n, [1, 2, 8][i % 3], idt, kind)
             for i, (name, e, n, _f, idt, kind) in enumerate(SCATTER_CASES)]
    cases.append(("neg_inf", 30, 6, 2, np.int64, "neg_inf"))
    for name, e, n, h, idt, kind in cases:
        index = make_index(rng, e, n, "sparse" if kind == "sparse" else "random").astype(idt)
        score = (3 * rng.standard_normal((e, h))).astype(np.float32)
        if kind == "ties":
            score = rng.integers(-1, 2, (e, h)).astype(np.float32)
        fd = True
        if kind == "neg_inf":
            # Row 0 all -inf, row 1 one -inf: alpha 0 there, finite elsewhere.
            index[:6] = 0
            index[6:12] = 1
            index[12:] = rng.integers(2, n, e - 12)
            score[index == 0] = -np.inf
            score[6, :] = -np.inf
            fd = False
        st = leaf(score)
        alpha = segment_softmax_ref(st, torch.from_numpy(index.astype(np.int64)), n)
        gout = rng.standard_normal((e, h)).astype(np.float32)
        alpha.backward(f32(gout))
        w.case("segment_softmax", name, {"num_rows": n, "heads": h},
               {"score": score, "index": index}, {"alpha": alpha}, {"alpha": gout},
               {"score": st.grad}, fd=fd)


def gen_attention_softmax(w, rng):
    """GAT's attention coefficients: softmax by destination of
    leaky_relu(a[src] + b[dst]), with 1, 3, 8 and 20 heads (20: the kernel's
    run-time width)."""
    for i, (name, e, ns, nd, _f, idt, kind, _wmode) in enumerate(GRAPH_CASES):
        heads = [1, 3, 8, 20][i % 4]
        slope = [0.2, 0.01][i % 2]
        src, dst = graph_inputs(rng, e, ns, nd, kind, idt)
        a, b = make_values(rng, (ns, heads), kind), make_values(rng, (nd, heads), kind)
        at, bt = leaf(a), leaf(b)
        si, di = torch.from_numpy(src.astype(np.int64)), torch.from_numpy(dst.astype(np.int64))
        logit = torch.nn.functional.leaky_relu(at[si] + bt[di], slope)
        alpha = segment_softmax_ref(logit, di, nd)
        gout = rng.standard_normal((e, heads)).astype(np.float32)
        alpha.backward(f32(gout))
        # Ties put logits on the leaky ReLU's kink, where L has no derivative.
        w.case("attention_softmax", name,
               {"num_src": ns, "num_dst": nd, "heads": heads, "negative_slope": slope},
               {"a": a, "b": b, "src": src, "dst": dst}, {"alpha": alpha}, {"alpha": gout},
               {"a": at.grad, "b": bt.grad}, fd=kind != "ties")


def gen_softmax_pieces(w, rng):
    """The partitioned softmax's pieces: segment_max (the shift, -inf for an
    empty segment), segment_exp_sum and segment_softmax_apply, each with the
    shift held constant as gnnrt's backward does."""
    for name, e, n, h, kind in [("random", 40, 9, 2, "random"), ("empty_segments", 20, 12, 1, "sparse"),
                                ("neg_inf", 16, 4, 3, "neg_inf")]:
        index = make_index(rng, e, n, "sparse" if kind == "sparse" else "random").astype(np.int32)
        score = (2 * rng.standard_normal((e, h))).astype(np.float32)
        fd = kind != "neg_inf"
        if kind == "neg_inf":
            index[:4] = 0
            score[:4] = -np.inf  # row 0 all -inf
            score[5, 0] = -np.inf
        idx = torch.from_numpy(index.astype(np.int64))
        m = torch.full((n, h), float("-inf")).scatter_reduce(
            0, idx[:, None].expand(e, h), f32(score), "amax", include_self=True)
        w.case("segment_max", name, {"num_rows": n}, {"score": score, "index": index}, {"m": m}, {},
               {}, fd=False)
        dead = torch.isinf(m) & (m < 0)
        safe_m = torch.where(dead, torch.zeros(()), m)
        st = leaf(score)
        ex = torch.where(dead[idx], torch.zeros(()), (st - safe_m[idx]).exp())
        s = torch.zeros(n, h).index_add(0, idx, ex)
        gout = rng.standard_normal((n, h)).astype(np.float32)
        s.backward(f32(gout))
        w.case("segment_exp_sum", name, {"num_rows": n},
               {"score": score, "m": m.numpy().astype(np.float32), "index": index}, {"s": s},
               {"s": gout}, {"score": st.grad}, fd=fd)
        st, sv = leaf(score), leaf(s.detach().numpy() + 0.25)
        alpha = torch.where(dead[idx], torch.zeros(()), (st - safe_m[idx]).exp() / sv[idx])
        gout = rng.standard_normal((e, h)).astype(np.float32)
        alpha.backward(f32(gout))
        w.case("segment_softmax_apply", name, {"num_rows": n},
               {"score": score, "m": m.numpy().astype(np.float32), "s": sv.detach().numpy().astype(np.float32),
                "index": index}, {"alpha": alpha}, {"alpha": gout}, {"score": st.grad, "s": sv.grad}, fd=fd)


def gen_sparse_matmul(w, rng):
    # out = X op(B), X [n, k] given by entries (dst = row, src = column, values).
    for name, n, k, m, density, trans_b, shuffle, empty_rows, empty_cols, dups in [
            ("linear", 7, 11, 5, 0.3, True, False, 0, 0, 0),
            ("plain_b", 7, 11, 5, 0.3, False, False, 0, 0, 0),
            ("shuffled_duplicates", 9, 13, 4, 0.25, True, True, 0, 0, 3),
            ("empty_rows_cols", 8, 10, 3, 0.4, True, False, 3, 4, 0),
            ("no_entries", 5, 6, 4, 0.0, True, False, 0, 0, 0),
            ("wide", 200, 400, 48, 0.05, True, True, 10, 20, 0),
            ("block_and_tail", 30, 50, 20, 0.2, True, True, 2, 3, 2)]:  # one register block + 4
        rows, cols = sparse_entries(rng, n, k, density, shuffle, empty_rows, empty_cols, dups)
        values = make_values(rng, (len(rows),), "normal")
        b = make_values(rng, (m, k) if trans_b else (k, m), "normal")
        x = torch.zeros(n, k, dtype=torch.float64).index_put(
            (torch.from_numpy(rows.astype(np.int64)), torch.from_numpy(cols.astype(np.int64))),
            torch.from_numpy(values.astype(np.float64)), accumulate=True)
        bt = leaf(b)
        out = x @ (bt.t() if trans_b else bt)
        gout = rng.standard_normal((n, m)).astype(np.float32)
        out.backward(f32(gout))
        w.case("sparse_matmul", name,
               {"num_rows": n, "num_cols": k, "trans_b": trans_b},
               {"values": values, "src": cols, "dst": rows, "b": b}, {"out": out}, {"out": gout},
               {"b": bt.grad})


def gen_sparse_dropout(w, rng):
    # The dense mask of (global row, column) on the stored values only.
    for name, n, k, density, p, seed, step, op, rows in [
            ("half", 12, 40, 0.2, 0.5, 1, 0, 3, None),
            ("global_rows", 6, 70, 0.3, 0.2, 2**40 + 7, 9, 1, [5, 100, 7, 2**33, 0, 1]),
            ("drop_all", 4, 9, 0.5, 1.0, 3, 1, 0, None)]:
        r, c = sparse_entries(rng, n, k, density, True)
        values = rng.standard_normal(len(r)).astype(np.float32)
        global_rows = np.arange(n, dtype=np.int64) if rows is None else np.array(rows, np.int64)
        keep = ref.dropout_uniforms(seed, step, op, global_rows[r], k)[np.arange(len(r)), c] >= p
        scale = 0.0 if p >= 1 else 1.0 / (1.0 - p)
        inputs = {"values": values, "src": c, "dst": r}
        if rows is not None:
            inputs["global_rows"] = global_rows
        w.case("sparse_dropout", name,
               {"p": p, "seed": seed, "step": step, "op": op, "num_rows": n, "num_cols": k}, inputs,
               {"out": values.astype(np.float64) * keep * scale}, {}, {}, fd=False)
