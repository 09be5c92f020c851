#include "common/event_fd.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace lens::internal {

EventFd::EventFd() noexcept : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

EventFd::~EventFd() {
  if (fd_ >= 0) ::close(fd_);
}

void EventFd::signal() noexcept {
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof one);
}

void EventFd::clear() noexcept {
  std::uint64_t value;
  [[maybe_unused]] ssize_t n = ::read(fd_, &value, sizeof value);
}

bool EventFd::wait(int timeout_ms) noexcept {
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) > 0;
}

bool EventFd::wait_micros(long timeout_us) noexcept {
  pollfd p{fd_, POLLIN, 0};
  const timespec timeout{timeout_us / 1000000, (timeout_us % 1000000) * 1000};
  return ::ppoll(&p, 1, &timeout, nullptr) > 0;
}

}  // namespace lens::internal
