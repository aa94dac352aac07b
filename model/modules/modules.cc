#include "model/modules/modules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <google/protobuf/descriptor.h>

#include <stdexcept>

#include "model/modules/kinds.h"

namespace gnnrt::model {
namespace kinds {

EdgeInputs edge_inputs(ModuleContext& c, const std::string& edges_name, size_t extra) {
  const int e = c.edge_set(edges_name);
  const Schema::EdgeSetInfo& info = c.schema.edge_sets[e];
  const bool bipartite = info.source != info.destination;
  c.expect_inputs(1 + extra, 2 + extra);
  const size_t nodes = c.inputs.size() - extra;
  if (!bipartite && nodes == 2) {
    c.fail(fmt::format("edge set '{}' joins node set '{}' to itself: give one input, not two", info.name,
                       c.schema.node_sets[info.source].name));
  }
  if (bipartite && !info.block && nodes != 2) {
    c.fail(fmt::format("edge set '{}' joins '{}' to '{}': give two inputs (source rows, destination rows)",
                       info.name, c.schema.node_sets[info.source].name,
                       c.schema.node_sets[info.destination].name));
  }
  EdgeInputs r{e, c.inputs[0], nodes == 2 ? c.inputs[1] : c.inputs[0]};
  c.expect_domain(r.src, Domain::kNodes, info.source, "its first input (the sources)");
  if (info.block && nodes == 1) {
    // A block's destinations are its sources' first rows.
    if (r.src.sparse()) c.fail(fmt::format("block '{}' takes dense features", info.name));
    r.dst = c.nodes(info.destination, r.src.width, c.narrow(e, r.src.value));
  }
  c.expect_domain(r.dst, Domain::kNodes, info.destination, "its second input (the destinations)");
  return r;
}

int64_t positive(const ModuleContext& c, int64_t v, const char* field) {
  if (v < 1) c.fail(fmt::format("{} = {} must be >= 1", field, v));
  return v;
}

Port one_input(ModuleContext& c) {
  c.expect_inputs(1, 1);
  return c.inputs[0];
}

Port with(Port p, int64_t width, ValueId v) {
  p.width = width;
  p.value = v;
  p.sparse_pattern = -1;  // a computed value is dense
  p.sparse_values = runtime::kNoValue;
  return p;
}

ValueId plain_norm(ModuleContext& c, ValueId x, int64_t width, double eps) {
  return c.b.layer_norm(x, c.b.fill({width}, 1.0), c.b.fill({width}, 0.0), /*per_node=*/true, eps);
}

}  // namespace kinds

namespace {

using runtime::ValueId;
using Init = ParamDecl::Init;
using Domain = Port::Domain;

// The registry: every family's rows, checked once against job.proto's
// descriptor (each field of Module's oneof `kind` has the row of its name
// at its number, and there is no other row).
const kinds::ModuleRows& registry() {
  static const kinds::ModuleRows rows = [] {
    kinds::ModuleRows r;
    kinds::define_convolutions(r);
    kinds::define_dense(r);
    kinds::define_graph_ops(r);
    kinds::define_scene(r);
    const google::protobuf::OneofDescriptor* oneof = proto::Module::descriptor()->FindOneofByName("kind");
    for (int i = 0; i < oneof->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* f = oneof->field(i);
      const auto it = r.find(f->number());
      if (it == r.end() || f->name() != it->second.name) {
        throw std::logic_error(fmt::format("module kind '{}' (field {}) has no row of its name", f->name(), f->number()));
      }
    }
    if (r.size() != static_cast<size_t>(oneof->field_count())) {
      throw std::logic_error("a module kind row has no field in job.proto's Module.kind");
    }
    return r;
  }();
  return rows;
}

std::string find_or_declare_graph(runtime::Builder& b, const std::string& name, int64_t src, int64_t dst,
                                  int64_t edges, int32_t& id) {
  const auto& graphs = b.program().graphs;
  for (size_t i = 0; i < graphs.size(); ++i) {
    if (graphs[i].name == name) {
      id = static_cast<int32_t>(i);
      return name;
    }
  }
  id = b.graph(name, src, dst, edges);
  return name;
}

}  // namespace

std::string features_name(const std::string& set) { return set + ".x"; }
std::string mask_name(const std::string& set) { return set + ".mask"; }
std::string target_name(const std::string& set) { return set + ".y"; }
std::string pool_graph_name(const std::string& set) { return set + ".pool"; }
std::string broadcast_graph_name(const std::string& set) { return set + ".broadcast"; }
std::string reversed_graph_name(const std::string& edges) { return edges + ".reversed"; }
std::string self_loop_graph_name(const std::string& edges) { return edges + ".self_loops"; }
std::string prefix_graph_name(const std::string& edges) { return edges + ".prefix"; }
std::string gcn_norm_name(const std::string& graph) { return graph + ".gcn_norm"; }
std::string real_rows_name(const std::string& set) { return set + ".real"; }
std::string global_id_name(const std::string& set) { return set + ".global_id"; }

int Schema::node_set(const std::string& name) const {
  for (size_t i = 0; i < node_sets.size(); ++i) {
    if (node_sets[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int Schema::edge_set(const std::string& name) const {
  for (size_t i = 0; i < edge_sets.size(); ++i) {
    if (edge_sets[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const ModuleKind& module_kind(const proto::Module& module) {
  const auto& rows = registry();
  const auto it = rows.find(static_cast<int>(module.kind_case()));
  if (it == rows.end()) {
    std::vector<std::string> names;
    for (const auto& [field, kind] : rows) names.emplace_back(kind.name);
    throw std::invalid_argument(fmt::format("model.module '{}': no kind given (one of {})", module.name(),
                                            fmt::join(names, ", ")));
  }
  return it->second;
}

ModuleContext::ModuleContext(runtime::Builder& builder, const Schema& s, const BucketShape& sh, bool train,
                             const proto::Module& m, uint64_t k, std::vector<Port> in, DeclaredParams& declared,
                             AggregationSplit* split)
    : b(builder), schema(s), shape(sh), training(train), module(m), key(k), inputs(std::move(in)),
      declared_(declared), split_(split) {}

void ModuleContext::alias(const std::string& key_suffix, const std::string& param_suffix) {
  const ParamAlias a{scope() + "." + key_suffix, scope() + "." + param_suffix};
  // Declared once, however many modules share the scope.
  for (const ParamAlias& known : declared_.aliases) {
    if (known.key == a.key) return;
  }
  declared_.aliases.push_back(a);
}

ValueId ModuleContext::param(const std::string& suffix, std::vector<int64_t> shape_, Init init, int64_t fan_in,
                             int64_t fan_out, double constant) {
  // No suffix: the parameter is the module itself ("encoder.Q").
  const std::string name = suffix.empty() ? scope() : scope() + "." + suffix;
  // A scope shared with a module built before: its parameter, same shape.
  auto& d = declared_;
  for (size_t i = 0; i < d.params.size(); ++i) {
    if (d.params[i].name != name) continue;
    if (d.scopes[i] != scope()) {
      fail(fmt::format("parameter '{}' is also a parameter of scope '{}' (name modules so that their parameters "
                       "differ, or share a scope with `params`)", name, d.scopes[i]));
    }
    if (d.params[i].shape != shape_) {
      fail(fmt::format("parameter '{}' is {} where another module of scope '{}' made it {}", name,
                       runtime::shape_string(shape_), scope(), runtime::shape_string(d.params[i].shape)));
    }
    return d.ids[i];
  }
  const ValueId id = b.parameter(name, shape_);
  d.params.push_back(ParamDecl{name, std::move(shape_), init, fan_in, fan_out, constant});
  d.ids.push_back(id);
  d.scopes.push_back(scope());
  return id;
}

void ModuleContext::buffer(const std::string& suffix, std::vector<float> values) {
  const std::string key = scope() + "." + suffix;
  for (const Buffer& known : declared_.buffers) {
    if (known.key == key && known.values != values) {
      fail(fmt::format("buffer '{}' is also made by another module of scope '{}' with other values", key, scope()));
    }
    if (known.key == key) return;
  }
  const auto size = static_cast<int64_t>(values.size());
  declared_.buffers.push_back(Buffer{key, {size}, std::move(values)});
}

ValueId ModuleContext::linear(const std::string& prefix, ValueId x, int64_t in, int64_t out, bool bias) {
  ValueId h = b.linear(x, param(prefix + ".weight", {out, in}, Init::kTorchLinear, in, out));
  if (bias) h = b.bias_add(h, param(prefix + ".bias", {out}, Init::kTorchLinear, in, out));
  return h;
}

ValueId ModuleContext::aggregate(ops::Reduce reduce, int32_t g, ValueId x, ValueId edge_weight) {
  if (!split_) return b.aggregate(reduce, g, x, edge_weight);
  const auto norm = declared_.gcn_norms.find(g);
  const bool gcn = edge_weight != runtime::kNoValue && norm != declared_.gcn_norms.end() && norm->second == edge_weight;
  if (edge_weight != runtime::kNoValue && !gcn) fail("an aggregation weighted by the messages does not split");
  split_->reduce = reduce;
  split_->gcn_norm = gcn;
  return split_at(g, x);
}

ValueId attention_weights(runtime::Builder& b, int32_t graph, ValueId a_src, ValueId a_dst, double negative_slope) {
  return b.softmax(graph, b.leaky_relu(b.sddmm_add(graph, a_src, a_dst), negative_slope));
}

ValueId ModuleContext::attend(int32_t g, ValueId h_src, ValueId a_src, ValueId a_dst, int64_t heads,
                              double negative_slope, double dropout) {
  if (!split_) {
    ValueId alpha = attention_weights(b, g, a_src, a_dst, negative_slope);
    if (training) alpha = b.dropout(alpha, dropout, key, g, edge_ids(g));
    return b.aggregate(ops::Reduce::kSum, g, h_src, alpha);
  }
  if (training) fail("an attention split at its aggregation is evaluated, not trained");
  split_->reduce = ops::Reduce::kSum;
  split_->heads = heads;
  split_->negative_slope = negative_slope;
  if (split_->part == AggregationSplit::Part::kMessages) {
    // The scores beside the messages: the caller weighs the edges.
    for (const auto& [v, name] : {std::pair{a_src, kSourceScoresName}, std::pair{a_dst, kDestinationScoresName}}) {
      b.program().value(v).name = name;
      b.output(v);
    }
  }
  return split_at(g, h_src);
}

ValueId ModuleContext::split_at(int32_t g, ValueId x) {
  if (split_->found) fail("a program split at its aggregation holds one convolution");
  const runtime::GraphInfo& graph = b.program().graphs.at(static_cast<size_t>(g));
  const runtime::ValueInfo& v = b.program().value(x);
  split_->found = true;
  split_->self_loops = graph.name.ends_with(self_loop_graph_name(""));
  split_->from_input = v.role == runtime::Role::kInput;
  split_->width = v.shape[1];
  if (split_->part == AggregationSplit::Part::kTransform) {
    return b.input(kAggregateName, DType::kF32, {graph.num_dst, split_->width});
  }
  // The messages as an output; the rest of the program, fed them in place
  // of the aggregate (the same rows: the split's programs see only their
  // own nodes), is dead and dropped by the compiler.
  const ValueId m = split_->from_input ? b.scale(x, 1.0) : x;
  b.program().value(m).name = kMessagesName;
  b.output(m);
  return x;
}

ValueId ModuleContext::project(const Port& x, ValueId weight) {
  return x.sparse() ? b.sparse_linear(x.sparse_pattern, x.sparse_values, weight) : b.linear(x.value, weight);
}

ValueId ModuleContext::gcn_norm(int32_t g) {
  auto [it, fresh] = declared_.gcn_norms.try_emplace(g, runtime::kNoValue);
  if (fresh) {
    const runtime::GraphInfo& info = b.program().graphs.at(static_cast<size_t>(g));
    it->second = info.num_src == info.num_dst
                     ? b.gcn_norm(g)
                     : b.input_once(gcn_norm_name(info.name), DType::kF32, {info.num_edges});
  }
  return it->second;
}

ValueId ModuleContext::narrow(int e, ValueId v) {
  const auto& info = schema.edge_sets[e];
  int32_t id;
  const int64_t rows = shape.node_rows[info.destination];
  find_or_declare_graph(b, prefix_graph_name(info.name), shape.node_rows[info.source], rows, rows, id);
  return b.gather(id, v);
}

int32_t ModuleContext::graph(int e) {
  const auto& info = schema.edge_sets[e];
  int32_t id;
  find_or_declare_graph(b, info.name, shape.node_rows[info.source], shape.node_rows[info.destination],
                        shape.edge_rows[e], id);
  return id;
}

int32_t ModuleContext::reversed_graph(int e) {
  const auto& info = schema.edge_sets[e];
  int32_t id;
  find_or_declare_graph(b, reversed_graph_name(info.name), shape.node_rows[info.destination],
                        shape.node_rows[info.source], shape.edge_rows[e], id);
  return id;
}

int32_t ModuleContext::self_loop_graph(int e) {
  const auto& info = schema.edge_sets[e];
  const int64_t rows = shape.node_rows[info.destination];
  int32_t id;
  // Padded, its capacity: every edge slot and one loop a destination row
  // (the slots of dropped loops and padding are sink loops).
  const int64_t edges = shape.padded ? shape.edge_rows[e] + rows : shape.self_loop_edges.at(static_cast<size_t>(e));
  find_or_declare_graph(b, self_loop_graph_name(info.name), shape.node_rows[info.source], rows, edges, id);
  return id;
}

int32_t ModuleContext::pool_graph(int s) {
  int32_t id;
  find_or_declare_graph(b, pool_graph_name(schema.node_sets[s].name), shape.node_rows[s], shape.graph_rows,
                        shape.node_rows[s], id);
  return id;
}

int32_t ModuleContext::broadcast_graph(int s) {
  int32_t id;
  find_or_declare_graph(b, broadcast_graph_name(schema.node_sets[s].name), shape.graph_rows, shape.node_rows[s],
                        shape.node_rows[s], id);
  return id;
}

int ModuleContext::edge_set(const std::string& name) {
  const int e = schema.edge_set(name);
  if (e < 0) {
    std::vector<std::string> names;
    for (const auto& s : schema.edge_sets) names.push_back(s.name);
    fail(fmt::format("edge set '{}' is not in the dataset (edge sets: {})", name, fmt::join(names, ", ")));
  }
  return e;
}

int ModuleContext::node_set(const std::string& name) {
  const int s = schema.node_set(name);
  if (s < 0) {
    std::vector<std::string> names;
    for (const auto& n : schema.node_sets) names.push_back(n.name);
    fail(fmt::format("node set '{}' is not in the dataset (node sets: {})", name, fmt::join(names, ", ")));
  }
  return s;
}

Port ModuleContext::nodes(int set, int64_t width, ValueId v) const { return Port{Domain::kNodes, set, width, v, ""}; }

ValueId ModuleContext::zero_padding(int set, ValueId v) {
  if (!shape.padded) return v;
  const ValueId real = b.input_once(real_rows_name(schema.node_sets[set].name), DType::kI64, {shape.node_rows[set]});
  return b.divide_rows(v, real);
}

ValueId ModuleContext::row_ids(const Port& p) {
  if (!shape.padded) return runtime::kNoValue;
  switch (p.domain) {
    case Domain::kNodes:
      return b.input_once(global_id_name(schema.node_sets[p.set].name), DType::kI64, {shape.node_rows[p.set]});
    case Domain::kEdges:
      return edge_ids(graph(p.set));
    case Domain::kGraphs:
      break;
  }
  return b.input_once(global_id_name(kGraphSet), DType::kI64, {shape.graph_rows});
}

ValueId ModuleContext::edge_ids(int32_t g) {
  if (!shape.padded) return runtime::kNoValue;
  const runtime::GraphInfo& info = b.program().graphs.at(static_cast<size_t>(g));
  return b.input_once(runtime::edge_id_name(info.name), DType::kI64, {info.num_edges});
}

std::string ModuleContext::describe(const Port& p) const {
  const std::string rows = p.domain == Domain::kNodes   ? fmt::format("rows of node set '{}'", schema.node_sets[p.set].name)
                           : p.domain == Domain::kEdges ? fmt::format("edges of '{}'", schema.edge_sets[p.set].name)
                                                        : std::string("one row per graph");
  return fmt::format("'{}' ({}, width {})", p.name, rows, p.width);
}

void ModuleContext::expect_inputs(size_t min, size_t max) const {
  if (inputs.size() < min || inputs.size() > max) {
    fail(min == max ? fmt::format("takes {} input{}, has {}", min, min == 1 ? "" : "s", inputs.size())
                    : fmt::format("takes {} to {} inputs, has {}", min, max, inputs.size()));
  }
}

void ModuleContext::expect_domain(const Port& p, Domain domain, int set, const char* what) const {
  if (p.domain == domain && (set < 0 || p.set == set)) return;
  const std::string want = domain == Domain::kNodes
                               ? (set < 0 ? std::string("rows of a node set")
                                          : fmt::format("rows of node set '{}'", schema.node_sets[set].name))
                           : domain == Domain::kEdges ? fmt::format("edges of '{}'", schema.edge_sets[set].name)
                                                      : std::string("one row per graph");
  fail(fmt::format("{} must be {}, but is {}", what, want, describe(p)));
}

void ModuleContext::fail(const std::string& what) const {
  throw std::invalid_argument(fmt::format("model.module '{}' ({}): {}", module.name(), module_kind(module).name, what));
}

}  // namespace gnnrt::model

