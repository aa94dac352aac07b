#include "model/sampling/distributed_neighbors.h"

#include <algorithm>
#include <numeric>

namespace gnnrt::model {

OwnerExchange::OwnerExchange(std::span<const int32_t> nodes, const NodeShard& shard, collectives::Communicator& comm)
    : shard_(shard), comm_(comm) {
  const int ranks = comm.size();
  counts_.assign(static_cast<size_t>(ranks), 0);
  std::vector<int> owner(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    owner[i] = shard.owner_of(nodes[i], ranks);
    ++counts_[static_cast<size_t>(owner[i])];
  }
  std::vector<size_t> at(static_cast<size_t>(ranks), 0);
  std::partial_sum(counts_.begin(), counts_.end() - 1, at.begin() + 1);
  order_.resize(nodes.size());
  std::vector<int32_t> ids(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const size_t k = at[static_cast<size_t>(owner[i])]++;
    order_[k] = static_cast<int64_t>(i);
    ids[k] = nodes[i];
  }
  // The counts first, then the ids.
  std::vector<int64_t> send(counts_.begin(), counts_.end()), recv(static_cast<size_t>(ranks));
  const std::vector<size_t> ones(static_cast<size_t>(ranks), 1);
  comm.alltoallv<int64_t>(send, ones, recv, ones);
  asked_.assign(recv.begin(), recv.end());
  asked_ids_.resize(std::accumulate(asked_.begin(), asked_.end(), size_t{0}));
  comm.alltoallv<int32_t>(ids, counts_, asked_ids_, asked_);
  sent(ones, sizeof(int64_t));
  sent(counts_, sizeof(int32_t));
}

void OwnerExchange::sent(const std::vector<size_t>& counts, size_t element_bytes) {
  for (size_t q = 0; q < counts.size(); ++q) {
    if (static_cast<int>(q) != comm_.rank()) bytes_sent_ += static_cast<int64_t>(counts[q] * element_bytes);
  }
}

DistributedNeighbors::DistributedNeighbors(const NodeShard& shard, collectives::Communicator& comm, int threads)
    : shard_(shard), comm_(comm), local_(shard, threads) {}

void DistributedNeighbors::draw(std::span<const int32_t> nodes, int hop, int fanout, bool replace,
                                const SampleKey& key, Draws& out) {
  OwnerExchange ex(nodes, shard_, comm_);
  local_.draw(ex.asked(), hop, fanout, replace, key, drawn_);
  // Each asked node's count, then the sources, back to the rank that asked.
  std::vector<int32_t> counts(ex.asked().size());
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = static_cast<int32_t>(drawn_.offsets[i + 1] - drawn_.offsets[i]);
  const std::vector<int32_t> got = ex.rows<int32_t>(counts, 1);  // in the list's order
  const size_t ranks = ex.counts().size();
  std::vector<size_t> sources_out(ranks, 0), sources_in(ranks, 0);
  for (size_t q = 0, i = 0; q < ranks; ++q) {
    for (size_t k = 0; k < ex.asked_counts()[q]; ++k, ++i) sources_out[q] += static_cast<size_t>(counts[i]);
  }
  for (size_t q = 0, k = 0; q < ranks; ++q) {
    for (size_t j = 0; j < ex.counts()[q]; ++j, ++k) {
      sources_in[q] += static_cast<size_t>(got[static_cast<size_t>(ex.order()[k])]);
    }
  }
  std::vector<int32_t> sources(std::accumulate(sources_in.begin(), sources_in.end(), size_t{0}));
  comm_.alltoallv<int32_t>(drawn_.neighbors, sources_out, sources, sources_in);
  ex.sent(sources_out, sizeof(int32_t));
  bytes_sent_ += ex.bytes_sent();
  // Back in the list's order: sources arrive rank by rank, node order()[k]'s
  // got[order()[k]] of them.
  out.offsets.assign(nodes.size() + 1, 0);
  for (size_t i = 0; i < nodes.size(); ++i) out.offsets[i + 1] = out.offsets[i] + got[i];
  out.neighbors.resize(sources.size());
  int64_t at = 0;
  for (const int64_t i : ex.order()) {
    const int32_t c = got[static_cast<size_t>(i)];
    std::copy_n(sources.begin() + at, c, out.neighbors.begin() + out.offsets[static_cast<size_t>(i)]);
    at += c;
  }
}

void DistributedNeighbors::fetch(std::span<const int32_t> nodes, std::span<const int32_t> labelled,
                                 std::vector<float>& x, std::vector<int32_t>& y) {
  OwnerExchange rows(nodes, shard_, comm_);
  std::vector<float> answers;
  gather_features(shard_, rows.asked(), answers);
  x = rows.rows<float>(answers, shard_.num_features);
  bytes_sent_ += rows.bytes_sent();
  OwnerExchange labels(labelled, shard_, comm_);
  y = labels.fetch<int32_t>(shard_.y, 1);
  bytes_sent_ += labels.bytes_sent();
}

}  // namespace gnnrt::model
