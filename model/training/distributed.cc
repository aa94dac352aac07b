#include "model/training/distributed.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <google/protobuf/text_format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

#include "model/data/dataset.h"
#include "model/job.h"
#include "model/training/checkpoint.h"
#include "model/training/full_graph.h"
#include "runtime/builder.h"
#include "runtime/halo.h"
#include "runtime/npy.h"

namespace gnnrt::model {

bool is_bad_input(const std::exception& e) {
  if (const auto* peer = dynamic_cast<const PeerFailure*>(&e)) return peer->bad_input();
  return dynamic_cast<const std::invalid_argument*>(&e) != nullptr ||
         dynamic_cast<const DatasetError*>(&e) != nullptr ||
         dynamic_cast<const CheckpointError*>(&e) != nullptr ||
         dynamic_cast<const ShardError*>(&e) != nullptr ||
         dynamic_cast<const NpyError*>(&e) != nullptr ||
         dynamic_cast<const TensorError*>(&e) != nullptr;
}

void agree(collectives::Communicator& comm, std::string_view what, std::exception_ptr local) {
  // 0: fine, 1: failed, 2: failed on bad input.
  int32_t mine = 0;
  if (local) {
    try {
      std::rethrow_exception(local);
    } catch (const std::exception& e) {
      mine = is_bad_input(e) ? 2 : 1;
    } catch (...) {
      mine = 1;
    }
  }
  std::vector<int32_t> all(static_cast<size_t>(comm.size()));
  comm.allgather<int32_t>(std::span<const int32_t>(&mine, 1), all);
  if (local) std::rethrow_exception(local);
  std::vector<int> failed;
  bool bad_input = false;
  for (int q = 0; q < comm.size(); ++q) {
    if (all[static_cast<size_t>(q)] == 0) continue;
    failed.push_back(q);
    bad_input = bad_input || all[static_cast<size_t>(q)] == 2;
  }
  if (failed.empty()) return;
  throw PeerFailure(fmt::format("rank {}: {} failed on {} {} (see {} error)", comm.rank(), what,
                                failed.size() == 1 ? "rank" : "ranks", fmt::join(failed, ", "),
                                failed.size() == 1 ? "its" : "their"),
                    bad_input);
}

NetworkShape bind_shard(runtime::Core& core, Shard& s, const proto::Model& model) {
  using Adjacency = runtime::Core::Adjacency;
  const int64_t n = s.num_local();
  NetworkShape shape;
  shape.nodes = n;
  shape.features = s.num_features;
  shape.classes = s.num_classes;
  shape.edges = static_cast<int64_t>(s.graph.src.size());
  shape.edges_self_loops = static_cast<int64_t>(s.self_loops.src.size());
  shape.partitioned = true;
  // Each array goes to the core and leaves the shard at once: per-rank
  // memory holds one copy of the share.
  const auto bind = [&](const char* name, LocalGraph& g) {
    core.bind_graph(name, std::make_shared<const Adjacency>(Adjacency::build(g.src, g.dst, n, n)));
    core.memory().put(runtime::in_degree_name(name), Tensor::from<int64_t>(g.in_degree, {n}));
    core.memory().put(runtime::edge_id_name(name),
                      Tensor::from<int64_t>(g.edge_id, {static_cast<int64_t>(g.edge_id.size())}));
    g = {};
  };
  bind(kGraph, s.graph);
  bind(kGraphSelfLoops, s.self_loops);
  auto& mem = core.memory();
  mem.put(runtime::kNodeGlobalId, Tensor::from<int64_t>(s.global_id, {n}));
  mem.put(runtime::kNodeIsMaster, Tensor::from<uint8_t>(s.is_master, {n}));
  if (s.x_sparse) {
    bind_sparse_features(core, *s.x_sparse, n, s.num_features);
    shape.feature_nnz = s.x_sparse->nnz();
    s.x_sparse.reset();
  } else {
    mem.put(kFeatures, Tensor::from<float>(s.x, {n, s.num_features}));
    s.x = std::vector<float>();  // frees (`= {}` would keep the capacity)
  }
  mem.put("y", Tensor::from<int64_t>(s.y, {n}));
  const std::pair<const char*, const std::vector<uint8_t>*> masks[] = {
      {"train_mask", &s.train_mask}, {"val_mask", &s.val_mask}, {"test_mask", &s.test_mask}};
  const int64_t counts[] = {s.train_count, s.val_count, s.test_count};
  for (size_t i = 0; i < 3; ++i) {
    mem.put(masks[i].first, Tensor::from<uint8_t>(*masks[i].second, {n}));
    const int64_t c = counts[i];
    mem.put(runtime::count_name(masks[i].first), Tensor::from<int64_t>(std::span(&c, 1), {1}));
  }
  if (model.loss() == proto::Model::MSE) {
    Tensor onehot(DType::kF32, {n, s.num_classes});
    auto v = onehot.values<float>();
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i * s.num_classes + s.y[static_cast<size_t>(i)])] = 1;
    mem.put("y_onehot", std::move(onehot));
  }
  return shape;
}

void bind_halo(runtime::Core& core, const Shard& s, const collectives::Communicator& comm,
               runtime::HaloMode mode) {
  core.bind_halo(std::make_shared<runtime::Halo>(comm, s.mirrors, s.global_id, s.num_nodes, mode));
}

void check_same(collectives::Communicator& comm, uint64_t fingerprint, std::string_view what) {
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
  const auto mine = static_cast<int64_t>(fingerprint);
  std::vector<int64_t> got(all.size());
  comm.allgather<int64_t>(std::span<const int64_t>(&mine, 1), got);
  std::map<int64_t, std::vector<int>> groups;
  for (int q = 0; q < comm.size(); ++q) groups[got[static_cast<size_t>(q)]].push_back(q);
  if (groups.size() == 1) return;
  std::vector<std::string> parts;
  for (const auto& [fp, ranks] : groups) {
    parts.push_back(fmt::format("{} {} {:016x}", ranks.size() == 1 ? "rank" : "ranks",
                                fmt::join(ranks, ", "), static_cast<uint64_t>(fp)));
  }
  throw std::invalid_argument(fmt::format(
      "rank {}: the ranks would run different {}: {}", comm.rank(), what, fmt::join(parts, "; ")));
}

namespace {

void flatten(const google::protobuf::Message& m, const std::string& prefix, std::vector<std::string>& out) {
  using google::protobuf::FieldDescriptor;
  const auto* d = m.GetDescriptor();
  const auto* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const std::string name = prefix + f->name();
    const auto value = [&](int index) {
      std::string text;
      google::protobuf::TextFormat::PrintFieldValueToString(m, f, index, &text);
      return text;
    };
    if (f->is_repeated()) {
      const int n = r->FieldSize(m, f);
      out.push_back(fmt::format("{}.size={}", name, n));
      for (int k = 0; k < n; ++k) {
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          flatten(r->GetRepeatedMessage(m, f, k), fmt::format("{}[{}].", name, k), out);
        } else {
          out.push_back(fmt::format("{}[{}]={}", name, k, value(k)));
        }
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      flatten(r->GetMessage(m, f), name + ".", out);  // unset: its defaults
    } else {
      out.push_back(name + "=" + value(-1));
    }
  }
}

// Every rank's string, on every rank (lengths, then the bytes as int32 words).
std::vector<std::string> allgather_strings(collectives::Communicator& comm, const std::string& mine) {
  const int p = comm.size();
  const int64_t length = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(static_cast<size_t>(p));
  comm.allgather<int64_t>(std::span<const int64_t>(&length, 1), lengths);
  std::vector<int32_t> words((mine.size() + 3) / 4, 0);
  std::memcpy(words.data(), mine.data(), mine.size());
  std::vector<size_t> counts;
  size_t total = 0;
  for (int64_t l : lengths) {
    counts.push_back(static_cast<size_t>((l + 3) / 4));
    total += counts.back();
  }
  std::vector<int32_t> all(total);
  comm.allgather_v_async<int32_t>(words, all, counts).wait();
  std::vector<std::string> out;
  size_t at = 0;
  for (int q = 0; q < p; ++q) {
    out.emplace_back(reinterpret_cast<const char*>(all.data() + at), static_cast<size_t>(lengths[static_cast<size_t>(q)]));
    at += counts[static_cast<size_t>(q)];
  }
  return out;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

}  // namespace

std::vector<std::string> job_fields(const proto::Job& job) {
  std::vector<std::string> out;
  flatten(job, "", out);
  return out;
}

void check_same_job(collectives::Communicator& comm, const proto::Job& job, const std::vector<std::string>& extra) {
  std::vector<std::string> lines = job_fields(job);
  lines.insert(lines.end(), extra.begin(), extra.end());
  check_same_fields(comm, lines, "jobs");
}

void check_same_fields(collectives::Communicator& comm, const std::vector<std::string>& lines, std::string_view what) {
  std::string text;
  for (const auto& l : lines) text += l + '\n';
  const auto mine = static_cast<int64_t>(XXH64(text.data(), text.size(), 0));
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  comm.allgather<int64_t>(std::span<const int64_t>(&mine, 1), all);
  if (std::all_of(all.begin(), all.end(), [&](int64_t h) { return h == all[0]; })) return;
  // Some rank differs: every rank learns every rank's fields, and names
  // each field that differs with the ranks holding each value.
  const std::vector<std::string> texts = allgather_strings(comm, text);
  std::map<std::string, std::map<std::string, std::vector<int>>> values;  // field -> value -> ranks
  std::vector<std::string> order;
  for (int q = 0; q < comm.size(); ++q) {
    std::istringstream in(texts[static_cast<size_t>(q)]);
    for (std::string line; std::getline(in, line);) {
      const size_t eq = line.find('=');
      const std::string field = line.substr(0, eq);
      if (!values.count(field)) order.push_back(field);
      values[field][eq == std::string::npos ? "" : line.substr(eq + 1)].push_back(q);
    }
  }
  std::vector<std::string> parts;
  for (const auto& field : order) {
    const auto& by_value = values[field];
    size_t held = 0;
    for (const auto& [v, ranks] : by_value) held += ranks.size();
    if (by_value.size() == 1 && held == static_cast<size_t>(comm.size())) continue;
    // Each value with its ranks, in the order of their first rank.
    std::vector<std::pair<std::vector<int>, std::string>> holders;
    for (const auto& [v, ranks] : by_value) holders.emplace_back(ranks, v);
    std::sort(holders.begin(), holders.end());
    std::vector<std::string> each;
    std::vector<int> with;
    for (const auto& [ranks, v] : holders) {
      each.push_back(fmt::format("{} on {}", v, ranks_text(ranks)));
      with.insert(with.end(), ranks.begin(), ranks.end());
    }
    if (held < static_cast<size_t>(comm.size())) {
      std::vector<int> without;
      for (int q = 0; q < comm.size(); ++q) {
        if (std::find(with.begin(), with.end(), q) == with.end()) without.push_back(q);
      }
      each.push_back(fmt::format("absent on {}", ranks_text(without)));
    }
    parts.push_back(fmt::format("{} is {}", field, fmt::join(each, ", ")));
  }
  throw std::invalid_argument(fmt::format("rank {}: the ranks were started with different {}: {}", comm.rank(),
                                          what, fmt::join(parts, "; ")));
}

uint64_t parameter_checksum(const runtime::Core& core, const std::vector<ParamDecl>& params) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  for (const ParamDecl& p : params) {
    const Tensor& t = core.memory().at(p.name);
    XXH64_update(state, t.bytes().data(), t.bytes().size());
  }
  const uint64_t sum = XXH64_digest(state);
  XXH64_freeState(state);
  return sum;
}

void flip_first_parameter_bit(runtime::Core& core, const std::vector<ParamDecl>& params, int rank) {
  if (params.empty()) return;
  const std::string& name = params.front().name;
  auto v = core.memory().at(name).values<float>();
  if (v.empty()) return;
  uint32_t bits;
  std::memcpy(&bits, v.data(), 4);
  bits ^= 1;
  std::memcpy(v.data(), &bits, 4);
  spdlog::warn("fault injection: flipped the lowest bit of {}[0] on rank {}", name, rank);
}

}  // namespace gnnrt::model
