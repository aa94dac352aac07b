// A rank's control client against a stand-in launcher (a TCP server that
// accepts and reads everything): its destructor must end in time however
// its heartbeat timer and the close race.
#include <gtest/gtest.h>

#include <utility>  // before Asio: Boost 1.74 uses std::exchange without it

#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "launch/control_client.h"

namespace gnnrt::launch {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// Accepts every connection on 127.0.0.1 and reads until the peer closes.
class SinkServer {
 public:
  SinkServer() : acceptor_(io_, tcp::endpoint(asio::ip::address_v4::loopback(), 0)) {
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~SinkServer() {
    io_.stop();
    thread_.join();
  }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }

 private:
  struct Connection {
    explicit Connection(asio::io_context& io) : socket(io) {}
    tcp::socket socket;
    std::array<char, 4096> buffer{};
  };
  void accept() {
    auto c = std::make_shared<Connection>(io_);
    acceptor_.async_accept(c->socket, [this, c](boost::system::error_code ec) {
      if (ec) return;
      read(c);
      accept();
    });
  }
  static void read(const std::shared_ptr<Connection>& c) {
    c->socket.async_read_some(asio::buffer(c->buffer), [c](boost::system::error_code ec, size_t) {
      if (!ec) read(c);
    });
  }
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
};

// The heartbeat's timer fires every 0.1 ms, so that in some of the runs
// its completion is queued ahead of the destructor's close. Before the
// fix, such a beat armed the timer again and the destructor's join waited
// forever (a rank that lingered after Done until the launcher killed it,
// about one restarted 4-rank job in a hundred under the sanitizers).
TEST(ControlClient, DestructorEndsWhileHeartbeatsFire) {
  SinkServer server;
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  ASSERT_EQ(setenv("GNNRT_LAUNCH_ADDR", address.c_str(), 1), 0);
  ASSERT_EQ(setenv("GNNRT_LAUNCH_TOKEN", "test", 1), 0);
  ASSERT_EQ(setenv("GNNRT_LAUNCH_HEARTBEAT", "0.0001", 1), 0);
  unsetenv("GNNRT_FAULT");
  constexpr int kClients = 300;
  for (int i = 0; i < kClients; ++i) {
    auto client = ControlClient::from_environment(0, 1);
    ASSERT_NE(client, nullptr);
    std::this_thread::sleep_for(std::chrono::microseconds(50 * (i % 7)));
    auto ended = std::async(std::launch::async, [c = std::move(client)]() mutable { c.reset(); });
    if (ended.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      // The client's thread cannot be joined: report and leave at once.
      std::fprintf(stderr, "client %d of %d: ~ControlClient did not end within 10 s\n", i + 1, kClients);
      std::_Exit(1);
    }
  }
  unsetenv("GNNRT_LAUNCH_ADDR");
  unsetenv("GNNRT_LAUNCH_TOKEN");
  unsetenv("GNNRT_LAUNCH_HEARTBEAT");
}

}  // namespace
}  // namespace gnnrt::launch
