// Every algorithm x operation x reduce op x dtype x size against a naive
// reference: each rank's input is a function of (rank, index), so every rank
// can compute all ranks' inputs and reduce them in rank order itself, with no
// communication. Floating-point sums are compared within a tolerance that
// allows any summation order; everything else must match exactly. Each case
// runs twice (out of place, then in place) and the two results must be the
// same bits, and every rank must hold the same bits.
//
// Run by ctest under `mpirun -np N --oversubscribe` for N in 1, 2, 3, 4, 5, 8.
#include <gtest/gtest.h>
#include <mpi.h>
#include <xxhash.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "collectives/communicator.h"

namespace gnnrt::collectives {
namespace {

// The sanitizer build runs the matrix with a smaller largest size and a
// small ring chunk (ctest sets these), so the multi-chunk pipeline still runs
// under ASan/UBSan in a fraction of the time; the Release build runs the sizes
// as specified.
std::size_t from_environment(const char* name, std::size_t fallback) {
  const char* text = std::getenv(name);
  return text != nullptr ? std::stoull(text) : fallback;
}

Communicator& comm() {
  static Communicator c = [] {
    // The call checks as ctest sets them (GNNRT_COLLECTIVE_CHECK): the
    // matrix runs in the default mode, and again through debug mode's checks.
    CommunicatorOptions options = CommunicatorOptions::from_environment();
    options.timeout_seconds = 120;
    options.chunk_bytes = from_environment("GNNRT_TEST_CHUNK_BYTES", options.chunk_bytes);
    return Communicator::world(options);
  }();
  return c;
}

template <typename T>
struct Plain {
  using type = T;
};
template <typename T>
struct Plain<ValueLoc<T>> {
  using type = T;
};

// Input of `rank` at `index`: spread over [-1, 1) for float sums; for max
// and min a few values only, so that ranks tie often; small integers for
// ints. The bits are a hash of (rank, index) (the SplitMix64 finaliser), a
// closed form every rank can evaluate for every other rank; it is kept
// free of sanitizer instrumentation because the reference evaluates it p
// times per element.
__attribute__((no_sanitize("address", "undefined"))) inline uint32_t mix(int rank,
                                                                         std::size_t index) {
  uint64_t z = index * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>((z ^ (z >> 31)) >> 32);
}

template <typename T>
T input(int rank, std::size_t index, ReduceOp op) {
  using V = typename Plain<T>::type;
  const uint32_t bits = mix(rank, index);
  V v;
  if (op == ReduceOp::sum) {
    if constexpr (std::is_floating_point_v<V>) {
      v = static_cast<V>(bits * (2.0 / 4294967296.0) - 1.0);
    } else {
      v = static_cast<V>(static_cast<int64_t>(bits % 2001) - 1000);
    }
  } else {
    v = static_cast<V>(static_cast<int64_t>(bits % 9) - 4);
    if constexpr (std::is_floating_point_v<V>) v = v / 4;
  }
  if constexpr (std::is_same_v<T, V>) {
    return v;
  } else {
    return T{v, rank};
  }
}

template <typename T>
std::vector<T> inputs(int rank, std::size_t begin, std::size_t end, ReduceOp op) {
  std::vector<T> out(end - begin);
  for (std::size_t i = begin; i < end; ++i) out[i - begin] = input<T>(rank, i, op);
  return out;
}

// This rank's whole input; consecutive cases differ only in the algorithm.
template <typename T>
const std::vector<T>& cached_inputs(int rank, std::size_t n, ReduceOp op) {
  static std::tuple<int, std::size_t, ReduceOp> key{-1, 0, ReduceOp::sum};
  static std::vector<T> value;
  if (key != std::make_tuple(rank, n, op)) {
    value = inputs<T>(rank, 0, n, op);
    key = std::make_tuple(rank, n, op);
  }
  return value;
}

// The reduction over all ranks, in rank order, of the inputs at [begin, end);
// `scale` is sum |x| for the tolerance of float sums.
template <typename T>
struct Expected {
  std::vector<T> value;
  std::vector<double> scale;
};

template <typename T>
Expected<T> reference(int ranks, std::size_t begin, std::size_t end, ReduceOp op) {
  Expected<T> e{inputs<T>(0, begin, end, op), std::vector<double>(end - begin)};
  for (std::size_t i = 0; i < e.value.size(); ++i) {
    if constexpr (std::is_arithmetic_v<T>) e.scale[i] = std::fabs(double(e.value[i]));
  }
  for (int r = 1; r < ranks; ++r) {
    for (std::size_t i = begin; i < end; ++i) {
      const T x = input<T>(r, i, op);
      T& acc = e.value[i - begin];
      if constexpr (std::is_arithmetic_v<T>) {
        e.scale[i - begin] += std::fabs(double(x));
        if (op == ReduceOp::sum) {
          if constexpr (std::is_integral_v<T>) {
            acc = static_cast<T>(int64_t(acc) + int64_t(x));
          } else {
            acc = static_cast<T>(double(acc) + double(x));
          }
        } else if (op == ReduceOp::max) {
          acc = std::max(acc, x);
        } else {
          acc = std::min(acc, x);
        }
      } else {  // maxloc: ranks come in increasing order, so ties keep the first
        if (x.value > acc.value) acc = x;
      }
    }
  }
  return e;
}

// Consecutive cases differ only in the algorithm (all_cases() puts it
// innermost), so the last reference is kept and reused.
template <typename T>
const Expected<T>& cached_reference(int ranks, std::size_t begin, std::size_t end, ReduceOp op) {
  static std::tuple<int, std::size_t, std::size_t, ReduceOp> key{-1, 0, 0, ReduceOp::sum};
  static Expected<T> value;
  const auto wanted = std::make_tuple(ranks, begin, end, op);
  if (key != wanted) {
    value = reference<T>(ranks, begin, end, op);
    key = wanted;
  }
  return value;
}

template <typename T>
void expect_matches(const std::vector<T>& got, const Expected<T>& want, ReduceOp op, int ranks,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.value.size()) << what;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 5; ++i) {
    bool ok;
    if constexpr (std::is_floating_point_v<T>) {
      const double tolerance = op == ReduceOp::sum
                                   ? 2.0 * ranks * std::numeric_limits<T>::epsilon() * want.scale[i]
                                   : 0.0;
      ok = std::fabs(double(got[i]) - double(want.value[i])) <= tolerance;
    } else {
      ok = got[i] == want.value[i];
    }
    if (!ok) {
      ++bad;
      if constexpr (std::is_arithmetic_v<T>) {
        ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected "
                      << want.value[i];
      } else {
        ADD_FAILURE() << what << ": element " << i << " is (" << got[i].value << ", "
                      << got[i].loc << "), expected (" << want.value[i].value << ", "
                      << want.value[i].loc << ")";
      }
    }
  }
}

// The bytes that carry meaning: ValueLoc<double> and ValueLoc<int64_t> have
// four bytes of padding, which MPI's own reductions do not copy.
template <typename T>
std::vector<unsigned char> meaningful_bytes(const std::vector<T>& v) {
  if constexpr (std::is_arithmetic_v<T>) {
    std::vector<unsigned char> bytes(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
    return bytes;
  } else {
    constexpr std::size_t value_size = sizeof(v[0].value), size = value_size + sizeof(int32_t);
    std::vector<unsigned char> bytes(v.size() * size);
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::memcpy(&bytes[i * size], &v[i].value, value_size);
      std::memcpy(&bytes[i * size + value_size], &v[i].loc, sizeof(int32_t));
    }
    return bytes;
  }
}

template <typename T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  EXPECT_TRUE(meaningful_bytes(a) == meaningful_bytes(b))
      << what << ": out-of-place and in-place runs differ in their bits";
}

// Every rank holds the same bits (checked with MPI itself, not gnnrt).
template <typename T>
void expect_same_on_all_ranks(const std::vector<T>& v, const std::string& what) {
  const auto bytes = meaningful_bytes(v);
  const unsigned long long hash = XXH3_64bits(bytes.data(), bytes.size());
  std::vector<unsigned long long> all(comm().size());
  MPI_Allgather(&hash, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1, MPI_UNSIGNED_LONG_LONG,
                MPI_COMM_WORLD);
  for (int r = 0; r < comm().size(); ++r) {
    EXPECT_EQ(all[r], all[0]) << what << ": rank " << r << " holds other bits than rank 0";
  }
}

// Result buffers reused from case to case (fresh megabyte vectors per case
// spent most of the sanitizer build's time in page faults); slot k of type T,
// resized to n and zeroed.
template <typename T, int k>
std::vector<T>& reused(std::size_t n) {
  static std::vector<T> buffer;
  buffer.assign(n, T{});
  return buffer;
}

// Uneven blocks summing to n: weights 3, 0, 1, 3, 0, 1, ... (some ranks get
// nothing), the remainder on rank 0.
std::vector<std::size_t> uneven(std::size_t n, int p) {
  auto weight = [](int r) -> std::size_t { return r % 3 == 0 ? 3 : r % 3 == 2 ? 1 : 0; };
  std::vector<std::size_t> counts(p);
  std::size_t weights = 0;
  for (int r = 0; r < p; ++r) weights += weight(r);
  std::size_t given = 0;
  for (int r = 0; r < p; ++r) {
    counts[r] = n * weight(r) / weights;
    given += counts[r];
  }
  counts[0] += n - given;
  return counts;
}

std::vector<std::size_t> prefix(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> displs(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), displs.begin(), std::size_t{0});
  return displs;
}

struct Param {
  Collective op;
  Algorithm algorithm;
  ReduceOp reduce;
  Dtype dtype;
  std::size_t n;
};

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const Param& p = info.param;
  std::string text = std::string(name(p.op)) + "_" + std::string(name(p.algorithm)) + "_";
  if (p.op == Collective::allreduce || p.op == Collective::reduce_scatter) {
    text += std::string(name(p.reduce)) + "_";
  }
  return text + std::string(name(p.dtype)) + "_n" + std::to_string(p.n);
}

template <typename T>
void run_case(const Param& p) {
  Communicator& c = comm();
  const int P = c.size(), R = c.rank();
  const std::string what = param_name({p, 0});
  switch (p.op) {
    case Collective::allreduce: {
      const auto& in = cached_inputs<T>(R, p.n, p.reduce);
      auto& out = reused<T, 0>(p.n);
      auto& in_place = reused<T, 1>(0);
      in_place.assign(in.begin(), in.end());
      c.allreduce_async<T>(in, out, p.reduce, p.algorithm).wait();
      c.allreduce<T>(in_place, p.reduce, p.algorithm);
      const auto& want = cached_reference<T>(P, 0, p.n, p.reduce);
      expect_matches(out, want, p.reduce, P, what);
      expect_matches(in_place, want, p.reduce, P, what + " in place");
      if (p.algorithm == Algorithm::native) {
        // Open MPI may pick another internal algorithm in place; repeat instead.
        auto& again = reused<T, 2>(p.n);
        c.allreduce_async<T>(in, again, p.reduce, p.algorithm).wait();
        expect_same_bits(out, again, what);
      } else {
        expect_same_bits(out, in_place, what);
      }
      expect_same_on_all_ranks(out, what);
      break;
    }
    case Collective::reduce_scatter: {
      const auto counts = uneven(p.n, P);
      const auto displs = prefix(counts);
      const auto& in = cached_inputs<T>(R, p.n, p.reduce);
      auto& out = reused<T, 0>(counts[R]);
      auto& in_place = reused<T, 1>(0);
      in_place.assign(in.begin(), in.end());
      c.reduce_scatter_v_async<T>(in, out, counts, p.reduce, p.algorithm).wait();
      // In place: the result lands in this rank's own block of the input.
      std::span<T> own(in_place.data() + displs[R], counts[R]);
      c.reduce_scatter_v_async<T>(in_place, own, counts, p.reduce, p.algorithm).wait();
      const auto& want = cached_reference<T>(P, displs[R], displs[R] + counts[R], p.reduce);
      const std::vector<T> own_result(own.begin(), own.end());
      expect_matches(out, want, p.reduce, P, what);
      expect_matches(own_result, want, p.reduce, P, what + " in place");
      if (p.algorithm == Algorithm::native) {
        auto& again = reused<T, 2>(counts[R]);
        c.reduce_scatter_v_async<T>(in, again, counts, p.reduce, p.algorithm).wait();
        expect_same_bits(out, again, what);
      } else {
        expect_same_bits(out, own_result, what);
      }
      break;
    }
    case Collective::allgather: {
      const auto counts = uneven(p.n, P);
      const auto displs = prefix(counts);
      const auto mine = inputs<T>(R, displs[R], displs[R] + counts[R], ReduceOp::sum);
      auto& out = reused<T, 0>(p.n);
      auto& in_place = reused<T, 1>(p.n);
      c.allgather_v_async<T>(mine, out, counts, p.algorithm).wait();
      std::copy(mine.begin(), mine.end(), in_place.begin() + displs[R]);
      c.allgather_v_async<T>(std::span<const T>(in_place.data() + displs[R], counts[R]), in_place,
                             counts, p.algorithm)
          .wait();
      std::vector<T> want(p.n);
      for (int r = 0; r < P; ++r) {
        for (std::size_t i = displs[r]; i < displs[r] + counts[r]; ++i) {
          want[i] = input<T>(r, i, ReduceOp::sum);
        }
      }
      EXPECT_TRUE(out == want) << what;
      expect_same_bits(out, in_place, what);
      break;
    }
    case Collective::broadcast: {
      const int root = static_cast<int>(p.n % P);
      const auto want = inputs<T>(root, 0, p.n, ReduceOp::sum);
      std::vector<T> data = R == root ? want : std::vector<T>(p.n);
      c.broadcast<T>(data, root, p.algorithm);
      EXPECT_TRUE(data == want) << what << " (root " << root << ")";
      break;
    }
    case Collective::alltoallv: {
      // Rank r sends count(r, q) elements to q; some blocks are empty.
      auto count = [&](int r, int q) -> std::size_t {
        return p.n == 0 ? 0 : p.n / P + ((r + 2 * q) % 3 == 0 ? 1 : 0);
      };
      constexpr std::size_t kStride = 1u << 24;  // index space of each destination
      std::vector<std::size_t> send_counts(P), recv_counts(P);
      std::vector<T> send, want;
      for (int q = 0; q < P; ++q) {
        send_counts[q] = count(R, q);
        recv_counts[q] = count(q, R);
        const auto to_q = inputs<T>(R, q * kStride, q * kStride + send_counts[q], ReduceOp::sum);
        send.insert(send.end(), to_q.begin(), to_q.end());
        const auto from_q = inputs<T>(q, R * kStride, R * kStride + recv_counts[q], ReduceOp::sum);
        want.insert(want.end(), from_q.begin(), from_q.end());
      }
      std::vector<T> recv(want.size());
      c.alltoallv<T>(send, send_counts, recv, recv_counts, p.algorithm);
      EXPECT_TRUE(recv == want) << what;
      break;
    }
    case Collective::barrier: break;
  }
}

template <typename V>
void run_typed(const Param& p) {
  if (p.reduce == ReduceOp::maxloc) {
    run_case<ValueLoc<V>>(p);
  } else {
    run_case<V>(p);
  }
}

class Collectives : public ::testing::TestWithParam<Param> {};

TEST_P(Collectives, MatchesNaiveReference) {
  const Param& p = GetParam();
  switch (p.dtype) {
    case Dtype::f32: return run_typed<float>(p);
    case Dtype::f64: return run_typed<double>(p);
    case Dtype::i32: return run_typed<int32_t>(p);
    case Dtype::i64: return run_typed<int64_t>(p);
  }
}

std::vector<Param> all_cases() {
  const std::size_t sizes[] = {
      0, 1, 7, 1000, from_environment("GNNRT_TEST_LARGE_ELEMENTS", (std::size_t{1} << 20) + 3)};
  const Dtype dtypes[] = {Dtype::f32, Dtype::f64, Dtype::i32, Dtype::i64};
  const ReduceOp reduces[] = {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::maxloc};
  std::vector<Param> cases;
  for (auto op : {Collective::allreduce, Collective::reduce_scatter, Collective::allgather,
                  Collective::broadcast, Collective::alltoallv}) {
    const bool reducing = op == Collective::allreduce || op == Collective::reduce_scatter;
    for (auto reduce : reduces) {
      if (!reducing && reduce != ReduceOp::sum) continue;
      for (auto dtype : dtypes) {
        for (auto n : sizes) {
          for (auto algorithm : algorithms_for(op)) cases.push_back({op, algorithm, reduce, dtype, n});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, Collectives, ::testing::ValuesIn(all_cases()), param_name);

}  // namespace
}  // namespace gnnrt::collectives
