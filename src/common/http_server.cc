#include "common/http_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace lens::internal {
namespace {

int listen_socket(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

int bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  return 0;
}

// Answered on the first call, when the headers are in: a body is never read.
MHD_Result answer(void* self, MHD_Connection* connection, const char* url, const char* method, const char*, const char*,
                  std::size_t*, void**) {
  try {
    const HttpResponse r = (*static_cast<HttpServer::Handler*>(self))(HttpRequest(connection, method, url));
    MHD_Response* response =
        MHD_create_response_from_buffer(r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
    if (response == nullptr) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, r.type.c_str());
    if (r.status != MHD_HTTP_OK) MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    const MHD_Result queued = MHD_queue_response(connection, r.status, response);
    MHD_destroy_response(response);
    return queued;
  } catch (...) {
    return MHD_NO;  // no memory for the answer: the connection is closed, the rank goes on
  }
}

}  // namespace

const char* HttpRequest::header(const char* name) const {
  return MHD_lookup_connection_value(connection_, MHD_HEADER_KIND, name);
}

const char* HttpRequest::query(const char* name) const {
  return MHD_lookup_connection_value(connection_, MHD_GET_ARGUMENT_KIND, name);
}

bool HttpRequest::has_body() const {
  const char* length = header(MHD_HTTP_HEADER_CONTENT_LENGTH);
  return (length != nullptr && std::string_view(length) != "0") || header(MHD_HTTP_HEADER_TRANSFER_ENCODING) != nullptr;
}

HttpServer::HttpServer(const std::string& host, int port, Handler handler) : handler_(std::move(handler)) {
  const int fd = listen_socket(host, port);
  if (fd < 0) throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port));
  port_ = bound_port(fd);
  daemon_ =
      MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD, 0, nullptr, nullptr, &answer, &handler_, MHD_OPTION_LISTEN_SOCKET,
                       fd, MHD_OPTION_CONNECTION_LIMIT, kMaxConnections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                       kMaxConnectionsPerAddress, MHD_OPTION_CONNECTION_TIMEOUT, kIdleSeconds,
                       MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemory, MHD_OPTION_END);
  if (daemon_ == nullptr) {
    ::close(fd);
    throw std::runtime_error("cannot serve HTTP on " + host + ":" + std::to_string(port));
  }
}

void HttpServer::stop() noexcept {
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
}

}  // namespace lens::internal
