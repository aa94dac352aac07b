// Program: the static-shape, linear SSA list of ops a simulated NeuronCore
// runs. Every value has one static shape and dtype and is defined once, by
// an op or by binding (inputs, parameters, state). Graphs are declared with
// their static sizes (nodes, edges) and bound to an adjacency at run time;
// ops refer to them by index. There is no data-dependent control flow.
//
// A Program is plain data: the Builder (builder.h) appends to it with shape
// checks, the compiler passes (passes.h) rewrite it, and the executor runs
// it. Not thread-safe; copyable.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ops/reduce.h"
#include "runtime/npy.h"

namespace gnnrt::runtime {

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

// Who provides a value's buffer:
//   kInput      bound by the host each run (features, labels, masks)
//   kParameter  persistent, trained; updated in place by optimizer ops
//   kState      persistent, not trained (optimizer moments, metric sums)
//   kTemp       produced by an op, placed in the arena by the memory plan
enum class Role : int32_t { kInput, kParameter, kState, kTemp };
std::string_view to_string(Role role);

struct ValueInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  Role role = Role::kTemp;
  int64_t offset = -1;  // byte offset in the arena (temps, after planning)

  int64_t elements() const;
  int64_t bytes() const;
};

// A graph's static sizes. Edge e goes src(e) -> dst(e); messages flow to dst.
struct GraphInfo {
  std::string name;
  int64_t num_src = 0, num_dst = 0, num_edges = 0;
};

// Every op the core runs. Forward ops first, then the backward-only ops the
// autodiff emits, then ops with side effects on persistent state.
#define GNNRT_FOR_EACH_OP(X)                                              \
  X(kFill, "fill")                       /* () -> constant */             \
  X(kMatMul, "matmul")                   /* (a, b) */                     \
  X(kAdd, "add")                         /* (a, b) */                     \
  X(kScale, "scale")                     /* (x) * alpha */                \
  X(kBiasAdd, "bias_add")                /* (x, bias) */                  \
  X(kRelu, "relu")                                                        \
  X(kLeakyRelu, "leaky_relu")                                             \
  X(kElu, "elu")                                                          \
  X(kDropout, "dropout")                                                  \
  X(kLogSoftmax, "log_softmax")                                           \
  X(kNllLoss, "nll_loss")                /* (logp, labels, mask) */       \
  X(kMseLoss, "mse_loss")                /* (pred, target, mask) */       \
  X(kHeadDot, "head_dot")                /* (x [N,H*C], att [H*C]) */     \
  X(kHeadMean, "head_mean")              /* (x [N,H*C]) -> [N,C] */       \
  X(kLayerNorm, "layer_norm")            /* (x, gamma, beta) */           \
  X(kGcnNorm, "gcn_norm")                /* () -> [E] */                  \
  X(kGather, "gather")                   /* (x) -> [E,F] at src */        \
  X(kEdgeScale, "edge_scale")            /* (msg [E,F], w [E,H]) */       \
  X(kScatter, "scatter")                 /* (msg) -> [N_dst,F] (, arg) */ \
  X(kSpmm, "spmm")                       /* (x[, w]) -> (out[, arg]) */   \
  X(kSddmmAdd, "sddmm_add")              /* (a [Ns,H], b [Nd,H]) */       \
  X(kSegmentSoftmax, "segment_softmax")  /* (score [E,H]) */              \
  X(kAllReduce, "allreduce")             /* (x) summed over the ranks */  \
  X(kBiasGrad, "bias_grad")                                               \
  X(kReluGrad, "relu_grad")                                               \
  X(kLeakyReluGrad, "leaky_relu_grad")                                    \
  X(kEluGrad, "elu_grad")                                                 \
  X(kDropoutGrad, "dropout_grad")                                         \
  X(kLogSoftmaxGrad, "log_softmax_grad")                                  \
  X(kNllLossGrad, "nll_loss_grad")       /* (labels, mask, g) */          \
  X(kMseLossGrad, "mse_loss_grad")       /* (pred, target, mask, g) */    \
  X(kHeadDotGradX, "head_dot_grad_x")    /* (att, g) */                   \
  X(kHeadDotGradAtt, "head_dot_grad_att")/* (x, g) */                     \
  X(kHeadMeanGrad, "head_mean_grad")                                      \
  X(kLayerNormGradX, "layer_norm_grad_x")        /* (x, gamma, g) */      \
  X(kLayerNormGradGamma, "layer_norm_grad_gamma")/* (x, g) */             \
  X(kGatherGrad, "gather_grad")          /* (g [E,F]) -> [N_src,F] */     \
  X(kEdgeDot, "edge_dot")                /* (g, msg) -> [E,H] */          \
  X(kScatterGrad, "scatter_grad")        /* (g[, arg]) -> [E,F] */        \
  X(kSpmmGradX, "spmm_grad_x")           /* (x, g[, w][, arg]) */         \
  X(kSpmmGradW, "spmm_grad_w")           /* (x, g) -> [E,H] */            \
  X(kSddmmAddGradA, "sddmm_add_grad_a")  /* (g) -> [N_src,H] */           \
  X(kSddmmAddGradB, "sddmm_add_grad_b")  /* (g) -> [N_dst,H] */           \
  X(kSegmentSoftmaxGrad, "segment_softmax_grad") /* (alpha, g) */         \
  X(kAdamUpdate, "adam_update")          /* (param, grad, m, v) */        \
  X(kSgdUpdate, "sgd_update")            /* (param, grad, buf) */         \
  X(kAccumulate, "accumulate")           /* (metrics, scalar) */          \
  X(kCountCorrect, "count_correct")      /* (metrics, logp, labels, mask) */

enum class OpKind : int32_t {
#define GNNRT_OP_ENUM(kind, name) kind,
  GNNRT_FOR_EACH_OP(GNNRT_OP_ENUM)
#undef GNNRT_OP_ENUM
};
std::string_view to_string(OpKind kind);
OpKind parse_op_kind(std::string_view name);  // throws std::invalid_argument

// Ops that write persistent state in place (kept by dead-value elimination).
bool has_side_effects(OpKind kind);

// Attributes; each op reads the fields it documents in builder.h.
struct OpAttrs {
  int32_t graph = -1;
  ops::Reduce reduce = ops::Reduce::kSum;
  bool trans_a = false, trans_b = false;
  int64_t heads = 1;
  double alpha = 0;   // fill value, scale, leaky slope, elu alpha, dropout p, norm eps
  uint64_t key = 0;   // dropout op id; metrics slot; layer-norm mode (0 graph, 1 node)
  // optimizer hyper-parameters (the learning rate and step are run inputs)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0, momentum = 0;
  bool decoupled = false;  // AdamW
  bool nesterov = false;
};

// inputs may hold kNoValue for an absent optional operand (spmm_grad_x's
// edge weight or arg).
struct Op {
  OpKind kind = OpKind::kFill;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  OpAttrs attrs;
  std::string scope;  // the layer that emitted it ("conv1"), for messages
};

struct Program {
  std::string name;
  std::vector<ValueInfo> values;
  std::vector<GraphInfo> graphs;
  std::vector<Op> ops;
  std::vector<ValueId> outputs;  // kept alive to the end; readable after a run

  const ValueInfo& value(ValueId id) const { return values.at(static_cast<size_t>(id)); }
  ValueInfo& value(ValueId id) { return values.at(static_cast<size_t>(id)); }
  ValueId find(std::string_view name) const;  // kNoValue when absent

  // A canonical text of the whole program (values with shapes, graphs, ops
  // with attributes): stable across runs, the input of the cache key.
  std::string to_text() const;
  // "op #12 spmm (conv1)"
  std::string describe(std::size_t op_index) const;
};

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace gnnrt::runtime
