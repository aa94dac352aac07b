// Durable, atomic file replacement: the bytes go to a temporary file beside
// `path` (named with the process id), which is fsynced, renamed over `path`,
// and the directory entry fsynced. A reader sees the old file or the new one,
// never a torn one, and a process killed at any moment loses nothing that was
// there before. Throws std::runtime_error naming the file and the system
// error. Creates missing parent directories.
#pragma once

#include <filesystem>
#include <string_view>

namespace gnnrt {

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

}  // namespace gnnrt
