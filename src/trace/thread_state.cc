#include "trace/thread_state.h"

#include <sys/random.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <thread>

namespace lens::internal {

namespace {
std::uint64_t splitmix(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

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
    : drain(owner), tid(::gettid()), slots(new OpenSpan[kMaxOpenSpans]), queue(batch_size, budget) {
  for (int i = 0; i < kMaxOpenSpans; ++i) {
    slots[i].owner = this;
    slots[i].owner_slot_index = static_cast<std::uint8_t>(i);
  }
}

}  // namespace lens::internal
