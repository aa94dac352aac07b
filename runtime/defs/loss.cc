// Losses (negative log-likelihood, cross-entropy, squared and absolute error, BCE with logits) and their gradients: each op's shape
// rule, cost, kernel and gradient rule.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <stdexcept>
#include <vector>

#include "ops/dense.h"
#include "ops/elementwise.h"
#include "runtime/builder.h"
#include "runtime/defs/checks.h"
#include "runtime/kernel.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime::defs {
namespace {

// A loss is the mean over its real rows (loss_count): the sum over the count,
// 0 when there are none. Its gradient's seed is divided the same way.
template <typename T>
void write_mean(const Kernel<T>& run, double sum, int64_t count) {
  run.out()[0] = count > 0 ? static_cast<T>(sum / static_cast<double>(count)) : T(0);
}
template <typename T>
T seed_per_row(const Kernel<T>& run, int64_t count) {
  return count > 0 ? run.in(3)[0] / static_cast<T>(count) : T(0);
}

// (x, labels, mask[, count]) -> [1]
void nll_loss(OpCheck& c) {
  c.operands(3, 4);
  class_loss(c, c.op().kind == OpKind::kNllLoss ? "log_prob" : "x");
  optional_count(c, 3);
  c.out_float({1});
}

template <typename T>
double run_nll_loss(const Kernel<T>& run) {
  const ops::LossSum s =
      ops::nll_loss_forward<T, int64_t>(run.in(0), run.in_rows(0), run.in_cols(0), run.in_i64(1), run.in_u8(2));
  write_mean(run, s.sum, run.loss_count(2, 3, 1));
  return 0;
}

void nll_loss_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0]))
    d.add(d.op.inputs[0], d.b.nll_loss_grad(d.op.inputs[0], d.op.inputs[1], d.op.inputs[2], d.g, d.optional(3)));
}

template <typename T>
double run_cross_entropy(const Kernel<T>& run) {
  const ops::LossSum s =
      ops::cross_entropy_forward<T, int64_t>(run.in(0), run.in_rows(0), run.in_cols(0), run.in_i64(1), run.in_u8(2));
  write_mean(run, s.sum, run.loss_count(2, 3, 1));
  return 0;
}

void cross_entropy_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0]))
    d.add(d.op.inputs[0], d.b.cross_entropy_grad(d.op.inputs[0], d.op.inputs[1], d.op.inputs[2], d.g, d.optional(3)));
}

// (pred, target, mask[, count]) -> [1]
void mse_loss(OpCheck& c) {
  c.operands(3, 4);
  c.rank(0, 2, "pred");
  c.same_shape(0, 1, "pred", "target");
  c.floating(0, "pred");
  c.floating(1, "target");
  vector_of(c, 2, DType::kBool, c.rows(0), "mask");
  optional_count(c, 3);
  c.out_float({1});
}

template <typename T>
double run_mse_loss(const Kernel<T>& run) {
  const ops::SquaredSum s = ops::mse_loss_forward<T>(run.in(0), run.in(1), run.in_u8(2), run.in_rows(0), run.in_cols(0),
                                                     loss_form_of(run.attrs));
  write_mean(run, s.sum, run.loss_count(2, 3, run.in_cols(0)));
  return 0;
}

void mse_loss_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0]))
    d.add(d.op.inputs[0],
          d.b.mse_loss_grad(d.op.inputs[0], d.op.inputs[1], d.op.inputs[2], d.g, d.optional(3), loss_form_of(d.a)));
  if (d.needs(d.op.inputs[1])) {
    if (loss_form_of(d.a) == ops::LossForm::kLogistic) {
      throw std::invalid_argument("bce_with_logits: the target takes no gradient (it is a label)");
    }
    d.add(d.op.inputs[1], d.b.scale(d.b.mse_loss_grad(d.op.inputs[0], d.op.inputs[1], d.op.inputs[2], d.g,
                                                      d.optional(3), loss_form_of(d.a)),
                                    -1.0));
  }
}

// (x, labels, mask, g[, count]) -> x's shape
void nll_loss_grad(OpCheck& c) {
  c.operands(4, 5);
  class_loss(c, c.op().kind == OpKind::kNllLossGrad ? "log_prob" : "x");
  loss_seed(c, 3);
  optional_count(c, 4);
  c.out_float(c.shape(0));
}

template <typename T>
double run_nll_loss_grad(const Kernel<T>& run) {
  const T scale = seed_per_row(run, run.loss_count(2, 4, 1));
  ops::nll_loss_backward<T, int64_t>(run.out_rows(), run.out_cols(), run.in_i64(1), run.in_u8(2), scale, run.out());
  return 0;
}

template <typename T>
double run_cross_entropy_grad(const Kernel<T>& run) {
  const T scale = seed_per_row(run, run.loss_count(2, 4, 1));
  ops::cross_entropy_backward<T, int64_t>(run.in(0), run.out_rows(), run.out_cols(), run.in_i64(1), run.in_u8(2), scale,
                                          run.out());
  return 0;
}

// (pred, target, mask, g[, count]) -> pred's shape
void mse_loss_grad(OpCheck& c) {
  c.operands(4, 5);
  matrix(c, 0, "pred");
  c.floating(1, "target");
  c.same_shape(0, 1, "pred", "target");
  vector_of(c, 2, DType::kBool, c.rows(0), "mask");
  loss_seed(c, 3);
  optional_count(c, 4);
  c.out_float(c.shape(0));
}

template <typename T>
double run_mse_loss_grad(const Kernel<T>& run) {
  const T scale = seed_per_row(run, run.loss_count(2, 4, run.out_cols()));
  ops::mse_loss_backward<T>(run.in(0), run.in(1), run.in_u8(2), run.out_rows(), run.out_cols(), scale, run.out(),
                            loss_form_of(run.attrs));
  return 0;
}

}  // namespace

void define_loss(OpTable& t) {
  t.add({OpKind::kNllLoss, 0, nll_loss, nullptr, GNNRT_KERNEL(run_nll_loss), nll_loss_gradient});
  t.add({OpKind::kCrossEntropy, 0, nll_loss, nullptr, GNNRT_KERNEL(run_cross_entropy), cross_entropy_gradient});
  t.add({OpKind::kMseLoss, 0, mse_loss, nullptr, GNNRT_KERNEL(run_mse_loss), mse_loss_gradient});
  t.add({OpKind::kNllLossGrad, 0, nll_loss_grad, nullptr, GNNRT_KERNEL(run_nll_loss_grad), nullptr});
  t.add({OpKind::kCrossEntropyGrad, 0, nll_loss_grad, nullptr, GNNRT_KERNEL(run_cross_entropy_grad), nullptr});
  t.add({OpKind::kMseLossGrad, 0, mse_loss_grad, nullptr, GNNRT_KERNEL(run_mse_loss_grad), nullptr});
}

}  // namespace gnnrt::runtime::defs

// The Builder's methods that emit this family's ops (runtime/builder.h).
namespace gnnrt::runtime {

ValueId Builder::nll_loss(ValueId log_prob, ValueId labels, ValueId mask) {
  return emit(OpKind::kNllLoss, with_count({log_prob, labels, mask}, mask));
}

ValueId Builder::cross_entropy(ValueId x, ValueId labels, ValueId mask) {
  return emit(OpKind::kCrossEntropy, with_count({x, labels, mask}, mask));
}

ValueId Builder::l1_loss(ValueId pred, ValueId target, ValueId mask) {
  OpAttrs a;
  a.set_loss_form(proto::ABSOLUTE);
  return emit(OpKind::kMseLoss, with_count({pred, target, mask}, mask), a);
}

ValueId Builder::mean_loss(ValueId pred, ValueId target, ValueId mask) {
  OpAttrs a;
  a.set_loss_form(proto::LINEAR);
  return emit(OpKind::kMseLoss, with_count({pred, target, mask}, mask), a);
}

ValueId Builder::bce_with_logits(ValueId logits, ValueId target, ValueId mask) {
  OpAttrs a;
  a.set_loss_form(proto::LOGISTIC);
  return emit(OpKind::kMseLoss, with_count({logits, target, mask}, mask), a);
}

ValueId Builder::mse_loss(ValueId pred, ValueId target, ValueId mask) {
  return emit(OpKind::kMseLoss, with_count({pred, target, mask}, mask));
}

ValueId Builder::nll_loss_grad(ValueId log_prob, ValueId labels, ValueId mask, ValueId g,
                               ValueId count) {
  return emit(OpKind::kNllLossGrad, loss_grad_inputs(log_prob, labels, mask, g, count));
}

ValueId Builder::cross_entropy_grad(ValueId x, ValueId labels, ValueId mask, ValueId g,
                                    ValueId count) {
  return emit(OpKind::kCrossEntropyGrad, loss_grad_inputs(x, labels, mask, g, count));
}

ValueId Builder::mse_loss_grad(ValueId pred, ValueId target, ValueId mask, ValueId g,
                               ValueId count, ops::LossForm form) {
  OpAttrs a;
  a.set_loss_form(static_cast<proto::LossForm>(form));
  return emit(OpKind::kMseLossGrad, loss_grad_inputs(pred, target, mask, g, count), a);
}

}  // namespace gnnrt::runtime
