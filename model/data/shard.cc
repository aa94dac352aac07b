#include "model/data/shard.h"
#include "model/job.h"
#include "model/text_format.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "runtime/atomic_file.h"
#include "runtime/npy.h"

namespace gnnrt::model {

using namespace shard_files;  // NOLINT(google-build-using-namespace): this file is their other half

namespace {

// 2: the self-loop graph numbered in destination order (model::self_loop_ids);
// a version-1 folder's self_loops_edge_id would draw other attention masks.
constexpr const char* kFormat = "gnnrt-shards-2";


// The arrays of a shard, by file name, in a fixed order.
std::vector<std::pair<std::string, Tensor>> arrays_of(const Shard& s) {
  const int64_t n = s.num_local();
  const auto edges = [](const LocalGraph& g) { return static_cast<int64_t>(g.src.size()); };
  const auto m = static_cast<int64_t>(s.mirrors.size());
  std::vector<std::pair<std::string, Tensor>> arrays{
      {"global_id", tensor_of(s.global_id, {n})},
      {"is_master", tensor_of(s.is_master, {n})},
      {"graph_src", tensor_of(s.graph.src, {edges(s.graph)})},
      {"graph_dst", tensor_of(s.graph.dst, {edges(s.graph)})},
      {"graph_edge_id", tensor_of(s.graph.edge_id, {edges(s.graph)})},
      {"graph_in_degree", tensor_of(s.graph.in_degree, {n})},
      {"self_loops_src", tensor_of(s.self_loops.src, {edges(s.self_loops)})},
      {"self_loops_dst", tensor_of(s.self_loops.dst, {edges(s.self_loops)})},
      {"self_loops_edge_id", tensor_of(s.self_loops.edge_id, {edges(s.self_loops)})},
      {"self_loops_in_degree", tensor_of(s.self_loops.in_degree, {n})},
      {"mirror_row", tensor_of(s.mirrors.local_row, {m})},
      {"mirror_global_id", tensor_of(s.mirrors.global_id, {m})},
      {"mirror_offset", tensor_of(s.mirrors.offset, {m + 1})},
      {"mirror_ranks", tensor_of(s.mirrors.ranks, {static_cast<int64_t>(s.mirrors.ranks.size())})},
  };
  if (s.x_sparse) {
    arrays.emplace_back("x_rowptr", tensor_of(s.x_sparse->rowptr, {n + 1}));
    arrays.emplace_back("x_col", tensor_of(s.x_sparse->col, {s.x_sparse->nnz()}));
    arrays.emplace_back("x_values", tensor_of(s.x_sparse->values, {s.x_sparse->nnz()}));
  } else {
    arrays.emplace_back("x", tensor_of(s.x, {n, s.num_features}));
  }
  arrays.emplace_back("y", tensor_of(s.y, {n}));
  arrays.emplace_back("train_mask", tensor_of(s.train_mask, {n}));
  arrays.emplace_back("val_mask", tensor_of(s.val_mask, {n}));
  arrays.emplace_back("test_mask", tensor_of(s.test_mask, {n}));
  return arrays;
}

int64_t count(const std::vector<uint8_t>& mask) {
  return std::count_if(mask.begin(), mask.end(), [](uint8_t b) { return b != 0; });
}

// The id of a partition run: a hash of what was partitioned and how.
uint64_t run_id(const Dataset& data, const EdgePartition& p, const PartitionOptions& options,
                const proto::Job& job) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, options.seed);
  const std::string what = fmt::format("{} {} {} {} {}", name(options.method), p.parts,
                                       data.num_nodes, data.num_edges(), text_of(job.dataset()));
  XXH64_update(state, what.data(), what.size());
  XXH64_update(state, p.edge_part.data(), p.edge_part.size() * sizeof(int32_t));
  XXH64_update(state, p.master.data(), p.master.size() * sizeof(int32_t));
  XXH64_update(state, data.src.data(), data.src.size() * sizeof(int64_t));
  XXH64_update(state, data.dst.data(), data.dst.size() * sizeof(int64_t));
  const uint64_t id = XXH64_digest(state);
  XXH64_freeState(state);
  return id;
}


// The graph's edges in ascending global edge id (src, dst and edge_id
// reordered together; the ids are unique; in_degree is per vertex and stays).
void sort_by_edge_id(LocalGraph& g) {
  std::vector<size_t> order(g.edge_id.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return g.edge_id[a] < g.edge_id[b]; });
  LocalGraph sorted;
  for (const size_t k : order) {
    sorted.src.push_back(g.src[k]);
    sorted.dst.push_back(g.dst[k]);
    sorted.edge_id.push_back(g.edge_id[k]);
  }
  g.src = std::move(sorted.src);
  g.dst = std::move(sorted.dst);
  g.edge_id = std::move(sorted.edge_id);
}

}  // namespace

Shard make_shard(const Dataset& data, const EdgePartition& p, int rank) {
  const int64_t n = data.num_nodes;
  if (p.num_nodes != n || p.edge_part.size() != data.src.size()) {
    throw ShardError(fmt::format("shard: the partition covers {} vertices and {} edges, the dataset "
                                 "has {} and {}", p.num_nodes, p.edge_part.size(), n, data.num_edges()));
  }
  if (rank < 0 || rank >= p.parts) {
    throw ShardError(fmt::format("shard: rank {} is outside the partition's {} parts", rank, p.parts));
  }
  Shard s;
  s.rank = rank;
  s.parts = p.parts;
  s.num_nodes = n;
  s.num_features = data.num_features;
  s.num_classes = data.num_classes;
  s.train_count = count(data.train_mask);
  s.val_count = count(data.val_mask);
  s.test_count = count(data.test_mask);

  // Local vertices: every vertex this rank holds a replica of, by global id.
  std::vector<int32_t> local(static_cast<size_t>(n), -1);
  for (int64_t v = 0; v < n; ++v) {
    const auto replicas = p.replicas(v);
    if (!std::binary_search(replicas.begin(), replicas.end(), rank)) continue;
    local[static_cast<size_t>(v)] = static_cast<int32_t>(s.global_id.size());
    s.global_id.push_back(v);
    s.is_master.push_back(p.master[static_cast<size_t>(v)] == rank ? 1 : 0);
    if (replicas.size() > 1) {
      std::vector<int32_t> others;
      for (int32_t q : replicas) {
        if (q != rank) others.push_back(q);
      }
      s.mirrors.add(static_cast<int64_t>(s.global_id.size()) - 1, v, others);
    }
  }
  const int64_t local_n = s.num_local();
  std::vector<int64_t> degree(static_cast<size_t>(n), 0), loop_degree(static_cast<size_t>(n), 1);
  const SelfLoopIds loop_ids = self_loop_ids(data);
  for (size_t e = 0; e < data.src.size(); ++e) {
    const int64_t u = data.src[e], v = data.dst[e];
    ++degree[static_cast<size_t>(v)];
    const bool mine = p.edge_part[e] == rank;
    if (mine) {
      s.graph.src.push_back(local[static_cast<size_t>(u)]);
      s.graph.dst.push_back(local[static_cast<size_t>(v)]);
      s.graph.edge_id.push_back(static_cast<int64_t>(e));
    }
    if (u == v) continue;  // the self-loop graph replaces the dataset's loops
    ++loop_degree[static_cast<size_t>(v)];
    if (mine) {
      s.self_loops.src.push_back(local[static_cast<size_t>(u)]);
      s.self_loops.dst.push_back(local[static_cast<size_t>(v)]);
      s.self_loops.edge_id.push_back(loop_ids.edge[e]);
    }
  }
  for (int64_t i = 0; i < local_n; ++i) {  // one loop per vertex, on its master
    if (!s.is_master[static_cast<size_t>(i)]) continue;
    s.self_loops.src.push_back(static_cast<int32_t>(i));
    s.self_loops.dst.push_back(static_cast<int32_t>(i));
    const int64_t v = s.global_id[static_cast<size_t>(i)];
    s.self_loops.edge_id.push_back(loop_ids.loop[static_cast<size_t>(v)]);
  }
  sort_by_edge_id(s.self_loops);
  const auto f = static_cast<size_t>(data.num_features);
  if (data.x_sparse) {
    s.x_sparse.emplace();
  } else {
    s.x.resize(static_cast<size_t>(local_n) * f);
  }
  for (int64_t i = 0; i < local_n; ++i) {
    const auto v = static_cast<size_t>(s.global_id[static_cast<size_t>(i)]);
    s.graph.in_degree.push_back(degree[v]);
    s.self_loops.in_degree.push_back(loop_degree[v]);
    if (data.x_sparse) {  // the vertex's stored values
      const SparseFeatures& from = *data.x_sparse;
      const auto b = static_cast<std::ptrdiff_t>(from.rowptr[v]);
      const auto e = static_cast<std::ptrdiff_t>(from.rowptr[v + 1]);
      s.x_sparse->col.insert(s.x_sparse->col.end(), from.col.begin() + b, from.col.begin() + e);
      s.x_sparse->values.insert(s.x_sparse->values.end(), from.values.begin() + b,
                                from.values.begin() + e);
      s.x_sparse->rowptr.push_back(s.x_sparse->nnz());
    } else {
      std::copy_n(data.x.begin() + static_cast<std::ptrdiff_t>(v * f), f,
                  s.x.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * f));
    }
    s.y.push_back(data.y[v]);
    const bool master = s.is_master[static_cast<size_t>(i)] != 0;
    s.train_mask.push_back(master && data.train_mask[v] ? 1 : 0);
    s.val_mask.push_back(master && data.val_mask[v] ? 1 : 0);
    s.test_mask.push_back(master && data.test_mask[v] ? 1 : 0);
  }
  return s;
}

void describe_partition(const PartitionStats& stats, proto::ShardManifest& m) {
  m.set_replication_factor(stats.replication_factor);
  m.set_edge_balance(stats.edge_balance);
  m.set_vertex_balance(stats.vertex_balance);
  m.set_shared_vertices(stats.shared_vertices);
  m.set_halo_rows(stats.halo_rows);
}

proto::ShardManifest write_shards(const fs::path& dir, const Dataset& data, const EdgePartition& p,
                                  const PartitionOptions& options, const proto::Job& job,
                                  std::vector<proto::HaloExchangePlan> halo) {
  proto::ShardManifest m;
  m.set_format(kFormat);
  m.set_run(run_id(data, p, options, job));
  m.set_dataset(text_of(job.dataset()));
  m.set_model(text_of(job.model()));
  m.set_method(name(options.method));
  m.set_parts(p.parts);
  m.set_seed(options.seed);
  m.set_num_nodes(data.num_nodes);
  m.set_num_edges(data.num_edges());
  m.set_num_features(data.num_features);
  m.set_num_classes(data.num_classes);
  m.set_features(data.x_sparse ? "sparse" : "dense");
  m.set_train_count(count(data.train_mask));
  m.set_val_count(count(data.val_mask));
  m.set_test_count(count(data.test_mask));
  const PartitionStats stats = p.stats();
  describe_partition(stats, m);
  int64_t epoch_row_bytes = 0;  // all exchanges of one epoch, per shared row
  for (proto::HaloExchangePlan& h : halo) {
    h.set_bytes(stats.halo_rows * h.row_bytes());
    epoch_row_bytes += h.row_bytes();
    *m.add_halo() = std::move(h);
  }
  m.set_halo_bytes_per_epoch(stats.halo_rows * epoch_row_bytes);

  const fs::path partial = partial_folder(dir);
  for (int r = 0; r < p.parts; ++r) {
    const Shard s = make_shard(data, p, r);
    proto::RankShard* rs = m.add_rank();
    rs->set_rank(r);
    rs->set_nodes(s.num_local());
    rs->set_masters(count(s.is_master));
    rs->set_edges(static_cast<int64_t>(s.graph.src.size()));
    rs->set_edges_self_loops(static_cast<int64_t>(s.self_loops.src.size()));
    rs->set_halo_rows(stats.part_halo_rows[static_cast<size_t>(r)]);
    rs->set_halo_bytes_per_epoch(rs->halo_rows() * epoch_row_bytes);
    const fs::path rd = rank_dir(partial, r);
    fs::create_directories(rd);
    for (const auto& [file, tensor] : arrays_of(s)) write_array(rd, file, tensor, *rs->mutable_array());
    write_run(rd, m.run());
  }
  write_file_atomically(partial / kManifest, text_of(m));
  publish(partial, dir);
  return m;
}

namespace {

// A shard's arrays against each other and their ranges: lengths that
// must agree and every value in its range (the kernels index with them;
// the checksums only vouch for what was written, and a hand-edited shard
// can carry new ones): the first one out names the file and row.
void check_shard(const Shard& s, const fs::path& rd) {
  // Sizes that must agree with each other (the checksums only vouch for
  // what was written).
  const auto n = static_cast<size_t>(s.num_local());
  for (const auto* v : {&s.is_master, &s.train_mask, &s.val_mask, &s.test_mask}) {
    if (v->size() != n) fail(rd, "arrays of different lengths");
  }
  const bool x_ok = s.x_sparse ? s.x_sparse->rowptr.size() == n + 1
                               : s.x.size() == n * static_cast<size_t>(s.num_features);
  if (s.y.size() != n || !x_ok ||
      s.graph.in_degree.size() != n || s.self_loops.in_degree.size() != n) {
    fail(rd, "arrays of different lengths");
  }
  const auto in_range = [&]<typename T>(const char* name, const std::vector<T>& v, int64_t lo, int64_t hi) {
    check_range(rd / (std::string(name) + ".npy"), v, lo, hi);
  };
  const auto local = static_cast<int64_t>(n);
  in_range("global_id", s.global_id, 0, s.num_nodes);
  for (const auto* flags : {&s.is_master, &s.train_mask, &s.val_mask, &s.test_mask}) {
    const char* name = flags == &s.is_master ? "is_master" : flags == &s.train_mask ? "train_mask"
                       : flags == &s.val_mask ? "val_mask" : "test_mask";
    in_range(name, *flags, 0, 2);
  }
  in_range("y", s.y, 0, s.num_classes);
  for (const auto& [prefix, g] : {std::pair<std::string, const LocalGraph*>{"graph", &s.graph}, {"self_loops", &s.self_loops}}) {
    if (g->src.size() != g->dst.size() || g->edge_id.size() != g->src.size()) fail(rd, "arrays of different lengths");
    in_range((prefix + "_src").c_str(), g->src, 0, local);
    in_range((prefix + "_dst").c_str(), g->dst, 0, local);
    in_range((prefix + "_in_degree").c_str(), g->in_degree, 0, std::numeric_limits<int64_t>::max());
    in_range((prefix + "_edge_id").c_str(), g->edge_id, 0, std::numeric_limits<int64_t>::max());
  }
  const auto& mt = s.mirrors;
  in_range("mirror_row", mt.local_row, 0, local);
  in_range("mirror_global_id", mt.global_id, 0, s.num_nodes);
  in_range("mirror_ranks", mt.ranks, 0, s.parts);
  if (mt.offset.size() != mt.local_row.size() + 1 || mt.offset.front() != 0 ||
      mt.offset.back() != static_cast<int64_t>(mt.ranks.size()) || !std::is_sorted(mt.offset.begin(), mt.offset.end())) {
    fail(rd / "mirror_offset.npy", "offsets do not ascend from 0 to the number of mirror ranks");
  }
  check_finite(rd / "x.npy", s.x, s.num_features);
  if (s.x_sparse) {
    for (size_t i = 0; i < s.x_sparse->values.size(); ++i) {
      if (!std::isfinite(s.x_sparse->values[i])) fail(rd / "x_values.npy", fmt::format("entry {} is {}", i, s.x_sparse->values[i]));
    }
  }
}

}  // namespace

proto::ShardManifest read_manifest(const fs::path& dir) { return shard_files::read_manifest(dir, kFormat); }

Shard read_shard(const fs::path& dir, int rank, int ranks, const proto::Job& job) {
  const proto::ShardManifest m = read_manifest(dir, kFormat);
  const fs::path manifest = dir / kManifest;
  if (m.parts() != ranks) {
    fail(manifest, fmt::format("holds shards for {} ranks, but the job runs on {}; partition again "
                               "with --parts {} (or run on {} ranks)", m.parts(), ranks, ranks,
                               m.parts()));
  }
  if (as_printed<proto::Dataset>(m.dataset()) != text_of(job.dataset())) {
    fail(manifest, fmt::format("holds another dataset: the shards were written for dataset {{ {} }}, "
                               "the job has dataset {{ {} }}", m.dataset(), text_of(job.dataset())));
  }
  if (as_printed<proto::Model>(m.model()) != text_of(job.model())) {
    fail(manifest, "the shards were written for another model than the job's (partition again with "
                   "this job)");
  }
  const fs::path rd = rank_dir(dir, rank);
  check_run(rd, m.run());
  Arrays arrays(read_arrays(rd, m.rank(rank).array()), rd, manifest, rank);
  const auto take = [&]<typename T>(const std::string& name) { return arrays.take<T>(name); };
  // The sizes the arrays are checked against.
  if (m.num_nodes() < 1 || m.num_nodes() > kMaxNodes) {
    fail(manifest, fmt::format("num_nodes = {} is outside [1, 2^31]", m.num_nodes()));
  }
  if (m.num_classes() < 1 || m.num_classes() > kMaxClasses) {
    fail(manifest, fmt::format("num_classes = {} is outside [1, {}]", m.num_classes(), kMaxClasses));
  }
  if (m.num_features() < 1 || m.num_features() > kMaxNodes) {
    fail(manifest, fmt::format("num_features = {} is outside [1, 2^31]", m.num_features()));
  }
  Shard s;
  s.rank = rank;
  s.parts = m.parts();
  s.num_nodes = m.num_nodes();
  s.num_features = m.num_features();
  s.num_classes = m.num_classes();
  s.train_count = m.train_count();
  s.val_count = m.val_count();
  s.test_count = m.test_count();
  s.global_id = take.template operator()<int64_t>("global_id");
  s.is_master = take.template operator()<uint8_t>("is_master");
  const auto load = [&](const char* prefix, LocalGraph& g) {
    const std::string p = prefix;
    g.src = take.template operator()<int32_t>(p + "_src");
    g.dst = take.template operator()<int32_t>(p + "_dst");
    g.edge_id = take.template operator()<int64_t>(p + "_edge_id");
    g.in_degree = take.template operator()<int64_t>(p + "_in_degree");
  };
  load("graph", s.graph);
  load("self_loops", s.self_loops);
  s.mirrors.local_row = take.template operator()<int64_t>("mirror_row");
  s.mirrors.global_id = take.template operator()<int64_t>("mirror_global_id");
  s.mirrors.offset = take.template operator()<int64_t>("mirror_offset");
  s.mirrors.ranks = take.template operator()<int32_t>("mirror_ranks");
  bool features_ok = true;
  if (m.features() == "sparse") {
    SparseFeatures& x = s.x_sparse.emplace();
    x.rowptr = take.template operator()<int64_t>("x_rowptr");
    x.col = take.template operator()<int32_t>("x_col");
    x.values = take.template operator()<float>("x_values");
    // Row pointers ascend from 0 to nnz and columns lie in [0, F): the
    // kernels trust them.
    features_ok = !x.rowptr.empty() && x.rowptr.front() == 0 && x.rowptr.back() == x.nnz() &&
                  x.col.size() == x.values.size() &&
                  std::is_sorted(x.rowptr.begin(), x.rowptr.end()) &&
                  std::all_of(x.col.begin(), x.col.end(),
                              [&](int32_t c) { return c >= 0 && c < s.num_features; });
  } else if (m.features() == "dense" || m.features().empty()) {
    s.x = take.template operator()<float>("x");
  } else {
    fail(manifest, fmt::format("features '{}' is neither dense nor sparse", m.features()));
  }
  s.y = take.template operator()<int64_t>("y");
  s.train_mask = take.template operator()<uint8_t>("train_mask");
  s.val_mask = take.template operator()<uint8_t>("val_mask");
  s.test_mask = take.template operator()<uint8_t>("test_mask");
  if (!features_ok) fail(rd, "x_rowptr/x_col are not a valid CSR of the features");
  check_shard(s, rd);
  return s;
}

PartitionOptions partition_options(const proto::Job& job, int parts) {
  PartitionOptions o;
  o.method = job.partition().method();
  o.parts = parts;
  o.seed = job.partition().seed();
  return o;
}

}  // namespace gnnrt::model
