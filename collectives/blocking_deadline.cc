#include "collectives/blocking_deadline.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

namespace gnnrt::collectives::detail {
namespace {

struct Armed {
  std::atomic<long long> started_ns{0};  // 0: disarmed
  std::atomic<long long> limit_ns{0};
  std::atomic<const char*> op{""}, algorithm{""};
  std::atomic<std::size_t> bytes{0};
  std::atomic<int> rank{0};
};
// One slot per thread that calls MPI (threads beyond share, which only
// makes a shared slot's report name one of the calls).
constexpr int kSlots = 8;
Armed slots[kSlots];
std::atomic<int> next_slot{0};

Armed& my_slot() {
  thread_local Armed& slot = slots[next_slot.fetch_add(1) % kSlots];
  return slot;
}

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Ends the process when a slot's call is past its deadline.
void check(const Armed& armed) {
  const long long started = armed.started_ns.load(std::memory_order_acquire);
  if (started == 0) return;
  const long long waited = now_ns() - started;
  if (waited <= armed.limit_ns.load(std::memory_order_relaxed)) return;
  char message[512];
  std::snprintf(message, sizeof message,
                "rank %d: %s(%s, %zu bytes) timed out after %.1f s in MPI's blocking call "
                "(MPI does not say which peer it waits for; deadline %.0f s; set "
                "GNNRT_COLLECTIVE_TIMEOUT to change it); aborting the job",
                armed.rank.load(), armed.op.load(), armed.algorithm.load(), armed.bytes.load(),
                waited * 1e-9, armed.limit_ns.load() * 1e-9);
  spdlog::error("{}", message);
  spdlog::default_logger()->flush();
  std::fprintf(stderr, "gnnrt: error: %s\n", message);
  std::fflush(stderr);
  _exit(124);
}

void watch() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (const Armed& armed : slots) check(armed);
  }
}

}  // namespace

BlockingDeadline::BlockingDeadline(const char* op, const char* algorithm, std::size_t bytes,
                                   int rank, double seconds) {
  static std::once_flag started;
  std::call_once(started, [] { std::thread(watch).detach(); });
  Armed& armed = my_slot();
  armed.op.store(op, std::memory_order_relaxed);
  armed.algorithm.store(algorithm, std::memory_order_relaxed);
  armed.bytes.store(bytes, std::memory_order_relaxed);
  armed.rank.store(rank, std::memory_order_relaxed);
  armed.limit_ns.store(static_cast<long long>(seconds * 1e9), std::memory_order_relaxed);
  armed.started_ns.store(now_ns(), std::memory_order_release);
}

BlockingDeadline::~BlockingDeadline() { my_slot().started_ns.store(0, std::memory_order_release); }

}  // namespace gnnrt::collectives::detail
