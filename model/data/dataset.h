// Node-classification datasets: one graph with node features, labels and
// train/val/test masks, loaded from a NumPy folder or an edge-list CSV folder,
// or generated (a stochastic block model with planted classes). Formats:
// docs/file-formats.md. Every function is blocking and returns a fully
// validated Dataset by value (no shared state: safe from any thread); bad
// input of any kind throws DatasetError naming the file (or spec) and the
// row, line or position — never a crash, never a silently wrong graph.
//
// Layout: x [N, F] row-major float32; y [N] int64 in [0, num_classes);
// src/dst [E] int64 in [0, N), edge e carries messages src[e] -> dst[e];
// masks [N] uint8 holding 0 or 1. Loaded edges are kept as given (no
// symmetrisation, dedup or self-loop removal: layers add their own loops).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gnnrt::model {

// Node features as CSR, the form mostly-zero features (bag-of-words,
// TF-IDF) train in: row i's stored values are values[rowptr[i] ..
// rowptr[i + 1]) at columns col[...], ascending. Only non-zeros are stored
// by to_sparse(); any value may be stored.
struct SparseFeatures {
  std::vector<int64_t> rowptr{0};  // [rows + 1]
  std::vector<int32_t> col;        // [nnz]
  std::vector<float> values;       // [nnz]

  int64_t rows() const { return static_cast<int64_t>(rowptr.size()) - 1; }
  int64_t nnz() const { return static_cast<int64_t>(values.size()); }
};

// The non-zeros of a dense [rows, cols] row-major matrix, and back.
SparseFeatures to_sparse(std::span<const float> x, int64_t rows, int64_t cols);
std::vector<float> to_dense(const SparseFeatures& s, int64_t cols);

struct Dataset {
  std::string name;  // "cora", "synthetic", ... (a folder's name for loaded data)
  int64_t num_nodes = 0, num_features = 0, num_classes = 0;
  std::vector<float> x;           // [N, F] row-major; empty when x_sparse holds the features
  std::optional<SparseFeatures> x_sparse;  // the features as CSR (make_features_sparse)
  std::vector<int64_t> y;         // [N], in [0, num_classes)
  std::vector<int64_t> src, dst;  // E edges, message flows src -> dst
  std::vector<uint8_t> train_mask, val_mask, test_mask;  // [N], 0/1

  int64_t num_edges() const { return static_cast<int64_t>(src.size()); }
  // Non-zero features (stored ones when sparse) over N * F (0 for no features).
  double feature_density() const;
};

// The edge ids of the graph GCN and GAT aggregate over ("graph.self_loops":
// the dataset's edges without its self loops, plus one loop per node),
// numbered in destination order: node v's incoming edges in the dataset's
// order, then v's loop. A destination's edges are then consecutive ids, so a
// thread that owns a range of destinations owns one range of each per-edge
// value (attention scores and weights), and the walks by destination read
// them in address order (GAT Cora's step 5% faster on two threads than with
// the loops appended after the dataset's edges; bench/README.md). Attention
// dropout draws its mask by these ids.
struct SelfLoopIds {
  std::vector<int64_t> edge;  // [E]: dataset edge e's id, -1 for a dataset self loop (dropped)
  std::vector<int64_t> loop;  // [N]: node v's loop
  int64_t count = 0;          // edges of the graph: E - dataset loops + N
};
SelfLoopIds self_loop_ids(const Dataset& d);

// Switch the features' form in place (the other form is freed); no-ops when
// they already have it.
void make_features_sparse(Dataset& d);
void make_features_dense(Dataset& d);

// The most nodes (and features) a graph may have: node ids index int32
// kernels and size [N, F] allocations; beyond is a typo, not a graph.
inline constexpr int64_t kMaxNodes = int64_t{1} << 31;

// The most classes a label may ask for (num_classes = max label + 1 sizes
// the output layer): a label beyond is a typo, not a class count.
inline constexpr int64_t kMaxClasses = int64_t{1} << 20;

// what() is "<where>: <problem>"; where() is the file (with ":<line>" for
// text files) or the spec that was rejected.
class DatasetError : public std::runtime_error {
 public:
  DatasetError(std::string where, std::string_view problem);
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// The ../shared/datasets layout: x.npy, y.npy, edge_index.npy,
// {train,val,test}_mask.npy. float64 x and int32 y / edge_index are converted.
Dataset load_npy_folder(const std::filesystem::path& dir);

// edges.csv (required) and nodes.csv (optional): docs/file-formats.md.
Dataset load_edge_list_csv(const std::filesystem::path& dir);

// Stochastic block model with planted, balanced classes and class-correlated
// Gaussian features; Planetoid-like split. Field names are the spec's keys.
struct SyntheticSpec {
  int64_t nodes = 2000;
  int64_t classes = 5;
  int64_t avg_degree = 10;      // expected degree before duplicates are dropped
  int64_t features = 64;
  uint64_t seed = 0;
  double homophily = 0.8;       // probability that a drawn edge stays in its class
  double feature_noise = 1.0;   // std of the per-feature Gaussian noise
  double signal = 0.08;         // scale of the class mean vectors (N(0,1) per feature)
  int64_t train_per_class = 20; // Planetoid's split; scaled down when
  int64_t num_val = 500;        // 20 * classes + num_val + num_test > nodes
  int64_t num_test = 1000;
  double feature_density = 1.0; // probability that a feature value is non-zero
  bool operator==(const SyntheticSpec&) const = default;
};

// "synthetic" (defaults) or "synthetic:key=value,key=value,..." with the
// field names above as keys. An unknown or repeated key, a malformed or
// out-of-range value throws DatasetError naming the key and value.
SyntheticSpec parse_synthetic_spec(std::string_view spec);

// The spec string that parse_synthetic_spec turns back into `spec` (all keys).
std::string to_string(const SyntheticSpec& spec);

// The same bytes for the same spec on any machine and any thread count
// (Philox counters, no std:: distributions or libm). OpenMP inside.
// Throws DatasetError for an out-of-range spec.
Dataset make_synthetic(const SyntheticSpec& spec);

// PyG's NormalizeFeatures, in place: x - min(x) (over the whole matrix),
// then each row divided by its sum (a sum below 1 counts as 1). On sparse
// features the same bits when min(x) is 0 (sums over the stored values in
// column order; the zeros add nothing); a non-zero minimum fills every zero,
// so those features turn dense first.
void normalize_features(Dataset& d);

// Node ids as a core's 32-bit indices; throws std::invalid_argument naming
// `what` when the graph's `num_nodes` do not fit (2^31 or more).
std::vector<int32_t> node_ids_32(const std::vector<int64_t>& ids, int64_t num_nodes, std::string_view what);

// An xxHash64 of everything the dataset holds (sizes, features in either
// form, labels, edges, masks): its identity, compared across ranks.
uint64_t dataset_fingerprint(const Dataset& d);

// "synthetic[:...]" | "npy:DIR" | "csv:DIR" | DIR (NumPy if DIR/x.npy exists,
// else CSV if DIR/edges.csv exists).
Dataset load_dataset(std::string_view spec);

}  // namespace gnnrt::model
