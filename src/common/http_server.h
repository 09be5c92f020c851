// A small HTTP/1.1 server for lens's endpoints in the training process (Prometheus' GET /metrics, the control
// endpoint of `lens ctl`): libmicrohttpd's one event-driven thread, bounded against whoever can reach the port. At
// most kMaxConnections at once and kMaxConnectionsPerAddress from one address (each an open file of the training
// process), a connection idle for kIdleSeconds is closed, a request's headers live in kConnectionMemory, and no
// request body is read (a request is its method, path, query and headers). Idle connections hold no thread, so
// they cannot delay a request from another address.
#pragma once

#include <functional>
#include <string>
#include <string_view>

struct MHD_Connection;
struct MHD_Daemon;

namespace lens::internal {

class HttpRequest {
 public:
  HttpRequest(MHD_Connection* connection, std::string_view request_method, std::string_view request_path)
      : connection_(connection), method(request_method), path(request_path) {}
  const char* header(const char* name) const;  // null when absent
  const char* query(const char* name) const;   // a ?name=value argument, decoded; null when absent
  bool has_body() const;                       // announced a body (which is never read)

 private:
  MHD_Connection* connection_;

 public:
  std::string_view method, path;
};

struct HttpResponse {
  unsigned status = 200;
  std::string body;
  std::string type = "text/plain; charset=utf-8";
};

class HttpServer {
 public:
  static constexpr unsigned kMaxConnections = 64;
  static constexpr unsigned kMaxConnectionsPerAddress = 16;
  static constexpr unsigned kIdleSeconds = 2;
  static constexpr std::size_t kConnectionMemory = 16 << 10;

  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Binds host:port now (port 0: a free one, see port()), with SO_REUSEADDR (restart past TIME_WAIT) and never
  // SO_REUSEPORT (a second process on the same port fails here instead of taking a share of the requests).
  // Throws std::runtime_error when it cannot. `handler` runs on the server's thread; what it throws closes the
  // connection.
  HttpServer(const std::string& host, int port, Handler handler);
  ~HttpServer() { stop(); }
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void stop() noexcept;  // closes the listening socket and every connection; idempotent
  int port() const noexcept { return port_; }

 private:
  Handler handler_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
};

}  // namespace lens::internal
