#include "common/log.h"

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <mutex>

namespace lens::internal {

namespace {

void write_line(const char* level, const char* format, va_list args, unsigned long suppressed) {
  char text[1024];
  std::vsnprintf(text, sizeof text, format, args);
  if (suppressed > 0)
    std::fprintf(stderr, "lens: %s%s (%lu similar messages suppressed)\n", level, text, suppressed);
  else
    std::fprintf(stderr, "lens: %s%s\n", level, text);
}

struct RateLimit {
  std::chrono::steady_clock::time_point last{};
  unsigned long suppressed = 0;
};

}  // namespace

void log_info(const char* format, ...) {
  va_list args;
  va_start(args, format);
  write_line("", format, args, 0);
  va_end(args);
}

namespace {

void warn(const void* source, const char* format, va_list args) {
  static std::mutex* mutex = new std::mutex;  // guards limits
  static auto* limits = new std::map<std::pair<const char*, const void*>, RateLimit>;
  unsigned long suppressed;
  {
    std::lock_guard lock(*mutex);
    RateLimit& r = (*limits)[{format, source}];
    auto now = std::chrono::steady_clock::now();
    if (r.last != std::chrono::steady_clock::time_point{} && now - r.last < std::chrono::seconds(10)) {
      ++r.suppressed;
      return;
    }
    r.last = now;
    suppressed = r.suppressed;
    r.suppressed = 0;
  }
  write_line("warning: ", format, args, suppressed);
}

}  // namespace

void log_warning(const char* format, ...) {
  va_list args;
  va_start(args, format);
  warn(nullptr, format, args);
  va_end(args);
}

void log_setup_warning(const char* format, ...) {
  va_list args;
  va_start(args, format);
  write_line("warning: ", format, args, 0);
  va_end(args);
}

void log_warning_from(const void* source, const char* format, ...) {
  va_list args;
  va_start(args, format);
  warn(source, format, args);
  va_end(args);
}

}  // namespace lens::internal
