#include "launch/tokens.h"

#include <fmt/format.h>
#include <sodium.h>

#include <stdexcept>

namespace gnnrt::launch {
namespace {

void ready() {
  if (sodium_init() < 0) throw std::runtime_error("launch: libsodium cannot start (no system randomness?)");
}

}  // namespace

JobSecret JobSecret::draw() {
  ready();
  JobSecret s;
  randombytes_buf(s.key_.data(), s.key_.size());
  return s;
}

std::string JobSecret::token(int rank, int attempt) const {
  const std::string message = fmt::format("gnnrt rank {} attempt {}", rank, attempt);
  unsigned char mac[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256(mac, reinterpret_cast<const unsigned char*>(message.data()), message.size(), key_.data());
  char hex[2 * crypto_auth_hmacsha256_BYTES + 1];
  sodium_bin2hex(hex, sizeof hex, mac, sizeof mac);
  return hex;
}

bool JobSecret::accepts(std::string_view given, int rank, int attempt) const {
  const std::string expected = token(rank, attempt);
  // The length is no secret (always 64); the digits are compared in
  // constant time.
  return given.size() == expected.size() && sodium_memcmp(given.data(), expected.data(), expected.size()) == 0;
}

std::string random_job_id() {
  ready();
  return fmt::format("{:016x}", randombytes_random() | (static_cast<uint64_t>(randombytes_random()) << 32));
}

}  // namespace gnnrt::launch
