// Edge partitioning (vertex-cut) of a graph over `parts` ranks. Every edge
// goes to exactly one part; a vertex is held by its master part and by every
// part that owns one of its edges (its replicas), and the partial aggregates
// of a vertex held by several parts are combined by the halo all-reduce
// (collectives/halo_exchange.h). Fewer replicas mean fewer halo bytes;
// balanced edge counts mean balanced work.
//
// Methods:
//   random       each edge to a part drawn from (seed, edge id) (Philox)
//   destination  1D: edge (u, v) to the block of v's id (v * parts / N)
//   grid         2D: the parts form an r x c grid (r * c = parts, r the
//                largest divisor <= sqrt(parts)); edge (u, v) goes to
//                (row block of u, column block of v), so a vertex's replicas
//                lie in one row and one column: at most r + c - 1, about
//                2 sqrt(parts) (PowerGraph's grid vertex-cut)
//   hdrf         High-Degree Replicated First, the streaming vertex-cut of
//                Petroni et al. (CIKM 2015): edges in order, each to the part
//                maximising C_REP + lambda * C_BAL, which favours parts that
//                already hold an endpoint, the lower-degree one first (the
//                high-degree vertex gets replicated), and light parts
//   metis        METIS k-way vertex partition of the symmetrised graph
//                (METIS_PartGraphKway, seed = options.seed, two balance
//                constraints per vertex: 1 and its in-degree, so that parts
//                get balanced vertex and edge counts), then edge (u, v) to
//                v's part: edges cut by METIS replicate u
//
// Masters: a vertex's own part under destination and metis; under random and
// hdrf one of its replicas drawn from (seed, vertex); under grid the replica
// with the fewest masters so far (vertices in id order), which balances
// them; an isolated vertex's master is its id block. Deterministic: the same input and options give the
// same partition on every rank and machine.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/job.pb.h"

namespace gnnrt::model {

// The methods are the job's enumeration (job.proto, Partition.Method): one list.
using PartitionMethod = proto::Partition::Method;
// The method's command-line name: "metis" for METIS.
std::string name(PartitionMethod method);
// From a command-line name in any case; throws std::invalid_argument naming
// the accepted methods.
PartitionMethod parse_partition_method(std::string_view text);
// Every method's command-line name, in the enumeration's order.
std::vector<std::string> partition_method_names();

struct PartitionOptions {
  PartitionMethod method = proto::Partition::METIS;
  int parts = 1;
  uint64_t seed = 0;
  double hdrf_lambda = 1.0;  // weight of balance against replication
};

struct PartitionStats {
  double replication_factor = 0;  // mean replicas per vertex (1: no vertex shared)
  double edge_balance = 0;        // largest part's edges / mean edges per part
  double vertex_balance = 0;      // largest part's vertices (rows) / mean
  int64_t shared_vertices = 0;    // vertices held by two or more parts
  // Rows one halo all-reduce sends in all (each replica of a vertex with c
  // replicas sends its row to the c - 1 others): bytes = halo_rows * F * 4
  // for F float32 features.
  int64_t halo_rows = 0;
  // Per part: edges, rows (local vertices), masters, and the rows it sends
  // in one halo exchange.
  std::vector<int64_t> part_edges, part_rows, part_masters, part_halo_rows;
};

struct EdgePartition {
  int parts = 1;
  int64_t num_nodes = 0;
  std::vector<int32_t> edge_part;  // [E]: the part that owns each edge
  std::vector<int32_t> master;     // [N]: the part that owns each vertex
  // The parts holding vertex v, ascending (the master among them):
  // replica_parts[replica_offset[v] .. replica_offset[v + 1]).
  std::vector<int64_t> replica_offset;
  std::vector<int32_t> replica_parts;

  std::span<const int32_t> replicas(int64_t v) const {
    return {replica_parts.data() + replica_offset[v],
            static_cast<std::size_t>(replica_offset[v + 1] - replica_offset[v])};
  }
  PartitionStats stats() const;
};

class PartitionError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Edges src[e] -> dst[e] of a graph with `num_nodes` vertices. Throws
// PartitionError for parts < 1, mismatched lengths or an id outside
// [0, num_nodes) (naming the edge), and METIS's own failures.
EdgePartition partition_edges(int64_t num_nodes, std::span<const int64_t> src,
                              std::span<const int64_t> dst, const PartitionOptions& options);

// A partition given as each edge's part and each vertex's master (e.g. one
// made by hand for a test, or by another tool): the replicas computed.
// Throws PartitionError for a part outside [0, parts) or mismatched lengths.
EdgePartition assemble_partition(int64_t num_nodes, std::span<const int64_t> src,
                                 std::span<const int64_t> dst, int parts,
                                 std::vector<int32_t> edge_part, std::vector<int32_t> master);

}  // namespace gnnrt::model
