// Accuracy on Cora's public split with the examples/ jobs, test accuracy at
// the best validation epoch, mean of seeds 0-4, 200 epochs: GCN (hidden 16)
// >= 80.5%, GAT (8 heads x 8) >= 81.5% (Kipf & Welling report 81.5, Velickovic
// et al. 83.0; PyG's examples reach about 81 and 82). SAGE and GIN are
// trained and reported with a sanity floor. Link prediction
// (examples/cora_link.pbtxt, PyG's examples/link_pred.py setup): test AUC
// at the best validation AUC >= 0.88, mean of seeds 0-2. Skipped when
// ../shared/datasets/cora is absent (a failure under CI=true); not built
// under the sanitizers (minutes).
#include <gtest/gtest.h>

#include <filesystem>

#include "model/job.h"
#include "model/training/trainer.h"
#include "tests/common/datasets.h"

namespace gnnrt::model {
namespace {

namespace fs = std::filesystem;

const fs::path kCora = fs::path(GNNRT_DATASETS_DIR) / "cora";

double mean_test_accuracy(const std::string& example, int seeds) {
  const fs::path cora = kCora;
  double sum = 0;
  for (int seed = 0; seed < seeds; ++seed) {
    proto::Job job = load_job(fs::path(GNNRT_EXAMPLES_DIR) / example);
    apply_override(job, "dataset.path=" + cora.string());
    apply_override(job, "seed=" + std::to_string(seed));
    TrainOptions options;
    options.no_cache = true;
    options.progress = false;
    const TrainResult r = train(job, options);
    std::printf("%s seed %d: best val %.4f (epoch %lld), test %.4f\n", example.c_str(), seed,
                r.best_val_acc, static_cast<long long>(r.best_epoch), r.test_acc);
    sum += r.test_acc;
  }
  const double mean = sum / seeds;
  std::printf("%s: mean test accuracy %.4f over %d seeds\n", example.c_str(), mean, seeds);
  ::testing::Test::RecordProperty(example, std::to_string(mean));
  return mean;
}

TEST(CoraAccuracy, Gcn) {
  GNNRT_REQUIRE_DATASET(kCora);
  const double acc = mean_test_accuracy("cora_gcn.pbtxt", 5);
  EXPECT_GE(acc, 0.805);
}

TEST(CoraAccuracy, Gat) {
  GNNRT_REQUIRE_DATASET(kCora);
  const double acc = mean_test_accuracy("cora_gat.pbtxt", 5);
  EXPECT_GE(acc, 0.815);
}

TEST(CoraAccuracy, LinkPrediction) {
  GNNRT_REQUIRE_DATASET(kCora);
  // The test figure is the AUC here (val_acc / test_acc carry a link job's AUCs).
  const double auc = mean_test_accuracy("cora_link.pbtxt", 3);
  EXPECT_GE(auc, 0.88);
}

TEST(CoraAccuracy, SageAndGinTrain) {
  GNNRT_REQUIRE_DATASET(kCora);
  for (const char* example : {"cora_sage.pbtxt", "cora_gin.pbtxt"}) {
    const double acc = mean_test_accuracy(example, 1);
    EXPECT_GE(acc, 0.70) << example;
  }
}

}  // namespace
}  // namespace gnnrt::model
