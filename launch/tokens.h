// The control plane's credentials (docs/launcher.md, "Who may talk to the
// launcher"). The launcher draws a 256-bit job secret that never leaves its
// process; rank r of attempt a gets only its own token, HMAC-SHA-256 of
// "gnnrt rank r attempt a" under that secret (libsodium), in its own
// environment. A token names one rank of one attempt: a process holding
// rank 1's token cannot register as rank 0, and a token of attempt 0 is
// refused in attempt 1. Tokens are compared in constant time.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace gnnrt::launch {

class JobSecret {
 public:
  // 32 bytes from the system's CSPRNG (libsodium's randombytes_buf).
  static JobSecret draw();

  // 64 hex digits: the token of `rank` in `attempt`.
  std::string token(int rank, int attempt) const;
  // Whether `given` is that token; constant time in its contents.
  bool accepts(std::string_view given, int rank, int attempt) const;

 private:
  std::array<unsigned char, 32> key_{};
};

// A non-secret id of the job (16 hex digits) that every process of it
// carries in its environment (GNNRT_LAUNCH_JOB), so that the launcher finds
// what is left of a job on its host.
std::string random_job_id();

}  // namespace gnnrt::launch
