#include "runtime/program_cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "runtime/atomic_file.h"
#include "runtime/compiled_program.pb.h"
#include "runtime/passes.h"

namespace gnnrt::runtime {
namespace {

Role parse_role(const std::string& name) {
  for (Role r : {Role::kInput, Role::kParameter, Role::kState, Role::kTemp}) {
    if (to_string(r) == name) return r;
  }
  throw std::invalid_argument("unknown role " + name);
}

proto::CompiledProgram to_proto(const CompiledProgram& c, std::string_view version) {
  proto::CompiledProgram m;
  m.set_compiler_version(std::string(version));
  m.set_key(c.key);
  m.set_name(c.program.name);
  m.set_float_type(std::string(to_string(c.program.float_type)));
  m.set_partitioned(c.program.partitioned);
  m.set_local_nodes(c.program.local_nodes);
  m.set_replicated(c.program.replicated);
  for (const ValueInfo& v : c.program.values) {
    auto* pv = m.add_values();
    pv->set_name(v.name);
    pv->set_dtype(std::string(to_string(v.dtype)));
    for (int64_t d : v.shape) pv->add_shape(d);
    pv->set_role(std::string(to_string(v.role)));
    pv->set_offset(v.offset);
  }
  for (const GraphInfo& g : c.program.graphs) {
    auto* pg = m.add_graphs();
    pg->set_name(g.name);
    pg->set_num_src(g.num_src);
    pg->set_num_dst(g.num_dst);
    pg->set_num_edges(g.num_edges);
  }
  for (const Op& op : c.program.ops) {
    auto* po = m.add_ops();
    po->set_kind(std::string(to_string(op.kind)));
    for (ValueId v : op.inputs) po->add_inputs(v);
    for (ValueId v : op.outputs) po->add_outputs(v);
    po->set_scope(op.scope);
    *po->mutable_attrs() = op.attrs;
  }
  for (ValueId v : c.program.outputs) m.add_outputs(v);
  auto* plan = m.mutable_plan();
  plan->set_arena_bytes(c.plan.arena_bytes);
  plan->set_persistent_bytes(c.plan.persistent_bytes);
  plan->set_peak_bytes(c.plan.peak_bytes);
  plan->set_peak_op(c.plan.peak_op);
  plan->set_peak_live_bytes(c.plan.peak_live_bytes);
  plan->set_graph_bytes(c.plan.graph_bytes);
  for (ValueId v : c.params) m.add_params(v);
  for (ValueId v : c.grads) m.add_grads(v);
  m.set_loss(c.loss);
  return m;
}

CompiledProgram from_proto(const proto::CompiledProgram& m) {
  CompiledProgram c;
  c.key = m.key();
  c.program.name = m.name();
  c.program.float_type = parse_dtype(m.float_type());
  c.program.partitioned = m.partitioned();
  c.program.local_nodes = m.local_nodes();
  c.program.replicated = m.replicated();
  for (const auto& pv : m.values()) {
    c.program.values.push_back(ValueInfo{pv.name(), parse_dtype(pv.dtype()),
                                         {pv.shape().begin(), pv.shape().end()},
                                         parse_role(pv.role()), pv.offset()});
  }
  for (const auto& pg : m.graphs()) {
    c.program.graphs.push_back(GraphInfo{pg.name(), pg.num_src(), pg.num_dst(), pg.num_edges()});
  }
  for (const auto& po : m.ops()) {
    Op op;
    op.kind = parse_op_kind(po.kind());
    op.inputs.assign(po.inputs().begin(), po.inputs().end());
    op.outputs.assign(po.outputs().begin(), po.outputs().end());
    op.scope = po.scope();
    op.attrs = po.attrs();
    c.program.ops.push_back(std::move(op));
  }
  c.program.outputs.assign(m.outputs().begin(), m.outputs().end());
  c.plan.arena_bytes = m.plan().arena_bytes();
  c.plan.persistent_bytes = m.plan().persistent_bytes();
  c.plan.graph_bytes = m.plan().graph_bytes();
  c.plan.peak_bytes = m.plan().peak_bytes();
  c.plan.peak_op = m.plan().peak_op();
  c.plan.peak_live_bytes = m.plan().peak_live_bytes();
  c.params.assign(m.params().begin(), m.params().end());
  c.grads.assign(m.grads().begin(), m.grads().end());
  c.loss = m.loss();
  return c;
}

}  // namespace

std::filesystem::path default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::filesystem::path(xdg) / "gnnrt";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::filesystem::path(home) / ".cache" / "gnnrt";
  }
  return std::filesystem::temp_directory_path() / "gnnrt-cache";
}

namespace {

// The program as the key hashes it: what Program::to_text() prints, as
// length-prefixed fields, each op's attributes in Protobuf's binary form
// (printing them through reflection was a large share of a cached start for
// a model of thousands of ops; docs/kernels.md).
class ProgramHash {
 public:
  ProgramHash() { XXH64_reset(state_, 0); }
  ~ProgramHash() { XXH64_freeState(state_); }
  ProgramHash(const ProgramHash&) = delete;
  ProgramHash& operator=(const ProgramHash&) = delete;

  void add(const void* data, std::size_t size) {
    const uint64_t n = size;
    XXH64_update(state_, &n, sizeof n);
    XXH64_update(state_, data, size);
  }
  void add(std::string_view s) { add(s.data(), s.size()); }
  template <typename T>
  void add_values(const std::vector<T>& v) { add(v.data(), v.size() * sizeof(T)); }
  void add_int(int64_t v) { add(&v, sizeof v); }

  void add(const Program& p) {
    add(p.name);
    add_values(std::vector<int64_t>{static_cast<int64_t>(p.float_type), p.partitioned, p.replicated, p.local_nodes});
    for (const GraphInfo& g : p.graphs) {
      add(g.name);
      add_values(std::vector<int64_t>{g.num_src, g.num_dst, g.num_edges});
    }
    for (const ValueInfo& v : p.values) {
      add(v.name);
      add_int(static_cast<int64_t>(v.role));
      add_int(static_cast<int64_t>(v.dtype));
      add_values(v.shape);
    }
    std::string attrs;
    for (const Op& op : p.ops) {
      add_int(static_cast<int64_t>(op.kind));
      add_values(op.inputs);
      add_values(op.outputs);
      attrs.clear();
      op.attrs.SerializeToString(&attrs);  // no maps: the same fields, the same bytes
      add(attrs);
      add(op.scope);
    }
    add_values(p.outputs);
  }

  uint64_t digest() const { return XXH64_digest(state_); }

 private:
  XXH64_state_t* state_ = XXH64_createState();
};

}  // namespace

std::string cache_key(const Program& program, const CompileOptions& options,
                      const DeviceProfile& profile, bool debug) {
  ProgramHash hash;
  hash.add(program);
  std::string text = fmt::format("{}\n{}\ndebug={}\nprogram={:016x}\n", compiler_version(), profile.to_text(),
                                 debug, hash.digest());
  if (options.train) {
    text += fmt::format("train loss={} params=({}) optimizer={} keep_grads={} bucket_bytes={}\n",
                        options.train->loss, fmt::join(options.train->params, ","),
                        options.train->optimizer.to_text(), options.train->keep_grads,
                        options.bucket_bytes);
  }
  return fmt::format("{:016x}", XXH64(text.data(), text.size(), 0));
}

std::filesystem::path ProgramCache::path(const std::string& key) const {
  return dir_ / (key + ".gnnrtprog");
}

// An entry is [xxh64 of the payload, 8 bytes little-endian][payload]. Any
// entry that fails a check is a miss: the caller compiles and overwrites it.
std::optional<CompiledProgram> ProgramCache::load(const std::string& key) const {
  if (dir_.empty()) return std::nullopt;
  std::ifstream in(path(key), std::ios::binary);
  if (!in) return std::nullopt;
  // One read of the whole entry (a stream iterator is slow on large entries).
  in.seekg(0, std::ios::end);
  std::string bytes(static_cast<std::size_t>(std::max<std::streamoff>(0, in.tellg())), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) return std::nullopt;
  const auto reject = [&](std::string_view why) -> std::optional<CompiledProgram> {
    spdlog::warn("program cache: {} {}; recompiling", path(key).string(), why);
    return std::nullopt;
  };
  if (bytes.size() < 8) return reject("is truncated");
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data(), 8);
  if (stored != XXH64(bytes.data() + 8, bytes.size() - 8, 0)) return reject("fails its checksum");
  proto::CompiledProgram m;
  if (!m.ParseFromArray(bytes.data() + 8, static_cast<int>(bytes.size() - 8))) {
    return reject("does not parse");
  }
  if (m.key() != key) return reject(fmt::format("holds key {}", m.key()));
  if (m.compiler_version() != compiler_version()) {
    return reject(fmt::format("was compiled by {}, not {}", m.compiler_version(), compiler_version()));
  }
  try {
    CompiledProgram c = from_proto(m);
    verify(c.program);
    for (const ValueInfo& v : c.program.values) {
      if (v.role == Role::kTemp && v.offset >= 0 && v.offset + v.bytes() > c.plan.arena_bytes) {
        return reject(fmt::format("places '{}' outside its arena", v.name));
      }
    }
    c.from_cache = true;
    return c;
  } catch (const std::exception& e) {
    return reject(e.what());
  }
}

void ProgramCache::store(const CompiledProgram& compiled, std::string_view version) const {
  if (dir_.empty()) return;
  std::filesystem::create_directories(dir_);
  std::string payload;
  if (!to_proto(compiled, version).SerializeToString(&payload)) {
    throw std::runtime_error("cannot serialise program " + compiled.program.name);
  }
  const uint64_t sum = XXH64(payload.data(), payload.size(), 0);
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &sum, 8);
  bytes += payload;
  write_file_atomically(path(compiled.key), bytes);
}

}  // namespace gnnrt::runtime
