// Core::run: binds a compiled program's values to memory and executes its
// ops one after another, each through the kernel of its definition
// (runtime/defs/), in the program's float type.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <type_traits>

#include "collectives/communicator.h"
#include "ops/gcn_norm.h"
#include "runtime/core.h"
#include "runtime/halo.h"
#include "runtime/kernel.h"
#include "runtime/op_defs.h"

namespace gnnrt::runtime {

struct Core::Bound {
  std::vector<std::byte*> data;          // per value; null for unplanned temps
  std::vector<const Adjacency*> graphs;  // per graph
};

Core::Bound Core::bind(const CompiledProgram& compiled) {
  const Program& p = compiled.program;
  if (static_cast<int64_t>(arena_.size()) < compiled.plan.arena_bytes) {
    arena_ = HostVector<std::byte>(static_cast<size_t>(compiled.plan.arena_bytes));
  }
  Bound b;
  b.data.resize(p.values.size(), nullptr);
  for (size_t i = 0; i < p.values.size(); ++i) {
    const ValueInfo& v = p.values[i];
    if (v.role == Role::kTemp) {
      if (v.offset >= 0) b.data[i] = arena_.data() + v.offset;
      continue;
    }
    if (!memory_.has(v.name)) {
      if (v.role != Role::kState) {
        throw RunError(fmt::format("program '{}': {} '{}' {} is not bound on the core",
                                   p.name, to_string(v.role), v.name, shape_string(v.shape)));
      }
      memory_.put(v.name, Tensor(v.dtype, v.shape));  // fresh state starts at zero
    }
    Tensor& t = memory_.at(v.name);
    if (t.dtype() != v.dtype || t.shape() != v.shape) {
      throw RunError(fmt::format("program '{}': {} '{}' is bound as {} {}, the program needs {} {}",
                                 p.name, to_string(v.role), v.name, to_string(t.dtype()),
                                 shape_string(t.shape()), to_string(v.dtype),
                                 shape_string(v.shape)));
    }
    b.data[i] = t.bytes().data();
  }
  for (const GraphInfo& g : p.graphs) {
    auto it = graphs_.find(g.name);
    if (it == graphs_.end()) {
      throw RunError(fmt::format("program '{}': graph '{}' is not bound on the core", p.name, g.name));
    }
    const Adjacency& a = *it->second;
    if (a.num_src_nodes() != g.num_src || a.num_dst_nodes() != g.num_dst ||
        a.num_edges() != g.num_edges) {
      throw RunError(fmt::format(
          "program '{}': graph '{}' is bound with {} -> {} nodes and {} edges, the program was "
          "built for {} -> {} and {}",
          p.name, g.name, a.num_src_nodes(), a.num_dst_nodes(), a.num_edges(), g.num_src,
          g.num_dst, g.num_edges));
    }
    b.graphs.push_back(&a);
  }
  for (const Op& op : p.ops) {
    if (is_graph_constant(op)) b.data[static_cast<size_t>(op.outputs[0])] = graph_constant(p, op);
  }
  return b;
}

std::byte* Core::graph_constant(const Program& p, const Op& op) {
  const GraphInfo& g = p.graphs[static_cast<size_t>(op.attrs.graph())];
  const std::shared_ptr<const Adjacency>& graph = graphs_.at(g.name);
  const ValueInfo& out = p.value(op.outputs[0]);
  GraphConstant& c = graph_constants_[fmt::format("{}/{}/{}", g.name, to_string(op.kind),
                                                  to_string(out.dtype))];
  if (c.graph != graph || c.value.dtype() != out.dtype || c.value.shape() != out.shape) {
    c.value = Tensor(out.dtype, out.shape);
    if (op.kind != OpKind::kGcnNorm) {
      throw RunError(fmt::format("program '{}': no graph-constant rule for {}", p.name, to_string(op.kind)));
    }
    if (out.dtype == DType::kF64) {
      ops::gcn_norm<double, int32_t>(*graph, {}, c.value.values<double>());
    } else {
      ops::gcn_norm<float, int32_t>(*graph, {}, c.value.values<float>());
    }
    c.graph = graph;
  }
  return c.value.bytes().data();
}

namespace {

// Sets the OpenMP threads of the ops that follow (at most `threads`, 0:
// the caller's count), and puts back the caller's count when it goes out of
// scope (also on a throw).
class OpThreads {
 public:
  explicit OpThreads(int threads)
      : caller_(omp_get_max_threads()), all_(threads > 0 ? threads : caller_), now_(caller_) {
    set(all_);
  }
  ~OpThreads() { set(caller_); }
  int all() const { return all_; }
  void set(int threads) {
    if (threads != now_) omp_set_num_threads(threads);
    now_ = threads;
  }

 private:
  int caller_, all_, now_;
};

// Flushes subnormal floats to zero, results and operands both (x86's MXCSR
// flags FTZ and DAZ), for a run: on the calling thread from the start, and
// on the other OpenMP threads before the first op that runs on more than
// one (a run whose ops all stay on one thread does not wake them). When it
// goes out of scope (also on a throw) each thread gets back its own two
// flags (a thread OpenMP starts during the run starts with the calling
// thread's own, and any other it did not set gets the calling thread's);
// the rest of MXCSR, the exception flags the run raised included, stays as
// the run left it. An operand or result below 2^-126 in
// float (2^-1022 in double) costs a microcode assist of ~100+ cycles per
// vector instruction on x86, and Adam's moments of weights that stop getting
// gradient decay into that range (docs/kernels.md). TensorFlow runs its CPU
// kernels under the same setting (port::ScopedFlushDenormal); PyTorch
// offers it as torch.set_flush_denormal. Elsewhere than x86 it does nothing.
class FlushDenormals {
 public:
  explicit FlushDenormals(bool on) : on_(on) {
#if defined(__SSE__)
    if (!on_) return;
    caller_ = _mm_getcsr() & kFlush;
    _mm_setcsr(_mm_getcsr() | kFlush);
#endif
  }
  // Before an op on `threads` threads.
  void prepare([[maybe_unused]] int threads) {
#if defined(__SSE__)
    if (!on_ || threads <= team_) return;
    team_ = threads;
    // A thread OpenMP starts for this team copies the calling thread's MXCSR:
    // it starts with the caller's own flags, not the flushing ones, which it
    // would otherwise save as its own and keep after the run.
    _mm_setcsr((_mm_getcsr() & ~kFlush) | caller_);
#pragma omp parallel num_threads(threads)
    {
      Saved& s = saved();
      if (omp_get_thread_num() != 0 && s.owner != this) s = {this, _mm_getcsr() & kFlush};
      _mm_setcsr(_mm_getcsr() | kFlush);
    }
#endif
  }
  ~FlushDenormals() {
#if defined(__SSE__)
    if (!on_) return;
    if (team_ > 1) {
#pragma omp parallel num_threads(team_)
      {
        if (omp_get_thread_num() != 0) {
          Saved& s = saved();
          const unsigned own = s.owner == this ? s.flags : caller_;
          _mm_setcsr((_mm_getcsr() & ~kFlush) | own);
          s.owner = nullptr;
        }
      }
    }
    _mm_setcsr((_mm_getcsr() & ~kFlush) | caller_);
#endif
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  static constexpr unsigned kFlush = 0x8040;  // FTZ (bit 15) | DAZ (bit 6)
  // A thread's flags before this object set them; owner: the object that
  // saved them, so a stale entry of an earlier run is not used.
  struct Saved {
    const FlushDenormals* owner = nullptr;
    unsigned flags = 0;
  };
  static Saved& saved() {
    thread_local Saved s;
    return s;
  }
  bool on_;
  unsigned caller_ = 0;  // the calling thread's flags
  int team_ = 1;  // the largest team whose threads are set
};

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

std::vector<int> Core::op_threads(const CompiledProgram& compiled) const {
  const auto it = thread_plans_.find(compiled.tuning_key.empty() ? compiled.key : compiled.tuning_key);
  return it == thread_plans_.end() ? std::vector<int>{} : it->second.op_threads;
}

// Op threads: an op that reads rows another core has just written pays for
// moving each cache line between the cores, so a small op can run slower on
// two threads than on one. Which ops gain depends on the op, its sizes and
// the ops around it, so Core::run measures instead of guessing: after a
// warm-up run, runs alternate between every op on one thread and every op on
// all, kThreadSamples each, and each op takes the count whose median was
// lower (the mix). An op's neighbours in the mix differ from both kinds of
// run, and libgomp's idle worker spins between parallel ops, slowing the
// ops kept on one thread: so blocks of runs with every op on one thread, of
// the mix and of every op on all threads, kBlockRuns each, rotate
// kBlockRounds times, and the lowest median over a kind's runs decides.
// Every op on all threads is a candidate of its own because the mix can be
// slower than both: where one thread's op reads what two threads' ops
// wrote, the lines cross between the cores at each change. Blocks, not
// alternation, and the first run of each dropped: after a run with parallel
// ops the worker still spins through much of the next run, so one-thread
// runs that alternated with the mix ran slow. A shared machine's noise (a
// core taken away for some milliseconds) is why there are 7 samples per op
// and several rounds of blocks; fewer kept bad plans (docs/kernels.md).
void Core::run(const CompiledProgram& compiled, const RunContext& context) {
  const Bound bound = bind(compiled);
  last_run_ = &compiled;
  const Program& p = compiled.program;
  OpThreads threads(options_.threads);
  FlushDenormals flush(options_.flush_denormals);
  ThreadPlan* plan = nullptr;
  if (options_.tune_threads && threads.all() > 1 && !p.ops.empty()) {
    plan = &thread_plans_[compiled.tuning_key.empty() ? compiled.key : compiled.tuning_key];
    // New, or OpenMP's count changed since, or (a plan shared by structure)
    // another op count.
    if (plan->threads != threads.all() || plan->ops != p.ops.size()) {
      *plan = ThreadPlan{};
      plan->threads = threads.all();
      plan->ops = p.ops.size();
      for (auto& s : plan->op_seconds) s.assign(p.ops.size(), {});
    }
  }
  // What this run measures, and on how many threads op i runs.
  // kOneRun, kMixRun and kAllRun in this order: run_seconds' index.
  enum class Sample { kNone, kOneOp, kAllOp, kOneRun, kMixRun, kAllRun };
  Sample sample = Sample::kNone;
  constexpr int kFirstBlock = 2 * kThreadSamples + 1;  // the first run of the first block
  static_assert(kFirstBlock + kBlockKinds * kBlockRounds * kBlockRuns == kTuningRuns);
  // Whole-run blocks rotate: one thread, the mix, all threads, one thread, ...
  const auto block_of = [](int run) { return (run - kFirstBlock) / kBlockRuns; };
  if (plan && plan->op_threads.empty() && plan->runs > 0) {
    sample = plan->runs < kFirstBlock
                 ? (plan->runs % 2 == 1 ? Sample::kOneOp : Sample::kAllOp)
                 : static_cast<Sample>(static_cast<int>(Sample::kOneRun) + block_of(plan->runs) % kBlockKinds);
  }
  const auto threads_of = [&](size_t i) {
    switch (sample) {
      case Sample::kOneOp:
      case Sample::kOneRun: return 1;
      case Sample::kMixRun: return plan->mix[i];
      case Sample::kAllOp:
      case Sample::kAllRun: return threads.all();
      case Sample::kNone: break;
    }
    return plan && !plan->op_threads.empty() ? plan->op_threads[i] : threads.all();
  };
  double run_seconds = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const int team = threads_of(i);
    threads.set(team);
    flush.prepare(team);
    const auto start = std::chrono::steady_clock::now();
    const Op& op = p.ops[i];
    double comm_bytes = 0;
    try {
      comm_bytes = p.float_type == DType::kF64 ? execute<double>(compiled, i, bound, context)
                                               : execute<float>(compiled, i, bound, context);
    } catch (const RunError&) {
      throw;
    } catch (const std::exception& e) {
      throw RunError(fmt::format("program '{}': {}: {}", p.name, p.describe(i), e.what()));
    }
    // Gradient all-reduces in flight progress between ops (no MPI thread).
    poll_buckets();
    const OpCost cost = op_cost(p, op);
    double simulated = op_seconds(profile_, cost);
    if (is_collective(op.kind)) {
      const int ranks = options_.communicator ? communicator_size() : 1;
      if (op.kind == OpKind::kHaloSum || op.kind == OpKind::kHaloMax) {
        simulated += options_.halo && options_.halo->mode() == HaloMode::sparse
                         ? halo_seconds(profile_, comm_bytes, options_.halo->peers())
                         : allreduce_seconds(profile_, comm_bytes, ranks);
      } else {
        simulated += allreduce_seconds(profile_, comm_bytes, ranks);
      }
      ++counters_.collective_calls;
      counters_.collective_bytes += comm_bytes;
      if (op.kind == OpKind::kHaloSum || op.kind == OpKind::kHaloMax) {
        ++counters_.halo_calls;
        counters_.halo_bytes += comm_bytes;
      }
    }
    ++counters_.ops_run;
    counters_.bytes_moved += cost.bytes;
    counters_.simulated_seconds += simulated;
    if (options_.debug) check_finite(compiled, i, bound);
    const auto end = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(end - start).count();
    if (sample == Sample::kOneOp || sample == Sample::kAllOp) {
      plan->op_seconds[sample == Sample::kAllOp][i].push_back(seconds);
    }
    run_seconds += seconds;
    const bool gradient = op.kind == OpKind::kBucketStart || op.kind == OpKind::kBucketWait;
    (gradient                   ? counters_.gradient_seconds
     : is_collective(op.kind)   ? counters_.halo_seconds
                                : counters_.compute_seconds) += seconds;
    if (options_.trace) {
      const auto us = [&](auto t) {
        return std::chrono::duration<double, std::micro>(t - epoch_).count();
      };
      trace_.push_back({std::string(to_string(op.kind)), op.scope, p.name, us(start),
                        us(end) - us(start), simulated * 1e6, cost.flops, cost.bytes, omp_get_max_threads()});
    }
  }
  if (!buckets_.empty()) {
    throw RunError(fmt::format("program '{}' ended with {} gradient all-reduce(s) not waited for",
                               p.name, buckets_.size()));
  }
  if (!plan || !plan->op_threads.empty()) return;
  const bool block_start = (plan->runs - kFirstBlock) % kBlockRuns == 0;  // dropped: see above
  if (plan->runs >= kFirstBlock && !block_start) {
    plan->run_seconds[static_cast<int>(sample) - static_cast<int>(Sample::kOneRun)].push_back(run_seconds);
  }
  ++plan->runs;
  if (plan->runs == kFirstBlock) {
    plan->mix.resize(p.ops.size());
    for (size_t i = 0; i < p.ops.size(); ++i) {
      const bool one = median(plan->op_seconds[0][i]) <= median(plan->op_seconds[1][i]);
      plan->mix[i] = one ? 1 : plan->threads;
    }
    for (auto& s : plan->op_seconds) s = {};
  } else if (plan->runs == kTuningRuns) {
    // The lowest median; on a tie the fewer threads.
    const std::vector<int> kinds[] = {std::vector<int>(p.ops.size(), 1), plan->mix,
                                      std::vector<int>(p.ops.size(), plan->threads)};
    int best = 0;
    for (int k = 1; k < kBlockKinds; ++k) {
      if (median(plan->run_seconds[k]) < median(plan->run_seconds[best])) best = k;
    }
    plan->op_threads = kinds[best];
  }
}

void Core::check_finite(const CompiledProgram& compiled, std::size_t op_index,
                        const Bound& bound) const {
  const Program& p = compiled.program;
  const Op& op = p.ops[op_index];
  // Optimizer updates write their parameter in place: check that instead.
  std::vector<ValueId> written = op.outputs;
  if (op.kind == OpKind::kAdamUpdate || op.kind == OpKind::kSgdUpdate) written = {op.inputs[0]};
  const std::string rank =
      options_.communicator ? fmt::format("rank {}: ", communicator_rank()) : std::string();
  for (ValueId v : written) {
    const ValueInfo& info = p.value(v);
    if (!is_floating(info.dtype)) continue;
    const int64_t n = info.elements();
    const std::byte* data = bound.data[static_cast<size_t>(v)];
    for (int64_t k = 0; k < n; ++k) {
      const double x = info.dtype == DType::kF32 ? reinterpret_cast<const float*>(data)[k]
                                                 : reinterpret_cast<const double*>(data)[k];
      if (std::isfinite(x)) continue;
      const int64_t cols = info.shape.size() > 1 ? n / info.shape[0] : 1;
      throw RunError(fmt::format(
          "{}program '{}': {} produced {} in '{}' {} at row {}, column {} (first non-finite value; "
          "debug mode)",
          rank, p.name, p.describe(op_index), std::isnan(x) ? "NaN" : "Inf", info.name,
          shape_string(info.shape), k / cols, k % cols));
    }
  }
}

// One op in the value type T, by its kernel (runtime/defs/). Returns the
// bytes it sent to other ranks.
template <typename T>
double Core::execute(const CompiledProgram& compiled, std::size_t op_index, const Bound& bound,
                     const RunContext& context) {
  const Program& p = compiled.program;
  const OpDef& def = op_def(p.ops[op_index].kind);
  const Kernel<T> kernel(*this, p, op_index, bound.data, bound.graphs, context);
  if constexpr (std::is_same_v<T, double>) {
    if (def.run_f64 != nullptr) return def.run_f64(kernel);
  } else {
    if (def.run_f32 != nullptr) return def.run_f32(kernel);
  }
  throw RunError(fmt::format("program '{}': {} has no kernel", p.name, p.describe(op_index)));
}

template double Core::execute<float>(const CompiledProgram&, std::size_t, const Bound&, const RunContext&);
template double Core::execute<double>(const CompiledProgram&, std::size_t, const Bound&, const RunContext&);

}  // namespace gnnrt::runtime
