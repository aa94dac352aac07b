#include "launch/control_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>

#include <array>
#include <deque>

#include "launch/frames.h"

namespace gnnrt::launch {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {
std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

class ControlServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ControlServer& server, SessionId id, tcp::socket socket)
      : server_(server), id_(id), socket_(std::move(socket)), timer_(server.io_),
        reader_(server.limits_.max_frame_bytes) {
    boost::system::error_code ec;
    const auto peer = socket_.remote_endpoint(ec);
    peer_ = ec ? "?" : fmt::format("{}:{}", peer.address().to_string(), peer.port());
  }

  void start() {
    arm(server_.limits_.hello_seconds);
    read();
  }
  void send(std::string frame) {
    outbox_.push_back(std::move(frame));
    if (outbox_.size() == 1) write_next();
  }
  void close() {
    closed_ = true;
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }
  bool registered() const { return registered_; }
  const std::string& peer() const { return peer_; }

 private:
  // The deadline for the next message: the hello timeout, then the idle one.
  void arm(double s) {
    timer_.expires_after(seconds(s));
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->closed_) return;
      self->server_.drop(self->id_,
                         self->registered_ ? fmt::format("silent for {:.1f} s", self->server_.limits_.idle_seconds)
                                           : fmt::format("no valid hello within {:.1f} s",
                                                         self->server_.limits_.hello_seconds),
                         self->registered_);
    });
  }
  void read() {
    socket_.async_read_some(asio::buffer(inbox_), [self = shared_from_this()](boost::system::error_code ec,
                                                                              size_t n) {
      if (self->closed_) return;
      if (ec) {
        std::string why = ec == asio::error::eof ? "connection closed" : ec.message();
        if (self->reader_.buffered() > 0) why += fmt::format(" inside a frame ({} bytes pending)", self->reader_.buffered());
        self->server_.drop(self->id_, why, self->registered_);
        return;
      }
      self->reader_.append(self->inbox_.data(), n);
      proto::RankMessage m;
      std::string error;
      for (;;) {
        const auto r = self->reader_.next(m, error);
        if (r == FrameReader::Result::kNeedMore) break;
        if (r == FrameReader::Result::kBad) {
          self->server_.drop(self->id_, error, self->registered_);
          return;
        }
        if (!self->handle(m)) return;
      }
      self->read();
    });
  }
  bool handle(const proto::RankMessage& m) {
    if (!registered_) {
      if (!m.has_hello()) {
        server_.drop(id_, "first message is not a hello", false);
        return false;
      }
      if (!server_.check_(m.hello())) {
        server_.drop(id_, fmt::format("wrong token for rank {} of attempt {}", m.hello().rank(), m.hello().attempt()),
                     false);
        return false;
      }
      if (server_.connections() - server_.pending() >= server_.limits_.max_registered) {
        server_.drop(id_, "too many registered ranks", false);
        return false;
      }
      registered_ = true;
      arm(server_.limits_.idle_seconds);
      if (!server_.handler_.on_hello(id_, m.hello())) {
        registered_ = false;
        server_.drop(id_, fmt::format("hello of rank {} (attempt {}) refused", m.hello().rank(),
                                      m.hello().attempt()), false);
        return false;
      }
      return !closed_;
    }
    if (m.has_hello()) {
      server_.drop(id_, "a second hello", true);
      return false;
    }
    arm(server_.limits_.idle_seconds);
    server_.handler_.on_message(id_, m);
    return !closed_;
  }
  void write_next() {
    asio::async_write(socket_, asio::buffer(outbox_.front()),
                      [self = shared_from_this()](boost::system::error_code ec, size_t) {
                        if (self->closed_) return;
                        if (ec) {
                          self->server_.drop(self->id_, "write failed: " + ec.message(), self->registered_);
                          return;
                        }
                        self->outbox_.pop_front();
                        if (!self->outbox_.empty()) self->write_next();
                      });
  }

  ControlServer& server_;
  SessionId id_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  FrameReader reader_;
  std::array<char, 4096> inbox_{};
  std::deque<std::string> outbox_;
  std::string peer_;
  bool registered_ = false, closed_ = false;
};

ControlServer::ControlServer(asio::io_context& io, const asio::ip::address& address, TokenCheck check,
                             ControlLimits limits, Handler& handler)
    : io_(io), acceptor_(io, tcp::endpoint(address, 0)), check_(std::move(check)), limits_(limits),
      handler_(handler), retry_(io) {
  // Not inherited by mpirun and the ranks it starts.
  ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
  accept();
}

ControlServer::~ControlServer() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  retry_.cancel();
  for (auto& [id, s] : sessions_) s->close();
}

tcp::endpoint ControlServer::endpoint() const { return acceptor_.local_endpoint(); }

int ControlServer::pending() const {
  int n = 0;
  for (const auto& [id, s] : sessions_) n += s->registered() ? 0 : 1;
  return n;
}

void ControlServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors, say: log, and try again in a moment rather than
      // spinning.
      spdlog::warn("control: accept failed: {}; retrying in 100 ms", ec.message());
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](boost::system::error_code e) {
        if (!e) accept();
      });
      return;
    }
    if (pending() >= limits_.max_pending) {
      ++dropped_;
      spdlog::warn("control: refused a connection: {} connections are waiting to register", pending());
      boost::system::error_code ignored;
      socket.close(ignored);
    } else {
      socket.set_option(tcp::no_delay(true), ec);
      ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
      const SessionId id = next_id_++;
      auto s = std::make_shared<Session>(*this, id, std::move(socket));
      sessions_.emplace(id, s);
      s->start();
    }
    accept();
  });
}

void ControlServer::drop(SessionId id, const std::string& why, bool registered) {
  const auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  auto s = it->second;
  sessions_.erase(it);
  s->close();
  if (registered) {
    handler_.on_closed(id, why);
  } else {
    ++dropped_;
    spdlog::warn("control: dropped a connection from {}: {}", s->peer(), why);
  }
}

void ControlServer::broadcast(const proto::LauncherMessage& message) {
  const std::string frame = encode_frame(message);
  for (auto& [id, s] : sessions_) {
    if (s->registered()) s->send(frame);
  }
}

void ControlServer::close(SessionId id) {
  const auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  auto s = it->second;
  sessions_.erase(it);
  s->close();
}

void ControlServer::close_all() {
  auto sessions = std::move(sessions_);
  sessions_.clear();
  for (auto& [id, s] : sessions) s->close();
}

}  // namespace gnnrt::launch
