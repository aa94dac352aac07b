#include "model/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gnnrt::model {
namespace {

constexpr const char* kFormat = "gnnrt-checkpoint-1";

[[noreturn]] void fail_io(const std::filesystem::path& path, const char* what) {
  throw CheckpointError(fmt::format("checkpoint {}: {}: {}", path.string(), what, std::strerror(errno)));
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const proto::CheckpointState& state) {
  proto::CheckpointFile file;
  file.set_format(kFormat);
  if (!state.SerializeToString(file.mutable_state())) {
    throw CheckpointError(fmt::format("checkpoint {}: cannot serialise", path.string()));
  }
  file.set_xxh64(XXH64(file.state().data(), file.state().size(), 0));
  std::string bytes;
  file.SerializeToString(&bytes);

  const std::filesystem::path dir = path.parent_path().empty() ? "." : path.parent_path();
  std::filesystem::create_directories(dir);
  const std::filesystem::path tmp = path.string() + fmt::format(".tmp.{}", getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail_io(tmp, "cannot create");
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      fail_io(tmp, "cannot write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail_io(tmp, "cannot fsync");
  if (::close(fd) != 0) fail_io(tmp, "cannot close");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail_io(path, "cannot rename into place");
  // The rename itself must survive a crash: sync the directory entry.
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

proto::CheckpointState load_checkpoint(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(fmt::format("checkpoint {}: cannot open", path.string()));
  std::stringstream bytes;
  bytes << in.rdbuf();
  proto::CheckpointFile file;
  if (!file.ParseFromString(bytes.str()) || file.format() != kFormat) {
    throw CheckpointError(fmt::format("checkpoint {}: not a gnnrt checkpoint (or truncated)",
                                      path.string()));
  }
  const uint64_t sum = XXH64(file.state().data(), file.state().size(), 0);
  if (sum != file.xxh64()) {
    throw CheckpointError(fmt::format(
        "checkpoint {}: checksum mismatch (stored {:016x}, computed {:016x}): the file is corrupt",
        path.string(), file.xxh64(), sum));
  }
  proto::CheckpointState state;
  if (!state.ParseFromString(file.state())) {
    throw CheckpointError(fmt::format("checkpoint {}: corrupt state", path.string()));
  }
  return state;
}

}  // namespace gnnrt::model
