#include "launch/console.h"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace gnnrt::launch {
namespace {

ColorWhen chosen = ColorWhen::kAuto;

}  // namespace

ColorWhen parse_color(const std::string& text) {
  if (text == "auto") return ColorWhen::kAuto;
  if (text == "always") return ColorWhen::kAlways;
  if (text == "never") return ColorWhen::kNever;
  throw std::invalid_argument(fmt::format("colour '{}': expected auto, always or never", text));
}

void set_color(ColorWhen when) { chosen = when; }
ColorWhen color() { return chosen; }

bool under_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return true;
  }
  return false;
}

bool colored(int fd) {
  switch (chosen) {
    case ColorWhen::kAlways:
      return true;
    case ColorWhen::kNever:
      return false;
    case ColorWhen::kAuto:
      break;
  }
  const char* no_color = std::getenv("NO_COLOR");
  if (no_color != nullptr && *no_color != '\0') return false;
  return isatty(fd) != 0 && !under_mpirun();
}

spdlog::sink_ptr console_sink(int fd) {
  const auto mode = colored(fd) ? spdlog::color_mode::always : spdlog::color_mode::never;
  if (fd == 1) return std::make_shared<spdlog::sinks::stdout_color_sink_mt>(mode);
  return std::make_shared<spdlog::sinks::stderr_color_sink_mt>(mode);
}

}  // namespace gnnrt::launch
