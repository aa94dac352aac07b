#include "collectives/work.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <fmt/format.h>

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

std::string WorkState::describe() const {
  if (!description.empty()) return description;
  return fmt::format("{}({}, {} bytes of {})", name(call.op), name(algorithm), call.bytes(),
                     name(call.type));
}

void WorkState::launch(Task task_) {
  task = std::move(task_);
  owner->in_flight.push_back(this);
  registered = true;
  task.start();
  progress();
}

bool WorkState::progress() {
  if (finished) return true;
  try {
    while (!task.done()) {
      if (!transfers.poll()) return false;
      auto suspended = transfers.take_suspended();
      if (!suspended) break;
      suspended.resume();
    }
    task.rethrow_if_failed();
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

[[noreturn]] void deadline_passed(WorkState& state) {
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - state.started).count();
  const std::string message =
      fmt::format("rank {}: {} timed out after {:.1f} s waiting for {} (deadline {} s; set "
                  "GNNRT_COLLECTIVE_TIMEOUT to change it)",
                  state.owner->rank, state.describe(), waited,
                  state.transfers.pending_description(), state.owner->options.timeout_seconds);
  if (state.owner->options.on_timeout == CommunicatorOptions::OnTimeout::raise) {
    throw CollectiveTimeout(message);
  }
  spdlog::error("{}; aborting the job", message);
  spdlog::default_logger()->flush();
  std::fprintf(stderr, "gnnrt: error: %s; aborting the job\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 124);
  std::abort();
}

}  // namespace
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
  if (done && state_->error) std::rethrow_exception(std::exchange(state_->error, nullptr));
  return done;
}

void Work::wait() {
  if (!state_) return;
  const auto limit = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(state_->owner->options.timeout_seconds));
  unsigned polls = 0;
  while (!test()) {
    // The clock costs ~20 ns; read it every 64 polls.
    if ((++polls & 63) == 0 && std::chrono::steady_clock::now() - state_->started > limit) {
      detail::deadline_passed(*state_);
    }
  }
}

bool Work::completed() const { return !state_ || state_->finished; }

std::string Work::description() const { return state_ ? state_->describe() : "nothing"; }

}  // namespace gnnrt::collectives
