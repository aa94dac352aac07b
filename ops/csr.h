// Compressed sparse row view of an edge list, grouped by one endpoint: the
// destination for aggregation, or the index of a scatter. Built once per
// graph (O(E + N), a stable counting sort) and reused by every kernel.
// Within a row, edges keep ascending edge id, so a reduction over a row runs
// in one fixed order and its result is bitwise identical for any number of
// threads, without atomics. Immutable after build(); safe to share.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace gnnrt::ops {

template <typename I>
class Csr {
 public:
  // Groups edge e under row row_index[e] in [0, num_rows). col_index, if not
  // empty, is each edge's other endpoint in [0, num_cols), stored permuted.
  // Throws OpError naming `op`, the argument and the first bad position.
  static Csr build(std::span<const I> row_index, int64_t num_rows,
                   std::span<const I> col_index = {}, int64_t num_cols = 0,
                   std::string_view op = "csr", std::string_view row_arg = "index",
                   std::string_view col_arg = "col_index");

  int64_t num_rows() const { return static_cast<int64_t>(rowptr_.size()) - 1; }
  int64_t num_cols() const { return num_cols_; }
  int64_t num_edges() const { return static_cast<int64_t>(edge_.size()); }
  int64_t degree(int64_t row) const { return rowptr_[row + 1] - rowptr_[row]; }

  // Layout: rowptr [num_rows + 1]; the edges of row r sit at positions
  // rowptr[r] .. rowptr[r+1]-1 of edge (their original ids) and col.
  std::span<const int64_t> rowptr() const { return rowptr_; }
  std::span<const I> edge() const { return edge_; }
  std::span<const I> col() const { return col_; }  // empty when built without col_index
  // The row of each edge, in edge-id order (a copy of row_index), for
  // kernels that stream over edges in their original order.
  std::span<const I> row_of_edge() const { return row_of_edge_; }
  // True when the edges were given row by row (edge()[p] == p for every p),
  // as a CSR matrix's stored values are: kernels then read them in place.
  bool edges_in_row_order() const { return edges_in_row_order_; }

 private:
  std::vector<int64_t> rowptr_{0};
  std::vector<I> edge_;
  std::vector<I> col_;
  std::vector<I> row_of_edge_;
  int64_t num_cols_ = 0;
  bool edges_in_row_order_ = true;
};

// The guard of build(): `num_edges` edges must have ids of type I; throws
// OpError naming `op` when they do not (2^31 edges for int32 indices).
template <typename I>
void check_edge_count(int64_t num_edges, std::string_view op);

// Both groupings of a directed edge list (src -> dst): by_dst drives
// aggregation into destinations (col = source), by_src drives the backward
// pass into sources (col = destination).
template <typename I>
struct Adjacency {
  Csr<I> by_dst;
  Csr<I> by_src;

  static Adjacency build(std::span<const I> src, std::span<const I> dst, int64_t num_src_nodes,
                         int64_t num_dst_nodes);
  int64_t num_edges() const { return by_dst.num_edges(); }
  int64_t num_src_nodes() const { return by_src.num_rows(); }
  int64_t num_dst_nodes() const { return by_dst.num_rows(); }
};

}  // namespace gnnrt::ops
