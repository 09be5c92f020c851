// The span clock: a cheap monotonic tick on the hot path (the TSC where it is constant and non-stop, else
// steady_clock nanoseconds), turned into Unix nanoseconds on the export thread.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace lens::internal {

// Set once, before any span is recorded (Clock::init); read on the hot path.
extern bool g_clock_uses_tsc;

inline std::uint64_t steady_nanos() noexcept {
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

inline std::uint64_t now_ticks() noexcept {
#if defined(__x86_64__)
  if (__builtin_expect(g_clock_uses_tsc, 1)) return __rdtsc();
#endif
  return steady_nanos();
}

// True where now_ticks() is one instruction that calls nothing (the TSC). A hot path that must make no call (a call
// costs it the values kept across the call, saved and spilled) reads the clock only when this holds, and takes its
// path that may call otherwise.
inline bool now_ticks_is_inline() noexcept {
#if defined(__x86_64__)
  return g_clock_uses_tsc;
#else
  return false;
#endif
}

// Wall-clock time now, in Unix nanoseconds (log records, metric points).
inline std::uint64_t unix_nanos_now() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

// Decides the tick source (once per process): the TSC when /proc/cpuinfo says it is constant and non-stop.
void init_clock() noexcept;

// Ticks to Unix nanoseconds, anchored when the pipeline starts: unix = unix0 + (tick - tick0) * rate, the rate
// measured against steady_clock over the whole time since the anchor, so it gets more exact as the run goes on
// and spans converted in one batch share one map.
class TimeMap {
 public:
  TimeMap() noexcept;       // anchors now
  void refresh() noexcept;  // re-measures the rate (export thread, once per batch)
  // Inline: the exporter converts two to four timestamps per span.
  std::uint64_t to_unix_nanos(std::uint64_t tick) const noexcept {
    double delta = static_cast<double>(static_cast<std::int64_t>(tick - tick0_)) * nanos_per_tick_;
    return unix0_ + static_cast<std::uint64_t>(static_cast<std::int64_t>(delta));
  }

 private:
  std::uint64_t tick0_, steady0_, unix0_;
  double nanos_per_tick_ = 1.0;
};

}  // namespace lens::internal
