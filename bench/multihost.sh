#!/usr/bin/env bash
# Allreduce latency and busbw across two hosts simulated by network
# namespaces (tests/launch/netns_hosts.sh), as a user's plain mpirun gets
# them and as `gnnrt launch` runs them, next to the link's own capacity (a
# plain TCP stream and ping-pong, bench/tcp_probe.py) and to shared memory on
# one host. Root only. Prints a table; JSON in build/bench/multihost/multihost.json.
#   bench/multihost.sh [GNNRT]   (default build/launch/gnnrt)
set -euo pipefail
cd "$(dirname "$0")/.."
gnnrt=$(realpath "${1:-build/launch/gnnrt}")
out=build/bench/multihost
mkdir -p "$out"
export NETNS_TAG=gb$$
source tests/launch/netns_hosts.sh
netns_can || { echo "bench/multihost.sh: needs root and iproute2 (network namespaces)"; exit 1; }
trap netns_down EXIT
netns_up 2
unset OMPI_MCA_mpi_yield_when_idle
agent=$PWD/tests/launch/netns_agent.sh
py=/usr/bin/python3
bench=(bench collectives --op allreduce --algorithm native --min-bytes 8 --max-bytes 16777216 --seconds 0.3)
tcp=(--mca plm_rsh_agent "$agent" --mca oob_tcp_if_include 198.18.0.0/24 --mca btl_tcp_if_include 198.18.0.0/24)

echo "== the link: TCP stream and ping-pong, h1 -> h2"
netns_run 2 "$py" bench/tcp_probe.py serve 5201 &
server=$!
sleep 0.5
netns_run 1 "$py" bench/tcp_probe.py probe 198.18.0.2 5201 2 > "$out/link.json"
wait "$server" || true
cat "$out/link.json"

echo "== plain mpirun across the hosts (Open MPI's defaults)"
netns_run 1 mpirun --allow-run-as-root --host 198.18.0.1:1,198.18.0.2:1 -np 2 "${tcp[@]}" --mca btl tcp,self \
  "$gnnrt" "${bench[@]}" --json "$out/mpirun_default.json" > /dev/null
echo "== gnnrt launch across the hosts (its defaults)"
margs=()
for a in "${tcp[@]}"; do margs+=("--mpirun-arg=$a"); done
netns_run 1 "$gnnrt" launch -n 2 --hosts 198.18.0.1:1,198.18.0.2:1 "${margs[@]}" --run-dir "$out/run" \
  -- "${bench[@]}" --json "$out/launch.json" > /dev/null
echo "== gnnrt launch on one host (shared memory)"
"$gnnrt" launch -n 2 --run-dir "$out/run_local" -- "${bench[@]}" --json "$out/shared_memory.json" > /dev/null

"$py" - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
link = json.loads((out / "link.json").read_text())
rows = {}
for name in ("mpirun_default", "launch", "shared_memory"):
    for r in json.loads((out / f"{name}.json").read_text()):
        if r["bytes"] in (8, 16777216):
            rows[(name, r["bytes"])] = r
table = {name: {"allreduce_8B_us": rows[(name, 8)]["avg_us"],
                "allreduce_16MiB_busbw_GBps": rows[(name, 16777216)]["busbw"]}
         for name in ("mpirun_default", "launch", "shared_memory")}
print(f"{'path':<36}{'8 B allreduce (us)':>20}{'16 MiB busbw (GB/s)':>22}")
labels = {"mpirun_default": "plain mpirun, 2 namespaces (TCP)", "launch": "gnnrt launch, 2 namespaces (TCP)",
          "shared_memory": "gnnrt launch, one host (vader)"}
for name, v in table.items():
    print(f"{labels[name]:<36}{v['allreduce_8B_us']:>20.1f}{v['allreduce_16MiB_busbw_GBps']:>22.3f}")
print(f"{'the link: TCP ping-pong / stream':<36}{link['pingpong_half_rtt_us']:>20.1f}{link['stream_GBps']:>22.3f}"
      "   (half round trip; one stream)")
(out / "multihost.json").write_text(json.dumps({"link": link, "allreduce": table}, indent=1) + "\n")
print(f"JSON: {out / 'multihost.json'}")
PY
