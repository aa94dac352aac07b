#include "runtime/defs/checks.h"

#include <fmt/format.h>

#include "ops/activation.h"

namespace gnnrt::runtime::defs {

int64_t heads_of(const OpCheck& c) {
  const int64_t h = c.attrs().heads();
  if (h < 1) c.fail(fmt::format("heads = {} must be >= 1", h));
  return h;
}

void probability(const OpCheck& c) {
  const double p = c.attrs().dropout_p();
  if (!(p >= 0 && p <= 1)) c.fail(fmt::format("p = {} is not in [0, 1]", p));
}

void matrix(const OpCheck& c, std::size_t i, const char* what) {
  c.rank(i, 2, what);
  c.floating(i, what);
}

void rows_of(const OpCheck& c, std::size_t i, const char* what, int64_t n, const std::string& whose) {
  matrix(c, i, what);
  if (c.rows(i) != n) {
    c.fail(fmt::format("{} {} must have {} rows, {}", what, shape_string(c.shape(i)), n, whose));
  }
}

void vector_of(const OpCheck& c, std::size_t i, DType d, int64_t n, const char* what) {
  c.dtype(i, d, what);
  c.shape_is(i, {n}, what);
}

void optional_count(const OpCheck& c, std::size_t i) {
  if (c.has(i)) vector_of(c, i, DType::kI64, 1, "count");
}

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

void value_and_arg(OpCheck& c, ops::Reduce reduce, const Shape& s) {
  c.out_float(s);
  if (ops::has_arg(reduce)) c.out(DType::kI32, s, ".arg");
}

int64_t edge_scores(const OpCheck& c, std::size_t i, const char* what) {
  const GraphInfo& g = c.graph();
  rows_of(c, i, what, g.num_edges, fmt::format("the edges of graph '{}'", g.name));
  const int64_t h = c.cols(i);
  if (c.attrs().heads() != h) c.fail(fmt::format("heads = {} but {} has {} columns", c.attrs().heads(), what, h));
  return h;
}

void dst_rows(const OpCheck& c, std::size_t i, const char* what, int64_t h) {
  const GraphInfo& g = c.graph();
  matrix(c, i, what);
  if (c.shape(i) != Shape{g.num_dst, h}) {
    c.fail(fmt::format("{} {} must be [{}, {}] (graph '{}')", what, shape_string(c.shape(i)), g.num_dst, h, g.name));
  }
}

int64_t per_endpoint(const OpCheck& c, std::size_t i) {
  const GraphInfo& g = c.graph();
  matrix(c, i, "a");
  matrix(c, i + 1, "b");
  if (c.rows(i) != g.num_src || c.rows(i + 1) != g.num_dst || c.cols(i) != c.cols(i + 1)) {
    c.fail(fmt::format("a {} must be [{}, H] and b {} [{}, H] (graph '{}')", shape_string(c.shape(i)), g.num_src,
                       shape_string(c.shape(i + 1)), g.num_dst, g.name));
  }
  if (c.attrs().heads() != c.cols(i)) {
    c.fail(fmt::format("heads = {} but a has {} columns", c.attrs().heads(), c.cols(i)));
  }
  return c.cols(i);
}

const GraphInfo& stored_values(const OpCheck& c, std::size_t i) {
  const GraphInfo& g = c.graph();
  c.floating(i, "values");
  if (c.shape(i) != Shape{g.num_edges}) {
    c.fail(fmt::format("values {} must be [{}], the stored entries of '{}'", shape_string(c.shape(i)), g.num_edges,
                       g.name));
  }
  return g;
}

void halo_rows(const OpCheck& c) {
  c.partitioned();
  matrix(c, 0, "x");
  if (c.rows(0) != c.program().local_nodes) {
    c.fail(
        fmt::format("x {} must have a row per local vertex ({})", shape_string(c.shape(0)), c.program().local_nodes));
  }
}

void class_loss(const OpCheck& c, const char* x_name, std::size_t i) {
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

void loss_seed(const OpCheck& c, std::size_t i) {
  c.floating(i, "g");
  c.shape_is(i, {1}, "g");
}

void norm_operands(const OpCheck& c, std::size_t moments) {
  matrix(c, 0, "x");
  c.floating(1, "weight");
  if (c.shape(1) != Shape{c.cols(0)}) {
    c.fail(
        fmt::format("weight {} must be [{}] for x {}", shape_string(c.shape(1)), c.cols(0), shape_string(c.shape(0))));
  }
  if (!(c.attrs().norm_eps() > 0)) c.fail(fmt::format("eps = {} must be > 0", c.attrs().norm_eps()));
  if (c.attrs().per_node() == c.has(moments)) {
    c.fail(c.attrs().per_node() ? "per-node mode takes no moments" : "graph mode needs the moments");
  }
  if (c.has(moments)) vector_of(c, moments, DType::kF64, 3, "moments");
}

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
      c.fail(
          fmt::format("a {} must have {} heads of r's {} columns", shape_string(c.shape(node)), heads, c.cols(edge)));
    }
    return c.cols(edge);
  }
  return c.cols(node) / heads;
}

double cols_of_first(const Program& p, const Op& op) {
  const ValueInfo& first = p.value(op.inputs.empty() ? op.outputs[0] : op.inputs[0]);
  return first.shape.size() > 1 ? static_cast<double>(first.shape[1]) : 1;
}

double edges_of(const Program& p, const Op& op) {
  return static_cast<double>(p.graphs[static_cast<std::size_t>(op.attrs.graph())].num_edges);
}

void unary(OpCheck& c) {
  c.operands(1, 1);
  c.floating(0, "x");
  if (c.op().kind == OpKind::kActivation) {
    const int a = c.attrs().activation();
    if (a < 0 || a > static_cast<int>(ops::Activation::kClip)) {
      c.fail(fmt::format("activation #{} is unknown", a));
    }
    if (a == static_cast<int>(ops::Activation::kClip) && !(c.attrs().clip_bound() >= 0)) {
      c.fail(fmt::format("clip bound {} must be >= 0", c.attrs().clip_bound()));
    }
  }
  c.out_float(c.shape(0));
}

}  // namespace gnnrt::runtime::defs
