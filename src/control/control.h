// The control endpoint behind lens/control.h: rank 0's HTTP server (common/http_server.h) that takes span-group
// change requests from `lens ctl`, and the process-wide state the two public calls share with it.
//
//   GET  /status                          {"span_groups": "...", "iteration": N, "world_size": W, "pending": bool}
//   POST /span-groups?spec=SPEC[&for=N]   202 accepted (applied at a coming iteration boundary); 400 a bad spec (the
//                                         same message as at setup) or a bad `for`; 409 a change already pending
// Every request carries `Authorization: Bearer <token>` (401 otherwise); the token and port are in
// `<file_dir>/<run id>/control.json` (mode 0600), removed when the endpoint stops.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/http_server.h"
#include "lens/config.h"

namespace lens::internal {

class ControlEndpoint {
 public:
  // Binds config.control_address, writes control.json under `run_dir` (made if missing). Throws ConfigError when
  // it cannot.
  ControlEndpoint(const Config& config, const std::string& run_dir, int world_size);
  ~ControlEndpoint();
  ControlEndpoint(const ControlEndpoint&) = delete;
  ControlEndpoint& operator=(const ControlEndpoint&) = delete;

  int port() const noexcept { return server_->port(); }
  const std::string& token() const noexcept { return token_; }
  const std::string& file() const noexcept { return file_; }

 private:
  std::string token_, file_;
  std::unique_ptr<HttpServer> server_;
};

// Forgets any request and change state (a new setup, or a forked child).
void reset_control_state() noexcept;
// The catalogue changes are described with (every rank, at setup).
void set_control_catalogue(const Catalogue& catalogue);

// For tests: called on the endpoint's thread while a request's spec is being resolved (empty: none). A test blocks
// in it to show that resolution holds no lock an iteration boundary takes.
void set_spec_resolution_hook_for_testing(std::function<void()> hook);

}  // namespace lens::internal
