// A collective algorithm is a C++20 coroutine: it posts non-blocking
// point-to-point messages through its Transfers (transfers.h) and
// `co_await`s them, so the same code runs blocking (wait) and non-blocking
// (test, several in flight): the Work that owns it resumes it whenever the
// requests it waits for have completed. Algorithms may `co_await` other
// Tasks (phases such as a reduce-scatter inside an allreduce).
//
// Internal to collectives/.
#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>
#include <memory_resource>
#include <utility>

namespace gnnrt::collectives::detail {

// Coroutine frames come from a per-thread pool, not malloc: the same few
// frame sizes recur on every call, and a small collective's latency is
// otherwise a tenth malloc and free. A frame must be freed on the thread
// that made it: a Work stays on the thread that started it (collectives/
// is used from one thread, as MPI_THREAD_FUNNELED asks). The pools are
// never destroyed (a frame may outlive its thread's thread_local objects).
std::pmr::memory_resource& frame_pool();

class Task {
 public:
  struct promise_type {
    std::coroutine_handle<> continuation = std::noop_coroutine();
    std::exception_ptr error;

    Task get_return_object() { return Task{Handle::from_promise(*this)}; }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct ToContinuation {
        bool await_ready() noexcept { return false; }
        std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> self) noexcept {
          return self.promise().continuation;
        }
        void await_resume() noexcept {}
      };
      return ToContinuation{};
    }
    void return_void() {}
    void unhandled_exception() { error = std::current_exception(); }

    static void* operator new(std::size_t bytes) { return frame_pool().allocate(bytes); }
    static void operator delete(void* frame, std::size_t bytes) {
      frame_pool().deallocate(frame, bytes);
    }
  };
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  explicit Task(Handle handle) : handle_(handle) {}
  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  ~Task() {
    if (handle_) handle_.destroy();
  }

  // Top level: run until the first wait (or the end).
  void start() { handle_.resume(); }
  bool done() const { return !handle_ || handle_.done(); }
  // Rethrows what the coroutine threw, once it is done.
  void rethrow_if_failed() const {
    if (handle_ && handle_.promise().error) std::rethrow_exception(handle_.promise().error);
  }

  // Nested: `co_await phase(...)` runs the phase, then continues the caller.
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller) noexcept {
    handle_.promise().continuation = caller;
    return handle_;
  }
  void await_resume() const { rethrow_if_failed(); }

 private:
  Handle handle_;
};

}  // namespace gnnrt::collectives::detail
