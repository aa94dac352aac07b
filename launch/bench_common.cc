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

RankStats time_loop(collectives::Communicator& comm, const std::function<void()>& step,
                    double budget_seconds, int warmup, int min_iters, int max_iters,
                    int* iterations) {
  using clock = std::chrono::steady_clock;
  comm.barrier();
  const auto warm_start = clock::now();
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> per_step{std::chrono::duration<double>(clock::now() - warm_start).count() /
                               std::max(1, warmup)};
  comm.allreduce<double>(per_step, ReduceOp::max, Algorithm::native);
  const int iters = static_cast<int>(std::clamp<double>(
      std::floor(budget_seconds / std::max(per_step[0], 1e-9)), min_iters, max_iters));
  comm.barrier();
  const auto start = clock::now();
  for (int i = 0; i < iters; ++i) step();
  const double us = std::chrono::duration<double, std::micro>(clock::now() - start).count() / iters;
  std::vector<double> sum{us}, lo{us}, hi{us};
  comm.allreduce<double>(sum, ReduceOp::sum, Algorithm::native);
  comm.allreduce<double>(lo, ReduceOp::min, Algorithm::native);
  comm.allreduce<double>(hi, ReduceOp::max, Algorithm::native);
  if (iterations != nullptr) *iterations = iters;
  return {sum[0] / comm.size(), lo[0], hi[0]};
}

void write_atomically(const std::string& path, const std::string& text) {
  write_file_atomically(path, text);
}

namespace {

// Open MPI's mpi_yield_when_idle, read through the MPI tool interface.
std::string read_yield_when_idle() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return "unknown";
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
