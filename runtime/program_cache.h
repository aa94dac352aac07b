// The program cache: compiled programs serialised with Protobuf
// (compiled_program.proto) in a directory, one file per key, where the key
// is an xxHash64 of the program text, the compile options, the device
// profile and the compiler version. Files are written atomically (temporary
// file, fsync, rename), so a killed process never leaves a torn entry; an
// unreadable or mismatching entry is treated as a miss and overwritten.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/core.h"

namespace gnnrt::runtime {

// The default directory: $XDG_CACHE_HOME/gnnrt, else $HOME/.cache/gnnrt.
std::filesystem::path default_cache_dir();

// debug: compiled for debug mode (unfused), a different program.
std::string cache_key(const Program& program, const CompileOptions& options,
                      const DeviceProfile& profile, bool debug);

class ProgramCache {
 public:
  explicit ProgramCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

  // nullopt on a miss; an entry that exists but fails a check (checksum,
  // parse, key, compiler version, plan bounds) is logged as a warning and
  // treated as a miss, to be recompiled and overwritten.
  std::optional<CompiledProgram> load(const std::string& key) const;
  // Throws std::runtime_error on I/O errors. `version` is compiler_version()
  // except in tests of the version check.
  void store(const CompiledProgram& compiled, std::string_view version = compiler_version()) const;
  std::filesystem::path path(const std::string& key) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace gnnrt::runtime
