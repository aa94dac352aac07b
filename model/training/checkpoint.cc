#include "model/training/checkpoint.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "runtime/atomic_file.h"

namespace gnnrt::model {
namespace {

// File: [8-byte magic][payload size, u64 LE][xxh64 of payload, u64 LE][payload]
// with the payload a serialised CheckpointState. The size tells a truncated
// file from a corrupt one; the checksum catches the rest.
constexpr char kMagic[8] = {'g', 'n', 'n', 'r', 't', 'c', 'k', '2'};
constexpr size_t kHeader = 24;
constexpr const char* kPrefix = "ckpt-";
constexpr const char* kSuffix = ".ckpt";
constexpr const char* kLegacy = "latest.ckpt";  // one file, before the newest K were kept

// The epoch of a file named ckpt-<digits>.ckpt; -1 for any other name.
int64_t epoch_of(const std::string& name) {
  const size_t p = std::char_traits<char>::length(kPrefix), s = std::char_traits<char>::length(kSuffix);
  if (name.size() <= p + s || name.compare(0, p, kPrefix) != 0 || name.compare(name.size() - s, s, kSuffix) != 0) {
    return -1;
  }
  const std::string digits = name.substr(p, name.size() - p - s);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) return -1;
  return std::stoll(digits);
}

// The folder's entries named like checkpoints, newest first (the legacy
// file last), whatever they are: a directory of that name is one that does
// not load.
std::vector<std::filesystem::path> checkpoints_of(const std::filesystem::path& dir) {
  std::vector<std::pair<int64_t, std::filesystem::path>> found;
  std::error_code ec;
  // A folder that is not there holds none; one that cannot be listed (not
  // a folder, no permission) is an error, not "none".
  const auto type = std::filesystem::status(dir, ec).type();
  if (type == std::filesystem::file_type::not_found) return {};
  if (type != std::filesystem::file_type::directory) {
    throw CheckpointError(fmt::format("checkpoint.dir {}: {}", dir.string(),
                                      ec ? ec.message() : std::string("not a folder")));
  }
  std::filesystem::directory_iterator entries(dir, ec);
  if (ec) throw CheckpointError(fmt::format("checkpoint.dir {}: cannot list it: {}", dir.string(), ec.message()));
  for (const auto& entry : entries) {
    const std::string name = entry.path().filename().string();
    const int64_t epoch = name == kLegacy ? -1 : epoch_of(name);
    if (epoch >= 0 || name == kLegacy) found.emplace_back(epoch, entry.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::filesystem::path> paths;
  for (auto& [epoch, path] : found) paths.push_back(std::move(path));
  return paths;
}

// Renames an entry that is not a checkpoint out of the way (never removes
// it): FILE.corrupt, or FILE.corrupt-2, -3, ... when that name is taken.
// Returns the new name, or the system's reason it could not be moved.
std::string set_aside(const std::filesystem::path& path) {
  std::error_code ec;
  for (int k = 1; k < 1000; ++k) {
    const std::filesystem::path to = path.string() + (k == 1 ? ".corrupt" : fmt::format(".corrupt-{}", k));
    if (std::filesystem::symlink_status(to, ec).type() != std::filesystem::file_type::not_found) continue;
    std::filesystem::rename(path, to, ec);
    if (ec) return fmt::format("could not be set aside: {}", ec.message());
    return fmt::format("set aside as {}", to.filename().string());
  }
  return "could not be set aside: 999 earlier copies are there";
}

uint64_t read_u64(const char* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const proto::CheckpointState& state,
                     double spread_seconds) {
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
    write_file_atomically(path, bytes, spread_seconds);
  } catch (const std::exception& e) {
    // Not the input's fault (a full disk, say): a plain runtime error (exit 1).
    throw std::runtime_error(fmt::format("checkpoint {}", e.what()));
  }
}

proto::CheckpointState load_checkpoint(const std::filesystem::path& path) {
  const std::string where = fmt::format("checkpoint {}", path.string());
  std::string bytes;
  try {
    bytes = read_whole_file(path);
  } catch (const std::runtime_error& e) {
    throw CheckpointError("checkpoint " + std::string(e.what()));  // a directory, unreadable, ...
  }
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

std::filesystem::path checkpoint_path(const std::filesystem::path& dir, int64_t step) {
  return dir / fmt::format("{}{:08}{}", kPrefix, step, kSuffix);
}

std::vector<std::string> save_to_checkpoint_dir(const std::filesystem::path& dir, const proto::CheckpointState& state,
                                                int keep) {
  double spread = 0;
  if (const char* slow = std::getenv("GNNRT_TEST_SLOW_CHECKPOINT"); slow != nullptr && *slow != '\0') {
    spread = std::atof(slow);
  }
  const std::filesystem::path path = checkpoint_path(dir, state.step());
  std::error_code ec;
  std::vector<std::string> notes;
  const auto type = std::filesystem::symlink_status(path, ec).type();
  if (type != std::filesystem::file_type::not_found && type != std::filesystem::file_type::regular) {
    // Something else holds the name (a directory made by hand): it moves
    // aside, so the checkpoint can be written.
    notes.push_back(fmt::format("checkpoint {}: the name was taken by something that is not a file ({})",
                                path.string(), set_aside(path)));
  }
  save_checkpoint(path, state, spread);
  // The newest `keep` stay; older checkpoint files, and the temporary files
  // of writers killed mid-write (rank 0 is the folder's only writer), go.
  // Only regular files are removed: anything else is the user's.
  const auto regular = [&](const std::filesystem::path& p) {
    return std::filesystem::symlink_status(p, ec).type() == std::filesystem::file_type::regular;
  };
  int kept = 0;
  for (const auto& p : checkpoints_of(dir)) {
    if (!regular(p)) continue;
    if (++kept > std::max(keep, 1)) std::filesystem::remove(p, ec);
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find(std::string(kSuffix) + ".tmp.") != std::string::npos && regular(entry.path())) {
      std::filesystem::remove(entry.path(), ec);
    }
  }
  return notes;
}

std::optional<LoadedCheckpoint> load_newest_checkpoint(const std::filesystem::path& dir, bool set_aside_bad) {
  const auto paths = checkpoints_of(dir);
  if (paths.empty()) return std::nullopt;
  LoadedCheckpoint loaded;
  std::vector<std::filesystem::path> bad;
  for (const auto& path : paths) {
    try {
      loaded.state = load_checkpoint(path);
    } catch (const CheckpointError& e) {
      bad.push_back(path);
      loaded.skipped.push_back(e.what());
      continue;
    }
    loaded.path = path;
    if (!set_aside_bad) return loaded;
    // The newer entries that did not load are set aside (so that the newest
    // K kept are ones that load).
    for (size_t i = 0; i < bad.size(); ++i) loaded.skipped[i] += fmt::format(" ({})", set_aside(bad[i]));
    return loaded;
  }
  // None loads: an error, and every entry left as it is.
  std::string all;
  for (const auto& why : loaded.skipped) all += (all.empty() ? "" : "; ") + why;
  throw CheckpointError(fmt::format("no checkpoint in {} loads: {}", dir.string(), all));
}

}  // namespace gnnrt::model
