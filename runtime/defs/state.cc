// State updates in place: optimizer steps and metric accumulators: each op's shape rule, cost, kernel and gradient
// rule.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "ops/elementwise.h"
#include "ops/optimizer.h"
#include "runtime/builder.h"
#include "runtime/defs/checks.h"
#include "runtime/kernel.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime::defs {
namespace {

void adam_update(OpCheck& c) {
  c.operands(4, 4);
  c.floating(0, "param");
  c.same_shape(0, 1, "param", "grad");
  c.same_shape(0, 2, "param", "m");
  c.same_shape(0, 3, "param", "v");
}

template <typename T>
double run_adam_update(const Kernel<T>& run) {
  ops::adam_update<T>({.lr = run.context.lr,
                       .beta1 = run.attrs.beta1(),
                       .beta2 = run.attrs.beta2(),
                       .eps = run.attrs.eps(),
                       .weight_decay = run.attrs.weight_decay(),
                       .decoupled = run.attrs.decoupled(),
                       .step = run.context.step},
                      run.in(1), run.inout(0), run.inout(2), run.inout(3));
  return 0;
}

void sgd_update(OpCheck& c) {
  c.operands(3, 3);
  c.floating(0, "param");
  c.same_shape(0, 1, "param", "grad");
  c.same_shape(0, 2, "param", "momentum buffer");
}

template <typename T>
double run_sgd_update(const Kernel<T>& run) {
  ops::sgd_update<T>({.lr = run.context.lr,
                      .momentum = run.attrs.momentum(),
                      .weight_decay = run.attrs.weight_decay(),
                      .nesterov = run.attrs.nesterov(),
                      .step = run.context.step},
                     run.in(1), run.inout(0), run.inout(2));
  return 0;
}

// metrics[slot] += scalar
void accumulate(OpCheck& c) {
  c.operands(2, 2);
  c.dtype(0, DType::kF64, "metrics");
  const uint64_t slot = c.attrs().metrics_slot();
  if (static_cast<int64_t>(slot) >= c.in(0).elements()) {
    c.fail(fmt::format("slot {} is outside metrics {}", slot, shape_string(c.shape(0))));
  }
  if (!is_floating(c.in(1).dtype) || c.in(1).elements() != 1) {
    c.fail(fmt::format("the scalar must be one float, is {} {}", to_string(c.in(1).dtype), shape_string(c.shape(1))));
  }
}

template <typename T>
double run_accumulate(const Kernel<T>& run) {
  run.inout_f64(0)[run.attrs.metrics_slot()] += static_cast<double>(run.in(1)[0]);
  return 0;
}

// (metrics, log_prob, labels, mask): metrics[slot], metrics[slot + 1]
void count_correct(OpCheck& c) {
  c.operands(4, 4);
  c.dtype(0, DType::kF64, "metrics");
  const uint64_t slot = c.attrs().metrics_slot();
  if (static_cast<int64_t>(slot) + 1 >= c.in(0).elements()) {
    c.fail(fmt::format("slots {}..{} are outside metrics {}", slot, slot + 1, shape_string(c.shape(0))));
  }
  class_loss(c, "log_prob", 1);
}

template <typename T>
double run_count_correct(const Kernel<T>& run) {
  const ops::CorrectCount c =
      ops::count_correct<T>(run.in(1), run.in_i64(2), run.in_u8(3), run.in_rows(1), run.in_cols(1));
  auto metrics = run.inout_f64(0);
  metrics[run.attrs.metrics_slot()] += static_cast<double>(c.correct);
  metrics[run.attrs.metrics_slot() + 1] += static_cast<double>(c.total);
  return 0;
}

}  // namespace

void define_state(OpTable& t) {
  t.add({OpKind::kAdamUpdate, kSideEffects, adam_update, nullptr, GNNRT_KERNEL(run_adam_update), nullptr});
  t.add({OpKind::kSgdUpdate, kSideEffects, sgd_update, nullptr, GNNRT_KERNEL(run_sgd_update), nullptr});
  t.add({OpKind::kAccumulate, kSideEffects, accumulate, nullptr, GNNRT_KERNEL(run_accumulate), nullptr});
  t.add({OpKind::kCountCorrect, kSideEffects, count_correct, nullptr, GNNRT_KERNEL(run_count_correct), nullptr});
}

}  // namespace gnnrt::runtime::defs

// The Builder's methods that emit this family's ops (runtime/builder.h).
namespace gnnrt::runtime {

void Builder::adam_update(ValueId param, ValueId grad, ValueId m, ValueId v, const OpAttrs& hyper) {
  emit_op(OpKind::kAdamUpdate, {param, grad, m, v}, hyper);
}

void Builder::sgd_update(ValueId param, ValueId grad, ValueId buffer, const OpAttrs& hyper) {
  emit_op(OpKind::kSgdUpdate, {param, grad, buffer}, hyper);
}

void Builder::accumulate(ValueId metrics, ValueId scalar, uint64_t slot) {
  OpAttrs a;
  a.set_metrics_slot(slot);
  emit_op(OpKind::kAccumulate, {metrics, scalar}, a);
}

void Builder::count_correct(ValueId metrics, ValueId log_prob, ValueId labels, ValueId mask,
                            uint64_t slot) {
  OpAttrs a;
  a.set_metrics_slot(slot);
  emit_op(OpKind::kCountCorrect, {metrics, log_prob, labels, mask}, a);
}

}  // namespace gnnrt::runtime
