// What an exporting process does on its way out: flush at exit and on SIGTERM (then the previous handler, or
// the default action), and after fork, a child with telemetry off until it sets up again.
#include <pthread.h>
#include <signal.h>

#include <cstdlib>
#include <mutex>

#include "telemetry/setup_internal.h"
#include "telemetry/state.h"

namespace lens::internal {

namespace {

struct sigaction g_previous_sigterm;

void on_sigterm(int signal, siginfo_t* info, void* context) {
  // Only async-signal-safe work here: the background thread truncates this thread's open spans (it is parked
  // here) and exports, and this handler waits for it, at most the shutdown timeout.
  if (Pipeline* p = g_export_pipeline.exchange(nullptr)) {
    g_pipeline.store(nullptr, std::memory_order_relaxed);
    g_enabled_group_bits.store(0, std::memory_order_relaxed);
    p->shutdown_from_signal(current_thread_state_if_any(), static_cast<int>(kDefaultShutdownTimeout.count()));
  }
  const struct sigaction& previous = g_previous_sigterm;
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != nullptr) previous.sa_sigaction(signal, info, context);
  } else if (previous.sa_handler == SIG_DFL) {
    // The default action: terminate. The signal is blocked while this handler runs, so it is delivered (with
    // the default action now) as soon as the handler returns.
    ::signal(signal, SIG_DFL);
    ::raise(signal);
  } else if (previous.sa_handler != SIG_IGN) {
    previous.sa_handler(signal);
  }
}

void on_fork_child() {
  forget_live_setup_after_fork();
  forget_thread_state();  // the child's next span gets a fresh thread state, with freshly seeded ids
}

void at_exit() { shutdown_live_setup(); }

}  // namespace

void install_process_hooks() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::atexit(at_exit);
    pthread_atfork(nullptr, nullptr, on_fork_child);
    struct sigaction action = {};
    action.sa_sigaction = on_sigterm;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &g_previous_sigterm);
  });
}

}  // namespace lens::internal
