// The compiler passes on hand-written programs: fusion and reordering
// change nothing but rounding, gradient sums fold, graph constants are
// computed once, and the verifier refuses a use before its definition.
#include "tests/runtime/core_fixture.h"

namespace gnnrt::runtime {
namespace {

using namespace core_testing;  // NOLINT: the shared graph and programs
namespace fs = std::filesystem;
using ::testing::HasSubstr;

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

}  // namespace
}  // namespace gnnrt::runtime
