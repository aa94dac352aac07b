#include "collectives/call_check.h"

#include <fmt/format.h>
#include <mpi.h>
#include <xxhash.h>

#include <chrono>
#include <map>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/error.h"
#include "collectives/work_state.h"

namespace gnnrt::collectives::detail {
namespace {

constexpr int kWords = 8;  // op, type, reduce, count, root, counts, sequence, failed

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

// Exchanges this rank's words; returns every rank's. Non-blocking and
// polled like any wait: operations in flight keep advancing meanwhile (a
// rank whose peers wait for one of them before their next call must not
// stop serving it), and the deadline applies.
std::vector<int64_t> exchange(CommunicatorImpl& impl, const int64_t (&mine)[kWords],
                              const CallFingerprint& fp) {
  std::vector<int64_t> all(static_cast<size_t>(kWords) * impl.size);
  MPI_Request request;
  check_mpi(MPI_Iallgather(mine, kWords, MPI_INT64_T, all.data(), kWords, MPI_INT64_T, impl.check,
                           &request),
            "MPI_Iallgather (call check)");
  const auto started = std::chrono::steady_clock::now();
  const auto limit = std::chrono::duration<double>(impl.options.timeout_seconds);
  for (unsigned polls = 0;; ++polls) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test (call check)");
    if (done) return all;
    if (!impl.in_flight.empty()) impl.progress_all();
    if ((polls & 63) == 63 && std::chrono::steady_clock::now() - started > limit) {
      deadline_passed(impl, "the check of " + describe(fp), started,
                      "every rank to make its next collective call");
    }
  }
}

CallFingerprint fingerprint_at(const std::vector<int64_t>& all, int rank) {
  const int64_t* w = &all[static_cast<size_t>(rank) * kWords];
  return {w[0], w[1], w[2], w[3], w[4], w[5]};
}

void decide(CommunicatorImpl& impl, const CallFingerprint& fp, std::exception_ptr local,
            const std::string& problem) {
  const int64_t sequence = static_cast<int64_t>(impl.calls++);
  const bool failed = local != nullptr || !problem.empty();
  const int64_t mine[kWords] = {fp.op,     fp.type,  fp.reduce, fp.count, fp.root,
                                fp.counts, sequence, failed ? 1 : 0};
  const std::vector<int64_t> all = exchange(impl, mine, fp);
  std::vector<int> failing;
  for (int q = 0; q < impl.size; ++q) {
    if (all[static_cast<size_t>(q) * kWords + 7] != 0) failing.push_back(q);
  }
  if (local) std::rethrow_exception(local);
  if (!problem.empty()) throw CollectiveError(problem);
  if (!failing.empty()) {
    throw CollectiveError(fmt::format("rank {}: {} (collective #{}): {} failed its checks of this "
                                      "call (see its error)", impl.rank, describe(fp), sequence,
                                      rank_list(failing)));
  }
  // Ranks grouped by what they called.
  std::map<std::vector<int64_t>, std::vector<int>> groups;
  for (int q = 0; q < impl.size; ++q) {
    const auto* w = &all[static_cast<size_t>(q) * kWords];
    groups[std::vector<int64_t>(w, w + 7)].push_back(q);
  }
  if (groups.size() == 1) return;
  std::vector<std::string> parts;
  for (const auto& [words, ranks] : groups) {
    parts.push_back(fmt::format("{} called {} as collective #{}", rank_list(ranks),
                                describe(fingerprint_at(all, ranks.front())), words[6]));
  }
  throw CollectiveError(fmt::format("rank {}: the ranks disagree about a collective call: {}",
                                    impl.rank, fmt::join(parts, "; ")));
}

}  // namespace

uint64_t signature(const CallFingerprint& fp) {
  const int64_t fields[] = {fp.op, fp.type, fp.reduce, fp.count, fp.root, fp.counts};
  return XXH3_64bits(fields, sizeof fields);
}

std::string different_calls(int rank, const std::string& call, int other) {
  return fmt::format("rank {}: {}: {} called another collective at this point (another count, element type, "
                     "reduce op or root): the ranks disagree; rerun with --debug (or "
                     "GNNRT_COLLECTIVE_CHECK=1) to see each rank's call",
                     rank, call, other >= 0 ? fmt::format("rank {}", other) : std::string("some rank"));
}

int64_t hash_counts(std::span<const std::size_t> counts) {
  return static_cast<int64_t>(XXH3_64bits(counts.data(), counts.size_bytes()) >> 1);
}

std::string describe(const CallFingerprint& fp) {
  const ElementType type{static_cast<Dtype>(fp.type / 2), fp.type % 2 == 1};
  std::string op;
  if (fp.op == CallFingerprint::kHalo || fp.op == CallFingerprint::kKeyedHalo) {
    op = fp.op == CallFingerprint::kHalo ? "halo exchange" : "keyed halo exchange";
  } else {
    op = std::string(name(static_cast<Collective>(fp.op)));
  }
  std::string text = fmt::format("{}({}, {} {}", op, name(type), fp.count,
                                 fp.op >= CallFingerprint::kHalo ? "features" : "elements");
  const auto c = static_cast<Collective>(fp.op);
  if (fp.op < CallFingerprint::kHalo && c == Collective::barrier) return "barrier()";
  if (fp.op >= CallFingerprint::kHalo || c == Collective::allreduce || c == Collective::reduce_scatter) {
    text += fmt::format(", {}", name(static_cast<ReduceOp>(fp.reduce)));
  }
  if (fp.root >= 0) text += fmt::format(", root {}", fp.root);
  if (fp.counts != 0) text += fmt::format(", counts #{:x}", fp.counts);
  return text + ")";
}

void agree_on_call(CommunicatorImpl& impl, const CallFingerprint& fp, std::exception_ptr local) {
  decide(impl, fp, std::move(local), "");
}

void agree_on_problem(CommunicatorImpl& impl, const CallFingerprint& fp, const std::string& problem) {
  decide(impl, fp, nullptr, problem);
}

}  // namespace gnnrt::collectives::detail
