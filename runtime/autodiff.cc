#include "runtime/autodiff.h"

#include <fmt/format.h>

#include <unordered_map>
#include <vector>

#include "runtime/builder.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime {
namespace {

// Ops whose results carry no gradient: the flag of their definition, and a
// halo max of values only (a softmax's shift).
bool stops_gradient(const Op& op) {
  return has_flag(op.kind, kNoGradient) || (op.kind == OpKind::kHaloMax && op.inputs.size() == 1);
}

class Backward {
 public:
  Backward(Builder& b, const std::vector<bool>& needs) : b_(b), needs_(needs) {}

  void add(ValueId v, ValueId g) { Gradient::sum_into(b_, needs_, grads_, v, g); }
  ValueId grad(ValueId v) const {
    auto it = grads_.find(v);
    return it == grads_.end() ? kNoValue : it->second;
  }

  // Emits the backward of `op` given the gradient g of its first output,
  // by the gradient rule of its definition (runtime/defs/).
  void apply(const Op& op, ValueId g) {
    const OpDef& def = op_def(op.kind);
    if (def.gradient == nullptr) {
      if (stops_gradient(op)) return;
      throw ShapeError(fmt::format("program '{}': {} ({}) has no backward rule", b_.program().name,
                                   to_string(op.kind), op.scope));
    }
    Gradient d(b_, op, g, needs_, grads_);
    def.gradient(d);
  }

 private:
  Builder& b_;
  const std::vector<bool>& needs_;
  std::unordered_map<ValueId, ValueId> grads_;
};

}  // namespace

std::vector<ValueId> append_backward(Builder& b, std::span<const ValueId> outputs,
                                     std::span<const ValueId> seeds, std::span<const ValueId> wrt) {
  const Program& p = b.program();
  // A value needs a gradient when it is in wrt or computed (by an op that
  // passes gradients) from one that is.
  std::vector<bool> needs(p.values.size(), false);
  for (ValueId v : wrt) needs[static_cast<size_t>(v)] = true;
  const size_t forward_ops = p.ops.size();
  for (size_t i = 0; i < forward_ops; ++i) {
    const Op& op = p.ops[i];
    if (stops_gradient(op)) continue;
    bool any = false;
    for (ValueId v : op.inputs) any = any || (v != kNoValue && needs[static_cast<size_t>(v)]);
    if (!any) continue;
    for (ValueId v : op.outputs) {
      if (is_floating(p.value(v).dtype)) needs[static_cast<size_t>(v)] = true;
    }
  }
  Backward backward(b, needs);
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (needs[static_cast<size_t>(outputs[k])]) backward.add(outputs[k], seeds[k]);
  }
  for (size_t i = forward_ops; i-- > 0;) {
    const Op op = b.program().ops[i];  // a copy: apply() appends to ops
    if (op.outputs.empty()) continue;
    const ValueId g = backward.grad(op.outputs[0]);
    if (g == kNoValue) continue;
    Builder::Scope scope(b, op.scope);
    backward.apply(op, g);
  }
  std::vector<ValueId> grads;
  grads.reserve(wrt.size());
  for (ValueId v : wrt) grads.push_back(backward.grad(v));
  return grads;
}

std::vector<ValueId> append_backward(Builder& b, ValueId loss, std::span<const ValueId> wrt) {
  const Program& p = b.program();
  if (p.value(loss).shape != std::vector<int64_t>{1}) {
    throw ShapeError(fmt::format("program '{}': the loss '{}' must be a scalar [1], not {}",
                                 p.name, p.value(loss).name, shape_string(p.value(loss).shape)));
  }
  ValueId seed;
  {
    Builder::Scope scope(b, "loss");
    seed = b.fill({1}, 1.0);
  }
  const ValueId outputs[] = {loss};
  const ValueId seeds[] = {seed};
  return append_backward(b, outputs, seeds, wrt);
}

}  // namespace gnnrt::runtime
