// The allreduce op of a program on 1, 2 and 3 ranks (ctest runs it under
// mpirun): every rank gets the sum of the ranks' values, and the backward
// gives each rank the gradient of the total loss sum_r L_r with respect to
// its own input, computed here in closed form from every rank's inputs.
//   h_r = x_r W^T;  y = sum_r h_r;  L_r = mean(y^2) (mse against 0)
//   dL/dh_r = allreduce(dL_r/dy) = p * 2 y / n;  dL/dW on rank r = (dL/dh_r)^T x_r
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "collectives/communicator.h"
#include "runtime/npy.h"
#include "runtime/builder.h"
#include "runtime/core.h"

namespace gnnrt::runtime {
namespace {

constexpr int64_t kRows = 4, kIn = 3, kOut = 2;

float x_value(int rank, int64_t i, int64_t j) {
  return static_cast<float>(std::sin(1.0 + rank * 7.0 + i * 3.0 + j));
}

TEST(AllReduceOp, ForwardSumsAndBackwardAllReducesTheGradient) {
  auto comm = std::make_shared<collectives::Communicator>(collectives::Communicator::world());
  const int p = comm->size(), rank = comm->rank();

  Builder b("allreduce");
  const ValueId x = b.input("x", DType::kF32, {kRows, kIn});
  const ValueId w = b.parameter("w", {kOut, kIn});
  const ValueId y = b.allreduce(b.linear(x, w));
  b.program().value(y).name = "y";
  b.output(y);
  const ValueId loss = b.mse_loss(y, b.input("target", DType::kF32, {kRows, kOut}),
                                  b.input("mask", DType::kBool, {kRows}));
  CoreOptions options;
  options.communicator = comm;
  Core core(DeviceProfile::named("trn1"), options);
  Tensor xs(DType::kF32, {kRows, kIn});
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kIn; ++j) xs.values<float>()[static_cast<size_t>(i * kIn + j)] = x_value(rank, i, j);
  }
  Tensor ws(DType::kF32, {kOut, kIn});
  for (size_t k = 0; k < ws.values<float>().size(); ++k) ws.values<float>()[k] = 0.1f * static_cast<float>(k) - 0.2f;
  Tensor mask(DType::kBool, {kRows});
  for (auto& m : mask.values<uint8_t>()) m = 1;
  core.memory().put("x", xs);
  core.memory().put("w", ws);
  core.memory().put("target", Tensor(DType::kF32, {kRows, kOut}));
  core.memory().put("mask", mask);
  CompileOptions compile;
  OptimizerConfig sgd;
  sgd.kind = OptimizerConfig::Kind::kSgd;
  compile.train = TrainStep{loss, {w}, sgd, /*keep_grads=*/true};
  const auto step = core.compile(b.take(), compile);
  core.run(*step, {.step = 1, .lr = 0, .seed = 0});  // lr 0: w stays as it is

  // The closed form, from every rank's x.
  std::vector<double> ysum(kRows * kOut, 0.0);
  for (int r = 0; r < p; ++r) {
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t o = 0; o < kOut; ++o) {
        for (int64_t j = 0; j < kIn; ++j) {
          ysum[static_cast<size_t>(i * kOut + o)] += x_value(r, i, j) * ws.values<float>()[static_cast<size_t>(o * kIn + j)];
        }
      }
    }
  }
  const Tensor got_y = core.read(*step, "y");
  for (size_t k = 0; k < ysum.size(); ++k) EXPECT_NEAR(got_y.values<float>()[k], ysum[k], 1e-5) << k;
  const Tensor grad = core.read(*step, step->grads[0]);
  const double n = kRows * kOut;
  for (int64_t o = 0; o < kOut; ++o) {
    for (int64_t j = 0; j < kIn; ++j) {
      double expected = 0;
      for (int64_t i = 0; i < kRows; ++i) {
        expected += p * 2 * ysum[static_cast<size_t>(i * kOut + o)] / n * x_value(rank, i, j);
      }
      EXPECT_NEAR(grad.values<float>()[static_cast<size_t>(o * kIn + j)], expected, 1e-4) << o << "," << j;
    }
  }
  EXPECT_EQ(core.counters().collective_calls, 2);  // forward and backward
}

}  // namespace
}  // namespace gnnrt::runtime
