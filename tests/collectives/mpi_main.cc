// main() of the MPI test binaries: MPI starts before GoogleTest and ends
// after it. Rank 0 prints the usual report; other ranks print only their
// failures, each line prefixed with the rank, so a failure on any rank shows
// up in ctest's output. Every rank must run the same tests in the same order
// (tests call collectives), so tests use EXPECT_*, not ASSERT_*, around them.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "collectives/environment.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
#ifdef GNNRT_TEST_THREAD_MULTIPLE
  // The sampled tests: the sampler's exchanges on a thread of their own.
  gnnrt::collectives::Environment mpi(&argc, &argv, gnnrt::collectives::Threads::kMultiple);
#else
  gnnrt::collectives::Environment mpi(&argc, &argv);
#endif
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(mpi.world_rank()));
  }
  const int failed = RUN_ALL_TESTS();
  // Every rank's verdict decides the exit status of every rank.
  int any = failed != 0;
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  // Every test skipped (a dataset that is not there): exit 77, which ctest
  // reports as skipped (SKIP_RETURN_CODE), not as passed.
  const auto& unit = *::testing::UnitTest::GetInstance();
  int all_skipped = unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count();
  MPI_Allreduce(MPI_IN_PLACE, &all_skipped, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!any && all_skipped) return 77;
  return any;
}
