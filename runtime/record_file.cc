#include "runtime/record_file.h"

#include "runtime/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gnnrt {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const char* what, int err) {
  throw std::runtime_error(fmt::format("{}: {}: {}", path.string(), what, std::strerror(err)));
}

// The whole file (records files are small: one line per epoch or event).
std::string read_all(int fd, const std::filesystem::path& path) {
  std::string bytes;
  char buffer[1 << 16];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof buffer, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, "cannot read", errno);
    if (n == 0) return bytes;
    bytes.append(buffer, static_cast<size_t>(n));
    at += n;
  }
}

}  // namespace

RecordFile::RecordFile(const std::filesystem::path& path, Mode mode) : path_(path) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  open(mode == Mode::kTruncate ? O_TRUNC : 0);
  if (mode == Mode::kTruncate) return;
  const std::string bytes = read_all(fd_, path);
  const size_t end = bytes.rfind('\n') == std::string::npos ? 0 : bytes.rfind('\n') + 1;
  if (end < bytes.size()) {
    torn_ = static_cast<int64_t>(bytes.size() - end);
    if (::ftruncate(fd_, static_cast<off_t>(end)) != 0) {
      const int err = errno;
      ::close(fd_);
      fd_ = -1;
      fail(path, "cannot cut back its torn last record", err);
    }
  }
  std::string kept;
  for (size_t at = 0; at < end;) {
    const size_t eol = bytes.find('\n', at);
    const std::string_view line = std::string_view(bytes).substr(at, eol - at);
    if (const auto record = nlohmann::json::parse(line, nullptr, false); !record.is_discarded() && record.is_object()) {
      kept.append(line);
      kept += '\n';
    } else {
      ++dropped_;
    }
    at = eol + 1;
  }
  if (dropped_ == 0) return;
  ::close(fd_);
  fd_ = -1;
  write_file_atomically(path, kept);
  open(0);
}

void RecordFile::open(int flags) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | flags, 0644);
  if (fd_ < 0) fail(path_, "cannot open", errno);
}

RecordFile::~RecordFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordFile::append(std::string_view line) {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail(path_, "cannot write a record", errno);
  std::string record(line);
  record += '\n';
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || n == 0) {
      const int err = n < 0 ? errno : ENOSPC;
      // Nothing of a record that is not whole stays.
      if (done > 0 && ::ftruncate(fd_, st.st_size) != 0) {
        fail(path_, "cannot cut back a partly written record", errno);
      }
      fail(path_, "cannot write a record", err);
    }
    done += static_cast<size_t>(n);
  }
}

void RecordFile::cut_from(const std::function<bool(std::string_view record)>& drop_from) {
  const std::string bytes = read_all(fd_, path_);
  for (size_t at = 0; at < bytes.size();) {
    const size_t eol = bytes.find('\n', at);
    const size_t next = eol == std::string::npos ? bytes.size() : eol + 1;
    if (drop_from(std::string_view(bytes).substr(at, next - at - (eol == std::string::npos ? 0 : 1)))) {
      if (::ftruncate(fd_, static_cast<off_t>(at)) != 0) fail(path_, "cannot cut back", errno);
      return;
    }
    at = next;
  }
}

}  // namespace gnnrt
