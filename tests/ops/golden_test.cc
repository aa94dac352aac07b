// Every op against PyTorch: each golden case (tests/golden/ops, written by
// tests/reference/make_golden.py) runs through the runtime in float32 (op
// harness) and every output and input gradient must match within atol
// 1e-5, rtol 1e-4; integer outputs (max/min arg, counts) must match exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <set>

#include "tests/ops/op_harness.h"

namespace gnnrt::testing {
namespace {

class GoldenTest : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(GoldenTest, MatchesTorch) {
  const Case c = Case::load(GetParam());
  const auto inputs = float_inputs<float>(c);
  const auto upstream = upstream_gradients<float>(c);
  const auto got = run_op<float>(c, inputs, &upstream);

  std::vector<std::string> expected = c.meta.at("outputs");
  for (const std::string g : c.meta.at("grads")) expected.push_back(g);
  ASSERT_FALSE(expected.empty());
  for (const std::string& key : expected) {
    SCOPED_TRACE(c.name + ": " + key);
    const auto it = got.find(key);
    ASSERT_NE(it, got.end()) << "gnnrt produced no " << key;
    const Tensor& want_array = c.array(key);
    const auto want = want_array.to_vector<double>();
    const auto& have = it->second;
    ASSERT_EQ(have.size(), want.size());
    const bool exact = want_array.dtype() != DType::kF32 && want_array.dtype() != DType::kF64;
    int reported = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double h = have[i], w = want[i];
      const bool ok = exact ? h == w
                            : (std::isnan(w) ? std::isnan(h)
                                             : (h == w || std::abs(h - w) <= 1e-5 + 1e-4 * std::abs(w)));
      if (!ok && reported++ < 5) ADD_FAILURE() << key << "[" << i << "] = " << h << ", torch " << w;
    }
    EXPECT_EQ(reported, 0) << reported << " of " << want.size() << " elements differ";
  }
}

std::string case_name(const ::testing::TestParamInfo<std::filesystem::path>& info) {
  return info.param.parent_path().filename().string() + "_" + info.param.filename().string();
}

INSTANTIATE_TEST_SUITE_P(Ops, GoldenTest, ::testing::ValuesIn(find_cases(GNNRT_GOLDEN_DIR)),
                         case_name);

// Every op the harness can build has golden cases, and every golden case's
// op has a recipe (a case nobody runs would pass silently).
TEST(GoldenData, CoversEveryOp) {
  std::set<std::string> ops;
  for (const auto& dir : find_cases(GNNRT_GOLDEN_DIR)) ops.insert(dir.parent_path().filename());
  const auto known = harness_ops();
  for (const std::string& op : known) EXPECT_TRUE(ops.count(op)) << "no golden cases for " << op;
  for (const std::string& op : ops) {
    EXPECT_NE(std::find(known.begin(), known.end(), op), known.end()) << "no recipe for " << op;
  }
  EXPECT_GE(known.size(), 34u);
}

}  // namespace
}  // namespace gnnrt::testing
