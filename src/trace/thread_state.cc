#include "trace/thread_state.h"

#include <cxxabi.h>
#include <unistd.h>

#include <bit>
#include <cstddef>
#include <cstring>
#include <exception>

#include "common/dcheck.h"

namespace lens::internal {

namespace {
// The layout the Itanium C++ ABI gives __cxa_eh_globals (its exception handling chapter, 2.2.2): the caught exceptions'
// stack, then the count of uncaught ones, which std::uncaught_exceptions() returns.
struct ItaniumExceptionGlobals {
  void* caught_exceptions;
  unsigned int uncaught_exceptions;
};

}  // namespace

const unsigned int* uncaught_exceptions_of_this_thread() noexcept {
  const auto* globals = reinterpret_cast<const std::byte*>(abi::__cxa_get_globals());
  const auto* count =
      reinterpret_cast<const unsigned int*>(globals + offsetof(ItaniumExceptionGlobals, uncaught_exceptions));
  LENS_DCHECK(*count == static_cast<unsigned int>(std::uncaught_exceptions()));  // the runtime keeps the ABI's layout
  return count;
}

ThreadState::ThreadState(SpanDrain* owner, std::uint64_t batch_size, QueueBudget& budget)
    : drain(owner),
      tid(::gettid()),
      slots(new OpenSpan[kMaxOpenSpans]),
      uncaught_exceptions(uncaught_exceptions_of_this_thread()),
      queue(batch_size, budget) {
  for (int i = 0; i < kMaxOpenSpans; ++i) {
    slots[i].owner = this;
    slots[i].owner_slot_index = static_cast<std::uint8_t>(i);
  }
}

}  // namespace lens::internal
