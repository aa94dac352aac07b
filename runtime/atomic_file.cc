#include "runtime/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace gnnrt {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const char* what, int err) {
  throw std::runtime_error(fmt::format("{}: {}: {}", path.string(), what, std::strerror(err)));
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  std::filesystem::create_directories(dir);
  const std::filesystem::path tmp = path.string() + fmt::format(".tmp.{}", getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail(tmp, "cannot create", errno);
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail(tmp, "cannot write", err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail(tmp, "cannot fsync", err);
  }
  if (::close(fd) != 0) fail(tmp, "cannot close", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(path, "cannot rename into place", errno);
  // The rename itself must survive a crash: sync the directory entry.
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace gnnrt
