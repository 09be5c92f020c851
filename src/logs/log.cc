#include "lens/log.h"

#include "common/clock.h"
#include "lens/span.h"
#include "logs/log_queue.h"
#include "signals/log_record.h"

namespace lens {

namespace internal {

std::atomic<int> g_min_log_severity{kLogsOff};
std::atomic<LogQueue*> g_log_queue{nullptr};

void emit_log(int severity_number, std::string_view severity_text, std::string_view body,
              std::span<const Attribute> attributes, std::chrono::system_clock::time_point time) {
  LogQueue* queue = g_log_queue.load(std::memory_order_acquire);
  if (queue == nullptr) return;
  LogRecordData r;
  r.time_unix_nanos =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count());
  r.observed_unix_nanos = unix_nanos_now();
  r.severity_number = severity_number;
  r.severity_text = std::string(severity_text);
  r.body = std::string(body);
  for (const Attribute& a : attributes) {
    std::string key(a.key.text());
    switch (a.value.type()) {
      case ValueType::kBool: r.attributes.emplace_back(key, a.value.as_bool()); break;
      case ValueType::kInt: r.attributes.emplace_back(key, a.value.as_int()); break;
      case ValueType::kDouble: r.attributes.emplace_back(key, a.value.as_double()); break;
      case ValueType::kString: r.attributes.emplace_back(key, std::string(a.value.as_string())); break;
      default: break;
    }
  }
  r.span = current_context();
  queue->emit(std::move(r));
}

}  // namespace internal

std::string_view severity_text(Severity severity) noexcept {
  switch (severity) {
    case Severity::kTrace: return "TRACE";
    case Severity::kDebug: return "DEBUG";
    case Severity::kInfo: return "INFO";
    case Severity::kWarn: return "WARN";
    case Severity::kError: return "ERROR";
    case Severity::kFatal: return "FATAL";
  }
  return "";
}

}  // namespace lens
