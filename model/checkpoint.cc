#include "model/checkpoint.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "runtime/atomic_file.h"

namespace gnnrt::model {
namespace {

// File: [8-byte magic][payload size, u64 LE][xxh64 of payload, u64 LE][payload]
// with the payload a serialised CheckpointState. The size tells a truncated
// file from a corrupt one; the checksum catches the rest.
constexpr char kMagic[8] = {'g', 'n', 'n', 'r', 't', 'c', 'k', '2'};
constexpr size_t kHeader = 24;

uint64_t read_u64(const char* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const proto::CheckpointState& state) {
  std::string payload;
  if (!state.SerializeToString(&payload)) {
    throw CheckpointError(fmt::format("checkpoint {}: cannot serialise", path.string()));
  }
  std::string bytes(kHeader, '\0');
  std::memcpy(bytes.data(), kMagic, 8);
  const uint64_t size = payload.size(), sum = XXH64(payload.data(), payload.size(), 0);
  std::memcpy(bytes.data() + 8, &size, 8);
  std::memcpy(bytes.data() + 16, &sum, 8);
  bytes += payload;
  try {
    write_file_atomically(path, bytes);
  } catch (const std::exception& e) {
    throw CheckpointError(fmt::format("checkpoint {}", e.what()));
  }
}

proto::CheckpointState load_checkpoint(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(fmt::format("checkpoint {}: cannot open", path.string()));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string where = fmt::format("checkpoint {}", path.string());
  if (bytes.empty()) throw CheckpointError(where + ": the file is empty (0 bytes)");
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kMagic, 8) != 0) {
    throw CheckpointError(where + ": not a gnnrt checkpoint (bad magic bytes)");
  }
  if (bytes.size() < kHeader) {
    throw CheckpointError(fmt::format("{}: truncated: {} bytes, shorter than the {}-byte header",
                                      where, bytes.size(), kHeader));
  }
  const uint64_t size = read_u64(bytes.data() + 8);
  const uint64_t stored = read_u64(bytes.data() + 16);
  if (bytes.size() - kHeader != size) {
    throw CheckpointError(fmt::format("{}: truncated: {} bytes of state, the header says {}", where,
                                      bytes.size() - kHeader, size));
  }
  const uint64_t sum = XXH64(bytes.data() + kHeader, size, 0);
  if (sum != stored) {
    throw CheckpointError(fmt::format(
        "{}: checksum mismatch (stored {:016x}, computed {:016x}): the file is corrupt", where,
        stored, sum));
  }
  proto::CheckpointState state;
  if (!state.ParseFromArray(bytes.data() + kHeader, static_cast<int>(size))) {
    throw CheckpointError(where + ": the state does not parse (written by another version?)");
  }
  return state;
}

}  // namespace gnnrt::model
