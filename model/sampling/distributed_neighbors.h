// Sampling over node shards on many ranks (docs/sampling.md, "Many
// ranks"): each rank owns a range of nodes with their in-edges and
// features. At each hop a rank sends the frontier nodes to their owners
// (alltoallv), the owners draw with the same keys (so the draws are the
// one-rank draws) and reply with each node's count and sources; once a
// batch, the features and labels of its nodes come from their owners the
// same way. Collective: every rank calls draw() and fetch() alike (a rank
// with no seeds calls them with empty lists).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "collectives/communicator.h"
#include "model/sampling/neighbor_sampler.h"

namespace gnnrt::model {

class DistributedNeighbors final : public NeighborSource {
 public:
  DistributedNeighbors(const NodeShard& shard, collectives::Communicator& comm, int threads = 1);

  void draw(std::span<const int32_t> nodes, int hop, int fanout, bool replace, const SampleKey& key,
            Draws& out) override;

  // The features of `nodes` (rows in order, [n, F]) and the labels of
  // `labelled`, from their owners.
  void fetch(std::span<const int32_t> nodes, std::span<const int32_t> labelled, std::vector<float>& x,
             std::vector<int32_t>& y);

  int64_t bytes_sent() const { return bytes_sent_; }  // this rank's to the others, so far

 private:
  // nodes grouped by owner: `order` (the positions, owner by owner), the
  // ids in that order, and how many go to each rank.
  struct Route {
    std::vector<int64_t> order;
    std::vector<int32_t> ids;
    std::vector<size_t> counts;
  };
  Route route(std::span<const int32_t> nodes) const;
  // Sends the route's ids; returns the ids this rank owns that were asked
  // for, and how many each rank asked.
  std::vector<int32_t> ask(const Route& r, std::vector<size_t>& asked);
  void sent(const std::vector<size_t>& counts, size_t element_bytes);

  const NodeShard& shard_;
  collectives::Communicator& comm_;
  ShardNeighbors local_;
  Draws drawn_;
  int64_t bytes_sent_ = 0;
};

}  // namespace gnnrt::model
