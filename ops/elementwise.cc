#include "ops/elementwise.h"

#include <cstddef>

namespace gnnrt::ops {
namespace {

constexpr int64_t kParallelElements = 1 << 15;

}  // namespace

void add(std::span<const float> a, std::span<const float> b, std::span<float> out) {
  const auto n = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void scale(std::span<const float> x, float alpha, std::span<float> out) {
  const auto n = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * alpha;
}

void head_dot_forward(std::span<const float> x, std::span<const float> att, int64_t rows,
                      int64_t heads, int64_t channels, std::span<float> out) {
#pragma omp parallel for schedule(static) if (rows * heads * channels > kParallelElements)
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* xr = &x[static_cast<size_t>((n * heads + h) * channels)];
      const float* ar = &att[static_cast<size_t>(h * channels)];
      float s = 0;
      for (int64_t c = 0; c < channels; ++c) s += xr[c] * ar[c];
      out[static_cast<size_t>(n * heads + h)] = s;
    }
  }
}

void head_dot_backward_x(std::span<const float> att, std::span<const float> g, int64_t rows,
                         int64_t heads, int64_t channels, std::span<float> grad_x) {
#pragma omp parallel for schedule(static) if (rows * heads * channels > kParallelElements)
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      const float gn = g[static_cast<size_t>(n * heads + h)];
      float* gx = &grad_x[static_cast<size_t>((n * heads + h) * channels)];
      const float* ar = &att[static_cast<size_t>(h * channels)];
      for (int64_t c = 0; c < channels; ++c) gx[c] = gn * ar[c];
    }
  }
}

void head_dot_backward_att(std::span<const float> x, std::span<const float> g, int64_t rows,
                           int64_t heads, int64_t channels, std::span<float> grad_att) {
  // One thread per (head, channel) column, rows summed in order: deterministic.
  const int64_t width = heads * channels;
#pragma omp parallel for schedule(static) if (rows * width > kParallelElements)
  for (int64_t j = 0; j < width; ++j) {
    const int64_t h = j / channels;
    float s = 0;
    for (int64_t n = 0; n < rows; ++n) {
      s += g[static_cast<size_t>(n * heads + h)] * x[static_cast<size_t>(n * width + j)];
    }
    grad_att[static_cast<size_t>(j)] = s;
  }
}

void head_mean_forward(std::span<const float> x, int64_t rows, int64_t heads, int64_t channels,
                       std::span<float> out) {
  const float inv = 1.0f / static_cast<float>(heads);
#pragma omp parallel for schedule(static) if (rows * heads * channels > kParallelElements)
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      float s = 0;
      for (int64_t h = 0; h < heads; ++h) s += x[static_cast<size_t>((n * heads + h) * channels + c)];
      out[static_cast<size_t>(n * channels + c)] = s * inv;
    }
  }
}

void head_mean_backward(std::span<const float> g, int64_t rows, int64_t heads, int64_t channels,
                        std::span<float> grad_x) {
  const float inv = 1.0f / static_cast<float>(heads);
#pragma omp parallel for schedule(static) if (rows * heads * channels > kParallelElements)
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t c = 0; c < channels; ++c) {
        grad_x[static_cast<size_t>((n * heads + h) * channels + c)] =
            g[static_cast<size_t>(n * channels + c)] * inv;
      }
    }
  }
}

void edge_scale(std::span<const float> messages, std::span<const float> weight, int64_t edges,
                int64_t heads, int64_t channels, std::span<float> out) {
#pragma omp parallel for schedule(static) if (edges * heads * channels > kParallelElements)
  for (int64_t e = 0; e < edges; ++e) {
    for (int64_t h = 0; h < heads; ++h) {
      const float w = weight[static_cast<size_t>(e * heads + h)];
      const size_t base = static_cast<size_t>((e * heads + h) * channels);
      for (int64_t c = 0; c < channels; ++c) out[base + c] = messages[base + c] * w;
    }
  }
}

void edge_dot(std::span<const float> g, std::span<const float> messages, int64_t edges,
              int64_t heads, int64_t channels, std::span<float> out) {
#pragma omp parallel for schedule(static) if (edges * heads * channels > kParallelElements)
  for (int64_t e = 0; e < edges; ++e) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = static_cast<size_t>((e * heads + h) * channels);
      float s = 0;
      for (int64_t c = 0; c < channels; ++c) s += g[base + c] * messages[base + c];
      out[static_cast<size_t>(e * heads + h)] = s;
    }
  }
}

SquaredSum mse_loss_forward(std::span<const float> pred, std::span<const float> target,
                            std::span<const uint8_t> mask, int64_t rows, int64_t cols) {
  SquaredSum r;
  for (int64_t n = 0; n < rows; ++n) {
    if (!mask[static_cast<size_t>(n)]) continue;
    for (int64_t c = 0; c < cols; ++c) {
      const double d = static_cast<double>(pred[static_cast<size_t>(n * cols + c)]) -
                       target[static_cast<size_t>(n * cols + c)];
      r.sum += d * d;
    }
    r.count += cols;
  }
  return r;
}

void mse_loss_backward(std::span<const float> pred, std::span<const float> target,
                       std::span<const uint8_t> mask, int64_t rows, int64_t cols, float scale,
                       std::span<float> grad_pred) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
  for (int64_t n = 0; n < rows; ++n) {
    const bool used = mask[static_cast<size_t>(n)] != 0;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(n * cols + c);
      grad_pred[i] = used ? 2.0f * scale * (pred[i] - target[i]) : 0.0f;
    }
  }
}

CorrectCount count_correct(std::span<const float> log_prob, std::span<const int64_t> labels,
                           std::span<const uint8_t> mask, int64_t rows, int64_t classes) {
  CorrectCount r;
  for (int64_t n = 0; n < rows; ++n) {
    if (!mask[static_cast<size_t>(n)]) continue;
    const float* row = &log_prob[static_cast<size_t>(n * classes)];
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c) {
      if (row[c] > row[best]) best = c;
    }
    r.correct += best == labels[static_cast<size_t>(n)] ? 1 : 0;
    ++r.total;
  }
  return r;
}

}  // namespace gnnrt::ops
