// sparse_matmul: a sparse matrix times a dense one, the first layer of a
// model whose input features are sparse (bag-of-words, TF-IDF):
//   out [N, M] = X · op(B),  X [N, K] sparse, B [K, M] (or [M, K] when trans_b:
//   a torch.nn.Linear weight, out = X Bᵀ)
// and the gradient of B, op(Xᵀ · G). No gradient flows to X (an input).
//
// X's pattern is an Adjacency whose destinations are X's rows and whose
// sources are its columns: stored entry e sits at (dst(e), src(e)) and its
// value is values[e]. by_dst drives the product (one output row per row of
// X), by_src the gradient (one row of Xᵀ G per column of X). Each output row
// is summed by one thread in ascending entry order, so both results are
// bitwise identical for any thread count, without atomics.
//
// Layout (row-major): values [E]; b [K, M] or [M, K]; out and grad_out [N, M];
// grad_b like b. trans_b needs a workspace of K * M elements (B transposed
// once per call, so every stored value meets one contiguous row of B);
// otherwise the workspace is empty. Outputs overwritten. Blocking; OpenMP
// inside. Bad sizes throw OpError naming the argument.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "ops/csr.h"

namespace gnnrt::ops {

template <typename T, typename I>
void sparse_matmul_forward(const Adjacency<I>& x, std::span<const T> values, std::span<const T> b,
                           int64_t m, bool trans_b, std::span<T> workspace, std::span<T> out);

// Two products of one X, out = X · op(b) and out2 = X · op(b2) (b2 of b's
// shape; SAGE's two linear maps of a sparse input): one walk of X reads each
// stored value and its column once for both. Each result has the bits of
// sparse_matmul_forward's (the same products, added in the same order).
// workspace2 is b2's as workspace is b's.
template <typename T, typename I>
void sparse_matmul_forward_pair(const Adjacency<I>& x, std::span<const T> values,
                                std::span<const T> b, std::span<const T> b2, int64_t m,
                                bool trans_b, std::span<T> workspace, std::span<T> workspace2,
                                std::span<T> out, std::span<T> out2);

// The gradient walks X by columns (by_src: row k of Xᵀ G sums the rows of G
// that column k touches, in a register block), unless G is too large for the
// cache and its rows are wide (N * M * sizeof(T) > 1 MiB and M >= 64): then
// that walk reads a row of G from memory for every stored value (PubMed at
// M = 256: 1 GB a step). There X is walked by rows instead: each thread owns
// a range of X's columns and, for every row r in ascending order, adds
// values[e] * G[r] to the accumulator of column col(e), so G is read once
// per thread and the accumulators stay in cache. By rows, column k's sum
// adds its products in X's row order from 0; by columns, in entry order.
// The bits are the same when X's entries are stored row by row (as built
// from a row-major matrix, the trainer's features); otherwise each walk is
// still the same on any thread count. The accumulators are grad_b itself,
// or, with trans_b, a workspace of K * M elements transposed into grad_b at
// the end: sparse_matmul_backward_b_workspace gives the size, 0 when not
// needed. Both take the element size (sizeof(T)), so the runtime's memory
// plan and cost model ask with its dtype.
bool sparse_matmul_backward_b_by_rows(int64_t n, int64_t m, std::size_t item_bytes);
int64_t sparse_matmul_backward_b_workspace(int64_t n, int64_t k, int64_t m, bool trans_b,
                                           std::size_t item_bytes);

template <typename T, typename I>
void sparse_matmul_backward_b(const Adjacency<I>& x, std::span<const T> values,
                              std::span<const T> grad_out, int64_t m, bool trans_b,
                              std::span<T> workspace, std::span<T> grad_b);

// The gradients of the pair above, grad_b = op(Xᵀ G) and grad_b2 = op(Xᵀ
// G2) (G2 of G's shape), in one walk by columns, each with the bits of
// sparse_matmul_backward_b's; where that one walks by rows (wide G out of
// cache), two such walks.
template <typename T, typename I>
void sparse_matmul_backward_b_pair(const Adjacency<I>& x, std::span<const T> values,
                                   std::span<const T> grad_out, std::span<const T> grad_out2,
                                   int64_t m, bool trans_b, std::span<T> workspace,
                                   std::span<T> workspace2, std::span<T> grad_b,
                                   std::span<T> grad_b2);

}  // namespace gnnrt::ops
