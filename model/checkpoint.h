// Checkpoints: everything needed to continue training exactly — parameters,
// optimizer state, best-validation parameters, epoch, step and seed (the
// RNGs are counter-based, so seed and step are their whole state) and the
// job. Written atomically (temporary file, fsync, rename, fsync of the
// directory), so a process killed at any moment leaves the previous
// checkpoint intact; loaded with a checksum check. Errors: CheckpointError
// naming the file and the problem.
//
// A checkpoint folder holds the newest K checkpoints, one file per epoch
// (`ckpt-00000012.ckpt`); resuming takes the newest that loads, and a
// corrupt or truncated newer one is set aside (renamed `*.corrupt`) with a
// warning naming both files. An older gnnrt's `latest.ckpt` is read when
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

// dir/ckpt-<epoch, 8 digits>.ckpt
std::filesystem::path checkpoint_path(const std::filesystem::path& dir, int64_t epoch);

// Writes the state into `dir` as ckpt-<number>.ckpt (number: the state's
// epoch, or its step for batch jobs, whose checkpoints may fall mid-epoch),
// then removes all but the newest `keep` (>= 1) checkpoints and any
// temporary file a killed writer left. Reads GNNRT_TEST_SLOW_CHECKPOINT
// (seconds) for save_checkpoint.
void save_to_checkpoint_dir(const std::filesystem::path& dir, const proto::CheckpointState& state,
                            int keep, bool by_step = false);

struct LoadedCheckpoint {
  proto::CheckpointState state;
  std::filesystem::path path;
  // "FILE: why", for each newer file that did not load (set aside).
  std::vector<std::string> skipped;
};

// The newest checkpoint of `dir` that loads; nullopt when the folder holds
// none. Newer files that fail to load are renamed to `<file>.corrupt` and
// listed in `skipped` (each also a warning naming it and the file used).
// Throws CheckpointError naming every file when none loads. With
// `set_aside` false it only looks: no file is renamed, nothing is logged.
std::optional<LoadedCheckpoint> load_newest_checkpoint(const std::filesystem::path& dir, bool set_aside = true);

}  // namespace gnnrt::model
