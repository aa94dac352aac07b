#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs the dependencies,
# builds gnnrt (Release, into build/), shows the build, checks the kernels on
# this machine, trains a two-layer GCN on the built-in synthetic dataset on
# one simulated NeuronCore (printing its accuracy), and runs short
# collective and halo-exchange benchmarks on 4 MPI ranks. (Training on many
# ranks comes with the multi-core issue.)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"

echo "== gnnrt info"
build/launch/gnnrt info
echo "== gnnrt selfcheck"
build/launch/gnnrt selfcheck --edges 1000000 --features 64
echo "== train: GCN on the synthetic default (examples/synthetic_gcn.pbtxt), one simulated core"
build/launch/gnnrt train examples/synthetic_gcn.pbtxt --cache-dir build/program-cache \
  --metrics build/train_metrics.jsonl --logits-out build/train_logits.npy
echo "metrics: build/train_metrics.jsonl, logits: build/train_logits.npy"
echo "== kernel benchmark (smoke: E = 1e5, F = 64, 1 thread)"
build/bench/kernels_bench --benchmark_filter='/E:100000/F:64/threads:1/|triad/threads:1/' \
  --benchmark_min_time=0.05 --benchmark_min_warmup_time=0.02
echo "JSON: build/bench/results/kernels.json"
echo "== collective benchmark (allreduce, 4 ranks, up to 1 MiB; oversubscribed on fewer cores)"
mpirun --allow-run-as-root --oversubscribe -np 4 build/launch/gnnrt bench collectives \
  --op allreduce --max-bytes 1048576 --seconds 0.02 --json build/bench/results/collectives_demo.json
echo "== halo exchange against a dense allreduce (4 ranks)"
mpirun --allow-run-as-root --oversubscribe -np 4 build/launch/gnnrt bench halo --seconds 0.2
