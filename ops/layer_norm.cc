#include "ops/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/loops.h"

namespace gnnrt::ops {
namespace {

using detail::kParallelElements;

// The affine-free normalisation y[i] = (x[i] - shift) * scale of one group
// (the whole matrix, or one row).
struct Norm {
  double shift = 0, scale = 0;
  double std = 0;  // graph mode: the population std (for the backward)
};

Norm graph_norm(std::span<const double> moments, double eps) {
  const double n = moments[0];
  if (!(n > 0)) return {};
  const double mean = moments[1] / n;
  const double var = std::max(moments[2] / n - mean * mean, 0.0);
  const double std = std::sqrt(var);
  return {mean, 1.0 / (std + eps), std};
}

// The sum of f(c) over c in [0, cols), in 8 interleaved double lanes added
// in a fixed order at the end: independent adds the compiler vectorizes
// (one chain of dependent adds waits on each add's latency), and the same
// bits for any thread count.
template <typename F>
inline double lane_sum(int64_t cols, F f) {
  constexpr int64_t kLanes = 8;
  double acc[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= cols; c += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += f(c + l);
  }
  for (; c < cols; ++c) acc[c % kLanes] += f(c);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <typename T>
Norm row_norm(const T* x, int64_t cols, double eps) {
  const double mean = lane_sum(cols, [x](int64_t c) { return static_cast<double>(x[c]); }) / static_cast<double>(cols);
  const double sq = lane_sum(cols, [x, mean](int64_t c) {
    const double d = x[c] - mean;
    return d * d;
  });
  return {mean, 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps), 0};
}

void expect_shape(std::string_view op, std::size_t x, std::size_t gamma, int64_t rows,
                  int64_t cols) {
  expect_non_negative(op, "rows", rows);
  expect_non_negative(op, "cols", cols);
  expect_size(op, "x", x, rows * cols, "rows*cols");
  expect_size(op, "gamma", gamma, cols, "cols");
}

void expect_eps(std::string_view op, double eps) {
  if (!(eps > 0)) throw OpError(op, "eps must be > 0, got " + std::to_string(eps));
}

void expect_mode_stats(std::string_view op, LayerNormMode mode, std::span<const double> stats,
                       std::string_view name, int64_t size) {
  expect_size(op, name, stats.size(), mode == LayerNormMode::kGraph ? size : 0,
              mode == LayerNormMode::kGraph ? "graph mode's" : "node mode's none");
}

}  // namespace

template <typename T>
void layer_norm_moments(std::span<const T> x, std::span<const uint8_t> mask, int64_t rows,
                        int64_t cols, std::span<double> moments) {
  constexpr std::string_view op = "layer_norm_moments";
  expect_non_negative(op, "rows", rows);
  expect_non_negative(op, "cols", cols);
  expect_size(op, "x", x.size(), rows * cols, "rows*cols");
  if (!mask.empty()) expect_size(op, "mask", mask.size(), rows, "rows (or none)");
  expect_size(op, "moments", moments.size(), 3, "3");
  double count = 0, sum = 0, sum_sq = 0;
  for (int64_t r = 0; r < rows; ++r) {  // row order: deterministic
    if (!mask.empty() && !mask[static_cast<size_t>(r)]) continue;
    const T* xr = &x[static_cast<size_t>(r * cols)];
    for (int64_t c = 0; c < cols; ++c) {
      const double v = xr[c];
      sum += v;
      sum_sq += v * v;
    }
    count += static_cast<double>(cols);
  }
  moments[0] = count;
  moments[1] = sum;
  moments[2] = sum_sq;
}

template <typename T>
void layer_norm_forward(LayerNormMode mode, std::span<const T> x, std::span<const T> gamma,
                        std::span<const T> beta, std::span<const double> moments, int64_t rows,
                        int64_t cols, double eps, std::span<T> out) {
  constexpr std::string_view op = "layer_norm";
  expect_shape(op, x.size(), gamma.size(), rows, cols);
  expect_size(op, "beta", beta.size(), cols, "cols");
  expect_size(op, "out", out.size(), rows * cols, "rows*cols");
  expect_mode_stats(op, mode, moments, "moments", 3);
  expect_eps(op, eps);
  const Norm whole = mode == LayerNormMode::kGraph ? graph_norm(moments, eps) : Norm{};
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = &x[static_cast<size_t>(r * cols)];
    const Norm nrm = mode == LayerNormMode::kGraph ? whole : row_norm(xr, cols, eps);
    for (int64_t c = 0; c < cols; ++c) {
      const auto y = static_cast<T>((xr[c] - nrm.shift) * nrm.scale);
      out[static_cast<size_t>(r * cols + c)] = y * gamma[static_cast<size_t>(c)] + beta[static_cast<size_t>(c)];
    }
  }
}

template <typename T>
void layer_norm_grad_sums(std::span<const T> x, std::span<const T> gamma,
                          std::span<const T> grad_out, std::span<const double> moments,
                          int64_t rows, int64_t cols, std::span<double> sums) {
  constexpr std::string_view op = "layer_norm_grad_sums";
  expect_shape(op, x.size(), gamma.size(), rows, cols);
  expect_size(op, "grad_out", grad_out.size(), rows * cols, "rows*cols");
  expect_size(op, "moments", moments.size(), 3, "3");
  expect_size(op, "sums", sums.size(), 2, "2");
  const Norm nrm = graph_norm(moments, 1.0);
  double sum_dy = 0, sum_dy_xc = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      const double dy = static_cast<double>(grad_out[i]) * gamma[static_cast<size_t>(c)];
      sum_dy += dy;
      sum_dy_xc += dy * (x[i] - nrm.shift);
    }
  }
  sums[0] = sum_dy;
  sums[1] = sum_dy_xc;
}

template <typename T>
void layer_norm_backward_x(LayerNormMode mode, std::span<const T> x, std::span<const T> gamma,
                           std::span<const T> grad_out, std::span<const double> moments,
                           std::span<const double> sums, std::span<const uint8_t> mask,
                           int64_t rows, int64_t cols, double eps, std::span<T> grad_x) {
  constexpr std::string_view op = "layer_norm_backward_x";
  expect_shape(op, x.size(), gamma.size(), rows, cols);
  expect_size(op, "grad_out", grad_out.size(), rows * cols, "rows*cols");
  expect_size(op, "grad_x", grad_x.size(), rows * cols, "rows*cols");
  expect_mode_stats(op, mode, moments, "moments", 3);
  expect_mode_stats(op, mode, sums, "sums", 2);
  if (!mask.empty()) expect_size(op, "mask", mask.size(), rows, "rows (or none)");
  expect_eps(op, eps);
  if (mode == LayerNormMode::kGraph) {
    // y = (x - m) / s with s = std + eps: for a row counted in the statistics
    // dx = (dy - mean(dy)) / s - (x - m) * sum(dy * (x - m)) / (s^2 n std),
    // dy = g * gamma; a row outside them (a mirror) keeps dy / s only.
    const Norm nrm = graph_norm(moments, eps);
    const double n = moments[0];
    const double mean_dy = n > 0 ? sums[0] / n : 0;
    // std = 0 means every x - m is 0, and so is the second term.
    const double k = nrm.std > 0 ? sums[1] * nrm.scale * nrm.scale / (n * nrm.std) : 0;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
    for (int64_t r = 0; r < rows; ++r) {
      const bool counted = mask.empty() || mask[static_cast<size_t>(r)] != 0;
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        const double dy = static_cast<double>(grad_out[i]) * gamma[static_cast<size_t>(c)];
        grad_x[i] = counted ? static_cast<T>((dy - mean_dy) * nrm.scale - (x[i] - nrm.shift) * k)
                            : static_cast<T>(dy * nrm.scale);
      }
    }
    return;
  }
  // Per row: dx = rstd * (dy - mean(dy) - y * mean(dy * y)).
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = &x[static_cast<size_t>(r * cols)];
    const T* gr = &grad_out[static_cast<size_t>(r * cols)];
    const Norm nrm = row_norm(xr, cols, eps);
    const T* gamma_ = gamma.data();
    const double sum_dy = lane_sum(cols, [gr, gamma_](int64_t c) { return static_cast<double>(gr[c]) * gamma_[c]; });
    const double sum_dy_y = lane_sum(cols, [gr, gamma_, xr, &nrm](int64_t c) {
      return static_cast<double>(gr[c]) * gamma_[c] * (xr[c] - nrm.shift) * nrm.scale;
    });
    const double inv = 1.0 / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const double dy = static_cast<double>(gr[c]) * gamma[static_cast<size_t>(c)];
      const double y = (xr[c] - nrm.shift) * nrm.scale;
      grad_x[static_cast<size_t>(r * cols + c)] =
          static_cast<T>(nrm.scale * (dy - sum_dy * inv - y * sum_dy_y * inv));
    }
  }
}

template <typename T>
void layer_norm_backward_gamma(LayerNormMode mode, std::span<const T> x,
                               std::span<const T> grad_out, std::span<const double> moments,
                               int64_t rows, int64_t cols, double eps, std::span<T> grad_gamma) {
  constexpr std::string_view op = "layer_norm_backward_gamma";
  expect_shape(op, x.size(), grad_gamma.size(), rows, cols);
  expect_size(op, "grad_out", grad_out.size(), rows * cols, "rows*cols");
  expect_mode_stats(op, mode, moments, "moments", 3);
  expect_eps(op, eps);
  const Norm whole = mode == LayerNormMode::kGraph ? graph_norm(moments, eps) : Norm{};
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {  // row order: deterministic
    const T* xr = &x[static_cast<size_t>(r * cols)];
    const Norm nrm = mode == LayerNormMode::kGraph ? whole : row_norm(xr, cols, eps);
    for (int64_t c = 0; c < cols; ++c) {
      acc[static_cast<size_t>(c)] += static_cast<double>(grad_out[static_cast<size_t>(r * cols + c)]) *
                                     ((xr[c] - nrm.shift) * nrm.scale);
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    grad_gamma[static_cast<size_t>(c)] = static_cast<T>(acc[static_cast<size_t>(c)]);
  }
}

#define GNNRT_INSTANTIATE(T)                                                                      \
  template void layer_norm_moments<T>(std::span<const T>, std::span<const uint8_t>, int64_t,      \
                                      int64_t, std::span<double>);                                \
  template void layer_norm_forward<T>(LayerNormMode, std::span<const T>, std::span<const T>,      \
                                      std::span<const T>, std::span<const double>, int64_t,       \
                                      int64_t, double, std::span<T>);                             \
  template void layer_norm_grad_sums<T>(std::span<const T>, std::span<const T>,                   \
                                        std::span<const T>, std::span<const double>, int64_t,     \
                                        int64_t, std::span<double>);                              \
  template void layer_norm_backward_x<T>(LayerNormMode, std::span<const T>, std::span<const T>,   \
                                         std::span<const T>, std::span<const double>,             \
                                         std::span<const double>, std::span<const uint8_t>,       \
                                         int64_t, int64_t, double, std::span<T>);                 \
  template void layer_norm_backward_gamma<T>(LayerNormMode, std::span<const T>,                   \
                                             std::span<const T>, std::span<const double>,         \
                                             int64_t, int64_t, double, std::span<T>);
GNNRT_FOR_EACH_VALUE(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
