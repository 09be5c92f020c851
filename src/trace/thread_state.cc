#include "trace/thread_state.h"

#include <cxxabi.h>
#include <sys/random.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <thread>

#include "common/dcheck.h"

namespace lens::internal {

namespace {
std::uint64_t splitmix(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
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

IdGenerator::IdGenerator() noexcept {
  std::uint64_t seed[4] = {};
  if (getrandom(seed, sizeof seed, 0) != static_cast<ssize_t>(sizeof seed)) {
    // No entropy source: fall back to time, address and thread id, still independent of user seeding.
    std::uint64_t x = static_cast<std::uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count()) ^
                      reinterpret_cast<std::uintptr_t>(this) ^ std::hash<std::thread::id>{}(std::this_thread::get_id());
    for (auto& word : seed) word = splitmix(x);
  }
  for (int i = 0; i < 4; ++i) s_[i] = seed[i] ? seed[i] : 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(i);
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
