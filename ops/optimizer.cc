#include "ops/optimizer.h"

#include <cmath>

namespace gnnrt::ops {
namespace {

constexpr int64_t kParallelElements = 1 << 15;

}  // namespace

void adam_update(const AdamHyper& h, std::span<const float> grad, std::span<float> param,
                 std::span<float> exp_avg, std::span<float> exp_avg_sq) {
  const auto n = static_cast<int64_t>(param.size());
  const double t = static_cast<double>(h.step);
  const float step_size = static_cast<float>(h.lr / (1 - std::pow(h.beta1, t)));
  const float bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(h.beta2, t)));
  const float b1 = static_cast<float>(h.beta1), b2 = static_cast<float>(h.beta2);
  const float wd = static_cast<float>(h.weight_decay), eps = static_cast<float>(h.eps);
  const float decay = static_cast<float>(1 - h.lr * h.weight_decay);
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i];
    if (h.decoupled) {
      param[i] *= decay;
    } else if (wd != 0) {
      g += wd * param[i];
    }
    exp_avg[i] = exp_avg[i] * b1 + g * (1 - b1);
    exp_avg_sq[i] = exp_avg_sq[i] * b2 + g * g * (1 - b2);
    const float denom = std::sqrt(exp_avg_sq[i]) / bias2_sqrt + eps;
    param[i] -= step_size * (exp_avg[i] / denom);
  }
}

void sgd_update(const SgdHyper& h, std::span<const float> grad, std::span<float> param,
                std::span<float> momentum_buffer) {
  const auto n = static_cast<int64_t>(param.size());
  const float lr = static_cast<float>(h.lr), wd = static_cast<float>(h.weight_decay);
  const float mu = static_cast<float>(h.momentum);
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] + wd * param[i];
    if (mu != 0) {
      momentum_buffer[i] = h.step == 1 ? g : mu * momentum_buffer[i] + g;
      g = h.nesterov ? g + mu * momentum_buffer[i] : momentum_buffer[i];
    }
    param[i] -= lr * g;
  }
}

}  // namespace gnnrt::ops
