// Files of records, one JSON object per line (a run's events.jsonl, the
// --metrics file), that hold whole records only. A record is appended with
// one write(2) of its line and newline to a descriptor opened O_APPEND; a
// write that fails or falls short (a full disk) is cut back to the size the
// file had, so the file holds the whole line or nothing of it. A process
// killed mid-record leaves the whole line in practice (a record is one
// small write); what a killed process or a stopped machine leaves torn
// (bytes after the last newline) is cut back by the next open. Never a
// temporary file, but for the one-off replacement of a file an older
// writer left with a broken line inside. One writer per file; not
// thread-safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>

namespace gnnrt {

class RecordFile {
 public:
  enum class Mode { kAppend, kTruncate };
  // Opens (creates) `path`, and its folder; with kAppend cuts a torn tail
  // back (torn_bytes() says how much) and drops the earlier lines that are
  // not records, JSON objects (left by an older writer), the file replaced
  // atomically (dropped_lines()). Throws std::runtime_error naming the
  // file and the system's reason.
  RecordFile(const std::filesystem::path& path, Mode mode);
  ~RecordFile();
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  // Appends `line` (holding no newline) and a newline. On failure throws
  // std::runtime_error naming the file and the system's reason ("No space
  // left on device"), with the file as it was before the call.
  void append(std::string_view line);

  // Cuts the file back to the records before the first one for which
  // `drop_from` holds (a resumed run's records past its checkpoint):
  // a truncation in place, so it needs no free space.
  void cut_from(const std::function<bool(std::string_view record)>& drop_from);

  const std::filesystem::path& path() const { return path_; }
  int64_t torn_bytes() const { return torn_; }
  int64_t dropped_lines() const { return dropped_; }

 private:
  void open(int flags);

  std::filesystem::path path_;
  int fd_ = -1;
  int64_t torn_ = 0, dropped_ = 0;
};

}  // namespace gnnrt
