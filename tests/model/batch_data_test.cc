// Batch datasets: bad arrays, labels and manifests refused naming the file,
// field and position; non-finite values in parameters and jobs refused; the
// synthetic molecules and scenes deterministic and shaped as documented; a
// graph too large for every bucket is an error.
#include "tests/model/batch_fixture.h"

namespace gnnrt::model {
namespace {

using namespace batch_testing;  // NOLINT: the shared fixture and helpers
namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A copy of the hetero dataset with one array replaced.
class BadData : public Batch {
 protected:
  fs::path copy() {
    const fs::path d = dir_ / "data";
    fs::copy(kGolden / "hetero" / "data", d);
    return d;
  }
  std::string load_error(const fs::path& d) {
    try {
      load_batch_folder(d);
    } catch (const DatasetError& e) {
      return e.what();
    }
    return "no error";
  }
};

TEST_F(BadData, EachProblemNamesTheFileFieldAndPosition) {
  fs::path d = copy();
  auto ptr = read_npy(d / "a.ptr.npy").to_vector<int64_t>();
  const auto good_ptr = ptr;
  std::swap(ptr[2], ptr[3]);
  write_npy<int64_t>(d / "a.ptr.npy", ptr, {static_cast<int64_t>(ptr.size())});
  EXPECT_THAT(load_error(d), HasSubstr("a.ptr.npy (node_set a ptr): offsets not monotone: offset 2"));
  ptr = good_ptr;
  ptr.back() += 3;
  write_npy<int64_t>(d / "a.ptr.npy", ptr, {static_cast<int64_t>(ptr.size())});
  EXPECT_THAT(load_error(d), HasSubstr("features has shape"));
  write_npy<int64_t>(d / "a.ptr.npy", good_ptr, {static_cast<int64_t>(ptr.size())});

  auto x = read_npy(d / "a.x.npy");
  auto xv = x.to_vector<float>();
  xv[2 * 6 + 1] = std::nanf("");
  write_npy<float>(d / "a.x.npy", xv, x.shape());
  EXPECT_THAT(load_error(d), HasSubstr("a.x.npy (node_set a features): nan at row 2, column 1"));
  write_npy(d / "a.x.npy", x);

  auto ei = read_npy(d / "aa.edge_index.npy");
  auto ev = ei.to_vector<int64_t>();
  const auto good_ei = ev;
  ev[0] = good_ptr.back() - 1;  // edge 0's source in the last graph
  write_npy<int64_t>(d / "aa.edge_index.npy", ev, ei.shape());
  EXPECT_THAT(load_error(d), HasSubstr("edge set 'aa': edge 0 of graph 0 joins a row"));
  ev.resize(ev.size() - 1);
  write_npy<int64_t>(d / "aa.edge_index.npy", ev, {static_cast<int64_t>(ev.size())});
  EXPECT_THAT(load_error(d), HasSubstr("aa.edge_index.npy (edge_set aa edge_index): has shape"));
  write_npy(d / "aa.edge_index.npy", ei);

  std::string manifest = read_text(d / "manifest.pbtxt");
  std::ofstream(d / "manifest.pbtxt") << manifest << "edge_set { source: \"a\" relation: \"b\" destination: \"b\" }\n";
  EXPECT_THAT(load_error(d), HasSubstr("relation 'b' may not contain '.', be 'graph' or a node set's name"));
  std::ofstream(d / "manifest.pbtxt") << manifest << "edge_set { source: \"a\" relation: \"ac\" destination: \"c\" }\n";
  EXPECT_THAT(load_error(d), HasSubstr("edge_set[2]: destination 'c' is not a node set"));
  std::ofstream(d / "manifest.pbtxt") << manifest << "edge_set { source: \"a\" relation: \"ax\" destination: \"b\" }\n";
  EXPECT_THAT(load_error(d), HasSubstr("ax.edge_index.npy (edge_set ax edge_index): missing"));
  std::ofstream(d / "manifest.pbtxt") << manifest;

  auto y = read_npy(d / "graph.y.npy");
  auto yv = y.to_vector<float>();
  yv[3] = INFINITY;
  write_npy<float>(d / "graph.y.npy", yv, y.shape());
  EXPECT_THAT(load_error(d), HasSubstr("graph.y.npy (graph_target): inf at row 3, column 0"));
  yv.pop_back();
  write_npy<float>(d / "graph.y.npy", yv, {static_cast<int64_t>(yv.size()), 1});
  EXPECT_THAT(load_error(d), HasSubstr("targets has shape"));
}

// Integer labels at their dtype's extremes: refused at load, naming the
// file and the row (INT64_MAX once passed the load and failed at the first
// step as a position in the batch, and the launcher restarted it); a label
// the model has no logit for: refused when the program is built, naming
// where the largest label is.
TEST_F(BadData, LabelsAreCheckedAgainstTheirRangeAndTheClassCount) {
  const fs::path d = dir_ / "classes";
  fs::copy(kGolden / "graph_classes" / "data", d);
  const Tensor y = read_npy(d / "graph.y.npy");
  auto labels = y.to_vector<int64_t>();
  const auto good = labels;
  labels[3] = std::numeric_limits<int64_t>::max();
  write_npy<int64_t>(d / "graph.y.npy", labels, y.shape());
  EXPECT_THAT(load_error(d), HasSubstr("graph.y.npy (graph_target): label 9223372036854775807 at row 3: at most "
                                       "1048576 classes are supported"));
  labels[3] = std::numeric_limits<int64_t>::min();
  write_npy<int64_t>(d / "graph.y.npy", labels, y.shape());
  EXPECT_THAT(load_error(d), HasSubstr("graph.y.npy (graph_target): label -9223372036854775808 at row 3 is negative"));
  labels[3] = int64_t{1} << 62;
  write_npy<int64_t>(d / "graph.y.npy", labels, y.shape());
  EXPECT_THAT(load_error(d), HasSubstr("label 4611686018427387904 at row 3: at most"));
  labels = good;
  labels[4] = 7;  // the model gives 3 logits
  write_npy<int64_t>(d / "graph.y.npy", labels, y.shape());
  proto::Job job = golden_job("graph_classes");
  apply_override(job, "dataset.path=" + d.string());
  EXPECT_THAT([&] { train(job, options_); },
              testing::ThrowsMessage<std::invalid_argument>(HasSubstr(
                  "input 'cls' gives 3 logits, the target's labels go up to 7 (" + (d / "graph.y.npy").string() +
                  " (graph_target) row 4)")));
}

// A manifest that does not parse: the file, line and column in the error.
TEST_F(BadData, AManifestSyntaxErrorNamesTheLineAndColumn) {
  const fs::path d = copy();
  std::string manifest = read_text(d / "manifest.pbtxt");
  std::ofstream(d / "manifest.pbtxt") << manifest << "edge_set { source: \"a\" relation \"b\" }\n";
  const int line = static_cast<int>(std::count(manifest.begin(), manifest.end(), '\n')) + 1;
  EXPECT_THAT(load_error(d), HasSubstr(fmt::format("{}: not a valid BatchManifest: line {}, column 33: Expected \":\"",
                                                   (d / "manifest.pbtxt").string(), line)));
}

// A parameter file holding NaN or Inf, or float64 beyond float32: refused
// naming the key and the position, for module graphs and the layer chain.
TEST_F(Batch, NonFiniteParametersAreRefusedNamingKeyAndPosition) {
  const fs::path c = kGolden / "graph_classes";
  const fs::path in = dir_ / "params";
  fs::copy(c / "params_init", in);
  const Tensor w = read_npy(in / "cls.weight.npy");
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    auto v = w.to_vector<float>();
    v[1 * w.shape()[1] + 2] = bad;
    write_npy<float>(in / "cls.weight.npy", v, w.shape());
    options_.params_in = in;
    EXPECT_THAT([&] { train(golden_job("graph_classes"), options_); },
                testing::ThrowsMessage<std::invalid_argument>(
                    HasSubstr(fmt::format("--params-in {}: cls.weight[1, 2] is {}", (in / "cls.weight.npy").string(),
                                          bad))));
  }
  // A directory named like the key's file: its path and what it is.
  fs::remove(in / "cls.weight.npy");
  fs::create_directories(in / "cls.weight.npy");
  EXPECT_THAT([&] { train(golden_job("graph_classes"), options_); },
              testing::ThrowsMessage<std::runtime_error>(HasSubstr((in / "cls.weight.npy").string() + ": a directory, not a file")));
  fs::remove(in / "cls.weight.npy");
  const auto narrow = w.to_vector<float>();
  std::vector<double> wide(narrow.begin(), narrow.end());
  wide[0] = 1e300;
  write_npy<double>(in / "cls.weight.npy", wide, w.shape());
  EXPECT_THAT([&] { train(golden_job("graph_classes"), options_); },
              testing::ThrowsMessage<std::invalid_argument>(HasSubstr("cls.weight[0, 0] is 1e+300 (too large for float32)")));
}

// Non-finite hyper-parameters, anywhere in the job, are refused at validation.
TEST(JobValidation, NonFiniteValuesAreRefusedNamingTheField) {
  proto::Job job = golden_job("graph_classes");
  apply_override(job, "optimizer.weight_decay=nan");
  EXPECT_THAT([&] { validate(job); },
              testing::ThrowsMessage<JobError>(HasSubstr("job: optimizer.weight_decay = nan is not a finite number")));
  job = golden_job("graph_classes");
  apply_override(job, "optimizer.lr=inf");
  EXPECT_THAT([&] { validate(job); },
              testing::ThrowsMessage<JobError>(HasSubstr("job: optimizer.lr = inf is not a finite number")));
  job = golden_job("graph_classes");
  apply_override(job, "model.loss_term[1].weight=-inf");
  EXPECT_THAT([&] { validate(job); },
              testing::ThrowsMessage<JobError>(HasSubstr("job: model.loss_term[1].weight = -inf is not a finite number")));
  job = golden_job("graph_classes");
  apply_override(job, "batching.growth=nan");
  EXPECT_THAT([&] { validate(job); }, testing::ThrowsMessage<JobError>(HasSubstr("batching.growth = nan")));
}

TEST(Molecules, AreDeterministicAndShapedLikeZinc) {
  const BatchDataset a = make_molecules(parse_molecule_spec("molecules:graphs=2000,seed=4"));
  const BatchDataset b = make_molecules(parse_molecule_spec("molecules:graphs=2000,seed=4"));
  EXPECT_EQ(a.node_sets[0].x, b.node_sets[0].x);
  EXPECT_EQ(a.edge_sets[0].src, b.edge_sets[0].src);
  EXPECT_EQ(a.graph_y.values, b.graph_y.values);
  const double nodes = static_cast<double>(a.node_sets[0].rows()) / 2000;
  const double edges = static_cast<double>(a.edge_sets[0].count()) / 2000;
  EXPECT_NEAR(nodes, 23, 1.5);
  EXPECT_NEAR(edges, 50, 5);
  EXPECT_THROW(parse_molecule_spec("molecules:graphs=0"), DatasetError);
  EXPECT_THROW(parse_molecule_spec("molecules:colour=3"), DatasetError);
  // Round trip through a folder.
  const fs::path d = fs::path(testing::TempDir()) / "gnnrt_molecules_folder";
  fs::remove_all(d);
  write_batch_folder(a, d);
  const BatchDataset c = load_batch_folder(d);
  EXPECT_EQ(c.node_sets[0].x, a.node_sets[0].x);
  EXPECT_EQ(c.edge_sets[0].dst, a.edge_sets[0].dst);
  EXPECT_EQ(c.graph_y.values, a.graph_y.values);
  fs::remove_all(d);
}

// Synthetic scenes: deterministic; within the caps; every pair within a
// scene connected (VectorWorld's default), none across scenes; each lane
// pair one connection type, successors one segment along.
TEST(Scenes, AreDeterministicFullyConnectedAndTyped) {
  const SceneSpec spec = parse_scene_spec("scenes:scenes=12,min_lanes=5,max_lanes=40,max_agents=30,seed=3");
  const BatchDataset a = make_scenes(spec);
  const BatchDataset b = make_scenes(spec);
  EXPECT_EQ(a.node_sets[0].x, b.node_sets[0].x);
  EXPECT_EQ(a.node_sets[1].x, b.node_sets[1].x);
  EXPECT_EQ(a.edge_sets[0].x, b.edge_sets[0].x);
  ASSERT_EQ(a.node_sets.size(), 3u);
  ASSERT_EQ(a.edge_sets.size(), 4u);
  const NodeSet& lane = a.node_sets[0];
  const NodeSet& agent = a.node_sets[1];
  EXPECT_EQ(lane.width, kLaneWidth);
  EXPECT_EQ(agent.width, kAgentWidth);
  std::set<int64_t> lane_counts;
  for (int64_t g = 0; g < a.num_graphs; ++g) {
    const int64_t nl = lane.rows_of(g), na = agent.rows_of(g);
    EXPECT_GE(nl, 5);
    EXPECT_LE(nl, 40);
    EXPECT_GE(na, 4);
    EXPECT_LE(na, 30);
    lane_counts.insert(nl);
    EXPECT_EQ(a.edge_sets[0].edges_of(g), nl * nl);  // l2l
    EXPECT_EQ(a.edge_sets[1].edges_of(g), na * na);  // a2a
    EXPECT_EQ(a.edge_sets[2].edges_of(g), nl * na);  // l2a
    EXPECT_EQ(a.edge_sets[3].edges_of(g), nl);       // l2q
    EXPECT_EQ(a.graph_y.labels[static_cast<size_t>(g)], nl);
  }
  EXPECT_GT(lane_counts.size(), 3u);  // sizes vary: buckets matter
  // One type per lane pair; self on the diagonal; some successors and neighbours.
  std::array<int64_t, kConnectionTypes> types{};
  const EdgeSet& l2l = a.edge_sets[0];
  for (int64_t e = 0; e < l2l.count(); ++e) {
    float sum = 0;
    int64_t type = -1;
    for (int64_t t = 0; t < kConnectionTypes; ++t) {
      sum += l2l.x[static_cast<size_t>(e * kConnectionTypes + t)];
      if (l2l.x[static_cast<size_t>(e * kConnectionTypes + t)] == 1.0f) type = t;
    }
    ASSERT_EQ(sum, 1.0f) << "edge " << e;
    ++types[static_cast<size_t>(type)];
    EXPECT_EQ(type == 4, l2l.src[static_cast<size_t>(e)] == l2l.dst[static_cast<size_t>(e)]) << "edge " << e;
  }
  EXPECT_EQ(types[0], types[1]);  // as many predecessors as successors
  EXPECT_EQ(types[2], types[3]);  // left and right
  EXPECT_GT(types[1], 0);
  EXPECT_GT(types[2], 0);
  // A successor's first point is its predecessor's last.
  for (int64_t e = 0; e < l2l.count(); ++e) {
    if (l2l.x[static_cast<size_t>(e * kConnectionTypes + 1)] != 1.0f) continue;
    const auto i = static_cast<size_t>(l2l.src[static_cast<size_t>(e)]), j = static_cast<size_t>(l2l.dst[static_cast<size_t>(e)]);
    EXPECT_NEAR(lane.x[i * kLaneWidth + kLaneWidth - 2], lane.x[j * kLaneWidth], 1e-5);
    EXPECT_NEAR(lane.x[i * kLaneWidth + kLaneWidth - 1], lane.x[j * kLaneWidth + 1], 1e-5);
  }
  EXPECT_THROW(parse_scene_spec("scenes:max_lanes=5000"), DatasetError);
  EXPECT_THROW(parse_scene_spec("scenes:min_lanes=10,max_lanes=5"), DatasetError);
  EXPECT_THROW(parse_scene_spec("scenes:lanes=3"), DatasetError);
  // A scene of 1,000 lanes: a million lane-to-lane edges.
  const BatchDataset big = make_scenes(parse_scene_spec("scenes:scenes=1,min_lanes=1000,max_lanes=1000,seed=1"));
  EXPECT_EQ(big.edge_sets[0].count(), 1000000);
}


TEST(BatchSourceTest, AGraphTooLargeForTheLargestBucketIsAnError) {
  const BatchDataset d = make_molecules(parse_molecule_spec("molecules:graphs=20,seed=1"));
  proto::Batching b;
  auto* bucket = b.add_bucket();
  auto* s = bucket->add_size();
  s->set_set("atom");
  s->set_rows(12);
  s = bucket->add_size();
  s->set_set("bond");
  s->set_rows(1000);
  try {
    GraphBatches source(d, b, 0);
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not fit any bucket"));
    EXPECT_THAT(e.what(), HasSubstr(" atom, "));
  }
}

}  // namespace
}  // namespace gnnrt::model
