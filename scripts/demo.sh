#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs the dependencies,
# builds gnnrt (Release, into build/), shows the build, checks the kernels on
# this machine, trains a two-layer GCN on the built-in synthetic dataset on
# 4 simulated NeuronCores (gnnrt launch: 4 MPI ranks on a METIS partition;
# oversubscribed where the machine has fewer cores) and on one, shows that both give the
# same logits, and runs short collective and halo-exchange benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"

echo "== gnnrt info"
build/launch/gnnrt info
echo "== gnnrt selfcheck"
build/launch/gnnrt selfcheck --edges 1000000 --features 64
ranks=4
if (( $(nproc) < ranks )); then
  echo "note: $ranks ranks on $(nproc) cores: oversubscribed (correct, but slower than one rank per core)"
fi
echo "== train: GCN on the synthetic default (examples/synthetic_gcn.pbtxt), $ranks simulated cores, through gnnrt launch"
rm -rf build/demo-run
build/launch/gnnrt launch -n "$ranks" --run-dir build/demo-run -- train examples/synthetic_gcn.pbtxt \
  --partition metis --cache-dir build/program-cache --logits-out build/train_logits.npy
echo "run directory build/demo-run: metrics.jsonl, events.jsonl, logs/rank-K.log, checkpoints/;" \
  "logits: build/train_logits.npy (global node order)"
echo "== the same job on one simulated core"
build/launch/gnnrt train examples/synthetic_gcn.pbtxt --cache-dir build/program-cache \
  --logits-out build/train_logits_1rank.npy
python3 - "$ranks" <<'PY'
import sys
import numpy as np
a, b = np.load("build/train_logits.npy"), np.load("build/train_logits_1rank.npy")
print(f"logits of {a.shape[0]} nodes, {sys.argv[1]} ranks against 1: max |difference| "
      f"{np.abs(a - b).max():.2e} (largest |logit| {np.abs(b).max():.2f})")
PY
echo "== kernel benchmark (smoke: E = 1e5, F = 64, 1 thread)"
build/bench/kernels_bench --benchmark_filter='/E:100000/F:64/threads:1/|triad/threads:1/' \
  --benchmark_min_time=0.05 --benchmark_min_warmup_time=0.02
echo "JSON: build/bench/results/kernels.json"
echo "== collective benchmark (allreduce, $ranks ranks, up to 1 MiB)"
build/launch/gnnrt launch -n "$ranks" --run-dir build/demo-bench -- bench collectives \
  --op allreduce --max-bytes 1048576 --seconds 0.02 --json build/bench/results/collectives_demo.json
echo "== halo exchange against a dense allreduce ($ranks ranks)"
build/launch/gnnrt launch -n "$ranks" --run-dir build/demo-bench -- bench halo --seconds 0.2
