// The simulated core on hand-written programs: build-time shape errors,
// the memory plan (no two live values overlap; the peak fits or compilation
// fails naming the op), the program cache (hit, miss, corrupt entry), debug
// mode naming the op that made a NaN, subnormals and tuned op threads.
#include "tests/runtime/core_fixture.h"

namespace gnnrt::runtime {
namespace {

using namespace core_testing;  // NOLINT: the shared graph and programs
namespace fs = std::filesystem;
using ::testing::HasSubstr;

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
    FAIL() << "expected a CapacityError";
  } catch (const CapacityError& e) {  // a CompileError callers can tell from the others
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
