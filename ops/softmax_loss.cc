// log_softmax, the masked NLL loss and their fusion cross_entropy, forward
// and backward (declared in ops/dense.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/dense.h"
#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/loops.h"
#include "ops/vector_math.h"

namespace gnnrt::ops {
namespace {

using detail::kParallelElements;

// Rows of a [rows, cols] matrix in blocks of about 1024 elements (at least
// one row), spread over threads when large: fn(first row, end row). A row
// costs a log and a few passes besides its columns (at 7 columns, about
// what 16 elements cost), so rows count for 16 elements each in the threshold.
template <typename Fn>
void row_blocks(int64_t rows, int64_t cols, const Fn& fn) {
  const int64_t block = std::max<int64_t>(1, 1024 / std::max<int64_t>(cols, 1));
  detail::for_blocks(rows, block, rows * (cols + 16) > kParallelElements, fn);
}

// Rows [r0, r1) (at most 1024) of log_softmax_forward, with kCols = cols
// known at compile time (1..16; 0: read from `columns`), so a row's loops
// unroll. A function of its own with __restrict pointers: inside the
// row_blocks lambda the captured pointers lost __restrict, and the row
// loops reloaded through memory (docs/kernels.md).
template <int kCols, typename T>
void log_softmax_rows(const T* __restrict xp, int64_t r0, int64_t r1, int64_t columns,
                      T* __restrict o) {
  const int64_t cols = kCols > 0 ? kCols : columns;
  T block_max[1024], lse[1024];
  for (int64_t r = r0; r < r1; ++r) {  // o = x - the row's maximum
    const T* xr = xp + r * cols;
    T m = xr[0];
    for (int64_t c = 1; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
    block_max[r - r0] = m;
    for (int64_t c = 0; c < cols; ++c) o[r * cols + c] = xr[c] - m;
  }
  for (int64_t i = r0 * cols; i < r1 * cols; ++i) o[i] = detail::exp_nonpositive(o[i]);
  for (int64_t r = r0; r < r1; ++r) {
    T sum = T(0);
    for (int64_t c = 0; c < cols; ++c) sum += o[r * cols + c];
    lse[r - r0] = sum;  // at least 1 (the maximum's term), or NaN
  }
#pragma omp simd
  for (int64_t i = 0; i < r1 - r0; ++i) lse[i] = block_max[i] + detail::log_normal(lse[i]);
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = 0; c < cols; ++c) o[r * cols + c] = xp[r * cols + c] - lse[r - r0];
  }
}

// Rows [r0, r1) of log_softmax_backward, as log_softmax_rows above.
template <int kCols, typename T>
void log_softmax_grad_rows(const T* __restrict o, const T* __restrict g, int64_t r0, int64_t r1,
                           int64_t columns, T* __restrict gx) {
  const int64_t cols = kCols > 0 ? kCols : columns;
  for (int64_t i = r0 * cols; i < r1 * cols; ++i) gx[i] = detail::exp_nonpositive(o[i]);  // softmax
  for (int64_t r = r0; r < r1; ++r) {
    const T* gr = g + r * cols;
    T* gxr = gx + r * cols;
    T sum = T(0);
    for (int64_t c = 0; c < cols; ++c) sum += gr[c];
    for (int64_t c = 0; c < cols; ++c) gxr[c] = gr[c] - gxr[c] * sum;
  }
}

}  // namespace

// Row by row: the maximum, then the exponentials over the whole block at
// once (one flat loop, so they vectorise whatever cols is), then each row's
// sum in column order, and the block's logs in one flat loop
// (detail::log_normal, inline, so it vectorises). A row's maximum is the
// first of its largest values, as std::max_element finds it, but by
// selects instead of branches, which mispredicted about once a row on
// random logits.
template <typename T>
void log_softmax_forward(std::span<const T> x, int64_t rows, int64_t cols, std::span<T> out) {
  constexpr std::string_view op = "log_softmax";
  expect_non_negative(op, "rows", rows);
  expect_non_negative(op, "cols", cols);
  expect_size(op, "x", x.size(), rows * cols, "rows*cols");
  expect_size(op, "out", out.size(), rows * cols, "rows*cols");
  if (cols == 0) return;
  const T* __restrict xp = x.data();
  T* __restrict o = out.data();
  row_blocks(rows, cols, [=](int64_t r0, int64_t r1) {
    const auto fixed = [&]<int kCols>() { log_softmax_rows<kCols>(xp, r0, r1, cols, o); };
    if (!detail::with_constant<1, 16>(cols, fixed)) log_softmax_rows<0>(xp, r0, r1, cols, o);
  });
}

template <typename T>
void log_softmax_backward(std::span<const T> out, std::span<const T> grad_out, int64_t rows,
                          int64_t cols, std::span<T> grad_x) {
  constexpr std::string_view op = "log_softmax_backward";
  expect_non_negative(op, "rows", rows);
  expect_non_negative(op, "cols", cols);
  expect_size(op, "out", out.size(), rows * cols, "rows*cols");
  expect_size(op, "grad_out", grad_out.size(), rows * cols, "rows*cols");
  expect_size(op, "grad_x", grad_x.size(), rows * cols, "rows*cols");
  if (cols == 0) return;
  const T* __restrict o = out.data();
  const T* __restrict g = grad_out.data();
  T* __restrict gx = grad_x.data();
  row_blocks(rows, cols, [=](int64_t r0, int64_t r1) {
    const auto fixed = [&]<int kCols>() { log_softmax_grad_rows<kCols>(o, g, r0, r1, cols, gx); };
    if (!detail::with_constant<1, 16>(cols, fixed)) log_softmax_grad_rows<0>(o, g, r0, r1, cols, gx);
  });
}

namespace {

template <typename I>
void check_nll(std::string_view op, int64_t rows, int64_t classes, std::span<const I> labels,
               std::span<const uint8_t> mask) {
  expect_non_negative(op, "rows", rows);
  expect_non_negative(op, "classes", classes);
  expect_size(op, "labels", labels.size(), rows, "rows");
  if (!mask.empty()) expect_size(op, "mask", mask.size(), rows, "rows");
  for (int64_t i = 0; i < rows; ++i) {
    if (!mask.empty() && !mask[i]) continue;
    if (labels[i] < 0 || labels[i] >= classes) {
      throw OpError(op, "labels[" + std::to_string(i) + "] = " + std::to_string(labels[i]) +
                            " is outside [0, " + std::to_string(classes) + ")");
    }
  }
}

}  // namespace

template <typename T, typename I>
LossSum nll_loss_forward(std::span<const T> log_prob, int64_t rows, int64_t classes,
                         std::span<const I> labels, std::span<const uint8_t> mask) {
  constexpr std::string_view op = "nll_loss";
  check_nll(op, rows, classes, labels, mask);
  expect_size(op, "log_prob", log_prob.size(), rows * classes, "rows*classes");
  LossSum loss;
  for (int64_t i = 0; i < rows; ++i) {
    if (!mask.empty() && !mask[i]) continue;
    loss.sum -= static_cast<double>(log_prob[i * classes + labels[i]]);
    ++loss.count;
  }
  return loss;
}

template <typename T, typename I>
void nll_loss_backward(int64_t rows, int64_t classes, std::span<const I> labels,
                       std::span<const uint8_t> mask, T scale, std::span<T> grad_log_prob) {
  constexpr std::string_view op = "nll_loss_backward";
  check_nll(op, rows, classes, labels, mask);
  expect_size(op, "grad_log_prob", grad_log_prob.size(), rows * classes, "rows*classes");
  std::fill(grad_log_prob.begin(), grad_log_prob.end(), T(0));
  for (int64_t i = 0; i < rows; ++i) {
    if (!mask.empty() && !mask[i]) continue;
    grad_log_prob[i * classes + labels[i]] = -scale;
  }
}

namespace {

// The log softmax of x's selected rows (mask empty: every row), in row
// order, a block at a time: fn(selected, count, logp) with the block's row
// indices and their log softmax [count, cols]. Each block of rows is copied
// together and goes through log_softmax_forward's row function, whose
// results do not depend on the block (per-row maxima and sums, element-wise
// exp and log), so the bits are the full log_softmax's. One row at a time
// paid the width's dispatch and a scalar exp and log per call.
template <typename T, typename Fn>
void log_softmax_selected(const T* x, int64_t rows, int64_t cols, const uint8_t* mask, Fn fn) {
  const int64_t block = std::max<int64_t>(1, 1024 / cols);
  std::vector<T> xs(static_cast<size_t>(block * cols)), logp(xs.size());
  std::vector<int64_t> selected(static_cast<size_t>(block));
  int64_t count = 0;
  const auto flush = [&] {
    const auto fixed = [&]<int kCols>() { log_softmax_rows<kCols>(xs.data(), 0, count, cols, logp.data()); };
    if (!detail::with_constant<1, 16>(cols, fixed)) log_softmax_rows<0>(xs.data(), 0, count, cols, logp.data());
    fn(selected.data(), count, logp.data());
    count = 0;
  };
  for (int64_t r = 0; r < rows; ++r) {
    if (mask != nullptr && !mask[r]) continue;
    std::copy_n(x + r * cols, cols, xs.data() + count * cols);
    selected[static_cast<size_t>(count++)] = r;
    if (count == block) flush();
  }
  if (count > 0) flush();
}

}  // namespace

template <typename T, typename I>
LossSum cross_entropy_forward(std::span<const T> x, int64_t rows, int64_t classes,
                              std::span<const I> labels, std::span<const uint8_t> mask) {
  constexpr std::string_view op = "cross_entropy";
  check_nll(op, rows, classes, labels, mask);
  expect_size(op, "x", x.size(), rows * classes, "rows*classes");
  LossSum loss;
  if (classes == 0) return loss;  // no row can be selected: its label fails the check
  log_softmax_selected(x.data(), rows, classes, mask.empty() ? nullptr : mask.data(),
                       [&](const int64_t* selected, int64_t count, const T* logp) {
                         for (int64_t j = 0; j < count; ++j) {  // in row order, as nll_loss_forward
                           loss.sum -= static_cast<double>(logp[j * classes + labels[selected[j]]]);
                           ++loss.count;
                         }
                       });
  return loss;
}

template <typename T, typename I>
void cross_entropy_backward(std::span<const T> x, int64_t rows, int64_t classes,
                            std::span<const I> labels, std::span<const uint8_t> mask, T scale,
                            std::span<T> grad_x) {
  constexpr std::string_view op = "cross_entropy_backward";
  check_nll(op, rows, classes, labels, mask);
  expect_size(op, "x", x.size(), rows * classes, "rows*classes");
  expect_size(op, "grad_x", grad_x.size(), rows * classes, "rows*classes");
  if (classes == 0) return;
  // Zeros in one fill, then the selected rows' gradients (a train mask is a
  // few hundred rows; writing the other rows' zeros row by row was slower).
  std::fill(grad_x.begin(), grad_x.end(), T(0));
  std::vector<T> g, gx;
  log_softmax_selected(x.data(), rows, classes, mask.empty() ? nullptr : mask.data(),
                       [&](const int64_t* selected, int64_t count, const T* logp) {
                         g.assign(static_cast<size_t>(count * classes), T(0));  // nll_loss_backward's rows
                         gx.resize(g.size());
                         for (int64_t j = 0; j < count; ++j) g[j * classes + labels[selected[j]]] = -scale;
                         const auto fixed = [&]<int kCols>() {
                           log_softmax_grad_rows<kCols>(logp, g.data(), 0, count, classes, gx.data());
                         };
                         if (!detail::with_constant<1, 16>(classes, fixed)) {
                           log_softmax_grad_rows<0>(logp, g.data(), 0, count, classes, gx.data());
                         }
                         for (int64_t j = 0; j < count; ++j) {
                           std::copy_n(gx.data() + j * classes, classes,
                                       grad_x.data() + selected[j] * classes);
                         }
                       });
}

#define GNNRT_INSTANTIATE_T(T)                                                                  \
  template void log_softmax_forward<T>(std::span<const T>, int64_t, int64_t, std::span<T>);     \
  template void log_softmax_backward<T>(std::span<const T>, std::span<const T>, int64_t,        \
                                        int64_t, std::span<T>);
GNNRT_FOR_EACH_VALUE(GNNRT_INSTANTIATE_T)

#define GNNRT_INSTANTIATE_TI(T, I)                                                              \
  template LossSum nll_loss_forward<T, I>(std::span<const T>, int64_t, int64_t,                 \
                                          std::span<const I>, std::span<const uint8_t>);        \
  template void nll_loss_backward<T, I>(int64_t, int64_t, std::span<const I>,                   \
                                        std::span<const uint8_t>, T, std::span<T>);              \
  template LossSum cross_entropy_forward<T, I>(std::span<const T>, int64_t, int64_t,            \
                                               std::span<const I>, std::span<const uint8_t>);   \
  template void cross_entropy_backward<T, I>(std::span<const T>, int64_t, int64_t,              \
                                             std::span<const I>, std::span<const uint8_t>, T,   \
                                             std::span<T>);
GNNRT_FOR_EACH_VALUE_INDEX(GNNRT_INSTANTIATE_TI)

}  // namespace gnnrt::ops
