// Checkpoints: everything needed to continue training exactly — parameters,
// optimizer state, best-validation parameters, epoch, step and seed (the
// RNGs are counter-based, so seed and step are their whole state) and the
// job. Written atomically (temporary file, fsync, rename, fsync of the
// directory), so a process killed at any moment leaves the previous
// checkpoint intact; loaded with a checksum check. Errors: CheckpointError
// naming the file and the problem.
#pragma once

#include <filesystem>
#include <stdexcept>

#include "model/checkpoint.pb.h"

namespace gnnrt::model {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void save_checkpoint(const std::filesystem::path& path, const proto::CheckpointState& state);
proto::CheckpointState load_checkpoint(const std::filesystem::path& path);

}  // namespace gnnrt::model
