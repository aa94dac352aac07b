#!/usr/bin/python3
"""Sampled training (docs/sampling.md) end to end through `gnnrt train` and
`gnnrt launch`, checked by what it writes:

1. examples/products_sage.pbtxt on a small products-like graph: metrics
   records with the sampled fields, logits of every node, parameters; then
   `gnnrt infer` with those parameters (any module's rows, every node).
2. Bad input: each a clear error (exit 2) naming the field and value, and
   nothing written (no metrics file, no parameters folder): a fanout of 0
   and below -1, a batch size of 0, an empty training set, features with
   NaN (a NumPy dataset folder), a hop count that is not the model's.
3. Under `gnnrt launch -n 2`, rank 1 killed after epoch 2 with checkpoints
   every 3 steps (10 steps an epoch: the newest checkpoint is mid-epoch):
   restarted, and the final parameters are bitwise the uninterrupted run's.
4. Link prediction: AUC, Hits@K and MRR records, `gnnrt infer`'s
   embeddings and test scores, a bad split refused, `gnnrt launch -n 2`
   (evaluated over the two ranks' shards).

Usage: sampled_cli_test.py GNNRT EXAMPLES_DIR WORK_DIR   (run by ctest)
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

GNNRT, EXAMPLES, WORK = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
JOB = str(EXAMPLES / "products_sage.pbtxt")
GRAPH = "products:nodes=6000,edges=60000,features=16,classes=6"
SMALL = ["--set", f"dataset.path={GRAPH}", "--set", "model.layer[0].out=16", "--set", "model.layer[3].out=16",
         "--set", "sampling.batch_size=64", "--threads", "1", "--no-cache"]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED:", what)


def run(*args, expect, timeout=300):
    p = subprocess.run([GNNRT, *args], capture_output=True, text=True, timeout=timeout)
    check(p.returncode == expect, f"gnnrt {' '.join(args)}: exit {p.returncode}, expected {expect}\n"
                                  f"stderr: {p.stderr[-2000:]}")
    return p


shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)

# 1. One rank, every output.
out = WORK / "one"
run("train", JOB, *SMALL, "--set", "schedule.epochs=2", "--metrics", str(out / "metrics.jsonl"),
    "--logits-out", str(out / "logits.npy"), "--params-out", str(out / "params"), expect=0)
rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
check(len(rows) == 2, f"{len(rows)} metrics rows, expected 2")
for r in rows:
    for k in ("loss", "train_acc", "val_acc", "test_acc", "sampler_wait_ms", "sample_ms", "buckets_used",
              "padding_rows_percent", "padding_edges_percent", "infer_ms", "step"):
        check(k in r, f"metrics lack {k}: {sorted(r)}")
    check(0 < r.get("val_acc", 0) <= 1, f"val_acc {r.get('val_acc')}")
check(rows[-1].get("step") == 2 * rows[0].get("step"), f"steps {[r.get('step') for r in rows]}")
logits = np.load(out / "logits.npy")
check(logits.shape == (6000, 6), f"logits {logits.shape}")
check(np.allclose(np.exp(logits).sum(1), 1, atol=1e-4), "logits are not log-probabilities")
check(np.load(out / "params" / "conv1.lin_l.weight.npy").shape == (16, 16), "conv1.lin_l.weight's shape")
# gnnrt infer with those parameters: the last module's rows for every node
# (whose log-softmax is --logits-out) and a hidden layer's.
run("infer", JOB, *SMALL, "--params-in", str(out / "params"), "--out", str(out / "infer"), "--output", "conv3",
    "--output", "conv2", expect=0)
conv3 = np.load(out / "infer" / "conv3.npy")
check(conv3.shape == (6000, 6) and np.load(out / "infer" / "conv2.npy").shape == (6000, 16), "infer's shapes")
log_softmax = conv3 - np.log(np.exp(conv3 - conv3.max(1, keepdims=True)).sum(1, keepdims=True)) - conv3.max(1, keepdims=True)
check(np.allclose(log_softmax, logits, atol=1e-4), "infer's logits differ from --logits-out's")

# 2. Bad input: exit 2, the field and value named, nothing written.
nan = WORK / "nan_data"
nan.mkdir()
x = np.random.default_rng(0).standard_normal((30, 4)).astype(np.float32)
x[7, 2] = np.nan
np.save(nan / "x.npy", x)
np.save(nan / "y.npy", np.arange(30) % 3)
np.save(nan / "edge_index.npy", np.array([[i for i in range(29)], [i + 1 for i in range(29)]]))
for name in ("train", "val", "test"):
    np.save(nan / f"{name}_mask.npy", np.arange(30) % 3 == ("train", "val", "test").index(name))
cases = [
    (["--set", "sampling.fanout=15,0,5"], "sampling.fanout[1] = 0"),
    (["--set", "sampling.fanout=[-2, 10, 5]"], "sampling.fanout[0] = -2"),
    (["--set", "sampling.batch_size=0"], "sampling.batch_size = 0"),
    (["--set", f"dataset.path={GRAPH},train_fraction=0"], "the training set is empty"),
    (["--set", f"dataset.path={nan}"], "row 7, column 2 is nan"),
    (["--set", "sampling.fanout=5,5"], "model.layer has 3 convolutions, sampling.fanout lists 2 hops"),
]
for i, (extra, message) in enumerate(cases):
    bad = WORK / f"bad{i}"
    p = run("train", JOB, *SMALL, *extra, "--metrics", str(bad / "metrics.jsonl"), "--params-out",
            str(bad / "params"), expect=2)
    check(message in p.stderr, f"{extra}: stderr lacks '{message}': {p.stderr[-600:]}")
    check(not (bad / "metrics.jsonl").exists() and not (bad / "params").exists(), f"{extra}: something was written")

# 3. A killed rank restarts from a mid-epoch checkpoint to the same parameters.
# checkpoint.every=5: no epoch-end checkpoint before the kill (the launcher
# sets every=1 when it is 0), so the newest is step 18, in epoch 2 (steps 11..20):
# the log says "at epoch 1" (epochs done), "step 18".
common = [*SMALL, "--set", "schedule.epochs=3", "--set", "sampling.batch_size=50", "--set", "checkpoint.every_steps=3",
          "--set", "checkpoint.every=5"]
params = {}
for name, fault in (("clean", []), ("killed", ["--inject-fault", "kill:1:2"])):
    run_dir = WORK / name
    run("launch", "-n", "2", "--run-dir", str(run_dir), *fault, "--", "train", JOB, *common, "--set",
        f"checkpoint.dir={run_dir / 'ck'}", "--params-out", str(run_dir / "params"), expect=0, timeout=600)
    params[name] = {f.name: np.load(f) for f in sorted((run_dir / "params").glob("*.npy"))}
events = [json.loads(line) for line in (WORK / "killed" / "events.jsonl").read_text().splitlines()]
check(any(e.get("event") == "restart" or e.get("attempt", 0) >= 1 for e in events), "no restart in events.jsonl")
log = (WORK / "killed" / "logs" / "rank-0.log").read_text()
check("ckpt-00000018.ckpt at epoch 1, step 18" in log, "the restart did not resume mid-epoch from step 18: " +
      "".join(line for line in log.splitlines(True) if "resumed" in line))
check(len(params["clean"]) == 9 and params["clean"].keys() == params["killed"].keys(), "parameter files")
for k in params["clean"]:
    check(np.array_equal(params["clean"][k], params["killed"][k]), f"{k} differs after the restart")

# 4. Link prediction (examples/cora_link.pbtxt on a small products-like
# graph): the AUC, Hits@K and MRR records, the embeddings and test scores
# by `gnnrt infer`, a bad split named, and `gnnrt launch -n 2`.
LINK = str(EXAMPLES / "cora_link.pbtxt")
LINK_SMALL = ["--set", "dataset.path=products:nodes=2000,edges=16000,features=16,classes=6", "--set",
              "sampling.fanout=5,5", "--set", "sampling.batch_size=1000", "--threads", "1", "--no-cache"]
out = WORK / "link"
run("train", LINK, *LINK_SMALL, "--set", "schedule.epochs=2", "--metrics", str(out / "metrics.jsonl"),
    "--params-out", str(out / "params"), expect=0)
rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
check(len(rows) == 2, f"link: {len(rows)} metrics rows, expected 2")
for r in rows:
    for k in ("val_auc", "test_auc", "val_hits@50", "test_hits@50", "val_mrr", "test_mrr"):
        check(0 < r.get(k, 0) <= 1, f"link metrics' {k}: {r.get(k)}")
    check(r.get("val_acc") == r.get("val_auc"), "link: val_acc is not the validation AUC")
run("infer", LINK, *LINK_SMALL, "--params-in", str(out / "params"), "--out", str(out / "infer"), "--output", "conv2",
    "--output", "score", expect=0)
check(np.load(out / "infer" / "conv2.npy").shape == (2000, 64), "link infer: the embeddings' shape")
score = np.load(out / "infer" / "score.npy")
check(score.ndim == 2 and score.shape[1] == 1 and score.shape[0] % 2 == 0, f"link infer: scores {score.shape}")
bad = WORK / "link_bad"
p = run("train", LINK, *LINK_SMALL, "--set", "link.test_fraction=1.5", "--metrics", str(bad / "metrics.jsonl"),
        "--params-out", str(bad / "params"), expect=2)
check("link.test_fraction = 1.5" in p.stderr, f"link: stderr lacks the field: {p.stderr[-600:]}")
check(not bad.exists(), "link: something was written for a bad split")
run("launch", "-n", "2", "--run-dir", str(WORK / "link_launch"), "--", "train", LINK, *LINK_SMALL, "--set",
    "schedule.epochs=1", "--params-out", str(WORK / "link_launch" / "params"), expect=0, timeout=600)
check((WORK / "link_launch" / "params" / "conv1.lin.weight.npy").exists(), "link under launch: no parameters")
# Evaluated over the two ranks' shards: the launcher's records carry the link metrics.
rows = [json.loads(line) for line in (WORK / "link_launch" / "metrics.jsonl").read_text().splitlines()]
check(len(rows) == 1 and all(0 < rows[0].get(k, 0) <= 1 for k in ("val_auc", "test_auc", "test_mrr")),
      f"link under launch: metrics {rows}")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all sampled CLI checks passed")
