// Dropout whose mask is a pure function of (seed, step, op id, global row,
// column): Random123's Threefry4x32-20 counter-based generator keyed by
// (seed, op, step) and counted by the element's flat index k = global row *
// cols + column, each draw giving the uniforms of four elements: k = 64 b +
// 16 w + l takes word w of draw 16 b + l (so a block of 64 elements is 16
// draws side by side in a vector register, docs/kernels.md). Any split of
// the rows over cores and any thread count draw the same mask; the forward
// records which elements it kept, and the backward reads that. The op id
// must fit in 32 bits and k in 64.
//
// An element is kept when its uniform draw u in [0, 1) satisfies u >= p; kept
// elements are scaled by 1 / (1 - p). p = 0 copies; p = 1 zeroes.
// Layout: x, out [rows, cols] row-major; global_rows [rows] maps local rows to
// global row ids (empty: row i is global row i). Outputs overwritten (in-place
// allowed). Blocking; OpenMP inside. Bad p or sizes throw OpError.
#pragma once

#include <cstdint>
#include <span>

#include "ops/csr.h"

namespace gnnrt::ops {

struct DropoutKey {
  uint64_t seed = 0;
  uint64_t step = 0;
  uint64_t op = 0;
};

// True if element (global_row, col) of a [*, cols] matrix is kept.
bool dropout_keeps(const DropoutKey& key, double p, uint64_t global_row, uint64_t col,
                   uint64_t cols);

// keep (optional, [rows, cols] bytes or empty): 1 where the element was
// kept, 0 where dropped, for the backward (reading a byte per element
// costs less than drawing the mask again: docs/kernels.md).
template <typename T>
void dropout_forward(const DropoutKey& key, double p, int64_t cols,
                     std::span<const int64_t> global_rows, std::span<const T> x, std::span<T> out,
                     std::span<uint8_t> keep = {});

// grad_x = grad_out * keep / (1 - p), keep the forward's bytes (any non-zero
// byte keeps).
template <typename T>
void dropout_backward(double p, std::span<const uint8_t> keep, std::span<const T> grad_out,
                      std::span<T> grad_x);

// Dropout of a sparse matrix's stored values (sparse input features): the
// entries of row r of `rows` (rowptr, col = column, edge = the entry's index
// in values) draw the dense mask of (global row, column), so stored values
// keep or drop exactly as they would in the dense matrix of `rows`'s
// num_cols() columns, and the zeros stay zero. global_rows [rows] as above (empty: row r is global row r).
template <typename T, typename I>
void sparse_dropout_forward(const DropoutKey& key, double p, const Csr<I>& rows,
                            std::span<const int64_t> global_rows, std::span<const T> values,
                            std::span<T> out);

}  // namespace gnnrt::ops
