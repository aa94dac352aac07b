#!/usr/bin/env bash
# Sets up the machine, builds gnnrt and runs every test, twice: a Release
# build (build/) and an AddressSanitizer + UBSan build (build-sanitize/).
#   scripts/test.sh                  both builds
#   scripts/test.sh --no-sanitize    the Release build only
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
[[ "${1:-}" == "--no-sanitize" ]] && sanitize=0

scripts/setup.sh
jobs=$(nproc)

run_suite() {  # build-dir, extra cmake args...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja "$@"
  cmake --build "$dir" -j "$jobs"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" --timeout 600)
}

echo "== Release build and tests"
run_suite build -DCMAKE_BUILD_TYPE=Release

if ((sanitize)); then
  echo "== address,undefined sanitizer build and tests"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # -O1 -g1 (ASan's usual level, line tables only) and no benchmarks: the
  # sanitizer build compiles about three times slower than Release. A unity
  # build (8 files a translation unit; the files that cannot join one say
  # so in their CMakeLists.txt): 8.5 instead of 14.5 minutes on 2 cores.
  run_suite build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGNNRT_SANITIZE=address,undefined \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DGNNRT_BUILD_BENCHMARKS=OFF \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8
fi
