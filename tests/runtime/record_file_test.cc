// RecordFile: the whole record or nothing of it, also when a write falls
// short (a file-size limit stands in for a full disk: the kernel writes up
// to the limit and returns the short count, as a full disk does), and a
// torn tail cut back on open.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/record_file.h"

namespace gnnrt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

fs::path fresh(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("gnnrt_records_" + name);
  fs::remove_all(dir);
  return dir / "events.jsonl";
}

// The process may not grow a file past `bytes` while this lives (SIGXFSZ
// ignored: the write returns short, or fails with EFBIG).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) : old_signal_(std::signal(SIGXFSZ, SIG_IGN)) {
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_signal_);
  }

 private:
  rlimit old_{};
  void (*old_signal_)(int);
};

TEST(RecordFile, AppendsWholeLines) {
  const fs::path path = fresh("append");
  {
    RecordFile f(path, RecordFile::Mode::kTruncate);
    f.append(R"({"a":1})");
    f.append(R"({"b":2})");
  }
  RecordFile again(path, RecordFile::Mode::kAppend);
  EXPECT_EQ(again.torn_bytes(), 0);
  again.append(R"({"c":3})");
  EXPECT_EQ(read(path), "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
  RecordFile(path, RecordFile::Mode::kTruncate);
  EXPECT_EQ(read(path), "");
}

TEST(RecordFile, AShortWriteLeavesNothingOfTheRecord) {
  const fs::path path = fresh("short");
  RecordFile f(path, RecordFile::Mode::kTruncate);
  f.append(R"({"event":"start"})");
  const std::string before = read(path);
  {
    const FileSizeLimit limit(before.size() + 10);  // 10 bytes of the next record fit
    EXPECT_THAT([&] { f.append(R"({"event":"failure","reason":"a long reason"})"); },
                testing::ThrowsMessage<std::runtime_error>(HasSubstr(path.string() + ": cannot write a record")));
    EXPECT_EQ(read(path), before);
  }
  f.append(R"({"event":"finish"})");
  EXPECT_EQ(read(path), before + "{\"event\":\"finish\"}\n");
}

TEST(RecordFile, ATornTailIsCutBackOnOpen) {
  const fs::path path = fresh("torn");
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "{\"a\":1}\n{\"b\":2}\n{\"event\": \"rest";
  RecordFile f(path, RecordFile::Mode::kAppend);
  EXPECT_EQ(f.torn_bytes(), 15);
  f.append(R"({"c":3})");
  EXPECT_EQ(read(path), "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
  // A file of one torn record only.
  std::ofstream(path, std::ios::trunc) << "{\"a\"";
  EXPECT_EQ(RecordFile(path, RecordFile::Mode::kAppend).torn_bytes(), 4);
  EXPECT_EQ(read(path), "");
}

// A broken line inside, left by an older writer (two records run
// together): dropped when the file is opened to append, the file replaced
// whole, nothing else left beside it.
TEST(RecordFile, LinesThatAreNotRecordsAreDroppedOnOpen) {
  const fs::path path = fresh("broken");
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "{\"a\":1}\n{\"event\":\"rest{\"b\":2}\n[3]\n{\"c\":3}\n";
  RecordFile f(path, RecordFile::Mode::kAppend);
  EXPECT_EQ(f.dropped_lines(), 2);
  f.append(R"({"d":4})");
  EXPECT_EQ(read(path), "{\"a\":1}\n{\"c\":3}\n{\"d\":4}\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(path.parent_path()), fs::directory_iterator()), 1);
}

TEST(RecordFile, CutsFromTheFirstRecordDroppedInPlace) {
  const fs::path path = fresh("cut");
  {
    RecordFile f(path, RecordFile::Mode::kTruncate);
    for (int e = 1; e <= 5; ++e) f.append("{\"epoch\":" + std::to_string(e) + "}");
  }
  RecordFile f(path, RecordFile::Mode::kAppend);
  f.cut_from([](std::string_view line) { return line == "{\"epoch\":4}"; });
  EXPECT_EQ(read(path), "{\"epoch\":1}\n{\"epoch\":2}\n{\"epoch\":3}\n");
  f.cut_from([](std::string_view) { return false; });
  EXPECT_EQ(read(path), "{\"epoch\":1}\n{\"epoch\":2}\n{\"epoch\":3}\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(path.parent_path()), fs::directory_iterator()), 1);
}

TEST(RecordFile, ErrorsNameTheFile) {
  const fs::path path = fresh("errors");
  fs::create_directories(path);  // a directory where the file should be
  EXPECT_THAT([&] { RecordFile(path, RecordFile::Mode::kAppend); },
              testing::ThrowsMessage<std::runtime_error>(HasSubstr(path.string() + ": cannot open")));
}

}  // namespace
}  // namespace gnnrt
