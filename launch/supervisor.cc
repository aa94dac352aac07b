#include "launch/supervisor.h"

#include <ctime>
#include <fstream>
#include <iterator>

#include "model/training/checkpoint.h"

namespace gnnrt::launch {

std::string now_iso() {
  const auto t = std::chrono::system_clock::now();
  const auto secs = std::chrono::system_clock::to_time_t(t);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

std::string Supervisor::attribute(Failure& failure, const std::filesystem::path& log, uintmax_t offset) {
  std::string output;
  {
    std::ifstream in(log);
    in.seekg(static_cast<std::streamoff>(offset));
    output.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto signals = mpirun_signals(output);
  if (failure.kind == "exit" && failure.rank < 0) {
    std::lock_guard lock(mutex);
    for (const auto& [who, what] : signals) {
      if (who < 0 || who >= static_cast<int>(ranks.size())) continue;
      const auto& r = ranks[static_cast<size_t>(who)];
      failure.rank = who;
      failure.host = r.host;
      failure.pid = r.pid;
      break;
    }
  }
  const std::string verdict = mpirun_verdict(output, signals, failure.rank);
  if (failure.kind == "exit" && failure.rank < 0 && verdict == "exit code 2") {
    failure.kind = "bad_input";
    failure.reason += " (a rank ended with status 2, bad input, before it registered)";
  }
  return verdict;
}

nlohmann::json newest_checkpoint_record(const std::filesystem::path& dir) {
  try {
    if (const auto newest = model::load_newest_checkpoint(dir, /*set_aside=*/false)) {
      return {{"file", newest->path.string()}, {"epoch", newest->state.epoch()}, {"step", newest->state.step()}};
    }
    return {{"file", nullptr}, {"epoch", 0}};
  } catch (const std::exception& e) {
    return {{"error", e.what()}};
  }
}

std::vector<std::pair<int, std::string>> mpirun_signals(const std::string& output) {
  std::vector<std::pair<int, std::string>> signals;
  for (size_t at = output.find("process rank "); at != std::string::npos;
       at = output.find("process rank ", at + 1)) {
    const size_t eol = output.find('\n', at);
    const std::string line = output.substr(at, eol == std::string::npos ? std::string::npos : eol - at);
    const size_t on = line.find(" exited on signal ");
    if (on == std::string::npos) continue;
    const std::string signal = line.substr(on + 18);  // "9 (Killed)."
    const size_t close = signal.find(')');
    int who = -1;
    try {
      who = std::stoi(line.substr(13));
    } catch (const std::logic_error&) {
    }
    signals.emplace_back(who, signal.substr(0, close == std::string::npos ? signal.size() : close + 1));
  }
  return signals;
}

std::string mpirun_verdict(const std::string& output, const std::vector<std::pair<int, std::string>>& signals,
                           int rank) {
  for (const auto& [who, what] : signals) {
    if (who == rank) return "signal " + what;
  }
  if (!signals.empty()) return fmt::format("signal {} on rank {}", signals[0].second, signals[0].first);
  const size_t code = output.find("Exit code:");
  if (code != std::string::npos) {
    const size_t digits = output.find_first_of("0123456789", code);
    if (digits != std::string::npos) {
      return "exit code " + output.substr(digits, output.find_first_not_of("0123456789", digits) - digits);
    }
  }
  return "";
}

}  // namespace gnnrt::launch
