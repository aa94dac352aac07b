// Halo: what a partitioned program's halo ops run on. One rank holds a
// share of a vertex-cut graph: its local vertices (rows), some of them also
// held by other ranks. A halo exchange combines the partial rows of every
// shared vertex over its replicas, so each replica ends with the same row.
//
//   sparse  (default) collectives::HaloExchange over the rank's mirror
//           table: only shared rows travel, each to the ranks sharing it.
//   dense   an all-reduce of the whole global [N, F] matrix with each rank's
//           rows placed at their global ids (PyG's distributed full-graph
//           method): the in-run baseline of bench/scaling.
//
// Every rank must call the same exchanges in the same order (collective).
// Blocking; errors are collectives::CollectiveError naming the rank.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/halo_exchange.h"

namespace gnnrt::runtime {

enum class HaloMode { sparse, dense };
std::string_view name(HaloMode mode);

class Halo {
 public:
  // global_id [rows]: each local row's global vertex id in [0, num_global).
  Halo(collectives::Communicator comm, const collectives::MirrorTable& mirrors,
       std::vector<int64_t> global_id, int64_t num_global, HaloMode mode);

  // rows [rows, features] in place: the sum (max) over each vertex's replicas.
  template <typename T>
  void sum(std::span<T> rows, int64_t features);
  template <typename T>
  void max(std::span<T> rows, int64_t features);
  // collectives::HaloExchange::start_keyed's max/min.
  template <typename T>
  void keyed(std::span<T> values, std::span<int64_t> keys, int64_t features, bool max);

  int64_t rows() const { return static_cast<int64_t>(global_id_.size()); }
  HaloMode mode() const { return mode_; }
  int ranks() const { return comm_.size(); }
  int peers() const { return static_cast<int>(exchange_->peers().size()); }
  // Bytes this rank has handed to MPI for its exchanges so far: the sparse
  // exchange's posted messages, or the dense mode's all-reduced buffers.
  double bytes_sent() const;

 private:
  collectives::Communicator comm_;
  std::unique_ptr<collectives::HaloExchange> exchange_;
  std::vector<int64_t> global_id_;
  int64_t num_global_;
  HaloMode mode_;
  // Dense mode: the global matrix (and the keyed exchange's codes and
  // keys), kept between calls: a fresh buffer would be paged in (zeroed by
  // the kernel) on every exchange.
  std::vector<std::byte> dense_;
  uint64_t dense_bytes_ = 0;  // all-reduced by the dense mode
  template <typename T>
  std::span<T> dense_buffer(std::size_t count, std::size_t offset_bytes = 0);
};

}  // namespace gnnrt::runtime
