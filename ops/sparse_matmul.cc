#include "ops/sparse_matmul.h"

#include <omp.h>

#include <algorithm>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/segment_reduce.h"
#include "ops/vector_math.h"

namespace gnnrt::ops {
namespace {

template <typename I>
void check_sizes(std::string_view op, const Adjacency<I>& x, std::size_t values_size, int64_t m,
                 std::size_t b_size, std::size_t out_size, std::string_view out_name) {
  expect_non_negative(op, "m", m);
  expect_size(op, "values", values_size, x.num_edges(), "E (stored values of X)");
  expect_size(op, "b", b_size, x.num_src_nodes() * m, "K*M");
  expect_size(op, out_name, out_size, x.num_dst_nodes() * m, "N*M");
}

// out [cols, rows] = in [rows, cols] transposed, eight output rows at a
// time per thread, in 8 x 8 blocks (the rest element by element): element
// by element, each a load and a store, it was a quarter of GAT Cora's
// first-layer product on one thread (docs/kernels.md).
template <typename T>
void transpose(const T* in, int64_t rows, int64_t cols, T* out) {
  const int64_t full_rows = rows / 8 * 8;
#pragma omp parallel for schedule(static) if (rows * cols > detail::kParallelWork)
  for (int64_t c0 = 0; c0 < cols; c0 += 8) {
    const int64_t c1 = std::min(cols, c0 + 8);
    int64_t r = 0;
    if (c1 - c0 == 8) {
      for (; r < full_rows; r += 8) {
        detail::transpose_block8(in + r * cols + c0, cols, out + c0 * rows + r, rows);
      }
    }
    for (int64_t c = c0; c < c1; ++c) {
      for (int64_t q = r; q < rows; ++q) out[c * rows + q] = in[q * cols + c];
    }
  }
}

// op(b) as [K, M] rows: b itself, or b [M, K] transposed into the workspace
// (checked to be K * M, or empty when b is not transposed).
template <typename T>
const T* rows_of_b(std::string_view op, std::string_view name, std::span<const T> b, int64_t k,
                   int64_t m, bool trans_b, std::span<T> workspace) {
  expect_size(op, name, workspace.size(), trans_b ? k * m : 0, trans_b ? "K*M" : "0");
  if (!trans_b) return b.data();
  transpose(b.data(), m, k, workspace.data());
  return workspace.data();
}

// out [N, M] = X bt: out[r] = the sum over row r's stored entries of value *
// row col of bt, a weighted aggregation (ops/segment_reduce.h) with the
// values as weights.
template <typename T, typename I>
detail::SegmentReduce<T, I> product_walk(const Adjacency<I>& x, const T* values, const T* bt,
                                         int64_t m, T* out) {
  return {.csr = &x.by_dst,
          .source = x.by_dst.col().data(),
          .x = bt,
          .features = m,
          .x_rows = x.num_src_nodes(),
          .weight = values,
          .out = out};
}

// Row k of Xᵀ G: the rows of G that column k of X touches, in ascending row
// order; stored as row k of grad_b, or as its column k (trans_b).
template <typename T, typename I>
detail::SegmentReduce<T, I> gradient_walk(const Adjacency<I>& x, const T* values, const T* g,
                                          int64_t m, bool trans_b, T* grad_b) {
  return {.csr = &x.by_src,
          .source = x.by_src.col().data(),
          .x = g,
          .features = m,
          .x_rows = x.num_dst_nodes(),
          .weight = values,
          .out = grad_b,
          .transposed_out = trans_b};
}

}  // namespace

template <typename T, typename I>
void sparse_matmul_forward(const Adjacency<I>& x, std::span<const T> values, std::span<const T> b,
                           int64_t m, bool trans_b, std::span<T> workspace, std::span<T> out) {
  constexpr std::string_view op = "sparse_matmul";
  check_sizes(op, x, values.size(), m, b.size(), out.size(), "out");
  const T* bt = rows_of_b(op, "workspace", b, x.num_src_nodes(), m, trans_b, workspace);
  detail::segment_reduce<T, I>(Reduce::kSum, product_walk(x, values.data(), bt, m, out.data()));
}

template <typename T, typename I>
void sparse_matmul_forward_pair(const Adjacency<I>& x, std::span<const T> values,
                                std::span<const T> b, std::span<const T> b2, int64_t m,
                                bool trans_b, std::span<T> workspace, std::span<T> workspace2,
                                std::span<T> out, std::span<T> out2) {
  constexpr std::string_view op = "sparse_matmul (pair)";
  check_sizes(op, x, values.size(), m, b.size(), out.size(), "out");
  expect_size(op, "b2", b2.size(), static_cast<int64_t>(b.size()), "len(b)");
  expect_size(op, "out2", out2.size(), static_cast<int64_t>(out.size()), "len(out)");
  const int64_t K = x.num_src_nodes();
  const T* bt = rows_of_b(op, "workspace", b, K, m, trans_b, workspace);
  const T* bt2 = rows_of_b(op, "workspace2", b2, K, m, trans_b, workspace2);
  detail::SegmentReduce<T, I> a = product_walk(x, values.data(), bt, m, out.data());
  a.x2 = bt2;
  a.out2 = out2.data();
  if (detail::segment_reduce_pair(a)) return;
  detail::segment_reduce<T, I>(Reduce::kSum, product_walk(x, values.data(), bt, m, out.data()));
  detail::segment_reduce<T, I>(Reduce::kSum, product_walk(x, values.data(), bt2, m, out2.data()));
}

namespace {

// acc [K, M] = Xᵀ G, X walked by rows; thread t owns the columns whose
// stored values are its share of all of them (by_src's row pointers).
template <typename T, typename I>
void sum_by_rows(const Adjacency<I>& x, const T* values, const T* g, int64_t m, T* acc) {
  const Csr<I>& rows = x.by_dst;
  const int64_t n = rows.num_rows(), K = x.num_src_nodes();
  const int64_t* rp = rows.rowptr().data();
  const I* col = rows.col().data();
  const I* entry = rows.edge().data();
  const int64_t* column_start = x.by_src.rowptr().data();
  const int64_t E = x.num_edges();
#pragma omp parallel if (E * m > detail::kParallelWork)
  {
    const int threads = omp_get_num_threads(), t = omp_get_thread_num();
    // Columns [k0, k1): the first column whose values start at or after
    // this thread's share of E.
    const auto first_column = [&](int i) {
      const int64_t target = E * i / threads;
      return static_cast<int64_t>(std::lower_bound(column_start, column_start + K, target) -
                                  column_start);
    };
    const int64_t k0 = t == 0 ? 0 : first_column(t);
    const int64_t k1 = t == threads - 1 ? K : first_column(t + 1);
    std::fill(acc + k0 * m, acc + k1 * m, T(0));
    for (int64_t r = 0; r < n; ++r) {
      const T* __restrict gr = g + r * m;
      for (int64_t q = rp[r]; q < rp[r + 1]; ++q) {
        const int64_t k = col[q];
        if (k < k0 || k >= k1) continue;
        const T c = values[entry[q]];
        T* __restrict a = acc + k * m;
#pragma omp simd
        for (int64_t f = 0; f < m; ++f) a[f] += c * gr[f];
      }
    }
  }
}

}  // namespace

bool sparse_matmul_backward_b_by_rows(int64_t n, int64_t m, std::size_t item_bytes) {
  // G [n, m] in bytes: rows of m * item_bytes one-byte items.
  return m >= detail::kWideBlockCols &&
         !detail::fits_in_cache<std::byte>(n, m * static_cast<int64_t>(item_bytes));
}

int64_t sparse_matmul_backward_b_workspace(int64_t n, int64_t k, int64_t m, bool trans_b,
                                           std::size_t item_bytes) {
  return trans_b && sparse_matmul_backward_b_by_rows(n, m, item_bytes) ? k * m : 0;
}

template <typename T, typename I>
void sparse_matmul_backward_b(const Adjacency<I>& x, std::span<const T> values,
                              std::span<const T> grad_out, int64_t m, bool trans_b,
                              std::span<T> workspace, std::span<T> grad_b) {
  constexpr std::string_view op = "sparse_matmul_backward_b";
  check_sizes(op, x, values.size(), m, grad_b.size(), grad_out.size(), "grad_out");
  const int64_t n = x.num_dst_nodes(), K = x.num_src_nodes();
  const int64_t need = sparse_matmul_backward_b_workspace(n, K, m, trans_b, sizeof(T));
  expect_size(op, "workspace", workspace.size(), need, need > 0 ? "K*M (walked by rows)" : "0");
  if (sparse_matmul_backward_b_by_rows(n, m, sizeof(T))) {
    T* acc = trans_b ? workspace.data() : grad_b.data();
    sum_by_rows(x, values.data(), grad_out.data(), m, acc);
    if (trans_b) transpose(acc, K, m, grad_b.data());  // grad_b [M, K] = acc [K, M]ᵀ
    return;
  }
  detail::segment_reduce<T, I>(Reduce::kSum, gradient_walk(x, values.data(), grad_out.data(), m,
                                                           trans_b, grad_b.data()));
}

template <typename T, typename I>
void sparse_matmul_backward_b_pair(const Adjacency<I>& x, std::span<const T> values,
                                   std::span<const T> grad_out, std::span<const T> grad_out2,
                                   int64_t m, bool trans_b, std::span<T> workspace,
                                   std::span<T> workspace2, std::span<T> grad_b,
                                   std::span<T> grad_b2) {
  constexpr std::string_view op = "sparse_matmul_backward_b (pair)";
  check_sizes(op, x, values.size(), m, grad_b.size(), grad_out.size(), "grad_out");
  expect_size(op, "grad_out2", grad_out2.size(), static_cast<int64_t>(grad_out.size()),
              "len(grad_out)");
  expect_size(op, "grad_b2", grad_b2.size(), static_cast<int64_t>(grad_b.size()), "len(grad_b)");
  const int64_t n = x.num_dst_nodes();
  if (!sparse_matmul_backward_b_by_rows(n, m, sizeof(T))) {
    expect_size(op, "workspace", workspace.size(), 0, "0");
    expect_size(op, "workspace2", workspace2.size(), 0, "0");
    detail::SegmentReduce<T, I> a =
        gradient_walk(x, values.data(), grad_out.data(), m, trans_b, grad_b.data());
    a.x2 = grad_out2.data();
    a.out2 = grad_b2.data();
    if (detail::segment_reduce_pair(a)) return;
  }
  sparse_matmul_backward_b(x, values, grad_out, m, trans_b, workspace, grad_b);
  sparse_matmul_backward_b(x, values, grad_out2, m, trans_b, workspace2, grad_b2);
}

#define GNNRT_INSTANTIATE(T, I)                                                              \
  template void sparse_matmul_forward<T, I>(const Adjacency<I>&, std::span<const T>,         \
                                            std::span<const T>, int64_t, bool, std::span<T>, \
                                            std::span<T>);                                   \
  template void sparse_matmul_backward_b<T, I>(const Adjacency<I>&, std::span<const T>,      \
                                               std::span<const T>, int64_t, bool,            \
                                               std::span<T>, std::span<T>);          \
  template void sparse_matmul_forward_pair<T, I>(                                            \
      const Adjacency<I>&, std::span<const T>, std::span<const T>, std::span<const T>,       \
      int64_t, bool, std::span<T>, std::span<T>, std::span<T>, std::span<T>);                \
  template void sparse_matmul_backward_b_pair<T, I>(                                         \
      const Adjacency<I>&, std::span<const T>, std::span<const T>, std::span<const T>,       \
      int64_t, bool, std::span<T>, std::span<T>, std::span<T>, std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
