// lens/log.h: log records exported as OpenTelemetry log records (CONTRACT §8).
//
// With LOGS_ENABLED=1 on an exporting rank, each record carries the current span's trace and span ids, is
// queued (bounded by OTEL_BLRP_MAX_QUEUE_SIZE; a full queue drops and counts) and exported in batches by the
// background thread (rank<R>.logs.jsonl with the file exporter). Elsewhere lens::should_log() is false and
// lens::log() returns at once. <lens/spdlog_sink.h> routes spdlog through it.
//
//   if (lens::should_log(lens::Severity::kInfo))
//     lens::log(lens::Severity::kInfo, "checkpoint saved", {{"megatron.iteration", it}});
#pragma once

#include <atomic>
#include <chrono>
#include <initializer_list>
#include <span>
#include <string_view>

#include "lens/attributes.h"
#include "lens/config.h"
#include "lens/internal/visibility.h"

namespace lens {

#if !defined(LENS_DISABLED)
namespace internal {
// The lowest severity number logged now; kLogsOff (above every severity) when logs are off.
inline constexpr int kLogsOff = 1 << 30;
extern LENS_API std::atomic<int> g_min_log_severity;
LENS_API void emit_log(int severity_number, std::string_view severity_text, std::string_view body,
                       std::span<const Attribute> attributes, std::chrono::system_clock::time_point time);
}  // namespace internal

// The cheap check before building a message: one relaxed load and a compare. True when logs are on and
// `severity` is at least Config::min_log_severity.
inline bool should_log(Severity severity) noexcept {
  return static_cast<int>(severity) >= internal::g_min_log_severity.load(std::memory_order_relaxed);
}

// "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL".
LENS_API std::string_view severity_text(Severity severity) noexcept;

inline void log(Severity severity, std::string_view body, std::initializer_list<Attribute> attributes = {},
                std::chrono::system_clock::time_point time = std::chrono::system_clock::now()) {
  if (should_log(severity))
    internal::emit_log(static_cast<int>(severity), severity_text(severity), body, internal::as_span(attributes), time);
}
#else  // LENS_DISABLED
namespace internal {
inline void emit_log(int, std::string_view, std::string_view, std::span<const Attribute>,
                     std::chrono::system_clock::time_point) {}
}  // namespace internal
constexpr bool should_log(Severity) noexcept { return false; }
inline std::string_view severity_text(Severity) noexcept { return {}; }
inline void log(Severity, std::string_view, std::initializer_list<Attribute> = {},
                std::chrono::system_clock::time_point = {}) {}
#endif

}  // namespace lens
