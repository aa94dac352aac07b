#include "model/data/partition.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <metis.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <numeric>

#include "model/job.h"
#include "ops/rng.h"

namespace gnnrt::model {
namespace {

uint64_t draw(uint64_t counter, uint64_t stream, uint64_t seed) {
  return ops::philox(seed, stream, {counter, 0, 0, 0})[0];
}

int block_of(int64_t v, int64_t n, int parts) { return static_cast<int>(v * parts / n); }

void check_input(int64_t n, std::span<const int64_t> src, std::span<const int64_t> dst,
                 const PartitionOptions& options) {
  if (options.parts < 1) {
    throw PartitionError(fmt::format("partition: parts must be >= 1, got {}", options.parts));
  }
  if (n < 0) throw PartitionError(fmt::format("partition: {} vertices", n));
  if (src.size() != dst.size()) {
    throw PartitionError(fmt::format("partition: src has {} edges but dst has {}", src.size(),
                                     dst.size()));
  }
  for (std::size_t e = 0; e < src.size(); ++e) {
    if (src[e] < 0 || src[e] >= n || dst[e] < 0 || dst[e] >= n) {
      throw PartitionError(fmt::format("partition: edge {} ({} -> {}) has a vertex outside [0, {})",
                                       e, src[e], dst[e], n));
    }
  }
  if (!(options.hdrf_lambda >= 0)) {
    throw PartitionError(fmt::format("partition: hdrf lambda must be >= 0, got {}",
                                     options.hdrf_lambda));
  }
}

// Which parts hold each vertex, as bits: parts_words words per vertex.
class Holders {
 public:
  Holders(int64_t n, int parts) : words_((parts + 63) / 64), bits_(n * words_, 0) {}
  bool has(int64_t v, int p) const { return bits_[v * words_ + p / 64] >> (p % 64) & 1; }
  void add(int64_t v, int p) { bits_[v * words_ + p / 64] |= uint64_t{1} << (p % 64); }

 private:
  int64_t words_;
  std::vector<uint64_t> bits_;
};

// Petroni et al., "HDRF: Stream-Based Partitioning for Power-Law Graphs",
// CIKM 2015, section 3: score(p) = C_REP(u, v, p) + lambda * C_BAL(p) with
// g(x, p) = 1 + (1 - theta(x)) if p holds x, theta(x) = delta(x) /
// (delta(u) + delta(v)) over the partial degrees seen so far, and C_BAL(p) =
// (maxsize - |p|) / (epsilon + maxsize - minsize). Ties go to the lowest part.
std::vector<int32_t> hdrf(int64_t n, std::span<const int64_t> src, std::span<const int64_t> dst,
                          int parts, double lambda) {
  constexpr double epsilon = 1.0;
  std::vector<int64_t> degree(n, 0), size(parts, 0);
  Holders holders(n, parts);
  std::vector<int32_t> owner(src.size());
  int64_t max_size = 0, min_size = 0;
  for (std::size_t e = 0; e < src.size(); ++e) {
    const int64_t u = src[e], v = dst[e];
    ++degree[u];
    if (v != u) ++degree[v];
    const double theta_u = double(degree[u]) / double(degree[u] + degree[v]);
    const double theta_v = 1.0 - theta_u;
    int best = 0;
    double best_score = -std::numeric_limits<double>::infinity();
    for (int p = 0; p < parts; ++p) {
      double rep = 0;
      if (holders.has(u, p)) rep += 1.0 + (1.0 - theta_u);
      if (holders.has(v, p)) rep += 1.0 + (1.0 - theta_v);
      const double bal = lambda * double(max_size - size[p]) / (epsilon + double(max_size - min_size));
      if (rep + bal > best_score) {
        best_score = rep + bal;
        best = p;
      }
    }
    owner[e] = best;
    holders.add(u, best);
    holders.add(v, best);
    const int64_t grown = ++size[best];
    max_size = std::max(max_size, grown);
    if (size[best] - 1 == min_size) min_size = *std::min_element(size.begin(), size.end());
  }
  return owner;
}

// METIS k-way on the symmetrised graph without self-loops or duplicates.
std::vector<int32_t> metis_vertex_parts(int64_t n, std::span<const int64_t> src,
                                        std::span<const int64_t> dst, int parts, uint64_t seed) {
  if (n > std::numeric_limits<idx_t>::max()) {
    throw PartitionError(fmt::format("partition: metis: {} vertices exceed METIS's {}-bit ids", n,
                                     8 * sizeof(idx_t)));
  }
  std::vector<std::vector<idx_t>> adjacent(n);
  for (std::size_t e = 0; e < src.size(); ++e) {
    if (src[e] == dst[e]) continue;
    adjacent[src[e]].push_back(static_cast<idx_t>(dst[e]));
    adjacent[dst[e]].push_back(static_cast<idx_t>(src[e]));
  }
  // Two balance constraints per vertex: 1 (the part's vertices: its rows of
  // every dense op, the matmuls) and its in-degree (edges follow their
  // destination's part: the scatter kernels' work). Balancing only their
  // sum let PubMed's two parts differ by 20% in vertices.
  constexpr idx_t kConstraints = 2;
  std::vector<idx_t> weight(static_cast<std::size_t>(n) * kConstraints, 0);
  for (int64_t v = 0; v < n; ++v) weight[static_cast<std::size_t>(v * kConstraints)] = 1;
  for (const int64_t v : dst) ++weight[static_cast<std::size_t>(v * kConstraints + 1)];
  std::vector<idx_t> xadj(n + 1, 0), adjncy;
  for (int64_t v = 0; v < n; ++v) {
    auto& list = adjacent[v];
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    adjncy.insert(adjncy.end(), list.begin(), list.end());
    if (adjncy.size() > static_cast<std::size_t>(std::numeric_limits<idx_t>::max())) {
      throw PartitionError("partition: metis: too many adjacency entries for METIS's ids");
    }
    xadj[v + 1] = static_cast<idx_t>(adjncy.size());
    list = std::vector<idx_t>();  // frees (`= {}` would keep the capacity)
  }
  idx_t nvtxs = static_cast<idx_t>(n), ncon = kConstraints, nparts = parts, objval = 0;
  idx_t options[METIS_NOPTIONS];
  METIS_SetDefaultOptions(options);
  options[METIS_OPTION_SEED] = static_cast<idx_t>(seed % 1000003);
  options[METIS_OPTION_NUMBERING] = 0;
  std::vector<idx_t> part(n, 0);
  if (adjncy.empty()) {  // METIS needs edges; blocks will do
    for (int64_t v = 0; v < n; ++v) part[v] = block_of(v, n, parts);
  } else {
    const int rc = METIS_PartGraphKway(&nvtxs, &ncon, xadj.data(), adjncy.data(), weight.data(),
                                       nullptr, nullptr, &nparts, nullptr, nullptr, options, &objval,
                                       part.data());
    if (rc != METIS_OK) {
      throw PartitionError(fmt::format(
          "partition: METIS_PartGraphKway failed ({}) on {} vertices, {} parts",
          rc == METIS_ERROR_INPUT ? "input error" : rc == METIS_ERROR_MEMORY ? "out of memory"
                                                                              : "error",
          n, parts));
    }
  }
  return {part.begin(), part.end()};
}

}  // namespace

std::string name(PartitionMethod method) { return lower_name(method); }

std::vector<std::string> partition_method_names() {
  return enum_names_lower(proto::Partition::Method_descriptor());
}

PartitionMethod parse_partition_method(std::string_view text) {
  if (const auto* v = enum_value_named(proto::Partition::Method_descriptor(), text)) {
    return static_cast<PartitionMethod>(v->number());
  }
  throw std::invalid_argument(fmt::format("unknown partition method '{}' ({})", text,
                                          fmt::join(partition_method_names(), ", ")));
}

EdgePartition partition_edges(int64_t n, std::span<const int64_t> src, std::span<const int64_t> dst,
                              const PartitionOptions& options) {
  check_input(n, src, dst, options);
  const int parts = options.parts;
  EdgePartition result;
  result.parts = parts;
  result.num_nodes = n;
  result.master.assign(n, 0);
  const std::size_t E = src.size();

  bool master_is_own_part = true;
  bool balance_masters = false;
  switch (options.method) {
    case proto::Partition::RANDOM:
      result.edge_part.resize(E);
      for (std::size_t e = 0; e < E; ++e) {
        result.edge_part[e] = static_cast<int32_t>(draw(e, 0, options.seed) % parts);
      }
      master_is_own_part = false;
      break;
    case proto::Partition::DESTINATION:
      for (int64_t v = 0; v < n; ++v) result.master[v] = block_of(v, n, parts);
      break;
    case proto::Partition::GRID: {
      int rows = 1;
      for (int r = 1; r * r <= parts; ++r) {
        if (parts % r == 0) rows = r;
      }
      const int cols = parts / rows;
      result.edge_part.resize(E);
      for (std::size_t e = 0; e < E; ++e) {
        result.edge_part[e] = block_of(src[e], n, rows) * cols + block_of(dst[e], n, cols);
      }
      master_is_own_part = false;
      balance_masters = true;
      break;
    }
    case proto::Partition::HDRF:
      result.edge_part = hdrf(n, src, dst, parts, options.hdrf_lambda);
      master_is_own_part = false;
      break;
    case proto::Partition::METIS:
      result.master = parts == 1 ? std::vector<int32_t>(n, 0)
                                 : metis_vertex_parts(n, src, dst, parts, options.seed);
      break;
  }
  if (master_is_own_part) {
    result.edge_part.resize(E);
    for (std::size_t e = 0; e < E; ++e) result.edge_part[e] = result.master[dst[e]];
  }

  Holders holders(n, parts);
  for (std::size_t e = 0; e < E; ++e) {
    holders.add(src[e], result.edge_part[e]);
    holders.add(dst[e], result.edge_part[e]);
  }
  if (balance_masters) {
    // The replica with the fewest masters so far, vertices taken in a
    // seeded random order (in id order the low blocks would fill first).
    std::vector<std::pair<uint64_t, int64_t>> order(static_cast<std::size_t>(n));
    for (int64_t v = 0; v < n; ++v) order[static_cast<std::size_t>(v)] = {draw(static_cast<uint64_t>(v), 2, options.seed), v};
    std::sort(order.begin(), order.end());
    std::vector<int64_t> masters(parts, 0);
    for (const auto& [key, v] : order) {
      int best = -1;
      for (int p = 0; p < parts; ++p) {
        if (holders.has(v, p) && (best < 0 || masters[p] < masters[best])) best = p;
      }
      result.master[v] = best >= 0 ? best : block_of(v, n, parts);
      ++masters[result.master[v]];
    }
  }
  result.replica_offset.assign(n + 1, 0);
  for (int64_t v = 0; v < n; ++v) {
    if (!master_is_own_part && !balance_masters) {
      // One of the replicas, drawn; an isolated vertex goes to its block.
      int count = 0;
      for (int p = 0; p < parts; ++p) count += holders.has(v, p);
      if (count == 0) {
        result.master[v] = block_of(v, n, parts);
      } else {
        int pick = static_cast<int>(draw(static_cast<uint64_t>(v), 1, options.seed) % count);
        for (int p = 0; p < parts; ++p) {
          if (holders.has(v, p) && pick-- == 0) {
            result.master[v] = p;
            break;
          }
        }
      }
    }
    holders.add(v, result.master[v]);
    for (int p = 0; p < parts; ++p) {
      if (holders.has(v, p)) result.replica_parts.push_back(p);
    }
    result.replica_offset[v + 1] = static_cast<int64_t>(result.replica_parts.size());
  }
  return result;
}

EdgePartition assemble_partition(int64_t n, std::span<const int64_t> src,
                                 std::span<const int64_t> dst, int parts,
                                 std::vector<int32_t> edge_part, std::vector<int32_t> master) {
  PartitionOptions options;
  options.parts = parts;
  check_input(n, src, dst, options);
  if (edge_part.size() != src.size() || master.size() != static_cast<std::size_t>(n)) {
    throw PartitionError(fmt::format("partition: {} edge parts for {} edges, {} masters for {} vertices",
                                     edge_part.size(), src.size(), master.size(), n));
  }
  for (const auto* v : {&edge_part, &master}) {
    for (std::size_t i = 0; i < v->size(); ++i) {
      if ((*v)[i] < 0 || (*v)[i] >= parts) {
        throw PartitionError(fmt::format("partition: {} {} is in part {}, outside [0, {})",
                                         v == &master ? "vertex" : "edge", i, (*v)[i], parts));
      }
    }
  }
  EdgePartition result;
  result.parts = parts;
  result.num_nodes = n;
  result.edge_part = std::move(edge_part);
  result.master = std::move(master);
  Holders holders(n, parts);
  for (std::size_t e = 0; e < src.size(); ++e) {
    holders.add(src[e], result.edge_part[e]);
    holders.add(dst[e], result.edge_part[e]);
  }
  result.replica_offset.assign(n + 1, 0);
  for (int64_t v = 0; v < n; ++v) {
    holders.add(v, result.master[v]);
    for (int p = 0; p < parts; ++p) {
      if (holders.has(v, p)) result.replica_parts.push_back(p);
    }
    result.replica_offset[v + 1] = static_cast<int64_t>(result.replica_parts.size());
  }
  return result;
}

PartitionStats EdgePartition::stats() const {
  PartitionStats s;
  std::vector<int64_t>& edges = s.part_edges;
  std::vector<int64_t>& rows = s.part_rows;
  edges.assign(parts, 0);
  rows.assign(parts, 0);
  s.part_masters.assign(parts, 0);
  s.part_halo_rows.assign(parts, 0);
  for (int32_t p : edge_part) ++edges[p];
  for (int32_t p : replica_parts) ++rows[p];
  for (int32_t p : master) ++s.part_masters[p];
  for (int64_t v = 0; v < num_nodes; ++v) {
    const int64_t c = replica_offset[v + 1] - replica_offset[v];
    if (c > 1) ++s.shared_vertices;
    s.halo_rows += c * (c - 1);
    for (int32_t p : replicas(v)) s.part_halo_rows[p] += c - 1;
  }
  const auto balance = [&](const std::vector<int64_t>& count) {
    const double total = std::accumulate(count.begin(), count.end(), 0.0);
    return total > 0 ? *std::max_element(count.begin(), count.end()) / (total / parts) : 1.0;
  };
  s.replication_factor = num_nodes > 0 ? double(replica_parts.size()) / double(num_nodes) : 1.0;
  s.edge_balance = balance(edges);
  s.vertex_balance = balance(rows);
  return s;
}

}  // namespace gnnrt::model
