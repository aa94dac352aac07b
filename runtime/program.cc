#include "runtime/program.h"

#include <fmt/format.h>

#include <array>
#include <stdexcept>

namespace gnnrt::runtime {
namespace {

constexpr std::array<std::string_view, 0
#define GNNRT_OP_COUNT(kind, name) +1
                                           GNNRT_FOR_EACH_OP(GNNRT_OP_COUNT)
#undef GNNRT_OP_COUNT
                                       >
    kOpNames{
#define GNNRT_OP_NAME(kind, name) name,
        GNNRT_FOR_EACH_OP(GNNRT_OP_NAME)
#undef GNNRT_OP_NAME
    };

}  // namespace

std::string_view to_string(Role role) {
  switch (role) {
    case Role::kInput: return "input";
    case Role::kParameter: return "parameter";
    case Role::kState: return "state";
    case Role::kTemp: return "temp";
  }
  return "?";
}

std::string_view to_string(OpKind kind) { return kOpNames.at(static_cast<size_t>(kind)); }

OpKind parse_op_kind(std::string_view name) {
  for (size_t i = 0; i < kOpNames.size(); ++i) {
    if (kOpNames[i] == name) return static_cast<OpKind>(i);
  }
  throw std::invalid_argument(fmt::format("unknown op '{}'", name));
}

bool is_graph_constant(const Op& op) { return op.kind == OpKind::kGcnNorm && op.inputs.empty(); }

int64_t ValueInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ValueInfo::bytes() const { return elements() * static_cast<int64_t>(item_size(dtype)); }

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

ValueId Program::find(std::string_view name) const {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].name == name) return static_cast<ValueId>(i);
  }
  return kNoValue;
}

std::string Program::describe(std::size_t op_index) const {
  const Op& op = ops.at(op_index);
  if (op.scope.empty()) return fmt::format("op #{} {}", op_index, to_string(op.kind));
  return fmt::format("op #{} {} ({})", op_index, to_string(op.kind), op.scope);
}

std::string Program::to_text() const {
  std::string text = fmt::format("program {} float={} partitioned={} local_nodes={}\n", name,
                                 gnnrt::to_string(float_type), partitioned, local_nodes);
  if (replicated) text += "replicated\n";
  for (const GraphInfo& g : graphs) {
    text += fmt::format("graph {} src={} dst={} edges={}\n", g.name, g.num_src, g.num_dst,
                        g.num_edges);
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const ValueInfo& v = values[i];
    text += fmt::format("%{} {} {} {} {}\n", i, to_string(v.role), v.name, to_string(v.dtype),
                        shape_string(v.shape));
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    // The attributes as Protobuf prints them: every field that is set, doubles
    // with round-trip precision, so two programs with the same text run the
    // same computation.
    text += fmt::format("{} {} in=({}) out=({}) {{{}}} scope={}\n", i, to_string(op.kind),
                        fmt::join(op.inputs, ","), fmt::join(op.outputs, ","),
                        op.attrs.ShortDebugString(), op.scope);
  }
  text += fmt::format("outputs ({})\n", fmt::join(outputs, ","));
  return text;
}

}  // namespace gnnrt::runtime
