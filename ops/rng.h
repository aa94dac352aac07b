// Counter-based random numbers: gnnrt's generators, both from Random123.
// Philox4x64-10 keyed by (seed, stream) and counted by four words the caller
// makes from what the draw is for (a step, a row, a column block, ...), so a
// draw is a pure function of its key and counter: the same value in any
// order, on any thread, rank or machine. Parameter initialisation, the
// synthetic datasets, random partitions and test data draw here. Dropout
// masks, drawn every step for every element, use Threefry4x32-20 (below),
// which vectorises.
//
// Conversions use IEEE +, -, *, /, sqrt only (no libm log/sin/cos, which may
// differ in the last bit between glibc versions and their FMA variants), so
// normals are bit-identical everywhere. Thread-safe (no state).
#pragma once

#include <array>
#include <cstdint>

namespace gnnrt::ops {

using RngWords = std::array<uint64_t, 4>;

// Four 64-bit words for (seed, stream) at `counter`.
RngWords philox(uint64_t seed, uint64_t stream, const RngWords& counter);

// Threefry4x32-20 (Random123's r123::Threefry4x32): four 32-bit words for a
// 128-bit key and a 128-bit counter. Dropout masks are these words, drawn
// over vector lanes by ops/threefry.h (ops/dropout.h); this is the
// library's own function, the yardstick the tests hold them to.
using Words32 = std::array<uint32_t, 4>;
Words32 threefry(const Words32& key, const Words32& counter);

// [0, 1) and (0, 1] with 53 random bits; an integer in [0, n) (bias below
// n / 2^64).
inline double unit(uint64_t word) { return static_cast<double>(word >> 11) * 0x1p-53; }
inline double unit_nonzero(uint64_t word) {
  return static_cast<double>((word >> 11) + 1) * 0x1p-53;
}
inline uint64_t below(uint64_t word, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(word) * n) >> 64);
}

// Four standard normals from one draw (two Box-Muller pairs).
std::array<double, 4> normals(const RngWords& words);

}  // namespace gnnrt::ops
