// The checkpoints of a run on one rank or many (model/training/checkpoint.h holds
// the file format): rank 0 reads the newest checkpoint that loads and sends
// it to every rank, so the ranks need not share a file system and all
// resume alike; rank 0 writes, since every rank holds the same state. Each
// step that can fail on one rank ends in an agreed verdict (an error on
// every rank, model/training/distributed.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/checkpoint.pb.h"
#include "model/job.pb.h"
#include "model/training/options.h"
#include "runtime/core.h"
#include "runtime/record_file.h"

namespace gnnrt::collectives {
class Communicator;
}

namespace gnnrt::model {

// A line for the user beyond this rank's log (under `gnnrt launch`: the
// launcher's console and events.jsonl); level "warning" or "info".
using Notify = std::function<void(const std::string& level, const std::string& text)>;

class Checkpointer {
 public:
  // `notify` (may be empty) hears, on rank 0, each entry set aside and a
  // resume that finds no checkpoint.
  Checkpointer(const proto::Job& job, std::shared_ptr<collectives::Communicator> comm,
               Notify notify = {});

  struct Loaded {
    std::filesystem::path path;
    proto::CheckpointState state;
  };

  // The newest checkpoint of checkpoint.dir on every rank (none when the
  // job has no dir, resume is off, or there is none: "no checkpoint found
  // in DIR, starting at epoch 1"), checked against the job: the same seed
  // and the same `sections` (top-level job fields, e.g. "model",
  // "batching"); its tensors put on the core. Newer entries that do not
  // load are set aside with a warning naming each (checkpoint.h).
  std::optional<Loaded> resume(runtime::Core& core, const std::vector<std::string>& sections) const;

  // Rank 0 writes the core's tensors `names` with the epochs completed and
  // the global step (atomically; the newest checkpoint.keep stay); `more`
  // sets the caller's own fields of the state (the step loop's best epoch
  // where the source validates). An agreed step: an error on every rank when rank 0's write fails.
  void write(const runtime::Core& core, const std::set<std::string>& names, int64_t epoch, int64_t step,
             const std::function<void(proto::CheckpointState&)>& more = {}) const;

  bool enabled() const { return !job_.checkpoint().dir().empty(); }

 private:
  bool many() const;
  void say(const std::string& level, const std::string& text) const;

  const proto::Job& job_;
  std::shared_ptr<collectives::Communicator> comm_;
  Notify notify_;
};

// --metrics: JSON lines, one per epoch, written by rank 0 as whole records
// (runtime/record_file.h: a full disk or a crash leaves the whole line or
// nothing). After a resume the records of epochs past the checkpoint
// (written by the run that died) are cut first, so every epoch has one.
class MetricsSink {
 public:
  MetricsSink() = default;
  MetricsSink(const std::filesystem::path& path, int64_t resumed_epoch);
  // Epoch m's record, one JSON line (docs/file-formats.md): the fields
  // every batch source has (epoch, loss, lr, its times, compiles and cache
  // hits so far, the ranks), then the source's own in `extra`. Throws
  // std::runtime_error "cannot write --metrics FILE: why", the file as it was.
  void write(const EpochMetrics& m, const runtime::Counters& counters, int ranks, const nlohmann::json& extra);
  bool open() const { return file_ != nullptr; }

 private:
  std::unique_ptr<RecordFile> file_;
};

}  // namespace gnnrt::model
