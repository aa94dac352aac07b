// Activations and the log softmax, with their gradients: each op's shape rule, cost, kernel and gradient rule.
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "ops/activation.h"
#include "ops/dense.h"
#include "runtime/builder.h"
#include "runtime/defs/checks.h"
#include "runtime/kernel.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime::defs {
namespace {

// The activation kinds are ops::Activation's; the op's attribute stores them
// by number, so op_attrs.proto's list must agree member for member.
static_assert(static_cast<int>(ops::Activation::kSigmoid) == proto::SIGMOID &&
              static_cast<int>(ops::Activation::kSilu) == proto::SILU &&
              static_cast<int>(ops::Activation::kGeluTanh) == proto::GELU_TANH &&
              static_cast<int>(ops::Activation::kExp) == proto::EXP &&
              static_cast<int>(ops::Activation::kTanh) == proto::TANH &&
              static_cast<int>(ops::Activation::kAbs) == proto::ABS &&
              static_cast<int>(ops::Activation::kClip) == proto::CLIP && proto::Activation_ARRAYSIZE == 7,
              "ops::Activation and op_attrs.proto's Activation list the same kinds in the same order");

template <typename T>
double run_relu(const Kernel<T>& run) {
  ops::relu_forward<T>(run.in(0), run.out());
  return 0;
}

void relu_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.relu_grad(d.op.inputs[0], d.g));
}

template <typename T>
double run_leaky_relu(const Kernel<T>& run) {
  ops::leaky_relu_forward<T>(run.in(0), static_cast<T>(run.attrs.negative_slope()), run.out());
  return 0;
}

void leaky_relu_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.leaky_relu_grad(d.op.inputs[0], d.g, d.a.negative_slope()));
}

template <typename T>
double run_elu(const Kernel<T>& run) {
  ops::elu_forward<T>(run.in(0), static_cast<T>(run.attrs.elu_alpha()), run.out());
  return 0;
}

void elu_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.elu_grad(d.op.inputs[0], d.g, d.a.elu_alpha()));
}

template <typename T>
double run_activation(const Kernel<T>& run) {
  ops::activation_forward<T>(static_cast<ops::Activation>(run.attrs.activation()), run.in(0), run.out(), static_cast<T>(run.attrs.clip_bound()));
  return 0;
}

void activation_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0]))
    d.add(d.op.inputs[0],
          d.b.activation_grad(d.op.inputs[0], d.g, static_cast<ops::Activation>(d.a.activation()), d.a.clip_bound()));
}

// relu_grad, leaky_relu_grad, elu_grad, activation_grad, log_softmax_grad:
// (forward value, g) of one shape.
void elementwise_grad(OpCheck& c) {
  c.operands(2, 2);
  c.floating(0, "x");
  c.floating(1, "g");
  c.same_shape(0, 1, c.op().kind == OpKind::kLogSoftmaxGrad ? "out" : "x", "g");
  c.out_float(c.shape(0));
}

template <typename T>
double run_relu_grad(const Kernel<T>& run) {
  ops::relu_backward<T>(run.in(0), run.in(1), run.out());
  return 0;
}

template <typename T>
double run_leaky_relu_grad(const Kernel<T>& run) {
  ops::leaky_relu_backward<T>(run.in(0), static_cast<T>(run.attrs.negative_slope()), run.in(1), run.out());
  return 0;
}

template <typename T>
double run_elu_grad(const Kernel<T>& run) {
  ops::elu_backward<T>(run.in(0), static_cast<T>(run.attrs.elu_alpha()), run.in(1), run.out());
  return 0;
}

template <typename T>
double run_activation_grad(const Kernel<T>& run) {
  ops::activation_backward<T>(static_cast<ops::Activation>(run.attrs.activation()), run.in(0), run.in(1), run.out(),
                              static_cast<T>(run.attrs.clip_bound()));
  return 0;
}

void log_softmax(OpCheck& c) {
  c.operands(1, 1);
  matrix(c, 0, "x");
  c.out_float(c.shape(0));
}

template <typename T>
double run_log_softmax(const Kernel<T>& run) {
  ops::log_softmax_forward<T>(run.in(0), run.out_rows(), run.out_cols(), run.out());
  return 0;
}

void log_softmax_gradient(Gradient& d) {
  if (d.needs(d.op.inputs[0])) d.add(d.op.inputs[0], d.b.log_softmax_grad(d.op.outputs[0], d.g));
}

template <typename T>
double run_log_softmax_grad(const Kernel<T>& run) {
  ops::log_softmax_backward<T>(run.in(0), run.in(1), run.out_rows(), run.out_cols(), run.out());
  return 0;
}

}  // namespace

void define_activation(OpTable& t) {
  t.add({OpKind::kRelu, 0, unary, nullptr, GNNRT_KERNEL(run_relu), relu_gradient});
  t.add({OpKind::kLeakyRelu, 0, unary, nullptr, GNNRT_KERNEL(run_leaky_relu), leaky_relu_gradient});
  t.add({OpKind::kElu, 0, unary, nullptr, GNNRT_KERNEL(run_elu), elu_gradient});
  t.add({OpKind::kActivation, 0, unary, nullptr, GNNRT_KERNEL(run_activation), activation_gradient});
  t.add({OpKind::kReluGrad, 0, elementwise_grad, nullptr, GNNRT_KERNEL(run_relu_grad), nullptr});
  t.add({OpKind::kLeakyReluGrad, 0, elementwise_grad, nullptr, GNNRT_KERNEL(run_leaky_relu_grad), nullptr});
  t.add({OpKind::kEluGrad, 0, elementwise_grad, nullptr, GNNRT_KERNEL(run_elu_grad), nullptr});
  t.add({OpKind::kActivationGrad, 0, elementwise_grad, nullptr, GNNRT_KERNEL(run_activation_grad), nullptr});
  t.add({OpKind::kLogSoftmax, 0, log_softmax, nullptr, GNNRT_KERNEL(run_log_softmax), log_softmax_gradient});
  t.add({OpKind::kLogSoftmaxGrad, 0, elementwise_grad, nullptr, GNNRT_KERNEL(run_log_softmax_grad), nullptr});
}

}  // namespace gnnrt::runtime::defs

// The Builder's methods that emit this family's ops (runtime/builder.h).
namespace gnnrt::runtime {

ValueId Builder::relu(ValueId x) { return emit(OpKind::kRelu, {x}); }

ValueId Builder::leaky_relu(ValueId x, double slope) {
  OpAttrs a;
  a.set_negative_slope(slope);
  return emit(OpKind::kLeakyRelu, {x}, a);
}

ValueId Builder::activation(ValueId x, ops::Activation kind, double bound) {
  OpAttrs a;
  a.set_activation(static_cast<proto::Activation>(kind));
  if (kind == ops::Activation::kClip) a.set_clip_bound(bound);
  return emit(OpKind::kActivation, {x}, a);
}

ValueId Builder::activation_grad(ValueId x, ValueId g, ops::Activation kind, double bound) {
  OpAttrs a;
  a.set_activation(static_cast<proto::Activation>(kind));
  if (kind == ops::Activation::kClip) a.set_clip_bound(bound);
  return emit(OpKind::kActivationGrad, {x, g}, a);
}

ValueId Builder::elu(ValueId x, double alpha) {
  OpAttrs a;
  a.set_elu_alpha(alpha);
  return emit(OpKind::kElu, {x}, a);
}

ValueId Builder::log_softmax(ValueId x) { return emit(OpKind::kLogSoftmax, {x}); }

ValueId Builder::relu_grad(ValueId x, ValueId g) { return emit(OpKind::kReluGrad, {x, g}); }

ValueId Builder::leaky_relu_grad(ValueId x, ValueId g, double slope) {
  OpAttrs a;
  a.set_negative_slope(slope);
  return emit(OpKind::kLeakyReluGrad, {x, g}, a);
}

ValueId Builder::elu_grad(ValueId x, ValueId g, double alpha) {
  OpAttrs a;
  a.set_elu_alpha(alpha);
  return emit(OpKind::kEluGrad, {x, g}, a);
}

ValueId Builder::log_softmax_grad(ValueId out, ValueId g) { return emit(OpKind::kLogSoftmaxGrad, {out, g}); }

}  // namespace gnnrt::runtime
