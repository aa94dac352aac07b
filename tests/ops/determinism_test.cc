// Every op is bitwise deterministic: the same inputs give the same bits run
// after run and with 1 or 2 OpenMP threads, forward and backward. The
// inputs are large enough (E = 200k edges, N = 20k nodes) that every kernel
// takes its parallel path. Each case is a golden case's op with synthetic
// arrays drawn from ops/rng.h; run through the same harness as the goldens.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "ops/csr.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/rng.h"
#include "ops/gather.h"
#include "ops/scatter.h"
#include "ops/sddmm.h"
#include "ops/segment_reduce.h"
#include "ops/segment_softmax.h"
#include "ops/sparse_matmul.h"
#include "ops/spmm.h"
#include "tests/ops/op_harness.h"

namespace gnnrt::testing {
namespace {

constexpr int64_t kEdges = 200000;
constexpr int64_t kNodes = 20000;

// A synthetic case of a golden case's op; every array is its own stream.
class Synthetic {
 public:
  explicit Synthetic(const std::string& golden_case) : c_(Case::load(golden_case)) {
    c_.arrays.clear();
    c_.name = "synthetic/" + c_.op;
    c_.meta["inputs"] = nlohmann::json::array();
  }
  const nlohmann::json& param(const std::string& k) const { return c_.meta.at("params").at(k); }
  Synthetic& param(const std::string& k, nlohmann::json v) {
    c_.meta["params"][k] = std::move(v);
    return *this;
  }
  Synthetic& floats(const std::string& k, std::vector<int64_t> shape, bool input = true) {
    Tensor a(DType::kF32, std::move(shape));
    auto v = a.values<float>();
    const uint64_t s = ++stream_;
    for (size_t i = 0; i < v.size(); i += 4) {
      const auto z = ops::normals(ops::philox(7, s, {i / 4, 0, 0, 0}));
      for (size_t j = 0; j < 4 && i + j < v.size(); ++j) v[i + j] = static_cast<float>(z[j]);
    }
    c_.arrays[k] = std::move(a);
    if (input) c_.meta["inputs"].push_back(k);
    return *this;
  }
  Synthetic& ints(const std::string& k, std::vector<int64_t> shape, int64_t bound) {
    Tensor a(DType::kI32, std::move(shape));
    const uint64_t s = ++stream_;
    auto v = a.values<int32_t>();
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<int32_t>(ops::below(ops::philox(7, s, {i, 0, 0, 0})[0], static_cast<uint64_t>(bound)));
    }
    c_.arrays[k] = std::move(a);
    c_.meta["inputs"].push_back(k);
    return *this;
  }
  Synthetic& mask(const std::string& k, int64_t n) { return ints(k, {n}, 2); }
  Synthetic& upstream(const std::string& output, std::vector<int64_t> shape) {
    return floats("grad_" + output, std::move(shape), false);
  }
  Case build() { return std::move(c_); }

 private:
  Case c_;
  uint64_t stream_ = 0;
};

std::filesystem::path golden(const std::string& case_path) {
  return std::filesystem::path(GNNRT_GOLDEN_DIR) / case_path;
}

struct Recipe {
  std::string name;
  std::function<Case()> build;
};

// Cheap to list (test discovery); each case is built only when its test runs.
const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> list = [] {
    const int64_t E = kEdges, N = kNodes, F = 16;
    std::vector<Recipe> r;
    const auto add = [&](std::string name, std::function<Case()> build) {
      r.push_back({std::move(name), std::move(build)});
    };
    for (const std::string reduce : {"sum", "mean", "max", "min"}) {
      add("scatter_" + reduce, [=] {
        return Synthetic(golden("scatter/" + reduce + "_random")).param("num_rows", N)
            .floats("src", {E, F}).ints("index", {E}, N).upstream("out", {N, F}).build();
      });
      add("spmm_" + reduce, [=] {
        return Synthetic(golden("spmm/" + reduce + "_wide")).param("num_src", N).param("num_dst", N)
            .floats("x", {N, F}).floats("weight", {E, 2}).ints("src", {E}, N).ints("dst", {E}, N)
            .upstream("out", {N, F}).build();
      });
    }
    // x small enough to stay in cache (2,000 rows of 64): the register-blocked
    // sums (ops/segment_reduce.h) take every width, GAT's 8 heads of 8 as one
    // group, and fixed-width dots run unrolled.
    const int64_t Nc = 2000;
    add("spmm_sum_cached_8_heads", [=] {
      return Synthetic(golden("spmm/sum_wide")).param("num_src", Nc).param("num_dst", Nc)
          .floats("x", {Nc, 64}).floats("weight", {E, 8}).ints("src", {E}, Nc).ints("dst", {E}, Nc)
          .upstream("out", {Nc, 64}).build();
    });
    add("spmm_mean_cached_wide", [=] {
      return Synthetic(golden("spmm/mean_wide")).param("num_src", Nc).param("num_dst", Nc)
          .floats("x", {Nc, 100}).floats("weight", {E}).ints("src", {E}, Nc).ints("dst", {E}, Nc)
          .upstream("out", {Nc, 100}).build();
    });
    add("sddmm_dot_cached_8_heads", [=] {
      return Synthetic(golden("sddmm_dot/random")).param("num_src", Nc).param("num_dst", Nc)
          .param("heads", 8).floats("a", {Nc, 64}).floats("b", {Nc, 64}).ints("src", {E}, Nc)
          .ints("dst", {E}, Nc).upstream("out", {E, 8}).build();
    });
    for (const int64_t heads : {1, 8, 20}) {  // compile-time head counts, and a run-time one
      add("segment_softmax_" + std::to_string(heads) + "_heads", [=] {
        return Synthetic(golden("segment_softmax/random")).param("num_rows", N)
            .floats("score", {E, heads}).ints("index", {E}, N).upstream("alpha", {E, heads}).build();
      });
    }
    add("head_dot_8_heads", [=] {
      return Synthetic(golden("head_dot/heads")).param("heads", 8).floats("x", {N, 8 * 8})
          .floats("att", {1, 8, 8}).upstream("out", {N, 8}).build();
    });
    // The attention's edge-feature terms at the encoder's shape: 8 heads of
    // the edge rows' 96 columns (a quarter of the edges: 19 MB of rows).
    const int64_t Eh = E / 4;
    add("edge_head_dot_8_heads", [=] {
      return Synthetic(golden("edge_head_dot/random")).param("num_src", N).param("num_dst", N)
          .param("heads", 8).param("k", 96).floats("a", {N, 8 * 96}).floats("r", {Eh, 96})
          .ints("src", {Eh}, N).ints("dst", {Eh}, N).upstream("out", {Eh, 8}).build();
    });
    add("head_scatter_8_heads", [=] {
      return Synthetic(golden("head_scatter/random")).param("num_src", N).param("num_dst", N)
          .param("heads", 8).param("k", 96).floats("w", {Eh, 8}).floats("r", {Eh, 96})
          .ints("src", {Eh}, N).ints("dst", {Eh}, N).upstream("out", {N, 8 * 96}).build();
    });
    add("head_matmul_8_heads", [=] {
      return Synthetic(golden("head_matmul/eight_heads_t")).param("heads", 8).param("trans_w", true)
          .floats("x", {N, 8 * 96}).floats("w", {8 * 96, 96}).upstream("out", {N, 8 * 96}).build();
    });
    add("sparse_matmul_wide", [=] {
      return Synthetic(golden("sparse_matmul/wide")).param("num_rows", N).param("num_cols", 1000)
          .param("trans_b", true).floats("values", {E}).floats("b", {64, 1000})
          .ints("src", {E}, 1000).ints("dst", {E}, N).upstream("out", {N, 64}).build();
    });
    add("scatter_max_wide_rows", [=] {
      return Synthetic(golden("scatter/max_wide")).param("num_rows", N).floats("src", {E / 4, 160})
          .ints("index", {E / 4}, N).upstream("out", {N, 160}).build();
    });
    add("gather", [=] {
      return Synthetic(golden("gather/random")).param("num_rows", N).floats("x", {N, F})
          .ints("index", {E}, N).upstream("out", {E, F}).build();
    });
    add("sddmm_dot", [=] {
      return Synthetic(golden("sddmm_dot/random")).param("num_src", N).param("num_dst", N)
          .param("heads", 2).floats("a", {N, F}).floats("b", {N, F}).ints("src", {E}, N)
          .ints("dst", {E}, N).upstream("out", {E, 2}).build();
    });
    // Compile-time head counts (1: gathers across edges; 4, 8) and a run-time one.
    for (const int64_t heads : {1, 4, 8, 20}) {
      add(heads == 4 ? std::string("sddmm_add") : "sddmm_add_" + std::to_string(heads) + "_heads", [=] {
        return Synthetic(golden("sddmm_add/random")).param("num_src", N).param("num_dst", N)
            .floats("a", {N, heads}).floats("b", {N, heads}).ints("src", {E}, N)
            .ints("dst", {E}, N).upstream("out", {E, heads}).build();
      });
    }
    for (const int64_t heads : {1, 8, 20}) {  // compile-time head counts, and a run-time one
      add("attention_softmax_" + std::to_string(heads) + "_heads", [=] {
        return Synthetic(golden("attention_softmax/random")).param("num_src", N)
            .param("num_dst", N).param("heads", heads).floats("a", {N, heads})
            .floats("b", {N, heads}).ints("src", {E}, N).ints("dst", {E}, N)
            .upstream("alpha", {E, heads}).build();
      });
    }
    for (const std::string op : {"segment_softmax", "segment_max"}) {
      add(op, [=] {
        return Synthetic(golden(op + "/random")).param("num_rows", N).floats("score", {E, 2})
            .ints("index", {E}, N).upstream(op == "segment_max" ? "m" : "alpha", {E, 2}).build();
      });
    }
    add("segment_exp_sum", [=] {
      return Synthetic(golden("segment_exp_sum/random")).param("num_rows", N).floats("score", {E, 2})
          .floats("m", {N, 2}).ints("index", {E}, N).upstream("s", {N, 2}).build();
    });
    add("segment_softmax_apply", [=] {
      return Synthetic(golden("segment_softmax_apply/random")).param("num_rows", N)
          .floats("score", {E, 2}).floats("m", {N, 2}).floats("s", {N, 2}).ints("index", {E}, N)
          .upstream("alpha", {E, 2}).build();
    });
    // A matmul of size (m, k, n) with the transposes of the golden case it
    // starts from, which give the stored shapes of a and b.
    const auto matmul = [&](std::string name, const std::string& case_path, int64_t m, int64_t k,
                            int64_t n) {
      add(std::move(name), [=] {
        Synthetic s(golden(case_path));
        const bool trans_a = s.param("trans_a"), trans_b = s.param("trans_b");
        return s.param("m", m).param("k", k).param("n", n)
            .floats("a", trans_a ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k})
            .floats("b", trans_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n})
            .upstream("c", {m, n}).build();
      });
    };
    matmul("matmul", "matmul/square", 500, 300, 200);
    // Padded products (ops/dense.cc): C's columns in two row blocks
    // (40,000 rows of 7 columns; the block is 32,768 rows), C's rows, and
    // columns padded in front of the depth split.
    matmul("matmul_padded_cols", "matmul/pad_cols", 40000, 64, 7);
    matmul("matmul_padded_rows", "matmul/pad_rows", 15, 3000, 64);
    matmul("matmul_padded_depth_split", "matmul/trans_a", 64, 10000, 7);
    matmul("matmul_depth_split", "matmul/trans_a", 64, 10000, 16);
    // A tiny C cut into quarters of k (GAT's classifier weight gradient on Cora).
    matmul("matmul_short_depth_split", "matmul/trans_a", 7, 2708, 64);
    for (const std::string op : {"add", "mul"}) {
      add(op, [=] {
        return Synthetic(golden(op + "/small")).floats("a", {N, F}).floats("b", {N, F})
            .upstream("out", {N, F}).build();
      });
    }
    add("concat", [=] {
      return Synthetic(golden("concat/small")).floats("a", {N, F}).floats("b", {N, 3}).floats("c", {N, 1})
          .upstream("out", {N, F + 4}).build();
    });
    add("slice_cols", [=] {
      return Synthetic(golden("slice_cols/middle")).floats("x", {N, 9}).upstream("out", {N, 2}).build();
    });
    add("scale", [=] {
      return Synthetic(golden("scale/small")).floats("x", {N, F}).upstream("out", {N, F}).build();
    });
    add("bias_add", [=] {
      return Synthetic(golden("bias_add/small")).floats("x", {N, F}).floats("bias", {F})
          .upstream("out", {N, F}).build();
    });
    for (const std::string op : {"relu", "leaky_relu", "elu", "sigmoid", "silu", "gelu_tanh", "exp", "log_softmax"}) {
      add(op, [=] {
        return Synthetic(golden(op + "/small")).floats("x", {N, F}).upstream("out", {N, F}).build();
      });
    }
    add("nll_loss", [=] {
      return Synthetic(golden("nll_loss/small")).floats("log_prob", {N, F}).ints("labels", {N}, F)
          .mask("mask", N).build();
    });
    add("cross_entropy", [=] {
      return Synthetic(golden("cross_entropy/some_rows")).floats("x", {N, 7}).ints("labels", {N}, 7)
          .mask("mask", N).build();
    });
    add("l1_loss", [=] {
      return Synthetic(golden("l1_loss/small")).floats("pred", {N, F}).floats("target", {N, F})
          .mask("mask", N).build();
    });
    add("bce_with_logits", [=] {
      return Synthetic(golden("bce_with_logits/small")).floats("pred", {N, F}).floats("target", {N, F})
          .mask("mask", N).build();
    });
    add("mean_loss", [=] {
      return Synthetic(golden("mean_loss/small")).floats("pred", {N, F}).floats("target", {N, F})
          .mask("mask", N).build();
    });
    add("mse_loss", [=] {
      return Synthetic(golden("mse_loss/small")).floats("pred", {N, F}).floats("target", {N, F})
          .mask("mask", N).build();
    });
    add("count_correct", [=] {
      return Synthetic(golden("count_correct/ties_and_nan")).floats("log_prob", {N, F})
          .ints("labels", {N}, F).mask("mask", N).build();
    });
    for (const bool trans_b : {true, false}) {
      // X [N, 4F] with E entries (duplicates included), times a [F, 4F] weight.
      add(trans_b ? "sparse_matmul" : "sparse_matmul_plain_b", [=] {
        return Synthetic(golden("sparse_matmul/wide")).param("num_rows", N).param("num_cols", 4 * F)
            .param("trans_b", trans_b).floats("values", {E})
            .floats("b", trans_b ? std::vector<int64_t>{F, 4 * F} : std::vector<int64_t>{4 * F, F})
            .ints("src", {E}, 4 * F).ints("dst", {E}, N).upstream("out", {N, F}).build();
      });
    }
    add("sparse_dropout", [=] {
      return Synthetic(golden("sparse_dropout/half")).param("num_rows", N).param("num_cols", 4 * F)
          .floats("values", {E}).ints("src", {E}, 4 * F).ints("dst", {E}, N).build();
    });
    add("dropout", [=] {
      return Synthetic(golden("dropout/half")).floats("x", {N, F}).upstream("out", {N, F}).build();
    });
    add("head_dot", [=] {
      return Synthetic(golden("head_dot/heads")).param("heads", 4).floats("x", {N, 4 * 8})
          .floats("att", {1, 4, 8}).upstream("out", {N, 4}).build();
    });
    add("head_mean", [=] {
      return Synthetic(golden("head_mean/heads")).param("heads", 4).floats("x", {N, 4 * 8})
          .upstream("out", {N, 8}).build();
    });
    add("edge_scale", [=] {
      return Synthetic(golden("edge_scale/heads")).floats("messages", {E, 2 * 4})
          .floats("weight", {E, 2}).upstream("out", {E, 8}).build();
    });
    add("divide_rows", [=] {
      return Synthetic(golden("divide_rows/small")).floats("x", {N, F}).ints("degree", {N}, 5)
          .upstream("out", {N, F}).build();
    });
    add("keep_winners", [=] {
      return Synthetic(golden("keep_winners/random")).param("num_src", N).param("num_dst", N)
          .floats("g", {N, F}).ints("arg", {N, F}, E + 1).ints("src", {E}, N).ints("dst", {E}, N)
          .upstream("out", {N, F}).build();
    });
    for (const std::string mode : {"graph", "node"}) {
      add("layer_norm_" + mode, [=] {
        return Synthetic(golden("layer_norm/" + mode + "_small")).floats("x", {N, F})
            .floats("weight", {F}).floats("bias", {F}).upstream("out", {N, F}).build();
      });
    }
    add("layer_norm_moments", [=] {
      return Synthetic(golden("layer_norm_moments/small")).floats("x", {N, F}).mask("mask", N).build();
    });
    add("gcn_norm", [=] {
      return Synthetic(golden("gcn_norm/random")).param("num_nodes", N).ints("src", {E}, N)
          .ints("dst", {E}, N).build();
    });
    for (const std::string optimizer : {"adam_update/adam_l2_betas", "adam_update/adamw",
                                        "sgd_update/sgd_nesterov"}) {
      add(optimizer.substr(optimizer.find('/') + 1), [=] {
        return Synthetic(golden(optimizer)).floats("param_init", {N, F}).floats("grads", {3, N, F}).build();
      });
    }
    return r;
  }();
  return list;
}

Values<float> run_with_threads(const Case& c, int threads) {
  omp_set_num_threads(threads);
  const auto inputs = float_inputs<float>(c);
  const auto upstream = upstream_gradients<float>(c);
  return run_op<float>(c, inputs, &upstream);
}

void expect_bitwise_equal(const Values<float>& a, const Values<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [key, va] : a) {
    const auto& vb = b.at(key);
    ASSERT_EQ(va.size(), vb.size()) << what << " " << key;
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0)
        << what << ": " << key << " differs";
  }
}

class DeterminismTest : public ::testing::TestWithParam<int> {};

TEST_P(DeterminismTest, SameBitsForOneAndTwoThreadsAndAcrossRuns) {
  const Case c = recipes()[GetParam()].build();
  SCOPED_TRACE(c.name);
  const auto one = run_with_threads(c, 1);
  const auto two = run_with_threads(c, 2);
  const auto again = run_with_threads(c, 2);
  expect_bitwise_equal(one, two, "1 vs 2 threads");
  expect_bitwise_equal(two, again, "run to run");
}

INSTANTIATE_TEST_SUITE_P(Ops, DeterminismTest,
                         ::testing::Range(0, static_cast<int>(recipes().size())),
                         [](const auto& info) { return recipes()[info.param].name; });

}  // namespace
}  // namespace gnnrt::testing
