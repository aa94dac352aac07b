#include "ops/layer_norm.h"

#include <cmath>
#include <vector>

namespace gnnrt::ops {
namespace {

constexpr int64_t kParallelElements = 1 << 15;

// The affine-free normalisation y[i] = (x[i] - shift) * scale of one group
// (the whole matrix, or one row).
struct Norm {
  double shift = 0, scale = 0;
  double std = 0;  // graph mode: the population std (for the backward)
};

Norm graph_norm(std::span<const float> x, double eps) {
  const auto n = static_cast<double>(x.size());
  if (x.empty()) return {};
  double sum = 0;
  for (float v : x) sum += v;
  const double mean = sum / n;
  double sq = 0;
  for (float v : x) sq += (v - mean) * (v - mean);
  const double std = std::sqrt(sq / n);
  return {mean, 1.0 / (std + eps), std};
}

Norm row_norm(const float* x, int64_t cols, double eps) {
  double sum = 0;
  for (int64_t c = 0; c < cols; ++c) sum += x[c];
  const double mean = sum / static_cast<double>(cols);
  double sq = 0;
  for (int64_t c = 0; c < cols; ++c) sq += (x[c] - mean) * (x[c] - mean);
  return {mean, 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps), 0};
}

}  // namespace

void layer_norm_forward(LayerNormMode mode, std::span<const float> x, std::span<const float> gamma,
                        std::span<const float> beta, int64_t rows, int64_t cols, double eps,
                        std::span<float> out) {
  const Norm whole = mode == LayerNormMode::kGraph ? graph_norm(x, eps) : Norm{};
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = &x[static_cast<size_t>(r * cols)];
    const Norm nrm = mode == LayerNormMode::kGraph ? whole : row_norm(xr, cols, eps);
    for (int64_t c = 0; c < cols; ++c) {
      const auto y = static_cast<float>((xr[c] - nrm.shift) * nrm.scale);
      out[static_cast<size_t>(r * cols + c)] = y * gamma[static_cast<size_t>(c)] + beta[static_cast<size_t>(c)];
    }
  }
}

void layer_norm_backward_x(LayerNormMode mode, std::span<const float> x,
                           std::span<const float> gamma, std::span<const float> grad_out,
                           int64_t rows, int64_t cols, double eps, std::span<float> grad_x) {
  if (mode == LayerNormMode::kGraph) {
    // y = (x - m) / s with s = std + eps: dx = (dy - mean(dy)) / s
    //   - (x - m) * sum(dy * (x - m)) / (s^2 * n * std), dy = g * gamma.
    const Norm nrm = graph_norm(x, eps);
    const double n = static_cast<double>(rows * cols);
    double sum_dy = 0, sum_dy_xc = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        const double dy = static_cast<double>(grad_out[i]) * gamma[static_cast<size_t>(c)];
        sum_dy += dy;
        sum_dy_xc += dy * (x[i] - nrm.shift);
      }
    }
    const double mean_dy = n > 0 ? sum_dy / n : 0;
    // std = 0 means every x - m is 0, and so is the second term.
    const double k = nrm.std > 0 ? sum_dy_xc * nrm.scale * nrm.scale / (n * nrm.std) : 0;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        const double dy = static_cast<double>(grad_out[i]) * gamma[static_cast<size_t>(c)];
        grad_x[i] = static_cast<float>((dy - mean_dy) * nrm.scale - (x[i] - nrm.shift) * k);
      }
    }
    return;
  }
  // Per row: dx = rstd * (dy - mean(dy) - y * mean(dy * y)).
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = &x[static_cast<size_t>(r * cols)];
    const float* gr = &grad_out[static_cast<size_t>(r * cols)];
    const Norm nrm = row_norm(xr, cols, eps);
    double sum_dy = 0, sum_dy_y = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double dy = static_cast<double>(gr[c]) * gamma[static_cast<size_t>(c)];
      sum_dy += dy;
      sum_dy_y += dy * (xr[c] - nrm.shift) * nrm.scale;
    }
    const double inv = 1.0 / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const double dy = static_cast<double>(gr[c]) * gamma[static_cast<size_t>(c)];
      const double y = (xr[c] - nrm.shift) * nrm.scale;
      grad_x[static_cast<size_t>(r * cols + c)] =
          static_cast<float>(nrm.scale * (dy - sum_dy * inv - y * sum_dy_y * inv));
    }
  }
}

void layer_norm_backward_gamma(LayerNormMode mode, std::span<const float> x,
                               std::span<const float> grad_out, int64_t rows, int64_t cols,
                               double eps, std::span<float> grad_gamma) {
  const Norm whole = mode == LayerNormMode::kGraph ? graph_norm(x, eps) : Norm{};
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {  // row order: deterministic
    const float* xr = &x[static_cast<size_t>(r * cols)];
    const Norm nrm = mode == LayerNormMode::kGraph ? whole : row_norm(xr, cols, eps);
    for (int64_t c = 0; c < cols; ++c) {
      acc[static_cast<size_t>(c)] +=
          static_cast<double>(grad_out[static_cast<size_t>(r * cols + c)]) * ((xr[c] - nrm.shift) * nrm.scale);
    }
  }
  for (int64_t c = 0; c < cols; ++c) grad_gamma[static_cast<size_t>(c)] = static_cast<float>(acc[static_cast<size_t>(c)]);
}

}  // namespace gnnrt::ops
