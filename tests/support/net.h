// Loopback ports for test servers: a free one, and whether one accepts connections.
//
// A free port is drawn below the kernel's ephemeral range (the source ports of outgoing connections, 32768-60999 by
// default) and checked unbound: a port the kernel hands out for a bind to 0 it may hand out again as some
// connection's source port before the server binds it, which then fails on "address already in use".
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <stdexcept>

namespace lens::testing {

// Whether nothing is bound to the loopback port.
inline bool port_is_free(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return free;
}

inline int free_port() {
  int ephemeral_low = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (int low = 0; range >> low && low > 10001) ephemeral_low = low;
  static thread_local std::mt19937 draw{std::random_device{}()};
  std::uniform_int_distribution<int> port_of(10000, ephemeral_low - 1);
  for (int attempt = 0; attempt < 1000; ++attempt)
    if (const int port = port_of(draw); port_is_free(port)) return port;
  throw std::runtime_error("no free loopback port below the ephemeral range");
}

// Whether something listens on the loopback port.
inline bool port_accepts(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

}  // namespace lens::testing
