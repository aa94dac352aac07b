// A count mismatch in the default mode (no call checks): the last rank
// calls a collective with one element more than the others. The job must
// end in an error (or the deadline) on some rank, never with every rank
// returning as if nothing happened, and no rank may return a wrong number:
// a rank whose call returns checks every element it holds and prints
// "WRONG NUMBER" if one is not the true reduction.
//   count_mismatch OP ALGORITHM COUNT [VERDICTS]
//     OP: allreduce, allreduce_async (the non-blocking form, as the trainer's
//     gradient buckets), allgather, broadcast, reduce_scatter, alltoallv;
//     ALGORITHM: one of the op's, or auto (the tuning table's pick for each
//     rank's own size). With VERDICTS, a folder, each rank whose call returns
//     also writes its verdict to VERDICTS/rank-R before anything else can
//     end the job.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/environment.h"
#include "collectives/error.h"

int main(int argc, char** argv) {
  using namespace gnnrt::collectives;
  Environment mpi(&argc, &argv);
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: count_mismatch OP ALGORITHM COUNT [VERDICTS]\n");
    return 2;
  }
  const std::string op = argv[1];
  const Algorithm algorithm = parse_algorithm(argv[2]);
  const size_t base = std::stoul(argv[3]);
  auto options = CommunicatorOptions::from_environment();
  options.check_calls = false;
  auto comm = Communicator::world(options);
  const int p = comm.size(), r = comm.rank();
  const size_t n = base + (r == p - 1 ? 1 : 0);
  bool wrong = false;
  try {
    if (op == "allreduce" || op == "allreduce_async") {
      std::vector<float> v(n, static_cast<float>(r + 1));
      if (op == "allreduce") {
        comm.allreduce<float>(v, ReduceOp::sum, algorithm);
      } else {
        comm.allreduce_async<float>(v, v, ReduceOp::sum, algorithm).wait();
      }
      for (float x : v) wrong = wrong || x != static_cast<float>(p * (p + 1) / 2);
    } else if (op == "allgather") {
      std::vector<float> mine(n, static_cast<float>(r + 1)), all(n * static_cast<size_t>(p), -1.0f);
      comm.allgather<float>(mine, all, algorithm);
      for (size_t i = 0; i < all.size(); ++i) wrong = wrong || all[i] != static_cast<float>(i / n + 1);
    } else if (op == "broadcast") {
      std::vector<float> v(n, r == 0 ? 7.0f : -1.0f);
      comm.broadcast<float>(v, 0, algorithm);
      for (float x : v) wrong = wrong || x != 7.0f;
    } else if (op == "reduce_scatter") {
      std::vector<float> in(n * static_cast<size_t>(p), static_cast<float>(r + 1)), out(n, -1.0f);
      comm.reduce_scatter<float>(in, out, ReduceOp::sum, algorithm);
      for (float x : out) wrong = wrong || x != static_cast<float>(p * (p + 1) / 2);
    } else if (op == "alltoallv") {
      // Every rank sends COUNT elements to each rank; the last expects one
      // more from rank 0.
      std::vector<std::size_t> sends(static_cast<size_t>(p), base), recvs(sends);
      if (r == p - 1) recvs[0] = base + 1;
      std::vector<float> out(base * static_cast<size_t>(p), static_cast<float>(r + 1));
      std::vector<float> in(recvs[0] + base * static_cast<size_t>(p - 1), -1.0f);
      comm.alltoallv<float>(out, sends, in, recvs, algorithm);
      size_t at = 0;
      for (int q = 0; q < p; ++q) {
        for (size_t i = 0; i < recvs[static_cast<size_t>(q)]; ++i) wrong = wrong || in[at++] != static_cast<float>(q + 1);
      }
    } else {
      std::fprintf(stderr, "unknown op %s\n", op.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", r, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const char* verdict = wrong ? "WRONG NUMBER" : "right numbers";
  if (argc == 5) {
    if (std::FILE* f = std::fopen(fmt::format("{}/rank-{}", argv[4], r).c_str(), "w")) {
      std::fprintf(f, "%s\n", verdict);
      std::fclose(f);
    }
  }
  std::printf("rank %d: the call returned: %s\n", r, verdict);
  std::fflush(stdout);
  comm.barrier();
  return wrong ? 3 : 0;
}
