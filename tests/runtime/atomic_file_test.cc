// write_file_atomically: the new bytes or the old ones, never a partial file
// or a temporary one left behind when the write fails.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/atomic_file.h"

namespace gnnrt {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(AtomicFile, ReplacesTheFileAndLeavesNothingElse) {
  const fs::path dir = fs::path(::testing::TempDir()) / "gnnrt_atomic_replace";
  fs::remove_all(dir);
  write_file_atomically(dir / "f", "old");
  write_file_atomically(dir / "f", std::string(100000, 'n'), 0.01);  // in pieces
  EXPECT_EQ(read(dir / "f"), std::string(100000, 'n'));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

// The rename fails (a folder stands at the path): an error naming the path,
// and the temporary file is gone.
TEST(AtomicFile, AFailedWriteRemovesItsTemporaryFile) {
  const fs::path dir = fs::path(::testing::TempDir()) / "gnnrt_atomic_fail";
  fs::remove_all(dir);
  fs::create_directories(dir / "f" / "inside");
  EXPECT_THAT([&] { write_file_atomically(dir / "f", "bytes"); },
              ::testing::ThrowsMessage<std::runtime_error>(
                  ::testing::AllOf(::testing::HasSubstr((dir / "f").string()),
                                   ::testing::HasSubstr("cannot rename into place"))));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"f"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gnnrt
