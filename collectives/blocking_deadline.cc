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
Armed armed;

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void watch() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const long long started = armed.started_ns.load(std::memory_order_acquire);
    if (started == 0) continue;
    const long long waited = now_ns() - started;
    if (waited <= armed.limit_ns.load(std::memory_order_relaxed)) continue;
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
}

}  // namespace

BlockingDeadline::BlockingDeadline(const char* op, const char* algorithm, std::size_t bytes,
                                   int rank, double seconds) {
  static std::once_flag started;
  std::call_once(started, [] { std::thread(watch).detach(); });
  armed.op.store(op, std::memory_order_relaxed);
  armed.algorithm.store(algorithm, std::memory_order_relaxed);
  armed.bytes.store(bytes, std::memory_order_relaxed);
  armed.rank.store(rank, std::memory_order_relaxed);
  armed.limit_ns.store(static_cast<long long>(seconds * 1e9), std::memory_order_relaxed);
  armed.started_ns.store(now_ns(), std::memory_order_release);
}

BlockingDeadline::~BlockingDeadline() { armed.started_ns.store(0, std::memory_order_release); }

}  // namespace gnnrt::collectives::detail
