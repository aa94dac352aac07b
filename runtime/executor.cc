// Core::run: binds a compiled program's values to memory and executes its
// ops one after another, each through its kernel in ops/.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ops/dense.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/gather.h"
#include "ops/gcn_norm.h"
#include "ops/layer_norm.h"
#include "ops/optimizer.h"
#include "ops/scatter.h"
#include "ops/sddmm.h"
#include "ops/segment_softmax.h"
#include "ops/spmm.h"
#include "runtime/core.h"

namespace gnnrt::runtime {

struct Core::Bound {
  std::vector<std::byte*> data;          // per value; null for unplanned temps
  std::vector<const Adjacency*> graphs;  // per graph
};

Core::Bound Core::bind(const CompiledProgram& compiled) {
  const Program& p = compiled.program;
  if (static_cast<int64_t>(arena_.size()) < compiled.plan.arena_bytes) {
    arena_ = HostVector<std::byte>(static_cast<size_t>(compiled.plan.arena_bytes));
  }
  Bound b;
  b.data.resize(p.values.size(), nullptr);
  for (size_t i = 0; i < p.values.size(); ++i) {
    const ValueInfo& v = p.values[i];
    if (v.role == Role::kTemp) {
      if (v.offset >= 0) b.data[i] = arena_.data() + v.offset;
      continue;
    }
    if (!memory_.has(v.name)) {
      if (v.role != Role::kState) {
        throw RunError(fmt::format("program '{}': {} '{}' {} is not bound on the core",
                                   p.name, to_string(v.role), v.name, shape_string(v.shape)));
      }
      memory_.put(v.name, NpyArray(v.dtype, v.shape));  // fresh state starts at zero
    }
    NpyArray& t = memory_.at(v.name);
    if (t.dtype() != v.dtype || t.shape() != v.shape) {
      throw RunError(fmt::format("program '{}': {} '{}' is bound as {} {}, the program needs {} {}",
                                 p.name, to_string(v.role), v.name, to_string(t.dtype()),
                                 shape_string(t.shape()), to_string(v.dtype),
                                 shape_string(v.shape)));
    }
    b.data[i] = t.bytes().data();
  }
  for (const GraphInfo& g : p.graphs) {
    auto it = graphs_.find(g.name);
    if (it == graphs_.end()) {
      throw RunError(fmt::format("program '{}': graph '{}' is not bound on the core", p.name, g.name));
    }
    const Adjacency& a = *it->second;
    if (a.num_src_nodes() != g.num_src || a.num_dst_nodes() != g.num_dst ||
        a.num_edges() != g.num_edges) {
      throw RunError(fmt::format(
          "program '{}': graph '{}' is bound with {} -> {} nodes and {} edges, the program was "
          "built for {} -> {} and {}",
          p.name, g.name, a.num_src_nodes(), a.num_dst_nodes(), a.num_edges(), g.num_src,
          g.num_dst, g.num_edges));
    }
    b.graphs.push_back(&a);
  }
  return b;
}

void Core::run(const CompiledProgram& compiled, const RunContext& context) {
  const Bound bound = bind(compiled);
  last_run_ = &compiled;
  const Program& p = compiled.program;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    try {
      execute(compiled, i, bound, context);
    } catch (const RunError&) {
      throw;
    } catch (const std::exception& e) {
      throw RunError(fmt::format("program '{}': {}: {}", p.name, p.describe(i), e.what()));
    }
    const OpCost cost = op_cost(p, p.ops[i]);
    double simulated = op_seconds(profile_, cost);
    if (p.ops[i].kind == OpKind::kAllReduce) {
      const int ranks = options_.communicator ? options_.communicator->size() : 1;
      const double bytes = static_cast<double>(p.value(p.ops[i].outputs[0]).bytes());
      simulated += allreduce_seconds(profile_, bytes, ranks);
      ++counters_.collective_calls;
      counters_.collective_bytes += bytes;
    }
    ++counters_.ops_run;
    counters_.bytes_moved += cost.bytes;
    counters_.simulated_seconds += simulated;
    if (options_.debug) check_finite(compiled, i, bound);
    if (options_.trace) {
      const auto end = std::chrono::steady_clock::now();
      const auto us = [&](auto t) {
        return std::chrono::duration<double, std::micro>(t - epoch_).count();
      };
      trace_.push_back({std::string(to_string(p.ops[i].kind)), p.ops[i].scope, p.name, us(start),
                        us(end) - us(start), simulated * 1e6});
    }
  }
}

void Core::check_finite(const CompiledProgram& compiled, std::size_t op_index,
                        const Bound& bound) const {
  const Program& p = compiled.program;
  const Op& op = p.ops[op_index];
  // Optimizer updates write their parameter in place: check that instead.
  std::vector<ValueId> written = op.outputs;
  if (op.kind == OpKind::kAdamUpdate || op.kind == OpKind::kSgdUpdate) written = {op.inputs[0]};
  for (ValueId v : written) {
    const ValueInfo& info = p.value(v);
    if (info.dtype != DType::kF32) continue;
    const auto* data = reinterpret_cast<const float*>(bound.data[static_cast<size_t>(v)]);
    const int64_t n = info.elements();
    for (int64_t k = 0; k < n; ++k) {
      if (std::isfinite(data[k])) continue;
      const int64_t cols = info.shape.size() > 1 ? n / info.shape[0] : 1;
      throw RunError(fmt::format(
          "program '{}': {} produced {} in '{}' {} at row {}, column {} (first non-finite value; "
          "debug mode)",
          p.name, p.describe(op_index), std::isnan(data[k]) ? "NaN" : "Inf", info.name,
          shape_string(info.shape), k / cols, k % cols));
    }
  }
}

void Core::execute(const CompiledProgram& compiled, std::size_t op_index, const Bound& bound,
                   const RunContext& context) {
  const Program& p = compiled.program;
  const Op& op = p.ops[op_index];
  const OpAttrs& a = op.attrs;
  const auto elements = [&](ValueId v) { return static_cast<size_t>(p.value(v).elements()); };
  const auto shape = [&](ValueId v) -> const std::vector<int64_t>& { return p.value(v).shape; };
  const auto f32 = [&](ValueId v) {
    return std::span<float>(reinterpret_cast<float*>(bound.data[static_cast<size_t>(v)]), elements(v));
  };
  const auto in = [&](size_t k) {
    const ValueId v = op.inputs[k];
    return std::span<const float>(reinterpret_cast<const float*>(bound.data[static_cast<size_t>(v)]),
                                  elements(v));
  };
  // Optional float input k: empty when absent.
  const auto opt_in = [&](size_t k) {
    return k < op.inputs.size() && op.inputs[k] != kNoValue ? in(k) : std::span<const float>();
  };
  const auto i64 = [&](size_t k) {
    const ValueId v = op.inputs[k];
    return std::span<const int64_t>(
        reinterpret_cast<const int64_t*>(bound.data[static_cast<size_t>(v)]), elements(v));
  };
  const auto mask = [&](size_t k) {
    const ValueId v = op.inputs[k];
    return std::span<const uint8_t>(
        reinterpret_cast<const uint8_t*>(bound.data[static_cast<size_t>(v)]), elements(v));
  };
  const auto arg_out = [&]() {
    if (op.outputs.size() < 2) return std::span<int32_t>();
    const ValueId v = op.outputs[1];
    return std::span<int32_t>(reinterpret_cast<int32_t*>(bound.data[static_cast<size_t>(v)]), elements(v));
  };
  const auto arg_in = [&](size_t k) {
    if (k >= op.inputs.size() || op.inputs[k] == kNoValue) return std::span<const int32_t>();
    const ValueId v = op.inputs[k];
    return std::span<const int32_t>(
        reinterpret_cast<const int32_t*>(bound.data[static_cast<size_t>(v)]), elements(v));
  };
  const auto metrics = [&]() {
    const ValueId v = op.inputs[0];
    return std::span<double>(reinterpret_cast<double*>(bound.data[static_cast<size_t>(v)]), elements(v));
  };
  const auto graph = [&]() -> const Adjacency& { return *bound.graphs.at(static_cast<size_t>(a.graph)); };
  const auto rows = [&](ValueId v) { return shape(v).at(0); };
  const auto cols = [&](ValueId v) { return shape(v).size() > 1 ? shape(v)[1] : 1; };
  const auto count_mask = [&](size_t k) {
    int64_t n = 0;
    for (uint8_t m : mask(k)) n += m != 0;
    return n;
  };
  const ValueId out = op.outputs.empty() ? kNoValue : op.outputs[0];
  const ops::DropoutKey dropout_key{context.seed, static_cast<uint64_t>(context.step), a.key};
  const auto slope = static_cast<float>(a.alpha);
  const auto norm_mode = a.key == 1 ? ops::LayerNormMode::kNode : ops::LayerNormMode::kGraph;

  switch (op.kind) {
    case OpKind::kFill:
      std::fill(f32(out).begin(), f32(out).end(), static_cast<float>(a.alpha));
      return;
    case OpKind::kMatMul: {
      const int64_t k = a.trans_a ? rows(op.inputs[0]) : cols(op.inputs[0]);
      ops::matmul<float>(in(0), in(1), f32(out), rows(out), k, cols(out), a.trans_a, a.trans_b);
      return;
    }
    case OpKind::kAdd:
      ops::add(in(0), in(1), f32(out));
      return;
    case OpKind::kScale:
      ops::scale(in(0), static_cast<float>(a.alpha), f32(out));
      return;
    case OpKind::kBiasAdd:
      ops::bias_add_forward<float>(in(0), in(1), f32(out), rows(out), cols(out));
      return;
    case OpKind::kRelu:
      ops::relu_forward<float>(in(0), f32(out));
      return;
    case OpKind::kLeakyRelu:
      ops::leaky_relu_forward<float>(in(0), slope, f32(out));
      return;
    case OpKind::kElu:
      ops::elu_forward<float>(in(0), slope, f32(out));
      return;
    case OpKind::kDropout:
      ops::dropout_forward<float>(dropout_key, a.alpha, cols(out), {}, in(0), f32(out));
      return;
    case OpKind::kLogSoftmax:
      ops::log_softmax_forward<float>(in(0), rows(out), cols(out), f32(out));
      return;
    case OpKind::kNllLoss: {
      const ValueId lp = op.inputs[0];
      const ops::LossSum s =
          ops::nll_loss_forward<float, int64_t>(in(0), rows(lp), cols(lp), i64(1), mask(2));
      f32(out)[0] = s.count > 0 ? static_cast<float>(s.sum / static_cast<double>(s.count)) : 0.0f;
      return;
    }
    case OpKind::kMseLoss: {
      const ValueId pred = op.inputs[0];
      const ops::SquaredSum s = ops::mse_loss_forward(in(0), in(1), mask(2), rows(pred), cols(pred));
      f32(out)[0] = s.count > 0 ? static_cast<float>(s.sum / static_cast<double>(s.count)) : 0.0f;
      return;
    }
    case OpKind::kHeadDot:
      ops::head_dot_forward(in(0), in(1), rows(out), a.heads, cols(op.inputs[0]) / a.heads, f32(out));
      return;
    case OpKind::kHeadMean:
      ops::head_mean_forward(in(0), rows(out), a.heads, cols(out), f32(out));
      return;
    case OpKind::kLayerNorm:
      ops::layer_norm_forward(norm_mode, in(0), in(1), in(2), rows(out), cols(out), a.alpha, f32(out));
      return;
    case OpKind::kLayerNormGradX:
      ops::layer_norm_backward_x(norm_mode, in(0), in(1), in(2), rows(out), cols(out), a.alpha, f32(out));
      return;
    case OpKind::kLayerNormGradGamma: {
      const ValueId x = op.inputs[0];
      ops::layer_norm_backward_gamma(norm_mode, in(0), in(1), rows(x), cols(x), a.alpha, f32(out));
      return;
    }
    case OpKind::kGcnNorm:
      ops::gcn_norm<int32_t>(graph(), f32(out));
      return;
    case OpKind::kGather:
      ops::gather_forward<float, int32_t>(graph().by_src, cols(out), in(0), f32(out));
      return;
    case OpKind::kEdgeScale:
      ops::edge_scale(in(0), in(1), rows(out), a.heads, cols(out) / a.heads, f32(out));
      return;
    case OpKind::kScatter:
      ops::scatter_forward<float, int32_t>(a.reduce, graph().by_dst, cols(out), in(0), f32(out),
                                           arg_out());
      return;
    case OpKind::kSpmm:
      ops::spmm_forward<float, int32_t>(a.reduce, graph(), cols(out), in(0), opt_in(1), f32(out),
                                        arg_out());
      return;
    case OpKind::kSddmmAdd:
      ops::sddmm_add_forward<float, int32_t>(graph(), a.heads, in(0), in(1), f32(out));
      return;
    case OpKind::kAllReduce:
      if (options_.communicator && options_.communicator->size() > 1) {
        options_.communicator->allreduce_async<float>(in(0), f32(out)).wait();
      } else {
        std::copy(in(0).begin(), in(0).end(), f32(out).begin());
      }
      return;
    case OpKind::kSegmentSoftmax:
      ops::segment_softmax_forward<float, int32_t>(graph().by_dst, a.heads, in(0), f32(out));
      return;
    case OpKind::kBiasGrad:
      ops::bias_add_backward<float>(in(0), rows(op.inputs[0]), cols(op.inputs[0]), f32(out));
      return;
    case OpKind::kReluGrad:
      ops::relu_backward<float>(in(0), in(1), f32(out));
      return;
    case OpKind::kLeakyReluGrad:
      ops::leaky_relu_backward<float>(in(0), slope, in(1), f32(out));
      return;
    case OpKind::kEluGrad:
      ops::elu_backward<float>(in(0), slope, in(1), f32(out));
      return;
    case OpKind::kDropoutGrad:
      ops::dropout_backward<float>(dropout_key, a.alpha, cols(out), {}, in(0), f32(out));
      return;
    case OpKind::kLogSoftmaxGrad:
      ops::log_softmax_backward<float>(in(0), in(1), rows(out), cols(out), f32(out));
      return;
    case OpKind::kNllLossGrad: {
      const int64_t used = count_mask(2);
      const float scale = used > 0 ? in(3)[0] / static_cast<float>(used) : 0.0f;
      ops::nll_loss_backward<float, int64_t>(rows(out), cols(out), i64(1), mask(2), scale, f32(out));
      return;
    }
    case OpKind::kMseLossGrad: {
      const int64_t used = count_mask(2) * cols(out);
      const float scale = used > 0 ? in(3)[0] / static_cast<float>(used) : 0.0f;
      ops::mse_loss_backward(in(0), in(1), mask(2), rows(out), cols(out), scale, f32(out));
      return;
    }
    case OpKind::kHeadDotGradX:
      ops::head_dot_backward_x(in(0), in(1), rows(out), a.heads, cols(out) / a.heads, f32(out));
      return;
    case OpKind::kHeadDotGradAtt: {
      const ValueId x = op.inputs[0];
      ops::head_dot_backward_att(in(0), in(1), rows(x), a.heads, cols(x) / a.heads, f32(out));
      return;
    }
    case OpKind::kHeadMeanGrad:
      ops::head_mean_backward(in(0), rows(out), a.heads, cols(op.inputs[0]), f32(out));
      return;
    case OpKind::kGatherGrad:
      ops::gather_backward<float, int32_t>(graph().by_src, cols(out), in(0), f32(out));
      return;
    case OpKind::kEdgeDot: {
      const ValueId g = op.inputs[0];
      ops::edge_dot(in(0), in(1), rows(g), a.heads, cols(g) / a.heads, f32(out));
      return;
    }
    case OpKind::kScatterGrad:
      ops::scatter_backward<float, int32_t>(a.reduce, graph().by_dst, cols(out), in(0), arg_in(1),
                                            f32(out));
      return;
    case OpKind::kSpmmGradX:
      // inputs: x, g, edge weight (or none), arg (or none)
      ops::spmm_backward<float, int32_t>(a.reduce, graph(), cols(out), in(0), opt_in(2), in(1),
                                         arg_in(3), f32(out), {});
      return;
    case OpKind::kSpmmGradW:
      // d out[v] / d w_e = x[src(e)] . g[dst(e)] per head (sum aggregation).
      ops::sddmm_dot_forward<float, int32_t>(graph(), cols(op.inputs[0]), a.heads, in(0), in(1),
                                             f32(out));
      return;
    case OpKind::kSddmmAddGradA:
      ops::sddmm_add_backward<float, int32_t>(graph(), a.heads, in(0), f32(out), {});
      return;
    case OpKind::kSddmmAddGradB:
      ops::sddmm_add_backward<float, int32_t>(graph(), a.heads, in(0), {}, f32(out));
      return;
    case OpKind::kSegmentSoftmaxGrad:
      ops::segment_softmax_backward<float, int32_t>(graph().by_dst, a.heads, in(0), in(1), f32(out));
      return;
    case OpKind::kAdamUpdate:
      ops::adam_update({.lr = context.lr,
                        .beta1 = a.beta1,
                        .beta2 = a.beta2,
                        .eps = a.eps,
                        .weight_decay = a.weight_decay,
                        .decoupled = a.decoupled,
                        .step = context.step},
                       in(1), f32(op.inputs[0]), f32(op.inputs[2]), f32(op.inputs[3]));
      return;
    case OpKind::kSgdUpdate:
      ops::sgd_update({.lr = context.lr,
                       .momentum = a.momentum,
                       .weight_decay = a.weight_decay,
                       .nesterov = a.nesterov,
                       .step = context.step},
                      in(1), f32(op.inputs[0]), f32(op.inputs[2]));
      return;
    case OpKind::kAccumulate:
      metrics()[a.key] += static_cast<double>(in(1)[0]);
      return;
    case OpKind::kCountCorrect: {
      const ValueId lp = op.inputs[1];
      const ops::CorrectCount c = ops::count_correct(in(1), i64(2), mask(3), rows(lp), cols(lp));
      metrics()[a.key] += static_cast<double>(c.correct);
      metrics()[a.key + 1] += static_cast<double>(c.total);
      return;
    }
  }
  throw RunError(fmt::format("program '{}': {} has no kernel", p.name, p.describe(op_index)));
}

}  // namespace gnnrt::runtime
