#include "model/modules/network.h"

#include <fmt/format.h>

#include <cctype>
#include <string_view>

#include "model/modules/modules.h"
#include "runtime/builder.h"

namespace gnnrt::model {
namespace {

using runtime::Builder;
using gnnrt::DType;
using runtime::ValueId;

}  // namespace

proto::Module as_module(const proto::Layer& l, int64_t out, int i, LayerNames& names) {
  using L = proto::Layer;
  proto::Module m;
  switch (l.type()) {
    case L::GCN: {
      auto& k = *m.mutable_gcn();
      k.set_edges(kGraph);
      k.set_out(out);
      k.set_bias(l.bias());
      break;
    }
    case L::SAGE: {
      auto& k = *m.mutable_sage();
      k.set_edges(kGraph);
      k.set_out(out);
      k.set_aggr(l.aggr() == L::MAX ? proto::SageModule::MAX : proto::SageModule::MEAN);
      break;
    }
    case L::GAT: {
      auto& k = *m.mutable_gat();
      k.set_edges(kGraph);
      k.set_out(out);
      k.set_heads(l.heads());
      k.set_concat(l.concat());
      k.set_negative_slope(l.negative_slope());
      k.set_attention_dropout(l.attention_dropout());
      k.set_bias(l.bias());
      break;
    }
    case L::GIN: {
      auto& k = *m.mutable_gin();
      k.set_edges(kGraph);
      k.set_out(out);
      k.set_hidden(l.hidden());
      k.set_eps(l.eps());
      k.set_train_eps(l.train_eps());
      break;
    }
    case L::LINEAR:
      m.set_name(fmt::format("lin{}", ++names.linears));
      m.mutable_linear()->set_out(out);
      m.mutable_linear()->set_bias(l.bias());
      return m;
    case L::LAYER_NORM:
      m.set_name(fmt::format("norm{}", ++names.norms));
      m.mutable_layer_norm()->set_eps(l.norm_eps());
      m.mutable_layer_norm()->set_mode(l.mode() == L::NODE ? proto::LayerNormModule::NODE
                                                           : proto::LayerNormModule::GRAPH);
      return m;
    case L::DROPOUT:
      m.set_name(fmt::format("dropout{}", i));
      m.mutable_dropout()->set_p(l.p());
      return m;
    case L::RELU:
      m.set_name(fmt::format("relu{}", i));
      m.mutable_relu();
      return m;
    case L::ELU:
      m.set_name(fmt::format("elu{}", i));
      m.mutable_elu()->set_alpha(1.0);
      return m;
    default:
      throw std::invalid_argument(fmt::format("layer {} has no type", i));
  }
  m.set_name(fmt::format("conv{}", ++names.convs));
  return m;
}

namespace {

class NetworkBuilder {
 public:
  NetworkBuilder(std::string name, const NetworkShape& shape) : b_(std::move(name)), shape_(shape) {
    if (shape.partitioned) b_.partition(shape.nodes);
  }

  // Emits the layers, each a module kind (modules.h) over the one node set
  // and its graph; returns the last layer's output [N, width].
  ValueId forward(const proto::Model& model, bool training) {
    Port x{Port::Domain::kNodes, 0, shape_.features, runtime::kNoValue, kFeatures};
    if (shape_.feature_nnz >= 0) {
      if (const std::string why = sparse_features_unsupported(model); !why.empty()) {
        throw std::invalid_argument("sparse features: " + why);
      }
      x.sparse_pattern = b_.graph(kFeatures, shape_.features, shape_.nodes, shape_.feature_nnz);
      x.sparse_values = b_.input(kFeatureValues, DType::kF32, {shape_.feature_nnz});
    } else {
      x.value = b_.input(kFeatures, DType::kF32, {shape_.nodes, shape_.features});
    }
    b_.graph(kGraph, shape_.nodes, shape_.nodes, shape_.edges);
    b_.graph(kGraphSelfLoops, shape_.nodes, shape_.nodes, shape_.edges_self_loops);
    Schema schema;
    schema.node_sets.emplace_back().name = "nodes";
    schema.node_sets.back().width = shape_.features;
    schema.edge_sets.emplace_back().name = kGraph;  // nodes to nodes, no edge features
    BucketShape rows;
    rows.node_rows = {shape_.nodes};
    rows.edge_rows = {shape_.edges};
    rows.padded = false;
    rows.self_loop_edges = {shape_.edges_self_loops};
    LayerNames names;
    for (int i = 0; i < model.layer_size(); ++i) {
      const proto::Layer& l = model.layer(i);
      const proto::Module m = as_module(l, l.out() > 0 ? l.out() : shape_.classes, i, names);
      // Dropout masks are keyed by the layer's position in the job; GAT's
      // attention dropout by it plus 1000.
      const auto key = static_cast<uint64_t>(i + 1) + (l.type() == proto::Layer::GAT ? 1000 : 0);
      Builder::Scope scope(b_, m.name());
      ModuleContext c(b_, schema, rows, training, m, key, {x}, declared_);
      x = module_kind(m).build(c);
    }
    if (x.width != shape_.classes) {
      throw std::invalid_argument(fmt::format(
          "the model's last layer gives {} values per node, the dataset has {} classes", x.width,
          shape_.classes));
    }
    return x.value;
  }

  // The loss over the training mask: (prediction for accuracy, loss).
  std::pair<ValueId, ValueId> loss(const proto::Model& model, ValueId h) {
    Builder::Scope scope(b_, "loss");
    y_ = b_.input("y", DType::kI64, {shape_.nodes});
    train_mask_ = b_.input("train_mask", DType::kBool, {shape_.nodes});
    if (model.loss() == proto::Model::MSE) {
      const ValueId target = b_.input("y_onehot", DType::kF32, {shape_.nodes, shape_.classes});
      return {h, b_.mse_loss(h, target, train_mask_)};
    }
    const ValueId log_prob = b_.log_softmax(h);
    return {log_prob, b_.nll_loss(log_prob, y_, train_mask_)};
  }

  Network train_step(const proto::Model& model) {
    const ValueId h = forward(model, /*training=*/true);
    const auto [prediction, loss_value] = loss(model, h);
    (void)prediction;
    const ValueId metrics = b_.state(kMetrics, DType::kF64, {kMetricSlots});
    b_.accumulate(metrics, loss_value, kLossSum);
    return finish(loss_value);
  }

  Network inference(const proto::Model& model) {
    const ValueId h = forward(model, /*training=*/false);
    ValueId prediction = h;
    if (model.loss() != proto::Model::MSE) {
      Builder::Scope scope(b_, "loss");
      prediction = b_.log_softmax(h);
    }
    b_.program().value(prediction).name = kLogits;
    b_.output(prediction);
    const ValueId y = b_.input("y", DType::kI64, {shape_.nodes});
    const ValueId metrics = b_.state(kMetrics, DType::kF64, {kMetricSlots});
    const std::pair<const char*, MetricSlot> masks[] = {
        {"train_mask", kTrainCorrect}, {"val_mask", kValCorrect}, {"test_mask", kTestCorrect}};
    for (const auto& [name, slot] : masks) {
      b_.count_correct(metrics, prediction, y, b_.input(name, DType::kBool, {shape_.nodes}), slot);
    }
    return finish(runtime::kNoValue);
  }

 private:
  Network finish(ValueId loss_value) {
    Network n;
    n.params = std::move(declared_.params);
    n.param_ids = std::move(declared_.ids);
    n.aliases = std::move(declared_.aliases);
    n.buffers = std::move(declared_.buffers);
    n.loss = loss_value;
    n.program = b_.take();
    return n;
  }

  Builder b_;
  NetworkShape shape_;
  ValueId y_ = runtime::kNoValue, train_mask_ = runtime::kNoValue;
  DeclaredParams declared_;
};

}  // namespace

ops::Reduce reduce_named(std::string_view name) {
  std::string lower(name);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ops::parse_reduce(lower);
}

ValueId gin_self_term(Builder& b, ValueId x, int64_t rows, double eps, ValueId eps_param) {
  if (eps_param == runtime::kNoValue) return eps == 0 ? x : b.scale(x, 1 + eps);
  // [rows, 1] of 1 + eps, then each row of x times its entry.
  const ValueId factor =
      b.bias_add(b.matmul(b.fill({rows, 1}, 1.0), b.reshape(eps_param, {1, 1})), b.fill({1}, 1.0));
  return b.edge_scale(x, factor);
}

Network build_train_step(const proto::Model& model, const NetworkShape& shape) {
  return NetworkBuilder("train_step", shape).train_step(model);
}

Network build_inference(const proto::Model& model, const NetworkShape& shape) {
  return NetworkBuilder("infer", shape).inference(model);
}

}  // namespace gnnrt::model
