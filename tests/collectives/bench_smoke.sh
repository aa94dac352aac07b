#!/usr/bin/env bash
# Smoke test of the MPI benchmarks' command line: a short collectives sweep
# on 3 ranks writes JSON rows with every documented field and a tuning table
# that the runtime then loads (bench halo --collective-tuning); bad flags fail
# with one clear line.
#   bench_smoke.sh GNNRT MPIRUN...
set -euo pipefail
gnnrt=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"$@" -np 3 "$gnnrt" bench collectives --max-bytes 4096 --seconds 0.001 \
  --json "$dir/rows.json" --tune "$dir/tuning.pbtxt" > "$dir/out.txt"
grep -q '^allreduce  *ring ' "$dir/out.txt"
/usr/bin/python3 - "$dir/rows.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
keys = {"op", "algorithm", "bytes", "ranks", "avg_us", "min_us", "max_us", "algbw", "busbw"}
assert rows and all(keys <= set(r) for r in rows), "missing fields"
ops = {r["op"] for r in rows}
assert ops == {"allreduce", "reduce_scatter", "allgather", "broadcast", "alltoallv"}, ops
assert all(r["ranks"] == 3 and r["avg_us"] > 0 and r["bytes"] > 0 for r in rows)
# busbw = algbw * 2(p-1)/p for allreduce, (p-1)/p for allgather and reduce_scatter
for r in rows:
    factor = {"allreduce": 4 / 3, "allgather": 2 / 3, "reduce_scatter": 2 / 3}.get(r["op"])
    if factor:
        assert abs(r["busbw"] - r["algbw"] * factor) <= 1e-9 + 1e-6 * r["busbw"], r
algos = {r["algorithm"] for r in rows if r["op"] == "allreduce"}
assert algos == {"native", "ring", "recursive_doubling", "rabenseifner", "auto"}, algos
PY
grep -q 'ranks: 3' "$dir/tuning.pbtxt"
"$@" -np 3 "$gnnrt" bench halo --nodes 2000 --features 8 --seconds 0.01 \
  --collective-tuning "$dir/tuning.pbtxt" --json "$dir/halo.json" | grep -q 'halo p2p'
# A data set's graph under each partitioner of model/data/partition.h.
for partition in metis hdrf random; do
  "$@" -np 3 "$gnnrt" bench halo --dataset synthetic:nodes=600 --partition "$partition" \
    --features 4 --seconds 0.01 --rounds 2 | grep -q 'halo p2p'
done

# Bad input: one clear line, non-zero status.
if "$gnnrt" bench collectives --algorithm fastest --max-bytes 8 2> "$dir/err.txt" > /dev/null; then
  echo "unknown algorithm accepted" >&2
  exit 1
fi
grep -q "gnnrt: error: unknown algorithm 'fastest'" "$dir/err.txt"
echo "bench smoke: ok"
