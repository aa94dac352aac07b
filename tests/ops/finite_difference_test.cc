// Every differentiable kernel's backward against central finite differences
// in float64: for L = sum_k <out_k, upstream_k>, dL/dx_i must equal
// (L(x + h e_i) - L(x - h e_i)) / 2h. Runs on the golden cases' inputs
// (cases with ties or -inf, where L is not differentiable, are skipped by
// their meta.json). Large inputs are probed at up to 48 spread positions.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/ops/op_harness.h"

namespace gnnrt::testing {
namespace {

double objective(const Values<double>& out, const Values<double>& upstream) {
  double l = 0;
  for (const auto& [key, up] : upstream) {
    const auto& o = out.at(key);
    for (std::size_t i = 0; i < up.size(); ++i) l += o[i] * up[i];
  }
  return l;
}

class FiniteDifferenceTest : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(FiniteDifferenceTest, BackwardMatchesCentralDifferences) {
  const Case c = Case::load(GetParam());
  if (!c.meta.at("finite_differences").get<bool>()) GTEST_SKIP() << "not differentiable here";
  auto inputs = float_inputs<double>(c);
  const auto upstream = upstream_gradients<double>(c);
  const auto analytic = run_op<double>(c, inputs, &upstream);
  constexpr double h = 1e-6;
  int checked = 0;
  for (const std::string grad_name : c.meta.at("grads")) {
    const std::string input = grad_name.substr(5);
    auto& x = inputs.at(input);
    const auto& grad = analytic.at(grad_name);
    ASSERT_EQ(grad.size(), x.size()) << grad_name;
    const std::size_t stride = std::max<std::size_t>(1, x.size() / 48);
    for (std::size_t i = 0; i < x.size(); i += stride) {
      const double saved = x[i];
      x[i] = saved + h;
      const double plus = objective(run_op<double>(c, inputs, nullptr), upstream);
      x[i] = saved - h;
      const double minus = objective(run_op<double>(c, inputs, nullptr), upstream);
      x[i] = saved;
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_NEAR(grad[i], numeric, 1e-6 + 1e-5 * std::abs(numeric))
          << c.name << " d/d " << input << "[" << i << "]";
      ++checked;
    }
  }
  if (c.meta.at("grads").empty()) GTEST_SKIP() << "no gradients";
  if (checked == 0) GTEST_SKIP() << "empty inputs";
}

std::string case_name(const ::testing::TestParamInfo<std::filesystem::path>& info) {
  return info.param.parent_path().filename().string() + "_" + info.param.filename().string();
}

INSTANTIATE_TEST_SUITE_P(Ops, FiniteDifferenceTest,
                         ::testing::ValuesIn(find_cases(GNNRT_GOLDEN_DIR)), case_name);

}  // namespace
}  // namespace gnnrt::testing
