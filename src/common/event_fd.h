// A wake-up one thread sends another through an eventfd: usable from a signal handler (write, read and poll are
// async-signal-safe), and waitable with a timeout. The pipeline's export thread sleeps on one; producers, flushes,
// shutdowns and the SIGTERM handler write it.
#pragma once

#include <atomic>

namespace lens::internal {

class EventFd {
 public:
  EventFd() noexcept;
  ~EventFd();
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;

  void signal() noexcept;
  void clear() noexcept;
  // True when signalled before `timeout_ms` passed (0: just looks).
  bool wait(int timeout_ms) noexcept;
  bool wait_micros(long timeout_us) noexcept;

 private:
  int fd_ = -1;
};

// An EventFd that many producers may ring on every batch: only the first ring after the sleeper woke writes the
// fd, so a busy producer pays one exchange, not a system call.
class WakeUp {
 public:
  // Producers. An exchange, not a load first: the sleeper clears the flag with an exchange before it looks at
  // the work, so either it sees this producer's work or this producer sees the flag cleared and writes the fd.
  void ring() noexcept {
    if (!pending_.exchange(true, std::memory_order_acq_rel)) fd_.signal();
  }
  // Flush, shutdown, signals: always written.
  void ring_now() noexcept { fd_.signal(); }
  // The sleeper: waits up to `timeout_ms`, then re-arms (pairs with ring()); the caller looks at the work after it.
  // Returns at once, re-armed, when a ring was left unanswered since the last re-arm (after pause(), whose rings
  // found the flag set and wrote nothing): the caller looks again before it can sleep.
  void sleep(int timeout_ms) noexcept {
    if (pending_.load(std::memory_order_acquire)) {
      pending_.exchange(false, std::memory_order_acq_rel);
      fd_.clear();
      return;
    }
    fd_.wait(timeout_ms);
    fd_.clear();
    pending_.exchange(false, std::memory_order_acq_rel);
  }
  // The sleeper while producers keep it busy: a short wait, woken early only by ring_now(), and not re-armed, so
  // the producers' rings stay a flag they find set: a training thread makes no system call per batch, and the
  // sleeper wakes a few thousand times a second at most, draining everything queued each time.
  void pause(long timeout_us) noexcept {
    fd_.wait_micros(timeout_us);
    fd_.clear();
  }

 private:
  EventFd fd_;
  alignas(64) std::atomic<bool> pending_{false};
};

}  // namespace lens::internal
