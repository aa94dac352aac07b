#include "runtime/core.h"

#include <fmt/format.h>
#include <xxhash.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "collectives/communicator.h"
#include "runtime/atomic_file.h"
#include "runtime/autodiff.h"
#include "runtime/passes.h"
#include "runtime/compiler_id.h"
#include "runtime/program_cache.h"

namespace gnnrt::runtime {

std::string_view compiler_version() { return "gnnrt-compiler-2+" GNNRT_COMPILER_ID; }

Tensor& DeviceMemory::at(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw RunError(fmt::format("no tensor '{}' on the core", name));
  return it->second;
}

const Tensor& DeviceMemory::at(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw RunError(fmt::format("no tensor '{}' on the core", name));
  return it->second;
}

Core::Core(DeviceProfile profile, CoreOptions options)
    : profile_(std::move(profile)), options_(std::move(options)) {}

Core::~Core() = default;

int Core::communicator_size() const { return options_.communicator ? options_.communicator->size() : 1; }
int Core::communicator_rank() const { return options_.communicator ? options_.communicator->rank() : 0; }

double Core::all_reduce_op(DType dtype, const std::byte* in, std::byte* out, std::size_t count) {
  const std::size_t bytes = count * item_size(dtype);
  if (communicator_size() <= 1) {
    if (bytes > 0) std::memcpy(out, in, bytes);
    return 0;
  }
  auto& comm = *options_.communicator;
  if (dtype == DType::kF32) {
    comm.allreduce<float>(std::span(reinterpret_cast<const float*>(in), count),
                          std::span(reinterpret_cast<float*>(out), count));
  } else {
    comm.allreduce<double>(std::span(reinterpret_cast<const double*>(in), count),
                           std::span(reinterpret_cast<double*>(out), count));
  }
  return static_cast<double>(bytes);
}

void Core::start_bucket(uint64_t bucket, void* data, std::size_t count, bool f64) {
  if (communicator_size() <= 1) return;  // nothing to combine
  auto& comm = *options_.communicator;
  collectives::Work work =
      f64 ? comm.allreduce_async<double>(std::span(static_cast<const double*>(data), count),
                                         std::span(static_cast<double*>(data), count))
          : comm.allreduce_async<float>(std::span(static_cast<const float*>(data), count),
                                        std::span(static_cast<float*>(data), count));
  buckets_.emplace_back(bucket, std::make_unique<collectives::Work>(std::move(work)));
}

void Core::wait_bucket(uint64_t bucket) {
  for (auto it = buckets_.begin(); it != buckets_.end(); ++it) {
    if (it->first != bucket) continue;
    it->second->wait();
    buckets_.erase(it);
    return;
  }
  if (communicator_size() > 1) {
    throw RunError(fmt::format("gradient bucket {} was never started", bucket));
  }
}

void Core::poll_buckets() {
  for (auto& [id, work] : buckets_) work->test();
}

void Core::bind_graph(const std::string& name, std::shared_ptr<const Adjacency> adjacency) {
  graphs_[name] = std::move(adjacency);
}

namespace {

std::string structure_key(const Program& p) {
  std::string text = p.name;
  for (const Op& op : p.ops) {
    text += '\n';
    text += to_string(op.kind);
    text += ' ';
    text += op.attrs.SerializeAsString();
    text += fmt::format(" {} {}", op.inputs.size(), op.outputs.size());
  }
  return fmt::format("{:016x}", XXH64(text.data(), text.size(), 0));
}

}  // namespace

std::shared_ptr<const CompiledProgram> Core::compile(Program program,
                                                     const CompileOptions& options) {
  const std::string key = cache_key(program, options, profile_, options_.debug);
  const ProgramCache cache(options_.cache_dir);
  if (auto hit = cache.load(key)) {
    ++counters_.cache_hits;
    hit->tuning_key = structure_key(hit->program);
    return std::make_shared<const CompiledProgram>(std::move(*hit));
  }
  ++counters_.compiles;
  CompiledProgram c;
  c.key = key;
  verify(program);
  if (!options_.debug) {
    c.passes.fused = fuse_aggregations(program);
    c.passes.attention = fuse_attention(program);
    c.passes.cross_entropy = fuse_cross_entropy(program);
    c.passes.reordered = reorder_aggregate_matmul(program);
    c.passes.projected = project_before_gather(program);
  }
  if (options.train) {
    const TrainStep& t = *options.train;
    Builder b(std::move(program));
    const size_t forward_ops = b.program().ops.size();
    c.grads = append_backward(b, t.loss, t.params);
    if (!options_.debug) {
      c.passes.folded = fuse_gradient_sums(b.program());
      c.passes.paired = pair_sparse_products(b.program());
    }
    if (t.keep_grads) {
      for (ValueId g : c.grads) {
        if (g != kNoValue) b.output(g);
      }
    }
    std::vector<ValueId> reduced = c.grads;
    if (b.program().partitioned || b.program().replicated) {
      // Every rank applies the same step: the all-reduced gradients.
      Program with_buckets = b.take();
      reduced = bucket_gradients(with_buckets, c.grads, options.bucket_bytes, &c.passes.buckets);
      b = Builder(std::move(with_buckets));
    }
    append_optimizer(b, t.params, reduced, t.optimizer);
    // Each forward pair took one forward op (pair_sparse_products).
    int forward_pairs = 0;
    for (const Op& op : b.program().ops) {
      forward_pairs += op.kind == OpKind::kSparseMatMul && op.inputs.size() == 3;
    }
    c.passes.backward_ops =
        static_cast<int>(b.program().ops.size() - (forward_ops - static_cast<size_t>(forward_pairs)));
    c.params = t.params;
    c.loss = t.loss;
    program = b.take();
  } else if (!options_.debug) {
    c.passes.paired = pair_sparse_products(program);
  }
  c.passes.dead_ops = eliminate_dead_values(program);
  verify(program);
  c.plan = plan_memory(program);
  check_capacity(program, c.plan, profile_);
  c.program = std::move(program);
  c.tuning_key = structure_key(c.program);
  try {
    cache.store(c);
  } catch (const std::exception& e) {
    spdlog::warn("program cache: {}; continuing without storing '{}'", e.what(), c.program.name);
  }
  return std::make_shared<const CompiledProgram>(std::move(c));
}

Tensor Core::read(const CompiledProgram& compiled, const std::string& name) {
  const ValueId v = compiled.program.find(name);
  if (v == kNoValue) {
    throw RunError(fmt::format("program '{}' has no value '{}'", compiled.program.name, name));
  }
  return read(compiled, v);
}

Tensor Core::read(const CompiledProgram& compiled, ValueId v) {
  const ValueInfo& info = compiled.program.value(v);
  if (info.role != Role::kTemp) return read(info.name);
  const bool is_output = std::find(compiled.program.outputs.begin(), compiled.program.outputs.end(),
                                   v) != compiled.program.outputs.end();
  for (const Op& op : compiled.program.ops) {
    if (is_output && is_graph_constant(op) && op.outputs[0] == v) {
      Tensor out(info.dtype, info.shape);
      std::copy_n(graph_constant(compiled.program, op), out.bytes().size(), out.bytes().data());
      ++counters_.host_syncs;
      return out;
    }
  }
  if (!is_output || info.offset < 0) {
    throw RunError(fmt::format("'{}' of program '{}' is not an output; only outputs outlive a run",
                               info.name, compiled.program.name));
  }
  if (last_run_ != &compiled) {
    throw RunError(fmt::format("'{}' of program '{}' is gone: another program ran since",
                               info.name, compiled.program.name));
  }
  Tensor out(info.dtype, info.shape);
  std::copy_n(arena_.data() + info.offset, out.bytes().size(), out.bytes().data());
  ++counters_.host_syncs;
  return out;
}

Tensor Core::read(const std::string& name) {
  ++counters_.host_syncs;
  return memory_.at(name);
}

void Core::write_trace(const std::filesystem::path& path) const {
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& e : trace_) {
    events.push_back({{"name", e.name},
                      {"cat", e.program},
                      {"ph", "X"},
                      {"ts", e.start_us},
                      {"dur", e.duration_us},
                      {"pid", 0},
                      {"tid", 0},
                      {"args", {{"scope", e.scope}, {"simulated_us", e.simulated_us}, {"flops", e.flops}, {"bytes", e.bytes},
                                {"threads", e.threads}}}});
  }
  const nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  try {
    write_file_atomically(path, doc.dump() + '\n');
  } catch (const std::exception& e) {
    throw RunError(fmt::format("cannot write trace: {}", e.what()));
  }
}

}  // namespace gnnrt::runtime
