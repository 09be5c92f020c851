// LENS_DCHECK(condition): an invariant of lens's own code, stated in the code where it holds rather than in a
// comment beside it (as Perfetto's and Chromium's DCHECKs are). On in Debug builds (NDEBUG unset) and in every
// sanitizer build (LENS_ENABLE_DCHECKS, which CMake's LENS_SANITIZE sets), where a false one writes the file, line
// and condition to stderr and aborts, so the sanitizer CI runs exercise every invariant. In release builds the
// condition is not evaluated, side effects included: it costs nothing on the span path.
//
//   LENS_DCHECK(write_at_ + size <= tail_capacity_);  // a record never crosses its chunk's end
//
// Not for input from outside (a file, an environment variable, a peer's answer): those get a clear error or a
// counted drop, in every build.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#if !defined(NDEBUG) || defined(LENS_ENABLE_DCHECKS)
#define LENS_DCHECK_IS_ON 1
#else
#define LENS_DCHECK_IS_ON 0
#endif

namespace lens::internal {

// Async-signal-safe (write(2) and abort): an invariant may fail on the SIGTERM handler's path.
[[noreturn]] inline void dcheck_failed(const char* condition, const char* file, int line) noexcept {
  char number[12];
  int at = sizeof number;
  number[--at] = '\0';
  for (unsigned n = line > 0 ? static_cast<unsigned>(line) : 0; at > 0;) {
    number[--at] = static_cast<char>('0' + n % 10);
    n /= 10;
    if (n == 0) break;
  }
  const char* const parts[] = {"lens: LENS_DCHECK failed at ", file, ":", number + at, ": ", condition, "\n"};
  for (const char* part : parts) {
    [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, part, std::strlen(part));
  }
  std::abort();
}

}  // namespace lens::internal

#if LENS_DCHECK_IS_ON
#define LENS_DCHECK(condition) \
  ((condition) ? static_cast<void>(0) : ::lens::internal::dcheck_failed(#condition, __FILE__, __LINE__))
#else
// Compiled (so a DCHECK cannot rot) but never evaluated: `false &&` stops it, and the optimizer drops it.
#define LENS_DCHECK(condition) static_cast<void>(false && static_cast<bool>(condition))
#endif
