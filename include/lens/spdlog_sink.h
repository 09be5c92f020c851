// lens/spdlog_sink.h: a spdlog sink that turns each message into an OpenTelemetry log record (lens/log.h),
// with the current span's trace and span ids. Header-only; the consumer links spdlog itself.
//
//   auto logger = std::make_shared<spdlog::logger>("trainer", std::make_shared<lens::SpdlogSink>());
//   logger->info("step {} done", it);    // exported when LOGS_ENABLED=1 on an exporting rank
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <mutex>
#include <string_view>

#include "lens/log.h"

namespace lens {

template <typename Mutex>
class SpdlogSinkT final : public spdlog::sinks::base_sink<Mutex> {
 public:
  static Severity severity_of(spdlog::level::level_enum level) noexcept {
    switch (level) {
      case spdlog::level::trace: return Severity::kTrace;
      case spdlog::level::debug: return Severity::kDebug;
      case spdlog::level::info: return Severity::kInfo;
      case spdlog::level::warn: return Severity::kWarn;
      case spdlog::level::err: return Severity::kError;
      default: return Severity::kFatal;  // critical
    }
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    Severity severity = severity_of(msg.level);
    if (!should_log(severity)) return;
    std::string_view body(msg.payload.data(), msg.payload.size());
    std::string_view logger(msg.logger_name.data(), msg.logger_name.size());
    const Attribute attributes[] = {{"logger.name", logger}};
    internal::emit_log(static_cast<int>(severity), severity_text(severity), body, attributes, msg.time);
  }
  void flush_() override {}
};

using SpdlogSink = SpdlogSinkT<std::mutex>;

}  // namespace lens
