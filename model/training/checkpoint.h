// Checkpoints: everything needed to continue training exactly — parameters,
// optimizer state, best-validation parameters, epoch, step and seed (the
// RNGs are counter-based, so seed and step are their whole state) and the
// job. Written atomically (temporary file, fsync, rename, fsync of the
// directory), so a process killed at any moment leaves the previous
// checkpoint intact; loaded with a checksum check. Errors: CheckpointError
// naming the file and the problem.
//
// A checkpoint folder holds the newest K checkpoints, one file per epoch
// (`ckpt-00000012.ckpt`); resuming takes the newest that loads, and any
// newer entry of that name that does not load (corrupt, truncated, a
// directory) is set aside (renamed `*.corrupt`, never removed). An older gnnrt's `latest.ckpt` is read when
// nothing newer is there.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/checkpoint.pb.h"

namespace gnnrt::model {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One file. `spread_seconds` > 0 spreads the write over that long (a test
// switch: a process killed while it writes, GNNRT_TEST_SLOW_CHECKPOINT).
void save_checkpoint(const std::filesystem::path& path, const proto::CheckpointState& state,
                     double spread_seconds = 0);
proto::CheckpointState load_checkpoint(const std::filesystem::path& path);

// dir/ckpt-<step, 8 digits>.ckpt
std::filesystem::path checkpoint_path(const std::filesystem::path& dir, int64_t step);

// Writes the state into `dir` as ckpt-<step>.ckpt (the optimizer steps
// taken: checkpoints may fall mid-epoch; a full-graph job's step is its
// epoch),
// then removes all but the newest `keep` (>= 1) checkpoints and any
// temporary file a killed writer left (only regular files are removed). An
// entry of the checkpoint's name that is not a file is set aside first;
// returns a line for each such entry. Reads GNNRT_TEST_SLOW_CHECKPOINT
// (seconds) for save_checkpoint.
std::vector<std::string> save_to_checkpoint_dir(const std::filesystem::path& dir, const proto::CheckpointState& state,
                                                int keep);

struct LoadedCheckpoint {
  proto::CheckpointState state;
  std::filesystem::path path;
  // "ENTRY: why (set aside as NAME)", for each newer entry that did not load.
  std::vector<std::string> skipped;
};

// The newest checkpoint of `dir` that loads; nullopt when the folder holds
// none. Every newer entry named like a checkpoint that does not load (a
// truncated or corrupt file, a directory, an unreadable file) is renamed
// to `<entry>.corrupt` (`.corrupt-2`, ... when taken; never removed) and
// listed in `skipped`. Throws CheckpointError naming every entry when none
// loads. With `set_aside_bad` false it only looks: nothing is renamed.
std::optional<LoadedCheckpoint> load_newest_checkpoint(const std::filesystem::path& dir, bool set_aside_bad = true);

}  // namespace gnnrt::model
