// Core: one simulated NeuronCore. It holds what a real core holds between
// programs — its device profile, the tensors resident in its HBM (inputs,
// parameters, optimizer and metric state, by name), the graphs bound to it —
// compiles Programs (through the program cache) and runs them.
//
//   Core core(DeviceProfile::named("trn1"), {.cache_dir = dir});
//   core.bind_graph("graph", adjacency);
//   core.memory().put("x", features);            // host -> device
//   auto step = core.compile(builder.take(), {.train = TrainStep{...}});
//   core.run(*step, {.step = 1, .lr = 0.01});
//   Tensor logits = core.read(*infer, "logits"); // device -> host, counted
//
// Compiling: verify -> fuse aggregations -> reorder aggregation and matmul
// -> autodiff, gradient sums folded, optimizer (train steps) -> dead-value
// elimination -> memory plan -> capacity check. Debug mode skips fusion,
// folding and reordering (every op runs as written), checks each op's
// outputs for NaN/Inf and names the first op that made one. Errors: ShapeError / CompileError at compile time,
// RunError at run time, each naming the program and the op.
//
// Programs run one at a time on one arena; a program's outputs stay readable
// until the next run. Not thread-safe (the kernels inside use OpenMP).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ops/csr.h"
#include "runtime/device.h"
#include "runtime/host_memory.h"
#include "runtime/memory_plan.h"
#include "runtime/tensor.h"
#include "runtime/optimizer.h"
#include "runtime/program.h"

namespace gnnrt::collectives {
class Communicator;  // collectives/communicator.h; kept out of this header (and <mpi.h> with it)
class Work;
}

namespace gnnrt::runtime {

// "gnnrt-compiler-1+<hash of runtime/ and ops/ sources>": part of every
// program-cache key, so a changed compiler never loads a stale program.
std::string_view compiler_version();

class Halo;  // runtime/halo.h

class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a train-step program adds to its forward program.
struct TrainStep {
  ValueId loss = kNoValue;
  std::vector<ValueId> params;
  OptimizerConfig optimizer;
  bool keep_grads = false;  // make the gradients outputs, readable after a run
};

struct CompileOptions {
  std::optional<TrainStep> train;  // append backward + optimizer
  // Partitioned train steps all-reduce gradients in buckets of about this
  // many bytes (PyTorch DDP's default 25 MB), each started as soon as its
  // gradients are final.
  int64_t bucket_bytes = 25 << 20;
};

struct PassStats {
  int fused = 0, reordered = 0, dead_ops = 0, backward_ops = 0, buckets = 0;
  int folded = 0;  // gradient sums folded into the ops that made a term (fuse_gradient_sums)
  int paired = 0;  // sparse products of one sparse matrix run as one walk (pair_sparse_products)
  int attention = 0;  // GAT attention softmaxes fused with their logits (fuse_attention)
  int cross_entropy = 0;  // losses fused with their log softmax (fuse_cross_entropy)
  int projected = 0;  // matmuls moved before the gathers of their rows (project_before_gather)
};

struct CompiledProgram {
  Program program;
  MemoryPlan plan;
  PassStats passes;
  std::string key;  // the cache key, 16 hex digits
  // The program's structure without its sizes (op kinds and attributes in
  // order): programs that differ only in sizes (the shape buckets of a batch
  // job) share one thread plan (Core::run), so a job with several buckets
  // measures its threads once.
  std::string tuning_key;
  ValueId loss = kNoValue;
  std::vector<ValueId> params, grads;
  bool from_cache = false;
};

// Changing scalars of one run: never compiled in.
struct RunContext {
  int64_t step = 1;     // optimizer step (from 1); also keys dropout masks
  double lr = 0;        // learning rate of this step
  uint64_t seed = 0;    // dropout seed
};

struct Counters {
  int64_t compiles = 0, cache_hits = 0, ops_run = 0, host_syncs = 0;
  int64_t collective_calls = 0, halo_calls = 0;
  double bytes_moved = 0;
  double collective_bytes = 0, halo_bytes = 0;  // sent by this rank (halo_bytes: halo ops only)
  double simulated_seconds = 0;
  // Wall time inside ops: graph communication (halo ops and the all-reduce
  // ops of graph statistics), gradient all-reduce (buckets started and
  // waited for), and the rest (kernels).
  double halo_seconds = 0, gradient_seconds = 0, compute_seconds = 0;
};

struct CoreOptions {
  std::filesystem::path cache_dir;  // empty: no program cache
  bool debug = false;
  bool trace = false;               // record op times for write_trace()
  // The ranks allreduce ops sum over; none: a single core.
  std::shared_ptr<collectives::Communicator> communicator;
  // The exchange behind a partitioned program's halo ops (runtime/halo.h).
  std::shared_ptr<Halo> halo;
  // With more than one OpenMP thread, each op of a program runs on one
  // thread or on all of them, whichever its first runs measured faster, and
  // the whole program on one thread when that measured faster than the mix
  // (Core::run). Results do not depend on it: every kernel gives the same
  // bits on any number of threads, except the sign of a NaN in a scatter of
  // rows of at most 64 bytes above two threads (docs/runtime.md, "Running").
  bool tune_threads = true;
  // OpenMP threads of a run (0: the calling thread's OpenMP default); the
  // caller's own count is put back after each run.
  int threads = 0;
  // Subnormal floats are flushed to zero while a program runs (x86's FTZ and
  // DAZ, on every thread of the run; each thread's two flags are put back
  // after it), as TensorFlow's CPU kernels run: a subnormal operand or result
  // costs ~100+ cycles on x86. Results differ from IEEE arithmetic only where
  // an operand or a result is subnormal (below 2^-126 in float). The job's
  // device.flush_denormals; no effect elsewhere than x86.
  bool flush_denormals = true;
};

// The tensors resident on the core, by name.
class DeviceMemory {
 public:
  void put(const std::string& name, Tensor array) { tensors_[name] = std::move(array); }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  Tensor& at(const std::string& name);
  const Tensor& at(const std::string& name) const;
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  void erase(const std::string& name) { tensors_.erase(name); }

 private:
  std::map<std::string, Tensor> tensors_;
};

class Core {
 public:
  using Adjacency = ops::Adjacency<int32_t>;

  Core(DeviceProfile profile, CoreOptions options);
  ~Core();

  const DeviceProfile& profile() const { return profile_; }
  const CoreOptions& options() const { return options_; }
  const Counters& counters() const { return counters_; }
  DeviceMemory& memory() { return memory_; }
  const DeviceMemory& memory() const { return memory_; }

  void bind_graph(const std::string& name, std::shared_ptr<const Adjacency> adjacency);
  // The exchange behind a partitioned program's halo ops (CoreOptions::halo).
  void bind_halo(std::shared_ptr<Halo> halo) { options_.halo = std::move(halo); }

  // Compiles `program`, or loads it from the cache when the key matches.
  std::shared_ptr<const CompiledProgram> compile(Program program, const CompileOptions& options);

  // Runs a compiled program: binds its inputs, parameters and state from
  // memory() (state missing there is created zero-filled), its graphs by
  // name, and executes every op, charging the simulated clock.
  void run(const CompiledProgram& compiled, const RunContext& context);

  // Copies an output of the last run of `compiled` (or any bound tensor) to
  // the host; counts one host synchronisation.
  Tensor read(const CompiledProgram& compiled, const std::string& name);
  Tensor read(const CompiledProgram& compiled, ValueId value);
  Tensor read(const std::string& name);  // a resident tensor

  // Every op run so far (CoreOptions::trace), in order.
  struct TraceEvent {
    std::string name, scope, program;
    double start_us, duration_us, simulated_us;
    double flops = 0, bytes = 0;  // the cost model's (runtime/device.h)
    int threads = 1;  // omp_get_max_threads() for the op (a kernel below its parallel size uses one)
  };
  const std::vector<TraceEvent>& trace() const { return trace_; }

  // The threads each op of `compiled` runs on once tuned
  // (CoreOptions::tune_threads); empty while it is being measured, and when
  // it is not tuned (tune_threads off, one thread, no ops): then every op
  // runs on all threads.
  std::vector<int> op_threads(const CompiledProgram& compiled) const;
  // How a program's ops' threads are chosen: one warm-up run; then
  // 2 kThreadSamples runs alternating every op on one thread and every op on
  // all, after which each op keeps the count with the lower median (the
  // mix); then kBlockRounds times a block of kBlockRuns runs of every op on
  // one thread, then as many of the mix, then as many of every op on all
  // threads (the first of each block not counted), and the whole program
  // keeps whichever of the three had the lowest median run time over its
  // blocks. kTuningRuns runs in all.
  static constexpr int kThreadSamples = 7;
  static constexpr int kBlockRuns = 4;
  static constexpr int kBlockRounds = 3;
  static constexpr int kBlockKinds = 3;  // one thread, the mix, all threads
  static constexpr int kTuningRuns = 2 * kThreadSamples + 1 + kBlockKinds * kBlockRounds * kBlockRuns;
  void set_trace(bool on) { options_.trace = on; }

  // For the collective kernels (runtime/defs/collective.cc). An allreduce op
  // on `count` elements of `dtype`; returns the bytes sent.
  double all_reduce_op(DType dtype, const std::byte* in, std::byte* out, std::size_t count);
  // Gradient buckets in flight, by bucket id.
  void start_bucket(uint64_t bucket, void* data, std::size_t count, bool f64);
  void wait_bucket(uint64_t bucket);
  // Chrome trace (chrome://tracing, Perfetto) of every op run so far.
  void write_trace(const std::filesystem::path& path) const;

 private:
  struct Bound;
  Bound bind(const CompiledProgram& compiled);
  template <typename T>
  double execute(const CompiledProgram& compiled, std::size_t op_index, const Bound& bound,
                 const RunContext& context);
  int communicator_size() const;
  int communicator_rank() const;
  void poll_buckets();
  void check_finite(const CompiledProgram& compiled, std::size_t op_index, const Bound& bound) const;

  DeviceProfile profile_;
  CoreOptions options_;
  Counters counters_;
  DeviceMemory memory_;
  std::map<std::string, std::shared_ptr<const Adjacency>> graphs_;
  // Results of graph-constant ops (is_graph_constant), by graph name, op
  // kind and float type, with the graph they were computed for: computed
  // again when that name is bound to another graph.
  struct GraphConstant {
    std::shared_ptr<const Adjacency> graph;
    Tensor value;
  };
  std::map<std::string, GraphConstant> graph_constants_;
  std::byte* graph_constant(const Program& p, const Op& op);
  HostVector<std::byte> arena_;
  const CompiledProgram* last_run_ = nullptr;
  std::vector<TraceEvent> trace_;
  // Per program key: the per-op thread choice and the samples behind it.
  struct ThreadPlan {
    int threads = 0;  // omp_get_max_threads() it was measured with
    std::size_t ops = 0;  // the program's op count
    int runs = 0;     // runs so far, the warm-up included
    std::vector<std::vector<double>> op_seconds[2];  // [0]: one thread, [1]: all; per op
    std::vector<int> mix;                            // each op's faster count
    std::vector<double> run_seconds[3];              // [0]: one thread, [1]: the mix, [2]: all
    std::vector<int> op_threads;                     // set once tuned
  };
  std::map<std::string, ThreadPlan> thread_plans_;
  std::vector<std::pair<uint64_t, std::unique_ptr<collectives::Work>>> buckets_;
  std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
};

}  // namespace gnnrt::runtime
