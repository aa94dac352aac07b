// What the launcher reads from mpirun's own words (Open MPI 4.1's reports,
// quoted as it prints them) and the command lines it prints for a user to
// rerun by hand.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "launch/mpirun_command.h"
#include "launch/supervisor.h"

namespace gnnrt::launch {
namespace {

// mpirun's report when ranks die on signals (one line each, in its order).
constexpr const char* kSignals =
    "--------------------------------------------------------------------------\n"
    "mpirun noticed that process rank 3 with PID 41121 on node vm exited on signal 9 (Killed).\n"
    "--------------------------------------------------------------------------\n"
    "mpirun noticed that process rank 1 with PID 41119 on node vm exited on signal 15 (Terminated).\n";

// mpirun's report when a rank exits with a non-zero status.
constexpr const char* kExitCode =
    "--------------------------------------------------------------------------\n"
    "Primary job  terminated normally, but 1 process returned\n"
    "a non-zero exit code. Per user-direction, the job has been aborted.\n"
    "--------------------------------------------------------------------------\n"
    "--------------------------------------------------------------------------\n"
    "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
    "the job to be terminated. The first process to do so was:\n"
    "\n"
    "  Process name: [[52346,1],1]\n"
    "  Exit code:    2\n"
    "--------------------------------------------------------------------------\n";

TEST(MpirunWords, SignalsAreReadWithTheirRanksInMpirunsOrder) {
  const auto signals = mpirun_signals(std::string("rank 0 logged a line\n") + kSignals);
  ASSERT_EQ(signals.size(), 2u);
  EXPECT_EQ(signals[0], (std::pair<int, std::string>{3, "9 (Killed)"}));
  EXPECT_EQ(signals[1], (std::pair<int, std::string>{1, "15 (Terminated)"}));
}

TEST(MpirunWords, AnUnreadableRankIsMinusOneAndOtherLinesAreNotSignals) {
  const auto signals = mpirun_signals(
      "mpirun noticed that process rank ? with PID 7 on node vm exited on signal 6 (Aborted).\n"
      "process rank 2 with PID 9 on node vm exited normally\n");
  ASSERT_EQ(signals.size(), 1u);
  EXPECT_EQ(signals[0], (std::pair<int, std::string>{-1, "6 (Aborted)"}));
  EXPECT_TRUE(mpirun_signals(kExitCode).empty());
  EXPECT_TRUE(mpirun_signals("").empty());
}

TEST(MpirunWords, TheVerdictNamesTheRanksSignalElseTheFirstSignalElseTheExitCode) {
  const auto signals = mpirun_signals(kSignals);
  EXPECT_EQ(mpirun_verdict(kSignals, signals, 1), "signal 15 (Terminated)");
  EXPECT_EQ(mpirun_verdict(kSignals, signals, 3), "signal 9 (Killed)");
  EXPECT_EQ(mpirun_verdict(kSignals, signals, 0), "signal 9 (Killed) on rank 3");
  EXPECT_EQ(mpirun_verdict(kSignals, signals, -1), "signal 9 (Killed) on rank 3");
  EXPECT_EQ(mpirun_verdict(kExitCode, {}, -1), "exit code 2");
  EXPECT_EQ(mpirun_verdict("mpirun: nothing to say\n", {}, 0), "");
}

// The shell reads join_command's line back into the same arguments.
TEST(MpirunWords, AJoinedCommandIsReadBackByTheShellAsTheSameArguments) {
  const std::vector<std::string> argv = {"gnnrt", "train", "job file.pbtxt", "--set", "name='it''s'", "a\"b",
                                         "$HOME", "`id`", "semi;colon", "", "back\\slash", "tab\there"};
  const std::string line = "printf '%s\\n' " + join_command(argv);
  FILE* shell = popen(line.c_str(), "r");
  ASSERT_NE(shell, nullptr);
  std::string out;
  std::array<char, 256> buffer{};
  while (fgets(buffer.data(), buffer.size(), shell) != nullptr) out += buffer.data();
  ASSERT_EQ(pclose(shell), 0);
  std::string expected;
  for (const auto& a : argv) expected += a + "\n";
  EXPECT_EQ(out, expected);
  EXPECT_EQ(join_command({"mpirun", "-np", "4", "gnnrt"}), "mpirun -np 4 gnnrt");  // plain words stay bare
}

}  // namespace
}  // namespace gnnrt::launch
