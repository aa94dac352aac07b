// The Communicator's contract beyond the numbers: several operations in
// flight at once, test() polling, sub-communicators, point to point, MPI
// errors as exceptions, size checks, the raise-on-timeout mode and the
// tuning table. (The abort-on-timeout mode is deadline_main.cc.)
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <algorithm>
#include <functional>
#include <string>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include <climits>

#include "collectives/communicator.h"
#include "collectives/error.h"
#include "collectives/transfers.h"
#include "collectives/tuning.h"

namespace gnnrt::collectives {
namespace {

// The call checks (call_check.h) as ctest sets them (GNNRT_COLLECTIVE_CHECK:
// the matrix runs in the default mode, and again in debug mode's), unless
// a test needs them.
Communicator make_world(double timeout = 120,
                        bool check_calls = CommunicatorOptions::from_environment().check_calls) {
  CommunicatorOptions options;
  options.timeout_seconds = timeout;
  options.check_calls = check_calls;
  return Communicator::world(options);
}

TEST(Communicator, SeveralInFlightWaitedInAnyOrder) {
  auto c = make_world();
  const int p = c.size(), r = c.rank();
  const std::vector<Algorithm> algorithms{Algorithm::native, Algorithm::ring,
                                          Algorithm::recursive_doubling, Algorithm::rabenseifner};
  std::vector<std::vector<double>> data;
  for (std::size_t k = 0; k < algorithms.size(); ++k) {
    data.emplace_back(1000 + 77 * k, double(r + 1) * double(k + 1));
  }
  std::vector<Work> works;
  for (std::size_t k = 0; k < algorithms.size(); ++k) {
    works.push_back(c.allreduce_async<double>(data[k], data[k], ReduceOp::sum, algorithms[k]));
  }
  // Ranks wait in different orders: even ranks forwards, odd ranks backwards.
  for (std::size_t i = 0; i < works.size(); ++i) {
    works[r % 2 == 0 ? i : works.size() - 1 - i].wait();
  }
  const double ranks_sum = p * (p + 1) / 2.0;
  for (std::size_t k = 0; k < algorithms.size(); ++k) {
    for (double v : data[k]) ASSERT_EQ(v, ranks_sum * double(k + 1)) << name(algorithms[k]);
  }
}

// A blocking call with an own algorithm runs without a Work of its own
// (run_blocking); it must still advance the operations in flight, or a rank
// that waits for one of them first would wait forever for this one. (A
// blocking `native` call is MPI's blocking call and cannot: work.h.)
TEST(Communicator, BlockingCallAdvancesOperationsInFlight) {
  auto c = make_world(60);
  const int p = c.size(), r = c.rank();
  std::vector<float> big(100000, float(r + 1)), other(big), small(5, float(r + 1));
  Work ring = c.allreduce_async<float>(big, big, ReduceOp::sum, Algorithm::ring);
  Work halving = c.allreduce_async<float>(other, other, ReduceOp::max, Algorithm::rabenseifner);
  if (r % 2 == 0) {
    c.allreduce<float>(small, ReduceOp::sum, Algorithm::recursive_doubling);
    ring.wait();
    halving.wait();
  } else {
    halving.wait();
    ring.wait();
    c.allreduce<float>(small, ReduceOp::sum, Algorithm::recursive_doubling);
  }
  const float sum = p * (p + 1) / 2.0f;
  for (float v : small) ASSERT_EQ(v, sum);
  for (float v : big) ASSERT_EQ(v, sum);
  for (float v : other) ASSERT_EQ(v, float(p));
}

TEST(Communicator, EqualBlockReduceScatterAndAllgather) {
  auto c = make_world();
  const int p = c.size(), r = c.rank();
  // Block q of every rank's input holds q + 1: the reduction of block r is p (r + 1).
  std::vector<int32_t> in(3 * p), block(3), all(3 * p);
  for (int q = 0; q < p; ++q) std::fill(in.begin() + 3 * q, in.begin() + 3 * q + 3, q + 1);
  for (auto a : algorithms_for(Collective::reduce_scatter)) {
    c.reduce_scatter<int32_t>(in, block, ReduceOp::sum, a);
    EXPECT_EQ(block, std::vector<int32_t>(3, p * (r + 1))) << name(a);
  }
  for (auto a : algorithms_for(Collective::allgather)) {
    c.allgather<int32_t>(block, all, a);
    for (int q = 0; q < p; ++q) EXPECT_EQ(all[3 * q], p * (q + 1)) << name(a);
  }
}

TEST(Communicator, TestPollsToCompletion) {
  auto c = make_world();
  std::vector<float> data(1 << 16, 1.0f);
  Work work = c.allreduce_async<float>(data, data, ReduceOp::sum, Algorithm::ring);
  while (!work.test()) {
  }
  EXPECT_TRUE(work.completed());
  EXPECT_EQ(data.front(), float(c.size()));
  EXPECT_EQ(data.back(), float(c.size()));
}

TEST(Communicator, SplitByParity) {
  auto c = make_world();
  auto half = c.split(c.rank() % 2, c.rank());
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(half->size(), (c.size() + 1 - c.rank() % 2) / 2);
  EXPECT_EQ(half->rank(), c.rank() / 2);
  std::vector<int64_t> v{c.rank()};
  half->allreduce<int64_t>(v, ReduceOp::sum, Algorithm::recursive_doubling);
  int64_t want = 0;
  for (int q = c.rank() % 2; q < c.size(); q += 2) want += q;
  EXPECT_EQ(v[0], want);
  // A negative colour opts out.
  auto none = c.split(c.rank() == 0 ? -1 : 0, 0);
  EXPECT_EQ(none.has_value(), c.rank() != 0);
}

TEST(Communicator, PointToPointRing) {
  auto c = make_world();
  const int p = c.size(), r = c.rank();
  std::vector<int32_t> out(5, r), in(5, -1);
  Work receive = c.recv_async<int32_t>(in, (r - 1 + p) % p, 7);
  Work send = c.send_async<int32_t>(out, (r + 1) % p, 7);
  send.wait();
  receive.wait();
  EXPECT_EQ(in, std::vector<int32_t>(5, (r - 1 + p) % p));
  // A zero-size message is a real message: it matches the first receive
  // on its tag, and the one-element message after it the second (skipping
  // the empty send would hand the second message to the first receive: a
  // truncation error, and the second receive would never complete).
  std::vector<int32_t> empty, one{-1};
  std::vector<int32_t> payload{1000 + r};
  Work r0 = c.recv_async<int32_t>(empty, (r - 1 + p) % p, 8);
  Work r1 = c.recv_async<int32_t>(one, (r - 1 + p) % p, 8);
  Work s0 = c.send_async<int32_t>(empty, (r + 1) % p, 8);
  Work s1 = c.send_async<int32_t>(payload, (r + 1) % p, 8);
  r0.wait();
  r1.wait();
  s0.wait();
  s1.wait();
  EXPECT_TRUE(r0.completed());
  EXPECT_EQ(one[0], 1000 + (r - 1 + p) % p);
}

TEST(Communicator, InvalidPeerIsNamed) {
  auto c = make_world();
  std::vector<float> data(2);
  for (int peer : {-1, c.size()}) {
    try {
      c.send_async<float>(data, peer, 1);
      ADD_FAILURE() << "no exception for peer " << peer;
    } catch (const CollectiveError& e) {
      EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(c.rank()) + ": send: rank " +
                                           std::to_string(peer) + " is outside [0, " +
                                           std::to_string(c.size()) + ")");
    }
  }
  EXPECT_THROW(c.recv_async<float>(data, c.size() + 3, 1), CollectiveError);
}

TEST(Communicator, WaitingTwiceIsHarmlessAndAFailureStaysAFailure) {
  auto c = make_world();
  std::vector<float> data{1.0f, 2.0f};
  Work w = c.allreduce_async<float>(data, data);
  w.wait();
  w.wait();  // a second wait returns at once, the result untouched
  EXPECT_TRUE(w.test());
  EXPECT_EQ(data[0], static_cast<float>(c.size()));
  std::vector<float> one(1);
  Work bad = c.send_async<float>(one, 0, -5);  // MPI_ERR_TAG
  EXPECT_THROW(bad.wait(), CollectiveError);
  EXPECT_THROW(bad.wait(), CollectiveError);  // not silently fine the second time
  EXPECT_THROW(bad.test(), CollectiveError);
}

// Ranks that disagree about a call: an error on every rank, naming the call
// and the ranks, never a hang. Rank 0 is the odd one out.
void expect_disagreement(const std::function<void(Communicator&)>& call, const std::string& what) {
  auto c = make_world(60, true);
  if (c.size() < 2) GTEST_SKIP() << "needs two ranks";
  try {
    call(c);
    ADD_FAILURE() << "rank " << c.rank() << ": no error for " << what;
  } catch (const CollectiveError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("rank " + std::to_string(c.rank()) + ":"), std::string::npos) << text;
    EXPECT_NE(text.find(what), std::string::npos) << text;
  }
  c.barrier();  // every rank is still in step
}

TEST(CallChecks, CountsThatDiffer) {
  expect_disagreement([](Communicator& c) {
    std::vector<float> data(c.rank() == 0 ? 4 : 5);
    c.allreduce<float>(data);
  }, "rank 0 called allreduce(f32, 4 elements, sum)");
}

TEST(CallChecks, DtypesThatDiffer) {
  expect_disagreement([](Communicator& c) {
    if (c.rank() == 0) {
      std::vector<double> data(3);
      c.allreduce<double>(data);
    } else {
      std::vector<float> data(3);
      c.allreduce<float>(data);
    }
  }, "allreduce(f64, 3 elements, sum)");
}

TEST(CallChecks, ReduceOpsThatDiffer) {
  expect_disagreement([](Communicator& c) {
    std::vector<int32_t> data(3);
    c.allreduce<int32_t>(data, c.rank() == 0 ? ReduceOp::max : ReduceOp::sum);
  }, "allreduce(i32, 3 elements, max)");
}

TEST(CallChecks, RootsThatDiffer) {
  expect_disagreement([](Communicator& c) {
    std::vector<int64_t> data(2);
    c.broadcast<int64_t>(data, c.rank() == 0 ? 1 : 0);
  }, "broadcast(i64, 2 elements, root 1)");
}

TEST(CallChecks, OperationsThatDiffer) {
  expect_disagreement([](Communicator& c) {
    std::vector<float> data(2);
    if (c.rank() == 0) {
      c.broadcast<float>(data, 0);
    } else {
      c.allreduce<float>(data);
    }
  }, "called broadcast(f32, 2 elements, root 0)");
}

TEST(CallChecks, AlltoallvCountsThatDisagree) {
  expect_disagreement([](Communicator& c) {
    const int p = c.size();
    // Every rank sends one element to each rank; rank 1 expects two from rank 0.
    std::vector<std::size_t> sends(p, 1), recvs(p, 1);
    if (c.rank() == 1) recvs[0] = 2;
    std::vector<float> out(p), in(c.rank() == 1 ? p + 1 : p);
    c.alltoallv<float>(out, sends, in, recvs);
  }, "alltoallv");
}

TEST(CallChecks, ALocalArgumentErrorReachesEveryRank) {
  expect_disagreement([](Communicator& c) {
    std::vector<float> send(4), recv(c.rank() == 0 ? 3 : 4);
    c.allreduce<float>(send, recv);
  }, "allreduce");
}

// A call one rank skips shows where the ranks' next calls differ.
TEST(CallChecks, ASkippedCallIsCaughtAtTheNextOne) {
  expect_disagreement([](Communicator& c) {
    std::vector<float> data(2);
    if (c.rank() != 0) c.allreduce<float>(data);  // rank 0 skips it
    c.barrier();
  }, "rank 0 called barrier() as collective #0");
}

// MPI's int counts at their bound, on a 16-byte buffer: a message of more
// than INT_MAX bytes, and a native call of more than INT_MAX elements, are
// refused before MPI (or anything else) touches the buffer, on every rank.
TEST(Limits, MpiCountsBeyondIntMaxAreRefused) {
  auto c = make_world();
  std::vector<float> small(4);
  detail::Transfers t(c.mpi_comm(), 7, c.rank(), c.size());
  const std::size_t too_many = static_cast<std::size_t>(INT_MAX) + 1;
  for (const bool send : {true, false}) {
    try {
      send ? t.isend(c.rank(), small.data(), too_many) : t.irecv(c.rank(), small.data(), too_many);
      ADD_FAILURE() << (send ? "isend" : "irecv") << " of 2^31 bytes: no error";
    } catch (const CollectiveError& e) {
      EXPECT_NE(std::string(e.what()).find("2147483648 bytes exceeds MPI's int count"), std::string::npos)
          << e.what();
    }
  }
  // In place (no copy of the input), MPI's own algorithm: its element count.
  std::span<float> huge(small.data(), too_many);
  try {
    c.allreduce<float>(huge, ReduceOp::sum, Algorithm::native);
    ADD_FAILURE() << "a native allreduce of 2^31 elements: no error";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("count of 2147483648 elements exceeds MPI's int count"), std::string::npos)
        << e.what();
  }
  c.barrier();
}

TEST(Communicator, MaxlocPicksLowestRankOnTies) {
  auto c = make_world();
  // Everyone holds 5 except the last rank, which holds 3: the winner is rank 0.
  std::vector<ValueLoc<float>> v{{c.rank() + 1 == c.size() && c.size() > 1 ? 3.0f : 5.0f, c.rank()}};
  for (auto a : algorithms_for(Collective::allreduce)) {
    auto w = v;
    c.allreduce<ValueLoc<float>>(w, ReduceOp::maxloc, a);
    EXPECT_EQ(w[0].value, 5.0f) << name(a);
    EXPECT_EQ(w[0].loc, 0) << name(a);
  }
}

TEST(Communicator, MpiErrorBecomesExceptionWithMpiText) {
  auto c = make_world();
  std::vector<float> data(1);
  try {
    c.send_async<float>(data, 0, -5).wait();  // negative tag: MPI_ERR_TAG
    FAIL() << "no exception";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("MPI_Isend"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tag"), std::string::npos) << e.what();
  }
}

TEST(Communicator, BadSizesNameOpArgumentAndRank) {
  auto c = make_world();
  std::vector<float> a(4), b(3);
  try {
    c.allreduce_async<float>(a, b);
    FAIL() << "no exception";
  } catch (const CollectiveError& e) {
    EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(c.rank()) +
                                         ": allreduce: recv has 3 elements, expected 4");
  }
  std::vector<std::size_t> counts(c.size() + 1, 1);
  EXPECT_THROW(c.allgather_v_async<float>(b, a, counts), CollectiveError);
  EXPECT_THROW(c.broadcast_async<float>(a, c.size()), CollectiveError);
  EXPECT_THROW(c.allreduce_async<float>(a, a, ReduceOp::maxloc), std::invalid_argument);
  EXPECT_THROW(c.allreduce_async<float>(a, a, ReduceOp::sum, Algorithm::binomial),
               std::invalid_argument);
}

TEST(Communicator, TimeoutRaisesWhenAPeerNeverComes) {
  auto c = make_world();
  if (c.size() < 2) GTEST_SKIP() << "needs two ranks";
  // Without the call check, which would time out first (and cannot tell
  // which rank it waits for): the algorithm's own deadline names the peer.
  auto quick = make_world(0.5, false);
  auto options = quick.options();
  options.on_timeout = CommunicatorOptions::OnTimeout::raise;
  quick.set_options(options);
  if (c.rank() == 0) {
    // Rank 1 never joins this allreduce.
    std::vector<float> data(3, 1.0f);
    try {
      quick.allreduce<float>(data, ReduceOp::sum, Algorithm::recursive_doubling);
      ADD_FAILURE() << "no timeout";
    } catch (const CollectiveTimeout& e) {
      const std::string text = e.what();
      EXPECT_NE(text.find("timed out after"), std::string::npos) << text;
      EXPECT_NE(text.find("rank 1"), std::string::npos) << text;
      EXPECT_NE(text.find("allreduce(recursive_doubling"), std::string::npos) << text;
    }
  }
  c.barrier();
}

TEST(Tuning, ChoosesFirstMatchPreferringExactRankCount) {
  TuningTable table({{Collective::allreduce, 0, 4096, 0, Algorithm::recursive_doubling},
                     {Collective::allreduce, 0, 4096, 4, Algorithm::ring},
                     {Collective::allreduce, 4097, 0, 0, Algorithm::rabenseifner}});
  EXPECT_EQ(table.choose(Collective::allreduce, 100, 2), Algorithm::recursive_doubling);
  EXPECT_EQ(table.choose(Collective::allreduce, 100, 4), Algorithm::ring);
  EXPECT_EQ(table.choose(Collective::allreduce, 1 << 30, 4), Algorithm::rabenseifner);
  EXPECT_EQ(table.choose(Collective::allgather, 100, 4), Algorithm::native);
}

TEST(Tuning, BuiltInTableParsesAndOnlyNamesAlgorithmsTheOpsHave) {
  const auto& table = TuningTable::defaults();
  ASSERT_FALSE(table.rules().empty());
  for (const auto& rule : table.rules()) EXPECT_TRUE(implements(rule.algorithm, rule.op));
  // Round trip through the text format keeps every rule, field by field, and
  // the provenance.
  const TuningTable back = TuningTable::parse(table.text(), "round trip");
  ASSERT_EQ(back.rules().size(), table.rules().size());
  for (size_t i = 0; i < table.rules().size(); ++i) {
    const TuningRule& a = table.rules()[i];
    const TuningRule& b = back.rules()[i];
    EXPECT_EQ(a.op, b.op) << "rule " << i;
    EXPECT_EQ(a.min_bytes, b.min_bytes) << "rule " << i;
    EXPECT_EQ(a.max_bytes, b.max_bytes) << "rule " << i;
    EXPECT_EQ(a.ranks, b.ranks) << "rule " << i;
    EXPECT_EQ(a.algorithm, b.algorithm) << "rule " << i;
  }
  EXPECT_EQ(back.measured_on(), table.measured_on());
  EXPECT_FALSE(table.measured_on().empty());
  // And the tables choose alike at every rule's edges.
  for (const TuningRule& r : table.rules()) {
    for (std::size_t bytes : {r.min_bytes, r.max_bytes}) {
      for (int ranks : {2, 3, 4, 8}) {
        EXPECT_EQ(back.choose(r.op, bytes, ranks), table.choose(r.op, bytes, ranks));
      }
    }
  }
}

TEST(Tuning, SavesAndLoadsTextFormat) {
  auto c = make_world();
  TuningTable table({{Collective::allgather, 8, 1024, 3, Algorithm::ring}}, "test");
  const auto path = std::filesystem::temp_directory_path() /
                    ("gnnrt_tuning_" + std::to_string(getpid()) + "_" + std::to_string(c.rank()) + ".pbtxt");
  table.save(path.string());
  const auto loaded = TuningTable::load(path.string());
  ASSERT_EQ(loaded.rules().size(), 1u);
  EXPECT_EQ(loaded.rules()[0].op, Collective::allgather);
  EXPECT_EQ(loaded.rules()[0].min_bytes, 8u);
  EXPECT_EQ(loaded.rules()[0].max_bytes, 1024u);
  EXPECT_EQ(loaded.rules()[0].ranks, 3);
  EXPECT_EQ(loaded.rules()[0].algorithm, Algorithm::ring);
  EXPECT_EQ(loaded.measured_on(), "test");
  std::filesystem::remove(path);
}

TEST(Tuning, BadFilesNameFileLineAndRule) {
  try {
    TuningTable::parse("rule { op: \"allreduce\"\n algorithm: 7 }", "t.pbtxt");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("t.pbtxt:2:"), std::string::npos) << e.what();
  }
  try {
    TuningTable::parse("rule { op: \"broadcast\" algorithm: \"ring\" }", "t.pbtxt");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "t.pbtxt: rule 1: broadcast has no algorithm 'ring'");
  }
  EXPECT_THROW(TuningTable::parse("rule { op: \"allreduce\" algorithm: \"fast\" }", "t"),
               std::runtime_error);
  EXPECT_THROW(TuningTable::load("/nonexistent/tuning.pbtxt"), std::runtime_error);
}

TEST(Tuning, ForcedAlgorithmAndPerCallOverrideTable) {
  auto c = make_world();
  auto options = c.options();
  options.tuning = std::make_shared<const TuningTable>(
      std::vector<TuningRule>{{Collective::allreduce, 0, 0, 0, Algorithm::ring}});
  c.set_options(options);
  EXPECT_EQ(c.resolve(Collective::allreduce, 64, Algorithm::automatic), Algorithm::ring);
  EXPECT_EQ(c.resolve(Collective::allreduce, 64, Algorithm::native), Algorithm::native);
  options.algorithm = Algorithm::rabenseifner;
  c.set_options(options);
  EXPECT_EQ(c.resolve(Collective::allreduce, 64, Algorithm::automatic), Algorithm::rabenseifner);
  // A forced algorithm the op lacks leaves that op to the table.
  EXPECT_EQ(c.resolve(Collective::broadcast, 64, Algorithm::automatic), Algorithm::native);
}

}  // namespace
}  // namespace gnnrt::collectives
