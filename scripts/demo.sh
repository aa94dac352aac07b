#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs the dependencies,
# builds gnnrt (Release, into build/), shows the build, checks the kernels on
# this machine, trains a two-layer GCN on the built-in synthetic dataset on
# 4 simulated NeuronCores (gnnrt launch: 4 MPI ranks on a METIS partition;
# oversubscribed where the machine has fewer cores) and on one, shows that both give the
# same logits, and runs short collective and halo-exchange benchmarks.
#   scripts/demo.sh                      as above
#   scripts/demo.sh --quick              the same steps, shorter (20 epochs, small benchmarks):
#                                        what the test suite runs (tests/cli/demo_test.sh)
#   scripts/demo.sh --build-dir DIR      build into DIR instead of build/
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
build=build
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --build-dir) build=${2:?--build-dir needs a folder}; shift ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done
# Debian's interpreter, the one with python3-numpy: these machines may put
# another python3 first on PATH (CMake pins the same one for the tests).
py=/usr/bin/python3

scripts/setup.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"

gnnrt=$build/launch/gnnrt
epochs=()
edges=1000000
kernel_time=(--benchmark_min_time=0.05 --benchmark_min_warmup_time=0.02)
collective=(--max-bytes 1048576 --seconds 0.02)
halo_seconds=0.2
if ((quick)); then
  epochs=(--set schedule.epochs=20)
  edges=100000
  kernel_time=(--benchmark_min_time=0.005 --benchmark_min_warmup_time=0.002)
  collective=(--max-bytes 65536 --seconds 0.005)
  halo_seconds=0.02
fi

echo "== gnnrt info"
"$gnnrt" info
echo "== gnnrt selfcheck"
"$gnnrt" selfcheck --edges "$edges" --features 64
ranks=4
if (( $(nproc) < ranks )); then
  echo "note: $ranks ranks on $(nproc) cores: oversubscribed (correct, but slower than one rank per core)"
fi
echo "== train: GCN on the synthetic default (examples/synthetic_gcn.pbtxt), $ranks simulated cores, through gnnrt launch"
rm -rf "$build/demo-run"
"$gnnrt" launch -n "$ranks" --run-dir "$build/demo-run" -- train examples/synthetic_gcn.pbtxt \
  --partition metis --cache-dir "$build/program-cache" --logits-out "$build/train_logits.npy" "${epochs[@]}"
echo "run directory $build/demo-run: metrics.jsonl, events.jsonl, logs/rank-K.log, checkpoints/;" \
  "logits: $build/train_logits.npy (global node order)"
echo "== the same job on one simulated core"
"$gnnrt" train examples/synthetic_gcn.pbtxt --cache-dir "$build/program-cache" \
  --logits-out "$build/train_logits_1rank.npy" "${epochs[@]}"
"$py" - "$ranks" "$build" <<'PY'
import sys
import numpy as np
a = np.load(f"{sys.argv[2]}/train_logits.npy")
b = np.load(f"{sys.argv[2]}/train_logits_1rank.npy")
print(f"logits of {a.shape[0]} nodes, {sys.argv[1]} ranks against 1: max |difference| "
      f"{np.abs(a - b).max():.2e} (largest |logit| {np.abs(b).max():.2f})")
PY
echo "== kernel benchmark (smoke: E = 1e5, F = 64, 1 thread)"
"$build/bench/kernels_bench" --benchmark_filter='/E:100000/F:64/threads:1/|triad/threads:1/' "${kernel_time[@]}"
echo "JSON: $build/bench/results/kernels.json"
echo "== collective benchmark (allreduce, $ranks ranks, up to ${collective[1]} bytes)"
"$gnnrt" launch -n "$ranks" --run-dir "$build/demo-bench" -- bench collectives \
  --op allreduce "${collective[@]}" --json "$build/bench/results/collectives_demo.json"
echo "== halo exchange against a dense allreduce ($ranks ranks)"
"$gnnrt" launch -n "$ranks" --run-dir "$build/demo-bench" -- bench halo --seconds "$halo_seconds"
