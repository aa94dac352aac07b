// What the runtime's program tests share: a random graph, random arrays
// and a two-layer program over them.
#pragma once

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

namespace gnnrt::runtime::core_testing {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

inline constexpr int64_t kNodes = 50, kFeatures = 24, kHidden = 6;

// A random graph (with duplicates and an isolated node 0) and its edges.
struct Graph {
  std::vector<int32_t> src, dst;
  std::shared_ptr<const Core::Adjacency> adj;
};

inline Graph random_graph(int64_t edges, uint32_t seed) {
  Graph g;
  for (int64_t e = 0; e < edges; ++e) {
    const ops::RngWords w = ops::philox(seed, 0, {static_cast<uint64_t>(e), 0, 0, 0});
    g.src.push_back(1 + static_cast<int32_t>(ops::below(w[0], kNodes - 1)));
    g.dst.push_back(1 + static_cast<int32_t>(ops::below(w[1], kNodes - 1)));
  }
  g.adj = std::make_shared<const Core::Adjacency>(Core::Adjacency::build(g.src, g.dst, kNodes, kNodes));
  return g;
}

inline Tensor random_array(std::vector<int64_t> shape, uint32_t seed) {
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
inline OutRun run_out(const Graph& g, bool debug, Program program,
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
inline Program two_layers(int64_t edges) {
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


}  // namespace gnnrt::runtime::core_testing
