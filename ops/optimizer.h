// Optimizer steps over one parameter tensor, with the arithmetic of
// torch.optim (1.13, single-tensor path): float32 tensors, double scalars.
//   Adam:  g' = g + wd * p (AdamW instead: p *= 1 - lr * wd);
//          m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;
//          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//   SGD:   g' = g + wd * p;  buf = momentum * buf + g' (buf = g' at t = 1);
//          p -= lr * (nesterov ? g' + momentum * buf : buf)
// step t counts from 1. T is float (training) or double. grad, param and
// the state spans must all have the parameter's size (OpError naming the
// span otherwise, before anything is written); param and state are updated
// in place. step must be >= 1. OpenMP over elements (element-wise, so
// deterministic for any thread count). Blocking.
#pragma once

#include <cstdint>
#include <span>

namespace gnnrt::ops {

struct AdamHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW
  int64_t step = 1;
};
template <typename T>
void adam_update(const AdamHyper& h, std::span<const T> grad, std::span<T> param,
                 std::span<T> exp_avg, std::span<T> exp_avg_sq);

struct SgdHyper {
  double lr = 1e-2, momentum = 0, weight_decay = 0;
  bool nesterov = false;
  int64_t step = 1;
};
// momentum_buffer is unused (and may be empty) when momentum = 0.
template <typename T>
void sgd_update(const SgdHyper& h, std::span<const T> grad, std::span<T> param,
                std::span<T> momentum_buffer);

}  // namespace gnnrt::ops
