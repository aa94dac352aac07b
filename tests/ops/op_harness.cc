#include "tests/ops/op_harness.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>

#include "runtime/autodiff.h"
#include "runtime/builder.h"
#include "runtime/core.h"

namespace gnnrt::testing {

namespace fs = std::filesystem;
using runtime::Builder;
using runtime::Core;
using runtime::kNoValue;
using runtime::ValueId;

Case Case::load(const fs::path& dir) {
  Case c;
  c.dir = dir;
  std::ifstream in(dir / "meta.json");
  c.meta = nlohmann::json::parse(in);
  c.op = c.meta.at("op");
  c.name = dir.parent_path().filename().string() + "/" + dir.filename().string();
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".npy") {
      c.arrays.emplace(entry.path().stem().string(), read_npy(entry.path()));
    }
  }
  return c;
}

const Tensor& Case::array(const std::string& key) const {
  const auto it = arrays.find(key);
  if (it == arrays.end()) throw std::runtime_error(name + ": no array " + key);
  return it->second;
}

const nlohmann::json& Case::param(const std::string& key) const {
  return meta.at("params").at(key);
}

bool Case::has_param(const std::string& key) const { return meta.at("params").contains(key); }

std::vector<fs::path> find_cases(const fs::path& root) {
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.path().filename() == "meta.json") dirs.push_back(entry.path().parent_path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

namespace {

// What one case builds: its program's inputs, graphs and outputs, and how
// to run it.
template <typename T>
class Build {
 public:
  Build(const Case& c, const Values<T>& inputs) : c_(c), inputs_(inputs), b("harness." + c.op, dtype_of<T>()) {}

  const Case& c() const { return c_; }
  double p(const std::string& key) const { return c_.param(key).get<double>(); }
  int64_t n(const std::string& key) const { return c_.param(key).get<int64_t>(); }
  std::string s(const std::string& key) const { return c_.param(key).get<std::string>(); }
  ops::Reduce reduce() const { return ops::parse_reduce(s("reduce")); }

  // A float input of the case (the values run_op was given).
  ValueId x(const std::string& name) {
    const ValueId v = b.input(name, dtype_of<T>(), c_.array(name).shape());
    bind(name, Tensor::from<T>(inputs_.at(name), c_.array(name).shape()));
    float_inputs_[name] = v;
    return v;
  }
  // An integer or boolean input of the case, converted to `dtype`.
  ValueId ints(const std::string& name, DType dtype, const std::string& as = "") {
    const std::string bound = as.empty() ? name : as;
    const ValueId v = b.input(bound, dtype, c_.array(name).shape());
    bind(bound, c_.array(name).cast(dtype));
    return v;
  }
  void bind(const std::string& name, Tensor t) { tensors_[name] = std::move(t); }

  // A graph with edges src -> dst; an empty span means every edge's
  // endpoint on that side is node 0 (a scatter's sources, a gather's
  // destinations).
  int32_t graph(const std::string& src, const std::string& dst, int64_t num_src, int64_t num_dst) {
    const int64_t edges = c_.array(src.empty() ? dst : src).size();
    const auto ids = [&](const std::string& key) {
      return key.empty() ? std::vector<int32_t>(static_cast<size_t>(edges), 0)
                         : c_.array(key).to_vector<int32_t>();
    };
    std::string name = "g";
    name += std::to_string(graphs_.size());
    graphs_.emplace_back(name, std::make_shared<const Core::Adjacency>(
                                   Core::Adjacency::build(ids(src), ids(dst), num_src, num_dst)));
    return b.graph(name, num_src, num_dst, edges);
  }
  const std::string& graph_name(int32_t g) const { return graphs_.at(static_cast<size_t>(g)).first; }

  void out(const std::string& name, ValueId v) {
    if (v != kNoValue) outputs_[name] = v;
  }
  // A result read from the core's resident tensors after the runs.
  void state_out(const std::string& name) { state_outputs_.push_back(name); }
  // Runs `steps` times; step k binds `per_step(k)` first.
  void repeat(int steps, std::function<void(Core&, int)> per_step) {
    steps_ = steps;
    per_step_ = std::move(per_step);
  }
  void context(runtime::RunContext rc) { context_ = rc; }

  Values<T> run(const Values<T>* upstream);

 private:
  const Case& c_;
  const Values<T>& inputs_;

 public:
  Builder b;

 private:
  std::map<std::string, Tensor> tensors_;
  std::vector<std::pair<std::string, std::shared_ptr<const Core::Adjacency>>> graphs_;
  std::map<std::string, ValueId> float_inputs_, outputs_;
  std::vector<std::string> state_outputs_;
  int steps_ = 1;
  std::function<void(Core&, int)> per_step_;
  runtime::RunContext context_{};
};

template <typename T>
Values<T> Build<T>::run(const Values<T>* upstream) {
  std::map<std::string, ValueId> grads;
  if (upstream != nullptr && !c_.meta.at("grads").empty()) {
    std::vector<ValueId> outs, seeds, wrt;
    for (const auto& [name, values] : *upstream) {
      const ValueId o = outputs_.at(name);
      const auto shape = b.program().value(o).shape;
      const ValueId seed = b.input("seed." + name, dtype_of<T>(), shape);
      bind("seed." + name, Tensor::from<T>(values, shape));
      outs.push_back(o);
      seeds.push_back(seed);
    }
    std::vector<std::string> names;
    for (const std::string g : c_.meta.at("grads")) {
      names.push_back(g);
      wrt.push_back(float_inputs_.at(g.substr(5)));
    }
    const auto got = runtime::append_backward(b, outs, seeds, wrt);
    for (size_t i = 0; i < names.size(); ++i) grads[names[i]] = got[i];
  }
  for (const auto& [name, v] : outputs_) b.output(v);
  for (const auto& [name, v] : grads) {
    if (v != kNoValue) b.output(v);
  }
  const runtime::Program program = b.take();
  Core core(runtime::DeviceProfile::named("trn1"), {});
  for (const auto& [name, adj] : graphs_) core.bind_graph(name, adj);
  for (const auto& [name, t] : tensors_) core.memory().put(name, t);
  const auto compiled = core.compile(program, {});
  for (int k = 0; k < steps_; ++k) {
    if (per_step_) per_step_(core, k);
    runtime::RunContext rc = context_;
    if (steps_ > 1 || per_step_) rc.step = k + 1;
    core.run(*compiled, rc);
  }
  Values<T> r;
  const auto read = [&](ValueId v) { return core.read(*compiled, v).template to_vector<T>(); };
  for (const auto& [name, v] : outputs_) r[name] = read(v);
  for (const std::string& name : state_outputs_) r[name] = core.read(name).template to_vector<T>();
  for (const auto& [name, v] : grads) {
    // A gradient the outputs do not depend on is zero, as torch reports it.
    const auto& in = c_.array(name.substr(5));
    r[name] = v == kNoValue ? std::vector<T>(static_cast<size_t>(in.size()), T(0)) : read(v);
  }
  return r;
}

template <typename T>
using Recipe = std::function<void(Build<T>&)>;

// One entry per op: how its case becomes builder calls. The names of inputs,
// outputs and parameters are make_golden.py's.
template <typename T>
const std::map<std::string, Recipe<T>>& recipes() {
  static const std::map<std::string, Recipe<T>> table = {
      {"scatter",
       [](Build<T>& t) {
         const int32_t g = t.graph("", "index", 1, t.n("num_rows"));
         const auto [out, arg] = t.b.scatter(t.reduce(), g, t.x("src"));
         t.out("out", out);
         t.out("arg", arg);
       }},
      {"gather",
       [](Build<T>& t) {
         const int32_t g = t.graph("index", "", t.n("num_rows"), 1);
         t.out("out", t.b.gather(g, t.x("x")));
       }},
      {"spmm",
       [](Build<T>& t) {
         const int32_t g = t.graph("src", "dst", t.n("num_src"), t.n("num_dst"));
         const ValueId w = t.c().has("weight") ? t.x("weight") : kNoValue;
         const auto [out, arg] = t.b.spmm(t.reduce(), g, t.x("x"), w);
         t.out("out", out);
         t.out("arg", arg);
       }},
      {"sddmm_dot",
       [](Build<T>& t) {
         const int32_t g = t.graph("src", "dst", t.n("num_src"), t.n("num_dst"));
         t.out("out", t.b.sddmm_dot(g, t.x("a"), t.x("b"), t.n("heads")));
       }},
      {"edge_head_dot",
       [](Build<T>& t) {
         const int32_t g = t.graph("src", "dst", t.n("num_src"), t.n("num_dst"));
         t.out("out", t.b.edge_head_dot(g, t.x("a"), t.x("r"), t.n("heads")));
       }},
      {"head_scatter",
       [](Build<T>& t) {
         const int32_t g = t.graph("src", "dst", t.n("num_src"), t.n("num_dst"));
         t.out("out", t.b.head_scatter(g, t.x("w"), t.x("r")));
       }},
      {"head_gather",
       [](Build<T>& t) {
         const int32_t g = t.graph("src", "dst", t.n("num_src"), t.n("num_dst"));
         t.out("out", t.b.head_gather(g, t.x("w"), t.x("a")));
       }},
      {"reshape",
       [](Build<T>& t) { t.out("out", t.b.reshape(t.x("x"), t.c().param("shape").template get<std::vector<int64_t>>())); }},
      {"head_matmul",
       [](Build<T>& t) {
         t.out("out", t.b.head_matmul(t.x("x"), t.x("w"), t.n("heads"), t.c().param("trans_w")));
       }},
      {"sddmm_add",
       [](Build<T>& t) {
         const int32_t g = t.graph("src", "dst", t.n("num_src"), t.n("num_dst"));
         t.out("out", t.b.sddmm_add(g, t.x("a"), t.x("b")));
       }},
      {"segment_softmax",
       [](Build<T>& t) {
         const int32_t g = t.graph("", "index", 1, t.n("num_rows"));
         t.out("alpha", t.b.segment_softmax(g, t.x("score")));
       }},
      {"attention_softmax",
       [](Build<T>& t) {
         const int32_t g = t.graph("src", "dst", t.n("num_src"), t.n("num_dst"));
         t.out("alpha", t.b.attention_softmax(g, t.x("a"), t.x("b"), t.p("negative_slope")));
       }},
      {"segment_max",
       [](Build<T>& t) {
         const int32_t g = t.graph("", "index", 1, t.n("num_rows"));
         t.out("m", t.b.segment_max(g, t.x("score")));
       }},
      {"segment_exp_sum",
       [](Build<T>& t) {
         const int32_t g = t.graph("", "index", 1, t.n("num_rows"));
         t.out("s", t.b.segment_exp_sum(g, t.x("score"), t.x("m")));
       }},
      {"segment_softmax_apply",
       [](Build<T>& t) {
         const int32_t g = t.graph("", "index", 1, t.n("num_rows"));
         t.out("alpha", t.b.segment_softmax_apply(g, t.x("score"), t.x("m"), t.x("s")));
       }},
      {"matmul",
       [](Build<T>& t) {
         t.out("c", t.b.matmul(t.x("a"), t.x("b"), t.c().param("trans_a"), t.c().param("trans_b")));
       }},
      {"add", [](Build<T>& t) { t.out("out", t.b.add(t.x("a"), t.x("b"))); }},
      {"mul", [](Build<T>& t) { t.out("out", t.b.mul(t.x("a"), t.x("b"))); }},
      {"scale", [](Build<T>& t) { t.out("out", t.b.scale(t.x("x"), t.p("alpha"))); }},
      {"fill",
       [](Build<T>& t) {
         t.out("out", t.b.fill(t.c().param("shape").template get<std::vector<int64_t>>(), t.p("value")));
       }},
      {"bias_add", [](Build<T>& t) { t.out("out", t.b.bias_add(t.x("x"), t.x("bias"))); }},
      {"relu", [](Build<T>& t) { t.out("out", t.b.relu(t.x("x"))); }},
      {"leaky_relu",
       [](Build<T>& t) { t.out("out", t.b.leaky_relu(t.x("x"), t.p("negative_slope"))); }},
      {"elu", [](Build<T>& t) { t.out("out", t.b.elu(t.x("x"), t.p("alpha"))); }},
      {"concat", [](Build<T>& t) { t.out("out", t.b.concat({t.x("a"), t.x("b"), t.x("c")})); }},
      {"slice_cols",
       [](Build<T>& t) { t.out("out", t.b.slice_cols(t.x("x"), t.c().param("begin"), t.c().param("width"))); }},
      {"sigmoid", [](Build<T>& t) { t.out("out", t.b.activation(t.x("x"), ops::Activation::kSigmoid)); }},
      {"silu", [](Build<T>& t) { t.out("out", t.b.activation(t.x("x"), ops::Activation::kSilu)); }},
      {"gelu_tanh", [](Build<T>& t) { t.out("out", t.b.activation(t.x("x"), ops::Activation::kGeluTanh)); }},
      {"exp", [](Build<T>& t) { t.out("out", t.b.activation(t.x("x"), ops::Activation::kExp)); }},
      {"tanh", [](Build<T>& t) { t.out("out", t.b.activation(t.x("x"), ops::Activation::kTanh)); }},
      {"abs", [](Build<T>& t) { t.out("out", t.b.activation(t.x("x"), ops::Activation::kAbs)); }},
      {"clip",
       [](Build<T>& t) { t.out("out", t.b.activation(t.x("x"), ops::Activation::kClip, t.p("bound"))); }},
      {"log_softmax", [](Build<T>& t) { t.out("out", t.b.log_softmax(t.x("x"))); }},
      {"nll_loss",
       [](Build<T>& t) {
         t.out("loss", t.b.nll_loss(t.x("log_prob"), t.ints("labels", DType::kI64),
                                    t.ints("mask", DType::kBool)));
       }},
      {"cross_entropy",
       [](Build<T>& t) {
         t.out("loss", t.b.cross_entropy(t.x("x"), t.ints("labels", DType::kI64),
                                         t.ints("mask", DType::kBool)));
       }},
      {"l1_loss",
       [](Build<T>& t) {
         t.out("loss", t.b.l1_loss(t.x("pred"), t.x("target"), t.ints("mask", DType::kBool)));
       }},
      {"bce_with_logits",
       [](Build<T>& t) {
         t.out("loss", t.b.bce_with_logits(t.x("pred"), t.x("target"), t.ints("mask", DType::kBool)));
       }},
      {"mean_loss",
       [](Build<T>& t) {
         t.out("loss", t.b.mean_loss(t.x("pred"), t.x("target"), t.ints("mask", DType::kBool)));
       }},
      {"mse_loss",
       [](Build<T>& t) {
         t.out("loss", t.b.mse_loss(t.x("pred"), t.x("target"), t.ints("mask", DType::kBool)));
       }},
      {"dropout",
       [](Build<T>& t) {
         const ValueId x = t.x("x");
         if (t.c().has("global_rows")) {
           // Rows keyed by global ids: the form a rank of a partitioned graph runs.
           t.b.partition(t.b.rows(x));
           t.ints("global_rows", DType::kI64, runtime::kNodeGlobalId);
         }
         t.out("out", t.b.dropout(x, t.p("p"), t.n("op")));
         t.context({.step = t.n("step"), .lr = 0, .seed = t.c().param("seed").template get<uint64_t>()});
       }},
      {"sparse_matmul",
       [](Build<T>& t) {
         // X [num_rows, num_cols]: entry e at row dst[e], column src[e].
         const int32_t g = t.graph("src", "dst", t.n("num_cols"), t.n("num_rows"));
         t.out("out", t.b.sparse_matmul(g, t.x("values"), t.x("b"), t.c().param("trans_b")));
       }},
      {"sparse_dropout",
       [](Build<T>& t) {
         const int32_t g = t.graph("src", "dst", t.n("num_cols"), t.n("num_rows"));
         if (t.c().has("global_rows")) {
           t.b.partition(t.n("num_rows"));
           t.ints("global_rows", DType::kI64, runtime::kNodeGlobalId);
         }
         t.out("out", t.b.sparse_dropout(g, t.x("values"), t.p("p"), t.n("op")));
         t.context({.step = t.n("step"), .lr = 0, .seed = t.c().param("seed").template get<uint64_t>()});
       }},
      {"head_dot", [](Build<T>& t) { t.out("out", t.b.head_dot(t.x("x"), t.x("att"), t.n("heads"))); }},
      {"head_mean", [](Build<T>& t) { t.out("out", t.b.head_mean(t.x("x"), t.n("heads"))); }},
      {"edge_scale", [](Build<T>& t) { t.out("out", t.b.edge_scale(t.x("messages"), t.x("weight"))); }},
      {"layer_norm",
       [](Build<T>& t) {
         t.out("out", t.b.layer_norm(t.x("x"), t.x("weight"), t.x("bias"), t.c().param("per_node"),
                                     t.p("eps")));
       }},
      {"layer_norm_moments",
       [](Build<T>& t) {
         const ValueId mask = t.c().has("mask") ? t.ints("mask", DType::kBool) : kNoValue;
         t.out("moments", t.b.layer_norm_moments(t.x("x"), mask));
       }},
      {"gcn_norm",
       [](Build<T>& t) {
         const int64_t n = t.n("num_nodes");
         const int32_t g = t.graph("src", "dst", n, n);
         if (t.c().has("degree")) {
           // Given degrees: the form a rank of a partitioned graph runs.
           t.b.partition(n);
           t.ints("degree", DType::kI64, runtime::in_degree_name(t.graph_name(g)));
         }
         t.out("weight", t.b.gcn_norm(g));
       }},
      {"divide_rows",
       [](Build<T>& t) { t.out("out", t.b.divide_rows(t.x("x"), t.ints("degree", DType::kI64))); }},
      {"keep_winners",
       [](Build<T>& t) {
         const int32_t g = t.graph("src", "dst", t.n("num_src"), t.n("num_dst"));
         t.out("out", t.b.keep_winners(g, t.x("g"), t.ints("arg", DType::kI32)));
       }},
      {"count_correct",
       [](Build<T>& t) {
         const ValueId metrics = t.b.state("metrics", DType::kF64, {2});
         t.b.count_correct(metrics, t.x("log_prob"), t.ints("labels", DType::kI64),
                           t.ints("mask", DType::kBool), 0);
         t.state_out("metrics");
       }},
      {"accumulate",
       [](Build<T>& t) {
         const int64_t slots = t.n("slots");
         const ValueId metrics = t.b.state("metrics", DType::kF64, {slots});
         t.bind("metrics", t.c().array("metrics_before").cast(DType::kF64));
         t.b.accumulate(metrics, t.x("scalar"), t.n("slot"));
         t.state_out("metrics");
       }},
      {"adam_update",
       [](Build<T>& t) {
         // The step's grad and lr change per run, as in training.
         const auto& grads = t.c().array("grads");
         std::vector<int64_t> shape(grads.shape().begin() + 1, grads.shape().end());
         const ValueId param = t.b.parameter("param", shape);
         t.bind("param", Tensor::from<T>(t.c().array("param_init").template to_vector<T>(), shape));
         const ValueId grad = t.b.input("grad", dtype_of<T>(), shape);
         const ValueId m = t.b.state("param.exp_avg", dtype_of<T>(), shape);
         const ValueId v = t.b.state("param.exp_avg_sq", dtype_of<T>(), shape);
         runtime::OpAttrs hyper;
         hyper.set_beta1(t.p("beta1"));
         hyper.set_beta2(t.p("beta2"));
         hyper.set_eps(t.p("eps"));
         hyper.set_weight_decay(t.p("weight_decay"));
         hyper.set_decoupled(t.c().param("decoupled").template get<bool>());
         t.b.adam_update(param, grad, m, v, hyper);
         for (const char* s : {"param", "param.exp_avg", "param.exp_avg_sq"}) t.state_out(s);
         t.repeat(static_cast<int>(grads.shape()[0]), [&t, shape](Core& core, int k) {
           const auto all = t.c().array("grads").template to_vector<T>();
           const auto n = static_cast<size_t>(element_count(shape));
           core.memory().put("grad", Tensor::from<T>(std::span(all).subspan(k * n, n), shape));
           t.context({.step = 1, .lr = t.c().param("lr").at(k).template get<double>(), .seed = 0});
         });
       }},
      {"sgd_update",
       [](Build<T>& t) {
         const auto& grads = t.c().array("grads");
         std::vector<int64_t> shape(grads.shape().begin() + 1, grads.shape().end());
         const ValueId param = t.b.parameter("param", shape);
         t.bind("param", Tensor::from<T>(t.c().array("param_init").template to_vector<T>(), shape));
         const ValueId grad = t.b.input("grad", dtype_of<T>(), shape);
         const ValueId buf = t.b.state("param.momentum_buffer", dtype_of<T>(), shape);
         runtime::OpAttrs hyper;
         hyper.set_momentum(t.p("momentum"));
         hyper.set_nesterov(t.c().param("nesterov").template get<bool>());
         hyper.set_weight_decay(t.p("weight_decay"));
         t.b.sgd_update(param, grad, buf, hyper);
         t.state_out("param");
         if (t.p("momentum") != 0) t.state_out("param.momentum_buffer");
         t.repeat(static_cast<int>(grads.shape()[0]), [&t, shape](Core& core, int k) {
           const auto all = t.c().array("grads").template to_vector<T>();
           const auto n = static_cast<size_t>(element_count(shape));
           core.memory().put("grad", Tensor::from<T>(std::span(all).subspan(k * n, n), shape));
           t.context({.step = 1, .lr = t.c().param("lr").at(k).template get<double>(), .seed = 0});
         });
       }},
  };
  return table;
}

}  // namespace

std::vector<std::string> harness_ops() {
  std::vector<std::string> names;
  for (const auto& [name, recipe] : recipes<float>()) names.push_back(name);
  return names;
}

template <typename T>
Values<T> float_inputs(const Case& c) {
  Values<T> v;
  for (const std::string k : c.meta.at("inputs")) {
    if (is_floating(c.array(k).dtype())) v[k] = c.array(k).to_vector<T>();
  }
  return v;
}

template <typename T>
Values<T> upstream_gradients(const Case& c) {
  Values<T> v;
  for (const std::string k : c.meta.at("grad_outputs")) v[k.substr(5)] = c.array(k).to_vector<T>();
  if (v.empty()) v[c.meta.at("outputs")[0]] = {T(1)};
  return v;
}

template <typename T>
Values<T> run_op(const Case& c, const Values<T>& inputs, const Values<T>* upstream) {
  const auto& table = recipes<T>();
  const auto it = table.find(c.op);
  if (it == table.end()) throw std::runtime_error(c.name + ": no recipe for op " + c.op);
  Build<T> build(c, inputs);
  it->second(build);
  return build.run(upstream);
}

template Values<float> float_inputs<float>(const Case&);
template Values<double> float_inputs<double>(const Case&);
template Values<float> upstream_gradients<float>(const Case&);
template Values<double> upstream_gradients<double>(const Case&);
template Values<float> run_op<float>(const Case&, const Values<float>&, const Values<float>*);
template Values<double> run_op<double>(const Case&, const Values<double>&, const Values<double>*);

}  // namespace gnnrt::testing
