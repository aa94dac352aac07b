#include "runtime/autodiff.h"

#include <fmt/format.h>

#include <unordered_map>
#include <vector>

#include "runtime/op_defs.h"

namespace gnnrt::runtime {
namespace {

// Ops whose results carry no gradient: the flag of their definition, and a
// halo max of values only (a softmax's shift).
bool stops_gradient(const Op& op) {
  return has_flag(op.kind, kNoGradient) || (op.kind == OpKind::kHaloMax && op.inputs.size() == 1);
}

// An optional input: kNoValue when absent.
ValueId optional(const Op& op, size_t k) { return k < op.inputs.size() ? op.inputs[k] : kNoValue; }

class Backward {
 public:
  Backward(Builder& b, const std::vector<bool>& needs) : b_(b), needs_(needs) {}

  void add(ValueId v, ValueId g) {
    if (v == kNoValue || !needs_[static_cast<size_t>(v)]) return;
    auto [it, fresh] = grads_.try_emplace(v, g);
    if (!fresh) it->second = b_.add(it->second, g);
  }
  ValueId grad(ValueId v) const {
    auto it = grads_.find(v);
    return it == grads_.end() ? kNoValue : it->second;
  }
  bool needs(ValueId v) const { return v != kNoValue && needs_[static_cast<size_t>(v)]; }

  // Emits the backward of `op` given the gradient g of its first output.
  void apply(const Op& op, ValueId g) {
    const auto& in = op.inputs;
    const OpAttrs& a = op.attrs;
    const ValueId out = op.outputs.at(0);
    const bool partitioned = b_.program().partitioned;
    switch (op.kind) {
      case OpKind::kFill:
      case OpKind::kGcnNorm:
      case OpKind::kSegmentMax:
      case OpKind::kLayerNormMoments:
      case OpKind::kSparseDropout:
        return;
      case OpKind::kMatMul: {
        const ValueId A = in[0], B = in[1];
        // C = op(A) op(B); see builder.h for the stored layouts.
        if (needs(A)) {
          add(A, a.trans_a() ? b_.matmul(B, g, a.trans_b(), true) : b_.matmul(g, B, false, !a.trans_b()));
        }
        if (needs(B)) {
          add(B, a.trans_b() ? b_.matmul(g, A, true, a.trans_a()) : b_.matmul(A, g, !a.trans_a(), false));
        }
        return;
      }
      case OpKind::kAdd:
        add(in[0], g);
        add(in[1], g);
        return;
      case OpKind::kMul:
        if (needs(in[0])) add(in[0], b_.mul(g, in[1]));
        if (needs(in[1])) add(in[1], b_.mul(g, in[0]));
        return;
      case OpKind::kScale:
        if (needs(in[0])) add(in[0], b_.scale(g, a.alpha()));
        return;
      case OpKind::kBiasAdd:
        add(in[0], g);
        if (needs(in[1])) add(in[1], b_.bias_grad(g));
        return;
      case OpKind::kRelu:
        if (needs(in[0])) add(in[0], b_.relu_grad(in[0], g));
        return;
      case OpKind::kLeakyRelu:
        if (needs(in[0])) add(in[0], b_.leaky_relu_grad(in[0], g, a.alpha()));
        return;
      case OpKind::kElu:
        if (needs(in[0])) add(in[0], b_.elu_grad(in[0], g, a.alpha()));
        return;
      case OpKind::kConcat: {
        int64_t begin = 0;
        for (const ValueId x : in) {
          const int64_t width = b_.shape(x)[1];
          if (needs(x)) add(x, b_.slice_cols(g, begin, width));
          begin += width;
        }
        return;
      }
      case OpKind::kReshape:
        if (needs(in[0])) add(in[0], b_.reshape(g, b_.shape(in[0])));
        return;
      case OpKind::kSliceCols:
        if (needs(in[0])) {
          // The gradient in its columns, zeros on either side.
          const int64_t rows = b_.shape(in[0])[0], cols = b_.shape(in[0])[1];
          std::vector<ValueId> parts;
          if (a.begin() > 0) parts.push_back(b_.fill({rows, a.begin()}, 0.0));
          parts.push_back(g);
          if (const int64_t right = cols - a.begin() - a.width(); right > 0) parts.push_back(b_.fill({rows, right}, 0.0));
          add(in[0], parts.size() == 1 ? g : b_.concat(parts));
        }
        return;
      case OpKind::kActivation:
        if (needs(in[0])) add(in[0], b_.activation_grad(in[0], g, static_cast<ops::Activation>(a.activation()), a.alpha()));
        return;
      case OpKind::kDropout:
        if (needs(in[0])) add(in[0], b_.dropout_grad(g, op.outputs[1], a.alpha()));
        return;
      case OpKind::kLogSoftmax:
        if (needs(in[0])) add(in[0], b_.log_softmax_grad(out, g));
        return;
      case OpKind::kNllLoss:
        if (needs(in[0])) add(in[0], b_.nll_loss_grad(in[0], in[1], in[2], g, optional(op, 3)));
        return;
      case OpKind::kCrossEntropy:
        if (needs(in[0])) add(in[0], b_.cross_entropy_grad(in[0], in[1], in[2], g, optional(op, 3)));
        return;
      case OpKind::kMseLoss:
        if (needs(in[0])) add(in[0], b_.mse_loss_grad(in[0], in[1], in[2], g, optional(op, 3), loss_form_of(a)));
        if (needs(in[1])) {
          add(in[1], b_.scale(b_.mse_loss_grad(in[0], in[1], in[2], g, optional(op, 3), loss_form_of(a)), -1.0));
        }
        return;
      case OpKind::kHeadDot:
        if (needs(in[0])) add(in[0], b_.head_dot_grad_x(in[1], g, a.heads()));
        if (needs(in[1])) add(in[1], b_.head_dot_grad_att(in[0], g, in[1], a.heads()));
        return;
      case OpKind::kHeadMean:
        if (needs(in[0])) add(in[0], b_.head_mean_grad(g, a.heads()));
        return;
      case OpKind::kLayerNorm: {
        // Graph mode: the statistics' gradient terms need sums over every
        // row that used them, on all ranks of a partitioned program.
        const ValueId moments = optional(op, 3), mask = optional(op, 4);
        if (needs(in[0])) {
          ValueId sums = kNoValue;
          if (moments != kNoValue) {
            sums = b_.layer_norm_grad_sums(in[0], in[1], g, moments);
            if (partitioned) sums = b_.allreduce(sums);
          }
          add(in[0], b_.layer_norm_grad_x(in[0], in[1], g, moments, sums, mask, a));
        }
        if (needs(in[1])) add(in[1], b_.layer_norm_grad_gamma(in[0], g, in[1], moments, a));
        if (needs(in[2])) add(in[2], b_.bias_grad(g));
        return;
      }
      case OpKind::kDivideRows:
        if (needs(in[0])) add(in[0], b_.divide_rows(g, in[1]));
        return;
      case OpKind::kGather:
        if (needs(in[0])) add(in[0], b_.gather_grad(a.graph(), g));
        return;
      case OpKind::kEdgeScale:
        if (needs(in[0])) add(in[0], b_.edge_scale(g, in[1]));
        if (needs(in[1])) add(in[1], b_.edge_dot(g, in[0], in[1]));
        return;
      case OpKind::kScatter: {
        const ValueId arg = op.outputs.size() > 1 ? op.outputs[1] : kNoValue;
        if (needs(in[0])) add(in[0], b_.scatter_grad(reduce_of(a), a.graph(), g, arg));
        return;
      }
      case OpKind::kSpmm: {
        const ValueId w = optional(op, 1);
        const ValueId arg = op.outputs.size() > 1 ? op.outputs[1] : kNoValue;
        if (needs(in[0])) add(in[0], b_.spmm_grad_x(reduce_of(a), a.graph(), in[0], w, g, arg));
        if (needs(w)) add(w, b_.spmm_grad_w(reduce_of(a), a.graph(), in[0], g, w, arg));
        return;
      }
      case OpKind::kSparseMatMul:
        // X is an input (features): its values get no gradient.
        if (needs(in[0])) {
          throw ShapeError(fmt::format("program '{}': sparse_matmul ({}): the stored values of a "
                                       "sparse matrix get no gradient",
                                       b_.program().name, op.scope));
        }
        if (needs(in[1])) {
          add(in[1], b_.sparse_matmul_grad_b(a.graph(), in[0], g, in[1], a.trans_b()));
        }
        return;
      case OpKind::kSddmmAdd:
        if (needs(in[0])) add(in[0], b_.sddmm_add_grad_a(a.graph(), g));
        if (needs(in[1])) add(in[1], b_.sddmm_add_grad_b(a.graph(), g));
        return;
      case OpKind::kSddmmDot:
        if (needs(in[0])) add(in[0], b_.sddmm_dot_grad_a(a.graph(), in[1], g, a.heads()));
        if (needs(in[1])) add(in[1], b_.sddmm_dot_grad_b(a.graph(), in[0], g, a.heads()));
        return;
      // The three head-edge ops are each other's gradients (ops/head_edges.h).
      case OpKind::kEdgeHeadDot:
        if (needs(in[0])) add(in[0], b_.head_scatter(a.graph(), g, in[1]));
        if (needs(in[1])) add(in[1], b_.head_gather(a.graph(), g, in[0]));
        return;
      case OpKind::kHeadScatter:
        if (needs(in[0])) add(in[0], b_.edge_head_dot(a.graph(), g, in[1], a.heads()));
        if (needs(in[1])) add(in[1], b_.head_gather(a.graph(), in[0], g));
        return;
      case OpKind::kHeadGather:
        if (needs(in[0])) add(in[0], b_.edge_head_dot(a.graph(), in[1], g, a.heads()));
        if (needs(in[1])) add(in[1], b_.head_scatter(a.graph(), in[0], g));
        return;
      case OpKind::kHeadMatMul:
        // out_h = x_h w_h: dx_h = g_h w_hᵀ, dw_h = x_hᵀ g_h; transposed, dx_h = g_h w_h, dw_h = g_hᵀ x_h.
        if (needs(in[0])) add(in[0], b_.head_matmul(g, in[1], a.heads(), !a.trans_b()));
        if (needs(in[1])) add(in[1], a.trans_b() ? b_.head_outer(g, in[0], a.heads()) : b_.head_outer(in[0], g, a.heads()));
        return;
      case OpKind::kSegmentSoftmax:
        if (needs(in[0])) add(in[0], b_.segment_softmax_grad(a.graph(), out, g));
        return;
      case OpKind::kAttentionSoftmax: {
        if (!needs(in[0]) && !needs(in[1])) return;
        const ValueId logit = b_.attention_softmax_grad(a.graph(), in[0], in[1], out, g, a.alpha());
        if (needs(in[0])) add(in[0], b_.sddmm_add_grad_a(a.graph(), logit));
        if (needs(in[1])) add(in[1], b_.sddmm_add_grad_b(a.graph(), logit));
        return;
      }
      case OpKind::kSegmentExpSum:
        // m (in[1]) is a shift: no gradient.
        if (needs(in[0])) add(in[0], b_.segment_exp_sum_grad(a.graph(), in[0], in[1], g));
        return;
      case OpKind::kSegmentSoftmaxApply:
        if (needs(in[0])) add(in[0], b_.mul(g, out));
        if (needs(in[2])) add(in[2], b_.segment_softmax_apply_grad_s(a.graph(), out, g, in[2]));
        return;
      case OpKind::kKeepWinners:
        if (needs(in[0])) add(in[0], b_.keep_winners(a.graph(), g, in[1]));
        return;
      case OpKind::kAllReduce:
        // d(sum_r L_r)/dx_r = sum_r' dL_r'/dy: the all-reduced gradient.
        if (needs(in[0])) add(in[0], b_.allreduce(g));
        return;
      case OpKind::kHaloSum:
        // The same for the replicas of each vertex.
        if (needs(in[0])) add(in[0], b_.halo_sum(g));
        return;
      case OpKind::kHaloMax:
        if (in.size() == 1) return;  // a shift
        // The whole gradient of the element goes to the global winner: the
        // replicas' shares are summed, then kept on the winning rank only.
        if (needs(in[0])) add(in[0], b_.keep_winners(a.graph(), b_.halo_sum(g), op.outputs[1]));
        return;
      default:
        throw ShapeError(fmt::format("program '{}': {} ({}) has no backward rule",
                                     b_.program().name, to_string(op.kind), op.scope));
    }
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
