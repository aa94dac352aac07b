// Optimizer updates as ops of the train-step program, with torch.optim's
// semantics: SGD (momentum, dampening 0, optional Nesterov, L2 weight decay
// added to the gradient), Adam (L2 weight decay added to the gradient) and
// AdamW (decoupled decay: param *= 1 - lr * weight_decay). The learning rate
// and the step count are inputs of each run (RunContext), never compiled in,
// so a learning-rate schedule does not recompile. The moments live in state
// values named like torch's state: "<param>.exp_avg", "<param>.exp_avg_sq",
// "<param>.momentum_buffer" (zero at the first step).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "runtime/builder.h"

namespace gnnrt::runtime {

struct OptimizerConfig {
  enum class Kind { kSgd, kAdam, kAdamW };
  Kind kind = Kind::kAdam;
  double weight_decay = 0;
  double momentum = 0;  // SGD
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

  std::string to_text() const;
};

// Appends one update per parameter with a gradient (grads[i] == kNoValue:
// parameter i is left alone, as torch leaves a parameter without .grad).
void append_optimizer(Builder& b, std::span<const ValueId> params, std::span<const ValueId> grads,
                      const OptimizerConfig& config);

}  // namespace gnnrt::runtime
