#include "trace/scope_record.h"

#include <sys/random.h>

#include <chrono>

namespace lens::internal {

SpanIds::SpanIds() noexcept {
  if (getrandom(seeds_, sizeof seeds_, 0) != static_cast<ssize_t>(sizeof seeds_)) {
    // No entropy source: the clock and this generator's address, still independent of any seeding by the user.
    std::uint64_t x = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                      reinterpret_cast<std::uintptr_t>(this);
    for (std::uint64_t& seed : seeds_) {
      x += 0x9E3779B97F4A7C15ull;
      seed = (x ^ (x >> 31)) * 0xBF58476D1CE4E5B9ull;
    }
  }
  seeds_[2] |= 1;  // a root's trace id's left half: never 0, so the id never is
}

}  // namespace lens::internal
