#!/usr/bin/python3
"""Data-parallel training on a batch dataset end to end: `gnnrt train` on
1 rank, under `mpirun -np 2` and `-np 3` (a graph count and batch size that
3 does not divide, so shares differ and the last batch is partial), and
under `gnnrt launch -n 2`: the same step counts, and parameters equal to
one rank's element by element within 1e-6 + 1e-5 |x| (the gradients'
all-reduce adds in another order), with dropout on nodes and on GAT's
attention weights (masks keyed by dataset rows, so every rank count draws
the same ones). A launcher run killed mid-training and
restarted ends with the uninterrupted parameters bitwise. Ranks started with
another batch size stop with an error naming the field.

Usage: batch_cli_test.py GNNRT MPIRUN... (run by ctest; WORK from $GNNRT_WORK)
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "launch"))
from launch_common import rank_pids  # noqa: E402

GNNRT = sys.argv[1]
MPIRUN = sys.argv[2:]
WORK = Path(os.environ.get("GNNRT_WORK", "/tmp/gnnrt_batch_cli"))
QUICK = os.environ.get("GNNRT_TEST_QUICK") == "1"
JOB = """
dataset { path: "molecules:graphs=131,seed=2" }
model {
  module { name: "conv1" input: "atom.x" gin { edges: "bond" out: 16 } }
  module { name: "act1" input: "conv1" relu {} }
  module { name: "drop" input: "act1" dropout { p: 0.2 } }
  module { name: "conv2" input: "drop" sage { edges: "bond" out: 16 aggr: MAX } }
  module { name: "att" input: "conv2" gat { edges: "bond" out: 8 heads: 2 attention_dropout: 0.3 } }
  module { name: "norm" input: "att" layer_norm {} }
  module { name: "pool" input: "norm" pool { reduce: MEAN } }
  module { name: "head" input: "pool" mlp { hidden: 16 out: 1 } }
  module { name: "node" input: "norm" linear { out: 1 } }
  loss_term { input: "head" target: "graph.y" }
  loss_term { input: "node" target: "atom.y" weight: 0.1 }
}
optimizer { lr: 0.003 weight_decay: 0 }
schedule { epochs: 3 }
batching { batch_size: 20 }
seed: 9
"""
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED:", what)


def run(args, timeout=180, env=None):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout + p.stderr


def params(folder):
    return {p.stem: np.load(p) for p in sorted(Path(folder).glob("*.npy"))}


def metrics(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def compare(got, want, what):
    check(sorted(got) == sorted(want) and len(want) > 0, f"{what}: keys {sorted(got)} vs {sorted(want)}")
    for k in want:
        if k in got:
            bad = np.abs(got[k] - want[k]) > 1e-6 + 1e-5 * np.abs(want[k])
            check(not bad.any(), f"{what}: {k} differs at {np.argwhere(bad)[:3].tolist()} "
                                 f"(max |diff| {np.abs(got[k] - want[k]).max():.3g})")


shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)
job = WORK / "job.pbtxt"
job.write_text(JOB)
common = ["train", str(job), "--no-cache", "--threads", "1"]

code, out = run([GNNRT, *common, "--params-out", str(WORK / "p1"), "--metrics", str(WORK / "m1.jsonl")])
check(code == 0, f"one rank: exit {code}\n{out[-3000:]}")
one = params(WORK / "p1")
steps = [m["step"] for m in metrics(WORK / "m1.jsonl")]
check(steps == [7, 14, 21], f"one rank's steps {steps}")  # 131 graphs in batches of 20: 6 full, one of 11

for ranks in ([2] if QUICK else [2, 3]):
    out_dir = WORK / f"p{ranks}"
    code, out = run([*MPIRUN, "-np", str(ranks), GNNRT, *common, "--params-out", str(out_dir),
                     "--metrics", str(WORK / f"m{ranks}.jsonl")])
    check(code == 0, f"{ranks} ranks: exit {code}\n{out[-3000:]}")
    if code == 0:
        compare(params(out_dir), one, f"{ranks} ranks")
        m = metrics(WORK / f"m{ranks}.jsonl")
        check([r["step"] for r in m] == steps, f"{ranks} ranks: steps {[r['step'] for r in m]}")
        losses = [r["loss"] for r in m]
        want = [r["loss"] for r in metrics(WORK / "m1.jsonl")]
        check(np.allclose(losses, want, rtol=1e-5), f"{ranks} ranks: losses {losses} vs {want}")

# The scene layers data-parallel (attention with edge features and shared
# pre-norms, the query token, dropout on attention): 1, 2 and 3 ranks give
# the same parameters (issue 42's check, on synthetic scenes; 10 steps).
SCENE_JOB = """
dataset { path: "scenes:scenes=25,min_lanes=3,max_lanes=9,min_agents=2,max_agents=5,seed=4" }
model {
  module { name: "lane_mlp" input: "lane.x" residual_mlp { hidden: 8 } }
  module { name: "conn_mlp" input: "l2l.x" residual_mlp { hidden: 4 hidden_layers: 1 } }
  module { name: "agent_mlp" input: "agent.x" residual_mlp { hidden: 8 } }
  module { name: "l2l" input: "lane_mlp" input: "conn_mlp" attention { edges: "l2l" heads: 2 feedforward: 16 dropout: 0.1 } }
  module { name: "l2a" input: "l2l" input: "agent_mlp" attention { edges: "l2a" heads: 2 feedforward: 16 shared_prenorm: true } }
  module { name: "a2a" input: "l2a" attention { edges: "a2a" heads: 2 feedforward: 16 } }
  module { name: "Q" token { node_set: "query" width: 8 } }
  module { name: "l2q" input: "l2l" input: "Q" attention { edges: "l2q" heads: 2 feedforward: 16 shared_prenorm: true } }
  module { name: "query" input: "l2q" pool { reduce: SUM } }
  module { name: "lane_count" input: "query" linear { out: 10 } }
  module { name: "lane_out" input: "l2l" linear { out: 40 } }
  module { name: "agent_out" input: "a2a" linear { out: 22 } }
  loss_term { input: "lane_out" target: "lane.y" kind: MSE }
  loss_term { input: "agent_out" target: "agent.y" kind: MSE }
  loss_term { input: "lane_count" target: "graph.y" kind: CROSS_ENTROPY weight: 0.1 }
}
optimizer { lr: 0.003 weight_decay: 0 }
schedule { epochs: 2 }
batching { batch_size: 5 }
seed: 6
"""
scene_job = WORK / "scene.pbtxt"
scene_job.write_text(SCENE_JOB)
scene = ["train", str(scene_job), "--no-cache", "--threads", "1"]
code, out = run([GNNRT, *scene, "--params-out", str(WORK / "s1")])
check(code == 0, f"scene layers on one rank: exit {code}\n{out[-3000:]}")
scene_one = params(WORK / "s1") if code == 0 else {}
check("l2l.attn_prenorm_x_dst.weight" in scene_one, "the aliased key is not written")
for ranks in ([2] if QUICK else [2, 3]):
    code, out = run([*MPIRUN, "-np", str(ranks), GNNRT, *scene, "--params-out", str(WORK / f"s{ranks}")])
    check(code == 0, f"scene layers on {ranks} ranks: exit {code}\n{out[-3000:]}")
    if code == 0:
        compare(params(WORK / f"s{ranks}"), scene_one, f"scene layers on {ranks} ranks")

# VectorWorld's scene encoder at reduced widths (the golden job of
# tests/reference/make_encoder_golden.py) with its VAE objective: the
# reparameterisation noise is keyed by global rows, so 1, 2 and 3 ranks
# give the same parameters after 10 steps (25 scenes, batches of 5). SGD
# with momentum: Adam turns a gradient element that is all rounding (the
# all-reduce adds in another order) into a step of lr (3 ranks: one element
# of 42,000 off by 2.8e-6).
golden = Path(__file__).resolve().parent.parent / "golden" / "batch" / "scene_encoder" / "job.pbtxt"
encoder_job = WORK / "encoder.pbtxt"
encoder_job.write_text(golden.read_text().replace(
    "DATA", "scenes:scenes=25,min_lanes=2,max_lanes=6,min_agents=1,max_agents=4,seed=8")
    .replace("epochs: 50", "epochs: 2").replace("batch_size: 6", "batch_size: 5")
    .replace('kind: ADAM lr: 0.003', 'kind: SGD lr: 0.001 momentum: 0.9'))
encoder = ["train", str(encoder_job), "--no-cache", "--threads", "1"]
code, out = run([GNNRT, *encoder, "--params-out", str(WORK / "e1"), "--metrics", str(WORK / "e1.jsonl")])
check(code == 0, f"the encoder on one rank: exit {code}\n{out[-3000:]}")
encoder_one = params(WORK / "e1") if code == 0 else {}
check(code == 0 and metrics(WORK / "e1.jsonl")[-1]["step"] == 10, "the encoder did not take 10 steps")
for ranks in ([2] if QUICK else [2, 3]):
    code, out = run([*MPIRUN, "-np", str(ranks), GNNRT, *encoder, "--params-out", str(WORK / f"e{ranks}")])
    check(code == 0, f"the encoder on {ranks} ranks: exit {code}\n{out[-3000:]}")
    if code == 0:
        compare(params(WORK / f"e{ranks}"), encoder_one, f"the encoder on {ranks} ranks")
# Its inference on one rank and shared over two: the job's model.output (the
# latents' means and log variances, the lane-count logits), the same bits.
enc_infer = ["infer", str(encoder_job), "--params-in", str(WORK / "e1"), "--no-cache", "--threads", "1"]
code, out = run([GNNRT, *enc_infer, "--out", str(WORK / "ei1")])
enc_want = params(WORK / "ei1") if code == 0 else {}
check(code == 0 and sorted(enc_want) == ["encoder.agent_log_var", "encoder.agent_mu", "encoder.lane_log_var",
                                         "encoder.lane_mu", "lane_count_logits"],
      f"the encoder's infer on one rank: exit {code}, outputs {sorted(enc_want)}\n{out[-2000:]}")
code, out = run([*MPIRUN, "-np", "2", GNNRT, *enc_infer, "--out", str(WORK / "ei2")])
got = params(WORK / "ei2") if code == 0 else {}
check(code == 0 and sorted(got) == sorted(enc_want) and all(np.array_equal(got[k], enc_want[k]) for k in enc_want),
      f"the encoder's infer on 2 ranks: exit {code}, outputs differ from one rank's\n{out[-2000:]}")

# gnnrt infer on 1 rank and shared out over 2 and 3 (7 batches: shares of
# 3-4 and 2-3): rank 0 writes the same outputs, bitwise (each batch runs the
# same program on the same rows), and reports its batch latency and throughput.
infer = ["infer", str(job), "--params-in", str(WORK / "p1"), "--no-cache", "--threads", "1"]
code, out = run([GNNRT, *infer, "--out", str(WORK / "i1")])
check(code == 0 and "batch latency median " in out and " p90 " in out and "graphs/s" in out,
      f"infer on one rank: exit {code}\n{out[-2000:]}")
want = params(WORK / "i1") if code == 0 else {}
check(sorted(want) == ["head", "node"] and want["head"].shape == (131, 1), f"infer outputs {sorted(want)}")
for ranks in ([2] if QUICK else [2, 3]):
    code, out = run([*MPIRUN, "-np", str(ranks), GNNRT, *infer, "--out", str(WORK / f"i{ranks}")])
    got = params(WORK / f"i{ranks}") if code == 0 else {}
    check(code == 0 and sorted(got) == sorted(want) and all(np.array_equal(got[k], want[k]) for k in want),
          f"infer on {ranks} ranks: exit {code}, outputs differ from one rank's\n{out[-2000:]}")
    check(out.count("graphs in 7 batches on") == 1, f"infer on {ranks} ranks: not one summary (rank 0's)\n{out[-2000:]}")

# Ranks that disagree on the job stop before any step.
code, out = run([*MPIRUN, "-np", "1", GNNRT, *common, ":", "-np", "1", GNNRT, *common,
                 "--set", "batching.batch_size=21"])
check(code != 0 and "batching.batch_size is 20 on rank 0, 21 on rank 1" in out,
      f"ranks with two batch sizes: exit {code}\n{out[-2000:]}")

# The launcher: the same result as mpirun on 2 ranks, bitwise; then a run
# whose rank 1 is killed mid-training restarts from its checkpoint and ends
# with the same bits. The sanitizer suite (GNNRT_TEST_QUICK) leaves it to
# the Release suite: the launcher's own paths run there in launch_single_host.
if not QUICK:
    long_job = WORK / "long.pbtxt"
    long_job.write_text(JOB.replace("epochs: 3", "epochs: 300"))
    ref_dir, run_dir = WORK / "launch_ref", WORK / "launch_run"
    code, out = run([*MPIRUN, "-np", "2", GNNRT, "train", str(long_job), "--no-cache", "--threads", "1",
                     "--params-out", str(WORK / "p_long2")], timeout=300)
    check(code == 0, f"300 epochs on 2 ranks: exit {code}\n{out[-2000:]}")
    launch = [GNNRT, "launch", "-n", "2", "--max-restarts", "2", "--restart-delay", "0.2", "--run-dir"]
    code, out = run([*launch, str(ref_dir), "--", "train", str(long_job), "--no-cache", "--threads", "1",
                     "--params-out", str(WORK / "p_launch")], timeout=300)
    check(code == 0, f"launch -n 2: exit {code}\n{out[-2000:]}")
    if code == 0:
        a, b = params(WORK / "p_launch"), params(WORK / "p_long2")
        check(sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in b), "launch -n 2 differs from mpirun -np 2")

    # The example job trains on one rank and under the launcher on two, and
    # gnnrt infer runs on what it wrote (two epochs here).
    example = Path(__file__).resolve().parent.parent.parent / "examples" / "molecules_gin.pbtxt"
    short = ["--no-cache", "--threads", "1", "--set", "schedule.epochs=2"]
    code, out = run([GNNRT, "train", str(example), *short, "--params-out", str(WORK / "ex1")])
    check(code == 0, f"examples/molecules_gin.pbtxt on one rank: exit {code}\n{out[-2000:]}")
    code, out = run([GNNRT, "launch", "-n", "2", "--run-dir", str(WORK / "ex_run"), "--", "train", str(example), *short,
                     "--params-out", str(WORK / "ex2")], timeout=300)
    check(code == 0, f"examples/molecules_gin.pbtxt under launch -n 2: exit {code}\n{out[-2000:]}")
    code, out = run([GNNRT, "infer", str(example), "--params-in", str(WORK / "ex2"), "--out", str(WORK / "ex_out"),
                     "--no-cache"])
    check(code == 0 and (WORK / "ex_out" / "head.npy").exists(), f"infer on the example: exit {code}\n{out[-2000:]}")

    # examples/scene_encoder.pbtxt (the encoder at vae.yaml's sizes, 45 M
    # parameters, on the synthetic default) for one epoch: on one rank,
    # under the launcher on two, then gnnrt infer writes the latents' means
    # and log variances and the lane-count logits.
    example = Path(__file__).resolve().parent.parent.parent / "examples" / "scene_encoder.pbtxt"
    short = ["--no-cache", "--set", "schedule.epochs=1"]
    code, out = run([GNNRT, "train", str(example), *short, "--params-out", str(WORK / "se1")], timeout=300)
    check(code == 0, f"examples/scene_encoder.pbtxt on one rank: exit {code}\n{out[-2000:]}")
    code, out = run([GNNRT, "launch", "-n", "2", "--run-dir", str(WORK / "se_run"), "--", "train", str(example),
                     *short, "--threads", "1", "--params-out", str(WORK / "se2")], timeout=300)
    check(code == 0, f"examples/scene_encoder.pbtxt under launch -n 2: exit {code}\n{out[-2000:]}")
    heads = ["encoder.agent_mu", "encoder.lane_mu", "encoder.agent_log_var", "encoder.lane_log_var",
             "lane_count_logits"]
    code, out = run([GNNRT, "infer", str(example), "--params-in", str(WORK / "se2"), "--out", str(WORK / "se_out"),
                     "--no-cache"], timeout=300)  # the job's model.output
    got = params(WORK / "se_out") if code == 0 else {}
    check(code == 0 and sorted(got) == sorted(heads) and got["lane_count_logits"].shape == (16, 101)
          and got["encoder.agent_mu"].shape[1] == 18 and got["encoder.lane_mu"].shape[1] == 24,
          f"infer on the scene encoder: exit {code}, outputs { {k: v.shape for k, v in got.items()} }\n{out[-2000:]}")

    # An epoch longer than --progress-timeout (7 steps of 0.8 s, stretched
    # by GNNRT_TEST_SLOW_STEP): the steps it reports are progress, so the
    # launcher neither calls it hung nor restarts it, and its progress line
    # shows the step.
    slow_job = WORK / "slow.pbtxt"
    slow_job.write_text(JOB.replace("epochs: 3", "epochs: 1"))
    started = time.time()
    code, out = run([GNNRT, "launch", "-n", "2", "--max-restarts", "0", "--progress-timeout", "2", "--run-dir",
                     str(WORK / "slow_run"), "--", "train", str(slow_job), "--no-cache", "--threads", "1"],
                    timeout=300, env={**os.environ, "GNNRT_TEST_SLOW_STEP": "0.8"})
    took = time.time() - started
    check(code == 0 and "epoch 0/1 step " in out, f"a {took:.1f} s epoch under --progress-timeout 2: exit {code}\n{out[-2000:]}")

    p = subprocess.Popen([*launch, str(run_dir), "--", "train", str(long_job), "--no-cache", "--threads", "1",
                          "--set", f"checkpoint.dir={WORK / 'ckpt'}", "--set", "checkpoint.every=10",
                          "--params-out", str(WORK / "p_killed")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    killed = False
    deadline = time.time() + 120
    while time.time() < deadline and not killed:
        time.sleep(0.2)
        if len(list((WORK / "ckpt").glob("ckpt-*.ckpt"))) >= 1:
            pid = rank_pids(run_dir).get(1)
            if pid:
                os.kill(pid, signal.SIGKILL)
                killed = True
    out, _ = p.communicate(timeout=300)
    check(killed, "never found rank 1 to kill")
    log = (run_dir / "logs" / "launcher.log").read_text() if (run_dir / "logs" / "launcher.log").exists() else ""
    check("attempt 1" in log or "restart" in log, f"no restart in the launcher's log:\n{log[-2000:]}")
    check(p.returncode == 0, f"killed run: exit {p.returncode}\n{out[-3000:]}")
    if p.returncode == 0:
        a, b = params(WORK / "p_killed"), params(WORK / "p_long2")
        check(sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in b),
              "the restarted run's parameters differ from the uninterrupted run's")


if failures:
    print(f"{len(failures)} failures")
    sys.exit(1)
print("ok")
