// The launcher's side of the control protocol (docs/launcher.md): a
// Boost.Asio TCP server on one address and a free port. Each connection must
// send a Hello with its rank's token within the hello timeout; then its
// messages go to the Handler. A connection with the wrong token, an
// oversized, truncated or malformed frame, too many connections, or a
// client that says nothing for the idle timeout is dropped and logged; the
// server keeps serving the others. Connections that have not registered
// have a cap of their own, so strangers cannot crowd out the ranks. Runs on the io_context's thread; the
// Handler is called there.
#pragma once

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "launch/control.pb.h"

namespace gnnrt::launch {

struct ControlLimits {
  size_t max_frame_bytes = 64 * 1024;
  int max_pending = 32;       // connections that have not registered yet
  int max_registered = 1024;  // registered ranks (a job's N, plus a restart's overlap)
  double hello_seconds = 5;   // to send a valid Hello after connecting
  double idle_seconds = 30;   // the longest silence of a registered rank
};

class ControlServer {
 public:
  using SessionId = uint64_t;
  struct Handler {
    virtual ~Handler() = default;
    // False: the hello is refused (another attempt, a rank registered twice)
    // and the connection is dropped.
    virtual bool on_hello(SessionId id, const proto::Hello& hello) = 0;
    virtual void on_message(SessionId id, const proto::RankMessage& message) = 0;
    // A registered session ended (`reason`: why, e.g. "connection closed").
    virtual void on_closed(SessionId id, const std::string& reason) = 0;
  };

  // Whether a hello's token is the one of the rank and attempt it claims
  // (JobSecret::accepts). Called on the io thread.
  using TokenCheck = std::function<bool(const proto::Hello&)>;

  ControlServer(boost::asio::io_context& io, const boost::asio::ip::address& address, TokenCheck check,
                ControlLimits limits, Handler& handler);
  ~ControlServer();
  boost::asio::ip::tcp::endpoint endpoint() const;

  // To every registered session (on the io thread).
  void broadcast(const proto::LauncherMessage& message);
  void close(SessionId id);
  void close_all();
  int connections() const { return static_cast<int>(sessions_.size()); }
  // Connections dropped for breaking the protocol so far.
  int64_t dropped() const { return dropped_; }

  class Session;

 private:
  void accept();
  int pending() const;
  void drop(SessionId id, const std::string& why, bool registered);

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  TokenCheck check_;
  ControlLimits limits_;
  Handler& handler_;
  std::map<SessionId, std::shared_ptr<Session>> sessions_;
  SessionId next_id_ = 1;
  int64_t dropped_ = 0;
  boost::asio::steady_timer retry_;
  friend class Session;
};

}  // namespace gnnrt::launch
