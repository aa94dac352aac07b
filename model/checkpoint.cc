#include "model/checkpoint.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <fstream>
#include <sstream>

#include "runtime/atomic_file.h"

namespace gnnrt::model {
namespace {

constexpr const char* kFormat = "gnnrt-checkpoint-1";

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

  try {
    write_file_atomically(path, bytes);
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("checkpoint {}", e.what()));
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
