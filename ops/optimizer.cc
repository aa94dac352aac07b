#include "ops/optimizer.h"

#include <cmath>
#include <string>

#include "ops/error.h"
#include "ops/instantiate.h"
#include "ops/loops.h"

namespace gnnrt::ops {
namespace {

using detail::kParallelElements;

void expect_step(std::string_view op, int64_t step) {
  if (step < 1) throw OpError(op, "step must be >= 1, got " + std::to_string(step));
}

}  // namespace

template <typename T>
void adam_update(const AdamHyper& h, std::span<const T> grad, std::span<T> param,
                 std::span<T> exp_avg, std::span<T> exp_avg_sq) {
  constexpr std::string_view op = "adam_update";
  const auto n = static_cast<int64_t>(param.size());
  expect_size(op, "grad", grad.size(), n, "len(param)");
  expect_size(op, "exp_avg", exp_avg.size(), n, "len(param)");
  expect_size(op, "exp_avg_sq", exp_avg_sq.size(), n, "len(param)");
  expect_step(op, h.step);
  const double t = static_cast<double>(h.step);
  const T step_size = static_cast<T>(h.lr / (1 - std::pow(h.beta1, t)));
  const T bias2_sqrt = static_cast<T>(std::sqrt(1 - std::pow(h.beta2, t)));
  const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
  const T wd = static_cast<T>(h.weight_decay), eps = static_cast<T>(h.eps);
  const T decay = static_cast<T>(1 - h.lr * h.weight_decay);
  // Raw pointers and the weight-decay form chosen outside the loop, so the
  // loop vectorises (docs/kernels.md).
  const T* __restrict gp = grad.data();
  T* __restrict w = param.data();
  T* __restrict m = exp_avg.data();
  T* __restrict v = exp_avg_sq.data();
  const bool shrink = h.decoupled, l2 = !h.decoupled && wd != 0;
  detail::for_blocks(n, 4096, n > kParallelElements, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      T g = gp[i];
      T p = w[i];
      if (shrink) p *= decay;
      if (l2) g += wd * p;
      m[i] = m[i] * b1 + g * (1 - b1);
      v[i] = v[i] * b2 + g * g * (1 - b2);
      const T denom = std::sqrt(v[i]) / bias2_sqrt + eps;
      w[i] = p - step_size * (m[i] / denom);
    }
  });
}

template <typename T>
void sgd_update(const SgdHyper& h, std::span<const T> grad, std::span<T> param,
                std::span<T> momentum_buffer) {
  constexpr std::string_view op = "sgd_update";
  const auto n = static_cast<int64_t>(param.size());
  expect_size(op, "grad", grad.size(), n, "len(param)");
  if (h.momentum != 0) expect_size(op, "momentum_buffer", momentum_buffer.size(), n, "len(param)");
  expect_step(op, h.step);
  const T lr = static_cast<T>(h.lr), wd = static_cast<T>(h.weight_decay);
  const T mu = static_cast<T>(h.momentum);
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    T g = grad[i] + wd * param[i];
    if (mu != 0) {
      momentum_buffer[i] = h.step == 1 ? g : mu * momentum_buffer[i] + g;
      g = h.nesterov ? g + mu * momentum_buffer[i] : momentum_buffer[i];
    }
    param[i] -= lr * g;
  }
}

#define GNNRT_INSTANTIATE(T)                                                                  \
  template void adam_update<T>(const AdamHyper&, std::span<const T>, std::span<T>,            \
                               std::span<T>, std::span<T>);                                   \
  template void sgd_update<T>(const SgdHyper&, std::span<const T>, std::span<T>, std::span<T>);
GNNRT_FOR_EACH_VALUE(GNNRT_INSTANTIATE)

}  // namespace gnnrt::ops
