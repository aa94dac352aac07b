// The `gnnrt` command. Subcommands:
//   info       what this build is and what it runs on
//   selfcheck  checks the kernels on this machine (fused == unfused, bits
//              identical across thread counts)
// Exit status 0 on success, 1 on a failed check, 2 on bad usage or input
// (one clear line on stderr).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

#include "launch/info.h"
#include "launch/selfcheck.h"

int main(int argc, char** argv) {
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e [%^%l%$] %v");
  CLI::App app{"gnnrt: graph neural network training on simulated NeuronCores"};
  app.require_subcommand(1);
  app.set_version_flag("--version", GNNRT_VERSION);

  auto* info = app.add_subcommand("info", "Show the build, OpenMP and OpenBLAS configuration");
  bool info_json = false;
  info->add_flag("--json", info_json, "Print one JSON object");

  auto* selfcheck = app.add_subcommand(
      "selfcheck", "Check the kernels on this machine: fused == unfused, deterministic");
  gnnrt::launch::SelfcheckOptions options;
  selfcheck->add_option("--edges", options.edges, "Edges of the random graph")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  selfcheck->add_option("--features", options.features, "Feature width F")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  selfcheck->add_option("--threads", options.threads, "OpenMP threads (0: all)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  selfcheck->add_option("--seed", options.seed, "Seed of the random graph")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*info) {
      const auto j = gnnrt::launch::build_info();
      if (info_json) {
        std::cout << j.dump() << "\n";
      } else {
        for (const auto& [key, value] : j.items()) {
          std::cout << key << ": " << (value.is_string() ? value.get<std::string>() : value.dump())
                    << "\n";
        }
      }
      return 0;
    }
    if (*selfcheck) return gnnrt::launch::run_selfcheck(options) ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "gnnrt: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
