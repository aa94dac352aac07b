#include "launch/bench_common.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <fmt/format.h>
#include <thread>
#include <vector>

#include "runtime/atomic_file.h"

namespace gnnrt::launch {

using collectives::Algorithm;
using collectives::ReduceOp;

std::vector<RankStats> time_interleaved(collectives::Communicator& comm,
                                        const std::vector<std::function<void()>>& steps,
                                        double budget_seconds, int warmup, int min_iters,
                                        int max_iters, int rounds, std::vector<int>* iterations) {
  using clock = std::chrono::steady_clock;
  const std::size_t n = steps.size();
  rounds = std::max(1, rounds);
  // Warm-up, which also sizes each step's passes (the slowest rank decides,
  // so every rank runs the same count).
  std::vector<double> per_step(n);
  for (std::size_t s = 0; s < n; ++s) {
    comm.barrier();
    const auto start = clock::now();
    for (int i = 0; i < warmup; ++i) steps[s]();
    per_step[s] = std::chrono::duration<double>(clock::now() - start).count() / std::max(1, warmup);
  }
  comm.allreduce<double>(per_step, ReduceOp::max, Algorithm::native);
  std::vector<int> per_pass(n);
  for (std::size_t s = 0; s < n; ++s) {
    per_pass[s] = static_cast<int>(std::clamp<double>(
        std::floor(budget_seconds / rounds / std::max(per_step[s], 1e-9)),
        std::ceil(double(min_iters) / rounds), std::max(1, max_iters / rounds)));
  }
  std::vector<std::vector<double>> passes(n);
  for (int round = 0; round < rounds; ++round) {
    // Each pass starts one step later, so that no step always follows the
    // same other one (whose buffers are then in cache).
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t s = (k + round) % n;
      comm.barrier();
      const auto start = clock::now();
      for (int i = 0; i < per_pass[s]; ++i) steps[s]();
      passes[s].push_back(
          std::chrono::duration<double, std::micro>(clock::now() - start).count() / per_pass[s]);
    }
  }
  std::vector<double> sum(n), lo(n), hi(n);
  for (std::size_t s = 0; s < n; ++s) {
    auto& times = passes[s];
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    sum[s] = lo[s] = hi[s] = times[times.size() / 2];
  }
  comm.allreduce<double>(sum, ReduceOp::sum, Algorithm::native);
  comm.allreduce<double>(lo, ReduceOp::min, Algorithm::native);
  comm.allreduce<double>(hi, ReduceOp::max, Algorithm::native);
  std::vector<RankStats> stats(n);
  for (std::size_t s = 0; s < n; ++s) stats[s] = {sum[s] / comm.size(), lo[s], hi[s]};
  if (iterations != nullptr) {
    iterations->resize(n);
    for (std::size_t s = 0; s < n; ++s) (*iterations)[s] = per_pass[s] * rounds;
  }
  return stats;
}

void write_atomically(const std::string& path, const std::string& text) {
  write_file_atomically(path, text);
}

namespace {

// Open MPI's mpi_yield_when_idle, read through the MPI tool interface.
std::string read_yield_when_idle() {
  // Open MPI 4.1's MPI_T_init_thread sets the process's MPI thread level to
  // the one asked (MPI_Query_thread then answers it): ask for the current one.
  int level = MPI_THREAD_SINGLE, provided = 0;
  MPI_Query_thread(&level);
  if (MPI_T_init_thread(level, &provided) != MPI_SUCCESS) return "unknown";
  std::string result = "unknown";
  int count = 0;
  MPI_T_cvar_get_num(&count);
  for (int i = 0; i < count; ++i) {
    char name[256], desc[1024];
    int name_len = sizeof(name), desc_len = sizeof(desc), verbosity, bind, scope;
    MPI_Datatype type;
    MPI_T_enum enumtype;
    if (MPI_T_cvar_get_info(i, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len,
                            &bind, &scope) != MPI_SUCCESS) {
      continue;
    }
    if (std::strcmp(name, "mpi_yield_when_idle") != 0) continue;
    MPI_T_cvar_handle handle;
    int elements = 0;
    if (MPI_T_cvar_handle_alloc(i, nullptr, &handle, &elements) == MPI_SUCCESS) {
      // A bool in Open MPI 4.1, an int elsewhere: read into zeroed bytes.
      alignas(8) unsigned char value[16] = {};
      if (MPI_T_cvar_read(handle, value) == MPI_SUCCESS) {
        int number = 0;
        if (type == MPI_INT) {
          std::memcpy(&number, value, sizeof number);
        } else {
          number = value[0] != 0;
        }
        result = std::to_string(number);
      }
      MPI_T_cvar_handle_free(&handle);
    }
    break;
  }
  MPI_T_finalize();
  return result;
}

}  // namespace

Placement placement(const collectives::Communicator& comm) {
  Placement p;
  MPI_Comm node;
  MPI_Comm_split_type(comm.mpi_comm(), MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &p.ranks_on_node);
  MPI_Comm_free(&node);
  p.cores = std::max(1u, std::thread::hardware_concurrency());
  p.oversubscribed = static_cast<unsigned>(p.ranks_on_node) > p.cores;
  p.yield_when_idle = read_yield_when_idle();
  return p;
}

std::string Placement::describe() const {
  std::string text = fmt::format("{} rank(s) on a node with {} core(s)", ranks_on_node, cores);
  if (oversubscribed) {
    text += fmt::format(": OVERSUBSCRIBED, mpi_yield_when_idle = {}", yield_when_idle);
    if (yield_when_idle == "0") text += " (turn it on: mpirun --oversubscribe, or OMPI_MCA_mpi_yield_when_idle=1)";
  }
  return text;
}

}  // namespace gnnrt::launch
