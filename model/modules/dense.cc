// Module kinds: dense modules, the same rows in and out.
#include <fmt/format.h>

#include "model/modules/kinds.h"

namespace gnnrt::model::kinds {
namespace {

Port linear(ModuleContext& c) {
  const Port x = one_input(c);
  const int64_t out = positive(c, c.module.linear().out(), "out");
  // nn.Linear's keys are the module's own: "<name>.weight".
  const bool xavier = c.module.linear().xavier();
  const ValueId w = c.param("weight", {out, x.width}, xavier ? Init::kGlorot : Init::kTorchLinear, x.width, out);
  ValueId h = c.project(x, w);
  if (c.module.linear().bias()) {
    h = c.b.bias_add(h, c.param("bias", {out}, xavier ? Init::kZeros : Init::kTorchLinear, x.width, out));
  }
  return with(x, out, h);
}

Port mlp(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.mlp();
  std::vector<int64_t> widths{x.width};
  for (int64_t h : m.hidden()) widths.push_back(positive(c, h, "hidden"));
  widths.push_back(positive(c, m.out(), "out"));
  ValueId h = x.value;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    if (i > 0) h = c.b.relu(h);
    // nn.Sequential numbering: Linear 0, ReLU 1, Linear 2, ...
    h = c.linear(std::to_string(2 * i), h, widths[i], widths[i + 1], true);
  }
  return with(x, widths.back(), h);
}

Port relu(ModuleContext& c) {
  const Port x = one_input(c);
  return with(x, x.width, c.b.relu(x.value));
}

Port elu(ModuleContext& c) {
  const Port x = one_input(c);
  return with(x, x.width, c.b.elu(x.value, c.module.elu().alpha()));
}

Port activation(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.activation();
  // job.proto's kinds are ops::Activation's, member for member.
  using K = proto::ActivationModule;
  static_assert(static_cast<int>(ops::Activation::kSigmoid) == K::SIGMOID &&
                static_cast<int>(ops::Activation::kSilu) == K::SILU &&
                static_cast<int>(ops::Activation::kGeluTanh) == K::GELU_TANH &&
                static_cast<int>(ops::Activation::kExp) == K::EXP &&
                static_cast<int>(ops::Activation::kTanh) == K::TANH &&
                static_cast<int>(ops::Activation::kAbs) == K::ABS &&
                static_cast<int>(ops::Activation::kClip) == K::CLIP && K::Kind_ARRAYSIZE == 7);
  const auto kind = static_cast<ops::Activation>(m.kind());
  if (kind == ops::Activation::kClip && !(m.bound() >= 0)) c.fail(fmt::format("bound = {} must be >= 0", m.bound()));
  return with(x, x.width, c.b.activation(x.value, kind, m.bound()));
}

Port dropout(ModuleContext& c) {
  const Port x = one_input(c);
  const double p = c.module.dropout().p();
  if (!(p >= 0 && p < 1)) c.fail(fmt::format("p = {} is not in [0, 1)", p));
  if (!c.training) return x;
  if (x.sparse()) {
    // Sparse features: their stored values drop out.
    Port out = x;
    out.sparse_values = c.b.sparse_dropout(x.sparse_pattern, x.sparse_values, p, c.key);
    return out;
  }
  return with(x, x.width, c.b.dropout(x.value, p, c.key, -1, c.row_ids(x)));
}

Port layer_norm(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.layer_norm();
  if (!(m.eps() > 0)) c.fail(fmt::format("eps = {} must be > 0", m.eps()));
  // GRAPH mode's statistics span every row: an unpadded graph's only.
  const bool per_node = m.mode() == proto::LayerNormModule::NODE;
  if (!per_node && c.shape.padded) c.fail("mode GRAPH normalises over a whole graph; batches of graphs take NODE");
  if (!per_node && !m.affine()) c.fail("mode GRAPH is affine (weight and bias)");
  // Per row: padded rows never reach a real row's statistics.
  if (!m.affine()) return with(x, x.width, plain_norm(c, x.value, x.width, m.eps()));
  const ValueId gamma = c.param("weight", {x.width}, Init::kOnes, x.width, x.width);
  const ValueId beta = c.param("bias", {x.width}, Init::kZeros, x.width, x.width);
  return with(x, x.width, c.b.layer_norm(x.value, gamma, beta, per_node, m.eps()));
}

Port add(ModuleContext& c) {
  return elementwise(c, "add", [&](ValueId a, ValueId b) { return c.b.add(a, b); });
}

Port concat(ModuleContext& c) {
  if (c.inputs.empty()) c.fail("needs at least 1 input");
  Port out = c.inputs[0];
  std::vector<ValueId> values;
  out.width = 0;
  for (const Port& p : c.inputs) {
    if (p.domain != c.inputs[0].domain || p.set != c.inputs[0].set) {
      c.fail(fmt::format("cannot concatenate {} and {}: other rows", c.describe(c.inputs[0]), c.describe(p)));
    }
    values.push_back(p.value);
    out.width += p.width;
  }
  out.value = c.b.concat(values);
  return out;
}

Port slice(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.slice();
  if (m.begin() < 0 || m.width() < 1 || m.begin() + m.width() > x.width) {
    c.fail(fmt::format("features {} .. {} are not within {}", m.begin(), m.begin() + m.width(), c.describe(x)));
  }
  return with(x, m.width(), c.b.slice_cols(x.value, m.begin(), m.width()));
}

Port mul(ModuleContext& c) {
  return elementwise(c, "multiply", [&](ValueId a, ValueId b) { return c.b.mul(a, b); });
}

Port scale(ModuleContext& c) {
  const Port x = one_input(c);
  const auto& m = c.module.scale();
  ValueId v = c.b.scale(x.value, m.alpha());
  // + beta on every element: a bias of beta in each column.
  if (m.beta() != 0) v = c.b.bias_add(v, c.b.fill({x.width}, m.beta()));
  return with(x, x.width, v);
}

}  // namespace

void define_dense(ModuleRows& rows) {
  rows[proto::Module::kLinearFieldNumber] = {"linear", linear};
  rows[proto::Module::kMlpFieldNumber] = {"mlp", mlp};
  rows[proto::Module::kReluFieldNumber] = {"relu", relu};
  rows[proto::Module::kEluFieldNumber] = {"elu", elu};
  rows[proto::Module::kDropoutFieldNumber] = {"dropout", dropout};
  rows[proto::Module::kLayerNormFieldNumber] = {"layer_norm", layer_norm};
  rows[proto::Module::kAddFieldNumber] = {"add", add};
  rows[proto::Module::kActivationFieldNumber] = {"activation", activation};
  rows[proto::Module::kConcatFieldNumber] = {"concat", concat};
  rows[proto::Module::kSliceFieldNumber] = {"slice", slice};
  rows[proto::Module::kMulFieldNumber] = {"mul", mul};
  rows[proto::Module::kScaleFieldNumber] = {"scale", scale};
}

}  // namespace gnnrt::model::kinds
