#include "runtime/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

namespace gnnrt {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const char* what, int err) {
  throw std::runtime_error(fmt::format("{}: {}: {}", path.string(), what, std::strerror(err)));
}

[[noreturn]] void fail_text(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", path.string(), what));
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, double spread_seconds) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  std::filesystem::create_directories(dir);
  const std::filesystem::path tmp = path.string() + fmt::format(".tmp.{}", getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, "cannot create", errno);
  // Any failure from here on: the partial temporary file goes too.
  const auto give_up = [&](const char* what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(tmp, what, err);
  };
  const size_t piece = spread_seconds > 0 ? std::max<size_t>(1, (bytes.size() + 15) / 16) : bytes.size();
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, std::min(piece, bytes.size() - done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) give_up("cannot write", errno);
    done += static_cast<size_t>(n);
    if (spread_seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(spread_seconds / 16));
  }
  if (::fsync(fd) != 0) give_up("cannot fsync", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(tmp, "cannot close", err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, "cannot rename into place", err);
  }
  // The rename itself must survive a crash: sync the directory entry.
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_whole_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto type = std::filesystem::status(path, ec).type();
  if (type == std::filesystem::file_type::directory) fail_text(path, "a directory, not a file");
  if (!ec && type != std::filesystem::file_type::regular) fail_text(path, "not a regular file");
  std::string bytes;
  try {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path, "cannot open", errno);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) fail(path, "cannot read", errno);
  } catch (const std::ios_base::failure& e) {  // libstdc++ throws on a read error whatever the stream's mask
    fail_text(path, "cannot read: " + e.code().message());
  }
  return bytes;
}

}  // namespace gnnrt
