// Layer normalisation with PyG's two modes (torch_geometric.nn.LayerNorm):
//   kGraph (PyG's default): over all rows and columns of x [N, C],
//     y = (x - mean(x)) / (std(x) + eps), std the population std;
//   kNode: over each row's C columns (F.layer_norm),
//     y = (x - mean_r) / sqrt(var_r + eps);
// then out = y * gamma [C] + beta [C]. Statistics are accumulated in double,
// in row order, so results are bitwise identical for any thread count.
// The backward recomputes the statistics from x (nothing is stored between
// the passes) and overwrites grad_x [N, C] and grad_gamma [C]; beta's
// gradient is the column sum of grad_out (bias_add_backward).
#pragma once

#include <cstdint>
#include <span>

namespace gnnrt::ops {

enum class LayerNormMode { kGraph, kNode };

void layer_norm_forward(LayerNormMode mode, std::span<const float> x, std::span<const float> gamma,
                        std::span<const float> beta, int64_t rows, int64_t cols, double eps,
                        std::span<float> out);
void layer_norm_backward_x(LayerNormMode mode, std::span<const float> x,
                           std::span<const float> gamma, std::span<const float> grad_out,
                           int64_t rows, int64_t cols, double eps, std::span<float> grad_x);
void layer_norm_backward_gamma(LayerNormMode mode, std::span<const float> x,
                               std::span<const float> grad_out, int64_t rows, int64_t cols,
                               double eps, std::span<float> grad_gamma);

}  // namespace gnnrt::ops
