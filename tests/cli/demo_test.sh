#!/usr/bin/env bash
# The README's first command, as a user runs it: scripts/demo.sh (--quick:
# 20 epochs and short benchmarks, every step kept) on this Release build,
# with a python3 first on PATH that has no numpy, as on the machines where
# the demo once failed at its logits comparison. Fails on any non-zero exit
# or a missing step.
#   demo_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
# A real Python 3 without site-packages, so without Debian's numpy.
cat > "$shim/python3" <<'SH'
#!/bin/sh
exec /usr/bin/python3 -S "$@"
SH
chmod +x "$shim/python3"
export PATH="$shim:$PATH"
if [[ "$(command -v python3)" != "$shim/python3" ]] || python3 -c 'import numpy' 2> /dev/null; then
  echo "FAILED: the PATH's first python3 should be the numpy-less shim"
  exit 1
fi
out=$build/demo_test.out
set +e
"$src/scripts/demo.sh" --quick --build-dir "$build" > "$out" 2>&1
status=$?
set -e
tail -n 40 "$out"
if ((status != 0)); then
  echo "FAILED: scripts/demo.sh --quick exited $status (the whole output: $out)"
  exit 1
fi
for step in "== gnnrt selfcheck" "ranks against 1: max |difference|" "== kernel benchmark" \
  "== collective benchmark" "halo p2p"; do
  if ! grep -qF -- "$step" "$out"; then
    echo "FAILED: the demo's output lacks '$step'"
    exit 1
  fi
done
echo "demo passed"
