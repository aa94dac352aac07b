#include "tests/ops/op_harness.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "ops/csr.h"
#include "ops/dense.h"
#include "ops/dropout.h"
#include "ops/gather.h"
#include "ops/reduce.h"
#include "ops/scatter.h"
#include "ops/sddmm.h"
#include "ops/segment_softmax.h"
#include "ops/spmm.h"

namespace gnnrt::testing {

namespace fs = std::filesystem;
using namespace gnnrt::ops;

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

std::vector<fs::path> find_cases(const fs::path& root) {
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.path().filename() == "meta.json") dirs.push_back(entry.path().parent_path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

namespace {

bool is_float(DType d) { return d == DType::kF32 || d == DType::kF64; }

template <typename T>
std::vector<T> converted(const Tensor& a) {
  return a.to_vector<T>();
}

// Calls fn(span<const I>...) with the case's index arrays as their own dtype.
template <typename Fn>
auto with_indices(const Case& c, std::initializer_list<const char*> keys, Fn fn) {
  const DType d = c.array(*keys.begin()).dtype();
  for (const char* k : keys) {
    if (c.array(k).dtype() != d) throw std::runtime_error(c.name + ": index dtypes differ");
  }
  auto call = [&]<typename I>() {
    std::vector<std::span<const I>> spans;
    for (const char* k : keys) spans.push_back(c.array(k).values<I>());
    return fn(spans);
  };
  if (d == DType::kI32) return call.template operator()<int32_t>();
  if (d == DType::kI64) return call.template operator()<int64_t>();
  throw std::runtime_error(c.name + ": index is not int32/int64");
}

template <typename T, typename I>
std::vector<T> as_values(const std::vector<I>& ints) {
  return std::vector<T>(ints.begin(), ints.end());
}

template <typename T>
std::span<const T> get(const Values<T>& v, const std::string& key) {
  const auto it = v.find(key);
  if (it == v.end()) return {};
  return it->second;
}

template <typename T>
Values<T> run_scatter(const Case& c, const Values<T>& in, const Values<T>* up) {
  const Reduce reduce = parse_reduce(c.param("reduce").get<std::string>());
  const int64_t n = c.param("num_rows"), f = c.param("features");
  return with_indices(c, {"index"}, [&]<typename I>(const std::vector<std::span<const I>>& idx) {
    const auto seg = Csr<I>::build(idx[0], n);
    Values<T> r;
    std::vector<T> out(n * f);
    std::vector<I> arg(has_arg(reduce) ? n * f : 0);
    scatter_forward<T, I>(reduce, seg, f, get(in, "src"), out, arg, ScatterPath::kCsrWalk);
    // Every case also runs the streaming path and scatter's own choice, which
    // must give the walk's bits (up to a NaN's sign).
    for (ScatterPath path : {ScatterPath::kStreaming, ScatterPath::kAuto}) {
      std::vector<T> other(out.size(), T(-7));
      std::vector<I> other_arg(arg.size(), I(-7));
      scatter_forward<T, I>(reduce, seg, f, get(in, "src"), other, other_arg, path);
      if (first_difference<T>(out, other) >= 0 || arg != other_arg) {
        throw std::runtime_error(c.name + ": scatter's " +
                                 (path == ScatterPath::kAuto ? "automatic" : "streaming") +
                                 " path differs from its CSR walk");
      }
    }
    r["out"] = out;
    if (has_arg(reduce)) r["arg"] = as_values<T>(arg);
    if (up) {
      std::vector<T> grad(seg.num_edges() * f);
      scatter_backward<T, I>(reduce, seg, f, get(*up, "out"), arg, grad);
      r["grad_src"] = grad;
    }
    return r;
  });
}

template <typename T>
Values<T> run_gather(const Case& c, const Values<T>& in, const Values<T>* up) {
  const int64_t n = c.param("num_rows"), f = c.param("features");
  return with_indices(c, {"index"}, [&]<typename I>(const std::vector<std::span<const I>>& idx) {
    const auto seg = Csr<I>::build(idx[0], n);
    Values<T> r;
    std::vector<T> out(seg.num_edges() * f);
    gather_forward<T, I>(seg, f, get(in, "x"), out);
    r["out"] = out;
    if (up) {
      std::vector<T> grad(n * f);
      gather_backward<T, I>(seg, f, get(*up, "out"), grad);
      r["grad_x"] = grad;
    }
    return r;
  });
}

template <typename T>
Values<T> run_spmm(const Case& c, const Values<T>& in, const Values<T>* up) {
  const Reduce reduce = parse_reduce(c.param("reduce").get<std::string>());
  const int64_t ns = c.param("num_src"), nd = c.param("num_dst"), f = c.param("features");
  return with_indices(c, {"src", "dst"}, [&]<typename I>(const std::vector<std::span<const I>>& idx) {
    const auto adj = Adjacency<I>::build(idx[0], idx[1], ns, nd);
    const auto weight = get(in, "weight");
    Values<T> r;
    std::vector<T> out(nd * f);
    std::vector<I> arg(has_arg(reduce) ? nd * f : 0);
    spmm_forward<T, I>(reduce, adj, f, get(in, "x"), weight, out, arg);
    r["out"] = out;
    if (has_arg(reduce)) r["arg"] = as_values<T>(arg);
    if (up) {
      std::vector<T> grad_x(ns * f), grad_w(weight.size());
      spmm_backward<T, I>(reduce, adj, f, get(in, "x"), weight, get(*up, "out"), arg, grad_x,
                          grad_w);
      r["grad_x"] = grad_x;
      if (c.has("weight")) r["grad_weight"] = grad_w;
    }
    return r;
  });
}

template <typename T>
Values<T> run_sddmm(const Case& c, const Values<T>& in, const Values<T>* up) {
  const int64_t ns = c.param("num_src"), nd = c.param("num_dst"), h = c.param("heads");
  const bool dot = c.op == "sddmm_dot";
  const int64_t f = dot ? c.param("features").get<int64_t>() : h;
  return with_indices(c, {"src", "dst"}, [&]<typename I>(const std::vector<std::span<const I>>& idx) {
    const auto adj = Adjacency<I>::build(idx[0], idx[1], ns, nd);
    Values<T> r;
    std::vector<T> out(adj.num_edges() * h);
    if (dot) {
      sddmm_dot_forward<T, I>(adj, f, h, get(in, "a"), get(in, "b"), out);
    } else {
      sddmm_add_forward<T, I>(adj, h, get(in, "a"), get(in, "b"), out);
    }
    r["out"] = out;
    if (up) {
      std::vector<T> ga(ns * f), gb(nd * f);
      if (dot) {
        sddmm_dot_backward<T, I>(adj, f, h, get(in, "a"), get(in, "b"), get(*up, "out"), ga, gb);
      } else {
        sddmm_add_backward<T, I>(adj, h, get(*up, "out"), ga, gb);
      }
      r["grad_a"] = ga;
      r["grad_b"] = gb;
    }
    return r;
  });
}

template <typename T>
Values<T> run_segment_softmax(const Case& c, const Values<T>& in, const Values<T>* up) {
  const int64_t n = c.param("num_rows"), h = c.param("heads");
  return with_indices(c, {"index"}, [&]<typename I>(const std::vector<std::span<const I>>& idx) {
    const auto seg = Csr<I>::build(idx[0], n);
    Values<T> r;
    std::vector<T> alpha(seg.num_edges() * h);
    segment_softmax_forward<T, I>(seg, h, get(in, "score"), alpha);
    r["alpha"] = alpha;
    if (up) {
      std::vector<T> grad(alpha.size());
      segment_softmax_backward<T, I>(seg, h, alpha, get(*up, "alpha"), grad);
      r["grad_score"] = grad;
    }
    return r;
  });
}

template <typename T>
Values<T> run_matmul(const Case& c, const Values<T>& in, const Values<T>* up) {
  const int64_t m = c.param("m"), k = c.param("k"), n = c.param("n");
  const bool ta = c.param("trans_a"), tb = c.param("trans_b");
  Values<T> r;
  std::vector<T> out(m * n);
  matmul<T>(get(in, "a"), get(in, "b"), out, m, k, n, ta, tb);
  r["c"] = out;
  if (up) {
    const auto g = get(*up, "c");
    std::vector<T> ga(m * k), gb(k * n);
    // d op(a) = g op(b)^T and d op(b) = op(a)^T g; a stored transposed
    // (trans_a) gets the transpose of its gradient, and likewise b.
    if (ta) {
      matmul<T>(get(in, "b"), g, ga, k, n, m, tb, true);  // op(b) g^T
    } else {
      matmul<T>(g, get(in, "b"), ga, m, n, k, false, !tb);  // g op(b)^T
    }
    if (tb) {
      matmul<T>(g, get(in, "a"), gb, n, m, k, true, ta);  // g^T op(a)
    } else {
      matmul<T>(get(in, "a"), g, gb, k, m, n, !ta, false);  // op(a)^T g
    }
    r["grad_a"] = ga;
    r["grad_b"] = gb;
  }
  return r;
}

template <typename T>
Values<T> run_bias_add(const Case& c, const Values<T>& in, const Values<T>* up) {
  const int64_t rows = c.param("rows"), cols = c.param("cols");
  Values<T> r;
  std::vector<T> out(rows * cols);
  bias_add_forward<T>(get(in, "x"), get(in, "bias"), out, rows, cols);
  r["out"] = out;
  if (up) {
    r["grad_x"] = std::vector<T>(get(*up, "out").begin(), get(*up, "out").end());
    std::vector<T> gb(cols);
    bias_add_backward<T>(get(*up, "out"), rows, cols, gb);
    r["grad_bias"] = gb;
  }
  return r;
}

template <typename T>
Values<T> run_activation(const Case& c, const Values<T>& in, const Values<T>* up) {
  const auto x = get(in, "x");
  Values<T> r;
  std::vector<T> out(x.size()), grad(x.size());
  if (c.op == "relu") {
    relu_forward<T>(x, out);
    if (up) relu_backward<T>(x, get(*up, "out"), grad);
  } else if (c.op == "leaky_relu") {
    const T slope = c.param("negative_slope").get<double>();
    leaky_relu_forward<T>(x, slope, out);
    if (up) leaky_relu_backward<T>(x, slope, get(*up, "out"), grad);
  } else {
    const T alpha = c.param("alpha").get<double>();
    elu_forward<T>(x, alpha, out);
    if (up) elu_backward<T>(x, alpha, get(*up, "out"), grad);
  }
  r["out"] = out;
  if (up) r["grad_x"] = grad;
  return r;
}

template <typename T>
Values<T> run_log_softmax(const Case& c, const Values<T>& in, const Values<T>* up) {
  const int64_t rows = c.param("rows"), cols = c.param("cols");
  Values<T> r;
  std::vector<T> out(rows * cols);
  log_softmax_forward<T>(get(in, "x"), rows, cols, out);
  r["out"] = out;
  if (up) {
    std::vector<T> grad(out.size());
    log_softmax_backward<T>(out, get(*up, "out"), rows, cols, grad);
    r["grad_x"] = grad;
  }
  return r;
}

template <typename T>
Values<T> run_nll_loss(const Case& c, const Values<T>& in, const Values<T>* up) {
  const int64_t rows = c.param("rows"), classes = c.param("classes");
  const auto mask = c.array("mask").values<uint8_t>();
  return with_indices(c, {"labels"}, [&]<typename I>(const std::vector<std::span<const I>>& idx) {
    const LossSum loss = nll_loss_forward<T, I>(get(in, "log_prob"), rows, classes, idx[0], mask);
    Values<T> r;
    r["loss"] = {static_cast<T>(loss.sum / loss.count)};
    r["count"] = {static_cast<T>(loss.count)};
    if (up) {
      std::vector<T> grad(rows * classes);
      nll_loss_backward<T, I>(rows, classes, idx[0], mask, get(*up, "loss")[0] / T(loss.count),
                              grad);
      r["grad_log_prob"] = grad;
    }
    return r;
  });
}

template <typename T>
Values<T> run_dropout(const Case& c, const Values<T>& in, const Values<T>* up) {
  const DropoutKey key{c.param("seed"), c.param("step"), c.param("op")};
  const double p = c.param("p");
  const int64_t cols = c.param("cols");
  std::span<const int64_t> rows;
  if (c.has("global_rows")) rows = c.array("global_rows").values<int64_t>();
  const auto x = get(in, "x");
  Values<T> r;
  std::vector<T> out(x.size());
  dropout_forward<T>(key, p, cols, rows, x, out);
  r["out"] = out;
  if (up) {
    std::vector<T> grad(x.size());
    dropout_backward<T>(key, p, cols, rows, get(*up, "out"), grad);
    r["grad_x"] = grad;
  }
  return r;
}

}  // namespace

template <typename T>
Values<T> float_inputs(const Case& c) {
  Values<T> v;
  for (const std::string k : c.meta.at("inputs")) {
    if (is_float(c.array(k).dtype())) v[k] = converted<T>(c.array(k));
  }
  return v;
}

template <typename T>
Values<T> upstream_gradients(const Case& c) {
  Values<T> v;
  for (const std::string k : c.meta.at("grad_outputs")) v[k.substr(5)] = converted<T>(c.array(k));
  if (v.empty()) v[c.meta.at("outputs")[0]] = {T(1)};
  return v;
}

template <typename T>
Values<T> run_op(const Case& c, const Values<T>& inputs, const Values<T>* upstream) {
  using Runner = Values<T> (*)(const Case&, const Values<T>&, const Values<T>*);
  static const std::map<std::string, Runner> table = {
      {"scatter", run_scatter<T>},
      {"gather", run_gather<T>},
      {"spmm", run_spmm<T>},
      {"sddmm_dot", run_sddmm<T>},
      {"sddmm_add", run_sddmm<T>},
      {"segment_softmax", run_segment_softmax<T>},
      {"matmul", run_matmul<T>},
      {"bias_add", run_bias_add<T>},
      {"relu", run_activation<T>},
      {"leaky_relu", run_activation<T>},
      {"elu", run_activation<T>},
      {"log_softmax", run_log_softmax<T>},
      {"nll_loss", run_nll_loss<T>},
      {"dropout", run_dropout<T>},
  };
  const auto it = table.find(c.op);
  if (it == table.end()) throw std::runtime_error(c.name + ": no runner for op " + c.op);
  return it->second(c, inputs, upstream);
}

template Values<float> float_inputs<float>(const Case&);
template Values<double> float_inputs<double>(const Case&);
template Values<float> upstream_gradients<float>(const Case&);
template Values<double> upstream_gradients<double>(const Case&);
template Values<float> run_op<float>(const Case&, const Values<float>&, const Values<float>*);
template Values<double> run_op<double>(const Case&, const Values<double>&, const Values<double>*);

}  // namespace gnnrt::testing
