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
#include <stdexcept>
#include <vector>

#include "collectives/communicator.h"
#include "model/sampling/neighbor_sampler.h"

namespace gnnrt::model {

// A list of nodes routed to their owners (the shard's: contiguous ranges or METIS parts).
// Constructing it sends the ids (collective); then rows of any width come
// back from the owners in the list's order, as often as asked (collective
// each: layer-wise inference asks for its halo's rows, or a block of their
// columns, a layer).
class OwnerExchange {
 public:
  OwnerExchange(std::span<const int32_t> nodes, const NodeShard& shard, collectives::Communicator& comm);

  // The ids the ranks asked of this one (all owned), rank by rank, and how
  // many each rank asked.
  const std::vector<int32_t>& asked() const { return asked_ids_; }
  const std::vector<size_t>& asked_counts() const { return asked_; }
  // How many of the list went to each rank, and the list position of the
  // k-th node sent (rank by rank).
  const std::vector<size_t>& counts() const { return counts_; }
  const std::vector<int64_t>& order() const { return order_; }

  // The owners answer `answers` [asked().size(), width] (row i for
  // asked()[i]); returns [list, width] in the list's order.
  template <typename T>
  std::vector<T> rows(std::span<const T> answers, int64_t width) {
    std::vector<T> result(order_.size() * static_cast<size_t>(width));
    rows_into<T>(answers, width, result);
    return result;
  }
  // The owners answer from `owned` [shard.owned(), width] (this rank's
  // rows by local index); `result` [list, width] gets the list's rows.
  template <typename T>
  void fetch_into(std::span<const T> owned, int64_t width, std::span<T> result) {
    fetch_columns_into<T>(owned, width, 0, width, result);
  }
  // Columns [begin, end) of the rows: `result` [list, end - begin].
  template <typename T>
  void fetch_columns_into(std::span<const T> owned, int64_t width, int64_t begin, int64_t end, std::span<T> result) {
    const int64_t w = end - begin;
    std::vector<T> answers(asked_ids_.size() * static_cast<size_t>(w));
    for (size_t i = 0; i < asked_ids_.size(); ++i) {
      std::copy_n(owned.begin() + shard_.local(asked_ids_[i]) * width + begin, w,
                  answers.begin() + static_cast<int64_t>(i) * w);
    }
    rows_into<T>(answers, w, result);
  }
  template <typename T>
  std::vector<T> fetch(std::span<const T> owned, int64_t width) {
    std::vector<T> result(order_.size() * static_cast<size_t>(width));
    fetch_into<T>(owned, width, result);
    return result;
  }

  // rows() into `result` [list, width] (the caller's buffer: no reordered
  // copy beside the received one).
  template <typename T>
  void rows_into(std::span<const T> answers, int64_t width, std::span<T> result) {
    const size_t ranks = counts_.size(), w = static_cast<size_t>(width);
    if (result.size() != order_.size() * w || answers.size() != asked_ids_.size() * w) {
      throw std::logic_error("OwnerExchange::rows_into: buffers of another size than the exchange's");
    }
    std::vector<size_t> out(ranks), in(ranks);
    for (size_t q = 0; q < ranks; ++q) {
      out[q] = asked_[q] * w;
      in[q] = counts_[q] * w;
    }
    std::vector<T> got(order_.size() * w);
    comm_.alltoallv<T>(answers, out, got, in);
    sent(out, sizeof(T));
    for (size_t k = 0; k < order_.size(); ++k) {
      std::copy(got.begin() + static_cast<int64_t>(k * w), got.begin() + static_cast<int64_t>((k + 1) * w),
                result.begin() + order_[k] * width);
    }
  }

  // Bytes this rank sent to the others through this exchange.
  int64_t bytes_sent() const { return bytes_sent_; }
  void sent(const std::vector<size_t>& counts, size_t element_bytes);

 private:
  const NodeShard& shard_;
  collectives::Communicator& comm_;
  std::vector<size_t> counts_, asked_;
  std::vector<int64_t> order_;
  std::vector<int32_t> asked_ids_;
  int64_t bytes_sent_ = 0;
};

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
  const NodeShard& shard_;
  collectives::Communicator& comm_;
  ShardNeighbors local_;
  Draws drawn_;
  int64_t bytes_sent_ = 0;
};

}  // namespace gnnrt::model
