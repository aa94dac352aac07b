// The `gnnrt` command. Subcommands:
//   info       what this build is and what it runs on
//   selfcheck  checks the kernels on this machine (fused == unfused, bits
//              identical across thread counts)
//   train      full-batch training of a job, on one simulated core or (under
//              mpirun) on one per rank over a vertex-cut partition
//   partition  writes one shard per rank
//   bench collectives | halo   MPI benchmarks (run under mpirun)
//   launch     starts, watches and restarts a job under mpirun (docs/launcher.md)
// Exit status 0 on success, 1 on a failed check, 2 on bad usage or input
// (one clear line on stderr).
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <exception>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <memory>
#include <string>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>
#include <xxhash.h>

#include "collectives/communicator.h"
#include "collectives/environment.h"
#include "launch/bench_collectives.h"
#include "launch/bench_common.h"
#include "launch/bench_halo.h"
#include "launch/console.h"
#include "launch/control_client.h"
#include "launch/exit_status.h"
#include "launch/info.h"
#include "launch/launcher.h"
#include "launch/partition.h"
#include "launch/selfcheck.h"
#include "launch/train.h"
#include "model/data/partition.h"
#include "model/job.h"
#include "model/training/distributed.h"
#include "model/training/sampled_source.h"
#include "runtime/atomic_file.h"

namespace {

// Options every MPI subcommand shares: the collectives' deadline, tuning
// table and forced algorithm (defaults from GNNRT_COLLECTIVE_* variables).
struct MpiOptions {
  double timeout = 0;  // 0: from the environment (default 300 s)
  std::string tuning, algorithm;
};

void add_mpi_options(CLI::App* app, MpiOptions& o) {
  app->add_option("--collective-timeout", o.timeout,
                  "Seconds before a waiting collective aborts the job (default 300, or "
                  "$GNNRT_COLLECTIVE_TIMEOUT)")
      ->check(CLI::PositiveNumber);
  app->add_option("--collective-tuning", o.tuning,
                  "Tuning table (Protobuf text) from `gnnrt bench collectives --tune`")
      ->check(CLI::ExistingFile);
  app->add_option("--collective-algorithm", o.algorithm,
                  "Force one algorithm for every collective that has it: native, ring, "
                  "recursive_doubling, rabenseifner, binomial, pairwise");
}

// Starts MPI (also without mpirun) and puts the rank in every log line.
// The world communicator starts with fixed settings (MPI's own algorithms,
// no call checks, a 60 s deadline): the first collective is the start-up
// comparison of the ranks' options, which must work whatever they were
// given; configure_collectives then applies the user's.
gnnrt::collectives::Communicator start_mpi() {
  using namespace gnnrt::collectives;
  CommunicatorOptions startup;
  startup.timeout_seconds = 60;
  startup.algorithm = Algorithm::native;
  auto comm = Communicator::world(startup);
  const char* log_dir = std::getenv("GNNRT_LOG_DIR");
  if (log_dir == nullptr || *log_dir == '\0') {
    spdlog::set_pattern(fmt::format("%Y-%m-%d %H:%M:%S.%e [rank {}] [%^%l%$] %v", comm.rank()));
    return comm;
  }
  // Under `gnnrt launch`: every line to RUN_DIR/logs/rank-K.log (appended
  // across restarts) with the rank and host; errors on stderr too.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(
      fmt::format("{}/rank-{}.log", log_dir, comm.rank()));
  auto console = gnnrt::launch::console_sink(2);
  console->set_level(spdlog::level::err);
  auto logger = std::make_shared<spdlog::logger>("rank", spdlog::sinks_init_list{file, console});
  logger->set_pattern(fmt::format("%Y-%m-%d %H:%M:%S.%e [rank {} host {}] [%^%l%$] %v", comm.rank(), host));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  return comm;
}

// What a rank was started with that changes what it computes, writes or
// waits for, as "name=value" lines for the start-up comparison: every
// option of its subcommand (`skip` aside), and the collectives' settings
// from the environment (a tuning table by its bytes: the same path may
// hold another file on another host).
std::vector<std::string> startup_fields(const CLI::App& cmd, const std::set<std::string>& skip,
                                        const MpiOptions& o) {
  std::vector<std::string> lines;
  for (const CLI::Option* opt : cmd.get_options()) {
    const std::string name = opt->get_name();
    if (name == "--help" || skip.count(name)) continue;
    lines.push_back(name + "=" + (opt->count() == 0 ? "not given" : fmt::format("{}", fmt::join(opt->results(), " "))));
  }
  for (const char* variable : {"GNNRT_COLLECTIVE_TIMEOUT", "GNNRT_COLLECTIVE_ALGORITHM", "GNNRT_COLLECTIVE_TUNING",
                               "GNNRT_COLLECTIVE_CHECK"}) {
    const char* value = std::getenv(variable);
    lines.push_back(fmt::format("${}={}", variable, value == nullptr ? "not set" : value));
  }
  const char* tuning_env = std::getenv("GNNRT_COLLECTIVE_TUNING");
  const std::string tuning = !o.tuning.empty() ? o.tuning : tuning_env != nullptr ? tuning_env : "";
  if (!tuning.empty()) {
    std::string bytes = "unreadable";  // the error comes later, on every rank that cannot read it
    try {
      const std::string file = gnnrt::read_whole_file(tuning);
      bytes = fmt::format("xxh64 {:016x}", XXH64(file.data(), file.size(), 0));
    } catch (const std::runtime_error&) {
    }
    lines.push_back("the tuning table's bytes=" + bytes);
  }
  for (const char* variable : {"GNNRT_TEST_SLOW_STEP", "GNNRT_TEST_SLOW_CHECKPOINT"}) {  // the tests' switches
    if (const char* value = std::getenv(variable)) lines.push_back(fmt::format("${}={}", variable, value));
  }
  return lines;
}

// The start-up comparison, then the collectives' settings (the
// environment's GNNRT_COLLECTIVE_*, then the flags): ranks that differ in
// any option stop here, every one with the same error naming each option
// and which ranks hold which value, before anything that could wait on a
// peer started otherwise.
void configure_collectives(gnnrt::collectives::Communicator& comm, const CLI::App& cmd,
                           const std::set<std::string>& skip, const MpiOptions& o) {
  using namespace gnnrt::collectives;
  if (comm.size() > 1) gnnrt::model::check_same_fields(comm, startup_fields(cmd, skip, o), "options");
  CommunicatorOptions options;
  try {
    options = CommunicatorOptions::from_environment();
    if (!o.tuning.empty()) options.tuning = std::make_shared<const TuningTable>(TuningTable::load(o.tuning));
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());  // a tuning table that does not read or parse: bad input
  }
  if (o.timeout > 0) options.timeout_seconds = o.timeout;
  if (!o.algorithm.empty()) options.algorithm = parse_algorithm(o.algorithm);
  comm.set_options(options);
}

// A rank's error under MPI: one line on stderr; then, if every rank reaches
// this point (an error they agreed on), a normal end with the exit status,
// else (one rank failed alone) MPI_Abort, so that no rank waits forever.
// One line, written with one write(2) so that lines of several ranks sharing
// a terminal or pipe never interleave.
void print_error(const std::exception& e) {
  const std::string line = std::string("gnnrt: error: ") + e.what() + "\n";
  std::cout.flush();
  [[maybe_unused]] const ssize_t written = ::write(2, line.data(), line.size());
}

int end_with_error(const std::exception& e) {
  const int status = gnnrt::launch::exit_status(e);
  print_error(e);
  int initialized = 0, size = 1;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size <= 1) return status;
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  MPI_Abort(MPI_COMM_WORLD, status);
  return status;
}

// `gnnrt train`'s flags (docs/cli.md).
CLI::App* add_train_command(CLI::App& app, gnnrt::launch::TrainCommand& c) {
  auto* cmd = app.add_subcommand(
      "train", "Train the job's model: full-batch on one simulated NeuronCore or under mpirun on one per "
               "rank over a partition of the graph; on mini-batches of graphs (batch datasets); or on sampled "
               "mini-batches of one large graph (a job with sampling.fanout, docs/sampling.md)");
  cmd->add_option("job", c.job,
                  "Job file (Protobuf text, docs/job-format.md); default: a 2-layer GCN on the "
                  "synthetic dataset")
      ->check(CLI::ExistingFile);
  cmd->add_option("--dataset", c.dataset,
                  "Dataset, as dataset.path: synthetic[:nodes=...,classes=...,avg_degree=...,"
                  "features=...,seed=...], npy:DIR, csv:DIR or DIR");
  cmd->add_option("--set", c.sets,
                  "Override a job field, e.g. --set optimizer.lr=0.005 --set "
                  "dataset.path=../shared/datasets/cora --set model.layer[1].out=32 (repeatable)");
  cmd->add_option("--cache-dir", c.cache_dir,
                  "Program cache directory (default $XDG_CACHE_HOME/gnnrt or ~/.cache/gnnrt)");
  cmd->add_flag("--no-cache", c.options.no_cache, "Compile every program, keep nothing");
  cmd->add_option("--metrics", c.metrics, "Write one JSON object per epoch to this file");
  cmd->add_option("--logits-out", c.logits_out,
                  "Write the best model's logits [nodes, classes] as .npy, nodes in global order");
  cmd->add_option("--params-in", c.params_in,
                  "Initial parameters: a folder of <name>.npy with PyG names (conv1.lin.weight.npy, ...)")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--params-non-strict", c.options.params_non_strict,
                "Module-graph models: load the keys --params-in shares with the model, list the others "
                "(torch's strict=False); default: any missing, unexpected or mis-shaped key is an error");
  cmd->add_option("--params-scope", c.options.params_scope,
                  "Module-graph models: --params-in holds the keys under SCOPE. only (torch's "
                  "model.SCOPE.load_state_dict), checked as strictly; the model's other keys start fresh");
  cmd->add_option("--params-out", c.params_out, "Write the best model's parameters as <name>.npy here");
  cmd->add_option("--threads", c.options.threads, "OpenMP threads for the kernels (0: OpenMP's default)")
      ->check(CLI::Range(0, 1024));
  cmd->add_flag("--debug", c.options.debug,
                "Run op by op, unfused, and stop at the first op that makes a NaN or Inf");
  cmd->add_option("--trace", c.trace, "Write a Chrome trace (JSON) of every op's time");
  cmd->add_option("--hbm-bytes", c.options.hbm_bytes, "HBM capacity of the core, overriding the profile")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--profile", c.options.profile, "Device profile: trn1 (16 GiB/core) or trn2 (12 GiB/core)")
      ->check(CLI::IsMember({"trn1", "trn2"}));
  cmd->add_option("--partition", c.partition,
                  "Partition the graph in memory at start-up with this method (partition.method): " +
                      fmt::format("{}", fmt::join(gnnrt::model::partition_method_names(), ", ")))
      ->check(CLI::IsMember(gnnrt::model::partition_method_names(), CLI::ignore_case));
  cmd->add_option("--shards", c.shards,
                  "Read each rank's shard from this folder, written by `gnnrt partition` (partition.shards)");
  cmd->add_option("--halo", c.halo,
                  "Halo exchange: sparse (shared rows only) or dense (an all-reduce of the whole "
                  "matrix, the baseline) (partition.halo)")
      ->check(CLI::IsMember(gnnrt::model::enum_names_lower(gnnrt::model::proto::Partition::Halo_descriptor()),
                            CLI::ignore_case));
  return cmd;
}

// `gnnrt infer`'s flags (docs/cli.md).
CLI::App* add_infer_command(CLI::App& app, gnnrt::launch::InferCommand& c) {
  auto* cmd = app.add_subcommand(
      "infer", "Run a trained module-graph model over every graph of its batch dataset, or a sampled job's model "
               "over every node of its graph (layer-wise), and write its outputs as .npy, in dataset order");
  cmd->add_option("job", c.job, "Job file with a module-graph model (docs/job-format.md)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--params-in", c.params_in, "The trained parameters: a folder of <state_dict key>.npy")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--params-non-strict", c.options.params_non_strict,
                "Load the keys the folder shares with the model, list the others (torch's strict=False)");
  cmd->add_option("--params-scope", c.options.params_scope,
                  "The folder holds the keys under SCOPE. only (torch's model.SCOPE.load_state_dict), checked as "
                  "strictly; the model's other keys start fresh");
  cmd->add_option("--out", c.out, "Folder for <output>.npy")->required();
  cmd->add_option("--output", c.options.outputs,
                  "A module whose output to write (repeatable); default: every loss term's input");
  cmd->add_option("--dataset", c.dataset, "The dataset, as dataset.path (a batch dataset)");
  cmd->add_option("--set", c.sets, "Override a job field (repeatable)");
  cmd->add_option("--cache-dir", c.cache_dir, "Program cache directory");
  cmd->add_flag("--no-cache", c.options.no_cache, "Compile every program, keep nothing");
  cmd->add_option("--threads", c.options.threads, "OpenMP threads (0: OpenMP's default)")->check(CLI::Range(0, 1024));
  return cmd;
}

// `gnnrt partition`'s flags (docs/cli.md).
CLI::App* add_partition_command(CLI::App& app, gnnrt::launch::PartitionCommand& c) {
  auto* cmd = app.add_subcommand(
      "partition", "Partition the job's dataset once and write one shard per rank");
  cmd->add_option("job", c.job, "Job file (default: the default job of gnnrt train)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--parts", c.parts,
                  "Number of shards, the rank count to train on (default: the job's partition.parts)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--method", c.method,
                  fmt::format("{} (default: the job's)", fmt::join(gnnrt::model::partition_method_names(), ", ")))
      ->check(CLI::IsMember(gnnrt::model::partition_method_names(), CLI::ignore_case));
  cmd->add_option("--out", c.out, "Folder to write (replaced if it exists)")->required();
  cmd->add_option("--seed", c.seed, "Seed of the partitioner (default: the job's)")
      ->each([&c](const std::string&) { c.seed_given = true; });
  cmd->add_option("--dataset", c.dataset, "Dataset, as dataset.path");
  cmd->add_option("--set", c.sets, "Override a job field (repeatable)");
  return cmd;
}


// `gnnrt launch`'s flags (docs/cli.md, docs/launcher.md).
CLI::App* add_launch_command(CLI::App& app, gnnrt::launch::LaunchCommand& c, std::string& hosts) {
  auto* cmd = app.add_subcommand(
      "launch", "Start a job under mpirun, watch it (heartbeats, progress) and restart it from its newest "
                "checkpoint when a rank fails: gnnrt launch -n 4 -- train JOB");
  cmd->add_option("-n,--ranks", c.ranks, "Ranks (simulated NeuronCores)")->required()->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--hosts", hosts, "Hosts and their rank slots, H1:S1,H2:S2 (default: this host)");
  cmd->add_option("--run-dir", c.run_dir,
                  "Folder for logs/, metrics.jsonl, events.jsonl, job.pbtxt and checkpoints/ (default "
                  "runs/<job>-<date>-<time>)");
  cmd->add_option("--max-restarts", c.max_restarts, "Restarts after failures before giving up")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--min-ranks", c.min_ranks,
                  "With --hosts: restart on the hosts that still answer with fewer ranks, down to this many "
                  "(default: -n, never fewer)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--heartbeat-timeout", c.heartbeat_timeout, "Seconds without a rank's heartbeat before it is lost")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--progress-timeout", c.progress_timeout,
                  "Seconds without a finished epoch (a batch job: a step) on some rank before the job counts as hung (train)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--start-timeout", c.start_timeout, "Seconds for every rank to register")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--grace", c.grace, "Seconds between SIGTERM and SIGKILL when stopping the job")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--restart-delay", c.restart_delay,
                  "Seconds to wait before each restart (a host or a disk may need a moment)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--mpirun-arg", c.mpirun_args,
                  "Pass this argument to mpirun (repeatable; write --mpirun-arg=--mca for a leading dash)");
  cmd->add_option("--control-address", c.control_address,
                  "Address the control server listens on (default 127.0.0.1, or this host's with --hosts)");
  cmd->add_flag("--dry-run", c.dry_run, "Print the mpirun command and exit");
  // For the tests: make a rank crash, hang or go silent (first attempt only).
  cmd->add_option("--inject-fault", c.fault, "KIND:RANK:EPOCH")->group("");
  cmd->add_option("command", c.command, "After --: train JOB [flags] or bench collectives|halo [flags]")
      ->required();
  return cmd;
}

// Checks the command after `--` (its flags parsed as `gnnrt train` would),
// resolves a train job, and runs the launcher. Usage errors: status 2.
int run_launch_command(gnnrt::launch::LaunchCommand& c, const std::string& hosts) {
  if (!hosts.empty()) c.hosts = gnnrt::launch::parse_hosts(hosts);
  const std::string& what = c.command.front();
  if (what != "train" && what != "bench") {
    throw std::invalid_argument(fmt::format("launch: the command after -- must be train or bench, not '{}'", what));
  }
  if (!c.fault.empty()) gnnrt::launch::Fault::parse(c.fault);  // a typo: an error now, not a crash later
  if (c.min_ranks == 0) c.min_ranks = c.ranks;
  if (c.min_ranks > c.ranks) {
    throw std::invalid_argument(fmt::format("launch: --min-ranks {} exceeds -n {}", c.min_ranks, c.ranks));
  }
  int slots = 0;
  for (const auto& h : c.hosts) slots += h.slots;
  if (!c.hosts.empty() && slots < c.ranks) {
    throw std::invalid_argument(fmt::format("launch: --hosts has {} slot(s) for -n {} ranks", slots, c.ranks));
  }
  std::string name = what;
  if (what == "train") {
    c.is_train = true;
    CLI::App sub{"gnnrt"};
    gnnrt::launch::TrainCommand t;
    auto* train = add_train_command(sub, t);
    MpiOptions ignored;
    add_mpi_options(train, ignored);
    try {
      sub.parse(std::vector<std::string>(c.command.rbegin(), c.command.rend()));
    } catch (const CLI::ParseError& e) {
      throw std::invalid_argument(fmt::format("launch: the train command after --: {}", e.what()));
    }
    if (!t.metrics.empty()) {
      throw std::invalid_argument("launch: the launcher writes RUN_DIR/metrics.jsonl; leave --metrics out");
    }
    c.job = gnnrt::launch::resolve_job(t);
    if (c.min_ranks < c.ranks && !c.job.partition().shards().empty()) {
      throw std::invalid_argument(fmt::format("launch: --min-ranks {} < -n {} needs a partition made at start-up, but the "
                                    "job reads shards written for {} ranks ({})",
                                    c.min_ranks, c.ranks, c.ranks, c.job.partition().shards()));
    }
    name = c.job.name().empty() ? "train" : c.job.name();
  }
  if (c.run_dir.empty()) {
    const auto t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    c.run_dir = fmt::format("runs/{}-{}", name, stamp);
  }
  return gnnrt::launch::run_launch(c);
}
// A rank started by `gnnrt launch` gets its arguments in GNNRT_LAUNCH_ARGV
// (JSON): the launcher's appfile, which gives each rank its own token,
// cannot quote an argument. argc and argv then point into `launched`;
// false (after a message) when the variable is not a JSON list of strings.
bool unpack_launched_argv(int& argc, char**& argv, std::vector<std::string>& launched,
                          std::vector<char*>& launched_argv) {
  if (const char* packed = std::getenv("GNNRT_LAUNCH_ARGV"); argc == 1 && packed != nullptr && *packed != '\0') {
    try {
      launched = nlohmann::json::parse(packed).get<std::vector<std::string>>();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gnnrt: error: GNNRT_LAUNCH_ARGV is not a JSON list of strings: %s\n", e.what());
      return false;
    }
    launched_argv.push_back(argv[0]);
    for (auto& a : launched) launched_argv.push_back(a.data());
    launched_argv.push_back(nullptr);
    argc = static_cast<int>(launched_argv.size()) - 1;
    argv = launched_argv.data();
  }
  return true;
}

CLI::App* add_selfcheck_command(CLI::App& app, gnnrt::launch::SelfcheckOptions& options) {
  auto* selfcheck = app.add_subcommand(
      "selfcheck", "Check the kernels on this machine: fused == unfused, deterministic");
  selfcheck->add_option("--edges", options.edges, "Edges of the random graph")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  selfcheck->add_option("--features", options.features, "Feature width F")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  selfcheck->add_option("--threads", options.threads, "OpenMP threads (0: all)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  selfcheck->add_option("--seed", options.seed, "Seed of the random graph")->capture_default_str();
  return selfcheck;
}

// `gnnrt bench collectives|halo` and their options.
struct BenchCommands {
  CLI::App* bench = nullptr;
  CLI::App* collectives = nullptr;
  CLI::App* halo = nullptr;
  gnnrt::launch::CollectiveBenchOptions collective_options;
  gnnrt::launch::HaloBenchOptions halo_options;
  MpiOptions mpi;
};

void add_bench_commands(CLI::App& app, BenchCommands& b) {
  b.bench = app.add_subcommand("bench", "MPI benchmarks; run under mpirun");
  b.bench->require_subcommand(1);

  auto* bench_collectives = b.collectives = b.bench->add_subcommand(
      "collectives", "Collective latency and bandwidth per op, algorithm and size (nccl-tests style)");
  auto& collective_options = b.collective_options;
  bench_collectives->add_option("--op", collective_options.ops,
                                "Operations (repeatable): allreduce, reduce_scatter, allgather, "
                                "broadcast, alltoallv; default all");
  bench_collectives->add_option("--algorithm", collective_options.algorithm,
                                "Only this algorithm (native, ring, recursive_doubling, "
                                "rabenseifner, binomial, pairwise, or auto: the tuning "
                                "table's pick); default every one, then auto");
  bench_collectives->add_option("--min-bytes", collective_options.min_bytes, "Smallest size")
      ->capture_default_str();
  bench_collectives->add_option("--max-bytes", collective_options.max_bytes, "Largest size")
      ->capture_default_str();
  bench_collectives->add_option("--seconds", collective_options.seconds_per_size,
                                "Time budget per (op, algorithm, size)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench_collectives->add_option("--rounds", collective_options.rounds,
                                "Interleaved passes over a size's algorithms; each reports "
                                "the median pass")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  bench_collectives->add_option("--json", collective_options.json, "Write the rows to this file");
  bench_collectives->add_option("--tune", collective_options.tune,
                                "Write the fastest algorithm per size into this tuning table");
  add_mpi_options(bench_collectives, b.mpi);

  auto* bench_halo = b.halo = b.bench->add_subcommand(
      "halo", "Halo all-reduce of a partitioned graph against a dense allreduce");
  auto& halo_options = b.halo_options;
  bench_halo->add_option("--nodes", halo_options.nodes, "Vertices")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31))
      ->capture_default_str();
  bench_halo->add_option("--avg-degree", halo_options.avg_degree, "Edges per vertex")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench_halo->add_option("--features", halo_options.features, "Feature width F")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16))
      ->capture_default_str();
  bench_halo->add_option("--locality", halo_options.locality,
                         "Fraction of edges joining vertices at most --window ids apart")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  bench_halo->add_option("--window", halo_options.window, "Id distance of local edges")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bench_halo->add_option("--dataset", halo_options.dataset,
                         "Graph of a data set (a NumPy folder such as ../shared/datasets/cora, "
                         "csv:DIR, synthetic[:...]) instead of the generated one");
  bench_halo->add_option("--partition", halo_options.partition,
                         "Edge partition (partition.method, docs/distributed.md): " +
                             fmt::format("{}", fmt::join(gnnrt::model::partition_method_names(), ", ")))
      ->check(CLI::IsMember(gnnrt::model::partition_method_names(), CLI::ignore_case))
      ->capture_default_str();
  bench_halo->add_option("--seed", halo_options.seed, "Seed of the random graph and partition")
      ->capture_default_str();
  bench_halo->add_option("--seconds", halo_options.seconds, "Time budget per method")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench_halo->add_option("--rounds", halo_options.rounds,
                         "Interleaved passes over the methods; each reports the median pass")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  bench_halo->add_option("--json", halo_options.json, "Write the rows to this file");
  add_mpi_options(bench_halo, b.mpi);
}

// A bench under mpirun. The control connection outlives MPI_Finalize
// (declared first, ended last): a rank that hangs there is still watched.
int run_bench(int& argc, char**& argv, BenchCommands& b) {
  std::unique_ptr<gnnrt::launch::ControlClient> control;
  gnnrt::collectives::Environment mpi(&argc, &argv);
  try {
    auto comm = start_mpi();
    control = gnnrt::launch::ControlClient::from_environment(comm.rank(), comm.size());
    configure_collectives(comm, *b.collectives ? *b.collectives : *b.halo, {}, b.mpi);
    const int status = *b.collectives ? gnnrt::launch::run_collective_bench(comm, b.collective_options)
                                      : gnnrt::launch::run_halo_bench(comm, b.halo_options);
    if (control) control->done(status, "", false);
    return status;
  } catch (const std::exception& e) {
    if (control) control->done(gnnrt::launch::exit_status(e), e.what(), false);
    return end_with_error(e);
  }
}

// `gnnrt train`: one rank without mpirun (MPI's singleton mode), one per
// rank under it.
int run_train_ranks(int& argc, char**& argv, gnnrt::launch::TrainCommand& train_command, const CLI::App& train,
                    const MpiOptions& train_mpi) {
  std::unique_ptr<gnnrt::launch::ControlClient> control;  // outlives MPI_Finalize
  // MPI for several threads where a sampled job may sample ahead of the step
  // on a thread of its own (docs/sampling.md); other jobs keep
  // MPI_THREAD_FUNNELED. A job that does not load is reported once MPI is up.
  using gnnrt::collectives::Threads;
  const Threads threads = [&] {
    try {
      const auto job =
          gnnrt::launch::load_job_with_overrides(train_command.job, train_command.dataset, train_command.sets);
      return gnnrt::model::is_sampled_job(job) ? Threads::kMultiple : Threads::kFunneled;
    } catch (const std::exception&) {
      return Threads::kFunneled;
    }
  }();
  gnnrt::collectives::Environment mpi(&argc, &argv, threads);
  try {
    auto comm = std::make_shared<gnnrt::collectives::Communicator>(start_mpi());
    // Registered first, so that even a start-up error reaches the launcher
    // (bad input: not restarted).
    control = gnnrt::launch::ControlClient::from_environment(comm->rank(), comm->size());
    // The job's own fields are compared once it is resolved (the step loop's
    // check_same_job); --threads is not compared: results are bitwise the
    // same on any thread count, and its default differs from host to host.
    configure_collectives(*comm, train, {"job", "--dataset", "--set", "--partition", "--shards", "--halo", "--threads"},
                          train_mpi);
    if (train_command.options.debug) {
      auto options = comm->options();
      options.check_calls = true;  // ranks that disagree: an error, not a hang
      comm->set_options(options);
    }
    train_command.options.communicator = comm;
    if (comm->size() > 1) {
      // The node's cores shared among its ranks, unless --threads says.
      const auto place = gnnrt::launch::placement(*comm);
      auto& threads = train_command.options.threads;
      if (threads == 0) {
        threads = std::max(1, static_cast<int>(place.cores) / std::max(1, place.ranks_on_node));
      }
      if (comm->rank() == 0) {
        spdlog::info("{}; {} OpenMP thread(s) per rank", place.describe(), threads);
      }
    }
    train_command.control = control.get();
    const int status = gnnrt::launch::run_train(train_command);
    if (control) control->done(status, "", train_command.stopped, train_command.resumed_after);
    return status;
  } catch (const std::exception& e) {
    if (control) control->done(gnnrt::launch::exit_status(e), e.what(), false);
    spdlog::error("{}", e.what());
    return end_with_error(e);
  }
}

// `gnnrt infer`: one rank without mpirun; under it, each rank a share of
// the batches.
int run_infer_ranks(int& argc, char**& argv, gnnrt::launch::InferCommand& infer_command, const CLI::App& infer,
                    const MpiOptions& infer_mpi) {
  gnnrt::collectives::Environment mpi(&argc, &argv);
  try {
    auto comm = std::make_shared<gnnrt::collectives::Communicator>(start_mpi());
    configure_collectives(*comm, infer, {"job", "--dataset", "--set", "--threads"}, infer_mpi);
    infer_command.options.communicator = comm;
    return gnnrt::launch::run_infer(infer_command);
  } catch (const std::exception& e) {
    return end_with_error(e);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A rank started by `gnnrt launch` gets its arguments in GNNRT_LAUNCH_ARGV.
  std::vector<std::string> launched;
  std::vector<char*> launched_argv;
  if (!unpack_launched_argv(argc, argv, launched, launched_argv)) return 2;
  CLI::App app{"gnnrt: graph neural network training on simulated NeuronCores"};
  app.require_subcommand(1);
  app.set_version_flag("--version", GNNRT_VERSION);
  std::string color_when;
  app.add_option("--color", color_when,
                 "Colour the log lines: auto (only on the user's terminal, never in a rank under "
                 "mpirun), always or never (default $GNNRT_COLOR, else auto)")
      ->check(CLI::IsMember({"auto", "always", "never"}));

  auto* info = app.add_subcommand("info", "Show the build, OpenMP and OpenBLAS configuration");
  bool info_json = false;
  info->add_flag("--json", info_json, "Print one JSON object");

  gnnrt::launch::SelfcheckOptions options;
  auto* selfcheck = add_selfcheck_command(app, options);

  gnnrt::launch::TrainCommand train_command;
  auto* train = add_train_command(app, train_command);
  MpiOptions train_mpi;
  add_mpi_options(train, train_mpi);
  gnnrt::launch::InferCommand infer_command;
  auto* infer = add_infer_command(app, infer_command);
  MpiOptions infer_mpi;
  add_mpi_options(infer, infer_mpi);
  gnnrt::launch::PartitionCommand partition_command;
  auto* partition = add_partition_command(app, partition_command);

  gnnrt::launch::LaunchCommand launch_command;
  std::string launch_hosts;
  auto* launch = add_launch_command(app, launch_command, launch_hosts);

  BenchCommands bench;
  add_bench_commands(app, bench);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a usage error prints CLI11's message and
    // exits 2, as docs/cli.md says.
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    // The console's colour first, before anything logs.
    if (color_when.empty()) {
      const char* env = std::getenv("GNNRT_COLOR");
      color_when = env != nullptr && *env != '\0' ? env : "auto";
    }
    gnnrt::launch::set_color(gnnrt::launch::parse_color(color_when));
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("", gnnrt::launch::console_sink(1)));
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e [%^%l%$] %v");
    if (*launch) return run_launch_command(launch_command, launch_hosts);
    if (*bench.bench) return run_bench(argc, argv, bench);
    if (*train) return run_train_ranks(argc, argv, train_command, *train, train_mpi);
    if (*info) {
      const auto j = gnnrt::launch::build_info();
      if (info_json) {
        std::cout << j.dump() << "\n";
      } else {
        for (const auto& [key, value] : j.items()) {
          std::cout << key << ": " << (value.is_string() ? value.get<std::string>() : value.dump())
                    << "\n";
        }
      }
      return 0;
    }
    if (*selfcheck) return gnnrt::launch::run_selfcheck(options) ? 0 : 1;
    if (*partition) return gnnrt::launch::run_partition(partition_command);
    if (*infer) return run_infer_ranks(argc, argv, infer_command, *infer, infer_mpi);
  } catch (const std::exception& e) {
    print_error(e);
    return gnnrt::launch::exit_status(e);
  }
  return 0;
}
