#!/bin/sh
# Open MPI's remote-start agent for hosts simulated by network namespaces
# (instead of ssh): `netns_agent.sh HOST COMMAND...` runs the command, which
# mpirun writes for a remote shell, inside HOST's namespace with the host
# name of its own UTS namespace. $GNNRT_NETNS_HOSTS names the map file:
# lines of "ADDRESS NAMESPACE HOSTNAME".
set -eu
host=$1
shift
line=$(awk -v h="$host" '$1 == h || $3 == h { print; exit }' "$GNNRT_NETNS_HOSTS")
[ -n "$line" ] || { echo "netns_agent: unknown host $host" >&2; exit 255; }
set -- "$@"
ns=$(echo "$line" | cut -d' ' -f2)
name=$(echo "$line" | cut -d' ' -f3)
exec ip netns exec "$ns" unshare --uts sh -c "hostname $name && $*"
