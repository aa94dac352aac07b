#include "collectives/work.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fmt/format.h>

#include "collectives/call_check.h"
#include "collectives/error.h"
#include "collectives/work_state.h"

namespace gnnrt::collectives {
namespace detail {

WorkState::WorkState(std::shared_ptr<CommunicatorImpl> owner_, std::string description_,
                     MPI_Comm comm, int tag)
    : owner(std::move(owner_)),
      description(std::move(description_)),
      transfers(comm, tag, owner->rank, owner->size),
      scratch(owner->pool),
      started(std::chrono::steady_clock::now()) {}

WorkState::~WorkState() {
  if (registered) std::erase(owner->in_flight, this);
}

namespace {

// "allreduce(ring, 4096 bytes of f32)": a collective in errors and logs.
std::string describe_call(const Call& call, Algorithm algorithm) {
  return fmt::format("{}({}, {} bytes of {})", name(call.op), name(algorithm), call.bytes(),
                     name(call.type));
}

}  // namespace

std::string WorkState::describe() const {
  return description.empty() ? describe_call(call, algorithm) : description;
}

void WorkState::launch(Task task_) {
  task = std::move(task_);
  owner->in_flight.push_back(this);
  registered = true;
  task.start();
  progress();
}

bool advance(Transfers& transfers, Task& task) {
  while (!task.done()) {
    if (!transfers.poll()) return false;
    auto suspended = transfers.take_suspended();
    if (!suspended) break;
    suspended.resume();
  }
  task.rethrow_if_failed();
  return true;
}

void WorkState::fail(std::exception_ptr e) {
  error = std::move(e);
  transfers.abandon();
  finished = true;
  if (registered) {
    std::erase(owner->in_flight, this);
    registered = false;
  }
}

bool WorkState::progress() {
  if (finished) return true;
  try {
    if (!advance(transfers, task)) return false;
  } catch (...) {
    error = std::current_exception();
    transfers.abandon();
  }
  finished = true;
  // After a failure a send may still read from scratch (sends cannot be
  // cancelled): its buffers stay out of the pool.
  if (!error) scratch.release();
  if (registered) {
    std::erase(owner->in_flight, this);
    registered = false;
  }
  return true;
}

namespace {

using Clock = std::chrono::steady_clock;

// A wait this long looks for a peer's message of another call (a peer that
// called with another count): an error at once rather than at the deadline.
constexpr auto kProbeAfter = std::chrono::milliseconds(2);

Clock::duration deadline_of(const CommunicatorImpl& impl) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(impl.options.timeout_seconds));
}

}  // namespace

void deadline_passed(const CommunicatorImpl& impl, const std::string& what,
                     std::chrono::steady_clock::time_point started, const std::string& waiting_for) {
  const double waited = std::chrono::duration<double>(Clock::now() - started).count();
  const std::string message =
      fmt::format("rank {}: {} timed out after {:.1f} s waiting for {} (deadline {} s; set "
                  "GNNRT_COLLECTIVE_TIMEOUT to change it)",
                  impl.rank, what, waited, waiting_for, impl.options.timeout_seconds);
  if (impl.options.on_timeout == CommunicatorOptions::OnTimeout::raise) {
    throw CollectiveTimeout(message);
  }
  spdlog::error("{}; aborting the job", message);
  spdlog::default_logger()->flush();
  std::fprintf(stderr, "gnnrt: error: %s; aborting the job\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 124);
  std::abort();
}

void run_blocking(CommunicatorImpl& impl, const Call& call, Algorithm algorithm) {
  Transfers& transfers = *impl.blocking_transfers;
  transfers.reset(impl.next_tag(call.signature));
  PooledScratch& scratch = impl.blocking_scratch;
  const auto started = Clock::now();
  const auto limit = deadline_of(impl);
  Task task = run(algorithm, transfers, call, scratch);
  try {
    task.start();
    unsigned polls = 0;
    while (!advance(transfers, task)) {
      // Operations started before this one advance too (see Work::wait).
      if (!impl.in_flight.empty()) impl.progress_all();
      if ((++polls & 63) == 0) {
        const auto waited = Clock::now() - started;
        if (waited > limit) {
          deadline_passed(impl, describe_call(call, algorithm), started, transfers.pending_description());
        }
        if (waited > kProbeAfter) {
          if (const int other = transfers.foreign_sender(); other >= 0) {
            throw CollectiveError(different_calls(impl.rank, describe_call(call, algorithm), other));
          }
        }
      }
    }
  } catch (...) {
    transfers.abandon();
    scratch.forget();
    throw;
  }
  scratch.release();
}

}  // namespace detail

Work::Work() = default;
Work::Work(std::unique_ptr<detail::WorkState> state) : state_(std::move(state)) {}
Work::Work(Work&&) noexcept = default;

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    if (state_ && !state_->finished) {
      try {
        wait();
      } catch (const std::exception& e) {
        spdlog::error("{} failed while being replaced: {}", state_->describe(), e.what());
      }
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Work::~Work() {
  if (state_ && !state_->finished) {
    try {
      wait();
    } catch (const std::exception& e) {
      spdlog::error("{} failed while its Work was destroyed: {}", state_->describe(), e.what());
    }
  }
}

bool Work::test() {
  if (!state_) return true;
  // Advances every operation in flight, this one included (it stays
  // registered until it finishes), so it is polled once per test().
  state_->owner->progress_all();
  const bool done = state_->finished;
  // A failed operation stays failed: every wait() and test() rethrows.
  if (done && state_->error) std::rethrow_exception(state_->error);
  return done;
}

void Work::wait() {
  if (!state_) return;
  const auto limit = detail::deadline_of(*state_->owner);
  unsigned polls = 0;
  while (!test()) {
    // Reading the clock costs more than a poll: read it every 64 polls.
    if ((++polls & 63) != 0) continue;
    const auto waited = detail::Clock::now() - state_->started;
    if (waited > limit) {
      detail::deadline_passed(*state_->owner, state_->describe(), state_->started,
                              state_->transfers.pending_description());
    }
    if (waited > detail::kProbeAfter && state_->description.empty()) {  // a collective, not point to point
      if (const int other = state_->transfers.foreign_sender(); other >= 0) {
        state_->fail(std::make_exception_ptr(
            CollectiveError(detail::different_calls(state_->owner->rank, state_->describe(), other))));
        std::rethrow_exception(state_->error);
      }
    }
  }
}

bool Work::completed() const { return !state_ || state_->finished; }

std::string Work::description() const { return state_ ? state_->describe() : "nothing"; }

}  // namespace gnnrt::collectives
