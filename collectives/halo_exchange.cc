#include "collectives/halo_exchange.h"

#include <xxhash.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <fmt/format.h>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "collectives/call_check.h"
#include "collectives/error.h"
#include "collectives/work_state.h"

namespace gnnrt::collectives {

void MirrorTable::add(int64_t row, int64_t global, std::span<const int32_t> sharing_ranks) {
  local_row.push_back(row);
  global_id.push_back(global);
  ranks.insert(ranks.end(), sharing_ranks.begin(), sharing_ranks.end());
  offset.push_back(static_cast<int64_t>(ranks.size()));
}

namespace {

// The first problem with this rank's own table, or "".
std::string check_table(const MirrorTable& m, int64_t rows, int p, int me) {
  const std::string where = fmt::format("rank {}: halo exchange: ", me);
  if (rows < 0) return where + fmt::format("rows = {} is negative", rows);
  const std::size_t n = m.local_row.size();
  if (m.global_id.size() != n || m.offset.size() != n + 1 || m.offset.front() != 0 ||
      m.offset.back() != static_cast<int64_t>(m.ranks.size())) {
    return where + fmt::format("mirror table arrays disagree: {} local rows, {} global ids, {} "
                               "offsets (expected {}), {} ranks",
                               n, m.global_id.size(), m.offset.size(), n + 1, m.ranks.size());
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (m.local_row[i] < 0 || m.local_row[i] >= rows) {
      return where + fmt::format("mirror {}: local row {} is outside [0, {})", i, m.local_row[i], rows);
    }
    if (m.global_id[i] < 0) return where + fmt::format("mirror {}: global id {} is negative", i, m.global_id[i]);
    if (m.offset[i + 1] < m.offset[i]) return where + fmt::format("mirror {}: offsets decrease", i);
    for (int64_t k = m.offset[i]; k < m.offset[i + 1]; ++k) {
      const int32_t q = m.ranks[k];
      if (q < 0 || q >= p || q == me) {
        return where + fmt::format("mirror {} (global {}): sharing rank {} is not another rank "
                                   "in [0, {})", i, m.global_id[i], q, p);
      }
      for (int64_t j = m.offset[i]; j < k; ++j) {
        if (m.ranks[j] == q) return where + fmt::format("mirror {}: rank {} listed twice", i, q);
      }
    }
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (auto* key : {&m.local_row, &m.global_id}) {
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return (*key)[a] < (*key)[b]; });
    for (std::size_t i = 1; i < n; ++i) {
      if ((*key)[order[i]] == (*key)[order[i - 1]]) {
        return where + fmt::format("mirrors {} and {} have the same {} {}", order[i - 1], order[i],
                                   key == &m.local_row ? "local row" : "global id", (*key)[order[i]]);
      }
    }
  }
  return "";
}

// Every rank learns whether any rank found a problem; all of them throw.
void agree(Communicator& comm, const std::string& problem) {
  std::vector<int32_t> bad(comm.size(), 0);
  bad[comm.rank()] = problem.empty() ? 0 : 1;
  comm.allreduce<int32_t>(bad, ReduceOp::sum, Algorithm::native);
  if (!problem.empty()) throw CollectiveError(problem);
  for (int q = 0; q < comm.size(); ++q) {
    if (bad[q]) {
      throw CollectiveError(fmt::format("rank {}: halo exchange: rank {} reported a bad mirror "
                                        "table (see its error)", comm.rank(), q));
    }
  }
}

}  // namespace

HaloExchange::HaloExchange(Communicator comm, const MirrorTable& m, int64_t rows,
                           HaloTransport transport)
    : comm_(std::move(comm)), rows_(rows), transport_(transport) {
  const int p = comm_.size(), me = comm_.rank();
  agree(comm_, check_table(m, rows, p, me));

  // Per peer: the shared (global id, local row, mirror) in global-id order.
  struct Shared {
    int64_t global, row;
    std::size_t mirror;
    bool operator<(const Shared& o) const { return global < o.global; }
  };
  std::vector<std::vector<Shared>> shared(p);
  std::vector<std::vector<int32_t>> holders(m.size());  // every rank holding mirror i, sorted
  for (std::size_t i = 0; i < m.size(); ++i) {
    holders[i].assign(m.ranks.begin() + m.offset[i], m.ranks.begin() + m.offset[i + 1]);
    holders[i].push_back(me);
    std::sort(holders[i].begin(), holders[i].end());
    for (int64_t k = m.offset[i]; k < m.offset[i + 1]; ++k) {
      shared[m.ranks[k]].push_back({m.global_id[i], m.local_row[i], i});
    }
  }
  for (auto& list : shared) std::sort(list.begin(), list.end());

  // Both sides of each pair must list the same rows with the same holders:
  // compare counts and a hash of (global id, holder ranks) per row. (With
  // holders in the hash, a row one rank shares with {1, 2} while rank 2
  // does not list rank 1 is caught too.)
  std::vector<int64_t> mine(2 * p), theirs(2 * p);
  for (int q = 0; q < p; ++q) {
    std::vector<int64_t> words;
    for (const auto& s : shared[q]) {
      words.push_back(s.global);
      words.push_back(static_cast<int64_t>(holders[s.mirror].size()));
      words.insert(words.end(), holders[s.mirror].begin(), holders[s.mirror].end());
    }
    mine[2 * q] = static_cast<int64_t>(shared[q].size());
    mine[2 * q + 1] =
        static_cast<int64_t>(XXH3_64bits(words.data(), words.size() * sizeof(int64_t)));
  }
  const std::vector<std::size_t> two(p, 2);
  comm_.alltoallv_async<int64_t>(mine, two, theirs, two, Algorithm::native).wait();
  std::string problem;
  for (int q = 0; q < p && problem.empty(); ++q) {
    if (mine[2 * q] != theirs[2 * q]) {
      problem = fmt::format("rank {}: halo exchange: this rank lists {} rows shared with rank {}, "
                            "but rank {} lists {} rows shared with rank {}",
                            me, mine[2 * q], q, q, theirs[2 * q], me);
    } else if (mine[2 * q + 1] != theirs[2 * q + 1]) {
      problem = fmt::format("rank {}: halo exchange: ranks {} and {} share {} rows but list "
                            "different global ids or different holders for them",
                            me, me, q, mine[2 * q]);
    }
  }
  agree(comm_, problem);

  for (int q = 0; q < p; ++q) {
    if (shared[q].empty()) continue;
    peers_.push_back(q);
    for (const auto& s : shared[q]) staged_row_.push_back(s.row);
    staged_offset_.push_back(staged_row_.size());
  }

  // Contributions of each mirror row, in rank order.
  std::vector<std::size_t> mirror_order(m.size());
  std::iota(mirror_order.begin(), mirror_order.end(), std::size_t{0});
  std::sort(mirror_order.begin(), mirror_order.end(),
            [&](auto a, auto b) { return m.local_row[a] < m.local_row[b]; });
  for (std::size_t i : mirror_order) {
    if (m.offset[i + 1] == m.offset[i]) continue;
    reduce_row_.push_back(m.local_row[i]);
    for (int32_t q : holders[i]) {
      int64_t slot = -1;
      if (q != me) {
        const std::size_t k = std::lower_bound(peers_.begin(), peers_.end(), q) - peers_.begin();
        const auto& list = shared[q];
        const auto at = std::lower_bound(list.begin(), list.end(), Shared{m.global_id[i], 0, 0});
        slot = static_cast<int64_t>(staged_offset_[k] + (at - list.begin()));
      }
      contribution_rank_.push_back(q);
      contribution_slot_.push_back(slot);
    }
    contribution_offset_.push_back(contribution_rank_.size());
  }

  if (transport_ == HaloTransport::neighbor) {
    const int degree = static_cast<int>(peers_.size());
    check_mpi(MPI_Dist_graph_create_adjacent(comm_.impl().user, degree, peers_.data(), MPI_UNWEIGHTED,
                                             degree, peers_.data(), MPI_UNWEIGHTED, MPI_INFO_NULL,
                                             0, &graph_),
              "MPI_Dist_graph_create_adjacent");
    check_mpi(MPI_Comm_set_errhandler(graph_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
}

HaloExchange::~HaloExchange() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (graph_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&graph_);
}

struct HaloPlanAccess {
  // The keyed max/min: each staged row is F values then F keys.
  template <typename T>
  static detail::Task keyed(detail::Transfers& t, detail::Scratch& scratch, const HaloExchange& plan,
                            T* values, int64_t* keys, int64_t features, bool max);

  template <typename T>
  static detail::Task exchange(detail::Transfers& t, detail::Scratch& scratch,
                               const HaloExchange& plan, T* data, int64_t features, ReduceOp op,
                               int32_t* winner) {
    const std::size_t row_bytes = static_cast<std::size_t>(features) * sizeof(T);
    const std::size_t staged = plan.staged_row_.size();
    std::byte* out = scratch.get(staged * row_bytes);
    std::byte* in = scratch.get(staged * row_bytes);
    auto* base = reinterpret_cast<std::byte*>(data);
    for (std::size_t s = 0; s < staged; ++s) {
      std::memcpy(out + s * row_bytes, base + plan.staged_row_[s] * row_bytes, row_bytes);
    }
    const std::size_t peers = plan.peers_.size();
    if (plan.transport_ == HaloTransport::neighbor) {
      std::vector<int> counts(peers), displs(peers);
      for (std::size_t k = 0; k < peers; ++k) {
        const std::size_t bytes = (plan.staged_offset_[k + 1] - plan.staged_offset_[k]) * row_bytes;
        const std::size_t offset = plan.staged_offset_[k] * row_bytes;
        if (bytes > INT_MAX || offset > INT_MAX) {
          throw CollectiveError("halo exchange (neighbor): a peer's block exceeds MPI's int count");
        }
        counts[k] = static_cast<int>(bytes);
        displs[k] = static_cast<int>(offset);
        plan.bytes_posted_ += bytes;
      }
      MPI_Request request;
      check_mpi(MPI_Ineighbor_alltoallv(out, counts.data(), displs.data(), MPI_BYTE, in,
                                        counts.data(), displs.data(), MPI_BYTE, plan.graph_, &request),
                "MPI_Ineighbor_alltoallv");
      co_await t.wait(t.adopt(request, -1));
    } else {
      for (std::size_t k = 0; k < peers; ++k) {
        const std::size_t offset = plan.staged_offset_[k] * row_bytes;
        const std::size_t bytes = (plan.staged_offset_[k + 1] - plan.staged_offset_[k]) * row_bytes;
        t.irecv(plan.peers_[k], in + offset, bytes);
        t.isend(plan.peers_[k], out + offset, bytes);
        plan.bytes_posted_ += bytes;
      }
      co_await t.wait_all();
    }

    // Combine in rank order into a row of scratch, then write it back.
    const int me = t.rank();
    if (winner != nullptr) std::fill(winner, winner + plan.rows_ * features, me);
    auto* acc = reinterpret_cast<T*>(scratch.get(row_bytes));
    const ElementType type = element_type_v<T>;
    auto contribution = [&](std::size_t c, T* row) {
      const int64_t slot = plan.contribution_slot_[c];
      return slot < 0 ? static_cast<const T*>(row) : reinterpret_cast<const T*>(in + slot * row_bytes);
    };
    for (std::size_t i = 0; i < plan.reduce_row_.size(); ++i) {
      T* row = data + plan.reduce_row_[i] * features;
      const std::size_t first = plan.contribution_offset_[i], end = plan.contribution_offset_[i + 1];
      if (op != ReduceOp::maxloc &&
          (plan.contribution_slot_[first] < 0 || plan.contribution_slot_[first + 1] < 0)) {
        // This rank's row is one of the first two: combine them straight
        // into the row (element by element, so reading it is safe), then
        // fold in the rest, which are all received rows. Same order, same
        // bits as the general path below, two row copies fewer.
        reduce(op, type, row, contribution(first, row), contribution(first + 1, row), features);
        for (std::size_t c = first + 2; c < end; ++c) {
          reduce_into(op, type, row, contribution(c, row), features);
        }
        continue;
      }
      int32_t* row_winner = winner != nullptr ? winner + plan.reduce_row_[i] * features : nullptr;
      for (std::size_t c = plan.contribution_offset_[i]; c < plan.contribution_offset_[i + 1]; ++c) {
        const int64_t slot = plan.contribution_slot_[c];
        const T* x = slot < 0 ? row : reinterpret_cast<const T*>(in + slot * row_bytes);
        const int32_t rank = plan.contribution_rank_[c];
        if (c == plan.contribution_offset_[i]) {
          std::copy(x, x + features, acc);
          if (row_winner != nullptr) std::fill(row_winner, row_winner + features, rank);
        } else if (op == ReduceOp::maxloc) {
          for (int64_t f = 0; f < features; ++f) {
            if (x[f] > acc[f]) {  // strict: on ties the lower rank, seen first, stays
              acc[f] = x[f];
              row_winner[f] = rank;
            }
          }
        } else {
          reduce_into(op, type, acc, x, features);
        }
      }
      std::copy(acc, acc + features, row);
    }
  }
};

namespace {

// Does (v, k) beat (best_v, best_k) under the keyed rule (header)?
template <typename T>
bool beats(T v, int64_t k, T best_v, int64_t best_k, bool max) {
  if (k == HaloExchange::kNoKey) return false;
  if (best_k == HaloExchange::kNoKey) return true;
  const bool v_nan = v != v, best_nan = best_v != best_v;
  if (v_nan != best_nan) return v_nan;
  if (!v_nan && v != best_v) return max ? v > best_v : v < best_v;
  return k < best_k;
}

}  // namespace

template <typename T>
detail::Task HaloPlanAccess::keyed(detail::Transfers& t, detail::Scratch& scratch,
                                   const HaloExchange& plan, T* values, int64_t* keys,
                                   int64_t features, bool max) {
  // Each staged row: F keys, then F values, padded to 8 bytes so that every
  // row's keys stay aligned.
  const std::size_t key_bytes = static_cast<std::size_t>(features) * sizeof(int64_t);
  const std::size_t value_bytes = static_cast<std::size_t>(features) * sizeof(T);
  const std::size_t row_bytes = HaloExchange::keyed_row_bytes(features, sizeof(T));
  const std::size_t staged = plan.staged_row_.size();
  std::byte* out = scratch.get(staged * row_bytes);
  std::byte* in = scratch.get(staged * row_bytes);
  for (std::size_t s = 0; s < staged; ++s) {
    const int64_t row = plan.staged_row_[s];
    std::memcpy(out + s * row_bytes, keys + row * features, key_bytes);
    std::memcpy(out + s * row_bytes + key_bytes, values + row * features, value_bytes);
  }
  for (std::size_t k = 0; k < plan.peers_.size(); ++k) {
    const std::size_t offset = plan.staged_offset_[k] * row_bytes;
    const std::size_t bytes = (plan.staged_offset_[k + 1] - plan.staged_offset_[k]) * row_bytes;
    t.irecv(plan.peers_[k], in + offset, bytes);
    t.isend(plan.peers_[k], out + offset, bytes);
    plan.bytes_posted_ += bytes;
  }
  co_await t.wait_all();
  // The rule is a total order, so folding the received rows into this
  // rank's row in any order gives every replica the same winner.
  for (std::size_t i = 0; i < plan.reduce_row_.size(); ++i) {
    T* v = values + plan.reduce_row_[i] * features;
    int64_t* k = keys + plan.reduce_row_[i] * features;
    for (std::size_t c = plan.contribution_offset_[i]; c < plan.contribution_offset_[i + 1]; ++c) {
      const int64_t slot = plan.contribution_slot_[c];
      if (slot < 0) continue;
      const auto* rk = reinterpret_cast<const int64_t*>(in + slot * row_bytes);
      const auto* rv = reinterpret_cast<const T*>(in + slot * row_bytes + key_bytes);
      for (int64_t f = 0; f < features; ++f) {
        if (beats(rv[f], rk[f], v[f], k[f], max)) {
          v[f] = rv[f];
          k[f] = rk[f];
        }
      }
    }
  }
}

template <typename T>
detail::Task keyed_exchange(detail::Transfers& t, detail::Scratch& scratch, const HaloExchange& plan,
                            T* values, int64_t* keys, int64_t features, bool max) {
  return HaloPlanAccess::keyed<T>(t, scratch, plan, values, keys, features, max);
}

template <typename T>
Work HaloExchange::start_keyed(std::span<T> values, std::span<int64_t> keys, int64_t features,
                               ReduceOp op) {
  const int me = comm_.rank();
  if (features < 0) {
    throw CollectiveError(fmt::format("rank {}: halo exchange: features = {} is negative", me, features));
  }
  const std::size_t expected = static_cast<std::size_t>(rows_) * static_cast<std::size_t>(features);
  if (values.size() != expected || keys.size() != expected) {
    throw CollectiveError(fmt::format("rank {}: keyed halo exchange: values have {} and keys {} "
                                      "elements, expected rows * features = {} * {}",
                                      me, values.size(), keys.size(), rows_, features));
  }
  if (op != ReduceOp::max && op != ReduceOp::min) {
    throw CollectiveError(fmt::format("rank {}: keyed halo exchange: {} is not max or min", me, name(op)));
  }
  if (comm_.options().check_calls) {
    detail::CallFingerprint fp;
    fp.op = detail::CallFingerprint::kKeyedHalo;
    fp.type = static_cast<int64_t>(element_type_v<T>.dtype) * 2;
    fp.reduce = static_cast<int64_t>(op);
    fp.count = features;
    detail::agree_on_call(comm_.impl(), fp, nullptr);
  }
  const auto& impl = comm_.shared_impl();
  return detail::launch_task(
      impl,
      fmt::format("halo exchange({} with keys, {} rows x {} features of {}, {} peers)", name(op),
                  rows_sent(), features, name(element_type_v<T>), peers_.size()),
      impl->internal, [&](detail::Transfers& t, detail::Scratch& scratch) {
        return keyed_exchange<T>(t, scratch, *this, values.data(), keys.data(), features,
                                 op == ReduceOp::max);
      });
}

template <typename T>
Work HaloExchange::start(std::span<T> data, int64_t features, ReduceOp op, std::span<int32_t> winner) {
  detail::CallFingerprint fp;
  fp.op = detail::CallFingerprint::kHalo;
  fp.type = static_cast<int64_t>(element_type_v<T>.dtype) * 2;
  fp.reduce = static_cast<int64_t>(op);
  fp.count = features;
  std::exception_ptr local;
  try {
    check_start<T>(data.size(), features, op, winner.size());
  } catch (...) {
    local = std::current_exception();
  }
  if (comm_.options().check_calls) {
    detail::agree_on_call(comm_.impl(), fp, local);
  } else if (local) {
    std::rethrow_exception(local);
  }
  const auto& impl = comm_.shared_impl();
  return detail::launch_task(
      impl,
      fmt::format("halo exchange({}, {} rows x {} features of {}, {} peers)", name(op),
                  rows_sent(), features, name(element_type_v<T>), peers_.size()),
      impl->internal, [&](detail::Transfers& t, detail::Scratch& scratch) {
        return HaloPlanAccess::exchange<T>(t, scratch, *this, data.data(), features, op,
                                           op == ReduceOp::maxloc ? winner.data() : nullptr);
      });
}

template <typename T>
void HaloExchange::check_start(std::size_t data_size, int64_t features, ReduceOp op,
                               std::size_t winner_size) const {
  const int me = comm_.rank();
  if (features < 0) {
    throw CollectiveError(fmt::format("rank {}: halo exchange: features = {} is negative", me, features));
  }
  const std::size_t expected = static_cast<std::size_t>(rows_) * static_cast<std::size_t>(features);
  if (data_size != expected) {
    throw CollectiveError(fmt::format("rank {}: halo exchange: data has {} elements, expected "
                                      "rows * features = {} * {}", me, data_size, rows_, features));
  }
  if (op == ReduceOp::maxloc && winner_size != expected) {
    throw CollectiveError(fmt::format("rank {}: halo exchange: maxloc needs winner with {} "
                                      "elements, got {}", me, expected, winner_size));
  }
  if (op != ReduceOp::maxloc && winner_size != 0) {
    throw CollectiveError(fmt::format("rank {}: halo exchange: winner is only filled by maxloc", me));
  }
}

template Work HaloExchange::start<float>(std::span<float>, int64_t, ReduceOp, std::span<int32_t>);
template Work HaloExchange::start<double>(std::span<double>, int64_t, ReduceOp, std::span<int32_t>);
template void HaloExchange::check_start<float>(std::size_t, int64_t, ReduceOp, std::size_t) const;
template void HaloExchange::check_start<double>(std::size_t, int64_t, ReduceOp, std::size_t) const;
template Work HaloExchange::start_keyed<float>(std::span<float>, std::span<int64_t>, int64_t, ReduceOp);
template Work HaloExchange::start_keyed<double>(std::span<double>, std::span<int64_t>, int64_t, ReduceOp);

}  // namespace gnnrt::collectives
