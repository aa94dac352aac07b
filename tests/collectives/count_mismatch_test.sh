#!/usr/bin/env bash
# Every collective and algorithm, called on 3 ranks in the default mode (no
# call checks) with one element more on the last rank
# (count_mismatch_main.cc): the job must fail with an error naming the call
# within the deadline, and no rank may return a wrong number.
#   count_mismatch_test.sh PROGRAM MPIRUN...
set -uo pipefail
program=$1
shift
failed=0
while read -r op algorithms; do
  for algorithm in $algorithms; do
    # 32767 floats on two ranks, 32768 on the third: on either side of the
    # built-in table's 128 KiB rule at 3 ranks (auto: two algorithms).
    counts="7 70000"
    [[ ${GNNRT_TEST_QUICK:-} == 1 ]] && counts=7  # the sanitizer suite: one size
    [[ $algorithm == auto ]] && counts="7 32767"
    for count in $counts; do
      start=$(date +%s.%N)
      verdicts=$(mktemp -d)
      out=$(timeout -s KILL 60 "$@" -np 3 "$program" "$op" "$algorithm" "$count" "$verdicts" 2>&1 < /dev/null)
      status=$?
      took=$(echo "$(date +%s.%N) - $start" | bc)
      verdict=ok
      if ((status == 0)); then
        verdict="exited 0: every rank returned"
      elif ((status == 137)); then
        verdict="hung past 60 s"
      elif grep -q "WRONG NUMBER" <<<"$out" || cat "$verdicts"/* 2> /dev/null | grep -q "WRONG NUMBER"; then
        verdict="a rank returned a wrong number"
      elif ! grep -Eq "called another collective at this point|MPI_ERR_TRUNCATE|with different counts|the ranks disagree|timed out after" <<<"$out"; then
        verdict="no error naming the disagreement"
      fi
      rm -rf "$verdicts"
      printf '%-15s %-19s %6d elements: exit %3d in %5.1f s: %s\n' "$op" "$algorithm" "$count" "$status" "$took" "$verdict"
      if [[ $verdict != ok ]]; then
        failed=1
        printf '%s\n' "$out" | tail -n 20
      fi
    done
  done
done <<'LIST'
allreduce native ring recursive_doubling rabenseifner auto
allreduce_async native ring recursive_doubling rabenseifner
reduce_scatter native ring rabenseifner
allgather native ring recursive_doubling
broadcast native binomial
alltoallv native pairwise
LIST
exit $failed
