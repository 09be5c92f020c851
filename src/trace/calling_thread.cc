#include "trace/calling_thread.h"

#include <pthread.h>

namespace lens::internal {

__thread ThreadState* t_state __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {

// A thread's end marks its state, for the export thread to free once drained (a pthread key runs for every
// thread, however it was made, and after the thread's C++ thread_local destructors, which may still end spans).
pthread_key_t g_thread_exit_key;
pthread_once_t g_thread_exit_once = PTHREAD_ONCE_INIT;

void on_thread_exit(void* state) noexcept {
  auto* t = static_cast<ThreadState*>(state);
  if (t_state == t) t_state = nullptr;  // a span from a later destructor gets a fresh state
  SpanDrain* p = t->drain;              // read first: once `exited` is set, the export thread may free the state
  t->exited.store(true, std::memory_order_release);
  // Freed at the export thread's next pass: now, not after the schedule delay, or a program that starts many
  // short-lived threads would hold their states (about 190 KiB each) for seconds. (A drain is never freed.)
  if (!p->stopped()) p->wake_exporter();
}

void make_thread_exit_key() noexcept { pthread_key_create(&g_thread_exit_key, on_thread_exit); }

}  // namespace

ThreadState* attach_state(SpanDrain* p) noexcept {
  ThreadState* t = p->thread_state();
  if (t != nullptr) {
    pthread_once(&g_thread_exit_once, make_thread_exit_key);
    pthread_setspecific(g_thread_exit_key, t);
  }
  t_state = t;
  return t;
}

ThreadState* current_thread_state_if_any() noexcept { return t_state; }
void forget_thread_state() noexcept { t_state = nullptr; }

}  // namespace lens::internal
