"""Golden values of gnnrt's link prediction metrics (model/sampling/link_split.h)
from a numpy reference written from their definitions, by brute force over
every (positive, negative) pair: AUC (Mann-Whitney, ties half), Hits@K (OGB:
positives above the K-th highest negative; 1 when fewer than K negatives) and
MRR (OGB: rank 1 + negatives above + ties / 2, against the shared negatives).
Scores are float32 rounded to a coarse grid so that ties occur.

Usage: /usr/bin/python3 tests/reference/make_link_golden.py [--out DIR]
CI does not run this; its file is committed. A re-run writes identical bytes.
"""
import argparse
import json
from pathlib import Path

import numpy as np


def auc(pos, neg):
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(wins / (len(pos) * len(neg)))


def hits(pos, neg, k):
    if len(neg) < k:
        return 1.0
    kth = np.sort(neg)[::-1][k - 1]
    return float((pos > kth).mean())


def mrr(pos, neg):
    above = (neg[None, :] > pos[:, None]).sum(1)
    tied = (neg[None, :] == pos[:, None]).sum(1)
    return float((1.0 / (1.0 + above + 0.5 * tied)).mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "golden" / "links"))
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    cases = []
    for n_pos, n_neg, shift in ((50, 80, 0.8), (7, 5, 0.3), (200, 1000, 1.5)):
        pos = np.round(rng.normal(shift, 1.0, n_pos) * 4) / 4
        neg = np.round(rng.normal(0.0, 1.0, n_neg) * 4) / 4
        pos, neg = pos.astype(np.float32), neg.astype(np.float32)
        case = {"positive": pos.tolist(), "negative": neg.tolist(), "auc": auc(pos, neg), "mrr": mrr(pos, neg),
                "hits": {str(k): hits(pos, neg, k) for k in (1, 3, 10, 50)}}
        cases.append(case)
    (out / "metrics.json").write_text(json.dumps(cases, indent=1) + "\n")


if __name__ == "__main__":
    main()
