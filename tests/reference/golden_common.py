#!/usr/bin/python3
"""What make_golden.py's case writers share: the case Writer (a folder of
.npy arrays and meta.json per case), float32 inputs as float64 tensors, the
reference reductions and softmax (gnn_reference's, PyG's semantics), and
the random indices and values the cases draw."""
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gnn_reference as ref  # noqa: E402

torch.set_default_dtype(torch.float64)


REDUCES = ["sum", "mean", "max", "min"]


class Writer:
    def __init__(self, root: Path):
        self.root = root
        self.count = 0

    def case(self, op, name, params, inputs, outputs, grad_out, grads, fd=True):
        """inputs/outputs/grads: dict name -> array; grads keyed by input name."""
        d = self.root / op / name
        d.mkdir(parents=True, exist_ok=True)
        arrays = {}
        for k, v in inputs.items():
            arrays[k] = v
        for k, v in outputs.items():
            arrays[k] = v
        for k, v in grad_out.items():
            arrays["grad_" + k] = v
        for k, v in grads.items():
            arrays["grad_" + k] = v
        for k, v in arrays.items():
            if isinstance(v, torch.Tensor):
                v = v.detach().numpy()
            v = np.ascontiguousarray(v)
            if v.dtype == np.float64:
                v = v.astype(np.float32)
            np.save(d / (k + ".npy"), v)
        meta = {
            "op": op,
            "params": params,
            "inputs": list(inputs),
            "outputs": list(outputs),
            "grad_outputs": ["grad_" + k for k in grad_out],
            "grads": ["grad_" + k for k in grads],
            "finite_differences": fd,
        }
        (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        self.count += 1


def f32(a):
    """float32 input, returned as a float64 torch tensor of the same values."""
    return torch.from_numpy(np.asarray(a, dtype=np.float32).astype(np.float64))


def leaf(a):
    return f32(a).requires_grad_(True)


def scatter_ref(msg, index, n, reduce):
    """Returns (out, arg or None) with PyG semantics, differentiable in msg:
    gnn_reference's reductions (max and min through its WinnerReduce)."""
    if reduce in ("sum", "mean"):
        return ref.SCATTER[reduce](msg, index, n), None
    return ref.WinnerReduce.apply(msg, index, n, reduce)


def segment_softmax_ref(score, index, n):
    """gnn_reference.segment_softmax (PyG's formula) but for a segment whose
    scores are all -inf: its max is taken as 0, so it gives 0, where PyG's
    (and gnn_reference's) -inf - -inf gives NaN."""
    m = ref.scatter_max(score.detach(), index, n)
    m = torch.where(torch.isinf(m), torch.zeros(()), m)
    ex = (score - m[index]).exp()
    return ex / (ref.scatter_sum(ex, index, n)[index] + 1e-16)


def make_index(rng, e, n, kind):
    if kind == "sparse":  # only every third row receives edges
        return rng.integers(0, max(1, (n + 2) // 3), e) * 3 % max(n, 1)
    return rng.integers(0, n, e)


def make_values(rng, shape, kind):
    if kind == "ties":
        return rng.integers(-1, 2, shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def graph_inputs(rng, e, ns, nd, kind, idt):
    src = make_index(rng, e, ns, "random").astype(idt)
    dst = make_index(rng, e, nd, kind).astype(idt)
    return src, dst


def matmul_cases(w, rng, cases):
    for name, m, k, n, ta, tb in cases:
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        at, bt = leaf(a), leaf(b)
        c = (at.t() if ta else at) @ (bt.t() if tb else bt)
        gout = rng.standard_normal((m, n)).astype(np.float32)
        c.backward(f32(gout))
        w.case("matmul", name, {"m": m, "k": k, "n": n, "trans_a": ta, "trans_b": tb},
               {"a": a, "b": b}, {"c": c}, {"c": gout}, {"a": at.grad, "b": bt.grad})


def sparse_entries(rng, n, k, density, shuffle, empty_rows=0, empty_cols=0, duplicates=0):
    """Entries (row, col) of an n x k sparse matrix; the last empty_rows rows and
    empty_cols columns hold none; `duplicates` entries repeat an earlier (row, col)."""
    rows, cols = [], []
    for r in range(n - empty_rows):
        for c in range(k - empty_cols):
            if rng.uniform() < density:
                rows.append(r)
                cols.append(c)
    for _ in range(min(duplicates, len(rows))):
        i = int(rng.integers(len(rows)))
        rows.append(rows[i])
        cols.append(cols[i])
    rows, cols = np.array(rows, np.int32), np.array(cols, np.int32)
    if shuffle:
        order = rng.permutation(len(rows))
        rows, cols = rows[order], cols[order]
    return rows, cols
