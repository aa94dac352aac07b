#include "model/data/dataset.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <span>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <xxhash.h>

#include "model/data/text_values.h"
#include "ops/rng.h"
#include "runtime/npy.h"

namespace gnnrt::model {

namespace fs = std::filesystem;

DatasetError::DatasetError(std::string where, std::string_view problem)
    : std::runtime_error(fmt::format("{}: {}", where, problem)), where_(std::move(where)) {}

namespace {


std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("({})", fmt::join(shape, ", "));
}

// The name a folder's dataset goes by: its last path component, also for
// "cora/" or ".".
std::string folder_name(const fs::path& dir) {
  fs::path p = fs::absolute(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

bool is_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

void require_directory(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw DatasetError(dir.string(), "not a directory");
}

// ---------------------------------------------------------------------------
// NumPy folder

class NpyFolder {
 public:
  explicit NpyFolder(fs::path dir) : dir_(std::move(dir)) {}

  Tensor read(std::string_view file) const {
    const fs::path path = dir_ / file;
    if (!is_file(path)) {
      fail(file, "missing file (a NumPy dataset folder holds x.npy, y.npy, edge_index.npy, "
                 "train_mask.npy, val_mask.npy and test_mask.npy)");
    }
    try {
      return read_npy(path);
    } catch (const NpyError& e) {
      // NpyError already starts with the path; keep only the problem.
      std::string_view what = e.what();
      const std::string prefix = path.string() + ": ";
      if (what.starts_with(prefix)) what.remove_prefix(prefix.size());
      fail(file, what);
    }
  }

  [[noreturn]] void fail(std::string_view file, std::string_view problem) const {
    throw DatasetError((dir_ / file).string(), problem);
  }

  void expect_dtype(std::string_view file, const Tensor& a, std::initializer_list<DType> allowed,
                    std::string_view expected) const {
    if (std::find(allowed.begin(), allowed.end(), a.dtype()) == allowed.end()) {
      fail(file, fmt::format("dtype {}, expected {}", to_string(a.dtype()), expected));
    }
  }

 private:
  fs::path dir_;
};

// float64 is accepted but must fit float32; a value that does not is as bad as Inf.
template <typename T>
void check_finite_features(const NpyFolder& folder, std::span<const T> x, int64_t features) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    const T v = x[i];
    const bool fits = std::isfinite(v) && std::abs(v) <= std::numeric_limits<float>::max();
    if (!fits) {
      folder.fail("x.npy", fmt::format("row {}, column {} is {}{}", static_cast<int64_t>(i) / features,
                                       static_cast<int64_t>(i) % features, v,
                                       std::isfinite(v) ? " (too large for float32)" : ""));
    }
  }
}

void read_features(const NpyFolder& folder, Dataset& d) {
  const Tensor x = folder.read("x.npy");
  folder.expect_dtype("x.npy", x, {DType::kF32, DType::kF64}, "float32 (or float64, converted)");
  if (x.shape().size() != 2) {
    folder.fail("x.npy", fmt::format("shape {} has rank {}, expected [N, F]", shape_string(x.shape()),
                                     x.shape().size()));
  }
  d.num_nodes = x.shape()[0];
  d.num_features = x.shape()[1];
  if (d.num_nodes == 0) folder.fail("x.npy", "shape (0, F): a graph needs at least one node");
  if (d.num_features == 0) folder.fail("x.npy", "shape (N, 0): nodes need at least one feature");
  if (x.dtype() == DType::kF32) {
    check_finite_features(folder, x.values<float>(), d.num_features);
  } else {
    check_finite_features(folder, x.values<double>(), d.num_features);
  }
  d.x = x.to_vector<float>();
}

void read_labels(const NpyFolder& folder, Dataset& d) {
  const Tensor y = folder.read("y.npy");
  folder.expect_dtype("y.npy", y, {DType::kI64, DType::kI32}, "int64 (or int32)");
  // [N, 1] is OGB's layout for one label per node: read as [N].
  const bool column = y.shape() == std::vector<int64_t>{d.num_nodes, 1};
  if (y.shape() != std::vector<int64_t>{d.num_nodes} && !column) {
    folder.fail("y.npy", fmt::format("shape {}, expected [N] = ({}) (or [N, 1]) to match the {} rows "
                                     "of x.npy", shape_string(y.shape()), d.num_nodes, d.num_nodes));
  }
  d.y = y.to_vector<int64_t>();
  int64_t max_label = 0;
  for (int64_t v = 0; v < d.num_nodes; ++v) {
    const int64_t label = d.y[v];
    if (label < 0) folder.fail("y.npy", fmt::format("node {} has label {}: labels must be >= 0", v, label));
    if (label >= kMaxClasses) {
      folder.fail("y.npy", fmt::format("node {} has label {}: at most {} classes are supported", v,
                                       label, kMaxClasses));
    }
    max_label = std::max(max_label, label);
  }
  d.num_classes = max_label + 1;
}

void read_edges(const NpyFolder& folder, Dataset& d) {
  const Tensor e = folder.read("edge_index.npy");
  folder.expect_dtype("edge_index.npy", e, {DType::kI64, DType::kI32}, "int64 (or int32)");
  if (e.shape().size() != 2 || e.shape()[0] != 2) {
    folder.fail("edge_index.npy", fmt::format("shape {}, expected [2, E] (row 0 = source, row 1 = target)",
                                              shape_string(e.shape())));
  }
  const int64_t num_edges = e.shape()[1];
  std::vector<int64_t> index = e.to_vector<int64_t>();
  for (int64_t i = 0; i < 2 * num_edges; ++i) {
    if (index[i] < 0 || index[i] >= d.num_nodes) {
      folder.fail("edge_index.npy",
                  fmt::format("column {} ({}) holds node {}, outside [0, {}) (N = the rows of x.npy)",
                              i % num_edges, i < num_edges ? "row 0, source" : "row 1, target",
                              index[i], d.num_nodes));
    }
  }
  d.dst.assign(index.begin() + num_edges, index.end());
  index.resize(num_edges);
  d.src = std::move(index);
}

void read_mask(const NpyFolder& folder, std::string_view file, int64_t num_nodes,
               std::vector<uint8_t>& mask) {
  const Tensor m = folder.read(file);
  folder.expect_dtype(file, m, {DType::kBool}, "bool");
  if (m.shape() != std::vector<int64_t>{num_nodes}) {
    folder.fail(file, fmt::format("shape {}, expected [N] = ({}) to match the rows of x.npy",
                                  shape_string(m.shape()), num_nodes));
  }
  const auto bytes = m.values<uint8_t>();
  mask.resize(bytes.size());
  // NumPy reads any non-zero byte as True; we store exactly 0 or 1.
  std::transform(bytes.begin(), bytes.end(), mask.begin(), [](uint8_t b) { return b != 0; });
}

// ---------------------------------------------------------------------------
// Edge-list CSV folder

class CsvFile {
 public:
  explicit CsvFile(fs::path path) : path_(std::move(path)) {}

  // Calls row(line_number, fields) for each data line: '#' starts a comment,
  // blank lines are skipped, fields are split at ',' and trimmed, and the
  // first line is skipped as a header when its first field is not an integer.
  void for_each_row(const std::function<void(int64_t, std::span<const std::string_view>)>& row) const {
    std::ifstream in(path_, std::ios::binary);
    if (!in) throw DatasetError(path_.string(), "cannot open for reading");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string_view> fields;
    bool first = true;
    int64_t line_number = 0;
    for (std::size_t pos = 0; pos < text.size();) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string_view line(text.data() + pos, end - pos);
      pos = end + 1;
      ++line_number;
      line = trim(line.substr(0, line.find('#')));
      if (line.empty()) continue;
      fields.clear();
      for (std::size_t start = 0;;) {
        const std::size_t comma = line.find(',', start);
        fields.push_back(trim(line.substr(start, comma - start)));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      int64_t unused;
      if (std::exchange(first, false) && !parse_number(fields[0], unused)) continue;  // header
      row(line_number, fields);
    }
  }

  [[noreturn]] void fail(int64_t line, std::string_view problem) const {
    throw DatasetError(fmt::format("{}:{}", path_.string(), line), problem);
  }
  [[noreturn]] void fail(std::string_view problem) const { throw DatasetError(path_.string(), problem); }

  int64_t node_id(int64_t line, std::string_view what, std::string_view text, int64_t bound) const {
    int64_t id;
    if (!parse_number(text, id) || id < 0 || id >= kMaxNodes) {
      fail(line, fmt::format("{} '{}' is not a node id (an integer in [0, 2^31))", what, text));
    }
    if (id >= bound) {
      fail(line, fmt::format("{} {} is outside [0, {}) (the ids of nodes.csv)", what, id, bound));
    }
    return id;
  }

 private:
  fs::path path_;
};

// nodes.csv: id,label,split,f0,f1,...; one row per node, ids 0..N-1 in any order.
void read_nodes_csv(const CsvFile& file, Dataset& d) {
  struct Row {
    int64_t line, id, label;  // label -1: none
    uint8_t split;            // 0 none, 1 train, 2 val, 3 test
  };
  std::vector<Row> rows;
  std::vector<float> features;  // in row order
  int64_t first_line = 0;
  file.for_each_row([&](int64_t line, std::span<const std::string_view> f) {
    if (f.size() < 3) {
      file.fail(line, fmt::format("{} field(s), expected id,label,split[,f0,f1,...]", f.size()));
    }
    const int64_t num_features = static_cast<int64_t>(f.size()) - 3;
    if (rows.empty()) {
      d.num_features = num_features;
      first_line = line;
    } else if (num_features != d.num_features) {
      file.fail(line, fmt::format("{} feature value(s), but line {} has {}", num_features,
                                  first_line, d.num_features));
    }
    Row row{line, file.node_id(line, "id", f[0], kMaxNodes), -1, 0};
    if (!f[1].empty()) {
      if (!parse_number(f[1], row.label) || row.label < 0 || row.label >= kMaxClasses) {
        file.fail(line, fmt::format("label '{}' is not a class id (an integer in [0, 2^20)) "
                                    "or empty", f[1]));
      }
    }
    static constexpr std::array<std::string_view, 4> kSplits = {"", "train", "val", "test"};
    const auto split = std::find(kSplits.begin(), kSplits.end(), f[2]);
    if (split == kSplits.end()) file.fail(line, fmt::format("split '{}' is not train, val, test or empty", f[2]));
    row.split = static_cast<uint8_t>(split - kSplits.begin());
    if (row.split != 0 && row.label < 0) {
      file.fail(line, fmt::format("node {} is in split '{}' but has no label", row.id, f[2]));
    }
    for (int64_t j = 0; j < num_features; ++j) {
      float v;
      if (!parse_number(f[3 + j], v) || !std::isfinite(v)) {
        file.fail(line, fmt::format("feature f{} = '{}' is not a finite float32", j, f[3 + j]));
      }
      features.push_back(v);
    }
    rows.push_back(row);
  });
  if (rows.empty()) file.fail("no node rows");

  const int64_t n = static_cast<int64_t>(rows.size());
  d.num_nodes = n;
  std::vector<int64_t> line_of(n, 0);  // with N rows and N distinct ids < N, every id is present
  for (const Row& r : rows) {
    if (r.id >= n) {
      file.fail(r.line, fmt::format("id {} but the file has {} rows: ids must be 0..{}", r.id, n, n - 1));
    }
    if (line_of[r.id] != 0) file.fail(r.line, fmt::format("id {} repeats line {}", r.id, line_of[r.id]));
    line_of[r.id] = r.line;
  }

  // No feature columns: one constant feature, as without nodes.csv.
  const int64_t f = std::max<int64_t>(d.num_features, 1);
  d.num_features = f;
  d.x.assign(n * f, 1.0f);
  d.y.assign(n, 0);
  d.train_mask.assign(n, 0);
  d.val_mask.assign(n, 0);
  d.test_mask.assign(n, 0);
  std::array<std::vector<uint8_t>*, 4> masks = {nullptr, &d.train_mask, &d.val_mask, &d.test_mask};
  int64_t max_label = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Row& r = rows[i];
    if (!features.empty()) std::copy_n(features.begin() + i * f, f, d.x.begin() + r.id * f);
    d.y[r.id] = std::max<int64_t>(r.label, 0);
    max_label = std::max(max_label, r.label);
    if (r.split != 0) (*masks[r.split])[r.id] = 1;
  }
  d.num_classes = max_label + 1;
}

}  // namespace

// ---------------------------------------------------------------------------

Dataset load_npy_folder(const fs::path& dir) {
  require_directory(dir);
  const NpyFolder folder(dir);
  Dataset d;
  d.name = folder_name(dir);
  read_features(folder, d);
  read_labels(folder, d);
  read_edges(folder, d);
  read_mask(folder, "train_mask.npy", d.num_nodes, d.train_mask);
  read_mask(folder, "val_mask.npy", d.num_nodes, d.val_mask);
  read_mask(folder, "test_mask.npy", d.num_nodes, d.test_mask);
  // A node in two splits would be trained on and evaluated on at once.
  const std::pair<const char*, const std::vector<uint8_t>*> masks[] = {
      {"train_mask.npy", &d.train_mask}, {"val_mask.npy", &d.val_mask}, {"test_mask.npy", &d.test_mask}};
  for (size_t a = 0; a < 3; ++a) {
    for (size_t b = a + 1; b < 3; ++b) {
      for (int64_t v = 0; v < d.num_nodes; ++v) {
        if ((*masks[a].second)[v] && (*masks[b].second)[v]) {
          folder.fail(masks[b].first, fmt::format("node {} is also in {}: the splits must not overlap",
                                                  v, masks[a].first));
        }
      }
    }
  }
  return d;
}

Dataset load_edge_list_csv(const fs::path& dir) {
  require_directory(dir);
  Dataset d;
  d.name = folder_name(dir);
  const fs::path edges_path = dir / "edges.csv", nodes_path = dir / "nodes.csv";
  if (!is_file(edges_path)) {
    throw DatasetError(edges_path.string(), "missing file (an edge-list CSV folder holds edges.csv "
                                            "and optionally nodes.csv)");
  }
  const bool has_nodes = is_file(nodes_path);
  if (has_nodes) read_nodes_csv(CsvFile(nodes_path), d);

  const CsvFile edges(edges_path);
  const int64_t bound = has_nodes ? d.num_nodes : kMaxNodes;
  int64_t max_id = -1;
  edges.for_each_row([&](int64_t line, std::span<const std::string_view> f) {
    if (f.size() != 2) edges.fail(line, fmt::format("{} field(s), expected src,dst", f.size()));
    d.src.push_back(edges.node_id(line, "src", f[0], bound));
    d.dst.push_back(edges.node_id(line, "dst", f[1], bound));
    max_id = std::max({max_id, d.src.back(), d.dst.back()});
  });
  if (has_nodes) return d;

  // No nodes.csv: nodes 0..max id, one constant feature, no labels, no split.
  if (max_id < 0) throw DatasetError(edges_path.string(), "no edges and no nodes.csv: the graph has no nodes");
  const int64_t n = max_id + 1;
  d.num_nodes = n;
  d.num_features = 1;
  d.num_classes = 1;
  d.x.assign(n, 1.0f);
  d.y.assign(n, 0);
  d.train_mask.assign(n, 0);
  d.val_mask.assign(n, 0);
  d.test_mask.assign(n, 0);
  return d;
}


SelfLoopIds self_loop_ids(const Dataset& d) {
  const auto n = static_cast<size_t>(d.num_nodes);
  SelfLoopIds ids;
  ids.edge.assign(d.src.size(), -1);
  ids.loop.resize(n);
  // next[v + 1] counts v's kept edges; the prefix sums (each node's loop
  // added) then make next[v] v's first id, which each kept edge advances.
  std::vector<int64_t> next(n + 1, 0);
  for (size_t e = 0; e < d.src.size(); ++e) {
    if (d.src[e] != d.dst[e]) ++next[static_cast<size_t>(d.dst[e]) + 1];
  }
  for (size_t v = 0; v < n; ++v) next[v + 1] += next[v] + 1;
  for (size_t e = 0; e < d.src.size(); ++e) {
    if (d.src[e] != d.dst[e]) ids.edge[e] = next[static_cast<size_t>(d.dst[e])]++;
  }
  for (size_t v = 0; v < n; ++v) ids.loop[v] = next[v];  // after v's kept edges
  ids.count = next[n];
  return ids;
}

Dataset load_dataset(std::string_view spec) {
  if (spec == "synthetic" || spec.starts_with("synthetic:")) return make_synthetic(parse_synthetic_spec(spec));
  if (spec.starts_with("npy:")) return load_npy_folder(fs::path(spec.substr(4)));
  if (spec.starts_with("csv:")) return load_edge_list_csv(fs::path(spec.substr(4)));
  const fs::path dir(spec);
  std::error_code ec;
  if (spec.empty() || !fs::is_directory(dir, ec)) {
    throw DatasetError(std::string(spec), "not a dataset: expected synthetic[:key=value,...], npy:DIR, "
                                          "csv:DIR or a directory");
  }
  if (is_file(dir / "x.npy")) return load_npy_folder(dir);
  if (is_file(dir / "edges.csv")) return load_edge_list_csv(dir);
  throw DatasetError(std::string(spec), "directory holds neither x.npy (a NumPy dataset folder) nor "
                                        "edges.csv (an edge-list CSV folder)");
}

SparseFeatures to_sparse(std::span<const float> x, int64_t rows, int64_t cols) {
  SparseFeatures s;
  s.rowptr.reserve(static_cast<size_t>(rows) + 1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[static_cast<size_t>(r * cols + c)];
      if (v == 0.0f) continue;
      s.col.push_back(static_cast<int32_t>(c));
      s.values.push_back(v);
    }
    s.rowptr.push_back(s.nnz());
  }
  return s;
}

std::vector<float> to_dense(const SparseFeatures& s, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(s.rows() * cols), 0.0f);
  for (int64_t r = 0; r < s.rows(); ++r) {
    for (int64_t p = s.rowptr[static_cast<size_t>(r)]; p < s.rowptr[static_cast<size_t>(r) + 1]; ++p) {
      x[static_cast<size_t>(r * cols + s.col[static_cast<size_t>(p)])] = s.values[static_cast<size_t>(p)];
    }
  }
  return x;
}

double Dataset::feature_density() const {
  const double cells = static_cast<double>(num_nodes) * static_cast<double>(num_features);
  if (cells == 0) return 0;
  const double stored =
      x_sparse ? static_cast<double>(x_sparse->nnz())
               : static_cast<double>(std::count_if(x.begin(), x.end(), [](float v) { return v != 0.0f; }));
  return stored / cells;
}

void make_features_sparse(Dataset& d) {
  if (d.x_sparse) return;
  d.x_sparse = to_sparse(d.x, d.num_nodes, d.num_features);
  d.x = std::vector<float>();  // frees (`= {}` would keep the capacity)
}

void make_features_dense(Dataset& d) {
  if (!d.x_sparse) return;
  d.x = to_dense(*d.x_sparse, d.num_features);
  d.x_sparse.reset();
}

void normalize_features(Dataset& d) {
  if (d.x_sparse) {
    SparseFeatures& s = *d.x_sparse;
    const bool has_zeros = s.nnz() < d.num_nodes * d.num_features;
    float low = has_zeros ? 0.0f : std::numeric_limits<float>::infinity();
    for (float v : s.values) low = std::min(low, v);
    if (s.nnz() > 0 && low != 0.0f) {
      make_features_dense(d);  // every zero becomes -min(x)
      return normalize_features(d);
    }
    for (int64_t r = 0; r < s.rows(); ++r) {
      const auto b = static_cast<size_t>(s.rowptr[static_cast<size_t>(r)]);
      const auto e = static_cast<size_t>(s.rowptr[static_cast<size_t>(r) + 1]);
      float sum = 0;
      for (size_t p = b; p < e; ++p) sum += s.values[p];
      const float scale = 1.0f / std::max(sum, 1.0f);
      for (size_t p = b; p < e; ++p) s.values[p] *= scale;
    }
    return;
  }
  if (d.x.empty()) return;
  const float low = *std::min_element(d.x.begin(), d.x.end());
  const auto f = static_cast<size_t>(d.num_features);
  for (size_t row = 0; row < static_cast<size_t>(d.num_nodes); ++row) {
    float* x = &d.x[row * f];
    float sum = 0;
    for (size_t c = 0; c < f; ++c) sum += (x[c] -= low);
    const float scale = 1.0f / std::max(sum, 1.0f);
    for (size_t c = 0; c < f; ++c) x[c] *= scale;
  }
}

uint64_t dataset_fingerprint(const Dataset& d) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  const auto add = [&](const auto& v) {
    const uint64_t n = v.size();
    XXH64_update(state, &n, sizeof n);
    XXH64_update(state, v.data(), v.size() * sizeof(v[0]));
  };
  const int64_t sizes[] = {d.num_nodes, d.num_features, d.num_classes, d.x_sparse ? 1 : 0};
  XXH64_update(state, sizes, sizeof sizes);
  add(d.x);
  if (d.x_sparse) {
    add(d.x_sparse->rowptr);
    add(d.x_sparse->col);
    add(d.x_sparse->values);
  }
  for (const auto* v : {&d.y, &d.src, &d.dst}) add(*v);
  for (const auto* m : {&d.train_mask, &d.val_mask, &d.test_mask}) add(*m);
  const uint64_t sum = XXH64_digest(state);
  XXH64_freeState(state);
  return sum;
}

std::vector<int32_t> node_ids_32(const std::vector<int64_t>& ids, int64_t num_nodes, std::string_view what) {
  if (num_nodes > std::numeric_limits<int32_t>::max()) {
    throw std::invalid_argument(fmt::format("{}: {} nodes exceed the 2^31 a core indexes", what, num_nodes));
  }
  return {ids.begin(), ids.end()};
}

}  // namespace gnnrt::model
