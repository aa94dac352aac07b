#include "model/training/checkpointer.h"

#include <fmt/format.h>
#include <google/protobuf/text_format.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "model/job.h"
#include "model/training/checkpoint.h"
#include "model/training/distributed.h"

namespace gnnrt::model {
namespace {

std::string section_text(const proto::Job& job, const std::string& section) {
  const auto* field = job.GetDescriptor()->FindFieldByName(section);
  if (field == nullptr) throw std::logic_error("no job section " + section);
  std::string text;
  google::protobuf::TextFormat::PrintToString(job.GetReflection()->GetMessage(job, field), &text);
  return text;
}

}  // namespace

Checkpointer::Checkpointer(const proto::Job& job, std::shared_ptr<collectives::Communicator> comm,
                           Notify notify)
    : job_(job), comm_(std::move(comm)), notify_(std::move(notify)) {}

bool Checkpointer::many() const { return comm_ && comm_->size() > 1; }

void Checkpointer::say(const std::string& level, const std::string& text) const {
  if (level == "warning") {
    spdlog::warn("{}", text);
  } else {
    spdlog::info("{}", text);
  }
  if (notify_) notify_(level, text);
}

std::optional<Checkpointer::Loaded> Checkpointer::resume(runtime::Core& core,
                                                         const std::vector<std::string>& sections) const {
  if (!enabled() || !job_.checkpoint().resume()) return std::nullopt;
  const bool writer = !comm_ || comm_->rank() == 0;
  // Rank 0 sends the path, a NUL, then the serialized state.
  std::string bytes;
  bool found = false;
  agreed_step(comm_, "reading the checkpoint", [&] {
    if (!writer) return;
    const std::filesystem::path dir = job_.checkpoint().dir();
    const auto loaded = load_newest_checkpoint(dir);
    found = loaded.has_value();
    if (!found) {
      // A folder that is there but holds none (its checkpoints deleted)
      // is worth a warning; a new run's folder that does not exist yet is not.
      std::error_code ec;
      const bool exists = std::filesystem::exists(dir, ec);
      say(exists ? "warning" : "info", fmt::format("no checkpoint found in {}{}, starting at epoch 1", dir.string(),
                                                   exists ? "" : " (not there yet)"));
      return;
    }
    for (const std::string& why : loaded->skipped) {
      say("warning", fmt::format("{}; resuming from the previous checkpoint, {}", why, loaded->path.string()));
    }
    bytes = loaded->path.string() + '\0' + loaded->state.SerializeAsString();
  });
  if (many()) {
    std::vector<int64_t> head{found ? 1 : 0, static_cast<int64_t>(bytes.size())};
    comm_->broadcast<int64_t>(head, 0);
    found = head[0] != 0;
    bytes.resize(static_cast<size_t>(head[1]));
    std::vector<int32_t> words((bytes.size() + 3) / 4);
    if (writer && !bytes.empty()) std::memcpy(words.data(), bytes.data(), bytes.size());
    comm_->broadcast<int32_t>(words, 0);
    if (!bytes.empty()) std::memcpy(bytes.data(), words.data(), bytes.size());
  }
  if (!found) return std::nullopt;
  Loaded loaded;
  const size_t nul = bytes.find('\0');
  loaded.path = bytes.substr(0, nul);
  const std::string path = loaded.path.string();
  agreed_step(comm_, "resuming from the checkpoint", [&] {
    proto::CheckpointState& state = loaded.state;
    if (!state.ParseFromArray(bytes.data() + nul + 1, static_cast<int>(bytes.size() - nul - 1))) {
      throw CheckpointError(fmt::format("checkpoint {}: corrupt state", path));
    }
    if (state.seed() != job_.seed()) {
      throw CheckpointError(fmt::format("checkpoint {}: trained with seed {}, the job has seed {}", path,
                                        state.seed(), job_.seed()));
    }
    const proto::Job saved = parse_job(state.job(), path);
    for (const std::string& section : sections) {
      if (section_text(saved, section) != section_text(job_, section)) {
        throw CheckpointError(fmt::format("checkpoint {} was trained with another {}; remove it or set "
                                          "checkpoint.resume=false", path, section));
      }
    }
    for (const auto& t : state.tensors()) {
      DType dtype;
      try {
        dtype = parse_dtype(t.dtype());
      } catch (const TensorError& e) {
        throw CheckpointError(fmt::format("checkpoint {}: tensor '{}': {}", path, t.name(), e.what()));
      }
      Tensor a(dtype, {t.shape().begin(), t.shape().end()});
      if (a.bytes().size() != t.data().size()) {
        throw CheckpointError(fmt::format("checkpoint {}: tensor '{}' has {} bytes for shape {}", path, t.name(),
                                          t.data().size(), runtime::shape_string(a.shape())));
      }
      std::memcpy(a.bytes().data(), t.data().data(), t.data().size());
      core.memory().put(t.name(), std::move(a));
    }
  });
  return loaded;
}

void Checkpointer::write(const runtime::Core& core, const std::set<std::string>& names, int64_t epoch,
                         int64_t step, const std::function<void(proto::CheckpointState&)>& more) const {
  agreed_step(comm_, "writing the checkpoint", [&] {
    if (comm_ && comm_->rank() != 0) return;
    proto::CheckpointState state;
    state.set_job(to_text(job_));
    state.set_epoch(epoch);
    state.set_step(step);
    state.set_seed(job_.seed());
    state.set_best_epoch(-1);
    if (more) more(state);
    for (const std::string& name : names) {
      if (!core.memory().has(name)) continue;
      const Tensor& t = core.memory().at(name);
      auto* pt = state.add_tensors();
      pt->set_name(name);
      pt->set_dtype(std::string(gnnrt::to_string(t.dtype())));
      for (int64_t d : t.shape()) pt->add_shape(d);
      pt->set_data(reinterpret_cast<const char*>(t.bytes().data()), t.bytes().size());
    }
    for (const std::string& note : save_to_checkpoint_dir(job_.checkpoint().dir(), state, job_.checkpoint().keep())) {
      say("warning", note);
    }
  });
}

MetricsSink::MetricsSink(const std::filesystem::path& path, int64_t resumed_epoch) {
  try {
    file_ = std::make_unique<RecordFile>(path, resumed_epoch > 0 ? RecordFile::Mode::kAppend : RecordFile::Mode::kTruncate);
    if (file_->torn_bytes() > 0) {
      spdlog::warn("--metrics {}: cut back a torn last record ({} bytes without a newline)", path.string(),
                   file_->torn_bytes());
    }
    if (file_->dropped_lines() > 0) {
      spdlog::warn("--metrics {}: dropped {} line(s) that are not whole records (written by an older gnnrt)",
                   path.string(), file_->dropped_lines());
    }
    if (resumed_epoch > 0) {
      // The records are in epoch order: the first past the checkpoint and
      // every one after it go.
      file_->cut_from([resumed_epoch](std::string_view line) {
        const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        return record.is_object() && record.contains("epoch") && record["epoch"].is_number_integer() &&
               record["epoch"].get<int64_t>() > resumed_epoch;
      });
    }
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(fmt::format("cannot write --metrics {}", e.what()));
  }
  // An older gnnrt rewrote the file through this temporary one.
  std::error_code ec;
  if (std::filesystem::is_regular_file(path.string() + ".tmp", ec)) std::filesystem::remove(path.string() + ".tmp", ec);
}

void MetricsSink::write(const EpochMetrics& m, const runtime::Counters& c, int ranks, const nlohmann::json& extra) {
  if (!file_) return;
  nlohmann::json record{{"epoch", m.epoch},       {"loss", m.loss},         {"lr", m.lr},
                        {"ms", m.ms},             {"simulated_ms", m.simulated_ms},
                        {"compute_ms", m.compute_ms}, {"grad_ms", m.grad_ms}, {"wait_ms", m.wait_ms},
                        {"compiles", c.compiles}, {"cache_hits", c.cache_hits}, {"ranks", ranks}};
  record.update(extra);
  try {
    file_->append(record.dump());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(fmt::format("cannot write --metrics {}", e.what()));
  }
}

}  // namespace gnnrt::model
