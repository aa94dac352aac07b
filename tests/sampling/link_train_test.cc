// Link prediction on sampled blocks end to end: the split and the training
// against the torch reference fed the same pairs and blocks
// (tests/reference/make_sampled_golden.py, which draws the split, the
// negatives and the blocks itself from the documented keys), padding that
// changes no parameter, and the link section's errors.
#include <google/protobuf/text_format.h>

#include "model/data/dataset.h"
#include "model/sampling/link_split.h"
#include "tests/sampling/sampled_fixture.h"

namespace gnnrt::model {
namespace {

using namespace sampled_testing;
const fs::path kGraph = GNNRT_TRAIN_GOLDEN_DIR "/graph";

std::vector<std::vector<int>> pairs_of(const EdgeList& l) {
  std::vector<std::vector<int>> out;
  for (int64_t i = 0; i < l.size(); ++i) out.push_back({l.src[i], l.dst[i]});
  return out;
}

class LinkTraining : public SampledTraining {};

class LinkGolden : public LinkTraining, public ::testing::WithParamInterface<std::string> {};

// The split (and the evaluation negatives) equal the reference's, pair for pair.
TEST_P(LinkGolden, SplitEqualsTheReference) {
  const proto::Job job = golden_job(GetParam());
  const Dataset d = load_dataset(kGraph.string());
  LinkSplitOptions o;
  o.val = job.link().val_fraction();
  o.test = job.link().test_fraction();
  o.disjoint_train_ratio = job.link().disjoint_train_ratio();
  o.negative_ratio = job.link().eval_negative_ratio();
  o.seed = job.seed();
  const LinkSplit s = split_links(d.num_nodes, d.src, d.dst, o);
  const nlohmann::json want = read_json(kGolden / GetParam() / "split.json");
  EXPECT_EQ(want.at("train").get<std::vector<std::vector<int>>>(), pairs_of(s.train));
  EXPECT_EQ(want.at("supervision").get<std::vector<std::vector<int>>>(), pairs_of(s.train_supervision));
  EXPECT_EQ(want.at("val").get<std::vector<std::vector<int>>>(), pairs_of(s.val));
  EXPECT_EQ(want.at("test").get<std::vector<std::vector<int>>>(), pairs_of(s.test));
  EXPECT_EQ(want.at("val_neg").get<std::vector<std::vector<int>>>(), pairs_of(s.val_negatives));
  EXPECT_EQ(want.at("test_neg").get<std::vector<std::vector<int>>>(), pairs_of(s.test_negatives));
}

// Losses and parameters after two epochs equal torch's on the same pairs and blocks.
TEST_P(LinkGolden, MatchesTorchOnTheSamePairsAndBlocks) {
  const fs::path dir = kGolden / GetParam();
  TrainResult r;
  const std::vector<double> losses = run(golden_job(GetParam()), dir / "params_init", "params", &r);
  ASSERT_TRUE(r.best_epoch == 1 || r.best_epoch == 2) << r.best_epoch;
  EXPECT_GT(r.best_val_acc, 0.0);  // an AUC was computed
  const auto expected = read_npy(dir / "losses.npy").to_vector<double>();
  const size_t steps = read_json(dir / "config.json").at("steps").get<size_t>();
  ASSERT_EQ(expected.size(), steps);
  ASSERT_EQ(losses.size(), 2u);
  const size_t per_epoch = steps / 2;
  for (size_t e = 0; e < 2; ++e) {
    double mean = 0;
    for (size_t k = 0; k < per_epoch; ++k) mean += expected[e * per_epoch + k] / static_cast<double>(per_epoch);
    EXPECT_NEAR(losses[e], mean, 1e-5 + 1e-4 * mean) << "epoch " << e + 1;
  }
  const fs::path final_params = dir / (r.best_epoch == 1 ? "params_epoch1" : "params_final");
  int compared = 0;
  ASSERT_NO_FATAL_FAILURE(expect_params_near(final_params, dir_ / "params", 1e-5, 1e-4, compared));
  EXPECT_GE(compared, 4);
}

INSTANTIATE_TEST_SUITE_P(All, LinkGolden, ::testing::Values("link_sage_dot", "link_gcn_mlp"));

// A user's module graph over the sampled schema's names (hop2.x, block1,
// block0, pairs) trains as the chain it spells out: the torch reference's
// parameters again.
TEST_F(LinkTraining, ModuleGraphOnBlocksMatchesTorch) {
  proto::Job job = golden_job("link_sage_dot");
  job.mutable_model()->clear_layer();
  const std::string text = R"(
    module { name: "conv1" input: "hop2.x" sage { edges: "block1" out: 8 } }
    module { name: "h" input: "conv1" relu {} }
    module { name: "conv2" input: "h" sage { edges: "block0" out: 8 } }
    module { name: "score" input: "conv2" edge_dot { edges: "pairs" } }
    loss_term { kind: BCE_WITH_LOGITS input: "score" target: "pairs.y" })";
  ASSERT_TRUE(google::protobuf::TextFormat::MergeFromString(text, job.mutable_model()));
  const fs::path dir = kGolden / "link_sage_dot";
  TrainResult r;
  run(job, dir / "params_init", "params", &r);
  const fs::path final_params = dir / (r.best_epoch == 1 ? "params_epoch1" : "params_final");
  int compared = 0;
  ASSERT_NO_FATAL_FAILURE(expect_params_near(final_params, dir_ / "params", 1e-5, 1e-4, compared));
  EXPECT_EQ(compared, 6);
}

// Padded pairs and rows reach no real score: tight and loose ladders give
// the same parameters (within BLAS's summation order).
TEST_F(LinkTraining, PaddingChangesNoParameter) {
  const fs::path init = kGolden / "link_sage_dot" / "params_init";
  proto::Job job = golden_job("link_sage_dot");
  job.mutable_sampling()->set_growth(1.05);
  TrainResult r;
  run(job, init, "tight", &r);
  job.mutable_sampling()->set_growth(4);
  job.mutable_sampling()->set_prefetch(0);
  run(job, init, "loose", &r);
  int compared = 0;
  ASSERT_NO_FATAL_FAILURE(expect_params_near(dir_ / "tight", dir_ / "loose", 1e-6, 1e-5, compared));
  EXPECT_EQ(compared, 6);
}

TEST_F(LinkTraining, BadLinkFieldsAreRefusedByName) {
  const auto refused = [&](const std::string& field, const std::string& value, const std::string& message) {
    expect_refused(golden_job("link_sage_dot"), field, value, message);
  };
  refused("link.val_fraction", "0.9", "link.val_fraction + link.test_fraction = 0.9 + 0.2 is above 1");
  refused("link.test_fraction", "-0.1", "link.test_fraction = -0.1");
  refused("link.negative_ratio", "-1", "link.negative_ratio = -1");
  refused("link.eval_negative_ratio", "100", "link.eval_negative_ratio = 100 asks for");
  refused("link.negative_ratio", "100", "link.negative_ratio = 100 asks for 5600 training negatives an epoch");
  refused("link.hits_k", "0", "link.hits_k = 0");
  refused("link.decoder_hidden", "0", "link.decoder_hidden[0] = 0");
}

}  // namespace
}  // namespace gnnrt::model
