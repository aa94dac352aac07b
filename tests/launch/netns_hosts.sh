#!/usr/bin/env bash
# Simulated hosts for the multi-host tests: network namespaces joined by veth
# pairs, addresses from 198.18.0.0/15 (set aside for benchmarking
# interconnects), each host with its own host name when entered through
# netns_agent.sh / netns_run.
#   source netns_hosts.sh; netns_up N     creates hosts h1..hN (N <= 3); the
#                                          caller's EXIT trap must call netns_down
#   netns_run I CMD...                     runs CMD on host hI
#   netns_link I up|down                   connects or cuts host hI (I >= 2)
# h1 holds the bridge of the segment (198.18.0.0/24); hK is 198.18.0.K; h1
# also has a decoy interface on 198.19.0.1/24 that nothing routes to.
set -euo pipefail

NETNS_TAG=${NETNS_TAG:-g$$}
NETNS_DIR=${NETNS_DIR:-/tmp/gnnrt-netns-$NETNS_TAG}
export GNNRT_NETNS_HOSTS=$NETNS_DIR/hosts

netns_can() {  # 0 when namespaces can be made here
  [[ $(id -u) -eq 0 ]] && command -v ip > /dev/null && command -v unshare > /dev/null &&
    ip netns add "${NETNS_TAG}probe" 2> /dev/null && ip netns del "${NETNS_TAG}probe"
}

netns_down() {
  local ns
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep "^${NETNS_TAG}h" || true); do
    ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
    ip netns del "$ns" 2> /dev/null || true
  done
  rm -rf "$NETNS_DIR"
}

netns_up() {
  local n=$1 i
  mkdir -p "$NETNS_DIR"
  : > "$GNNRT_NETNS_HOSTS"
  for ((i = 1; i <= n; i++)); do
    ip netns add "${NETNS_TAG}h$i"
    ip -n "${NETNS_TAG}h$i" link set lo up
  done
  # A decoy first: h1's first non-loopback interface is one end of a veth
  # pair with both ends in h1, on 198.19.0.1/24, which no other host can
  # reach (an address picked by interface order instead of by route would
  # be this one).
  ip -n "${NETNS_TAG}h1" link add "${NETNS_TAG}dx" type veth peer name "${NETNS_TAG}dy"
  ip -n "${NETNS_TAG}h1" addr add 198.19.0.1/24 dev "${NETNS_TAG}dx"
  ip -n "${NETNS_TAG}h1" link set "${NETNS_TAG}dx" up
  ip -n "${NETNS_TAG}h1" link set "${NETNS_TAG}dy" up
  # One segment: a bridge in h1 (198.18.0.1), and a veth pair from each
  # other host hK (198.18.0.K) to it.
  ip -n "${NETNS_TAG}h1" link add "${NETNS_TAG}br" type bridge
  ip -n "${NETNS_TAG}h1" addr add 198.18.0.1/24 dev "${NETNS_TAG}br"
  ip -n "${NETNS_TAG}h1" link set "${NETNS_TAG}br" up
  echo "198.18.0.1 ${NETNS_TAG}h1 h1" >> "$GNNRT_NETNS_HOSTS"
  for ((i = 2; i <= n; i++)); do
    ip link add "${NETNS_TAG}a$i" type veth peer name "${NETNS_TAG}b$i"
    ip link set "${NETNS_TAG}a$i" netns "${NETNS_TAG}h1"
    ip link set "${NETNS_TAG}b$i" netns "${NETNS_TAG}h$i"
    ip -n "${NETNS_TAG}h1" link set "${NETNS_TAG}a$i" master "${NETNS_TAG}br" up
    ip -n "${NETNS_TAG}h$i" addr add "198.18.0.$i/24" dev "${NETNS_TAG}b$i"
    ip -n "${NETNS_TAG}h$i" link set "${NETNS_TAG}b$i" up
    echo "198.18.0.$i ${NETNS_TAG}h$i h$i" >> "$GNNRT_NETNS_HOSTS"
  done
}

netns_run() {
  local i=$1
  shift
  ip netns exec "${NETNS_TAG}h$i" unshare --uts sh -c "hostname h$i && exec \"\$@\"" sh "$@"
}

netns_link() {
  ip -n "${NETNS_TAG}h$1" link set "${NETNS_TAG}b$1" "$2"
}
