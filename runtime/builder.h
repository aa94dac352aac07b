// Builder: how model code writes a Program. Each call appends one op whose
// results its shape rule (op_defs.h) gives after checking the operands'
// shapes and dtypes, and returns the new value; a mismatch throws
// ShapeError naming the program, the op (with its layer scope) and both
// shapes, at build time, before anything runs.
//
// Layers ask for aggregations (aggregate(), softmax()), never for kernels:
// aggregate() writes the naive gather -> edge_scale -> scatter form, which
// the compiler fuses into one spmm (and leaves unfused in debug mode). In a
// partitioned program (one rank's share of a vertex-cut graph, see
// partition()) the same calls also emit the halo ops that combine the
// partial results of shared vertices across ranks, and read the inputs that
// carry global ids, degrees and counts (names below): the layer code is the
// same on one core and on many.
//
// Layout conventions: node features [N, F] row-major; per-edge values
// [E, H] by edge id (edge order of the graph given at bind time); a linear
// layer's weight is [out, in] like torch.nn.Linear. Scalars are shape [1].
// Every float value has the program's float type (float32, or float64 for
// finite-difference checks). Not thread-safe.
//
// Each op's method is defined beside the op itself, in its family's
// runtime/defs/<family>.cc (with its shape rule, kernel and gradient);
// builder.cc keeps the bookkeeping every method shares.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ops/activation.h"
#include "runtime/program.h"

namespace gnnrt::runtime {

class ShapeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The inputs a partitioned program reads (bound by the trainer on each rank):
//   "node.global_id"    i64 [N]      global id of each local vertex (dropout masks)
//   "node.is_master"    bool [N]     the vertices this rank masters (graph statistics)
//   "<graph>.in_degree" i64 [N_dst]  global in-degree (gcn_norm, mean)
//   "<graph>.edge_id"   i64 [E]      global id of each local edge (max ties, edge dropout)
//   "<mask>.count"      i64 [1]      rows with mask = 1 on all ranks (loss means)
inline constexpr const char* kNodeGlobalId = "node.global_id";
inline constexpr const char* kNodeIsMaster = "node.is_master";
std::string in_degree_name(const std::string& graph);
std::string edge_id_name(const std::string& graph);
std::string count_name(const std::string& mask);

class Builder {
 public:
  explicit Builder(std::string program_name, DType float_type = DType::kF32);
  explicit Builder(Program program);  // append to an existing program

  Program& program() { return program_; }
  const Program& program() const { return program_; }
  Program take() { return std::move(program_); }
  DType float_type() const { return program_.float_type; }

  // Marks the program as one rank's share of a vertex-cut graph whose node
  // tensors have `local_nodes` rows (see the file comment).
  void partition(int64_t local_nodes);
  bool partitioned() const { return program_.partitioned; }
  // Marks the program as one rank's share of a data-parallel batch: losses
  // over the global count of real rows ("<mask>.count"), gradients
  // all-reduced by the train step, dropout keyed by the global row ids
  // its caller gives.
  void replicate() { program_.replicated = true; }
  bool replicated() const { return program_.replicated; }

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
  ValueId parameter(std::string name, std::vector<int64_t> shape);  // float type
  ValueId state(std::string name, DType dtype, std::vector<int64_t> shape);
  int32_t graph(std::string name, int64_t num_src, int64_t num_dst, int64_t num_edges);
  void output(ValueId v);
  // The input named `name` if declared, else a new input.
  ValueId input_once(const std::string& name, DType dtype, std::vector<int64_t> shape);

  const std::vector<int64_t>& shape(ValueId v) const { return program_.value(v).shape; }
  int64_t rows(ValueId v) const { return shape(v).at(0); }
  int64_t cols(ValueId v) const;  // product of the dimensions after the first

  // ---- dense forward ops ----
  ValueId fill(std::vector<int64_t> shape, double value);
  // op(a) [m, k] * op(b) [k, n]; a is [k, m] when trans_a, b is [n, k] when trans_b.
  ValueId matmul(ValueId a, ValueId b, bool trans_a = false, bool trans_b = false);
  ValueId linear(ValueId x, ValueId weight) { return matmul(x, weight, false, true); }
  ValueId add(ValueId a, ValueId b);
  ValueId mul(ValueId a, ValueId b);  // elementwise
  ValueId scale(ValueId x, double alpha);
  ValueId bias_add(ValueId x, ValueId bias);
  ValueId relu(ValueId x);
  ValueId leaky_relu(ValueId x, double slope);
  ValueId elu(ValueId x, double alpha = 1.0);
  // Inputs [N, F_i] side by side: [N, Σ F_i] (torch.cat(dim=1)); at least one.
  ValueId concat(const std::vector<ValueId>& inputs);
  // Columns begin .. begin + width of x [N, F]: [N, width].
  ValueId slice_cols(ValueId x, int64_t begin, int64_t width);
  // x's elements in row-major order under another shape (a copy).
  ValueId reshape(ValueId x, std::vector<int64_t> shape);
  // An elementwise ops::Activation (sigmoid, SiLU, tanh-GELU, exp, tanh, abs,
  // or a clip to [-bound, bound]).
  ValueId activation(ValueId x, ops::Activation kind, double bound = 0);
  // Drops with probability p, keyed by (run seed, run step, key, global row,
  // col); p = 0 returns x itself. The global rows are `global_rows` (i64
  // [rows]) when given; else, in a partitioned program, the global ids of
  // the nodes or of the edges of `edges_of_graph`, so every replica and
  // every partition draws the single-core mask; else the local rows (one
  // core, one graph). A data-parallel program must give them. The op's
  // second output, "<out>.keep" (bool, x's shape), records the mask for
  // dropout_grad.
  ValueId dropout(ValueId x, double p, uint64_t key, int32_t edges_of_graph = -1,
                  ValueId global_rows = kNoValue);
  // Standard normals [rows, width], one row per global id (i64 [rows]):
  // element (r, c) a pure function of (seed, step, key, global_rows[r], c)
  // (ops/noise.h), so any split of the rows draws the same noise. No gradient.
  ValueId normal(ValueId global_rows, int64_t width, uint64_t key);
  ValueId log_softmax(ValueId x);
  // Mean negative log-likelihood over the rows with mask = 1: [1]. In a
  // partitioned program: this rank's rows over the count of all ranks (the
  // ranks' losses add up to the global mean).
  ValueId nll_loss(ValueId log_prob, ValueId labels, ValueId mask);
  // nll_loss(log_softmax(x), labels, mask) in one op that computes the log
  // softmax of the masked rows only (ops::cross_entropy_forward). Layers
  // write the two ops and fuse_cross_entropy makes this one.
  ValueId cross_entropy(ValueId x, ValueId labels, ValueId mask);
  ValueId mse_loss(ValueId pred, ValueId target, ValueId mask);
  // Mean |pred - target| over the rows with mask = 1 and their columns
  // (torch's L1Loss): the mse_loss op in its absolute form.
  ValueId l1_loss(ValueId pred, ValueId target, ValueId mask);
  // The mean of pred - target over the elements of the rows with mask = 1:
  // the mse_loss op in its linear form (a KL term's mean, target zero).
  ValueId mean_loss(ValueId pred, ValueId target, ValueId mask);
  // torch's binary_cross_entropy_with_logits(logits, target) averaged over
  // the elements of the rows with mask = 1: the mse_loss op in its
  // logistic form. The target takes no gradient.
  ValueId bce_with_logits(ValueId logits, ValueId target, ValueId mask);
  // Per-head dot product: x [N, H*C] . att [H*C] -> [N, H].
  ValueId head_dot(ValueId x, ValueId att, int64_t heads);
  // Mean over heads: x [N, H*C] -> [N, C].
  ValueId head_mean(ValueId x, int64_t heads);
  // PyG's LayerNorm: x [N, C] normalised over the whole graph (per_node =
  // false; statistics over every vertex once: master rows, all-reduced, in
  // a partitioned program) or per node, then * gamma [C] + beta [C].
  ValueId layer_norm(ValueId x, ValueId gamma, ValueId beta, bool per_node, double eps);
  // x [N, F] / degree [N] (i64) per row; 0 where the degree is 0.
  ValueId divide_rows(ValueId x, ValueId degree);

  // ---- graph ops ----
  // GCN's symmetric normalisation deg^-1/2[src] * deg^-1/2[dst] per edge
  // (deg = in-degree of the graph as given, self loops included; global
  // degrees in a partitioned program): [E].
  ValueId gcn_norm(int32_t graph);
  // out[v] = reduce_{e: dst(e) = v} w_e * x[src(e)], w [E] or [E, H] or none.
  // Returns the aggregate [N_dst, F]; in a partitioned program the global
  // aggregate on every replica of v (halo sum, halo max/min with the
  // single-core tie rule, mean = halo sum / global degree).
  ValueId aggregate(ops::Reduce reduce, int32_t graph, ValueId x, ValueId edge_weight = kNoValue);
  // Softmax of per-edge scores [E, H] over the edges of each destination (in
  // a partitioned program: a global max, then a global sum of exponentials).
  ValueId softmax(int32_t graph, ValueId score);
  // out[e, h] = a[src(e), h] + b[dst(e), h].
  ValueId sddmm_add(int32_t graph, ValueId a, ValueId b);
  // softmax(graph, leaky_relu(sddmm_add(graph, a, b), slope)) in one op
  // (GAT's attention; ops::attention_softmax_forward). Layers write the
  // three ops and fuse_attention makes this one; not for a partitioned
  // program, whose softmax is in pieces.
  ValueId attention_softmax(int32_t graph, ValueId a, ValueId b, double slope);
  // out[e, h] = <a[src(e), h, :], b[dst(e), h, :]>: a [N_src, H*D], b [N_dst, H*D]
  // (dot-product attention scores).
  ValueId sddmm_dot(int32_t graph, ValueId a, ValueId b, int64_t heads);
  // Edge rows r [E, K] that every head shares, against node rows a [N_dst,
  // H*K] in K-column heads at each edge's destination (ops/head_edges.h):
  // per-head dots [E, H]; w [E, H]-weighted sums of r per destination
  // [N_dst, H*K] (a partitioned program's summed over replicas); and w's
  // sums of a's heads at each edge [E, K].
  ValueId edge_head_dot(int32_t graph, ValueId a, ValueId r, int64_t heads);
  ValueId head_scatter(int32_t graph, ValueId w, ValueId r);
  ValueId head_gather(int32_t graph, ValueId w, ValueId a);
  // x [N, H*P] times w's H row blocks, head by head (ops/dense.h): w [H*P,
  // Q] gives [N, H*Q]; trans_w takes w [H*Q, P] transposed per block.
  ValueId head_matmul(ValueId x, ValueId w, int64_t heads, bool trans_w = false);

  // ---- sparse input features ----
  // A sparse matrix X [N, K] is declared as a graph (graph(name, K, N, nnz):
  // entry e sits at row dst(e), column src(e)) with its stored values [nnz]
  // as an ordinary input.
  // X · op(b) [N, M]: b [K, M], or [M, K] when trans_b. No gradient to X.
  ValueId sparse_matmul(int32_t matrix, ValueId values, ValueId b, bool trans_b = false);
  // X · weightᵀ, weight [out, K] like torch.nn.Linear.
  ValueId sparse_linear(int32_t matrix, ValueId values, ValueId weight) {
    return sparse_matmul(matrix, values, weight, true);
  }
  // Dropout of X's stored values with the dense mask of (global row, column)
  // (the mask dropout() would draw on the dense matrix); p = 0 returns values.
  ValueId sparse_dropout(int32_t matrix, ValueId values, double p, uint64_t key);

  // ---- collectives ----
  // The sum of x (float or f64) over the ranks of the core's communicator;
  // every rank gets the same bits; on one rank a copy. Its backward is the
  // all-reduce of the gradient (each rank's gradient is its share of the
  // global objective's).
  ValueId allreduce(ValueId x);
  // Vertex-cut halo exchange over the vertex rows x [N, F]: every replica of
  // a vertex gets the sum over replicas. Backward: halo_sum of the gradient.
  ValueId halo_sum(ValueId x);
  // Every replica gets the max (min) over replicas. With arg (the local
  // winning edge of a max/min aggregation of `graph`) the winner is global:
  // the largest value, NaN first, ties to the lowest global edge id, and the
  // returned arg keeps the local edge only on the winning rank (E elsewhere).
  // Without arg: values only, no gradient (a softmax shift).
  std::pair<ValueId, ValueId> halo_max(ops::Reduce reduce, ValueId x, ValueId arg = kNoValue,
                                       int32_t graph = -1);

  // The pieces aggregate() is made of, and what fusion makes of them.
  ValueId gather(int32_t graph, ValueId x);                     // [E, F] = x[src(e)]
  ValueId edge_scale(ValueId messages, ValueId edge_weight);    // [E, F] * w [E, H]
  // Returns {out [N_dst, F], arg [N_dst, F] i32 (max/min) or kNoValue}.
  std::pair<ValueId, ValueId> scatter(ops::Reduce reduce, int32_t graph, ValueId messages);
  std::pair<ValueId, ValueId> spmm(ops::Reduce reduce, int32_t graph, ValueId x,
                                   ValueId edge_weight = kNoValue);
  // The pieces of a partitioned softmax (ops/segment_softmax.h).
  ValueId segment_softmax(int32_t graph, ValueId score);
  ValueId segment_max(int32_t graph, ValueId score);
  ValueId segment_exp_sum(int32_t graph, ValueId score, ValueId m);
  ValueId segment_softmax_apply(int32_t graph, ValueId score, ValueId m, ValueId s);
  ValueId layer_norm_moments(ValueId x, ValueId mask);

  // ---- backward ops (emitted by the autodiff) ----
  ValueId bias_grad(ValueId g);
  ValueId relu_grad(ValueId x, ValueId g);
  ValueId leaky_relu_grad(ValueId x, ValueId g, double slope);
  ValueId elu_grad(ValueId x, ValueId g, double alpha);
  ValueId activation_grad(ValueId x, ValueId g, ops::Activation kind, double bound = 0);
  ValueId dropout_grad(ValueId g, ValueId keep, double p);
  ValueId log_softmax_grad(ValueId out, ValueId g);
  ValueId nll_loss_grad(ValueId log_prob, ValueId labels, ValueId mask, ValueId g, ValueId count);
  ValueId cross_entropy_grad(ValueId x, ValueId labels, ValueId mask, ValueId g, ValueId count);
  ValueId mse_loss_grad(ValueId pred, ValueId target, ValueId mask, ValueId g, ValueId count,
                        ops::LossForm form = ops::LossForm::kSquared);
  ValueId head_dot_grad_x(ValueId att, ValueId g, int64_t heads);
  ValueId head_dot_grad_att(ValueId x, ValueId g, ValueId att, int64_t heads);  // att's shape
  ValueId head_mean_grad(ValueId g, int64_t heads);
  ValueId layer_norm_grad_sums(ValueId x, ValueId gamma, ValueId g, ValueId moments);
  ValueId layer_norm_grad_x(ValueId x, ValueId gamma, ValueId g, ValueId moments, ValueId sums,
                            ValueId mask, const OpAttrs& forward);
  ValueId layer_norm_grad_gamma(ValueId x, ValueId g, ValueId gamma, ValueId moments,
                                const OpAttrs& forward);
  ValueId gather_grad(int32_t graph, ValueId g);
  ValueId edge_dot(ValueId g, ValueId messages, ValueId edge_weight);  // edge_weight's shape
  ValueId scatter_grad(ops::Reduce reduce, int32_t graph, ValueId g, ValueId arg);
  ValueId spmm_grad_x(ops::Reduce reduce, int32_t graph, ValueId x, ValueId edge_weight,
                      ValueId g, ValueId arg);
  ValueId spmm_grad_w(ops::Reduce reduce, int32_t graph, ValueId x, ValueId g,
                      ValueId edge_weight, ValueId arg);
  ValueId sparse_matmul_grad_b(int32_t matrix, ValueId values, ValueId g, ValueId b,
                               bool trans_b);  // b's shape
  ValueId sddmm_add_grad_a(int32_t graph, ValueId g);
  ValueId sddmm_add_grad_b(int32_t graph, ValueId g);
  ValueId sddmm_dot_grad_a(int32_t graph, ValueId b, ValueId g, int64_t heads);
  ValueId sddmm_dot_grad_b(int32_t graph, ValueId a, ValueId g, int64_t heads);
  ValueId head_outer(ValueId a, ValueId b, int64_t heads);  // [H*P, Q]: a_hᵀ b_h stacked
  ValueId segment_softmax_grad(int32_t graph, ValueId alpha, ValueId g);
  // The gradient of attention_softmax's logits (before sddmm_add's backward).
  ValueId attention_softmax_grad(int32_t graph, ValueId a, ValueId b, ValueId alpha, ValueId g,
                                 double slope);
  ValueId segment_exp_sum_grad(int32_t graph, ValueId score, ValueId m, ValueId g);
  ValueId segment_softmax_apply_grad_s(int32_t graph, ValueId alpha, ValueId g, ValueId s);
  ValueId keep_winners(int32_t graph, ValueId g, ValueId arg);

  // ---- gradient buckets (emitted by the compiler in partitioned train steps) ----
  // Copies the gradients into one buffer and starts its all-reduce.
  ValueId bucket_start(const std::vector<ValueId>& grads, uint64_t bucket);
  // Waits for it and returns the all-reduced gradients, shaped like `grads`.
  std::vector<ValueId> bucket_wait(ValueId bucket_value, const std::vector<ValueId>& grads,
                                   uint64_t bucket);

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
  using Shape = std::vector<int64_t>;
  ValueId new_value(std::string name, DType dtype, Shape shape, Role role);
  // Appends op `kind` with results by its shape rule (op_defs.h), which
  // checks the operands first; `given` names and shapes the results of ops
  // whose operands do not fix them (the rule checks those too). Returns
  // the results.
  std::vector<ValueId> emit_op(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs = {},
                               const std::vector<std::pair<std::string, Shape>>& given = {});
  ValueId emit(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs = {}) {
    return emit_op(kind, std::move(inputs), std::move(attrs)).at(0);
  }
  std::pair<ValueId, ValueId> reduction(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs);
  ValueId per_head(OpKind kind, int32_t graph, std::vector<ValueId> inputs, ValueId scores);
  std::vector<ValueId> with_count(std::vector<ValueId> inputs, ValueId mask);
  static std::vector<ValueId> loss_grad_inputs(ValueId x, ValueId labels, ValueId mask, ValueId g,
                                               ValueId count);
  int64_t weight_heads(ValueId edge_weight) const;
  std::string where(OpKind kind) const;      // "matmul (conv1)"
  std::string temp_name(OpKind kind) const;  // "conv1/matmul"
  [[noreturn]] void fail(OpKind kind, const std::string& what) const;
  const GraphInfo& graph_info(OpKind kind, int32_t graph) const;
  OpAttrs graph_attrs(OpKind kind, int32_t graph) const;
  static OpAttrs with_heads(int64_t heads);  // attributes of a per-head op
  // The partitioned program's inputs (file comment).
  ValueId node_input(const char* name, DType dtype);
  ValueId graph_input(int32_t graph, bool edges);
  ValueId mask_count(ValueId mask);

  Program program_;
  std::string scope_;
};

}  // namespace gnnrt::runtime
