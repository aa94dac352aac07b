// Small node-wise and edge-wise ops the layers need next to the big kernels:
// sums and scalings, per-head attention dot products (GAT), per-edge
// scaling of messages, head means, the masked MSE loss and the correct-count
// metric. float32, row-major; every output is overwritten (no aliasing with
// inputs); OpenMP over rows; reductions over rows run in row order, so the
// results are bitwise identical for any thread count. Sizes are checked by
// the caller (the runtime's Builder); these functions trust their spans.
#pragma once

#include <cstdint>
#include <span>

namespace gnnrt::ops {

void add(std::span<const float> a, std::span<const float> b, std::span<float> out);
void scale(std::span<const float> x, float alpha, std::span<float> out);

// x [N, H*C], att [H*C] -> out [N, H]: out[n, h] = sum_c x[n, h, c] * att[h, c].
void head_dot_forward(std::span<const float> x, std::span<const float> att, int64_t rows,
                      int64_t heads, int64_t channels, std::span<float> out);
// grad_x [N, H*C] = g[n, h] * att[h, c].
void head_dot_backward_x(std::span<const float> att, std::span<const float> g, int64_t rows,
                         int64_t heads, int64_t channels, std::span<float> grad_x);
// grad_att [H*C] = sum_n g[n, h] * x[n, h, c].
void head_dot_backward_att(std::span<const float> x, std::span<const float> g, int64_t rows,
                           int64_t heads, int64_t channels, std::span<float> grad_att);

// x [N, H*C] -> out [N, C], the mean over heads; backward spreads g / H.
void head_mean_forward(std::span<const float> x, int64_t rows, int64_t heads, int64_t channels,
                       std::span<float> out);
void head_mean_backward(std::span<const float> g, int64_t rows, int64_t heads, int64_t channels,
                        std::span<float> grad_x);

// messages [E, H*C] * weight [E, H] -> out [E, H*C] (weight [E] is H = 1).
void edge_scale(std::span<const float> messages, std::span<const float> weight, int64_t edges,
                int64_t heads, int64_t channels, std::span<float> out);
// out [E, H] = per-head dot of g and messages (the weight's gradient).
void edge_dot(std::span<const float> g, std::span<const float> messages, int64_t edges,
              int64_t heads, int64_t channels, std::span<float> out);

// Mean squared error over the rows with mask = 1: returns the sum of
// squared differences and the element count (rows used * cols).
struct SquaredSum {
  double sum = 0;
  int64_t count = 0;
};
SquaredSum mse_loss_forward(std::span<const float> pred, std::span<const float> target,
                            std::span<const uint8_t> mask, int64_t rows, int64_t cols);
// grad_pred = scale * 2 (pred - target) on masked rows, 0 elsewhere.
void mse_loss_backward(std::span<const float> pred, std::span<const float> target,
                       std::span<const uint8_t> mask, int64_t rows, int64_t cols, float scale,
                       std::span<float> grad_pred);

// Rows with mask = 1 whose first largest log-probability is at the label.
struct CorrectCount {
  int64_t correct = 0;
  int64_t total = 0;
};
CorrectCount count_correct(std::span<const float> log_prob, std::span<const int64_t> labels,
                           std::span<const uint8_t> mask, int64_t rows, int64_t classes);

}  // namespace gnnrt::ops
