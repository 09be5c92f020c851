// A background thread that takes no signals, started without touching the caller's signal mask for good.
//
// A signal a process handles (SIGTERM's flush, the hang signal) runs on whichever thread the kernel picks among
// those that do not block it; lens's own threads must never be that thread (a SIGTERM handled on the export thread
// would wait for itself). A thread inherits its mask at creation, so the caller blocks every signal around the
// start and restores its own mask after, also when the start throws (std::system_error: the process may start no
// more threads), so a failed start never leaves a training thread deaf to SIGTERM.
//
//   thread_ = lens::internal::start_signal_free_thread([this] { run(); });
#pragma once

#include <signal.h>

#include <thread>
#include <utility>

namespace lens::internal {

template <typename Body>
std::thread start_signal_free_thread(Body&& body) {
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  struct RestoreMask {
    const sigset_t& mask;
    ~RestoreMask() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{previous};
  return std::thread(std::forward<Body>(body));
}

}  // namespace lens::internal
