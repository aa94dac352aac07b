// The simulated core on hand-written programs: build-time shape errors,
// the passes (fusion and reordering change nothing but rounding), the
// memory plan (no two live values overlap; the peak fits or compilation
// fails naming the op), the program cache (hit, miss, corrupt entry), and
// debug mode naming the op that made a NaN.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <omp.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include "runtime/npy.h"
#include "runtime/builder.h"
#include "ops/gcn_norm.h"
#include "ops/rng.h"
#include "runtime/core.h"
#include "runtime/memory_plan.h"
#include "runtime/passes.h"
#include "runtime/program_cache.h"

namespace gnnrt::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int64_t kNodes = 50, kFeatures = 24, kHidden = 6;

// A random graph (with duplicates and an isolated node 0) and its edges.
struct Graph {
  std::vector<int32_t> src, dst;
  std::shared_ptr<const Core::Adjacency> adj;
};

Graph random_graph(int64_t edges, uint32_t seed) {
  Graph g;
  for (int64_t e = 0; e < edges; ++e) {
    const ops::RngWords w = ops::philox(seed, 0, {static_cast<uint64_t>(e), 0, 0, 0});
    g.src.push_back(1 + static_cast<int32_t>(ops::below(w[0], kNodes - 1)));
    g.dst.push_back(1 + static_cast<int32_t>(ops::below(w[1], kNodes - 1)));
  }
  g.adj = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(g.src, g.dst, kNodes, kNodes));
  return g;
}

Tensor random_array(std::vector<int64_t> shape, uint32_t seed) {
  Tensor a(DType::kF32, std::move(shape));
  auto v = a.values<float>();
  for (size_t i = 0; i < v.size(); i += 4) {
    const auto z = ops::normals(ops::philox(seed, 1, {i / 4, 0, 0, 0}));
    for (size_t k = 0; k < 4 && i + k < v.size(); ++k) v[i + k] = static_cast<float>(z[k]);
  }
  return a;
}

// Compiles and runs `program` on a fresh trn1 core (in debug mode: unfused,
// checked) with graph "g" and `arrays` bound; its value "out" and how many
// aggregations the compiler reordered.
struct OutRun {
  Tensor out;
  int reordered = 0;
};
OutRun run_out(const Graph& g, bool debug, Program program,
               std::vector<std::pair<std::string, Tensor>> arrays) {
  CoreOptions options;
  options.debug = debug;
  Core core(DeviceProfile::named("trn1"), options);
  core.bind_graph("g", g.adj);
  for (auto& [name, array] : arrays) core.memory().put(name, std::move(array));
  const auto compiled = core.compile(std::move(program), {});
  core.run(*compiled, {});
  return {core.read(*compiled, "out"), compiled->passes.reordered};
}

// h = relu(aggregate_sum(x) W1^T) -> aggregate_mean(h W2^T): one narrowing
// matmul after an aggregation (reordered), one aggregation of a narrow matmul.
Program two_layers(int64_t edges) {
  Builder b("two_layers");
  const ValueId x = b.input("x", DType::kF32, {kNodes, kFeatures});
  const int32_t g = b.graph("g", kNodes, kNodes, edges);
  const ValueId w1 = b.parameter("w1", {kHidden, kFeatures});
  const ValueId w2 = b.parameter("w2", {3, kHidden});
  Builder::Scope scope(b, "layer1");
  const ValueId norm = b.gcn_norm(g);
  ValueId h = b.linear(b.aggregate(ops::Reduce::kSum, g, x, norm), w1);
  h = b.relu(h);
  h = b.aggregate(ops::Reduce::kMean, g, b.linear(h, w2));
  b.program().value(h).name = "out";
  b.output(h);
  return b.take();
}

TEST(Builder, ShapeErrorNamesOpScopeAndBothShapes) {
  Builder b("p");
  const ValueId x = b.input("x", DType::kF32, {10, 4});
  const ValueId w = b.parameter("w", {3, 5});
  Builder::Scope scope(b, "conv1");
  try {
    b.linear(x, w);
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("program 'p': matmul (conv1)"));
    EXPECT_THAT(e.what(), HasSubstr("[10, 4]"));
    EXPECT_THAT(e.what(), HasSubstr("[3, 5]"));
  }
  const int32_t g = b.graph("g", 10, 10, 7);
  EXPECT_THROW(b.aggregate(ops::Reduce::kSum, g, b.input("y", DType::kF32, {9, 4})), ShapeError);
  EXPECT_THROW(b.parameter("w", {1}), ShapeError);  // declared twice
}

// A train step (SGD, gradients kept) compiled on fresh trn1 cores, once in
// debug mode (unfused, the reference) and once with every pass: `graphs`
// and `arrays` bound, "mask" all true for kNodes rows, run once at lr 0.
// check(step, debug) looks at each compiled step; then the values named in
// `reads` and every gradient must have the same bits both ways.
using StepBuild = std::function<std::pair<Program, TrainStep>()>;
using StepCheck = std::function<void(const CompiledProgram&, bool debug)>;
void expect_same_bits_as_debug(
    const StepBuild& build,
    const std::vector<std::pair<std::string, std::shared_ptr<const Core::Adjacency>>>& graphs,
    const std::vector<std::pair<std::string, Tensor>>& arrays, const std::vector<std::string>& reads,
    const StepCheck& check) {
  std::vector<std::vector<Tensor>> results;
  for (const bool debug : {true, false}) {
    SCOPED_TRACE(debug ? "debug" : "compiled");
    CoreOptions options;
    options.debug = debug;
    Core core(DeviceProfile::named("trn1"), options);
    for (const auto& [name, adjacency] : graphs) core.bind_graph(name, adjacency);
    for (const auto& [name, array] : arrays) core.memory().put(name, array);
    Tensor mask(DType::kBool, {kNodes});
    for (auto& m : mask.values<uint8_t>()) m = 1;
    core.memory().put("mask", mask);
    auto [program, train] = build();
    CompileOptions compile;
    compile.train = train;
    const auto step = core.compile(std::move(program), compile);
    check(*step, debug);
    core.run(*step, {.step = 1, .lr = 0, .seed = 0});
    results.emplace_back();
    for (const std::string& name : reads) results.back().push_back(core.read(*step, name));
    for (ValueId grad : step->grads) results.back().push_back(core.read(*step, grad));
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) {
    const std::string what = i < reads.size() ? reads[i] : "gradient " + std::to_string(i - reads.size());
    ASSERT_EQ(results[0][i].bytes().size(), results[1][i].bytes().size()) << what;
    EXPECT_EQ(std::memcmp(results[0][i].bytes().data(), results[1][i].bytes().data(),
                          results[0][i].bytes().size()), 0)
        << what;
  }
}

// GAT's pattern: h gets its gradient from a matmul and from two attention
// dots; compiled, both adds fold into the dots' gradients (fuse_gradient_sums),
// and every gradient keeps the bits of the unfused (debug) program's.
TEST(Passes, GradientSumsFoldIntoAttentionDots) {
  // 8 channels: a compile-time width in head_dot_backward_x; 20: run time.
  for (const int64_t channels : {8, 20}) {
    SCOPED_TRACE(::testing::Message() << channels << " channels");
    constexpr int64_t kHeads = 3;
    const int64_t width = kHeads * channels;
    const auto build = [&] {
      Builder b("attention_dots");
      const ValueId x = b.input("x", DType::kF32, {kNodes, kFeatures});
      const ValueId w = b.parameter("w", {width, kFeatures});
      const ValueId w2 = b.parameter("w2", {kHeads, width});
      const ValueId a1 = b.parameter("a1", {1, kHeads, channels});
      const ValueId a2 = b.parameter("a2", {1, kHeads, channels});
      const ValueId h = b.linear(x, w);
      const ValueId scores = b.add(b.head_dot(h, a1, kHeads), b.head_dot(h, a2, kHeads));
      const ValueId y = b.add(b.linear(h, w2), scores);
      const ValueId loss = b.mse_loss(y, b.input("target", DType::kF32, {kNodes, kHeads}),
                                      b.input("mask", DType::kBool, {kNodes}));
      OptimizerConfig sgd;
      sgd.kind = OptimizerConfig::Kind::kSgd;
      return std::pair{b.take(), TrainStep{loss, {w, w2, a1, a2}, sgd, /*keep_grads=*/true}};
    };
    expect_same_bits_as_debug(
        build, {},
        {{"x", random_array({kNodes, kFeatures}, 2)},
         {"w", random_array({width, kFeatures}, 3)},
         {"w2", random_array({kHeads, width}, 4)},
         {"a1", random_array({1, kHeads, channels}, 5)},
         {"a2", random_array({1, kHeads, channels}, 6)},
         {"target", random_array({kNodes, kHeads}, 7)}},
        {}, [](const CompiledProgram& step, bool debug) {
          int folded = 0;
          for (const Op& op : step.program.ops) {
            folded += op.kind == OpKind::kHeadDotGradX && op.inputs.size() == 3;
          }
          EXPECT_EQ(folded, debug ? 0 : 2);
          EXPECT_EQ(step.passes.folded, debug ? 0 : 2);
          EXPECT_EQ(step.grads.size(), 4u);
        });
  }
}

// GAT's attention: segment_softmax(leaky_relu(sddmm_add(a_src, a_dst)))
// becomes one attention_softmax (fuse_attention), and the output and every
// gradient keep the bits of the unfused (debug) program's; at 1, 3 and 8
// heads (compile-time widths) and 20 (read at run time), on a random graph
// whose edge ids are not in destination order. Where the logits have a
// second reader, the chain stays as it is.
TEST(Passes, AttentionSoftmaxFusesWithItsLogits) {
  const Graph g = random_graph(300, 11);
  for (const int64_t heads : {1, 3, 8, 20}) {
    for (const bool second_reader : {false, true}) {
      SCOPED_TRACE(::testing::Message() << heads << " heads" << (second_reader ? ", logits read twice" : ""));
      constexpr int64_t kChannels = 2;
      const int64_t width = heads * kChannels;
      const auto build = [&] {
        Builder b("attention");
        const int32_t graph = b.graph("g", kNodes, kNodes, static_cast<int64_t>(g.src.size()));
        const ValueId x = b.input("x", DType::kF32, {kNodes, kFeatures});
        const ValueId w = b.parameter("w", {width, kFeatures});
        const ValueId att_src = b.parameter("att_src", {1, heads, kChannels});
        const ValueId att_dst = b.parameter("att_dst", {1, heads, kChannels});
        const ValueId h = b.linear(x, w);
        const ValueId logit = b.leaky_relu(
            b.sddmm_add(graph, b.head_dot(h, att_src, heads), b.head_dot(h, att_dst, heads)), 0.2);
        ValueId alpha = b.softmax(graph, logit);
        if (second_reader) alpha = b.add(alpha, logit);
        const ValueId y = b.aggregate(ops::Reduce::kSum, graph, h, alpha);
        b.program().value(y).name = "out";
        b.output(y);
        const ValueId loss = b.mse_loss(y, b.input("target", DType::kF32, {kNodes, width}),
                                        b.input("mask", DType::kBool, {kNodes}));
        OptimizerConfig sgd;
        sgd.kind = OptimizerConfig::Kind::kSgd;
        return std::pair{b.take(), TrainStep{loss, {w, att_src, att_dst}, sgd, /*keep_grads=*/true}};
      };
      expect_same_bits_as_debug(
          build, {{"g", g.adj}},
          {{"x", random_array({kNodes, kFeatures}, 2)},
           {"w", random_array({width, kFeatures}, 3)},
           {"att_src", random_array({1, heads, kChannels}, 4)},
           {"att_dst", random_array({1, heads, kChannels}, 5)},
           {"target", random_array({kNodes, width}, 7)}},
          {"out"}, [&](const CompiledProgram& step, bool debug) {
            const bool fused = !debug && !second_reader;
            int attention = 0, attention_grads = 0, leaky = 0;
            for (const Op& op : step.program.ops) {
              attention += op.kind == OpKind::kAttentionSoftmax;
              attention_grads += op.kind == OpKind::kAttentionSoftmaxGrad;
              leaky += op.kind == OpKind::kLeakyRelu || op.kind == OpKind::kLeakyReluGrad;
            }
            EXPECT_EQ(attention, fused ? 1 : 0);
            EXPECT_EQ(attention_grads, fused ? 1 : 0);
            EXPECT_EQ(leaky, fused ? 0 : 2);
            EXPECT_EQ(step.passes.attention, fused ? 1 : 0);
            EXPECT_EQ(step.grads.size(), 3u);
          });
    }
  }
}

// A classifier's loss: nll_loss(log_softmax(x)) becomes one cross_entropy
// (fuse_cross_entropy) that computes the masked rows' log softmax only;
// the loss and every gradient keep the unfused (debug) program's bits,
// with about a third of the rows masked (the others' gradient rows are 0
// both ways). Where the log softmax is also a program output, the two ops
// stay apart.
TEST(Passes, CrossEntropyFusesTheLossWithItsLogSoftmax) {
  Tensor labels(DType::kI64, {kNodes}), train(DType::kBool, {kNodes});
  for (int64_t i = 0; i < kNodes; ++i) {
    labels.values<int64_t>()[static_cast<size_t>(i)] = (i * 7) % kHidden;
    train.values<uint8_t>()[static_cast<size_t>(i)] = i % 3 == 1;
  }
  for (const bool log_prob_read : {false, true}) {
    SCOPED_TRACE(log_prob_read ? "log softmax also an output" : "log softmax read by the loss only");
    const auto build = [&] {
      Builder b("classifier");
      const ValueId x = b.input("x", DType::kF32, {kNodes, kFeatures});
      const ValueId w = b.parameter("w", {kHidden, kFeatures});
      const ValueId log_prob = b.log_softmax(b.linear(x, w));
      if (log_prob_read) {
        b.program().value(log_prob).name = "log_prob";
        b.output(log_prob);
      }
      const ValueId loss = b.nll_loss(log_prob, b.input("labels", DType::kI64, {kNodes}),
                                      b.input("train", DType::kBool, {kNodes}));
      b.program().value(loss).name = "loss";
      b.output(loss);
      OptimizerConfig sgd;
      sgd.kind = OptimizerConfig::Kind::kSgd;
      return std::pair{b.take(), TrainStep{loss, {w}, sgd, /*keep_grads=*/true}};
    };
    expect_same_bits_as_debug(
        build, {},
        {{"x", random_array({kNodes, kFeatures}, 2)}, {"w", random_array({kHidden, kFeatures}, 3)},
         {"labels", labels}, {"train", train}},
        {"loss"}, [&](const CompiledProgram& step, bool debug) {
          const bool fused = !debug && !log_prob_read;
          int fused_ops = 0, unfused_ops = 0;
          for (const Op& op : step.program.ops) {
            fused_ops += op.kind == OpKind::kCrossEntropy || op.kind == OpKind::kCrossEntropyGrad;
            unfused_ops += op.kind == OpKind::kLogSoftmax || op.kind == OpKind::kNllLoss ||
                           op.kind == OpKind::kLogSoftmaxGrad || op.kind == OpKind::kNllLossGrad;
          }
          EXPECT_EQ(fused_ops, fused ? 2 : 0);
          EXPECT_EQ(unfused_ops, fused ? 0 : 4);
          EXPECT_EQ(step.passes.cross_entropy, fused ? 1 : 0);
        });
  }
}

// gcn_norm without degrees depends on the bound graph only: the core
// computes it once per binding and keeps it outside the arena (the memory
// plan counts it as resident). Its value is ops::gcn_norm's, bit for bit;
// binding another graph under the name recomputes it, and binding the
// first again gives the first's back.
TEST(GraphConstants, GcnNormIsComputedOncePerGraphBinding) {
  const Graph a = random_graph(200, 21), b = random_graph(200, 22);
  Builder builder("gcn");
  const int32_t graph = builder.graph("g", kNodes, kNodes, 200);
  const ValueId norm = builder.gcn_norm(graph);
  builder.program().value(norm).name = "norm";
  builder.output(norm);
  const ValueId y = builder.aggregate(ops::Reduce::kSum, graph,
                                      builder.input("x", DType::kF32, {kNodes, kHidden}), norm);
  builder.program().value(y).name = "out";
  builder.output(y);
  Core core(DeviceProfile::named("trn1"), {});
  core.memory().put("x", random_array({kNodes, kHidden}, 2));
  const auto compiled = core.compile(builder.take(), {});
  EXPECT_EQ(compiled->program.value(compiled->program.find("norm")).offset, -1);
  const auto expect_norm_of = [&](const Graph& g) {
    std::vector<float> expected(200);
    ops::gcn_norm<float, int32_t>(*g.adj, {}, expected);
    const Tensor got = core.read(*compiled, "norm");
    ASSERT_EQ(got.values<float>().size(), expected.size());
    EXPECT_EQ(std::memcmp(got.values<float>().data(), expected.data(), 200 * sizeof(float)), 0);
  };
  core.bind_graph("g", a.adj);
  core.run(*compiled, {});
  expect_norm_of(a);
  const Tensor out_a = core.read(*compiled, "out");
  core.run(*compiled, {});
  expect_norm_of(a);
  core.bind_graph("g", b.adj);
  core.run(*compiled, {});
  expect_norm_of(b);
  EXPECT_NE(std::memcmp(core.read(*compiled, "out").bytes().data(), out_a.bytes().data(),
                        out_a.bytes().size()), 0);
  core.bind_graph("g", a.adj);
  core.run(*compiled, {});
  expect_norm_of(a);
  EXPECT_EQ(std::memcmp(core.read(*compiled, "out").bytes().data(), out_a.bytes().data(),
                        out_a.bytes().size()), 0);
}

// Two linear maps of one sparse matrix X (SAGE's on a sparse input), the
// first read before the second is made. Compiled, the two products pair
// into one op, and so do their weight gradients (pair_sparse_products: the
// forward pair where the first product was, the gradients where the second
// was), and the output and every gradient keep the bits of the unpaired
// (debug) program's: by one walk at 16 columns, by two at 6 and 64 (the
// kernel's choice, segment_reduce_pair).
TEST(Passes, SparseProductsOfOneMatrixPair) {
  std::vector<int32_t> rows, cols;  // X [kNodes, kFeatures], about 30% stored, row by row
  for (int32_t r = 0; r < kNodes; ++r) {
    for (int32_t c = 0; c < kFeatures; ++c) {
      const uint64_t at = static_cast<uint64_t>(r * kFeatures + c);
      if (ops::below(ops::philox(9, 2, {at, 0, 0, 0})[0], 10) < 3) {
        rows.push_back(r);
        cols.push_back(c);
      }
    }
  }
  const auto x = std::make_shared<const Core::Adjacency>(
      Core::Adjacency::build(cols, rows, kFeatures, kNodes));
  const int64_t stored = static_cast<int64_t>(rows.size());
  for (const int64_t width : {16, 6, 64}) {
    SCOPED_TRACE(::testing::Message() << width << " columns");
    const auto build = [&] {
      Builder b("sparse_pair");
      const int32_t xm = b.graph("x", kFeatures, kNodes, stored);
      const ValueId values = b.input("values", DType::kF32, {stored});
      const ValueId w1 = b.parameter("w1", {width, kFeatures});
      const ValueId w2 = b.parameter("w2", {width, kFeatures});
      const ValueId w3 = b.parameter("w3", {kHidden, width});
      const ValueId h = b.add(b.relu(b.sparse_linear(xm, values, w1)),
                              b.sparse_linear(xm, values, w2));
      const ValueId y = b.linear(b.relu(h), w3);
      b.program().value(y).name = "out";
      b.output(y);
      const ValueId loss = b.mse_loss(y, b.input("target", DType::kF32, {kNodes, kHidden}),
                                      b.input("mask", DType::kBool, {kNodes}));
      OptimizerConfig sgd;
      sgd.kind = OptimizerConfig::Kind::kSgd;
      return std::pair{b.take(), TrainStep{loss, {w1, w2, w3}, sgd, /*keep_grads=*/true}};
    };
    expect_same_bits_as_debug(
        build, {{"x", x}},
        {{"values", random_array({stored}, 2)},
         {"w1", random_array({width, kFeatures}, 3)},
         {"w2", random_array({width, kFeatures}, 4)},
         {"w3", random_array({kHidden, width}, 5)},
         {"target", random_array({kNodes, kHidden}, 7)}},
        {"out"}, [](const CompiledProgram& step, bool debug) {
          // Where each pair sits: the forward one before the relu that reads
          // it (moved up), the gradients' after the relu's gradient (moved down).
          int pairs = 0;
          size_t forward_pair = 0, gradient_pair = 0, relu = 0, relu_grad = 0;
          for (size_t k = 0; k < step.program.ops.size(); ++k) {
            const Op& op = step.program.ops[k];
            const bool sparse = op.kind == OpKind::kSparseMatMul || op.kind == OpKind::kSparseMatMulGradB;
            if (sparse && op.inputs.size() == 3) {
              ++pairs;
              (op.kind == OpKind::kSparseMatMul ? forward_pair : gradient_pair) = k;
            }
            if (op.kind == OpKind::kRelu && relu == 0) relu = k;
            if (op.kind == OpKind::kReluGrad) relu_grad = k;
          }
          EXPECT_EQ(pairs, debug ? 0 : 2);
          EXPECT_EQ(step.passes.paired, debug ? 0 : 2);
          if (!debug) {
            EXPECT_LT(forward_pair, relu);
            EXPECT_GT(gradient_pair, relu_grad);
          }
          EXPECT_EQ(step.grads.size(), 3u);
        });
  }
}

// X · (X · B) with a square X: the second product reads the first's
// result, so the two cannot be one walk; the pass leaves them apart and the
// program compiles and runs (it once placed the pair where the second was,
// reading its own output, and verify rejected the program).
TEST(Passes, SparseProductOfAProductStaysApart) {
  std::vector<int32_t> rows, cols;  // X [kNodes, kNodes], about 20% stored
  for (int32_t r = 0; r < kNodes; ++r) {
    for (int32_t c = 0; c < kNodes; ++c) {
      const uint64_t at = static_cast<uint64_t>(r * kNodes + c);
      if (ops::below(ops::philox(9, 3, {at, 0, 0, 0})[0], 10) < 2) rows.push_back(r), cols.push_back(c);
    }
  }
  const int64_t stored = static_cast<int64_t>(rows.size());
  Builder b("sparse_chain");
  const int32_t xm = b.graph("x", kNodes, kNodes, stored);
  const ValueId values = b.input("values", DType::kF32, {stored});
  const ValueId w = b.parameter("w", {kNodes, kNodes});
  const ValueId once = b.sparse_matmul(xm, values, w);
  const ValueId twice = b.sparse_matmul(xm, values, once);
  b.program().value(twice).name = "out";
  b.output(twice);
  Core core(DeviceProfile::named("trn1"), {});
  core.bind_graph("x", std::make_shared<const Core::Adjacency>(
                           Core::Adjacency::build(cols, rows, kNodes, kNodes)));
  core.memory().put("values", random_array({stored}, 2));
  core.memory().put("w", random_array({kNodes, kNodes}, 3));
  const auto compiled = core.compile(b.take(), {});
  EXPECT_EQ(compiled->passes.paired, 0);
  core.run(*compiled, {});
  EXPECT_EQ(core.read(*compiled, "out").values<float>().size(), static_cast<size_t>(kNodes * kNodes));
}

// A train step whose loss nothing reads before the backward is appended
// (it is not a program output): fusing its gather and scatter into an spmm
// keeps the loss, so every parameter gets its gradient (the fusion's dead-op
// sweep once took the loss, and the step computed no gradient at all).
TEST(Passes, FusionKeepsTheLossOfATrainStep) {
  const Graph g = random_graph(300, 1);
  Builder b("fused_train");
  const int32_t gg = b.graph("g", kNodes, kNodes, 300);
  const ValueId x = b.input("x", DType::kF32, {kNodes, kFeatures});
  const ValueId w = b.parameter("w", {kHidden, kFeatures});
  const ValueId y = b.linear(b.aggregate(ops::Reduce::kMean, gg, x), w);
  const ValueId loss = b.mse_loss(y, b.input("target", DType::kF32, {kNodes, kHidden}),
                                  b.input("mask", DType::kBool, {kNodes}));
  OptimizerConfig sgd;
  sgd.kind = OptimizerConfig::Kind::kSgd;
  Core core(DeviceProfile::named("trn1"), {});
  core.bind_graph("g", g.adj);
  CompileOptions compile;
  compile.train = TrainStep{loss, {w}, sgd, /*keep_grads=*/true};
  const auto step = core.compile(b.take(), compile);
  EXPECT_GE(step->passes.fused, 1);
  ASSERT_EQ(step->grads.size(), 1u);
  EXPECT_NE(step->grads[0], kNoValue);
  EXPECT_GT(step->passes.backward_ops, 2);
}

TEST(Passes, FusionAndReorderKeepTheResult) {
  const Graph g = random_graph(300, 1);
  Program fused = two_layers(300);
  Program plain = fused;
  EXPECT_EQ(fuse_aggregations(fused), 2);
  EXPECT_EQ(reorder_aggregate_matmul(fused), 1);  // the first layer narrows 24 -> 6
  for (const Op& op : fused.ops) {
    EXPECT_NE(op.kind, OpKind::kGather);
    EXPECT_NE(op.kind, OpKind::kScatter);
  }
  verify(fused);

  const auto arrays = [] {
    return std::vector<std::pair<std::string, Tensor>>{
        {"x", random_array({kNodes, kFeatures}, 2)},
        {"w1", random_array({kHidden, kFeatures}, 3)},
        {"w2", random_array({3, kHidden}, 4)}};
  };
  const Tensor results[2] = {run_out(g, false, two_layers(300), arrays()).out,
                               run_out(g, true, plain, arrays()).out};
  const auto a = results[0].values<float>(), b = results[1].values<float>();
  double max_abs = 0;
  for (float v : b) max_abs = std::max(max_abs, static_cast<double>(std::abs(v)));
  ASSERT_GT(max_abs, 0);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * max_abs) << i;
}

// Two GCN layers without bias or activation: conv1 widens (8 -> 64), so its
// aggregation moves before its matmul; conv2 narrows (64 -> 3) and reads
// that same aggregation, which must not be rewritten a second time.
TEST(Passes, ChainedReorderingsStayValid) {
  const Graph g = random_graph(200, 9);
  const auto build = [] {
    Builder b("chain");
    const ValueId x = b.input("x", DType::kF32, {kNodes, 8});
    const int32_t graph = b.graph("g", kNodes, kNodes, 200);
    ValueId h = b.aggregate(ops::Reduce::kSum, graph, b.linear(x, b.parameter("w1", {64, 8})));
    h = b.aggregate(ops::Reduce::kMean, graph, b.linear(h, b.parameter("w2", {3, 64})));
    b.program().value(h).name = "out";
    b.output(h);
    return b.take();
  };
  const auto arrays = [] {
    return std::vector<std::pair<std::string, Tensor>>{{"x", random_array({kNodes, 8}, 2)},
                                                         {"w1", random_array({64, 8}, 3)},
                                                         {"w2", random_array({3, 64}, 4)}};
  };
  const OutRun compiled = run_out(g, false, build(), arrays());
  EXPECT_GE(compiled.reordered, 1);
  const Tensor results[2] = {compiled.out, run_out(g, true, build(), arrays()).out};
  const auto a = results[0].values<float>(), b = results[1].values<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + std::abs(b[i]))) << i;
}

// EdgeFeatureUpdate's pattern: a Linear of two gathered ends on every edge,
// and a second Linear of one gathered end alone. The compiled program
// projects the rows before gathering them (both matmuls rewritten), and
// computes what the unrewritten (debug) program computes.
TEST(Passes, MatmulsOfGatheredRowsRunBeforeTheGathers) {
  const Graph g = random_graph(600, 5);
  const auto build = [] {
    Builder b("edge_mlp");
    const ValueId x = b.input("x", DType::kF32, {kNodes, 8});
    const int32_t graph = b.graph("g", kNodes, kNodes, 600);
    const ValueId ends = b.concat({b.gather(graph, b.relu(x)), b.gather(graph, x)});
    const ValueId h = b.relu(b.linear(ends, b.parameter("w1", {5, 16})));
    const ValueId out = b.add(h, b.linear(b.gather(graph, x), b.parameter("w2", {5, 8})));
    b.program().value(out).name = "out";
    b.output(out);
    return b.take();
  };
  const auto arrays = [] {
    return std::vector<std::pair<std::string, Tensor>>{{"x", random_array({kNodes, 8}, 7)},
                                                         {"w1", random_array({5, 16}, 8)},
                                                         {"w2", random_array({5, 8}, 9)}};
  };
  CoreOptions options;
  Core core(DeviceProfile::named("trn1"), options);
  core.bind_graph("g", g.adj);
  for (auto& [name, array] : arrays()) core.memory().put(name, std::move(array));
  const auto compiled = core.compile(build(), {});
  EXPECT_EQ(compiled->passes.projected, 2);
  for (const Op& op : compiled->program.ops) {
    if (op.kind == OpKind::kMatMul) {
      EXPECT_EQ(compiled->program.value(op.inputs[0]).shape[0], kNodes);
    }
  }
  core.run(*compiled, {});
  const Tensor got = core.read(*compiled, "out");
  const Tensor want = run_out(g, true, build(), arrays()).out;
  const auto a = got.values<float>(), b = want.values<float>();
  ASSERT_EQ(a.size(), static_cast<size_t>(600 * 5));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << i;
}

TEST(Passes, VerifyRejectsUseBeforeDefinition) {
  Program p = two_layers(10);
  ASSERT_EQ(p.ops[2].kind, OpKind::kEdgeScale);
  std::swap(p.ops[1], p.ops[2]);  // edge_scale before the gather it reads
  EXPECT_THROW(verify(p), CompileError);
}

TEST(MemoryPlan, LiveValuesNeverShareBytesAndThePeakIsKnown) {
  Program p = two_layers(300);
  fuse_aggregations(p);
  const MemoryPlan plan = plan_memory(p);
  std::vector<int64_t> first(p.values.size(), -1), last(p.values.size(), -1);
  std::vector<bool> constant(p.values.size(), false);
  for (size_t i = 0; i < p.ops.size(); ++i) {
    for (ValueId v : p.ops[i].outputs) {
      first[static_cast<size_t>(v)] = static_cast<int64_t>(i);
      constant[static_cast<size_t>(v)] = is_graph_constant(p.ops[i]);
    }
    for (ValueId v : p.ops[i].inputs) last[static_cast<size_t>(v)] = static_cast<int64_t>(i);
  }
  for (ValueId v : p.outputs) last[static_cast<size_t>(v)] = static_cast<int64_t>(p.ops.size());
  int64_t total = 0, constants = 0;
  for (size_t a = 0; a < p.values.size(); ++a) {
    if (constant[a]) {  // kept by the core outside the arena (the GCN layers' gcn_norm)
      EXPECT_EQ(p.values[a].offset, -1) << p.values[a].name;
      ++constants;
      continue;
    }
    if (first[a] < 0) continue;
    total += p.values[a].bytes();
    ASSERT_GE(p.values[a].offset, 0);
    EXPECT_LE(p.values[a].offset + p.values[a].bytes(), plan.arena_bytes);
    for (size_t b = a + 1; b < p.values.size(); ++b) {
      if (first[b] < 0) continue;
      const bool live_together = first[a] <= std::max(last[b], first[b]) &&
                                 first[b] <= std::max(last[a], first[a]);
      const bool overlap = p.values[a].offset < p.values[b].offset + p.values[b].bytes() &&
                           p.values[b].offset < p.values[a].offset + p.values[a].bytes();
      EXPECT_FALSE(live_together && overlap) << p.values[a].name << " and " << p.values[b].name;
    }
  }
  EXPECT_LT(plan.arena_bytes, total);  // reuse happened
  EXPECT_EQ(constants, 1);
  EXPECT_EQ(plan.graph_bytes, 8 * (kNodes + kNodes + 2) + 24 * 300);
  EXPECT_EQ(plan.peak_bytes, plan.persistent_bytes + plan.graph_bytes + plan.arena_bytes);
}

TEST(MemoryPlan, TooSmallDeviceFailsAtCompileNamingTheOpAndTheBytes) {
  DeviceProfile tiny = DeviceProfile::named("trn1");
  tiny.hbm_bytes = 4096;
  Core core(tiny, {});
  try {
    core.compile(two_layers(300), {});
    FAIL() << "expected a CompileError";
  } catch (const CompileError& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not fit"));
    EXPECT_THAT(e.what(), HasSubstr("4096 bytes"));
    EXPECT_THAT(e.what(), HasSubstr("op #"));
    EXPECT_THAT(e.what(), HasSubstr("(layer1)"));
  }
  EXPECT_EQ(core.counters().compiles, 1);
}

TEST(Cache, SecondCompileIsAHitAndAnotherProgramIsAMiss) {
  const fs::path dir = fs::path(testing::TempDir()) / "gnnrt_cache_test";
  fs::remove_all(dir);
  CoreOptions options;
  options.cache_dir = dir;
  {
    Core core(DeviceProfile::named("trn1"), options);
    const auto first = core.compile(two_layers(300), {});
    EXPECT_FALSE(first->from_cache);
    const auto second = core.compile(two_layers(300), {});
    EXPECT_TRUE(second->from_cache);
    EXPECT_EQ(second->program.to_text(), first->program.to_text());
    EXPECT_EQ(second->plan.arena_bytes, first->plan.arena_bytes);
    EXPECT_EQ(core.counters().compiles, 1);
    EXPECT_EQ(core.counters().cache_hits, 1);
    core.compile(two_layers(301), {});  // another static shape
    EXPECT_EQ(core.counters().compiles, 2);
  }
  {
    // A fresh core (a second run) compiles nothing; another profile misses.
    Core core(DeviceProfile::named("trn1"), options);
    core.compile(two_layers(300), {});
    EXPECT_EQ(core.counters().compiles, 0);
    Core other(DeviceProfile::named("trn2"), options);
    other.compile(two_layers(300), {});
    EXPECT_EQ(other.counters().compiles, 1);
  }
  // A corrupt entry is a miss, recompiled over.
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << "garbage";
  }
  Core core(DeviceProfile::named("trn1"), options);
  core.compile(two_layers(300), {});
  EXPECT_EQ(core.counters().compiles, 1);
  fs::remove_all(dir);
}

// A cache entry is re-verified against the shape rules: an entry whose
// checksum holds but whose program has a result of the wrong shape (as a
// compiler bug, or an edited file, would leave it) is refused with the op
// named, and recompiled.
TEST(Cache, AnEntryThatBreaksAShapeRuleIsRecompiled) {
  const fs::path dir = fs::path(testing::TempDir()) / "gnnrt_cache_shape_test";
  fs::remove_all(dir);
  CoreOptions options;
  options.cache_dir = dir;
  std::string key;
  {
    Core core(DeviceProfile::named("trn1"), options);
    key = core.compile(two_layers(300), {})->key;
  }
  const ProgramCache cache(dir);
  std::optional<CompiledProgram> entry = cache.load(key);
  ASSERT_TRUE(entry);
  const auto matmul = std::find_if(entry->program.ops.begin(), entry->program.ops.end(),
                                   [](const Op& op) { return op.kind == OpKind::kMatMul; });
  ASSERT_NE(matmul, entry->program.ops.end());
  // One column fewer: the arena still holds it, only the rule can tell.
  entry->program.value(matmul->outputs[0]).shape[1] -= 1;
  EXPECT_THAT([&] { verify(entry->program); },
              testing::ThrowsMessage<CompileError>(AllOf(HasSubstr("matmul (layer1)"),
                                                         HasSubstr("its shape rule says float32 [50, 6]"))));
  cache.store(*entry);
  EXPECT_FALSE(cache.load(key));
  Core core(DeviceProfile::named("trn1"), options);
  EXPECT_FALSE(core.compile(two_layers(300), {})->from_cache);
  EXPECT_EQ(core.counters().compiles, 1);
  EXPECT_TRUE(cache.load(key));  // overwritten by a good one
  fs::remove_all(dir);
}

TEST(Debug, NamesTheFirstOpThatMadeANaN) {
  const Graph g = random_graph(300, 5);
  CoreOptions options;
  options.debug = true;
  Core core(DeviceProfile::named("trn1"), options);
  core.bind_graph("g", g.adj);
  Tensor x = random_array({kNodes, kFeatures}, 2);
  x.values<float>()[static_cast<size_t>(g.src[0]) * kFeatures + 3] = std::nanf("");
  core.memory().put("x", x);
  core.memory().put("w1", random_array({kHidden, kFeatures}, 3));
  core.memory().put("w2", random_array({3, kHidden}, 4));
  const auto compiled = core.compile(two_layers(300), {});
  try {
    core.run(*compiled, {});
    FAIL() << "expected a RunError";
  } catch (const RunError& e) {
    // Debug mode runs unfused: the gather of the first aggregation copies the NaN first.
    EXPECT_THAT(e.what(), HasSubstr("op #1 gather (layer1) produced NaN"));
  }
}

TEST(Core, UnboundInputsAndWrongShapesAreNamed) {
  const Graph g = random_graph(300, 5);
  Core core(DeviceProfile::named("trn1"), {});
  core.bind_graph("g", g.adj);
  const auto compiled = core.compile(two_layers(300), {});
  EXPECT_THAT([&] { core.run(*compiled, {}); },
              testing::ThrowsMessage<RunError>(HasSubstr("input 'x' [50, 24] is not bound")));
  core.memory().put("x", random_array({kNodes, kFeatures + 1}, 2));
  core.memory().put("w1", random_array({kHidden, kFeatures}, 3));
  core.memory().put("w2", random_array({3, kHidden}, 4));
  EXPECT_THAT([&] { core.run(*compiled, {}); },
              testing::ThrowsMessage<RunError>(HasSubstr("'x' is bound as float32 [50, 25]")));
  core.memory().put("x", random_array({kNodes, kFeatures}, 2));
  core.bind_graph("g", random_graph(299, 1).adj);
  EXPECT_THAT([&] { core.run(*compiled, {}); },
              testing::ThrowsMessage<RunError>(HasSubstr("graph 'g' is bound with 50 -> 50 nodes and 299 edges")));
}

// Subnormals (CoreOptions::flush_denormals): on, a product below 2^-126 is
// zero and a subnormal operand counts as zero, on every thread of the run
// (wide enough that the element-wise op splits over two threads); off,
// IEEE's subnormals. After every run each thread has its own FTZ and DAZ
// flags back: the default mode, or both set beforehand (put back, not
// cleared), also after a run that throws in its second op (an overflow
// that debug mode stops at), after the first has run on both threads, and
// on threads OpenMP starts during the run.
TEST(Core, FlushesSubnormalsWhileRunningAndPutsEachThreadsModeBack) {
#if !defined(__SSE__)
  GTEST_SKIP() << "flush_denormals acts on x86's MXCSR only";
#else
  constexpr int64_t kWide = 2048;
  const auto program = [](bool then_throw) {
    Builder b("subnormal");
    const ValueId x = b.input("x", DType::kF32, {kNodes, kWide});
    const ValueId y = b.input("y", DType::kF32, {kNodes, kWide});
    const ValueId out = b.mul(x, y);
    b.program().value(out).name = "out";
    b.output(out);
    if (then_throw) {  // 1e30 * 1e30 overflows: debug mode stops the run there
      const ValueId big = b.input("big", DType::kF32, {kNodes, kWide});
      b.output(b.mul(big, big));
    }
    return b.take();
  };
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(2);
  constexpr unsigned kFlush = 0x8040;  // FTZ | DAZ
  // The control bits; the low six are sticky exception flags that the
  // arithmetic itself sets.
  constexpr unsigned kStatus = 0x3f;
  const auto modes = [] {
    std::vector<unsigned> m(2, 0);
#pragma omp parallel num_threads(2)
    m[omp_get_thread_num()] = _mm_getcsr() & ~kStatus;
    return m;
  };
  const auto set_flush = [](bool on) {
#pragma omp parallel num_threads(2)
    _mm_setcsr(on ? _mm_getcsr() | kFlush : _mm_getcsr() & ~kFlush);
  };
  const std::vector<unsigned> before = modes();
  ASSERT_EQ(before[0] & kFlush, 0u);
  ASSERT_EQ(before[1] & kFlush, 0u);
  // Even elements: 1e-20 * 1e-20 = 1e-40 (a subnormal result). Odd ones:
  // 1e-40 * 1 (a subnormal operand).
  Tensor x(DType::kF32, {kNodes, kWide}), y(DType::kF32, {kNodes, kWide});
  auto xv = x.values<float>(), yv = y.values<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    xv[i] = i % 2 == 0 ? 1e-20f : 1e-40f;
    yv[i] = i % 2 == 0 ? 1e-20f : 1.0f;
  }
  for (const bool flush : {true, false}) {
    CoreOptions options;
    options.flush_denormals = flush;
    options.tune_threads = false;  // every op on both threads
    Core core(DeviceProfile::named("trn1"), options);
    core.memory().put("x", x);
    core.memory().put("y", y);
    const auto compiled = core.compile(program(false), {});
    core.run(*compiled, {});
    EXPECT_EQ(modes(), before) << "flush " << flush;
    const Tensor out = core.read(*compiled, "out");
    const auto v = out.values<float>();
    int64_t zeros = 0;
    for (const float f : v) zeros += f == 0.0f;
    EXPECT_EQ(zeros, flush ? std::ssize(v) : 0) << "flush " << flush;
    if (!flush) {
      EXPECT_EQ(std::fpclassify(v[0]), FP_SUBNORMAL);
      EXPECT_EQ(v[1], 1e-40f);
      EXPECT_EQ(v[v.size() - 1], 1e-40f);
    }
    // Flags set before the run are put back, not cleared.
    set_flush(true);
    core.run(*compiled, {});
    for (const unsigned m : modes()) EXPECT_EQ(m & kFlush, kFlush) << "flush " << flush;
    set_flush(false);
    EXPECT_EQ(modes(), before) << "flush " << flush;
    // A run that throws after its first op ran on both threads.
    options.debug = true;
    Core checked(DeviceProfile::named("trn1"), options);
    checked.memory().put("x", x);
    checked.memory().put("y", y);
    Tensor big(DType::kF32, {kNodes, kWide});
    std::fill(big.values<float>().begin(), big.values<float>().end(), 1e30f);
    checked.memory().put("big", std::move(big));
    const auto throwing = checked.compile(program(true), {});
    EXPECT_THAT([&] { checked.run(*throwing, {}); },
                testing::ThrowsMessage<RunError>(HasSubstr("produced Inf")));
    EXPECT_EQ(modes(), before) << "flush " << flush;
  }
  // Threads that OpenMP starts inside the run (a team larger than any
  // before in this process) start with the calling thread's flags, not the
  // flushing ones, and have them after the run.
  constexpr int kNewTeam = 7;
  omp_set_num_threads(kNewTeam);
  {
    CoreOptions options;
    options.tune_threads = false;
    Core core(DeviceProfile::named("trn1"), options);
    core.memory().put("x", x);
    core.memory().put("y", y);
    core.run(*core.compile(program(false), {}), {});
    std::vector<unsigned> flags(kNewTeam, 0);
#pragma omp parallel num_threads(kNewTeam)
    flags[omp_get_thread_num()] = _mm_getcsr() & kFlush;
    EXPECT_EQ(flags, std::vector<unsigned>(kNewTeam, 0u));
  }
  omp_set_num_threads(saved_threads);
#endif
}

// Op threads (CoreOptions::tune_threads): measured on the first runs, then
// each op on one thread or all; the results are those of a core that runs
// every op on all threads, bit for bit, and OpenMP's thread count is what it
// was after every run. Wide rows (2048 features) so that the element-wise
// ops and the aggregation take their parallel paths.
TEST(Core, TunedOpThreadsKeepTheBitsAndTheThreadCount) {
  constexpr int64_t kWide = 2048;
  const Graph g = random_graph(3000, 7);
  const auto program = [] {
    Builder b("wide");
    const ValueId x = b.input("x", DType::kF32, {kNodes, kWide});
    const int32_t graph = b.graph("g", kNodes, kNodes, 3000);
    ValueId h = b.aggregate(ops::Reduce::kSum, graph, b.relu(x));
    h = b.aggregate(ops::Reduce::kMax, graph, b.leaky_relu(h, 0.2));
    b.program().value(h).name = "out";
    b.output(h);
    return b.take();
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  CoreOptions tuned_options, plain_options;
  tuned_options.trace = true;
  plain_options.tune_threads = false;
  Core tuned(DeviceProfile::named("trn1"), tuned_options);
  Core plain(DeviceProfile::named("trn1"), plain_options);
  const auto tuned_program = tuned.compile(program(), {});
  const auto plain_program = plain.compile(program(), {});
  for (Core* core : {&tuned, &plain}) {
    core->bind_graph("g", g.adj);
    core->memory().put("x", random_array({kNodes, kWide}, 8));
  }
  const std::size_t ops = tuned_program->program.ops.size();
  // Each run's threads and times per op, from the trace.
  std::vector<std::vector<int>> ran;
  std::vector<std::vector<double>> took;
  std::vector<bool> tuned_before;
  for (int run = 0; run < Core::kTuningRuns + 2; ++run) {
    tuned_before.push_back(!tuned.op_threads(*tuned_program).empty());
    const std::size_t first = tuned.trace().size();
    tuned.run(*tuned_program, {});
    plain.run(*plain_program, {});
    EXPECT_EQ(omp_get_max_threads(), 2) << run;
    ASSERT_EQ(tuned.trace().size(), first + ops);
    ran.emplace_back();
    took.emplace_back();
    for (std::size_t i = first; i < first + ops; ++i) {
      ran.back().push_back(tuned.trace()[i].threads);
      took.back().push_back(tuned.trace()[i].duration_us);
    }
    const Tensor a = tuned.read(*tuned_program, "out"), b = plain.read(*plain_program, "out");
    ASSERT_EQ(a.bytes().size(), b.bytes().size());
    EXPECT_EQ(std::memcmp(a.bytes().data(), b.bytes().data(), a.bytes().size()), 0) << "run " << run;
  }
  const std::vector<int> threads = tuned.op_threads(*tuned_program);
  ASSERT_EQ(threads.size(), ops);
  const std::vector<int> one(ops, 1), all(ops, 2);
  // The warm-up on all threads, then every op on one thread and on all, alternating.
  EXPECT_EQ(ran[0], all);
  for (int run = 1; run <= 2 * Core::kThreadSamples; ++run) {
    EXPECT_EQ(ran[run], run % 2 == 1 ? one : all) << "run " << run;
    EXPECT_FALSE(tuned_before[run]) << run;
  }
  // The median of the odd (one thread) or even runs in [first, last) of
  // value(run); the trace's times can differ from the executor's by
  // rounding, so medians closer than 1 ns decide nothing here.
  const auto median_us = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const auto median_of = [&](int first, int last, bool odd, const auto& value) {
    std::vector<double> v;
    for (int run = first; run < last; ++run) {
      if ((run % 2 == 1) == odd) v.push_back(value(run));
    }
    return median_us(std::move(v));
  };
  constexpr double kTie = 1e-3;  // us
  // Each op's count: the lower median of its one-thread and all-thread times.
  std::vector<int> want_mix(ops, 0);  // 0: a tie, either
  for (std::size_t i = 0; i < ops; ++i) {
    const auto op_us = [&](int run) { return took[run][i]; };
    const double on_one = median_of(1, 2 * Core::kThreadSamples + 1, true, op_us);
    const double on_all = median_of(1, 2 * Core::kThreadSamples + 1, false, op_us);
    if (std::abs(on_one - on_all) > kTie) want_mix[i] = on_one < on_all ? 1 : 2;
  }
  // Then blocks of every op on one thread, of the mix and of every op on
  // all threads, rotating kBlockRounds times; the plan is whichever kind's
  // median run over its blocks was shortest (on a tie the earlier kind).
  // Each block's first run is not counted.
  const int first_block = 2 * Core::kThreadSamples + 1;
  const int block = Core::kBlockRuns;
  ASSERT_EQ(first_block + Core::kBlockKinds * Core::kBlockRounds * block, Core::kTuningRuns);
  const std::vector<int> mix = ran[first_block + block];
  for (std::size_t i = 0; i < ops; ++i) {
    EXPECT_TRUE(mix[i] == want_mix[i] || want_mix[i] == 0) << "op " << i << ": " << mix[i];
  }
  const std::vector<int> kinds[] = {one, mix, all};
  std::vector<double> run_us[Core::kBlockKinds];  // [0]: one thread, [1]: the mix, [2]: all
  for (int run = first_block; run < Core::kTuningRuns; ++run) {
    const int kind = (run - first_block) / block % Core::kBlockKinds;
    EXPECT_EQ(ran[run], kinds[kind]) << "run " << run;
    EXPECT_FALSE(tuned_before[run]) << run;
    if ((run - first_block) % block != 0) {
      run_us[kind].push_back(std::accumulate(took[run].begin(), took[run].end(), 0.0));
    }
  }
  double medians[Core::kBlockKinds];
  for (int k = 0; k < Core::kBlockKinds; ++k) {
    ASSERT_EQ(run_us[k].size(), static_cast<std::size_t>(Core::kBlockRounds * (block - 1)));
    medians[k] = median_us(run_us[k]);
  }
  const double fastest = *std::min_element(medians, medians + Core::kBlockKinds);
  bool kept_a_fastest = false;  // medians within kTie of the lowest decide nothing here
  for (int k = 0; k < Core::kBlockKinds; ++k) {
    kept_a_fastest = kept_a_fastest || (threads == kinds[k] && medians[k] - fastest <= kTie);
  }
  EXPECT_TRUE(kept_a_fastest) << "one " << medians[0] << ", mix " << medians[1] << ", all " << medians[2]
                              << " us";
  for (int run = Core::kTuningRuns; run < Core::kTuningRuns + 2; ++run) {
    EXPECT_EQ(ran[run], threads) << "run " << run;
    EXPECT_TRUE(tuned_before[run]) << run;
  }
  EXPECT_TRUE(plain.op_threads(*plain_program).empty());
  // Another thread count: measured again.
  omp_set_num_threads(3);
  tuned.run(*tuned_program, {});
  EXPECT_TRUE(tuned.op_threads(*tuned_program).empty());
  EXPECT_EQ(omp_get_max_threads(), 3);
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace gnnrt::runtime
