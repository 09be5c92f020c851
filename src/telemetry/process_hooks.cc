// What a process with a pipeline does on its way out: shut down at exit; on SIGTERM, flush and hand the signal to the
// application's handler (which goes on: its last spans are kept), or shut down and take the default action; and
// after fork, a child with telemetry off until it sets up again.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "groups/switch.h"
#include "telemetry/setup_internal.h"
#include "telemetry/state.h"

namespace lens::internal {

namespace {

struct sigaction g_previous_sigterm;

// True when the previous disposition is the application's own handler: it takes the signal and goes on (Megatron
// saves a last checkpoint, then exits), so telemetry must keep recording until the process ends.
bool application_handles(const struct sigaction& previous) {
  if (previous.sa_flags & SA_SIGINFO) return previous.sa_sigaction != nullptr;
  return previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN;
}

void on_sigterm(int signal, siginfo_t* info, void* context) {
  // Only async-signal-safe work here (atomics, eventfds, poll), and at most the shutdown timeout of waiting.
  const struct sigaction& previous = g_previous_sigterm;
  if (application_handles(previous) || previous.sa_handler == SIG_IGN) {
    // The process goes on: export what is queued now (a SIGKILL may follow), keep the pipeline for what comes
    // (the last checkpoint's spans), and let the exit shut it down.
    if (Pipeline* p = g_pipeline.load()) p->flush_from_signal(static_cast<int>(kDefaultShutdownTimeout.count()));
    if (previous.sa_flags & SA_SIGINFO)
      previous.sa_sigaction(signal, info, context);
    else if (previous.sa_handler != SIG_IGN)
      previous.sa_handler(signal);
    return;
  }
  // The default action, termination: the background thread truncates this thread's open spans (it is parked
  // here) and exports, then the signal is delivered again with the default action (it is blocked while this
  // handler runs, so that happens as soon as the handler returns).
  if (Pipeline* p = g_pipeline.exchange(nullptr)) {
    g_span_drain.store(nullptr, std::memory_order_relaxed);
    clear_span_groups();
    p->shutdown_from_signal(current_thread_state_if_any(), static_cast<int>(kDefaultShutdownTimeout.count()));
  }
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

struct sigaction g_previous_hang[NSIG];

void on_hang_signal(int signal, siginfo_t* info, void* context) {
  // Async-signal-safe: an atomic and an eventfd; the snapshot is written by the pipeline's thread.
  if (Pipeline* p = g_pipeline.load()) p->request_hang_snapshot();
  const struct sigaction& previous = g_previous_hang[signal];
  if (!application_handles(previous)) return;  // SIGUSR1's default action would end the process: not chained
  if (previous.sa_flags & SA_SIGINFO)
    previous.sa_sigaction(signal, info, context);
  else
    previous.sa_handler(signal);
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

void install_hang_signal(int signal) {
  static std::mutex mutex;
  static bool installed[NSIG] = {};
  if (signal <= 0 || signal >= NSIG) return;
  std::lock_guard lock(mutex);
  if (installed[signal]) return;
  installed[signal] = true;
  struct sigaction action = {};
  action.sa_sigaction = on_hang_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, &g_previous_hang[signal]);
}

}  // namespace lens::internal
