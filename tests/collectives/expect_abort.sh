#!/usr/bin/env bash
# Runs a command that must fail: passes only if it exits with a status other
# than 0 and its output (stdout and stderr) matches an extended regex, so a
# deadline test passes neither on a clean exit nor on a crash that says
# nothing.
#   expect_abort.sh REGEX COMMAND...
set -uo pipefail
regex=$1
shift
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
if [[ $status -eq 0 ]]; then
  echo "expect_abort: the command exited 0; it had to fail" >&2
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "expect_abort: exit status $status, but no line matches: $regex" >&2
  exit 1
fi
echo "expect_abort: exit status $status with the expected diagnostic"
