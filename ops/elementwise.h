// Small node-wise and edge-wise ops the layers need next to the big kernels:
// sums, products and scalings, per-head attention dot products (GAT),
// per-edge scaling of messages, head means, rows divided by a degree, the
// masked MSE loss and the correct-count metric.
//
// Layout: row-major; x [N, H*C] holds head h's channel c at column h*C + c;
// per-edge weights [E, H] (or [E] for H = 1). T is float (training) or
// double (finite-difference checks).
// Contract: every output is overwritten and must not alias an input (add,
// mul and scale allow out == an input). Each function checks every span
// against the sizes it is given and throws OpError naming the op, the
// argument and the expected size before writing anything; labels are
// checked too (OpError names the first bad row). OpenMP over rows;
// reductions over rows run in row order, so results are bitwise identical
// for any thread count. Blocking.
#pragma once

#include <cstdint>
#include <span>

namespace gnnrt::ops {

// out = a + b, out = a * b, out = x * alpha (same sizes).
template <typename T>
void add(std::span<const T> a, std::span<const T> b, std::span<T> out);
template <typename T>
void mul(std::span<const T> a, std::span<const T> b, std::span<T> out);
template <typename T>
void scale(std::span<const T> x, T alpha, std::span<T> out);

// x [N, H*C], att [H*C] -> out [N, H]: out[n, h] = sum_c x[n, h, c] * att[h, c].
template <typename T>
void head_dot_forward(std::span<const T> x, std::span<const T> att, int64_t rows, int64_t heads,
                      int64_t channels, std::span<T> out);
// grad_x [N, H*C] = g[n, h] * att[h, c], plus plus[n, h, c] when plus is
// given: a gradient summed into the one x already has, with the bits of
// add(plus, head_dot_backward_x(att, g)) (runtime/passes.h).
template <typename T>
void head_dot_backward_x(std::span<const T> att, std::span<const T> g, int64_t rows,
                         int64_t heads, int64_t channels, std::span<T> grad_x,
                         std::span<const T> plus = {});
// grad_att [H*C] = sum_n g[n, h] * x[n, h, c] (rows summed in order).
template <typename T>
void head_dot_backward_att(std::span<const T> x, std::span<const T> g, int64_t rows,
                           int64_t heads, int64_t channels, std::span<T> grad_att);

// x [N, H*C] -> out [N, C], the mean over heads; backward spreads g / H.
template <typename T>
void head_mean_forward(std::span<const T> x, int64_t rows, int64_t heads, int64_t channels,
                       std::span<T> out);
template <typename T>
void head_mean_backward(std::span<const T> g, int64_t rows, int64_t heads, int64_t channels,
                        std::span<T> grad_x);

// messages [E, H*C] * weight [E, H] -> out [E, H*C] (weight [E] is H = 1).
template <typename T>
void edge_scale(std::span<const T> messages, std::span<const T> weight, int64_t edges,
                int64_t heads, int64_t channels, std::span<T> out);
// out [E, H] = per-head dot of g and messages (the weight's gradient).
template <typename T>
void edge_dot(std::span<const T> g, std::span<const T> messages, int64_t edges, int64_t heads,
              int64_t channels, std::span<T> out);

// out [N, F] = x[n] / degree[n], and 0 where degree[n] = 0 (a mean over a
// row's degree contributions; the sum of an empty row is 0 anyway).
// degree [N] must not be negative. Its own backward (linear).
template <typename T>
void divide_rows(std::span<const T> x, std::span<const int64_t> degree, int64_t cols,
                 std::span<T> out);

// Squared error over the rows with mask = 1: returns the sum of squared
// differences and the element count (rows used * cols). The loss is
// sum / count, where the count may be another (a global one across ranks).
struct SquaredSum {
  double sum = 0;
  int64_t count = 0;
};
// The family's forms, by the numbers of runtime/op_attrs.proto's LossForm:
// the sum of (pred - target)^2 (MSE), of |pred - target| (L1), of
// pred - target itself (kLinear: the mean of a value, such as a KL term
// computed element by element, against a zero target), or of
// max(z, 0) - z y + log(1 + e^-|z|) for logits z = pred and targets y in
// [0, 1] (kLogistic: torch's binary_cross_entropy_with_logits, in its
// overflow-free form).
enum class LossForm : int { kSquared = 0, kAbsolute = 1, kLinear = 2, kLogistic = 3 };
template <typename T>
SquaredSum mse_loss_forward(std::span<const T> pred, std::span<const T> target,
                            std::span<const uint8_t> mask, int64_t rows, int64_t cols,
                            LossForm form = LossForm::kSquared);
// grad_pred = scale * 2 (pred - target) on masked rows, 0 elsewhere
// (scale: the upstream gradient over the count); kAbsolute: scale *
// sign(pred - target), 0 where they are equal (torch's L1 gradient);
// kLinear: scale; kLogistic: scale * (sigmoid(pred) - target).
template <typename T>
void mse_loss_backward(std::span<const T> pred, std::span<const T> target,
                       std::span<const uint8_t> mask, int64_t rows, int64_t cols, T scale,
                       std::span<T> grad_pred, LossForm form = LossForm::kSquared);

// Rows with mask = 1 whose first largest value is at the label (torch.argmax's
// rule: the first of equal maxima; NaN counts as largest). Labels of masked
// rows must lie in [0, classes).
struct CorrectCount {
  int64_t correct = 0;
  int64_t total = 0;
};
template <typename T>
CorrectCount count_correct(std::span<const T> log_prob, std::span<const int64_t> labels,
                           std::span<const uint8_t> mask, int64_t rows, int64_t classes);

}  // namespace gnnrt::ops
