// Datasets: the shared Cora folder against its README's figures; malformed
// NumPy and CSV folders, each of which must fail with a DatasetError naming
// the file (and line or position) and the problem; the synthetic generator's
// invariants (symmetric, coalesced, balanced classes, Planetoid split, the
// noise it claims) and its determinism across runs and thread counts.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/data/dataset.h"
#include "runtime/npy.h"
#include "tests/common/datasets.h"

namespace gnnrt::model {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("gnnrt_model_test_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Runs `load` and checks that it throws a DatasetError containing `message`.
void expect_dataset_error(const std::function<void()>& load, const std::string& message) {
  try {
    load();
    ADD_FAILURE() << "no DatasetError; expected one containing: " << message;
  } catch (const DatasetError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << message;
  }
}

int64_t count(const std::vector<uint8_t>& mask) { return std::count(mask.begin(), mask.end(), 1); }

// ---------------------------------------------------------------------------
// NumPy folders

TEST(NpyFolder, LoadsCoraWithTheReadmeFigures) {
  const fs::path cora = fs::path(GNNRT_DATASETS_DIR) / "cora";
  GNNRT_REQUIRE_DATASET(cora);
  const Dataset d = load_dataset(cora.string());
  EXPECT_EQ(d.name, "cora");
  EXPECT_EQ(d.num_nodes, 2708);
  EXPECT_EQ(d.num_edges(), 10556);
  EXPECT_EQ(d.num_features, 1433);
  EXPECT_EQ(d.num_classes, 7);
  EXPECT_EQ(d.x.size(), 2708u * 1433u);
  EXPECT_EQ(count(d.train_mask), 140);
  EXPECT_EQ(count(d.val_mask), 500);
  EXPECT_EQ(count(d.test_mask), 1000);
  // README: train = the first 140 nodes, val = the next 500; x is 0/1 bag of words.
  for (int64_t v = 0; v < 640; ++v) EXPECT_EQ(d.train_mask[v] + d.val_mask[v], 1) << "node " << v;
  EXPECT_TRUE(std::all_of(d.x.begin(), d.x.end(), [](float v) { return v == 0.0f || v == 1.0f; }));
  // README: edges sorted by (source, target), both directions present.
  for (int64_t e = 1; e < d.num_edges(); ++e) {
    ASSERT_TRUE(std::pair(d.src[e - 1], d.dst[e - 1]) < std::pair(d.src[e], d.dst[e])) << "edge " << e;
  }
}

// A valid 4-node folder; each malformed case below changes one file of it.
constexpr int64_t kN = 4, kF = 3;
void write_valid_npy(const fs::path& dir) {
  std::vector<float> x(kN * kF);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i);
  write_npy<float>(dir / "x.npy", x, {kN, kF});
  write_npy<int64_t>(dir / "y.npy", std::vector<int64_t>{0, 2, 1, 2}, {kN});
  write_npy<int64_t>(dir / "edge_index.npy", std::vector<int64_t>{0, 1, 2, 3, 1, 2, 3, 0}, {2, 4});
  write_npy<uint8_t>(dir / "train_mask.npy", std::vector<uint8_t>{1, 1, 0, 0}, {kN});
  write_npy<uint8_t>(dir / "val_mask.npy", std::vector<uint8_t>{0, 0, 1, 0}, {kN});
  write_npy<uint8_t>(dir / "test_mask.npy", std::vector<uint8_t>{0, 0, 0, 1}, {kN});
}

TEST(NpyFolder, LoadsAValidFolderExactly) {
  TempDir dir("npy_valid");
  write_valid_npy(dir.path());
  const Dataset d = load_npy_folder(dir.path());
  EXPECT_EQ(d.name, dir.path().filename().string());
  EXPECT_EQ(d.num_nodes, kN);
  EXPECT_EQ(d.num_features, kF);
  EXPECT_EQ(d.num_classes, 3);
  EXPECT_EQ(d.x[7], 3.5f);
  EXPECT_EQ(d.y, (std::vector<int64_t>{0, 2, 1, 2}));
  EXPECT_EQ(d.src, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(d.dst, (std::vector<int64_t>{1, 2, 3, 0}));
  EXPECT_EQ(d.train_mask, (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_EQ(d.test_mask, (std::vector<uint8_t>{0, 0, 0, 1}));
}

TEST(NpyFolder, ConvertsFloat64AndInt32AndReadsAnyNonZeroMaskByteAsTrue) {
  TempDir dir("npy_convert");
  write_valid_npy(dir.path());
  write_npy<double>(dir.path() / "x.npy", std::vector<double>(kN * kF, 0.1), {kN, kF});
  write_npy<int32_t>(dir.path() / "y.npy", std::vector<int32_t>{1, 1, 0, 4}, {kN});
  write_npy<int32_t>(dir.path() / "edge_index.npy", std::vector<int32_t>{3, 3, 0, 2}, {2, 2});
  write_npy<uint8_t>(dir.path() / "val_mask.npy", std::vector<uint8_t>{0, 0, 255, 0}, {kN});
  write_npy<uint8_t>(dir.path() / "test_mask.npy", std::vector<uint8_t>{0, 0, 0, 2}, {kN});
  const Dataset d = load_npy_folder(dir.path());
  EXPECT_EQ(d.x[5], 0.1f);
  EXPECT_EQ(d.y, (std::vector<int64_t>{1, 1, 0, 4}));
  EXPECT_EQ(d.num_classes, 5);
  EXPECT_EQ(d.src, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(d.dst, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(d.val_mask, (std::vector<uint8_t>{0, 0, 1, 0}));
  EXPECT_EQ(d.test_mask, (std::vector<uint8_t>{0, 0, 0, 1}));
}

// OGB stores one label per node as [N, 1]: read as [N].
TEST(NpyFolder, ReadsLabelsOfShapeNByOne) {
  TempDir dir("npy_labels_column");
  write_valid_npy(dir.path());
  write_npy<int64_t>(dir.path() / "y.npy", std::vector<int64_t>{2, 0, 1, 1}, {kN, 1});
  const Dataset d = load_npy_folder(dir.path());
  EXPECT_EQ(d.y, (std::vector<int64_t>{2, 0, 1, 1}));
  EXPECT_EQ(d.num_classes, 3);
}

struct BadFolder {
  std::string name;
  std::function<void(const fs::path&)> corrupt;  // applied to a valid folder
  std::string message;                            // after "<dir>/"
};

const std::vector<BadFolder>& bad_npy_folders() {
  static const std::vector<BadFolder> list = {
      {"missing_file", [](const fs::path& d) { fs::remove(d / "val_mask.npy"); },
       "val_mask.npy: missing file"},
      {"not_npy", [](const fs::path& d) { write_text(d / "y.npy", "label,0\n"); },
       "y.npy: not a .npy file (bad magic string)"},
      {"edge_target_out_of_range",
       [](const fs::path& d) {
         write_npy<int64_t>(d / "edge_index.npy", std::vector<int64_t>{0, 1, 2, 1, 2, 4}, {2, 3});
       },
       "edge_index.npy: column 2 (row 1, target) holds node 4, outside [0, 4)"},
      {"edge_source_negative",
       [](const fs::path& d) {
         write_npy<int32_t>(d / "edge_index.npy", std::vector<int32_t>{0, -1, 1, 2}, {2, 2});
       },
       "edge_index.npy: column 1 (row 0, source) holds node -1, outside [0, 4)"},
      {"edge_index_shape",
       [](const fs::path& d) {
         write_npy<int64_t>(d / "edge_index.npy", std::vector<int64_t>(6, 0), {3, 2});
       },
       "edge_index.npy: shape (3, 2), expected [2, E]"},
      {"edge_index_dtype",
       [](const fs::path& d) { write_npy<float>(d / "edge_index.npy", std::vector<float>(4), {2, 2}); },
       "edge_index.npy: dtype float32, expected int64 (or int32)"},
      {"x_dtype",
       [](const fs::path& d) { write_npy<int64_t>(d / "x.npy", std::vector<int64_t>(kN * kF), {kN, kF}); },
       "x.npy: dtype int64, expected float32"},
      {"x_rank",
       [](const fs::path& d) { write_npy<float>(d / "x.npy", std::vector<float>(kN * kF), {kN * kF}); },
       "x.npy: shape (12) has rank 1, expected [N, F]"},
      {"x_no_rows", [](const fs::path& d) { write_npy<float>(d / "x.npy", std::vector<float>(), {0, kF}); },
       "x.npy: shape (0, F): a graph needs at least one node"},
      {"x_nan",
       [](const fs::path& d) {
         std::vector<float> x(kN * kF, 1.0f);
         x[2 * kF + 1] = std::nanf("");
         write_npy<float>(d / "x.npy", x, {kN, kF});
       },
       "x.npy: row 2, column 1 is nan"},
      {"x_inf",
       [](const fs::path& d) {
         std::vector<double> x(kN * kF, 1.0);
         x[2] = -HUGE_VAL;
         write_npy<double>(d / "x.npy", x, {kN, kF});
       },
       "x.npy: row 0, column 2 is -inf"},
      {"x_beyond_float32",
       [](const fs::path& d) {
         std::vector<double> x(kN * kF, 1.0);
         x[3 * kF] = 1e300;
         write_npy<double>(d / "x.npy", x, {kN, kF});
       },
       "x.npy: row 3, column 0 is 1e+300 (too large for float32)"},
      {"y_length",
       [](const fs::path& d) { write_npy<int64_t>(d / "y.npy", std::vector<int64_t>{0, 1, 2}, {3}); },
       "y.npy: shape (3), expected [N] = (4) (or [N, 1]) to match the 4 rows of x.npy"},
      {"y_two_columns",
       [](const fs::path& d) { write_npy<int64_t>(d / "y.npy", std::vector<int64_t>(2 * kN), {kN, 2}); },
       "y.npy: shape (4, 2), expected [N] = (4) (or [N, 1])"},
      {"x_no_features",
       [](const fs::path& d) { write_npy<float>(d / "x.npy", std::vector<float>(), {kN, 0}); },
       "x.npy: shape (N, 0): nodes need at least one feature"},
      {"masks_overlap",
       [](const fs::path& d) {
         write_npy<uint8_t>(d / "train_mask.npy", std::vector<uint8_t>{1, 1, 0, 0}, {kN});
         write_npy<uint8_t>(d / "test_mask.npy", std::vector<uint8_t>{0, 1, 0, 1}, {kN});
       },
       "test_mask.npy: node 1 is also in train_mask.npy: the splits must not overlap"},
      {"y_negative",
       [](const fs::path& d) { write_npy<int64_t>(d / "y.npy", std::vector<int64_t>{0, 1, -1, 2}, {kN}); },
       "y.npy: node 2 has label -1: labels must be >= 0"},
      {"y_huge",
       [](const fs::path& d) {
         write_npy<int64_t>(d / "y.npy", std::vector<int64_t>{0, int64_t{1} << 40, 1, 2}, {kN});
       },
       "y.npy: node 1 has label 1099511627776: at most 1048576 classes are supported"},
      {"y_dtype", [](const fs::path& d) { write_npy<float>(d / "y.npy", std::vector<float>(kN), {kN}); },
       "y.npy: dtype float32, expected int64 (or int32)"},
      {"mask_not_bool",
       [](const fs::path& d) { write_npy<int64_t>(d / "train_mask.npy", std::vector<int64_t>(kN), {kN}); },
       "train_mask.npy: dtype int64, expected bool"},
      {"mask_length",
       [](const fs::path& d) { write_npy<uint8_t>(d / "test_mask.npy", std::vector<uint8_t>(5), {5}); },
       "test_mask.npy: shape (5), expected [N] = (4)"},
  };
  return list;
}

class BadNpyFolder : public ::testing::TestWithParam<int> {};

TEST_P(BadNpyFolder, ThrowsDatasetErrorNamingFileAndProblem) {
  const BadFolder& b = bad_npy_folders()[GetParam()];
  TempDir dir("npy_" + b.name);
  write_valid_npy(dir.path());
  b.corrupt(dir.path());
  expect_dataset_error([&] { load_npy_folder(dir.path()); }, (dir.path() / b.message).string());
}

INSTANTIATE_TEST_SUITE_P(Npy, BadNpyFolder,
                         ::testing::Range(0, static_cast<int>(bad_npy_folders().size())),
                         [](const auto& info) { return bad_npy_folders()[info.param].name; });

TEST(NpyFolder, RejectsAMissingDirectory) {
  expect_dataset_error([] { load_npy_folder("/nonexistent/gnnrt/cora"); },
                       "/nonexistent/gnnrt/cora: not a directory");
}

// ---------------------------------------------------------------------------
// Edge-list CSV folders

TEST(EdgeListCsv, ReadsHeadersCommentsBlankLinesAndNodeRowsInAnyOrder) {
  TempDir dir("csv_valid");
  write_text(dir.path() / "edges.csv",
             "# a tiny graph\n"
             "src,dst\n"
             "0,1\n"
             " 1 , 0\n"
             "\n"
             "2,3   # trailing comment\n"
             "3,2\r\n"
             "2,2");  // self loop, no final newline
  write_text(dir.path() / "nodes.csv",
             "id,label,split,f0,f1\n"
             "3,1,test,0.5,-1\n"
             "0,0,train,1,2\n"
             "1,2,val,3,4e-1\n"
             "2,,,0,0\n");
  const Dataset d = load_edge_list_csv(dir.path());
  EXPECT_EQ(d.num_nodes, 4);
  EXPECT_EQ(d.num_features, 2);
  EXPECT_EQ(d.num_classes, 3);
  EXPECT_EQ(d.src, (std::vector<int64_t>{0, 1, 2, 3, 2}));
  EXPECT_EQ(d.dst, (std::vector<int64_t>{1, 0, 3, 2, 2}));
  EXPECT_EQ(d.x, (std::vector<float>{1, 2, 3, 0.4f, 0, 0, 0.5f, -1}));
  EXPECT_EQ(d.y, (std::vector<int64_t>{0, 2, 0, 1}));
  EXPECT_EQ(d.train_mask, (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_EQ(d.val_mask, (std::vector<uint8_t>{0, 1, 0, 0}));
  EXPECT_EQ(d.test_mask, (std::vector<uint8_t>{0, 0, 0, 1}));
}

TEST(EdgeListCsv, WithoutNodesCsvGivesOneConstantFeatureAndNoLabels) {
  TempDir dir("csv_edges_only");
  write_text(dir.path() / "edges.csv", "0,5\n5,2\n");
  const Dataset d = load_dataset(dir.path().string());
  EXPECT_EQ(d.num_nodes, 6);
  EXPECT_EQ(d.num_features, 1);
  EXPECT_EQ(d.num_classes, 1);
  EXPECT_EQ(d.x, std::vector<float>(6, 1.0f));
  EXPECT_EQ(d.y, std::vector<int64_t>(6, 0));
  EXPECT_EQ(count(d.train_mask) + count(d.val_mask) + count(d.test_mask), 0);
}

TEST(EdgeListCsv, NodeRowsWithoutFeaturesGetTheConstantFeature) {
  TempDir dir("csv_no_features");
  write_text(dir.path() / "edges.csv", "0,1\n");
  write_text(dir.path() / "nodes.csv", "1,1,val\n0,0,train\n2,,\n");
  const Dataset d = load_edge_list_csv(dir.path());
  EXPECT_EQ(d.num_nodes, 3);
  EXPECT_EQ(d.num_features, 1);
  EXPECT_EQ(d.x, std::vector<float>(3, 1.0f));
  EXPECT_EQ(d.num_classes, 2);
}

struct BadCsv {
  std::string name;
  std::string edges;                 // contents of edges.csv
  std::optional<std::string> nodes;  // contents of nodes.csv, if any
  std::string message;               // after "<dir>/"
};

const std::vector<BadCsv>& bad_csv_folders() {
  static const std::vector<BadCsv> list = {
      {"three_fields", "0,1\n1,2,3\n", std::nullopt, "edges.csv:2: 3 field(s), expected src,dst"},
      {"not_an_id", "0,1\n\n# c\n1,x\n", std::nullopt, "edges.csv:4: dst 'x' is not a node id"},
      {"negative_id", "0,-3\n", std::nullopt, "edges.csv:1: dst '-3' is not a node id"},
      {"huge_id", "4294967296,0\n", std::nullopt, "edges.csv:1: src '4294967296' is not a node id"},
      {"header_only_first", "0,1\nsrc,dst\n", std::nullopt, "edges.csv:2: src 'src' is not a node id"},
      {"edge_beyond_nodes", "0,1\n1,2\n", "0,0,\n1,0,\n",
       "edges.csv:2: dst 2 is outside [0, 2) (the ids of nodes.csv)"},
      {"no_nodes_at_all", "# nothing\n", std::nullopt,
       "edges.csv: no edges and no nodes.csv: the graph has no nodes"},
      {"nodes_duplicate_id", "0,1\n", "0,0,train\n1,0,\n0,1,test\n", "nodes.csv:3: id 0 repeats line 1"},
      {"nodes_id_gap", "0,1\n", "0,0,\n\n2,0,\n",
       "nodes.csv:3: id 2 but the file has 2 rows: ids must be 0..1"},
      {"nodes_bad_split", "0,0\n", "0,0,training\n",
       "nodes.csv:1: split 'training' is not train, val, test or empty"},
      {"nodes_split_without_label", "0,0\n", "0,,train\n",
       "nodes.csv:1: node 0 is in split 'train' but has no label"},
      {"nodes_bad_label", "0,0\n", "0,-1,\n", "nodes.csv:1: label '-1' is not a class id"},
      {"nodes_ragged_features", "0,1\n", "id,label,split,f0\n0,0,,1\n1,0,,1,2\n",
       "nodes.csv:3: 2 feature value(s), but line 2 has 1"},
      {"nodes_nan_feature", "0,0\n", "0,0,,nan\n", "nodes.csv:1: feature f0 = 'nan' is not a finite float32"},
      {"nodes_text_feature", "0,0\n", "0,0,,0.5,abc\n",
       "nodes.csv:1: feature f1 = 'abc' is not a finite float32"},
      {"nodes_too_few_fields", "0,0\n", "0,1\n", "nodes.csv:1: 2 field(s), expected id,label,split"},
      {"nodes_empty", "0,0\n", "id,label,split\n", "nodes.csv: no node rows"},
  };
  return list;
}

class BadCsvFolder : public ::testing::TestWithParam<int> {};

TEST_P(BadCsvFolder, ThrowsDatasetErrorNamingFileLineAndProblem) {
  const BadCsv& b = bad_csv_folders()[GetParam()];
  TempDir dir("csv_" + b.name);
  write_text(dir.path() / "edges.csv", b.edges);
  if (b.nodes) write_text(dir.path() / "nodes.csv", *b.nodes);
  expect_dataset_error([&] { load_edge_list_csv(dir.path()); }, (dir.path() / b.message).string());
}

INSTANTIATE_TEST_SUITE_P(Csv, BadCsvFolder,
                         ::testing::Range(0, static_cast<int>(bad_csv_folders().size())),
                         [](const auto& info) { return bad_csv_folders()[info.param].name; });

TEST(EdgeListCsv, RejectsAFolderWithoutEdgesCsv) {
  TempDir dir("csv_missing");
  write_text(dir.path() / "nodes.csv", "0,0,\n");
  expect_dataset_error([&] { load_edge_list_csv(dir.path()); },
                       (dir.path() / "edges.csv: missing file").string());
}

// ---------------------------------------------------------------------------
// load_dataset dispatch

TEST(LoadDataset, DispatchesOnPrefixAndFolderContents) {
  TempDir npy("dispatch_npy");
  write_valid_npy(npy.path());
  write_text(npy.path() / "edges.csv", "0,9\n");  // x.npy wins over edges.csv
  EXPECT_EQ(load_dataset(npy.path().string()).num_nodes, kN);
  EXPECT_EQ(load_dataset("npy:" + npy.path().string()).num_nodes, kN);
  EXPECT_EQ(load_dataset("csv:" + npy.path().string()).num_nodes, 10);

  TempDir csv("dispatch_csv");
  write_text(csv.path() / "edges.csv", "0,2\n");
  EXPECT_EQ(load_dataset(csv.path().string()).num_nodes, 3);

  const Dataset s = load_dataset("synthetic:nodes=50,classes=2");
  EXPECT_EQ(s.name, "synthetic");
  EXPECT_EQ(s.num_nodes, 50);

  TempDir empty("dispatch_empty");
  expect_dataset_error([&] { load_dataset(empty.path().string()); },
                       "holds neither x.npy (a NumPy dataset folder) nor edges.csv");
  expect_dataset_error([] { load_dataset("/nonexistent/gnnrt"); }, "/nonexistent/gnnrt: not a dataset");
  expect_dataset_error([] { load_dataset("npy:/nonexistent/gnnrt"); }, "/nonexistent/gnnrt: not a directory");
}

// ---------------------------------------------------------------------------
// Synthetic generator

void expect_same_bytes(const Dataset& a, const Dataset& b) {
  ASSERT_EQ(a.x.size(), b.x.size());
  EXPECT_EQ(std::memcmp(a.x.data(), b.x.data(), a.x.size() * sizeof(float)), 0);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.src, b.src);
  EXPECT_EQ(a.dst, b.dst);
  EXPECT_EQ(a.train_mask, b.train_mask);
  EXPECT_EQ(a.val_mask, b.val_mask);
  EXPECT_EQ(a.test_mask, b.test_mask);
}

// FNV-1a over every array: pins the generator's output across machines,
// compilers and library versions.
uint64_t fingerprint(const Dataset& d) {
  uint64_t h = 14695981039346656037ull;
  const auto mix = [&](const auto& v) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (std::size_t i = 0; i < v.size() * sizeof(v[0]); ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  mix(d.x);
  mix(d.y);
  mix(d.src);
  mix(d.dst);
  mix(d.train_mask);
  mix(d.val_mask);
  mix(d.test_mask);
  return h;
}

TEST(Synthetic, SameSpecGivesTheSameBytesOnAnyThreadCount) {
  const SyntheticSpec spec = parse_synthetic_spec("synthetic:nodes=3000,avg_degree=7,features=10,seed=3");
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Dataset one = make_synthetic(spec);
  omp_set_num_threads(3);
  const Dataset three = make_synthetic(spec);
  const Dataset again = make_synthetic(spec);
  omp_set_num_threads(threads);
  expect_same_bytes(one, three);
  expect_same_bytes(three, again);
}

TEST(Synthetic, OutputIsPinned) {
  // The same on GCC 12 at -O0..-O3, with and without -march=native, under
  // ASan/UBSan and with clang 14. A change here changes every synthetic
  // dataset: update the values knowingly.
  EXPECT_EQ(fingerprint(load_dataset("synthetic:nodes=300,features=6,seed=42")), 10759399046651064210ull);
  EXPECT_EQ(fingerprint(load_dataset("synthetic")), 1824686751513391557ull);
}

TEST(Synthetic, SeedsAndKeysChangeTheOutput) {
  const Dataset a = load_dataset("synthetic:nodes=500,seed=1");
  const Dataset b = load_dataset("synthetic:nodes=500,seed=2");
  EXPECT_NE(a.src, b.src);
  EXPECT_NE(a.dst, b.dst);
  EXPECT_NE(a.y, b.y);
  EXPECT_NE(a.x, b.x);
  EXPECT_NE(a.train_mask, b.train_mask);
  EXPECT_NE(fingerprint(a), fingerprint(load_dataset("synthetic:nodes=500,seed=1,signal=0.2")));
}

// Sorted strictly by (src, dst) (so no duplicates), no self loops, every
// edge present in both directions.
void expect_coalesced_symmetric(const Dataset& d) {
  ASSERT_EQ(d.src.size(), d.dst.size());
  std::vector<std::pair<int64_t, int64_t>> edges(d.src.size());
  for (int64_t e = 0; e < d.num_edges(); ++e) {
    ASSERT_TRUE(d.src[e] >= 0 && d.src[e] < d.num_nodes && d.dst[e] >= 0 && d.dst[e] < d.num_nodes);
    ASSERT_NE(d.src[e], d.dst[e]) << "self loop at edge " << e;
    edges[e] = {d.src[e], d.dst[e]};
    if (e > 0) {
      ASSERT_LT(edges[e - 1], edges[e]) << "edge " << e << " out of order or duplicate";
    }
  }
  for (const auto& [s, t] : edges) {
    ASSERT_TRUE(std::binary_search(edges.begin(), edges.end(), std::pair(t, s))) << s << " -> " << t;
  }
}

double same_class_fraction(const Dataset& d) {
  int64_t same = 0;
  for (int64_t e = 0; e < d.num_edges(); ++e) same += d.y[d.src[e]] == d.y[d.dst[e]];
  return static_cast<double>(same) / static_cast<double>(d.num_edges());
}

TEST(Synthetic, DefaultsAreACoalescedSymmetricHomophilousGraph) {
  const Dataset d = load_dataset("synthetic");
  EXPECT_EQ(d.num_nodes, 2000);
  EXPECT_EQ(d.num_features, 64);
  EXPECT_EQ(d.num_classes, 5);
  EXPECT_EQ(d.x.size(), 2000u * 64u);
  expect_coalesced_symmetric(d);
  // Each node draws 5 edges and receives about 5; few are duplicates.
  const double degree = static_cast<double>(d.num_edges()) / static_cast<double>(d.num_nodes);
  EXPECT_GT(degree, 9.8);
  EXPECT_LE(degree, 10.0);
  EXPECT_NEAR(same_class_fraction(d), 0.8, 0.02);
}

TEST(Synthetic, EdgeCasesStayCoalescedAndSymmetric) {
  for (const char* spec : {"synthetic:nodes=300,avg_degree=7", "synthetic:nodes=50,classes=1,avg_degree=60",
                           "synthetic:nodes=40,classes=40", "synthetic:nodes=1,classes=1", "synthetic:nodes=99,avg_degree=0",
                           "synthetic:nodes=500,homophily=0", "synthetic:nodes=500,homophily=1"}) {
    SCOPED_TRACE(spec);
    const Dataset d = load_dataset(spec);
    expect_coalesced_symmetric(d);
  }
  EXPECT_EQ(load_dataset("synthetic:nodes=99,avg_degree=0").num_edges(), 0);
  EXPECT_EQ(same_class_fraction(load_dataset("synthetic:nodes=500,homophily=0")), 0.0);
  EXPECT_EQ(same_class_fraction(load_dataset("synthetic:nodes=500,homophily=1")), 1.0);
  // 50 nodes drawing 30 of 49 others each: a pair is missed by both ends with
  // probability (48/49)^60 = 0.29, so about 71% of the 50 * 49 entries exist.
  const Dataset dense = load_dataset("synthetic:nodes=50,classes=1,avg_degree=60");
  EXPECT_GT(dense.num_edges(), 50 * 49 * 65 / 100);
  EXPECT_LT(dense.num_edges(), 50 * 49 * 77 / 100);
}

TEST(Synthetic, ClassesAreBalanced) {
  const Dataset d = load_dataset("synthetic:nodes=1003,classes=7");
  std::vector<int64_t> size(7, 0);
  for (const int64_t c : d.y) ++size[c];
  EXPECT_EQ(*std::max_element(size.begin(), size.end()), 144);
  EXPECT_EQ(*std::min_element(size.begin(), size.end()), 143);
}

void expect_split(const Dataset& d, int64_t per_class, int64_t val, int64_t test) {
  std::vector<int64_t> train_of_class(d.num_classes, 0);
  for (int64_t v = 0; v < d.num_nodes; ++v) {
    ASSERT_LE(d.train_mask[v] + d.val_mask[v] + d.test_mask[v], 1) << "node " << v << " in two splits";
    train_of_class[d.y[v]] += d.train_mask[v];
  }
  EXPECT_EQ(train_of_class, std::vector<int64_t>(d.num_classes, per_class));
  EXPECT_EQ(count(d.val_mask), val);
  EXPECT_EQ(count(d.test_mask), test);
}

TEST(Synthetic, SplitIsPlanetoidLikeAndShrinksForSmallGraphs) {
  expect_split(load_dataset("synthetic"), 20, 500, 1000);
  // need = 20 * 5 + 1500 = 1600 > 100 nodes: all three scaled by 100 / 1600.
  expect_split(load_dataset("synthetic:nodes=100"), 1, 31, 62);
  // 10 nodes: one training node per class, the rest split between val and test.
  expect_split(load_dataset("synthetic:nodes=10"), 1, 3, 2);
  expect_split(load_dataset("synthetic:nodes=5000,classes=3,train_per_class=7,num_val=11,num_test=0"), 7, 11, 0);
}

TEST(Synthetic, FeaturesAreClassMeansPlusGaussianNoise) {
  // No noise: nodes of one class share a row, classes differ.
  const Dataset clean = load_dataset("synthetic:nodes=60,classes=3,features=5,feature_noise=0,signal=1");
  for (int64_t v = 0; v < clean.num_nodes; ++v) {
    for (int64_t u = 0; u < v; ++u) {
      const bool same_row = std::equal(clean.x.begin() + v * 5, clean.x.begin() + v * 5 + 5, clean.x.begin() + u * 5);
      EXPECT_EQ(same_row, clean.y[v] == clean.y[u]) << "nodes " << u << ", " << v;
    }
  }
  // No signal: x is N(0, noise^2); check the moments and the one-sigma mass.
  const Dataset noise = load_dataset("synthetic:nodes=20000,features=16,signal=0,feature_noise=2");
  double sum = 0, sum_sq = 0;
  int64_t within_sigma = 0;
  for (const float v : noise.x) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
    within_sigma += std::abs(v) < 2.0f;
  }
  const double n = static_cast<double>(noise.x.size());
  EXPECT_NEAR(sum / n, 0.0, 0.015);
  EXPECT_NEAR(std::sqrt(sum_sq / n), 2.0, 0.01);
  EXPECT_NEAR(static_cast<double>(within_sigma) / n, 0.6827, 0.003);
}

TEST(Synthetic, SpecParsesEveryKeyAndRoundTrips) {
  EXPECT_EQ(parse_synthetic_spec("synthetic"), SyntheticSpec{});
  EXPECT_EQ(parse_synthetic_spec("synthetic:"), SyntheticSpec{});
  const SyntheticSpec s = parse_synthetic_spec(
      "synthetic:nodes=100,classes=4,avg_degree=6,features=8,seed=18446744073709551615,"
      "homophily=0.55,feature_noise=2.5,signal=0.25,train_per_class=3,num_val=10, num_test = 20");
  EXPECT_EQ(s.nodes, 100);
  EXPECT_EQ(s.classes, 4);
  EXPECT_EQ(s.avg_degree, 6);
  EXPECT_EQ(s.features, 8);
  EXPECT_EQ(s.seed, 18446744073709551615ull);
  EXPECT_EQ(s.homophily, 0.55);
  EXPECT_EQ(s.feature_noise, 2.5);
  EXPECT_EQ(s.signal, 0.25);
  EXPECT_EQ(s.train_per_class, 3);
  EXPECT_EQ(s.num_val, 10);
  EXPECT_EQ(s.num_test, 20);
  EXPECT_EQ(parse_synthetic_spec(to_string(s)), s);
  EXPECT_EQ(parse_synthetic_spec(to_string(SyntheticSpec{})), SyntheticSpec{});
}

TEST(Synthetic, BadSpecsNameTheKeyAndValue) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"synthetic:nodez=5", "synthetic spec 'synthetic:nodez=5': unknown key 'nodez' (keys: nodes, classes,"},
      {"synthetic:nodes=abc", "nodes='abc' is not an integer"},
      {"synthetic:nodes=1e6", "nodes='1e6' is not an integer"},
      {"synthetic:seed=-1", "seed='-1' is not a non-negative integer"},
      {"synthetic:homophily=high", "homophily='high' is not a number"},
      {"synthetic:homophily=1.5", "homophily=1.5 is out of range: 0 <= homophily <= 1"},
      {"synthetic:feature_noise=nan", "feature_noise=nan is out of range"},
      {"synthetic:classes=0", "classes=0 is out of range"},
      {"synthetic:nodes=10,classes=11", "classes=11 is out of range: 1 <= classes <= min(nodes, 2^20)"},
      {"synthetic:nodes=3000000000", "nodes=3000000000 is out of range"},
      {"synthetic:nodes=1000000,features=100000", "features=100000 is out of range"},
      {"synthetic:num_val=-1", "num_val=-1 is out of range"},
      {"synthetic:nodes=5,nodes=6", "key 'nodes' is given twice"},
      {"synthetic:nodes", "'nodes' is not key=value"},
      {"synthetic:nodes=5,", "'' is not key=value"},
      {"synthetics", "expected synthetic or synthetic:key=value,..."},
  };
  for (const auto& [spec, message] : cases) {
    SCOPED_TRACE(spec);
    expect_dataset_error([&] { parse_synthetic_spec(spec); }, message);
  }
  SyntheticSpec direct;
  direct.homophily = -0.1;
  expect_dataset_error([&] { make_synthetic(direct); }, "homophily=-0.1 is out of range");
}

}  // namespace
}  // namespace gnnrt::model
