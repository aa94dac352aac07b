// Threefry4x32-20 written over lanes (internal to ops/; include only from
// kernel .cc files): Random123's threefry4x32_R(20, ...) works on one
// counter in a struct, which GCC does not vectorise across calls; this one is
// plain adds, rotates and xors on four words, so a loop over counters
// vectorises (16 at a time with AVX-512). Rotations and key schedule as in
// Random123's threefry.h; tests/ops/dropout_test.cc checks every word
// against the library (ops::threefry).
#pragma once

#include <bit>
#include <cstdint>

#include "ops/rng.h"

namespace gnnrt::ops::detail {

// The key's four words and their parity word.
struct ThreefryKey {
  uint32_t ks[5];

  explicit ThreefryKey(const Words32& key) {
    for (int i = 0; i < 4; ++i) ks[i] = key[i];
    ks[4] = 0x1BD11BDAu ^ key[0] ^ key[1] ^ key[2] ^ key[3];
  }
};

// The 20 rounds on N counters at once, x[word][j] the words of counter j,
// in place. A vector loop whose lanes each run N independent counters keeps
// N dependency chains of add-rotate-xor in flight, where with N = 1 a
// 16-lane loop waits on each round's latency (docs/kernels.md). The 4 N
// words must stay in registers with room to spare (ops/dropout.cc's
// kChains: 4 on AVX-512, 2 on AVX2).
template <int N>
[[gnu::always_inline]] inline void threefry_rounds(const ThreefryKey& key, uint32_t (&x)[4][N]) {
  constexpr int kRotate[8][2] = {{10, 26}, {11, 21}, {13, 27}, {23, 5},
                                 {6, 20},  {17, 11}, {25, 10}, {18, 20}};
  const uint32_t* ks = key.ks;
#pragma GCC unroll 8
  for (int j = 0; j < N; ++j) x[0][j] += ks[0], x[1][j] += ks[1], x[2][j] += ks[2], x[3][j] += ks[3];
  // Five groups of four rounds, each followed by a key injection.
#pragma GCC unroll 5
  for (int s = 1; s <= 5; ++s) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const int* rot = kRotate[(s - 1) % 2 * 4 + r];
      const int a = r % 2 == 0 ? 1 : 3, b = r % 2 == 0 ? 3 : 1;  // mixed into x0 and x2
#pragma GCC unroll 8
      for (int j = 0; j < N; ++j) {
        x[0][j] += x[a][j], x[a][j] = std::rotl(x[a][j], rot[0]), x[a][j] ^= x[0][j];
        x[2][j] += x[b][j], x[b][j] = std::rotl(x[b][j], rot[1]), x[b][j] ^= x[2][j];
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < N; ++j) {
      x[0][j] += ks[s % 5];
      x[1][j] += ks[(s + 1) % 5];
      x[2][j] += ks[(s + 2) % 5];
      x[3][j] += ks[(s + 3) % 5] + static_cast<uint32_t>(s);
    }
  }
}

}  // namespace gnnrt::ops::detail
