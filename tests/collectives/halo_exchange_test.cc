// HaloExchange against the dense answer: every rank scatters the rows it
// holds into a [global rows, F] matrix (the reduce op's identity elsewhere)
// and MPI's own allreduce combines the full matrix; each replica's halo
// result must match the dense rows (sums within a tolerance for summation
// order, everything else exactly) and all replicas of a row must hold the
// same bits. Random mirror tables include a rank that shares nothing (when
// p >= 3), rows every rank holds, and F = 1 and 130.
#include <gtest/gtest.h>
#include <mpi.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "collectives/halo_exchange.h"
#include "ops/rng.h"

namespace gnnrt::collectives {
namespace {

uint32_t draw(uint32_t a, uint32_t b, uint32_t c) {
  return static_cast<uint32_t>(ops::philox(c, 0, {a, b, 0, 0})[0]);
}

// Which ranks hold global row g: the last rank (if p >= 3) is a loner that
// holds only rows nobody else holds; rows below `all_rows` are held by every
// other rank; otherwise each rank holds each row with probability 1/2.
std::vector<int> holders(int64_t g, int p, int64_t all_rows, uint32_t seed) {
  std::vector<int> h;
  const int loner = p >= 3 ? p - 1 : -1;
  if (g < all_rows) {
    for (int q = 0; q < p; ++q) {
      if (q != loner) h.push_back(q);
    }
    return h;
  }
  for (int q = 0; q < p; ++q) {
    if (q != loner && draw(uint32_t(g), uint32_t(q), seed) % 2 == 0) h.push_back(q);
  }
  if (h.empty()) h.push_back(loner >= 0 && g % 2 == 0 ? loner : int(g % std::max(1, p - (loner >= 0))));
  return h;
}

template <typename T>
T value(int rank, int64_t g, int64_t f, ReduceOp op, uint32_t seed) {
  const uint32_t bits = draw(uint32_t(g * 1000 + f), uint32_t(rank), seed + 1);
  if (op == ReduceOp::sum) return static_cast<T>(bits * (2.0 / 4294967296.0) - 1.0);
  return static_cast<T>(int(bits % 7) - 3) / 2;  // ties across ranks are common
}

struct HaloCase {
  ReduceOp op;
  int64_t features;
  HaloTransport transport;
  bool dbl;
};

template <typename T>
void run(const HaloCase& hc) {
  auto comm = Communicator::world();
  const int p = comm.size(), me = comm.rank();
  const int64_t global_rows = 97, all_rows = 5, F = hc.features;
  const uint32_t seed = 11;

  // This rank's rows, in a shuffled local order.
  std::vector<int64_t> mine;
  for (int64_t g = 0; g < global_rows; ++g) {
    const auto h = holders(g, p, all_rows, seed);
    if (std::find(h.begin(), h.end(), me) != h.end()) mine.push_back(g);
  }
  std::sort(mine.begin(), mine.end(), [&](int64_t a, int64_t b) {
    return draw(uint32_t(a), 99, uint32_t(me)) < draw(uint32_t(b), 99, uint32_t(me)) ||
           (draw(uint32_t(a), 99, uint32_t(me)) == draw(uint32_t(b), 99, uint32_t(me)) && a < b);
  });
  const int64_t rows = static_cast<int64_t>(mine.size());
  MirrorTable table;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> others;
    for (int q : holders(mine[r], p, all_rows, seed)) {
      if (q != me) others.push_back(q);
    }
    if (!others.empty()) table.add(r, mine[r], others);
  }
  HaloExchange halo(comm, table, rows, hc.transport);
  if (p >= 3 && me == p - 1) {
    EXPECT_TRUE(halo.peers().empty()) << "the loner shares nothing";
  }

  std::vector<T> data(rows * F);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t f = 0; f < F; ++f) data[r * F + f] = value<T>(me, mine[r], f, hc.op, seed);
  }
  std::vector<int32_t> winner(hc.op == ReduceOp::maxloc ? rows * F : 0);
  Work work = halo.start<T>(data, F, hc.op, winner);
  work.wait();

  // The dense answer.
  const bool located = hc.op == ReduceOp::maxloc;
  const T identity = hc.op == ReduceOp::sum ? T(0)
                     : hc.op == ReduceOp::min ? std::numeric_limits<T>::infinity()
                                              : -std::numeric_limits<T>::infinity();
  std::vector<T> dense(global_rows * F, identity);
  std::vector<ValueLoc<T>> dense_loc(located ? global_rows * F : 0, ValueLoc<T>{identity, p});
  std::vector<T> magnitude(global_rows * F, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t f = 0; f < F; ++f) {
      const T v = value<T>(me, mine[r], f, hc.op, seed);
      dense[mine[r] * F + f] = v;
      magnitude[mine[r] * F + f] = std::fabs(v);
      if (located) dense_loc[mine[r] * F + f] = {v, me};
    }
  }
  if (located) {
    comm.allreduce<ValueLoc<T>>(dense_loc, ReduceOp::maxloc, Algorithm::native);
  } else {
    comm.allreduce<T>(dense, hc.op, Algorithm::native);
  }
  comm.allreduce<T>(magnitude, ReduceOp::sum, Algorithm::native);

  int bad = 0;
  for (int64_t r = 0; r < rows && bad < 5; ++r) {
    for (int64_t f = 0; f < F && bad < 5; ++f) {
      const int64_t d = mine[r] * F + f;
      const T got = data[r * F + f];
      if (located) {
        if (got != dense_loc[d].value || winner[r * F + f] != dense_loc[d].loc) {
          ++bad;
          ADD_FAILURE() << "global row " << mine[r] << " feature " << f << ": (" << got << ", "
                        << winner[r * F + f] << "), dense (" << dense_loc[d].value << ", "
                        << dense_loc[d].loc << ")";
        }
      } else {
        const double tolerance =
            hc.op == ReduceOp::sum ? 2.0 * p * std::numeric_limits<T>::epsilon() * magnitude[d] : 0;
        if (std::fabs(double(got) - double(dense[d])) > tolerance) {
          ++bad;
          ADD_FAILURE() << "global row " << mine[r] << " feature " << f << ": " << got
                        << ", dense " << dense[d];
        }
      }
    }
  }

  // Every replica of a row holds the same bits: the max and the min over
  // holders of each row's hash agree.
  std::vector<uint64_t> hash_max(global_rows, 0), hash_min(global_rows, UINT64_MAX);
  for (int64_t r = 0; r < rows; ++r) {
    hash_max[mine[r]] = hash_min[mine[r]] = XXH3_64bits(&data[r * F], F * sizeof(T));
  }
  MPI_Allreduce(MPI_IN_PLACE, hash_max.data(), int(global_rows), MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, hash_min.data(), int(global_rows), MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  for (int64_t g = 0; g < global_rows; ++g) {
    EXPECT_EQ(hash_max[g], hash_min[g]) << "replicas of global row " << g << " differ";
  }
}

class Halo : public ::testing::TestWithParam<HaloCase> {};

TEST_P(Halo, MatchesDenseAllreduce) {
  if (GetParam().dbl) {
    run<double>(GetParam());
  } else {
    run<float>(GetParam());
  }
}

std::vector<HaloCase> halo_cases() {
  std::vector<HaloCase> cases;
  for (auto transport : {HaloTransport::point_to_point, HaloTransport::neighbor}) {
    for (auto op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::maxloc}) {
      for (int64_t f : {1, 130}) {
        for (bool dbl : {false, true}) cases.push_back({op, f, transport, dbl});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(
    All, Halo, ::testing::ValuesIn(halo_cases()), [](const auto& info) {
      const HaloCase& c = info.param;
      return std::string(c.transport == HaloTransport::neighbor ? "neighbor_" : "p2p_") +
             std::string(name(c.op)) + "_F" + std::to_string(c.features) + (c.dbl ? "_f64" : "_f32");
    });

TEST(HaloErrors, BadTableFailsOnEveryRank) {
  auto comm = Communicator::world();
  MirrorTable table;
  // Rank 0 names a local row outside its buffer; every rank must throw.
  if (comm.rank() == 0) {
    const std::vector<int32_t> none;
    table.add(12, 0, none);
  }
  try {
    HaloExchange halo(comm, table, 10);
    FAIL() << "no error";
  } catch (const CollectiveError& e) {
    const std::string text = e.what();
    if (comm.rank() == 0) {
      EXPECT_EQ(text, "rank 0: halo exchange: mirror 0: local row 12 is outside [0, 10)");
    } else {
      EXPECT_NE(text.find("rank 0 reported a bad mirror table"), std::string::npos) << text;
    }
  }
}

TEST(HaloErrors, RanksThatDisagreeAreNamed) {
  auto comm = Communicator::world();
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  MirrorTable table;
  // Rank 0 says it shares global row 3 with rank 1; rank 1 says nothing.
  if (comm.rank() == 0) {
    const std::vector<int32_t> one{1};
    table.add(0, 3, one);
  }
  try {
    HaloExchange halo(comm, table, 1);
    FAIL() << "no error";
  } catch (const CollectiveError& e) {
    const std::string text = e.what();
    if (comm.rank() == 0) {
      EXPECT_NE(text.find("this rank lists 1 rows shared with rank 1, but rank 1 lists 0"),
                std::string::npos) << text;
    } else if (comm.rank() == 1) {
      EXPECT_NE(text.find("this rank lists 0 rows shared with rank 0, but rank 0 lists 1"),
                std::string::npos) << text;
    }
  }
}

TEST(Halo, PlanReusedAndTwoExchangesInFlight) {
  auto comm = Communicator::world();
  const int p = comm.size(), me = comm.rank();
  // Global row 0 is on every rank (local row 0); local row 1 is private.
  MirrorTable table;
  std::vector<int32_t> others;
  for (int q = 0; q < p; ++q) {
    if (q != me) others.push_back(q);
  }
  if (!others.empty()) table.add(0, 0, others);
  HaloExchange halo(comm, table, 2);
  for (int round = 1; round <= 3; ++round) {
    std::vector<double> a{double(me + round), 5.0}, b{double(-me), 7.0};
    Work first = halo.start<double>(a, 1, ReduceOp::sum);
    Work second = halo.start<double>(b, 1, ReduceOp::min);
    second.wait();
    first.wait();
    EXPECT_EQ(a[0], p * (p - 1) / 2.0 + p * round) << "round " << round;
    EXPECT_EQ(a[1], 5.0);
    EXPECT_EQ(b[0], double(1 - p));
    EXPECT_EQ(b[1], 7.0);
  }
}

TEST(HaloErrors, HoldersThatDisagreeAreCaught) {
  auto comm = Communicator::world();
  if (comm.size() < 3) GTEST_SKIP() << "needs three ranks";
  // Rank 0 says global row 9 is on ranks 0, 1, 2; ranks 1 and 2 each say it
  // is on themselves and rank 0 only. Every pair agrees on the row, not on
  // its holders.
  MirrorTable table;
  if (comm.rank() == 0) {
    const std::vector<int32_t> both{1, 2};
    table.add(0, 9, both);
  } else if (comm.rank() <= 2) {
    const std::vector<int32_t> zero{0};
    table.add(0, 9, zero);
  }
  EXPECT_THROW(HaloExchange(comm, table, 1), CollectiveError);
}

TEST(HaloErrors, WrongBufferSize) {
  auto comm = Communicator::world();
  MirrorTable table;
  HaloExchange halo(comm, table, 4);
  std::vector<float> data(7);
  EXPECT_THROW(halo.start<float>(data, 2, ReduceOp::sum), CollectiveError);
  std::vector<float> right(8);
  EXPECT_THROW(halo.start<float>(right, 2, ReduceOp::maxloc), CollectiveError);
}

}  // namespace
}  // namespace gnnrt::collectives

namespace gnnrt::collectives {
namespace {

// The keyed max/min of max/min aggregations across ranks: per element the
// largest (smallest) value, a NaN first, ties to the smallest key; absent
// keys take no part. Every rank computes every holder's contribution (a
// closed form) and so the expected winner.
struct Contribution {
  float value;
  int64_t key;
};

Contribution contribution(int rank, int64_t g, int64_t f) {
  const uint32_t bits = draw(uint32_t(g * 100 + f), uint32_t(rank), 21);
  if (bits % 11 == 0) return {0.0f, HaloExchange::kNoKey};  // no local edge here
  const float v = bits % 13 == 0 ? std::nanf("") : static_cast<float>(int(bits % 5) - 2);
  return {v, static_cast<int64_t>((bits >> 8) % 50)};  // small keys: equal keys never win twice
}

bool beats(const Contribution& a, const Contribution& b, bool max) {
  if (a.key == HaloExchange::kNoKey) return false;
  if (b.key == HaloExchange::kNoKey) return true;
  const bool an = std::isnan(a.value), bn = std::isnan(b.value);
  if (an != bn) return an;
  if (!an && a.value != b.value) return max ? a.value > b.value : a.value < b.value;
  return a.key < b.key;
}

TEST(KeyedHalo, MatchesTheRuleOnEveryReplica) {
  auto comm = Communicator::world();
  const int p = comm.size(), me = comm.rank();
  const int64_t global_rows = 61, F = 3;
  std::vector<int64_t> mine;
  for (int64_t g = 0; g < global_rows; ++g) {
    const auto h = holders(g, p, 4, 5);
    if (std::find(h.begin(), h.end(), me) != h.end()) mine.push_back(g);
  }
  MirrorTable table;
  for (size_t r = 0; r < mine.size(); ++r) {
    std::vector<int32_t> others;
    for (int q : holders(mine[r], p, 4, 5)) {
      if (q != me) others.push_back(q);
    }
    if (!others.empty()) table.add(static_cast<int64_t>(r), mine[r], others);
  }
  HaloExchange halo(comm, table, static_cast<int64_t>(mine.size()));
  for (bool max : {true, false}) {
    std::vector<float> values(mine.size() * F);
    std::vector<int64_t> keys(values.size());
    for (size_t r = 0; r < mine.size(); ++r) {
      for (int64_t f = 0; f < F; ++f) {
        const Contribution c = contribution(me, mine[r], f);
        values[r * F + f] = c.value;
        keys[r * F + f] = c.key;
      }
    }
    halo.start_keyed<float>(values, keys, F, max ? ReduceOp::max : ReduceOp::min).wait();
    int bad = 0;
    for (size_t r = 0; r < mine.size() && bad < 5; ++r) {
      for (int64_t f = 0; f < F; ++f) {
        Contribution best{0.0f, HaloExchange::kNoKey};
        for (int q : holders(mine[r], p, 4, 5)) {
          const Contribution c = contribution(q, mine[r], f);
          if (beats(c, best, max)) best = c;
        }
        const float got = values[r * F + f];
        const bool same_value = (std::isnan(got) && std::isnan(best.value)) ||
                                (best.key == HaloExchange::kNoKey || got == best.value);
        if (keys[r * F + f] != best.key || !same_value) {
          ++bad;
          ADD_FAILURE() << (max ? "max" : "min") << ": global row " << mine[r] << " feature " << f
                        << ": (" << got << ", key " << keys[r * F + f] << "), expected ("
                        << best.value << ", key " << best.key << ")";
        }
      }
    }
  }
}

// Ranks that disagree about a halo exchange (here its width) get an error
// on every rank, with the call checks on.
TEST(HaloErrors, FeaturesThatDifferAreNamed) {
  CommunicatorOptions options;
  options.timeout_seconds = 60;
  options.check_calls = true;
  auto comm = Communicator::world(options);
  if (comm.size() < 2) GTEST_SKIP() << "needs two ranks";
  MirrorTable none;
  HaloExchange halo(comm, none, 2);
  const int64_t features = comm.rank() == 0 ? 3 : 4;
  std::vector<float> data(2 * features);
  try {
    halo.run<float>(data, features, ReduceOp::sum);
    ADD_FAILURE() << "no error";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 called halo exchange(f32, 3 features, sum)"),
              std::string::npos)
        << e.what();
  }
  comm.barrier();
}

}  // namespace
}  // namespace gnnrt::collectives
