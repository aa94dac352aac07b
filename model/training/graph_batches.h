// GraphBatches: the mini-batches of a batch dataset as the core takes them.
// An epoch's order is drawn from (seed, epoch); each batch of graphs is
// padded up to the smallest shape bucket that fits every node set and edge
// set, and bound on the core under the names of model/modules/modules.h:
//   "<set>.x" [rows, F], "<set>.mask" [rows] (real rows), "<set>.y"
//   (targets, when the set has them), "graph.mask", "graph.y" [graph rows],
//   "<edges>.x" (edge features), and the graphs "<edges>",
//   "<edges>.reversed", "<set>.pool" (rows -> graphs), "<set>.broadcast".
// Padded nodes have no edges and pool into the sink graph (the last graph
// row); padded edges join the sink rows (the last row of their node sets).
// So no real row, output or gradient depends on the padding.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/data/batch_dataset.h"
#include "model/job.pb.h"
#include "model/modules/modules.h"
#include "runtime/core.h"

namespace gnnrt::model {

Schema schema_of(const BatchDataset& data);

struct PaddingStats {
  int64_t real_rows = 0, padded_rows = 0;    // node rows over all node sets, sinks excluded
  int64_t real_edges = 0, padded_edges = 0;
  double rows_percent() const { return padded_rows ? 100.0 * (padded_rows - real_rows) / padded_rows : 0; }
  double edges_percent() const { return padded_edges ? 100.0 * (padded_edges - real_edges) / padded_edges : 0; }
};

class GraphBatches {
 public:
  // Throws std::invalid_argument for a bad batching section (naming the
  // field), and when a graph does not fit the largest bucket.
  // The default ladder is sized by the batches of the orders `seed` draws
  // (on `ranks` ranks: by each rank's share of them).
  GraphBatches(const BatchDataset& data, const proto::Batching& batching, uint64_t seed, int ranks = 1);

  const Schema& schema() const { return schema_; }
  const std::vector<BucketShape>& buckets() const { return buckets_; }
  int64_t batch_size() const { return batch_size_; }
  int64_t batches_per_epoch() const { return (data_.num_graphs + batch_size_ - 1) / batch_size_; }
  double growth() const { return growth_; }  // 0: the derived ladder

  // The graphs of an epoch in order: a permutation drawn from (seed, epoch),
  // or 0..G-1 without shuffling.
  std::vector<int64_t> order(uint64_t seed, int64_t epoch, bool shuffle) const;

  // Rank `rank`'s share of a global batch: a contiguous run of its graphs,
  // the ranks' shares differing by at most one graph (possibly none).
  static std::span<const int64_t> share(std::span<const int64_t> batch, int rank, int ranks);

  // The smallest bucket that fits these graphs.
  int bucket_for(std::span<const int64_t> graphs) const;

  // Pads the graphs to bucket `bucket` and binds them on the core; adds the
  // real and padded sizes to `stats`. `global` is the whole global batch
  // (`graphs` a share of it): its real rows per mask are bound as
  // "<mask>.count", the divisor of a data-parallel program's losses.
  void bind(runtime::Core& core, std::span<const int64_t> graphs, std::span<const int64_t> global, int bucket,
            PaddingStats* stats) const;

 private:
  std::vector<int64_t> sizes(std::span<const int64_t> graphs) const;  // node sets, then edge sets
  bool fits(const BucketShape& b, const std::vector<int64_t>& sizes) const;
  // bind()'s parts (graph_batches.cc).
  void bind_node_set(runtime::Core& core, size_t s, std::span<const int64_t> graphs, std::span<const int64_t> global,
                     const BucketShape& shape, std::vector<int64_t>& first, std::vector<int64_t>& ids,
                     PaddingStats* stats) const;
  void bind_edge_set(runtime::Core& core, size_t e, std::span<const int64_t> graphs, const BucketShape& shape,
                     const std::vector<std::vector<int64_t>>& first,
                     const std::vector<std::vector<int64_t>>& global_ids, PaddingStats* stats) const;
  void bind_self_loops(runtime::Core& core, size_t e, const BucketShape& shape,
                       const std::vector<int32_t>& src, const std::vector<int32_t>& dst,
                       const std::vector<int64_t>& edge_ids, int64_t at, const std::vector<int64_t>& row_ids) const;
  void bind_graph_set(runtime::Core& core, std::span<const int64_t> graphs, std::span<const int64_t> global,
                      const BucketShape& shape) const;
  void make_ladder(const proto::Batching& batching, uint64_t seed, int ranks);

  const BatchDataset& data_;
  Schema schema_;
  int64_t batch_size_;
  double growth_ = 0;
  std::vector<BucketShape> buckets_;
};

}  // namespace gnnrt::model
