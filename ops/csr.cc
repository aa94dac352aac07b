#include "ops/csr.h"

#include <limits>
#include <string>

#include "ops/error.h"

namespace gnnrt::ops {

template <typename I>
void check_edge_count(int64_t num_edges, std::string_view op) {
  if (num_edges > std::numeric_limits<I>::max()) {
    throw OpError(op, std::to_string(num_edges) + " edges do not fit the index type");
  }
}

template <typename I>
Csr<I> Csr<I>::build(std::span<const I> row_index, int64_t num_rows,
                     std::span<const I> col_index, int64_t num_cols, std::string_view op,
                     std::string_view row_arg, std::string_view col_arg) {
  expect_non_negative(op, "number of rows", num_rows);
  expect_non_negative(op, "number of columns", num_cols);
  expect_indices_in_range(op, row_arg, row_index, num_rows);
  const int64_t num_edges = static_cast<int64_t>(row_index.size());
  check_edge_count<I>(num_edges, op);
  if (!col_index.empty()) {
    expect_size(op, col_arg, col_index.size(), num_edges, "len(" + std::string(row_arg) + ")");
    expect_indices_in_range(op, col_arg, col_index, num_cols);
  }

  Csr csr;
  csr.num_cols_ = num_cols;
  csr.rowptr_.assign(num_rows + 1, 0);
  for (const I r : row_index) ++csr.rowptr_[r + 1];
  for (int64_t r = 0; r < num_rows; ++r) csr.rowptr_[r + 1] += csr.rowptr_[r];

  std::vector<int64_t> cursor(csr.rowptr_.begin(), csr.rowptr_.end() - 1);
  csr.row_of_edge_.assign(row_index.begin(), row_index.end());
  csr.edge_.resize(num_edges);
  for (int64_t e = 0; e < num_edges; ++e) csr.edge_[cursor[row_index[e]]++] = static_cast<I>(e);
  for (int64_t p = 0; p < num_edges && csr.edges_in_row_order_; ++p) {
    csr.edges_in_row_order_ = csr.edge_[p] == static_cast<I>(p);
  }
  if (!col_index.empty()) {
    csr.col_.resize(num_edges);
    for (int64_t p = 0; p < num_edges; ++p) csr.col_[p] = col_index[csr.edge_[p]];
  }
  return csr;
}

template <typename I>
Adjacency<I> Adjacency<I>::build(std::span<const I> src, std::span<const I> dst,
                                 int64_t num_src_nodes, int64_t num_dst_nodes) {
  expect_size("adjacency", "dst", dst.size(), static_cast<int64_t>(src.size()), "len(src)");
  return {Csr<I>::build(dst, num_dst_nodes, src, num_src_nodes, "adjacency", "dst", "src"),
          Csr<I>::build(src, num_src_nodes, dst, num_dst_nodes, "adjacency", "src", "dst")};
}

template void check_edge_count<int32_t>(int64_t, std::string_view);
template void check_edge_count<int64_t>(int64_t, std::string_view);
template class Csr<int32_t>;
template class Csr<int64_t>;
template struct Adjacency<int32_t>;
template struct Adjacency<int64_t>;

}  // namespace gnnrt::ops
