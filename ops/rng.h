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
// 128-bit key and a 128-bit counter. Dropout masks draw here, a draw per
// four columns (ops/dropout.h).
using Words32 = std::array<uint32_t, 4>;
Words32 threefry(const Words32& key, const Words32& counter);

// Threefry4x32-20 of n counters given as four arrays (counter i is
// {c[0][i], c[1][i], c[2][i], c[3][i]}), its words to out[0..3][i]: the
// same words as threefry(), computed with the counters across the lanes of
// the vector registers (16 at a time with AVX-512; adds, rotates and xors
// only). About 1 ns a draw on this machine, against 5-8 for a Philox4x64
// draw, which needs 64-bit multiplies no vector unit has. n = 0 is fine;
// outputs may not alias inputs.
void threefry_many(const Words32& key, const std::array<const uint32_t*, 4>& c,
                   const std::array<uint32_t*, 4>& out, int64_t n);

// One word of each draw: out[i] = word pick[i] (0..3) of the draw of
// counter {c[0][i], c[1][i], c[2][i], c3}, for callers that use one word of
// four (a sparse dropout: a stored value's column picks it). Writing one
// word instead of four and choosing it in the vector loop made the sparse
// dropout of Cora's features 14% faster (130 -> 112 us, one thread).
void threefry_pick(const Words32& key, const std::array<const uint32_t*, 3>& c, uint32_t c3,
                   const uint8_t* pick, uint32_t* out, int64_t n);

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
