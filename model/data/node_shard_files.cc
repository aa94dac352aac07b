#include "model/data/node_shard_files.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cmath>
#include <limits>

#include "model/data/dataset.h"
#include "model/data/shard_files.h"
#include "runtime/atomic_file.h"

namespace gnnrt::model {

using namespace shard_files;  // NOLINT(google-build-using-namespace): the file layer of shards

namespace {

constexpr const char* kCommon = "common";

std::string_view ownership_name(const proto::Job& job, int parts) {
  return metis_ownership(job, parts) ? "metis" : "ranges";
}

template <typename T>
Tensor list_of(const std::vector<T>& v) {
  return tensor_of(v, {static_cast<int64_t>(v.size())});
}

// The run id: what was partitioned and how, and every array's checksum.
uint64_t run_id(const proto::ShardManifest& m) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, m.seed());
  const std::string what = fmt::format("{} {} {} {} {} {}", m.format(), m.dataset(), m.method(), m.parts(),
                                       m.undirected(), m.num_nodes());
  XXH64_update(state, what.data(), what.size());
  const auto add = [&](const Listing& arrays) {
    for (const proto::ShardArray& a : arrays) {
      const uint64_t h = a.xxh64();
      XXH64_update(state, &h, sizeof h);
    }
  };
  add(m.common());
  for (const proto::RankShard& r : m.rank()) add(r.array());
  const uint64_t id = XXH64_digest(state);
  XXH64_freeState(state);
  return id;
}

void check_ascending(const fs::path& file, const std::vector<int32_t>& v, int64_t n) {
  check_range(file, v, 0, n);
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] <= v[i - 1]) fail(file, fmt::format("row {} holds {} after {}: the ids must ascend", i, v[i], v[i - 1]));
  }
}

// The shard's arrays against each other and the sampler's assumptions:
// offsets ascending from 0 to the edge count, each node's sources
// ascending, distinct, in range and not itself, labels in range, finite
// features.
void check_node_shard(const NodeShard& s, const fs::path& rd) {
  const int64_t n = s.owned();
  if (static_cast<int64_t>(s.indptr.size()) != n + 1) {
    fail(rd / "indptr.npy", fmt::format("holds {} offsets for {} owned nodes", s.indptr.size(), n));
  }
  if (s.indptr.front() != 0 || s.indptr.back() != static_cast<int64_t>(s.indices.size())) {
    fail(rd / "indptr.npy", fmt::format("runs from {} to {}, not from 0 to the {} in-edges", s.indptr.front(),
                                        s.indptr.back(), s.indices.size()));
  }
  // Every offset in order before any row is read by them.
  for (int64_t r = 0; r < n; ++r) {
    if (s.indptr[r + 1] < s.indptr[r]) {
      fail(rd / "indptr.npy", fmt::format("row {} holds {} after {}: offsets must not go down", r + 1,
                                          s.indptr[r + 1], s.indptr[r]));
    }
  }
  for (int64_t r = 0; r < n; ++r) {
    const int64_t b = s.indptr[r], e = s.indptr[r + 1];
    const int64_t v = s.global(r);
    for (int64_t k = b; k < e; ++k) {
      const int32_t u = s.indices[static_cast<size_t>(k)];
      if (u < 0 || u >= s.num_nodes || u == v || (k > b && u <= s.indices[static_cast<size_t>(k - 1)])) {
        fail(rd / "indices.npy",
             fmt::format("row {} holds {}: node {}'s sources must be distinct ids in [0, {}), ascending, "
                         "not itself", k, u, v, s.num_nodes));
      }
    }
  }
  if (static_cast<int64_t>(s.y.size()) != n) fail(rd / "y.npy", fmt::format("holds {} labels for {} nodes", s.y.size(), n));
  check_range(rd / "y.npy", s.y, 0, s.num_classes);
  if (static_cast<int64_t>(s.x.size()) != n * s.num_features) {
    fail(rd / "x.npy", fmt::format("holds {} values for {} nodes of {} features", s.x.size(), n, s.num_features));
  }
  check_finite(rd / "x.npy", s.x, s.num_features);
}

}  // namespace

proto::ShardManifest write_node_shards(const fs::path& dir, const proto::Job& job, int parts,
                                       const std::function<NodeShard(int rank)>& make) {
  proto::ShardManifest m;
  m.set_format(kNodeShardFormat);
  m.set_dataset(text_of(job.dataset()));
  m.set_model(text_of(job.model()));
  m.set_method(std::string(ownership_name(job, parts)));
  m.set_parts(parts);
  m.set_seed(job.seed());
  m.set_undirected(job.sampling().undirected());
  m.set_features("dense");
  const fs::path partial = partial_folder(dir);
  for (int r = 0; r < parts; ++r) {
    const NodeShard s = make(r);
    if (r == 0) {
      m.set_name(s.name);
      m.set_num_nodes(s.num_nodes);
      m.set_num_features(s.num_features);
      m.set_num_classes(s.num_classes);
      m.set_train_count(static_cast<int64_t>(s.train.size()));
      m.set_val_count(static_cast<int64_t>(s.val.size()));
      m.set_test_count(static_cast<int64_t>(s.test.size()));
      const fs::path cd = partial / kCommon;
      fs::create_directories(cd);
      write_array(cd, "train", list_of(s.train), *m.mutable_common());
      write_array(cd, "val", list_of(s.val), *m.mutable_common());
      write_array(cd, "test", list_of(s.test), *m.mutable_common());
      if (!s.by_ranges()) write_array(cd, "owner", list_of(s.owner), *m.mutable_common());
    }
    const int64_t n = s.owned();
    proto::RankShard* rs = m.add_rank();
    rs->set_rank(r);
    rs->set_nodes(n);
    rs->set_masters(n);
    rs->set_edges(static_cast<int64_t>(s.indices.size()));
    m.set_num_edges(m.num_edges() + rs->edges());
    const fs::path rd = rank_dir(partial, r);
    fs::create_directories(rd);
    write_array(rd, "indptr", list_of(s.indptr), *rs->mutable_array());
    write_array(rd, "indices", list_of(s.indices), *rs->mutable_array());
    write_array(rd, "x", tensor_of(s.x, {n, s.num_features}), *rs->mutable_array());
    write_array(rd, "y", list_of(s.y), *rs->mutable_array());
    if (!s.by_ranges()) write_array(rd, "owned_nodes", list_of(s.owned_nodes), *rs->mutable_array());
  }
  m.set_run(run_id(m));
  write_run(partial / kCommon, m.run());
  for (int r = 0; r < parts; ++r) write_run(rank_dir(partial, r), m.run());
  write_file_atomically(partial / kManifest, text_of(m));
  publish(partial, dir);
  return m;
}

NodeShard read_node_shard(const fs::path& dir, int rank, int ranks, const proto::Job& job, bool directed_matters) {
  const proto::ShardManifest m = read_manifest(dir, kNodeShardFormat);
  const fs::path manifest = dir / kManifest;
  if (m.parts() != ranks) {
    fail(manifest, fmt::format("holds shards for {} ranks, but the job runs on {}; partition again with --parts {} "
                               "(or run on {} ranks)", m.parts(), ranks, ranks, m.parts()));
  }
  if (as_printed<proto::Dataset>(m.dataset()) != text_of(job.dataset())) {
    fail(manifest, fmt::format("holds another dataset: the shards were written for dataset {{ {} }}, the job has "
                               "dataset {{ {} }}", m.dataset(), text_of(job.dataset())));
  }
  if (m.method() != ownership_name(job, ranks)) {
    fail(manifest, fmt::format("owns nodes by {}, the job's sampling.ownership on {} ranks by {}: partition again "
                               "with this job", m.method(), ranks, ownership_name(job, ranks)));
  }
  if (directed_matters && m.undirected() != job.sampling().undirected()) {
    fail(manifest, fmt::format("was written with sampling.undirected = {}, the job has {}: partition again with "
                               "this job", m.undirected(), job.sampling().undirected()));
  }
  if (m.num_nodes() < 1 || m.num_nodes() >= kMaxNodes) {
    fail(manifest, fmt::format("num_nodes = {} is outside [1, 2^31)", m.num_nodes()));
  }
  if (m.num_classes() < 1 || m.num_classes() > kMaxClasses) {
    fail(manifest, fmt::format("num_classes = {} is outside [1, {}]", m.num_classes(), kMaxClasses));
  }
  if (m.num_features() < 1 || m.num_features() >= kMaxNodes) {
    fail(manifest, fmt::format("num_features = {} is outside [1, 2^31)", m.num_features()));
  }
  NodeShard s;
  s.name = m.name();
  s.num_nodes = m.num_nodes();
  s.num_features = m.num_features();
  s.num_classes = m.num_classes();
  s.rank = rank;
  const bool metis = m.method() == "metis";

  const fs::path cd = dir / kCommon;
  check_run(cd, m.run());
  Arrays common(read_arrays(cd, m.common()), cd, manifest, -1);
  s.train = common.take<int32_t>("train");
  s.val = common.take<int32_t>("val");
  s.test = common.take<int32_t>("test");
  check_ascending(cd / "train.npy", s.train, s.num_nodes);
  check_ascending(cd / "val.npy", s.val, s.num_nodes);
  check_ascending(cd / "test.npy", s.test, s.num_nodes);
  if (metis) {
    s.owner = common.take<int32_t>("owner");
    if (static_cast<int64_t>(s.owner.size()) != s.num_nodes) {
      fail(cd / "owner.npy", fmt::format("holds {} owners for {} nodes", s.owner.size(), s.num_nodes));
    }
    check_range(cd / "owner.npy", s.owner, 0, ranks);
  }

  const fs::path rd = rank_dir(dir, rank);
  check_run(rd, m.run());
  Arrays arrays(read_arrays(rd, m.rank(rank).array()), rd, manifest, rank);
  if (metis) {
    s.owned_nodes = arrays.take<int32_t>("owned_nodes");
    check_ascending(rd / "owned_nodes.npy", s.owned_nodes, s.num_nodes);
    // Exactly the nodes the owner table gives this rank.
    size_t k = 0;
    for (int64_t v = 0; v < s.num_nodes; ++v) {
      if (s.owner[static_cast<size_t>(v)] != rank) continue;
      if (k >= s.owned_nodes.size() || s.owned_nodes[k] != v) {
        fail(rd / "owned_nodes.npy", fmt::format("does not list node {}, which common/owner.npy gives rank {}", v, rank));
      }
      ++k;
    }
    if (k != s.owned_nodes.size()) {
      fail(rd / "owned_nodes.npy", fmt::format("lists {} nodes, common/owner.npy gives rank {} {}", s.owned_nodes.size(),
                                               rank, k));
    }
  } else {
    s.begin = range_begin(s.num_nodes, rank, ranks);
    s.end = range_begin(s.num_nodes, rank + 1, ranks);
  }
  s.indptr = arrays.take<int64_t>("indptr");
  s.indices = arrays.take<int32_t>("indices");
  s.x = arrays.take<float>("x");
  s.y = arrays.take<int32_t>("y");
  check_node_shard(s, rd);
  return s;
}

}  // namespace gnnrt::model
