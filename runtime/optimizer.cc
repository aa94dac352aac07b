#include "runtime/optimizer.h"

#include <fmt/format.h>

#include <stdexcept>

namespace gnnrt::runtime {

std::string OptimizerConfig::to_text() const {
  static constexpr const char* kNames[] = {"sgd", "adam", "adamw"};
  return fmt::format("{} weight_decay={} momentum={} nesterov={} betas=({}, {}) eps={}",
                     kNames[static_cast<int>(kind)], weight_decay, momentum, nesterov, beta1,
                     beta2, eps);
}

void append_optimizer(Builder& b, std::span<const ValueId> params, std::span<const ValueId> grads,
                      const OptimizerConfig& config) {
  OpAttrs hyper;
  hyper.set_weight_decay(config.weight_decay);
  hyper.set_momentum(config.momentum);
  hyper.set_nesterov(config.nesterov);
  hyper.set_beta1(config.beta1);
  hyper.set_beta2(config.beta2);
  hyper.set_eps(config.eps);
  hyper.set_decoupled(config.kind == OptimizerConfig::Kind::kAdamW);
  Builder::Scope scope(b, "optimizer");
  for (size_t i = 0; i < params.size(); ++i) {
    if (grads[i] == kNoValue) continue;
    const ValueId p = params[i];
    // Copies: declaring state appends to the value table, moving its entries.
    const std::string name = b.program().value(p).name;
    const std::vector<int64_t> shape = b.shape(p);
    if (config.kind == OptimizerConfig::Kind::kSgd) {
      b.sgd_update(p, grads[i], b.state(name + ".momentum_buffer", DType::kF32, shape), hyper);
    } else {
      const ValueId m = b.state(name + ".exp_avg", DType::kF32, shape);
      const ValueId v = b.state(name + ".exp_avg_sq", DType::kF32, shape);
      b.adam_update(p, grads[i], m, v, hyper);
    }
  }
}

}  // namespace gnnrt::runtime
