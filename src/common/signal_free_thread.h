// A background thread that takes no signals, started without touching the caller's signal mask for good.
//
// A signal a process handles (SIGTERM's flush, the hang signal) runs on whichever thread the kernel picks among
// those that do not block it; lens's own threads must never be that thread (a SIGTERM handled on the export thread
// would wait for itself). A thread inherits its mask at creation, so the caller blocks every signal around the
// start and restores its own mask after, also when the start fails, so a failed start never leaves a training
// thread deaf to SIGTERM. A start the system refuses (the process is at its limit on threads, or its limit on
// address space leaves no room for a stack) is a lens::ConfigError that names the thread: setup's one exception.
//
// The thread carries a short system name (`top -H`, `ps -L`, gdb and py-spy show it), so that a person looking at a
// training process sees which threads are lens's.
//
//   thread_ = lens::internal::start_signal_free_thread("the export thread", "lens-export", [this] { run(); });
#pragma once

#include <pthread.h>
#include <signal.h>

#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "lens/config_error.h"

namespace lens::internal {

// `system_name`: at most 15 characters (the kernel's limit); a longer one is left unset, never cut.
template <typename Body>
std::thread start_signal_free_thread(const char* thread_name, const char* system_name, Body&& body) {
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  struct RestoreMask {
    const sigset_t& mask;
    ~RestoreMask() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{previous};
  try {
    // The thread names itself before its body runs, so whatever the body does (or reads of itself) sees the name.
    // ERANGE for a long name: the thread runs unnamed, which changes nothing else.
    return std::thread([system_name, run = std::forward<Body>(body)]() mutable {
      static_cast<void>(pthread_setname_np(pthread_self(), system_name));
      run();
    });
  } catch (const std::system_error& e) {
    throw ConfigError(std::string("lens: cannot start ") + thread_name + ": " + e.what() +
                      " (the process may start no more threads: see its limits on processes and on address space, "
                      "ulimit -u and -v)");
  }
}

}  // namespace lens::internal
