#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/loops.h"
#include "ops/vector_math.h"

namespace gnnrt::ops {
namespace {

using detail::kParallelElements;

// heads >= 1 and channels >= 0, rows >= 0.
void expect_heads(std::string_view op, int64_t rows, int64_t heads, int64_t channels) {
  expect_non_negative(op, "rows", rows);
  expect_non_negative(op, "channels", channels);
  if (heads < 1) throw OpError(op, "heads must be >= 1, got " + std::to_string(heads));
}

// fn.template operator()<kC>() with kC = channels when it is 1..16, else 0
// (read channels at run time).
template <typename Fn>
void with_channels(int64_t channels, Fn fn) {
  if (!detail::with_constant<1, 16>(channels, fn)) fn.template operator()<0>();
}

void expect_same(std::string_view op, std::size_t a, std::size_t b, std::size_t out) {
  expect_size(op, "b", b, static_cast<int64_t>(a), "len(a)");
  expect_size(op, "out", out, static_cast<int64_t>(a), "len(a)");
}

void expect_mask_and_rows(std::string_view op, std::span<const uint8_t> mask, int64_t rows,
                          int64_t cols) {
  expect_non_negative(op, "rows", rows);
  expect_non_negative(op, "cols", cols);
  expect_size(op, "mask", mask.size(), rows, "rows");
}

// out[h] = sum over c of x[h, c] * att[h, c] for 8 heads of 8 channels
// (row-major [8, 8] each), each sum in channel order from 0 as the scalar
// loop adds it, so the bits are the same: the 8 products per head as one
// vector, an 8 x 8 transpose into one vector per channel, then 8 vector
// adds, faster than 64 scalar multiply-adds a row (docs/kernels.md).
using Eight [[gnu::vector_size(8 * sizeof(float))]] = float;

[[gnu::always_inline]] inline void dot_eight_heads(const float* __restrict x,
                                                   const float* __restrict att,
                                                   float* __restrict out) {
  Eight p[8];
  for (int h = 0; h < 8; ++h) {
    Eight xv, av;
    std::memcpy(&xv, x + h * 8, sizeof(Eight));
    std::memcpy(&av, att + h * 8, sizeof(Eight));
    p[h] = xv * av;
  }
  detail::transpose8(p);  // p[c]: channel c of every head
  Eight sum = {};
  for (int c = 0; c < 8; ++c) sum += p[c];
  std::memcpy(out, &sum, sizeof(Eight));
}

}  // namespace

template <typename T>
void add(std::span<const T> a, std::span<const T> b, std::span<T> out) {
  expect_same("add", a.size(), b.size(), out.size());
  const auto n = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void mul(std::span<const T> a, std::span<const T> b, std::span<T> out) {
  expect_same("mul", a.size(), b.size(), out.size());
  const auto n = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

template <typename T>
void scale(std::span<const T> x, T alpha, std::span<T> out) {
  expect_size("scale", "out", out.size(), static_cast<int64_t>(x.size()), "len(x)");
  const auto n = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * alpha;
}

template <typename T>
void head_dot_forward(std::span<const T> x, std::span<const T> att, int64_t rows, int64_t heads,
                      int64_t channels, std::span<T> out) {
  constexpr std::string_view op = "head_dot";
  expect_heads(op, rows, heads, channels);
  expect_size(op, "x", x.size(), rows * heads * channels, "N*H*C");
  expect_size(op, "att", att.size(), heads * channels, "H*C");
  expect_size(op, "out", out.size(), rows * heads, "N*H");
  // Channels known at compile time (1..16) unroll each head's dot, whose
  // products still add in channel order; other widths loop.
  const auto run = [&]<int kC>() {
    const int64_t C = kC > 0 ? kC : channels;
    const T* __restrict xp = x.data();
    const T* __restrict ap = att.data();
    T* __restrict o = out.data();
    // Float heads of 8 channels, 8 heads at a time: 8 products of a head's
    // row and its att row as vectors, turned into one vector per channel
    // across the heads (an 8 x 8 transpose), added in channel order.
    constexpr bool kEights = kC == 8 && std::is_same_v<T, float>;
    const int64_t vector_heads = kEights ? heads / 8 * 8 : 0;
#pragma omp parallel for schedule(static) if (rows * heads * C > kParallelElements)
    for (int64_t n = 0; n < rows; ++n) {
      if constexpr (kEights) {
        for (int64_t h0 = 0; h0 < vector_heads; h0 += 8) {
          dot_eight_heads(xp + (n * heads + h0) * 8, ap + h0 * 8, o + n * heads + h0);
        }
      }
      for (int64_t h = vector_heads; h < heads; ++h) {
        const T* xr = xp + (n * heads + h) * C;
        const T* ar = ap + h * C;
        T s = 0;
        if constexpr (kC > 0) {
          for (int c = 0; c < kC; ++c) s += xr[c] * ar[c];
        } else {
          for (int64_t c = 0; c < C; ++c) s += xr[c] * ar[c];
        }
        o[n * heads + h] = s;
      }
    }
  };
  with_channels(channels, run);
}

template <typename T>
void head_dot_backward_x(std::span<const T> att, std::span<const T> g, int64_t rows,
                         int64_t heads, int64_t channels, std::span<T> grad_x,
                         std::span<const T> plus) {
  constexpr std::string_view op = "head_dot_backward_x";
  expect_heads(op, rows, heads, channels);
  expect_size(op, "att", att.size(), heads * channels, "H*C");
  expect_size(op, "g", g.size(), rows * heads, "N*H");
  expect_size(op, "grad_x", grad_x.size(), rows * heads * channels, "N*H*C");
  if (!plus.empty()) expect_size(op, "plus", plus.size(), rows * heads * channels, "N*H*C");
  // kC: the channels when known at compile time (1..16), so a head's loop
  // is a fixed vector (GAT's 8 channels: one 8-lane register); 0: run time.
  const auto rows_of = [&]<bool kPlus, int kC>() {
    const int64_t C = kC > 0 ? kC : channels;
#pragma omp parallel for schedule(static) if (rows * heads * C > kParallelElements)
    for (int64_t n = 0; n < rows; ++n) {
      for (int64_t h = 0; h < heads; ++h) {
        const T gn = g[static_cast<size_t>(n * heads + h)];
        const size_t at = static_cast<size_t>((n * heads + h) * C);
        T* __restrict gx = grad_x.data() + at;
        const T* __restrict ar = att.data() + h * C;
        if constexpr (kPlus) {
          const T* __restrict pr = plus.data() + at;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) gx[c] = pr[c] + gn * ar[c];
        } else {
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) gx[c] = gn * ar[c];
        }
      }
    }
  };
  const auto with_plus = [&]<int kC>() {
    plus.empty() ? rows_of.template operator()<false, kC>() : rows_of.template operator()<true, kC>();
  };
  if (!detail::with_constant<1, 16>(channels, with_plus)) with_plus.template operator()<0>();
}

template <typename T>
void head_dot_backward_att(std::span<const T> x, std::span<const T> g, int64_t rows,
                           int64_t heads, int64_t channels, std::span<T> grad_att) {
  constexpr std::string_view op = "head_dot_backward_att";
  expect_heads(op, rows, heads, channels);
  expect_size(op, "x", x.size(), rows * heads * channels, "N*H*C");
  expect_size(op, "g", g.size(), rows * heads, "N*H");
  expect_size(op, "grad_att", grad_att.size(), heads * channels, "H*C");
  // Row by row, each column summing its rows in ascending order, so any
  // split of the columns over threads gives the same bits. (One column at a
  // time read x with a stride of a row, many times slower: docs/kernels.md.)
  const int64_t width = heads * channels;
  const T* __restrict xp = x.data();
  const T* __restrict gp = g.data();
  T* __restrict out = grad_att.data();
  const auto run = [&]<int kC>() {
    if constexpr (kC > 0 && (kC & (kC - 1)) == 0) {
      // Groups of heads, 32 columns at most, as GCC vectors of a head's
      // channels (kParts vectors a head where its channels are wider than a
      // register, detail::kVectorBytes): each row adds g[n, h] * x[n, h, :]
      // to its head's vectors.
      constexpr int kG = kC >= 32 ? 1 : 32 / kC;
      constexpr int kLaneCount = std::min(kC, detail::kRegisterLanes<T>);
      constexpr int kParts = kC / kLaneCount;
      using Lanes [[gnu::vector_size(kLaneCount * sizeof(T))]] = T;
      const int64_t groups = (heads + kG - 1) / kG;
#pragma omp parallel for schedule(static) if (rows * width > kParallelElements)
      for (int64_t grp = 0; grp < groups; ++grp) {
        const int64_t h0 = grp * kG;
        const int64_t nh = std::min<int64_t>(kG, heads - h0);
        Lanes acc[kG * kParts] = {};
        for (int64_t n = 0; n < rows; ++n) {
          const T* gr = gp + n * heads + h0;
          const T* xr = xp + n * width + h0 * kC;
          for (int64_t k = 0; k < nh; ++k) {
            for (int part = 0; part < kParts; ++part) {
              Lanes xv;
              std::memcpy(&xv, xr + k * kC + part * kLaneCount, sizeof(Lanes));
              acc[k * kParts + part] += gr[k] * xv;
            }
          }
        }
        std::memcpy(out + h0 * kC, acc, static_cast<std::size_t>(nh * kParts) * sizeof(Lanes));
      }
    } else {
      const int64_t C = channels;
#pragma omp parallel for schedule(static) if (rows * width > kParallelElements)
      for (int64_t h = 0; h < heads; ++h) {
        T* acc = out + h * C;
        std::fill(acc, acc + C, T(0));
        for (int64_t n = 0; n < rows; ++n) {
          const T gv = gp[n * heads + h];
          const T* xr = xp + n * width + h * C;
          for (int64_t c = 0; c < C; ++c) acc[c] += gv * xr[c];
        }
      }
    }
  };
  with_channels(channels, run);
}

template <typename T>
void head_mean_forward(std::span<const T> x, int64_t rows, int64_t heads, int64_t channels,
                       std::span<T> out) {
  constexpr std::string_view op = "head_mean";
  expect_heads(op, rows, heads, channels);
  expect_size(op, "x", x.size(), rows * heads * channels, "N*H*C");
  expect_size(op, "out", out.size(), rows * channels, "N*C");
  const T inv = T(1) / static_cast<T>(heads);
#pragma omp parallel for schedule(static) if (rows * heads * channels > kParallelElements)
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      T s = 0;
      for (int64_t h = 0; h < heads; ++h) s += x[static_cast<size_t>((n * heads + h) * channels + c)];
      out[static_cast<size_t>(n * channels + c)] = s * inv;
    }
  }
}

template <typename T>
void head_mean_backward(std::span<const T> g, int64_t rows, int64_t heads, int64_t channels,
                        std::span<T> grad_x) {
  constexpr std::string_view op = "head_mean_backward";
  expect_heads(op, rows, heads, channels);
  expect_size(op, "g", g.size(), rows * channels, "N*C");
  expect_size(op, "grad_x", grad_x.size(), rows * heads * channels, "N*H*C");
  const T inv = T(1) / static_cast<T>(heads);
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

template <typename T>
void edge_scale(std::span<const T> messages, std::span<const T> weight, int64_t edges,
                int64_t heads, int64_t channels, std::span<T> out) {
  constexpr std::string_view op = "edge_scale";
  expect_heads(op, edges, heads, channels);
  expect_size(op, "messages", messages.size(), edges * heads * channels, "E*H*C");
  expect_size(op, "weight", weight.size(), edges * heads, "E*H");
  expect_size(op, "out", out.size(), edges * heads * channels, "E*H*C");
#pragma omp parallel for schedule(static) if (edges * heads * channels > kParallelElements)
  for (int64_t e = 0; e < edges; ++e) {
    for (int64_t h = 0; h < heads; ++h) {
      const T w = weight[static_cast<size_t>(e * heads + h)];
      const size_t base = static_cast<size_t>((e * heads + h) * channels);
      for (int64_t c = 0; c < channels; ++c) out[base + c] = messages[base + c] * w;
    }
  }
}

template <typename T>
void edge_dot(std::span<const T> g, std::span<const T> messages, int64_t edges, int64_t heads,
              int64_t channels, std::span<T> out) {
  constexpr std::string_view op = "edge_dot";
  expect_heads(op, edges, heads, channels);
  expect_size(op, "g", g.size(), edges * heads * channels, "E*H*C");
  expect_size(op, "messages", messages.size(), edges * heads * channels, "E*H*C");
  expect_size(op, "out", out.size(), edges * heads, "E*H");
#pragma omp parallel for schedule(static) if (edges * heads * channels > kParallelElements)
  for (int64_t e = 0; e < edges; ++e) {
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = static_cast<size_t>((e * heads + h) * channels);
      T s = 0;
      for (int64_t c = 0; c < channels; ++c) s += g[base + c] * messages[base + c];
      out[static_cast<size_t>(e * heads + h)] = s;
    }
  }
}

template <typename T>
void divide_rows(std::span<const T> x, std::span<const int64_t> degree, int64_t cols,
                 std::span<T> out) {
  constexpr std::string_view op = "divide_rows";
  expect_non_negative(op, "cols", cols);
  const auto rows = static_cast<int64_t>(degree.size());
  expect_size(op, "x", x.size(), rows * cols, "N*F");
  expect_size(op, "out", out.size(), rows * cols, "N*F");
  for (int64_t n = 0; n < rows; ++n) {
    if (degree[static_cast<size_t>(n)] < 0) {
      throw OpError(op, "degree[" + std::to_string(n) + "] = " +
                            std::to_string(degree[static_cast<size_t>(n)]) + " is negative");
    }
  }
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t d = degree[static_cast<size_t>(n)];
    const T inv = d > 0 ? T(1) / static_cast<T>(d) : T(0);
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(n * cols + c);
      out[i] = d > 0 ? x[i] * inv : T(0);
    }
  }
}

namespace {

// 1 / (1 + e^-z) without overflow for either sign (computed in double).
template <typename T>
T sigmoid(T z) {
  const double x = static_cast<double>(z);
  return static_cast<T>(x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)));
}

// The name a form's errors carry.
std::string_view loss_name(LossForm form, bool backward) {
  switch (form) {
    case LossForm::kSquared: return backward ? "mse_loss_backward" : "mse_loss";
    case LossForm::kAbsolute: return backward ? "l1_loss_backward" : "l1_loss";
    case LossForm::kLinear: return backward ? "mean_loss_backward" : "mean_loss";
    case LossForm::kLogistic: return backward ? "bce_with_logits_backward" : "bce_with_logits";
  }
  throw OpError("mse_loss", "loss form " + std::to_string(static_cast<int>(form)) +
                                " is none of squared, absolute, linear, logistic");
}

}  // namespace

template <typename T>
SquaredSum mse_loss_forward(std::span<const T> pred, std::span<const T> target,
                            std::span<const uint8_t> mask, int64_t rows, int64_t cols, LossForm form) {
  const std::string_view op = loss_name(form, false);
  expect_mask_and_rows(op, mask, rows, cols);
  expect_size(op, "pred", pred.size(), rows * cols, "rows*cols");
  expect_size(op, "target", target.size(), rows * cols, "rows*cols");
  SquaredSum r;
  for (int64_t n = 0; n < rows; ++n) {
    if (!mask[static_cast<size_t>(n)]) continue;
    for (int64_t c = 0; c < cols; ++c) {
      const double p = static_cast<double>(pred[static_cast<size_t>(n * cols + c)]);
      const double t = static_cast<double>(target[static_cast<size_t>(n * cols + c)]);
      const double d = p - t;
      r.sum += form == LossForm::kSquared    ? d * d
               : form == LossForm::kAbsolute ? std::abs(d)
               : form == LossForm::kLinear   ? d
                                             : std::max(p, 0.0) - p * t + std::log1p(std::exp(-std::abs(p)));
    }
    r.count += cols;
  }
  return r;
}

template <typename T>
void mse_loss_backward(std::span<const T> pred, std::span<const T> target,
                       std::span<const uint8_t> mask, int64_t rows, int64_t cols, T scale,
                       std::span<T> grad_pred, LossForm form) {
  const std::string_view op = loss_name(form, true);
  expect_mask_and_rows(op, mask, rows, cols);
  expect_size(op, "pred", pred.size(), rows * cols, "rows*cols");
  expect_size(op, "target", target.size(), rows * cols, "rows*cols");
  expect_size(op, "grad_pred", grad_pred.size(), rows * cols, "rows*cols");
#pragma omp parallel for schedule(static) if (rows * cols > kParallelElements)
  for (int64_t n = 0; n < rows; ++n) {
    const bool used = mask[static_cast<size_t>(n)] != 0;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(n * cols + c);
      const T d = pred[i] - target[i];
      const T sign = d > T(0) ? T(1) : d < T(0) ? T(-1) : T(0);
      grad_pred[i] = !used                         ? T(0)
                     : form == LossForm::kSquared  ? T(2) * scale * d
                     : form == LossForm::kAbsolute ? scale * sign
                     : form == LossForm::kLinear   ? scale
                                                   : scale * (sigmoid(pred[i]) - target[i]);
    }
  }
}

template <typename T>
CorrectCount count_correct(std::span<const T> log_prob, std::span<const int64_t> labels,
                           std::span<const uint8_t> mask, int64_t rows, int64_t classes) {
  constexpr std::string_view op = "count_correct";
  expect_mask_and_rows(op, mask, rows, classes);
  expect_size(op, "log_prob", log_prob.size(), rows * classes, "rows*classes");
  expect_size(op, "labels", labels.size(), rows, "rows");
  CorrectCount r;
  for (int64_t n = 0; n < rows; ++n) {
    if (!mask[static_cast<size_t>(n)]) continue;
    const int64_t label = labels[static_cast<size_t>(n)];
    if (label < 0 || label >= classes) {
      throw OpError(op, "labels[" + std::to_string(n) + "] = " + std::to_string(label) +
                            " is outside [0, " + std::to_string(classes) + ")");
    }
    const T* row = &log_prob[static_cast<size_t>(n * classes)];
    int64_t best = 0;
    for (int64_t c = 1; c < classes && !std::isnan(row[best]); ++c) {
      if (std::isnan(row[c]) || row[c] > row[best]) best = c;
    }
    r.correct += best == label ? 1 : 0;
    ++r.total;
  }
  return r;
}

#define GNNRT_INSTANTIATE(T)                                                                     \
  template void add<T>(std::span<const T>, std::span<const T>, std::span<T>);                  \
  template void mul<T>(std::span<const T>, std::span<const T>, std::span<T>);                  \
  template void scale<T>(std::span<const T>, T, std::span<T>);                                 \
  template void head_dot_forward<T>(std::span<const T>, std::span<const T>, int64_t, int64_t,  \
                                    int64_t, std::span<T>);                                    \
  template void head_dot_backward_x<T>(std::span<const T>, std::span<const T>, int64_t,        \
                                       int64_t, int64_t, std::span<T>, std::span<const T>);    \
  template void head_dot_backward_att<T>(std::span<const T>, std::span<const T>, int64_t,      \
                                         int64_t, int64_t, std::span<T>);                      \
  template void head_mean_forward<T>(std::span<const T>, int64_t, int64_t, int64_t,            \
                                     std::span<T>);                                            \
  template void head_mean_backward<T>(std::span<const T>, int64_t, int64_t, int64_t,           \
                                      std::span<T>);                                           \
  template void edge_scale<T>(std::span<const T>, std::span<const T>, int64_t, int64_t,        \
                              int64_t, std::span<T>);                                          \
  template void edge_dot<T>(std::span<const T>, std::span<const T>, int64_t, int64_t, int64_t, \
                            std::span<T>);                                                     \
  template void divide_rows<T>(std::span<const T>, std::span<const int64_t>, int64_t,          \
                               std::span<T>);                                                  \
  template SquaredSum mse_loss_forward<T>(std::span<const T>, std::span<const T>,              \
                                          std::span<const uint8_t>, int64_t, int64_t, LossForm); \
  template void mse_loss_backward<T>(std::span<const T>, std::span<const T>,                   \
                                     std::span<const uint8_t>, int64_t, int64_t, T,            \
                                     std::span<T>, LossForm);                                  \
  template CorrectCount count_correct<T>(std::span<const T>, std::span<const int64_t>,         \
                                         std::span<const uint8_t>, int64_t, int64_t);
GNNRT_FOR_EACH_VALUE(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
