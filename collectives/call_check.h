// Call checks: ranks that disagree about a collective call (another op,
// dtype, count, reduce op, root, per-rank counts, or a call one rank skipped)
// end in an error on every rank that names the call and the ranks, instead
// of a hang or a silently wrong answer (PyTorch c10d's debug-mode
// fingerprint, the cure for pytorch issue 97191).
//
// With CommunicatorOptions::check_calls, every collective (and halo
// exchange) first exchanges a fingerprint of the call with all ranks: one
// blocking MPI_Allgather of 8 int64 on a communicator of its own, under the
// blocking deadline. A rank whose own argument checks failed still takes
// part, so the others learn of it instead of waiting. It costs a collective
// per call (docs/collectives.md has the measured latency), so it is off by
// default and on in debug mode and in the tests. Internal to collectives/.
#pragma once

#include <cstdint>
#include <exception>
#include <span>
#include <string>

namespace gnnrt::collectives::detail {

class CommunicatorImpl;

// What must match across ranks. op: a Collective, or kHalo / kKeyedHalo.
struct CallFingerprint {
  static constexpr int64_t kHalo = 100, kKeyedHalo = 101;
  int64_t op = 0, type = 0, reduce = 0, count = 0, root = -1;
  int64_t counts = 0;  // a hash of per-rank counts (the v variants), else 0
};

// A hash of the whole fingerprint (what every rank's call must agree on).
uint64_t signature(const CallFingerprint& fp);

// The error when ranks made different calls at the same point, found
// without the call checks (a message of another call, or a verified
// signature that differs). Names the call and the rank seen to differ, if
// known (-1: not known).
std::string different_calls(int rank, const std::string& call, int other);

// xxHash of a counts vector, for CallFingerprint::counts.
int64_t hash_counts(std::span<const std::size_t> counts);

// "allreduce(float32, 100 elements, sum)".
std::string describe(const CallFingerprint& fp);

// The agreement (collective over impl's ranks). Every rank returns if all
// fingerprints match and no rank failed its own checks (`local`). Otherwise
// every rank throws: a rank with a local error rethrows it; the others throw
// CollectiveError naming the call, its sequence number and the ranks.
void agree_on_call(CommunicatorImpl& impl, const CallFingerprint& fp, std::exception_ptr local);

// The same with a problem found collectively (alltoallv's counts checked
// against the peers'): "" for none.
void agree_on_problem(CommunicatorImpl& impl, const CallFingerprint& fp, const std::string& problem);

}  // namespace gnnrt::collectives::detail
