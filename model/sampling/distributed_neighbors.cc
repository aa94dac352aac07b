#include "model/sampling/distributed_neighbors.h"

#include <algorithm>
#include <numeric>

namespace gnnrt::model {

DistributedNeighbors::DistributedNeighbors(const NodeShard& shard, collectives::Communicator& comm, int threads)
    : shard_(shard), comm_(comm), local_(shard, threads) {}

// Counts bytes_sent_: the elements of `counts` bound for other ranks.
void DistributedNeighbors::sent(const std::vector<size_t>& counts, size_t element_bytes) {
  for (size_t q = 0; q < counts.size(); ++q) {
    if (static_cast<int>(q) != comm_.rank()) bytes_sent_ += static_cast<int64_t>(counts[q] * element_bytes);
  }
}

DistributedNeighbors::Route DistributedNeighbors::route(std::span<const int32_t> nodes) const {
  const int ranks = comm_.size();
  Route r;
  r.counts.assign(static_cast<size_t>(ranks), 0);
  std::vector<int> owner(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    owner[i] = owner_of(nodes[i], shard_.num_nodes, ranks);
    ++r.counts[static_cast<size_t>(owner[i])];
  }
  std::vector<size_t> at(static_cast<size_t>(ranks), 0);
  std::partial_sum(r.counts.begin(), r.counts.end() - 1, at.begin() + 1);
  r.order.resize(nodes.size());
  r.ids.resize(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const size_t k = at[static_cast<size_t>(owner[i])]++;
    r.order[k] = static_cast<int64_t>(i);
    r.ids[k] = nodes[i];
  }
  return r;
}

std::vector<int32_t> DistributedNeighbors::ask(const Route& r, std::vector<size_t>& asked) {
  const auto ranks = static_cast<size_t>(comm_.size());
  std::vector<int64_t> send(r.counts.begin(), r.counts.end()), recv(ranks);
  const std::vector<size_t> ones(ranks, 1);
  comm_.alltoallv<int64_t>(send, ones, recv, ones);
  asked.assign(recv.begin(), recv.end());
  std::vector<int32_t> ids(std::accumulate(asked.begin(), asked.end(), size_t{0}));
  comm_.alltoallv<int32_t>(r.ids, r.counts, ids, asked);
  sent(ones, sizeof(int64_t));
  sent(r.counts, sizeof(int32_t));
  return ids;
}

void DistributedNeighbors::draw(std::span<const int32_t> nodes, int hop, int fanout, bool replace,
                                const SampleKey& key, Draws& out) {
  const Route r = route(nodes);
  std::vector<size_t> asked;
  const std::vector<int32_t> mine = ask(r, asked);
  local_.draw(mine, hop, fanout, replace, key, drawn_);
  // Each asked node's count, then the sources, back to the rank that asked.
  const size_t ranks = asked.size();
  std::vector<int32_t> counts(mine.size()), got(nodes.size());
  std::vector<size_t> sources_out(ranks, 0), sources_in(ranks, 0);
  for (size_t q = 0, i = 0; q < ranks; ++q) {
    for (size_t k = 0; k < asked[q]; ++k, ++i) {
      counts[i] = static_cast<int32_t>(drawn_.offsets[i + 1] - drawn_.offsets[i]);
      sources_out[q] += static_cast<size_t>(counts[i]);
    }
  }
  comm_.alltoallv<int32_t>(counts, asked, got, r.counts);
  for (size_t q = 0, i = 0; q < ranks; ++q) {
    for (size_t k = 0; k < r.counts[q]; ++k, ++i) sources_in[q] += static_cast<size_t>(got[i]);
  }
  std::vector<int32_t> sources(std::accumulate(sources_in.begin(), sources_in.end(), size_t{0}));
  comm_.alltoallv<int32_t>(drawn_.neighbors, sources_out, sources, sources_in);
  sent(asked, sizeof(int32_t));
  sent(sources_out, sizeof(int32_t));
  // Back in the order asked: node order[k] drew got[k] sources.
  std::vector<int64_t> start(nodes.size() + 1, 0), from(nodes.size());
  for (size_t k = 0; k < nodes.size(); ++k) start[static_cast<size_t>(r.order[k]) + 1] = got[k];
  std::partial_sum(start.begin(), start.end(), start.begin());
  out.offsets.assign(start.begin(), start.end());
  out.neighbors.resize(sources.size());
  int64_t at = 0;
  for (size_t k = 0; k < nodes.size(); ++k) {
    std::copy_n(sources.begin() + at, got[k], out.neighbors.begin() + start[static_cast<size_t>(r.order[k])]);
    at += got[k];
  }
}

void DistributedNeighbors::fetch(std::span<const int32_t> nodes, std::span<const int32_t> labelled,
                                 std::vector<float>& x, std::vector<int32_t>& y) {
  const int64_t f = shard_.num_features;
  const auto ranks = static_cast<size_t>(comm_.size());
  {
    const Route r = route(nodes);
    std::vector<size_t> asked;
    const std::vector<int32_t> mine = ask(r, asked);
    std::vector<float> rows, got(nodes.size() * static_cast<size_t>(f));
    gather_features(shard_, mine, rows);
    std::vector<size_t> out_counts(ranks), in_counts(ranks);
    for (size_t q = 0; q < ranks; ++q) {
      out_counts[q] = asked[q] * static_cast<size_t>(f);
      in_counts[q] = r.counts[q] * static_cast<size_t>(f);
    }
    comm_.alltoallv<float>(rows, out_counts, got, in_counts);
    sent(out_counts, sizeof(float));
    x.resize(got.size());
    for (size_t k = 0; k < nodes.size(); ++k) {
      std::copy_n(got.begin() + static_cast<int64_t>(k) * f, f, x.begin() + r.order[k] * f);
    }
  }
  const Route r = route(labelled);
  std::vector<size_t> asked;
  const std::vector<int32_t> mine = ask(r, asked);
  std::vector<int32_t> labels(mine.size()), got(labelled.size());
  for (size_t i = 0; i < mine.size(); ++i) labels[i] = shard_.y[static_cast<size_t>(mine[i] - shard_.begin)];
  comm_.alltoallv<int32_t>(labels, asked, got, r.counts);
  sent(asked, sizeof(int32_t));
  y.resize(labelled.size());
  for (size_t k = 0; k < labelled.size(); ++k) y[static_cast<size_t>(r.order[k])] = got[k];
}

}  // namespace gnnrt::model
