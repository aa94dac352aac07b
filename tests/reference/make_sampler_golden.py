"""Golden files of gnnrt's neighbour sampler (model/sampling), from an
independent reference written from the rule in docs/sampling.md: layer-wise
frontiers, uniform draws without replacement by Floyd's algorithm (or with
replacement), every draw keyed by (seed, epoch, batch, hop, node) through
Philox4x64-10 (tests/reference/philox.py), and the seeds' epoch order by a
keyed Fisher-Yates shuffle.

Usage: /usr/bin/python3 tests/reference/make_sampler_golden.py [--out DIR]
CI does not run this (numpy only); its files are committed. A re-run writes
identical bytes.
"""
import argparse
import json
from pathlib import Path

import numpy as np

from philox import below, philox4x64

SAMPLE_STREAM = 0x73616D706C65  # "sample"
SEED_ORDER_STREAM = 0x736565646F72  # "seedor"


def small_graph():
    """60 nodes: node 0 has 40 in-edges, nodes 50..59 none, the rest 1..9."""
    rng = np.random.default_rng(7)
    n = 60
    sources = {}
    for v in range(n):
        d = 40 if v == 0 else 0 if v >= 50 else int(rng.integers(1, 10))
        others = [u for u in range(n) if u != v]
        sources[v] = sorted(int(u) for u in rng.choice(others, size=d, replace=False))
    indptr = [0]
    indices = []
    for v in range(n):
        indices += sources[v]
        indptr.append(len(indices))
    return n, indptr, indices


def draws(in_list, v, hop, fanout, replace, key):
    seed, epoch, batch = key
    d = len(in_list)
    if d == 0:
        return []
    if fanout == -1 or (not replace and d <= fanout):
        return list(in_list)

    def word(m):
        return philox4x64((epoch, batch, (hop << 32) | (m // 4), v), (seed, SAMPLE_STREAM))[m % 4]

    if replace:
        return [in_list[below(word(m), d)] for m in range(fanout)]
    picked = []
    for m in range(fanout):
        j = d - fanout + m
        t = below(word(m), j + 1)
        if t in picked:
            t = j
        picked.append(t)
    return [in_list[t] for t in picked]


def sample(graph, seeds, fanouts, replace, disjoint, key):
    n, indptr, indices = graph
    nodes, tree, rows = [], [], {}

    def row_of(v, t):
        k = (t if disjoint else 0, v)
        if k not in rows:
            rows[k] = len(nodes)
            nodes.append(v)
            tree.append(t)
        return rows[k]

    seed_rows = [row_of(s, i) for i, s in enumerate(seeds)]
    frontier = [len(nodes)]
    blocks = []
    for hop, fanout in enumerate(fanouts):
        src, dst = [], []
        for i in range(frontier[hop]):
            v = nodes[i]
            for u in draws(indices[indptr[v]:indptr[v + 1]], v, hop, fanout, replace, key):
                src.append(row_of(u, tree[i]))
                dst.append(i)
        blocks.append({"src": src, "dst": dst})
        frontier.append(len(nodes))
    out = {"nodes": nodes, "frontier": frontier, "blocks": blocks, "seed_rows": seed_rows}
    if disjoint:
        out["tree"] = tree
    return out


def seed_order(seeds, epoch, seed):
    o = list(seeds)
    for i in range(len(o), 1, -1):
        j = below(philox4x64((epoch, i, 0, 0), (seed, SEED_ORDER_STREAM))[0], i)
        o[i - 1], o[j] = o[j], o[i - 1]
    return o


CASES = [
    # name, seeds, fanouts, replace, disjoint, (seed, epoch, batch)
    ("two_hops", [5, 0, 17, 55, 23], [3, 2], False, False, (11, 2, 3)),
    ("all_then_four", [0, 8, 51], [-1, 4], False, False, (11, 0, 0)),
    ("replace", [0, 5, 17, 55], [4, 3], True, False, (3, 1, 7)),
    ("disjoint", [5, 6, 5, 0], [3, 2], False, True, (11, 2, 3)),
    ("repeated_seeds", [5, 5, 9, 0, 9], [2, 2], False, False, (1, 0, 2)),
    ("three_hops", [1, 2, 3, 58], [2, 2, 2], False, False, (1 << 40, 5, 1 << 33)),
    ("isolated_only", [50, 51], [5, 5], False, False, (0, 0, 0)),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "golden" / "sampling"))
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    graph = small_graph()
    n, indptr, indices = graph
    cases = []
    for name, seeds, fanouts, replace, disjoint, key in CASES:
        cases.append({"name": name, "seeds": seeds, "fanouts": fanouts, "replace": replace, "disjoint": disjoint,
                      "key": {"seed": key[0], "epoch": key[1], "batch": key[2]},
                      "expected": sample(graph, seeds, fanouts, replace, disjoint, key)})
    orders = [{"seed": s, "epoch": e, "order": seed_order(list(range(0, 60, 3)), e, s)} for s, e in [(0, 0), (9, 4)]]
    doc = {"graph": {"num_nodes": n, "indptr": indptr, "indices": indices}, "cases": cases,
           "seed_orders": {"seeds": list(range(0, 60, 3)), "orders": orders}}
    (out / "sampler.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
