#!/usr/bin/env bash
# `gnnrt launch` across hosts simulated by network namespaces on this machine
# (tests/launch/netns_hosts.sh): a 2-host 4-rank run equals the single-host
# one, `launch -- bench collectives` across the hosts, and a cut link
# detected and restarted on the remaining host (--min-ranks). The
# namespaces are removed on exit, whatever happens.
# Usage: multihost_test.sh GNNRT [PYTHON]   (exit 77: skipped, where namespaces cannot be made)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export NETNS_TAG=g$$
source "$here/netns_hosts.sh"
if ! netns_can; then
  if [[ "${CI:-}" == "true" ]]; then
    echo "FAILED: network namespaces cannot be made here (root and iproute2 needed), and CI must run this test"
    exit 1
  fi
  echo "SKIPPED: network namespaces cannot be made here (root and iproute2 needed)"
  exit 77
fi
trap netns_down EXIT INT TERM
netns_up 2
export GNNRT_NETNS_AGENT=$here/netns_agent.sh
"${2:-/usr/bin/python3}" "$here/multihost_checks.py" "$1"
