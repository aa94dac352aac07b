// Inside the modules room: what the module kinds share, and their
// registration. Each family file (convolutions.cc, dense.cc, graph_ops.cc,
// scene.cc) defines its kinds and fills their rows of the registry at the
// Module oneof's field numbers (define_<family>); modules.cc checks the
// rows against job.proto's descriptor. A new kind touches job.proto and its
// family file.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <string>

#include "model/modules/modules.h"

namespace gnnrt::model::kinds {

using runtime::ValueId;
using Init = ParamDecl::Init;
using Domain = Port::Domain;

// The registry's rows by the Module oneof's field number.
using ModuleRows = std::map<int, ModuleKind>;
void define_convolutions(ModuleRows& rows);
void define_dense(ModuleRows& rows);
void define_graph_ops(ModuleRows& rows);
void define_scene(ModuleRows& rows);

// Inputs: x_src, and x_dst when the edge set joins two node sets (PyG's
// (x_src, x_dst)); a homogeneous edge set's one input serves both ends.
struct EdgeInputs {
  int edges;
  Port src, dst;
};

// `extra`: inputs after the node rows (the attention's edge features).
EdgeInputs edge_inputs(ModuleContext& c, const std::string& edges_name, size_t extra = 0);
// v, or fail() naming the field when it is below 1.
int64_t positive(const ModuleContext& c, int64_t v, const char* field);
// The one input of a module that takes one.
Port one_input(ModuleContext& c);
// p's rows with another width and value.
Port with(Port p, int64_t width, ValueId v);
// torch.nn.LayerNorm(width, elementwise_affine=False, eps).
ValueId plain_norm(ModuleContext& c, ValueId x, int64_t width, double eps);

// add and mul: two or more inputs of the same rows and width, folded by `op`.
template <typename Op>
Port elementwise(ModuleContext& c, const char* verb, Op op) {
  if (c.inputs.size() < 2) c.fail(fmt::format("needs at least 2 inputs, has {}", c.inputs.size()));
  Port folded = c.inputs[0];
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    const Port& p = c.inputs[i];
    if (!same_rows_and_width(p, folded)) {
      c.fail(fmt::format("cannot {} {} and {}", verb, c.describe(c.inputs[0]), c.describe(p)));
    }
    folded.value = op(folded.value, p.value);
  }
  return folded;
}

}  // namespace gnnrt::model::kinds
