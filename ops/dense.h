// Dense node-wise ops on row-major matrices: matmul (CBLAS, never
// hand-written), bias add, activations, log_softmax and the masked NLL loss.
// Each forward overwrites its output; each backward overwrites its gradient
// (in-place, out == x, is allowed for the elementwise ops). Blocking; OpenMP
// (or OpenBLAS's OpenMP threads) inside; every result is bitwise identical
// for any thread count. Bad sizes throw OpError.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ops/activation.h"

namespace gnnrt::ops {

// c [m, n] = op(a) [m, k] * op(b) [k, n]  (+ c when accumulate).
// a is stored [m, k], or [k, m] when trans_a; b is [k, n], or [n, k] when trans_b.
template <typename T>
void matmul(std::span<const T> a, std::span<const T> b, std::span<T> c, int64_t m, int64_t k,
            int64_t n, bool trans_a = false, bool trans_b = false, bool accumulate = false);

// Per-head products: x [m, H*P] split into H blocks of P columns, w into H
// blocks of rows. head_matmul: out [m, H*Q], block h = x_h w_h with w
// [H*P, Q] (w_h its rows hP ..), or x_h w_hᵀ when trans_w with w [H*Q, P].
// head_outer: out [H*P, Q] stacks a_hᵀ b_h for a [m, H*P], b [m, H*Q]
// (head_matmul's weight gradient). One CBLAS product per head.
template <typename T>
void head_matmul(std::span<const T> x, std::span<const T> w, std::span<T> out, int64_t m, int64_t heads,
                 int64_t p, int64_t q, bool trans_w);
template <typename T>
void head_outer(std::span<const T> a, std::span<const T> b, std::span<T> out, int64_t m, int64_t heads,
                int64_t p, int64_t q);

// out [rows, cols] = x + bias [cols] broadcast over rows.
template <typename T>
void bias_add_forward(std::span<const T> x, std::span<const T> bias, std::span<T> out,
                      int64_t rows, int64_t cols);
// grad_bias [cols] = column sums of grad_out (each column summed in row order).
template <typename T>
void bias_add_backward(std::span<const T> grad_out, int64_t rows, int64_t cols,
                       std::span<T> grad_bias);

// Activations; the backward takes the forward's input x.
template <typename T>
void relu_forward(std::span<const T> x, std::span<T> out);
template <typename T>
void relu_backward(std::span<const T> x, std::span<const T> grad_out, std::span<T> grad_x);
template <typename T>
void leaky_relu_forward(std::span<const T> x, T negative_slope, std::span<T> out);
template <typename T>
void leaky_relu_backward(std::span<const T> x, T negative_slope, std::span<const T> grad_out,
                         std::span<T> grad_x);
template <typename T>
void elu_forward(std::span<const T> x, T alpha, std::span<T> out);
template <typename T>
void elu_backward(std::span<const T> x, T alpha, std::span<const T> grad_out, std::span<T> grad_x);

// Columns: out [rows, Σ widths] = the inputs [rows, widths[i]] side by side
// (torch.cat(dim=1)); slice_cols takes columns begin .. begin + width of x
// [rows, cols]. Each is the other's backward.
template <typename T>
void concat_cols(std::span<const std::span<const T>> inputs, std::span<const int64_t> widths, int64_t rows,
                 std::span<T> out);
template <typename T>
void slice_cols(std::span<const T> x, int64_t rows, int64_t cols, int64_t begin, int64_t width, std::span<T> out);

// Smooth activations, one kernel pair for the family: sigmoid; SiLU
// x·sigmoid(x); GELU with torch's tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). Exponentials of non-positive
// arguments only (ops/vector_math.h), so nothing overflows.
template <typename T>
void activation_forward(Activation kind, std::span<const T> x, std::span<T> out, T bound = T(0));
template <typename T>
void activation_backward(Activation kind, std::span<const T> x, std::span<const T> grad_out, std::span<T> grad_x,
                         T bound = T(0));

// out[i] = x[i] - logsumexp(x[i]) per row; backward takes the forward's output.
template <typename T>
void log_softmax_forward(std::span<const T> x, int64_t rows, int64_t cols, std::span<T> out);
template <typename T>
void log_softmax_backward(std::span<const T> out, std::span<const T> grad_out, int64_t rows,
                          int64_t cols, std::span<T> grad_x);

// Negative log-likelihood over the rows selected by mask (bool per row; empty
// mask = every row): sum = -sum_i log_prob[i, labels[i]], count = rows used.
// The mean loss is sum / count; sums and counts add across ranks. Labels of
// selected rows must lie in [0, classes) (OpError names the first bad row).
struct LossSum {
  double sum = 0;
  int64_t count = 0;
};
template <typename T, typename I>
LossSum nll_loss_forward(std::span<const T> log_prob, int64_t rows, int64_t classes,
                         std::span<const I> labels, std::span<const uint8_t> mask);
// grad_log_prob [rows, classes] = -scale at (i, labels[i]) of selected rows, 0
// elsewhere; scale is d(loss)/d(sum), i.e. 1 / count for the mean loss.
template <typename T, typename I>
void nll_loss_backward(int64_t rows, int64_t classes, std::span<const I> labels,
                       std::span<const uint8_t> mask, T scale, std::span<T> grad_log_prob);

// cross_entropy: nll_loss_forward(log_softmax_forward(x)) with the log
// softmax computed for the selected rows only (a train step's loss reads a
// few hundred of Cora's 2708 rows), each with log_softmax_forward's bits,
// so the loss is the composition's. x [rows, classes].
template <typename T, typename I>
LossSum cross_entropy_forward(std::span<const T> x, int64_t rows, int64_t classes,
                              std::span<const I> labels, std::span<const uint8_t> mask);
// grad_x = log_softmax_backward(log_softmax(x), nll_loss_backward(..., scale)):
// for a selected row the composition's bits (its log softmax recomputed);
// 0 in every other row, as the composition gives for finite x (there it is
// 0 - e^o * 0).
template <typename T, typename I>
void cross_entropy_backward(std::span<const T> x, int64_t rows, int64_t classes,
                            std::span<const I> labels, std::span<const uint8_t> mask, T scale,
                            std::span<T> grad_x);

// The kernel set OpenBLAS picked for this CPU when it loaded
// (openblas_get_corename: "Haswell", "SkylakeX", "Prescott", ...).
std::string blas_kernels();
// OpenBLAS's configuration string (openblas_get_config: version, build
// options, "DYNAMIC_ARCH" when it can switch sets, the set picked).
std::string blas_config();

// A warning when those kernels leave the CPU's AVX2 and FMA idle: some
// OpenBLAS builds pick a set far below the CPU, at a fraction of its SGEMM
// rate (docs/benchmarks.md). OpenBLAS picks before main (it reads
// OPENBLAS_CORETYPE when it loads), so the warning names the setting and
// the user decides.
std::optional<std::string> blas_kernels_warning();
// The same for given kernels, CPU features and whether OpenBLAS can switch
// kernel sets (a DYNAMIC_ARCH build).
std::optional<std::string> blas_kernels_warning(std::string_view kernels, bool avx2_fma,
                                                bool selectable);

}  // namespace gnnrt::ops
