#!/usr/bin/python3
"""`gnnrt train` end to end through its flags, checked by what it writes, not
by what it prints: the exit status (0 success, 1 failure, 2 bad usage or
input), metrics that parse as JSON lines with the documented fields and
plausible values, logits and parameters that load back with NumPy in the
right shapes, a trace that is valid Chrome-trace JSON, and --params-in
really read (the logits of the imported parameters are the exported ones').

Usage: train_cli_test.py GNNRT WORK_DIR   (run by ctest)
"""
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

GNNRT, WORK = sys.argv[1], Path(sys.argv[2])
DATASET = "synthetic:nodes=300,features=16,classes=4,seed=3"
FIELDS = {"epoch", "loss", "train_acc", "val_acc", "test_acc", "ms", "train_ms", "infer_ms",
          "simulated_ms", "lr", "compiles", "cache_hits", "ops_run", "bytes_moved", "host_syncs",
          "ranks", "compute_ms", "halo_ms", "grad_ms", "wait_ms", "halo_bytes"}
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED:", what)


def run(*args, expect):
    p = subprocess.run([GNNRT, *args], capture_output=True, text=True, timeout=300)
    check(p.returncode == expect, f"gnnrt {' '.join(args)}: exit {p.returncode}, expected {expect}\n"
                                  f"stderr: {p.stderr[-2000:]}")
    return p


shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)
out = WORK / "out"

# 1. Every output flag, in debug mode, on a profile of our choosing.
run("train", "--no-cache", "--dataset", DATASET, "--set", "schedule.epochs=3",
    "--metrics", str(out / "metrics.jsonl"), "--logits-out", str(out / "logits.npy"),
    "--params-out", str(out / "params"), "--trace", str(out / "trace.json"),
    "--profile", "trn2", "--threads", "1", "--debug", expect=0)

rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
check(len(rows) == 3, f"{len(rows)} metrics rows, expected 3")
for i, r in enumerate(rows):
    check(FIELDS <= set(r), f"row {i} lacks {FIELDS - set(r)}")
    check(r.get("epoch") == i + 1, f"row {i}: epoch {r.get('epoch')}")
    check(math.isfinite(r.get("loss", float("nan"))) and r["loss"] > 0, f"row {i}: loss {r.get('loss')}")
    for k in ("train_acc", "val_acc", "test_acc"):
        check(0 <= r.get(k, -1) <= 1, f"row {i}: {k} {r.get(k)}")
    check(r.get("ms", 0) > 0 and r.get("simulated_ms", 0) > 0, f"row {i}: times {r.get('ms')}")
    check(r.get("lr") == 0.01, f"row {i}: lr {r.get('lr')}")
    check(r.get("compiles") == 2 and r.get("ops_run", 0) > 0, f"row {i}: counters {r}")
    # One rank: no halo; the epoch's time is the kernels' plus the host's.
    check(r.get("ranks") == 1 and r.get("halo_bytes") == 0 and r.get("halo_ms") == 0
          and r.get("grad_ms") == 0, f"row {i}: one rank has halo or gradient traffic: {r}")
    check(0 < r.get("compute_ms", 0) <= r["ms"] * 1.01 and r.get("wait_ms", -1) >= 0,
          f"row {i}: time split {r.get('compute_ms')} + {r.get('wait_ms')} of {r.get('ms')}")

logits = np.load(out / "logits.npy")
check(logits.shape == (300, 4) and logits.dtype == np.float32, f"logits {logits.shape} {logits.dtype}")
check(np.allclose(np.exp(logits).sum(1), 1, atol=1e-4), "logits are not log-probabilities")
params = {p.stem: np.load(p) for p in (out / "params").glob("*.npy")}
expected = {"conv1.lin.weight": (16, 16), "conv1.bias": (16,), "conv2.lin.weight": (4, 16),
            "conv2.bias": (4,)}
check({k: v.shape for k, v in params.items()} == expected,
      f"params {{k: v.shape}} = {{{', '.join(f'{k}: {v.shape}' for k, v in params.items())}}}")

trace = json.loads((out / "trace.json").read_text())
events = trace.get("traceEvents", [])
check(len(events) > 10, f"{len(events)} trace events")
for e in events[:50]:
    check({"name", "ph", "ts", "dur", "pid", "tid"} <= set(e) and e["ph"] == "X" and e["dur"] >= 0,
          f"trace event {e}")
check(any(e["name"] == "gather" for e in events), "debug mode ran no unfused gather")

# 2. The exported parameters imported again, no training: the same logits.
run("train", "--no-cache", "--dataset", DATASET, "--set", "schedule.epochs=0",
    "--params-in", str(out / "params"), "--logits-out", str(out / "logits_in.npy"), "--debug",
    expect=0)
again = np.load(out / "logits_in.npy")
check(again.shape == logits.shape and np.allclose(again, logits, atol=1e-5),
      "--params-in did not reproduce the exported model's logits")

# 3. Failures and bad input.
p = run("train", "--no-cache", "--set", "schedule.epochs=1", "--hbm-bytes", "65536", expect=1)
check("gnnrt: error: program 'train_step' does not fit the device" in p.stderr, p.stderr)
check(p.stderr.count("\n") == 1, f"more than one line on stderr: {p.stderr!r}")
p = run("train", "--set", "optimizer.lrr=1", expect=2)
check("--set 'optimizer.lrr=1': Optimizer has no field 'lrr'" in p.stderr, p.stderr)
p = run("train", str(WORK / "missing.pbtxt"), expect=2)
check("missing.pbtxt" in p.stderr, p.stderr)
p = run("train", "--no-such-flag", expect=2)
p = run("train", "--threads", "-3", expect=2)
p = run("train", "--no-cache", "--dataset", "synthetic:nodes=-5", expect=2)
check("nodes" in p.stderr, p.stderr)
p = run("train", "--help", expect=0)
check("--metrics" in p.stdout, "--help lists no --metrics")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
