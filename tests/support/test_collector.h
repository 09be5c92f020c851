// A collector of the tests' own for fault injection: cpp-httplib on loopback, answering each request as the test
// says and keeping what it received. Bounded: answers close their connection (stopping never waits on an idle
// one) and the server stops when the object goes. A fixed port lets a test stop a collector and bring it back;
// define CPPHTTPLIB_OPENSSL_SUPPORT before including this for HTTPS.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lens::testing {

class TestCollector {
 public:
  using Respond = std::function<void(const httplib::Request&, httplib::Response&, int attempt)>;

  // port 0: any free port.
  explicit TestCollector(Respond respond, int port = 0)
      : TestCollector(std::make_unique<httplib::Server>(), respond, port) {}
#if defined(CPPHTTPLIB_OPENSSL_SUPPORT)
  TestCollector(Respond respond, const std::string& cert, const std::string& key)
      : TestCollector(std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str()), respond, 0) {}
#endif
  ~TestCollector() {
    server_->stop();
    thread_.join();
  }
  int port() const { return port_; }
  int requests() const { return requests_.load(); }
  std::vector<httplib::Request> received() {
    std::lock_guard lock(mutex_);
    return received_;
  }

 private:
  TestCollector(std::unique_ptr<httplib::Server> server, Respond respond, int port)
      : respond_(std::move(respond)), server_(std::move(server)) {
    server_->Post(".*", [this](const httplib::Request& request, httplib::Response& response) {
      int attempt = ++requests_;
      {
        std::lock_guard lock(mutex_);
        received_.push_back(request);
      }
      respond_(request, response, attempt);
    });
    server_->set_keep_alive_max_count(1);
    if (port == 0) {
      port_ = server_->bind_to_any_port("127.0.0.1");
    } else {
      for (int i = 0; i < 100 && !server_->bind_to_port("127.0.0.1", port); ++i)  // the old one may linger
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      port_ = port;
    }
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  Respond respond_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> requests_{0};
  std::mutex mutex_;
  std::vector<httplib::Request> received_;
};

}  // namespace lens::testing
