#include "launch/control_client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <future>
#include <stdexcept>
#include <thread>

#include "launch/control.pb.h"
#include "launch/frames.h"

namespace gnnrt::launch {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxFrameBytes = 64 * 1024;
constexpr int kLauncherLostStatus = 4;

double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  try {
    const double s = std::stod(v);
    if (s > 0) return s;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(fmt::format("{}='{}' is not a positive number of seconds", name, v));
}

std::string host_name() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof buffer - 1) != 0) return "?";
  return buffer;
}

// bench/chaos.py's faults, raised by a signal, acted on at an epoch boundary.
std::atomic<int> chaos_fault{0};  // 0 none, SIGUSR1 hang, SIGUSR2 exit
extern "C" void on_chaos_signal(int sig) { chaos_fault.store(sig); }

// The launcher is gone: this rank must not outlive it.
[[noreturn]] void end_orphan(const std::string& why) {
  const std::string line = "gnnrt: error: lost the launcher (" + why + "); this rank ends itself\n";
  [[maybe_unused]] const ssize_t written = ::write(2, line.data(), line.size());
  spdlog::default_logger()->flush();
  std::_Exit(kLauncherLostStatus);
}

}  // namespace

Fault Fault::parse(const std::string& text) {
  const auto bad = [&] {
    return std::invalid_argument(fmt::format(
        "GNNRT_FAULT='{}': expected KIND:RANK:EPOCH with KIND kill, exit, hang, silent, noregister, flip or killdone", text));
  };
  const size_t a = text.find(':');
  const size_t b = a == std::string::npos ? a : text.find(':', a + 1);
  if (b == std::string::npos) throw bad();
  Fault f;
  const std::string kind = text.substr(0, a);
  if (kind == "kill") f.kind = Kind::kKill;
  else if (kind == "exit") f.kind = Kind::kExit;
  else if (kind == "hang") f.kind = Kind::kHang;
  else if (kind == "silent") f.kind = Kind::kSilent;
  else if (kind == "noregister") f.kind = Kind::kNoRegister;
  else if (kind == "flip") f.kind = Kind::kFlip;
  else if (kind == "killdone") f.kind = Kind::kKillDone;
  else throw bad();
  try {
    size_t used = 0;
    f.rank = std::stoi(text.substr(a + 1, b - a - 1), &used);
    if (used != b - a - 1) throw bad();
    f.epoch = std::stoll(text.substr(b + 1), &used);
    if (used != text.size() - b - 1) throw bad();
  } catch (const std::logic_error&) {
    throw bad();
  }
  if (f.rank < 0 || f.epoch < (f.kind == Kind::kFlip ? 0 : 1)) throw bad();
  return f;
}

struct ControlClient::State {
  asio::io_context io;
  tcp::socket socket{io};
  asio::steady_timer heartbeat{io};
  std::thread thread;
  std::deque<std::string> outbox;
  bool writing = false;
  std::array<char, 4096> inbox{};
  FrameReader reader{kMaxFrameBytes};
  // finishing: Done was sent (a closed connection is then no surprise);
  // closing: the destructor runs. Silence from the launcher ends the rank
  // until closing, so a rank hung after Done (in MPI_Finalize, say) does not
  // outlive its launcher.
  std::atomic<bool> stop{false}, finishing{false}, closing{false};
  Clock::time_point last_ping = Clock::now();
  double interval = 1, lost_after = 30;
  int rank = 0;
  std::optional<Fault> fault;
  std::promise<void> flushed;
  bool flush_wanted = false;

  void send(std::string frame) {
    outbox.push_back(std::move(frame));
    if (!writing) write_next();
  }
  void write_next() {
    if (outbox.empty()) {
      writing = false;
      if (flush_wanted) {
        flush_wanted = false;
        flushed.set_value();
      }
      return;
    }
    writing = true;
    asio::async_write(socket, asio::buffer(outbox.front()), [this](boost::system::error_code ec, size_t) {
      if (ec) {
        if (!finishing) end_orphan("cannot write to it: " + ec.message());
        return;
      }
      outbox.pop_front();
      write_next();
    });
  }
  void beat() {
    // A beat whose timer fired just before the destructor's cancel was
    // queued ahead of the close: it must not arm the timer again, or
    // io.run() never runs out of work and the destructor's join waits
    // until the launcher kills the rank.
    if (closing) return;
    if (Clock::now() - last_ping > std::chrono::duration<double>(lost_after)) {
      end_orphan(fmt::format("no word from it for {:.0f} s", lost_after));
    }
    proto::RankMessage m;
    m.set_heartbeat(true);
    send(encode_frame(m));
    heartbeat.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval)));
    heartbeat.async_wait([this](boost::system::error_code ec) {
      if (!ec) beat();
    });
  }
  void read() {
    socket.async_read_some(asio::buffer(inbox), [this](boost::system::error_code ec, size_t n) {
      if (ec) {
        // After Done the launcher closes the connection only when it gave
        // up on the job (the ranks should have exited): end too.
        if (!closing && ec != asio::error::operation_aborted) {
          end_orphan(ec == asio::error::eof ? "it closed the connection" : ec.message());
        }
        return;
      }
      reader.append(inbox.data(), n);
      proto::LauncherMessage m;
      std::string error;
      for (;;) {
        const auto r = reader.next(m, error);
        if (r == FrameReader::Result::kNeedMore) break;
        if (r == FrameReader::Result::kBad) {
          if (!finishing) end_orphan("bad frame: " + error);
          return;
        }
        last_ping = Clock::now();
        if (m.has_stop() && m.stop() && !stop.exchange(true)) {
          spdlog::info("the launcher asks the job to stop at the next step boundary");
        }
      }
      read();
    });
  }
};

std::unique_ptr<ControlClient> ControlClient::from_environment(int rank, int size) {
  const char* addr = std::getenv("GNNRT_LAUNCH_ADDR");
  if (addr == nullptr || *addr == '\0') return nullptr;
  const char* token = std::getenv("GNNRT_LAUNCH_TOKEN");
  auto s = std::make_shared<State>();
  s->rank = rank;
  s->interval = env_seconds("GNNRT_LAUNCH_HEARTBEAT", 1);
  s->lost_after = env_seconds("GNNRT_LAUNCH_LOST_TIMEOUT", 30);
  if (const char* f = std::getenv("GNNRT_FAULT"); f != nullptr && *f != '\0') s->fault = Fault::parse(f);
  if (const char* c = std::getenv("GNNRT_CHAOS"); c != nullptr && std::string(c) == "1") {
    struct sigaction action {};
    action.sa_handler = on_chaos_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &action, nullptr);
    sigaction(SIGUSR2, &action, nullptr);
  }
  if (s->fault && s->fault->kind == Fault::Kind::kNoRegister && s->fault->rank == rank) {
    spdlog::warn("fault injection: this rank does not register with the launcher");
    return nullptr;
  }
  const std::string where(addr);
  const size_t colon = where.rfind(':');
  if (colon == std::string::npos) {
    throw std::invalid_argument(fmt::format("GNNRT_LAUNCH_ADDR='{}': expected HOST:PORT", where));
  }
  // Connect within 10 s, or say why not.
  tcp::resolver resolver(s->io);
  boost::system::error_code ec = asio::error::timed_out;
  asio::async_connect(s->socket, resolver.resolve(where.substr(0, colon), where.substr(colon + 1)),
                      [&](boost::system::error_code e, const tcp::endpoint&) { ec = e; });
  s->io.run_for(std::chrono::seconds(10));
  if (ec) {
    throw std::runtime_error(fmt::format("rank {}: cannot reach the launcher at {}: {}", rank, where,
                                         ec.message()));
  }
  s->io.restart();
  s->socket.set_option(tcp::no_delay(true));
  proto::RankMessage hello;
  auto* h = hello.mutable_hello();
  h->set_token(token ? token : "");
  h->set_rank(rank);
  h->set_size(size);
  h->set_host(host_name());
  h->set_pid(static_cast<int>(getpid()));
  if (const char* a = std::getenv("GNNRT_LAUNCH_ATTEMPT")) h->set_attempt(std::atoi(a));
  asio::write(s->socket, asio::buffer(encode_frame(hello)));
  State* raw = s.get();
  asio::post(s->io, [raw] {
    raw->read();
    raw->beat();
  });
  s->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<ControlClient>(new ControlClient(std::move(s)));
}

ControlClient::ControlClient(std::shared_ptr<State> state) : state_(std::move(state)) {}

ControlClient::~ControlClient() {
  state_->finishing = true;
  state_->closing = true;
  asio::post(state_->io, [s = state_.get()] {
    boost::system::error_code ignored;
    s->heartbeat.cancel();
    s->socket.shutdown(tcp::socket::shutdown_both, ignored);
    s->socket.close(ignored);
  });
  state_->thread.join();
}

void ControlClient::progress(const proto::Progress& p) {
  proto::RankMessage m;
  *m.mutable_progress() = p;
  asio::post(state_->io, [s = state_.get(), frame = encode_frame(m)]() mutable { s->send(std::move(frame)); });
}

void ControlClient::notice(const std::string& level, const std::string& text) {
  proto::RankMessage m;
  m.mutable_notice()->set_level(level);
  m.mutable_notice()->set_text(text);
  asio::post(state_->io, [s = state_.get(), frame = encode_frame(m)]() mutable { s->send(std::move(frame)); });
}

void ControlClient::done(int status, const std::string& error, bool stopped, int64_t resumed_after) {
  proto::RankMessage m;
  auto* d = m.mutable_done();
  d->set_status(status);
  d->set_error(error);
  d->set_stopped(stopped);
  d->set_resumed_after(resumed_after);
  state_->finishing = true;
  auto written = state_->flushed.get_future();
  asio::post(state_->io, [s = state_.get(), frame = encode_frame(m)]() mutable {
    s->flush_wanted = true;
    s->send(std::move(frame));
  });
  written.wait_for(std::chrono::seconds(5));
  if (const auto& f = state_->fault; f && f->kind == Fault::Kind::kKillDone && f->rank == state_->rank) {
    // Killed once its work is reported done (as in MPI_Finalize): mpirun's
    // status is then the only trace, which must still name this rank.
    spdlog::warn("fault injection: SIGKILL after Done");
    spdlog::default_logger()->flush();
    std::raise(SIGKILL);
  }
}

bool ControlClient::stop_requested() const { return state_->stop.load(); }

void ControlClient::inject_fault(int64_t epoch) {
  if (const int sig = chaos_fault.load(); sig != 0) {
    spdlog::warn("fault injection (chaos): {} after epoch {}", sig == SIGUSR1 ? "hang" : "exit status 3", epoch);
    spdlog::default_logger()->flush();
    if (sig == SIGUSR2) std::_Exit(3);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  const auto& f = state_->fault;
  if (!f || f->rank != state_->rank || f->epoch != epoch || f->kind == Fault::Kind::kFlip ||
      f->kind == Fault::Kind::kKillDone) {
    return;
  }
  spdlog::warn("fault injection: {} after epoch {}",
               f->kind == Fault::Kind::kKill   ? "SIGKILL"
               : f->kind == Fault::Kind::kExit ? "exit status 3"
               : f->kind == Fault::Kind::kHang ? "hang (heartbeats go on)"
                                               : "SIGSTOP (silent)",
               epoch);
  spdlog::default_logger()->flush();
  if (f->kind == Fault::Kind::kNoRegister) return;
  switch (f->kind) {
    case Fault::Kind::kKill:
      std::raise(SIGKILL);
      break;
    case Fault::Kind::kExit:
      std::_Exit(3);
    case Fault::Kind::kHang:
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    case Fault::Kind::kSilent:
      std::raise(SIGSTOP);
      break;
    case Fault::Kind::kNoRegister:
    case Fault::Kind::kFlip:
    case Fault::Kind::kKillDone:
      break;
  }
}

}  // namespace gnnrt::launch
