// MPI start-up and shut-down for a process. Construct one Environment in main
// before any Communicator and keep it alive until the end: it initialises MPI
// (also in a single process started without mpirun) unless someone already
// did, and finalises it on destruction only if it initialised it. Not
// thread-safe. MPI is used from one thread (MPI_THREAD_FUNNELED: OpenMP
// threads in kernels never call MPI), or, asked for with kMultiple, from
// several, each on its own Communicator (a sampled job's sampler thread on a
// split of the training's; docs/sampling.md).
#pragma once

namespace gnnrt::collectives {

enum class Threads { kFunneled, kMultiple };

// Whether MPI was initialised for calls from several threads at once.
bool mpi_thread_multiple();

class Environment {
 public:
  Environment(int* argc, char*** argv, Threads threads = Threads::kFunneled);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  bool owns_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
};

}  // namespace gnnrt::collectives
