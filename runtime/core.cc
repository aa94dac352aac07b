#include "runtime/core.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>

#include "runtime/atomic_file.h"
#include "runtime/autodiff.h"
#include "runtime/passes.h"
#include "runtime/compiler_id.h"
#include "runtime/program_cache.h"

namespace gnnrt::runtime {

std::string_view compiler_version() { return "gnnrt-compiler-1+" GNNRT_COMPILER_ID; }

NpyArray& DeviceMemory::at(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw RunError(fmt::format("no tensor '{}' on the core", name));
  return it->second;
}

const NpyArray& DeviceMemory::at(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw RunError(fmt::format("no tensor '{}' on the core", name));
  return it->second;
}

Core::Core(DeviceProfile profile, CoreOptions options)
    : profile_(std::move(profile)), options_(std::move(options)) {}

Core::~Core() = default;

void Core::bind_graph(const std::string& name, std::shared_ptr<const Adjacency> adjacency) {
  graphs_[name] = std::move(adjacency);
}

std::shared_ptr<const CompiledProgram> Core::compile(Program program,
                                                     const CompileOptions& options) {
  const std::string key = cache_key(program, options, profile_, options_.debug);
  const ProgramCache cache(options_.cache_dir);
  if (auto hit = cache.load(key)) {
    ++counters_.cache_hits;
    return std::make_shared<const CompiledProgram>(std::move(*hit));
  }
  ++counters_.compiles;
  CompiledProgram c;
  c.key = key;
  verify(program);
  if (!options_.debug) {
    c.passes.fused = fuse_aggregations(program);
    c.passes.reordered = reorder_aggregate_matmul(program);
  }
  if (options.train) {
    const TrainStep& t = *options.train;
    Builder b(std::move(program));
    const size_t forward_ops = b.program().ops.size();
    c.grads = append_backward(b, t.loss, t.params);
    if (t.keep_grads) {
      for (ValueId g : c.grads) {
        if (g != kNoValue) b.output(g);
      }
    }
    append_optimizer(b, t.params, c.grads, t.optimizer);
    c.passes.backward_ops = static_cast<int>(b.program().ops.size() - forward_ops);
    c.params = t.params;
    c.loss = t.loss;
    program = b.take();
  }
  c.passes.dead_ops = eliminate_dead_values(program);
  verify(program);
  c.plan = plan_memory(program);
  check_capacity(program, c.plan, profile_);
  c.program = std::move(program);
  try {
    cache.store(c);
  } catch (const std::exception& e) {
    spdlog::warn("program cache: {}; continuing without storing '{}'", e.what(), c.program.name);
  }
  return std::make_shared<const CompiledProgram>(std::move(c));
}

NpyArray Core::read(const CompiledProgram& compiled, const std::string& name) {
  const ValueId v = compiled.program.find(name);
  if (v == kNoValue) {
    throw RunError(fmt::format("program '{}' has no value '{}'", compiled.program.name, name));
  }
  return read(compiled, v);
}

NpyArray Core::read(const CompiledProgram& compiled, ValueId v) {
  const ValueInfo& info = compiled.program.value(v);
  if (info.role != Role::kTemp) return read(info.name);
  const bool is_output = std::find(compiled.program.outputs.begin(), compiled.program.outputs.end(),
                                   v) != compiled.program.outputs.end();
  if (!is_output || info.offset < 0) {
    throw RunError(fmt::format("'{}' of program '{}' is not an output; only outputs outlive a run",
                               info.name, compiled.program.name));
  }
  if (last_run_ != &compiled) {
    throw RunError(fmt::format("'{}' of program '{}' is gone: another program ran since",
                               info.name, compiled.program.name));
  }
  NpyArray out(info.dtype, info.shape);
  std::copy_n(arena_.data() + info.offset, out.bytes().size(), out.bytes().data());
  ++counters_.host_syncs;
  return out;
}

NpyArray Core::read(const std::string& name) {
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
                      {"args", {{"scope", e.scope}, {"simulated_us", e.simulated_us}}}});
  }
  const nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  try {
    write_file_atomically(path, doc.dump() + '\n');
  } catch (const std::exception& e) {
    throw RunError(fmt::format("cannot write trace: {}", e.what()));
  }
}

}  // namespace gnnrt::runtime
