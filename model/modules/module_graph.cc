#include "model/modules/module_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace gnnrt::model {
namespace {

using runtime::Builder;
using runtime::ValueId;
using Domain = Port::Domain;

// The names data provides: "<node set>.x", "<edge set>.x" (with features).
std::map<std::string, Port> data_ports(const Schema& schema) {
  std::map<std::string, Port> ports;
  for (size_t s = 0; s < schema.node_sets.size(); ++s) {
    const auto& n = schema.node_sets[s];
    ports[features_name(n.name)] = Port{Domain::kNodes, static_cast<int>(s), n.width, runtime::kNoValue,
                                        features_name(n.name)};
  }
  for (size_t e = 0; e < schema.edge_sets.size(); ++e) {
    const auto& info = schema.edge_sets[e];
    if (info.width > 0) {
      ports[features_name(info.name)] = Port{Domain::kEdges, static_cast<int>(e), info.width,
                                             runtime::kNoValue, features_name(info.name)};
    }
  }
  return ports;
}

std::string module_label(const proto::Model& model, int i) {
  return fmt::format("model.module '{}'", model.module(i).name());
}

class ModuleGraphBuilder {
 public:
  ModuleGraphBuilder(std::string name, const proto::Model& model, const Schema& schema, const BucketShape& shape,
                     bool training, bool replicated, AggregationSplit* split = nullptr)
      : b_(std::move(name)), model_(model), schema_(schema), shape_(shape), training_(training), split_(split) {
    if (replicated) b_.replicate();
  }

  Network train_step() {
    forward();
    const ValueId loss = losses();
    return finish(loss);
  }

  // The forward pass, with no outputs but what the modules made so.
  Network forward_only() {
    forward();
    return finish(runtime::kNoValue);
  }

  std::map<std::string, Port> ports() {
    forward();
    return ports_;
  }

  Network inference(std::vector<std::string> outputs) {
    forward();
    if (outputs.empty()) {
      for (const auto& t : model_.loss_term()) outputs.push_back(t.input());
    }
    for (const std::string& name : outputs) {
      // A module's output, never a dataset tensor ("atom.x"); module names
      // may be nested scopes ("decoder.head").
      const auto found = ports_.find(name);
      const bool module = std::any_of(model_.module().begin(), model_.module().end(),
                                      [&](const proto::Module& m) { return m.name() == name; });
      if (found == ports_.end() || !module) {
        throw std::invalid_argument(fmt::format("output '{}' is no module of the model", name));
      }
      ValueId v = found->second.value;
      // A module whose value is not its own (an input passed through, or a
      // value already named as another output) gets a copy to carry its name.
      const auto& outs = b_.program().outputs;
      if (b_.program().value(v).role != runtime::Role::kTemp || std::find(outs.begin(), outs.end(), v) != outs.end()) {
        v = b_.scale(v, 1.0);
      }
      b_.program().value(v).name = name;
      b_.output(v);
    }
    // The eval losses, when the dataset has every target they need.
    bool targets = model_.loss_term_size() > 0;
    for (const auto& t : model_.loss_term()) {
      if (t.kind() == proto::LossTerm::KL) continue;  // no target
      const std::string rows = t.target().substr(0, t.target().rfind('.'));
      const int set = schema_.node_set(rows), edges = schema_.edge_set(rows);
      targets = targets && (t.target() == target_name(kGraphSet) ? schema_.graph_target
                            : set >= 0 ? schema_.node_sets[set].target
                                       : edges >= 0 && schema_.edge_sets[edges].target);
      // Labels beyond the model's logits (another dataset): no eval loss.
      if (targets && t.kind() == proto::LossTerm::CROSS_ENTROPY && (set >= 0 || t.target() == target_name(kGraphSet))) {
        const int64_t classes = t.target() == target_name(kGraphSet) ? schema_.graph_num_classes
                                                                     : schema_.node_sets[set].num_classes;
        const auto found = ports_.find(t.input());
        targets = found != ports_.end() && found->second.width >= classes;
      }
    }
    if (targets) losses();
    return finish(runtime::kNoValue);
  }

 private:
  void forward() {
    ports_ = data_ports(schema_);
    for (auto& [name, p] : ports_) {
      const std::vector<int64_t> shape = p.domain == Domain::kNodes
                                             ? std::vector<int64_t>{shape_.node_rows[p.set], p.width}
                                             : std::vector<int64_t>{shape_.edge_rows[p.set], p.width};
      // Declared when read (dead inputs are dropped by the compiler anyway).
      p.value = b_.input(name, DType::kF32, shape);
    }
    for (int i : module_order(model_, schema_)) {
      const proto::Module& m = model_.module(i);
      std::vector<Port> inputs;
      for (const std::string& in : m.input()) inputs.push_back(ports_.at(in));
      Builder::Scope scope(b_, m.name());
      ModuleContext c(b_, schema_, shape_, training_, m, static_cast<uint64_t>(i + 1), std::move(inputs), declared_,
                      split_);
      Port out = module_kind(m).build(c);
      out.name = m.name();
      ports_[m.name()] = out;
    }
  }

  // Sum of weight * term over the loss terms; metrics[0] the total,
  // metrics[1 + i] term i.
  ValueId losses() {
    Builder::Scope scope(b_, "loss");
    const ValueId metrics = b_.state(kMetrics, DType::kF64, {module_metric_slots(model_)});
    ValueId total = runtime::kNoValue;
    for (int i = 0; i < model_.loss_term_size(); ++i) {
      const auto& t = model_.loss_term(i);
      const std::string where = fmt::format("model.loss_term[{}]", i);
      const auto found = ports_.find(t.input());
      if (found == ports_.end()) {
        throw std::invalid_argument(fmt::format("{}: input '{}' is no module's output", where, t.input()));
      }
      ValueId term = t.kind() == proto::LossTerm::KL ? kl_term(where, t, found->second)
                                                      : target_term(where, i, t, found->second, metrics);
      b_.accumulate(metrics, term, static_cast<uint64_t>(1 + i));
      if (t.weight() != 1) term = b_.scale(term, t.weight());
      total = total == runtime::kNoValue ? term : b_.add(total, term);
    }
    b_.accumulate(metrics, total, 0);
    return total;
  }

  // A term against the target's real rows: MSE, L1 or cross-entropy (which
  // also counts the correct rows into metrics).
  ValueId target_term(const std::string& where, int i, const proto::LossTerm& t, const Port& in, ValueId metrics) {
    const bool graph = t.target() == target_name(kGraphSet);
    int set = -1;
    bool has = false, classes = false;
    int64_t width = 0, num_classes = 0;
    std::string rows_name, max_label_at;
    if (graph) {
      has = schema_.graph_target;
      classes = schema_.graph_classes;
      width = schema_.graph_target_width;
      num_classes = schema_.graph_num_classes;
      max_label_at = schema_.graph_max_label_at;
      rows_name = kGraphSet;
      if (in.domain != Domain::kGraphs) {
        throw std::invalid_argument(fmt::format("{}: target '{}' has one row per graph, input '{}' does not "
                                                "(pool it first)", where, t.target(), t.input()));
      }
    } else {
      for (size_t s = 0; s < schema_.node_sets.size(); ++s) {
        if (t.target() == target_name(schema_.node_sets[s].name)) set = static_cast<int>(s);
      }
      if (set < 0) return edge_target_term(where, t, in);
      const auto& n = schema_.node_sets[set];
      has = n.target;
      classes = n.classes;
      width = n.target_width;
      num_classes = n.num_classes;
      max_label_at = n.max_label_at;
      rows_name = n.name;
      if (in.domain != Domain::kNodes || in.set != set) {
        throw std::invalid_argument(fmt::format("{}: target '{}' has the rows of node set '{}', input '{}' "
                                                "does not", where, t.target(), n.name, t.input()));
      }
    }
    if (!has) throw std::invalid_argument(fmt::format("{}: the dataset has no target '{}'", where, t.target()));
    const int64_t rows = graph ? shape_.graph_rows : shape_.node_rows[set];
    const ValueId mask = b_.input_once(mask_name(rows_name), DType::kBool, {rows});
    if (t.kind() == proto::LossTerm::CROSS_ENTROPY) {
      if (!classes) throw std::invalid_argument(fmt::format("{}: cross_entropy needs integer targets", where));
      // The labels need not use every class the model gives logits for.
      if (in.width < num_classes) {
        throw std::invalid_argument(fmt::format("{}: input '{}' gives {} logits, the target's labels go up to {}{}",
                                                where, t.input(), in.width, num_classes - 1,
                                                max_label_at.empty() ? "" : " (" + max_label_at + ")"));
      }
      const ValueId labels = b_.input_once(t.target(), DType::kI64, {rows});
      const ValueId log_prob = b_.log_softmax(in.value);
      b_.count_correct(metrics, log_prob, labels, mask, static_cast<uint64_t>(correct_slot(model_, i)));
      return b_.nll_loss(log_prob, labels, mask);
    }
    if (classes) throw std::invalid_argument(fmt::format("{}: mse, l1 and bce_with_logits need float targets", where));
    if (in.width != width) {
      throw std::invalid_argument(fmt::format("{}: input '{}' has width {}, target '{}' has {}", where,
                                              t.input(), in.width, t.target(), width));
    }
    const ValueId target = b_.input_once(t.target(), DType::kF32, {rows, width});
    return float_loss(t.kind(), in.value, target, mask);
  }

  // A term against an edge set's float targets ("<edge set>.y"): MSE, L1
  // or BCE with logits over its real edges.
  ValueId edge_target_term(const std::string& where, const proto::LossTerm& t, const Port& in) {
    const int e = schema_.edge_set(t.target().substr(0, t.target().rfind('.')));
    if (e < 0 || t.target() != target_name(schema_.edge_sets[e].name)) {
      throw std::invalid_argument(fmt::format("{}: target '{}' is neither graph.y, <node set>.y nor <edge set>.y",
                                              where, t.target()));
    }
    const auto& info = schema_.edge_sets[e];
    if (!info.target) throw std::invalid_argument(fmt::format("{}: the dataset has no target '{}'", where, t.target()));
    if (in.domain != Domain::kEdges || in.set != e) {
      throw std::invalid_argument(fmt::format("{}: target '{}' has the rows of edge set '{}', input '{}' does not",
                                              where, t.target(), info.name, t.input()));
    }
    if (t.kind() == proto::LossTerm::CROSS_ENTROPY) {
      throw std::invalid_argument(fmt::format("{}: an edge set's targets are floats: bce_with_logits, mse or l1",
                                              where));
    }
    if (in.width != info.target_width) {
      throw std::invalid_argument(fmt::format("{}: input '{}' has width {}, target '{}' has {}", where, t.input(),
                                              in.width, t.target(), info.target_width));
    }
    const int64_t rows = shape_.edge_rows[e];
    const ValueId mask = b_.input_once(mask_name(info.name), DType::kBool, {rows});
    const ValueId target = b_.input_once(t.target(), DType::kF32, {rows, info.target_width});
    return float_loss(t.kind(), in.value, target, mask);
  }

  ValueId float_loss(proto::LossTerm::Kind kind, ValueId in, ValueId target, ValueId mask) {
    switch (kind) {
      case proto::LossTerm::L1: return b_.l1_loss(in, target, mask);
      case proto::LossTerm::BCE_WITH_LOGITS: return b_.bce_with_logits(in, target, mask);
      default: return b_.mse_loss(in, target, mask);
    }
  }

  // KL(N(mu, e^lv) || N(0, 1)) per row, summed over columns, averaged over
  // the real rows: 1/2 (e^lv + mu^2 - (1 + lv)) is the mean loss's linear
  // form against the target 1 + lv, times the width for the column sum.
  ValueId kl_term(const std::string& where, const proto::LossTerm& t, const Port& mu) {
    const auto found = ports_.find(t.log_var());
    if (t.log_var().empty() || found == ports_.end()) {
      throw std::invalid_argument(fmt::format("{}: kind KL needs log_var, a module's output ('{}' is none)", where,
                                              t.log_var()));
    }
    const Port& lv = found->second;
    if (!same_rows_and_width(lv, mu)) {
      throw std::invalid_argument(fmt::format("{}: input '{}' and log_var '{}' differ in rows or width ({} and {})",
                                              where, t.input(), t.log_var(), mu.width, lv.width));
    }
    if (mu.domain == Domain::kEdges) {
      throw std::invalid_argument(fmt::format("{}: kind KL averages over a node set's or the graphs' rows, not "
                                              "edges", where));
    }
    const bool graph = mu.domain == Domain::kGraphs;
    const int64_t rows = graph ? shape_.graph_rows : shape_.node_rows[mu.set];
    const ValueId mask = b_.input_once(mask_name(graph ? kGraphSet : schema_.node_sets[mu.set].name),
                                       DType::kBool, {rows});
    const ValueId pred = b_.add(b_.activation(lv.value, ops::Activation::kExp), b_.mul(mu.value, mu.value));
    const ValueId target = b_.bias_add(lv.value, b_.fill({lv.width}, 1.0));
    return b_.scale(b_.mean_loss(pred, target, mask), 0.5 * static_cast<double>(mu.width));
  }

  Network finish(ValueId loss) {
    Network n;
    n.params = std::move(declared_.params);
    n.aliases = std::move(declared_.aliases);
    n.buffers = std::move(declared_.buffers);
    n.param_ids = std::move(declared_.ids);
    n.loss = loss;
    n.program = b_.take();
    return n;
  }

  Builder b_;
  const proto::Model& model_;
  const Schema& schema_;
  const BucketShape& shape_;
  const bool training_;
  AggregationSplit* split_;
  std::map<std::string, Port> ports_;
  DeclaredParams declared_;
};

}  // namespace

std::vector<int> module_order(const proto::Model& model, const Schema& schema) {
  const std::map<std::string, Port> data = data_ports(schema);
  std::map<std::string, int> by_name;
  for (int i = 0; i < model.module_size(); ++i) {
    const std::string& name = model.module(i).name();
    if (name.empty()) throw std::invalid_argument(fmt::format("model.module[{}] has no name", i));
    if (name.find_first_of(" /") != std::string::npos) {
      throw std::invalid_argument(fmt::format("{}: a name has no spaces or slashes", module_label(model, i)));
    }
    if (data.count(name) || name == kGraphSet) {
      throw std::invalid_argument(fmt::format("{}: the name is the dataset's", module_label(model, i)));
    }
    if (!by_name.emplace(name, i).second) {
      throw std::invalid_argument(fmt::format("{}: two modules have this name", module_label(model, i)));
    }
    module_kind(model.module(i));  // throws when no kind is set
    // Only a token makes its rows from nothing.
    if (model.module(i).input_size() == 0 && !model.module(i).has_token()) {
      throw std::invalid_argument(fmt::format("{}: has no input", module_label(model, i)));
    }
    for (const std::string& in : model.module(i).input()) {
      if (!data.count(in) && !by_name.count(in)) {
        bool later = false;
        for (int j = i + 1; j < model.module_size(); ++j) later = later || model.module(j).name() == in;
        if (!later) {
          std::vector<std::string> names;
          for (const auto& [n, p] : data) names.push_back(n);
          throw std::invalid_argument(fmt::format(
              "{}: input '{}' is provided by no node set, edge set or module (the dataset offers {})",
              module_label(model, i), in, fmt::join(names, ", ")));
        }
      }
    }
  }
  // Modules of one parameter scope apply the same parameters: one kind and
  // configuration (their names, inputs and scope aside).
  std::map<std::string, int> by_scope;
  const auto configuration = [&](int i) {
    proto::Module m = model.module(i);
    m.clear_name();
    m.clear_input();
    m.clear_params();
    return m.SerializeAsString();
  };
  for (int i = 0; i < model.module_size(); ++i) {
    const proto::Module& m = model.module(i);
    const std::string& scope = param_scope(m);
    const auto [first, fresh] = by_scope.emplace(scope, i);
    if (!fresh && configuration(first->second) != configuration(i)) {
      throw std::invalid_argument(fmt::format(
          "{}: shares the parameters '{}' with model.module '{}', which is of another kind or configuration",
          module_label(model, i), scope, model.module(first->second).name()));
    }
  }
  // Depth-first, in job order: each module after its inputs; a module met
  // again while on the path closes a cycle.
  std::vector<int> order, state(static_cast<size_t>(model.module_size()), 0);  // 0 new, 1 on path, 2 done
  std::vector<int> path;
  const std::function<void(int)> visit = [&](int i) {
    if (state[i] == 2) return;
    if (state[i] == 1) {
      std::vector<std::string> cycle;
      for (auto it = std::find(path.begin(), path.end(), i); it != path.end(); ++it) cycle.push_back(model.module(*it).name());
      cycle.push_back(model.module(i).name());
      throw std::invalid_argument(fmt::format("model: the modules form a cycle: {}", fmt::join(cycle, " -> ")));
    }
    state[i] = 1;
    path.push_back(i);
    for (const std::string& in : model.module(i).input()) {
      if (const auto found = by_name.find(in); found != by_name.end()) visit(found->second);
    }
    path.pop_back();
    state[i] = 2;
    order.push_back(i);
  };
  for (int i = 0; i < model.module_size(); ++i) visit(i);
  return order;
}

Network build_module_train_step(const proto::Model& model, const Schema& schema, const BucketShape& shape,
                                bool replicated) {
  module_order(model, schema);  // a bad module is named before a missing loss
  if (model.loss_term_size() == 0) throw std::invalid_argument("model: a module graph needs a loss_term");
  return ModuleGraphBuilder("train_step", model, schema, shape, true, replicated).train_step();
}

std::map<std::string, Port> module_ports(const proto::Model& model, const Schema& schema, const BucketShape& shape) {
  return ModuleGraphBuilder("ports", model, schema, shape, false, false).ports();
}

Network build_module_inference(const proto::Model& model, const Schema& schema, const BucketShape& shape,
                               bool replicated, const std::vector<std::string>& outputs) {
  return ModuleGraphBuilder("infer", model, schema, shape, false, replicated).inference(outputs);
}

Network build_split_inference(const proto::Model& model, const Schema& schema, const BucketShape& shape,
                              AggregationSplit& split, const std::vector<std::string>& outputs) {
  const bool messages = split.part == AggregationSplit::Part::kMessages;
  ModuleGraphBuilder builder(messages ? "messages" : "transform", model, schema, shape, false, false, &split);
  Network n = messages ? builder.forward_only() : builder.inference(outputs);
  if (!split.found) throw std::invalid_argument("model: no convolution to split at its aggregation");
  return n;
}

}  // namespace gnnrt::model
