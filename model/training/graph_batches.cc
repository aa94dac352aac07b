#include "model/training/graph_batches.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "ops/rng.h"
#include "runtime/builder.h"

namespace gnnrt::model {
namespace {

using runtime::Core;

// Philox streams of the epoch orders: apart from parameter init's (the
// parameter index) and dropout's.
constexpr uint64_t kOrderStream = uint64_t{0x6f72646572} << 24;
// Epochs whose batches size the default ladder.
constexpr int64_t kSampledEpochs = 32;


}  // namespace

Schema schema_of(const BatchDataset& data) {
  Schema s;
  for (const NodeSet& n : data.node_sets) {
    s.node_sets.push_back({n.name, n.width, !n.y.empty(), n.y.classes, n.y.width, n.y.num_classes, n.y.max_label_at});
  }
  for (const EdgeSet& e : data.edge_sets) s.edge_sets.push_back({e.name, e.source, e.destination, e.width});
  s.graph_target = !data.graph_y.empty();
  s.graph_classes = data.graph_y.classes;
  s.graph_target_width = data.graph_y.width;
  s.graph_num_classes = data.graph_y.num_classes;
  s.graph_max_label_at = data.graph_y.max_label_at;
  return s;
}

GraphBatches::GraphBatches(const BatchDataset& data, const proto::Batching& batching, uint64_t seed, int ranks)
    : data_(data), schema_(schema_of(data)), batch_size_(batching.batch_size()) {
  if (batch_size_ < 1) throw std::invalid_argument(fmt::format("job: batching.batch_size = {} must be >= 1", batch_size_));
  make_ladder(batching, seed, ranks);
}

std::vector<int64_t> GraphBatches::sizes(std::span<const int64_t> graphs) const {
  std::vector<int64_t> s(data_.node_sets.size() + data_.edge_sets.size(), 0);
  for (const int64_t g : graphs) {
    size_t i = 0;
    for (const NodeSet& n : data_.node_sets) s[i++] += n.rows_of(g);
    for (const EdgeSet& e : data_.edge_sets) s[i++] += e.edges_of(g);
  }
  return s;
}

bool GraphBatches::fits(const BucketShape& b, const std::vector<int64_t>& s) const {
  const size_t n = data_.node_sets.size();
  for (size_t i = 0; i < n; ++i) {
    if (s[i] > b.node_rows[i] - 1) return false;  // the last row is the sink
  }
  for (size_t e = 0; e < data_.edge_sets.size(); ++e) {
    if (s[n + e] > b.edge_rows[e]) return false;
  }
  return true;
}

void GraphBatches::make_ladder(const proto::Batching& batching, uint64_t seed, int ranks) {
  const bool shuffle = batching.shuffle();
  const size_t n = data_.node_sets.size(), sets = n + data_.edge_sets.size();
  // A rank's share holds at most ceil(batch / ranks) graphs.
  const int64_t most = (std::min(batch_size_, data_.num_graphs) + ranks - 1) / ranks;
  const auto shape_of = [&](const std::vector<int64_t>& caps) {
    BucketShape b;
    for (size_t i = 0; i < n; ++i) b.node_rows.push_back(caps[i] + 1);
    for (size_t e = n; e < sets; ++e) b.edge_rows.push_back(caps[e]);
    b.graph_rows = most + 1;
    return b;
  };
  // The largest graph's sizes, and a full batch of such graphs: every batch
  // fits the top.
  std::vector<int64_t> largest(sets, 0);
  for (int64_t g = 0; g < data_.num_graphs; ++g) {
    const std::vector<int64_t> s = sizes(std::span<const int64_t>(&g, 1));
    for (size_t i = 0; i < sets; ++i) largest[i] = std::max(largest[i], s[i]);
  }
  std::vector<int64_t> top(sets);
  for (size_t i = 0; i < sets; ++i) top[i] = std::max<int64_t>(1, largest[i] * most);

  if (batching.bucket_size() > 0) {
    for (int k = 0; k < batching.bucket_size(); ++k) {
      std::vector<int64_t> caps(sets, -1);
      for (const auto& size : batching.bucket(k).size()) {
        int i = schema_.node_set(size.set());
        if (i < 0 && schema_.edge_set(size.set()) >= 0) i = static_cast<int>(n) + schema_.edge_set(size.set());
        if (i < 0) {
          throw std::invalid_argument(fmt::format("job: batching.bucket[{}]: '{}' is no node set or edge set", k, size.set()));
        }
        if (size.rows() < 1) throw std::invalid_argument(fmt::format("job: batching.bucket[{}]: rows of '{}' must be >= 1", k, size.set()));
        caps[static_cast<size_t>(i)] = size.rows();
      }
      for (size_t i = 0; i < sets; ++i) {
        if (caps[i] < 0) {
          const std::string& name = i < n ? schema_.node_sets[i].name : schema_.edge_sets[i - n].name;
          throw std::invalid_argument(fmt::format("job: batching.bucket[{}] gives no rows for '{}'", k, name));
        }
      }
      buckets_.push_back(shape_of(caps));
    }
    // Smallest first: bucket_for takes the first that fits.
    std::stable_sort(buckets_.begin(), buckets_.end(), [](const BucketShape& a, const BucketShape& b) {
      int64_t sa = 0, sb = 0;
      for (int64_t r : a.node_rows) sa += r;
      for (int64_t r : a.edge_rows) sa += r;
      for (int64_t r : b.node_rows) sb += r;
      for (int64_t r : b.edge_rows) sb += r;
      return sa < sb;
    });
  } else {
    std::vector<std::vector<int64_t>> ladder;
    growth_ = batching.growth();
    if (growth_ != 0 && !(growth_ > 1 && growth_ <= 4)) {
      throw std::invalid_argument(fmt::format("job: batching.growth = {} must be in (1, 4] (0: derived)", growth_));
    }
    if (growth_ > 0) {
      // From one largest graph up by `growth`.
      for (double f = 1;; f *= growth_) {
        std::vector<int64_t> caps(sets);
        bool at_top = true;
        for (size_t i = 0; i < sets; ++i) {
          caps[i] = std::min(top[i], static_cast<int64_t>(std::ceil(static_cast<double>(std::max<int64_t>(largest[i], 1)) * f)));
          at_top = at_top && caps[i] == top[i];
        }
        if (ladder.empty() || caps != ladder.back()) ladder.push_back(caps);
        if (at_top) break;
      }
    } else {
      // Derived from the sizes of the batches the job's first
      // kSampledEpochs epochs make: for full batches, buckets at the median
      // and at the largest of those sizes (full batches, nearly alike, then
      // pad by half their spread on average); one at the largest last
      // (partial) batch; and the top, for a later batch larger than all.
      // A job uses three or four programs. The ladder does not depend on the
      // epoch count, so changing it compiles nothing.
      growth_ = 0;
      std::vector<std::vector<int64_t>> full(sets);
      std::vector<int64_t> partial(sets, 0);
      const size_t b = static_cast<size_t>(batch_size_);
      for (int64_t epoch = 0; epoch < (shuffle ? kSampledEpochs : 1); ++epoch) {
        const std::vector<int64_t> o = order(seed, epoch, shuffle);
        for (size_t start = 0; start < o.size(); start += b) {
          const size_t count = std::min(b, o.size() - start);
          const auto batch = std::span<const int64_t>(o).subspan(start, count);
          for (int r = 0; r < ranks; ++r) {
            const std::vector<int64_t> s = sizes(share(batch, r, ranks));
            for (size_t i = 0; i < sets; ++i) {
              if (count == b) full[i].push_back(s[i]);
              else partial[i] = std::max(partial[i], s[i]);
            }
          }
        }
      }
      const auto add = [&](const std::vector<int64_t>& caps) {
        std::vector<int64_t> c(sets);
        for (size_t i = 0; i < sets; ++i) c[i] = std::clamp<int64_t>(caps[i], 1, top[i]);
        ladder.push_back(c);
      };
      if (partial[0] > 0) add(partial);
      if (!full[0].empty()) {
        for (const double q : {0.5, 1.0}) {
          std::vector<int64_t> caps(sets);
          for (size_t i = 0; i < sets; ++i) {
            std::vector<int64_t>& v = full[i];
            const auto at = v.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(v.size() - 1));
            std::nth_element(v.begin(), at, v.end());
            caps[i] = *at;
          }
          add(caps);
        }
      }
      std::sort(ladder.begin(), ladder.end());
      ladder.push_back(top);
      // Each bucket at least as large as the one before in every set.
      for (size_t k = 1; k < ladder.size(); ++k) {
        for (size_t i = 0; i < sets; ++i) ladder[k][i] = std::max(ladder[k][i], ladder[k - 1][i]);
      }
      ladder.erase(std::unique(ladder.begin(), ladder.end()), ladder.end());
    }
    for (const auto& caps : ladder) buckets_.push_back(shape_of(caps));
  }
  // Kernels index rows and edges with int32 (the self-loop graph has a
  // bucket's edges plus its rows).
  for (const BucketShape& b : buckets_) {
    for (size_t i = 0; i < n; ++i) {
      int64_t loops = b.node_rows[i];
      for (size_t e = 0; e < data_.edge_sets.size(); ++e) {
        if (data_.edge_sets[e].source == static_cast<int>(i)) loops = std::max(loops, b.node_rows[i] + b.edge_rows[e]);
      }
      if (loops > std::numeric_limits<int32_t>::max()) {
        throw std::invalid_argument(fmt::format("job: a bucket of {} rows of '{}' (with its edges {}) exceeds the "
                                                "2^31 - 1 a core indexes; lower batching.batch_size",
                                                b.node_rows[i], schema_.node_sets[i].name, loops));
      }
    }
  }
  // A graph larger than every bucket is an error now, not mid-epoch.
  for (int64_t g = 0; g < data_.num_graphs; ++g) {
    const std::vector<int64_t> s = sizes(std::span<const int64_t>(&g, 1));
    if (std::none_of(buckets_.begin(), buckets_.end(), [&](const BucketShape& b) { return fits(b, s); })) {
      std::vector<std::string> parts;
      for (size_t i = 0; i < sets; ++i) {
        parts.push_back(fmt::format("{} {}", s[i], i < n ? schema_.node_sets[i].name : schema_.edge_sets[i - n].name));
      }
      throw std::invalid_argument(fmt::format("graph {} ({}) does not fit any bucket", g, fmt::join(parts, ", ")));
    }
  }
}

std::vector<int64_t> GraphBatches::order(uint64_t seed, int64_t epoch, bool shuffle) const {
  std::vector<int64_t> o(static_cast<size_t>(data_.num_graphs));
  for (size_t i = 0; i < o.size(); ++i) o[i] = static_cast<int64_t>(i);
  if (!shuffle) return o;
  // Fisher-Yates with Philox draws keyed by (seed, epoch).
  for (size_t i = o.size(); i > 1; --i) {
    const ops::RngWords r = ops::philox(seed, kOrderStream + static_cast<uint64_t>(epoch), {i, 0, 0, 0});
    const auto j = static_cast<size_t>(ops::unit(r[0]) * static_cast<double>(i));
    std::swap(o[i - 1], o[std::min(j, i - 1)]);
  }
  return o;
}

std::span<const int64_t> GraphBatches::share(std::span<const int64_t> batch, int rank, int ranks) {
  const size_t n = batch.size();
  const size_t begin = n * static_cast<size_t>(rank) / static_cast<size_t>(ranks);
  const size_t end = n * static_cast<size_t>(rank + 1) / static_cast<size_t>(ranks);
  return batch.subspan(begin, end - begin);
}

int GraphBatches::bucket_for(std::span<const int64_t> graphs) const {
  const std::vector<int64_t> s = sizes(graphs);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (fits(buckets_[b], s)) return static_cast<int>(b);
  }
  std::vector<std::string> parts;
  for (size_t i = 0; i < s.size(); ++i) {
    const size_t n = data_.node_sets.size();
    parts.push_back(fmt::format("{} {}", s[i], i < n ? schema_.node_sets[i].name : schema_.edge_sets[i - n].name));
  }
  throw std::invalid_argument(fmt::format("a batch of {} graphs ({}) fits no bucket of batching.bucket; add a larger "
                                          "one", graphs.size(), fmt::join(parts, ", ")));
}

void GraphBatches::bind(Core& core, std::span<const int64_t> graphs, std::span<const int64_t> global, int bucket,
                       PaddingStats* stats) const {
  const BucketShape& shape = buckets_.at(static_cast<size_t>(bucket));
  if (static_cast<int64_t>(graphs.size()) > shape.graph_rows - 1) {
    throw std::invalid_argument(fmt::format("a batch of {} graphs exceeds the bucket's {}", graphs.size(), shape.graph_rows - 1));
  }
  // Per node set: where each graph's rows start in the batch, and each row's global id.
  std::vector<std::vector<int64_t>> first(data_.node_sets.size()), global_ids(data_.node_sets.size());
  for (size_t s = 0; s < data_.node_sets.size(); ++s) bind_node_set(core, s, graphs, global, shape, first[s], global_ids[s], stats);
  for (size_t e = 0; e < data_.edge_sets.size(); ++e) bind_edge_set(core, e, graphs, shape, first, global_ids, stats);
  bind_graph_set(core, graphs, global, shape);
}

// Node set s's rows of the graphs: features, mask, targets, dropout keys,
// the global batch's real-row count, the pool and broadcast graphs.
// `first` gets where each graph's rows start, `ids` each row's global id.
void GraphBatches::bind_node_set(Core& core, size_t s, std::span<const int64_t> graphs,
                                 std::span<const int64_t> global, const BucketShape& shape,
                                 std::vector<int64_t>& first, std::vector<int64_t>& ids, PaddingStats* stats) const {
  auto& mem = core.memory();
  const int64_t graph_rows = shape.graph_rows, sink_graph = graph_rows - 1;
  const NodeSet& n = data_.node_sets[s];
  const int64_t rows = shape.node_rows[s];
  Tensor x(DType::kF32, {rows, n.width});
  Tensor mask(DType::kBool, {rows});
  auto xv = x.values<float>();
  auto mv = mask.values<uint8_t>();
  std::vector<int32_t> pool_src(static_cast<size_t>(rows)), pool_dst(static_cast<size_t>(rows), static_cast<int32_t>(sink_graph));
  int64_t at = 0;
  for (size_t k = 0; k < graphs.size(); ++k) {
    const int64_t g = graphs[k];
    first.push_back(at);
    const int64_t count = n.rows_of(g);
    std::copy_n(n.x.begin() + n.ptr[g] * n.width, count * n.width, xv.begin() + at * n.width);
    for (int64_t r = at; r < at + count; ++r) {
      mv[r] = 1;
      pool_dst[r] = static_cast<int32_t>(k);
    }
    at += count;
  }
  for (int64_t r = 0; r < rows; ++r) pool_src[r] = static_cast<int32_t>(r);
  if (stats) {
    stats->real_rows += at;
    stats->padded_rows += rows - 1;
  }
  if (!n.y.empty()) {
    Tensor y = n.y.classes ? Tensor(DType::kI64, {rows}) : Tensor(DType::kF32, {rows, n.y.width});
    int64_t row = 0;
    for (const int64_t g : graphs) {
      if (n.y.classes) {
        std::copy_n(n.y.labels.begin() + n.ptr[g], n.rows_of(g), y.values<int64_t>().begin() + row);
      } else {
        std::copy_n(n.y.values.begin() + n.ptr[g] * n.y.width, n.rows_of(g) * n.y.width,
                    y.values<float>().begin() + row * n.y.width);
      }
      row += n.rows_of(g);
    }
    mem.put(target_name(n.name), std::move(y));
  }
  Tensor real(DType::kI64, {rows});
  for (int64_t r = 0; r < at; ++r) real.values<int64_t>()[r] = 1;
  // Dropout's keys: each row's index in the dataset, the padding's after them.
  ids.resize(static_cast<size_t>(rows));
  for (size_t k = 0; k < graphs.size(); ++k) {
    for (int64_t r = 0; r < n.rows_of(graphs[k]); ++r) ids[first[k] + r] = n.ptr[graphs[k]] + r;
  }
  for (int64_t r = at; r < rows; ++r) ids[r] = n.ptr.back() + r;
  mem.put(global_id_name(n.name), Tensor::from<int64_t>(ids, {rows}));
  mem.put(real_rows_name(n.name), std::move(real));
  mem.put(features_name(n.name), std::move(x));
  mem.put(mask_name(n.name), std::move(mask));
  int64_t global_rows = 0;
  for (const int64_t g : global) global_rows += n.rows_of(g);
  mem.put(runtime::count_name(mask_name(n.name)), Tensor::from<int64_t>(std::vector<int64_t>{global_rows}, {1}));
  core.bind_graph(pool_graph_name(n.name), std::make_shared<const Core::Adjacency>(
                                               Core::Adjacency::build(pool_src, pool_dst, rows, graph_rows)));
  core.bind_graph(broadcast_graph_name(n.name), std::make_shared<const Core::Adjacency>(
                                                    Core::Adjacency::build(pool_dst, pool_src, graph_rows, rows)));
}

// Edge set e's edges of the graphs (their rows as `first` placed them),
// its features and ids, the reversed graph, and the self-loop graph of an
// edge set within one node set.
void GraphBatches::bind_edge_set(Core& core, size_t e, std::span<const int64_t> graphs, const BucketShape& shape,
                                 const std::vector<std::vector<int64_t>>& first,
                                 const std::vector<std::vector<int64_t>>& global_ids, PaddingStats* stats) const {
  auto& mem = core.memory();
  const EdgeSet& es = data_.edge_sets[e];
  const NodeSet& s = data_.node_sets[es.source];
  const NodeSet& t = data_.node_sets[es.destination];
  const int64_t edges = shape.edge_rows[e];
  const auto sink_src = static_cast<int32_t>(shape.node_rows[es.source] - 1);
  const auto sink_dst = static_cast<int32_t>(shape.node_rows[es.destination] - 1);
  std::vector<int32_t> src(static_cast<size_t>(edges), sink_src), dst(static_cast<size_t>(edges), sink_dst);
  std::vector<int64_t> edge_ids(static_cast<size_t>(edges));
  const int64_t total_edges = es.ptr.back();
  Tensor x = es.width > 0 ? Tensor(DType::kF32, {edges, es.width}) : Tensor();
  int64_t at = 0;
  for (size_t k = 0; k < graphs.size(); ++k) {
    const int64_t g = graphs[k];
    const int64_t ds = first[es.source][k] - s.ptr[g], dt = first[es.destination][k] - t.ptr[g];
    for (int64_t i = es.ptr[g]; i < es.ptr[g + 1]; ++i, ++at) {
      src[at] = static_cast<int32_t>(es.src[i] + ds);
      dst[at] = static_cast<int32_t>(es.dst[i] + dt);
      edge_ids[at] = i;
    }
    if (es.width > 0) {
      std::copy_n(es.x.begin() + es.ptr[g] * es.width, es.edges_of(g) * es.width,
                  x.values<float>().begin() + (at - es.edges_of(g)) * es.width);
    }
  }
  if (stats) {
    stats->real_edges += at;
    stats->padded_edges += edges;
  }
  for (int64_t i = at; i < edges; ++i) edge_ids[i] = total_edges + i;
  const int64_t ns = shape.node_rows[es.source], nd = shape.node_rows[es.destination];
  if (es.source == es.destination) bind_self_loops(core, e, shape, src, dst, edge_ids, at, global_ids[es.source]);
  core.bind_graph(es.name, std::make_shared<const Core::Adjacency>(Core::Adjacency::build(src, dst, ns, nd)));
  core.bind_graph(reversed_graph_name(es.name),
                  std::make_shared<const Core::Adjacency>(Core::Adjacency::build(dst, src, nd, ns)));
  if (es.width > 0) mem.put(features_name(es.name), std::move(x));
  mem.put(runtime::edge_id_name(es.name), Tensor::from<int64_t>(edge_ids, {edges}));
}

// Edge set e's graph with self loops (self_loop_graph_name), for an edge
// set within one node set: without its self loops, then one loop a row (padded rows and the
// sink included), the slots left as sink loops: the capacity is
// static (model/modules/modules.h, self_loop_graph). In edge-id order each
// destination's loop follows its other edges, as PyG appends them.
// Global ids: a kept edge its own; the loop of a row the edge set's
// count plus the row's id (padding's after the real rows'); the sink
// loops after those.
void GraphBatches::bind_self_loops(Core& core, size_t e, const BucketShape& shape,
                                   const std::vector<int32_t>& src, const std::vector<int32_t>& dst,
                                   const std::vector<int64_t>& edge_ids, int64_t at,
                                   const std::vector<int64_t>& row_ids) const {
  const EdgeSet& es = data_.edge_sets[e];
  const NodeSet& s = data_.node_sets[es.source];
  const int64_t edges = shape.edge_rows[e];
  const int64_t ns = shape.node_rows[es.source];
  const auto sink_src = static_cast<int32_t>(ns - 1);
  const int64_t total_edges = es.ptr.back();
  std::vector<int32_t> ls, ld;
  std::vector<int64_t> lids;
  ls.reserve(static_cast<size_t>(edges + ns));
  ld.reserve(static_cast<size_t>(edges + ns));
  lids.reserve(static_cast<size_t>(edges + ns));
  for (int64_t i = 0; i < at; ++i) {
    if (src[i] == dst[i]) continue;
    ls.push_back(src[i]);
    ld.push_back(dst[i]);
    lids.push_back(edge_ids[i]);
  }
  for (int64_t r = 0; r < ns; ++r) {
    ls.push_back(static_cast<int32_t>(r));
    ld.push_back(static_cast<int32_t>(r));
    lids.push_back(total_edges + row_ids[r]);
  }
  const int64_t after = total_edges + s.ptr.back() + ns;
  while (static_cast<int64_t>(ls.size()) < edges + ns) {
    lids.push_back(after + static_cast<int64_t>(ls.size()));
    ls.push_back(sink_src);
    ld.push_back(sink_src);
  }
  const std::string loops = self_loop_graph_name(es.name);
  core.bind_graph(loops, std::make_shared<const Core::Adjacency>(Core::Adjacency::build(ls, ld, ns, ns)));
  core.memory().put(runtime::edge_id_name(loops), Tensor::from<int64_t>(lids, {edges + ns}));
}

// The graph set: mask, global ids, the global batch's graph count, targets.
void GraphBatches::bind_graph_set(Core& core, std::span<const int64_t> graphs, std::span<const int64_t> global,
                                  const BucketShape& shape) const {
  auto& mem = core.memory();
  const int64_t graph_rows = shape.graph_rows;
  Tensor graph_mask(DType::kBool, {graph_rows});
  for (size_t k = 0; k < graphs.size(); ++k) graph_mask.values<uint8_t>()[k] = 1;
  mem.put(mask_name(kGraphSet), std::move(graph_mask));
  std::vector<int64_t> graph_ids(static_cast<size_t>(graph_rows));
  for (int64_t k = 0; k < graph_rows; ++k) {
    graph_ids[k] = k < static_cast<int64_t>(graphs.size()) ? graphs[k] : data_.num_graphs + k;
  }
  mem.put(global_id_name(kGraphSet), Tensor::from<int64_t>(graph_ids, {graph_rows}));
  mem.put(runtime::count_name(mask_name(kGraphSet)),
          Tensor::from<int64_t>(std::vector<int64_t>{static_cast<int64_t>(global.size())}, {1}));
  if (!data_.graph_y.empty()) {
    const Targets& t = data_.graph_y;
    Tensor y = t.classes ? Tensor(DType::kI64, {graph_rows}) : Tensor(DType::kF32, {graph_rows, t.width});
    for (size_t k = 0; k < graphs.size(); ++k) {
      const int64_t g = graphs[k];
      if (t.classes) {
        y.values<int64_t>()[k] = t.labels[g];
      } else {
        std::copy_n(t.values.begin() + g * t.width, t.width, y.values<float>().begin() + static_cast<int64_t>(k) * t.width);
      }
    }
    mem.put(target_name(kGraphSet), std::move(y));
  }
}

}  // namespace gnnrt::model
