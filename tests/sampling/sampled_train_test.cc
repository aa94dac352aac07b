// Sampled mini-batch training end to end: against the torch reference fed
// the same blocks (tests/reference/make_sampled_golden.py), the same bits
// whatever the padding, the prefetch depth or the sampler's threads, and
// the job's sampling errors.
#include "tests/sampling/sampled_fixture.h"

namespace gnnrt::model {
namespace {

using namespace sampled_testing;

class SampledGolden : public SampledTraining, public ::testing::WithParamInterface<std::string> {};

TEST_P(SampledGolden, MatchesTorchOnTheSameBlocks) {
  const fs::path dir = kGolden / GetParam();
  TrainResult r;
  const std::vector<double> losses = run(golden_job(GetParam()), dir / "params_init", "params", &r);
  const int64_t best = r.best_epoch;
  ASSERT_TRUE(best == 1 || best == 2) << best;
  const fs::path final_params = dir / (best == 1 ? "params_epoch1" : "params_final");
  const auto expected = read_npy(dir / "losses.npy").to_vector<double>();
  ASSERT_EQ(expected.size(), 6u);
  ASSERT_EQ(losses.size(), 2u);
  for (size_t e = 0; e < 2; ++e) {
    const double mean = (expected[3 * e] + expected[3 * e + 1] + expected[3 * e + 2]) / 3;
    EXPECT_NEAR(losses[e], mean, 1e-5 + 1e-4 * mean) << "epoch " << e + 1;
  }
  int compared = 0;
  ASSERT_NO_FATAL_FAILURE(expect_params_near(final_params, dir_ / "params", 1e-5, 1e-4, compared));
  EXPECT_GE(compared, 4);
}

INSTANTIATE_TEST_SUITE_P(All, SampledGolden, ::testing::Values("sage", "gat", "gcn"));

std::vector<float> params_of(const fs::path& dir) {
  std::vector<float> all;
  for (const auto& name : {"conv1.lin_l.weight", "conv1.lin_r.weight", "conv2.lin_l.weight", "conv2.lin_l.bias"}) {
    const auto v = read_npy(dir / (std::string(name) + ".npy")).to_vector<float>();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

// More padding, another prefetch depth, two sampler threads: the same
// parameters (padded rows and edges reach no real row). Not bit for bit:
// a weight's gradient sums over the padded rows in blocks that depend on
// their count (BLAS), so the last bit may differ.
TEST_F(SampledTraining, PaddingPrefetchAndThreadsChangeNoBit) {
  const fs::path init = kGolden / "sage" / "params_init";
  proto::Job job = golden_job("sage");
  job.mutable_schedule()->set_epochs(3);
  job.mutable_sampling()->set_growth(1.05);
  job.mutable_sampling()->set_prefetch(0);
  run(job, init, "tight");
  job.mutable_sampling()->set_growth(4);
  job.mutable_sampling()->set_prefetch(3);
  job.mutable_sampling()->set_threads(2);
  run(job, init, "loose");
  const auto tight = params_of(dir_ / "tight"), loose = params_of(dir_ / "loose");
  ASSERT_EQ(tight.size(), loose.size());
  for (size_t i = 0; i < tight.size(); ++i) {
    ASSERT_NEAR(tight[i], loose[i], 1e-6 + 1e-5 * std::abs(tight[i])) << "parameter value " << i;
  }
}

// Layer-wise full-neighbourhood inference (the sampled job's evaluation and
// --logits-out) equals the full-graph job's forward with the same
// parameters.
TEST_F(SampledTraining, LayerWiseInferenceEqualsTheFullGraphForward) {
  for (const std::string name : {"sage", "gat", "gcn"}) {
    proto::Job sampled = golden_job(name);
    sampled.mutable_schedule()->set_epochs(1);
    TrainOptions o = options_;
    o.params_in = kGolden / name / "params_init";
    o.params_out = dir_ / (name + "_params");
    o.logits_out = dir_ / (name + "_sampled.npy");
    const TrainResult r = train(sampled, o);
    EXPECT_GT(r.best_val_acc, 0.0) << name;

    proto::Job full = sampled;
    full.clear_sampling();
    full.mutable_schedule()->set_epochs(0);
    TrainOptions f = options_;
    f.params_in = o.params_out;
    f.logits_out = dir_ / (name + "_full.npy");
    train(full, f);
    const auto a = read_npy(o.logits_out).to_vector<double>(), b = read_npy(f.logits_out).to_vector<double>();
    ASSERT_EQ(a.size(), b.size()) << name;
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5 + 1e-5 * std::abs(b[i])) << name << " " << i;
  }
}

TEST_F(SampledTraining, BadSamplingFieldsAreRefusedByName) {
  const auto refused = [&](const std::string& field, const std::string& value, const std::string& message) {
    expect_refused(golden_job("sage"), field, value, message);
  };
  refused("sampling.fanout", "3,0", "sampling.fanout[1] = 0");
  refused("sampling.fanout", "[-2, 3]", "sampling.fanout[0] = -2");
  refused("sampling.batch_size", "0", "sampling.batch_size = 0");
  refused("sampling.growth", "1", "sampling.growth = 1");
  refused("sampling.fanout", "4,3,2", "model.layer has 2 convolutions, sampling.fanout lists 3 hops");
}

}  // namespace
}  // namespace gnnrt::model
