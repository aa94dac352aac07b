// HaloExchange: the sparse all-reduce of vertex-cut message passing. A rank
// holds a [rows, F] buffer; some of its rows (mirrors) are also held by other
// ranks. One exchange combines every shared row over all the ranks that hold
// it, so that each replica ends with the same reduced row, and moves only the
// shared rows, never the whole matrix.
//
// The mirror table of a rank lists, for each local row that others also
// hold, its global id and the other ranks holding it. The plan (which rows go
// to which peer, in which order) is built once in the constructor and reused
// by every exchange: the rows a pair of ranks share travel in ascending
// global id, so both sides agree on the order without sending ids.
//
// Reduction: sum, max, min, or maxloc (max, plus in `winner` the lowest rank
// holding the max). Every replica combines the contributions in rank order,
// so all replicas get the same bits. Rows nobody else holds are left as they
// are (their winner is this rank).
//
// Contract: the constructor is collective over the communicator and checks
// the tables against each other (every rank throws CollectiveError if any
// rank's table is bad or two ranks disagree about what they share). start()
// is collective too; it returns a Work (work.h: wait/test/deadline); the
// buffer must stay untouched until the Work completes, so computation that
// does not touch it can overlap the exchange. The HaloExchange must outlive
// the Works it started. Not thread-safe.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <climits>
#include <cstdint>
#include <span>
#include <vector>

#include "collectives/communicator.h"

namespace gnnrt::collectives {

struct MirrorTable {
  std::vector<int64_t> local_row;  // [M]
  std::vector<int64_t> global_id;  // [M]
  std::vector<int64_t> offset{0};  // [M + 1]: row i's sharers are ranks[offset[i], offset[i+1])
  std::vector<int32_t> ranks;      // the other ranks holding the row

  void add(int64_t row, int64_t global, std::span<const int32_t> sharing_ranks);
  std::size_t size() const { return local_row.size(); }
};

enum class HaloTransport {
  point_to_point,  // MPI_Isend / MPI_Irecv per peer
  neighbor,        // MPI_Ineighbor_alltoallv on a distributed-graph communicator
};

class HaloExchange {
 public:
  HaloExchange(Communicator comm, const MirrorTable& mirrors, int64_t rows,
               HaloTransport transport = HaloTransport::point_to_point);
  ~HaloExchange();
  HaloExchange(const HaloExchange&) = delete;
  HaloExchange& operator=(const HaloExchange&) = delete;

  // data: [rows, features] row-major. winner: [rows, features] for maxloc,
  // empty otherwise.
  template <typename T>
  Work start(std::span<T> data, int64_t features, ReduceOp op, std::span<int32_t> winner = {});
  template <typename T>
  void run(std::span<T> data, int64_t features, ReduceOp op, std::span<int32_t> winner = {}) {
    start<T>(data, features, op, winner).wait();
  }

  // Max (or min) with a key per element: every replica gets, per element,
  // the contribution with the largest (smallest) value, a NaN before any
  // number, and among equal values (or NaNs) the smallest key; a
  // contribution whose key is kNoKey takes no part. The result is the same
  // whatever the order of combination. values, keys: [rows, features].
  static constexpr int64_t kNoKey = INT64_MAX;
  // Bytes a keyed exchange sends per shared row: the keys, then the values
  // padded to 8 bytes.
  static std::size_t keyed_row_bytes(int64_t features, std::size_t value_size) {
    const auto f = static_cast<std::size_t>(features);
    return f * 8 + (f * value_size + 7) / 8 * 8;
  }
  template <typename T>
  Work start_keyed(std::span<T> values, std::span<int64_t> keys, int64_t features, ReduceOp op);

  const std::vector<int>& peers() const { return peers_; }
  // Rows this rank sends per exchange (each shared row once per peer).
  std::size_t rows_sent() const { return staged_offset_.back(); }
  // Bytes this rank has handed to MPI's sends, over every exchange so far
  // (counted where the messages are posted).
  uint64_t bytes_sent() const { return bytes_posted_; }
  int64_t rows() const { return rows_; }
  HaloTransport transport() const { return transport_; }

 private:
  Communicator comm_;
  int64_t rows_;
  HaloTransport transport_;
  MPI_Comm graph_ = MPI_COMM_NULL;
  std::vector<int> peers_;
  std::vector<std::size_t> staged_offset_{0};  // [peers + 1]: peer k's rows in the staging buffers
  std::vector<int64_t> staged_row_;            // local row of each staged row
  // Per mirror row, its contributions in rank order: the rank and the staged
  // row holding it (-1: this rank's own row).
  std::vector<int64_t> reduce_row_;
  std::vector<std::size_t> contribution_offset_{0};
  std::vector<int32_t> contribution_rank_;
  std::vector<int64_t> contribution_slot_;
  mutable uint64_t bytes_posted_ = 0;  // see bytes_sent()

  template <typename T>
  void check_start(std::size_t data_size, int64_t features, ReduceOp op, std::size_t winner_size) const;

  friend struct HaloPlanAccess;
};

}  // namespace gnnrt::collectives
