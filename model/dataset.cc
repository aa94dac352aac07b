#include "model/dataset.h"

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

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

template <typename T>
bool parse_number(std::string_view text, T& value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end && !text.empty();
}

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

// ---------------------------------------------------------------------------
// Synthetic spec

using Field = std::variant<int64_t SyntheticSpec::*, uint64_t SyntheticSpec::*, double SyntheticSpec::*>;
struct SpecKey {
  std::string_view name;
  Field field;
};
constexpr std::array<SpecKey, 12> kSpecKeys = {{
    {"nodes", &SyntheticSpec::nodes},
    {"classes", &SyntheticSpec::classes},
    {"avg_degree", &SyntheticSpec::avg_degree},
    {"features", &SyntheticSpec::features},
    {"seed", &SyntheticSpec::seed},
    {"homophily", &SyntheticSpec::homophily},
    {"feature_noise", &SyntheticSpec::feature_noise},
    {"signal", &SyntheticSpec::signal},
    {"train_per_class", &SyntheticSpec::train_per_class},
    {"num_val", &SyntheticSpec::num_val},
    {"num_test", &SyntheticSpec::num_test},
    {"feature_density", &SyntheticSpec::feature_density},
}};

void validate(const SyntheticSpec& s, const std::string& where) {
  const auto require = [&](bool ok, std::string_view key, auto value, std::string_view rule) {
    if (!ok) throw DatasetError(where, fmt::format("{}={} is out of range: {}", key, value, rule));
  };
  require(s.nodes >= 1 && s.nodes < kMaxNodes, "nodes", s.nodes, "1 <= nodes < 2^31");
  require(s.classes >= 1 && s.classes <= s.nodes && s.classes <= kMaxClasses, "classes", s.classes,
          "1 <= classes <= min(nodes, 2^20)");
  // Bounds on the products keep E and x below 2^32 entries: no overflow,
  // and a typo fails here instead of in a multi-GiB allocation.
  require(s.avg_degree >= 0 && s.avg_degree <= (int64_t{1} << 32) / s.nodes, "avg_degree",
          s.avg_degree, "0 <= avg_degree and nodes * avg_degree <= 2^32");
  require(s.features >= 1 && s.features <= (int64_t{1} << 32) / s.nodes, "features", s.features,
          "1 <= features and nodes * features <= 2^32");
  require(s.homophily >= 0.0 && s.homophily <= 1.0, "homophily", s.homophily, "0 <= homophily <= 1");
  require(std::isfinite(s.feature_noise) && s.feature_noise >= 0.0, "feature_noise", s.feature_noise,
          "finite and >= 0");
  require(std::isfinite(s.signal) && s.signal >= 0.0, "signal", s.signal, "finite and >= 0");
  require(s.feature_density >= 0.0 && s.feature_density <= 1.0, "feature_density", s.feature_density,
          "0 <= feature_density <= 1");
  // Below 2^31 each, the split's integer scaling cannot overflow.
  require(s.train_per_class >= 0 && s.train_per_class < kMaxNodes, "train_per_class", s.train_per_class,
          "0 <= train_per_class < 2^31");
  require(s.num_val >= 0 && s.num_val < kMaxNodes, "num_val", s.num_val, "0 <= num_val < 2^31");
  require(s.num_test >= 0 && s.num_test < kMaxNodes, "num_test", s.num_test, "0 <= num_test < 2^31");
}

// ---------------------------------------------------------------------------
// Synthetic generator: random numbers
//
// Every draw comes from ops/rng.h (Philox4x64-10 keyed by (seed, stream) at a
// counter made of the indices it is for (node, slot)), so draws do not
// depend on the order or thread they are made in, and normals are the same
// bits on every machine.

using ops::below;
using ops::normals;
using ops::unit;
enum Stream : uint64_t { kPermutation = 1, kEdges = 2, kClassMeans = 3, kFeatures = 4, kFeatureMask = 5 };

ops::RngWords draw(uint64_t seed, Stream stream, uint64_t a, uint64_t b) {
  return ops::philox(seed, stream, {a, b, 0, 0});
}

// ---------------------------------------------------------------------------
// Synthetic generator: the graph

// Classes are planted through a seeded permutation: the node at position p
// has class p % C and is the (p / C)-th member of its class, so classes are
// balanced (sizes differ by at most one), the k-th member of class c is
// perm[k * C + c], and the first 20 * C positions hold exactly 20 per class.
// (Divisions by C are done once here: the edge loop would otherwise pay
// several 64-bit divisions per edge.)
struct Planting {
  int64_t classes;
  std::vector<int64_t> perm;        // position -> node
  std::vector<int64_t> class_of;    // node -> class
  std::vector<int64_t> rank;        // node -> index among its class's members
  std::vector<int64_t> class_size;  // class -> members

  int64_t member(int64_t c, int64_t k) const { return perm[k * classes + c]; }
};

Planting plant_classes(const SyntheticSpec& s) {
  const int64_t n = s.nodes, classes = s.classes;
  Planting p{classes, std::vector<int64_t>(n), std::vector<int64_t>(n), std::vector<int64_t>(n),
             std::vector<int64_t>(classes)};
  std::iota(p.perm.begin(), p.perm.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    std::swap(p.perm[i], p.perm[below(draw(s.seed, kPermutation, i, 0)[0], i + 1)]);
  }
  for (int64_t i = 0; i < n; ++i) {
    p.class_of[p.perm[i]] = i % classes;
    p.rank[p.perm[i]] = i / classes;
  }
  for (int64_t c = 0; c < classes; ++c) p.class_size[c] = (n - 1 - c) / classes + 1;
  return p;
}

// Node v draws avg_degree / 2 edges (the odd half edge with probability 1/2);
// each stays in v's class with probability homophily (a uniform other member,
// never v itself) and otherwise goes to a uniform member of a uniform other
// class. The union of both directions, without duplicates, is sorted by
// (src, dst): PyG's coalesce order.
void draw_edges(const SyntheticSpec& s, const Planting& p, Dataset& d) {
  const int64_t n = s.nodes, half = s.avg_degree / 2, slots = half + s.avg_degree % 2;
  std::vector<int32_t> other(n * slots, -1);  // -1: no edge in this slot
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < n; ++v) {
    const int64_t c = p.class_of[v];
    for (int64_t j = 0; j < slots; ++j) {
      const ops::RngWords w = draw(s.seed, kEdges, v, j);
      if (j == half && (w[3] >> 63) == 0) continue;
      int64_t u = -1;
      if (s.classes == 1 || unit(w[0]) < s.homophily) {
        const int64_t size = p.class_size[c];
        if (size < 2) continue;
        int64_t k = static_cast<int64_t>(below(w[2], size - 1));
        if (k >= p.rank[v]) ++k;
        u = p.member(c, k);
      } else {
        const int64_t k = static_cast<int64_t>(below(w[1], s.classes - 1));
        const int64_t c2 = k < c ? k : k + 1;
        u = p.member(c2, static_cast<int64_t>(below(w[2], p.class_size[c2])));
      }
      other[v * slots + j] = static_cast<int32_t>(u);
    }
  }

  // Both directions into per-source rows (a counting sort), then each row
  // sorted and deduplicated on its own: the result does not depend on threads.
  std::vector<int64_t> row_start(n + 1, 0);
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t j = 0; j < slots; ++j) {
      const int64_t u = other[v * slots + j];
      if (u < 0) continue;
      ++row_start[v + 1];
      ++row_start[u + 1];
    }
  }
  std::partial_sum(row_start.begin(), row_start.end(), row_start.begin());
  std::vector<int32_t> adj(row_start[n]);
  std::vector<int64_t> cursor(row_start.begin(), row_start.end() - 1);
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t j = 0; j < slots; ++j) {
      const int64_t u = other[v * slots + j];
      if (u < 0) continue;
      adj[cursor[v]++] = static_cast<int32_t>(u);
      adj[cursor[u]++] = static_cast<int32_t>(v);
    }
  }
  std::vector<int64_t>().swap(cursor);
  std::vector<int32_t>().swap(other);

  std::vector<int64_t> out_start(n + 1, 0);
#pragma omp parallel for schedule(dynamic, 4096)
  for (int64_t v = 0; v < n; ++v) {
    const auto first = adj.begin() + row_start[v], last = adj.begin() + row_start[v + 1];
    std::sort(first, last);
    out_start[v + 1] = std::unique(first, last) - first;
  }
  std::partial_sum(out_start.begin(), out_start.end(), out_start.begin());
  d.src.resize(out_start[n]);
  d.dst.resize(out_start[n]);
#pragma omp parallel for schedule(dynamic, 4096)
  for (int64_t v = 0; v < n; ++v) {
    for (int64_t k = 0; k < out_start[v + 1] - out_start[v]; ++k) {
      d.src[out_start[v] + k] = v;
      d.dst[out_start[v] + k] = adj[row_start[v] + k];
    }
  }
}

// x[v] = signal * mean[class(v)] + feature_noise * N(0, I), mean[c] ~ N(0, I);
// with feature_density < 1 each value is kept with that probability, else 0
// (bag-of-words-like sparse features).
void draw_features(const SyntheticSpec& s, const Planting& p, Dataset& d) {
  const int64_t f = s.features, blocks = (f + 3) / 4;
  std::vector<double> mean(s.classes * f);
  for (int64_t c = 0; c < s.classes; ++c) {
    for (int64_t b = 0; b < blocks; ++b) {
      const auto z = normals(draw(s.seed, kClassMeans, c, b));
      for (int64_t t = 0; t < 4 && 4 * b + t < f; ++t) mean[c * f + 4 * b + t] = z[t];
    }
  }
  d.x.resize(s.nodes * f);
#pragma omp parallel for schedule(static)
  for (int64_t v = 0; v < s.nodes; ++v) {
    const double* m = mean.data() + p.class_of[v] * f;
    for (int64_t b = 0; b < blocks; ++b) {
      const auto z = normals(draw(s.seed, kFeatures, v, b));
      const ops::RngWords keep = s.feature_density < 1 ? draw(s.seed, kFeatureMask, v, b) : ops::RngWords{};
      for (int64_t t = 0; t < 4 && 4 * b + t < f; ++t) {
        const int64_t j = 4 * b + t;
        const bool kept = s.feature_density >= 1 || unit(keep[t]) < s.feature_density;
        d.x[v * f + j] = kept ? static_cast<float>(s.signal * m[j] + s.feature_noise * z[t]) : 0.0f;
      }
    }
  }
}

// Planetoid's split over the planted positions: train_per_class of each class
// first, then num_val, then num_test. When they need more than N nodes, all
// three shrink by N / need (at least one training node per class).
void split_nodes(const SyntheticSpec& s, const Planting& p, Dataset& d) {
  const int64_t n = s.nodes;
  int64_t per_class = s.train_per_class, val = s.num_val, test = s.num_test;
  const int64_t need = per_class * s.classes + val + test;
  if (need > n) {
    per_class = per_class > 0 ? std::max<int64_t>(1, per_class * n / need) : 0;
    val = std::min(val * n / need, n - per_class * s.classes);
    test = std::min(test * n / need, n - per_class * s.classes - val);
  }
  d.train_mask.assign(n, 0);
  d.val_mask.assign(n, 0);
  d.test_mask.assign(n, 0);
  const int64_t train_end = per_class * s.classes, val_end = train_end + val, test_end = val_end + test;
  for (int64_t i = 0; i < test_end; ++i) {
    auto& mask = i < train_end ? d.train_mask : i < val_end ? d.val_mask : d.test_mask;
    mask[p.perm[i]] = 1;
  }
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

SyntheticSpec parse_synthetic_spec(std::string_view spec) {
  const std::string where = fmt::format("synthetic spec '{}'", spec);
  constexpr std::string_view kPrefix = "synthetic";
  if (!spec.starts_with(kPrefix) || (spec.size() > kPrefix.size() && spec[kPrefix.size()] != ':')) {
    throw DatasetError(where, "expected synthetic or synthetic:key=value,...");
  }
  SyntheticSpec s;
  std::string_view rest = spec.substr(std::min(spec.size(), kPrefix.size() + 1));
  std::vector<std::string_view> seen;
  for (bool more = !rest.empty(); more;) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    more = comma != std::string_view::npos;
    if (more) rest.remove_prefix(comma + 1);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw DatasetError(where, fmt::format("'{}' is not key=value", item));
    }
    const std::string_view key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    const auto found = std::find_if(kSpecKeys.begin(), kSpecKeys.end(),
                                    [&](const SpecKey& k) { return k.name == key; });
    if (found == kSpecKeys.end()) {
      std::vector<std::string_view> names;
      for (const SpecKey& k : kSpecKeys) names.push_back(k.name);
      throw DatasetError(where, fmt::format("unknown key '{}' (keys: {})", key, fmt::join(names, ", ")));
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw DatasetError(where, fmt::format("key '{}' is given twice", key));
    }
    seen.push_back(key);
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(s.*member)>;
          if (!parse_number(value, s.*member)) {
            const std::string_view kind = std::is_floating_point_v<T> ? "a number"
                                          : std::is_signed_v<T>       ? "an integer"
                                                                      : "a non-negative integer";
            throw DatasetError(where, fmt::format("{}='{}' is not {}", key, value, kind));
          }
        },
        found->field);
  }
  validate(s, where);
  return s;
}

std::string to_string(const SyntheticSpec& spec) {
  std::string out = "synthetic";
  char sep = ':';
  for (const SpecKey& k : kSpecKeys) {
    std::visit([&](auto member) { out += fmt::format("{}{}={}", sep, k.name, spec.*member); }, k.field);
    sep = ',';
  }
  return out;
}

Dataset make_synthetic(const SyntheticSpec& spec) {
  validate(spec, fmt::format("synthetic spec '{}'", to_string(spec)));
  Dataset d;
  d.name = "synthetic";
  d.num_nodes = spec.nodes;
  d.num_features = spec.features;
  d.num_classes = spec.classes;
  const Planting planting = plant_classes(spec);
  d.y = planting.class_of;
  draw_edges(spec, planting, d);
  draw_features(spec, planting, d);
  split_nodes(spec, planting, d);
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
