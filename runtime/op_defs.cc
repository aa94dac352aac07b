#include "runtime/op_defs.h"

#include <fmt/format.h>

#include <array>

#include "ops/activation.h"
#include "ops/sparse_matmul.h"
#include "runtime/builder.h"

namespace gnnrt::runtime {

using Shape = std::vector<int64_t>;

// ---- OpCheck ----

OpCheck::OpCheck(const Program& p, const Op& op, std::string where)
    : p_(p), op_(op), where_(std::move(where)) {}

void OpCheck::fail(const std::string& what) const {
  throw ShapeError(fmt::format("program '{}': {}: {}", p_.name, where_, what));
}

const ValueInfo& OpCheck::in(std::size_t i) const {
  if (!has(i)) fail(fmt::format("operand {} is missing", i));
  const ValueId v = op_.inputs[i];
  if (v < 0 || static_cast<std::size_t>(v) >= p_.values.size()) {
    fail(fmt::format("operand {} is %{}, which does not exist", i, v));
  }
  return p_.value(v);
}

int64_t OpCheck::rows(std::size_t i) const {
  if (shape(i).empty()) fail(fmt::format("operand {} is a scalar without rows", i));
  return shape(i)[0];
}

const GraphInfo& OpCheck::graph() const {
  if (!op_.attrs.has_graph()) fail("names no graph");
  const int32_t g = op_.attrs.graph();
  if (g < 0 || static_cast<std::size_t>(g) >= p_.graphs.size()) fail(fmt::format("no graph #{}", g));
  return p_.graphs[static_cast<std::size_t>(g)];
}

void OpCheck::operands(std::size_t min, std::size_t max) const {
  if (count() < min || count() > max) {
    fail(min == max ? fmt::format("takes {} operands, has {}", min, count())
                    : fmt::format("takes {} to {} operands, has {}", min, max, count()));
  }
}

void OpCheck::rank(std::size_t i, std::size_t r, const char* what) const {
  if (shape(i).size() != r) {
    fail(fmt::format("{} must have {} dimensions, has shape {}", what, r, shape_string(shape(i))));
  }
}

void OpCheck::dtype(std::size_t i, DType d, const char* what) const {
  if (in(i).dtype != d) {
    fail(fmt::format("{} must be {}, not {}", what, to_string(d), to_string(in(i).dtype)));
  }
}

void OpCheck::same_shape(std::size_t i, std::size_t j, const char* a, const char* b) const {
  if (shape(i) != shape(j)) {
    fail(fmt::format("{} {} and {} {} must have the same shape", a, shape_string(shape(i)), b,
                     shape_string(shape(j))));
  }
}

void OpCheck::shape_is(std::size_t i, const Shape& s, const char* what) const {
  if (shape(i) != s) {
    fail(fmt::format("{} {} must be {}", what, shape_string(shape(i)), shape_string(s)));
  }
}

void OpCheck::partitioned() const {
  if (!p_.partitioned) fail("only a partitioned program exchanges halo rows");
}

void OpCheck::out(DType d, Shape s, std::string suffix) {
  outputs_.push_back(OutputSpec{d, std::move(s), std::move(suffix)});
}

const Shape& OpCheck::given(std::size_t k) const {
  if (k >= op_.outputs.size()) fail(fmt::format("has no result {} to take its shape from", k));
  const ValueId v = op_.outputs[k];
  if (v < 0 || static_cast<std::size_t>(v) >= p_.values.size()) {
    fail(fmt::format("result {} is %{}, which does not exist", k, v));
  }
  return p_.value(v).shape;
}

namespace {

// ---- checks several rules share ----

int64_t heads_of(const OpCheck& c) {
  const int64_t h = c.attrs().heads();
  if (h < 1) c.fail(fmt::format("heads = {} must be >= 1", h));
  return h;
}

void probability(const OpCheck& c) {
  const double p = c.attrs().alpha();
  if (!(p >= 0 && p <= 1)) c.fail(fmt::format("p = {} is not in [0, 1]", p));
}

// Operand i: a float matrix.
void matrix(const OpCheck& c, std::size_t i, const char* what) {
  c.rank(i, 2, what);
  c.floating(i, what);
}

// Operand i: a float matrix with `n` rows (`whose`: what the rows are).
void rows_of(const OpCheck& c, std::size_t i, const char* what, int64_t n, const std::string& whose) {
  matrix(c, i, what);
  if (c.rows(i) != n) {
    c.fail(fmt::format("{} {} must have {} rows, {}", what, shape_string(c.shape(i)), n, whose));
  }
}

// Operand i: a vector [n] of dtype d.
void vector_of(const OpCheck& c, std::size_t i, DType d, int64_t n, const char* what) {
  c.dtype(i, d, what);
  c.shape_is(i, {n}, what);
}

// The global count of a loss's real rows (i64 [1], a partitioned or
// data-parallel program's) at i, when present.
void optional_count(const OpCheck& c, std::size_t i) {
  if (c.has(i)) vector_of(c, i, DType::kI64, 1, "count");
}

// An edge weight [E] or [E, H] at i whose heads split `features` and equal
// the op's `heads` attribute.
void edge_weight(const OpCheck& c, std::size_t i, int64_t edges, int64_t features) {
  c.floating(i, "edge weight");
  const Shape& w = c.shape(i);
  const bool fits = (w.size() == 1 && w[0] == edges) || (w.size() == 2 && w[0] == edges && w[1] >= 1);
  if (!fits) {
    c.fail(fmt::format("edge weight {} must be [E] or [E, H] with E = {}", shape_string(w), edges));
  }
  const int64_t h = w.size() == 2 ? w[1] : 1;
  if (features % h != 0) {
    c.fail(fmt::format("features {} are not divisible by the edge weight's {} heads", features, h));
  }
  if (c.attrs().heads() != h) {
    c.fail(fmt::format("heads = {} does not match the edge weight {}", c.attrs().heads(), shape_string(w)));
  }
}

void no_weight_heads(const OpCheck& c) {
  if (c.attrs().heads() > 1) c.fail(fmt::format("heads = {} without an edge weight", c.attrs().heads()));
}

ops::Reduce reduction(const OpCheck& c) {
  const int r = c.attrs().reduce();
  if (r < 0 || r > static_cast<int>(ops::Reduce::kMin)) c.fail(fmt::format("reduce #{} is unknown", r));
  return static_cast<ops::Reduce>(r);
}

// The results of a max/min reduction: its value and the winning edge per element.
void value_and_arg(OpCheck& c, ops::Reduce reduce, const Shape& s) {
  c.out_float(s);
  if (ops::has_arg(reduce)) c.out(DType::kI32, s, ".arg");
}

// Per-edge scores [E, H] at i, with heads = H.
int64_t edge_scores(const OpCheck& c, std::size_t i, const char* what) {
  const GraphInfo& g = c.graph();
  rows_of(c, i, what, g.num_edges, fmt::format("the edges of graph '{}'", g.name));
  const int64_t h = c.cols(i);
  if (c.attrs().heads() != h) c.fail(fmt::format("heads = {} but {} has {} columns", c.attrs().heads(), what, h));
  return h;
}

// Per-destination rows [N_dst, h] at i.
void dst_rows(const OpCheck& c, std::size_t i, const char* what, int64_t h) {
  const GraphInfo& g = c.graph();
  matrix(c, i, what);
  if (c.shape(i) != Shape{g.num_dst, h}) {
    c.fail(fmt::format("{} {} must be [{}, {}] (graph '{}')", what, shape_string(c.shape(i)), g.num_dst,
                       h, g.name));
  }
}

// a [N_src, H] at i, b [N_dst, H] at i + 1: sddmm_add and attention_softmax.
int64_t per_endpoint(const OpCheck& c, std::size_t i) {
  const GraphInfo& g = c.graph();
  matrix(c, i, "a");
  matrix(c, i + 1, "b");
  if (c.rows(i) != g.num_src || c.rows(i + 1) != g.num_dst || c.cols(i) != c.cols(i + 1)) {
    c.fail(fmt::format("a {} must be [{}, H] and b {} [{}, H] (graph '{}')", shape_string(c.shape(i)),
                       g.num_src, shape_string(c.shape(i + 1)), g.num_dst, g.name));
  }
  if (c.attrs().heads() != c.cols(i)) {
    c.fail(fmt::format("heads = {} but a has {} columns", c.attrs().heads(), c.cols(i)));
  }
  return c.cols(i);
}

// The stored values [nnz] of the op's sparse matrix (a graph) at i.
const GraphInfo& stored_values(const OpCheck& c, std::size_t i) {
  const GraphInfo& g = c.graph();
  c.floating(i, "values");
  if (c.shape(i) != Shape{g.num_edges}) {
    c.fail(fmt::format("values {} must be [{}], the stored entries of '{}'", shape_string(c.shape(i)),
                       g.num_edges, g.name));
  }
  return g;
}

// A matrix with a row per local vertex of a partitioned program.
void halo_rows(const OpCheck& c) {
  c.partitioned();
  matrix(c, 0, "x");
  if (c.rows(0) != c.program().local_nodes) {
    c.fail(fmt::format("x {} must have a row per local vertex ({})", shape_string(c.shape(0)),
                       c.program().local_nodes));
  }
}

// The class ops: x [rows, classes] at i, labels and mask [rows] after it.
void class_loss(const OpCheck& c, const char* x_name, std::size_t i = 0) {
  c.rank(i, 2, x_name);
  c.floating(i, x_name);
  c.dtype(i + 1, DType::kI64, "labels");
  c.dtype(i + 2, DType::kBool, "mask");
  const Shape rows{c.rows(i)};
  if (c.shape(i + 1) != rows || c.shape(i + 2) != rows) {
    c.fail(fmt::format("labels {} and mask {} must be [{}] for {} {}", shape_string(c.shape(i + 1)),
                       shape_string(c.shape(i + 2)), rows[0], x_name, shape_string(c.shape(i))));
  }
}

// A loss gradient's seed: g [1] at i.
void loss_seed(const OpCheck& c, std::size_t i) {
  c.floating(i, "g");
  c.shape_is(i, {1}, "g");
}

// ---- the shape rules, one per op ----

void fill(OpCheck& c) {
  c.operands(0, 0);
  c.out_float(Shape(c.attrs().shape().begin(), c.attrs().shape().end()));
}

void matmul(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "a");
  matrix(c, 1, "b");
  const Shape& sa = c.shape(0);
  const Shape& sb = c.shape(1);
  const bool ta = c.attrs().trans_a(), tb = c.attrs().trans_b();
  const int64_t m = ta ? sa[1] : sa[0], ka = ta ? sa[0] : sa[1];
  const int64_t kb = tb ? sb[1] : sb[0], n = tb ? sb[0] : sb[1];
  if (ka != kb) {
    c.fail(fmt::format("inner sizes differ: a {}{} times b {}{}", shape_string(sa), ta ? "ᵀ" : "",
                       shape_string(sb), tb ? "ᵀ" : ""));
  }
  c.out_float({m, n});
}

// add, mul: elementwise over two operands of one shape.
void binary(OpCheck& c) {
  c.operands(2, 2);
  c.same_shape(0, 1, "a", "b");
  c.floating(0, "a");
  c.floating(1, "b");
  c.out_float(c.shape(0));
}

// scale, relu, leaky_relu, elu, activation: elementwise over one operand.
void unary(OpCheck& c) {
  c.operands(1, 1);
  c.floating(0, "x");
  if (c.op().kind == OpKind::kActivation) {
    const int a = c.attrs().activation();
    if (a < 0 || a > static_cast<int>(ops::Activation::kClip)) {
      c.fail(fmt::format("activation #{} is unknown", a));
    }
    if (a == static_cast<int>(ops::Activation::kClip) && !(c.attrs().alpha() >= 0)) {
      c.fail(fmt::format("clip bound {} must be >= 0", c.attrs().alpha()));
    }
  }
  c.out_float(c.shape(0));
}

void bias_add(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "x");
  c.floating(1, "bias");
  if (c.shape(1) != Shape{c.cols(0)}) {
    c.fail(fmt::format("bias {} does not match x {}", shape_string(c.shape(1)), shape_string(c.shape(0))));
  }
  c.out_float(c.shape(0));
}

void concat(OpCheck& c) {
  if (c.count() == 0) c.fail("no inputs");
  int64_t width = 0;
  for (std::size_t i = 0; i < c.count(); ++i) {
    matrix(c, i, "input");
    if (c.rows(i) != c.rows(0)) {
      c.fail(fmt::format("input {} {} and input 0 {} differ in rows", i, shape_string(c.shape(i)),
                         shape_string(c.shape(0))));
    }
    width += c.cols(i);
  }
  c.out_float({c.rows(0), width});
}

void slice_cols(OpCheck& c) {
  c.operands(1, 1);
  matrix(c, 0, "x");
  const int64_t begin = c.attrs().begin(), width = c.attrs().width();
  if (begin < 0 || width < 0 || begin + width > c.cols(0)) {
    c.fail(fmt::format("columns {} .. {} are not within x {}", begin, begin + width, shape_string(c.shape(0))));
  }
  c.out_float({c.rows(0), width});
}

void reshape(OpCheck& c) {
  c.operands(1, 1);
  c.floating(0, "x");
  const Shape s(c.attrs().shape().begin(), c.attrs().shape().end());
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) c.fail(fmt::format("shape {} has a negative size", shape_string(s)));
    n *= d;
  }
  if (n != c.in(0).elements()) {
    c.fail(fmt::format("x {} has {} elements, shape {} {}", shape_string(c.shape(0)), c.in(0).elements(),
                       shape_string(s), n));
  }
  c.out_float(s);
}

// (x[, global_rows]) -> (out, keep)
void dropout(OpCheck& c) {
  c.operands(1, 2);
  c.floating(0, "x");
  probability(c);
  if (c.has(1)) {
    c.dtype(1, DType::kI64, "global row ids");
    if (c.shape(1) != Shape{c.rows(0)}) {
      c.fail(fmt::format("x {} has another row count than its global ids {}", shape_string(c.shape(0)),
                         shape_string(c.shape(1))));
    }
  }
  c.out_float(c.shape(0));
  c.out(DType::kBool, c.shape(0), ".keep");
}

// (global_rows [N]) -> [N, width]
void normal(OpCheck& c) {
  c.operands(1, 1);
  c.dtype(0, DType::kI64, "global row ids");
  c.rank(0, 1, "global row ids");
  if (c.attrs().width() < 0) c.fail(fmt::format("width {} is negative", c.attrs().width()));
  c.out_float({c.rows(0), c.attrs().width()});
}

void log_softmax(OpCheck& c) {
  c.operands(1, 1);
  matrix(c, 0, "x");
  c.out_float(c.shape(0));
}

// (x, labels, mask[, count]) -> [1]
void nll_loss(OpCheck& c) {
  c.operands(3, 4);
  class_loss(c, c.op().kind == OpKind::kNllLoss ? "log_prob" : "x");
  optional_count(c, 3);
  c.out_float({1});
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

void head_dot(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "x");
  c.floating(1, "att");
  const int64_t f = c.cols(0), heads = c.attrs().heads();
  if (heads < 1 || f % heads != 0 || c.in(1).elements() != f) {
    c.fail(fmt::format("x {} and att {} do not split into {} heads", shape_string(c.shape(0)),
                       shape_string(c.shape(1)), heads));
  }
  c.out_float({c.rows(0), heads});
}

void head_mean(OpCheck& c) {
  c.operands(1, 1);
  matrix(c, 0, "x");
  const int64_t heads = c.attrs().heads();
  if (heads < 1 || c.cols(0) % heads != 0) {
    c.fail(fmt::format("x {} does not split into {} heads", shape_string(c.shape(0)), heads));
  }
  c.out_float({c.rows(0), c.cols(0) / heads});
}

// (x[, mask]) -> [3] f64
void layer_norm_moments(OpCheck& c) {
  c.operands(1, 2);
  matrix(c, 0, "x");
  if (c.has(1)) vector_of(c, 1, DType::kBool, c.rows(0), "mask");
  c.out(DType::kF64, {3});
}

// x [N, C] and gamma [C] at 0 and 1; the moments [3] f64 at i when present.
void norm_operands(const OpCheck& c, std::size_t moments) {
  matrix(c, 0, "x");
  c.floating(1, "weight");
  if (c.shape(1) != Shape{c.cols(0)}) {
    c.fail(fmt::format("weight {} must be [{}] for x {}", shape_string(c.shape(1)), c.cols(0),
                       shape_string(c.shape(0))));
  }
  if (!(c.attrs().alpha() > 0)) c.fail(fmt::format("eps = {} must be > 0", c.attrs().alpha()));
  if (c.attrs().per_node() == c.has(moments)) {
    c.fail(c.attrs().per_node() ? "per-node mode takes no moments" : "graph mode needs the moments");
  }
  if (c.has(moments)) vector_of(c, moments, DType::kF64, 3, "moments");
}

// (x, gamma, beta[, moments[, mask]])
void layer_norm(OpCheck& c) {
  c.operands(3, 5);
  matrix(c, 0, "x");
  if (c.shape(1) != Shape{c.cols(0)} || c.shape(2) != Shape{c.cols(0)}) {
    c.fail(fmt::format("weight {} and bias {} must be [{}] for x {}", shape_string(c.shape(1)),
                       shape_string(c.shape(2)), c.cols(0), shape_string(c.shape(0))));
  }
  c.floating(2, "bias");
  norm_operands(c, 3);
  if (c.has(4)) vector_of(c, 4, DType::kBool, c.rows(0), "mask");
  c.out_float(c.shape(0));
}

void divide_rows(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "x");
  c.dtype(1, DType::kI64, "degree");
  if (c.shape(1) != Shape{c.rows(0)}) {
    c.fail(fmt::format("degree {} must be [{}] for x {}", shape_string(c.shape(1)), c.rows(0),
                       shape_string(c.shape(0))));
  }
  c.out_float(c.shape(0));
}

// ([degree]) -> [E]
void gcn_norm(OpCheck& c) {
  c.operands(0, 1);
  const GraphInfo& g = c.graph();
  if (g.num_src != g.num_dst) {
    c.fail(fmt::format("graph '{}' joins {} source and {} destination nodes; GCN needs one node set",
                       g.name, g.num_src, g.num_dst));
  }
  if (c.has(0)) vector_of(c, 0, DType::kI64, g.num_dst, "degree");
  c.out_float({g.num_edges});
}

void gather(OpCheck& c) {
  c.operands(1, 1);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "x", g.num_src, fmt::format("the source nodes of graph '{}'", g.name));
  c.out_float({g.num_edges, c.cols(0)});
}

void edge_scale(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "messages");
  edge_weight(c, 1, c.rows(0), c.cols(0));
  c.out_float(c.shape(0));
}

void scatter(OpCheck& c) {
  c.operands(1, 1);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "messages", g.num_edges, fmt::format("the edges of graph '{}'", g.name));
  value_and_arg(c, reduction(c), {g.num_dst, c.cols(0)});
}

// (x[, w]) -> (out[, arg])
void spmm(OpCheck& c) {
  c.operands(1, 2);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "x", g.num_src, fmt::format("the source nodes of graph '{}'", g.name));
  if (c.has(1)) {
    edge_weight(c, 1, g.num_edges, c.cols(0));
  } else {
    no_weight_heads(c);
  }
  value_and_arg(c, reduction(c), {g.num_dst, c.cols(0)});
}

// (values, b[, b2]) -> (out, workspace[, out2, workspace2])
void sparse_matmul(OpCheck& c) {
  c.operands(2, 3);
  const GraphInfo& g = stored_values(c, 0);
  matrix(c, 1, "b");
  const Shape& sb = c.shape(1);
  const bool tb = c.attrs().trans_b();
  const int64_t kb = tb ? sb[1] : sb[0], m = tb ? sb[0] : sb[1];
  if (kb != g.num_src) {
    c.fail(fmt::format("inner sizes differ: '{}' [{}, {}] times b {}{}", g.name, g.num_dst, g.num_src,
                       shape_string(sb), tb ? "ᵀ" : ""));
  }
  if (c.has(2)) c.same_shape(1, 2, "b", "b2");
  // b transposed once per call, so every stored value reads one contiguous row.
  for (std::size_t k = 1; k < c.count(); ++k) {
    c.out_float({g.num_dst, m}, k == 1 ? "" : ".2");
    c.out_float(tb ? Shape{g.num_src, m} : Shape{0}, ".workspace");
  }
}

// (values[, global_rows])
void sparse_dropout(OpCheck& c) {
  c.operands(1, 2);
  const GraphInfo& g = stored_values(c, 0);
  probability(c);
  if (c.has(1)) {
    c.dtype(1, DType::kI64, "global row ids");
    if (c.shape(1) != Shape{g.num_dst}) {
      c.fail(fmt::format("'{}' has {} rows, its global ids {}", g.name, g.num_dst, shape_string(c.shape(1))));
    }
  }
  c.out_float(c.shape(0));
}

void sddmm_add(OpCheck& c) {
  c.operands(2, 2);
  const int64_t h = per_endpoint(c, 0);
  c.out_float({c.graph().num_edges, h});
}

void attention_softmax(OpCheck& c) {
  c.operands(2, 2);
  if (c.program().partitioned) c.fail("a partitioned program's softmax runs in pieces (Builder::softmax)");
  const int64_t h = per_endpoint(c, 0);
  c.out_float({c.graph().num_edges, h});
}

void sddmm_dot(OpCheck& c) {
  c.operands(2, 2);
  const GraphInfo& g = c.graph();
  matrix(c, 0, "a");
  matrix(c, 1, "b");
  const int64_t heads = c.attrs().heads();
  if (c.rows(0) != g.num_src || c.rows(1) != g.num_dst || c.cols(0) != c.cols(1) || heads < 1 ||
      c.cols(0) % heads != 0) {
    c.fail(fmt::format("a {} must be [{}, F] and b {} [{}, F] with F divisible by {} heads (graph '{}')",
                       shape_string(c.shape(0)), g.num_src, shape_string(c.shape(1)), g.num_dst, heads,
                       g.name));
  }
  c.out_float({g.num_edges, heads});
}

// Edge rows shared by heads: the graph's [N_dst, H*K] node rows at
// `node`, [E, H] weights at `weight` (when not npos) and [E, K] edge rows at
// `edge`; returns K. heads = H.
int64_t head_edge_operands(const OpCheck& c, std::size_t node, std::size_t weight, std::size_t edge) {
  const GraphInfo& g = c.graph();
  const int64_t heads = heads_of(c);
  if (weight != std::string::npos) edge_scores(c, weight, "w");
  if (node != std::string::npos) {
    rows_of(c, node, "a", g.num_dst, fmt::format("the destinations of graph '{}'", g.name));
    if (c.cols(node) % heads != 0) {
      c.fail(fmt::format("a {} does not split into {} heads", shape_string(c.shape(node)), heads));
    }
  }
  if (edge != std::string::npos) {
    rows_of(c, edge, "r", g.num_edges, fmt::format("the edges of graph '{}'", g.name));
    if (node != std::string::npos && c.cols(node) != heads * c.cols(edge)) {
      c.fail(fmt::format("a {} must have {} heads of r's {} columns", shape_string(c.shape(node)), heads,
                         c.cols(edge)));
    }
    return c.cols(edge);
  }
  return c.cols(node) / heads;
}

constexpr std::size_t kAbsent = std::string::npos;

// (a [N_dst, H*K], r [E, K]) -> [E, H]
void edge_head_dot(OpCheck& c) {
  c.operands(2, 2);
  head_edge_operands(c, 0, kAbsent, 1);
  c.out_float({c.graph().num_edges, c.attrs().heads()});
}

// (w [E, H], r [E, K]) -> [N_dst, H*K]
void head_scatter(OpCheck& c) {
  c.operands(2, 2);
  const int64_t k = head_edge_operands(c, kAbsent, 0, 1);
  c.out_float({c.graph().num_dst, c.attrs().heads() * k});
}

// (w [E, H], a [N_dst, H*K]) -> [E, K]
void head_gather(OpCheck& c) {
  c.operands(2, 2);
  const int64_t k = head_edge_operands(c, 1, 0, kAbsent);
  c.out_float({c.graph().num_edges, k});
}

// (x [N, H*P], w [H*P, Q] or, trans_b, [H*Q, P]) -> [N, H*Q]
void head_matmul(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "x");
  matrix(c, 1, "w");
  const int64_t heads = heads_of(c);
  const bool trans = c.attrs().trans_b();
  const int64_t p = c.cols(0) / heads;
  const int64_t w_p = trans ? c.cols(1) : c.rows(1) / heads;
  if (c.cols(0) % heads != 0 || c.rows(1) % heads != 0 || w_p != p) {
    c.fail(fmt::format("x {} and w {}{} do not split into {} heads of one inner size", shape_string(c.shape(0)),
                       shape_string(c.shape(1)), trans ? "ᵀ" : "", heads));
  }
  c.out_float({c.rows(0), heads * (trans ? c.rows(1) / heads : c.cols(1))});
}

// (a [N, H*P], b [N, H*Q]) -> [H*P, Q]
void head_outer(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "a");
  matrix(c, 1, "b");
  const int64_t heads = heads_of(c);
  if (c.rows(0) != c.rows(1) || c.cols(0) % heads != 0 || c.cols(1) % heads != 0) {
    c.fail(fmt::format("a {} and b {} must have the same rows and split into {} heads", shape_string(c.shape(0)),
                       shape_string(c.shape(1)), heads));
  }
  c.out_float({c.cols(0), c.cols(1) / heads});
}

void segment_softmax(OpCheck& c) {
  c.operands(1, 1);
  edge_scores(c, 0, "score");
  c.out_float(c.shape(0));
}

void segment_max(OpCheck& c) {
  c.operands(1, 1);
  const int64_t h = edge_scores(c, 0, "score");
  c.out_float({c.graph().num_dst, h});
}

// (score, m) -> s
void segment_exp_sum(OpCheck& c) {
  c.operands(2, 2);
  const int64_t h = edge_scores(c, 0, "score");
  dst_rows(c, 1, "m", h);
  c.out_float({c.graph().num_dst, h});
}

// (score, m, s) -> alpha
void segment_softmax_apply(OpCheck& c) {
  c.operands(3, 3);
  const int64_t h = edge_scores(c, 0, "score");
  dst_rows(c, 1, "m", h);
  dst_rows(c, 2, "s", h);
  c.out_float(c.shape(0));
}

// ---- backward ----

void bias_grad(OpCheck& c) {
  c.operands(1, 1);
  matrix(c, 0, "g");
  c.out_float({c.cols(0)});
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

void dropout_grad(OpCheck& c) {
  c.operands(2, 2);
  c.floating(0, "g");
  c.dtype(1, DType::kBool, "keep");
  c.same_shape(0, 1, "g", "keep");
  probability(c);
  c.out_float(c.shape(0));
}

// (x, labels, mask, g[, count]) -> x's shape
void nll_loss_grad(OpCheck& c) {
  c.operands(4, 5);
  class_loss(c, c.op().kind == OpKind::kNllLossGrad ? "log_prob" : "x");
  loss_seed(c, 3);
  optional_count(c, 4);
  c.out_float(c.shape(0));
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

// (att, g[, plus]) -> [N, H*C] (+ plus)
void head_dot_grad_x(OpCheck& c) {
  c.operands(2, 3);
  c.floating(0, "att");
  matrix(c, 1, "g");
  const int64_t heads = heads_of(c), f = c.in(0).elements();
  if (c.cols(1) != heads || f % heads != 0) {
    c.fail(fmt::format("att {} and g {} do not split into {} heads", shape_string(c.shape(0)),
                       shape_string(c.shape(1)), heads));
  }
  const Shape out{c.rows(1), f};
  if (c.has(2)) {
    c.floating(2, "plus");
    c.shape_is(2, out, "plus");
  }
  c.out_float(out);
}

// (x, g) -> att's shape (the result as given: att is not an operand)
void head_dot_grad_att(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "x");
  matrix(c, 1, "g");
  const int64_t heads = heads_of(c);
  if (c.shape(1) != Shape{c.rows(0), heads} || c.cols(0) % heads != 0) {
    c.fail(fmt::format("x {} and g {} do not split into {} heads", shape_string(c.shape(0)),
                       shape_string(c.shape(1)), heads));
  }
  const Shape& att = c.given(0);
  int64_t n = 1;
  for (int64_t d : att) n *= d;
  if (n != c.cols(0)) c.fail(fmt::format("att {} must hold {} elements", shape_string(att), c.cols(0)));
  c.out_float(att);
}

void head_mean_grad(OpCheck& c) {
  c.operands(1, 1);
  matrix(c, 0, "g");
  c.out_float({c.rows(0), c.cols(0) * heads_of(c)});
}

// (x, gamma, g, moments) -> [2] f64
void layer_norm_grad_sums(OpCheck& c) {
  c.operands(4, 4);
  matrix(c, 0, "x");
  c.floating(1, "weight");
  c.shape_is(1, {c.cols(0)}, "weight");
  c.floating(2, "g");
  c.same_shape(0, 2, "x", "g");
  vector_of(c, 3, DType::kF64, 3, "moments");
  c.out(DType::kF64, {2});
}

// (x, gamma, g[, moments, sums[, mask]]) -> x's shape
void layer_norm_grad_x(OpCheck& c) {
  c.operands(3, 6);
  if (c.count() == 4) c.fail("the moments come with their sums");
  norm_operands(c, 3);
  c.floating(2, "g");
  c.same_shape(0, 2, "x", "g");
  if (c.has(4)) vector_of(c, 4, DType::kF64, 2, "sums");
  if (c.has(5)) vector_of(c, 5, DType::kBool, c.rows(0), "mask");
  c.out_float(c.shape(0));
}

// (x, g[, moments]) -> [C]
void layer_norm_grad_gamma(OpCheck& c) {
  c.operands(2, 3);
  matrix(c, 0, "x");
  c.floating(1, "g");
  c.same_shape(0, 1, "x", "g");
  if (c.attrs().per_node() == c.has(2)) {
    c.fail(c.attrs().per_node() ? "per-node mode takes no moments" : "graph mode needs the moments");
  }
  if (c.has(2)) vector_of(c, 2, DType::kF64, 3, "moments");
  c.out_float({c.cols(0)});
}

void gather_grad(OpCheck& c) {
  c.operands(1, 1);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "g", g.num_edges, fmt::format("the edges of graph '{}'", g.name));
  c.out_float({g.num_src, c.cols(0)});
}

// (g, messages) -> the edge weight's shape (given: [E] or [E, H])
void edge_dot(OpCheck& c) {
  c.operands(2, 2);
  matrix(c, 0, "g");
  c.floating(1, "messages");
  c.same_shape(0, 1, "g", "messages");
  const int64_t heads = heads_of(c);
  const Shape& w = c.given(0);
  if (!(w == Shape{c.rows(0)} && heads == 1) && w != Shape{c.rows(0), heads}) {
    c.fail(fmt::format("the edge weight {} does not fit g {} with {} heads", shape_string(w),
                       shape_string(c.shape(0)), heads));
  }
  if (c.cols(0) % heads != 0) c.fail(fmt::format("g {} does not split into {} heads", shape_string(c.shape(0)), heads));
  c.out_float(w);
}

// (g[, arg]) -> [E, F]
void scatter_grad(OpCheck& c) {
  c.operands(1, 2);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "g", g.num_dst, fmt::format("the destination nodes of graph '{}'", g.name));
  const bool arg = ops::has_arg(reduction(c));
  if (arg != c.has(1)) c.fail(arg ? "a max/min needs its arg" : "a sum or mean takes no arg");
  if (c.has(1)) {
    c.dtype(1, DType::kI32, "arg");
    c.same_shape(0, 1, "g", "arg");
  }
  c.out_float({g.num_edges, c.cols(0)});
}

// spmm_grad_x (x, g[, w][, arg]) and spmm_grad_w (x, g, w[, arg]).
void spmm_grad(OpCheck& c) {
  const bool grad_w = c.op().kind == OpKind::kSpmmGradW;
  c.operands(grad_w ? 3 : 2, 4);
  const GraphInfo& g = c.graph();
  rows_of(c, 0, "x", g.num_src, fmt::format("the source nodes of graph '{}'", g.name));
  rows_of(c, 1, "g", g.num_dst, fmt::format("the destination nodes of graph '{}'", g.name));
  if (c.cols(1) != c.cols(0)) {
    c.fail(fmt::format("g {} must have x's {} columns", shape_string(c.shape(1)), c.cols(0)));
  }
  if (grad_w && !c.has(2)) c.fail("operand 2, the edge weight, is missing");
  if (c.has(2)) {
    edge_weight(c, 2, g.num_edges, c.cols(0));
  } else {
    no_weight_heads(c);
  }
  const bool arg = ops::has_arg(reduction(c));
  if (arg != c.has(3)) c.fail(arg ? "a max/min needs its arg" : "a sum or mean takes no arg");
  if (c.has(3)) {
    c.dtype(3, DType::kI32, "arg");
    c.same_shape(1, 3, "g", "arg");
  }
  c.out_float(grad_w ? c.shape(2) : c.shape(0));
}

// (values, g[, g2]) -> (b's shape, workspace[, b2's shape, workspace2])
void sparse_matmul_grad_b(OpCheck& c) {
  c.operands(2, 3);
  const GraphInfo& g = stored_values(c, 0);
  rows_of(c, 1, "g", g.num_dst, fmt::format("the rows of '{}'", g.name));
  if (c.has(2)) c.same_shape(1, 2, "g", "g2");
  const int64_t m = c.cols(1);
  const bool tb = c.attrs().trans_b();
  // Accumulators for a walk by rows that ends transposed (ops/sparse_matmul.h).
  const int64_t size = ops::sparse_matmul_backward_b_workspace(g.num_dst, g.num_src, m, tb,
                                                               item_size(c.float_type()));
  for (std::size_t k = 1; k < c.count(); ++k) {
    c.out_float(tb ? Shape{m, g.num_src} : Shape{g.num_src, m}, k == 1 ? "" : ".2");
    c.out_float(size > 0 ? Shape{g.num_src, m} : Shape{0}, ".workspace");
  }
}

// (g [E, H]) -> [N_src or N_dst, H]
void sddmm_add_grad(OpCheck& c) {
  c.operands(1, 1);
  const int64_t h = edge_scores(c, 0, "g");
  const GraphInfo& g = c.graph();
  c.out_float({c.op().kind == OpKind::kSddmmAddGradA ? g.num_src : g.num_dst, h});
}

// sddmm_dot_grad_a (b, g) -> [N_src, F]; sddmm_dot_grad_b (a, g) -> [N_dst, F]
void sddmm_dot_grad(OpCheck& c) {
  c.operands(2, 2);
  const GraphInfo& g = c.graph();
  const bool grad_a = c.op().kind == OpKind::kSddmmDotGradA;
  const int64_t other = grad_a ? g.num_dst : g.num_src;
  rows_of(c, 0, grad_a ? "b" : "a", other, fmt::format("an endpoint set of graph '{}'", g.name));
  const int64_t heads = edge_scores(c, 1, "g");
  if (c.cols(0) % heads != 0) {
    c.fail(fmt::format("{} {} does not split into {} heads", grad_a ? "b" : "a", shape_string(c.shape(0)), heads));
  }
  c.out_float({grad_a ? g.num_src : g.num_dst, c.cols(0)});
}

// (alpha, g) -> [E, H]
void segment_softmax_grad(OpCheck& c) {
  c.operands(2, 2);
  edge_scores(c, 0, "alpha");
  c.floating(1, "g");
  c.same_shape(0, 1, "alpha", "g");
  c.out_float(c.shape(0));
}

// (a, b, alpha, g) -> [E, H]
void attention_softmax_grad(OpCheck& c) {
  c.operands(4, 4);
  per_endpoint(c, 0);
  edge_scores(c, 2, "alpha");
  c.floating(3, "g");
  c.same_shape(2, 3, "alpha", "g");
  c.out_float(c.shape(2));
}

// (score, m, g) -> [E, H]
void segment_exp_sum_grad(OpCheck& c) {
  c.operands(3, 3);
  const int64_t h = edge_scores(c, 0, "score");
  dst_rows(c, 1, "m", h);
  dst_rows(c, 2, "g", h);
  c.out_float(c.shape(0));
}

// (alpha, g, s) -> [N_dst, H]
void segment_softmax_apply_grad_s(OpCheck& c) {
  c.operands(3, 3);
  const int64_t h = edge_scores(c, 0, "alpha");
  c.floating(1, "g");
  c.same_shape(0, 1, "alpha", "g");
  dst_rows(c, 2, "s", h);
  c.out_float(c.shape(2));
}

// (g, arg): g where arg < E, else 0
void keep_winners(OpCheck& c) {
  c.operands(2, 2);
  c.graph();
  c.same_shape(0, 1, "g", "arg");
  c.floating(0, "g");
  c.dtype(1, DType::kI32, "arg");
  c.out_float(c.shape(0));
}

// ---- collectives ----

void allreduce(OpCheck& c) {
  c.operands(1, 1);
  if (!is_floating(c.in(0).dtype)) {
    c.fail(fmt::format("x must be float32 or float64, not {}", to_string(c.in(0).dtype)));
  }
  c.out(c.in(0).dtype, c.shape(0));
}

void halo_sum(OpCheck& c) {
  c.operands(1, 1);
  halo_rows(c);
  c.out_float(c.shape(0));
}

// (x[, arg, edge_id]) -> (y[, arg])
void halo_max(OpCheck& c) {
  c.operands(1, 3);
  halo_rows(c);
  const ops::Reduce reduce = reduction(c);
  if (!ops::has_arg(reduce)) c.fail(fmt::format("reduce {} is not max or min", ops::to_string(reduce)));
  c.out_float(c.shape(0));
  if (c.count() == 1) return;
  c.operands(3, 3);
  c.dtype(1, DType::kI32, "arg");
  c.same_shape(0, 1, "x", "arg");
  vector_of(c, 2, DType::kI64, c.graph().num_edges, "edge ids");
  c.out(DType::kI32, c.shape(0), ".arg");
}

// (g...) -> [Σ elements], its all-reduce started
void bucket_start(OpCheck& c) {
  if (c.count() == 0) c.fail("no gradients");
  int64_t elements = 0;
  for (std::size_t i = 0; i < c.count(); ++i) {
    c.floating(i, "gradient");
    elements += c.in(i).elements();
  }
  c.out_float({elements});
}

// (bucket) -> (g...) shaped as given, their sizes adding up to the bucket's
void bucket_wait(OpCheck& c) {
  c.operands(1, 1);
  c.floating(0, "bucket");
  c.rank(0, 1, "bucket");
  int64_t elements = 0;
  for (std::size_t k = 0; k < c.op().outputs.size(); ++k) {
    const Shape& s = c.given(k);
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    elements += n;
    c.out_float(s);
  }
  if (elements != c.shape(0)[0]) {
    c.fail(fmt::format("the gradients hold {} elements, the bucket {}", elements, c.shape(0)[0]));
  }
}

// ---- state updates ----

void adam_update(OpCheck& c) {
  c.operands(4, 4);
  c.floating(0, "param");
  c.same_shape(0, 1, "param", "grad");
  c.same_shape(0, 2, "param", "m");
  c.same_shape(0, 3, "param", "v");
}

void sgd_update(OpCheck& c) {
  c.operands(3, 3);
  c.floating(0, "param");
  c.same_shape(0, 1, "param", "grad");
  c.same_shape(0, 2, "param", "momentum buffer");
}

// metrics[slot] += scalar
void accumulate(OpCheck& c) {
  c.operands(2, 2);
  c.dtype(0, DType::kF64, "metrics");
  const uint64_t slot = c.attrs().key();
  if (static_cast<int64_t>(slot) >= c.in(0).elements()) {
    c.fail(fmt::format("slot {} is outside metrics {}", slot, shape_string(c.shape(0))));
  }
  if (!is_floating(c.in(1).dtype) || c.in(1).elements() != 1) {
    c.fail(fmt::format("the scalar must be one float, is {} {}", to_string(c.in(1).dtype),
                       shape_string(c.shape(1))));
  }
}

// (metrics, log_prob, labels, mask): metrics[slot], metrics[slot + 1]
void count_correct(OpCheck& c) {
  c.operands(4, 4);
  c.dtype(0, DType::kF64, "metrics");
  const uint64_t slot = c.attrs().key();
  if (static_cast<int64_t>(slot) + 1 >= c.in(0).elements()) {
    c.fail(fmt::format("slots {}..{} are outside metrics {}", slot, slot + 1, shape_string(c.shape(0))));
  }
  class_loss(c, "log_prob", 1);
}

// ---- costs that differ from the generic one ----

double cols_of_first(const Program& p, const Op& op) {
  const ValueInfo& first = p.value(op.inputs.empty() ? op.outputs[0] : op.inputs[0]);
  return first.shape.size() > 1 ? static_cast<double>(first.shape[1]) : 1;
}

double edges_of(const Program& p, const Op& op) {
  return static_cast<double>(p.graphs[static_cast<std::size_t>(op.attrs.graph())].num_edges);
}

void matmul_cost(const Program& p, const Op& op, OpCost& c) {
  const auto& a = p.value(op.inputs[0]).shape;
  const auto& o = p.value(op.outputs[0]).shape;
  const double k = static_cast<double>(op.attrs.trans_a() ? a[0] : a[1]);
  c.flops = 2 * static_cast<double>(o[0]) * static_cast<double>(o[1]) * k;
}

// Each edge gathers a source row instead of reading x once.
void spmm_cost(const Program& p, const Op& op, OpCost& c) {
  const double e = edges_of(p, op), f = cols_of_first(p, op);
  c.bytes += e * f * 4 - static_cast<double>(p.value(op.inputs[0]).bytes());
  c.flops = 2 * e * f;
}

void spmm_grad_w_cost(const Program& p, const Op& op, OpCost& c) {
  const double e = edges_of(p, op), f = cols_of_first(p, op);
  c.bytes += 2 * e * f * 4;
  c.flops = 2 * e * f;
}

// A sparse matrix's stored entry (its value, 4 bytes, and its indices)
// meets one row of the dense operand (b, or the gradient): 2 flops and 4
// bytes per element of that row, for each product of a pair.
void sparse_matmul_cost(const Program& p, const Op& op, OpCost& c) {
  const GraphInfo& g = p.graphs[static_cast<std::size_t>(op.attrs.graph())];
  const double e = static_cast<double>(g.num_edges);
  const ValueId dense = op.inputs[1];
  const double products = static_cast<double>(op.inputs.size() - 1);
  const bool grad = op.kind == OpKind::kSparseMatMulGradB;
  const double m = static_cast<double>(grad ? p.value(dense).shape[1] : p.value(op.outputs[0]).shape[1]);
  c.flops = 2 * e * m * products;
  // Walked by rows (ops/sparse_matmul.h), G is read once and the rows each
  // entry updates stay in cache: the operands and results counted are what moves.
  if (grad && ops::sparse_matmul_backward_b_by_rows(g.num_dst, static_cast<int64_t>(m), item_size(p.float_type))) {
    return;
  }
  c.bytes += (e * m * 4 - static_cast<double>(p.value(dense).bytes())) * products;
}

// Each edge meets its destination's H*K row once: a multiply-add apiece.
void head_edge_cost(const Program& p, const Op& op, OpCost& c) {
  const ValueInfo& out = p.value(op.outputs[0]);
  const double k = static_cast<double>(op.kind == OpKind::kHeadGather ? out.shape[1] : p.value(op.inputs[1]).shape[1]);
  c.flops = 2 * edges_of(p, op) * static_cast<double>(op.attrs.heads()) * k;
}

// head_matmul and head_outer: a product per head, 2 · N · H · P · Q in all.
void head_matmul_cost(const Program& p, const Op& op, OpCost& c) {
  const auto& a = p.value(op.inputs[0]).shape;
  const auto& o = p.value(op.outputs[0]).shape;
  c.flops = op.kind == OpKind::kHeadOuter ? 2 * static_cast<double>(a[0] * o[0] * o[1])
                                          : 2 * static_cast<double>(a[0] * a[1] * o[1] / op.attrs.heads());
}

void per_edge_cost(const Program& p, const Op& op, OpCost& c) { c.flops = edges_of(p, op) * cols_of_first(p, op); }

void softmax_cost(const Program& p, const Op& op, OpCost& c) {
  c.flops = 5 * edges_of(p, op) * cols_of_first(p, op);
}

// The softmax's and, per logit, sddmm_add's addition and the leaky ReLU's
// select; each edge reads its source's row of a.
void attention_cost(const Program& p, const Op& op, OpCost& c) {
  const double e = edges_of(p, op), f = cols_of_first(p, op);
  c.flops = 7 * e * f;
  c.bytes += e * f * 4;
}

constexpr uint32_t kNone = 0;

// The table, in OpKind's order (checked below).
constexpr std::array kDefs = {
    OpDef{OpKind::kFill, kNoGradient, fill},
    OpDef{OpKind::kMatMul, kNone, matmul, matmul_cost},
    OpDef{OpKind::kAdd, kNone, binary},
    OpDef{OpKind::kMul, kNone, binary},
    OpDef{OpKind::kScale, kNone, unary},
    OpDef{OpKind::kBiasAdd, kNone, bias_add},
    OpDef{OpKind::kRelu, kNone, unary},
    OpDef{OpKind::kLeakyRelu, kNone, unary},
    OpDef{OpKind::kElu, kNone, unary},
    OpDef{OpKind::kActivation, kNone, unary},
    OpDef{OpKind::kConcat, kNone, concat},
    OpDef{OpKind::kSliceCols, kNone, slice_cols},
    OpDef{OpKind::kReshape, kNone, reshape},
    OpDef{OpKind::kDropout, kNone, dropout},
    OpDef{OpKind::kNormal, kNoGradient, normal},
    OpDef{OpKind::kLogSoftmax, kNone, log_softmax},
    OpDef{OpKind::kNllLoss, kNone, nll_loss},
    OpDef{OpKind::kCrossEntropy, kNone, nll_loss},
    OpDef{OpKind::kMseLoss, kNone, mse_loss},
    OpDef{OpKind::kHeadDot, kNone, head_dot},
    OpDef{OpKind::kHeadMean, kNone, head_mean},
    OpDef{OpKind::kLayerNormMoments, kNoGradient, layer_norm_moments},
    OpDef{OpKind::kLayerNorm, kNone, layer_norm},
    OpDef{OpKind::kGcnNorm, kNoGradient, gcn_norm},
    OpDef{OpKind::kDivideRows, kNone, divide_rows},
    OpDef{OpKind::kGather, kNone, gather, per_edge_cost},
    OpDef{OpKind::kEdgeScale, kNone, edge_scale},
    OpDef{OpKind::kScatter, kNone, scatter, per_edge_cost},
    OpDef{OpKind::kSpmm, kNone, spmm, spmm_cost},
    OpDef{OpKind::kSparseMatMul, kNone, sparse_matmul, sparse_matmul_cost},
    // Of input features: nothing upstream is trained.
    OpDef{OpKind::kSparseDropout, kNoGradient, sparse_dropout},
    OpDef{OpKind::kSddmmAdd, kNone, sddmm_add},
    OpDef{OpKind::kSddmmDot, kNone, sddmm_dot},
    OpDef{OpKind::kEdgeHeadDot, kNone, edge_head_dot, head_edge_cost},
    OpDef{OpKind::kHeadScatter, kNone, head_scatter, head_edge_cost},
    OpDef{OpKind::kHeadGather, kNone, head_gather, head_edge_cost},
    OpDef{OpKind::kHeadMatMul, kNone, head_matmul, head_matmul_cost},
    OpDef{OpKind::kSegmentSoftmax, kNone, segment_softmax, softmax_cost},
    OpDef{OpKind::kAttentionSoftmax, kNone, attention_softmax, attention_cost},
    // A shift that cancels out of the softmax.
    OpDef{OpKind::kSegmentMax, kNoGradient, segment_max},
    OpDef{OpKind::kSegmentExpSum, kNone, segment_exp_sum},
    OpDef{OpKind::kSegmentSoftmaxApply, kNone, segment_softmax_apply},
    OpDef{OpKind::kBiasGrad, kNone, bias_grad},
    OpDef{OpKind::kReluGrad, kNone, elementwise_grad},
    OpDef{OpKind::kLeakyReluGrad, kNone, elementwise_grad},
    OpDef{OpKind::kEluGrad, kNone, elementwise_grad},
    OpDef{OpKind::kActivationGrad, kNone, elementwise_grad},
    OpDef{OpKind::kDropoutGrad, kNone, dropout_grad},
    OpDef{OpKind::kLogSoftmaxGrad, kNone, elementwise_grad},
    OpDef{OpKind::kNllLossGrad, kNone, nll_loss_grad},
    OpDef{OpKind::kCrossEntropyGrad, kNone, nll_loss_grad},
    OpDef{OpKind::kMseLossGrad, kNone, mse_loss_grad},
    OpDef{OpKind::kHeadDotGradX, kNone, head_dot_grad_x},
    OpDef{OpKind::kHeadDotGradAtt, kNone, head_dot_grad_att},
    OpDef{OpKind::kHeadMeanGrad, kNone, head_mean_grad},
    OpDef{OpKind::kLayerNormGradSums, kNone, layer_norm_grad_sums},
    OpDef{OpKind::kLayerNormGradX, kNone, layer_norm_grad_x},
    OpDef{OpKind::kLayerNormGradGamma, kNone, layer_norm_grad_gamma},
    OpDef{OpKind::kGatherGrad, kNone, gather_grad, per_edge_cost},
    OpDef{OpKind::kEdgeDot, kNone, edge_dot},
    OpDef{OpKind::kScatterGrad, kNone, scatter_grad, per_edge_cost},
    OpDef{OpKind::kSpmmGradX, kNone, spmm_grad, spmm_cost},
    OpDef{OpKind::kSpmmGradW, kNone, spmm_grad, spmm_grad_w_cost},
    OpDef{OpKind::kSparseMatMulGradB, kNone, sparse_matmul_grad_b, sparse_matmul_cost},
    OpDef{OpKind::kSddmmAddGradA, kNone, sddmm_add_grad},
    OpDef{OpKind::kSddmmAddGradB, kNone, sddmm_add_grad},
    OpDef{OpKind::kSddmmDotGradA, kNone, sddmm_dot_grad},
    OpDef{OpKind::kSddmmDotGradB, kNone, sddmm_dot_grad},
    OpDef{OpKind::kHeadOuter, kNone, head_outer, head_matmul_cost},
    OpDef{OpKind::kSegmentSoftmaxGrad, kNone, segment_softmax_grad, softmax_cost},
    OpDef{OpKind::kAttentionSoftmaxGrad, kNone, attention_softmax_grad, attention_cost},
    OpDef{OpKind::kSegmentExpSumGrad, kNone, segment_exp_sum_grad},
    OpDef{OpKind::kSegmentSoftmaxApplyGradS, kNone, segment_softmax_apply_grad_s},
    OpDef{OpKind::kKeepWinners, kNone, keep_winners},
    OpDef{OpKind::kAllReduce, kCollective, allreduce},
    OpDef{OpKind::kHaloSum, kCollective, halo_sum},
    OpDef{OpKind::kHaloMax, kCollective, halo_max},
    OpDef{OpKind::kBucketStart, kCollective, bucket_start},
    OpDef{OpKind::kBucketWait, kNone, bucket_wait},
    OpDef{OpKind::kAdamUpdate, kSideEffects, adam_update},
    OpDef{OpKind::kSgdUpdate, kSideEffects, sgd_update},
    OpDef{OpKind::kAccumulate, kSideEffects, accumulate},
    OpDef{OpKind::kCountCorrect, kSideEffects, count_correct},
};

constexpr std::size_t kOpCount = 0
#define GNNRT_OP_COUNT(kind, name) +1
    GNNRT_FOR_EACH_OP(GNNRT_OP_COUNT)
#undef GNNRT_OP_COUNT
    ;
static_assert(kDefs.size() == kOpCount, "every op of GNNRT_FOR_EACH_OP needs its row in kDefs");

constexpr bool in_order() {
  for (std::size_t i = 0; i < kDefs.size(); ++i) {
    if (static_cast<std::size_t>(kDefs[i].kind) != i) return false;
  }
  return true;
}
static_assert(in_order(), "kDefs lists the ops in GNNRT_FOR_EACH_OP's order");

}  // namespace

const OpDef& op_def(OpKind kind) { return kDefs.at(static_cast<std::size_t>(kind)); }

bool has_side_effects(OpKind kind) { return has_flag(kind, kSideEffects); }
bool is_collective(OpKind kind) { return has_flag(kind, kCollective); }

std::vector<OutputSpec> op_outputs(const Program& p, const Op& op, const std::string& where) {
  OpCheck c(p, op, where);
  op_def(op.kind).shape(c);
  return c.take();
}

void check_op(const Program& p, std::size_t i) {
  const Op& op = p.ops.at(i);
  const std::vector<OutputSpec> want = op_outputs(p, op, p.describe(i));
  const auto fail = [&](const std::string& what) {
    throw ShapeError(fmt::format("program '{}': {}: {}", p.name, p.describe(i), what));
  };
  if (want.size() != op.outputs.size()) {
    fail(fmt::format("has {} results, its shape rule {}", op.outputs.size(), want.size()));
  }
  for (std::size_t k = 0; k < want.size(); ++k) {
    const ValueInfo& v = p.value(op.outputs[k]);
    if (v.dtype != want[k].dtype || v.shape != want[k].shape) {
      fail(fmt::format("result {} '{}' is {} {}, its shape rule says {} {}", k, v.name, to_string(v.dtype),
                       shape_string(v.shape), to_string(want[k].dtype), shape_string(want[k].shape)));
    }
  }
}

}  // namespace gnnrt::runtime
