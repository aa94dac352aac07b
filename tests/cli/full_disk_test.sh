#!/usr/bin/env bash
# A checkpoint written to a full disk: a small tmpfs (in a mount namespace of
# this test's own, so nothing outlives it) holds two checkpoints, then a
# file fills the rest; the next checkpoint fails with one line naming the
# path and the system's reason, the earlier checkpoints stay byte for byte,
# no temporary file is left, and once space is freed the job resumes from
# them. Root only (mount); exit 77 (skipped) elsewhere, never under CI=true.
#   full_disk_test.sh GNNRT
set -euo pipefail
gnnrt=$1
if [[ $(id -u) -ne 0 ]] || ! unshare -m true 2> /dev/null; then
  if [[ "${CI:-}" == "true" ]]; then
    echo "FAILED: a tmpfs cannot be mounted here (root and unshare needed), and CI must run this test"
    exit 1
  fi
  echo "SKIPPED: a tmpfs cannot be mounted here (root and unshare needed)"
  exit 77
fi
export GNNRT_TEST_GNNRT=$gnnrt
exec unshare -m bash -euo pipefail -c '
  dir=$(mktemp -d)
  trap "umount \"$dir\" 2> /dev/null; rm -rf \"$dir\"" EXIT
  mount -t tmpfs -o size=4m tmpfs "$dir"
  train=("$GNNRT_TEST_GNNRT" train --no-cache --dataset synthetic:nodes=500,classes=4,features=200,seed=3
         --set model.layer[1].out=256 --set checkpoint.dir="$dir" --set checkpoint.every=1)
  "${train[@]}" --set schedule.epochs=2 > "$dir.log1" 2>&1 || { cat "$dir.log1"; exit 1; }
  ls -l "$dir"
  sums=$(cd "$dir" && sha256sum ckpt-*.ckpt)
  [[ $(wc -l <<< "$sums") -eq 2 ]] || { echo "FAILED: expected two checkpoints: $sums"; exit 1; }
  dd if=/dev/zero of="$dir/filler" bs=4k status=none 2> /dev/null || true  # until the disk is full
  set +e
  out=$("${train[@]}" --set schedule.epochs=4 2>&1)
  status=$?
  set -e
  line=$(grep "gnnrt: error:" <<< "$out" || true)
  echo "exit $status: $line"
  fail=0
  [[ $status -eq 1 ]] || { echo "FAILED: exit $status, expected 1"; fail=1; }
  grep -Eq "gnnrt: error: checkpoint $dir/ckpt-00000003\.ckpt\.tmp\.[0-9]+: cannot (write|fsync|close): No space left on device" <<< "$line" ||
    { echo "FAILED: the error does not name the file and the full disk"; fail=1; }
  [[ "$(cd "$dir" && sha256sum ckpt-*.ckpt)" == "$sums" ]] || { echo "FAILED: the earlier checkpoints changed"; fail=1; }
  leftovers=$(ls "$dir" | grep "\.tmp\." || true)
  [[ -z $leftovers ]] || { echo "FAILED: temporary files left: $leftovers"; fail=1; }
  # Space again: the job resumes from the checkpoint of epoch 2.
  rm "$dir/filler"
  out=$("${train[@]}" --set schedule.epochs=4 2>&1) || { echo "FAILED: the resume failed: $out"; fail=1; }
  grep -q "resumed from $dir/ckpt-00000002.ckpt at epoch 2" <<< "$out" || { echo "FAILED: did not resume from epoch 2"; fail=1; }
  ((fail == 0)) && echo "full disk: a clear error, the earlier checkpoints intact, nothing left behind"
  exit $fail
'
