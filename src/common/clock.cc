#include "common/clock.h"

#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

namespace lens::internal {

bool g_clock_uses_tsc = false;

namespace {
bool tsc_is_reliable() {
#if defined(__x86_64__)
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0)
      return line.find(" constant_tsc") != std::string::npos && line.find(" nonstop_tsc") != std::string::npos;
  }
#endif
  return false;
}
}  // namespace

void init_clock() noexcept {
  static std::once_flag once;
  std::call_once(once, [] { g_clock_uses_tsc = tsc_is_reliable(); });
}

TimeMap::TimeMap() noexcept {
  tick0_ = now_ticks();
  steady0_ = steady_nanos();
  unix0_ = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  if (g_clock_uses_tsc) {
    // A first estimate of the rate over 2 ms; refresh() makes it exact as the run goes on.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    refresh();
  }
}

void TimeMap::refresh() noexcept {
  if (!g_clock_uses_tsc) return;  // ticks are steady nanoseconds already
  std::uint64_t ticks = now_ticks() - tick0_;
  std::uint64_t nanos = steady_nanos() - steady0_;
  if (ticks > 0) nanos_per_tick_ = static_cast<double>(nanos) / static_cast<double>(ticks);
}

}  // namespace lens::internal
