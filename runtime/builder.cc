#include "runtime/builder.h"

#include <fmt/format.h>

#include "runtime/op_defs.h"

// The Builder's bookkeeping: values, graphs, emitting an op through its
// shape rule, a partitioned program's inputs. The methods that emit each
// op sit with the op's definition, in its family's runtime/defs/ file.
namespace gnnrt::runtime {
namespace {

using Shape = std::vector<int64_t>;

}  // namespace

OpAttrs Builder::with_heads(int64_t heads) {
  OpAttrs a;
  a.set_heads(heads);
  return a;
}

std::string in_degree_name(const std::string& graph) { return graph + ".in_degree"; }
std::string edge_id_name(const std::string& graph) { return graph + ".edge_id"; }
std::string count_name(const std::string& mask) { return mask + ".count"; }

Builder::Builder(std::string program_name, DType float_type) {
  if (!is_floating(float_type)) {
    throw ShapeError(fmt::format("program '{}': float type {} is not float32 or float64",
                                 program_name, to_string(float_type)));
  }
  program_.name = std::move(program_name);
  program_.float_type = float_type;
}

Builder::Builder(Program program) : program_(std::move(program)) {}

void Builder::partition(int64_t local_nodes) {
  if (local_nodes < 0) {
    throw ShapeError(fmt::format("program '{}': {} local nodes", program_.name, local_nodes));
  }
  program_.partitioned = true;
  program_.local_nodes = local_nodes;
}

int64_t Builder::cols(ValueId v) const {
  const Shape& s = shape(v);
  int64_t n = 1;
  for (size_t i = 1; i < s.size(); ++i) n *= s[i];
  return n;
}

ValueId Builder::new_value(std::string name, DType dtype, Shape shape, Role role) {
  for (int64_t d : shape) {
    if (d < 0) {
      throw ShapeError(fmt::format("program '{}': value '{}' has a negative size in {}",
                                   program_.name, name, shape_string(shape)));
    }
  }
  if (role != Role::kTemp && program_.find(name) != kNoValue) {
    throw ShapeError(
        fmt::format("program '{}': {} '{}' is declared twice", program_.name, to_string(role), name));
  }
  program_.values.push_back(ValueInfo{std::move(name), dtype, std::move(shape), role});
  return static_cast<ValueId>(program_.values.size() - 1);
}

ValueId Builder::input(std::string name, DType dtype, Shape shape) {
  return new_value(std::move(name), dtype, std::move(shape), Role::kInput);
}
ValueId Builder::parameter(std::string name, Shape shape) {
  return new_value(std::move(name), float_type(), std::move(shape), Role::kParameter);
}
ValueId Builder::state(std::string name, DType dtype, Shape shape) {
  return new_value(std::move(name), dtype, std::move(shape), Role::kState);
}

ValueId Builder::input_once(const std::string& name, DType dtype, Shape shape) {
  const ValueId v = program_.find(name);
  if (v == kNoValue) return input(name, dtype, std::move(shape));
  const ValueInfo& info = program_.value(v);
  if (info.role != Role::kInput || info.dtype != dtype || info.shape != shape) {
    throw ShapeError(fmt::format("program '{}': '{}' is declared as {} {} {}, needed as input {} {}",
                                 program_.name, name, to_string(info.role), to_string(info.dtype),
                                 shape_string(info.shape), to_string(dtype), shape_string(shape)));
  }
  return v;
}

int32_t Builder::graph(std::string name, int64_t num_src, int64_t num_dst, int64_t num_edges) {
  if (num_src < 0 || num_dst < 0 || num_edges < 0) {
    throw ShapeError(fmt::format("program '{}': graph '{}' has a negative size", program_.name, name));
  }
  program_.graphs.push_back(GraphInfo{std::move(name), num_src, num_dst, num_edges});
  return static_cast<int32_t>(program_.graphs.size() - 1);
}

void Builder::output(ValueId v) { program_.outputs.push_back(v); }

void Builder::fail(OpKind kind, const std::string& what) const {
  throw ShapeError(fmt::format("program '{}': {}: {}", program_.name, where(kind), what));
}

std::string Builder::where(OpKind kind) const {
  return scope_.empty() ? std::string(to_string(kind)) : fmt::format("{} ({})", to_string(kind), scope_);
}

const GraphInfo& Builder::graph_info(OpKind kind, int32_t graph) const {
  if (graph < 0 || static_cast<size_t>(graph) >= program_.graphs.size()) {
    fail(kind, fmt::format("no graph #{}", graph));
  }
  return program_.graphs[static_cast<size_t>(graph)];
}

OpAttrs Builder::graph_attrs(OpKind kind, int32_t graph) const {
  graph_info(kind, graph);
  OpAttrs a;
  a.set_graph(graph);
  return a;
}

std::string Builder::temp_name(OpKind kind) const {
  return scope_.empty() ? std::string(to_string(kind)) : fmt::format("{}/{}", scope_, to_string(kind));
}

std::vector<ValueId> Builder::emit_op(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs,
                                      const std::vector<std::pair<std::string, Shape>>& given) {
  Op op{kind, std::move(inputs), {}, std::move(attrs), scope_};
  if (given.empty()) {
    const std::string base = temp_name(kind);
    for (OutputSpec& out : op_outputs(program_, op, where(kind))) {
      op.outputs.push_back(new_value(base + out.suffix, out.dtype, std::move(out.shape), Role::kTemp));
    }
  } else {
    // Results whose shapes the operands do not fix: declared as given, then
    // checked by the rule (and taken back if it fails).
    const size_t values_before = program_.values.size();
    for (const auto& [name, shape] : given) op.outputs.push_back(new_value(name, float_type(), shape, Role::kTemp));
    try {
      op_outputs(program_, op, where(kind));
    } catch (...) {
      program_.values.resize(values_before);
      throw;
    }
  }
  std::vector<ValueId> results = op.outputs;
  program_.ops.push_back(std::move(op));
  return results;
}

// ---- a partitioned program's inputs ----

ValueId Builder::node_input(const char* name, DType dtype) {
  return input_once(name, dtype, {program_.local_nodes});
}

ValueId Builder::graph_input(int32_t graph, bool edges) {
  const GraphInfo& g = graph_info(OpKind::kGather, graph);
  return edges ? input_once(edge_id_name(g.name), DType::kI64, {g.num_edges})
               : input_once(in_degree_name(g.name), DType::kI64, {g.num_dst});
}

ValueId Builder::mask_count(ValueId mask) {
  return input_once(count_name(program_.value(mask).name), DType::kI64, {1});
}

// The loss ops' inputs: a partitioned or data-parallel program's losses
// divide by the global count of the mask's rows.
std::vector<ValueId> Builder::with_count(std::vector<ValueId> inputs, ValueId mask) {
  if (partitioned() || replicated()) inputs.push_back(mask_count(mask));
  return inputs;
}

// Per-edge scores [E, H] and what takes their heads from them.
ValueId Builder::per_head(OpKind kind, int32_t graph, std::vector<ValueId> inputs, ValueId scores) {
  OpAttrs a = graph_attrs(kind, graph);
  if (shape(scores).size() == 2) a.set_heads(shape(scores)[1]);
  return emit(kind, std::move(inputs), a);
}

// Heads of a per-edge weight: 1 for none or [E], H for [E, H].
int64_t Builder::weight_heads(ValueId edge_weight) const {
  if (edge_weight == kNoValue) return 1;
  const Shape& w = shape(edge_weight);
  return w.size() == 2 ? w[1] : 1;
}

// The value and, for max/min, the winning edge of a reduction just emitted.
std::pair<ValueId, ValueId> Builder::reduction(OpKind kind, std::vector<ValueId> inputs, OpAttrs attrs) {
  const std::vector<ValueId> out = emit_op(kind, std::move(inputs), std::move(attrs));
  return {out[0], out.size() > 1 ? out[1] : kNoValue};
}

// (x, labels, mask, g[, count])
std::vector<ValueId> Builder::loss_grad_inputs(ValueId x, ValueId labels, ValueId mask, ValueId g,
                                               ValueId count) {
  std::vector<ValueId> inputs{x, labels, mask, g};
  if (count != kNoValue) inputs.push_back(count);
  return inputs;
}

}  // namespace gnnrt::runtime
