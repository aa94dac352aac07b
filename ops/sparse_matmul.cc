#include "ops/sparse_matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/segment_reduce.h"

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

// out[0, m) = sum over positions p in [begin, end) of values[entry[p]] *
// rows[index[p]][0, m), each element summed in ascending p. The columns go
// in blocks of one cache line whose sums stay in registers for the whole
// walk (a running sum in memory would wait on its own store every entry).
template <typename T, typename I>
inline void sum_scaled_rows(int64_t m, int64_t begin, int64_t end, const I* index, const I* entry,
                            const T* values, const T* rows, T* out) {
  // A GCC vector of one cache line: kept in registers (an array with an
  // `omp simd` loop was spilled to the stack and loaded through gathers).
  using Line [[gnu::vector_size(64)]] = T;
  constexpr int64_t kBlock = 64 / static_cast<int64_t>(sizeof(T));
  int64_t j0 = 0;
  for (; j0 + kBlock <= m; j0 += kBlock) {
    Line acc = {};
    for (int64_t p = begin; p < end; ++p) {
      const T c = values[entry[p]];
      Line r;
      std::memcpy(&r, rows + static_cast<int64_t>(index[p]) * m + j0, sizeof(Line));
      acc += c * r;
    }
    std::memcpy(out + j0, &acc, sizeof(Line));
  }
  if (j0 == m) return;
  std::fill(out + j0, out + m, T(0));
  for (int64_t p = begin; p < end; ++p) {
    const T c = values[entry[p]];
    const T* r = rows + static_cast<int64_t>(index[p]) * m;
    for (int64_t j = j0; j < m; ++j) out[j] += c * r[j];
  }
}

}  // namespace

template <typename T, typename I>
void sparse_matmul_forward(const Adjacency<I>& x, std::span<const T> values, std::span<const T> b,
                           int64_t m, bool trans_b, std::span<T> workspace, std::span<T> out) {
  constexpr std::string_view op = "sparse_matmul";
  check_sizes(op, x, values.size(), m, b.size(), out.size(), "out");
  const int64_t K = x.num_src_nodes();
  expect_size(op, "workspace", workspace.size(), trans_b ? K * m : 0, trans_b ? "K*M" : "0");
  const T* bt = b.data();
  if (trans_b) {  // workspace [K, M] = b [M, K] transposed
    T* w = workspace.data();
#pragma omp parallel for schedule(static) if (K * m > detail::kParallelWork)
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t j = 0; j < m; ++j) w[k * m + j] = b[static_cast<std::size_t>(j * K + k)];
    }
    bt = w;
  }
  const Csr<I>& rows = x.by_dst;
  const int64_t* rp = rows.rowptr().data();
  const I* col = rows.col().data();
  const I* entry = rows.edge().data();
  const T* v = values.data();
  T* o = out.data();
  detail::parallel_rows(rows, m, [&](int64_t r) {
    sum_scaled_rows(m, rp[r], rp[r + 1], col, entry, v, bt, o + r * m);
  });
}

template <typename T, typename I>
void sparse_matmul_backward_b(const Adjacency<I>& x, std::span<const T> values,
                              std::span<const T> grad_out, int64_t m, bool trans_b,
                              std::span<T> grad_b) {
  constexpr std::string_view op = "sparse_matmul_backward_b";
  check_sizes(op, x, values.size(), m, grad_b.size(), grad_out.size(), "grad_out");
  const int64_t K = x.num_src_nodes();
  const Csr<I>& cols = x.by_src;
  const int64_t* cp = cols.rowptr().data();
  const I* row = cols.col().data();
  const I* entry = cols.edge().data();
  const T* v = values.data();
  const T* g = grad_out.data();
  T* gb = grad_b.data();
  // Row k of Xᵀ G: the rows of G that column k of X touches, in ascending
  // row order; written to row k of grad_b, or to its column k (trans_b).
  const bool parallel = (cols.num_edges() + K) * m > detail::kParallelWork;
#pragma omp parallel if (parallel)
  {
    std::vector<T> local(trans_b ? static_cast<std::size_t>(m) : 0);
#pragma omp for schedule(dynamic, detail::kRowChunk)
    for (int64_t k = 0; k < K; ++k) {
      T* acc = trans_b ? local.data() : gb + k * m;
      sum_scaled_rows(m, cp[k], cp[k + 1], row, entry, v, g, acc);
      if (trans_b) {
        for (int64_t j = 0; j < m; ++j) gb[j * K + k] = acc[j];
      }
    }
  }
}

#define GNNRT_INSTANTIATE(T, I)                                                              \
  template void sparse_matmul_forward<T, I>(const Adjacency<I>&, std::span<const T>,         \
                                            std::span<const T>, int64_t, bool, std::span<T>, \
                                            std::span<T>);                                   \
  template void sparse_matmul_backward_b<T, I>(const Adjacency<I>&, std::span<const T>,      \
                                               std::span<const T>, int64_t, bool,            \
                                               std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
