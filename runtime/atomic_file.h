// Whole files. Durable, atomic file replacement: the bytes go to a temporary file beside
// `path` (named with the process id), which is fsynced, renamed over `path`,
// and the directory entry fsynced. A reader sees the old file or the new one,
// never a torn one, and a process killed at any moment loses nothing that was
// there before. On any failure (a full disk, say) the temporary file is
// removed and std::runtime_error names the file and the system error; the
// old file is untouched. Creates missing parent directories.
#pragma once

#include <filesystem>
#include <string_view>

namespace gnnrt {

// `spread_seconds` > 0 writes in 16 pieces over about that long (tests: a
// process killed in the middle of a write).
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes,
                           double spread_seconds = 0);

// A regular file's bytes. Anything else is std::runtime_error naming the
// path and why: "a directory, not a file", "not a regular file", "cannot
// open: ...", "cannot read: ..." (never libstdc++'s unnamed read failure).
std::string read_whole_file(const std::filesystem::path& path);

}  // namespace gnnrt
