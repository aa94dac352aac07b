#include "model/data/batch_dataset.h"

#include <fmt/format.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include <xxhash.h>

#include "model/batch_manifest.pb.h"
#include "model/data/scenes.h"
#include "model/text_format.h"
#include "ops/rng.h"
#include "runtime/npy.h"
#include "runtime/program.h"

namespace gnnrt::model {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifest = "manifest.pbtxt";

// An .npy file of the folder: its path in messages, its array.
struct Array {
  std::string where;
  Tensor t;
};

Array read_array(const fs::path& dir, const std::string& file, const std::string& field) {
  const fs::path path = dir / file;
  const std::string where = fmt::format("{} ({})", path.string(), field);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw DatasetError(where, "missing");
  try {
    return {where, read_npy(path)};
  } catch (const std::exception& e) {
    throw DatasetError(where, e.what());
  }
}

std::vector<int64_t> int_vector(const Array& a, std::string_view what) {
  if (a.t.dtype() != DType::kI64 && a.t.dtype() != DType::kI32) {
    throw DatasetError(a.where, fmt::format("{} must be int32 or int64, not {}", what, to_string(a.t.dtype())));
  }
  return a.t.to_vector<int64_t>();
}

std::vector<float> float_matrix(const Array& a, int64_t rows, int64_t& width, std::string_view what) {
  if (!is_floating(a.t.dtype())) {
    throw DatasetError(a.where, fmt::format("{} must be float32 or float64, not {}", what, to_string(a.t.dtype())));
  }
  const auto& s = a.t.shape();
  if (s.empty() || s.size() > 2 || s[0] != rows) {
    throw DatasetError(a.where, fmt::format("{} has shape {}, expected [{}] or [{}, F]", what,
                                            runtime::shape_string(s), rows, rows));
  }
  width = s.size() == 2 ? s[1] : 1;
  return a.t.to_vector<float>();
}

Targets read_targets(const Array& a, int64_t rows) {
  Targets y;
  if (a.t.dtype() == DType::kI64 || a.t.dtype() == DType::kI32) {
    if (a.t.shape() != std::vector<int64_t>{rows}) {
      throw DatasetError(a.where, fmt::format("integer targets have shape {}, expected [{}]",
                                              runtime::shape_string(a.t.shape()), rows));
    }
    y.classes = true;
    y.labels = a.t.to_vector<int64_t>();
    return y;
  }
  y.values = float_matrix(a, rows, y.width, "targets");
  if (y.width < 1) throw DatasetError(a.where, "targets have no columns");
  return y;
}

void check_ptr(const std::vector<int64_t>& ptr, int64_t graphs, int64_t rows, const std::string& where) {
  if (static_cast<int64_t>(ptr.size()) != graphs + 1) {
    throw DatasetError(where, fmt::format("has {} offsets, expected {} (graphs + 1)", ptr.size(), graphs + 1));
  }
  if (ptr.front() != 0) throw DatasetError(where, fmt::format("offset 0 is {}, not 0", ptr.front()));
  for (size_t g = 0; g + 1 < ptr.size(); ++g) {
    if (ptr[g + 1] < ptr[g]) {
      throw DatasetError(where, fmt::format("offsets not monotone: offset {} is {}, offset {} is {}", g,
                                            ptr[g], g + 1, ptr[g + 1]));
    }
  }
  if (rows >= 0 && ptr.back() != rows) {
    throw DatasetError(where, fmt::format("last offset is {}, the set has {} rows", ptr.back(), rows));
  }
}

void check_finite(std::span<const float> v, int64_t width, const std::string& where) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      throw DatasetError(where, fmt::format("{} at row {}, column {}", v[i], static_cast<int64_t>(i) / width,
                                            static_cast<int64_t>(i) % width));
    }
  }
}

void check_targets(const Targets& y, int64_t rows, const std::string& where) {
  if (y.empty()) return;
  if (y.classes) {
    if (static_cast<int64_t>(y.labels.size()) != rows) {
      throw DatasetError(where, fmt::format("has {} labels for {} rows", y.labels.size(), rows));
    }
    for (size_t i = 0; i < y.labels.size(); ++i) {
      if (y.labels[i] < 0) throw DatasetError(where, fmt::format("label {} at row {} is negative", y.labels[i], i));
      if (y.labels[i] >= kMaxClasses) {
        throw DatasetError(where, fmt::format("label {} at row {}: at most {} classes are supported", y.labels[i], i,
                                              kMaxClasses));
      }
    }
    return;
  }
  if (static_cast<int64_t>(y.values.size()) != rows * y.width) {
    throw DatasetError(where, fmt::format("has {} values for {} rows of {}", y.values.size(), rows, y.width));
  }
  check_finite(y.values, y.width, where);
}

// The class count the labels need (max label + 1), and where the largest is.
void set_classes(Targets& y, const std::string& where) {
  if (!y.classes || y.labels.empty()) return;
  const auto top = std::max_element(y.labels.begin(), y.labels.end());
  y.num_classes = *top + 1;
  y.max_label_at = fmt::format("{} row {}", where, top - y.labels.begin());
}

}  // namespace

std::vector<std::pair<std::string, std::string>> spec_pairs(std::string_view spec, std::string_view prefix,
                                                            const std::string& where) {
  if (!spec.starts_with(prefix) || (spec.size() > prefix.size() && spec[prefix.size()] != ':')) {
    throw DatasetError(where, fmt::format("expected {} or {}:key=value,...", prefix, prefix));
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  std::string_view rest = spec.substr(std::min(spec.size(), prefix.size() + 1));
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) throw DatasetError(where, fmt::format("'{}' is not key=value", item));
    pairs.emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  return pairs;
}

int BatchDataset::node_set(std::string_view name) const {
  for (size_t i = 0; i < node_sets.size(); ++i) {
    if (node_sets[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int BatchDataset::edge_set(std::string_view name) const {
  for (size_t i = 0; i < edge_sets.size(); ++i) {
    if (edge_sets[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

void validate(const BatchDataset& d, const std::string& where) {
  if (d.node_sets.empty()) throw DatasetError(where, "no node sets");
  if (d.num_graphs < 1) throw DatasetError(where, "no graphs");
  for (const NodeSet& n : d.node_sets) {
    const std::string w = fmt::format("{}: node set '{}'", where, n.name);
    check_ptr(n.ptr, d.num_graphs, -1, w + " ptr");
    if (n.width < 1) throw DatasetError(w, "features have no columns");
    if (static_cast<int64_t>(n.x.size()) != n.rows() * n.width) {
      throw DatasetError(w, fmt::format("has {} feature values, expected {} rows x {}", n.x.size(), n.rows(), n.width));
    }
    check_finite(n.x, n.width, w + " features");
    check_targets(n.y, n.rows(), w + " target");
  }
  for (const EdgeSet& e : d.edge_sets) {
    const std::string w = fmt::format("{}: edge set '{}'", where, e.name);
    const NodeSet& s = d.node_sets.at(static_cast<size_t>(e.source));
    const NodeSet& t = d.node_sets.at(static_cast<size_t>(e.destination));
    if (e.src.size() != e.dst.size()) throw DatasetError(w, "sources and destinations differ in count");
    check_ptr(e.ptr, d.num_graphs, e.count(), w + " ptr");
    for (int64_t g = 0; g < d.num_graphs; ++g) {
      for (int64_t i = e.ptr[g]; i < e.ptr[g + 1]; ++i) {
        const int64_t a = e.src[i], b = e.dst[i];
        if (a < s.ptr[g] || a >= s.ptr[g + 1] || b < t.ptr[g] || b >= t.ptr[g + 1]) {
          const auto graph_of = [&](const NodeSet& n, int64_t row) -> std::string {
            if (row < 0 || row >= n.rows()) return "out of range";
            return fmt::format("graph {}", std::upper_bound(n.ptr.begin(), n.ptr.end(), row) - n.ptr.begin() - 1);
          };
          throw DatasetError(w, fmt::format("edge {} of graph {} joins {} row {} ({}) and {} row {} ({})", i, g,
                                            s.name, a, graph_of(s, a), t.name, b, graph_of(t, b)));
        }
      }
    }
    if (e.width > 0) {
      if (static_cast<int64_t>(e.x.size()) != e.count() * e.width) {
        throw DatasetError(w, fmt::format("has {} feature values for {} edges x {}", e.x.size(), e.count(), e.width));
      }
      check_finite(e.x, e.width, w + " features");
    }
  }
  check_targets(d.graph_y, d.num_graphs, where + ": graph target");
}

BatchDataset load_batch_folder(const fs::path& dir) {
  const fs::path manifest_path = dir / kManifest;
  std::ifstream in(manifest_path);
  if (!in) throw DatasetError(manifest_path.string(), "cannot open the manifest");
  std::stringstream text;
  text << in.rdbuf();
  proto::BatchManifest m;
  const std::string where = manifest_path.string();
  if (const std::string error = parse_text_format(text.str(), "", m); !error.empty()) {
    throw DatasetError(where, fmt::format("not a valid BatchManifest: {}", error));
  }
  BatchDataset d;
  d.name = m.has_name() ? m.name() : dir.filename().string();
  if (m.node_set_size() == 0) throw DatasetError(where, "names no node_set");
  d.num_graphs = -1;
  for (int i = 0; i < m.node_set_size(); ++i) {
    const auto& f = m.node_set(i);
    if (f.name().empty()) throw DatasetError(where, fmt::format("node_set[{}] has no name", i));
    if (f.name().find('.') != std::string::npos || f.name() == "graph") {
      throw DatasetError(where, fmt::format("node_set[{}]: name '{}' may not contain '.' or be 'graph'", i, f.name()));
    }
    if (d.node_set(f.name()) >= 0) throw DatasetError(where, fmt::format("node set '{}' is named twice", f.name()));
    NodeSet n;
    n.name = f.name();
    const Array ptr = read_array(dir, f.has_ptr() ? f.ptr() : n.name + ".ptr.npy", "node_set " + n.name + " ptr");
    n.ptr = int_vector(ptr, "ptr");
    if (ptr.t.shape().size() != 1 || n.ptr.empty()) throw DatasetError(ptr.where, "ptr must be one-dimensional and not empty");
    const int64_t graphs = static_cast<int64_t>(n.ptr.size()) - 1;
    if (d.num_graphs < 0) d.num_graphs = graphs;
    check_ptr(n.ptr, d.num_graphs, -1, ptr.where);
    const Array x = read_array(dir, f.has_features() ? f.features() : n.name + ".x.npy", "node_set " + n.name + " features");
    n.x = float_matrix(x, n.rows(), n.width, "features");
    check_finite(n.x, n.width, x.where);
    if (f.has_target()) {
      const Array y = read_array(dir, f.target(), "node_set " + n.name + " target");
      n.y = read_targets(y, n.rows());
      check_targets(n.y, n.rows(), y.where);
      set_classes(n.y, y.where);
    }
    d.node_sets.push_back(std::move(n));
  }
  for (int i = 0; i < m.edge_set_size(); ++i) {
    const auto& f = m.edge_set(i);
    const std::string w = fmt::format("{}: edge_set[{}]", where, i);
    if (f.relation().empty()) throw DatasetError(w, "has no relation (its name)");
    if (d.edge_set(f.relation()) >= 0) throw DatasetError(w, fmt::format("relation '{}' is named twice", f.relation()));
    if (d.node_set(f.relation()) >= 0 || f.relation() == "graph" || f.relation().find('.') != std::string::npos) {
      throw DatasetError(w, fmt::format("relation '{}' may not contain '.', be 'graph' or a node set's name",
                                        f.relation()));
    }
    EdgeSet e;
    e.name = f.relation();
    e.source = d.node_set(f.source());
    e.destination = d.node_set(f.destination());
    if (e.source < 0) throw DatasetError(w, fmt::format("source '{}' is not a node set", f.source()));
    if (e.destination < 0) throw DatasetError(w, fmt::format("destination '{}' is not a node set", f.destination()));
    const Array index = read_array(dir, f.has_edge_index() ? f.edge_index() : e.name + ".edge_index.npy",
                                   "edge_set " + e.name + " edge_index");
    const auto& s = index.t.shape();
    if (s.size() != 2 || s[0] != 2) {
      throw DatasetError(index.where, fmt::format("has shape {}, expected [2, E]", runtime::shape_string(s)));
    }
    const std::vector<int64_t> ei = int_vector(index, "edge_index");
    e.src.assign(ei.begin(), ei.begin() + s[1]);
    e.dst.assign(ei.begin() + s[1], ei.end());
    const Array ptr = read_array(dir, f.has_ptr() ? f.ptr() : e.name + ".ptr.npy", "edge_set " + e.name + " ptr");
    e.ptr = int_vector(ptr, "ptr");
    check_ptr(e.ptr, d.num_graphs, e.count(), ptr.where);
    if (f.has_features()) {
      const Array x = read_array(dir, f.features(), "edge_set " + e.name + " features");
      e.x = float_matrix(x, e.count(), e.width, "features");
      check_finite(e.x, e.width, x.where);
    }
    d.edge_sets.push_back(std::move(e));
  }
  if (m.has_graph_target()) {
    const Array y = read_array(dir, m.graph_target(), "graph_target");
    d.graph_y = read_targets(y, d.num_graphs);
    check_targets(d.graph_y, d.num_graphs, y.where);
    set_classes(d.graph_y, y.where);
  }
  validate(d, where);
  return d;
}

void write_batch_folder(const BatchDataset& d, const fs::path& dir) {
  fs::create_directories(dir);
  proto::BatchManifest m;
  m.set_name(d.name);
  const auto write_targets = [&](const Targets& y, int64_t rows, const std::string& file) {
    if (y.classes) {
      write_npy<int64_t>(dir / file, y.labels, {rows});
    } else {
      write_npy<float>(dir / file, y.values, {rows, y.width});
    }
  };
  for (const NodeSet& n : d.node_sets) {
    auto* f = m.add_node_set();
    f->set_name(n.name);
    write_npy<float>(dir / (n.name + ".x.npy"), n.x, {n.rows(), n.width});
    write_npy<int64_t>(dir / (n.name + ".ptr.npy"), n.ptr, {static_cast<int64_t>(n.ptr.size())});
    if (!n.y.empty()) {
      f->set_target(n.name + ".y.npy");
      write_targets(n.y, n.rows(), f->target());
    }
  }
  for (const EdgeSet& e : d.edge_sets) {
    auto* f = m.add_edge_set();
    f->set_source(d.node_sets[e.source].name);
    f->set_relation(e.name);
    f->set_destination(d.node_sets[e.destination].name);
    std::vector<int64_t> ei(e.src);
    ei.insert(ei.end(), e.dst.begin(), e.dst.end());
    write_npy<int64_t>(dir / (e.name + ".edge_index.npy"), ei, {2, e.count()});
    write_npy<int64_t>(dir / (e.name + ".ptr.npy"), e.ptr, {static_cast<int64_t>(e.ptr.size())});
    if (e.width > 0) {
      f->set_features(e.name + ".x.npy");
      write_npy<float>(dir / f->features(), e.x, {e.count(), e.width});
    }
  }
  if (!d.graph_y.empty()) {
    m.set_graph_target("graph.y.npy");
    write_targets(d.graph_y, d.num_graphs, m.graph_target());
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(m, &text);
  std::ofstream(dir / kManifest) << text;
}

MoleculeSpec parse_molecule_spec(std::string_view spec) {
  const std::string where = fmt::format("molecules spec '{}'", spec);
  MoleculeSpec s;
  for (const auto& [key, value] : spec_pairs(spec, "molecules", where)) {
    bool ok = false;
    if (key == "graphs") ok = parse_number(value, s.graphs);
    else if (key == "min_nodes") ok = parse_number(value, s.min_nodes);
    else if (key == "max_nodes") ok = parse_number(value, s.max_nodes);
    else if (key == "atom_types") ok = parse_number(value, s.atom_types);
    else if (key == "ring_rate") ok = parse_number(value, s.ring_rate);
    else if (key == "seed") ok = parse_number(value, s.seed);
    else throw DatasetError(where, fmt::format("unknown key '{}' (keys: graphs, min_nodes, max_nodes, "
                                               "atom_types, ring_rate, seed)", key));
    if (!ok) throw DatasetError(where, fmt::format("{}='{}' is not a number", key, value));
  }
  if (s.graphs < 1 || s.min_nodes < 2 || s.max_nodes < s.min_nodes || s.atom_types < 1 || s.atom_types > 4096 ||
      !(s.ring_rate >= 0 && s.ring_rate <= 1) || s.max_nodes > (int64_t{1} << 30) / s.graphs) {
    throw DatasetError(where, "needs graphs >= 1, 2 <= min_nodes <= max_nodes, 1 <= atom_types <= 4096, "
                              "ring_rate in [0, 1], graphs * max_nodes <= 2^30");
  }
  return s;
}

BatchDataset make_molecules(const MoleculeSpec& spec) {
  BatchDataset d;
  d.name = "molecules";
  d.num_graphs = spec.graphs;
  NodeSet atom;
  atom.name = "atom";
  atom.width = spec.atom_types;
  atom.ptr = {0};
  atom.y.width = 1;
  EdgeSet bond;
  bond.name = "bond";
  bond.ptr = {0};
  d.graph_y.width = 1;
  // Philox keyed by (seed, graph): each graph drawn alone, the same bytes on
  // any machine.
  for (int64_t g = 0; g < spec.graphs; ++g) {
    uint64_t counter = 0;
    ops::RngWords words{};
    int used = 4;
    const auto draw = [&]() -> double {
      if (used == 4) {
        words = ops::philox(spec.seed, static_cast<uint64_t>(g), {counter++, 0, 0, 0});
        used = 0;
      }
      return ops::unit(words[used++]);
    };
    const auto below = [&](int64_t n) { return std::min<int64_t>(n - 1, static_cast<int64_t>(draw() * n)); };
    const int64_t n = spec.min_nodes + below(spec.max_nodes - spec.min_nodes + 1);
    const int64_t base = atom.ptr.back();
    std::vector<int64_t> type(static_cast<size_t>(n));
    for (auto& t : type) t = below(spec.atom_types);
    std::vector<std::pair<int64_t, int64_t>> bonds;
    for (int64_t v = 1; v < n; ++v) bonds.emplace_back(below(v), v);  // a random tree
    const auto rings = static_cast<int64_t>(spec.ring_rate * static_cast<double>(n) + draw());
    for (int64_t r = 0; r < rings; ++r) {
      const int64_t a = below(n), b = below(n);
      const auto same = [&](const std::pair<int64_t, int64_t>& p) {
        return (p.first == a && p.second == b) || (p.first == b && p.second == a);
      };
      if (a != b && std::none_of(bonds.begin(), bonds.end(), same)) bonds.emplace_back(a, b);
    }
    std::vector<int64_t> degree(static_cast<size_t>(n), 0);
    int64_t same_type = 0;
    for (const auto& [a, b] : bonds) {
      ++degree[a];
      ++degree[b];
      same_type += type[a] == type[b];
      bond.src.push_back(base + a);
      bond.dst.push_back(base + b);
      bond.src.push_back(base + b);
      bond.dst.push_back(base + a);
    }
    for (int64_t v = 0; v < n; ++v) {
      for (int64_t t = 0; t < spec.atom_types; ++t) atom.x.push_back(t == type[v] ? 1.0f : 0.0f);
      atom.y.values.push_back(static_cast<float>(degree[v]));
    }
    const int64_t cycles = static_cast<int64_t>(bonds.size()) - (n - 1);
    // Rings and like-typed bonds per atom: structure, not an atom count.
    d.graph_y.values.push_back(static_cast<float>(
        (static_cast<double>(cycles) + 2.0 * static_cast<double>(same_type)) / static_cast<double>(n) * 4.0));
    atom.ptr.push_back(base + n);
    bond.ptr.push_back(bond.count());
  }
  d.node_sets.push_back(std::move(atom));
  d.edge_sets.push_back(std::move(bond));
  validate(d, "molecules");
  return d;
}

bool is_batch_dataset(std::string_view spec) {
  if (spec == "molecules" || spec.starts_with("molecules:")) return true;
  if (spec == "scenes" || spec.starts_with("scenes:")) return true;
  std::error_code ec;
  return !spec.empty() && fs::is_regular_file(fs::path(spec) / kManifest, ec);
}

BatchDataset one_graph_batch(const Dataset& g) {
  if (g.x_sparse) {
    throw DatasetError(g.name, "sparse features are for layer models; a module-graph model reads dense features");
  }
  BatchDataset d;
  d.name = g.name;
  d.num_graphs = 1;
  NodeSet node;
  node.name = "node";
  node.width = g.num_features;
  node.x = g.x;
  node.ptr = {0, g.num_nodes};
  if (!g.y.empty()) {
    node.y.classes = true;
    node.y.num_classes = g.num_classes;
    node.y.labels = g.y;
  }
  EdgeSet edge;
  edge.name = "edge";
  edge.src = g.src;
  edge.dst = g.dst;
  edge.ptr = {0, g.num_edges()};
  d.node_sets.push_back(std::move(node));
  d.edge_sets.push_back(std::move(edge));
  validate(d, g.name);
  return d;
}

BatchDataset load_batch_dataset(std::string_view spec) {
  if (spec == "molecules" || spec.starts_with("molecules:")) return make_molecules(parse_molecule_spec(spec));
  if (spec == "scenes" || spec.starts_with("scenes:")) return make_scenes(parse_scene_spec(spec));
  std::error_code ec;
  if (fs::is_regular_file(fs::path(spec) / kManifest, ec)) return load_batch_folder(fs::path(spec));
  // A one-graph dataset (folder, CSV, synthetic:...) is the one-set, one-graph case.
  return one_graph_batch(load_dataset(spec));
}

uint64_t batch_fingerprint(const BatchDataset& d) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  const auto add = [&](const auto& v) { XXH64_update(state, v.data(), v.size() * sizeof(v[0])); };
  const auto add_targets = [&](const Targets& y) {
    add(y.values);
    add(y.labels);
  };
  const std::vector<int64_t> head{d.num_graphs, static_cast<int64_t>(d.node_sets.size()),
                                  static_cast<int64_t>(d.edge_sets.size())};
  add(head);
  for (const NodeSet& n : d.node_sets) {
    add(n.name);
    add(n.x);
    add(n.ptr);
    add_targets(n.y);
  }
  for (const EdgeSet& e : d.edge_sets) {
    add(e.name);
    add(e.src);
    add(e.dst);
    add(e.ptr);
    add(e.x);
  }
  add_targets(d.graph_y);
  const uint64_t sum = XXH64_digest(state);
  XXH64_freeState(state);
  return sum;
}

}  // namespace gnnrt::model
