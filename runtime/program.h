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

#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "runtime/op_attrs.pb.h"
#include "runtime/tensor.h"

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

// Every op the core runs: forward ops, then the backward-only ops the
// autodiff emits, then collectives, then ops with side effects on persistent
// state. Operands in brackets are optional (kNoValue when absent); each op's
// row in its family's runtime/defs/<family>.cc holds its shape rule and
// flags, and the Builder's method of the same name documents it.
#define GNNRT_FOR_EACH_OP(X)                                                            \
  X(kFill, "fill")                        /* () -> constant */                          \
  X(kMatMul, "matmul")                    /* (a, b) */                                  \
  X(kAdd, "add")                          /* (a, b) */                                  \
  X(kMul, "mul")                          /* (a, b) elementwise */                      \
  X(kScale, "scale")                      /* (x) * factor */                            \
  X(kBiasAdd, "bias_add")                 /* (x, bias) */                               \
  X(kRelu, "relu")                                                                      \
  X(kLeakyRelu, "leaky_relu")                                                           \
  X(kElu, "elu")                                                                        \
  X(kActivation, "activation")            /* (x): sigmoid | silu | gelu_tanh | exp */   \
  X(kConcat, "concat")                    /* (x...) side by side along columns */       \
  X(kSliceCols, "slice_cols")             /* (x) -> columns begin .. begin + width */   \
  X(kReshape, "reshape")                  /* (x) -> the same elements as shape */       \
  X(kDropout, "dropout")                  /* (x[, global_rows]) -> (out, keep) */       \
  X(kNormal, "normal")                    /* (global_rows [N]) -> [N, width] N(0, 1) */ \
  X(kLogSoftmax, "log_softmax")                                                         \
  X(kNllLoss, "nll_loss")                 /* (logp, labels, mask[, count]) */           \
  X(kCrossEntropy, "cross_entropy")       /* (x, labels, mask[, count]): nll(log_softmax) */ \
  X(kMseLoss, "mse_loss")                 /* (pred, target, mask[, count]) */           \
  X(kHeadDot, "head_dot")                 /* (x [N,H*C], att [H*C]) */                  \
  X(kHeadMean, "head_mean")               /* (x [N,H*C]) -> [N,C] */                    \
  X(kLayerNormMoments, "layer_norm_moments") /* (x[, mask]) -> [3] f64 */               \
  X(kLayerNorm, "layer_norm")             /* (x, gamma, beta[, moments[, mask]]) */     \
  X(kGcnNorm, "gcn_norm")                 /* ([degree]) -> [E] */                       \
  X(kDivideRows, "divide_rows")           /* (x, degree) */                             \
  X(kGather, "gather")                    /* (x) -> [E,F] at src */                     \
  X(kEdgeScale, "edge_scale")             /* (msg [E,F], w [E,H]) */                    \
  X(kScatter, "scatter")                  /* (msg) -> [N_dst,F] (, arg) */              \
  X(kSpmm, "spmm")                        /* (x[, w]) -> (out[, arg]) */                \
  X(kSparseMatMul, "sparse_matmul")       /* (values [E], b[, b2]) -> (out, workspace[, out2, workspace2]) */ \
  X(kSparseDropout, "sparse_dropout")     /* (values [E][, global_rows]) */             \
  X(kSddmmAdd, "sddmm_add")               /* (a [Ns,H], b [Nd,H]) */                    \
  X(kSddmmDot, "sddmm_dot")               /* (a [Ns,F], b [Nd,F]) -> [E,H] */           \
  X(kEdgeHeadDot, "edge_head_dot")        /* (a [Nd,H*K], r [E,K]) -> [E,H] */          \
  X(kHeadScatter, "head_scatter")         /* (w [E,H], r [E,K]) -> [Nd,H*K] */          \
  X(kHeadGather, "head_gather")           /* (w [E,H], a [Nd,H*K]) -> [E,K] */          \
  X(kHeadMatMul, "head_matmul")           /* (x [N,H*P], w) -> [N,H*Q] per head */      \
  X(kSegmentSoftmax, "segment_softmax")   /* (score [E,H]) */                           \
  X(kAttentionSoftmax, "attention_softmax") /* (a [Ns,H], b [Nd,H]) -> alpha [E,H] */   \
  X(kSegmentMax, "segment_max")           /* (score) -> m [N_dst,H] */                  \
  X(kSegmentExpSum, "segment_exp_sum")    /* (score, m) -> s [N_dst,H] */               \
  X(kSegmentSoftmaxApply, "segment_softmax_apply") /* (score, m, s) -> [E,H] */         \
  X(kBiasGrad, "bias_grad")                                                             \
  X(kReluGrad, "relu_grad")                                                             \
  X(kLeakyReluGrad, "leaky_relu_grad")                                                  \
  X(kEluGrad, "elu_grad")                                                               \
  X(kActivationGrad, "activation_grad")   /* (x, g) */                                  \
  X(kDropoutGrad, "dropout_grad")         /* (g, keep) */                               \
  X(kLogSoftmaxGrad, "log_softmax_grad")                                                \
  X(kNllLossGrad, "nll_loss_grad")        /* (logp, labels, mask, g[, count]) */        \
  X(kCrossEntropyGrad, "cross_entropy_grad") /* (x, labels, mask, g[, count]) */        \
  X(kMseLossGrad, "mse_loss_grad")        /* (pred, target, mask, g[, count]) */        \
  X(kHeadDotGradX, "head_dot_grad_x")     /* (att, g[, plus]) */                        \
  X(kHeadDotGradAtt, "head_dot_grad_att") /* (x, g) */                                  \
  X(kHeadMeanGrad, "head_mean_grad")                                                    \
  X(kLayerNormGradSums, "layer_norm_grad_sums") /* (x, gamma, g, moments) -> [2] f64 */ \
  X(kLayerNormGradX, "layer_norm_grad_x") /* (x, gamma, g[, moments, sums[, mask]]) */  \
  X(kLayerNormGradGamma, "layer_norm_grad_gamma") /* (x, g[, moments]) */               \
  X(kGatherGrad, "gather_grad")           /* (g [E,F]) -> [N_src,F] */                  \
  X(kEdgeDot, "edge_dot")                 /* (g, msg) -> [E,H] */                       \
  X(kScatterGrad, "scatter_grad")         /* (g[, arg]) -> [E,F] */                     \
  X(kSpmmGradX, "spmm_grad_x")            /* (x, g[, w][, arg]) */                      \
  X(kSpmmGradW, "spmm_grad_w")            /* (x, g, w[, arg]) -> [E,H] */               \
  X(kSparseMatMulGradB, "sparse_matmul_grad_b") /* (values, g[, g2]) -> (b's shape, workspace[, ...]) */\
  X(kSddmmAddGradA, "sddmm_add_grad_a")   /* (g) -> [N_src,H] */                        \
  X(kSddmmAddGradB, "sddmm_add_grad_b")   /* (g) -> [N_dst,H] */                        \
  X(kSddmmDotGradA, "sddmm_dot_grad_a")   /* (b, g) -> [N_src,F] */                     \
  X(kSddmmDotGradB, "sddmm_dot_grad_b")   /* (a, g) -> [N_dst,F] */                     \
  X(kHeadOuter, "head_outer")             /* (a [N,H*P], b [N,H*Q]) -> [H*P,Q] */       \
  X(kSegmentSoftmaxGrad, "segment_softmax_grad") /* (alpha, g) */                       \
  X(kAttentionSoftmaxGrad, "attention_softmax_grad") /* (a, b, alpha, g) -> [E,H] */    \
  X(kSegmentExpSumGrad, "segment_exp_sum_grad") /* (score, m, g) -> [E,H] */            \
  X(kSegmentSoftmaxApplyGradS, "segment_softmax_apply_grad_s") /* (alpha, g, s) */      \
  X(kKeepWinners, "keep_winners")         /* (g, arg): g where arg < E, else 0 */       \
  X(kAllReduce, "allreduce")              /* (x) summed over the ranks */               \
  X(kHaloSum, "halo_sum")                 /* (x) summed over a vertex's replicas */     \
  X(kHaloMax, "halo_max")                 /* (x[, arg, edge_id]) -> (y[, arg]) */       \
  X(kBucketStart, "bucket_start")         /* (g...) -> bucket, all-reduce started */    \
  X(kBucketWait, "bucket_wait")           /* (bucket) -> (g...) all-reduced */          \
  X(kAdamUpdate, "adam_update")           /* (param, grad, m, v) */                     \
  X(kSgdUpdate, "sgd_update")             /* (param, grad, buf) */                      \
  X(kAccumulate, "accumulate")            /* (metrics, scalar) */                       \
  X(kCountCorrect, "count_correct")       /* (metrics, logp, labels, mask) */

enum class OpKind : int32_t {
#define GNNRT_OP_ENUM(kind, name) kind,
  GNNRT_FOR_EACH_OP(GNNRT_OP_ENUM)
#undef GNNRT_OP_ENUM
};
std::string_view to_string(OpKind kind);
OpKind parse_op_kind(std::string_view name);  // throws std::invalid_argument

// Ops that write persistent state in place (kept by dead-value elimination),
// and ops that communicate with other ranks: every rank runs them in the
// same order (never removed or reordered against each other). Both are
// flags of the op's definition (op_defs.h).
bool has_side_effects(OpKind kind);
bool is_collective(OpKind kind);

// Attributes: runtime/op_attrs.proto's message itself (each op reads the
// fields builder.h documents for it), so serialising them is free.
using OpAttrs = proto::OpAttrs;
static_assert(static_cast<int>(ops::Reduce::kSum) == proto::SUM &&
              static_cast<int>(ops::Reduce::kMean) == proto::MEAN &&
              static_cast<int>(ops::Reduce::kMax) == proto::MAX &&
              static_cast<int>(ops::Reduce::kMin) == proto::MIN);
inline proto::Reduce to_proto(ops::Reduce r) { return static_cast<proto::Reduce>(r); }
inline ops::Reduce reduce_of(const OpAttrs& a) { return static_cast<ops::Reduce>(a.reduce()); }
static_assert(static_cast<int>(ops::LossForm::kSquared) == proto::SQUARED &&
              static_cast<int>(ops::LossForm::kAbsolute) == proto::ABSOLUTE &&
              static_cast<int>(ops::LossForm::kLinear) == proto::LINEAR);
inline ops::LossForm loss_form_of(const OpAttrs& a) { return static_cast<ops::LossForm>(a.loss_form()); }

// inputs may hold kNoValue for an absent optional operand (spmm_grad_x's
// edge weight or arg).
struct Op {
  OpKind kind = OpKind::kFill;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  OpAttrs attrs;
  std::string scope;  // the layer that emitted it ("conv1"), for messages
};

// Ops whose result depends on a bound graph only (gcn_norm without degrees:
// the single-core GCN normalisation). The core computes each once per graph
// binding and keeps it outside the arena; running the op does nothing.
bool is_graph_constant(const Op& op);

struct Program {
  std::string name;
  // The dtype of every float value the ops compute: float32 to train,
  // float64 for finite-difference checks. (Moments and sums of layer_norm
  // are float64 in both.)
  DType float_type = DType::kF32;
  // One rank's share of a vertex-cut graph: aggregations, softmax, graph
  // layer norm and losses combine their partial results across ranks (halo
  // and all-reduce ops), and the train step all-reduces gradients.
  bool partitioned = false;
  int64_t local_nodes = 0;  // partitioned: the rows of the rank's vertex tensors
  // One rank's share of a data-parallel batch (replicated parameters, each
  // rank its own graphs): losses divide by the global count of real rows
  // ("<mask>.count" inputs) and the train step all-reduces gradients.
  bool replicated = false;
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
