#include "model/modules/network.h"

#include <fmt/format.h>

#include <cctype>
#include <optional>
#include <string_view>

#include "runtime/builder.h"

namespace gnnrt::model {
namespace {

using runtime::Builder;
using gnnrt::DType;
using runtime::ValueId;
using Init = ParamDecl::Init;

class NetworkBuilder {
 public:
  NetworkBuilder(std::string name, const NetworkShape& shape) : b_(std::move(name)), shape_(shape) {
    if (shape.partitioned) b_.partition(shape.nodes);
  }

  // Emits the layers; returns the last layer's output [N, width].
  ValueId forward(const proto::Model& model, bool training) {
    ValueId h = runtime::kNoValue;
    if (shape_.feature_nnz >= 0) {
      if (const std::string why = sparse_features_unsupported(model); !why.empty()) {
        throw std::invalid_argument("sparse features: " + why);
      }
      sparse_ = SparseInput{b_.graph(kFeatures, shape_.features, shape_.nodes, shape_.feature_nnz),
                            b_.input(kFeatureValues, DType::kF32, {shape_.feature_nnz})};
    } else {
      h = b_.input(kFeatures, DType::kF32, {shape_.nodes, shape_.features});
    }
    int64_t width = shape_.features;
    graph_ = b_.graph(kGraph, shape_.nodes, shape_.nodes, shape_.edges);
    graph_self_loops_ = b_.graph(kGraphSelfLoops, shape_.nodes, shape_.nodes, shape_.edges_self_loops);
    int convs = 0, linears = 0, norms = 0;
    for (int i = 0; i < model.layer_size(); ++i) {
      const proto::Layer& l = model.layer(i);
      const int64_t out = l.out() > 0 ? l.out() : shape_.classes;
      const proto::Layer::Type type = l.type();
      // Dropout masks are keyed by the layer's position in the job.
      const auto key = static_cast<uint64_t>(i + 1);
      if (type == proto::Layer::DROPOUT) {
        Builder::Scope scope(b_, fmt::format("dropout{}", i));
        if (training && sparse_) {
          sparse_->values = b_.sparse_dropout(sparse_->matrix, sparse_->values, l.p(), key);
        } else if (training) {
          h = b_.dropout(h, l.p(), key);
        }
        continue;
      }
      if (type == proto::Layer::RELU) {
        Builder::Scope scope(b_, fmt::format("relu{}", i));
        h = b_.relu(h);
      } else if (type == proto::Layer::ELU) {
        Builder::Scope scope(b_, fmt::format("elu{}", i));
        h = b_.elu(h, 1.0);
      } else if (type == proto::Layer::LAYER_NORM) {
        const std::string name = fmt::format("norm{}", ++norms);
        Builder::Scope scope(b_, name);
        const ValueId gamma = param(name + ".weight", {width}, Init::kOnes, width, width);
        const ValueId beta = param(name + ".bias", {width}, Init::kZeros, width, width);
        h = b_.layer_norm(h, gamma, beta, l.mode() == proto::Layer::NODE, l.norm_eps());
      } else if (type == proto::Layer::LINEAR) {
        const std::string name = fmt::format("lin{}", ++linears);
        Builder::Scope scope(b_, name);
        h = linear(name, h, width, out, l.bias());
        width = out;
      } else {
        const std::string name = fmt::format("conv{}", ++convs);
        Builder::Scope scope(b_, name);
        if (type == proto::Layer::GCN) {
          h = gcn(name, h, width, out, l);
          width = out;
        } else if (type == proto::Layer::SAGE) {
          h = sage(name, h, width, out, l);
          width = out;
        } else if (type == proto::Layer::GAT) {
          h = gat(name, h, width, out, l, training, key + 1000);
          width = l.concat() ? out * l.heads() : out;
        } else if (type == proto::Layer::GIN) {
          h = gin(name, h, width, out, l);
          width = out;
        } else {
          throw std::invalid_argument(fmt::format("layer {} has no type", i));
        }
      }
      sparse_.reset();  // the first layer took the sparse features
    }
    if (width != shape_.classes) {
      throw std::invalid_argument(fmt::format(
          "the model's last layer gives {} values per node, the dataset has {} classes", width,
          shape_.classes));
    }
    return h;
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
  ValueId param(const std::string& name, std::vector<int64_t> shape, Init init, int64_t fan_in,
                int64_t fan_out, double constant = 0) {
    const ValueId id = b_.parameter(name, shape);
    params_.push_back(ParamDecl{name, std::move(shape), init, fan_in, fan_out, constant});
    param_ids_.push_back(id);
    return id;
  }

  // x · weightᵀ; x is the sparse features while the first layer runs.
  ValueId project(ValueId x, ValueId weight) {
    return sparse_ ? b_.sparse_linear(sparse_->matrix, sparse_->values, weight)
                   : b_.linear(x, weight);
  }

  // torch.nn.Linear: weight [out, in], bias [out], both U(+-1/sqrt(in)).
  ValueId linear(const std::string& name, ValueId x, int64_t in, int64_t out, bool bias) {
    ValueId h = project(x, param(name + ".weight", {out, in}, Init::kTorchLinear, in, out));
    if (bias) h = b_.bias_add(h, param(name + ".bias", {out}, Init::kTorchLinear, in, out));
    return h;
  }

  // GCNConv: D^-1/2 (A + I) D^-1/2 X W^T + b (lin first, as PyG writes it;
  // the compiler moves the matmul to the narrower side).
  ValueId gcn(const std::string& name, ValueId x, int64_t in, int64_t out, const proto::Layer& l) {
    ValueId h = project(x, param(name + ".lin.weight", {out, in}, Init::kGlorot, in, out));
    // One normalisation per program, shared by every GCN layer: the same
    // graph gives the same edge weights.
    if (gcn_norm_ == runtime::kNoValue) gcn_norm_ = b_.gcn_norm(graph_self_loops_);
    const ValueId norm = gcn_norm_;
    h = b_.aggregate(ops::Reduce::kSum, graph_self_loops_, h, norm);
    if (l.bias()) h = b_.bias_add(h, param(name + ".bias", {out}, Init::kZeros, in, out));
    return h;
  }

  // SAGEConv: lin_l(aggr_{j -> i} x_j) + lin_r(x_i); lin_r has no bias.
  // With sparse features the linear map runs first: lin_l(mean(x)) =
  // mean(lin_l(x)) for a linear aggregation (what the compiler's reordering
  // does to the dense form when the layer narrows).
  ValueId sage(const std::string& name, ValueId x, int64_t in, int64_t out, const proto::Layer& l) {
    if (sparse_) {
      const ValueId lin_l = param(name + ".lin_l.weight", {out, in}, Init::kTorchLinear, in, out);
      ValueId h = b_.aggregate(reduce_named(proto::Layer::Aggr_Name(l.aggr())), graph_, project(x, lin_l));
      h = b_.bias_add(h, param(name + ".lin_l.bias", {out}, Init::kTorchLinear, in, out));
      return b_.add(h, project(x, param(name + ".lin_r.weight", {out, in}, Init::kTorchLinear, in, out)));
    }
    const ValueId agg = b_.aggregate(reduce_named(proto::Layer::Aggr_Name(l.aggr())), graph_, x);
    ValueId h = b_.linear(agg, param(name + ".lin_l.weight", {out, in}, Init::kTorchLinear, in, out));
    h = b_.bias_add(h, param(name + ".lin_l.bias", {out}, Init::kTorchLinear, in, out));
    const ValueId root =
        b_.linear(x, param(name + ".lin_r.weight", {out, in}, Init::kTorchLinear, in, out));
    return b_.add(h, root);
  }

  // GATConv: per head, alpha = softmax_j(leaky_relu(a_src . W x_j + a_dst . W x_i)),
  // out_i = sum_j alpha_ij W x_j; heads concatenated or averaged; + bias.
  ValueId gat(const std::string& name, ValueId x, int64_t in, int64_t channels,
              const proto::Layer& l, bool training, uint64_t key) {
    const int64_t heads = l.heads();
    const ValueId h = project(
        x, param(name + ".lin_src.weight", {heads * channels, in}, Init::kGlorot, in, heads * channels));
    // PyG's lin_dst is lin_src for an int in_channels: its state_dict lists both.
    aliases_.push_back(ParamAlias{name + ".lin_dst.weight", name + ".lin_src.weight"});
    const ValueId att_src = param(name + ".att_src", {1, heads, channels}, Init::kGlorot, heads, channels);
    const ValueId att_dst = param(name + ".att_dst", {1, heads, channels}, Init::kGlorot, heads, channels);
    const ValueId score = b_.sddmm_add(graph_self_loops_, b_.head_dot(h, att_src, heads),
                                       b_.head_dot(h, att_dst, heads));
    ValueId alpha = b_.softmax(graph_self_loops_, b_.leaky_relu(score, l.negative_slope()));
    if (training) alpha = b_.dropout(alpha, l.attention_dropout(), key, graph_self_loops_);
    ValueId out = b_.aggregate(ops::Reduce::kSum, graph_self_loops_, h, alpha);
    int64_t width = heads * channels;
    if (!l.concat()) {
      if (heads > 1) out = b_.head_mean(out, heads);
      width = channels;
    }
    if (l.bias()) out = b_.bias_add(out, param(name + ".bias", {width}, Init::kZeros, in, width));
    return out;
  }

  // GINConv: nn((1 + eps) x_i + sum_{j -> i} x_j), nn = Linear, ReLU, Linear.
  // eps is a parameter with train_eps (declared first, whatever the
  // features' form: parameters are drawn by index), else a buffer; the
  // state_dict key "<name>.eps" [1] either way, as PyG's.
  // With sparse features the first linear map runs before the sum:
  // W((1 + eps) x_i + sum x_j) = (1 + eps) W x_i + sum W x_j.
  ValueId gin(const std::string& name, ValueId x, int64_t in, int64_t out, const proto::Layer& l) {
    const int64_t hidden = l.hidden() > 0 ? l.hidden() : out;
    ValueId eps = runtime::kNoValue;
    if (l.train_eps()) {
      eps = param(name + ".eps", {1}, Init::kConstant, 1, 1, l.eps());
    } else {
      buffers_.push_back(Buffer{name + ".eps", {1}, {static_cast<float>(l.eps())}});
    }
    const auto self = [&](ValueId v) { return gin_self_term(b_, v, shape_.nodes, l.eps(), eps); };
    if (sparse_) {
      const ValueId y = project(x, param(name + ".nn.0.weight", {hidden, in}, Init::kTorchLinear, in, hidden));
      sparse_.reset();  // taken: the rest of the MLP is dense
      ValueId h = b_.add(self(y), b_.aggregate(ops::Reduce::kSum, graph_, y));
      h = b_.relu(b_.bias_add(h, param(name + ".nn.0.bias", {hidden}, Init::kTorchLinear, in, hidden)));
      return linear(name + ".nn.2", h, hidden, out, true);
    }
    const ValueId agg = b_.aggregate(ops::Reduce::kSum, graph_, x);
    ValueId h = b_.add(self(x), agg);
    h = b_.relu(linear(name + ".nn.0", h, in, hidden, true));
    return linear(name + ".nn.2", h, hidden, out, true);
  }

  Network finish(ValueId loss_value) {
    Network n;
    n.params = std::move(params_);
    n.param_ids = std::move(param_ids_);
    n.aliases = std::move(aliases_);
    n.buffers = std::move(buffers_);
    n.loss = loss_value;
    n.program = b_.take();
    return n;
  }

  struct SparseInput {
    int32_t matrix;  // the features' pattern, declared as a graph
    ValueId values;  // its stored values (after any dropout)
  };

  Builder b_;
  NetworkShape shape_;
  std::optional<SparseInput> sparse_;  // until the first layer takes it
  int32_t graph_ = -1, graph_self_loops_ = -1;
  ValueId y_ = runtime::kNoValue, train_mask_ = runtime::kNoValue;
  ValueId gcn_norm_ = runtime::kNoValue;  // the self-loop graph's D^-1/2 weights, once built
  std::vector<ParamDecl> params_;
  std::vector<ValueId> param_ids_;
  std::vector<ParamAlias> aliases_;
  std::vector<Buffer> buffers_;
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
