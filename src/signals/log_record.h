// A log record as the pipeline holds it until export (owned data: records come from any thread).
#pragma once

#include <cstdint>
#include <string>

#include "lens/context.h"
#include "lens/telemetry.h"

namespace lens::internal {

struct LogRecordData {
  std::uint64_t time_unix_nanos = 0;
  std::uint64_t observed_unix_nanos = 0;
  int severity_number = 0;  // OpenTelemetry SeverityNumber, 1..24
  std::string severity_text;
  std::string body;
  ResourceAttributes attributes;
  SpanContext span;  // the span current where the record was made (invalid when none)
};

}  // namespace lens::internal
