// The `gnnrt` command's exit statuses (docs/cli.md): 0 success, 1 a failure
// (a failed check, a run that broke: a program that does not fit, a
// non-finite loss, a collective error or timeout), 2 bad usage or bad input
// (flags, a job, a dataset, a parameter or checkpoint file, shards, a shape
// mismatch). Every error is one line `gnnrt: error: ...` on stderr.
#pragma once

#include <exception>

namespace gnnrt::launch {

inline constexpr int kFailure = 1;
inline constexpr int kBadInput = 2;

// kBadInput for errors about what the user gave, kFailure for the rest.
int exit_status(const std::exception& e);

}  // namespace gnnrt::launch
