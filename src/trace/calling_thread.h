// The calling thread's state in the current span drain: one thread-local pointer, read with one load on the span
// path, attached on a thread's first span and marked for the export thread to free when the thread ends.
//
//   ThreadState* t = state_for(drain);  // null: the drain has no room for another thread
#pragma once

#include <atomic>

#include "common/dcheck.h"
#include "lens/internal/visibility.h"
#include "trace/span_drain.h"
#include "trace/thread_state.h"

namespace lens::internal {

// The calling thread's state, in whichever drain made it (null before its first span). `__thread`, not thread_local:
// a pointer needs no constructor, so reading it from another file is one load, not a call to a TLS wrapper.
extern __thread ThreadState* t_state __attribute__((tls_model("initial-exec")));

// Makes the calling thread a state in drain `p` and remembers it (null: no room); out of line, once per thread.
ThreadState* attach_state(SpanDrain* p) noexcept;

// The calling thread's state in drain `p`.
LENS_ALWAYS_INLINE ThreadState* state_for(SpanDrain* p) noexcept {
  ThreadState* t = t_state;
  if (__builtin_expect(t != nullptr && t->drain == p, 1)) return t;
  return attach_state(p);
}

// The current drain's state for this thread, or null.
LENS_ALWAYS_INLINE ThreadState* current_state() noexcept {
  SpanDrain* p = g_span_drain.load(std::memory_order_acquire);
  return p ? state_for(p) : nullptr;
}

}  // namespace lens::internal
