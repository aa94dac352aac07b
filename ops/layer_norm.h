// Layer normalisation with PyG's two modes (torch_geometric.nn.LayerNorm):
//   kGraph (PyG's default): over all rows and columns of x [N, C],
//     y = (x - mean(x)) / (std(x) + eps), std the population std;
//   kNode: over each row's C columns (F.layer_norm),
//     y = (x - mean_r) / sqrt(var_r + eps);
// then out = y * gamma [C] + beta [C].
//
// Graph mode takes its statistics as moments [3] = (count, sum, sum of
// squares) in double, from layer_norm_moments over the rows that count
// (a mask; empty: every row). On several ranks the moments of each rank's
// master rows are all-reduced first, so every replica normalises with the
// global statistics; the variance is sum_sq / count - mean^2 in double.
// Its backward needs two sums over every row that used the statistics (on
// every replica; all-reduced across ranks): sums [2] = (sum dy, sum dy * (x -
// mean)), dy = grad_out * gamma (layer_norm_grad_sums); the gradient then
// adds the statistics' terms to the rows in the mask only.
//
// Layout: x, out, grad_out, grad_x [N, C] row-major; gamma, beta, grad_gamma
// [C]; mask [N] bool (empty: all rows). T is float or double; statistics are
// accumulated in double in row order, so results are bitwise identical for
// any thread count. Outputs are overwritten. Every span is checked against
// rows and cols (OpError naming the op and argument) before anything is
// written; eps must be > 0. beta's gradient is bias_add_backward.
#pragma once

#include <cstdint>
#include <span>

namespace gnnrt::ops {

enum class LayerNormMode { kGraph, kNode };

// moments [3] = (rows counted, sum of x, sum of x^2) over the masked rows.
template <typename T>
void layer_norm_moments(std::span<const T> x, std::span<const uint8_t> mask, int64_t rows,
                        int64_t cols, std::span<double> moments);

// Graph mode reads `moments`; node mode takes it empty.
template <typename T>
void layer_norm_forward(LayerNormMode mode, std::span<const T> x, std::span<const T> gamma,
                        std::span<const T> beta, std::span<const double> moments, int64_t rows,
                        int64_t cols, double eps, std::span<T> out);

// Graph mode: sums [2] = (sum of dy, sum of dy * (x - mean)) over all rows.
template <typename T>
void layer_norm_grad_sums(std::span<const T> x, std::span<const T> gamma,
                          std::span<const T> grad_out, std::span<const double> moments,
                          int64_t rows, int64_t cols, std::span<double> sums);

// Graph mode reads moments, sums and mask; node mode takes them empty.
template <typename T>
void layer_norm_backward_x(LayerNormMode mode, std::span<const T> x, std::span<const T> gamma,
                           std::span<const T> grad_out, std::span<const double> moments,
                           std::span<const double> sums, std::span<const uint8_t> mask,
                           int64_t rows, int64_t cols, double eps, std::span<T> grad_x);

// grad_gamma [C] = sum over rows of grad_out * y (rows in order).
template <typename T>
void layer_norm_backward_gamma(LayerNormMode mode, std::span<const T> x,
                               std::span<const T> grad_out, std::span<const double> moments,
                               int64_t rows, int64_t cols, double eps, std::span<T> grad_gamma);

}  // namespace gnnrt::ops
