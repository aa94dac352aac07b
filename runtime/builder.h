// Builder: how model code writes a Program. Each call appends one op after
// checking its operands' shapes and dtypes, and returns the new value; a
// mismatch throws ShapeError naming the program, the op (with its layer
// scope) and both shapes, at build time, before anything runs.
//
// Layers ask for aggregations (aggregate(), softmax()), never for kernels:
// aggregate() writes the naive gather -> edge_scale -> scatter form, which
// the compiler fuses into one spmm (and leaves unfused in debug mode), and
// the multi-core runtime can insert its halo all-reduce right after it.
//
// Layout conventions: node features [N, F] row-major; per-edge values
// [E, H] by edge id (edge order of the graph given at bind time); a linear
// layer's weight is [out, in] like torch.nn.Linear. Scalars are shape [1].
// Not thread-safe.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/program.h"

namespace gnnrt::runtime {

class ShapeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class Builder {
 public:
  explicit Builder(std::string program_name);
  explicit Builder(Program program);  // append to an existing program

  Program& program() { return program_; }
  const Program& program() const { return program_; }
  Program take() { return std::move(program_); }

  // Ops emitted while a Scope lives carry its name ("conv1") in messages.
  class Scope {
   public:
    Scope(Builder& b, std::string name) : b_(b), saved_(std::exchange(b.scope_, std::move(name))) {}
    ~Scope() { b_.scope_ = std::move(saved_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Builder& b_;
    std::string saved_;
  };
  const std::string& scope() const { return scope_; }

  // ---- declarations ----
  ValueId input(std::string name, DType dtype, std::vector<int64_t> shape);
  ValueId parameter(std::string name, std::vector<int64_t> shape);  // f32
  ValueId state(std::string name, DType dtype, std::vector<int64_t> shape);
  int32_t graph(std::string name, int64_t num_src, int64_t num_dst, int64_t num_edges);
  void output(ValueId v);

  const std::vector<int64_t>& shape(ValueId v) const { return program_.value(v).shape; }
  int64_t rows(ValueId v) const { return shape(v).at(0); }
  int64_t cols(ValueId v) const;  // product of the dimensions after the first

  // ---- dense forward ops ----
  ValueId fill(std::vector<int64_t> shape, double value);
  // op(a) [m, k] * op(b) [k, n]; a is [k, m] when trans_a, b is [n, k] when trans_b.
  ValueId matmul(ValueId a, ValueId b, bool trans_a = false, bool trans_b = false);
  ValueId linear(ValueId x, ValueId weight) { return matmul(x, weight, false, true); }
  ValueId add(ValueId a, ValueId b);
  ValueId scale(ValueId x, double alpha);
  ValueId bias_add(ValueId x, ValueId bias);
  ValueId relu(ValueId x);
  ValueId leaky_relu(ValueId x, double slope);
  ValueId elu(ValueId x, double alpha = 1.0);
  // Drops with probability p, keyed by (run seed, run step, key, row, col);
  // p = 0 returns x itself.
  ValueId dropout(ValueId x, double p, uint64_t key);
  ValueId log_softmax(ValueId x);
  // Mean negative log-likelihood over the rows with mask = 1: [1].
  ValueId nll_loss(ValueId log_prob, ValueId labels, ValueId mask);
  ValueId mse_loss(ValueId pred, ValueId target, ValueId mask);
  // Per-head dot product: x [N, H*C] . att [H*C] -> [N, H].
  ValueId head_dot(ValueId x, ValueId att, int64_t heads);
  // Mean over heads: x [N, H*C] -> [N, C].
  ValueId head_mean(ValueId x, int64_t heads);
  // PyG's LayerNorm: x [N, C] normalised over the whole graph (node = false)
  // or per node, then * gamma [C] + beta [C].
  ValueId layer_norm(ValueId x, ValueId gamma, ValueId beta, bool per_node, double eps);

  // ---- graph ops ----
  // GCN's symmetric normalisation deg^-1/2[src] * deg^-1/2[dst] per edge
  // (deg = in-degree of the graph as given, self loops included): [E].
  ValueId gcn_norm(int32_t graph);
  // out[v] = reduce_{e: dst(e) = v} w_e * x[src(e)], w [E] or [E, H] or none.
  // Returns the aggregate [N_dst, F].
  ValueId aggregate(ops::Reduce reduce, int32_t graph, ValueId x, ValueId edge_weight = kNoValue);
  // Softmax of per-edge scores [E, H] over the edges of each destination.
  ValueId softmax(int32_t graph, ValueId score);
  // out[e, h] = a[src(e), h] + b[dst(e), h].
  ValueId sddmm_add(int32_t graph, ValueId a, ValueId b);

  // ---- collectives ----
  // The sum of x over the ranks of the core's communicator; every rank gets
  // the same bits; on one rank (or without a communicator) a copy. Its
  // backward is the all-reduce of the gradient. The multi-core runtime
  // inserts these (and halo all-reduces) into the same programs.
  ValueId allreduce(ValueId x);

  // The pieces aggregate() is made of, and what fusion makes of them.
  ValueId gather(int32_t graph, ValueId x);                     // [E, F] = x[src(e)]
  ValueId edge_scale(ValueId messages, ValueId edge_weight);    // [E, F] * w [E, H]
  // Returns {out [N_dst, F], arg [N_dst, F] i32 (max/min) or kNoValue}.
  std::pair<ValueId, ValueId> scatter(ops::Reduce reduce, int32_t graph, ValueId messages);
  std::pair<ValueId, ValueId> spmm(ops::Reduce reduce, int32_t graph, ValueId x,
                                   ValueId edge_weight = kNoValue);

  // ---- backward ops (emitted by the autodiff) ----
  ValueId bias_grad(ValueId g);
  ValueId relu_grad(ValueId x, ValueId g);
  ValueId leaky_relu_grad(ValueId x, ValueId g, double slope);
  ValueId elu_grad(ValueId x, ValueId g, double alpha);
  ValueId dropout_grad(ValueId g, double p, uint64_t key);
  ValueId log_softmax_grad(ValueId out, ValueId g);
  ValueId nll_loss_grad(ValueId log_prob, ValueId labels, ValueId mask, ValueId g);
  ValueId mse_loss_grad(ValueId pred, ValueId target, ValueId mask, ValueId g);
  ValueId head_dot_grad_x(ValueId att, ValueId g, int64_t heads);
  ValueId head_dot_grad_att(ValueId x, ValueId g, ValueId att, int64_t heads);  // att's shape
  ValueId head_mean_grad(ValueId g, int64_t heads);
  ValueId layer_norm_grad_x(ValueId x, ValueId gamma, ValueId g, const OpAttrs& forward);
  ValueId layer_norm_grad_gamma(ValueId x, ValueId g, ValueId gamma, const OpAttrs& forward);
  ValueId gather_grad(int32_t graph, ValueId g);
  ValueId edge_dot(ValueId g, ValueId messages, ValueId edge_weight);  // edge_weight's shape
  ValueId scatter_grad(ops::Reduce reduce, int32_t graph, ValueId g, ValueId arg);
  ValueId spmm_grad_x(ops::Reduce reduce, int32_t graph, ValueId x, ValueId edge_weight,
                      ValueId g, ValueId arg);
  ValueId spmm_grad_w(int32_t graph, ValueId x, ValueId g, ValueId edge_weight);
  ValueId sddmm_add_grad_a(int32_t graph, ValueId g);
  ValueId sddmm_add_grad_b(int32_t graph, ValueId g);
  ValueId segment_softmax_grad(int32_t graph, ValueId alpha, ValueId g);

  // ---- ops that update persistent state in place ----
  void adam_update(ValueId param, ValueId grad, ValueId m, ValueId v, const OpAttrs& hyper);
  void sgd_update(ValueId param, ValueId grad, ValueId momentum_buffer, const OpAttrs& hyper);
  // metrics[slot] += scalar (f64 state).
  void accumulate(ValueId metrics, ValueId scalar, uint64_t slot);
  // metrics[slot] += rows with mask = 1 whose argmax equals the label;
  // metrics[slot + 1] += rows with mask = 1.
  void count_correct(ValueId metrics, ValueId log_prob, ValueId labels, ValueId mask,
                     uint64_t slot);

  // Appends an op whose outputs already exist (used by passes that move ops).
  void append(Op op) { program_.ops.push_back(std::move(op)); }

 private:
  ValueId new_value(std::string name, DType dtype, std::vector<int64_t> shape, Role role);
  ValueId emit(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs, DType dtype,
               std::vector<int64_t> shape);
  void emit_effect(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs);
  ValueId arg_output(ops::Reduce reduce, ValueId out);
  [[noreturn]] void fail(OpKind kind, const std::string& what) const;
  void expect_same_shape(OpKind kind, ValueId a, ValueId b, const char* a_name,
                         const char* b_name) const;
  void expect_dtype(OpKind kind, ValueId v, DType dtype, const char* what) const;
  void expect_rank(OpKind kind, ValueId v, std::size_t rank, const char* what) const;
  const GraphInfo& graph_info(OpKind kind, int32_t graph) const;
  int64_t edge_heads(OpKind kind, int32_t graph, ValueId edge_weight, int64_t features) const;

  Program program_;
  std::string scope_;
};

}  // namespace gnnrt::runtime
