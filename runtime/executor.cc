// Core::run: binds a compiled program's values to memory and executes its
// ops one after another, each through its kernel in ops/ (or a collective),
// in the program's float type.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "collectives/communicator.h"
#include "ops/dense.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/gather.h"
#include "ops/gcn_norm.h"
#include "ops/head_edges.h"
#include "ops/layer_norm.h"
#include "ops/noise.h"
#include "ops/optimizer.h"
#include "ops/scatter.h"
#include "ops/sddmm.h"
#include "ops/segment_softmax.h"
#include "ops/sparse_matmul.h"
#include "ops/spmm.h"
#include "runtime/core.h"
#include "runtime/halo.h"

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

// Sets the OpenMP threads of the ops that follow, and puts back the count
// found at construction when it goes out of scope (also on a throw).
class OpThreads {
 public:
  OpThreads() : all_(omp_get_max_threads()), now_(all_) {}
  ~OpThreads() { set(all_); }
  int all() const { return all_; }
  void set(int threads) {
    if (threads != now_) omp_set_num_threads(threads);
    now_ = threads;
  }

 private:
  int all_, now_;
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
// vector instruction on x86: Adam's moments of weights that stop getting
// gradient decay into that range after ~1,500 steps (Cora's GCN, two
// threads: Adam 48-60 us a step, 15-16 flushed). TensorFlow runs its CPU
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
// moving each cache line between the cores (about 85 ns a line on the 2-core
// VM, against 5 ns from the core's own cache), so a small op often ran
// slower on two threads than on one (Cora's train step: 0.48 ms on one
// thread, 0.68 ms on two). Which ops gain depends on the op, its sizes and
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
// wrote, the lines cross between the cores at each change (GAT Cora on the
// Zen 5 VM: mixes of 19-27 of 49 ops ran 1.2-1.4 ms, every op on two
// threads 0.70-0.72, one thread 1.12-1.15). Blocks, not alternation, and
// the first run of each dropped: after a run with parallel ops the worker
// still spins through much of the next run, so one-thread runs that
// alternated with the mix ran slow (Cora's GCN step kept a mix at
// 0.50-0.54 ms that ran 0.42-0.45 ms on one thread). The VM's noise (the
// other vCPU taken away for some milliseconds) is why there are 7 samples
// per op and several rounds of blocks: with 3 samples and one pair of
// blocks, about one GAT Cora process in 15 kept every op on one thread
// (2.09 ms against 1.7-2.0 for the others' mixes).
void Core::run(const CompiledProgram& compiled, const RunContext& context) {
  const Bound bound = bind(compiled);
  last_run_ = &compiled;
  const Program& p = compiled.program;
  OpThreads threads;
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

// One op in the value type T. Returns the bytes it sent to other ranks.
template <typename T>
double Core::execute(const CompiledProgram& compiled, std::size_t op_index, const Bound& bound,
                     const RunContext& context) {
  const Program& p = compiled.program;
  const Op& op = p.ops[op_index];
  const OpAttrs& a = op.attrs;
  const auto elements = [&](ValueId v) { return static_cast<size_t>(p.value(v).elements()); };
  const auto shape = [&](ValueId v) -> const std::vector<int64_t>& { return p.value(v).shape; };
  const auto typed = [&]<typename U>(ValueId v) {
    return std::span<U>(reinterpret_cast<U*>(bound.data[static_cast<size_t>(v)]), elements(v));
  };
  // Spans of output k and input k, by type; optional inputs give empty spans.
  const auto out_of = [&]<typename U = T>(size_t k = 0) { return typed.template operator()<U>(op.outputs[k]); };
  const auto in = [&]<typename U = T>(size_t k) {
    if (k >= op.inputs.size() || op.inputs[k] == kNoValue) return std::span<const U>();
    return std::span<const U>(typed.template operator()<U>(op.inputs[k]));
  };
  const auto mutable_in = [&]<typename U = T>(size_t k) { return typed.template operator()<U>(op.inputs[k]); };
  const auto graph = [&]() -> const Adjacency& { return *bound.graphs.at(static_cast<size_t>(a.graph())); };
  const auto rows = [&](ValueId v) { return shape(v).at(0); };
  const auto cols = [&](ValueId v) { return shape(v).size() > 1 ? shape(v)[1] : int64_t{1}; };
  // A loss's count: the global one when given (partitioned), else this rank's.
  const auto loss_count = [&](size_t mask_input, size_t count_input, int64_t per_row) {
    if (count_input < op.inputs.size()) return in.template operator()<int64_t>(count_input)[0] * per_row;
    int64_t n = 0;
    for (uint8_t m : in.template operator()<uint8_t>(mask_input)) n += m != 0;
    return n * per_row;
  };
  const ValueId out = op.outputs.empty() ? kNoValue : op.outputs[0];
  const ops::DropoutKey dropout_key{context.seed, static_cast<uint64_t>(context.step), a.key()};
  const auto slope = static_cast<T>(a.alpha());
  const auto norm_mode = a.per_node() ? ops::LayerNormMode::kNode : ops::LayerNormMode::kGraph;
  const auto f = [&]() { return out_of(); };
  if ((op.kind == OpKind::kHaloSum || op.kind == OpKind::kHaloMax) && !options_.halo) {
    throw RunError(fmt::format("program '{}': {}: the core has no halo (CoreOptions::halo)", p.name,
                               p.describe(op_index)));
  }

  switch (op.kind) {
    case OpKind::kFill:
      std::fill(f().begin(), f().end(), static_cast<T>(a.alpha()));
      return 0;
    case OpKind::kMatMul: {
      const int64_t k = a.trans_a() ? rows(op.inputs[0]) : cols(op.inputs[0]);
      ops::matmul<T>(in(0), in(1), f(), rows(out), k, cols(out), a.trans_a(), a.trans_b());
      return 0;
    }
    case OpKind::kAdd:
      ops::add<T>(in(0), in(1), f());
      return 0;
    case OpKind::kMul:
      ops::mul<T>(in(0), in(1), f());
      return 0;
    case OpKind::kScale:
      ops::scale<T>(in(0), static_cast<T>(a.alpha()), f());
      return 0;
    case OpKind::kBiasAdd:
      ops::bias_add_forward<T>(in(0), in(1), f(), rows(out), cols(out));
      return 0;
    case OpKind::kRelu:
      ops::relu_forward<T>(in(0), f());
      return 0;
    case OpKind::kLeakyRelu:
      ops::leaky_relu_forward<T>(in(0), slope, f());
      return 0;
    case OpKind::kElu:
      ops::elu_forward<T>(in(0), slope, f());
      return 0;
    case OpKind::kConcat: {
      std::vector<std::span<const T>> inputs;
      std::vector<int64_t> widths;
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        inputs.push_back(in(i));
        widths.push_back(cols(op.inputs[i]));
      }
      ops::concat_cols<T>(inputs, widths, rows(out), f());
      return 0;
    }
    case OpKind::kSliceCols:
      ops::slice_cols<T>(in(0), rows(op.inputs[0]), cols(op.inputs[0]), a.begin(), a.width(), f());
      return 0;
    case OpKind::kActivation:
      ops::activation_forward<T>(static_cast<ops::Activation>(a.activation()), in(0), f(), slope);
      return 0;
    case OpKind::kDropout:
      ops::dropout_forward<T>(dropout_key, a.alpha(), cols(out), in.template operator()<int64_t>(1),
                              in(0), f(), out_of.template operator()<uint8_t>(1));
      return 0;
    case OpKind::kNormal:
      ops::normal_forward<T>(dropout_key, a.width(), in.template operator()<int64_t>(0), f());
      return 0;
    case OpKind::kLogSoftmax:
      ops::log_softmax_forward<T>(in(0), rows(out), cols(out), f());
      return 0;
    case OpKind::kNllLoss: {
      const ValueId lp = op.inputs[0];
      const ops::LossSum s = ops::nll_loss_forward<T, int64_t>(
          in(0), rows(lp), cols(lp), in.template operator()<int64_t>(1), in.template operator()<uint8_t>(2));
      const int64_t count = loss_count(2, 3, 1);
      f()[0] = count > 0 ? static_cast<T>(s.sum / static_cast<double>(count)) : T(0);
      return 0;
    }
    case OpKind::kCrossEntropy: {
      const ValueId x = op.inputs[0];
      const ops::LossSum s = ops::cross_entropy_forward<T, int64_t>(
          in(0), rows(x), cols(x), in.template operator()<int64_t>(1), in.template operator()<uint8_t>(2));
      const int64_t count = loss_count(2, 3, 1);
      f()[0] = count > 0 ? static_cast<T>(s.sum / static_cast<double>(count)) : T(0);
      return 0;
    }
    case OpKind::kMseLoss: {
      const ValueId pred = op.inputs[0];
      const ops::SquaredSum s = ops::mse_loss_forward<T>(in(0), in(1), in.template operator()<uint8_t>(2),
                                                         rows(pred), cols(pred), loss_form_of(a));
      const int64_t count = loss_count(2, 3, cols(pred));
      f()[0] = count > 0 ? static_cast<T>(s.sum / static_cast<double>(count)) : T(0);
      return 0;
    }
    case OpKind::kHeadDot:
      ops::head_dot_forward<T>(in(0), in(1), rows(out), a.heads(), cols(op.inputs[0]) / a.heads(), f());
      return 0;
    case OpKind::kHeadMean:
      ops::head_mean_forward<T>(in(0), rows(out), a.heads(), cols(out), f());
      return 0;
    case OpKind::kLayerNormMoments: {
      const ValueId x = op.inputs[0];
      ops::layer_norm_moments<T>(in(0), in.template operator()<uint8_t>(1), rows(x), cols(x),
                                 out_of.template operator()<double>());
      return 0;
    }
    case OpKind::kLayerNorm:
      ops::layer_norm_forward<T>(norm_mode, in(0), in(1), in(2), in.template operator()<double>(3),
                                 rows(out), cols(out), a.alpha(), f());
      return 0;
    case OpKind::kLayerNormGradSums: {
      const ValueId x = op.inputs[0];
      ops::layer_norm_grad_sums<T>(in(0), in(1), in(2), in.template operator()<double>(3), rows(x),
                                   cols(x), out_of.template operator()<double>());
      return 0;
    }
    case OpKind::kLayerNormGradX:
      ops::layer_norm_backward_x<T>(norm_mode, in(0), in(1), in(2), in.template operator()<double>(3),
                                    in.template operator()<double>(4), in.template operator()<uint8_t>(5),
                                    rows(out), cols(out), a.alpha(), f());
      return 0;
    case OpKind::kLayerNormGradGamma: {
      const ValueId x = op.inputs[0];
      ops::layer_norm_backward_gamma<T>(norm_mode, in(0), in(1), in.template operator()<double>(2),
                                        rows(x), cols(x), a.alpha(), f());
      return 0;
    }
    case OpKind::kGcnNorm:
      if (is_graph_constant(op)) return 0;  // bound to its value, computed once (Core::bind)
      ops::gcn_norm<T, int32_t>(graph(), in.template operator()<int64_t>(0), f());
      return 0;
    case OpKind::kDivideRows:
      ops::divide_rows<T>(in(0), in.template operator()<int64_t>(1), cols(out), f());
      return 0;
    case OpKind::kGather:
      ops::gather_forward<T, int32_t>(graph().by_src, cols(out), in(0), f());
      return 0;
    case OpKind::kEdgeScale:
      ops::edge_scale<T>(in(0), in(1), rows(out), a.heads(), cols(out) / a.heads(), f());
      return 0;
    case OpKind::kScatter:
      ops::scatter_forward<T, int32_t>(reduce_of(a), graph().by_dst, cols(out), in(0), f(),
                                       op.outputs.size() > 1 ? out_of.template operator()<int32_t>(1)
                                                             : std::span<int32_t>());
      return 0;
    case OpKind::kSpmm:
      ops::spmm_forward<T, int32_t>(reduce_of(a), graph(), cols(out), in(0), in(1), f(),
                                    op.outputs.size() > 1 ? out_of.template operator()<int32_t>(1)
                                                          : std::span<int32_t>());
      return 0;
    case OpKind::kSparseMatMul:
      if (op.inputs.size() == 3) {  // a pair (pair_sparse_products)
        ops::sparse_matmul_forward_pair<T, int32_t>(graph(), in(0), in(1), in(2), cols(out),
                                                    a.trans_b(), out_of(1), out_of(3), f(),
                                                    out_of(2));
        return 0;
      }
      ops::sparse_matmul_forward<T, int32_t>(graph(), in(0), in(1), cols(out), a.trans_b(),
                                             out_of(1), f());
      return 0;
    case OpKind::kSparseDropout:
      ops::sparse_dropout_forward<T, int32_t>(dropout_key, a.alpha(), graph().by_dst,
                                              in.template operator()<int64_t>(1), in(0), f());
      return 0;
    case OpKind::kSparseMatMulGradB:
      if (op.inputs.size() == 3) {  // a pair (pair_sparse_products)
        ops::sparse_matmul_backward_b_pair<T, int32_t>(graph(), in(0), in(1), in(2),
                                                       cols(op.inputs[1]), a.trans_b(), out_of(1),
                                                       out_of(3), f(), out_of(2));
        return 0;
      }
      ops::sparse_matmul_backward_b<T, int32_t>(graph(), in(0), in(1), cols(op.inputs[1]),
                                                a.trans_b(), out_of(1), f());
      return 0;
    case OpKind::kSddmmAdd:
      ops::sddmm_add_forward<T, int32_t>(graph(), a.heads(), in(0), in(1), f());
      return 0;
    case OpKind::kSddmmDot:
      ops::sddmm_dot_forward<T, int32_t>(graph(), cols(op.inputs[0]), a.heads(), in(0), in(1), f());
      return 0;
    case OpKind::kSddmmDotGradA:
      // Only b's values are read for a's gradient (and a's for b's).
      ops::sddmm_dot_backward<T, int32_t>(graph(), cols(out), a.heads(), {}, in(0), in(1), f(), {});
      return 0;
    case OpKind::kSddmmDotGradB:
      ops::sddmm_dot_backward<T, int32_t>(graph(), cols(out), a.heads(), in(0), {}, in(1), {}, f());
      return 0;
    case OpKind::kReshape:
      std::copy(in(0).begin(), in(0).end(), f().begin());
      return 0;
    case OpKind::kEdgeHeadDot:
      ops::edge_head_dot<T, int32_t>(graph(), a.heads(), cols(op.inputs[1]), in(0), in(1), f());
      return 0;
    case OpKind::kHeadScatter:
      ops::head_scatter<T, int32_t>(graph(), a.heads(), cols(op.inputs[1]), in(0), in(1), f());
      return 0;
    case OpKind::kHeadGather:
      ops::head_gather<T, int32_t>(graph(), a.heads(), cols(out), in(0), in(1), f());
      return 0;
    case OpKind::kHeadMatMul: {
      const int64_t p_ = cols(op.inputs[0]) / a.heads();
      ops::head_matmul<T>(in(0), in(1), f(), rows(out), a.heads(), p_, cols(out) / a.heads(), a.trans_b());
      return 0;
    }
    case OpKind::kHeadOuter:
      ops::head_outer<T>(in(0), in(1), f(), rows(op.inputs[0]), a.heads(), cols(op.inputs[0]) / a.heads(),
                         cols(op.inputs[1]) / a.heads());
      return 0;
    case OpKind::kSegmentSoftmax:
      ops::segment_softmax_forward<T, int32_t>(graph().by_dst, a.heads(), in(0), f());
      return 0;
    case OpKind::kAttentionSoftmax:
      ops::attention_softmax_forward<T, int32_t>(graph(), a.heads(), slope, in(0), in(1), f());
      return 0;
    case OpKind::kSegmentMax:
      ops::segment_max<T, int32_t>(graph().by_dst, a.heads(), in(0), f());
      return 0;
    case OpKind::kSegmentExpSum:
      ops::segment_exp_sum<T, int32_t>(graph().by_dst, a.heads(), in(0), in(1), f());
      return 0;
    case OpKind::kSegmentSoftmaxApply:
      ops::segment_softmax_apply<T, int32_t>(graph().by_dst, a.heads(), in(0), in(1), in(2), f());
      return 0;
    case OpKind::kBiasGrad:
      ops::bias_add_backward<T>(in(0), rows(op.inputs[0]), cols(op.inputs[0]), f());
      return 0;
    case OpKind::kReluGrad:
      ops::relu_backward<T>(in(0), in(1), f());
      return 0;
    case OpKind::kLeakyReluGrad:
      ops::leaky_relu_backward<T>(in(0), slope, in(1), f());
      return 0;
    case OpKind::kEluGrad:
      ops::elu_backward<T>(in(0), slope, in(1), f());
      return 0;
    case OpKind::kActivationGrad:
      ops::activation_backward<T>(static_cast<ops::Activation>(a.activation()), in(0), in(1), f(), slope);
      return 0;
    case OpKind::kDropoutGrad:
      ops::dropout_backward<T>(a.alpha(), in.template operator()<uint8_t>(1), in(0), f());
      return 0;
    case OpKind::kLogSoftmaxGrad:
      ops::log_softmax_backward<T>(in(0), in(1), rows(out), cols(out), f());
      return 0;
    case OpKind::kNllLossGrad: {
      const int64_t count = loss_count(2, 4, 1);
      const T scale = count > 0 ? in(3)[0] / static_cast<T>(count) : T(0);
      ops::nll_loss_backward<T, int64_t>(rows(out), cols(out), in.template operator()<int64_t>(1),
                                         in.template operator()<uint8_t>(2), scale, f());
      return 0;
    }
    case OpKind::kCrossEntropyGrad: {
      const int64_t count = loss_count(2, 4, 1);
      const T scale = count > 0 ? in(3)[0] / static_cast<T>(count) : T(0);
      ops::cross_entropy_backward<T, int64_t>(in(0), rows(out), cols(out),
                                              in.template operator()<int64_t>(1),
                                              in.template operator()<uint8_t>(2), scale, f());
      return 0;
    }
    case OpKind::kMseLossGrad: {
      const int64_t count = loss_count(2, 4, cols(out));
      const T scale = count > 0 ? in(3)[0] / static_cast<T>(count) : T(0);
      ops::mse_loss_backward<T>(in(0), in(1), in.template operator()<uint8_t>(2), rows(out), cols(out),
                                scale, f(), loss_form_of(a));
      return 0;
    }
    case OpKind::kHeadDotGradX:
      ops::head_dot_backward_x<T>(in(0), in(1), rows(out), a.heads(), cols(out) / a.heads(), f(),
                                  op.inputs.size() > 2 ? in(2) : std::span<const T>{});
      return 0;
    case OpKind::kHeadDotGradAtt: {
      const ValueId x = op.inputs[0];
      ops::head_dot_backward_att<T>(in(0), in(1), rows(x), a.heads(), cols(x) / a.heads(), f());
      return 0;
    }
    case OpKind::kHeadMeanGrad:
      ops::head_mean_backward<T>(in(0), rows(out), a.heads(), cols(op.inputs[0]), f());
      return 0;
    case OpKind::kGatherGrad:
      ops::gather_backward<T, int32_t>(graph().by_src, cols(out), in(0), f());
      return 0;
    case OpKind::kEdgeDot: {
      const ValueId g = op.inputs[0];
      ops::edge_dot<T>(in(0), in(1), rows(g), a.heads(), cols(g) / a.heads(), f());
      return 0;
    }
    case OpKind::kScatterGrad:
      ops::scatter_backward<T, int32_t>(reduce_of(a), graph().by_dst, cols(out), in(0),
                                        in.template operator()<int32_t>(1), f());
      return 0;
    case OpKind::kSpmmGradX:
      // inputs: x, g, edge weight (or none), arg (or none)
      ops::spmm_backward<T, int32_t>(reduce_of(a), graph(), cols(out), in(0), in(2), in(1),
                                     in.template operator()<int32_t>(3), f(), {});
      return 0;
    case OpKind::kSpmmGradW:
      // inputs: x, g, edge weight, arg (or none)
      ops::spmm_backward<T, int32_t>(reduce_of(a), graph(), cols(op.inputs[0]), in(0), in(2), in(1),
                                     in.template operator()<int32_t>(3), {}, f());
      return 0;
    case OpKind::kSddmmAddGradA:
      ops::sddmm_add_backward<T, int32_t>(graph(), a.heads(), in(0), f(), {});
      return 0;
    case OpKind::kSddmmAddGradB:
      ops::sddmm_add_backward<T, int32_t>(graph(), a.heads(), in(0), {}, f());
      return 0;
    case OpKind::kSegmentSoftmaxGrad:
      ops::segment_softmax_backward<T, int32_t>(graph().by_dst, a.heads(), in(0), in(1), f());
      return 0;
    case OpKind::kAttentionSoftmaxGrad:
      ops::attention_softmax_backward<T, int32_t>(graph(), a.heads(), slope, in(0), in(1), in(2),
                                                  in(3), f());
      return 0;
    case OpKind::kSegmentExpSumGrad:
      ops::segment_exp_sum_grad<T, int32_t>(graph().by_dst, a.heads(), in(0), in(1), in(2), f());
      return 0;
    case OpKind::kSegmentSoftmaxApplyGradS:
      ops::segment_softmax_apply_grad_s<T, int32_t>(graph().by_dst, a.heads(), in(0), in(1), in(2), f());
      return 0;
    case OpKind::kKeepWinners: {
      const auto g = in(0);
      const auto arg = in.template operator()<int32_t>(1);
      const auto edges = static_cast<int32_t>(graph().num_edges());
      auto o = f();
      for (size_t k = 0; k < o.size(); ++k) o[k] = arg[k] < edges ? g[k] : T(0);
      return 0;
    }
    case OpKind::kAllReduce:
      return all_reduce_op(p.value(op.inputs[0]).dtype, bound.data[static_cast<size_t>(op.inputs[0])],
                           bound.data[static_cast<size_t>(out)], elements(out));
    case OpKind::kHaloSum: {
      auto o = f();
      std::copy(in(0).begin(), in(0).end(), o.begin());
      const double before = options_.halo->bytes_sent();
      options_.halo->sum<T>(o, cols(out));
      return options_.halo->bytes_sent() - before;
    }
    case OpKind::kHaloMax: {
      auto o = f();
      std::copy(in(0).begin(), in(0).end(), o.begin());
      const bool max = reduce_of(a) == ops::Reduce::kMax;
      const double before = options_.halo->bytes_sent();
      if (op.inputs.size() == 1) {
        if (!max) throw RunError("halo_max without arg is a max");
        options_.halo->max<T>(o, cols(out));
        return options_.halo->bytes_sent() - before;
      }
      // Keys: the global id of each element's local winning edge.
      const auto arg = in.template operator()<int32_t>(1);
      const auto edge_id = in.template operator()<int64_t>(2);
      const auto edges = static_cast<int32_t>(edge_id.size());
      std::vector<int64_t> keys(o.size());
      for (size_t k = 0; k < o.size(); ++k) {
        keys[k] = arg[k] < edges ? edge_id[static_cast<size_t>(arg[k])] : collectives::HaloExchange::kNoKey;
      }
      std::vector<int64_t> mine = keys;
      options_.halo->keyed<T>(o, keys, cols(out), max);
      auto new_arg = out_of.template operator()<int32_t>(1);
      for (size_t k = 0; k < o.size(); ++k) {
        const bool won = mine[k] != collectives::HaloExchange::kNoKey && keys[k] == mine[k];
        new_arg[k] = won ? arg[k] : edges;
        if (keys[k] == collectives::HaloExchange::kNoKey) o[k] = T(0);  // empty everywhere
      }
      return options_.halo->bytes_sent() - before;
    }
    case OpKind::kBucketStart: {
      auto bucket = f();
      size_t at = 0;
      for (size_t k = 0; k < op.inputs.size(); ++k) {
        const auto g = in(k);
        std::copy(g.begin(), g.end(), bucket.begin() + static_cast<std::ptrdiff_t>(at));
        at += g.size();
      }
      start_bucket(a.key(), bucket.data(), bucket.size(), sizeof(T) == 8);
      return static_cast<double>(bucket.size_bytes());
    }
    case OpKind::kBucketWait: {
      wait_bucket(a.key());
      const auto bucket = in(0);
      size_t at = 0;
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        auto g = out_of(k);
        std::copy_n(bucket.begin() + static_cast<std::ptrdiff_t>(at), g.size(), g.begin());
        at += g.size();
      }
      return 0;
    }
    case OpKind::kAdamUpdate:
      ops::adam_update<T>({.lr = context.lr,
                           .beta1 = a.beta1(),
                           .beta2 = a.beta2(),
                           .eps = a.eps(),
                           .weight_decay = a.weight_decay(),
                           .decoupled = a.decoupled(),
                           .step = context.step},
                          in(1), mutable_in(0), mutable_in(2), mutable_in(3));
      return 0;
    case OpKind::kSgdUpdate:
      ops::sgd_update<T>({.lr = context.lr,
                          .momentum = a.momentum(),
                          .weight_decay = a.weight_decay(),
                          .nesterov = a.nesterov(),
                          .step = context.step},
                         in(1), mutable_in(0), mutable_in(2));
      return 0;
    case OpKind::kAccumulate:
      mutable_in.template operator()<double>(0)[a.key()] += static_cast<double>(in(1)[0]);
      return 0;
    case OpKind::kCountCorrect: {
      const ValueId lp = op.inputs[1];
      const ops::CorrectCount c = ops::count_correct<T>(in(1), in.template operator()<int64_t>(2),
                                                        in.template operator()<uint8_t>(3), rows(lp), cols(lp));
      auto metrics = mutable_in.template operator()<double>(0);
      metrics[a.key()] += static_cast<double>(c.correct);
      metrics[a.key() + 1] += static_cast<double>(c.total);
      return 0;
    }
  }
  throw RunError(fmt::format("program '{}': {} has no kernel", p.name, p.describe(op_index)));
}

template double Core::execute<float>(const CompiledProgram&, std::size_t, const Bound&, const RunContext&);
template double Core::execute<double>(const CompiledProgram&, std::size_t, const Bound&, const RunContext&);

}  // namespace gnnrt::runtime
