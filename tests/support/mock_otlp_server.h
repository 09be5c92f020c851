// @elastic/mockotlpserver (npm, pinned in tests/peers) as a child process: a real OTLP receiver on 127.0.0.1:4317
// (gRPC) and 4318 (HTTP) that prints each request it decoded as one JSON line to `output` (/dev/null to discard).
// Its ports are fixed: whatever uses it runs alone (ctest RESOURCE_LOCK mockotlpserver). Needs LENS_PEERS_DIR.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <thread>

#include "support/net.h"

extern char** environ;

namespace lens::testing {

class MockOtlpServer {
 public:
  explicit MockOtlpServer(const std::string& output) {
    std::string cli = std::string(LENS_PEERS_DIR) + "/node_modules/@elastic/mockotlpserver/lib/cli.js";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    const char* argv[] = {"node", cli.c_str(), "--hostname", "127.0.0.1", "-o", "json", nullptr};
    if (posix_spawnp(&pid_, "node", &actions, nullptr, const_cast<char**>(argv), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~MockOtlpServer() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  MockOtlpServer(const MockOtlpServer&) = delete;
  MockOtlpServer& operator=(const MockOtlpServer&) = delete;

  // Both ports accept connections, waiting up to 20 s.
  bool ready() const {
    for (int i = 0; i < 400 && pid_ > 0; ++i) {
      if (port_accepts(4317) && port_accepts(4318)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace lens::testing
